//! Received bytes that may still sit in the ring: [`Buf`].
//!
//! A frame taken from the ring with [`crate::RxFrame::take`] stays in its slot (a *lease*):
//! the slot is not handed back to the kernel until the last user of the bytes lets go, so the
//! frame reaches its destination (a guest's granted page) with one copy, the grant copy,
//! instead of two. While a slot is leased its status word holds [`LEASED`]: not
//! `TP_STATUS_KERNEL`, so the kernel does not write it (it drops the frames that arrive while
//! its next slot is leased, as when the ring is full), and without `TP_STATUS_USER`, so the
//! ring's consumer does not take it a second time when it comes round again.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::ring3::BlockHolds;

/// The status word of a leased slot: neither `TP_STATUS_KERNEL` (0) nor `TP_STATUS_USER`.
pub(crate) const LEASED: u32 = 1 << 31;

/// A shared memory mapping, unmapped when the ring and every lease on it are gone.
pub(crate) struct Mapping {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: a Mapping only owns the address range (and unmaps it once, on drop); every access to
// the bytes goes through the Ring (one owner) or a SlotBuf (one owner per slot), never through a
// shared Mapping, so sharing or moving it between threads is fine.
unsafe impl Send for Mapping {}
// SAFETY: as for Send: `&Mapping` gives nothing but the base address.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Takes ownership of `len` bytes mapped at `base`.
    ///
    /// # Safety
    /// `base..base + len` must be a mapping created with `mmap` that nothing else unmaps.
    pub(crate) unsafe fn new(base: NonNull<u8>, len: usize) -> Mapping {
        Mapping { base, len }
    }

    /// Maps the `len`-byte receive ring of the packet socket `fd` (on which `PACKET_RX_RING`
    /// was set): V2 slots or V3 blocks alike. The ring pages are kernel memory inserted at
    /// mmap time: no populate or lock needed.
    pub(crate) fn of_socket_ring(
        fd: std::os::fd::BorrowedFd<'_>,
        len: usize,
    ) -> std::io::Result<Arc<Mapping>> {
        use std::os::fd::AsRawFd;
        // SAFETY: a fresh shared mapping of the socket's ring; the kernel validates fd and
        // length.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let base =
            NonNull::new(p.cast::<u8>()).ok_or_else(|| std::io::Error::other("mmap gave NULL"))?;
        // SAFETY: a mapping just created by mmap, owned by nothing else.
        Ok(Arc::new(unsafe { Mapping::new(base, len) }))
    }

    pub(crate) fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: base/len describe the mapping handed to `new`, unmapped nowhere else; every
        // pointer into it belongs to the Ring or a SlotBuf, which hold this Arc, so none is used
        // after this.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}

/// The bytes of one leased slot. Dropping it hands the slot back to the kernel.
pub struct SlotBuf {
    /// Keeps the mapping alive as long as the lease.
    _map: Arc<Mapping>,
    status: NonNull<AtomicU32>,
    data: NonNull<u8>,
    len: usize,
    hold: Hold,
}

/// What a lease counts itself in.
enum Hold {
    /// TPACKET_V2: the ring's lease count; the slot goes back when the lease does.
    Slot(Arc<AtomicU32>),
    /// TPACKET_V3: the block's hold counts and index; the block goes back to the kernel when
    /// the last hold on it lets go, not when this lease does.
    Block(Arc<BlockHolds>, u32),
}

impl SlotBuf {
    /// A lease on a frame of block `b` of a TPACKET_V3 ring: the hold on the block is already
    /// counted (`holds.add_lease(b)`); the block's status word at `status` is written only by
    /// whoever lets go of the last hold.
    ///
    /// # Safety
    /// The frame `data..data + len` must lie in block `b` of `map`, which must be user space's
    /// and held (hold count including this lease); no other reference to the frame may exist
    /// or be created until this SlotBuf is dropped. `status` must be the block's aligned status
    /// word, outside every frame.
    pub(crate) unsafe fn lease_in_block(
        map: Arc<Mapping>,
        status: NonNull<AtomicU32>,
        data: NonNull<u8>,
        len: usize,
        holds: Arc<BlockHolds>,
        b: u32,
    ) -> SlotBuf {
        SlotBuf {
            _map: map,
            status,
            data,
            len,
            hold: Hold::Block(holds, b),
        }
    }

    /// A lease on the slot whose status word is at `status` and whose frame is the `len`
    /// bytes at `data`; marks the slot [`LEASED`] and counts it in `leases`.
    ///
    /// # Safety
    /// The slot must lie in `map`, be owned by user space (the kernel set `TP_STATUS_USER`
    /// and nobody handed it back), and no other reference to `data..data + len` may exist or
    /// be created until this SlotBuf is dropped. `status` must be the slot's aligned status
    /// word, outside `data..data + len`.
    pub(crate) unsafe fn lease(
        map: Arc<Mapping>,
        status: NonNull<AtomicU32>,
        data: NonNull<u8>,
        len: usize,
        leases: Arc<AtomicU32>,
    ) -> SlotBuf {
        // SAFETY: the caller guarantees `status` is the slot's aligned status word in `map`,
        // accessed only atomically.
        unsafe { status.as_ref() }.store(LEASED, Ordering::Relaxed);
        leases.fetch_add(1, Ordering::Relaxed);
        SlotBuf {
            _map: map,
            status,
            data,
            len,
            hold: Hold::Slot(leases),
        }
    }
}

// SAFETY: a SlotBuf is the one owner of its slot's bytes (no other reference exists while it
// lives), keeps the mapping alive through an Arc, and touches the shared status word and lease
// count only atomically: moving it to another thread moves that ownership.
unsafe impl Send for SlotBuf {}

impl Deref for SlotBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `lease`'s contract: the bytes lie in the live mapping (held by `_map`), the
        // kernel does not write a leased slot, and this SlotBuf is their only user.
        unsafe { std::slice::from_raw_parts(self.data.as_ptr(), self.len) }
    }
}

impl DerefMut for SlotBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`; `&mut self` makes this the only borrow.
        unsafe { std::slice::from_raw_parts_mut(self.data.as_ptr(), self.len) }
    }
}

impl Drop for SlotBuf {
    fn drop(&mut self) {
        let leases = match &self.hold {
            Hold::Block(holds, b) => {
                if holds.drop_lease(*b) {
                    // SAFETY: as below, for the block's status word. The hold count's AcqRel
                    // orders every other holder's use of the block before this store.
                    unsafe { self.status.as_ref() }
                        .store(libc::TP_STATUS_KERNEL, Ordering::Release);
                }
                return;
            }
            Hold::Slot(l) => l,
        };
        // SAFETY: the status word lies in the mapping `_map` keeps alive and is only accessed
        // atomically. Release: our reads and writes of the frame happen before the kernel may
        // write the slot again.
        unsafe { self.status.as_ref() }.store(libc::TP_STATUS_KERNEL, Ordering::Release);
        leases.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Page-sized receive buffers owned by someone else, lent to the port one at a time (the
/// driver domain's machine frames, `pvnet_dd::frameport`): the port receives straight into
/// them, and a [`Buf`] holding one gives it back when dropped.
pub trait FrameSource: Send + Sync {
    /// Takes a free buffer: its id and its first byte (valid for [`FRAME_LEN`] bytes until
    /// given back).
    fn take(&self) -> Option<(u32, NonNull<u8>)>;
    /// Gives buffer `id` back.
    fn give_back(&self, id: u32);
    /// Buffers free now.
    fn free(&self) -> usize;
    /// Buffers in all.
    fn total(&self) -> usize;
}

/// Bytes in one lent buffer.
pub const FRAME_LEN: usize = 4096;

/// A frame received into a lent buffer: `len` bytes at `off` of buffer `id`.
pub struct LentBuf {
    src: Arc<dyn FrameSource>,
    id: u32,
    page: NonNull<u8>,
    off: usize,
    len: usize,
}

// SAFETY: the LentBuf is the one user of its buffer in this process until it gives it back
// (the source hands each buffer to one taker at a time); moving it moves that ownership.
unsafe impl Send for LentBuf {}

impl LentBuf {
    /// `len` bytes at `off` of buffer `id` taken from `src` (whose first byte is `page`).
    ///
    /// # Safety
    /// `(id, page)` must come from `src.take()` and not have been given back; `off + len`
    /// must not exceed [`FRAME_LEN`].
    pub unsafe fn new(
        src: Arc<dyn FrameSource>,
        id: u32,
        page: NonNull<u8>,
        off: usize,
        len: usize,
    ) -> LentBuf {
        debug_assert!(off + len <= FRAME_LEN);
        LentBuf {
            src,
            id,
            page,
            off,
            len,
        }
    }

    /// The buffer's id.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Where the bytes start in the buffer.
    pub fn offset(&self) -> usize {
        self.off
    }
}

impl Deref for LentBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `new`'s contract: the bytes lie in a buffer this LentBuf alone uses in this
        // process. (A flip guest may map the same frame: see pvnet_hv::frames, "Isolation".)
        unsafe { std::slice::from_raw_parts(self.page.as_ptr().add(self.off), self.len) }
    }
}

impl DerefMut for LentBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`; `&mut self` makes this the only borrow.
        unsafe { std::slice::from_raw_parts_mut(self.page.as_ptr().add(self.off), self.len) }
    }
}

impl Drop for LentBuf {
    fn drop(&mut self) {
        self.src.give_back(self.id);
    }
}

/// Bytes of a packet: on the heap, or still in the ring slot they arrived in. Derefs to the
/// bytes either way; [`Buf::detach`] moves leased bytes to the heap and frees the slot.
pub struct Buf(Inner);

enum Inner {
    Heap(Vec<u8>),
    Slot(SlotBuf),
    Lent(LentBuf),
}

impl Buf {
    /// Whether the bytes are still in a ring slot.
    pub fn is_leased(&self) -> bool {
        matches!(self.0, Inner::Slot(_) | Inner::Lent(_))
    }

    /// The lent buffer holding the bytes, if they are in one: its id and the bytes' offset.
    pub fn lent(&self) -> Option<(u32, usize)> {
        match &self.0 {
            Inner::Lent(l) => Some((l.id, l.off)),
            _ => None,
        }
    }

    /// Copies leased bytes to the heap and hands the slot back. Returns whether it did.
    pub fn detach(&mut self) -> bool {
        let v = match &self.0 {
            Inner::Heap(_) => return false,
            Inner::Slot(s) => s.to_vec(),
            Inner::Lent(l) => l.to_vec(),
        };
        self.0 = Inner::Heap(v);
        true
    }

    /// Shortens to `len` bytes (no effect when already shorter).
    pub fn truncate(&mut self, len: usize) {
        match &mut self.0 {
            Inner::Heap(v) => v.truncate(len),
            Inner::Slot(s) => s.len = s.len.min(len),
            Inner::Lent(l) => l.len = l.len.min(len),
        }
    }

    pub fn as_slice(&self) -> &[u8] {
        self
    }
}

/// A private anonymous mapping of `len` bytes (a stand-in for the ring in tests).
#[cfg(any(test, feature = "fixtures"))]
pub(crate) fn anon_mapping(len: usize) -> Arc<Mapping> {
    // SAFETY: a fresh private anonymous mapping; no pointer into it exists yet.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED, "mmap of {len} anonymous bytes");
    let base = NonNull::new(p.cast()).expect("mmap does not return null on success");
    // SAFETY: the mapping was just created and nothing else unmaps it.
    Arc::new(unsafe { Mapping::new(base, len) })
}

/// A leased [`Buf`] holding `bytes`, on a one-slot mapping of its own (`fixtures` feature, for
/// other crates' tests of what treats leases differently: it is leased, and detaching it
/// copies it to the heap, exactly as a ring lease).
#[cfg(any(test, feature = "fixtures"))]
pub fn fixture_lease(bytes: &[u8]) -> Buf {
    const DATA: usize = 64;
    let map = anon_mapping(DATA + bytes.len().max(1));
    let leases = Arc::new(AtomicU32::new(0));
    let base = map.base();
    // SAFETY: the status word is the mapping's first (page-aligned) 4 bytes, the data starts 64
    // bytes in and fits the mapping; the mapping is fresh, so no other reference to either exists.
    unsafe {
        (*base.cast::<AtomicU32>()).store(libc::TP_STATUS_USER, Ordering::Relaxed);
        let mut s = SlotBuf::lease(
            map.clone(),
            NonNull::new(base.cast()).expect("mapping base"),
            NonNull::new(base.add(DATA)).expect("inside the mapping"),
            bytes.len(),
            leases,
        );
        s.copy_from_slice(bytes);
        Buf(Inner::Slot(s))
    }
}

impl From<SlotBuf> for Buf {
    fn from(s: SlotBuf) -> Buf {
        Buf(Inner::Slot(s))
    }
}

impl From<LentBuf> for Buf {
    fn from(l: LentBuf) -> Buf {
        Buf(Inner::Lent(l))
    }
}

impl From<Vec<u8>> for Buf {
    fn from(v: Vec<u8>) -> Buf {
        Buf(Inner::Heap(v))
    }
}

impl From<&[u8]> for Buf {
    fn from(v: &[u8]) -> Buf {
        Buf(Inner::Heap(v.to_vec()))
    }
}

impl Default for Buf {
    fn default() -> Buf {
        Buf(Inner::Heap(Vec::new()))
    }
}

/// A clone is always on the heap: a slot has one owner.
impl Clone for Buf {
    fn clone(&self) -> Buf {
        Buf(Inner::Heap(self.to_vec()))
    }
}

impl Deref for Buf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.0 {
            Inner::Heap(v) => v,
            Inner::Slot(s) => s,
            Inner::Lent(l) => l,
        }
    }
}

impl DerefMut for Buf {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.0 {
            Inner::Heap(v) => v,
            Inner::Slot(s) => s,
            Inner::Lent(l) => l,
        }
    }
}

impl fmt::Debug for Buf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.is_leased() { "Slot" } else { "Heap" };
        write!(f, "{kind}{:?}", self.as_slice())
    }
}

impl PartialEq for Buf {
    fn eq(&self, other: &Buf) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Buf {}

impl PartialEq<Vec<u8>> for Buf {
    fn eq(&self, other: &Vec<u8>) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl PartialEq<[u8]> for Buf {
    fn eq(&self, other: &[u8]) -> bool {
        self.as_slice() == other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status_at(map: &Mapping, off: usize) -> &AtomicU32 {
        // SAFETY: off is 16-aligned and inside the mapping; accessed atomically only.
        unsafe { &*map.base().add(off).cast::<AtomicU32>() }
    }

    fn lease_at(map: &Arc<Mapping>, off: usize, len: usize, leases: &Arc<AtomicU32>) -> SlotBuf {
        status_at(map, off).store(libc::TP_STATUS_USER, Ordering::Relaxed);
        // SAFETY: slot at `off` (status word, then 64 bytes of data from off + 64) is inside the
        // mapping and marked user-owned; no other reference to its bytes exists.
        unsafe {
            SlotBuf::lease(
                map.clone(),
                NonNull::new(map.base().add(off).cast()).unwrap(),
                NonNull::new(map.base().add(off + 64)).unwrap(),
                len,
                leases.clone(),
            )
        }
    }

    #[test]
    fn a_lease_marks_its_slot_and_hands_it_back_when_dropped() {
        let map = anon_mapping(4096);
        let leases = Arc::new(AtomicU32::new(0));
        let mut s = lease_at(&map, 0, 10, &leases);
        assert_eq!(status_at(&map, 0).load(Ordering::Relaxed), LEASED);
        assert_eq!(leases.load(Ordering::Relaxed), 1);
        s.copy_from_slice(b"0123456789");
        let b = Buf::from(s);
        assert!(b.is_leased());
        assert_eq!(b, b"0123456789".to_vec());
        drop(b);
        assert_eq!(status_at(&map, 0).load(Ordering::Relaxed), 0);
        assert_eq!(leases.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn detaching_copies_the_bytes_and_frees_the_slot() {
        let map = anon_mapping(4096);
        let leases = Arc::new(AtomicU32::new(0));
        let mut s = lease_at(&map, 2048, 4, &leases);
        s.copy_from_slice(b"abcd");
        let mut b = Buf::from(s);
        let c = b.clone();
        assert!(!c.is_leased(), "a clone never shares the slot");
        assert!(b.detach());
        assert!(!b.detach(), "already on the heap");
        assert_eq!(leases.load(Ordering::Relaxed), 0);
        assert_eq!(status_at(&map, 2048).load(Ordering::Relaxed), 0);
        // The slot may now be overwritten; the bytes stay.
        // SAFETY: the slot is no longer leased; nothing references it.
        unsafe { map.base().add(2048 + 64).write_bytes(0, 4) };
        assert_eq!(b, b"abcd".to_vec());
        assert_eq!(c, b"abcd".to_vec());
    }

    #[test]
    fn a_lease_keeps_the_mapping_alive() {
        let map = anon_mapping(4096);
        let leases = Arc::new(AtomicU32::new(0));
        let mut s = lease_at(&map, 0, 3, &leases);
        drop(map);
        s.copy_from_slice(b"xyz");
        let mut b = Buf::from(s);
        b.truncate(2);
        assert_eq!(&*b, b"xy");
        b.truncate(7);
        assert_eq!(b.to_vec(), b"xy".to_vec());
        drop(b);
        assert_eq!(leases.load(Ordering::Relaxed), 0);
    }
}
