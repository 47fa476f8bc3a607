//! IPv6 fixed header (RFC 8200), without extension header parsing (`flow::parse_tcp` walks the
//! few that LRO skips): [`Packet::next_header`] says
//! what follows the 40-byte header, and [`Packet::payload`] is everything after it up to
//! `payload_len` (bytes beyond it are link-layer padding).

use std::net::Ipv6Addr;

use crate::{be, Error};

/// Length of the fixed header.
pub const HEADER_LEN: usize = 40;

/// Next-header values that are IPv6 extension headers (RFC 8200 section 4, IANA registry).
pub const EXT_HEADERS: [u8; 9] = [0, 43, 44, 50, 51, 60, 135, 139, 140];

/// True for next-header values that are extension headers rather than upper-layer protocols.
pub fn is_ext_header(next_header: u8) -> bool {
    EXT_HEADERS.contains(&next_header)
}

/// Hop-by-hop options.
pub const NH_HOP_BY_HOP: u8 = 0;
/// Routing header.
pub const NH_ROUTING: u8 = 43;
/// Fragment header.
pub const NH_FRAGMENT: u8 = 44;
/// Destination options.
pub const NH_DEST_OPTS: u8 = 60;

/// The extension headers that Linux GRO walks over to reach TCP (those registered with
/// `INET6_PROTO_GSO_EXTHDR` in `net/ipv6/exthdrs_offload.c`: routing, destination options and,
/// since 6.0, hop-by-hop). All three share the layout next header, length in 8-byte units
/// not counting the first 8 (`ipv6_optlen`).
pub fn is_gro_ext_header(next_header: u8) -> bool {
    matches!(next_header, NH_HOP_BY_HOP | NH_ROUTING | NH_DEST_OPTS)
}

mod field {
    use std::ops::Range;

    pub const VER_TC_FLOW: usize = 0;
    pub const PAYLOAD_LEN: usize = 4;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: Range<usize> = 8..24;
    pub const DST: Range<usize> = 24..40;
}

/// A zero-copy view of an IPv6 packet.
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

    /// Checks: 40 bytes present (`Truncated`), version 6 (`BadIpVersion`), payload length within
    /// the buffer (`Truncated`).
    pub fn check_len(&self) -> Result<(), Error> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.version() != 6 {
            return Err(Error::BadIpVersion);
        }
        if usize::from(self.payload_len()) > len - HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_TC_FLOW] >> 4
    }

    pub fn traffic_class(&self) -> u8 {
        (be::u16_at(self.buffer.as_ref(), field::VER_TC_FLOW) >> 4) as u8
    }

    /// The 20-bit flow label.
    pub fn flow_label(&self) -> u32 {
        be::u32_at(self.buffer.as_ref(), field::VER_TC_FLOW) & 0x000f_ffff
    }

    pub fn payload_len(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::PAYLOAD_LEN)
    }

    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_HEADER]
    }

    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    pub fn src_addr(&self) -> Ipv6Addr {
        addr(&self.buffer.as_ref()[field::SRC])
    }

    pub fn dst_addr(&self) -> Ipv6Addr {
        addr(&self.buffer.as_ref()[field::DST])
    }

    /// Bytes after the fixed header up to `payload_len` (clamped to the buffer).
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let end = (HEADER_LEN + usize::from(self.payload_len())).min(b.len());
        &b[HEADER_LEN..end]
    }
}

fn addr(b: &[u8]) -> Ipv6Addr {
    let mut a = [0u8; 16];
    a.copy_from_slice(b);
    Ipv6Addr::from(a)
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_payload_len(&mut self, v: u16) {
        be::put_u16(self.buffer.as_mut(), field::PAYLOAD_LEN, v);
    }

    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field::NEXT_HEADER] = v;
    }

    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = v;
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = (HEADER_LEN + usize::from(self.payload_len())).min(self.buffer.as_ref().len());
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::SYN6;

    #[test]
    fn parses_captured_syn() {
        let p = Packet::new_checked(&SYN6[..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.traffic_class(), 0x00);
        assert_eq!(p.flow_label(), 0x9e663);
        assert_eq!(p.payload_len(), 40);
        assert_eq!(p.next_header(), 6);
        assert_eq!(p.hop_limit(), 64);
        assert_eq!(p.src_addr(), "fd00::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.dst_addr(), "fd00::2".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.payload(), &SYN6[40..]);
        assert!(!is_ext_header(p.next_header()) && is_ext_header(44));
    }

    #[test]
    fn traffic_class_spans_two_bytes() {
        let mut b = SYN6;
        b[0] = 0x6a;
        b[1] = 0xb9;
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.traffic_class(), 0xab);
        assert_eq!(p.flow_label(), 0x9e663);
    }

    #[test]
    fn padding_is_excluded_and_setters_work() {
        let mut b = SYN6.to_vec();
        b.extend_from_slice(&[0xee; 4]);
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        assert_eq!(p.payload().len(), 40);
        p.set_payload_len(20);
        p.set_next_header(17);
        p.set_hop_limit(1);
        assert_eq!(
            (p.payload_len(), p.next_header(), p.hop_limit()),
            (20, 17, 1)
        );
        assert_eq!(p.payload_mut().len(), 20);
        p.set_payload_len(0xffff); // broken on purpose: payload() clamps
        assert_eq!(p.payload().len(), 44);
    }

    #[test]
    fn reject_short_buffer() {
        assert_eq!(
            Packet::new_checked(&SYN6[..39]).unwrap_err(),
            Error::Truncated
        );
    }

    #[test]
    fn reject_bad_version() {
        let mut b = SYN6;
        b[0] = 0x46;
        assert_eq!(
            Packet::new_checked(&b[..]).unwrap_err(),
            Error::BadIpVersion
        );
    }

    #[test]
    fn reject_payload_len_beyond_buffer() {
        assert_eq!(
            Packet::new_checked(&SYN6[..79]).unwrap_err(),
            Error::Truncated
        );
    }
}
