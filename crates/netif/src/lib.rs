//! Xen's paravirtual network interface protocol (`xen/include/public/io/ring.h` and
//! `io/netif.h`), laid out byte for byte in a 4 KiB shared page.
//!
//! Contract:
//! - All raw access to a shared ring page lives in [`ring`]; a slot is read with one volatile
//!   copy into a local value ([`slots`]), so a value read from shared memory is read once.
//! - Only the frontend initializes a shared ring ([`FrontRing::init`]).
//! - Index arithmetic wraps at 2^32 exactly as `RING_IDX` does in C.
//! - Nothing here trusts the peer: [`BackRing::unconsumed_requests`] reports a producer that
//!   ran further ahead than the ring size as an error instead of a count.
//!
//! The frontend/backend *packet* logic (slot assembly, validation, GSO) lives with netback and
//! netfront; this crate knows rings and slot formats only.

pub mod csum;
pub mod ring;
pub mod slots;

pub use ring::{
    need_notify, BackRing, FrontRing, RingError, RingIdx, RingKind, RingMemory, RxRing, TxRing,
    RING_PAGE_SIZE,
};
pub use slots::*;

/// Feature and key names of the vif xenstore protocol (`io/netif.h`).
pub mod keys {
    pub const TX_RING_REF: &str = "tx-ring-ref";
    pub const RX_RING_REF: &str = "rx-ring-ref";
    pub const EVENT_CHANNEL: &str = "event-channel";
    pub const REQUEST_RX_COPY: &str = "request-rx-copy";
    pub const FEATURE_SG: &str = "feature-sg";
    pub const FEATURE_GSO_TCPV4: &str = "feature-gso-tcpv4";
    pub const FEATURE_GSO_TCPV6: &str = "feature-gso-tcpv6";
    pub const FEATURE_RX_NOTIFY: &str = "feature-rx-notify";
    pub const FEATURE_RX_COPY: &str = "feature-rx-copy";
    pub const FEATURE_RX_FLIP: &str = "feature-rx-flip";
    /// Persistent grants (as blkif's): advertised by the backend; written as 1 by a frontend
    /// that keeps reusing a bounded set of grant references for its RX and TX buffers.
    pub const FEATURE_PERSISTENT: &str = "feature-persistent";
    /// The premapped pool (HP Labs' "skb data pool mapped once"): advertised by a backend that
    /// offers it; written as 1 by a frontend that grants its whole pool of RX buffers and TX
    /// pages once, at connect, and names pool slots instead of grant references in its ring
    /// requests. A pvnet extension (no Xen netif key); see `pvnet_dd::pool`.
    pub const FEATURE_PREMAPPED: &str = "feature-premapped";
    /// The static buffer (the Xen roadmap's alternative): as [`FEATURE_PREMAPPED`], but the
    /// pool is a bounce buffer the frontend copies into (TX) and out of (RX), never its own
    /// packet memory. A pvnet extension.
    pub const FEATURE_STATIC_BUFFER: &str = "feature-static-buffer";
    /// The first of the pool's grant references, which are consecutive: RX slot `i` is
    /// `pool-ref + i`, TX slot `j` is `pool-ref + pool-rx-slots + j`.
    pub const POOL_REF: &str = "pool-ref";
    /// Number of RX slots (pages the backend writes) in the pool.
    pub const POOL_RX_SLOTS: &str = "pool-rx-slots";
    /// Number of TX slots (pages the backend reads) in the pool.
    pub const POOL_TX_SLOTS: &str = "pool-tx-slots";
    pub const MAC: &str = "mac";
    /// The vif's transmit rate in the backend's directory, `BYTES,USEC` (xl's `rate=`): the
    /// guest may send BYTES every USEC microseconds. Written by the toolstack.
    pub const RATE: &str = "rate";
    pub const STATE: &str = "state";
    pub const HANDLE: &str = "handle";
    pub const FRONTEND: &str = "frontend";
    pub const BACKEND: &str = "backend";
    pub const FRONTEND_ID: &str = "frontend-id";
    pub const BACKEND_ID: &str = "backend-id";
}
