//! The memory-mapped TPACKET_V3 receive ring: blocks of frames packed one after the other.
//!
//! The kernel fills one block at a time, in ring order, and hands it to user space whole
//! (`block_status` gets `TP_STATUS_USER`) when the next frame does not fit or when the block's
//! retire timer fires (`tp_retire_blk_tov`, milliseconds). User space gives the whole block
//! back by writing `TP_STATUS_KERNEL`; until then the kernel stops at it ("freezes" the queue,
//! counted by `tp_freeze_q_cnt`) and drops every frame that arrives (Linux,
//! `net/packet/af_packet.c`: `prb_dispatch_next_block`, `prb_curr_blk_in_use`). With
//! `PACKET_VNET_HDR` the `virtio_net_hdr` sits right before each frame's data, at
//! `tp_mac - 10`, as in TPACKET_V2 (`tpacket_rcv` writes it at `h.raw + macoff - sizeof(vnet
//! hdr)` for both versions).
//!
//! Leases. A frame taken as a lease keeps its bytes where they are, so the whole block it lies
//! in stays out of the kernel's hands. Each block has a hold count: 1 for the consumer while it
//! walks the block, plus 1 for every lease on a frame in it. Whoever lets go of the last hold
//! (the consumer leaving the block, or the last lease dropped, on any thread) writes
//! `TP_STATUS_KERNEL`. While the block is held its status keeps `TP_STATUS_USER` (the kernel's
//! test of a block in use) and gains [`HELD`], so that the consumer, come round the ring, does
//! not take it a second time. The kernel only ever opens the next block in ring order, so the
//! oldest held block is the one that can stall the ring: [`Ring3::oldest_hold_age`] tells how
//! near the kernel is to it, and the port caps how many blocks leases may hold (half the ring).
//!
//! Latency. A block that is not full reaches user space only when its retire timer fires
//! (milliseconds, 1 at least): a lone frame, such as a request of a request/response exchange,
//! waits that long (docs/port-gro.md, "TPACKET_V3 in the data path").
//!
//! Untrusted layout. Every block is walked once when the consumer opens it: `num_pkts`,
//! `offset_to_first_pkt`, and each frame's `tp_next_offset`, `tp_mac`, `tp_net`,
//! `tp_snaplen` and `tp_len` are checked against the block's bounds ([`walk_block`]) and the
//! frames' places copied out; one bad field and the whole block is skipped (given back and
//! counted in [`Ring3::bad_blocks`]), never walked further.

use std::cell::Cell;
use std::io;
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::buf::Mapping;
use crate::ring::{stamp_ns, Lease, Slot};

use pvnet_wire::vnet::{VirtioNetHdr, VNET_HDR_LEN};

/// Marks a held block's status word: `TP_STATUS_USER` stays set (the kernel leaves the block
/// alone), this bit tells the consumer it is not a fresh one.
pub(crate) const HELD: u32 = 1 << 31;
/// Offset of `block_status` in `struct tpacket_block_desc` (after `version`, `offset_to_priv`).
const STATUS_OFF: usize = 8;
/// Offsets of `num_pkts` and `offset_to_first_pkt` in the block descriptor.
const NUM_PKTS_OFF: usize = 12;
const FIRST_OFF: usize = 16;
/// The block descriptor, aligned to 8: the kernel's `BLK_HDR_LEN` (no private area asked for).
pub(crate) const BLK_HDR_LEN: usize =
    std::mem::size_of::<libc::tpacket_block_desc>().next_multiple_of(8);
/// Size of `struct tpacket3_hdr`.
const TP3_HDR_SIZE: usize = std::mem::size_of::<libc::tpacket3_hdr>();
/// The lowest `tp_mac` a valid frame can have: header, `sockaddr_ll`, vnet header.
pub(crate) const MIN_MAC3: usize = libc::TPACKET3_HDRLEN + VNET_HDR_LEN;
const _: () = assert!(BLK_HDR_LEN == 48 && TP3_HDR_SIZE == 48 && MIN_MAC3 == 78);

/// Offsets of the `tpacket3_hdr` fields read.
const NEXT_OFF: usize = 0;
const SEC_OFF: usize = 4;
const NSEC_OFF: usize = 8;
const SNAPLEN_OFF: usize = 12;
const LEN_OFF: usize = 16;
const PSTATUS_OFF: usize = 20;
const MAC_OFF: usize = 24;
const NET_OFF: usize = 26;

/// Block geometry as passed to `PACKET_RX_RING` (`tpacket_req3`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockGeometry {
    /// Bytes per block: a multiple of the page size (the kernel allocates each block as one
    /// run of pages).
    pub block_size: u32,
    /// Blocks in the ring.
    pub block_nr: u32,
    /// Retire timeout in milliseconds: a block holding frames goes to user space this long
    /// after it was opened even when not full (0 lets the kernel choose from the link speed).
    pub retire_ms: u32,
}

/// The frame size given to the kernel (V3 uses it only to check `tp_frame_nr`).
const V3_FRAME_SIZE: u32 = 2048;

impl BlockGeometry {
    /// Checks the geometry: whole pages, room for a frame of `max_frame` bytes after the
    /// headers, a map of at most 4 GiB.
    pub fn check(&self, page_size: u32, max_frame: u32) -> Result<(), String> {
        let bs = self.block_size;
        if bs == 0 || page_size == 0 || !bs.is_multiple_of(page_size) {
            return Err(format!("block size {bs} is not whole pages of {page_size}"));
        }
        if (bs as usize) < BLK_HDR_LEN + MIN_MAC3 + 18 + max_frame as usize {
            return Err(format!(
                "block size {bs} cannot hold a {max_frame}-byte frame after the headers"
            ));
        }
        if self.block_nr == 0 {
            return Err("block_nr is 0".into());
        }
        if u64::from(bs) * u64::from(self.block_nr) > u64::from(u32::MAX) {
            return Err("ring too large".into());
        }
        Ok(())
    }

    pub fn map_len(&self) -> usize {
        self.block_size as usize * self.block_nr as usize
    }

    /// The longest frame the kernel puts in a block whole: what follows the block descriptor
    /// (`max_frame_len`), less the frame's own headers.
    pub fn max_frame(&self) -> u32 {
        (self.block_size as usize).saturating_sub(BLK_HDR_LEN + MIN_MAC3 + 2) as u32
    }

    pub fn as_req(&self) -> libc::tpacket_req3 {
        libc::tpacket_req3 {
            tp_block_size: self.block_size,
            tp_block_nr: self.block_nr,
            tp_frame_size: V3_FRAME_SIZE,
            tp_frame_nr: self.block_size / V3_FRAME_SIZE * self.block_nr,
            tp_retire_blk_tov: self.retire_ms,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        }
    }
}

/// One frame of a block, its place and header fields copied out and checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pkt {
    /// Offset of the frame's first byte in the block.
    pub data: u32,
    pub snaplen: u32,
    pub len: u32,
    pub status: u32,
    /// When the kernel received it (`tp_sec`, `tp_nsec`: `CLOCK_REALTIME`, ns).
    pub stamp_ns: u64,
    pub vnet: [u8; VNET_HDR_LEN],
}

/// Why a block was skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BadBlock {
    /// `offset_to_first_pkt` before the end of the descriptor or past the block.
    FirstOffset,
    /// More frames than the block could hold.
    NumPkts,
    /// Frame `i`'s header does not fit in the block.
    Header(u32),
    /// Frame `i`'s `tp_mac`/`tp_net`/`tp_snaplen`/`tp_len` are inconsistent or reach past
    /// the block.
    Frame(u32),
    /// Frame `i`'s `tp_next_offset` does not lead past its own data.
    NextOffset(u32),
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes(b[at..at + 2].try_into().expect("2 bytes"))
}

/// Walks a block handed to user space: checks every offset and length against the block's
/// bounds and copies each frame's place and header fields into `out` (cleared first). Every
/// index is bounds-checked, so a hostile block can only make this return an error. The walk
/// takes at most `num_pkts` steps, each strictly forward (a frame's next offset must lead
/// past its own data), so no offset can loop.
pub(crate) fn walk_block(block: &[u8], out: &mut Vec<Pkt>) -> Result<(), BadBlock> {
    out.clear();
    let size = block.len();
    if size < BLK_HDR_LEN {
        return Err(BadBlock::FirstOffset);
    }
    let n = u32_at(block, NUM_PKTS_OFF);
    let first = u32_at(block, FIRST_OFF) as usize;
    if first < BLK_HDR_LEN || first > size {
        return Err(BadBlock::FirstOffset);
    }
    // Each frame takes at least its headers and one byte.
    if n as usize > (size - first) / (MIN_MAC3 + 1) {
        return Err(BadBlock::NumPkts);
    }
    let mut at = first;
    for i in 0..n {
        if at.checked_add(TP3_HDR_SIZE).is_none_or(|e| e > size) {
            return Err(BadBlock::Header(i));
        }
        let h = &block[at..at + TP3_HDR_SIZE];
        let mac = usize::from(u16_at(h, MAC_OFF));
        let net = usize::from(u16_at(h, NET_OFF));
        let snaplen = u32_at(h, SNAPLEN_OFF);
        let len = u32_at(h, LEN_OFF);
        let end = mac + snaplen as usize;
        if mac < MIN_MAC3 || net < mac || net > end || snaplen == 0 || snaplen > len {
            return Err(BadBlock::Frame(i));
        }
        if at + end > size {
            return Err(BadBlock::Frame(i));
        }
        let data = at + mac;
        out.push(Pkt {
            data: data as u32,
            snaplen,
            len,
            status: u32_at(h, PSTATUS_OFF),
            stamp_ns: stamp_ns(u32_at(h, SEC_OFF), u32_at(h, NSEC_OFF)),
            vnet: block[data - VNET_HDR_LEN..data]
                .try_into()
                .expect("VNET_HDR_LEN bytes"),
        });
        if i + 1 < n {
            let next = u32_at(h, NEXT_OFF) as usize;
            if next < end {
                return Err(BadBlock::NextOffset(i));
            }
            at += next;
        }
    }
    Ok(())
}

/// The hold counts of the blocks, shared by the ring and every lease on it.
pub(crate) struct BlockHolds {
    holds: Box<[AtomicU32]>,
    /// Blocks the consumer has left that leases still hold.
    held: AtomicU32,
    /// Frames leased and not yet handed back.
    leases: AtomicU32,
}

impl BlockHolds {
    pub(crate) fn new(blocks: u32) -> BlockHolds {
        BlockHolds {
            holds: (0..blocks).map(|_| AtomicU32::new(0)).collect(),
            held: AtomicU32::new(0),
            leases: AtomicU32::new(0),
        }
    }

    /// The consumer opens block `b` (given back, so no hold is left on it).
    fn open(&self, b: u32) {
        self.holds[b as usize].store(1, Ordering::Relaxed);
    }

    /// A lease on a frame of block `b`, which the consumer still holds.
    pub(crate) fn add_lease(&self, b: u32) {
        self.holds[b as usize].fetch_add(1, Ordering::Relaxed);
        self.leases.fetch_add(1, Ordering::Relaxed);
    }

    /// The consumer leaves block `b`. True when that was the last hold: give the block back.
    fn leave(&self, b: u32) -> bool {
        // Counted before the hold goes, so a lease that lets go last never sees it missing.
        self.held.fetch_add(1, Ordering::Relaxed);
        if self.holds[b as usize].fetch_sub(1, Ordering::AcqRel) == 1 {
            self.held.fetch_sub(1, Ordering::Relaxed);
            true
        } else {
            false
        }
    }

    /// A lease on block `b` lets go. True when that was the last hold: give the block back.
    pub(crate) fn drop_lease(&self, b: u32) -> bool {
        self.leases.fetch_sub(1, Ordering::Relaxed);
        if self.holds[b as usize].fetch_sub(1, Ordering::AcqRel) == 1 {
            self.held.fetch_sub(1, Ordering::Relaxed);
            true
        } else {
            false
        }
    }

    /// Blocks the consumer has left that leases still hold.
    pub(crate) fn held(&self) -> u32 {
        self.held.load(Ordering::Relaxed)
    }

    pub(crate) fn leases(&self) -> u32 {
        self.leases.load(Ordering::Relaxed)
    }
}

/// The mapped V3 ring, the block being walked and the frames left in it.
pub(crate) struct Ring3 {
    map: Arc<Mapping>,
    geo: BlockGeometry,
    holds: Arc<BlockHolds>,
    /// The block being walked (`open`) or the next to look at.
    head: u32,
    open: bool,
    pkts: Vec<Pkt>,
    next: usize,
    /// The oldest block that may still be held, and how many blocks the head is past it.
    tail: u32,
    behind: u32,
    /// Blocks walked, and of those skipped as malformed.
    pub blocks: u64,
    pub bad_blocks: u64,
    /// Times the consumer came round to a block that leases still held from its last lap:
    /// the kernel, which filled the block before it, has stopped there too.
    pub hold_stops: u64,
    /// The held block the consumer last stopped at, so that each stop is counted once.
    stopped_at: Option<u32>,
    /// Unused by V3 leases (the hold count does the Release guard's work); a Lease wants one.
    not_taken: Cell<bool>,
}

impl Ring3 {
    /// Maps the ring of `fd` (on which `PACKET_RX_RING` was set with `geo`).
    pub fn map(fd: BorrowedFd<'_>, geo: BlockGeometry) -> io::Result<Ring3> {
        let map = Mapping::of_socket_ring(fd, geo.map_len())?;
        Ok(Ring3::over(map, geo))
    }

    /// A ring over `map` laid out as `geo` (the kernel's, or a test's hand-built blocks).
    pub(crate) fn over(map: Arc<Mapping>, geo: BlockGeometry) -> Ring3 {
        Ring3 {
            map,
            geo,
            holds: Arc::new(BlockHolds::new(geo.block_nr)),
            head: 0,
            open: false,
            pkts: Vec::new(),
            next: 0,
            tail: 0,
            behind: 0,
            blocks: 0,
            bad_blocks: 0,
            hold_stops: 0,
            stopped_at: None,
            not_taken: Cell::new(false),
        }
    }

    pub fn geometry(&self) -> BlockGeometry {
        self.geo
    }

    fn block_ptr(&self, b: u32) -> *mut u8 {
        // SAFETY: b < block_nr, so the offset lies inside the mapping.
        unsafe {
            self.map
                .base()
                .add(b as usize * self.geo.block_size as usize)
        }
    }

    fn status_ptr(&self, b: u32) -> NonNull<AtomicU32> {
        // SAFETY: the status word lies 8 bytes into the block, inside the mapping.
        let p = unsafe { self.block_ptr(b).add(STATUS_OFF) };
        NonNull::new(p.cast::<AtomicU32>()).expect("inside a mapping")
    }

    fn status(&self, b: u32) -> &AtomicU32 {
        // SAFETY: the block status word is 4-byte aligned (blocks are page aligned) and lies
        // in the live mapping; it is only ever accessed atomically.
        unsafe { self.status_ptr(b).as_ref() }
    }

    fn is_held(&self, b: u32) -> bool {
        self.status(b % self.geo.block_nr).load(Ordering::Relaxed) & HELD != 0
    }

    /// Frames leased out and not yet handed back.
    pub fn leases(&self) -> u32 {
        self.holds.leases()
    }

    /// Blocks the consumer has left that leases still hold.
    pub fn blocks_held(&self) -> u32 {
        self.holds.held()
    }

    /// Whether a frame waits: in the block being walked, or a fresh block at the head.
    pub fn head_ready(&self) -> bool {
        if self.open && self.next < self.pkts.len() {
            return true;
        }
        let s = self.status(self.head).load(Ordering::Acquire);
        s & libc::TP_STATUS_USER != 0 && s & HELD == 0
    }

    /// Whether a held block stands in the kernel's way: the block before the head (the
    /// socket reports itself readable while the block before the kernel's is not its own) or
    /// the head block itself (the kernel has come round to it and stopped).
    pub fn hold_in_the_way(&self) -> bool {
        let n = self.geo.block_nr;
        self.blocks_held() > 0 && (self.is_held(self.head + n - 1) || self.is_held(self.head))
    }

    /// How many blocks ago the oldest block still held was left (0 when none is). The
    /// kernel fills blocks in order and comes round to it after `block_nr` minus this many.
    pub fn oldest_hold_age(&mut self) -> u32 {
        let n = self.geo.block_nr;
        if self.blocks_held() == 0 {
            (self.tail, self.behind) = (self.head, 0);
            return 0;
        }
        while self.behind > 0 && !self.is_held(self.tail) {
            self.tail = (self.tail + 1) % n;
            self.behind -= 1;
        }
        self.behind
    }

    /// Gives block `b` back to the kernel. Release: our reads of it happen before the
    /// kernel writes it again.
    fn give_back(&self, b: u32) {
        self.status(b)
            .store(libc::TP_STATUS_KERNEL, Ordering::Release);
    }

    /// The consumer is done with the head block: drops its hold and moves on.
    fn close(&mut self) {
        if self.holds.leave(self.head) {
            self.give_back(self.head);
        }
        self.open = false;
        self.pkts.clear();
        self.next = 0;
        self.head = (self.head + 1) % self.geo.block_nr;
        self.behind = self.behind.saturating_add(1);
    }

    /// Opens the head block if it is fresh: marks it held, walks it. False when it is not
    /// user space's (or still held from an earlier lap). A malformed block is given back,
    /// counted, and passed.
    fn open_head(&mut self) -> bool {
        let st = self.status(self.head);
        let s = st.load(Ordering::Acquire);
        if s & libc::TP_STATUS_USER == 0 {
            return false;
        }
        if s & HELD != 0 {
            if self.stopped_at != Some(self.head) {
                self.hold_stops += 1;
                self.stopped_at = Some(self.head);
            }
            return false;
        }
        st.store(s | HELD, Ordering::Relaxed);
        self.stopped_at = None;
        self.holds.open(self.head);
        self.blocks += 1;
        let mut pkts = std::mem::take(&mut self.pkts);
        // SAFETY: the block lies in the live mapping and is user space's (TP_STATUS_USER, so
        // the kernel does not write it until given back). No lease on it exists: it was given
        // back after its last one let go, and this lap's leases are made after the walk. The
        // slice ends with this statement.
        let walked = walk_block(
            unsafe {
                std::slice::from_raw_parts(self.block_ptr(self.head), self.geo.block_size as usize)
            },
            &mut pkts,
        );
        self.pkts = pkts;
        self.next = 0;
        self.open = true;
        if walked.is_err() {
            self.bad_blocks += 1;
            self.close();
        }
        true
    }

    /// Hands the next frame to `f` (as [`crate::ring::Ring::consume`] does for a slot); the
    /// block goes back to the kernel when the consumer has passed its last frame and no lease
    /// holds it. `None` when no frame waits. Passes at most a ring's worth of malformed or
    /// empty blocks per call. Should `f` panic after the block's last frame, the consumer's
    /// hold is dropped at the next call (the frame counts as handed over).
    pub fn consume<R>(&mut self, f: impl FnOnce(Slot<'_>) -> R) -> Option<R> {
        let mut passed = 0;
        while !self.open || self.next >= self.pkts.len() {
            if self.open {
                self.close();
            }
            if passed == self.geo.block_nr || !self.open_head() {
                return None;
            }
            passed += 1;
        }
        let b = self.head;
        let p = self.pkts[self.next];
        self.next += 1;
        let slot = match VirtioNetHdr::parse(&p.vnet) {
            Some(vnet) => Slot::Frame {
                status: p.status,
                len: p.len,
                stamp_ns: p.stamp_ns,
                vnet,
                data: Lease::in_block(
                    &self.map,
                    self.status_ptr(b),
                    // SAFETY: walk_block checked data + snaplen ≤ block_size: the frame lies
                    // inside this block, past its descriptor.
                    NonNull::new(unsafe { self.block_ptr(b).add(p.data as usize) })
                        .expect("in mapping"),
                    p.snaplen as usize,
                    (&self.holds, b),
                    &self.not_taken,
                ),
            },
            None => Slot::Bad,
        };
        let r = f(slot);
        if self.next >= self.pkts.len() {
            self.close();
        }
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block of `size` bytes with frames of the given lengths packed as the kernel packs
    /// them (mac 82 into each frame's header, next offset aligned to 8).
    fn build(size: usize, lens: &[usize]) -> Vec<u8> {
        let mut b = vec![0u8; size];
        b[NUM_PKTS_OFF..NUM_PKTS_OFF + 4].copy_from_slice(&(lens.len() as u32).to_ne_bytes());
        b[FIRST_OFF..FIRST_OFF + 4].copy_from_slice(&(BLK_HDR_LEN as u32).to_ne_bytes());
        let mut at = BLK_HDR_LEN;
        let mac = 82usize;
        for (i, &len) in lens.iter().enumerate() {
            let next = (mac + len).next_multiple_of(8);
            let last = i + 1 == lens.len();
            put32(&mut b, at + NEXT_OFF, if last { 0 } else { next as u32 });
            put32(&mut b, at + SNAPLEN_OFF, len as u32);
            put32(&mut b, at + LEN_OFF, len as u32);
            put32(&mut b, at + PSTATUS_OFF, libc::TP_STATUS_USER);
            b[at + MAC_OFF..at + MAC_OFF + 2].copy_from_slice(&(mac as u16).to_ne_bytes());
            b[at + NET_OFF..at + NET_OFF + 2].copy_from_slice(&(mac as u16 + 14).to_ne_bytes());
            // vnet header: flags 0, gso none; then the frame, byte i+1 throughout.
            b[at + mac - VNET_HDR_LEN..at + mac].fill(0);
            b[at + mac..at + mac + len].fill(i as u8 + 1);
            at += next;
        }
        b
    }

    fn put32(b: &mut [u8], at: usize, v: u32) {
        b[at..at + 4].copy_from_slice(&v.to_ne_bytes());
    }

    /// Offset of frame `i`'s header in a block from `build`.
    fn hdr_at(b: &[u8], i: usize) -> usize {
        let mut at = u32_at(b, FIRST_OFF) as usize;
        for _ in 0..i {
            at += u32_at(b, at + NEXT_OFF) as usize;
        }
        at
    }

    #[test]
    fn walks_a_well_formed_block() {
        let b = build(8192, &[60, 1514, 3000]);
        let mut out = Vec::new();
        walk_block(&b, &mut out).unwrap();
        assert_eq!(out.len(), 3);
        for (i, (p, len)) in out.iter().zip([60, 1514, 3000]).enumerate() {
            assert_eq!((p.snaplen, p.len), (len, len));
            let d = p.data as usize;
            assert!(b[d..d + len as usize].iter().all(|&x| x == i as u8 + 1));
            assert_eq!(b[d - 1], 0, "vnet header before the data");
        }
        // An empty block walks to nothing.
        let e = build(4096, &[]);
        walk_block(&e, &mut out).unwrap();
        assert!(out.is_empty());
    }

    #[test]
    fn a_frame_filling_the_block_to_its_last_byte_is_taken_whole() {
        let size = 4096;
        let len = size - BLK_HDR_LEN - 82;
        let b = build(size, &[len]);
        let mut out = Vec::new();
        walk_block(&b, &mut out).unwrap();
        assert_eq!(out[0].data as usize + out[0].snaplen as usize, size);
        // One byte more reaches past the block.
        let mut b = b;
        put32(&mut b, BLK_HDR_LEN + SNAPLEN_OFF, len as u32 + 1);
        put32(&mut b, BLK_HDR_LEN + LEN_OFF, len as u32 + 1);
        assert_eq!(walk_block(&b, &mut out), Err(BadBlock::Frame(0)));
    }

    #[test]
    fn hostile_blocks_are_refused() {
        let good = build(8192, &[100, 200, 300]);
        let mut out = Vec::new();
        let check = |f: &dyn Fn(&mut Vec<u8>), want: BadBlock| {
            let mut b = good.clone();
            f(&mut b);
            let mut out = Vec::new();
            assert_eq!(walk_block(&b, &mut out), Err(want));
        };
        // offset_to_first_pkt inside the descriptor, past the block, at u32::MAX.
        check(&|b| put32(b, FIRST_OFF, 8), BadBlock::FirstOffset);
        check(&|b| put32(b, FIRST_OFF, 8193), BadBlock::FirstOffset);
        check(&|b| put32(b, FIRST_OFF, u32::MAX), BadBlock::FirstOffset);
        // First frame's header reaching past the block.
        check(&|b| put32(b, FIRST_OFF, 8192 - 40), BadBlock::NumPkts);
        // num_pkts beyond what the block could hold; one more than are there.
        check(&|b| put32(b, NUM_PKTS_OFF, u32::MAX), BadBlock::NumPkts);
        check(&|b| put32(b, NUM_PKTS_OFF, 4), BadBlock::NextOffset(2));
        // next_offset past the end of the block, zero (a loop onto itself), short of the
        // frame's own data (overlapping frames), and at u32::MAX.
        let h1 = hdr_at(&good, 1);
        check(&|b| put32(b, h1 + NEXT_OFF, 8000), BadBlock::Header(2));
        check(&|b| put32(b, h1 + NEXT_OFF, 0), BadBlock::NextOffset(1));
        check(
            &|b| put32(b, h1 + NEXT_OFF, 82 + 199),
            BadBlock::NextOffset(1),
        );
        check(&|b| put32(b, h1 + NEXT_OFF, u32::MAX), BadBlock::Header(2));
        // snaplen beyond the block, beyond tp_len, zero.
        let h2 = hdr_at(&good, 2);
        check(&|b| put32(b, h2 + SNAPLEN_OFF, 8000), BadBlock::Frame(2));
        check(
            &|b| {
                put32(b, h2 + SNAPLEN_OFF, u32::MAX);
                put32(b, h2 + LEN_OFF, u32::MAX);
            },
            BadBlock::Frame(2),
        );
        check(&|b| put32(b, h2 + SNAPLEN_OFF, 301), BadBlock::Frame(2));
        check(&|b| put32(b, h2 + SNAPLEN_OFF, 0), BadBlock::Frame(2));
        // tp_mac over the frame header (the vnet header would overlap it), past the block;
        // tp_net before tp_mac.
        let h0 = hdr_at(&good, 0);
        let mac = |b: &mut Vec<u8>, at: usize, v: u16| {
            b[at + MAC_OFF..at + MAC_OFF + 2].copy_from_slice(&v.to_ne_bytes())
        };
        check(&|b| mac(b, h0, MIN_MAC3 as u16 - 1), BadBlock::Frame(0));
        check(&|b| mac(b, h2, u16::MAX), BadBlock::Frame(2));
        check(
            &|b| b[h0 + NET_OFF..h0 + NET_OFF + 2].copy_from_slice(&10u16.to_ne_bytes()),
            BadBlock::Frame(0),
        );
        // A block shorter than its descriptor.
        assert_eq!(
            walk_block(&good[..40], &mut out),
            Err(BadBlock::FirstOffset)
        );
    }

    #[test]
    fn every_single_field_corruption_is_refused_or_stays_in_bounds() {
        // Flip each byte of the headers of a three-frame block to every value: the walk
        // either refuses the block or yields frames inside it.
        let good = build(4096, &[100, 200, 300]);
        let hdrs: Vec<usize> = (0..3).map(|i| hdr_at(&good, i)).collect();
        let mut spots: Vec<usize> = (NUM_PKTS_OFF..FIRST_OFF + 4).collect();
        for h in hdrs {
            spots.extend(h..h + 28);
        }
        let mut out = Vec::new();
        for at in spots {
            for v in [0u8, 1, 0x7f, 0x80, 0xff] {
                let mut b = good.clone();
                b[at] = v;
                if walk_block(&b, &mut out).is_ok() {
                    for p in &out {
                        assert!(p.data as usize >= BLK_HDR_LEN + MIN_MAC3, "{at} {v}");
                        assert!((p.data + p.snaplen) as usize <= b.len(), "{at} {v}");
                    }
                }
            }
        }
    }

    /// A ring over hand-built blocks in an anonymous mapping.
    fn ring_of(blocks: &[Vec<u8>], block_size: usize) -> Ring3 {
        let map = crate::buf::anon_mapping(block_size * blocks.len());
        for (i, b) in blocks.iter().enumerate() {
            // SAFETY: block i lies inside the fresh mapping; nothing else refers to it.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    b.as_ptr(),
                    map.base().add(i * block_size),
                    block_size,
                )
            };
        }
        Ring3::over(
            map,
            BlockGeometry {
                block_size: block_size as u32,
                block_nr: blocks.len() as u32,
                retire_ms: 1,
            },
        )
    }

    fn hand_to_user(b: &mut [u8]) {
        put32(b, STATUS_OFF, libc::TP_STATUS_USER);
    }

    fn status_of(r: &Ring3, b: u32) -> u32 {
        r.status(b).load(Ordering::Relaxed)
    }

    #[test]
    fn a_block_goes_back_only_when_every_frame_in_it_is_released() {
        let mut b0 = build(4096, &[100, 200, 300]);
        let mut b1 = build(4096, &[400]);
        hand_to_user(&mut b0);
        hand_to_user(&mut b1);
        let b2 = build(4096, &[]); // still the kernel's
        let mut r = ring_of(&[b0, b1, b2], 4096);
        assert!(r.head_ready());
        // Frame 0 leased, frame 1 read and let go, frame 2 leased.
        let l0 = r.consume(|s| match s {
            Slot::Frame { data, .. } => data.take(),
            Slot::Bad => panic!("bad"),
        });
        let l0 = l0.unwrap();
        assert!(l0.iter().all(|&x| x == 1) && l0.len() == 100);
        r.consume(|s| assert!(matches!(s, Slot::Frame { .. })))
            .unwrap();
        let l2 = r
            .consume(|s| match s {
                Slot::Frame { data, .. } => data.take(),
                Slot::Bad => panic!("bad"),
            })
            .unwrap();
        assert!(l2.iter().all(|&x| x == 3) && l2.len() == 300);
        // The consumer has left block 0; two leases hold it.
        assert_eq!((r.leases(), r.blocks_held()), (2, 1));
        assert_eq!(status_of(&r, 0), libc::TP_STATUS_USER | HELD);
        assert!(r.hold_in_the_way(), "the block before the head is held");
        // The consumer comes round to block 1, reads it whole: it goes back at once.
        r.consume(|s| assert!(matches!(s, Slot::Frame { .. })))
            .unwrap();
        assert_eq!(status_of(&r, 1), libc::TP_STATUS_KERNEL);
        assert!(r.consume(|_| ()).is_none(), "block 2 is the kernel's");
        // Block 0 is 2 blocks behind the head.
        assert_eq!(r.oldest_hold_age(), 2);
        drop(l2);
        assert_eq!(
            status_of(&r, 0),
            libc::TP_STATUS_USER | HELD,
            "one lease left"
        );
        assert_eq!((r.leases(), r.blocks_held()), (1, 1));
        drop(l0);
        assert_eq!(status_of(&r, 0), libc::TP_STATUS_KERNEL);
        assert_eq!((r.leases(), r.blocks_held()), (0, 0));
        assert_eq!(r.oldest_hold_age(), 0);
        assert!(!r.hold_in_the_way());
    }

    #[test]
    fn a_held_block_is_not_taken_again_when_the_consumer_comes_round() {
        let mut b0 = build(4096, &[100]);
        hand_to_user(&mut b0);
        let mut r = ring_of(&[b0], 4096);
        let l = r
            .consume(|s| match s {
                Slot::Frame { data, .. } => data.take(),
                Slot::Bad => panic!("bad"),
            })
            .unwrap();
        // One block: the head is block 0 again, held by the lease.
        assert!(!r.head_ready());
        assert!(r.consume(|_| ()).is_none());
        assert!(r.hold_in_the_way());
        // The stop is counted once, however often the consumer looks again.
        assert!(r.consume(|_| ()).is_none());
        assert_eq!(r.hold_stops, 1);
        // Leases may move to another thread and let go there.
        std::thread::spawn(move || drop(l)).join().unwrap();
        assert_eq!(status_of(&r, 0), libc::TP_STATUS_KERNEL);
        assert_eq!(r.blocks, 1);
        // The kernel fills it again; the consumer walks it, and the next lap's stop at it
        // is a stop of its own.
        r.status(0).store(libc::TP_STATUS_USER, Ordering::Release);
        let take = |s: Slot<'_>| match s {
            Slot::Frame { data, .. } => data.take(),
            Slot::Bad => panic!("bad"),
        };
        let l = r.consume(take).unwrap();
        assert!(r.consume(|_| ()).is_none());
        assert_eq!((r.blocks, r.hold_stops), (2, 2));
        drop(l);
    }

    #[test]
    fn a_consumer_that_panics_on_a_blocks_last_frame_lets_go_at_the_next_call() {
        let mut b0 = build(4096, &[100]);
        hand_to_user(&mut b0);
        let b1 = build(4096, &[]);
        let mut r = ring_of(&[b0, b1], 4096);
        let p = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            r.consume(|_| panic!("consumer fails"))
        }));
        assert!(p.is_err());
        assert_eq!(status_of(&r, 0), libc::TP_STATUS_USER | HELD, "still held");
        assert!(r.consume(|_| ()).is_none(), "block 1 is the kernel's");
        assert_eq!(status_of(&r, 0), libc::TP_STATUS_KERNEL);
        assert_eq!((r.leases(), r.blocks_held()), (0, 0));
    }

    #[test]
    fn a_bad_block_is_counted_given_back_and_passed() {
        let mut b0 = build(4096, &[100, 200]);
        let h0 = hdr_at(&b0, 0);
        put32(&mut b0, h0 + NEXT_OFF, 0);
        hand_to_user(&mut b0);
        let mut b1 = build(4096, &[50]);
        hand_to_user(&mut b1);
        let mut r = ring_of(&[b0, b1], 4096);
        let got = r.consume(|s| match s {
            Slot::Frame { data, .. } => data.bytes().to_vec(),
            Slot::Bad => panic!("bad"),
        });
        assert_eq!(got.unwrap(), vec![1u8; 50]);
        assert_eq!((r.blocks, r.bad_blocks), (2, 1));
        assert_eq!(status_of(&r, 0), libc::TP_STATUS_KERNEL);
        assert_eq!(status_of(&r, 1), libc::TP_STATUS_KERNEL);
        // Nothing more: the next call passes no block twice.
        assert!(r.consume(|_| ()).is_none());
    }

    #[test]
    fn geometry() {
        let g = BlockGeometry {
            block_size: 1 << 20,
            block_nr: 64,
            retire_ms: 1,
        };
        g.check(4096, 65_456).unwrap();
        assert_eq!(g.map_len(), 64 << 20);
        assert_eq!(g.as_req().tp_frame_nr, 512 * 64);
        assert!(g.max_frame() > 65_536);
        assert!(BlockGeometry {
            block_size: 65536,
            ..g
        }
        .check(4096, 65_456)
        .is_err());
        assert!(BlockGeometry {
            block_size: 5000,
            ..g
        }
        .check(4096, 100)
        .is_err());
        assert!(BlockGeometry { block_nr: 0, ..g }.check(4096, 100).is_err());
    }
}
