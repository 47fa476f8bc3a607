//! End to end through the `xen` path: real TCP from the remote host's kernel, through the
//! physical port, bridge, netback, rings and netfront, into a guest's kernel. Needs root.

use crate::common::*;

const GIB: u64 = 1 << 30;

#[test]
fn one_gib_stream_into_a_guest_arrives_intact() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("one_gib_stream_into_a_guest_arrives_intact") {
        return;
    }
    let run = Run::up(&["--guests", "1"]);
    // The remote host's input goes to a CPU other than the receiving one (0), so the sender's
    // ACK processing and the transmissions it clocks are not charged to the guest side.
    if pvnet_testbed::cpu::nr_cpus() > 1 {
        let id = pvnet_testbed::RunId::parse(&run.id).unwrap();
        let remote = pvnet_testbed::Netns::open(&format!("pvnet-{}-remote", run.id)).unwrap();
        let ifname = id.short_link_name(pvnet_testbed::topology::REMOTE_IF_SUFFIX);
        assert_eq!(
            pvnet_testbed::sys::get_rps_cpus(&remote, &ifname, 0).unwrap(),
            1 << 1
        );
    }
    stream_intact(&run, "g0", "10.77.0.10", GIB);
    let st = run.stat();
    assert_eq!(
        st["pnic"]["ring_frames"].as_u64(),
        Some(u64::from(pvnet_pnic::DEFAULT_FRAME_NR)),
        "{}",
        st["pnic"]
    );
    // MTU 1500: the default slot.
    assert_eq!(
        st["pnic"]["ring_frame_size"].as_u64(),
        Some(u64::from(pvnet_pnic::DEFAULT_FRAME_SIZE)),
        "{}",
        st["pnic"]
    );
    // The data path thread's own scheduling: a GiB took it time on the CPU and many slices
    // (null only on a kernel without schedstat).
    let cpu = &st["daemon_cpu"];
    if std::path::Path::new("/proc/thread-self/schedstat").exists() {
        assert!(cpu["run_ms"].as_u64().unwrap() > 100, "{cpu}");
        assert!(cpu["slices"].as_u64().unwrap() > 100, "{cpu}");
        assert!(cpu["waited_runnable_ms"].is_u64(), "{cpu}");
    } else {
        assert!(cpu.is_null(), "{cpu}");
    }
    let vif = &st["vifs"][0];
    assert_eq!(vif["state"], "connected");
    // At least a GiB of payload crossed netback into the guest, by grant copy.
    assert!(vif["netback"]["rx_bytes"].as_u64().unwrap() > GIB);
    assert!(st["grant"]["copy_bytes"].as_u64().unwrap() > GIB);
    assert!(
        vif["netback"]["tx_packets"].as_u64().unwrap() > 0,
        "ACKs went back through TX"
    );
    // Most frames went from their ring slots straight to the guest (leases); none is still
    // leased after the stream.
    let pn = &st["pnic"];
    let n = |k: &str| pn[k].as_u64().unwrap_or_else(|| panic!("{k}: {pn}"));
    assert!(n("rx_leased") > n("rx_frames") / 2, "{pn}");
    assert_eq!(n("rx_leases_outstanding"), 0, "{pn}");
    assert!(st["daemon"]["leases_detached"].as_u64().unwrap() < n("rx_leased"));
}

#[test]
fn request_response_through_the_pv_path() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("request_response_through_the_pv_path") {
        return;
    }
    // A smaller packet ring than the default: the knob reaches the kernel's ring.
    let run = Run::up(&["--guests", "1", "--ring-frames", "1024"]);
    // Its sockets (control, attach) sit in a directory only root enters.
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(format!("/run/pvnet/{}", run.id))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o700, "{mode:o}");
    let mut srv = server(&run, "g0", "10.77.0.10");
    let o = run.exec("remote", &["perf", "rr", "10.77.0.10", "--duration", "2"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["transactions"].as_u64().unwrap() > 100, "{v}");
    assert_eq!(v["errors"].as_u64(), Some(0));
    let _ = srv.wait();
    let st = run.stat();
    assert_eq!(
        st["pnic"]["ring_frames"].as_u64(),
        Some(1024),
        "{}",
        st["pnic"]
    );
    assert!(
        st["pnic"]["rx_frames"].as_u64().unwrap() > 100,
        "{}",
        st["pnic"]
    );
}

#[test]
fn a_one_frame_budget_still_carries_a_stream() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("a_one_frame_budget_still_carries_a_stream") {
        return;
    }
    // Budget 1: a vif's TX poll takes at most 4 packets, so the guest's ACKs often outnumber
    // it. The frontend does not notify again for requests already on the ring; the daemon
    // must poll the vif again by itself, or the ACKs stay there and the stream stalls.
    let run = Run::up(&["--guests", "1", "--budget", "1"]);
    let mut srv = server(&run, "g0", "10.77.0.10");
    let bytes: u64 = 256 << 20;
    // Well under a second when the path works. A stall fails the sender: after its 20 s it
    // gets no report from the receiver.
    let v = stream_capped(&run, "10.77.0.10", bytes, 20);
    assert_eq!(v["receiver"]["bytes"].as_u64(), Some(bytes), "{v}");
    assert_eq!(v["receiver"]["mismatches"].as_u64(), Some(0), "{v}");
    let _ = srv.wait();
    let st = run.stat();
    let d = &st["daemon"];
    assert!(d["tx_repolls"].as_u64().unwrap() > 0, "{d}");
}

#[test]
fn the_caps_given_to_up_are_the_ones_the_driver_domain_enforces() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("the_caps_given_to_up_are_the_ones_the_driver_domain_enforces") {
        return;
    }
    let run = Run::up(&[
        "--guests",
        "2",
        "--lro",
        "adaptive",
        "--rx-queue-packets",
        "128",
        "--rx-queue-bytes",
        "2M",
        "--lro-flows-per-guest",
        "4",
    ]);
    let st = run.stat();
    let l = &st["limits"];
    assert_eq!(l["rx_queue_packets"].as_u64(), Some(128), "{l}");
    assert_eq!(l["rx_queue_bytes"].as_u64(), Some(2 << 20), "{l}");
    assert_eq!(l["lro_flows_per_guest"].as_u64(), Some(4), "{l}");
    // The persistent-grant cap applies to --grant persistent only (`up` refuses it otherwise).
    {
        let p = Run::up(&["--grant", "persistent", "--persistent-grants", "600"]);
        let l = &p.stat()["limits"];
        assert_eq!(l["persistent_grants"].as_u64(), Some(600), "{l}");
    }
    // g1 takes nothing: of 1000 datagrams its 256 posted buffers take 256 and its queue 128;
    // the rest is dropped at the queue once the port's gate stops waiting for it. With the
    // default cap (1024) none would be.
    let mut s0 = server(&run, "g0", "10.77.0.10");
    let stopped = stop_g1(&run);
    datagrams_to_g1(&run, 1000);
    // g0's stream arrives intact through the small queue and past the stopped guest.
    let bytes: u64 = 128 << 20;
    let v = stream_capped(&run, "10.77.0.10", bytes, 30);
    assert_eq!(v["receiver"]["bytes"].as_u64(), Some(bytes), "{v}");
    assert_eq!(v["receiver"]["mismatches"].as_u64(), Some(0), "{v}");
    let _ = s0.wait();
    let st = run.stat();
    let full = st["vifs"][1]["netback"]["rx_queue_full"]
        .as_u64()
        .unwrap_or(0);
    assert!(
        (600..=1000).contains(&full),
        "rx_queue_full {full}: {}",
        st["vifs"][1]
    );
    drop(stopped);
}

#[test]
fn two_guests_receive_their_own_streams_at_once() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("two_guests_receive_their_own_streams_at_once") {
        return;
    }
    let run = Run::up(&["--guests", "2"]);
    let mut s0 = server(&run, "g0", "10.77.0.10");
    let mut s1 = server(&run, "g1", "10.77.0.11");
    let bytes = 256u64 << 20;
    let r = &run;
    let (a, b) = std::thread::scope(|sc| {
        let a = sc.spawn(move || stream(r, "10.77.0.10", bytes));
        let b = sc.spawn(move || stream(r, "10.77.0.11", bytes));
        (a.join().unwrap(), b.join().unwrap())
    });
    for v in [&a, &b] {
        assert_eq!(v["receiver"]["bytes"].as_u64(), Some(bytes), "{v}");
        assert_eq!(v["receiver"]["mismatches"].as_u64(), Some(0));
    }
    let _ = (s0.wait(), s1.wait());
    let st = run.stat();
    for vif in st["vifs"].as_array().unwrap() {
        assert!(
            vif["netback"]["rx_bytes"].as_u64().unwrap() > bytes,
            "{vif}"
        );
    }
}

#[test]
fn guests_ping_the_remote_host_each_other_and_the_driver_domain() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("guests_ping_the_remote_host_each_other_and_the_driver_domain") {
        return;
    }
    let run = Run::up(&["--guests", "2"]);
    for (role, dst) in [
        ("g0", "10.77.0.1"),
        ("g0", "10.77.0.11"),
        ("g1", "10.77.0.10"),
        ("g1", "10.77.0.2"),
    ] {
        assert_eq!(ping(&run, role, dst, 3)["received"].as_u64(), Some(3));
    }
    let st = run.stat();
    assert!(
        st["daemon"]["ddtap_rx"].as_u64().unwrap() > 0,
        "the driver domain's own stack answered"
    );
}

#[test]
fn sigterm_and_sigint_tear_everything_down() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("sigterm_and_sigint_tear_everything_down") {
        return;
    }
    for sig in [
        nix::sys::signal::Signal::SIGTERM,
        nix::sys::signal::Signal::SIGINT,
    ] {
        let id = unique_id();
        let mut child = std::process::Command::new(exe())
            .args(["up", "--id", &id, "--guests", "2", "--foreground"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let info = format!("/run/pvnet/{id}/info.json");
        let t0 = std::time::Instant::now();
        while !std::path::Path::new(&info).exists() {
            assert!(t0.elapsed().as_secs() < 30, "run did not come up");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&info).unwrap()).unwrap();
        let guests: Vec<i32> = v["guest_pids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_i64().unwrap() as i32)
            .collect();
        assert_eq!(guests.len(), 2);
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).unwrap();
        let st = child.wait().unwrap();
        assert!(st.success() || st.code().is_some(), "{st}");
        assert!(
            namespaces_of(&id).is_empty(),
            "{sig:?} left namespaces {:?}",
            namespaces_of(&id)
        );
        assert!(!std::path::Path::new(&format!("/run/pvnet/{id}")).exists());
        for p in guests {
            assert!(
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), None).is_err(),
                "guest process {p} survived {sig:?}"
            );
        }
    }
}

#[test]
fn clear_errors_for_bad_input() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let o = pvnet(&["stat", "--id", "nosuchrun"]);
    assert!(!o.status.success());
    if is_root() {
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("no pvnet run"),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let o = pvnet(&["up", "--guests", "0"]);
        assert!(String::from_utf8_lossy(&o.stderr).contains("--guests"));
        let o = pvnet(&["bench", "--configs", "linux,warp"]);
        assert!(String::from_utf8_lossy(&o.stderr).contains("unknown configuration"));
        let ring = "--ring-frames must be between 256 and 65536";
        let budget = "--budget must be between 1 and 512";
        for (args, want) in [
            (&["up", "--ring-frames", "100"][..], ring),
            (&["bench", "--quick", "--ring-frames", "70000"][..], ring),
            (&["up", "--budget", "0"][..], budget),
            (&["bench", "--quick", "--budget", "513"][..], budget),
            (
                &["up", "--rx-queue-packets", "100"][..],
                "--rx-queue-packets must be between 128 (two polls of --budget 64)",
            ),
            (
                &["up", "--rx-queue-packets", "300", "--budget", "200"][..],
                "--rx-queue-packets must be between 400",
            ),
            (
                &["up", "--rx-queue-bytes", "1K"][..],
                "--rx-queue-bytes must be between",
            ),
            (&["up", "--rx-queue-bytes", "2X"][..], "not a byte count"),
            (
                &["perf", "ping", "127.0.0.1", "--wait", "0"][..],
                "for '--wait <WAIT>': \"0\" is not a number of seconds above 0",
            ),
            (
                &["perf", "ping", "127.0.0.1", "--wait", "NaN"][..],
                "for '--wait <WAIT>': \"NaN\" is not a number of seconds above 0",
            ),
            (
                &["up", "--guests", "200", "--hvm", "50"][..],
                "at most 245 guests in all",
            ),
            (
                &["up", "--guests", "18446744073709551615", "--hvm", "1"][..],
                "at most 245 guests in all",
            ),
            (
                &["up", "--grant", "persistent", "--persistent-grants", "0"][..],
                "--persistent-grants must be between 1",
            ),
            (
                &["up", "--lro-flows-per-guest", "40"][..],
                "--lro-flows-per-guest must be between 1 and 32",
            ),
            (
                &["up", "--port-ring", "v3", "--port-ring-block-kib", "100"][..],
                "--port-ring-block-kib must be a power of two between 128 and 4096, got 100",
            ),
            (
                &["up", "--port-ring-block-kib", "512"][..],
                "--port-ring-block-kib needs --port-ring v3",
            ),
            (
                &["up", "--mode", "linux", "--ring-prefetch", "8"][..],
                "--ring-prefetch does not apply with --mode linux",
            ),
            (
                &["info", "--id", "../../etc"][..],
                "invalid run id \"../../etc\"",
            ),
            (
                &[
                    "perf",
                    "udp-stream",
                    "127.0.0.1",
                    "--size",
                    "64",
                    "--bytes",
                    "0",
                ][..],
                "for '--bytes <BYTES>'",
            ),
            (
                &["perf", "stream", "127.0.0.1", "--bytes", "0"][..],
                "for '--bytes <BYTES>'",
            ),
            (
                &["perf", "rr", "127.0.0.1", "--rsp-size", "0"][..],
                "for '--rsp-size <RSP_SIZE>'",
            ),
            (
                &[
                    "perf",
                    "streams",
                    "--to",
                    "127.0.0.1:5201",
                    "--to",
                    "127.0.0.1:5201",
                ][..],
                "streams 0 and 1 both go to 127.0.0.1:5201 (--to)",
            ),
            (
                &["perf", "stream", "127.0.0.1", "--port", "0"][..],
                "--port 0: give the server's port",
            ),
            (
                &["perf", "server", "--bind", "127.0.0.1:0"][..],
                "port 0 would listen on a port no client is told of",
            ),
            (
                &[
                    "perf",
                    "records",
                    "127.0.0.1",
                    "--size",
                    "1K",
                    "--rate",
                    "1e-20",
                ][..],
                "out of range: one every 30 s",
            ),
            (
                &[
                    "perf",
                    "udp-stream",
                    "127.0.0.1",
                    "--size",
                    "1472",
                    "--rate",
                    "1e40",
                    "--datagrams",
                    "10",
                ][..],
                "--rate asks for 8.492e35 datagrams per second",
            ),
            (
                &["up", "--cpu", "4096"][..],
                "--cpu 4096: the CPUs are 0 to",
            ),
            (
                &["up", "--sender-cpu", "4096"][..],
                "--sender-cpu 4096: the CPUs are 0 to",
            ),
            (
                &["up", "--exit-cost-ns", "500"][..],
                "--exit-cost-ns does not apply without --hvm",
            ),
            (
                &["bench", "--sweep", "pktsize", "--json", "x.json"][..],
                "--json belongs to",
            ),
        ] {
            fails_saying(args, want);
        }
    } else {
        assert!(String::from_utf8_lossy(&o.stderr).contains("needs root"));
    }
}

/// Runs `pvnet bench --quick` with `args` into a fresh directory: the directory, stdout and
/// results.json.
fn quick_bench(args: &[&str]) -> (std::path::PathBuf, String, serde_json::Value) {
    let out = std::env::temp_dir().join(format!("pvnet-bench-{}", unique_id()));
    let mut all = vec!["bench", "--quick"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--out", out.to_str().unwrap()]);
    let stdout = ok(&all);
    let v =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    (out, stdout, v)
}

#[test]
fn bench_writes_the_whole_report_and_leaves_nothing_behind() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("bench_writes_the_whole_report_and_leaves_nothing_behind") {
        return;
    }
    let (out, stdout, v) = quick_bench(&["--configs", "linux,xen,da,relay"]);
    assert!(
        stdout.contains("vs Linux %") && stdout.contains("vs Xen %"),
        "{stdout}"
    );
    assert!(stdout.contains("Table VII"), "{stdout}");
    for f in ["report.md", "throughput.svg", "cycles.svg"] {
        let len = std::fs::metadata(out.join(f)).map(|m| m.len()).unwrap_or(0);
        assert!(len > 0, "{f} missing or empty");
    }
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    for t in [
        "Table IV",
        "Table V",
        "Table VI",
        "Table VII",
        "Which side limits",
    ] {
        assert!(report.contains(t), "report.md lacks {t}");
    }
    for k in ["kernel", "cpu_model", "cpus", "tsc_hz"] {
        assert!(!v["machine"][k].is_null(), "machine.{k}: {}", v["machine"]);
    }
    // The memory probes of the run's start and end, on the receiving CPU, in the report too.
    for when in ["start", "end"] {
        let p = &v["machine"]["memory_probe"][when];
        assert_eq!(p["cpu"], 0, "{p}");
        for k in ["random_read_ns_8mib", "random_read_ns_64mib"] {
            assert!(p[k].as_f64().is_some_and(|ns| ns > 0.0), "{when}.{k}: {p}");
        }
        assert!(p["cache_mib"].is_u64(), "{when}.cache_mib: {p}");
    }
    assert!(report.contains("memory seen from CPU 0"), "{report}");
    assert!(
        report.contains("cache answering at cache speed"),
        "{report}"
    );
    assert!(v["revision"].is_string());
    assert_eq!(v["parameters"]["reps"].as_u64(), Some(1));

    // Every metric for every configuration: a number where it applies, null where not, with
    // min <= median <= max.
    let num = |x: &serde_json::Value, what: &str| -> f64 {
        x.as_f64()
            .unwrap_or_else(|| panic!("{what} is not a number: {x}"))
    };
    let path = |x: &serde_json::Value, p: &str| -> serde_json::Value {
        p.split('.').fold(x.clone(), |acc, k| acc[k].clone())
    };
    let always = [
        "throughput_mbps",
        "rr_tps",
        "cycles_per_byte.total",
        "cycles_per_byte.softirq",
        "cycles_per_byte.port",
        "cycles_per_byte.accounted",
        "rr_latency_us.p50",
        "rr_latency_us.p99",
        "retransmissions",
        "dsacked_segments",
        "sender.in_flight_kib",
        "sender.rtt_us",
        "cpu_busy_pct.rx",
        "cpu_busy_pct.tx",
    ];
    // The relay has a port but no domains to split the CPU time into.
    let port_only = ["port_drops", "cycles_per_byte.daemon"];
    let pv_only = ["cycles_per_byte.driver", "cycles_per_byte.guest"];
    let lro_only = [
        "lro_rate",
        "lro_psh_pct",
        "flush_latency_us.p50",
        "flush_latency_us.p99",
    ];
    for c in ["linux", "xen", "da", "relay"] {
        let r = &v["configs"][c];
        let applies = |k: &str| {
            always.contains(&k)
                || (port_only.contains(&k) && c != "linux")
                || (pv_only.contains(&k) && (c == "xen" || c == "da"))
                || (lro_only.contains(&k) && c == "da")
        };
        for k in always
            .iter()
            .chain(&port_only)
            .chain(&pv_only)
            .chain(&lro_only)
        {
            let (med, min, max) = (path(r, k), path(&r["min"], k), path(&r["max"], k));
            if applies(k) {
                let (a, m, b) = (num(&min, k), num(&med, k), num(&max, k));
                assert!(a <= m && m <= b, "{c}.{k}: {a} {m} {b}");
            } else {
                assert!(
                    med.is_null() && min.is_null() && max.is_null(),
                    "{c}.{k}: {r}"
                );
            }
        }
        assert!(num(&r["throughput_mbps"], "throughput") > 0.0, "{c}: {r}");
        assert!(num(&r["rr_tps"], "rr") > 0.0, "{c}: {r}");
        assert!(r["bytes_verified"].as_u64().unwrap() > 0, "{c}: {r}");
        assert_eq!(r["errors"].as_array().unwrap().len(), 0, "{c}: {r}");
        assert!(r["limit"].is_string(), "{c}: {r}");
        // The ratios are this run's medians divided.
        for (base, field) in [("linux", "vs_linux"), ("xen", "vs_xen")] {
            for k in ["throughput_mbps", "rr_tps", "cycles_per_byte.total"] {
                let want = 100.0 * num(&path(r, k), k) / num(&path(&v["configs"][base], k), k);
                let got = num(&path(&r[field], k), field);
                assert!(
                    (got - want).abs() < 1e-9 * want.abs().max(1.0),
                    "{c}.{field}.{k}: {got} vs {want}"
                );
            }
        }
    }
    assert!(v["configs"]["da"]["lro_rate"].as_f64().unwrap() > 1.0);
    // A bulk stream's aggregates end at the senders' pushes or the policy's flushes: a share.
    let psh = v["configs"]["da"]["lro_psh_pct"].as_f64().unwrap();
    assert!((0.0..=100.0).contains(&psh), "{psh}");
    let x = &v["configs"]["xen"]["cycles_per_byte"];
    let (t, p, d, g) = (
        x["total"].as_f64().unwrap(),
        x["port"].as_f64().unwrap(),
        x["driver"].as_f64().unwrap(),
        x["guest"].as_f64().unwrap(),
    );
    assert!(
        d > 0.0 && g > 0.0 && (p + d + g - t).abs() < 1e-6 * t.max(1.0),
        "split {p} + {d} + {g} != {t}"
    );
    // The physical port's receive path runs in softirq on CPU 0 (RPS): part of the total, and
    // (GRO off: no NAPI threads) all of the port's share.
    let si = x["softirq"].as_f64().unwrap();
    assert!(si > 0.0 && si <= t, "softirq {si} of {t}");
    assert!((p - si).abs() < 1e-9 * t.max(1.0), "port {p}, softirq {si}");
    // The daemon's own time is part of the accounted total.
    let (a, dm) = (
        x["accounted"].as_f64().unwrap(),
        x["daemon"].as_f64().unwrap(),
    );
    assert!(dm > 0.0 && dm < a, "daemon {dm} of {a}");

    // Every raw sample, warm-up marked; nothing of any of their testbeds is left.
    let samples = v["samples"].as_array().unwrap();
    assert_eq!(
        samples.len(),
        8,
        "one warm-up and one measured repetition of each"
    );
    assert_eq!(samples.iter().filter(|s| s["warmup"] == true).count(), 4);
    for s in samples {
        assert_run_gone(s["run_id"].as_str().unwrap());
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn bench_pairs_xen_and_adaptive_on_one_testbed() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("bench_pairs_xen_and_adaptive_on_one_testbed") {
        return;
    }
    let (out, stdout, v) = quick_bench(&[
        "--configs",
        "xen,adaptive",
        "--paired-rounds",
        "2",
        "--budget",
        "32",
    ]);
    assert!(stdout.contains("TCP_RR on one testbed"), "{stdout}");
    // --budget reached every testbed's daemon.
    assert_eq!(v["parameters"]["budget"].as_u64(), Some(32));
    let samples = v["samples"].as_array().unwrap();
    assert!(!samples.is_empty());
    for s in samples {
        assert_eq!(
            s["stat"]["pnic"]["budget"].as_u64(),
            Some(32),
            "{}",
            s["stat"]
        );
    }
    let p = &v["rr_paired"];
    assert_eq!(p["base"], "xen", "{p}");
    assert_eq!(p["other"], "adaptive", "{p}");
    assert_eq!(p["rounds"].as_u64(), Some(2), "{p}");
    // Slices of 0.1 s by default, on one connection.
    assert_eq!(p["seconds"].as_f64(), Some(0.1), "{p}");
    let tps = |k: &str| -> Vec<f64> {
        p[k].as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    let (b, o) = (tps("base_tps"), tps("other_tps"));
    assert!(b.len() == 2 && o.len() == 2, "{p}");
    assert!(b.iter().chain(&o).all(|t| *t > 0.0), "{p}");
    for (i, r) in p["ratios"].as_array().unwrap().iter().enumerate() {
        assert!((r.as_f64().unwrap() - o[i] / b[i]).abs() < 1e-9, "{p}");
    }
    // Each run measured what it is filed under: the daemon's answers, in run order (A B, B A).
    let settings: Vec<&str> = p["settings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert_eq!(settings, ["off", "adaptive", "adaptive", "off"], "{p}");
    // The interval brackets the geometric mean of the two ratios, and the verdict follows it.
    let ratios: Vec<f64> = o.iter().zip(&b).map(|(o, b)| o / b).collect();
    let g = p["ratio_geomean"].as_f64().unwrap();
    assert!((g - (ratios[0] * ratios[1]).sqrt()).abs() < 1e-9, "{p}");
    let ci: Vec<f64> = p["ratio_ci95"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert!(ci[0] <= g && g <= ci[1], "{p}");
    let verdict = p["verdict"].as_str().unwrap();
    let expected = if ci[0] >= 0.98 {
        "holds"
    } else if ci[1] < 0.98 {
        "fails"
    } else {
        "undecided"
    };
    assert_eq!(verdict, expected, "{p}");
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        report.contains("| vs xen %, median of rounds | 100.0 |"),
        "{report}"
    );
    assert!(
        report.contains(&format!(
            "| no more than 2 % slower than xen | — | {verdict} |"
        )),
        "{report}"
    );
    assert!(
        stdout.contains(&format!(
            "adaptive TCP_RR no more than 2 % slower than xen: {verdict}"
        )),
        "{stdout}"
    );
    // Its testbed is gone like the others.
    assert_run_gone(p["run_id"].as_str().unwrap());
    let _ = std::fs::remove_dir_all(&out);
}

/// Sends SIGCONT to a stopped process when dropped, so a failing test still lets it go down.
struct Stopped(nix::unistd::Pid);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(self.0, nix::sys::signal::Signal::SIGCONT);
    }
}

/// Sends `n` datagrams of 1000 bytes from the remote host to g1 (10.77.0.11, port 9).
fn datagrams_to_g1(run: &Run, n: usize) {
    let remote = pvnet_testbed::Netns::open(&format!("pvnet-{}-remote", run.id)).unwrap();
    remote
        .run(|| {
            let s = std::net::UdpSocket::bind("10.77.0.1:0").unwrap();
            for _ in 0..n {
                s.send_to(&[0x5a; 1000], "10.77.0.11:9").unwrap();
            }
        })
        .unwrap();
}

/// Lets g1 answer once (the remote host learns its address, the bridge its MAC), then stops
/// its guest process: from then on g1 takes no packet and posts no buffer.
fn stop_g1(run: &Run) -> Stopped {
    let o = run.exec("remote", &["perf", "ping", "10.77.0.11", "--count", "1"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let info = run.info();
    let g1 = nix::unistd::Pid::from_raw(info["guest_pids"][1].as_i64().unwrap() as i32);
    nix::sys::signal::kill(g1, nix::sys::signal::Signal::SIGSTOP).unwrap();
    Stopped(g1)
}

#[test]
fn a_guest_that_takes_nothing_holds_the_port_back_only_briefly() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("a_guest_that_takes_nothing_holds_the_port_back_only_briefly") {
        return;
    }
    let run = Run::up(&["--guests", "2"]);
    let mut s0 = server(&run, "g0", "10.77.0.10");
    let stopped = stop_g1(&run);
    // Far more for g1 than its ring and its queue in the driver domain hold.
    datagrams_to_g1(&run, 4000);
    // g0 is still served: with a receive queue per guest only g1's queue waits for it, and
    // after the stall limit that queue is polled again and g1's packets are dropped at its
    // full queue in netback.
    let bytes = 64u64 << 20;
    let v = stream(&run, "10.77.0.10", bytes);
    assert_eq!(v["receiver"]["bytes"].as_u64(), Some(bytes), "{v}");
    assert_eq!(v["receiver"]["mismatches"].as_u64(), Some(0));
    // The stream may well end within the stall limit: wait for the stall, and for a poll
    // after it that overflows g1's queue (the first poll past the stall may only fill it).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let st = loop {
        let st = run.stat();
        let stalled = st["daemon"]["pnic_stalls"].as_u64().unwrap() >= 1;
        let full = st["vifs"][1]["netback"]["rx_queue_full"]
            .as_u64()
            .unwrap_or(0)
            >= 1;
        if (stalled && full) || std::time::Instant::now() > deadline {
            break st;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let d = &st["daemon"];
    assert!(d["pnic_stalls"].as_u64().unwrap() >= 1, "{d}");
    assert!(d["pnic_queues_paused"].as_u64().unwrap() >= 1, "{d}");
    // While a queue waits for g1 it is not watched: no spinning on a readable socket.
    assert!(d["pnic_deferred"].as_u64().unwrap() < 5000, "{d}");
    // The port is not in the epoll set: frames reach the daemon through its look at the
    // ring, or by waking its poll(2).
    let woke = d["pnic_woken"].as_u64().unwrap() + d["pnic_ring_wakeups"].as_u64().unwrap();
    assert!(woke >= 1, "{d}");
    let v1 = &st["vifs"][1];
    assert!(
        v1["netback"]["rx_queue_full"].as_u64().unwrap() >= 1,
        "{v1}"
    );
    assert_eq!(v1["state"], "connected", "{v1}");
    // Let go, g1 takes packets again.
    drop(stopped);
    let o = run.exec("remote", &["perf", "ping", "10.77.0.11", "--count", "3"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let _ = s0.wait();
}

/// Streams a GiB into g0 of a run started with `up_args` while g1, stopped, is sent a
/// datagram every 200 µs; checks the stream arrived intact and returns `stat` after it.
fn stream_beside_a_stopped_g1(up_args: &[&str]) -> serde_json::Value {
    let run = Run::up(up_args);
    let mut s0 = server(&run, "g0", "10.77.0.10");
    let stopped = stop_g1(&run);
    // Packets for g1 keep coming while g0 receives its stream. Each waits in g1's queue in
    // the port's ring; the kernel, lapping the ring for g0's stream, must not find them in
    // its way.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flood = {
        let (done, id) = (done.clone(), run.id.clone());
        std::thread::spawn(move || {
            let remote = pvnet_testbed::Netns::open(&format!("pvnet-{id}-remote")).unwrap();
            remote
                .run(|| {
                    let s = std::net::UdpSocket::bind("10.77.0.1:0").unwrap();
                    let mut sent = 0u64;
                    while !done.load(std::sync::atomic::Ordering::Relaxed) {
                        s.send_to(&[0x5a; 1400], "10.77.0.11:9").unwrap();
                        sent += 1;
                        std::thread::sleep(std::time::Duration::from_micros(200));
                    }
                    sent
                })
                .unwrap()
        })
    };
    let v = stream(&run, "10.77.0.10", GIB);
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let sent = flood.join().unwrap();
    assert_eq!(v["receiver"]["bytes"].as_u64(), Some(GIB), "{v}");
    assert_eq!(v["receiver"]["mismatches"].as_u64(), Some(0));
    assert!(sent > 1000, "only {sent} packets for g1");
    let st = run.stat();
    let drops = st["pnic"]["kernel_drops"]
        .as_u64()
        .expect("pnic.kernel_drops in stat");
    assert!(
        drops < 200,
        "the kernel dropped {drops} frames: {}",
        st["pnic"]
    );
    drop(stopped);
    let _ = s0.wait();
    st
}

#[test]
fn a_stopped_guests_leases_do_not_make_the_kernel_drop_the_other_guests_frames() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root(
        "a_stopped_guests_leases_do_not_make_the_kernel_drop_the_other_guests_frames",
    ) {
        return;
    }
    // The lease-aging figures below were measured on the xen configuration (every frame of
    // g0's stream leased, none aggregated away): ask for it, whatever up's default is.
    let st = stream_beside_a_stopped_g1(&["--guests", "2", "--lro", "off"]);
    let d = &st["daemon"];
    // g1's old leases were copied out of the kernel's way while the daemon was busy, not only
    // when it was about to sleep. Without that the kernel dropped 992-1542 frames in this
    // test, with it none (README, "The physical port's packet ring").
    assert!(d["aging_detaches"].as_u64().unwrap() >= 1, "{d}");
    assert!(d["aging_detached"].as_u64().unwrap() >= 1, "{d}");
}

#[test]
fn a_stopped_guests_leases_do_not_freeze_a_v3_ring() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("a_stopped_guests_leases_do_not_freeze_a_v3_ring") {
        return;
    }
    // The same on a V3 ring (port GRO), where a lease holds its whole block: g1's packets
    // pin blocks that g0's frames share.
    let st = stream_beside_a_stopped_g1(&["--guests", "2", "--port-gro", "--port-ring", "v3"]);
    let (d, p) = (&st["daemon"], &st["pnic"]);
    // The blocks g1's packets pinned were copied out of the kernel's way (before each sleep),
    // so the ring never came round to one of them and froze there. (A daemon kept off the CPU
    // for longer than the ring lasts freezes it at blocks not yet read: that is counted in
    // `kernel_ring_frozen` and not in `rx_hold_stops`, and its drops are bounded above.)
    assert!(d["leases_detached"].as_u64().unwrap() >= 1, "{d}");
    assert_eq!(p["ring"], "v3", "{p}");
    assert_eq!(p["rx_hold_stops"].as_u64(), Some(0), "{p}");
    assert_eq!(p["rx_bad_blocks"].as_u64(), Some(0), "{p}");
}
