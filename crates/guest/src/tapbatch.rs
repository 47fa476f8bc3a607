//! The guest kernel's receive batch into the TAP: all packets of one pass over the RX ring in
//! ONE system call (io_uring, one `writev` per packet, in ring order).
//!
//! Why: Linux netfront's NAPI poll hands its whole batch to the stack in softirq context, and
//! the application it wakes runs only after the batch. With one `writev` system call per
//! packet, the return to user space after each write is a point where the woken receiver
//! preempts netfront: measured in a 4 s `xen` stream, netfront was preempted 245,695 times for
//! 914,290 packets and the receiver read ~3.7 packets per wake-up. One `io_uring_enter` for
//! the batch has no such point between the packets.
//!
//! Order: io_uring starts the entries in submission order, and each TAP write runs to its end
//! right there (TUN marks its files `FMODE_NOWAIT`, and with its default unlimited send buffer a
//! write never answers EAGAIN, so nothing is handed to a kernel worker): the stack sees the
//! packets in ring order. Measured: no out-of-order segment at the receiver (TcpExtTCPOFOQueue
//! 0) and no `iou-wrk` thread in a 4 s stream. Linking the entries (`IOSQE_IO_HARDLINK`) to
//! force the order was tried and undoes the gain: each next entry then runs from task work in
//! the wait, where the receiver preempts again (netfront: 222,860 preemptions, as without
//! batching).
//!
//! A batch of one packet is a plain `writev`. If the ring cannot be set up, or the kernel
//! refuses it, every batch falls back to one `writev` per packet.

use std::borrow::Borrow;
use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, RawFd};

use io_uring::{opcode, types, IoUring};
use pvnet_testbed::Tap;
use pvnet_wire::vnet::VNET_HDR_LEN;

use crate::netfront::RxPacket;

/// Packets per `io_uring_enter`: the RX ring's size, so one pass is one call.
pub const BATCH: u32 = 256;

/// Writes batches of packets into a TAP, which it borrows (`&Tap`, netfront) or owns (`Tap`,
/// the daemon's relay).
pub struct TapBatch<T: Borrow<Tap>> {
    tap: T,
    /// `tap`'s descriptor, for the ring's entries.
    fd: RawFd,
    ring: Option<IoUring>,
    hdrs: Vec<[u8; VNET_HDR_LEN]>,
    iovs: Vec<libc::iovec>,
    /// Batches written in one system call, and packets in them (for `stat`).
    pub batches: u64,
    pub batched_packets: u64,
    /// Why the ring is not used, if it is not.
    pub fallback: Option<String>,
}

impl<T: Borrow<Tap>> TapBatch<T> {
    /// A batch writer for `tap`.
    pub fn new(tap: T) -> TapBatch<T> {
        let (ring, fallback) = match IoUring::new(BATCH) {
            Ok(r) => (Some(r), None),
            Err(e) => (None, Some(format!("io_uring_setup: {e}"))),
        };
        TapBatch {
            fd: tap.borrow().fd().as_raw_fd(),
            tap,
            ring,
            hdrs: Vec::with_capacity(BATCH as usize),
            iovs: Vec::with_capacity(BATCH as usize * 4),
            batches: 0,
            batched_packets: 0,
            fallback,
        }
    }

    /// Writes every packet (virtio header, then its pieces) into the TAP in order; `ok[i]`
    /// says whether packet `i` went in whole.
    pub fn write(&mut self, pkts: &[RxPacket<'_>], ok: &mut [bool]) {
        for (start, chunk) in (0..pkts.len())
            .step_by(BATCH as usize)
            .map(|s| (s, &pkts[s..pkts.len().min(s + BATCH as usize)]))
        {
            let ok = &mut ok[start..start + chunk.len()];
            if chunk.len() == 1 || self.ring.is_none() {
                for (p, ok) in chunk.iter().zip(ok.iter_mut()) {
                    *ok = self.write_one(p);
                }
                continue;
            }
            if let Err(e) = self.write_ring(chunk, ok) {
                // The kernel refused the ring: from now on, one writev per packet. Packets
                // whose result never came are retried that way.
                self.fallback = Some(format!("io_uring_enter: {e}"));
                self.abandon_ring();
                for (p, ok) in chunk.iter().zip(ok.iter_mut()) {
                    if !*ok {
                        *ok = self.write_one(p);
                    }
                }
            }
        }
    }

    /// The TAP written into.
    pub fn tap(&self) -> &Tap {
        self.tap.borrow()
    }

    fn write_one(&self, p: &RxPacket<'_>) -> bool {
        let h = p.hdr.to_bytes();
        let want = h.len() + p.pieces.iter().map(|s| s.len()).sum::<usize>();
        // A netfront packet has at most 18 pieces and fits the iovec on the stack; an
        // aggregate the relay passes as a chain (a head and up to 45 segments) takes a Vec.
        let mut a: [IoSlice<'_>; 24] = [IoSlice::new(&h); 24];
        let mut v: Vec<IoSlice<'_>>;
        let iov: &mut [IoSlice<'_>] = if p.pieces.len() < a.len() {
            &mut a[..p.pieces.len() + 1]
        } else {
            v = vec![IoSlice::new(&h); p.pieces.len() + 1];
            &mut v
        };
        for (d, s) in iov[1..].iter_mut().zip(p.pieces) {
            *d = IoSlice::new(s);
        }
        self.tap().writev(iov).is_ok_and(|w| w == want)
    }

    /// One `io_uring_enter` for the chunk; fills `ok`. Err: the ring failed (nothing is in
    /// flight any more when it returns).
    fn write_ring(&mut self, chunk: &[RxPacket<'_>], ok: &mut [bool]) -> io::Result<()> {
        // Headers and iovecs first, all of them: no push after a pointer into them is taken.
        self.hdrs.clear();
        self.iovs.clear();
        self.hdrs.extend(chunk.iter().map(|p| p.hdr.to_bytes()));
        let total: usize = chunk.iter().map(|p| p.pieces.len() + 1).sum();
        self.iovs.reserve(total);
        let mut spans = Vec::with_capacity(chunk.len());
        for (p, h) in chunk.iter().zip(&self.hdrs) {
            spans.push((self.iovs.len(), p.pieces.len() + 1));
            self.iovs.push(libc::iovec {
                iov_base: h.as_ptr() as *mut libc::c_void,
                iov_len: h.len(),
            });
            self.iovs.extend(p.pieces.iter().map(|s| libc::iovec {
                iov_base: s.as_ptr() as *mut libc::c_void,
                iov_len: s.len(),
            }));
        }
        let ring = self.ring.as_mut().expect("checked by the caller");
        {
            let mut sq = ring.submission();
            for (i, &(first, count)) in spans.iter().enumerate() {
                let e = opcode::Writev::new(
                    types::Fd(self.fd),
                    self.iovs[first..].as_ptr(),
                    count as u32,
                )
                .offset(u64::MAX) // the file's position: a TAP has none
                .build()
                .user_data(i as u64);
                // SAFETY: the iovecs, the headers they point at and the packets' pieces (the
                // caller's borrows) stay alive and unchanged until every entry of this chunk
                // has completed: the loop below waits for all of them before returning, and on
                // a ring failure abandon_ring leaks these buffers rather than reuse them.
                unsafe { sq.push(&e) }.expect("the ring has room for one chunk");
            }
        }
        let mut done = 0usize;
        while done < spans.len() {
            match ring.submit_and_wait(spans.len() - done) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
                Err(e) => return Err(e),
            }
            for cqe in ring.completion() {
                let i = cqe.user_data() as usize;
                if let (Some(o), Some(&(first, count))) = (ok.get_mut(i), spans.get(i)) {
                    let want: usize = self.iovs[first..first + count]
                        .iter()
                        .map(|v| v.iov_len)
                        .sum();
                    *o = usize::try_from(cqe.result()).is_ok_and(|n| n == want);
                }
                done += 1;
            }
        }
        self.batches += 1;
        self.batched_packets += chunk.len() as u64;
        Ok(())
    }

    /// After a ring failure: entries may still be in flight, so the buffers they point at are
    /// leaked rather than reused, and the ring is closed (the kernel finishes or cancels them;
    /// the packets' pieces are guest memory, mapped for the life of the process).
    fn abandon_ring(&mut self) {
        std::mem::forget(std::mem::take(&mut self.hdrs));
        std::mem::forget(std::mem::take(&mut self.iovs));
        self.ring = None;
    }
}
