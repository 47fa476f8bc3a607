//! Test fixtures shared by the modules' tests: captured packets and a frame builder whose
//! checksums come from an independent, deliberately slow RFC 1071 implementation.

use std::net::Ipv4Addr;

/// TCP SYN with options (MSS 1460, SACK-permitted, timestamps 0xf0b6c550/0, NOP, wscale 10),
/// 10.9.9.1:36138 → 10.9.9.2:80, captured from a TUN device (the kernel computed both checksums:
/// IP 0xf9af, TCP 0xe128).
pub const SYN4: [u8; 60] = [
    0x45, 0x00, 0x00, 0x3c, 0x1a, 0xf8, 0x40, 0x00, 0x40, 0x06, 0xf9, 0xaf, 0x0a, 0x09, 0x09, 0x01,
    0x0a, 0x09, 0x09, 0x02, 0x8d, 0x2a, 0x00, 0x50, 0xf0, 0x5a, 0x11, 0xf2, 0x00, 0x00, 0x00, 0x00,
    0xa0, 0x02, 0xfa, 0xf0, 0xe1, 0x28, 0x00, 0x00, 0x02, 0x04, 0x05, 0xb4, 0x04, 0x02, 0x08, 0x0a,
    0xf0, 0xb6, 0xc5, 0x50, 0x00, 0x00, 0x00, 0x00, 0x01, 0x03, 0x03, 0x0a,
];

/// UDP datagram "hello", 10.9.9.1:54541 → 10.9.9.2:5000, captured from the same TUN device
/// (UDP checksum 0xad57, odd-length payload).
pub const UDP4: [u8; 33] = [
    0x45, 0x00, 0x00, 0x21, 0x68, 0x22, 0x40, 0x00, 0x40, 0x11, 0xac, 0x95, 0x0a, 0x09, 0x09, 0x01,
    0x0a, 0x09, 0x09, 0x02, 0xd5, 0x0d, 0x13, 0x88, 0x00, 0x0d, 0xad, 0x57, 0x68, 0x65, 0x6c, 0x6c,
    0x6f,
];

/// TCP SYN over IPv6, fd00::1:46742 → fd00::2:80, flow label 0x9e663, captured from a TUN
/// device (TCP checksum 0xa141).
pub const SYN6: [u8; 80] = [
    0x60, 0x09, 0xe6, 0x63, 0x00, 0x28, 0x06, 0x40, 0xfd, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xfd, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0xb6, 0x96, 0x00, 0x50, 0x8a, 0x25, 0x60, 0x19,
    0x00, 0x00, 0x00, 0x00, 0xa0, 0x02, 0xfd, 0x20, 0xa1, 0x41, 0x00, 0x00, 0x02, 0x04, 0x05, 0xa0,
    0x04, 0x02, 0x08, 0x0a, 0x42, 0x1e, 0xcc, 0x66, 0x00, 0x00, 0x00, 0x00, 0x01, 0x03, 0x03, 0x0a,
];

pub const MAC_A: [u8; 6] = [0x00, 0x16, 0x3e, 0x00, 0x00, 0x0a];
pub const MAC_B: [u8; 6] = [0x00, 0x16, 0x3e, 0x00, 0x00, 0x0b];

/// `ip` behind an Ethernet header (MAC_B → MAC_A) with the given ethertype.
pub fn eth(ethertype: u16, ip: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + ip.len());
    f.extend_from_slice(&MAC_A);
    f.extend_from_slice(&MAC_B);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(ip);
    f
}

/// RFC 1071 reference: 16-bit words one at a time, end-around carry after every add.
pub fn slow_sum(data: &[u8]) -> u16 {
    let mut s: u32 = 0;
    let mut i = 0;
    while i < data.len() {
        let hi = u32::from(data[i]) << 8;
        let lo = data.get(i + 1).map_or(0, |&b| u32::from(b));
        s += hi | lo;
        if s > 0xffff {
            s = (s & 0xffff) + 1;
        }
        i += 2;
    }
    s as u16
}

/// An IPv4 + TCP packet (no Ethernet header) with correct checksums, ACK|PSH, seq/ack given,
/// a timestamp option, and `payload`.
pub fn tcp4(seq: u32, ack: u32, payload: &[u8]) -> Vec<u8> {
    let (src, dst) = (Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(198, 51, 100, 7));
    let tcp_len = 32 + payload.len();
    let total = 20 + tcp_len;
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[1] = 0x02; // ECT(0)
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[4..6].copy_from_slice(&0x4242u16.to_be_bytes());
    p[6] = 0x40; // DF
    p[8] = 63;
    p[9] = 6;
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    let c = !slow_sum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    let t = &mut p[20..];
    t[0..2].copy_from_slice(&40000u16.to_be_bytes());
    t[2..4].copy_from_slice(&5001u16.to_be_bytes());
    t[4..8].copy_from_slice(&seq.to_be_bytes());
    t[8..12].copy_from_slice(&ack.to_be_bytes());
    t[12] = 8 << 4;
    t[13] = 0x18; // PSH|ACK
    t[14..16].copy_from_slice(&501u16.to_be_bytes());
    t[20..32].copy_from_slice(&[1, 1, 8, 10, 0, 0, 0x30, 0x39, 0xde, 0xad, 0xbe, 0xef]);
    t[32..].copy_from_slice(payload);
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&src.octets());
    pseudo.extend_from_slice(&dst.octets());
    pseudo.extend_from_slice(&[0, 6]);
    pseudo.extend_from_slice(&(tcp_len as u16).to_be_bytes());
    pseudo.extend_from_slice(t);
    let c = !slow_sum(&pseudo);
    t[16..18].copy_from_slice(&c.to_be_bytes());
    p
}
