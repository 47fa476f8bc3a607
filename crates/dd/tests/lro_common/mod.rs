//! Helpers of the LRO tests: a frame builder for IPv4 and IPv6 TCP segments whose checksums
//! come from a deliberately slow RFC 1071 sum, independent checks of the checksums, and the
//! oracle that turns engine output back into (seq, payload) per flow.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use pvnet_dd::lro::{segment, Config, Lro, Mode, Policy};
use pvnet_dd::packet::Packet;
use pvnet_wire::flow::{parse_tcp, FlowKey};
use pvnet_wire::vnet::{self, VirtioNetHdr};

pub const ACK: u8 = 0x10;
pub const PSH: u8 = 0x08;
pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const URG: u8 = 0x20;
pub const ECE: u8 = 0x40;
pub const CWR: u8 = 0x80;

pub const MAC_DST: [u8; 6] = [0x00, 0x16, 0x3e, 0x00, 0x00, 0x0a];
pub const MAC_SRC: [u8; 6] = [0x00, 0x16, 0x3e, 0x00, 0x00, 0x0b];
/// A second guest behind the same port (flows to two destinations share an LRO table).
pub const MAC_DST2: [u8; 6] = [0x00, 0x16, 0x3e, 0x00, 0x00, 0x0c];
pub const SRC4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
pub const DST4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);
pub const TIMESTAMP: [u8; 12] = [1, 1, 8, 10, 0, 0, 0x30, 0x39, 0xde, 0xad, 0xbe, 0xef];

pub fn src6() -> Ipv6Addr {
    "fd00::1".parse().unwrap()
}

pub fn dst6() -> Ipv6Addr {
    "fd00::2".parse().unwrap()
}

/// A TCP segment to build.
#[derive(Clone, Debug)]
pub struct Seg {
    pub v6: bool,
    pub dst_mac: [u8; 6],
    pub src_mac: [u8; 6],
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    /// The four reserved bits of TCP header byte 12 (the lowest is AccECN's AE).
    pub tcp_reserved: u8,
    pub window: u16,
    pub payload: Vec<u8>,
    pub ip_id: u16,
    pub ttl: u8,
    pub tos: u8,
    pub df: bool,
    /// IPv4 MF bit.
    pub more_frags: bool,
    /// TCP option bytes (a multiple of 4).
    pub options: Vec<u8>,
    /// IPv4 option bytes (a multiple of 4).
    pub ip_options: Vec<u8>,
    /// IPv6 extension headers before TCP, in order: (next-header value naming it, its bytes, a
    /// multiple of 8; the builder writes the first byte, the next header).
    pub ip6_ext: Vec<(u8, Vec<u8>)>,
    /// IPv6 flow label (20 bits).
    pub flow_label: u32,
    /// Pad the frame to this length (Ethernet minimum is 60).
    pub pad_to: usize,
}

impl Seg {
    pub fn v4(seq: u32, payload: &[u8]) -> Seg {
        Seg {
            v6: false,
            dst_mac: MAC_DST,
            src_mac: MAC_SRC,
            src_port: 40000,
            dst_port: 5001,
            seq,
            ack: 7,
            flags: ACK,
            tcp_reserved: 0,
            window: 501,
            payload: payload.to_vec(),
            ip_id: 100,
            ttl: 64,
            tos: 0,
            df: true,
            more_frags: false,
            options: TIMESTAMP.to_vec(),
            ip_options: Vec::new(),
            ip6_ext: Vec::new(),
            flow_label: 0,
            pad_to: 60,
        }
    }

    pub fn v6(seq: u32, payload: &[u8]) -> Seg {
        Seg {
            v6: true,
            ..Seg::v4(seq, payload)
        }
    }

    pub fn with(mut self, f: impl FnOnce(&mut Seg)) -> Seg {
        f(&mut self);
        self
    }

    /// The Ethernet frame, checksums correct.
    pub fn build(&self) -> Vec<u8> {
        let tcp_len = 20 + self.options.len() + self.payload.len();
        let mut tcp = vec![0u8; 20];
        tcp[0..2].copy_from_slice(&self.src_port.to_be_bytes());
        tcp[2..4].copy_from_slice(&self.dst_port.to_be_bytes());
        tcp[4..8].copy_from_slice(&self.seq.to_be_bytes());
        tcp[8..12].copy_from_slice(&self.ack.to_be_bytes());
        tcp[12] = (((20 + self.options.len()) / 4) as u8) << 4 | (self.tcp_reserved & 0x0f);
        tcp[13] = self.flags;
        tcp[14..16].copy_from_slice(&self.window.to_be_bytes());
        tcp.extend_from_slice(&self.options);
        tcp.extend_from_slice(&self.payload);
        let mut pseudo = Vec::new();
        let mut f = Vec::new();
        f.extend_from_slice(&self.dst_mac);
        f.extend_from_slice(&self.src_mac);
        if self.v6 {
            f.extend_from_slice(&0x86ddu16.to_be_bytes());
            let ext: usize = self.ip6_ext.iter().map(|(_, h)| h.len()).sum();
            let mut ip = vec![0u8; 40];
            let word = 0x6000_0000 | u32::from(self.tos) << 20 | (self.flow_label & 0xf_ffff);
            ip[0..4].copy_from_slice(&word.to_be_bytes());
            ip[4..6].copy_from_slice(&((tcp_len + ext) as u16).to_be_bytes());
            ip[6] = self.ip6_ext.first().map_or(6, |(t, _)| *t);
            ip[7] = self.ttl;
            ip[8..24].copy_from_slice(&src6().octets());
            ip[24..40].copy_from_slice(&dst6().octets());
            f.extend_from_slice(&ip);
            for (i, (_, h)) in self.ip6_ext.iter().enumerate() {
                let mut h = h.clone();
                h[0] = self.ip6_ext.get(i + 1).map_or(6, |(t, _)| *t);
                f.extend_from_slice(&h);
            }
            pseudo.extend_from_slice(&src6().octets());
            pseudo.extend_from_slice(&dst6().octets());
            pseudo.extend_from_slice(&(tcp_len as u32).to_be_bytes());
            pseudo.extend_from_slice(&[0, 0, 0, 6]);
        } else {
            f.extend_from_slice(&0x0800u16.to_be_bytes());
            let hl = 20 + self.ip_options.len();
            let mut ip = vec![0u8; 20];
            ip[0] = 0x40 | (hl / 4) as u8;
            ip[1] = self.tos;
            ip[2..4].copy_from_slice(&((hl + tcp_len) as u16).to_be_bytes());
            ip[4..6].copy_from_slice(&self.ip_id.to_be_bytes());
            ip[6] = if self.df { 0x40 } else { 0 } | if self.more_frags { 0x20 } else { 0 };
            ip[8] = self.ttl;
            ip[9] = 6;
            ip[12..16].copy_from_slice(&SRC4.octets());
            ip[16..20].copy_from_slice(&DST4.octets());
            ip.extend_from_slice(&self.ip_options);
            let c = !slow_sum(&ip);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            f.extend_from_slice(&ip);
            pseudo.extend_from_slice(&SRC4.octets());
            pseudo.extend_from_slice(&DST4.octets());
            pseudo.extend_from_slice(&[0, 6]);
            pseudo.extend_from_slice(&(tcp_len as u16).to_be_bytes());
        }
        pseudo.extend_from_slice(&tcp);
        let c = !slow_sum(&pseudo);
        tcp[16..18].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&tcp);
        if f.len() < self.pad_to {
            f.resize(self.pad_to, 0);
        }
        f
    }

    /// The frame as a local sender hands it over with a partial checksum: the TCP check field
    /// holds the folded pseudo-header sum, vnet `NEEDS_CSUM`.
    pub fn build_partial(&self) -> (Vec<u8>, VirtioNetHdr) {
        let mut f = self.build();
        let m = parse_tcp(&f).unwrap();
        let tcp_len = m.l3_end() - m.l4_off;
        let mut pseudo = Vec::new();
        if self.v6 {
            pseudo.extend_from_slice(&src6().octets());
            pseudo.extend_from_slice(&dst6().octets());
            pseudo.extend_from_slice(&(tcp_len as u32).to_be_bytes());
            pseudo.extend_from_slice(&[0, 0, 0, 6]);
        } else {
            pseudo.extend_from_slice(&SRC4.octets());
            pseudo.extend_from_slice(&DST4.octets());
            pseudo.extend_from_slice(&[0, 6]);
            pseudo.extend_from_slice(&(tcp_len as u16).to_be_bytes());
        }
        let seed = slow_sum(&pseudo);
        f[m.l4_off + 16..m.l4_off + 18].copy_from_slice(&seed.to_be_bytes());
        let vnet = VirtioNetHdr {
            flags: vnet::F_NEEDS_CSUM,
            csum_start: m.l4_off as u16,
            csum_offset: 16,
            ..VirtioNetHdr::default()
        };
        (f, vnet)
    }

    /// Payload offset in the built frame.
    pub fn payload_off(&self) -> usize {
        let l4 = if self.v6 {
            54 + self.ip6_ext.iter().map(|(_, h)| h.len()).sum::<usize>()
        } else {
            34 + self.ip_options.len()
        };
        l4 + 20 + self.options.len()
    }
}

pub use pvnet_wire::fixtures::slow_sum;

/// The IPv4 header checksum of an Ethernet frame is valid (true for IPv6).
pub fn ip_csum_ok(f: &[u8]) -> bool {
    if f[12..14] == [0x86, 0xdd] {
        return true;
    }
    let hl = usize::from(f[14] & 0x0f) * 4;
    slow_sum(&f[14..14 + hl]) == 0xffff
}

/// Where TCP starts in an IPv6 Ethernet frame: after the hop-by-hop, routing and destination
/// options headers (walked here independently of the parser under test).
pub fn ipv6_l4(f: &[u8]) -> usize {
    let (mut nh, mut at) = (f[20], 54);
    while matches!(nh, 0 | 43 | 60) {
        nh = f[at];
        at += (usize::from(f[at + 1]) + 1) * 8;
    }
    at
}

/// The TCP checksum of an Ethernet frame is valid, computed from the raw bytes with the slow
/// sum.
pub fn tcp_csum_ok(f: &[u8]) -> bool {
    let mut pseudo = Vec::new();
    let (l4, end) = if f[12..14] == [0x86, 0xdd] {
        let end = 54 + usize::from(u16::from_be_bytes([f[18], f[19]]));
        let l4 = ipv6_l4(f);
        pseudo.extend_from_slice(&f[22..54]);
        pseudo.extend_from_slice(&((end - l4) as u32).to_be_bytes());
        pseudo.extend_from_slice(&[0, 0, 0, 6]);
        (l4, end)
    } else {
        let l4 = 14 + usize::from(f[14] & 0x0f) * 4;
        let end = 14 + usize::from(u16::from_be_bytes([f[16], f[17]]));
        pseudo.extend_from_slice(&f[26..34]);
        pseudo.extend_from_slice(&[0, 6]);
        pseudo.extend_from_slice(&((end - l4) as u16).to_be_bytes());
        (l4, end)
    };
    pseudo.extend_from_slice(&f[l4..end]);
    slow_sum(&pseudo) == 0xffff
}

/// Completes a GSO packet's partial checksum over the whole (linearized) packet, the way the
/// receiving stack does, and returns the bytes.
pub fn complete(p: &Packet) -> Vec<u8> {
    assert!(p.vnet.needs_csum());
    let mut b = p.to_vec();
    let start = usize::from(p.vnet.csum_start);
    let at = start + usize::from(p.vnet.csum_offset);
    let c = !slow_sum(&b[start..]);
    b[at..at + 2].copy_from_slice(&c.to_be_bytes());
    b
}

/// Flow of an output or input: (v6, source port).
pub type Flow = (bool, u16);

/// (seq, payload) of every TCP frame in `pkts`, per flow, GSO packets re-segmented.
pub fn per_flow(pkts: &[Packet]) -> BTreeMap<Flow, Vec<(u32, Vec<u8>)>> {
    let mut m: BTreeMap<Flow, Vec<(u32, Vec<u8>)>> = BTreeMap::new();
    for p in pkts {
        for s in segment(p).expect("engine output re-segments") {
            let f = s.to_vec();
            if let Ok(t) = parse_tcp(&f) {
                m.entry((t.is_ipv6(), t.key.src_port))
                    .or_default()
                    .push((t.seq, f[t.payload_off..t.l3_end()].to_vec()));
            }
        }
    }
    m
}

/// (seq, payload) of every TCP frame in `pkts`, per 4-tuple, GSO packets re-segmented.
pub fn per_tuple(pkts: &[Packet]) -> BTreeMap<FlowKey, Vec<(u32, Vec<u8>)>> {
    let mut m: BTreeMap<FlowKey, Vec<(u32, Vec<u8>)>> = BTreeMap::new();
    for p in pkts {
        for s in segment(p).expect("engine output re-segments") {
            let f = s.to_vec();
            if let Ok(t) = parse_tcp(&f) {
                m.entry(t.key)
                    .or_default()
                    .push((t.seq, f[t.payload_off..t.l3_end()].to_vec()));
            }
        }
    }
    m
}

/// An engine whose clock runs in microseconds.
pub fn engine(mode: Mode, policy: Policy) -> Lro {
    Lro::new(Config {
        mode,
        policy,
        max_flows: 32,
        max_flows_per_dst: 32,
        ticks_per_us: 1,
    })
}

pub fn no_vnet() -> VirtioNetHdr {
    VirtioNetHdr::default()
}

/// An IPv6 extension header of type `kind` (0 hop-by-hop, 43 routing, 60 destination options)
/// of `8 × (units + 1)` bytes: options headers carry one PadN option filling them, a routing
/// header is of type `tag` with no segments left; `tag` also marks the last byte.
pub fn ext(kind: u8, units: u8, tag: u8) -> (u8, Vec<u8>) {
    let len = 8 * (usize::from(units) + 1);
    let mut h = vec![0u8; len];
    h[1] = units;
    if kind == 43 {
        h[2] = tag;
    } else {
        h[2] = 1;
        h[3] = (len - 4) as u8;
    }
    h[len - 1] = tag;
    (kind, h)
}

/// `n` bytes of a recognisable pattern starting at `from`.
pub fn bytes(from: u32, n: usize) -> Vec<u8> {
    (0..n as u32)
        .map(|i| (from.wrapping_add(i) % 251) as u8)
        .collect()
}

/// `count` consecutive segments of `mss` payload bytes from `seq`, IPv4 ID counting up by one.
pub fn stream(v6: bool, seq: u32, mss: usize, count: usize) -> Vec<Seg> {
    (0..count)
        .map(|i| {
            let sq = seq.wrapping_add((i * mss) as u32);
            let s = if v6 {
                Seg::v6(sq, &bytes(sq, mss))
            } else {
                Seg::v4(sq, &bytes(sq, mss))
            };
            s.with(|s| s.ip_id = 100 + i as u16)
        })
        .collect()
}

/// What the next frame of a flow is, relative to the flow's sender state ([`Sender::frame`]).
#[derive(Clone, Copy, Debug)]
pub enum Kind {
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
    /// IPv6: one byte of the extension header chain changed (IPv4: the window).
    OtherExt,
    NextFin,
    NextCwr,
    OtherWindow,
}

/// Every [`Kind`].
pub const KINDS: [Kind; 16] = [
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

/// Sender state of one flow.
pub struct Sender {
    pub v6: bool,
    pub port: u16,
    pub mss: usize,
    pub seq: u32,
    pub ack: u32,
    pub ip_id: u16,
    /// Distinguishes payloads of frames with the same sequence number.
    pub salt: u32,
    /// IPv6 extension headers on every segment.
    pub ext: Vec<(u8, Vec<u8>)>,
    /// The guest it streams to.
    pub dst_mac: [u8; 6],
}

impl Sender {
    pub fn seg(&mut self, seq: u32, n: usize) -> Seg {
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
            s.dst_mac = self.dst_mac;
            s.ack = self.ack;
            s.ip_id = self.ip_id;
            if self.v6 {
                s.ip6_ext = self.ext.clone();
            }
        })
    }

    pub fn next(&mut self, n: usize) -> Seg {
        let s = self.seg(self.seq, n);
        self.seq = self.seq.wrapping_add(n as u32);
        s
    }

    /// The frame for `kind`, with its metadata.
    pub fn frame(&mut self, kind: Kind, meta: u8) -> (Vec<u8>, VirtioNetHdr) {
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
