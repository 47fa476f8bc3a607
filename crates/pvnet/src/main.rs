//! `pvnet`: the Xen PV network path in user space, and its benchmark. The command line
//! (`up`, `down`, `set`, `stat`, `info`, `exec`, `perf`, `bench`), the driver-domain daemon
//! (the toolstack and the event loop that drives `pvnet_dd`'s data path), and the internal
//! entry points of the processes it starts (`daemon`, `guest-run`).

mod admin;
mod bench;
mod capture;
mod cgroup;
mod config;
mod daemon;
mod lifecycle;
mod relay;
mod rundir;
mod unused;

use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::time::Duration;

use admin::{AdminReply, AdminRequest};
use anyhow::{anyhow, bail, Context, Result};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use config::{DaemonConfig, Mode};
use daemon::Daemon;
use pvnet_dd::lro;
use pvnet_dd::netback::credit::TxRate;

/// Every packet the driver domain takes from the wire is a fresh buffer, freed once it has
/// been copied into a guest: glibc's allocator gave that churn about 4 % of the receiving CPU
/// (its free lists, and page faults after it trimmed the heap).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "pvnet",
    version,
    about = "The Xen paravirtual network path in user space, measured"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start a remote host, a driver domain and guests; runs until `pvnet down` (needs root).
    Up {
        /// Guests to start.
        #[arg(long, default_value_t = 1)]
        guests: usize,
        /// `xen` (the PV path), `linux` (no virtualization: the driver domain's veth end gets
        /// 10.77.0.2) or `relay` (the daemon writes each guest's packets straight into its TAP:
        /// the packet ring and the TAP without the Xen machinery, this emulation's floor).
        #[arg(long, value_enum, default_value_t = Mode::Xen)]
        mode: Mode,
        /// Run id (default: a fresh one); names are `pvnet-<id>-<role>`.
        #[arg(long)]
        id: Option<String>,
        /// Frames per physical-port poll (NAPI budget), 1 to 512. Default: 64; 256 with
        /// --mode relay, whose TAP writes want the longer batch when guests share a poll.
        #[arg(long)]
        budget: Option<usize>,
        /// Slots of the physical port's packet ring (256 to 65536; 1664 bytes each, 64 KiB
        /// with --port-gro). Fewer slots stay warmer in the cache, but the kernel drops what
        /// arrives while they are full. Default 4096 a guest for one or two guests, then 4096
        /// for every two (8192 at 3 or 4 guests, 16384 at 8); 1024 with --port-gro.
        #[arg(long)]
        ring_frames: Option<u32>,
        /// Receive queues of the physical port, 1 to 16: the kernel sorts frames into them by
        /// destination MAC address (a guest's own queue, as with VMDq), the ring's slots are
        /// split between them, and each poll serves them in turn, so that a guest whose
        /// sender keeps more in flight gets no more of the driver domain than the others.
        /// Default one per guest; 1 with --port-frames, --grant flip or --port-ring v3.
        #[arg(long)]
        port_queues: Option<u32>,
        /// Slots of the packet ring the CPU is asked to load before they are used, 0 (none)
        /// to 64: this many past the next frame the driver domain reads, and this many from
        /// the slot the kernel fills next. With many guests busy the ring's slots come back
        /// cold; loading them ahead keeps the kernel's write and the first read of each frame
        /// from waiting on memory (docs/ring-prefetch.md).
        #[arg(long, default_value_t = pvnet_pnic::DEFAULT_PREFETCH)]
        ring_prefetch: u32,
        /// The physical port's transmit buffer, KiB (4 to 65536): what the driver domain may
        /// have in flight towards the wire. When it is full the port holds the frames it
        /// refused and stops taking the guests' TX requests until it has sent them, so their
        /// frontends hold their packets back: nothing is dropped (`stat`: `pnic.tx_would_block`,
        /// `daemon.pnic_tx_deferred`).
        #[arg(long, default_value_t = config::DEFAULT_PORT_TX_BUFFER_KIB)]
        port_tx_buffer_kib: u32,
        /// MTU of the wire, the physical port, the driver domain's stack and the guests'
        /// interfaces, 1280 to 65535 (a TAP takes at most 65521: the PV modes stop there).
        /// The packet ring's slots, and what netback accepts from a guest, follow it.
        #[arg(long, default_value_t = config::DEFAULT_MTU)]
        mtu: u32,
        /// Extra domains served to an external frontend through a socket (for tests).
        #[arg(long, default_value_t = 0, hide = true)]
        attach: usize,
        /// Stay in the foreground instead of detaching.
        #[arg(long)]
        foreground: bool,
        /// CPU for the driver domain and guests (the receiving CPU); -1 = no pinning.
        #[arg(long, default_value_t = 0, allow_negative_numbers = true,
              value_parser = clap::value_parser!(i64).range(-1..))]
        cpu: i64,
        /// GRO on the physical port's veth end (off by default), standing for a NIC's LRO: the
        /// kernel coalesces TCP segments before the packet ring, whose slots then hold 64 KiB
        /// frames, and each coalesced frame reaches the guest as one GSO packet (`port-gro` in
        /// bench; `linux-gro` with --mode linux).
        #[arg(long, alias = "gro")]
        port_gro: bool,
        /// The physical port's packet ring: `v2` (a slot per frame) or `v3` (frames packed
        /// in 256 KiB blocks retired when full or after 1 ms; a lease holds its whole block).
        /// Meant for --port-gro (`port-gro-v3` in bench).
        #[arg(long, value_enum, default_value_t = config::PortRing::V2)]
        port_ring: config::PortRing,
        /// With --port-ring v3: each block's size in KiB, a power of two from 128 to 4096
        /// (default 256); the ring keeps its 64 MiB, in fewer or more blocks.
        #[arg(long)]
        port_ring_block_kib: Option<u32>,
        /// Open each guest's TAP with IFF_NAPI, so the guest kernel's GRO coalesces the frames
        /// netfront writes: GRO in the guest's virtual NIC (`guest-gro` in bench).
        #[arg(long)]
        guest_gro: bool,
        /// The CPU your traffic sender runs on: the remote host's input (ACKs) is steered
        /// there, so the sender's work is not charged to the receiving CPU. Default: the lowest
        /// CPU other than --cpu (none with --cpu -1 or on one CPU), since a veth otherwise runs
        /// the sender's ACK processing and the transmissions it clocks on the receiving CPU.
        #[arg(long)]
        sender_cpu: Option<usize>,
        /// What forwards frames in the driver domain: `bridge` (the learning bridge),
        /// `bridge-nf` (the bridge plus a per-packet rule pass standing for bridge netfilter)
        /// or `route` (netback MAC routing: by each vif's MAC, nothing learned).
        #[arg(long, default_value_t = pvnet_dd::switch::Mode::Bridge, value_parser = parse_switch)]
        switch: pvnet_dd::switch::Mode,
        /// The rule pass's rules for `--switch bridge-nf` (default: the shipped set, see
        /// crates/dd/rules/default.rules).
        #[arg(long)]
        rules: Option<std::path::PathBuf>,
        /// How netback moves packet bytes to and from guest memory: `copy` (batched grant
        /// copy), `map` (map each granted page per packet), `persistent` (keep the
        /// mappings of the grants a frontend reuses; negotiated as `feature-persistent`),
        /// `premapped` (the guest's packet pool granted and mapped once at connect; one copy
        /// per packet; `feature-premapped`) or `static` (a buffer granted and mapped once;
        /// the guest copies out of and into it; `feature-static-buffer`).
        #[arg(long, default_value = "copy")]
        grant: pvnet_dd::netback::Mechanism,
        /// Receive on the physical port straight into the driver domain's machine frames
        /// (recvmmsg into page-sized buffers) instead of its packet ring, as `--grant flip`
        /// always does: the port to compare `copy` with `flip` on.
        #[arg(long)]
        port_frames: bool,
        #[command(flatten)]
        lro: LroArgs,
        #[command(flatten)]
        limits: LimitArgs,
        /// A guest's transmit rate, as xl's `rate=`: `RATE[/s][@INTERVAL]` for every PV guest, or
        /// `gI=RATE[/s][@INTERVAL]` for guest I (repeatable; a guest's own wins). RATE is a number
        /// with B, KB, MB or GB (bytes) or b, Kb, Mb or Gb (bits), decimal, a second; INTERVAL
        /// the credit's window, 1ms to 1000ms (default 50ms). What a guest sends beyond it
        /// waits on its TX ring until the next window: nothing is dropped (`stat`: `rate`,
        /// `tx_credit_waits`). `pvnet set --vif-rate` changes it later.
        #[arg(long, value_name = "[gI=]RATE[@INTERVAL]")]
        vif_rate: Vec<String>,
        /// HVM guests on an emulated NE2000 (Zhang, Li and Guan), started after the PV guests
        /// (they are g{N} and on, N the PV guests). Each has a device model process in the
        /// driver domain.
        #[arg(long, default_value_t = 0)]
        hvm: usize,
        /// The HVM guests' port-I/O path: `original` (every access to the device model),
        /// `seed` (the paper's trap handler) or `max` (everything that needs no card memory
        /// at the trap).
        #[arg(long, default_value = "original", value_parser = hvm_path_parser())]
        hvm_path: pvnet_hvm::Path,
        /// Modelled cost of one VM exit in nanoseconds (spent by the HVM vCPU per port access),
        /// at most 10 ms, as in bench.
        #[arg(long, default_value_t = 0,
              value_parser = clap::value_parser!(u64).range(0..=bench::configs::MAX_EXIT_COST_NS))]
        exit_cost_ns: u64,
        /// Guest-to-guest frames in one copy, grant to grant (`on`), or copied through a
        /// driver-domain buffer (`off`); `pvnet set --g2g` changes it later.
        #[arg(long, value_parser = on_off, default_value = "on", action = clap::ArgAction::Set)]
        g2g: bool,
        /// Each guest's processes (a PV guest's netfront, an HVM guest's vCPU process, and
        /// what is started in it through the bench) in a CPU cgroup of its own, `pvnet-<id>/guest<i>`, all with the same
        /// weight: the guest, as a domain under a hypervisor's scheduler, is the scheduling
        /// entity, not each of its threads (`on`); or no groups (`off`). Without a usable cpu
        /// controller the run says so and goes on without. On by default (8 guests streaming
        /// at once: Jain's index 0.59 without, 0.999 with; docs/consolidation.md).
        #[arg(long, value_parser = on_off, default_value = "on", action = clap::ArgAction::Set)]
        guest_cgroups: bool,
    },
    /// Change the data path of a running system: aggregation policy, representation, BO.
    Set {
        #[arg(long)]
        id: Option<String>,
        /// The physical port (default: the run's only one).
        #[arg(long)]
        port: Option<String>,
        /// `off`, or a flush policy: `poll`, `every:N`, `timeout:USEC`, `adaptive`.
        #[arg(long, value_parser = parse_lro)]
        lro: Option<LroFlag>,
        /// Aggregate representation: `skb` (chain of receive buffers) or `page` (fragments).
        #[arg(long, value_parser = parse_lro_mode)]
        lro_mode: Option<lro::Mode>,
        /// Bridge optimization: forward skb-mode aggregates without linearizing them.
        #[arg(long, value_parser = on_off)]
        bo: Option<bool>,
        /// The HVM guests' port-I/O path, flipped live: `original`, `seed` or `max`.
        #[arg(long, value_parser = hvm_path_parser())]
        hvm_path: Option<pvnet_hvm::Path>,
        /// Guest-to-guest frames in one copy, grant to grant (`on`, the default), or copied
        /// through a driver-domain buffer (`off`).
        #[arg(long, value_parser = on_off)]
        g2g: Option<bool>,
        /// A guest's transmit rate, as `up --vif-rate` takes it, or `off` (`gI=off` for one
        /// guest, `off` for every one); repeatable. The new rate starts a fresh window.
        #[arg(long, value_name = "[gI=]RATE[@INTERVAL]|off", value_parser = parse_vif_rate)]
        vif_rate: Vec<(Option<u16>, Option<TxRate>)>,
    },
    /// Stop a run and remove everything it created.
    Down {
        #[arg(long, conflicts_with = "all")]
        id: Option<String>,
        /// Stop every run.
        #[arg(long)]
        all: bool,
    },
    /// Restart the driver domain under load: every backend goes away with its state (rings,
    /// mappings, queues, the physical port's socket) and a new driver domain takes its place;
    /// the guests' frontends reconnect. Waits for them and prints the time it took.
    RestartDd {
        #[arg(long)]
        id: Option<String>,
        /// Return once the new driver domain is up, without waiting for the frontends.
        #[arg(long)]
        no_wait: bool,
        /// Print `stat`'s `restart` object as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Counters per port and per vif.
    Stat {
        #[arg(long)]
        id: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Print where a run's namespaces and addresses are.
    Info {
        #[arg(long)]
        id: Option<String>,
    },
    /// Run a command inside one of a run's namespaces (`remote`, `dd`, `g0`, ...).
    Exec {
        #[arg(long)]
        id: Option<String>,
        /// Role: remote, dd, g0, g1, ...
        role: String,
        #[arg(trailing_var_arg = true, required = true)]
        cmd: Vec<String>,
    },
    /// Capture packets at a port of a run into a pcap file (tcpdump and Wireshark read it).
    Capture {
        #[arg(long)]
        id: Option<String>,
        /// `pnic` (the physical port: wire frames), `dd` (the driver domain's own stack),
        /// `g<i>` (guest i's eth0: what its kernel receives, an aggregate as one large
        /// segment), `vif<i>` (guest i's bridge port in the data path).
        port: capture::Port,
        /// The pcap file (default: standard output).
        #[arg(short = 'w', long = "write")]
        write: Option<std::path::PathBuf>,
        /// Stop after this many packets.
        #[arg(short = 'c', long)]
        count: Option<u64>,
        /// Stop after this many seconds.
        #[arg(long, value_parser = seconds)]
        duration: Option<f64>,
    },
    /// The traffic tool: a TCP stream, a TCP request/response, a UDP stream and a paced records
    /// test (netperf-like).
    Perf {
        #[command(subcommand)]
        cmd: PerfCmd,
    },
    /// Run configurations side by side and report throughput, TCP_RR and cycles per byte.
    Bench(Box<bench::BenchArgs>),
    /// Stream into N guests for a long time (default one hour; not for CI) and sample the
    /// driver domain daemon's memory and open descriptors every minute; fails if they grow.
    Soak(bench::SoakArgs),
    /// (internal) the driver-domain daemon in the foreground.
    #[command(hide = true)]
    Daemon {
        #[arg(long)]
        config: String,
    },
    /// (internal) a guest process on an inherited control socket.
    #[command(hide = true)]
    GuestRun {
        #[arg(long)]
        ctl_fd: i32,
    },
    /// (internal) an HVM guest's device model on an inherited control socket.
    #[command(hide = true)]
    DeviceModel {
        #[arg(long)]
        ctl_fd: i32,
    },
    /// (internal) an HVM guest on an inherited control socket.
    #[command(hide = true)]
    HvmGuestRun {
        #[arg(long)]
        ctl_fd: i32,
    },
}

/// Each guest's caps in the driver domain (`up`); `pvnet stat` shows them under `limits`.
#[derive(clap::Args, Clone, Copy, Debug)]
struct LimitArgs {
    /// Packets queued for a guest whose RX ring has no free buffer; beyond them its packets
    /// are dropped (`rx_queue_full`). At least twice --budget.
    #[arg(long, default_value_t = pvnet_dd::netback::RX_QUEUE_LIMIT)]
    rx_queue_packets: usize,
    /// Bytes of packet data queued for a guest (`16M`, `512K`, or bytes); beyond them its
    /// packets are dropped (`rx_queue_memory_full`).
    #[arg(long, default_value = "16M", value_parser = pvnet_perf::records::parse_bytes)]
    rx_queue_bytes: usize,
    /// Grants a guest's persistent table may hold (`--grant persistent`); a frontend that
    /// needs more is disconnected (`persistent_overflow`).
    #[arg(long, default_value_t = pvnet_dd::netback::PERSISTENT_MAX)]
    persistent_grants: usize,
    /// Aggregates one guest may hold in the port's LRO table (of 32); beyond them its own
    /// oldest is flushed (`lro.guest_flow_cap`).
    #[arg(long, default_value_t = lro::MAX_FLOWS_PER_DST)]
    lro_flows_per_guest: usize,
}

impl LimitArgs {
    fn limits(self) -> config::Limits {
        config::Limits {
            rx_queue_packets: self.rx_queue_packets,
            rx_queue_bytes: self.rx_queue_bytes,
            persistent_grants: self.persistent_grants,
            lro_flows_per_guest: self.lro_flows_per_guest,
        }
    }
}

/// Aggregation settings of `up`.
#[derive(clap::Args, Clone, Debug)]
struct LroArgs {
    /// Receive aggregation at the physical port: `off` (the `xen` configuration), or a flush
    /// policy: `poll` (every poll, the LRO of Nakanjima and Oi), `every:N` (every Nth poll, DA),
    /// `timeout:USEC`, `adaptive`. Default: `adaptive` with --mode xen (the `adaptive`
    /// configuration, the cheapest per byte whose TCP_RR is within 2 % of `xen`'s: see
    /// docs/default-config.md); off in the other modes, on the frame port and with
    /// --port-gro or --guest-gro (the `port-gro` and `guest-gro` configurations).
    #[arg(long, value_parser = parse_lro)]
    lro: Option<LroFlag>,
    /// Aggregate representation: `skb` (chain of receive buffers) or `page` (fragments).
    #[arg(long, default_value_t = lro::Mode::default(), value_parser = parse_lro_mode)]
    lro_mode: lro::Mode,
    /// Bridge optimization: forward skb-mode aggregates without linearizing them.
    #[arg(long)]
    bo: bool,
    /// Whether guests advertise GSO (`off`: aggregates are cut back into segments for them).
    #[arg(long, value_parser = on_off, default_value = "on", action = clap::ArgAction::Set)]
    guest_gso: bool,
}

fn parse_vif_rate(s: &str) -> Result<(Option<u16>, Option<TxRate>), String> {
    config::parse_vif_rate(s).map_err(|e| format!("{e:#}"))
}

pub(crate) fn on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" | "1" | "true" | "yes" => Ok(true),
        "off" | "0" | "false" | "no" => Ok(false),
        _ => Err(format!("expected on or off, got {s:?}")),
    }
}

fn parse_switch(s: &str) -> Result<pvnet_dd::switch::Mode, String> {
    s.parse()
        .map_err(|e: pvnet_dd::switch::ParseModeError| e.to_string())
}

/// Reads and checks a rules file for `--switch bridge-nf`; errors name the file and line.
fn read_rules(path: &std::path::Path) -> Result<String> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("--rules {}", path.display()))?;
    pvnet_dd::nf::Filter::parse(&text).map_err(|e| anyhow!("--rules {}: {e}", path.display()))?;
    Ok(text)
}

fn parse_lro_mode(s: &str) -> Result<lro::Mode, String> {
    s.parse().map_err(|e| format!("{e} (expected skb or page)"))
}

/// `--lro`: `off`, or a flush policy; parsed once, here, and passed on as a type.
#[derive(Clone, Copy, Debug)]
struct LroFlag(Option<lro::Policy>);

fn parse_lro(s: &str) -> Result<LroFlag, String> {
    if s == "off" {
        return Ok(LroFlag(None));
    }
    s.parse()
        .map(|p| LroFlag(Some(p)))
        .map_err(|e| format!("{s:?}: {e}"))
}

impl LroArgs {
    /// The aggregation `up` runs: what `--lro` asked for; without it, that of the default
    /// configuration ([`config::default_lro`]) in `mode` on the packet ring (`port_frames`:
    /// the frame port, which takes wire-sized frames only) unless GRO was asked for at the port
    /// or in the guests (`gro_elsewhere`).
    fn settings(
        &self,
        mode: Mode,
        port_frames: bool,
        gro_elsewhere: bool,
    ) -> Option<config::LroSettings> {
        let policy = match self.lro {
            Some(LroFlag(asked)) => asked,
            None => config::default_lro(mode, port_frames, gro_elsewhere).map(|d| d.policy),
        };
        policy.map(|policy| config::LroSettings {
            policy,
            mode: self.lro_mode,
        })
    }
}

#[derive(Subcommand)]
enum PerfCmd {
    /// Accept connections and serve stream, request/response, UDP stream and records tests.
    Server {
        #[arg(long, default_value = "0.0.0.0:5201")]
        bind: SocketAddr,
        /// Exit after the first test.
        #[arg(long)]
        once: bool,
    },
    /// Send a verified byte stream; prints the receiver's report as JSON.
    Stream {
        to: String,
        #[arg(long, default_value_t = 5201)]
        port: u16,
        /// Seconds (default 10; with --bytes, none: the stream ends when they are sent).
        #[arg(long, value_parser = seconds)]
        duration: Option<f64>,
        /// Bytes per write, at most 16 MiB.
        #[arg(long, default_value_t = 65536, value_parser = bytes_in(1, pvnet_perf::proto::MAX_MSG as u64))]
        msg_size: usize,
        /// Stop after this many bytes.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        bytes: Option<u64>,
        /// Pace the sender at this many Mbit/s (a wire of that speed).
        #[arg(long)]
        pace: Option<u64>,
    },
    /// Several verified streams on connections that stay open, switched on and off slice by
    /// slice (the bench's guest-scaling comparison on one testbed). Reads one slice per line
    /// on standard input, `SETTLE SECONDS STREAMS` (seconds, seconds, the active streams'
    /// indices separated by commas, or `all`), and prints each slice's acknowledged bytes per
    /// stream as a JSON line; at end of input closes the streams and prints what each receiver
    /// verified; fails unless every stream arrived intact.
    Streams {
        /// A receiver, `HOST:PORT` (a `pvnet perf server`); once per stream.
        #[arg(long = "to", required = true)]
        to: Vec<String>,
        /// Bytes per write, at most 16 MiB.
        #[arg(long, default_value_t = 65536, value_parser = bytes_in(1, pvnet_perf::proto::MAX_MSG as u64))]
        msg_size: usize,
        /// Seconds any socket operation may block before the session fails.
        #[arg(long, default_value_t = 30.0, value_parser = seconds)]
        limit: f64,
    },
    /// ICMP echo; prints sent/received/RTTs as JSON; fails unless every echo is answered.
    Ping {
        to: std::net::Ipv4Addr,
        /// Echo requests, 1 to 65535 (ICMP's 16-bit sequence).
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=65535))]
        count: u32,
        /// ICMP payload bytes per request (`ping -s`), sent with Don't Fragment: 8972 makes a
        /// 9000-byte IP packet. A reply counts only with its payload intact.
        #[arg(long, default_value_t = pvnet_perf::ping::DEFAULT_PAYLOAD,
              value_parser = bytes_in(0, pvnet_perf::ping::MAX_PAYLOAD as u64))]
        size: usize,
        /// Seconds to wait for each reply before the request counts as unanswered (`ping -W`).
        #[arg(long, default_value_t = 2.0, value_parser = seconds)]
        wait: f64,
    },
    /// Request/response transactions; prints rate and latency percentiles as JSON.
    Rr {
        to: String,
        #[arg(long, default_value_t = 5201)]
        port: u16,
        #[arg(long, default_value_t = 10.0, value_parser = seconds)]
        duration: f64,
        /// Request bytes, at most 16 MiB.
        #[arg(long, default_value_t = 1, value_parser = bytes_in(1, pvnet_perf::proto::MAX_MSG as u64))]
        req_size: usize,
        /// Response bytes, at most 16 MiB.
        #[arg(long, default_value_t = 1, value_parser = bytes_in(1, pvnet_perf::proto::MAX_MSG as u64))]
        rsp_size: usize,
        /// Keep one connection and run slices on demand: each line on stdin is a slice length
        /// in seconds, answered by one JSON line; end of input ends it (`--duration` is then
        /// only the planned total). For a bench that switches the path between slices.
        #[arg(long)]
        stepped: bool,
    },
    /// Burn the CPU it runs on (a busy loop) until killed or --duration passes: the CPU-hungry
    /// neighbour of `pvnet bench --scenario neighbour`.
    Burn {
        /// Seconds (until killed if absent).
        #[arg(long, value_parser = seconds)]
        duration: Option<f64>,
    },
    /// Records of one size sent on a schedule, one in flight, each verified and acknowledged by
    /// the server (the HVM paper's Fig. 6 workload: 2000 records at 50 per second); prints the
    /// throughput and the time per record as JSON; fails unless every record came back
    /// acknowledged intact.
    Records {
        to: String,
        #[arg(long, default_value_t = 5201)]
        port: u16,
        /// Bytes per record: `1024`, `64K`, `1M` (at most 16 MiB).
        #[arg(long, value_parser = pvnet_perf::records::parse_size)]
        size: usize,
        /// Records to send.
        #[arg(long, default_value_t = pvnet_perf::records::SEED_COUNT)]
        count: u64,
        /// Records per second the schedule asks for; 0: each as soon as the last one is
        /// acknowledged.
        #[arg(long, default_value_t = pvnet_perf::records::SEED_RATE)]
        rate: f64,
    },
    /// Fixed-size UDP datagrams, each verified by the receiver; prints the sender's counts and
    /// the receiver's report as JSON; fails if any datagram arrived corrupt (loss is reported).
    UdpStream {
        to: String,
        #[arg(long, default_value_t = 5201)]
        port: u16,
        /// Bytes per datagram (UDP payload), 1..=65507; one frame each below the MTU.
        #[arg(long, value_parser = bytes_in(1, pvnet_perf::udp::MAX_DATAGRAM as u64))]
        size: usize,
        /// Offered load: payload bits/s (`100M`, `1.5G`) or datagrams/s (`50kpps`); as fast as
        /// possible if absent.
        #[arg(long)]
        rate: Option<pvnet_perf::Rate>,
        /// Seconds (10 if no count is given).
        #[arg(long, conflicts_with_all = ["datagrams", "bytes"], value_parser = seconds)]
        duration: Option<f64>,
        /// Stop after this many datagrams.
        #[arg(long, conflicts_with = "bytes", value_parser = clap::value_parser!(u64).range(1..))]
        datagrams: Option<u64>,
        /// Stop after this many payload bytes, rounded up to whole datagrams.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        bytes: Option<u64>,
    },
}

/// `--hvm-path`'s parser: the names of [`pvnet_hvm::Path::ALL`] as clap's possible values
/// (listed in `--help` and in the error for any other word), parsed into the path.
fn hvm_path_parser() -> impl clap::builder::TypedValueParser<Value = pvnet_hvm::Path> {
    use clap::builder::{PossibleValuesParser, TypedValueParser};
    PossibleValuesParser::new(pvnet_hvm::Path::ALL.map(pvnet_hvm::Path::name)).map(|s| {
        s.parse::<pvnet_hvm::Path>()
            .expect("clap admits only the names of Path::ALL")
    })
}

/// Longest time a seconds option takes (about 11.6 days).
pub(crate) const MAX_SECONDS: f64 = 1e6;

/// The parser of every option given in seconds: a finite number above 0, at most
/// [`MAX_SECONDS`] (a time the run can wait for, and that `Duration` holds).
pub(crate) fn seconds(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 && x <= MAX_SECONDS => Ok(x),
        _ => Err(format!(
            "{s:?} is not a number of seconds above 0 and at most {MAX_SECONDS}"
        )),
    }
}

/// The parser of a size option: bytes from `min` to `max` (clap's error names the option).
fn bytes_in(min: u64, max: u64) -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::new().range(min..=max)
}

/// `pvnet perf records`' options, checked (a rate of 0 is no schedule).
fn records_opts(size: usize, count: u64, rate: f64) -> Result<pvnet_perf::RecordOpts> {
    let opts = pvnet_perf::RecordOpts {
        size,
        count,
        rate: (rate != 0.0).then_some(rate),
    };
    opts.check()?;
    Ok(opts)
}

fn need_root(what: &str) -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!("`pvnet {what}` needs root (network namespaces, veth, TAP and raw sockets): run it with sudo");
    }
    Ok(())
}

/// One line of `pvnet perf streams`' input: `SETTLE SECONDS STREAMS`.
fn parse_streams_slice(line: &str, streams: usize) -> Result<(Duration, Duration, Vec<usize>)> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let [settle, seconds, active] = f[..] else {
        bail!(
            "slice {line:?}: want `SETTLE SECONDS STREAMS` (e.g. `0.2 0.5 0,3` or `0.2 0.5 all`)"
        );
    };
    let secs = |what: &str, v: &str| -> Result<Duration> {
        match v.parse::<f64>() {
            Ok(x) if x.is_finite() && (0.0..=3600.0).contains(&x) => Ok(Duration::from_secs_f64(x)),
            _ => bail!("slice {line:?}: {what} {v:?} is not a number of seconds from 0 to 3600"),
        }
    };
    let (settle, seconds) = (secs("SETTLE", settle)?, secs("SECONDS", seconds)?);
    if seconds.is_zero() {
        bail!("slice {line:?}: SECONDS must be more than 0");
    }
    let active = if active == "all" {
        (0..streams).collect()
    } else {
        (active.split(','))
            .map(|i| match i.parse::<usize>() {
                Ok(i) if i < streams => Ok(i),
                _ => bail!(
                    "slice {line:?}: stream {i:?} is not one of 0 to {}",
                    streams - 1
                ),
            })
            .collect::<Result<Vec<usize>>>()?
    };
    Ok((settle, seconds, active))
}

/// The server a client command talks to: `host` (a name or an address) at `port` (`--port`).
fn resolve(host: &str, port: u16) -> Result<SocketAddr> {
    if port == 0 {
        bail!("--port 0: give the server's port, 1 to 65535");
    }
    (host, port)
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {host}"))?
        .next()
        .ok_or_else(|| anyhow!("cannot resolve {host}"))
}

fn main() {
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Err(e) = unused::check(&matches).and_then(|()| run(cli)) {
        eprintln!("pvnet: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.cmd {
        Cmd::Up {
            guests,
            mode,
            id,
            budget,
            ring_frames,
            port_queues,
            ring_prefetch,
            port_tx_buffer_kib,
            mtu,
            attach,
            foreground,
            cpu,
            port_gro,
            port_ring,
            port_ring_block_kib,
            guest_gro,
            sender_cpu,
            switch,
            rules,
            grant,
            port_frames,
            lro,
            limits,
            vif_rate,
            hvm,
            hvm_path,
            exit_cost_ns,
            g2g,
            guest_cgroups,
        } => {
            let port_frames = config::frame_port(port_frames, grant);
            let settings = lro.settings(mode, port_frames, port_gro || guest_gro);
            config::check_mtu(mtu)?;
            // -1: no pinning.
            let cpu = usize::try_from(cpu).ok();
            let cpus = pvnet_testbed::cpu::steerable_cpus();
            for (name, c) in [("--cpu", cpu), ("--sender-cpu", sender_cpu)] {
                if let Some(c) = c.filter(|&c| c >= cpus) {
                    bail!("{name} {c}: the CPUs are 0 to {}", cpus - 1);
                }
            }
            need_root("up")?;
            if hvm > 0 && mode != Mode::Xen {
                bail!("--hvm needs --mode xen");
            }
            if guests == 0 && mode != Mode::Linux && attach == 0 && hvm == 0 {
                bail!("--guests must be at least 1");
            }
            let all = guests.saturating_add(attach).saturating_add(hvm);
            let max = pvnet_testbed::topology::MAX_GUESTS;
            if all > max {
                bail!(
                    "--guests and --hvm: at most {max} guests in all (one address each in \
                     10.77.0.10–254), not {all}"
                );
            }
            if mode == Mode::Relay && attach > 0 {
                bail!("--attach needs --mode xen (a relayed guest has no frontend)");
            }
            if mode == Mode::Relay && !lro.guest_gso {
                bail!("--guest-gso off needs --mode xen (a relayed guest's TAP takes GSO packets)");
            }
            if guest_gro && mode != Mode::Xen {
                bail!("--guest-gro needs --mode xen (the guests' TAPs are netfront's)");
            }
            if mode != Mode::Xen && grant != pvnet_dd::netback::Mechanism::Copy {
                bail!("--grant {grant} needs --mode xen (the only mode with grants)");
            }
            let budget = config::check_budget(budget.unwrap_or(config::default_budget(mode)))?;
            let limits = limits.limits();
            limits.check(budget)?;
            let vif_rates = config::vif_rates(&vif_rate, mode, guests + attach, hvm)?;
            let ring_frames = config::check_ring_frames(
                ring_frames.unwrap_or(config::default_ring_frames(guests + attach + hvm, port_gro)),
            )?;
            if rules.is_some() && switch != pvnet_dd::switch::Mode::BridgeNf {
                bail!("--rules needs --switch bridge-nf");
            }
            if mode == Mode::Linux && switch != pvnet_dd::switch::Mode::Bridge {
                bail!("--switch needs the driver domain (--mode xen or relay)");
            }
            let port_queues = match port_queues {
                Some(n) => config::check_port_queues(n, port_frames, port_ring)?,
                None => config::default_port_queues(guests + attach + hvm, port_frames, port_ring),
            };
            let ring_prefetch = config::check_ring_prefetch(ring_prefetch)?;
            let port_tx_buffer_kib = config::check_port_tx_buffer_kib(port_tx_buffer_kib)?;
            let rules = rules.as_deref().map(read_rules).transpose()?;
            let v3_block_kib = port_ring_block_kib
                .map(|k| config::check_v3_block_kib(k, port_ring))
                .transpose()?;
            let cfg = DaemonConfig {
                id: match id {
                    Some(i) => pvnet_testbed::RunId::parse(&i)?.as_str().to_string(),
                    None => pvnet_testbed::RunId::new().as_str().to_string(),
                },
                mode,
                guests,
                attach,
                budget,
                cpu,
                rps: true,
                sender_cpu: sender_cpu.or_else(|| other_cpu(cpu, pvnet_testbed::cpu::nr_cpus())),
                lro: settings,
                bo: lro.bo,
                guest_gso: lro.guest_gso,
                gro: port_gro,
                guest_gro,
                ring_frames,
                port_ring,
                port_queues,
                ring_prefetch,
                port_tx_buffer_kib,
                v3_block_kib,
                switch,
                rules,
                grant,
                port_frames,
                mtu,
                hvm,
                hvm_path,
                exit_cost_ns,
                g2g,
                guest_cgroups,
                limits,
                vif_rates,
            };
            if cfg.port_frames && (port_gro || settings.is_some() || hvm > 0 || mode != Mode::Xen) {
                bail!(
                    "the frame port (--grant flip, --port-frames) takes wire-sized frames only: \
                     no --port-gro, no --lro, no --hvm, --mode xen"
                );
            }
            if mode == Mode::Linux && (settings.is_some() || lro.bo) {
                bail!("--lro and --bo need the driver domain (--mode xen or relay)");
            }
            if rundir::run_dir(&cfg.id).exists() {
                bail!(
                    "a run with id {} exists already (see `pvnet info --id {}`)",
                    cfg.id,
                    cfg.id
                );
            }
            if foreground {
                return daemon_main(cfg, true);
            }
            let info = lifecycle::start_daemon(&cfg, true)?;
            print_info(&info);
            if lro.lro.is_none() && settings.is_some() {
                println!(
                    "  the default configuration, `{}` (aggregation at the port; `--lro off` is `xen`)",
                    config::DEFAULT_CONFIG
                );
            }
            Ok(())
        }
        Cmd::Down { id, all } => {
            need_root("down")?;
            let ids = if all {
                rundir::list_runs()
            } else {
                vec![rundir::pick_run(id.as_deref())?]
            };
            for id in ids {
                let r = lifecycle::down_ending(&id)?;
                for l in r.lines() {
                    println!("pvnet: {l}");
                }
                let n = r.ended.len();
                match n {
                    0 => println!("pvnet: run {id} is down"),
                    _ => println!(
                        "pvnet: run {id} is down (ended {n} process{} of its domains)",
                        if n == 1 { "" } else { "es" }
                    ),
                }
            }
            Ok(())
        }
        Cmd::RestartDd { id, no_wait, json } => {
            need_root("restart-dd")?;
            let id = rundir::pick_run(id.as_deref())?;
            let (vifs, r) = admin::restart_dd(&id, !no_wait)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                let l = &r["last"];
                println!(
                    "pvnet: driver domain restarted in {:.1} ms ({} queued packet(s) dropped); {} of {vifs} vif(s) reconnected{}",
                    l["down_ms"].as_f64().unwrap_or(0.0),
                    l["queued_packets_dropped"],
                    l["reconnected"],
                    match l["reconnect_ms"].as_f64() {
                        Some(ms) => format!(" {ms:.1} ms after the restart began"),
                        None => String::new(),
                    }
                );
            }
            // The vifs came back, but the path to the wire did not: say so, and fail.
            if r["last"]["port_opened_ms"].is_null() {
                bail!(
                    "the new driver domain's ports did not open: {}; the daemon tries again every {} ms (`pvnet stat` shows `port_opened_ms` once they open)",
                    r["last"]["port_error"].as_str().unwrap_or("no reason given"),
                    admin::PORT_RETRY_MS
                );
            }
            Ok(())
        }
        Cmd::Stat { id, json } => {
            need_root("stat")?;
            let id = rundir::pick_run(id.as_deref())?;
            let v = admin::stat(&id)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                print!("{}", stat_text(&v));
            }
            Ok(())
        }
        Cmd::Set {
            id,
            port,
            lro,
            lro_mode,
            bo,
            hvm_path,
            g2g,
            vif_rate,
        } => {
            if lro.is_none()
                && lro_mode.is_none()
                && bo.is_none()
                && hvm_path.is_none()
                && g2g.is_none()
                && vif_rate.is_empty()
            {
                bail!(
                    "nothing to set: give --lro, --lro-mode, --bo, --g2g, --hvm-path or --vif-rate"
                );
            }
            need_root("set")?;
            let id = rundir::pick_run(id.as_deref())?;
            let req = AdminRequest::Set(admin::SetRequest {
                port,
                lro: lro.map(|l| l.0.map_or(admin::LroChange::Off, admin::LroChange::On)),
                mode: lro_mode,
                bo,
                g2g,
                hvm_path,
                vif_rate,
            });
            let st = match admin::call(&id, &req)? {
                AdminReply::Set(st) => st,
                AdminReply::Error(e) => bail!("{e}"),
                other => bail!("the daemon answered a set request with {other:?}"),
            };
            let on = |b: bool| if b { "on" } else { "off" };
            println!(
                "pvnet: {}: lro {}, mode {}, bo {}, g2g {}{}",
                st.port,
                st.lro,
                st.mode,
                on(st.bo),
                on(st.g2g),
                match st.hvm_path {
                    Some(p) => format!("; hvm path {p} ({} HVM domains)", st.hvm_domains),
                    None => String::new(),
                }
            );
            if !st.vif_rates.is_empty() {
                let rates: Vec<String> = (st.vif_rates.iter())
                    .map(|(i, r)| format!("g{i} {r}"))
                    .collect();
                println!("pvnet: vif rates: {}", rates.join(", "));
            }
            Ok(())
        }
        Cmd::Info { id } => {
            let id = rundir::pick_run(id.as_deref())?;
            print_info(&rundir::read_info(&id)?);
            Ok(())
        }
        Cmd::Exec { id, role, cmd } => {
            need_root("exec")?;
            let id = rundir::pick_run(id.as_deref())?;
            // A process started into a run that is going or gone would hold a namespace that
            // no `down` can name any more.
            let info = rundir::read_info(&id).map_err(|_| {
                anyhow!("run {id} is not up (no daemon has reported ready); `pvnet down --id {id}` removes what is left")
            })?;
            if !rundir::pid_alive(info.pid) {
                bail!(
                    "run {id} is not up: its daemon (pid {}) is gone; `pvnet down --id {id}` removes what is left",
                    info.pid
                );
            }
            let ns = pvnet_testbed::Netns::open(&format!("pvnet-{id}-{role}"))
                .with_context(|| format!("no namespace for role {role} in run {id}"))?;
            let err = ns.command(&cmd[0]).args(&cmd[1..]).exec();
            Err(anyhow!("exec {}: {err}", cmd[0]))
        }
        Cmd::Capture {
            id,
            port,
            write,
            count,
            duration,
        } => {
            let duration = duration.map(Duration::from_secs_f64);
            if count == Some(0) {
                bail!("-c must be at least 1");
            }
            need_root("capture")?;
            capture::run(capture::CaptureOpts {
                id,
                port,
                write,
                count,
                duration,
            })
        }
        Cmd::Perf { cmd } => perf(cmd),
        Cmd::Bench(args) => bench::run(*args),
        Cmd::Soak(args) => bench::soak(args),
        Cmd::Daemon { config } => {
            let cfg: DaemonConfig = serde_json::from_str(&config).context("daemon config")?;
            daemon_main(cfg, false)
        }
        Cmd::GuestRun { ctl_fd } => {
            if ctl_fd < 3 {
                bail!("--ctl-fd must name an inherited descriptor");
            }
            // SAFETY: the daemon placed the guest's control socket at this descriptor number
            // for us (dup2 before exec); nothing else in this process owns it.
            let sock = unsafe { OwnedFd::from_raw_fd(ctl_fd) };
            pvnet_guest::run::run_guest(sock)
        }
        Cmd::DeviceModel { ctl_fd } => pvnet_hvm::process::run_device_model(inherited(ctl_fd)?),
        Cmd::HvmGuestRun { ctl_fd } => pvnet_hvm::process::run_hvm_guest(inherited(ctl_fd)?),
    }
}

/// The control socket the daemon placed at `fd` (dup2 before exec).
fn inherited(fd: i32) -> Result<OwnedFd> {
    if fd < 3 {
        bail!("--ctl-fd must name an inherited descriptor");
    }
    // SAFETY: the daemon placed this process's control socket at this descriptor number for
    // us (dup2 before exec); nothing else in this process owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Runs the daemon in this process: start, write info, serve, tear down.
fn daemon_main(cfg: DaemonConfig, print: bool) -> Result<()> {
    let id = cfg.id.clone();
    let mut d = match Daemon::start(cfg) {
        Ok(d) => d,
        Err(e) => {
            let _ = pvnet_testbed::cleanup_run(&id);
            // A parent waiting for us reads the log and removes the directory.
            if print {
                let _ = std::fs::remove_dir_all(rundir::run_dir(&id));
            }
            return Err(e);
        }
    };
    let info = d.info();
    let tmp = rundir::info_path(&id).with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_string_pretty(&info)?)?;
    std::fs::rename(&tmp, rundir::info_path(&id))?;
    if print {
        print_info(&info);
    }
    let r = d.run();
    d.shutdown();
    r
}

fn print_info(i: &rundir::RunInfo) {
    println!("pvnet run {} ({} mode), daemon pid {}", i.id, i.mode, i.pid);
    println!("  remote host   {:<24} {}", i.remote_ns, i.remote_addr);
    println!(
        "  driver domain {:<24} {} (own stack), physical port {}",
        i.dd_ns, i.dd_addr, i.pnic_if
    );
    for (k, (ns, a)) in i.guest_ns.iter().zip(&i.guest_addrs).enumerate() {
        println!("  guest {k}       {ns:<24} {a}");
    }
    for (d, p) in &i.attach {
        println!("  domain {d} waits for an external frontend at {p}");
    }
    println!(
        "  e.g.  sudo ip netns exec {} iperf3 -s",
        i.guest_ns.first().unwrap_or(&i.dd_ns)
    );
    println!(
        "        sudo pvnet stat --id {}      sudo pvnet down --id {}",
        i.id, i.id
    );
}

/// `pvnet stat`'s text: the daemon's `stat --json` object, counters that are zero left out.
fn stat_text(v: &serde_json::Value) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    // Writing into a String cannot fail.
    macro_rules! out {
        ($($t:tt)*) => {
            let _ = writeln!(s, $($t)*);
        };
    }
    out!(
        "run {}  mode {}  up {:.1} s",
        v["id"].as_str().unwrap_or("?"),
        v["mode"],
        v["uptime_s"].as_f64().unwrap_or(0.0)
    );
    // One line of an object's counters that moved (nested objects and lists have lines of
    // their own).
    let flat = |s: &mut String, prefix: &str, o: &serde_json::Value| {
        if let Some(m) = o.as_object() {
            let parts: Vec<String> = m
                .iter()
                .filter(|(_, v)| {
                    v.as_u64() != Some(0) && !v.is_object() && !v.is_array() && !v.is_null()
                })
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            let _ = writeln!(s, "  {prefix:<9} {}", parts.join(" "));
        }
    };
    flat(&mut s, "daemon", &v["daemon"]);
    if v["daemon"]["g2g"].is_object() {
        flat(&mut s, "  g2g", &v["daemon"]["g2g"]);
    }
    flat(&mut s, "  cpu", &v["daemon_cpu"]);
    flat(&mut s, "pnic", &v["pnic"]);
    for (i, q) in v["pnic"]["rx_queues"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        flat(&mut s, &format!("  queue {i}"), q);
    }
    flat(&mut s, "grant", &v["grant"]);
    if v["frames"].is_object() {
        // Machine frames (flip): the counters, then what each domain owns.
        flat(&mut s, "frames", &v["frames"]);
        let per: Vec<String> = v["frames"]["domains"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|d| format!("dom{}={}", d["domid"], d["frames"]))
                    .collect()
            })
            .unwrap_or_default();
        out!("  {:<9} {}", "  owned", per.join(" "));
    }
    flat(&mut s, "bridge", &v["bridge"]);
    flat(&mut s, "settings", &v["settings"]);
    flat(&mut s, "limits", &v["limits"]);
    if v["lro"].is_object() {
        flat(&mut s, "lro", &v["lro"]);
        flat(&mut s, "  flush", &v["lro"]["flush"]);
        flat(&mut s, "  latency", &v["lro"]["flush_latency"]);
    }
    if u64_of(&v["capture"]["started"]) > 0 {
        let mut c = v["capture"].clone();
        if let Some(o) = c.as_object_mut() {
            o.remove("active");
        }
        flat(&mut s, "capture", &c);
        for c in v["capture"]["active"].as_array().into_iter().flatten() {
            out!(
                "    {}  records={} bytes={} dropped={}",
                c["port"].as_str().unwrap_or("?"),
                c["records"],
                c["bytes"],
                c["dropped"]
            );
        }
    }
    if u64_of(&v["reclaimed"]["domains"]) > 0 {
        flat(&mut s, "reclaimed", &v["reclaimed"]);
    }
    let port = |k: &str| u64_of(&v["port"][k]);
    if port("nic_lost") + port("stack_tap_lost") + port("guest_taps_lost") + port("retries") > 0 {
        flat(&mut s, "port", &v["port"]);
    }
    if u64_of(&v["restart"]["restarts"]) > 0 {
        let r = &v["restart"];
        out!(
            "  restart   restarts={} reconnections={} last_reconnection_uptime_s={}",
            r["restarts"],
            r["reconnections"],
            r["last_reconnection_uptime_s"]
        );
        flat(&mut s, "  last", &r["last"]);
    }
    if let Some(vifs) = v["vifs"].as_array() {
        for vif in vifs {
            let rate = serde_json::from_value::<TxRate>(vif["rate"].clone()).ok();
            out!(
                "  vif {}  {}  {}{}{}",
                vif["domid"],
                vif["mac"].as_str().unwrap_or(""),
                vif["state"].as_str().unwrap_or(""),
                vif["fatal"]
                    .as_str()
                    .map(|f| format!(" ({f})"))
                    .unwrap_or_default(),
                rate.map(|r| format!("  rate {r}")).unwrap_or_default()
            );
            flat(&mut s, "  netback", &vif["netback"]);
            flat(&mut s, "  netfront", &vif["netfront"]);
        }
    }
    for r in v["relay"].as_array().into_iter().flatten() {
        out!(
            "  relay {}  {}",
            r["domid"],
            r["mac"].as_str().unwrap_or("")
        );
        flat(&mut s, "  tap", &r["stats"]);
    }
    for h in v["hvm"].as_array().into_iter().flatten() {
        out!(
            "  hvm {}  {}  path {}  {}{}",
            h["domid"],
            h["mac"].as_str().unwrap_or(""),
            h["path"].as_str().unwrap_or("?"),
            if h["ready"] == true {
                "ready"
            } else {
                "starting"
            },
            h["failed"]
                .as_str()
                .map(|f| format!(" (failed: {f})"))
                .unwrap_or_default()
        );
        flat(&mut s, "  port", &h["bridge_port"]);
        flat(&mut s, "  dm", &h["device_model"]);
        flat(&mut s, "  dm card", &h["device_model"]["card"]);
        flat(&mut s, "  dm ioreq", &h["device_model"]["server"]);
        flat(&mut s, "  dm process", &h["device_model"]["process"]);
        flat(&mut s, "  guest", &h["guest"]);
        flat(&mut s, "  guest process", &h["guest"]["process"]);
        flat(&mut s, "  vcpu", &h["guest"]["vcpu"]);
        flat(&mut s, "  driver", &h["guest"]["driver"]);
    }
    s
}

fn u64_of(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn perf(cmd: PerfCmd) -> Result<()> {
    use pvnet_perf::{rr, server, stream};
    match cmd {
        PerfCmd::Server { bind, once } => {
            if bind.port() == 0 {
                bail!("--bind {bind}: port 0 would listen on a port no client is told of");
            }
            server::serve(&server::ServerOpts { bind, once }, |ev| match ev {
                server::ServerEvent::Stream(r) => {
                    println!("{}", serde_json::to_string(&r).unwrap_or_default())
                }
                server::ServerEvent::Rr(r) => println!(
                    "{{\"rr_transactions\":{},\"seconds\":{}}}",
                    r.transactions, r.seconds
                ),
                server::ServerEvent::Udp(r) => {
                    println!("{}", serde_json::to_string(&r).unwrap_or_default())
                }
                server::ServerEvent::Records(r) => {
                    println!("{}", serde_json::to_string(&r).unwrap_or_default())
                }
                server::ServerEvent::Error { peer, message } => {
                    eprintln!("pvnet perf: {peer:?}: {message}")
                }
            })
        }
        PerfCmd::Stream {
            to,
            port,
            duration,
            msg_size,
            bytes,
            pace,
        } => {
            // A byte count alone runs until it is sent, as far as the seconds parser's bound.
            let duration = match (duration, bytes) {
                (Some(d), _) => d,
                (None, None) => 10.0,
                (None, Some(_)) => MAX_SECONDS,
            };
            let opts = stream::StreamOpts {
                msg_size,
                duration: Duration::from_secs_f64(duration),
                max_bytes: bytes,
                pace_mbps: pace,
            };
            if pace == Some(0) {
                bail!("--pace must be positive (Mbit/s)");
            }
            let out = stream::stream_send_outcome(resolve(&to, port)?, &opts)?;
            let result = pvnet_perf::StreamResult {
                sent: out.sent,
                sender: Some(out.tcp),
                receiver: out.report.clone(),
            };
            println!("{}", serde_json::to_string(&result)?);
            if out.report.bytes != out.sent || out.report.mismatches != 0 {
                bail!(
                    "stream not intact: sent {} bytes, receiver verified {} with {} mismatches",
                    out.sent,
                    out.report.bytes,
                    out.report.mismatches
                );
            }
            Ok(())
        }
        PerfCmd::Streams {
            to,
            msg_size,
            limit,
        } => {
            let addrs = (to.iter())
                .map(|t| {
                    t.to_socket_addrs()
                        .with_context(|| format!("--to {t}: not HOST:PORT"))?
                        .next()
                        .ok_or_else(|| anyhow!("--to {t}: cannot resolve"))
                })
                .collect::<Result<Vec<SocketAddr>>>()?;
            // A server takes one stream at a time: a second stream to it would stall.
            for (i, a) in addrs.iter().enumerate() {
                if let Some(j) = addrs[..i].iter().position(|b| b == a) {
                    bail!(
                        "streams {j} and {i} both go to {a} (--to): a server takes one stream at \
                         a time, give each stream its own"
                    );
                }
            }
            let mut session = pvnet_perf::StreamsSession::start(
                &addrs,
                msg_size,
                Duration::from_secs_f64(limit),
            )?;
            for line in std::io::stdin().lines() {
                let line = line.context("reading a slice from standard input")?;
                if line.trim().is_empty() {
                    continue;
                }
                let (settle, seconds, active) = parse_streams_slice(&line, session.len())?;
                let slice = session.slice(&active, settle, seconds)?;
                println!("{}", serde_json::to_string(&slice)?);
            }
            let result = session.finish()?;
            println!("{}", serde_json::to_string(&result)?);
            if !result.intact() {
                bail!(
                    "streams not intact: sent {:?}, receivers {:?}",
                    result.sent,
                    result.receivers
                );
            }
            Ok(())
        }
        PerfCmd::Ping {
            to,
            count,
            size,
            wait,
        } => {
            if !(wait > 0.0 && wait <= 3600.0) {
                bail!("--wait must be a positive number of seconds, at most 3600");
            }
            let r = pvnet_perf::ping::ping_sized(
                to,
                count,
                Duration::from_millis(200),
                Duration::from_secs_f64(wait),
                size,
            )
            .with_context(|| format!("ping {to} with {size} bytes of payload"))?;
            println!("{}", serde_json::to_string(&r)?);
            r.check(to).map_err(anyhow::Error::msg)
        }
        PerfCmd::Rr {
            to,
            port,
            duration,
            req_size,
            rsp_size,
            stepped,
        } => {
            if stepped {
                let mut session = rr::RrSession::connect(
                    resolve(&to, port)?,
                    req_size,
                    rsp_size,
                    Duration::from_secs_f64(duration),
                )?;
                rr::rr_steps(&mut session, std::io::stdin().lock(), std::io::stdout())?;
                return Ok(());
            }
            let opts = rr::RrOpts {
                duration: Duration::from_secs_f64(duration),
                req_size,
                rsp_size,
            };
            let r = rr::rr_client(resolve(&to, port)?, &opts)?;
            println!("{}", serde_json::to_string(&r)?);
            rr::check_echoes(r.errors)
        }
        PerfCmd::Burn { duration } => {
            let end = duration.map(|d| std::time::Instant::now() + Duration::from_secs_f64(d));
            let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
            loop {
                // A million rounds of a multiply-xorshift between clock reads: pure CPU work
                // the optimizer cannot drop (black_box).
                for _ in 0..1_000_000 {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005) ^ (x >> 29));
                }
                if end.is_some_and(|e| std::time::Instant::now() >= e) {
                    return Ok(());
                }
            }
        }
        PerfCmd::Records {
            to,
            port,
            size,
            count,
            rate,
        } => {
            let opts = records_opts(size, count, rate)?;
            let r = pvnet_perf::records_send(resolve(&to, port)?, &opts)?;
            println!("{}", serde_json::to_string(&r)?);
            if !r.intact() {
                bail!(
                    "records not intact: {} of {count} sent, {} acknowledged, {} found corrupt; the server verified {} with {} bad bytes",
                    r.sent,
                    r.acked,
                    r.nacked,
                    r.receiver.records,
                    r.receiver.mismatches
                );
            }
            Ok(())
        }
        PerfCmd::UdpStream {
            to,
            port,
            size,
            rate,
            duration,
            datagrams,
            bytes,
        } => {
            let datagrams = datagrams.or(bytes.map(|b| b.div_ceil(size as u64)));
            let duration = match (duration, datagrams) {
                (Some(d), _) => Some(Duration::from_secs_f64(d)),
                (None, None) => Some(Duration::from_secs(10)),
                (None, Some(_)) => None,
            };
            let opts = pvnet_perf::UdpOpts {
                size,
                duration,
                datagrams,
                rate,
                test_id: None,
                burst: None,
            };
            let out = pvnet_perf::udp_send(resolve(&to, port)?, &opts)?;
            println!("{}", serde_json::to_string(&out)?);
            if out.receiver.corrupt != 0 {
                bail!("{} datagrams arrived corrupt", out.receiver.corrupt);
            }
            Ok(())
        }
    }
}

/// The lowest CPU other than the receiving one, when it is pinned and there is another.
fn other_cpu(receiving: Option<usize>, nr_cpus: usize) -> Option<usize> {
    let r = receiving?;
    (0..nr_cpus).find(|&c| c != r)
}

#[cfg(test)]
mod tests {
    #[test]
    fn stat_text_shows_what_moved_the_reclaim_and_each_receive_queue() {
        let v = serde_json::json!({
            "id": "ab12", "mode": "pv", "uptime_s": 3.0,
            "daemon": {"polls": 7, "pnic_deferred": 0},
            "pnic": {"rx_frames": 9, "kernel_drops": 0, "rx_queues": [
                {"frames": 5, "kernel_drops": 0, "paused": false, "leases": 0},
                {"frames": 4, "kernel_drops": 3, "paused": true, "leases": 0},
            ]},
            "reclaimed": {"domains": 1, "pages": 4096, "queued_packets": 0},
            "vifs": [],
        });
        let t = super::stat_text(&v);
        let line = |p: &str| {
            t.lines()
                .find(|l| l.trim_start().starts_with(p))
                .unwrap_or_else(|| panic!("no {p} in\n{t}"))
                .to_string()
        };
        assert!(line("daemon").ends_with(" polls=7"), "{t}");
        assert!(line("pnic").ends_with(" rx_frames=9"), "{t}");
        assert!(!t.contains('['), "lists have lines of their own:\n{t}");
        assert!(line("queue 0").ends_with(" frames=5 paused=false"), "{t}");
        assert!(
            line("queue 1").ends_with(" frames=4 kernel_drops=3 paused=true"),
            "{t}"
        );
        assert!(line("reclaimed").ends_with(" domains=1 pages=4096"), "{t}");
        // No guest died: no reclaim line.
        let mut quiet = v.clone();
        quiet["reclaimed"]["domains"] = 0.into();
        assert!(!super::stat_text(&quiet).contains("reclaimed"));
        // A vif's transmit rate on its line; none without one.
        let mut with_vifs = v.clone();
        with_vifs["vifs"] = serde_json::json!([
            {"domid": 1, "mac": "00:16:3e:00:00:01", "state": "connected",
             "rate": {"bytes": 100000, "usec": 20000, "bits_per_sec": 4e7}},
            {"domid": 2, "mac": "00:16:3e:00:00:02", "state": "connected", "rate": null},
        ]);
        let t = super::stat_text(&with_vifs);
        let vif = |d: &str| t.lines().find(|l| l.trim_start().starts_with(d)).unwrap();
        assert!(
            vif("vif 1").ends_with("connected  rate 40 Mbit/s @ 20 ms"),
            "{t}"
        );
        assert!(vif("vif 2").ends_with("connected"), "{t}");
    }

    #[test]
    fn rates_print_in_the_unit_that_reads() {
        let r = |b, u| TxRate { bytes: b, usec: u }.to_string();
        assert_eq!(r(100_000, 100_000), "8 Mbit/s @ 100 ms");
        assert_eq!(r(187_500, 1500), "1 Gbit/s @ 1500 us");
        assert_eq!(r(6_250, 50_000), "1 Mbit/s @ 50 ms");
        assert_eq!(r(12, 1000), "96 kbit/s @ 1 ms");
        assert_eq!(r(9, 1_000_000), "72 bit/s @ 1000 ms");
    }

    #[test]
    fn a_streams_slice_line_is_checked() {
        use std::time::Duration;
        let (settle, secs, active) = super::parse_streams_slice("0.2 0.5 2,0", 4).unwrap();
        assert_eq!(
            (settle, secs, active),
            (
                Duration::from_millis(200),
                Duration::from_millis(500),
                vec![2, 0]
            )
        );
        assert_eq!(
            super::parse_streams_slice(" 0 1 all ", 3).unwrap().2,
            [0, 1, 2]
        );
        for (bad, why) in [
            ("0.2 0.5", "SETTLE SECONDS STREAMS"),
            ("0.2 0.5 1 2", "SETTLE SECONDS STREAMS"),
            ("x 0.5 1", "SETTLE \"x\""),
            ("0.2 -1 1", "SECONDS \"-1\""),
            ("0.2 0 1", "more than 0"),
            ("0.2 NaN 1", "SECONDS"),
            ("0.2 0.5 4", "stream \"4\" is not one of 0 to 3"),
            ("0.2 0.5 1,,2", "stream \"\""),
        ] {
            let e = super::parse_streams_slice(bad, 4).unwrap_err().to_string();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }

    #[test]
    fn the_sender_s_default_cpu_is_another_than_the_receiving_one() {
        assert_eq!(super::other_cpu(Some(0), 2), Some(1));
        assert_eq!(super::other_cpu(Some(1), 2), Some(0));
        assert_eq!(super::other_cpu(Some(3), 8), Some(0));
        assert_eq!(super::other_cpu(Some(0), 1), None, "one CPU: nowhere else");
        assert_eq!(
            super::other_cpu(None, 8),
            None,
            "--cpu -1: no receiving CPU"
        );
    }
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("pvnet").chain(args.iter().copied()))
    }

    #[test]
    fn hvm_path_is_parsed_once_into_the_enum() {
        use pvnet_hvm::Path;
        use pvnet_ne2000::Class;
        let Cmd::Up { hvm_path, .. } = parse(&["up", "--hvm", "1"]).unwrap().cmd else {
            panic!("not up");
        };
        assert_eq!(hvm_path, Path::Original);
        let Cmd::Up { hvm_path, .. } = parse(&["up", "--hvm-path", "max"]).unwrap().cmd else {
            panic!("not up");
        };
        assert_eq!(hvm_path, Path::Fast(Class::Max));
        let Cmd::Set { hvm_path, .. } = parse(&["set", "--hvm-path", "seed"]).unwrap().cmd else {
            panic!("not set");
        };
        assert_eq!(hvm_path, Some(Path::Fast(Class::Seed)));
        let e = parse(&["set", "--hvm-path", "fast"])
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("original, seed, max"), "{e}");
    }

    /// `up`'s aggregation as parsed from `args` and resolved for its mode and port.
    fn up_lro(args: &[&str]) -> Option<config::LroSettings> {
        let Cmd::Up {
            lro,
            mode,
            port_frames,
            grant,
            port_gro,
            guest_gro,
            ..
        } = parse(args).unwrap().cmd
        else {
            panic!("not up");
        };
        lro.settings(
            mode,
            config::frame_port(port_frames, grant),
            port_gro || guest_gro,
        )
    }

    #[test]
    fn up_takes_on_and_off_for_its_switches() {
        let switches = |args: &[&str]| {
            let Cmd::Up {
                g2g, guest_cgroups, ..
            } = parse(args).unwrap().cmd
            else {
                panic!("not up");
            };
            (g2g, guest_cgroups)
        };
        assert_eq!(switches(&["up"]), (true, true));
        assert_eq!(switches(&["up", "--g2g", "off"]), (false, true));
        assert_eq!(
            switches(&["up", "--g2g", "on", "--guest-cgroups", "off"]),
            (true, false)
        );
        assert!(parse(&["up", "--g2g", "maybe"]).is_err());
    }

    #[test]
    fn up_without_lro_runs_the_default_configuration() {
        let adaptive = Some(config::LroSettings {
            policy: lro::Policy::Adaptive,
            mode: lro::Mode::Skb,
        });
        // Issue #24's rule chose `adaptive` (docs/default-config.md).
        assert_eq!(config::DEFAULT_CONFIG, "adaptive");
        assert_eq!(up_lro(&["up"]), adaptive);
        assert_eq!(up_lro(&["up", "--guests", "2", "--budget", "8"]), adaptive);
        assert_eq!(up_lro(&["up", "--mode", "xen", "--hvm", "1"]), adaptive);
        // GRO at the port or in the guests names its own configuration (`port-gro`,
        // `guest-gro`); `--lro adaptive` on top of port GRO is `port-gro+adaptive`.
        assert_eq!(up_lro(&["up", "--port-gro"]), None);
        assert_eq!(up_lro(&["up", "--guest-gro"]), None);
        assert_eq!(up_lro(&["up", "--port-gro", "--lro", "adaptive"]), adaptive);
        // The old default, `xen`, stays one flag away.
        assert_eq!(up_lro(&["up", "--lro", "off"]), None);
        // Other modes and the frame port aggregate only when asked (linux and the frame port
        // refuse it then).
        assert_eq!(up_lro(&["up", "--mode", "linux"]), None);
        assert_eq!(up_lro(&["up", "--mode", "relay"]), None);
        assert_eq!(up_lro(&["up", "--grant", "flip"]), None);
        assert_eq!(up_lro(&["up", "--port-frames"]), None);
        // What is asked for wins, and --lro-mode applies to the default policy too.
        assert_eq!(
            up_lro(&["up", "--lro", "every:2"]).map(|s| s.policy),
            Some(lro::Policy::Every(2))
        );
        assert_eq!(
            up_lro(&["up", "--mode", "relay", "--lro", "adaptive"]),
            adaptive
        );
        assert_eq!(
            up_lro(&["up", "--lro-mode", "page"]),
            Some(config::LroSettings {
                policy: lro::Policy::Adaptive,
                mode: lro::Mode::Page,
            })
        );
    }

    #[test]
    fn every_seconds_option_takes_a_finite_time_above_zero_and_says_which_it_refused() {
        for bad in ["0", "-1", "NaN", "inf", "1e20", "x"] {
            for (args, flag) in [
                (&["perf", "rr", "h"][..], "--duration"),
                (&["perf", "stream", "h"], "--duration"),
                (&["perf", "streams", "--to", "h:1"], "--limit"),
                (&["perf", "ping", "10.0.0.1"], "--wait"),
                (&["perf", "burn"], "--duration"),
                (&["perf", "udp-stream", "h", "--size", "100"], "--duration"),
                (&["capture"], "--duration"),
                (&["bench"], "--duration"),
                (&["bench"], "--rr-duration"),
                (&["bench"], "--paired-seconds"),
            ] {
                let given = format!("{flag}={bad}");
                let args: Vec<&str> = args.iter().copied().chain([given.as_str()]).collect();
                let e = parse(&args)
                    .err()
                    .unwrap_or_else(|| panic!("{args:?} accepted"));
                let msg = e.to_string();
                assert!(
                    msg.contains(&format!("for '{flag} <"))
                        && msg.contains("is not a number of seconds above 0"),
                    "{args:?}: {msg}"
                );
            }
        }
        assert_eq!(super::seconds(" 2.5 "), Ok(2.5));
        assert_eq!(super::seconds("1e6"), Ok(super::MAX_SECONDS));
    }

    #[test]
    fn ranges_and_conflicts_clap_enforces() {
        for bad in [
            &["perf", "ping", "10.0.0.1", "--count", "0"][..],
            &["perf", "ping", "10.0.0.1", "--count", "65536"],
            &["up", "--cpu", "-2"],
            &["down", "--id", "ab12", "--all"],
            &["up", "--hvm", "1", "--exit-cost-ns", "10000001"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        for good in [
            &["perf", "ping", "10.0.0.1", "--count", "65535"][..],
            &["up", "--cpu", "-1"],
            &["down", "--all"],
            &["up", "--hvm", "1", "--exit-cost-ns", "10000000"],
        ] {
            assert!(parse(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn records_arguments() {
        let Cmd::Perf {
            cmd: PerfCmd::Records {
                size, count, rate, ..
            },
        } = parse(&["perf", "records", "10.0.0.1", "--size", "64K"])
            .unwrap()
            .cmd
        else {
            panic!("not perf records");
        };
        assert_eq!((size, count, rate), (65536, 2000, 50.0));
        let opts = records_opts(size, 5, 0.0).unwrap();
        assert_eq!(opts.rate, None);
        assert_eq!(records_opts(size, 5, 20.0).unwrap().rate, Some(20.0));
        assert!(records_opts(size, 0, 50.0).is_err());
        assert!(records_opts(size, 5, -1.0).is_err());
        for bad in [
            &["perf", "records", "h"][..],
            &["perf", "records", "h", "--size", "0"],
            &["perf", "records", "h", "--size", "17M"],
            &["perf", "records", "h", "--size", "1K", "--count", "-3"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
