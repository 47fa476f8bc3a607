//! Many guests and a guest that dies: eight verified streams at once, and a guest killed
//! mid-stream while another streams (its domain is reclaimed, the other stream arrives
//! intact). Needs root.

mod common;
use common::*;

const MIB: u64 = 1 << 20;

/// Streams `bytes` from the remote host to a `perf server` on `port` in `to` (address
/// `to_addr`), the sender giving up after `cap_secs`; returns its report, or its error output.
fn flow(
    run: &Run,
    to: &str,
    to_addr: &str,
    port: u16,
    bytes: u64,
    cap_secs: u32,
) -> Result<serde_json::Value, String> {
    let bind = format!("0.0.0.0:{port}");
    let mut srv = run.spawn(to, &["perf", "server", "--once", "--bind", &bind]);
    std::thread::sleep(std::time::Duration::from_millis(500));
    let o = run.exec(
        "remote",
        &[
            "perf",
            "stream",
            to_addr,
            "--port",
            &port.to_string(),
            "--duration",
            &cap_secs.to_string(),
            "--bytes",
            &bytes.to_string(),
        ],
    );
    let _ = srv.kill();
    let _ = srv.wait();
    if !o.status.success() {
        return Err(String::from_utf8_lossy(&o.stderr).into_owned());
    }
    serde_json::from_slice(&o.stdout).map_err(|e| e.to_string())
}

fn intact(v: &serde_json::Value, bytes: u64) {
    assert_eq!(v["sent"].as_u64(), Some(bytes), "{v}");
    assert_eq!(v["receiver"]["bytes"].as_u64(), Some(bytes), "{v}");
    assert_eq!(v["receiver"]["mismatches"].as_u64(), Some(0), "{v}");
}

#[test]
fn eight_guests_each_receive_a_verified_stream_at_once() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("eight_guests_each_receive_a_verified_stream_at_once") {
        return;
    }
    let run = Run::up(&["--guests", "8", "--lro", "adaptive"]);
    let bytes = 128 * MIB;
    let reports: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..8u16)
            .map(|i| {
                let run = &run;
                s.spawn(move || {
                    let role = format!("g{i}");
                    let addr = format!("10.77.0.{}", 10 + i);
                    flow(run, &role, &addr, 5201 + i, bytes, 120)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, r) in reports.iter().enumerate() {
        let v = r.as_ref().unwrap_or_else(|e| panic!("guest {i}: {e}"));
        intact(v, bytes);
    }
    let st = run.stat();
    let vifs = st["vifs"].as_array().unwrap();
    assert_eq!(vifs.len(), 8);
    for v in vifs {
        assert_eq!(v["state"], "connected", "{v}");
        assert!(u(&v["netback"]["rx_bytes"]) >= bytes, "{v}");
    }
}

#[test]
fn a_killed_guest_is_reclaimed_and_the_others_go_on() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("a_killed_guest_is_reclaimed_and_the_others_go_on") {
        return;
    }
    let run = Run::up(&["--guests", "2"]);
    let info: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(format!("/run/pvnet/{}/info.json", run.id)).unwrap(),
    )
    .unwrap();
    let victim = info["guest_pids"][1].as_i64().expect("guest 1's pid") as i32;
    let bytes = 1024 * MIB;
    let (kept, cut) = std::thread::scope(|s| {
        let kept = s.spawn(|| flow(&run, "g0", "10.77.0.10", 5201, bytes, 120));
        // The sender towards the guest that dies gives up after 5 s.
        let cut = s.spawn(|| flow(&run, "g1", "10.77.0.11", 5202, bytes, 5));
        // Both streams are under way: guest 1 dies.
        std::thread::sleep(std::time::Duration::from_millis(1500));
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(victim),
            nix::sys::signal::Signal::SIGKILL,
        )
        .expect("kill guest 1");
        (kept.join().unwrap(), cut.join().unwrap())
    });
    intact(&kept.expect("guest 0's stream"), bytes);
    // Guest 1's stream could not have completed: its receiver lost its network.
    if let Ok(v) = &cut {
        assert_ne!(v["receiver"]["bytes"].as_u64(), Some(bytes), "{v}");
    }
    let st = run.stat();
    let r = &st["reclaimed"];
    assert_eq!(u(&r["domains"]), 1, "{st}");
    assert!(u(&r["pages"]) > 0, "{r}");
    let v1 = &st["vifs"][1];
    assert_eq!(v1["state"], "closed", "{v1}");
    assert_eq!(st["vifs"][0]["state"], "connected", "{st}");
    // The survivor still works.
    ping(&run, "g0", "10.77.0.1", 2);
}
