//! Packet capture at a bridge port of the data path (what `pvnet capture vif<i>` reads).
//!
//! Contract:
//! - A capture is a bridge port and a sink: the data path's end of a connected `SOCK_SEQPACKET`
//!   socket pair ([`sink_pair`]) whose other end a reader holds. Every packet that crosses the
//!   port, either way, becomes one record in one datagram: a [`RecordHeader`], then the packet's
//!   bytes, linear (the kernel gathers a chain's pieces; an aggregate is one record, as the
//!   bridge hands it to netback), at most [`SNAPLEN`] of them.
//! - The data path never blocks on a sink: a record that does not fit the sink's buffer now is
//!   dropped and counted (`dropped`); the next record that gets through carries how many were
//!   dropped before it ([`RecordHeader::dropped_before`]), so the reader knows exactly.
//! - A reader that went away (any send error but "full" or "too large") ends the capture: it is
//!   removed and its sink closed at the next packet on its port (`ended`).
//! - With no capture the data path pays one branch per packet ([`Captures::active`]).
//!
//! Why a socket pair and not a pipe: a non-blocking write of more than `PIPE_BUF` (4 KiB) to a
//! pipe may be partial (pipe(7)), which would cut a record in two; a `SOCK_SEQPACKET` datagram
//! goes whole or not at all, and the reader's `recv` returns exactly one record.

use std::io::{self, IoSlice};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{self, sendmsg, AddressFamily, MsgFlags, SockFlag, SockType};
use serde::Serialize;

use crate::bridge::PortId;
use crate::packet::Packet;

/// Most packet bytes in one record (tcpdump's default snap length; an aggregate is at most a
/// 65535-byte IP packet behind its Ethernet header, so every packet fits whole).
pub const SNAPLEN: usize = 262_144;
/// Bytes of [`RecordHeader`] on the wire.
pub const RECORD_HDR_LEN: usize = 24;
/// The largest record: a header and [`SNAPLEN`] bytes.
pub const MAX_RECORD: usize = RECORD_HDR_LEN + SNAPLEN;
/// The send buffer asked for on the data path's end of a sink: a few dozen aggregates or
/// thousands of wire frames may wait for a reader that was not scheduled.
pub const SINK_BUFFER: usize = 8 << 20;

/// Which way a recorded packet crossed its port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dir {
    /// The bridge handed it to the port (for a vif: into the guest).
    ToPort,
    /// It came from the port into the bridge (for a vif: sent by the guest).
    FromPort,
}

/// What precedes a packet's bytes in a record (little-endian, [`RECORD_HDR_LEN`] bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    /// Nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// The packet's length (the record may hold fewer bytes: [`SNAPLEN`]).
    pub orig_len: u32,
    /// Records of this capture dropped (sink full) since the previous one that got through.
    pub dropped_before: u32,
    pub dir: Dir,
    /// The packet's GSO type and segment size (`virtio_net_hdr`), 0 for a plain packet.
    pub gso_type: u8,
    pub gso_size: u16,
}

impl RecordHeader {
    pub fn to_bytes(&self) -> [u8; RECORD_HDR_LEN] {
        let mut b = [0u8; RECORD_HDR_LEN];
        b[0..8].copy_from_slice(&self.ts_ns.to_le_bytes());
        b[8..12].copy_from_slice(&self.orig_len.to_le_bytes());
        b[12..16].copy_from_slice(&self.dropped_before.to_le_bytes());
        b[16] = match self.dir {
            Dir::ToPort => 0,
            Dir::FromPort => 1,
        };
        b[17] = self.gso_type;
        b[18..20].copy_from_slice(&self.gso_size.to_le_bytes());
        b
    }

    /// The header at the start of `b`, or None when `b` is too short or the direction is
    /// unknown.
    pub fn parse(b: &[u8]) -> Option<RecordHeader> {
        let b = b.get(..RECORD_HDR_LEN)?;
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        Some(RecordHeader {
            ts_ns: u64::from_le_bytes(b[0..8].try_into().expect("8 bytes")),
            orig_len: u32_at(8),
            dropped_before: u32_at(12),
            dir: match b[16] {
                0 => Dir::ToPort,
                1 => Dir::FromPort,
                _ => return None,
            },
            gso_type: b[17],
            gso_size: u16::from_le_bytes([b[18], b[19]]),
        })
    }
}

/// A connected `SOCK_SEQPACKET` pair for one capture: (the data path's end, non-blocking, its
/// send buffer [`SINK_BUFFER`] where the kernel allows; the reader's end).
pub fn sink_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let (w, r) = socket::socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
    )?;
    // The reader blocks (or polls) as it likes.
    nix::fcntl::fcntl(
        r.as_fd(),
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::empty()),
    )?;
    // Past `net.core.wmem_max` only with CAP_NET_ADMIN (the daemon has it); else the largest
    // buffer the kernel grants (208 KiB by default: still a whole aggregate).
    if socket::setsockopt(&w, socket::sockopt::SndBufForce, &SINK_BUFFER).is_err() {
        let _ = socket::setsockopt(&w, socket::sockopt::SndBuf, &SINK_BUFFER);
    }
    Ok((w, r))
}

/// Reads one record from the reader's end into `buf` (at least [`MAX_RECORD`] bytes): its
/// header and the packet's bytes. `Ok(None)` when the data path closed the sink (the run went
/// down); `InvalidData` for a record too short to hold a header.
pub fn read_record<'b>(
    sock: BorrowedFd<'_>,
    buf: &'b mut [u8],
    flags: MsgFlags,
) -> io::Result<Option<(RecordHeader, &'b [u8])>> {
    let n = loop {
        match socket::recv(sock.as_raw_fd(), buf, flags) {
            Ok(n) => break n,
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    if n == 0 {
        return Ok(None);
    }
    let h = RecordHeader::parse(&buf[..n])
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not a capture record"))?;
    Ok(Some((h, &buf[RECORD_HDR_LEN..n])))
}

/// One capture's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CaptureStats {
    /// Records sent, and the packet bytes in them.
    pub records: u64,
    pub bytes: u64,
    /// Records dropped because the sink was full (or the record larger than its buffer).
    pub dropped: u64,
}

/// What `pvnet stat` shows of captures (under `capture`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct CaptureSummary {
    /// Captures running, by bridge port, with their counters.
    pub active: Vec<(u16, CaptureStats)>,
    /// Captures started, and those ended because their reader went away.
    pub started: u64,
    pub ended: u64,
    /// Counters of the ended captures, added up.
    pub ended_records: u64,
    pub ended_dropped: u64,
}

struct Capture {
    port: PortId,
    sink: OwnedFd,
    /// Added to the data path's clock to make Unix time.
    epoch_offset_ns: u64,
    stats: CaptureStats,
    /// Drops since the last record that got through.
    pending_drops: u32,
    /// The reader went away: removed at the end of this packet.
    gone: bool,
}

/// The captures of a data path (see the module documentation).
#[derive(Default)]
pub struct Captures {
    list: Vec<Capture>,
    summary: CaptureSummary,
}

/// What one send did.
enum Sent {
    Ok,
    Dropped,
    Gone,
}

impl Captures {
    /// Whether any capture runs: the only cost of captures to a packet when none does.
    #[inline]
    pub fn active(&self) -> bool {
        !self.list.is_empty()
    }

    /// Starts capturing `port` into `sink`; `epoch_offset_ns` turns the data path's clock
    /// into Unix time.
    pub fn start(&mut self, port: PortId, sink: OwnedFd, epoch_offset_ns: u64) {
        self.summary.started += 1;
        self.list.push(Capture {
            port,
            sink,
            epoch_offset_ns,
            stats: CaptureStats::default(),
            pending_drops: 0,
            gone: false,
        });
    }

    /// Records `pkt` crossing `port` in direction `dir` for every capture of that port; the
    /// clock is read only when one captures it.
    pub fn record(&mut self, port: PortId, dir: Dir, pkt: &Packet, now_ns: impl FnOnce() -> u64) {
        let mut now = None;
        let mut now_ns = Some(now_ns);
        let mut gone = false;
        for c in self.list.iter_mut().filter(|c| c.port == port) {
            let t = *now.get_or_insert_with(|| now_ns.take().map_or(0, |f| f()));
            match send_record(c, dir, t, pkt) {
                Sent::Ok => {}
                Sent::Dropped => {
                    c.stats.dropped += 1;
                    c.pending_drops = c.pending_drops.saturating_add(1);
                }
                Sent::Gone => gone = true,
            }
        }
        if gone {
            self.reap();
        }
    }

    /// Removes the captures whose reader went away (marked by a send error).
    fn reap(&mut self) {
        let s = &mut self.summary;
        self.list.retain(|c| {
            if c.gone {
                s.ended += 1;
                s.ended_records += c.stats.records;
                s.ended_dropped += c.stats.dropped;
            }
            !c.gone
        });
    }

    /// Ends the captures whose reader closed its end, without waiting for a packet on their
    /// port (one `poll(2)` that does not sleep; for `pvnet stat`).
    pub fn reap_closed(&mut self) {
        if self.list.is_empty() {
            return;
        }
        let mut fds: Vec<PollFd<'_>> = (self.list.iter())
            .map(|c| PollFd::new(c.sink.as_fd(), PollFlags::empty()))
            .collect();
        if poll(&mut fds, PollTimeout::ZERO).is_err() {
            return;
        }
        let hung: Vec<bool> = (fds.iter())
            .map(|f| {
                f.revents()
                    .is_some_and(|r| r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR))
            })
            .collect();
        drop(fds);
        for (c, h) in self.list.iter_mut().zip(hung) {
            c.gone |= h;
        }
        self.reap();
    }

    /// Every capture's counters.
    pub fn summary(&self) -> CaptureSummary {
        CaptureSummary {
            active: self.list.iter().map(|c| (c.port.0, c.stats)).collect(),
            ..self.summary.clone()
        }
    }

    /// Ends every capture (their readers see end of file).
    pub fn clear(&mut self) {
        self.list.clear();
    }
}

/// Sends one record, never blocking; a reader gone marks the capture for removal.
fn send_record(c: &mut Capture, dir: Dir, now_ns: u64, pkt: &Packet) -> Sent {
    let h = RecordHeader {
        ts_ns: now_ns.wrapping_add(c.epoch_offset_ns),
        orig_len: pkt.len().min(u32::MAX as usize) as u32,
        dropped_before: c.pending_drops,
        dir,
        gso_type: pkt.vnet.gso_type,
        gso_size: pkt.vnet.gso_size,
    }
    .to_bytes();
    let mut iov = Vec::with_capacity(1 + 1 + pkt.frags.len());
    iov.push(IoSlice::new(&h));
    let mut left = SNAPLEN;
    for p in pkt.pieces() {
        let take = p.len().min(left);
        if take == 0 {
            break;
        }
        iov.push(IoSlice::new(&p[..take]));
        left -= take;
    }
    let flags = MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL;
    match sendmsg::<()>(c.sink.as_raw_fd(), &iov, &[], flags, None) {
        Ok(_) => {
            c.stats.records += 1;
            c.stats.bytes += (SNAPLEN - left) as u64;
            c.pending_drops = 0;
            Sent::Ok
        }
        Err(Errno::EAGAIN | Errno::ENOBUFS | Errno::ENOMEM | Errno::EMSGSIZE | Errno::EINTR) => {
            Sent::Dropped
        }
        Err(_) => {
            // EPIPE, ECONNRESET, ...: the reader closed its end.
            c.gone = true;
            Sent::Gone
        }
    }
}
