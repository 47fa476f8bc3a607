//! `pvnet bench`: the evaluation of Nakanjima and Oi's LRO paper (section III, Tables IV–VII) as one command and one
//! report. Configurations run side by side, interleaved across repetitions (A B C, A B C, ...)
//! after a warm-up, each repetition on a fresh testbed; every figure is reported as the median
//! with min and max, and as a ratio against `linux` and `xen` from the same run.
//!
//! The modules depend one way (leaves first):
//! - [`configs`]: what each configuration runs, and the CPUs of the two "machines";
//! - [`testbed`]: one testbed per measurement, started and torn down;
//! - [`measure`]: one repetition (stream, CPU accounting, retransmissions, TCP_RR);
//! - [`paired`]: TCP_RR of two PV configurations (`xen` and `adaptive`) on one testbed, switched live;
//! - [`summary`]: medians, min, max, ratios; [`run`](mod@run): a finished run;
//! - [`report`]: the tables, printed and as `report.md`; [`plot`]: the SVG plots; [`output`]:
//!   what is written to disk;
//! - [`progress`], [`interrupt`], [`child`], [`machine`]: the progress line, Ctrl-C, child
//!   processes, the machine's description.
//!
//! This module plans a run ([`Plan`]), executes it, and presents it.

mod child;
mod configs;
mod interrupt;
mod machine;
mod measure;
mod output;
mod paired;
mod plot;
mod progress;
mod report;
mod run;
mod summary;
mod testbed;

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};

use measure::{Sample, Tool};
use progress::Progress;
use run::{Params, Run, SweepInfo};

/// Bytes per send call of the stream sender. Large sends keep the sender cheap per byte, so the
/// receiving side, not the sender, limits the stream (`report.md` says which side did).
pub const DEFAULT_MSG_SIZE: usize = 65536;
/// The default `--sweep-values`: 10 to 1000 µs, log-spaced.
pub const DEFAULT_SWEEP_VALUES: &str = "10,22,46,100,215,464,1000";

#[derive(clap::Args, Clone, Debug)]
pub struct BenchArgs {
    /// Comma-separated configurations: linux, linux-gro, xen, lro, bo, da, timeout, adaptive,
    /// or a flush policy (e.g. timeout:100, every:4). Default: those eight (with --sweep:
    /// xen,adaptive as references). Only when named: relay and relay-adaptive, this
    /// emulation's floor (packet ring and TAP without the Xen machinery); port-gro,
    /// port-gro+adaptive and guest-gro, GRO at the physical port or in the guest's TAP.
    #[arg(long)]
    pub configs: Option<String>,
    /// A short run: 1 repetition, 2 s streams, 1 s TCP_RR (about a minute for all eight).
    #[arg(long)]
    pub quick: bool,
    /// Measured repetitions of each configuration (default 3, quick 1).
    #[arg(long)]
    pub reps: Option<usize>,
    /// Seconds per stream test (default 6, quick 2).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Seconds per TCP_RR test (default 1.5, quick 1).
    #[arg(long)]
    pub rr_duration: Option<f64>,
    /// Bytes per send call of the stream sender.
    #[arg(long, default_value_t = DEFAULT_MSG_SIZE)]
    pub msg_size: usize,
    /// What sends the stream: the built-in verifying tool, or iperf3 (must be installed).
    #[arg(long, value_enum, default_value_t = Tool::Builtin)]
    pub tool: Tool,
    /// Output directory for report.md, results.json and the plots (default
    /// `bench-out/<UTC date-time>`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Also write results.json to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Sweep a flush policy's parameter: `timeout` runs timeout:USEC over --sweep-values and
    /// plots throughput and TCP_RR against it (sweep.svg).
    #[arg(long, value_enum)]
    pub sweep: Option<SweepKind>,
    /// Rounds of the paired TCP_RR comparison: the --paired configurations (`xen` and
    /// `adaptive`) on one testbed and one connection, the data path switched live between
    /// slices, one slice of each per round (default 256, quick 15; 0 skips it). Runs when both
    /// configurations are selected. The report judges the second against the first on the
    /// 95 % confidence interval of the rounds' ratios: 256 rounds of 0.1 s put it at about
    /// ±1.5 % here, 2048 rounds (about 7 minutes) at about ±0.6 %.
    #[arg(long)]
    pub paired_rounds: Option<usize>,
    /// Seconds per slice of the paired comparison (default 0.1). Shorter slices cancel more
    /// of this machine's slow drift: at the same total time, 0.05–0.1 s slices gave intervals
    /// 1.3–2× narrower than 1 s slices.
    #[arg(long)]
    pub paired_seconds: Option<f64>,
    /// The two PV configurations of the paired comparison, BASE,OTHER. The project asks
    /// `adaptive` to stay within 2 % of `xen`; the same configuration twice (`xen,xen`) is an
    /// A/A run that shows the method's own spread and bias.
    #[arg(long, default_value = DEFAULT_PAIRED)]
    pub paired: String,
    /// Slots of the physical port's packet ring in the PV configurations (256 to 65536), as
    /// `pvnet up --ring-frames`.
    #[arg(long, default_value_t = pvnet_pnic::DEFAULT_FRAME_NR)]
    pub ring_frames: u32,
    /// Frames per poll of the physical port (NAPI budget) in the PV configurations (1 to 512),
    /// as `pvnet up --budget`. Smaller polls aggregate less per poll, as in Nakanjima and Oi's measurements, where
    /// `lro` made 2.55 segments per aggregate.
    #[arg(long, default_value_t = crate::config::DEFAULT_BUDGET)]
    pub budget: usize,
    /// MTU of the wire, the physical port and the guests' interfaces in every configuration
    /// (1280 to 65535; the PV configurations stop at a TAP's 65521), as `pvnet up --mtu`.
    #[arg(long, default_value_t = crate::config::DEFAULT_MTU)]
    pub mtu: u32,
    /// The values of --sweep, comma-separated: microseconds for `timeout` (1 to 1000; default
    /// 10,22,46,100,215,464,1000), guests for `guests` (1 to 16; default 1,2,4,8).
    #[arg(long)]
    pub sweep_values: Option<String>,
    /// Guests per configuration, each receiving (or, with @tx, sending) its own stream at once
    /// from its own sender (1 to 16): the report adds the aggregate, each guest's share and
    /// Jain's fairness index. Every configuration is then run as `NAME/gN`.
    #[arg(long, default_value_t = 1)]
    pub guests: usize,
    /// Which way the streams go: `rx` (remote host → guest, the receive path), `tx` (guest →
    /// remote host: every configuration as `NAME@tx`), or `both`. A configuration named with
    /// `@tx` in --configs streams out of the guest whatever this says.
    #[arg(long, value_enum, default_value_t = Directions::Rx)]
    pub direction: Directions,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Directions {
    Rx,
    Tx,
    Both,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SweepKind {
    /// The `timeout:USEC` flush policy.
    Timeout,
    /// The number of guests streaming at once (`NAME/gN`).
    Guests,
}

/// The default `--sweep-values` of `--sweep guests`.
pub const DEFAULT_SWEEP_GUESTS: &str = "1,2,4,8";

/// The pair the paired TCP_RR comparison runs by default: the project asks `adaptive` to stay
/// within 2 % of `xen`, a difference the between-testbed spread of TCP_RR hides.
const DEFAULT_PAIRED: &str = "xen,adaptive";

pub fn run(args: BenchArgs) -> Result<()> {
    match run_bench(args) {
        Err(e) if e.downcast_ref::<interrupt::Interrupted>().is_some() => {
            eprintln!(
                "pvnet bench: {e}: stopped; the running testbed was torn down (no namespace or run directory is left)"
            );
            std::process::exit(130);
        }
        r => r,
    }
}

/// Checks what a bench needs before it starts anything, so a missing piece is named up front.
fn preflight(configs: &[String], tool: Tool) -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!("`pvnet bench` needs root (network namespaces, veth, TAP and raw sockets): run it with sudo");
    }
    if pvnet_testbed::cpu::nr_cpus() < 2 {
        bail!("`pvnet bench` needs two CPUs (receiving side on CPU 0, sender on CPU 1)");
    }
    if !Path::new("/proc/self/ns/net").exists() {
        bail!("this kernel has no network namespaces (CONFIG_NET_NS): the testbed needs them");
    }
    if configs.iter().any(|c| configs::is_pv(c)) {
        if let Err(e) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/net/tun")
        {
            bail!(
                "cannot open /dev/net/tun ({e}): the PV configurations need TAP devices; load the tun module (`modprobe tun`) or make the device available"
            );
        }
    }
    if tool == Tool::Iperf3 && !child::on_path("iperf3") {
        bail!("--tool iperf3: iperf3 is not installed (e.g. `apt-get install iperf3`), or use the built-in tool (--tool builtin)");
    }
    Ok(())
}

fn run_bench(args: BenchArgs) -> Result<()> {
    let plan = Plan::new(&args)?;
    preflight(&plan.configs, args.tool)?;
    interrupt::install()?;
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (started_utc, stamp) = machine::utc(started_unix);
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("bench-out").join(stamp));
    std::fs::create_dir_all(&out)
        .with_context(|| format!("cannot create the output directory {}", out.display()))?;
    let others = crate::rundir::list_runs();
    if !others.is_empty() {
        eprintln!(
            "pvnet bench: warning: other pvnet runs are up ({}): their traffic and CPU use would skew the figures (`pvnet down --all`)",
            others.join(", ")
        );
    }
    let t0 = Instant::now();
    let (samples, paired) = execute(&plan)?;
    let (paired, paired_error) = paired;
    let Plan {
        configs,
        sweep,
        params,
        ..
    } = plan;
    let summary = summary::summarize(&configs, &samples);
    let run = Run {
        started_utc,
        started_unix,
        revision: machine::REVISION.to_string(),
        wall_seconds: t0.elapsed().as_secs_f64(),
        machine: machine::describe(params.measure.tsc_hz),
        params,
        configs,
        samples,
        summary,
        sweep,
        paired,
        paired_error,
    };
    present(&run, &args, &out)
}

/// What a bench will run, checked before anything starts.
struct Plan {
    configs: Vec<String>,
    sweep: Option<SweepInfo>,
    pair: (String, String),
    params: Params,
}

impl Plan {
    fn new(args: &BenchArgs) -> Result<Plan> {
        let mut configs = match (&args.configs, args.sweep) {
            (Some(c), _) => configs::parse(c)?,
            (None, None) => configs::all(),
            (None, Some(_)) => configs::parse("xen,adaptive")?,
        };
        if !(1..=configs::MAX_GUESTS).contains(&args.guests) {
            bail!(
                "--guests must be between 1 and {}, got {}",
                configs::MAX_GUESTS,
                args.guests
            );
        }
        let with_guests = |c: &String, g: usize| {
            let n = configs::Name::parse(c).expect("checked by configs::parse");
            configs::Name { guests: g, ..n }.with_base(n.base)
        };
        if args.guests > 1 {
            configs = configs
                .iter()
                .map(|c| with_guests(c, args.guests))
                .collect();
        }
        let sweep = match args.sweep {
            Some(SweepKind::Guests) => {
                let text = args.sweep_values.as_deref().unwrap_or(DEFAULT_SWEEP_GUESTS);
                let values = configs::parse_guest_values(text)?;
                configs = (configs.iter())
                    .flat_map(|c| values.iter().map(move |&g| with_guests(c, g as usize)))
                    .collect();
                None
            }
            Some(SweepKind::Timeout) => {
                let text = args.sweep_values.as_deref().unwrap_or(DEFAULT_SWEEP_VALUES);
                let values = configs::parse_sweep_values(text)?;
                let references = configs.clone();
                for v in &values {
                    let c = format!("timeout:{v}");
                    if !configs.contains(&c) {
                        configs.push(c);
                    }
                }
                Some(SweepInfo { values, references })
            }
            None => None,
        };
        let with_tx = |c: &String| {
            let n = configs::Name::parse(c).expect("checked by configs::parse");
            configs::Name {
                dir: configs::Direction::Tx,
                ..n
            }
            .with_base(n.base)
        };
        configs = match args.direction {
            Directions::Rx => configs,
            Directions::Tx => configs.iter().map(with_tx).collect(),
            Directions::Both => {
                let mut both = configs.clone();
                both.extend(configs.iter().map(with_tx).filter(|t| !configs.contains(t)));
                both
            }
        };
        if args.msg_size == 0 {
            bail!("--msg-size must be at least 1");
        }
        let reps = args.reps.unwrap_or(if args.quick { 1 } else { 3 });
        let stream_seconds = args.duration.unwrap_or(if args.quick { 2.0 } else { 6.0 });
        let rr_seconds = args
            .rr_duration
            .unwrap_or(if args.quick { 1.0 } else { 1.5 });
        if reps == 0 || stream_seconds <= 0.0 || rr_seconds <= 0.0 {
            bail!("--reps, --duration and --rr-duration must be positive");
        }
        if let Some(s) = args.paired_seconds {
            if !(s > 0.0 && s <= 60.0) {
                bail!("--paired-seconds must be in (0, 60], got {s}");
            }
        }
        let pair = configs::parse_pair(&args.paired)?;
        let ring_frames = crate::config::check_ring_frames(args.ring_frames)?;
        let budget = crate::config::check_budget(args.budget)?;
        let mtu = crate::config::check_mtu(args.mtu)?;
        let params = Params {
            reps,
            warmup_stream_seconds: if args.quick { 1.0 } else { 2.0 },
            warmup_rr_seconds: if args.quick { 0.5 } else { 1.0 },
            measure: measure::Params {
                stream_seconds,
                rr_seconds,
                msg_size: args.msg_size,
                tool: args.tool,
                tsc_hz: pvnet_perf::cpu::tsc_hz(),
                ring_frames,
                budget,
                mtu,
            },
            paired_rounds: if configs.contains(&pair.0) && configs.contains(&pair.1) {
                args.paired_rounds
                    .unwrap_or(if args.quick { 15 } else { 256 })
            } else {
                0
            },
            paired_seconds: args.paired_seconds.unwrap_or(0.1),
        };
        Ok(Plan {
            configs,
            sweep,
            pair,
            params,
        })
    }

    /// The warm-up repetitions' parameters.
    fn warm(&self) -> measure::Params {
        measure::Params {
            stream_seconds: self.params.warmup_stream_seconds,
            rr_seconds: self.params.warmup_rr_seconds,
            ..self.params.measure
        }
    }

    /// One warm-up repetition of each configuration, then the measured ones, interleaved:
    /// (configuration, repetition, warm-up).
    fn steps(&self) -> Vec<(String, usize, bool)> {
        let mut plan: Vec<(String, usize, bool)> =
            self.configs.iter().map(|c| (c.clone(), 0, true)).collect();
        for rep in 1..=self.params.reps {
            plan.extend(self.configs.iter().map(|c| (c.clone(), rep, false)));
        }
        plan
    }

    /// Seconds each step is planned to take, the paired comparison last.
    fn planned_seconds(&self) -> Vec<f64> {
        let warm = self.warm();
        let iperf3_extra = |p: &measure::Params| match p.tool {
            Tool::Iperf3 => measure::iperf3_seconds(p.stream_seconds) as f64 - p.stream_seconds,
            Tool::Builtin => 0.0,
        };
        let mut planned: Vec<f64> = (self.steps().iter())
            .map(|(_, _, w)| {
                let p = if *w { &warm } else { &self.params.measure };
                p.stream_seconds + iperf3_extra(p) + p.rr_seconds
            })
            .collect();
        if self.params.paired_rounds > 0 {
            planned.push(2.0 * self.params.paired_rounds as f64 * self.params.paired_seconds);
        }
        planned
    }
}

type PairedOutcome = (Option<paired::Paired>, Option<String>);

/// Runs the plan: every step on a fresh testbed, then the paired comparison. A failed
/// paired comparison still leaves the samples their report (the failure goes into it).
fn execute(plan: &Plan) -> Result<(Vec<Sample>, PairedOutcome)> {
    let progress = Progress::new(plan.planned_seconds());
    let warm = plan.warm();
    let reps = plan.params.reps;
    let mut samples = Vec::new();
    for (c, rep, warmup) in &plan.steps() {
        let what = if *warmup {
            format!("{c}, warm-up")
        } else {
            format!("{c}, repetition {rep}/{reps}")
        };
        progress.step(&what);
        let p = if *warmup { &warm } else { &plan.params.measure };
        let s = measure::run_one(c, *rep, *warmup, p, &progress);
        progress.step_done();
        match s {
            Ok(s) => samples.push(s),
            Err(e) => {
                progress.finish();
                return Err(e);
            }
        }
    }
    let mut paired = (None, None);
    if plan.params.paired_rounds > 0 {
        let (a, b) = &plan.pair;
        progress.step(&format!("{a} and {b} on one testbed"));
        let r = paired::run(
            a,
            b,
            plan.params.paired_rounds,
            plan.params.paired_seconds,
            &plan.params.measure,
            &progress,
        );
        progress.step_done();
        paired = match r {
            Ok(p) => (Some(p), None),
            Err(e) if e.downcast_ref::<interrupt::Interrupted>().is_some() => {
                progress.finish();
                return Err(e);
            }
            Err(e) => (
                None,
                Some(format!("the paired TCP_RR comparison failed: {e:#}")),
            ),
        };
    }
    progress.finish();
    Ok((samples, paired))
}

/// Prints the tables and warnings, writes the outputs, and fails if any configuration or the
/// paired comparison reported errors.
fn present(run: &Run, args: &BenchArgs, out: &Path) -> Result<()> {
    let reps = run.params.reps;
    for t in report::tables(&run.summary, reps) {
        println!("{}", t.text());
    }
    if run.sweep.is_some() {
        println!("{}", report::sweep_table(&run.summary, reps).text());
    }
    if let Some(p) = &run.paired {
        println!("{}", report::paired_table(p).text());
        println!("{}\n", report::paired_verdict_note(p));
    }
    println!("{}\n", report::limit_note(&run.summary, args.msg_size));
    for w in report::warnings(run) {
        eprintln!("pvnet bench: warning: {w}");
    }
    output::write_outputs(run, out, args.json.as_deref())?;
    eprintln!(
        "pvnet bench: {:.0} s; wrote {}/report.md, results.json, throughput.svg, cycles.svg{}",
        run.wall_seconds,
        out.display(),
        if run.sweep.is_some() {
            ", sweep.svg"
        } else {
            ""
        }
    );
    if let Some(e) = &run.paired_error {
        bail!("{e}");
    }
    let bad: Vec<&str> = (run.summary.iter())
        .filter(|c| !c.errors.is_empty())
        .map(|c| c.name.as_str())
        .collect();
    if !bad.is_empty() {
        bail!(
            "errors in {}: see the report's Errors section",
            bad.join(", ")
        );
    }
    Ok(())
}
