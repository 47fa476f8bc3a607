//! Measure pattern verify speed and a loopback stream/rr run with CPU accounting.
//!
//! `cargo run --release -p pvnet-perf --example loopback_bench [seconds] [nopin]`
//!
//! By default the receiver is pinned to CPU 0 and the sender to CPU 1; `nopin` leaves
//! placement to the scheduler.

use std::hint::black_box;
use std::thread;
use std::time::{Duration, Instant};

use pvnet_perf::{
    bind_listener, cpu, pattern, rr_client, serve_on, stream_send, RrOpts, StreamOpts,
};

fn main() -> anyhow::Result<()> {
    let secs: f64 = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(2.0);
    let pin = std::env::args().nth(2).as_deref() != Some("nopin");
    let pin_to = move |c: usize| {
        if pin {
            let _ = cpu::pin_current_thread(c);
        }
    };

    // Verify / fill speed on a receive-sized buffer.
    let mut buf = vec![0u8; 256 << 10];
    let iters = 20_000u64;
    let t = Instant::now();
    let mut bad = 0;
    for i in 0..iters {
        let off = i * buf.len() as u64;
        pattern::fill(off, &mut buf);
        bad += pattern::verify(off, black_box(&buf));
    }
    let fv = t.elapsed().as_secs_f64();
    let t = Instant::now();
    pattern::fill(0, &mut buf);
    for _ in 0..iters {
        bad += pattern::verify(0, black_box(&buf));
    }
    let v = t.elapsed().as_secs_f64();
    let bytes = iters as f64 * buf.len() as f64;
    assert_eq!(bad, 0);
    println!(
        "verify: {:.1} GB/s = {:.3} ns/byte = {:.3} cycles/byte; fill+verify {:.1} GB/s; tsc {} MHz",
        bytes / v / 1e9,
        v * 1e9 / bytes,
        v * cpu::tsc_hz() as f64 / bytes,
        bytes / fv / 1e9,
        cpu::tsc_hz() / 1_000_000
    );

    // Stream: receiver pinned to CPU 0, sender to CPU 1 (as docs/architecture.md's measurement section says).
    let l = bind_listener("127.0.0.1:0".parse()?)?;
    let addr = l.local_addr()?;
    let srv = thread::spawn(move || {
        pin_to(0);
        serve_on(l, true, |_| {})
    });
    pin_to(1.min(cpu::num_cpus()? - 1));
    let pid = std::process::id() as i32;
    let a = cpu::sample(0, &[pid])?;
    let r = stream_send(
        addr,
        &StreamOpts {
            msg_size: 65536,
            duration: Duration::from_secs_f64(secs),
            max_bytes: None,
            pace_mbps: None,
        },
    )?;
    let b = cpu::sample(0, &[pid])?;
    srv.join().unwrap()?;
    let d = cpu::delta(&a, &b);
    println!(
        "stream: {:.2} Gbit/s, {} bytes, {} mismatches; cpu0 busy {:.0} %, {:.3} cycles/byte ({:.3} ns/byte), process {:.3} ns/byte",
        r.mbps / 1e3,
        r.bytes,
        r.mismatches,
        d.utilization() * 100.0,
        cpu::cycles_per_byte(d.busy_ns, r.bytes),
        cpu::ns_per_byte(d.busy_ns, r.bytes),
        cpu::ns_per_byte(d.pid_ns[0].1, r.bytes),
    );

    let l = bind_listener("127.0.0.1:0".parse()?)?;
    let addr = l.local_addr()?;
    let srv = thread::spawn(move || {
        pin_to(0);
        serve_on(l, true, |_| {})
    });
    let r = rr_client(
        addr,
        &RrOpts {
            duration: Duration::from_secs_f64(secs),
            req_size: 1,
            rsp_size: 1,
        },
    )?;
    srv.join().unwrap()?;
    println!("rr: {}", serde_json::to_string(&r)?);
    Ok(())
}
