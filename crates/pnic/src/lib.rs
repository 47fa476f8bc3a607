//! pvnet-pnic: the driver domain's physical NIC.
//!
//! An AF_PACKET socket with a memory-mapped TPACKET_V2 receive ring on one interface (a veth end
//! in the testbed, or a real NIC), polled NAPI-style with a budget, plus a separate AF_PACKET
//! transmit socket. Both sockets use `PACKET_VNET_HDR`, so every received frame comes with a
//! `virtio_net_hdr` describing its checksum (and GSO) state, and every transmitted frame is
//! handed over with one: the kernel completes partial checksums and segments GSO frames where
//! the port needs it.
//!
//! The receive socket is bound with `ETH_P_ALL`, in promiscuous mode, and ignores outgoing
//! frames, so our own transmissions never come back through [`Pnic::poll`].
//!
//! Everything acts in the network namespace of the calling thread at [`Pnic::open`] time.

mod buf;
mod ring;
mod ring3;

use std::cell::Cell;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::Arc;

pub use pvnet_wire::vnet::{VirtioNetHdr, VNET_HDR_LEN};

#[cfg(any(test, feature = "fixtures"))]
pub use buf::fixture_lease;
pub use buf::{Buf, FrameSource, LentBuf, FRAME_LEN};
use ring::{Geometry, Lease, Ring, Slot};
pub use ring3::BlockGeometry;
use ring3::Ring3;

/// Default ring slot size: an MTU 1500 frame with a VLAN tag (1518 bytes) after the kernel's
/// 76 bytes of `tpacket2_hdr`, `sockaddr_ll` and vnet header, with room to spare; 32 slots fill
/// 13 pages exactly. 4096 such slots are 6.5 MiB where 2 KiB slots were 8 MiB, and the smaller
/// ring runs faster (README, "The physical port's packet ring").
pub const DEFAULT_FRAME_SIZE: u32 = 1664;
/// A lease taken more than `frame_nr - frame_nr / LEASE_HORIZON` frames ago is aging
/// ([`Pnic::lease_aging`]): the kernel reaches its slot within a quarter of the ring.
pub const LEASE_HORIZON: u32 = 4;
/// Default number of ring slots.
pub const DEFAULT_FRAME_NR: u32 = 4096;

/// Bytes a slot needs besides the frame: the kernel puts the MAC header at most 76 bytes in
/// (`tpacket2_hdr`, `sockaddr_ll`, alignment, vnet header), and a VLAN tag adds 4 to the
/// 14-byte Ethernet header.
const SLOT_OVERHEAD: u32 = 76 + 18;

/// The slot size for a port of `mtu`: the default up to an MTU of 1570, else the smallest
/// that holds a full frame with a VLAN tag (a real NIC with jumbo frames).
pub fn frame_size_for_mtu(mtu: u32) -> u32 {
    // No link has an MTU near 1 MiB; the clamp keeps the arithmetic in range.
    let need = (mtu.min(1 << 20) + SLOT_OVERHEAD).next_multiple_of(libc::TPACKET_ALIGNMENT as u32);
    need.max(DEFAULT_FRAME_SIZE)
}
/// Slot size for a port with GRO on (port GRO, standing for a NIC's LRO): the kernel hands the
/// ring coalesced TCP frames of up to 64 KiB. 16 pages make one block that holds exactly one
/// slot, so the kernel's allocation (whole power-of-two page runs per block) wastes nothing.
pub const GRO_FRAME_SIZE: u32 = 65536;
/// Default slot count of a port with GRO on: 64 MiB, as many bytes as 40,000 MTU slots; a
/// frame that was not coalesced still takes a whole slot.
pub const GRO_FRAME_NR: u32 = 1024;

/// The slot size for a port of `mtu` with GRO on: [`GRO_FRAME_SIZE`], or the MTU's slot when
/// that is larger (a jumbo MTU near 64 KiB).
pub fn gro_frame_size_for_mtu(mtu: u32) -> u32 {
    frame_size_for_mtu(mtu).max(GRO_FRAME_SIZE)
}

/// The longest frame a slot of `frame_size` holds whole (the kernel puts the MAC header 76
/// bytes into the slot), less a VLAN tag's 4 bytes of margin.
pub fn max_frame_in(frame_size: u32) -> u32 {
    frame_size.saturating_sub(SLOT_OVERHEAD - 14)
}

/// The `gro_max_size` that keeps every coalesced frame within a slot of `frame_size`: GRO
/// stops merging before a packet's length (from the network header on) reaches it, and the
/// ring adds the 14-byte Ethernet header (a tag would add 4: the margin of [`max_frame_in`]).
pub fn gro_max_size_for(frame_size: u32) -> u32 {
    max_frame_in(frame_size).saturating_sub(14)
}

/// TPACKET_V3 block size for port GRO: 256 KiB hold 4 of the largest coalesced frames
/// (65,226 bytes plus 78 of headers each). The kernel hands a block over when the next frame
/// does not fit or when the retire timer fires; at the rates measured here (2–3 Gbit/s, frames
/// of 52 KB on average) a 256 KiB block fills in under the timer's 1 ms, a 1 MiB one does not,
/// and every frame then waits for the timer: 1 MiB blocks halved a stream's throughput
/// (docs/port-gro.md, "TPACKET_V3"). One slow lease pins 1/256 of the ring.
pub const V3_BLOCK_SIZE: u32 = 256 << 10;
/// TPACKET_V3 blocks: 64 MiB in all, the bytes of the V2 port-GRO ring.
pub const V3_BLOCK_NR: u32 = 256;
/// TPACKET_V3 retire timeout in ms: the kernel's shortest. A block that is not full (a lone
/// request of a request/response exchange) reaches user space only when it fires.
pub const V3_RETIRE_MS: u32 = 1;

/// The V3 ring of a port with GRO on.
pub fn gro_v3_blocks() -> BlockGeometry {
    BlockGeometry {
        block_size: V3_BLOCK_SIZE,
        block_nr: V3_BLOCK_NR,
        retire_ms: V3_RETIRE_MS,
    }
}

/// Most pieces one frame may be given as (the kernel's `UIO_MAXIOV`, minus the vnet header).
pub const MAX_PIECES: usize = 1023;

/// How to open a [`Pnic`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PnicConfig {
    /// Interface name in the calling thread's network namespace.
    pub ifname: String,
    /// Bytes per ring slot; a multiple of 16, at least 256. Frames longer than
    /// `frame_size` minus about 90 bytes of headers arrive truncated.
    pub frame_size: u32,
    /// Ring slots; rounded up so that whole pages are used (see [`Pnic::frame_nr`]).
    pub frame_nr: u32,
    /// A TPACKET_V3 ring of these blocks instead of V2 slots (`frame_size` is then the
    /// longest frame the port must take whole, `frame_nr` unused).
    pub v3: Option<BlockGeometry>,
    /// Receive queues, 1 to [`MAX_QUEUES`]: with more than one, the kernel sorts the frames
    /// into that many packet rings by the last byte of their destination MAC address, as a
    /// NIC with VMDq sorts them into a queue per virtual machine, and a poll serves the
    /// queues in turn (see [`Pnic::poll`]). `frame_nr` is then split evenly between them.
    /// V2 rings only; not in frame mode.
    pub queues: u32,
    /// Slots of a V2 ring the CPU is asked to load (`prefetcht0`, every line) before they are
    /// used: this many past the next frame to read, and this many from the slot the kernel
    /// fills next. A slot comes back to the kernel a whole lap after it was last used, so with
    /// many queues busy (a ring's laps add up to more than the last-level cache) both the
    /// kernel's write and the first read of the frame would otherwise wait on memory, one
    /// frame at a time. 0: none. See docs/ring-prefetch.md.
    pub prefetch: u32,
    /// The transmit socket's send buffer, bytes ([`TX_SNDBUF`] by default): how much the port
    /// may have in flight towards the wire before a send is refused for now
    /// ([`PnicError::WouldBlock`]).
    pub tx_sndbuf: usize,
}

/// [`PnicConfig::prefetch`]'s default.
pub const DEFAULT_PREFETCH: u32 = 4;

/// Most receive queues a port may have ([`PnicConfig::queues`]).
pub const MAX_QUEUES: u32 = 16;

impl Default for PnicConfig {
    fn default() -> Self {
        PnicConfig {
            ifname: String::new(),
            frame_size: DEFAULT_FRAME_SIZE,
            frame_nr: DEFAULT_FRAME_NR,
            v3: None,
            queues: 1,
            prefetch: DEFAULT_PREFETCH,
            tx_sndbuf: TX_SNDBUF,
        }
    }
}

impl PnicConfig {
    /// The default ring on `ifname`.
    pub fn new(ifname: impl Into<String>) -> Self {
        PnicConfig {
            ifname: ifname.into(),
            ..Default::default()
        }
    }
}

/// One received frame, borrowed from the ring for the duration of the poll callback: read it
/// with [`RxFrame::data`], or keep it with [`RxFrame::take`].
pub struct RxFrame<'a> {
    /// Checksum/GSO state as the kernel reported it.
    pub vnet: VirtioNetHdr,
    /// The Ethernet frame (possibly truncated, see `truncated`).
    data: Lease<'a>,
    lease_cap: u32,
    counts: &'a LeaseCounts,
    /// `TP_STATUS_CSUMNOTREADY`: the transport checksum is partial (only the pseudo-header
    /// seed); `vnet` then carries `NEEDS_CSUM` with `csum_start`/`csum_offset`.
    pub csum_not_ready: bool,
    /// `TP_STATUS_CSUM_VALID`: the checksum was verified.
    pub csum_valid: bool,
    /// The frame did not fit the ring slot: `data` is shorter than `wire_len`.
    pub truncated: bool,
    /// The frame's original length (`tp_len`).
    pub wire_len: u32,
    /// When the kernel put it in the ring (`tp_sec`/`tp_nsec`, `CLOCK_REALTIME` in ns): the
    /// moment a NIC would have written it to memory.
    pub stamp_ns: u64,
}

impl RxFrame<'_> {
    /// The Ethernet frame (possibly truncated, see `truncated`).
    pub fn data(&self) -> &[u8] {
        self.data.bytes()
    }

    /// The frame's bytes to keep: the ring slot itself (a lease, handed back to the kernel
    /// when the returned [`Buf`] and every copy of it are gone), or, when half the ring is
    /// already leased, a copy on the heap. A lease saves one copy of every byte on the way to a
    /// guest; the cap keeps the kernel room to receive while leases are out.
    pub fn take(self) -> Buf {
        if self.data.outstanding() < self.lease_cap {
            self.counts.leased.set(self.counts.leased.get() + 1);
            Buf::from(self.data.take())
        } else {
            self.counts.copied.set(self.counts.copied.get() + 1);
            Buf::from(self.data.bytes())
        }
    }
}

impl std::fmt::Debug for RxFrame<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RxFrame")
            .field("vnet", &self.vnet)
            .field("len", &self.data().len())
            .field("truncated", &self.truncated)
            .field("wire_len", &self.wire_len)
            .finish_non_exhaustive()
    }
}

/// How frames were taken ([`RxFrame::take`]).
#[derive(Default)]
struct LeaseCounts {
    leased: Cell<u64>,
    copied: Cell<u64>,
}

/// Counters. `tp_packets`/`tp_drops` accumulate the kernel's `PACKET_STATISTICS` (which reset
/// on every read); the kernel's `tp_packets` includes the dropped frames.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PnicStats {
    /// Frames handed to the poll callback.
    pub rx_frames: u64,
    /// Bytes handed to the poll callback (`data.len()`).
    pub rx_bytes: u64,
    /// Frames handed over truncated (did not fit a slot).
    pub rx_truncated: u64,
    /// Slots whose tpacket header failed validation; dropped.
    pub rx_bad: u64,
    /// Frames handed over with `TP_STATUS_CSUMNOTREADY`.
    pub rx_csum_not_ready: u64,
    /// Frames handed over as GSO frames (a GSO type in their vnet header): what GRO on the
    /// port coalesced, or what a local sender's TSO left whole.
    pub rx_gso: u64,
    /// The largest frame handed over (bytes).
    pub rx_max_frame: u32,
    /// Frames kept in their ring slot by [`RxFrame::take`] (no copy).
    pub rx_leased: u64,
    /// Frames [`RxFrame::take`] copied because half the ring was leased.
    pub rx_lease_copies: u64,
    /// Slots leased out now.
    pub rx_leases_outstanding: u32,
    /// Frames accepted by the kernel for transmission.
    pub tx_frames: u64,
    /// Bytes of those frames (without the vnet header).
    pub tx_bytes: u64,
    /// Sends refused for now: EAGAIN, the socket's send buffer full
    /// ([`PnicError::WouldBlock`]), or ENOBUFS, the device's queue full
    /// ([`PnicError::DeviceBusy`]).
    pub tx_would_block: u64,
    /// The transmit socket's send buffer as the kernel set it (bytes it may hold in flight,
    /// counted as the kernel charges them; [`TX_SNDBUF`] asked).
    pub tx_sndbuf: u64,
    /// Sends refused for any other reason.
    pub tx_errors: u64,
    /// Kernel: frames that reached the receive socket (delivered + dropped).
    pub tp_packets: u64,
    /// Kernel: frames dropped because the ring was full.
    pub tp_drops: u64,
    /// V3: blocks walked.
    pub rx_blocks: u64,
    /// V3: blocks skipped because a field of their layout failed validation.
    pub rx_bad_blocks: u64,
    /// V3: blocks the consumer has left that leases still hold, now.
    pub rx_blocks_held: u32,
    /// V3: times the consumer came round to a block that leases still held: the kernel had
    /// stopped at it, a freeze that the leases caused (counted once per stop).
    pub rx_hold_stops: u64,
    /// V3, kernel: times the kernel found its next block still user space's and stopped the
    /// ring (`tp_freeze_q_cnt`; frames arriving meanwhile are in `tp_drops`): a block held by
    /// leases ([`PnicStats::rx_hold_stops`]), or one the consumer had not reached yet.
    pub tp_ring_frozen: u64,
    /// Errors the kernel left on the port's sockets and [`Pnic::take_socket_errors`] read
    /// (`ENETDOWN` each time the link went down).
    pub socket_errors: u64,
    /// The errno of the last of them (0: none yet).
    pub last_socket_errno: i32,
}

#[derive(Debug, thiserror::Error)]
pub enum PnicError {
    #[error("no such network interface: {0:?}")]
    NoSuchInterface(String),
    #[error("permission denied: AF_PACKET sockets need CAP_NET_RAW")]
    PermissionDenied,
    #[error("invalid pnic configuration: {0}")]
    InvalidConfig(String),
    #[error("{context}: {source}")]
    Io {
        context: &'static str,
        #[source]
        source: io::Error,
    },
    /// EAGAIN on transmit: the socket's send buffer is full. Back-pressure: wait for
    /// `tx_fd` to become writable, then send the frame again.
    #[error("transmit would block (socket send buffer full)")]
    WouldBlock,
    /// ENOBUFS on transmit: the device's queue was full and dropped the frame (a veth whose
    /// peer's backlog is full, or whose peer is down). No readiness reports when it has room:
    /// send the frame again a little later.
    #[error("transmit refused: the device's queue is full")]
    DeviceBusy,
}

impl PnicError {
    fn io(context: &'static str, source: io::Error) -> PnicError {
        PnicError::Io { context, source }
    }

    /// The errno behind an `Io` error, if any.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            PnicError::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

/// The physical NIC: receive rings (one per queue) + transmit socket.
pub struct Pnic {
    /// At least one; more in one fanout group ([`PnicConfig::queues`]).
    queues: Vec<RxQueue>,
    /// The queue the next poll starts with (the queues take turns being first).
    next_queue: usize,
    /// Queues not served for now ([`Pnic::pause_queues`]), bit `q` for queue `q`.
    paused: u32,
    tx: OwnedFd,
    ifname: String,
    ifindex: u32,
    rx_stats: RxCounters,
    lease_counts: LeaseCounts,
    tx_frames: Cell<u64>,
    tx_bytes: Cell<u64>,
    tx_would_block: Cell<u64>,
    tx_sndbuf: u64,
    tx_errors: Cell<u64>,
    socket_errors: Cell<u64>,
    last_socket_errno: Cell<i32>,
    /// Frame mode ([`Pnic::open_frames`]): the socket and the buffers it receives into.
    frx: Option<FrameRx>,
}

/// One receive queue: a packet socket and its ring.
struct RxQueue {
    ring: Rx,
    rx: OwnedFd,
    /// Slots that may be leased at once (half the ring).
    lease_cap: u32,
    /// Frames handed over from this queue.
    frames: u64,
    tp_packets: u64,
    tp_drops: u64,
    tp_frozen: u64,
}

impl RxQueue {
    /// Reads the kernel's `PACKET_STATISTICS` of `fd` (reset by the read) into the totals.
    fn read_kernel_stats(&mut self, fd: RawFd) {
        // SAFETY: tpacket_stats_v3 is plain data; all-zero is a valid value. A V2 socket
        // fills its first two fields (tpacket_stats), a V3 one all three.
        let mut ks: libc::tpacket_stats_v3 = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::tpacket_stats_v3>() as libc::socklen_t;
        // SAFETY: ks/len describe a writable buffer of the right size.
        let r = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut ks as *mut libc::tpacket_stats_v3).cast(),
                &mut len,
            )
        };
        if r == 0 {
            self.tp_packets += u64::from(ks.tp_packets);
            self.tp_drops += u64::from(ks.tp_drops);
            if len as usize >= std::mem::size_of::<libc::tpacket_stats_v3>() {
                self.tp_frozen += u64::from(ks.tp_freeze_q_cnt);
            }
        }
    }
}

/// One receive queue's counters ([`Pnic::queue_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Frames handed over from this queue.
    pub frames: u64,
    /// Kernel: frames dropped because this queue's ring was full.
    pub drops: u64,
    /// Not served now ([`Pnic::pause_queues`]).
    pub paused: bool,
    /// Slots of this queue's ring leased out ([`RxFrame::take`]) and not yet handed back: its
    /// frames the driver domain holds, waiting for their guest's RX buffers.
    pub leases: u32,
}

/// The receive ring: V2 slots or V3 blocks.
enum Rx {
    V2(Ring),
    V3(Ring3),
}

impl Rx {
    /// Slots (V2) or the kernel's frame count (V3, `tp_frame_nr`).
    fn frame_nr(&self) -> u32 {
        match self {
            Rx::V2(r) => r.geometry().frame_nr,
            Rx::V3(r) => r.geometry().as_req().tp_frame_nr,
        }
    }

    fn leases(&self) -> u32 {
        match self {
            Rx::V2(r) => r.leases(),
            Rx::V3(r) => r.leases(),
        }
    }

    fn head_ready(&self) -> bool {
        match self {
            Rx::V2(r) => r.head_ready(),
            Rx::V3(r) => r.head_ready(),
        }
    }

    fn consume<R>(&mut self, f: impl FnOnce(Slot<'_>) -> R) -> Option<R> {
        match self {
            Rx::V2(r) => r.consume(f),
            Rx::V3(r) => r.consume(f),
        }
    }
}

/// The receive side of frame mode: a ring-less packet socket read with `recvmmsg` straight
/// into buffers lent by a [`FrameSource`].
struct FrameRx {
    sock: OwnedFd,
    src: Arc<dyn FrameSource>,
    /// Polls that found no free buffer.
    no_buffer: u64,
}

/// Most frames one `recvmmsg` takes in frame mode.
const FRAME_BATCH: usize = 64;

#[derive(Default)]
struct RxCounters {
    frames: u64,
    bytes: u64,
    truncated: u64,
    bad: u64,
    csum_not_ready: u64,
    gso: u64,
    max_frame: u32,
}

impl std::fmt::Debug for Pnic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pnic")
            .field("ifname", &self.ifname)
            .field("ifindex", &self.ifindex)
            .field("frame_nr", &self.frame_nr())
            .field("frame_size", &self.frame_size())
            .finish_non_exhaustive()
    }
}

impl Drop for Pnic {
    /// Closes several receive queues at once (see [`Pnic::open`]): each close waits for the
    /// kernel's grace period on its own.
    fn drop(&mut self) {
        if self.queues.len() > 1 {
            let queues = std::mem::take(&mut self.queues);
            std::thread::scope(|s| {
                for q in queues {
                    s.spawn(move || drop(q));
                }
            });
        }
    }
}

fn last_err() -> io::Error {
    io::Error::last_os_error()
}

fn is_perm(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES))
}

/// `socket(AF_PACKET, SOCK_RAW, 0)`: protocol 0 so that nothing is queued before `bind`.
fn packet_socket() -> Result<OwnedFd, PnicError> {
    // SAFETY: plain syscall with constant arguments.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        )
    };
    if fd < 0 {
        let e = last_err();
        return Err(if is_perm(&e) {
            PnicError::PermissionDenied
        } else {
            PnicError::io("socket(AF_PACKET)", e)
        });
    }
    // SAFETY: fd is a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The send buffer the transmit socket asks for: what the driver domain may have in flight
/// towards the wire before the port pushes back. The kernel charges each frame's buffer to
/// the socket until the peer has taken it, so the default (`wmem_default`, 208 KiB here) held
/// three 64 KiB GSO frames: a guest streaming out lost 2–12 % of its frames to EAGAIN. 4 MiB
/// is the machine's `wmem_max`; as root it is set beyond that (`SO_SNDBUFFORCE`).
pub const TX_SNDBUF: usize = 4 << 20;

/// Sets `fd`'s send buffer to `bytes` (`SO_SNDBUFFORCE`, which needs CAP_NET_ADMIN, else
/// `SO_SNDBUF`, capped by `wmem_max`). Returns what the kernel set (it doubles the request for
/// its bookkeeping).
fn set_sndbuf(fd: BorrowedFd<'_>, bytes: usize) -> Result<u64, PnicError> {
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    let set = |name| {
        // SAFETY: `v` is a live c_int of the size passed for the duration of the call.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                name,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        }
    };
    if set(libc::SO_SNDBUFFORCE) < 0 && set(libc::SO_SNDBUF) < 0 {
        return Err(PnicError::io("SO_SNDBUF (tx)", last_err()));
    }
    let got =
        socket_int(fd, libc::SO_SNDBUF).map_err(|e| PnicError::io("getsockopt(SO_SNDBUF)", e))?;
    Ok(u64::try_from(got).unwrap_or(0))
}

/// An integer option of socket `fd` at `SOL_SOCKET` (`getsockopt`).
fn socket_int(fd: BorrowedFd<'_>, name: libc::c_int) -> io::Result<libc::c_int> {
    let mut got: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `got` and `len` are live and sized as the call expects; the kernel writes at
    // most `len` bytes into `got`.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            name,
            (&mut got as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(last_err());
    }
    Ok(got)
}

fn setsockopt<T>(
    fd: BorrowedFd<'_>,
    name: libc::c_int,
    val: &T,
    context: &'static str,
) -> Result<(), PnicError> {
    // SAFETY: val points to a live T of the given size for the duration of the call.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            name,
            (val as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        let e = last_err();
        return Err(if is_perm(&e) {
            PnicError::PermissionDenied
        } else {
            PnicError::io(context, e)
        });
    }
    Ok(())
}

fn bind_ll(fd: BorrowedFd<'_>, ifindex: u32, protocol: u16) -> Result<(), PnicError> {
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = protocol.to_be();
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: sll is a valid sockaddr_ll of the given length.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r < 0 {
        let e = last_err();
        return Err(match e.raw_os_error() {
            Some(libc::ENODEV) | Some(libc::ENXIO) => {
                PnicError::NoSuchInterface(ifindex.to_string())
            }
            _ if is_perm(&e) => PnicError::PermissionDenied,
            _ => PnicError::io("bind(AF_PACKET)", e),
        });
    }
    Ok(())
}

fn page_size() -> u32 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p <= 0 {
        4096
    } else {
        p as u32
    }
}

/// Classifies a transmit errno.
fn tx_error(e: io::Error, context: &'static str) -> PnicError {
    match e.raw_os_error() {
        Some(libc::EAGAIN) => PnicError::WouldBlock,
        Some(libc::ENOBUFS) => PnicError::DeviceBusy,
        _ => PnicError::io(context, e),
    }
}

const EMPTY_IOV: libc::iovec = libc::iovec {
    iov_base: std::ptr::null_mut(),
    iov_len: 0,
};

/// Pieces up to this count are sent with an iovec array on the stack.
const STACK_IOV: usize = 32;

/// Opens one receive queue of `ifindex`: a packet socket with its ring, promiscuous, bound.
fn open_queue(cfg: &PnicConfig, geo: Geometry, ifindex: u32) -> Result<RxQueue, PnicError> {
    // Receive socket. Order matters: version and vnet header before the ring (EBUSY
    // otherwise), ring before bind so no frame is queued outside the ring.
    let rx = packet_socket()?;
    let one: libc::c_int = 1;
    setsockopt(
        rx.as_fd(),
        libc::PACKET_IGNORE_OUTGOING,
        &one,
        "PACKET_IGNORE_OUTGOING",
    )?;
    setsockopt(
        rx.as_fd(),
        libc::PACKET_VNET_HDR,
        &one,
        "PACKET_VNET_HDR (rx)",
    )?;
    let (ring, lease_cap) = match cfg.v3 {
        None => {
            let version = libc::tpacket_versions::TPACKET_V2 as libc::c_int;
            setsockopt(rx.as_fd(), libc::PACKET_VERSION, &version, "PACKET_VERSION")?;
            let req = geo.as_req();
            setsockopt(rx.as_fd(), libc::PACKET_RX_RING, &req, "PACKET_RX_RING")?;
            let ring = Ring::map(rx.as_fd(), geo, cfg.prefetch)
                .map_err(|e| PnicError::io("mmap(rx ring)", e))?;
            // Half the slots may be leased.
            (Rx::V2(ring), geo.frame_nr / 2)
        }
        Some(b) => {
            let version = libc::tpacket_versions::TPACKET_V3 as libc::c_int;
            setsockopt(rx.as_fd(), libc::PACKET_VERSION, &version, "PACKET_VERSION")?;
            let req = b.as_req();
            setsockopt(
                rx.as_fd(),
                libc::PACKET_RX_RING,
                &req,
                "PACKET_RX_RING (v3)",
            )?;
            let ring = Ring3::map(rx.as_fd(), b).map_err(|e| PnicError::io("mmap(rx ring)", e))?;
            // Half the blocks may be held by leases once the consumer has left them.
            (Rx::V3(ring), b.block_nr / 2)
        }
    };
    // SAFETY: packet_mreq is plain data; all-zero is a valid value.
    let mut mreq: libc::packet_mreq = unsafe { std::mem::zeroed() };
    mreq.mr_ifindex = ifindex as i32;
    mreq.mr_type = libc::PACKET_MR_PROMISC as u16;
    setsockopt(
        rx.as_fd(),
        libc::PACKET_ADD_MEMBERSHIP,
        &mreq,
        "PACKET_ADD_MEMBERSHIP (promisc)",
    )
    .map_err(|e| match e {
        PnicError::Io { source, .. } if source.raw_os_error() == Some(libc::ENODEV) => {
            PnicError::NoSuchInterface(cfg.ifname.clone())
        }
        e => e,
    })?;
    bind_ll(rx.as_fd(), ifindex, libc::ETH_P_ALL as u16).map_err(|e| match e {
        PnicError::NoSuchInterface(_) => PnicError::NoSuchInterface(cfg.ifname.clone()),
        e => e,
    })?;

    Ok(RxQueue {
        ring,
        rx,
        lease_cap,
        frames: 0,
        tp_packets: 0,
        tp_drops: 0,
        tp_frozen: 0,
    })
}

/// A ring's frame handed on as a stamped poll hands it: header, kept bytes ([`RxFrame::take`])
/// and receive time. A truncated frame is not handed on (the port counted it).
fn stamped(f: &mut impl FnMut(VirtioNetHdr, Buf, Option<u64>)) -> impl FnMut(RxFrame<'_>) + '_ {
    move |fr| {
        if !fr.truncated {
            let (vnet, stamp) = (fr.vnet, fr.stamp_ns);
            f(vnet, fr.take(), Some(stamp));
        }
    }
}

/// Whether bit `q` of a queue mask is set (queues beyond the mask's 32 bits never are).
fn in_mask(mask: u32, q: usize) -> bool {
    q < 32 && mask & (1 << q) != 0
}

/// Shares one poll's `budget` between `queues` receive queues: in rounds, each queue in turn
/// is asked (`poll(queue, at most)`) for at most an equal share (`budget` ÷ `queues`, at least
/// 1), until the budget is used or a round took nothing. The queue asked first moves on by one
/// at every round (`next`, kept between polls), so the remainder of a budget that does not
/// divide evenly goes round too. Returns the frames taken. With one queue: one call for the
/// whole budget.
///
/// The queues whose bits are set in `paused` (bit `q` for queue `q`) are not asked, and the
/// share is the budget over the others.
pub fn poll_in_rounds(
    queues: usize,
    budget: usize,
    paused: u32,
    next: &mut usize,
    mut poll: impl FnMut(usize, usize) -> usize,
) -> usize {
    let is_paused = |q: usize| in_mask(paused, q);
    if queues <= 1 {
        return if is_paused(0) { 0 } else { poll(0, budget) };
    }
    let active = (0..queues).filter(|&q| !is_paused(q)).count();
    if active == 0 {
        return 0;
    }
    let share = (budget / active).max(1);
    let mut taken = 0;
    while taken < budget {
        let mut round = 0;
        for k in 0..queues {
            if taken >= budget {
                break;
            }
            let q = (*next + k) % queues;
            if is_paused(q) {
                continue;
            }
            let n = poll(q, share.min(budget - taken));
            taken += n;
            round += n;
        }
        *next = (*next + 1) % queues;
        if round == 0 {
            break;
        }
    }
    taken
}

/// Puts the queues' sockets in one fanout group that sends each frame to the queue the last
/// byte of its destination MAC address names (modulo the number of queues): classic BPF on
/// the link-layer header, which the kernel runs once per frame. Outgoing frames stay out of
/// the group, as `PACKET_IGNORE_OUTGOING` keeps them out of one socket.
fn join_fanout(queues: &[RxQueue]) -> Result<(), PnicError> {
    let flags = libc::PACKET_FANOUT_CBPF | libc::PACKET_FANOUT_FLAG_IGNORE_OUTGOING;
    // The first socket asks the kernel for a group id nobody else uses in this namespace.
    let first = (flags | libc::PACKET_FANOUT_FLAG_UNIQUEID) << 16;
    setsockopt(
        queues[0].rx.as_fd(),
        libc::PACKET_FANOUT,
        &(first as libc::c_int),
        "PACKET_FANOUT (new group)",
    )?;
    let mut arg: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: arg/len describe a writable c_int.
    let r = unsafe {
        libc::getsockopt(
            queues[0].rx.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_FANOUT,
            (&mut arg as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(PnicError::io("getsockopt(PACKET_FANOUT)", last_err()));
    }
    let id = (arg as u32) & 0xffff;
    let prog = mac_queue_filter();
    // `fprog` points into `prog`, which outlives the call; the kernel copies the program.
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr().cast_mut(),
    };
    setsockopt(
        queues[0].rx.as_fd(),
        libc::PACKET_FANOUT_DATA,
        &fprog,
        "PACKET_FANOUT_DATA (classic BPF)",
    )?;
    let join = (id | (flags << 16)) as libc::c_int;
    for q in &queues[1..] {
        setsockopt(
            q.rx.as_fd(),
            libc::PACKET_FANOUT,
            &join,
            "PACKET_FANOUT (join)",
        )?;
    }
    Ok(())
}

/// The fanout program: the queue is the destination MAC address's last byte (the kernel takes
/// it modulo the group's size). A frame too short to have one goes to queue 0.
fn mac_queue_filter() -> [libc::sock_filter; 2] {
    [
        // A = byte at link-layer offset 5: the destination address's last byte.
        libc::sock_filter {
            code: (libc::BPF_LD | libc::BPF_B | libc::BPF_ABS) as u16,
            jt: 0,
            jf: 0,
            k: (libc::SKF_LL_OFF + 5) as u32,
        },
        // return A
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_A) as u16,
            jt: 0,
            jf: 0,
            k: 0,
        },
    ]
}

impl Pnic {
    /// Opens the NIC `cfg.ifname` in the calling thread's network namespace.
    ///
    /// Errors: [`PnicError::NoSuchInterface`], [`PnicError::PermissionDenied`] (no
    /// CAP_NET_RAW), [`PnicError::InvalidConfig`] (ring geometry), [`PnicError::Io`] with the
    /// failing step (ring setup, mmap, bind, promiscuous mode) and its errno.
    pub fn open(cfg: &PnicConfig) -> Result<Pnic, PnicError> {
        let geo = Geometry::new(cfg.frame_size, cfg.frame_nr, page_size())
            .map_err(PnicError::InvalidConfig)?;
        if let Some(b) = &cfg.v3 {
            b.check(page_size(), max_frame_in(cfg.frame_size))
                .map_err(PnicError::InvalidConfig)?;
        }
        if cfg.ifname.is_empty() || cfg.ifname.len() >= libc::IFNAMSIZ {
            return Err(PnicError::NoSuchInterface(cfg.ifname.clone()));
        }
        let cname = CString::new(cfg.ifname.as_str())
            .map_err(|_| PnicError::NoSuchInterface(cfg.ifname.clone()))?;
        // SAFETY: cname is a valid NUL-terminated string.
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        if ifindex == 0 {
            return Err(PnicError::NoSuchInterface(cfg.ifname.clone()));
        }

        if cfg.queues == 0 || cfg.queues > MAX_QUEUES {
            return Err(PnicError::InvalidConfig(format!(
                "receive queues must be between 1 and {MAX_QUEUES}, got {}",
                cfg.queues
            )));
        }
        if cfg.queues > 1 && cfg.v3.is_some() {
            return Err(PnicError::InvalidConfig(
                "several receive queues need V2 rings (a V3 ring has one queue)".into(),
            ));
        }
        // Each queue gets an equal share of the slots (rounded up to whole blocks).
        let qgeo = if cfg.queues > 1 {
            Geometry::new(
                cfg.frame_size,
                cfg.frame_nr.div_ceil(cfg.queues),
                page_size(),
            )
            .map_err(PnicError::InvalidConfig)?
        } else {
            geo
        };
        // Each packet socket costs the kernel an RCU grace period or two to bind and to close
        // (about 10 ms each on a VM): several queues are opened, and closed (`Drop`), at once,
        // so a restart of the driver domain waits for about one, not one per queue. A new
        // thread starts in the calling thread's network namespace.
        let queues = std::thread::scope(|s| {
            let opening: Vec<_> = (0..cfg.queues)
                .map(|_| s.spawn(move || open_queue(cfg, qgeo, ifindex)))
                .collect();
            opening
                .into_iter()
                .map(|h| h.join().expect("opening a receive queue panicked"))
                .collect::<Result<Vec<RxQueue>, PnicError>>()
        })?;
        if queues.len() > 1 {
            join_fanout(&queues)?;
        }

        // Transmit socket: bound with protocol 0, so it never receives anything; the kernel
        // takes the protocol from the Ethernet header of each frame.
        let one: libc::c_int = 1;
        let tx = packet_socket()?;
        setsockopt(
            tx.as_fd(),
            libc::PACKET_VNET_HDR,
            &one,
            "PACKET_VNET_HDR (tx)",
        )?;
        let tx_sndbuf = set_sndbuf(tx.as_fd(), cfg.tx_sndbuf)?;
        bind_ll(tx.as_fd(), ifindex, 0).map_err(|e| match e {
            PnicError::NoSuchInterface(_) => PnicError::NoSuchInterface(cfg.ifname.clone()),
            e => e,
        })?;

        Ok(Pnic {
            queues,
            next_queue: 0,
            paused: 0,
            tx,
            ifname: cfg.ifname.clone(),
            ifindex,
            rx_stats: RxCounters::default(),
            lease_counts: LeaseCounts::default(),
            tx_frames: Cell::new(0),
            tx_bytes: Cell::new(0),
            tx_would_block: Cell::new(0),
            tx_sndbuf,
            tx_errors: Cell::new(0),
            socket_errors: Cell::new(0),
            last_socket_errno: Cell::new(0),
            frx: None,
        })
    }

    /// Opens the NIC in *frame mode*: frames are received with `recvmmsg` straight into
    /// page-sized buffers lent by `src` (the driver domain's machine frames), as a NIC writes
    /// into the buffers its driver posted, instead of into the packet ring (which is opened
    /// but bound to an EtherType nobody sends, so it receives nothing). A frame longer than a buffer is
    /// dropped and counted (`rx_truncated`): frame mode wants wire-sized frames (no GRO on
    /// the interface).
    pub fn open_frames(cfg: &PnicConfig, src: Arc<dyn FrameSource>) -> Result<Pnic, PnicError> {
        if cfg.queues != 1 {
            return Err(PnicError::InvalidConfig(
                "frame mode has one receive queue".into(),
            ));
        }
        let mut p = Pnic::open(cfg)?;
        // Unhook the ring socket: a bind to protocol 0 would keep its protocol (ETH_P_ALL),
        // so it is bound to an EtherType nothing on the testbed sends (IEEE 802 "local
        // experimental" 2, 0x88B6) and receives nothing.
        bind_ll(p.queues[0].rx.as_fd(), p.ifindex, 0x88B6)?;
        let sock = packet_socket()?;
        let one: libc::c_int = 1;
        setsockopt(
            sock.as_fd(),
            libc::PACKET_IGNORE_OUTGOING,
            &one,
            "PACKET_IGNORE_OUTGOING (frames)",
        )?;
        setsockopt(
            sock.as_fd(),
            libc::PACKET_VNET_HDR,
            &one,
            "PACKET_VNET_HDR (frames)",
        )?;
        // SAFETY: packet_mreq is plain data; all-zero is a valid value.
        let mut mreq: libc::packet_mreq = unsafe { std::mem::zeroed() };
        mreq.mr_ifindex = p.ifindex as i32;
        mreq.mr_type = libc::PACKET_MR_PROMISC as u16;
        setsockopt(
            sock.as_fd(),
            libc::PACKET_ADD_MEMBERSHIP,
            &mreq,
            "PACKET_ADD_MEMBERSHIP (frames)",
        )?;
        // The socket's queue stands in for the ring: as many frames as the ring has slots
        // (a frame's skb costs about 2.5 KiB of receive buffer); the default (about 200 KiB)
        // would drop a burst of a hundred frames.
        let rcvbuf = (p.frame_nr() as libc::c_int).saturating_mul(2560);
        // SAFETY: `rcvbuf` is a live c_int for the duration of each call.
        unsafe {
            let v = (&rcvbuf as *const libc::c_int).cast();
            let n = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            if libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                v,
                n,
            ) != 0
            {
                libc::setsockopt(sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, v, n);
            }
        }
        bind_ll(sock.as_fd(), p.ifindex, libc::ETH_P_ALL as u16)?;
        p.frx = Some(FrameRx {
            sock,
            src,
            no_buffer: 0,
        });
        Ok(p)
    }

    /// Whether the port receives into lent frames ([`Pnic::open_frames`]).
    pub fn frame_mode(&self) -> bool {
        self.frx.is_some()
    }

    /// Frame mode: polls that found no free buffer to receive into.
    pub fn frames_starved(&self) -> u64 {
        self.frx.as_ref().map_or(0, |f| f.no_buffer)
    }

    /// One poll in either mode, handing each frame's header and bytes to `f` (a ring slot
    /// lease or a lent frame). Truncated frames are counted and not handed over.
    pub fn poll_bufs(&mut self, budget: usize, mut f: impl FnMut(VirtioNetHdr, Buf)) -> usize {
        self.poll_stamped(budget, |vnet, buf, _| f(vnet, buf))
    }

    /// [`Pnic::poll_bufs`], with each frame's receive time when the port has one (the packet
    /// ring's `tp_sec`/`tp_nsec`, `CLOCK_REALTIME` in ns; frame mode has none).
    pub fn poll_stamped(
        &mut self,
        budget: usize,
        mut f: impl FnMut(VirtioNetHdr, Buf, Option<u64>),
    ) -> usize {
        if self.frx.is_none() {
            return self.poll(budget, stamped(&mut f));
        }
        let mut f = |vnet, buf| f(vnet, buf, None);
        let mut handed = 0;
        while handed < budget {
            let n = self.recv_frames((budget - handed).min(FRAME_BATCH), &mut f);
            handed += n;
            if n == 0 {
                break;
            }
        }
        handed
    }

    /// One `recvmmsg` of at most `n` frames into lent buffers. Returns the messages taken.
    fn recv_frames(&mut self, n: usize, f: &mut impl FnMut(VirtioNetHdr, Buf)) -> usize {
        let frx = self.frx.as_mut().expect("frame mode");
        let mut bufs: [(u32, NonNull<u8>); FRAME_BATCH] = [(0, NonNull::dangling()); FRAME_BATCH];
        let mut k = 0;
        while k < n {
            match frx.src.take() {
                Some(b) => {
                    bufs[k] = b;
                    k += 1;
                }
                None => break,
            }
        }
        if k == 0 {
            frx.no_buffer += 1;
            return 0;
        }
        let mut hdrs = [[0u8; VNET_HDR_LEN]; FRAME_BATCH];
        // SAFETY: iovec and mmsghdr are plain data; all-zero is a valid value.
        let mut iov: [[libc::iovec; 2]; FRAME_BATCH] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; FRAME_BATCH] = unsafe { std::mem::zeroed() };
        for i in 0..k {
            iov[i][0] = libc::iovec {
                iov_base: hdrs[i].as_mut_ptr().cast(),
                iov_len: VNET_HDR_LEN,
            };
            iov[i][1] = libc::iovec {
                iov_base: bufs[i].1.as_ptr().cast(),
                iov_len: FRAME_LEN,
            };
            msgs[i].msg_hdr.msg_iov = iov[i].as_mut_ptr();
            msgs[i].msg_hdr.msg_iovlen = 2;
        }
        // SAFETY: msgs[..k] describe live, writable buffers: the header arrays above and the
        // lent frames, each FRAME_LEN bytes and used by nothing else until given back.
        let r = unsafe {
            libc::recvmmsg(
                frx.sock.as_raw_fd(),
                msgs.as_mut_ptr(),
                k as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        let got = if r > 0 { r as usize } else { 0 };
        let st = &mut self.rx_stats;
        for i in 0..k {
            let (id, page) = bufs[i];
            if i >= got {
                frx.src.give_back(id);
                continue;
            }
            let m = &msgs[i];
            let total = m.msg_len as usize;
            if m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 || total < VNET_HDR_LEN {
                st.truncated += 1;
                frx.src.give_back(id);
                continue;
            }
            let Some(vnet) = VirtioNetHdr::parse(&hdrs[i]) else {
                st.bad += 1;
                frx.src.give_back(id);
                continue;
            };
            let len = total - VNET_HDR_LEN;
            st.frames += 1;
            st.bytes += len as u64;
            // SAFETY: (id, page) came from `src.take()` and was not given back; the frame
            // holds at most FRAME_LEN bytes (the iovec's length).
            let lent = unsafe { LentBuf::new(frx.src.clone(), id, page, 0, len) };
            f(vnet, Buf::from(lent));
        }
        got
    }

    /// The receive socket, for epoll: readable when frames are waiting in the ring. With
    /// several queues, the first queue's; [`Pnic::rx_fds`] gives them all.
    pub fn rx_fd(&self) -> BorrowedFd<'_> {
        match &self.frx {
            Some(f) => f.sock.as_fd(),
            None => self.queues[0].rx.as_fd(),
        }
    }

    /// Every receive queue's socket (one in frame mode): to sleep until any has a frame.
    pub fn rx_fds(&self) -> impl Iterator<Item = BorrowedFd<'_>> + '_ {
        let frame = self.frx.as_ref().map(|f| f.sock.as_fd());
        let rings = self
            .frx
            .is_none()
            .then(|| self.served())
            .into_iter()
            .flatten();
        frame.into_iter().chain(rings.map(|q| q.rx.as_fd()))
    }

    /// Receive queues ([`PnicConfig::queues`]).
    pub fn queue_count(&self) -> usize {
        self.queues.len()
    }

    /// The receive queue a frame for destination `mac` lands in: the fanout program's choice
    /// (its last byte, modulo the number of queues).
    pub fn queue_of(&self, mac: &[u8; 6]) -> usize {
        usize::from(mac[5]) % self.queues.len()
    }

    /// Stops serving the receive queues whose bits are set in `mask` (bit `q` for queue `q`),
    /// and serves the others again, as a NIC's driver disables one queue's interrupt and
    /// NAPI: [`Pnic::poll`] skips them, [`Pnic::rx_ready`] does not look at them and
    /// [`Pnic::rx_fds`] leaves them out. Their frames wait in their rings, and what does not
    /// fit is dropped by the kernel and counted in that queue's drops; the other queues
    /// are not affected. Bits beyond the queues are ignored, and so is the whole mask on the
    /// frame port, whose one queue is never paused.
    pub fn pause_queues(&mut self, mask: u32) {
        let all = u32::MAX >> (32 - self.queues.len().min(32));
        self.paused = if self.frx.is_some() { 0 } else { mask & all };
    }

    /// The queues [`Pnic::pause_queues`] stopped.
    pub fn paused_queues(&self) -> u32 {
        self.paused
    }

    fn queue_paused(&self, q: usize) -> bool {
        in_mask(self.paused, q)
    }

    /// The receive queues not paused.
    fn served(&self) -> impl Iterator<Item = &RxQueue> + '_ {
        (self.queues.iter().enumerate())
            .filter(|(i, _)| !self.queue_paused(*i))
            .map(|(_, q)| q)
    }

    /// Each receive queue's counters, reading the kernel's drop counts.
    pub fn queue_stats(&mut self) -> Vec<QueueStats> {
        if self.frx.is_some() {
            return Vec::new();
        }
        let paused = self.paused;
        self.queues
            .iter_mut()
            .enumerate()
            .map(|(i, q)| {
                let fd = q.rx.as_raw_fd();
                q.read_kernel_stats(fd);
                QueueStats {
                    frames: q.frames,
                    drops: q.tp_drops,
                    paused: in_mask(paused, i),
                    leases: q.ring.leases(),
                }
            })
            .collect()
    }

    /// The transmit socket, for epoll: writable when the socket buffer has room again after
    /// [`PnicError::WouldBlock`].
    pub fn tx_fd(&self) -> BorrowedFd<'_> {
        self.tx.as_fd()
    }

    /// Reads and clears the error the kernel left on each of the port's sockets
    /// (`SO_ERROR`): `ENETDOWN` when the link went down, as it does when the interface is
    /// set down or leaves the namespace. The kernel keeps that error until someone reads it,
    /// and poll(2) reports the socket ready (`POLLERR`) for as long as it stays, so a caller
    /// that sleeps in poll on [`Pnic::rx_fds`] or [`Pnic::tx_fd`] must take it when poll says
    /// so, or never sleep again. A ring's consumer never reads the socket, which would take
    /// it. Returns how many sockets had one; [`PnicStats::socket_errors`] counts them.
    pub fn take_socket_errors(&self) -> u32 {
        let mut n = 0;
        let frame = self.frx.as_ref().map(|f| f.sock.as_fd());
        let rings = self.queues.iter().map(|q| q.rx.as_fd());
        for fd in frame.into_iter().chain(rings).chain([self.tx.as_fd()]) {
            if let Some(errno) = take_socket_error(fd) {
                n += 1;
                self.socket_errors.set(self.socket_errors.get() + 1);
                self.last_socket_errno.set(errno);
            }
        }
        n
    }

    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Ring slots actually set up (the requested count rounded up to whole blocks).
    /// V3: the kernel's frame count (its `tp_frame_nr`, 2 KiB a frame).
    /// With several queues, the slots of all of them.
    pub fn frame_nr(&self) -> u32 {
        self.queues.iter().map(|q| q.ring.frame_nr()).sum()
    }

    /// Bytes per slot; V3: the longest frame a block takes whole.
    pub fn frame_size(&self) -> u32 {
        match &self.queues[0].ring {
            Rx::V2(r) => r.geometry().frame_size,
            Rx::V3(r) => r.geometry().max_frame(),
        }
    }

    /// The V3 ring's blocks, `None` for a V2 ring.
    pub fn blocks(&self) -> Option<BlockGeometry> {
        match &self.queues[0].ring {
            Rx::V2(_) => None,
            Rx::V3(r) => Some(r.geometry()),
        }
    }

    /// Whether a received frame is waiting in the ring (user space's view: no system call).
    /// The daemon looks here before it sleeps, so the socket need not stay registered with
    /// epoll: a registered socket runs the wake-up callback for every frame the kernel puts in
    /// the ring, also while the daemon is busy and nobody waits.
    pub fn rx_ready(&self) -> bool {
        if let Some(f) = &self.frx {
            let mut b = [0u8; 1];
            // SAFETY: a one-byte writable buffer; MSG_PEEK leaves the frame queued.
            let r = unsafe {
                libc::recv(
                    f.sock.as_raw_fd(),
                    b.as_mut_ptr().cast(),
                    1,
                    libc::MSG_PEEK | libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                )
            };
            return r > 0;
        }
        self.served().any(|q| q.ring.head_ready())
    }

    /// Slots leased out by [`RxFrame::take`] and not yet handed back.
    pub fn leases(&self) -> u32 {
        self.queues.iter().map(|q| q.ring.leases()).sum()
    }

    /// Whether a lease must go before sleeping on [`Pnic::rx_fd`] once the ring is empty: with
    /// the newest frame's slot leased the socket reports itself readable (the kernel looks at
    /// the slot before the one it fills next), and with the next slot leased the kernel, come
    /// round the ring, drops every frame until it is handed back. Hand leases back or
    /// [`Buf::detach`] them first.
    pub fn lease_in_the_way(&self) -> bool {
        if let Some(f) = &self.frx {
            // Frame mode: the port stops when it has no buffer left to receive into.
            return f.src.free() < FRAME_BATCH;
        }
        // A paused queue's socket is not slept on, and the kernel stopping at its lease
        // holds back only the frames that wait for the paused guest anyway.
        self.served().any(|q| match &q.ring {
            Rx::V2(r) => r.leases() > 0 && r.lease_in_the_way(),
            Rx::V3(r) => r.hold_in_the_way(),
        })
    }

    /// Whether the oldest lease still out was taken more than three quarters of the ring ago
    /// ([`LEASE_HORIZON`]): the kernel, filling the ring in order, comes round to its slot
    /// within a quarter of a ring's worth of frames, and drops every frame from then until
    /// the lease is handed back. [`Buf::detach`] the old leases before that.
    pub fn lease_aging(&mut self) -> bool {
        if let Some(f) = &self.frx {
            return f.src.free() < f.src.total() / 4;
        }
        let paused = self.paused;
        (self.queues.iter_mut().enumerate())
            .filter(|(i, _)| !in_mask(paused, *i))
            .any(|(_, q)| match &mut q.ring {
                Rx::V2(r) => {
                    let n = r.geometry().frame_nr;
                    r.oldest_lease_age() > n - n / LEASE_HORIZON
                }
                Rx::V3(r) => {
                    let n = r.geometry().block_nr;
                    r.oldest_hold_age() > n - n / LEASE_HORIZON
                }
            })
    }

    /// One NAPI poll: hands at most `budget` frames to `f`, releasing each slot back to the
    /// kernel right after `f` returns, unless `f` took it ([`RxFrame::take`]). Returns the
    /// number handed over (== `budget` means "more may be waiting, poll again"). Slots with an
    /// invalid header are released, counted in `rx_bad`, and not counted against the budget
    /// (at most one ring's worth per call).
    ///
    /// With several queues the budget is shared out in rounds: each queue in turn gives at
    /// most an equal share (`budget` ÷ queues, at least 1) per round, until the budget is used
    /// or a round finds every queue empty, and the queue that goes first moves on by one at
    /// every round. A queue with a long backlog thus gets no more of a poll than one with a
    /// short one, as with a NIC whose queues each have their own NAPI weight; frames of one
    /// queue keep their order.
    pub fn poll(&mut self, budget: usize, mut f: impl FnMut(RxFrame<'_>)) -> usize {
        let (nq, mut next) = (self.queues.len(), self.next_queue);
        let n = poll_in_rounds(nq, budget, self.paused, &mut next, |q, want| {
            self.poll_queue(q, want, &mut f)
        });
        self.next_queue = next;
        n
    }

    /// [`Pnic::poll_stamped`] of receive queue `q` alone (frame mode has one queue, 0).
    ///
    /// # Panics
    /// When `q` is not below [`Pnic::queue_count`].
    pub fn poll_queue_stamped(
        &mut self,
        q: usize,
        budget: usize,
        mut f: impl FnMut(VirtioNetHdr, Buf, Option<u64>),
    ) -> usize {
        assert!(q < self.queues.len(), "queue {q} of {}", self.queues.len());
        if self.frx.is_some() {
            return self.poll_stamped(budget, f);
        }
        if self.queue_paused(q) {
            return 0;
        }
        self.poll_queue(q, budget, &mut stamped(&mut f))
    }

    /// [`Pnic::poll`] of queue `qi` alone.
    fn poll_queue(&mut self, qi: usize, budget: usize, f: &mut impl FnMut(RxFrame<'_>)) -> usize {
        let mut handed = 0;
        let q = &mut self.queues[qi];
        let mut bad_left = q.ring.frame_nr() as usize;
        let st = &mut self.rx_stats;
        let (counts, lease_cap) = (&self.lease_counts, q.lease_cap);
        while handed < budget {
            let r = q.ring.consume(|slot| match slot {
                Slot::Frame {
                    status,
                    len,
                    stamp_ns,
                    vnet,
                    data,
                } => {
                    let bytes = data.bytes().len();
                    let fr = RxFrame {
                        vnet,
                        data,
                        lease_cap,
                        counts,
                        csum_not_ready: status & libc::TP_STATUS_CSUMNOTREADY != 0,
                        csum_valid: status & libc::TP_STATUS_CSUM_VALID != 0,
                        truncated: (bytes as u64) < u64::from(len),
                        wire_len: len,
                        stamp_ns,
                    };
                    st.frames += 1;
                    st.bytes += bytes as u64;
                    st.truncated += u64::from(fr.truncated);
                    st.csum_not_ready += u64::from(fr.csum_not_ready);
                    st.gso += u64::from(fr.vnet.gso_type != pvnet_wire::vnet::GSO_NONE);
                    st.max_frame = st.max_frame.max(bytes as u32);
                    f(fr);
                    true
                }
                Slot::Bad => {
                    st.bad += 1;
                    false
                }
            });
            match r {
                None => break,
                Some(true) => {
                    handed += 1;
                    q.frames += 1;
                }
                Some(false) => {
                    bad_left -= 1;
                    if bad_left == 0 {
                        break;
                    }
                }
            }
        }
        handed
    }

    fn count_tx_err(&self, e: &PnicError) {
        match e {
            PnicError::WouldBlock | PnicError::DeviceBusy => {
                self.tx_would_block.set(self.tx_would_block.get() + 1)
            }
            _ => self.tx_errors.set(self.tx_errors.get() + 1),
        }
    }

    /// Sends one frame given as pieces (a chained packet), prefixed with `vnet`: one `sendmsg`
    /// with an iovec, no copy into a contiguous buffer. [`PnicError::WouldBlock`] on
    /// EAGAIN/ENOBUFS; other refusals (EINVAL for an inconsistent vnet header, EMSGSIZE for a
    /// non-GSO frame over the MTU, ENETDOWN) as [`PnicError::Io`].
    pub fn send(&self, vnet: &VirtioNetHdr, pieces: &[&[u8]]) -> Result<(), PnicError> {
        let r = self.send_inner(vnet, pieces);
        match &r {
            Ok(bytes) => {
                self.tx_frames.set(self.tx_frames.get() + 1);
                self.tx_bytes.set(self.tx_bytes.get() + *bytes);
            }
            Err(e) => self.count_tx_err(e),
        }
        r.map(|_| ())
    }

    fn send_inner(&self, vnet: &VirtioNetHdr, pieces: &[&[u8]]) -> Result<u64, PnicError> {
        if pieces.len() > MAX_PIECES {
            return Err(PnicError::io(
                "send: too many pieces",
                io::Error::from(io::ErrorKind::InvalidInput),
            ));
        }
        let hdr = vnet.to_bytes();
        let n = pieces.len() + 1;
        let mut stack = [EMPTY_IOV; STACK_IOV];
        let mut heap = Vec::new();
        let iov: &mut [libc::iovec] = if n <= STACK_IOV {
            &mut stack[..n]
        } else {
            heap.resize(n, EMPTY_IOV);
            &mut heap
        };
        let bytes = fill_iov(iov, &hdr, pieces);
        // SAFETY: msghdr is plain data; all-zero is a valid value (no address, no control).
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = n as _;
        // SAFETY: msg points to `n` iovecs describing live, readable buffers (hdr, pieces)
        // that outlive the call; the kernel only reads them.
        let r = unsafe { libc::sendmsg(self.tx.as_raw_fd(), &msg, libc::MSG_DONTWAIT) };
        if r < 0 {
            return Err(tx_error(last_err(), "sendmsg(AF_PACKET)"));
        }
        Ok(bytes)
    }

    /// Sends several frames with one `sendmmsg`. Returns how many were sent (from the front);
    /// fewer than `frames.len()` means the next one was refused: call again with the rest to
    /// learn why. An empty batch sends nothing. Errors only when the first frame is refused.
    pub fn send_batch(&self, frames: &[(VirtioNetHdr, &[&[u8]])]) -> Result<usize, PnicError> {
        if frames.is_empty() {
            return Ok(0);
        }
        if frames.iter().any(|(_, p)| p.len() > MAX_PIECES) {
            let e = PnicError::io(
                "send_batch: too many pieces",
                io::Error::from(io::ErrorKind::InvalidInput),
            );
            self.count_tx_err(&e);
            return Err(e);
        }
        let hdrs: Vec<[u8; VNET_HDR_LEN]> = frames.iter().map(|(v, _)| v.to_bytes()).collect();
        let total_iov: usize = frames.iter().map(|(_, p)| p.len() + 1).sum();
        let mut iov = vec![EMPTY_IOV; total_iov];
        let mut bytes = Vec::with_capacity(frames.len());
        let mut at = 0;
        for ((_, pieces), hdr) in frames.iter().zip(&hdrs) {
            let n = pieces.len() + 1;
            bytes.push(fill_iov(&mut iov[at..at + n], hdr, pieces));
            at += n;
        }
        let mut msgs: Vec<libc::mmsghdr> = Vec::with_capacity(frames.len());
        let mut at = 0;
        for (_, pieces) in frames {
            let n = pieces.len() + 1;
            // SAFETY: mmsghdr is plain data; all-zero is a valid value.
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_iov = iov[at..].as_mut_ptr();
            m.msg_hdr.msg_iovlen = n as _;
            msgs.push(m);
            at += n;
        }
        let vlen = u32::try_from(msgs.len()).unwrap_or(u32::MAX);
        // SAFETY: msgs holds `vlen` message headers whose iovecs point into `iov`, which
        // describes live, readable buffers (hdrs, pieces) outliving the call. The kernel writes
        // only msg_len in each entry.
        let r = unsafe {
            libc::sendmmsg(
                self.tx.as_raw_fd(),
                msgs.as_mut_ptr(),
                vlen as _,
                libc::MSG_DONTWAIT,
            )
        };
        if r < 0 {
            let e = tx_error(last_err(), "sendmmsg(AF_PACKET)");
            self.count_tx_err(&e);
            return Err(e);
        }
        let sent = r as usize;
        self.tx_frames.set(self.tx_frames.get() + sent as u64);
        self.tx_bytes
            .set(self.tx_bytes.get() + bytes[..sent].iter().sum::<u64>());
        Ok(sent)
    }

    /// Counters, including the kernel's `PACKET_STATISTICS` (read, reset in the kernel, and
    /// accumulated here).
    pub fn stats(&mut self) -> PnicStats {
        // In frame mode the kernel's counts are the frame socket's (kept in the first queue).
        match &self.frx {
            Some(f) => {
                let fd = f.sock.as_raw_fd();
                self.queues[0].read_kernel_stats(fd);
            }
            None => {
                for q in &mut self.queues {
                    let fd = q.rx.as_raw_fd();
                    q.read_kernel_stats(fd);
                }
            }
        }
        let kernel = |g: fn(&RxQueue) -> u64| self.queues.iter().map(g).sum::<u64>();
        let (tp_packets, tp_drops, tp_frozen) = (
            kernel(|q| q.tp_packets),
            kernel(|q| q.tp_drops),
            kernel(|q| q.tp_frozen),
        );
        let (mut blocks, mut bad_blocks, mut held, mut hold_stops) = (0, 0, 0, 0);
        for q in &self.queues {
            if let Rx::V3(r) = &q.ring {
                blocks += r.blocks;
                bad_blocks += r.bad_blocks;
                held += r.blocks_held();
                hold_stops += r.hold_stops;
            }
        }
        let s = &self.rx_stats;
        PnicStats {
            rx_frames: s.frames,
            rx_bytes: s.bytes,
            rx_truncated: s.truncated,
            rx_bad: s.bad,
            rx_csum_not_ready: s.csum_not_ready,
            rx_gso: s.gso,
            rx_max_frame: s.max_frame,
            rx_leased: self.lease_counts.leased.get(),
            rx_lease_copies: self.lease_counts.copied.get(),
            rx_leases_outstanding: self.leases(),
            tx_frames: self.tx_frames.get(),
            tx_bytes: self.tx_bytes.get(),
            tx_would_block: self.tx_would_block.get(),
            tx_sndbuf: self.tx_sndbuf,
            tx_errors: self.tx_errors.get(),
            tp_packets,
            tp_drops,
            rx_blocks: blocks,
            rx_bad_blocks: bad_blocks,
            rx_blocks_held: held,
            rx_hold_stops: hold_stops,
            tp_ring_frozen: tp_frozen,
            socket_errors: self.socket_errors.get(),
            last_socket_errno: self.last_socket_errno.get(),
        }
    }
}

/// The pending error of socket `fd` (`SO_ERROR`, which the read clears), if it has one.
fn take_socket_error(fd: BorrowedFd<'_>) -> Option<i32> {
    socket_int(fd, libc::SO_ERROR).ok().filter(|&e| e != 0)
}

/// Fills `iov` (len = pieces + 1) with the vnet header and the pieces; returns the frame bytes.
fn fill_iov(iov: &mut [libc::iovec], hdr: &[u8; VNET_HDR_LEN], pieces: &[&[u8]]) -> u64 {
    debug_assert_eq!(iov.len(), pieces.len() + 1);
    iov[0] = libc::iovec {
        iov_base: hdr.as_ptr().cast_mut().cast(),
        iov_len: hdr.len(),
    };
    let mut bytes = 0u64;
    for (v, p) in iov[1..].iter_mut().zip(pieces) {
        *v = libc::iovec {
            iov_base: p.as_ptr().cast_mut().cast(),
            iov_len: p.len(),
        };
        bytes += p.len() as u64;
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_errors_without_interface() {
        let e = Pnic::open(&PnicConfig::new("pvnet-nonexistent0")).unwrap_err();
        assert!(matches!(e, PnicError::NoSuchInterface(ref n) if n == "pvnet-nonexistent0"));
        let e = Pnic::open(&PnicConfig::new("")).unwrap_err();
        assert!(matches!(e, PnicError::NoSuchInterface(_)));
        let e = Pnic::open(&PnicConfig::new("a\0b")).unwrap_err();
        assert!(matches!(e, PnicError::NoSuchInterface(_)));
        let bad = PnicConfig {
            frame_size: 100,
            ..PnicConfig::new("lo")
        };
        assert!(matches!(Pnic::open(&bad), Err(PnicError::InvalidConfig(_))));
    }

    #[test]
    fn open_lo_or_permission_denied() {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        match Pnic::open(&PnicConfig {
            frame_nr: 16,
            ..PnicConfig::new("lo")
        }) {
            Ok(p) => {
                assert!(root);
                assert_eq!(p.frame_nr(), 32, "rounded up to one whole block");
                assert!(p.ifindex() > 0);
            }
            Err(e) => {
                assert!(!root, "root must be able to open lo: {e}");
                assert!(matches!(e, PnicError::PermissionDenied), "{e}");
            }
        }
    }

    #[test]
    fn slots_follow_the_mtu() {
        assert_eq!(frame_size_for_mtu(1500), DEFAULT_FRAME_SIZE);
        assert_eq!(frame_size_for_mtu(1570), DEFAULT_FRAME_SIZE);
        assert_eq!(frame_size_for_mtu(1571), 1680);
        assert_eq!(frame_size_for_mtu(9000), 9104);
        assert_eq!(frame_size_for_mtu(68), DEFAULT_FRAME_SIZE);
        assert!(frame_size_for_mtu(u32::MAX) >= DEFAULT_FRAME_SIZE);
        // Every MTU a Linux device takes: a tagged full frame fits after the kernel's headers,
        // in a slot of the ring's alignment, with less than one alignment unit to spare.
        for mtu in 68..=65535u32 {
            let fs = frame_size_for_mtu(mtu);
            assert!(fs >= mtu + 18 + 76, "MTU {mtu}: slot {fs}");
            assert_eq!(fs % libc::TPACKET_ALIGNMENT as u32, 0);
            assert!(
                fs == DEFAULT_FRAME_SIZE || fs < mtu + SLOT_OVERHEAD + 16,
                "MTU {mtu}"
            );
        }
    }

    #[test]
    fn gro_slots_hold_what_capped_gro_builds() {
        assert_eq!(gro_frame_size_for_mtu(1500), GRO_FRAME_SIZE);
        assert_eq!(gro_frame_size_for_mtu(9000), GRO_FRAME_SIZE);
        assert_eq!(gro_frame_size_for_mtu(65535), frame_size_for_mtu(65535));
        // The kernel puts the MAC header 76 bytes in: 65,460 bytes fit; 4 are kept for a tag.
        assert_eq!(max_frame_in(GRO_FRAME_SIZE), 65_456);
        assert_eq!(gro_max_size_for(GRO_FRAME_SIZE), 65_442);
        // GRO's largest packet is gro_max_size - 1 bytes from the network header on; with the
        // Ethernet header and a tag it still fits the slot after the kernel's 76 bytes.
        for fs in [GRO_FRAME_SIZE, frame_size_for_mtu(65535)] {
            assert!(gro_max_size_for(fs) - 1 + 18 + 76 <= fs, "{fs}");
        }
        // The largest aggregate at the standard MSS is not cut by the cap.
        assert!(45 * 1448 + 52 < gro_max_size_for(GRO_FRAME_SIZE));
        // 64 KiB slots: one per 16-page block, nothing unused, the count exact.
        let g = Geometry::new(GRO_FRAME_SIZE, GRO_FRAME_NR, 4096).unwrap();
        assert_eq!((g.block_size, g.frames_per_block()), (65536, 1));
        assert_eq!((g.frame_nr, g.map_len()), (1024, 64 << 20));
    }

    /// One [`poll_in_rounds`] over queues with these backlogs: what each queue gave.
    fn rounds(backlog: &mut [usize], budget: usize, paused: u32, next: &mut usize) -> Vec<usize> {
        let mut got = vec![0; backlog.len()];
        let n = poll_in_rounds(backlog.len(), budget, paused, next, |q, want| {
            assert_eq!(paused & (1 << q), 0, "paused queue {q} asked");
            let k = want.min(backlog[q]);
            backlog[q] -= k;
            got[q] += k;
            k
        });
        assert_eq!(n, got.iter().sum::<usize>());
        got
    }

    /// The budget is shared out evenly whatever the backlogs, what one queue cannot use goes
    /// to the others, and the first turn moves round.
    #[test]
    fn rounds_share_the_budget() {
        let run = |backlog: &mut [usize], budget: usize, next: &mut usize| {
            rounds(backlog, budget, 0, next)
        };
        let mut next = 0;
        // A long backlog gets no more than a short one.
        assert_eq!(
            run(&mut [1000, 16, 16, 16], 64, &mut next),
            [16, 16, 16, 16]
        );
        // What an empty queue leaves goes to the others, in rounds of 16.
        assert_eq!(run(&mut [1000, 0, 0, 8], 64, &mut next), [56, 0, 0, 8]);
        // Nothing waiting: one round, nothing taken.
        assert_eq!(run(&mut [0, 0, 0], 64, &mut next), [0, 0, 0]);
        // 64 frames over 3 queues: shares of 21, and the odd frame goes to each in turn.
        let mut next = 0;
        let mut backlog = [1000, 1000, 1000];
        let firsts: Vec<Vec<usize>> = (0..3).map(|_| run(&mut backlog, 64, &mut next)).collect();
        assert_eq!(
            firsts,
            [vec![21, 22, 21], vec![22, 21, 21], vec![21, 21, 22]]
        );
        // One queue: the whole budget in one call.
        let mut next = 0;
        assert_eq!(run(&mut [1000], 64, &mut next), [64]);
    }

    /// A paused queue is not asked, and the budget is shared between the others.
    #[test]
    fn rounds_skip_paused_queues() {
        let mut next = 0;
        // Queue 1 paused: shares of 21 over the three others, the odd frame going round.
        let got = rounds(&mut [1000, 1000, 1000, 1000], 64, 0b0010, &mut next);
        assert_eq!(got[1], 0);
        assert_eq!(got.iter().sum::<usize>(), 64);
        assert!(
            got.iter().all(|&n| n == 0 || (21..=22).contains(&n)),
            "{got:?}"
        );
        // All paused: nothing asked, nothing taken.
        assert_eq!(rounds(&mut [5, 5], 64, 0b11, &mut next), [0, 0]);
        // A single paused queue gives nothing either; bits beyond the queues change nothing.
        assert_eq!(rounds(&mut [5], 64, 0b1, &mut next), [0]);
        assert_eq!(rounds(&mut [5, 5], 64, 0b100, &mut next), [5, 5]);
    }

    #[test]
    fn error_messages() {
        let e = PnicError::io("PACKET_RX_RING", io::Error::from_raw_os_error(libc::ENOMEM));
        assert!(e.to_string().starts_with("PACKET_RX_RING: "));
        assert_eq!(e.raw_os_error(), Some(libc::ENOMEM));
    }
}
