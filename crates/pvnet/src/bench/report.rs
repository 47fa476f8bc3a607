//! The tables of Nakanjima and Oi's evaluation (rows = metrics, columns = configurations), printed and in
//! markdown, and the whole `report.md`.

use std::fmt::Write as _;

use super::run::Run;
use super::summary::{metric, ConfigSummary, Stat};

/// A table: a label column, then one column per configuration (or per sweep figure).
#[derive(Clone, Debug, Default)]
pub struct Table {
    pub title: String,
    pub columns: Vec<String>,
    pub rows: Vec<(String, Vec<String>)>,
}

const DASH: &str = "—";

/// `x` to `decimals` places, or a dash when there is no finite figure.
pub(super) fn fmt(x: Option<f64>, decimals: usize) -> String {
    match x {
        Some(x) if x.is_finite() => format!("{x:.decimals$}"),
        _ => DASH.to_string(),
    }
}

impl Table {
    /// Fixed-width text for the terminal.
    pub fn text(&self) -> String {
        let lw = self
            .rows
            .iter()
            .map(|(l, _)| l.chars().count())
            .max()
            .unwrap_or(0)
            .max(6)
            + 2;
        let widths: Vec<usize> = (0..self.columns.len())
            .map(|i| {
                let cells = self.rows.iter().map(|(_, c)| c[i].chars().count());
                cells
                    .chain([self.columns[i].chars().count()])
                    .max()
                    .unwrap_or(0)
                    .max(8)
                    + 2
            })
            .collect();
        let pad =
            |s: &str, w: usize| format!("{}{s}", " ".repeat(w.saturating_sub(s.chars().count())));
        let mut out = format!("{}\n", self.title);
        let _ = write!(out, "{:<lw$}", "");
        for (c, w) in self.columns.iter().zip(&widths) {
            out.push_str(&pad(c, *w));
        }
        out.push('\n');
        for (label, cells) in &self.rows {
            out.push_str(&label.to_string());
            out.push_str(&" ".repeat(lw.saturating_sub(label.chars().count())));
            for (c, w) in cells.iter().zip(&widths) {
                out.push_str(&pad(c, *w));
            }
            out.push('\n');
        }
        out
    }

    /// A markdown table under a `###` heading.
    pub fn markdown(&self) -> String {
        let mut out = format!("### {}\n\n| |", self.title);
        for c in &self.columns {
            let _ = write!(out, " {c} |");
        }
        out.push_str("\n|---|");
        out.push_str(&"---:|".repeat(self.columns.len()));
        out.push('\n');
        for (label, cells) in &self.rows {
            let _ = write!(out, "| {} |", label.trim_start().replace("  ", ""));
            for c in cells {
                let _ = write!(out, " {c} |");
            }
            out.push('\n');
        }
        out
    }
}

/// The rows of one metric: median, min and max (with more than one repetition), and the
/// ratios against Linux and Xen where they apply and the baseline ran.
fn metric_rows(cs: &[ConfigSummary], key: &str, reps: usize) -> Vec<(String, Vec<String>)> {
    let m = metric(key);
    let col = |f: &dyn Fn(&Stat) -> f64| -> Vec<String> {
        cs.iter()
            .map(|c| fmt(c.stats[key].map(|s| f(&s)), m.decimals))
            .collect()
    };
    let mut rows = vec![(m.label.to_string(), col(&|s| s.median))];
    if reps > 1 {
        rows.push(("  min".into(), col(&|s| s.min)));
        rows.push(("  max".into(), col(&|s| s.max)));
    }
    if m.ratios {
        for (name, base, pick) in [
            (
                "  vs Linux %",
                "linux",
                (|c: &ConfigSummary, k: &str| c.vs_linux[k]) as fn(&ConfigSummary, &str) -> _,
            ),
            ("  vs Xen %", "xen", |c: &ConfigSummary, k: &str| {
                c.vs_xen[k]
            }),
        ] {
            let cells: Vec<Option<f64>> = cs.iter().map(|c| pick(c, key)).collect();
            if cs.iter().any(|c| c.name == base) && cells.iter().any(Option::is_some) {
                rows.push((
                    name.to_string(),
                    cells.into_iter().map(|x| fmt(x, 1)).collect(),
                ));
            }
        }
    }
    rows
}

/// The tables, in the paper's order (Tables IV–VII), then what the paper did not report.
pub fn tables(cs: &[ConfigSummary], reps: usize) -> Vec<Table> {
    let specs: [(&str, &[&str]); 8] = [
        ("Table IV: stream throughput", &["throughput_mbps"]),
        (
            "Table V: CPU cycles per byte streamed (CPU 0, the guest's machine)",
            &[
                "cycles_per_byte.driver",
                "cycles_per_byte.guest",
                "cycles_per_byte.total",
                "cycles_per_byte.softirq",
            ],
        ),
        ("Table VI: LRO rate", &["lro_rate", "lro_psh_pct"]),
        (
            "Table VII: TCP_RR (1-byte request/response)",
            &["rr_tps", "rr_latency_us.p50", "rr_latency_us.p99"],
        ),
        (
            "Flush latency (first segment in to aggregate out)",
            &["flush_latency_us.p50", "flush_latency_us.p99"],
        ),
        (
            "Retransmissions, drops and the data in flight per stream",
            &[
                "retransmissions",
                "dsacked_segments",
                "port_drops",
                "sender.in_flight_kib",
                "sender.rtt_us",
            ],
        ),
        (
            "The driver domain's time by stage (its own clock, per packet switched)",
            &[
                "stage_ns.port",
                "stage_ns.aggregation",
                "stage_ns.switching",
                "stage_ns.egress",
                "stage_ns.netback",
            ],
        ),
        (
            "Which side limits the stream",
            &["cpu_busy_pct.rx", "cpu_busy_pct.tx"],
        ),
    ];
    let columns: Vec<String> = cs.iter().map(|c| c.name.clone()).collect();
    let mut out: Vec<Table> = specs
        .iter()
        .map(|(title, keys)| Table {
            title: title.to_string(),
            columns: columns.clone(),
            rows: keys.iter().flat_map(|k| metric_rows(cs, k, reps)).collect(),
        })
        .collect();
    if let Some(t) = out.last_mut() {
        t.rows
            .push(("limit".into(), cs.iter().map(|c| c.limit.clone()).collect()));
    }
    // HVM guests: the seed's table (Zhang, Li and Guan), beside the PV path and Linux.
    if cs.iter().any(|c| c.stats["hvm.exits_per_mb"].is_some()) {
        out.push(hvm_table(cs, reps));
    }
    // Several guests at once: the aggregate is Table IV's; here how it was shared.
    if cs.iter().any(|c| c.stats["jain"].is_some()) {
        out.push(Table {
            title: "Several guests: how the aggregate was shared".into(),
            columns: columns.clone(),
            rows: [
                "jain",
                "per_guest_mbps.min",
                "per_guest_mbps.max",
                "per_guest_lro_rate.min",
                "per_guest_lro_rate.max",
            ]
            .iter()
            .flat_map(|k| metric_rows(cs, k, reps))
            .collect(),
        });
    }
    out
}

/// The HVM paper's figures (throughput, VM exits, device-model round trips and CPU, context
/// switches) for every configuration of the run: the HVM ones, and the others for scale.
pub fn hvm_table(cs: &[ConfigSummary], reps: usize) -> Table {
    Table {
        title: "HVM guests in the seed's terms (Zhang, Li and Guan)".into(),
        columns: cs.iter().map(|c| c.name.clone()).collect(),
        rows: [
            "throughput_mbps",
            "hvm.exits_per_mb",
            "hvm.exits_per_frame",
            "hvm.other_frames_per_frame",
            "hvm.round_trips_per_frame",
            "hvm.dm_cpu_pct",
            "hvm.dm_cpu_ms_per_mb",
            "hvm.csw_per_frame",
            "hvm.dm_csw_per_frame",
            "hvm.interrupts_per_frame",
        ]
        .iter()
        .flat_map(|k| metric_rows(cs, k, reps))
        .collect(),
    }
}

/// What the HVM table's rows are, and what the seed measured that pvnet cannot.
pub const HVM_NOTE: &str = "VM exits are the vCPU's port accesses (a `rep insl/outsl` string is one exit), counted at the trap; \
device-model round trips are the ioreqs the vCPU sent to its device model and waited for (an event-channel notification each way); \
a data frame is a frame the emulated NE2000 carried in the stream's direction (the other direction's ACK frames are in the numerators, not the denominator); \
device-model CPU is the device-model processes' CPU time (`/proc/<pid>/stat`) over the stream's wall time, in % of one CPU, and per MB streamed (the seed's −73 % was measured while sending a fixed 10^9 bytes, so per MB compares paths of different speed); \
context switches are voluntary + involuntary switches of the device-model and vCPU processes, counted by each with `getrusage(RUSAGE_SELF)` and reported through `pvnet stat`, read on a quiet testbed before and after the stream. \
The seed's table of TLB and cache misses (Xenoprof) needs hardware performance counters, which this machine does not give: it is not measured. \
The seed's 12.5 % fewer VM exits for 10^9 bytes cannot come from port I/O: the same accesses trap on every path, and a frame costs the same exits on each (one sent about 24.5, one received about 31, in `crates/hvm`'s tests); only where they are served differs. \
What can change is the mix of frames per byte: exits per MB here follow the frames the other way per data frame (a sending guest receives fewer ACK frames per data frame when its frames leave in faster bursts), not the path. \
The seed's exits also include timer, interrupt-window and other exits of a Windows guest, which scale with the transfer's duration, and a faster path shortens the transfer.";

/// The sweep as a table: one row per timeout value, then the reference configurations.
pub fn sweep_table(cs: &[ConfigSummary], reps: usize) -> Table {
    let mut keys: Vec<(&str, &str)> = vec![("throughput_mbps", "Mbit/s")];
    if reps > 1 {
        keys.push(("throughput_mbps:min", "min"));
        keys.push(("throughput_mbps:max", "max"));
    }
    keys.push(("rr_tps", "TCP_RR/s"));
    if reps > 1 {
        keys.push(("rr_tps:min", "min"));
        keys.push(("rr_tps:max", "max"));
    }
    keys.extend([
        ("lro_rate", "segs/aggr"),
        ("flush_latency_us.p50", "flush p50 us"),
        ("flush_latency_us.p99", "flush p99 us"),
        ("cycles_per_byte.total", "cycles/byte"),
    ]);
    let rows = cs
        .iter()
        .map(|c| {
            let cells = keys
                .iter()
                .map(|(k, _)| {
                    let (key, which) = k.split_once(':').unwrap_or((k, "median"));
                    let st = c.stats[key];
                    let v = st.map(|s| match which {
                        "min" => s.min,
                        "max" => s.max,
                        _ => s.median,
                    });
                    fmt(v, metric(key).decimals)
                })
                .collect();
            (c.name.clone(), cells)
        })
        .collect();
    Table {
        title: "Timeout sweep: throughput and TCP_RR against the flush timeout".into(),
        columns: keys.iter().map(|(_, l)| l.to_string()).collect(),
        rows,
    }
}

/// One sentence per configuration group: which CPU limited the stream.
pub fn limit_note(cs: &[ConfigSummary], msg_size: usize) -> String {
    let by = |l: &str| -> Vec<&str> {
        cs.iter()
            .filter(|c| c.limit == l)
            .map(|c| c.name.as_str())
            .collect()
    };
    let mut s = format!(
        "With {msg_size}-byte sends, a CPU at least {:.0} % busy during the stream counts as the limit.",
        100.0 * super::measure::SATURATED
    );
    for (l, what) in [
        ("receiver", "the receive path (CPU 0) is the limit"),
        ("sender", "the sender (CPU 1) is the limit"),
        ("both", "both CPUs are saturated"),
        (
            "neither",
            "neither CPU is saturated (latency or window bound)",
        ),
    ] {
        let v = by(l);
        if !v.is_empty() {
            let _ = write!(s, " In {}: {what}.", v.join(", "));
        }
    }
    if !by("sender").is_empty() || !by("both").is_empty() {
        s.push_str(
            " A saturated sender segments and checksums every frame in software (TSO, GSO and TX \
             checksum offload are off on the remote host's veth, so frames are wire-sized); the \
             message size does not lift that limit (on the machine of docs/sample, 1 KiB to 256 KiB sends \
             were all sender-bound natively and receiver-bound on the PV path). Where the sender is \
             the limit, throughput is a floor of what the receive path could take, and cycles per \
             byte are the fair comparison of receive cost.",
        );
    }
    s
}

/// A warning when measured repetitions ran beside other pvnet runs (whose load skews them).
pub fn concurrency_warning(run: &Run) -> Option<String> {
    let skewed: Vec<&super::measure::Sample> = run
        .samples
        .iter()
        .filter(|s| !s.warmup && !s.concurrent_runs.is_empty())
        .collect();
    if skewed.is_empty() {
        return None;
    }
    let mut ids: Vec<&str> = skewed
        .iter()
        .flat_map(|s| s.concurrent_runs.iter().map(String::as_str))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    Some(format!(
        "{} of {} measured repetitions ran while other pvnet runs were up ({}): they shared the CPUs, so those figures are skewed.",
        skewed.len(),
        run.samples.iter().filter(|s| !s.warmup).count(),
        ids.join(", ")
    ))
}

/// A warning when the kernel dropped frames at the physical port in measured streams: the
/// port's packet ring overflowed, so TCP lost segments and the figures include its recovery.
pub fn port_drop_warning(samples: &[super::measure::Sample]) -> Option<String> {
    let lossy: Vec<&super::measure::Sample> = samples
        .iter()
        .filter(|s| !s.warmup && s.port_drops.is_some_and(|d| d > 0))
        .collect();
    if lossy.is_empty() {
        return None;
    }
    let measured = samples
        .iter()
        .filter(|s| !s.warmup && s.port_drops.is_some())
        .count();
    let mut configs: Vec<&str> = Vec::new();
    for s in &lossy {
        if !configs.contains(&s.config.as_str()) {
            configs.push(&s.config);
        }
    }
    Some(format!(
        "the kernel dropped {} frames at the physical port in {} of {} measured PV streams ({}): its packet ring overflowed; a larger --ring-frames gives the driver domain more slack.",
        lossy.iter().filter_map(|s| s.port_drops).sum::<u64>(),
        lossy.len(),
        measured,
        configs.join(", ")
    ))
}

/// Every warning about the run's figures.
pub fn warnings(run: &Run) -> Vec<String> {
    concurrency_warning(run)
        .into_iter()
        .chain(port_drop_warning(&run.samples))
        .collect()
}

/// The paired TCP_RR comparison: one column per configuration, rounds' medians and the median
/// of the per-round ratios.
pub fn paired_table(p: &super::paired::Paired) -> Table {
    let (b, o) = p.medians();
    let pct = |x: f64| format!("{:.1}", 100.0 * x);
    Table {
        title: format!(
            "TCP_RR on one testbed and one connection, {} and {} switched live ({} rounds of one {} s slice each)",
            p.base, p.other, p.rounds, p.seconds
        ),
        columns: vec![p.base.clone(), p.other.clone()],
        rows: vec![
            (
                "TCP_RR (trans/s), median".into(),
                vec![format!("{b:.0}"), format!("{o:.0}")],
            ),
            (
                format!("vs {} %, median of rounds", p.base),
                vec!["100.0".into(), pct(p.ratio_median)],
            ),
            ("  min".into(), vec!["100.0".into(), pct(p.ratio_min)]),
            ("  max".into(), vec!["100.0".into(), pct(p.ratio_max)]),
            (
                format!("vs {} %, geometric mean of rounds", p.base),
                vec![
                    "100.0".into(),
                    p.ratio_geomean.map_or_else(|| "—".into(), pct),
                ],
            ),
            (
                "  95 % confidence interval".into(),
                vec![
                    "—".into(),
                    p.ratio_ci95.map_or_else(
                        || "—".into(),
                        |[lo, hi]| format!("{} – {}", pct(lo), pct(hi)),
                    ),
                ],
            ),
            (
                format!(
                    "no more than {:.0} % slower than {}",
                    100.0 * p.tolerance,
                    p.base
                ),
                vec!["—".into(), p.verdict.as_str().into()],
            ),
        ],
    }
}

/// One sentence on what the paired comparison's verdict means.
pub fn paired_verdict_note(p: &super::paired::Paired) -> String {
    let floor = format!("{:.1} %", 100.0 * (1.0 - p.tolerance));
    use super::paired::Verdict;
    let why = match p.verdict {
        Verdict::Holds => {
            format!("the whole 95 % confidence interval lies at or above {floor}")
        }
        Verdict::Fails => {
            format!("the whole 95 % confidence interval lies below {floor}")
        }
        Verdict::Undecided if p.ratio_ci95.is_none() => {
            "there is no confidence interval (fewer than two rounds with transactions)".into()
        }
        Verdict::Undecided => format!(
            "the 95 % confidence interval straddles {floor}; more rounds (--paired-rounds) narrow it"
        ),
    };
    format!(
        "{} TCP_RR no more than {:.0} % slower than {}: {}, because {why}.",
        p.other,
        100.0 * p.tolerance,
        p.base,
        p.verdict.as_str()
    )
}

pub fn markdown(run: &Run) -> String {
    let p = &run.params;
    let m = &run.machine;
    let mut s = String::from("# pvnet bench report\n\n");
    let _ = writeln!(
        s,
        "Run {} (UTC), revision `{}`, {:.0} s wall time.\n",
        run.started_utc, run.revision, run.wall_seconds
    );
    s.push_str("## Machine\n\n");
    let _ = writeln!(
        s,
        "- {} CPUs, {}{}\n- kernel {} ({})\n- TSC {:.3} GHz (cycles = CPU time × TSC rate: no hardware counters are needed)",
        m["cpus"],
        m["cpu_model"].as_str().unwrap_or("unknown CPU"),
        if m["virtualized"].as_bool() == Some(true) {
            " (virtual machine)"
        } else {
            ""
        },
        m["kernel"].as_str().unwrap_or("?"),
        m["kernel_version"].as_str().unwrap_or("?"),
        m["tsc_hz"].as_f64().unwrap_or(0.0) / 1e9
    );
    if let Some(cc) = m["tcp_congestion_control"].as_str() {
        let _ = writeln!(
            s,
            "- TCP congestion control: {cc} (the kernel's default, which the remote host's namespace inherits: the senders use it)"
        );
    }
    if let Some(line) = memory_probe_line(&m["memory_probe"]) {
        let _ = writeln!(s, "- {line}");
    }
    s.push_str("\n## Parameters\n\n");
    let _ = writeln!(
        s,
        "- configurations: {}\n- {} measured repetition(s) of each, interleaved ({}), after one warm-up repetition of each ({} s stream, {} s TCP_RR, discarded)\n- stream: {} s with {}, {}-byte sends; TCP_RR: {} s, 1-byte request and response (built-in tool)\n- receiving side (driver domain, guest, receiver, the veth's softirq by RPS) on CPU {}, sender on CPU {}; every repetition on a fresh testbed\n- MTU {} on the wire and every interface; the physical port's packet ring: {} ({} bytes each), {}, polled {} frames at a time, {}\n",
        run.configs.join(", "),
        p.reps,
        if run.configs.len() > 1 { "A B C, A B C, ..." } else { "one configuration" },
        p.warmup_stream_seconds,
        p.warmup_rr_seconds,
        p.measure.stream_seconds,
        match p.measure.tool {
            super::measure::Tool::Builtin => "`pvnet perf stream` (every byte verified)",
            super::measure::Tool::Iperf3 => "iperf3 (bytes not verified)",
        },
        p.measure.msg_size,
        p.measure.rr_seconds,
        super::configs::RX_CPU,
        super::configs::TX_CPU,
        p.measure.port.mtu,
        match p.measure.port.ring_frames {
            Some(n) => format!("{n} slots"),
            None => format!(
                "{n} slots a guest for one or two guests, then {n} for every two",
                n = pvnet_pnic::DEFAULT_FRAME_NR
            ),
        },
        pvnet_pnic::frame_size_for_mtu(p.measure.port.mtu),
        match p.measure.port.port_queues {
            Some(1) => "one receive queue for all guests".to_string(),
            Some(n) => format!("split between {n} receive queues (by destination MAC)"),
            None => "split between one receive queue per guest (by destination MAC)".to_string(),
        },
        match p.measure.port.budget {
            Some(n) => n.to_string(),
            None => format!(
                "{} ({} in the relay configurations, `--mode relay`)",
                crate::config::DEFAULT_BUDGET,
                crate::config::RELAY_BUDGET
            ),
        },
        match p.measure.port.ring_prefetch.unwrap_or(pvnet_pnic::DEFAULT_PREFETCH) {
            0 => "no slot loaded before use".to_string(),
            n => format!("{n} slots past the next frame and past the kernel's next slot loaded before use"),
        },
    );
    let placed = match p.measure.placement {
        super::measure::GuestPlacement::Same => None,
        super::measure::GuestPlacement::Spread => Some("`spread`: guest i's netfront and receiver (natively receiver i) on CPU i % 2"),
        super::measure::GuestPlacement::Free => Some("`free`: every guest's netfront and receiver (natively every receiver) free to run on either CPU"),
    };
    if let Some(what) = placed {
        let _ = writeln!(
            s,
            "- placement {what}, at every guest count; the driver domain on CPU {}, the senders on CPU {}. The receive path then also uses CPU {}, which these tables' cycles per byte do not count (the guests' own CPU time is counted wherever it ran, but not CPU {}'s softirq): read throughput and fairness, not cycles, across placements\n",
            super::configs::RX_CPU,
            super::configs::TX_CPU,
            super::configs::TX_CPU,
            super::configs::TX_CPU,
        );
    }
    let _ = writeln!(
        s,
        "**Limit.** {}\n",
        limit_note(&run.summary, p.measure.msg_size)
    );
    s.push_str("## Results\n\nMedians over the measured repetitions; \"vs Linux %\" and \"vs Xen %\" divide this run's medians. — : does not apply.\n\n");
    for t in tables(&run.summary, p.reps) {
        s.push_str(&t.markdown());
        s.push('\n');
    }
    if let Some(pr) = &run.paired {
        s.push_str(&paired_table(pr).markdown());
        let _ = writeln!(
            s,
            "\nTCP_RR differs by several percent between fresh testbeds of one configuration, more than between configurations. Here one testbed and one connection ran both: each round ran a slice under {} and one under {} (the order alternating between rounds), the data path switched live between slices as `pvnet set` does, with no transaction in flight; \"vs {} %\" is the median, and the geometric mean with its 95 % confidence interval, of the rounds' ratios; the interval is Student's t on the logarithms, taken over the means of 16 batches of consecutive rounds when there are 32 rounds or more, because the rate drifts and neighbouring rounds are alike. {}\n",
            pr.base, pr.other, pr.base, paired_verdict_note(pr)
        );
    }
    if run
        .summary
        .iter()
        .any(|c| c.stats["hvm.exits_per_mb"].is_some())
    {
        let _ = writeln!(s, "**The HVM table.** {HVM_NOTE}\n");
    }
    s.push_str("![throughput](throughput.svg)\n\n![cycles per byte](cycles.svg)\n\n");
    if let Some(sw) = &run.sweep {
        s.push_str("## Timeout sweep\n\n");
        let _ = writeln!(
            s,
            "The `timeout:USEC` flush policy at {} µs, beside {} for reference: the trade-off between aggregation (throughput, cycles per byte) and added delay (TCP_RR) that the LRO paper leaves open.\n",
            sw.values
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            sw.references.join(", ")
        );
        s.push_str(&sweep_table(&run.summary, p.reps).markdown());
        s.push_str("\n![sweep](sweep.svg)\n\n");
    }
    if !super::plot::guest_lines(&run.summary).is_empty() {
        s.push_str("## Against the number of guests\n\nAggregate throughput and Jain's fairness index of each configuration run at several guest counts (`NAME/gN`).\n\n");
        let scaling = super::scaling::scaling(&run.summary, &run.samples);
        if !scaling.is_empty() {
            s.push_str(&super::scaling::table(&scaling).markdown());
            let _ = writeln!(s, "\n{}\n", super::scaling::NOTE);
        }
        if !run.one_testbed.is_empty() {
            s.push_str(&super::scaling::one_testbed_table(&run.one_testbed).markdown());
            let _ = writeln!(s, "\n{}\n", super::scaling::ONE_TESTBED_NOTE);
            if !super::scaling::against_floors(&run.one_testbed).is_empty() {
                let _ = writeln!(s, "{}\n", super::scaling::floors_note());
            }
        }
        s.push_str("![guests](guests.svg)\n\n");
    }
    s.push_str("## Configurations\n\n| name | what runs |\n|---|---|\n");
    for c in &run.summary {
        let _ = writeln!(s, "| {} | {} |", c.name, c.description);
    }
    s.push_str(
        "\n## How it is measured\n\n\
         - Throughput: bytes the receiver got ÷ the stream's duration.\n\
         - Cycles per byte: busy time of CPU 0 from `/proc/stat` during the stream × TSC rate ÷ bytes received. \
         The guest's share is the CPU time of its netfront process (whose TAP writes run the guest kernel's receive path) and of the receiver; \
         the driver domain's is the rest of CPU 0 (daemon, the physical port's softirq). Native Linux has no split. \
         \"Of the total: softirq\" is CPU 0's softirq time (`/proc/stat`): natively the whole IP and TCP receive path, on the PV path mostly the physical port's (RPS to CPU 0, `tpacket_rcv`). \
         A kernel without `CONFIG_IRQ_TIME_ACCOUNTING` charges softirq time to the task it interrupted, so part of the physical port's softirq counts in the guest's share.\n\
         - LRO rate: segments in ÷ aggregates out at the physical port during the stream; flush latency: TSC ticks from the daemon reading an aggregate's first segment to its flush (daemon histogram).\n\
         - Retransmissions: `Tcp: RetransSegs` of the sender's namespace before and after the stream; \
         \"D-SACKed\": `TcpExt: TCPDSACKRecvSegs` likewise, the segments the receiver reported as duplicates, i.e. retransmissions of segments that were reordered, not lost. \
         Frames dropped at the physical port: the kernel's count (`PACKET_STATISTICS`) for the port's packet ring before and after the stream, frames that found the ring full or its next slot still leased.\n\
         - Bytes in flight and RTT: each sender samples its socket's `TCP_INFO` every 50 ms (`tcpi_unacked` × `tcpi_snd_mss`, `tcpi_rtt`); \
         a stream's figure is the median of its samples, the bytes in flight are summed over the streams, the RTT is the median of the streams'. \
         The bytes in flight are the guests' data the path holds at once (queued in the driver domain and the guests' rings, or acknowledged by ACKs on their way back).\n\
         - Which side limits: busy fraction of CPU 0 (receiving side) and CPU 1 (sender) during the stream.\n",
    );
    let errors: Vec<String> = run
        .summary
        .iter()
        .flat_map(|c| c.errors.iter().map(move |e| format!("- {}: {e}", c.name)))
        .chain(run.paired_error.iter().map(|e| format!("- {e}")))
        .chain(run.one_testbed_errors.iter().map(|e| format!("- {e}")))
        .collect();
    let warnings = warnings(run);
    if !warnings.is_empty() {
        s.push_str("\n## Warnings\n\n");
        for w in &warnings {
            let _ = writeln!(s, "- {w}");
        }
    }
    if !errors.is_empty() {
        s.push_str("\n## Errors\n\n");
        s.push_str(&errors.join("\n"));
        s.push('\n');
    }
    s.push_str("\nRaw samples, the machine and the parameters: `results.json`.\n");
    s
}

/// The sentence every report gives for the memory probes of a run's start and end
/// ([`super::machine::Probes`]), without a list marker or a line end: each report sets it in
/// its own form. `None` when neither probe ran.
pub(super) fn memory_probe_line(p: &serde_json::Value) -> Option<String> {
    let at = |when: &str, k: &str| p[when][k].as_f64();
    let pair = |k: &str| match (at("start", k), at("end", k)) {
        (Some(a), Some(b)) => Some(format!("{a:.1} → {b:.1}")),
        (Some(a), None) => Some(format!("{a:.1} (start)")),
        (None, Some(b)) => Some(format!("{b:.1} (end)")),
        (None, None) => None,
    };
    let (l3, mem) = (pair("random_read_ns_8mib")?, pair("random_read_ns_64mib")?);
    let cpu = p["start"]["cpu"]
        .as_u64()
        .or(p["end"]["cpu"].as_u64())
        .unwrap_or(0);
    let mib = |when: &str| {
        p[when]["cache_mib"].as_u64().map(|m| match m {
            0 => "under 1".to_string(),
            m => m.to_string(),
        })
    };
    let cache = match (mib("start"), mib("end")) {
        (Some(a), Some(b)) => format!("; cache answering at cache speed: {a} → {b} MiB"),
        (Some(a), None) => format!("; cache answering at cache speed: {a} MiB (start)"),
        (None, Some(b)) => format!("; cache answering at cache speed: {b} MiB (end)"),
        (None, None) => String::new(),
    };
    Some(format!(
        "memory seen from CPU {cpu}, ns per dependent random read, the run's start → end: {l3} over 8 MiB, {mem} over 64 MiB{cache} (the PV path's cost at many guests is memory latency, which on a shared machine changes with the hour, with the share of the L3 the host's other guests leave: docs/guest-scaling.md)"
    ))
}

#[cfg(test)]
mod tests {
    use super::super::measure::Sample;
    use super::super::summary::summarize;
    use super::*;

    #[test]
    fn the_memory_probes_line_gives_start_and_end_or_what_ran() {
        let both = serde_json::json!({
            "start": {"cpu": 0, "random_read_ns_8mib": 14.04, "random_read_ns_64mib": 95.0},
            "end": {"cpu": 0, "random_read_ns_8mib": 15.5, "random_read_ns_64mib": 101.26},
        });
        let l = memory_probe_line(&both).unwrap();
        assert!(l.contains("CPU 0"), "{l}");
        assert!(
            l.contains("14.0 → 15.5 over 8 MiB, 95.0 → 101.3 over 64 MiB ("),
            "{l}"
        );
        let cached = serde_json::json!({
            "start": {"cpu": 0, "random_read_ns_8mib": 170.0, "random_read_ns_64mib": 200.0, "cache_mib": 4},
            "end": {"cpu": 0, "random_read_ns_8mib": 175.0, "random_read_ns_64mib": 210.0, "cache_mib": 0},
        });
        let l = memory_probe_line(&cached).unwrap();
        assert!(
            l.contains("over 64 MiB; cache answering at cache speed: 4 → under 1 MiB ("),
            "{l}"
        );
        let start = serde_json::json!({
            "start": {"cpu": 1, "random_read_ns_8mib": 14.0, "random_read_ns_64mib": 95.0},
            "end": null,
        });
        let l = memory_probe_line(&start).unwrap();
        assert!(
            l.contains("CPU 1") && l.contains("14.0 (start) over 8 MiB"),
            "{l}"
        );
        let none = serde_json::json!({"start": null, "end": null});
        assert_eq!(memory_probe_line(&none), None);
        assert_eq!(memory_probe_line(&serde_json::Value::Null), None);
    }

    fn cs() -> Vec<ConfigSummary> {
        let s = |c: &str, mbps: f64, rep| Sample {
            config: c.into(),
            rep,
            throughput_mbps: mbps,
            cycles_per_byte_total: 2.0,
            cycles_per_byte_driver: (c != "linux").then_some(1.0),
            cycles_per_byte_guest: (c != "linux").then_some(1.0),
            limit: "receiver".into(),
            ..Sample::default()
        };
        summarize(
            &["linux".into(), "xen".into()],
            &[
                s("linux", 2000.0, 1),
                s("xen", 1000.0, 1),
                s("linux", 4000.0, 2),
                s("xen", 1000.0, 2),
            ],
        )
    }

    #[test]
    fn tables_have_ratio_rows_only_where_they_apply() {
        let t = tables(&cs(), 2);
        let iv = &t[0];
        assert_eq!(iv.columns, ["linux", "xen"]);
        let row = |t: &Table, l: &str| t.rows.iter().find(|r| r.0 == l).cloned();
        assert_eq!(row(iv, "throughput (Mbit/s)").unwrap().1, ["3000", "1000"]);
        assert_eq!(row(iv, "  vs Linux %").unwrap().1, ["100.0", "33.3"]);
        assert_eq!(row(iv, "  vs Xen %").unwrap().1, ["300.0", "100.0"]);
        assert_eq!(row(iv, "  min").unwrap().1, ["2000", "1000"]);
        let v = &t[1];
        assert_eq!(
            row(v, "cycles/byte driver domain").unwrap().1,
            [DASH, "1.00"]
        );
        // driver vs Linux never applies: no row; vs Xen does.
        assert!(v
            .rows
            .iter()
            .filter(|r| r.0 == "  vs Linux %")
            .all(|r| r.1[1] == "100.0"));
        assert!(t.last().unwrap().rows.iter().any(|r| r.0 == "limit"));
        let md = iv.markdown();
        assert!(md.contains("| | linux | xen |"), "{md}");
        assert!(md.contains("| vs Linux % | 100.0 | 33.3 |"), "{md}");
        assert!(iv.text().contains("vs Linux %"));
    }

    #[test]
    fn port_drops_in_measured_streams_raise_a_warning() {
        let s = |c: &str, rep, drops: Option<u64>| Sample {
            config: c.into(),
            rep,
            warmup: rep == 0,
            port_drops: drops,
            ..Sample::default()
        };
        let clean = [
            s("linux", 1, None),
            s("xen", 0, Some(9)),
            s("xen", 1, Some(0)),
        ];
        assert_eq!(
            port_drop_warning(&clean),
            None,
            "a warm-up's drops do not count"
        );
        let lossy = [
            s("linux", 1, None),
            s("xen", 1, Some(0)),
            s("lro", 1, Some(10)),
            s("bo", 1, Some(7)),
            s("lro", 2, Some(3)),
        ];
        let w = port_drop_warning(&lossy).expect("a warning");
        assert!(
            w.starts_with("the kernel dropped 20 frames at the physical port in 3 of 4 measured PV streams (lro, bo)"),
            "{w}"
        );
    }

    #[test]
    fn paired_table_shows_the_median_ratio() {
        let p = super::super::paired::Paired::new(
            "xen",
            "adaptive",
            1.0,
            vec![100.0, 100.0, 100.0],
            vec![98.0, 101.0, 97.0],
        );
        let t = paired_table(&p);
        assert_eq!(t.columns, ["xen", "adaptive"]);
        let md = t.markdown();
        assert!(
            md.contains("| vs xen %, median of rounds | 100.0 | 98.0 |"),
            "{md}"
        );
        assert!(md.contains("| min | 100.0 | 97.0 |"), "{md}");
        assert!(md.contains("| max | 100.0 | 101.0 |"), "{md}");
        assert!(
            md.contains("| TCP_RR (trans/s), median | 100 | 98 |"),
            "{md}"
        );
        // 0.98, 1.01, 0.97: geometric mean 98.66 %, t(2) = 4.303, interval 93.6 – 103.9 %.
        assert!(
            md.contains("| vs xen %, geometric mean of rounds | 100.0 | 98.7 |"),
            "{md}"
        );
        assert!(
            md.contains("| 95 % confidence interval | — | 93.6 – 103.9 |"),
            "{md}"
        );
        assert!(
            md.contains("| no more than 2 % slower than xen | — | undecided |"),
            "{md}"
        );
        let note = paired_verdict_note(&p);
        assert!(
            note.contains("undecided, because the 95 % confidence interval straddles 98.0 %"),
            "{note}"
        );
    }

    #[test]
    fn limit_note_names_the_side() {
        let n = limit_note(&cs(), 65536);
        assert!(
            n.contains("In linux, xen: the receive path (CPU 0) is the limit"),
            "{n}"
        );
    }
}
