//! The trap handler's classification (Seed and Max), its side effects, and the two sides
//! hammering ISR from two threads.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};

use pvnet_ne2000::regs::{cr, isr};
use pvnet_ne2000::{
    trap_access, trap_rep, Access, Card, Class, Completion, SharedRegs, TrapOutcome, Width,
    DATA_PORT, RESET_PORT,
};

const MAC: [u8; 6] = [0x52, 0x54, 0x00, 0xab, 0xcd, 0xef];

/// A started card (ring 0x4c..0x80, CURR 0x4c, BNRY 0x7f, PAR = MAC, AB, IMR 0x3f).
fn started() -> (Card, SharedRegs) {
    let mut card = Card::new(MAC);
    let s = SharedRegs::new();
    card.power_on(&s);
    let mut w = |p: u8, v: u8| {
        card.dm_access(&s, Access::outb(p, v));
    };
    for (p, v) in [
        (0, 0x21),
        (0x0e, 0x49),
        (0x01, 0x4c),
        (0x02, 0x80),
        (0x03, 0x7f),
        (0x07, 0xff),
        (0, 0x61),
    ] {
        w(p, v);
    }
    for (i, b) in MAC.iter().enumerate() {
        w(1 + i as u8, *b);
    }
    for (p, v) in [(0x07, 0x4c), (0, 0x22), (0x0c, 0x04), (0x0f, 0x3f)] {
        w(p, v);
    }
    (card, s)
}

fn select_page(card: &mut Card, s: &SharedRegs, page: u8) {
    card.dm_access(s, Access::outb(0, (page << 6) | 0x22));
}

fn served(o: TrapOutcome) -> Completion {
    match o {
        TrapOutcome::Served(c) => c,
        TrapOutcome::Forward => panic!("forwarded"),
    }
}

/// Forwarding leaves the page untouched.
fn assert_forwarded(s: &SharedRegs, a: Access, class: Class) {
    let before = s.snapshot();
    assert_eq!(
        trap_access(s, a, class),
        TrapOutcome::Forward,
        "{a:?} {class:?}"
    );
    assert_eq!(
        before,
        s.snapshot(),
        "a forwarded access changed the page: {a:?}"
    );
}

#[test]
fn both_classes_serve_every_register_read_with_the_device_models_value() {
    for class in [Class::Seed, Class::Max] {
        let (mut card, s) = started();
        card.receive(&s, &[MAC.as_slice(), &[0u8; 94]].concat())
            .unwrap();
        for page in 0..4 {
            select_page(&mut card, &s, page);
            for p in 0..0x10u8 {
                let at_trap = served(trap_access(&s, Access::inb(p), class)).value;
                let at_dm = card.dm_access(&s, Access::inb(p)).value;
                assert_eq!(at_trap, at_dm, "page {page} port {p:#x} {class:?}");
            }
        }
    }
}

#[test]
fn both_classes_forward_data_port_reset_port_txp_and_curr() {
    for class in [Class::Seed, Class::Max] {
        let (mut card, s) = started();
        for w in [Width::W1, Width::W2, Width::W4] {
            assert_forwarded(
                &s,
                Access::Read {
                    port: DATA_PORT,
                    width: w,
                },
                class,
            );
            assert_forwarded(
                &s,
                Access::Write {
                    port: DATA_PORT,
                    width: w,
                    value: 0x1234,
                },
                class,
            );
        }
        assert_forwarded(&s, Access::inb(RESET_PORT), class);
        assert_forwarded(&s, Access::outb(RESET_PORT, 0), class);
        assert_forwarded(&s, Access::outb(0, cr::TXP | cr::STA | cr::RD_ABORT), class);
        select_page(&mut card, &s, 1);
        assert_forwarded(&s, Access::outb(0x07, 0x50), class);
        assert_eq!(
            trap_rep(&s, DATA_PORT, Width::W4, class),
            TrapOutcome::Forward
        );
    }
}

#[test]
fn seed_forwards_every_control_register_write() {
    let (mut card, s) = started();
    for v in [0x22u8, 0x62, 0x0a, 0x21] {
        assert_forwarded(&s, Access::outb(0, v), Class::Seed);
    }
    for p in [0x01u8, 0x02, 0x03, 0x07, 0x0c, 0x0d, 0x0e, 0x0f] {
        assert_forwarded(&s, Access::outb(p, 0x11), Class::Seed);
    }
    for page in [2u8, 3] {
        select_page(&mut card, &s, page);
        for p in 1..0x10u8 {
            assert_forwarded(&s, Access::outb(p, 0x11), Class::Seed);
        }
    }
}

#[test]
fn seed_serves_state_register_writes() {
    let (mut card, s) = started();
    for (p, v) in [
        (0x04u8, 0x40u8),
        (0x05, 0x3c),
        (0x06, 0x01),
        (0x08, 0x10),
        (0x09, 0x4c),
        (0x0a, 0x04),
        (0x0b, 0x00),
    ] {
        served(trap_access(&s, Access::outb(p, v), Class::Seed));
    }
    let snap = s.snapshot();
    assert_eq!(
        (snap.tpsr, snap.tbcr, snap.rsar, snap.rbcr),
        (0x40, 0x013c, 0x4c10, 4)
    );
    select_page(&mut card, &s, 1);
    for p in 1..=6u8 {
        served(trap_access(&s, Access::outb(p, p), Class::Seed));
    }
    for p in 8..=0x0fu8 {
        served(trap_access(&s, Access::outb(p, p), Class::Seed));
    }
    let snap = s.snapshot();
    assert_eq!(snap.par, [1, 2, 3, 4, 5, 6]);
    assert_eq!(snap.mar, [8, 9, 10, 11, 12, 13, 14, 15]);
}

#[test]
fn max_serves_cr_page_select_and_remote_dma_start() {
    let (_card, s) = started();
    served(trap_access(&s, Access::outb(0, 0x62), Class::Max));
    assert_eq!(s.page(), 1);
    served(trap_access(&s, Access::outb(0, 0x22), Class::Max));
    served(trap_access(&s, Access::outb(0x07, 0xff), Class::Max));
    // RD read with RBCR zero: RDC at once, computed at the trap.
    let c = served(trap_access(
        &s,
        Access::outb(0, cr::RD_READ | cr::STA),
        Class::Max,
    ));
    assert!(!c.irq, "RDC is not in Linux's IMR (0x3f)");
    assert_eq!(s.snapshot().isr, isr::RDC);
    let c = served(trap_access(&s, Access::outb(0x0f, 0x7f), Class::Max));
    assert!(c.irq, "unmasked");
}

#[test]
fn max_serves_txp_with_stp_because_it_sends_nothing() {
    let (_card, s) = started();
    let c = served(trap_access(
        &s,
        Access::outb(0, cr::TXP | cr::STP),
        Class::Max,
    ));
    assert!(c.tx.is_none());
    assert_eq!(s.snapshot().cr, cr::TXP | cr::STP);
}

#[test]
fn max_isr_ack_recomputes_the_line_at_the_trap() {
    let (mut card, s) = started();
    card.receive(&s, &[MAC.as_slice(), &[0u8; 94]].concat())
        .unwrap();
    assert!(s.irq_line());
    let c = served(trap_access(&s, Access::outb(0x07, isr::PRX), Class::Max));
    assert!(!c.irq);
    assert!(!s.irq_line());
    // IMR unmask of a pending bit raises the line at the trap, and counts.
    card.receive(&s, &[MAC.as_slice(), &[0u8; 94]].concat())
        .unwrap();
    served(trap_access(&s, Access::outb(0x0f, 0), Class::Max));
    let raised = s.irq_raised();
    let c = served(trap_access(&s, Access::outb(0x0f, 0x3f), Class::Max));
    assert!(c.irq);
    assert_eq!(s.irq_raised(), raised + 1);
}

#[test]
fn bnry_write_that_frees_the_ring_says_wake_at_the_trap() {
    let (mut card, s) = started();
    let f = [MAC.as_slice(), &[7u8; 1508]].concat();
    while card.receive(&s, &f).is_ok() {}
    assert!(s.rx_blocked());
    // Seed forwards BNRY; the device model says wake.
    assert_forwarded(&s, Access::outb(0x03, 0x57), Class::Seed);
    // Max serves it and says wake itself.
    let c = served(trap_access(&s, Access::outb(0x03, 0x57), Class::Max));
    assert!(c.wake_rx);
    // A BNRY write that frees nothing (ring still full) does not.
    let (mut card2, s2) = started();
    while card2.receive(&s2, &f).is_ok() {}
    let c = served(trap_access(&s2, Access::outb(0x03, 0x7f), Class::Max));
    assert!(!c.wake_rx);
}

#[test]
fn unmapped_ports_and_odd_widths_are_served_by_both() {
    let (_card, s) = started();
    for class in [Class::Seed, Class::Max] {
        assert_eq!(
            served(trap_access(&s, Access::inb(0x15), class)).value,
            0xff
        );
        assert_eq!(
            served(trap_access(&s, Access::inw(0x07), class)).value,
            0xffff
        );
        assert_eq!(
            served(trap_access(&s, Access::inl(0x80), class)).value,
            0xffff_ffff
        );
        served(trap_access(&s, Access::outw(0x0f, 0), class));
    }
}

#[test]
fn trap_stats_count_each_outcome() {
    let (_card, s) = started();
    let mut st = pvnet_ne2000::TrapStats::default();
    for a in [
        Access::inb(0x07),
        Access::outb(0x07, 0xff),
        Access::inb(DATA_PORT),
        Access::outb(0, 0x26),
    ] {
        let o = trap_access(&s, a, Class::Max);
        st.record(a, &o);
    }
    assert_eq!(
        (
            st.served_reads,
            st.served_writes,
            st.forwarded_reads,
            st.forwarded_writes
        ),
        (1, 1, 1, 1)
    );
    assert_eq!(st.total(), 4);
}

/// The device model (receive, transmit, data port) and the trap handler set and acknowledge
/// ISR bits at the same time. Each bit goes through a handshake: its raiser sets it only when
/// it sees it clear; its acknowledger clears it only when it sees it set. Any lost update
/// shows up as raises != acks (or a raiser that never sees its bit clear).
#[test]
fn isr_bits_are_not_lost_when_both_sides_hammer_it() {
    const N: u64 = 20_000;
    // A side that sees no progress for this long is stuck. (Not a count of spins: a side that
    // has done its own raises spins while the other, perhaps descheduled on a loaded host,
    // finishes.)
    const STUCK: std::time::Duration = std::time::Duration::from_secs(120);
    let (mut card, s) = started();
    // Transmit setup: a 60-byte frame at 0x4000.
    for (p, v) in [(0x04u8, 0x40u8), (0x05, 60), (0x06, 0)] {
        card.dm_access(&s, Access::outb(p, v));
    }
    let frame = [MAC.as_slice(), &[1u8; 54]].concat();
    let done_dm = AtomicBool::new(false);
    let done_trap = AtomicBool::new(false);
    let acked_prx = AtomicU64::new(0);
    let acked_ptx = AtomicU64::new(0);
    let acked_rdc = AtomicU64::new(0);
    let (mut raised_prx, mut raised_ptx, mut raised_rdc) = (0u64, 0u64, 0u64);
    std::thread::scope(|sc| {
        let s = &s;
        let (done_dm, done_trap) = (&done_dm, &done_trap);
        let (acked_prx, acked_ptx, acked_rdc) = (&acked_prx, &acked_ptx, &acked_rdc);
        let card = &mut card;
        let frame = &frame;
        let dm = sc.spawn(move || {
            let (mut prx, mut ptx) = (0u64, 0u64);
            let mut last_progress = std::time::Instant::now();
            loop {
                let isr_now = card.dm_access(s, Access::inb(0x07)).value as u8;
                if isr_now & isr::RDC != 0 {
                    card.dm_access(s, Access::outb(0x07, isr::RDC));
                    acked_rdc.fetch_add(1, SeqCst);
                }
                let mut progressed = false;
                if prx < N && isr_now & isr::PRX == 0 {
                    card.receive(s, frame).expect("ring has room");
                    // Consume it at once: BNRY one page behind the new CURR.
                    let curr = s.snapshot().curr;
                    let bnry = if curr == 0x4c { 0x7f } else { curr - 1 };
                    card.dm_access(s, Access::outb(0x03, bnry));
                    prx += 1;
                    progressed = true;
                }
                if ptx < N && isr_now & isr::PTX == 0 {
                    let c = card.dm_access(s, Access::outb(0, cr::TXP | cr::STA | cr::RD_ABORT));
                    assert!(c.tx.is_some());
                    ptx += 1;
                    progressed = true;
                }
                if prx == N && ptx == N {
                    done_dm.store(true, SeqCst);
                    if done_trap.load(SeqCst) && s.snapshot().isr & isr::RDC == 0 {
                        break;
                    }
                }
                if progressed {
                    last_progress = std::time::Instant::now();
                } else {
                    assert!(
                        last_progress.elapsed() < STUCK,
                        "device model stuck: ISR {isr_now:#x}"
                    );
                }
            }
            (prx, ptx)
        });
        let mut rdc = 0u64;
        let mut last_progress = std::time::Instant::now();
        loop {
            let isr_now = served(trap_access(s, Access::inb(0x07), Class::Max)).value as u8;
            for (bit, count) in [(isr::PRX, acked_prx), (isr::PTX, acked_ptx)] {
                if isr_now & bit != 0 {
                    served(trap_access(s, Access::outb(0x07, bit), Class::Max));
                    count.fetch_add(1, SeqCst);
                }
            }
            if rdc < N && isr_now & isr::RDC == 0 {
                // RD read with RBCR zero: RDC set at the trap.
                served(trap_access(
                    s,
                    Access::outb(0, cr::RD_READ | cr::STA),
                    Class::Max,
                ));
                rdc += 1;
                last_progress = std::time::Instant::now();
            } else {
                assert!(
                    last_progress.elapsed() < STUCK,
                    "trap side stuck: ISR {isr_now:#x}"
                );
            }
            if rdc == N {
                done_trap.store(true, SeqCst);
                if done_dm.load(SeqCst) && s.snapshot().isr & (isr::PRX | isr::PTX) == 0 {
                    break;
                }
            }
        }
        let (prx, ptx) = dm.join().unwrap();
        raised_prx = prx;
        raised_ptx = ptx;
        raised_rdc = rdc;
    });
    let left = s.snapshot().isr;
    let still = |b: u8| u64::from(left & b != 0);
    assert_eq!(raised_prx, acked_prx.load(SeqCst) + still(isr::PRX), "PRX");
    assert_eq!(raised_ptx, acked_ptx.load(SeqCst) + still(isr::PTX), "PTX");
    assert_eq!(raised_rdc, acked_rdc.load(SeqCst) + still(isr::RDC), "RDC");
    assert_eq!((raised_prx, raised_ptx, raised_rdc), (N, N, N));
    assert_eq!(card.counters().rx_frames, N);
    assert_eq!(card.counters().tx_frames, N);
}
