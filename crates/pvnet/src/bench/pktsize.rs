//! `pvnet bench --sweep pktsize`: what each grant mechanism costs per packet, by packet size
//! (HP Labs, Xen Summit 2006: "Cost of page flip" and the break-even packet size of copying
//! against page flipping, 1280 B with dom0 and the guest on different CPUs, 480 B on one).
//!
//! # Method
//!
//! For every placement asked for and every mechanism of [`Mechanism::ALL`] (a mechanism added
//! there is swept without a change here), one testbed: one guest, netback running that
//! mechanism, every MTU at [`SWEEP_MTU`] (the most a TAP takes) so that every datagram size up
//! to [`MAX_SIZE`] is one frame on every link (sizes up to 1472 B would be one frame at MTU
//! 1500 too; the MTU changes nothing for a frame that fits). On it, for each size, the remote
//! host sends a UDP stream (`pvnet perf udp-stream`, every datagram verified by the receiver
//! in the guest) at one fixed offered load in datagrams per second, below saturation at every
//! size so that neither the sender nor the path limits it, and the CPUs are sampled around
//! the stream. Cycles per packet are CPU time × TSC rate / datagrams received:
//!
//! - **guest**: the CPU time of the guest's process (its netfront; its TAP writes run the
//!   guest kernel's receive path) and of the receiver in it;
//! - **driver domain**: the CPU time of the daemon (every thread: the data path, netback,
//!   its system calls);
//! - **total**: their sum.
//!
//! Per-process CPU time, not a CPU's busy time: on a machine shared with other work a CPU's
//! busy time is mostly someone else's. What is left out is softirq work the kernel charges
//! to whatever task it interrupted (the wire's receive path into the physical port's ring).
//!
//! Placements ([`Placement`]), with the machine's two CPUs ([`DD_CPU`], [`OTHER_CPU`]):
//! - `same`: driver domain and guest on CPU 0; the sender alone on CPU 1;
//! - `split`: driver domain on CPU 0, guest on CPU 1; the sender shares CPU 0 with the driver
//!   domain (the wire's receive path runs there in either placement; the offered load is low,
//!   so the sender takes a small share of the CPU).
//!
//! The **break-even size** of two mechanisms is where their total cycles per packet cross,
//! interpolated linearly between the two sizes around the first change of sign of the
//! difference ([`crossing`]). The pairs ([`pairs`]): each mechanism against `flip` when there
//! is one (the seed's question), otherwise every pair of the mechanisms there are.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use pvnet_dd::netback::Mechanism;
use pvnet_perf::{cpu, Rate, UdpOutcome};
use pvnet_testbed::Netns;
use serde::Serialize;

use super::child::{self, Guard};
use super::measure::{start_builtin_server_on, wait_listening_on, PORT};
use super::progress::Progress;
use super::{configs, interrupt, testbed, BenchArgs};
use crate::config::DaemonConfig;

/// The default sizes (UDP payload bytes): 64 B to the largest one-frame datagram.
pub const DEFAULT_SIZES: &str = "64,128,256,512,1024,1280,1472,2048,4096,8192,16384,32768,65493";
/// The default offered load: low enough that a 64 KiB datagram stream stays below saturation
/// on a shared two-CPU machine.
pub const DEFAULT_RATE: &str = "2kpps";
/// The largest datagram `flip` carries: its frame (Ethernet, IPv4 and UDP headers) and the
/// port's virtio-net header fit one page.
pub const FLIP_MAX_SIZE: usize = 4096 - 12 - 14 - 28;
/// The MTU of every link in the sweep: the most a TAP takes.
pub const SWEEP_MTU: u32 = 65521;
/// The largest UDP payload that is one frame at [`SWEEP_MTU`] (less 20 B of IPv4 and 8 B of
/// UDP header).
pub const MAX_SIZE: usize = SWEEP_MTU as usize - 28;
/// The driver domain's CPU, and the other one.
pub const DD_CPU: usize = configs::RX_CPU;
pub const OTHER_CPU: usize = configs::TX_CPU;
/// The seed's break-even sizes of copy against flip (bytes).
pub const SEED_SPLIT: f64 = 1280.0;
pub const SEED_SAME: f64 = 480.0;
/// A point that lost more than this fraction of its datagrams was above saturation.
const LOSS_LIMIT: f64 = 0.01;

/// Where the driver domain and the guest run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    Same,
    Split,
}

impl Placement {
    pub fn name(self) -> &'static str {
        match self {
            Placement::Same => "same",
            Placement::Split => "split",
        }
    }

    /// The guest's CPU.
    fn guest_cpu(self) -> usize {
        match self {
            Placement::Same => DD_CPU,
            Placement::Split => OTHER_CPU,
        }
    }

    /// The sender's CPU.
    fn sender_cpu(self) -> usize {
        match self {
            Placement::Same => OTHER_CPU,
            Placement::Split => DD_CPU,
        }
    }

    /// The seed's break-even size of copy against flip for this placement.
    pub fn seed_break_even(self) -> f64 {
        match self {
            Placement::Same => SEED_SAME,
            Placement::Split => SEED_SPLIT,
        }
    }
}

/// Parses `--placement`: `same`, `split`, or `both` (the default).
pub fn parse_placement(s: &str) -> Result<Vec<Placement>> {
    Ok(match s.trim() {
        "same" => vec![Placement::Same],
        "split" => vec![Placement::Split],
        "both" => vec![Placement::Same, Placement::Split],
        other => bail!(
            "--placement {other:?}: want same (driver domain and guest on one CPU), split (on different CPUs) or both"
        ),
    })
}

/// Parses the sizes of `--sweep pktsize` (`--sweep-values`): UDP payload bytes, 64 to
/// [`MAX_SIZE`], comma-separated; sorted, duplicates dropped.
pub fn parse_sizes(s: &str) -> Result<Vec<usize>> {
    let mut v = Vec::new();
    for x in s.split(',').map(str::trim).filter(|x| !x.is_empty()) {
        match x.parse::<usize>() {
            Ok(n) if (64..=MAX_SIZE).contains(&n) => v.push(n),
            _ => bail!(
                "--sweep-values: {x:?} is not a packet size in bytes between 64 and {MAX_SIZE} (the largest UDP payload that is one frame at MTU {SWEEP_MTU})"
            ),
        }
    }
    v.sort_unstable();
    v.dedup();
    if v.len() < 2 {
        bail!("--sweep-values: a packet-size sweep needs at least two sizes, got {s:?}");
    }
    Ok(v)
}

/// Parses `--rate` of the sweep: an offered load in datagrams per second (`2kpps`); a bit rate
/// would change the packet rate with the size, which this sweep holds fixed.
pub fn parse_rate(s: &str) -> Result<f64> {
    match s.parse::<Rate>() {
        Ok(Rate::DatagramsPerSec(d)) => Ok(d),
        Ok(Rate::BitsPerSec(_)) => bail!(
            "--rate {s:?}: the packet-size sweep holds the packet rate fixed: give datagrams per second, e.g. 2kpps"
        ),
        Err(e) => bail!("--rate: {e}"),
    }
}

/// One size of one mechanism in one placement.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    pub placement: Placement,
    pub mechanism: String,
    /// UDP payload bytes.
    pub size: usize,
    pub offered_pps: f64,
    pub sent: u64,
    /// Datagrams that arrived verified (`unique`), and those lost or corrupt.
    pub received: u64,
    pub lost: u64,
    pub corrupt: u64,
    pub dd_cycles: f64,
    pub guest_cycles: f64,
    pub total_cycles: f64,
    /// Least and most total cycles per packet over the repetitions.
    pub total_min: f64,
    pub total_max: f64,
    /// Busy fraction of the driver domain's CPU and of the other one.
    pub dd_cpu_busy: f64,
    pub other_cpu_busy: f64,
    /// Lost more than 1 %: above saturation, not a per-packet cost.
    pub saturated: bool,
    pub errors: Vec<String>,
}

/// Where two curves cross.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Crossing {
    /// The interpolated size of the first crossing; None when one is cheaper at every size.
    pub at: Option<f64>,
    /// The curve that is cheaper at the smallest size where they differ (`a` or `b`; None
    /// when they never differ).
    pub cheaper_small: Option<char>,
    /// How many times the curves cross over the sizes measured.
    pub crossings: usize,
}

/// Where curve `a` and curve `b` (values at sizes `xs`, ascending) cross: the first size
/// interval over which `a - b` changes sign, interpolated linearly in size. Curves equal at
/// a measured size and on different sides around it cross there; curves that only touch do
/// not cross.
pub fn crossing(xs: &[f64], a: &[f64], b: &[f64]) -> Crossing {
    let d: Vec<f64> = a.iter().zip(b).map(|(a, b)| a - b).collect();
    let n = d.len().min(xs.len());
    let sign = |v: f64| {
        if v > 0.0 {
            1
        } else if v < 0.0 {
            -1
        } else {
            0
        }
    };
    let mut at = None;
    let mut crossings = 0;
    // The last size with a nonzero difference.
    let mut prev: Option<usize> = None;
    for i in 0..n {
        if sign(d[i]) == 0 {
            continue;
        }
        if let Some(j) = prev.filter(|&j| sign(d[j]) != sign(d[i])) {
            crossings += 1;
            // Adjacent sizes: interpolate; zeros in between: the first of them.
            let x = if j + 1 == i {
                xs[j] + (xs[i] - xs[j]) * d[j] / (d[j] - d[i])
            } else {
                xs[j + 1]
            };
            at.get_or_insert(x);
        }
        prev = Some(i);
    }
    let cheaper_small = match d[..n].iter().map(|&v| sign(v)).find(|&s| s != 0) {
        Some(1) => Some('b'),
        Some(-1) => Some('a'),
        _ => None,
    };
    Crossing {
        at,
        cheaper_small,
        crossings,
    }
}

/// The pairs whose break-even size the report gives: every mechanism against `flip` when
/// `flip` is among `names`, otherwise every pair of them, in order.
pub fn pairs(names: &[&str]) -> Vec<(String, String)> {
    if names.contains(&"flip") {
        return names
            .iter()
            .filter(|n| **n != "flip")
            .map(|n| (n.to_string(), "flip".to_string()))
            .collect();
    }
    let mut out = Vec::new();
    for (i, a) in names.iter().enumerate() {
        for b in &names[i + 1..] {
            out.push((a.to_string(), b.to_string()));
        }
    }
    out
}

/// A break-even size of one pair in one placement.
#[derive(Clone, Debug, Serialize)]
pub struct BreakEven {
    pub placement: Placement,
    pub a: String,
    pub b: String,
    pub crossing: Crossing,
}

/// The break-even sizes of every pair in every placement of `points` (saturated points left
/// out: their cost is not per packet).
pub fn break_evens(points: &[Point], placements: &[Placement]) -> Vec<BreakEven> {
    let mut out = Vec::new();
    let names: Vec<&str> = Mechanism::ALL.iter().map(|m| m.name()).collect();
    for &pl in placements {
        for (a, b) in pairs(&names) {
            let curve = |m: &str| -> Vec<(usize, f64)> {
                points
                    .iter()
                    .filter(|p| p.placement == pl && p.mechanism == m && !p.saturated)
                    .filter(|p| p.received > 0)
                    .map(|p| (p.size, p.total_cycles))
                    .collect()
            };
            let (ca, cb) = (curve(&a), curve(&b));
            // Sizes both have.
            let both: Vec<(f64, f64, f64)> = ca
                .iter()
                .filter_map(|&(s, va)| {
                    cb.iter()
                        .find(|&&(t, _)| t == s)
                        .map(|&(_, vb)| (s as f64, va, vb))
                })
                .collect();
            if both.len() < 2 {
                continue;
            }
            let xs: Vec<f64> = both.iter().map(|t| t.0).collect();
            let va: Vec<f64> = both.iter().map(|t| t.1).collect();
            let vb: Vec<f64> = both.iter().map(|t| t.2).collect();
            out.push(BreakEven {
                placement: pl,
                a,
                b,
                crossing: crossing(&xs, &va, &vb),
            });
        }
    }
    out
}

/// Runs the sweep and writes `pktsize.json`, `pktsize.md` and `pktsize.svg` into `out`.
pub fn run(args: &BenchArgs, out: &Path) -> Result<()> {
    let sizes = parse_sizes(args.sweep_values.as_deref().unwrap_or(DEFAULT_SIZES))?;
    let placements = parse_placement(args.placement.as_deref().unwrap_or("both"))?;
    let pps = parse_rate(args.rate.as_deref().unwrap_or(DEFAULT_RATE))?;
    let seconds = args.duration.unwrap_or(if args.quick { 1.0 } else { 3.0 });
    let reps = args.reps.unwrap_or(if args.quick { 1 } else { 3 });
    if reps == 0 {
        bail!("--reps must be at least 1");
    }
    let tsc_hz = cpu::tsc_hz();
    let mechs: Vec<Mechanism> = Mechanism::ALL.to_vec();
    let planned =
        vec![(seconds + 0.5) * (sizes.len() * reps) as f64 + 3.0; placements.len() * mechs.len()];
    let progress = Progress::new(planned);
    let t0 = Instant::now();
    let others = crate::rundir::live_runs();
    let probes = super::machine::Probes::start(DD_CPU);
    let mut points = Vec::new();
    for &pl in &placements {
        for &m in &mechs {
            progress.step(&format!("{} placement, {m}", pl.name()));
            let r = sweep_one((pl, m), &sizes, (pps, seconds, reps), tsc_hz, &progress);
            progress.step_done();
            match r {
                Ok(mut p) => points.append(&mut p),
                Err(e) => {
                    progress.finish();
                    return Err(e);
                }
            }
        }
    }
    progress.finish();
    let be = break_evens(&points, &placements);
    let wall_seconds = t0.elapsed().as_secs_f64();
    let report = Report {
        tool: "pvnet bench --sweep pktsize",
        revision: super::machine::REVISION.to_string(),
        wall_seconds,
        memory_probe: probes.finish(),
        tsc_hz,
        offered_pps: pps,
        seconds,
        reps,
        mtu: SWEEP_MTU,
        sizes: sizes.clone(),
        placements: placements.clone(),
        mechanisms: mechs.iter().map(|m| m.name().to_string()).collect(),
        other_runs_at_start: others,
        points,
        break_even: be,
    };
    std::fs::create_dir_all(out)
        .with_context(|| format!("cannot create the output directory {}", out.display()))?;
    std::fs::write(
        out.join("pktsize.json"),
        serde_json::to_string_pretty(&report)?,
    )?;
    let md = markdown(&report);
    std::fs::write(out.join("pktsize.md"), &md)?;
    super::plot::pktsize(&out.join("pktsize.svg"), &report)?;
    println!("{md}");
    eprintln!(
        "pvnet bench: {:.0} s; wrote {}/pktsize.md, pktsize.json, pktsize.svg",
        report.wall_seconds,
        out.display()
    );
    let bad: Vec<String> = (report.points.iter())
        .filter(|p| !p.errors.is_empty())
        .map(|p| format!("{} {} {} B", p.placement.name(), p.mechanism, p.size))
        .collect();
    if !bad.is_empty() {
        bail!("errors at {}: see pktsize.json", bad.join(", "));
    }
    Ok(())
}

/// What the sweep leaves behind (`pktsize.json`).
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub tool: &'static str,
    pub revision: String,
    pub wall_seconds: f64,
    /// The memory as the driver domain's CPU saw it at the start and the end (`{start, end}`,
    /// as the bench's `machine.memory_probe`): the cache a shared VM is left moves the copies'
    /// cost.
    pub memory_probe: serde_json::Value,
    pub tsc_hz: u64,
    pub offered_pps: f64,
    pub seconds: f64,
    /// Repetitions of each size; a point is their median.
    pub reps: usize,
    pub mtu: u32,
    pub sizes: Vec<usize>,
    pub placements: Vec<Placement>,
    pub mechanisms: Vec<String>,
    /// Other pvnet runs up when the sweep started (their load skews the figures).
    pub other_runs_at_start: Vec<String>,
    pub points: Vec<Point>,
    pub break_even: Vec<BreakEven>,
}

/// One testbed: mechanism `m` in placement `pl`, every size.
fn sweep_one(
    (pl, m): (Placement, Mechanism),
    sizes: &[usize],
    (pps, seconds, reps): (f64, f64, usize),
    tsc_hz: u64,
    progress: &Progress,
) -> Result<Vec<Point>> {
    // Flip runs on the driver domain's machine frames (the frame port), one page per packet:
    // it carries only the sizes whose frame, with its virtio-net header, fits a page.
    let sizes: Vec<usize> = match m {
        Mechanism::Flip => (sizes.iter().copied())
            .filter(|&s| s <= FLIP_MAX_SIZE)
            .collect(),
        _ => sizes.to_vec(),
    };
    let sizes = &sizes[..];
    let cfg = DaemonConfig {
        grant: m,
        port_frames: m == Mechanism::Flip,
        mtu: SWEEP_MTU,
        guests: 1,
        cpu: Some(DD_CPU),
        sender_cpu: Some(pl.sender_cpu()),
        ..DaemonConfig::default()
    };
    let name = format!("pktsize {} {m}", pl.name());
    let (points, _) = testbed::with_testbed(&cfg, &name, progress, |info| {
        let exe = std::env::current_exe()?;
        let guest_ns = Netns::open(&info.guest_ns[0])?;
        let remote = Netns::open(&info.remote_ns)?;
        if pl == Placement::Split {
            for t in info
                .guest_pids
                .iter()
                .flat_map(|&p| super::child::tasks_of(p))
            {
                pvnet_testbed::cpu::pin_pid(t, pl.guest_cpu())?;
            }
        }
        let mut server = start_builtin_server_on(&exe, &guest_ns, pl.guest_cpu(), PORT, false)?;
        wait_listening_on(&guest_ns, &mut server, PORT)?;
        // Repetitions interleaved (every size, then every size again): slow drift of the
        // machine's load spreads over all sizes instead of landing on some.
        let mut runs: Vec<Vec<Point>> = vec![Vec::new(); sizes.len()];
        for rep in 1..=reps {
            for (k, &size) in sizes.iter().enumerate() {
                interrupt::check()?;
                progress.phase(
                    &format!("{size}-byte datagrams at {pps:.0}/s, repetition {rep}/{reps}"),
                    seconds,
                );
                runs[k].push(one_size(
                    (pl, m, size),
                    (&exe, &remote, &info.guest_addrs[0]),
                    (&info.guest_pids, &server, info.pid),
                    (pps, seconds, tsc_hz),
                )?);
            }
        }
        let points: Vec<Point> = runs.into_iter().map(median_point).collect();
        drop(server);
        Ok(points)
    })?;
    Ok(points)
}

/// One UDP stream of `size`-byte datagrams, with the CPUs sampled around it.
fn one_size(
    (pl, m, size): (Placement, Mechanism, usize),
    (exe, remote, addr): (&Path, &Netns, &str),
    (guest_procs, server, daemon): (&[i32], &Guard, i32),
    (pps, seconds, tsc_hz): (f64, f64, u64),
) -> Result<Point> {
    let mut cmd = child::pinned(remote.command(exe), pl.sender_cpu());
    cmd.args([
        "perf",
        "udp-stream",
        addr,
        "--port",
        &PORT.to_string(),
        "--size",
        &size.to_string(),
        "--rate",
        &format!("{pps}pps"),
        "--duration",
        &seconds.to_string(),
    ]);
    // Processes, not threads: a process's CPU clock counts all of its threads.
    let mut guest_pids: Vec<i32> = guest_procs.to_vec();
    guest_pids.push(server.pid());
    let mut watched = guest_pids.clone();
    watched.push(daemon);
    let (mut before, mut after) = (None, None);
    let limit = Duration::from_secs_f64(seconds + 30.0);
    let outs = child::outputs_started(
        std::slice::from_mut(&mut cmd),
        "the UDP sender",
        limit,
        |_| {
            before = Some((cpu::sample(DD_CPU, &watched)?, cpu::sample(OTHER_CPU, &[])?));
            Ok(())
        },
        || {
            after = Some((cpu::sample(DD_CPU, &watched)?, cpu::sample(OTHER_CPU, &[])?));
            Ok(())
        },
    )?;
    let (b0, b1) = before.expect("sampled at the start");
    let (a0, a1) = after.expect("sampled at the end");
    let d0 = cpu::delta(&b0, &a0);
    let d1 = cpu::delta(&b1, &a1);
    let pid_ns = |pid: i32| {
        d0.pid_ns
            .iter()
            .find(|(q, _)| *q == pid)
            .map_or(0, |(_, n)| *n)
    };
    let guest_ns: u64 = guest_pids.iter().map(|&p| pid_ns(p)).sum();
    let dd_ns = pid_ns(daemon);
    let mut p = Point {
        placement: pl,
        mechanism: m.name().to_string(),
        size,
        offered_pps: pps,
        sent: 0,
        received: 0,
        lost: 0,
        corrupt: 0,
        dd_cycles: 0.0,
        guest_cycles: 0.0,
        total_cycles: 0.0,
        total_min: 0.0,
        total_max: 0.0,
        dd_cpu_busy: d0.utilization(),
        other_cpu_busy: d1.utilization(),
        saturated: false,
        errors: Vec::new(),
    };
    let out = &outs[0];
    match serde_json::from_slice::<UdpOutcome>(&out.stdout) {
        Ok(o) => {
            p.sent = o.sender.sent;
            p.received = o.receiver.unique;
            p.lost = o.receiver.lost;
            p.corrupt = o.receiver.corrupt;
            if p.corrupt > 0 {
                p.errors
                    .push(format!("{} corrupt datagrams", o.receiver.corrupt));
            }
        }
        Err(e) => p.errors.push(format!(
            "the UDP sender's report: {e}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
    if p.received > 0 {
        let cyc = |ns: u64| ns as f64 * tsc_hz as f64 / 1e9 / p.received as f64;
        p.dd_cycles = cyc(dd_ns);
        p.guest_cycles = cyc(guest_ns);
        p.total_cycles = p.dd_cycles + p.guest_cycles;
        p.total_min = p.total_cycles;
        p.total_max = p.total_cycles;
    }
    p.saturated = p.sent == 0 || (p.lost as f64) > LOSS_LIMIT * p.sent as f64;
    Ok(p)
}

/// The median of each figure over the repetitions of one size (counts summed, errors kept,
/// saturated if any repetition was).
pub fn median_point(runs: Vec<Point>) -> Point {
    let median = |f: fn(&Point) -> f64| {
        let mut v: Vec<f64> = runs.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n == 0 {
            0.0
        } else if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    };
    let mut p = runs[0].clone();
    p.dd_cycles = median(|p| p.dd_cycles);
    p.guest_cycles = median(|p| p.guest_cycles);
    p.total_cycles = median(|p| p.total_cycles);
    p.dd_cpu_busy = median(|p| p.dd_cpu_busy);
    p.other_cpu_busy = median(|p| p.other_cpu_busy);
    p.total_min = runs
        .iter()
        .map(|p| p.total_cycles)
        .fold(f64::INFINITY, f64::min);
    p.total_max = runs.iter().map(|p| p.total_cycles).fold(0.0, f64::max);
    p.sent = runs.iter().map(|p| p.sent).sum();
    p.received = runs.iter().map(|p| p.received).sum();
    p.lost = runs.iter().map(|p| p.lost).sum();
    p.corrupt = runs.iter().map(|p| p.corrupt).sum();
    p.saturated = runs.iter().any(|p| p.saturated);
    p.errors = runs.iter().flat_map(|p| p.errors.clone()).collect();
    p
}

/// `pktsize.md`: the method in one paragraph, a table per placement, the break-even sizes.
pub fn markdown(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Cycles per packet against packet size\n");
    let _ = writeln!(
        s,
        "UDP stream from the remote host into one guest at {:.0} datagrams/s offered, {} s per size and repetition, the median of {} repetitions (interleaved) per point, MTU {} on every link (one frame per datagram); cycles per packet = CPU time × TSC rate ({:.2} GHz) / datagrams received, per process: driver domain = the daemon, guest = the guest's process and the receiver. `same`: driver domain and guest on CPU {DD_CPU}, the sender on CPU {OTHER_CPU}; `split`: driver domain and the sender on CPU {DD_CPU}, the guest on CPU {OTHER_CPU}. Points marked `*` lost more than 1 % (above saturation) and are left out of the break-even sizes.\n",
        r.offered_pps,
        r.seconds,
        r.reps,
        r.mtu,
        r.tsc_hz as f64 / 1e9
    );
    if let Some(line) = super::report::memory_probe_line(&r.memory_probe) {
        let _ = writeln!(s, "{line}\n");
    }
    if !r.other_runs_at_start.is_empty() {
        let _ = writeln!(
            s,
            "Other pvnet runs were up when the sweep started ({}): the machine was shared.\n",
            r.other_runs_at_start.join(", ")
        );
    }
    for &pl in &r.placements {
        let _ = writeln!(s, "## Placement `{}`\n", pl.name());
        let mut head = "| size (B) |".to_string();
        let mut rule = "|---:|".to_string();
        for m in &r.mechanisms {
            let _ = write!(head, " {m} dd | {m} guest | {m} total |");
            rule.push_str("---:|---:|---:|");
        }
        let _ = writeln!(s, "{head}\n{rule}");
        for &size in &r.sizes {
            let mut row = format!("| {size} |");
            for m in &r.mechanisms {
                match r
                    .points
                    .iter()
                    .find(|p| p.placement == pl && &p.mechanism == m && p.size == size)
                {
                    Some(p) => {
                        let star = if p.saturated { "*" } else { "" };
                        let _ = write!(
                            row,
                            " {:.0}{star} | {:.0}{star} | {:.0}{star} |",
                            p.dd_cycles, p.guest_cycles, p.total_cycles
                        );
                    }
                    None => row.push_str(" – | – | – |"),
                }
            }
            let _ = writeln!(s, "{row}");
        }
        let _ = writeln!(s, "\nBreak-even sizes (total cycles per packet):\n");
        for b in r.break_even.iter().filter(|b| b.placement == pl) {
            let _ = writeln!(s, "- {}", describe_break_even(b));
        }
        let _ = writeln!(
            s,
            "- seed (Xen 2006, copy against flip): {:.0} B\n",
            pl.seed_break_even()
        );
    }
    s
}

/// One line about a pair's break-even size.
pub fn describe_break_even(b: &BreakEven) -> String {
    let name = |c: char| if c == 'a' { &b.a } else { &b.b };
    let c = &b.crossing;
    match (c.at, c.cheaper_small) {
        (Some(x), Some(small)) => {
            let other = name(if small == 'a' { 'b' } else { 'a' });
            let mut t = format!(
                "{} against {}: {x:.0} B ({} is cheaper below, {other} above)",
                b.a,
                b.b,
                name(small)
            );
            if c.crossings > 1 {
                let _ = write!(t, "; the curves cross {} times", c.crossings);
            }
            t
        }
        (Some(x), None) => format!("{} against {}: {x:.0} B", b.a, b.b),
        (None, Some(small)) => format!(
            "{} against {}: no crossing, {} is cheaper at every size",
            b.a,
            b.b,
            name(small)
        ),
        (None, None) => format!("{} against {}: equal", b.a, b.b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_names_the_memory_it_was_measured_with() {
        let mut r = Report {
            tool: "pvnet bench --sweep pktsize",
            revision: "abc".into(),
            wall_seconds: 1.0,
            memory_probe: serde_json::json!({"start": null, "end": null}),
            tsc_hz: 2_000_000_000,
            offered_pps: 1000.0,
            seconds: 1.0,
            reps: 1,
            mtu: SWEEP_MTU,
            sizes: vec![64],
            placements: vec![],
            mechanisms: vec![],
            other_runs_at_start: vec![],
            points: vec![],
            break_even: vec![],
        };
        assert!(!markdown(&r).contains("memory seen"));
        r.memory_probe = serde_json::json!({
            "start": {"cpu": 0, "random_read_ns_8mib": 14.0, "random_read_ns_64mib": 130.0, "cache_mib": 8},
            "end": {"cpu": 0, "random_read_ns_8mib": 150.0, "random_read_ns_64mib": 190.0, "cache_mib": 2},
        });
        let md = markdown(&r);
        assert!(
            md.contains("\nmemory seen from CPU 0") && md.contains("cache speed: 8 → 2 MiB"),
            "{md}"
        );
    }

    #[test]
    fn the_crossing_is_interpolated_between_the_sizes_around_it() {
        // a: 100 + 0.1 x, b: 200 flat: equal at x = 1000.
        let xs = [64.0, 512.0, 2048.0, 8192.0];
        let a: Vec<f64> = xs.iter().map(|x| 100.0 + 0.1 * x).collect();
        let b = [200.0; 4];
        let c = crossing(&xs, &a, &b);
        // Linear between 512 (d = -48.8) and 2048 (d = 104.8).
        let want = 512.0 + 1536.0 * 48.8 / (48.8 + 104.8);
        assert!((c.at.unwrap() - want).abs() < 1e-9, "{c:?}");
        assert_eq!((c.cheaper_small, c.crossings), (Some('a'), 1));
        // Swapped: the same size, b cheaper at the small end.
        let c = crossing(&xs, &b, &a);
        assert!((c.at.unwrap() - want).abs() < 1e-9);
        assert_eq!(c.cheaper_small, Some('b'));
    }

    #[test]
    fn curves_that_never_cross_or_touch() {
        let xs = [64.0, 128.0, 256.0];
        let c = crossing(&xs, &[1.0, 2.0, 3.0], &[5.0, 6.0, 7.0]);
        assert_eq!(
            c,
            Crossing {
                at: None,
                cheaper_small: Some('a'),
                crossings: 0
            }
        );
        // Equal at a measured size and crossing there.
        let c = crossing(&xs, &[1.0, 5.0, 9.0], &[5.0, 5.0, 5.0]);
        assert_eq!((c.at, c.crossings), (Some(128.0), 1));
        // Touching is no crossing.
        let c = crossing(&xs, &[5.0, 6.0, 7.0], &[5.0, 5.0, 5.0]);
        assert_eq!((c.at, c.cheaper_small, c.crossings), (None, Some('b'), 0));
        let c = crossing(&xs, &[6.0, 5.0, 7.0], &[5.0, 5.0, 5.0]);
        assert_eq!((c.at, c.crossings), (None, 0));
        // Never different.
        let c = crossing(&xs, &[5.0; 3], &[5.0; 3]);
        assert_eq!((c.at, c.cheaper_small, c.crossings), (None, None, 0));
        // Two crossings: the first is reported, both counted.
        let c = crossing(&[1.0, 2.0, 3.0, 4.0], &[0.0, 2.0, 0.0, 0.0], &[1.0; 4]);
        assert_eq!((c.at, c.crossings), (Some(1.5), 2));
    }

    #[test]
    fn pairs_are_against_flip_when_there_is_one() {
        let p = pairs(&["copy", "map", "persistent", "flip"]);
        let want: Vec<(String, String)> = ["copy", "map", "persistent"]
            .iter()
            .map(|m| (m.to_string(), "flip".to_string()))
            .collect();
        assert_eq!(p, want);
        let p = pairs(&["copy", "map", "persistent"]);
        assert_eq!(p.len(), 3);
        assert_eq!(p[0], ("copy".to_string(), "map".to_string()));
        assert_eq!(p[2], ("map".to_string(), "persistent".to_string()));
        assert!(pairs(&["copy"]).is_empty());
    }

    #[test]
    fn placements_sizes_and_rates_are_checked() {
        assert_eq!(parse_placement("same").unwrap(), [Placement::Same]);
        assert_eq!(parse_placement(" split ").unwrap(), [Placement::Split]);
        assert_eq!(parse_placement("both").unwrap().len(), 2);
        let e = parse_placement("apart").unwrap_err().to_string();
        assert!(
            e.contains("\"apart\"") && e.contains("same") && e.contains("split"),
            "{e}"
        );
        assert_eq!(parse_sizes("1024,64,1024").unwrap(), [64, 1024]);
        assert_eq!(parse_sizes(DEFAULT_SIZES).unwrap().last(), Some(&MAX_SIZE));
        for bad in ["63", "65494", "x", "64,-1", "1e3"] {
            let e = parse_sizes(bad).unwrap_err().to_string();
            assert!(e.contains("between 64 and 65493"), "{bad}: {e}");
        }
        let e = parse_sizes("128").unwrap_err().to_string();
        assert!(e.contains("at least two sizes"), "{e}");
        assert_eq!(parse_rate("2kpps").unwrap(), 2000.0);
        let e = parse_rate("100M").unwrap_err().to_string();
        assert!(e.contains("datagrams per second"), "{e}");
        assert!(parse_rate("fast").is_err());
    }

    fn point(pl: Placement, m: &str, size: usize, total: f64, saturated: bool) -> Point {
        Point {
            placement: pl,
            mechanism: m.to_string(),
            size,
            offered_pps: 1000.0,
            sent: 100,
            received: 100,
            lost: 0,
            corrupt: 0,
            dd_cycles: total / 2.0,
            guest_cycles: total / 2.0,
            total_cycles: total,
            total_min: total,
            total_max: total,
            dd_cpu_busy: 0.1,
            other_cpu_busy: 0.1,
            saturated,
            errors: vec![],
        }
    }

    #[test]
    fn a_point_is_the_median_of_its_repetitions() {
        let runs: Vec<Point> = [300.0, 100.0, 200.0]
            .iter()
            .enumerate()
            .map(|(i, &t)| point(Placement::Same, "copy", 64, t, i == 1))
            .collect();
        let p = median_point(runs);
        assert_eq!((p.total_cycles, p.dd_cycles), (200.0, 100.0));
        assert_eq!((p.total_min, p.total_max), (100.0, 300.0));
        assert_eq!((p.sent, p.received), (300, 300));
        assert!(p.saturated);
    }

    #[test]
    fn break_evens_use_every_mechanism_and_skip_saturated_points() {
        let names: Vec<&str> = Mechanism::ALL.iter().map(|m| m.name()).collect();
        let mut pts = Vec::new();
        // The first mechanism grows with the size, every other one is flat at 500; the
        // first one's last point is saturated and must not count.
        for (k, m) in names.iter().enumerate() {
            for (i, size) in [100, 1000, 10000].into_iter().enumerate() {
                let total = if k == 0 {
                    100.0 * (i as f64 + 1.0) * 2.0
                } else {
                    500.0
                };
                pts.push(point(Placement::Split, m, size, total, k == 0 && i == 2));
            }
        }
        let be = break_evens(&pts, &[Placement::Split]);
        assert_eq!(be.len(), pairs(&names).len());
        let first = be.iter().find(|b| b.a == names[0]).unwrap();
        // 200 at 100 B, 400 at 1000 B: never reaches 500 without the saturated point.
        assert_eq!(first.crossing.at, None);
        assert_eq!(first.crossing.cheaper_small, Some('a'));
        assert!(describe_break_even(first).contains("cheaper at every size"));
    }
}
