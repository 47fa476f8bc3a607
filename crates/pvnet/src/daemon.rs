//! The driver-domain daemon: toolstack (guest memory, event channels, xenstore, guest
//! processes) and the data path (pnic → bridge → netback, and back), in one event loop pinned
//! to the receiving CPU.
//!
//! Bridge ports: 0 = the physical port, 1 = the driver domain's own stack (a TAP in its
//! namespace), 1 + domid = the vif of that guest.

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
use pvnet_dd::bridge::{Bridge, BridgeConfig, Decision, PortId};
use pvnet_dd::gate::{Gate, GuestLoad, PortGate};
use pvnet_dd::lro::{self, Lro};
use pvnet_dd::netback::{Fatal, Features, Netback, VifStats};
use pvnet_dd::packet::{Chain, Packet};
use pvnet_guest::netfront::{FrontStats, Layout};
use pvnet_guest::proto::{BootInfo, FromGuest, ToGuest};
use pvnet_guest::run::format_mac;
use pvnet_hv::evtchn::{channel_pair, EvtchnEnd};
use pvnet_hv::grant::{Hypervisor, GRANT_FRAMES};
use pvnet_hv::mem::GuestMemory;
use pvnet_hv::store::{Store, XenbusState};
use pvnet_hv::{ctl, DomId, GrantRef};
use pvnet_netif::keys;
use pvnet_pnic::{Pnic, PnicConfig};
use pvnet_testbed::{link, topology, RunId, Tap, Testbed, TestbedConfig};
use pvnet_wire::ethernet::MacAddr;
use pvnet_wire::vnet::{VirtioNetHdr, VNET_HDR_LEN};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::relay::RelayTap;
use crate::rundir::{self, RunInfo};

const PORT_PNIC: PortId = PortId(0);
const PORT_DDSTACK: PortId = PortId(1);
fn vif_port(d: DomId) -> PortId {
    PortId(1 + d.0)
}

const EV_SIGNAL: u64 = 1;
const EV_DDTAP: u64 = 3;
const EV_ADMIN: u64 = 4;
const EV_LRO_TIMER: u64 = 5;
/// Per-domain tokens: kind in the high bits, domid in the low 16.
const EV_GUEST_CTL: u64 = 1 << 20;
const EV_EVTCHN: u64 = 2 << 20;
const EV_ATTACH: u64 = 3 << 20;
const EV_ADMIN_CONN: u64 = 4 << 20;
const EV_RELAY: u64 = 5 << 20;

/// The event channel port every vif uses inside its domain.
const VIF_PORT: u32 = 1;
/// Extra guest pages beyond what netfront lays out.
const SPARE_PAGES: u32 = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// No virtualization: the driver domain's veth end gets an address, receivers run there.
    Linux,
    /// The PV path (aggregation as configured).
    Xen,
    /// The floor of this emulation: the physical port's packet ring and each guest's TAP,
    /// served by the daemon itself, without the Xen machinery in between (`crate::relay`).
    Relay,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DaemonConfig {
    pub id: String,
    pub mode: Mode,
    pub guests: usize,
    /// Extra domains served to an external frontend through a socket (tests).
    pub attach: usize,
    /// Frames per pnic poll.
    pub budget: usize,
    /// CPU for the daemon and guests (the receiving CPU); None = no pinning.
    pub cpu: Option<usize>,
    pub rps: bool,
    /// The sender's CPU: the remote host's input is steered there (None: not steered).
    #[serde(default)]
    pub sender_cpu: Option<usize>,
    /// Receive aggregation at the physical port (None: off, the `xen` baseline).
    #[serde(default)]
    pub lro: Option<LroSettings>,
    /// Bridge optimization: forward skb-mode aggregates without linearizing them.
    #[serde(default)]
    pub bo: bool,
    /// Whether the guests' netfronts advertise GSO.
    #[serde(default = "yes")]
    pub guest_gso: bool,
    /// GRO on the physical port's veth end (the `linux-gro` bench configuration).
    #[serde(default)]
    pub gro: bool,
    /// Slots of the physical port's packet ring (see [`check_ring_frames`]).
    #[serde(default = "default_ring_frames")]
    pub ring_frames: u32,
}

fn yes() -> bool {
    true
}

fn default_ring_frames() -> u32 {
    pvnet_pnic::DEFAULT_FRAME_NR
}

/// The MTU of the testbed's wire (the veth between the remote host and the driver domain).
pub const WIRE_MTU: u32 = 1500;

/// Fewest and most slots `--ring-frames` accepts: below a few polls' worth the kernel drops
/// whenever the daemon is descheduled; above 64 Ki slots (104 MiB) it is only memory.
pub const RING_FRAMES_MIN: u32 = 256;
pub const RING_FRAMES_MAX: u32 = 65536;

/// Frames per poll of the physical port unless `--budget` says otherwise (NAPI's weight).
pub const DEFAULT_BUDGET: usize = 64;
/// Bounds of the physical port's poll budget. The port is not polled while a guest's RX queue
/// could not take a poll's worth of frames ([`pvnet_dd::netback::RX_QUEUE_LIMIT`]): a budget
/// near the limit would hold the port back most of the time, one over it always.
pub const BUDGET_MIN: usize = 1;
pub const BUDGET_MAX: usize = pvnet_dd::netback::RX_QUEUE_LIMIT / 2;

/// Checks a `--budget` value.
pub fn check_budget(n: usize) -> Result<usize> {
    if !(BUDGET_MIN..=BUDGET_MAX).contains(&n) {
        bail!("--budget must be between {BUDGET_MIN} and {BUDGET_MAX}, got {n}");
    }
    Ok(n)
}

/// Checks a `--ring-frames` value.
pub fn check_ring_frames(n: u32) -> Result<u32> {
    if !(RING_FRAMES_MIN..=RING_FRAMES_MAX).contains(&n) {
        bail!("--ring-frames must be between {RING_FRAMES_MIN} and {RING_FRAMES_MAX}, got {n}");
    }
    Ok(n)
}

/// How the physical port aggregates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LroSettings {
    pub policy: lro::Policy,
    pub mode: lro::Mode,
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            id: RunId::new().as_str().to_string(),
            mode: Mode::Xen,
            guests: 1,
            attach: 0,
            budget: DEFAULT_BUDGET,
            cpu: Some(0),
            rps: true,
            sender_cpu: None,
            lro: None,
            bo: false,
            guest_gso: true,
            gro: false,
            ring_frames: pvnet_pnic::DEFAULT_FRAME_NR,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum AdminRequest {
    Stat,
    Down,
    /// Reconfigures the data path of a running system; None leaves a setting as it is.
    Set(SetRequest),
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SetRequest {
    /// The physical port to change (None: the only one).
    pub port: Option<String>,
    /// `off`, or a flush policy (`poll`, `every:N`, `timeout:USEC`, `adaptive`).
    pub lro: Option<String>,
    pub mode: Option<lro::Mode>,
    pub bo: Option<bool>,
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
}

struct Vif {
    domid: DomId,
    mac: [u8; 6],
    ctl: Option<OwnedFd>,
    /// The guest's end of the control socket until an external frontend takes it.
    attach_end: Option<OwnedFd>,
    attach_listener: Option<(OwnedFd, String)>,
    /// The backend's end of the event channel until the vif connects.
    evtchn_back: Option<EvtchnEnd>,
    netback: Option<Netback>,
    stats: VifStats,
    front_stats: FrontStats,
    state: VifState,
    fatal: Option<Fatal>,
    child: Option<Child>,
    ready: bool,
    failed: Option<String>,
    dirty: bool,
    /// The last TX poll stopped at its budget with requests left on the ring. The frontend
    /// will not notify for them (the request event index is only re-armed by a poll that
    /// drains the ring), so the daemon polls again without sleeping, as NAPI reschedules a
    /// poll that used its whole budget.
    tx_more: bool,
}

impl Vif {
    fn device_path(&self) -> String {
        format!("/local/domain/{}/device/vif/0", self.domid.0)
    }
    fn backend_path(&self) -> String {
        format!("/local/domain/0/backend/vif/{}/0", self.domid.0)
    }
    fn live_stats(&self) -> VifStats {
        self.netback
            .as_ref()
            .map(|n| n.stats.clone())
            .unwrap_or_else(|| self.stats.clone())
    }
}

#[derive(Default, Serialize)]
struct DaemonStats {
    polls: u64,
    polls_full_budget: u64,
    /// Vif polls without an event because the vif's last TX poll used its whole budget.
    tx_repolls: u64,
    frames: u64,
    /// Polls skipped because a guest's queue was nearly full (the port is then not watched
    /// until that guest takes packets: no spinning on a readable socket).
    pnic_deferred: u64,
    /// Guests that held the port back without taking packets and are then not waited for
    /// a while (`pvnet_dd::gate`): their packets are dropped (`rx_queue_full`).
    pnic_stalls: u64,
    /// Waits that found frames in the port's ring and did not sleep, and sleeps in which the
    /// port woke the daemon.
    pnic_ring_wakeups: u64,
    pnic_woken: u64,
    /// Buffers still leased from the port's ring copied to the heap before a sleep on the
    /// port (held aggregates, packets waiting for a guest), and the sleeps that needed it
    /// (`detach_leases`).
    leases_detached: u64,
    sleeps_detaching: u64,
    /// Of those, the sleeps for which the newest buffers were not enough (everything went).
    sleeps_detaching_all: u64,
    /// Polls after which the oldest lease was aging ([`Pnic::lease_aging`]), and the leased
    /// buffers then copied to the heap (all of them) so the kernel would not stop at it.
    aging_detaches: u64,
    aging_detached: u64,
    flooded_copies: u64,
    linearized_bytes: u64,
    ddtap_rx: u64,
    ddtap_tx: u64,
    ddtap_errors: u64,
    pnic_send_errors: u64,
    bridge_drops: u64,
    /// Chained packets the bridge forwarded as chains (BO).
    chains_forwarded: u64,
    /// The aggregation timer: times armed, times fired.
    lro_timer_arms: u64,
    lro_timer_fires: u64,
}

pub struct Daemon {
    cfg: DaemonConfig,
    testbed: Testbed,
    hv: Arc<Hypervisor>,
    store: Store,
    bridge: Bridge,
    pnic: Option<Pnic>,
    /// The physical port's aggregation engine, when aggregation is on.
    lro: Option<Lro>,
    /// The engine's settings, kept while it is off so `pvnet set --lro` can turn it back on.
    lro_mode: lro::Mode,
    /// Fires at the engine's next deadline (hold limits, timeouts, an idle port).
    lro_timer: TimerFd,
    /// The deadline (TSC) the timer is armed for.
    lro_armed: Option<u64>,
    ticks_per_us: u64,
    /// Packets leaving the engine (reused buffer).
    lro_out: Vec<Packet>,
    /// Whether the daemon waits for the physical port (off while guests' queues are full).
    /// The port's socket is not in the epoll set: see [`Daemon::wait_events`].
    pnic_watched: bool,
    /// Back-pressure from full guests to the port, bounded per guest.
    gate: PortGate,
    ddtap: Option<Tap>,
    vifs: BTreeMap<u16, Vif>,
    /// Mode relay: each guest's TAP, served directly, by domid (its bridge port is the one a
    /// vif of that domid would have).
    relays: BTreeMap<u16, RelayTap>,
    ep: Epoll,
    sigfd: SignalFd,
    admin: OwnedFd,
    admin_conns: BTreeMap<u64, OwnedFd>,
    next_conn: u64,
    start: Instant,
    /// Nanoseconds since `start`, read once per loop pass and per poll (not per frame): the
    /// bridge's learning and ageing need no finer clock.
    now: u64,
    /// When the bridge's table was last aged (`now` units).
    aged_at: u64,
    stats: DaemonStats,
    /// Packets waiting to be routed (reused buffer).
    pending: Vec<(PortId, Packet)>,
    /// Read buffer of the driver domain's own stack port (reused).
    ddtap_buf: Vec<u8>,
    stopping: bool,
}

use pvnet_perf::cpu::rdtsc;

/// How often the bridge's table is swept for expired entries (its ageing time is minutes).
const AGE_EVERY_NS: u64 = 1_000_000_000;

fn now_ns(start: Instant) -> u64 {
    start.elapsed().as_nanos() as u64
}

/// Blocks SIGINT/SIGTERM/SIGHUP and returns a signalfd for them, so a signal becomes an event
/// of the loop and teardown always runs.
fn signal_fd() -> Result<SignalFd> {
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

impl Daemon {
    /// Builds the testbed and, for the PV modes, the driver domain and its guests. Returns when
    /// every guest's frontend is connected (or failed).
    pub fn start(cfg: DaemonConfig) -> Result<Daemon> {
        let sigfd = signal_fd()?;
        let id = RunId::parse(&cfg.id)?;
        std::fs::create_dir_all(rundir::run_dir(&cfg.id))?;
        let guests = match cfg.mode {
            Mode::Linux => 0,
            Mode::Xen => cfg.guests + cfg.attach,
            Mode::Relay if cfg.attach > 0 => {
                bail!("mode relay has no frontends to attach (--attach needs --mode xen)")
            }
            Mode::Relay => cfg.guests,
        };
        let testbed = Testbed::create(TestbedConfig {
            id,
            guests,
            mtu: WIRE_MTU,
            rps_cpu: if cfg.rps { cfg.cpu } else { None },
            gro: cfg.gro,
            remote_rps_cpu: if cfg.rps { cfg.sender_cpu } else { None },
        })?;
        if let Some(c) = cfg.cpu {
            pvnet_testbed::cpu::pin_current_thread(c)?;
        }
        let admin = seqpacket_listener(rundir::ctl_path(&cfg.id).to_str().expect("utf-8 path"))?;
        let ep = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
        ep.add(
            sigfd.as_fd(),
            EpollEvent::new(EpollFlags::EPOLLIN, EV_SIGNAL),
        )?;
        ep.add(
            admin.as_fd(),
            EpollEvent::new(EpollFlags::EPOLLIN, EV_ADMIN),
        )?;
        let lro_timer = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )?;
        ep.add(
            lro_timer.as_fd(),
            EpollEvent::new(EpollFlags::EPOLLIN, EV_LRO_TIMER),
        )?;
        let ticks_per_us = (pvnet_perf::cpu::tsc_hz() / 1_000_000).max(1);
        let mut d = Daemon {
            lro: cfg.lro.map(|l| {
                Lro::new(lro::Config {
                    mode: l.mode,
                    policy: l.policy,
                    ticks_per_us,
                    ..lro::Config::default()
                })
            }),
            lro_mode: cfg.lro.map(|l| l.mode).unwrap_or(lro::Mode::Skb),
            lro_timer,
            lro_armed: None,
            ticks_per_us,
            lro_out: Vec::new(),
            cfg,
            testbed,
            hv: Arc::new(Hypervisor::new()),
            store: Store::new(),
            bridge: Bridge::new(BridgeConfig::default()),
            pnic: None,
            pnic_watched: false,
            gate: PortGate::default(),
            ddtap: None,
            vifs: BTreeMap::new(),
            relays: BTreeMap::new(),
            ep,
            sigfd,
            admin,
            admin_conns: BTreeMap::new(),
            next_conn: 0,
            start: Instant::now(),
            now: 0,
            aged_at: 0,
            stats: DaemonStats::default(),
            pending: Vec::new(),
            ddtap_buf: Vec::new(),
            stopping: false,
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
        for i in 0..self.cfg.guests + self.cfg.attach {
            let spawn = i < self.cfg.guests;
            self.create_guest(i, spawn)?;
        }
        // Wait until every spawned guest is connected and up.
        let deadline = Instant::now() + Duration::from_secs(20);
        while self
            .vifs
            .values()
            .any(|v| v.child.is_some() && !v.ready && v.failed.is_none())
        {
            if Instant::now() > deadline {
                bail!("guests did not connect within 20 s");
            }
            self.run_once(Duration::from_millis(50))?;
            if self.stopping {
                bail!("interrupted while starting");
            }
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
        for i in 0..self.cfg.guests {
            let domid = DomId(i as u16 + 1);
            let r = RelayTap::create(&self.testbed.guests[i], i)?;
            self.ep.add(
                r.tap().fd(),
                EpollEvent::new(EpollFlags::EPOLLIN, EV_RELAY | domid.0 as u64),
            )?;
            self.bridge.add_port(vif_port(domid));
            self.relays.insert(domid.0, r);
        }
        Ok(())
    }

    /// The driver domain's two own ports: the physical port and its stack's TAP.
    fn open_ports(&mut self) -> Result<()> {
        // The daemon's thread lives in the driver domain's namespace from here on.
        self.testbed.dd.enter()?;
        // Slots sized for the port's MTU: a longer frame would arrive truncated and be lost.
        let mtu = link::get_mtu(&self.testbed.dd_if)
            .with_context(|| format!("reading the MTU of {}", self.testbed.dd_if))?;
        let pcfg = PnicConfig {
            frame_nr: check_ring_frames(self.cfg.ring_frames)?,
            frame_size: pvnet_pnic::frame_size_for_mtu(mtu),
            ..PnicConfig::new(self.testbed.dd_if.clone())
        };
        let pnic = Pnic::open(&pcfg)
            .map_err(|e| anyhow!("opening the physical port {}: {e}", self.testbed.dd_if))?;
        self.pnic = Some(pnic);
        self.pnic_watched = true;
        self.bridge.add_port(PORT_PNIC);

        let tap = Tap::open("pvdd0", true).context("creating the driver domain's stack port")?;
        link::set_mac(tap.name(), [0x02, 0x70, 0x76, 0, 0, 0x02])?;
        link::add_ipv4(tap.name(), topology::dd_addr(), topology::SUBNET_PREFIX)?;
        link::set_up(tap.name(), true)?;
        self.ep
            .add(tap.fd(), EpollEvent::new(EpollFlags::EPOLLIN, EV_DDTAP))?;
        self.ddtap = Some(tap);
        self.bridge.add_port(PORT_DDSTACK);
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
            evtchn_back: Some(back_end),
            netback: None,
            stats: VifStats::default(),
            front_stats: FrontStats::default(),
            state: VifState::Waiting,
            fatal: None,
            child: None,
            ready: false,
            failed: None,
            dirty: false,
            tx_more: false,
        };
        // Xenstore: frontend and backend directories, as the toolstack writes them.
        let dev = vif.device_path();
        let be = vif.backend_path();
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
        w(st, format!("{be}/{}", keys::FRONTEND), &dev)?;
        w(
            st,
            format!("{be}/{}", keys::FRONTEND_ID),
            &domid.0.to_string(),
        )?;
        w(st, format!("{be}/{}", keys::HANDLE), "0")?;
        w(st, format!("{be}/{}", keys::MAC), &format_mac(&mac))?;
        // netback probe: advertise features, then InitWait.
        w(st, format!("{be}/{}", keys::FEATURE_SG), "1")?;
        w(st, format!("{be}/{}", keys::FEATURE_GSO_TCPV4), "1")?;
        w(st, format!("{be}/{}", keys::FEATURE_GSO_TCPV6), "1")?;
        w(st, format!("{be}/{}", keys::FEATURE_RX_COPY), "1")?;
        w(st, format!("{be}/{}", keys::FEATURE_RX_FLIP), "0")?;
        w(
            st,
            format!("{be}/{}", keys::STATE),
            &XenbusState::InitWait.as_value(),
        )?;
        st.watch(
            DomId::DRIVER,
            &format!("{dev}/{}", keys::STATE),
            &format!("fe:{}", domid.0),
        )?;

        let boot = BootInfo {
            domid: domid.0,
            mem_pages: pages,
            grant_frames: GRANT_FRAMES,
            device_path: dev,
            evtchn_port: VIF_PORT,
            ifname: "eth0".into(),
            ipv4: topology::guest_addr(i).to_string(),
            prefix: topology::SUBNET_PREFIX,
            gso: self.cfg.guest_gso,
        };
        let (fe_notify, fe_wait) = front_end.into_fds();
        ctl::send(
            vif.ctl.as_ref().expect("ctl").as_fd(),
            &ToGuest::Boot(boot),
            &[mem.fd(), fe_notify.as_fd(), fe_wait.as_fd()],
        )?;
        drop((fe_notify, fe_wait));
        let ctl_fd = vif.ctl.as_ref().expect("ctl").as_fd();
        nix::fcntl::fcntl(
            ctl_fd,
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        )?;
        self.ep.add(
            ctl_fd,
            EpollEvent::new(EpollFlags::EPOLLIN, EV_GUEST_CTL | domid.0 as u64),
        )?;

        if spawn {
            vif.child = Some(self.spawn_guest(i, ctl_guest)?);
        } else {
            let path = rundir::run_dir(&self.cfg.id).join(format!("attach-{}.sock", domid.0));
            let path = path.to_str().expect("utf-8").to_string();
            let l = seqpacket_listener(&path)?;
            self.ep.add(
                l.as_fd(),
                EpollEvent::new(EpollFlags::EPOLLIN, EV_ATTACH | domid.0 as u64),
            )?;
            vif.attach_listener = Some((l, path));
            vif.attach_end = Some(ctl_guest);
        }
        self.bridge.add_port(vif_port(domid));
        self.vifs.insert(domid.0, vif);
        Ok(())
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
            guest_pids: self
                .vifs
                .values()
                .filter_map(|v| v.child.as_ref().map(|c| c.id() as i32))
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
            // While the port is not watched, wake in time to end a guest's stall.
            let wait = if self.pnic_watched {
                Duration::from_millis(200)
            } else {
                Duration::from_nanos(pvnet_dd::gate::STALL_NS / 4)
            };
            self.run_once(wait)?;
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
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // Only a sleep on the port needs the leases out of the way; while the port is not
        // watched (a guest holds it back) packets keep their slots.
        if ms > 0 && self.pnic_watched && !self.pnic.as_ref().is_some_and(Pnic::rx_ready) {
            self.detach_leases();
        }
        let epoll_wait = |ep: &Epoll, events: &mut [EpollEvent], ms: u16| match ep
            .wait(events, EpollTimeout::from(ms))
        {
            Ok(n) => Ok(n),
            Err(nix::errno::Errno::EINTR) => Ok(0),
            Err(e) => Err(e),
        };
        let pnic = match self.pnic.as_ref() {
            Some(p) if self.pnic_watched => p,
            _ => {
                return Ok((
                    epoll_wait(&self.ep, events, ms.min(u16::MAX as i32) as u16)?,
                    false,
                ))
            }
        };
        if pnic.rx_ready() {
            self.stats.pnic_ring_wakeups += 1;
            return Ok((epoll_wait(&self.ep, events, 0)?, true));
        }
        let mut fds = [
            PollFd::new(self.ep.0.as_fd(), PollFlags::POLLIN),
            PollFd::new(pnic.rx_fd(), PollFlags::POLLIN),
        ];
        match poll(
            &mut fds,
            PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
        ) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
        let ready = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
        let (ep_ready, pnic_ready) = (ready(&fds[0]), ready(&fds[1]));
        self.stats.pnic_woken += u64::from(pnic_ready);
        let n = if ep_ready {
            epoll_wait(&self.ep, events, 0)?
        } else {
            0
        };
        Ok((n, pnic_ready))
    }

    /// Before sleeping on the port: copies buffers still leased from its ring to the heap when
    /// a lease is in the kernel's way ([`Pnic::lease_in_the_way`]): a lease on the newest frame
    /// would make the port wake the daemon at once, again and again, and a lease on the slot
    /// the kernel fills next stops the port. The newest frame is the last one an aggregate or
    /// a guest's queue took, so those go first; everything goes when that was not enough (the
    /// kernel has come round to an old lease). Copies are few (`leases_detached`): most frames
    /// leave their slots for a guest's page before the daemon sleeps.
    fn detach_leases(&mut self) {
        let in_the_way = |d: &Daemon| d.pnic.as_ref().is_some_and(Pnic::lease_in_the_way);
        if !in_the_way(self) {
            return;
        }
        self.stats.sleeps_detaching += 1;
        let mut n = self.lro.as_mut().map_or(0, Lro::detach_newest);
        for v in self.vifs.values_mut() {
            if let Some(nb) = v.netback.as_mut() {
                n += nb.detach_newest();
            }
        }
        if in_the_way(self) {
            n += self.detach_all_leases();
            self.stats.sleeps_detaching_all += 1;
        }
        self.stats.leases_detached += n as u64;
        debug_assert!(!in_the_way(self));
    }

    /// Copies every buffer still leased from the port's ring to the heap: the held
    /// aggregates' and the packets waiting for a guest. Returns how many it copied.
    fn detach_all_leases(&mut self) -> usize {
        let mut n = self.lro.as_mut().map_or(0, Lro::detach_held);
        for v in self.vifs.values_mut() {
            if let Some(nb) = v.netback.as_mut() {
                n += nb.detach_queued();
            }
        }
        n
    }

    fn run_once(&mut self, timeout: Duration) -> Result<()> {
        let mut events = [EpollEvent::empty(); 32];
        let mut more_pnic = false;
        let timeout = if self.vifs.values().any(|v| v.tx_more) {
            Duration::ZERO
        } else {
            timeout
        };
        let (n, pnic_ready) = self.wait_events(&mut events, timeout)?;
        self.now = now_ns(self.start);
        for ev in &events[..n] {
            let tok = ev.data();
            match tok {
                EV_SIGNAL => {
                    while let Ok(Some(_)) = self.sigfd.read_signal() {}
                    self.stopping = true;
                }
                EV_LRO_TIMER => {
                    let _ = self.lro_timer.wait();
                    self.stats.lro_timer_fires += 1;
                    self.lro_armed = None;
                    self.lro_expire();
                }
                EV_DDTAP => self.tap_input(PORT_DDSTACK),
                EV_ADMIN => self.admin_accept(),
                _ => {
                    let dom = (tok & 0xffff) as u16;
                    match tok & !0xffff {
                        EV_GUEST_CTL => self.guest_ctl(dom)?,
                        EV_EVTCHN => self.vif_event(dom),
                        EV_ATTACH => self.attach_accept(dom)?,
                        EV_ADMIN_CONN => self.admin_request(tok),
                        EV_RELAY => self.tap_input(vif_port(DomId(dom))),
                        _ => {}
                    }
                }
            }
        }
        self.serve_tx_more();
        if pnic_ready {
            more_pnic = self.pnic_poll();
        }
        // NAPI: a poll that used its whole budget is rescheduled without sleeping.
        while more_pnic && !self.stopping {
            self.now = now_ns(self.start);
            more_pnic = self.pnic_poll();
            // Serve the guests' events between polls so TX (ACKs) keeps flowing.
            let mut evs = [EpollEvent::empty(); 32];
            if let Ok(k) = self.ep.wait(&mut evs, EpollTimeout::ZERO) {
                for ev in &evs[..k] {
                    let tok = ev.data();
                    if tok & !0xffff == EV_EVTCHN {
                        self.vif_event((tok & 0xffff) as u16);
                    } else if tok == EV_SIGNAL {
                        self.stopping = true;
                    } else if tok == EV_DDTAP {
                        self.tap_input(PORT_DDSTACK);
                    } else if tok & !0xffff == EV_RELAY {
                        self.tap_input(vif_port(DomId((tok & 0xffff) as u16)));
                    } else if tok & !0xffff == EV_GUEST_CTL {
                        self.guest_ctl((tok & 0xffff) as u16)?;
                    } else if tok == EV_ADMIN {
                        self.admin_accept();
                    } else if tok & !0xffff == EV_ADMIN_CONN {
                        self.admin_request(tok);
                    }
                }
            }
            self.serve_tx_more();
        }
        self.lro_expire();
        self.arm_lro_timer();
        self.watch_pnic();
        self.process_store_events();
        if self.now.saturating_sub(self.aged_at) >= AGE_EVERY_NS {
            self.bridge.age(self.now);
            self.aged_at = self.now;
        }
        Ok(())
    }

    /// Flushes what the engine has due now and routes it.
    fn lro_expire(&mut self) {
        let Some(l) = self.lro.as_mut() else { return };
        if l.held() == 0 {
            return;
        }
        let mut out = std::mem::take(&mut self.lro_out);
        l.expire(rdtsc(), &mut out);
        self.route_all(&mut out);
        self.lro_out = out;
        self.flush_vifs();
    }

    /// Arms the timer for the engine's next deadline (one system call only when it changed).
    fn arm_lro_timer(&mut self) {
        let Some(deadline) = self.lro.as_ref().and_then(Lro::next_deadline) else {
            return;
        };
        if self.lro_armed.is_some_and(|a| a <= deadline) {
            return;
        }
        let ticks = deadline.saturating_sub(rdtsc()).max(1);
        let ns = (ticks as u128 * 1000 / self.ticks_per_us as u128).max(1) as i64;
        if self
            .lro_timer
            .set(
                Expiration::OneShot(TimeSpec::from_duration(Duration::from_nanos(ns as u64))),
                TimerSetTimeFlags::empty(),
            )
            .is_ok()
        {
            self.stats.lro_timer_arms += 1;
            self.lro_armed = Some(deadline);
        }
    }

    fn route_all(&mut self, out: &mut Vec<Packet>) {
        for pkt in out.drain(..) {
            self.route(PORT_PNIC, pkt);
        }
    }

    // ------------------------------------------------------------------ data path

    /// Whether the port must wait for a guest whose queue cannot take another poll's worth
    /// of frames (see `pvnet_dd::gate` for how long).
    fn must_wait(&mut self) -> bool {
        let budget = self.cfg.budget;
        let loads = self.vifs.iter().filter_map(|(&dom, v)| {
            v.netback.as_ref().map(|n| GuestLoad {
                dom,
                full: n.rx_queued() + budget > pvnet_dd::netback::RX_QUEUE_LIMIT,
                taken: n.stats.rx_packets,
            })
        });
        match self.gate.check(self.now, loads) {
            Gate::Wait => true,
            Gate::Poll => false,
            Gate::Stalled => {
                self.stats.pnic_stalls += 1;
                false
            }
        }
    }

    /// Watches the physical port again once no guest holds it back. Level-triggered: frames
    /// that came meanwhile are reported at the next wait.
    fn watch_pnic(&mut self) {
        if !self.pnic_watched && !self.must_wait() {
            self.set_pnic_watched(true);
        }
    }

    /// Whether the daemon waits for the physical port (no system call: the port is not in
    /// the epoll set).
    fn set_pnic_watched(&mut self, on: bool) {
        self.pnic_watched = on;
    }

    /// One NAPI poll of the physical port. Returns true when the budget was used up.
    fn pnic_poll(&mut self) -> bool {
        let budget = self.cfg.budget;
        // Back-pressure: don't take frames from the wire while a guest's queue is nearly full;
        // the kernel's ring holds them (and counts its drops). Stop watching the port until
        // that guest's notification (it posted buffers) or its stall: a level-triggered
        // readable socket would otherwise wake us at once, a spin that takes the guest's CPU.
        if self.must_wait() {
            self.stats.pnic_deferred += 1;
            self.flush_vifs();
            if self.pnic_watched {
                self.set_pnic_watched(false);
            }
            return false;
        }
        let Some(pnic) = self.pnic.as_mut() else {
            return false;
        };
        let n = if let Some(l) = self.lro.as_mut() {
            // The engine sees every frame of the poll, then the end of the poll: its policy
            // decides what leaves now and what waits for more segments.
            let mut out = std::mem::take(&mut self.lro_out);
            let n = pnic.poll(budget, |f| {
                if !f.truncated {
                    // Each segment's own arrival time: flush latency counts from it. The frame
                    // stays in its ring slot (a lease) until it has been copied to the guest.
                    let vnet = f.vnet;
                    l.receive(f.take(), vnet, rdtsc(), &mut out);
                }
            });
            l.end_poll(n, rdtsc(), &mut out);
            self.route_all(&mut out);
            self.lro_out = out;
            n
        } else {
            let mut pending = std::mem::take(&mut self.pending);
            let n = pnic.poll(budget, |f| {
                if !f.truncated {
                    let vnet = f.vnet;
                    pending.push((PORT_PNIC, Packet::linear(vnet, f.take())));
                }
            });
            for (port, pkt) in pending.drain(..) {
                self.route(port, pkt);
            }
            self.pending = pending;
            n
        };
        self.stats.polls += 1;
        self.stats.frames += n as u64;
        if n == budget {
            self.stats.polls_full_budget += 1;
        }
        self.flush_vifs();
        // A guest that has not taken its packets for most of a ring's worth of frames would
        // soon have the kernel stop at their slots and drop everything behind them.
        if self.pnic.as_mut().is_some_and(Pnic::lease_aging) {
            self.stats.aging_detaches += 1;
            self.stats.aging_detached += self.detach_all_leases() as u64;
        }
        n == budget
    }

    /// Bridges one packet from `ingress`.
    fn route(&mut self, ingress: PortId, mut pkt: Packet) {
        let (Some(dst), Some(src)) = (pkt.dst_mac(), pkt.src_mac()) else {
            self.stats.bridge_drops += 1;
            return;
        };
        // The 2006 backend takes only linear skbs or page fragments: the baseline bridge copies
        // an skb-mode chain into one buffer (seed 000, Fig. 2(b)). BO forwards the chain and
        // netback grant-copies each piece into the guest's pages.
        if pkt.is_chained() {
            if pkt.chain == Chain::FragList && !self.cfg.bo {
                self.stats.linearized_bytes += pkt.linearize() as u64;
            } else {
                self.stats.chains_forwarded += 1;
            }
        }
        match self
            .bridge
            .input(ingress, MacAddr(src), MacAddr(dst), self.now)
        {
            Decision::Forward(p) => self.deliver(p, pkt),
            Decision::Flood => {
                let ports: Vec<PortId> = self.bridge.ports().filter(|p| *p != ingress).collect();
                let last = ports.len().saturating_sub(1);
                for (k, p) in ports.into_iter().enumerate() {
                    if k == last {
                        self.deliver(p, pkt);
                        break;
                    }
                    self.stats.flooded_copies += 1;
                    self.deliver(p, pkt.clone());
                }
            }
            Decision::Drop(_) => self.stats.bridge_drops += 1,
        }
    }

    fn deliver(&mut self, port: PortId, pkt: Packet) {
        if port != PORT_PNIC && port != PORT_DDSTACK {
            let dom = port.0 - 1;
            if let Some(r) = self.relays.get_mut(&dom) {
                r.push(pkt);
                return;
            }
            if let Some(nb) = self.vifs.get_mut(&dom).and_then(|v| {
                v.dirty = true;
                v.netback.as_mut()
            }) {
                nb.rx_enqueue(pkt);
            }
            return;
        }
        // A linear packet (every packet until aggregation builds chains) goes out without
        // collecting its pieces into an allocated list.
        let head = [pkt.head.as_slice()];
        let chain: Vec<&[u8]>;
        let pieces: &[&[u8]] = if pkt.is_chained() {
            chain = pkt.pieces().collect();
            &chain
        } else {
            &head
        };
        if port == PORT_PNIC {
            if let Some(p) = self.pnic.as_ref() {
                if p.send(&pkt.vnet, pieces).is_err() {
                    self.stats.pnic_send_errors += 1;
                }
            }
        } else if let Some(t) = self.ddtap.as_ref() {
            let h = pkt.vnet.to_bytes();
            let res = if let [one] = pieces {
                t.writev(&[IoSlice::new(&h), IoSlice::new(one)])
            } else {
                let mut iov = vec![IoSlice::new(&h)];
                iov.extend(pieces.iter().map(|p| IoSlice::new(p)));
                t.writev(&iov)
            };
            match res {
                Ok(_) => self.stats.ddtap_tx += 1,
                Err(_) => self.stats.ddtap_errors += 1,
            }
        }
    }

    /// Moves queued packets into the guests whose queues got new packets.
    fn flush_vifs(&mut self) {
        // Vec::new does not allocate: only a disconnect (rare) pays for one.
        let mut failed = Vec::new();
        for (d, v) in self.vifs.iter_mut().filter(|(_, v)| v.dirty) {
            v.dirty = false;
            if let Some(Err(f)) = v.netback.as_mut().map(Netback::rx_flush) {
                failed.push((*d, f));
            }
        }
        for r in self.relays.values_mut() {
            r.flush();
        }
        for (d, f) in failed {
            self.disconnect(d, f);
        }
    }

    /// An event from a guest: TX requests, or RX buffers posted.
    fn vif_event(&mut self, dom: u16) {
        if let Some(nb) = self.vifs.get(&dom).and_then(|v| v.netback.as_ref()) {
            nb.evtchn().consume();
        }
        self.vif_poll(dom);
    }

    /// Polls again the vifs whose last TX poll used its whole budget.
    fn serve_tx_more(&mut self) {
        // Collecting nothing allocates nothing: the common case costs one pass over the vifs.
        let doms: Vec<u16> = (self.vifs.iter())
            .filter(|(_, v)| v.tx_more)
            .map(|(&d, _)| d)
            .collect();
        for dom in doms {
            self.stats.tx_repolls += 1;
            self.vif_poll(dom);
        }
    }

    /// One poll of a vif: at most a budget of TX packets, then what its RX queue can take.
    fn vif_poll(&mut self, dom: u16) {
        let tx_budget = self.cfg.budget * 4;
        let mut out = std::mem::take(&mut self.pending);
        let res = {
            let Some(v) = self.vifs.get_mut(&dom) else {
                return;
            };
            v.tx_more = false;
            let Some(nb) = v.netback.as_mut() else { return };
            let r = nb.tx_poll(tx_budget, |p| out.push((vif_port(DomId(dom)), p)));
            v.tx_more = r.as_ref().is_ok_and(|&n| n >= tx_budget);
            r.and_then(|_| nb.rx_flush())
        };
        for (port, pkt) in out.drain(..) {
            self.route(port, pkt);
        }
        self.pending = out;
        if let Err(f) = res {
            self.disconnect(dom, f);
        }
        self.flush_vifs();
        // Packets still waiting for this guest's buffers: the guest's notification re-arms us.
    }

    /// Frames from a TAP the daemon serves: the driver domain's stack (`PORT_DDSTACK`) or a
    /// relayed guest (its vif port).
    fn tap_input(&mut self, port: PortId) {
        let mut buf = std::mem::take(&mut self.ddtap_buf);
        buf.resize(65536 + VNET_HDR_LEN, 0);
        for _ in 0..64 {
            let (tap, rx, errors) = if port == PORT_DDSTACK {
                match self.ddtap.as_ref() {
                    Some(t) => (t, &mut self.stats.ddtap_rx, &mut self.stats.ddtap_errors),
                    None => break,
                }
            } else {
                match self.relays.get_mut(&(port.0 - 1)) {
                    Some(r) => {
                        let (t, s) = r.tap_and_stats();
                        (t, &mut s.from_guest, &mut s.from_guest_errors)
                    }
                    None => break,
                }
            };
            let n = match tap.readv(&mut [IoSliceMut::new(&mut buf)]) {
                Ok(n) => n,
                Err(_) => break,
            };
            if n < VNET_HDR_LEN + 14 {
                *errors += 1;
                continue;
            }
            *rx += 1;
            let vh = VirtioNetHdr::parse(&buf).expect("10 bytes");
            let pkt = Packet::linear(vh, buf[VNET_HDR_LEN..n].to_vec());
            self.route(port, pkt);
        }
        self.ddtap_buf = buf;
        self.flush_vifs();
    }

    /// Takes a vif offline after a protocol violation: its rings are never touched again, the
    /// backend state goes to Closing, the event channel is unwatched. Other vifs don't notice.
    fn disconnect(&mut self, dom: u16, f: Fatal) {
        let Some(v) = self.vifs.get_mut(&dom) else {
            return;
        };
        if let Some(nb) = v.netback.take() {
            let _ = self.ep.delete(nb.evtchn().wait_fd());
            v.stats = nb.stats.clone();
        }
        v.fatal = Some(f);
        v.state = VifState::Disconnected;
        self.gate.remove(dom);
        eprintln!("pvnet: vif {dom} disconnected: {}", f.name());
        let be = v.backend_path();
        let _ = self.store.write(
            DomId::DRIVER,
            &format!("{be}/{}", keys::STATE),
            &XenbusState::Closing.as_value(),
        );
    }

    // ------------------------------------------------------------------ control path

    fn guest_ctl(&mut self, dom: u16) -> Result<()> {
        loop {
            let Some(v) = self.vifs.get_mut(&dom) else {
                return Ok(());
            };
            let Some(sock) = v.ctl.as_ref() else {
                return Ok(());
            };
            let msg = match ctl::try_recv::<FromGuest>(sock.as_fd()) {
                Ok(Some((m, _fds))) => m,
                Ok(None) => {
                    // The guest went away (exit, crash, or a hostile frontend closing).
                    let _ = self.ep.delete(sock.as_fd());
                    v.ctl = None;
                    self.guest_gone(dom);
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => {
                    eprintln!("pvnet: guest {dom} control message: {e}");
                    let _ = self.ep.delete(sock.as_fd());
                    v.ctl = None;
                    self.guest_gone(dom);
                    return Ok(());
                }
            };
            match msg {
                FromGuest::Xs(req) => {
                    let reply = self.store.handle(DomId(dom), req);
                    let sock = self.vifs[&dom].ctl.as_ref().expect("ctl").as_fd();
                    let _ = ctl::send(sock, &ToGuest::Xs(reply), &[]);
                    self.process_store_events();
                }
                FromGuest::Ready => self.vifs.get_mut(&dom).expect("vif").ready = true,
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
        if let Some(nb) = v.netback.take() {
            let _ = self.ep.delete(nb.evtchn().wait_fd());
            v.stats = nb.stats.clone();
        }
        if v.state != VifState::Disconnected {
            v.state = VifState::Closed;
        }
        self.store.remove_watches_of(DomId(dom));
        let be = v.backend_path();
        let _ = self.store.write(
            DomId::DRIVER,
            &format!("{be}/{}", keys::STATE),
            &XenbusState::Closed.as_value(),
        );
    }

    /// Delivers watch events: guests' watches go to the guest; our own drive netback.
    fn process_store_events(&mut self) {
        for ev in self.store.take_events() {
            if ev.owner == DomId::DRIVER {
                if let Some(d) = ev
                    .token
                    .strip_prefix("fe:")
                    .and_then(|d| d.parse::<u16>().ok())
                {
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

    /// netback's `frontend_changed`: connect when the frontend says Connected.
    fn frontend_changed(&mut self, dom: u16) {
        let Some(v) = self.vifs.get(&dom) else { return };
        let dev = v.device_path();
        let rd = |s: &Store, k: &str| s.read(DomId::DRIVER, &format!("{dev}/{k}")).ok().flatten();
        let state = rd(&self.store, keys::STATE).and_then(|s| XenbusState::from_str_value(&s));
        match state {
            Some(XenbusState::Connected) if v.netback.is_none() && v.state == VifState::Waiting => {
                if let Err(e) = self.connect_vif(dom) {
                    eprintln!("pvnet: vif {dom} connect failed: {e:#}");
                    let v = self.vifs.get_mut(&dom).expect("vif");
                    v.state = VifState::Closed;
                    let be = v.backend_path();
                    let _ = self.store.write(
                        DomId::DRIVER,
                        &format!("{be}/{}", keys::STATE),
                        &XenbusState::Closing.as_value(),
                    );
                }
            }
            Some(XenbusState::Closing) | Some(XenbusState::Closed) => self.guest_gone(dom),
            _ => {}
        }
    }

    /// Reads the frontend's keys (untrusted strings), maps its rings and binds its channel.
    fn connect_vif(&mut self, dom: u16) -> Result<()> {
        let v = self.vifs.get_mut(&dom).expect("vif");
        let dev = v.device_path();
        let st = &self.store;
        let rd = |k: &str| -> Result<String> {
            st.read(DomId::DRIVER, &format!("{dev}/{k}"))?
                .ok_or_else(|| anyhow!("frontend did not write {k}"))
        };
        let num = |k: &str| -> Result<u32> {
            let s = rd(k)?;
            s.trim()
                .parse::<u32>()
                .map_err(|_| anyhow!("frontend's {k} is not a number: {s:?}"))
        };
        let flag = |k: &str| {
            st.read(DomId::DRIVER, &format!("{dev}/{k}"))
                .ok()
                .flatten()
                .as_deref()
                == Some("1")
        };
        let tx_ref = num(keys::TX_RING_REF)?;
        let rx_ref = num(keys::RX_RING_REF)?;
        let port = num(keys::EVENT_CHANNEL)?;
        if port != VIF_PORT {
            bail!("frontend named event channel {port}, which is not bound to it");
        }
        if !flag(keys::REQUEST_RX_COPY) {
            bail!("frontend did not request rx-copy (page flipping is not offered)");
        }
        let features = Features {
            sg: flag(keys::FEATURE_SG),
            gso_tcpv4: flag(keys::FEATURE_GSO_TCPV4),
            gso_tcpv6: flag(keys::FEATURE_GSO_TCPV6),
            rx_notify: flag(keys::FEATURE_RX_NOTIFY),
        };
        let evt = v
            .evtchn_back
            .take()
            .ok_or_else(|| anyhow!("event channel already bound"))?;
        let nb = match Netback::connect(
            self.hv.clone(),
            DomId(dom),
            GrantRef(tx_ref),
            GrantRef(rx_ref),
            evt,
            features,
        ) {
            Ok(nb) => nb,
            Err(st) => bail!("mapping the frontend's rings failed: {st:?}"),
        };
        self.ep.add(
            nb.evtchn().wait_fd(),
            EpollEvent::new(EpollFlags::EPOLLIN, EV_EVTCHN | dom as u64),
        )?;
        v.netback = Some(nb);
        v.state = VifState::Connected;
        let mac = v.mac;
        let be = v.backend_path();
        self.bridge.set_static(MacAddr(mac), vif_port(DomId(dom)));
        self.store.write(
            DomId::DRIVER,
            &format!("{be}/{}", keys::STATE),
            &XenbusState::Connected.as_value(),
        )?;
        Ok(())
    }

    fn attach_accept(&mut self, dom: u16) -> Result<()> {
        let Some(v) = self.vifs.get_mut(&dom) else {
            return Ok(());
        };
        let Some((l, _)) = v.attach_listener.as_ref() else {
            return Ok(());
        };
        let conn = match accept(l.as_fd()) {
            Ok(c) => c,
            Err(_) => return Ok(()),
        };
        if let Some(end) = v.attach_end.take() {
            // Hand the guest's end of the control socket to the external frontend.
            ctl::send(conn.as_fd(), &"attach", &[end.as_fd()])?;
        }
        Ok(())
    }

    fn admin_accept(&mut self) {
        while let Ok(c) = accept(self.admin.as_fd()) {
            let tok = EV_ADMIN_CONN | (self.next_conn & 0xffff);
            self.next_conn += 1;
            if self
                .ep
                .add(c.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, tok))
                .is_ok()
            {
                self.admin_conns.insert(tok, c);
            }
        }
    }

    fn admin_request(&mut self, tok: u64) {
        let Some(c) = self.admin_conns.get(&tok) else {
            return;
        };
        let req = match ctl::try_recv::<AdminRequest>(c.as_fd()) {
            Ok(Some((r, _))) => r,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            _ => {
                let c = self.admin_conns.remove(&tok).expect("present");
                let _ = self.ep.delete(c.as_fd());
                return;
            }
        };
        let reply = match req {
            AdminRequest::Stat => self.stat_json(),
            AdminRequest::Down => {
                self.stopping = true;
                json!({"ok": true})
            }
            AdminRequest::Set(r) => match self.apply_set(&r) {
                Ok(()) => json!({"ok": true, "settings": self.settings_json()}),
                Err(e) => json!({"ok": false, "error": format!("{e:#}")}),
            },
        };
        let c = self.admin_conns.get(&tok).expect("present");
        let _ = ctl::send(c.as_fd(), &reply, &[]);
    }

    /// `pvnet set`: validates the whole request before changing anything.
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
        let policy = match r.lro.as_deref() {
            None => None,
            Some("off") => Some(None),
            Some(s) => Some(Some(
                s.parse::<lro::Policy>()
                    .map_err(|e| anyhow!("--lro {s:?}: {e}"))?,
            )),
        };
        let now = rdtsc();
        let mut out = std::mem::take(&mut self.lro_out);
        if let Some(m) = r.mode {
            self.lro_mode = m;
            if let Some(l) = self.lro.as_mut() {
                l.set_mode(m, now, &mut out);
            }
        }
        match policy {
            None => {}
            Some(None) => {
                if let Some(mut l) = self.lro.take() {
                    l.flush_all(now, &mut out);
                }
            }
            Some(Some(p)) => match self.lro.as_mut() {
                Some(l) => l.set_policy(p),
                None => {
                    self.lro = Some(Lro::new(lro::Config {
                        mode: self.lro_mode,
                        policy: p,
                        ticks_per_us: self.ticks_per_us,
                        ..lro::Config::default()
                    }))
                }
            },
        }
        if let Some(b) = r.bo {
            self.cfg.bo = b;
        }
        self.cfg.lro = self.lro.as_ref().map(|l| LroSettings {
            policy: l.config().policy,
            mode: l.config().mode,
        });
        self.route_all(&mut out);
        self.lro_out = out;
        self.flush_vifs();
        self.lro_armed = None;
        self.arm_lro_timer();
        Ok(())
    }

    fn settings_json(&self) -> serde_json::Value {
        json!({
            "port": self.testbed.dd_if,
            "lro": self.lro.as_ref().map(|l| l.config().policy.to_string()).unwrap_or_else(|| "off".into()),
            "mode": self.lro_mode,
            "bo": self.cfg.bo,
        })
    }

    pub fn stat_json(&mut self) -> serde_json::Value {
        let pnic = self.pnic.as_mut().map(|p| {
            let s = p.stats();
            json!({
                "ring_frames": p.frame_nr(), "ring_frame_size": p.frame_size(), "budget": self.cfg.budget,
                "rx_frames": s.rx_frames, "rx_bytes": s.rx_bytes, "rx_truncated": s.rx_truncated,
                "rx_bad": s.rx_bad, "rx_csum_not_ready": s.rx_csum_not_ready,
                "rx_leased": s.rx_leased, "rx_lease_copies": s.rx_lease_copies,
                "rx_leases_outstanding": s.rx_leases_outstanding,
                "tx_frames": s.tx_frames, "tx_bytes": s.tx_bytes, "tx_would_block": s.tx_would_block,
                "tx_errors": s.tx_errors, "kernel_packets": s.tp_packets, "kernel_drops": s.tp_drops,
            })
        });
        let b = self.bridge.stats();
        let vifs: Vec<serde_json::Value> = self
            .vifs
            .values()
            .map(|v| {
                json!({
                    "domid": v.domid.0,
                    "mac": format_mac(&v.mac),
                    "state": v.state,
                    "fatal": v.fatal.map(|f| f.name()),
                    "netback": v.live_stats(),
                    "netfront": v.front_stats,
                })
            })
            .collect();
        json!({
            "id": self.cfg.id,
            "mode": self.cfg.mode,
            "uptime_s": self.start.elapsed().as_secs_f64(),
            "daemon": self.stats,
            "pnic": pnic,
            "bridge": b,
            "settings": self.settings_json(),
            "lro": self.lro.as_ref().map(Lro::stats),
            "grant": self.hv.stats(),
            "vifs": vifs,
            "relay": (self.cfg.mode == Mode::Relay).then(|| {
                self.relays.iter().map(|(d, r)| json!({
                    "domid": d, "mac": format_mac(&r.mac), "stats": r.stats,
                })).collect::<Vec<_>>()
            }),
        })
    }

    /// Stops guests and removes everything the run created.
    pub fn shutdown(&mut self) {
        // What the engine still holds goes to the guests before they stop.
        if let Some(mut l) = self.lro.take() {
            let mut out = std::mem::take(&mut self.lro_out);
            l.flush_all(rdtsc(), &mut out);
            self.route_all(&mut out);
            self.flush_vifs();
        }
        for v in self.vifs.values() {
            if let Some(s) = v.ctl.as_ref() {
                let _ = ctl::send(s.as_fd(), &ToGuest::Shutdown, &[]);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(2);
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
        self.relays.clear();
        self.pnic = None;
        self.ddtap = None;
        if let Err(e) = self.testbed.teardown() {
            eprintln!("pvnet: teardown: {e:#}");
        }
        let _ = std::fs::remove_dir_all(rundir::run_dir(&self.cfg.id));
    }
}

/// Sends one admin request to a running daemon and returns its answer.
pub fn admin_call(id: &str, req: &AdminRequest) -> Result<serde_json::Value> {
    let path = rundir::ctl_path(id);
    let fd = socket::socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    socket::connect(fd.as_raw_fd(), &UnixAddr::new(&path)?)
        .with_context(|| format!("connecting to the pvnet daemon at {}", path.display()))?;
    ctl::send(fd.as_fd(), req, &[])?;
    match ctl::recv::<serde_json::Value>(fd.as_fd())? {
        Some((v, _)) => Ok(v),
        None => bail!("the daemon closed the connection without answering"),
    }
}
