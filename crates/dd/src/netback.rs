//! netback: the driver domain's half of a vif (Linux `drivers/net/xen-netback`), reduced to
//! its ring logic. It knows nothing of processes or event loops: the daemon, the tests and a
//! fuzzer drive the same code.
//!
//! Every value read from the rings is copied out once and then validated (docs/architecture.md, "Invariants"). A
//! frontend that breaks the protocol makes [`Netback`] return a [`Fatal`]; from then on the
//! vif touches neither ring again, and the owner disconnects it. Each fatal reason and each
//! drop has its own counter in [`VifStats`].
//!
//! # Grant mechanisms
//!
//! How packet bytes cross between the guest's granted pages and the driver domain is chosen
//! per vif at connect time ([`Config::mechanism`], [`Mechanism`]):
//!
//! - **copy** (the default): batched `GNTTABOP_copy`, as Linux netback does since 2.6.x; the
//!   hypervisor pins, copies and unpins per op.
//! - **map**: per packet, every granted page is mapped into the driver domain (a real mapping:
//!   an `mmap` of that page of the guest's memory, `GNTTABOP_map_grant_ref`), the bytes are
//!   copied through the mapping, and the page is unmapped before the next packet (so
//!   `grant_maps == grant_unmaps` between packets). On TX the first [`TX_COPY_LEN`] bytes (the
//!   headers) are grant-copied and only the rest is mapped, as Linux netback does with
//!   `XEN_NETBACK_TX_COPY_LEN`.
//! - **persistent**: the backend keeps its mappings of the frontend's grants in a table and
//!   reuses them (HP Labs' "keep a table of current guest page mappings in netback", and
//!   blkif's `feature-persistent`). Negotiated through the store: the backend advertises
//!   `feature-persistent` = 1, the frontend answers `feature-persistent` = 1 when it promises to
//!   keep reusing a bounded set of grant references (at most [`Config::persistent_max`], by
//!   default twice the ring size: netfront's 256 RX buffers and 256 TX pages). Without the
//!   frontend's promise a vif configured `persistent` runs `map`.
//! - **premapped** and **static**: the frontend grants a fixed pool of pages once at connect,
//!   netback maps it once ([`Netback::attach_pool`]) and keeps it until disconnect; ring
//!   requests name pool slots; each packet is one bounded `memcpy` with no grant operation.
//!   Under `static` the pool is a bounce buffer the frontend copies out of (RX) and into (TX).
//!   Negotiated as `feature-premapped` / `feature-static-buffer`; see [`crate::pool`].
//!
//! ## Persistent grants: the order of revocation and unmap
//!
//! The frontend may end access to any of its grants at any time, and the backend must never
//! write (or read) a page that is no longer granted to it. Xen's rule that `end_foreign_access`
//! fails while the grantee holds the entry pinned (`GTF_reading`/`GTF_writing`; Linux then
//! defers the revocation) holds in pvnet's hv too. A persistent mapping therefore holds **no
//! pin between uses**: the table keeps the `mmap`, not the pin
//! ([`pvnet_hv::grant::PersistentMapping`]). The protocol:
//!
//! 1. *Use.* Every copy through a table entry first pins the grant
//!    ([`pvnet_hv::grant::PersistentMapping::access`]), which checks — as a grant copy would —
//!    that the entry still grants that frame to the driver domain, writable for RX; the bytes
//!    are copied while the pin is held and the pin is dropped right after (one run of ops of a
//!    batch).
//! 2. *Revocation by the frontend.* `end_access` is a compare-and-swap that fails while a pin
//!    is held, so it can only succeed between two uses; the frontend retries a refused
//!    revocation later (Linux's deferred list). Once it has succeeded, every later pin fails:
//!    the backend never touches the page again, though it may still have it mapped.
//! 3. *Discovery by the backend.* A request naming a revoked grant fails its pin: the entry is
//!    unmapped (an eviction) and the vif ends with [`Fatal::RxGrantRevoked`] /
//!    [`Fatal::TxGrantRevoked`] (posting a buffer you no longer grant is a protocol violation,
//!    as it is under copy). A grant that was ended and granted again for another frame fails
//!    the frame check: the stale mapping is evicted and the grant mapped afresh (a miss).
//! 4. *Bound.* A miss when the table is full first evicts every entry whose grant has ended
//!    or moved (a snapshot check; a wrong snapshot is harmless since step 1 still guards every
//!    use). If the table is still full the frontend broke its promise:
//!    [`Fatal::PersistentOverflow`].
//! 5. *Unmap.* Evicted entries are unmapped at once; every entry is unmapped when the vif is
//!    disconnected ([`Netback::unmap_all`]) or fails (a [`Fatal`]).
//!
//! ## Page flipping (`flip`)
//!
//! Xen's original receive path (`feature-rx-flip`; Linux netfront writes `request-rx-copy`
//! = 0 to ask for it): every RX request carries a grant of type `GTF_accept_transfer` naming
//! the guest page it gives up; netback hands the guest the driver-domain frame that holds the
//! packet with `GNTTABOP_transfer` ([`Hypervisor::transfer`]) and gets the guest's frame in
//! exchange, and the guest remaps its pfn to the new frame before reading the packet
//! (see [`pvnet_hv::frames`] for the frames, the P2M and the remapping). A packet that did not
//! arrive in a driver-domain frame (from the driver domain's own stack, or detached from a
//! frame while it waited) is first copied into a free frame of the pool (`rx_flip_copied`);
//! when the pool has none the packet is answered with an error (`rx_flip_no_frame`).
//!
//! Under `flip` the vif carries one page per packet: netback ignores the frontend's `sg` and
//! GSO features for RX (aggregates are cut back into segments), as flipping a 64 KiB
//! aggregate would need its segments page aligned, which neither the port nor Xen's netback
//! provided. TX stays on grant copy, as it did in Xen; a TX packet that fits a page is copied
//! into a free driver-domain frame rather than onto the heap (`tx_into_frame`), so that a
//! packet from one guest to a flip guest is flipped on without a second copy: the seed's old
//! guest-to-guest path (`g2g-flip`: one grant copy, then a flip). A transfer the hypervisor refuses (a
//! grant that is not an offer to the driver domain, a page outside the guest's flip window)
//! ends the vif: [`Fatal::RxBadGref`] for a reference beyond the table,
//! [`Fatal::RxFlipRefused`] otherwise.
//!
//! Under persistent grants the frontend's RX buffers stay granted while it reads them: it
//! trusts the backend not to write a buffer it has answered (as blkfront trusts blkback), but
//! it can always take a page back by ending access first.

use std::collections::VecDeque;
use std::sync::Arc;

use pvnet_hv::evtchn::EvtchnEnd;
use pvnet_hv::grant::{
    AccessError, CopyFromGuest, CopyToGuest, GntStatus, GrantMapping, Hypervisor, PersistentMapping,
};
use pvnet_hv::{DomId, GrantRef, PAGE_SIZE};
use pvnet_netif::csum::{vnet_gso_to_xen, vnet_hdr_for};
use pvnet_netif::*;
use pvnet_wire::vnet::{self, VirtioNetHdr};
use serde::{Deserialize, Serialize};

use crate::frameport::FramePool;
use crate::packet::Packet;
use crate::pool::{Pool, PoolSpec, POOL_AUDIT_EVERY};
use credit::{Credit, TxRate};

pub mod credit;
mod g2g;
pub use g2g::{Direct, Refusal, RxDirect, TxHead, G2G_HEAD_LEN};

/// The largest packet a guest may receive or send: 64 KiB of IP plus an Ethernet header.
pub const MAX_PACKET: usize = 65535 + 14;
/// What an Ethernet frame adds to its MTU-sized payload: the header and a VLAN tag.
pub const FRAME_OVERHEAD: usize = 18;
/// Largest non-GSO frame accepted from a guest by default (MTU 1500 + Ethernet + VLAN tag);
/// [`Netback::set_mtu`] changes it.
pub const MAX_NON_GSO_FRAME: usize = 1500 + FRAME_OVERHEAD;
/// Default bound of the queue of packets waiting for RX requests: a guest's cap on queued
/// packets (drops beyond it: `rx_queue_full`).
pub const RX_QUEUE_LIMIT: usize = 1024;
/// Default bound of the bytes of packet data queued for one guest: its memory cap in the
/// driver domain (drops beyond it: `rx_queue_memory_full`). 16 MiB holds 256 full 64 KiB
/// aggregates, more than ten RX rings' worth.
pub const RX_QUEUE_BYTES: usize = 16 << 20;
/// Packets handled per RX batch (one grant-copy call).
const RX_BATCH: usize = 64;
/// Bytes of a TX packet's first slot that the `map` mechanism grant-copies rather than maps:
/// the headers (Linux netback's `XEN_NETBACK_TX_COPY_LEN`).
pub const TX_COPY_LEN: usize = 128;
/// Default bound of the persistent-grant table: twice the ring size (a full RX ring of buffers
/// plus a full TX ring of pages).
pub const PERSISTENT_MAX: usize = 2 * RxRing::SIZE as usize;

/// How packet bytes cross between the guest's granted pages and the driver domain (see the
/// module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    /// Batched grant copy (`GNTTABOP_copy`).
    #[default]
    Copy,
    /// Map each granted page per packet, copy through the mapping, unmap.
    Map,
    /// Keep mappings of the frontend's grants in a bounded table and reuse them.
    Persistent,
    /// The frontend's pool of packet pages, granted once and mapped once at connect; one copy
    /// per packet, no grant operation ([`crate::pool`]).
    Premapped,
    /// A bounce buffer granted once and mapped once at connect: the backend copies into it,
    /// the frontend out of it (two copies per packet, no grant operation; [`crate::pool`]).
    Static,
    /// RX: give the guest the driver-domain frame holding the packet (page flip); TX: copy.
    Flip,
}

impl Mechanism {
    /// Every mechanism, in the order of the docs.
    pub const ALL: [Mechanism; 6] = [
        Mechanism::Copy,
        Mechanism::Map,
        Mechanism::Persistent,
        Mechanism::Premapped,
        Mechanism::Static,
        Mechanism::Flip,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Copy => "copy",
            Mechanism::Map => "map",
            Mechanism::Persistent => "persistent",
            Mechanism::Premapped => "premapped",
            Mechanism::Static => "static",
            Mechanism::Flip => "flip",
        }
    }

    /// Whether the mechanism runs on a pool granted and mapped once ([`crate::pool`]).
    pub fn is_pool(self) -> bool {
        matches!(self, Mechanism::Premapped | Mechanism::Static)
    }
}

impl std::fmt::Display for Mechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Mechanism {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Mechanism::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown grant mechanism {s:?} (copy, map, persistent, premapped, static or flip)"
                )
            })
    }
}

/// netback's connect-time configuration of one vif.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// The grant mechanism the vif runs (after negotiation: [`Config::negotiated`]).
    pub mechanism: Mechanism,
    /// Most grants the persistent table holds: the guest's cap on data-page mappings (a
    /// frontend that needs more fails with `persistent_overflow`).
    pub persistent_max: usize,
    /// Most bytes of packet data queued for the guest ([`RX_QUEUE_BYTES`]).
    pub rx_queue_bytes: usize,
    /// Most packets queued for the guest ([`RX_QUEUE_LIMIT`]).
    pub rx_queue_packets: usize,
    /// The guest's transmit rate ([`credit`]); none: unlimited.
    pub tx_rate: Option<TxRate>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            mechanism: Mechanism::Copy,
            persistent_max: PERSISTENT_MAX,
            rx_queue_bytes: RX_QUEUE_BYTES,
            rx_queue_packets: RX_QUEUE_LIMIT,
            tx_rate: None,
        }
    }
}

impl Config {
    /// The configuration for a vif whose owner wants `wanted` and whose frontend did or did
    /// not write `feature-persistent` = 1: `persistent` needs the frontend's promise and
    /// falls back to `map` without it.
    pub fn negotiated(wanted: Mechanism, frontend_persistent: bool) -> Config {
        Self::negotiated_with(wanted, frontend_persistent, wanted == Mechanism::Flip)
    }

    /// [`Config::negotiated`], also knowing whether the frontend asked for page flipping
    /// (`request-rx-copy` = 0): `flip` without it runs `copy`.
    pub fn negotiated_with(
        wanted: Mechanism,
        frontend_persistent: bool,
        frontend_flip: bool,
    ) -> Config {
        let mechanism = match wanted {
            Mechanism::Persistent if !frontend_persistent => Mechanism::Map,
            Mechanism::Flip if !frontend_flip => Mechanism::Copy,
            m => m,
        };
        Config {
            mechanism,
            ..Config::default()
        }
    }
}

/// What the frontend advertised in xenstore.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Features {
    pub sg: bool,
    pub gso_tcpv4: bool,
    pub gso_tcpv6: bool,
    pub rx_notify: bool,
}

/// Why a vif was disconnected. Each has a counter of the same name in [`VifStats`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fatal {
    /// TX `req_prod` more than a ring ahead of `req_cons`.
    TxRingOverflow,
    /// RX `req_prod` more than a ring ahead of `req_cons`.
    RxRingOverflow,
    /// A TX slot's offset + size crosses its 4 KiB page.
    TxCrossPage,
    /// The first TX slot (whole packet) is shorter than an Ethernet header.
    TxRunt,
    /// A TX packet uses more than `XEN_NETIF_NR_SLOTS_MIN` data slots.
    TxTooManySlots,
    /// An extra-info slot of an unknown or unsupported type, or a malformed GSO extra.
    TxBadExtra,
    /// Slot sizes that don't add up to the size announced in the first slot.
    TxBadSize,
    /// A TX grant reference outside the guest's grant table.
    TxBadGref,
    /// Any other TX grant copy failure (not granted to us, bad page, ...).
    TxCopyFailed,
    /// An RX grant reference outside the guest's grant table.
    RxBadGref,
    /// Any other RX grant copy failure (read-only grant, not granted to us, ...).
    RxCopyFailed,
    /// `map`/`persistent`: an RX grant could not be mapped (not granted to us, read-only, bad
    /// page, ...).
    RxMapFailed,
    /// `map`/`persistent`: a TX grant could not be mapped.
    TxMapFailed,
    /// `persistent`: an RX request names a grant the frontend has ended access to.
    RxGrantRevoked,
    /// `persistent`: a TX request names a grant the frontend has ended access to.
    TxGrantRevoked,
    /// `persistent`: the frontend uses more live grants than the table's bound.
    PersistentOverflow,
    /// `premapped`/`static`: an RX request names a slot outside the pool's RX slots.
    RxPoolBadSlot,
    /// `premapped`/`static`: a TX request names a slot outside the pool's TX slots.
    TxPoolBadSlot,
    /// `premapped`/`static`: a grant of the pool could not be mapped at connect.
    PoolMapFailed,
    /// `premapped`/`static`: the audit found a pool grant entry rewritten while mapped.
    PoolRevoked,
    /// `flip`: the hypervisor refused a transfer (the grant is not an offer to the driver
    /// domain, or names a page outside the guest's flip window).
    RxFlipRefused,
}

impl Fatal {
    pub fn name(self) -> &'static str {
        match self {
            Fatal::TxRingOverflow => "tx_ring_overflow",
            Fatal::RxRingOverflow => "rx_ring_overflow",
            Fatal::TxCrossPage => "tx_cross_page",
            Fatal::TxRunt => "tx_runt",
            Fatal::TxTooManySlots => "tx_too_many_slots",
            Fatal::TxBadExtra => "tx_bad_extra",
            Fatal::TxBadSize => "tx_bad_size",
            Fatal::TxBadGref => "tx_bad_gref",
            Fatal::TxCopyFailed => "tx_copy_failed",
            Fatal::RxBadGref => "rx_bad_gref",
            Fatal::RxCopyFailed => "rx_copy_failed",
            Fatal::RxMapFailed => "rx_map_failed",
            Fatal::TxMapFailed => "tx_map_failed",
            Fatal::RxGrantRevoked => "rx_grant_revoked",
            Fatal::TxGrantRevoked => "tx_grant_revoked",
            Fatal::PersistentOverflow => "persistent_overflow",
            Fatal::RxPoolBadSlot => "rx_pool_bad_slot",
            Fatal::TxPoolBadSlot => "tx_pool_bad_slot",
            Fatal::PoolMapFailed => "pool_map_failed",
            Fatal::PoolRevoked => "pool_revoked",
            Fatal::RxFlipRefused => "rx_flip_refused",
        }
    }
}

/// Counters of one vif. Kept by the owner across reconnects.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct VifStats {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub rx_slots: u64,
    pub rx_gso_packets: u64,
    /// Wire segments the packets delivered carried: one per packet, a GSO packet's payload
    /// over its segment size. Over `rx_packets`, this guest's aggregation rate.
    pub rx_segments: u64,
    pub rx_notifications: u64,
    pub rx_copy_ops: u64,
    pub rx_copy_batches: u64,
    /// Dropped: the RX queue was full (the guest did not post buffers fast enough).
    pub rx_queue_full: u64,
    /// Dropped: the bytes queued for the guest reached its memory cap
    /// ([`Config::rx_queue_bytes`]).
    pub rx_queue_memory_full: u64,
    /// Dropped: multi-slot packet for a frontend without feature-sg.
    pub rx_no_sg: u64,
    /// GSO packets of a type the frontend did not advertise, cut back into wire segments.
    pub rx_gso_segmented: u64,
    /// Dropped: a GSO packet of a type the frontend did not advertise that could not be cut
    /// into segments (malformed headers).
    pub rx_gso_unsupported: u64,
    /// Dropped: empty or larger than [`MAX_PACKET`].
    pub rx_bad_length: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub tx_slots: u64,
    pub tx_gso_packets: u64,
    pub tx_notifications: u64,
    pub tx_copy_ops: u64,
    /// TX polls that stopped for want of credit: the guest sent at its rate ([`credit`]).
    pub tx_credit_waits: u64,
    /// Bytes charged to the guest's credit (the packets' sizes, as Xen's netback counts).
    pub tx_credit_charged: u64,
    /// Dropped with an error response: non-GSO frame over [`MAX_NON_GSO_FRAME`].
    pub tx_oversize: u64,
    /// Dropped with an error response: csum_blank on a packet whose headers can't be parsed.
    pub tx_bad_csum: u64,
    pub tx_ring_overflow: u64,
    pub rx_ring_overflow: u64,
    pub tx_cross_page: u64,
    pub tx_runt: u64,
    pub tx_too_many_slots: u64,
    pub tx_bad_extra: u64,
    pub tx_bad_size: u64,
    pub tx_bad_gref: u64,
    pub tx_copy_failed: u64,
    pub rx_bad_gref: u64,
    pub rx_copy_failed: u64,
    pub rx_map_failed: u64,
    pub tx_map_failed: u64,
    pub rx_grant_revoked: u64,
    pub tx_grant_revoked: u64,
    pub persistent_overflow: u64,
    pub rx_flip_refused: u64,
    /// `flip`: packets handed to the guest by page transfer.
    pub rx_flips: u64,
    /// `flip`: packets copied into a driver-domain frame first (they had not arrived in one).
    pub rx_flip_copied: u64,
    /// `flip`: packets answered with an error because no driver-domain frame was free.
    pub rx_flip_no_frame: u64,
    /// `flip`: TX packets grant-copied into a driver-domain frame (flipped on as they are
    /// if they go to a flip guest) rather than onto the heap.
    pub tx_into_frame: u64,
    /// The grant mechanism of the vif's last connection.
    pub grant_mechanism: Mechanism,
    /// Data pages mapped by `map` and `persistent` (ring pages not counted).
    pub grant_maps: u64,
    /// Data pages unmapped again.
    pub grant_unmaps: u64,
    /// `persistent`: page uses served by a mapping already in the table.
    pub persistent_hits: u64,
    /// `persistent`: page uses that had to map the grant first.
    pub persistent_misses: u64,
    /// `persistent`: table entries dropped because their grant ended, moved to another frame,
    /// or was mapped read-only and is now written.
    pub persistent_evictions: u64,
    /// `persistent`: grants mapped in the table now.
    pub persistent_mapped: u64,
    pub rx_pool_bad_slot: u64,
    pub tx_pool_bad_slot: u64,
    pub pool_map_failed: u64,
    pub pool_revoked: u64,
    /// `premapped`/`static`: pool pages mapped (once per slot per connection).
    pub pool_maps: u64,
    /// `premapped`/`static`: pool pages unmapped (at disconnect or failure).
    pub pool_unmaps: u64,
    /// `premapped`/`static`: pool pages mapped now.
    pub pool_mapped: u64,
    /// `premapped`/`static`: audits of the pool's grant entries.
    pub pool_audits: u64,
    /// `premapped`: copies (one per ring slot) between a packet and the frontend's premapped
    /// packet pages.
    pub premapped_copies: u64,
    /// `static`: copies (one per ring slot) between a packet and the static buffer.
    pub static_copies: u64,
    /// The frontend asked for a pool mechanism the backend did not offer (or for both): the
    /// vif was refused at connect (counted by the toolstack, which owns the handshake).
    pub feature_refused: u64,
    /// Frames this guest sent that went straight into another guest's buffers
    /// ([`Netback::tx_poll_direct`]).
    pub tx_direct_packets: u64,
    /// Frames whose headers did not parse within [`G2G_HEAD_LEN`] bytes: copied out whole.
    pub tx_head_unparsed: u64,
    /// Frames this guest received straight from another guest's grants
    /// ([`Netback::rx_direct`]).
    pub rx_direct_packets: u64,
    /// Frames lost on their way in because the sender's grants failed the copy; their RX
    /// requests were answered with `NETIF_RSP_ERROR`.
    pub rx_peer_copy_failed: u64,
}

/// How many wire segments a packet of `len` bytes delivered to a guest carries: 1, or for a
/// GSO packet its payload (`len` past the vnet header's `hdr_len`) over `gso_size`, rounded up.
/// The header comes from the daemon's aggregation, the port or another guest: a zero segment
/// size or a header past the end counts as one segment.
fn wire_segments(len: usize, vnet: &VirtioNetHdr) -> u64 {
    let payload = len.saturating_sub(usize::from(vnet.hdr_len));
    if vnet.gso_kind() == vnet::GSO_NONE || vnet.gso_size == 0 || payload == 0 {
        return 1;
    }
    payload.div_ceil(usize::from(vnet.gso_size)) as u64
}

impl VifStats {
    fn count_fatal(&mut self, f: Fatal) {
        let c = match f {
            Fatal::TxRingOverflow => &mut self.tx_ring_overflow,
            Fatal::RxRingOverflow => &mut self.rx_ring_overflow,
            Fatal::TxCrossPage => &mut self.tx_cross_page,
            Fatal::TxRunt => &mut self.tx_runt,
            Fatal::TxTooManySlots => &mut self.tx_too_many_slots,
            Fatal::TxBadExtra => &mut self.tx_bad_extra,
            Fatal::TxBadSize => &mut self.tx_bad_size,
            Fatal::TxBadGref => &mut self.tx_bad_gref,
            Fatal::TxCopyFailed => &mut self.tx_copy_failed,
            Fatal::RxBadGref => &mut self.rx_bad_gref,
            Fatal::RxCopyFailed => &mut self.rx_copy_failed,
            Fatal::RxMapFailed => &mut self.rx_map_failed,
            Fatal::TxMapFailed => &mut self.tx_map_failed,
            Fatal::RxGrantRevoked => &mut self.rx_grant_revoked,
            Fatal::TxGrantRevoked => &mut self.tx_grant_revoked,
            Fatal::PersistentOverflow => &mut self.persistent_overflow,
            Fatal::RxPoolBadSlot => &mut self.rx_pool_bad_slot,
            Fatal::TxPoolBadSlot => &mut self.tx_pool_bad_slot,
            Fatal::PoolMapFailed => &mut self.pool_map_failed,
            Fatal::PoolRevoked => &mut self.pool_revoked,
            Fatal::RxFlipRefused => &mut self.rx_flip_refused,
        };
        *c += 1;
    }
}

/// A TX packet's slots, collected across calls until the chain is complete.
#[derive(Default)]
struct TxPartial {
    /// The first request (announces the total size), if seen.
    first: Option<TxRequest>,
    /// Extra-info slots seen so far.
    extras: Vec<ExtraInfo>,
    /// Whether another extra slot is expected next.
    want_extra: bool,
    /// Data slots after the first.
    rest: Vec<TxRequest>,
    /// Whether another data slot is expected.
    want_data: bool,
}

impl TxPartial {
    fn complete(&self) -> bool {
        self.first.is_some() && !self.want_extra && !self.want_data
    }
    fn clear(&mut self) {
        self.first = None;
        self.extras.clear();
        self.want_extra = false;
        self.rest.clear();
        self.want_data = false;
    }
}

/// A complete TX packet whose slots agree with each other ([`Netback::tx_check`]).
#[derive(Clone, Copy)]
struct TxChecked {
    first: TxRequest,
    /// The whole packet's length (the first slot's size).
    total: usize,
    /// The first slot's own share of it.
    first_len: usize,
    gso: Option<GsoInfo>,
    /// `NETIF_RSP_OKAY`, or `NETIF_RSP_ERROR` for a packet refused whole (over the MTU).
    status: i16,
}

/// Why a page could not be reached through `map` or `persistent`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GrantFail {
    BadGref,
    MapFailed,
    Revoked,
    Overflow,
}

impl GrantFail {
    fn of_map(st: GntStatus) -> GrantFail {
        if st == GntStatus::BadGntref {
            GrantFail::BadGref
        } else {
            GrantFail::MapFailed
        }
    }

    fn fatal(self, rx: bool) -> Fatal {
        match (self, rx) {
            (GrantFail::BadGref, true) => Fatal::RxBadGref,
            (GrantFail::BadGref, false) => Fatal::TxBadGref,
            (GrantFail::MapFailed, true) => Fatal::RxMapFailed,
            (GrantFail::MapFailed, false) => Fatal::TxMapFailed,
            (GrantFail::Revoked, true) => Fatal::RxGrantRevoked,
            (GrantFail::Revoked, false) => Fatal::TxGrantRevoked,
            (GrantFail::Overflow, _) => Fatal::PersistentOverflow,
        }
    }
}

/// The persistent-grant table: the backend's mappings of the frontend's grants, indexed by
/// grant reference, at most `max` of them (see the module docs for the protocol).
struct PersistentTable {
    slots: Vec<Option<PersistentMapping>>,
    live: usize,
    max: usize,
}

impl PersistentTable {
    fn new(nr_entries: u32, max: usize) -> PersistentTable {
        PersistentTable {
            slots: (0..nr_entries).map(|_| None).collect(),
            live: 0,
            max: max.max(1),
        }
    }

    fn evict(&mut self, gref: usize, stats: &mut VifStats) {
        if self.slots[gref].take().is_some() {
            self.live -= 1;
            stats.persistent_evictions += 1;
            stats.grant_unmaps += 1;
        }
    }

    /// Evicts every entry whose grant has ended or moved (a snapshot: each use still pins).
    fn purge(&mut self, stats: &mut VifStats) {
        for g in 0..self.slots.len() {
            if self.slots[g].as_ref().is_some_and(|m| !m.still_granted()) {
                self.evict(g, stats);
            }
        }
    }

    /// Unmaps everything (disconnect). Not evictions.
    fn clear(&mut self, stats: &mut VifStats) {
        for s in self.slots.iter_mut() {
            if s.take().is_some() {
                stats.grant_unmaps += 1;
            }
        }
        self.live = 0;
    }

    /// Runs `f` on the page of grant `gref`, pinned for the call: through the table's mapping
    /// (a hit), or after mapping the grant into the table (a miss).
    #[allow(clippy::too_many_arguments)]
    fn with_page(
        &mut self,
        hv: &Hypervisor,
        domid: DomId,
        gref: u32,
        write: bool,
        stats: &mut VifStats,
        f: impl FnOnce(*mut u8),
    ) -> Result<(), GrantFail> {
        let g = gref as usize;
        if g >= self.slots.len() {
            return Err(GrantFail::BadGref);
        }
        // Two rounds at most: a stale mapping (the grant moved to another frame) is replaced.
        for _ in 0..2 {
            if self.slots[g]
                .as_ref()
                .is_some_and(|m| write && !m.writable())
            {
                // Mapped read-only for TX, now an RX buffer: map it again writable.
                self.evict(g, stats);
            }
            let hit = self.slots[g].is_some();
            if !hit {
                if self.live >= self.max {
                    self.purge(stats);
                    if self.live >= self.max {
                        return Err(GrantFail::Overflow);
                    }
                }
                let m = hv
                    .map_grant_persistent(DomId::DRIVER, domid, GrantRef(gref), !write)
                    .map_err(GrantFail::of_map)?;
                stats.grant_maps += 1;
                stats.persistent_misses += 1;
                self.slots[g] = Some(m);
                self.live += 1;
            }
            let m = self.slots[g].as_ref().expect("mapped above");
            let refused = match m.access(write) {
                Ok(a) => {
                    if hit {
                        stats.persistent_hits += 1;
                    }
                    f(a.ptr());
                    return Ok(());
                }
                Err(AccessError::Moved) => false,
                Err(AccessError::Refused(_)) => true,
            };
            self.evict(g, stats);
            if refused {
                return Err(GrantFail::Revoked);
            }
        }
        Err(GrantFail::Revoked)
    }
}

/// The backend of one connected vif.
pub struct Netback {
    domid: DomId,
    hv: Arc<Hypervisor>,
    evtchn: EvtchnEnd,
    features: Features,
    tx: BackRing<TxRing, GrantMapping>,
    rx: BackRing<RxRing, GrantMapping>,
    rxq: VecDeque<Packet>,
    rxq_limit: usize,
    /// Bytes of the packets in `rxq`, and their bound.
    rxq_bytes: usize,
    rxq_bytes_limit: usize,
    /// Largest non-GSO frame taken from the guest; longer ones are refused (`tx_oversize`).
    max_frame: usize,
    tx_partial: TxPartial,
    fatal: Option<Fatal>,
    /// Scratch for RX requests taken in a batch (reused, no allocation per packet).
    rx_reqs: Vec<RxRequest>,
    mechanism: Mechanism,
    persistent: PersistentTable,
    /// `premapped`/`static`: the frontend's pool, mapped once ([`Netback::attach_pool`]).
    pool: Pool,
    /// Packets since the pool's last audit.
    since_audit: u64,
    /// `flip`: the driver domain's frames.
    frames: Option<Arc<FramePool>>,
    /// The guest's transmit credit ([`credit`]), and the time the owner gave for the next TX
    /// poll ([`Netback::set_now`]).
    tx_credit: Option<Credit>,
    now_ns: u64,
    /// The last TX poll stopped for want of credit: when the next window starts.
    tx_credit_wait: Option<u64>,
    pub stats: VifStats,
}

impl Netback {
    /// Connects to rings the frontend granted: maps both ring pages writable. Runs the
    /// default mechanism (grant copy).
    pub fn connect(
        hv: Arc<Hypervisor>,
        domid: DomId,
        tx_ref: GrantRef,
        rx_ref: GrantRef,
        evtchn: EvtchnEnd,
        features: Features,
    ) -> Result<Netback, GntStatus> {
        Self::connect_with(
            hv,
            domid,
            tx_ref,
            rx_ref,
            evtchn,
            features,
            Config::default(),
        )
    }

    /// [`Netback::connect`] with a connect-time [`Config`] (the grant mechanism).
    pub fn connect_with(
        hv: Arc<Hypervisor>,
        domid: DomId,
        tx_ref: GrantRef,
        rx_ref: GrantRef,
        evtchn: EvtchnEnd,
        features: Features,
        config: Config,
    ) -> Result<Netback, GntStatus> {
        let txm = hv.map_grant(DomId::DRIVER, domid, tx_ref, false)?;
        let rxm = hv.map_grant(DomId::DRIVER, domid, rx_ref, false)?;
        let nr_entries = match config.mechanism {
            Mechanism::Persistent => hv.nr_grant_entries(domid).unwrap_or(0),
            _ => 0,
        };
        let mut features = features;
        if config.mechanism == Mechanism::Flip {
            // One page per packet (module docs, "Page flipping").
            features.sg = false;
            features.gso_tcpv4 = false;
            features.gso_tcpv6 = false;
        }
        Ok(Netback {
            domid,
            hv,
            evtchn,
            features,
            tx: BackRing::attach(txm),
            rx: BackRing::attach(rxm),
            rxq: VecDeque::new(),
            rxq_limit: config.rx_queue_packets.max(1),
            rxq_bytes: 0,
            rxq_bytes_limit: config.rx_queue_bytes.max(MAX_PACKET),
            max_frame: MAX_NON_GSO_FRAME,
            tx_partial: TxPartial::default(),
            fatal: None,
            rx_reqs: Vec::with_capacity(RX_BATCH * 20),
            mechanism: config.mechanism,
            persistent: PersistentTable::new(nr_entries, config.persistent_max),
            pool: Pool::default(),
            since_audit: 0,
            frames: None,
            tx_credit: config.tx_rate.map(Credit::new),
            now_ns: 0,
            tx_credit_wait: None,
            stats: VifStats {
                grant_mechanism: config.mechanism,
                ..VifStats::default()
            },
        })
    }

    /// `flip`: the driver domain's frames to flip from (without a pool a `flip` vif answers
    /// every packet with an error, counted in `rx_flip_no_frame`).
    pub fn set_frame_pool(&mut self, pool: Arc<FramePool>) {
        self.frames = Some(pool);
    }

    /// The grant mechanism this vif runs.
    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    /// Unmaps every persistent mapping and the pool (on disconnect; also done when the vif
    /// fails).
    pub fn unmap_all(&mut self) {
        self.persistent.clear(&mut self.stats);
        self.stats.persistent_mapped = 0;
        self.stats.pool_unmaps += self.pool.clear();
        self.stats.pool_mapped = 0;
    }

    /// `premapped`/`static`: maps the frontend's pool once, for the vif's life ([`crate::pool`]).
    /// A grant that cannot be mapped ends the vif with [`Fatal::PoolMapFailed`]; so does a
    /// second call, or a call on a vif of another mechanism. Until a pool is attached, every
    /// request of a pool vif names a slot outside it.
    pub fn attach_pool(&mut self, spec: PoolSpec) -> Result<(), Fatal> {
        if let Some(f) = self.fatal {
            return Err(f);
        }
        if !self.mechanism.is_pool() || self.pool.len() > 0 {
            return Err(self.fail(Fatal::PoolMapFailed));
        }
        match Pool::map(&self.hv, self.domid, spec) {
            Ok(pool) => {
                self.stats.pool_maps += pool.len() as u64;
                self.stats.pool_mapped = pool.len() as u64;
                self.pool = pool;
                Ok(())
            }
            Err((_, mapped)) => {
                // Those mapped before the failure were unmapped again by the drop.
                self.stats.pool_maps += mapped;
                self.stats.pool_unmaps += mapped;
                Err(self.fail(Fatal::PoolMapFailed))
            }
        }
    }

    /// `premapped`/`static`: checks that every pool grant entry still grants its mapped frame;
    /// ends the vif with [`Fatal::PoolRevoked`] if one was rewritten (see [`crate::pool`]). Runs
    /// by itself every [`POOL_AUDIT_EVERY`] packets.
    pub fn audit_pool(&mut self) -> Result<(), Fatal> {
        if let Some(f) = self.fatal {
            return Err(f);
        }
        self.since_audit = 0;
        if self.pool.len() == 0 {
            return Ok(());
        }
        self.stats.pool_audits += 1;
        if self.pool.audit() {
            Ok(())
        } else {
            Err(self.fail(Fatal::PoolRevoked))
        }
    }

    /// Counts `n` packets towards the next pool audit, and runs it when due.
    fn pool_tick(&mut self, n: usize) -> Result<(), Fatal> {
        if self.pool.len() == 0 {
            return Ok(());
        }
        self.since_audit += n as u64;
        if self.since_audit >= POOL_AUDIT_EVERY {
            self.audit_pool()?;
        }
        Ok(())
    }

    pub fn domid(&self) -> DomId {
        self.domid
    }

    pub fn features(&self) -> Features {
        self.features
    }

    pub fn evtchn(&self) -> &EvtchnEnd {
        &self.evtchn
    }

    /// The backend goes away (its driver domain is restarted): every mapping is undone, the
    /// queue dropped, and the event channel comes back unbound (the hypervisor's object, which
    /// outlives the backend; a new netback binds it again).
    pub fn unbind(mut self) -> EvtchnEnd {
        self.unmap_all();
        self.evtchn
    }

    /// The protocol violation that stopped this vif, if any.
    pub fn fatal(&self) -> Option<Fatal> {
        self.fatal
    }

    /// Sets the vif's MTU: non-GSO frames from the guest longer than `mtu` plus an Ethernet
    /// header and a VLAN tag are answered with an error and counted (`tx_oversize`), as a
    /// NIC refuses what its MTU does not allow. At most [`MAX_PACKET`] (a 64 KiB IP packet).
    pub fn set_mtu(&mut self, mtu: usize) {
        self.max_frame = mtu.saturating_add(FRAME_OVERHEAD).min(MAX_PACKET);
    }

    /// The longest non-GSO frame taken from the guest ([`Netback::set_mtu`]).
    pub fn max_frame(&self) -> usize {
        self.max_frame
    }

    /// The packet cap of the queue ([`Config::rx_queue_packets`]).
    pub fn rx_queue_limit(&self) -> usize {
        self.rxq_limit
    }

    pub fn set_rx_queue_limit(&mut self, n: usize) {
        self.rxq_limit = n.max(1);
    }

    /// Packets waiting for RX requests.
    pub fn rx_queued(&self) -> usize {
        self.rxq.len()
    }

    /// Bytes of packet data waiting for RX requests (at most the memory cap).
    pub fn rx_queued_bytes(&self) -> usize {
        self.rxq_bytes
    }

    /// Whether the queue can take `packets` more packets of `bytes` in all without reaching
    /// either cap (the port's back-pressure asks this before a poll).
    pub fn rx_queue_can_take(&self, packets: usize, bytes: usize) -> bool {
        self.rxq.len() + packets <= self.rxq_limit && self.rxq_bytes + bytes <= self.rxq_bytes_limit
    }

    /// Sets the memory cap ([`Config::rx_queue_bytes`]); never below one largest packet.
    pub fn set_rx_queue_bytes(&mut self, n: usize) {
        self.rxq_bytes_limit = n.max(MAX_PACKET);
    }

    /// Moves the queued packets' buffers that are still leased from the port's ring to the
    /// heap, handing the slots back: a packet that waits for the guest must not hold the
    /// port's ring. Returns how many buffers it copied.
    pub fn detach_queued(&mut self) -> usize {
        self.rxq.iter_mut().map(Packet::detach).sum()
    }

    /// [`Netback::detach_queued`] for the newest frame only: the newest buffer of the newest
    /// queued packet ([`Packet::detach_newest`]).
    pub fn detach_newest(&mut self) -> usize {
        self.rxq.back_mut().map_or(0, Packet::detach_newest)
    }

    fn fail(&mut self, f: Fatal) -> Fatal {
        if self.fatal.is_none() {
            self.fatal = Some(f);
            self.stats.count_fatal(f);
            self.unmap_all();
        }
        f
    }

    // ---------------------------------------------------------------- RX (to the guest)

    /// Queues a packet for the guest. Drops (counted) what the guest could never take, and
    /// when the queue is full. Returns whether the packet was queued.
    pub fn rx_enqueue(&mut self, pkt: Packet) -> bool {
        let len = pkt.len();
        if !(14..=MAX_PACKET).contains(&len) {
            self.stats.rx_bad_length += 1;
            return false;
        }
        match pkt.vnet.gso_kind() {
            vnet::GSO_NONE => {}
            vnet::GSO_TCPV4 if self.features.gso_tcpv4 => {}
            vnet::GSO_TCPV6 if self.features.gso_tcpv6 => {}
            _ => {
                // A frontend that did not advertise this GSO type never receives an aggregate:
                // software GSO cuts it back into the segments it was made of (what Linux's
                // validate_xmit_skb does for a device without the feature).
                return match crate::lro::segment(&pkt) {
                    Ok(segs) if segs.iter().all(|s| s.vnet.gso_kind() == vnet::GSO_NONE) => {
                        self.stats.rx_gso_segmented += 1;
                        let mut all = true;
                        for s in segs {
                            all &= self.rx_enqueue(s);
                        }
                        all
                    }
                    _ => {
                        self.stats.rx_gso_unsupported += 1;
                        false
                    }
                };
            }
        }
        if len > PAGE_SIZE && !self.features.sg {
            self.stats.rx_no_sg += 1;
            return false;
        }
        if self.rxq.len() >= self.rxq_limit {
            self.stats.rx_queue_full += 1;
            return false;
        }
        if self.rxq_bytes + len > self.rxq_bytes_limit {
            self.stats.rx_queue_memory_full += 1;
            return false;
        }
        self.rxq_bytes += len;
        self.rxq.push_back(pkt);
        true
    }

    /// Slots a packet needs on the RX ring: one per 4 KiB of data, plus one for a GSO extra.
    fn rx_slots_needed(pkt: &Packet) -> u32 {
        let data = pkt.len().div_ceil(PAGE_SIZE) as u32;
        data + u32::from(pkt.vnet.gso_kind() != vnet::GSO_NONE)
    }

    /// Moves queued packets into the guest's posted buffers, as many as there are RX requests
    /// for, one grant-copy batch per `RX_BATCH` (64) packets; pushes the responses and notifies
    /// if the frontend asked. Packets that don't fit stay queued (back-pressure).
    pub fn rx_flush(&mut self) -> Result<usize, Fatal> {
        if let Some(f) = self.fatal {
            return Err(f);
        }
        let mut done = 0;
        loop {
            done += self.rx_flush_batches()?;
            if self.rx.pending_responses() > 0 && self.rx.push_responses() {
                self.notify();
                self.stats.rx_notifications += 1;
            }
            // Still waiting for buffers: ask to be notified once the guest has posted as many
            // as the next packet needs, and go round again if they are already there.
            let Some(front) = self.rxq.front() else { break };
            let need = Self::rx_slots_needed(front);
            match self.rx.final_check_for_at_least(need) {
                Ok(true) => continue,
                Ok(false) => break,
                Err(_) => return Err(self.fail(Fatal::RxRingOverflow)),
            }
        }
        self.pool_tick(done)?;
        Ok(done)
    }

    /// Copies queued packets into the requests posted now, batch by batch; returns the packets
    /// moved. Responses are written but not pushed.
    fn rx_flush_batches(&mut self) -> Result<usize, Fatal> {
        let mut done = 0;
        loop {
            let mut avail = match self.rx.unconsumed_requests() {
                Ok(n) => n,
                Err(_) => return Err(self.fail(Fatal::RxRingOverflow)),
            };
            // Take the batch's packets and, in ring order, their requests.
            let mut batch: Vec<Packet> = Vec::new();
            self.rx_reqs.clear();
            while batch.len() < RX_BATCH {
                let Some(p) = self.rxq.front() else { break };
                let need = Self::rx_slots_needed(p);
                if need > avail {
                    break;
                }
                avail -= need;
                for _ in 0..need {
                    let r = self.rx.take_request();
                    self.rx_reqs.push(r);
                }
                let p = self.rxq.pop_front().expect("front exists");
                self.rxq_bytes -= p.len();
                batch.push(p);
            }
            if batch.is_empty() {
                break;
            }
            self.rx_copy_batch(&batch)?;
            done += batch.len();
        }
        Ok(done)
    }

    /// Grant-copies one batch into the guest and writes its responses.
    fn rx_copy_batch(&mut self, batch: &[Packet]) -> Result<(), Fatal> {
        if self.mechanism == Mechanism::Flip {
            return self.rx_flip_batch(batch);
        }
        // Build the copy ops: ring positions are [data0, extra?, data1, data2, ...] per packet.
        let mut ops: Vec<CopyToGuest<'_>> = Vec::with_capacity(self.rx_reqs.len() + batch.len());
        // For map and persistent: the packet of each op (a mapping never outlives its packet).
        let mut op_pkt: Vec<u32> = Vec::new();
        let track = matches!(self.mechanism, Mechanism::Map | Mechanism::Persistent);
        let mut slot_base = 0usize;
        for (pi, p) in batch.iter().enumerate() {
            let has_extra = p.vnet.gso_kind() != vnet::GSO_NONE;
            let mut data_slot = 0usize;
            let mut page_off = 0usize;
            for piece in p.pieces() {
                let mut rest = piece;
                while !rest.is_empty() {
                    if page_off == PAGE_SIZE {
                        data_slot += 1;
                        page_off = 0;
                    }
                    let ring_pos = slot_base + data_slot + usize::from(has_extra && data_slot > 0);
                    let n = rest.len().min(PAGE_SIZE - page_off);
                    ops.push(CopyToGuest {
                        src: &rest[..n],
                        gref: GrantRef(self.rx_reqs[ring_pos].gref),
                        offset: page_off as u16,
                        status: GntStatus::Okay,
                    });
                    if track {
                        op_pkt.push(pi as u32);
                    }
                    page_off += n;
                    rest = &rest[n..];
                }
            }
            slot_base += Self::rx_slots_needed(p) as usize;
        }
        if self.mechanism.is_pool() {
            self.rx_write_pool(&ops)?;
        } else if track {
            self.rx_write_mapped(&ops, &op_pkt)?;
        } else {
            self.hv.copy_to_guest(DomId::DRIVER, self.domid, &mut ops);
            self.stats.rx_copy_batches += 1;
            self.stats.rx_copy_ops += ops.len() as u64;
            if let Some(bad) = ops.iter().find(|o| o.status != GntStatus::Okay) {
                let f = if bad.status == GntStatus::BadGntref {
                    Fatal::RxBadGref
                } else {
                    Fatal::RxCopyFailed
                };
                return Err(self.fail(f));
            }
        }
        drop(ops);
        self.rx_respond_batch(batch, &[]);
        Ok(())
    }

    /// `flip` RX: one request (one page) per packet; transfers the frame holding each packet
    /// (copying it into a free frame first if it is not in one), then writes the responses.
    fn rx_flip_batch(&mut self, batch: &[Packet]) -> Result<(), Fatal> {
        let mut failed = vec![false; batch.len()];
        let mut pos = 0usize;
        for (i, p) in batch.iter().enumerate() {
            // rx_enqueue admits nothing longer than a page under flip (no sg, no GSO), so
            // every packet has one request.
            let gref = GrantRef(self.rx_reqs[pos].gref);
            pos += Self::rx_slots_needed(p) as usize;
            let Some(pool) = self.frames.clone() else {
                self.stats.rx_flip_no_frame += 1;
                failed[i] = true;
                continue;
            };
            let in_frame = match p.head.lent() {
                Some((id, 0)) if !p.is_chained() => Some(id),
                _ => None,
            };
            let (id, copied) = match in_frame {
                Some(id) => (id, false),
                None => {
                    let Some((id, page)) = pool.take_frame() else {
                        self.stats.rx_flip_no_frame += 1;
                        failed[i] = true;
                        continue;
                    };
                    let mut off = 0usize;
                    for piece in p.pieces() {
                        let n = piece.len().min(PAGE_SIZE - off);
                        // SAFETY: `page` is a free frame of the pool, one page long, taken
                        // by us alone; off + n <= PAGE_SIZE; `piece` is packet memory, not
                        // that frame.
                        unsafe { std::ptr::copy_nonoverlapping(piece.as_ptr(), page.add(off), n) };
                        off += n;
                    }
                    self.stats.rx_flip_copied += 1;
                    (id, true)
                }
            };
            let r = self.hv.transfer(
                DomId::DRIVER,
                pool.window(),
                pvnet_hv::Pfn(id),
                self.domid,
                gref,
            );
            if copied {
                // The buffer now holds the guest's old frame (or, refused, our copy): free.
                pvnet_pnic::FrameSource::give_back(&*pool, id);
            }
            match r {
                Ok(_) => self.stats.rx_flips += 1,
                Err(GntStatus::BadGntref) => return Err(self.fail(Fatal::RxBadGref)),
                Err(_) => return Err(self.fail(Fatal::RxFlipRefused)),
            }
        }
        self.rx_respond_batch(batch, &failed);
        Ok(())
    }

    /// Writes the responses of a batch, in the order its requests were taken; a packet marked
    /// in `failed` gets error responses instead (and is not counted as received).
    fn rx_respond_batch(&mut self, batch: &[Packet], failed: &[bool]) {
        let mut pos = 0usize;
        for (i, p) in batch.iter().enumerate() {
            let status = if failed.get(i).copied().unwrap_or(false) {
                NETIF_RSP_ERROR
            } else {
                NETIF_RSP_OKAY
            };
            pos = self.rx_respond(pos, p.len(), &p.vnet, status);
        }
    }

    /// Writes the responses of one packet of `len` bytes with header `vnet` delivered into the
    /// requests `self.rx_reqs[pos..]` (ring order: data0, the GSO extra if any, data1, ...),
    /// and counts it; returns the position after its requests. With an error `status` (a
    /// packet lost after its requests were taken) every data slot carries that status and
    /// nothing is counted as received.
    fn rx_respond(
        &mut self,
        mut pos: usize,
        len: usize,
        vnet: &VirtioNetHdr,
        status: i16,
    ) -> usize {
        let gso = vnet.gso_kind();
        let nslots = len.div_ceil(PAGE_SIZE);
        let mut csum_flags = 0u16;
        if vnet.needs_csum() {
            csum_flags |= NETRXF_CSUM_BLANK | NETRXF_DATA_VALIDATED;
        } else if vnet.data_valid() {
            csum_flags |= NETRXF_DATA_VALIDATED;
        }
        for s in 0..nslots {
            let req = self.rx_reqs[pos];
            pos += 1;
            let bytes = (len - s * PAGE_SIZE).min(PAGE_SIZE);
            let mut flags = if s == 0 { csum_flags } else { 0 };
            if s + 1 < nslots {
                flags |= NETRXF_MORE_DATA;
            }
            if s == 0 && gso != vnet::GSO_NONE {
                flags |= NETRXF_EXTRA_INFO;
            }
            self.rx.put_response(&RxSlot::from_response(&RxResponse {
                id: req.id,
                offset: 0,
                flags,
                status: if status == NETIF_RSP_OKAY {
                    bytes as i16
                } else {
                    status
                },
            }));
            if s == 0 && gso != vnet::GSO_NONE {
                pos += 1; // the extra slot consumes a request; its id is not used
                          // rx_enqueue admitted only kinds the ring carries.
                let gso_type = vnet_gso_to_xen(gso)
                    .ok()
                    .flatten()
                    .unwrap_or(XEN_NETIF_GSO_TYPE_TCPV4);
                let info = GsoInfo {
                    size: vnet.gso_size,
                    gso_type,
                    features: 0,
                };
                self.rx
                    .put_response(&RxSlot::from_extra(&ExtraInfo::new_gso(info, false)));
                if status == NETIF_RSP_OKAY {
                    self.stats.rx_gso_packets += 1;
                }
            }
        }
        if status == NETIF_RSP_OKAY {
            self.stats.rx_packets += 1;
            self.stats.rx_segments += wire_segments(len, vnet);
            self.stats.rx_bytes += len as u64;
            self.stats.rx_slots += (nslots + usize::from(gso != vnet::GSO_NONE)) as u64;
        }
        pos
    }

    /// `map` and `persistent` RX: writes each run of ops on one grant of one packet through a
    /// mapping of that grant's page.
    fn rx_write_mapped(&mut self, ops: &[CopyToGuest<'_>], op_pkt: &[u32]) -> Result<(), Fatal> {
        let mut i = 0;
        while i < ops.len() {
            let (gref, pkt) = (ops[i].gref, op_pkt[i]);
            let mut j = i + 1;
            while j < ops.len() && ops[j].gref == gref && op_pkt[j] == pkt {
                j += 1;
            }
            let run = &ops[i..j];
            let write_run = |page: *mut u8| {
                for op in run {
                    let off = usize::from(op.offset);
                    if off + op.src.len() <= PAGE_SIZE {
                        // SAFETY: `page` is a writable mapping of one whole page, pinned for
                        // this call (map_page / PersistentTable::with_page); the range lies in
                        // it (checked); `src` is the backend's own packet memory.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                op.src.as_ptr(),
                                page.add(off),
                                op.src.len(),
                            )
                        }
                    }
                }
            };
            let r = match self.mechanism {
                Mechanism::Persistent => self.persistent.with_page(
                    &self.hv,
                    self.domid,
                    gref.0,
                    true,
                    &mut self.stats,
                    write_run,
                ),
                _ => self.map_page(gref, true, write_run),
            };
            self.stats.persistent_mapped = self.persistent.live as u64;
            if let Err(e) = r {
                return Err(self.fail(e.fatal(true)));
            }
            i = j;
        }
        Ok(())
    }

    /// `premapped`/`static` RX: each op's `gref` is an RX slot of the pool (validated here),
    /// written with one bounded copy through the pool's mapping.
    fn rx_write_pool(&mut self, ops: &[CopyToGuest<'_>]) -> Result<(), Fatal> {
        // Check every slot before writing any: a bad request writes nothing.
        if ops.iter().any(|op| self.pool.rx_page(op.gref.0).is_none()) {
            return Err(self.fail(Fatal::RxPoolBadSlot));
        }
        for op in ops {
            let page = self.pool.rx_page(op.gref.0).expect("checked above");
            let off = usize::from(op.offset);
            // rx_copy_batch never builds an op that crosses its page; kept as a hard bound.
            if off + op.src.len() <= PAGE_SIZE {
                // SAFETY: `page` is a writable mapping of one whole pool page, pinned until the
                // pool is cleared (which needs `&mut self`, not held here); the range lies in
                // it (checked); `src` is the backend's own packet memory, a different mapping.
                unsafe {
                    std::ptr::copy_nonoverlapping(op.src.as_ptr(), page.add(off), op.src.len())
                }
            }
        }
        self.count_pool_copies(ops.len());
        Ok(())
    }

    fn count_pool_copies(&mut self, n: usize) {
        if self.mechanism == Mechanism::Static {
            self.stats.static_copies += n as u64;
        } else {
            self.stats.premapped_copies += n as u64;
        }
    }

    /// `premapped`/`static` TX: fills `data` from the packet's slots, given as (TX slot,
    /// offset in its page, start in `data`, length); offsets and lengths were validated
    /// against the page by the caller.
    fn tx_read_pool(
        &mut self,
        segs: &[(u32, u16, usize, usize)],
        data: &mut [u8],
    ) -> Result<(), Fatal> {
        if segs.iter().any(|s| self.pool.tx_page(s.0).is_none()) {
            return Err(self.fail(Fatal::TxPoolBadSlot));
        }
        for &(slot, off, start, len) in segs {
            let page = self.pool.tx_page(slot).expect("checked above");
            let off = usize::from(off);
            let dst = &mut data[start..start + len];
            if off + len <= PAGE_SIZE {
                // SAFETY: `page` maps one whole pool page, pinned while the pool lives; the
                // range lies in it (checked); `dst` is the backend's own buffer. The guest may
                // change the bytes meanwhile: they are only copied here, validated afterwards.
                unsafe { std::ptr::copy_nonoverlapping(page.add(off), dst.as_mut_ptr(), len) }
            }
        }
        self.count_pool_copies(segs.len());
        Ok(())
    }

    /// `map`: maps grant `gref` (writable if `write`), runs `f` on the page, unmaps it.
    fn map_page(
        &mut self,
        gref: GrantRef,
        write: bool,
        f: impl FnOnce(*mut u8),
    ) -> Result<(), GrantFail> {
        let m = self
            .hv
            .map_grant(DomId::DRIVER, self.domid, gref, !write)
            .map_err(GrantFail::of_map)?;
        self.stats.grant_maps += 1;
        f(m.ptr());
        drop(m);
        self.stats.grant_unmaps += 1;
        Ok(())
    }

    /// `map` and `persistent` TX: fills `data` from the packet's slots, given as (grant,
    /// offset in its page, range of `data`). `map` grant-copies the first [`TX_COPY_LEN`]
    /// bytes and maps the rest.
    fn tx_read_mapped(
        &mut self,
        segs: &[(u32, u16, usize, usize)],
        data: &mut [u8],
    ) -> Result<(), Fatal> {
        let mut segs = segs.to_vec();
        if self.mechanism == Mechanism::Map {
            let (gref, off, _, len) = segs[0];
            let head = len.min(TX_COPY_LEN);
            let mut ops = [CopyFromGuest {
                dst: &mut data[..head],
                gref: GrantRef(gref),
                offset: off,
                status: GntStatus::Okay,
            }];
            self.hv.copy_from_guest(DomId::DRIVER, self.domid, &mut ops);
            self.stats.tx_copy_ops += 1;
            match ops[0].status {
                GntStatus::Okay => {}
                GntStatus::BadGntref => return Err(self.fail(Fatal::TxBadGref)),
                _ => return Err(self.fail(Fatal::TxCopyFailed)),
            }
            if head == len {
                segs.remove(0);
            } else {
                segs[0] = (gref, off + head as u16, head, len - head);
            }
        }
        for (gref, off, start, len) in segs {
            let dst = &mut data[start..start + len];
            let read = |page: *mut u8| {
                let off = usize::from(off);
                if off + dst.len() <= PAGE_SIZE {
                    // SAFETY: `page` maps one whole page, pinned for this call; the range lies
                    // in it (checked); `dst` is the backend's own buffer. The guest may change
                    // the bytes meanwhile: they are only copied here, validated afterwards.
                    unsafe { std::ptr::copy_nonoverlapping(page.add(off), dst.as_mut_ptr(), len) }
                }
            };
            let r = match self.mechanism {
                Mechanism::Persistent => self.persistent.with_page(
                    &self.hv,
                    self.domid,
                    gref,
                    false,
                    &mut self.stats,
                    read,
                ),
                _ => self.map_page(GrantRef(gref), false, read),
            };
            self.stats.persistent_mapped = self.persistent.live as u64;
            if let Err(e) = r {
                return Err(self.fail(e.fatal(false)));
            }
        }
        Ok(())
    }

    // ---------------------------------------------------------------- TX (from the guest)

    /// Takes up to `budget` packets the guest sent, validates them, copies them out of the
    /// guest's pages and hands each to `deliver`. Every request gets a response.
    pub fn tx_poll(
        &mut self,
        budget: usize,
        mut deliver: impl FnMut(Packet),
    ) -> Result<usize, Fatal> {
        self.tx_poll_with(budget, |nb| {
            if let Some(p) = nb.tx_finish()? {
                deliver(p);
            }
            Ok(())
        })
    }

    /// The time (ns, any monotonic clock) for the TX polls that follow: the credit's windows
    /// are measured on it.
    pub fn set_now(&mut self, now_ns: u64) {
        self.now_ns = now_ns;
    }

    /// Changes the guest's transmit rate (none: unlimited). The new rate starts with a fresh
    /// window at the next TX poll.
    pub fn set_tx_rate(&mut self, rate: Option<TxRate>) {
        self.tx_credit = rate.map(Credit::new);
        self.tx_credit_wait = None;
    }

    pub fn tx_rate(&self) -> Option<TxRate> {
        self.tx_credit.as_ref().map(Credit::rate)
    }

    /// When the last TX poll stopped for want of credit, the time its next window starts (on
    /// the clock of [`Netback::set_now`]): the guest's requests wait on its ring until then,
    /// and no notification from the guest is needed to take them.
    pub fn tx_credit_wait(&self) -> Option<u64> {
        self.tx_credit_wait
    }

    /// Whether a new packet may start now: no rate, or credit left.
    fn tx_credit_allows(&mut self) -> bool {
        let Some(c) = self.tx_credit.as_mut() else {
            return true;
        };
        if c.allows(self.now_ns) {
            return true;
        }
        self.tx_credit_wait = Some(c.next_window());
        self.stats.tx_credit_waits += 1;
        false
    }

    /// The TX poll loop: assembles up to `budget` packets and has `finish` finish each one.
    /// With a rate, a packet starts only while the guest has credit.
    fn tx_poll_with(
        &mut self,
        budget: usize,
        mut finish: impl FnMut(&mut Netback) -> Result<(), Fatal>,
    ) -> Result<usize, Fatal> {
        if let Some(f) = self.fatal {
            return Err(f);
        }
        self.tx_credit_wait = None;
        let mut done = 0;
        'poll: while done < budget {
            let avail = match self.tx.unconsumed_requests() {
                Ok(n) => n,
                Err(_) => return Err(self.fail(Fatal::TxRingOverflow)),
            };
            if avail == 0 {
                match self.tx.final_check_for_requests() {
                    Ok(true) => continue,
                    Ok(false) => break,
                    Err(_) => return Err(self.fail(Fatal::TxRingOverflow)),
                }
            }
            for _ in 0..avail {
                let starts = self.tx_partial.first.is_none();
                if starts && !self.tx_credit_allows() {
                    // The requests stay on the ring, and the ring's event is not re-armed:
                    // the owner polls again when the next window starts.
                    break 'poll;
                }
                let slot = self.tx.take_request();
                self.tx_take_slot(slot)?;
                if starts {
                    if let (Some(c), Some(first)) =
                        (self.tx_credit.as_mut(), self.tx_partial.first.as_ref())
                    {
                        c.charge(first.size as usize);
                        self.stats.tx_credit_charged += u64::from(first.size);
                    }
                }
                if self.tx_partial.complete() {
                    finish(self)?;
                    done += 1;
                    if done >= budget {
                        break;
                    }
                }
            }
        }
        if self.tx.pending_responses() > 0 && self.tx.push_responses() {
            self.notify();
            self.stats.tx_notifications += 1;
        }
        self.pool_tick(done)?;
        Ok(done)
    }

    /// Adds one slot (already copied out of the ring) to the packet being assembled.
    fn tx_take_slot(&mut self, slot: TxSlot) -> Result<(), Fatal> {
        self.stats.tx_slots += 1;
        let p = &mut self.tx_partial;
        if p.want_extra {
            let e = slot.extra();
            match e.kind {
                XEN_NETIF_EXTRA_TYPE_GSO => {
                    let g = e.gso().expect("gso kind");
                    let ok_type = matches!(
                        g.gso_type,
                        XEN_NETIF_GSO_TYPE_TCPV4 | XEN_NETIF_GSO_TYPE_TCPV6
                    );
                    if !ok_type || g.size == 0 || p.extras.iter().any(|x| x.kind == e.kind) {
                        return Err(self.fail(Fatal::TxBadExtra));
                    }
                }
                _ => return Err(self.fail(Fatal::TxBadExtra)),
            }
            p.want_extra = e.more();
            p.extras.push(e);
            return Ok(());
        }
        let r = slot.request();
        if r.offset as usize + r.size as usize > PAGE_SIZE && p.first.is_some() {
            return Err(self.fail(Fatal::TxCrossPage));
        }
        if p.first.is_none() {
            // The first slot's size is the whole packet's; its own share is checked at finish.
            if (r.size as usize) < 14 {
                return Err(self.fail(Fatal::TxRunt));
            }
            if r.offset as usize >= PAGE_SIZE {
                return Err(self.fail(Fatal::TxCrossPage));
            }
            p.want_extra = r.flags & NETTXF_EXTRA_INFO != 0;
            p.want_data = r.flags & NETTXF_MORE_DATA != 0;
            p.first = Some(r);
        } else {
            if p.rest.len() + 1 >= XEN_NETIF_NR_SLOTS_MIN {
                return Err(self.fail(Fatal::TxTooManySlots));
            }
            p.want_data = r.flags & NETTXF_MORE_DATA != 0;
            p.rest.push(r);
        }
        Ok(())
    }

    /// Checks the assembled packet's slots against each other and the MTU.
    fn tx_check(&mut self) -> Result<TxChecked, Fatal> {
        let first = self
            .tx_partial
            .first
            .expect("complete packet has a first slot");
        let total = first.size as usize;
        let rest_sum: usize = self.tx_partial.rest.iter().map(|r| r.size as usize).sum();
        if rest_sum >= total {
            return Err(self.fail(Fatal::TxBadSize));
        }
        let first_len = total - rest_sum;
        if first.offset as usize + first_len > PAGE_SIZE {
            return Err(self.fail(Fatal::TxCrossPage));
        }
        let gso = self.tx_partial.extras.iter().find_map(|e| e.gso());
        let mut status = NETIF_RSP_OKAY;
        if gso.is_none() && total > self.max_frame {
            self.stats.tx_oversize += 1;
            status = NETIF_RSP_ERROR;
        }
        Ok(TxChecked {
            first,
            total,
            first_len,
            gso,
            status,
        })
    }

    /// The packet's pieces in the guest's pages, in order: (grant, offset in its page, offset
    /// in the packet, length).
    fn tx_segs(&self, c: &TxChecked) -> Vec<(u32, u16, usize, usize)> {
        let mut segs = Vec::with_capacity(1 + self.tx_partial.rest.len());
        segs.push((c.first.gref, c.first.offset, 0usize, c.first_len));
        let mut at = c.first_len;
        for r in &self.tx_partial.rest {
            segs.push((r.gref, r.offset, at, r.size as usize));
            at += r.size as usize;
        }
        segs
    }

    /// Grant-copies `data.len()` bytes of the packet, starting at byte `from`, out of the
    /// guest's pages into `data` (one batch).
    fn tx_copy_range(
        &mut self,
        segs: &[(u32, u16, usize, usize)],
        from: usize,
        data: &mut [u8],
    ) -> Result<(), Fatal> {
        let to = from + data.len();
        let mut ops: Vec<CopyFromGuest<'_>> = Vec::with_capacity(segs.len());
        let mut tail = data;
        for &(gref, off, start, len) in segs {
            let (a, b) = (start.max(from), (start + len).min(to));
            if a >= b {
                continue;
            }
            let (piece, t) = std::mem::take(&mut tail).split_at_mut(b - a);
            tail = t;
            ops.push(CopyFromGuest {
                dst: piece,
                gref: GrantRef(gref),
                offset: off + (a - start) as u16,
                status: GntStatus::Okay,
            });
        }
        self.hv.copy_from_guest(DomId::DRIVER, self.domid, &mut ops);
        self.stats.tx_copy_ops += ops.len() as u64;
        if let Some(bad) = ops.iter().find(|o| o.status != GntStatus::Okay) {
            let f = if bad.status == GntStatus::BadGntref {
                Fatal::TxBadGref
            } else {
                Fatal::TxCopyFailed
            };
            return Err(self.fail(f));
        }
        Ok(())
    }

    /// Answers every slot of the assembled packet (data slots with `status`, extras with
    /// NULL) and forgets it.
    fn tx_answer(&mut self, first_id: u16, status: i16) {
        self.tx.put_response(&TxResponse {
            id: first_id,
            status,
        });
        for _ in 0..self.tx_partial.extras.len() {
            self.tx.put_response(&TxResponse {
                id: 0,
                status: NETIF_RSP_NULL,
            });
        }
        for i in 0..self.tx_partial.rest.len() {
            let id = self.tx_partial.rest[i].id;
            self.tx.put_response(&TxResponse { id, status });
        }
        self.tx_partial.clear();
    }

    /// Counts a packet taken from the guest.
    fn tx_count(&mut self, total: usize, gso: bool) {
        self.stats.tx_packets += 1;
        self.stats.tx_bytes += total as u64;
        if gso {
            self.stats.tx_gso_packets += 1;
        }
    }

    /// Validates the assembled packet, copies it out of the guest and answers its slots.
    fn tx_finish(&mut self) -> Result<Option<Packet>, Fatal> {
        let c = self.tx_check()?;
        let mut status = c.status;
        let mut vnet_hdr = VirtioNetHdr::default();
        let mut data = Vec::new();
        let mut lent: Option<pvnet_pnic::LentBuf> = None;
        if status == NETIF_RSP_OKAY {
            let segs = self.tx_segs(&c);
            if self.mechanism.is_pool() {
                data = vec![0u8; c.total];
                self.tx_read_pool(&segs, &mut data)?;
            } else if !matches!(self.mechanism, Mechanism::Copy | Mechanism::Flip) {
                data = vec![0u8; c.total];
                self.tx_read_mapped(&segs, &mut data)?;
            } else {
                lent = self.tx_frame(c.total);
                match lent.as_mut() {
                    Some(l) => {
                        self.stats.tx_into_frame += 1;
                        self.tx_copy_range(&segs, 0, &mut l[..])?;
                    }
                    None => {
                        data = vec![0u8; c.total];
                        self.tx_copy_range(&segs, 0, &mut data)?;
                    }
                }
            }
            let blank = c.first.flags & NETTXF_CSUM_BLANK != 0;
            let valid = c.first.flags & NETTXF_DATA_VALIDATED != 0;
            let bytes: &[u8] = match lent.as_ref() {
                Some(l) => l,
                None => &data,
            };
            match vnet_hdr_for(bytes, blank, valid, c.gso) {
                Some(h) => vnet_hdr = h,
                None => {
                    self.stats.tx_bad_csum += 1;
                    status = NETIF_RSP_ERROR;
                }
            }
        }
        self.tx_answer(c.first.id, status);
        if status != NETIF_RSP_OKAY {
            return Ok(None);
        }
        self.tx_count(c.total, c.gso.is_some());
        Ok(Some(match lent {
            Some(l) => Packet::linear(vnet_hdr, pvnet_pnic::Buf::from(l)),
            None => Packet::linear(vnet_hdr, data),
        }))
    }

    /// `flip` TX: a free driver-domain frame for a packet of `total` bytes that fits a page,
    /// instead of the heap: bound for a flip guest, that frame is flipped to it as it is (the
    /// seed's guest-to-guest path: one copy, then a flip). `None` otherwise.
    fn tx_frame(&self, total: usize) -> Option<pvnet_pnic::LentBuf> {
        match (&self.frames, self.mechanism) {
            (Some(pool), Mechanism::Flip) if total <= PAGE_SIZE => {
                pool.take_frame().map(|(id, page)| {
                    let src: Arc<dyn pvnet_pnic::FrameSource> = pool.clone();
                    let page = std::ptr::NonNull::new(page).expect("a mapped page");
                    // SAFETY: (id, page) was just taken from the pool and is given back only
                    // by this LentBuf; total <= PAGE_SIZE.
                    unsafe { pvnet_pnic::LentBuf::new(src, id, page, 0, total) }
                })
            }
            _ => None,
        }
    }

    fn notify(&self) {
        // A failed eventfd write means the peer's end is gone; the control path notices.
        let _ = self.evtchn.notify();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr(gso_type: u8, hdr_len: u16, gso_size: u16) -> VirtioNetHdr {
        VirtioNetHdr {
            gso_type,
            hdr_len,
            gso_size,
            ..VirtioNetHdr::default()
        }
    }

    #[test]
    fn a_packet_counts_the_wire_segments_it_carries() {
        let v4 = vnet::GSO_TCPV4;
        // 44 full segments of 1448 and one of 392 behind 66 bytes of headers.
        assert_eq!(wire_segments(66 + 44 * 1448 + 392, &hdr(v4, 66, 1448)), 45);
        assert_eq!(wire_segments(66 + 2 * 1448, &hdr(v4, 66, 1448)), 2);
        // Not GSO: one, whatever its size.
        let none = vnet::GSO_NONE;
        assert_eq!(wire_segments(9000, &hdr(none, 0, 0)), 1);
        // A header from elsewhere that makes no sense counts one, never divides by zero.
        assert_eq!(wire_segments(66 + 4000, &hdr(v4, 66, 0)), 1);
        assert_eq!(wire_segments(100, &hdr(v4, 4000, 1448)), 1);
        assert_eq!(wire_segments(0, &hdr(v4, 0, 1448)), 1);
    }
}
