//! End to end under netback's `map`, `persistent`, `premapped`, `static` and `flip` grant
//! mechanisms (`pvnet up --grant`): a GiB of real TCP into a guest and a GiB out of it, every
//! byte verified, alone and (pool mechanisms, flip) with a second guest streaming at the same
//! time, and the vif's counters showing which mechanism carried it. Needs root.

use crate::common::*;

const GIB: u64 = 1 << 30;

/// `pvnet up` for these tests, unpinned (`--cpu -1`): the driver domain, the frontends and the
/// guests' TCP stacks run on both CPUs at once, so grant entries, rings and the flip's
/// committed/completed flags are written on one CPU and read on the other while they change,
/// which the other e2e tests (and the bench), pinned to one receiving CPU, never do. It also
/// lets the flip, whose remaps cost most, use the second CPU (a GiB in about 16 s instead of 25
/// on this machine).
fn up(args: &[&str]) -> Run {
    let mut a = vec!["--cpu", "-1"];
    a.extend_from_slice(args);
    Run::up(&a)
}

/// Streams `bytes` from `from` to a `perf server` in `to` at `addr`; every byte verified.
fn stream_between(run: &Run, from: &str, to: &str, addr: &str, bytes: u64) {
    let mut srv = server(run, to, addr);
    let o = run.exec(
        from,
        &[
            "perf",
            "stream",
            addr,
            "--duration",
            "900",
            "--bytes",
            &bytes.to_string(),
        ],
    );
    assert!(
        o.status.success(),
        "stream {from} -> {addr} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stream json");
    assert_eq!(v["sent"].as_u64(), Some(bytes), "{v}");
    assert_eq!(v["receiver"]["bytes"].as_u64(), Some(bytes), "{v}");
    assert_eq!(v["receiver"]["mismatches"].as_u64(), Some(0), "{v}");
    let _ = srv.wait();
}

/// A GiB into the guest and a GiB out of it under `mech`; returns the run's stats.
fn both_ways(mech: &str) -> serde_json::Value {
    let run = up(&["--guests", "1", "--grant", mech]);
    // A slow path (flip on a loaded machine) gets 15 minutes, not the usual two.
    let mut srv = server(&run, "g0", "10.77.0.10");
    let v = stream_capped(&run, "10.77.0.10", GIB, 900);
    assert_intact(&v, GIB);
    let _ = srv.wait();
    stream_between(&run, "g0", "remote", "10.77.0.1", GIB);
    // One more report of the frontend's counters after the streams.
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let st = run.stat();
    let vif = &st["vifs"][0];
    assert_eq!(vif["state"], "connected", "{vif}");
    assert!(vif["fatal"].is_null(), "{vif}");
    let nb = &vif["netback"];
    assert_eq!(nb["grant_mechanism"], mech, "{nb}");
    assert!(u(&nb["rx_bytes"]) > GIB && u(&nb["tx_bytes"]) > GIB, "{nb}");
    st
}

#[test]
fn one_gib_each_way_under_map() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("one_gib_each_way_under_map") {
        return;
    }
    let st = both_ways("map");
    let nb = &st["vifs"][0]["netback"];
    // Every page mapped for a packet was unmapped again; at least one map per 64 KiB moved.
    assert!(u(&nb["grant_maps"]) > 2 * GIB / 65536, "{nb}");
    assert_eq!(u(&nb["grant_maps"]), u(&nb["grant_unmaps"]), "{nb}");
    assert_eq!(u(&nb["persistent_hits"]) + u(&nb["persistent_misses"]), 0);
    // RX is not grant-copied; TX copies at most its headers.
    assert_eq!(u(&nb["rx_copy_ops"]), 0, "{nb}");
    assert!(u(&st["grant"]["copy_bytes"]) <= 128 * u(&nb["tx_packets"]));
}

#[test]
fn one_gib_each_way_under_persistent() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("one_gib_each_way_under_persistent") {
        return;
    }
    let st = both_ways("persistent");
    let nb = &st["vifs"][0]["netback"];
    // The frontend took the offer: each of its buffers was mapped once and reused.
    let misses = u(&nb["persistent_misses"]);
    assert!(misses > 0 && misses <= 512, "{nb}");
    assert!(u(&nb["persistent_hits"]) > 100 * misses, "{nb}");
    assert_eq!(u(&nb["persistent_evictions"]), 0, "{nb}");
    assert_eq!(u(&nb["persistent_mapped"]), misses, "{nb}");
    assert_eq!(u(&nb["grant_maps"]), misses, "{nb}");
    assert_eq!(
        u(&st["grant"]["copy_ops"]),
        0,
        "no grant copy at all: {}",
        st["grant"]
    );
}

#[test]
fn grant_needs_the_xen_mode() {
    if skip_unless_root("grant_needs_the_xen_mode") {
        return;
    }
    fails_saying(
        &["up", "--mode", "relay", "--grant", "map"],
        "--grant map needs --mode xen",
    );
    fails_saying(&["up", "--grant", "flop"], "unknown grant mechanism");
    fails_saying(
        &["up", "--grant", "flip", "--gro"],
        "takes wire-sized frames only",
    );
}

/// The frame counters of a flip run: every domain owns what it started with (the driver
/// domain its pool, each guest its 256 RX buffers), nothing is free, and every packet the
/// guests took was a flip the hypervisor made.
fn assert_frames_conserved(st: &serde_json::Value, guests: usize) {
    let f = &st["frames"];
    assert_eq!(u(&f["free"]), 0, "{f}");
    let doms = f["domains"].as_array().expect("domains");
    assert_eq!(doms.len(), 1 + guests, "{f}");
    assert_eq!(u(&doms[0]["frames"]), 2048, "{f}");
    for d in &doms[1..] {
        assert_eq!(u(&d["frames"]), 256, "{f}");
    }
    assert_eq!(u(&f["flips_refused"]), 0, "{f}");
    let vifs = st["vifs"].as_array().expect("vifs");
    let flips: u64 = vifs.iter().map(|v| u(&v["netback"]["rx_flips"])).sum();
    let remapped: u64 = vifs.iter().map(|v| u(&v["netfront"]["rx_flips"])).sum();
    assert_eq!(u(&f["flips"]), flips, "{f}");
    // The frontends report every half second (the callers wait for one after the streams):
    // a report may still miss the last few packets (the connections' closing).
    assert!(
        remapped <= flips && remapped + 64 > flips,
        "{remapped} of {flips}"
    );
    for v in vifs {
        let nb = &v["netback"];
        assert_eq!(nb["grant_mechanism"], "flip", "{nb}");
        assert_eq!(u(&nb["rx_flip_no_frame"]), 0, "{nb}");
        assert_eq!(u(&nb["rx_flips"]), u(&nb["rx_packets"]), "{nb}");
        assert_eq!(u(&v["netfront"]["rx_flip_bad_frame"]), 0, "{v}");
    }
    // A packet is copied into a frame before its flip only when it is not in one of the port's
    // frames: the driver domain's own (its ARP), a flooded frame's extra copies (a frame to a
    // MAC address the bridge has not learnt, or no longer holds), or one the daemon took out of
    // its frame while it waited. Each of those has a counter; nothing else may be copied.
    let copied: u64 = vifs
        .iter()
        .map(|v| u(&v["netback"]["rx_flip_copied"]))
        .sum();
    let d = &st["daemon"];
    let explained = [
        "ddtap_tx",
        "flooded_copies",
        "leases_detached",
        "aging_detached",
    ]
    .iter()
    .map(|k| u(&d[*k]))
    .sum::<u64>();
    assert!(
        copied <= explained,
        "{copied} copied, {explained} explained: {d}"
    );
    // And those are rare: nearly every packet leaves in the frame the port received it into.
    let packets: u64 = vifs.iter().map(|v| u(&v["netback"]["rx_packets"])).sum();
    assert!(copied * 100 < packets, "{copied} of {packets} copied: {d}");
}

#[test]
fn one_gib_each_way_under_flip() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("one_gib_each_way_under_flip") {
        return;
    }
    let st = both_ways("flip");
    let nb = &st["vifs"][0]["netback"];
    // RX by page transfer: no RX grant copy; TX by grant copy, as in Xen.
    assert_eq!(u(&nb["rx_copy_ops"]), 0, "{nb}");
    assert!(u(&nb["rx_flips"]) > GIB / 1500, "{nb}");
    assert!(u(&st["grant"]["copy_bytes"]) > GIB, "{}", st["grant"]);
    assert_frames_conserved(&st, 1);
}

#[test]
fn two_guests_receive_then_send_a_gib_each_at_once_under_flip() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("two_guests_receive_then_send_a_gib_each_at_once_under_flip") {
        return;
    }
    let run = up(&["--guests", "2", "--grant", "flip"]);
    std::thread::scope(|s| {
        for (i, (g, addr)) in [("g0", "10.77.0.10"), ("g1", "10.77.0.11")]
            .into_iter()
            .enumerate()
        {
            let run = &run;
            s.spawn(move || {
                let v = flow(run, ("remote", g, addr), 5301 + i as u16, GIB, 900)
                    .unwrap_or_else(|e| panic!("remote -> {g}: {e}"));
                assert_intact(&v, GIB);
            });
        }
    });
    // Then both send a GiB at once (TX under flip is grant copy into driver-domain frames).
    std::thread::scope(|s| {
        for (i, g) in ["g0", "g1"].into_iter().enumerate() {
            let run = &run;
            s.spawn(move || {
                let v = flow(run, (g, "remote", "10.77.0.1"), 5311 + i as u16, GIB, 900)
                    .unwrap_or_else(|e| panic!("{g} -> remote: {e}"));
                assert_intact(&v, GIB);
            });
        }
    });
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let st = run.stat();
    for v in st["vifs"].as_array().expect("vifs") {
        assert_eq!(v["state"], "connected", "{v}");
        assert!(u(&v["netback"]["rx_bytes"]) > GIB, "{v}");
        assert!(u(&v["netback"]["tx_bytes"]) > GIB, "{v}");
        assert!(u(&v["netback"]["rx_flips"]) > 0, "{v}");
    }
    assert_frames_conserved(&st, 2);
    // Aggregation cannot be turned on later either: `up` refuses it on the frame port.
    for change in [
        &["--lro", "poll"][..],
        &["--bo", "on"],
        &["--lro-mode", "page"],
    ] {
        let o = pvnet(&[&["set", "--id", &run.id][..], change].concat());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.contains("wire-sized frames only"),
            "{change:?}: {err}"
        );
    }
    assert!(run.stat()["lro"].is_null());
}

#[test]
fn guest_to_guest_under_flip_is_intact_and_flipped_without_a_second_copy() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("guest_to_guest_under_flip_is_intact_and_flipped_without_a_second_copy") {
        return;
    }
    let run = up(&["--guests", "2", "--grant", "flip"]);
    let v = flow(&run, ("g0", "g1", "10.77.0.11"), 5311, GIB, 900)
        .unwrap_or_else(|e| panic!("g0 -> g1: {e}"));
    assert_intact(&v, GIB);
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let st = run.stat();
    let (a, b) = (&st["vifs"][0]["netback"], &st["vifs"][1]["netback"]);
    // g0's packets were copied into driver-domain frames and flipped on to g1 as they were.
    assert!(u(&a["tx_into_frame"]) > GIB / 1500, "{a}");
    assert!(u(&b["rx_flips"]) > GIB / 1500, "{b}");
    // Copies before a flip (`rx_flip_copied`) are bounded by the counters that explain them,
    // as in every flip test, not by a count the machine's load can exceed.
    assert_frames_conserved(&st, 2);
}

/// The counters every pool vif shows after a GiB each way: the pool (512 pages) mapped once
/// and held, one pool copy per data slot, no grant copy, no per-packet map.
fn assert_pool_carried(st: &serde_json::Value, vif: usize, mech: &str) {
    let v = &st["vifs"][vif];
    assert_eq!(v["state"], "connected", "{v}");
    assert!(v["fatal"].is_null(), "{v}");
    let nb = &v["netback"];
    assert_eq!(nb["grant_mechanism"], mech, "{nb}");
    assert_eq!(
        (u(&nb["pool_maps"]), u(&nb["pool_mapped"])),
        (512, 512),
        "{nb}"
    );
    assert_eq!(u(&nb["pool_unmaps"]), 0, "{nb}");
    let (mine, other) = match mech {
        "static" => ("static_copies", "premapped_copies"),
        _ => ("premapped_copies", "static_copies"),
    };
    let slots = u(&nb["rx_slots"]) + u(&nb["tx_slots"]);
    assert!(
        u(&nb[mine]) > 2 * GIB / 65536 && u(&nb[mine]) <= slots,
        "{nb}"
    );
    assert_eq!(u(&nb[other]), 0, "{nb}");
    assert_eq!(u(&nb["grant_maps"]), 0, "{nb}");
    assert_eq!(
        (u(&nb["rx_copy_ops"]), u(&nb["tx_copy_ops"])),
        (0, 0),
        "{nb}"
    );
    assert!(u(&nb["pool_audits"]) > 0, "{nb}");
}

/// Both ways under a pool mechanism, alone.
fn pool_alone(mech: &str) {
    let st = both_ways(mech);
    assert_pool_carried(&st, 0, mech);
    // Two rings and the pool were mapped, once; nothing was grant-copied.
    assert_eq!(u(&st["grant"]["maps"]), 2 + 512, "{}", st["grant"]);
    assert_eq!(u(&st["grant"]["copy_ops"]), 0, "{}", st["grant"]);
}

/// Both ways under `mech` for two guests at once: g0 and g1 each receive a GiB from the
/// remote host at the same time, then each send one; both vifs ran `mech` and carried them.
/// Returns the run's stats.
fn with_a_second_guest(mech: &str) -> serde_json::Value {
    let run = up(&["--guests", "2", "--grant", mech]);
    let flows = |dirs: [(&str, &str, &str); 2]| {
        std::thread::scope(|s| {
            let h: Vec<_> = dirs
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    let run = &run;
                    s.spawn(move || flow(run, *d, 5301 + i as u16, GIB, 180))
                })
                .collect();
            for (h, d) in h.into_iter().zip(dirs) {
                let v = h.join().unwrap().unwrap_or_else(|e| panic!("{d:?}: {e}"));
                assert_intact(&v, GIB);
            }
        })
    };
    flows([
        ("remote", "g0", "10.77.0.10"),
        ("remote", "g1", "10.77.0.11"),
    ]);
    flows([("g0", "remote", "10.77.0.1"), ("g1", "remote", "10.77.0.1")]);
    let st = run.stat();
    for vif in 0..2 {
        let v = &st["vifs"][vif];
        assert_eq!(v["state"], "connected", "{v}");
        let nb = &v["netback"];
        assert_eq!(nb["grant_mechanism"], mech, "{nb}");
        assert!(u(&nb["rx_bytes"]) > GIB && u(&nb["tx_bytes"]) > GIB, "{nb}");
    }
    st
}

/// [`with_a_second_guest`] under a pool mechanism: the pools carried it, mapped once each.
fn pool_with_a_second_guest(mech: &str) {
    let st = with_a_second_guest(mech);
    for vif in 0..2 {
        assert_pool_carried(&st, vif, mech);
    }
    assert_eq!(u(&st["grant"]["maps"]), 2 * (2 + 512), "{}", st["grant"]);
}

#[test]
fn one_gib_each_way_under_map_with_a_second_guest() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("one_gib_each_way_under_map_with_a_second_guest") {
        return;
    }
    let st = with_a_second_guest("map");
    // Every data page was mapped and unmapped per packet: no mapping is left.
    for vif in 0..2 {
        let nb = &st["vifs"][vif]["netback"];
        assert!(u(&nb["grant_maps"]) > GIB / 65536, "{nb}");
        assert_eq!(u(&nb["grant_maps"]), u(&nb["grant_unmaps"]), "{nb}");
    }
}

#[test]
fn one_gib_each_way_under_persistent_with_a_second_guest() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("one_gib_each_way_under_persistent_with_a_second_guest") {
        return;
    }
    let st = with_a_second_guest("persistent");
    for vif in 0..2 {
        let nb = &st["vifs"][vif]["netback"];
        let misses = u(&nb["persistent_misses"]);
        assert!(misses > 0 && misses <= 512, "{nb}");
        assert!(u(&nb["persistent_hits"]) > 100 * misses, "{nb}");
    }
}

#[test]
fn one_gib_each_way_under_premapped() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("one_gib_each_way_under_premapped") {
        return;
    }
    pool_alone("premapped");
}

#[test]
fn one_gib_each_way_under_static() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("one_gib_each_way_under_static") {
        return;
    }
    pool_alone("static");
}

#[test]
fn one_gib_each_way_under_premapped_with_a_second_guest() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("one_gib_each_way_under_premapped_with_a_second_guest") {
        return;
    }
    pool_with_a_second_guest("premapped");
}

#[test]
fn one_gib_each_way_under_static_with_a_second_guest() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("one_gib_each_way_under_static_with_a_second_guest") {
        return;
    }
    pool_with_a_second_guest("static");
}

/// The guest's side of `static`: netfront copies every packet out of (and into) the static
/// buffer, and reports it (`netfront.static_copies`, sent with the guest's periodic counters).
#[test]
fn static_copies_in_the_guest_too() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("static_copies_in_the_guest_too") {
        return;
    }
    let run = up(&["--guests", "1", "--grant", "static"]);
    stream_intact(&run, "g0", "10.77.0.10", 64 << 20);
    let mut front = 0;
    for _ in 0..50 {
        let st = run.stat();
        front = st["vifs"][0]["netfront"]["static_copies"]
            .as_u64()
            .unwrap_or(0);
        if front >= (64 << 20) / 65536 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(
        front >= (64 << 20) / 65536,
        "netfront static_copies {front}"
    );
}
