//! A hostile guest against the device model: random ports, widths and counts, `rep` pointing
//! outside guest memory, malformed slots, random accesses through every path. The device model
//! answers every request, never stops, counts each refusal, and still serves a real driver
//! afterwards.

mod common;

use std::time::{Duration, Instant};

use common::*;
use pvnet_hv::exit::ExitCost;
use pvnet_hv::ioreq::{
    DeviceState, Ioreq, RawIoreq, IOREQ_READ, STATE_IOREQ_NONE, STATE_IOREQ_READY,
    STATE_IORESP_READY,
};
use pvnet_hv::PAGE_SIZE;
use pvnet_hvm::vcpu::Vcpu;
use pvnet_hvm::{HvmShared, IO_BASE, SHARED_OFFSET};
use pvnet_ne2000::direct::Path;
use pvnet_ne2000::{Access, Class, Width};

/// xorshift64*: a deterministic stream for reproducible hostility.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn random_requests_and_malformed_slots_never_stop_the_device_model() {
    let p = parts(Path::Original);
    let mem_bytes = u64::from(GUEST_PAGES) * PAGE_SIZE as u64;
    let page = p.page.clone();
    let mut client = p.client;
    client.set_timeout(Some(PATIENCE));
    let (dm_stop, dm) = spawn_dm(p.dm);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut sent_ptr_outside = 0u64;
    let mut expect_unclaimed = 0u64;
    let mut expect_wide = 0u64;
    let n = 20_000;
    for _ in 0..n {
        // Mostly the card's window, sometimes anywhere in the port space.
        let port = if rng.below(4) == 0 {
            rng.below(0x1_0000) as u16
        } else {
            IO_BASE + rng.below(0x100) as u16
        };
        let size = [1u32, 2, 4, 8][rng.below(4) as usize];
        if u64::from(port) + u64::from(size) > 0x1_0000 {
            continue;
        }
        let offset = u64::from(port).wrapping_sub(u64::from(IO_BASE));
        let in_window = offset < 0x100;
        let mut refused = false;
        let req = match rng.below(5) {
            0 => Ioreq::pio_in(port, size),
            1 => Ioreq::pio_out(port, size, rng.next()),
            k => {
                let count = 1 + rng.below((64 * 1024 / u64::from(size)).min(3000)) as u32;
                let gpa = match rng.below(3) {
                    0 => rng.next(),
                    1 => mem_bytes - rng.below(64),
                    _ => rng.below(mem_bytes),
                };
                let df = rng.below(8) == 0;
                let r = if k == 2 {
                    Ioreq::pio_ins(port, size, count, gpa, df)
                } else {
                    Ioreq::pio_outs(port, size, count, gpa, df)
                };
                let fits = r
                    .rep()
                    .and_then(|rep| rep.span())
                    .is_some_and(|(low, len)| low.checked_add(len).is_some_and(|e| e <= mem_bytes));
                if !fits {
                    sent_ptr_outside += 1;
                    refused = true;
                }
                r
            }
        };
        if !refused && !in_window {
            expect_unclaimed += 1;
        } else if !refused && size == 8 {
            expect_wide += 1;
        }
        let v = client.round_trip(&req).expect("every request is answered");
        if req.dir == pvnet_hv::ioreq::Dir::Read && !req.data_is_ptr && (!in_window || size == 8) {
            assert_eq!(
                v,
                u64::MAX >> (64 - 8 * size),
                "a read of nothing reads all ones"
            );
        }
    }
    // Malformed slots written straight into the page (what a guest process can do).
    let malformed = [
        RawIoreq {
            addr: u64::from(IO_BASE),
            count: 1,
            size: 3,
            vp_eport: EVTCHN_PORT.0,
            ..Default::default()
        },
        RawIoreq {
            addr: u64::from(IO_BASE),
            count: 0,
            size: 1,
            vp_eport: EVTCHN_PORT.0,
            ..Default::default()
        },
        RawIoreq {
            addr: u64::from(IO_BASE),
            count: 5,
            size: 1,
            vp_eport: EVTCHN_PORT.0,
            ..Default::default()
        },
        RawIoreq {
            addr: u64::from(IO_BASE),
            count: 1,
            size: 1,
            vp_eport: EVTCHN_PORT.0,
            type_: 9,
            ..Default::default()
        },
        RawIoreq {
            addr: 0xffff,
            count: 1,
            size: 4,
            vp_eport: EVTCHN_PORT.0,
            ..Default::default()
        },
        RawIoreq {
            addr: u64::from(IO_BASE),
            count: 1,
            size: 1,
            vp_eport: 99,
            ..Default::default()
        },
    ];
    for mut raw in malformed {
        raw.bits = STATE_IOREQ_READY | (IOREQ_READ << 5);
        page.write_slot_raw(0, &raw).unwrap();
        client.evtchn().notify().unwrap();
        let deadline = Instant::now() + PATIENCE;
        while page.slot_state(0).unwrap() != STATE_IORESP_READY {
            assert!(Instant::now() < deadline, "malformed slot never answered");
            std::thread::sleep(Duration::from_micros(100));
        }
        client.evtchn().consume();
        page.write_slot_raw(
            0,
            &RawIoreq {
                bits: STATE_IOREQ_NONE,
                ..raw
            },
        )
        .unwrap();
    }
    // A stale event with no request: looked at, counted, ignored.
    client.evtchn().notify().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    // The random writes may have left CR reading 0xff (no card, to a probe): the next driver
    // finds the card after stopping it, as after a hostile predecessor on real hardware.
    client
        .round_trip(&Ioreq::pio_out(IO_BASE, 1, 0x21))
        .expect("answered");

    // The device model is alive: a real driver boots on the same card and moves frames.
    let shared = DeviceState::<HvmShared>::new(page.clone(), SHARED_OFFSET).unwrap();
    shared.set_path(Path::Fast(Class::Max));
    let vcpu = Vcpu::new(
        p.vcpu_shared,
        client,
        p.vcpu_dev,
        ExitCost::free(),
        p.mem.clone(),
    )
    .unwrap();
    let mut rig = Rig::with_vcpu(page, shared, p.wire, dm_stop, dm, vcpu);
    for i in 0..50 {
        let f = frame(PEER, MAC, size(i, 3), i as u32);
        put(&mut rig.stack, &f);
        assert_eq!(take(&mut rig.wire), padded(f));
        let f = frame(MAC, PEER, size(i, 900), i as u32);
        put(&mut rig.wire, &f);
        assert_eq!(take(&mut rig.stack), padded(f));
    }
    let (dm, g) = rig.stop();
    let d = dm.stats();
    let g = g.stats();
    assert_eq!(g.frames_in, 50);
    assert_eq!(g.frames_out, 50);
    let s = &d.server;
    assert!(sent_ptr_outside > 100, "the stream pointed outside memory");
    assert_eq!(
        s.refused_bad_ptr, sent_ptr_outside,
        "each outside pointer refused"
    );
    assert!(expect_unclaimed > 100 && expect_wide > 100);
    assert_eq!(
        d.unclaimed, expect_unclaimed,
        "requests outside the card's window"
    );
    assert_eq!(d.bad_width, expect_wide, "8-byte requests to the card");
    assert_eq!(s.refused_bad_size, 1);
    assert_eq!(s.refused_bad_count, 2);
    assert_eq!(s.refused_bad_type, 1);
    assert_eq!(s.refused_bad_addr, 1);
    assert_eq!(s.refused_bad_port, 1);
    assert!(s.spurious >= 1, "the stale event was counted");
    println!(
        "hostile: {n} random requests ({sent_ptr_outside} rep outside memory, \
         {expect_unclaimed} outside the window, {expect_wide} 8-byte); server {s:?}; \
         unclaimed {} bad width {} rep failed {}; card {:?}",
        d.unclaimed, d.bad_width, d.rep_failed, d.card
    );
}

#[test]
fn random_port_io_through_every_path_leaves_the_card_usable() {
    // A vCPU issuing random accesses (any offset of the window, any width, rep strings of any
    // length) while the selector flips, then a fresh driver on the same device model.
    let p = parts(Path::Original);
    let shared = DeviceState::<HvmShared>::new(p.page.clone(), SHARED_OFFSET).unwrap();
    let (dm_stop, dm) = spawn_dm(p.dm);
    let mut vcpu = Vcpu::new(
        p.vcpu_shared,
        p.client,
        p.vcpu_dev,
        ExitCost::free(),
        p.mem.clone(),
    )
    .unwrap();
    let mut wire = p.wire;
    let mut rng = Rng(42);
    let paths = [
        Path::Original,
        Path::Fast(Class::Seed),
        Path::Fast(Class::Max),
    ];
    let mut exits = 0u64;
    for i in 0..20_000u32 {
        if i % 97 == 0 {
            shared.set_path(paths[rng.below(3) as usize]);
        }
        let port = rng.below(0x24) as u8;
        let width = [Width::W1, Width::W2, Width::W4][rng.below(3) as usize];
        match rng.below(6) {
            0..=1 => {
                vcpu.access(Access::Read { port, width });
            }
            2..=3 => {
                vcpu.access(Access::Write {
                    port,
                    width,
                    value: rng.next() as u32,
                });
            }
            4 => {
                let mut buf = vec![0u8; rng.below(3000) as usize];
                pvnet_ne2000::driver::PortIo::insl(&mut vcpu, port, &mut buf);
                if buf.len() < 4 {
                    exits -= 1;
                }
            }
            _ => {
                let buf = vec![0xa5u8; rng.below(3000) as usize];
                pvnet_ne2000::driver::PortIo::outsl(&mut vcpu, port, &buf);
                if buf.len() < 4 {
                    exits -= 1;
                }
            }
        }
        exits += 1;
        // Take what random transmits sent, so the device model never waits for room.
        while !quiet(&mut wire, Duration::ZERO) {}
        assert!(vcpu.error().is_none(), "access {i}: {:?}", vcpu.error());
    }
    let v = vcpu.stats();
    assert_eq!(
        v.exits.total(),
        exits,
        "one exit per access, none for an empty string"
    );
    assert_eq!(v.exits.total(), v.served_at_trap + v.ioreqs);
    while !quiet(&mut wire, Duration::from_millis(20)) {}
    shared.set_path(Path::Fast(Class::Seed));
    let mut rig = Rig::with_vcpu(p.page, shared, wire, dm_stop, dm, vcpu);
    for i in 0..50 {
        let f = frame(PEER, MAC, size(i, 5), i as u32);
        put(&mut rig.stack, &f);
        assert_eq!(take(&mut rig.wire), padded(f));
        let f = frame(MAC, PEER, size(i, 77), i as u32);
        put(&mut rig.wire, &f);
        assert_eq!(take(&mut rig.stack), padded(f));
    }
    let (dm, g) = rig.stop();
    let (d, g) = (dm.stats(), g.stats());
    assert_eq!(g.frames_in, 50);
    assert_eq!(
        d.server.refused_total(),
        0,
        "a vCPU's own requests are well formed"
    );
    assert_eq!(d.server.requests_served, g.vcpu.ioreqs);
    println!(
        "random port I/O: {exits} exits, {} at the trap, {} ioreqs; card {:?}",
        g.vcpu.served_at_trap, g.vcpu.ioreqs, d.card
    );
}
