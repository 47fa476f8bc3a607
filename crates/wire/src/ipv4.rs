//! IPv4 headers (RFC 791).
//!
//! [`Packet::new_checked`] accepts a buffer that starts with the IPv4 header and may carry bytes
//! after `total_len` (Ethernet pads short frames to 60 bytes); [`Packet::payload`] stops at
//! `total_len`.

use std::net::Ipv4Addr;

use crate::{be, checksum, Error};

/// Length of the header without options.
pub const HEADER_LEN: usize = 20;

pub const PROTO_ICMP: u8 = 1;
pub const PROTO_TCP: u8 = 6;
pub const PROTO_UDP: u8 = 17;

mod field {
    use std::ops::Range;

    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLG_OFF: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC: Range<usize> = 12..16;
    pub const DST: Range<usize> = 16..20;
}

const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const OFFSET_MASK: u16 = 0x1fff;

/// A zero-copy view of an IPv4 packet.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps without checking; only for buffers the caller built itself.
    pub fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps `buffer` after [`Packet::check_len`].
    pub fn new_checked(buffer: T) -> Result<Packet<T>, Error> {
        let p = Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks, in this order: 20 bytes present (`Truncated`), version 4 (`BadIpVersion`),
    /// IHL ≥ 5 (`BadIhl`), header within the buffer (`Truncated`), total length ≥ header length
    /// (`BadTotalLen`), total length within the buffer (`Truncated`).
    pub fn check_len(&self) -> Result<(), Error> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.version() != 4 {
            return Err(Error::BadIpVersion);
        }
        let hl = self.header_len();
        if hl < HEADER_LEN {
            return Err(Error::BadIhl);
        }
        if hl > len {
            return Err(Error::Truncated);
        }
        let total = usize::from(self.total_len());
        if total < hl {
            return Err(Error::BadTotalLen);
        }
        if total > len {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// Header length in bytes (IHL × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    /// The former TOS byte: DSCP in the upper six bits, ECN in the lower two.
    pub fn dscp_ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN]
    }

    pub fn total_len(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::LENGTH)
    }

    pub fn ident(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::IDENT)
    }

    pub fn dont_frag(&self) -> bool {
        be::u16_at(self.buffer.as_ref(), field::FLG_OFF) & FLAG_DF != 0
    }

    pub fn more_frags(&self) -> bool {
        be::u16_at(self.buffer.as_ref(), field::FLG_OFF) & FLAG_MF != 0
    }

    /// Fragment offset in bytes (the field × 8).
    pub fn frag_offset(&self) -> u16 {
        (be::u16_at(self.buffer.as_ref(), field::FLG_OFF) & OFFSET_MASK) << 3
    }

    /// MF set or a non-zero offset.
    pub fn is_fragment(&self) -> bool {
        be::u16_at(self.buffer.as_ref(), field::FLG_OFF) & (FLAG_MF | OFFSET_MASK) != 0
    }

    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }

    pub fn checksum(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::CHECKSUM)
    }

    pub fn src_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::SRC];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    pub fn dst_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::DST];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// Clamped bounds of (options, payload) so that a setter that broke a length field cannot
    /// make a getter panic.
    fn bounds(&self) -> (usize, usize) {
        let len = self.buffer.as_ref().len();
        let end = usize::from(self.total_len()).min(len);
        let hl = self.header_len().clamp(HEADER_LEN.min(end), end);
        (hl, end)
    }

    /// Option bytes between the fixed header and `header_len`.
    pub fn options(&self) -> &[u8] {
        let (hl, _) = self.bounds();
        &self.buffer.as_ref()[HEADER_LEN.min(hl)..hl]
    }

    /// The payload, from `header_len` up to `total_len` (Ethernet padding excluded).
    pub fn payload(&self) -> &[u8] {
        let (hl, end) = self.bounds();
        &self.buffer.as_ref()[hl..end]
    }

    /// The header checksum sums to 0xffff over the header, options included.
    pub fn verify_checksum(&self) -> bool {
        let (hl, _) = self.bounds();
        checksum::fold(checksum::sum(&self.buffer.as_ref()[..hl])) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_version_ihl(&mut self, header_len: usize) {
        self.buffer.as_mut()[field::VER_IHL] = 0x40 | ((header_len / 4) as u8 & 0x0f);
    }

    pub fn set_dscp_ecn(&mut self, v: u8) {
        self.buffer.as_mut()[field::DSCP_ECN] = v;
    }

    pub fn set_total_len(&mut self, v: u16) {
        be::put_u16(self.buffer.as_mut(), field::LENGTH, v);
    }

    pub fn set_ident(&mut self, v: u16) {
        be::put_u16(self.buffer.as_mut(), field::IDENT, v);
    }

    /// Sets DF, clears MF and the fragment offset.
    pub fn set_unfragmented(&mut self, dont_frag: bool) {
        let v = if dont_frag { FLAG_DF } else { 0 };
        be::put_u16(self.buffer.as_mut(), field::FLG_OFF, v);
    }

    pub fn set_ttl(&mut self, v: u8) {
        self.buffer.as_mut()[field::TTL] = v;
    }

    pub fn set_protocol(&mut self, v: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = v;
    }

    pub fn set_checksum(&mut self, v: u16) {
        be::put_u16(self.buffer.as_mut(), field::CHECKSUM, v);
    }

    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.octets());
    }

    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.octets());
    }

    /// Recomputes the header checksum (options included).
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let (hl, _) = self.bounds();
        let c = !checksum::fold(checksum::sum(&self.buffer.as_ref()[..hl]));
        self.set_checksum(c);
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (hl, end) = self.bounds();
        &mut self.buffer.as_mut()[hl..end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::SYN4 as SYN;

    /// A real IPv4 header (UDP, 192.168.0.1 → 192.168.0.199, checksum 0xb861), the classic
    /// example of RFC 1071 arithmetic, followed by 95 bytes of payload.
    fn udp_packet() -> Vec<u8> {
        let mut v = vec![
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        v.resize(0x73, 0xaa);
        v
    }

    #[test]
    fn parses_real_header() {
        let b = udp_packet();
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.dscp_ecn(), 0);
        assert_eq!(p.total_len(), 0x73);
        assert_eq!(p.ident(), 0);
        assert!(p.dont_frag() && !p.more_frags() && !p.is_fragment());
        assert_eq!(p.frag_offset(), 0);
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), PROTO_UDP);
        assert_eq!(p.checksum(), 0xb861);
        assert_eq!(p.src_addr(), Ipv4Addr::new(192, 168, 0, 1));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(192, 168, 0, 199));
        assert!(p.options().is_empty());
        assert_eq!(p.payload().len(), 0x73 - 20);
        assert!(p.verify_checksum());
    }

    #[test]
    fn parses_captured_syn() {
        let p = Packet::new_checked(&SYN[..]).unwrap();
        assert_eq!(p.ident(), 0x1af8);
        assert_eq!(p.protocol(), PROTO_TCP);
        assert_eq!(p.payload().len(), 40);
        assert!(p.verify_checksum());
    }

    #[test]
    fn padding_after_total_len_is_excluded() {
        let mut b = SYN.to_vec();
        b.extend_from_slice(&[0u8; 6]);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.payload(), &SYN[20..]);
    }

    #[test]
    fn options_are_exposed() {
        // IHL 6: one option word (NOP NOP NOP EOL), total 28.
        let mut b = [0u8; 28];
        b[..20].copy_from_slice(&udp_packet()[..20]);
        b[0] = 0x46;
        b[3] = 28;
        b[20..24].copy_from_slice(&[1, 1, 1, 0]);
        b[24..].copy_from_slice(&[9, 9, 9, 9]);
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        p.fill_checksum();
        assert!(p.verify_checksum());
        assert_eq!(p.header_len(), 24);
        assert_eq!(p.options(), &[1, 1, 1, 0]);
        assert_eq!(p.payload(), &[9, 9, 9, 9]);
    }

    #[test]
    fn fragment_fields() {
        let mut b = udp_packet();
        b[6] = 0x20 | 0x01; // MF, offset 0x100 units
        b[7] = 0x00;
        let p = Packet::new_checked(&b[..]).unwrap();
        assert!(p.more_frags() && !p.dont_frag() && p.is_fragment());
        assert_eq!(p.frag_offset(), 0x100 * 8);
    }

    #[test]
    fn setters_and_fill_checksum() {
        let mut b = udp_packet();
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        p.set_ident(0x1234);
        assert!(!p.verify_checksum());
        p.fill_checksum();
        assert!(p.verify_checksum());
        p.set_total_len(40);
        p.set_checksum(0xdead);
        p.set_ttl(1);
        p.set_dscp_ecn(0x02);
        p.set_unfragmented(false);
        p.set_protocol(PROTO_TCP);
        p.set_src_addr(Ipv4Addr::new(10, 0, 0, 1));
        p.set_dst_addr(Ipv4Addr::new(10, 0, 0, 2));
        assert_eq!(p.ident(), 0x1234);
        assert_eq!(p.total_len(), 40);
        assert_eq!(p.checksum(), 0xdead);
        assert_eq!((p.ttl(), p.dscp_ecn(), p.dont_frag()), (1, 2, false));
        assert_eq!(p.protocol(), PROTO_TCP);
        assert_eq!(p.src_addr(), Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(10, 0, 0, 2));
        assert_eq!(p.payload().len(), 20);
        // A setter that breaks a length field still cannot make a getter panic.
        p.set_total_len(0xffff);
        p.set_version_ihl(60);
        assert_eq!(p.header_len(), 60);
        let _ = (p.options(), p.payload(), p.verify_checksum());
    }

    #[test]
    fn reject_short_buffer() {
        assert_eq!(
            Packet::new_checked(&SYN[..19]).unwrap_err(),
            Error::Truncated
        );
    }

    #[test]
    fn reject_bad_version() {
        let mut b = SYN;
        b[0] = 0x65;
        assert_eq!(
            Packet::new_checked(&b[..]).unwrap_err(),
            Error::BadIpVersion
        );
    }

    #[test]
    fn reject_small_ihl() {
        let mut b = SYN;
        b[0] = 0x44;
        assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), Error::BadIhl);
    }

    #[test]
    fn reject_header_beyond_buffer() {
        let mut b = SYN;
        b[0] = 0x4f; // 60-byte header in a 24-byte buffer
        assert_eq!(Packet::new_checked(&b[..24]).unwrap_err(), Error::Truncated);
    }

    #[test]
    fn reject_total_len_below_header() {
        let mut b = SYN;
        b[2] = 0;
        b[3] = 19;
        assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), Error::BadTotalLen);
    }

    #[test]
    fn reject_total_len_beyond_buffer() {
        assert_eq!(
            Packet::new_checked(&SYN[..59]).unwrap_err(),
            Error::Truncated
        );
    }
}
