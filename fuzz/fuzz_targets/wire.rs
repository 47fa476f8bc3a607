//! `pvnet-wire` on arbitrary bytes: the Ethernet, IPv4, IPv6 and TCP views, `flow::parse_tcp`,
//! the Internet checksum, `complete_partial`, `VirtioNetHdr` and `MacAddr`.
//!
//! Invariants (beyond "no panic"):
//! - once `new_checked` succeeds, every getter works and the lengths it reports are the ones
//!   `check_len` promised (payload = total length − header length, options inside the header);
//! - setter then getter gives back the value set, and writing back the old values restores the
//!   buffer byte for byte (the fields' emit/parse round trip);
//! - `parse_tcp` agrees with the views it is built from: every offset inside the frame and in
//!   order, every field equal to what the IPv4/IPv6 and TCP views read at those offsets;
//! - the fast checksum equals the slow RFC 1071 reference (`fixtures::slow_sum`);
//!   `fill_checksum` makes `verify_checksum` true; `complete_partial` writes only its two
//!   bytes, and nothing when it refuses;
//! - `VirtioNetHdr::parse`/`to_bytes` and `MacAddr` `Display`/`FromStr` round trip.

#![no_main]

use libfuzzer_sys::fuzz_target;
use pvnet_wire::checksum::{self, complete_partial, fold, sum};
use pvnet_wire::ethernet::{self, ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use pvnet_wire::fixtures::slow_sum;
use pvnet_wire::flow::parse_tcp;
use pvnet_wire::tcp::{self, TcpOptionIter};
use pvnet_wire::vnet::{VirtioNetHdr, VNET_HDR_LEN};
use pvnet_wire::{ipv4, ipv6, MacAddr, TcpFlags};

fuzz_target!(|data: &[u8]| {
    checksums(data);
    ethernet_view(data);
    if data.len() >= ethernet::HEADER_LEN {
        ipv4_view(&data[ethernet::HEADER_LEN..]);
        ipv6_view(&data[ethernet::HEADER_LEN..]);
    }
    tcp_view(data);
    flow(data);
    vnet_and_mac(data);
});

fn checksums(d: &[u8]) {
    assert_eq!(fold(sum(d)), slow_sum(d), "fast sum differs from RFC 1071");
    if d.len() >= 4 {
        // csum_start / csum_offset from the first bytes, applied to the rest.
        let (s, o) = (usize::from(d[0]), usize::from(d[1] & 0x3f));
        let before = d[2..].to_vec();
        let mut f = before.clone();
        match complete_partial(&mut f, s, o) {
            Ok(()) => {
                let at = s + o;
                assert!(at + 2 <= f.len());
                assert_eq!(f[..at], before[..at]);
                assert_eq!(f[at + 2..], before[at + 2..]);
                let c = u16::from_be_bytes([f[at], f[at + 1]]);
                assert_ne!(c, 0, "a zero result is stored as 0xffff");
            }
            Err(e) => {
                assert_eq!(e, pvnet_wire::Error::ChecksumOutOfRange);
                assert!(s + o + 2 > before.len());
                assert_eq!(f, before, "a refused completion changed the frame");
            }
        }
    }
}

fn ethernet_view(d: &[u8]) {
    let Ok(f) = ethernet::Frame::new_checked(d) else {
        assert!(d.len() < ethernet::HEADER_LEN);
        return;
    };
    assert_eq!(f.dst().0[..], d[..6]);
    assert_eq!(f.src().0[..], d[6..12]);
    assert_eq!(f.ethertype(), u16::from_be_bytes([d[12], d[13]]));
    assert_eq!(f.payload(), &d[ethernet::HEADER_LEN..]);
    // Setters: new values read back, old values restore the bytes.
    let mut m = ethernet::Frame::new_checked(d.to_vec()).unwrap();
    let (dst, src, et) = (f.dst(), f.src(), f.ethertype());
    m.set_dst(src);
    m.set_src(dst);
    m.set_ethertype(!et);
    assert_eq!((m.dst(), m.src(), m.ethertype()), (src, dst, !et));
    assert_eq!(m.payload_mut().len(), d.len() - ethernet::HEADER_LEN);
    m.set_dst(dst);
    m.set_src(src);
    m.set_ethertype(et);
    assert_eq!(m.into_inner(), d);
}

fn ipv4_view(d: &[u8]) {
    let Ok(p) = ipv4::Packet::new_checked(d) else {
        return;
    };
    let hl = p.header_len();
    let total = usize::from(p.total_len());
    assert_eq!(p.version(), 4);
    assert!(ipv4::HEADER_LEN <= hl && hl <= total && total <= d.len());
    assert_eq!(p.options(), &d[ipv4::HEADER_LEN..hl]);
    assert_eq!(p.payload(), &d[hl..total]);
    assert_eq!(p.is_fragment(), p.more_frags() || p.frag_offset() != 0);
    assert_eq!(
        p.verify_checksum(),
        slow_sum(&d[..hl]) == 0xffff,
        "header checksum check differs from the reference"
    );
    let _ = (
        p.dscp_ecn(),
        p.ident(),
        p.dont_frag(),
        p.ttl(),
        p.protocol(),
    );
    let _ = (p.checksum(), p.src_addr(), p.dst_addr());
    if p.protocol() == ipv4::PROTO_TCP {
        let _ = checksum::tcp_v4_valid(&p);
    }

    let mut m = ipv4::Packet::new_checked(d.to_vec()).unwrap();
    let old = (
        p.ttl(),
        p.ident(),
        p.protocol(),
        p.src_addr(),
        p.dst_addr(),
        p.dscp_ecn(),
    );
    m.set_ttl(!old.0);
    m.set_ident(!old.1);
    m.set_protocol(!old.2);
    m.set_src_addr(old.4);
    m.set_dst_addr(old.3);
    m.set_dscp_ecn(!old.5);
    assert_eq!(
        (
            m.ttl(),
            m.ident(),
            m.protocol(),
            m.src_addr(),
            m.dst_addr(),
            m.dscp_ecn()
        ),
        (!old.0, !old.1, !old.2, old.4, old.3, !old.5)
    );
    m.fill_checksum();
    assert!(m.verify_checksum(), "fill_checksum leaves a bad checksum");
    assert!(
        m.check_len().is_ok(),
        "setters of non-length fields broke the lengths"
    );
    m.set_ttl(old.0);
    m.set_ident(old.1);
    m.set_protocol(old.2);
    m.set_src_addr(old.3);
    m.set_dst_addr(old.4);
    m.set_dscp_ecn(old.5);
    m.set_checksum(p.checksum());
    assert_eq!(m.into_inner(), d);

    // A setter that breaks a length field must not make getters panic.
    let mut m = ipv4::Packet::new_unchecked(d.to_vec());
    m.set_total_len(0xffff);
    m.set_version_ihl(60);
    let _ = (m.options().len(), m.payload().len(), m.verify_checksum());
}

fn ipv6_view(d: &[u8]) {
    let Ok(p) = ipv6::Packet::new_checked(d) else {
        return;
    };
    assert_eq!(p.version(), 6);
    let pl = usize::from(p.payload_len());
    assert!(ipv6::HEADER_LEN + pl <= d.len());
    assert_eq!(p.payload(), &d[ipv6::HEADER_LEN..ipv6::HEADER_LEN + pl]);
    assert!(p.flow_label() < 1 << 20);
    let _ = (
        p.traffic_class(),
        p.next_header(),
        p.hop_limit(),
        p.src_addr(),
        p.dst_addr(),
    );
    if p.next_header() == ipv4::PROTO_TCP {
        let _ = checksum::tcp_v6_valid(&p);
    }
    let mut m = ipv6::Packet::new_checked(d.to_vec()).unwrap();
    let old = (p.payload_len(), p.next_header(), p.hop_limit());
    m.set_next_header(!old.1);
    m.set_hop_limit(!old.2);
    m.set_payload_len(0xffff);
    assert_eq!((m.next_header(), m.hop_limit()), (!old.1, !old.2));
    // Clamped to the buffer even with a length field past it.
    assert!(m.payload_mut().len() <= d.len() - ipv6::HEADER_LEN);
    m.set_payload_len(old.0);
    m.set_next_header(old.1);
    m.set_hop_limit(old.2);
    assert_eq!(m.into_inner(), d);
}

fn tcp_view(d: &[u8]) {
    let Ok(s) = tcp::Segment::new_checked(d) else {
        return;
    };
    let hl = s.header_len();
    assert!(tcp::HEADER_LEN <= hl && hl <= d.len());
    assert_eq!(s.options(), &d[tcp::HEADER_LEN..hl]);
    assert_eq!(s.payload(), &d[hl..]);
    let _ = (s.src_port(), s.dst_port(), s.seq_number(), s.ack_number());
    let _ = (
        s.flags(),
        s.window(),
        s.checksum(),
        s.urgent_ptr(),
        s.timestamp(),
    );
    options_walk(s.options());

    let mut m = tcp::Segment::new_checked(d.to_vec()).unwrap();
    let old = (
        s.src_port(),
        s.dst_port(),
        s.seq_number(),
        s.ack_number(),
        s.flags(),
    );
    let (w, c) = (s.window(), s.checksum());
    m.set_src_port(old.1);
    m.set_dst_port(old.0);
    m.set_seq_number(!old.2);
    m.set_ack_number(!old.3);
    m.set_flags(TcpFlags(!old.4 .0));
    m.set_window(!w);
    m.set_checksum(!c);
    assert_eq!(
        (
            m.src_port(),
            m.dst_port(),
            m.seq_number(),
            m.ack_number(),
            m.flags().0
        ),
        (old.1, old.0, !old.2, !old.3, !old.4 .0)
    );
    assert_eq!((m.window(), m.checksum()), (!w, !c));
    assert_eq!(
        m.header_len(),
        hl,
        "the flags setter touched the data offset"
    );
    assert_eq!(m.payload_mut().len(), d.len() - hl);
    m.set_src_port(old.0);
    m.set_dst_port(old.1);
    m.set_seq_number(old.2);
    m.set_ack_number(old.3);
    m.set_flags(old.4);
    m.set_window(w);
    m.set_checksum(c);
    assert_eq!(m.into_inner(), d);
}

/// The option walk stays inside the option bytes and ends.
fn options_walk(opts: &[u8]) {
    let mut it = TcpOptionIter::new(opts);
    let mut used = 0;
    for (kind, data) in it.by_ref() {
        used += if kind == tcp::OPT_NOP {
            1
        } else {
            2 + data.len()
        };
        assert!(used <= opts.len(), "options walked past their end");
    }
    if let Some((ts_val, ts_ecr)) = tcp::timestamp(opts) {
        // The timestamp is a kind-8 option of 8 data bytes somewhere in the walk.
        assert!(
            TcpOptionIter::new(opts).any(|(k, d)| k == tcp::OPT_TIMESTAMP
                && d == [ts_val.to_be_bytes(), ts_ecr.to_be_bytes()].concat())
        );
    }
}

fn flow(f: &[u8]) {
    let Ok(m) = parse_tcp(f) else {
        return;
    };
    // Offsets: inside the frame and in order.
    assert_eq!(m.l3_off, ethernet::HEADER_LEN);
    assert!(m.l3_off < m.l4_off);
    assert!(m.l4_off + tcp::HEADER_LEN <= m.payload_off);
    assert!(m.payload_off <= m.l3_end() && m.l3_end() <= f.len());
    assert_eq!(m.tcp_options, m.l4_off + tcp::HEADER_LEN..m.payload_off);
    assert_eq!(m.ip_packet_len(), m.l3_end() - m.l3_off);
    let eth = ethernet::Frame::new_checked(f).unwrap();
    let l3 = &f[m.l3_off..];
    match eth.ethertype() {
        ETHERTYPE_IPV4 => {
            assert!(!m.is_ipv6());
            let ip = ipv4::Packet::new_checked(l3).expect("parse_tcp accepted a bad IPv4 header");
            assert_eq!(ip.protocol(), ipv4::PROTO_TCP);
            assert!(!ip.is_fragment());
            assert_eq!(m.l4_off, m.l3_off + ip.header_len());
            assert_eq!(m.l3_end(), m.l3_off + usize::from(ip.total_len()));
            assert_eq!(m.key.src, ip.src_addr());
            assert_eq!(m.key.dst, ip.dst_addr());
            assert_eq!(
                (m.ip_ident, m.ttl, m.tos, m.df),
                (ip.ident(), ip.ttl(), ip.dscp_ecn(), ip.dont_frag())
            );
            assert_eq!(m.ip_options, ip.header_len() > ipv4::HEADER_LEN);
            assert_eq!(m.flow_label, 0);
            assert!(m.ip6_ext.is_empty());
        }
        ETHERTYPE_IPV6 => {
            assert!(m.is_ipv6());
            let ip = ipv6::Packet::new_checked(l3).expect("parse_tcp accepted a bad IPv6 header");
            assert_eq!(
                m.l3_end(),
                m.l3_off + ipv6::HEADER_LEN + usize::from(ip.payload_len())
            );
            assert_eq!(m.key.src, ip.src_addr());
            assert_eq!(m.key.dst, ip.dst_addr());
            assert_eq!(
                (m.ttl, m.tos, m.flow_label),
                (ip.hop_limit(), ip.traffic_class(), ip.flow_label())
            );
            assert!(m.df && !m.ip_options && m.ip_ident == 0);
            // The extension headers, walked independently: only 0, 43, 60, ending in TCP.
            assert_eq!(m.ip6_ext, m.l3_off + ipv6::HEADER_LEN..m.l4_off);
            let (mut nh, mut at) = (ip.next_header(), m.ip6_ext.start);
            while at < m.l4_off {
                assert!(matches!(nh, 0 | 43 | 60), "walked over next header {nh}");
                nh = f[at];
                at += (usize::from(f[at + 1]) + 1) * 8;
            }
            assert_eq!(at, m.l4_off);
            assert_eq!(nh, ipv4::PROTO_TCP);
            assert_eq!(m.ip6_ext_bytes(f), &f[m.ip6_ext.clone()]);
        }
        other => panic!("parse_tcp accepted ethertype {other:#x}"),
    }
    let seg = tcp::Segment::new_checked(&f[m.l4_off..m.l3_end()]).unwrap();
    assert_eq!(m.payload_off, m.l4_off + seg.header_len());
    assert_eq!(m.payload_len, seg.payload().len());
    assert_eq!(
        (m.key.src_port, m.key.dst_port),
        (seg.src_port(), seg.dst_port())
    );
    assert_eq!(
        (m.seq, m.ack, m.flags, m.window),
        (
            seg.seq_number(),
            seg.ack_number(),
            seg.flags(),
            seg.window()
        )
    );
    assert_eq!(m.options(f), seg.options());
    assert_eq!(m.timestamp(f), seg.timestamp());
    assert_eq!(
        parse_tcp(f).as_ref(),
        Ok(&m),
        "parse_tcp is not deterministic"
    );
}

fn vnet_and_mac(d: &[u8]) {
    match VirtioNetHdr::parse(d) {
        Some(h) => assert_eq!(h.to_bytes()[..], d[..VNET_HDR_LEN]),
        None => assert!(d.len() < VNET_HDR_LEN),
    }
    if let Some(mac) = MacAddr::from_slice(d) {
        let s = mac.to_string();
        assert_eq!(
            s.parse::<MacAddr>(),
            Ok(mac),
            "MAC display/parse round trip"
        );
        assert_eq!(mac.is_unicast(), !mac.is_multicast() && !mac.is_zero());
    }
    if let Ok(s) = std::str::from_utf8(d) {
        if let Ok(mac) = s.parse::<MacAddr>() {
            let again = mac.to_string();
            assert_eq!(again.parse::<MacAddr>(), Ok(mac));
            assert_eq!(again.len(), 17);
        }
    }
}
