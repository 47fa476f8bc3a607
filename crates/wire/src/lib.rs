//! Packet views and checksums for pvnet: Ethernet, IPv4, IPv6, TCP, the Internet checksum, a
//! one-pass TCP flow summary for LRO ([`flow`]), and the `virtio_net_hdr` that the kernel puts in
//! front of frames on TAP devices and `PACKET_VNET_HDR` sockets.
//!
//! Contract (after smoltcp's `wire`): untrusted bytes go through `new_checked`; once it has
//! succeeded no accessor panics. Views are zero-copy wrappers `View<T: AsRef<[u8]>>` over a byte
//! buffer; setters exist when `T: AsMut<[u8]>`. `new_unchecked` is for buffers the caller built
//! itself; on such a view getters of fields beyond the buffer may panic.

pub mod checksum;
pub mod ethernet;
/// Captured packets and an independent checksum reference, for tests (here and, with the
/// `fixtures` feature, in other crates' tests).
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod flow;
pub mod ipv4;
pub mod ipv6;
pub mod tcp;
pub mod vnet;

use std::fmt;

pub use ethernet::MacAddr;
pub use flow::{parse_tcp, FlowKey, TcpMeta};
pub use tcp::TcpFlags;
pub use vnet::VirtioNetHdr;

/// Why bytes were rejected. One variant per reason so that callers (LRO, bridge, netback) can
/// keep one counter per variant.
///
/// Naming rule: `Truncated` means the buffer is shorter than what a header (or a length field in
/// it) claims; the `Bad*` variants mean fields that are inconsistent on their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Error {
    /// The buffer is shorter than a fixed header, or than a length field says.
    Truncated,
    /// Ethertype VLAN (802.1Q): tagged frames are not parsed by [`flow::parse_tcp`].
    Vlan,
    /// An ethertype other than IPv4 / IPv6 where IP was expected.
    NotIp,
    /// The IP version nibble does not match the view (or the ethertype).
    BadIpVersion,
    /// IPv4 IHL below 5.
    BadIhl,
    /// IPv4 total length smaller than the header length.
    BadTotalLen,
    /// An IPv4 fragment (MF set or a non-zero fragment offset).
    Fragment,
    /// The IPv6 next header is an extension header (hop-by-hop, routing, fragment, ...): the
    /// packet may well carry TCP, but not directly after the fixed header.
    Ipv6ExtHeader,
    /// The transport protocol is not TCP.
    NotTcp,
    /// TCP data offset below 5.
    BadTcpHeaderLen,
    /// `csum_start + csum_offset + 2` lies beyond the frame (or overflows).
    ChecksumOutOfRange,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Error::Truncated => "buffer shorter than the header or length field claims",
            Error::Vlan => "VLAN-tagged frame",
            Error::NotIp => "ethertype is neither IPv4 nor IPv6",
            Error::BadIpVersion => "wrong IP version",
            Error::BadIhl => "IPv4 header length below 20 bytes",
            Error::BadTotalLen => "IPv4 total length smaller than its header",
            Error::Fragment => "IPv4 fragment",
            Error::Ipv6ExtHeader => "IPv6 extension header",
            Error::NotTcp => "transport protocol is not TCP",
            Error::BadTcpHeaderLen => "TCP data offset below 20 bytes",
            Error::ChecksumOutOfRange => "checksum start/offset beyond the frame",
        };
        f.write_str(s)
    }
}

impl std::error::Error for Error {}

/// Big-endian reads and writes at fixed offsets; callers have checked the bounds.
pub(crate) mod be {
    pub fn u16_at(b: &[u8], at: usize) -> u16 {
        u16::from_be_bytes([b[at], b[at + 1]])
    }

    pub fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }

    pub fn put_u16(b: &mut [u8], at: usize, v: u16) {
        b[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }

    pub fn put_u32(b: &mut [u8], at: usize, v: u32) {
        b[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }
}
