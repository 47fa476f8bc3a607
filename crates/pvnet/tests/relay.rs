//! End to end through the relay (`--mode relay`): the daemon writes the guests' packets
//! straight into their TAPs, without grants, rings or guest processes. Needs root.

use crate::common::*;

const MIB: u64 = 1 << 20;

#[test]
fn the_relay_carries_streams_and_pings_without_the_xen_machinery() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("the_relay_carries_streams_and_pings_without_the_xen_machinery") {
        return;
    }
    let run = Run::up(&["--mode", "relay", "--guests", "2"]);
    stream_intact(&run, "g0", "10.77.0.10", 512 * MIB);
    for (role, dst) in [
        ("g1", "10.77.0.10"),
        ("g1", "10.77.0.1"),
        ("g0", "10.77.0.2"),
    ] {
        ping(&run, role, dst, 2);
    }
    let st = run.stat();
    assert_eq!(st["mode"], "relay");
    let r = &st["relay"][0]["stats"];
    // The stream's payload went into guest 0's TAP, in batches, and its ACKs came back out.
    assert!(u(&r["to_guest_bytes"]) > 512 * MIB, "{r}");
    assert!(u(&r["batched_packets"]) > u(&r["to_guest"]) / 2, "{r}");
    assert_eq!(u(&r["to_guest_errors"]), 0, "{r}");
    assert!(u(&r["from_guest"]) > 100, "{r}");
    assert!(u(&st["relay"][1]["stats"]["from_guest"]) >= 4, "{st}");
    // Nothing of Xen's was used: no vif, no grant copy.
    assert_eq!(st["vifs"].as_array().map(Vec::len), Some(0), "{st}");
    assert_eq!(u(&st["grant"]["copy_bytes"]), 0, "{st}");
    let pn = &st["pnic"];
    assert_eq!(u(&pn["rx_leases_outstanding"]), 0, "{pn}");
    assert!(u(&pn["rx_leased"]) > u(&pn["rx_frames"]) / 2, "{pn}");
    // A relayed guest has no grants to copy between: `set --g2g` is refused.
    fails_saying(
        &["set", "--id", &run.id, "--g2g", "off"],
        "--g2g needs a run of mode xen",
    );
    // The text form shows each relayed guest's counters.
    let text = ok(&["stat", "--id", &run.id]);
    assert!(
        text.contains("relay 1") && text.contains("relay 2") && text.contains("to_guest_bytes="),
        "{text}"
    );
}

#[test]
fn the_relay_aggregates_and_passes_chains_whole() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("the_relay_aggregates_and_passes_chains_whole") {
        return;
    }
    let run = Run::up(&["--mode", "relay", "--lro", "adaptive", "--bo"]);
    stream_intact(&run, "g0", "10.77.0.10", 512 * MIB);
    let st = run.stat();
    let l = &st["lro"];
    assert!(l["lro_rate"].as_f64().unwrap() > 1.5, "{l}");
    assert!(u(&l["gso_out"]) > 1000, "{l}");
    assert!(u(&st["daemon"]["chains_forwarded"]) > 1000, "{st}");
    assert_eq!(u(&st["daemon"]["linearized_bytes"]), 0, "{st}");
    let r = &st["relay"][0]["stats"];
    assert!(u(&r["to_guest_bytes"]) > 512 * MIB, "{r}");
    assert_eq!(u(&r["to_guest_errors"]), 0, "{r}");
}

#[test]
fn relay_mode_refuses_what_it_has_no_use_for() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("relay_mode_refuses_what_it_has_no_use_for") {
        return;
    }
    for (args, want) in [
        (&["up", "--mode", "relay", "--guests", "0"][..], "--guests"),
        (&["up", "--mode", "relay", "--attach", "1"][..], "--attach"),
        (
            &["up", "--mode", "relay", "--guest-gso", "off"][..],
            "--guest-gso",
        ),
        (&["bench", "--paired", "relay,xen"][..], "not a PV"),
    ] {
        fails_saying(args, want);
    }
}

#[test]
fn a_relayed_guest_that_deletes_its_tap_takes_only_itself_off() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("a_relayed_guest_that_deletes_its_tap_takes_only_itself_off") {
        return;
    }
    // The daemon serves a relayed guest's TAP itself: deleted from inside the guest, it reads
    // EBADFD and polls ready for ever, which must not keep the daemon awake.
    let run = Run::up(&["--mode", "relay", "--guests", "2"]);
    let id = pvnet_testbed::RunId::parse(&run.id).unwrap();
    let g0 = pvnet_testbed::Netns::open(&id.ns_name("g0")).unwrap();
    g0.run(|| pvnet_testbed::link::delete_link("eth0").unwrap())
        .unwrap();
    let st = stat_until(&run, "the daemon takes guest 0's TAP off", |st| {
        u(&st["port"]["guest_taps_lost"]) == 1
    });
    assert_eq!(
        (u(&st["port"]["reopened"]), st["port"]["open"].as_bool()),
        (0, Some(true)),
        "only the guest's own port went: {}",
        st["port"]
    );
    assert_asleep(&run, "after a relayed guest deleted its TAP");
    // The other guest goes on.
    stream_intact(&run, "g1", "10.77.0.11", 64 * MIB);
    ping(&run, "g1", "10.77.0.2", 2);
}
