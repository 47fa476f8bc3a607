//! netfront: the guest's half of a vif (Linux `drivers/net/xen-netfront.c`), reduced to ring
//! and buffer logic. It owns the guest's buffer pages, grants them to the driver domain one
//! request at a time and revokes each grant when its response arrives, so a page is only ever
//! reachable by the backend while a request for it is outstanding.
//!
//! The "stack" side is a callback (RX) and a reader (TX), so the same code serves the guest
//! process (a TAP) and in-process tests.
//!
//! With persistent grants ([`Netfront::use_persistent_grants`], after the backend advertised
//! `feature-persistent` and before anything is posted) each RX buffer and each TX page gets one
//! grant reference, granted once and reused for every request: at most `RX_BUFS + TX_PAGES`
//! (512) grants, the bound netback's table holds. Their pages then stay reachable by the backend
//! between requests; netfront relies on the backend to honour the ring protocol (as blkfront
//! does with persistent grants) and takes them back with [`Netfront::end_persistent_grants`],
//! which ends access at once or, for a grant the backend holds pinned at that moment, defers
//! and retries (as Linux's `gnttab_end_foreign_access`).
//!
//! When the backend goes away (its driver domain restarted) netfront takes what it had answered,
//! then [`Netfront::disconnect`] ends every grant and keeps the TX frames left unanswered;
//! [`Netfront::reconnect`] sets the rings up afresh for a new backend and [`Netfront::repost`]
//! posts those frames again, in order, with fresh grants, and refills the RX ring. The xenbus
//! side of it is [`crate::reconnect`].
//!
//! With a pool ([`Netfront::use_pool`], after the backend advertised `feature-premapped` or
//! `feature-static-buffer`, before anything is posted) every RX buffer and TX page is granted
//! once, to `RX_BUFS + TX_PAGES` consecutive grant references (the pool the frontend
//! describes in the store with `pool-ref`, `pool-rx-slots`, `pool-tx-slots`), and ring requests
//! name slots: RX buffer `i` is RX slot `i`, TX page `j` is TX slot `j` (see
//! `pvnet_dd::pool`). The backend keeps the pool mapped, and pinned, until the vif
//! disconnects.
//!
//! - [`PoolMode::Premapped`]: the pool is netfront's packet memory: RX packets go to the stack
//!   straight from their buffers, the stack writes TX frames straight into the pages.
//! - [`PoolMode::Static`]: the pool is a bounce buffer. Each RX packet is copied out of its
//!   slots into netfront's own memory before it is checked and handed to the stack; each TX
//!   frame is read from the stack into netfront's own memory and copied into its slots. The
//!   pool's pages never reach the stack, and a packet cannot change after netfront took it.

use std::io::{self, IoSliceMut};
use std::sync::Arc;

use pvnet_hv::evtchn::EvtchnEnd;
use pvnet_hv::frames::Mfn;
use pvnet_hv::grant::GuestGrantTable;
use pvnet_hv::mem::{GuestMemory, OwnPage};
use pvnet_hv::{DomId, GrantRef, Pfn, PAGE_SIZE};
use pvnet_netif::csum::{vnet_gso_to_xen, vnet_hdr_for};
use pvnet_netif::*;
use pvnet_wire::vnet::{VirtioNetHdr, VNET_HDR_LEN};
use serde::{Deserialize, Serialize};

/// RX buffers posted (one page each): a full ring.
pub const RX_BUFS: u32 = 256;
/// TX buffer pages.
pub const TX_PAGES: u32 = 256;
/// Largest frame the TAP may hand over (a 64 KiB TSO frame plus Ethernet header).
pub const MAX_TX_FRAME: usize = 65535 + 14;
/// Data pages one TX frame may need.
const TX_MAX_PAGES: usize = MAX_TX_FRAME.div_ceil(PAGE_SIZE);

/// Where a frontend keeps things in its memory: grant table, the two ring pages, RX buffers,
/// TX buffers.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    pub grant_frames: u32,
}

impl Layout {
    pub fn tx_ring(&self) -> Pfn {
        Pfn(self.grant_frames)
    }
    pub fn rx_ring(&self) -> Pfn {
        Pfn(self.grant_frames + 1)
    }
    pub fn rx_buf(&self, i: u32) -> Pfn {
        Pfn(self.grant_frames + 2 + i)
    }
    pub fn tx_page(&self, i: u32) -> Pfn {
        Pfn(self.grant_frames + 2 + RX_BUFS + i)
    }
    /// Pages the guest needs.
    pub fn pages(&self) -> u32 {
        self.grant_frames + 2 + RX_BUFS + TX_PAGES
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrontStats {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub rx_gso_packets: u64,
    /// Responses with an error status.
    pub rx_errors: u64,
    /// Responses that break the protocol (unknown id, bad offset/size, missing slots).
    pub rx_bad_response: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub tx_gso_packets: u64,
    /// TX responses with an error status.
    pub tx_errors: u64,
    /// Times the TX ring or page pool was full when a frame was waiting.
    pub tx_ring_full: u64,
    pub tx_bad_response: u64,
    /// Frames the stack handed over that we could not send (too large, ...).
    pub tx_dropped: u64,
    pub notifications_sent: u64,
    /// Deliveries to the stack that failed (e.g. TAP write errors).
    pub deliver_errors: u64,
    /// `flip`: RX buffers whose page came back as a new machine frame (remapped).
    pub rx_flips: u64,
    /// `flip`: transfers the backend completed with a frame we could not map (counted,
    /// the buffer keeps its old mapping).
    pub rx_flip_bad_frame: u64,
    /// Batches of received packets handed to the stack together (one pass over the RX ring
    /// each): `rx_packets / rx_batches` packets per batch.
    pub rx_batches: u64,
    /// Times the backend went away and netfront took its grants back ([`Netfront::disconnect`]).
    #[serde(default)]
    pub disconnects: u64,
    /// Times netfront connected to a new backend after one went away
    /// ([`Netfront::reconnect`]).
    #[serde(default)]
    pub reconnects: u64,
    /// TX frames the backend had not answered when it went away, posted again on the new
    /// backend's ring.
    #[serde(default)]
    pub tx_reposted: u64,
    /// TX frames of which the old backend answered only part: given up (the guest's TCP sends
    /// them again).
    #[serde(default)]
    pub tx_lost_at_disconnect: u64,
    /// RX buffers posted to the old backend and not filled: taken back and posted afresh.
    #[serde(default)]
    pub rx_reclaimed_at_disconnect: u64,
    /// Grants the old backend still held pinned when netfront ended them: their references are
    /// leaked rather than reused.
    #[serde(default)]
    pub grants_leaked: u64,
    /// `static`: copies (one per ring slot) out of the static buffer (RX) and into it (TX).
    #[serde(default)]
    pub static_copies: u64,
}

/// How a pool negotiated with `feature-premapped` or `feature-static-buffer` is used (see the
/// module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolMode {
    /// The pool is the frontend's packet memory (one copy per packet, by the backend).
    Premapped,
    /// The pool is a bounce buffer (a second copy per packet, by the frontend).
    Static,
}

/// The pool a frontend granted ([`Netfront::use_pool`]), as it describes it in the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolGrant {
    /// `pool-ref`: the first of the consecutive grant references.
    pub first_ref: u32,
    /// `pool-rx-slots`.
    pub rx_slots: u32,
    /// `pool-tx-slots`.
    pub tx_slots: u32,
}

/// A snapshot of a frontend's resources ([`Netfront::resources`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrontResources {
    /// Grant references not allocated.
    pub grants_free: usize,
    pub tx_pages_free: usize,
    pub tx_ids_free: usize,
    /// TX requests posted and not yet answered.
    pub tx_in_flight: usize,
    /// RX buffers posted and not yet answered.
    pub rx_posted: usize,
}

struct TxInflight {
    page: u32,
    gref: GrantRef,
    /// The request as posted, and the GSO extra slot that followed it (first slot only): what
    /// [`Netfront::reconnect`] posts again when the backend went away before answering.
    req: TxRequest,
    gso: Option<GsoInfo>,
    /// The frame this slot belongs to (frames numbered in the order they were posted) and its
    /// slot within the frame.
    frame: u64,
    slot: u16,
}

/// A connected frontend.
pub struct Netfront {
    mem: Arc<GuestMemory>,
    gnt: GuestGrantTable,
    layout: Layout,
    backend: DomId,
    evtchn: EvtchnEnd,
    tx: FrontRing<TxRing, OwnPage>,
    rx: FrontRing<RxRing, OwnPage>,
    tx_ring_ref: GrantRef,
    rx_ring_ref: GrantRef,
    /// Grant of each posted RX buffer, by request id (= buffer index).
    rx_grant: Vec<Option<GrantRef>>,
    /// The buffer id posted at each RX ring slot. An extra-info response carries no id but
    /// uses up the request in its slot; its buffer is found by position, as Linux netfront
    /// does in `xennet_get_extras`.
    rx_slot_id: Vec<u16>,
    /// TX requests in flight, by id.
    tx_inflight: Vec<Option<TxInflight>>,
    tx_free_ids: Vec<u16>,
    tx_free_pages: Vec<u32>,
    /// Responses of a multi-slot RX packet gathered so far.
    rx_slots: Vec<RxResponse>,
    /// Complete RX packets not yet handed to the stack: they go together, before their
    /// buffers are posted again.
    rx_batch: Vec<PendingRx>,
    /// Their pieces (page, offset, length), back to back.
    rx_batch_pieces: Vec<(Pfn, u16, u16)>,
    /// Persistent grants are in use.
    persistent: bool,
    /// The persistent grant of each RX buffer and each TX page, once granted.
    rx_pgrant: Vec<Option<GrantRef>>,
    tx_pgrant: Vec<Option<GrantRef>>,
    /// Persistent grants whose revocation the backend's pin refused: retried.
    deferred: Vec<GrantRef>,
    /// The number the next TX frame gets (`TxInflight::frame`).
    tx_frame_seq: u64,
    /// The backend went away ([`Netfront::disconnect`]) and no new one has been connected.
    disconnected: bool,
    /// The pool in use, if any (then `rx_pgrant`/`tx_pgrant` hold its grants).
    pool: Option<PoolMode>,
    /// `static`: netfront's own memory, one page per RX buffer, then one per TX page, that
    /// packets are copied to (RX) and from (TX). Empty otherwise.
    bounce: Vec<u8>,
    /// Page flipping: RX buffers are offered for transfer, not granted for access.
    flip: bool,
    pub stats: FrontStats,
}

/// A received packet waiting in the batch: its header and its pieces' range in
/// `rx_batch_pieces`.
#[derive(Clone, Copy, Debug)]
struct PendingRx {
    hdr: VirtioNetHdr,
    first: usize,
    count: usize,
    len: usize,
}

/// One packet of an RX batch, as handed to the stack.
#[derive(Clone, Copy, Debug)]
pub struct RxPacket<'a> {
    pub hdr: VirtioNetHdr,
    /// The data, in the guest's own buffer pages (no longer granted).
    pub pieces: &'a [&'a [u8]],
}

impl Netfront {
    /// Sets up grant table, rings and buffers in `mem` and grants the ring pages to `backend`.
    /// The rings are initialized here: only the frontend initializes a shared ring.
    pub fn new(
        mem: Arc<GuestMemory>,
        layout: Layout,
        backend: DomId,
        evtchn: EvtchnEnd,
    ) -> io::Result<Netfront> {
        if mem.pages() < layout.pages() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "guest memory has {} pages, netfront needs {}",
                    mem.pages(),
                    layout.pages()
                ),
            ));
        }
        let mut gnt = GuestGrantTable::new(mem.clone(), layout.grant_frames);
        let page = |pfn| {
            OwnPage::new(mem.clone(), pfn).ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "ring page out of range")
            })
        };
        let tx = FrontRing::init(page(layout.tx_ring())?);
        let rx = FrontRing::init(page(layout.rx_ring())?);
        let no_ref = || io::Error::new(io::ErrorKind::OutOfMemory, "grant table full");
        let tx_ring_ref = gnt.alloc().ok_or_else(no_ref)?;
        let rx_ring_ref = gnt.alloc().ok_or_else(no_ref)?;
        gnt.grant_access(tx_ring_ref, backend, layout.tx_ring(), false);
        gnt.grant_access(rx_ring_ref, backend, layout.rx_ring(), false);
        Ok(Netfront {
            mem,
            gnt,
            layout,
            backend,
            evtchn,
            tx,
            rx,
            tx_ring_ref,
            rx_ring_ref,
            rx_grant: (0..RX_BUFS).map(|_| None).collect(),
            rx_slot_id: vec![0; RxRing::SIZE as usize],
            tx_inflight: (0..TxRing::SIZE).map(|_| None).collect(),
            tx_free_ids: (0..TxRing::SIZE as u16).rev().collect(),
            tx_free_pages: (0..TX_PAGES).rev().collect(),
            rx_slots: Vec::with_capacity(20),
            rx_batch: Vec::with_capacity(RxRing::SIZE as usize),
            rx_batch_pieces: Vec::with_capacity(RxRing::SIZE as usize),
            persistent: false,
            rx_pgrant: vec![None; RX_BUFS as usize],
            tx_pgrant: vec![None; TX_PAGES as usize],
            deferred: Vec::new(),
            tx_frame_seq: 0,
            disconnected: false,
            pool: None,
            bounce: Vec::new(),
            flip: false,
            stats: FrontStats::default(),
        })
    }

    pub fn tx_ring_ref(&self) -> GrantRef {
        self.tx_ring_ref
    }
    pub fn rx_ring_ref(&self) -> GrantRef {
        self.rx_ring_ref
    }
    pub fn evtchn(&self) -> &EvtchnEnd {
        &self.evtchn
    }

    /// Switches to persistent grants (the frontend's `feature-persistent` = 1). Only before the
    /// first buffer is posted; returns whether it took effect.
    pub fn use_persistent_grants(&mut self) -> bool {
        let fresh = self.rx_grant.iter().all(Option::is_none)
            && self.tx_inflight.iter().all(Option::is_none);
        if fresh {
            self.persistent = true;
        }
        fresh
    }

    /// Switches to page flipping (`request-rx-copy` = 0): RX buffers are offered with
    /// `GTF_accept_transfer` grants and each answered buffer is remapped to the frame the
    /// backend gave. Needs the RX buffers inside this memory's flip window
    /// ([`GuestMemory::attach_frames`]) and no buffer posted yet; returns whether it took
    /// effect.
    pub fn use_flip(&mut self) -> bool {
        let Some(w) = self.mem.frames() else {
            return false;
        };
        let covered = (0..RX_BUFS).all(|i| w.contains(self.layout.rx_buf(i)));
        let fresh = self.rx_grant.iter().all(Option::is_none) && !self.persistent;
        if covered && fresh {
            self.flip = true;
        }
        self.flip
    }

    /// Whether page flipping is in use.
    pub fn flip(&self) -> bool {
        self.flip
    }

    /// Whether persistent grants are in use.
    pub fn persistent(&self) -> bool {
        self.persistent
    }

    /// Grants the whole pool once (the frontend's `feature-premapped` or
    /// `feature-static-buffer` = 1): every RX buffer writable and every TX page read-only, to
    /// consecutive grant references. Only before the first buffer is posted and without
    /// persistent grants; `None` when it did not take effect (nothing changed then).
    pub fn use_pool(&mut self, mode: PoolMode) -> Option<PoolGrant> {
        let fresh = self.rx_grant.iter().all(Option::is_none)
            && self.tx_inflight.iter().all(Option::is_none)
            && !self.persistent
            && self.pool.is_none();
        if !fresh {
            return None;
        }
        let n = RX_BUFS + TX_PAGES;
        let mut refs: Vec<GrantRef> = Vec::with_capacity(n as usize);
        while refs.len() < n as usize {
            let Some(r) = self.gnt.alloc() else { break };
            refs.push(r);
        }
        let first = refs.first().map(|r| r.0);
        let consecutive = refs.len() == n as usize
            && refs
                .iter()
                .enumerate()
                .all(|(i, r)| Some(r.0) == first.map(|f| f + i as u32));
        if !consecutive {
            for r in refs {
                self.gnt.free(r);
            }
            return None;
        }
        for (i, &r) in refs.iter().enumerate() {
            let i = i as u32;
            if i < RX_BUFS {
                self.gnt
                    .grant_access(r, self.backend, self.layout.rx_buf(i), false);
                self.rx_pgrant[i as usize] = Some(r);
            } else {
                let j = i - RX_BUFS;
                self.gnt
                    .grant_access(r, self.backend, self.layout.tx_page(j), true);
                self.tx_pgrant[j as usize] = Some(r);
            }
        }
        if mode == PoolMode::Static {
            self.bounce = vec![0u8; n as usize * PAGE_SIZE];
        }
        self.pool = Some(mode);
        Some(PoolGrant {
            first_ref: first.expect("n > 0"),
            rx_slots: RX_BUFS,
            tx_slots: TX_PAGES,
        })
    }

    /// The pool in use, if any.
    pub fn pool(&self) -> Option<PoolMode> {
        self.pool
    }

    /// Ends access to the pool's grants (teardown, after the backend unmapped the pool): as
    /// [`Netfront::end_persistent_grants`]; grants the backend still holds are deferred.
    pub fn end_pool(&mut self) -> usize {
        self.pool = None;
        self.end_persistent_grants()
    }

    /// Whether the buffers stay granted between requests (persistent grants or a pool).
    fn reuses_grants(&self) -> bool {
        self.persistent || self.pool.is_some()
    }

    /// `static`: netfront's own page for TX page `pg`.
    fn bounce_page(&mut self, pg: u32) -> *mut u8 {
        self.bounce[(RX_BUFS + pg) as usize * PAGE_SIZE..][..PAGE_SIZE].as_mut_ptr()
    }

    /// The persistent grant of RX buffer `id`, if it has one.
    pub fn rx_persistent_gref(&self, id: u16) -> Option<GrantRef> {
        self.rx_pgrant.get(id as usize).copied().flatten()
    }

    /// Ends access to every persistent grant (teardown: no buffer is posted again afterwards,
    /// and a backend that still uses one fails its vif). A grant the backend holds pinned at
    /// this moment is deferred and retried by the next call. Returns the grants still
    /// deferred.
    pub fn end_persistent_grants(&mut self) -> usize {
        self.persistent = false;
        let mut all: Vec<GrantRef> = std::mem::take(&mut self.deferred);
        all.extend(self.rx_pgrant.iter_mut().filter_map(Option::take));
        all.extend(self.tx_pgrant.iter_mut().filter_map(Option::take));
        for r in &mut self.rx_grant {
            *r = None;
        }
        for g in all {
            if self.gnt.end_access(g) {
                self.gnt.free(g);
            } else {
                self.deferred.push(g);
            }
        }
        self.deferred.len()
    }

    fn notify(&mut self) {
        if self.evtchn.notify().is_ok() {
            self.stats.notifications_sent += 1;
        }
    }

    /// Posts an RX request for every buffer not currently posted; notifies if the backend asked.
    pub fn rx_refill(&mut self) {
        if self.disconnected {
            return;
        }
        let mut posted = false;
        for id in 0..RX_BUFS {
            if self.rx_grant[id as usize].is_some() || self.rx.free_requests() == 0 {
                continue;
            }
            let gref = match self.rx_pgrant[id as usize] {
                Some(g) => g,
                None => {
                    let Some(gref) = self.gnt.alloc() else { break };
                    if self.flip {
                        // The page is given up until the transfer completes: nothing in
                        // this process touches it before rx_reclaim remaps it.
                        self.gnt
                            .grant_transfer(gref, self.backend, self.layout.rx_buf(id));
                    } else {
                        self.gnt
                            .grant_access(gref, self.backend, self.layout.rx_buf(id), false);
                    }
                    if self.persistent {
                        self.rx_pgrant[id as usize] = Some(gref);
                    }
                    gref
                }
            };
            self.rx_grant[id as usize] = Some(gref);
            let at = self.rx.req_prod_pvt().slot(RxRing::SIZE) as usize;
            self.rx_slot_id[at] = id as u16;
            self.rx.put_request(&RxRequest {
                id: id as u16,
                // A pool names its RX slot, which is the buffer's index.
                gref: if self.pool.is_some() { id } else { gref.0 },
            });
            posted = true;
        }
        if posted && self.rx.push_requests() {
            self.notify();
        }
    }

    /// Revokes the grant of RX buffer `id` and frees the reference. False when `id` was not
    /// posted (a backend answering a request we never made).
    fn rx_reclaim(&mut self, id: u16) -> bool {
        let Some(slot) = self.rx_grant.get_mut(id as usize) else {
            return false;
        };
        let Some(gref) = slot.take() else {
            return false;
        };
        if self.reuses_grants() {
            // Stays granted: posted again with the same reference.
            return true;
        }
        if self.flip {
            let pfn = self.layout.rx_buf(u32::from(id));
            match self.gnt.end_transfer(gref) {
                Some(mfn) => {
                    // Linux netfront: set_phys_to_machine + update_va_mapping of the pfn.
                    let remapped = self
                        .mem
                        .frames()
                        .is_some_and(|w| w.remap(pfn, Mfn(mfn)).is_ok());
                    if remapped {
                        self.stats.rx_flips += 1;
                    } else {
                        self.stats.rx_flip_bad_frame += 1;
                    }
                    self.gnt.free(gref);
                }
                // Answered without a transfer (an error response): the offer is taken back.
                None => {
                    if self.gnt.end_access(gref) {
                        self.gnt.free(gref);
                    }
                }
            }
            return true;
        }
        if self.gnt.end_access(gref) {
            self.gnt.free(gref);
        }
        // A grant still pinned would be the backend copying after answering; the reference
        // is leaked rather than reused, and the buffer is reposted with a new one.
        true
    }

    /// Consumes RX responses. Each complete packet is handed to `deliver` as its virtio
    /// header and data pieces (slices of the guest's own buffer pages, no longer granted).
    /// Then refills. Returns the packets delivered.
    pub fn rx_poll(
        &mut self,
        mut deliver: impl FnMut(&VirtioNetHdr, &[&[u8]]) -> io::Result<()>,
    ) -> usize {
        self.rx_poll_batch(|pkts, ok| {
            for (p, ok) in pkts.iter().zip(ok) {
                *ok = deliver(&p.hdr, p.pieces).is_ok();
            }
        })
    }

    /// Like [`Netfront::rx_poll`], but the packets go to the stack a batch at a time: every
    /// complete packet of one pass over the ring, handed to `deliver` together before their
    /// buffers are posted again, as Linux netfront's NAPI poll hands its batch to the stack.
    /// `deliver` sets `ok[i]` for each packet the stack took.
    pub fn rx_poll_batch(
        &mut self,
        mut deliver: impl FnMut(&[RxPacket<'_>], &mut [bool]),
    ) -> usize {
        let mut delivered = 0;
        if self.disconnected {
            return 0;
        }
        // Kept across batches of responses: a packet's slots may straddle two reads of rsp_prod.
        let mut extra: Option<ExtraInfo> = None;
        let mut expect_extra = false;
        loop {
            let n = match self.rx.unconsumed_responses() {
                Ok(n) => n,
                Err(_) => {
                    self.stats.rx_bad_response += 1;
                    0
                }
            };
            if n == 0 {
                delivered += self.rx_flush_batch(&mut deliver);
                self.rx_refill();
                match self.rx.final_check_for_responses() {
                    Ok(true) => continue,
                    _ => break,
                }
            }
            for _ in 0..n {
                let at = self.rx.rsp_cons().slot(RxRing::SIZE) as usize;
                let slot = self.rx.take_response();
                if expect_extra {
                    // The extra slot used up the request posted here: take its buffer back.
                    self.rx_reclaim(self.rx_slot_id[at]);
                    let e = slot.extra();
                    expect_extra = e.more();
                    if e.kind == XEN_NETIF_EXTRA_TYPE_GSO {
                        extra = Some(e);
                    }
                    // The extras follow the first data slot; a one-slot packet is complete
                    // only once they are read.
                    let last_more = self
                        .rx_slots
                        .last()
                        .map(|r| r.flags & NETRXF_MORE_DATA != 0);
                    if !expect_extra && last_more == Some(false) {
                        self.deliver_rx(extra.take());
                        self.rx_slots.clear();
                    }
                    continue;
                }
                let r = slot.response();
                if !self.rx_reclaim(r.id) {
                    self.stats.rx_bad_response += 1;
                    self.rx_slots.clear();
                    extra = None;
                    continue;
                }
                if self.rx_slots.is_empty() && r.flags & NETRXF_EXTRA_INFO != 0 {
                    expect_extra = true;
                }
                self.rx_slots.push(r);
                if r.flags & NETRXF_MORE_DATA != 0 || expect_extra {
                    continue;
                }
                self.deliver_rx(extra.take());
                self.rx_slots.clear();
            }
        }
        delivered
    }

    /// Hands the batch to the stack and counts what it took. Returns the packets delivered.
    fn rx_flush_batch(&mut self, deliver: &mut impl FnMut(&[RxPacket<'_>], &mut [bool])) -> usize {
        if self.rx_batch.is_empty() {
            return 0;
        }
        let mut flat: Vec<&[u8]> = Vec::with_capacity(self.rx_batch_pieces.len());
        let bounce = (self.pool == Some(PoolMode::Static)).then_some(self.bounce.as_ptr());
        let rx0 = self.layout.rx_buf(0).0;
        for &(pfn, off, sz) in &self.rx_batch_pieces {
            let p = match bounce {
                // SAFETY: pfn is an RX buffer's page (gathered by deliver_rx), so its index is
                // below RX_BUFS and its page lies inside `bounce` (RX_BUFS + TX_PAGES pages).
                Some(b) => unsafe { b.add((pfn.0 - rx0) as usize * PAGE_SIZE) },
                None => self
                    .mem
                    .page_ptr(pfn)
                    .expect("the page was found when the packet was gathered"),
            };
            // SAFETY: the page belongs to this guest's memory mapping (or, under `static`, to
            // `self.bounce`), which outlives `flat`; unless grants are reused its grant was
            // revoked in rx_reclaim, so the backend can no longer write it (hv checks the grant
            // on every copy); under persistent grants and `premapped` the backend is trusted not
            // to write an answered buffer (module docs); `bounce` is never granted. Nothing
            // else in this process touches it until it is reposted by rx_refill, which runs
            // after this batch is delivered. off + sz <= 4096 was checked when the packet was
            // gathered.
            flat.push(unsafe { std::slice::from_raw_parts(p.add(off as usize), sz as usize) });
        }
        let pkts: Vec<RxPacket<'_>> = self
            .rx_batch
            .iter()
            .map(|p| RxPacket {
                hdr: p.hdr,
                pieces: &flat[p.first..p.first + p.count],
            })
            .collect();
        let mut ok = vec![false; pkts.len()];
        deliver(&pkts, &mut ok);
        self.stats.rx_batches += 1;
        drop(pkts);
        let mut delivered = 0;
        for (p, ok) in self.rx_batch.iter().zip(&ok) {
            if *ok {
                self.stats.rx_packets += 1;
                self.stats.rx_bytes += p.len as u64;
                delivered += 1;
            } else {
                self.stats.deliver_errors += 1;
            }
        }
        self.rx_batch.clear();
        self.rx_batch_pieces.clear();
        delivered
    }

    /// Checks the gathered slots of one packet and adds it to the batch for the stack.
    fn deliver_rx(&mut self, extra: Option<ExtraInfo>) -> bool {
        let mut pieces: [&[u8]; XEN_NETIF_NR_SLOTS_MIN + 2] = [&[]; XEN_NETIF_NR_SLOTS_MIN + 2];
        let first = self.rx_slots[0];
        if self.rx_slots.len() > pieces.len() {
            self.stats.rx_bad_response += 1;
            return false;
        }
        let mut len = 0usize;
        let bounce = (self.pool == Some(PoolMode::Static)).then_some(self.bounce.as_mut_ptr());
        for (i, r) in self.rx_slots.iter().enumerate() {
            if r.status < 0 {
                self.stats.rx_errors += 1;
                return false;
            }
            let (off, sz) = (r.offset as usize, r.status as usize);
            if off + sz > PAGE_SIZE {
                self.stats.rx_bad_response += 1;
                return false;
            }
            let pfn = self.layout.rx_buf(r.id as u32);
            let Some(mut p) = self.mem.page_ptr(pfn) else {
                self.stats.rx_bad_response += 1;
                return false;
            };
            if let Some(base) = bounce {
                // The second copy: out of the static buffer into netfront's own page, before
                // anything is checked (the backend may still write the slot afterwards).
                if r.id as u32 >= RX_BUFS {
                    self.stats.rx_bad_response += 1;
                    return false;
                }
                // SAFETY: `p` is the RX slot's page in this guest's memory (found above);
                // `base` is `self.bounce`, RX_BUFS + TX_PAGES pages, and r.id < RX_BUFS
                // (checked), so `own` is one whole page of it; off + sz <= 4096 (checked
                // above); the two do not overlap (guest memory against the heap).
                let own = unsafe { base.add(r.id as usize * PAGE_SIZE) };
                // SAFETY: see above.
                unsafe { std::ptr::copy_nonoverlapping(p.add(off), own.add(off), sz) };
                self.stats.static_copies += 1;
                p = own;
            }
            // SAFETY: the page belongs to this guest's memory mapping (under `static`, to
            // `self.bounce`), which outlives `pieces`; unless grants are reused its grant was
            // revoked in rx_reclaim, so the backend can no longer write it (hv checks the grant
            // on every copy); with persistent grants or `premapped` the backend is trusted not
            // to write an answered buffer (module docs), and `bounce` is never granted. Nothing
            // else in this process touches it until it is reposted after `deliver` returns.
            // off + sz <= 4096 was checked above.
            pieces[i] = unsafe { std::slice::from_raw_parts(p.add(off), sz) };
            len += sz;
        }
        let pieces = &pieces[..self.rx_slots.len()];
        let gso = extra.and_then(|e| e.gso());
        let blank = first.flags & NETRXF_CSUM_BLANK != 0;
        let valid = first.flags & NETRXF_DATA_VALIDATED != 0;
        let Some(hdr) = vnet_hdr_for(pieces[0], blank, valid, gso) else {
            self.stats.rx_errors += 1;
            return false;
        };
        if gso.is_some() {
            self.stats.rx_gso_packets += 1;
        }
        let first_piece = self.rx_batch_pieces.len();
        for r in &self.rx_slots {
            self.rx_batch_pieces
                .push((self.layout.rx_buf(r.id as u32), r.offset, r.status as u16));
        }
        self.rx_batch.push(PendingRx {
            hdr,
            first: first_piece,
            count: self.rx_slots.len(),
            len,
        });
        true
    }

    /// Collects TX responses: revokes grants, frees pages and ids; then asks the backend for an
    /// event at its next TX response (`RING_FINAL_CHECK_FOR_RESPONSES`).
    pub fn tx_complete(&mut self) -> usize {
        self.tx_collect(true)
    }

    /// Collects the TX responses that are there without asking for an event at the next one.
    ///
    /// The guest wakes for RX, for its TAP and every stats period anyway, so answers to its
    /// sends can wait for the next wake-up; it asks for an event ([`Netfront::tx_complete`])
    /// only when it is out of TX room. Under request/response traffic that spares the backend
    /// a notification and the guest a wake-up per transaction. (Linux netfront asks for an
    /// event halfway through what is outstanding: at once for a single packet. `rsp_event` is
    /// the frontend's to choose; a stale one lies behind `rsp_prod` and asks for nothing.)
    pub fn tx_reap(&mut self) -> usize {
        self.tx_collect(false)
    }

    fn tx_collect(&mut self, want_event: bool) -> usize {
        let mut n_done = 0;
        if self.disconnected {
            return 0;
        }
        loop {
            let n = match self.tx.unconsumed_responses() {
                Ok(n) => n,
                Err(_) => {
                    self.stats.tx_bad_response += 1;
                    0
                }
            };
            if n == 0 {
                if want_event && self.tx.final_check_for_responses().unwrap_or(false) {
                    continue;
                }
                break;
            }
            for _ in 0..n {
                let r = self.tx.take_response();
                if r.status == NETIF_RSP_NULL {
                    continue; // the answer to an extra-info slot
                }
                if r.status != NETIF_RSP_OKAY {
                    self.stats.tx_errors += 1;
                }
                let Some(inf) = self
                    .tx_inflight
                    .get_mut(r.id as usize)
                    .and_then(Option::take)
                else {
                    self.stats.tx_bad_response += 1;
                    continue;
                };
                if self.reuses_grants() && self.tx_pgrant[inf.page as usize] == Some(inf.gref) {
                    self.tx_free_pages.push(inf.page);
                } else if self.gnt.end_access(inf.gref) {
                    self.gnt.free(inf.gref);
                    self.tx_free_pages.push(inf.page);
                }
                self.tx_free_ids.push(r.id);
                n_done += 1;
            }
        }
        n_done
    }

    /// Free and in-use resources, to check for leaks.
    pub fn resources(&self) -> FrontResources {
        FrontResources {
            grants_free: self.gnt.free_count(),
            tx_pages_free: self.tx_free_pages.len(),
            tx_ids_free: self.tx_free_ids.len(),
            tx_in_flight: self.tx_inflight.iter().filter(|t| t.is_some()).count(),
            rx_posted: self.rx_grant.iter().filter(|g| g.is_some()).count(),
        }
    }

    /// Whether a maximal frame fits now (pages, ids and ring slots).
    pub fn tx_has_room(&self) -> bool {
        !self.disconnected
            && self.tx_free_pages.len() >= TX_MAX_PAGES
            && self.tx_free_ids.len() >= TX_MAX_PAGES
            && self.tx.free_requests() as usize > TX_MAX_PAGES + 1
    }

    /// Reads one frame from the stack straight into free TX pages and posts it. `read` gets
    /// a virtio header buffer followed by page buffers (a readv on a TAP). Returns
    /// `Ok(None)` when there is no room (back-pressure: the frame stays with the stack),
    /// `Ok(Some(len))` when a frame was posted, and the reader's error otherwise
    /// (`WouldBlock` when the stack has nothing).
    pub fn tx_read_with(
        &mut self,
        read: impl FnOnce(&mut [IoSliceMut<'_>]) -> io::Result<usize>,
    ) -> io::Result<Option<usize>> {
        if !self.tx_has_room() {
            self.stats.tx_ring_full += 1;
            return Ok(None);
        }
        // The frame goes into the last TX_MAX_PAGES pages of the free list, last first; the
        // pages it uses are then exactly the list's tail, removed with one truncate.
        let n_pages = self.tx_free_pages.len();
        let page_at = |free: &[u32], i: usize| free[n_pages - 1 - i];
        let mut hdr = [0u8; VNET_HDR_LEN];
        let bounce = self.pool == Some(PoolMode::Static);
        let total = {
            let mut iov: Vec<IoSliceMut<'_>> = Vec::with_capacity(TX_MAX_PAGES + 1);
            iov.push(IoSliceMut::new(&mut hdr));
            for i in 0..TX_MAX_PAGES {
                let pg = page_at(&self.tx_free_pages, i);
                let p = if bounce {
                    self.bounce_page(pg)
                } else {
                    self.mem
                        .page_ptr(self.layout.tx_page(pg))
                        .expect("tx page in range")
                };
                // SAFETY: a free TX page is not granted to anyone (its grant was revoked before
                // it went back to the free list) or, with reused grants, not named by any
                // request in flight (the backend reads only what a request names); under
                // `static` it is a page of `self.bounce`, never granted. It is not otherwise
                // referenced in this process; the slice lives only for this read.
                iov.push(IoSliceMut::new(unsafe {
                    std::slice::from_raw_parts_mut(p, PAGE_SIZE)
                }));
            }
            read(&mut iov)?
        };
        // A reader claiming more than it was given is broken; a frame over 64 KiB does not fit
        // the first slot's 16-bit size (`XEN_NETIF_MAX_TX_SIZE`; Linux netfront drops it too),
        // and sending it truncated would look like a protocol violation to netback.
        let max_frame = (TX_MAX_PAGES * PAGE_SIZE).min(XEN_NETIF_MAX_TX_SIZE);
        if !(VNET_HDR_LEN + 14..=VNET_HDR_LEN + max_frame).contains(&total) {
            self.stats.tx_dropped += 1;
            return Ok(Some(0));
        }
        let len = total - VNET_HDR_LEN;
        let vh = VirtioNetHdr::parse(&hdr).expect("10 bytes");
        let used = len.div_ceil(PAGE_SIZE);
        let mut flags0 = 0u16;
        if vh.needs_csum() {
            flags0 |= NETTXF_CSUM_BLANK | NETTXF_DATA_VALIDATED;
        } else if vh.data_valid() {
            flags0 |= NETTXF_DATA_VALIDATED;
        }
        let Ok(gso) = vnet_gso_to_xen(vh.gso_type) else {
            self.stats.tx_dropped += 1;
            return Ok(Some(0));
        };
        if gso.is_some() {
            flags0 |= NETTXF_EXTRA_INFO;
        }
        let frame = self.tx_frame_seq;
        self.tx_frame_seq += 1;
        for i in 0..used {
            let pg = page_at(&self.tx_free_pages, i);
            let seg = (len - i * PAGE_SIZE).min(PAGE_SIZE);
            if bounce {
                // The second copy: from netfront's own page into the static buffer's slot.
                let own = self.bounce_page(pg);
                let slot = self
                    .mem
                    .page_ptr(self.layout.tx_page(pg))
                    .expect("tx page in range");
                // SAFETY: `own` is a page of `self.bounce` and `slot` the TX page `pg` of this
                // guest's memory, 4096 bytes each, disjoint; seg <= 4096.
                unsafe { std::ptr::copy_nonoverlapping(own, slot, seg) };
                self.stats.static_copies += 1;
            }
            let id = self.tx_free_ids.pop().expect("room checked");
            let gref = match self.tx_pgrant[pg as usize] {
                Some(g) => g,
                None => {
                    let gref = self.gnt.alloc().expect("grant refs outnumber tx slots");
                    self.gnt
                        .grant_access(gref, self.backend, self.layout.tx_page(pg), true);
                    if self.persistent {
                        self.tx_pgrant[pg as usize] = Some(gref);
                    }
                    gref
                }
            };
            let mut flags = if i == 0 { flags0 } else { 0 };
            if i + 1 < used {
                flags |= NETTXF_MORE_DATA;
            }
            let size = if i == 0 { len } else { seg } as u16;
            let req = TxRequest {
                // A pool names its TX slot, which is the page's index.
                gref: if self.pool.is_some() { pg } else { gref.0 },
                offset: 0,
                flags,
                id,
                size,
            };
            self.tx.put_request(&TxSlot::from_request(&req));
            let mut extra = None;
            if i == 0 {
                if let Some(t) = gso {
                    let info = GsoInfo {
                        size: vh.gso_size,
                        gso_type: t,
                        features: 0,
                    };
                    self.tx
                        .put_request(&TxSlot::from_extra(&ExtraInfo::new_gso(info, false)));
                    extra = Some(info);
                }
            }
            self.tx_inflight[id as usize] = Some(TxInflight {
                page: pg,
                gref,
                req,
                gso: extra,
                frame,
                slot: i as u16,
            });
        }
        self.tx_free_pages.truncate(n_pages - used);
        self.stats.tx_packets += 1;
        self.stats.tx_bytes += len as u64;
        if gso.is_some() {
            self.stats.tx_gso_packets += 1;
        }
        Ok(Some(len))
    }

    /// Pushes posted TX requests; notifies when the backend asked.
    pub fn tx_push(&mut self) {
        if self.disconnected {
            return;
        }
        if self.tx.push_requests() {
            self.notify();
        }
    }

    // ------------------------------------------------------------ the backend goes away

    /// Whether the backend went away ([`Netfront::disconnect`]) and no new one is connected
    /// ([`Netfront::reconnect`]). Meanwhile the rings are not touched: nothing is polled,
    /// nothing posted, and the stack's frames wait in the stack (no TX room).
    pub fn is_disconnected(&self) -> bool {
        self.disconnected
    }

    /// TX frames posted and not answered.
    pub fn tx_pending_frames(&self) -> usize {
        let frames: std::collections::BTreeSet<u64> =
            self.tx_inflight.iter().flatten().map(|t| t.frame).collect();
        frames.len()
    }

    /// Ends access to grant `g` and frees its reference; a grant the backend still holds pinned
    /// is counted and its reference leaked rather than reused.
    fn end_and_free(&mut self, g: GrantRef) {
        if self.gnt.end_access(g) {
            self.gnt.free(g);
        } else {
            self.stats.grants_leaked += 1;
        }
    }

    /// The backend went away: its state went to `Closing` or `Closed` (Linux netfront's
    /// `xennet_disconnect_backend`). Call it after consuming what the backend answered
    /// ([`Netfront::rx_poll_batch`], [`Netfront::tx_reap`]): responses already on the rings
    /// are its last word, and they are answers like any other.
    ///
    /// Every grant ends: both ring pages, every posted RX buffer (its request dies with the
    /// ring; the buffer is posted afresh to the next backend), every TX page in flight, every
    /// persistent grant. TX frames the backend did not answer keep their pages and ids, for
    /// [`Netfront::repost`] to post again in their order; a frame the backend answered only in
    /// part (never done by netback, which answers a packet's slots together) is given up
    /// (`tx_lost_at_disconnect`). Returns the TX frames kept.
    pub fn disconnect(&mut self) -> usize {
        if self.disconnected {
            return self.tx_pending_frames();
        }
        self.disconnected = true;
        self.stats.disconnects += 1;
        // A packet half gathered will never get its other slots.
        self.rx_slots.clear();
        self.rx_batch.clear();
        self.rx_batch_pieces.clear();
        let persistent = self.persistent;
        for id in 0..RX_BUFS as usize {
            if let Some(g) = self.rx_grant[id].take() {
                self.stats.rx_reclaimed_at_disconnect += 1;
                if !persistent {
                    self.end_and_free(g);
                }
            }
        }
        let whole: std::collections::BTreeSet<u64> = (self.tx_inflight.iter().flatten())
            .filter(|t| t.slot == 0)
            .map(|t| t.frame)
            .collect();
        let mut lost = std::collections::BTreeSet::new();
        for id in 0..self.tx_inflight.len() {
            let Some((page, gref, frame)) = self.tx_inflight[id]
                .as_ref()
                .map(|t| (t.page, t.gref, t.frame))
            else {
                continue;
            };
            if !(persistent && self.tx_pgrant[page as usize] == Some(gref)) {
                self.end_and_free(gref);
            }
            if !whole.contains(&frame) {
                self.tx_inflight[id] = None;
                self.tx_free_pages.push(page);
                self.tx_free_ids.push(id as u16);
                lost.insert(frame);
            }
        }
        self.stats.tx_lost_at_disconnect += lost.len() as u64;
        if persistent {
            self.end_persistent_grants();
        }
        let (t, r) = (self.tx_ring_ref, self.rx_ring_ref);
        self.end_and_free(t);
        self.end_and_free(r);
        whole.len()
    }

    /// Prepares for a new backend after [`Netfront::disconnect`] (Linux netfront's
    /// `talk_to_netback` when it reconnects): both rings initialized afresh in the same pages
    /// and granted again under new references ([`Netfront::tx_ring_ref`],
    /// [`Netfront::rx_ring_ref`], for the store), persistent grants used when `persistent`
    /// (the new backend offered them). Nothing is posted until [`Netfront::repost`].
    pub fn reconnect(&mut self, persistent: bool) -> io::Result<()> {
        if !self.disconnected {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "netfront is still connected to its backend",
            ));
        }
        let page = |pfn| {
            OwnPage::new(self.mem.clone(), pfn).ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "ring page out of range")
            })
        };
        let (txp, rxp) = (page(self.layout.tx_ring())?, page(self.layout.rx_ring())?);
        let no_ref = || io::Error::new(io::ErrorKind::OutOfMemory, "grant table full");
        let tx_ring_ref = self.gnt.alloc().ok_or_else(no_ref)?;
        let Some(rx_ring_ref) = self.gnt.alloc() else {
            self.gnt.free(tx_ring_ref);
            return Err(no_ref());
        };
        self.tx = FrontRing::init(txp);
        self.rx = FrontRing::init(rxp);
        self.gnt
            .grant_access(tx_ring_ref, self.backend, self.layout.tx_ring(), false);
        self.gnt
            .grant_access(rx_ring_ref, self.backend, self.layout.rx_ring(), false);
        self.tx_ring_ref = tx_ring_ref;
        self.rx_ring_ref = rx_ring_ref;
        self.persistent = persistent;
        self.disconnected = false;
        self.stats.reconnects += 1;
        Ok(())
    }

    /// After [`Netfront::reconnect`] and once the new ring references are published: posts
    /// again, in the order they were first posted and each page granted afresh, the TX frames
    /// the old backend left unanswered, fills the RX ring, and notifies the backend (a kick:
    /// requests may wait on the ring from before it bound the channel). Returns the TX frames
    /// posted again.
    pub fn repost(&mut self) -> usize {
        if self.disconnected {
            return 0;
        }
        let mut slots: Vec<(u64, u16, u16)> = (self.tx_inflight.iter().enumerate())
            .filter_map(|(id, t)| t.as_ref().map(|t| (t.frame, t.slot, id as u16)))
            .collect();
        slots.sort_unstable();
        let mut frames = 0;
        let mut at = 0;
        while at < slots.len() {
            let frame = slots[at].0;
            let end = at + slots[at..].iter().take_while(|s| s.0 == frame).count();
            let need: u32 = (slots[at..end].iter())
                .map(|&(_, _, id)| {
                    1 + u32::from(
                        self.tx_inflight[id as usize]
                            .as_ref()
                            .is_some_and(|t| t.gso.is_some()),
                    )
                })
                .sum();
            if self.tx.free_requests() < need {
                // Cannot happen (they fitted on the old ring, which had as many slots): given
                // up whole, never posted in part.
                for &(_, _, id) in &slots[at..end] {
                    if let Some(t) = self.tx_inflight[id as usize].take() {
                        self.tx_free_pages.push(t.page);
                        self.tx_free_ids.push(id);
                    }
                }
                self.stats.tx_lost_at_disconnect += 1;
                at = end;
                continue;
            }
            for &(_, _, id) in &slots[at..end] {
                let (page, req, gso) = {
                    let t = self.tx_inflight[id as usize].as_ref().expect("listed");
                    (t.page, t.req, t.gso)
                };
                let gref = match self.tx_pgrant[page as usize] {
                    Some(g) => g,
                    None => {
                        let gref = self.gnt.alloc().expect("grant refs outnumber tx slots");
                        self.gnt
                            .grant_access(gref, self.backend, self.layout.tx_page(page), true);
                        if self.persistent {
                            self.tx_pgrant[page as usize] = Some(gref);
                        }
                        gref
                    }
                };
                let req = TxRequest {
                    gref: gref.0,
                    ..req
                };
                self.tx.put_request(&TxSlot::from_request(&req));
                if let Some(info) = gso {
                    self.tx
                        .put_request(&TxSlot::from_extra(&ExtraInfo::new_gso(info, false)));
                }
                let t = self.tx_inflight[id as usize].as_mut().expect("listed");
                t.gref = gref;
                t.req = req;
            }
            frames += 1;
            at = end;
        }
        self.stats.tx_reposted += frames as u64;
        self.tx.push_requests();
        self.rx_refill();
        self.notify();
        frames
    }
}
