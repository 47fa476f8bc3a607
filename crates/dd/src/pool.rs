//! The two pool mechanisms of netback: **premapped** and **static** (issue #20; HP Labs, Xen
//! Summit 2006, slides "Cost of mapping I/O page" and "Alternative mechanism").
//!
//! Both remove every per-packet grant operation: the frontend grants a fixed pool of pages
//! once, when it connects; the backend maps the whole pool once, when the vif connects, and
//! keeps it mapped until the vif disconnects or fails. A packet then crosses with one bounded
//! `memcpy` between the backend's packet memory and a mapped pool page. The ring formats do not
//! change; only the meaning of one field does: the `gref` of an RX request and of a TX request
//! names a **pool slot** instead of a grant reference.
//!
//! # premapped: the seed's bound
//!
//! The seed measured "pre-mapped: skb data pool mapped once by dom0 at initialization and
//! reused for all packets", the cost of copying when nothing is mapped or unmapped per packet.
//! pvnet reads it this way: the pool is the frontend's own packet memory, its 256 RX buffers and
//! 256 TX pages (netfront's `RX_BUFS` and `TX_PAGES`). On RX the backend copies the packet
//! straight into the buffer the frontend hands to its stack; on TX it copies straight out of
//! the page the stack wrote. One copy per direction, as under `copy`, `map` and `persistent`,
//! but neither a hypercall nor a pin nor a page-table change per packet.
//!
//! The price is trust, as with blkif's persistent grants: the pool stays writable by the
//! backend for the vif's whole life, including while the guest's stack reads a buffer the
//! backend has answered.
//!
//! # static: the Xen roadmap's alternative
//!
//! "Static buffer between netfront and netback with 2 data copies on RX". The backend's side is
//! the premapped one, word for word: a pool granted once and mapped once, one bounded `memcpy`
//! per slot. The difference is the frontend's: the pool is a bounce buffer, never its packet
//! memory. On RX netfront copies each packet out of its slot into a buffer of its own before
//! its stack sees it (the second copy); on TX it copies the frame from its own buffer into a
//! slot (TX is symmetric: two copies as well). What the guest gains for the second copy is that
//! none of its own memory is ever reachable by the driver domain, and that a packet cannot
//! change after the frontend took it.
//!
//! # Negotiation (the store)
//!
//! - The backend advertises `feature-premapped` = 1 or `feature-static-buffer` = 1 in its
//!   directory when the vif is configured for that mechanism (and only then).
//! - A frontend that takes it writes the same key = 1 in its own directory, plus `pool-ref`
//!   (the first of the pool's grant references, which are consecutive), `pool-rx-slots` and
//!   `pool-tx-slots` (at most [`POOL_MAX_SLOTS`] each, at least one each). RX slot `i` is grant
//!   `pool-ref + i`, granted writable; TX slot `j` is grant `pool-ref + pool-rx-slots + j`
//!   (read-only suffices).
//! - A frontend that takes neither runs `copy` (every frontend can). One that writes a pool key
//!   the backend did not advertise, or both, is refused: the vif does not connect, the backend
//!   goes to `Closing`, and the daemon counts `feature_refused`
//!   ([`crate::xenbus::read_frontend_pool`], [`crate::xenbus::HandshakeError::NotOffered`]).
//!
//! # Untrusted input and revocation
//!
//! - Every ring request is copied out of the ring once (as for every mechanism), then its slot
//!   is checked against the pool (RX slots for RX requests, TX slots for TX requests): a slot
//!   outside ends the vif with `rx_pool_bad_slot` / `tx_pool_bad_slot`. TX offsets and sizes go
//!   through the checks of every mechanism (`tx_cross_page`, `tx_bad_size`, ...): a slot is one
//!   page, so a copy can never leave its mapping.
//! - A pool grant that cannot be mapped at connect (not granted, granted to someone else,
//!   read-only for an RX slot, beyond the table) ends the vif at once with `pool_map_failed`.
//! - Revocation: each pool page is mapped with [`pvnet_hv::grant::Hypervisor::map_grant`], which
//!   pins the grant for the mapping's life, as `GNTTABOP_map_grant_ref` does in Xen. So the
//!   frontend's `end_access` is refused while the vif is connected (Linux's
//!   `gnttab_end_foreign_access` would defer it), and the backend never writes a page whose
//!   grant has ended: the pages come back when the vif disconnects and the pool is unmapped.
//!   A frontend that, instead, overwrites its pinned grant entries in place (what no Linux
//!   frontend does: a guest can only thereby hurt itself, since the mapping still names its own
//!   frame) is found by an audit of the pool, which runs every [`POOL_AUDIT_EVERY`] packets and
//!   can be called at any time ([`crate::netback::Netback::audit_pool`]): the vif ends with
//!   `pool_revoked`. The audit reads 512 entries, a cost spread over thousands of packets, not
//!   a per-packet grant operation.

use pvnet_hv::grant::{GntStatus, GrantMapping, Hypervisor};
use pvnet_hv::{DomId, GrantRef};
use serde::Serialize;

/// Most slots of each direction a pool may have (netfront's 256 RX buffers and 256 TX pages).
pub const POOL_MAX_SLOTS: u32 = 256;

/// Packets (RX and TX together) between two audits of a pool's grant entries.
pub const POOL_AUDIT_EVERY: u64 = 4096;

/// What the frontend wrote to describe its pool (read and checked by
/// [`crate::xenbus::read_frontend_pool`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PoolSpec {
    /// The first grant reference; the pool's references are consecutive.
    pub first_ref: u32,
    /// RX slots: grants `first_ref .. first_ref + rx_slots`, writable.
    pub rx_slots: u32,
    /// TX slots: the next `tx_slots` grants.
    pub tx_slots: u32,
}

impl PoolSpec {
    /// Whether the counts are within the protocol's bounds and the references don't wrap.
    pub fn valid(&self) -> bool {
        (1..=POOL_MAX_SLOTS).contains(&self.rx_slots)
            && (1..=POOL_MAX_SLOTS).contains(&self.tx_slots)
            && self
                .first_ref
                .checked_add(self.rx_slots + self.tx_slots)
                .is_some()
    }

    /// The grant of RX slot `i`.
    pub fn rx_ref(&self, i: u32) -> GrantRef {
        GrantRef(self.first_ref + i)
    }

    /// The grant of TX slot `j`.
    pub fn tx_ref(&self, j: u32) -> GrantRef {
        GrantRef(self.first_ref + self.rx_slots + j)
    }
}

/// Touches the mapped page once, so that its page-table entry exists before the first packet
/// (a grant map in Xen installs the entry at once; an `mmap` here would otherwise take the fault
/// at the first packet that uses the slot, on the data path).
fn prefault(m: GrantMapping) -> GrantMapping {
    // SAFETY: `m` maps one whole page, readable, pinned while `m` lives; a volatile read of its
    // first byte reads guest memory the driver domain was granted and uses nothing of it.
    unsafe { std::ptr::read_volatile(m.ptr()) };
    m
}

/// A frontend's pool, mapped into the driver domain: one pinned mapping per slot.
#[derive(Default)]
pub(crate) struct Pool {
    rx: Vec<GrantMapping>,
    tx: Vec<GrantMapping>,
}

impl Pool {
    /// Maps every slot of `spec` (RX writable, TX read-only). On failure nothing stays mapped
    /// and the failing grant's status is returned with the number of pages mapped meanwhile
    /// (all unmapped again).
    pub(crate) fn map(
        hv: &Hypervisor,
        domid: DomId,
        spec: PoolSpec,
    ) -> Result<Pool, (GntStatus, u64)> {
        if !spec.valid() {
            return Err((GntStatus::BadGntref, 0));
        }
        let mut pool = Pool::default();
        for i in 0..spec.rx_slots {
            match hv.map_grant(DomId::DRIVER, domid, spec.rx_ref(i), false) {
                Ok(m) => pool.rx.push(prefault(m)),
                Err(st) => return Err((st, pool.len() as u64)),
            }
        }
        for j in 0..spec.tx_slots {
            match hv.map_grant(DomId::DRIVER, domid, spec.tx_ref(j), true) {
                Ok(m) => pool.tx.push(prefault(m)),
                Err(st) => return Err((st, pool.len() as u64)),
            }
        }
        Ok(pool)
    }

    /// Pages mapped.
    pub(crate) fn len(&self) -> usize {
        self.rx.len() + self.tx.len()
    }

    /// The writable page of RX slot `slot`, if the pool has it.
    pub(crate) fn rx_page(&self, slot: u32) -> Option<*mut u8> {
        self.rx.get(slot as usize).map(GrantMapping::ptr)
    }

    /// The page of TX slot `slot`, if the pool has it (read only).
    pub(crate) fn tx_page(&self, slot: u32) -> Option<*const u8> {
        self.tx.get(slot as usize).map(|m| m.ptr() as *const u8)
    }

    /// Whether every slot's grant entry still grants its mapped frame (see the module docs).
    pub(crate) fn audit(&self) -> bool {
        self.rx
            .iter()
            .chain(&self.tx)
            .all(GrantMapping::still_granted)
    }

    /// Unmaps everything; returns the pages unmapped.
    pub(crate) fn clear(&mut self) -> u64 {
        let n = self.len() as u64;
        self.rx.clear();
        self.tx.clear();
        n
    }
}
