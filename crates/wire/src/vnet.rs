//! `struct virtio_net_hdr` (10 bytes, little endian on the machines pvnet runs on), as used by
//! TAP devices opened with `IFF_VNET_HDR` and by AF_PACKET sockets with `PACKET_VNET_HDR`.
//! Layout: flags u8, gso_type u8, hdr_len u16, gso_size u16, csum_start u16, csum_offset u16.

/// Length of the header on the wire.
pub const VNET_HDR_LEN: usize = 10;

/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`: the checksum at `csum_start + csum_offset` must be completed.
pub const F_NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_F_DATA_VALID`: the checksum has been verified.
pub const F_DATA_VALID: u8 = 2;

pub const GSO_NONE: u8 = 0;
pub const GSO_TCPV4: u8 = 1;
pub const GSO_UDP: u8 = 3;
pub const GSO_TCPV6: u8 = 4;
/// Flag bit in `gso_type`: the sender saw ECN CWR.
pub const GSO_ECN: u8 = 0x80;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VirtioNetHdr {
    pub flags: u8,
    pub gso_type: u8,
    pub hdr_len: u16,
    pub gso_size: u16,
    pub csum_start: u16,
    pub csum_offset: u16,
}

impl VirtioNetHdr {
    /// Parses the first [`VNET_HDR_LEN`] bytes; `None` when `b` is shorter.
    pub fn parse(b: &[u8]) -> Option<VirtioNetHdr> {
        if b.len() < VNET_HDR_LEN {
            return None;
        }
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        Some(VirtioNetHdr {
            flags: b[0],
            gso_type: b[1],
            hdr_len: u16_at(2),
            gso_size: u16_at(4),
            csum_start: u16_at(6),
            csum_offset: u16_at(8),
        })
    }

    /// The header as it goes on the wire.
    pub fn to_bytes(&self) -> [u8; VNET_HDR_LEN] {
        let mut o = [0u8; VNET_HDR_LEN];
        o[0] = self.flags;
        o[1] = self.gso_type;
        o[2..4].copy_from_slice(&self.hdr_len.to_le_bytes());
        o[4..6].copy_from_slice(&self.gso_size.to_le_bytes());
        o[6..8].copy_from_slice(&self.csum_start.to_le_bytes());
        o[8..10].copy_from_slice(&self.csum_offset.to_le_bytes());
        o
    }

    /// The GSO type without the ECN bit.
    pub fn gso_kind(&self) -> u8 {
        self.gso_type & !GSO_ECN
    }

    pub fn needs_csum(&self) -> bool {
        self.flags & F_NEEDS_CSUM != 0
    }

    pub fn data_valid(&self) -> bool {
        self.flags & F_DATA_VALID != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let h = VirtioNetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: GSO_TCPV4 | GSO_ECN,
            hdr_len: 66,
            gso_size: 1448,
            csum_start: 34,
            csum_offset: 16,
        };
        let b = h.to_bytes();
        assert_eq!(VirtioNetHdr::parse(&b), Some(h));
        assert_eq!(h.gso_kind(), GSO_TCPV4);
        assert!(h.needs_csum() && !h.data_valid());
    }

    #[test]
    fn short_input_rejected() {
        assert_eq!(VirtioNetHdr::parse(&[0u8; 9]), None);
    }
}
