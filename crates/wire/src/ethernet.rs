//! Ethernet II frames (no FCS): destination MAC, source MAC, ethertype, payload.
//!
//! [`Frame::new_checked`] only requires the 14-byte header; the payload may be empty.

use std::fmt;
use std::str::FromStr;

use crate::{be, Error};

/// Length of the Ethernet II header.
pub const HEADER_LEN: usize = 14;

pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_ARP: u16 = 0x0806;
pub const ETHERTYPE_VLAN: u16 = 0x8100;
pub const ETHERTYPE_IPV6: u16 = 0x86DD;

mod field {
    use std::ops::Range;

    pub const DST: Range<usize> = 0..6;
    pub const SRC: Range<usize> = 6..12;
    pub const ETHERTYPE: usize = 12;
    pub const PAYLOAD: usize = 14;
}

/// A 48-bit IEEE 802 MAC address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);
    pub const ZERO: MacAddr = MacAddr([0; 6]);

    /// The first six bytes of `b`, `None` when shorter.
    pub fn from_slice(b: &[u8]) -> Option<MacAddr> {
        let a: [u8; 6] = b.get(..6)?.try_into().ok()?;
        Some(MacAddr(a))
    }

    pub fn as_bytes(&self) -> &[u8; 6] {
        &self.0
    }

    pub fn is_broadcast(&self) -> bool {
        *self == Self::BROADCAST
    }

    /// Group bit (bit 0 of the first byte); true for broadcast too.
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 0x01 != 0
    }

    /// Neither multicast/broadcast nor all zeroes: a valid source address
    /// (Linux `is_valid_ether_addr`).
    pub fn is_unicast(&self) -> bool {
        !self.is_multicast() && !self.is_zero()
    }

    pub fn is_zero(&self) -> bool {
        self.0 == [0; 6]
    }

    /// Locally administered bit (bit 1 of the first byte).
    pub fn is_local(&self) -> bool {
        self.0[0] & 0x02 != 0
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MacAddr({self})")
    }
}

/// `aa:bb:cc:dd:ee:ff` (or `-` separated) did not parse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParseMacAddrError;

impl fmt::Display for ParseMacAddrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid MAC address (want aa:bb:cc:dd:ee:ff)")
    }
}

impl std::error::Error for ParseMacAddrError {}

impl FromStr for MacAddr {
    type Err = ParseMacAddrError;

    /// Six two-digit hex groups separated by `:` or `-` (xenstore's `mac` key uses `:`).
    fn from_str(s: &str) -> Result<MacAddr, ParseMacAddrError> {
        let mut out = [0u8; 6];
        let mut parts = s.split([':', '-']);
        for o in out.iter_mut() {
            let p = parts.next().ok_or(ParseMacAddrError)?;
            if p.len() != 2 {
                return Err(ParseMacAddrError);
            }
            *o = u8::from_str_radix(p, 16).map_err(|_| ParseMacAddrError)?;
        }
        if parts.next().is_some() {
            return Err(ParseMacAddrError);
        }
        Ok(MacAddr(out))
    }
}

/// A zero-copy view of an Ethernet II frame.
#[derive(Debug, Clone)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wraps without checking; only for buffers the caller built itself.
    pub fn new_unchecked(buffer: T) -> Frame<T> {
        Frame { buffer }
    }

    /// Wraps `buffer` after checking it holds at least the 14-byte header.
    pub fn new_checked(buffer: T) -> Result<Frame<T>, Error> {
        let f = Frame::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }

    pub fn check_len(&self) -> Result<(), Error> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn dst(&self) -> MacAddr {
        let b = &self.buffer.as_ref()[field::DST];
        MacAddr([b[0], b[1], b[2], b[3], b[4], b[5]])
    }

    pub fn src(&self) -> MacAddr {
        let b = &self.buffer.as_ref()[field::SRC];
        MacAddr([b[0], b[1], b[2], b[3], b[4], b[5]])
    }

    pub fn ethertype(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::ETHERTYPE)
    }

    /// Everything after the header, including any padding.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    pub fn set_dst(&mut self, mac: MacAddr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&mac.0);
    }

    pub fn set_src(&mut self, mac: MacAddr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&mac.0);
    }

    pub fn set_ethertype(&mut self, ethertype: u16) {
        be::put_u16(self.buffer.as_mut(), field::ETHERTYPE, ethertype);
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARP_FRAME: [u8; 16] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // dst: broadcast
        0x00, 0x16, 0x3e, 0x01, 0x02, 0x03, // src
        0x08, 0x06, // ARP
        0xab, 0xcd, // (start of) payload
    ];

    #[test]
    fn parses_header() {
        let f = Frame::new_checked(&ARP_FRAME[..]).unwrap();
        assert_eq!(f.dst(), MacAddr::BROADCAST);
        assert_eq!(f.src(), MacAddr([0x00, 0x16, 0x3e, 0x01, 0x02, 0x03]));
        assert_eq!(f.ethertype(), ETHERTYPE_ARP);
        assert_eq!(f.payload(), &[0xab, 0xcd]);
    }

    #[test]
    fn header_only_is_accepted() {
        let f = Frame::new_checked(&ARP_FRAME[..HEADER_LEN]).unwrap();
        assert!(f.payload().is_empty());
    }

    #[test]
    fn short_frame_rejected() {
        assert_eq!(
            Frame::new_checked(&ARP_FRAME[..13]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(Frame::new_checked(&[][..]).unwrap_err(), Error::Truncated);
    }

    #[test]
    fn setters_round_trip() {
        let mut buf = [0u8; 20];
        let mut f = Frame::new_checked(&mut buf[..]).unwrap();
        let a = MacAddr([2, 0, 0, 0, 0, 1]);
        let b = MacAddr([2, 0, 0, 0, 0, 2]);
        f.set_dst(a);
        f.set_src(b);
        f.set_ethertype(ETHERTYPE_IPV6);
        f.payload_mut()[0] = 0x60;
        assert_eq!((f.dst(), f.src(), f.ethertype()), (a, b, ETHERTYPE_IPV6));
        assert_eq!(buf[12..15], [0x86, 0xdd, 0x60]);
    }

    #[test]
    fn mac_classes() {
        let uni = MacAddr([0x00, 0x16, 0x3e, 0, 0, 1]);
        let mcast = MacAddr([0x01, 0x00, 0x5e, 0, 0, 1]);
        assert!(uni.is_unicast() && !uni.is_multicast() && !uni.is_broadcast());
        assert!(mcast.is_multicast() && !mcast.is_unicast() && !mcast.is_broadcast());
        assert!(MacAddr::BROADCAST.is_broadcast() && MacAddr::BROADCAST.is_multicast());
        assert!(MacAddr::ZERO.is_zero() && !MacAddr::ZERO.is_unicast());
        assert!(MacAddr([0x02, 0, 0, 0, 0, 1]).is_local());
    }

    #[test]
    fn mac_display_and_parse() {
        let m = MacAddr([0x00, 0x16, 0x3e, 0xaa, 0x0b, 0xff]);
        assert_eq!(m.to_string(), "00:16:3e:aa:0b:ff");
        assert_eq!(format!("{m:?}"), "MacAddr(00:16:3e:aa:0b:ff)");
        assert_eq!("00:16:3E:aa:0b:ff".parse::<MacAddr>(), Ok(m));
        assert_eq!("00-16-3e-aa-0b-ff".parse::<MacAddr>(), Ok(m));
        for bad in [
            "",
            "00:16:3e:aa:0b",
            "00:16:3e:aa:0b:ff:00",
            "0:16:3e:aa:0b:ff",
            "zz:16:3e:aa:0b:ff",
        ] {
            assert_eq!(bad.parse::<MacAddr>(), Err(ParseMacAddrError), "{bad}");
        }
        assert_eq!(
            MacAddr::from_slice(&ARP_FRAME[6..]),
            Some(MacAddr([0x00, 0x16, 0x3e, 1, 2, 3]))
        );
        assert_eq!(MacAddr::from_slice(&[1, 2, 3]), None);
    }
}
