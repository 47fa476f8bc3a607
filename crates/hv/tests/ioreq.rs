//! ioreq round trips between a vCPU thread and a device-model thread sharing one page.

mod common;

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{mask, median_p99, serve_n, value, Toy, DATA, LEN, REGS, SUM};
use pvnet_hv::evtchn::channel_pair;
use pvnet_hv::foreign::ForeignMemory;
use pvnet_hv::ioreq::{
    Ioreq, IoreqClient, IoreqError, IoreqPage, IoreqServer, RawIoreq, STATE_IOREQ_INPROCESS,
};
use pvnet_hv::mem::GuestMemory;
use pvnet_hv::Port;

const PORT: Port = Port(3);
const IDLE: Duration = Duration::from_secs(10);

/// A page with one vCPU, its client and server, and guest memory of `pages` pages.
fn pair(pages: u32) -> (IoreqClient, IoreqServer, Arc<ForeignMemory>) {
    let page = Arc::new(IoreqPage::create("ioreq", 1, 0).unwrap());
    let (vcpu_end, dm_end) = channel_pair().unwrap();
    let client = IoreqClient::new(page.clone(), 0, PORT, vcpu_end).unwrap();
    let mem = Arc::new(ForeignMemory::new(Arc::new(
        GuestMemory::create("guest", pages).unwrap(),
    )));
    let server = IoreqServer::new(page, 0, PORT, dm_end)
        .unwrap()
        .with_memory(mem.clone());
    (client, server, mem)
}

fn spawn_dm(mut server: IoreqServer, n: u64) -> thread::JoinHandle<IoreqServer> {
    thread::spawn(move || {
        let mut toy = Toy::default();
        assert!(serve_n(&mut server, &mut toy, n, IDLE), "device model idle");
        server
    })
}

/// Register writes and reads of every width, each read checked against what the device model
/// must have computed.
fn register_traffic(c: &mut IoreqClient, n: u64) {
    for i in 0..n / 2 {
        let size = [1u32, 2, 4, 8][(i % 4) as usize];
        let port = REGS + (i % 16) as u16;
        let v = value(i);
        assert_eq!(c.round_trip(&Ioreq::pio_out(port, size, v)).unwrap(), 0);
        let got = c.round_trip(&Ioreq::pio_in(port, size)).unwrap();
        assert_eq!(
            got,
            (v & mask(size)).wrapping_add(1) & mask(size),
            "request {i}"
        );
    }
}

#[test]
fn thousands_of_round_trips_between_threads() {
    let n = 6000;
    let (mut c, server, _mem) = pair(1);
    let dm = spawn_dm(server, n);
    register_traffic(&mut c, n);
    let s = dm.join().unwrap().stats();
    let cs = c.stats();
    assert_eq!((cs.requests_sent, cs.round_trips), (n, n));
    assert_eq!(
        (s.slot_copies, s.requests_served, s.refused_total()),
        (n, n, 0)
    );
    assert_eq!(
        (cs.timeouts, cs.peer_deaths, cs.bad_state, cs.slot_busy),
        (0, 0, 0, 0)
    );
    assert!(cs.wait_ns > 0);
}

#[test]
fn round_trip_time_between_threads() {
    // Blocking on the eventfd, then with a 50 µs spin before blocking.
    for spin in [0u64, 50_000] {
        let n = 4000;
        let (mut c, server, _mem) = pair(1);
        c.set_spin(spin);
        let dm = spawn_dm(server, n);
        let mut t = Vec::with_capacity(n as usize);
        for i in 0..n {
            let t0 = Instant::now();
            let v = c
                .round_trip(&Ioreq::pio_in(REGS + (i % 16) as u16, 1))
                .unwrap();
            t.push(t0.elapsed().as_nanos() as u64);
            assert_eq!(v, 1);
        }
        dm.join().unwrap();
        let (med, p99) = median_p99(&mut t);
        let cs = c.stats();
        println!(
            "ioreq round trip, threads, spin {spin} ns: median {med} ns, p99 {p99} ns over {n} \
             ({} answered while spinning, {} blocks)",
            cs.spin_hits, cs.blocks
        );
        assert_eq!(cs.round_trips, n);
    }
}

#[test]
fn fifo_values_in_order() {
    let (mut c, server, _mem) = pair(1);
    let n = 2 * 1000 + 2;
    let dm = spawn_dm(server, n);
    let mut sum = 0u32;
    for i in 0..1000u64 {
        let v = value(i) & 0xffff;
        c.round_trip(&Ioreq::pio_out(DATA, 2, v)).unwrap();
        sum = sum.wrapping_add((v & 0xff) as u32 + (v >> 8) as u32);
    }
    assert_eq!(c.round_trip(&Ioreq::pio_in(LEN, 4)).unwrap(), 2000);
    for i in 0..1000u64 {
        assert_eq!(
            c.round_trip(&Ioreq::pio_in(DATA, 2)).unwrap(),
            value(i) & 0xffff
        );
    }
    assert_eq!(
        c.round_trip(&Ioreq::pio_in(SUM, 4)).unwrap(),
        u64::from(sum)
    );
    dm.join().unwrap();
}

/// `rep outs` from guest memory into the device and `rep ins` back, both directions of the
/// direction flag, across page boundaries; an out-of-range pointer is refused, counted, answered,
/// and moves no byte.
#[test]
fn rep_ins_outs_move_guest_memory_intact() {
    let (mut c, server, mem) = pair(4);
    let dm = spawn_dm(server, 7);
    let pattern: Vec<u8> = (0..3000u32).map(|i| (i * 31 + 7) as u8).collect();
    mem.write(0x0ffa, &pattern).unwrap();

    // rep outsw: 1500 words from 0xffa upward.
    let outs = Ioreq::pio_outs(DATA, 2, 1500, 0x0ffa, false);
    assert_eq!(
        c.round_trip(&outs).unwrap(),
        0x0ffa,
        "data_is_ptr answers keep the pointer"
    );
    assert_eq!(c.round_trip(&Ioreq::pio_in(LEN, 4)).unwrap(), 3000);
    let sum: u32 = pattern.iter().map(|&b| u32::from(b)).sum();
    assert_eq!(
        c.round_trip(&Ioreq::pio_in(SUM, 4)).unwrap(),
        u64::from(sum)
    );

    // rep insd: 750 dwords to 0x2ffc upward (crosses into page 3).
    c.round_trip(&Ioreq::pio_ins(DATA, 4, 750, 0x2ffc, false))
        .unwrap();
    let mut back = vec![0u8; 3000];
    mem.read(0x2ffc, &mut back).unwrap();
    assert_eq!(back, pattern);

    // df set: rep outsw of 4 words from 0x100 downward, rep insw of them to 0x200 upward.
    mem.write(0xfa, &[1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
    c.round_trip(&Ioreq::pio_outs(DATA, 2, 4, 0x100, true))
        .unwrap();
    c.round_trip(&Ioreq::pio_ins(DATA, 2, 4, 0x200, false))
        .unwrap();
    let mut got = [0u8; 8];
    mem.read(0x200, &mut got).unwrap();
    assert_eq!(
        got,
        [7, 8, 5, 6, 3, 4, 1, 2],
        "items taken from 0x100, 0xfe, 0xfc, 0xfa"
    );

    // Out of range: 4 pages end at 0x4000. Refused: the vCPU gets its pointer back, nothing moves.
    let before = mem.stats();
    let bad = Ioreq::pio_ins(DATA, 2, 8, 0x3ff2, false);
    assert_eq!(c.round_trip(&bad).unwrap(), 0x3ff2);
    let mut tail = [0xaau8; 14];
    mem.read(0x3ff2, &mut tail).unwrap();
    assert_eq!(tail, [0; 14]);
    let s = dm.join().unwrap().stats();
    assert_eq!(s.refused_bad_ptr, 1);
    assert_eq!(s.refused_total(), 1);
    assert_eq!(s.requests_served, 6);
    let after = mem.stats();
    assert_eq!(
        after.writes, before.writes,
        "the refused rep ins wrote nothing"
    );
    assert_eq!(
        after.reads,
        before.reads + 1,
        "only the test's own read of the tail"
    );
}

fn pipe() -> (OwnedFd, OwnedFd) {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap()
}

/// The device model takes a request and dies without answering: the vCPU watching its pipe gets
/// `PeerDied`, not a hang (the timeout is off, so only the death can end the wait).
#[test]
fn dead_device_model_thread_gives_peer_died() {
    let (mut c, mut server, _mem) = pair(1);
    let (r, w) = pipe();
    c.watch_peer(r);
    c.set_timeout(None);
    let dm = thread::spawn(move || {
        assert!(server.wait(Some(IDLE)).unwrap());
        let req = server.next().unwrap();
        assert_eq!(req, Ioreq::pio_in(REGS, 1));
        drop(w); // dies holding the request
        server
    });
    match c.round_trip(&Ioreq::pio_in(REGS, 1)) {
        Err(IoreqError::PeerDied) => {}
        other => panic!("{other:?}"),
    }
    let server = dm.join().unwrap();
    assert_eq!(c.stats().peer_deaths, 1);
    assert_eq!(c.page().slot_state(0).unwrap(), STATE_IOREQ_INPROCESS);
    assert!(server.in_process());
    // The slot stays the dead request's: the next round trip refuses to overwrite it.
    assert!(matches!(
        c.round_trip(&Ioreq::pio_in(REGS, 1)),
        Err(IoreqError::SlotBusy(2))
    ));
}

/// No device model at all: the round trip times out.
#[test]
fn silent_device_model_times_out() {
    let (mut c, _server, _mem) = pair(1);
    c.set_timeout(Some(Duration::from_millis(50)));
    match c.round_trip(&Ioreq::pio_out(REGS, 1, 1)) {
        Err(IoreqError::Timeout(t)) => assert_eq!(t, Duration::from_millis(50)),
        other => panic!("{other:?}"),
    }
    let cs = c.stats();
    assert_eq!((cs.timeouts, cs.requests_sent, cs.round_trips), (1, 1, 0));
    assert!(cs.blocks >= 1);
}

/// A device model that writes a state the protocol does not allow while the vCPU waits.
#[test]
fn bad_state_while_waiting_is_an_error() {
    let (mut c, server, _mem) = pair(1);
    let page = c.page().clone();
    let dm = thread::spawn(move || {
        assert!(server.wait(Some(IDLE)).unwrap());
        page.write_slot_raw(
            0,
            &RawIoreq {
                bits: 9,
                ..RawIoreq::default()
            },
        )
        .unwrap();
        server.evtchn().notify().unwrap();
    });
    match c.round_trip(&Ioreq::pio_in(REGS, 1)) {
        Err(IoreqError::BadState(9)) => {}
        other => panic!("{other:?}"),
    }
    dm.join().unwrap();
    assert_eq!(c.stats().bad_state, 1);
}
