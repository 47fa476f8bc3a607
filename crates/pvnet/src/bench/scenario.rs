//! `pvnet bench --scenario neighbour|mixed`: the two consolidation workloads seed 000 left open
//! (issue 22), each run under every flush policy named in `--configs`.
//!
//! Both run on a testbed of two PV guests (the configuration as `NAME/g2`), guest 0 and guest 1,
//! with the driver domain and both guests on the receiving CPU ([`RX_CPU`]) and the remote
//! host's senders and TCP_RR client on the other ([`TX_CPU`]). Each repetition measures two
//! *legs* on one testbed, `quiet` and `loaded`, in alternating order (odd repetitions quiet
//! first, even ones loaded first), so slow drift of the machine does not fall on one leg only:
//!
//! - **neighbour** (the workload of seed 000's reference \[10\]): guest 0 receives a stream
//!   (`--duration` s) and then serves TCP_RR (`--rr-duration` s). In the loaded leg guest 1 is
//!   a CPU-hungry neighbour: `pvnet perf burn` runs in guest 1's namespace, pinned to the
//!   receiving CPU, for the whole leg. Its CPU time is charged to guest 1 (with guest 1's
//!   netfront process), guest 0's to its netfront process and its receiver, as `pvnet bench`
//!   charges a guest.
//! - **mixed**: guest 1 serves TCP_RR for `--duration` s. In the loaded leg guest 0 receives a
//!   bulk stream for that time plus a second, the TCP_RR starting half a second into it. The
//!   question: does aggregation for guest 0 add latency to guest 1's requests? The TCP_RR
//!   client shares the sending CPU with the stream's sender in the loaded leg under every
//!   policy alike, so the policies compare with each other (and with `xen`, no aggregation)
//!   within the leg; the quiet leg is the floor.
//!
//! Every figure of the tables is the median over the repetitions; `scenario-NAME.json` keeps
//! every repetition.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use pvnet_dd::netback::Mechanism;
use pvnet_dd::switch;
use pvnet_perf::cpu;
use pvnet_testbed::Netns;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::child::{self, Guard};
use super::configs::{self, RX_CPU, TX_CPU};
use super::measure::{self, Sample, PORT};
use super::progress::Progress;
use super::report::Table;
use super::{interrupt, machine, testbed};
use crate::config::Mode;
use crate::rundir::RunInfo;

/// The consolidation workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scenario {
    /// Guest 0 receives a stream and serves TCP_RR, alone and beside a guest that burns the
    /// receiving CPU.
    Neighbour,
    /// Guest 1 serves TCP_RR, alone and while guest 0 receives a bulk stream.
    Mixed,
}

impl Scenario {
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Neighbour => "neighbour",
            Scenario::Mixed => "mixed",
        }
    }
}

/// The default `--configs` of a scenario: one configuration per flush policy (`xen`: none,
/// `lro`: poll, `da`: every:2, `timeout`: timeout:50, `adaptive`).
pub const DEFAULT_CONFIGS: &str = "xen,lro,da,timeout,adaptive";

/// Seconds the mixed scenario's stream runs before the TCP_RR starts (and after it ends).
const LEAD_SECONDS: f64 = 0.5;

/// Parses a scenario's `--configs`: PV configurations the scenario's testbed can run as two
/// guests (the data path of `xen` with any flush policy; not native, relay, HVM, another
/// switch or grant mechanism, nor a name that already says `@tx` or `/gN`).
pub fn parse_configs(s: &str) -> Result<Vec<String>> {
    let list = configs::parse(s)?;
    for c in &list {
        let n = configs::Name::parse(c)?;
        if n.guests != 1 || n.dir != configs::Direction::Rx {
            bail!("--scenario runs each configuration as two receiving guests: name {c:?} without @tx or /gN");
        }
        let d = configs::daemon_config(c)?;
        if d.mode != Mode::Xen
            || d.hvm > 0
            || d.grant != Mechanism::Copy
            || d.switch != switch::Mode::Bridge
        {
            bail!(
                "--scenario compares flush policies on the PV path: {c:?} is not one (use xen, lro, bo, da, timeout, adaptive or a policy such as every:4)"
            );
        }
    }
    Ok(list)
}

/// The `q`-quantile (0..=1) of `v` by linear interpolation between the closest ranks (the
/// median of an even count is the mean of the middle two). None for no values.
pub fn percentile(v: &[f64], q: f64) -> Option<f64> {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return None;
    }
    s.sort_by(f64::total_cmp);
    let pos = q.clamp(0.0, 1.0) * (s.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    Some(s[lo] + (s[hi] - s[lo]) * (pos - lo as f64))
}

/// The median of `v` ([`percentile`] 0.5).
pub fn median(v: &[f64]) -> Option<f64> {
    percentile(v, 0.5)
}

/// Percent change from `a` to `b` (None when `a` is not positive).
pub fn change_pct(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if a > 0.0 => Some((b / a - 1.0) * 100.0),
        _ => None,
    }
}

/// One TCP_RR run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Rr {
    pub tps: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub transactions: u64,
}

/// One leg of a repetition.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Leg {
    /// The stream into guest 0 (Mbit/s); 0 in the mixed scenario's quiet leg (no stream).
    pub throughput_mbps: f64,
    pub bytes: u64,
    /// The TCP_RR run: of guest 0 (neighbour) or guest 1 (mixed).
    pub rr: Option<Rr>,
    /// Fractions of the receiving CPU's time during the measured window (the stream for
    /// neighbour, the TCP_RR for mixed): busy, and the shares of guest 0 and guest 1 (their
    /// netfront processes and what runs in them: receiver, burner, TCP_RR server).
    pub cpu_busy: f64,
    pub guest0_cpu: f64,
    pub guest1_cpu: f64,
    pub errors: Vec<String>,
}

/// One repetition of one configuration.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ScenarioSample {
    pub config: String,
    pub rep: usize,
    pub run_id: String,
    pub quiet: Leg,
    pub loaded: Leg,
    pub wall_seconds: f64,
}

/// What one scenario run measures with.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Params {
    pub scenario: Scenario,
    pub reps: usize,
    pub stream_seconds: f64,
    pub rr_seconds: f64,
    pub msg_size: usize,
    /// The mixed scenario's stream into guest 0 paced at this many Mbit/s (None: as fast as
    /// the path takes it).
    pub stream_pace_mbps: Option<u64>,
    /// The physical port's settings.
    #[serde(flatten)]
    pub port: configs::PortParams,
}

impl Params {
    /// Planned seconds of one repetition's measurements.
    fn planned(&self) -> f64 {
        match self.scenario {
            Scenario::Neighbour => 2.0 * (self.stream_seconds + self.rr_seconds),
            Scenario::Mixed => 3.0 * self.stream_seconds + 2.0 * LEAD_SECONDS,
        }
    }
}

/// A finished scenario run (`scenario-NAME.json`).
#[derive(Clone, Debug, Serialize)]
pub struct ScenarioRun {
    pub scenario: Scenario,
    #[serde(flatten)]
    pub header: RunHeader,
    pub params: Params,
    pub configs: Vec<String>,
    pub samples: Vec<ScenarioSample>,
}

impl ScenarioRun {
    fn of<'a>(&'a self, c: &'a str) -> impl Iterator<Item = &'a ScenarioSample> + 'a {
        self.samples.iter().filter(move |s| s.config == c)
    }

    /// The median over `c`'s repetitions of `f` (repetitions where it is None left out).
    pub fn med(&self, c: &str, f: Fig) -> Option<f64> {
        let v: Vec<f64> = self.of(c).filter_map(f).collect();
        median(&v)
    }
}

/// `/proc/loadavg`'s three averages.
pub(super) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// When a scenario run ran, from which code, and how loaded the shared machine was: the first
/// fields of every `scenario-NAME.json`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RunHeader {
    pub started_utc: String,
    pub revision: String,
    pub wall_seconds: f64,
    /// `/proc/loadavg` at the start and the end: the machine is shared.
    pub loadavg_start: String,
    pub loadavg_end: String,
    /// The memory as the receiving CPU saw it at the start and the end (`{start, end}`, as the
    /// bench's `machine.memory_probe`): the cache a shared VM is left changes with the hour.
    pub memory_probe: Value,
}

impl RunHeader {
    /// The first lines of a scenario's markdown report.
    pub(super) fn markdown(&self) -> String {
        format!(
            "- started {} (revision {}), {:.0} s\n- load average (1, 5, 15 min) at the start: {}; at the end: {}\n{}",
            self.started_utc,
            self.revision,
            self.wall_seconds,
            self.loadavg_start,
            self.loadavg_end,
            super::report::memory_probe_line(&self.memory_probe)
                .map(|l| format!("- {l}\n"))
                .unwrap_or_default()
        )
    }
}

/// When a scenario run started, the machine's load then and its memory.
pub(super) struct Started {
    pub utc: String,
    pub loadavg: String,
    probes: machine::Probes,
    t0: Instant,
}

impl Started {
    pub(super) fn now() -> Started {
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        Started {
            utc: machine::utc(unix).0,
            loadavg: loadavg(),
            probes: machine::Probes::start(RX_CPU),
            t0: Instant::now(),
        }
    }

    /// The run's header, now that it is over.
    pub(super) fn finish(self) -> RunHeader {
        let wall_seconds = self.t0.elapsed().as_secs_f64();
        RunHeader {
            started_utc: self.utc,
            revision: machine::REVISION.to_string(),
            wall_seconds,
            loadavg_start: self.loadavg,
            loadavg_end: loadavg(),
            memory_probe: self.probes.finish(),
        }
    }
}

/// Runs `one` for every configuration in every repetition, interleaved (A B, A B, ...), with
/// a progress line naming `scenario` and `planned` seconds of measurement per step. Stops at
/// the first error.
pub(super) fn repetitions<S>(
    scenario: &str,
    configs: &[String],
    reps: usize,
    planned: f64,
    mut one: impl FnMut(&str, usize, &Progress) -> Result<S>,
) -> Result<Vec<S>> {
    let steps: Vec<(usize, &String)> = (1..=reps)
        .flat_map(|r| configs.iter().map(move |c| (r, c)))
        .collect();
    let progress = Progress::new(vec![planned; steps.len()]);
    let mut samples = Vec::with_capacity(steps.len());
    for (rep, c) in steps {
        progress.step(&format!(
            "{scenario} scenario, {c}, repetition {rep}/{reps}"
        ));
        let r = one(c, rep, &progress);
        progress.step_done();
        match r {
            Ok(s) => samples.push(s),
            Err(e) => {
                progress.finish();
                return Err(e);
            }
        }
    }
    progress.finish();
    Ok(samples)
}

/// Writes `scenario-NAME.md` and `scenario-NAME.json` to `out` and says so.
pub(super) fn write_run(out: &Path, name: &str, md: &str, json: &str, seconds: f64) -> Result<()> {
    for (ext, text) in [("md", md), ("json", json)] {
        let p = out.join(format!("scenario-{name}.{ext}"));
        std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))?;
    }
    eprintln!(
        "pvnet bench: {seconds:.0} s; wrote {}/scenario-{name}.md and scenario-{name}.json",
        out.display()
    );
    Ok(())
}

/// Runs `params.scenario` over `configs` and writes `scenario-NAME.md` and `.json` to `out`.
pub fn run(configs: Vec<String>, params: Params, out: &Path) -> Result<ScenarioRun> {
    let started = Started::now();
    let name = params.scenario.name();
    let samples = repetitions(
        name,
        &configs,
        params.reps,
        params.planned(),
        |c, rep, pr| run_one(c, rep, &params, pr),
    )?;
    let run = ScenarioRun {
        scenario: params.scenario,
        header: started.finish(),
        params,
        configs,
        samples,
    };
    let table = table(&run);
    println!("{}", table.text());
    let json = serde_json::to_string_pretty(&run)?;
    write_run(
        out,
        name,
        &markdown(&run, &table),
        &json,
        run.header.wall_seconds,
    )?;
    Ok(run)
}

/// `config` as a testbed of two guests (`NAME/g2`) with the port's settings: its name and
/// its daemon's configuration.
pub(super) fn two_guests(
    config: &str,
    port: &configs::PortParams,
) -> Result<(String, crate::config::DaemonConfig)> {
    let two = format!("{config}{}2", configs::GUESTS_SUFFIX);
    let cfg = port.apply(configs::daemon_config(&two)?);
    Ok((two, cfg))
}

/// One repetition of `config` on a fresh two-guest testbed.
fn run_one(config: &str, rep: usize, p: &Params, progress: &Progress) -> Result<ScenarioSample> {
    let t0 = Instant::now();
    let (two, cfg) = two_guests(config, &p.port)?;
    let quiet_first = rep % 2 == 1;
    let ((quiet, loaded), info) =
        testbed::with_testbed(&cfg, &two, progress, |info| match p.scenario {
            Scenario::Neighbour => legs(quiet_first, |loaded| {
                neighbour_leg(info, p, loaded, progress)
            }),
            Scenario::Mixed => legs(quiet_first, |loaded| mixed_leg(info, p, loaded, progress)),
        })?;
    Ok(ScenarioSample {
        config: config.to_string(),
        rep,
        run_id: info.id,
        quiet,
        loaded,
        wall_seconds: t0.elapsed().as_secs_f64(),
    })
}

/// Runs the quiet (`false`) and the loaded (`true`) leg in the order asked; returns (quiet,
/// loaded).
fn legs(quiet_first: bool, mut f: impl FnMut(bool) -> Result<Leg>) -> Result<(Leg, Leg)> {
    if quiet_first {
        let q = f(false)?;
        Ok((q, f(true)?))
    } else {
        let l = f(true)?;
        Ok((f(false)?, l))
    }
}

/// The CPU-hungry neighbour: `pvnet perf burn` in guest 1's namespace on the receiving CPU.
fn start_burner(exe: &Path, info: &RunInfo) -> Result<Guard> {
    let ns = Netns::open(&info.guest_ns[1])?;
    let c = child::pinned(ns.command(exe), RX_CPU)
        .args(["perf", "burn"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("starting the CPU-hungry neighbour (pvnet perf burn)")?;
    Ok(Guard(c))
}

/// The pids charged to guest 0 and guest 1: their netfront processes and `extra`.
fn guest_pids(info: &RunInfo, extra0: &[i32], extra1: &[i32]) -> (Vec<i32>, Vec<i32>) {
    let mut g0 = vec![info.guest_pids[0]];
    g0.extend_from_slice(extra0);
    let mut g1 = vec![info.guest_pids[1]];
    g1.extend_from_slice(extra1);
    (g0, g1)
}

/// Fills the CPU fractions of `leg` from two samples of the receiving CPU taken with
/// `g0` then `g1`'s pids.
fn cpu_shares(leg: &mut Leg, a: &cpu::CpuSample, b: &cpu::CpuSample, g0: &[i32], g1: &[i32]) {
    let d = cpu::delta(a, b);
    let ns = |pids: &[i32]| -> u64 {
        (d.pid_ns.iter())
            .filter(|(p, _)| pids.contains(p))
            .map(|(_, n)| *n)
            .sum()
    };
    let total = d.total_ns.max(1) as f64;
    leg.cpu_busy = d.utilization();
    leg.guest0_cpu = (ns(g0) as f64 / total).min(1.0);
    leg.guest1_cpu = (ns(g1) as f64 / total).min(1.0);
}

/// The remote host's stream into guest `to`.
fn stream_cmd(
    exe: &Path,
    remote: &Netns,
    to: &str,
    seconds: f64,
    msg_size: usize,
    pace_mbps: Option<u64>,
) -> std::process::Command {
    let mut c = measure::builtin_stream_cmd(exe, remote, TX_CPU, to, PORT, seconds, msg_size);
    if let Some(r) = pace_mbps {
        c.args(["--pace", &r.to_string()]);
    }
    c
}

fn take_stream(leg: &mut Leg, out: &std::process::Output) {
    let mut s = Sample::default();
    measure::parse_builtin_stream(out, &mut s);
    leg.throughput_mbps = s.throughput_mbps;
    leg.bytes = s.bytes;
    leg.errors.extend(s.errors);
}

fn take_rr(leg: &mut Leg, r: Result<measure::RrResult, String>) {
    match r {
        Ok(r) => {
            leg.rr = Some(Rr {
                tps: r.tps,
                p50_us: r.p50_us,
                p90_us: r.p90_us,
                p99_us: r.p99_us,
                transactions: r.transactions,
            })
        }
        Err(e) => leg.errors.push(e),
    }
}

/// One leg of the neighbour scenario: a stream into guest 0, then TCP_RR against it; with the
/// burner in guest 1 when `loaded`.
fn neighbour_leg(info: &RunInfo, p: &Params, loaded: bool, progress: &Progress) -> Result<Leg> {
    let exe = std::env::current_exe()?;
    let g0 = Netns::open(&info.guest_ns[0])?;
    let remote = Netns::open(&info.remote_ns)?;
    let addr = &info.guest_addrs[0];
    let burner = if loaded {
        Some(start_burner(&exe, info)?)
    } else {
        None
    };
    let burner_pid: Vec<i32> = burner.iter().map(Guard::pid).collect();
    let mut leg = Leg::default();
    let mut server = measure::start_builtin_server(&exe, &g0, RX_CPU, true)?;
    measure::wait_listening(&g0, &mut server)?;
    let (pids0, pids1) = guest_pids(info, &[server.pid()], &burner_pid);
    let all: Vec<i32> = pids0.iter().chain(&pids1).copied().collect();
    progress.phase(
        &format!(
            "stream into guest 0{}",
            if loaded {
                " beside the neighbour"
            } else {
                ", alone"
            }
        ),
        p.stream_seconds,
    );
    let mut cmd = [stream_cmd(
        &exe,
        &remote,
        addr,
        p.stream_seconds,
        p.msg_size,
        None,
    )];
    let (mut before, mut after) = (None, None);
    let outs = child::outputs_started(
        &mut cmd,
        "the stream sender",
        Duration::from_secs_f64(p.stream_seconds + 30.0),
        |_| {
            before = Some(cpu::sample(RX_CPU, &all)?);
            Ok(())
        },
        || {
            after = Some(cpu::sample(RX_CPU, &all)?);
            Ok(())
        },
    )?;
    drop(server);
    take_stream(&mut leg, &outs[0]);
    if let (Some(a), Some(b)) = (&before, &after) {
        cpu_shares(&mut leg, a, b, &pids0, &pids1);
    }
    interrupt::check()?;
    let mut server = measure::start_builtin_server(&exe, &g0, RX_CPU, true)?;
    measure::wait_listening(&g0, &mut server)?;
    progress.phase("TCP_RR against guest 0", p.rr_seconds);
    take_rr(
        &mut leg,
        measure::rr_client(&remote, &exe, addr, p.rr_seconds)?,
    );
    drop(server);
    if let Some(mut b) = burner {
        if let Some(why) = b.exited() {
            leg.errors
                .push(format!("the neighbour's burner exited early ({why})"));
        }
    }
    Ok(leg)
}

/// One leg of the mixed scenario: TCP_RR against guest 1 for `--duration` s; when `loaded`,
/// while guest 0 receives a bulk stream.
fn mixed_leg(info: &RunInfo, p: &Params, loaded: bool, progress: &Progress) -> Result<Leg> {
    let exe = std::env::current_exe()?;
    let g0 = Netns::open(&info.guest_ns[0])?;
    let g1 = Netns::open(&info.guest_ns[1])?;
    let remote = Netns::open(&info.remote_ns)?;
    let mut leg = Leg::default();
    let mut rr_server = measure::start_builtin_server(&exe, &g1, RX_CPU, true)?;
    measure::wait_listening(&g1, &mut rr_server)?;
    let mut stream_server = None;
    if loaded {
        let mut s = measure::start_builtin_server(&exe, &g0, RX_CPU, true)?;
        measure::wait_listening(&g0, &mut s)?;
        stream_server = Some(s);
    }
    let extra0: Vec<i32> = stream_server.iter().map(Guard::pid).collect();
    let (pids0, pids1) = guest_pids(info, &extra0, &[rr_server.pid()]);
    let all: Vec<i32> = pids0.iter().chain(&pids1).copied().collect();
    progress.phase(
        &format!(
            "TCP_RR against guest 1{}",
            if loaded {
                " beside a stream into guest 0"
            } else {
                ", alone"
            }
        ),
        p.stream_seconds + if loaded { 2.0 * LEAD_SECONDS } else { 0.0 },
    );
    let rr_seconds = p.stream_seconds;
    let stream_seconds = rr_seconds + 2.0 * LEAD_SECONDS;
    let (rr, cpu_ab, stream_out) = std::thread::scope(|s| -> Result<_> {
        let stream = loaded.then(|| {
            let mut cmd = stream_cmd(
                &exe,
                &remote,
                &info.guest_addrs[0],
                stream_seconds,
                p.msg_size,
                p.stream_pace_mbps,
            );
            s.spawn(move || {
                child::output(
                    &mut cmd,
                    "the stream sender",
                    Duration::from_secs_f64(stream_seconds + 30.0),
                )
            })
        });
        if loaded {
            std::thread::sleep(Duration::from_secs_f64(LEAD_SECONDS));
        }
        let a = cpu::sample(RX_CPU, &all);
        let rr = measure::rr_client(&remote, &exe, &info.guest_addrs[1], rr_seconds);
        let b = cpu::sample(RX_CPU, &all);
        let out = match stream {
            Some(h) => Some(
                h.join()
                    .map_err(|_| anyhow::anyhow!("the stream thread panicked"))??,
            ),
            None => None,
        };
        Ok((rr?, a.ok().zip(b.ok()), out))
    })?;
    drop(rr_server);
    drop(stream_server);
    take_rr(&mut leg, rr);
    if let Some(out) = &stream_out {
        take_stream(&mut leg, out);
    }
    if let Some((a, b)) = &cpu_ab {
        cpu_shares(&mut leg, a, b, &pids0, &pids1);
    }
    Ok(leg)
}

fn fmt(x: Option<f64>, decimals: usize) -> String {
    match x {
        Some(x) if x.is_finite() => format!("{x:.decimals$}"),
        _ => "—".to_string(),
    }
}

/// One figure of a repetition (None where it does not apply or the leg failed).
type Fig<'a> = &'a dyn Fn(&ScenarioSample) -> Option<f64>;

/// The scenario's table: rows = figures, columns = configurations (flush policies).
pub fn table(run: &ScenarioRun) -> Table {
    let cols = &run.configs;
    let row = |label: &str, f: Fig, d: usize| -> (String, Vec<String>) {
        (
            label.to_string(),
            cols.iter().map(|c| fmt(run.med(c, f), d)).collect(),
        )
    };
    let change = |label: &str, a: Fig, b: Fig| -> (String, Vec<String>) {
        (
            label.to_string(),
            cols.iter()
                .map(|c| fmt(change_pct(run.med(c, a), run.med(c, b)), 1))
                .collect(),
        )
    };
    let vs_xen = |label: &str, f: Fig| -> Option<(String, Vec<String>)> {
        let xen = cols.iter().find(|c| *c == "xen")?;
        let base = run.med(xen, f);
        Some((
            label.to_string(),
            cols.iter()
                .map(|c| fmt(change_pct(base, run.med(c, f)), 1))
                .collect(),
        ))
    };
    let pct = |x: f64| Some(x * 100.0);
    let mut rows = Vec::new();
    let title = match run.scenario {
        Scenario::Neighbour => {
            rows.push(row(
                "stream into guest 0 alone (Mbit/s)",
                &|s| Some(s.quiet.throughput_mbps),
                0,
            ));
            rows.push(row(
                "  beside the neighbour (Mbit/s)",
                &|s| Some(s.loaded.throughput_mbps),
                0,
            ));
            rows.push(change(
                "  change %",
                &|s| Some(s.quiet.throughput_mbps),
                &|s| Some(s.loaded.throughput_mbps),
            ));
            rows.push(row(
                "TCP_RR of guest 0 alone (trans/s)",
                &|s| s.quiet.rr.map(|r| r.tps),
                0,
            ));
            rows.push(row(
                "  beside the neighbour (trans/s)",
                &|s| s.loaded.rr.map(|r| r.tps),
                0,
            ));
            rows.push(change("  change %", &|s| s.quiet.rr.map(|r| r.tps), &|s| {
                s.loaded.rr.map(|r| r.tps)
            }));
            rows.push(row(
                "TCP_RR p99 alone (µs)",
                &|s| s.quiet.rr.map(|r| r.p99_us),
                0,
            ));
            rows.push(row(
                "  beside the neighbour (µs)",
                &|s| s.loaded.rr.map(|r| r.p99_us),
                0,
            ));
            rows.push(row(
                "guest 0's CPU 0 share alone %",
                &|s| pct(s.quiet.guest0_cpu),
                1,
            ));
            rows.push(row(
                "  beside the neighbour %",
                &|s| pct(s.loaded.guest0_cpu),
                1,
            ));
            rows.push(row(
                "neighbour's CPU 0 share %",
                &|s| pct(s.loaded.guest1_cpu),
                1,
            ));
            rows.extend(vs_xen(
                "stream beside the neighbour, change vs xen %",
                &|s| Some(s.loaded.throughput_mbps),
            ));
            "Neighbour: guest 0's stream and TCP_RR, alone and beside a guest burning the receiving CPU (medians)"
        }
        Scenario::Mixed => {
            for (label, loaded) in [("alone", false), ("beside the stream", true)] {
                let rr = move |s: &ScenarioSample| if loaded { s.loaded.rr } else { s.quiet.rr };
                rows.push(row(
                    &format!("guest 1 TCP_RR {label}: p50 (µs)"),
                    &move |s| rr(s).map(|r| r.p50_us),
                    1,
                ));
                rows.push(row("  p90 (µs)", &move |s| rr(s).map(|r| r.p90_us), 1));
                rows.push(row("  p99 (µs)", &move |s| rr(s).map(|r| r.p99_us), 1));
                rows.push(row("  trans/s", &move |s| rr(s).map(|r| r.tps), 0));
            }
            rows.push(change(
                "p99 change beside the stream %",
                &|s| s.quiet.rr.map(|r| r.p99_us),
                &|s| s.loaded.rr.map(|r| r.p99_us),
            ));
            rows.extend(vs_xen("p50 beside the stream, change vs xen %", &|s| {
                s.loaded.rr.map(|r| r.p50_us)
            }));
            rows.extend(vs_xen("p99 beside the stream, change vs xen %", &|s| {
                s.loaded.rr.map(|r| r.p99_us)
            }));
            rows.push(row(
                "guest 0's bulk stream (Mbit/s)",
                &|s| Some(s.loaded.throughput_mbps),
                0,
            ));
            rows.push(row(
                "CPU 0 busy beside the stream %",
                &|s| pct(s.loaded.cpu_busy),
                1,
            ));
            "Mixed host: guest 1's TCP_RR latency, alone and while guest 0 receives a bulk stream (medians)"
        }
    };
    Table {
        title: title.to_string(),
        columns: cols.clone(),
        rows,
    }
}

/// `scenario-NAME.md`: how it was run, the table, and any errors.
pub fn markdown(run: &ScenarioRun, table: &Table) -> String {
    let p = &run.params;
    let mut s = format!(
        "# pvnet bench --scenario {}\n\n{}- configurations: {}; {} repetition(s) of each, interleaved, each on a fresh two-guest testbed, the quiet and loaded legs alternating which goes first\n",
        p.scenario.name(),
        run.header.markdown(),
        (run.configs.iter())
            .map(|c| format!("`{c}` ({})", configs::describe(c)))
            .collect::<Vec<_>>()
            .join(", "),
        p.reps
    );
    s.push_str(&match p.scenario {
        Scenario::Neighbour => format!(
            "- per leg: a {} s stream ({}-byte sends) into guest 0, then {} s of TCP_RR against it; loaded: `pvnet perf burn` in guest 1's namespace on CPU {RX_CPU} for the whole leg\n",
            p.stream_seconds, p.msg_size, p.rr_seconds
        ),
        Scenario::Mixed => format!(
            "- per leg: {} s of TCP_RR (1-byte request and response) against guest 1; loaded: guest 0 receives a bulk stream ({}-byte sends{}) that starts {LEAD_SECONDS} s before the TCP_RR and ends {LEAD_SECONDS} s after it\n",
            p.stream_seconds,
            p.msg_size,
            p.stream_pace_mbps.map_or(String::new(), |r| format!(
                ", paced at {r} Mbit/s: the same bytes under every policy"
            ))
        ),
    });
    s.push_str(&format!(
        "- receiving CPU {RX_CPU}: driver domain, both guests; CPU {TX_CPU}: the remote host's senders and TCP_RR client\n\n{}\n",
        table.markdown()
    ));
    let errors: Vec<String> = (run.samples.iter())
        .flat_map(|x| {
            (x.quiet.errors.iter().map(|e| ("quiet", e)))
                .chain(x.loaded.errors.iter().map(|e| ("loaded", e)))
                .map(move |(l, e)| format!("- {} rep {} ({l}): {e}", x.config, x.rep))
        })
        .collect();
    push_errors(&mut s, &errors);
    s
}

/// Appends an "Errors" section listing `errors` to a scenario's markdown (nothing when none).
pub(super) fn push_errors(md: &mut String, errors: &[String]) {
    if !errors.is_empty() {
        md.push_str("\n## Errors\n\n");
        md.push_str(&errors.join("\n"));
        md.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_between_ranks() {
        assert_eq!(percentile(&[], 0.5), None);
        assert_eq!(percentile(&[f64::NAN], 0.5), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        let v: Vec<f64> = (1..=101).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&v, 0.9), Some(91.0));
        assert_eq!(percentile(&v, 0.99), Some(100.0));
        assert_eq!(percentile(&v, 1.0), Some(101.0));
        assert_eq!(percentile(&v, 7.0), Some(101.0), "q is clamped");
        assert_eq!(percentile(&[10.0, 20.0], 0.25), Some(12.5));
        assert_eq!(change_pct(Some(200.0), Some(150.0)), Some(-25.0));
        assert_eq!(change_pct(Some(0.0), Some(1.0)), None);
        assert_eq!(change_pct(None, Some(1.0)), None);
    }

    #[test]
    fn scenario_configurations_are_pv_flush_policies() {
        assert_eq!(
            parse_configs(DEFAULT_CONFIGS).unwrap(),
            ["xen", "lro", "da", "timeout", "adaptive"]
        );
        assert_eq!(parse_configs("every:4, xen").unwrap(), ["every:4", "xen"]);
        let err = |s: &str| format!("{:#}", parse_configs(s).unwrap_err());
        for bad in ["linux", "relay", "hvm", "map", "route", "linux-gro"] {
            assert!(err(bad).contains("not one"), "{bad}: {}", err(bad));
        }
        for bad in ["xen/g2", "adaptive@tx"] {
            assert!(
                err(bad).contains("without @tx or /gN"),
                "{bad}: {}",
                err(bad)
            );
        }
        assert!(err("warp").contains("unknown configuration"));
        assert!(parse_configs("").is_err());
    }

    fn sample(config: &str, rep: usize, q: f64, l: f64) -> ScenarioSample {
        let rr = |p99: f64| {
            Some(Rr {
                tps: 1e6 / p99,
                p50_us: p99 / 2.0,
                p90_us: p99 * 0.8,
                p99_us: p99,
                transactions: 100,
            })
        };
        ScenarioSample {
            config: config.into(),
            rep,
            quiet: Leg {
                throughput_mbps: q,
                rr: rr(q),
                ..Leg::default()
            },
            loaded: Leg {
                throughput_mbps: l,
                rr: rr(l),
                guest1_cpu: 0.5,
                ..Leg::default()
            },
            ..ScenarioSample::default()
        }
    }

    #[test]
    fn the_header_gives_the_memory_probe_when_it_ran() {
        let mut h = RunHeader {
            started_utc: "2026-11-30 05:00:00".into(),
            revision: "abc".into(),
            wall_seconds: 12.0,
            loadavg_start: "1.0 1.0 1.0".into(),
            loadavg_end: "2.0 1.0 1.0".into(),
            memory_probe: serde_json::json!({"start": null, "end": null}),
        };
        let md = h.markdown();
        assert!(md.ends_with("at the end: 2.0 1.0 1.0\n"), "{md}");
        h.memory_probe = serde_json::json!({
            "start": {"cpu": 0, "random_read_ns_8mib": 160.0, "random_read_ns_64mib": 190.0, "cache_mib": 2},
            "end": {"cpu": 0, "random_read_ns_8mib": 130.0, "random_read_ns_64mib": 170.0, "cache_mib": 3},
        });
        let md = h.markdown();
        assert!(
            md.contains("at the end: 2.0 1.0 1.0\n- memory seen from CPU 0"),
            "{md}"
        );
        assert!(
            md.contains("cache answering at cache speed: 2 → 3 MiB"),
            "{md}"
        );
    }

    fn run_of(scenario: Scenario, samples: Vec<ScenarioSample>) -> ScenarioRun {
        ScenarioRun {
            scenario,
            header: RunHeader::default(),
            params: Params {
                scenario,
                reps: 3,
                stream_seconds: 1.0,
                rr_seconds: 1.0,
                msg_size: 1,
                stream_pace_mbps: None,
                port: configs::PortParams {
                    ring_frames: None,
                    port_queues: None,
                    ring_prefetch: None,
                    budget: Some(1),
                    mtu: 1500,
                },
            },
            configs: vec!["xen".into(), "adaptive".into()],
            samples,
        }
    }

    #[test]
    fn tables_give_medians_and_changes_per_policy() {
        let samples = vec![
            sample("xen", 1, 100.0, 50.0),
            sample("adaptive", 1, 200.0, 150.0),
            sample("xen", 2, 300.0, 70.0),
            sample("adaptive", 2, 400.0, 50.0),
            sample("xen", 3, 200.0, 60.0),
            sample("adaptive", 3, 300.0, 100.0),
        ];
        let run = run_of(Scenario::Neighbour, samples.clone());
        assert_eq!(
            run.med("xen", &|s| Some(s.quiet.throughput_mbps)),
            Some(200.0)
        );
        let t = table(&run);
        assert_eq!(t.columns, ["xen", "adaptive"]);
        let cell = |label: &str| {
            t.rows
                .iter()
                .find(|(l, _)| l == label)
                .unwrap_or_else(|| panic!("{label} in {t:?}"))
                .1
                .clone()
        };
        assert_eq!(cell("stream into guest 0 alone (Mbit/s)"), ["200", "300"]);
        assert_eq!(cell("  beside the neighbour (Mbit/s)"), ["60", "100"]);
        // The change of the medians: 200 → 60 is -70 %, 300 → 100 is -66.7 %.
        assert_eq!(t.rows[2].1, ["-70.0", "-66.7"]);
        assert_eq!(cell("neighbour's CPU 0 share %"), ["50.0", "50.0"]);
        assert_eq!(
            cell("stream beside the neighbour, change vs xen %"),
            ["0.0", "66.7"]
        );
        let m = table(&run_of(Scenario::Mixed, samples));
        let p99 = m
            .rows
            .iter()
            .find(|(l, _)| l == "p99 beside the stream, change vs xen %")
            .unwrap();
        assert_eq!(p99.1, ["0.0", "66.7"]);
        assert!(m
            .rows
            .iter()
            .any(|(l, c)| l == "  p90 (µs)" && c == &["160.0", "240.0"]));
        assert!(markdown(&run_of(Scenario::Mixed, vec![]), &m)
            .contains("| p99 change beside the stream % |"));
    }
}
