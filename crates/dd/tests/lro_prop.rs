//! Property tests of the LRO engine: whatever goes in (several flows interleaved, duplicates,
//! gaps, reordering, non-mergeable frames, random poll boundaries, clock, policy and mode),
//! every flow's (seq, payload) sequence comes out exactly as it went in, once GSO packets are cut
//! back with `segment()`; refused frames come out byte for byte; nothing stays held. IPv6 flows
//! may carry extension header chains. And no input, however malformed, makes it panic or gets
//! merged.

use crate::lro_common;

use std::collections::BTreeMap;

use lro_common::*;
use proptest::prelude::*;
use pvnet_dd::lro::{Config, Lro, Mode, Policy, HOLD_LIMIT_US};
use pvnet_dd::packet::Packet;
use pvnet_wire::flow::parse_tcp;
use pvnet_wire::vnet::{self, VirtioNetHdr};

#[derive(Clone, Debug)]
enum Ev {
    /// A frame of flow `flow` with receive metadata `meta` (0 none, 1 DATA_VALID, 2 partial).
    Frame {
        flow: usize,
        kind: Kind,
        meta: u8,
    },
    EndPoll,
    Advance(u64),
    Expire,
    SetPolicy(Policy),
    SetMode(Mode),
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        12 => Just(Kind::Next),
        2 => Just(Kind::NextPsh),
        2 => Just(Kind::Short),
        1 => Just(Kind::Dup),
        1 => Just(Kind::Gap),
        2 => Just(Kind::PureAck),
        1 => Just(Kind::Syn),
        1 => Just(Kind::BadChecksum),
        1 => Just(Kind::NotTcp),
        1 => Just(Kind::NewAck),
        1 => Just(Kind::OtherMac),
        1 => Just(Kind::OtherTtl),
        1 => Just(Kind::OtherExt),
        1 => Just(Kind::NextFin),
        1 => Just(Kind::NextCwr),
        1 => Just(Kind::OtherWindow),
    ]
}

fn policy() -> impl Strategy<Value = Policy> {
    prop_oneof![
        Just(Policy::Poll),
        (1u32..4).prop_map(Policy::Every),
        (1u32..300).prop_map(|us| Policy::Timeout { us }),
        Just(Policy::Adaptive),
    ]
}

fn mode() -> impl Strategy<Value = Mode> {
    prop_oneof![Just(Mode::Skb), Just(Mode::Page)]
}

fn event() -> impl Strategy<Value = Ev> {
    prop_oneof![
        30 => (0usize..4, kind(), 0u8..3).prop_map(|(flow, kind, meta)| Ev::Frame { flow, kind, meta }),
        6 => Just(Ev::EndPoll),
        6 => (0u64..120).prop_map(Ev::Advance),
        2 => Just(Ev::Expire),
        1 => policy().prop_map(Ev::SetPolicy),
        1 => mode().prop_map(Ev::SetMode),
    ]
}

/// IPv6 extension header chains a flow may carry on all its segments.
fn chain(i: u8) -> Vec<(u8, Vec<u8>)> {
    match i {
        0 => Vec::new(),
        1 => vec![ext(0, 0, 1)],
        _ => vec![ext(0, 0, 2), ext(43, 2, 3), ext(60, 1, 4)],
    }
}

/// Four flows; with `two_guests`, flows 1 and 3 go to a second destination.
fn senders(mss: [usize; 4], chains: [u8; 2], two_guests: bool) -> Vec<Sender> {
    (0..4)
        .map(|i| Sender {
            v6: i >= 2,
            port: 1000 + i as u16,
            mss: mss[i],
            seq: 0xffff_0000u32.wrapping_add(i as u32 * 77_777), // some wrap
            ack: 1,
            ip_id: 0xfff0,
            salt: 0,
            ext: chain(if i >= 2 { chains[i - 2] } else { 0 }),
            dst_mac: if two_guests && i % 2 == 1 {
                MAC_DST2
            } else {
                MAC_DST
            },
        })
        .collect()
}

/// Exact packets expected to come out unchanged, as a multiset.
fn count(m: &mut BTreeMap<(Vec<u8>, [u8; 10]), i64>, f: &[u8], v: &VirtioNetHdr, d: i64) {
    *m.entry((f.to_vec(), v.to_bytes())).or_default() += d;
}

fn check_output(p: &Packet) -> Result<(), TestCaseError> {
    if p.vnet.gso_type != vnet::GSO_NONE {
        prop_assert!(p.vnet.needs_csum());
        prop_assert!(ip_csum_ok(&p.head));
        prop_assert!(tcp_csum_ok(&complete(p)), "partial checksum completes");
        for s in pvnet_dd::lro::segment(p).unwrap() {
            prop_assert!(ip_csum_ok(&s.head) && tcp_csum_ok(&s.head));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn nothing_lost_duplicated_or_reordered(
        events in proptest::collection::vec(event(), 1..250),
        mss in proptest::array::uniform4(prop_oneof![Just(100usize), Just(536), Just(1448), 1usize..40]),
        policy in policy(),
        mode in mode(),
        max_flows in 1usize..5,
        // With one destination for the four flows, a cap below max_flows evicts first; with
        // two, a full table gives up the larger holder's oldest.
        per_dst in 1usize..5,
        chains in proptest::array::uniform2(0u8..3),
        two_guests in any::<bool>(),
    ) {
        let mut lro = Lro::new(Config { mode, policy, max_flows, max_flows_per_dst: per_dst, ticks_per_us: 1 });
        let mut tx = senders(mss, chains, two_guests);
        let dsts = if two_guests { 2 } else { 1 };
        let mut now = 0u64;
        let mut out = Vec::new();
        let mut inputs = Vec::new();
        let mut exact: BTreeMap<(Vec<u8>, [u8; 10]), i64> = BTreeMap::new();
        let mut frames = 0;
        for ev in events {
            match ev {
                Ev::Frame { flow, kind, meta } => {
                    let (f, v) = tx[flow].frame(kind, meta);
                    if matches!(kind, Kind::BadChecksum | Kind::NotTcp | Kind::PureAck | Kind::Syn) {
                        count(&mut exact, &f, &v, 1);
                    }
                    inputs.push(Packet::linear(v, f.clone()));
                    lro.receive(f, v, now, &mut out);
                    frames += 1;
                }
                Ev::EndPoll => {
                    lro.end_poll(frames, now, &mut out);
                    frames = 0;
                }
                Ev::Advance(us) => now += us,
                Ev::Expire => lro.expire(now, &mut out),
                Ev::SetPolicy(p) => lro.set_policy(p),
                Ev::SetMode(m) => lro.set_mode(m, now, &mut out),
            }
            prop_assert!(lro.held() <= max_flows);
            // No destination holds more than its cap.
            prop_assert!(lro.held() <= per_dst * dsts);
            if let Some(d) = lro.next_deadline() {
                prop_assert!(d <= now + u64::from(HOLD_LIMIT_US));
            }
        }
        lro.flush_all(now, &mut out);
        prop_assert_eq!(lro.held(), 0);
        prop_assert_eq!(lro.next_deadline(), None);

        prop_assert_eq!(per_tuple(&out), per_tuple(&inputs));
        for p in &out {
            check_output(p)?;
            if !p.is_chained() {
                if let Some(c) = exact.get_mut(&(p.head.to_vec(), p.vnet.to_bytes())) {
                    *c -= 1;
                }
            }
        }
        prop_assert!(exact.values().all(|&c| c <= 0), "refused frames came out changed");
        let st = lro.stats();
        prop_assert_eq!(st.frames_in as usize, inputs.len());
        prop_assert_eq!(st.frames_in, st.segments_in + st.passthrough);
        prop_assert_eq!((st.aggregates_out + st.passthrough) as usize, out.len());
        prop_assert_eq!(st.flows, 0);
        prop_assert_eq!(st.flush_latency.count, st.aggregates_out);
    }

    #[test]
    fn random_bytes_never_panic_and_pass_through(
        f in proptest::collection::vec(any::<u8>(), 0..160),
        flags in 0u8..4,
        gso in prop_oneof![Just(0u8), Just(1), Just(4)],
    ) {
        let v = VirtioNetHdr { flags, gso_type: gso, gso_size: 100, ..VirtioNetHdr::default() };
        let mut lro = engine(Mode::Skb, Policy::Every(2));
        let mut out = Vec::new();
        lro.receive(f.clone(), v, 0, &mut out);
        lro.end_poll(1, 0, &mut out);
        lro.flush_all(0, &mut out);
        prop_assert_eq!(out.len(), 1);
        prop_assert_eq!(&out[0].head, &f);
        prop_assert!(!out[0].is_chained());
        prop_assert_eq!(out[0].vnet.flags & !vnet::F_DATA_VALID, v.flags & !vnet::F_DATA_VALID);
    }

    #[test]
    fn random_ipv4_ipv6_headers_never_panic(
        v6 in any::<bool>(),
        hdr in proptest::collection::vec(any::<u8>(), 60..100),
        tail in 0usize..100,
    ) {
        // Ethernet + a random "IP header" with the right ethertype and version nibble.
        let mut f = Seg::v4(1, b"").build()[..12].to_vec();
        f.extend_from_slice(if v6 { &[0x86, 0xdd] } else { &[0x08, 0x00] });
        let mut h = hdr;
        h[0] = (h[0] & 0x0f) | if v6 { 0x60 } else { 0x40 };
        if v6 { h[6] = 6 } else { h[9] = 6 }
        f.extend_from_slice(&h);
        f.extend(std::iter::repeat_n(0xaa, tail));
        let mut lro = engine(Mode::Page, Policy::Poll);
        let mut out = Vec::new();
        for _ in 0..3 {
            lro.receive(f.clone(), VirtioNetHdr::default(), 0, &mut out);
        }
        lro.end_poll(3, 0, &mut out);
        prop_assert_eq!(out.len(), 3);
        for p in &out {
            prop_assert_eq!(&p.head, &f);
        }
    }

    #[test]
    fn mutated_segments_are_never_merged_unless_valid(
        v6 in any::<bool>(),
        mode in mode(),
        muts in proptest::collection::vec((0usize..200, 1u8..=255), 1..4),
        cut in proptest::option::of(0usize..200),
        chained in any::<bool>(),
    ) {
        // IPv6 segments may carry a chain of the extension headers that are walked over, so
        // that mutations land in it too.
        let segs: Vec<Seg> = stream(v6, 5000, 120, 4)
            .into_iter()
            .map(|s| s.with(|s| if v6 && chained { s.ip6_ext = vec![ext(0, 0, 1), ext(60, 1, 2)] }))
            .collect();
        let mut bad = segs[1].build();
        for (at, x) in muts {
            let n = bad.len();
            bad[at % n] ^= x;
        }
        if let Some(c) = cut {
            bad.truncate(c.min(bad.len()));
        }
        let valid = parse_tcp(&bad).is_ok() && ip_csum_ok(&bad) && tcp_csum_ok(&bad);
        let frames = [segs[0].build(), bad.clone(), segs[2].build(), segs[3].build()];
        let mut lro = engine(mode, Policy::Poll);
        let mut out = Vec::new();
        for f in &frames {
            lro.receive(f.clone(), VirtioNetHdr::default(), 0, &mut out);
        }
        lro.end_poll(4, 0, &mut out);
        let inputs: Vec<Packet> = frames.iter().map(|f| Packet::linear(VirtioNetHdr::default(), f.clone())).collect();
        prop_assert_eq!(per_tuple(&out), per_tuple(&inputs));
        if !valid {
            prop_assert!(
                out.iter().any(|p| p.head == bad && !p.is_chained() && p.vnet == VirtioNetHdr::default()),
                "an invalid frame passes through unchanged"
            );
        }
        for p in &out {
            check_output(p)?;
        }
    }
}
