//! One test per LRO merge rule: the aggregate breaks exactly there, that rule's counter moves by
//! one and no other, the bytes come out intact. Plus the shape of what leaves (GSO metadata,
//! header fix-ups, both representations, IPv4 and IPv6) checked against independent checksums,
//! and one crafted-frame test per case of the Linux GRO parity table in `lro/rules.rs`
//! (IPv6 extension header chains, the 65535-byte boundary, ...).

use crate::lro_common;

use lro_common::*;
use pvnet_dd::lro::{segment, Lro, LroStats, Mode, Policy, Reason, MAX_IP_PACKET, MAX_SEGS};
use pvnet_dd::packet::{Chain, Packet};
use pvnet_wire::flow::parse_tcp;
use pvnet_wire::vnet::{self, VirtioNetHdr};

const MODES: [Mode; 2] = [Mode::Skb, Mode::Page];

const POLICY_REASONS: [&str; 9] = [
    "poll",
    "every",
    "timeout",
    "adaptive",
    "hold_limit",
    "idle",
    "eviction",
    "reconfigure",
    "shutdown",
];

/// Names of the merge-rule counters that moved.
fn moved(st: &LroStats) -> Vec<&'static str> {
    Reason::ALL
        .iter()
        .filter(|r| st.flush.get(**r) > 0 && !POLICY_REASONS.contains(&r.name()))
        .map(|r| r.name())
        .collect()
}

fn dv() -> VirtioNetHdr {
    VirtioNetHdr {
        flags: vnet::F_DATA_VALID,
        ..VirtioNetHdr::default()
    }
}

/// `f` as the engine emits a lone segment whose checksum it verified.
fn lone(f: Vec<u8>) -> Packet {
    Packet::linear(dv(), f)
}

fn input_flows(frames: &[Vec<u8>]) -> std::collections::BTreeMap<Flow, Vec<(u32, Vec<u8>)>> {
    let pkts: Vec<Packet> = frames
        .iter()
        .map(|f| Packet::linear(no_vnet(), f.clone()))
        .collect();
    per_flow(&pkts)
}

fn gso_segs(p: &Packet) -> usize {
    assert_ne!(p.vnet.gso_type, vnet::GSO_NONE, "not a GSO packet: {p:?}");
    segment(p).unwrap().len()
}

/// s1, s2 of a stream, then s2's successor changed by `third`: s1+s2 leave as one GSO packet
/// when the third arrives, the third leaves alone at the end of the poll.
fn breaks_at(reason: Reason, v6s: &[bool], third: impl Fn(&mut Seg)) {
    breaks_at_with(reason, v6s, |_| {}, third)
}

/// [`breaks_at`] on a stream whose every segment is first changed by `base`.
fn breaks_at_with(reason: Reason, v6s: &[bool], base: impl Fn(&mut Seg), third: impl Fn(&mut Seg)) {
    for &mode in &MODES {
        for &v6 in v6s {
            let segs: Vec<Seg> = stream(v6, 1000, 1000, 3)
                .into_iter()
                .map(|s| s.with(&base))
                .collect();
            let s3 = segs[2].clone().with(&third);
            let frames = vec![segs[0].build(), segs[1].build(), s3.build()];
            let mut lro = engine(mode, Policy::Poll);
            let mut out = Vec::new();
            for (i, f) in frames.iter().enumerate() {
                lro.receive(f.clone(), no_vnet(), i as u64, &mut out);
            }
            assert_eq!(out.len(), 1, "{reason:?} {mode} v6={v6}");
            assert_eq!(gso_segs(&out[0]), 2);
            assert_eq!(lro.held(), 1);
            lro.end_poll(3, 3, &mut out);
            assert_eq!(out.len(), 2);
            assert_eq!(out[1], lone(frames[2].clone()));
            let st = lro.stats();
            assert_eq!(st.flush.get(reason), 1, "{reason:?}");
            assert_eq!(moved(&st), vec![reason.name()]);
            assert_eq!(per_flow(&out), input_flows(&frames));
            assert_eq!((st.segments_in, st.aggregates_out, st.gso_out), (3, 2, 1));
        }
    }
}

#[test]
fn eth_header() {
    breaks_at(Reason::EthHeader, &[false, true], |s| s.src_mac[5] = 0x0c);
}

#[test]
fn ttl() {
    breaks_at(Reason::Ttl, &[false, true], |s| s.ttl = 63);
}

#[test]
fn tos() {
    // A CE mark on the third segment (ECN bits count).
    breaks_at(Reason::Tos, &[false, true], |s| s.tos = 3);
}

#[test]
fn df() {
    breaks_at(Reason::Df, &[false], |s| s.df = false);
}

#[test]
fn ip_id() {
    breaks_at(Reason::IpId, &[false], |s| s.ip_id = 200);
}

#[test]
fn ip_id_fixed_with_df_merges_without_df_breaks() {
    for df in [true, false] {
        let segs: Vec<Vec<u8>> = stream(false, 1, 1000, 3)
            .into_iter()
            .map(|s| s.with(|s| (s.ip_id, s.df) = (9, df)).build())
            .collect();
        let mut lro = engine(Mode::Page, Policy::Poll);
        let mut out = Vec::new();
        for f in &segs {
            lro.receive(f.clone(), no_vnet(), 0, &mut out);
        }
        lro.end_poll(3, 0, &mut out);
        let st = lro.stats();
        if df {
            assert_eq!(out.len(), 1);
            assert_eq!(gso_segs(&out[0]), 3);
            assert!(moved(&st).is_empty());
        } else {
            assert_eq!(out.len(), 3);
            assert_eq!(st.flush.ip_id, 2);
        }
        assert_eq!(per_flow(&out), input_flows(&segs));
    }
}

#[test]
fn ip_id_step_is_kept() {
    // Incrementing from the second segment on: a repeated ID later breaks even with DF.
    let segs = stream(false, 1, 1000, 3);
    let s3 = segs[2].clone().with(|s| s.ip_id = 101);
    let frames = [segs[0].build(), segs[1].build(), s3.build()];
    let mut lro = engine(Mode::Page, Policy::Poll);
    let mut out = Vec::new();
    for f in &frames {
        lro.receive(f.clone(), no_vnet(), 0, &mut out);
    }
    assert_eq!(lro.stats().flush.ip_id, 1);
    assert_eq!(gso_segs(&out[0]), 2);
}

#[test]
fn tcp_options() {
    breaks_at(Reason::TcpOptions, &[false, true], |s| s.options[11] ^= 1);
}

#[test]
fn ack() {
    breaks_at(Reason::Ack, &[false, true], |s| s.ack += 1448);
}

#[test]
fn seq_gap() {
    breaks_at(Reason::Seq, &[false, true], |s| s.seq += 1);
}

#[test]
fn seq_duplicate() {
    breaks_at(Reason::Seq, &[false, true], |s| s.seq -= 1000);
}

#[test]
fn segment_size() {
    breaks_at(Reason::SegmentSize, &[false, true], |s| {
        s.payload = bytes(s.seq, 1001)
    });
}

#[test]
fn size_limit_64k() {
    for v6 in [false, true] {
        // IPv4: 20 + 32 + 45 × 1448 = 65212 fits, a 46th segment does not.
        let segs = stream(v6, 5, 1448, 46);
        let frames: Vec<Vec<u8>> = segs.iter().map(Seg::build).collect();
        let mut lro = engine(Mode::Skb, Policy::Poll);
        let mut out = Vec::new();
        for f in &frames {
            lro.receive(f.clone(), no_vnet(), 0, &mut out);
        }
        assert_eq!(out.len(), 1);
        assert_eq!(gso_segs(&out[0]), 45);
        let len_field = if v6 { 18 } else { 16 };
        let ip_len = u16::from_be_bytes([out[0].head[len_field], out[0].head[len_field + 1]]);
        assert_eq!(usize::from(ip_len), if v6 { 32 } else { 52 } + 45 * 1448);
        lro.end_poll(46, 0, &mut out);
        assert_eq!(out[1], lone(frames[45].clone()));
        let st = lro.stats();
        assert_eq!(moved(&st), vec!["size_limit"]);
        assert_eq!(st.flush.size_limit, 1);
        assert_eq!(per_flow(&out), input_flows(&frames));
    }
}

#[test]
fn size_limit_segment_count() {
    let frames: Vec<Vec<u8>> = stream(false, 5, 100, MAX_SEGS + 1)
        .iter()
        .map(Seg::build)
        .collect();
    let mut lro = engine(Mode::Page, Policy::Poll);
    let mut out = Vec::new();
    for f in &frames {
        lro.receive(f.clone(), no_vnet(), 0, &mut out);
    }
    assert_eq!(out.len(), 1);
    assert_eq!(gso_segs(&out[0]), MAX_SEGS);
    assert_eq!(out[0].frags.len(), MAX_SEGS);
    assert_eq!(lro.stats().flush.size_limit, 1);
}

/// s1, s2, then `bad` (with `vnet`), then s3: `bad` leaves exactly as it came. When it belongs
/// to the flow, s1+s2 leave before it and s3 starts anew; when it has no flow (does not parse),
/// the aggregate goes on through it.
fn refused(reason: Reason, bad: Vec<u8>, vnet: VirtioNetHdr, of_flow: bool) {
    refused_in(&stream(false, 1000, 1000, 3), reason, bad, vnet, of_flow)
}

/// [`refused`] with the stream `segs` (three segments) around `bad`.
fn refused_in(segs: &[Seg], reason: Reason, bad: Vec<u8>, vnet: VirtioNetHdr, of_flow: bool) {
    for &mode in &MODES {
        let mut lro = engine(mode, Policy::Poll);
        let mut out = Vec::new();
        lro.receive(segs[0].build(), no_vnet(), 0, &mut out);
        lro.receive(segs[1].build(), no_vnet(), 1, &mut out);
        lro.receive(bad.clone(), vnet, 2, &mut out);
        let exact = Packet::linear(vnet, bad.clone());
        if of_flow {
            assert_eq!(out.len(), 2, "{reason:?}");
            assert_eq!(gso_segs(&out[0]), 2);
            assert_eq!(out[1], exact);
        } else {
            assert_eq!(out, vec![exact], "{reason:?}");
        }
        lro.receive(segs[2].build(), no_vnet(), 3, &mut out);
        lro.end_poll(4, 4, &mut out);
        if of_flow {
            assert_eq!(out.len(), 3);
            assert_eq!(out[2], lone(segs[2].build()));
        } else {
            assert_eq!(out.len(), 2);
            assert_eq!(gso_segs(&out[1]), 3);
        }
        let st = lro.stats();
        assert_eq!(st.flush.get(reason), 1, "{reason:?}");
        assert_eq!(moved(&st), vec![reason.name()]);
        assert_eq!(st.passthrough, 1);
        assert_eq!(st.frames_in, st.segments_in + st.passthrough);
    }
}

fn s_bad() -> Seg {
    stream(false, 1000, 1000, 3)[2].clone()
}

#[test]
fn not_tcp_arp() {
    let mut arp = Vec::new();
    arp.extend_from_slice(&[0xff; 6]);
    arp.extend_from_slice(&MAC_SRC);
    arp.extend_from_slice(&[0x08, 0x06]);
    arp.extend_from_slice(&[0u8; 28]);
    arp.extend_from_slice(&[0u8; 4]);
    refused(Reason::NotTcp, arp, no_vnet(), false);
}

#[test]
fn not_tcp_udp() {
    let mut udp = s_bad().build();
    udp[14 + 9] = 17;
    refused(Reason::NotTcp, udp, no_vnet(), false);
}

#[test]
fn malformed_ip_length_past_frame() {
    let mut f = s_bad().build();
    f.truncate(f.len() - 1);
    refused(Reason::Malformed, f, no_vnet(), false);
}

#[test]
fn malformed_ihl_below_5() {
    let mut f = s_bad().build();
    f[14] = 0x44;
    refused(Reason::Malformed, f, no_vnet(), false);
}

#[test]
fn malformed_tcp_data_offset() {
    let mut f = s_bad().build();
    f[34 + 12] = 0x40;
    refused(Reason::Malformed, f.clone(), no_vnet(), false);
    let mut g = s_bad().with(|s| s.payload.clear()).build();
    g[34 + 12] = 0xf0; // 60-byte header in a 32-byte TCP segment
    refused(Reason::Malformed, g, no_vnet(), false);
}

#[test]
fn ip_fragment() {
    let f = s_bad().with(|s| s.more_frags = true).build();
    refused(Reason::IpFragment, f, no_vnet(), false);
}

#[test]
fn ipv6_ext_header() {
    // Fragment (44), AH (51), ESP (50), mobility (135): Linux GRO does not walk them
    // (`ipv6_gro_pull_exthdrs` stops; no TCP handler), directly or after one it walks.
    for kind in [44u8, 51, 50, 135] {
        for chain in [vec![ext(kind, 0, 0)], vec![ext(60, 0, 0), ext(kind, 0, 0)]] {
            let f = Seg::v6(1, b"x").with(|s| s.ip6_ext = chain).build();
            assert_eq!(parse_tcp(&f), Err(pvnet_wire::Error::Ipv6ExtHeader));
            refused(Reason::Ipv6ExtHeader, f, no_vnet(), false);
        }
    }
}

#[test]
fn ipv6_jumbogram_is_malformed() {
    // RFC 2675: payload length 0, the real length in a hop-by-hop option. `ipv6_gro_receive`
    // flushes it (payload length != packet length); here nothing follows the fixed header.
    let mut f = Seg::v6(1, b"x")
        .with(|s| s.ip6_ext = vec![ext(0, 0, 0)])
        .build();
    f[14 + 4..14 + 6].fill(0);
    f[54 + 2..54 + 8].copy_from_slice(&[0xc2, 4, 0, 0, 0, 0x31]);
    refused(Reason::Malformed, f, no_vnet(), false);
}

#[test]
fn ip_options() {
    let f = s_bad().with(|s| s.ip_options = vec![1, 1, 1, 0]).build();
    refused(Reason::IpOptions, f, no_vnet(), true);
}

#[test]
fn gso_input() {
    let f = s_bad().build();
    let v = VirtioNetHdr {
        gso_type: vnet::GSO_TCPV4,
        gso_size: 1000,
        ..dv()
    };
    refused(Reason::GsoInput, f, v, true);
}

#[test]
fn tcp_flags() {
    // SYN, RST, URG: never merged, never held (`tcp_gro_receive` flushes them at once).
    for flags in [ACK | SYN, ACK | RST, ACK | URG, SYN, RST, ACK | PSH | URG] {
        let f = s_bad().with(|s| s.flags = flags).build();
        refused(Reason::TcpFlags, f, no_vnet(), true);
    }
}

#[test]
fn no_payload() {
    let f = s_bad().with(|s| s.payload.clear()).build();
    refused(Reason::NoPayload, f, no_vnet(), true);
}

#[test]
fn bad_tcp_checksum() {
    let mut f = s_bad().build();
    f[34 + 16] ^= 0x01;
    refused(Reason::BadChecksum, f, no_vnet(), true);
    let mut g = Seg::v6(3000, b"abc").build();
    g[54 + 16] ^= 0x80;
    let mut lro = engine(Mode::Page, Policy::Poll);
    let mut out = Vec::new();
    lro.receive(g.clone(), no_vnet(), 0, &mut out);
    assert_eq!(out, vec![Packet::linear(no_vnet(), g)]);
    assert_eq!(lro.stats().flush.bad_checksum, 1);
}

#[test]
fn bad_ip_header_checksum() {
    let mut f = s_bad().build();
    f[14 + 10] ^= 0x01;
    // Even DATA_VALID (an L4 verdict) does not vouch for the IP header.
    refused(Reason::BadChecksum, f.clone(), no_vnet(), true);
    refused(Reason::BadChecksum, f, dv(), true);
}

#[test]
fn trusted_checksums_merge_unverified() {
    // DATA_VALID frames are not re-verified (a wrong check field merges and is rewritten).
    let frames: Vec<Vec<u8>> = stream(false, 1, 1000, 3)
        .iter()
        .map(|s| {
            let mut f = s.build();
            f[34 + 16] ^= 0x55;
            f
        })
        .collect();
    let mut lro = engine(Mode::Skb, Policy::Poll);
    let mut out = Vec::new();
    for f in &frames {
        lro.receive(f.clone(), dv(), 0, &mut out);
    }
    lro.end_poll(3, 0, &mut out);
    assert_eq!(out.len(), 1);
    assert!(tcp_csum_ok(&complete(&out[0])));
    assert!(moved(&lro.stats()).is_empty());
}

#[test]
fn psh_merges_then_ends() {
    for mode in MODES {
        let segs = stream(true, 9, 1000, 3);
        let s2 = segs[1].clone().with(|s| s.flags |= PSH);
        let mut lro = engine(mode, Policy::Poll);
        let mut out = Vec::new();
        lro.receive(segs[0].build(), no_vnet(), 0, &mut out);
        lro.receive(s2.build(), no_vnet(), 1, &mut out);
        assert_eq!(out.len(), 1, "left at once");
        assert_eq!(lro.held(), 0);
        assert_eq!(gso_segs(&out[0]), 2);
        assert_eq!(
            out[0].head[54 + 13],
            ACK | PSH,
            "PSH in the aggregate's header"
        );
        lro.receive(segs[2].build(), no_vnet(), 2, &mut out);
        lro.end_poll(3, 3, &mut out);
        assert_eq!(out[1], lone(segs[2].build()));
        let st = lro.stats();
        assert_eq!(moved(&st), vec!["psh"]);
        assert_eq!(st.flush.psh, 1);
    }
}

#[test]
fn lone_psh_leaves_at_once() {
    let f = Seg::v4(1, b"request").with(|s| s.flags |= PSH).build();
    let mut lro = engine(Mode::Page, Policy::Every(2));
    let mut out = Vec::new();
    lro.receive(f.clone(), no_vnet(), 0, &mut out);
    assert_eq!(out, vec![lone(f)]);
    assert_eq!(lro.held(), 0);
    assert_eq!(lro.next_deadline(), None);
    let st = lro.stats();
    assert_eq!((st.segments_in, st.aggregates_out, st.flush.psh), (1, 1, 1));
}

#[test]
fn short_segment() {
    for mode in MODES {
        let segs = stream(false, 9, 1000, 3);
        let s2 = segs[1].clone().with(|s| s.payload.truncate(300));
        let mut lro = engine(mode, Policy::Poll);
        let mut out = Vec::new();
        lro.receive(segs[0].build(), no_vnet(), 0, &mut out);
        lro.receive(s2.build(), no_vnet(), 1, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(lro.held(), 0);
        assert_eq!(
            out[0].vnet.gso_size, 1000,
            "gso_size is the first segment's"
        );
        assert_eq!(moved(&lro.stats()), vec!["short_segment"]);
        let expect = input_flows(&[segs[0].build(), s2.build()]);
        assert_eq!(per_flow(&out), expect);
    }
}

#[test]
fn ip_length_padded_frames_are_refused() {
    // 14 + 20 + 20 + 2 = 56 bytes: padded to 60. `inet_gro_receive` flushes a packet whose total
    // length is not the frame's, so it never merges, and its flow's aggregate leaves first.
    let mk = |seq: u32, id: u16| {
        Seg::v4(seq, &bytes(seq, 2)).with(|s| {
            s.options.clear();
            s.ip_id = id;
        })
    };
    let padded = mk(3000, 102).build();
    assert_eq!(padded.len(), 60);
    refused(Reason::IpLength, padded.clone(), no_vnet(), true);
    // Alone it leaves as it came, padding kept (no DATA_VALID: its checksum was not looked at).
    let mut lro = engine(Mode::Page, Policy::Poll);
    let mut out = Vec::new();
    lro.receive(padded.clone(), no_vnet(), 0, &mut out);
    assert_eq!(out, vec![Packet::linear(no_vnet(), padded)]);
    // Any trailer counts, on IPv6 too.
    let mut v6 = stream(true, 1000, 1000, 3)[2].build();
    v6.push(0);
    refused_in(
        &stream(true, 1000, 1000, 3),
        Reason::IpLength,
        v6,
        no_vnet(),
        true,
    );
}

#[test]
fn ip_reserved_bit() {
    // `inet_gro_receive`: any bit of the fragment word but DF flushes.
    let mut f = s_bad().build();
    f[14 + 6] |= 0x80;
    f[14 + 10..14 + 12].fill(0);
    let c = !slow_sum(&f[14..34]);
    f[14 + 10..14 + 12].copy_from_slice(&c.to_be_bytes());
    refused(Reason::IpReservedBit, f, no_vnet(), true);
}

#[test]
fn gso_packet_shape_and_checksums() {
    for mode in MODES {
        for v6 in [false, true] {
            let segs = stream(v6, 0xffff_f000, 1000, 5); // sequence numbers wrap
            let frames: Vec<Vec<u8>> = segs.iter().map(Seg::build).collect();
            let mut lro = engine(mode, Policy::Poll);
            let mut out = Vec::new();
            for f in &frames {
                lro.receive(f.clone(), no_vnet(), 0, &mut out);
            }
            lro.end_poll(5, 0, &mut out);
            assert_eq!(out.len(), 1);
            let p = &out[0];
            let (l4, hdr) = if v6 { (54, 86) } else { (34, 66) };
            assert_eq!(
                p.vnet,
                VirtioNetHdr {
                    flags: vnet::F_NEEDS_CSUM,
                    gso_type: if v6 { vnet::GSO_TCPV6 } else { vnet::GSO_TCPV4 },
                    hdr_len: hdr,
                    gso_size: 1000,
                    csum_start: l4,
                    csum_offset: 16,
                }
            );
            let hdr = usize::from(hdr);
            match mode {
                Mode::Skb => {
                    assert_eq!(p.chain, Chain::FragList);
                    assert_eq!(p.head.len(), hdr + 1000);
                    assert_eq!(p.frags.len(), 4);
                    for (fr, orig) in p.frags.iter().zip(&frames[1..]) {
                        assert_eq!(fr.start, hdr);
                        assert_eq!(&fr.buf, orig, "the receive buffer itself");
                    }
                }
                Mode::Page => {
                    assert_eq!(p.chain, Chain::PageFrags);
                    assert_eq!(p.head.len(), hdr, "headers only");
                    let l4 = usize::from(l4);
                    assert_eq!(p.head[..14], frames[0][..14]);
                    assert_eq!(p.head[l4..l4 + 12], frames[0][l4..l4 + 12]);
                    assert_eq!(p.frags.len(), 5);
                    for (fr, orig) in p.frags.iter().zip(&frames) {
                        assert_eq!((fr.start, fr.buf.as_slice()), (hdr, orig.as_slice()));
                    }
                }
            }
            let l4 = usize::from(l4);
            assert_eq!(&p.head[l4 + 14..l4 + 16], &501u16.to_be_bytes(), "window");
            assert!(ip_csum_ok(&p.head));
            // The check field holds the folded pseudo-header sum: completing it over the whole
            // packet gives a valid TCP checksum.
            let whole = complete(p);
            assert_eq!(whole.len(), hdr + 5000);
            assert!(tcp_csum_ok(&whole));
            let m = parse_tcp(&whole).unwrap();
            assert_eq!((m.seq, m.payload_len), (0xffff_f000, 5000));
            // And back: every segment valid on its own, IDs counting up, payloads as sent.
            let back = segment(p).unwrap();
            assert_eq!(back.len(), 5);
            for (i, (s, orig)) in back.iter().zip(&frames).enumerate() {
                assert_eq!(s.vnet.flags, vnet::F_DATA_VALID);
                assert_eq!(s.vnet.gso_type, vnet::GSO_NONE);
                assert!(ip_csum_ok(&s.head) && tcp_csum_ok(&s.head), "segment {i}");
                let (a, b) = (parse_tcp(&s.head).unwrap(), parse_tcp(orig).unwrap());
                assert_eq!(
                    (a.seq, a.ip_ident, a.payload_len),
                    (b.seq, b.ip_ident, 1000)
                );
                assert_eq!(s.head[hdr..], orig[hdr..]);
            }
            assert_eq!(per_flow(&out), input_flows(&frames));
        }
    }
}

#[test]
fn partial_checksums_merge_and_a_lone_one_keeps_its_metadata() {
    for v6 in [false, true] {
        let parts: Vec<(Vec<u8>, VirtioNetHdr)> = stream(v6, 1, 1000, 3)
            .iter()
            .map(Seg::build_partial)
            .collect();
        let mut lro = engine(Mode::Page, Policy::Poll);
        let mut out = Vec::new();
        for (f, v) in &parts {
            lro.receive(f.clone(), *v, 0, &mut out);
        }
        lro.end_poll(3, 0, &mut out);
        assert_eq!(out.len(), 1);
        assert!(tcp_csum_ok(&complete(&out[0])));
        lro.receive(parts[0].0.clone(), parts[0].1, 1, &mut out);
        lro.end_poll(1, 1, &mut out);
        assert_eq!(out[1], Packet::linear(parts[0].1, parts[0].0.clone()));
    }
}

#[test]
fn segment_sets_flags_per_position() {
    let mut segs = stream(false, 1, 1000, 3);
    segs[2].flags |= PSH;
    let mut lro = engine(Mode::Skb, Policy::Poll);
    let mut out = Vec::new();
    for s in &segs {
        lro.receive(s.build(), no_vnet(), 0, &mut out);
    }
    // Cut the 3000-byte aggregate at 700: PSH only on the last of 5, and mark CWR on the head
    // to see it kept only on the first.
    let mut p = out.pop().unwrap();
    p.vnet.gso_size = 700;
    p.head[34 + 13] |= CWR | FIN;
    let back = segment(&p).unwrap();
    assert_eq!(back.len(), 5);
    for (i, s) in back.iter().enumerate() {
        let m = parse_tcp(&s.head).unwrap();
        let expect = match i {
            0 => ACK | CWR,
            4 => ACK | PSH | FIN,
            _ => ACK,
        };
        assert_eq!(m.flags.bits(), expect, "segment {i}");
        assert_eq!(m.payload_len, if i == 4 { 200 } else { 700 });
        assert!(tcp_csum_ok(&s.head) && ip_csum_ok(&s.head));
    }
}

#[test]
fn segment_passes_non_gso_and_rejects_nonsense() {
    let p = Packet::linear(no_vnet(), vec![1, 2, 3]);
    assert_eq!(segment(&p).unwrap(), vec![p.clone()]);
    let mut g = Packet::linear(
        VirtioNetHdr {
            gso_type: vnet::GSO_TCPV6,
            gso_size: 100,
            ..no_vnet()
        },
        Seg::v4(1, &[0; 300]).build(),
    );
    assert!(segment(&g).is_err(), "TCPV6 on an IPv4 packet");
    g.vnet.gso_type = vnet::GSO_TCPV4;
    g.vnet.gso_size = 0;
    assert!(segment(&g).is_err());
    g.vnet.gso_type = vnet::GSO_UDP;
    assert!(segment(&g).is_err());
    g.vnet.gso_type = vnet::GSO_TCPV4;
    g.vnet.gso_size = 100;
    g.head.truncate(40);
    assert!(segment(&g).is_err());
}

#[test]
fn truncated_at_every_length_passes_through() {
    for v6 in [false, true] {
        let full = if v6 {
            Seg::v6(1, b"hello")
        } else {
            Seg::v4(1, b"hello")
        }
        .build();
        let mut lro: Lro = engine(Mode::Skb, Policy::Poll);
        let mut out = Vec::new();
        for n in 0..full.len() {
            lro.receive(full[..n].to_vec(), no_vnet(), 0, &mut out);
            assert_eq!(
                out.pop(),
                Some(Packet::linear(no_vnet(), full[..n].to_vec()))
            );
        }
        let st = lro.stats();
        assert_eq!(st.passthrough as usize, full.len());
        assert_eq!(st.flush.malformed + st.flush.not_tcp, full.len() as u64);
        assert_eq!(st.segments_in, 0);
    }
}

// ------------------------------------------------------------------ GRO parity

/// The extension header chains tested: each header Linux walks over alone, all three, and an
/// order RFC 8200 does not recommend (Linux does not check the order either).
fn chains() -> Vec<Vec<(u8, Vec<u8>)>> {
    vec![
        vec![ext(0, 0, 1)],
        vec![ext(43, 2, 2)],
        vec![ext(60, 1, 3)],
        vec![ext(0, 0, 4), ext(43, 2, 5), ext(60, 0, 6)],
        vec![ext(60, 0, 7), ext(43, 0, 8), ext(60, 1, 9)],
    ]
}

#[test]
fn ipv6_ext_headers_merge_and_resegment_byte_for_byte() {
    for mode in MODES {
        for chain in chains() {
            let ext_len: usize = chain.iter().map(|(_, h)| h.len()).sum();
            let segs: Vec<Seg> = stream(true, 0xffff_f800, 1000, 5)
                .into_iter()
                .map(|s| s.with(|s| s.ip6_ext = chain.clone()))
                .collect();
            let frames: Vec<Vec<u8>> = segs.iter().map(Seg::build).collect();
            let mut lro = engine(mode, Policy::Poll);
            let mut out = Vec::new();
            for f in &frames {
                lro.receive(f.clone(), no_vnet(), 0, &mut out);
            }
            lro.end_poll(5, 0, &mut out);
            assert_eq!(out.len(), 1, "{chain:?}");
            assert!(moved(&lro.stats()).is_empty());
            let p = &out[0];
            let (l4, hdr) = (54 + ext_len, 54 + ext_len + 32);
            assert_eq!(
                p.vnet,
                VirtioNetHdr {
                    flags: vnet::F_NEEDS_CSUM,
                    gso_type: vnet::GSO_TCPV6,
                    hdr_len: hdr as u16,
                    gso_size: 1000,
                    csum_start: l4 as u16,
                    csum_offset: 16,
                }
            );
            // The chain is the first segment's, the payload length covers it.
            assert_eq!(p.head[54..l4], frames[0][54..l4]);
            // Across the ring only the flags and the GSO size and type travel: the receiving
            // end finds the same checksum start and header length by walking the chain.
            let gso = pvnet_netif::slots::GsoInfo {
                size: 1000,
                gso_type: pvnet_netif::slots::XEN_NETIF_GSO_TYPE_TCPV6,
                features: 0,
            };
            let guest = pvnet_netif::csum::vnet_hdr_for(&p.head, true, true, Some(gso));
            assert_eq!(guest, Some(p.vnet), "{chain:?}");
            let plen = u16::from_be_bytes([p.head[18], p.head[19]]);
            assert_eq!(usize::from(plen), ext_len + 32 + 5000);
            let whole = complete(p);
            assert_eq!(whole.len(), hdr + 5000);
            assert!(tcp_csum_ok(&whole));
            let m = parse_tcp(&whole).unwrap();
            assert_eq!(
                (m.l4_off, m.payload_len, m.ip_packet_len()),
                (l4, 5000, 40 + usize::from(plen))
            );
            // Cut back: every segment is byte for byte the frame that went in.
            let back = segment(p).unwrap();
            assert_eq!(back.len(), 5);
            for (s, orig) in back.iter().zip(&frames) {
                assert_eq!(s.vnet.flags, vnet::F_DATA_VALID);
                assert_eq!(&s.head, orig);
            }
        }
    }
}

#[test]
fn ipv6_headers_flow_label() {
    breaks_at(Reason::Ipv6Headers, &[true], |s| s.flow_label = 0x12345);
}

#[test]
fn ipv6_headers_ext_added() {
    breaks_at(Reason::Ipv6Headers, &[true], |s| {
        s.ip6_ext = vec![ext(60, 0, 0)]
    });
}

#[test]
fn ipv6_headers_ext_removed() {
    let with = |s: &mut Seg| s.ip6_ext = vec![ext(0, 0, 0)];
    breaks_at_with(Reason::Ipv6Headers, &[true], with, |s| s.ip6_ext.clear());
}

#[test]
fn ipv6_headers_ext_bytes_differ() {
    // Same types and lengths, one byte different (Linux: memcmp of the chain).
    let chain = |s: &mut Seg| s.ip6_ext = vec![ext(0, 0, 1), ext(60, 1, 1)];
    breaks_at_with(Reason::Ipv6Headers, &[true], chain, |s| {
        s.ip6_ext[1].1[10] ^= 0x40
    });
    // A routing header where a destination options header was (same bytes otherwise).
    breaks_at_with(Reason::Ipv6Headers, &[true], chain, |s| s.ip6_ext[1].0 = 43);
}

#[test]
fn ipv6_ext_headers_keep_every_other_rule() {
    // With a chain, the other match rules still break where they should.
    let chain = |s: &mut Seg| s.ip6_ext = vec![ext(0, 0, 1), ext(43, 2, 2)];
    breaks_at_with(Reason::Seq, &[true], chain, |s| s.seq += 1);
    breaks_at_with(Reason::Ttl, &[true], chain, |s| s.ttl = 1);
    breaks_at_with(Reason::TcpOptions, &[true], chain, |s| s.options[11] ^= 1);
}

#[test]
fn cwr() {
    // `tcp_gro_receive`: CWR on the new segment flushes; it starts an aggregate of its own.
    breaks_at(Reason::Cwr, &[false, true], |s| s.flags |= CWR);
}

#[test]
fn cwr_segment_is_held_alone() {
    // The CWR segment heads an aggregate nothing joins: the next one differs in its flags.
    let segs = stream(false, 1, 1000, 3);
    let s1 = segs[0].clone().with(|s| s.flags |= CWR);
    let frames = [s1.build(), segs[1].build(), segs[2].build()];
    let mut lro = engine(Mode::Page, Policy::Poll);
    let mut out = Vec::new();
    lro.receive(frames[0].clone(), no_vnet(), 0, &mut out);
    assert_eq!((out.len(), lro.held()), (0, 1), "held, not refused");
    lro.receive(frames[1].clone(), no_vnet(), 0, &mut out);
    lro.receive(frames[2].clone(), no_vnet(), 0, &mut out);
    lro.end_poll(3, 0, &mut out);
    assert_eq!(out[0], lone(frames[0].clone()));
    assert_eq!(gso_segs(&out[1]), 2);
    assert_eq!(moved(&lro.stats()), vec!["flags_differ"]);
    assert_eq!(per_flow(&out), input_flows(&frames));
}

#[test]
fn flags_differ_ece() {
    breaks_at(Reason::FlagsDiffer, &[false, true], |s| s.flags |= ECE);
}

#[test]
fn flags_differ_no_ack() {
    breaks_at(Reason::FlagsDiffer, &[false, true], |s| s.flags = 0);
}

#[test]
fn flags_differ_reserved_bits() {
    // The AE bit (RFC 9768) and the other reserved bits are part of the compared flag word.
    breaks_at(Reason::FlagsDiffer, &[false, true], |s| s.tcp_reserved = 1);
    breaks_at(Reason::FlagsDiffer, &[false], |s| s.tcp_reserved = 8);
}

#[test]
fn equal_unusual_flags_merge() {
    // ECE on every segment, AE on every segment, no ACK on any: the flag words are equal,
    // so they merge as Linux merges them, and every segment gets its flags back.
    for (flags, res) in [(ACK | ECE, 0), (ACK, 1), (0, 0)] {
        let frames: Vec<Vec<u8>> = stream(true, 1, 1000, 3)
            .into_iter()
            .map(|s| s.with(|s| (s.flags, s.tcp_reserved) = (flags, res)).build())
            .collect();
        let mut lro = engine(Mode::Skb, Policy::Poll);
        let mut out = Vec::new();
        for f in &frames {
            lro.receive(f.clone(), no_vnet(), 0, &mut out);
        }
        lro.end_poll(3, 0, &mut out);
        assert_eq!(out.len(), 1);
        assert!(moved(&lro.stats()).is_empty());
        for (s, orig) in segment(&out[0]).unwrap().iter().zip(&frames) {
            assert_eq!(&s.head, orig);
        }
    }
}

#[test]
fn window() {
    // The window is in the flag word `tcp_gro_receive` compares.
    breaks_at(Reason::Window, &[false, true], |s| s.window = 777);
}

#[test]
fn fin_merges_then_ends() {
    for mode in MODES {
        for v6 in [false, true] {
            let segs = stream(v6, 9, 1000, 3);
            let s2 = segs[1].clone().with(|s| s.flags |= FIN);
            let mut lro = engine(mode, Policy::Poll);
            let mut out = Vec::new();
            lro.receive(segs[0].build(), no_vnet(), 0, &mut out);
            lro.receive(s2.build(), no_vnet(), 1, &mut out);
            assert_eq!((out.len(), lro.held()), (1, 0), "left at once");
            let l4 = if v6 { 54 } else { 34 };
            assert_eq!(
                out[0].head[l4 + 13],
                ACK | FIN,
                "FIN in the aggregate's header"
            );
            let back = segment(&out[0]).unwrap();
            assert_eq!(back[0].head, segs[0].build(), "FIN only on the last");
            assert_eq!(back[1].head, s2.build());
            assert_eq!(moved(&lro.stats()), vec!["fin"]);
        }
    }
}

#[test]
fn lone_fin_leaves_at_once_and_pure_fin_is_refused() {
    let f = Seg::v4(1, b"bye").with(|s| s.flags |= FIN).build();
    let mut lro = engine(Mode::Page, Policy::Every(2));
    let mut out = Vec::new();
    lro.receive(f.clone(), no_vnet(), 0, &mut out);
    assert_eq!(out, vec![lone(f)]);
    assert_eq!((lro.held(), lro.stats().flush.fin), (0, 1));
    // FIN without data: `(len - 1) >= mss` flushes it like any empty segment.
    let g = s_bad()
        .with(|s| (s.flags, s.payload) = (ACK | FIN, Vec::new()))
        .build();
    refused(Reason::NoPayload, g, no_vnet(), true);
}

#[test]
fn needs_csum_before_the_tcp_header_is_verified() {
    // CHECKSUM_PARTIAL is trusted only from the transport header on
    // (`__skb_gro_checksum_validate_needed`); before it, the field (a seed) does not verify.
    let (f, mut v) = s_bad().build_partial();
    v.csum_start = 14;
    v.csum_offset = 20 + 16;
    refused(Reason::BadChecksum, f, v, true);
}

/// Segments whose aggregate IP packet is exactly `total` bytes: headers `hdr` (IP + extension
/// headers + TCP), then payloads of `mss` and one shorter last one.
fn to_size(base: &Seg, hdr: usize, total: usize) -> (Vec<Seg>, usize) {
    let payload = total - hdr;
    let mss = (1300..=1448)
        .rev()
        .find(|m| !payload.is_multiple_of(*m) && payload / m < MAX_SEGS && payload % m + 1 < *m)
        .expect("some mss fits");
    let mut segs = Vec::new();
    let mut seq = 77u32;
    let mut left = payload;
    while left > 0 {
        let n = left.min(mss);
        segs.push(base.clone().with(|s| {
            s.seq = seq;
            s.payload = bytes(seq, n);
            s.ip_id = 100 + segs.len() as u16;
        }));
        seq += n as u32;
        left -= n;
    }
    (segs, mss)
}

#[test]
fn size_limit_exact_boundary() {
    // `skb_gro_receive` refuses `p->len + len >= gro_max_size` (65536 by default): the largest
    // aggregate is a 65535-byte IP packet, whatever the headers, IPv4 and IPv6 alike.
    assert_eq!(MAX_IP_PACKET, 65535);
    let bases = [
        (Seg::v4(0, b""), 20 + 32),
        (Seg::v4(0, b"").with(|s| s.options.clear()), 20 + 20),
        (Seg::v6(0, b""), 40 + 32),
        (
            Seg::v6(0, b"").with(|s| s.ip6_ext = vec![ext(0, 0, 1), ext(60, 3, 2)]),
            40 + 40 + 32,
        ),
    ];
    for (base, hdr) in bases {
        for mode in MODES {
            // Exactly 65535: everything merges (the short last segment ends it).
            let (segs, mss) = to_size(&base, hdr, 65535);
            let frames: Vec<Vec<u8>> = segs.iter().map(Seg::build).collect();
            let mut lro = engine(mode, Policy::Poll);
            let mut out = Vec::new();
            for f in &frames {
                lro.receive(f.clone(), no_vnet(), 0, &mut out);
            }
            assert_eq!(out.len(), 1, "hdr {hdr} mss {mss}");
            assert_eq!(out[0].len() - 14, 65535, "the IP packet");
            let len = u16::from_be_bytes([out[0].head[16], out[0].head[17]]);
            let len = if base.v6 {
                usize::from(u16::from_be_bytes([out[0].head[18], out[0].head[19]])) + 40
            } else {
                usize::from(len)
            };
            assert_eq!(len, 65535, "the IP length field");
            assert!(tcp_csum_ok(&complete(&out[0])));
            assert_eq!(moved(&lro.stats()), vec!["short_segment"]);
            assert_eq!(per_flow(&out), input_flows(&frames));

            // One byte more: the last segment does not fit, it starts a new aggregate.
            let (mut segs, _) = to_size(&base, hdr, 65535);
            let last = segs.last_mut().unwrap();
            last.payload.push(0xee);
            let frames: Vec<Vec<u8>> = segs.iter().map(Seg::build).collect();
            let mut lro = engine(mode, Policy::Poll);
            let mut out = Vec::new();
            for f in &frames {
                lro.receive(f.clone(), no_vnet(), 0, &mut out);
            }
            lro.end_poll(frames.len(), 0, &mut out);
            assert_eq!(out.len(), 2);
            assert_eq!(
                out[0].len() - 14,
                65535 - (frames.last().unwrap().len() - 14 - hdr) + 1
            );
            assert_eq!(gso_segs(&out[0]), frames.len() - 1);
            assert_eq!(out[1], lone(frames.last().unwrap().clone()));
            assert_eq!(moved(&lro.stats()), vec!["size_limit"]);
            assert_eq!(per_flow(&out), input_flows(&frames));
        }
    }
}
