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

/// RFC 1071 reference: the one's-complement sum of the big-endian 16-bit words (an odd last
/// byte padded with zero), written plainly and independently of [`crate::checksum`].
///
/// The carries out of bit 15 are added back once at the end rather than after every add; RFC
/// 1071 §2(C) ("deferred carries") shows the result is the same, and
/// `slow_sum_is_the_add_with_carry_definition` checks it against the add-every-time form. Eight
/// bytes per step: the fuzz targets call this on every frame they build and check, under
/// coverage instrumentation that costs a callback per comparison.
pub fn slow_sum(data: &[u8]) -> u16 {
    let word = |hi: u8, lo: u8| u64::from(u16::from_be_bytes([hi, lo]));
    let mut s: u64 = 0;
    let mut quads = data.chunks_exact(8);
    for q in &mut quads {
        s += word(q[0], q[1]) + word(q[2], q[3]) + word(q[4], q[5]) + word(q[6], q[7]);
    }
    for w in quads.remainder().chunks(2) {
        s += word(w[0], w.get(1).copied().unwrap_or(0));
    }
    // At most 2^61 bytes fit in memory, so `s` cannot overflow; fold the carries back in.
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
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

#[cfg(test)]
mod slow_sum_tests {
    use super::slow_sum;

    /// RFC 1071 word by word, end-around carry after every add.
    fn add_with_carry(data: &[u8]) -> u16 {
        let mut s: u32 = 0;
        for w in data.chunks(2) {
            s += u32::from(w[0]) << 8 | u32::from(w.get(1).copied().unwrap_or(0));
            if s > 0xffff {
                s = (s & 0xffff) + 1;
            }
        }
        s as u16
    }

    #[test]
    fn slow_sum_is_the_add_with_carry_definition() {
        let mut x: u32 = 7;
        let mut cases: Vec<Vec<u8>> = vec![
            vec![],
            vec![0],
            vec![0xff],
            vec![0; 9],
            vec![0xff; 1],
            vec![0xff; 2],
            vec![0xff; 17],
            vec![0xff; 70_000],
            vec![0xfe, 0xff, 0x00, 0x01],
        ];
        for len in 0..300 {
            cases.push(
                (0..len)
                    .map(|_| {
                        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                        (x >> 16) as u8
                    })
                    .collect(),
            );
        }
        for d in &cases {
            assert_eq!(slow_sum(d), add_with_carry(d), "{} bytes", d.len());
        }
        // Known values: RFC 1071 §3's example words sum to 0xddf2.
        assert_eq!(
            slow_sum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            0xddf2
        );
        assert_eq!(slow_sum(&[0xff; 70_000]), 0xffff);
        assert_eq!(slow_sum(&[0, 0, 0]), 0);
    }
}
