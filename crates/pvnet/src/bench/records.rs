//! `pvnet bench --sweep record-size`: the HVM paper's Fig. 6 workload. Records of one size are
//! sent on a schedule (`pvnet perf records`: one record in flight, each verified and
//! acknowledged by the receiver), for every size of the sweep in turn, on one fresh testbed per
//! configuration and repetition; the report gives throughput and time per record against the
//! size, and the HVM configurations' exits and device-model round trips per record.
//!
//! The paper (Zhang, Li and Guan) sent 2000 records at 50 per second per size, from the HVM
//! guest to another machine. The default here is shorter ([`DEFAULT_RECORDS`] records per
//! size) so a sweep takes minutes; `--records 2000 --record-rate 50` is the paper's run.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use pvnet_perf::records::{size_name, RecordsResult};
use pvnet_testbed::Netns;
use serde::Serialize;

use super::child;
use super::configs::{self, Direction, RX_CPU, TX_CPU};
use super::hvm::{self, HvmCounters};
use super::measure::{self, PORT};
use super::progress::Progress;
use super::testbed;
use crate::config::Mode;
use crate::rundir::RunInfo;

/// Records per size unless `--records` says otherwise.
pub const DEFAULT_RECORDS: u64 = 40;
/// Records per second unless `--record-rate` says otherwise (the paper's rate).
pub const DEFAULT_RATE: f64 = 50.0;
/// The default sizes (`--sweep-values` of `--sweep record-size`): 1 KiB to 1 MiB.
pub const DEFAULT_SIZES: &str = "1K,4K,16K,64K,256K,1M";
/// The default configurations: the paper's direction (the guest sends), its two paths, and
/// the PV path for scale.
pub const DEFAULT_CONFIGS: &str = "xen@tx,hvm@tx,hvm-fast@tx";

/// What a record sweep runs.
#[derive(Clone, Debug, Serialize)]
pub struct RecordPlan {
    pub configs: Vec<String>,
    pub sizes: Vec<usize>,
    pub count: u64,
    /// Records per second (None: unpaced).
    pub rate: Option<f64>,
    pub reps: usize,
}

impl RecordPlan {
    /// Seconds a configuration's repetition is planned to take (the schedule alone, plus the
    /// testbed and the counters' settling).
    pub fn planned_seconds(&self) -> f64 {
        let per_size = self.rate.map_or(1.0, |r| self.count as f64 / r) + 1.5;
        3.0 + self.sizes.len() as f64 * per_size
    }
}

/// One size's run of one configuration and repetition.
#[derive(Clone, Debug, Serialize)]
pub struct RecordPoint {
    pub config: String,
    pub rep: usize,
    pub size: usize,
    pub result: Option<RecordsResult>,
    /// HVM configurations: the guests' counters over this size's records.
    pub hvm: Option<HvmCounters>,
    pub error: Option<String>,
}

impl RecordPoint {
    pub fn throughput_mbps(&self) -> Option<f64> {
        self.result.as_ref().map(|r| r.throughput_mbps)
    }

    /// The median time per record: on this shared machine a few records wait for a CPU for
    /// tens of milliseconds, which moves a mean of 40 records more than the path does.
    pub fn time_per_record_ms(&self) -> Option<f64> {
        self.result.as_ref().map(|r| r.time_per_record.p50_ms)
    }

    /// The rate of a record alone: its bytes over its median time (the schedule's gaps left
    /// out), Mbit/s.
    pub fn record_rate_mbps(&self) -> Option<f64> {
        let ms = self.time_per_record_ms()?;
        (ms > 0.0).then(|| self.size as f64 * 8.0 / (ms / 1e3) / 1e6)
    }

    /// VM exits per record (HVM configurations).
    pub fn exits_per_record(&self) -> Option<f64> {
        let (h, r) = (self.hvm.as_ref()?, self.result.as_ref()?);
        (r.acked > 0).then(|| h.exits as f64 / r.acked as f64)
    }

    /// Device-model round trips per record (HVM configurations).
    pub fn round_trips_per_record(&self) -> Option<f64> {
        let (h, r) = (self.hvm.as_ref()?, self.result.as_ref()?);
        (r.acked > 0).then(|| h.ioreqs as f64 / r.acked as f64)
    }
}

/// Runs every size of `plan` on one fresh testbed of `config`.
pub fn run_config(
    config: &str,
    rep: usize,
    plan: &RecordPlan,
    p: &measure::Params,
    progress: &Progress,
) -> Result<Vec<RecordPoint>> {
    let cfg = p.daemon_config(configs::daemon_config(config)?);
    let dir = configs::Name::parse(config)?.dir;
    let (points, _) = testbed::with_testbed(&cfg, config, progress, |info| {
        sizes(
            info,
            config,
            rep,
            cfg.mode,
            cfg.hvm > 0,
            dir,
            plan,
            progress,
        )
    })?;
    Ok(points)
}

#[allow(clippy::too_many_arguments)]
fn sizes(
    info: &RunInfo,
    config: &str,
    rep: usize,
    mode: Mode,
    hvm_guests: bool,
    dir: Direction,
    plan: &RecordPlan,
    progress: &Progress,
) -> Result<Vec<RecordPoint>> {
    let exe = std::env::current_exe()?;
    // The guest's side: the first guest, or natively the driver domain's namespace.
    let (host_ns, host_addr) = match mode {
        Mode::Linux => (info.dd_ns.clone(), info.dd_addr.clone()),
        Mode::Xen | Mode::Relay => (info.guest_ns[0].clone(), info.guest_addrs[0].clone()),
    };
    let host = Netns::open(&host_ns)?;
    let remote = Netns::open(&info.remote_ns)?;
    let (srv_ns, srv_cpu, snd_ns, snd_cpu, dst) = match dir {
        Direction::Rx => (&host, RX_CPU, &remote, TX_CPU, host_addr),
        Direction::Tx => (&remote, TX_CPU, &host, RX_CPU, info.remote_addr.clone()),
    };
    let mut server = measure::start_builtin_server_on(&exe, srv_ns, srv_cpu, PORT, false)?;
    measure::wait_listening_on(srv_ns, &mut server, PORT)?;
    let counters = || -> Option<HvmCounters> {
        if !hvm_guests {
            return None;
        }
        hvm::settled_counters(&info.id)
    };
    let mut out = Vec::new();
    for &size in &plan.sizes {
        progress.phase(
            &format!("{} records of {}", plan.count, size_name(size)),
            plan.rate.map_or(1.0, |r| plan.count as f64 / r),
        );
        let before = counters();
        let mut cmd = child::pinned(snd_ns.command(&exe), snd_cpu);
        cmd.args([
            "perf",
            "records",
            &dst,
            "--port",
            &PORT.to_string(),
            "--size",
            &size.to_string(),
            "--count",
            &plan.count.to_string(),
            "--rate",
            &plan.rate.unwrap_or(0.0).to_string(),
        ]);
        // The schedule, and up to 5 s per record beyond it (a 1 MiB record on the slowest path
        // takes about one).
        let limit = Duration::from_secs_f64(
            plan.rate.map_or(0.0, |r| plan.count as f64 / r) + 5.0 * plan.count as f64 + 30.0,
        );
        let mut point = RecordPoint {
            config: config.to_string(),
            rep,
            size,
            result: None,
            hvm: None,
            error: None,
        };
        let o = child::output(&mut cmd, "the records sender", limit)?;
        match serde_json::from_slice::<RecordsResult>(&o.stdout) {
            Ok(r) => {
                if !r.intact() {
                    point.error = Some(format!(
                        "{} records: {} of {} acknowledged, {} corrupt, the receiver verified {} with {} bad bytes",
                        size_name(size),
                        r.acked,
                        r.count,
                        r.nacked,
                        r.receiver.records,
                        r.receiver.mismatches
                    ));
                }
                point.result = Some(r);
            }
            Err(e) => {
                point.error = Some(format!(
                    "{} records failed: {} ({e})",
                    size_name(size),
                    String::from_utf8_lossy(&o.stderr).trim()
                ))
            }
        }
        if let (Some(b), Some(a)) = (before, counters()) {
            point.hvm = Some(a.since(&b));
        }
        out.push(point);
        super::interrupt::check()?;
    }
    drop(server);
    Ok(out)
}

/// The median of `v` (None when empty).
fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The median over the repetitions of `f` at (`config`, `size`).
pub fn median_of(
    points: &[RecordPoint],
    config: &str,
    size: usize,
    f: impl Fn(&RecordPoint) -> Option<f64>,
) -> Option<f64> {
    median(
        (points.iter())
            .filter(|p| p.config == config && p.size == size && p.error.is_none())
            .filter_map(f)
            .collect(),
    )
}

/// The pairs a ratio is reported for: each fast HVM configuration against the original path
/// at the same exit cost, direction and guests (`hvm-fast+exit1000@tx` against
/// `hvm+exit1000@tx`).
pub fn ratio_pairs(configs: &[String]) -> Vec<(String, String)> {
    let mut v = Vec::new();
    for c in configs {
        let Ok(n) = configs::Name::parse(c) else {
            continue;
        };
        let Ok((base, ns)) = configs::split_exit_cost(n.base) else {
            continue;
        };
        if base == "hvm-fast" || base == "hvm-seed" {
            let orig = configs::with_exit_cost(&n.with_base("hvm"), ns).unwrap_or_default();
            if configs.contains(&orig) {
                v.push((c.clone(), orig));
            }
        }
    }
    v
}

/// The report's tables, in markdown: throughput and time per record against the size, the
/// fast paths' ratios, and the HVM counters per record.
pub fn markdown(plan: &RecordPlan, points: &[RecordPoint]) -> String {
    let mut s = String::new();
    let head = |s: &mut String, first: &str| {
        let _ = write!(s, "| {first} |");
        for c in &plan.configs {
            let _ = write!(s, " {c} |");
        }
        s.push_str("\n|---|");
        s.push_str(&"---:|".repeat(plan.configs.len()));
        s.push('\n');
    };
    let table =
        |s: &mut String, title: &str, f: &dyn Fn(&RecordPoint) -> Option<f64>, dec: usize| {
            let _ = writeln!(s, "### {title}\n");
            head(s, "record size");
            for &size in &plan.sizes {
                let _ = write!(s, "| {} |", size_name(size));
                for c in &plan.configs {
                    match median_of(points, c, size, f) {
                        Some(x) => {
                            let _ = write!(s, " {x:.dec$} |");
                        }
                        None => s.push_str(" — |"),
                    }
                }
                s.push('\n');
            }
            s.push('\n');
        };
    table(
        &mut s,
        "Throughput (Mbit/s of record bytes)",
        &|p| p.throughput_mbps(),
        2,
    );
    table(
        &mut s,
        "Time per record (ms, median; send to acknowledgement)",
        &|p| p.time_per_record_ms(),
        2,
    );
    if points.iter().any(|p| p.hvm.is_some()) {
        table(&mut s, "VM exits per record", &|p| p.exits_per_record(), 0);
        table(
            &mut s,
            "Device-model round trips per record",
            &|p| p.round_trips_per_record(),
            0,
        );
    }
    let pairs = ratio_pairs(&plan.configs);
    if !pairs.is_empty() {
        ratio_table(
            &mut s,
            "The fast paths' paced throughput against the original path's (the paper: 1.43–1.86×, mean 1.56×)",
            plan,
            points,
            &pairs,
            &|p| p.throughput_mbps(),
        );
        ratio_table(
            &mut s,
            "The same for the rate of a record alone (its bytes over its median time)",
            plan,
            points,
            &pairs,
            &|p| p.record_rate_mbps(),
        );
    }
    s
}

/// One table of ratios `a ÷ b` of `f`'s medians per size, with their range and mean.
fn ratio_table(
    s: &mut String,
    title: &str,
    plan: &RecordPlan,
    points: &[RecordPoint],
    pairs: &[(String, String)],
    f: &dyn Fn(&RecordPoint) -> Option<f64>,
) {
    let _ = writeln!(s, "### {title}\n");
    let _ = write!(s, "| record size |");
    for (a, b) in pairs {
        let _ = write!(s, " {a} ÷ {b} |");
    }
    s.push_str("\n|---|");
    s.push_str(&"---:|".repeat(pairs.len()));
    s.push('\n');
    let mut all: Vec<Vec<f64>> = vec![Vec::new(); pairs.len()];
    for &size in &plan.sizes {
        let _ = write!(s, "| {} |", size_name(size));
        for (k, (a, b)) in pairs.iter().enumerate() {
            match (median_of(points, a, size, f), median_of(points, b, size, f)) {
                (Some(x), Some(y)) if y > 0.0 => {
                    all[k].push(x / y);
                    let _ = write!(s, " {:.2}× |", x / y);
                }
                _ => s.push_str(" — |"),
            }
        }
        s.push('\n');
    }
    s.push_str("| range (mean) |");
    for r in &all {
        if r.is_empty() {
            s.push_str(" — |");
            continue;
        }
        let lo = r.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = r.iter().copied().fold(0.0, f64::max);
        let mean = r.iter().sum::<f64>() / r.len() as f64;
        let _ = write!(s, " {lo:.2}–{hi:.2}× ({mean:.2}×) |");
    }
    s.push_str("\n\n");
}

/// `records.svg`: throughput (top) and time per record (bottom) against the record size.
pub fn plot(path: &Path, plan: &RecordPlan, points: &[RecordPoint]) -> Result<()> {
    let series = |f: &dyn Fn(&RecordPoint) -> Option<f64>| -> Vec<(String, Vec<(f64, f64)>)> {
        (plan.configs.iter())
            .map(|c| {
                let xy = (plan.sizes.iter())
                    .filter_map(|&sz| median_of(points, c, sz, f).map(|y| (sz as f64, y)))
                    .collect();
                (c.clone(), xy)
            })
            .collect()
    };
    super::plot::size_sweep(
        path,
        &[
            super::plot::Panel {
                title: "Throughput against the record size",
                unit: "Mbit/s",
                log_y: false,
                series: series(&|p| p.throughput_mbps()),
            },
            super::plot::Panel {
                title: "Time per record against the record size",
                unit: "ms (log scale)",
                log_y: true,
                series: series(&|p| p.time_per_record_ms()),
            },
        ],
    )
    .context("records.svg")
}

#[cfg(test)]
mod tests {
    use super::*;
    use pvnet_perf::records::RecordTimes;

    fn point(config: &str, size: usize, mbps: f64, ms: f64) -> RecordPoint {
        RecordPoint {
            config: config.into(),
            rep: 1,
            size,
            result: Some(RecordsResult {
                size,
                count: 10,
                acked: 10,
                throughput_mbps: mbps,
                time_per_record: RecordTimes {
                    p50_ms: ms,
                    ..Default::default()
                },
                ..Default::default()
            }),
            hvm: Some(HvmCounters {
                exits: 250,
                ioreqs: 100,
                ..Default::default()
            }),
            error: None,
        }
    }

    #[test]
    fn pairs_match_the_fast_path_with_the_original_at_the_same_cost() {
        let c: Vec<String> = [
            "xen@tx",
            "hvm@tx",
            "hvm+exit1000@tx",
            "hvm-fast@tx",
            "hvm-fast+exit1000@tx",
            "hvm-seed",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            ratio_pairs(&c),
            [
                ("hvm-fast@tx".to_string(), "hvm@tx".to_string()),
                ("hvm-fast+exit1000@tx".into(), "hvm+exit1000@tx".into()),
            ]
        );
    }

    #[test]
    fn tables_take_medians_and_ratios_and_skip_failures() {
        let plan = RecordPlan {
            configs: vec!["hvm@tx".into(), "hvm-fast@tx".into()],
            sizes: vec![1024, 1 << 20],
            count: 10,
            rate: Some(50.0),
            reps: 3,
        };
        let mut pts = vec![
            point("hvm@tx", 1024, 1.0, 2.0),
            point("hvm@tx", 1024, 3.0, 2.0),
            point("hvm@tx", 1024, 2.0, 2.0),
            point("hvm-fast@tx", 1024, 3.0, 1.0),
            point("hvm@tx", 1 << 20, 10.0, 800.0),
            point("hvm-fast@tx", 1 << 20, 25.0, 300.0),
        ];
        let mut bad = point("hvm-fast@tx", 1 << 20, 1000.0, 1.0);
        bad.error = Some("lost".into());
        pts.push(bad);
        assert_eq!(
            median_of(&pts, "hvm@tx", 1024, |p| p.throughput_mbps()),
            Some(2.0)
        );
        assert_eq!(
            median_of(&pts, "hvm-fast@tx", 1 << 20, |p| p.throughput_mbps()),
            Some(25.0)
        );
        assert_eq!(pts[0].exits_per_record(), Some(25.0));
        assert_eq!(pts[0].round_trips_per_record(), Some(10.0));
        let md = markdown(&plan, &pts);
        assert!(md.contains("| 1 KiB | 2.00 | 3.00 |"), "{md}");
        assert!(md.contains("| 1 MiB | 800.00 | 300.00 |"), "{md}");
        assert!(md.contains("| 1 KiB | 1.50× |"), "{md}");
        assert!(md.contains("| 1 MiB | 2.50× |"), "{md}");
        assert!(md.contains("1.50–2.50× (2.00×)"), "{md}");
        // 1 MiB in 300 ms against 800 ms: the record alone, 8/3 as fast.
        assert!(md.contains("| 1 MiB | 2.67× |"), "{md}");
        assert_eq!(pts[0].record_rate_mbps(), Some(1024.0 * 8.0 / 0.002 / 1e6));
        assert!(md.contains("VM exits per record"), "{md}");
    }
}
