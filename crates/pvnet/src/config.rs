//! What a run is made of: the daemon's configuration, as `up` and `bench` build it and the
//! daemon receives it, with the checks of every bound a user can set.

use std::collections::BTreeMap;

use anyhow::{anyhow, bail, Result};
use pvnet_dd::lro;
use pvnet_dd::netback::credit::TxRate;
use pvnet_testbed::RunId;
use serde::{Deserialize, Serialize};

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

/// The physical port's packet ring (see `docs/port-gro.md`, "TPACKET_V3").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum PortRing {
    /// TPACKET_V2: one slot per frame (64 KiB slots with port GRO); a lease holds its slot.
    #[default]
    V2,
    /// TPACKET_V3: frames packed in 256 KiB blocks, retired when full or after 1 ms; a lease
    /// holds its whole block.
    V3,
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
    /// GRO on the physical port's veth end: `linux-gro` in mode linux; port GRO (`port-gro`)
    /// in the PV modes, where the packet ring's slots then hold 64 KiB coalesced frames.
    #[serde(default)]
    pub gro: bool,
    /// The guests' TAPs opened with `IFF_NAPI`, so the guest kernel's GRO coalesces what
    /// netfront writes (`guest-gro`).
    #[serde(default)]
    pub guest_gro: bool,
    /// Slots of the physical port's packet ring (see [`check_ring_frames`]).
    #[serde(default = "one_guest_ring_frames")]
    pub ring_frames: u32,
    /// The port's ring: V2 slots or V3 blocks.
    #[serde(default)]
    pub port_ring: PortRing,
    /// Receive queues of the physical port, the ring's slots split between them (see
    /// [`default_port_queues`]). Configs written before `--port-queues` existed mean one.
    #[serde(default = "one_queue")]
    pub port_queues: u32,
    /// Slots of the port's ring the CPU is asked to load before use (see
    /// [`check_ring_prefetch`]). Configs written before `--ring-prefetch` existed get the
    /// default.
    #[serde(default = "default_ring_prefetch")]
    pub ring_prefetch: u32,
    /// The physical port's transmit buffer in KiB (see [`check_port_tx_buffer_kib`]):
    /// what the driver domain may have in flight towards the wire before the port holds the
    /// guests' TX back. Configs written before `--port-tx-buffer-kib` existed get the default.
    #[serde(default = "default_port_tx_buffer_kib")]
    pub port_tx_buffer_kib: u32,
    /// V3: the blocks' size in KiB (see [`v3_blocks`]); None: the default geometry.
    #[serde(default)]
    pub v3_block_kib: Option<u32>,
    /// What forwards frames in the driver domain: the learning bridge, the bridge with its
    /// rule pass, or netback MAC routing.
    #[serde(default)]
    pub switch: pvnet_dd::switch::Mode,
    /// The rule pass's rules (`bridge-nf`), as text already checked by the command; None: the
    /// default rule set.
    #[serde(default)]
    pub rules: Option<String>,
    /// How netback moves packet bytes to and from the guests' granted pages (`--grant`).
    #[serde(default)]
    pub grant: pvnet_dd::netback::Mechanism,
    /// The physical port receives straight into the driver domain's machine frames
    /// (`pvnet_dd::frameport`) instead of its packet ring: always under `--grant flip`, and
    /// with `--port-frames` for the other mechanisms (the fair `copy` to compare flip with).
    #[serde(default)]
    pub port_frames: bool,
    /// MTU of the wire (both veth ends), the driver domain's stack port and the guests'
    /// interfaces (see [`check_mtu`]). Configs written before `--mtu` existed mean 1500.
    #[serde(default = "default_mtu")]
    pub mtu: u32,
    /// HVM guests on the emulated NE2000, after the PV guests.
    #[serde(default)]
    pub hvm: usize,
    /// Their port-I/O path (written as `original`, `seed` or `max`).
    #[serde(default)]
    pub hvm_path: pvnet_hvm::Path,
    /// Modelled cost of one VM exit, nanoseconds.
    #[serde(default)]
    pub exit_cost_ns: u64,
    /// Guest-to-guest frames in one copy, grant to grant (`pvnet set --g2g`); off, they are
    /// copied through a driver-domain buffer (the `g2g-copy2` bench configuration).
    #[serde(default = "yes")]
    pub g2g: bool,
    /// Each PV guest's processes in a CPU cgroup of its own with an equal weight (see
    /// [`crate::cgroup`]): the guest, not each of its threads, is the scheduling entity.
    /// On by default: it is what made 8 guests streaming at once share the receiving CPU
    /// fairly (docs/consolidation.md, revision "guests as scheduling entities").
    #[serde(default = "yes")]
    pub guest_cgroups: bool,
    /// Each guest's caps in the driver domain (`up --rx-queue-packets` and the like).
    #[serde(default)]
    pub limits: Limits,
    /// Transmit rates by PV guest index (`up --vif-rate`, `set --vif-rate`): xl's `rate=`,
    /// written in each guest's backend directory, read by netback at connect.
    #[serde(default)]
    pub vif_rates: BTreeMap<u16, TxRate>,
}

/// Each guest's caps in the driver domain, as `pvnet up` sets them and `pvnet stat` shows them
/// under `limits` (see the README's operators section). The defaults are the data path's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Limits {
    /// Packets queued for a guest whose RX ring has no free buffer; beyond it they are dropped
    /// (`rx_queue_full`).
    pub rx_queue_packets: usize,
    /// Bytes of packet data queued for a guest; beyond it packets are dropped
    /// (`rx_queue_memory_full`).
    pub rx_queue_bytes: usize,
    /// Grants a guest's persistent table may hold (`--grant persistent`); a frontend that
    /// needs more is disconnected (`persistent_overflow`).
    pub persistent_grants: usize,
    /// Aggregates one guest may hold in the port's LRO table; beyond it its own oldest leaves
    /// (`lro.guest_flow_cap`).
    pub lro_flows_per_guest: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            rx_queue_packets: pvnet_dd::netback::RX_QUEUE_LIMIT,
            rx_queue_bytes: pvnet_dd::netback::RX_QUEUE_BYTES,
            persistent_grants: pvnet_dd::netback::PERSISTENT_MAX,
            lro_flows_per_guest: lro::MAX_FLOWS_PER_DST,
        }
    }
}

/// Most packets `--rx-queue-packets` accepts (64 Ki: at MTU 1500, 100 MiB a guest).
pub const RX_QUEUE_PACKETS_MAX: usize = 65536;
/// Most bytes `--rx-queue-bytes` accepts (1 GiB a guest).
pub const RX_QUEUE_BYTES_MAX: usize = 1 << 30;
/// Most grants `--persistent-grants` accepts (the grant table's 16 Ki entries a guest).
pub const PERSISTENT_GRANTS_MAX: usize = 16384;

impl Limits {
    /// Checks every cap against its bounds, the queue against the port's poll `budget` (the
    /// port is not polled while a guest's queue cannot take a poll's worth, so it must hold at
    /// least two), and names the option at fault.
    pub fn check(&self, budget: usize) -> Result<()> {
        let l = self;
        let min_packets = (2 * budget).max(2);
        if !(min_packets..=RX_QUEUE_PACKETS_MAX).contains(&l.rx_queue_packets) {
            bail!(
                "--rx-queue-packets must be between {min_packets} (two polls of --budget {budget}) \
                 and {RX_QUEUE_PACKETS_MAX}, got {}",
                l.rx_queue_packets
            );
        }
        let min_bytes = pvnet_dd::netback::MAX_PACKET;
        if !(min_bytes..=RX_QUEUE_BYTES_MAX).contains(&l.rx_queue_bytes) {
            bail!(
                "--rx-queue-bytes must be between {min_bytes} (one largest packet) and \
                 {RX_QUEUE_BYTES_MAX}, got {}",
                l.rx_queue_bytes
            );
        }
        if !(1..=PERSISTENT_GRANTS_MAX).contains(&l.persistent_grants) {
            bail!(
                "--persistent-grants must be between 1 and {PERSISTENT_GRANTS_MAX}, got {}",
                l.persistent_grants
            );
        }
        let table = lro::Config::default().max_flows;
        if !(1..=table).contains(&l.lro_flows_per_guest) {
            bail!(
                "--lro-flows-per-guest must be between 1 and {table} (the LRO table's size), got {}",
                l.lro_flows_per_guest
            );
        }
        Ok(())
    }
}

fn default_mtu() -> u32 {
    DEFAULT_MTU
}

fn yes() -> bool {
    true
}

fn one_queue() -> u32 {
    1
}

fn one_guest_ring_frames() -> u32 {
    default_ring_frames(1, false)
}

fn default_ring_prefetch() -> u32 {
    pvnet_pnic::DEFAULT_PREFETCH
}

/// [`DaemonConfig::port_tx_buffer_kib`]'s default: [`pvnet_pnic::TX_SNDBUF`].
pub const DEFAULT_PORT_TX_BUFFER_KIB: u32 = (pvnet_pnic::TX_SNDBUF / 1024) as u32;

fn default_port_tx_buffer_kib() -> u32 {
    DEFAULT_PORT_TX_BUFFER_KIB
}

/// Smallest and largest `--port-tx-buffer-kib`.
pub const PORT_TX_BUFFER_KIB_MIN: u32 = 4;
pub const PORT_TX_BUFFER_KIB_MAX: u32 = 65536;

/// Checks a `--port-tx-buffer-kib` value: the physical port's transmit socket buffer, 4 KiB
/// (the kernel's floor, a couple of frames) to 64 MiB.
pub fn check_port_tx_buffer_kib(kib: u32) -> Result<u32> {
    if !(PORT_TX_BUFFER_KIB_MIN..=PORT_TX_BUFFER_KIB_MAX).contains(&kib) {
        bail!(
            "--port-tx-buffer-kib must be between {PORT_TX_BUFFER_KIB_MIN} and {PORT_TX_BUFFER_KIB_MAX}, got {kib}"
        );
    }
    Ok(kib)
}

/// The bench configuration that `pvnet up` runs unless told otherwise, chosen by issue #24's
/// rule: of the PV configurations, the cheapest per byte whose TCP_RR stays within 2 % of
/// `xen`'s (docs/default-config.md has the measurement). `--lro off` is `xen`.
pub const DEFAULT_CONFIG: &str = "adaptive";

/// The aggregation `pvnet up` applies in `mode` when `--lro` is not given: the
/// [`DEFAULT_CONFIG`]'s (adaptive flush, skb mode) in `--mode xen` on the packet ring; none with
/// `--mode linux` (no driver domain), `--mode relay` (the floor, aggregating only when asked),
/// on the frame port (`port_frames`: wire-sized frames only) or when GRO is asked for at the
/// port or in the guests (`gro_elsewhere`: `--port-gro`, `--guest-gro` are the `port-gro` and
/// `guest-gro` configurations; `--lro adaptive` on top makes `port-gro+adaptive`).
pub fn default_lro(mode: Mode, port_frames: bool, gro_elsewhere: bool) -> Option<LroSettings> {
    (mode == Mode::Xen && !port_frames && !gro_elsewhere).then_some(LroSettings {
        policy: lro::Policy::Adaptive,
        mode: lro::Mode::Skb,
    })
}

/// The MTU of the testbed's wire (the veth between the remote host and the driver domain)
/// unless `--mtu` says otherwise.
pub const DEFAULT_MTU: u32 = 1500;
/// Bounds of `--mtu`. 1280 is the least an IPv6 link may have (RFC 8200 §5); 65535 the most
/// any Linux device takes (`ETH_MAX_MTU`, a veth's limit). A TAP stops at 65521, so the PV
/// modes, which give the driver domain and each guest one, refuse more with the kernel's own
/// word ([`pvnet_testbed::link::set_mtu`]).
pub const MTU_MIN: u32 = 1280;
pub const MTU_MAX: u32 = 65535;

/// Checks an `--mtu` value.
pub fn check_mtu(n: u32) -> Result<u32> {
    if !(MTU_MIN..=MTU_MAX).contains(&n) {
        bail!("--mtu must be between {MTU_MIN} and {MTU_MAX}, got {n}");
    }
    Ok(n)
}

/// Fewest and most slots `--ring-frames` accepts: below a few polls' worth the kernel drops
/// whenever the daemon is descheduled; above 64 Ki slots (104 MiB) it is only memory.
pub const RING_FRAMES_MIN: u32 = 256;
pub const RING_FRAMES_MAX: u32 = 65536;

/// Frames per poll of the physical port unless `--budget` says otherwise (NAPI's weight).
pub const DEFAULT_BUDGET: usize = 64;
/// Frames per poll of the physical port in `--mode relay` unless `--budget` says otherwise.
/// The relay writes each guest's TAP once a poll, and a poll's budget is shared between the
/// receive queues: with 64, eight guests get 8 frames each a poll, a batch too short for the
/// floor the relay is there to be (0.71–0.72 of one guest at eight guests, against 0.86 with
/// 256; the PV path moves by nothing between the two: docs/guest-scaling.md, revision 2216b57).
pub const RELAY_BUDGET: usize = 256;

/// Frames per poll of the physical port in `mode` unless `--budget` says otherwise.
pub fn default_budget(mode: Mode) -> usize {
    match mode {
        Mode::Relay => RELAY_BUDGET,
        Mode::Xen | Mode::Linux => DEFAULT_BUDGET,
    }
}

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

/// Guests one [`pvnet_pnic::DEFAULT_FRAME_NR`]-slot share of the port's ring serves by default
/// beyond [`GUESTS_WITH_OWN_SHARE`].
pub const GUESTS_PER_RING_SHARE: usize = 2;

/// Guests up to which each has a whole [`pvnet_pnic::DEFAULT_FRAME_NR`]-slot share, its receive
/// queue as deep as one guest's ring.
pub const GUESTS_WITH_OWN_SHARE: usize = 2;

/// Slots of the physical port's ring unless `--ring-frames` says otherwise, for `guests`
/// receiving guests (PV, attached and HVM) and port GRO on or off. Wire-sized slots: 4096 a
/// guest for one or two guests, then 4096 for every two (8192 at three or four, 16384, 26 MiB,
/// at 8; at most [`RING_FRAMES_MAX`]). Every guest adds a scheduling entity on the receiving
/// CPU, and the ring must hold what arrives while the driver domain waits for its turn among
/// them. At 8 guests a 4096-slot ring overflowed in every `xen` repetition (20,678 frames in
/// three), and TCP's aggregate was 1678 Mbit/s against 2243 with 16384 slots and no drop
/// (docs/consolidation.md, "The port's ring and the number of guests"). At two guests, each
/// with a receive queue of its own, 4096 slots (2048 a queue) overflowed in 3 of 32 `xen`
/// streams and 11 of 32 `relay-adaptive` ones; 8192 in none of 96, for 2–5 % of the two
/// guests' throughput (docs/ring-size.md, "Two guests").
/// With port GRO the slots hold 64 KiB and arrive coalesced: [`pvnet_pnic::GRO_FRAME_NR`].
pub fn default_ring_frames(guests: usize, port_gro: bool) -> u32 {
    if port_gro {
        return pvnet_pnic::GRO_FRAME_NR;
    }
    let shares = guests
        .min(GUESTS_WITH_OWN_SHARE)
        .max(guests.div_ceil(GUESTS_PER_RING_SHARE))
        .max(1);
    pvnet_pnic::DEFAULT_FRAME_NR
        .saturating_mul(u32::try_from(shares).unwrap_or(u32::MAX))
        .min(RING_FRAMES_MAX)
}

/// Checks a `--ring-frames` value.
pub fn check_ring_frames(n: u32) -> Result<u32> {
    if !(RING_FRAMES_MIN..=RING_FRAMES_MAX).contains(&n) {
        bail!("--ring-frames must be between {RING_FRAMES_MIN} and {RING_FRAMES_MAX}, got {n}");
    }
    Ok(n)
}

/// Receive queues of the physical port unless `--port-queues` says otherwise, for `guests`
/// receiving guests (PV, attached and HVM): one per guest, at most
/// [`pvnet_pnic::MAX_QUEUES`], as a NIC with VMDq gives each virtual machine a queue of its
/// own, sorted by destination MAC address. One on the frame port (`port_frames`) and on a V3
/// ring, which have one.
///
/// With one queue for all, the port's ring is a single first-in first-out queue in front of
/// the driver domain, and while the driver domain is the bottleneck the guests' TCP senders
/// share it as their congestion control lets them: at 8 guests under `adaptive`, the BBR
/// sender whose minimum-RTT estimate was taken behind the standing queue had about three
/// times the median window, and the slowest and fastest guests' 4-second streams made 383
/// and 956 Mbit/s in the median (Jain's index 0.86). A queue per guest, served in turn,
/// gives each guest the same share of every poll (docs/port-queues.md).
pub fn default_port_queues(guests: usize, port_frames: bool, ring: PortRing) -> u32 {
    if port_frames || ring == PortRing::V3 {
        return 1;
    }
    u32::try_from(guests)
        .unwrap_or(u32::MAX)
        .clamp(1, pvnet_pnic::MAX_QUEUES)
}

/// Whether a run receives on the frame port: asked for (`--port-frames`), or implied by page
/// flipping, which hands the guests the driver domain's machine frames.
pub fn frame_port(port_frames: bool, grant: pvnet_dd::netback::Mechanism) -> bool {
    port_frames || grant == pvnet_dd::netback::Mechanism::Flip
}

/// Checks a `--port-queues` value for a port on the frame port (`port_frames`) or not, with a
/// ring of kind `ring`.
pub fn check_port_queues(n: u32, port_frames: bool, ring: PortRing) -> Result<u32> {
    let max = pvnet_pnic::MAX_QUEUES;
    if !(1..=max).contains(&n) {
        bail!("--port-queues must be between 1 and {max}, got {n}");
    }
    if n > 1 && port_frames {
        bail!(
            "--port-queues {n}: the frame port (--grant flip, --port-frames) has one receive queue"
        );
    }
    if n > 1 && ring == PortRing::V3 {
        bail!("--port-queues {n}: a V3 ring (--port-ring v3) has one receive queue");
    }
    Ok(n)
}

/// Most slots `--ring-prefetch` may ask for: 64 slots of 1664 bytes per queue are already
/// 106 KiB, more than the first-level cache holds, and a prefetch that far ahead is evicted
/// before its slot is used.
pub const RING_PREFETCH_MAX: u32 = 64;

/// Checks a `--ring-prefetch` value: the slots of a V2 ring the CPU is asked to load before
/// they are used, past the next frame to read and from the slot the kernel fills next
/// ([`pvnet_pnic::PnicConfig::prefetch`]), 0 (none) to [`RING_PREFETCH_MAX`].
pub fn check_ring_prefetch(n: u32) -> Result<u32> {
    if n > RING_PREFETCH_MAX {
        bail!("--ring-prefetch must be between 0 and {RING_PREFETCH_MAX}, got {n}");
    }
    Ok(n)
}

/// Smallest and largest `--port-ring-block-kib` (a power of two in between).
pub const V3_BLOCK_KIB_MIN: u32 = 128;
pub const V3_BLOCK_KIB_MAX: u32 = 4096;

/// Checks a `--port-ring-block-kib` value: a power of two from 128 to 4096, for a V3 ring.
pub fn check_v3_block_kib(kib: u32, ring: PortRing) -> Result<u32> {
    if ring != PortRing::V3 {
        bail!("--port-ring-block-kib needs --port-ring v3 (a V2 ring has slots, not blocks)");
    }
    if !(V3_BLOCK_KIB_MIN..=V3_BLOCK_KIB_MAX).contains(&kib) || !kib.is_power_of_two() {
        bail!(
            "--port-ring-block-kib must be a power of two between {V3_BLOCK_KIB_MIN} and \
             {V3_BLOCK_KIB_MAX}, got {kib}"
        );
    }
    Ok(kib)
}

/// The V3 ring's blocks: [`pvnet_pnic::gro_v3_blocks`], or blocks of `kib` KiB (checked by
/// [`check_v3_block_kib`]) making up the same memory.
pub fn v3_blocks(kib: Option<u32>) -> pvnet_pnic::BlockGeometry {
    let b = pvnet_pnic::gro_v3_blocks();
    match kib {
        Some(k) => {
            let size = k * 1024;
            pvnet_pnic::BlockGeometry {
                block_size: size,
                block_nr: (b.block_size * b.block_nr / size).max(1),
                ..b
            }
        }
        None => b,
    }
}

/// How the physical port aggregates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LroSettings {
    pub policy: lro::Policy,
    pub mode: lro::Mode,
}

impl DaemonConfig {
    /// The testbed's guests, by index: PV guests, attached ones, then HVM guests.
    pub fn testbed_guests(&self) -> usize {
        self.guests + self.attach + self.hvm
    }
}

/// The `xen` configuration (no aggregation, the learning bridge, grant copy) on one guest: what
/// every bench configuration is built from. Not `pvnet up`'s default, which aggregates
/// ([`DEFAULT_CONFIG`], [`default_lro`]).
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
            guest_gro: false,
            ring_frames: pvnet_pnic::DEFAULT_FRAME_NR,
            port_ring: PortRing::V2,
            port_queues: 1,
            ring_prefetch: pvnet_pnic::DEFAULT_PREFETCH,
            port_tx_buffer_kib: DEFAULT_PORT_TX_BUFFER_KIB,
            v3_block_kib: None,
            switch: pvnet_dd::switch::Mode::Bridge,
            rules: None,
            grant: pvnet_dd::netback::Mechanism::Copy,
            port_frames: false,
            mtu: DEFAULT_MTU,
            hvm: 0,
            hvm_path: pvnet_hvm::Path::Original,
            exit_cost_ns: 0,
            g2g: true,
            guest_cgroups: true,
            limits: Limits::default(),
            vif_rates: BTreeMap::new(),
        }
    }
}

/// One `--vif-rate` argument, `[gI=]RATE[/s][@INTERVAL]` or `[gI=]off`: the vif it names (None:
/// every vif) and its rate (None: `off`).
pub fn parse_vif_rate(s: &str) -> Result<(Option<u16>, Option<TxRate>)> {
    let (who, rate) = match s.split_once('=') {
        Some((g, r)) => {
            let i = g
                .strip_prefix('g')
                .and_then(|n| n.parse::<u16>().ok())
                .ok_or_else(|| {
                    anyhow!("--vif-rate {s:?}: a guest is named g0, g1, ...; got {g:?}")
                })?;
            (Some(i), r)
        }
        None => (None, s),
    };
    if rate == "off" {
        return Ok((who, None));
    }
    let r = TxRate::parse(rate).map_err(|e| anyhow!("--vif-rate {s:?}: {e}"))?;
    Ok((who, Some(r)))
}

/// Checks that `--vif-rate`'s guest `i` is a vif of a run with `vifs` of them (PV and attached
/// guests) and `hvm` HVM guests after them.
pub fn check_vif_index(i: u16, vifs: usize, hvm: usize) -> Result<()> {
    let i = usize::from(i);
    if i < vifs {
        return Ok(());
    }
    if i < vifs + hvm {
        bail!(
            "--vif-rate g{i}: g{i} is an HVM guest, whose NE2000 reaches the driver domain \
             through its device model, not netback: a rate is a PV guest's"
        );
    }
    match vifs {
        0 => bail!("--vif-rate g{i}: this run has no PV guest"),
        1 => bail!("--vif-rate g{i}: this run has one PV guest, g0"),
        n => bail!("--vif-rate g{i}: this run's PV guests are g0 to g{}", n - 1),
    }
}

/// `up --vif-rate`: each vif's rate, a guest's own over the one for all.
pub fn vif_rates(
    specs: &[String],
    mode: Mode,
    vifs: usize,
    hvm: usize,
) -> Result<BTreeMap<u16, TxRate>> {
    let mut all = None;
    let mut own = BTreeMap::new();
    for s in specs {
        if mode != Mode::Xen {
            bail!("--vif-rate needs --mode xen: the rate is netback's credit, and only xen has netback");
        }
        match parse_vif_rate(s)? {
            (_, None) => {
                bail!("--vif-rate {s:?}: `off` is for `pvnet set`; leave the guest out instead")
            }
            (None, Some(r)) => all = Some(r),
            (Some(i), Some(r)) => {
                check_vif_index(i, vifs, hvm)?;
                own.insert(i, r);
            }
        }
    }
    let mut rates = BTreeMap::new();
    for i in 0..vifs as u16 {
        if let Some(r) = own.get(&i).copied().or(all) {
            rates.insert(i, r);
        }
    }
    Ok(rates)
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_relay_polls_longer_batches_by_default_and_any_budget_it_takes_is_checked() {
        assert_eq!(default_budget(Mode::Xen), DEFAULT_BUDGET);
        assert_eq!(default_budget(Mode::Linux), DEFAULT_BUDGET);
        assert_eq!(default_budget(Mode::Relay), RELAY_BUDGET);
        for m in [Mode::Xen, Mode::Relay] {
            let b = check_budget(default_budget(m)).unwrap();
            Limits::default().check(b).unwrap();
        }
    }

    #[test]
    fn v3_block_sizes_are_checked_and_keep_the_ring_s_memory() {
        let v3 = PortRing::V3;
        assert_eq!(check_v3_block_kib(128, v3).unwrap(), 128);
        assert_eq!(check_v3_block_kib(4096, v3).unwrap(), 4096);
        for bad in [0, 64, 100, 384, 8192] {
            let e = check_v3_block_kib(bad, v3).unwrap_err().to_string();
            assert!(
                e.contains("power of two between 128 and 4096"),
                "{bad}: {e}"
            );
        }
        let e = check_v3_block_kib(512, PortRing::V2)
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs --port-ring v3"), "{e}");
        let d = pvnet_pnic::gro_v3_blocks();
        assert_eq!(v3_blocks(None), d);
        let g = v3_blocks(Some(1024));
        assert_eq!(
            (g.block_size, g.block_nr),
            (1 << 20, (d.block_size * d.block_nr) >> 20)
        );
        assert_eq!(g.retire_ms, d.retire_ms);
    }
    use super::*;

    #[test]
    fn a_receive_queue_per_guest_where_the_port_has_queues() {
        let (v2, v3) = (PortRing::V2, PortRing::V3);
        assert_eq!(default_port_queues(0, false, v2), 1);
        assert_eq!(default_port_queues(1, false, v2), 1);
        assert_eq!(default_port_queues(8, false, v2), 8);
        assert_eq!(default_port_queues(100, false, v2), pvnet_pnic::MAX_QUEUES);
        assert_eq!(
            default_port_queues(8, true, v2),
            1,
            "the frame port has one"
        );
        assert_eq!(default_port_queues(8, false, v3), 1, "a V3 ring has one");
        assert_eq!(check_port_queues(1, true, v3).unwrap(), 1);
        assert_eq!(check_port_queues(16, false, v2).unwrap(), 16);
        let err = |n, frames, ring| check_port_queues(n, frames, ring).unwrap_err().to_string();
        assert!(err(0, false, v2).contains("between 1 and 16, got 0"));
        assert!(err(17, false, v2).contains("between 1 and 16, got 17"));
        assert!(err(2, true, v2).contains("the frame port"));
        assert!(err(2, false, v3).contains("V3 ring"));
    }

    #[test]
    fn the_default_ring_grows_with_the_guests() {
        let n = pvnet_pnic::DEFAULT_FRAME_NR;
        let table = [
            (0, n),
            (1, n),
            (2, 2 * n),
            (3, 2 * n),
            (4, 2 * n),
            (5, 3 * n),
            (8, 4 * n),
        ];
        for (guests, slots) in table {
            assert_eq!(default_ring_frames(guests, false), slots, "{guests} guests");
        }
        // Every default is one `--ring-frames` accepts, up to the most guests and beyond.
        for guests in 0..=64 {
            check_ring_frames(default_ring_frames(guests, false)).unwrap();
        }
        assert_eq!(default_ring_frames(usize::MAX, false), RING_FRAMES_MAX);
        // Port GRO's 64 KiB slots do not grow.
        assert_eq!(default_ring_frames(8, true), pvnet_pnic::GRO_FRAME_NR);
        // A configuration file without the field: one guest's ring.
        assert_eq!(one_guest_ring_frames(), n);
    }

    #[test]
    fn mtu_bounds() {
        for ok in [1280, 1500, 9000, 65521, 65535] {
            assert_eq!(check_mtu(ok).unwrap(), ok);
        }
        for bad in [0, 68, 576, 1279, 65536, u32::MAX] {
            let e = check_mtu(bad).unwrap_err().to_string();
            assert!(e.contains("--mtu must be between 1280 and 65535"), "{e}");
            assert!(e.contains(&bad.to_string()), "{e}");
        }
    }

    #[test]
    fn config_without_mtu_means_1500() {
        let mut v = serde_json::to_value(DaemonConfig::default()).unwrap();
        v.as_object_mut().unwrap().remove("mtu");
        let c: DaemonConfig = serde_json::from_value(v).unwrap();
        assert_eq!(c.mtu, 1500);
        let c: DaemonConfig = serde_json::from_value(
            serde_json::to_value(DaemonConfig {
                mtu: 9000,
                ..DaemonConfig::default()
            })
            .unwrap(),
        )
        .unwrap();
        assert_eq!(c.mtu, 9000);
    }

    #[test]
    fn ring_prefetch_is_checked_and_configs_without_it_take_the_default() {
        assert_eq!(check_ring_prefetch(0).unwrap(), 0);
        assert_eq!(
            check_ring_prefetch(RING_PREFETCH_MAX).unwrap(),
            RING_PREFETCH_MAX
        );
        assert_eq!(
            check_ring_prefetch(RING_PREFETCH_MAX + 1)
                .unwrap_err()
                .to_string(),
            "--ring-prefetch must be between 0 and 64, got 65"
        );
        let mut v = serde_json::to_value(DaemonConfig {
            ring_prefetch: 0,
            ..DaemonConfig::default()
        })
        .unwrap();
        let off: DaemonConfig = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(off.ring_prefetch, 0);
        v.as_object_mut().unwrap().remove("ring_prefetch");
        let c: DaemonConfig = serde_json::from_value(v).unwrap();
        assert_eq!(c.ring_prefetch, pvnet_pnic::DEFAULT_PREFETCH);
    }

    #[test]
    fn config_without_guest_cgroups_means_on() {
        let mut v = serde_json::to_value(DaemonConfig {
            guest_cgroups: false,
            ..DaemonConfig::default()
        })
        .unwrap();
        let off: DaemonConfig = serde_json::from_value(v.clone()).unwrap();
        assert!(!off.guest_cgroups);
        v.as_object_mut().unwrap().remove("guest_cgroups");
        let c: DaemonConfig = serde_json::from_value(v).unwrap();
        assert!(c.guest_cgroups);
    }

    #[test]
    fn limits_default_to_the_data_path_s_caps_and_are_checked() {
        let d = Limits::default();
        assert_eq!(d.rx_queue_packets, pvnet_dd::netback::RX_QUEUE_LIMIT);
        assert_eq!(d.rx_queue_bytes, pvnet_dd::netback::RX_QUEUE_BYTES);
        assert_eq!(d.persistent_grants, pvnet_dd::netback::PERSISTENT_MAX);
        assert_eq!(d.lro_flows_per_guest, lro::MAX_FLOWS_PER_DST);
        // The defaults pass with every budget `--budget` accepts.
        for b in [BUDGET_MIN, DEFAULT_BUDGET, BUDGET_MAX] {
            d.check(b).unwrap();
        }
        let err = |l: Limits, budget: usize| l.check(budget).unwrap_err().to_string();
        let with = |f: fn(&mut Limits)| {
            let mut l = Limits::default();
            f(&mut l);
            l
        };
        // The queue must hold two polls' worth.
        let e = err(with(|l| l.rx_queue_packets = 127), 64);
        assert!(
            e.contains("--rx-queue-packets must be between 128") && e.contains("127"),
            "{e}"
        );
        with(|l| l.rx_queue_packets = 128).check(64).unwrap();
        assert!(
            err(with(|l| l.rx_queue_packets = RX_QUEUE_PACKETS_MAX + 1), 1)
                .contains("--rx-queue-packets")
        );
        let e = err(with(|l| l.rx_queue_bytes = 1000), 64);
        assert!(
            e.contains("--rx-queue-bytes") && e.contains("one largest packet"),
            "{e}"
        );
        assert!(err(with(|l| l.rx_queue_bytes = RX_QUEUE_BYTES_MAX + 1), 64)
            .contains("--rx-queue-bytes"));
        assert!(err(with(|l| l.persistent_grants = 0), 64).contains("--persistent-grants"));
        assert!(err(with(|l| l.lro_flows_per_guest = 0), 64).contains("--lro-flows-per-guest"));
        let e = err(with(|l| l.lro_flows_per_guest = 33), 64);
        assert!(e.contains("between 1 and 32"), "{e}");
    }

    #[test]
    fn config_without_limits_takes_the_defaults() {
        let mut v = serde_json::to_value(DaemonConfig::default()).unwrap();
        v.as_object_mut().unwrap().remove("limits");
        let c: DaemonConfig = serde_json::from_value(v).unwrap();
        assert_eq!(c.limits, Limits::default());
        // One cap given, the others default.
        let c: DaemonConfig = serde_json::from_value(serde_json::json!({
            "id": "abc", "mode": "xen", "guests": 1, "attach": 0, "budget": 64,
            "cpu": 0, "rps": true, "limits": {"rx_queue_packets": 256}
        }))
        .unwrap();
        assert_eq!(c.limits.rx_queue_packets, 256);
        assert_eq!(c.limits.rx_queue_bytes, Limits::default().rx_queue_bytes);
    }

    #[test]
    fn vif_rates_give_each_vif_its_own_or_the_common_one_and_name_what_is_wrong() {
        let specs = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let r = vif_rates(&specs(&["100Mb/s", "g1=1Gb/s@10ms"]), Mode::Xen, 3, 1).unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!(r[&0], TxRate::parse("100Mb/s").unwrap());
        assert_eq!(
            r[&1],
            TxRate {
                bytes: 1_250_000,
                usec: 10_000
            }
        );
        assert_eq!(r[&2], r[&0]);
        // Only one guest limited.
        let r = vif_rates(&specs(&["g2=8Mb"]), Mode::Xen, 3, 0).unwrap();
        assert_eq!(r.keys().copied().collect::<Vec<_>>(), vec![2]);
        assert!(vif_rates(&[], Mode::Xen, 3, 0).unwrap().is_empty());
        let err = |v: &[&str], mode, vifs, hvm| {
            vif_rates(&specs(v), mode, vifs, hvm)
                .unwrap_err()
                .to_string()
        };
        assert!(err(&["g3=1Mb"], Mode::Xen, 3, 0).contains("g0 to g2"));
        assert!(err(&["g1=1Mb"], Mode::Xen, 1, 0).contains("one PV guest, g0"));
        assert!(err(&["g1=1Mb"], Mode::Xen, 1, 1).contains("HVM guest"));
        assert!(err(&["1Mb"], Mode::Relay, 1, 0).contains("--mode xen"));
        assert!(err(&["g0=off"], Mode::Xen, 1, 0).contains("pvnet set"));
        assert!(err(&["x0=1Mb"], Mode::Xen, 1, 0).contains("g0, g1"));
        assert!(err(&["g0=fast"], Mode::Xen, 1, 0).contains("xl's `rate=`"));
        assert_eq!(parse_vif_rate("g4=off").unwrap(), (Some(4), None));
        assert_eq!(parse_vif_rate("off").unwrap(), (None, None));
    }

    #[test]
    fn config_without_vif_rates_has_none_and_rates_round_trip() {
        let mut v = serde_json::to_value(DaemonConfig::default()).unwrap();
        v.as_object_mut().unwrap().remove("vif_rates");
        let c: DaemonConfig = serde_json::from_value(v).unwrap();
        assert!(c.vif_rates.is_empty());
        let mut c = DaemonConfig::default();
        c.vif_rates.insert(
            3,
            TxRate {
                bytes: 7,
                usec: 100,
            },
        );
        let back: DaemonConfig = serde_json::from_value(serde_json::to_value(&c).unwrap()).unwrap();
        assert_eq!(back.vif_rates, c.vif_rates);
    }
}
