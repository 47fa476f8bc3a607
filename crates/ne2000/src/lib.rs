//! An NE2000 (DP8390) network card as QEMU's RTL8029 (`hw/net/ne2000.c`, `ne2000-pci.c`, PCI
//! 10ec:8029) defines it, split for an HVM guest whose port accesses trap, plus the port
//! sequences of Linux's `ne2k-pci` + `lib8390` driver. Pure: no I/O, no threads, no `unsafe`;
//! frames and port accesses are passed in, frames to send are handed back.
//!
//! # Pieces
//!
//! - [`SharedRegs`] ([`shared`]): every register, as atomics in a `#[repr(C)]` struct meant to
//!   live in a page mapped by both the device model and the guest's trap handler. Its module docs
//!   say which side writes which field.
//! - [`Card`] ([`card`]): what only the device model holds: the 32 KiB of card memory
//!   (0x4000..0xC000) and the station-address PROM, the counters, and the two entry points
//!   [`Card::dm_access`] (serves any port access: the *original* path, where every access goes to
//!   the device model) and [`Card::receive`] (a frame from the network).
//! - [`trap_access`] ([`trap`]): the trap handler's side of the *fast* path. It serves at the
//!   trap every access that needs no card memory and that its [`Class`] allows, and says
//!   [`TrapOutcome::Forward`] for the rest, which the caller then hands to [`Card::dm_access`].
//! - [`driver`]: the guest driver (Linux `ne2k-pci` + `lib8390`) over a [`driver::PortIo`]
//!   trait, one call per trap. [`direct`]: in-process `PortIo` implementations that connect the
//!   driver to a card through either path, counting where each access was served.
//!
//! # Port map (offsets in the card's I/O window)
//!
//! 0x00..=0x0f: the 8390 registers, byte accesses only (other widths read all ones and are
//! ignored on write, as QEMU). 0x10: the remote-DMA data port, 1-, 2- and 4-byte accesses (1 and
//! 2 move one byte or one 16-bit word as DCR.WTS says, 4 moves 32 bits: QEMU's `inl/outl` for the
//! 8029). 0x1f: reset (byte read resets, write is a no-op). Everything else reads all ones.
//!
//! # Safety contract against a hostile driver
//!
//! No register value or sequence of accesses makes the model read or write outside card memory
//! or panic. Guest-controlled addresses are resolved per byte: 0..32 is the PROM (read-only),
//! 0x4000..0xC000 card memory, anything else reads 0xff and drops writes. The receive ring is
//! used only when 0x40 <= PSTART < PSTOP <= 0xC0 and PSTART <= CURR < PSTOP
//! ([`RxRefused::BadRing`] otherwise); a transmit is sent only when TPSR/TBCR describe a frame
//! of 14..=1514 bytes inside card memory (otherwise counted, and the guest still sees a
//! completed transmit, as QEMU). Each refusal has a counter in [`CardCounters`].
//!
//! # Where this model departs from QEMU (each on purpose, each tested)
//!
//! - Unicast filtering compares with PAR (page 1), as the DP8390 does; QEMU compares with the
//!   PROM.
//! - The PROM is read-only and fixed (station address, zeros, 'W' 'W', each byte doubled).
//! - The ring is also full when CURR == BNRY (see `Ring::full`), which QEMU misses.
//! - Frames under 14 bytes or over 1514 are refused (QEMU takes any size).
//! - RSAR is a 16-bit register and wraps at 0x10000 (QEMU keeps 32 bits).
//! - A multi-byte data-port access straddling a region edge resolves each byte on its own.
//! - Power-on CR is STP|RD_ABORT (0x21), the DP8390 reset value; QEMU starts at 0.

pub mod card;
pub mod direct;
pub mod driver;
pub mod regs;
pub mod shared;
pub mod trap;

pub use card::{mcast_index, Card, CardCounters, RxAccepted, RxRefused, TxFrame};
pub use shared::{RegSnapshot, SharedRegs, ETH_HLEN, MAX_FRAME, MIN_FRAME, SHARED_MAGIC};
pub use trap::{trap_access, trap_rep, Class, TrapOutcome, TrapStats};

/// The remote-DMA data port's offset.
pub const DATA_PORT: u8 = regs::port::DATA;
/// The reset port's offset.
pub const RESET_PORT: u8 = regs::port::RESET;
/// Size of the card's I/O window as QEMU registers it (BAR 0).
pub const IO_SIZE: u16 = 0x100;
/// PCI vendor and device id of the RTL8029.
pub const PCI_ID: (u16, u16) = (0x10ec, 0x8029);

/// The width of a port access.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Width {
    /// `inb` / `outb`.
    W1,
    /// `inw` / `outw`.
    W2,
    /// `inl` / `outl`.
    W4,
}

impl Width {
    /// Bytes moved.
    pub fn bytes(self) -> usize {
        match self {
            Width::W1 => 1,
            Width::W2 => 2,
            Width::W4 => 4,
        }
    }

    /// All ones in this width.
    pub fn mask(self) -> u32 {
        match self {
            Width::W1 => 0xff,
            Width::W2 => 0xffff,
            Width::W4 => 0xffff_ffff,
        }
    }

    /// From a byte count (1, 2 or 4).
    pub fn from_bytes(n: usize) -> Option<Width> {
        match n {
            1 => Some(Width::W1),
            2 => Some(Width::W2),
            4 => Some(Width::W4),
            _ => None,
        }
    }
}

/// One port access by the guest: what traps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// `in` of `width` at `port` (offset in the card's window).
    Read {
        /// Offset in the I/O window.
        port: u8,
        /// Access width.
        width: Width,
    },
    /// `out` of `value` (only the low `width` bytes count) at `port`.
    Write {
        /// Offset in the I/O window.
        port: u8,
        /// Access width.
        width: Width,
        /// The value written.
        value: u32,
    },
}

impl Access {
    /// `inb`.
    pub fn inb(port: u8) -> Access {
        Access::Read {
            port,
            width: Width::W1,
        }
    }
    /// `inw`.
    pub fn inw(port: u8) -> Access {
        Access::Read {
            port,
            width: Width::W2,
        }
    }
    /// `inl`.
    pub fn inl(port: u8) -> Access {
        Access::Read {
            port,
            width: Width::W4,
        }
    }
    /// `outb`.
    pub fn outb(port: u8, value: u8) -> Access {
        Access::Write {
            port,
            width: Width::W1,
            value: u32::from(value),
        }
    }
    /// `outw`.
    pub fn outw(port: u8, value: u16) -> Access {
        Access::Write {
            port,
            width: Width::W2,
            value: u32::from(value),
        }
    }
    /// `outl`.
    pub fn outl(port: u8, value: u32) -> Access {
        Access::Write {
            port,
            width: Width::W4,
            value,
        }
    }
    /// The port.
    pub fn port(self) -> u8 {
        match self {
            Access::Read { port, .. } | Access::Write { port, .. } => port,
        }
    }
    /// Is this a write?
    pub fn is_write(self) -> bool {
        matches!(self, Access::Write { .. })
    }
    /// The same access with the value cut to its width (what the card sees).
    pub(crate) fn normalised(self) -> Access {
        match self {
            Access::Write { port, width, value } => Access::Write {
                port,
                width,
                value: value & width.mask(),
            },
            r => r,
        }
    }
}

/// What an access did, as seen by the one who served it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The value a read returns (cut to the access width); 0 for writes.
    pub value: u32,
    /// The interrupt line sampled after the access ([`SharedRegs::irq_line`]).
    pub irq: bool,
    /// The device model holds a frame refused for a full ring and the ring now has room: it
    /// should retry [`Card::receive`]. Computed after every write.
    pub wake_rx: bool,
    /// A frame the card transmitted; its bytes are [`Card::tx_bytes`] (valid until the next
    /// access that writes card memory).
    pub tx: Option<TxFrame>,
}

impl Completion {
    pub(crate) fn value(value: u32, irq: bool) -> Completion {
        Completion {
            value,
            irq,
            wake_rx: false,
            tx: None,
        }
    }
}
