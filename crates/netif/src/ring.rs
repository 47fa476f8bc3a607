//! Shared ring mechanics of `io/ring.h`: the 64-byte shared header (`req_prod`, `req_event`,
//! `rsp_prod`, `rsp_event`, then padding), entries from byte 64 on, the private producer and
//! consumer indices of each end, and the push / check-notify / final-check rules.
//!
//! Header layout (little endian, `RING_IDX` = u32):
//! offset 0 `req_prod`, 4 `req_event`, 8 `rsp_prod`, 12 `rsp_event`, 16..20 `pvt`, 20..64 pad.
//! Entry `i` lives at `64 + (i & (SIZE - 1)) * ENTRY_SIZE`.

use std::marker::PhantomData;

/// Size of a shared ring page.
pub const RING_PAGE_SIZE: usize = 4096;
/// Size of the shared header before the first entry.
pub const RING_HEADER_SIZE: usize = 64;

/// A free-running ring index (`RING_IDX`): wraps at 2^32; all comparisons are made on
/// wrapping differences.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct RingIdx(pub u32);

impl RingIdx {
    /// `self + n`, wrapping.
    pub fn add(self, n: u32) -> RingIdx {
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
/// Implementors guarantee that `page_ptr()` is non-null, 8-byte aligned, valid for reads and
/// writes of [`RING_PAGE_SIZE`] bytes for as long as `self` lives, and that the page is only
/// ever accessed through atomics or volatile copies (it may be shared with another process).
pub unsafe trait RingMemory {
    fn page_ptr(&self) -> *mut u8;
}

/// Which ring of a vif: fixes the entry size, and so the ring size.
pub trait RingKind {
    /// Bytes per entry (the size of the union of request and response).
    const ENTRY_SIZE: usize;
    /// Entries per ring: `(4096 - 64) / ENTRY_SIZE` rounded down to a power of two (256 for both).
    const SIZE: u32;
    type Request: Copy;
    type Response: Copy;
    fn read_request(bytes: &[u8]) -> Self::Request;
    fn write_request(req: &Self::Request, out: &mut [u8]);
    fn read_response(bytes: &[u8]) -> Self::Response;
    fn write_response(rsp: &Self::Response, out: &mut [u8]);
}

/// The TX ring: 12-byte entries (`netif_tx_request`), 256 of them.
pub struct TxRing;
/// The RX ring: 8-byte entries (`netif_rx_request` / `netif_rx_response`), 256 of them.
pub struct RxRing;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror_like::Error)]
pub enum RingError {
    /// The peer's producer index is more than a ring's worth ahead of our consumer index.
    ProducerOverflow { prod: u32, cons: u32 },
}

mod thiserror_like {
    pub use core::fmt::Debug as Error;
}

/// Frontend end of a ring: produces requests, consumes responses.
pub struct FrontRing<K: RingKind, M: RingMemory> {
    mem: M,
    /// `req_prod_pvt`: requests written but not yet pushed.
    pub req_prod_pvt: RingIdx,
    /// `rsp_cons`: next response to consume.
    pub rsp_cons: RingIdx,
    _k: PhantomData<K>,
}

/// Backend end of a ring: consumes requests, produces responses.
pub struct BackRing<K: RingKind, M: RingMemory> {
    mem: M,
    /// `rsp_prod_pvt`: responses written but not yet pushed.
    pub rsp_prod_pvt: RingIdx,
    /// `req_cons`: next request to consume.
    pub req_cons: RingIdx,
    _k: PhantomData<K>,
}
