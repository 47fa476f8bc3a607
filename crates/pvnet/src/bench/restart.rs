//! `pvnet bench --scenario restart`: the driver domain restarted under load (issue 22, "Faults"),
//! measured by the bench as the other scenarios are, under every configuration of `--configs`.
//!
//! Each repetition runs on a fresh testbed of two PV guests (the configuration as `NAME/g2`):
//!
//! - **idle**: `--restarts` restarts with no traffic, one after the other;
//! - **TCP**: a verified stream into guest 0 (from the remote host) and one out of guest 1 (to
//!   the remote host) at once for `--duration` s, once without restarts and once with
//!   `--restarts` restarts spread evenly over it, in alternating order (odd repetitions without
//!   first). Each sender's namespace's `TcpRetransSegs` is read before and after;
//! - **UDP**: paced, verified datagrams ([`UDP_SIZE`] bytes at [`UDP_PPS`] a second) into
//!   guest 0 for `--duration` s, without and with `--restarts` restarts. The datagrams lost with
//!   restarts beyond those lost without, divided by the rate and the restarts, are how long the
//!   data path into a guest is out per restart, as the guest saw it.
//!
//! Each restart is `pvnet restart-dd`'s ([`admin::restart_dd`]): the bench waits until every
//! frontend has reconnected and takes the daemon's account of it (`stat`'s `restart.last`): the
//! time from the restart's start to the last vif's reconnection, the driver domain's time down,
//! the packets dropped with the old backends. A restart under load checks first that every
//! stream is still running, so that it was made under load. At the end of the repetition the
//! daemon must count every restart and two reconnections for each, and the frontends' counters
//! (frames posted again, given up, grants leaked) are summed over both guests.
//!
//! The goals the report checks: every reconnection under one second, every TCP stream through
//! the restarts intact (no byte lost from the guests' point of view). See docs/restart.md.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use pvnet_testbed::Netns;
use serde::{Deserialize, Serialize};

use super::child;
use super::configs::{self, RX_CPU, TX_CPU};
use super::measure::{self, Sample, PORT};
use super::progress::Progress;
use super::report::{fmt, Table};
use super::scenario::{
    median, push_errors, repetitions, two_guests, write_run, RunHeader, Started,
};
use super::{interrupt, testbed};
use crate::admin;
use crate::config::Mode;
use crate::rundir::RunInfo;

/// The default `--configs` of the restart scenario: the data path with and without aggregation.
pub const DEFAULT_CONFIGS: &str = "xen,adaptive";

/// The default and the largest `--restarts`.
pub const DEFAULT_RESTARTS: usize = 3;
pub const MAX_RESTARTS: usize = 20;

/// The paced UDP stream: payload bytes per datagram and datagrams per second (16 Mbit/s, which
/// a quiet testbed carries without loss: docs/restart.md).
pub const UDP_SIZE: usize = 1000;
pub const UDP_PPS: u64 = 2000;

/// The goal for a reconnection (issue 22): under one second from the restart's start.
pub const GOAL_RECONNECT_MS: f64 = 1000.0;

/// How long the account at the end of a repetition waits for the frontends to report their
/// counters (they do every half second).
const FRONTEND_REPORT_WAIT: Duration = Duration::from_secs(3);

/// Ports of the stream out of guest 1 (the remote host receives) and of the UDP stream.
const OUT_PORT: u16 = PORT + 1;
const UDP_PORT: u16 = PORT + 2;

/// Parses the restart scenario's `--configs`: PV configurations `pvnet restart-dd` supports,
/// run as two receiving guests.
pub fn parse_configs(s: &str) -> Result<Vec<String>> {
    let list = configs::parse(s)?;
    for c in &list {
        let n = configs::Name::parse(c)?;
        if n.guests != 1 || n.dir != configs::Direction::Rx {
            bail!("--scenario restart runs each configuration as two guests: name {c:?} without @tx or /gN");
        }
        let d = configs::daemon_config(c)?;
        if d.mode != Mode::Xen || d.hvm > 0 || d.grant.is_pool() || d.port_frames {
            bail!(
                "--scenario restart needs a configuration whose driver domain `pvnet restart-dd` restarts: {c:?} is not one (the PV path with --grant copy, map or persistent, without HVM guests or a frame port; e.g. xen, adaptive, map, persistent, route)"
            );
        }
    }
    Ok(list)
}

/// One restart as the daemon accounted it (`stat`'s `restart.last`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Restart {
    /// From the restart's start to the last vif's reconnection (ms).
    pub reconnect_ms: f64,
    /// The old driver domain gone and the new one's ports open (ms): `teardown_ms` + `ports_ms`.
    pub down_ms: f64,
    pub teardown_ms: f64,
    pub ports_ms: f64,
    /// Vifs whose backend went away, and of those, reconnected.
    pub vifs: u64,
    pub reconnected: u64,
    /// Packets queued in the old backends for their guests, dropped with them.
    pub queued_packets_dropped: u64,
}

impl Restart {
    /// Reads `stat`'s `restart` object after a finished restart.
    fn from_stat(restart: &serde_json::Value) -> Result<Restart> {
        let last = &restart["last"];
        if last["reconnect_ms"].is_null() {
            bail!("the daemon has not timed the restart: {restart}");
        }
        serde_json::from_value(last.clone())
            .with_context(|| format!("reading the daemon's account of a restart: {last}"))
    }
}

/// One verified TCP stream of a leg.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Flow {
    /// `remote→g0` or `g1→remote`.
    pub flow: String,
    pub bytes: u64,
    pub throughput_mbps: f64,
    /// Every byte sent arrived and matched the pattern.
    pub intact: bool,
    /// Segments the sender's namespace retransmitted during the stream (`TcpRetransSegs`).
    pub retrans_segs: u64,
}

/// A TCP leg: the two streams, and the restarts made during them (none in the quiet leg).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TcpLeg {
    pub restarts: Vec<Restart>,
    pub flows: Vec<Flow>,
    pub errors: Vec<String>,
}

/// A UDP leg: the paced stream into guest 0 and the restarts made during it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UdpLeg {
    pub restarts: Vec<Restart>,
    /// Datagrams sent, and of those, never arrived.
    pub sent: u64,
    pub lost: u64,
    /// Datagrams that arrived with the wrong length or contents.
    pub corrupt: u64,
    /// The sender's rate (datagrams/s).
    pub pps: f64,
    pub errors: Vec<String>,
}

/// The frontends' reconnection counters at the end of a repetition, summed over the guests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Frontends {
    pub disconnects: u64,
    pub reconnects: u64,
    /// TX frames the old backend had not answered, posted again to the new one.
    pub tx_reposted: u64,
    /// TX frames given up at a disconnection (the old backend had answered part of them).
    pub tx_lost_at_disconnect: u64,
    pub grants_leaked: u64,
}

/// One repetition of one configuration.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RestartSample {
    pub config: String,
    pub rep: usize,
    pub run_id: String,
    pub idle: Vec<Restart>,
    pub tcp_quiet: TcpLeg,
    pub tcp_restarts: TcpLeg,
    pub udp_quiet: UdpLeg,
    pub udp_restarts: UdpLeg,
    pub frontends: Frontends,
    /// What the daemon counted at the end: restarts, and reconnections over all of them.
    pub restarts_counted: u64,
    pub reconnections_counted: u64,
    /// Errors of the repetition as a whole (the legs keep their own).
    pub errors: Vec<String>,
    pub wall_seconds: f64,
}

impl RestartSample {
    /// Every error of the repetition, each with where it happened.
    pub fn all_errors(&self) -> Vec<String> {
        let leg = |name: &'static str, e: &[String]| {
            e.iter()
                .map(move |e| format!("{name}: {e}"))
                .collect::<Vec<_>>()
        };
        (self.errors.iter().cloned())
            .chain(leg("TCP without restarts", &self.tcp_quiet.errors))
            .chain(leg("TCP with restarts", &self.tcp_restarts.errors))
            .chain(leg("UDP without restarts", &self.udp_quiet.errors))
            .chain(leg("UDP with restarts", &self.udp_restarts.errors))
            .collect()
    }

    /// Milliseconds the data path into guest 0 was out per restart: the datagrams lost with
    /// restarts beyond those lost without, over the rate and the restarts.
    pub fn udp_outage_ms(&self) -> Option<f64> {
        let (q, r) = (&self.udp_quiet, &self.udp_restarts);
        if r.restarts.is_empty() || r.pps <= 0.0 || !r.errors.is_empty() || !q.errors.is_empty() {
            return None;
        }
        let extra = r.lost.saturating_sub(q.lost) as f64;
        Some(extra / r.pps * 1e3 / r.restarts.len() as f64)
    }
}

/// What one restart scenario run measures with.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Params {
    pub reps: usize,
    /// Seconds of each TCP and UDP leg.
    pub stream_seconds: f64,
    /// Restarts idle and in each leg with restarts.
    pub restarts: usize,
    pub msg_size: usize,
    pub udp_size: usize,
    pub udp_pps: u64,
    #[serde(flatten)]
    pub port: configs::PortParams,
}

impl Params {
    /// Planned seconds of one repetition's measurements.
    fn planned(&self) -> f64 {
        4.0 * self.stream_seconds + 0.1 * self.restarts as f64
    }
}

/// A finished restart scenario run (`scenario-restart.json`).
#[derive(Clone, Debug, Serialize)]
pub struct RestartRun {
    pub scenario: &'static str,
    #[serde(flatten)]
    pub header: RunHeader,
    pub params: Params,
    pub configs: Vec<String>,
    pub samples: Vec<RestartSample>,
}

impl RestartRun {
    fn of<'a>(&'a self, c: &'a str) -> impl Iterator<Item = &'a RestartSample> + 'a {
        self.samples.iter().filter(move |s| s.config == c)
    }

    /// Every restart of `c` that `pick` takes from a repetition.
    fn restarts<'a>(
        &'a self,
        c: &'a str,
        pick: impl Fn(&'a RestartSample) -> Vec<&'a Restart> + 'a,
    ) -> impl Iterator<Item = &'a Restart> + 'a {
        self.of(c).flat_map(pick)
    }

    /// The slowest reconnection of the whole run (ms), idle or under load.
    pub fn slowest_reconnect_ms(&self) -> Option<f64> {
        (self.samples.iter())
            .flat_map(|s| {
                s.idle
                    .iter()
                    .chain(&s.tcp_restarts.restarts)
                    .chain(&s.udp_restarts.restarts)
            })
            .map(|r| r.reconnect_ms)
            .max_by(f64::total_cmp)
    }

    /// TCP streams through restarts that arrived intact, and how many ran.
    pub fn intact_through_restarts(&self) -> (usize, usize) {
        let flows = self.samples.iter().flat_map(|s| &s.tcp_restarts.flows);
        let (mut ok, mut n) = (0, 0);
        for f in flows {
            n += 1;
            ok += usize::from(f.intact);
        }
        (ok, n)
    }
}

/// Runs the restart scenario over `configs` and writes `scenario-restart.md` and `.json` to
/// `out`.
pub fn run(configs: Vec<String>, params: Params, out: &Path) -> Result<RestartRun> {
    let started = Started::now();
    let samples = repetitions(
        "restart",
        &configs,
        params.reps,
        params.planned(),
        |c, rep, pr| run_one(c, rep, &params, pr),
    )?;
    let run = RestartRun {
        scenario: "restart",
        header: started.finish(),
        params,
        configs,
        samples,
    };
    let table = table(&run);
    println!("{}", table.text());
    println!("{}", verdicts(&run));
    let json = serde_json::to_string_pretty(&run)?;
    write_run(
        out,
        "restart",
        &markdown(&run, &table),
        &json,
        run.header.wall_seconds,
    )?;
    Ok(run)
}

/// One repetition of `config` on a fresh two-guest testbed.
fn run_one(config: &str, rep: usize, p: &Params, progress: &Progress) -> Result<RestartSample> {
    let t0 = Instant::now();
    let (two, cfg) = two_guests(config, &p.port)?;
    let quiet_first = rep % 2 == 1;
    let (mut s, info) = testbed::with_testbed(&cfg, &two, progress, |info| {
        let mut s = RestartSample {
            config: config.to_string(),
            rep,
            run_id: info.id.clone(),
            ..RestartSample::default()
        };
        progress.phase(&format!("{} restarts, idle", p.restarts), 0.0);
        for _ in 0..p.restarts {
            match restart(&info.id) {
                Ok(r) => s.idle.push(r),
                Err(e) => {
                    s.errors.push(format!("idle restart: {e:#}"));
                    break;
                }
            }
            interrupt::check()?;
        }
        for with in [!quiet_first, quiet_first] {
            let leg = tcp_leg(info, p, with, progress)?;
            *(if with {
                &mut s.tcp_restarts
            } else {
                &mut s.tcp_quiet
            }) = leg;
        }
        for with in [!quiet_first, quiet_first] {
            let leg = udp_leg(info, p, with, progress)?;
            *(if with {
                &mut s.udp_restarts
            } else {
                &mut s.udp_quiet
            }) = leg;
        }
        account(info, &mut s)?;
        Ok(s)
    })?;
    s.run_id = info.id;
    s.wall_seconds = t0.elapsed().as_secs_f64();
    Ok(s)
}

/// One restart, waited for until every frontend is back.
fn restart(id: &str) -> Result<Restart> {
    let (_, r) = admin::restart_dd(id, true)?;
    let r = Restart::from_stat(&r)?;
    if r.reconnected != r.vifs {
        bail!("{} of {} vifs reconnected", r.reconnected, r.vifs);
    }
    Ok(r)
}

/// Makes `n` restarts spread evenly over `seconds` from `start` (at `seconds × k / (n + 1)`),
/// each only while every process of `pids` still runs. Stops at the first failure, which it
/// returns with the restarts made.
fn restarts_during(
    id: &str,
    pids: &[i32],
    start: Instant,
    seconds: f64,
    n: usize,
) -> (Vec<Restart>, Option<String>) {
    let mut done = Vec::with_capacity(n);
    for k in 1..=n {
        let at = start + Duration::from_secs_f64(seconds * k as f64 / (n + 1) as f64);
        if let Some(wait) = at.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        if interrupt::check().is_err() {
            return (done, Some("interrupted".into()));
        }
        if let Some(p) = pids.iter().find(|&&p| !child::running(p)) {
            return (
                done,
                Some(format!(
                    "restart {k} of {n}: a stream (pid {p}) had already ended, so it would not be made under load (--duration too short for --restarts?)"
                )),
            );
        }
        match restart(id) {
            Ok(r) => done.push(r),
            Err(e) => return (done, Some(format!("restart {k} of {n}: {e:#}"))),
        }
    }
    (done, None)
}

/// `TcpRetransSegs` of `ns` (its `/proc/net/snmp`).
fn retrans_segs(ns: &Netns) -> Result<u64> {
    let text = ns.run(|| std::fs::read_to_string("/proc/thread-self/net/snmp"))??;
    parse_retrans(&text)
        .with_context(|| format!("no TcpRetransSegs in {}'s /proc/net/snmp", ns.name()))
}

/// The `RetransSegs` field of the `Tcp:` lines of a `/proc/net/snmp` text.
fn parse_retrans(snmp: &str) -> Option<u64> {
    let mut tcp = snmp.lines().filter(|l| l.starts_with("Tcp:"));
    let (names, values) = (tcp.next()?, tcp.next()?);
    let i = names.split_whitespace().position(|n| n == "RetransSegs")?;
    values.split_whitespace().nth(i)?.parse().ok()
}

/// Runs `cmds` (a leg's senders) to their ends, with `p.restarts` restarts spread over them
/// when `with`: their outputs, the restarts made, and why the restarts stopped early if they did.
fn senders_through_restarts(
    cmds: &mut [std::process::Command],
    what: &str,
    info: &RunInfo,
    p: &Params,
    with: bool,
) -> Result<(Vec<std::process::Output>, Vec<Restart>, Option<String>)> {
    let (mut done, mut err) = (Vec::new(), None);
    let outs = child::outputs_started(
        cmds,
        what,
        Duration::from_secs_f64(p.stream_seconds + 60.0),
        |pids| {
            if with {
                (done, err) =
                    restarts_during(&info.id, pids, Instant::now(), p.stream_seconds, p.restarts);
            }
            Ok(())
        },
        || Ok(()),
    )?;
    Ok((outs, done, err))
}

/// The progress line of a leg of `what`, with or without restarts.
fn leg_phase(progress: &Progress, p: &Params, what: &str, with: bool) {
    let label = if with {
        format!("{what} through {} restarts", p.restarts)
    } else {
        format!("{what}, no restart")
    };
    progress.phase(&label, p.stream_seconds);
}

/// A TCP leg: a verified stream into guest 0 and one out of guest 1 at once, with
/// `p.restarts` restarts during them when `with`.
fn tcp_leg(info: &RunInfo, p: &Params, with: bool, progress: &Progress) -> Result<TcpLeg> {
    let exe = std::env::current_exe()?;
    let g0 = Netns::open(&info.guest_ns[0])?;
    let g1 = Netns::open(&info.guest_ns[1])?;
    let remote = Netns::open(&info.remote_ns)?;
    let mut into = measure::start_builtin_server_on(&exe, &g0, RX_CPU, PORT, true)?;
    measure::wait_listening_on(&g0, &mut into, PORT)?;
    let mut out = measure::start_builtin_server_on(&exe, &remote, TX_CPU, OUT_PORT, true)?;
    measure::wait_listening_on(&remote, &mut out, OUT_PORT)?;
    leg_phase(progress, p, "two TCP streams", with);
    // Each stream's sender's namespace, whose retransmissions are its stream's.
    let senders = [("remote→g0", &remote), ("g1→remote", &g1)];
    let before = senders.map(|(_, ns)| retrans_segs(ns));
    let mut cmds = [
        measure::builtin_stream_cmd(
            &exe,
            &remote,
            TX_CPU,
            &info.guest_addrs[0],
            PORT,
            p.stream_seconds,
            p.msg_size,
        ),
        measure::builtin_stream_cmd(
            &exe,
            &g1,
            RX_CPU,
            &info.remote_addr,
            OUT_PORT,
            p.stream_seconds,
            p.msg_size,
        ),
    ];
    let (outs, restarts, err) =
        senders_through_restarts(&mut cmds, "the TCP stream senders", info, p, with)?;
    let mut leg = TcpLeg {
        restarts,
        errors: err.into_iter().collect(),
        ..TcpLeg::default()
    };
    drop((into, out));
    for (((name, ns), o), b) in senders.iter().zip(&outs).zip(before) {
        let mut s = Sample::default();
        measure::parse_builtin_stream(o, &mut s);
        let (b, a) = (b?, retrans_segs(ns)?);
        leg.flows.push(Flow {
            flow: name.to_string(),
            bytes: s.bytes,
            throughput_mbps: s.throughput_mbps,
            intact: s.errors.is_empty() && s.bytes > 0,
            retrans_segs: a.saturating_sub(b),
        });
        leg.errors
            .extend(s.errors.into_iter().map(|e| format!("{name}: {e}")));
    }
    Ok(leg)
}

/// A UDP leg: paced datagrams from the remote host into guest 0, with `p.restarts` restarts
/// during them when `with`.
fn udp_leg(info: &RunInfo, p: &Params, with: bool, progress: &Progress) -> Result<UdpLeg> {
    let exe = std::env::current_exe()?;
    let g0 = Netns::open(&info.guest_ns[0])?;
    let remote = Netns::open(&info.remote_ns)?;
    let mut server = measure::start_builtin_server_on(&exe, &g0, RX_CPU, UDP_PORT, true)?;
    measure::wait_listening_on(&g0, &mut server, UDP_PORT)?;
    leg_phase(progress, p, "paced UDP into guest 0", with);
    let mut cmd = [child::pinned(remote.command(&exe), TX_CPU)];
    cmd[0].args([
        "perf",
        "udp-stream",
        &info.guest_addrs[0],
        "--port",
        &UDP_PORT.to_string(),
        "--size",
        &p.udp_size.to_string(),
        "--rate",
        &format!("{}pps", p.udp_pps),
        "--duration",
        &p.stream_seconds.to_string(),
    ]);
    let (outs, restarts, err) =
        senders_through_restarts(&mut cmd, "the UDP sender", info, p, with)?;
    let mut leg = UdpLeg {
        restarts,
        errors: err.into_iter().collect(),
        ..UdpLeg::default()
    };
    drop(server);
    let o = &outs[0];
    match serde_json::from_slice::<pvnet_perf::udp::UdpOutcome>(&o.stdout) {
        Ok(v) => {
            leg.sent = v.receiver.sent;
            leg.lost = v.receiver.lost;
            leg.corrupt = v.receiver.corrupt;
            leg.pps = v.sender.pps;
            if leg.corrupt > 0 {
                leg.errors
                    .push(format!("{} datagrams arrived corrupt", leg.corrupt));
            }
        }
        Err(e) => leg.errors.push(format!(
            "the UDP stream failed: {} ({e})",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
    }
    Ok(leg)
}

/// The daemon's account at the end of a repetition: every restart counted, two reconnections
/// for each, and the frontends' counters.
fn account(info: &RunInfo, s: &mut RestartSample) -> Result<()> {
    let u = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    // The frontends report their counters to the daemon every half second or so (later on a
    // busy CPU): wait until they have reported the last reconnection (a counter missing here
    // waits out the deadline, then is an error below).
    let deadline = Instant::now() + FRONTEND_REPORT_WAIT;
    let st = loop {
        let st = admin::stat(&info.id)?;
        let vifs = st["vifs"].as_array().map(Vec::as_slice).unwrap_or_default();
        let reported: u64 = vifs.iter().map(|v| u(&v["netfront"]["reconnects"])).sum();
        if reported >= u(&st["restart"]["reconnections"]) || Instant::now() > deadline {
            break st;
        }
        interrupt::check()?;
        std::thread::sleep(Duration::from_millis(50));
    };
    // From here every counter is read strictly: one the daemon does not report is an error
    // in the sample, never a 0 that would read as "nothing lost".
    let errors = &mut s.errors;
    s.restarts_counted = counter(&st["restart"], "restarts", "the daemon's `restart`", errors);
    s.reconnections_counted = counter(
        &st["restart"],
        "reconnections",
        "the daemon's `restart`",
        errors,
    );
    let made =
        (s.idle.len() + s.tcp_restarts.restarts.len() + s.udp_restarts.restarts.len()) as u64;
    let vifs = info.guest_pids.len() as u64;
    if s.restarts_counted != made || s.reconnections_counted != made * vifs {
        errors.push(format!(
            "the daemon counts {} restarts and {} reconnections; the bench made {made} restarts of {vifs} vifs",
            s.restarts_counted, s.reconnections_counted
        ));
    }
    let Some(reported) = st["vifs"].as_array() else {
        errors.push("the daemon's stat has no `vifs`".into());
        return Ok(());
    };
    for v in reported {
        let nf = &v["netfront"];
        let who = format!("vif {}'s frontend", v["domid"]);
        let f = &mut s.frontends;
        f.disconnects += counter(nf, "disconnects", &who, errors);
        f.reconnects += counter(nf, "reconnects", &who, errors);
        f.tx_reposted += counter(nf, "tx_reposted", &who, errors);
        f.tx_lost_at_disconnect += counter(nf, "tx_lost_at_disconnect", &who, errors);
        f.grants_leaked += counter(nf, "grants_leaked", &who, errors);
        if v["state"].as_str() != Some("connected") {
            errors.push(format!("vif {} ended {}", v["domid"], v["state"]));
        }
    }
    if s.frontends.reconnects != s.reconnections_counted {
        s.errors.push(format!(
            "the frontends report {} reconnections, the daemon counts {} ({} s after the last)",
            s.frontends.reconnects,
            s.reconnections_counted,
            FRONTEND_REPORT_WAIT.as_secs()
        ));
    }
    Ok(())
}

/// `v[key]` as a count. One that is missing or not a count is pushed to `errors`, naming
/// `whose` it should have been, and counts 0.
fn counter(v: &serde_json::Value, key: &str, whose: &str, errors: &mut Vec<String>) -> u64 {
    v[key].as_u64().unwrap_or_else(|| {
        errors.push(format!("{whose} reports no counter `{key}` ({})", v[key]));
        0
    })
}

/// One figure of a repetition (None where it does not apply or the leg failed).
type Fig<'a> = &'a dyn Fn(&RestartSample) -> Option<f64>;

/// The scenario's table: rows = figures, columns = configurations.
pub fn table(run: &RestartRun) -> Table {
    let cols = &run.configs;
    let med = |c: &str, f: Fig| -> Option<f64> {
        let v: Vec<f64> = run.of(c).filter_map(f).collect();
        median(&v)
    };
    let row = |label: &str, f: Fig, d: usize| -> (String, Vec<String>) {
        (
            label.to_string(),
            cols.iter().map(|c| fmt(med(c, f), d)).collect(),
        )
    };
    type Pick = for<'a> fn(&'a RestartSample) -> Vec<&'a Restart>;
    let over = |label: &str,
                pick: Pick,
                stat: fn(&[f64]) -> Option<f64>,
                figure: fn(&Restart) -> f64,
                d: usize| {
        (
            label.to_string(),
            cols.iter()
                .map(|c| {
                    let v: Vec<f64> = run.restarts(c, pick).map(figure).collect();
                    fmt(stat(&v), d)
                })
                .collect::<Vec<_>>(),
        )
    };
    let idle: Pick = |s| s.idle.iter().collect();
    let tcp: Pick = |s| s.tcp_restarts.restarts.iter().collect();
    let all: Pick = |s| {
        (s.idle.iter())
            .chain(&s.tcp_restarts.restarts)
            .chain(&s.udp_restarts.restarts)
            .collect()
    };
    let max = |v: &[f64]| v.iter().copied().max_by(f64::total_cmp);
    let sum = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum());
    let figure = |leg: fn(&RestartSample) -> &TcpLeg, name: &'static str, f: fn(&Flow) -> f64| {
        move |s: &RestartSample| leg(s).flows.iter().find(|x| x.flow == name).map(f)
    };
    let flow = |leg, name| figure(leg, name, |f| f.throughput_mbps);
    let resent = |leg, name| figure(leg, name, |f| f.retrans_segs as f64);
    let quiet: fn(&RestartSample) -> &TcpLeg = |s| &s.tcp_quiet;
    let with: fn(&RestartSample) -> &TcpLeg = |s| &s.tcp_restarts;
    let rows = vec![
        over(
            "reconnection, idle: median (ms)",
            idle,
            median,
            |r| r.reconnect_ms,
            1,
        ),
        over("  slowest (ms)", idle, max, |r| r.reconnect_ms, 1),
        over(
            "reconnection under two TCP streams: median (ms)",
            tcp,
            median,
            |r| r.reconnect_ms,
            1,
        ),
        over("  slowest (ms)", tcp, max, |r| r.reconnect_ms, 1),
        over(
            "driver domain down, all restarts: median (ms)",
            all,
            median,
            |r| r.down_ms,
            1,
        ),
        over(
            "packets dropped with the old backends, all restarts",
            all,
            sum,
            |r| r.queued_packets_dropped as f64,
            0,
        ),
        row(
            "TCP streams through restarts intact %",
            &|s| {
                let f = &s.tcp_restarts.flows;
                (!f.is_empty())
                    .then(|| 100.0 * f.iter().filter(|f| f.intact).count() as f64 / f.len() as f64)
            },
            0,
        ),
        row(
            "into guest 0, no restart (Mbit/s)",
            &flow(quiet, "remote→g0"),
            0,
        ),
        row(
            "  through the restarts (Mbit/s)",
            &flow(with, "remote→g0"),
            0,
        ),
        row(
            "out of guest 1, no restart (Mbit/s)",
            &flow(quiet, "g1→remote"),
            0,
        ),
        row(
            "  through the restarts (Mbit/s)",
            &flow(with, "g1→remote"),
            0,
        ),
        row(
            "segments resent into guest 0, no restart",
            &resent(quiet, "remote→g0"),
            0,
        ),
        row("  through the restarts", &resent(with, "remote→g0"), 0),
        row(
            "segments resent out of guest 1, no restart",
            &resent(quiet, "g1→remote"),
            0,
        ),
        row("  through the restarts", &resent(with, "g1→remote"), 0),
        row(
            "UDP into guest 0: out per restart (ms)",
            &|s| s.udp_outage_ms(),
            1,
        ),
        row(
            "TX frames posted again, per repetition",
            &|s| Some(s.frontends.tx_reposted as f64),
            0,
        ),
        row(
            "TX frames given up, per repetition",
            &|s| Some(s.frontends.tx_lost_at_disconnect as f64),
            0,
        ),
        row(
            "grants leaked, per repetition",
            &|s| Some(s.frontends.grants_leaked as f64),
            0,
        ),
    ];
    Table {
        title: format!(
            "Driver-domain restart: {} restarts idle, under two verified TCP streams, under paced UDP, two guests (medians over repetitions)",
            run.params.restarts
        ),
        columns: cols.clone(),
        rows,
    }
}

/// The two goals, judged over the whole run.
pub fn verdicts(run: &RestartRun) -> String {
    let slowest = run.slowest_reconnect_ms();
    let (ok, n) = run.intact_through_restarts();
    let restarts: usize = (run.samples.iter())
        .map(|s| s.idle.len() + s.tcp_restarts.restarts.len() + s.udp_restarts.restarts.len())
        .sum();
    format!(
        "goal, every reconnection under {GOAL_RECONNECT_MS:.0} ms: {} (slowest {} ms of {restarts} restarts)\ngoal, every TCP stream through the restarts intact: {} ({ok} of {n})",
        match slowest {
            Some(ms) if ms < GOAL_RECONNECT_MS => "holds",
            Some(_) => "fails",
            None => "not measured",
        },
        fmt(slowest, 1),
        match n {
            0 => "not measured",
            _ if ok == n => "holds",
            _ => "fails",
        },
    )
}

/// `scenario-restart.md`: how it was run, the table, the goals, and any errors.
pub fn markdown(run: &RestartRun, table: &Table) -> String {
    let p = &run.params;
    let mut s = format!(
        "# pvnet bench --scenario restart\n\n{}- configurations: {}; {} repetition(s) of each, interleaved, each on a fresh two-guest testbed\n- per repetition: {} restarts idle; a verified TCP stream into guest 0 and one out of guest 1 ({}-byte sends) for {} s, without restarts and with {} spread over it; paced UDP into guest 0 ({} datagrams of {} bytes a second) for {} s, without and with {} restarts; the legs without and with restarts alternate which goes first\n- each restart is `pvnet restart-dd`'s, waited for until every frontend has reconnected; the reconnection counts from the restart's start to the last vif's reconnection\n- receiving CPU {RX_CPU}: driver domain, both guests, the stream out of guest 1; CPU {TX_CPU}: the remote host's senders and receiver\n\n{}\n{}\n",
        run.header.markdown(),
        (run.configs.iter())
            .map(|c| format!("`{c}` ({})", configs::describe(c)))
            .collect::<Vec<_>>()
            .join(", "),
        p.reps,
        p.restarts,
        p.msg_size,
        p.stream_seconds,
        p.restarts,
        p.udp_pps,
        p.udp_size,
        p.stream_seconds,
        p.restarts,
        table.markdown(),
        verdicts(run)
            .lines()
            .map(|l| format!("- {l}"))
            .collect::<Vec<_>>()
            .join("\n"),
    );
    let errors: Vec<String> = (run.samples.iter())
        .flat_map(|x| {
            (x.all_errors().into_iter()).map(move |e| format!("- {} rep {}: {e}", x.config, x.rep))
        })
        .collect();
    push_errors(&mut s, &errors);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_configurations_are_those_restart_dd_serves() {
        assert_eq!(parse_configs(DEFAULT_CONFIGS).unwrap(), ["xen", "adaptive"]);
        assert_eq!(
            parse_configs("persistent,map,route").unwrap(),
            ["persistent", "map", "route"]
        );
        let err = |s: &str| format!("{:#}", parse_configs(s).unwrap_err());
        for bad in ["linux", "relay", "hvm", "flip", "premapped"] {
            assert!(err(bad).contains("is not one"), "{bad}: {}", err(bad));
        }
        for bad in ["xen/g2", "adaptive@tx"] {
            assert!(
                err(bad).contains("without @tx or /gN"),
                "{bad}: {}",
                err(bad)
            );
        }
        assert!(err("warp").contains("unknown configuration"));
    }

    #[test]
    fn retransmissions_are_read_from_the_tcp_lines() {
        let snmp = "Ip: Forwarding DefaultTTL\nIp: 1 64\nTcp: RtoAlgorithm RtoMin ActiveOpens RetransSegs InErrs\nTcp: 1 200 7 4321 0\nUdp: InDatagrams\nUdp: 5\n";
        assert_eq!(parse_retrans(snmp), Some(4321));
        assert_eq!(parse_retrans("Tcp: RtoAlgorithm\nTcp: 1\n"), None);
        assert_eq!(parse_retrans(""), None);
    }

    #[test]
    fn the_daemons_account_of_a_restart_is_read_once_timed() {
        let v = serde_json::json!({"restarts": 1, "last": {
            "at_uptime_s": 3.0, "down_ms": 60.0, "teardown_ms": 50.0, "ports_ms": 10.0,
            "vifs": 2, "reconnected": 2, "reconnect_ms": 64.5, "queued_packets_dropped": 7}});
        let r = Restart::from_stat(&v).unwrap();
        assert_eq!(
            (r.reconnect_ms, r.down_ms, r.vifs, r.queued_packets_dropped),
            (64.5, 60.0, 2, 7)
        );
        let pending =
            serde_json::json!({"last": {"vifs": 2, "reconnected": 1, "reconnect_ms": null}});
        assert!(format!("{:#}", Restart::from_stat(&pending).unwrap_err()).contains("not timed"));
    }

    fn restart(ms: f64) -> Restart {
        Restart {
            reconnect_ms: ms,
            down_ms: ms - 5.0,
            vifs: 2,
            reconnected: 2,
            queued_packets_dropped: 3,
            ..Restart::default()
        }
    }

    fn flows(into_mbps: f64, retrans: u64, intact: bool) -> Vec<Flow> {
        vec![
            Flow {
                flow: "remote→g0".into(),
                bytes: 1000,
                throughput_mbps: into_mbps,
                intact,
                retrans_segs: retrans,
            },
            Flow {
                flow: "g1→remote".into(),
                bytes: 1000,
                throughput_mbps: 100.0,
                intact: true,
                retrans_segs: 0,
            },
        ]
    }

    fn sample(config: &str, rep: usize, ms: f64, lost: u64, intact: bool) -> RestartSample {
        RestartSample {
            config: config.into(),
            rep,
            idle: vec![restart(ms), restart(ms + 10.0)],
            tcp_quiet: TcpLeg {
                flows: flows(1000.0, 2, true),
                ..TcpLeg::default()
            },
            tcp_restarts: TcpLeg {
                restarts: vec![restart(2.0 * ms), restart(3.0 * ms)],
                flows: flows(800.0, 402, intact),
                ..TcpLeg::default()
            },
            udp_quiet: UdpLeg {
                sent: 4000,
                lost: 10,
                pps: 2000.0,
                ..UdpLeg::default()
            },
            udp_restarts: UdpLeg {
                restarts: vec![restart(ms), restart(ms)],
                sent: 4000,
                lost: 10 + lost,
                pps: 2000.0,
                ..UdpLeg::default()
            },
            frontends: Frontends {
                tx_reposted: 5,
                ..Frontends::default()
            },
            ..RestartSample::default()
        }
    }

    fn run_of(samples: Vec<RestartSample>) -> RestartRun {
        RestartRun {
            scenario: "restart",
            header: RunHeader::default(),
            params: Params {
                reps: 2,
                stream_seconds: 1.0,
                restarts: 2,
                msg_size: 1,
                udp_size: UDP_SIZE,
                udp_pps: UDP_PPS,
                port: configs::PortParams {
                    ring_frames: None,
                    port_queues: None,
                    ring_prefetch: None,
                    budget: None,
                    mtu: 1500,
                },
            },
            configs: vec!["xen".into(), "adaptive".into()],
            samples,
        }
    }

    #[test]
    fn the_table_takes_every_restart_and_the_losses_beyond_the_quiet_legs() {
        let s = sample("xen", 1, 100.0, 400, true);
        // 400 datagrams beyond the quiet leg's 10, at 2000/s over 2 restarts: 100 ms each.
        assert_eq!(s.udp_outage_ms(), Some(100.0));
        let mut failed = s.clone();
        failed.udp_restarts.errors.push("no report".into());
        assert_eq!(failed.udp_outage_ms(), None);

        let run = run_of(vec![
            s,
            sample("adaptive", 1, 50.0, 200, true),
            sample("xen", 2, 120.0, 600, false),
            sample("adaptive", 2, 70.0, 0, true),
        ]);
        let t = table(&run);
        assert_eq!(t.columns, ["xen", "adaptive"]);
        let cell = |label: &str| {
            (t.rows.iter().find(|(l, _)| l == label))
                .unwrap_or_else(|| panic!("{label} in {t:?}"))
                .1
                .clone()
        };
        // Idle reconnections of xen: 100, 110, 120, 130; adaptive: 50, 60, 70, 80.
        assert_eq!(cell("reconnection, idle: median (ms)"), ["115.0", "65.0"]);
        // Under TCP, xen: 200, 300, 240, 360; adaptive: 100, 150, 140, 210.
        assert_eq!(
            cell("reconnection under two TCP streams: median (ms)"),
            ["270.0", "145.0"]
        );
        assert_eq!(t.rows[3].1, ["360.0", "210.0"], "the slowest under TCP");
        // Six restarts per repetition, three packets dropped with each.
        assert_eq!(
            cell("packets dropped with the old backends, all restarts"),
            ["36", "36"]
        );
        assert_eq!(cell("TCP streams through restarts intact %"), ["75", "100"]);
        assert_eq!(
            cell("UDP into guest 0: out per restart (ms)"),
            ["125.0", "25.0"]
        );
        assert_eq!(cell("into guest 0, no restart (Mbit/s)"), ["1000", "1000"]);
        assert_eq!(
            t.rows[8].1,
            ["800", "800"],
            "into guest 0 through the restarts"
        );
        let resent = (t.rows.iter())
            .position(|(l, _)| l == "segments resent into guest 0, no restart")
            .unwrap();
        assert_eq!(t.rows[resent].1, ["2", "2"]);
        assert_eq!(
            t.rows[resent + 1],
            (
                "  through the restarts".into(),
                vec!["402".into(), "402".into()]
            )
        );
        assert_eq!(run.slowest_reconnect_ms(), Some(360.0));
        assert_eq!(run.intact_through_restarts(), (7, 8));
        let v = verdicts(&run);
        assert!(
            v.contains("under 1000 ms: holds (slowest 360.0 ms of 24 restarts)"),
            "{v}"
        );
        assert!(v.contains("intact: fails (7 of 8)"), "{v}");
        let md = markdown(&run, &t);
        assert!(
            md.contains("| segments resent into guest 0, no restart |"),
            "{md}"
        );
        assert!(md.contains("- goal, every TCP stream"), "{md}");

        let slow = run_of(vec![sample("xen", 1, 400.0, 0, true)]);
        assert!(verdicts(&slow).contains("fails (slowest 1200.0 ms"));
        assert!(verdicts(&run_of(vec![])).contains("not measured"));
    }

    #[test]
    fn a_counter_the_daemon_does_not_report_is_an_error_not_a_zero() {
        let nf = serde_json::json!({"reconnects": 3, "grants_leaked": "many"});
        let mut errors = Vec::new();
        assert_eq!(
            counter(&nf, "reconnects", "vif 1's frontend", &mut errors),
            3
        );
        assert!(errors.is_empty());
        assert_eq!(
            counter(
                &nf,
                "tx_lost_at_disconnect",
                "vif 1's frontend",
                &mut errors
            ),
            0
        );
        assert_eq!(
            counter(&nf, "grants_leaked", "vif 1's frontend", &mut errors),
            0
        );
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors[0].contains("vif 1's frontend") && errors[0].contains("`tx_lost_at_disconnect`"),
            "{errors:?}"
        );
        assert!(errors[1].contains("`grants_leaked`"), "{errors:?}");
    }

    #[test]
    fn errors_name_their_leg() {
        let mut s = sample("xen", 1, 100.0, 0, true);
        s.tcp_restarts
            .errors
            .push("remote→g0: stream not intact".into());
        s.errors.push("vif 1 ended \"closed\"".into());
        assert_eq!(
            s.all_errors(),
            [
                "vif 1 ended \"closed\"",
                "TCP with restarts: remote→g0: stream not intact"
            ]
        );
        let md = markdown(
            &run_of(vec![s]),
            &Table {
                title: String::new(),
                columns: vec![],
                rows: vec![],
            },
        );
        assert!(md.contains("## Errors\n\n- xen rep 1: vif 1 ended"), "{md}");
    }
}
