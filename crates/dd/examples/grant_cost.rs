//! The cost per packet of netback's grant mechanisms, in one process: a real netfront and
//! netback (memfd guest memory, grant table, eventfd channel). netback's calls are timed as the
//! driver domain's cost (`rx_flush` for packets to the guest, `tx_poll` for packets from it),
//! netfront's as the guest's (`rx_poll` with a delivery that copies each packet once, as a TAP
//! write into the guest's stack does; `tx_read_with` from a reader that copies the frame once,
//! as a TAP read does, plus `tx_push`/`tx_complete`).
//!
//! `cargo run --release -p pvnet-dd --example grant_cost [packets] [repetitions] [mechanism...]`
//! (default: every mechanism).
//!
//! Prints, per mechanism and direction, the median over the rounds (each measures every mechanism
//! once, in turn) of ns per packet and
//! ns per byte for the driver domain and for the guest, for 1514-byte frames and for 64 KiB
//! GSO packets.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pvnet_dd::netback::{Config, Features, Mechanism, Netback};
use pvnet_dd::packet::Packet;
use pvnet_dd::pool::PoolSpec;
use pvnet_guest::netfront::{Layout, Netfront, PoolMode};
use pvnet_hv::evtchn::channel_pair;
use pvnet_hv::grant::Hypervisor;
use pvnet_hv::mem::GuestMemory;
use pvnet_hv::DomId;
use pvnet_wire::vnet::{self, VirtioNetHdr};

const GUEST: DomId = DomId(1);

fn pair(mech: Mechanism) -> (Netfront, Netback) {
    let layout = Layout { grant_frames: 4 };
    let mem = Arc::new(GuestMemory::create("bench-guest", layout.pages()).unwrap());
    let hv = Arc::new(Hypervisor::new());
    hv.add_domain(GUEST, mem.clone(), 4);
    let (fe, be) = channel_pair().unwrap();
    let mut nf = Netfront::new(mem, layout, DomId::DRIVER, fe).unwrap();
    let persistent = mech == Mechanism::Persistent && nf.use_persistent_grants();
    let pool = match mech {
        Mechanism::Premapped => nf.use_pool(PoolMode::Premapped),
        Mechanism::Static => nf.use_pool(PoolMode::Static),
        _ => None,
    };
    let features = Features {
        sg: true,
        gso_tcpv4: true,
        gso_tcpv6: false,
        rx_notify: true,
    };
    let mut config = Config::negotiated(mech, persistent);
    config.mechanism = mech;
    let mut nb = Netback::connect_with(
        hv,
        GUEST,
        nf.tx_ring_ref(),
        nf.rx_ring_ref(),
        be,
        features,
        config,
    )
    .unwrap();
    if let Some(g) = pool {
        nb.attach_pool(PoolSpec {
            first_ref: g.first_ref,
            rx_slots: g.rx_slots,
            tx_slots: g.tx_slots,
        })
        .unwrap();
    }
    assert_eq!(nb.mechanism(), mech);
    (nf, nb)
}

/// Ethernet + IPv4 + TCP headers in front of `len - 54` payload bytes.
fn tcp_frame(len: usize) -> Vec<u8> {
    let mut f: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    f[14] = 0x45;
    f[16..18].copy_from_slice(&((len - 14).min(65535) as u16).to_be_bytes());
    f[23] = 6;
    f[46] = 5 << 4;
    f
}

fn hdr_for(len: usize) -> VirtioNetHdr {
    if len > 1514 {
        VirtioNetHdr {
            flags: vnet::F_NEEDS_CSUM,
            gso_type: vnet::GSO_TCPV4,
            gso_size: 1448,
            csum_start: 34,
            csum_offset: 16,
            hdr_len: 54,
        }
    } else {
        VirtioNetHdr::default()
    }
}

/// Time netback (driver domain) and netfront (guest) spend per packet moving `n` packets of
/// `len` bytes to the guest.
fn rx(mech: Mechanism, len: usize, n: usize) -> (Duration, Duration) {
    let (mut nf, mut nb) = pair(mech);
    nf.rx_refill();
    let frame = tcp_frame(len);
    let hdr = hdr_for(len);
    let per_round = (256 / (len.div_ceil(4096) + 1)).clamp(1, 64);
    let mut spent = Duration::ZERO;
    let mut guest = Duration::ZERO;
    let mut stack = vec![0u8; 65536 + 64];
    let mut done = 0;
    while done < n {
        for _ in 0..per_round {
            nb.rx_enqueue(Packet::linear(hdr, frame.clone()));
        }
        let t = Instant::now();
        let moved = nb.rx_flush().unwrap();
        spent += t.elapsed();
        assert_eq!(moved, per_round);
        let t = Instant::now();
        let got = nf.rx_poll(|_, pieces| {
            // The stack's copy (a TAP write).
            let mut at = 0;
            for p in pieces {
                stack[at..at + p.len()].copy_from_slice(p);
                at += p.len();
            }
            std::hint::black_box(&stack);
            Ok(())
        });
        guest += t.elapsed();
        assert_eq!(got, per_round);
        done += per_round;
    }
    (spent / done as u32, guest / done as u32)
}

/// Time netback (driver domain) and netfront (guest) spend per packet taking `n` packets of
/// `len` bytes from the guest.
fn tx(mech: Mechanism, len: usize, n: usize) -> (Duration, Duration) {
    let (mut nf, mut nb) = pair(mech);
    nf.rx_refill();
    let mut bytes = hdr_for(len).to_bytes().to_vec();
    bytes.extend_from_slice(&tcp_frame(len));
    let mut spent = Duration::ZERO;
    let mut guest = Duration::ZERO;
    let mut done = 0;
    while done < n {
        let mut posted = 0;
        let t = Instant::now();
        while posted < 64 {
            let r = nf
                .tx_read_with(|iov| {
                    let mut off = 0;
                    for v in iov.iter_mut() {
                        let k = v.len().min(bytes.len() - off);
                        v[..k].copy_from_slice(&bytes[off..off + k]);
                        off += k;
                        if off == bytes.len() {
                            break;
                        }
                    }
                    Ok(off)
                })
                .unwrap();
            if r.is_none() {
                break;
            }
            posted += 1;
        }
        nf.tx_push();
        guest += t.elapsed();
        let t = Instant::now();
        let got = nb.tx_poll(usize::MAX, drop).unwrap();
        spent += t.elapsed();
        assert_eq!(got, posted);
        let t = Instant::now();
        nf.tx_complete();
        guest += t.elapsed();
        done += posted;
    }
    (spent / done as u32, guest / done as u32)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let reps: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let named: Vec<Mechanism> = args.map(|a| a.parse().expect("a mechanism")).collect();
    let mechs: Vec<Mechanism> = if named.is_empty() {
        Mechanism::ALL.to_vec()
    } else {
        named
    };
    println!(
        "cost per packet (median of {reps} rounds of {n} packets, mechanisms interleaved within a \
         round): driver domain = netback's calls, guest = netfront's; \"/ {}\" columns: median of \
         each round's ratio to the first mechanism's figure in that round",
        mechs[0].name()
    );
    println!(
        "{:<11} {:<3} {:>7} {:>10} {:>9} {:>8} {:>10} {:>9} {:>8}",
        "mechanism",
        "dir",
        "bytes",
        "dd ns/pkt",
        "dd ns/B",
        "dd /",
        "gst ns/pkt",
        "gst ns/B",
        "gst /"
    );
    for len in [1514usize, 65535] {
        let n = if len > 1514 { n / 20 } else { n };
        for (dir, f) in [
            (
                "rx",
                rx as fn(Mechanism, usize, usize) -> (Duration, Duration),
            ),
            ("tx", tx),
        ] {
            // runs[m][round]: every round measures each mechanism once, in turn, so that the
            // machine's drift (shared with other builds) falls on all of them alike.
            let mut runs: Vec<Vec<(Duration, Duration)>> = vec![Vec::new(); mechs.len()];
            for _ in 0..reps {
                for (m, &mech) in mechs.iter().enumerate() {
                    runs[m].push(f(mech, len, n));
                }
            }
            let ratio = |m: usize, side: fn(&(Duration, Duration)) -> Duration| {
                let mut r: Vec<f64> = (0..reps)
                    .map(|k| {
                        side(&runs[m][k]).as_nanos() as f64
                            / side(&runs[0][k]).as_nanos().max(1) as f64
                    })
                    .collect();
                r.sort_by(|a, b| a.total_cmp(b));
                r[r.len() / 2]
            };
            for (m, &mech) in mechs.iter().enumerate() {
                let dd = median(runs[m].iter().map(|r| r.0).collect()).as_nanos() as f64;
                let g = median(runs[m].iter().map(|r| r.1).collect()).as_nanos() as f64;
                println!(
                    "{:<11} {:<3} {:>7} {:>10.0} {:>9.3} {:>8.2} {:>10.0} {:>9.3} {:>8.2}",
                    mech.name(),
                    dir,
                    len,
                    dd,
                    dd / len as f64,
                    ratio(m, |r| r.0),
                    g,
                    g / len as f64,
                    ratio(m, |r| r.1),
                );
            }
        }
    }
}
