//! End to end through the switching alternatives of the driver domain (`--switch route`,
//! `--switch bridge-nf`): verified TCP streams into and out of guests, alone and two at once,
//! and guest-to-guest pings. Needs root.

use crate::common::*;

const GIB: u64 = 1 << 30;

/// Streams `bytes` from `from` to `to` (address `to_addr`) on `port`, intact.
fn flow_ok(run: &Run, from: &str, to: &str, to_addr: &str, port: u16, bytes: u64) {
    let v = flow(run, (from, to, to_addr), port, bytes, 120)
        .unwrap_or_else(|e| panic!("{from} -> {to}: {e}"));
    assert_intact(&v, bytes);
}

/// A GiB into guest 0 and one out of it; then one into guest 0 while guest 1 sends one out;
/// then pings between the guests and to the driver domain.
fn streams_through(run: &Run) {
    flow_ok(run, "remote", "g0", "10.77.0.10", 5201, GIB);
    flow_ok(run, "g0", "remote", "10.77.0.1", 5202, GIB);
    std::thread::scope(|s| {
        s.spawn(|| flow_ok(run, "remote", "g0", "10.77.0.10", 5203, GIB));
        s.spawn(|| flow_ok(run, "g1", "remote", "10.77.0.1", 5204, GIB));
    });
    for (role, dst) in [
        ("g0", "10.77.0.11"),
        ("g1", "10.77.0.10"),
        ("g0", "10.77.0.2"),
    ] {
        ping(run, role, dst, 2);
    }
}

#[test]
fn netback_mac_routing_carries_streams_both_ways() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("netback_mac_routing_carries_streams_both_ways") {
        return;
    }
    let run = Run::up(&["--guests", "2", "--switch", "route"]);
    streams_through(&run);
    let st = run.stat();
    let sw = &st["switch"];
    assert_eq!(sw["mode"], "route", "{sw}");
    assert!(st["bridge"].is_null(), "no bridge runs: {st}");
    let r = &sw["route"];
    // 4 GiB of payload went by MAC, nothing learned, no frame spoofed or lost for want of a
    // destination.
    assert!(u(&r["forwarded"]) > 4 * GIB / 65536, "{r}");
    assert!(u(&r["flooded"]) > 0, "ARP broadcasts: {r}");
    for k in ["dropped_spoofed", "dropped_no_port", "dropped_bad_source"] {
        assert_eq!(u(&r[k]), 0, "{k}: {r}");
    }
    assert_eq!(u(&st["daemon"]["bridge_drops"]), 0, "{st}");
}

#[test]
fn the_bridge_with_its_rule_pass_carries_streams_both_ways() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("the_bridge_with_its_rule_pass_carries_streams_both_ways") {
        return;
    }
    let run = Run::up(&["--guests", "2", "--switch", "bridge-nf"]);
    streams_through(&run);
    let st = run.stat();
    let sw = &st["switch"];
    assert_eq!(sw["mode"], "bridge-nf", "{sw}");
    let f = &sw["filter"];
    // Every frame of the benchmark traffic passed the default rules (the streams arrived
    // intact, the pings were answered); what the rules dropped is the guests' own IPv6
    // chatter (MLD and DAD from the unspecified address), by the anti-spoofing rule for it.
    assert!(u(&f["accepted"]) > 4 * GIB / 65536, "{f}");
    let dropped_by = |pred: &dyn Fn(&str) -> bool| -> u64 {
        f["rules"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| {
                let t = r["rule"].as_str().unwrap();
                t.starts_with("drop") && pred(t)
            })
            .map(|r| u(&r["packets"]))
            .sum()
    };
    assert_eq!(dropped_by(&|t| !t.contains("ipv6")), 0, "{f}");
    assert_eq!(dropped_by(&|t| t.contains("ipv6")), u(&f["dropped"]), "{f}");
    assert_eq!(u(&sw["filtered"]), u(&f["dropped"]), "{sw}");
    assert!(u(&st["bridge"]["forwarded"]) > 0, "{st}");
}

#[test]
fn switch_options_are_checked() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // The command line is checked before anything needs root.
    fails_saying(&["up", "--switch", "hub"], "unknown switching mode `hub`");
    if !is_root() {
        return;
    }
    let rules = std::env::temp_dir().join(format!("pvnet-rules-{}", std::process::id()));
    std::fs::write(
        &rules,
        "policy accept\naccept proto tcp dport 80\ndrop dport 22\n",
    )
    .unwrap();
    let bad = rules.to_str().unwrap();
    for (args, want) in [
        (
            vec!["up", "--rules", bad],
            "--rules needs --switch bridge-nf",
        ),
        (
            vec!["up", "--switch", "bridge-nf", "--rules", bad],
            "line 3",
        ),
        (
            vec![
                "up",
                "--switch",
                "bridge-nf",
                "--rules",
                "/nonexistent/rules",
            ],
            "/nonexistent/rules",
        ),
        (
            vec!["up", "--mode", "linux", "--switch", "route"],
            "--switch needs the driver domain",
        ),
    ] {
        fails_saying(&args, want);
    }
    let _ = std::fs::remove_file(&rules);
}
