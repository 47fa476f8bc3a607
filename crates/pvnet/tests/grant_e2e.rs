//! End to end under netback's `map` and `persistent` grant mechanisms (`pvnet up --grant`): a
//! GiB of real TCP into a guest and a GiB out of it, every byte verified, and the vif's
//! counters showing which mechanism carried it. Needs root.

mod common;
use common::*;

const GIB: u64 = 1 << 30;

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
            "180",
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
    let run = Run::up(&["--guests", "1", "--grant", mech]);
    stream_intact(&run, "g0", "10.77.0.10", GIB);
    stream_between(&run, "g0", "remote", "10.77.0.1", GIB);
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
    fails_saying(&["up", "--grant", "flip"], "unknown grant mechanism");
}
