//! Guest pseudo-physical memory: a sealed memfd, mapped shared.
//!
//! The toolstack creates a guest's memory with [`GuestMemory::create`] and passes the memfd to the
//! guest process, which maps it with [`GuestMemory::from_fd`]. The file is sealed against
//! shrinking and growing, so a hostile guest cannot truncate it and make the driver domain take a
//! `SIGBUS` on a page it still has mapped.
//!
//! Contract: memory shared with another process is never referenced with `&` or `&mut`. Bytes
//! move through `ptr::copy_nonoverlapping` on raw pointers, shared words through atomics
//! (see [`crate::grant`]). A concurrent writer in the other process can make a copy observe a mix
//! of old and new bytes; callers copy once, then validate (docs/architecture.md, "Invariants").
//!
//! Under Miri (`cfg(miri)`), which has neither `memfd_create` nor shared file mappings,
//! [`GuestMemory::create`] takes zeroed, page-aligned heap pages instead, and
//! [`GuestMemory::map_page`] hands out a view of the same pages (kept alive by the view, as a
//! real mapping keeps its page): that lets the unit tests of the grant tables and rings, which
//! only create memory and map its pages, run under Miri. The memfd there is a stand-in (an
//! eventfd): what needs the real file (`from_fd`, `PageMapping::new`, sealing, passing the fd to
//! another process) still needs a real kernel.

use std::io;
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::{Arc, OnceLock};

use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use nix::sys::memfd::{memfd_create, MFdFlags};
use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};

use crate::frames::{FrameWindow, Mfn};
use crate::{Pfn, PAGE_SIZE};

/// Errors of bounds-checked guest memory access.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MemError {
    /// The frame is not part of this guest's memory.
    #[error("pfn {0} out of range")]
    BadPfn(u32),
    /// `offset + len` does not fit in one page.
    #[error("access at offset {offset} of {len} bytes crosses the page")]
    OutOfPage {
        /// Offset into the page.
        offset: usize,
        /// Length of the access.
        len: usize,
    },
}

/// A guest's pseudo-physical memory: a memfd and one shared read-write mapping of all of it.
pub struct GuestMemory {
    fd: OwnedFd,
    base: NonNull<u8>,
    /// Under Miri: the heap pages `base` points into.
    #[cfg(miri)]
    heap: Arc<miri_heap::HeapPages>,
    pages: u32,
    /// The flip window, if this guest runs `flip`: its pages are machine frames
    /// ([`crate::frames`]) mapped over this memory's own pages.
    frames: OnceLock<FrameWindow>,
}

// SAFETY: `base` points to a MAP_SHARED mapping owned by this value for its whole life; every
// access through it is a raw-pointer copy or an atomic, never a Rust reference, so concurrent use
// from several threads is no different from concurrent use by the guest process.
unsafe impl Send for GuestMemory {}
// SAFETY: as for `Send`: `&GuestMemory` only hands out raw pointers and bounded raw copies.
unsafe impl Sync for GuestMemory {}

impl std::fmt::Debug for GuestMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuestMemory")
            .field("fd", &self.fd)
            .field("pages", &self.pages)
            .finish()
    }
}

fn io_err(e: nix::Error) -> io::Error {
    io::Error::from(e)
}

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}

/// Maps `len` bytes of `fd` at `offset`, shared; with `populate`, every page is allocated and
/// mapped now rather than at its first touch.
fn map_shared(
    fd: BorrowedFd<'_>,
    len: usize,
    offset: u64,
    writable: bool,
    populate: bool,
) -> io::Result<NonNull<u8>> {
    let len = NonZeroUsize::new(len).ok_or_else(|| invalid("empty mapping"))?;
    let offset = libc::off_t::try_from(offset).map_err(|_| invalid("offset too large"))?;
    let prot = if writable {
        ProtFlags::PROT_READ | ProtFlags::PROT_WRITE
    } else {
        ProtFlags::PROT_READ
    };
    let flags = if populate {
        MapFlags::MAP_SHARED | MapFlags::MAP_POPULATE
    } else {
        MapFlags::MAP_SHARED
    };
    // SAFETY: a fresh mapping chosen by the kernel (no fixed address), so no existing memory is
    // replaced; the result is only used through raw pointers.
    let p = unsafe { mmap(None, len, prot, flags, fd, offset) }.map_err(io_err)?;
    Ok(p.cast())
}

/// Size of `fd` in bytes, and whether it carries the shrink seal.
fn size_and_shrink_seal(fd: BorrowedFd<'_>) -> io::Result<(u64, bool)> {
    let st = nix::sys::stat::fstat(fd).map_err(io_err)?;
    let size = u64::try_from(st.st_size).map_err(|_| invalid("negative file size"))?;
    let seals = fcntl(fd, FcntlArg::F_GET_SEALS).map_err(io_err)?;
    let seals = SealFlag::from_bits_truncate(seals);
    Ok((size, seals.contains(SealFlag::F_SEAL_SHRINK)))
}

impl GuestMemory {
    /// Under Miri: `pages` zeroed heap pages (see the module docs).
    #[cfg(miri)]
    pub fn create(_name: &str, pages: u32) -> io::Result<GuestMemory> {
        if pages == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "zero pages"));
        }
        let heap = Arc::new(miri_heap::HeapPages::new(pages)?);
        Ok(GuestMemory {
            fd: crate::evtchn::eventfd()?,
            base: heap.base,
            heap,
            pages,
            frames: OnceLock::new(),
        })
    }

    /// Creates `pages` pages of zeroed guest memory, sealed against resizing.
    #[cfg(not(miri))]
    pub fn create(name: &str, pages: u32) -> io::Result<GuestMemory> {
        if pages == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "zero pages"));
        }
        let fd = memfd_create(name, MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING)
            .map_err(io_err)?;
        let size = u64::from(pages) * PAGE_SIZE as u64;
        let len = libc::off_t::try_from(size).map_err(|_| invalid("memory too large"))?;
        nix::unistd::ftruncate(&fd, len).map_err(io_err)?;
        // A guest that could shrink the file would turn our accesses into SIGBUS.
        let seals = SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL;
        fcntl(&fd, FcntlArg::F_ADD_SEALS(seals)).map_err(io_err)?;
        Self::map(fd, pages)
    }

    /// Maps guest memory received from the toolstack. The file must be a whole number of pages
    /// and sealed against shrinking.
    pub fn from_fd(fd: OwnedFd) -> io::Result<GuestMemory> {
        let (size, shrink_sealed) = size_and_shrink_seal(fd.as_fd())?;
        if !shrink_sealed {
            return Err(invalid("guest memory is not sealed against shrinking"));
        }
        if size == 0 || size % PAGE_SIZE as u64 != 0 {
            return Err(invalid("guest memory size is not a whole number of pages"));
        }
        let pages =
            u32::try_from(size / PAGE_SIZE as u64).map_err(|_| invalid("too many pages"))?;
        Self::map(fd, pages)
    }

    fn map(fd: OwnedFd, pages: u32) -> io::Result<GuestMemory> {
        let len = usize::try_from(u64::from(pages) * PAGE_SIZE as u64)
            .map_err(|_| invalid("memory too large"))?;
        // Populated, as Xen allocates a domain's memory when it builds the domain: otherwise
        // the first stream pays a page fault for every buffer page, in the daemon's grant
        // copies and again in the guest, while the wire keeps filling the packet ring.
        let base = map_shared(fd.as_fd(), len, 0, true, true)?;
        #[cfg(miri)]
        unreachable!("Miri cannot map {base:?}");
        #[cfg(not(miri))]
        Ok(GuestMemory {
            fd,
            base,
            pages,
            frames: OnceLock::new(),
        })
    }

    /// Lays a flip window over pages `[first_pfn, first_pfn + p2m.len())`: each page becomes
    /// the machine frame its P2M entry names (in this process's mapping). Once per memory.
    pub fn attach_frames(
        &self,
        machine_fd: BorrowedFd<'_>,
        first_pfn: u32,
        p2m: &[Mfn],
    ) -> io::Result<()> {
        let end = u64::from(first_pfn) + p2m.len() as u64;
        if p2m.is_empty() || end > u64::from(self.pages) {
            return Err(invalid("flip window outside guest memory"));
        }
        if self.frames.get().is_some() {
            return Err(invalid("flip window already attached"));
        }
        // SAFETY: the window's pages lie inside `self`'s mapping (checked above), which
        // outlives the window (the window is a field of `self`), and this memory is only
        // accessed through raw pointers and atomics.
        let w = unsafe { FrameWindow::overlay(machine_fd, self.base, first_pfn, p2m) }?;
        self.frames
            .set(w)
            .map_err(|_| invalid("flip window already attached"))
    }

    /// The flip window, if any.
    pub fn frames(&self) -> Option<&FrameWindow> {
        self.frames.get()
    }

    /// A separate mapping of page `pfn` (a grant map). Unlike [`PageMapping::new`] it does not
    /// check the file again: this memory was checked sealed against shrinking and at least
    /// `pages` long when it was made, and a shrink seal cannot be removed; so a map costs one
    /// `mmap` (and its `munmap`), as a grant map costs Xen one page-table update.
    pub fn map_page(&self, pfn: Pfn, writable: bool) -> io::Result<PageMapping> {
        if pfn.0 >= self.pages {
            return Err(invalid("page beyond guest memory"));
        }
        // A page of the flip window is a machine frame: map that frame, not the page of the
        // memfd it hides.
        if let Some(mfn) = self.frames().and_then(|w| w.mfn(pfn)) {
            let w = self.frames().expect("checked");
            let offset = u64::from(mfn.0) * PAGE_SIZE as u64;
            let ptr = map_shared(w.machine_fd(), PAGE_SIZE, offset, writable, false)?;
            return Ok(PageMapping {
                ptr,
                writable,
                #[cfg(miri)]
                heap: None,
            });
        }
        #[cfg(miri)]
        return Ok(PageMapping {
            ptr: NonNull::new(self.page_ptr(pfn).expect("pfn checked")).expect("non-null"),
            writable,
            heap: Some(self.heap.clone()),
        });
        #[cfg(not(miri))]
        {
            let offset = u64::from(pfn.0) * PAGE_SIZE as u64;
            let ptr = map_shared(self.fd.as_fd(), PAGE_SIZE, offset, writable, false)?;
            Ok(PageMapping { ptr, writable })
        }
    }

    /// The memfd, to pass to the guest process or to map single pages.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Number of pages.
    pub fn pages(&self) -> u32 {
        self.pages
    }

    /// Pointer to the first byte of page `pfn`, or `None` if out of range. The pointer is valid
    /// for 4096 bytes of reads and writes as long as `self` lives, page aligned.
    pub fn page_ptr(&self, pfn: Pfn) -> Option<*mut u8> {
        if pfn.0 >= self.pages {
            return None;
        }
        // SAFETY: pfn < pages, so the offset is inside the mapping of `pages * PAGE_SIZE` bytes.
        Some(unsafe { self.base.as_ptr().add(pfn.0 as usize * PAGE_SIZE) })
    }

    fn range_ptr(&self, pfn: Pfn, offset: usize, len: usize) -> Result<*mut u8, MemError> {
        let page = self.page_ptr(pfn).ok_or(MemError::BadPfn(pfn.0))?;
        match offset.checked_add(len) {
            Some(end) if end <= PAGE_SIZE => {
                // SAFETY: offset < end <= PAGE_SIZE (or offset == PAGE_SIZE with len 0), so the
                // result stays inside (or one past) the page.
                Ok(unsafe { page.add(offset) })
            }
            _ => Err(MemError::OutOfPage { offset, len }),
        }
    }

    /// Copies `out.len()` bytes from page `pfn` at `offset` into `out`. The range must lie within
    /// the page.
    pub fn read(&self, pfn: Pfn, offset: usize, out: &mut [u8]) -> Result<(), MemError> {
        let src = self.range_ptr(pfn, offset, out.len())?;
        // SAFETY: `src` is valid for `out.len()` bytes (checked above); `out` is private memory,
        // so the ranges cannot overlap.
        unsafe { std::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// Copies `data` into page `pfn` at `offset`. The range must lie within the page.
    pub fn write(&self, pfn: Pfn, offset: usize, data: &[u8]) -> Result<(), MemError> {
        let dst = self.range_ptr(pfn, offset, data.len())?;
        // SAFETY: `dst` is valid for `data.len()` bytes (checked above); `data` is a Rust slice,
        // never a view of this shared mapping, so the ranges cannot overlap.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
        Ok(())
    }
}

impl Drop for GuestMemory {
    fn drop(&mut self) {
        #[cfg(miri)]
        return; // The heap pages go with the last of `heap`'s owners.
        let len = self.pages as usize * PAGE_SIZE;
        // SAFETY: `base`/`len` is exactly the mapping made in `map`, and no pointer derived from
        // it outlives `self` (OwnPage holds an Arc).
        let _ = unsafe { munmap(self.base.cast(), len) };
    }
}

/// One page of a domain's own memory, used as ring memory by that domain (the frontend's ring).
#[derive(Debug, Clone)]
pub struct OwnPage {
    mem: Arc<GuestMemory>,
    pfn: Pfn,
}

impl OwnPage {
    /// Page `pfn` of `mem`, or `None` if out of range.
    pub fn new(mem: Arc<GuestMemory>, pfn: Pfn) -> Option<OwnPage> {
        (pfn.0 < mem.pages()).then_some(OwnPage { mem, pfn })
    }

    /// The frame number.
    pub fn pfn(&self) -> Pfn {
        self.pfn
    }

    /// The memory this page belongs to.
    pub fn memory(&self) -> &Arc<GuestMemory> {
        &self.mem
    }
}

// SAFETY: `pfn < pages` was checked in `new`, so the pointer is a page-aligned (hence 8-aligned)
// read-write page of the shared mapping, which the `Arc` keeps alive as long as `self`.
unsafe impl pvnet_netif::RingMemory for OwnPage {
    fn page_ptr(&self) -> *mut u8 {
        self.mem
            .page_ptr(self.pfn)
            .expect("pfn checked in OwnPage::new")
    }
}

/// A separate shared mapping of exactly one page of a memfd (a grant map, or a page a guest maps
/// on its own). Unmapped on drop.
#[derive(Debug)]
pub struct PageMapping {
    ptr: NonNull<u8>,
    writable: bool,
    /// Under Miri: the heap pages of a [`GuestMemory::map_page`] view (kept alive by it).
    #[cfg(miri)]
    heap: Option<Arc<miri_heap::HeapPages>>,
}

// SAFETY: the mapping is owned by this value and only accessed through raw pointers.
unsafe impl Send for PageMapping {}
// SAFETY: as for `Send`; `&PageMapping` only hands out the raw pointer.
unsafe impl Sync for PageMapping {}

impl PageMapping {
    /// Maps page `pfn` of `fd`, read-only or read-write. The file must cover the page and be
    /// sealed against shrinking (so the mapping cannot turn into `SIGBUS` under us).
    pub fn new(fd: BorrowedFd<'_>, pfn: Pfn, writable: bool) -> io::Result<PageMapping> {
        let (size, shrink_sealed) = size_and_shrink_seal(fd)?;
        if !shrink_sealed {
            return Err(invalid("file is not sealed against shrinking"));
        }
        let offset = u64::from(pfn.0) * PAGE_SIZE as u64;
        if offset + PAGE_SIZE as u64 > size {
            return Err(invalid("page beyond end of file"));
        }
        let ptr = map_shared(fd, PAGE_SIZE, offset, writable, false)?;
        Ok(PageMapping {
            ptr,
            writable,
            #[cfg(miri)]
            heap: None,
        })
    }

    /// The first byte of the mapped page (page aligned, 4096 bytes; writable only if
    /// [`PageMapping::writable`]).
    pub fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Whether the page is mapped read-write.
    pub fn writable(&self) -> bool {
        self.writable
    }
}

impl Drop for PageMapping {
    fn drop(&mut self) {
        #[cfg(miri)]
        if self.heap.is_some() {
            return; // A view of heap pages, not a mapping.
        }
        // SAFETY: exactly the one-page mapping made in `new`, owned by `self`.
        let _ = unsafe { munmap(self.ptr.cast(), PAGE_SIZE) };
    }
}

/// Ring memory must be writable: calling `page_ptr` on a read-only mapping panics rather than
/// hand out a pointer the ring code would write through.
// SAFETY: the pointer is a page-aligned one-page mapping owned by `self`, and it is only returned
// when the mapping is read-write (asserted).
unsafe impl pvnet_netif::RingMemory for PageMapping {
    fn page_ptr(&self) -> *mut u8 {
        assert!(self.writable, "ring memory on a read-only page mapping");
        self.ptr()
    }
}

/// Heap pages standing in for a shared mapping under Miri (see the module docs).
#[cfg(miri)]
mod miri_heap {
    use std::alloc::{alloc_zeroed, dealloc, Layout};
    use std::io;
    use std::ptr::NonNull;

    use crate::PAGE_SIZE;

    #[derive(Debug)]
    pub struct HeapPages {
        pub base: NonNull<u8>,
        layout: Layout,
    }

    // SAFETY: as for `GuestMemory`: the pages are only accessed through raw pointers and atomics.
    unsafe impl Send for HeapPages {}
    // SAFETY: as for `Send`.
    unsafe impl Sync for HeapPages {}

    impl HeapPages {
        pub fn new(pages: u32) -> io::Result<HeapPages> {
            let layout = Layout::from_size_align(pages as usize * PAGE_SIZE, PAGE_SIZE)
                .map_err(|_| io::Error::from(io::ErrorKind::OutOfMemory))?;
            // SAFETY: `layout` has a non-zero size (pages > 0, checked by the caller).
            let base = NonNull::new(unsafe { alloc_zeroed(layout) })
                .ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;
            Ok(HeapPages { base, layout })
        }
    }

    impl Drop for HeapPages {
        fn drop(&mut self) {
            // SAFETY: allocated in `new` with this layout, freed once (here).
            unsafe { dealloc(self.base.as_ptr(), self.layout) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pvnet_netif::RingMemory;

    #[test]
    fn map_page_shares_the_page_and_refuses_beyond_memory() {
        let mem = GuestMemory::create("g", 4).unwrap();
        assert!(mem.map_page(Pfn(4), false).is_err());
        let m = mem.map_page(Pfn(3), true).unwrap();
        // SAFETY: a writable one-page mapping owned by `m`.
        unsafe { std::ptr::copy_nonoverlapping(b"mp".as_ptr(), m.ptr().add(4094), 2) };
        let mut out = [0u8; 2];
        mem.read(Pfn(3), 4094, &mut out).unwrap();
        assert_eq!(&out, b"mp");
        assert!(!mem.map_page(Pfn(0), false).unwrap().writable());
    }

    #[test]
    fn create_write_read_roundtrip() {
        let m = GuestMemory::create("t", 4).unwrap();
        assert_eq!(m.pages(), 4);
        m.write(Pfn(3), 4090, b"abcdef").unwrap();
        let mut out = [0u8; 6];
        m.read(Pfn(3), 4090, &mut out).unwrap();
        assert_eq!(&out, b"abcdef");
        let mut z = [1u8; 4];
        m.read(Pfn(0), 0, &mut z).unwrap();
        assert_eq!(z, [0; 4]);
    }

    #[test]
    fn zero_pages_rejected() {
        assert!(GuestMemory::create("t", 0).is_err());
    }

    #[test]
    fn access_bad_pfn_rejected() {
        let m = GuestMemory::create("t", 2).unwrap();
        assert_eq!(m.write(Pfn(2), 0, b"x"), Err(MemError::BadPfn(2)));
        assert!(m.page_ptr(Pfn(2)).is_none());
        assert!(m.page_ptr(Pfn(1)).is_some());
    }

    #[test]
    fn access_crossing_page_rejected() {
        let m = GuestMemory::create("t", 2).unwrap();
        let mut out = [0u8; 2];
        assert_eq!(
            m.read(Pfn(0), 4095, &mut out),
            Err(MemError::OutOfPage {
                offset: 4095,
                len: 2
            })
        );
        assert!(m.write(Pfn(0), usize::MAX, b"x").is_err());
        // An empty access at the very end is fine.
        m.write(Pfn(0), 4096, b"").unwrap();
    }

    #[test]
    #[cfg_attr(miri, ignore = "needs mincore: not in Miri")]
    fn memory_is_allocated_when_the_domain_is_built() {
        let pages = 64;
        let m = GuestMemory::create("populated", pages).unwrap();
        let mut resident = vec![0u8; pages as usize];
        // SAFETY: `m.base` starts a mapping of `pages` pages that lives as long as `m`;
        // `resident` has one byte per page, as mincore writes.
        let r = unsafe {
            libc::mincore(
                m.base.as_ptr().cast(),
                pages as usize * PAGE_SIZE,
                resident.as_mut_ptr(),
            )
        };
        assert_eq!(r, 0, "{}", io::Error::last_os_error());
        assert!(resident.iter().all(|b| b & 1 == 1), "{resident:?}");
    }

    #[test]
    #[cfg_attr(miri, ignore = "needs memfd, seals or file mappings: not in Miri")]
    fn memfd_is_sealed() {
        let m = GuestMemory::create("t", 2).unwrap();
        assert!(nix::unistd::ftruncate(m.fd(), 4096).is_err());
        assert!(nix::unistd::ftruncate(m.fd(), 3 * 4096).is_err());
        let seals = SealFlag::from_bits_truncate(fcntl(m.fd(), FcntlArg::F_GET_SEALS).unwrap());
        assert!(
            seals.contains(SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL)
        );
    }

    #[test]
    #[cfg_attr(miri, ignore = "needs memfd, seals or file mappings: not in Miri")]
    fn from_fd_shares_memory() {
        let m = GuestMemory::create("t", 2).unwrap();
        let g = GuestMemory::from_fd(m.fd().try_clone_to_owned().unwrap()).unwrap();
        assert_eq!(g.pages(), 2);
        g.write(Pfn(1), 7, b"hello").unwrap();
        let mut out = [0u8; 5];
        m.read(Pfn(1), 7, &mut out).unwrap();
        assert_eq!(&out, b"hello");
    }

    #[test]
    #[cfg_attr(miri, ignore = "needs memfd, seals or file mappings: not in Miri")]
    fn from_fd_rejects_unsealed() {
        let fd = memfd_create("u", MFdFlags::MFD_CLOEXEC).unwrap();
        nix::unistd::ftruncate(&fd, 4096).unwrap();
        let e = GuestMemory::from_fd(fd).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    #[cfg_attr(miri, ignore = "needs memfd, seals or file mappings: not in Miri")]
    fn from_fd_rejects_partial_page() {
        let fd = memfd_create("u", MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING).unwrap();
        nix::unistd::ftruncate(&fd, 4097).unwrap();
        fcntl(&fd, FcntlArg::F_ADD_SEALS(SealFlag::F_SEAL_SHRINK)).unwrap();
        let e = GuestMemory::from_fd(fd).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn own_page_is_ring_memory() {
        let m = Arc::new(GuestMemory::create("t", 3).unwrap());
        assert!(OwnPage::new(m.clone(), Pfn(3)).is_none());
        let p = OwnPage::new(m.clone(), Pfn(2)).unwrap();
        assert_eq!(p.page_ptr(), m.page_ptr(Pfn(2)).unwrap());
        assert_eq!(p.page_ptr() as usize % 4096, 0);
    }

    #[test]
    #[cfg_attr(miri, ignore = "needs memfd, seals or file mappings: not in Miri")]
    fn page_mapping_rw_sees_guest_writes() {
        let m = GuestMemory::create("t", 3).unwrap();
        let pm = PageMapping::new(m.fd(), Pfn(1), true).unwrap();
        assert!(pm.writable());
        m.write(Pfn(1), 100, b"xyz").unwrap();
        let mut out = [0u8; 3];
        // SAFETY: the mapping is one page; 100..103 is inside it.
        unsafe { std::ptr::copy_nonoverlapping(pm.ptr().add(100), out.as_mut_ptr(), 3) };
        assert_eq!(&out, b"xyz");
        // SAFETY: as above, and the mapping is writable.
        unsafe { std::ptr::copy_nonoverlapping(b"Q".as_ptr(), pm.page_ptr().add(5), 1) };
        let mut q = [0u8; 1];
        m.read(Pfn(1), 5, &mut q).unwrap();
        assert_eq!(&q, b"Q");
    }

    #[test]
    #[cfg_attr(miri, ignore = "needs memfd, seals or file mappings: not in Miri")]
    fn page_mapping_beyond_end_rejected() {
        let m = GuestMemory::create("t", 3).unwrap();
        assert!(PageMapping::new(m.fd(), Pfn(3), false).is_err());
    }

    #[test]
    #[cfg_attr(miri, ignore = "needs memfd, seals or file mappings: not in Miri")]
    #[should_panic(expected = "read-only")]
    fn page_mapping_readonly_is_not_ring_memory() {
        let m = GuestMemory::create("t", 1).unwrap();
        let pm = PageMapping::new(m.fd(), Pfn(0), false).unwrap();
        let _ = pm.page_ptr();
    }
}
