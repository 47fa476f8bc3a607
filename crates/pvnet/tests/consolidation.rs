//! The scenarios of issue 22 end to end, in a very short form: `pvnet bench --scenario
//! neighbour`, `mixed` and `restart` run two guests under two configurations, print their
//! table, write scenario-NAME.md and .json with real figures, and leave nothing behind.
//! Needs root. Asserts what the runs must show whatever the machine's speed (bytes moved,
//! transactions done, the neighbour's CPU time charged to it), never how fast.

use crate::common::*;

/// Runs a scenario with `configs` (and `extra` arguments) into a fresh directory: its stdout
/// and scenario JSON.
fn scenario(
    name: &str,
    configs: &str,
    extra: &[&str],
) -> (String, serde_json::Value, std::path::PathBuf) {
    let out = std::env::temp_dir().join(format!("pvnet-scenario-{}", unique_id()));
    let mut args = vec![
        "bench",
        "--scenario",
        name,
        "--configs",
        configs,
        "--reps",
        "1",
        "--duration",
        "1",
        "--out",
        out.to_str().unwrap(),
    ];
    // Only the neighbour's TCP_RR has a length of its own; mixed's runs as long as its stream.
    if name == "neighbour" {
        args.extend_from_slice(&["--rr-duration", "0.5"]);
    }
    args.extend_from_slice(extra);
    let stdout = ok(&args);
    let json = std::fs::read_to_string(out.join(format!("scenario-{name}.json"))).unwrap();
    (stdout, serde_json::from_str(&json).unwrap(), out)
}

fn f(v: &serde_json::Value, what: &str) -> f64 {
    v.as_f64()
        .unwrap_or_else(|| panic!("{what} is not a number: {v}"))
}

/// Every row of the printed table has a number in every column (no dash).
pub(crate) fn table_filled(stdout: &str, title: &str, columns: &[&str]) {
    let t = stdout
        .split(title)
        .nth(1)
        .unwrap_or_else(|| panic!("no table {title:?} in {stdout}"));
    let mut lines = t.lines().skip(1);
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header, columns, "{t}");
    let mut rows = 0;
    for l in lines.take_while(|l| !l.trim().is_empty()) {
        let cells: Vec<&str> = l.split_whitespace().rev().take(columns.len()).collect();
        for c in cells {
            assert!(c.parse::<f64>().is_ok(), "row {l:?} has {c:?}");
        }
        rows += 1;
    }
    assert!(rows >= 8, "{t}");
}

#[test]
fn the_neighbour_scenario_runs_and_charges_the_neighbour() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("the_neighbour_scenario_runs_and_charges_the_neighbour") {
        return;
    }
    let (stdout, v, out) = scenario("neighbour", "xen,adaptive", &[]);
    table_filled(&stdout, "Neighbour:", &["xen", "adaptive"]);
    assert!(std::fs::read_to_string(out.join("scenario-neighbour.md"))
        .unwrap()
        .contains("| TCP_RR of guest 0 alone (trans/s) |"));
    let samples = v["samples"].as_array().unwrap();
    assert_eq!(samples.len(), 2);
    for s in samples {
        for leg in ["quiet", "loaded"] {
            let l = &s[leg];
            assert_eq!(l["errors"].as_array().unwrap().len(), 0, "{s}");
            assert!(l["bytes"].as_u64().unwrap() > 0, "{s}");
            assert!(f(&l["throughput_mbps"], "throughput") > 0.0, "{s}");
            assert!(l["rr"]["transactions"].as_u64().unwrap() > 0, "{s}");
            assert!(f(&l["guest0_cpu"], "guest 0's share") > 0.0, "{s}");
        }
        // The neighbour burned the receiving CPU only in the loaded leg, and it was charged
        // to guest 1; in the quiet leg guest 1 was idle.
        let burn = f(&s["loaded"]["guest1_cpu"], "neighbour's share");
        let idle = f(&s["quiet"]["guest1_cpu"], "idle guest 1's share");
        assert!(burn > 0.05, "the neighbour hardly ran: {s}");
        assert!(burn > idle, "{s}");
    }
    assert!(v["loadavg_start"].as_str().is_some_and(|l| !l.is_empty()));
    // The memory probe at the start and the end, in the JSON and the report's header.
    for when in ["start", "end"] {
        let p = &v["memory_probe"][when];
        assert!(
            f(&p["random_read_ns_64mib"], "the probe") > 0.0,
            "{when}: {v}"
        );
        assert!(p["cache_mib"].is_u64(), "{when}: {p}");
    }
    assert!(std::fs::read_to_string(out.join("scenario-neighbour.md"))
        .unwrap()
        .contains("cache answering at cache speed"));
    let runs: Vec<&str> = samples
        .iter()
        .map(|s| s["run_id"].as_str().unwrap())
        .collect();
    for id in runs {
        assert_run_gone(id);
    }
}

#[test]
fn the_mixed_scenario_runs_and_reports_percentiles() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("the_mixed_scenario_runs_and_reports_percentiles") {
        return;
    }
    // Guest 0's stream paced (`--stream-pace`): every policy carries the same bytes.
    let (stdout, v, out) = scenario("mixed", "xen,every:4", &["--stream-pace", "400"]);
    table_filled(&stdout, "Mixed host:", &["xen", "every:4"]);
    assert!(std::fs::read_to_string(out.join("scenario-mixed.md"))
        .unwrap()
        .contains("paced at 400 Mbit/s"));
    assert_eq!(v["params"]["stream_pace_mbps"], 400);
    for s in v["samples"].as_array().unwrap() {
        for leg in ["quiet", "loaded"] {
            let l = &s[leg];
            assert_eq!(l["errors"].as_array().unwrap().len(), 0, "{s}");
            let rr = &l["rr"];
            assert!(rr["transactions"].as_u64().unwrap() > 0, "{s}");
            let (p50, p90, p99) = (
                f(&rr["p50_us"], "p50"),
                f(&rr["p90_us"], "p90"),
                f(&rr["p99_us"], "p99"),
            );
            assert!(0.0 < p50 && p50 <= p90 && p90 <= p99, "{rr}");
        }
        // The bulk stream ran beside the TCP_RR only in the loaded leg.
        assert_eq!(s["quiet"]["bytes"].as_u64(), Some(0), "{s}");
        assert!(s["loaded"]["bytes"].as_u64().unwrap() > 0, "{s}");
        // The pace held the stream to its wire's speed.
        let mbps = f(&s["loaded"]["throughput_mbps"], "the paced stream");
        assert!(mbps > 0.0 && mbps <= 400.0 * 1.05, "{s}");
        assert!(
            f(&s["loaded"]["guest0_cpu"], "guest 0's share") > 0.0,
            "{s}"
        );
        assert_run_gone(s["run_id"].as_str().unwrap());
    }
}

#[test]
fn scenario_arguments_are_checked() {
    // No root needed: refused before anything starts.
    let o = pvnet(&["bench", "--scenario", "neighbour", "--configs", "linux"]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("compares flush policies"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = pvnet(&["bench", "--scenario", "mixed", "--guests", "4"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot be used with"));
    // With --sweep guests the workloads follow the sweep; their arguments are checked before
    // the sweep starts.
    for (args, says) in [
        (
            &["--sweep", "timeout", "--scenario", "mixed"][..],
            "not with another --sweep",
        ),
        (
            &["--scenario", "mixed", "--scenario-configs", "xen"],
            "--scenario-configs belongs to --sweep guests",
        ),
        (
            &["--scenario", "mixed", "--paired-rounds", "3"],
            "--paired-rounds belongs to",
        ),
        (
            &[
                "--sweep",
                "guests",
                "--scenario",
                "mixed",
                "--scenario-configs",
                "linux",
            ],
            "compares flush policies",
        ),
        (
            &[
                "--sweep",
                "guests",
                "--scenario",
                "mixed",
                "--restarts",
                "2",
            ],
            "--restarts belongs to --scenario restart",
        ),
        (
            &[
                "--sweep",
                "guests",
                "--scenario",
                "mixed",
                "--json",
                "/tmp/x.json",
            ],
            "--json writes one run's results",
        ),
    ] {
        let o = pvnet(&[&["bench"][..], args].concat());
        assert!(!o.status.success(), "{args:?}");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains(says), "{args:?}: {e}");
    }
}

#[test]
fn the_restart_scenario_restarts_under_load_and_loses_no_byte() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("the_restart_scenario_restarts_under_load_and_loses_no_byte") {
        return;
    }
    let out = std::env::temp_dir().join(format!("pvnet-scenario-{}", unique_id()));
    let stdout = ok(&[
        "bench",
        "--scenario",
        "restart",
        "--configs",
        "xen,persistent",
        "--reps",
        "1",
        "--duration",
        "2",
        "--restarts",
        "2",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(
        stdout.contains("goal, every TCP stream through the restarts intact: holds (4 of 4)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("goal, every reconnection under 1000 ms: "),
        "{stdout}"
    );
    let md = std::fs::read_to_string(out.join("scenario-restart.md")).unwrap();
    assert!(
        md.contains("| reconnection under two TCP streams: median (ms) |"),
        "{md}"
    );
    assert!(!md.contains("## Errors"), "{md}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("scenario-restart.json")).unwrap())
            .unwrap();
    assert!(v["memory_probe"]["end"]["cache_mib"].is_u64(), "{v}");
    let samples = v["samples"].as_array().unwrap();
    assert_eq!(samples.len(), 2);
    for s in samples {
        // Two restarts idle, two under the TCP streams, two under the UDP stream: each timed,
        // each with both vifs back.
        for leg in [
            &s["idle"],
            &s["tcp_restarts"]["restarts"],
            &s["udp_restarts"]["restarts"],
        ] {
            let rs = leg.as_array().unwrap();
            assert_eq!(rs.len(), 2, "{s}");
            for r in rs {
                assert_eq!((u(&r["vifs"]), u(&r["reconnected"])), (2, 2), "{s}");
                let ms = f(&r["reconnect_ms"], "reconnection");
                assert!(ms > 0.0 && ms >= f(&r["down_ms"], "down"), "{r}");
            }
        }
        assert_eq!(s["tcp_quiet"]["restarts"].as_array().unwrap().len(), 0);
        assert_eq!(s["udp_quiet"]["restarts"].as_array().unwrap().len(), 0);
        // Both streams of both TCP legs verified byte for byte.
        for leg in ["tcp_quiet", "tcp_restarts"] {
            let flows = s[leg]["flows"].as_array().unwrap();
            assert_eq!(flows.len(), 2, "{s}");
            for fl in flows {
                assert_eq!(fl["intact"], true, "{s}");
                assert!(u(&fl["bytes"]) > 0, "{s}");
            }
            assert_eq!(s[leg]["errors"].as_array().unwrap().len(), 0, "{s}");
        }
        // The UDP legs sent and were accounted for; nothing arrived corrupt.
        for leg in ["udp_quiet", "udp_restarts"] {
            assert!(u(&s[leg]["sent"]) > 0, "{s}");
            assert_eq!(u(&s[leg]["corrupt"]), 0, "{s}");
            assert_eq!(s[leg]["errors"].as_array().unwrap().len(), 0, "{s}");
        }
        // The daemon counted the six restarts and both vifs' reconnection after each, and each
        // frontend went away and came back six times without giving up a frame or a grant.
        assert_eq!(u(&s["restarts_counted"]), 6, "{s}");
        assert_eq!(u(&s["reconnections_counted"]), 12, "{s}");
        let fe = &s["frontends"];
        assert_eq!(
            (u(&fe["disconnects"]), u(&fe["reconnects"])),
            (12, 12),
            "{s}"
        );
        assert_eq!(u(&fe["tx_lost_at_disconnect"]), 0, "{s}");
        assert_eq!(u(&fe["grants_leaked"]), 0, "{s}");
        assert_eq!(s["errors"].as_array().unwrap().len(), 0, "{s}");
        assert_run_gone(s["run_id"].as_str().unwrap());
    }
}

#[test]
fn restart_scenario_arguments_are_checked() {
    // No root needed: refused before anything starts.
    let cases: &[(&[&str], &str)] = &[
        (
            &["--scenario", "restart", "--configs", "linux"],
            "whose driver domain `pvnet restart-dd` restarts",
        ),
        (
            &["--scenario", "mixed,restart", "--configs", "hvm"],
            "is not one",
        ),
        (
            &["--restarts", "2"],
            "--restarts belongs to --scenario restart",
        ),
        (
            &["--scenario", "neighbour", "--restarts", "2"],
            "--restarts belongs to --scenario restart",
        ),
        (
            &["--scenario", "restart", "--restarts", "0"],
            "--restarts must be 1 to 20",
        ),
        (
            &["--stream-pace", "1000"],
            "--stream-pace belongs to --scenario mixed",
        ),
        (
            &["--scenario", "neighbour", "--stream-pace", "1000"],
            "--stream-pace belongs to --scenario mixed",
        ),
        (
            &["--scenario", "mixed", "--stream-pace", "0"],
            "--stream-pace must be positive",
        ),
        (&["--scenario", "mixed,mixed"], "names each workload once"),
        (
            &["--scenario", "neighbour,restart", "--json", "/tmp/x.json"],
            "--json writes one scenario's run",
        ),
    ];
    for (args, says) in cases {
        let mut all = vec!["bench"];
        all.extend_from_slice(args);
        fails_saying(&all, says);
    }
}
