//! One repetition of one configuration on a fresh testbed: a stream (built-in tool or iperf3)
//! with CPU accounting and TCP retransmissions, the daemon's aggregation counters, then TCP_RR.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use pvnet_perf::cpu;
use pvnet_testbed::Netns;
use serde::{Deserialize, Serialize};

use super::child::{self, Guard};
use super::configs::{self, Direction, RX_CPU, TX_CPU};
use super::hvm::{self, HvmCounters, HvmSample};
use super::progress::Progress;
use super::{interrupt, testbed};
use crate::config::{DaemonConfig, Mode};
use crate::rundir::RunInfo;

/// The receiver's TCP port in its (fresh) namespace.
pub const PORT: u16 = 5201;
/// A CPU at least this busy during the stream is the one that limits it.
pub const SATURATED: f64 = 0.90;

/// Which program moves the stream's bytes.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tool {
    /// `pvnet perf stream`: every byte verified against a pattern.
    Builtin,
    /// iperf3 (`-s` on the receiving CPU, `-c -J` on the sending CPU); bytes are not verified.
    Iperf3,
}

/// What one test measures with.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Params {
    pub stream_seconds: f64,
    pub rr_seconds: f64,
    pub msg_size: usize,
    pub tool: Tool,
    pub tsc_hz: u64,
    /// The physical port's settings (`--ring-frames`, `--port-queues`, `--ring-prefetch`,
    /// `--budget`, `--mtu`).
    #[serde(flatten)]
    pub port: configs::PortParams,
    /// Where the guests' processes and their receivers run (`--placement` with several
    /// guests).
    pub placement: GuestPlacement,
    /// `--guest-cgroups`: each guest's netfront and receiver in a CPU group of its own (None:
    /// the daemon's default).
    pub guest_cgroups: Option<bool>,
}

impl Params {
    /// `base` (a configuration's daemon) with the port's settings and `--guest-cgroups`
    /// applied.
    pub fn daemon_config(&self, base: DaemonConfig) -> DaemonConfig {
        let guest_cgroups = self.guest_cgroups.unwrap_or(base.guest_cgroups);
        DaemonConfig {
            guest_cgroups,
            ..self.port.apply(base)
        }
    }
}

/// Where the receiving side's processes run when several guests stream at once: each
/// guest's netfront process (whose TAP writes run the guest kernel's receive path) and its
/// receiver, or natively each receiver. The driver domain stays on [`RX_CPU`], the remote
/// host's senders on [`TX_CPU`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GuestPlacement {
    /// Every guest on the receiving CPU with the driver domain (the papers' receiving machine).
    #[default]
    Same,
    /// Guest `i` on CPU `i % 2`: the guests share both CPUs, half of them with the driver
    /// domain and half with the senders.
    Spread,
    /// Every guest free to run on either CPU: the kernel's scheduler places and moves them.
    Free,
}

impl GuestPlacement {
    pub fn parse(s: &str) -> Result<GuestPlacement> {
        match s {
            "same" => Ok(GuestPlacement::Same),
            "spread" => Ok(GuestPlacement::Spread),
            "free" => Ok(GuestPlacement::Free),
            _ => bail!("--placement with several guests: `same`, `spread` or `free`, not {s:?}"),
        }
    }

    /// The CPUs (a mask, CPU 0 in bit 0) of guest `i` (0-based) and of its receiver.
    pub fn cpus_of(self, i: usize) -> u64 {
        match self {
            GuestPlacement::Same => 1 << RX_CPU,
            GuestPlacement::Spread => 1 << [RX_CPU, TX_CPU][i % 2],
            GuestPlacement::Free => (1 << RX_CPU) | (1 << TX_CPU),
        }
    }
}

/// One repetition's raw figures.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Sample {
    pub config: String,
    /// 1-based; 0 for the warm-up.
    pub rep: usize,
    pub warmup: bool,
    /// The testbed's run id (its namespaces were `pvnet-<id>-*`).
    pub run_id: String,
    pub tool: String,
    pub throughput_mbps: f64,
    /// Bytes the receivers got during the streams.
    pub bytes: u64,
    /// Each guest's stream (one entry with one guest), Mbit/s.
    #[serde(default)]
    pub per_guest_mbps: Vec<f64>,
    /// Jain's fairness index of the guests' throughputs (several guests only): 1 when all
    /// got the same, 1/N when one got everything.
    #[serde(default)]
    pub jain: Option<f64>,
    /// Each guest's aggregation rate under LRO, from its vif's counters: the wire segments
    /// the packets delivered to it carried, per packet (empty without aggregation).
    #[serde(default)]
    pub per_guest_lro_rate: Vec<f64>,
    /// Bytes checked against the pattern (the built-in tool; 0 with iperf3).
    pub bytes_verified: u64,
    pub mismatches: u64,
    /// TCP segments the sender retransmitted during the stream (`Tcp: RetransSegs` of the
    /// remote host's namespace), and all it sent (`OutSegs`).
    pub retransmissions: u64,
    pub out_segments: u64,
    /// Segments the receiver reported as received twice (D-SACK, `TcpExt: TCPDSACKRecvSegs` of
    /// the remote host's namespace): retransmissions that were not needed, because the segment
    /// was reordered or delayed, not lost.
    pub dsacked_segments: u64,
    /// Frames the kernel dropped at the physical port's packet ring during the stream (PV
    /// configurations; `tp_drops` of the port's `PACKET_STATISTICS`): the ring was full, or
    /// its next slot was still leased. None natively (no port).
    pub port_drops: Option<u64>,
    /// The senders' bytes in flight (sent, not yet acknowledged), each stream's median over
    /// the stream summed over the streams: how much of the guests' data the path holds at
    /// once. None with iperf3 or a sender that did not report it.
    #[serde(default)]
    pub sender_in_flight_bytes: Option<u64>,
    /// The senders' smoothed round-trip time (µs), the median of the streams' medians.
    #[serde(default)]
    pub sender_rtt_us: Option<f64>,
    /// Busy fraction (0..1) of the receiving and the sending CPU during the stream.
    pub rx_cpu_busy: f64,
    pub tx_cpu_busy: f64,
    /// `receiver`, `sender`, `both` or `neither`: which CPU was saturated.
    pub limit: String,
    /// Busy time of the receiving CPU, and its split into driver domain and guest.
    pub cpu_busy_ns: u64,
    /// Of it, softirq: the physical port's receive path (by RPS) in the PV configurations,
    /// the whole IP and TCP receive path natively.
    pub softirq_ns: u64,
    /// The driver domain: the receiving CPU's busy time but the port's receive work
    /// ([`Sample::cycles_per_byte_port`]) and the guests' share.
    pub driver_ns: u64,
    pub guest_ns: u64,
    pub cycles_per_byte_total: f64,
    /// None in the native configurations (no domains to split into).
    pub cycles_per_byte_driver: Option<f64>,
    pub cycles_per_byte_guest: Option<f64>,
    /// CPU time of the kernel threads that polled the physical port (threaded NAPI: GRO on the
    /// port, `linux-gro` and `port-gro`), and of those that polled the guests' TAPs
    /// (`guest-gro`).
    #[serde(default)]
    pub port_napi_ns: u64,
    #[serde(default)]
    pub guest_napi_ns: u64,
    /// The physical port's receive work per byte: the softirq ticks of the receiving CPU plus
    /// the port's NAPI threads ([`Sample::port_napi_ns`]). Natively that is the whole receive
    /// path but the receiver's copy; in the PV configurations the veth's receive, GRO where
    /// on, the driver domain's stack's look at each frame and `tpacket_rcv`'s copy into the
    /// ring. With threaded NAPI off the ticks are charged to the task the softirq interrupted
    /// as well: what interrupted a guest is in `cycles_per_byte_guest` too, and the driver
    /// domain's share (the remainder) is short by that much.
    #[serde(default)]
    pub cycles_per_byte_port: f64,
    /// The daemon's own CPU time per byte (the driver domain's data path; in mode relay also
    /// the guests' TAP writes), None natively. Unlike `cycles_per_byte_driver`, which is the
    /// receiving CPU's remainder, it holds nothing of other work on a shared machine.
    #[serde(default)]
    pub cycles_per_byte_daemon: Option<f64>,
    /// What the run's own parts spent per byte, each measured by itself: the port
    /// ([`Sample::cycles_per_byte_port`]), the daemon, and the receiving side's processes
    /// (netfronts, whose TAP writes run the guests' stacks, their TAPs' NAPI threads, and the
    /// receivers; natively the receiver). The busy-time total also holds whatever else ran on
    /// the receiving CPU; this one holds the softirq ticks that interrupted one of the parts
    /// twice.
    #[serde(default)]
    pub cycles_per_byte_accounted: f64,
    /// Softirq share of `cycles_per_byte_total`. Without `CONFIG_IRQ_TIME_ACCOUNTING` (this
    /// machine's kernel) the kernel charges softirq time to the task it interrupted, so part
    /// of the physical port's softirq sits in the guest's share.
    pub cycles_per_byte_softirq: f64,
    /// Segments per aggregate during the stream (None without aggregation).
    pub lro_rate: Option<f64>,
    /// Of the aggregates that left, the share ended by a segment with PSH, in percent: where
    /// the senders' pushes, not the flush policy, set the LRO rate (None without aggregation).
    #[serde(default)]
    pub lro_psh_pct: Option<f64>,
    pub flush_latency_p50_us: Option<f64>,
    pub flush_latency_p99_us: Option<f64>,
    pub rr_tps: f64,
    pub rr_p50_us: f64,
    pub rr_p99_us: f64,
    /// Other pvnet runs that were up during the stream or TCP_RR (their load skews the figures).
    pub concurrent_runs: Vec<String>,
    /// Wall-clock seconds of the whole repetition, testbed set-up and teardown included.
    pub wall_seconds: f64,
    pub errors: Vec<String>,
    /// The daemon's counters right after the stream (PV configurations).
    pub stat: serde_json::Value,
    /// The HVM guests' exits, round trips, device-model CPU and context switches over the
    /// stream (HVM configurations).
    #[serde(default)]
    pub hvm: Option<HvmSample>,
}

/// Which CPU limited the stream.
pub fn limit_of(rx_busy: f64, tx_busy: f64) -> &'static str {
    match (rx_busy >= SATURATED, tx_busy >= SATURATED) {
        (true, false) => "receiver",
        (false, true) => "sender",
        (true, true) => "both",
        (false, false) => "neither",
    }
}

/// Runs one repetition of `config` on a fresh testbed, and always tears it down.
pub fn run_one(
    config: &str,
    rep: usize,
    warmup: bool,
    p: &Params,
    progress: &Progress,
) -> Result<Sample> {
    let t0 = Instant::now();
    let cfg = p.daemon_config(configs::daemon_config(config)?);
    let (mut s, info) = testbed::with_testbed(&cfg, config, progress, |info| {
        measure(
            info,
            cfg.mode,
            {
                let name = configs::Name::parse(config)?;
                (name.dir, name.guests, configs::is_g2g(config))
            },
            (cfg.hvm > 0).then_some(cfg.exit_cost_ns),
            p,
            progress,
        )
    })?;
    s.config = config.to_string();
    s.rep = rep;
    s.warmup = warmup;
    s.run_id = info.id.clone();
    s.wall_seconds = t0.elapsed().as_secs_f64();
    Ok(s)
}

fn measure(
    info: &RunInfo,
    mode: Mode,
    (dir, guests, g2g): (Direction, usize, bool),
    hvm_exit_cost: Option<u64>,
    p: &Params,
    progress: &Progress,
) -> Result<Sample> {
    let exe = std::env::current_exe()?;
    // The receiving side's hosts: the guests (one stream each), or natively the driver
    // domain's namespace, which stands for the native host (all streams there). Guest to
    // guest: guest 1 receives what guest 0 sends.
    let n = guests.max(1);
    let hosts: Vec<(String, String)> = if g2g {
        vec![(info.guest_ns[1].clone(), info.guest_addrs[1].clone())]
    } else {
        receiving_hosts(info, mode, n)
    };
    let n = hosts.len();
    let rx = Netns::open(&hosts[0].0)?;
    let rx_addr = hosts[0].1.clone();
    let remote = Netns::open(&info.remote_ns)?;
    // Guest to guest, both guests are on the guests' machine (CPU 0): the sender in guest 0
    // streams to the receiver in guest 1, and the TCP_RR client runs in guest 0 too. CPU 1
    // has nothing of the test on it.
    let g2g_sender = if g2g {
        Some(Netns::open(&info.guest_ns[0])?)
    } else {
        None
    };
    let mut s = Sample {
        tool: format!("{:?}", p.tool).to_lowercase(),
        ..Sample::default()
    };

    // Streams: into each guest (rx: the senders on the remote host, CPU 1) or out of it (tx:
    // the senders in the guests, CPU 0, the receivers on the remote host). CPU 0 is the
    // guests' machine either way, and its cost per byte is what is reported. Stream i uses
    // port PORT + i.
    let mut servers = Vec::with_capacity(n);
    let mut senders = Vec::with_capacity(n);
    // Guests placed over both CPUs (`--placement`, the same at every guest count, one guest
    // included, so that N guests compare with one under the same host policy): each guest's
    // netfront (every thread) moves to its CPUs before the streams start, and its receiver
    // starts there. The driver domain stays on RX_CPU, the senders on TX_CPU.
    let placement = if g2g || dir == Direction::Tx {
        GuestPlacement::Same
    } else {
        p.placement
    };
    if placement != GuestPlacement::Same && mode != Mode::Linux {
        for (i, &pid) in info.guest_pids.iter().enumerate() {
            for t in child::tasks_of(pid) {
                child::set_affinity(t, placement.cpus_of(i))
                    .with_context(|| format!("placing guest {i}'s task {t}"))?;
            }
        }
    }
    for (i, (ns_name, addr)) in hosts.iter().enumerate() {
        let host = Netns::open(ns_name)?;
        let port = PORT + i as u16;
        let (srv_ns, srv_cpu, snd_ns, snd_cpu, dst) = match (&g2g_sender, dir) {
            (Some(g0), _) => (&host, 1 << RX_CPU, g0, RX_CPU, addr.clone()),
            (None, Direction::Rx) => (&host, placement.cpus_of(i), &remote, TX_CPU, addr.clone()),
            (None, Direction::Tx) => (
                &remote,
                1 << TX_CPU,
                &host,
                RX_CPU,
                info.remote_addr.clone(),
            ),
        };
        let mut server = match p.tool {
            Tool::Builtin => start_builtin_server_in(&exe, srv_ns, srv_cpu, port, true)?,
            Tool::Iperf3 => start_iperf3_server(srv_ns, srv_cpu, port)?,
        };
        wait_listening_on(srv_ns, &mut server, port)?;
        // A receiving guest's receiver joins its guest's CPU group (`--guest-cgroups`).
        if g2g_sender.is_none() && dir == Direction::Rx {
            join_guest_group(info, i, server.pid())?;
        }
        servers.push(server);
        senders.push(match p.tool {
            Tool::Builtin => builtin_stream_cmd(
                &exe,
                snd_ns,
                snd_cpu,
                &dst,
                port,
                p.stream_seconds,
                p.msg_size,
            ),
            Tool::Iperf3 => {
                let mut c = child::pinned(snd_ns.command("iperf3"), snd_cpu);
                c.args([
                    "-c",
                    &dst,
                    "-p",
                    &port.to_string(),
                    "-t",
                    &iperf3_seconds(p.stream_seconds).to_string(),
                    "-l",
                    &p.msg_size.to_string(),
                    "-J",
                ]);
                c
            }
        });
    }
    let mut guest_pids: Vec<i32> = info.guest_pids.clone();
    // The receivers are the guests' when they run in guests; so are the senders (below).
    let guests_receive = dir == Direction::Rx || g2g;
    let guests_send = dir == Direction::Tx || g2g;
    if guests_receive {
        guest_pids.extend(servers.iter().map(Guard::pid));
    }
    // The kernel threads of threaded NAPI: the port's (GRO on at the port), and the guests'
    // TAPs' (`guest-gro`), which run the guests' receive path.
    let port_napi = pvnet_testbed::sys::napi_threads(&info.pnic_if).unwrap_or_default();
    let guest_napi = info.guest_napi_pids.clone();
    let mut all = guest_pids.clone();
    all.push(info.pid);
    all.extend(&port_napi);
    all.extend(&guest_napi);
    // HVM guests: their counters on the quiet testbed before the stream, and their device
    // models' CPU time sampled with the rest (the device models are the driver domain's).
    let hvm_before = match hvm_exit_cost {
        Some(_) => {
            // Every process's report after its boot (and any frame before the stream).
            let st = hvm::settled_stat(&info.id)
                .ok_or_else(|| anyhow!("no `pvnet stat` for the HVM counters before the stream"))?;
            let dms = hvm::dm_pids(&st);
            all.extend(&dms);
            Some((HvmCounters::of_stat(&st), dms))
        }
        None => None,
    };
    note_others(&mut s, &info.id);
    // Retransmissions are counted where the senders are (one namespace transmitting: the
    // remote host; transmitting guests: the first guest's, and the others' summed).
    let snd_nss: Vec<Netns> = match dir {
        _ if g2g => vec![Netns::open(&info.guest_ns[0])?],
        Direction::Rx => vec![Netns::open(&info.remote_ns)?],
        Direction::Tx => {
            let mut v = Vec::new();
            for (ns, _) in &hosts {
                if !v.iter().any(|x: &Netns| x.name() == ns) {
                    v.push(Netns::open(ns)?);
                }
            }
            v
        }
    };
    let snmp_before = tcp_counters_sum(&snd_nss)?;
    let drops_before = port_drops(info, mode);
    let limit = Duration::from_secs_f64(p.stream_seconds + 30.0);
    progress.phase(
        &format!(
            "stream{}, {} {}-byte sends",
            if n > 1 {
                format!("s into {n} guests")
            } else {
                String::new()
            },
            s.tool,
            p.msg_size
        ),
        p.stream_seconds,
    );
    let what = match p.tool {
        Tool::Builtin => "the stream sender",
        Tool::Iperf3 => "the iperf3 client",
    };
    // Transmitting, the senders are the guests': their CPU time is the guests' from their
    // start to their exit.
    let (mut before, mut after) = (None, None);
    let all = std::cell::RefCell::new(all);
    let outs = child::outputs_started(
        &mut senders,
        what,
        limit,
        |pids| {
            if guests_send {
                guest_pids.extend_from_slice(pids);
                all.borrow_mut().extend_from_slice(pids);
            }
            before = Some((
                cpu::sample(RX_CPU, &all.borrow())?,
                cpu::sample(TX_CPU, &[])?,
            ));
            Ok(())
        },
        || {
            after = Some((
                cpu::sample(RX_CPU, &all.borrow())?,
                cpu::sample(TX_CPU, &[])?,
            ));
            Ok(())
        },
    )?;
    let (rx_before, tx_before) = before.expect("sampled when the senders started");
    let (rx_after, tx_after) = after.expect("sampled when the senders ended");
    let snmp_after = tcp_counters_sum(&snd_nss)?;
    drop(servers);
    let mut rtts = Vec::new();
    for out in &outs {
        let mut one = Sample::default();
        match p.tool {
            Tool::Builtin => parse_builtin_stream(out, &mut one),
            Tool::Iperf3 => parse_iperf3_stream(out, &mut one),
        }
        if let Some(b) = one.sender_in_flight_bytes {
            *s.sender_in_flight_bytes.get_or_insert(0) += b;
        }
        rtts.extend(one.sender_rtt_us);
        s.bytes += one.bytes;
        s.bytes_verified += one.bytes_verified;
        s.mismatches += one.mismatches;
        s.throughput_mbps += one.throughput_mbps;
        s.per_guest_mbps.push(one.throughput_mbps);
        s.errors.extend(one.errors);
    }
    if n > 1 {
        s.jain = Some(jain(&s.per_guest_mbps));
    }
    rtts.sort_by(f64::total_cmp);
    s.sender_rtt_us = rtts.get(rtts.len() / 2).copied();
    s.retransmissions = snmp_after.retrans.saturating_sub(snmp_before.retrans);
    s.out_segments = snmp_after.out.saturating_sub(snmp_before.out);
    s.dsacked_segments = snmp_after.dsacked.saturating_sub(snmp_before.dsacked);

    let d = cpu::delta(&rx_before, &rx_after);
    s.rx_cpu_busy = d.utilization();
    s.tx_cpu_busy = cpu::delta(&tx_before, &tx_after).utilization();
    s.limit = limit_of(s.rx_cpu_busy, s.tx_cpu_busy).to_string();
    s.cpu_busy_ns = d.busy_ns;
    s.softirq_ns = d.softirq_ns.min(d.busy_ns);
    let cpb = |ns: u64| {
        if s.bytes == 0 {
            0.0
        } else {
            ns as f64 * p.tsc_hz as f64 / 1e9 / s.bytes as f64
        }
    };
    s.cycles_per_byte_total = cpb(s.cpu_busy_ns);
    s.cycles_per_byte_softirq = cpb(s.softirq_ns);
    let pid_ns = |pid: i32| {
        d.pid_ns
            .iter()
            .find(|(q, _)| *q == pid)
            .map(|(_, n)| *n)
            .unwrap_or(0)
    };
    s.port_napi_ns = port_napi.iter().map(|q| pid_ns(*q)).sum();
    s.guest_napi_ns = guest_napi.iter().map(|q| pid_ns(*q)).sum();
    let port_ns = (s.softirq_ns + s.port_napi_ns).min(d.busy_ns);
    s.cycles_per_byte_port = cpb(port_ns);
    let daemon_ns = if mode == Mode::Linux {
        0
    } else {
        pid_ns(info.pid)
    };
    let receiving_ns = guest_pids.iter().map(|q| pid_ns(*q)).sum::<u64>() + s.guest_napi_ns;
    s.cycles_per_byte_daemon = (mode != Mode::Linux).then(|| cpb(daemon_ns));
    s.cycles_per_byte_accounted = cpb(port_ns + daemon_ns + receiving_ns);
    if mode == Mode::Xen {
        // The guest: its netfront process (whose TAP writes run the guest kernel's receive
        // path), the threads polling its TAP (guest-gro) and the receiver; the driver domain:
        // the rest of the receiving CPU but the port's receive work.
        // The kernel charges the port's softirq to whatever task it interrupted (the
        // netfront or the daemon) as well as to the softirq count, so the two tasks' times
        // can add up to more than the port leaves. Then the rest is shared between them in
        // proportion to their own times, rather than all of it to one (which showed the
        // other as 0.00).
        let rest = d.busy_ns - port_ns;
        let guest_raw = guest_pids.iter().map(|q| pid_ns(*q)).sum::<u64>() + s.guest_napi_ns;
        s.guest_ns = split_rest(rest, guest_raw, daemon_ns);
        s.driver_ns = rest - s.guest_ns;
        s.cycles_per_byte_driver = Some(cpb(s.driver_ns));
        s.cycles_per_byte_guest = Some(cpb(s.guest_ns));
    }
    // The relay has no domains to split into: the daemon's TAP writes run the guest kernel's
    // receive path, so only the total means anything.
    if let (Some(exit_cost_ns), Some((before, dms))) = (hvm_exit_cost, &hvm_before) {
        // The last report of every HVM process after the stream's last frame.
        s.stat = hvm::settled_stat(&info.id).unwrap_or_default();
        match (before, HvmCounters::of_stat(&s.stat)) {
            (Some(b), Some(a)) => {
                s.hvm = Some(HvmSample {
                    counters: a.since(b),
                    bytes: s.bytes,
                    sending: dir == Direction::Tx,
                    wall_ns: d.wall_ns,
                    dm_window_ns: (d.pid_ns.iter())
                        .filter(|(q, _)| dms.contains(q))
                        .map(|(_, n)| *n)
                        .sum(),
                    exit_cost_ns,
                })
            }
            _ => s
                .errors
                .push("the HVM guests' counters were missing from `pvnet stat`".into()),
        }
    }
    if mode != Mode::Linux {
        if s.hvm.is_none() {
            s.stat = crate::admin::stat(&info.id).unwrap_or_default();
        }
        s.port_drops = drops_of(&s.stat)
            .zip(drops_before)
            .map(|(a, b)| a.saturating_sub(b));
        let l = &s.stat["lro"];
        if l.is_object() {
            match serde_json::from_value::<LroView>(l.clone()) {
                Ok(v) => {
                    s.lro_rate = Some(v.lro_rate);
                    s.lro_psh_pct = v.psh_pct();
                    s.per_guest_lro_rate = per_guest_lro_rate(&s.stat);
                    s.flush_latency_p50_us = Some(v.flush_latency.p50_us);
                    s.flush_latency_p99_us = Some(v.flush_latency.p99_us);
                }
                Err(e) => s.errors.push(format!("the daemon's lro counters: {e}")),
            }
        }
    }
    interrupt::check()?;

    // Request/response: always the built-in tool (iperf3 has no TCP_RR).
    let mut server = start_builtin_server(&exe, &rx, RX_CPU, true)?;
    wait_listening(&rx, &mut server)?;
    progress.phase("TCP_RR", p.rr_seconds);
    note_others(&mut s, &info.id);
    match rr_client(
        g2g_sender.as_ref().unwrap_or(&remote),
        &exe,
        &rx_addr,
        p.rr_seconds,
    )? {
        Ok(r) => {
            s.rr_tps = r.tps;
            s.rr_p50_us = r.p50_us;
            s.rr_p99_us = r.p99_us;
        }
        Err(e) => s.errors.push(e),
    }
    drop(server);
    Ok(s)
}

/// The kernel's drops at the physical port so far (PV configurations), from the daemon.
fn port_drops(info: &RunInfo, mode: Mode) -> Option<u64> {
    if mode == Mode::Linux {
        return None;
    }
    crate::admin::stat(&info.id)
        .ok()
        .and_then(|st| drops_of(&st))
}

/// `pnic.kernel_drops` of a `pvnet stat` answer.
fn drops_of(stat: &serde_json::Value) -> Option<u64> {
    stat["pnic"]["kernel_drops"].as_u64()
}

/// One TCP_RR run's figures.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RrResult {
    pub tps: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub transactions: u64,
}

/// Runs the built-in TCP_RR client on the sending CPU in `remote` against `rx_addr`:[`PORT`]
/// for `seconds`. Err: it could not run (or Ctrl-C); Ok(Err): it ran and failed, or counted
/// errors, with the message for the report.
pub fn rr_client(
    remote: &Netns,
    exe: &Path,
    rx_addr: &str,
    seconds: f64,
) -> Result<Result<RrResult, String>> {
    let out = child::output(
        child::pinned(remote.command(exe), TX_CPU).args([
            "perf",
            "rr",
            rx_addr,
            "--port",
            &PORT.to_string(),
            "--duration",
            &seconds.to_string(),
        ]),
        "the TCP_RR client",
        Duration::from_secs_f64(seconds + 30.0),
    )?;
    let v = match serde_json::from_slice::<pvnet_perf::RrReport>(&out.stdout) {
        Ok(v) => v,
        Err(e) => {
            return Ok(Err(format!(
                "TCP_RR failed: {} ({e})",
                String::from_utf8_lossy(&out.stderr).trim()
            )))
        }
    };
    if v.errors > 0 {
        return Ok(Err(format!("TCP_RR reported {} errors", v.errors)));
    }
    Ok(Ok(RrResult {
        tps: v.tps,
        p50_us: v.p50_us,
        p90_us: v.p90_us,
        p99_us: v.p99_us,
        transactions: v.transactions,
    }))
}

/// Records the other pvnet runs that are up besides `own`.
fn note_others(s: &mut Sample, own: &str) {
    for id in crate::rundir::live_runs() {
        if id != own && !s.concurrent_runs.contains(&id) {
            s.concurrent_runs.push(id);
        }
    }
}

/// iperf3 takes whole seconds.
pub fn iperf3_seconds(s: f64) -> u64 {
    (s.ceil() as u64).max(1)
}

pub(super) fn parse_builtin_stream(out: &std::process::Output, s: &mut Sample) {
    let text = String::from_utf8_lossy(&out.stdout);
    match serde_json::from_str::<pvnet_perf::StreamResult>(text.trim()) {
        Ok(v) => {
            s.bytes = v.receiver.bytes;
            s.bytes_verified = s.bytes;
            s.mismatches = v.receiver.mismatches;
            s.throughput_mbps = v.receiver.mbps;
            if let Some(t) = v.sender.filter(|t| t.samples > 0) {
                s.sender_in_flight_bytes = Some(t.in_flight_bytes);
                s.sender_rtt_us = Some(f64::from(t.rtt_us));
            }
            if v.sent != s.bytes || s.mismatches != 0 {
                s.errors.push(format!(
                    "stream not intact: sent {}, verified {}, {} mismatches",
                    v.sent, s.bytes, s.mismatches
                ));
            }
        }
        Err(e) => s.errors.push(format!(
            "stream failed: {} ({e})",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
}

/// The part of `iperf3 --json`'s output the bench reads.
#[derive(Deserialize)]
struct Iperf3 {
    error: Option<String>,
    end: Option<Iperf3End>,
}

#[derive(Deserialize)]
struct Iperf3End {
    sum_received: Iperf3Sum,
}

#[derive(Deserialize)]
struct Iperf3Sum {
    bytes: u64,
    bits_per_second: f64,
}

/// The part of `pvnet stat`'s aggregation counters the bench reads (`lro` in the answer).
#[derive(Deserialize)]
struct LroView {
    lro_rate: f64,
    flush_latency: LatencyView,
    #[serde(default)]
    aggregates_out: u64,
    /// Aggregates (and refused frames) by the reason they left.
    #[serde(default)]
    flush: std::collections::BTreeMap<String, u64>,
}

impl LroView {
    /// Percent of the aggregates that left at a PSH (None before any left).
    fn psh_pct(&self) -> Option<f64> {
        let psh = self.flush.get(pvnet_dd::lro::Reason::Psh.name());
        let psh = psh.copied().unwrap_or(0);
        (self.aggregates_out > 0).then(|| 100.0 * psh as f64 / self.aggregates_out as f64)
    }
}

/// Each vif's wire segments per packet delivered (`netback.rx_segments / rx_packets` in
/// `pvnet stat`), for the vifs that received anything; empty from a daemon without the counter.
fn per_guest_lro_rate(stat: &serde_json::Value) -> Vec<f64> {
    let Some(vifs) = stat["vifs"].as_array() else {
        return Vec::new();
    };
    (vifs.iter())
        .filter_map(|v| {
            let nb = &v["netback"];
            let (segs, pkts) = (nb["rx_segments"].as_u64()?, nb["rx_packets"].as_u64()?);
            (pkts > 0).then(|| segs as f64 / pkts as f64)
        })
        .collect()
}

#[derive(Deserialize)]
struct LatencyView {
    p50_us: f64,
    p99_us: f64,
}

fn parse_iperf3_stream(out: &std::process::Output, s: &mut Sample) {
    match serde_json::from_slice::<Iperf3>(&out.stdout) {
        Ok(Iperf3 { error: Some(e), .. }) => s.errors.push(format!("iperf3: {e}")),
        Ok(Iperf3 { end: Some(end), .. }) => {
            s.bytes = end.sum_received.bytes;
            s.throughput_mbps = end.sum_received.bits_per_second / 1e6;
            if s.bytes == 0 {
                s.errors.push("iperf3 reported no bytes received".into());
            }
        }
        Ok(_) => s
            .errors
            .push("iperf3 reported neither a result nor an error".into()),
        Err(e) => s.errors.push(format!(
            "iperf3 failed: {} ({e})",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
}

/// The namespace and address of each of `n` streams' receivers: guest `i`'s for stream `i`
/// on the PV path, natively the driver domain's namespace (the native host) for all of them.
pub fn receiving_hosts(info: &RunInfo, mode: Mode, n: usize) -> Vec<(String, String)> {
    match mode {
        Mode::Linux => vec![(info.dd_ns.clone(), info.dd_addr.clone()); n],
        Mode::Xen | Mode::Relay => (0..n)
            .map(|i| (info.guest_ns[i].clone(), info.guest_addrs[i].clone()))
            .collect(),
    }
}

/// Puts guest `i`'s receiver (process `pid`) in the guest's CPU group, when the run has
/// groups (`--guest-cgroups`).
pub fn join_guest_group(info: &RunInfo, i: usize, pid: i32) -> Result<()> {
    if let Some(dir) = info.guest_cgroups.get(i) {
        crate::cgroup::join(Path::new(dir), pid as u32)
            .with_context(|| format!("putting guest {i}'s receiver in its cgroup"))?;
    }
    Ok(())
}

/// Jain's fairness index of `x`: (Σx)² / (n · Σx²).
pub fn jain(x: &[f64]) -> f64 {
    let sum: f64 = x.iter().sum();
    let sq: f64 = x.iter().map(|v| v * v).sum();
    if x.is_empty() || sq == 0.0 {
        return 0.0;
    }
    sum * sum / (x.len() as f64 * sq)
}

/// `pvnet perf stream` from namespace `from`, pinned to `cpu`, to `to`:`port` for `seconds`
/// in `msg_size`-byte sends (every byte verified by the receiver).
pub fn builtin_stream_cmd(
    exe: &Path,
    from: &Netns,
    cpu: usize,
    to: &str,
    port: u16,
    seconds: f64,
    msg_size: usize,
) -> std::process::Command {
    let mut c = child::pinned(from.command(exe), cpu);
    c.args([
        "perf",
        "stream",
        to,
        "--port",
        &port.to_string(),
        "--duration",
        &seconds.to_string(),
        "--msg-size",
        &msg_size.to_string(),
    ]);
    c
}

/// The built-in receiver on the receiving CPU: for one connection (`once`), or until dropped.
pub fn start_builtin_server(exe: &Path, rx: &Netns, cpu: usize, once: bool) -> Result<Guard> {
    start_builtin_server_on(exe, rx, cpu, PORT, once)
}

/// [`start_builtin_server`] on `port`.
pub fn start_builtin_server_on(
    exe: &Path,
    rx: &Netns,
    cpu: usize,
    port: u16,
    once: bool,
) -> Result<Guard> {
    start_builtin_server_in(exe, rx, 1 << cpu, port, once)
}

/// [`start_builtin_server_on`] allowed on the CPUs of `mask` (CPU 0 in bit 0).
fn start_builtin_server_in(
    exe: &Path,
    rx: &Netns,
    mask: u64,
    port: u16,
    once: bool,
) -> Result<Guard> {
    let bind = format!("0.0.0.0:{port}");
    let mut args = vec!["perf", "server", "--bind", &bind];
    if once {
        args.push("--once");
    }
    let mut cmd = child::pinned_mask(rx.command(exe), mask);
    share_pattern(&mut cmd);
    let c = cmd
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting the receiver (pvnet perf server)")?;
    Ok(Guard(c))
}

/// Lets a receiver use the bench's one copy of the content pattern
/// ([`pvnet_perf::pattern::shared_memfd`]) instead of a private one: eight receivers on the
/// receiving CPU would otherwise keep eight copies of the same 128 KiB in its cache, a cost of
/// the measurement that grows with the guests. Without the memfd (it could not be made) the
/// receiver generates its own, as before.
fn share_pattern(cmd: &mut std::process::Command) {
    use std::os::fd::{AsRawFd, OwnedFd};
    use std::os::unix::process::CommandExt;
    static FD: std::sync::OnceLock<Option<OwnedFd>> = std::sync::OnceLock::new();
    let fd = FD.get_or_init(|| match pvnet_perf::pattern::shared_memfd() {
        Ok(fd) => Some(fd),
        Err(e) => {
            eprintln!("pvnet bench: no shared pattern table for the receivers ({e})");
            None
        }
    });
    let Some(fd) = fd else { return };
    let n = fd.as_raw_fd();
    cmd.env(pvnet_perf::pattern::SHARED_FD_ENV, n.to_string());
    // SAFETY: only fcntl, which is async-signal-safe, between fork and exec: it clears
    // FD_CLOEXEC on the child's copy of the memfd, which the static keeps open in the parent.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(n, libc::F_SETFD, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

fn start_iperf3_server(rx: &Netns, mask: u64, port: u16) -> Result<Guard> {
    let c = child::pinned_mask(rx.command("iperf3"), mask)
        .args(["-s", "-1", "-p", &port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting the receiver (iperf3 -s)")?;
    Ok(Guard(c))
}

/// Waits until the receiver listens on [`PORT`] in its namespace: read from the namespace's
/// socket table, so no probe connection disturbs a one-test server.
pub fn wait_listening(rx: &Netns, server: &mut Guard) -> Result<()> {
    wait_listening_on(rx, server, PORT)
}

/// [`wait_listening`] on `port`.
pub fn wait_listening_on(rx: &Netns, server: &mut Guard, port: u16) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if rx.run(|| listening(port))?? {
            return Ok(());
        }
        if let Some(why) = server.exited() {
            bail!(
                "the receiver in {} exited before it listened on port {port} ({why})",
                rx.name()
            );
        }
        interrupt::check()?;
        if Instant::now() > deadline {
            bail!(
                "the receiver in {} did not listen on port {port} within 10 s",
                rx.name()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether a TCP socket listens on `port` in the calling thread's namespace.
fn listening(port: u16) -> Result<bool> {
    let want = format!(":{port:04X}");
    for f in ["tcp", "tcp6"] {
        let path = format!("/proc/thread-self/net/{f}");
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if f == "tcp6" && e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("reading {path}")),
        };
        if listening_in(&text, &want) {
            return Ok(true);
        }
    }
    Ok(false)
}

fn listening_in(table: &str, port_suffix: &str) -> bool {
    table.lines().skip(1).any(|l| {
        let mut f = l.split_whitespace();
        let local = f.nth(1).unwrap_or("");
        let state = f.nth(1).unwrap_or("");
        local.ends_with(port_suffix) && state == "0A"
    })
}

/// The TCP counters of a namespace that the bench reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpCounters {
    /// `Tcp: RetransSegs` and `OutSegs` (`/proc/net/snmp`).
    pub retrans: u64,
    pub out: u64,
    /// `TcpExt: TCPDSACKRecvSegs` (`/proc/net/netstat`).
    pub dsacked: u64,
}

/// [`tcp_counters`] summed over namespaces.
fn tcp_counters_sum(nss: &[Netns]) -> Result<TcpCounters> {
    let mut t = TcpCounters::default();
    for ns in nss {
        let c = tcp_counters(ns)?;
        t.retrans += c.retrans;
        t.out += c.out;
        t.dsacked += c.dsacked;
    }
    Ok(t)
}

fn tcp_counters(ns: &Netns) -> Result<TcpCounters> {
    let read = |file: &str| -> Result<String> {
        ns.run(|| std::fs::read_to_string(format!("/proc/thread-self/net/{file}")))?
            .with_context(|| format!("reading /proc/net/{file} in {}", ns.name()))
    };
    let (snmp, netstat) = (read("snmp")?, read("netstat")?);
    let get = |text: &str, section: &str, name: &str| {
        proc_counter(text, section, name)
            .ok_or_else(|| anyhow!("no {section} {name} in /proc/net/ of {}", ns.name()))
    };
    Ok(TcpCounters {
        retrans: get(&snmp, "Tcp:", "RetransSegs")?,
        out: get(&snmp, "Tcp:", "OutSegs")?,
        dsacked: get(&netstat, "TcpExt:", "TCPDSACKRecvSegs")?,
    })
}

/// One counter of `/proc/net/snmp` or `/proc/net/netstat`, where each section is a line of
/// names and then a line of values, both starting with the section's name (`Tcp:`, `TcpExt:`).
pub fn proc_counter(text: &str, section: &str, name: &str) -> Option<u64> {
    let mut lines = text
        .lines()
        .filter(|l| l.split_whitespace().next() == Some(section));
    let names = lines.next()?.split_whitespace();
    let values = lines.next()?.split_whitespace();
    let (_, v) = names.zip(values).skip(1).find(|(n, _)| *n == name)?;
    v.parse().ok()
}

/// The guest's share of `rest` (the receiving CPU's busy time less the port's): its own task
/// time while the guest's and the daemon's together fit in `rest`, else `rest` shared in
/// proportion to the two (both include interrupted softirq time).
fn split_rest(rest: u64, guest: u64, daemon: u64) -> u64 {
    let both = guest as u128 + daemon as u128;
    if both <= rest as u128 {
        guest
    } else {
        (rest as u128 * guest as u128 / both) as u64
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_psh_share_counts_aggregates_not_refused_frames() {
        // `pvnet stat`'s `lro` as the daemon writes it: refused frames (`no_payload`) are
        // counted among the reasons but are not aggregates.
        let v: LroView = serde_json::from_value(serde_json::json!({
            "lro_rate": 30.0,
            "flush_latency": {"p50_us": 20.0, "p99_us": 400.0, "max_us": 900.0},
            "aggregates_out": 200,
            "flush": {"psh": 150, "adaptive": 50, "no_payload": 400},
        }))
        .unwrap();
        assert_eq!(v.psh_pct(), Some(75.0));
        let none: LroView = serde_json::from_value(serde_json::json!({
            "lro_rate": 0.0,
            "flush_latency": {"p50_us": 0.0, "p99_us": 0.0},
            "aggregates_out": 0,
            "flush": {"no_payload": 3},
        }))
        .unwrap();
        assert_eq!(none.psh_pct(), None);
    }

    #[test]
    fn each_guest_s_lro_rate_is_its_vif_s_segments_per_packet() {
        let vif = |segs: u64, pkts: u64| serde_json::json!({"netback": {"rx_segments": segs, "rx_packets": pkts}});
        let stat = serde_json::json!({"vifs": [vif(4500, 100), vif(0, 0), vif(3000, 150)]});
        // A vif that received nothing has no rate, and is not a 0.
        assert_eq!(per_guest_lro_rate(&stat), [45.0, 20.0]);
        // A daemon from before the counter: no rates rather than zeros.
        let old = serde_json::json!({"vifs": [{"netback": {"rx_packets": 100}}]});
        assert!(per_guest_lro_rate(&old).is_empty());
        assert!(per_guest_lro_rate(&serde_json::json!({})).is_empty());
    }

    #[test]
    fn guests_are_placed_on_the_cpus_of_their_placement() {
        let cpus = |p: GuestPlacement| (0..4).map(|i| p.cpus_of(i)).collect::<Vec<_>>();
        let (rx, tx) = (1 << RX_CPU, 1 << TX_CPU);
        assert_eq!(cpus(GuestPlacement::Same), [rx; 4]);
        assert_eq!(cpus(GuestPlacement::Spread), [rx, tx, rx, tx]);
        assert_eq!(cpus(GuestPlacement::Free), [rx | tx; 4]);
        assert_eq!(GuestPlacement::parse("free").unwrap(), GuestPlacement::Free);
        assert!(GuestPlacement::parse("both").is_err());
    }

    #[test]
    fn the_rest_of_the_cpu_is_shared_between_guest_and_daemon_when_they_overlap() {
        // Both fit: the guest keeps its own time, the driver domain gets the rest.
        assert_eq!(split_rest(100, 30, 50), 30);
        // They add up to more than the rest (both were charged the port's softirq): shared
        // in proportion, neither shown as zero.
        assert_eq!(split_rest(100, 90, 60), 60);
        assert_eq!(split_rest(100, 0, 150), 0);
        assert_eq!(split_rest(0, 10, 10), 0);
        assert_eq!(split_rest(u64::MAX, u64::MAX, u64::MAX), u64::MAX / 2);
    }

    #[test]
    fn jain_index() {
        assert_eq!(jain(&[5.0, 5.0, 5.0, 5.0]), 1.0);
        assert_eq!(jain(&[8.0, 0.0, 0.0, 0.0]), 0.25);
        assert!((jain(&[1.0, 2.0]) - 0.9).abs() < 1e-12);
        assert_eq!(jain(&[]), 0.0);
        assert_eq!(jain(&[0.0, 0.0]), 0.0);
    }

    use super::*;

    #[test]
    fn counters_from_proc_net_tables() {
        let snmp = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
                 Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors\n\
                 Tcp: 1 200 120000 -1 3 0 0 0 1 1000 2000 7 0 0 0\n";
        assert_eq!(proc_counter(snmp, "Tcp:", "RetransSegs"), Some(7));
        assert_eq!(proc_counter(snmp, "Tcp:", "OutSegs"), Some(2000));
        assert_eq!(
            proc_counter(snmp, "Tcp:", "MaxConn"),
            None,
            "-1 is no counter"
        );
        assert_eq!(proc_counter(snmp, "Tcp:", "Nope"), None);
        assert_eq!(proc_counter(snmp, "Ip:", "DefaultTTL"), Some(64));
        assert_eq!(
            proc_counter(snmp, "Ip:", "Ip:"),
            None,
            "the section name is no counter"
        );
        assert_eq!(proc_counter("Ip: x\n", "Tcp:", "RetransSegs"), None);
        assert_eq!(
            proc_counter("Tcp: A B\n", "Tcp:", "A"),
            None,
            "no value line"
        );
        // `TcpExt:` must not be taken for `Tcp:`, nor the other way round.
        let netstat = "TcpExt: SyncookiesSent TCPDSACKRecvSegs\nTcpExt: 0 1298\n\
                       IpExt: InNoRoutes\nIpExt: 3\n";
        assert_eq!(
            proc_counter(netstat, "TcpExt:", "TCPDSACKRecvSegs"),
            Some(1298)
        );
        assert_eq!(proc_counter(netstat, "Tcp:", "TCPDSACKRecvSegs"), None);
        assert_eq!(proc_counter(snmp, "TcpExt:", "RetransSegs"), None);
    }

    #[test]
    fn listening_sockets_from_the_socket_table() {
        let t = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
                 0: 00000000:1451 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0\n\
                 1: 0A4D000A:1451 0A4D0001:9C40 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0 20 4 30 10 -1\n";
        assert!(listening_in(t, ":1451"));
        assert!(!listening_in(t, ":1452"));
        let est = t.replace(" 0A ", " 01 ");
        assert!(!listening_in(&est, ":1451"));
    }

    #[test]
    fn limits() {
        assert_eq!(limit_of(0.99, 0.5), "receiver");
        assert_eq!(limit_of(0.4, 0.97), "sender");
        assert_eq!(limit_of(0.95, 0.95), "both");
        assert_eq!(limit_of(0.5, 0.5), "neither");
        assert_eq!(iperf3_seconds(0.5), 1);
        assert_eq!(iperf3_seconds(2.0), 2);
        assert_eq!(iperf3_seconds(2.5), 3);
    }
}
