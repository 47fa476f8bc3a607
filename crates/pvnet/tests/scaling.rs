//! `pvnet bench --sweep guests`: the consolidation goals judged in the report, per repetition
//! on fresh testbeds and on standing testbeds whose streams are switched on and off in slices
//! (`pvnet perf streams`); every stream verified; then, in the same run, a workload of
//! `--scenario`. Needs root (namespaces, veth, TAP).

use crate::common::*;

#[test]
fn a_guest_sweep_judges_the_goals_on_fresh_testbeds_and_on_one_then_runs_a_workload() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root(
        "a_guest_sweep_judges_the_goals_on_fresh_testbeds_and_on_one_then_runs_a_workload",
    ) {
        return;
    }
    let out = std::env::temp_dir().join(format!("pvnet-scaling-{}", unique_id()));
    let stdout = ok(&[
        "bench",
        "--quick",
        "--sweep",
        "guests",
        "--configs",
        "xen,relay",
        "--sweep-values",
        "1,2",
        "--reps",
        "2",
        "--paired-rounds",
        "0",
        "--scaling-rounds",
        "4",
        // Issue 22's study in one run: the mixed host after the sweep, with its own
        // configuration and its own (quick) repetitions, not the sweep's.
        "--scenario",
        "mixed",
        "--scenario-configs",
        "adaptive",
        "--stream-pace",
        "400",
        "--out",
        out.to_str().unwrap(),
    ]);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();

    // Fresh testbeds: each repetition's 2-guest aggregate over the same repetition's one.
    let s = &v["scaling"][0];
    assert_eq!(s["config"], "xen/g2", "{s}");
    assert_eq!(s["one_guest_config"], "xen");
    let ratios = s["round_ratios"].as_array().unwrap();
    assert_eq!(ratios.len(), 2, "{s}");
    assert!(ratios.iter().all(|r| r.as_f64().unwrap() > 0.0), "{s}");
    assert!(
        s["ratio_ci95"].as_array().is_some(),
        "two rounds give an interval: {s}"
    );
    let verdict = s["aggregate_verdict"].as_str().unwrap();
    assert!(["holds", "fails", "undecided"].contains(&verdict), "{s}");

    // Standing testbeds: 4 rounds on two testbeds one after the other (the default eight
    // testbeds, at most half the rounds), each round with a one-guest and a two-guest slice
    // that moved data, the Jain's index of each 2-guest slice, and every stream verified whole.
    let o = &v["scaling_one_testbed"][0];
    assert_eq!(o["config"], "xen/g2", "{o}");
    assert_eq!(o["rounds"], 4);
    assert_eq!(o["testbed_rounds"], serde_json::json!([2, 2]), "{o}");
    let ids = o["run_ids"].as_array().unwrap();
    assert!(
        ids.len() == 2 && ids[0] != ids[1],
        "two testbeds of their own: {o}"
    );
    for k in ["one_mbps", "all_mbps", "ratios", "jain"] {
        let a = o[k].as_array().unwrap();
        assert_eq!(a.len(), 4, "{k}: {o}");
        assert!(a.iter().all(|x| x.as_f64().unwrap() > 0.0), "{k}: {o}");
    }
    assert!(o["jain"]
        .as_array()
        .unwrap()
        .iter()
        .all(|j| j.as_f64().unwrap() <= 1.0 + 1e-9));
    // Both guests' bytes over the two-guest slices, and the session's Jain's index of them.
    let sums = o["stream_bytes"].as_array().unwrap();
    assert_eq!(sums.len(), 2, "{o}");
    assert!(sums.iter().all(|b| b.as_u64().unwrap() > 0), "{o}");
    let j = o["jain_overall"].as_f64().unwrap();
    assert!(j > 0.5 && j <= 1.0 + 1e-9, "{o}");
    // Four rounds of a second or more at hundreds of Mbit/s at the least.
    assert!(o["bytes_verified"].as_u64().unwrap() > 100_000_000, "{o}");
    // The senders' sockets sampled in every slice: one figure per round on each side, bytes
    // in flight and an RTT from a live connection; BBR's estimate when the host runs BBR.
    let snd = &o["senders"];
    for k in ["in_flight_one", "in_flight_all", "rtt_one_us", "rtt_all_us"] {
        let a = snd[k].as_array().unwrap();
        assert_eq!(a.len(), 4, "{k}: {snd}");
        assert!(a.iter().all(|x| x.as_u64().unwrap() > 0), "{k}: {snd}");
    }
    let cc = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control").unwrap();
    let min_rtt = snd["bbr_min_rtt_all_us"].as_array().unwrap();
    assert_eq!(
        min_rtt.len(),
        if cc.trim() == "bbr" { 4 } else { 0 },
        "{cc}: {snd}"
    );
    assert_eq!(
        v["scaling_one_testbed_errors"].as_array().map(Vec::len),
        Some(0)
    );
    // `relay`, xen's floor, ran beside it, its testbeds interleaved with xen's (xen's first,
    // relay's first, xen's second, relay's second), and the report sets xen against it.
    let f = &v["scaling_one_testbed"][1];
    assert_eq!(f["config"], "relay/g2", "{f}");
    assert_eq!(f["testbed_rounds"], serde_json::json!([2, 2]), "{f}");
    let starts = |o: &serde_json::Value| -> Vec<f64> {
        let a = o["testbed_starts_s"].as_array().unwrap();
        a.iter().map(|x| x.as_f64().unwrap()).collect()
    };
    let (x, r) = (starts(o), starts(f));
    assert!(
        x.len() == 2 && r.len() == 2 && x[0] < r[0] && r[0] < x[1] && x[1] < r[1],
        "interleaved: xen {x:?}, relay {r:?}"
    );
    let vs = &v["scaling_one_testbed_vs_floor"][0];
    assert_eq!(
        (&vs["config"], &vs["floor"]),
        (&o["config"], &f["config"]),
        "{vs}"
    );
    let q = vs["quotient"].as_f64().unwrap();
    let want = o["geomean"].as_f64().unwrap() / f["geomean"].as_f64().unwrap();
    assert!((q - want).abs() < 1e-9, "{vs}");
    assert_eq!(v["parameters"]["scaling_rounds"], 4);
    assert_eq!(v["parameters"]["scaling_testbeds"], 2);
    for text in [&stdout, &report] {
        assert!(
            text.contains("Against one guest on standing testbeds"),
            "{text}"
        );
        assert!(text.contains("testbeds, one after the other"), "{text}");
        assert!(text.contains("aggregate ≥ 0.9× one guest"), "{text}");
        assert!(text.contains("its floor in this run"), "{text}");
        assert!(text.contains("senders' bytes in flight"), "{text}");
    }

    // The workload ran after the sweep, into the same directory, and report.md links it.
    assert!(
        report.contains("[scenario-mixed.md](scenario-mixed.md)"),
        "{report}"
    );
    crate::consolidation::table_filled(&stdout, "Mixed host:", &["adaptive"]);
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("scenario-mixed.json")).unwrap())
            .unwrap();
    assert_eq!(m["configs"], serde_json::json!(["adaptive"]), "{m}");
    assert_eq!(
        m["params"]["reps"], 1,
        "quick's, not the sweep's --reps 2: {m}"
    );
    assert_eq!(m["params"]["stream_pace_mbps"], 400);
    let samples = m["samples"].as_array().unwrap();
    assert_eq!(samples.len(), 1, "{m}");
    for leg in ["quiet", "loaded"] {
        let l = &samples[0][leg];
        assert_eq!(l["errors"].as_array().unwrap().len(), 0, "{l}");
        assert!(l["rr"]["transactions"].as_u64().unwrap() > 0, "{l}");
    }
    assert!(samples[0]["loaded"]["bytes"].as_u64().unwrap() > 0);
    assert_run_gone(samples[0]["run_id"].as_str().unwrap());
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn scaling_rounds_belong_to_a_guest_sweep() {
    fails_saying(
        &["bench", "--quick", "--scaling-rounds", "5"],
        "--scaling-rounds belongs to --sweep guests",
    );
}
