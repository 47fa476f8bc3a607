//! End to end with an HVM guest on the emulated NE2000 (Zhang, Li and Guan): the guest's kernel, its
//! vCPU running Linux's ne2k-pci driver, the device model process in the driver domain, the
//! bridge. Pings between the HVM guest, a PV guest and the remote host; a verified TCP stream
//! into and out of the HVM guest on each port-I/O path; nothing left after `pvnet down`.
//! Needs root.

use crate::common::*;

const HVM_ADDR: &str = "10.77.0.11";
const PV_ADDR: &str = "10.77.0.10";
const REMOTE_ADDR: &str = "10.77.0.1";

/// Bytes streamed each way on each path: 64 MiB, or `PVNET_HVM_BYTES` (issue 21 asks for
/// 1 GiB, about half an hour on the three paths: run by hand, outside CI).
fn stream_bytes() -> u64 {
    match std::env::var("PVNET_HVM_BYTES") {
        Err(_) => 64 << 20,
        Ok(s) => match s.parse::<u64>() {
            Ok(b) if b >= 1 << 20 => b,
            _ => panic!("PVNET_HVM_BYTES={s:?}: want a byte count of at least 1048576"),
        },
    }
}

/// Seconds a stream of `bytes` may take: generous at 16 Mbit/s, the slowest path's pace.
fn cap_secs(bytes: u64) -> u32 {
    u32::try_from(120 + bytes / (2 << 20)).unwrap_or(u32::MAX)
}

/// Streams `bytes` from the HVM guest (g1) to the remote host and checks every byte.
fn stream_out(run: &Run, bytes: u64) {
    let v = flow(
        run,
        ("g1", "remote", REMOTE_ADDR),
        5201,
        bytes,
        cap_secs(bytes),
    )
    .unwrap_or_else(|e| panic!("stream out of the HVM guest failed: {e}"));
    assert_intact(&v, bytes);
    println!("out of the HVM guest: {:.1} Mbit/s", v["receiver"]["mbps"]);
}

/// Whether process `pid` is still a pvnet `device-model` or `hvm-guest-run`.
fn hvm_process_alive(pid: u64) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| {
            let c = String::from_utf8_lossy(&c);
            c.contains("device-model") || c.contains("hvm-guest-run")
        })
        .unwrap_or(false)
}

#[test]
fn an_hvm_guest_talks_to_a_pv_guest_and_the_remote_host_on_every_path() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("an_hvm_guest_talks_to_a_pv_guest_and_the_remote_host_on_every_path") {
        return;
    }
    let bytes = stream_bytes();
    for path in ["original", "seed", "max"] {
        let run = Run::up(&["--guests", "1", "--hvm", "1", "--hvm-path", path]);
        ping(&run, "remote", HVM_ADDR, 5);
        ping(&run, "g0", HVM_ADDR, 5);
        ping(&run, "g1", PV_ADDR, 5);
        ping(&run, "g1", REMOTE_ADDR, 5);
        // The PV guest sends with TSO: the bridge port segments for the NE2000.
        let mut srv = server(&run, "g1", HVM_ADDR);
        let o = run.exec(
            "g0",
            &[
                "perf",
                "stream",
                HVM_ADDR,
                "--duration",
                "120",
                "--bytes",
                "4194304",
            ],
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["receiver"]["mismatches"].as_u64(), Some(0), "{v}");
        assert_eq!(v["receiver"]["bytes"].as_u64(), Some(4 << 20), "{v}");
        let _ = srv.wait();

        let t = std::time::Instant::now();
        stream_intact_capped(&run, "g1", HVM_ADDR, bytes, cap_secs(bytes));
        println!(
            "{path}: {bytes} bytes into the HVM guest in {:.1} s",
            t.elapsed().as_secs_f64()
        );
        let t = std::time::Instant::now();
        stream_out(&run, bytes);
        println!(
            "{path}: {bytes} bytes out of the HVM guest in {:.1} s",
            t.elapsed().as_secs_f64()
        );

        // Let the processes' periodic reports arrive.
        std::thread::sleep(std::time::Duration::from_millis(1200));
        let st = run.stat();
        let h = &st["hvm"][0];
        assert_eq!(h["path"], path, "{h}");
        assert_eq!(h["ready"], true, "{h}");
        assert!(h["failed"].is_null(), "{h}");
        let dm = &h["device_model"];
        let g = &h["guest"];
        let v = &g["vcpu"];
        // More than the streams' worth of frames crossed the card each way.
        assert!(u(&dm["frames_in"]) > bytes / 1514, "{dm}");
        assert!(u(&dm["frames_out"]) > bytes / 1514, "{dm}");
        assert_eq!(u(&dm["server"]["refused_bad_ptr"]), 0);
        assert!(u(&dm["rep_reads"]) > 0 && u(&dm["rep_writes"]) > 0);
        assert!(u(&g["frames_in"]) > bytes / 1514, "{g}");
        assert!(u(&g["interrupts"]) > 0);
        match path {
            "original" => assert_eq!(u(&v["served_at_trap"]), 0, "{v}"),
            _ => assert!(u(&v["served_at_trap"]) > u(&v["ioreqs"]) / 2, "{v}"),
        }
        assert!(u(&h["bridge_port"]["gso_packets"]) > 0, "{h}");
        assert_eq!(u(&h["bridge_port"]["malformed"]), 0, "{h}");
        println!(
            "{path}: dm cpu {:.2} s, exits {} ioreqs {} served at trap {}",
            u(&dm["cpu_ns"]) as f64 / 1e9,
            v["exits"]["reads"]
                .as_array()
                .into_iter()
                .chain(v["exits"]["writes"].as_array())
                .flatten()
                .map(u)
                .sum::<u64>(),
            u(&v["ioreqs"]),
            u(&v["served_at_trap"])
        );
        let pids = [u(&h["dm_pid"]), u(&h["guest_pid"])];
        assert!(pids.iter().all(|&p| hvm_process_alive(p)));
        let id = run.id.clone();
        drop(run);
        assert_run_gone(&id);
        for p in pids {
            assert!(!hvm_process_alive(p), "process {p} outlived pvnet down");
        }
    }
}

#[test]
fn pvnet_set_flips_the_hvm_path_under_a_stream() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("pvnet_set_flips_the_hvm_path_under_a_stream") {
        return;
    }
    let run = Run::up(&["--hvm", "1", "--guests", "1", "--exit-cost-ns", "500"]);
    let bytes = 16u64 << 20;
    let mut srv = server(&run, "g1", HVM_ADDR);
    let r = &run;
    let report = std::thread::scope(|sc| {
        let st = sc.spawn(move || stream(r, HVM_ADDR, bytes));
        for path in ["seed", "max", "original", "max", "seed"] {
            std::thread::sleep(std::time::Duration::from_millis(300));
            let out = ok(&["set", "--id", &r.id, "--hvm-path", path]);
            assert!(
                out.contains(&format!("hvm path {path} (1 HVM domains)")),
                "{out}"
            );
        }
        st.join().unwrap()
    });
    assert_eq!(
        report["receiver"]["bytes"].as_u64(),
        Some(bytes),
        "{report}"
    );
    assert_eq!(
        report["receiver"]["mismatches"].as_u64(),
        Some(0),
        "{report}"
    );
    let _ = srv.wait();
    fails_saying(
        &["set", "--id", &run.id, "--hvm-path", "fast"],
        "invalid value 'fast'",
    );
    // A request the daemon refuses in part changes nothing: the path stays `seed`.
    fails_saying(
        &[
            "set",
            "--id",
            &run.id,
            "--hvm-path",
            "max",
            "--port",
            "eth9",
        ],
        "no physical port \"eth9\"",
    );
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let st = run.stat();
    let h = &st["hvm"][0];
    assert_eq!(h["path"], "seed", "{h}");
    let v = &h["guest"]["vcpu"];
    assert!(u(&v["path_changes"]) >= 1, "{v}");
    assert!(
        u(&v["exits_original"]) > 0 && u(&v["exits_fast"]) > 0,
        "{v}"
    );
    assert_eq!(u(&v["bad_path"]), 0);
    let text = ok(&["stat", "--id", &run.id]);
    assert!(
        text.contains("hvm ") && text.contains("path seed"),
        "{text}"
    );
}

#[test]
fn a_killed_device_model_is_reported_and_the_run_still_comes_down_clean() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("a_killed_device_model_is_reported_and_the_run_still_comes_down_clean") {
        return;
    }
    let run = Run::up(&["--hvm", "1", "--guests", "1"]);
    ping(&run, "remote", HVM_ADDR, 2);
    let st = run.stat();
    let dm = u(&st["hvm"][0]["dm_pid"]) as i32;
    let guest = u(&st["hvm"][0]["guest_pid"]);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(dm), nix::sys::signal::SIGKILL).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let st = run.stat();
    let h = &st["hvm"][0];
    assert_eq!(h["failed"], "device model exited", "{h}");
    // The PV guest is unaffected.
    ping(&run, "remote", PV_ADDR, 2);
    let id = run.id.clone();
    drop(run);
    assert_run_gone(&id);
    assert!(
        !hvm_process_alive(guest),
        "the HVM guest outlived pvnet down"
    );
}

#[test]
fn hvm_needs_the_xen_mode() {
    if skip_unless_root("hvm_needs_the_xen_mode") {
        return;
    }
    fails_saying(
        &["up", "--id", &unique_id(), "--mode", "relay", "--hvm", "1"],
        "--hvm needs --mode xen",
    );
}

/// Runs `pvnet perf records` from `role` to `to` and checks that every record came back
/// acknowledged and verified.
fn records(run: &Run, role: &str, to: &str, size: &str, count: u64) -> serde_json::Value {
    let o = run.exec(
        role,
        &[
            "perf",
            "records",
            to,
            "--size",
            size,
            "--count",
            &count.to_string(),
            "--rate",
            "100",
        ],
    );
    assert!(
        o.status.success(),
        "records from {role} to {to} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("records json");
    let size = u(&v["size"]);
    assert_eq!(u(&v["sent"]), count, "{v}");
    assert_eq!(u(&v["acked"]), count, "{v}");
    assert_eq!(u(&v["nacked"]), 0, "{v}");
    assert_eq!(u(&v["receiver"]["records"]), count, "{v}");
    assert_eq!(u(&v["receiver"]["bytes"]), count * size, "{v}");
    assert_eq!(u(&v["receiver"]["mismatches"]), 0, "{v}");
    v
}

#[test]
fn paced_records_through_an_hvm_guest_are_all_acknowledged_and_verified() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("paced_records_through_an_hvm_guest_are_all_acknowledged_and_verified") {
        return;
    }
    let run = Run::up(&["--hvm", "1", "--guests", "1", "--exit-cost-ns", "1000"]);
    // The paper's direction on the original path: the HVM guest sends to the remote host.
    let mut srv = server(&run, "remote", REMOTE_ADDR);
    let v = records(&run, "g1", REMOTE_ADDR, "64K", 30);
    assert_eq!(u(&v["size"]), 65536);
    let _ = srv.wait();
    // The other way on the fast path: records into the HVM guest.
    ok(&["set", "--id", &run.id, "--hvm-path", "max"]);
    let mut srv = server(&run, "g1", HVM_ADDR);
    records(&run, "remote", HVM_ADDR, "1500", 40);
    let _ = srv.wait();
    // The processes' counters, with their context switches, reach `pvnet stat`.
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let st = run.stat();
    let h = &st["hvm"][0];
    assert_eq!(h["path"], "max", "{h}");
    let (dm, g) = (&h["device_model"]["process"], &h["guest"]["process"]);
    assert!(u(&dm["csw_voluntary"]) > 0 && u(&dm["cpu_ns"]) > 0, "{dm}");
    assert!(u(&g["csw_voluntary"]) > 0 && u(&g["cpu_ns"]) > 0, "{g}");
    // Both paths ran: 30 records of 64 KiB out need more than 30 * 44 full frames.
    let vc = &h["guest"]["vcpu"];
    assert!(
        u(&vc["exits_original"]) > 0 && u(&vc["exits_fast"]) > 0,
        "{vc}"
    );
    assert!(u(&h["guest"]["frames_out"]) > 30 * 44, "{h}");
}
