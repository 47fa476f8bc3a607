//! TCP segment headers (RFC 9293) and their options.
//!
//! [`Segment::new_checked`] requires the fixed 20-byte header, a data offset of at least 5 and
//! the whole header (options included) inside the buffer. Options are walked with
//! [`TcpOptionIter`], which stops at EOL and at the first malformed option.

use std::fmt;
use std::ops::BitOr;

use crate::{be, Error};

/// Length of the header without options.
pub const HEADER_LEN: usize = 20;

/// Option kinds used by pvnet.
pub const OPT_EOL: u8 = 0;
pub const OPT_NOP: u8 = 1;
pub const OPT_MSS: u8 = 2;
pub const OPT_WSCALE: u8 = 3;
pub const OPT_SACK_PERM: u8 = 4;
pub const OPT_SACK: u8 = 5;
pub const OPT_TIMESTAMP: u8 = 8;

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const SEQ: usize = 4;
    pub const ACK: usize = 8;
    pub const DATA_OFF: usize = 12;
    pub const FLAGS: usize = 13;
    pub const WINDOW: usize = 14;
    pub const CHECKSUM: usize = 16;
    pub const URGENT: usize = 18;
    pub const OPTIONS: usize = 20;
}

/// The eight flag bits of byte 13.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TcpFlags(pub u8);

impl TcpFlags {
    pub const FIN: TcpFlags = TcpFlags(0x01);
    pub const SYN: TcpFlags = TcpFlags(0x02);
    pub const RST: TcpFlags = TcpFlags(0x04);
    pub const PSH: TcpFlags = TcpFlags(0x08);
    pub const ACK: TcpFlags = TcpFlags(0x10);
    pub const URG: TcpFlags = TcpFlags(0x20);
    pub const ECE: TcpFlags = TcpFlags(0x40);
    pub const CWR: TcpFlags = TcpFlags(0x80);

    pub const fn bits(self) -> u8 {
        self.0
    }

    /// All bits of `other` are set.
    pub const fn contains(self, other: TcpFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Some bit of `other` is set.
    pub const fn intersects(self, other: TcpFlags) -> bool {
        self.0 & other.0 != 0
    }

    pub const fn union(self, other: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 | other.0)
    }

    pub const fn without(self, other: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 & !other.0)
    }
}

impl BitOr for TcpFlags {
    type Output = TcpFlags;
    fn bitor(self, rhs: TcpFlags) -> TcpFlags {
        self.union(rhs)
    }
}

impl fmt::Debug for TcpFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [&str; 8] = ["FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR"];
        f.write_str("TcpFlags(")?;
        let mut first = true;
        for (i, n) in NAMES.iter().enumerate() {
            if self.0 & (1 << i) != 0 {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(n)?;
                first = false;
            }
        }
        f.write_str(")")
    }
}

/// A zero-copy view of a TCP segment (header and payload).
#[derive(Debug, Clone)]
pub struct Segment<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Segment<T> {
    /// Wraps without checking; only for buffers the caller built itself.
    pub fn new_unchecked(buffer: T) -> Segment<T> {
        Segment { buffer }
    }

    /// Wraps `buffer` after [`Segment::check_len`].
    pub fn new_checked(buffer: T) -> Result<Segment<T>, Error> {
        let s = Segment::new_unchecked(buffer);
        s.check_len()?;
        Ok(s)
    }

    /// Checks: 20 bytes present (`Truncated`), data offset ≥ 5 (`BadTcpHeaderLen`), header
    /// within the buffer (`Truncated`).
    pub fn check_len(&self) -> Result<(), Error> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let hl = self.header_len();
        if hl < HEADER_LEN {
            return Err(Error::BadTcpHeaderLen);
        }
        if hl > len {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn src_port(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::SRC_PORT)
    }

    pub fn dst_port(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::DST_PORT)
    }

    pub fn seq_number(&self) -> u32 {
        be::u32_at(self.buffer.as_ref(), field::SEQ)
    }

    pub fn ack_number(&self) -> u32 {
        be::u32_at(self.buffer.as_ref(), field::ACK)
    }

    /// Header length in bytes (data offset × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::DATA_OFF] >> 4) * 4
    }

    pub fn flags(&self) -> TcpFlags {
        TcpFlags(self.buffer.as_ref()[field::FLAGS])
    }

    pub fn window(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::WINDOW)
    }

    pub fn checksum(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::CHECKSUM)
    }

    pub fn urgent_ptr(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::URGENT)
    }

    /// Header length clamped into `[20, len]` so that getters never panic.
    fn hl_clamped(&self) -> usize {
        let len = self.buffer.as_ref().len();
        self.header_len().clamp(HEADER_LEN.min(len), len)
    }

    /// Option bytes (between the fixed header and `header_len`).
    pub fn options(&self) -> &[u8] {
        let hl = self.hl_clamped();
        &self.buffer.as_ref()[field::OPTIONS.min(hl)..hl]
    }

    pub fn options_iter(&self) -> TcpOptionIter<'_> {
        TcpOptionIter::new(self.options())
    }

    /// The timestamp option (TSval, TSecr), if present and well formed.
    pub fn timestamp(&self) -> Option<(u32, u32)> {
        timestamp(self.options())
    }

    /// Everything after the header.
    pub fn payload(&self) -> &[u8] {
        let hl = self.hl_clamped();
        &self.buffer.as_ref()[hl..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Segment<T> {
    pub fn set_src_port(&mut self, v: u16) {
        be::put_u16(self.buffer.as_mut(), field::SRC_PORT, v);
    }

    pub fn set_dst_port(&mut self, v: u16) {
        be::put_u16(self.buffer.as_mut(), field::DST_PORT, v);
    }

    pub fn set_seq_number(&mut self, v: u32) {
        be::put_u32(self.buffer.as_mut(), field::SEQ, v);
    }

    pub fn set_ack_number(&mut self, v: u32) {
        be::put_u32(self.buffer.as_mut(), field::ACK, v);
    }

    pub fn set_flags(&mut self, f: TcpFlags) {
        self.buffer.as_mut()[field::FLAGS] = f.0;
    }

    pub fn set_window(&mut self, v: u16) {
        be::put_u16(self.buffer.as_mut(), field::WINDOW, v);
    }

    pub fn set_checksum(&mut self, v: u16) {
        be::put_u16(self.buffer.as_mut(), field::CHECKSUM, v);
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = self.hl_clamped();
        &mut self.buffer.as_mut()[hl..]
    }
}

/// Finds the timestamp option (kind 8, length 10) in raw option bytes.
pub fn timestamp(options: &[u8]) -> Option<(u32, u32)> {
    TcpOptionIter::new(options).find_map(|(kind, data)| {
        if kind != OPT_TIMESTAMP || data.len() != 8 {
            return None;
        }
        Some((be::u32_at(data, 0), be::u32_at(data, 4)))
    })
}

/// Walks TCP options, yielding `(kind, data)` where `data` excludes the kind and length bytes.
/// NOP is yielded as `(1, &[])`; EOL ends the walk. A length byte below 2 or running past the
/// end stops the walk and sets [`TcpOptionIter::malformed`].
#[derive(Debug, Clone)]
pub struct TcpOptionIter<'a> {
    rest: &'a [u8],
    malformed: bool,
}

impl<'a> TcpOptionIter<'a> {
    pub fn new(options: &'a [u8]) -> TcpOptionIter<'a> {
        TcpOptionIter {
            rest: options,
            malformed: false,
        }
    }

    /// The walk stopped at a malformed option.
    pub fn malformed(&self) -> bool {
        self.malformed
    }
}

impl<'a> Iterator for TcpOptionIter<'a> {
    type Item = (u8, &'a [u8]);

    fn next(&mut self) -> Option<(u8, &'a [u8])> {
        let (&kind, after_kind) = self.rest.split_first()?;
        match kind {
            OPT_EOL => {
                self.rest = &[];
                None
            }
            OPT_NOP => {
                self.rest = after_kind;
                Some((OPT_NOP, &[]))
            }
            _ => {
                let len = after_kind.first().map(|&l| usize::from(l));
                match len {
                    Some(len) if len >= 2 && len <= self.rest.len() => {
                        let data = &self.rest[2..len];
                        self.rest = &self.rest[len..];
                        Some((kind, data))
                    }
                    _ => {
                        self.rest = &[];
                        self.malformed = true;
                        None
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{tcp4, SYN4};

    fn syn() -> &'static [u8] {
        &SYN4[20..]
    }

    #[test]
    fn parses_captured_syn() {
        let s = Segment::new_checked(syn()).unwrap();
        assert_eq!(s.src_port(), 36138);
        assert_eq!(s.dst_port(), 80);
        assert_eq!(s.seq_number(), 0xf05a11f2);
        assert_eq!(s.ack_number(), 0);
        assert_eq!(s.header_len(), 40);
        assert_eq!(s.flags(), TcpFlags::SYN);
        assert_eq!(s.window(), 64240);
        assert_eq!(s.checksum(), 0xe128);
        assert_eq!(s.urgent_ptr(), 0);
        assert_eq!(s.options().len(), 20);
        assert!(s.payload().is_empty());
        assert_eq!(s.timestamp(), Some((0xf0b6c550, 0)));
        let opts: Vec<_> = s.options_iter().collect();
        assert_eq!(
            opts,
            vec![
                (OPT_MSS, &[0x05, 0xb4][..]),
                (OPT_SACK_PERM, &[][..]),
                (OPT_TIMESTAMP, &[0xf0, 0xb6, 0xc5, 0x50, 0, 0, 0, 0][..]),
                (OPT_NOP, &[][..]),
                (OPT_WSCALE, &[10][..]),
            ]
        );
    }

    #[test]
    fn parses_segment_with_payload() {
        let p = tcp4(1000, 2000, b"abcdef");
        let s = Segment::new_checked(&p[20..]).unwrap();
        assert_eq!((s.seq_number(), s.ack_number()), (1000, 2000));
        assert_eq!(s.flags(), TcpFlags::ACK | TcpFlags::PSH);
        assert!(
            s.flags().contains(TcpFlags::ACK) && !s.flags().contains(TcpFlags::ACK | TcpFlags::FIN)
        );
        assert!(s.flags().intersects(TcpFlags::ACK | TcpFlags::FIN));
        assert_eq!(s.payload(), b"abcdef");
        assert_eq!(s.timestamp(), Some((12345, 0xdeadbeef)));
    }

    #[test]
    fn setters() {
        let mut p = tcp4(1, 2, b"x");
        let mut s = Segment::new_checked(&mut p[20..]).unwrap();
        s.set_src_port(1);
        s.set_dst_port(2);
        s.set_seq_number(0xffff_fff0);
        s.set_ack_number(7);
        s.set_flags(TcpFlags::FIN | TcpFlags::ACK);
        s.set_window(9);
        s.set_checksum(0xbeef);
        s.payload_mut()[0] = b'y';
        assert_eq!((s.src_port(), s.dst_port()), (1, 2));
        assert_eq!((s.seq_number(), s.ack_number()), (0xffff_fff0, 7));
        assert_eq!(s.flags(), TcpFlags(0x11));
        assert_eq!((s.window(), s.checksum()), (9, 0xbeef));
        assert_eq!(s.payload(), b"y");
    }

    #[test]
    fn flags_debug() {
        assert_eq!(
            format!("{:?}", TcpFlags::SYN | TcpFlags::ACK),
            "TcpFlags(SYN|ACK)"
        );
        assert_eq!(format!("{:?}", TcpFlags::default()), "TcpFlags()");
        assert_eq!(
            (TcpFlags::SYN | TcpFlags::ACK).without(TcpFlags::SYN),
            TcpFlags::ACK
        );
        assert_eq!(TcpFlags::CWR.bits(), 0x80);
    }

    #[test]
    fn reject_short_buffer() {
        assert_eq!(
            Segment::new_checked(&syn()[..19]).unwrap_err(),
            Error::Truncated
        );
    }

    #[test]
    fn reject_small_data_offset() {
        let mut b = [0u8; 20];
        b[12] = 4 << 4;
        assert_eq!(
            Segment::new_checked(&b[..]).unwrap_err(),
            Error::BadTcpHeaderLen
        );
    }

    #[test]
    fn reject_header_beyond_buffer() {
        assert_eq!(
            Segment::new_checked(&syn()[..39]).unwrap_err(),
            Error::Truncated
        );
    }

    #[test]
    fn option_iter_eol_stops() {
        let o = [OPT_NOP, OPT_EOL, OPT_MSS, 4, 5, 0xb4];
        let mut it = TcpOptionIter::new(&o);
        assert_eq!(it.next(), Some((OPT_NOP, &[][..])));
        assert_eq!(it.next(), None);
        assert!(!it.malformed());
    }

    #[test]
    fn option_iter_length_below_two_is_malformed() {
        for bad_len in [0u8, 1] {
            let o = [OPT_MSS, bad_len, 5, 0xb4];
            let mut it = TcpOptionIter::new(&o);
            assert_eq!(it.next(), None);
            assert!(it.malformed());
        }
    }

    #[test]
    fn option_iter_length_past_end_is_malformed() {
        let o = [OPT_NOP, OPT_TIMESTAMP, 10, 0, 0, 0, 1];
        let mut it = TcpOptionIter::new(&o);
        assert_eq!(it.next(), Some((OPT_NOP, &[][..])));
        assert_eq!(it.next(), None);
        assert!(it.malformed());
        assert_eq!(timestamp(&o), None);
    }

    #[test]
    fn option_iter_missing_length_is_malformed() {
        let mut it = TcpOptionIter::new(&[OPT_NOP, OPT_MSS]);
        assert_eq!(it.next(), Some((OPT_NOP, &[][..])));
        assert_eq!(it.next(), None);
        assert!(it.malformed());
    }

    #[test]
    fn timestamp_with_wrong_length_ignored() {
        let o = [OPT_TIMESTAMP, 6, 0, 0, 0, 1];
        assert_eq!(timestamp(&o), None);
    }
}
