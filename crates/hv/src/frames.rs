//! Machine frames owned by domains, a P2M per domain, and page flipping
//! (`GNTTABOP_transfer`, Xen `xen/include/public/grant_table.h`).
//!
//! # The model
//!
//! Xen gives every domain *machine frames* (pages of host memory, numbered by an [`Mfn`]) and
//! keeps, per domain, the map from the domain's pseudo-physical frames to them (the P2M). A
//! page flip changes who owns a machine frame: netback hands the guest the frame that holds a
//! packet and takes one of the guest's frames in exchange, and both sides change their P2M and
//! their page tables.
//!
//! pvnet models that with one [`Machine`]: a sealed memfd of `frames` pages (the machine
//! frames) and a [`FrameTable`] (owner of every frame; per domain, the P2M of its *flip window*,
//! a run of pseudo-physical frames `[first_pfn, first_pfn + n)` backed by machine frames). A
//! process reaches a window through a [`FrameWindow`]: one `MAP_SHARED` mapping of the
//! machine memfd per page, at the address of that pfn. A flip remaps the page in place with
//! `mmap(MAP_FIXED)` (the kernel replaces the old mapping and shoots down the stale TLB entries
//! in every thread of the process, as Xen's `update_va_mapping` with a TLB flush does): the
//! driver domain remaps its own window and its view of the guest's memory at once
//! ([`crate::grant::Hypervisor::transfer`]); the guest remaps its own view when it sees
//! `GTF_transfer_completed`, as Linux netfront did after `gnttab_end_foreign_transfer_ref`.
//!
//! Only the flip window is machine-frame memory. The rest of a guest's memory (grant table,
//! rings, TX pages) stays in its own sealed memfd ([`crate::mem::GuestMemory`]), and a guest of
//! a run without `flip` has no window at all: the other mechanisms are untouched.
//!
//! # Conservation
//!
//! Frames are conserved: a flip is an *exchange* ([`FrameTable::exchange`]) — the driver
//! domain gives one frame and receives one under the same lock — so after any number of flips
//! every domain owns exactly as many frames as it was given ([`FrameTable::check`] verifies it
//! along with "every frame has at most one owner" and "every P2M entry names a frame its domain
//! owns"). A domain that dies returns its frames to the free pool ([`FrameTable::remove_domain`]),
//! as Xen relinquishes a dead domain's memory. Xen's own netfront gave its page back first
//! (`XENMEM_decrease_reservation`) and netback refilled its pool later
//! (`XENMEM_increase_reservation`); the exchange has the same net effect without a window in
//! which one side is short of a frame, and a guest cannot starve the driver domain of frames
//! by keeping what it received: it only ever receives a frame for one it gave.
//!
//! # Isolation: what a guest can reach (the design choice, and its limit)
//!
//! Every flip-capable process holds the machine memfd, because a process can only map a frame
//! it has a descriptor for, and passing one descriptor per frame per flip (`SCM_RIGHTS` on the
//! control socket) would cost a `sendmsg`/`recvmsg` pair per packet, more than the copy the flip
//! is meant to save. The consequences, stated plainly:
//!
//! - A flip guest can map **any machine frame**, not only those its P2M names: the machine
//!   memfd holds the flip windows of every flip guest and the driver domain's packet frames. So
//!   a hostile flip guest can read or write packets in flight to other flip guests. It cannot
//!   reach any guest's private memory (grant table, rings, TX pages stay in per-guest memfds),
//!   the driver domain's other memory, or guests of runs without `flip`.
//! - A frame a guest gave away may stay mapped in the guest (a user-space hypervisor cannot
//!   revoke another process's mapping; Xen could because it validates every page-table update).
//!   netfront does not touch a pfn between offering it and remapping it, but its mapping of the
//!   old frame stays in place meanwhile, and a hostile guest could keep writing through it into
//!   a frame the driver domain now owns (and later fills with another guest's packet).
//!
//! The stronger design — one memfd per frame, a driver domain that replaces every frame it
//! receives with a fresh one so that a stale mapping never sees later data — gives real
//! isolation at the price of a descriptor pass per flip; with per-guest receive queues in the
//! port (what VMDq-capable NICs and Xen's later netchannel2 used), one machine memfd per guest
//! would give it too. Both are left for later: `flip` is a mechanism to measure with, not to
//! isolate mutually hostile guests (docs/page-flip.md says so too).

use std::collections::BTreeMap;
use std::io;
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use nix::sys::memfd::{memfd_create, MFdFlags};
use nix::sys::mman::{mmap, mmap_anonymous, munmap, MapFlags, ProtFlags};
use serde::Serialize;

use crate::{DomId, Pfn, PAGE_SIZE};

/// A machine frame number: a page index into the [`Machine`]'s memfd.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Mfn(pub u32);

/// Why a frame operation was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Not enough free frames for a new domain's window.
    #[error("out of machine frames")]
    NoFrames,
    /// The domain has no flip window.
    #[error("domain {0} has no frames")]
    UnknownDomain(DomId),
    /// The domain already has a flip window.
    #[error("domain {0} already has frames")]
    DomainExists(DomId),
    /// The pfn is outside the domain's flip window.
    #[error("pfn {pfn} is not in domain {dom}'s flip window")]
    NotInWindow {
        /// The domain.
        dom: DomId,
        /// The pfn.
        pfn: u32,
    },
    /// An exchange of a domain with itself.
    #[error("a domain cannot flip a page to itself")]
    SameDomain,
}

/// Per-domain state: the P2M of its flip window and the count it started with.
#[derive(Debug, Clone)]
struct DomFrames {
    first_pfn: u32,
    p2m: Vec<Mfn>,
}

/// The accounting of machine frames: who owns each frame, and each domain's P2M. Pure data,
/// no memory is touched: [`Machine`] wraps it with the memfd and the mappings.
#[derive(Debug, Clone)]
pub struct FrameTable {
    owner: Vec<Option<DomId>>,
    free: Vec<Mfn>,
    doms: BTreeMap<DomId, DomFrames>,
}

impl FrameTable {
    /// `frames` free machine frames.
    pub fn new(frames: u32) -> FrameTable {
        FrameTable {
            owner: vec![None; frames as usize],
            // Popped from the end: lowest frame first.
            free: (0..frames).rev().map(Mfn).collect(),
            doms: BTreeMap::new(),
        }
    }

    /// Number of machine frames.
    pub fn frames(&self) -> u32 {
        self.owner.len() as u32
    }

    /// Frames owned by nobody.
    pub fn free_frames(&self) -> u32 {
        self.free.len() as u32
    }

    /// Gives domain `dom` a flip window of `n` frames at pfns `[first_pfn, first_pfn + n)`;
    /// returns its P2M (the frame of each pfn, in order).
    pub fn add_domain(
        &mut self,
        dom: DomId,
        first_pfn: u32,
        n: u32,
    ) -> Result<Vec<Mfn>, FrameError> {
        if self.doms.contains_key(&dom) {
            return Err(FrameError::DomainExists(dom));
        }
        if (self.free.len() as u64) < u64::from(n) || first_pfn.checked_add(n).is_none() {
            return Err(FrameError::NoFrames);
        }
        let p2m: Vec<Mfn> = (0..n)
            .map(|_| self.free.pop().expect("counted above"))
            .collect();
        for m in &p2m {
            self.owner[m.0 as usize] = Some(dom);
        }
        self.doms.insert(
            dom,
            DomFrames {
                first_pfn,
                p2m: p2m.clone(),
            },
        );
        Ok(p2m)
    }

    /// Domain `dom` is gone: its frames return to the free pool. Returns how many.
    pub fn remove_domain(&mut self, dom: DomId) -> u32 {
        let Some(d) = self.doms.remove(&dom) else {
            return 0;
        };
        for m in &d.p2m {
            debug_assert_eq!(self.owner[m.0 as usize], Some(dom));
            self.owner[m.0 as usize] = None;
            self.free.push(*m);
        }
        d.p2m.len() as u32
    }

    fn slot(&self, dom: DomId, pfn: Pfn) -> Result<usize, FrameError> {
        let d = self.doms.get(&dom).ok_or(FrameError::UnknownDomain(dom))?;
        pfn.0
            .checked_sub(d.first_pfn)
            .map(|i| i as usize)
            .filter(|&i| i < d.p2m.len())
            .ok_or(FrameError::NotInWindow { dom, pfn: pfn.0 })
    }

    /// The frame behind `dom`'s `pfn`, if the pfn is in its window.
    pub fn mfn(&self, dom: DomId, pfn: Pfn) -> Result<Mfn, FrameError> {
        let i = self.slot(dom, pfn)?;
        Ok(self.doms[&dom].p2m[i])
    }

    /// The owner of frame `m`.
    pub fn owner(&self, m: Mfn) -> Option<DomId> {
        self.owner.get(m.0 as usize).copied().flatten()
    }

    /// Frames domain `dom` owns (0 if it has no window).
    pub fn owned(&self, dom: DomId) -> u32 {
        self.doms.get(&dom).map_or(0, |d| d.p2m.len() as u32)
    }

    /// Domains with a window, in id order.
    pub fn domains(&self) -> Vec<DomId> {
        self.doms.keys().copied().collect()
    }

    /// A page flip: `a`'s frame at `a_pfn` goes to `b` at `b_pfn`, and `b`'s frame there goes
    /// to `a` at `a_pfn`. Returns `(frame now at a_pfn, frame now at b_pfn)`. Nothing changes
    /// on error.
    pub fn exchange(
        &mut self,
        a: DomId,
        a_pfn: Pfn,
        b: DomId,
        b_pfn: Pfn,
    ) -> Result<(Mfn, Mfn), FrameError> {
        if a == b {
            return Err(FrameError::SameDomain);
        }
        let ia = self.slot(a, a_pfn)?;
        let ib = self.slot(b, b_pfn)?;
        let ma = self.doms[&a].p2m[ia];
        let mb = self.doms[&b].p2m[ib];
        self.doms.get_mut(&a).expect("slot checked").p2m[ia] = mb;
        self.doms.get_mut(&b).expect("slot checked").p2m[ib] = ma;
        self.owner[ma.0 as usize] = Some(b);
        self.owner[mb.0 as usize] = Some(a);
        Ok((mb, ma))
    }

    /// Checks the invariants: every frame is free or owned by exactly one domain, and by the
    /// domain whose P2M names it; no P2M names a frame twice; owned + free = all frames.
    pub fn check(&self) -> Result<(), String> {
        let mut seen = vec![false; self.owner.len()];
        for (dom, d) in &self.doms {
            for (i, m) in d.p2m.iter().enumerate() {
                let k = m.0 as usize;
                if k >= seen.len() {
                    return Err(format!("dom {dom} pfn {i}: frame {} out of range", m.0));
                }
                if std::mem::replace(&mut seen[k], true) {
                    return Err(format!("frame {} is in two P2Ms", m.0));
                }
                if self.owner[k] != Some(*dom) {
                    return Err(format!(
                        "frame {} is in dom {dom}'s P2M but owned by {:?}",
                        m.0, self.owner[k]
                    ));
                }
            }
        }
        for m in &self.free {
            let k = m.0 as usize;
            if std::mem::replace(&mut seen[k], true) || self.owner[k].is_some() {
                return Err(format!("free frame {} is also owned", m.0));
            }
        }
        if let Some(k) = seen.iter().position(|s| !s) {
            return Err(format!("frame {k} is lost (neither free nor owned)"));
        }
        Ok(())
    }
}

/// Frames owned by one domain, for `pvnet stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DomainFrames {
    /// The domain.
    pub domid: u16,
    /// Frames it owns now.
    pub frames: u32,
}

/// A snapshot of the machine's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FrameStats {
    /// Machine frames in all.
    pub frames: u32,
    /// Frames owned by nobody.
    pub free: u32,
    /// Frames per domain.
    pub domains: Vec<DomainFrames>,
    /// Completed page flips (`GNTTABOP_transfer` successes).
    pub flips: u64,
    /// Transfers refused (bad or foreign gref, page not in the guest's window, ...).
    pub flips_refused: u64,
    /// Page remaps done in this process (both sides of every flip, plus guests' own remaps
    /// when they share the process, as in tests).
    pub remaps: u64,
}

/// The machine: its memfd of frames and the frame table.
pub struct Machine {
    fd: OwnedFd,
    table: Mutex<FrameTable>,
    pub(crate) flips: AtomicU64,
    pub(crate) flips_refused: AtomicU64,
}

impl std::fmt::Debug for Machine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Machine").field("fd", &self.fd).finish()
    }
}

static REMAPS: AtomicU64 = AtomicU64::new(0);

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}

impl Machine {
    /// `frames` zeroed machine frames in a fresh memfd, sealed against resizing (a process
    /// that could shrink it would turn everyone's mappings into `SIGBUS`).
    pub fn create(name: &str, frames: u32) -> io::Result<Arc<Machine>> {
        if frames == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "zero frames"));
        }
        let fd = memfd_create(name, MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING)?;
        let size = libc::off_t::try_from(u64::from(frames) * PAGE_SIZE as u64)
            .map_err(|_| invalid("machine too large"))?;
        nix::unistd::ftruncate(&fd, size)?;
        let seals = SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL;
        fcntl(&fd, FcntlArg::F_ADD_SEALS(seals))?;
        Ok(Arc::new(Machine {
            fd,
            table: Mutex::new(FrameTable::new(frames)),
            flips: AtomicU64::new(0),
            flips_refused: AtomicU64::new(0),
        }))
    }

    /// The memfd, to pass to a flip-capable guest (see the module docs for what it can reach).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Runs `f` on the frame table under its lock.
    pub fn with_table<R>(&self, f: impl FnOnce(&mut FrameTable) -> R) -> R {
        // A poisoned lock means a panic elsewhere; every table operation is all-or-nothing.
        let mut t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut t)
    }

    /// See [`FrameTable::add_domain`].
    pub fn add_domain(&self, dom: DomId, first_pfn: u32, n: u32) -> Result<Vec<Mfn>, FrameError> {
        self.with_table(|t| t.add_domain(dom, first_pfn, n))
    }

    /// See [`FrameTable::remove_domain`].
    pub fn remove_domain(&self, dom: DomId) -> u32 {
        self.with_table(|t| t.remove_domain(dom))
    }

    /// Frames domain `dom` owns.
    pub fn owned(&self, dom: DomId) -> u32 {
        self.with_table(|t| t.owned(dom))
    }

    /// The counters and frames per domain.
    pub fn stats(&self) -> FrameStats {
        self.with_table(|t| FrameStats {
            frames: t.frames(),
            free: t.free_frames(),
            domains: t
                .domains()
                .into_iter()
                .map(|d| DomainFrames {
                    domid: d.0,
                    frames: t.owned(d),
                })
                .collect(),
            flips: self.flips.load(Ordering::Relaxed),
            flips_refused: self.flips_refused.load(Ordering::Relaxed),
            remaps: REMAPS.load(Ordering::Relaxed),
        })
    }
}

/// Maps page `mfn` of the machine memfd at `at` (`MAP_FIXED`, replacing what was there).
///
/// # Safety
/// `at` must be a page-aligned page of a mapping owned by the caller, and no Rust reference
/// into that page may be live (only raw-pointer accesses, which may observe either frame).
unsafe fn map_frame_at(at: NonNull<u8>, fd: BorrowedFd<'_>, mfn: Mfn) -> io::Result<()> {
    let offset = libc::off_t::try_from(u64::from(mfn.0) * PAGE_SIZE as u64)
        .map_err(|_| invalid("frame offset too large"))?;
    let len = NonZeroUsize::new(PAGE_SIZE).expect("non-zero");
    // SAFETY: the caller guarantees `at` is one page of its own mapping with no references
    // into it, so replacing that page with another shared page breaks no Rust aliasing rule.
    unsafe {
        mmap(
            Some(NonZeroUsize::new(at.as_ptr() as usize).expect("non-null")),
            len,
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_SHARED | MapFlags::MAP_FIXED,
            fd,
            offset,
        )
    }?;
    REMAPS.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// A process's view of one domain's flip window: each pfn of the window is a page mapped from
/// the machine memfd at the frame the P2M names. [`FrameWindow::remap`] moves a pfn to another
/// frame in place.
pub struct FrameWindow {
    fd: OwnedFd,
    frames: u32,
    base: NonNull<u8>,
    first_pfn: u32,
    p2m: Box<[AtomicU32]>,
    /// Whether `base` is a region this window reserved (and unmaps on drop), or pages inside
    /// someone else's mapping (a guest's memory).
    owns_region: bool,
}

// SAFETY: the pages are only accessed through raw pointers and the P2M through atomics.
unsafe impl Send for FrameWindow {}
// SAFETY: as for `Send`.
unsafe impl Sync for FrameWindow {}

impl std::fmt::Debug for FrameWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameWindow")
            .field("first_pfn", &self.first_pfn)
            .field("pages", &self.p2m.len())
            .finish()
    }
}

/// Checks a machine memfd received from elsewhere: sealed against shrinking, whole pages.
/// Returns its size in frames.
pub fn check_machine_fd(fd: BorrowedFd<'_>) -> io::Result<u32> {
    let st = nix::sys::stat::fstat(fd)?;
    let size = u64::try_from(st.st_size).map_err(|_| invalid("negative size"))?;
    let seals = SealFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GET_SEALS)?);
    if !seals.contains(SealFlag::F_SEAL_SHRINK) {
        return Err(invalid("machine memory is not sealed against shrinking"));
    }
    if size == 0 || size % PAGE_SIZE as u64 != 0 {
        return Err(invalid("machine memory is not a whole number of pages"));
    }
    u32::try_from(size / PAGE_SIZE as u64).map_err(|_| invalid("too many frames"))
}

impl FrameWindow {
    /// A window in a region of its own (the driver domain's packet frames): pfn
    /// `first_pfn + i` is at `ptr(first_pfn + i)` and backed by `p2m[i]`.
    pub fn new(machine_fd: BorrowedFd<'_>, first_pfn: u32, p2m: &[Mfn]) -> io::Result<FrameWindow> {
        let len = NonZeroUsize::new(p2m.len() * PAGE_SIZE)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty window"))?;
        // SAFETY: a fresh anonymous reservation chosen by the kernel; nothing is replaced.
        let base =
            unsafe { mmap_anonymous(None, len, ProtFlags::PROT_NONE, MapFlags::MAP_PRIVATE) }?
                .cast::<u8>();
        // SAFETY: `base` is the region just reserved, owned by the window.
        unsafe { Self::build(machine_fd, base, first_pfn, p2m, true) }
    }

    /// A window laid over pages `[first_pfn, first_pfn + p2m.len())` of an existing mapping
    /// whose page 0 is at `mem_base` (a guest's memory).
    ///
    /// # Safety
    /// The range must lie inside a mapping that outlives the window, and nothing may hold a
    /// Rust reference into it.
    pub(crate) unsafe fn overlay(
        machine_fd: BorrowedFd<'_>,
        mem_base: NonNull<u8>,
        first_pfn: u32,
        p2m: &[Mfn],
    ) -> io::Result<FrameWindow> {
        // SAFETY: the caller guarantees the window's pages lie inside `mem_base`'s mapping.
        let base = unsafe { mem_base.add(first_pfn as usize * PAGE_SIZE) };
        // SAFETY: as above; the region belongs to the memory, not to the window.
        unsafe { Self::build(machine_fd, base, first_pfn, p2m, false) }
    }

    /// # Safety
    /// `base` starts `p2m.len()` pages the caller owns with no references into them.
    unsafe fn build(
        machine_fd: BorrowedFd<'_>,
        base: NonNull<u8>,
        first_pfn: u32,
        p2m: &[Mfn],
        owns_region: bool,
    ) -> io::Result<FrameWindow> {
        let frames = check_machine_fd(machine_fd)?;
        let w = FrameWindow {
            fd: machine_fd.try_clone_to_owned()?,
            frames,
            base,
            first_pfn,
            p2m: p2m.iter().map(|m| AtomicU32::new(m.0)).collect(),
            owns_region,
        };
        for (i, m) in p2m.iter().enumerate() {
            w.remap(Pfn(first_pfn + i as u32), *m)?;
        }
        Ok(w)
    }

    /// First pfn of the window.
    pub fn first_pfn(&self) -> u32 {
        self.first_pfn
    }

    /// Pages in the window.
    pub fn pages(&self) -> u32 {
        self.p2m.len() as u32
    }

    fn index(&self, pfn: Pfn) -> Option<usize> {
        pfn.0
            .checked_sub(self.first_pfn)
            .map(|i| i as usize)
            .filter(|&i| i < self.p2m.len())
    }

    /// Whether `pfn` is in the window.
    pub fn contains(&self, pfn: Pfn) -> bool {
        self.index(pfn).is_some()
    }

    /// The frame this process maps at `pfn` now.
    pub fn mfn(&self, pfn: Pfn) -> Option<Mfn> {
        self.index(pfn)
            .map(|i| Mfn(self.p2m[i].load(Ordering::Acquire)))
    }

    /// The page at `pfn` (valid for 4096 bytes while the window lives).
    pub fn ptr(&self, pfn: Pfn) -> Option<*mut u8> {
        // SAFETY: i < pages, so the offset stays inside the window's pages.
        self.index(pfn)
            .map(|i| unsafe { self.base.as_ptr().add(i * PAGE_SIZE) })
    }

    /// Maps frame `mfn` at `pfn` in this process, replacing the page there. The frame number
    /// is checked against the machine's size (a guest checks what the driver domain wrote).
    pub fn remap(&self, pfn: Pfn, mfn: Mfn) -> io::Result<()> {
        let i = self
            .index(pfn)
            .ok_or_else(|| invalid("pfn outside the flip window"))?;
        if mfn.0 >= self.frames {
            return Err(invalid("machine frame out of range"));
        }
        // SAFETY: i < pages: one page of this window's region.
        let at = unsafe { self.base.add(i * PAGE_SIZE) };
        // SAFETY: the page belongs to the window's region (its own or the guest memory it
        // overlays, which outlives it); the memory is only accessed through raw pointers.
        unsafe { map_frame_at(at, self.fd.as_fd(), mfn) }?;
        self.p2m[i].store(mfn.0, Ordering::Release);
        Ok(())
    }

    /// The machine memfd (to map a frame of the window a second time, as a grant map does).
    pub fn machine_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Drop for FrameWindow {
    fn drop(&mut self) {
        if self.owns_region {
            // SAFETY: exactly the region reserved in `new`, owned by `self`.
            let _ = unsafe { munmap(self.base.cast(), self.p2m.len() * PAGE_SIZE) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(w: &FrameWindow, pfn: u32, n: usize) -> Vec<u8> {
        let mut out = vec![0u8; n];
        let p = w.ptr(Pfn(pfn)).unwrap();
        // SAFETY: one page of the window; n <= 4096.
        unsafe { std::ptr::copy_nonoverlapping(p, out.as_mut_ptr(), n) };
        out
    }

    fn write(w: &FrameWindow, pfn: u32, data: &[u8]) {
        let p = w.ptr(Pfn(pfn)).unwrap();
        // SAFETY: one page of the window; data is private memory.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
    }

    #[test]
    fn exchange_swaps_owners_and_conserves_counts() {
        let mut t = FrameTable::new(8);
        let d0 = t.add_domain(DomId(0), 0, 3).unwrap();
        let g1 = t.add_domain(DomId(1), 100, 2).unwrap();
        assert_eq!(t.free_frames(), 3);
        let (at_dd, at_guest) = t.exchange(DomId(0), Pfn(1), DomId(1), Pfn(101)).unwrap();
        assert_eq!(at_dd, g1[1]);
        assert_eq!(at_guest, d0[1]);
        assert_eq!(t.owner(d0[1]), Some(DomId(1)));
        assert_eq!(t.owner(g1[1]), Some(DomId(0)));
        assert_eq!((t.owned(DomId(0)), t.owned(DomId(1))), (3, 2));
        t.check().unwrap();
        assert_eq!(
            t.exchange(DomId(0), Pfn(3), DomId(1), Pfn(100)),
            Err(FrameError::NotInWindow {
                dom: DomId(0),
                pfn: 3
            })
        );
        assert_eq!(
            t.exchange(DomId(0), Pfn(0), DomId(1), Pfn(99)),
            Err(FrameError::NotInWindow {
                dom: DomId(1),
                pfn: 99
            })
        );
        assert_eq!(
            t.exchange(DomId(0), Pfn(0), DomId(0), Pfn(1)),
            Err(FrameError::SameDomain)
        );
        assert_eq!(t.remove_domain(DomId(1)), 2);
        assert_eq!(t.free_frames(), 5);
        assert_eq!(t.owner(d0[1]), None);
        t.check().unwrap();
        assert_eq!(t.add_domain(DomId(2), 0, 6), Err(FrameError::NoFrames));
    }

    #[test]
    #[cfg_attr(miri, ignore = "machine frames are a memfd: not in Miri")]
    fn a_remap_moves_the_bytes_with_the_frame() {
        let m = Machine::create("machine", 4).unwrap();
        let dd = m.add_domain(DomId(0), 0, 2).unwrap();
        let g = m.add_domain(DomId(1), 10, 2).unwrap();
        let wd = FrameWindow::new(m.fd(), 0, &dd).unwrap();
        let wg = FrameWindow::new(m.fd(), 10, &g).unwrap();
        write(&wd, 1, b"packet in a driver frame");
        write(&wg, 11, b"guest's old page");
        let (at_dd, at_g) = m
            .with_table(|t| t.exchange(DomId(0), Pfn(1), DomId(1), Pfn(11)))
            .unwrap();
        wd.remap(Pfn(1), at_dd).unwrap();
        wg.remap(Pfn(11), at_g).unwrap();
        assert_eq!(read(&wg, 11, 24), b"packet in a driver frame");
        assert_eq!(read(&wd, 1, 16), b"guest's old page");
        // The two processes' views no longer share the page they exchanged.
        write(&wd, 1, b"XXXX");
        assert_eq!(read(&wg, 11, 4), b"pack");
        assert_eq!(wg.mfn(Pfn(11)), Some(dd[1]));
        assert!(wg.remap(Pfn(11), Mfn(4)).is_err());
        assert!(wg.remap(Pfn(12), Mfn(0)).is_err());
        assert_eq!((m.owned(DomId(0)), m.owned(DomId(1))), (2, 2));
    }

    #[test]
    #[cfg_attr(miri, ignore = "machine frames are a memfd: not in Miri")]
    fn an_unsealed_machine_fd_is_refused() {
        let fd = memfd_create("u", MFdFlags::MFD_CLOEXEC).unwrap();
        nix::unistd::ftruncate(&fd, 4096).unwrap();
        assert!(FrameWindow::new(fd.as_fd(), 0, &[Mfn(0)]).is_err());
    }
}
