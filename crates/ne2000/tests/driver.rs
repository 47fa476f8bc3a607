//! The Linux driver's port sequences against the card, in process, through the original path
//! and the fast path with each classification.

use pvnet_ne2000::direct::{Direct, Path};
use pvnet_ne2000::driver::{Ne2kPci, RxMode, XmitError};
use pvnet_ne2000::{Class, RxRefused, TrapStats};

const MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x9a, 0xbc, 0xde];
const PATHS: [Path; 3] = [
    Path::Original,
    Path::Fast(Class::Seed),
    Path::Fast(Class::Max),
];

fn up(path: Path) -> (Direct, Ne2kPci) {
    let mut io = Direct::new(MAC, path);
    let mut drv = Ne2kPci::probe(&mut io).expect("probe");
    drv.open(&mut io);
    service(&mut io, &mut drv);
    (io, drv)
}

/// Deliver the interrupt while the line is up (level-triggered).
fn service(io: &mut Direct, drv: &mut Ne2kPci) -> u32 {
    let mut n = 0;
    while io.irq() {
        drv.interrupt(io);
        n += 1;
        assert!(
            n <= 4,
            "line stuck high: ISR {:#x}",
            io.shared.snapshot().isr
        );
    }
    n
}

fn frame(dst: [u8; 6], len: usize, seed: u32) -> Vec<u8> {
    let mut f: Vec<u8> = (0..len)
        .map(|i| (seed.wrapping_mul(7).wrapping_add(i as u32 * 13) >> 1) as u8)
        .collect();
    let n = len.min(6);
    f[..n].copy_from_slice(&dst[..n]);
    if len >= 12 {
        f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    }
    f
}

#[test]
fn probe_reads_the_prom_and_open_programs_the_card() {
    for path in PATHS {
        let mut io = Direct::new(MAC, path);
        let mut drv = Ne2kPci::probe(&mut io).unwrap();
        assert_eq!(drv.mac(), MAC);
        assert_eq!(&drv.sa_prom()[14..16], b"WW", "NE2000 signature");
        let s = io.shared.snapshot();
        assert_eq!(s.cr & 1, 1, "stopped after probe");
        assert_eq!(
            (s.pstart, s.pstop, s.bnry, s.curr, s.tpsr, s.dcr),
            (0x4c, 0x80, 0x7f, 0x4c, 0x40, 0x49)
        );
        assert_eq!(
            s.par, [0; 6],
            "NS8390_init(0) runs before dev_addr is set, as in Linux"
        );
        assert_eq!(io.card.counters().resets, 1);
        drv.open(&mut io);
        let s = io.shared.snapshot();
        assert_eq!(s.par, MAC);
        assert_eq!((s.rcr, s.tcr, s.imr, s.isr), (0x04, 0x00, 0x3f, 0x00));
        assert_eq!(s.mar, [0; 8]);
        assert_eq!(s.cr & 1, 0, "running");
        assert!(!io.irq());
    }
}

#[test]
fn frames_of_every_size_cross_out_intact_on_every_path() {
    for path in PATHS {
        let (mut io, mut drv) = up(path);
        for len in 14..=1514usize {
            let f = frame([0xff; 6], len, len as u32);
            drv.start_xmit(&mut io, &f).unwrap();
            service(&mut io, &mut drv);
            let sent = io.sent.pop_front().expect("a frame went out");
            let mut want = f.clone();
            want.resize(len.max(60), 0);
            assert_eq!(sent, want, "{path:?} len {len}");
            assert!(io.sent.is_empty());
        }
        assert_eq!(drv.stats().tx_packets, 1501);
        assert_eq!(io.card.counters().tx_frames, 1501);
        assert_eq!(io.shared.snapshot().isr, 0, "every interrupt acknowledged");
    }
}

#[test]
fn frames_of_every_size_cross_in_intact_and_the_ring_wraps() {
    for path in PATHS {
        let (mut io, mut drv) = up(path);
        let mut wraps = 0;
        let mut last_curr = io.shared.snapshot().curr;
        for len in 14..=1514usize {
            let f = frame(MAC, len, len as u32 + 1);
            io.deliver(&f).unwrap();
            let curr = io.shared.snapshot().curr;
            if curr < last_curr {
                wraps += 1;
            }
            last_curr = curr;
            service(&mut io, &mut drv);
            let got = drv.take_rx().expect("the driver took the frame");
            let mut want = f.clone();
            want.resize(len.max(60), 0);
            assert_eq!(got, want, "{path:?} len {len}");
            assert!(drv.take_rx().is_none());
        }
        assert!(wraps > 20, "the ring wrapped only {wraps} times");
        assert_eq!(drv.stats().rx_packets, 1501);
        assert_eq!(drv.stats().rx_errors, 0);
        assert_eq!(io.shared.snapshot().isr, 0);
    }
}

#[test]
fn absurd_frames_are_refused_with_counters() {
    let (mut io, mut drv) = up(Path::Fast(Class::Max));
    assert_eq!(
        drv.start_xmit(&mut io, &frame(MAC, 1515, 0)),
        Err(XmitError::TooLong)
    );
    assert_eq!(io.deliver(&frame(MAC, 13, 0)), Err(RxRefused::Runt));
    assert_eq!(io.deliver(&frame(MAC, 1515, 0)), Err(RxRefused::Oversize));
    assert_eq!(
        io.deliver(&frame([0x52, 0x54, 0, 0, 0, 1], 100, 0)),
        Err(RxRefused::NotForUs)
    );
    let c = io.card.counters();
    assert_eq!(
        (c.rx_runt, c.rx_oversize, c.rx_not_for_us, c.rx_frames),
        (1, 1, 1, 0)
    );
    assert!(io.sent.is_empty());
    assert!(drv.take_rx().is_none());
}

#[test]
fn a_full_ring_refuses_then_drains_and_the_held_frame_follows() {
    for path in PATHS {
        let (mut io, mut drv) = up(path);
        let frames: Vec<Vec<u8>> = (0..12).map(|i| frame(MAC, 1514, i)).collect();
        let mut placed = 0;
        let mut refused = 0;
        for f in &frames {
            match io.deliver(f) {
                Ok(_) => placed += 1,
                Err(RxRefused::RingFull) => refused += 1,
                Err(e) => panic!("{e:?}"),
            }
        }
        assert_eq!((placed, refused), (8, 4));
        assert_eq!(io.card.counters().rx_ring_full, 4);
        assert!(io.shared.rx_blocked());
        let wakes_before = io.wakes;
        service(&mut io, &mut drv);
        assert!(io.wakes > wakes_before, "{path:?}: a BNRY write said wake");
        for f in &frames[..8] {
            assert_eq!(&drv.take_rx().unwrap(), f);
        }
        assert!(drv.take_rx().is_none());
        // The device model retries what it held.
        for f in &frames[8..] {
            io.deliver(f).unwrap();
            service(&mut io, &mut drv);
            assert_eq!(&drv.take_rx().unwrap(), f);
        }
        assert!(!io.shared.rx_blocked());
    }
}

#[test]
fn two_transmit_slots_queue_and_the_interrupt_sends_the_second() {
    let (mut io, mut drv) = up(Path::Fast(Class::Seed));
    let a = frame([0xff; 6], 200, 1);
    let b = frame([0xff; 6], 300, 2);
    drv.start_xmit(&mut io, &a).unwrap();
    drv.start_xmit(&mut io, &b).unwrap();
    assert!(drv.queue_stopped());
    assert_eq!(drv.start_xmit(&mut io, &a), Err(XmitError::Busy));
    assert_eq!(
        io.sent.len(),
        1,
        "the second waits for the first's interrupt"
    );
    service(&mut io, &mut drv);
    assert_eq!(io.sent.pop_front().unwrap(), a);
    assert_eq!(io.sent.pop_front().unwrap(), b);
    assert!(!drv.queue_stopped());
    assert_eq!(drv.stats().tx_packets, 2);
}

#[test]
fn multicast_and_promiscuous_modes() {
    let group = [0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb];
    let other = [0x01, 0x00, 0x5e, 0x7f, 0x12, 0x34];
    assert_ne!(
        pvnet_ne2000::mcast_index(&group),
        pvnet_ne2000::mcast_index(&other)
    );
    let (mut io, mut drv) = up(Path::Fast(Class::Max));
    assert_eq!(io.deliver(&frame(group, 100, 0)), Err(RxRefused::NotForUs));
    drv.set_rx_mode(
        &mut io,
        RxMode {
            mc: vec![group],
            ..RxMode::default()
        },
    );
    assert_eq!(io.shared.snapshot().rcr, 0x0c);
    io.deliver(&frame(group, 100, 0)).unwrap();
    assert_eq!(io.deliver(&frame(other, 100, 0)), Err(RxRefused::NotForUs));
    service(&mut io, &mut drv);
    assert_eq!(drv.stats().multicast, 1);
    drv.set_rx_mode(
        &mut io,
        RxMode {
            promisc: true,
            ..RxMode::default()
        },
    );
    io.deliver(&frame([0x52, 0x54, 0, 0, 0, 9], 100, 0))
        .unwrap();
    io.deliver(&frame(other, 100, 0)).unwrap();
    service(&mut io, &mut drv);
    assert_eq!(drv.stats().rx_packets, 3);
}

#[test]
fn close_stops_the_card() {
    let (mut io, mut drv) = up(Path::Fast(Class::Max));
    drv.close(&mut io);
    assert_eq!(io.deliver(&frame(MAC, 100, 0)), Err(RxRefused::Stopped));
}

/// Traps per packet on each path. The same driver code runs on each, so the total number of
/// traps must be equal; the paths differ only in where they are served.
#[test]
fn traps_per_packet_on_each_path() {
    const N: u64 = 200;
    let mut lines = vec![];
    for (dir, len) in [("tx", 1514usize), ("tx", 60), ("rx", 1514), ("rx", 60)] {
        let mut totals = vec![];
        let mut served = vec![];
        for path in PATHS {
            let (mut io, mut drv) = up(path);
            let before = io.stats;
            for i in 0..N {
                if dir == "tx" {
                    drv.start_xmit(&mut io, &frame([0xff; 6], len, i as u32))
                        .unwrap();
                    service(&mut io, &mut drv);
                    assert_eq!(io.sent.pop_front().unwrap().len(), len);
                } else {
                    io.deliver(&frame(MAC, len, i as u32)).unwrap();
                    service(&mut io, &mut drv);
                    assert_eq!(drv.take_rx().unwrap().len(), len);
                }
            }
            let d = delta(&io.stats, &before);
            let per = |x: u64| x as f64 / N as f64;
            lines.push(format!(
                "NE2000 traps/packet dir={dir} len={len} path={path:?}: total {:.1} served-at-trap {:.1} forwarded {:.1} (reads {:.1} writes {:.1} rep {:.1})",
                per(d.total()),
                per(d.served()),
                per(d.forwarded()),
                per(d.forwarded_reads),
                per(d.forwarded_writes),
                per(d.forwarded_reps),
            ));
            totals.push(d.total());
            served.push(d.served());
        }
        assert!(
            totals.iter().all(|t| *t == totals[0]),
            "{dir} {len}: {totals:?}"
        );
        assert_eq!(served[0], 0, "the original path serves nothing at the trap");
        assert!(
            served[1] > 0 && served[2] > served[1],
            "{dir} {len}: {served:?}"
        );
    }
    for l in lines {
        println!("{l}");
    }
}

fn delta(a: &TrapStats, b: &TrapStats) -> TrapStats {
    TrapStats {
        served_reads: a.served_reads - b.served_reads,
        served_writes: a.served_writes - b.served_writes,
        forwarded_reads: a.forwarded_reads - b.forwarded_reads,
        forwarded_writes: a.forwarded_writes - b.forwarded_writes,
        forwarded_reps: a.forwarded_reps - b.forwarded_reps,
        wakes: a.wakes - b.wakes,
    }
}

/// A `PortIo` that forwards to a card but ORs bits into the next ISR read (for driver paths the
/// model never triggers by itself, like a receiver overrun).
struct Inject<'a> {
    inner: &'a mut Direct,
    isr_or: u8,
}

impl pvnet_ne2000::driver::PortIo for Inject<'_> {
    fn inb(&mut self, port: u8) -> u8 {
        let v = self.inner.inb(port);
        if port == 0x07 && self.inner.shared.page() == 0 {
            std::mem::take(&mut self.isr_or) | v
        } else {
            v
        }
    }
    fn outb(&mut self, port: u8, value: u8) {
        self.inner.outb(port, value)
    }
    fn inw(&mut self, port: u8) -> u16 {
        self.inner.inw(port)
    }
    fn outw(&mut self, port: u8, value: u16) {
        self.inner.outw(port, value)
    }
    fn inl(&mut self, port: u8) -> u32 {
        self.inner.inl(port)
    }
    fn outl(&mut self, port: u8, value: u32) {
        self.inner.outl(port, value)
    }
    fn insl(&mut self, port: u8, buf: &mut [u8]) {
        self.inner.insl(port, buf)
    }
    fn outsl(&mut self, port: u8, buf: &[u8]) {
        self.inner.outsl(port, buf)
    }
}

use pvnet_ne2000::driver::PortIo;

#[test]
fn overrun_handler_stops_drains_and_restarts_the_card() {
    let (mut io, mut drv) = up(Path::Fast(Class::Max));
    let frames: Vec<Vec<u8>> = (0..3).map(|i| frame(MAC, 700, i)).collect();
    for f in &frames {
        io.deliver(f).unwrap();
    }
    let mut inj = Inject {
        inner: &mut io,
        isr_or: 0x10,
    };
    assert!(drv.interrupt(&mut inj));
    assert_eq!(drv.stats().rx_over_errors, 1);
    for f in &frames {
        assert_eq!(&drv.take_rx().unwrap(), f);
    }
    let s = io.shared.snapshot();
    assert_eq!(s.cr & 1, 0, "restarted");
    assert_eq!(s.tcr, 0, "out of loopback");
    assert_eq!(s.rbcr, 0);
    io.deliver(&frames[0]).unwrap();
}

/// Every read returns the same byte: an empty slot (0xff), a counter that does not clear
/// (0x01), a reset never acknowledged (0x00).
struct Fake {
    reads: u8,
}

impl PortIo for Fake {
    fn inb(&mut self, _port: u8) -> u8 {
        self.reads
    }
    fn outb(&mut self, _port: u8, _value: u8) {}
    fn inw(&mut self, _port: u8) -> u16 {
        0xffff
    }
    fn outw(&mut self, _port: u8, _value: u16) {}
    fn inl(&mut self, _port: u8) -> u32 {
        0xffff_ffff
    }
    fn outl(&mut self, _port: u8, _value: u32) {}
    fn insl(&mut self, _port: u8, _buf: &mut [u8]) {}
    fn outsl(&mut self, _port: u8, _buf: &[u8]) {}
}

#[test]
fn probe_rejects_an_empty_slot_a_non_8390_and_a_card_that_does_not_reset() {
    use pvnet_ne2000::driver::ProbeError;
    let probe = |reads: u8| Ne2kPci::probe(&mut Fake { reads }).unwrap_err();
    assert_eq!(probe(0xff), ProbeError::NoCard);
    assert_eq!(probe(0x01), ProbeError::Not8390);
    // The counter clears but ISR.RST never comes up.
    assert_eq!(probe(0x00), ProbeError::ResetTimeout);
}
