//! The guest driver: the port sequences of Linux's `ne2k-pci.c` + `lib8390.c`
//! (`drivers/net/ethernet/8390/`) for an RTL8029, over a [`PortIo`] trait where each call is one
//! trap.
//!
//! Followed as the kernel does it, access for access: the probe (`ne2k_pci_init_one`: CR sanity
//! read, the page-1 register 0x0d / counter test, the reset through port 0x1f, the
//! station-address PROM read with the `program_seq` setup, DCR word mode), `NS8390_init`
//! (stopped, DCR, RBCR clear, monitor + loopback, TPSR, PSTART, BNRY = PSTOP - 1, PSTOP, ISR
//! clear, IMR 0, PAR and CURR via page 1; when starting: ISR clear, IMR = 0x3f, start, TCR
//! normal, RCR, then `do_set_multicast_list`), `ei_start_xmit` with the two transmit slots,
//! `ne2k_pci_block_output` (RDC ack, RBCR/RSAR, remote write, `rep outsl` + a trailing `outw`,
//! RDC poll), `NS8390_trigger_send` (CR read for TXP busy, TBCR, TPSR, TXP), `ei_interrupt`
//! (page 0, ISR read loop of at most 11 rounds: overrun / receive / transmit done or error /
//! counters / RDC, acks by writing ISR, CR start), `ei_receive` (CURR via page 1, BNRY, the
//! header by `inl`, the 3c503 "bogus next page" check, length check, `rep insl` + trailing
//! `inw`/`inb`, BNRY = next - 1, at most 9 frames, ack PRX|RXE) and `ei_rx_overrun`.
//!
//! Choices: the RTL8029 entry has neither `ONLY_16BIT_IO` nor `ONLY_32BIT_IO`, so transfers use
//! `insl/outsl` and the probe reads the PROM with 32 `inb`s. `NE8390_RW_BUGFIX` (the dummy
//! remote read before a remote write) is not defined for `ne2k-pci` and is not done. Debug-only
//! reads (`ei_debug`/`netif_msg_*` disabled by default) are not done. Busy-wait loops bounded by
//! jiffies in Linux are bounded here by a number of polls ([`POLLS`]). `mdelay` is omitted.
//! A frame longer than 1514 bytes is refused by [`Ne2kPci::start_xmit`] (in Linux the MTU
//! guarantees it never arrives).

use std::collections::VecDeque;

/// Port I/O as the guest performs it; each call is one trap. `insl`/`outsl` are `rep insl` /
/// `rep outsl` of `buf.len() / 4` dwords (little-endian), one trap per call.
pub trait PortIo {
    /// `inb`.
    fn inb(&mut self, port: u8) -> u8;
    /// `outb`.
    fn outb(&mut self, port: u8, value: u8);
    /// `inw`.
    fn inw(&mut self, port: u8) -> u16;
    /// `outw`.
    fn outw(&mut self, port: u8, value: u16);
    /// `inl`.
    fn inl(&mut self, port: u8) -> u32;
    /// `outl`.
    fn outl(&mut self, port: u8, value: u32);
    /// `rep insl`.
    fn insl(&mut self, port: u8, buf: &mut [u8]);
    /// `rep outsl`.
    fn outsl(&mut self, port: u8, buf: &[u8]);
}

/// Linux `8390.h` / `ne2k-pci.c` constants.
mod k {
    pub const E8390_CMD: u8 = 0x00;
    pub const E8390_STOP: u8 = 0x01;
    pub const E8390_START: u8 = 0x02;
    pub const E8390_TRANS: u8 = 0x04;
    pub const E8390_RREAD: u8 = 0x08;
    pub const E8390_RWRITE: u8 = 0x10;
    pub const E8390_NODMA: u8 = 0x20;
    pub const E8390_PAGE0: u8 = 0x00;
    pub const E8390_PAGE1: u8 = 0x40;
    pub const E8390_RXCONFIG: u8 = 0x04;
    pub const E8390_RXOFF: u8 = 0x20;
    pub const E8390_TXCONFIG: u8 = 0x00;
    pub const E8390_TXOFF: u8 = 0x02;

    pub const EN0_STARTPG: u8 = 0x01;
    pub const EN0_STOPPG: u8 = 0x02;
    pub const EN0_BOUNDARY: u8 = 0x03;
    pub const EN0_TSR: u8 = 0x04;
    pub const EN0_TPSR: u8 = 0x04;
    pub const EN0_TCNTLO: u8 = 0x05;
    pub const EN0_TCNTHI: u8 = 0x06;
    pub const EN0_ISR: u8 = 0x07;
    pub const EN0_RSARLO: u8 = 0x08;
    pub const EN0_RSARHI: u8 = 0x09;
    pub const EN0_RCNTLO: u8 = 0x0a;
    pub const EN0_RCNTHI: u8 = 0x0b;
    pub const EN0_RXCR: u8 = 0x0c;
    pub const EN0_TXCR: u8 = 0x0d;
    pub const EN0_COUNTER0: u8 = 0x0d;
    pub const EN0_DCFG: u8 = 0x0e;
    pub const EN0_COUNTER1: u8 = 0x0e;
    pub const EN0_IMR: u8 = 0x0f;
    pub const EN0_COUNTER2: u8 = 0x0f;
    pub const EN1_PHYS: u8 = 0x01;
    pub const EN1_CURPAG: u8 = 0x07;
    pub const EN1_MULT: u8 = 0x08;

    pub const ENISR_RX: u8 = 0x01;
    pub const ENISR_TX: u8 = 0x02;
    pub const ENISR_RX_ERR: u8 = 0x04;
    pub const ENISR_TX_ERR: u8 = 0x08;
    pub const ENISR_OVER: u8 = 0x10;
    pub const ENISR_COUNTERS: u8 = 0x20;
    pub const ENISR_RDC: u8 = 0x40;
    pub const ENISR_RESET: u8 = 0x80;
    pub const ENISR_ALL: u8 = 0x3f;

    pub const ENRSR_RXOK: u8 = 0x01;
    pub const ENRSR_FO: u8 = 0x08;
    pub const ENRSR_PHY: u8 = 0x20;

    pub const ENTSR_PTX: u8 = 0x01;
    pub const ENTSR_COL: u8 = 0x04;
    pub const ENTSR_ABT: u8 = 0x08;
    pub const ENTSR_FU: u8 = 0x20;

    /// `0x48 | ENDCFG_WTS`: word-wide, FIFO threshold 8 bytes, normal mode.
    pub const ENDCFG_WORD: u8 = 0x49;

    pub const NE_DATAPORT: u8 = 0x10;
    pub const NE_RESET: u8 = 0x1f;

    pub const NESM_START_PG: u8 = 0x40;
    pub const NESM_STOP_PG: u8 = 0x80;
    pub const TX_PAGES: u8 = 12;
    pub const MAX_SERVICE: u32 = 12;
    pub const ETH_ZLEN: usize = 60;
}

/// Polls of ISR before a busy-wait gives up (Linux waits 2 jiffies).
pub const POLLS: u32 = 16;

/// Why the probe found no card.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeError {
    /// CR reads 0xff: nothing there.
    NoCard,
    /// The tally counter did not clear on read: not an 8390.
    Not8390,
    /// ISR.RST never came up after the reset.
    ResetTimeout,
}

/// Why a frame was not queued for transmit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XmitError {
    /// Both transmit slots are in use (`NETDEV_TX_BUSY`); retry after a transmit interrupt.
    Busy,
    /// Over 1514 bytes.
    TooLong,
}

/// The driver's `net_device_stats` and a few of its own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriverStats {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub rx_errors: u64,
    pub rx_length_errors: u64,
    pub rx_over_errors: u64,
    pub rx_fifo_errors: u64,
    pub rx_frame_errors: u64,
    pub rx_crc_errors: u64,
    pub rx_missed_errors: u64,
    pub multicast: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub tx_errors: u64,
    pub tx_aborted_errors: u64,
    pub collisions: u64,
    /// Calls of [`Ne2kPci::interrupt`].
    pub interrupts: u64,
    /// Remote-DMA completion never signalled (card reset and re-initialised).
    pub dma_timeouts: u64,
    /// Reset not acknowledged by ISR.RST.
    pub reset_timeouts: u64,
    /// `trigger_send` found TXP still set.
    pub trigger_busy: u64,
}

/// Receive-mode flags (`IFF_PROMISC`, `IFF_ALLMULTI`) and the multicast list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RxMode {
    /// `IFF_PROMISC`.
    pub promisc: bool,
    /// `IFF_ALLMULTI`.
    pub allmulti: bool,
    /// The device's multicast addresses.
    pub mc: Vec<[u8; 6]>,
}

/// One `ne2k-pci` device: the driver state of `struct ei_device`.
#[derive(Clone, Debug)]
pub struct Ne2kPci {
    dev_addr: [u8; 6],
    sa_prom: [u8; 32],
    tx_start_page: u8,
    rx_start_page: u8,
    stop_page: u8,
    current_page: u8,
    tx1: i32,
    tx2: i32,
    txing: bool,
    running: bool,
    queue_stopped: bool,
    rx_mode: RxMode,
    mcfilter: [u8; 8],
    stats: DriverStats,
    rx: VecDeque<Vec<u8>>,
}

impl Ne2kPci {
    /// `ne2k_pci_init_one`: find and reset the card, read the station address, leave it
    /// initialised and stopped (`NS8390_init(dev, 0)`).
    pub fn probe(io: &mut impl PortIo) -> Result<Ne2kPci, ProbeError> {
        use k::*;
        let reg0 = io.inb(E8390_CMD);
        if reg0 == 0xff {
            return Err(ProbeError::NoCard);
        }
        io.outb(E8390_CMD, E8390_NODMA + E8390_PAGE1 + E8390_STOP);
        let regd = io.inb(0x0d);
        io.outb(0x0d, 0xff);
        io.outb(E8390_CMD, E8390_NODMA + E8390_PAGE0);
        io.inb(EN0_COUNTER0);
        if io.inb(EN0_COUNTER0) != 0 {
            io.outb(E8390_CMD, reg0);
            io.outb(0x0d, regd);
            return Err(ProbeError::Not8390);
        }
        let v = io.inb(NE_RESET);
        io.outb(NE_RESET, v);
        if !poll_isr(io, ENISR_RESET) {
            return Err(ProbeError::ResetTimeout);
        }
        io.outb(EN0_ISR, 0xff);
        let program_seq = [
            (E8390_NODMA + E8390_PAGE0 + E8390_STOP, E8390_CMD),
            (ENDCFG_WORD, EN0_DCFG),
            (0x00, EN0_RCNTLO),
            (0x00, EN0_RCNTHI),
            (0x00, EN0_IMR),
            (0xff, EN0_ISR),
            (E8390_RXOFF, EN0_RXCR),
            (E8390_TXOFF, EN0_TXCR),
            (32, EN0_RCNTLO),
            (0x00, EN0_RCNTHI),
            (0x00, EN0_RSARLO),
            (0x00, EN0_RSARHI),
            (E8390_RREAD + E8390_START, E8390_CMD),
        ];
        for (value, reg) in program_seq {
            io.outb(reg, value);
        }
        let mut sa_prom = [0u8; 32];
        for b in sa_prom.iter_mut() {
            *b = io.inb(NE_DATAPORT);
        }
        io.outb(EN0_DCFG, ENDCFG_WORD);
        let mut dev = Ne2kPci {
            dev_addr: [0; 6],
            sa_prom,
            tx_start_page: NESM_START_PG,
            rx_start_page: NESM_START_PG + TX_PAGES,
            stop_page: NESM_STOP_PG,
            current_page: NESM_START_PG + TX_PAGES,
            tx1: 0,
            tx2: 0,
            txing: false,
            running: false,
            queue_stopped: true,
            rx_mode: RxMode::default(),
            mcfilter: [0; 8],
            stats: DriverStats::default(),
            rx: VecDeque::new(),
        };
        // NS8390_init runs before the address is copied into dev_addr (as in Linux).
        dev.ns8390_init(io, false);
        dev.dev_addr.copy_from_slice(&sa_prom[..6]);
        Ok(dev)
    }

    /// The station address read from the PROM.
    pub fn mac(&self) -> [u8; 6] {
        self.dev_addr
    }

    /// The 32 bytes the probe read from the PROM (one `inb` each, word mode).
    pub fn sa_prom(&self) -> [u8; 32] {
        self.sa_prom
    }

    /// Statistics.
    pub fn stats(&self) -> DriverStats {
        self.stats
    }

    /// The stack would stop handing frames (both transmit slots in use).
    pub fn queue_stopped(&self) -> bool {
        self.queue_stopped
    }

    /// Frames received and not yet taken.
    pub fn take_rx(&mut self) -> Option<Vec<u8>> {
        self.rx.pop_front()
    }

    /// `ne2k_pci_open` → `ei_open`: `NS8390_init(dev, 1)`.
    pub fn open(&mut self, io: &mut impl PortIo) {
        self.running = true;
        self.ns8390_init(io, true);
        self.queue_stopped = false;
    }

    /// `ei_close`: `NS8390_init(dev, 0)`.
    pub fn close(&mut self, io: &mut impl PortIo) {
        self.ns8390_init(io, false);
        self.running = false;
        self.queue_stopped = true;
    }

    /// `ei_set_multicast_list`.
    pub fn set_rx_mode(&mut self, io: &mut impl PortIo, mode: RxMode) {
        self.rx_mode = mode;
        self.do_set_multicast_list(io);
    }

    /// `__NS8390_init`.
    fn ns8390_init(&mut self, io: &mut impl PortIo, startp: bool) {
        use k::*;
        io.outb(E8390_CMD, E8390_NODMA + E8390_PAGE0 + E8390_STOP);
        io.outb(EN0_DCFG, ENDCFG_WORD);
        io.outb(EN0_RCNTLO, 0);
        io.outb(EN0_RCNTHI, 0);
        io.outb(EN0_RXCR, E8390_RXOFF);
        io.outb(EN0_TXCR, E8390_TXOFF);
        io.outb(EN0_TPSR, self.tx_start_page);
        self.tx1 = 0;
        self.tx2 = 0;
        io.outb(EN0_STARTPG, self.rx_start_page);
        io.outb(EN0_BOUNDARY, self.stop_page - 1);
        self.current_page = self.rx_start_page;
        io.outb(EN0_STOPPG, self.stop_page);
        io.outb(EN0_ISR, 0xff);
        io.outb(EN0_IMR, 0);
        io.outb(E8390_CMD, E8390_NODMA + E8390_PAGE1 + E8390_STOP);
        for (i, b) in self.dev_addr.iter().enumerate() {
            io.outb(EN1_PHYS + i as u8, *b);
        }
        io.outb(EN1_CURPAG, self.rx_start_page);
        io.outb(E8390_CMD, E8390_NODMA + E8390_PAGE0 + E8390_STOP);
        self.tx1 = 0;
        self.tx2 = 0;
        self.txing = false;
        if startp {
            io.outb(EN0_ISR, 0xff);
            io.outb(EN0_IMR, ENISR_ALL);
            io.outb(E8390_CMD, E8390_NODMA + E8390_PAGE0 + E8390_START);
            io.outb(EN0_TXCR, E8390_TXCONFIG);
            io.outb(EN0_RXCR, E8390_RXCONFIG);
            self.do_set_multicast_list(io);
        }
    }

    /// `do_set_multicast_list` (`BUG_83C690` defined: no MAR read-back).
    fn do_set_multicast_list(&mut self, io: &mut impl PortIo) {
        use k::*;
        let m = &self.rx_mode;
        if !(m.promisc || m.allmulti) {
            self.mcfilter = [0; 8];
            for a in &m.mc {
                let idx = crate::mcast_index(a);
                self.mcfilter[usize::from(idx >> 3)] |= 1 << (idx & 7);
            }
        } else {
            self.mcfilter = [0xff; 8];
        }
        if self.running {
            io.outb(EN0_RXCR, E8390_RXCONFIG);
        }
        io.outb(E8390_CMD, E8390_NODMA + E8390_PAGE1);
        for (i, b) in self.mcfilter.iter().enumerate() {
            io.outb(EN1_MULT + i as u8, *b);
        }
        io.outb(E8390_CMD, E8390_NODMA + E8390_PAGE0);
        let m = &self.rx_mode;
        let rxcr = if m.promisc {
            E8390_RXCONFIG | 0x18
        } else if m.allmulti || !m.mc.is_empty() {
            E8390_RXCONFIG | 0x08
        } else {
            E8390_RXCONFIG
        };
        io.outb(EN0_RXCR, rxcr);
    }

    /// `ei_start_xmit`: frames under 60 bytes are padded; one of the two 6-page slots is
    /// filled by remote DMA and sent at once if the transmitter is idle.
    pub fn start_xmit(&mut self, io: &mut impl PortIo, frame: &[u8]) -> Result<(), XmitError> {
        use k::*;
        if frame.len() > crate::MAX_FRAME {
            return Err(XmitError::TooLong);
        }
        let mut data = frame.to_vec();
        if data.len() < ETH_ZLEN {
            data.resize(ETH_ZLEN, 0);
        }
        let send_length = data.len();
        io.outb(EN0_IMR, 0x00);
        let output_page = if self.tx1 == 0 {
            self.tx1 = send_length as i32;
            self.tx_start_page
        } else if self.tx2 == 0 {
            self.tx2 = send_length as i32;
            self.tx_start_page + TX_PAGES / 2
        } else {
            self.queue_stopped = true;
            io.outb(EN0_IMR, ENISR_ALL);
            self.stats.tx_errors += 1;
            return Err(XmitError::Busy);
        };
        self.block_output(io, &data, output_page);
        if !self.txing {
            self.txing = true;
            self.trigger_send(io, send_length, output_page);
            if output_page == self.tx_start_page {
                self.tx1 = -1;
            } else {
                self.tx2 = -1;
            }
        }
        self.queue_stopped = self.tx1 != 0 && self.tx2 != 0;
        io.outb(EN0_IMR, ENISR_ALL);
        self.stats.tx_bytes += send_length as u64;
        Ok(())
    }

    /// `ne2k_pci_block_output`.
    fn block_output(&mut self, io: &mut impl PortIo, buf: &[u8], start_page: u8) {
        use k::*;
        let mut count = buf.len();
        // "On little-endian it's always safe to round the count up for word writes."
        let mut padded = buf.to_vec();
        if count & 1 != 0 {
            count += 1;
            padded.push(0);
        }
        io.outb(E8390_CMD, E8390_PAGE0 + E8390_START + E8390_NODMA);
        io.outb(EN0_ISR, ENISR_RDC);
        io.outb(EN0_RCNTLO, count as u8);
        io.outb(EN0_RCNTHI, (count >> 8) as u8);
        io.outb(EN0_RSARLO, 0x00);
        io.outb(EN0_RSARHI, start_page);
        io.outb(E8390_CMD, E8390_RWRITE + E8390_START);
        let whole = count & !3;
        io.outsl(NE_DATAPORT, &padded[..whole]);
        if count & 2 != 0 {
            io.outw(
                NE_DATAPORT,
                u16::from_le_bytes([padded[whole], padded[whole + 1]]),
            );
        }
        if !poll_isr(io, ENISR_RDC) {
            self.stats.dma_timeouts += 1;
            self.reset_8390(io);
            self.ns8390_init(io, true);
        }
        io.outb(EN0_ISR, ENISR_RDC);
    }

    /// `NS8390_trigger_send`.
    fn trigger_send(&mut self, io: &mut impl PortIo, length: usize, start_page: u8) {
        use k::*;
        io.outb(E8390_CMD, E8390_NODMA + E8390_PAGE0);
        if io.inb(E8390_CMD) & E8390_TRANS != 0 {
            self.stats.trigger_busy += 1;
            return;
        }
        io.outb(EN0_TCNTLO, length as u8);
        io.outb(EN0_TCNTHI, (length >> 8) as u8);
        io.outb(EN0_TPSR, start_page);
        io.outb(E8390_CMD, E8390_NODMA + E8390_TRANS + E8390_START);
    }

    /// `ne2k_pci_reset_8390`.
    pub fn reset_8390(&mut self, io: &mut impl PortIo) {
        use k::*;
        let v = io.inb(NE_RESET);
        io.outb(NE_RESET, v);
        self.txing = false;
        if !poll_isr(io, ENISR_RESET) {
            self.stats.reset_timeouts += 1;
        }
        io.outb(EN0_ISR, ENISR_RESET);
    }

    /// `ei_interrupt`: returns whether anything was serviced (`IRQ_RETVAL`).
    pub fn interrupt(&mut self, io: &mut impl PortIo) -> bool {
        use k::*;
        self.stats.interrupts += 1;
        io.outb(E8390_CMD, E8390_NODMA + E8390_PAGE0);
        let mut nr_serviced = 0u32;
        loop {
            let interrupts = io.inb(EN0_ISR);
            if interrupts == 0 {
                break;
            }
            nr_serviced += 1;
            if nr_serviced >= MAX_SERVICE {
                break;
            }
            if !self.running {
                io.outb(EN0_ISR, interrupts);
                break;
            }
            if interrupts & ENISR_OVER != 0 {
                self.rx_overrun(io);
            } else if interrupts & (ENISR_RX + ENISR_RX_ERR) != 0 {
                self.receive(io);
            }
            if interrupts & ENISR_TX != 0 {
                self.tx_intr(io);
            } else if interrupts & ENISR_TX_ERR != 0 {
                self.tx_err(io);
            }
            if interrupts & ENISR_COUNTERS != 0 {
                self.stats.rx_frame_errors += u64::from(io.inb(EN0_COUNTER0));
                self.stats.rx_crc_errors += u64::from(io.inb(EN0_COUNTER1));
                self.stats.rx_missed_errors += u64::from(io.inb(EN0_COUNTER2));
                io.outb(EN0_ISR, ENISR_COUNTERS);
            }
            if interrupts & ENISR_RDC != 0 {
                io.outb(EN0_ISR, ENISR_RDC);
            }
            io.outb(E8390_CMD, E8390_NODMA + E8390_PAGE0 + E8390_START);
        }
        nr_serviced > 0
    }

    /// `ei_tx_err`.
    fn tx_err(&mut self, io: &mut impl PortIo) {
        use k::*;
        let txsr = io.inb(EN0_TSR);
        io.outb(EN0_ISR, ENISR_TX_ERR);
        if txsr & (ENTSR_ABT + ENTSR_FU) != 0 {
            self.tx_intr(io);
        } else {
            self.stats.tx_errors += 1;
        }
    }

    /// `ei_tx_intr`.
    fn tx_intr(&mut self, io: &mut impl PortIo) {
        use k::*;
        let status = io.inb(EN0_TSR);
        io.outb(EN0_ISR, ENISR_TX);
        if self.tx1 < 0 {
            self.tx1 = 0;
            if self.tx2 > 0 {
                self.txing = true;
                self.trigger_send(io, self.tx2 as usize, self.tx_start_page + 6);
                self.tx2 = -1;
            } else {
                self.txing = false;
            }
        } else if self.tx2 < 0 {
            self.tx2 = 0;
            if self.tx1 > 0 {
                self.txing = true;
                self.trigger_send(io, self.tx1 as usize, self.tx_start_page);
                self.tx1 = -1;
            } else {
                self.txing = false;
            }
        }
        if status & ENTSR_COL != 0 {
            self.stats.collisions += 1;
        }
        if status & ENTSR_PTX != 0 {
            self.stats.tx_packets += 1;
        } else {
            self.stats.tx_errors += 1;
            if status & ENTSR_ABT != 0 {
                self.stats.tx_aborted_errors += 1;
                self.stats.collisions += 16;
            }
        }
        self.queue_stopped = false;
    }

    /// `ei_receive`.
    fn receive(&mut self, io: &mut impl PortIo) {
        use k::*;
        let num_rx_pages = i32::from(self.stop_page) - i32::from(self.rx_start_page);
        let mut rx_pkt_count = 0;
        loop {
            rx_pkt_count += 1;
            if rx_pkt_count >= 10 {
                break;
            }
            io.outb(E8390_CMD, E8390_NODMA + E8390_PAGE1);
            let rxing_page = io.inb(EN1_CURPAG);
            io.outb(E8390_CMD, E8390_NODMA + E8390_PAGE0);
            let mut this_frame = io.inb(EN0_BOUNDARY).wrapping_add(1);
            if this_frame >= self.stop_page {
                this_frame = self.rx_start_page;
            }
            if this_frame == rxing_page {
                break;
            }
            let current_offset = u16::from(this_frame) << 8;
            let (status, next, count) = self.get_8390_hdr(io, this_frame);
            let pkt_len = i32::from(count) - 4;
            let next_frame = (i32::from(this_frame) + 1 + ((pkt_len + 4) >> 8)) as u8;
            let nf = i32::from(next_frame);
            let hn = i32::from(next);
            if hn != nf && hn != nf + 1 && hn != nf - num_rx_pages && hn != nf + 1 - num_rx_pages {
                self.current_page = rxing_page;
                io.outb(EN0_BOUNDARY, self.current_page.wrapping_sub(1));
                self.stats.rx_errors += 1;
                continue;
            }
            if !(60..=1518).contains(&pkt_len) {
                self.stats.rx_errors += 1;
                self.stats.rx_length_errors += 1;
            } else if status & 0x0f == ENRSR_RXOK {
                let data = self.block_input(io, pkt_len as usize, current_offset.wrapping_add(4));
                self.rx.push_back(data);
                self.stats.rx_packets += 1;
                self.stats.rx_bytes += pkt_len as u64;
                if status & ENRSR_PHY != 0 {
                    self.stats.multicast += 1;
                }
            } else {
                self.stats.rx_errors += 1;
                if status & ENRSR_FO != 0 {
                    self.stats.rx_fifo_errors += 1;
                }
            }
            let mut next_frame = next;
            if next_frame >= self.stop_page {
                next_frame = self.rx_start_page;
            }
            self.current_page = next_frame;
            io.outb(EN0_BOUNDARY, next_frame.wrapping_sub(1));
        }
        io.outb(EN0_ISR, ENISR_RX + ENISR_RX_ERR);
    }

    /// `ne2k_pci_get_8390_hdr`: (status, next page, count).
    fn get_8390_hdr(&mut self, io: &mut impl PortIo, ring_page: u8) -> (u8, u8, u16) {
        use k::*;
        io.outb(E8390_CMD, E8390_NODMA + E8390_PAGE0 + E8390_START);
        io.outb(EN0_RCNTLO, 4);
        io.outb(EN0_RCNTHI, 0);
        io.outb(EN0_RSARLO, 0);
        io.outb(EN0_RSARHI, ring_page);
        io.outb(E8390_CMD, E8390_RREAD + E8390_START);
        let v = io.inl(NE_DATAPORT);
        io.outb(EN0_ISR, ENISR_RDC);
        (v as u8, (v >> 8) as u8, (v >> 16) as u16)
    }

    /// `ne2k_pci_block_input`.
    fn block_input(&mut self, io: &mut impl PortIo, count: usize, ring_offset: u16) -> Vec<u8> {
        use k::*;
        io.outb(E8390_CMD, E8390_NODMA + E8390_PAGE0 + E8390_START);
        io.outb(EN0_RCNTLO, count as u8);
        io.outb(EN0_RCNTHI, (count >> 8) as u8);
        io.outb(EN0_RSARLO, ring_offset as u8);
        io.outb(EN0_RSARHI, (ring_offset >> 8) as u8);
        io.outb(E8390_CMD, E8390_RREAD + E8390_START);
        let mut buf = vec![0u8; count];
        let whole = count & !3;
        io.insl(NE_DATAPORT, &mut buf[..whole]);
        let mut at = whole;
        if count & 2 != 0 {
            let w = io.inw(NE_DATAPORT).to_le_bytes();
            buf[at..at + 2].copy_from_slice(&w);
            at += 2;
        }
        if count & 1 != 0 {
            buf[at] = io.inb(NE_DATAPORT);
        }
        io.outb(EN0_ISR, ENISR_RDC);
        buf
    }

    /// `ei_rx_overrun` (without the 10 ms delay).
    fn rx_overrun(&mut self, io: &mut impl PortIo) {
        use k::*;
        let was_txing = io.inb(E8390_CMD) & E8390_TRANS != 0;
        io.outb(E8390_CMD, E8390_NODMA + E8390_PAGE0 + E8390_STOP);
        self.stats.rx_over_errors += 1;
        io.outb(EN0_RCNTLO, 0);
        io.outb(EN0_RCNTHI, 0);
        let must_resend = was_txing && io.inb(EN0_ISR) & (ENISR_TX + ENISR_TX_ERR) == 0;
        io.outb(EN0_TXCR, E8390_TXOFF);
        io.outb(E8390_CMD, E8390_NODMA + E8390_PAGE0 + E8390_START);
        self.receive(io);
        io.outb(EN0_ISR, ENISR_OVER);
        io.outb(EN0_TXCR, E8390_TXCONFIG);
        if must_resend {
            io.outb(
                E8390_CMD,
                E8390_NODMA + E8390_PAGE0 + E8390_START + E8390_TRANS,
            );
        }
    }

    /// `ei_get_stats`: fold the tally counters in (page 0 assumed, as Linux does).
    pub fn get_stats(&mut self, io: &mut impl PortIo) -> DriverStats {
        use k::*;
        if self.running {
            self.stats.rx_frame_errors += u64::from(io.inb(EN0_COUNTER0));
            self.stats.rx_crc_errors += u64::from(io.inb(EN0_COUNTER1));
            self.stats.rx_missed_errors += u64::from(io.inb(EN0_COUNTER2));
        }
        self.stats
    }
}

/// Poll ISR until `bit` is set, at most [`POLLS`] reads.
fn poll_isr(io: &mut impl PortIo, bit: u8) -> bool {
    (0..POLLS).any(|_| io.inb(k::EN0_ISR) & bit != 0)
}
