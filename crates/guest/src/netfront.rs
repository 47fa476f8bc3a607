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
                gref: gref.0,
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
        if self.persistent {
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
        for &(pfn, off, sz) in &self.rx_batch_pieces {
            let p = self
                .mem
                .page_ptr(pfn)
                .expect("the page was found when the packet was gathered");
            // SAFETY: the page belongs to this guest's memory mapping, which outlives `flat`;
            // its grant was revoked in rx_reclaim, so the backend can no longer write it (hv
            // checks the grant on every copy), and nothing else in this process touches it
            // until it is reposted by rx_refill, which runs after this batch is delivered.
            // off + sz <= 4096 was checked when the packet was gathered.
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
            let Some(p) = self.mem.page_ptr(pfn) else {
                self.stats.rx_bad_response += 1;
                return false;
            };
            // SAFETY: the page belongs to this guest's memory mapping, which outlives `pieces`;
            // its grant was revoked in rx_reclaim, so the backend can no longer write it (hv
            // checks the grant on every copy) and nothing else in this process touches it until
            // it is reposted after `deliver` returns. off + sz <= 4096 was checked above.
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
                if self.persistent && self.tx_pgrant[inf.page as usize] == Some(inf.gref) {
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
        self.tx_free_pages.len() >= TX_MAX_PAGES
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
        let total = {
            let mut iov: Vec<IoSliceMut<'_>> = Vec::with_capacity(TX_MAX_PAGES + 1);
            iov.push(IoSliceMut::new(&mut hdr));
            for i in 0..TX_MAX_PAGES {
                let pg = page_at(&self.tx_free_pages, i);
                let p = self
                    .mem
                    .page_ptr(self.layout.tx_page(pg))
                    .expect("tx page in range");
                // SAFETY: a free TX page is not granted to anyone (its grant was revoked before
                // it went back to the free list) and not otherwise referenced in this process;
                // the slice lives only for this read.
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
        for i in 0..used {
            let pg = page_at(&self.tx_free_pages, i);
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
            let seg = (len - i * PAGE_SIZE).min(PAGE_SIZE);
            let mut flags = if i == 0 { flags0 } else { 0 };
            if i + 1 < used {
                flags |= NETTXF_MORE_DATA;
            }
            let size = if i == 0 { len } else { seg } as u16;
            self.tx.put_request(&TxSlot::from_request(&TxRequest {
                gref: gref.0,
                offset: 0,
                flags,
                id,
                size,
            }));
            if i == 0 {
                if let Some(t) = gso {
                    let info = GsoInfo {
                        size: vh.gso_size,
                        gso_type: t,
                        features: 0,
                    };
                    self.tx
                        .put_request(&TxSlot::from_extra(&ExtraInfo::new_gso(info, false)));
                }
            }
            self.tx_inflight[id as usize] = Some(TxInflight { page: pg, gref });
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
        if self.tx.push_requests() {
            self.notify();
        }
    }
}
