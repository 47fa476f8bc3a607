//! The device model and the HVM guest as two threads: frames of every size both ways, intact,
//! on every path and while the path is switched live; exits per packet equal on every path,
//! and what the fast paths forward.

mod common;

use std::time::{Duration, Instant};

use common::*;
use pvnet_hvm::dm::DmStats;
use pvnet_hvm::guest::GuestStats;
use pvnet_hvm::PortCounts;
use pvnet_ne2000::direct::Path;
use pvnet_ne2000::Class;

const PATHS: [Path; 3] = [
    Path::Original,
    Path::Fast(Class::Seed),
    Path::Fast(Class::Max),
];

/// Checks the counters both sides must agree on after `n_tx` frames out and `n_rx` in.
fn check_books(path: Option<Path>, d: &DmStats, g: &GuestStats, n_tx: u64, n_rx: u64) {
    let v = &g.vcpu;
    assert_eq!(g.frames_out, n_tx, "frames queued by the driver");
    assert_eq!(d.frames_out, n_tx, "frames the card sent");
    assert_eq!(d.net_out_errors, 0);
    assert_eq!(d.card.tx_frames, n_tx);
    assert_eq!(d.frames_in, n_rx, "frames placed in the ring");
    assert_eq!(d.card.rx_frames, n_rx);
    assert_eq!(d.rx_dropped, 0);
    assert_eq!(g.frames_in, n_rx, "frames handed to the stack");
    assert_eq!(g.stack_errors, 0);
    assert_eq!(g.driver.rx_errors, 0);
    assert_eq!(g.driver.tx_errors, 0);
    // Every ioreq the vCPU sent was served, once, and counted by port.
    assert_eq!(v.client.requests_sent, v.ioreqs);
    assert_eq!(v.client.round_trips, v.ioreqs);
    assert_eq!(d.server.requests_served, v.ioreqs);
    assert_eq!(d.server.refused_total(), 0);
    assert_eq!(d.ioreqs.total(), v.ioreqs);
    assert_eq!(d.unclaimed + d.bad_width + d.rep_failed, 0);
    // Every exit was served at the trap or by the device model.
    assert_eq!(v.exits.total(), v.served_at_trap + v.ioreqs);
    assert_eq!(v.exits_original + v.exits_fast, v.exits.total());
    assert_eq!(v.ioreq_errors, 0);
    // Each string access is one exit and one ioreq, at the data port.
    assert_eq!(d.rep_reads + d.rep_writes, v.rep_exits);
    assert_eq!(
        v.exits.reads_at(0x10) + v.exits.writes_at(0x10),
        d.ioreqs.reads_at(0x10) + d.ioreqs.writes_at(0x10),
        "every data-port access is forwarded"
    );
    match path {
        Some(Path::Original) => {
            assert_eq!(v.served_at_trap, 0);
            assert_eq!(v.ioreqs, v.exits.total());
            assert_eq!(v.exits_fast, 0);
        }
        Some(Path::Fast(_)) => {
            assert!(v.served_at_trap > 0);
            assert!(v.ioreqs < v.exits.total());
            assert_eq!(v.ioreqs, v.forwarded_by_trap);
            assert_eq!(v.exits_original, 0);
        }
        None => {}
    }
}

/// `n` frames each way at once, sizes cycling through 14..=1514; checks order and bytes.
fn both_ways(rig: &mut Rig, n: usize, during: impl FnOnce() + Send) {
    let mut stack_w = rig.stack.try_clone().unwrap();
    let mut wire_w = rig.wire.try_clone().unwrap();
    let stack_r = &mut rig.stack;
    let wire_r = &mut rig.wire;
    std::thread::scope(|s| {
        s.spawn(move || {
            for i in 0..n {
                put(&mut stack_w, &frame(PEER, MAC, size(i, 0), i as u32));
            }
        });
        s.spawn(move || {
            for i in 0..n {
                put(
                    &mut wire_w,
                    &frame(MAC, PEER, size(i, 700), 0x8000_0000 | i as u32),
                );
            }
        });
        let out = s.spawn(move || {
            for i in 0..n {
                let got = take(wire_r);
                let want = padded(frame(PEER, MAC, size(i, 0), i as u32));
                assert_eq!(got.len(), want.len(), "out frame {i}: length");
                assert!(got == want, "out frame {i} ({} bytes) differs", want.len());
            }
        });
        let inn = s.spawn(move || {
            for i in 0..n {
                let got = take(stack_r);
                let want = padded(frame(MAC, PEER, size(i, 700), 0x8000_0000 | i as u32));
                assert_eq!(got.len(), want.len(), "in frame {i}: length");
                assert!(got == want, "in frame {i} ({} bytes) differs", want.len());
            }
        });
        during();
        out.join().expect("frames out");
        inn.join().expect("frames in");
    });
}

#[test]
fn frames_of_every_size_cross_both_ways_intact_on_every_path() {
    let n = 3002; // every size 14..=1514 twice, each way
    for path in PATHS {
        let mut rig = Rig::start(path, 0);
        both_ways(&mut rig, n, || {});
        assert!(quiet(&mut rig.wire, Duration::from_millis(50)));
        assert!(quiet(&mut rig.stack, Duration::from_millis(50)));
        let (dm, g) = rig.stop();
        let (d, g) = (dm.stats(), g.stats());
        check_books(Some(path), &d, &g, n as u64, n as u64);
        println!(
            "{}: {n} frames each way; exits {} ioreqs {} served at trap {}; ring full {} \
             holds {} wakes from vCPU {} from completions {}; interrupts sent {} taken {}",
            path.name(),
            g.vcpu.exits.total(),
            g.vcpu.ioreqs,
            g.vcpu.served_at_trap,
            d.ring_full,
            d.holds,
            d.wakes_vcpu,
            d.wakes_completion,
            d.interrupts_sent,
            g.interrupts,
        );
    }
}

#[test]
fn switching_paths_live_keeps_every_frame_intact() {
    let n = 3002;
    let mut rig = Rig::start(Path::Original, 0);
    let shared = pvnet_hv::ioreq::DeviceState::<pvnet_hvm::HvmShared>::new(
        rig.page.clone(),
        pvnet_hvm::SHARED_OFFSET,
    )
    .unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let stop = &stop;
    let shared = &shared;
    let mut flips = 0u64;
    let flips_ref = &mut flips;
    std::thread::scope(|s| {
        let switcher = s.spawn(move || {
            let mut i = 0usize;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                shared.set_path(PATHS[i % 3]);
                i += 1;
                std::thread::sleep(Duration::from_micros(500));
            }
            i as u64
        });
        both_ways(&mut rig, n, || {});
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        *flips_ref = switcher.join().unwrap();
    });
    let (dm, g) = rig.stop();
    let (d, g) = (dm.stats(), g.stats());
    check_books(None, &d, &g, n as u64, n as u64);
    let v = &g.vcpu;
    assert!(flips > 3, "the switcher ran");
    assert!(v.path_changes > 0, "the vCPU saw the path change");
    assert!(v.exits_original > 0 && v.exits_fast > 0);
    assert!(v.served_at_trap > 0 && v.served_at_trap < v.exits.total());
    assert_eq!(v.bad_path, 0);
    println!(
        "live switching: {flips} flips, {} changes seen by the vCPU; exits original {} fast {}",
        v.path_changes, v.exits_original, v.exits_fast
    );
}

#[test]
fn a_garbage_path_selector_is_served_as_original_and_counted() {
    let p = parts(Path::Fast(Class::Max));
    p.vcpu_shared.set_path_raw(77);
    let shared =
        pvnet_hv::ioreq::DeviceState::new(p.page.clone(), pvnet_hvm::SHARED_OFFSET).unwrap();
    let (dm_stop, dm) = spawn_dm(p.dm);
    let vcpu = pvnet_hvm::vcpu::Vcpu::new(
        p.vcpu_shared,
        p.client,
        p.vcpu_dev,
        pvnet_hv::exit::ExitCost::free(),
        p.mem.clone(),
    )
    .unwrap();
    let mut rig = Rig::with_vcpu(p.page, shared, p.wire, dm_stop, dm, vcpu);
    for i in 0..20 {
        put(&mut rig.stack, &frame(PEER, MAC, 100 + i, i as u32));
        assert_eq!(take(&mut rig.wire), frame(PEER, MAC, 100 + i, i as u32));
    }
    let (dm, g) = rig.stop();
    let (d, g) = (dm.stats(), g.stats());
    check_books(None, &d, &g, 20, 0);
    assert_eq!(
        g.vcpu.bad_path,
        g.vcpu.exits.total(),
        "every exit saw the garbage"
    );
    assert_eq!(g.vcpu.served_at_trap, 0, "all served as original");
    assert_eq!(g.vcpu.exits_original, g.vcpu.exits.total());
}

/// What one ping-pong run measured.
struct Run {
    exits: PortCounts,
    ioreqs: u64,
    served: u64,
    wall: Duration,
    dm_cpu_ns: u64,
}

/// `n` frames one at a time (each waits for the previous to arrive): `tx` out of the guest,
/// else into it. `n == 0` measures the boot alone.
fn ping(path: Path, exit_ns: u64, n: usize, tx: bool) -> Run {
    let mut rig = Rig::start(path, exit_ns);
    let t = Instant::now();
    for i in 0..n {
        let len = size(i, 0);
        if tx {
            let f = frame(PEER, MAC, len, i as u32);
            put(&mut rig.stack, &f);
            assert_eq!(take(&mut rig.wire), padded(f));
        } else {
            let f = frame(MAC, PEER, len, i as u32);
            put(&mut rig.wire, &f);
            assert_eq!(take(&mut rig.stack), padded(f));
        }
    }
    let wall = t.elapsed();
    let (dm, g) = rig.stop();
    let (d, g) = (dm.stats(), g.stats());
    let (ntx, nrx) = if tx { (n, 0) } else { (0, n) };
    check_books(Some(path), &d, &g, ntx as u64, nrx as u64);
    Run {
        exits: g.vcpu.exits,
        ioreqs: g.vcpu.ioreqs,
        served: g.vcpu.served_at_trap,
        wall,
        dm_cpu_ns: d.cpu_ns,
    }
}

fn minus(a: &PortCounts, b: &PortCounts) -> PortCounts {
    let mut r = PortCounts::default();
    for i in 0..32 {
        r.reads[i] = a.reads[i] - b.reads[i];
        r.writes[i] = a.writes[i] - b.writes[i];
    }
    r.other = a.other - b.other;
    r
}

#[test]
fn exits_per_packet_are_equal_on_every_path_and_fast_paths_forward_fewer() {
    let n = 600;
    println!(
        "\nper frame (ping-pong, {n} frames of sizes cycling 14..=1514, one in flight):\n\
         {:<9} {:>7} {:>3} | {:>6} {:>7} {:>7} {:>9} | {:>6} {:>7} {:>7} {:>9} | {:>9}",
        "path",
        "exit_ns",
        "dir",
        "exits",
        "ioreqs",
        "trap",
        "us/frame",
        "",
        "",
        "",
        "",
        "dm cpu ms"
    );
    for exit_ns in [0u64, 1000] {
        let mut per_dir: Vec<(bool, Vec<(PortCounts, u64)>)> = Vec::new();
        for tx in [true, false] {
            let mut rows = Vec::new();
            for path in PATHS {
                let boot = ping(path, exit_ns, 0, tx);
                let run = ping(path, exit_ns, n, tx);
                let exits = minus(&run.exits, &boot.exits);
                let ioreqs = run.ioreqs - boot.ioreqs;
                let served = run.served - boot.served;
                assert_eq!(exits.total(), ioreqs + served);
                println!(
                    "{:<9} {:>7} {:>3} | {:>6.2} {:>7.2} {:>7.2} {:>9.2} | {:>43} | {:>9.1}",
                    path.name(),
                    exit_ns,
                    if tx { "tx" } else { "rx" },
                    exits.total() as f64 / n as f64,
                    ioreqs as f64 / n as f64,
                    served as f64 / n as f64,
                    run.wall.as_secs_f64() * 1e6 / n as f64,
                    "",
                    run.dm_cpu_ns as f64 / 1e6,
                );
                rows.push((exits, ioreqs));
            }
            per_dir.push((tx, rows));
        }
        for (tx, rows) in &per_dir {
            let dir = if *tx { "tx" } else { "rx" };
            let (orig, seed, max) = (&rows[0], &rows[1], &rows[2]);
            // The guest does the same accesses whoever serves them: port by port.
            assert_eq!(orig.0, seed.0, "{dir}: exits by port, original vs seed");
            assert_eq!(orig.0, max.0, "{dir}: exits by port, original vs max");
            assert_eq!(
                orig.1,
                orig.0.total(),
                "{dir}: original forwards every exit"
            );
            assert!(seed.1 < orig.1, "{dir}: seed forwards fewer than original");
            assert!(max.1 < seed.1, "{dir}: max forwards fewer than seed");
        }
    }
}
