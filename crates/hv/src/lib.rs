//! pvnet-hv — the "hypervisor services" of pvnet (docs/architecture.md).
//!
//! This library plays the part Xen plays for the network I/O path: it owns each guest's
//! pseudo-physical memory ([`mem`]), machine frames and page flipping ([`frames`]), implements the v1 grant table and `GNTTABOP_copy` /
//! grant map ([`grant`]), event channels as eventfd pairs ([`evtchn`]), a xenstore-like tree with
//! watches ([`store`]), and the control-socket transport the toolstack and guests talk over
//! ([`ctl`]). For HVM guests it adds Xen's ioreq page and the vCPU ↔ device-model round trip
//! ([`ioreq`]), a device model's foreign access to guest memory for `rep ins`/`rep outs`
//! ([`foreign`]), and the modelled cost of a VM exit ([`exit`]).
//!
//! Only [`mem`], [`grant`] and [`ioreq`] touch shared memory, and they do it exclusively through
//! raw pointers and atomics: nothing a guest writes is trusted (docs/architecture.md, "Invariants"). [`foreign`]
//! is the one place a driver-domain process reaches into a guest's memory without a grant, and it
//! does so only through [`mem`]'s bounds-checked copies.

pub mod ctl;
pub mod evtchn;
pub mod exit;
pub mod foreign;
pub mod frames;
pub mod grant;
pub mod ioreq;
pub mod mem;
pub mod store;

use serde::{Deserialize, Serialize};

/// Size of a guest page, a grant, and a ring.
pub const PAGE_SIZE: usize = 4096;

/// A domain id (`domid_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DomId(pub u16);

impl DomId {
    /// The driver domain (dom0): the pvnet daemon itself.
    pub const DRIVER: DomId = DomId(0);
}

impl std::fmt::Display for DomId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A grant reference (`grant_ref_t`): an index into a domain's grant table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct GrantRef(pub u32);

/// A pseudo-physical frame number: a page index into a domain's guest memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Pfn(pub u32);

/// An event-channel port number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Port(pub u32);
