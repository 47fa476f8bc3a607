//! The admin socket (`/run/pvnet/<id>/ctl.sock`) under a client that opens connections and
//! never closes them: the daemon keeps at most 64, closing the oldest to make room, so such a
//! client cannot take every descriptor the daemon may have (its limit here is 20,000; at the
//! limit `accept` would fail and the listener poll ready for ever), and `stat` still answers.
//! Needs root.

use crate::common::*;

#[test]
fn a_client_that_leaks_admin_connections_is_held_to_64_and_stat_still_answers() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root(
        "a_client_that_leaks_admin_connections_is_held_to_64_and_stat_still_answers",
    ) {
        return;
    }
    let run = Run::up(&[]);
    let path = format!("/run/pvnet/{}/ctl.sock", run.id);
    let leaked: Vec<_> = (0..100).map(|_| socket_seqpacket(&path)).collect();
    // The operator still gets an answer, and the daemon holds no more than its cap.
    let st = stat_until(&run, "the daemon has taken every connection", |st| {
        u(&st["admin"]["evicted"]) >= 100 + 1 - 64
    });
    assert!(u(&st["admin"]["connections"]) <= 64, "{}", st["admin"]);
    // The oldest connections were closed by the daemon: they read end of file.
    let mut b = [0u8; 16];
    let n = nix::unistd::read(&leaked[0], &mut b).expect("read the first connection");
    assert_eq!(n, 0, "the oldest connection is closed");
    assert_asleep(&run, "with 64 idle admin connections");
    drop(leaked);
    ping(&run, "remote", "10.77.0.10", 2);
}
