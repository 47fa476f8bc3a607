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
pub(crate) mod configs;
mod hvm;
mod interrupt;
mod machine;
mod measure;
mod output;
mod paired;
mod pktsize;
mod plot;
mod progress;
mod records;
mod report;
mod restart;
mod run;
mod scaling;
mod scenario;
mod soak;
mod summary;
mod testbed;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};

use measure::{Sample, Tool};
use progress::Progress;
use run::{Params, Run, SweepInfo};
pub use soak::{run as soak, SoakArgs};

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
    #[arg(long, value_parser = crate::seconds)]
    pub duration: Option<f64>,
    /// Seconds per TCP_RR test (default 1.5, quick 1).
    #[arg(long, value_parser = crate::seconds)]
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
    /// plots throughput and TCP_RR against it (sweep.svg); `guests` runs every configuration
    /// at each --sweep-values guest count (`NAME/gN`) and plots the aggregate throughput and
    /// Jain's fairness index against the number of guests (guests.svg); `pktsize` runs a UDP
    /// stream into a guest at a fixed packet rate for every grant mechanism and every size of
    /// --sweep-values (bytes, 64 to 65493; default 64 B to 64 KiB) and plots cycles per packet
    /// against the size, with the break-even sizes of the mechanisms (pktsize.md, pktsize.svg);
    /// `record-size` runs the HVM paper's Fig. 6 workload (records.svg).
    #[arg(long, value_enum)]
    pub sweep: Option<SweepKind>,
    /// `--sweep pktsize`: `same` (driver domain and guest on one CPU, the sender on the
    /// other), `split` (driver domain and sender on CPU 0, guest on CPU 1) or `both`
    /// (default). With several guests (`--guests`, `--sweep guests`; applied at every guest
    /// count of the run, one included): `same` (default: every guest and receiver on CPU 0
    /// with the driver domain), `spread` (guest i's netfront and receiver on CPU i % 2) or
    /// `free` (the guests' netfronts and receivers on either CPU, placed by the kernel); the
    /// driver domain stays on CPU 0, the senders on CPU 1.
    #[arg(long)]
    pub placement: Option<String>,
    /// `--sweep pktsize`: the offered load in datagrams per second (default 2kpps), the same
    /// at every size and below saturation.
    #[arg(long)]
    pub rate: Option<String>,
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
    #[arg(long, value_parser = crate::seconds)]
    pub paired_seconds: Option<f64>,
    /// `--sweep guests`: rounds of the standing-testbed comparison of each configuration's
    /// largest guest count against one guest (default 40, quick 10; 0 skips it). Testbeds of N
    /// guests, connections that stay open, and in each round a slice with one guest streaming
    /// and one with all N (0.5 s each after 0.3 s to settle): the 8 ÷ 1 ratio without the
    /// ±10–15 % that separates fresh testbeds here. Only with the guests on the receiving CPU
    /// (`--placement same`, the default) and streams into the guests.
    #[arg(long)]
    pub scaling_rounds: Option<usize>,
    /// `--sweep guests`: testbeds the standing-testbed comparison's rounds are split between,
    /// one started after the other, the configurations' in turn (default 8, 1 to 16, at most
    /// half the rounds: each testbed runs two rounds or more). Testbeds of one configuration
    /// differ by ±0.02 in 8 ÷ 1, more than one testbed's rounds say; the interval is taken
    /// over the testbeds.
    #[arg(long)]
    pub scaling_testbeds: Option<usize>,
    /// The two PV configurations of the paired comparison, BASE,OTHER. The project asks
    /// `adaptive` to stay within 2 % of `xen`; the same configuration twice (`xen,xen`) is an
    /// A/A run that shows the method's own spread and bias. Default: xen,adaptive.
    #[arg(long)]
    pub paired: Option<String>,
    /// Slots of the physical port's packet ring in the PV configurations (256 to 65536), as
    /// `pvnet up --ring-frames` (a quarter as many with port GRO, whose slots hold 64 KiB).
    /// Default: `up`'s for each configuration's guests (4096 a guest for one or two guests,
    /// then 4096 for every two; 1024 with port GRO).
    #[arg(long)]
    pub ring_frames: Option<u32>,
    /// Receive queues of the physical port in the PV configurations (1 to 16), as `pvnet up
    /// --port-queues`: 1 puts every guest's frames in one first-in first-out ring. Default:
    /// `up`'s, one per guest (1 on the frame port and with a V3 ring).
    #[arg(long)]
    pub port_queues: Option<u32>,
    /// Slots of the port's packet ring the CPU is asked to load before they are used in the
    /// PV configurations, 0 (none) to 64, as `pvnet up --ring-prefetch`. Default: `up`'s (4).
    #[arg(long)]
    pub ring_prefetch: Option<u32>,
    /// Frames per poll of the physical port (NAPI budget) in the PV configurations (1 to 512),
    /// as `pvnet up --budget`. Smaller polls aggregate less per poll, as in Nakanjima and Oi's measurements, where
    /// `lro` made 2.55 segments per aggregate.
    /// Default: `up`'s (64; 256 for the relay configurations, `--mode relay`).
    #[arg(long)]
    pub budget: Option<usize>,
    /// MTU of the wire, the physical port and the guests' interfaces in every configuration
    /// (1280 to 65535; the PV configurations stop at a TAP's 65521), as `pvnet up --mtu`.
    #[arg(long, default_value_t = crate::config::DEFAULT_MTU)]
    pub mtu: u32,
    /// Each PV guest's netfront and its receiver in a CPU cgroup of its own with an equal
    /// weight, as `pvnet up --guest-cgroups` (`on` or `off`; default: `pvnet up`'s).
    #[arg(long, value_parser = crate::on_off)]
    pub guest_cgroups: Option<bool>,
    /// The values of --sweep, comma-separated: microseconds for `timeout` (1 to 1000; default
    /// 10,22,46,100,215,464,1000), guests for `guests` (1 to 16; default 1,2,4,8), record
    /// sizes for `record-size` (bytes, or with K or M; default 1K,4K,16K,64K,256K,1M).
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
    /// Workloads of issue 22 instead of the tables, comma-separated, each on two guests and run
    /// in turn: `neighbour` (guest 0 streams and serves TCP_RR, alone and beside guest 1
    /// burning the receiving CPU) and `mixed` (guest 1's TCP_RR latency percentiles, alone and
    /// while guest 0 receives a bulk stream), each --configs configuration a flush policy
    /// (default xen,lro,da,timeout,adaptive); `restart` (the driver domain restarted idle and
    /// under verified TCP and paced UDP streams: reconnection times and what the guests lose;
    /// default configurations xen,adaptive). Each writes scenario-NAME.md and
    /// scenario-NAME.json; see docs/consolidation.md and docs/restart.md. With `--sweep
    /// guests`, issue 22's whole study in one run: the sweep first (its report.md, with
    /// --configs, --reps and --duration), then these workloads in the same --out, with their
    /// own defaults and --scenario-configs.
    #[arg(long, value_enum, value_delimiter = ',', conflicts_with_all = ["guests", "direction"])]
    pub scenario: Vec<ScenarioKind>,
    /// With `--sweep guests --scenario ...`: the workloads' configurations (default: each
    /// workload's own, as for --configs without --sweep).
    #[arg(long)]
    pub scenario_configs: Option<String>,
    /// `--scenario restart`: restarts idle, and in each leg with restarts (1 to 20; default 3).
    #[arg(long)]
    pub restarts: Option<usize>,
    /// `--scenario mixed`: pace guest 0's bulk stream at this many Mbit/s (a wire of that
    /// speed; 1000 is the papers' gigabit NIC), so that every policy carries the same bytes
    /// beside guest 1's TCP_RR. Unpaced, an aggregating policy lets guest 0 take 2-3 times
    /// `xen`'s bytes, and guest 1's latency answers for those too; paced below every
    /// policy's capacity it answers for the policy alone.
    #[arg(long)]
    pub stream_pace: Option<u64>,
    /// Modelled cost of one VM exit for the HVM configurations (hvm, hvm-seed, hvm-fast), in
    /// nanoseconds of CPU spent by the vCPU on every port access; comma-separated, each HVM
    /// configuration named without `+exitN` runs at every cost given, as `NAME` at 0 and as
    /// `NAME+exitN` otherwise. Default: none, and 1000 ns, a VT-x exit and entry with the
    /// hypervisor's decoding of an I/O instruction on the seed's Core 2 (see docs/hvm.md).
    #[arg(long, default_value = DEFAULT_EXIT_COSTS)]
    pub exit_cost_ns: String,
    /// `--sweep record-size`: records per size (default 40; the HVM paper sent 2000).
    #[arg(long)]
    pub records: Option<u64>,
    /// `--sweep record-size`: records per second the sender's schedule asks for (default 50,
    /// the HVM paper's rate; 0: each record as soon as the last is acknowledged).
    #[arg(long)]
    pub record_rate: Option<f64>,
}

/// The default `--exit-cost-ns`: no cost, and the one the bench states as realistic, 1000 ns:
/// a VT-x VM exit and entry round trip plus the hypervisor's decoding of an I/O instruction
/// on the seed's Core 2 class of processor (docs/hvm.md says where the figure comes from).
pub const DEFAULT_EXIT_COSTS: &str = "0,1000";

/// A workload of `--scenario`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScenarioKind {
    /// Guest 0 receives a stream and serves TCP_RR, alone and beside a guest that burns the
    /// receiving CPU.
    Neighbour,
    /// Guest 1 serves TCP_RR, alone and while guest 0 receives a bulk stream.
    Mixed,
    /// The driver domain restarted, idle and under load: reconnection times, what the guests'
    /// streams lose.
    Restart,
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
    /// The record size of the HVM paper's Fig. 6 workload: records sent on a schedule, each
    /// acknowledged (`pvnet perf records`), throughput and time per record against the size
    /// (records.svg). Default configurations xen@tx, hvm@tx, hvm-fast@tx.
    RecordSize,
    /// The packet size, for every grant mechanism (cycles per packet, break-even sizes).
    Pktsize,
}

/// The default and the largest `--scaling-testbeds`.
const DEFAULT_SCALING_TESTBEDS: usize = 8;
const MAX_SCALING_TESTBEDS: usize = 16;

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
    if args.scenario_configs.is_some() && (args.scenario.is_empty() || args.sweep.is_none()) {
        bail!("--scenario-configs belongs to --sweep guests with --scenario (without --sweep, the workloads take --configs)");
    }
    // Issue 22's study in one run: the guest sweep, then the workloads, in one --out.
    let scenarios = match (args.scenario.is_empty(), args.sweep) {
        (true, _) => None,
        (false, None) => {
            let plan = plan_scenarios(&args)?;
            return run_scenarios(plan, &args);
        }
        (false, Some(SweepKind::Guests)) => {
            if args.json.is_some() {
                bail!("--json writes one run's results: with --sweep guests and --scenario, results.json and every scenario-NAME.json are in --out");
            }
            let mut only = args.clone();
            only.configs = args.scenario_configs.clone();
            (only.reps, only.duration, only.rr_duration) = (None, None, None);
            Some((plan_scenarios(&only)?, only))
        }
        (false, Some(_)) => {
            bail!("--scenario runs alone or after --sweep guests, not with another --sweep")
        }
    };
    if scenarios.is_none() {
        if args.restarts.is_some() {
            bail!("--restarts belongs to --scenario restart");
        }
        if args.stream_pace.is_some() {
            bail!("--stream-pace belongs to --scenario mixed");
        }
    }
    if args.sweep == Some(SweepKind::RecordSize) {
        return run_record_sweep(&args);
    }
    if args.sweep == Some(SweepKind::Pktsize) {
        return run_pktsize(&args);
    }
    let plan = Plan::new(&args)?;
    preflight(&plan.configs, args.tool)?;
    if let Some((sp, _)) = &scenarios {
        preflight(&sp.all_configs(), Tool::Builtin)?;
    }
    interrupt::install()?;
    let (out, started) = output::out_dir(args.out.as_deref(), "bench-out", "")?;
    let (started_utc, started_unix) = (started.utc, started.unix);
    let others = crate::rundir::live_runs();
    if !others.is_empty() {
        eprintln!(
            "pvnet bench: warning: other pvnet runs are up ({}): their traffic and CPU use would skew the figures (`pvnet down --all`)",
            others.join(", ")
        );
    }
    let t0 = Instant::now();
    let probes = machine::Probes::start(configs::RX_CPU);
    let (samples, paired, (one_testbed, one_testbed_errors)) = execute(&plan)?;
    let probes = probes.finish();
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
        machine: machine::with_probes(machine::describe(params.measure.tsc_hz), probes),
        params,
        configs,
        samples,
        summary,
        sweep,
        paired,
        paired_error,
        one_testbed,
        one_testbed_errors,
    };
    let swept = present(&run, &args, &out);
    let Some((sp, sargs)) = scenarios else {
        return swept;
    };
    // The workloads run even when the sweep had errors (which are reported, with theirs, at
    // the end); not after an interrupt.
    if let Err(i) = interrupt::check() {
        return swept.and(Err(i.into()));
    }
    let kinds: Vec<ScenarioKind> = sp.plans.iter().map(|(k, _)| *k).collect();
    let mut written = Vec::new();
    let scenarios = run_scenarios_in(sp, &sargs, &out, &mut written);
    let done: Vec<(String, bool)> = (kinds.iter())
        .map(|k| {
            let name = clap::ValueEnum::to_possible_value(k).map(|v| v.get_name().to_owned());
            (name.unwrap_or_default(), written.contains(k))
        })
        .collect();
    output::append_scenarios(&out, &done)?;
    match (swept, scenarios) {
        (Ok(()), r) | (r, Ok(())) => r,
        (Err(a), Err(b)) => bail!("{a:#}; and {b:#}"),
    }
}

/// The checked plan of `--scenario`: each workload with its configurations and the
/// parameters they share.
struct ScenarioPlan {
    plans: Vec<(ScenarioKind, Vec<String>)>,
    reps: usize,
    stream_seconds: f64,
    rr_seconds: f64,
    restarts: usize,
    port: configs::PortParams,
}

impl ScenarioPlan {
    fn all_configs(&self) -> Vec<String> {
        self.plans.iter().flat_map(|(_, c)| c.clone()).collect()
    }
}

/// Checks everything `--scenario` was given, before anything starts.
fn plan_scenarios(args: &BenchArgs) -> Result<ScenarioPlan> {
    let kinds = &args.scenario;
    if (1..kinds.len()).any(|i| kinds[..i].contains(&kinds[i])) {
        bail!("--scenario names each workload once");
    }
    if args.json.is_some() && kinds.len() > 1 {
        bail!("--json writes one scenario's run: give one --scenario (every scenario writes scenario-NAME.json in --out)");
    }
    if args.restarts.is_some() && !kinds.contains(&ScenarioKind::Restart) {
        bail!("--restarts belongs to --scenario restart");
    }
    if args.stream_pace.is_some() && !kinds.contains(&ScenarioKind::Mixed) {
        bail!("--stream-pace belongs to --scenario mixed");
    }
    if args.stream_pace == Some(0) {
        bail!("--stream-pace must be positive (Mbit/s)");
    }
    let restarts = args.restarts.unwrap_or(restart::DEFAULT_RESTARTS);
    if !(1..=restart::MAX_RESTARTS).contains(&restarts) {
        bail!("--restarts must be 1 to {}", restart::MAX_RESTARTS);
    }
    check_msg_size(args.msg_size)?;
    if args.tool != Tool::Builtin {
        bail!("--scenario runs the built-in tool only (its TCP_RR and verified streams)");
    }
    let reps = args.reps.unwrap_or(if args.quick { 1 } else { 3 });
    let stream_seconds = args.duration.unwrap_or(if args.quick { 2.0 } else { 6.0 });
    let rr_seconds = args
        .rr_duration
        .unwrap_or(if args.quick { 1.0 } else { 1.5 });
    if reps == 0 {
        bail!("--reps must be positive");
    }
    // Every scenario's configurations are checked before the first starts.
    let mut plans = Vec::with_capacity(kinds.len());
    for &k in kinds {
        let configs = match k {
            ScenarioKind::Restart => {
                restart::parse_configs(args.configs.as_deref().unwrap_or(restart::DEFAULT_CONFIGS))?
            }
            _ => scenario::parse_configs(
                args.configs.as_deref().unwrap_or(scenario::DEFAULT_CONFIGS),
            )?,
        };
        plans.push((k, configs));
    }
    Ok(ScenarioPlan {
        plans,
        reps,
        stream_seconds,
        rr_seconds,
        restarts,
        port: port_params(args)?,
    })
}

/// `--scenario`: the workloads of issue 22 ([`scenario`], [`restart`]), one after the other.
fn run_scenarios(plan: ScenarioPlan, args: &BenchArgs) -> Result<()> {
    preflight(&plan.all_configs(), Tool::Builtin)?;
    interrupt::install()?;
    let (out, _) = output::out_dir(args.out.as_deref(), "bench-out", "")?;
    let others = crate::rundir::live_runs();
    if !others.is_empty() {
        eprintln!(
            "pvnet bench: warning: other pvnet runs are up ({}): their traffic and CPU use skew the figures",
            others.join(", ")
        );
    }
    run_scenarios_in(plan, args, &out, &mut Vec::new())
}

/// Runs every workload of `plan` into `out`, adding to `written` each whose scenario-NAME.md
/// it wrote. Every one runs even when an earlier one had errors in its
/// samples; those are reported at the end.
fn run_scenarios_in(
    plan: ScenarioPlan,
    args: &BenchArgs,
    out: &Path,
    written: &mut Vec<ScenarioKind>,
) -> Result<()> {
    let ScenarioPlan {
        plans,
        reps,
        stream_seconds,
        rr_seconds,
        restarts,
        port,
    } = plan;
    let mut failed = Vec::new();
    for (k, configs) in plans {
        let (name, json, bad) = match k {
            ScenarioKind::Restart => {
                let params = restart::Params {
                    reps,
                    stream_seconds,
                    restarts,
                    msg_size: args.msg_size,
                    udp_size: restart::UDP_SIZE,
                    udp_pps: restart::UDP_PPS,
                    port,
                };
                let run = restart::run(configs, params, out)?;
                let bad: Vec<String> = (run.samples.iter())
                    .filter(|s| !s.all_errors().is_empty())
                    .map(|s| format!("{} rep {}", s.config, s.rep))
                    .collect();
                ("restart", serde_json::to_string_pretty(&run)?, bad)
            }
            ScenarioKind::Neighbour | ScenarioKind::Mixed => {
                let sc = if k == ScenarioKind::Neighbour {
                    scenario::Scenario::Neighbour
                } else {
                    scenario::Scenario::Mixed
                };
                let params = scenario::Params {
                    scenario: sc,
                    reps,
                    stream_seconds,
                    rr_seconds,
                    msg_size: args.msg_size,
                    stream_pace_mbps: (k == ScenarioKind::Mixed)
                        .then_some(args.stream_pace)
                        .flatten(),
                    port,
                };
                let run = scenario::run(configs, params, out)?;
                let bad: Vec<String> = (run.samples.iter())
                    .filter(|s| !s.quiet.errors.is_empty() || !s.loaded.errors.is_empty())
                    .map(|s| format!("{} rep {}", s.config, s.rep))
                    .collect();
                (sc.name(), serde_json::to_string_pretty(&run)?, bad)
            }
        };
        written.push(k);
        if let Some(j) = &args.json {
            std::fs::write(j, json).with_context(|| format!("writing {}", j.display()))?;
        }
        if !bad.is_empty() {
            failed.push(format!("{} (see scenario-{name}.md)", bad.join(", ")));
        }
    }
    if !failed.is_empty() {
        bail!("errors in {}", failed.join("; "));
    }
    Ok(())
}

/// The record sweep's plan, and the testbed parameters it shares with the streams.
fn record_plan(args: &BenchArgs) -> Result<(records::RecordPlan, measure::Params)> {
    let mut configs = configs::parse(args.configs.as_deref().unwrap_or(records::DEFAULT_CONFIGS))?;
    if args.guests != 1 {
        bail!("--sweep record-size runs one guest per configuration (no --guests)");
    }
    configs = with_directions(configs, args.direction);
    configs = expand_exit_costs(&configs, &configs::parse_exit_costs(&args.exit_cost_ns)?)?;
    if configs
        .iter()
        .any(|c| configs::Name::parse(c).is_ok_and(|n| n.guests > 1))
    {
        bail!("--sweep record-size runs one guest per configuration (no /gN)");
    }
    let sizes = pvnet_perf::records::parse_sizes(
        args.sweep_values
            .as_deref()
            .unwrap_or(records::DEFAULT_SIZES),
    )
    .map_err(|e| anyhow::anyhow!("--sweep-values: {e}"))?;
    let rate = args.record_rate.unwrap_or(records::DEFAULT_RATE);
    let plan = records::RecordPlan {
        configs,
        sizes,
        count: args.records.unwrap_or(records::DEFAULT_RECORDS),
        rate: (rate != 0.0).then_some(rate),
        reps: args.reps.unwrap_or(1),
    };
    if plan.reps == 0 {
        bail!("--reps must be positive");
    }
    pvnet_perf::RecordOpts {
        size: plan.sizes[0],
        count: plan.count,
        rate: plan.rate,
    }
    .check()
    .context("--records / --record-rate")?;
    let params = measure::Params {
        stream_seconds: 0.0,
        rr_seconds: 0.0,
        msg_size: args.msg_size,
        tool: Tool::Builtin,
        tsc_hz: pvnet_perf::cpu::tsc_hz(),
        port: port_params(args)?,
        placement: measure::GuestPlacement::Same,
        guest_cgroups: args.guest_cgroups,
    };
    Ok((plan, params))
}

/// `--sweep record-size`: every configuration on a fresh testbed per repetition, every size on
/// it; then the tables, records.svg, results.json and report.md.
fn run_record_sweep(args: &BenchArgs) -> Result<()> {
    let (plan, params) = record_plan(args)?;
    preflight(&plan.configs, Tool::Builtin)?;
    interrupt::install()?;
    let (out, started) = output::out_dir(args.out.as_deref(), "bench-out", "")?;
    let (started_utc, started_unix) = (started.utc, started.unix);
    let t0 = Instant::now();
    let probes = machine::Probes::start(configs::RX_CPU);
    let progress = Progress::new(vec![plan.planned_seconds(); plan.configs.len() * plan.reps]);
    let (mut points, mut errors) = (Vec::new(), Vec::new());
    for rep in 1..=plan.reps {
        for c in &plan.configs {
            progress.step(&format!("{c}, records, repetition {rep}/{}", plan.reps));
            match records::run_config(c, rep, &plan, &params, &progress) {
                Ok(p) => points.extend(p),
                Err(e) if e.downcast_ref::<interrupt::Interrupted>().is_some() => {
                    progress.finish();
                    return Err(e);
                }
                Err(e) => errors.push(format!("{c}, repetition {rep}: {e:#}")),
            }
            progress.step_done();
        }
    }
    progress.finish();
    errors.extend((points.iter()).filter_map(|p: &records::RecordPoint| {
        p.error
            .as_ref()
            .map(|e| format!("{}, repetition {}: {e}", p.config, p.rep))
    }));
    let tables = records::markdown(&plan, &points);
    println!("{tables}");
    let wall_seconds = t0.elapsed().as_secs_f64();
    let machine = machine::with_probes(machine::describe(params.tsc_hz), probes.finish());
    let mut md = String::from("# pvnet bench report: record sizes\n\n");
    md.push_str(&format!(
        "Run {started_utc} (UTC), revision `{}`, {wall_seconds:.0} s wall time; {} CPUs, {}.\n\n",
        machine::REVISION,
        machine["cpus"],
        machine["cpu_model"].as_str().unwrap_or("unknown CPU"),
    ));
    if let Some(line) = report::memory_probe_line(&machine["memory_probe"]) {
        md.push_str(&format!("{line}\n\n"));
    }
    md.push_str(&format!(
        "The HVM paper's Fig. 6 workload (Zhang, Li and Guan: 2000 records at 50 per second per size, from the HVM guest to another machine). \
         Here {} records per size{}, one in flight: each is sent at its slot in the schedule (or at once when the previous one's acknowledgement came after that slot), \
         and the receiver verifies every byte before it acknowledges it; time per record runs from the send to the acknowledgement, \
         throughput is the record bytes over the time from the first send to the last acknowledgement. \
         One fresh testbed per configuration and repetition ({} repetition(s), medians), every size on it in turn. \
         Configurations: {}.\n\n",
        plan.count,
        plan.rate.map_or(" unpaced".into(), |r| format!(" at {r} per second")),
        plan.reps,
        plan.configs.join(", "),
    ));
    md.push_str(&tables);
    md.push_str(
        "![records](records.svg)\n\n## Configurations\n\n| name | what runs |\n|---|---|\n",
    );
    for c in &plan.configs {
        md.push_str(&format!("| {c} | {} |\n", configs::describe(c)));
    }
    if !errors.is_empty() {
        md.push_str("\n## Errors\n\n");
        for e in &errors {
            md.push_str(&format!("- {e}\n"));
        }
    }
    let results = serde_json::json!({
        "tool": "pvnet bench --sweep record-size",
        "version": env!("CARGO_PKG_VERSION"),
        "revision": machine::REVISION,
        "started_utc": started_utc,
        "started_unix": started_unix,
        "wall_seconds": wall_seconds,
        "machine": machine,
        "parameters": plan,
        "points": points,
        "errors": errors,
    });
    let text = serde_json::to_string_pretty(&results)?;
    std::fs::write(out.join("results.json"), &text).context("writing results.json")?;
    if let Some(j) = &args.json {
        std::fs::write(j, &text).with_context(|| format!("writing {}", j.display()))?;
    }
    std::fs::write(out.join("report.md"), md).context("writing report.md")?;
    records::plot(&out.join("records.svg"), &plan, &points)?;
    eprintln!(
        "pvnet bench: {:.0} s; wrote {}/report.md, results.json, records.svg",
        t0.elapsed().as_secs_f64(),
        out.display()
    );
    if !errors.is_empty() {
        bail!("{} error(s): see the report's Errors section", errors.len());
    }
    Ok(())
}

/// `--sweep pktsize` ([`pktsize`]): its arguments checked before anything starts.
fn run_pktsize(args: &BenchArgs) -> Result<()> {
    if args.configs.is_some() || args.guests != 1 || args.direction != Directions::Rx {
        bail!("--sweep pktsize runs every grant mechanism into one guest: --configs, --guests and --direction do not apply");
    }
    let sizes = args
        .sweep_values
        .as_deref()
        .unwrap_or(pktsize::DEFAULT_SIZES);
    pktsize::parse_sizes(sizes)?;
    pktsize::parse_placement(args.placement.as_deref().unwrap_or("both"))?;
    pktsize::parse_rate(args.rate.as_deref().unwrap_or(pktsize::DEFAULT_RATE))?;
    preflight(&["xen".to_string()], Tool::Builtin)?;
    interrupt::install()?;
    let (out, _) = output::out_dir(args.out.as_deref(), "bench-out", "pktsize-")?;
    pktsize::run(args, &out)
}

/// `configs` as `--direction` asks: as named (`rx`), each streaming out of the guest (`tx`:
/// `NAME@tx`), or both, the `@tx` ones after and none twice.
fn with_directions(configs: Vec<String>, d: Directions) -> Vec<String> {
    let with_tx = |c: &String| {
        let n = configs::Name::parse(c).expect("checked by configs::parse");
        configs::Name {
            dir: configs::Direction::Tx,
            ..n
        }
        .with_base(n.base)
    };
    match d {
        Directions::Rx => configs,
        Directions::Tx => configs.iter().map(with_tx).collect(),
        Directions::Both => {
            let mut both = configs.clone();
            both.extend(configs.iter().map(with_tx).filter(|t| !configs.contains(t)));
            both
        }
    }
}

/// What a bench will run, checked before anything starts.
struct Plan {
    configs: Vec<String>,
    sweep: Option<SweepInfo>,
    pair: (String, String),
    params: Params,
    /// The configurations the standing-testbed comparison runs at their largest guest count.
    scaling: Vec<String>,
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
            Some(SweepKind::Pktsize) => bail!("--sweep pktsize is run by run_pktsize"),
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
            Some(SweepKind::RecordSize) => {
                bail!("--sweep record-size has its own plan (records::RecordPlan)")
            }
            None => None,
        };
        configs = with_directions(configs, args.direction);
        configs = expand_exit_costs(&configs, &configs::parse_exit_costs(&args.exit_cost_ns)?)?;
        check_msg_size(args.msg_size)?;
        let reps = args.reps.unwrap_or(if args.quick { 1 } else { 3 });
        let stream_seconds = args.duration.unwrap_or(if args.quick { 2.0 } else { 6.0 });
        let rr_seconds = args
            .rr_duration
            .unwrap_or(if args.quick { 1.0 } else { 1.5 });
        if reps == 0 {
            bail!("--reps must be positive");
        }
        if let Some(s) = args.paired_seconds {
            if !(s > 0.0 && s <= 60.0) {
                bail!("--paired-seconds must be in (0, 60], got {s}");
            }
        }
        let pair = configs::parse_pair(args.paired.as_deref().unwrap_or(DEFAULT_PAIRED))?;
        let port = port_params(args)?;
        let placement = match args.placement.as_deref() {
            None => measure::GuestPlacement::default(),
            Some(s) => {
                let several = args.guests > 1 || args.sweep == Some(SweepKind::Guests);
                if !several {
                    bail!("--placement applies to --sweep pktsize, or to several guests (--guests N, --sweep guests)");
                }
                measure::GuestPlacement::parse(s)?
            }
        };
        // --scaling-rounds and --scaling-testbeds outside --sweep guests are refused with the
        // other options a run does not read (crate::unused).
        let scaling_rounds = match args.scaling_rounds {
            Some(r) => r,
            None if args.sweep == Some(SweepKind::Guests) => {
                if args.quick {
                    10
                } else {
                    40
                }
            }
            None => 0,
        };
        let scaling_testbeds = match args.scaling_testbeds {
            Some(k) if !(1..=MAX_SCALING_TESTBEDS).contains(&k) => {
                bail!("--scaling-testbeds must be between 1 and {MAX_SCALING_TESTBEDS}, got {k}")
            }
            Some(k) if scaling_rounds < 2 * k => bail!(
                "--scaling-testbeds {k} needs at least {} rounds (two per testbed), --scaling-rounds is {scaling_rounds}",
                2 * k
            ),
            Some(k) => k,
            None => DEFAULT_SCALING_TESTBEDS.min(scaling_rounds / 2).max(1),
        };
        let scaling = if scaling_rounds > 0 && placement == measure::GuestPlacement::Same {
            scaling_configs(&configs)
        } else {
            Vec::new()
        };
        if args.scaling_rounds.is_some_and(|r| r > 0) && scaling.is_empty() {
            bail!(
                "--scaling-rounds: the standing-testbed comparison runs with --placement same \
                 (the default), for a receiving configuration whose --sweep-values include 1 \
                 and a larger count; this run has none"
            );
        }
        let paired = configs.contains(&pair.0) && configs.contains(&pair.1);
        if !paired
            && (args.paired.is_some()
                || args.paired_rounds.is_some_and(|r| r > 0)
                || args.paired_seconds.is_some())
        {
            bail!(
                "--paired, --paired-rounds and --paired-seconds: the paired comparison runs when both \
                 --paired configurations ({} and {}, one guest, receiving) are among the run's, \
                 and they are not (--configs, --guests N, --direction tx, or --sweep-values \
                 without 1)",
                pair.0,
                pair.1
            );
        }
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
                port,
                placement,
                guest_cgroups: args.guest_cgroups,
            },
            paired_rounds: if paired {
                args.paired_rounds
                    .unwrap_or(if args.quick { 15 } else { 256 })
            } else {
                0
            },
            paired_seconds: args.paired_seconds.unwrap_or(0.1),
            scaling_rounds: if scaling.is_empty() {
                0
            } else {
                scaling_rounds
            },
            scaling_testbeds,
        };
        Ok(Plan {
            configs,
            sweep,
            pair,
            params,
            scaling,
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
        // One step per standing testbed, the configurations' interleaved
        // ([`scaling::run_standing`]): a second to start it, and its rounds.
        for count in summary::split_evenly(self.params.scaling_rounds, self.params.scaling_testbeds)
        {
            for _ in &self.scaling {
                planned.push(
                    1.0 + 2.0 * count as f64 * (scaling::SLICE_SECONDS + scaling::SETTLE_SECONDS),
                );
            }
        }
        planned
    }
}

/// The port's settings from `--ring-frames`, `--port-queues`, `--ring-prefetch`, `--budget`
/// and `--mtu`, each checked against its bounds (a configuration on a port with one queue
/// still gets one, [`configs::port_queues_for`]).
fn port_params(args: &BenchArgs) -> Result<configs::PortParams> {
    use crate::config::PortRing;
    Ok(configs::PortParams {
        ring_frames: (args.ring_frames)
            .map(crate::config::check_ring_frames)
            .transpose()?,
        port_queues: (args.port_queues)
            .map(|n| crate::config::check_port_queues(n, false, PortRing::V2))
            .transpose()?,
        ring_prefetch: (args.ring_prefetch)
            .map(crate::config::check_ring_prefetch)
            .transpose()?,
        budget: (args.budget).map(crate::config::check_budget).transpose()?,
        mtu: crate::config::check_mtu(args.mtu)?,
    })
}

/// For each configuration that runs with one guest and with more (a guest sweep), the one
/// with the most guests: what the standing-testbed comparison runs. Streams into guests only (not
/// `@tx`), and neither HVM nor guest-to-guest configurations.
fn scaling_configs(configs: &[String]) -> Vec<String> {
    let mut best: Vec<(String, usize, String)> = Vec::new();
    for c in configs {
        let Ok(n) = configs::Name::parse(c) else {
            continue;
        };
        if n.dir != configs::Direction::Rx || configs::is_hvm(c) || configs::is_g2g(c) {
            continue;
        }
        let one = configs::Name { guests: 1, ..n }.with_base(n.base);
        match best.iter_mut().find(|(b, _, _)| *b == one) {
            Some(e) if n.guests > e.1 => (e.1, e.2) = (n.guests, c.clone()),
            Some(_) => {}
            None => best.push((one, n.guests, c.clone())),
        }
    }
    (best.into_iter())
        .filter(|(one, n, _)| *n > 1 && configs.contains(one))
        .map(|(_, _, c)| c)
        .collect()
}

/// Every HVM configuration named without an exit cost once per cost in `costs` (`NAME` at 0,
/// `NAME+exitN` otherwise), in place; the others, and HVM configurations named with a cost,
/// as they are. Duplicates are dropped.
fn expand_exit_costs(configs: &[String], costs: &[u64]) -> Result<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for c in configs {
        let expanded = if configs::is_hvm(c) && !c.contains(configs::EXIT_SUFFIX) {
            (costs.iter())
                .map(|&ns| configs::with_exit_cost(c, ns))
                .collect::<Result<Vec<_>>>()?
        } else {
            vec![c.clone()]
        };
        for e in expanded {
            if !out.contains(&e) {
                out.push(e);
            }
        }
    }
    Ok(out)
}

type PairedOutcome = (Option<paired::Paired>, Option<String>);
/// The standing-testbed comparisons that ran, and why any failed.
type ScalingOutcome = (Vec<scaling::OneTestbed>, Vec<String>);

/// Runs the plan: every step on a fresh testbed, then the paired comparison. A failed
/// paired comparison still leaves the samples their report (the failure goes into it).
fn execute(plan: &Plan) -> Result<(Vec<Sample>, PairedOutcome, ScalingOutcome)> {
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
    let standing = scaling::run_standing(
        &plan.scaling,
        plan.params.scaling_rounds,
        plan.params.scaling_testbeds,
        &plan.params.measure,
        &progress,
    );
    let (one_testbed, one_testbed_errors) = match standing {
        Ok(r) => r,
        Err(e) => {
            progress.finish();
            return Err(e);
        }
    };
    progress.finish();
    Ok((samples, paired, (one_testbed, one_testbed_errors)))
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
    let scaling = scaling::scaling(&run.summary, &run.samples);
    if !scaling.is_empty() {
        println!("{}", scaling::table(&scaling).text());
    }
    if let Some(p) = &run.paired {
        println!("{}", report::paired_table(p).text());
        println!("{}\n", report::paired_verdict_note(p));
    }
    if !run.one_testbed.is_empty() {
        println!("{}", scaling::one_testbed_table(&run.one_testbed).text());
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
        match (
            run.sweep.is_some(),
            !plot::guest_lines(&run.summary).is_empty()
        ) {
            (true, true) => ", sweep.svg, guests.svg",
            (true, false) => ", sweep.svg",
            (false, true) => ", guests.svg",
            (false, false) => "",
        }
    );
    if let Some(e) = &run.paired_error {
        bail!("{e}");
    }
    if let Some(e) = run.one_testbed_errors.first() {
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

/// `--msg-size`: what one send of the stream tool may be (its protocol's limit), checked before
/// any testbed starts rather than by every stream's child.
fn check_msg_size(n: usize) -> Result<()> {
    pvnet_perf::check_msg_size(n).map_err(|_| {
        anyhow!(
            "--msg-size must be 1 to {} bytes (16 MiB), not {n}",
            pvnet_perf::proto::MAX_MSG
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `pvnet bench ARGS` as the command line parses them, or clap's message.
    fn bench_args(args: &[&str]) -> Result<BenchArgs, String> {
        use clap::Parser;
        #[derive(Parser)]
        struct B {
            #[command(flatten)]
            b: BenchArgs,
        }
        (B::try_parse_from(["bench"].iter().chain(args)))
            .map(|b| b.b)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn hvm_configurations_run_at_every_exit_cost() {
        let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let got = expand_exit_costs(&v(&["xen", "hvm", "hvm-fast@tx", "hvm+exit50"]), &[0, 1000])
            .unwrap();
        assert_eq!(
            got,
            v(&[
                "xen",
                "hvm",
                "hvm+exit1000",
                "hvm-fast@tx",
                "hvm-fast+exit1000@tx",
                "hvm+exit50"
            ])
        );
        let only = expand_exit_costs(&v(&["hvm-seed", "linux"]), &[1000]).unwrap();
        assert_eq!(only, v(&["hvm-seed+exit1000", "linux"]));
    }

    #[test]
    fn record_sweep_arguments() {
        let a = |x: &[&str]| bench_args(x).unwrap();
        let (p, _) = record_plan(&a(&["--sweep", "record-size"])).unwrap();
        assert_eq!(
            p.configs,
            [
                "xen@tx",
                "hvm@tx",
                "hvm+exit1000@tx",
                "hvm-fast@tx",
                "hvm-fast+exit1000@tx"
            ]
        );
        assert_eq!(
            p.sizes,
            [1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20]
        );
        assert_eq!(
            (p.count, p.rate, p.reps),
            (records::DEFAULT_RECORDS, Some(50.0), 1)
        );
        let (p, _) = record_plan(&a(&[
            "--sweep",
            "record-size",
            "--configs",
            "hvm",
            "--exit-cost-ns",
            "0",
            "--sweep-values",
            "1M,100",
            "--records",
            "2000",
            "--record-rate",
            "0",
        ]))
        .unwrap();
        assert_eq!(
            (p.configs, p.sizes, p.count, p.rate),
            (vec!["hvm".to_string()], vec![100, 1 << 20], 2000, None)
        );
        for bad in [
            &["--sweep", "record-size", "--sweep-values", "0"][..],
            &["--sweep", "record-size", "--records", "0"],
            &["--sweep", "record-size", "--record-rate=-2"],
            &["--sweep", "record-size", "--guests", "2"],
            &["--sweep", "record-size", "--configs", "hvm/g2"],
        ] {
            assert!(record_plan(&a(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_paired_comparison_asked_for_but_not_run_is_refused() {
        let plan = |args: &[&str]| Plan::new(&bench_args(args).unwrap());
        let rounds = |args: &[&str]| plan(args).map(|p| p.params.paired_rounds);
        // Run when both configurations are among the run's, skipped quietly when not asked for.
        assert_eq!(rounds(&["--configs", "xen,adaptive"]).unwrap(), 256);
        assert_eq!(
            rounds(&["--configs", "xen,lro", "--paired", "xen,lro"]).unwrap(),
            256
        );
        assert_eq!(rounds(&["--configs", "xen"]).unwrap(), 0);
        assert_eq!(
            rounds(&["--configs", "xen", "--paired-rounds", "0"]).unwrap(),
            0
        );
        for args in [
            &["--configs", "xen", "--paired", "xen,adaptive"][..],
            &["--configs", "xen", "--paired-rounds", "8"],
            &[
                "--configs",
                "xen,adaptive",
                "--guests",
                "2",
                "--paired-seconds",
                "0.2",
            ],
            &[
                "--configs",
                "xen,adaptive",
                "--direction",
                "tx",
                "--paired-rounds",
                "8",
            ],
            &[
                "--sweep",
                "guests",
                "--sweep-values",
                "2,4",
                "--paired-rounds",
                "8",
            ],
        ] {
            let e = plan(args).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(
                e.contains("the paired comparison runs when both"),
                "{args:?}: {e}"
            );
        }
    }

    #[test]
    fn bench_arguments_take_exit_costs() {
        let a = bench_args(&[]).unwrap();
        assert_eq!(
            configs::parse_exit_costs(&a.exit_cost_ns).unwrap(),
            [0, 1000]
        );
        let a = bench_args(&["--configs", "hvm", "--exit-cost-ns", "0"]).unwrap();
        let plan = Plan::new(&a).unwrap();
        assert_eq!(plan.configs, ["hvm"]);
        let a = bench_args(&["--configs", "hvm,xen", "--exit-cost-ns", "x"]).unwrap();
        assert!(Plan::new(&a).is_err());
    }

    #[test]
    fn the_one_testbed_rounds_split_between_testbeds_as_asked() {
        let plan = |args: &[&str]| {
            let a = bench_args(args).unwrap();
            Plan::new(&a).map(|p| (p.params.scaling_rounds, p.params.scaling_testbeds))
        };
        let sweep = ["--sweep", "guests", "--configs", "xen"];
        let with = |more: &[&'static str]| [&sweep[..], more].concat();
        assert_eq!(plan(&sweep).unwrap(), (40, 8), "the defaults");
        assert_eq!(plan(&with(&["--quick"])).unwrap(), (10, 5));
        assert_eq!(plan(&with(&["--scaling-rounds", "5"])).unwrap(), (5, 2));
        assert_eq!(plan(&with(&["--scaling-rounds", "3"])).unwrap(), (3, 1));
        assert_eq!(plan(&with(&["--scaling-testbeds", "1"])).unwrap(), (40, 1));
        assert_eq!(
            plan(&with(&["--scaling-testbeds", "16"])).unwrap(),
            (40, 16)
        );
        let err = |more: &[&'static str]| plan(&with(more)).unwrap_err().to_string();
        assert!(err(&["--scaling-testbeds", "0"]).contains("between 1 and 16, got 0"));
        assert!(err(&["--scaling-testbeds", "17"]).contains("between 1 and 16, got 17"));
        assert!(err(&["--scaling-testbeds", "8", "--scaling-rounds", "10"])
            .contains("needs at least 16 rounds (two per testbed), --scaling-rounds is 10"));
    }

    #[test]
    fn placement_of_guests_is_taken_with_several_guests_only() {
        use measure::GuestPlacement;
        let plan = |args: &[&str]| {
            let a = bench_args(args).unwrap();
            Plan::new(&a).map(|p| p.params.measure.placement)
        };
        assert_eq!(plan(&["--configs", "xen"]).unwrap(), GuestPlacement::Same);
        assert_eq!(
            plan(&["--sweep", "guests", "--placement", "free"]).unwrap(),
            GuestPlacement::Free
        );
        assert_eq!(
            plan(&["--guests", "8", "--placement", "spread"]).unwrap(),
            GuestPlacement::Spread
        );
        // One guest and no sweep of guests: nothing to place.
        assert!(plan(&["--placement", "free"]).is_err());
        assert!(plan(&["--guests", "2", "--placement", "split"]).is_err());
    }

    #[test]
    fn the_ports_settings_reach_every_daemon_the_bench_starts() {
        let args = bench_args;
        let asked = [
            "--ring-frames",
            "4096",
            "--port-queues",
            "2",
            "--ring-prefetch",
            "9",
            "--budget",
            "128",
            "--mtu",
            "4000",
            "--guest-cgroups",
            "off",
        ];
        let a = args(&asked).unwrap();
        let streams = Plan::new(&a).unwrap().params.measure;
        let (_, records) =
            record_plan(&args(&[&asked[..], &["--sweep", "record-size"]].concat()).unwrap())
                .unwrap();
        assert_eq!(streams.port, records.port);
        assert_eq!(streams.port, port_params(&a).unwrap());
        let cfg = streams.daemon_config(configs::daemon_config("adaptive/g4").unwrap());
        assert_eq!(
            (
                cfg.ring_frames,
                cfg.port_queues,
                cfg.ring_prefetch,
                cfg.budget,
                cfg.mtu
            ),
            (4096, 2, 9, 128, 4000)
        );
        assert!(!cfg.guest_cgroups);
        // The scenarios take the port's settings and leave the cgroups to the daemon.
        let base = configs::daemon_config("adaptive/g2").unwrap();
        let two = streams.port.apply(base.clone());
        assert_eq!(
            (two.ring_frames, two.ring_prefetch, two.mtu),
            (4096, 9, 4000)
        );
        assert_eq!(two.guest_cgroups, base.guest_cgroups);
        let relay = streams.daemon_config(configs::daemon_config("relay/g8").unwrap());
        assert_eq!(
            relay.budget, 128,
            "an asked budget is every configuration's"
        );
        // Nothing asked: each configuration's own defaults.
        let none = Plan::new(&args(&[]).unwrap()).unwrap().params.measure;
        let d = configs::daemon_config("adaptive/g4").unwrap();
        let got = none.daemon_config(d.clone());
        assert_eq!(
            (
                got.ring_frames,
                got.port_queues,
                got.ring_prefetch,
                got.budget
            ),
            (
                d.ring_frames,
                d.port_queues,
                pvnet_pnic::DEFAULT_PREFETCH,
                64
            )
        );
        for floor in ["relay/g8", "relay-adaptive"] {
            let r = none.daemon_config(configs::daemon_config(floor).unwrap());
            assert_eq!(r.budget, crate::config::RELAY_BUDGET, "{floor}");
        }
        // results.json keeps the settings at the top of its parameters.
        let json = serde_json::to_value(streams).unwrap();
        assert_eq!(json["ring_prefetch"], 9);
        assert_eq!(json["mtu"], 4000);
        assert_eq!(json["budget"], 128);
        for bad in [
            &["--ring-prefetch", "65"][..],
            &["--budget", "0"],
            &["--mtu", "10"],
        ] {
            let e = port_params(&args(bad).unwrap()).unwrap_err().to_string();
            assert!(e.starts_with(bad[0]) && e.ends_with(bad[1]), "{bad:?}: {e}");
            assert!(Plan::new(&args(bad).unwrap()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_send_size_the_stream_tool_cannot_take_is_refused_before_any_testbed() {
        for n in ["0", "16777217"] {
            let e = Plan::new(&bench_args(&["--msg-size", n]).unwrap())
                .err()
                .unwrap_or_else(|| panic!("--msg-size {n} accepted"))
                .to_string();
            assert!(e.contains("--msg-size must be 1 to 16777216"), "{e}");
        }
        assert!(Plan::new(&bench_args(&["--msg-size", "16777216"]).unwrap()).is_ok());
    }

    #[test]
    fn guest_cgroups_are_passed_on_or_left_to_the_daemon() {
        let plan = |args: &[&str]| {
            let a = bench_args(args)?;
            Plan::new(&a)
                .map(|p| p.params.measure.guest_cgroups)
                .map_err(|e| e.to_string())
        };
        assert_eq!(plan(&["--configs", "xen"]).unwrap(), None);
        assert_eq!(plan(&["--guest-cgroups", "off"]).unwrap(), Some(false));
        assert_eq!(plan(&["--guest-cgroups", "on"]).unwrap(), Some(true));
        assert!(plan(&["--guest-cgroups", "maybe"]).is_err());
    }
}
