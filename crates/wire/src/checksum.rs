//! The Internet checksum (RFC 1071): one's-complement sum of 16-bit big-endian words.
//!
//! Vocabulary: a *sum* ([`sum`], [`combine`], the pseudo-header functions) is an unfolded
//! one's-complement accumulator in a `u32`; [`fold`] reduces it to 16 bits **without**
//! complementing (unlike Linux `csum_fold`). The value stored in a checksum field is
//! `!fold(sum)`, and a received header/segment is valid when `fold(sum over it) == 0xffff`.
//!
//! [`combine`] is only correct when the first part covered an even number of bytes (all callers
//! here sum a pseudo-header, then a segment).

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::{ipv4, ipv6, Error};

/// One's-complement sum of `data` as big-endian 16-bit words, an odd trailing byte padded with
/// zero. Adds native-endian 32-bit words into a 64-bit accumulator (no carries to chase, so the
/// loop vectorizes): 2^16 ≡ 1 modulo 0xffff, so folding gives the 16-bit sum of native-endian
/// words, and the one's-complement sum is byte-order independent (RFC 1071 §2(B)): swapping the
/// folded result's bytes gives the big-endian sum. 2^32 words of 2^32 - 1 cannot overflow.
pub fn sum(data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: sum_avx2 only needs AVX2, which the CPU has (checked just above).
        return unsafe { sum_avx2(data) };
    }
    sum_any(data)
}

/// [`sum`] compiled for AVX2: the same loop, vectorized four words to an instruction instead
/// of two (the aggregation engine checks the TCP checksum of every segment it merges).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn sum_avx2(data: &[u8]) -> u32 {
    sum_any(data)
}

/// [`sum`] for any CPU of the target.
#[inline(always)]
fn sum_any(data: &[u8]) -> u32 {
    let mut acc: u64 = 0;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        acc += u64::from(u32::from_ne_bytes([c[0], c[1], c[2], c[3]]));
    }
    let rem = chunks.remainder();
    let mut tail = [0u8; 4];
    tail[..rem.len()].copy_from_slice(rem);
    acc += u64::from(u32::from_ne_bytes(tail));
    u32::from(u16::from_be(fold(acc)))
}

fn fold64_to_32(s: u64) -> u32 {
    let s = (s & 0xffff_ffff) + (s >> 32);
    // s ≤ 2^33 - 2, so one more fold fits in 32 bits.
    ((s & 0xffff_ffff) + (s >> 32)) as u32
}

/// Folds a sum to 16 bits with end-around carry. Not complemented: store `!fold(s)`.
pub fn fold(sum: impl Into<u64>) -> u16 {
    let mut s: u64 = sum.into();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// One's-complement addition of two sums (the first over an even number of bytes).
pub fn combine(a: u32, b: u32) -> u32 {
    let (s, carry) = a.overflowing_add(b);
    // With a carry, s ≤ 2^32 - 2, so adding it back cannot overflow.
    s + u32::from(carry)
}

/// The complemented checksum of `data` as it goes in a header field.
pub fn checksum(data: &[u8]) -> u16 {
    !fold(sum(data))
}

/// Sum of the IPv4 pseudo-header (RFC 9293 section 3.1): addresses, zero, protocol, and the
/// transport length (header + payload).
pub fn pseudo_header_v4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, len: u32) -> u32 {
    let a = u32::from(src);
    let b = u32::from(dst);
    let s = u64::from(a >> 16)
        + u64::from(a & 0xffff)
        + u64::from(b >> 16)
        + u64::from(b & 0xffff)
        + u64::from(proto)
        + u64::from(len >> 16)
        + u64::from(len & 0xffff);
    fold64_to_32(s)
}

/// Sum of the IPv6 pseudo-header (RFC 8200 section 8.1): addresses, 32-bit upper-layer length,
/// next header.
pub fn pseudo_header_v6(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, len: u32) -> u32 {
    let s: u64 = src
        .segments()
        .iter()
        .chain(dst.segments().iter())
        .map(|&w| u64::from(w))
        .sum::<u64>()
        + u64::from(len >> 16)
        + u64::from(len & 0xffff)
        + u64::from(next_header);
    fold64_to_32(s)
}

/// The TCP checksum of an IPv4 packet (pseudo-header + segment up to `total_len`) is correct.
/// False when the protocol is not TCP.
pub fn tcp_v4_valid(ip: &ipv4::Packet<&[u8]>) -> bool {
    if ip.protocol() != ipv4::PROTO_TCP {
        return false;
    }
    let seg = ip.payload();
    let Ok(len) = u32::try_from(seg.len()) else {
        return false;
    };
    let ph = pseudo_header_v4(ip.src_addr(), ip.dst_addr(), ipv4::PROTO_TCP, len);
    fold(combine(ph, sum(seg))) == 0xffff
}

/// The TCP checksum of an IPv6 packet whose next header is TCP is correct. False when the next
/// header is not TCP (extension headers are not walked).
pub fn tcp_v6_valid(ip: &ipv6::Packet<&[u8]>) -> bool {
    if ip.next_header() != ipv4::PROTO_TCP {
        return false;
    }
    let seg = ip.payload();
    let Ok(len) = u32::try_from(seg.len()) else {
        return false;
    };
    let ph = pseudo_header_v6(ip.src_addr(), ip.dst_addr(), ipv4::PROTO_TCP, len);
    fold(combine(ph, sum(seg))) == 0xffff
}

/// Completes a `CHECKSUM_PARTIAL` checksum the way Linux `skb_checksum_help` does: the 16-bit
/// field at `csum_start + csum_offset` holds the pseudo-header seed; sum `frame[csum_start..]`
/// (seed included) and store the complement there. A result of 0 is stored as 0xffff
/// (`CSUM_MANGLED_0`): equivalent for TCP, required for UDP where 0 means "no checksum".
///
/// `Err(ChecksumOutOfRange)` when the 2-byte field does not lie inside the frame (or the offsets
/// overflow); the frame is then unchanged.
pub fn complete_partial(
    frame: &mut [u8],
    csum_start: usize,
    csum_offset: usize,
) -> Result<(), Error> {
    let at = csum_start
        .checked_add(csum_offset)
        .ok_or(Error::ChecksumOutOfRange)?;
    let end = at.checked_add(2).ok_or(Error::ChecksumOutOfRange)?;
    if end > frame.len() {
        return Err(Error::ChecksumOutOfRange);
    }
    let mut c = !fold(sum(&frame[csum_start..]));
    if c == 0 {
        c = 0xffff;
    }
    frame[at..end].copy_from_slice(&c.to_be_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{slow_sum, tcp4, SYN4, SYN6, UDP4};
    use proptest::prelude::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(&d)), 0xddf2);
        assert_eq!(checksum(&d), !0xddf2);
    }

    #[test]
    fn odd_length_pads_with_zero() {
        assert_eq!(fold(sum(&[0xab])), 0xab00);
        assert_eq!(fold(sum(&[0x12, 0x34, 0x56])), 0x1234 + 0x5600);
        assert_eq!(sum(&[]), 0);
    }

    #[test]
    fn all_ones_does_not_overflow() {
        let d = vec![0xff; 4099];
        assert_eq!(fold(sum(&d)), slow_sum(&d));
    }

    #[test]
    fn fold_and_combine_carry() {
        assert_eq!(fold(0x1_fffeu32), 0xffff);
        assert_eq!(fold(0xffff_ffff_ffffu64), 0xffff);
        assert_eq!(combine(0xffff_ffff, 1), 1);
        assert_eq!(combine(0x8000_0000, 0x8000_0000), 1);
    }

    #[test]
    fn captured_ipv4_tcp_is_valid() {
        let ip = ipv4::Packet::new_checked(&SYN4[..]).unwrap();
        assert!(ip.verify_checksum());
        assert!(tcp_v4_valid(&ip));
        let mut bad = SYN4;
        bad[59] ^= 0x01;
        assert!(!tcp_v4_valid(&ipv4::Packet::new_checked(&bad[..]).unwrap()));
    }

    #[test]
    fn captured_ipv4_udp_checksum_matches() {
        // Odd-length datagram: the pseudo-header + segment must fold to 0xffff.
        let ip = ipv4::Packet::new_checked(&UDP4[..]).unwrap();
        assert!(!tcp_v4_valid(&ip), "not TCP");
        let ph = pseudo_header_v4(ip.src_addr(), ip.dst_addr(), 17, 13);
        assert_eq!(fold(combine(ph, sum(ip.payload()))), 0xffff);
    }

    #[test]
    fn captured_ipv6_tcp_is_valid() {
        let ip = ipv6::Packet::new_checked(&SYN6[..]).unwrap();
        assert!(tcp_v6_valid(&ip));
        let mut bad = SYN6;
        bad[8] ^= 0x80; // source address is covered by the pseudo-header
        assert!(!tcp_v6_valid(&ipv6::Packet::new_checked(&bad[..]).unwrap()));
        let mut udp = SYN6;
        udp[6] = 17;
        assert!(!tcp_v6_valid(&ipv6::Packet::new_checked(&udp[..]).unwrap()));
    }

    #[test]
    fn constructed_tcp_is_valid() {
        for n in [0usize, 1, 7, 8, 9, 1448] {
            let payload: Vec<u8> = (0..n).map(|i| (i * 7 + 3) as u8).collect();
            let p = tcp4(0xfffffff0, 77, &payload);
            let ip = ipv4::Packet::new_checked(&p[..]).unwrap();
            assert!(ip.verify_checksum(), "{n}");
            assert!(tcp_v4_valid(&ip), "{n}");
        }
    }

    #[test]
    fn complete_partial_matches_full_checksum() {
        // Put the pseudo-header seed where the checksum was (what a CHECKSUM_PARTIAL sender
        // hands over), prefix an Ethernet header, and complete.
        let mut f = crate::fixtures::eth(crate::ethernet::ETHERTYPE_IPV4, &SYN4);
        let ip = ipv4::Packet::new_checked(&SYN4[..]).unwrap();
        let seed = fold(pseudo_header_v4(ip.src_addr(), ip.dst_addr(), 6, 40));
        f[14 + 20 + 16..14 + 20 + 18].copy_from_slice(&seed.to_be_bytes());
        complete_partial(&mut f, 34, 16).unwrap();
        assert_eq!(&f[14..], &SYN4[..]);
    }

    #[test]
    fn complete_partial_udp_odd_length() {
        let mut p = UDP4;
        let ip = ipv4::Packet::new_checked(&UDP4[..]).unwrap();
        let seed = fold(pseudo_header_v4(ip.src_addr(), ip.dst_addr(), 17, 13));
        p[26..28].copy_from_slice(&seed.to_be_bytes());
        complete_partial(&mut p, 20, 6).unwrap();
        assert_eq!(p, UDP4);
    }

    #[test]
    fn complete_partial_zero_becomes_ffff() {
        // Sum of 0xffff → complement 0 → stored as 0xffff.
        let mut b = [0xff, 0xff, 0x00, 0x00];
        complete_partial(&mut b, 0, 2).unwrap();
        assert_eq!(b, [0xff, 0xff, 0xff, 0xff]);
    }

    #[test]
    fn complete_partial_field_at_the_very_end() {
        let mut b = [0x12, 0x34, 0x00, 0x00];
        complete_partial(&mut b, 0, 2).unwrap();
        assert_eq!(u16::from_be_bytes([b[2], b[3]]), !0x1234);
    }

    #[test]
    fn complete_partial_rejects_field_past_end() {
        let mut b = [0u8; 10];
        assert_eq!(
            complete_partial(&mut b, 4, 5),
            Err(Error::ChecksumOutOfRange)
        );
        assert_eq!(
            complete_partial(&mut b, 11, 0),
            Err(Error::ChecksumOutOfRange)
        );
        assert_eq!(b, [0u8; 10]);
    }

    #[test]
    fn complete_partial_rejects_overflow() {
        let mut b = [0u8; 10];
        assert_eq!(
            complete_partial(&mut b, usize::MAX, 1),
            Err(Error::ChecksumOutOfRange)
        );
        assert_eq!(
            complete_partial(&mut b, 0, usize::MAX - 1),
            Err(Error::ChecksumOutOfRange)
        );
    }

    proptest! {
        #[test]
        fn sum_matches_reference(d in proptest::collection::vec(any::<u8>(), 0..2000)) {
            prop_assert_eq!(fold(sum(&d)), slow_sum(&d));
            // Whichever path `sum` took on this CPU, the portable one agrees too.
            prop_assert_eq!(fold(sum_any(&d)), slow_sum(&d));
        }

        #[test]
        fn combine_matches_concatenation(
            a in proptest::collection::vec(any::<u8>(), 0..200),
            b in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let mut a = a;
            if a.len() % 2 == 1 { a.pop(); }
            let whole: Vec<u8> = a.iter().chain(b.iter()).copied().collect();
            prop_assert_eq!(fold(combine(sum(&a), sum(&b))), slow_sum(&whole));
        }

        #[test]
        fn complete_partial_never_panics(
            mut d in proptest::collection::vec(any::<u8>(), 0..64),
            s in 0usize..80,
            o in 0usize..80,
        ) {
            let _ = complete_partial(&mut d, s, o);
        }
    }
}
