//! The driver domain's data path: the physical port, receive aggregation, the bridge, the
//! netbacks and the TAPs the driver domain serves, joined into the body of one event loop.
//!
//! It owns no event loop, descriptor set or process: the daemon (the toolstack's side, in the
//! `pvnet` command) waits for events and calls in. What it needs of the world sits behind two
//! small traits, as smoltcp's `phy::Device` does:
//! - [`Phy`], the physical port: a NAPI-style budgeted poll, a send, and the lease checks of a
//!   packet ring whose slots are handed to the data path ([`pvnet_pnic::Pnic`] implements it;
//!   the `mock` feature's `MockPhy` is a queue of frames);
//! - [`Clock`], time: nanoseconds for the bridge's ageing and the port's back-pressure gate,
//!   TSC ticks for the aggregation engine's deadlines and flush latency.
//!
//! TAP-like ports (the driver domain's own stack, and the guests of mode relay) are
//! [`TapPort`]s, and guests are [`Netback`]s the toolstack connects and hands over
//! ([`DataPath::connect_vif`]).
//!
//! Bridge ports: [`PORT_PNIC`] (0) is the physical port, [`PORT_DDSTACK`] (1) the driver
//! domain's own stack, `1 + domid` ([`vif_port`]) the vif of that guest.
//!
//! A vif that breaks the protocol is taken off the data path at once (its rings are never
//! touched again) and waits in [`DataPath::take_failed`] for the toolstack, which closes it in
//! the store and stops watching its event channel. Other vifs don't notice.

use std::collections::{BTreeMap, VecDeque};
use std::io;

use pvnet_pnic::{Buf, Pnic};
use pvnet_wire::ethernet::MacAddr;
use pvnet_wire::vnet::{VirtioNetHdr, VNET_HDR_LEN};
use serde::Serialize;

use crate::bridge::{BridgeConfig, Decision, PortId};
use crate::capture::{CaptureSummary, Captures, Dir};
use crate::gate::{Gate, GuestLoad, PortGate};
use crate::lro::{self, LroStats};
use crate::netback::{Direct, Fatal, Mechanism, Netback, Refusal, RxDirect, VifStats};
use crate::packet::{Chain, Packet};
use crate::portvnet::{self, PortVnetStats};
use crate::route::RouteError;
use crate::switch::{Switch, SwitchStats};

/// The physical port's bridge port.
pub const PORT_PNIC: PortId = PortId(0);
/// The driver domain's own stack (a TAP in its namespace).
pub const PORT_DDSTACK: PortId = PortId(1);

/// The bridge port of guest `dom`'s vif (or relayed TAP).
pub fn vif_port(dom: u16) -> PortId {
    PortId(1 + dom)
}

/// Frames read from one TAP per [`DataPath::tap_input`] (then the loop serves others).
pub const TAP_READS_PER_CALL: usize = 64;

/// How often the bridge's table is swept for expired entries (its ageing time is minutes).
const AGE_EVERY_NS: u64 = 1_000_000_000;

/// The physical port, as the data path uses it.
pub trait Phy {
    /// One NAPI poll: hands at most `budget` received frames (their `virtio_net_hdr` and
    /// bytes) to `rx`, in order. Returns how many frames the poll took (`budget` means more
    /// may be waiting). A port may take frames it does not hand over (truncated ones, counted
    /// by the port).
    fn poll(&mut self, budget: usize, rx: impl FnMut(VirtioNetHdr, Buf)) -> usize;
    /// [`Phy::poll`], with each frame's receive time when the port knows it (nanoseconds on
    /// the clock of [`Clock::realtime_ns`]). Ports without receive times hand over `None`.
    fn poll_stamped(
        &mut self,
        budget: usize,
        mut rx: impl FnMut(VirtioNetHdr, Buf, Option<u64>),
    ) -> usize {
        self.poll(budget, |vnet, buf| rx(vnet, buf, None))
    }
    /// Receive queues the port sorts its frames into ([`pvnet_pnic::PnicConfig::queues`]); a
    /// port with one ring has one. [`Phy::poll`] serves them all.
    fn queues(&self) -> usize {
        1
    }
    /// [`Phy::poll_stamped`] of receive queue `q` alone (`q` below [`Phy::queues`]): what the
    /// aggregation engine of that queue sees. A port with one queue polls it.
    fn poll_queue_stamped(
        &mut self,
        q: usize,
        budget: usize,
        rx: impl FnMut(VirtioNetHdr, Buf, Option<u64>),
    ) -> usize {
        debug_assert_eq!(q, 0);
        self.poll_stamped(budget, rx)
    }
    /// The receive queue a frame for destination `mac` lands in (the port's choice).
    fn queue_of(&self, _mac: &[u8; 6]) -> usize {
        0
    }
    /// Stops serving the receive queues whose bits are set in `mask` and serves the others
    /// ([`pvnet_pnic::Pnic::pause_queues`]): the polls skip them and so does
    /// [`Phy::rx_ready`]. A port with one queue ignores it: the data path stops polling instead.
    fn pause_queues(&mut self, _mask: u32) {}
    /// The queues [`Phy::pause_queues`] stopped.
    fn paused_queues(&self) -> u32 {
        0
    }
    /// Sends one frame made of `pieces`, or says why the port did not take it.
    fn send(&mut self, vnet: &VirtioNetHdr, pieces: &[&[u8]]) -> Result<(), TxRefused>;
    /// Whether a poll would find a frame now (no system call).
    fn rx_ready(&self) -> bool;
    /// Whether buffers still leased from the port would get in the way of a sleep on it (see
    /// [`pvnet_pnic::Pnic::lease_in_the_way`]). Ports that lease nothing say no.
    fn lease_in_the_way(&self) -> bool {
        false
    }
    /// Whether the oldest lease still out is close to being reached by the port's producer
    /// (see [`pvnet_pnic::Pnic::lease_aging`]).
    fn lease_aging(&mut self) -> bool {
        false
    }
}

/// Sends `pkt` out of `phy`. A linear packet (every packet until aggregation builds chains)
/// goes out without collecting its pieces into an allocated list.
fn phy_send<P: Phy>(phy: &mut P, pkt: &Packet) -> Result<(), TxRefused> {
    if pkt.is_chained() {
        let pieces: Vec<&[u8]> = pkt.pieces().collect();
        phy.send(&pkt.vnet, &pieces)
    } else {
        phy.send(&pkt.vnet, &[pkt.head.as_slice()])
    }
}

/// Why the physical port did not take a frame ([`Phy::send`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxRefused {
    /// Its send buffer is full: the frame waits until the port is writable again
    /// ([`DataPath::tx_backlog_wait`]).
    Full,
    /// The device's queue dropped it: the frame waits and is tried again shortly.
    Busy,
    /// Refused for good (an inconsistent header, too long for the MTU, the interface down):
    /// dropped and counted (`pnic_send_errors`).
    Failed,
}

/// Frames the physical port refused for now that the data path keeps, in order, until it takes
/// them ([`DataPath::tx_drain`]). Guests' TX is not polled meanwhile, so what waits is at most
/// one poll's packets plus what the TAP ports bring; beyond this, frames are dropped and
/// counted (`pnic_tx_backlog_drops`).
pub const TX_BACKLOG_MAX: usize = 1024;

/// How long frames may wait for a physical port that takes none of them (ns): a port whose
/// device stays full, or whose link is down, then has its waiting frames dropped and counted
/// (`pnic_tx_backlog_drops`, `pnic_tx_backlog_timeouts`), so that the guests' TX, which waits
/// with them, goes on. A watchdog, as a NIC driver's on a queue that stopped.
pub const TX_BACKLOG_TIMEOUT_NS: u64 = 100_000_000;

impl Phy for Pnic {
    fn poll(&mut self, budget: usize, rx: impl FnMut(VirtioNetHdr, Buf)) -> usize {
        // A truncated frame is counted by the port (`rx_truncated`) and lost. In frame mode
        // the frames arrive in the driver domain's machine frames (crate::frameport).
        Pnic::poll_bufs(self, budget, rx)
    }

    fn poll_stamped(
        &mut self,
        budget: usize,
        rx: impl FnMut(VirtioNetHdr, Buf, Option<u64>),
    ) -> usize {
        Pnic::poll_stamped(self, budget, rx)
    }

    fn queues(&self) -> usize {
        Pnic::queue_count(self)
    }

    fn poll_queue_stamped(
        &mut self,
        q: usize,
        budget: usize,
        rx: impl FnMut(VirtioNetHdr, Buf, Option<u64>),
    ) -> usize {
        Pnic::poll_queue_stamped(self, q, budget, rx)
    }

    fn queue_of(&self, mac: &[u8; 6]) -> usize {
        Pnic::queue_of(self, mac)
    }

    fn pause_queues(&mut self, mask: u32) {
        Pnic::pause_queues(self, mask)
    }

    fn paused_queues(&self) -> u32 {
        Pnic::paused_queues(self)
    }

    fn send(&mut self, vnet: &VirtioNetHdr, pieces: &[&[u8]]) -> Result<(), TxRefused> {
        Pnic::send(self, vnet, pieces).map_err(|e| match e {
            pvnet_pnic::PnicError::WouldBlock => TxRefused::Full,
            pvnet_pnic::PnicError::DeviceBusy => TxRefused::Busy,
            _ => TxRefused::Failed,
        })
    }

    fn rx_ready(&self) -> bool {
        Pnic::rx_ready(self)
    }

    fn lease_in_the_way(&self) -> bool {
        Pnic::lease_in_the_way(self)
    }

    fn lease_aging(&mut self) -> bool {
        Pnic::lease_aging(self)
    }
}

/// Time, passed in.
pub trait Clock {
    /// Nanoseconds since any fixed origin (the bridge's ageing, the port's gate).
    fn now_ns(&self) -> u64;
    /// The aggregation engine's clock (TSC ticks on the real path).
    fn ticks(&self) -> u64;
    /// Ticks per microsecond of [`Clock::ticks`].
    fn ticks_per_us(&self) -> u64;
    /// The clock of the port's receive times ([`Phy::poll_stamped`]), in ns, read now; `None`
    /// when there is none to compare them with (frames then arrive when the poll sees them).
    fn realtime_ns(&self) -> Option<u64> {
        None
    }
}

/// Turns the port's receive times into the aggregation engine's ticks for one poll: the clock
/// pair read once at its start, each frame's age subtracted. Never earlier than `floor` (the
/// newest arrival of the previous poll) nor later than when the frame was seen, so a step of
/// the wall clock cannot move the engine's time backwards.
struct Arrivals {
    /// `Clock::realtime_ns` and `Clock::ticks` read together, when there is a realtime clock.
    base: Option<(u64, u64)>,
    per_us: u64,
    floor: u64,
}

/// Oldest age a receive time is trusted with (ns): a frame older than this is taken as that old.
const MAX_AGE_NS: u64 = 1_000_000_000;

impl Arrivals {
    fn new(clock: &impl Clock, t0: u64, floor: u64) -> Arrivals {
        Arrivals {
            base: clock.realtime_ns().map(|r| (r, t0)),
            per_us: clock.ticks_per_us().max(1),
            floor: floor.min(t0),
        }
    }

    fn stamped(&self) -> bool {
        self.base.is_some()
    }

    /// Arrival in ticks of a frame stamped `stamp` (ns) and seen at `seen` (ticks).
    fn at(&self, stamp: Option<u64>, seen: u64) -> u64 {
        let (Some(st), Some((r0, t0))) = (stamp, self.base) else {
            return seen;
        };
        let age = r0.saturating_sub(st).min(MAX_AGE_NS);
        t0.saturating_sub(age * self.per_us / 1000)
            .max(self.floor)
            .min(seen)
    }
}

/// A port served through a TAP-like device: the driver domain's own stack, or a relayed guest.
pub trait TapPort {
    /// Hands one packet to the port's stack, now or at the next [`TapPort::flush`].
    fn push(&mut self, pkt: Packet) -> io::Result<()>;
    /// Writes what [`TapPort::push`] queued (called at the end of every pass that delivered).
    fn flush(&mut self) {}
    /// Reads one frame, a `virtio_net_hdr` then the Ethernet frame, into `buf`; `WouldBlock`
    /// when there is none.
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize>;
    /// What `pvnet stat` shows of the port beyond [`TapCounters`].
    fn stats(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
}

/// What crossed a [`TapPort`], counted by the data path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TapCounters {
    /// Frames read from the port, and reads too short to be a frame.
    pub rx: u64,
    pub rx_errors: u64,
    /// Packets handed to the port, and those it refused.
    pub tx: u64,
    pub tx_errors: u64,
}

struct Tap {
    port: Box<dyn TapPort>,
    counters: TapCounters,
}

/// The data path's settings that `pvnet set` can change (the aggregation engine aside).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathConfig {
    /// Frames per poll of the physical port (NAPI's budget).
    pub budget: usize,
    /// Bridge optimization: forward skb-mode aggregates without linearizing them.
    pub bo: bool,
}

/// What the data path did, as `pvnet stat` shows it (under `daemon`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct PathStats {
    pub polls: u64,
    pub polls_full_budget: u64,
    /// Frames from the physical port whose `virtio_net_hdr` the frame did not bear out,
    /// dropped, by reason ([`portvnet`]).
    pub port_refused: PortVnetStats,
    /// Vif polls without an event because the vif's last TX poll used its whole budget.
    pub tx_repolls: u64,
    pub frames: u64,
    /// Polls skipped because a guest's queue was nearly full (the port is then not watched
    /// until that guest takes packets: no spinning on a readable socket).
    pub pnic_deferred: u64,
    /// Guests that held the port back without taking packets and are then not waited for
    /// a while ([`crate::gate`]): their packets are dropped (`rx_queue_full`).
    pub pnic_stalls: u64,
    /// Polls that skipped the receive queues of guests whose queue was nearly full while
    /// serving the others (a receive queue per guest: only those guests wait).
    pub pnic_queues_paused: u64,
    /// Waits that found frames in the port's ring and did not sleep, and sleeps in which the
    /// port woke the daemon (counted by the daemon, which sleeps).
    pub pnic_ring_wakeups: u64,
    pub pnic_woken: u64,
    /// Passes of the daemon's loop: each wait and what it woke for (counted by the daemon).
    /// Idle, a few a second; a descriptor that polls ready for ever would make it millions.
    pub loop_passes: u64,
    /// Buffers still leased from the port's ring copied to the heap before a sleep on the
    /// port (held aggregates, packets waiting for a guest), and the sleeps that needed it
    /// ([`DataPath::before_sleep`]).
    pub leases_detached: u64,
    pub sleeps_detaching: u64,
    /// Of those, the sleeps for which the newest buffers were not enough (everything went).
    pub sleeps_detaching_all: u64,
    /// Polls after which the oldest lease was aging ([`Phy::lease_aging`]), and the leased
    /// buffers then copied to the heap (all of them) so the port would not stop at it.
    pub aging_detaches: u64,
    pub aging_detached: u64,
    pub flooded_copies: u64,
    pub linearized_bytes: u64,
    pub ddtap_rx: u64,
    pub ddtap_tx: u64,
    pub ddtap_errors: u64,
    pub pnic_send_errors: u64,
    /// Frames the physical port refused for now (its send buffer or its device queue full),
    /// kept in order and sent once it took them: back-pressure, not loss. And the most that
    /// waited at once.
    pub pnic_tx_deferred: u64,
    pub pnic_tx_backlog_max: u64,
    /// Frames dropped because [`TX_BACKLOG_MAX`] already waited, or because the port took
    /// none for [`TX_BACKLOG_TIMEOUT_NS`] (those times counted too).
    pub pnic_tx_backlog_drops: u64,
    pub pnic_tx_backlog_timeouts: u64,
    /// Guests' TX polls put off while frames waited for the port.
    pub tx_polls_held: u64,
    pub bridge_drops: u64,
    /// Chained packets the bridge forwarded as chains (BO).
    pub chains_forwarded: u64,
    /// The aggregation timer: times armed, times fired.
    pub lro_timer_arms: u64,
    pub lro_timer_fires: u64,
    /// Timer expiries left to the next poll because frames waited at the port.
    pub lro_timer_deferred: u64,
    /// Where the data path's time goes, by stage ([`StageTimes`]).
    pub stages: StageTimes,
    /// Guest-to-guest frames: delivered in one copy, or why not ([`G2gStats`]).
    pub g2g: G2gStats,
}

/// Frames a guest sent that the switch sent to another guest: how many went in one copy,
/// grant to grant ([`crate::netback::TxHead`]), and why the others did not. Counted only
/// while the direct path is on ([`DataPath::set_g2g_direct`]) and no capture runs; frames
/// whose headers do not parse within the head are counted by the sender's vif
/// (`tx_head_unparsed`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct G2gStats {
    /// Frames delivered straight from the sender's grants into the receiver's buffers.
    pub single_copy_packets: u64,
    /// Their bytes after the headers, copied grant to grant (once).
    pub single_copy_bytes: u64,
    /// Their header bytes, copied out of the sender and into the receiver.
    pub head_bytes: u64,
    /// Frames the switch sent elsewhere than to another guest's vif (the physical port, the
    /// driver domain's stack, a relayed guest): copied out whole, as before.
    pub not_to_guest: u64,
    /// Frames the switch dropped (no payload copied).
    pub switch_drops: u64,
    /// Flooded frames (every port gets its own copy).
    pub flooded: u64,
    /// Frames sent the whole-copy way because an earlier frame of the same poll to the same
    /// guest was, or an earlier frame of the poll was flooded (they must not overtake it).
    pub behind_fallback: u64,
    /// Refusals by the receiver ([`Refusal`]).
    pub receiver_down: u64,
    pub receiver_mechanism: u64,
    pub receiver_queued: u64,
    pub receiver_features: u64,
    pub receiver_no_buffers: u64,
    /// Copies that failed on the sender's side (the sender's vif failed) or on the
    /// receiver's (the receiver's vif failed).
    pub sender_failed: u64,
    pub receiver_failed: u64,
}

impl G2gStats {
    fn refused(&mut self, why: Refusal) {
        *match why {
            Refusal::Down => &mut self.receiver_down,
            Refusal::Mechanism => &mut self.receiver_mechanism,
            Refusal::Queued => &mut self.receiver_queued,
            Refusal::Features => &mut self.receiver_features,
            Refusal::NoBuffers => &mut self.receiver_no_buffers,
        } += 1;
    }
}

/// [`StageTimes`] in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct StageNs {
    pub port: u64,
    pub aggregation: u64,
    pub switching: u64,
    pub egress: u64,
    pub netback: u64,
    /// Switching time per packet switched.
    pub switching_per_packet: f64,
}

/// The data path's time by stage, in [`Clock::ticks`] (TSC ticks on the real path), summed
/// over the run: resolves differences smaller than the noise of a whole stream (a switching
/// mode against another) by timing only the stage that differs. One clock read per stage and
/// batch, plus one per received frame when aggregating (the engine reads one already).
#[derive(Clone, Debug, Default, Serialize)]
pub struct StageTimes {
    /// Taking frames from the physical port (the poll, aggregation excluded).
    pub port_ticks: u64,
    /// The aggregation engine: merging each frame, the end of each poll, timer expiries.
    pub aggregation_ticks: u64,
    /// The switch's decision and carrying it out (bridge or routing lookup, linearizing a
    /// chain, handing the packet to a guest's queue), the sends below excluded.
    pub switching_ticks: u64,
    /// Sending out of the physical port and writing into TAP ports (system calls; a send on
    /// the veth runs the peer's receive path in the daemon's thread).
    pub egress_ticks: u64,
    /// netback: grant copies into the guests (RX flush) and out of them (TX poll).
    pub netback_ticks: u64,
    /// Packets the switching stage handled.
    pub switched_packets: u64,
}

struct Vif {
    netback: Netback,
    /// Its MAC: which of the port's receive queues carries its frames.
    mac: [u8; 6],
    /// Packets were queued for the guest since the last flush.
    dirty: bool,
    /// The last TX poll stopped at its budget with requests left on the ring. The frontend
    /// will not notify for them (the request event index is only re-armed by a poll that
    /// drains the ring), so the vif is polled again without waiting, as NAPI reschedules a
    /// poll that used its whole budget.
    tx_more: bool,
    /// A poll left its TX requests on the ring because the physical port was holding frames
    /// back ([`DataPath::tx_drain`] polls it again once the port has taken them).
    tx_held: bool,
    events: VifEvents,
}

/// How a vif's event channel drove the data path, as `pvnet stat` shows it (`events` of each
/// vif). A guest that floods its event channel gets at most one poll per wake of the daemon
/// (an eventfd collapses any number of notifications into one), and each poll does at most a
/// budget of TX work: the flood shows here, not in the other guests' throughput.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct VifEvents {
    /// Wakes of the daemon by this vif's event channel.
    pub wakes: u64,
    /// Notifications those wakes collected (an eventfd counts them).
    pub notifications: u64,
    /// Polls that found nothing to do: no TX request, no RX buffer that a queued packet
    /// could use (a poll whose TX requests wait for the physical port is not one).
    pub idle_polls: u64,
}

/// The driver domain's data path (see the module documentation).
pub struct DataPath<P: Phy, C: Clock> {
    cfg: PathConfig,
    clock: C,
    phy: Option<P>,
    /// The physical port's aggregation engines, one per receive queue, when aggregation is on.
    lro: Option<lro::Queues>,
    /// The engine's representation, kept while it is off so it can be turned back on.
    lro_mode: lro::Mode,
    /// Cap on the aggregates one guest holds in the engine's table.
    lro_flows_per_dst: usize,
    /// The deadline (ticks) the daemon's timer is armed for.
    lro_armed: Option<u64>,
    /// Packets leaving the engine (reused buffer).
    lro_out: Vec<Packet>,
    /// Per receive queue, the newest arrival its engine was given (ticks): arrivals never go
    /// back before it.
    lro_floor: Vec<u64>,
    /// The receive queue whose engine is served first in the next poll.
    lro_next_queue: usize,
    /// The bridge (with or without its rule pass) or netback MAC routing.
    switch: Switch,
    /// Ports a flooded packet goes to (reused buffer).
    flood: Vec<PortId>,
    /// Whether the physical port is watched (off while a guest's queue is full).
    watched: bool,
    /// Back-pressure from full guests to the port, bounded per guest.
    gate: PortGate,
    vifs: BTreeMap<u16, Vif>,
    /// Vifs taken off the path for a protocol violation, for the toolstack.
    failed: Vec<(u16, Netback, Fatal)>,
    /// TAP-like ports whose device went away, taken off the path, for the daemon.
    gone_taps: Vec<PortId>,
    /// TAP-like ports by bridge port.
    taps: BTreeMap<PortId, Tap>,
    /// `now_ns` of the current pass (read once per pass and per poll, not per frame: the
    /// bridge's learning and ageing need no finer clock).
    now: u64,
    /// When the bridge's table was last aged.
    aged_at: u64,
    /// Packets waiting to be routed (reused buffer).
    pending: Vec<(PortId, Packet)>,
    /// Read buffer of the TAPs (reused).
    tap_buf: Vec<u8>,
    /// Packet captures at bridge ports ([`crate::capture`]); one branch per packet when none.
    capture: Captures,
    /// Guest-to-guest frames go grant to grant ([`DataPath::set_g2g_direct`]).
    g2g_direct: bool,
    /// Frames from a direct poll that take the whole-copy way, with the switch's decision
    /// when it was made (reused buffer).
    decided: Vec<(Packet, Option<Decision>)>,
    /// Frames for the physical port that it has not taken yet, oldest first
    /// ([`TX_BACKLOG_MAX`]), and how the last refusal said to wait.
    tx_backlog: VecDeque<Packet>,
    tx_wait: TxRefused,
    /// When the port last took a frame, or the first one waited (ns, [`TX_BACKLOG_TIMEOUT_NS`]).
    tx_progress_ns: u64,
    pub stats: PathStats,
}

impl<P: Phy, C: Clock> DataPath<P, C> {
    /// A data path with no ports; aggregation per `lro` (None: off, the `xen` baseline) in
    /// representation `lro_mode`.
    pub fn new(
        cfg: PathConfig,
        clock: C,
        lro: Option<lro::Policy>,
        lro_mode: lro::Mode,
    ) -> DataPath<P, C> {
        let mut d = DataPath {
            cfg,
            clock,
            phy: None,
            lro: None,
            lro_mode,
            lro_flows_per_dst: lro::MAX_FLOWS_PER_DST,
            lro_armed: None,
            lro_out: Vec::new(),
            lro_floor: vec![0],
            lro_next_queue: 0,
            switch: Switch::new(crate::switch::Mode::Bridge, BridgeConfig::default()),
            flood: Vec::new(),
            watched: false,
            gate: PortGate::default(),
            vifs: BTreeMap::new(),
            failed: Vec::new(),
            gone_taps: Vec::new(),
            taps: BTreeMap::new(),
            now: 0,
            aged_at: 0,
            pending: Vec::new(),
            tap_buf: Vec::new(),
            capture: Captures::default(),
            g2g_direct: true,
            decided: Vec::new(),
            tx_backlog: VecDeque::new(),
            tx_wait: TxRefused::Full,
            tx_progress_ns: 0,
            stats: PathStats::default(),
        };
        d.lro = lro.map(|p| d.new_engine(p));
        d.now = d.clock.now_ns();
        d.aged_at = d.now;
        d
    }

    /// Aggregation engines of `policy`, one per receive queue of the port (one without a port).
    fn new_engine(&self, policy: lro::Policy) -> lro::Queues {
        let base = lro::Config::default();
        let cfg = lro::Config {
            mode: self.lro_mode,
            policy,
            ticks_per_us: self.clock.ticks_per_us(),
            max_flows_per_dst: self.lro_flows_per_dst.clamp(1, base.max_flows),
            ..base
        };
        lro::Queues::new(cfg, self.phy.as_ref().map_or(1, P::queues))
    }

    /// The data path with at most `n` aggregates held per guest in the shared LRO table
    /// (default [`lro::MAX_FLOWS_PER_DST`]; at least 1, at most the table's size).
    pub fn with_lro_flows_per_guest(mut self, n: usize) -> Self {
        self.lro_flows_per_dst = n;
        if let Some(p) = self.lro.as_ref().map(|l| l.config().policy) {
            self.lro = Some(self.new_engine(p));
        }
        self
    }

    /// The data path with `switch` instead of the learning bridge (before any port is
    /// attached).
    pub fn with_switch(mut self, switch: Switch) -> Self {
        debug_assert!(self.switch.ports().is_empty(), "ports attached already");
        self.switch = switch;
        self
    }

    /// Turns the one-copy guest-to-guest path on (the default) or off. Off, a frame from one
    /// guest to another is copied out of the sender into a driver-domain buffer, switched,
    /// queued and copied into the receiver, as every other frame (two copies).
    pub fn set_g2g_direct(&mut self, on: bool) {
        self.g2g_direct = on;
    }

    /// Whether the one-copy guest-to-guest path is on.
    pub fn g2g_direct(&self) -> bool {
        self.g2g_direct
    }

    // ------------------------------------------------------------------ ports

    /// Attaches the physical port (bridge port [`PORT_PNIC`]) and starts watching it.
    pub fn attach_phy(&mut self, phy: P) -> Result<(), RouteError> {
        self.switch.add_physical(PORT_PNIC)?;
        let queues = phy.queues().max(1);
        self.phy = Some(phy);
        self.watched = true;
        // An aggregation engine per receive queue, each on its queue's timeline.
        self.lro_floor = vec![0; queues];
        self.lro_next_queue = 0;
        if let Some(l) = self.lro.as_mut() {
            let mut out = std::mem::take(&mut self.lro_out);
            l.resize(queues, self.clock.ticks(), &mut out);
            self.route_all(&mut out);
            self.lro_out = out;
        }
        Ok(())
    }

    /// Takes the physical port off the path, as when its NIC has gone: every buffer still
    /// leased from its ring (held aggregates, packets queued for guests) moves to the heap, so
    /// that the ring goes with the port, and the frames waiting for it to send are dropped
    /// with it, as a NIC's queue is (`pnic_tx_backlog_drops`). Guests' frames for the wire
    /// then have no port to go to, until [`DataPath::attach_phy`] attaches another. Returns
    /// the port, or None if there was none.
    pub fn detach_phy(&mut self) -> Option<P> {
        let phy = self.phy.take()?;
        self.detach_all_leases();
        self.stats.pnic_tx_backlog_drops += self.tx_backlog.len() as u64;
        self.tx_backlog.clear();
        for v in self.vifs.values_mut().filter(|v| v.tx_held) {
            v.tx_held = false;
            v.tx_more = true;
        }
        self.switch.remove_port(PORT_PNIC);
        self.watched = false;
        Some(phy)
    }

    pub fn phy(&self) -> Option<&P> {
        self.phy.as_ref()
    }

    pub fn phy_mut(&mut self) -> Option<&mut P> {
        self.phy.as_mut()
    }

    /// Attaches a TAP-like port at bridge port `port` ([`PORT_DDSTACK`], or a relayed guest's
    /// [`vif_port`]) whose stack has the MAC `mac` (what MAC routing routes to it by).
    pub fn attach_tap(
        &mut self,
        port: PortId,
        mac: [u8; 6],
        tap: Box<dyn TapPort>,
    ) -> Result<(), RouteError> {
        if port == PORT_DDSTACK {
            self.switch.add_own(port, MacAddr(mac))?;
        } else {
            self.switch.add_vif(port, MacAddr(mac))?;
        }
        self.taps.insert(
            port,
            Tap {
                port: tap,
                counters: TapCounters::default(),
            },
        );
        Ok(())
    }

    /// Takes TAP-like port `port` off the path and closes it. False when there was none.
    pub fn detach_tap(&mut self, port: PortId) -> bool {
        let had = self.taps.remove(&port).is_some();
        if had {
            self.switch.remove_port(port);
        }
        had
    }

    /// The TAP-like ports whose device went away since the last call: [`DataPath::tap_input`]
    /// read `EBADFD` from them, and took them off the path ([`DataPath::detach_tap`]).
    pub fn take_gone_taps(&mut self) -> Vec<PortId> {
        std::mem::take(&mut self.gone_taps)
    }

    /// Drops every port and vif (before the toolstack tears the testbed down): the physical
    /// port's ring and the TAPs are closed, the netbacks unmap their rings.
    pub fn clear(&mut self) {
        self.phy = None;
        self.watched = false;
        self.tx_backlog.clear();
        self.taps.clear();
        self.vifs.clear();
        self.capture.clear();
    }

    /// The counters and the port's own statistics of TAP port `port`.
    pub fn tap_stats(&self, port: PortId) -> Option<(TapCounters, serde_json::Value)> {
        self.taps.get(&port).map(|t| (t.counters, t.port.stats()))
    }

    /// Ports served by a TAP, in order.
    pub fn tap_ports(&self) -> impl Iterator<Item = PortId> + '_ {
        self.taps.keys().copied()
    }

    /// Adds guest `dom`'s bridge port before its vif connects (frames for it are dropped
    /// until then).
    pub fn add_guest_port(&mut self, dom: u16) {
        self.switch.add_port(vif_port(dom));
    }

    /// Puts a connected vif on the path: its MAC is pinned to its port (the bridge's static
    /// entry; the routing table's vif). False when the switch refused the MAC (routing: a MAC
    /// another port has); the vif is then on the path but gets nothing.
    pub fn connect_vif(&mut self, dom: u16, mac: [u8; 6], netback: Netback) -> bool {
        self.switch.add_port(vif_port(dom));
        let pinned = self.switch.set_static(MacAddr(mac), vif_port(dom));
        self.vifs.insert(
            dom,
            Vif {
                netback,
                mac,
                dirty: false,
                tx_more: false,
                tx_held: false,
                events: VifEvents::default(),
            },
        );
        pinned
    }

    /// Takes vif `dom` off the path (its guest went away) and returns its netback.
    pub fn disconnect_vif(&mut self, dom: u16) -> Option<Netback> {
        self.gate.remove(dom);
        if self.switch.mode() == crate::switch::Mode::Route {
            // The MAC is free again (a reconnecting guest registers it anew).
            self.switch.remove_port(vif_port(dom));
        }
        self.vifs.remove(&dom).map(|v| {
            let mut nb = v.netback;
            nb.unmap_all();
            nb
        })
    }

    /// The vifs the path took off for breaking the protocol since the last call.
    pub fn take_failed(&mut self) -> Vec<(u16, Netback, Fatal)> {
        std::mem::take(&mut self.failed)
    }

    /// A connected vif's counters.
    pub fn vif_stats(&self, dom: u16) -> Option<&VifStats> {
        self.vifs.get(&dom).map(|v| &v.netback.stats)
    }

    /// A connected vif's backend (its event channel, its features).
    pub fn netback(&self, dom: u16) -> Option<&Netback> {
        self.vifs.get(&dom).map(|v| &v.netback)
    }

    /// Starts a capture of bridge port `port` into `sink` (the data path's end of
    /// [`crate::capture::sink_pair`]); `unix_now_ns` is the time now, since the Unix epoch,
    /// which records are stamped relative to.
    pub fn capture_start(&mut self, port: PortId, sink: std::os::fd::OwnedFd, unix_now_ns: u64) {
        let offset = unix_now_ns.wrapping_sub(self.clock.now_ns());
        self.capture.start(port, sink, offset);
    }

    /// The captures' counters (captures whose reader went away are ended first).
    pub fn capture_summary(&mut self) -> CaptureSummary {
        self.capture.reap_closed();
        self.capture.summary()
    }

    /// The switch's counters (and its bridge's, routing table's or filter's).
    pub fn switch_stats(&self) -> SwitchStats {
        self.switch.stats()
    }

    pub fn config(&self) -> PathConfig {
        self.cfg
    }

    /// [`StageTimes`] in nanoseconds, as `pvnet stat` shows them (`stages_ns`).
    pub fn stage_ns(&self) -> StageNs {
        let per_us = self.clock.ticks_per_us().max(1);
        let ns = |t: u64| (t as u128 * 1000 / per_us as u128) as u64;
        let s = &self.stats.stages;
        StageNs {
            port: ns(s.port_ticks),
            aggregation: ns(s.aggregation_ticks),
            switching: ns(s.switching_ticks),
            egress: ns(s.egress_ticks),
            netback: ns(s.netback_ticks),
            switching_per_packet: if s.switched_packets == 0 {
                0.0
            } else {
                ns(s.switching_ticks) as f64 / s.switched_packets as f64
            },
        }
    }

    // ------------------------------------------------------------------ aggregation

    /// The aggregation policy (None: off).
    pub fn lro_policy(&self) -> Option<lro::Policy> {
        self.lro.as_ref().map(|l| l.config().policy)
    }

    /// The aggregates one guest may hold in the running engine's table (None without one).
    pub fn lro_flows_per_guest(&self) -> Option<usize> {
        self.lro.as_ref().map(|l| l.config().max_flows_per_dst)
    }

    pub fn lro_mode(&self) -> lro::Mode {
        self.lro_mode
    }

    /// Aggregates the engine holds now (0 without LRO).
    pub fn lro_held(&self) -> usize {
        self.lro.as_ref().map_or(0, lro::Queues::held)
    }

    pub fn lro_stats(&self) -> Option<LroStats> {
        self.lro.as_ref().map(lro::Queues::stats)
    }

    /// Changes the data path's settings: the aggregation policy (`Some(None)` turns it off,
    /// flushing what it held), its representation, BO. What the engine flushes is delivered.
    pub fn set(
        &mut self,
        policy: Option<Option<lro::Policy>>,
        mode: Option<lro::Mode>,
        bo: Option<bool>,
    ) {
        let now = self.clock.ticks();
        let mut out = std::mem::take(&mut self.lro_out);
        if let Some(m) = mode {
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
                None => self.lro = Some(self.new_engine(p)),
            },
        }
        if let Some(b) = bo {
            self.cfg.bo = b;
        }
        self.route_all(&mut out);
        self.lro_out = out;
        self.flush_vifs();
        self.lro_armed = None;
    }

    /// The aggregation timer fired: flushes what is due, unless frames wait at the port (the
    /// deadlines are arrival times; the poll that comes next may continue the aggregates, and
    /// the end of its pass flushes what is still due).
    pub fn timer_fired(&mut self) {
        self.stats.lro_timer_fires += 1;
        self.lro_armed = None;
        if self.phy.as_ref().is_some_and(|p| p.rx_ready()) {
            self.stats.lro_timer_deferred += 1;
            return;
        }
        self.lro_expire();
    }

    /// The engine's next deadline, in ticks, when the daemon's timer must be armed for it
    /// (it is not armed, or armed for later). The daemon arms it for
    /// `deadline - clock.ticks()` and reports success with [`DataPath::timer_armed`].
    pub fn timer_due(&self) -> Option<u64> {
        let deadline = self.lro.as_ref().and_then(lro::Queues::next_deadline)?;
        match self.lro_armed {
            Some(a) if a <= deadline => None,
            _ => Some(deadline),
        }
    }

    /// How long from now until `deadline` (ticks), at least 1 ns.
    pub fn ticks_until(&self, deadline: u64) -> std::time::Duration {
        let ticks = deadline.saturating_sub(self.clock.ticks()).max(1);
        let ns = (ticks as u128 * 1000 / self.clock.ticks_per_us().max(1) as u128).max(1);
        std::time::Duration::from_nanos(ns.min(u64::MAX as u128) as u64)
    }

    /// The daemon armed its timer for `deadline`.
    pub fn timer_armed(&mut self, deadline: u64) {
        self.stats.lro_timer_arms += 1;
        self.lro_armed = Some(deadline);
    }

    /// Flushes what the engine has due now and routes it.
    fn lro_expire(&mut self) {
        let Some(l) = self.lro.as_mut() else { return };
        if l.held() == 0 {
            return;
        }
        let mut out = std::mem::take(&mut self.lro_out);
        let t = self.clock.ticks();
        l.expire(t, &mut out);
        self.stats.stages.aggregation_ticks += self.clock.ticks().wrapping_sub(t);
        self.route_all(&mut out);
        self.lro_out = out;
        self.flush_vifs();
    }

    /// Everything the engine holds goes out now (before a shutdown).
    pub fn flush_all(&mut self) {
        let Some(l) = self.lro.as_mut() else { return };
        let mut out = std::mem::take(&mut self.lro_out);
        l.flush_all(self.clock.ticks(), &mut out);
        self.route_all(&mut out);
        self.lro_out = out;
        self.flush_vifs();
    }

    // ------------------------------------------------------------------ passes

    /// Starts a pass of the event loop (or a poll within one): reads the clock.
    pub fn tick(&mut self) {
        self.now = self.clock.now_ns();
    }

    /// Ends a pass: flushes what aggregation has due, watches the port again once no guest
    /// holds it back, ages the bridge's table now and then.
    pub fn end_pass(&mut self) {
        self.lro_expire();
        if (!self.watched || self.queues_paused()) && !self.must_wait() {
            self.watched = true;
        }
        if self.now.saturating_sub(self.aged_at) >= AGE_EVERY_NS {
            self.switch.age(self.now);
            self.aged_at = self.now;
        }
    }

    /// Whether the daemon waits for the physical port (no while guests' queues are full).
    pub fn phy_watched(&self) -> bool {
        self.phy.is_some() && self.watched
    }

    /// Whether back-pressure holds some of the port back: the whole port is not watched, or
    /// some of its receive queues are paused. The daemon then wakes in time to end a stall.
    pub fn phy_held(&self) -> bool {
        self.phy.is_some() && (!self.watched || self.queues_paused())
    }

    fn queues_paused(&self) -> bool {
        self.phy.as_ref().is_some_and(|p| p.paused_queues() != 0)
    }

    /// Whether some vif must be polled again without waiting for an event.
    pub fn has_tx_more(&self) -> bool {
        self.vifs.values().any(|v| v.tx_more)
    }

    /// Before the daemon sleeps on the port: copies buffers still leased from its ring to
    /// the heap when a lease is in the port's way ([`Phy::lease_in_the_way`]): a lease on the
    /// newest frame would make the port wake the daemon at once, again and again, and a lease
    /// on the slot the kernel fills next stops the port. The newest frame is the last one an
    /// aggregate or a guest's queue took, so those go first; everything goes when that was
    /// not enough (the kernel has come round to an old lease). Copies are few
    /// (`leases_detached`): most frames leave their slots for a guest's page before the
    /// daemon sleeps. Only a sleep on the port needs this: while the port is not watched,
    /// packets keep their slots.
    pub fn before_sleep(&mut self) {
        if !self.phy_watched() || self.phy.as_ref().is_some_and(P::rx_ready) {
            return;
        }
        let in_the_way = |d: &Self| d.phy.as_ref().is_some_and(P::lease_in_the_way);
        if !in_the_way(self) {
            return;
        }
        self.stats.sleeps_detaching += 1;
        let mut n = self.lro.as_mut().map_or(0, lro::Queues::detach_newest);
        for v in self.vifs.values_mut() {
            n += v.netback.detach_newest();
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
        let mut n = self.lro.as_mut().map_or(0, lro::Queues::detach_held);
        for v in self.vifs.values_mut() {
            n += v.netback.detach_queued();
        }
        n
    }

    /// Back-pressure ([`crate::gate`]): whether the port must wait for a guest whose queue
    /// cannot take another poll's worth of frames, by its packet cap or its memory cap. With
    /// several receive queues only the queues of the guests waited for are paused
    /// ([`Phy::pause_queues`]) and the port waits only when that is every queue; with one, any
    /// guest waited for stops the port.
    fn must_wait(&mut self) -> bool {
        let budget = self.cfg.budget;
        let (vifs, phy) = (&self.vifs, self.phy.as_ref());
        let loads = vifs.iter().map(|(&dom, v)| GuestLoad {
            dom,
            // A poll hands a guest at most `budget` frames of at most its MTU each.
            full: !v
                .netback
                .rx_queue_can_take(budget, budget * v.netback.max_frame()),
            taken: v.netback.stats.rx_packets,
            progress: v.netback.rx_queue_limit() as u64,
        });
        let mut paused = 0u32;
        let stalls = self.gate.stalls();
        let gate = self.gate.check_each(self.now, loads, |dom| {
            let q = match (phy, vifs.get(&dom)) {
                (Some(p), Some(v)) => p.queue_of(&v.mac),
                _ => 0,
            };
            paused |= 1 << q.min(31);
        });
        self.stats.pnic_stalls += self.gate.stalls() - stalls;
        let queues = phy.map_or(1, P::queues);
        if let Some(p) = self.phy.as_mut() {
            p.pause_queues(if queues > 1 { paused } else { 0 });
        }
        // Each bit is a distinct queue below `queues`: all of them paused stops the port.
        let whole = gate == Gate::Wait && paused.count_ones() as usize >= queues;
        if gate == Gate::Wait && !whole {
            self.stats.pnic_queues_paused += 1;
        }
        whole
    }

    /// One NAPI poll of the physical port. Returns true when the budget was used up (poll
    /// again before sleeping).
    pub fn phy_poll(&mut self) -> bool {
        let budget = self.cfg.budget;
        // Back-pressure: don't take frames from the wire while a guest's queue is nearly full;
        // the port's ring holds them (and counts its drops). Stop watching the port until
        // that guest's notification (it posted buffers) or its stall: a level-triggered
        // readable socket would otherwise wake the daemon at once, a spin that takes the
        // guest's CPU.
        if self.must_wait() {
            self.stats.pnic_deferred += 1;
            self.flush_vifs();
            self.watched = false;
            return false;
        }
        let Some(queues) = self.phy.as_ref().map(P::queues) else {
            return false;
        };
        let n = if self.lro.is_some() {
            // Each receive queue's frames go to its own engine, the budget shared between the
            // queues as the port's own poll shares it (pvnet_pnic::poll_in_rounds).
            if self.lro_floor.len() != queues {
                self.lro_floor.resize(queues, 0);
            }
            let mut next = self.lro_next_queue;
            let paused = self.phy.as_ref().map_or(0, P::paused_queues);
            let n = pvnet_pnic::poll_in_rounds(queues, budget, paused, &mut next, |q, want| {
                self.lro_poll_queue(q, want)
            });
            self.lro_next_queue = next;
            n
        } else {
            let Some(phy) = self.phy.as_mut() else {
                return false;
            };
            let t0 = self.clock.ticks();
            let mut pending = std::mem::take(&mut self.pending);
            let refused = &mut self.stats.port_refused;
            let n = phy.poll(budget, |vnet, buf| match portvnet::check(&vnet, &buf) {
                Ok(()) => pending.push((PORT_PNIC, Packet::linear(vnet, buf))),
                Err(r) => refused.count(r),
            });
            self.stats.stages.port_ticks += self.clock.ticks().wrapping_sub(t0);
            self.route_batch(&mut pending);
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
        // soon have the port stop at their slots and drop everything behind them.
        if self.phy.as_mut().is_some_and(P::lease_aging) {
            self.stats.aging_detaches += 1;
            self.stats.aging_detached += self.detach_all_leases() as u64;
        }
        n == budget
    }

    /// One poll of receive queue `q` (at most `want` frames) into that queue's aggregation
    /// engine, then the end of that engine's poll; what leaves it is routed. Returns the frames
    /// taken.
    fn lro_poll_queue(&mut self, q: usize, want: usize) -> usize {
        let (Some(phy), Some(engines)) = (self.phy.as_mut(), self.lro.as_mut()) else {
            return 0;
        };
        let l = engines.queue(q);
        let clock = &self.clock;
        let t0 = clock.ticks();
        // The engine sees every frame of the poll, then the end of the poll: its policy
        // decides what leaves now and what waits for more segments.
        let mut out = std::mem::take(&mut self.lro_out);
        let mut merging = 0;
        let refused = &mut self.stats.port_refused;
        let arrivals = Arrivals::new(clock, t0, self.lro_floor[q]);
        let mut newest = arrivals.floor;
        let n = phy.poll_queue_stamped(q, want, |vnet, buf, stamp| {
            if let Err(r) = portvnet::check(&vnet, &buf) {
                refused.count(r);
                return;
            }
            // Each segment's own arrival time, from the port's receive time when it has
            // one: the engine's gaps and deadlines are the wire's, not the daemon's time
            // off the CPU. Flush latency counts from `seen`. The frame stays in its ring
            // slot (a lease) until it has been copied to the guest.
            let seen = clock.ticks();
            newest = newest.max(arrivals.at(stamp, seen));
            l.set_wall(seen);
            l.receive(buf, vnet, newest, &mut out);
            merging += clock.ticks().wrapping_sub(seen);
        });
        self.lro_floor[q] = newest;
        let t1 = clock.ticks();
        // With frames still waiting in the queue (its share used up) the queue's time is its
        // newest frame's: what is due later may yet be continued by the frames behind it.
        let end = if n == want && arrivals.stamped() {
            newest
        } else {
            t1
        };
        l.set_wall(t1);
        l.end_poll(n, end, &mut out);
        let t2 = clock.ticks();
        let st = &mut self.stats.stages;
        st.port_ticks += t1.wrapping_sub(t0).saturating_sub(merging);
        st.aggregation_ticks += merging + t2.wrapping_sub(t1);
        self.route_all(&mut out);
        self.lro_out = out;
        n
    }

    /// Routes what left the aggregation engine (from the physical port).
    fn route_all(&mut self, out: &mut Vec<Packet>) {
        let (t, e) = (self.clock.ticks(), self.stats.stages.egress_ticks);
        self.stats.stages.switched_packets += out.len() as u64;
        for pkt in out.drain(..) {
            self.route(PORT_PNIC, pkt);
        }
        self.charge_switching(t, e);
    }

    /// Charges the time since `t` to switching, less the sends made meanwhile (egress was
    /// `e` at `t`).
    fn charge_switching(&mut self, t: u64, e: u64) {
        let st = &mut self.stats.stages;
        let sends = st.egress_ticks.wrapping_sub(e);
        st.switching_ticks += self.clock.ticks().wrapping_sub(t).saturating_sub(sends);
    }

    /// Routes a batch of packets, each from its own ingress port.
    fn route_batch(&mut self, batch: &mut Vec<(PortId, Packet)>) {
        let (t, e) = (self.clock.ticks(), self.stats.stages.egress_ticks);
        self.stats.stages.switched_packets += batch.len() as u64;
        for (port, pkt) in batch.drain(..) {
            self.route(port, pkt);
        }
        self.charge_switching(t, e);
    }

    /// Bridges one packet from `ingress`.
    fn route(&mut self, ingress: PortId, mut pkt: Packet) {
        if self.capture.active() {
            let clock = &self.clock;
            (self.capture).record(ingress, Dir::FromPort, &pkt, || clock.now_ns());
        }
        // The 2006 backend takes only linear skbs or page fragments: the baseline bridge copies
        // an skb-mode chain into one buffer (Nakanjima and Oi, Fig. 2(b)). BO forwards the chain
        // and netback grant-copies each piece into the guest's pages.
        if pkt.is_chained() {
            if pkt.chain == Chain::FragList && !self.cfg.bo {
                self.stats.linearized_bytes += pkt.linearize() as u64;
            } else {
                self.stats.chains_forwarded += 1;
            }
        }
        let d = self.switch.input(ingress, &pkt, self.now);
        self.carry_out(ingress, pkt, d);
    }

    /// Carries out the switch's decision `d` on a packet from `ingress`.
    fn carry_out(&mut self, ingress: PortId, pkt: Packet, d: Decision) {
        match d {
            Decision::Forward(p) => self.deliver(p, pkt),
            Decision::Flood => {
                let mut ports = std::mem::take(&mut self.flood);
                self.switch.flood_ports(ingress, &pkt, &mut ports);
                let last = ports.len().saturating_sub(1);
                for (k, &p) in ports.iter().enumerate() {
                    if k == last {
                        self.deliver(p, pkt);
                        break;
                    }
                    self.stats.flooded_copies += 1;
                    self.deliver(p, pkt.clone());
                }
                self.flood = ports;
            }
            Decision::Drop(_) => self.stats.bridge_drops += 1,
        }
    }

    fn deliver(&mut self, port: PortId, pkt: Packet) {
        if self.capture.active() {
            let clock = &self.clock;
            (self.capture).record(port, Dir::ToPort, &pkt, || clock.now_ns());
        }
        if !self.taps.contains_key(&port) && port != PORT_PNIC {
            if let Some(v) = port.0.checked_sub(1).and_then(|d| self.vifs.get_mut(&d)) {
                v.dirty = true;
                v.netback.rx_enqueue(pkt);
            }
            return;
        }
        let t0 = self.clock.ticks();
        self.send(port, pkt);
        self.stats.stages.egress_ticks += self.clock.ticks().wrapping_sub(t0);
    }

    /// Sends a packet out of a TAP port or the physical port (a vif's packets were queued by
    /// [`DataPath::deliver`]).
    fn send(&mut self, port: PortId, pkt: Packet) {
        if let Some(t) = self.taps.get_mut(&port) {
            let is_stack = port == PORT_DDSTACK;
            match t.port.push(pkt) {
                Ok(()) => {
                    t.counters.tx += 1;
                    self.stats.ddtap_tx += u64::from(is_stack);
                }
                Err(_) => {
                    t.counters.tx_errors += 1;
                    self.stats.ddtap_errors += u64::from(is_stack);
                }
            }
            return;
        }
        if port == PORT_PNIC {
            let Some(phy) = self.phy.as_mut() else { return };
            // Frames already waiting go first: a later frame must not overtake them.
            if !self.tx_backlog.is_empty() {
                return self.tx_defer(pkt);
            }
            match phy_send(phy, &pkt) {
                Ok(()) => {}
                Err(TxRefused::Failed) => self.stats.pnic_send_errors += 1,
                Err(why) => {
                    self.tx_wait = why;
                    self.tx_defer(pkt);
                }
            }
        }
    }

    /// Keeps a frame the port did not take, behind those already waiting.
    fn tx_defer(&mut self, pkt: Packet) {
        if self.tx_backlog.len() >= TX_BACKLOG_MAX {
            self.stats.pnic_tx_backlog_drops += 1;
            return;
        }
        if self.tx_backlog.is_empty() {
            self.tx_progress_ns = self.now;
        }
        self.tx_backlog.push_back(pkt);
        self.stats.pnic_tx_deferred += 1;
        let n = self.tx_backlog.len() as u64;
        self.stats.pnic_tx_backlog_max = self.stats.pnic_tx_backlog_max.max(n);
    }

    /// How the daemon waits for the physical port to take the frames it refused: None when
    /// none waits; `Some(true)` until its socket is writable again (its send buffer was full);
    /// `Some(false)` a short while (its device's queue was full, which no readiness reports).
    pub fn tx_backlog_wait(&self) -> Option<bool> {
        (!self.tx_backlog.is_empty()).then_some(self.tx_wait == TxRefused::Full)
    }

    /// Frames waiting for the physical port.
    pub fn tx_backlog_len(&self) -> usize {
        self.tx_backlog.len()
    }

    /// Sends the frames waiting for the physical port, oldest first, until it refuses one
    /// again. Once none waits, the vifs whose TX polls were put off are polled again.
    pub fn tx_drain(&mut self) {
        let Some(phy) = self.phy.as_mut() else {
            self.tx_backlog.clear();
            return;
        };
        while let Some(pkt) = self.tx_backlog.front() {
            match phy_send(phy, pkt) {
                Ok(()) => self.tx_progress_ns = self.now,
                Err(TxRefused::Failed) => self.stats.pnic_send_errors += 1,
                Err(why) => {
                    self.tx_wait = why;
                    if self.now.saturating_sub(self.tx_progress_ns) < TX_BACKLOG_TIMEOUT_NS {
                        return;
                    }
                    self.stats.pnic_tx_backlog_timeouts += 1;
                    self.stats.pnic_tx_backlog_drops += self.tx_backlog.len() as u64;
                    self.tx_backlog.clear();
                    break;
                }
            }
            self.tx_backlog.pop_front();
        }
        for v in self.vifs.values_mut().filter(|v| v.tx_held) {
            v.tx_held = false;
            v.tx_more = true;
        }
    }

    /// Whether a guest's TX poll must wait: frames wait for the physical port. A guest's
    /// requests then stay on its ring (its frontend holds its packets back), as a NIC's full
    /// queue stops the stack above it, instead of being taken and dropped.
    fn tx_held(&self) -> bool {
        !self.tx_backlog.is_empty()
    }

    /// Moves queued packets into the guests whose queues got new packets, and writes what the
    /// TAP ports queued.
    pub fn flush_vifs(&mut self) {
        let mut failed = Vec::new();
        let t = self.clock.ticks();
        for (&d, v) in self.vifs.iter_mut().filter(|(_, v)| v.dirty) {
            v.dirty = false;
            if let Err(f) = v.netback.rx_flush() {
                failed.push((d, f));
            }
        }
        let t1 = self.clock.ticks();
        self.stats.stages.netback_ticks += t1.wrapping_sub(t);
        for t in self.taps.values_mut() {
            t.port.flush();
        }
        self.stats.stages.egress_ticks += self.clock.ticks().wrapping_sub(t1);
        for (d, f) in failed {
            self.fail(d, f);
        }
    }

    /// Takes a vif off the path after a protocol violation.
    fn fail(&mut self, dom: u16, f: Fatal) {
        if let Some(nb) = self.disconnect_vif(dom) {
            self.failed.push((dom, nb, f));
        }
    }

    /// An event from guest `dom`: TX requests, or RX buffers posted.
    /// Returns whether the event was spurious: the poll it caused found nothing to do (what
    /// Xen's late EOI calls a spurious event; the daemon delays the channel's next wake).
    pub fn vif_event(&mut self, dom: u16) -> bool {
        let Some(v) = self.vifs.get_mut(&dom) else {
            return false;
        };
        v.events.wakes += 1;
        v.events.notifications += v.netback.evtchn().consume();
        let idle = v.events.idle_polls;
        self.vif_poll(dom);
        self.vifs
            .get(&dom)
            .is_some_and(|v| v.events.idle_polls > idle)
    }

    /// How long until the first vif whose credit ran out may send again (its requests wait on
    /// its ring; [`DataPath::serve_tx_more`] polls it then).
    pub fn tx_credit_due(&self) -> Option<std::time::Duration> {
        let next = (self.vifs.values())
            .filter_map(|v| v.netback.tx_credit_wait())
            .min()?;
        Some(self.ns_until(next))
    }

    /// How long vif `dom` waits for its next window, when its last TX poll ran out of credit.
    pub fn vif_credit_due(&self, dom: u16) -> Option<std::time::Duration> {
        let next = self.vifs.get(&dom)?.netback.tx_credit_wait()?;
        Some(self.ns_until(next))
    }

    /// How long from now until `at` (ns on [`Clock::now_ns`]); zero when it has passed.
    fn ns_until(&self, at: u64) -> std::time::Duration {
        std::time::Duration::from_nanos(at.saturating_sub(self.clock.now_ns()))
    }

    /// Changes vif `dom`'s transmit rate (none: unlimited). False when it is not connected.
    /// Requests that waited for credit are taken at the next pass.
    pub fn set_vif_rate(&mut self, dom: u16, rate: Option<crate::netback::credit::TxRate>) -> bool {
        let Some(v) = self.vifs.get_mut(&dom) else {
            return false;
        };
        let waited = v.netback.tx_credit_wait().is_some();
        v.netback.set_tx_rate(rate);
        v.tx_more |= waited;
        true
    }

    /// How vif `dom`'s event channel drove the path.
    pub fn vif_events(&self, dom: u16) -> Option<VifEvents> {
        self.vifs.get(&dom).map(|v| v.events)
    }

    /// Polls again the vifs whose last TX poll used its whole budget, and those whose credit
    /// ran out and whose next window has started.
    pub fn serve_tx_more(&mut self) {
        let now = self.now;
        // Collecting nothing allocates nothing: the common case costs one pass over the vifs.
        let doms: Vec<u16> = (self.vifs.iter())
            .filter(|(_, v)| v.tx_more || v.netback.tx_credit_wait().is_some_and(|t| t <= now))
            .map(|(&d, _)| d)
            .collect();
        for dom in doms {
            self.stats.tx_repolls += 1;
            self.vif_poll(dom);
        }
    }

    /// One poll of a vif: at most a budget of TX packets, then what its RX queue can take.
    fn vif_poll(&mut self, dom: u16) {
        if self.direct_possible(dom) {
            return self.vif_poll_direct(dom);
        }
        let tx_budget = self.cfg.budget * 4;
        let held = self.tx_held();
        let now = self.now;
        let mut out = std::mem::take(&mut self.pending);
        let res = {
            let Some(v) = self.vifs.get_mut(&dom) else {
                return;
            };
            let nb = &mut v.netback;
            let t = self.clock.ticks();
            // Frames wait for the physical port: the guest's TX requests stay on its ring.
            let budget = if held {
                v.tx_held = true;
                self.stats.tx_polls_held += 1;
                0
            } else {
                tx_budget
            };
            nb.set_now(now);
            let r = nb.tx_poll(budget, |p| out.push((vif_port(dom), p)));
            v.tx_more = !held && r.as_ref().is_ok_and(|&n| n >= tx_budget);
            let r = r.and_then(|tx| nb.rx_flush().map(|rx| tx + rx));
            // A poll that left requests for the guest's next window had work: not spurious.
            if r == Ok(0) && !held && nb.tx_credit_wait().is_none() {
                v.events.idle_polls += 1;
            }
            self.stats.stages.netback_ticks += self.clock.ticks().wrapping_sub(t);
            r
        };
        self.route_batch(&mut out);
        self.pending = out;
        if let Err(f) = res {
            self.fail(dom, f);
        }
        self.flush_vifs();
        // Packets still waiting for this guest's buffers: the guest's notification re-arms us.
    }

    /// Whether vif `dom`'s frames may go to another guest in one copy now: the path is on,
    /// no capture runs (a capture sees every frame whole), there is another vif, and the
    /// sender runs `copy`.
    fn direct_possible(&self, dom: u16) -> bool {
        self.g2g_direct
            && !self.capture.active()
            && self.vifs.len() > 1
            && self
                .vifs
                .get(&dom)
                .is_some_and(|v| v.netback.mechanism() == Mechanism::Copy)
    }

    /// [`DataPath::vif_poll`] with guest-to-guest frames delivered in one copy: the sender's
    /// netback offers each frame's headers ([`Netback::tx_poll_direct`]); the switch decides
    /// on them once; a frame for another connected guest goes grant to grant when that guest
    /// takes it now ([`Netback::rx_direct`]); every other frame is copied out whole and
    /// carried out with the decision already made. Once one frame of the poll has taken the
    /// whole-copy way towards a guest, that guest's later frames of the poll do too (after a
    /// flood, every frame of the poll): a later frame must not overtake it.
    fn vif_poll_direct(&mut self, dom: u16) {
        let held = self.tx_held();
        let Some(mut v) = self.vifs.remove(&dom) else {
            return;
        };
        let tx_budget = self.cfg.budget * 4;
        // Frames wait for the physical port: the guest's TX requests stay on its ring.
        let budget = if held {
            v.tx_held = true;
            self.stats.tx_polls_held += 1;
            0
        } else {
            tx_budget
        };
        let ingress = vif_port(dom);
        v.netback.set_now(self.now);
        let mut out = std::mem::take(&mut self.decided);
        let mut receivers_failed: Vec<u16> = Vec::new();
        let t = self.clock.ticks();
        let res = {
            let (switch, vifs, stats, now) =
                (&mut self.switch, &mut self.vifs, &mut self.stats, self.now);
            // Receivers a frame of this poll went to the whole-copy way (all of them after a
            // flood): later frames for them must not overtake it.
            let (mut behind_all, mut behind) = (false, Vec::new());
            let r = v.netback.tx_poll_direct(
                budget,
                |h| {
                    if behind_all {
                        stats.g2g.behind_fallback += 1;
                        return Direct::Copy(None);
                    }
                    let d = switch.input_frame(ingress, h.head, h.len, now);
                    stats.stages.switched_packets += 1;
                    let to = match d {
                        Decision::Forward(p) => p.0.checked_sub(1).filter(|r| vifs.contains_key(r)),
                        Decision::Flood => {
                            behind_all = true;
                            stats.g2g.flooded += 1;
                            None
                        }
                        Decision::Drop(_) => {
                            stats.bridge_drops += 1;
                            stats.g2g.switch_drops += 1;
                            return Direct::Done;
                        }
                    };
                    let Some(rdom) = to else {
                        stats.g2g.not_to_guest += u64::from(!behind_all);
                        return Direct::Copy(Some(d));
                    };
                    if behind.contains(&rdom) {
                        stats.g2g.behind_fallback += 1;
                        return Direct::Copy(Some(d));
                    }
                    let rv = vifs.get_mut(&rdom).expect("checked above");
                    let r = rv.netback.rx_direct(h);
                    if rv.netback.fatal().is_some() && r != RxDirect::Refused(Refusal::Down) {
                        receivers_failed.push(rdom);
                    }
                    match r {
                        RxDirect::Delivered => {
                            rv.dirty = true;
                            stats.g2g.single_copy_packets += 1;
                            stats.g2g.single_copy_bytes += h.payload_len() as u64;
                            stats.g2g.head_bytes += h.head.len() as u64;
                            Direct::Done
                        }
                        RxDirect::SourceFailed(st) => {
                            rv.dirty = true;
                            stats.g2g.sender_failed += 1;
                            Direct::SourceFailed(st)
                        }
                        RxDirect::DestFailed => {
                            stats.g2g.receiver_failed += 1;
                            Direct::Done
                        }
                        RxDirect::Refused(why) => {
                            behind.push(rdom);
                            stats.g2g.refused(why);
                            Direct::Copy(Some(d))
                        }
                    }
                },
                |p, d| out.push((p, d)),
            );
            v.tx_more = !held && r.as_ref().is_ok_and(|&n| n >= tx_budget);
            let r = r.and_then(|tx| v.netback.rx_flush().map(|rx| tx + rx));
            if r == Ok(0) && !held && v.netback.tx_credit_wait().is_none() {
                v.events.idle_polls += 1;
            }
            r
        };
        self.stats.stages.netback_ticks += self.clock.ticks().wrapping_sub(t);
        self.vifs.insert(dom, v);
        // The frames that take the whole-copy way, in order, each switched once.
        let (t, e) = (self.clock.ticks(), self.stats.stages.egress_ticks);
        for (pkt, d) in out.drain(..) {
            match d {
                Some(d) => self.carry_out(ingress, pkt, d),
                None => {
                    self.stats.stages.switched_packets += 1;
                    self.route(ingress, pkt);
                }
            }
        }
        self.charge_switching(t, e);
        self.decided = out;
        for r in receivers_failed {
            if let Some(f) = self.vifs.get(&r).and_then(|v| v.netback.fatal()) {
                self.fail(r, f);
            }
        }
        if let Err(f) = res {
            self.fail(dom, f);
        }
        self.flush_vifs();
    }

    /// Frames from TAP port `port` (at most [`TAP_READS_PER_CALL`]): each is bridged.
    pub fn tap_input(&mut self, port: PortId) {
        let mut buf = std::mem::take(&mut self.tap_buf);
        buf.resize(65536 + VNET_HDR_LEN, 0);
        for _ in 0..TAP_READS_PER_CALL {
            let Some(t) = self.taps.get_mut(&port) else {
                break;
            };
            let n = match t.port.recv(&mut buf) {
                Ok(n) => n,
                // A TAP whose interface was deleted reads EBADFD, and polls ready for ever:
                // it comes off the path, or the daemon would wake for it without end.
                Err(e) if e.raw_os_error() == Some(nix::errno::Errno::EBADFD as i32) => {
                    t.counters.rx_errors += 1;
                    self.stats.ddtap_errors += u64::from(port == PORT_DDSTACK);
                    self.detach_tap(port);
                    self.gone_taps.push(port);
                    break;
                }
                Err(_) => break,
            };
            let is_stack = port == PORT_DDSTACK;
            let Some(vh) = (n >= VNET_HDR_LEN + 14)
                .then(|| VirtioNetHdr::parse(&buf[..n]))
                .flatten()
            else {
                t.counters.rx_errors += 1;
                self.stats.ddtap_errors += u64::from(is_stack);
                continue;
            };
            t.counters.rx += 1;
            self.stats.ddtap_rx += u64::from(is_stack);
            let pkt = Packet::linear(vh, buf[VNET_HDR_LEN..n].to_vec());
            let (t, e) = (self.clock.ticks(), self.stats.stages.egress_ticks);
            self.route(port, pkt);
            self.charge_switching(t, e);
            self.stats.stages.switched_packets += 1;
        }
        self.tap_buf = buf;
        self.flush_vifs();
    }
}
