//! The ioreq page and the vCPU ↔ device-model round trip (Xen `public/hvm/ioreq.h`).
//!
//! An HVM guest's port access that the "hypervisor" cannot handle itself goes to the device model
//! (qemu-dm) as an I/O request in a page shared by the two, one slot per vCPU, announced by an
//! event channel; the vCPU waits until the device model answers through the same slot (Zhang, Li and Guan,
//! section III.A, steps 2–8). In pvnet the vCPU is a thread of the HVM guest process and the
//! device model another process; both map the page.
//!
//! # The page
//! [`IoreqPage::create`] (the toolstack) makes a sealed memfd of one page, or more when the device
//! needs more shared state; the guest process and the device-model process map it with
//! [`IoreqPage::from_fd`]. Byte layout:
//!
//! | offset | contents |
//! |---|---|
//! | `32 × v` for `v < nr_vcpus` | vCPU `v`'s `struct ioreq` (Xen's `shared_iopage.vcpu_ioreq[v]`) |
//! | [`DEVICE_AREA_OFFSET`] (1024) to the end | device state shared by the vCPU's fast path and the device model |
//!
//! `struct ioreq` is Xen's, 32 bytes, little-endian: `addr` u64 @0, `data` u64 @8, `count` u32
//! @16, `size` u32 @20, `vp_eport` u32 @24, `_pad0` u16 @28, a bitfield byte @30 (`state:4`
//! in bits 0–3, `data_is_ptr:1` bit 4, `dir:1` bit 5, `df:1` bit 6, `_pad1:1` bit 7: the x86-64
//! SysV ABI allocates bitfields from the least significant bit), `type` u8 @31. Up to
//! [`MAX_VCPUS`] slots fit before the device area. (This is the layout of current Xen. The
//! Xen 3.0.4 the NE2000 paper (Zhang, Li and Guan) modified had 64-bit `size`/`count`, an `io_count`, and `vp_eport` in a
//! `vcpu_iodata` wrapper next to the request; the paper put `ne_shared` in that wrapper. Here the
//! slots keep Xen's stride and the device state goes after them.) The device area holds what the paper calls
//! `vcpu_iodata.ne_shared` (section IV.C.1): any `#[repr(C)]` struct of atomics
//! ([`SharedPlain`]), placed with the bounds- and alignment-checked [`IoreqPage::device_state`]
//! (a borrow) or [`DeviceState`] (a handle owning the page).
//!
//! # The protocol
//! The state nibble is the handshake, as in Xen's `hvm_send_ioreq` / `hvm_wait_for_io` and
//! QEMU's `cpu_get_ioreq` / `cpu_handle_ioreq`:
//!
//! 1. vCPU ([`IoreqClient::round_trip`]): the slot must be `NONE`; it writes the fields, then the
//!    state byte as `READY` with *release* ordering (Xen's `wmb()` before `p->state = READY`),
//!    and notifies the event channel.
//! 2. Device model ([`IoreqServer::next`]): loads the state byte with *acquire* ordering (QEMU's
//!    `xen_rmb()` after seeing `READY`), copies the slot out once, writes `INPROCESS`, validates
//!    the copy.
//! 3. Device model ([`IoreqServer::complete`]): writes `data`, then the state byte as
//!    `IORESP_READY` with *release* ordering, and notifies.
//! 4. vCPU: sees `IORESP_READY` with *acquire* ordering, reads `data`, writes `NONE`.
//!
//! Waiting blocks on the event channel's eventfd (after an optional, measured spin,
//! [`IoreqClient::set_spin`]). Wake-ups are never lost: a waiter clears the eventfd *before* it
//! re-reads the state, and the other side writes the state *before* it notifies.
//!
//! # Trust
//! The slot is written by the guest process, so the device model treats it as hostile. The slot
//! is read at exactly one place, `copy_out` (the state byte once, then every field once, into a
//! [`RawIoreq`] value); only that copy is validated and used; [`IoreqServer::complete`] writes
//! the slot and reads nothing. A request that fails validation — size not 1, 2, 4 or 8, count 0
//! or above the bound, a non-pointer request with a count other than 1, an unknown type, a port
//! outside the 64 KiB port space, a `data_is_ptr` range outside guest memory, an event-channel
//! port that is not this vCPU's — is answered at once (all ones for a read, like a read of a port
//! no device decodes) so the vCPU never hangs, and counted by reason ([`Refusal`]). Nothing a
//! slot contains makes the device model panic.
//!
//! The vCPU side trusts the device model no further than it must: a state it does not expect is
//! an error, and a device model that dies ([`IoreqClient::watch_peer`]) or does not answer within
//! the timeout ([`IoreqClient::set_timeout`]) gives an error rather than a hang.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{
    AtomicI16, AtomicI32, AtomicI64, AtomicI8, AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use crate::evtchn::EvtchnEnd;
use crate::exit::now_ns;
use crate::foreign::{ForeignMemory, Rep};
use crate::mem::GuestMemory;
use crate::{Pfn, Port, PAGE_SIZE};

/// `IOREQ_READ`: the device produces the data (`IN`, `rep ins`).
pub const IOREQ_READ: u8 = 1;
/// `IOREQ_WRITE`: the device consumes the data (`OUT`, `rep outs`).
pub const IOREQ_WRITE: u8 = 0;

/// `STATE_IOREQ_NONE`: the slot is free.
pub const STATE_IOREQ_NONE: u8 = 0;
/// `STATE_IOREQ_READY`: the vCPU filled the slot; the device model may take it.
pub const STATE_IOREQ_READY: u8 = 1;
/// `STATE_IOREQ_INPROCESS`: the device model took the request.
pub const STATE_IOREQ_INPROCESS: u8 = 2;
/// `STATE_IORESP_READY`: the device model answered; the vCPU may read `data`.
pub const STATE_IORESP_READY: u8 = 3;

/// `IOREQ_TYPE_PIO`: port I/O.
pub const IOREQ_TYPE_PIO: u8 = 0;
/// `IOREQ_TYPE_COPY`: memory-mapped I/O.
pub const IOREQ_TYPE_COPY: u8 = 1;

/// `sizeof(struct ioreq)`.
pub const IOREQ_SIZE: usize = 32;
/// Most vCPU slots in a page: the slots end where the device area begins.
pub const MAX_VCPUS: u32 = 32;
/// Offset of the device area in the ioreq page (after [`MAX_VCPUS`] slots).
pub const DEVICE_AREA_OFFSET: usize = MAX_VCPUS as usize * IOREQ_SIZE;
/// Most bytes one request may move (`count × size`): 64 KiB, the reach of a 16-bit DMA byte
/// count such as the NE2000's remote byte count registers.
pub const MAX_REP_BYTES: u64 = 64 * 1024;
/// Device-model timeout a new [`IoreqClient`] starts with.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

const STATE_MASK: u8 = 0x0f;
const BIT_DATA_IS_PTR: u8 = 1 << 4;
const BIT_DIR: u8 = 1 << 5;
const BIT_DF: u8 = 1 << 6;

/// One `struct ioreq` in shared memory, every field an atomic of the field's own width (so the
/// two processes never race on plain memory, and each field is read or written in one access).
#[repr(C)]
struct IoreqSlot {
    addr: AtomicU64,
    data: AtomicU64,
    count: AtomicU32,
    size: AtomicU32,
    vp_eport: AtomicU32,
    pad0: AtomicU16,
    /// `state:4 data_is_ptr:1 dir:1 df:1 _pad1:1`.
    bits: AtomicU8,
    type_: AtomicU8,
}

const _: () = assert!(std::mem::size_of::<IoreqSlot>() == IOREQ_SIZE);
const _: () = assert!(DEVICE_AREA_OFFSET < PAGE_SIZE);

/// The contents of a slot exactly as found (or as to be written), unvalidated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RawIoreq {
    /// `addr`: port number or physical address.
    pub addr: u64,
    /// `data`: the value, or the guest-physical address of the data when `data_is_ptr`.
    pub data: u64,
    /// `count`: repetitions (`rep` prefix).
    pub count: u32,
    /// `size`: bytes per item.
    pub size: u32,
    /// `vp_eport`: the event channel the vCPU notifies on.
    pub vp_eport: u32,
    /// `_pad0`.
    pub pad0: u16,
    /// The bitfield byte: `state` in bits 0–3, `data_is_ptr` bit 4, `dir` bit 5, `df` bit 6.
    pub bits: u8,
    /// `type`.
    pub type_: u8,
}

impl RawIoreq {
    /// The `state` field.
    pub fn state(&self) -> u8 {
        self.bits & STATE_MASK
    }

    /// The `data_is_ptr` field.
    pub fn data_is_ptr(&self) -> bool {
        self.bits & BIT_DATA_IS_PTR != 0
    }

    /// The `dir` field (1 = read).
    pub fn dir(&self) -> u8 {
        u8::from(self.bits & BIT_DIR != 0)
    }

    /// The `df` field.
    pub fn df(&self) -> bool {
        self.bits & BIT_DF != 0
    }

    /// The 32 bytes of `struct ioreq` as C lays them out on x86-64.
    pub fn to_bytes(&self) -> [u8; IOREQ_SIZE] {
        let mut b = [0u8; IOREQ_SIZE];
        b[0..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..16].copy_from_slice(&self.data.to_le_bytes());
        b[16..20].copy_from_slice(&self.count.to_le_bytes());
        b[20..24].copy_from_slice(&self.size.to_le_bytes());
        b[24..28].copy_from_slice(&self.vp_eport.to_le_bytes());
        b[28..30].copy_from_slice(&self.pad0.to_le_bytes());
        b[30] = self.bits;
        b[31] = self.type_;
        b
    }
}

/// Direction of a request, from the device's point of view of the data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dir {
    /// `IOREQ_WRITE`: guest to device.
    Write,
    /// `IOREQ_READ`: device to guest.
    Read,
}

/// Kind of request: the types this device model serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IoType {
    /// `IOREQ_TYPE_PIO`: `addr` is a port.
    Pio,
    /// `IOREQ_TYPE_COPY`: `addr` is a physical address (MMIO).
    Copy,
}

/// Why a request was refused. Each reason has its own counter in [`ServerStats`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Refusal {
    /// `size` not 1, 2, 4 or 8.
    #[error("size is not 1, 2, 4 or 8")]
    BadSize,
    /// `count` 0, above [`MAX_REP_BYTES`] worth of items, or not 1 without `data_is_ptr`.
    #[error("count out of bounds")]
    BadCount,
    /// `type` other than PIO or COPY.
    #[error("unknown type")]
    BadType,
    /// A port access beyond the 64 KiB port space.
    #[error("port out of range")]
    BadAddr,
    /// A `data_is_ptr` range outside guest memory (or running below 0 / past `u64::MAX`).
    #[error("data pointer range outside guest memory")]
    BadPtr,
    /// A `data_is_ptr` request to a device model given no guest memory.
    #[error("data pointer with no guest memory to use")]
    NoMemory,
    /// `vp_eport` is not this vCPU's event-channel port.
    #[error("event channel port is not this vCPU's")]
    BadPort,
}

impl Refusal {
    /// Every reason, in counter order.
    pub const ALL: [Refusal; 7] = [
        Refusal::BadSize,
        Refusal::BadCount,
        Refusal::BadType,
        Refusal::BadAddr,
        Refusal::BadPtr,
        Refusal::NoMemory,
        Refusal::BadPort,
    ];

    /// The counter's name.
    pub fn name(self) -> &'static str {
        match self {
            Refusal::BadSize => "refused_bad_size",
            Refusal::BadCount => "refused_bad_count",
            Refusal::BadType => "refused_bad_type",
            Refusal::BadAddr => "refused_bad_addr",
            Refusal::BadPtr => "refused_bad_ptr",
            Refusal::NoMemory => "refused_no_memory",
            Refusal::BadPort => "refused_bad_port",
        }
    }
}

/// A validated I/O request (what the device model serves, and what a vCPU sends).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ioreq {
    /// Port (PIO) or physical address (COPY).
    pub addr: u64,
    /// The value written (a write without `data_is_ptr`; masked to `size` bytes by the device
    /// model), or the guest-physical address of item 0 (`data_is_ptr`); unused for a plain read.
    pub data: u64,
    /// Items: 1 unless `data_is_ptr`.
    pub count: u32,
    /// Bytes per item: 1, 2, 4 or 8.
    pub size: u32,
    /// Direction.
    pub dir: Dir,
    /// Type.
    pub kind: IoType,
    /// `data` is the guest-physical address of the data (`rep ins` / `rep outs`).
    pub data_is_ptr: bool,
    /// Direction flag: items at decreasing addresses.
    pub df: bool,
}

fn size_mask(size: u32) -> u64 {
    match size {
        1 => 0xff,
        2 => 0xffff,
        4 => 0xffff_ffff,
        _ => u64::MAX,
    }
}

impl Ioreq {
    /// `IN` of `size` bytes from `port`.
    pub fn pio_in(port: u16, size: u32) -> Ioreq {
        Ioreq {
            addr: u64::from(port),
            data: 0,
            count: 1,
            size,
            dir: Dir::Read,
            kind: IoType::Pio,
            data_is_ptr: false,
            df: false,
        }
    }

    /// `OUT` of the low `size` bytes of `value` to `port`.
    pub fn pio_out(port: u16, size: u32, value: u64) -> Ioreq {
        Ioreq {
            data: value,
            dir: Dir::Write,
            ..Ioreq::pio_in(port, size)
        }
    }

    /// `rep ins`: `count` items of `size` bytes from `port` into guest memory at `gpa`
    /// (going down when `df`).
    pub fn pio_ins(port: u16, size: u32, count: u32, gpa: u64, df: bool) -> Ioreq {
        Ioreq {
            data: gpa,
            count,
            data_is_ptr: true,
            df,
            ..Ioreq::pio_in(port, size)
        }
    }

    /// `rep outs`: `count` items of `size` bytes from guest memory at `gpa` to `port`.
    pub fn pio_outs(port: u16, size: u32, count: u32, gpa: u64, df: bool) -> Ioreq {
        Ioreq {
            dir: Dir::Write,
            ..Ioreq::pio_ins(port, size, count, gpa, df)
        }
    }

    /// The guest-memory access of a `data_is_ptr` request, `None` otherwise.
    pub fn rep(&self) -> Option<Rep> {
        self.data_is_ptr.then_some(Rep {
            gpa: self.data,
            count: self.count,
            size: self.size,
            df: self.df,
        })
    }

    /// Checks everything that does not need guest memory or the event-channel port.
    pub fn check(&self) -> Result<(), Refusal> {
        if !matches!(self.size, 1 | 2 | 4 | 8) {
            return Err(Refusal::BadSize);
        }
        let bytes = u64::from(self.count) * u64::from(self.size);
        let count_ok = if self.data_is_ptr {
            self.count >= 1 && bytes <= MAX_REP_BYTES
        } else {
            self.count == 1
        };
        if !count_ok {
            return Err(Refusal::BadCount);
        }
        if self.kind == IoType::Pio
            && self
                .addr
                .checked_add(u64::from(self.size))
                .is_none_or(|end| end > 0x1_0000)
        {
            return Err(Refusal::BadAddr);
        }
        Ok(())
    }

    /// The slot contents for this request in `state`, notifying on `port`.
    fn to_raw(self, state: u8, port: Port) -> RawIoreq {
        let mut bits = state & STATE_MASK;
        if self.data_is_ptr {
            bits |= BIT_DATA_IS_PTR;
        }
        if self.dir == Dir::Read {
            bits |= BIT_DIR;
        }
        if self.df {
            bits |= BIT_DF;
        }
        RawIoreq {
            addr: self.addr,
            data: self.data,
            count: self.count,
            size: self.size,
            vp_eport: port.0,
            pad0: 0,
            bits,
            type_: match self.kind {
                IoType::Pio => IOREQ_TYPE_PIO,
                IoType::Copy => IOREQ_TYPE_COPY,
            },
        }
    }

    /// Decodes and checks a copied slot (everything but the guest-memory range).
    fn from_raw(raw: &RawIoreq, port: Port) -> Result<Ioreq, Refusal> {
        let kind = match raw.type_ {
            IOREQ_TYPE_PIO => IoType::Pio,
            IOREQ_TYPE_COPY => IoType::Copy,
            _ => return Err(Refusal::BadType),
        };
        let dir = if raw.dir() == IOREQ_READ {
            Dir::Read
        } else {
            Dir::Write
        };
        let mut req = Ioreq {
            addr: raw.addr,
            data: raw.data,
            count: raw.count,
            size: raw.size,
            dir,
            kind,
            data_is_ptr: raw.data_is_ptr(),
            df: raw.df(),
        };
        req.check()?;
        if raw.vp_eport != port.0 {
            return Err(Refusal::BadPort);
        }
        if !req.data_is_ptr && req.dir == Dir::Write {
            req.data &= size_mask(req.size);
        }
        Ok(req)
    }
}

/// A type that may live in shared memory written by another, untrusted process.
///
/// # Safety
/// Implement only for types that are `#[repr(C)]` (or `#[repr(transparent)]`) and made only of
/// implementors of this trait (integer atomics and arrays of them), so that
/// - every bit pattern, including all zeroes (a fresh page), is a valid value: the other process
///   can write anything at any time;
/// - all access goes through atomics: a `&T` to memory another process writes is sound;
/// - the type has no `Drop`, no pointers or references, and no invariant between fields that
///   safety depends on.
///
/// `AtomicBool` is not an implementor: only 0 and 1 are valid for it.
pub unsafe trait SharedPlain: Sync + Sized {}

// SAFETY: integer atomics are valid for every bit pattern, are accessed only atomically, and
// have no drop glue.
unsafe impl SharedPlain for AtomicU8 {}
// SAFETY: as for AtomicU8.
unsafe impl SharedPlain for AtomicU16 {}
// SAFETY: as for AtomicU8.
unsafe impl SharedPlain for AtomicU32 {}
// SAFETY: as for AtomicU8.
unsafe impl SharedPlain for AtomicU64 {}
// SAFETY: as for AtomicU8.
unsafe impl SharedPlain for AtomicI8 {}
// SAFETY: as for AtomicU8.
unsafe impl SharedPlain for AtomicI16 {}
// SAFETY: as for AtomicU8.
unsafe impl SharedPlain for AtomicI32 {}
// SAFETY: as for AtomicU8.
unsafe impl SharedPlain for AtomicI64 {}
// SAFETY: an array has its element's layout repeated with no padding, so it inherits every
// property of its element.
unsafe impl<T: SharedPlain, const N: usize> SharedPlain for [T; N] {}

/// Errors of the ioreq page and round trip.
#[derive(Debug, thiserror::Error)]
pub enum IoreqError {
    /// The vCPU has no slot in this page.
    #[error("vcpu {vcpu} out of range: the page has {nr_vcpus} slots")]
    BadVcpu {
        /// The vCPU asked for.
        vcpu: u32,
        /// Slots in the page.
        nr_vcpus: u32,
    },
    /// The vCPU's own request is malformed; nothing was sent.
    #[error("request not sent: {0}")]
    Invalid(Refusal),
    /// The slot was not free when a request was to be sent (an earlier round trip was
    /// abandoned, or someone else writes the slot).
    #[error("ioreq slot busy (state {0})")]
    SlotBusy(u8),
    /// While waiting, the slot went into a state the protocol does not allow there.
    #[error("unexpected ioreq state {0} while waiting for the answer")]
    BadState(u8),
    /// The device model did not answer in time.
    #[error("device model did not answer within {0:?}")]
    Timeout(Duration),
    /// The device model is gone (its liveness fd became readable or hung up).
    #[error("device model died")]
    PeerDied,
    /// [`IoreqServer::complete`] without a request in process.
    #[error("no request in process")]
    NotInProcess,
    /// A device-state type does not fit the device area at that offset.
    #[error(
        "device state of {size} bytes (align {align}) at offset {offset} does not fit the \
         {area}-byte device area"
    )]
    DeviceStateFit {
        /// `size_of::<T>()`.
        size: usize,
        /// `align_of::<T>()`.
        align: usize,
        /// Offset asked for, from the start of the device area.
        offset: usize,
        /// Bytes in the device area.
        area: usize,
    },
    /// A system call failed (notify, poll, mapping).
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// The shared ioreq page: vCPU slots and the device area (see the module docs).
#[derive(Debug)]
pub struct IoreqPage {
    mem: GuestMemory,
    nr_vcpus: u32,
}

fn invalid_input(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg.to_string())
}

impl IoreqPage {
    fn pages_for(device_bytes: usize) -> io::Result<u32> {
        let total = DEVICE_AREA_OFFSET
            .checked_add(device_bytes)
            .ok_or_else(|| invalid_input("device area too large"))?;
        u32::try_from(total.div_ceil(PAGE_SIZE)).map_err(|_| invalid_input("device area too large"))
    }

    fn check_vcpus(nr_vcpus: u32) -> io::Result<()> {
        if nr_vcpus == 0 || nr_vcpus > MAX_VCPUS {
            return Err(invalid_input("nr_vcpus must be 1..=MAX_VCPUS"));
        }
        Ok(())
    }

    /// Creates the page for `nr_vcpus` vCPUs (1 to [`MAX_VCPUS`]) with a device area of at
    /// least `device_bytes` (the first page's 3072 bytes, or whole extra pages beyond them),
    /// zeroed and sealed against resizing.
    pub fn create(name: &str, nr_vcpus: u32, device_bytes: usize) -> io::Result<IoreqPage> {
        Self::check_vcpus(nr_vcpus)?;
        let mem = GuestMemory::create(name, Self::pages_for(device_bytes)?)?;
        Ok(IoreqPage { mem, nr_vcpus })
    }

    /// Maps a page received from the toolstack: the memfd must be sealed against shrinking and a
    /// whole number of pages. `nr_vcpus` comes from the toolstack too (the page itself is
    /// writable by the guest, so it cannot say).
    pub fn from_fd(fd: OwnedFd, nr_vcpus: u32) -> io::Result<IoreqPage> {
        Self::check_vcpus(nr_vcpus)?;
        let mem = GuestMemory::from_fd(fd)?;
        Ok(IoreqPage { mem, nr_vcpus })
    }

    /// The memfd, to pass to the guest and the device model.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.mem.fd()
    }

    /// Number of vCPU slots in use.
    pub fn nr_vcpus(&self) -> u32 {
        self.nr_vcpus
    }

    /// Bytes in the device area.
    pub fn device_area_len(&self) -> usize {
        self.mem.pages() as usize * PAGE_SIZE - DEVICE_AREA_OFFSET
    }

    fn base(&self) -> *mut u8 {
        self.mem
            .page_ptr(Pfn(0))
            .expect("the page has at least one page")
    }

    fn slot(&self, vcpu: u32) -> Result<&IoreqSlot, IoreqError> {
        if vcpu >= self.nr_vcpus {
            return Err(IoreqError::BadVcpu {
                vcpu,
                nr_vcpus: self.nr_vcpus,
            });
        }
        // SAFETY: vcpu < nr_vcpus <= MAX_VCPUS, so the 32 bytes at 32 * vcpu lie before
        // DEVICE_AREA_OFFSET inside the first page of the mapping, which lives as long as
        // `self`; the page is page aligned, so the slot is 8-aligned as IoreqSlot requires;
        // IoreqSlot is made only of integer atomics (valid for any bit pattern, accessed only
        // atomically), so a shared reference to memory the other process writes is sound.
        Ok(unsafe {
            &*self
                .base()
                .add(vcpu as usize * IOREQ_SIZE)
                .cast::<IoreqSlot>()
        })
    }

    /// The `state` of vCPU `vcpu`'s slot (for diagnostics and tests).
    pub fn slot_state(&self, vcpu: u32) -> Result<u8, IoreqError> {
        Ok(self.slot(vcpu)?.bits.load(Ordering::Acquire) & STATE_MASK)
    }

    /// Writes `raw` into vCPU `vcpu`'s slot as-is, the state byte last with release ordering:
    /// what a guest process can do anyway, offered for tests and fuzzing of the device-model side.
    pub fn write_slot_raw(&self, vcpu: u32, raw: &RawIoreq) -> Result<(), IoreqError> {
        self.slot(vcpu)?.store(raw);
        Ok(())
    }

    /// The device state at the start of the device area. See [`IoreqPage::device_state_at`].
    pub fn device_state<T: SharedPlain>(&self) -> Result<&T, IoreqError> {
        self.device_state_at(0)
    }

    /// The device state `T` at `offset` bytes into the device area: checked to fit inside the
    /// area and to be aligned for `T`. Both processes that map the page see the same `T`; it
    /// starts zeroed.
    pub fn device_state_at<T: SharedPlain>(&self, offset: usize) -> Result<&T, IoreqError> {
        let size = std::mem::size_of::<T>();
        let align = std::mem::align_of::<T>();
        let area = self.device_area_len();
        let fits = offset.checked_add(size).is_some_and(|end| end <= area);
        // The area starts at a 1024-aligned offset of a page-aligned mapping; the sum cannot
        // overflow once `fits` holds.
        let aligned = fits && (DEVICE_AREA_OFFSET + offset).is_multiple_of(align);
        if !fits || !aligned {
            return Err(IoreqError::DeviceStateFit {
                size,
                align,
                offset,
                area,
            });
        }
        // SAFETY: offset + size_of::<T>() <= device_area_len, so the object lies inside the
        // mapping (which lives as long as `self`, bounding the returned borrow) and after the
        // vCPU slots; the address is aligned for T (checked above); T: SharedPlain is valid for
        // any bit pattern and accessed only through atomics, so a shared reference to memory the
        // other process writes is sound.
        Ok(unsafe { &*self.base().add(DEVICE_AREA_OFFSET + offset).cast::<T>() })
    }
}

/// A device state `T` in the device area that owns its page: what a device model or a vCPU's
/// fast path keeps, instead of a borrow of the [`IoreqPage`]. Dereferences to `&T`.
pub struct DeviceState<T: SharedPlain> {
    page: Arc<IoreqPage>,
    ptr: NonNull<T>,
}

impl<T: SharedPlain> DeviceState<T> {
    /// `T` at `offset` bytes into `page`'s device area, checked as in
    /// [`IoreqPage::device_state_at`].
    pub fn new(page: Arc<IoreqPage>, offset: usize) -> Result<DeviceState<T>, IoreqError> {
        let ptr = NonNull::from(page.device_state_at::<T>(offset)?);
        Ok(DeviceState { page, ptr })
    }

    /// The page the state lives in.
    pub fn page(&self) -> &Arc<IoreqPage> {
        &self.page
    }
}

impl<T: SharedPlain> std::ops::Deref for DeviceState<T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: `ptr` came from `device_state_at` on `self.page` (bounds and alignment
        // checked there), and the `Arc` keeps that mapping alive as long as `self`, which bounds
        // the returned borrow; T: SharedPlain makes a shared reference into memory the other
        // process writes sound.
        unsafe { self.ptr.as_ref() }
    }
}

// SAFETY: a `DeviceState<T>` is an `Arc` (Send + Sync) and a pointer used only as `&T`; T is
// Sync (a SharedPlain bound), so `&T` may be used from any thread, and sending the handle only
// moves the Arc.
unsafe impl<T: SharedPlain> Send for DeviceState<T> {}
// SAFETY: as for Send: `&DeviceState<T>` only hands out `&T`, and T is Sync.
unsafe impl<T: SharedPlain> Sync for DeviceState<T> {}

impl<T: SharedPlain> std::fmt::Debug for DeviceState<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceState")
            .field("type", &std::any::type_name::<T>())
            .field(
                "page_offset",
                &(self.ptr.as_ptr() as usize - self.page.base() as usize),
            )
            .finish()
    }
}

impl IoreqSlot {
    /// Writes every field, then the state byte with release ordering (Xen's `wmb()` before
    /// `state = READY`).
    fn store(&self, raw: &RawIoreq) {
        self.addr.store(raw.addr.to_le(), Ordering::Relaxed);
        self.data.store(raw.data.to_le(), Ordering::Relaxed);
        self.count.store(raw.count.to_le(), Ordering::Relaxed);
        self.size.store(raw.size.to_le(), Ordering::Relaxed);
        self.vp_eport.store(raw.vp_eport.to_le(), Ordering::Relaxed);
        self.pad0.store(raw.pad0.to_le(), Ordering::Relaxed);
        self.type_.store(raw.type_, Ordering::Relaxed);
        self.bits.store(raw.bits, Ordering::Release);
    }

    /// The device model's one read of the slot: the state byte with acquire ordering (QEMU's
    /// `xen_rmb()` after seeing READY); if it is READY, every other field once. `None` (and
    /// nothing else read) when the slot is not READY.
    fn copy_out(&self) -> Option<RawIoreq> {
        let bits = self.bits.load(Ordering::Acquire);
        if bits & STATE_MASK != STATE_IOREQ_READY {
            return None;
        }
        Some(RawIoreq {
            addr: u64::from_le(self.addr.load(Ordering::Relaxed)),
            data: u64::from_le(self.data.load(Ordering::Relaxed)),
            count: u32::from_le(self.count.load(Ordering::Relaxed)),
            size: u32::from_le(self.size.load(Ordering::Relaxed)),
            vp_eport: u32::from_le(self.vp_eport.load(Ordering::Relaxed)),
            pad0: u16::from_le(self.pad0.load(Ordering::Relaxed)),
            bits,
            type_: self.type_.load(Ordering::Relaxed),
        })
    }
}

/// Blocks until `wait` is readable, or `peer` is readable or hung up, or `timeout` passes
/// (`EINTR` is retried with the time left). Returns which of the two fired (`(wait, peer)`);
/// both false on timeout.
fn poll_two(
    wait: BorrowedFd<'_>,
    peer: Option<BorrowedFd<'_>>,
    timeout: Option<Duration>,
) -> io::Result<(bool, bool)> {
    let deadline = timeout.and_then(|d| Instant::now().checked_add(d));
    let n = if peer.is_some() { 2 } else { 1 };
    loop {
        let t = match deadline {
            // Round up to whole milliseconds, so a short remainder does not become a busy 0.
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                let ms = left.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32;
                PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
            }
            None => PollTimeout::NONE,
        };
        let mut fds = [
            PollFd::new(wait, PollFlags::POLLIN),
            PollFd::new(peer.unwrap_or(wait), PollFlags::POLLIN),
        ];
        match poll(&mut fds[..n], t) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
        let fired = |f: &PollFd<'_>| {
            f.revents().is_some_and(|r| {
                r.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR)
            })
        };
        return Ok((fired(&fds[0]), n == 2 && fired(&fds[1])));
    }
}

/// Counters of the vCPU side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClientStats {
    /// Requests put in the slot and notified.
    pub requests_sent: u64,
    /// Round trips completed with an answer.
    pub round_trips: u64,
    /// Nanoseconds spent waiting for answers (from notify to `IORESP_READY` seen).
    pub wait_ns: u64,
    /// Answers found while spinning, before blocking.
    pub spin_hits: u64,
    /// Times the vCPU blocked on the event channel.
    pub blocks: u64,
    /// Wake-ups that found no answer yet (a stale event).
    pub spurious_wakeups: u64,
    /// Requests refused locally before sending (malformed).
    pub refused_local: u64,
    /// Round trips that found the slot not free.
    pub slot_busy: u64,
    /// Round trips that saw a state not allowed while waiting.
    pub bad_state: u64,
    /// Round trips given up on a timeout.
    pub timeouts: u64,
    /// Round trips given up because the device model died.
    pub peer_deaths: u64,
}

/// The vCPU side: sends one request at a time through its slot and waits for the answer.
#[derive(Debug)]
pub struct IoreqClient {
    page: Arc<IoreqPage>,
    vcpu: u32,
    port: Port,
    evtchn: EvtchnEnd,
    timeout: Option<Duration>,
    spin_ns: u64,
    peer: Option<OwnedFd>,
    stats: ClientStats,
}

impl IoreqClient {
    /// The client of vCPU `vcpu`, notifying the device model through `evtchn`, whose port
    /// (`vp_eport`) is `port`. Starts with [`DEFAULT_TIMEOUT`], no spin and no peer watch.
    pub fn new(
        page: Arc<IoreqPage>,
        vcpu: u32,
        port: Port,
        evtchn: EvtchnEnd,
    ) -> Result<IoreqClient, IoreqError> {
        page.slot(vcpu)?;
        Ok(IoreqClient {
            page,
            vcpu,
            port,
            evtchn,
            timeout: Some(DEFAULT_TIMEOUT),
            spin_ns: 0,
            peer: None,
            stats: ClientStats::default(),
        })
    }

    /// How long a round trip waits for the answer; `None` waits forever (then only a
    /// [`IoreqClient::watch_peer`] fd can end the wait).
    pub fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.timeout = timeout;
    }

    /// Spin for up to `ns` nanoseconds watching the slot before blocking on the event channel
    /// (0, the default, blocks at once). Hits are counted in [`ClientStats::spin_hits`].
    pub fn set_spin(&mut self, ns: u64) {
        self.spin_ns = ns;
    }

    /// Watches `fd` for the device model's death: it becoming readable or hung up ends a
    /// waiting round trip with [`IoreqError::PeerDied`]. Use a pidfd of the device-model
    /// process, or the read end of a pipe whose only write end the device model holds.
    pub fn watch_peer(&mut self, fd: OwnedFd) {
        self.peer = Some(fd);
    }

    /// The vCPU index.
    pub fn vcpu(&self) -> u32 {
        self.vcpu
    }

    /// The event-channel end (its `wait_fd` receives the device model's answers).
    pub fn evtchn(&self) -> &EvtchnEnd {
        &self.evtchn
    }

    /// The page.
    pub fn page(&self) -> &Arc<IoreqPage> {
        &self.page
    }

    /// The counters.
    pub fn stats(&self) -> ClientStats {
        self.stats
    }

    /// Sends `req` and waits for the answer: the value read (a plain read, masked to `size`
    /// bytes), or whatever the device model left in `data` (writes, `data_is_ptr` requests).
    pub fn round_trip(&mut self, req: &Ioreq) -> Result<u64, IoreqError> {
        let stats = &mut self.stats;
        if let Err(r) = req.check() {
            stats.refused_local += 1;
            return Err(IoreqError::Invalid(r));
        }
        let slot = self.page.slot(self.vcpu)?;
        let state = slot.bits.load(Ordering::Acquire) & STATE_MASK;
        if state != STATE_IOREQ_NONE {
            stats.slot_busy += 1;
            return Err(IoreqError::SlotBusy(state));
        }
        slot.store(&req.to_raw(STATE_IOREQ_READY, self.port));
        self.evtchn.notify()?;
        stats.requests_sent += 1;
        let t0 = now_ns();
        let waiter = Waiter {
            slot,
            evtchn: &self.evtchn,
            peer: self.peer.as_ref().map(|p| p.as_fd()),
            timeout: self.timeout,
            spin_ns: self.spin_ns,
            t0,
        };
        let waited = waiter.wait(stats);
        stats.wait_ns += now_ns().saturating_sub(t0);
        waited?;
        let data = u64::from_le(slot.data.load(Ordering::Relaxed));
        slot.bits.store(STATE_IOREQ_NONE, Ordering::Release);
        stats.round_trips += 1;
        Ok(if req.dir == Dir::Read && !req.data_is_ptr {
            data & size_mask(req.size)
        } else {
            data
        })
    }
}

/// What a vCPU waits with, for one round trip.
struct Waiter<'a> {
    slot: &'a IoreqSlot,
    evtchn: &'a EvtchnEnd,
    peer: Option<BorrowedFd<'a>>,
    timeout: Option<Duration>,
    spin_ns: u64,
    /// When the request was sent.
    t0: u64,
}

impl Waiter<'_> {
    /// Ok(true): answered; Ok(false): still pending; an error for a state not allowed here.
    fn look(&self, stats: &mut ClientStats) -> Result<bool, IoreqError> {
        match self.slot.bits.load(Ordering::Acquire) & STATE_MASK {
            STATE_IORESP_READY => Ok(true),
            STATE_IOREQ_READY | STATE_IOREQ_INPROCESS => Ok(false),
            s => {
                stats.bad_state += 1;
                Err(IoreqError::BadState(s))
            }
        }
    }

    /// Waits for `IORESP_READY` (acquire), spinning first if configured.
    fn wait(&self, stats: &mut ClientStats) -> Result<(), IoreqError> {
        if self.spin_ns > 0 {
            while now_ns().saturating_sub(self.t0) < self.spin_ns {
                if self.look(stats)? {
                    stats.spin_hits += 1;
                    return Ok(());
                }
                std::hint::spin_loop();
            }
        }
        loop {
            // Clear pending events before looking, so an answer written after the look comes
            // with an event that wakes the poll below.
            self.evtchn.consume();
            if self.look(stats)? {
                return Ok(());
            }
            let remaining = match self.timeout {
                Some(t) => {
                    let spent = Duration::from_nanos(now_ns().saturating_sub(self.t0));
                    match t.checked_sub(spent) {
                        Some(r) if !r.is_zero() => Some(r),
                        _ => {
                            stats.timeouts += 1;
                            return Err(IoreqError::Timeout(t));
                        }
                    }
                }
                None => None,
            };
            stats.blocks += 1;
            let (woken, dead) = poll_two(self.evtchn.wait_fd(), self.peer, remaining)?;
            if dead {
                // An answer written just before the death still counts.
                if self.look(stats)? {
                    return Ok(());
                }
                stats.peer_deaths += 1;
                return Err(IoreqError::PeerDied);
            }
            if woken && self.slot.bits.load(Ordering::Acquire) & STATE_MASK != STATE_IORESP_READY {
                stats.spurious_wakeups += 1;
            }
        }
    }
}

/// Counters of the device-model side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ServerStats {
    /// Times the slot was copied out (one per request taken, valid or not).
    pub slot_copies: u64,
    /// Requests served and answered with [`IoreqServer::complete`].
    pub requests_served: u64,
    /// Nanoseconds between taking a request and completing it.
    pub service_ns: u64,
    /// Looks at the slot that found no READY request (a stale event, or a guest writing
    /// other states).
    pub spurious: u64,
    /// Refused: `size` not 1, 2, 4 or 8.
    pub refused_bad_size: u64,
    /// Refused: `count` out of bounds.
    pub refused_bad_count: u64,
    /// Refused: unknown `type`.
    pub refused_bad_type: u64,
    /// Refused: port beyond the port space.
    pub refused_bad_addr: u64,
    /// Refused: `data_is_ptr` range outside guest memory.
    pub refused_bad_ptr: u64,
    /// Refused: `data_is_ptr` with no guest memory.
    pub refused_no_memory: u64,
    /// Refused: `vp_eport` not this vCPU's.
    pub refused_bad_port: u64,
}

impl ServerStats {
    /// The counter of refusals for `reason`.
    pub fn refused(&self, reason: Refusal) -> u64 {
        match reason {
            Refusal::BadSize => self.refused_bad_size,
            Refusal::BadCount => self.refused_bad_count,
            Refusal::BadType => self.refused_bad_type,
            Refusal::BadAddr => self.refused_bad_addr,
            Refusal::BadPtr => self.refused_bad_ptr,
            Refusal::NoMemory => self.refused_no_memory,
            Refusal::BadPort => self.refused_bad_port,
        }
    }

    /// All refusals.
    pub fn refused_total(&self) -> u64 {
        Refusal::ALL.iter().map(|&r| self.refused(r)).sum()
    }

    fn refused_mut(&mut self, reason: Refusal) -> &mut u64 {
        match reason {
            Refusal::BadSize => &mut self.refused_bad_size,
            Refusal::BadCount => &mut self.refused_bad_count,
            Refusal::BadType => &mut self.refused_bad_type,
            Refusal::BadAddr => &mut self.refused_bad_addr,
            Refusal::BadPtr => &mut self.refused_bad_ptr,
            Refusal::NoMemory => &mut self.refused_no_memory,
            Refusal::BadPort => &mut self.refused_bad_port,
        }
    }
}

/// The request the device model has taken and not yet answered.
#[derive(Debug, Clone, Copy)]
struct InFlight {
    /// The bitfield byte as copied, so the answer keeps the request's flags.
    bits: u8,
    /// When it was taken.
    t0: u64,
}

/// The device-model side of one vCPU's slot.
#[derive(Debug)]
pub struct IoreqServer {
    page: Arc<IoreqPage>,
    vcpu: u32,
    port: Port,
    evtchn: EvtchnEnd,
    memory: Option<Arc<ForeignMemory>>,
    in_flight: Option<InFlight>,
    stats: ServerStats,
}

impl IoreqServer {
    /// The device model's end of vCPU `vcpu`'s slot; `evtchn` is its end of the vCPU's event
    /// channel, whose port (`vp_eport`) is `port`.
    pub fn new(
        page: Arc<IoreqPage>,
        vcpu: u32,
        port: Port,
        evtchn: EvtchnEnd,
    ) -> Result<IoreqServer, IoreqError> {
        page.slot(vcpu)?;
        Ok(IoreqServer {
            page,
            vcpu,
            port,
            evtchn,
            memory: None,
            in_flight: None,
            stats: ServerStats::default(),
        })
    }

    /// Gives the device model the guest's memory, for `data_is_ptr` requests; without it those
    /// are refused ([`Refusal::NoMemory`]).
    pub fn with_memory(mut self, memory: Arc<ForeignMemory>) -> IoreqServer {
        self.memory = Some(memory);
        self
    }

    /// The guest memory given with [`IoreqServer::with_memory`]: serve `data_is_ptr` requests
    /// with [`ForeignMemory::read_rep`] / [`ForeignMemory::write_rep`] on [`Ioreq::rep`].
    pub fn memory(&self) -> Option<&Arc<ForeignMemory>> {
        self.memory.as_ref()
    }

    /// The vCPU index.
    pub fn vcpu(&self) -> u32 {
        self.vcpu
    }

    /// The event-channel end: register `evtchn().wait_fd()` with epoll, and call `consume()`
    /// on it before [`IoreqServer::next`].
    pub fn evtchn(&self) -> &EvtchnEnd {
        &self.evtchn
    }

    /// The page.
    pub fn page(&self) -> &Arc<IoreqPage> {
        &self.page
    }

    /// The counters.
    pub fn stats(&self) -> ServerStats {
        self.stats
    }

    /// Whether a request was taken and not yet completed.
    pub fn in_process(&self) -> bool {
        self.in_flight.is_some()
    }

    /// Blocks until the vCPU notifies (or `timeout` passes: `Ok(false)`), clearing the event.
    pub fn wait(&self, timeout: Option<Duration>) -> io::Result<bool> {
        let (woken, _) = poll_two(self.evtchn.wait_fd(), None, timeout)?;
        if woken {
            self.evtchn.consume();
        }
        Ok(woken)
    }

    /// Takes the vCPU's request if one is READY: copies the slot once, marks it INPROCESS and
    /// validates the copy. A valid request is returned, to be answered with
    /// [`IoreqServer::complete`]; an invalid one is answered here (all ones for a read),
    /// counted, and `None` is returned, as when no request is READY. While a request is in
    /// process, returns `None` without looking at the slot.
    // Not an iterator: a request taken must be completed before the next one can be.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<Ioreq> {
        if self.in_flight.is_some() {
            return None;
        }
        let slot = self.page.slot(self.vcpu).expect("vcpu checked in new");
        let Some(raw) = slot.copy_out() else {
            self.stats.spurious += 1;
            return None;
        };
        self.stats.slot_copies += 1;
        let bits = raw.bits;
        slot.bits.store(
            (bits & !STATE_MASK) | STATE_IOREQ_INPROCESS,
            Ordering::Relaxed,
        );
        self.in_flight = Some(InFlight { bits, t0: now_ns() });
        match self.validate(&raw) {
            Ok(req) => Some(req),
            Err(reason) => {
                *self.stats.refused_mut(reason) += 1;
                // The answer to a refused request: a read of nothing reads all ones.
                let data = if raw.dir() == IOREQ_READ && !raw.data_is_ptr() {
                    u64::MAX
                } else {
                    raw.data
                };
                // A failed notify leaves the vCPU to its timeout; nothing better can be done.
                let _ = self.answer(data);
                None
            }
        }
    }

    fn validate(&self, raw: &RawIoreq) -> Result<Ioreq, Refusal> {
        let req = Ioreq::from_raw(raw, self.port)?;
        if let Some(rep) = req.rep() {
            let mem = self.memory.as_ref().ok_or(Refusal::NoMemory)?;
            mem.check_rep(&rep).map_err(|_| Refusal::BadPtr)?;
        }
        Ok(req)
    }

    /// Answers the request in process with `data`: the value for a plain read; for writes and
    /// `data_is_ptr` requests Xen's convention is to leave `data` as it was (pass `req.data`).
    pub fn complete(&mut self, data: u64) -> Result<(), IoreqError> {
        if self.in_flight.is_none() {
            return Err(IoreqError::NotInProcess);
        }
        self.stats.requests_served += 1;
        self.answer(data)
    }

    /// Writes `data` and IORESP_READY (release), notifies, and ends the in-flight request.
    /// Reads nothing from the slot: the flags come from the copy.
    fn answer(&mut self, data: u64) -> Result<(), IoreqError> {
        let f = self.in_flight.take().ok_or(IoreqError::NotInProcess)?;
        let slot = self.page.slot(self.vcpu).expect("vcpu checked in new");
        slot.data.store(data.to_le(), Ordering::Relaxed);
        slot.bits.store(
            (f.bits & !STATE_MASK) | STATE_IORESP_READY,
            Ordering::Release,
        );
        self.stats.service_ns += now_ns().saturating_sub(f.t0);
        self.evtchn.notify()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
