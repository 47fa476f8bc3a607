//! A guest's transmit rate (`pvnet up --vif-rate`, `pvnet set --vif-rate`; Xen's `rate=`):
//! a limited guest's TCP stream arrives intact at about its rate, an unlimited neighbour is not
//! held to it, `stat` shows the rate and its waits, `set` lifts it on a running system, and a
//! rate for a vif that does not exist is refused, naming the guests there are, and a restarted
//! driver domain keeps the rates. Needs root.

use crate::common::*;

const MIB: u64 = 1 << 20;

/// Mbit/s the receiver measured.
fn mbps(v: &serde_json::Value) -> f64 {
    v["receiver"]["mbps"]
        .as_f64()
        .unwrap_or_else(|| panic!("{v}"))
}

fn vif(st: &serde_json::Value, dom: u64) -> &serde_json::Value {
    (st["vifs"].as_array().expect("vifs").iter())
        .find(|v| v["domid"].as_u64() == Some(dom))
        .unwrap_or_else(|| panic!("no vif {dom}: {st}"))
}

#[test]
fn a_guest_sends_at_its_rate_intact_and_set_lifts_it() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("a_guest_sends_at_its_rate_intact_and_set_lifts_it") {
        return;
    }
    fails_saying(
        &[
            "up",
            "--mode",
            "relay",
            "--vif-rate",
            "10Mb/s",
            "--foreground",
        ],
        "--vif-rate needs --mode xen",
    );
    let run = Run::up(&["--guests", "2", "--vif-rate", "g0=40Mb/s@20ms"]);
    let st = run.stat();
    assert_eq!(vif(&st, 1)["rate"]["bytes"].as_u64(), Some(100_000), "{st}");
    assert_eq!(vif(&st, 1)["rate"]["usec"].as_u64(), Some(20_000));
    assert!(vif(&st, 2)["rate"].is_null(), "g1 has no rate");

    // 12 MiB at 40 Mbit/s: about 2.5 s.
    let limited =
        flow(&run, ("g0", "remote", "10.77.0.1"), 5321, 12 * MIB, 60).expect("g0's stream");
    assert_intact(&limited, 12 * MIB);
    let (r0, r0_ratio) = (mbps(&limited), mbps(&limited) / 40.0);
    assert!(
        (0.75..=1.1).contains(&r0_ratio),
        "g0 at {r0:.1} Mbit/s against its 40"
    );
    let free = flow(&run, ("g1", "remote", "10.77.0.1"), 5322, 64 * MIB, 60).expect("g1's stream");
    assert_intact(&free, 64 * MIB);
    assert!(mbps(&free) > 160.0, "g1, unlimited, at {:.1}", mbps(&free));
    let st = run.stat();
    let nb0 = &vif(&st, 1)["netback"];
    assert!(u(&nb0["tx_credit_waits"]) > 0, "{nb0}");
    assert!(u(&nb0["tx_credit_charged"]) >= 12 * MIB, "{nb0}");
    assert_eq!(u(&vif(&st, 2)["netback"]["tx_credit_waits"]), 0);
    assert_asleep(&run, "after a limited stream");

    // A vif that does not exist, and an HVM guest's index, are refused; nothing changes.
    fails_saying(
        &["set", "--id", &run.id, "--vif-rate", "g2=1Mb/s"],
        "PV guests are g0 to g1",
    );
    fails_saying(
        &["set", "--id", &run.id, "--vif-rate", "g0=1Mb/s@5s"],
        "xl's `rate=`",
    );
    // Lifted on the running system: g0 is no longer held to it.
    let out = ok(&["set", "--id", &run.id, "--vif-rate", "g0=off"]);
    assert!(!out.contains("vif rates"), "{out}");
    assert!(vif(&run.stat(), 1)["rate"].is_null());
    let lifted = flow(&run, ("g0", "remote", "10.77.0.1"), 5323, 64 * MIB, 60)
        .expect("g0's stream, unlimited");
    assert_intact(&lifted, 64 * MIB);
    assert!(mbps(&lifted) > 160.0, "g0 lifted at {:.1}", mbps(&lifted));
    // And set again, for both.
    let out = ok(&["set", "--id", &run.id, "--vif-rate", "80Mb/s"]);
    assert!(
        out.contains("g0 80 Mbit/s @ 50 ms, g1 80 Mbit/s @ 50 ms"),
        "{out}"
    );
    assert_eq!(vif(&run.stat(), 2)["rate"]["bytes"].as_u64(), Some(500_000));
    // A restarted driver domain's netback reads the rates from the backends' directories.
    ok(&["restart-dd", "--id", &run.id]);
    let st = stat_until(&run, "both vifs reconnected", |st| {
        (1..=2).all(|d| vif(st, d)["state"] == "connected")
    });
    for d in 1..=2 {
        assert_eq!(vif(&st, d)["rate"]["bytes"].as_u64(), Some(500_000), "{st}");
    }
}
