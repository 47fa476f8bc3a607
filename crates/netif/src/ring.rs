//! Shared ring mechanics of `io/ring.h`: the 64-byte shared header (`req_prod`, `req_event`,
//! `rsp_prod`, `rsp_event`, then padding), entries from byte 64 on, the private producer and
//! consumer indices of each end, and the push / check-notify / final-check rules.
//!
//! Header layout (little endian, `RING_IDX` = u32):
//! offset 0 `req_prod`, 4 `req_event`, 8 `rsp_prod`, 12 `rsp_event`, 16..20 `pvt`, 20..64 pad.
//! Entry `i` lives at `64 + (i & (SIZE - 1)) * ENTRY_SIZE`.
//!
//! All raw access to the page is in this module: the four indices through `AtomicU32`
//! (SeqCst stands in for the `mb()` of the C macros), entries through one volatile copy.

use std::marker::PhantomData;
use std::sync::atomic::{fence, AtomicU32, Ordering};

/// Size of a shared ring page.
pub const RING_PAGE_SIZE: usize = 4096;
/// Size of the shared header before the first entry.
pub const RING_HEADER_SIZE: usize = 64;

const OFF_REQ_PROD: usize = 0;
const OFF_REQ_EVENT: usize = 4;
const OFF_RSP_PROD: usize = 8;
const OFF_RSP_EVENT: usize = 12;

/// A free-running ring index (`RING_IDX`): wraps at 2^32; comparisons use wrapping differences.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct RingIdx(pub u32);

impl RingIdx {
    /// `self + n`, wrapping.
    pub fn plus(self, n: u32) -> RingIdx {
        RingIdx(self.0.wrapping_add(n))
    }
    /// `self - earlier` as a wrapping distance.
    pub fn distance_from(self, earlier: RingIdx) -> u32 {
        self.0.wrapping_sub(earlier.0)
    }
    /// Slot number inside a ring of `size` entries (a power of two).
    pub fn slot(self, size: u32) -> u32 {
        self.0 & (size - 1)
    }
}

/// Memory that holds one shared ring page.
///
/// # Safety
/// Implementors guarantee that `page_ptr()` is non-null, 8-byte aligned and valid for reads and
/// writes of [`RING_PAGE_SIZE`] bytes for as long as `self` lives. The page may be shared with
/// another process, so it is only ever accessed through atomics or volatile copies.
pub unsafe trait RingMemory {
    fn page_ptr(&self) -> *mut u8;
}

/// Which ring of a vif: fixes the entry size, and so the ring size.
pub trait RingKind {
    /// Bytes per entry (the size of the union of request and response).
    const ENTRY_SIZE: usize;
    /// Entries per ring: `(4096 - 64) / ENTRY_SIZE` rounded down to a power of two.
    const SIZE: u32 = ring_size(Self::ENTRY_SIZE);
    type Request: Copy;
    type Response: Copy;
    fn decode_request(bytes: &[u8]) -> Self::Request;
    fn encode_request(req: &Self::Request, out: &mut [u8]);
    fn decode_response(bytes: &[u8]) -> Self::Response;
    fn encode_response(rsp: &Self::Response, out: &mut [u8]);
}

/// `__CONST_RING_SIZE`: entries that fit after the header, rounded down to a power of two.
pub const fn ring_size(entry_size: usize) -> u32 {
    let n = ((RING_PAGE_SIZE - RING_HEADER_SIZE) / entry_size) as u32;
    if n == 0 {
        0
    } else {
        1 << (31 - n.leading_zeros())
    }
}

/// The TX ring of a vif: 12-byte entries, 256 of them.
pub struct TxRing;
/// The RX ring of a vif: 8-byte entries, 256 of them.
pub struct RxRing;

/// A misbehaving peer, detected while reading its indices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingError {
    /// The peer's producer index is more than a ring's worth ahead of what we consumed.
    ProducerOverflow { prod: u32, cons: u32 },
}

impl std::fmt::Display for RingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RingError::ProducerOverflow { prod, cons } => {
                write!(
                    f,
                    "producer index {prod} is more than a ring ahead of consumer {cons}"
                )
            }
        }
    }
}

impl std::error::Error for RingError {}

/// Raw access to a ring page: the only place that dereferences it.
struct Page<M: RingMemory>(M);

impl<M: RingMemory> Page<M> {
    fn idx(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off + 4 <= RING_HEADER_SIZE && off.is_multiple_of(4));
        // SAFETY: RingMemory guarantees a live, 8-aligned 4096-byte page; `off` is a 4-aligned
        // offset inside the header, and every access to it (ours and the peer's) is atomic.
        unsafe { &*(self.0.page_ptr().add(off) as *const AtomicU32) }
    }
    fn load(&self, off: usize) -> RingIdx {
        RingIdx(self.idx(off).load(Ordering::SeqCst))
    }
    fn store(&self, off: usize, v: RingIdx) {
        self.idx(off).store(v.0, Ordering::SeqCst)
    }
    fn entry_ptr<K: RingKind>(&self, i: RingIdx) -> *mut u8 {
        let off = RING_HEADER_SIZE + i.slot(K::SIZE) as usize * K::ENTRY_SIZE;
        debug_assert!(off + K::ENTRY_SIZE <= RING_PAGE_SIZE);
        // SAFETY: `slot < SIZE` and `64 + SIZE * ENTRY_SIZE <= 4096` by construction of SIZE, so
        // the pointer stays inside the page.
        unsafe { self.0.page_ptr().add(off) }
    }
    /// One volatile copy of an entry out of shared memory.
    fn read_entry<K: RingKind>(&self, i: RingIdx) -> [u8; 16] {
        let mut buf = [0u8; 16];
        let p = self.entry_ptr::<K>(i);
        for (k, b) in buf.iter_mut().take(K::ENTRY_SIZE).enumerate() {
            // SAFETY: `p + k` is inside the entry, inside the live page (see entry_ptr).
            *b = unsafe { std::ptr::read_volatile(p.add(k)) };
        }
        buf
    }
    fn write_entry<K: RingKind>(&self, i: RingIdx, bytes: &[u8]) {
        let p = self.entry_ptr::<K>(i);
        for (k, b) in bytes.iter().take(K::ENTRY_SIZE).enumerate() {
            // SAFETY: as in read_entry.
            unsafe { std::ptr::write_volatile(p.add(k), *b) };
        }
    }
}

/// Frontend end of a ring: produces requests, consumes responses.
pub struct FrontRing<K: RingKind, M: RingMemory> {
    page: Page<M>,
    /// `req_prod_pvt`: requests written but not yet pushed.
    req_prod_pvt: RingIdx,
    /// `rsp_cons`: next response to consume.
    rsp_cons: RingIdx,
    _k: PhantomData<K>,
}

impl<K: RingKind, M: RingMemory> FrontRing<K, M> {
    /// `SHARED_RING_INIT` + `FRONT_RING_INIT`: only the frontend initializes a shared ring.
    pub fn init(mem: M) -> Self {
        Self::init_at(mem, RingIdx(0))
    }

    /// As [`FrontRing::init`], with all indices starting at `start` instead of 0 (Xen always
    /// starts at 0; other starts exercise wrap-around at 2^32 in tests).
    pub fn init_at(mem: M, start: RingIdx) -> Self {
        let page = Page(mem);
        let p = page.0.page_ptr();
        for off in 16..RING_HEADER_SIZE {
            // SAFETY: offsets 16..64 are the header's private/pad bytes, inside the page.
            unsafe { std::ptr::write_volatile(p.add(off), 0) };
        }
        page.store(OFF_REQ_PROD, start);
        page.store(OFF_RSP_PROD, start);
        page.store(OFF_REQ_EVENT, start.plus(1));
        page.store(OFF_RSP_EVENT, start.plus(1));
        FrontRing {
            page,
            req_prod_pvt: start,
            rsp_cons: start,
            _k: PhantomData,
        }
    }

    pub const SIZE: u32 = K::SIZE;

    pub fn req_prod_pvt(&self) -> RingIdx {
        self.req_prod_pvt
    }
    pub fn rsp_cons(&self) -> RingIdx {
        self.rsp_cons
    }

    /// `RING_FREE_REQUESTS`: slots we may still fill before the backend answers.
    pub fn free_requests(&self) -> u32 {
        K::SIZE - self.req_prod_pvt.distance_from(self.rsp_cons)
    }

    /// Writes a request in the next private slot (`RING_GET_REQUEST(req_prod_pvt++)`).
    /// Returns false (and writes nothing) when the ring is full.
    pub fn put_request(&mut self, req: &K::Request) -> bool {
        if self.free_requests() == 0 {
            return false;
        }
        let mut buf = [0u8; 16];
        K::encode_request(req, &mut buf[..K::ENTRY_SIZE]);
        self.page
            .write_entry::<K>(self.req_prod_pvt, &buf[..K::ENTRY_SIZE]);
        self.req_prod_pvt = self.req_prod_pvt.plus(1);
        true
    }

    /// Writes raw bytes into the slot at index `i` (hostile-frontend tests only need this).
    pub fn write_raw_entry(&mut self, i: RingIdx, bytes: &[u8]) {
        self.page.write_entry::<K>(i, bytes);
    }

    /// Overwrites the shared producer index with any value (hostile-frontend tests).
    pub fn set_shared_req_prod(&mut self, v: RingIdx) {
        self.page.store(OFF_REQ_PROD, v);
    }

    /// `RING_PUSH_REQUESTS_AND_CHECK_NOTIFY`.
    pub fn push_requests(&mut self) -> bool {
        let old = self.page.load(OFF_REQ_PROD);
        let new = self.req_prod_pvt;
        fence(Ordering::Release); // wmb(): requests visible before the index
        self.page.store(OFF_REQ_PROD, new);
        // mb() (SeqCst store/load) before reading the event index.
        let event = self.page.load(OFF_REQ_EVENT);
        need_notify(old, new, event)
    }

    /// `RING_HAS_UNCONSUMED_RESPONSES`, validated: the backend may not produce responses for
    /// requests we never made.
    pub fn unconsumed_responses(&self) -> Result<u32, RingError> {
        let prod = self.page.load(OFF_RSP_PROD);
        let n = prod.distance_from(self.rsp_cons);
        if n > self.req_prod_pvt.distance_from(self.rsp_cons) {
            return Err(RingError::ProducerOverflow {
                prod: prod.0,
                cons: self.rsp_cons.0,
            });
        }
        Ok(n)
    }

    /// Copies the next response out of shared memory and advances `rsp_cons`. Call only after
    /// `unconsumed_responses` said one is there.
    pub fn take_response(&mut self) -> K::Response {
        fence(Ordering::Acquire); // rmb(): index read before the entry
        let raw = self.page.read_entry::<K>(self.rsp_cons);
        self.rsp_cons = self.rsp_cons.plus(1);
        K::decode_response(&raw[..K::ENTRY_SIZE])
    }

    /// `RING_FINAL_CHECK_FOR_RESPONSES`: re-arms `rsp_event` and re-checks, closing the race
    /// with a backend that produced while we were deciding to sleep.
    pub fn final_check_for_responses(&mut self) -> Result<bool, RingError> {
        if self.unconsumed_responses()? > 0 {
            return Ok(true);
        }
        self.page.store(OFF_RSP_EVENT, self.rsp_cons.plus(1));
        Ok(self.unconsumed_responses()? > 0)
    }
}

/// Backend end of a ring: consumes requests, produces responses.
pub struct BackRing<K: RingKind, M: RingMemory> {
    page: Page<M>,
    /// `rsp_prod_pvt`: responses written but not yet pushed.
    rsp_prod_pvt: RingIdx,
    /// `req_cons`: next request to consume.
    req_cons: RingIdx,
    _k: PhantomData<K>,
}

impl<K: RingKind, M: RingMemory> BackRing<K, M> {
    /// `BACK_RING_ATTACH` at the frontend's current indices (a fresh ring: both 0). The shared
    /// page is not written: the frontend initialized it.
    pub fn attach(mem: M) -> Self {
        let page = Page(mem);
        let start = page.load(OFF_RSP_PROD);
        BackRing {
            page,
            rsp_prod_pvt: start,
            req_cons: start,
            _k: PhantomData,
        }
    }

    pub const SIZE: u32 = K::SIZE;

    pub fn req_cons(&self) -> RingIdx {
        self.req_cons
    }
    pub fn rsp_prod_pvt(&self) -> RingIdx {
        self.rsp_prod_pvt
    }

    /// `RING_HAS_UNCONSUMED_REQUESTS`: the requests we may consume now, bounded by the free
    /// response slots. A producer index more than a ring ahead of `req_cons` is a hostile or
    /// broken frontend and is reported, never turned into a count.
    pub fn unconsumed_requests(&self) -> Result<u32, RingError> {
        let prod = self.page.load(OFF_REQ_PROD);
        let req = prod.distance_from(self.req_cons);
        if req > K::SIZE {
            return Err(RingError::ProducerOverflow {
                prod: prod.0,
                cons: self.req_cons.0,
            });
        }
        let rsp = K::SIZE - self.req_cons.distance_from(self.rsp_prod_pvt);
        Ok(req.min(rsp))
    }

    /// Copies the next request out of shared memory (once) and advances `req_cons`. Call only
    /// after `unconsumed_requests` said one is there. The caller validates the copy.
    pub fn take_request(&mut self) -> K::Request {
        fence(Ordering::Acquire); // rmb(): index read before the entry
        let raw = self.page.read_entry::<K>(self.req_cons);
        self.req_cons = self.req_cons.plus(1);
        K::decode_request(&raw[..K::ENTRY_SIZE])
    }

    /// Writes a response in the next private response slot (`RING_GET_RESPONSE(rsp_prod_pvt++)`).
    /// Responses go in the order requests were consumed, so the slot is always that of a
    /// request already taken.
    pub fn put_response(&mut self, rsp: &K::Response) {
        debug_assert!(self.req_cons.distance_from(self.rsp_prod_pvt) > 0);
        let mut buf = [0u8; 16];
        K::encode_response(rsp, &mut buf[..K::ENTRY_SIZE]);
        self.page
            .write_entry::<K>(self.rsp_prod_pvt, &buf[..K::ENTRY_SIZE]);
        self.rsp_prod_pvt = self.rsp_prod_pvt.plus(1);
    }

    /// Responses written but not yet pushed.
    pub fn pending_responses(&self) -> u32 {
        self.rsp_prod_pvt
            .distance_from(self.page.load(OFF_RSP_PROD))
    }

    /// `RING_PUSH_RESPONSES_AND_CHECK_NOTIFY`.
    pub fn push_responses(&mut self) -> bool {
        let old = self.page.load(OFF_RSP_PROD);
        let new = self.rsp_prod_pvt;
        fence(Ordering::Release); // wmb()
        self.page.store(OFF_RSP_PROD, new);
        let event = self.page.load(OFF_RSP_EVENT);
        need_notify(old, new, event)
    }

    /// Like `RING_FINAL_CHECK_FOR_REQUESTS`, for a consumer that needs `n` requests at once
    /// (a packet that spans `n` slots): arms `req_event` so that the frontend's push notifies
    /// once `n` requests are there (as Linux netback's `xenvif_rx_ring_slots_available`), then
    /// re-checks. True when `n` requests are available now.
    pub fn final_check_for_at_least(&mut self, n: u32) -> Result<bool, RingError> {
        let n = n.max(1);
        if self.unconsumed_requests()? >= n {
            return Ok(true);
        }
        self.page.store(OFF_REQ_EVENT, self.req_cons.plus(n));
        Ok(self.unconsumed_requests()? >= n)
    }

    /// `RING_FINAL_CHECK_FOR_REQUESTS`.
    pub fn final_check_for_requests(&mut self) -> Result<bool, RingError> {
        if self.unconsumed_requests()? > 0 {
            return Ok(true);
        }
        self.page.store(OFF_REQ_EVENT, self.req_cons.plus(1));
        Ok(self.unconsumed_requests()? > 0)
    }
}

/// The notify test of `RING_PUSH_*_AND_CHECK_NOTIFY`: notify when the event index the peer
/// asked for lies in `(old, new]`, i.e. `(new - event) < (new - old)` in wrapping arithmetic.
pub fn need_notify(old: RingIdx, new: RingIdx, event: RingIdx) -> bool {
    new.distance_from(event) < new.distance_from(old)
}

#[cfg(test)]
pub(crate) mod testmem {
    use super::*;

    use std::alloc::{alloc_zeroed, dealloc, Layout};
    use std::rc::Rc as Arc;

    const LAYOUT: Layout = match Layout::from_size_align(RING_PAGE_SIZE, 4096) {
        Ok(l) => l,
        Err(_) => panic!("bad layout"),
    };

    struct Buf(*mut u8);

    impl Drop for Buf {
        fn drop(&mut self) {
            // SAFETY: allocated in HeapPage::new with LAYOUT, freed once when the last Arc goes.
            unsafe { dealloc(self.0, LAYOUT) }
        }
    }

    /// A heap page standing in for a shared page.
    pub struct HeapPage(Arc<Buf>);

    impl HeapPage {
        pub fn new() -> Self {
            // SAFETY: LAYOUT has a non-zero size.
            let p = unsafe { alloc_zeroed(LAYOUT) };
            assert!(!p.is_null());
            HeapPage(Arc::new(Buf(p)))
        }
        pub fn share(&self) -> Self {
            HeapPage(self.0.clone())
        }
    }

    // SAFETY: a live 4096-byte, page-aligned allocation kept alive by the Arc; tests touch it
    // only through the ring code (atomics / volatile copies).
    unsafe impl RingMemory for HeapPage {
        fn page_ptr(&self) -> *mut u8 {
            self.0 .0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testmem::HeapPage;
    use super::*;
    use crate::slots::*;

    fn pair(start: u32) -> (FrontRing<TxRing, HeapPage>, BackRing<TxRing, HeapPage>) {
        let page = HeapPage::new();
        let f = FrontRing::init_at(page.share(), RingIdx(start));
        let b = BackRing::attach(page);
        (f, b)
    }

    fn req(id: u16) -> TxSlot {
        TxSlot::from_request(&TxRequest {
            gref: 100 + id as u32,
            offset: 0,
            flags: 0,
            id,
            size: 60,
        })
    }

    #[test]
    fn sizes_match_netif_h() {
        assert_eq!(TxRing::SIZE, 256);
        assert_eq!(RxRing::SIZE, 256);
        assert_eq!(ring_size(12), 256);
        assert_eq!(ring_size(8), 256);
        assert_eq!(ring_size(4), 1024 - 512); // 1008 entries -> 512
        const { assert!(RING_HEADER_SIZE + 256 * 12 <= RING_PAGE_SIZE) };
    }

    #[test]
    fn index_arithmetic_wraps_at_2_pow_32() {
        let a = RingIdx(u32::MAX - 1);
        let b = a.plus(3);
        assert_eq!(b, RingIdx(1));
        assert_eq!(b.distance_from(a), 3);
        assert_eq!(a.slot(256), 254);
        assert_eq!(b.slot(256), 1);
    }

    #[test]
    fn init_sets_event_indices_and_clears_header() {
        let page = HeapPage::new();
        // Dirty the header first: init must clear it.
        // SAFETY: the test owns the page; nothing else accesses it concurrently.
        unsafe { std::ptr::write_bytes(page.page_ptr(), 0xAB, RING_HEADER_SIZE) };
        let _f: FrontRing<RxRing, _> = FrontRing::init(page.share());
        let p = Page(page);
        assert_eq!(p.load(OFF_REQ_PROD), RingIdx(0));
        assert_eq!(p.load(OFF_RSP_PROD), RingIdx(0));
        assert_eq!(p.load(OFF_REQ_EVENT), RingIdx(1));
        assert_eq!(p.load(OFF_RSP_EVENT), RingIdx(1));
        // SAFETY: as above.
        let pad = unsafe { std::ptr::read_volatile(p.0.page_ptr().add(40)) };
        assert_eq!(pad, 0);
    }

    #[test]
    fn requests_and_responses_cross_wrap_point() {
        for start in [0u32, u32::MAX - 100, u32::MAX] {
            let (mut f, mut b) = pair(start);
            let mut next = 0u16;
            let mut got = 0u16;
            for _round in 0..6 {
                for _ in 0..100 {
                    assert!(f.put_request(&req(next)));
                    next = next.wrapping_add(1);
                }
                f.push_requests();
                assert_eq!(b.unconsumed_requests().unwrap(), 100);
                for _ in 0..100 {
                    let r = b.take_request().request();
                    assert_eq!(r.id, got);
                    assert_eq!(r.gref, 100 + got as u32);
                    b.put_response(&TxResponse {
                        id: r.id,
                        status: NETIF_RSP_OKAY,
                    });
                    got = got.wrapping_add(1);
                }
                b.push_responses();
                assert_eq!(f.unconsumed_responses().unwrap(), 100);
                for _ in 0..100 {
                    let rsp = f.take_response();
                    assert_eq!(rsp.status, NETIF_RSP_OKAY);
                }
            }
            assert_eq!(got, 600);
        }
    }

    #[test]
    fn ring_full_refuses_requests() {
        let (mut f, _b) = pair(u32::MAX - 3);
        for i in 0..256 {
            assert!(f.put_request(&req(i)));
        }
        assert_eq!(f.free_requests(), 0);
        assert!(!f.put_request(&req(999)));
    }

    #[test]
    fn backend_consumption_is_bounded_by_free_response_slots() {
        let (mut f, mut b) = pair(0);
        for i in 0..256 {
            f.put_request(&req(i));
        }
        f.push_requests();
        for _ in 0..256 {
            b.take_request();
        }
        // Nothing answered yet: even if the frontend lied and produced more, nothing is usable.
        f.set_shared_req_prod(RingIdx(300));
        assert_eq!(b.unconsumed_requests().unwrap(), 0);
    }

    #[test]
    fn producer_far_past_ring_size_is_an_error() {
        let (mut f, b) = pair(u32::MAX - 10);
        f.set_shared_req_prod(RingIdx(u32::MAX - 10).plus(257));
        assert!(matches!(
            b.unconsumed_requests(),
            Err(RingError::ProducerOverflow { .. })
        ));
        f.set_shared_req_prod(RingIdx(u32::MAX - 10).plus(256));
        assert_eq!(b.unconsumed_requests().unwrap(), 256);
        // A producer behind the consumer looks like a huge distance: also an error.
        f.set_shared_req_prod(RingIdx(u32::MAX - 11));
        assert!(b.unconsumed_requests().is_err());
    }

    #[test]
    fn backend_producing_unrequested_responses_is_an_error() {
        let page = HeapPage::new();
        let mut f: FrontRing<RxRing, _> = FrontRing::init(page.share());
        f.put_request(&RxRequest { id: 0, gref: 9 });
        f.push_requests();
        Page(page).store(OFF_RSP_PROD, RingIdx(5));
        assert!(f.unconsumed_responses().is_err());
    }

    #[test]
    fn need_notify_rule() {
        // event in (old, new] -> notify.
        assert!(need_notify(RingIdx(0), RingIdx(1), RingIdx(1)));
        assert!(need_notify(RingIdx(0), RingIdx(5), RingIdx(3)));
        assert!(!need_notify(RingIdx(0), RingIdx(5), RingIdx(6)));
        assert!(!need_notify(RingIdx(3), RingIdx(5), RingIdx(3)));
        // Across the wrap.
        assert!(need_notify(RingIdx(u32::MAX - 1), RingIdx(2), RingIdx(0)));
        assert!(!need_notify(RingIdx(u32::MAX - 1), RingIdx(2), RingIdx(3)));
        assert!(!need_notify(
            RingIdx(u32::MAX - 1),
            RingIdx(2),
            RingIdx(u32::MAX - 1)
        ));
    }

    #[test]
    fn push_notifies_only_when_the_backend_asked() {
        let (mut f, mut b) = pair(0);
        // Fresh ring: req_event = 1, so the first push notifies.
        f.put_request(&req(0));
        assert!(f.push_requests());
        // The backend has not re-armed: further pushes do not notify.
        f.put_request(&req(1));
        assert!(!f.push_requests());
        // The backend drains and re-arms via final check.
        assert_eq!(b.unconsumed_requests().unwrap(), 2);
        b.take_request();
        b.take_request();
        assert!(!b.final_check_for_requests().unwrap());
        f.put_request(&req(2));
        assert!(f.push_requests());
    }

    #[test]
    fn waiting_for_several_requests_is_notified_only_when_they_are_there() {
        let (mut f, mut b) = pair(u32::MAX - 2);
        f.put_request(&req(0));
        f.push_requests();
        // One posted, three needed: not yet, and the event index asks for the third.
        assert!(!b.final_check_for_at_least(3).unwrap());
        f.put_request(&req(1));
        assert!(
            !f.push_requests(),
            "two requests are not enough: no notification"
        );
        f.put_request(&req(2));
        assert!(f.push_requests(), "the third request notifies");
        assert!(b.final_check_for_at_least(3).unwrap());
    }

    #[test]
    fn final_check_catches_the_race() {
        let (mut f, mut b) = pair(7);
        f.put_request(&req(0));
        f.push_requests();
        // Work is pending: final check says so without re-arming.
        assert!(b.final_check_for_requests().unwrap());
        b.take_request();
        b.put_response(&TxResponse { id: 0, status: 0 });
        assert_eq!(b.pending_responses(), 1);
        // rsp_event = 8 (init at 7 + 1): the first response notifies.
        assert!(b.push_responses());
        assert_eq!(b.pending_responses(), 0);
        assert_eq!(f.unconsumed_responses().unwrap(), 1);
        f.take_response();
        assert!(!f.final_check_for_responses().unwrap());
        // Response produced after the re-arm: notified.
        f.put_request(&req(1));
        f.push_requests();
        b.take_request();
        b.put_response(&TxResponse { id: 1, status: 0 });
        assert!(b.push_responses());
    }
}
