//! pvnet-hvm — an HVM guest on the emulated NE2000 (after Zhang Jian, Li Xiaoyong and Guan Haibing, "The Optimization of Xen Network
//! Virtualization"): the device model (qemu-dm) and
//! the vCPU with its trap handler, each runnable as a thread (tests) or as a process (pvnet).
//!
//! # The pieces
//!
//! - [`dm::DeviceModel`]: qemu-dm for one RTL8029. It owns the card's memory
//!   ([`pvnet_ne2000::Card`]), serves the vCPU's I/O requests from the ioreq page
//!   ([`pvnet_hv::ioreq::IoreqServer`]; `rep ins/outs` reach the guest's memory through
//!   [`pvnet_hv::foreign::ForeignMemory`] only), moves frames between the card and a
//!   [`FramePort`] (its side of the network), and raises the guest's interrupt over the device
//!   event channel.
//! - [`vcpu::Vcpu`]: the guest's port I/O as Xen sees it. Every call of its
//!   [`pvnet_ne2000::driver::PortIo`] implementation is one VM exit: counted, charged
//!   ([`pvnet_hv::exit::ExitCost`]), then served at the trap ([`pvnet_ne2000::trap_access`] on
//!   the registers in the ioreq page) or sent to the device model as one ioreq round trip,
//!   according to the path selected in the page ([`HvmShared::path`]).
//! - [`guest::HvmGuest`]: the guest kernel's network driver on that vCPU: Linux `ne2k-pci`
//!   ([`pvnet_ne2000::driver::Ne2kPci`]) probing and opening the card, sending the frames its
//!   stack hands it (a [`FramePort`]: the guest's TAP in the real process) and delivering what
//!   it receives, its interrupt handler run whenever the line is up.
//! - [`process`]: the two process entry points booting from the toolstack's message.
//!
//! # Shared state and channels
//!
//! The ioreq page's device area holds [`HvmShared`]: the card's registers
//! ([`pvnet_ne2000::SharedRegs`], the paper's `ne_shared`) and the path selector, which anyone
//! mapping the page (the toolstack too) may flip at any time; the vCPU reads it at every exit.
//! Two event channels join the vCPU and the device model: the ioreq channel (request /
//! answer, as Xen's `vp_eport`) and the device channel, on which the device model raises the
//! interrupt (vCPU's wait side) and the vCPU says "the ring has room again" after a BNRY write
//! served at the trap (device model's wait side). The interrupt line itself is a function of the
//! page (`ISR & IMR`, [`pvnet_ne2000::SharedRegs::irq_line`]); the event only tells a halted
//! vCPU to look, as a virtual PIC's level would be seen at the next VM entry.
//!
//! # The card's place in the guest
//!
//! The card's I/O window (BAR 0) is at [`IO_BASE`]..[`IO_BASE`]` + 0x100` of the port space,
//! where QEMU's PCI I/O allocation usually puts the first device. The vCPU's bounce buffer for
//! `rep insl/outsl` is [`BOUNCE_PAGES`] pages of the guest's own memory at [`BOUNCE_GPA`]: the
//! guest kernel's receive/transmit buffer, which a real `rep ins/outs` names by ES:EDI/DS:ESI.

pub mod dm;
pub mod guest;
pub mod port;
pub mod process;
pub mod vcpu;

use std::sync::atomic::{AtomicU32, Ordering};

use pvnet_hv::ioreq::SharedPlain;
pub use pvnet_ne2000::direct::Path;
use pvnet_ne2000::{Class, SharedRegs};
use serde::{Deserialize, Serialize};

pub use port::{FramePort, SeqPacketPort};

/// First port of the card's I/O window.
pub const IO_BASE: u16 = 0xc000;
/// Guest-physical address of the vCPU's bounce buffer for `rep ins/outs`.
pub const BOUNCE_GPA: u64 = 0x1000;
/// Pages in the bounce buffer (a maximal frame fits in one).
pub const BOUNCE_PAGES: u32 = 2;
/// The smallest guest memory that holds the bounce buffer.
pub const MIN_GUEST_PAGES: u32 = (BOUNCE_GPA / pvnet_hv::PAGE_SIZE as u64) as u32 + BOUNCE_PAGES;
/// Offset of [`HvmShared`] in the ioreq page's device area.
pub const SHARED_OFFSET: usize = 0;

/// What the ioreq page's device area holds: the card's registers and the path selector.
#[repr(C)]
#[derive(Debug, Default)]
pub struct HvmShared {
    /// The card's registers, shared by the trap handler and the device model.
    pub regs: SharedRegs,
    /// [`Path`] code (see [`path_code`]); any other value is taken as the original path.
    path: AtomicU32,
}

// SAFETY: HvmShared is #[repr(C)] and made of SharedRegs and an AtomicU32. SharedRegs is a
// #[repr(C)] struct of integer atomics only (AtomicU8/U16/U32 and arrays of AtomicU8), with no
// pointers and no Drop, every bit pattern valid, all-zero included (pvnet_ne2000::shared's
// layout contract, checked by its `layout_is_fixed` test); every access goes through atomics,
// and no invariant between fields is relied on for memory safety (the card validates every
// register it reads). So HvmShared meets every requirement of SharedPlain.
unsafe impl SharedPlain for HvmShared {}

/// The selector's value for `path`: 0 original, 1 fast(seed), 2 fast(max).
pub fn path_code(path: Path) -> u32 {
    match path {
        Path::Original => 0,
        Path::Fast(Class::Seed) => 1,
        Path::Fast(Class::Max) => 2,
    }
}

/// The path a selector value stands for; `None` for a value no path has.
pub fn path_from_code(code: u32) -> Option<Path> {
    match code {
        0 => Some(Path::Original),
        1 => Some(Path::Fast(Class::Seed)),
        2 => Some(Path::Fast(Class::Max)),
        _ => None,
    }
}

impl HvmShared {
    /// The path selected now, and whether the raw value was a valid code.
    pub fn path(&self) -> (Path, bool) {
        match path_from_code(self.path.load(Ordering::SeqCst)) {
            Some(p) => (p, true),
            None => (Path::Original, false),
        }
    }

    /// Selects the path the vCPU's next exit takes.
    pub fn set_path(&self, path: Path) {
        self.path.store(path_code(path), Ordering::SeqCst);
    }

    /// Stores a raw selector value (for tests of a page holding garbage).
    pub fn set_path_raw(&self, code: u32) {
        self.path.store(code, Ordering::SeqCst);
    }
}

/// Accesses counted per port of the card's window and per direction.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortCounts {
    /// Reads (`in`, `rep ins`) by offset 0x00..=0x1f in the window.
    pub reads: [u64; 32],
    /// Writes (`out`, `rep outs`) by offset.
    pub writes: [u64; 32],
    /// Accesses at offsets 0x20..=0xff of the window, or outside it.
    pub other: u64,
}

impl PortCounts {
    /// Counts one access at window offset `offset` (`None`: outside the window).
    pub fn count(&mut self, offset: Option<u16>, write: bool) {
        match offset {
            Some(o) if o < 32 => {
                let t = if write {
                    &mut self.writes
                } else {
                    &mut self.reads
                };
                t[usize::from(o)] += 1;
            }
            _ => self.other += 1,
        }
    }

    /// All accesses counted.
    pub fn total(&self) -> u64 {
        self.reads.iter().sum::<u64>() + self.writes.iter().sum::<u64>() + self.other
    }

    /// Reads at `offset` (0 beyond 0x1f).
    pub fn reads_at(&self, offset: u8) -> u64 {
        self.reads.get(usize::from(offset)).copied().unwrap_or(0)
    }

    /// Writes at `offset` (0 beyond 0x1f).
    pub fn writes_at(&self, offset: u8) -> u64 {
        self.writes.get(usize::from(offset)).copied().unwrap_or(0)
    }
}

/// CPU time the calling thread has used, in nanoseconds (`CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_cpu_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// What the kernel counts of a whole process (all its threads), from `getrusage(RUSAGE_SELF)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessUsage {
    /// User + system CPU time, nanoseconds.
    pub cpu_ns: u64,
    /// Context switches: the process gave up the CPU (blocked: `ru_nvcsw`), and was taken
    /// off it (preempted: `ru_nivcsw`).
    pub csw_voluntary: u64,
    pub csw_involuntary: u64,
}

/// The calling process's [`ProcessUsage`] (all zero if `getrusage` fails).
pub fn process_usage() -> ProcessUsage {
    nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
        .map(|u| {
            let ns = |t: nix::sys::time::TimeVal| {
                t.tv_sec() as u64 * 1_000_000_000 + t.tv_usec() as u64 * 1000
            };
            ProcessUsage {
                cpu_ns: ns(u.user_time()) + ns(u.system_time()),
                csw_voluntary: u.voluntary_context_switches().max(0) as u64,
                csw_involuntary: u.involuntary_context_switches().max(0) as u64,
            }
        })
        .unwrap_or_default()
}

/// CPU time (user + system) the whole process has used, in nanoseconds (`getrusage`).
pub fn process_cpu_ns() -> u64 {
    nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
        .map(|u| {
            let ns = |t: nix::sys::time::TimeVal| {
                t.tv_sec() as u64 * 1_000_000_000 + t.tv_usec() as u64 * 1000
            };
            ns(u.user_time()) + ns(u.system_time())
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_codes_round_trip_and_garbage_is_original() {
        for p in Path::ALL {
            assert_eq!(path_from_code(path_code(p)), Some(p));
        }
        assert_eq!(path_from_code(3), None);
        let s = HvmShared::default();
        assert_eq!(s.path(), (Path::Original, true));
        s.set_path(Path::Fast(Class::Max));
        assert_eq!(s.path(), (Path::Fast(Class::Max), true));
        s.set_path_raw(0xdead);
        assert_eq!(s.path(), (Path::Original, false));
    }

    #[test]
    fn process_usage_counts_this_process() {
        let a = process_usage();
        // Sleeping blocks: at least one voluntary switch each time.
        for _ in 0..3 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let b = process_usage();
        assert!(b.csw_voluntary >= a.csw_voluntary + 3, "{a:?} {b:?}");
        assert!(b.cpu_ns >= a.cpu_ns);
    }

    #[test]
    fn shared_fits_the_device_area() {
        assert_eq!(std::mem::size_of::<HvmShared>(), 52);
        assert_eq!(std::mem::align_of::<HvmShared>(), 4);
        let page = pvnet_hv::ioreq::IoreqPage::create("hvm-fit", 1, 64).unwrap();
        assert!(page.device_state_at::<HvmShared>(SHARED_OFFSET).is_ok());
    }
}
