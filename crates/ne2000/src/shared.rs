//! The card's register state as it lives in a page shared by the device model and the trap
//! handler, and the register semantics that need no card memory (used by both sides, so the two
//! paths cannot disagree on what a register does).
//!
//! # Layout
//!
//! [`SharedRegs`] is `#[repr(C)]`, holds only `AtomicU8`/`AtomicU16`/`AtomicU32` (no pointers),
//! is 48 bytes with alignment 4, and the all-zero byte pattern is a valid value: a freshly
//! mapped zero page can be viewed as a `SharedRegs` and then initialised with
//! [`Card::power_on`](crate::Card::power_on). Offsets are fixed and tested
//! (`layout_is_fixed`); [`SHARED_MAGIC`] at offset 0 lets a mapper check it found the page.
//!
//! # Who writes what
//!
//! Two parties touch the page: the **device model** (DM, the process holding card memory:
//! [`Card::dm_access`](crate::Card::dm_access), [`Card::receive`](crate::Card::receive)) and the
//! **trap handler** ([`trap_access`](crate::trap_access), on the guest's vCPU thread). While the
//! DM serves a forwarded access the vCPU is blocked, so guest accesses are serialised; what runs
//! concurrently with the trap handler is the DM's *receive* path (a frame arriving from the
//! network). The rule per field:
//!
//! | field | written by | how |
//! |---|---|---|
//! | `isr` | both: receive/transmit/remote DMA set bits (DM); CR start clears RST and zero-length DMA sets RDC (trap or DM); guest acks clear bits (trap or DM); the reset port assigns RST (DM) | `fetch_or` / `fetch_and` / `swap` only: no bit is lost to a race |
//! | `imr`, `rcr`, `dcr`, `tcr`, `pstart`, `pstop`, `bnry`, `tpsr`, `tbcr`, `rsar` low/high writes, `rbcr` low/high writes, `par`, `mar` | the guest's writes (trap or DM, never both at once) | plain stores; the DM's receive path only reads them, taking one snapshot and validating it |
//! | `rsar`, `rbcr` (remote-DMA progress) | DM (data-port accesses, forwarded: vCPU blocked) | stores |
//! | `cr` | the guest's writes; the DM clears TXP after a transmit (forwarded: vCPU blocked) | store / `fetch_and` |
//! | `curr`, `rsr`, `rx_blocked` | DM only (receive path; guest writes to CURR are always forwarded) | stores |
//! | `tsr` | DM only (transmit) | store |
//! | `irq_raised` | both | `fetch_add` |
//!
//! All accesses are `SeqCst`. That matters for one pair: the receive path sets `rx_blocked`
//! *before* it reads BNRY to decide the ring is full, and a BNRY write stores BNRY *before* it
//! reads `rx_blocked`; with sequential consistency at least one side sees the other, so a freed
//! ring never leaves a held frame asleep (the BNRY writer gets `wake_rx`, or the receive path
//! sees the new BNRY). The price is an occasional spurious `wake_rx` (a receive that set the
//! flag and then found room); a retry that meets a full ring again just holds the frame again.
//!
//! Races that remain, on purpose: a guest write to PSTART/PSTOP/RCR/PAR/MAR served at the trap
//! while a frame is being placed may or may not apply to that frame (as on hardware); the
//! receive path reads each register once and validates what it read, so memory safety never
//! depends on the guest's timing.
//!
//! # Interrupt line
//!
//! The line is a function of the page: `ISR & IMR & 0x7f != 0` ([`SharedRegs::irq_line`], as
//! QEMU's `ne2000_update_irq`). Whoever changes ISR or IMR returns the line sampled after its
//! change; because the other side may change ISR at the same moment, an interrupt controller fed
//! from two places must re-sample `irq_line()` when notified rather than trust a stale level.
//! `irq_raised` counts low-to-high transitions caused by ISR bits being set or IMR bits being
//! unmasked.

use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU8, Ordering::SeqCst};

use crate::regs::{cr, field, isr, port, rtl, Cr};
use crate::{Access, Completion, Width};

/// `b"NE2K"` little-endian, stored at offset 0 by [`Card::power_on`](crate::Card::power_on).
pub const SHARED_MAGIC: u32 = u32::from_le_bytes(*b"NE2K");

/// Register state shared between the device model and the trap handler. See the module docs
/// for the layout and the ownership of each field.
#[repr(C)]
#[derive(Debug, Default)]
pub struct SharedRegs {
    pub(crate) magic: AtomicU32,
    pub(crate) irq_raised: AtomicU32,
    pub(crate) tbcr: AtomicU16,
    pub(crate) rsar: AtomicU16,
    pub(crate) rbcr: AtomicU16,
    pub(crate) cr: AtomicU8,
    pub(crate) isr: AtomicU8,
    pub(crate) imr: AtomicU8,
    pub(crate) dcr: AtomicU8,
    pub(crate) rcr: AtomicU8,
    pub(crate) tcr: AtomicU8,
    pub(crate) tsr: AtomicU8,
    pub(crate) rsr: AtomicU8,
    pub(crate) pstart: AtomicU8,
    pub(crate) pstop: AtomicU8,
    pub(crate) bnry: AtomicU8,
    pub(crate) curr: AtomicU8,
    pub(crate) tpsr: AtomicU8,
    pub(crate) rx_blocked: AtomicU8,
    pub(crate) par: [AtomicU8; 6],
    pub(crate) mar: [AtomicU8; 8],
    pub(crate) reserved: [AtomicU8; 6],
}

/// A plain copy of every register in [`SharedRegs`], for comparisons and diagnostics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegSnapshot {
    pub magic: u32,
    pub irq_raised: u32,
    pub tbcr: u16,
    pub rsar: u16,
    pub rbcr: u16,
    pub cr: u8,
    pub isr: u8,
    pub imr: u8,
    pub dcr: u8,
    pub rcr: u8,
    pub tcr: u8,
    pub tsr: u8,
    pub rsr: u8,
    pub pstart: u8,
    pub pstop: u8,
    pub bnry: u8,
    pub curr: u8,
    pub tpsr: u8,
    pub rx_blocked: bool,
    pub par: [u8; 6],
    pub mar: [u8; 8],
}

/// Card memory: 32 KiB of packet RAM at 0x4000..0xC000 (QEMU `NE2000_PMEM_START/SIZE`).
pub(crate) const PMEM_START: u32 = 0x4000;
pub(crate) const PMEM_SIZE: u32 = 0x8000;
pub(crate) const PMEM_END: u32 = PMEM_START + PMEM_SIZE;
/// The largest frame the card takes or sends (QEMU `MAX_ETH_FRAME_SIZE`, no FCS).
pub const MAX_FRAME: usize = 1514;
/// Frames shorter than this are padded with zeros on receive (QEMU `MIN_BUF_SIZE`).
pub const MIN_FRAME: usize = 60;
/// Frames shorter than an Ethernet header are refused (receive) or not sent (transmit).
pub const ETH_HLEN: usize = 14;

impl SharedRegs {
    /// A zeroed page (every register 0, magic not set). Call
    /// [`Card::power_on`](crate::Card::power_on) before use.
    pub fn new() -> Self {
        Self::default()
    }

    /// The magic found at offset 0 ([`SHARED_MAGIC`] once powered on).
    pub fn magic(&self) -> u32 {
        self.magic.load(SeqCst)
    }

    /// The interrupt line: `ISR & IMR & 0x7f != 0`.
    pub fn irq_line(&self) -> bool {
        self.isr.load(SeqCst) & self.imr.load(SeqCst) & isr::LINE_MASK != 0
    }

    /// Low-to-high transitions of the line so far (wraps at 2^32).
    pub fn irq_raised(&self) -> u32 {
        self.irq_raised.load(SeqCst)
    }

    /// The DM holds a frame it could not place because the ring was full.
    pub fn rx_blocked(&self) -> bool {
        self.rx_blocked.load(SeqCst) != 0
    }

    /// The current register page (CR.PS).
    pub fn page(&self) -> u8 {
        Cr(self.cr.load(SeqCst)).page()
    }

    /// Copy every register out.
    pub fn snapshot(&self) -> RegSnapshot {
        let mut par = [0u8; 6];
        for (d, s) in par.iter_mut().zip(&self.par) {
            *d = s.load(SeqCst);
        }
        let mut mar = [0u8; 8];
        for (d, s) in mar.iter_mut().zip(&self.mar) {
            *d = s.load(SeqCst);
        }
        RegSnapshot {
            magic: self.magic.load(SeqCst),
            irq_raised: self.irq_raised.load(SeqCst),
            tbcr: self.tbcr.load(SeqCst),
            rsar: self.rsar.load(SeqCst),
            rbcr: self.rbcr.load(SeqCst),
            cr: self.cr.load(SeqCst),
            isr: self.isr.load(SeqCst),
            imr: self.imr.load(SeqCst),
            dcr: self.dcr.load(SeqCst),
            rcr: self.rcr.load(SeqCst),
            tcr: self.tcr.load(SeqCst),
            tsr: self.tsr.load(SeqCst),
            rsr: self.rsr.load(SeqCst),
            pstart: self.pstart.load(SeqCst),
            pstop: self.pstop.load(SeqCst),
            bnry: self.bnry.load(SeqCst),
            curr: self.curr.load(SeqCst),
            tpsr: self.tpsr.load(SeqCst),
            rx_blocked: self.rx_blocked(),
            par,
            mar,
        }
    }

    /// Set ISR bits (atomic OR), counting a rising edge of the line. Returns the line after.
    pub(crate) fn raise(&self, bits: u8) -> bool {
        let old = self.isr.fetch_or(bits, SeqCst);
        let imr = self.imr.load(SeqCst);
        let before = old & imr & isr::LINE_MASK != 0;
        let after = (old | bits) & imr & isr::LINE_MASK != 0;
        if !before && after {
            self.irq_raised.fetch_add(1, SeqCst);
        }
        self.irq_line()
    }

    /// Clear ISR bits (atomic AND-NOT). Returns the line after.
    pub(crate) fn clear_isr(&self, bits: u8) -> bool {
        self.isr.fetch_and(!bits, SeqCst);
        self.irq_line()
    }

    fn write_imr(&self, val: u8) -> bool {
        let old = self.imr.swap(val, SeqCst);
        let isr_now = self.isr.load(SeqCst);
        if isr_now & old & isr::LINE_MASK == 0 && isr_now & val & isr::LINE_MASK != 0 {
            self.irq_raised.fetch_add(1, SeqCst);
        }
        self.irq_line()
    }

    /// The receive ring as the registers describe it, if it is usable: 0x40 <= PSTART < PSTOP
    /// <= 0xC0 (inside card memory) and PSTART <= CURR < PSTOP.
    pub(crate) fn ring(&self) -> Option<Ring> {
        let start = u32::from(self.pstart.load(SeqCst)) << 8;
        let stop = u32::from(self.pstop.load(SeqCst)) << 8;
        let curr = u32::from(self.curr.load(SeqCst)) << 8;
        let ok = start >= PMEM_START
            && start < stop
            && stop <= PMEM_END
            && (start..stop).contains(&curr);
        ok.then_some(Ring { start, stop, curr })
    }

    /// The card could place a frame now: started, ring usable and not full.
    pub(crate) fn can_receive(&self) -> bool {
        if Cr(self.cr.load(SeqCst)).stopped() {
            return false;
        }
        match self.ring() {
            Some(r) => !r.full(self.bnry.load(SeqCst)),
            None => false,
        }
    }

    /// After a guest write: should the DM retry a held frame?
    pub(crate) fn wake_rx(&self) -> bool {
        self.rx_blocked() && self.can_receive()
    }
}

/// A validated receive ring: byte addresses, `start <= curr < stop`, all inside card memory.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ring {
    pub start: u32,
    pub stop: u32,
    pub curr: u32,
}

impl Ring {
    /// QEMU's `ne2000_buffer_full` (free space from CURR to BNRY below one maximal frame plus
    /// header), plus the DP8390's own condition: CURR equal to BNRY means the write pointer has
    /// caught up with the read pointer (the ring is full, never empty, in the driver's
    /// "BNRY one page behind" convention). QEMU misses that case and would overwrite unread
    /// frames after a frame that ends exactly at BNRY.
    pub fn full(&self, bnry: u8) -> bool {
        let index = i64::from(self.curr);
        let boundary = i64::from(bnry) << 8;
        if index == boundary {
            return true;
        }
        let avail = if index < boundary {
            boundary - index
        } else {
            i64::from(self.stop - self.start) - (index - boundary)
        };
        avail < (MAX_FRAME + 4) as i64
    }
}

/// Does this access need the device model whatever the classification: it touches card memory
/// or card state (data port, reset-port read, a CR write that transmits)?
pub(crate) fn needs_card(access: Access) -> bool {
    match access {
        Access::Read {
            port: p,
            width: Width::W1,
        } if p == port::RESET => true,
        Access::Read { port: p, .. } | Access::Write { port: p, .. } if p == port::DATA => true,
        Access::Write {
            port: p,
            width: Width::W1,
            value,
        } if p == port::CR => Cr(value as u8).starts_transmit(),
        _ => false,
    }
}

/// Perform an access that needs no card memory (`!needs_card`). Both the trap handler and the
/// device model use this, so a register means the same thing on both paths.
pub(crate) fn register_access(shared: &SharedRegs, access: Access) -> Completion {
    match access {
        Access::Read { port: p, width } => {
            let value = if p < 0x10 && width == Width::W1 {
                u32::from(read_reg(shared, p))
            } else {
                // QEMU: other widths on the register ports, unmapped ports and the reset port
                // (non-byte) read all ones.
                width.mask()
            };
            Completion::value(value, shared.irq_line())
        }
        Access::Write {
            port: p,
            width,
            value,
        } => {
            if p < 0x10 && width == Width::W1 {
                write_reg(shared, p, value as u8);
            }
            // Other widths and unmapped ports are ignored; the reset port write ends the reset
            // pulse and does nothing (QEMU).
            Completion {
                value: 0,
                irq: shared.irq_line(),
                wake_rx: shared.wake_rx(),
                tx: None,
            }
        }
    }
}

/// Register read for ports 0x00..=0x0f (QEMU `ne2000_ioport_read`).
pub(crate) fn read_reg(shared: &SharedRegs, p: u8) -> u8 {
    if p == port::CR {
        return shared.cr.load(SeqCst);
    }
    let offset = p | shared.page() << 4;
    match offset {
        field::CLDA0 | field::CLDA1 | field::NCR | field::FIFO => 0,
        field::BNRY => shared.bnry.load(SeqCst),
        field::TSR => shared.tsr.load(SeqCst),
        field::ISR => shared.isr.load(SeqCst),
        field::CRDA0 => shared.rsar.load(SeqCst) as u8,
        field::CRDA1 => (shared.rsar.load(SeqCst) >> 8) as u8,
        field::RTL_ID0 => rtl::ID0,
        field::RTL_ID1 => rtl::ID1,
        field::RSR => shared.rsr.load(SeqCst),
        field::CNTR0 | field::CNTR1 | field::CNTR2 => 0,
        o if (field::PAR0..field::PAR0 + 6).contains(&o) => {
            shared.par[usize::from(o - field::PAR0)].load(SeqCst)
        }
        field::CURR => shared.curr.load(SeqCst),
        o if (field::MAR0..field::MAR0 + 8).contains(&o) => {
            shared.mar[usize::from(o - field::MAR0)].load(SeqCst)
        }
        field::P2_PSTART => shared.pstart.load(SeqCst),
        field::P2_PSTOP => shared.pstop.load(SeqCst),
        field::CONFIG0 => rtl::CONFIG0,
        field::CONFIG2 => rtl::CONFIG2,
        field::CONFIG3 => rtl::CONFIG3,
        _ => 0,
    }
}

/// Register write for ports 0x00..=0x0f that needs no card memory (QEMU
/// `ne2000_ioport_write`, minus the transmit, which the caller has routed to the card). Page 2
/// and page 3 writes are ignored (QEMU).
pub(crate) fn write_reg(shared: &SharedRegs, p: u8, val: u8) {
    if p == port::CR {
        write_cr(shared, val);
        return;
    }
    let offset = p | shared.page() << 4;
    let set_lo = |r: &AtomicU16| {
        let old = r.load(SeqCst);
        r.store((old & 0xff00) | u16::from(val), SeqCst);
    };
    let set_hi = |r: &AtomicU16| {
        let old = r.load(SeqCst);
        r.store((old & 0x00ff) | u16::from(val) << 8, SeqCst);
    };
    match offset {
        field::PSTART => shared.pstart.store(val, SeqCst),
        field::PSTOP => shared.pstop.store(val, SeqCst),
        field::BNRY => shared.bnry.store(val, SeqCst),
        field::TPSR => shared.tpsr.store(val, SeqCst),
        field::TBCR0 => set_lo(&shared.tbcr),
        field::TBCR1 => set_hi(&shared.tbcr),
        field::ISR => {
            shared.clear_isr(val & isr::LINE_MASK);
        }
        field::RSAR0 => set_lo(&shared.rsar),
        field::RSAR1 => set_hi(&shared.rsar),
        field::RBCR0 => set_lo(&shared.rbcr),
        field::RBCR1 => set_hi(&shared.rbcr),
        field::RCR => shared.rcr.store(val, SeqCst),
        field::TCR => shared.tcr.store(val, SeqCst),
        field::DCR => shared.dcr.store(val, SeqCst),
        field::IMR => {
            shared.write_imr(val);
        }
        o if (field::PAR0..field::PAR0 + 6).contains(&o) => {
            shared.par[usize::from(o - field::PAR0)].store(val, SeqCst)
        }
        field::CURR => shared.curr.store(val, SeqCst),
        o if (field::MAR0..field::MAR0 + 8).contains(&o) => {
            shared.mar[usize::from(o - field::MAR0)].store(val, SeqCst)
        }
        _ => {}
    }
}

/// CR write, everything but the transmit (QEMU: with STP clear, clear ISR.RST; a read/write
/// remote DMA with RBCR zero completes at once with RDC).
pub(crate) fn write_cr(shared: &SharedRegs, val: u8) {
    shared.cr.store(val, SeqCst);
    if val & cr::STP == 0 {
        shared.clear_isr(isr::RST);
        if Cr(val).starts_remote_dma() && shared.rbcr.load(SeqCst) == 0 {
            shared.raise(isr::RDC);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of, size_of};

    #[test]
    fn layout_is_fixed() {
        assert_eq!(size_of::<SharedRegs>(), 48);
        assert_eq!(align_of::<SharedRegs>(), 4);
        assert_eq!(offset_of!(SharedRegs, magic), 0);
        assert_eq!(offset_of!(SharedRegs, irq_raised), 4);
        assert_eq!(offset_of!(SharedRegs, tbcr), 8);
        assert_eq!(offset_of!(SharedRegs, rsar), 10);
        assert_eq!(offset_of!(SharedRegs, rbcr), 12);
        assert_eq!(offset_of!(SharedRegs, cr), 14);
        assert_eq!(offset_of!(SharedRegs, isr), 15);
        assert_eq!(offset_of!(SharedRegs, imr), 16);
        assert_eq!(offset_of!(SharedRegs, dcr), 17);
        assert_eq!(offset_of!(SharedRegs, rcr), 18);
        assert_eq!(offset_of!(SharedRegs, tcr), 19);
        assert_eq!(offset_of!(SharedRegs, tsr), 20);
        assert_eq!(offset_of!(SharedRegs, rsr), 21);
        assert_eq!(offset_of!(SharedRegs, pstart), 22);
        assert_eq!(offset_of!(SharedRegs, pstop), 23);
        assert_eq!(offset_of!(SharedRegs, bnry), 24);
        assert_eq!(offset_of!(SharedRegs, curr), 25);
        assert_eq!(offset_of!(SharedRegs, tpsr), 26);
        assert_eq!(offset_of!(SharedRegs, rx_blocked), 27);
        assert_eq!(offset_of!(SharedRegs, par), 28);
        assert_eq!(offset_of!(SharedRegs, mar), 34);
        assert_eq!(offset_of!(SharedRegs, reserved), 42);
    }

    fn ring(start: u8, stop: u8, curr: u8) -> Ring {
        Ring {
            start: u32::from(start) << 8,
            stop: u32::from(stop) << 8,
            curr: u32::from(curr) << 8,
        }
    }

    #[test]
    fn ring_full_follows_qemu_rule_and_curr_equal_bnry() {
        // Linux's initial state: CURR = PSTART, BNRY = PSTOP - 1: 51 free pages.
        assert!(!ring(0x4c, 0x80, 0x4c).full(0x7f));
        // Six free pages (1536 bytes) hold a maximal frame: not full.
        assert!(!ring(0x4c, 0x80, 0x50).full(0x56));
        // Five pages (1280 < 1518): full.
        assert!(ring(0x4c, 0x80, 0x50).full(0x55));
        // CURR == BNRY: full (QEMU would call that the whole ring free).
        assert!(ring(0x4c, 0x80, 0x50).full(0x50));
        // Wrapped: CURR above BNRY, free = ring - (CURR - BNRY).
        assert!(!ring(0x4c, 0x80, 0x7e).full(0x50)); // 52 - 46 = 6 pages
        assert!(ring(0x4c, 0x80, 0x7e).full(0x4f)); // 5 pages
                                                    // BNRY one below PSTART (Linux writes next_frame - 1): 52 - 51 = 1 page.
        assert!(ring(0x4c, 0x80, 0x7e).full(0x4b));
        assert!(!ring(0x4c, 0x80, 0x4c).full(0x4b));
    }

    #[test]
    fn ring_validation_rejects_every_bad_geometry() {
        let s = SharedRegs::new();
        let set = |a: u8, b: u8, c: u8| {
            s.pstart.store(a, SeqCst);
            s.pstop.store(b, SeqCst);
            s.curr.store(c, SeqCst);
        };
        set(0x4c, 0x80, 0x4c);
        assert!(s.ring().is_some());
        set(0x40, 0xc0, 0xbf);
        assert!(
            s.ring().is_some(),
            "the whole of card memory is a legal ring"
        );
        set(0x3f, 0x80, 0x4c);
        assert!(s.ring().is_none(), "PSTART below card memory");
        set(0x4c, 0xc1, 0x4c);
        assert!(s.ring().is_none(), "PSTOP beyond card memory");
        set(0x60, 0x60, 0x60);
        assert!(s.ring().is_none(), "zero-size ring");
        set(0x80, 0x4c, 0x50);
        assert!(s.ring().is_none(), "PSTOP below PSTART");
        set(0x4c, 0x80, 0x80);
        assert!(s.ring().is_none(), "CURR at PSTOP");
        set(0x4c, 0x80, 0x4b);
        assert!(s.ring().is_none(), "CURR below PSTART");
        set(0x00, 0x00, 0x00);
        assert!(s.ring().is_none(), "power-on zeros");
    }
}
