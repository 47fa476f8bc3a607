//! The grant table, Xen v1 layout (`xen/include/public/grant_table.h`), and the hypervisor's
//! grant operations: `GNTTABOP_copy` ([`Hypervisor::copy_to_guest`],
//! [`Hypervisor::copy_from_guest`]), grant map/unmap ([`Hypervisor::map_grant`]) and persistent
//! mappings ([`Hypervisor::map_grant_persistent`]).
//!
//! A domain's grant table occupies its guest pages `[0, grant_frames)`. Entry `r` is 8 bytes at
//! byte `8 * r`, little endian: `flags: u16` at 0, `domid: u16` at 2, `frame: u32` at 4. The
//! first two fields are read and updated together as one 32-bit atomic (Xen's "scombo"), which is
//! how the hypervisor pins an entry (`GTF_reading` / `GTF_writing`) and how the guest revokes it
//! ([`GuestGrantTable::end_access`]) without racing each other.
//!
//! Everything a guest writes into its table is hostile input: each copy op is validated on its
//! own, a failure sets that op's status (and bumps one named counter) without aborting the batch,
//! and the frame number is read exactly once, after the entry is pinned.
//!
//! The hypervisor keeps, per domain, a private "active entry" for every grant (as Xen's
//! `active_grant_entry`): a tiny spin lock plus reader and writer pin counts. The shared
//! `GTF_reading`/`GTF_writing` bits are set by the first pin and cleared by the last unpin, so
//! concurrent copies and long-lived maps of the same grant do not clear each other's pins.
//!
//! Ending access while a grant is in use: as in Xen, [`GuestGrantTable::end_access`] refuses
//! while `GTF_reading`/`GTF_writing` are set, so a [`GrantMapping`] (pinned for its whole life)
//! holds the grant until it is dropped, and the guest must defer its revocation (Linux's
//! `gnttab_end_foreign_access` puts such a grant on a deferred list and retries). A
//! [`PersistentMapping`] is different: the page stays mapped in this process, but the grant is
//! pinned only for each access ([`PersistentMapping::access`]), which revalidates the entry
//! (still granted to the caller, same frame, writable if written) exactly as a copy does. So the
//! guest can end access at any moment no access is running, and once it has, every later
//! access fails: nothing is ever written through the mapping into a page no longer granted.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use serde::Serialize;

use crate::frames::{FrameWindow, Machine, Mfn};
use crate::mem::{GuestMemory, PageMapping};
use crate::{DomId, GrantRef, Pfn, PAGE_SIZE};

/// Entry type: not in use.
pub const GTF_INVALID: u16 = 0;
/// Entry type: the grantee may map or copy the frame.
pub const GTF_PERMIT_ACCESS: u16 = 1;
/// Entry type: the grantee may transfer a page to the granter (page flip).
pub const GTF_ACCEPT_TRANSFER: u16 = 2;
/// Mask of the entry type in `flags`.
pub const GTF_TYPE_MASK: u16 = 3;
/// Access: the grantee may only read.
pub const GTF_READONLY: u16 = 1 << 2;
/// Set by the hypervisor while the grantee reads the frame (copy source or any map).
pub const GTF_READING: u16 = 1 << 3;
/// Set by the hypervisor while the grantee writes the frame (copy destination or rw map).
pub const GTF_WRITING: u16 = 1 << 4;
/// Transfer: the hypervisor committed to the transfer (accept-transfer entries).
pub const GTF_TRANSFER_COMMITTED: u16 = 1 << 2;
/// Transfer: the transfer is complete, `frame` holds the new frame.
pub const GTF_TRANSFER_COMPLETED: u16 = 1 << 3;

/// Bytes per v1 grant entry.
pub const GRANT_ENTRY_SIZE: usize = 8;
/// Entries per grant-table frame.
pub const ENTRIES_PER_FRAME: u32 = (PAGE_SIZE / GRANT_ENTRY_SIZE) as u32;
/// Default number of grant-table frames per domain (2048 entries).
pub const GRANT_FRAMES: u32 = 4;
/// Refs reserved for the toolstack (`GNTTAB_NR_RESERVED_ENTRIES`); never handed out by `alloc`.
pub const GNTTAB_NR_RESERVED_ENTRIES: u32 = 8;

/// How often a pin retries when the guest keeps changing the entry under it (Xen gives up the
/// same way: "Shared grant entry is unstable").
const PIN_RETRIES: u32 = 16;

/// Status of one grant operation (`GNTST_*`).
#[repr(i16)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum GntStatus {
    /// Success.
    Okay = 0,
    /// Entry not granted to the caller, wrong type, read-only, revoked, or unstable.
    GeneralError = -1,
    /// Unknown target domain.
    BadDomain = -2,
    /// Grant reference out of range.
    BadGntref = -3,
    /// Bad map handle.
    BadHandle = -4,
    /// Bad virtual address.
    BadVirtAddr = -5,
    /// Bad device address.
    BadDevAddr = -6,
    /// Out of mapping space.
    NoDeviceSpace = -7,
    /// Not permitted.
    PermissionDenied = -8,
    /// The granted frame is not a guest data page.
    BadPage = -9,
    /// Offset + length crosses the page.
    BadCopyArg = -10,
    /// Address too big.
    AddressTooBig = -11,
    /// Try again.
    Eagain = -12,
}

impl GntStatus {
    /// The numeric `GNTST_*` value.
    pub fn as_i16(self) -> i16 {
        self as i16
    }
}

/// A decoded grant entry (a snapshot; the guest may change it at any time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrantEntry {
    /// `GTF_*` flags.
    pub flags: u16,
    /// The domain granted access.
    pub domid: u16,
    /// The granted frame.
    pub frame: u32,
}

/// Atomic views of a grant table inside guest memory.
struct Table {
    mem: Arc<GuestMemory>,
    nr_entries: u32,
}

impl Table {
    /// # Panics
    /// If the table's frames are not inside `mem`.
    fn new(mem: Arc<GuestMemory>, frames: u32) -> Table {
        assert!(
            frames <= mem.pages(),
            "grant table of {frames} frames does not fit in {} pages",
            mem.pages()
        );
        let nr_entries = frames
            .checked_mul(ENTRIES_PER_FRAME)
            .expect("grant table too large");
        Table { mem, nr_entries }
    }

    fn word(&self, r: u32, byte: usize) -> &AtomicU32 {
        assert!(r < self.nr_entries, "grant ref {r} out of range");
        let base = self.mem.page_ptr(Pfn(0)).expect("table checked non-empty");
        // SAFETY: r < nr_entries = frames * 512 and frames <= pages, so byte `8r + byte` (byte is
        // 0 or 4) lies inside the mapping; the mapping is page aligned so the u32 is 4-aligned;
        // it lives as long as `self.mem`, which outlives the returned borrow of `self`; and in
        // this process the table's words are only ever accessed atomically.
        unsafe { AtomicU32::from_ptr(base.add(r as usize * GRANT_ENTRY_SIZE + byte).cast()) }
    }

    /// `flags | domid << 16`, as one atomic.
    fn scombo(&self, r: u32) -> &AtomicU32 {
        self.word(r, 0)
    }

    fn frame(&self, r: u32) -> &AtomicU32 {
        self.word(r, 4)
    }

    fn entry(&self, r: u32) -> GrantEntry {
        let v = u32::from_le(self.scombo(r).load(Ordering::Acquire));
        GrantEntry {
            flags: v as u16,
            domid: (v >> 16) as u16,
            frame: u32::from_le(self.frame(r).load(Ordering::Acquire)),
        }
    }

    /// Publishes an entry as Linux's `gnttab_grant_foreign_access_ref` does: the frame first,
    /// then flags and domid with release ordering, so whoever sees the flags sees the frame.
    fn publish(&self, r: u32, flags: u16, domid: u16, frame: u32) {
        self.frame(r).store(frame.to_le(), Ordering::Relaxed);
        let v = u32::from(flags) | u32::from(domid) << 16;
        self.scombo(r).store(v.to_le(), Ordering::Release);
    }
}

/// The guest's view of its own grant table: allocates refs and grants/revokes access.
pub struct GuestGrantTable {
    table: Table,
    free: Vec<u32>,
    allocated: Vec<bool>,
}

impl GuestGrantTable {
    /// Takes over guest pages `[0, frames)` as the grant table and zeroes every entry.
    ///
    /// # Panics
    /// If `frames` exceeds the memory's pages.
    pub fn new(mem: Arc<GuestMemory>, frames: u32) -> GuestGrantTable {
        let table = Table::new(mem, frames);
        for r in 0..table.nr_entries {
            table.frame(r).store(0, Ordering::Relaxed);
            table.scombo(r).store(0, Ordering::Release);
        }
        let n = table.nr_entries;
        // Popped from the end: lowest free ref first.
        let free = (GNTTAB_NR_RESERVED_ENTRIES.min(n)..n).rev().collect();
        GuestGrantTable {
            table,
            free,
            allocated: vec![false; n as usize],
        }
    }

    /// Number of entries (`frames * 512`).
    pub fn nr_entries(&self) -> u32 {
        self.table.nr_entries
    }

    /// Refs not allocated.
    pub fn free_count(&self) -> usize {
        self.free.len()
    }

    /// Allocates an unused ref (never one of the reserved first 8), or `None` if all are in use.
    pub fn alloc(&mut self) -> Option<GrantRef> {
        let r = self.free.pop()?;
        self.allocated[r as usize] = true;
        Some(GrantRef(r))
    }

    /// Returns a ref to the free pool. Refs that are not allocated (reserved, out of range,
    /// already free) are ignored. The caller must have ended access first.
    pub fn free(&mut self, r: GrantRef) {
        if let Some(a) = self.allocated.get_mut(r.0 as usize) {
            if *a {
                *a = false;
                self.free.push(r.0);
            }
        }
    }

    /// Grants domain `to` access to frame `pfn` through ref `r`.
    ///
    /// # Panics
    /// If `r` is out of range.
    pub fn grant_access(&self, r: GrantRef, to: DomId, pfn: Pfn, readonly: bool) {
        let flags = GTF_PERMIT_ACCESS | if readonly { GTF_READONLY } else { 0 };
        self.table.publish(r.0, flags, to.0, pfn.0);
    }

    /// Offers page `pfn` for a transfer from `to` (Linux's `gnttab_grant_foreign_transfer_ref`):
    /// a `GTF_accept_transfer` entry whose frame is the pfn the guest gives in exchange.
    ///
    /// # Panics
    /// If `r` is out of range.
    pub fn grant_transfer(&self, r: GrantRef, to: DomId, pfn: Pfn) {
        self.table.publish(r.0, GTF_ACCEPT_TRANSFER, to.0, pfn.0);
    }

    /// If the transfer through `r` has completed (`GTF_transfer_completed`), ends the entry and
    /// returns the machine frame the granter now has at the offered pfn (Linux's
    /// `gnttab_end_foreign_transfer_ref`, without its wait). `None` while not completed; the
    /// entry is then left as is.
    ///
    /// # Panics
    /// If `r` is out of range.
    pub fn end_transfer(&self, r: GrantRef) -> Option<u32> {
        let v = u32::from_le(self.table.scombo(r.0).load(Ordering::Acquire));
        let flags = v as u16;
        if flags & GTF_TYPE_MASK != GTF_ACCEPT_TRANSFER || flags & GTF_TRANSFER_COMPLETED == 0 {
            return None;
        }
        let frame = u32::from_le(self.table.frame(r.0).load(Ordering::Acquire));
        self.table.scombo(r.0).store(0, Ordering::Release);
        Some(frame)
    }

    /// Revokes ref `r` (Linux's `gnttab_end_foreign_access_ref`, v1): clears the flags only if
    /// the grantee holds no pin. Returns `false` while the grant is still in use.
    ///
    /// # Panics
    /// If `r` is out of range.
    pub fn end_access(&self, r: GrantRef) -> bool {
        let sc = self.table.scombo(r.0);
        let mut raw = sc.load(Ordering::Acquire);
        loop {
            let v = u32::from_le(raw);
            if (v as u16) & (GTF_READING | GTF_WRITING) != 0 {
                return false;
            }
            let cleared = (v & 0xFFFF_0000).to_le();
            match sc.compare_exchange(raw, cleared, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(now) => raw = now,
            }
        }
    }

    /// Reads entry `r` (for diagnostics and tests).
    ///
    /// # Panics
    /// If `r` is out of range.
    pub fn entry(&self, r: GrantRef) -> GrantEntry {
        self.table.entry(r.0)
    }

    /// Writes any contents into entry `r` (any index below `nr_entries`, reserved ones too):
    /// lets tests play a hostile guest.
    ///
    /// # Panics
    /// If `r` is out of range.
    pub fn raw_write_entry(&self, r: GrantRef, flags: u16, domid: u16, frame: u32) {
        self.table.publish(r.0, flags, domid, frame);
    }
}

/// A snapshot of the grant counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct GrantStatsSnapshot {
    /// Copy batches (calls of `copy_to_guest` / `copy_from_guest`).
    pub copy_batches: u64,
    /// Copy ops processed, successful or not.
    pub copy_ops: u64,
    /// Bytes copied by successful ops.
    pub copy_bytes: u64,
    /// Successful grant maps.
    pub maps: u64,
    /// Grant unmaps (mappings dropped).
    pub unmaps: u64,
    /// Ops or maps naming an unknown domain.
    pub bad_domain: u64,
    /// Copy ops whose `offset + len` exceeds the page.
    pub bad_copy_arg: u64,
    /// Grant refs beyond the table.
    pub bad_gntref: u64,
    /// Entries not permitting access to the caller (wrong type or domid, revoked, unstable).
    pub general_error: u64,
    /// Writes (copy destination or rw map) into a read-only grant.
    pub readonly_violation: u64,
    /// Granted frames outside guest memory or inside the grant table.
    pub bad_page: u64,
    /// Pins refused because a grant's pin count is at its limit.
    pub pin_overflow: u64,
    /// Maps that passed validation but whose `mmap` failed.
    pub map_failed: u64,
    /// Accesses through a persistent mapping (each one pin and unpin).
    pub persistent_accesses: u64,
    /// Accesses through a persistent mapping refused because the grant now names another frame.
    pub persistent_moved: u64,
}

#[derive(Default)]
struct Stats {
    copy_batches: AtomicU64,
    copy_ops: AtomicU64,
    copy_bytes: AtomicU64,
    maps: AtomicU64,
    unmaps: AtomicU64,
    bad_domain: AtomicU64,
    bad_copy_arg: AtomicU64,
    bad_gntref: AtomicU64,
    general_error: AtomicU64,
    readonly_violation: AtomicU64,
    bad_page: AtomicU64,
    pin_overflow: AtomicU64,
    map_failed: AtomicU64,
    persistent_accesses: AtomicU64,
    persistent_moved: AtomicU64,
}

macro_rules! stats_fields {
    ($m:ident) => {
        $m!(
            copy_batches,
            copy_ops,
            copy_bytes,
            maps,
            unmaps,
            bad_domain,
            bad_copy_arg,
            bad_gntref,
            general_error,
            readonly_violation,
            bad_page,
            pin_overflow,
            map_failed,
            persistent_accesses,
            persistent_moved
        )
    };
}

impl Stats {
    /// Adds a batch's local counts (counters are kept in locals during a batch and flushed once).
    fn flush(&self, l: &GrantStatsSnapshot) {
        macro_rules! add {
            ($($f:ident),*) => { $( if l.$f != 0 { self.$f.fetch_add(l.$f, Ordering::Relaxed); } )* };
        }
        stats_fields!(add);
    }

    fn snapshot(&self) -> GrantStatsSnapshot {
        macro_rules! load {
            ($($f:ident),*) => { GrantStatsSnapshot { $( $f: self.$f.load(Ordering::Relaxed) ),* } };
        }
        stats_fields!(load)
    }
}

/// Why a pin or a frame check failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fail {
    General,
    Readonly,
    BadPage,
    Overflow,
}

impl Fail {
    fn record(self, l: &mut GrantStatsSnapshot) -> GntStatus {
        match self {
            Fail::General => {
                l.general_error += 1;
                GntStatus::GeneralError
            }
            Fail::Readonly => {
                l.readonly_violation += 1;
                GntStatus::GeneralError
            }
            Fail::BadPage => {
                l.bad_page += 1;
                GntStatus::BadPage
            }
            Fail::Overflow => {
                l.pin_overflow += 1;
                GntStatus::NoDeviceSpace
            }
        }
    }
}

// Active entry word: bit 31 lock, bits 16..31 writer pins, bits 0..16 reader pins.
const ACTIVE_LOCK: u32 = 1 << 31;
const READER_ONE: u32 = 1;
const READER_MAX: u32 = 0xFFFF;
const WRITER_SHIFT: u32 = 16;
const WRITER_MAX: u32 = 0x7FFF;

fn readers(a: u32) -> u32 {
    a & READER_MAX
}

fn writers(a: u32) -> u32 {
    (a >> WRITER_SHIFT) & WRITER_MAX
}

/// One copy op, as the hypervisor sees it.
#[derive(Clone, Copy)]
struct OpSpec {
    caller: DomId,
    gref: GrantRef,
    offset: u16,
    len: usize,
    /// Destination is the guest page (needs write access) rather than the source.
    to_guest: bool,
}

/// Hypervisor-private state of one domain.
struct Domain {
    table: Table,
    grant_frames: u32,
    active: Box<[AtomicU32]>,
}

impl Domain {
    fn lock_active(a: &AtomicU32) -> u32 {
        let mut spins = 0u32;
        loop {
            let v = a.load(Ordering::Relaxed);
            if v & ACTIVE_LOCK == 0
                && a.compare_exchange_weak(v, v | ACTIVE_LOCK, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return v;
            }
            spins += 1;
            if spins < 128 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Pins grant `r` for `caller`: `bits` is `GTF_READING` and/or `GTF_WRITING`; `write` asks
    /// for write access. On success returns the frame, read once after pinning and checked to
    /// be a guest data page.
    fn pin(&self, caller: DomId, r: u32, bits: u16, write: bool) -> Result<u32, Fail> {
        let active = &self.active[r as usize];
        let held = Self::lock_active(active);
        let result = self.pin_locked(caller, r, bits, write, held);
        let next = match result {
            Ok(_) => {
                let mut n = held;
                if bits & GTF_READING != 0 {
                    n += READER_ONE;
                }
                if bits & GTF_WRITING != 0 {
                    n += 1 << WRITER_SHIFT;
                }
                n
            }
            Err(_) => held,
        };
        active.store(next & !ACTIVE_LOCK, Ordering::Release);
        let frame = result?;
        if frame >= self.table.mem.pages() || frame < self.grant_frames {
            self.unpin(r, bits);
            return Err(Fail::BadPage);
        }
        Ok(frame)
    }

    fn pin_locked(
        &self,
        caller: DomId,
        r: u32,
        bits: u16,
        write: bool,
        held: u32,
    ) -> Result<u32, Fail> {
        if (bits & GTF_READING != 0 && readers(held) == READER_MAX)
            || (bits & GTF_WRITING != 0 && writers(held) == WRITER_MAX)
        {
            return Err(Fail::Overflow);
        }
        let sc = self.table.scombo(r);
        let mut raw = sc.load(Ordering::Acquire);
        let mut pinned = false;
        for _ in 0..PIN_RETRIES {
            let v = u32::from_le(raw);
            let flags = v as u16;
            let domid = (v >> 16) as u16;
            if flags & GTF_TYPE_MASK != GTF_PERMIT_ACCESS || domid != caller.0 {
                return Err(Fail::General);
            }
            if write && flags & GTF_READONLY != 0 {
                return Err(Fail::Readonly);
            }
            let want = (v | u32::from(bits)).to_le();
            if want == raw {
                // Already set by an earlier pin of ours; the entry was validated just now.
                pinned = true;
                break;
            }
            match sc.compare_exchange(raw, want, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    pinned = true;
                    break;
                }
                Err(now) => raw = now,
            }
        }
        if !pinned {
            // The guest kept changing the entry under us: give up, as Xen does.
            return Err(Fail::General);
        }
        // Pinned: the guest can no longer revoke, so this frame stays valid until unpin.
        Ok(u32::from_le(self.table.frame(r).load(Ordering::Acquire)))
    }

    fn unpin(&self, r: u32, bits: u16) {
        let active = &self.active[r as usize];
        let mut n = Self::lock_active(active);
        let mut clear = 0u16;
        if bits & GTF_READING != 0 {
            n -= READER_ONE;
            if readers(n) == 0 {
                clear |= GTF_READING;
            }
        }
        if bits & GTF_WRITING != 0 {
            n -= 1 << WRITER_SHIFT;
            if writers(n) == 0 {
                clear |= GTF_WRITING;
            }
        }
        if clear != 0 {
            // Release: our accesses to the frame happen before the guest sees the pin gone.
            self.table
                .scombo(r)
                .fetch_and((!u32::from(clear)).to_le(), Ordering::Release);
        }
        active.store(n & !ACTIVE_LOCK, Ordering::Release);
    }

    /// Validates one copy op and runs `f` on the pinned page at `offset`. The grant stays
    /// pinned in `held` for the next op of the batch: when that op names the same grant, it is
    /// not pinned again (Xen's `gnttab_copy` keeps its buffer claimed the same way).
    fn copy_one(
        &self,
        op: OpSpec,
        held: &mut Held,
        l: &mut GrantStatsSnapshot,
        f: impl FnOnce(*mut u8),
    ) -> GntStatus {
        let OpSpec {
            caller,
            gref,
            offset,
            len,
            to_guest,
        } = op;
        let offset = usize::from(offset);
        if offset + len > PAGE_SIZE {
            l.bad_copy_arg += 1;
            return GntStatus::BadCopyArg;
        }
        if gref.0 >= self.table.nr_entries {
            l.bad_gntref += 1;
            return GntStatus::BadGntref;
        }
        let bits = if to_guest { GTF_WRITING } else { GTF_READING };
        let frame = match held.pinned {
            Some((r, b, frame)) if r == gref.0 && b == bits => frame,
            _ => {
                self.release(held);
                match self.pin(caller, gref.0, bits, to_guest) {
                    Ok(frame) => {
                        held.pinned = Some((gref.0, bits, frame));
                        frame
                    }
                    Err(e) => return e.record(l),
                }
            }
        };
        let page = self
            .table
            .mem
            .page_ptr(Pfn(frame))
            .expect("frame checked by pin");
        // SAFETY: offset + len <= PAGE_SIZE was checked, so the pointer and the `len` bytes after
        // it lie within the page, which stays pinned while `held` holds it.
        f(unsafe { page.add(offset) });
        l.copy_bytes += len as u64;
        GntStatus::Okay
    }

    /// Unpins what a batch still holds.
    fn release(&self, held: &mut Held) {
        if let Some((r, bits, _)) = held.pinned.take() {
            self.unpin(r, bits);
        }
    }
}

/// The grant a copy batch holds pinned between ops: (reference, pin bits, frame).
#[derive(Default)]
struct Held {
    pinned: Option<(u32, u16, u32)>,
}

impl Domain {}

/// One `GNTTABOP_copy` op from a local buffer into a granted guest page.
#[derive(Debug)]
pub struct CopyToGuest<'a> {
    /// Bytes to copy (the op's length is `src.len()`).
    pub src: &'a [u8],
    /// The grant of the destination page.
    pub gref: GrantRef,
    /// Offset into the destination page.
    pub offset: u16,
    /// Result, set by the copy.
    pub status: GntStatus,
}

/// One `GNTTABOP_copy` op from a granted guest page into a local buffer.
#[derive(Debug)]
pub struct CopyFromGuest<'a> {
    /// Destination (the op's length is `dst.len()`).
    pub dst: &'a mut [u8],
    /// The grant of the source page.
    pub gref: GrantRef,
    /// Offset into the source page.
    pub offset: u16,
    /// Result, set by the copy.
    pub status: GntStatus,
}

/// One `GNTTABOP_copy` op whose source and destination are both grant references
/// (`GNTCOPY_source_gref | GNTCOPY_dest_gref` in `xen/include/public/grant_table.h`): the
/// caller copies from a page one domain granted it into a page another domain granted it,
/// without the bytes passing through a buffer of its own (HP Labs' "copy guest to guest once").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyGrantToGrant {
    /// The source grant (read access suffices) and the offset into its page.
    pub src_gref: GrantRef,
    pub src_offset: u16,
    /// The destination grant (must be writable) and the offset into its page.
    pub dst_gref: GrantRef,
    pub dst_offset: u16,
    /// Bytes to copy; `offset + len` must stay within each page.
    pub len: u16,
    /// Result on the source side, set by the copy.
    pub src_status: GntStatus,
    /// Result on the destination side; meaningful only when `src_status` is `Okay` (a failed
    /// source stops the op before the destination is looked at, as in Xen's `gnttab_copy_one`).
    pub dst_status: GntStatus,
}

impl CopyGrantToGrant {
    /// An op from `src_gref` at `src_offset` to `dst_gref` at `dst_offset`, statuses `Okay`.
    pub fn new(
        src_gref: GrantRef,
        src_offset: u16,
        dst_gref: GrantRef,
        dst_offset: u16,
        len: u16,
    ) -> CopyGrantToGrant {
        CopyGrantToGrant {
            src_gref,
            src_offset,
            dst_gref,
            dst_offset,
            len,
            src_status: GntStatus::Okay,
            dst_status: GntStatus::Okay,
        }
    }

    /// Both sides succeeded.
    pub fn ok(&self) -> bool {
        self.src_status == GntStatus::Okay && self.dst_status == GntStatus::Okay
    }
}

/// What a copy batch needs of an op, in either direction.
trait CopyOp {
    /// The guest page is the destination (needs write access).
    const TO_GUEST: bool;
    /// (grant, offset into its page, length).
    fn target(&self) -> (GrantRef, u16, usize);
    /// Copies between the op's local buffer and `page`, which `copy_one` checked to be valid for
    /// the op's length and keeps pinned while this runs.
    fn transfer(&mut self, page: *mut u8);
    fn set_status(&mut self, s: GntStatus);
}

impl CopyOp for CopyToGuest<'_> {
    const TO_GUEST: bool = true;
    fn target(&self) -> (GrantRef, u16, usize) {
        (self.gref, self.offset, self.src.len())
    }
    fn transfer(&mut self, dst: *mut u8) {
        // SAFETY: `dst` is valid for `src.len()` bytes of the pinned guest page (checked in
        // copy_one); `src` is a local slice, not guest memory.
        unsafe { std::ptr::copy_nonoverlapping(self.src.as_ptr(), dst, self.src.len()) }
    }
    fn set_status(&mut self, s: GntStatus) {
        self.status = s;
    }
}

impl CopyOp for CopyFromGuest<'_> {
    const TO_GUEST: bool = false;
    fn target(&self) -> (GrantRef, u16, usize) {
        (self.gref, self.offset, self.dst.len())
    }
    fn transfer(&mut self, src: *mut u8) {
        // SAFETY: `src` is valid for `dst.len()` bytes of the pinned guest page (checked in
        // copy_one); `dst` is a local slice, not guest memory.
        unsafe { std::ptr::copy_nonoverlapping(src, self.dst.as_mut_ptr(), self.dst.len()) }
    }
    fn set_status(&mut self, s: GntStatus) {
        self.status = s;
    }
}

/// The hypervisor's grant services for all domains.
pub struct Hypervisor {
    domains: RwLock<HashMap<DomId, Arc<Domain>>>,
    stats: Arc<Stats>,
    machine: OnceLock<Arc<Machine>>,
}

impl Default for Hypervisor {
    fn default() -> Self {
        Self::new()
    }
}

impl Hypervisor {
    /// No domains yet.
    pub fn new() -> Hypervisor {
        Hypervisor {
            domains: RwLock::new(HashMap::new()),
            stats: Arc::new(Stats::default()),
            machine: OnceLock::new(),
        }
    }

    /// Registers domain `id` with its memory, whose first `grant_frames` pages are its grant
    /// table. Replaces an existing domain of the same id (existing mappings stay valid).
    ///
    /// # Panics
    /// If `grant_frames` exceeds the memory's pages.
    pub fn add_domain(&self, id: DomId, mem: Arc<GuestMemory>, grant_frames: u32) {
        let table = Table::new(mem, grant_frames);
        let active = (0..table.nr_entries).map(|_| AtomicU32::new(0)).collect();
        let d = Arc::new(Domain {
            table,
            grant_frames,
            active,
        });
        self.domains_mut().insert(id, d);
    }

    /// Gives the hypervisor machine frames, for page flipping ([`crate::frames`]). Once.
    pub fn set_machine(&self, m: Arc<Machine>) -> bool {
        self.machine.set(m).is_ok()
    }

    /// The machine frames, if flipping is set up.
    pub fn machine(&self) -> Option<&Arc<Machine>> {
        self.machine.get()
    }

    /// `GNTTABOP_transfer`: `caller` gives the frame behind `give_pfn` of its window `give`
    /// to `target`, through `target`'s grant `gref`, and receives in exchange the frame of the
    /// pfn that grant names. Returns the frame now at `give_pfn` (also mapped there already).
    ///
    /// The grant must be `GTF_accept_transfer` for `caller`, neither committed nor completed,
    /// and its `frame` (a pfn, as Linux's `gnttab_grant_foreign_transfer_ref` writes it) must
    /// lie in `target`'s flip window. As in Xen the entry is first marked
    /// `GTF_transfer_committed`; then both P2Ms change, the driver domain's window and its view
    /// of `target`'s memory are remapped, the new frame is written into the entry and
    /// `GTF_transfer_completed` is set (release ordering: whoever sees the flag sees the frame).
    /// A refusal changes nothing (the entry is put back as it was) and is counted.
    pub fn transfer(
        &self,
        caller: DomId,
        give: &FrameWindow,
        give_pfn: Pfn,
        target: DomId,
        gref: GrantRef,
    ) -> Result<Mfn, GntStatus> {
        let mut l = GrantStatsSnapshot::default();
        let r = self.transfer_inner(caller, give, give_pfn, target, gref, &mut l);
        self.stats.flush(&l);
        if let Some(m) = self.machine() {
            let c = if r.is_ok() {
                &m.flips
            } else {
                &m.flips_refused
            };
            c.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    fn transfer_inner(
        &self,
        caller: DomId,
        give: &FrameWindow,
        give_pfn: Pfn,
        target: DomId,
        gref: GrantRef,
        l: &mut GrantStatsSnapshot,
    ) -> Result<Mfn, GntStatus> {
        let Some(machine) = self.machine() else {
            return Err(Fail::General.record(l));
        };
        let Some(dom) = self.domain(target) else {
            l.bad_domain += 1;
            return Err(GntStatus::BadDomain);
        };
        if gref.0 >= dom.table.nr_entries {
            l.bad_gntref += 1;
            return Err(GntStatus::BadGntref);
        }
        let r = gref.0;
        let want = u32::from(GTF_ACCEPT_TRANSFER) | u32::from(caller.0) << 16;
        let committed = want | u32::from(GTF_TRANSFER_COMMITTED);
        // The whole scombo must be exactly "accept transfer from caller": any other type or
        // domain, or a committed/completed bit, is refused.
        if dom
            .table
            .scombo(r)
            .compare_exchange(
                want.to_le(),
                committed.to_le(),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            return Err(Fail::General.record(l));
        }
        // The frame is read once, after the commit: the guest cannot change it under us now
        // (a guest that writes it anyway only changes which of its own pfns it loses).
        let pfn = Pfn(u32::from_le(dom.table.frame(r).load(Ordering::Acquire)));
        let undo = |l: &mut GrantStatsSnapshot, f: Fail| {
            dom.table.scombo(r).store(want.to_le(), Ordering::Release);
            f.record(l)
        };
        let Some(window) = dom.table.mem.frames() else {
            return Err(undo(l, Fail::BadPage));
        };
        let (at_caller, at_target) =
            match machine.with_table(|t| t.exchange(caller, give_pfn, target, pfn)) {
                Ok(x) => x,
                Err(_) => return Err(undo(l, Fail::BadPage)),
            };
        if give.remap(give_pfn, at_caller).is_err() || window.remap(pfn, at_target).is_err() {
            // Out of memory for a page table: swap back (views that did move are put back
            // too) and refuse.
            let _ = machine.with_table(|t| t.exchange(caller, give_pfn, target, pfn));
            let _ = give.remap(give_pfn, at_target);
            let _ = window.remap(pfn, at_caller);
            l.map_failed += 1;
            dom.table.scombo(r).store(want.to_le(), Ordering::Release);
            return Err(GntStatus::NoDeviceSpace);
        }
        dom.table
            .frame(r)
            .store(at_target.0.to_le(), Ordering::Relaxed);
        let done = committed | u32::from(GTF_TRANSFER_COMPLETED);
        dom.table.scombo(r).store(done.to_le(), Ordering::Release);
        Ok(at_caller)
    }

    /// Forgets domain `id`. Live mappings of its grants keep its memory alive until dropped.
    pub fn remove_domain(&self, id: DomId) {
        self.domains_mut().remove(&id);
    }

    /// The memory of domain `id`.
    pub fn domain_memory(&self, id: DomId) -> Option<Arc<GuestMemory>> {
        self.domain(id).map(|d| d.table.mem.clone())
    }

    /// Number of grant entries of domain `id`.
    pub fn nr_grant_entries(&self, id: DomId) -> Option<u32> {
        self.domain(id).map(|d| d.table.nr_entries)
    }

    fn domain(&self, id: DomId) -> Option<Arc<Domain>> {
        // A poisoned lock only means a panic elsewhere; the map itself is always consistent.
        let map = self.domains.read().unwrap_or_else(|p| p.into_inner());
        map.get(&id).cloned()
    }

    fn domains_mut(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<DomId, Arc<Domain>>> {
        self.domains.write().unwrap_or_else(|p| p.into_inner())
    }

    /// `GNTTABOP_copy` into `target`'s granted pages, for grants `target` gave to `caller`.
    /// Every op gets its own status; a failed op does not stop the batch.
    pub fn copy_to_guest(&self, caller: DomId, target: DomId, ops: &mut [CopyToGuest<'_>]) {
        self.copy_batch(caller, target, ops);
    }

    /// `GNTTABOP_copy` out of `target`'s granted pages, for grants `target` gave to `caller`.
    /// Every op gets its own status; a failed op does not stop the batch (its `dst` is untouched).
    pub fn copy_from_guest(&self, caller: DomId, target: DomId, ops: &mut [CopyFromGuest<'_>]) {
        self.copy_batch(caller, target, ops);
    }

    /// One `GNTTABOP_copy` batch in either direction: validates and pins op by op (a grant
    /// stays pinned across consecutive ops on it), counts, releases every pin at the end.
    fn copy_batch<O: CopyOp>(&self, caller: DomId, target: DomId, ops: &mut [O]) {
        let mut l = GrantStatsSnapshot {
            copy_batches: 1,
            copy_ops: ops.len() as u64,
            ..Default::default()
        };
        let dom = self.domain(target);
        let mut held = Held::default();
        for op in ops.iter_mut() {
            let status = match &dom {
                None => {
                    l.bad_domain += 1;
                    GntStatus::BadDomain
                }
                Some(d) => {
                    let (gref, offset, len) = op.target();
                    let spec = OpSpec {
                        caller,
                        gref,
                        offset,
                        len,
                        to_guest: O::TO_GUEST,
                    };
                    d.copy_one(spec, &mut held, &mut l, |page| op.transfer(page))
                }
            };
            op.set_status(status);
        }
        if let Some(d) = &dom {
            d.release(&mut held);
        }
        self.stats.flush(&l);
    }

    /// `GNTTABOP_copy` between two guests' granted pages, for grants `src` and `dst` both gave
    /// to `caller`: each op validates and pins the source grant for reading and the destination
    /// grant for writing (each checked as a one-sided copy checks it), copies, and reports
    /// each side's status. Every op gets its own statuses; a failed op does not stop the batch.
    /// The bytes copied are counted once (`copy_bytes`), as is the op (`copy_ops`).
    pub fn copy_grant_to_grant(
        &self,
        caller: DomId,
        src: DomId,
        dst: DomId,
        ops: &mut [CopyGrantToGrant],
    ) {
        let mut l = GrantStatsSnapshot {
            copy_batches: 1,
            copy_ops: ops.len() as u64,
            ..Default::default()
        };
        // The destination side's counters: its failures, never its bytes.
        let mut ld = GrantStatsSnapshot::default();
        let (sd, dd) = (self.domain(src), self.domain(dst));
        let (mut hs, mut hd) = (Held::default(), Held::default());
        for op in ops.iter_mut() {
            op.src_status = GntStatus::Okay;
            op.dst_status = GntStatus::Okay;
            let Some(s) = &sd else {
                l.bad_domain += 1;
                op.src_status = GntStatus::BadDomain;
                continue;
            };
            let Some(d) = &dd else {
                l.bad_domain += 1;
                op.dst_status = GntStatus::BadDomain;
                continue;
            };
            let len = usize::from(op.len);
            let sspec = OpSpec {
                caller,
                gref: op.src_gref,
                offset: op.src_offset,
                len,
                to_guest: false,
            };
            let dspec = OpSpec {
                caller,
                gref: op.dst_gref,
                offset: op.dst_offset,
                len,
                to_guest: true,
            };
            let mut dst_status = GntStatus::Okay;
            op.src_status = s.copy_one(sspec, &mut hs, &mut l, |from| {
                dst_status = d.copy_one(dspec, &mut hd, &mut ld, |to| {
                    // SAFETY: copy_one checked each side's offset + len against its page and
                    // holds both pages pinned while this runs. Both may be the same page of the
                    // same guest (a guest sending to itself), so the ranges may overlap:
                    // `copy` (memmove) is used, not `copy_nonoverlapping`.
                    unsafe { std::ptr::copy(from, to, len) }
                });
            });
            op.dst_status = dst_status;
            if op.src_status == GntStatus::Okay && dst_status != GntStatus::Okay {
                // The source side counted bytes that never arrived.
                l.copy_bytes -= len as u64;
            }
        }
        if let Some(s) = &sd {
            s.release(&mut hs);
        }
        if let Some(d) = &dd {
            d.release(&mut hd);
        }
        ld.copy_bytes = 0;
        self.stats.flush(&l);
        self.stats.flush(&ld);
    }

    /// Maps grant `gref` of `target` into this process (read-only or read-write). The entry
    /// stays pinned (`GTF_reading`, plus `GTF_writing` if read-write) until the mapping drops.
    pub fn map_grant(
        &self,
        caller: DomId,
        target: DomId,
        gref: GrantRef,
        readonly: bool,
    ) -> Result<GrantMapping, GntStatus> {
        let mut l = GrantStatsSnapshot::default();
        let r = self.map_inner(caller, target, gref, readonly, &mut l);
        self.stats.flush(&l);
        r
    }

    fn map_inner(
        &self,
        caller: DomId,
        target: DomId,
        gref: GrantRef,
        readonly: bool,
        l: &mut GrantStatsSnapshot,
    ) -> Result<GrantMapping, GntStatus> {
        let (dom, mapping, frame, bits) = self.map_pinned(caller, target, gref, readonly, l)?;
        Ok(GrantMapping {
            mapping: Some(mapping),
            dom,
            caller,
            gref,
            frame,
            bits,
            stats: self.stats.clone(),
        })
    }

    /// Validates and pins the grant and maps its frame; the pin is held on success.
    fn map_pinned(
        &self,
        caller: DomId,
        target: DomId,
        gref: GrantRef,
        readonly: bool,
        l: &mut GrantStatsSnapshot,
    ) -> Result<(Arc<Domain>, PageMapping, Pfn, u16), GntStatus> {
        let Some(dom) = self.domain(target) else {
            l.bad_domain += 1;
            return Err(GntStatus::BadDomain);
        };
        if gref.0 >= dom.table.nr_entries {
            l.bad_gntref += 1;
            return Err(GntStatus::BadGntref);
        }
        let bits = if readonly {
            GTF_READING
        } else {
            GTF_READING | GTF_WRITING
        };
        let frame = dom
            .pin(caller, gref.0, bits, !readonly)
            .map_err(|e| e.record(l))?;
        match dom.table.mem.map_page(Pfn(frame), !readonly) {
            Ok(mapping) => {
                l.maps += 1;
                Ok((dom, mapping, Pfn(frame), bits))
            }
            Err(_) => {
                dom.unpin(gref.0, bits);
                l.map_failed += 1;
                Err(GntStatus::NoDeviceSpace)
            }
        }
    }

    /// Maps grant `gref` of `target` into this process for reuse across many accesses (a
    /// persistent grant mapping): the entry is validated and pinned while the page is mapped,
    /// then unpinned again. Each later use goes through [`PersistentMapping::access`], which
    /// pins and revalidates the entry; between accesses the guest may end access at any time.
    pub fn map_grant_persistent(
        &self,
        caller: DomId,
        target: DomId,
        gref: GrantRef,
        readonly: bool,
    ) -> Result<PersistentMapping, GntStatus> {
        let mut l = GrantStatsSnapshot::default();
        let r = self.map_pinned(caller, target, gref, readonly, &mut l).map(
            |(dom, mapping, frame, bits)| {
                // Keep the page mapped; give the pin back.
                dom.unpin(gref.0, bits);
                PersistentMapping {
                    mapping,
                    dom,
                    caller,
                    gref,
                    frame,
                    writable: !readonly,
                    stats: self.stats.clone(),
                }
            },
        );
        self.stats.flush(&l);
        r
    }

    /// Current counters.
    pub fn stats(&self) -> GrantStatsSnapshot {
        self.stats.snapshot()
    }
}

/// A granted page mapped into this process; the grant stays pinned until this drops.
pub struct GrantMapping {
    mapping: Option<PageMapping>,
    dom: Arc<Domain>,
    caller: DomId,
    gref: GrantRef,
    frame: Pfn,
    bits: u16,
    stats: Arc<Stats>,
}

impl std::fmt::Debug for GrantMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrantMapping")
            .field("gref", &self.gref)
            .field("frame", &self.frame)
            .field("writable", &self.writable())
            .finish()
    }
}

impl GrantMapping {
    fn page(&self) -> &PageMapping {
        self.mapping.as_ref().expect("present until drop")
    }

    /// The first byte of the mapped page (page aligned, 4096 bytes; writable only if
    /// [`GrantMapping::writable`]).
    pub fn ptr(&self) -> *mut u8 {
        self.page().ptr()
    }

    /// Whether the page is mapped read-write.
    pub fn writable(&self) -> bool {
        self.page().writable()
    }

    /// The grant this mapping came from.
    pub fn gref(&self) -> GrantRef {
        self.gref
    }

    /// The guest frame mapped (as read once at map time).
    pub fn frame(&self) -> Pfn {
        self.frame
    }

    /// Whether the shared entry, read now, still grants the mapped frame to the mapper (with
    /// write permission if mapped read-write). The mapping stays valid either way — the pin
    /// lives in the hypervisor's active entry, as in Xen — so this only tells whether the guest
    /// has since rewritten an entry it could not revoke (a protocol violation a backend may
    /// look for at leisure, e.g. netback's premapped pool audit).
    pub fn still_granted(&self) -> bool {
        let e = self.dom.table.entry(self.gref.0);
        e.flags & GTF_TYPE_MASK == GTF_PERMIT_ACCESS
            && e.domid == self.caller.0
            && e.frame == self.frame.0
            && !(self.writable() && e.flags & GTF_READONLY != 0)
    }
}

impl Drop for GrantMapping {
    fn drop(&mut self) {
        // Unmap first: the guest may reuse the page as soon as the pin is gone.
        drop(self.mapping.take());
        self.dom.unpin(self.gref.0, self.bits);
        self.stats.unmaps.fetch_add(1, Ordering::Relaxed);
    }
}

/// Why an access through a [`PersistentMapping`] was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessError {
    /// The grant is valid but now names another frame than the one mapped: the mapping is
    /// stale (drop it and map the grant again).
    Moved,
    /// The grant refuses the access (revoked, granted to someone else, read-only, ...).
    Refused(GntStatus),
}

/// A granted page kept mapped in this process across uses ([`Hypervisor::map_grant_persistent`]).
/// It holds no pin: the guest may end access at any time; every use takes a pin through
/// [`PersistentMapping::access`], which fails once access has ended. Unmapped on drop.
pub struct PersistentMapping {
    mapping: PageMapping,
    dom: Arc<Domain>,
    caller: DomId,
    gref: GrantRef,
    frame: Pfn,
    writable: bool,
    stats: Arc<Stats>,
}

impl std::fmt::Debug for PersistentMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersistentMapping")
            .field("gref", &self.gref)
            .field("frame", &self.frame)
            .field("writable", &self.writable)
            .finish()
    }
}

impl PersistentMapping {
    /// The grant this mapping came from.
    pub fn gref(&self) -> GrantRef {
        self.gref
    }

    /// The guest frame mapped (as read at map time).
    pub fn frame(&self) -> Pfn {
        self.frame
    }

    /// Whether the page is mapped read-write.
    pub fn writable(&self) -> bool {
        self.writable
    }

    /// Pins the grant for one access (`write`: to write the page) and checks that it still
    /// grants the mapped frame to the caller, with write permission if `write`. The pin lasts
    /// as long as the returned [`GrantAccess`]; while it is held the guest cannot end access.
    pub fn access(&self, write: bool) -> Result<GrantAccess<'_>, AccessError> {
        let mut l = GrantStatsSnapshot {
            persistent_accesses: 1,
            ..Default::default()
        };
        let r = self.access_inner(write, &mut l);
        self.stats.flush(&l);
        r
    }

    fn access_inner(
        &self,
        write: bool,
        l: &mut GrantStatsSnapshot,
    ) -> Result<GrantAccess<'_>, AccessError> {
        if write && !self.writable {
            l.readonly_violation += 1;
            return Err(AccessError::Refused(GntStatus::GeneralError));
        }
        let bits = if write { GTF_WRITING } else { GTF_READING };
        let frame = self
            .dom
            .pin(self.caller, self.gref.0, bits, write)
            .map_err(|e| AccessError::Refused(e.record(l)))?;
        if frame != self.frame.0 {
            self.dom.unpin(self.gref.0, bits);
            l.persistent_moved += 1;
            return Err(AccessError::Moved);
        }
        Ok(GrantAccess { m: self, bits })
    }

    /// Whether the grant, read now without pinning, still gives the caller the mapped frame
    /// (a snapshot: only [`PersistentMapping::access`] makes a use safe).
    pub fn still_granted(&self) -> bool {
        let e = self.dom.table.entry(self.gref.0);
        e.flags & GTF_TYPE_MASK == GTF_PERMIT_ACCESS
            && e.domid == self.caller.0
            && e.frame == self.frame.0
            && !(self.writable && e.flags & GTF_READONLY != 0)
    }
}

impl Drop for PersistentMapping {
    fn drop(&mut self) {
        // The page mapping unmaps itself (no pin is held between accesses).
        self.stats.unmaps.fetch_add(1, Ordering::Relaxed);
    }
}

/// One pinned access through a [`PersistentMapping`]: the grant cannot be revoked while this
/// lives. Unpins on drop.
pub struct GrantAccess<'a> {
    m: &'a PersistentMapping,
    bits: u16,
}

impl GrantAccess<'_> {
    /// The first byte of the mapped page (4096 bytes; writable if the access was for writing).
    pub fn ptr(&self) -> *mut u8 {
        self.m.mapping.ptr()
    }
}

impl Drop for GrantAccess<'_> {
    fn drop(&mut self) {
        // Release: our accesses happen before the guest can see the pin gone (see `unpin`).
        self.m.dom.unpin(self.m.gref.0, self.bits);
    }
}

/// Ring memory must be writable: `page_ptr` on a read-only grant mapping panics.
// SAFETY: delegates to `PageMapping`, which upholds the contract (and asserts writability); the
// mapping lives exactly as long as `self`.
unsafe impl pvnet_netif::RingMemory for GrantMapping {
    fn page_ptr(&self) -> *mut u8 {
        pvnet_netif::RingMemory::page_ptr(self.page())
    }
}

/// Creates a guest's memory and grant table in one step (tests and in-process harnesses).
pub fn new_guest(
    name: &str,
    pages: u32,
    grant_frames: u32,
) -> io::Result<(Arc<GuestMemory>, GuestGrantTable)> {
    if grant_frames >= pages {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "grant table leaves no data pages",
        ));
    }
    let mem = Arc::new(GuestMemory::create(name, pages)?);
    let gt = GuestGrantTable::new(mem.clone(), grant_frames);
    Ok((mem, gt))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GUEST: DomId = DomId(5);
    const OTHER: DomId = DomId(7);
    const PAGES: u32 = 16;

    struct Fixture {
        hv: Hypervisor,
        mem: Arc<GuestMemory>,
        gt: GuestGrantTable,
    }

    fn fixture() -> Fixture {
        let (mem, gt) = new_guest("g", PAGES, GRANT_FRAMES).unwrap();
        let hv = Hypervisor::new();
        hv.add_domain(GUEST, mem.clone(), GRANT_FRAMES);
        Fixture { hv, mem, gt }
    }

    fn grant(f: &mut Fixture, pfn: u32, readonly: bool) -> GrantRef {
        let r = f.gt.alloc().unwrap();
        f.gt.grant_access(r, DomId::DRIVER, Pfn(pfn), readonly);
        r
    }

    fn to_guest(
        hv: &Hypervisor,
        target: DomId,
        gref: GrantRef,
        offset: u16,
        src: &[u8],
    ) -> GntStatus {
        let mut ops = [CopyToGuest {
            src,
            gref,
            offset,
            status: GntStatus::Eagain,
        }];
        hv.copy_to_guest(DomId::DRIVER, target, &mut ops);
        ops[0].status
    }

    fn delta(before: GrantStatsSnapshot, after: GrantStatsSnapshot) -> GrantStatsSnapshot {
        macro_rules! sub {
            ($($f:ident),*) => { GrantStatsSnapshot { $( $f: after.$f - before.$f ),* } };
        }
        stats_fields!(sub)
    }

    /// Two guests (GUEST and OTHER) with their tables, registered with one hypervisor.
    fn two_guests() -> (Fixture, Arc<GuestMemory>, GuestGrantTable) {
        let f = fixture();
        let (mem2, gt2) = new_guest("g2", PAGES, GRANT_FRAMES).unwrap();
        f.hv.add_domain(OTHER, mem2.clone(), GRANT_FRAMES);
        (f, mem2, gt2)
    }

    #[test]
    fn grant_to_grant_copies_between_guests_once() {
        let (mut f, mem2, mut gt2) = two_guests();
        let src = grant(&mut f, 9, true);
        let dst = gt2.alloc().unwrap();
        gt2.grant_access(dst, DomId::DRIVER, Pfn(10), false);
        let bytes: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        f.mem.write(Pfn(9), 100, &bytes).unwrap();
        let before = f.hv.stats();
        let mut ops = [
            CopyGrantToGrant::new(src, 100, dst, 3000, 1000),
            // Second op on the same pair of grants: no new pin.
            CopyGrantToGrant::new(src, 0, dst, 0, 10),
        ];
        f.hv.copy_grant_to_grant(DomId::DRIVER, GUEST, OTHER, &mut ops);
        assert!(ops.iter().all(CopyGrantToGrant::ok));
        let mut got = vec![0u8; 1000];
        mem2.read(Pfn(10), 3000, &mut got).unwrap();
        assert_eq!(got, bytes);
        let d = delta(before, f.hv.stats());
        assert_eq!((d.copy_batches, d.copy_ops, d.copy_bytes), (1, 2, 1010));
        // Every pin was dropped: both guests can revoke.
        assert!(f.gt.end_access(src));
        assert!(gt2.end_access(dst));
    }

    #[test]
    fn grant_to_grant_validates_both_sides() {
        let (mut f, mem2, mut gt2) = two_guests();
        let src = grant(&mut f, 9, true);
        let ro = gt2.alloc().unwrap();
        gt2.grant_access(ro, DomId::DRIVER, Pfn(10), true);
        let rw = gt2.alloc().unwrap();
        gt2.grant_access(rw, DomId::DRIVER, Pfn(11), false);
        f.mem.write(Pfn(9), 0, &[0xAB; 64]).unwrap();
        let before = f.hv.stats();
        let mut ops = [
            // Destination granted read-only: refused on the destination side.
            CopyGrantToGrant::new(src, 0, ro, 0, 64),
            // Source reference outside the table: refused on the source side.
            CopyGrantToGrant::new(GrantRef(1 << 20), 0, rw, 0, 64),
            // Destination range past the page end.
            CopyGrantToGrant::new(src, 0, rw, 4090, 64),
            // The source guest never granted this reference.
            CopyGrantToGrant::new(GrantRef(100), 0, rw, 0, 64),
        ];
        f.hv.copy_grant_to_grant(DomId::DRIVER, GUEST, OTHER, &mut ops);
        assert_eq!(
            (ops[0].src_status, ops[0].dst_status),
            (GntStatus::Okay, GntStatus::GeneralError)
        );
        assert_eq!(ops[1].src_status, GntStatus::BadGntref);
        assert_eq!(
            (ops[2].src_status, ops[2].dst_status),
            (GntStatus::Okay, GntStatus::BadCopyArg)
        );
        assert_eq!(ops[3].src_status, GntStatus::GeneralError);
        let d = delta(before, f.hv.stats());
        assert_eq!(d.copy_bytes, 0);
        assert_eq!(
            (
                d.readonly_violation,
                d.bad_gntref,
                d.bad_copy_arg,
                d.general_error
            ),
            (1, 1, 1, 1)
        );
        for p in [10, 11] {
            let mut got = [0u8; 64];
            mem2.read(Pfn(p), 0, &mut got).unwrap();
            assert_eq!(got, [0u8; 64], "page {p} untouched");
        }
        // An unknown destination domain.
        let mut ops = [CopyGrantToGrant::new(src, 0, rw, 0, 1)];
        f.hv.copy_grant_to_grant(DomId::DRIVER, GUEST, DomId(99), &mut ops);
        assert_eq!(ops[0].dst_status, GntStatus::BadDomain);
        assert!(f.gt.end_access(src));
    }

    #[test]
    fn entry_layout_is_v1() {
        let mut f = fixture();
        let r = grant(&mut f, 9, true);
        assert_eq!(r, GrantRef(GNTTAB_NR_RESERVED_ENTRIES));
        let mut raw = [0u8; 8];
        f.mem.read(Pfn(0), r.0 as usize * 8, &mut raw).unwrap();
        assert_eq!(raw, [1 | 4, 0, 0, 0, 9, 0, 0, 0]);
        f.gt.raw_write_entry(GrantRef(3), 0x1234, 0xabcd, 0x0102_0304);
        f.mem.read(Pfn(0), 24, &mut raw).unwrap();
        assert_eq!(raw, [0x34, 0x12, 0xcd, 0xab, 4, 3, 2, 1]);
    }

    #[test]
    fn alloc_skips_reserved_and_reuses_freed() {
        let (_mem, mut gt) = new_guest("g", 4, 1).unwrap();
        assert_eq!(gt.nr_entries(), 512);
        let a = gt.alloc().unwrap();
        assert_eq!(a, GrantRef(8));
        let mut n = 1;
        while gt.alloc().is_some() {
            n += 1;
        }
        assert_eq!(n, 512 - 8);
        gt.free(GrantRef(3)); // reserved: ignored
        gt.free(GrantRef(9999)); // out of range: ignored
        assert_eq!(gt.free_count(), 0);
        gt.free(a);
        gt.free(a); // double free: ignored
        assert_eq!(gt.free_count(), 1);
        assert_eq!(gt.alloc(), Some(a));
    }

    #[test]
    fn new_zeroes_entries() {
        let mem = Arc::new(GuestMemory::create("g", 4).unwrap());
        mem.write(Pfn(0), 80, &[0xff; 8]).unwrap();
        let gt = GuestGrantTable::new(mem.clone(), 1);
        assert_eq!(
            gt.entry(GrantRef(10)),
            GrantEntry {
                flags: 0,
                domid: 0,
                frame: 0
            }
        );
    }

    #[test]
    fn copy_to_guest_success() {
        let mut f = fixture();
        let r = grant(&mut f, 10, false);
        let before = f.hv.stats();
        assert_eq!(to_guest(&f.hv, GUEST, r, 100, b"payload"), GntStatus::Okay);
        let mut out = [0u8; 7];
        f.mem.read(Pfn(10), 100, &mut out).unwrap();
        assert_eq!(&out, b"payload");
        let d = delta(before, f.hv.stats());
        assert_eq!(
            d,
            GrantStatsSnapshot {
                copy_batches: 1,
                copy_ops: 1,
                copy_bytes: 7,
                ..Default::default()
            }
        );
        // The pin is gone again.
        assert_eq!(f.gt.entry(r).flags, GTF_PERMIT_ACCESS);
        assert!(f.gt.end_access(r));
    }

    #[test]
    fn a_batch_pins_a_grant_once_per_run_of_ops_and_releases_every_pin() {
        let mut f = fixture();
        let a = grant(&mut f, 10, false);
        let b = grant(&mut f, 11, false);
        let ro = grant(&mut f, 12, true);
        let mut ops: Vec<CopyToGuest<'_>> = [
            (a, 0, &b"aa"[..]),
            (a, 2, b"AA"),
            (b, 0, b"bb"),
            (ro, 0, b"xx"),
            (a, 4, b"a!"),
        ]
        .into_iter()
        .map(|(gref, offset, src)| CopyToGuest {
            src,
            gref,
            offset,
            status: GntStatus::Eagain,
        })
        .collect();
        f.hv.copy_to_guest(DomId::DRIVER, GUEST, &mut ops);
        let st: Vec<GntStatus> = ops.iter().map(|o| o.status).collect();
        use GntStatus::*;
        assert_eq!(st, [Okay, Okay, Okay, GeneralError, Okay]);
        let mut out = [0u8; 6];
        f.mem.read(Pfn(10), 0, &mut out).unwrap();
        assert_eq!(&out, b"aaAAa!");
        // Every pin of the batch is released: the guest can revoke all three grants.
        for r in [a, b] {
            assert_eq!(f.gt.entry(r).flags, GTF_PERMIT_ACCESS);
            assert!(f.gt.end_access(r));
        }
        assert_eq!(f.gt.entry(ro).flags, GTF_PERMIT_ACCESS | GTF_READONLY);
        assert!(f.gt.end_access(ro));
    }

    #[test]
    fn copy_from_guest_success_including_readonly_grant() {
        let mut f = fixture();
        f.mem.write(Pfn(11), 4090, b"ABCDEF").unwrap();
        let r = grant(&mut f, 11, true);
        let mut buf = [0u8; 6];
        let mut ops = [CopyFromGuest {
            dst: &mut buf,
            gref: r,
            offset: 4090,
            status: GntStatus::Eagain,
        }];
        f.hv.copy_from_guest(DomId::DRIVER, GUEST, &mut ops);
        assert_eq!(ops[0].status, GntStatus::Okay);
        assert_eq!(&buf, b"ABCDEF");
        let s = f.hv.stats();
        assert_eq!((s.copy_batches, s.copy_ops, s.copy_bytes), (1, 1, 6));
        assert_eq!(f.gt.entry(r).flags, GTF_PERMIT_ACCESS | GTF_READONLY);
    }

    #[test]
    fn copy_to_unknown_domain_is_bad_domain() {
        let mut f = fixture();
        let r = grant(&mut f, 10, false);
        let mut ops = [
            CopyToGuest {
                src: b"a",
                gref: r,
                offset: 0,
                status: GntStatus::Okay,
            },
            CopyToGuest {
                src: b"b",
                gref: r,
                offset: 1,
                status: GntStatus::Okay,
            },
        ];
        f.hv.copy_to_guest(DomId::DRIVER, OTHER, &mut ops);
        assert!(ops.iter().all(|o| o.status == GntStatus::BadDomain));
        let s = f.hv.stats();
        assert_eq!((s.bad_domain, s.copy_ops, s.copy_bytes), (2, 2, 0));
    }

    #[test]
    fn copy_crossing_page_is_bad_copy_arg() {
        let mut f = fixture();
        let r = grant(&mut f, 10, false);
        assert_eq!(
            to_guest(&f.hv, GUEST, r, 4095, b"ab"),
            GntStatus::BadCopyArg
        );
        assert_eq!(
            to_guest(&f.hv, GUEST, r, 0, &[0u8; 4097]),
            GntStatus::BadCopyArg
        );
        assert_eq!(f.hv.stats().bad_copy_arg, 2);
        // Exactly to the end is fine.
        assert_eq!(to_guest(&f.hv, GUEST, r, 4094, b"ab"), GntStatus::Okay);
    }

    #[test]
    fn copy_gref_out_of_range_is_bad_gntref() {
        let f = fixture();
        let n = f.gt.nr_entries();
        assert_eq!(
            to_guest(&f.hv, GUEST, GrantRef(n), 0, b"x"),
            GntStatus::BadGntref
        );
        assert_eq!(
            to_guest(&f.hv, GUEST, GrantRef(u32::MAX), 0, b"x"),
            GntStatus::BadGntref
        );
        assert_eq!(f.hv.stats().bad_gntref, 2);
    }

    #[test]
    fn copy_grant_to_other_domain_is_general_error() {
        let mut f = fixture();
        let r = f.gt.alloc().unwrap();
        f.gt.grant_access(r, OTHER, Pfn(10), false);
        assert_eq!(to_guest(&f.hv, GUEST, r, 0, b"x"), GntStatus::GeneralError);
        let s = f.hv.stats();
        assert_eq!((s.general_error, s.readonly_violation), (1, 0));
        let mut z = [9u8; 1];
        f.mem.read(Pfn(10), 0, &mut z).unwrap();
        assert_eq!(z, [0]);
    }

    #[test]
    fn copy_entry_not_permit_access_is_general_error() {
        let f = fixture();
        f.gt.raw_write_entry(GrantRef(20), GTF_INVALID, 0, 10);
        f.gt.raw_write_entry(GrantRef(21), GTF_ACCEPT_TRANSFER, 0, 10);
        f.gt.raw_write_entry(GrantRef(22), GTF_TYPE_MASK, 0, 10);
        for r in 20..23 {
            assert_eq!(
                to_guest(&f.hv, GUEST, GrantRef(r), 0, b"x"),
                GntStatus::GeneralError
            );
        }
        assert_eq!(f.hv.stats().general_error, 3);
    }

    #[test]
    fn copy_into_readonly_grant_is_readonly_violation() {
        let mut f = fixture();
        let r = grant(&mut f, 10, true);
        assert_eq!(to_guest(&f.hv, GUEST, r, 0, b"x"), GntStatus::GeneralError);
        let s = f.hv.stats();
        assert_eq!((s.readonly_violation, s.general_error), (1, 0));
        assert_eq!(f.gt.entry(r).flags, GTF_PERMIT_ACCESS | GTF_READONLY);
    }

    #[test]
    fn copy_frame_out_of_memory_is_bad_page() {
        let f = fixture();
        f.gt.raw_write_entry(GrantRef(20), GTF_PERMIT_ACCESS, 0, PAGES);
        f.gt.raw_write_entry(GrantRef(21), GTF_PERMIT_ACCESS, 0, u32::MAX);
        assert_eq!(
            to_guest(&f.hv, GUEST, GrantRef(20), 0, b"x"),
            GntStatus::BadPage
        );
        assert_eq!(
            to_guest(&f.hv, GUEST, GrantRef(21), 0, b"x"),
            GntStatus::BadPage
        );
        assert_eq!(f.hv.stats().bad_page, 2);
        // The failed pin was released.
        assert_eq!(f.gt.entry(GrantRef(20)).flags, GTF_PERMIT_ACCESS);
    }

    #[test]
    fn copy_frame_in_grant_table_is_bad_page() {
        let f = fixture();
        f.gt.raw_write_entry(GrantRef(20), GTF_PERMIT_ACCESS, 0, 0);
        f.gt.raw_write_entry(GrantRef(21), GTF_PERMIT_ACCESS, 0, GRANT_FRAMES - 1);
        assert_eq!(
            to_guest(&f.hv, GUEST, GrantRef(20), 0, b"x"),
            GntStatus::BadPage
        );
        assert_eq!(
            to_guest(&f.hv, GUEST, GrantRef(21), 0, b"x"),
            GntStatus::BadPage
        );
        assert_eq!(f.hv.stats().bad_page, 2);
        // The table itself is untouched.
        assert_eq!(f.gt.entry(GrantRef(20)).flags, GTF_PERMIT_ACCESS);
    }

    #[test]
    fn failed_ops_do_not_abort_batch_and_counters_are_exact() {
        let mut f = fixture();
        let good1 = grant(&mut f, 10, false);
        let ro = grant(&mut f, 11, true);
        let good2 = grant(&mut f, 12, false);
        f.gt.raw_write_entry(GrantRef(30), GTF_PERMIT_ACCESS, 0, 1);
        let n = f.gt.nr_entries();
        let mk = |gref, offset: u16, src: &'static [u8]| CopyToGuest {
            src,
            gref,
            offset,
            status: GntStatus::Eagain,
        };
        let mut ops = [
            mk(good1, 0, b"one"),
            mk(GrantRef(n), 0, b"x"),
            mk(ro, 0, b"x"),
            mk(good1, 4000, &[7u8; 200]),
            mk(GrantRef(30), 0, b"x"),
            mk(GrantRef(2), 0, b"x"),
            mk(good2, 10, b"two!"),
        ];
        let before = f.hv.stats();
        f.hv.copy_to_guest(DomId::DRIVER, GUEST, &mut ops);
        let st: Vec<GntStatus> = ops.iter().map(|o| o.status).collect();
        assert_eq!(
            st,
            [
                GntStatus::Okay,
                GntStatus::BadGntref,
                GntStatus::GeneralError,
                GntStatus::BadCopyArg,
                GntStatus::BadPage,
                GntStatus::GeneralError,
                GntStatus::Okay
            ]
        );
        assert_eq!(
            delta(before, f.hv.stats()),
            GrantStatsSnapshot {
                copy_batches: 1,
                copy_ops: 7,
                copy_bytes: 7,
                bad_gntref: 1,
                readonly_violation: 1,
                bad_copy_arg: 1,
                bad_page: 1,
                general_error: 1,
                ..Default::default()
            }
        );
        let mut out = [0u8; 4];
        f.mem.read(Pfn(12), 10, &mut out).unwrap();
        assert_eq!(&out, b"two!");
        f.mem.read(Pfn(10), 0, &mut out[..3]).unwrap();
        assert_eq!(&out[..3], b"one");
    }

    #[test]
    fn end_access_refused_while_mapped() {
        let mut f = fixture();
        let r = grant(&mut f, 10, false);
        let m = f.hv.map_grant(DomId::DRIVER, GUEST, r, false).unwrap();
        assert!(m.writable());
        assert_eq!(
            f.gt.entry(r).flags,
            GTF_PERMIT_ACCESS | GTF_READING | GTF_WRITING
        );
        assert!(!f.gt.end_access(r));
        // Writes through the mapping land in guest memory.
        // SAFETY: the mapping is one writable page.
        unsafe { std::ptr::copy_nonoverlapping(b"map".as_ptr(), m.ptr().add(1), 3) };
        let mut out = [0u8; 3];
        f.mem.read(Pfn(10), 1, &mut out).unwrap();
        assert_eq!(&out, b"map");
        drop(m);
        assert_eq!(f.gt.entry(r).flags, GTF_PERMIT_ACCESS);
        assert!(f.gt.end_access(r));
        assert_eq!(f.gt.entry(r).flags, GTF_INVALID);
        let s = f.hv.stats();
        assert_eq!((s.maps, s.unmaps), (1, 1));
        // Revoked: further use fails.
        assert_eq!(to_guest(&f.hv, GUEST, r, 0, b"x"), GntStatus::GeneralError);
    }

    #[test]
    fn nested_pins_keep_flags_until_last_unpin() {
        let mut f = fixture();
        let r = grant(&mut f, 10, false);
        let a = f.hv.map_grant(DomId::DRIVER, GUEST, r, true).unwrap();
        let b = f.hv.map_grant(DomId::DRIVER, GUEST, r, false).unwrap();
        // A copy on the same grant must not clear the map's pins.
        assert_eq!(to_guest(&f.hv, GUEST, r, 0, b"x"), GntStatus::Okay);
        assert_eq!(
            f.gt.entry(r).flags,
            GTF_PERMIT_ACCESS | GTF_READING | GTF_WRITING
        );
        drop(b);
        assert_eq!(f.gt.entry(r).flags, GTF_PERMIT_ACCESS | GTF_READING);
        assert!(!f.gt.end_access(r));
        drop(a);
        assert!(f.gt.end_access(r));
    }

    #[test]
    fn map_readonly_grant_is_readonly_mapping() {
        let mut f = fixture();
        f.mem.write(Pfn(10), 0, b"ro").unwrap();
        let r = grant(&mut f, 10, true);
        assert_eq!(
            f.hv.map_grant(DomId::DRIVER, GUEST, r, false).unwrap_err(),
            GntStatus::GeneralError
        );
        assert_eq!(f.hv.stats().readonly_violation, 1);
        let m = f.hv.map_grant(DomId::DRIVER, GUEST, r, true).unwrap();
        assert!(!m.writable());
        assert_eq!(m.frame(), Pfn(10));
        let mut out = [0u8; 2];
        // SAFETY: the mapping is one readable page.
        unsafe { std::ptr::copy_nonoverlapping(m.ptr(), out.as_mut_ptr(), 2) };
        assert_eq!(&out, b"ro");
        // The kernel mapping itself is read-only (not under Miri: no /proc there, and its
        // stand-in for a mapping is a view of heap pages).
        if !cfg!(miri) {
            let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
            let addr = format!("{:x}-", m.ptr() as usize);
            let line = maps.lines().find(|l| l.starts_with(&addr)).unwrap();
            assert!(line.contains(" r--s "), "{line}");
        }
    }

    #[test]
    fn map_failures_have_statuses() {
        let mut f = fixture();
        let r = grant(&mut f, 10, false);
        assert_eq!(
            f.hv.map_grant(DomId::DRIVER, OTHER, r, true).unwrap_err(),
            GntStatus::BadDomain
        );
        assert_eq!(
            f.hv.map_grant(DomId::DRIVER, GUEST, GrantRef(1 << 20), true)
                .unwrap_err(),
            GntStatus::BadGntref
        );
        assert_eq!(
            f.hv.map_grant(OTHER, GUEST, r, true).unwrap_err(),
            GntStatus::GeneralError
        );
        f.gt.raw_write_entry(GrantRef(30), GTF_PERMIT_ACCESS, 0, 2);
        assert_eq!(
            f.hv.map_grant(DomId::DRIVER, GUEST, GrantRef(30), true)
                .unwrap_err(),
            GntStatus::BadPage
        );
        let s = f.hv.stats();
        assert_eq!(
            (
                s.bad_domain,
                s.bad_gntref,
                s.general_error,
                s.bad_page,
                s.maps
            ),
            (1, 1, 1, 1, 0)
        );
        assert_eq!(f.gt.entry(r).flags, GTF_PERMIT_ACCESS);
    }

    #[test]
    fn mapping_outlives_removed_domain() {
        let mut f = fixture();
        let r = grant(&mut f, 10, false);
        let m = f.hv.map_grant(DomId::DRIVER, GUEST, r, false).unwrap();
        f.hv.remove_domain(GUEST);
        assert!(f.hv.domain_memory(GUEST).is_none());
        assert_eq!(to_guest(&f.hv, GUEST, r, 0, b"x"), GntStatus::BadDomain);
        drop(m);
        assert!(f.gt.end_access(r));
    }

    #[test]
    fn grant_mapping_is_ring_memory() {
        use pvnet_netif::RingMemory;
        let mut f = fixture();
        let r = grant(&mut f, 10, false);
        let m = f.hv.map_grant(DomId::DRIVER, GUEST, r, false).unwrap();
        assert_eq!(m.page_ptr(), m.ptr());
    }

    #[test]
    fn persistent_mapping_pins_only_per_access_and_revocation_stops_it() {
        let mut f = fixture();
        let r = grant(&mut f, 10, false);
        let before = f.hv.stats();
        let pm =
            f.hv.map_grant_persistent(DomId::DRIVER, GUEST, r, false)
                .unwrap();
        // Mapped, but not pinned: the entry's flags are the guest's own again.
        assert_eq!(f.gt.entry(r).flags, GTF_PERMIT_ACCESS);
        assert!(pm.still_granted());
        {
            let a = pm.access(true).unwrap();
            assert_eq!(f.gt.entry(r).flags, GTF_PERMIT_ACCESS | GTF_WRITING);
            // The guest cannot end access during the access.
            assert!(!f.gt.end_access(r));
            // SAFETY: one writable page, pinned by `a`.
            unsafe { std::ptr::copy_nonoverlapping(b"pm".as_ptr(), a.ptr().add(7), 2) };
        }
        let mut out = [0u8; 2];
        f.mem.read(Pfn(10), 7, &mut out).unwrap();
        assert_eq!(&out, b"pm");
        // Between accesses it can, and every later access is refused.
        assert!(f.gt.end_access(r));
        assert!(!pm.still_granted());
        assert_eq!(
            pm.access(true).err(),
            Some(AccessError::Refused(GntStatus::GeneralError))
        );
        assert_eq!(
            pm.access(false).err(),
            Some(AccessError::Refused(GntStatus::GeneralError))
        );
        assert_eq!(f.gt.entry(r).flags, GTF_INVALID);
        drop(pm);
        let s = f.hv.stats();
        assert_eq!(
            (
                s.maps - before.maps,
                s.unmaps - before.unmaps,
                s.persistent_accesses,
                s.general_error
            ),
            (1, 1, 3, 2)
        );
    }

    #[test]
    fn persistent_mapping_sees_a_regrant_to_another_frame() {
        let mut f = fixture();
        let r = grant(&mut f, 10, false);
        let pm =
            f.hv.map_grant_persistent(DomId::DRIVER, GUEST, r, false)
                .unwrap();
        assert!(f.gt.end_access(r));
        f.gt.grant_access(r, DomId::DRIVER, Pfn(11), false);
        assert!(!pm.still_granted());
        assert_eq!(pm.access(true).err(), Some(AccessError::Moved));
        // The refused access left no pin behind.
        assert_eq!(f.gt.entry(r).flags, GTF_PERMIT_ACCESS);
        assert_eq!(f.hv.stats().persistent_moved, 1);
        // Granted again to the mapped frame, read-only: reads work, writes do not.
        assert!(f.gt.end_access(r));
        f.gt.grant_access(r, DomId::DRIVER, Pfn(10), true);
        assert!(pm.access(false).is_ok());
        assert_eq!(
            pm.access(true).err(),
            Some(AccessError::Refused(GntStatus::GeneralError))
        );
        assert_eq!(f.hv.stats().readonly_violation, 1);
        let ro =
            f.hv.map_grant_persistent(DomId::DRIVER, GUEST, r, true)
                .unwrap();
        assert!(!ro.writable());
        assert_eq!(
            ro.access(true).err(),
            Some(AccessError::Refused(GntStatus::GeneralError))
        );
    }

    /// A writer uses a persistent mapping as fast as it can while the guest ends access at
    /// an arbitrary moment: once `end_access` has succeeded, the writer's attempts are refused
    /// and the page never changes again.
    #[test]
    fn no_write_through_a_persistent_mapping_after_end_access() {
        use std::sync::atomic::AtomicBool;
        // Under Miri (interpreted, every access checked for races), fewer rounds and retries.
        let (rounds, retries) = if cfg!(miri) { (3, 20) } else { (40u64, 1000) };
        for round in 0..rounds {
            let mut f = fixture();
            let r = grant(&mut f, 10, false);
            let pm =
                f.hv.map_grant_persistent(DomId::DRIVER, GUEST, r, false)
                    .unwrap();
            let stop = AtomicBool::new(false);
            let wrote = AtomicU64::new(0);
            let refused = AtomicU64::new(0);
            std::thread::scope(|s| {
                s.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        match pm.access(true) {
                            Ok(a) => {
                                let n = wrote.fetch_add(1, Ordering::Relaxed) + 1;
                                // SAFETY: a writable page mapping, pinned by `a`; 8 bytes at 0.
                                unsafe { std::ptr::write_volatile(a.ptr().cast::<u64>(), n) };
                            }
                            Err(_) => {
                                refused.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                });
                while wrote.load(Ordering::Relaxed) == 0 {
                    std::hint::spin_loop();
                }
                for _ in 0..round * 50 {
                    std::hint::spin_loop();
                }
                // Refused while pinned: the guest defers and retries.
                while !f.gt.end_access(r) {
                    std::hint::spin_loop();
                }
                let mut seen = [0u8; 8];
                f.mem.read(Pfn(10), 0, &mut seen).unwrap();
                // Let the writer try again a good number of times.
                let base = refused.load(Ordering::Relaxed);
                while refused.load(Ordering::Relaxed) < base + retries {
                    let mut now = [0u8; 8];
                    f.mem.read(Pfn(10), 0, &mut now).unwrap();
                    assert_eq!(now, seen, "round {round}: written after end_access");
                }
                stop.store(true, Ordering::Relaxed);
            });
            let mut now = [0u8; 8];
            f.mem.read(Pfn(10), 0, &mut now).unwrap();
            assert_eq!(u64::from_ne_bytes(now), wrote.load(Ordering::Relaxed));
        }
    }

    #[test]
    fn concurrent_copies_keep_pins_consistent() {
        let mut f = fixture();
        let r = grant(&mut f, 10, false);
        let hv = Arc::new(f.hv);
        // Under Miri (interpreted, every access checked for races), fewer copies.
        const COPIES: u64 = if cfg!(miri) { 25 } else { 2000 };
        let threads: Vec<_> = (0..4)
            .map(|i| {
                let hv = hv.clone();
                std::thread::spawn(move || {
                    for _ in 0..COPIES {
                        assert_eq!(
                            to_guest(&hv, GUEST, r, i * 8, &[i as u8; 8]),
                            GntStatus::Okay
                        );
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(f.gt.entry(r).flags, GTF_PERMIT_ACCESS);
        assert_eq!(hv.stats().copy_bytes, 4 * COPIES * 8);
    }
}
