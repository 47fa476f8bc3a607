//! The LRO engine (`pvnet_dd::lro`) driven by fuzz-chosen event sequences: frames of four
//! flows (two IPv4, two IPv6 with extension header chains; to one guest or two) that are next in sequence, short,
//! duplicated, out of order, pure ACKs, SYNs, with bad checksums, not TCP, with a changed ACK,
//! MAC, TTL, window, extension header, FIN or CWR; well-formed frames with fuzz-chosen bytes
//! flipped or cut; frames of raw fuzz bytes; with receive metadata none / DATA_VALID / partial
//! checksum; interleaved with `end_poll`, clock steps, `expire`, policy and mode changes and
//! buffer detaches.
//!
//! As the daemon drives it: one engine per receive queue of the port (`lro::Queues`, one to
//! three), a flow's frames always on one queue (by a hash of its 4-tuple, as the kernel's
//! fanout keeps a guest's frames on its queue), each queue's frames stamped with their arrival
//! times, which lag the daemon's clock by a fuzz-chosen backlog and never go back on a queue,
//! while the end of a poll may be the clock's time (later than the frames after it); the
//! engines' wall clock set before each frame and each end of poll; queues taken away and added.
//!
//! Invariants, checked after every input (the oracle of `crates/dd/tests/lro_prop.rs`, whose
//! helpers `lro_common` this target includes rather than copies):
//! - per TCP 4-tuple, the (seq, payload) sequence that comes out, once GSO aggregates are cut
//!   back with `lro::segment`, equals the one that went in: nothing lost, duplicated,
//!   reordered or corrupted;
//! - every aggregate is valid: `NEEDS_CSUM`, IPv4 header checksum right, the partial TCP
//!   checksum completes to a right one, and each re-cut segment has right checksums;
//! - frames the engine must refuse (bad checksum, not TCP, pure ACK, SYN, garbage that does not
//!   parse) come out byte for byte with their metadata;
//! - held flows never exceed `max_flows`, the next deadline is never beyond the hold limit,
//!   nothing stays held after `flush_all`, and the counters add up (frames in = segments +
//!   pass-through; aggregates + pass-through = packets out).

#![no_main]

#[path = "../../crates/dd/tests/lro_common/mod.rs"]
mod lro_common;

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use lro_common::*;
use pvnet_dd::lro::{Config, Mode, Policy, Queues, HOLD_LIMIT_US};
use pvnet_dd::packet::Packet;
use pvnet_wire::vnet::{self, VirtioNetHdr};

fn chain(i: u8) -> Vec<(u8, Vec<u8>)> {
    match i % 3 {
        0 => Vec::new(),
        1 => vec![ext(0, 0, 1)],
        _ => vec![ext(0, 0, 2), ext(43, 2, 3), ext(60, 1, 4)],
    }
}

fn policy(u: &mut Unstructured<'_>) -> Result<Policy> {
    Ok(match u.int_in_range(0..=3u8)? {
        0 => Policy::Poll,
        1 => Policy::Every(u.int_in_range(1..=4)?),
        2 => Policy::Timeout {
            us: u.int_in_range(1..=300)?,
        },
        _ => Policy::Adaptive,
    })
}

fn mode(u: &mut Unstructured<'_>) -> Result<Mode> {
    Ok(if u.arbitrary::<bool>()? {
        Mode::Page
    } else {
        Mode::Skb
    })
}

fn count(m: &mut BTreeMap<(Vec<u8>, [u8; 10]), i64>, f: &[u8], v: &VirtioNetHdr, d: i64) {
    *m.entry((f.to_vec(), v.to_bytes())).or_default() += d;
}

fn check_output(p: &Packet) {
    if p.vnet.gso_type != vnet::GSO_NONE {
        assert!(p.vnet.needs_csum(), "aggregate without NEEDS_CSUM");
        assert!(ip_csum_ok(&p.head), "aggregate IPv4 header checksum");
        assert!(
            tcp_csum_ok(&complete(p)),
            "aggregate partial checksum does not complete"
        );
        let segs = pvnet_dd::lro::segment(p).expect("aggregate re-segments");
        for s in segs {
            assert!(
                ip_csum_ok(&s.head) && tcp_csum_ok(&s.head),
                "re-cut segment checksums"
            );
        }
    }
}

/// Most receive queues fuzzed.
const MAX_QUEUES: usize = 3;

/// The port's receive queues, each with its engine, its newest arrival time, its backlog
/// behind the daemon's clock and the frames of its current poll.
struct Port {
    engines: Queues,
    newest: Vec<u64>,
    lag: [u64; MAX_QUEUES],
    frames: Vec<usize>,
    salt: u64,
}

impl Port {
    /// The queue of `frame`: by its 4-tuple's hash when it parses as TCP (all of a flow's
    /// frames on one queue), queue 0 otherwise. A tuple whose slot has no queue goes to 0.
    fn queue_of(&self, frame: &[u8]) -> usize {
        let slot = match pvnet_wire::parse_tcp(frame) {
            Ok(m) => {
                let mut h = DefaultHasher::new();
                m.key.hash(&mut h);
                h.finish().wrapping_add(self.salt) as usize % MAX_QUEUES
            }
            Err(_) => 0,
        };
        if slot < self.engines.len() {
            slot
        } else {
            0
        }
    }

    /// Offers `f` on its queue at its arrival time: its queue's backlog behind `now`, never
    /// before the queue's newest frame.
    fn receive(&mut self, f: Vec<u8>, v: VirtioNetHdr, now: u64, out: &mut Vec<Packet>) {
        let q = self.queue_of(&f);
        let at = self.newest[q].max(now.saturating_sub(self.lag[q]));
        self.newest[q] = at;
        self.frames[q] += 1;
        let l = self.engines.queue(q);
        l.set_wall(now);
        l.receive(f, v, at, out);
    }

    /// As many queues as `n`; a queue that comes back starts a new timeline. Growing first
    /// flushes every engine: a tuple whose slot gets its queue back moves to it, and the
    /// daemon only resizes when it attaches a port, with nothing held.
    fn resize(&mut self, n: usize, now: u64, out: &mut Vec<Packet>) {
        if n > self.engines.len() {
            self.engines.flush_all(now, out);
        }
        self.engines.resize(n, now, out);
        self.newest.resize(n, 0);
        self.frames.resize(n, 0);
    }
}

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let queues = u.int_in_range(1..=MAX_QUEUES)?;
    let salt = u.arbitrary::<u64>()?;
    let mode0 = mode(u)?;
    let policy0 = policy(u)?;
    let max_flows = u.int_in_range(1..=4usize)?;
    // Flows 1 and 3 to a second guest: a full table then picks between two destinations.
    let two_guests = u.arbitrary::<bool>()?;
    let mut tx: Vec<Sender> = (0..4)
        .map(|i| -> Result<Sender> {
            let mss = match u.int_in_range(0..=4u8)? {
                0 => 100,
                1 => 536,
                2 => 1448,
                _ => u.int_in_range(1..=40usize)?,
            };
            Ok(Sender {
                v6: i >= 2,
                port: 1000 + i as u16,
                mss,
                seq: 0xffff_0000u32.wrapping_add(i as u32 * 77_777),
                ack: 1,
                ip_id: 0xfff0,
                salt: 0,
                ext: if i >= 2 {
                    chain(u.arbitrary()?)
                } else {
                    Vec::new()
                },
                dst_mac: if two_guests && i % 2 == 1 {
                    MAC_DST2
                } else {
                    MAC_DST
                },
            })
        })
        .collect::<Result<_>>()?;

    let cfg = Config {
        mode: mode0,
        policy: policy0,
        max_flows,
        // Below the table's size from two flows on, so a destination at its cap evicts its own
        // oldest (all four flows at one destination, or two at each): that path is fuzzed too.
        max_flows_per_dst: (max_flows - 1).max(1),
        ticks_per_us: 1,
    };
    let mut port = Port {
        engines: Queues::new(cfg, queues),
        newest: vec![0; queues],
        lag: [0; MAX_QUEUES],
        frames: vec![0; queues],
        salt,
    };
    let mut now = 0u64;
    let mut out = Vec::new();
    let mut inputs = Vec::new();
    let mut exact: BTreeMap<(Vec<u8>, [u8; 10]), i64> = BTreeMap::new();
    let mut steps = 0;
    while !u.is_empty() && steps < 400 {
        steps += 1;
        match u.int_in_range(0..=15u8)? {
            0..=6 => {
                let flow = u.int_in_range(0..=3usize)?;
                let kind = KINDS[u.int_in_range(0..=15usize)?];
                let meta = u.int_in_range(0..=2u8)?;
                let (f, v) = tx[flow].frame(kind, meta);
                if matches!(
                    kind,
                    Kind::BadChecksum | Kind::NotTcp | Kind::PureAck | Kind::Syn
                ) {
                    count(&mut exact, &f, &v, 1);
                }
                inputs.push(Packet::linear(v, f.clone()));
                port.receive(f, v, now, &mut out);
            }
            7 => {
                // A well-formed next segment with bytes flipped and maybe cut short.
                let flow = u.int_in_range(0..=3usize)?;
                let meta = u.int_in_range(0..=2u8)?;
                let (mut f, v) = tx[flow].frame(Kind::Next, meta);
                for _ in 0..u.int_in_range(1..=3u8)? {
                    let at = u.choose_index(f.len())?;
                    f[at] ^= u.int_in_range(1..=255u8)?;
                }
                if u.arbitrary::<bool>()? {
                    let n = u.int_in_range(0..=f.len())?;
                    f.truncate(n);
                }
                if pvnet_wire::parse_tcp(&f).is_err() {
                    count(&mut exact, &f, &v, 1);
                }
                inputs.push(Packet::linear(v, f.clone()));
                port.receive(f, v, now, &mut out);
            }
            8 => {
                // Raw bytes (an Ethernet header of the flows' MACs ahead half of the time).
                let n = u.int_in_range(0..=200usize)?;
                let mut f = Vec::new();
                if u.arbitrary::<bool>()? {
                    f.extend_from_slice(&MAC_DST);
                    f.extend_from_slice(&MAC_SRC);
                    f.extend_from_slice(if u.arbitrary()? {
                        &[0x86, 0xdd]
                    } else {
                        &[8, 0]
                    });
                }
                f.extend_from_slice(u.bytes(n.min(u.len()))?);
                let v = VirtioNetHdr {
                    flags: u.int_in_range(0..=3u8)?,
                    ..VirtioNetHdr::default()
                };
                if pvnet_wire::parse_tcp(&f).is_err() {
                    count(&mut exact, &f, &v, 1);
                }
                inputs.push(Packet::linear(v, f.clone()));
                port.receive(f, v, now, &mut out);
            }
            9 | 10 => {
                // The end of one queue's poll: at its newest frame's time (frames left
                // behind it) or at the daemon's clock (the queue emptied).
                let q = u.choose_index(port.engines.len())?;
                let end = if u.arbitrary::<bool>()? {
                    port.newest[q]
                } else {
                    now
                };
                let l = port.engines.queue(q);
                l.set_wall(now);
                l.end_poll(std::mem::take(&mut port.frames[q]), end, &mut out);
            }
            11 | 12 => now += u.int_in_range(0..=150u64)?,
            13 => port.engines.expire(now, &mut out),
            14 => match u.int_in_range(0..=5u8)? {
                0 => port.engines.set_policy(policy(u)?),
                1 => {
                    let m = mode(u)?;
                    port.engines.set_mode(m, now, &mut out)
                }
                2 => {
                    port.engines.detach_held();
                }
                3 => {
                    port.engines.detach_newest();
                }
                4 => {
                    let q = u.int_in_range(0..=MAX_QUEUES - 1)?;
                    port.lag[q] = u.int_in_range(0..=2 * u64::from(HOLD_LIMIT_US))?;
                }
                _ => {
                    let n = u.int_in_range(1..=MAX_QUEUES)?;
                    port.resize(n, now, &mut out);
                }
            },
            _ => now += u64::from(HOLD_LIMIT_US) * u.int_in_range(0..=3u64)?,
        }
        for q in 0..port.engines.len() {
            assert!(
                port.engines.queue(q).held() <= max_flows,
                "more flows held than allowed"
            );
        }
        if let Some(d) = port.engines.next_deadline() {
            assert!(
                d <= now + u64::from(HOLD_LIMIT_US),
                "deadline beyond the hold limit"
            );
        }
    }
    port.engines.flush_all(now, &mut out);
    assert_eq!(port.engines.held(), 0);
    assert_eq!(port.engines.next_deadline(), None);

    assert!(
        per_tuple(&out) == per_tuple(&inputs),
        "per-flow (seq, payload) out differs from in"
    );
    for p in &out {
        check_output(p);
        if !p.is_chained() {
            if let Some(c) = exact.get_mut(&(p.head.to_vec(), p.vnet.to_bytes())) {
                *c -= 1;
            }
        }
    }
    assert!(
        exact.values().all(|&c| c <= 0),
        "a refused frame came out changed"
    );
    let st = port.engines.stats();
    assert_eq!(st.frames_in as usize, inputs.len());
    assert_eq!(st.frames_in, st.segments_in + st.passthrough);
    assert_eq!((st.aggregates_out + st.passthrough) as usize, out.len());
    assert_eq!(st.flows, 0);
    assert_eq!(st.flush_latency.count, st.aggregates_out);
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
