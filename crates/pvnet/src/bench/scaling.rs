//! How a configuration scales with the number of guests, judged against the consolidation
//! goals: the aggregate of N guests against one guest's, and Jain's index at N.
//!
//! One run's ratio of medians carries the noise of both medians: one guest alone varies by
//! ±10 % between repetitions on this machine, so a single run's 8 ÷ 1 moved by ±0.07. The
//! repetitions of a run are interleaved (every configuration once per round, back to back), so
//! each round gives a paired ratio, N guests over one guest of the same round, and the rounds'
//! ratios give a geometric mean with a 95 % confidence interval (Student's t on the
//! logarithms, as the paired TCP_RR comparison). The goal is judged on that interval: `holds`
//! when all of it lies at or above the goal, `fails` when all of it lies below, `undecided`
//! otherwise.

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use pvnet_perf::stream::median;
use pvnet_perf::{SenderTcp, StreamsResult, StreamsSlice};
use pvnet_testbed::Netns;
use serde::Serialize;

use super::measure::{self, Params, Sample};
use super::paired::Verdict;
use super::plot::guest_lines;
use super::progress::Progress;
use super::report::{fmt, Table};
use super::summary::{
    geomean_ci95, geomean_ci95_testbeds, geomean_quotient_ci95, split_evenly, ConfigSummary, Stat,
};
use super::{child, configs, interrupt, testbed};
use crate::config::Mode;
use crate::rundir::RunInfo;

/// The aggregate of N guests at least this fraction of one guest's.
pub const AGGREGATE_GOAL: f64 = 0.9;
/// Jain's fairness index of the N guests' throughputs at least this (median of repetitions).
pub const JAIN_GOAL: f64 = 0.95;

/// One configuration at one guest count above one, against itself with one guest.
#[derive(Clone, Debug, PartialEq)]
pub struct Scaling {
    /// The configuration at N guests (`xen/g8`) and with one (`xen`).
    pub name: String,
    pub one: String,
    pub guests: usize,
    /// Median aggregate Mbit/s at N guests and with one guest.
    pub aggregate: f64,
    pub one_guest: f64,
    /// `aggregate / one_guest`.
    pub ratio_of_medians: f64,
    /// Each round's N-guest aggregate over the same round's one guest, in round order.
    pub ratios: Vec<f64>,
    /// Geometric mean of `ratios` and its 95 % interval (None with fewer than two rounds).
    pub geomean: Option<f64>,
    pub ci95: Option<[f64; 2]>,
    /// [`AGGREGATE_GOAL`] judged on `ci95`.
    pub verdict: Verdict,
    /// Jain's index at N guests over the repetitions.
    pub jain: Option<Stat>,
    /// The median at or above [`JAIN_GOAL`] (None without an index).
    pub jain_met: Option<bool>,
}

/// Every configuration that ran with one guest and with more, at each count above one, in the
/// order of [`guest_lines`].
pub fn scaling(summary: &[ConfigSummary], samples: &[Sample]) -> Vec<Scaling> {
    let mut out = Vec::new();
    for (_, pts) in guest_lines(summary) {
        let Some(&(n1, one)) = pts.first() else {
            continue;
        };
        if n1 != 1.0 {
            continue;
        }
        let one_guest = one.median("throughput_mbps").unwrap_or(0.0);
        for &(n, c) in &pts[1..] {
            let aggregate = c.median("throughput_mbps").unwrap_or(0.0);
            let ratios = paired_ratios(samples, &one.name, &c.name);
            let gm = geomean_ci95(&ratios);
            let ci95 = gm.map(|(_, lo, hi)| [lo, hi]);
            let jain = c.stats.get("jain").copied().flatten();
            out.push(Scaling {
                name: c.name.clone(),
                one: one.name.clone(),
                guests: n as usize,
                aggregate,
                one_guest,
                ratio_of_medians: if one_guest > 0.0 {
                    aggregate / one_guest
                } else {
                    f64::NAN
                },
                ratios,
                geomean: gm.map(|(g, _, _)| g),
                ci95,
                verdict: Verdict::judge(ci95, 1.0 - AGGREGATE_GOAL),
                jain,
                jain_met: jain.map(|j| j.median >= JAIN_GOAL),
            });
        }
    }
    out
}

/// For every measured round (warm-up excluded) in which both ran and `one` moved data: the
/// round's throughput of `many` over that of `one`.
fn paired_ratios(samples: &[Sample], one: &str, many: &str) -> Vec<f64> {
    let round = |name: &str, rep: usize| {
        samples
            .iter()
            .find(|s| !s.warmup && s.config == name && s.rep == rep)
            .map(|s| s.throughput_mbps)
    };
    let mut ratios: Vec<(usize, f64)> = (samples.iter())
        .filter(|s| !s.warmup && s.config == one && s.throughput_mbps > 0.0)
        .filter_map(|s| Some((s.rep, round(many, s.rep)? / s.throughput_mbps)))
        .collect();
    ratios.sort_by_key(|(rep, _)| *rep);
    ratios.into_iter().map(|(_, r)| r).collect()
}

/// The table of [`scaling`]: a column per configuration at N guests.
pub fn table(rows: &[Scaling]) -> Table {
    let f2 = |x: Option<f64>| fmt(x, 2);
    let col = |f: &dyn Fn(&Scaling) -> String| rows.iter().map(f).collect::<Vec<String>>();
    Table {
        title: format!(
            "Against one guest: the goals are an aggregate of at least {AGGREGATE_GOAL}× one guest's and Jain's index of at least {JAIN_GOAL}"
        ),
        columns: col(&|s| s.name.clone()),
        rows: vec![
            (
                "aggregate (Mbit/s), median".into(),
                col(&|s| format!("{:.0}", s.aggregate)),
            ),
            (
                "one guest (Mbit/s), median".into(),
                col(&|s| format!("{:.0}", s.one_guest)),
            ),
            (
                "÷ one guest, medians".into(),
                col(&|s| f2(Some(s.ratio_of_medians))),
            ),
            (
                "÷ one guest, per round: geometric mean".into(),
                col(&|s| f2(s.geomean)),
            ),
            (
                "  95 % confidence interval".into(),
                col(&|s| {
                    s.ci95
                        .map_or("—".into(), |[lo, hi]| format!("{lo:.2} – {hi:.2}"))
                }),
            ),
            ("  rounds".into(), col(&|s| s.ratios.len().to_string())),
            (
                format!("aggregate ≥ {AGGREGATE_GOAL}× one guest"),
                col(&|s| s.verdict.as_str().into()),
            ),
            (
                "Jain's index, median".into(),
                col(&|s| f2(s.jain.map(|j| j.median))),
            ),
            ("  min".into(), col(&|s| f2(s.jain.map(|j| j.min)))),
            (
                format!("Jain ≥ {JAIN_GOAL} (median)"),
                col(&|s| met(s.jain_met)),
            ),
        ],
    }
}

/// What the table's verdicts mean, for the report.
pub const NOTE: &str = "Each round of the run ran every configuration once, back to back, so each round gives a paired ratio: the N-guest aggregate over the same round's one guest. The goal is judged on the 95 % confidence interval of the rounds' geometric mean (Student's t on the logarithms): `holds` when the whole interval lies at or above it, `fails` when the whole interval lies below it, `undecided` when it straddles it (more repetitions, `--reps`, narrow it). The ratio of the medians is shown beside it; one run's ratio of medians moves by several hundredths with the one-guest figure alone.";

/// Slices of the standing-testbed comparison: seconds measured, and seconds let pass after
/// each switch before measuring (what the paused streams had in flight drains, the resumed
/// ones reach their rate: at 8 guests the senders' RTT is 25–40 ms here).
pub const SLICE_SECONDS: f64 = 0.5;
pub const SETTLE_SECONDS: f64 = 0.3;

/// The same comparison on standing testbeds of N guests: each round runs a slice with one
/// guest streaming (guest `round % N`, so every guest takes its turn) and a slice with all N,
/// on connections that stay open (`pvnet perf streams`), in the order one–all, then all–one.
/// Fresh testbeds per repetition differ by ±10–15 % here, a drift that the per-repetition
/// ratios carry whole; slices half a second apart on one testbed cancel most of it. What is
/// left between testbeds (±0.02 in 8 ÷ 1) goes into the interval: the rounds are split between
/// several testbeds, one after the other, and the interval is taken over their means. (The
/// name, and `results.json`'s `scaling_one_testbed`, are from when there was one.)
#[derive(Clone, Debug, Serialize)]
pub struct OneTestbed {
    /// The configuration at N guests (`xen/g8`).
    pub config: String,
    pub guests: usize,
    pub rounds: usize,
    /// How many of the rounds ran on each testbed, in order (one testbed: `[rounds]`).
    pub testbed_rounds: Vec<usize>,
    pub slice_seconds: f64,
    pub settle_seconds: f64,
    /// Per round: Mbit/s with one guest streaming, and with all N.
    pub one_mbps: Vec<f64>,
    pub all_mbps: Vec<f64>,
    /// `all_mbps[i] / one_mbps[i]`.
    pub ratios: Vec<f64>,
    /// Geometric mean of the ratios and its 95 % interval: over the testbeds' geometric means
    /// with two testbeds or more; with one, batch means over 16 batches of consecutive rounds
    /// from 32 rounds on, as the paired TCP_RR comparison ([`geomean_ci95_testbeds`]).
    pub geomean: Option<f64>,
    pub ci95: Option<[f64; 2]>,
    /// [`AGGREGATE_GOAL`] judged on `ci95`.
    pub verdict: Verdict,
    /// Jain's index of the N streams in each all-N slice: the sharing over half a second.
    /// It is not the resumed streams catching up: a longer settling time lowers it for
    /// `adaptive` (docs/guest-scaling.md).
    pub jain: Vec<f64>,
    pub jain_median: Option<f64>,
    pub jain_min: Option<f64>,
    /// Each stream's bytes over all the all-N slices together, and their Jain's index: the
    /// sharing over the whole session (40 rounds: 20 s), what a stream of several seconds on
    /// a fresh testbed measures. The goal is judged on this one.
    pub stream_bytes: Vec<u64>,
    pub jain_overall: Option<f64>,
    /// Bytes the receivers verified over the whole session (every stream intact).
    pub bytes_verified: u64,
    /// The testbeds' run ids, in order.
    pub run_ids: Vec<String>,
    /// When each testbed started, in seconds from the start of the standing-testbed
    /// comparisons (every configuration's, interleaved: [`run_standing`]).
    pub testbed_starts_s: Vec<f64>,
    pub wall_seconds: f64,
    /// The remote host's senders in each slice.
    pub senders: Senders,
}

/// The remote host's senders on the standing testbeds, slice by slice, from their sockets'
/// `TCP_INFO` sampled every 50 ms during each slice's measured window: where the path holds
/// the bytes, the one-guest slices beside the all-guest ones. One entry per round in each.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Senders {
    /// Every stream's bytes in flight together (the median of the slice's samples).
    pub in_flight_one: Vec<u64>,
    pub in_flight_all: Vec<u64>,
    /// The streaming guests' smoothed round-trip time (median over them of each one's
    /// median, µs).
    pub rtt_one_us: Vec<u32>,
    pub rtt_all_us: Vec<u32>,
    /// BBR's minimum-RTT estimate, taken over the streaming guests as the smoothed RTT is
    /// (µs); empty when the remote host's congestion control is not BBR.
    pub bbr_min_rtt_one_us: Vec<u32>,
    pub bbr_min_rtt_all_us: Vec<u32>,
}

impl Senders {
    /// Adds the figures of `slice`, a one-guest slice or (`all`) an all-guest one. A slice
    /// without them (a sender of an older version) adds nothing.
    fn add(&mut self, slice: &StreamsSlice, all: bool) {
        if slice.tcp.is_empty() {
            return;
        }
        let streaming: Vec<&SenderTcp> = (slice.active.iter())
            .filter_map(|&i| slice.tcp.get(i))
            .filter(|t| t.samples > 0)
            .collect();
        let rtt = median(streaming.iter().map(|t| t.rtt_us).collect());
        let min_rtt = median(streaming.iter().filter_map(|t| t.bbr_min_rtt_us).collect());
        let (in_flight, rtts, min_rtts) = if all {
            (
                &mut self.in_flight_all,
                &mut self.rtt_all_us,
                &mut self.bbr_min_rtt_all_us,
            )
        } else {
            (
                &mut self.in_flight_one,
                &mut self.rtt_one_us,
                &mut self.bbr_min_rtt_one_us,
            )
        };
        in_flight.push(slice.in_flight_bytes);
        rtts.extend(rtt);
        min_rtts.extend(min_rtt);
    }
}

impl OneTestbed {
    /// The summary of the rounds' figures; `testbed_rounds` says how many consecutive rounds
    /// each testbed ran (empty: all on one).
    pub fn new(
        config: &str,
        guests: usize,
        (one_mbps, all_mbps): (Vec<f64>, Vec<f64>),
        testbed_rounds: Vec<usize>,
        jain: Vec<f64>,
        stream_bytes: Vec<u64>,
    ) -> OneTestbed {
        let ratios: Vec<f64> = (one_mbps.iter().zip(&all_mbps))
            .map(|(o, a)| if *o > 0.0 { a / o } else { 0.0 })
            .collect();
        let testbed_rounds = if testbed_rounds.is_empty() {
            vec![ratios.len()]
        } else {
            testbed_rounds
        };
        let gm = geomean_ci95_testbeds(&ratios, &testbed_rounds);
        let ci95 = gm.map(|(_, lo, hi)| [lo, hi]);
        let js = Stat::of(&jain);
        let bytes: Vec<f64> = stream_bytes.iter().map(|&b| b as f64).collect();
        let jain_overall = (!ratios.is_empty()).then(|| measure::jain(&bytes));
        OneTestbed {
            config: config.to_string(),
            guests,
            rounds: ratios.len(),
            testbed_rounds,
            slice_seconds: SLICE_SECONDS,
            settle_seconds: SETTLE_SECONDS,
            one_mbps,
            all_mbps,
            geomean: gm.map(|(g, _, _)| g),
            ci95,
            verdict: Verdict::judge(ci95, 1.0 - AGGREGATE_GOAL),
            ratios,
            jain_median: js.map(|j| j.median),
            jain_min: js.map(|j| j.min),
            jain,
            jain_overall,
            stream_bytes,
            bytes_verified: 0,
            run_ids: Vec::new(),
            testbed_starts_s: Vec::new(),
            wall_seconds: 0.0,
            senders: Senders::default(),
        }
    }

    /// Whether Jain's index over the session meets [`JAIN_GOAL`] (None without rounds).
    pub fn jain_met(&self) -> Option<bool> {
        self.jain_overall.map(|j| j >= JAIN_GOAL)
    }
}

/// A configuration's standing-testbed N ÷ 1 against its floor's ([`configs::FLOORS`]) at the
/// same N in the same run: the quotient of the two geometric means and its interval (two
/// series from testbeds of their own, so Welch's t on the logarithms). 1 is the floor's own
/// scaling; below it, Xen's machinery loses more to the extra guests than the port and the
/// TAP alone do.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AgainstFloor {
    /// The configuration (`xen/g8`) and its floor (`relay/g8`).
    pub config: String,
    pub floor: String,
    /// The configuration's geometric mean over the floor's.
    pub quotient: f64,
    pub ci95: Option<[f64; 2]>,
}

/// Every standing-testbed comparison whose floor ran one too, at the same number of guests.
pub fn against_floors(rows: &[OneTestbed]) -> Vec<AgainstFloor> {
    (rows.iter())
        .filter_map(|r| {
            let n = configs::Name::parse(&r.config).ok()?;
            let floor = n.with_base(configs::floor_of(n.base)?);
            let f = rows.iter().find(|f| f.config == floor)?;
            let quotient = r.geomean? / f.geomean?;
            let ci95 = geomean_quotient_ci95(
                (&r.ratios, &r.testbed_rounds),
                (&f.ratios, &f.testbed_rounds),
            )
            .map(|(_, lo, hi)| [lo, hi]);
            Some(AgainstFloor {
                config: r.config.clone(),
                floor,
                quotient,
                ci95,
            })
        })
        .collect()
}

/// "met", "missed", or a dash without a figure.
fn met(m: Option<bool>) -> String {
    match m {
        Some(true) => "met".into(),
        Some(false) => "missed".into(),
        None => "—".into(),
    }
}

/// The table of the standing-testbed comparisons: a column per configuration.
pub fn one_testbed_table(rows: &[OneTestbed]) -> Table {
    let f2 = |x: Option<f64>| fmt(x, 2);
    let med = |v: &[f64]| Stat::of(v).map(|s| s.median);
    let col = |f: &dyn Fn(&OneTestbed) -> String| rows.iter().map(f).collect::<Vec<String>>();
    let mut table = Table {
        title: format!(
            "Against one guest on standing testbeds (slices of {SLICE_SECONDS} s after {SETTLE_SECONDS} s to settle, one guest and all in turn on each)"
        ),
        columns: col(&|s| s.config.clone()),
        rows: vec![
            ("rounds".into(), col(&|s| s.rounds.to_string())),
            (
                "testbeds, one after the other".into(),
                col(&|s| s.testbed_rounds.len().to_string()),
            ),
            (
                "one guest (Mbit/s), median".into(),
                col(&|s| format!("{:.0}", med(&s.one_mbps).unwrap_or(0.0))),
            ),
            (
                "all guests (Mbit/s), median".into(),
                col(&|s| format!("{:.0}", med(&s.all_mbps).unwrap_or(0.0))),
            ),
            (
                "÷ one guest, geometric mean over the testbeds".into(),
                col(&|s| f2(s.geomean)),
            ),
            (
                "  95 % confidence interval".into(),
                col(&|s| s.ci95.map_or("—".into(), |[lo, hi]| format!("{lo:.2} – {hi:.2}"))),
            ),
            (
                format!("aggregate ≥ {AGGREGATE_GOAL}× one guest"),
                col(&|s| s.verdict.as_str().into()),
            ),
        ],
    };
    let floors = against_floors(rows);
    if !floors.is_empty() {
        let of = |s: &OneTestbed| floors.iter().find(|f| f.config == s.config);
        table.rows.extend([
            (
                "its floor in this run".into(),
                col(&|s| of(s).map_or("—".into(), |f| f.floor.clone())),
            ),
            (
                "÷ the floor's, geometric means".into(),
                col(&|s| f2(of(s).map(|f| f.quotient))),
            ),
            (
                "  95 % confidence interval".into(),
                col(&|s| {
                    (of(s).and_then(|f| f.ci95))
                        .map_or("—".into(), |[lo, hi]| format!("{lo:.2} – {hi:.2}"))
                }),
            ),
        ]);
    }
    table.rows.extend([
        (
            "Jain's index over the all-guest slices".into(),
            col(&|s| f2(s.jain_overall)),
        ),
        ("  per slice, median".into(), col(&|s| f2(s.jain_median))),
        ("  per slice, min".into(), col(&|s| f2(s.jain_min))),
        (
            format!("Jain ≥ {JAIN_GOAL} (all-guest slices)"),
            col(&|s| met(s.jain_met())),
        ),
        (
            "verified (MB, all streams)".into(),
            col(&|s| format!("{:.0}", s.bytes_verified as f64 / 1e6)),
        ),
    ]);
    // Each sender figure's medians over the slices, one guest and all.
    let medians = |one: &[u64], all: &[u64]| {
        let f = |v: &[u64]| med(&v.iter().map(|&x| x as f64).collect::<Vec<f64>>());
        (f(one), f(all))
    };
    let arrow = |(one, all): (Option<f64>, Option<f64>)| match (one, all) {
        (Some(o), Some(a)) => format!("{o:.0} → {a:.0}"),
        _ => "—".into(),
    };
    let in_flight_kib = |s: &OneTestbed| {
        let (o, a) = medians(&s.senders.in_flight_one, &s.senders.in_flight_all);
        (o.map(|b| b / 1024.0), a.map(|b| b / 1024.0))
    };
    let us = |v: &[u32]| v.iter().map(|&x| u64::from(x)).collect::<Vec<u64>>();
    table.rows.extend([
        (
            "senders' bytes in flight, one guest → all (KiB), medians".into(),
            col(&|s| arrow(in_flight_kib(s))),
        ),
        (
            "  all ÷ one".into(),
            col(&|s| {
                let (one, all) = in_flight_kib(s);
                f2(one.zip(all).filter(|(o, _)| *o > 0.0).map(|(o, a)| a / o))
            }),
        ),
        (
            "senders' smoothed RTT, one guest → all (µs), medians".into(),
            col(&|s| {
                arrow(medians(
                    &us(&s.senders.rtt_one_us),
                    &us(&s.senders.rtt_all_us),
                ))
            }),
        ),
        (
            "BBR's minimum RTT, one guest → all (µs), medians".into(),
            col(&|s| {
                let t = &s.senders;
                arrow(medians(
                    &us(&t.bbr_min_rtt_one_us),
                    &us(&t.bbr_min_rtt_all_us),
                ))
            }),
        ),
    ]);
    table
}

/// What the standing-testbed table's figures are, for the report.
pub const ONE_TESTBED_NOTE: &str = "For each configuration, testbeds of N guests started one after the other (`--scaling-testbeds`, default 8), the rounds split evenly between them, and the configurations' testbeds taking turns (the first of each, then the second of each, ...) so that the machine's drift during the run falls on all alike; on each, its N receivers and one sender process on the remote host (`pvnet perf streams`) keeping one connection per guest open throughout, with `tcp_slow_start_after_idle` off so that a paused stream resumes at its window. Each round runs a slice with one guest streaming (guest `round mod N`) and a slice with all N, in the order one–all, then all–one; each slice counts the bytes the receivers acknowledged (`tcpi_bytes_acked`) over 0.5 s, after 0.3 s in which the paused streams drain and the resumed ones reach their rate. The ratio per round is the all-N slice over the one-guest slice; the geometric mean is that of the testbeds' own, and its interval Student's t over the testbeds' (K − 1 degrees of freedom): testbeds of one configuration differ by more than the rounds on one of them (±0.02 in 8 ÷ 1 here), which an interval over one testbed's rounds leaves out. Neither covers a shared machine's drift over hours: on the project's VM, whole runs hours apart differed by up to 0.05 (docs/guest-scaling.md). With one testbed, the interval is over the means of 16 batches of consecutive rounds (32 rounds or more), as for the paired TCP_RR. Jain's index is given over the whole session (each stream's bytes summed over the all-N slices: what a stream of several seconds on a fresh testbed measures; the goal is judged on it) and per all-N slice (the sharing over half a second, which can be uneven while the session's is even). Every stream is verified byte for byte by its receiver at the end. The senders' rows come from their sockets' `TCP_INFO`, sampled every 50 ms in each slice's measured window: the bytes in flight of every stream together (`tcpi_unacked × tcpi_snd_mss`: sent and not yet acknowledged, wherever on the path they wait), the streaming guests' smoothed RTT and, under BBR, its minimum-RTT estimate (`TCP_CC_INFO`); each the median over the slices.";

/// What the standing-testbed table's rows against the floors are, for the report: the floors
/// named from [`configs::FLOORS`].
pub fn floors_note() -> String {
    let pairs: Vec<String> = (configs::FLOORS.iter())
        .map(|(c, f)| format!("`{f}` for `{c}`"))
        .collect();
    format!(
        "Where a configuration's floor ran too ({}: the same port and flush without the grant copy, the guest's ring and netfront), \"÷ the floor's\" is its geometric mean over the floor's at the same number of guests, with a 95 % interval from Welch's t on the two series' logarithms (each over its testbeds, as above): 1 means the extra guests cost the PV path no more than they cost the port and the TAP alone.",
        pairs.join(", ")
    )
}

/// The rounds one testbed runs: `count` from round `first` of `total`, on testbed `testbed`
/// of `testbeds` (counted from 0).
#[derive(Clone, Copy, Debug)]
struct Span {
    first: usize,
    count: usize,
    total: usize,
    testbed: usize,
    testbeds: usize,
}

/// What the testbeds' rounds measured, each testbed's added in turn.
struct Session {
    one: Vec<f64>,
    all: Vec<f64>,
    fair: Vec<f64>,
    stream_bytes: Vec<u64>,
    bytes_verified: u64,
    senders: Senders,
}

/// One configuration's standing-testbed comparison while it runs: its rounds so far, its
/// testbeds' run ids, its time, and the error that stopped it.
struct Standing {
    config: String,
    sum: Session,
    ids: Vec<String>,
    starts: Vec<f64>,
    seconds: f64,
    failed: Option<String>,
}

impl Standing {
    fn new(config: &str) -> Standing {
        let (guests, failed) = match configs::Name::parse(config) {
            Err(e) => (0, Some(format!("{e:#}"))),
            Ok(n) if n.guests < 2 => (
                0,
                Some(format!(
                    "{config}: the standing-testbed comparison needs at least 2 guests"
                )),
            ),
            Ok(n) => (n.guests, None),
        };
        Standing {
            config: config.to_string(),
            sum: Session {
                one: Vec::new(),
                all: Vec::new(),
                fair: Vec::new(),
                stream_bytes: vec![0; guests],
                bytes_verified: 0,
                senders: Senders::default(),
            },
            ids: Vec::new(),
            starts: Vec::new(),
            seconds: 0.0,
            failed,
        }
    }

    /// The rounds of `span` on a testbed of their own (its own configuration and run id).
    fn testbed(&mut self, span: Span, p: &Params, progress: &Progress) -> Result<()> {
        let config = self.config.as_str();
        let cfg = p.daemon_config(configs::daemon_config(config)?);
        let mode = cfg.mode;
        let sum = &mut self.sum;
        let ((), info) = testbed::with_testbed(&cfg, config, progress, |info| {
            rounds_on(info, mode, config, span, p, progress, sum)
        })?;
        self.ids.push(info.id.clone());
        Ok(())
    }

    fn finish(self, sizes: &[usize]) -> Result<OneTestbed, String> {
        if let Some(e) = self.failed {
            return Err(format!(
                "the standing-testbed comparison of {} failed: {e}",
                self.config
            ));
        }
        let Session {
            one,
            all,
            fair,
            stream_bytes,
            bytes_verified,
            senders,
        } = self.sum;
        let guests = stream_bytes.len();
        let mut r = OneTestbed::new(
            &self.config,
            guests,
            (one, all),
            sizes.to_vec(),
            fair,
            stream_bytes,
        );
        r.bytes_verified = bytes_verified;
        r.senders = senders;
        r.run_ids = self.ids;
        r.testbed_starts_s = self.starts;
        r.wall_seconds = self.seconds;
        Ok(r)
    }
}

/// Runs the standing-testbed comparison of each of `configs` (each a `NAME/gN` with N ≥ 2):
/// `rounds` rounds each, split between `testbeds` testbeds ([`split_evenly`]) started one
/// after the other and interleaved between the configurations: the first testbed of every
/// configuration, then the second of every one, and so on. The machine's drift over the run
/// (tens of minutes) then falls on every configuration alike, on a configuration and its floor
/// above all. Each testbed is one progress step. Returns the comparisons that ran to the end
/// and an error message for each that did not; errs only when interrupted.
pub fn run_standing(
    configs: &[String],
    rounds: usize,
    testbeds: usize,
    p: &Params,
    progress: &Progress,
) -> Result<(Vec<OneTestbed>, Vec<String>)> {
    let sizes = split_evenly(rounds, testbeds);
    let mut runs: Vec<Standing> = configs.iter().map(|c| Standing::new(c)).collect();
    let (t0, mut first) = (Instant::now(), 0);
    for (testbed, &count) in sizes.iter().enumerate() {
        let span = Span {
            first,
            count,
            total: rounds,
            testbed,
            testbeds: sizes.len(),
        };
        for r in &mut runs {
            progress.step(&format!(
                "{} against one guest on standing testbed {} of {}",
                r.config,
                testbed + 1,
                sizes.len()
            ));
            if r.failed.is_none() {
                let start = t0.elapsed().as_secs_f64();
                r.starts.push(start);
                let done = r.testbed(span, p, progress);
                r.seconds += t0.elapsed().as_secs_f64() - start;
                match done {
                    Err(e) if e.downcast_ref::<interrupt::Interrupted>().is_some() => {
                        return Err(e)
                    }
                    Err(e) => r.failed = Some(format!("testbed {}: {e:#}", testbed + 1)),
                    Ok(()) => {}
                }
            }
            progress.step_done();
        }
        first += count;
    }
    let (mut done, mut errors) = (Vec::new(), Vec::new());
    for r in runs {
        match r.finish(&sizes) {
            Ok(r) => done.push(r),
            Err(e) => errors.push(e),
        }
    }
    Ok((done, errors))
}

/// Runs the rounds of `span` on the testbed `info` and adds what they measured to `sum`
/// (whose `stream_bytes` has a place for each of the testbed's guests).
fn rounds_on(
    info: &RunInfo,
    mode: Mode,
    config: &str,
    span: Span,
    p: &Params,
    progress: &Progress,
    sum: &mut Session,
) -> Result<()> {
    let guests = sum.stream_bytes.len();
    let exe = std::env::current_exe()?;
    let remote = Netns::open(&info.remote_ns)?;
    // A paused stream keeps its congestion window: it resumes where it was, not from the
    // initial window after an idle RTO.
    pvnet_testbed::sys::write_sysctl_in(&remote, "net/ipv4/tcp_slow_start_after_idle", "0")?;
    let hosts = measure::receiving_hosts(info, mode, guests);
    let mut servers = Vec::with_capacity(guests);
    let mut to = Vec::with_capacity(guests);
    for (i, (ns, addr)) in hosts.iter().enumerate() {
        let host = Netns::open(ns)?;
        let port = measure::PORT + i as u16;
        let mut server =
            measure::start_builtin_server_on(&exe, &host, configs::RX_CPU, port, true)?;
        measure::wait_listening_on(&host, &mut server, port)?;
        measure::join_guest_group(info, i, server.pid())?;
        servers.push(server);
        to.push(format!("{addr}:{port}"));
    }
    let mut cmd = child::pinned(remote.command(&exe), configs::TX_CPU);
    cmd.args(["perf", "streams", "--msg-size", &p.msg_size.to_string()]);
    for t in &to {
        cmd.args(["--to", t]);
    }
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut sender = child::Guard(cmd.spawn().context("starting the streams' sender")?);
    let mut stdin = sender.0.stdin.take().context("the sender's stdin")?;
    let mut lines = BufReader::new(sender.0.stdout.take().context("the sender's stdout")?).lines();
    let mut slice = |active: &str, settle: f64, seconds: f64| -> Result<StreamsSlice> {
        let answer = writeln!(stdin, "{settle} {seconds} {active}")
            .and_then(|()| stdin.flush())
            .map_err(anyhow::Error::from)
            .and_then(|()| {
                lines
                    .next()
                    .ok_or_else(|| anyhow!("it ended"))?
                    .map_err(anyhow::Error::from)
            })
            .and_then(|l| Ok(serde_json::from_str::<StreamsSlice>(&l)?));
        answer.map_err(|e| anyhow!("{config}: the streams' sender failed in a slice ({e})"))
    };
    // Every stream up to speed once before the first round.
    slice("all", 0.0, 1.0)?;
    let every = span.count.div_ceil(8).max(1);
    let rounds = span.first..span.first + span.count;
    for round in rounds.clone() {
        interrupt::check()?;
        if (round - span.first).is_multiple_of(every) {
            let last = (round + every).min(rounds.end);
            progress.phase(
                &format!(
                    "one guest and {guests} in turn on testbed {} of {}, rounds {}-{last} of {}",
                    span.testbed + 1,
                    span.testbeds,
                    round + 1,
                    span.total
                ),
                2.0 * (SLICE_SECONDS + SETTLE_SECONDS) * (last - round) as f64,
            );
        }
        let single = (round % guests).to_string();
        let order = if round % 2 == 0 {
            [single.as_str(), "all"]
        } else {
            ["all", single.as_str()]
        };
        for active in order {
            let s = slice(active, SETTLE_SECONDS, SLICE_SECONDS)?;
            sum.senders.add(&s, active == "all");
            if active == "all" {
                sum.all.push(s.mbps());
                sum.fair.push(measure::jain(&s.active_mbps()));
                for (total, b) in sum.stream_bytes.iter_mut().zip(&s.bytes) {
                    *total += b;
                }
            } else {
                sum.one.push(s.mbps());
            }
        }
    }
    drop(stdin);
    let done = lines.next().transpose()?.unwrap_or_default();
    let st = sender.0.wait()?;
    let result: Option<StreamsResult> = serde_json::from_str(&done).ok();
    let Some(result) = result.filter(|r| st.success() && r.intact()) else {
        bail!(
            "{config}: the streams did not arrive intact ({}): {done}",
            sender.exited().unwrap_or_else(|| st.to_string())
        );
    };
    for (i, mut s) in servers.into_iter().enumerate() {
        let st = s.0.wait()?;
        if !st.success() {
            bail!(
                "{config}: guest {i}'s receiver ended with {}",
                s.exited().unwrap_or_default()
            );
        }
    }
    sum.bytes_verified += result.receivers.iter().map(|x| x.bytes).sum::<u64>();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::summary::summarize;
    use super::*;

    fn sample(config: &str, rep: usize, mbps: f64, jain: Option<f64>) -> Sample {
        Sample {
            config: config.into(),
            rep,
            warmup: rep == 0,
            throughput_mbps: mbps,
            jain,
            ..Sample::default()
        }
    }

    fn run(rounds: &[(f64, f64, f64)]) -> (Vec<ConfigSummary>, Vec<Sample>) {
        let configs: Vec<String> = ["xen", "xen/g8", "relay"].map(String::from).to_vec();
        let mut samples = vec![
            // The warm-up is never paired: it would pull every ratio towards 0.5.
            sample("xen", 0, 1000.0, None),
            sample("xen/g8", 0, 500.0, Some(0.5)),
        ];
        for (i, (one, eight, jain)) in rounds.iter().enumerate() {
            samples.push(sample("xen", i + 1, *one, None));
            samples.push(sample("xen/g8", i + 1, *eight, Some(*jain)));
            samples.push(sample("relay", i + 1, 900.0, None));
        }
        (summarize(&configs, &samples), samples)
    }

    #[test]
    fn rounds_are_paired_and_the_goal_judged_on_the_interval() {
        // The one-guest figure swings between rounds; each round's 8 ÷ 1 stays near 0.95.
        let (cs, samples) = run(&[
            (3000.0, 2850.0, 0.99),
            (2400.0, 2290.0, 0.98),
            (2800.0, 2650.0, 0.97),
            (2500.0, 2390.0, 0.99),
        ]);
        let s = scaling(&cs, &samples);
        assert_eq!(s.len(), 1, "relay ran with one guest only: no row");
        let x = &s[0];
        assert_eq!(
            (x.name.as_str(), x.one.as_str(), x.guests),
            ("xen/g8", "xen", 8)
        );
        assert_eq!(x.ratios.len(), 4);
        assert!((x.ratios[1] - 2290.0 / 2400.0).abs() < 1e-12);
        let [lo, hi] = x.ci95.unwrap();
        assert!(lo > 0.93 && hi < 0.97, "{lo} {hi}");
        assert_eq!(x.verdict, Verdict::Holds);
        assert_eq!(x.jain_met, Some(true));
        // The medians' ratio (2520 / 2650) says less than the paired rounds do.
        assert!((x.ratio_of_medians - 2520.0 / 2650.0).abs() < 1e-12);
    }

    #[test]
    fn a_ratio_below_the_goal_fails_and_too_few_rounds_leave_it_undecided() {
        // 0.80, 0.82 and 0.81: the whole interval lies below 0.9.
        let rounds = [
            (3000.0, 2400.0, 0.90),
            (2500.0, 2050.0, 0.96),
            (2000.0, 1620.0, 0.99),
        ];
        let (cs, samples) = run(&rounds);
        let s = &scaling(&cs, &samples)[0];
        assert_eq!(s.verdict, Verdict::Fails, "{:?}", s.ci95);
        assert_eq!(s.jain_met, Some(true), "the median is 0.96");
        // The same two first rounds alone: t with one degree of freedom is 12.7, and the
        // interval reaches above 0.9.
        let (cs, samples) = run(&rounds[..2]);
        let s = &scaling(&cs, &samples)[0];
        assert_eq!(s.verdict, Verdict::Undecided, "{:?}", s.ci95);
        assert_eq!(s.jain_met, Some(false), "the median is 0.93");
    }

    #[test]
    fn one_testbed_rounds_are_judged_on_their_interval_and_the_session_s_sharing() {
        // 40 rounds whose one-guest rate swings by ±20 % while each round's ratio stays
        // within 0.80-0.84: the interval is narrow and all below 0.9.
        let one: Vec<f64> = (0..40)
            .map(|i| 2500.0 + 500.0 * ((i % 5) as f64 - 2.0) / 2.0)
            .collect();
        let all: Vec<f64> = (one.iter().enumerate())
            .map(|(i, o)| o * (0.80 + 0.01 * (i % 5) as f64))
            .collect();
        // Each slice unfair one way or the other, the session even.
        let per_slice = vec![0.8; 40];
        let r = OneTestbed::new(
            "xen/g8",
            8,
            (one.clone(), all.clone()),
            vec![],
            per_slice.clone(),
            vec![1000; 8],
        );
        assert_eq!(r.rounds, 40);
        assert!((r.ratios[3] - 0.83).abs() < 1e-12);
        let [lo, hi] = r.ci95.unwrap();
        assert!(lo > 0.80 && hi < 0.84 && lo < hi, "{lo} {hi}");
        assert_eq!(r.verdict, Verdict::Fails);
        assert_eq!((r.jain_median, r.jain_overall), (Some(0.8), Some(1.0)));
        assert_eq!(r.jain_met(), Some(true), "judged on the whole session");
        let t = one_testbed_table(&[r]);
        assert_eq!(t.columns, ["xen/g8"]);
        assert!(t.text().contains("fails"), "{}", t.text());
        // The same rounds from two testbeds whose own ratios differ: the interval is over the
        // two testbeds' means, wider than one testbed's rounds gave.
        let shifted: Vec<f64> = (all.iter().enumerate())
            .map(|(i, a)| if i < 20 { a * 1.04 } else { *a })
            .collect();
        let two = OneTestbed::new(
            "xen/g8",
            8,
            (one, shifted),
            vec![20, 20],
            per_slice,
            vec![1000; 8],
        );
        assert_eq!((two.rounds, two.testbed_rounds.clone()), (40, vec![20, 20]));
        let [lo2, hi2] = two.ci95.unwrap();
        assert!(hi2 - lo2 > 3.0 * (hi - lo), "{lo2}–{hi2} against {lo}–{hi}");
        assert_eq!(two.verdict, Verdict::Undecided, "{lo2}–{hi2}");
        assert!(one_testbed_table(&[two])
            .text()
            .contains("testbeds, one after the other"));
        // A guest that got nothing over the session misses the goal.
        let r = OneTestbed::new(
            "xen/g2",
            2,
            (vec![1.0; 4], vec![1.0; 4]),
            vec![],
            vec![1.0; 4],
            vec![5, 0],
        );
        assert_eq!((r.jain_overall, r.jain_met()), (Some(0.5), Some(false)));
    }

    #[test]
    fn the_senders_figures_are_kept_per_slice_and_shown_one_against_all() {
        let tcp = |in_flight_bytes, rtt_us, bbr_min_rtt_us| SenderTcp {
            samples: 10,
            in_flight_bytes,
            rtt_us,
            cwnd: 100,
            bbr_min_rtt_us,
        };
        let slice = |active: Vec<usize>, tcp: Vec<SenderTcp>, in_flight_bytes| StreamsSlice {
            active,
            seconds: 0.5,
            bytes: vec![1; 3],
            tcp,
            in_flight_bytes,
        };
        let paused = SenderTcp::default();
        let mut s = Senders::default();
        // Guest 1 alone: only its figures count, the paused streams' are not the streaming
        // guests'. The bytes in flight are the slice's own, every stream together.
        s.add(
            &slice(vec![1], vec![paused, tcp(900, 300, Some(90)), paused], 2048),
            false,
        );
        s.add(
            &slice(
                vec![0, 1, 2],
                vec![
                    tcp(1, 500, Some(120)),
                    tcp(1, 700, Some(140)),
                    tcp(1, 600, Some(130)),
                ],
                4096,
            ),
            true,
        );
        // A sender of an older version gives no figures: nothing is added.
        s.add(&slice(vec![0], vec![], 0), false);
        assert_eq!(
            s,
            Senders {
                in_flight_one: vec![2048],
                in_flight_all: vec![4096],
                rtt_one_us: vec![300],
                rtt_all_us: vec![600],
                bbr_min_rtt_one_us: vec![90],
                bbr_min_rtt_all_us: vec![130],
            }
        );
        let mut r = OneTestbed::new(
            "xen/g3",
            3,
            (vec![1.0], vec![1.0]),
            vec![],
            vec![1.0],
            vec![1; 3],
        );
        r.senders = s;
        let text = one_testbed_table(&[r]).text();
        for want in ["2 → 4", "2.00", "300 → 600", "90 → 130"] {
            assert!(text.contains(want), "{want} not in\n{text}");
        }
        // Without BBR (or without the figures) the rows say so.
        let mut r = OneTestbed::new("xen/g2", 2, (vec![], vec![]), vec![], vec![], vec![0; 2]);
        r.senders.rtt_one_us = vec![5];
        let text = one_testbed_table(&[r]).text();
        assert!(text.contains("BBR's minimum RTT"), "{text}");
        assert!(!text.contains("5 →"), "one side only: {text}");
    }

    #[test]
    fn each_configuration_is_set_against_its_floor_at_the_same_number_of_guests() {
        // 40 rounds on four testbeds, each a little above the last: the floor keeps 0.90-0.96
        // of one guest, `xen` 0.85-0.91, `adaptive` 0.80-0.86; the floor with aggregation ran at
        // four guests only.
        let series = |name: &str, guests: usize, base: f64| {
            let one = vec![3000.0; 40];
            let all: Vec<f64> = (0..40)
                .map(|i| 3000.0 * (base + 0.01 * ((i * 7) % 5) as f64 + 0.004 * (i / 10) as f64))
                .collect();
            let t = vec![10; 4];
            OneTestbed::new(
                name,
                guests,
                (one, all),
                t,
                vec![1.0; 40],
                vec![1000; guests],
            )
        };
        let rows = [
            series("xen/g8", 8, 0.85),
            series("adaptive/g8", 8, 0.80),
            series("relay/g8", 8, 0.90),
            series("relay-adaptive/g4", 4, 0.80),
            series("relay/g4", 4, 0.90),
        ];
        let f = against_floors(&rows);
        assert_eq!(
            f.len(),
            1,
            "adaptive's floor ran at four guests, xen's own at four did not"
        );
        assert_eq!(
            (f[0].config.as_str(), f[0].floor.as_str()),
            ("xen/g8", "relay/g8")
        );
        let expect = rows[0].geomean.unwrap() / rows[2].geomean.unwrap();
        assert!((f[0].quotient - expect).abs() < 1e-12 && (expect - 0.85 / 0.90).abs() < 0.01);
        let [lo, hi] = f[0].ci95.unwrap();
        assert!(
            lo < f[0].quotient && f[0].quotient < hi && hi < 1.0,
            "{lo} {hi}"
        );
        let t = one_testbed_table(&rows).text();
        assert!(
            t.contains("its floor in this run") && t.contains("relay/g8"),
            "{t}"
        );
        assert!(t.contains(&format!("{:.2}", f[0].quotient)), "{t}");
        assert!(floors_note().contains("`relay` for `xen`"));
        // Without a floor in the run, the table has no such rows.
        let t = one_testbed_table(&rows[..2]).text();
        assert!(!t.contains("floor"), "{t}");
    }

    #[test]
    fn rounds_split_evenly_between_testbeds_in_order() {
        assert_eq!(split_evenly(40, 4), [10, 10, 10, 10]);
        assert_eq!(split_evenly(10, 4), [2, 3, 2, 3]);
        assert_eq!(split_evenly(40, 1), [40]);
        assert_eq!(split_evenly(40, 0), [40], "no testbed is one");
        assert_eq!(split_evenly(7, 3).iter().sum::<usize>(), 7);
    }

    #[test]
    fn wide_interval_is_undecided_and_a_single_round_has_none() {
        let (cs, samples) = run(&[(3000.0, 2400.0, 0.9), (2000.0, 2100.0, 0.9)]);
        let s = &scaling(&cs, &samples)[0];
        assert_eq!(s.verdict, Verdict::Undecided);
        assert_eq!(s.jain_met, Some(false));
        let (cs, samples) = run(&[(3000.0, 2900.0, 0.99)]);
        let s = &scaling(&cs, &samples)[0];
        assert_eq!((s.ci95, s.verdict), (None, Verdict::Undecided));
        let t = table(&scaling(&cs, &samples));
        assert_eq!(t.columns, ["xen/g8"]);
        let text = t.text();
        assert!(
            text.contains("0.97") && text.contains("undecided"),
            "{text}"
        );
    }
}
