//! The memory-mapped TPACKET_V2 receive ring.
//!
//! The ring is shared with the kernel. Access rules:
//! - no reference is ever formed over the whole mapping;
//! - a slot's status word is read with an Acquire load and written back with a Release store
//!   through an `AtomicU32` made from a raw pointer;
//! - the only reference into a slot is the `&[u8]` over the vnet header + frame bytes, and only
//!   while the slot is owned by user space (status has `TP_STATUS_USER`); it never covers the
//!   status word;
//! - every field read from the `tpacket2_hdr` is validated before it is used;
//! - a slot taken as a lease ([`crate::buf::SlotBuf`]) is marked leased before the consumer
//!   moves on, and its bytes are reachable only through that one lease until it is dropped.

use std::cell::Cell;
use std::io;
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::buf::{Mapping, SlotBuf};
use crate::ring3::BlockHolds;

use pvnet_wire::vnet::{VirtioNetHdr, VNET_HDR_LEN};

/// Size of the kernel's `struct tpacket2_hdr`.
const TP2_HDR_SIZE: usize = std::mem::size_of::<libc::tpacket2_hdr>();
/// `TPACKET2_HDRLEN`: the aligned header plus the `sockaddr_ll` the kernel writes after it.
pub(crate) const TP2_HDRLEN: usize = libc::TPACKET2_HDRLEN;
const _: () = assert!(TP2_HDR_SIZE <= TP2_HDRLEN && MIN_MAC < MIN_FRAME_SIZE as usize);
/// The lowest `tp_mac` a valid frame can have: header, sockaddr_ll, vnet header.
pub(crate) const MIN_MAC: usize = TP2_HDRLEN + VNET_HDR_LEN;
/// Smallest frame slot accepted: room for the headers plus a maximal Ethernet header and some
/// payload (the kernel puts the MAC header at TPACKET_ALIGN(hdrlen + 16) + vnet - maclen).
pub(crate) const MIN_FRAME_SIZE: u32 = 256;

/// Ring geometry as passed to `PACKET_RX_RING`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub block_size: u32,
    pub block_nr: u32,
    pub frame_size: u32,
    pub frame_nr: u32,
}

impl Geometry {
    /// Computes a geometry for the requested frame size and count. Frames never straddle
    /// blocks, and a block is whole pages: of the frame size rounded up to pages and the 15
    /// sizes a page larger each, the block is the one that leaves the smallest share of itself
    /// unused (the smallest of equals). 1664-byte frames go 32 to 13 pages, where a page would
    /// hold 2 and leave 19 % unused. The frame count is rounded up to whole blocks (the kernel
    /// requires `frame_nr == block_nr * frames_per_block`).
    pub fn new(frame_size: u32, frame_nr: u32, page_size: u32) -> Result<Geometry, String> {
        if frame_size < MIN_FRAME_SIZE {
            return Err(format!("frame_size {frame_size} < {MIN_FRAME_SIZE}"));
        }
        if frame_size as usize & (libc::TPACKET_ALIGNMENT - 1) != 0 {
            return Err(format!(
                "frame_size {frame_size} is not a multiple of {}",
                libc::TPACKET_ALIGNMENT
            ));
        }
        if frame_nr == 0 {
            return Err("frame_nr is 0".into());
        }
        if page_size == 0 || !page_size.is_power_of_two() {
            return Err(format!("bad page size {page_size}"));
        }
        let first = frame_size
            .checked_next_multiple_of(page_size)
            .ok_or_else(|| format!("frame_size {frame_size} too large"))?;
        let unused = |b: u64| b % u64::from(frame_size);
        let mut block_size = u64::from(first);
        for k in 1..=15u64 {
            let b = u64::from(first) + k * u64::from(page_size);
            if unused(b) * block_size < unused(block_size) * b {
                block_size = b;
            }
        }
        let block_size =
            u32::try_from(block_size).map_err(|_| format!("frame_size {frame_size} too large"))?;
        let per_block = block_size / frame_size;
        let block_nr = frame_nr.div_ceil(per_block);
        let frame_nr = block_nr
            .checked_mul(per_block)
            .ok_or_else(|| format!("frame_nr {frame_nr} too large"))?;
        // The mapping must fit in the address space and stay sane (≤ 4 GiB here).
        let total = u64::from(block_size) * u64::from(block_nr);
        if total > u64::from(u32::MAX) {
            return Err(format!("ring of {total} bytes too large"));
        }
        Ok(Geometry {
            block_size,
            block_nr,
            frame_size,
            frame_nr,
        })
    }

    pub fn frames_per_block(&self) -> u32 {
        self.block_size / self.frame_size
    }

    pub fn map_len(&self) -> usize {
        self.block_size as usize * self.block_nr as usize
    }

    /// Byte offset of frame `i` in the mapping.
    pub fn frame_offset(&self, i: u32) -> usize {
        let fpb = self.frames_per_block();
        (i / fpb) as usize * self.block_size as usize
            + (i % fpb) as usize * self.frame_size as usize
    }

    pub fn as_req(&self) -> libc::tpacket_req {
        libc::tpacket_req {
            tp_block_size: self.block_size,
            tp_block_nr: self.block_nr,
            tp_frame_size: self.frame_size,
            tp_frame_nr: self.frame_nr,
        }
    }
}

/// The header fields of one slot, copied out of shared memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct HdrFields {
    pub len: u32,
    pub snaplen: u32,
    pub mac: u16,
    pub net: u16,
}

/// Validates the header of a user-owned slot. Returns `(mac, snaplen)` on success.
pub(crate) fn validate(h: &HdrFields, frame_size: u32) -> Option<(usize, usize)> {
    let mac = usize::from(h.mac);
    let net = usize::from(h.net);
    let snap = h.snaplen as usize;
    let fs = frame_size as usize;
    if mac < MIN_MAC || net < mac || net > fs {
        return None;
    }
    // snaplen 0 means the kernel did not even write the vnet header.
    if snap == 0 || h.snaplen > h.len {
        return None;
    }
    if mac.checked_add(snap)? > fs {
        return None;
    }
    Some((mac, snap))
}

/// A packet ring's receive time (`tp_sec`, `tp_nsec`) in nanoseconds.
pub(crate) fn stamp_ns(sec: u32, nsec: u32) -> u64 {
    u64::from(sec) * 1_000_000_000 + u64::from(nsec)
}

/// What one slot held.
pub(crate) enum Slot<'a> {
    Frame {
        status: u32,
        len: u32,
        /// When the kernel received the frame (`tp_sec`/`tp_nsec`: `CLOCK_REALTIME`, ns).
        stamp_ns: u64,
        vnet: VirtioNetHdr,
        data: Lease<'a>,
    },
    /// The header failed validation; the slot is released and counted as bad.
    Bad,
}

/// The frame bytes of the slot being consumed, readable for the duration of the consumer's
/// call, and takeable as a lease that outlives it.
pub(crate) struct Lease<'a> {
    map: &'a Arc<Mapping>,
    status: NonNull<AtomicU32>,
    data: NonNull<u8>,
    len: usize,
    leases: &'a Arc<AtomicU32>,
    taken: &'a Cell<bool>,
    /// TPACKET_V3: the hold counts and the block the frame lies in (`status` is then the
    /// block's status word).
    block: Option<(&'a Arc<BlockHolds>, u32)>,
}

impl<'a> Lease<'a> {
    /// A frame in block `block.1` of a V3 ring, which the consumer holds (see
    /// [`crate::ring3`]).
    pub(crate) fn in_block(
        map: &'a Arc<Mapping>,
        status: NonNull<AtomicU32>,
        data: NonNull<u8>,
        len: usize,
        block: (&'a Arc<BlockHolds>, u32),
        taken: &'a Cell<bool>,
    ) -> Lease<'a> {
        Lease {
            map,
            status,
            data,
            len,
            leases: NO_LEASES.get_or_init(|| Arc::new(AtomicU32::new(0))),
            taken,
            block: Some(block),
        }
    }
}

/// The V2 lease count a V3 lease does not use.
static NO_LEASES: std::sync::OnceLock<Arc<AtomicU32>> = std::sync::OnceLock::new();

impl Lease<'_> {
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `consume` made this Lease over validated bounds inside the slot, which is
        // user-owned until the Release guard drops after the consumer returned; the borrow is
        // tied to `self`, so it ends before `take` can create the only other reference.
        unsafe { std::slice::from_raw_parts(self.data.as_ptr(), self.len) }
    }

    /// Leases hold this many slots (V2), or this many blocks the consumer has left (V3).
    pub fn outstanding(&self) -> u32 {
        match self.block {
            Some((h, _)) => h.held(),
            None => self.leases.load(Ordering::Relaxed),
        }
    }

    /// Keeps the slot out of the kernel's hands after the consumer returns: its bytes stay
    /// where they are until the returned SlotBuf is dropped.
    pub fn take(self) -> SlotBuf {
        if let Some((holds, b)) = self.block {
            holds.add_lease(b);
            // SAFETY: the frame lies in block `b` of `map`, which the consumer holds (status
            // TP_STATUS_USER | HELD, hold count ≥ 1 until it leaves), so the kernel does not
            // write it; the hold just added keeps it so until the SlotBuf is dropped. `self`,
            // the only way to reach these bytes, is consumed here; frames never overlap
            // (walk_block). `status` is the block's aligned status word, in its descriptor.
            return unsafe {
                SlotBuf::lease_in_block(
                    self.map.clone(),
                    self.status,
                    self.data,
                    self.len,
                    holds.clone(),
                    b,
                )
            };
        }
        self.taken.set(true);
        // SAFETY: the slot lies in `map` and is user-owned; `self` (the only way to reach its
        // bytes) is consumed here, and the Release guard sees `taken` and leaves the status
        // word to the lease. `status` is the slot's aligned status word, before the data.
        unsafe {
            SlotBuf::lease(
                self.map.clone(),
                self.status,
                self.data,
                self.len,
                self.leases.clone(),
            )
        }
    }
}

/// The mapped ring and the index of the next slot to look at.
pub(crate) struct Ring {
    map: Arc<Mapping>,
    geo: Geometry,
    head: u32,
    /// Slots leased out and not yet handed back.
    leases: Arc<AtomicU32>,
    /// The oldest slot that may still be leased: every slot consumed before it has been
    /// handed back.
    tail: u32,
    /// Slots consumed since `tail` (at most `frame_nr` when the age is asked once a lap), so
    /// also the age, in frames, of the lease on `tail` when there is one.
    behind: u32,
    /// How many slots past the head, and past the kernel's next slot, to ask the CPU to load
    /// before they are used ([`crate::PnicConfig::prefetch`]; 0: none).
    ahead: u32,
    /// The first slot past the head not yet asked for: slots `head..warmed` have been.
    warmed: u32,
    /// The kernel's next slot as last seen, as a distance from `head` (the head's advance
    /// takes it down by one).
    kdist: u32,
    /// The first slot past the kernel's next not yet asked for.
    kwarmed: u32,
    /// Every slot asked for past the head, and from the kernel's next slot, in order (tests
    /// only).
    #[cfg(test)]
    asked: (Vec<u32>, Vec<u32>),
}

/// Hands the slot back to the kernel (unless it was leased) and advances the head, also when
/// the consumer panics.
struct Release<'r> {
    status: NonNull<AtomicU32>,
    head: &'r mut u32,
    behind: &'r mut u32,
    kdist: &'r mut u32,
    frame_nr: u32,
    taken: &'r Cell<bool>,
}

impl Drop for Release<'_> {
    fn drop(&mut self) {
        if !self.taken.get() {
            // SAFETY: `status` points to the 4-byte aligned status word of a slot inside the
            // live mapping (Ring outlives this guard); no reference covers it.
            unsafe { self.status.as_ref() }.store(libc::TP_STATUS_KERNEL, Ordering::Release);
        }
        *self.head = (*self.head + 1) % self.frame_nr;
        *self.behind = self.behind.saturating_add(1);
        *self.kdist = self.kdist.saturating_sub(1);
    }
}

impl Ring {
    /// Maps the ring of `fd` (on which `PACKET_RX_RING` was set with `geo`); `prefetch` as
    /// [`crate::PnicConfig::prefetch`].
    pub fn map(fd: BorrowedFd<'_>, geo: Geometry, prefetch: u32) -> io::Result<Ring> {
        let map = Mapping::of_socket_ring(fd, geo.map_len())?;
        Ok(Ring::over(map, geo, prefetch))
    }

    /// The ring in `map`, laid out as `geo`.
    fn over(map: Arc<Mapping>, geo: Geometry, prefetch: u32) -> Ring {
        Ring {
            map,
            geo,
            head: 0,
            leases: Arc::new(AtomicU32::new(0)),
            tail: 0,
            behind: 0,
            ahead: prefetch.min(geo.frame_nr - 1),
            warmed: 0,
            kdist: 0,
            kwarmed: 0,
            #[cfg(test)]
            asked: (Vec::new(), Vec::new()),
        }
    }

    /// The status word of slot `i` (taken modulo the slot count).
    fn status_at(&self, i: u32) -> &AtomicU32 {
        let off = self.geo.frame_offset(i % self.geo.frame_nr);
        // SAFETY: off < map_len, so the pointer stays inside the mapping; the slot start is
        // 16-byte aligned and its status word is only accessed atomically.
        unsafe { &*self.map.base().add(off).cast::<AtomicU32>() }
    }

    /// Asks the CPU to load every line of slot `i` (< `frame_nr`).
    fn prefetch_slot(&self, i: u32) {
        let off = self.geo.frame_offset(i);
        for line in (0..self.geo.frame_size as usize).step_by(64) {
            // SAFETY: off + line < off + frame_size ≤ map_len, so the address lies inside
            // the live mapping; a prefetch reads nothing into the program and cannot fault.
            #[cfg(target_arch = "x86_64")]
            unsafe {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                _mm_prefetch::<_MM_HINT_T0>(self.map.base().add(off + line).cast::<i8>());
            }
            #[cfg(not(target_arch = "x86_64"))]
            let _ = line;
        }
    }

    /// Asks the CPU for the slots from `start` up to `ahead` past it that the last call for
    /// this side, which left `warmed`, has not asked for. Returns the new `warmed` and the
    /// slots asked for, as distances from `start`.
    fn warm_from(&self, start: u32, warmed: u32) -> (u32, std::ops::Range<u32>) {
        let n = self.geo.frame_nr;
        let mut done = (warmed + n - start) % n;
        if done > self.ahead {
            done = 0;
        }
        for i in done..self.ahead {
            self.prefetch_slot((start + i) % n);
        }
        ((start + self.ahead) % n, done..self.ahead)
    }

    /// Asks the CPU to load the slots up to `ahead` past the head (the next frames the
    /// consumer reads, or, when it has caught up, the slots the kernel fills next), and the
    /// `ahead` slots from the kernel's next slot: the first from the head that is not the
    /// user's, found by walking the status words the kernel has just written, each once a
    /// lap. A slot is handed back a whole lap before the kernel fills it again, so at eight
    /// guests both find it long out of cache.
    fn warm(&mut self) {
        let n = self.geo.frame_nr;
        let (warmed, _asked) = self.warm_from(self.head, self.warmed);
        #[cfg(test)]
        self.asked.0.extend(_asked.map(|i| (self.head + i) % n));
        self.warmed = warmed;
        while self.kdist < n - 1
            && self
                .status_at(self.head + self.kdist)
                .load(Ordering::Relaxed)
                & libc::TP_STATUS_USER
                != 0
        {
            self.kdist += 1;
        }
        let k = (self.head + self.kdist) % n;
        let (kwarmed, _asked) = self.warm_from(k, self.kwarmed);
        #[cfg(test)]
        self.asked.1.extend(_asked.map(|i| (k + i) % n));
        self.kwarmed = kwarmed;
    }

    /// Slots leased out and not yet handed back.
    pub fn leases(&self) -> u32 {
        self.leases.load(Ordering::Relaxed)
    }

    /// Whether slot `i` is leased out.
    fn is_leased(&self, i: u32) -> bool {
        self.status_at(i).load(Ordering::Relaxed) == crate::buf::LEASED
    }

    /// Whether a lease stands in the kernel's way: on the newest frame taken (the kernel reports
    /// the socket readable while the slot before its next one is not its own), or on the slot
    /// the kernel fills next (it has come round the ring to a lease and stops there).
    pub fn lease_in_the_way(&self) -> bool {
        let n = self.geo.frame_nr;
        self.is_leased(self.head + n - 1) || self.is_leased(self.head)
    }

    /// How many frames ago the oldest lease still out was taken (0 when none is out). The
    /// kernel fills the ring in order, so it comes round to that slot after `frame_nr` minus
    /// this many frames, fewer the further it is ahead of the head. Passes over the slots
    /// handed back since the last call: one status word per slot and lap. Called less than
    /// once a lap it can only overstate the age (a slot leased again on a later lap looks
    /// as old as the first lease on it was).
    pub fn oldest_lease_age(&mut self) -> u32 {
        let n = self.geo.frame_nr;
        if self.leases() == 0 {
            (self.tail, self.behind) = (self.head, 0);
            return 0;
        }
        while self.behind > 0 && !self.is_leased(self.tail) {
            self.tail = (self.tail + 1) % n;
            self.behind -= 1;
        }
        self.behind
    }

    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    /// Whether the head slot holds a frame for user space, without taking it: a look at one
    /// status word, no system call.
    pub fn head_ready(&self) -> bool {
        self.status_at(self.head).load(Ordering::Acquire) & libc::TP_STATUS_USER != 0
    }

    /// Looks at the head slot. When it is owned by user space, calls `f` with its validated
    /// contents, then gives the slot back to the kernel (unless `f` took a lease on it) and
    /// advances. `None` when the head slot still belongs to the kernel (nothing waiting), or
    /// is leased from an earlier lap.
    pub fn consume<R>(&mut self, f: impl FnOnce(Slot<'_>) -> R) -> Option<R> {
        if self.ahead > 0 {
            self.warm();
        }
        let off = self.geo.frame_offset(self.head);
        // SAFETY: off < map_len (head < frame_nr), so the pointer stays inside the mapping.
        let frame = unsafe { self.map.base().add(off) };
        let status_ptr = NonNull::new(frame.cast::<AtomicU32>()).expect("inside a mapping");
        // SAFETY: the slot start is 16-byte aligned (block is page aligned, frame_size a
        // multiple of 16) and lies in the live mapping; we only ever access it atomically.
        let status = unsafe { status_ptr.as_ref() }.load(Ordering::Acquire);
        if status & libc::TP_STATUS_USER == 0 {
            return None;
        }
        let frame_nr = self.geo.frame_nr;
        let frame_size = self.geo.frame_size;
        let taken = Cell::new(false);
        let _release = Release {
            status: status_ptr,
            head: &mut self.head,
            behind: &mut self.behind,
            kdist: &mut self.kdist,
            frame_nr,
            taken: &taken,
        };
        // The slot is ours until the Release store: the kernel does not write it.
        // SAFETY: the header lies inside the slot (frame_size ≥ MIN_FRAME_SIZE > TP2_HDR_SIZE),
        // the slot is aligned for tpacket2_hdr, and the Acquire load above orders these reads
        // after the kernel's writes. We copy it out (no reference is kept).
        let raw: libc::tpacket2_hdr = unsafe { std::ptr::read(frame.cast::<libc::tpacket2_hdr>()) };
        let h = HdrFields {
            len: raw.tp_len,
            snaplen: raw.tp_snaplen,
            mac: raw.tp_mac,
            net: raw.tp_net,
        };
        let slot = match validate(&h, frame_size) {
            Some((mac, snap)) => {
                // SAFETY: validate guarantees MIN_MAC ≤ mac and mac + snap ≤ frame_size, so
                // [mac - VNET_HDR_LEN, mac) lies inside this slot, past the status word. We
                // copy the vnet header out; no reference is kept.
                let vh: [u8; VNET_HDR_LEN] = unsafe {
                    std::ptr::read_unaligned(
                        frame.add(mac - VNET_HDR_LEN).cast::<[u8; VNET_HDR_LEN]>(),
                    )
                };
                match VirtioNetHdr::parse(&vh) {
                    Some(vnet) => Slot::Frame {
                        status,
                        len: h.len,
                        stamp_ns: stamp_ns(raw.tp_sec, raw.tp_nsec),
                        vnet,
                        data: Lease {
                            map: &self.map,
                            status: status_ptr,
                            // SAFETY: mac + snap ≤ frame_size (validate): [mac, mac + snap)
                            // lies inside this slot, past the status word.
                            data: NonNull::new(unsafe { frame.add(mac) }).expect("in mapping"),
                            len: snap,
                            leases: &self.leases,
                            taken: &taken,
                            block: None,
                        },
                    },
                    None => Slot::Bad,
                }
            }
            None => Slot::Bad,
        };
        Some(f(slot))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_default() {
        let g = Geometry::new(2048, 4096, 4096).unwrap();
        assert_eq!(g.block_size, 4096);
        assert_eq!(g.block_nr, 2048);
        assert_eq!(g.frame_nr, 4096);
        assert_eq!(g.frame_offset(0), 0);
        assert_eq!(g.frame_offset(1), 2048);
        assert_eq!(g.frame_offset(2), 4096);
        assert_eq!(g.map_len(), 8 << 20);
    }

    #[test]
    fn geometry_packs_slots_that_do_not_divide_the_page() {
        // The default slot: 32 in 13 pages, none of it unused; two a page would leave 19 %
        // of every page unused.
        let g = Geometry::new(1664, 4096, 4096).unwrap();
        assert_eq!((g.block_size, g.frames_per_block()), (13 * 4096, 32));
        assert_eq!((g.block_nr, g.frame_nr), (128, 4096));
        assert_eq!(g.frame_offset(31), 31 * 1664);
        assert_eq!(g.frame_offset(32), 13 * 4096);
        assert_eq!(g.map_len(), 128 * 13 * 4096);
    }

    #[test]
    fn geometry_rounding() {
        // 3008-byte frames: 19 in 14 pages (192 bytes unused) rather than one a page, so 5
        // frames asked for are one block of 19.
        let g = Geometry::new(3008, 5, 4096).unwrap();
        assert_eq!((g.block_size, g.block_nr, g.frame_nr), (14 * 4096, 1, 19));
        assert_eq!(g.frame_offset(18), 18 * 3008);
        // 9 frames of 2 KiB → 5 one-page blocks, 10 frames.
        let g = Geometry::new(2048, 9, 4096).unwrap();
        assert_eq!((g.block_size, g.block_nr, g.frame_nr), (4096, 5, 10));
        // Jumbo: 9216 → 4 frames in 9 pages, none of it unused.
        let g = Geometry::new(9216, 4, 4096).unwrap();
        assert_eq!((g.block_size, g.frame_nr), (36864, 4));
    }

    #[test]
    fn geometry_never_splits_a_frame_and_never_wastes_more_than_page_rounding() {
        for fs in (MIN_FRAME_SIZE..=16384).step_by(16) {
            let g = Geometry::new(fs, 100, 4096).unwrap();
            let rounded = fs.next_multiple_of(4096);
            assert!(g.frames_per_block() >= 1, "{fs}");
            assert!(g.frames_per_block() * fs <= g.block_size, "{fs}");
            assert!(g.block_size <= rounded + 15 * 4096, "{fs}");
            assert!(
                g.block_size.is_multiple_of(4096) && g.block_size >= rounded,
                "{fs}"
            );
            let unused = |b: u32| f64::from(b % fs) / f64::from(b);
            assert!(unused(g.block_size) <= unused(rounded), "{fs}: {g:?}");
            assert!(
                g.frame_nr >= 100 && g.frame_nr.is_multiple_of(g.frames_per_block()),
                "{fs}"
            );
        }
    }

    #[test]
    fn geometry_rejects() {
        assert!(Geometry::new(100, 4, 4096).is_err());
        assert!(Geometry::new(2050, 4, 4096).is_err());
        assert!(Geometry::new(2048, 0, 4096).is_err());
        assert!(Geometry::new(u32::MAX - 15, 1, 4096).is_err());
        assert!(Geometry::new(2048, u32::MAX, 4096).is_err());
    }

    /// A ring of `n` 256-byte slots over anonymous memory, loading `ahead` slots before use,
    /// and a way to play the kernel: mark slot `i` filled (its header is zero, so the
    /// consumer finds it bad, releases it and moves on, as with any frame).
    fn fake_ring(n: u32, ahead: u32) -> (Ring, impl Fn(&Ring, u32)) {
        let geo = Geometry::new(256, n, 4096).unwrap();
        assert_eq!(geo.frame_nr, n);
        let ring = Ring::over(crate::buf::anon_mapping(geo.map_len()), geo, ahead);
        let fill = |r: &Ring, i: u32| {
            r.status_at(i)
                .store(libc::TP_STATUS_USER, Ordering::Release)
        };
        (ring, fill)
    }

    #[test]
    fn prefetch_asks_for_each_slot_once_a_lap_ahead_of_the_reader_and_of_the_kernel() {
        let (n, ahead, backlog) = (16u32, 4u32, 5u32);
        let (mut r, fill) = fake_ring(n, ahead);
        for i in 0..backlog {
            fill(&r, i);
        }
        // Three laps with `backlog` frames always waiting: each call reads one, then the
        // kernel fills one more.
        let calls = 3 * n;
        for c in 0..calls {
            assert!(
                matches!(r.consume(|s| matches!(s, Slot::Bad)), Some(true)),
                "call {c}"
            );
            fill(&r, c + backlog);
        }
        // Past the head: slots 0.. up to `ahead` - 1 past the last frame read, in order,
        // each once a lap. From the kernel's next slot (`backlog` past the head): the same,
        // shifted by the backlog the consumer saw.
        let want = |from: u32, upto: u32| (from..upto).map(|i| i % n).collect::<Vec<_>>();
        assert_eq!(r.asked.0, want(0, calls - 1 + ahead));
        assert_eq!(r.asked.1, want(backlog, calls - 1 + backlog + ahead));

        // The reader catches up (nothing waits): the kernel's next slot is the head, and
        // nothing already asked for is asked again while nothing moves.
        for _ in 0..backlog {
            r.consume(|_| ()).unwrap();
        }
        assert!(r.consume(|_| ()).is_none());
        assert_eq!(r.kdist, 0);
        assert_eq!(r.asked.0.last(), Some(&((calls + backlog - 1 + ahead) % n)));
        let before = (r.asked.0.len(), r.asked.1.len());
        assert!(r.consume(|_| ()).is_none());
        assert_eq!((r.asked.0.len(), r.asked.1.len()), before);
    }

    #[test]
    fn prefetch_off_asks_for_nothing_and_never_more_than_the_ring() {
        let (mut r, fill) = fake_ring(16, 0);
        fill(&r, 0);
        r.consume(|_| ()).unwrap();
        assert!(r.consume(|_| ()).is_none());
        assert_eq!(r.asked, (vec![], vec![]));
        // Asked for more than the ring holds, it asks for one lap less a slot.
        let (mut r, _) = fake_ring(16, 1000);
        assert!(r.consume(|_| ()).is_none());
        assert_eq!(r.asked.0, (0..15).collect::<Vec<_>>());
    }

    #[test]
    fn validate_header() {
        let ok = HdrFields {
            len: 60,
            snaplen: 60,
            mac: 76,
            net: 90,
        };
        assert_eq!(validate(&ok, 2048), Some((76, 60)));
        // Truncated frame: snaplen < len is fine.
        let t = HdrFields {
            len: 9000,
            snaplen: 2048 - 76,
            ..ok
        };
        assert_eq!(validate(&t, 2048), Some((76, 2048 - 76)));
        // Exceeds the slot.
        assert_eq!(
            validate(
                &HdrFields {
                    snaplen: 2048 - 75,
                    len: 9000,
                    ..ok
                },
                2048
            ),
            None
        );
        // mac too low (vnet header would overlap the tpacket header).
        assert_eq!(
            validate(
                &HdrFields {
                    mac: (MIN_MAC - 1) as u16,
                    ..ok
                },
                2048
            ),
            None
        );
        // net before mac.
        assert_eq!(validate(&HdrFields { net: 70, ..ok }, 2048), None);
        // net beyond the slot.
        assert_eq!(validate(&HdrFields { net: 4000, ..ok }, 2048), None);
        // snaplen > len, snaplen 0.
        assert_eq!(validate(&HdrFields { snaplen: 61, ..ok }, 2048), None);
        assert_eq!(validate(&HdrFields { snaplen: 0, ..ok }, 2048), None);
        // Extreme values never overflow.
        let x = HdrFields {
            len: u32::MAX,
            snaplen: u32::MAX,
            mac: u16::MAX,
            net: u16::MAX,
        };
        assert_eq!(validate(&x, u32::MAX), None);
    }
}
