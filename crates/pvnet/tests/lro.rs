//! End to end with receive aggregation in the driver domain: every flush policy and both
//! representations carry a GiB of real TCP into a guest intact, request/response keeps working
//! under delayed flushes, `pvnet set` reconfigures a running system under load, and a guest
//! without GSO never sees an aggregate. Needs root.

mod common;
use common::*;

const GIB: u64 = 1 << 30;

/// Streams a GiB into guest 0 of a run started with `args` and checks it arrived intact
/// and aggregated; returns the run's counters afterwards.
fn gib_through(args: &[&str]) -> serde_json::Value {
    let mut a = vec!["--guests", "1"];
    a.extend_from_slice(args);
    let run = Run::up(&a);
    stream_intact(&run, "g0", "10.77.0.10", GIB);
    let st = run.stat();
    let l = &st["lro"];
    assert!(l.is_object(), "no aggregation counters: {st}");
    // Aggregates were built and reached the guest as GSO packets.
    assert!(u(&l["segments_in"]) > 100_000, "{l}");
    assert!(u(&l["gso_out"]) > 1000, "{l}");
    assert!(l["lro_rate"].as_f64().unwrap() > 1.5, "{l}");
    assert_eq!(u(&l["flows"]), 0, "nothing held after the stream: {l}");
    assert!(u(&l["flush_latency"]["count"]) > 0, "{l}");
    let vif = &st["vifs"][0];
    assert_eq!(vif["state"], "connected");
    assert!(u(&vif["netback"]["rx_gso_packets"]) > 1000, "{vif}");
    assert!(u(&vif["netfront"]["rx_gso_packets"]) > 1000, "{vif}");
    assert_eq!(u(&st["pnic"]["kernel_drops"]), 0, "{st}");
    // Every wire frame fit its slot.
    assert_eq!(u(&st["pnic"]["rx_truncated"]), 0, "{st}");
    // Frames went from their ring slots straight to the guest's pages (leases), and no slot
    // is still leased once the stream is over.
    let pn = &st["pnic"];
    assert!(u(&pn["rx_leased"]) > u(&pn["rx_frames"]) / 2, "{pn}");
    assert_eq!(u(&pn["rx_leases_outstanding"]), 0, "{pn}");
    st
}

#[test]
fn lro_flush_every_poll_skb_mode() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("lro_flush_every_poll_skb_mode") {
        return;
    }
    let st = gib_through(&["--lro", "poll", "--lro-mode", "skb"]);
    assert!(u(&st["lro"]["flush"]["poll"]) > 0, "{}", st["lro"]);
    // Baseline bridge: skb-mode chains were linearized.
    assert!(
        u(&st["daemon"]["linearized_bytes"]) > GIB / 2,
        "{}",
        st["daemon"]
    );
    assert_eq!(st["settings"]["lro"], "poll");
}

#[test]
fn bo_forwards_chains_without_linearizing() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("bo_forwards_chains_without_linearizing") {
        return;
    }
    let st = gib_through(&["--lro", "poll", "--bo"]);
    assert_eq!(u(&st["daemon"]["linearized_bytes"]), 0, "{}", st["daemon"]);
    assert!(
        u(&st["daemon"]["chains_forwarded"]) > 1000,
        "{}",
        st["daemon"]
    );
    assert_eq!(st["settings"]["bo"], true);
}

#[test]
fn delayed_aggregation_every_second_poll_page_mode() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("delayed_aggregation_every_second_poll_page_mode") {
        return;
    }
    let st = gib_through(&["--lro", "every:2", "--lro-mode", "page"]);
    assert!(u(&st["lro"]["flush"]["every"]) > 0, "{}", st["lro"]);
    // Page-mode aggregates are fragments: nothing to linearize even without BO.
    assert_eq!(u(&st["daemon"]["linearized_bytes"]), 0, "{}", st["daemon"]);
    assert!(u(&st["daemon"]["chains_forwarded"]) > 1000);
}

#[test]
fn timeout_flush_skb_mode() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("timeout_flush_skb_mode") {
        return;
    }
    let st = gib_through(&["--lro", "timeout:50", "--lro-mode", "skb"]);
    let f = &st["lro"]["flush"];
    assert!(u(&f["timeout"]) + u(&f["size_limit"]) > 0, "{f}");
    assert_eq!(u(&f["poll"]) + u(&f["every"]), 0, "{f}");
    // No aggregate waited without bound. The latency also counts time the daemon was off the
    // CPU (it shares it with the guest, and CI machines are shared): 5 ms was once exceeded
    // here, so the bound is far above the 1 ms hold limit yet far below a stream's length.
    let max = st["lro"]["flush_latency"]["max_us"].as_f64().unwrap();
    assert!(max < 100_000.0, "{max} us");
}

#[test]
fn adaptive_flush_page_mode() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("adaptive_flush_page_mode") {
        return;
    }
    let st = gib_through(&["--lro", "adaptive", "--lro-mode", "page"]);
    assert_eq!(
        u(&st["lro"]["flush"]["poll"]) + u(&st["lro"]["flush"]["every"]),
        0
    );
}

fn rr_works(policy: &str) {
    let run = Run::up(&["--guests", "1", "--lro", policy]);
    let mut srv = server(&run, "g0", "10.77.0.10");
    let o = run.exec("remote", &["perf", "rr", "10.77.0.10", "--duration", "2"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // A held request that no later frame flushes would stall the exchange for good; any
    // steady flow of transactions shows it does not. The rate itself is the bench's to
    // measure (a CI run on a busy host once saw 879 in 2 s, each waiting for a 4 ms tick).
    assert!(u(&v["transactions"]) > 100, "{policy}: {v}");
    assert_eq!(v["errors"].as_u64(), Some(0));
    let _ = srv.wait();
    let st = run.stat();
    assert!(u(&st["lro"]["frames_in"]) > 1000, "{}", st["lro"]);
}

#[test]
fn request_response_under_delayed_and_adaptive_flush() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("request_response_under_delayed_and_adaptive_flush") {
        return;
    }
    rr_works("every:2");
    rr_works("adaptive");
}

#[test]
fn a_guest_without_gso_never_receives_an_aggregate() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("a_guest_without_gso_never_receives_an_aggregate") {
        return;
    }
    let run = Run::up(&["--guests", "1", "--lro", "every:2", "--guest-gso", "off"]);
    let mut srv = server(&run, "g0", "10.77.0.10");
    let bytes = GIB / 4;
    let v = stream(&run, "10.77.0.10", bytes);
    assert_eq!(v["receiver"]["bytes"].as_u64(), Some(bytes), "{v}");
    assert_eq!(v["receiver"]["mismatches"].as_u64(), Some(0), "{v}");
    let _ = srv.wait();
    let st = run.stat();
    let vif = &st["vifs"][0];
    assert!(u(&st["lro"]["gso_out"]) > 100, "{}", st["lro"]);
    assert!(u(&vif["netback"]["rx_gso_segmented"]) > 100, "{vif}");
    assert_eq!(u(&vif["netback"]["rx_gso_packets"]), 0, "{vif}");
    assert_eq!(u(&vif["netfront"]["rx_gso_packets"]), 0, "{vif}");
    assert_eq!(u(&vif["netback"]["rx_gso_unsupported"]), 0, "{vif}");
}

#[test]
fn set_reconfigures_a_running_system_under_load() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("set_reconfigures_a_running_system_under_load") {
        return;
    }
    // From the plain PV path (not `up`'s default, which aggregates).
    let run = Run::up(&["--guests", "1", "--lro", "off"]);
    assert!(run.stat()["lro"].is_null());
    // Bad input is refused with a reason and changes nothing.
    for (args, says) in [
        (vec!["--lro", "every:0"], "every"),
        (vec!["--lro", "sometimes"], "sometimes"),
        (vec!["--lro-mode", "pages"], "skb or page"),
        (vec!["--bo", "maybe"], "on or off"),
        (vec!["--port", "eth9", "--lro", "poll"], "eth9"),
        (vec![], "nothing to set"),
    ] {
        let mut a = vec!["set", "--id", &run.id];
        a.extend_from_slice(&args);
        fails_saying(&a, says);
    }
    assert!(run.stat()["lro"].is_null());

    let mut srv = server(&run, "g0", "10.77.0.10");
    let bytes = 2 * GIB;
    let sender = run.spawn(
        "remote",
        &[
            "perf",
            "stream",
            "10.77.0.10",
            "--duration",
            "120",
            "--bytes",
            &bytes.to_string(),
        ],
    );
    let steps: [&[&str]; 6] = [
        &["--lro", "poll"],
        &["--lro", "every:2", "--lro-mode", "page"],
        &["--bo", "on", "--lro-mode", "skb"],
        &["--lro", "timeout:100"],
        &["--lro", "adaptive"],
        &["--lro", "off"],
    ];
    for s in steps {
        std::thread::sleep(std::time::Duration::from_millis(300));
        let mut a = vec!["set", "--id", &run.id];
        a.extend_from_slice(s);
        let out = ok(&a);
        assert!(out.contains("lro "), "{out}");
    }
    let o = sender.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["receiver"]["bytes"].as_u64(), Some(bytes), "{v}");
    assert_eq!(v["receiver"]["mismatches"].as_u64(), Some(0), "{v}");
    let _ = srv.wait();
    let st = run.stat();
    assert_eq!(st["settings"]["lro"], "off");
    assert_eq!(st["settings"]["bo"], true);
    assert!(st["lro"].is_null());
    assert!(u(&st["vifs"][0]["netback"]["rx_gso_packets"]) > 0);
}
