//! The LRO engine (`pvnet_dd::lro`) driven by fuzz-chosen event sequences: frames of four
//! flows (two IPv4, two IPv6 with extension header chains) that are next in sequence, short,
//! duplicated, out of order, pure ACKs, SYNs, with bad checksums, not TCP, with a changed ACK,
//! MAC, TTL, window, extension header, FIN or CWR; well-formed frames with fuzz-chosen bytes
//! flipped or cut; frames of raw fuzz bytes; with receive metadata none / DATA_VALID / partial
//! checksum; interleaved with `end_poll`, clock steps, `expire`, policy and mode changes and
//! buffer detaches.
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

use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use lro_common::*;
use pvnet_dd::lro::{Config, Lro, Mode, Policy, HOLD_LIMIT_US};
use pvnet_dd::packet::Packet;
use pvnet_wire::vnet::{self, VirtioNetHdr};

#[derive(Clone, Copy, Debug)]
enum Kind {
    Next,
    NextPsh,
    Short,
    Dup,
    Gap,
    PureAck,
    Syn,
    BadChecksum,
    NotTcp,
    NewAck,
    OtherMac,
    OtherTtl,
    OtherExt,
    NextFin,
    NextCwr,
    OtherWindow,
}

const KINDS: [Kind; 16] = [
    Kind::Next,
    Kind::NextPsh,
    Kind::Short,
    Kind::Dup,
    Kind::Gap,
    Kind::PureAck,
    Kind::Syn,
    Kind::BadChecksum,
    Kind::NotTcp,
    Kind::NewAck,
    Kind::OtherMac,
    Kind::OtherTtl,
    Kind::OtherExt,
    Kind::NextFin,
    Kind::NextCwr,
    Kind::OtherWindow,
];

/// Sender state of one flow (as in `lro_prop.rs`).
struct Sender {
    v6: bool,
    port: u16,
    mss: usize,
    seq: u32,
    ack: u32,
    ip_id: u16,
    salt: u32,
    ext: Vec<(u8, Vec<u8>)>,
}

impl Sender {
    fn seg(&mut self, seq: u32, n: usize) -> Seg {
        self.salt += 1;
        self.ip_id = self.ip_id.wrapping_add(1);
        let p = bytes(seq ^ (self.salt << 20), n);
        let s = if self.v6 {
            Seg::v6(seq, &p)
        } else {
            Seg::v4(seq, &p)
        };
        s.with(|s| {
            s.src_port = self.port;
            s.ack = self.ack;
            s.ip_id = self.ip_id;
            if self.v6 {
                s.ip6_ext = self.ext.clone();
            }
        })
    }

    fn next(&mut self, n: usize) -> Seg {
        let s = self.seg(self.seq, n);
        self.seq = self.seq.wrapping_add(n as u32);
        s
    }

    fn frame(&mut self, kind: Kind, meta: u8) -> (Vec<u8>, VirtioNetHdr) {
        let mss = self.mss;
        let seg = match kind {
            Kind::Next | Kind::BadChecksum => self.next(mss),
            Kind::NextPsh => self.next(mss).with(|s| s.flags |= PSH),
            Kind::Short => self.next(mss / 2 + 1),
            Kind::Dup => self.seg(self.seq.wrapping_sub(mss as u32), mss),
            Kind::Gap => {
                self.seq = self.seq.wrapping_add(mss as u32);
                self.next(mss)
            }
            Kind::PureAck => self.seg(self.seq, 0),
            Kind::Syn => self.seg(self.seq, 0).with(|s| s.flags = SYN | ACK),
            Kind::NotTcp => {
                let mut f = self.next(mss).build();
                let proto = if self.v6 { 14 + 6 } else { 14 + 9 };
                f[proto] = 17;
                return (f, VirtioNetHdr::default());
            }
            Kind::NewAck => {
                self.ack = self.ack.wrapping_add(1000);
                self.next(mss)
            }
            Kind::OtherMac => self.next(mss).with(|s| s.src_mac[5] ^= 0x40),
            Kind::OtherTtl => self.next(mss).with(|s| s.ttl = 1),
            Kind::OtherExt if self.v6 => self.next(mss).with(|s| {
                if s.ip6_ext.is_empty() {
                    s.ip6_ext.push(ext(60, 0, 0));
                } else {
                    s.ip6_ext[0].1[7] ^= 0x11;
                }
            }),
            Kind::OtherExt | Kind::OtherWindow => self.next(mss).with(|s| s.window ^= 0x100),
            Kind::NextFin => self.next(mss).with(|s| s.flags |= FIN),
            Kind::NextCwr => self.next(mss).with(|s| s.flags |= CWR),
        };
        if let Kind::BadChecksum = kind {
            let mut f = seg.build();
            let at = seg.payload_off() - 20 - seg.options.len() + 16;
            f[at] ^= 0x5a;
            return (f, VirtioNetHdr::default());
        }
        match meta {
            1 => (
                seg.build(),
                VirtioNetHdr {
                    flags: vnet::F_DATA_VALID,
                    ..VirtioNetHdr::default()
                },
            ),
            2 => seg.build_partial(),
            _ => (seg.build(), VirtioNetHdr::default()),
        }
    }
}

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

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let mode0 = mode(u)?;
    let policy0 = policy(u)?;
    let max_flows = u.int_in_range(1..=4usize)?;
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
            })
        })
        .collect::<Result<_>>()?;

    let mut lro = Lro::new(Config {
        mode: mode0,
        policy: policy0,
        max_flows,
        ticks_per_us: 1,
    });
    let mut now = 0u64;
    let mut out = Vec::new();
    let mut inputs = Vec::new();
    let mut exact: BTreeMap<(Vec<u8>, [u8; 10]), i64> = BTreeMap::new();
    let mut frames = 0;
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
                lro.receive(f, v, now, &mut out);
                frames += 1;
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
                lro.receive(f, v, now, &mut out);
                frames += 1;
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
                lro.receive(f, v, now, &mut out);
                frames += 1;
            }
            9 | 10 => {
                lro.end_poll(frames, now, &mut out);
                frames = 0;
            }
            11 | 12 => now += u.int_in_range(0..=150u64)?,
            13 => lro.expire(now, &mut out),
            14 => match u.int_in_range(0..=3u8)? {
                0 => lro.set_policy(policy(u)?),
                1 => {
                    let m = mode(u)?;
                    lro.set_mode(m, now, &mut out)
                }
                2 => {
                    lro.detach_held();
                }
                _ => {
                    lro.detach_newest();
                }
            },
            _ => now += u64::from(HOLD_LIMIT_US) * u.int_in_range(0..=3u64)?,
        }
        assert!(lro.held() <= max_flows, "more flows held than allowed");
        if let Some(d) = lro.next_deadline() {
            assert!(
                d <= now + u64::from(HOLD_LIMIT_US),
                "deadline beyond the hold limit"
            );
        }
    }
    lro.flush_all(now, &mut out);
    assert_eq!(lro.held(), 0);
    assert_eq!(lro.next_deadline(), None);

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
    let st = lro.stats();
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
