//! From raw samples to what the tables show: per configuration and metric the median, min and
//! max over the measured repetitions (the warm-up excluded), and the ratios against `linux` and
//! `xen` computed from the medians of the same run.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::configs;
use super::measure::Sample;

/// One figure the bench reports. `key` is its path in `results.json` (dots nest).
pub struct Metric {
    pub key: &'static str,
    pub label: &'static str,
    pub get: fn(&Sample) -> Option<f64>,
    /// Whether "vs Linux %" and "vs Xen %" rows make sense for it.
    pub ratios: bool,
    /// Decimals in the tables.
    pub decimals: usize,
}

/// The least or the most (`pick`) of one figure per guest, in a sample of several guests
/// (one guest's run has no spread to show).
fn of_several(s: &Sample, per_guest: &[f64], pick: fn(f64, f64) -> f64) -> Option<f64> {
    s.jain.and(per_guest.iter().copied().reduce(pick))
}

/// Every metric, in report order.
pub const METRICS: &[Metric] = &[
    Metric {
        key: "throughput_mbps",
        label: "throughput (Mbit/s)",
        get: |s| Some(s.throughput_mbps),
        ratios: true,
        decimals: 0,
    },
    Metric {
        key: "cycles_per_byte.port",
        label: "cycles/byte port (softirq + NAPI threads)",
        get: |s| Some(s.cycles_per_byte_port),
        ratios: true,
        decimals: 2,
    },
    Metric {
        key: "cycles_per_byte.daemon",
        label: "cycles/byte daemon process",
        get: |s| s.cycles_per_byte_daemon,
        ratios: true,
        decimals: 2,
    },
    Metric {
        key: "cycles_per_byte.accounted",
        label: "cycles/byte accounted (port + daemon + receiving side)",
        get: |s| Some(s.cycles_per_byte_accounted),
        ratios: true,
        decimals: 2,
    },
    Metric {
        key: "cycles_per_byte.driver",
        label: "cycles/byte driver domain",
        get: |s| s.cycles_per_byte_driver,
        ratios: true,
        decimals: 2,
    },
    Metric {
        key: "cycles_per_byte.guest",
        label: "cycles/byte guest",
        get: |s| s.cycles_per_byte_guest,
        ratios: true,
        decimals: 2,
    },
    Metric {
        key: "cycles_per_byte.total",
        label: "cycles/byte total",
        get: |s| Some(s.cycles_per_byte_total),
        ratios: true,
        decimals: 2,
    },
    Metric {
        key: "cycles_per_byte.softirq",
        label: "of the total: softirq",
        get: |s| Some(s.cycles_per_byte_softirq),
        ratios: false,
        decimals: 2,
    },
    Metric {
        key: "lro_rate",
        label: "segments per aggregate",
        get: |s| s.lro_rate,
        ratios: false,
        decimals: 2,
    },
    Metric {
        key: "lro_psh_pct",
        label: "of them ended by the sender's PSH (%)",
        get: |s| s.lro_psh_pct,
        ratios: false,
        decimals: 1,
    },
    Metric {
        key: "rr_tps",
        label: "TCP_RR (trans/s)",
        get: |s| Some(s.rr_tps),
        ratios: true,
        decimals: 0,
    },
    Metric {
        key: "rr_latency_us.p50",
        label: "RR latency p50 (us)",
        get: |s| Some(s.rr_p50_us),
        ratios: false,
        decimals: 1,
    },
    Metric {
        key: "rr_latency_us.p99",
        label: "RR latency p99 (us)",
        get: |s| Some(s.rr_p99_us),
        ratios: false,
        decimals: 1,
    },
    Metric {
        key: "flush_latency_us.p50",
        label: "flush latency p50 (us)",
        get: |s| s.flush_latency_p50_us,
        ratios: false,
        decimals: 1,
    },
    Metric {
        key: "flush_latency_us.p99",
        label: "flush latency p99 (us)",
        get: |s| s.flush_latency_p99_us,
        ratios: false,
        decimals: 1,
    },
    Metric {
        key: "retransmissions",
        label: "retransmitted segments",
        get: |s| Some(s.retransmissions as f64),
        ratios: false,
        decimals: 0,
    },
    Metric {
        key: "dsacked_segments",
        label: "of them, D-SACKed (not lost)",
        get: |s| Some(s.dsacked_segments as f64),
        ratios: false,
        decimals: 0,
    },
    Metric {
        key: "port_drops",
        label: "frames dropped at the physical port",
        get: |s| s.port_drops.map(|d| d as f64),
        ratios: false,
        decimals: 0,
    },
    Metric {
        key: "sender.in_flight_kib",
        label: "bytes in flight at the senders (KiB, all streams)",
        get: |s| s.sender_in_flight_bytes.map(|b| b as f64 / 1024.0),
        ratios: false,
        decimals: 0,
    },
    Metric {
        key: "sender.rtt_us",
        label: "senders' smoothed RTT (us)",
        get: |s| s.sender_rtt_us,
        ratios: false,
        decimals: 0,
    },
    Metric {
        key: "jain",
        label: "Jain's fairness index",
        get: |s| s.jain,
        ratios: false,
        decimals: 3,
    },
    Metric {
        key: "per_guest_mbps.min",
        label: "slowest guest (Mbit/s)",
        get: |s| of_several(s, &s.per_guest_mbps, f64::min),
        ratios: false,
        decimals: 0,
    },
    Metric {
        key: "per_guest_mbps.max",
        label: "fastest guest (Mbit/s)",
        get: |s| of_several(s, &s.per_guest_mbps, f64::max),
        ratios: false,
        decimals: 0,
    },
    Metric {
        key: "per_guest_lro_rate.min",
        label: "guest aggregating least (segments per packet)",
        get: |s| of_several(s, &s.per_guest_lro_rate, f64::min),
        ratios: false,
        decimals: 2,
    },
    Metric {
        key: "per_guest_lro_rate.max",
        label: "guest aggregating most (segments per packet)",
        get: |s| of_several(s, &s.per_guest_lro_rate, f64::max),
        ratios: false,
        decimals: 2,
    },
    Metric {
        key: "stage_ns.port",
        label: "port poll (ns per packet)",
        get: |s| stage_per_packet(s, "port"),
        ratios: false,
        decimals: 0,
    },
    Metric {
        key: "stage_ns.aggregation",
        label: "aggregation (ns per packet)",
        get: |s| stage_per_packet(s, "aggregation"),
        ratios: false,
        decimals: 0,
    },
    Metric {
        key: "stage_ns.switching",
        label: "switching (ns per packet)",
        get: |s| stage_per_packet(s, "switching"),
        ratios: false,
        decimals: 0,
    },
    Metric {
        key: "stage_ns.egress",
        label: "port sends and TAP writes (ns per packet)",
        get: |s| stage_per_packet(s, "egress"),
        ratios: false,
        decimals: 0,
    },
    Metric {
        key: "stage_ns.netback",
        label: "netback (ns per packet)",
        get: |s| stage_per_packet(s, "netback"),
        ratios: false,
        decimals: 0,
    },
    Metric {
        key: "hvm.exits_per_mb",
        label: "VM exits per MB",
        get: |s| s.hvm.as_ref().and_then(|h| h.exits_per_mb()),
        ratios: false,
        decimals: 0,
    },
    Metric {
        key: "hvm.exits_per_frame",
        label: "VM exits per data frame",
        get: |s| s.hvm.as_ref().and_then(|h| h.exits_per_frame()),
        ratios: false,
        decimals: 2,
    },
    Metric {
        key: "hvm.other_frames_per_frame",
        label: "frames the other way per data frame (ACKs)",
        get: |s| s.hvm.as_ref().and_then(|h| h.other_frames_per_frame()),
        ratios: false,
        decimals: 3,
    },
    Metric {
        key: "hvm.round_trips_per_frame",
        label: "device-model round trips per data frame",
        get: |s| s.hvm.as_ref().and_then(|h| h.round_trips_per_frame()),
        ratios: false,
        decimals: 2,
    },
    Metric {
        key: "hvm.dm_cpu_pct",
        label: "device-model CPU %",
        get: |s| s.hvm.as_ref().and_then(|h| h.dm_cpu_pct()),
        ratios: false,
        decimals: 1,
    },
    Metric {
        key: "hvm.dm_cpu_ms_per_mb",
        label: "device-model CPU ms per MB",
        get: |s| s.hvm.as_ref().and_then(|h| h.dm_cpu_ms_per_mb()),
        ratios: false,
        decimals: 1,
    },
    Metric {
        key: "hvm.csw_per_frame",
        label: "context switches per data frame (device model + vCPU)",
        get: |s| s.hvm.as_ref().and_then(|h| h.csw_per_frame()),
        ratios: false,
        decimals: 2,
    },
    Metric {
        key: "hvm.dm_csw_per_frame",
        label: "of them, the device model's",
        get: |s| s.hvm.as_ref().and_then(|h| h.dm_csw_per_frame()),
        ratios: false,
        decimals: 2,
    },
    Metric {
        key: "hvm.interrupts_per_frame",
        label: "guest interrupts per data frame",
        get: |s| s.hvm.as_ref().and_then(|h| h.interrupts_per_frame()),
        ratios: false,
        decimals: 2,
    },
    Metric {
        key: "cpu_busy_pct.rx",
        label: "CPU 0 (guest side) busy %",
        get: |s| Some(100.0 * s.rx_cpu_busy),
        ratios: false,
        decimals: 0,
    },
    Metric {
        key: "cpu_busy_pct.tx",
        label: "CPU 1 (remote host) busy %",
        get: |s| Some(100.0 * s.tx_cpu_busy),
        ratios: false,
        decimals: 0,
    },
];

/// A stage of the driver domain's data path (`stat`'s `stages_ns`), in nanoseconds per packet
/// the switching stage handled, over the testbed's life (stream and TCP_RR).
fn stage_per_packet(s: &Sample, stage: &str) -> Option<f64> {
    let ns = s.stat["stages_ns"][stage].as_f64()?;
    let packets = s.stat["daemon"]["stages"]["switched_packets"].as_f64()?;
    (packets > 0.0).then(|| ns / packets)
}

pub fn metric(key: &str) -> &'static Metric {
    METRICS
        .iter()
        .find(|m| m.key == key)
        .expect("a known metric")
}

/// Median, min and max of one metric over the repetitions.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stat {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Stat {
    /// None when no sample has the figure (it does not apply to the configuration).
    pub fn of(values: &[f64]) -> Option<Stat> {
        if values.is_empty() {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Stat {
            median,
            min: v[0],
            max: v[n - 1],
        })
    }
}

/// The 97.5 % quantile of Student's t distribution with `df` degrees of freedom: the factor
/// of a two-sided 95 % confidence interval of a mean from `df + 1` samples. Tabulated up to 30
/// (the standard table, to three decimals); beyond, the Cornish-Fisher expansion around the
/// normal quantile, within 0.001 of the exact value there.
pub fn t975(df: usize) -> f64 {
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        1..=30 => TABLE[df - 1],
        _ => {
            let z = 1.959_964_f64;
            let n = df as f64;
            z + (z.powi(3) + z) / (4.0 * n)
                + (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / (96.0 * n * n)
        }
    }
}

/// The mean of the logarithms of positive ratios, with its standard error and the degrees of
/// freedom of that error: what a geometric mean's confidence interval is made of.
#[derive(Clone, Copy, Debug, PartialEq)]
struct LogMean {
    mean: f64,
    se: f64,
    df: usize,
}

impl LogMean {
    /// The mean of `values` (logarithms, or means of them), taken as independent samples: its
    /// standard error and `n − 1` degrees of freedom. At least two values.
    fn of_samples(values: &[f64]) -> LogMean {
        let n = values.len();
        let mean = values.iter().sum::<f64>() / n as f64;
        let var = values.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        LogMean {
            mean,
            se: (var / n as f64).sqrt(),
            df: n - 1,
        }
    }

    /// Over the ratios as independent samples. None with fewer than two ratios or any ratio
    /// not positive and finite.
    fn of(ratios: &[f64]) -> Option<LogMean> {
        if ratios.len() < 2 {
            return None;
        }
        Some(LogMean::of_samples(&logs_of(ratios)?))
    }

    /// Over the means of [`CI_BATCHES`] batches of consecutive ratios (see
    /// [`geomean_ci95_batched`]); with fewer than two ratios per batch, as [`LogMean::of`].
    fn batched(ratios: &[f64]) -> Option<LogMean> {
        let n = ratios.len();
        if n < 2 * CI_BATCHES {
            return LogMean::of(ratios);
        }
        let logs = logs_of(ratios)?;
        let mean = logs.iter().sum::<f64>() / n as f64;
        let means = run_means(&logs, &split_evenly(n, CI_BATCHES));
        let var = means.iter().map(|m| (m - mean).powi(2)).sum::<f64>() / (CI_BATCHES - 1) as f64;
        Some(LogMean {
            mean,
            se: (var / CI_BATCHES as f64).sqrt(),
            df: CI_BATCHES - 1,
        })
    }

    /// Over the testbeds the ratios came from, in order (`sizes[k]` consecutive ratios from
    /// testbed k): the mean of each testbed's mean, and Student's t over those K means (K − 1
    /// degrees of freedom), so that what differs between testbeds is in the interval. With one
    /// testbed, as [`LogMean::batched`]. None as for [`LogMean::of`], or when the sizes do not
    /// add up to the ratios or one is 0.
    fn testbeds(ratios: &[f64], sizes: &[usize]) -> Option<LogMean> {
        if sizes.len() < 2 {
            return LogMean::batched(ratios);
        }
        if sizes.iter().sum::<usize>() != ratios.len() || sizes.contains(&0) {
            return None;
        }
        Some(LogMean::of_samples(&run_means(&logs_of(ratios)?, sizes)))
    }

    /// The geometric mean and its two-sided 95 % interval.
    fn ci95(self) -> (f64, f64, f64) {
        let half = t975(self.df) * self.se;
        (
            self.mean.exp(),
            (self.mean - half).exp(),
            (self.mean + half).exp(),
        )
    }
}

/// The logarithms of the ratios; None if any is not positive and finite.
fn logs_of(ratios: &[f64]) -> Option<Vec<f64>> {
    (ratios.iter())
        .map(|r| (r.is_finite() && *r > 0.0).then(|| r.ln()))
        .collect()
}

/// The mean of each run of consecutive `values`, `sizes[k]` long for run k (none empty).
fn run_means(values: &[f64], sizes: &[usize]) -> Vec<f64> {
    let mut start = 0;
    (sizes.iter())
        .map(|&n| {
            let m = values[start..start + n].iter().sum::<f64>() / n as f64;
            start += n;
            m
        })
        .collect()
}

/// `n` things split into `k` runs in order, as evenly as possible (sizes differ by at most
/// one; run i holds `[i·n/k, (i+1)·n/k)`). No run at all is one run.
pub fn split_evenly(n: usize, k: usize) -> Vec<usize> {
    let k = k.max(1);
    (0..k).map(|i| n * (i + 1) / k - n * i / k).collect()
}

/// The geometric mean of positive ratios and its two-sided 95 % confidence interval (Student's
/// t on the logarithms). None with fewer than two ratios or any ratio not positive and finite.
pub fn geomean_ci95(ratios: &[f64]) -> Option<(f64, f64, f64)> {
    LogMean::of(ratios).map(LogMean::ci95)
}

/// Batches of consecutive rounds that [`geomean_ci95_batched`] makes, when there are at least
/// two rounds per batch.
pub const CI_BATCHES: usize = 16;

/// The geometric mean of positive ratios taken in sequence, and a 95 % confidence interval
/// that allows for drift: consecutive ratios are correlated (lag-1 autocorrelation 0.06–0.22
/// in 256-round series here), so the interval comes from the means of [`CI_BATCHES`] batches
/// of consecutive ratios (batch means; Student's t with 15 degrees of freedom), not from the
/// ratios as if independent, which gave intervals too narrow (A/A runs missed 1.0). With fewer
/// than two ratios per batch, as [`geomean_ci95`]. None as for [`geomean_ci95`].
pub fn geomean_ci95_batched(ratios: &[f64]) -> Option<(f64, f64, f64)> {
    LogMean::batched(ratios).map(LogMean::ci95)
}

/// The geometric mean of ratios from one or more testbeds (`sizes`: how many consecutive
/// ratios each gave) and its 95 % confidence interval: over the testbeds' own geometric means
/// (Student's t, K − 1 degrees of freedom) with two testbeds or more, as
/// [`geomean_ci95_batched`] with one. Testbeds of one configuration differ by more than the
/// rounds on one of them (docs/guest-scaling.md), which an interval from one testbed leaves
/// out. None as for [`geomean_ci95`], or when the sizes do not add up to the ratios.
pub fn geomean_ci95_testbeds(ratios: &[f64], sizes: &[usize]) -> Option<(f64, f64, f64)> {
    LogMean::testbeds(ratios, sizes).map(LogMean::ci95)
}

/// Two independent series of ratios, each from its testbeds as [`geomean_ci95_testbeds`]
/// takes it: the quotient of their geometric means (`a`'s over `b`'s) and its two-sided 95 %
/// confidence interval, by Welch's t on the difference of the logarithms' means (degrees of
/// freedom by Welch–Satterthwaite, rounded down). None when either series has no interval.
pub fn geomean_quotient_ci95(
    (a, a_sizes): (&[f64], &[usize]),
    (b, b_sizes): (&[f64], &[usize]),
) -> Option<(f64, f64, f64)> {
    let (a, b) = (
        LogMean::testbeds(a, a_sizes)?,
        LogMean::testbeds(b, b_sizes)?,
    );
    let (va, vb) = (a.se * a.se, b.se * b.se);
    let v = va + vb;
    // Neither series spread: the interval is the point, as for one series.
    let df = if v > 0.0 {
        v * v / (va * va / a.df as f64 + vb * vb / b.df as f64)
    } else {
        1.0
    };
    let q = LogMean {
        mean: a.mean - b.mean,
        se: v.sqrt(),
        df: (df.floor() as usize).max(1),
    };
    Some(q.ci95())
}

/// One configuration's figures.
#[derive(Clone, Debug)]
pub struct ConfigSummary {
    pub name: String,
    pub description: String,
    pub reps: usize,
    pub stats: BTreeMap<&'static str, Option<Stat>>,
    /// Percent of the `linux` / `xen` median (None: no such baseline in the run, or the
    /// figure does not apply).
    pub vs_linux: BTreeMap<&'static str, Option<f64>>,
    pub vs_xen: BTreeMap<&'static str, Option<f64>>,
    /// Which CPU limited the stream in most repetitions.
    pub limit: String,
    pub bytes_verified: u64,
    pub errors: Vec<String>,
}

impl ConfigSummary {
    pub fn median(&self, key: &str) -> Option<f64> {
        self.stats.get(key).copied().flatten().map(|s| s.median)
    }
}

/// Summarizes the measured (non-warm-up) samples of each configuration, in `configs` order.
pub fn summarize(configs: &[String], samples: &[Sample]) -> Vec<ConfigSummary> {
    let mut out: Vec<ConfigSummary> = configs
        .iter()
        .map(|c| {
            let v: Vec<&Sample> = samples
                .iter()
                .filter(|s| &s.config == c && !s.warmup)
                .collect();
            let stats = METRICS
                .iter()
                .map(|m| {
                    let xs: Vec<f64> = v.iter().filter_map(|s| (m.get)(s)).collect();
                    (m.key, Stat::of(&xs))
                })
                .collect();
            ConfigSummary {
                name: c.clone(),
                description: configs::describe(c),
                reps: v.len(),
                stats,
                vs_linux: BTreeMap::new(),
                vs_xen: BTreeMap::new(),
                limit: majority(v.iter().map(|s| s.limit.as_str())),
                bytes_verified: v.iter().map(|s| s.bytes_verified).sum(),
                errors: v.iter().flat_map(|s| s.errors.iter().cloned()).collect(),
            }
        })
        .collect();
    // A transmit configuration (`NAME@tx`), or one with several guests (`NAME/gN`), is
    // compared with the baselines of the same direction and guests.
    let baselines: Vec<(Option<ConfigSummary>, Option<ConfigSummary>)> = (out.iter())
        .map(|c| {
            let base = |b: &str| {
                let want = configs::Name::parse(&c.name).ok()?.with_base(b);
                out.iter().find(|o| o.name == want).cloned()
            };
            (base("linux"), base("xen"))
        })
        .collect();
    for (c, (linux, xen)) in out.iter_mut().zip(&baselines) {
        for m in METRICS.iter().filter(|m| m.ratios) {
            let x = c.median(m.key);
            let ratio = |b: &Option<ConfigSummary>| {
                let b = b.as_ref()?.median(m.key)?;
                let x = x?;
                (b > 0.0).then(|| 100.0 * x / b)
            };
            let (vl, vx) = (ratio(linux), ratio(xen));
            c.vs_linux.insert(m.key, vl);
            c.vs_xen.insert(m.key, vx);
        }
    }
    out
}

fn majority<'a>(it: impl Iterator<Item = &'a str>) -> String {
    let mut n: BTreeMap<&str, usize> = BTreeMap::new();
    for x in it {
        *n.entry(x).or_default() += 1;
    }
    n.into_iter()
        .max_by_key(|(_, k)| *k)
        .map(|(x, _)| x.to_string())
        .unwrap_or_default()
}

/// Puts `v` at the dotted path `key` in `obj`.
fn put(obj: &mut Map<String, Value>, key: &str, v: Value) {
    match key.split_once('.') {
        None => {
            obj.insert(key.to_string(), v);
        }
        Some((head, rest)) => {
            let e = obj
                .entry(head.to_string())
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(m) = e {
                put(m, rest, v);
            }
        }
    }
}

/// A configuration's summary as JSON: the medians under the metric names (the fields of the
/// earlier issues: `throughput_mbps`, `rr_tps`, `cycles_per_byte{total,driver,guest}`,
/// `lro_rate`, `flush_latency_us{p50,p99}`, ...), the same shape under `min` and `max`, the
/// ratios under `vs_linux` and `vs_xen`. `null` marks a figure that does not apply.
pub fn to_json(c: &ConfigSummary) -> Value {
    let mut o = Map::new();
    let (mut min, mut max, mut vl, mut vx) = (Map::new(), Map::new(), Map::new(), Map::new());
    for m in METRICS {
        let st = c.stats[m.key];
        put(&mut o, m.key, json!(st.map(|s| s.median)));
        put(&mut min, m.key, json!(st.map(|s| s.min)));
        put(&mut max, m.key, json!(st.map(|s| s.max)));
        if m.ratios {
            put(&mut vl, m.key, json!(c.vs_linux[m.key]));
            put(&mut vx, m.key, json!(c.vs_xen[m.key]));
        }
    }
    o.insert("min".into(), Value::Object(min));
    o.insert("max".into(), Value::Object(max));
    o.insert("vs_linux".into(), Value::Object(vl));
    o.insert("vs_xen".into(), Value::Object(vx));
    o.insert("description".into(), json!(c.description));
    o.insert("reps".into(), json!(c.reps));
    o.insert("limit".into(), json!(c.limit));
    o.insert("bytes_verified".into(), json!(c.bytes_verified));
    o.insert("errors".into(), json!(c.errors));
    Value::Object(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t_quantiles() {
        assert_eq!(t975(0), f64::INFINITY);
        assert_eq!(t975(1), 12.706);
        assert_eq!(t975(19), 2.093);
        // Beyond the table: exact values 2.0395 (31), 1.9840 (100), 1.9623 (1000).
        for (df, exact) in [(31, 2.0395), (100, 1.9840), (1000, 1.9623)] {
            assert!((t975(df) - exact).abs() < 0.001, "df {df}: {}", t975(df));
        }
    }

    #[test]
    fn geometric_mean_and_its_interval() {
        let (g, lo, hi) = geomean_ci95(&[1.0, 0.2f64.exp()]).unwrap();
        // logs 0 and 0.2: mean 0.1, standard error 0.1, t(1) = 12.706.
        assert!((g - 0.1f64.exp()).abs() < 1e-12);
        assert!((lo - (0.1 - 1.2706f64).exp()).abs() < 1e-9);
        assert!((hi - (0.1 + 1.2706f64).exp()).abs() < 1e-9);
        // Identical ratios: the interval shrinks to the point.
        let (g, lo, hi) = geomean_ci95(&[1.02; 5]).unwrap();
        assert!((g - 1.02).abs() < 1e-12 && (lo - 1.02).abs() < 1e-12 && (hi - 1.02).abs() < 1e-12);
        // Reciprocal ratios cancel.
        let (g, lo, hi) = geomean_ci95(&[2.0, 0.5, 2.0, 0.5]).unwrap();
        assert!((g - 1.0).abs() < 1e-12 && lo < 1.0 && hi > 1.0);
        assert!(geomean_ci95(&[1.0]).is_none());
        assert!(geomean_ci95(&[1.0, 0.0]).is_none());
        assert!(geomean_ci95(&[1.0, f64::NAN]).is_none());
    }

    #[test]
    fn batched_interval_allows_for_drift() {
        // Too few rounds for batches: the plain interval.
        let few = [1.01, 0.99, 1.02, 0.98, 1.0];
        assert_eq!(geomean_ci95_batched(&few), geomean_ci95(&few));
        // Independent-looking noise around 1.0: both intervals cover it, of similar width.
        let noise: Vec<f64> = (0..256)
            .map(|i| (0.05 * ((i * 7919 % 256) as f64 / 128.0 - 1.0)).exp())
            .collect();
        let (_, lo, hi) = geomean_ci95_batched(&noise).unwrap();
        assert!(lo < 1.0 && hi > 1.0, "{lo} {hi}");
        // A slow drift, up then down, centred on 1.0: the rounds taken as independent exclude
        // nothing, but their interval is narrow; batch means see the drift and widen it.
        let drift: Vec<f64> = (0..256)
            .map(|i| {
                let d = 0.03 * (std::f64::consts::PI * i as f64 / 64.0).sin();
                let e = 0.01 * if i % 2 == 0 { 1.0 } else { -1.0 };
                (d + e).exp()
            })
            .collect();
        let (g, lo, hi) = geomean_ci95(&drift).unwrap();
        let (gb, lob, hib) = geomean_ci95_batched(&drift).unwrap();
        assert!((g - gb).abs() < 1e-12, "the same centre");
        assert!(hib - lob > 1.5 * (hi - lo), "{lo}–{hi} against {lob}–{hib}");
        // A real shift is still found.
        let shifted: Vec<f64> = drift.iter().map(|r| r * 0.9).collect();
        let (_, _, hi) = geomean_ci95_batched(&shifted).unwrap();
        assert!(hi < 0.95, "{hi}");
        assert!(geomean_ci95_batched(&[0.0; 40]).is_none());
    }

    #[test]
    fn interval_over_testbeds_takes_what_differs_between_them() {
        // Two testbeds of 20 rounds, each steady but 0.86 and 0.90: one testbed's rounds say
        // nothing of the other; over the testbeds the interval spans both (t(1) = 12.706).
        let ratios: Vec<f64> = (0..40).map(|i| if i < 20 { 0.86 } else { 0.90 }).collect();
        let (g, lo, hi) = geomean_ci95_testbeds(&ratios, &[20, 20]).unwrap();
        let (m, half) = (
            (0.86f64.ln() + 0.90f64.ln()) / 2.0,
            12.706 * (0.90f64 / 0.86).ln() / 2.0,
        );
        assert!((g - m.exp()).abs() < 1e-12);
        assert!((lo - (m - half).exp()).abs() < 1e-9 && (hi - (m + half).exp()).abs() < 1e-9);
        // Four testbeds, each with its own rounds' noise: the means of the four.
        let sizes = [10, 10, 10, 10];
        let ratios: Vec<f64> = (0..40)
            .map(|i| [0.86, 0.88, 0.87, 0.89][i / 10] * (1.0 + 0.02 * ((i % 3) as f64 - 1.0)))
            .collect();
        let (_, lo, hi) = geomean_ci95_testbeds(&ratios, &sizes).unwrap();
        assert!(
            lo > 0.85 && lo < 0.87 && hi > 0.88 && hi < 0.90,
            "{lo} {hi}"
        );
        // One testbed: the batch means.
        assert_eq!(
            geomean_ci95_testbeds(&ratios, &[40]),
            geomean_ci95_batched(&ratios)
        );
        assert_eq!(
            geomean_ci95_testbeds(&ratios, &[]),
            geomean_ci95_batched(&ratios)
        );
        // Sizes that do not add up, or an empty testbed: none.
        assert!(geomean_ci95_testbeds(&ratios, &[10, 10, 10]).is_none());
        assert!(geomean_ci95_testbeds(&ratios, &[20, 20, 0]).is_none());
        // The quotient over testbeds: the interval of both series' testbed means.
        let floor: Vec<f64> = ratios.iter().map(|r| r / 0.95).collect();
        let (q, lo, hi) = geomean_quotient_ci95((&ratios, &sizes), (&floor, &sizes)).unwrap();
        assert!(
            (q - 0.95).abs() < 1e-9 && lo < 0.95 && hi > 0.95,
            "{q} {lo} {hi}"
        );
    }

    #[test]
    fn quotient_of_two_series_and_its_interval() {
        // logs 0 and 0.2 over a series without spread: mean 0.1, standard error 0.1, and
        // Welch's degrees of freedom those of the first series alone (1): t = 12.706.
        let (q, lo, hi) =
            geomean_quotient_ci95((&[1.0, 0.2f64.exp()], &[]), (&[1.0; 4], &[])).unwrap();
        assert!((q - 0.1f64.exp()).abs() < 1e-12);
        assert!((lo - (0.1 - 1.2706f64).exp()).abs() < 1e-9);
        assert!((hi - (0.1 + 1.2706f64).exp()).abs() < 1e-9);
        // Two series of 40 rounds with the same noise, one 0.9 of the other: the quotient is
        // 0.9, its interval covers 0.9 and is wider than either series' own.
        let noise: Vec<f64> = (0..40)
            .map(|i| (0.04 * ((i * 7919 % 40) as f64 / 20.0 - 1.0)).exp())
            .collect();
        let other: Vec<f64> = noise.iter().rev().map(|r| r * 0.9).collect();
        let (q, lo, hi) = geomean_quotient_ci95((&other, &[]), (&noise, &[])).unwrap();
        assert!((q - 0.9).abs() < 1e-9, "{q}");
        assert!(lo < 0.9 && hi > 0.9, "{lo} {hi}");
        let (_, lo1, hi1) = geomean_ci95_batched(&noise).unwrap();
        assert!(hi / lo > hi1 / lo1, "{lo}–{hi} against {lo1}–{hi1}");
        // The quotient turned round is the reciprocal, its interval too.
        let (r, rlo, rhi) = geomean_quotient_ci95((&noise, &[]), (&other, &[])).unwrap();
        assert!((r * q - 1.0).abs() < 1e-9 && (rlo * hi - 1.0).abs() < 1e-9);
        assert!((rhi * lo - 1.0).abs() < 1e-9);
        // No spread in either: the interval is the point.
        let (q, lo, hi) = geomean_quotient_ci95((&[0.9; 40], &[]), (&[1.0; 40], &[])).unwrap();
        assert!((q - 0.9).abs() < 1e-9 && (lo - 0.9).abs() < 1e-6 && (hi - 0.9).abs() < 1e-6);
        // Too few rounds, or a ratio that is not positive: no interval.
        assert!(geomean_quotient_ci95((&[0.9], &[]), (&noise, &[])).is_none());
        assert!(geomean_quotient_ci95((&noise, &[]), (&[1.0, 0.0], &[])).is_none());
    }

    fn sample(config: &str, mbps: f64, warmup: bool) -> Sample {
        Sample {
            config: config.into(),
            warmup,
            throughput_mbps: mbps,
            cycles_per_byte_total: 1000.0 / mbps,
            limit: "receiver".into(),
            ..Sample::default()
        }
    }

    #[test]
    fn transmit_configurations_compare_with_the_transmit_baselines() {
        let samples = vec![
            sample("linux", 1000.0, false),
            sample("xen", 500.0, false),
            sample("linux@tx", 4000.0, false),
            sample("xen@tx", 2000.0, false),
            sample("adaptive@tx", 3000.0, false),
        ];
        let names: Vec<String> = ["linux", "xen", "linux@tx", "xen@tx", "adaptive@tx"]
            .iter()
            .map(|n| n.to_string())
            .collect();
        let cs = summarize(&names, &samples);
        let c = |n: &str| cs.iter().find(|c| c.name == n).unwrap();
        assert_eq!(c("xen").vs_linux["throughput_mbps"], Some(50.0));
        assert_eq!(c("xen@tx").vs_linux["throughput_mbps"], Some(50.0));
        assert_eq!(c("adaptive@tx").vs_xen["throughput_mbps"], Some(150.0));
        assert!(c("adaptive@tx").description.contains("from the guest"));
    }

    #[test]
    fn median_min_max() {
        assert_eq!(Stat::of(&[]), None);
        let s = Stat::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        assert_eq!(Stat::of(&[4.0, 1.0, 2.0, 3.0]).unwrap().median, 2.5);
    }

    #[test]
    fn ratios_come_from_the_medians_and_skip_the_warm_up() {
        let samples = vec![
            sample("linux", 99999.0, true),
            sample("linux", 1000.0, false),
            sample("linux", 3000.0, false),
            sample("xen", 1000.0, false),
        ];
        let cs = summarize(&["linux".into(), "xen".into()], &samples);
        assert_eq!(cs[0].median("throughput_mbps"), Some(2000.0));
        assert_eq!(cs[0].reps, 2);
        assert_eq!(cs[1].vs_linux["throughput_mbps"], Some(50.0));
        assert_eq!(cs[0].vs_xen["throughput_mbps"], Some(200.0));
        assert_eq!(cs[1].vs_xen["throughput_mbps"], Some(100.0));
        // No split for native Linux: no ratio either.
        assert_eq!(cs[1].vs_linux["cycles_per_byte.driver"], None);
        let j = to_json(&cs[1]);
        assert_eq!(j["throughput_mbps"], 1000.0);
        assert_eq!(j["min"]["throughput_mbps"], 1000.0);
        assert_eq!(j["vs_linux"]["throughput_mbps"], 50.0);
        assert!(j["cycles_per_byte"]["driver"].is_null());
        assert!(j["cycles_per_byte"]["total"].is_number());
        assert!(j["flush_latency_us"]["p99"].is_null());
        assert_eq!(j["limit"], "receiver");
    }
}
