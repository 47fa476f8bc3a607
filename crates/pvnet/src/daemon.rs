//! The driver-domain daemon: the toolstack (the testbed, guest memory, event channels, the
//! store, guest processes) and the event loop that drives the driver domain's data path
//! ([`pvnet_dd::datapath`]) and answers admin requests, in one thread pinned to the receiving
//! CPU.
//!
//! Every descriptor the loop waits on has a typed [`Token`]; one [`Daemon::dispatch`] serves
//! them all, whether the loop is about to sleep or between two polls of a busy port.

use std::collections::BTreeMap;
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::socket::{self, AddressFamily, SockFlag, SockType, UnixAddr};
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use pvnet_dd::datapath::{self, vif_port, DataPath, PathConfig, TapPort, PORT_DDSTACK};
use pvnet_dd::frameport::{FramePool, DEFAULT_POOL_FRAMES};
use pvnet_dd::netback::credit::TxRate;
use pvnet_dd::netback::{Config as NetbackConfig, Fatal, Mechanism, Netback, VifStats};
use pvnet_dd::nf::Filter;
use pvnet_dd::packet::Packet;
use pvnet_dd::switch;
use pvnet_dd::xenbus;
use pvnet_guest::netfront::{FrontStats, Layout, RX_BUFS};
use pvnet_guest::proto::{BootInfo, FlipBoot, FromGuest, ToGuest};
use pvnet_guest::run::format_mac;
use pvnet_hv::evtchn::{channel_pair, EvtchnEnd};
use pvnet_hv::frames::Machine;
use pvnet_hv::grant::{Hypervisor, GRANT_FRAMES};
use pvnet_hv::mem::GuestMemory;
use pvnet_hv::store::{Store, XenbusState};
use pvnet_hv::{ctl, DomId};
use pvnet_netif::keys;
use pvnet_pnic::{Pnic, PnicConfig};
use pvnet_testbed::{link, topology, RunId, Tap, Testbed, TestbedConfig};
use serde::Serialize;
use serde_json::json;

use crate::admin::{AdminReply, AdminRequest, LroChange, SetRequest, Settings};
use crate::config::{check_mtu, check_ring_frames, DaemonConfig, LroSettings, Mode};
use crate::relay::RelayTap;
use crate::rundir::{self, RunInfo};

mod hvm;

/// The event channel port every vif uses inside its domain.
const VIF_PORT: u32 = 1;
/// The MAC of the driver domain's own stack port.
const DD_STACK_MAC: [u8; 6] = [0x02, 0x70, 0x76, 0, 0, 0x02];
/// Extra guest pages beyond what netfront lays out.
const SPARE_PAGES: u32 = 16;
/// The name of every PV guest's interface (its TAP, in its own namespace).
const GUEST_IFNAME: &str = "eth0";

/// What woke the loop: one per descriptor in the epoll set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Token {
    /// SIGINT, SIGTERM or SIGHUP (a signalfd).
    Signal,
    /// The driver domain's own stack port has frames.
    StackTap,
    /// A new admin connection.
    Admin,
    /// The aggregation engine's timer.
    LroTimer,
    /// Guest `dom`'s control socket.
    GuestCtl(u16),
    /// Guest `dom`'s event channel.
    Evtchn(u16),
    /// An external frontend connects for guest `dom`.
    Attach(u16),
    /// A message on admin connection `id`.
    AdminConn(u32),
    /// Relayed guest `dom`'s TAP has frames.
    Relay(u16),
    /// HVM domain `dom`'s device model sent frames to its bridge port.
    HvmNet(u16),
    /// HVM domain `dom`'s device model's control socket.
    DmCtl(u16),
    /// HVM guest `dom`'s control socket.
    HvmCtl(u16),
}

impl Token {
    /// The token's kind in bits 32 and up, its argument in the low 32 bits.
    pub fn to_u64(self) -> u64 {
        let (kind, arg) = match self {
            Token::Signal => (1, 0),
            Token::StackTap => (2, 0),
            Token::Admin => (3, 0),
            Token::LroTimer => (4, 0),
            Token::GuestCtl(d) => (5, d as u32),
            Token::Evtchn(d) => (6, d as u32),
            Token::Attach(d) => (7, d as u32),
            Token::AdminConn(id) => (8, id),
            Token::Relay(d) => (9, d as u32),
            Token::HvmNet(d) => (10, d as u32),
            Token::DmCtl(d) => (11, d as u32),
            Token::HvmCtl(d) => (12, d as u32),
        };
        (kind << 32) | arg as u64
    }

    /// The token [`Token::to_u64`] made, or None for any other value.
    pub fn from_u64(v: u64) -> Option<Token> {
        let arg = v as u32;
        let dom = u16::try_from(arg).ok();
        let plain = |t: Token| (arg == 0).then_some(t);
        match v >> 32 {
            1 => plain(Token::Signal),
            2 => plain(Token::StackTap),
            3 => plain(Token::Admin),
            4 => plain(Token::LroTimer),
            5 => dom.map(Token::GuestCtl),
            6 => dom.map(Token::Evtchn),
            7 => dom.map(Token::Attach),
            8 => Some(Token::AdminConn(arg)),
            9 => dom.map(Token::Relay),
            10 => dom.map(Token::HvmNet),
            11 => dom.map(Token::DmCtl),
            12 => dom.map(Token::HvmCtl),
            _ => None,
        }
    }

    fn event(self) -> EpollEvent {
        EpollEvent::new(EpollFlags::EPOLLIN, self.to_u64())
    }
}

/// The switch of `mode`, with `rules` for the rule pass of `bridge-nf` (the default set when
/// None).
pub fn make_switch(mode: switch::Mode, rules: Option<&str>) -> Result<switch::Switch> {
    let cfg = pvnet_dd::bridge::BridgeConfig::default();
    Ok(match (mode, rules) {
        (switch::Mode::BridgeNf, Some(text)) => {
            let filter = Filter::parse(text).map_err(|e| anyhow!("the rules: {e}"))?;
            switch::Switch::bridge_nf(cfg, filter)
        }
        (_, Some(_)) => bail!("--rules needs --switch bridge-nf"),
        (mode, None) => switch::Switch::new(mode, cfg),
    })
}

/// A driver domain's data path with no ports, configured as `cfg` says.
fn new_datapath(cfg: &DaemonConfig) -> Result<DataPath<Pnic, SystemClock>> {
    let mut dp = DataPath::new(
        PathConfig {
            budget: cfg.budget,
            bo: cfg.bo,
        },
        SystemClock::new(),
        cfg.lro.map(|l| l.policy),
        cfg.lro.map(|l| l.mode).unwrap_or_default(),
    )
    .with_switch(make_switch(cfg.switch, cfg.rules.as_deref())?)
    .with_lro_flows_per_guest(cfg.limits.lro_flows_per_guest);
    dp.set_g2g_direct(cfg.g2g);
    Ok(dp)
}

/// The real clock: nanoseconds since the daemon started, and the TSC.
pub struct SystemClock {
    start: Instant,
    ticks_per_us: u64,
}

impl SystemClock {
    pub fn new() -> SystemClock {
        SystemClock {
            start: Instant::now(),
            ticks_per_us: (pvnet_perf::cpu::tsc_hz() / 1_000_000).max(1),
        }
    }
}

impl datapath::Clock for SystemClock {
    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn ticks(&self) -> u64 {
        pvnet_perf::cpu::rdtsc()
    }

    fn ticks_per_us(&self) -> u64 {
        self.ticks_per_us
    }

    fn realtime_ns(&self) -> Option<u64> {
        // The packet ring stamps frames with CLOCK_REALTIME (`tp_sec`/`tp_nsec`).
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?;
        u64::try_from(d.as_nanos()).ok()
    }
}

/// The driver domain's own stack port: a TAP in its namespace, written one packet at a time.
struct StackTap(Tap);

impl TapPort for StackTap {
    fn push(&mut self, pkt: Packet) -> io::Result<()> {
        let h = pkt.vnet.to_bytes();
        if pkt.is_chained() {
            let mut iov = vec![IoSlice::new(&h)];
            iov.extend(pkt.pieces().map(IoSlice::new));
            self.0.writev(&iov)
        } else {
            self.0
                .writev(&[IoSlice::new(&h), IoSlice::new(pkt.head.as_slice())])
        }
        .map(drop)
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.readv(&mut [IoSliceMut::new(buf)])
    }
}

/// The connection state of a vif, as `pvnet stat` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VifState {
    Waiting,
    Connected,
    /// Disconnected by the backend for breaking the protocol.
    Disconnected,
    Closed,
    /// Its backend went away with the driver domain (`pvnet restart-dd`); waiting for the
    /// frontend to say Closed.
    Restarting,
    /// A new backend was probed (InitWait); waiting for the frontend to say Connected.
    Reconnecting,
}

/// A guest as the toolstack keeps it (its data path lives in the [`DataPath`] while connected).
struct Vif {
    domid: DomId,
    mac: [u8; 6],
    ctl: Option<OwnedFd>,
    /// The guest's end of the control socket until an external frontend takes it.
    attach_end: Option<OwnedFd>,
    attach_listener: Option<(OwnedFd, String)>,
    /// The backend's end of the event channel until the vif connects.
    evtchn_back: Option<EvtchnEnd>,
    /// The backend's counters when it left the data path.
    stats: VifStats,
    front_stats: FrontStats,
    state: VifState,
    fatal: Option<Fatal>,
    child: Option<Child>,
    ready: bool,
    failed: Option<String>,
    /// Its process is gone and its domain destroyed.
    destroyed: bool,
    /// Times its frontend reconnected to a new backend after a driver-domain restart.
    reconnections: u64,
    /// Time from the last restart's start to this vif's reconnection, in ms.
    last_reconnect_ms: Option<f64>,
    /// Its control socket's rate limit and traffic.
    ctl_bucket: CtlBucket,
    /// Its event channel's delayed wakes after spurious events.
    late_eoi: LateEoi,
    /// Its attach socket's `accept` failures ([`AcceptBackoff`]).
    attach_backoff: AcceptBackoff,
}

/// Xen's "late EOI" for a backend's event channel (XSA-332): an event after which the backend
/// found nothing to do is spurious, and from the second in a row on the channel is not
/// listened to for 1, 2, 4, ... ms (at most a second) before its next wake; an event with work
/// resets the run. A guest that notifies without pause then costs the daemon one wake per
/// delay instead of one per notification (another guest's stream beside it: 0.61–0.71 of its
/// throughput before, docs/ctl-flood.md). A well-behaved frontend's events almost never find
/// nothing to do (1 of 39,000 wakes in a stream and a TCP_RR run), so it does not meet it.
#[derive(Clone, Debug, Default, Serialize)]
struct LateEoi {
    /// Wakes delayed.
    delayed: u64,
    /// Spurious events in a row now.
    #[serde(skip)]
    spurious: u32,
    /// When the channel is listened to again: after a delay, or when its guest's next credit
    /// window starts (`Daemon::credit_wait`); the later of the two when both hold it.
    #[serde(skip)]
    resume_at: Option<Instant>,
}

/// The longest delay [`LateEoi`] puts on a channel.
const LATE_EOI_MAX: Duration = Duration::from_secs(1);

/// A listening socket (the admin socket, a domain's attach socket) whose `accept` failed for
/// want of a resource: descriptors (`EMFILE`, `ENFILE`) or kernel memory. The connection stays
/// in the backlog, so the socket polls ready again at once; left in the level-triggered epoll
/// set, it would keep the loop awake for as long as the shortage lasts. It leaves the set for
/// [`ACCEPT_BACKOFF`] instead, and the connections waiting are taken when it comes back.
#[derive(Clone, Debug, Default)]
struct AcceptBackoff {
    /// Times `accept` failed for want of a resource.
    failures: u64,
    /// When the socket goes back into the epoll set (while set aside).
    resume_at: Option<Instant>,
    /// The last `accept` failed for want of a resource: the shortage has been said.
    failing: bool,
}

/// How long a listener whose `accept` failed for want of a resource stays out of the epoll set.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

impl AcceptBackoff {
    /// The next connection waiting on listener `l`, if there is one. When `accept` fails for
    /// want of a resource, `l` leaves `ep` for [`ACCEPT_BACKOFF`] (`resume_at`), and the first
    /// failure of a shortage is said in the log, naming the listener (`what`).
    fn accept(
        &mut self,
        ep: &Epoll,
        l: BorrowedFd<'_>,
        what: impl FnOnce() -> String,
    ) -> Option<OwnedFd> {
        loop {
            let e = match accept(l) {
                Ok(c) => {
                    self.failing = false;
                    return Some(c);
                }
                Err(e) => e,
            };
            match e.raw_os_error() {
                Some(libc::EAGAIN) => {
                    self.failing = false;
                    return None;
                }
                // That connection is gone, or a signal came: take the next.
                Some(libc::ECONNABORTED | libc::EINTR | libc::EPROTO) => continue,
                _ => {
                    let _ = ep.delete(l);
                    if !self.failing {
                        eprintln!(
                            "pvnet: {}: accept: {e}; trying again every {} ms",
                            what(),
                            ACCEPT_BACKOFF.as_millis()
                        );
                    }
                    self.failing = true;
                    self.failures += 1;
                    self.resume_at = Some(Instant::now() + ACCEPT_BACKOFF);
                    return None;
                }
            }
        }
    }
}

/// A guest's control socket (xenstore requests, its frontend's counters) is read at most
/// [`CTL_RATE`] messages a second, in bursts of at most [`CTL_BURST`]: the daemon answers
/// them on the data path's thread, and a guest that sent them without pause held it in its
/// socket (another guest's stream beside it: 13–169 Mbit/s instead of 4448–7442,
/// docs/ctl-flood.md). Past its rate the socket leaves the epoll set until a quarter of a
/// burst has come in ([`CtlBucket::take`]), and the guest's sends wait in the socket, or block.
#[derive(Clone, Debug, Serialize)]
struct CtlBucket {
    /// Messages read from the guest.
    messages: u64,
    /// Times its socket was set aside for running out of tokens.
    throttled: u64,
    #[serde(skip)]
    tokens: f64,
    #[serde(skip)]
    refilled: Instant,
    /// When its socket goes back into the epoll set (while set aside).
    #[serde(skip)]
    resume_at: Option<Instant>,
}

/// Control messages a second a guest may send ([`CtlBucket`]); a guest sends a few dozen to
/// connect, and its counters twice a second.
const CTL_RATE: f64 = 1000.0;
/// The most a guest may send at once ([`CtlBucket`]): a connection's handshake, with room.
const CTL_BURST: f64 = 128.0;

impl CtlBucket {
    fn new() -> CtlBucket {
        CtlBucket {
            messages: 0,
            throttled: 0,
            tokens: CTL_BURST,
            refilled: Instant::now(),
            resume_at: None,
        }
    }

    /// Takes a token for one message. When none is left, the time to come back: when a
    /// quarter of a burst has come in, so that a guest held at its rate costs the daemon a
    /// wake per 32 messages, not one per message.
    fn take(&mut self, now: Instant) -> Result<(), Instant> {
        let dt = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + dt * CTL_RATE).min(CTL_BURST);
        self.refilled = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Ok(());
        }
        let wait = (CTL_BURST / 4.0 - self.tokens) / CTL_RATE;
        Err(now + Duration::from_secs_f64(wait))
    }
}

/// Driver-domain restarts (`pvnet restart-dd`), as `pvnet stat` shows them (under `restart`).
#[derive(Clone, Debug, Default, Serialize)]
struct Restarts {
    /// Restarts done.
    restarts: u64,
    /// Vifs reconnected to a new backend, over all restarts.
    reconnections: u64,
    /// Daemon uptime at the last reconnection, in s.
    last_reconnection_uptime_s: Option<f64>,
    /// The last restart.
    last: Option<LastRestart>,
}

/// The driver domain's ports after the run's start, as `pvnet stat` shows them (under
/// `port`): the physical port lost with its NIC, the stack's TAP deleted, or both not opened
/// by a restart, and opened again from the loop.
#[derive(Clone, Debug, Default, Serialize)]
struct PortLife {
    /// Times the NIC left the driver domain under an open port, which then came off the path.
    nic_lost: u64,
    /// Times the driver domain's stack TAP was deleted under it (it came off the path).
    stack_tap_lost: u64,
    /// Guests' TAPs the daemon serves (`--mode relay`, HVM guests) deleted under it: each
    /// came off the path, and its guest has no network until the run ends.
    guest_taps_lost: u64,
    /// Times the loop opened the closed ports again (after a lost NIC or stack TAP, or a
    /// restart that could not).
    reopened: u64,
    /// Tries the loop made to open them, over the run.
    retries: u64,
    /// Why the ports last closed or a try last failed; None while nothing went wrong.
    last_error: Option<String>,
    /// When the loop next tries to open the ports missing from the data path (None: none
    /// missing, or given up).
    #[serde(skip)]
    retry_at: Option<Instant>,
}

/// How often the loop tries again to open the ports that are closed.
const PORT_RETRY: Duration = Duration::from_millis(crate::admin::PORT_RETRY_MS);

/// One restart: what it dropped and how long its vifs took to come back.
#[derive(Clone, Debug, Default, Serialize)]
struct LastRestart {
    /// Daemon uptime when it started, in s.
    at_uptime_s: f64,
    /// Time the old driver domain took to go and the new one to open its ports, in ms.
    down_ms: f64,
    /// Of which: the old driver domain's state destroyed (steps 1 to 3 of `restart_dd`).
    teardown_ms: f64,
    /// Of which: the new driver domain's ports opened (step 4).
    ports_ms: f64,
    /// Connected vifs whose backend went away.
    vifs: u64,
    /// Of those, reconnected so far.
    reconnected: u64,
    /// From the start of the restart to the last vif's reconnection, in ms (None while a vif
    /// is still coming back).
    reconnect_ms: Option<f64>,
    /// Packets that were queued in the old backends for their guests, and frames waiting for
    /// the old physical port, dropped with them (TCP sends their bytes again).
    queued_packets_dropped: u64,
    /// From the start of the restart to the new driver domain's ports being open, in ms:
    /// `down_ms` when step 4 opened them, later when it could not (`port_error`) and the loop
    /// opened them on a retry; None while they are still closed.
    port_opened_ms: Option<f64>,
    /// Why the new driver domain's ports could not be opened (the last try's error); None
    /// when step 4 opened them.
    port_error: Option<String>,
    /// Tries the loop made after step 4 could not open the ports, one every [`PORT_RETRY`].
    port_retries: u64,
    /// When it started.
    #[serde(skip)]
    started: Option<Instant>,
}

/// What the toolstack took back from guests whose process went away, as `pvnet stat` shows it
/// (under `reclaimed`).
#[derive(Clone, Debug, Default, Serialize)]
struct Reclaimed {
    /// Domains destroyed: vif off the data path, rings unmapped, grant table and memory
    /// unregistered.
    domains: u64,
    /// Their memory, in pages.
    pages: u64,
    /// Packets that were queued for them, dropped with their queues.
    queued_packets: u64,
}

pub struct Daemon {
    cfg: DaemonConfig,
    testbed: Testbed,
    hv: Arc<Hypervisor>,
    /// The driver domain's packet frames, when the port receives into machine frames
    /// (`--grant flip`, `--port-frames`).
    pool: Option<Arc<FramePool>>,
    store: Store,
    dp: DataPath<Pnic, SystemClock>,
    /// Fires at the aggregation engine's next deadline (hold limits, timeouts, an idle port).
    lro_timer: TimerFd,
    vifs: BTreeMap<u16, Vif>,
    /// Mode relay: each relayed guest's MAC, by domid.
    relay_macs: BTreeMap<u16, [u8; 6]>,
    /// HVM domains (emulated NE2000), by domid.
    hvms: BTreeMap<u16, hvm::HvmDomain>,
    /// `--guest-gro`: the kernel threads polling the guests' TAPs.
    guest_napi_pids: Vec<i32>,
    /// `--guest-cgroups`: the PV guests' CPU groups (None: off, or no cpu controller).
    guest_groups: Option<crate::cgroup::GuestGroups>,
    ep: Epoll,
    sigfd: SignalFd,
    admin: OwnedFd,
    admin_conns: BTreeMap<u32, OwnedFd>,
    /// Admin connections closed to make room for a new one ([`ADMIN_CONNS_MAX`]).
    admin_evicted: u64,
    /// The admin socket's `accept` failures ([`AcceptBackoff`]).
    admin_backoff: AcceptBackoff,
    next_conn: u32,
    start: Instant,
    stopping: bool,
    reclaimed: Reclaimed,
    restarts: Restarts,
    port: PortLife,
}

/// Blocks SIGINT/SIGTERM/SIGHUP and returns a signalfd for them, so a signal becomes an event
/// of the loop and teardown always runs (the daemon's, and `pvnet capture`'s).
pub(crate) fn signal_fd() -> Result<SignalFd> {
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGHUP);
    set.thread_block()?;
    Ok(SignalFd::with_flags(
        &set,
        SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC,
    )?)
}

/// Admin connections open at once; a new one beyond closes the oldest.
const ADMIN_CONNS_MAX: usize = 64;

fn seqpacket_listener(path: &str) -> Result<OwnedFd> {
    let _ = std::fs::remove_file(path);
    let fd = socket::socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        None,
    )?;
    socket::bind(fd.as_raw_fd(), &UnixAddr::new(path)?).with_context(|| format!("bind {path}"))?;
    socket::listen(&fd, socket::Backlog::new(16)?)?;
    Ok(fd)
}

fn accept(fd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let raw = socket::accept4(fd.as_raw_fd(), SockFlag::SOCK_CLOEXEC)?;
    // SAFETY: accept4 returned a new descriptor that nothing else owns.
    Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) })
}

/// The data path thread's scheduling, for `stat` (which that thread answers): time on a CPU,
/// time spent runnable but waiting for one, and slices run, from
/// `/proc/thread-self/schedstat` (null where the kernel lacks `CONFIG_SCHED_INFO`). The wait
/// is the host's doing: a driver domain that waits runnable while `pnic.kernel_drops` rises
/// was not given its CPU (README, "The driver domain's CPU").
fn data_path_thread_cpu() -> serde_json::Value {
    let Ok(s) = std::fs::read_to_string("/proc/thread-self/schedstat") else {
        return serde_json::Value::Null;
    };
    let f: Vec<u64> = s
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    match f[..] {
        [run_ns, wait_ns, slices, ..] => json!({
            "run_ms": run_ns / 1_000_000,
            "waited_runnable_ms": wait_ns / 1_000_000,
            "slices": slices,
        }),
        _ => serde_json::Value::Null,
    }
}

impl Daemon {
    /// Builds the testbed and, for the PV modes, the driver domain and its guests. Returns when
    /// every guest's frontend is connected (or failed).
    pub fn start(cfg: DaemonConfig) -> Result<Daemon> {
        if cfg.hvm > 0 && cfg.mode != Mode::Xen {
            bail!("HVM guests need the driver domain's toolstack (--hvm needs --mode xen)");
        }
        let sigfd = signal_fd()?;
        let id = RunId::parse(&cfg.id)?;
        rundir::create_run_dir(&cfg.id)?;
        let guests = match cfg.mode {
            Mode::Linux => 0,
            Mode::Xen => cfg.guests + cfg.attach + cfg.hvm,
            Mode::Relay if cfg.attach > 0 => {
                bail!("mode relay has no frontends to attach (--attach needs --mode xen)")
            }
            Mode::Relay => cfg.guests,
        };
        let testbed = Testbed::create(TestbedConfig {
            id,
            guests,
            mtu: check_mtu(cfg.mtu)?,
            rps_cpu: if cfg.rps { cfg.cpu } else { None },
            gro: cfg.gro,
            gro_max_size: (cfg.gro && cfg.mode != Mode::Linux)
                .then(|| pvnet_pnic::gro_max_size_for(pvnet_pnic::gro_frame_size_for_mtu(cfg.mtu))),
            remote_rps_cpu: if cfg.rps { cfg.sender_cpu } else { None },
        })?;
        if let Some(c) = cfg.cpu {
            pvnet_testbed::cpu::pin_current_thread(c)?;
        }
        let admin = seqpacket_listener(rundir::ctl_path(&cfg.id).to_str().expect("utf-8 path"))?;
        let ep = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
        ep.add(sigfd.as_fd(), Token::Signal.event())?;
        ep.add(admin.as_fd(), Token::Admin.event())?;
        let lro_timer = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )?;
        ep.add(lro_timer.as_fd(), Token::LroTimer.event())?;
        let dp = new_datapath(&cfg)?;
        let mut d = Daemon {
            cfg,
            testbed,
            hv: Arc::new(Hypervisor::new()),
            pool: None,
            store: Store::new(),
            dp,
            lro_timer,
            vifs: BTreeMap::new(),
            relay_macs: BTreeMap::new(),
            hvms: BTreeMap::new(),
            guest_napi_pids: Vec::new(),
            guest_groups: None,
            ep,
            sigfd,
            admin,
            admin_conns: BTreeMap::new(),
            admin_evicted: 0,
            admin_backoff: AcceptBackoff::default(),
            next_conn: 0,
            start: Instant::now(),
            stopping: false,
            reclaimed: Reclaimed::default(),
            restarts: Restarts::default(),
            port: PortLife::default(),
        };
        match d.cfg.mode {
            Mode::Linux => d.testbed.native_addr()?,
            Mode::Xen => d.start_pv()?,
            Mode::Relay => d.start_relay()?,
        }
        Ok(d)
    }

    fn start_pv(&mut self) -> Result<()> {
        self.open_ports()?;
        // One group per guest of the testbed, by its index: PV guests, attached ones (whose
        // processes the operator starts; their receivers join), then HVM guests.
        self.create_guest_groups(self.cfg.testbed_guests());
        for i in 0..self.cfg.guests + self.cfg.attach {
            let spawn = i < self.cfg.guests;
            self.create_guest(i, spawn)?;
        }
        for i in 0..self.cfg.hvm {
            self.create_hvm_guest(self.cfg.guests + self.cfg.attach + i)?;
        }
        // Wait until every spawned guest is connected and up.
        let deadline = Instant::now() + Duration::from_secs(20);
        while self
            .vifs
            .values()
            .any(|v| v.child.is_some() && !v.ready && v.failed.is_none())
            || self.hvms.values().any(|h| !h.ready() && h.failed.is_none())
        {
            if Instant::now() > deadline {
                bail!("guests did not connect within 20 s");
            }
            self.run_once(Duration::from_millis(50))?;
            if self.stopping {
                bail!("interrupted while starting");
            }
        }
        if let Some(h) = self.hvms.values().find(|h| h.failed.is_some()) {
            bail!(
                "HVM guest {} failed: {}",
                h.domid,
                h.failed.as_deref().unwrap_or("")
            );
        }
        if let Some(v) = self.vifs.values().find(|v| v.failed.is_some()) {
            bail!(
                "guest {} failed: {}",
                v.domid.0,
                v.failed.as_deref().unwrap_or("")
            );
        }
        Ok(())
    }

    /// Mode relay: the ports, then each guest's TAP in its namespace, served by the daemon.
    fn start_relay(&mut self) -> Result<()> {
        self.open_ports()?;
        // A relayed guest has no process of its own (the daemon writes its TAP), but what runs
        // in it (a benchmark's receiver) joins its group, as in a PV guest: the floor is then
        // measured under the same scheduling of guests as the path it is the floor of.
        self.create_guest_groups(self.cfg.guests);
        for i in 0..self.cfg.guests {
            let dom = i as u16 + 1;
            let r = RelayTap::create(&self.testbed.guests[i], i, self.cfg.mtu)?;
            self.ep.add(r.tap().fd(), Token::Relay(dom).event())?;
            let mac = r.mac;
            self.relay_macs.insert(dom, mac);
            self.dp
                .attach_tap(vif_port(dom), mac, Box::new(r))
                .map_err(|e| anyhow!("attaching relayed guest {i} to the switch: {e}"))?;
        }
        Ok(())
    }

    /// `--guest-cgroups`: one CPU group per guest of the testbed, by index, each with the
    /// equal weight. Without a cpu controller the run goes on without groups, and says so.
    fn create_guest_groups(&mut self, groups: usize) {
        if !self.cfg.guest_cgroups || groups == 0 {
            return;
        }
        match crate::cgroup::GuestGroups::create(&self.cfg.id, groups) {
            Ok(g) => {
                let (file, w) = g.kind().weight();
                eprintln!(
                    "pvnet: guest cgroups: {groups} guests, {:?} {file} {w} each",
                    g.kind()
                );
                self.guest_groups = Some(g)
            }
            Err(e) => eprintln!("pvnet: --guest-cgroups: {e}; the guests run without groups"),
        }
    }

    /// `guest-gro`: the guest's TAP (opened with `IFF_NAPI`) polled by a NAPI kernel thread on
    /// the guest's CPU. With NAPI run in the writer's context instead, every write is polled
    /// (and its GRO flushed) on its own, before the next: nothing is coalesced. The thread
    /// finds the frames a whole batch of netfront's writes queued, as a NIC's poll finds a
    /// ring's worth of frames.
    fn guest_napi_threaded(&mut self, dom: u16) -> Result<()> {
        let i = usize::from(dom) - 1;
        let ns = self
            .testbed
            .guests
            .get(i)
            .ok_or_else(|| anyhow!("no namespace for guest {i}"))?;
        let pids = pvnet_testbed::topology::pin_napi_threads(ns, GUEST_IFNAME, self.cfg.cpu)
            .with_context(|| format!("threaded NAPI on guest {i}'s TAP"))?;
        self.guest_napi_pids.extend(pids);
        Ok(())
    }

    /// The driver domain's two own ports: the physical port and its stack's TAP.
    fn open_ports(&mut self) -> Result<()> {
        let (pnic, tap) = self.open_port_devices()?;
        self.attach_ports(Some(pnic), Some(tap))
    }

    /// The physical port and the driver domain's stack TAP, opened and set up in the kernel
    /// but not on the data path yet: a failure here (the NIC gone, the TAP's name still
    /// taken) leaves the data path as it was.
    fn open_port_devices(&mut self) -> Result<(Pnic, Tap)> {
        Ok((self.open_pnic()?, self.open_stack_tap()?))
    }

    /// The physical port, opened on the driver domain's NIC (not on the data path yet).
    fn open_pnic(&mut self) -> Result<Pnic> {
        // The daemon's thread lives in the driver domain's namespace from here on.
        self.testbed.dd.enter()?;
        // Slots sized for the port's MTU: a longer frame would arrive truncated and be lost.
        let mtu = link::get_mtu(&self.testbed.dd_if)
            .with_context(|| format!("reading the MTU of {}", self.testbed.dd_if))?;
        // With GRO on the port (port GRO) the kernel hands over coalesced frames of up to
        // 64 KiB: the slots hold them, and GRO is capped at what a slot holds, so none is
        // ever truncated (the testbed set `gro_max_size` from the same numbers).
        let frame_size = if self.cfg.gro {
            pvnet_pnic::gro_frame_size_for_mtu(mtu)
        } else {
            pvnet_pnic::frame_size_for_mtu(mtu)
        };
        let pcfg = PnicConfig {
            frame_nr: check_ring_frames(self.cfg.ring_frames)?,
            frame_size,
            v3: (self.cfg.port_ring == crate::config::PortRing::V3)
                .then(|| crate::config::v3_blocks(self.cfg.v3_block_kib)),
            queues: self.cfg.port_queues,
            prefetch: self.cfg.ring_prefetch,
            tx_sndbuf: self.cfg.port_tx_buffer_kib as usize * 1024,
            ..PnicConfig::new(self.testbed.dd_if.clone())
        };
        let pnic = match (self.cfg.port_frames, &self.pool) {
            // Machine frames: the driver domain's pool (made at the first opening, kept when
            // the port opens again), and a flip window per guest.
            (true, Some(pool)) => Pnic::open_frames(&pcfg, pool.clone()),
            (true, None) => {
                let guests = (self.cfg.guests + self.cfg.attach) as u32;
                let frames = DEFAULT_POOL_FRAMES + guests * RX_BUFS;
                self.hv
                    .set_machine(Machine::create("pvnet-machine", frames)?);
                let pool = FramePool::new(&self.hv, DEFAULT_POOL_FRAMES)
                    .context("the driver domain's frame pool")?;
                self.pool = Some(pool.clone());
                Pnic::open_frames(&pcfg, pool)
            }
            (false, _) => Pnic::open(&pcfg),
        }
        .map_err(|e| anyhow!("opening the physical port {}: {e}", self.testbed.dd_if))?;
        Ok(pnic)
    }

    /// The driver domain's own stack's TAP, set up (not on the data path yet).
    fn open_stack_tap(&mut self) -> Result<Tap> {
        self.testbed.dd.enter()?;
        let tap = Tap::open("pvdd0", true).context("creating the driver domain's stack port")?;
        link::set_mtu(tap.name(), self.cfg.mtu)?;
        link::set_mac(tap.name(), DD_STACK_MAC)?;
        link::add_ipv4(tap.name(), topology::dd_addr(), topology::SUBNET_PREFIX)?;
        link::set_up(tap.name(), true)?;
        Ok(tap)
    }

    /// Puts the ports [`Daemon::open_port_devices`] opened on the data path. The switch
    /// refuses them only if it has them already, which no caller lets happen.
    fn attach_ports(&mut self, pnic: Option<Pnic>, tap: Option<Tap>) -> Result<()> {
        if let Some(pnic) = pnic {
            self.dp
                .attach_phy(pnic)
                .map_err(|e| anyhow!("attaching the physical port to the switch: {e}"))?;
        }
        if let Some(tap) = tap {
            self.ep.add(tap.fd(), Token::StackTap.event())?;
            self.dp
                .attach_tap(PORT_DDSTACK, DD_STACK_MAC, Box::new(StackTap(tap)))
                .map_err(|e| anyhow!("attaching the driver domain's stack to the switch: {e}"))?;
        }
        Ok(())
    }

    /// Toolstack: builds domain `i + 1` (memory, grant table, event channel, xenstore nodes)
    /// and either spawns its frontend process or waits for an external one.
    fn create_guest(&mut self, i: usize, spawn: bool) -> Result<()> {
        let domid = DomId(i as u16 + 1);
        let layout = Layout {
            grant_frames: GRANT_FRAMES,
        };
        let pages = layout.pages() + SPARE_PAGES;
        let mem = Arc::new(GuestMemory::create(
            &format!("pvnet-dom{}", domid.0),
            pages,
        )?);
        let flip = self.cfg.grant == Mechanism::Flip;
        let flip_boot = match (flip, self.hv.machine()) {
            (true, Some(m)) => {
                // The RX buffers are the flip window: machine frames the guest owns.
                let first = layout.rx_buf(0).0;
                let p2m = m
                    .add_domain(domid, first, RX_BUFS)
                    .map_err(|e| anyhow!("frames for domain {domid}: {e}"))?;
                mem.attach_frames(m.fd(), first, &p2m)?;
                Some(FlipBoot {
                    first_pfn: first,
                    p2m: p2m.iter().map(|m| m.0).collect(),
                })
            }
            _ => None,
        };
        self.hv.add_domain(domid, mem.clone(), GRANT_FRAMES);
        let (back_end, front_end) = channel_pair()?;
        let (ctl_daemon, ctl_guest) = ctl::socketpair()?;
        let mac = topology::guest_mac(i);
        let mut vif = Vif {
            domid,
            mac,
            ctl: Some(ctl_daemon),
            attach_end: None,
            attach_listener: None,
            attach_backoff: AcceptBackoff::default(),
            evtchn_back: Some(back_end),
            stats: VifStats::default(),
            front_stats: FrontStats::default(),
            ctl_bucket: CtlBucket::new(),
            late_eoi: LateEoi::default(),
            state: VifState::Waiting,
            fatal: None,
            child: None,
            ready: false,
            failed: None,
            destroyed: false,
            reconnections: 0,
            last_reconnect_ms: None,
        };
        // Xenstore: frontend and backend directories, as the toolstack writes them.
        let dev = xenbus::device_path(domid.0);
        let be = xenbus::backend_path(domid.0);
        let w = |s: &mut Store, p: String, v: &str| s.write(DomId::DRIVER, &p, v);
        let st = &mut self.store;
        w(st, format!("{dev}/{}", keys::BACKEND), &be)?;
        w(st, format!("{dev}/{}", keys::BACKEND_ID), "0")?;
        w(st, format!("{dev}/{}", keys::HANDLE), "0")?;
        w(st, format!("{dev}/{}", keys::MAC), &format_mac(&mac))?;
        w(
            st,
            format!("{dev}/{}", keys::STATE),
            &XenbusState::Initialising.as_value(),
        )?;
        self.create_backend(domid.0, mac)?;

        let boot = BootInfo {
            domid: domid.0,
            mem_pages: pages,
            grant_frames: GRANT_FRAMES,
            device_path: dev,
            evtchn_port: VIF_PORT,
            ifname: GUEST_IFNAME.into(),
            ipv4: topology::guest_addr(i).to_string(),
            prefix: topology::SUBNET_PREFIX,
            gso: self.cfg.guest_gso,
            mtu: self.cfg.mtu,
            flip: flip_boot,
            gro: self.cfg.guest_gro,
        };
        let (fe_notify, fe_wait) = front_end.into_fds();
        let mut fds = vec![mem.fd(), fe_notify.as_fd(), fe_wait.as_fd()];
        if boot.flip.is_some() {
            fds.push(self.hv.machine().expect("flip window made above").fd());
        }
        ctl::send(
            vif.ctl.as_ref().expect("ctl").as_fd(),
            &ToGuest::Boot(boot),
            &fds,
        )?;
        drop((fe_notify, fe_wait));
        let ctl_fd = vif.ctl.as_ref().expect("ctl").as_fd();
        nix::fcntl::fcntl(
            ctl_fd,
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        )?;
        self.ep.add(ctl_fd, Token::GuestCtl(domid.0).event())?;

        if spawn {
            vif.child = Some(self.spawn_guest(i, ctl_guest)?);
        } else {
            let path = rundir::run_dir(&self.cfg.id).join(format!("attach-{}.sock", domid.0));
            let path = path.to_str().expect("utf-8").to_string();
            let l = seqpacket_listener(&path)?;
            self.ep.add(l.as_fd(), Token::Attach(domid.0).event())?;
            vif.attach_listener = Some((l, path));
            vif.attach_end = Some(ctl_guest);
        }
        self.dp.add_guest_port(domid.0);
        self.vifs.insert(domid.0, vif);
        Ok(())
    }

    /// Toolstack and netback's probe: writes guest `dom`'s backend directory and probes the
    /// vif (features, InitWait, a watch on the frontend's state).
    fn create_backend(&mut self, dom: u16, mac: [u8; 6]) -> Result<()> {
        let dev = xenbus::device_path(dom);
        let be = xenbus::backend_path(dom);
        let w = |s: &mut Store, p: String, v: &str| s.write(DomId::DRIVER, &p, v);
        let st = &mut self.store;
        w(st, format!("{be}/{}", keys::FRONTEND), &dev)?;
        w(st, format!("{be}/{}", keys::FRONTEND_ID), &dom.to_string())?;
        w(st, format!("{be}/{}", keys::HANDLE), "0")?;
        w(st, format!("{be}/{}", keys::MAC), &format_mac(&mac))?;
        // xl's `rate=`: netback reads it when the frontend connects.
        if let Some(&r) = self.cfg.vif_rates.get(&(dom - 1)) {
            xenbus::write_rate(st, dom, Some(r))?;
        }
        xenbus::probe_offer(st, dom, self.cfg.grant)?;
        Ok(())
    }

    /// Toolstack: builds HVM domain `i + 1` (guest `i` of the testbed; see [`hvm`]) and puts
    /// its device model's network side on the bridge.
    fn create_hvm_guest(&mut self, i: usize) -> Result<()> {
        let dom = i as u16 + 1;
        let path = self.cfg.hvm_path;
        let c = hvm::create(
            dom,
            i,
            &self.testbed.dd,
            &self.testbed.guests[i],
            self.cfg.cpu,
            path,
            self.cfg.exit_cost_ns,
        )?;
        let h = c.domain;
        if let (Some(g), Some(vcpu)) = (self.guest_groups.as_ref(), h.guest.as_ref()) {
            // The vCPU process is the guest: its kernel stack's work runs in it. The device
            // model is the driver domain's and stays with the daemon.
            g.add(i, vcpu.id())
                .with_context(|| format!("putting HVM guest {i} in its cgroup"))?;
        }
        self.ep
            .add(h.net_watch.as_fd(), Token::HvmNet(dom).event())?;
        for (fd, t) in [
            (&h.dm_ctl, Token::DmCtl(dom)),
            (&h.guest_ctl, Token::HvmCtl(dom)),
        ] {
            self.ep
                .add(fd.as_ref().expect("fresh").as_fd(), t.event())?;
        }
        self.dp
            .attach_tap(vif_port(dom), h.mac, Box::new(c.port))
            .map_err(|e| anyhow!("attaching HVM guest {i}'s device model to the switch: {e}"))?;
        self.hvms.insert(dom, h);
        Ok(())
    }

    /// A control message from an HVM domain's device model or guest (`dm`).
    fn hvm_ctl(&mut self, dom: u16, dm: bool) {
        let Some(h) = self.hvms.get_mut(&dom) else {
            return;
        };
        let open = if dm {
            h.dm_messages()
        } else {
            h.guest_messages()
        };
        if open {
            return;
        }
        let gone = if dm {
            h.dm_ctl.take()
        } else {
            h.guest_ctl.take()
        };
        if let Some(fd) = gone {
            let _ = self.ep.delete(fd.as_fd());
        }
        if dm {
            // Its network socket hung up with it: stop watching the bridge port.
            let _ = self.ep.delete(h.net_watch.as_fd());
        }
        if h.failed.is_none() && !self.stopping {
            let who = if dm { "device model" } else { "guest" };
            eprintln!("pvnet: HVM domain {dom}: the {who} exited");
            h.failed = Some(format!("{who} exited"));
        }
    }

    fn spawn_guest(&self, i: usize, ctl_guest: OwnedFd) -> Result<Child> {
        let exe = std::env::current_exe()?;
        let ns = &self.testbed.guests[i];
        let mut cmd = ns.command(&exe);
        cmd.args(["guest-run", "--ctl-fd", "3"])
            .stdin(Stdio::null());
        let raw = ctl_guest.as_raw_fd();
        let cpu = self.cfg.cpu;
        // SAFETY: the closure runs in the child between fork and exec and only makes
        // async-signal-safe system calls (dup2, prctl, sched_setaffinity, sched_setscheduler).
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(raw, 3) < 0 {
                    return Err(io::Error::last_os_error());
                }
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if let Some(c) = cpu {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(c, &mut set);
                    libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
                }
                // SCHED_BATCH: a guest woken by its event channel does not preempt the
                // driver domain mid-poll; it runs when the daemon waits (a vCPU scheduled
                // after its backend has finished the batch). Measured: +7 % stream
                // throughput, -6 % cycles per byte, TCP_RR unchanged.
                let p = libc::sched_param { sched_priority: 0 };
                libc::sched_setscheduler(0, libc::SCHED_BATCH, &p);
                Ok(())
            });
        }
        let child = cmd.spawn().context("spawning a guest process")?;
        drop(ctl_guest);
        if let Some(g) = self.guest_groups.as_ref() {
            // cgroup.procs moves the whole process, threads it has started included; the
            // threads it starts later inherit the group.
            g.add(i, child.id())
                .with_context(|| format!("putting guest {i} in its cgroup"))?;
        }
        Ok(child)
    }

    pub fn info(&self) -> RunInfo {
        RunInfo {
            id: self.cfg.id.clone(),
            pid: std::process::id() as i32,
            mode: format!("{:?}", self.cfg.mode).to_lowercase(),
            remote_ns: self.testbed.remote.name().to_string(),
            dd_ns: self.testbed.dd.name().to_string(),
            guest_ns: self
                .testbed
                .guests
                .iter()
                .map(|n| n.name().to_string())
                .collect(),
            remote_addr: topology::remote_addr().to_string(),
            dd_addr: topology::dd_addr().to_string(),
            guest_addrs: (0..self.testbed.guests.len())
                .map(|i| topology::guest_addr(i).to_string())
                .collect(),
            pnic_if: self.testbed.dd_if.clone(),
            guest_napi_pids: self.guest_napi_pids.clone(),
            guest_cgroups: (self.guest_groups.iter())
                .flat_map(|g| g.paths().iter().map(|p| p.display().to_string()))
                .collect(),
            // The guests' own processes: PV guests' netfronts and HVM guests' vCPU processes
            // (an HVM guest's device model runs in the driver domain).
            guest_pids: (self.vifs.values())
                .filter_map(|v| v.child.as_ref().map(|c| c.id() as i32))
                .chain((self.hvms.values()).filter_map(|h| h.guest.as_ref().map(|c| c.id() as i32)))
                .collect(),
            attach: self
                .vifs
                .values()
                .filter_map(|v| {
                    v.attach_listener
                        .as_ref()
                        .map(|(_, p)| (v.domid.0, p.clone()))
                })
                .collect(),
        }
    }

    /// Runs until a signal or `pvnet down`.
    pub fn run(&mut self) -> Result<()> {
        while !self.stopping {
            // While the port, or a guest's receive queue, waits for a guest, wake in time to
            // end that guest's stall.
            let wait = if self.dp.phy_held() {
                Duration::from_nanos(pvnet_dd::gate::STALL_NS / 4)
            } else {
                Duration::from_millis(200)
            };
            // Frames wait for the port to take them: try again within a millisecond (a full
            // device queue reports no readiness; a full send buffer wakes the sleep sooner).
            let wait = match self.dp.tx_backlog_wait() {
                Some(_) => wait.min(Duration::from_millis(1)),
                None => wait,
            };
            // Ports that are closed (their NIC gone, a restart that could not open them) are
            // tried again in time, and throttled control sockets go back in time.
            let next = (self.vifs.values())
                .flat_map(|v| {
                    [
                        v.ctl_bucket.resume_at,
                        v.late_eoi.resume_at,
                        v.attach_backoff.resume_at,
                    ]
                })
                .flatten()
                .chain(self.port.retry_at)
                .chain(self.admin_backoff.resume_at)
                .min();
            let wait = match next {
                Some(at) => wait.min(at.saturating_duration_since(Instant::now())),
                None => wait,
            };
            // A guest that ran out of credit is polled again when its next window starts.
            let wait = match self.dp.tx_credit_due() {
                Some(d) => wait.min(d),
                None => wait,
            };
            self.run_once(wait)?;
            self.retry_ports();
            self.resume_set_aside();
        }
        Ok(())
    }

    /// Waits up to `timeout` for the epoll set's events and, while it is watched, for the
    /// physical port. Returns the number of events and whether the port has frames.
    ///
    /// The port's socket stays out of the epoll set. A socket registered with epoll runs the
    /// wake-up callback for every frame the kernel puts in its ring, whether or not anyone
    /// waits: under a stream that was 6 % of the receiving CPU in `tpacket_rcv`'s
    /// `sock_def_readable`, most of it while the daemon was busy anyway. Instead the daemon
    /// looks at the ring itself (one status word, no system call) and only when it is empty
    /// sleeps in `poll(2)` on the epoll descriptor and the port, which registers a waiter on
    /// the socket for the duration of the sleep only.
    fn wait_events(
        &mut self,
        events: &mut [EpollEvent],
        timeout: Duration,
    ) -> Result<(usize, bool)> {
        // Rounded up: a wait shorter than a millisecond (a throttled control socket's) would
        // otherwise poll without sleeping until its time.
        let ms = timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32;
        if ms > 0 {
            self.dp.before_sleep();
        }
        let epoll_wait = |ep: &Epoll, events: &mut [EpollEvent], ms: u16| match ep
            .wait(events, EpollTimeout::from(ms))
        {
            Ok(n) => Ok(n),
            Err(nix::errno::Errno::EINTR) => Ok(0),
            Err(e) => Err(e),
        };
        // Frames wait for the port's send buffer to have room: its socket's writability wakes
        // the sleep too.
        let tx_writable = self.dp.tx_backlog_wait() == Some(true);
        let watched = self.dp.phy_watched();
        let pnic = match self.dp.phy() {
            Some(p) if watched || tx_writable => p,
            _ => {
                return Ok((
                    epoll_wait(&self.ep, events, ms.min(u16::MAX as i32) as u16)?,
                    false,
                ))
            }
        };
        if watched && pnic.rx_ready() {
            self.dp.stats.pnic_ring_wakeups += 1;
            return Ok((epoll_wait(&self.ep, events, 0)?, true));
        }
        // The epoll descriptor, every receive queue of the port while it is watched, and its
        // transmit socket while frames wait for it.
        let mut fds = Vec::with_capacity(2 + pvnet_pnic::MAX_QUEUES as usize);
        fds.push(PollFd::new(self.ep.0.as_fd(), PollFlags::POLLIN));
        if watched {
            fds.extend(pnic.rx_fds().map(|fd| PollFd::new(fd, PollFlags::POLLIN)));
        }
        let rx_fds = fds.len();
        if tx_writable {
            fds.push(PollFd::new(pnic.tx_fd(), PollFlags::POLLOUT));
        }
        match poll(
            &mut fds,
            PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
        ) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
        let ready = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
        let (ep_ready, pnic_ready) = (ready(&fds[0]), fds[1..rx_fds].iter().any(ready));
        // The link went down (and maybe up again): the kernel left an error on the port's
        // sockets, and poll would report them ready until it is read.
        let failed = |f: &PollFd| f.revents().is_some_and(|r| r.contains(PollFlags::POLLERR));
        let port_failed = fds[1..].iter().any(failed) && pnic.take_socket_errors() > 0;
        self.dp.stats.pnic_woken += u64::from(pnic_ready);
        let n = if ep_ready {
            epoll_wait(&self.ep, events, 0)?
        } else {
            0
        };
        if port_failed {
            self.check_nic();
        }
        Ok((n, pnic_ready && self.dp.phy().is_some()))
    }

    /// One pass of the loop: wait, serve what woke us, poll the port while it keeps the
    /// budget full (serving the guests' events between polls so their TX, the ACKs, keeps
    /// flowing), then the end-of-pass work.
    fn run_once(&mut self, timeout: Duration) -> Result<()> {
        let mut events = [EpollEvent::empty(); 32];
        let timeout = if self.dp.has_tx_more() {
            Duration::ZERO
        } else {
            timeout
        };
        let (n, pnic_ready) = self.wait_events(&mut events, timeout)?;
        self.dp.stats.loop_passes += 1;
        self.dp.tick();
        if self.dp.tx_backlog_wait().is_some() {
            self.dp.tx_drain();
        }
        self.dispatch_all(&events[..n])?;
        // NAPI: a poll that used its whole budget is rescheduled without sleeping.
        let mut more = pnic_ready && self.dp.phy_poll();
        self.reap_failed();
        while more && !self.stopping {
            self.dp.tick();
            more = self.dp.phy_poll();
            self.reap_failed();
            let k = match self.ep.wait(&mut events, EpollTimeout::ZERO) {
                Ok(k) => k,
                Err(nix::errno::Errno::EINTR) => 0,
                Err(e) => return Err(e.into()),
            };
            self.dispatch_all(&events[..k])?;
        }
        self.dp.end_pass();
        self.reap_failed();
        self.arm_lro_timer();
        self.process_store_events();
        Ok(())
    }

    /// Serves a batch of events, then the vifs whose last TX poll used its whole budget.
    fn dispatch_all(&mut self, events: &[EpollEvent]) -> Result<()> {
        for ev in events {
            match Token::from_u64(ev.data()) {
                Some(t) => self.dispatch(t)?,
                None => eprintln!("pvnet: unknown event token {:#x}", ev.data()),
            }
        }
        self.dp.serve_tx_more();
        self.reap_failed();
        Ok(())
    }

    /// Serves one event.
    fn dispatch(&mut self, tok: Token) -> Result<()> {
        match tok {
            Token::Signal => {
                while let Ok(Some(_)) = self.sigfd.read_signal() {}
                self.stopping = true;
            }
            Token::LroTimer => {
                let _ = self.lro_timer.wait();
                self.dp.timer_fired();
            }
            Token::StackTap => {
                self.dp.tap_input(PORT_DDSTACK);
                self.reap_gone_taps();
            }
            Token::Relay(dom) | Token::HvmNet(dom) => {
                self.dp.tap_input(vif_port(dom));
                self.reap_gone_taps();
            }
            Token::DmCtl(dom) => self.hvm_ctl(dom, true),
            Token::HvmCtl(dom) => self.hvm_ctl(dom, false),
            Token::Evtchn(dom) => {
                let spurious = self.dp.vif_event(dom);
                self.late_eoi(dom, spurious);
                self.credit_wait(dom);
            }
            Token::GuestCtl(dom) => self.guest_ctl(dom)?,
            Token::Attach(dom) => self.attach_accept(dom)?,
            Token::Admin => self.admin_accept(),
            Token::AdminConn(id) => self.admin_request(id),
        }
        self.reap_failed();
        Ok(())
    }

    /// Closes the vifs the data path took off for breaking the protocol: their event channel
    /// is unwatched, their backend goes to Closing. Other vifs don't notice.
    fn reap_failed(&mut self) {
        for (dom, nb, f) in self.dp.take_failed() {
            let _ = self.ep.delete(nb.evtchn().wait_fd());
            let Some(v) = self.vifs.get_mut(&dom) else {
                continue;
            };
            v.stats = nb.stats.clone();
            v.fatal = Some(f);
            v.state = VifState::Disconnected;
            eprintln!("pvnet: vif {dom} disconnected: {}", f.name());
            let _ = xenbus::set_state(&mut self.store, dom, XenbusState::Closing);
        }
    }

    /// Arms the timer for the engine's next deadline (one system call only when it changed).
    fn arm_lro_timer(&mut self) {
        let Some(deadline) = self.dp.timer_due() else {
            return;
        };
        let after = self.dp.ticks_until(deadline);
        if self
            .lro_timer
            .set(
                Expiration::OneShot(TimeSpec::from_duration(after)),
                TimerSetTimeFlags::empty(),
            )
            .is_ok()
        {
            self.dp.timer_armed(deadline);
        }
    }

    // ------------------------------------------------------------------ control path

    /// After vif `dom`'s event: a spurious one (the wake found nothing to do) from the second
    /// in a row on takes its channel out of the epoll set for a while ([`LateEoi`]).
    fn late_eoi(&mut self, dom: u16, spurious: bool) {
        let Some(v) = self.vifs.get_mut(&dom) else {
            return;
        };
        let l = &mut v.late_eoi;
        if !spurious {
            l.spurious = 0;
            return;
        }
        l.spurious = (l.spurious + 1).min(16);
        if l.spurious < 2 {
            return;
        }
        let Some(nb) = self.dp.netback(dom) else {
            return;
        };
        let delay = Duration::from_millis(1 << (l.spurious - 2)).min(LATE_EOI_MAX);
        let _ = self.ep.delete(nb.evtchn().wait_fd());
        l.resume_at = Some(Instant::now() + delay);
        l.delayed += 1;
    }

    /// After vif `dom`'s event: when its guest ran out of credit ([`TxRate`]), its channel
    /// leaves the epoll set until the next window, when the data path polls the vif anyway.
    /// A guest waiting for its window has no reason to notify (its ring's request event is
    /// not re-armed), and one that notifies regardless costs the daemon one wake a window.
    fn credit_wait(&mut self, dom: u16) {
        let Some(due) = self.dp.vif_credit_due(dom) else {
            return;
        };
        let (Some(v), Some(nb)) = (self.vifs.get_mut(&dom), self.dp.netback(dom)) else {
            return;
        };
        let at = Instant::now() + due;
        let l = &mut v.late_eoi;
        if l.resume_at.is_none() {
            let _ = self.ep.delete(nb.evtchn().wait_fd());
        }
        l.resume_at = Some(l.resume_at.map_or(at, |r| r.max(at)));
    }

    /// Puts the control sockets set aside by their rate limit ([`CtlBucket`]), and the event
    /// channels whose wake was delayed ([`LateEoi`]), whose time has come back into the epoll
    /// set.
    fn resume_set_aside(&mut self) {
        let now = Instant::now();
        for v in self.vifs.values_mut() {
            if v.late_eoi.resume_at.take_if(|at| *at <= now).is_some() {
                if let Some(nb) = self.dp.netback(v.domid.0) {
                    let _ = (self.ep).add(nb.evtchn().wait_fd(), Token::Evtchn(v.domid.0).event());
                }
            }
            if v.ctl_bucket.resume_at.take_if(|at| *at <= now).is_some() {
                if let Some(sock) = v.ctl.as_ref() {
                    let _ = self
                        .ep
                        .add(sock.as_fd(), Token::GuestCtl(v.domid.0).event());
                }
            }
            if v.attach_backoff
                .resume_at
                .take_if(|at| *at <= now)
                .is_some()
            {
                if let Some((l, _)) = v.attach_listener.as_ref() {
                    let _ = (self.ep).add(l.as_fd(), Token::Attach(v.domid.0).event());
                }
            }
        }
        if self
            .admin_backoff
            .resume_at
            .take_if(|at| *at <= now)
            .is_some()
        {
            let _ = self.ep.add(self.admin.as_fd(), Token::Admin.event());
        }
    }

    fn guest_ctl(&mut self, dom: u16) -> Result<()> {
        loop {
            let Some(v) = self.vifs.get_mut(&dom) else {
                return Ok(());
            };
            if let Err(at) = v.ctl_bucket.take(Instant::now()) {
                // Out of tokens: the socket leaves the epoll set (level-triggered, it would
                // wake the loop for ever) until `resume_set_aside` puts it back.
                if let Some(sock) = v.ctl.as_ref() {
                    let _ = self.ep.delete(sock.as_fd());
                    v.ctl_bucket.resume_at = Some(at);
                    v.ctl_bucket.throttled += 1;
                }
                return Ok(());
            }
            let Some(sock) = v.ctl.as_ref() else {
                return Ok(());
            };
            let msg = match ctl::try_recv::<FromGuest>(sock.as_fd()) {
                Ok(Some((m, _fds))) => m,
                Ok(None) => {
                    // The guest went away (exit, crash, or a hostile frontend closing).
                    let _ = self.ep.delete(sock.as_fd());
                    v.ctl = None;
                    self.destroy_domain(dom);
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => {
                    v.ctl_bucket.messages += 1;
                    eprintln!("pvnet: guest {dom} control message: {e}");
                    let _ = self.ep.delete(sock.as_fd());
                    v.ctl = None;
                    self.destroy_domain(dom);
                    return Ok(());
                }
            };
            v.ctl_bucket.messages += 1;
            match msg {
                FromGuest::Xs(req) => {
                    let reply = self.store.handle(DomId(dom), req);
                    let sock = self.vifs[&dom].ctl.as_ref().expect("ctl").as_fd();
                    let _ = ctl::send(sock, &ToGuest::Xs(reply), &[]);
                    self.process_store_events();
                }
                FromGuest::Ready => {
                    if self.cfg.guest_gro {
                        self.guest_napi_threaded(dom)?;
                    }
                    self.vifs.get_mut(&dom).expect("vif").ready = true
                }
                FromGuest::Stats(s) => self.vifs.get_mut(&dom).expect("vif").front_stats = s,
                FromGuest::Failed(e) => {
                    eprintln!("pvnet: guest {dom} failed: {e}");
                    self.vifs.get_mut(&dom).expect("vif").failed = Some(e);
                }
            }
        }
    }

    fn guest_gone(&mut self, dom: u16) {
        let Some(v) = self.vifs.get_mut(&dom) else {
            return;
        };
        if let Some(nb) = self.dp.disconnect_vif(dom) {
            let _ = self.ep.delete(nb.evtchn().wait_fd());
            v.stats = nb.stats.clone();
            // Its queue goes with it (the ring slots they leased go back to the port).
            self.reclaimed.queued_packets += nb.rx_queued() as u64;
        }
        if v.state != VifState::Disconnected {
            v.state = VifState::Closed;
        }
        self.store.remove_watches_of(DomId(dom));
        let _ = xenbus::set_state(&mut self.store, dom, XenbusState::Closed);
        self.restart_done_check();
    }

    /// The guest's process is gone (it exited, crashed or was killed): after its vif, the
    /// domain itself goes, as Xen destroys a dead domain: its grant table and memory are
    /// unregistered (the memory is freed with the last mapping of it), its process reaped.
    fn destroy_domain(&mut self, dom: u16) {
        self.guest_gone(dom);
        let Some(v) = self.vifs.get_mut(&dom) else {
            return;
        };
        if v.destroyed {
            return;
        }
        v.destroyed = true;
        if let Some(c) = v.child.as_mut() {
            let _ = c.try_wait();
        }
        if let Some(mem) = self.hv.domain_memory(DomId(dom)) {
            self.reclaimed.pages += u64::from(mem.pages());
        }
        self.hv.remove_domain(DomId(dom));
        // Its machine frames return to the free pool (none are lent: a flip is an exchange).
        if let Some(m) = self.hv.machine() {
            m.remove_domain(DomId(dom));
        }
        self.reclaimed.domains += 1;
    }

    /// Delivers watch events: guests' watches go to the guest; our own drive netback.
    fn process_store_events(&mut self) {
        for ev in self.store.take_events() {
            if ev.owner == DomId::DRIVER {
                if let Some(d) = xenbus::watched_dom(&ev.token) {
                    self.frontend_changed(d);
                }
            } else if let Some(v) = self.vifs.get(&ev.owner.0) {
                if let Some(s) = v.ctl.as_ref() {
                    let _ = ctl::send(
                        s.as_fd(),
                        &ToGuest::Watch {
                            path: ev.path,
                            token: ev.token,
                        },
                        &[],
                    );
                }
            }
        }
    }

    /// netback's `frontend_changed`: connect when the frontend says Connected. During a
    /// driver-domain restart: a frontend that says Closed has let go of its old backend and
    /// gets a new one (probed: InitWait); one that then says Connected is connected to it.
    fn frontend_changed(&mut self, dom: u16) {
        let Some(v) = self.vifs.get(&dom) else { return };
        let fe = xenbus::frontend_state(&self.store, dom);
        match (v.state, fe) {
            (VifState::Restarting, Some(XenbusState::Closed)) => {
                let mac = v.mac;
                if let Err(e) = self.recreate_backend(dom, mac) {
                    eprintln!("pvnet: vif {dom}: a new backend failed: {e:#}");
                    self.vifs.get_mut(&dom).expect("vif").state = VifState::Closed;
                    return;
                }
                self.vifs.get_mut(&dom).expect("vif").state = VifState::Reconnecting;
                return;
            }
            (VifState::Reconnecting, Some(XenbusState::Connected))
                if self.dp.netback(dom).is_none() =>
            {
                match self.connect_vif(dom) {
                    Ok(()) => self.reconnected(dom),
                    Err(e) => {
                        eprintln!("pvnet: vif {dom} reconnect failed: {e:#}");
                        self.vifs.get_mut(&dom).expect("vif").state = VifState::Closed;
                        let _ = xenbus::set_state(&mut self.store, dom, XenbusState::Closing);
                    }
                }
                return;
            }
            // The frontend is on its way (Closing, Initialising, or the old Closed that the new
            // backend's watch reports when it is set).
            (VifState::Restarting | VifState::Reconnecting, _) => return,
            _ => {}
        }
        match fe {
            Some(XenbusState::Connected)
                if v.state == VifState::Waiting && self.dp.netback(dom).is_none() =>
            {
                if let Err(e) = self.connect_vif(dom) {
                    eprintln!("pvnet: vif {dom} connect failed: {e:#}");
                    self.vifs.get_mut(&dom).expect("vif").state = VifState::Closed;
                    let _ = xenbus::set_state(&mut self.store, dom, XenbusState::Closing);
                }
            }
            Some(XenbusState::Closing) | Some(XenbusState::Closed) => self.guest_gone(dom),
            _ => {}
        }
    }

    /// Vif `dom` is connected to the new backend: counts it, and times the restart when it was
    /// the last one to come back.
    fn reconnected(&mut self, dom: u16) {
        let uptime = self.start.elapsed().as_secs_f64();
        let Some(last) = self.restarts.last.as_mut() else {
            return;
        };
        let ms = last
            .started
            .map_or(0.0, |t| t.elapsed().as_secs_f64() * 1e3);
        let v = self.vifs.get_mut(&dom).expect("vif");
        v.reconnections += 1;
        v.last_reconnect_ms = Some(ms);
        last.reconnected += 1;
        self.restarts.reconnections += 1;
        self.restarts.last_reconnection_uptime_s = Some(uptime);
        self.restart_done_check();
    }

    /// Closes the last restart's account once no vif is still coming back (the last one
    /// reconnected, or its guest went away meanwhile): its time is the time until then.
    fn restart_done_check(&mut self) {
        let pending = (self.vifs.values())
            .any(|v| matches!(v.state, VifState::Restarting | VifState::Reconnecting));
        if let Some(last) = self.restarts.last.as_mut() {
            if !pending && last.reconnect_ms.is_none() {
                last.reconnect_ms = last.started.map(|t| t.elapsed().as_secs_f64() * 1e3);
            }
        }
    }

    /// The toolstack re-creates guest `dom`'s backend for the new driver domain (as `xl
    /// network-attach` would): the old backend directory and the old backend's watch go, a new
    /// directory is written and probed (InitWait).
    fn recreate_backend(&mut self, dom: u16, mac: [u8; 6]) -> Result<()> {
        let watched = format!("{}/{}", xenbus::device_path(dom), keys::STATE);
        let _ = self
            .store
            .unwatch(DomId::DRIVER, &watched, &xenbus::watch_token(dom));
        self.store
            .rm(DomId::DRIVER, &xenbus::backend_path(dom))
            .context("removing the old backend directory")?;
        self.create_backend(dom, mac)
    }

    /// `pvnet restart-dd`: the driver domain goes away and a new one takes its place, while
    /// the hypervisor (guest memory, grant tables, event channels, the store) and the guests
    /// stay. See docs/restart.md.
    ///
    /// 1. Every connected backend says `Closing`.
    /// 2. The driver domain's state is destroyed: every netback is taken off the data path
    ///    (its rings and persistent mappings unmapped, its RX queue dropped, its event channel
    ///    unbound), then the whole data path (the physical port's socket and ring with every
    ///    frame leased from it, the driver domain's own TAP, the bridge's table, the
    ///    aggregation engine's held segments, captures, counters) is dropped.
    /// 3. Every old backend says `Closed`.
    /// 4. The new driver domain opens its ports afresh (a new packet socket and ring, a new
    ///    stack TAP) on a new, empty data path.
    /// 5. Each vif's frontend, seeing its backend go, says Closing then Closed; then (in
    ///    [`Daemon::frontend_changed`]) its backend is re-created and probed (InitWait), and
    ///    when the frontend says Connected again it is connected as at boot.
    ///
    /// Returns the number of vifs whose backend went away.
    fn restart_dd(&mut self) -> Result<usize> {
        if self.cfg.mode != Mode::Xen {
            bail!(
                "this run has no driver domain to restart (mode {:?}): restart-dd needs --mode xen",
                self.cfg.mode
            );
        }
        if !self.hvms.is_empty() {
            bail!("this run has HVM guests, whose device models are not restarted: restart-dd needs a run without --hvm");
        }
        if self.pool.is_some() {
            bail!("this run's driver domain receives into machine frames (--grant flip or --port-frames), whose restart is not built: restart-dd needs a run without them");
        }
        if self.cfg.grant.is_pool() {
            bail!(
                "this run's guests use a {} pool, whose reconnection is not built: restart-dd needs --grant copy, map or persistent",
                self.cfg.grant.name()
            );
        }
        if (self.vifs.values())
            .any(|v| matches!(v.state, VifState::Restarting | VifState::Reconnecting))
        {
            bail!("the last restart has not finished: a vif is still reconnecting");
        }
        let t0 = Instant::now();
        let at_uptime_s = self.start.elapsed().as_secs_f64();
        // Built before anything is taken down, so that its one way to fail (the switch's
        // rules) refuses the restart instead of leaving it half-done.
        let fresh = new_datapath(&self.cfg)?;
        let doms: Vec<u16> = (self.vifs.values())
            .filter(|v| !v.destroyed && matches!(v.state, VifState::Connected | VifState::Waiting))
            .map(|v| v.domid.0)
            .collect();
        // 1. The backends say Closing.
        for &d in &doms {
            if self.vifs[&d].state == VifState::Connected {
                let _ = xenbus::set_state(&mut self.store, d, XenbusState::Closing);
            }
        }
        // 2. The driver domain's state goes.
        let mut dropped = 0u64;
        let mut went = 0u64;
        for &d in &doms {
            let v = self.vifs.get_mut(&d).expect("vif");
            if let Some(nb) = self.dp.disconnect_vif(d) {
                let _ = self.ep.delete(nb.evtchn().wait_fd());
                v.stats = nb.stats.clone();
                dropped += nb.rx_queued() as u64;
                v.evtchn_back = Some(nb.unbind());
                went += 1;
            }
        }
        // Frames the old port had not taken yet go with it, as a NIC's queue does.
        dropped += self.dp.tx_backlog_len() as u64;
        // The old path's descriptors close here (epoll forgets them with their last close).
        drop(std::mem::replace(&mut self.dp, fresh));
        // 3. The old backends say Closed.
        for &d in &doms {
            if self.vifs[&d].state == VifState::Connected {
                let _ = xenbus::set_state(&mut self.store, d, XenbusState::Closed);
            }
        }
        let teardown_ms = t0.elapsed().as_secs_f64() * 1e3;
        // 4. The new driver domain's ports. If they do not open (its NIC is gone), the restart
        // goes on without them: the vifs reconnect, traffic between guests flows again, and
        // the loop tries the ports every PORT_RETRY until they open (`retry_ports`).
        self.port.retry_at = None;
        let port_error = match self.open_ports_retrying() {
            Ok(()) => None,
            Err(e) => {
                eprintln!(
                    "pvnet: restart: the new driver domain's ports did not open: {e:#}; trying again every {} ms",
                    PORT_RETRY.as_millis()
                );
                self.port.retry_at = Some(Instant::now() + PORT_RETRY);
                self.port.last_error = Some(format!("{e:#}"));
                Some(format!("{e:#}"))
            }
        };
        for &d in &doms {
            self.dp.add_guest_port(d);
        }
        let down_ms = t0.elapsed().as_secs_f64() * 1e3;
        // 5. Vifs that were connected wait for their frontend to let go; the others (never
        // connected) get their new backend at once.
        for &d in &doms {
            let v = self.vifs.get_mut(&d).expect("vif");
            if v.state == VifState::Connected {
                v.state = VifState::Restarting;
            } else {
                let mac = v.mac;
                self.recreate_backend(d, mac)?;
            }
        }
        self.restarts.restarts += 1;
        self.restarts.last = Some(LastRestart {
            at_uptime_s,
            down_ms,
            teardown_ms,
            ports_ms: down_ms - teardown_ms,
            vifs: went,
            reconnected: 0,
            reconnect_ms: (went == 0).then_some(down_ms),
            queued_packets_dropped: dropped,
            port_opened_ms: port_error.is_none().then_some(down_ms),
            port_error,
            port_retries: 0,
            started: Some(t0),
        });
        for &d in &doms {
            self.frontend_changed(d);
        }
        eprintln!(
            "pvnet: driver domain restarted in {down_ms:.1} ms: {went} backend(s) gone, {dropped} queued packet(s) dropped"
        );
        Ok(went as usize)
    }

    /// [`Daemon::open_port_devices`], retried for a moment (the old stack TAP's name may not
    /// be free the instant its descriptor closed), then [`Daemon::attach_ports`].
    fn open_ports_retrying(&mut self) -> Result<()> {
        let mut tries = 0;
        loop {
            match self.open_port_devices() {
                Ok((pnic, tap)) => return self.attach_ports(Some(pnic), Some(tap)),
                Err(e) if tries < 50 => {
                    tries += 1;
                    if tries == 1 {
                        eprintln!("pvnet: restart: opening the ports: {e:#}; retrying");
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The ports missing from the data path, opened: the physical port, the stack's TAP.
    fn open_needed(&mut self) -> Result<(Option<Pnic>, Option<Tap>)> {
        let pnic = match self.dp.phy() {
            None => Some(self.open_pnic()?),
            Some(_) => None,
        };
        let tap = match self.dp.tap_stats(PORT_DDSTACK) {
            None => Some(self.open_stack_tap()?),
            Some(_) => None,
        };
        Ok((pnic, tap))
    }

    /// Tries once more, when its time has come, to open the ports that are closed: the
    /// physical port whose NIC left ([`Daemon::check_nic`]), the stack TAP that was deleted
    /// ([`Daemon::reap_gone_taps`]), or both after a restart that could not open them. A
    /// device that does not open (the NIC still gone) is tried again after [`PORT_RETRY`];
    /// ports that opened but that the switch refused are not (that would be a bug, and the
    /// next try would meet it again).
    fn retry_ports(&mut self) {
        match self.port.retry_at {
            Some(at) if Instant::now() >= at => {}
            _ => return,
        }
        self.port.retry_at = None;
        let (result, again) = match self.open_needed() {
            Ok((pnic, tap)) => (self.attach_ports(pnic, tap), false),
            Err(e) => (Err(e), true),
        };
        self.port.retries += 1;
        // A restart that could not open its ports counts the tries, and its time ends here.
        let restart = (self.restarts.last.as_mut()).filter(|l| l.port_opened_ms.is_none());
        match result {
            Ok(()) => {
                self.port.reopened += 1;
                if let Some(last) = restart {
                    last.port_retries += 1;
                    last.port_opened_ms = last.started.map(|t| t.elapsed().as_secs_f64() * 1e3);
                }
                eprintln!("pvnet: the driver domain's closed ports are open again");
            }
            Err(e) => {
                let e = format!("{e:#}");
                if let Some(last) = restart {
                    last.port_retries += 1;
                    last.port_error = Some(e.clone());
                }
                if !again {
                    eprintln!("pvnet: the driver domain's ports: {e}; not tried again");
                }
                self.port.last_error = Some(e);
                self.port.retry_at = again.then(|| Instant::now() + PORT_RETRY);
            }
        }
    }

    /// After the port's sockets reported an error. A link that went down, or down and up,
    /// leaves them bound, and they carry frames again once it is up. A NIC that left the
    /// driver domain's namespace (its name gone, or now another device's) leaves them bound
    /// to nothing, for good: the port comes off the data path, and the loop opens it again
    /// once the NIC is back ([`Daemon::retry_ports`]).
    fn check_nic(&mut self) {
        let Some(p) = self.dp.phy() else {
            return;
        };
        let (name, was) = (p.ifname().to_string(), p.ifindex());
        let now = match self.testbed.dd.enter() {
            Ok(()) => link::ifindex(&name).ok(),
            Err(_) => None,
        };
        if now == Some(was) {
            return;
        }
        drop(self.dp.detach_phy());
        let why = format!("the NIC {name} left the driver domain");
        eprintln!(
            "pvnet: {why}: its port is off the data path, and opens again when the NIC is back"
        );
        self.port.nic_lost += 1;
        self.port.last_error = Some(why);
        self.port.retry_at = Some(Instant::now() + PORT_RETRY);
    }

    /// The TAPs the data path found deleted under it ([`DataPath::take_gone_taps`]): each is
    /// off the path already. The driver domain's own stack TAP is made again by the loop
    /// ([`Daemon::retry_ports`]); a guest's (relayed, or an HVM guest's) is not: its guest
    /// deleted its own network device, and is without one until the run ends.
    fn reap_gone_taps(&mut self) {
        for port in self.dp.take_gone_taps() {
            if port == PORT_DDSTACK {
                eprintln!("pvnet: the driver domain's stack TAP was deleted: it is made again");
                self.port.stack_tap_lost += 1;
                self.port.last_error = Some("the driver domain's stack TAP was deleted".into());
                if self.port.retry_at.is_none() {
                    self.port.retry_at = Some(Instant::now() + PORT_RETRY);
                }
            } else {
                let dom = port.0.saturating_sub(1);
                eprintln!("pvnet: domain {dom}'s TAP was deleted: it is off the data path");
                self.port.guest_taps_lost += 1;
            }
        }
    }

    /// Reads the frontend's keys (untrusted strings), maps its rings, binds its channel and
    /// puts the vif on the data path.
    fn connect_vif(&mut self, dom: u16) -> Result<()> {
        let fe = xenbus::read_frontend(&self.store, dom, VIF_PORT)?;
        // premapped / static: what the frontend took of what was offered (pvnet_dd::pool).
        let pool = match xenbus::read_frontend_pool(&self.store, dom, self.cfg.grant) {
            Ok(p) => p,
            Err(e) => {
                if matches!(
                    e,
                    xenbus::HandshakeError::NotOffered(_) | xenbus::HandshakeError::BothPools
                ) {
                    self.vifs.get_mut(&dom).expect("vif").stats.feature_refused += 1;
                }
                bail!("refused: {e}");
            }
        };
        let v = self.vifs.get_mut(&dom).expect("vif");
        let mechanism = match pool {
            Some((m, _)) => m,
            // A pool mechanism the frontend did not take: per-request grant copy.
            None if self.cfg.grant.is_pool() => NetbackConfig::default().mechanism,
            None => {
                NetbackConfig::negotiated_with(self.cfg.grant, fe.persistent, fe.rx_flip).mechanism
            }
        };
        let l = self.cfg.limits;
        let config = NetbackConfig {
            mechanism,
            persistent_max: l.persistent_grants,
            rx_queue_bytes: l.rx_queue_bytes,
            rx_queue_packets: l.rx_queue_packets,
            // A value netback cannot read leaves the vif unlimited, and says so.
            tx_rate: xenbus::read_rate(&self.store, dom).unwrap_or_else(|e| {
                eprintln!("pvnet: vif {dom}: {e}: no rate limit");
                None
            }),
        };
        let evt = v
            .evtchn_back
            .take()
            .ok_or_else(|| anyhow!("event channel already bound"))?;
        let mut nb = match Netback::connect_with(
            self.hv.clone(),
            DomId(dom),
            fe.tx_ring_ref,
            fe.rx_ring_ref,
            evt,
            fe.features,
            config,
        ) {
            Ok(nb) => nb,
            Err(st) => bail!("mapping the frontend's rings failed: {st:?}"),
        };
        if let Some((_, spec)) = pool {
            if let Err(f) = nb.attach_pool(spec) {
                v.stats = nb.stats.clone();
                v.fatal = Some(f);
                bail!("mapping the frontend's pool {spec:?} failed: {}", f.name());
            }
        }
        if let Some(pool) = &self.pool {
            nb.set_frame_pool(pool.clone());
        }
        nb.set_mtu(self.cfg.mtu as usize);
        self.ep
            .add(nb.evtchn().wait_fd(), Token::Evtchn(dom).event())?;
        v.late_eoi.spurious = 0;
        v.late_eoi.resume_at = None;
        v.state = VifState::Connected;
        if !self.dp.connect_vif(dom, v.mac, nb) {
            eprintln!(
                "pvnet: vif {dom}: the switch refused its MAC {}: it gets no frames",
                format_mac(&v.mac)
            );
        }
        xenbus::set_state(&mut self.store, dom, XenbusState::Connected)?;
        Ok(())
    }

    fn attach_accept(&mut self, dom: u16) -> Result<()> {
        let Some(v) = self.vifs.get_mut(&dom) else {
            return Ok(());
        };
        let Some((l, _)) = v.attach_listener.as_ref() else {
            return Ok(());
        };
        let what = || format!("domain {dom}'s attach socket");
        let Some(conn) = v.attach_backoff.accept(&self.ep, l.as_fd(), what) else {
            return Ok(());
        };
        if let Some(end) = v.attach_end.take() {
            // Hand the guest's end of the control socket to the external frontend.
            ctl::send(conn.as_fd(), &"attach", &[end.as_fd()])?;
        }
        Ok(())
    }

    /// A fresh admin connection id: the next one not in use (ids wrap at 2^32, never into a
    /// live connection).
    fn conn_id(&mut self) -> u32 {
        loop {
            let id = self.next_conn;
            self.next_conn = self.next_conn.wrapping_add(1);
            if !self.admin_conns.contains_key(&id) {
                return id;
            }
        }
    }

    fn admin_accept(&mut self) {
        let what = || "the admin socket".to_string();
        while let Some(c) = (self.admin_backoff).accept(&self.ep, self.admin.as_fd(), what) {
            // A client that opens connections and never closes them would take every
            // descriptor the daemon may have, and then `accept` would fail and the listener
            // poll ready for ever. The oldest (the lowest id) makes room instead.
            if self.admin_conns.len() >= ADMIN_CONNS_MAX {
                if let Some((_, old)) = self.admin_conns.pop_first() {
                    let _ = self.ep.delete(old.as_fd());
                    self.admin_evicted += 1;
                }
            }
            let id = self.conn_id();
            if self.ep.add(c.as_fd(), Token::AdminConn(id).event()).is_ok() {
                self.admin_conns.insert(id, c);
            }
        }
    }

    fn admin_request(&mut self, id: u32) {
        let Some(c) = self.admin_conns.get(&id) else {
            return;
        };
        let req = match ctl::try_recv::<AdminRequest>(c.as_fd()) {
            Ok(Some((r, _))) => r,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            _ => {
                let c = self.admin_conns.remove(&id).expect("present");
                let _ = self.ep.delete(c.as_fd());
                return;
            }
        };
        let mut fds = Vec::new();
        let reply = match req {
            AdminRequest::Stat => AdminReply::Stat(self.stat_json()),
            AdminRequest::Capture { guest } => match self.start_capture(guest) {
                Ok(reader) => {
                    fds.push(reader);
                    AdminReply::Capture {
                        port: format!("vif{guest}"),
                    }
                }
                Err(e) => AdminReply::Error(format!("{e:#}")),
            },
            AdminRequest::Down => {
                self.stopping = true;
                AdminReply::Stopping
            }
            AdminRequest::RestartDd => match self.restart_dd() {
                Ok(vifs) => AdminReply::Restarting { vifs },
                Err(e) => AdminReply::Error(format!("{e:#}")),
            },
            AdminRequest::Set(r) => match self.apply_set(&r) {
                Ok(()) => AdminReply::Set(self.settings()),
                Err(e) => AdminReply::Error(format!("{e:#}")),
            },
        };
        let c = self.admin_conns.get(&id).expect("present");
        let fds: Vec<BorrowedFd<'_>> = fds.iter().map(|f| f.as_fd()).collect();
        let _ = ctl::send(c.as_fd(), &reply, &fds);
    }

    /// `pvnet capture vif<i>`: a capture at guest `guest`'s bridge port; returns the reader's
    /// end of its socket (the data path keeps the other, and ends the capture when the
    /// reader closes this one).
    fn start_capture(&mut self, guest: usize) -> Result<OwnedFd> {
        let n = match self.cfg.mode {
            Mode::Linux => {
                bail!("this run has no driver domain (mode linux), so no vif: capture pnic instead")
            }
            Mode::Xen => self.cfg.guests + self.cfg.attach,
            Mode::Relay => self.cfg.guests,
        };
        if guest >= n {
            bail!(
                "no vif{guest}: this run has {n} guest{} (vif0..vif{})",
                if n == 1 { "" } else { "s" },
                n.saturating_sub(1)
            );
        }
        let (sink, reader) = pvnet_dd::capture::sink_pair().context("a capture socket")?;
        let unix_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        self.dp
            .capture_start(vif_port(guest as u16 + 1), sink, unix_ns);
        Ok(reader)
    }

    /// `pvnet set`: every change is checked before any is applied, so a refused request
    /// changes nothing.
    fn apply_set(&mut self, r: &SetRequest) -> Result<()> {
        if self.cfg.mode == Mode::Linux {
            bail!("this run has no driver domain (mode linux): nothing to set");
        }
        if let Some(p) = r.port.as_deref() {
            if p != self.testbed.dd_if {
                bail!(
                    "no physical port {p:?} (this run has one: {})",
                    self.testbed.dd_if
                );
            }
        }
        if self.cfg.port_frames
            && (matches!(r.lro, Some(LroChange::On(_))) || r.mode.is_some() || r.bo.is_some())
        {
            bail!(
                "this run's port is the frame port (--grant flip, --port-frames), which takes \
                 wire-sized frames only and aggregates none: no --lro, --lro-mode or --bo"
            );
        }
        if r.g2g.is_some() && self.cfg.mode != Mode::Xen {
            bail!("--g2g needs a run of mode xen (a relayed guest has no grants)");
        }
        if r.hvm_path.is_some() && self.hvms.is_empty() {
            bail!("--hvm-path: this run has no HVM guest (`pvnet up --hvm N` starts them)");
        }
        let vifs = self.cfg.guests + self.cfg.attach;
        if !r.vif_rate.is_empty() && self.cfg.mode != Mode::Xen {
            bail!("--vif-rate needs a run of mode xen: the rate is netback's credit");
        }
        for (i, _) in &r.vif_rate {
            if let Some(i) = *i {
                crate::config::check_vif_index(i, vifs, self.cfg.hvm)?;
            }
        }
        self.dp.set(r.lro.map(LroChange::policy), r.mode, r.bo);
        if let Some(on) = r.g2g {
            self.dp.set_g2g_direct(on);
            // A restarted driver domain keeps the setting.
            self.cfg.g2g = on;
        }
        for &(who, rate) in &r.vif_rate {
            let which: Vec<u16> = match who {
                Some(i) => vec![i],
                None => (0..vifs as u16).collect(),
            };
            for i in which {
                self.set_vif_rate(i, rate);
            }
        }
        if let Some(path) = r.hvm_path {
            // The vCPUs read the selector at their next exit.
            for h in self.hvms.values() {
                h.shared.set_path(path);
            }
            self.cfg.hvm_path = path;
        }
        self.cfg.bo = self.dp.config().bo;
        self.cfg.lro = self.dp.lro_policy().map(|policy| LroSettings {
            policy,
            mode: self.dp.lro_mode(),
        });
        self.arm_lro_timer();
        Ok(())
    }

    /// Vif `i`'s rate, as the toolstack changes it: in the run's configuration (a restarted
    /// driver domain keeps it), in its backend directory, and in its netback if connected.
    fn set_vif_rate(&mut self, i: u16, rate: Option<TxRate>) {
        let dom = i + 1;
        match rate {
            Some(r) => self.cfg.vif_rates.insert(i, r),
            None => self.cfg.vif_rates.remove(&i),
        };
        let _ = xenbus::write_rate(&mut self.store, dom, rate);
        self.dp.set_vif_rate(dom, rate);
    }

    fn settings(&self) -> Settings {
        Settings {
            port: self.testbed.dd_if.clone(),
            lro: self
                .dp
                .lro_policy()
                .map_or_else(|| "off".into(), |p| p.to_string()),
            mode: self.dp.lro_mode(),
            bo: self.cfg.bo,
            g2g: self.dp.g2g_direct(),
            hvm_path: (!self.hvms.is_empty()).then_some(self.cfg.hvm_path),
            hvm_domains: self.hvms.len(),
            vif_rates: self.cfg.vif_rates.clone(),
        }
    }

    pub fn stat_json(&mut self) -> serde_json::Value {
        let (budget, mtu, gro) = (self.cfg.budget, self.cfg.mtu, self.cfg.gro);
        let pnic = self.dp.phy_mut().map(|p| {
            let s = p.stats();
            json!({
                "ring_frames": p.frame_nr(), "ring_frame_size": p.frame_size(), "budget": budget,
                "mtu": mtu,
                "rx_frames": s.rx_frames, "rx_bytes": s.rx_bytes, "rx_truncated": s.rx_truncated,
                "rx_bad": s.rx_bad, "rx_csum_not_ready": s.rx_csum_not_ready,
                "rx_gso": s.rx_gso, "rx_max_frame": s.rx_max_frame, "gro": gro,
                "rx_leased": s.rx_leased, "rx_lease_copies": s.rx_lease_copies,
                "rx_leases_outstanding": s.rx_leases_outstanding,
                "tx_frames": s.tx_frames, "tx_bytes": s.tx_bytes, "tx_would_block": s.tx_would_block, "tx_sndbuf": s.tx_sndbuf,
                "tx_errors": s.tx_errors, "kernel_packets": s.tp_packets, "kernel_drops": s.tp_drops,
                "ring": if p.blocks().is_some() { "v3" } else { "v2" },
                "queues": p.queue_count(),
                "rx_queues": p.queue_stats().iter().map(|q| json!({
                    "frames": q.frames, "kernel_drops": q.drops, "paused": q.paused,
                    "leases": q.leases,
                })).collect::<Vec<_>>(),
                "ring_blocks": p.blocks().map(|b| b.block_nr),
                "ring_block_size": p.blocks().map(|b| b.block_size),
                "rx_blocks": s.rx_blocks, "rx_bad_blocks": s.rx_bad_blocks,
                "rx_blocks_held": s.rx_blocks_held, "rx_hold_stops": s.rx_hold_stops,
                "kernel_ring_frozen": s.tp_ring_frozen,
                // The link went down under the port (README, "For operators").
                "socket_errors": s.socket_errors,
                "last_socket_error": (s.last_socket_errno != 0)
                    .then(|| std::io::Error::from_raw_os_error(s.last_socket_errno).to_string()),
            })
        });
        // The ports' life, and whether the physical port is on the data path now (null under
        // `--mode linux`: the kernel forwards, and pvnet opens no port).
        let mut port = serde_json::to_value(&self.port).unwrap_or_default();
        port["open"] = match self.cfg.mode {
            Mode::Linux => serde_json::Value::Null,
            _ => self.dp.phy().is_some().into(),
        };
        let vifs: Vec<serde_json::Value> = self
            .vifs
            .values()
            .map(|v| {
                json!({
                    "domid": v.domid.0,
                    "mac": format_mac(&v.mac),
                    "state": v.state,
                    "fatal": v.fatal.map(|f| f.name()),
                    "netback": self.dp.vif_stats(v.domid.0).unwrap_or(&v.stats),
                    "events": self.dp.vif_events(v.domid.0),
                    "netfront": v.front_stats,
                    "ctl": v.ctl_bucket,
                    "late_eoi": v.late_eoi,
                    "attach_accept_failures": v.attach_backoff.failures,
                    // The transmit rate the vif runs now (null: unlimited).
                    "rate": self.dp.netback(v.domid.0).and_then(Netback::tx_rate).map(|r| json!({
                        "bytes": r.bytes, "usec": r.usec, "bits_per_sec": r.bits_per_sec(),
                    })),
                    "reconnections": v.reconnections,
                    "last_reconnect_ms": v.last_reconnect_ms,
                })
            })
            .collect();
        let relay = (self.cfg.mode == Mode::Relay).then(|| {
            (self.relay_macs.iter())
                .filter_map(|(&d, mac)| {
                    let (c, mut stats) = self.dp.tap_stats(vif_port(d))?;
                    if let Some(o) = stats.as_object_mut() {
                        o.insert("from_guest".into(), c.rx.into());
                        o.insert("from_guest_errors".into(), c.rx_errors.into());
                    }
                    Some(json!({"domid": d, "mac": format_mac(mac), "stats": stats}))
                })
                .collect::<Vec<_>>()
        });
        let hvm: Vec<serde_json::Value> = (self.hvms.values())
            .map(|h| {
                let mut v = h.stat_json();
                if let (Some(o), Some((c, port))) =
                    (v.as_object_mut(), self.dp.tap_stats(vif_port(h.domid)))
                {
                    o.insert("bridge_port".into(), port);
                    o.insert("from_dm".into(), c.rx.into());
                    o.insert("to_dm".into(), c.tx.into());
                    o.insert("to_dm_errors".into(), c.tx_errors.into());
                }
                v
            })
            .collect();
        json!({
            "id": self.cfg.id,
            "mode": self.cfg.mode,
            "uptime_s": self.start.elapsed().as_secs_f64(),
            "daemon": self.dp.stats,
            "daemon_cpu": data_path_thread_cpu(),
            "stages_ns": self.dp.stage_ns(),
            "pnic": pnic,
            "bridge": self.dp.switch_stats().bridge,
            "switch": self.dp.switch_stats(),
            "settings": self.settings(),
            "lro": self.dp.lro_stats(),
            "grant": self.hv.stats(),
            "frames": self.hv.machine().map(|m| m.stats()),
            "capture": self.capture_json(),
            "vifs": vifs,
            "reclaimed": self.reclaimed,
            // Admin connections open now, those closed to make room (ADMIN_CONNS_MAX), and
            // the `accept`s that failed for want of a resource (AcceptBackoff).
            "admin": {"connections": self.admin_conns.len(), "evicted": self.admin_evicted,
                      "accept_failures": self.admin_backoff.failures},
            "restart": self.restarts,
            // The ports lost with the NIC or a restart, and opened again (docs/restart.md).
            "port": port,
            // The per-guest caps (README, "For operators"); each has a counter when it bites.
            "limits": self.cfg.limits,
            "relay": relay,
            "hvm": hvm,
        })
    }

    /// The captures for `stat`: ports by the names `pvnet capture` takes.
    fn capture_json(&mut self) -> serde_json::Value {
        let mut c = self.dp.capture_summary();
        let active: Vec<serde_json::Value> = (c.active.drain(..))
            .map(|(port, st)| {
                let name = match port.checked_sub(vif_port(1).0) {
                    Some(i) => format!("vif{i}"),
                    None => format!("port{port}"),
                };
                json!({"port": name, "records": st.records, "bytes": st.bytes, "dropped": st.dropped})
            })
            .collect();
        let mut v = serde_json::to_value(&c).unwrap_or_default();
        v["active"] = active.into();
        v
    }

    /// Stops guests and removes everything the run created.
    pub fn shutdown(&mut self) {
        // What the engine still holds goes to the guests before they stop.
        self.dp.flush_all();
        for v in self.vifs.values() {
            if let Some(s) = v.ctl.as_ref() {
                let _ = ctl::send(s.as_fd(), &ToGuest::Shutdown, &[]);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        for h in self.hvms.values_mut() {
            h.stop(deadline);
        }
        for v in self.vifs.values_mut() {
            if let Some(c) = v.child.as_mut() {
                loop {
                    match c.try_wait() {
                        Ok(Some(_)) => break,
                        Ok(None) if Instant::now() < deadline => {
                            std::thread::sleep(Duration::from_millis(10))
                        }
                        _ => {
                            let _ = c.kill();
                            let _ = c.wait();
                            break;
                        }
                    }
                }
            }
        }
        for v in self.vifs.values() {
            if let Some((_, p)) = v.attach_listener.as_ref() {
                let _ = std::fs::remove_file(p);
            }
        }
        self.vifs.clear();
        self.hvms.clear();
        self.dp.clear();
        if let Some(mut g) = self.guest_groups.take() {
            g.remove();
        }
        if let Err(e) = self.testbed.teardown() {
            eprintln!("pvnet: teardown: {e:#}");
        }
        let _ = std::fs::remove_dir_all(rundir::run_dir(&self.cfg.id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Token; 12] = [
        Token::Signal,
        Token::StackTap,
        Token::Admin,
        Token::LroTimer,
        Token::GuestCtl(65535),
        Token::Evtchn(1),
        Token::Attach(7),
        Token::AdminConn(u32::MAX),
        Token::Relay(0),
        Token::HvmNet(3),
        Token::DmCtl(65535),
        Token::HvmCtl(2),
    ];

    #[test]
    fn every_token_survives_the_epoll_word() {
        for t in ALL {
            assert_eq!(Token::from_u64(t.to_u64()), Some(t), "{t:?}");
        }
        let words: std::collections::BTreeSet<u64> = ALL.iter().map(|t| t.to_u64()).collect();
        assert_eq!(words.len(), ALL.len(), "distinct words");
    }

    #[test]
    fn other_words_are_no_token() {
        for w in [0, 1, 13 << 32, (1 << 32) | 5, (5 << 32) | 65536, u64::MAX] {
            assert_eq!(Token::from_u64(w), None, "{w:#x}");
        }
    }
}
