//! `pvnet soak` end to end, in a very short form: two guests each receive and send streams
//! one after another while the daemon is sampled. Needs root. Asserts that streams ran and
//! were verified in both directions, that every sample was written, that the daemon was
//! judged, and that the testbed left nothing behind; never how fast.

use crate::common::*;

#[test]
fn a_short_soak_streams_both_ways_and_samples_the_daemon() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("a_short_soak_streams_both_ways_and_samples_the_daemon") {
        return;
    }
    let out = std::env::temp_dir().join(format!("pvnet-soak-{}", unique_id()));
    let stdout = ok(&[
        "soak",
        "--guests",
        "2",
        "--config",
        "xen",
        "--duration",
        "24s",
        "--interval",
        "2s",
        "--stream-seconds",
        "5",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(stdout.contains("the daemon's drops: port: "), "{stdout}");
    let csv = std::fs::read_to_string(out.join("soak.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("t_s,rss_kib,fds,rx_streams,rx_bytes,tx_streams,tx_bytes")
    );
    let rows: Vec<Vec<f64>> = lines
        .map(|l| l.split(',').map(|c| c.parse().unwrap()).collect())
        .collect();
    // A sample every 2 s over 24 s, and one when the last streams ended.
    assert!(rows.len() >= 12, "{csv}");
    for r in &rows {
        assert!(
            r[1] > 0.0 && r[2] > 0.0,
            "a sample without RSS or descriptors: {csv}"
        );
    }
    // Each guest ran streams of 5 s both ways: at least four in each direction over 24 s,
    // every byte of them verified (a failed stream fails the soak).
    let last = rows.last().unwrap();
    assert!(last[3] >= 4.0 && last[4] > 0.0, "streams in: {csv}");
    assert!(last[5] >= 4.0 && last[6] > 0.0, "streams out: {csv}");
    // The counts only grow.
    for w in rows.windows(2) {
        assert!((3..7).all(|c| w[1][c] >= w[0][c]), "{csv}");
    }
    let md = std::fs::read_to_string(out.join("soak.md")).unwrap();
    assert!(md.contains("into and out of every guest at once"), "{md}");
    assert!(md.contains("- verdict: flat"), "{md}");
    assert!(out.join("soak.svg").exists());
    let id = md
        .split("testbed ")
        .nth(1)
        .and_then(|t| t.split(',').next())
        .unwrap_or_else(|| panic!("no testbed id in {md}"));
    assert_run_gone(id);
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn soak_arguments_are_checked() {
    // No root needed: each is refused before the root check and before anything starts.
    fails_saying(&["soak", "--direction", "sideways"], "sideways");
    fails_saying(&["soak", "--duration", "5d"], "the unit is s, m or h");
    fails_saying(
        &["soak", "--guests", "17"],
        "--guests must be between 1 and 16",
    );
    fails_saying(
        &["soak", "--duration", "90s"],
        "--duration 90s at --interval 60s takes 3 samples",
    );
}
