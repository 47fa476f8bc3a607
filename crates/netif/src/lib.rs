//! Xen's paravirtual network interface protocol (`xen/include/public/io/ring.h` and
//! `io/netif.h`), laid out byte for byte in a 4 KiB shared page.
//!
//! Contract:
//! - All raw access to a shared ring page lives in [`ring`]; slots are read with one volatile
//!   copy into a local value ([`slots`]), so a value read from shared memory is read once.
//! - Only the frontend initializes a shared ring ([`ring::FrontRing::init`]).
//! - Index arithmetic wraps at 2^32 exactly as `RING_IDX` does in C.
//! - Nothing here trusts the peer: [`ring::BackRing::unconsumed_requests`] reports a producer
//!   that ran further ahead than the ring size as an error instead of a count.

pub mod ring;
pub mod slots;

pub use ring::{BackRing, FrontRing, RingError, RingIdx, RingMemory, RingKind, RxRing, TxRing};
pub use slots::*;
