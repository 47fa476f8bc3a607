//! The admin socket (`/run/pvnet/<id>/ctl.sock`) under a client that opens connections and
//! never closes them: the daemon keeps at most 64, closing the oldest to make room, so such a
//! client cannot take every descriptor the daemon may have (its limit here is 20,000; at the
//! limit `accept` would fail and the listener poll ready for ever), and `stat` still answers;
//! and the admin socket of a daemon out of descriptors, set aside for 100 ms at a time instead
//! of polled without pause, its waiting clients served once descriptors are free again.
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

/// Sets process `pid`'s soft limit on open descriptors; returns the limits it had.
fn set_nofile(pid: i32, soft: u64, hard: u64) -> libc::rlimit {
    let new = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: both pointers are to live rlimit values for the duration of the call.
    let r = unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, &new, &mut old) };
    assert_eq!(r, 0, "prlimit: {}", std::io::Error::last_os_error());
    old
}

/// The lowest descriptor number process `pid` has free: the one its next `accept` would get.
fn lowest_free_fd(pid: i32) -> u64 {
    let used: std::collections::BTreeSet<u64> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    (0..).find(|n| !used.contains(n)).unwrap()
}

#[test]
fn an_admin_socket_that_cannot_accept_is_set_aside_and_its_clients_served_after() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root(
        "an_admin_socket_that_cannot_accept_is_set_aside_and_its_clients_served_after",
    ) {
        return;
    }
    let run = Run::up(&[]);
    let path = format!("/run/pvnet/{}/ctl.sock", run.id);
    let pid = run.info()["pid"].as_i64().expect("the daemon's pid") as i32;
    let passes = |st: &serde_json::Value| u(&st["daemon"]["loop_passes"]);
    let before = run.stat();
    assert_eq!(
        u(&before["admin"]["accept_failures"]),
        0,
        "{}",
        before["admin"]
    );
    // Out of descriptors: the daemon's next `accept` fails with EMFILE, and the connections
    // wait in the socket's backlog, which keeps it ready.
    let old = set_nofile(pid, lowest_free_fd(pid), 20_000);
    let waiting: Vec<_> = (0..3).map(|_| socket_seqpacket(&path)).collect();
    std::thread::sleep(std::time::Duration::from_secs(1));
    set_nofile(pid, old.rlim_cur, old.rlim_max);
    // The listener was set aside instead of polled: a pass of the loop per 100 ms back-off,
    // not the millions a listener that polls ready for ever gives.
    let st = stat_until(&run, "the waiting connections are taken", |st| {
        u(&st["admin"]["connections"]) >= waiting.len() as u64
    });
    let failures = u(&st["admin"]["accept_failures"]);
    assert!(failures >= 1, "{}", st["admin"]);
    assert!(failures <= 40, "one failure per back-off: {}", st["admin"]);
    let spent = passes(&st) - passes(&before);
    assert!(
        spent < 3000,
        "the daemon's loop made {spent} passes while its admin socket could not accept"
    );
    // The clients that waited are served: each one's request gets its answer.
    for (i, c) in waiting.iter().enumerate() {
        nix::unistd::write(c, b"\"Stat\"").expect("send a request");
        let mut reply = vec![0u8; 1 << 22];
        let n = nix::unistd::read(c, &mut reply).expect("read the reply");
        let reply: serde_json::Value = serde_json::from_slice(&reply[..n])
            .unwrap_or_else(|e| panic!("connection {i}'s reply: {e}"));
        assert!(reply.to_string().contains("loop_passes"), "{i}: {reply}");
    }
    drop(waiting);
    assert_asleep(&run, "after the shortage");
    ping(&run, "remote", "10.77.0.10", 2);
}
