//! What a finished run leaves on disk: results.json, report.md and the plots.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use serde_json::{json, Value};

use super::configs;
use super::measure;
use super::run::Run;
use super::summary::{self, ConfigSummary};
use super::{plot, report, scaling};

/// When a run started: seconds since the epoch, and the same as UTC text.
pub struct Started {
    pub unix: u64,
    pub utc: String,
}

/// A run's output directory, created now: `given` (`--out`), or `ROOT/PREFIX` followed by the
/// UTC time of the start (`bench-out/20261124-175314`).
pub fn out_dir(given: Option<&Path>, root: &str, prefix: &str) -> Result<(PathBuf, Started)> {
    let unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (utc, stamp) = super::machine::utc(unix);
    let out = given
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(root).join(format!("{prefix}{stamp}")));
    std::fs::create_dir_all(&out)
        .with_context(|| format!("cannot create the output directory {}", out.display()))?;
    Ok((out, Started { unix, utc }))
}

/// After `--sweep guests --scenario ...`: report.md links the workloads' reports that this run
/// wrote next to it, and says which workloads wrote none. `done`: each workload's name and
/// whether this run wrote its scenario-NAME.md.
pub fn append_scenarios(out: &Path, done: &[(String, bool)]) -> Result<()> {
    let report = out.join("report.md");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&report)
        .with_context(|| format!("opening {}", report.display()))?;
    std::io::Write::write_all(&mut f, scenarios_section(done).as_bytes())
        .with_context(|| format!("writing {}", report.display()))
}

fn scenarios_section(done: &[(String, bool)]) -> String {
    use std::fmt::Write as _;
    let mut text = String::from(
        "\n## Issue 22's workloads, in the same run\n\nAfter the sweep above, each on fresh testbeds of two guests:\n\n",
    );
    for (k, wrote) in done {
        if *wrote {
            let _ = writeln!(
                text,
                "- `{k}`: [scenario-{k}.md](scenario-{k}.md), scenario-{k}.json"
            );
        } else {
            let _ = writeln!(text, "- `{k}`: did not complete (see the bench's errors)");
        }
    }
    text
}

/// results.json: the machine, the parameters, the summary of each configuration, the sweep,
/// and every raw sample (warm-up included, marked).
pub fn results_json(run: &Run) -> Value {
    let p = &run.params;
    let configs: serde_json::Map<String, Value> = run
        .summary
        .iter()
        .map(|c| (c.name.clone(), summary::to_json(c)))
        .collect();
    let sweep = run.sweep.as_ref().map(|sw| {
        let points: Vec<Value> = sw
            .values
            .iter()
            .filter_map(|v| {
                let c = run.summary.iter().find(|c| c.name == format!("timeout:{v}"))?;
                Some(json!({
                    "timeout_us": v,
                    "config": c.name,
                    "throughput_mbps": c.median("throughput_mbps"),
                    "rr_tps": c.median("rr_tps"),
                    "lro_rate": c.median("lro_rate"),
                    "cycles_per_byte_total": c.median("cycles_per_byte.total"),
                }))
            })
            .collect();
        json!({ "policy": "timeout", "values_us": sw.values, "references": sw.references, "points": points })
    });
    json!({
        "tool": "pvnet bench",
        "version": env!("CARGO_PKG_VERSION"),
        "revision": run.revision,
        "started_utc": run.started_utc,
        "started_unix": run.started_unix,
        "wall_seconds": run.wall_seconds,
        "machine": run.machine,
        "parameters": {
            "configs": run.configs,
            "reps": p.reps,
            "interleaved": true,
            "warmup": { "reps": 1, "stream_seconds": p.warmup_stream_seconds, "rr_seconds": p.warmup_rr_seconds },
            "stream_seconds": p.measure.stream_seconds,
            "rr_seconds": p.measure.rr_seconds,
            "msg_size": p.measure.msg_size,
            "ring_frames": p.measure.port.ring_frames,
            "port_queues": p.measure.port.port_queues,
            "ring_prefetch": p.measure.port.ring_prefetch.unwrap_or(pvnet_pnic::DEFAULT_PREFETCH),
            "budget": p.measure.port.budget.unwrap_or(crate::config::DEFAULT_BUDGET),
            "relay_budget": p.measure.port.budget.unwrap_or(crate::config::RELAY_BUDGET),
            "mtu": p.measure.port.mtu,
            "ring_frame_size": pvnet_pnic::frame_size_for_mtu(p.measure.port.mtu),
            "tool": p.measure.tool,
            "rr_tool": "builtin",
            "rx_cpu": configs::RX_CPU,
            "tx_cpu": configs::TX_CPU,
            "guest_placement": p.measure.placement,
            "guest_cgroups": p
                .measure
                .guest_cgroups
                .unwrap_or(crate::config::DaemonConfig::default().guest_cgroups),
            "saturated_at": measure::SATURATED,
            "paired_rounds": p.paired_rounds,
            "paired_seconds": p.paired_seconds,
            "scaling_rounds": p.scaling_rounds,
            "scaling_testbeds": p.scaling_testbeds,
            "scaling_slice_seconds": scaling::SLICE_SECONDS,
            "scaling_settle_seconds": scaling::SETTLE_SECONDS,
        },
        "order": run.configs,
        "configs": configs,
        "sweep": sweep,
        "scaling": scaling_json(run),
        "scaling_one_testbed": run.one_testbed,
        "scaling_one_testbed_vs_floor": scaling::against_floors(&run.one_testbed),
        "scaling_one_testbed_errors": run.one_testbed_errors,
        "rr_paired": run.paired,
        "rr_paired_error": run.paired_error,
        "warnings": report::warnings(run),
        "samples": run.samples,
    })
}

/// [`scaling::scaling`] as JSON: each configuration at N guests against itself with one.
fn scaling_json(run: &Run) -> Value {
    let rows = scaling::scaling(&run.summary, &run.samples);
    Value::Array(
        rows.iter()
            .map(|s| {
                json!({
                    "config": s.name,
                    "one_guest_config": s.one,
                    "guests": s.guests,
                    "aggregate_mbps": s.aggregate,
                    "one_guest_mbps": s.one_guest,
                    "ratio_of_medians": s.ratio_of_medians,
                    "round_ratios": s.ratios,
                    "ratio_geomean": s.geomean,
                    "ratio_ci95": s.ci95,
                    "aggregate_goal": scaling::AGGREGATE_GOAL,
                    "aggregate_verdict": s.verdict,
                    "jain": s.jain.map(|j| json!({"median": j.median, "min": j.min, "max": j.max})),
                    "jain_goal": scaling::JAIN_GOAL,
                    "jain_met": s.jain_met,
                })
            })
            .collect(),
    )
}

pub fn write_outputs(run: &Run, out: &Path, json_copy: Option<&Path>) -> Result<()> {
    let w = |name: &str, text: &str| {
        let p = out.join(name);
        std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))
    };
    let results = serde_json::to_string_pretty(&results_json(run))?;
    w("results.json", &results)?;
    if let Some(j) = json_copy {
        std::fs::write(j, &results).with_context(|| format!("writing {}", j.display()))?;
    }
    w("report.md", &report::markdown(run))?;
    plot::throughput(&out.join("throughput.svg"), &run.summary, run.params.reps)
        .context("throughput.svg")?;
    plot::cycles(&out.join("cycles.svg"), &run.summary, run.params.reps).context("cycles.svg")?;
    if let Some(sw) = &run.sweep {
        let points: Vec<(f64, &ConfigSummary)> = sw
            .values
            .iter()
            .filter_map(|v| {
                let c = run
                    .summary
                    .iter()
                    .find(|c| c.name == format!("timeout:{v}"))?;
                Some((f64::from(*v), c))
            })
            .collect();
        let refs: Vec<&ConfigSummary> = run
            .summary
            .iter()
            .filter(|c| sw.references.contains(&c.name))
            .collect();
        plot::sweep(&out.join("sweep.svg"), &points, &refs).context("sweep.svg")?;
    }
    let lines = plot::guest_lines(&run.summary);
    if !lines.is_empty() {
        plot::guests(&out.join("guests.svg"), &lines).context("guests.svg")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scenarios_section_links_only_what_this_run_wrote() {
        let done = [("neighbour", true), ("mixed", false), ("restart", true)]
            .map(|(k, w)| (k.to_string(), w));
        let t = scenarios_section(&done);
        assert!(
            t.contains("[scenario-neighbour.md](scenario-neighbour.md)"),
            "{t}"
        );
        assert!(
            t.contains("[scenario-restart.md](scenario-restart.md)"),
            "{t}"
        );
        assert!(t.contains("- `mixed`: did not complete"), "{t}");
        assert!(!t.contains("scenario-mixed.md"), "{t}");
    }
}
