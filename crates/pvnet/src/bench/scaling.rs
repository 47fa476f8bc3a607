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

use super::measure::Sample;
use super::paired::Verdict;
use super::plot::guest_lines;
use super::report::Table;
use super::summary::{geomean_ci95, ConfigSummary, Stat};

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
    let f2 = |x: Option<f64>| {
        x.filter(|x| x.is_finite())
            .map_or("—".into(), |x| format!("{x:.2}"))
    };
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
                col(&|s| match s.jain_met {
                    Some(true) => "met".into(),
                    Some(false) => "missed".into(),
                    None => "—".into(),
                }),
            ),
        ],
    }
}

/// What the table's verdicts mean, for the report.
pub const NOTE: &str = "Each round of the run ran every configuration once, back to back, so each round gives a paired ratio: the N-guest aggregate over the same round's one guest. The goal is judged on the 95 % confidence interval of the rounds' geometric mean (Student's t on the logarithms): `holds` when the whole interval lies at or above it, `fails` when the whole interval lies below it, `undecided` when it straddles it (more repetitions, `--reps`, narrow it). The ratio of the medians is shown beside it; one run's ratio of medians moves by several hundredths with the one-guest figure alone.";

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
