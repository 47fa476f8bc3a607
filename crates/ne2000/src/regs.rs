//! DP8390 register numbers, bit meanings and small typed views over register values.
//!
//! Register offsets are written `port | page << 4` (the form QEMU's `ne2000.c` switches on): the
//! low nibble is the I/O port inside the card's window, the high nibble the page that CR's PS
//! bits select. Names follow Linux `drivers/net/ethernet/8390/8390.h` and the DP8390 datasheet.
//! The views (`Cr`, `Dcr`, `Rcr`) decode a register value without any validation to do: every
//! `u8` is a legal value and every getter is total.

/// Offsets within the 32-port I/O window (QEMU maps 0x100 ports; only these respond).
pub(crate) mod port {
    /// Command register, present in every page.
    pub const CR: u8 = 0x00;
    /// The remote-DMA data port ("ASIC" port in QEMU): 1-, 2- or 4-byte accesses.
    pub const DATA: u8 = 0x10;
    /// Reading it resets the card (sets ISR.RST); writing it ends the reset pulse (no effect).
    pub const RESET: u8 = 0x1f;
}

/// `port | page << 4` offsets of the paged registers.
pub(crate) mod field {
    // Page 0, writes.
    pub const PSTART: u8 = 0x01;
    pub const PSTOP: u8 = 0x02;
    pub const BNRY: u8 = 0x03;
    pub const TPSR: u8 = 0x04;
    pub const TBCR0: u8 = 0x05;
    pub const TBCR1: u8 = 0x06;
    pub const ISR: u8 = 0x07;
    pub const RSAR0: u8 = 0x08;
    pub const RSAR1: u8 = 0x09;
    pub const RBCR0: u8 = 0x0a;
    pub const RBCR1: u8 = 0x0b;
    pub const RCR: u8 = 0x0c;
    pub const TCR: u8 = 0x0d;
    pub const DCR: u8 = 0x0e;
    pub const IMR: u8 = 0x0f;
    // Page 0, reads (where they differ from the writes).
    pub const CLDA0: u8 = 0x01;
    pub const CLDA1: u8 = 0x02;
    pub const TSR: u8 = 0x04;
    pub const NCR: u8 = 0x05;
    pub const FIFO: u8 = 0x06;
    pub const CRDA0: u8 = 0x08;
    pub const CRDA1: u8 = 0x09;
    /// RTL8029 ID bytes ('P', 'C') where the DP8390 has nothing readable.
    pub const RTL_ID0: u8 = 0x0a;
    pub const RTL_ID1: u8 = 0x0b;
    pub const RSR: u8 = 0x0c;
    pub const CNTR0: u8 = 0x0d;
    pub const CNTR1: u8 = 0x0e;
    pub const CNTR2: u8 = 0x0f;
    // Page 1.
    pub const PAR0: u8 = 0x11;
    pub const CURR: u8 = 0x17;
    pub const MAR0: u8 = 0x18;
    // Page 2 (reads).
    pub const P2_PSTART: u8 = 0x21;
    pub const P2_PSTOP: u8 = 0x22;
    // Page 3 (RTL8029 configuration registers, reads).
    pub const CONFIG0: u8 = 0x33;
    pub const CONFIG2: u8 = 0x35;
    pub const CONFIG3: u8 = 0x36;
}

/// Values QEMU returns for the RTL8029-specific reads.
pub(crate) mod rtl {
    pub const ID0: u8 = 0x50;
    pub const ID1: u8 = 0x43;
    /// CONFIG0: 10baseT media.
    pub const CONFIG0: u8 = 0x00;
    /// CONFIG2: 10baseT active.
    pub const CONFIG2: u8 = 0x40;
    /// CONFIG3: full duplex.
    pub const CONFIG3: u8 = 0x40;
}

/// Command register bits.
pub mod cr {
    /// Stop: the card neither receives nor transmits.
    pub const STP: u8 = 0x01;
    /// Start.
    pub const STA: u8 = 0x02;
    /// Transmit packet.
    pub const TXP: u8 = 0x04;
    /// Remote DMA command field (RD0..RD2).
    pub const RD_MASK: u8 = 0x38;
    /// RD = 001: remote read.
    pub const RD_READ: u8 = 0x08;
    /// RD = 010: remote write.
    pub const RD_WRITE: u8 = 0x10;
    /// RD = 011: send packet.
    pub const RD_SEND: u8 = 0x18;
    /// RD = 1xx: abort / complete remote DMA.
    pub const RD_ABORT: u8 = 0x20;
    /// Page select field (PS0, PS1).
    pub const PS_MASK: u8 = 0xc0;
    /// PS shift.
    pub const PS_SHIFT: u8 = 6;
}

/// Interrupt status / mask bits (ISR, IMR).
pub mod isr {
    /// Packet received.
    pub const PRX: u8 = 0x01;
    /// Packet transmitted.
    pub const PTX: u8 = 0x02;
    /// Receive error.
    pub const RXE: u8 = 0x04;
    /// Transmit error.
    pub const TXE: u8 = 0x08;
    /// Receive ring overwrite warning.
    pub const OVW: u8 = 0x10;
    /// Tally counter overflow.
    pub const CNT: u8 = 0x20;
    /// Remote DMA complete.
    pub const RDC: u8 = 0x40;
    /// Reset status (not an interrupt source: masked out of the line).
    pub const RST: u8 = 0x80;
    /// Bits that can drive the interrupt line.
    pub const LINE_MASK: u8 = 0x7f;
}

/// Receive status (RSR and the status byte of the ring header).
pub mod rsr {
    /// Received intact.
    pub const PRX: u8 = 0x01;
    /// Physical/multicast: set when the destination was a group address (QEMU's use).
    pub const PHY: u8 = 0x20;
}

/// Transmit status (TSR).
pub mod tsr {
    /// Packet transmitted.
    pub const PTX: u8 = 0x01;
}

/// Data configuration register bits.
pub mod dcr {
    /// Word transfer select: 1 = the data port moves 16 bits per 1/2-byte access.
    pub const WTS: u8 = 0x01;
}

/// Receive configuration register bits.
pub mod rcr {
    /// Accept broadcast.
    pub const AB: u8 = 0x04;
    /// Accept multicast (filtered by the MAR hash).
    pub const AM: u8 = 0x08;
    /// Promiscuous physical.
    pub const PRO: u8 = 0x10;
    /// Monitor mode (not modelled, as in QEMU).
    pub const MON: u8 = 0x20;
}

/// The remote-DMA command encoded in CR's RD field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteDma {
    /// RD = 000 (not allowed by the datasheet; QEMU treats it as "no command").
    None,
    /// RD = 001.
    Read,
    /// RD = 010.
    Write,
    /// RD = 011.
    SendPacket,
    /// RD = 1xx.
    Abort,
}

/// View of a command register value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cr(pub u8);

impl Cr {
    /// Register page selected (0..=3).
    pub fn page(self) -> u8 {
        (self.0 & cr::PS_MASK) >> cr::PS_SHIFT
    }
    /// STP set: the card is stopped.
    pub fn stopped(self) -> bool {
        self.0 & cr::STP != 0
    }
    /// TXP set.
    pub fn transmit(self) -> bool {
        self.0 & cr::TXP != 0
    }
    /// The remote-DMA command.
    pub fn remote_dma(self) -> RemoteDma {
        match self.0 & cr::RD_MASK {
            0x00 => RemoteDma::None,
            cr::RD_READ => RemoteDma::Read,
            cr::RD_WRITE => RemoteDma::Write,
            cr::RD_SEND => RemoteDma::SendPacket,
            _ => RemoteDma::Abort,
        }
    }
    /// A write of this value makes the card transmit (QEMU: TXP acts only with STP clear). This
    /// is the one CR write that needs card memory.
    pub fn starts_transmit(self) -> bool {
        !self.stopped() && self.transmit()
    }
    /// A write of this value asks for a read or write remote DMA (QEMU tests RD0|RD1, so "send
    /// packet" counts too); with RBCR zero the card signals RDC at once.
    pub fn starts_remote_dma(self) -> bool {
        !self.stopped() && self.0 & (cr::RD_READ | cr::RD_WRITE) != 0
    }
}

/// View of a data configuration register value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dcr(pub u8);

impl Dcr {
    /// Word-wide transfers on the data port for 1- and 2-byte accesses.
    pub fn word_transfer(self) -> bool {
        self.0 & dcr::WTS != 0
    }
}

/// View of a receive configuration register value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rcr(pub u8);

impl Rcr {
    /// AB.
    pub fn broadcast(self) -> bool {
        self.0 & rcr::AB != 0
    }
    /// AM.
    pub fn multicast(self) -> bool {
        self.0 & rcr::AM != 0
    }
    /// PRO.
    pub fn promiscuous(self) -> bool {
        self.0 & rcr::PRO != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cr_view_decodes_every_field() {
        let c = Cr(0x40 | cr::RD_WRITE | cr::STA);
        assert_eq!(c.page(), 1);
        assert!(!c.stopped());
        assert!(!c.transmit());
        assert_eq!(c.remote_dma(), RemoteDma::Write);
        assert!(c.starts_remote_dma());
        assert!(!c.starts_transmit());
        assert_eq!(Cr(0xc0).page(), 3);
        assert_eq!(Cr(cr::RD_READ).remote_dma(), RemoteDma::Read);
        assert_eq!(Cr(cr::RD_SEND).remote_dma(), RemoteDma::SendPacket);
        assert_eq!(Cr(cr::RD_ABORT).remote_dma(), RemoteDma::Abort);
        assert_eq!(Cr(0x38).remote_dma(), RemoteDma::Abort);
        assert_eq!(Cr(0).remote_dma(), RemoteDma::None);
        assert!(Cr(cr::TXP | cr::STA).starts_transmit());
        // TXP with STP set does nothing (QEMU acts on CR only with STP clear).
        assert!(!Cr(cr::TXP | cr::STP).starts_transmit());
        assert!(!Cr(cr::RD_READ | cr::STP).starts_remote_dma());
        assert!(!Cr(cr::RD_ABORT).starts_remote_dma());
    }

    #[test]
    fn dcr_and_rcr_views() {
        assert!(Dcr(0x49).word_transfer());
        assert!(!Dcr(0x48).word_transfer());
        let r = Rcr(rcr::AB | rcr::PRO);
        assert!(r.broadcast() && r.promiscuous() && !r.multicast());
        assert!(Rcr(rcr::AM).multicast());
    }
}
