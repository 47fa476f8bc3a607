//! One-pass summary of an Ethernet + IPv4/IPv6 + TCP frame, for LRO and anything else that
//! needs the TCP fields of a frame without holding views over it.
//!
//! [`parse_tcp`] checks every layer (through the `new_checked` of each view) and returns the
//! offsets and fields in a [`TcpMeta`]. The rejections are the variants of [`Error`], one per
//! reason, so a caller can count each. What is not an error but may matter to a caller is a flag
//! in `TcpMeta` (`ip_options`).
//!
//! IPv6 extension headers: hop-by-hop options (0), routing (43) and destination options (60) are
//! walked over, any number and in any order, as Linux `ipv6_gro_pull_exthdrs` does (the headers
//! it registers with `INET6_PROTO_GSO_EXTHDR`, `net/ipv6/exthdrs_offload.c`); their bytes are
//! `ip6_ext`. Each is `8 × (hdr_ext_len + 1)` bytes and must lie within the payload length.
//!
//! Not handled (rejected): VLAN tags (`Vlan`), non-IP ethertypes (`NotIp`), IPv4 fragments
//! (`Fragment`), the other IPv6 extension headers (fragment, AH, ESP, mobility, ...:
//! `Ipv6ExtHeader`), other transports (`NotTcp`).

use std::net::IpAddr;
use std::ops::Range;

use crate::ethernet::{self, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_VLAN};
use crate::tcp::{self, TcpFlags};
use crate::{ipv4, ipv6, Error};

/// The TCP 4-tuple. IPv4 and IPv6 flows never compare equal (different `IpAddr` variants).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowKey {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
}

/// What [`parse_tcp`] found. Offsets are from the start of the frame; `payload_off +
/// payload_len` is the end of the IP packet, which may be before the end of the frame (Ethernet
/// padding).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpMeta {
    pub key: FlowKey,
    /// Start of the IP header (14: no VLAN).
    pub l3_off: usize,
    /// Start of the TCP header (after IPv4 options or the IPv6 extension headers).
    pub l4_off: usize,
    /// Start of the TCP payload.
    pub payload_off: usize,
    /// TCP payload length (bounded by the IP length, not the frame length).
    pub payload_len: usize,
    pub seq: u32,
    pub ack: u32,
    pub flags: TcpFlags,
    pub window: u16,
    /// TCP option bytes, as a range of the frame.
    pub tcp_options: Range<usize>,
    /// IPv4 identification; 0 for IPv6.
    pub ip_ident: u16,
    /// IPv4 TTL or IPv6 hop limit.
    pub ttl: u8,
    /// IPv4 TOS (DSCP + ECN) or IPv6 traffic class.
    pub tos: u8,
    /// IPv4 DF bit; true for IPv6 (routers never fragment it).
    pub df: bool,
    /// The IPv4 header carries options (IHL > 5). Linux GRO does not merge such packets.
    pub ip_options: bool,
    /// IPv6 flow label (20 bits); 0 for IPv4.
    pub flow_label: u32,
    /// The IPv6 extension headers walked over (hop-by-hop, routing, destination options), as a
    /// range of the frame: from the end of the fixed header to `l4_off`. Empty for IPv4 and for
    /// IPv6 without them.
    pub ip6_ext: Range<usize>,
}

impl TcpMeta {
    pub fn is_ipv6(&self) -> bool {
        self.key.src.is_ipv6()
    }

    /// End of the IP packet in the frame (start of any padding).
    pub fn l3_end(&self) -> usize {
        self.payload_off + self.payload_len
    }

    /// Length of the IP packet: IP header(s) + TCP header + payload.
    pub fn ip_packet_len(&self) -> usize {
        self.l3_end() - self.l3_off
    }

    /// The IPv6 extension header bytes of `frame` (empty for IPv4 or none).
    pub fn ip6_ext_bytes<'a>(&self, frame: &'a [u8]) -> &'a [u8] {
        frame.get(self.ip6_ext.clone()).unwrap_or(&[])
    }

    /// The TCP option bytes of `frame` (the frame this meta was parsed from).
    pub fn options<'a>(&self, frame: &'a [u8]) -> &'a [u8] {
        frame.get(self.tcp_options.clone()).unwrap_or(&[])
    }

    /// The TCP timestamp option of `frame`, if present.
    pub fn timestamp(&self, frame: &[u8]) -> Option<(u32, u32)> {
        tcp::timestamp(self.options(frame))
    }
}

/// Parses an untagged Ethernet frame carrying TCP over IPv4 or IPv6.
pub fn parse_tcp(frame: &[u8]) -> Result<TcpMeta, Error> {
    let eth = ethernet::Frame::new_checked(frame)?;
    let l3_off = ethernet::HEADER_LEN;
    match eth.ethertype() {
        ETHERTYPE_IPV4 => parse_v4(eth.payload(), l3_off),
        ETHERTYPE_IPV6 => parse_v6(eth.payload(), l3_off),
        ETHERTYPE_VLAN => Err(Error::Vlan),
        _ => Err(Error::NotIp),
    }
}

struct L3 {
    key_src: IpAddr,
    key_dst: IpAddr,
    ip_ident: u16,
    ttl: u8,
    tos: u8,
    df: bool,
    ip_options: bool,
    flow_label: u32,
}

fn parse_v4(b: &[u8], l3_off: usize) -> Result<TcpMeta, Error> {
    let ip = ipv4::Packet::new_checked(b)?;
    if ip.protocol() != ipv4::PROTO_TCP {
        return Err(Error::NotTcp);
    }
    if ip.is_fragment() {
        return Err(Error::Fragment);
    }
    let l3 = L3 {
        key_src: ip.src_addr().into(),
        key_dst: ip.dst_addr().into(),
        ip_ident: ip.ident(),
        ttl: ip.ttl(),
        tos: ip.dscp_ecn(),
        df: ip.dont_frag(),
        ip_options: ip.header_len() > ipv4::HEADER_LEN,
        flow_label: 0,
    };
    let l4_off = l3_off + ip.header_len();
    finish(ip.payload(), l3_off, l4_off..l4_off, l3)
}

fn parse_v6(b: &[u8], l3_off: usize) -> Result<TcpMeta, Error> {
    let ip = ipv6::Packet::new_checked(b)?;
    let payload = ip.payload();
    let mut nh = ip.next_header();
    let mut off = 0;
    while ipv6::is_gro_ext_header(nh) {
        let hdr = payload.get(off..off + 2).ok_or(Error::Truncated)?;
        let len = (usize::from(hdr[1]) + 1) * 8;
        if payload.len() - off < len {
            return Err(Error::Truncated);
        }
        nh = hdr[0];
        off += len;
    }
    if nh != ipv4::PROTO_TCP {
        return Err(if ipv6::is_ext_header(nh) {
            Error::Ipv6ExtHeader
        } else {
            Error::NotTcp
        });
    }
    let l3 = L3 {
        key_src: ip.src_addr().into(),
        key_dst: ip.dst_addr().into(),
        ip_ident: 0,
        ttl: ip.hop_limit(),
        tos: ip.traffic_class(),
        df: true,
        ip_options: false,
        flow_label: ip.flow_label(),
    };
    let ext = l3_off + ipv6::HEADER_LEN;
    finish(&payload[off..], l3_off, ext..ext + off, l3)
}

/// `ext`: the IPv6 extension headers (ends where TCP starts).
fn finish(l4: &[u8], l3_off: usize, ext: Range<usize>, l3: L3) -> Result<TcpMeta, Error> {
    let l4_off = ext.end;
    let seg = tcp::Segment::new_checked(l4)?;
    let hl = seg.header_len();
    Ok(TcpMeta {
        key: FlowKey {
            src: l3.key_src,
            dst: l3.key_dst,
            src_port: seg.src_port(),
            dst_port: seg.dst_port(),
        },
        l3_off,
        l4_off,
        payload_off: l4_off + hl,
        payload_len: seg.payload().len(),
        seq: seg.seq_number(),
        ack: seg.ack_number(),
        flags: seg.flags(),
        window: seg.window(),
        tcp_options: l4_off + tcp::HEADER_LEN..l4_off + hl,
        ip_ident: l3.ip_ident,
        ttl: l3.ttl,
        tos: l3.tos,
        df: l3.df,
        ip_options: l3.ip_options,
        flow_label: l3.flow_label,
        ip6_ext: ext,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{eth, tcp4, SYN4, SYN6, UDP4};
    use proptest::prelude::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn v4(ip: &[u8]) -> Vec<u8> {
        eth(ETHERTYPE_IPV4, ip)
    }

    #[test]
    fn parses_ipv4_data_segment() {
        let mut f = v4(&tcp4(1000, 2000, b"hello world"));
        f.extend_from_slice(&[0; 5]); // Ethernet padding is not payload
        let m = parse_tcp(&f).unwrap();
        assert_eq!(
            m.key,
            FlowKey {
                src: Ipv4Addr::new(192, 0, 2, 1).into(),
                dst: Ipv4Addr::new(198, 51, 100, 7).into(),
                src_port: 40000,
                dst_port: 5001,
            }
        );
        assert_eq!((m.l3_off, m.l4_off, m.payload_off), (14, 34, 66));
        assert_eq!(m.payload_len, 11);
        assert_eq!(&f[m.payload_off..m.l3_end()], b"hello world");
        assert_eq!((m.seq, m.ack), (1000, 2000));
        assert_eq!(m.flags, TcpFlags::ACK | TcpFlags::PSH);
        assert_eq!(m.window, 501);
        assert_eq!(m.tcp_options, 54..66);
        assert_eq!(m.timestamp(&f), Some((12345, 0xdeadbeef)));
        assert_eq!(
            (m.ip_ident, m.ttl, m.tos, m.df, m.ip_options),
            (0x4242, 63, 2, true, false)
        );
        assert!(!m.is_ipv6());
    }

    #[test]
    fn parses_captured_ipv4_syn() {
        let f = v4(&SYN4);
        let m = parse_tcp(&f).unwrap();
        assert_eq!(m.flags, TcpFlags::SYN);
        assert_eq!(m.payload_len, 0);
        assert_eq!(m.options(&f).len(), 20);
        assert_eq!(m.key.src_port, 36138);
    }

    #[test]
    fn parses_captured_ipv6_syn() {
        let f = eth(ETHERTYPE_IPV6, &SYN6);
        let m = parse_tcp(&f).unwrap();
        assert!(m.is_ipv6());
        assert_eq!(m.key.src, "fd00::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(m.key.dst_port, 80);
        assert_eq!(
            (m.l3_off, m.l4_off, m.payload_off, m.payload_len),
            (14, 54, 94, 0)
        );
        assert_eq!((m.ip_ident, m.ttl, m.df), (0, 64, true));
        assert_eq!(m.timestamp(&f), Some((0x421ecc66, 0)));
    }

    #[test]
    fn flags_ipv4_options() {
        let mut ip = tcp4(1, 2, b"x");
        // Insert one option word (NOP NOP NOP EOL) after the fixed header.
        ip.splice(20..20, [1, 1, 1, 0]);
        ip[0] = 0x46;
        let total = ip.len() as u16;
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        let m = parse_tcp(&v4(&ip)).unwrap();
        assert!(m.ip_options);
        assert_eq!((m.l4_off, m.payload_len), (38, 1));
    }

    #[test]
    fn flow_keys_hash_by_tuple() {
        use std::collections::HashSet;
        let a = parse_tcp(&v4(&tcp4(1, 2, b"a"))).unwrap().key;
        let b = parse_tcp(&v4(&tcp4(9, 9, b"bb"))).unwrap().key;
        let c = parse_tcp(&eth(ETHERTYPE_IPV6, &SYN6)).unwrap().key;
        let set: HashSet<FlowKey> = [a, b, c].into_iter().collect();
        assert_eq!(set.len(), 2);
    }

    #[test]
    fn reject_short_ethernet() {
        assert_eq!(parse_tcp(&[0u8; 13]), Err(Error::Truncated));
    }

    #[test]
    fn reject_vlan() {
        assert_eq!(parse_tcp(&eth(ETHERTYPE_VLAN, &SYN4)), Err(Error::Vlan));
    }

    #[test]
    fn reject_non_ip() {
        assert_eq!(parse_tcp(&eth(0x0806, &SYN4)), Err(Error::NotIp));
    }

    #[test]
    fn reject_version_mismatch() {
        assert_eq!(
            parse_tcp(&eth(ETHERTYPE_IPV6, &SYN4)),
            Err(Error::BadIpVersion)
        );
        let mut ip6 = SYN6;
        ip6[0] = 0x40;
        assert_eq!(
            parse_tcp(&eth(ETHERTYPE_IPV6, &ip6)),
            Err(Error::BadIpVersion)
        );
        assert_eq!(
            parse_tcp(&eth(ETHERTYPE_IPV4, &SYN6)),
            Err(Error::BadIpVersion)
        );
    }

    #[test]
    fn reject_bad_ihl() {
        let mut ip = SYN4;
        ip[0] = 0x43;
        assert_eq!(parse_tcp(&v4(&ip)), Err(Error::BadIhl));
    }

    #[test]
    fn reject_bad_total_len() {
        let mut ip = SYN4;
        ip[3] = 10;
        assert_eq!(parse_tcp(&v4(&ip)), Err(Error::BadTotalLen));
    }

    #[test]
    fn reject_truncated_ip() {
        assert_eq!(parse_tcp(&v4(&SYN4[..50])), Err(Error::Truncated));
        assert_eq!(
            parse_tcp(&eth(ETHERTYPE_IPV6, &SYN6[..70])),
            Err(Error::Truncated)
        );
    }

    #[test]
    fn reject_fragments() {
        let mut mf = SYN4;
        mf[6] |= 0x20;
        assert_eq!(parse_tcp(&v4(&mf)), Err(Error::Fragment));
        let mut off = SYN4;
        off[7] = 0x01;
        assert_eq!(parse_tcp(&v4(&off)), Err(Error::Fragment));
    }

    #[test]
    fn reject_not_tcp() {
        assert_eq!(parse_tcp(&v4(&UDP4)), Err(Error::NotTcp));
        let mut ip6 = SYN6;
        ip6[6] = 17;
        assert_eq!(parse_tcp(&eth(ETHERTYPE_IPV6, &ip6)), Err(Error::NotTcp));
    }

    /// SYN6 with `ext` (next-header chain already linked by the caller) inserted after the
    /// fixed header, whose next header becomes `first`.
    fn v6_with_ext(first: u8, ext: &[u8]) -> Vec<u8> {
        let mut ip = SYN6.to_vec();
        ip.splice(40..40, ext.iter().copied());
        ip[6] = first;
        let plen = (ip.len() - 40) as u16;
        ip[4..6].copy_from_slice(&plen.to_be_bytes());
        eth(ETHERTYPE_IPV6, &ip)
    }

    #[test]
    fn walks_hop_by_hop_routing_and_destination_options() {
        // HBH (8 bytes) -> routing (24 bytes, hdr_ext_len 2) -> dest opts (16 bytes) -> TCP.
        let mut ext = vec![43, 0, 1, 4, 0, 0, 0, 0];
        ext.extend_from_slice(&[60, 2, 0, 0, 0, 0, 0, 0]);
        ext.extend_from_slice(&[0xaa; 16]);
        ext.extend_from_slice(&[6, 1, 1, 4, 0, 0, 0, 0]);
        ext.extend_from_slice(&[0xbb; 8]);
        let f = v6_with_ext(0, &ext);
        let m = parse_tcp(&f).unwrap();
        assert_eq!(m.ip6_ext, 54..54 + 48);
        assert_eq!(m.ip6_ext_bytes(&f), &ext[..]);
        assert_eq!((m.l4_off, m.payload_off, m.payload_len), (102, 142, 0));
        assert_eq!(m.ip_packet_len(), 40 + 48 + 40);
        assert_eq!((m.key.dst_port, m.flow_label), (80, 0x9e663));
        assert_eq!(m.timestamp(&f), Some((0x421ecc66, 0)));
        // Without extension headers the range is empty and sits at the end of the fixed header.
        let plain = parse_tcp(&eth(ETHERTYPE_IPV6, &SYN6)).unwrap();
        assert_eq!(plain.ip6_ext, 54..54);
        let v4 = parse_tcp(&v4(&SYN4)).unwrap();
        assert!(v4.ip6_ext.is_empty() && v4.flow_label == 0);
    }

    #[test]
    fn reject_ipv6_extension_header() {
        // Fragment, ESP, AH, mobility: not walked (Linux GRO refuses them too), directly or
        // after a header that is walked.
        for nh in [44u8, 50, 51, 135, 139, 140] {
            let mut ip6 = SYN6;
            ip6[6] = nh;
            assert_eq!(
                parse_tcp(&eth(ETHERTYPE_IPV6, &ip6)),
                Err(Error::Ipv6ExtHeader),
                "{nh}"
            );
            let f = v6_with_ext(60, &[nh, 0, 1, 4, 0, 0, 0, 0]);
            assert_eq!(parse_tcp(&f), Err(Error::Ipv6ExtHeader), "{nh}");
        }
        // No next header (59) after destination options: not TCP.
        let f = v6_with_ext(60, &[59, 0, 1, 4, 0, 0, 0, 0]);
        assert_eq!(parse_tcp(&f), Err(Error::NotTcp));
    }

    #[test]
    fn reject_ipv6_extension_header_past_payload() {
        // hdr_ext_len claims 16 bytes, the payload length leaves only 8 + TCP... cut short.
        let f = v6_with_ext(0, &[6, 200, 1, 4, 0, 0, 0, 0]);
        assert_eq!(parse_tcp(&f), Err(Error::Truncated));
        // A jumbogram (payload length 0, RFC 2675) never parses: nothing follows the header.
        let mut j = v6_with_ext(0, &[6, 0, 0xc2, 4, 0, 1, 0, 0]);
        j[18..20].fill(0);
        assert_eq!(parse_tcp(&j), Err(Error::Truncated));
        // An extension header cut in its first two bytes.
        let mut ip6 = SYN6.to_vec();
        ip6[6] = 0;
        ip6[4..6].copy_from_slice(&1u16.to_be_bytes());
        assert_eq!(parse_tcp(&eth(ETHERTYPE_IPV6, &ip6)), Err(Error::Truncated));
    }

    #[test]
    fn reject_bad_tcp_header_len() {
        let mut ip = SYN4;
        ip[20 + 12] = 0x40;
        assert_eq!(parse_tcp(&v4(&ip)), Err(Error::BadTcpHeaderLen));
    }

    #[test]
    fn reject_tcp_header_beyond_ip_length() {
        // Data offset 15 (60 bytes) but only 40 bytes of IP payload; bytes beyond total_len
        // (padding) must not count.
        let mut ip = SYN4.to_vec();
        ip[20 + 12] = 0xf0;
        ip.extend_from_slice(&[0; 30]);
        assert_eq!(parse_tcp(&v4(&ip)), Err(Error::Truncated));
        // IP payload shorter than the fixed TCP header.
        let mut short = SYN4;
        short[3] = 30;
        assert_eq!(parse_tcp(&v4(&short)), Err(Error::Truncated));
    }

    proptest! {
        #[test]
        fn never_panics_and_stays_in_bounds(
            cut in 0usize..200,
            flips in proptest::collection::vec((0usize..120, any::<u8>()), 0..6),
        ) {
            let mut f = v4(&tcp4(5, 6, &[0x5a; 60]));
            for (i, x) in flips {
                if let Some(b) = f.get_mut(i) { *b ^= x; }
            }
            f.truncate(cut.min(f.len()));
            if let Ok(m) = parse_tcp(&f) {
                prop_assert!(m.ip6_ext.start <= m.ip6_ext.end && m.ip6_ext.end == m.l4_off);
                prop_assert!(m.l4_off <= m.payload_off && m.l3_end() <= f.len());
                prop_assert!(m.tcp_options.end == m.payload_off);
                let _ = m.timestamp(&f);
            }
        }

        #[test]
        fn ipv6_chains_never_panic_and_stay_in_bounds(
            ext in proptest::collection::vec(any::<u8>(), 0..64),
            first in prop_oneof![Just(0u8), Just(43), Just(60), Just(6)],
            cut in 0usize..200,
        ) {
            let mut f = v6_with_ext(first, &ext);
            f.truncate(cut.min(f.len()));
            if let Ok(m) = parse_tcp(&f) {
                prop_assert!(m.ip6_ext.end == m.l4_off && m.l3_end() <= f.len());
                prop_assert_eq!(m.ip6_ext.start, 54);
                prop_assert_eq!((m.ip6_ext.end - m.ip6_ext.start) % 8, 0);
            }
        }
    }
}
