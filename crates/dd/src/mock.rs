//! Mocks for tests and fuzz targets (feature `mock`), after rust-vmm `virtio-queue`'s `mock.rs`:
//! - [`MockFrontend`], a frontend that can put anything into a vif's rings and grant table: the
//!   hostile guest of the design's invariants;
//! - [`MockPhy`], [`MockClock`] and [`MockTap`], a physical port, a clock and a TAP port for
//!   driving [`crate::datapath::DataPath`] without a kernel.
//!
//! It owns a small guest (one grant-table frame, the two ring pages, `data_pages` data pages),
//! registers it with its own [`Hypervisor`], grants both ring pages to the driver domain and
//! connects a real [`Netback`] to them. Everything after that is up to the test: well-formed
//! requests through [`FrontRing::put_request`], or raw slot bytes and producer indices through
//! [`MockFrontend::tx_raw`] / [`MockFrontend::set_tx_req_prod`] and friends.

use std::cell::Cell;
use std::collections::VecDeque;
use std::io;
use std::rc::Rc;
use std::sync::Arc;

use pvnet_hv::evtchn::{channel_pair, EvtchnEnd};
use pvnet_hv::grant::{GuestGrantTable, Hypervisor};
use pvnet_hv::mem::{GuestMemory, OwnPage};
use pvnet_hv::{DomId, GrantRef, Pfn, PAGE_SIZE};
use pvnet_netif::*;

use pvnet_pnic::Buf;
use pvnet_wire::vnet::{VirtioNetHdr, VNET_HDR_LEN};

use crate::datapath::{Clock, Phy, TapPort, TxRefused};
use crate::netback::{Config, Features, Netback};
use crate::packet::Packet;

/// The mock guest's domain id.
pub const MOCK_DOMID: DomId = DomId(1);
/// Grant-table frames of the mock guest (512 entries).
pub const MOCK_GRANT_FRAMES: u32 = 1;
const TX_RING_PFN: u32 = MOCK_GRANT_FRAMES;
const RX_RING_PFN: u32 = MOCK_GRANT_FRAMES + 1;
const FIRST_DATA_PFN: u32 = MOCK_GRANT_FRAMES + 2;

/// A frontend with no manners, connected to a real netback.
pub struct MockFrontend {
    pub hv: Arc<Hypervisor>,
    pub mem: Arc<GuestMemory>,
    pub gnt: GuestGrantTable,
    pub tx: FrontRing<TxRing, OwnPage>,
    pub rx: FrontRing<RxRing, OwnPage>,
    pub tx_ring_ref: GrantRef,
    pub rx_ring_ref: GrantRef,
    /// The frontend's end of the event channel.
    pub evtchn: EvtchnEnd,
    data_pages: u32,
}

fn other(msg: String) -> io::Error {
    io::Error::other(msg)
}

impl MockFrontend {
    /// A guest with `data_pages` data pages and rings starting at index 0, plus a netback
    /// connected to it with `features`.
    pub fn connect(data_pages: u32, features: Features) -> io::Result<(MockFrontend, Netback)> {
        Self::connect_at(data_pages, features, RingIdx(0))
    }

    /// As [`MockFrontend::connect`], with both rings' indices starting at `start` (exercises
    /// the wrap at 2^32).
    pub fn connect_at(
        data_pages: u32,
        features: Features,
        start: RingIdx,
    ) -> io::Result<(MockFrontend, Netback)> {
        Self::connect_config(data_pages, features, start, Config::default())
    }

    /// As [`MockFrontend::connect`], with netback's connect-time configuration (its grant
    /// mechanism).
    pub fn connect_with(
        data_pages: u32,
        features: Features,
        config: Config,
    ) -> io::Result<(MockFrontend, Netback)> {
        Self::connect_config(data_pages, features, RingIdx(0), config)
    }

    /// Starts over on the same guest memory, as if [`MockFrontend::connect_at`] had created it:
    /// every page is zeroed, and the hypervisor, grant table, rings, event channel and netback
    /// are new. What the old netback held (its ring mappings, queued packets, counters) goes
    /// with it; nothing of the previous connection is visible to the new one. For fuzz targets,
    /// which would otherwise create and map a memfd per input.
    pub fn reconnect_at(
        self,
        features: Features,
        start: RingIdx,
    ) -> io::Result<(MockFrontend, Netback)> {
        let MockFrontend {
            mem, data_pages, ..
        } = self;
        let zero = [0u8; PAGE_SIZE];
        for pfn in 0..mem.pages() {
            mem.write(Pfn(pfn), 0, &zero)
                .map_err(|e| other(format!("zeroing page {pfn}: {e:?}")))?;
        }
        Self::connect_mem(mem, data_pages, features, start, Config::default())
    }

    fn connect_config(
        data_pages: u32,
        features: Features,
        start: RingIdx,
        config: Config,
    ) -> io::Result<(MockFrontend, Netback)> {
        let pages = FIRST_DATA_PFN + data_pages;
        let mem = Arc::new(GuestMemory::create("mock-guest", pages)?);
        Self::connect_mem(mem, data_pages, features, start, config)
    }

    fn connect_mem(
        mem: Arc<GuestMemory>,
        data_pages: u32,
        features: Features,
        start: RingIdx,
        config: Config,
    ) -> io::Result<(MockFrontend, Netback)> {
        let hv = Arc::new(Hypervisor::new());
        hv.add_domain(MOCK_DOMID, mem.clone(), MOCK_GRANT_FRAMES);
        let mut gnt = GuestGrantTable::new(mem.clone(), MOCK_GRANT_FRAMES);
        let page = |pfn| OwnPage::new(mem.clone(), Pfn(pfn)).expect("ring page in range");
        let tx = FrontRing::init_at(page(TX_RING_PFN), start);
        let rx = FrontRing::init_at(page(RX_RING_PFN), start);
        let tx_ring_ref = gnt.alloc().expect("fresh table");
        let rx_ring_ref = gnt.alloc().expect("fresh table");
        gnt.grant_access(tx_ring_ref, DomId::DRIVER, Pfn(TX_RING_PFN), false);
        gnt.grant_access(rx_ring_ref, DomId::DRIVER, Pfn(RX_RING_PFN), false);
        let (front_end, back_end) = channel_pair()?;
        let nb = Netback::connect_with(
            hv.clone(),
            MOCK_DOMID,
            tx_ring_ref,
            rx_ring_ref,
            back_end,
            features,
            config,
        )
        .map_err(|e| other(format!("netback connect: {e:?}")))?;
        let mock = MockFrontend {
            hv,
            mem,
            gnt,
            tx,
            rx,
            tx_ring_ref,
            rx_ring_ref,
            evtchn: front_end,
            data_pages,
        };
        Ok((mock, nb))
    }

    /// Number of data pages.
    pub fn data_pages(&self) -> u32 {
        self.data_pages
    }

    /// The frame number of data page `i`.
    ///
    /// # Panics
    /// If `i` is not a data page.
    pub fn data_pfn(&self, i: u32) -> Pfn {
        assert!(i < self.data_pages, "data page {i} out of range");
        Pfn(FIRST_DATA_PFN + i)
    }

    /// Writes `bytes` into data page `i` at `offset`.
    pub fn write_data(&self, i: u32, offset: usize, bytes: &[u8]) {
        self.mem
            .write(self.data_pfn(i), offset, bytes)
            .expect("write inside the page");
    }

    /// Reads `len` bytes of data page `i` at `offset`.
    pub fn read_data(&self, i: u32, offset: usize, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        self.mem
            .read(self.data_pfn(i), offset, &mut out)
            .expect("read inside the page");
        out
    }

    /// The raw bytes of both ring pages (TX, RX), to show a disconnected backend leaves them
    /// alone.
    pub fn ring_pages(&self) -> (Vec<u8>, Vec<u8>) {
        let mut tx = vec![0u8; PAGE_SIZE];
        let mut rx = vec![0u8; PAGE_SIZE];
        self.mem
            .read(Pfn(TX_RING_PFN), 0, &mut tx)
            .expect("ring page");
        self.mem
            .read(Pfn(RX_RING_PFN), 0, &mut rx)
            .expect("ring page");
        (tx, rx)
    }

    /// Allocates a ref and grants data page `i` to the driver domain.
    pub fn grant(&mut self, i: u32, readonly: bool) -> GrantRef {
        let r = self.gnt.alloc().expect("grant table full");
        self.gnt
            .grant_access(r, DomId::DRIVER, self.data_pfn(i), readonly);
        r
    }

    /// Number of grant entries.
    pub fn nr_grant_entries(&self) -> u32 {
        self.gnt.nr_entries()
    }

    /// Posts a TX request in the next private slot (refused only when the ring is full).
    pub fn put_tx(&mut self, r: TxRequest) -> bool {
        self.tx.put_request(&TxSlot::from_request(&r))
    }

    /// Posts an extra-info slot in the next private TX slot.
    pub fn put_tx_extra(&mut self, e: ExtraInfo) -> bool {
        self.tx.put_request(&TxSlot::from_extra(&e))
    }

    /// Writes any 12 bytes into TX ring entry `i` (no index is moved).
    pub fn tx_raw(&mut self, i: RingIdx, bytes: [u8; 12]) {
        self.tx.write_raw_entry(i, &bytes);
    }

    /// Publishes the privately posted TX requests; true if netback asked to be notified.
    pub fn push_tx(&mut self) -> bool {
        self.tx.push_requests()
    }

    /// Overwrites the shared TX `req_prod` with any value.
    pub fn set_tx_req_prod(&mut self, v: RingIdx) {
        self.tx.set_shared_req_prod(v);
    }

    /// Posts an RX request.
    pub fn put_rx(&mut self, id: u16, gref: u32) -> bool {
        self.rx.put_request(&RxRequest { id, gref })
    }

    /// Writes any 8 bytes into RX ring entry `i` (no index is moved).
    pub fn rx_raw(&mut self, i: RingIdx, bytes: [u8; 8]) {
        self.rx.write_raw_entry(i, &bytes);
    }

    /// Publishes the privately posted RX requests.
    pub fn push_rx(&mut self) -> bool {
        self.rx.push_requests()
    }

    /// Overwrites the shared RX `req_prod` with any value.
    pub fn set_rx_req_prod(&mut self, v: RingIdx) {
        self.rx.set_shared_req_prod(v);
    }

    /// Takes every TX response netback has pushed.
    pub fn take_tx_responses(&mut self) -> Result<Vec<TxResponse>, RingError> {
        let n = self.tx.unconsumed_responses()?;
        Ok((0..n).map(|_| self.tx.take_response()).collect())
    }

    /// Takes every RX response slot netback has pushed.
    pub fn take_rx_responses(&mut self) -> Result<Vec<RxSlot>, RingError> {
        let n = self.rx.unconsumed_responses()?;
        Ok((0..n).map(|_| self.rx.take_response()).collect())
    }

    /// Writes `frame` into data pages `first_page..` (4 KiB per page, offset 0), grants them and
    /// posts a well-formed TX packet: the first slot announces the whole size, `more_data`
    /// chains the rest, and a GSO extra follows the first slot when `gso` is given. Returns the
    /// ids used (`first_id`, `first_id + 1`, ...).
    pub fn post_tx_frame(
        &mut self,
        frame: &[u8],
        flags: u16,
        gso: Option<GsoInfo>,
        first_page: u32,
        first_id: u16,
    ) -> Vec<u16> {
        let chunks: Vec<&[u8]> = frame.chunks(PAGE_SIZE).collect();
        let mut ids = Vec::new();
        for (i, c) in chunks.iter().enumerate() {
            let page = first_page + i as u32;
            self.write_data(page, 0, c);
            let gref = self.grant(page, true);
            let mut f = if i == 0 { flags } else { 0 };
            if i + 1 < chunks.len() {
                f |= NETTXF_MORE_DATA;
            }
            if i == 0 && gso.is_some() {
                f |= NETTXF_EXTRA_INFO;
            }
            let id = first_id.wrapping_add(i as u16);
            let size = if i == 0 { frame.len() } else { c.len() } as u16;
            assert!(self.put_tx(TxRequest {
                gref: gref.0,
                offset: 0,
                flags: f,
                id,
                size,
            }));
            if let (0, Some(g)) = (i, gso) {
                assert!(self.put_tx_extra(ExtraInfo::new_gso(g, false)));
            }
            ids.push(id);
        }
        ids
    }
}

/// A physical port made of two queues: frames the test puts in `rx` are handed out by polls, in
/// order; frames the data path sends land in `tx` (as one buffer each, with their header).
#[derive(Debug, Default)]
pub struct MockPhy {
    pub rx: VecDeque<(VirtioNetHdr, Vec<u8>)>,
    /// Receive times (ns on [`MockClock::realtime_ns`]'s clock) of the frames in `rx`, front
    /// to front, when the test queued every frame with [`MockPhy::inject_at`]; otherwise the
    /// port hands over no times.
    pub stamps: VecDeque<u64>,
    pub tx: Vec<(VirtioNetHdr, Vec<u8>)>,
    /// Polls made, and the budgets they were given.
    pub polls: Vec<usize>,
    /// Sends fail for good while set (counted by the data path as `pnic_send_errors`).
    pub refuse_sends: bool,
    /// Sends are refused for now, this way, while set: the port's send buffer or its device's
    /// queue is full.
    pub tx_full: Option<TxRefused>,
    /// How many of the next [`Phy::lease_in_the_way`] checks answer yes (a count, so that
    /// detaching can get the lease out of the way), and what [`Phy::lease_aging`] answers.
    pub in_the_way: std::cell::Cell<u32>,
    pub aging: bool,
    /// Receive queues (0 and 1 mean one). With more, each frame belongs to the queue its
    /// destination MAC's last byte names, modulo this (the fanout program's choice), and a
    /// paused queue's frames stay in `rx`, in order, while polls take the others'.
    pub queues: usize,
    /// The queues [`Phy::pause_queues`] stopped.
    pub paused: u32,
}

impl MockPhy {
    /// Queues a received frame with an empty `virtio_net_hdr`.
    pub fn inject(&mut self, frame: &[u8]) {
        self.rx.push_back((VirtioNetHdr::default(), frame.to_vec()));
    }

    /// The queue `frame` belongs to.
    fn queue_of_frame(&self, frame: &[u8]) -> usize {
        frame
            .get(5)
            .map_or(0, |&b| usize::from(b) % self.queues.max(1))
    }

    /// Whether the frame at `i` of `rx` may be taken by a poll of `only` (any queue if None).
    fn takeable(&self, i: usize, only: Option<usize>) -> bool {
        let q = self.queue_of_frame(&self.rx[i].1);
        only.is_none_or(|o| o == q) && self.paused & (1 << q.min(31)) == 0
    }

    /// Takes at most `budget` frames of queue `only` (any unpaused queue if None), in order.
    fn take(
        &mut self,
        only: Option<usize>,
        budget: usize,
        mut rx: impl FnMut(VirtioNetHdr, Buf, Option<u64>),
    ) -> usize {
        self.polls.push(budget);
        let stamped = self.stamps.len() == self.rx.len();
        let (mut n, mut i) = (0, 0);
        while n < budget && i < self.rx.len() {
            if !self.takeable(i, only) {
                i += 1;
                continue;
            }
            let Some((vnet, frame)) = self.rx.remove(i) else {
                break;
            };
            let stamp = if stamped { self.stamps.remove(i) } else { None };
            rx(vnet, Buf::from(frame), stamp);
            n += 1;
        }
        n
    }

    /// Queues a received frame as [`MockPhy::inject`] does, received at `stamp_ns`.
    pub fn inject_at(&mut self, frame: &[u8], stamp_ns: u64) {
        self.inject(frame);
        self.stamps.push_back(stamp_ns);
    }
}

impl Phy for MockPhy {
    fn poll(&mut self, budget: usize, mut rx: impl FnMut(VirtioNetHdr, Buf)) -> usize {
        self.poll_stamped(budget, |vnet, buf, _| rx(vnet, buf))
    }

    fn poll_stamped(
        &mut self,
        budget: usize,
        rx: impl FnMut(VirtioNetHdr, Buf, Option<u64>),
    ) -> usize {
        self.take(None, budget, rx)
    }

    fn queues(&self) -> usize {
        self.queues.max(1)
    }

    fn poll_queue_stamped(
        &mut self,
        q: usize,
        budget: usize,
        rx: impl FnMut(VirtioNetHdr, Buf, Option<u64>),
    ) -> usize {
        self.take(Some(q), budget, rx)
    }

    fn queue_of(&self, mac: &[u8; 6]) -> usize {
        self.queue_of_frame(mac)
    }

    fn pause_queues(&mut self, mask: u32) {
        self.paused = mask;
    }

    fn paused_queues(&self) -> u32 {
        self.paused
    }

    fn send(&mut self, vnet: &VirtioNetHdr, pieces: &[&[u8]]) -> Result<(), TxRefused> {
        if self.refuse_sends {
            return Err(TxRefused::Failed);
        }
        if let Some(why) = self.tx_full {
            return Err(why);
        }
        self.tx.push((*vnet, pieces.concat()));
        Ok(())
    }

    fn rx_ready(&self) -> bool {
        (0..self.rx.len()).any(|i| self.takeable(i, None))
    }

    fn lease_in_the_way(&self) -> bool {
        let n = self.in_the_way.get();
        self.in_the_way.set(n.saturating_sub(1));
        n > 0
    }

    fn lease_aging(&mut self) -> bool {
        self.aging
    }
}

/// A clock the test moves: nanoseconds, and ticks at one per nanosecond (1000 per µs). With
/// [`MockClock::with_realtime`] it also has a wall clock, `offset` ns ahead of it.
#[derive(Clone, Debug, Default)]
pub struct MockClock(pub Rc<Cell<u64>>, pub Option<u64>);

impl MockClock {
    /// A clock whose [`Clock::realtime_ns`] reads `offset` ns ahead of its ticks.
    pub fn with_realtime(offset: u64) -> MockClock {
        MockClock(Rc::default(), Some(offset))
    }

    /// Moves the clock forward by `ns`.
    pub fn advance(&self, ns: u64) {
        self.0.set(self.0.get() + ns);
    }
}

impl Clock for MockClock {
    fn now_ns(&self) -> u64 {
        self.0.get()
    }

    fn ticks(&self) -> u64 {
        self.0.get()
    }

    fn ticks_per_us(&self) -> u64 {
        1000
    }

    fn realtime_ns(&self) -> Option<u64> {
        self.1.map(|o| self.0.get() + o)
    }
}

/// What a [`MockTap`] holds; shared with the test, which keeps a handle while the data path
/// owns the port.
#[derive(Debug, Default)]
pub struct MockTapState {
    /// Frames (header and Ethernet frame, as a TAP reads them) the data path will read.
    pub to_read: VecDeque<Vec<u8>>,
    /// Packets pushed and not yet flushed, and those flushed (linearized), in order.
    pub queued: Vec<Vec<u8>>,
    pub written: Vec<Vec<u8>>,
    pub flushes: u64,
    /// Pushes fail while set.
    pub refuse: bool,
    /// Its device is gone: reads fail with `EBADFD`, as a TAP's whose interface was deleted.
    pub gone: bool,
}

/// A TAP-like port backed by queues ([`MockTapState`]).
#[derive(Clone, Debug, Default)]
pub struct MockTap(pub Rc<std::cell::RefCell<MockTapState>>);

impl MockTap {
    /// Queues a frame for the data path to read, behind an empty `virtio_net_hdr`.
    pub fn inject(&self, frame: &[u8]) {
        let mut b = vec![0u8; VNET_HDR_LEN];
        b.extend_from_slice(frame);
        self.0.borrow_mut().to_read.push_back(b);
    }
}

impl TapPort for MockTap {
    fn push(&mut self, pkt: Packet) -> io::Result<()> {
        let mut s = self.0.borrow_mut();
        if s.refuse {
            return Err(io::Error::other("refused"));
        }
        s.queued.push(pkt.to_vec());
        Ok(())
    }

    fn flush(&mut self) {
        let mut s = self.0.borrow_mut();
        s.flushes += 1;
        let q = std::mem::take(&mut s.queued);
        s.written.extend(q);
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.0.borrow().gone {
            return Err(io::Error::from_raw_os_error(
                nix::errno::Errno::EBADFD as i32,
            ));
        }
        let Some(f) = self.0.borrow_mut().to_read.pop_front() else {
            return Err(io::ErrorKind::WouldBlock.into());
        };
        let n = f.len().min(buf.len());
        buf[..n].copy_from_slice(&f[..n]);
        Ok(n)
    }
}

/// What most mock frontends negotiate: scatter-gather, IPv4 TSO and RX notifications (no IPv6
/// GSO), the features the dd tests attach with.
pub fn sg_tso4_features() -> Features {
    Features {
        sg: true,
        gso_tcpv4: true,
        gso_tcpv6: false,
        rx_notify: true,
    }
}
