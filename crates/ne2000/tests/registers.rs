//! Register-level tests of the card through the device model's entry point, one test per
//! register group, state transition and rejection branch.

use pvnet_ne2000::regs::{cr, isr};
use pvnet_ne2000::{Access, Card, CardCounters, RxRefused, SharedRegs, DATA_PORT, RESET_PORT};

const MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];

struct Nic {
    card: Card,
    s: SharedRegs,
}

impl Nic {
    fn new() -> Nic {
        let card = Card::new(MAC);
        let s = SharedRegs::new();
        card.power_on(&s);
        Nic { card, s }
    }
    fn w(&mut self, port: u8, v: u8) -> pvnet_ne2000::Completion {
        self.card.dm_access(&self.s, Access::outb(port, v))
    }
    fn r(&mut self, port: u8) -> u8 {
        self.card.dm_access(&self.s, Access::inb(port)).value as u8
    }
    fn page(&mut self, p: u8) {
        self.w(0, (p << 6) | cr::RD_ABORT | cr::STA);
    }
    /// A started card with ring 0x4c..0x80, CURR 0x4c, BNRY 0x7f, PAR = MAC, RCR = AB.
    fn started() -> Nic {
        let mut n = Nic::new();
        n.w(0, 0x21);
        n.w(0x0e, 0x49);
        n.w(0x01, 0x4c);
        n.w(0x02, 0x80);
        n.w(0x03, 0x7f);
        n.w(0x07, 0xff);
        n.w(0, 0x61);
        for (i, b) in MAC.iter().enumerate() {
            n.w(1 + i as u8, *b);
        }
        n.w(0x07, 0x4c);
        n.w(0, 0x22);
        n.w(0x0c, 0x04);
        n.w(0x0f, 0x3f);
        n
    }
    /// Remote-DMA write of `data` at `addr` in word mode.
    fn dma_write(&mut self, addr: u16, data: &[u8]) {
        self.w(0x0a, data.len() as u8);
        self.w(0x0b, (data.len() >> 8) as u8);
        self.w(0x08, addr as u8);
        self.w(0x09, (addr >> 8) as u8);
        self.w(0, 0x12);
        for pair in data.chunks(2) {
            let v = u16::from(pair[0]) | u16::from(*pair.get(1).unwrap_or(&0)) << 8;
            self.card.dm_access(&self.s, Access::outw(DATA_PORT, v));
        }
    }
    fn dma_read(&mut self, addr: u16, len: usize) -> Vec<u8> {
        self.w(0x0a, len as u8);
        self.w(0x0b, (len >> 8) as u8);
        self.w(0x08, addr as u8);
        self.w(0x09, (addr >> 8) as u8);
        self.w(0, 0x0a);
        let mut out = Vec::new();
        while out.len() < len {
            let v = self.card.dm_access(&self.s, Access::inw(DATA_PORT)).value as u16;
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.truncate(len);
        out
    }
    fn counters(&self) -> CardCounters {
        self.card.counters()
    }
}

fn frame(dst: [u8; 6], len: usize, seed: u8) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    for (i, b) in f.iter_mut().enumerate().skip(12) {
        *b = seed.wrapping_add(i as u8).wrapping_mul(31);
    }
    f
}

#[test]
fn power_on_state() {
    let n = Nic::new();
    let s = n.s.snapshot();
    assert_eq!(s.magic, pvnet_ne2000::SHARED_MAGIC);
    assert_eq!(s.cr, 0x21);
    assert_eq!(s.isr, isr::RST);
    assert_eq!(
        (s.imr, s.pstart, s.pstop, s.curr, s.bnry, s.rbcr, s.tbcr),
        (0, 0, 0, 0, 0, 0, 0)
    );
    assert!(!n.s.irq_line(), "RST does not drive the line");
}

#[test]
fn page_select_routes_the_same_port_to_different_registers() {
    let mut n = Nic::new();
    n.page(0);
    n.w(0x01, 0x4c); // PSTART
    n.page(1);
    n.w(0x01, 0xaa); // PAR0
    assert_eq!(n.r(0x01), 0xaa);
    n.page(2);
    assert_eq!(n.r(0x01), 0x4c, "page 2 reads PSTART");
    n.page(0);
    assert_eq!(n.r(0x01), 0x00, "page 0 reads CLDA0 (0, as QEMU)");
    assert_eq!(n.r(0x00) >> 6, 0, "CR reads back its page");
    n.page(3);
    assert_eq!(n.r(0x00) >> 6, 3);
}

#[test]
fn page0_reads_follow_qemu() {
    let mut n = Nic::started();
    n.w(0x08, 0x34);
    n.w(0x09, 0x12);
    assert_eq!(n.r(0x08), 0x34, "CRDA0 = RSAR low");
    assert_eq!(n.r(0x09), 0x12, "CRDA1 = RSAR high");
    assert_eq!(n.r(0x0a), 0x50, "RTL8029 ID 'P'");
    assert_eq!(n.r(0x0b), 0x43, "RTL8029 ID 'C'");
    assert_eq!(n.r(0x03), 0x7f, "BNRY");
    for p in [0x01, 0x02, 0x05, 0x06, 0x0d, 0x0e, 0x0f] {
        assert_eq!(n.r(p), 0, "port {p:#x}: CLDA/NCR/FIFO/counters read 0");
    }
    assert_eq!(n.r(0x04), 0, "TSR before any transmit");
    assert_eq!(n.r(0x0c), 0, "RSR before any receive");
}

#[test]
fn page1_par_curr_mar_read_back() {
    let mut n = Nic::new();
    n.page(1);
    for p in 1..=0x0f {
        n.w(p, 0x10 + p);
    }
    for p in 1..=0x0f {
        assert_eq!(n.r(p), 0x10 + p, "page 1 port {p:#x}");
    }
    let s = n.s.snapshot();
    assert_eq!(s.par, [0x11, 0x12, 0x13, 0x14, 0x15, 0x16]);
    assert_eq!(s.curr, 0x17);
    assert_eq!(s.mar, [0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f]);
}

#[test]
fn page2_reads_pstart_pstop_and_ignores_writes() {
    let mut n = Nic::new();
    n.w(0x01, 0x46);
    n.w(0x02, 0x60);
    n.page(2);
    assert_eq!(n.r(0x01), 0x46);
    assert_eq!(n.r(0x02), 0x60);
    let before = n.s.snapshot();
    for p in 1..=0x0f {
        n.w(p, 0x99);
    }
    let mut after = n.s.snapshot();
    after.cr = before.cr;
    assert_eq!(before, after, "page 2 writes change nothing");
    for p in [0x03, 0x04, 0x0c, 0x0d, 0x0e, 0x0f] {
        assert_eq!(n.r(p), 0, "page 2 port {p:#x} reads 0 (QEMU)");
    }
}

#[test]
fn page3_config_registers() {
    let mut n = Nic::new();
    n.page(3);
    assert_eq!(n.r(0x03), 0x00, "CONFIG0: 10baseT");
    assert_eq!(n.r(0x05), 0x40, "CONFIG2");
    assert_eq!(n.r(0x06), 0x40, "CONFIG3: full duplex");
    let before = n.s.snapshot();
    n.w(0x01, 0xc0);
    n.w(0x06, 0x40);
    assert_eq!(before, n.s.snapshot(), "page 3 writes are ignored");
}

#[test]
fn isr_is_write_one_to_clear_and_rst_is_not_cleared_by_writes() {
    let mut n = Nic::started();
    n.s.snapshot();
    // Set PRX and PTX by a zero-length DMA (RDC) and a receive.
    n.w(0, 0x0a); // RDC
    n.card.receive(&n.s, &frame(MAC, 100, 1)).unwrap();
    assert_eq!(n.r(0x07), isr::RDC | isr::PRX);
    n.w(0x07, isr::PRX);
    assert_eq!(n.r(0x07), isr::RDC, "only the written bit clears");
    n.w(0x07, 0x00);
    assert_eq!(n.r(0x07), isr::RDC, "writing 0 clears nothing");
    // RST: the reset port sets it; a 0xff write does not clear it (QEMU masks 0x7f).
    n.r(RESET_PORT);
    n.w(0x07, 0xff);
    assert_eq!(n.r(0x07), isr::RST);
}

#[test]
fn irq_line_is_isr_and_imr_and_counts_rising_edges() {
    let mut n = Nic::started();
    n.w(0x0f, 0x00);
    let raised = n.s.irq_raised();
    n.card.receive(&n.s, &frame(MAC, 100, 1)).unwrap();
    assert!(!n.s.irq_line(), "masked");
    assert_eq!(n.s.irq_raised(), raised);
    let c = n.w(0x0f, isr::PRX);
    assert!(c.irq, "unmasking a pending bit raises the line");
    assert_eq!(n.s.irq_raised(), raised + 1);
    let c = n.w(0x07, isr::PRX);
    assert!(!c.irq, "ack lowers it");
    n.w(0x0f, 0x7f);
    n.r(RESET_PORT);
    assert!(!n.s.irq_line(), "RST (bit 7) never drives the line");
}

#[test]
fn cr_start_clears_rst_and_stop_does_not() {
    let mut n = Nic::new();
    n.w(0, cr::STP | cr::RD_ABORT);
    assert_eq!(n.s.snapshot().isr, isr::RST);
    n.w(0, cr::STA | cr::RD_ABORT);
    assert_eq!(n.s.snapshot().isr, 0);
}

#[test]
fn zero_length_remote_dma_completes_at_once() {
    for cmd in [cr::RD_READ, cr::RD_WRITE, cr::RD_SEND] {
        let mut n = Nic::started();
        n.w(0x0a, 0);
        n.w(0x0b, 0);
        n.w(0, cmd | cr::STA);
        assert_eq!(n.r(0x07) & isr::RDC, isr::RDC, "cmd {cmd:#x}");
    }
}

#[test]
fn remote_dma_with_count_does_not_complete_at_start() {
    let mut n = Nic::started();
    n.w(0x0a, 4);
    n.w(0, cr::RD_READ | cr::STA);
    assert_eq!(n.r(0x07) & isr::RDC, 0);
}

#[test]
fn remote_dma_start_with_stp_does_nothing() {
    let mut n = Nic::started();
    n.w(0, cr::RD_READ | cr::STP);
    assert_eq!(n.r(0x07) & isr::RDC, 0);
}

#[test]
fn abort_does_not_complete() {
    let mut n = Nic::started();
    n.w(0, cr::RD_ABORT | cr::STA);
    assert_eq!(n.r(0x07) & isr::RDC, 0);
}

#[test]
fn sixteen_bit_registers_compose_from_low_and_high() {
    let mut n = Nic::new();
    n.w(0x05, 0xea);
    n.w(0x06, 0x05);
    n.w(0x08, 0x78);
    n.w(0x09, 0x56);
    n.w(0x0a, 0x34);
    n.w(0x0b, 0x12);
    let s = n.s.snapshot();
    assert_eq!((s.tbcr, s.rsar, s.rbcr), (0x05ea, 0x5678, 0x1234));
    n.w(0x05, 0x01);
    assert_eq!(n.s.snapshot().tbcr, 0x0501, "low write keeps the high byte");
}

#[test]
fn plain_config_registers_store() {
    let mut n = Nic::new();
    n.w(0x04, 0x40);
    n.w(0x0c, 0x1c);
    n.w(0x0d, 0x02);
    n.w(0x0e, 0x49);
    n.w(0x03, 0x55);
    let s = n.s.snapshot();
    assert_eq!(
        (s.tpsr, s.rcr, s.tcr, s.dcr, s.bnry),
        (0x40, 0x1c, 0x02, 0x49, 0x55)
    );
}

#[test]
fn remote_dma_round_trip_in_word_mode_counts_down_and_signals_rdc() {
    let mut n = Nic::started();
    let data: Vec<u8> = (0..100u8).collect();
    n.dma_write(0x4000, &data);
    assert_eq!(n.s.snapshot().rbcr, 0);
    assert_ne!(n.r(0x07) & isr::RDC, 0);
    n.w(0x07, isr::RDC);
    assert_eq!(n.dma_read(0x4000, 100), data);
    assert_ne!(n.r(0x07) & isr::RDC, 0);
    assert_eq!(&n.card.memory()[..100], &data[..]);
}

#[test]
fn remote_dma_byte_mode_moves_one_byte_per_access() {
    let mut n = Nic::started();
    n.w(0x0e, 0x48); // WTS = 0
    n.w(0x0a, 3);
    n.w(0x08, 0x01);
    n.w(0x09, 0x50);
    n.w(0, 0x12);
    for b in [7u8, 8, 9] {
        n.card
            .dm_access(&n.s, Access::outw(DATA_PORT, 0xff00 | u16::from(b)));
    }
    assert_eq!(&n.card.memory()[0x1001..0x1004], &[7, 8, 9]);
    assert_eq!(
        n.card.memory()[0x1004],
        0,
        "one byte per access even for outw"
    );
    assert_eq!(n.s.snapshot().rsar, 0x5004);
}

#[test]
fn remote_dma_dword_moves_four_bytes() {
    let mut n = Nic::started();
    n.w(0x0a, 8);
    n.w(0x0b, 0);
    n.w(0x08, 0x00);
    n.w(0x09, 0x60);
    n.w(0, 0x12);
    n.card.dm_access(&n.s, Access::outl(DATA_PORT, 0x04030201));
    assert_eq!(n.s.snapshot().rbcr, 4);
    n.card.dm_access(&n.s, Access::outl(DATA_PORT, 0x08070605));
    assert_eq!(&n.card.memory()[0x2000..0x2008], &[1, 2, 3, 4, 5, 6, 7, 8]);
    assert_ne!(n.r(0x07) & isr::RDC, 0);
    n.w(0x0a, 8);
    n.w(0x08, 0x00);
    n.w(0x09, 0x60);
    n.w(0, 0x0a);
    assert_eq!(
        n.card.dm_access(&n.s, Access::inl(DATA_PORT)).value,
        0x04030201
    );
    assert_eq!(
        n.card.dm_access(&n.s, Access::inl(DATA_PORT)).value,
        0x08070605
    );
}

#[test]
fn remote_write_with_zero_count_is_ignored() {
    let mut n = Nic::started();
    n.w(0x0a, 0);
    n.w(0x0b, 0);
    n.w(0x08, 0x00);
    n.w(0x09, 0x40);
    n.card.dm_access(&n.s, Access::outw(DATA_PORT, 0xbeef));
    assert_eq!(&n.card.memory()[..2], &[0, 0]);
    assert_eq!(n.s.snapshot().rsar, 0x4000, "RSAR did not move");
}

#[test]
fn remote_read_with_zero_count_still_reads_and_signals_rdc() {
    let mut n = Nic::started();
    n.dma_write(0x4000, &[0xab, 0xcd]);
    n.w(0x07, 0xff);
    n.w(0x0a, 0);
    n.w(0x08, 0x00);
    n.w(0x09, 0x40);
    let v = n.card.dm_access(&n.s, Access::inw(DATA_PORT)).value;
    assert_eq!(v, 0xcdab);
    assert_ne!(n.r(0x07) & isr::RDC, 0);
}

#[test]
fn odd_address_word_access_is_aligned_down() {
    let mut n = Nic::started();
    n.dma_write(0x4100, &[1, 2, 3, 4]);
    n.w(0x0a, 2);
    n.w(0x08, 0x01);
    n.w(0x09, 0x41);
    assert_eq!(n.card.dm_access(&n.s, Access::inw(DATA_PORT)).value, 0x0201);
    assert_eq!(
        n.s.snapshot().rsar,
        0x4103,
        "RSAR advances from the unaligned value"
    );
}

#[test]
fn rsar_wraps_from_pstop_to_pstart() {
    let mut n = Nic::started();
    n.w(0x0a, 8);
    n.w(0x08, 0xfc);
    n.w(0x09, 0x7f);
    n.w(0, 0x12);
    n.card.dm_access(&n.s, Access::outl(DATA_PORT, 0x11111111));
    assert_eq!(
        n.s.snapshot().rsar,
        0x4c00,
        "landed on PSTOP: back to PSTART"
    );
    n.card.dm_access(&n.s, Access::outl(DATA_PORT, 0x22222222));
    assert_eq!(&n.card.memory()[0x3ffc..0x4000], &[0x11; 4]);
    assert_eq!(&n.card.memory()[0x0c00..0x0c04], &[0x22; 4]);
}

#[test]
fn prom_reads_doubled_in_byte_mode_and_single_in_word_mode() {
    let mut n = Nic::new();
    n.w(0x0e, 0x48);
    n.w(0x0a, 32);
    n.w(0x08, 0);
    n.w(0x09, 0);
    n.w(0, 0x0a);
    let bytes: Vec<u8> = (0..32).map(|_| n.r(DATA_PORT)).collect();
    for i in 0..6 {
        assert_eq!(bytes[2 * i], MAC[i]);
        assert_eq!(bytes[2 * i + 1], MAC[i]);
    }
    assert_eq!(&bytes[28..32], b"WWWW");
    // Word mode, inb: each read moves 2 bytes and returns the low one (Linux's probe).
    n.w(0x0e, 0x49);
    n.w(0x0a, 32);
    n.w(0x08, 0);
    n.w(0x09, 0);
    n.w(0, 0x0a);
    let single: Vec<u8> = (0..16).map(|_| n.r(DATA_PORT)).collect();
    assert_eq!(&single[..6], &MAC);
    assert_eq!(&single[14..16], b"WW");
    assert_eq!(n.card.prom()[..2], [MAC[0], MAC[0]]);
}

#[test]
fn prom_is_read_only() {
    let mut n = Nic::started();
    let before = n.counters().dma_unmapped;
    n.dma_write(0x0000, &[0xee; 8]);
    assert_eq!(&n.card.prom()[..2], &[MAC[0], MAC[0]]);
    assert_eq!(n.counters().dma_unmapped, before + 8);
}

#[test]
fn unmapped_remote_dma_reads_ones_and_drops_writes() {
    let mut n = Nic::started();
    n.dma_write(0x2000, &[1, 2, 3, 4]);
    assert_eq!(n.counters().dma_unmapped, 4);
    assert_eq!(n.dma_read(0x2000, 4), vec![0xff; 4]);
    assert_eq!(
        n.dma_read(0xc000, 2),
        vec![0xff; 2],
        "just past card memory"
    );
    // RSAR at the top of the 16-bit space wraps without leaving the model.
    n.w(0x0a, 8);
    n.w(0x08, 0xfe);
    n.w(0x09, 0xff);
    n.w(0, 0x0a);
    assert_eq!(
        n.card.dm_access(&n.s, Access::inl(DATA_PORT)).value,
        0xffff_ffff
    );
    assert_eq!(n.s.snapshot().rsar, 0x0002);
}

#[test]
fn reset_port_read_assigns_rst_and_write_is_a_no_op() {
    let mut n = Nic::started();
    n.w(0, 0x0a);
    assert_ne!(n.r(0x07), 0);
    let before = n.s.snapshot();
    n.w(RESET_PORT, 0);
    assert_eq!(before, n.s.snapshot(), "reset-port write does nothing");
    assert_eq!(n.r(RESET_PORT), 0);
    assert_eq!(n.r(0x07), isr::RST, "ISR = RST, other bits gone (QEMU)");
    assert_eq!(n.counters().resets, 1);
}

#[test]
fn other_widths_and_unmapped_ports_read_all_ones() {
    let mut n = Nic::started();
    assert_eq!(n.card.dm_access(&n.s, Access::inw(0x07)).value, 0xffff);
    assert_eq!(n.card.dm_access(&n.s, Access::inl(0x00)).value, 0xffff_ffff);
    for p in [0x11u8, 0x1e, 0x20, 0xff] {
        assert_eq!(n.r(p), 0xff, "port {p:#x}");
    }
    assert_eq!(
        n.card.dm_access(&n.s, Access::inw(RESET_PORT)).value,
        0xffff,
        "only byte reads reset"
    );
    assert_eq!(n.counters().resets, 0);
    let before = n.s.snapshot();
    n.card.dm_access(&n.s, Access::outw(0x0f, 0));
    n.card.dm_access(&n.s, Access::outb(0x30, 0));
    assert_eq!(before, n.s.snapshot(), "ignored writes");
}

fn load_tx(n: &mut Nic, page: u8, f: &[u8]) {
    n.dma_write(u16::from(page) << 8, f);
    n.w(0x04, page);
    n.w(0x05, f.len() as u8);
    n.w(0x06, (f.len() >> 8) as u8);
}

#[test]
fn transmit_sends_tbcr_bytes_from_tpsr_and_signals_ptx() {
    let mut n = Nic::started();
    let f = frame([0xff; 6], 301, 3);
    load_tx(&mut n, 0x40, &f);
    n.w(0x07, 0xff);
    let c = n.w(0, cr::TXP | cr::STA | cr::RD_ABORT);
    let tx = c.tx.expect("a frame");
    assert_eq!(n.card.tx_bytes(tx), &f[..]);
    assert!(c.irq);
    assert_eq!(n.r(0x04), 0x01, "TSR.PTX");
    assert_eq!(n.r(0x07), isr::PTX);
    assert_eq!(n.r(0) & cr::TXP, 0, "TXP clears");
    assert_eq!(n.counters().tx_frames, 1);
    assert_eq!(n.counters().tx_bytes, 301);
}

#[test]
fn transmit_with_stp_set_does_nothing() {
    let mut n = Nic::started();
    load_tx(&mut n, 0x40, &frame([0xff; 6], 60, 1));
    n.w(0x07, 0xff);
    let c = n.w(0, cr::TXP | cr::STP);
    assert!(c.tx.is_none());
    assert_eq!(n.r(0x07), 0);
    assert_eq!(n.counters().tx_frames, 0);
}

fn tx_refused(page: u8, len: u16) -> (Nic, pvnet_ne2000::Completion) {
    let mut n = Nic::started();
    n.w(0x04, page);
    n.w(0x05, len as u8);
    n.w(0x06, (len >> 8) as u8);
    n.w(0x07, 0xff);
    let c = n.w(0, cr::TXP | cr::STA);
    assert!(c.tx.is_none());
    assert_eq!(
        n.r(0x07),
        isr::PTX,
        "the guest still sees a completed transmit (QEMU)"
    );
    (n, c)
}

#[test]
fn transmit_runt_is_not_sent() {
    let (n, _) = tx_refused(0x40, 13);
    assert_eq!(n.counters().tx_runt, 1);
    assert_eq!(tx_refused(0x40, 0).0.counters().tx_runt, 1);
}

#[test]
fn transmit_oversize_is_not_sent() {
    let (n, _) = tx_refused(0x40, 1515);
    assert_eq!(n.counters().tx_oversize, 1);
    assert_eq!(tx_refused(0x40, 0xffff).0.counters().tx_oversize, 1);
}

#[test]
fn transmit_outside_card_memory_is_not_sent() {
    assert_eq!(
        tx_refused(0x00, 60).0.counters().tx_bad_range,
        1,
        "below card memory"
    );
    assert_eq!(tx_refused(0x3f, 60).0.counters().tx_bad_range, 1);
    assert_eq!(
        tx_refused(0xbf, 257).0.counters().tx_bad_range,
        1,
        "runs past 0xC000"
    );
}

#[test]
fn transmit_tpsr_above_memory_is_moved_down_as_qemu() {
    let mut n = Nic::started();
    let f = frame([0xff; 6], 64, 9);
    load_tx(&mut n, 0x40, &f);
    n.w(0x04, 0xc0); // 0xC000 - 0x8000 = 0x4000
    let c = n.w(0, cr::TXP | cr::STA);
    assert_eq!(n.card.tx_bytes(c.tx.unwrap()), &f[..]);
    // The largest TPSR (0xff) maps to 0x7f00: still inside memory.
    load_tx(&mut n, 0x7f, &f);
    n.w(0x04, 0xff);
    let c = n.w(0, cr::TXP | cr::STA);
    assert_eq!(n.card.tx_bytes(c.tx.unwrap()), &f[..]);
}

#[test]
fn receive_writes_header_data_and_advances_curr() {
    let mut n = Nic::started();
    let f = frame(MAC, 1000, 5);
    let acc = n.card.receive(&n.s, &f).unwrap();
    assert_eq!(acc.page, 0x4c);
    assert_eq!(acc.len, 1000);
    assert!(acc.irq);
    let m = n.card.memory();
    let base = 0x0c00;
    // 1000 + 4 header + 4 CRC = 1008 → 4 pages.
    assert_eq!(&m[base..base + 4], &[0x01, 0x50, 0xec, 0x03]);
    assert_eq!(&m[base + 4..base + 1004], &f[..]);
    let s = n.s.snapshot();
    assert_eq!(s.curr, 0x50);
    assert_eq!(s.rsr, 0x01);
    assert_eq!(s.isr & isr::PRX, isr::PRX);
    assert_eq!(n.counters().rx_frames, 1);
    assert_eq!(n.counters().rx_bytes, 1000);
}

#[test]
fn receive_pads_short_frames_to_60() {
    let mut n = Nic::started();
    let f = frame(MAC, 20, 1);
    let acc = n.card.receive(&n.s, &f).unwrap();
    assert_eq!(acc.len, 60);
    let m = n.card.memory();
    assert_eq!(&m[0x0c00..0x0c04], &[0x01, 0x4d, 64, 0]);
    assert_eq!(&m[0x0c04..0x0c04 + 20], &f[..]);
    assert!(m[0x0c04 + 20..0x0c04 + 60].iter().all(|b| *b == 0));
}

#[test]
fn receive_wraps_data_across_pstop() {
    let mut n = Nic::started();
    n.page(1);
    n.w(0x07, 0x7e);
    n.page(0);
    n.w(0x03, 0x70); // BNRY far behind: 52 - 14 pages free
    let f = frame(MAC, 1514, 7);
    n.card.receive(&n.s, &f).unwrap();
    let m = n.card.memory();
    // 2 pages before PSTOP hold header + 508 bytes; the rest continues at PSTART.
    assert_eq!(m[0x3e00], 0x01);
    assert_eq!(m[0x3e01], 0x4c + 4, "next page wrapped: 0x7e + 6 - 52");
    assert_eq!(&m[0x3e04..0x4000], &f[..508]);
    assert_eq!(&m[0x0c00..0x0c00 + 1006], &f[508..]);
    assert_eq!(n.s.snapshot().curr, 0x50);
}

#[test]
fn receive_marks_group_addresses_phy() {
    let mut n = Nic::started();
    n.card.receive(&n.s, &frame([0xff; 6], 60, 1)).unwrap();
    assert_eq!(n.s.snapshot().rsr, 0x21);
    assert_eq!(n.card.memory()[0x0c00], 0x21);
}

fn refused(n: &mut Nic, f: &[u8], why: RxRefused) {
    let before = n.counters();
    assert_eq!(n.card.receive(&n.s, f), Err(why));
    let after = n.counters();
    let moved = |a: u64, b: u64| b - a;
    let expect = |r: RxRefused| u64::from(r == why);
    assert_eq!(
        moved(before.rx_runt, after.rx_runt),
        expect(RxRefused::Runt)
    );
    assert_eq!(
        moved(before.rx_oversize, after.rx_oversize),
        expect(RxRefused::Oversize)
    );
    assert_eq!(
        moved(before.rx_stopped, after.rx_stopped),
        expect(RxRefused::Stopped)
    );
    assert_eq!(
        moved(before.rx_not_for_us, after.rx_not_for_us),
        expect(RxRefused::NotForUs)
    );
    assert_eq!(
        moved(before.rx_bad_ring, after.rx_bad_ring),
        expect(RxRefused::BadRing)
    );
    assert_eq!(
        moved(before.rx_ring_full, after.rx_ring_full),
        expect(RxRefused::RingFull)
    );
    assert_eq!(before.rx_frames, after.rx_frames);
}

#[test]
fn refuse_runt() {
    let mut n = Nic::started();
    refused(&mut n, &frame(MAC, 14, 0)[..13], RxRefused::Runt);
    refused(&mut n, &[], RxRefused::Runt);
}

#[test]
fn refuse_oversize() {
    let mut n = Nic::started();
    refused(&mut n, &frame(MAC, 1515, 0), RxRefused::Oversize);
    refused(&mut n, &frame(MAC, 9000, 0), RxRefused::Oversize);
    n.card.receive(&n.s, &frame(MAC, 1514, 0)).unwrap();
}

#[test]
fn refuse_when_stopped() {
    let mut n = Nic::started();
    n.w(0, 0x21);
    refused(&mut n, &frame(MAC, 100, 0), RxRefused::Stopped);
}

#[test]
fn refuse_unicast_for_someone_else() {
    let mut n = Nic::started();
    refused(
        &mut n,
        &frame([0x52, 0x54, 0, 0x12, 0x34, 0x57], 100, 0),
        RxRefused::NotForUs,
    );
}

#[test]
fn refuse_broadcast_without_ab() {
    let mut n = Nic::started();
    n.w(0x0c, 0x00);
    refused(&mut n, &frame([0xff; 6], 100, 0), RxRefused::NotForUs);
    n.w(0x0c, 0x04);
    n.card.receive(&n.s, &frame([0xff; 6], 100, 0)).unwrap();
}

#[test]
fn multicast_needs_am_and_its_hash_bit() {
    let group = [0x01, 0x00, 0x5e, 0x00, 0x00, 0x01];
    let idx = pvnet_ne2000::mcast_index(&group);
    let mut n = Nic::started();
    n.page(1);
    n.w(0x08 + (idx >> 3), 1 << (idx & 7));
    n.page(0);
    refused(&mut n, &frame(group, 100, 0), RxRefused::NotForUs); // AM clear
    n.w(0x0c, 0x0c);
    n.card.receive(&n.s, &frame(group, 100, 0)).unwrap();
    n.page(1);
    n.w(0x08 + (idx >> 3), 0xff ^ (1 << (idx & 7)));
    n.page(0);
    refused(&mut n, &frame(group, 100, 0), RxRefused::NotForUs); // every other bit set
}

#[test]
fn promiscuous_takes_everything() {
    let mut n = Nic::started();
    n.w(0x0c, 0x10);
    n.card
        .receive(&n.s, &frame([0x00, 1, 2, 3, 4, 5], 100, 0))
        .unwrap();
    n.card
        .receive(&n.s, &frame([0x33, 0x33, 0, 0, 0, 1], 100, 0))
        .unwrap();
    n.card.receive(&n.s, &frame([0xff; 6], 100, 0)).unwrap();
    assert_eq!(n.counters().rx_frames, 3);
}

#[test]
fn refuse_bad_ring_outside_memory() {
    let mut n = Nic::started();
    n.w(0x01, 0x20);
    refused(&mut n, &frame(MAC, 100, 0), RxRefused::BadRing);
    let mut n = Nic::started();
    n.w(0x02, 0xd0);
    refused(&mut n, &frame(MAC, 100, 0), RxRefused::BadRing);
}

#[test]
fn refuse_bad_ring_zero_size_and_inverted() {
    let mut n = Nic::started();
    n.w(0x02, 0x4c);
    refused(&mut n, &frame(MAC, 100, 0), RxRefused::BadRing);
    n.w(0x01, 0x80);
    n.w(0x02, 0x4c);
    refused(&mut n, &frame(MAC, 100, 0), RxRefused::BadRing);
}

#[test]
fn refuse_bad_ring_curr_outside() {
    let mut n = Nic::started();
    n.page(1);
    n.w(0x07, 0x90);
    n.page(0);
    refused(&mut n, &frame(MAC, 100, 0), RxRefused::BadRing);
}

#[test]
fn small_ring_is_always_full() {
    let mut n = Nic::started();
    n.w(0x01, 0x40);
    n.w(0x02, 0x45); // 5 pages: never room for a maximal frame (QEMU's rule)
    n.page(1);
    n.w(0x07, 0x40);
    n.page(0);
    n.w(0x03, 0x44);
    refused(&mut n, &frame(MAC, 60, 0), RxRefused::RingFull);
}

#[test]
fn bnry_beyond_the_ring_cannot_push_writes_outside_it() {
    // BNRY far above PSTOP makes QEMU's formula see lots of room; writes still wrap inside.
    let mut n = Nic::started();
    n.w(0x01, 0x40);
    n.w(0x02, 0x42);
    n.page(1);
    n.w(0x07, 0x41);
    n.page(0);
    n.w(0x03, 0xff);
    let f = frame(MAC, 1514, 3);
    n.card.receive(&n.s, &f).unwrap();
    let curr = n.s.snapshot().curr;
    assert!(
        (0x40..0x42).contains(&curr),
        "CURR {curr:#x} stays in the ring"
    );
    assert!(
        n.card.memory()[0x200..].iter().all(|b| *b == 0),
        "nothing written past PSTOP"
    );
}

#[test]
fn ring_full_refuses_holds_and_a_bnry_write_wakes() {
    let mut n = Nic::started();
    let f = frame(MAC, 1514, 1);
    let mut accepted = 0;
    loop {
        match n.card.receive(&n.s, &f) {
            Ok(_) => accepted += 1,
            Err(RxRefused::RingFull) => break,
            Err(e) => panic!("{e:?}"),
        }
    }
    // 52 pages, 6 per frame, the last 6 may not reach BNRY: 8 frames.
    assert_eq!(accepted, 8);
    assert!(n.s.rx_blocked());
    refused(&mut n, &f, RxRefused::RingFull);
    // Writes that free nothing do not wake.
    assert!(!n.w(0x0f, 0x3f).wake_rx);
    // The driver consumes two frames: BNRY moves to 0x57.
    let c = n.w(0x03, 0x57);
    assert!(c.wake_rx);
    n.card.receive(&n.s, &f).unwrap();
    assert!(!n.s.rx_blocked(), "a placed frame clears the hold");
    assert!(!n.w(0x03, 0x57).wake_rx);
}

#[test]
fn a_cancelled_hold_stops_the_wakes() {
    let mut n = Nic::started();
    let f = frame(MAC, 1514, 1);
    while n.card.receive(&n.s, &f).is_ok() {}
    n.card.cancel_hold(&n.s);
    assert!(!n.s.rx_blocked());
    assert!(!n.w(0x03, 0x57).wake_rx, "room, but nothing held");
}

#[test]
fn mcast_index_matches_an_independent_crc32() {
    // Reference: the reflected (zlib) CRC-32 without the final inversion, bit-reversed, is the
    // MSB-first Ethernet CRC that QEMU and Linux index MAR with.
    fn crc32_reflected(data: &[u8]) -> u32 {
        let mut crc = 0xffff_ffffu32;
        for &b in data {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0xedb8_8320
                } else {
                    crc >> 1
                };
            }
        }
        crc
    }
    let addrs = [
        [0x01, 0x00, 0x5e, 0x00, 0x00, 0x01],
        [0x33, 0x33, 0x00, 0x00, 0x00, 0x01],
        [0x01, 0x80, 0xc2, 0x00, 0x00, 0x0e],
        [0xff; 6],
        [0x01, 0x02, 0x03, 0x04, 0x05, 0x06],
    ];
    for a in addrs {
        let expect = (crc32_reflected(&a).reverse_bits() >> 26) as u8;
        assert_eq!(pvnet_ne2000::mcast_index(&a), expect, "{a:02x?}");
    }
}

mod hostile {
    use super::*;
    use proptest::prelude::*;
    use pvnet_ne2000::Width;

    #[derive(Clone, Debug)]
    enum Op {
        Access(u8, u8, u32, bool),
        Frame(Vec<u8>),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            8 => (prop_oneof![0u8..0x20, any::<u8>()], 0u8..3, any::<u32>(), any::<bool>())
                .prop_map(|(p, w, v, wr)| Op::Access(p, w, v, wr)),
            1 => prop::collection::vec(any::<u8>(), 0..1600).prop_map(Op::Frame),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Anything a guest can write, in any order, with any frames arriving: no panic, no
        /// access outside the model's buffers (both would abort the test), every frame either
        /// placed or refused with exactly one counter, every transmitted frame within limits.
        #[test]
        fn hostile_sequences_never_escape(ops in prop::collection::vec(op(), 0..400)) {
            let mut n = Nic::new();
            let mut frames = 0u64;
            for op in ops {
                match op {
                    Op::Access(port, w, value, write) => {
                        let width = [Width::W1, Width::W2, Width::W4][usize::from(w)];
                        let a = if write {
                            Access::Write { port, width, value }
                        } else {
                            Access::Read { port, width }
                        };
                        let c = n.card.dm_access(&n.s, a);
                        prop_assert!(c.value <= width.mask());
                        if let Some(tx) = c.tx {
                            let b = n.card.tx_bytes(tx);
                            prop_assert!((14..=1514).contains(&b.len()));
                        }
                        prop_assert_eq!(c.irq, n.s.irq_line());
                    }
                    Op::Frame(f) => {
                        frames += 1;
                        let _ = n.card.receive(&n.s, &f);
                    }
                }
            }
            let c = n.counters();
            let outcomes = c.rx_frames + c.rx_runt + c.rx_oversize + c.rx_stopped
                + c.rx_not_for_us + c.rx_bad_ring + c.rx_ring_full;
            prop_assert_eq!(outcomes, frames);
            prop_assert_eq!(n.card.memory().len(), 0x8000);
        }
    }
}

#[test]
fn unicast_filter_uses_par_not_the_prom() {
    let mut n = Nic::started();
    let other = [0x02, 0x11, 0x22, 0x33, 0x44, 0x55];
    n.page(1);
    for (i, b) in other.iter().enumerate() {
        n.w(1 + i as u8, *b);
    }
    n.page(0);
    refused(&mut n, &frame(MAC, 100, 0), RxRefused::NotForUs);
    n.card.receive(&n.s, &frame(other, 100, 0)).unwrap();
}

#[test]
fn an_access_straddling_the_prom_edge_resolves_each_byte() {
    let mut n = Nic::started();
    n.w(0x0a, 4);
    n.w(0x08, 30);
    n.w(0x09, 0);
    n.w(0, 0x0a);
    let before = n.counters().dma_unmapped;
    let v = n.card.dm_access(&n.s, Access::inl(DATA_PORT)).value;
    // Bytes 30, 31: the PROM's last 'W's; 32, 33: nothing there.
    assert_eq!(v.to_le_bytes(), [0x57, 0x57, 0xff, 0xff]);
    assert_eq!(n.counters().dma_unmapped, before + 2);
    // Same at the top of card memory: 0xbffe..0xc002.
    n.dma_write(0xbffe, &[0xaa, 0xbb]);
    n.w(0x0a, 4);
    n.w(0x08, 0xfe);
    n.w(0x09, 0xbf);
    n.w(0, 0x0a);
    let v = n.card.dm_access(&n.s, Access::inl(DATA_PORT)).value;
    assert_eq!(v.to_le_bytes(), [0xaa, 0xbb, 0xff, 0xff]);
}
