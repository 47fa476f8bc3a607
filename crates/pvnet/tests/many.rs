//! Many guests and a guest that dies: eight and sixteen verified streams at once, and a guest
//! killed mid-stream while another streams (its domain is reclaimed, the other stream arrives
//! intact). Needs root.

use crate::common::*;

const MIB: u64 = 1 << 20;

#[test]
fn eight_guests_each_receive_a_verified_stream_at_once() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("eight_guests_each_receive_a_verified_stream_at_once") {
        return;
    }
    every_guest_receives_a_verified_stream(8, 128 * MIB, 16384);
}

/// The most guests `up` and `bench` take: every one of the port's receive queues in use.
#[test]
fn sixteen_guests_each_receive_a_verified_stream_at_once() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("sixteen_guests_each_receive_a_verified_stream_at_once") {
        return;
    }
    every_guest_receives_a_verified_stream(16, 64 * MIB, 32768);
}

/// `n` guests, one verified stream of `bytes` into each at once, under `adaptive`; the port's
/// ring must have `ring_frames` slots.
fn every_guest_receives_a_verified_stream(n: u16, bytes: u64, ring_frames: u64) {
    let run = Run::up(&["--guests", &n.to_string(), "--lro", "adaptive"]);
    let reports: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|i| {
                let run = &run;
                s.spawn(move || {
                    let role = format!("g{i}");
                    let addr = format!("10.77.0.{}", 10 + i);
                    flow(run, ("remote", &role, &addr), 5201 + i, bytes, 120)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, r) in reports.iter().enumerate() {
        let v = r.as_ref().unwrap_or_else(|e| panic!("guest {i}: {e}"));
        assert_intact(v, bytes);
    }
    let st = run.stat();
    let vifs = st["vifs"].as_array().unwrap();
    assert_eq!(vifs.len(), usize::from(n));
    for v in vifs {
        assert_eq!(v["state"], "connected", "{v}");
        assert!(u(&v["netback"]["rx_bytes"]) >= bytes, "{v}");
    }
    // The port's ring grows with the guests it serves: 4096 slots per two, split between a
    // receive queue per guest, and every guest's stream came through its own queue: each
    // queue took at least its guest's stream in frames (1448 bytes of payload at most each).
    assert_eq!(u(&st["pnic"]["ring_frames"]), ring_frames, "{}", st["pnic"]);
    assert_eq!(u(&st["pnic"]["queues"]), u64::from(n), "{}", st["pnic"]);
    let queues = st["pnic"]["rx_queues"].as_array().unwrap();
    assert_eq!(queues.len(), usize::from(n));
    for q in queues {
        assert!(u(&q["frames"]) >= bytes / 1448, "{q}");
    }
    // The queues' leases are the port's: every stream is done, so whatever is still held
    // (frames of a last poll not yet copied) is counted once, per queue and in all.
    let held: u64 = queues.iter().map(|q| u(&q["leases"])).sum();
    assert_eq!(
        held,
        u(&st["pnic"]["rx_leases_outstanding"]),
        "{}",
        st["pnic"]
    );
}

#[test]
fn a_killed_guest_is_reclaimed_and_the_others_go_on() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("a_killed_guest_is_reclaimed_and_the_others_go_on") {
        return;
    }
    let run = Run::up(&["--guests", "2"]);
    let info = run.info();
    let victim = info["guest_pids"][1].as_i64().expect("guest 1's pid") as i32;
    let bytes = 1024 * MIB;
    // The stream towards the guest that dies runs as its own processes: its sender can only
    // stall (or give up) once its receiver has lost its network, and the test ends it itself
    // instead of waiting out the sender's timeouts.
    let mut cut_srv = listen(&run, "g1", 5202);
    let kept = std::thread::scope(|s| {
        let kept = s.spawn(|| flow(&run, ("remote", "g0", "10.77.0.10"), 5201, bytes, 120));
        let args = stream_args("10.77.0.11", 5202, bytes, 120);
        let mut cut = run.spawn("remote", &args);
        // Both streams are under way: guest 1 dies.
        std::thread::sleep(std::time::Duration::from_millis(1500));
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(victim),
            nix::sys::signal::Signal::SIGKILL,
        )
        .expect("kill guest 1");
        let kept = kept.join().unwrap();
        // Guest 1's stream cannot have completed: its receiver lost its network. Its sender
        // is either still waiting for it or has given up without a full report.
        match cut.try_wait().expect("guest 1's sender") {
            None => {
                let _ = cut.kill();
                let _ = cut.wait();
            }
            Some(_) => {
                let o = cut.wait_with_output().expect("guest 1's sender");
                if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&o.stdout) {
                    assert_ne!(v["receiver"]["bytes"].as_u64(), Some(bytes), "{v}");
                }
            }
        }
        kept
    });
    let _ = cut_srv.kill();
    let _ = cut_srv.wait();
    assert_intact(&kept.expect("guest 0's stream"), bytes);
    let st = run.stat();
    let r = &st["reclaimed"];
    assert_eq!(u(&r["domains"]), 1, "{st}");
    assert!(u(&r["pages"]) > 0, "{r}");
    // `pvnet stat` as an operator reads it shows the reclaim too.
    let text = ok(&["stat", "--id", &run.id]);
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("reclaimed"))
        .unwrap_or_else(|| panic!("no reclaimed line in:\n{text}"));
    assert!(line.contains("domains=1"), "{line}");
    assert!(
        line.contains(&format!("pages={}", u(&r["pages"]))),
        "{line}"
    );
    let v1 = &st["vifs"][1];
    assert_eq!(v1["state"], "closed", "{v1}");
    assert_eq!(st["vifs"][0]["state"], "connected", "{st}");
    // The survivor still works.
    ping(&run, "g0", "10.77.0.1", 2);
}
