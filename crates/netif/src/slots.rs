//! The slot formats of `io/netif.h`, decoded from one copy of the slot's bytes.
//!
//! TX ring entries are 12 bytes (`netif_tx_request`; a response is 4 bytes; an extra-info
//! slot is 8), RX entries 8 bytes (`netif_rx_request` / `netif_rx_response`; an extra-info slot
//! in the response stream). Which interpretation a slot has depends on the slot before it (the
//! `extra_info` flag), so the rings carry raw slots ([`TxSlot`], [`RxSlot`]) and the protocol
//! code decides how to read each one.

use crate::ring::{RingKind, RxRing, TxRing};

/// `NETTXF_csum_blank`: the protocol checksum field is blank (holds the pseudo-header sum).
pub const NETTXF_CSUM_BLANK: u16 = 1 << 0;
/// `NETTXF_data_validated`: the packet data has been validated against the protocol checksum.
pub const NETTXF_DATA_VALIDATED: u16 = 1 << 1;
/// `NETTXF_more_data`: the packet continues in the next request.
pub const NETTXF_MORE_DATA: u16 = 1 << 2;
/// `NETTXF_extra_info`: an extra-info slot follows this request.
pub const NETTXF_EXTRA_INFO: u16 = 1 << 3;

/// `NETRXF_data_validated`.
pub const NETRXF_DATA_VALIDATED: u16 = 1 << 0;
/// `NETRXF_csum_blank`.
pub const NETRXF_CSUM_BLANK: u16 = 1 << 1;
/// `NETRXF_more_data`.
pub const NETRXF_MORE_DATA: u16 = 1 << 2;
/// `NETRXF_extra_info`.
pub const NETRXF_EXTRA_INFO: u16 = 1 << 3;
/// `NETRXF_gso_prefix` (not used by pvnet's backend; recognised so it can be refused).
pub const NETRXF_GSO_PREFIX: u16 = 1 << 4;

pub const XEN_NETIF_EXTRA_TYPE_NONE: u8 = 0;
pub const XEN_NETIF_EXTRA_TYPE_GSO: u8 = 1;
pub const XEN_NETIF_EXTRA_TYPE_MCAST_ADD: u8 = 2;
pub const XEN_NETIF_EXTRA_TYPE_MCAST_DEL: u8 = 3;
pub const XEN_NETIF_EXTRA_TYPE_HASH: u8 = 4;
pub const XEN_NETIF_EXTRA_TYPE_XDP: u8 = 5;
/// One past the last known extra type.
pub const XEN_NETIF_EXTRA_TYPE_MAX: u8 = 6;
/// `XEN_NETIF_EXTRA_FLAG_MORE`: another extra-info slot follows.
pub const XEN_NETIF_EXTRA_FLAG_MORE: u8 = 1 << 0;

pub const XEN_NETIF_GSO_TYPE_NONE: u8 = 0;
pub const XEN_NETIF_GSO_TYPE_TCPV4: u8 = 1;
pub const XEN_NETIF_GSO_TYPE_TCPV6: u8 = 2;

pub const NETIF_RSP_DROPPED: i16 = -2;
pub const NETIF_RSP_ERROR: i16 = -1;
pub const NETIF_RSP_OKAY: i16 = 0;
/// `NETIF_RSP_NULL`: the response to an extra-info slot.
pub const NETIF_RSP_NULL: i16 = 1;

/// `XEN_NETIF_NR_SLOTS_MIN`: slots a backend must accept per packet; more is malicious.
pub const XEN_NETIF_NR_SLOTS_MIN: usize = 18;
/// `XEN_NETIF_MAX_TX_SIZE`: the largest packet the first TX slot can announce.
pub const XEN_NETIF_MAX_TX_SIZE: usize = 0xFFFF;

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}
fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// `netif_tx_request`: gref u32 @0, offset u16 @4, flags u16 @6, id u16 @8, size u16 @10.
/// In the first slot of a packet `size` is the whole packet's size; in later slots, the slot's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxRequest {
    pub gref: u32,
    pub offset: u16,
    pub flags: u16,
    pub id: u16,
    pub size: u16,
}

/// `netif_tx_response`: id u16 @0, status i16 @2.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxResponse {
    pub id: u16,
    pub status: i16,
}

/// `netif_rx_request`: id u16 @0, pad @2, gref u32 @4.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxRequest {
    pub id: u16,
    pub gref: u32,
}

/// `netif_rx_response`: id u16 @0, offset u16 @2, flags u16 @4, status i16 @6 (> 0: bytes in
/// this slot; < 0: an error code).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxResponse {
    pub id: u16,
    pub offset: u16,
    pub flags: u16,
    pub status: i16,
}

/// `netif_extra_info` (8 bytes): type u8 @0, flags u8 @1, then for GSO: size u16 @2, gso type
/// u8 @4, pad @5, features u16 @6.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExtraInfo {
    pub kind: u8,
    pub flags: u8,
    /// The type-specific 6 bytes, kept raw; see [`ExtraInfo::gso`].
    pub data: [u8; 6],
}

/// The GSO variant of an extra-info slot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GsoInfo {
    pub size: u16,
    pub gso_type: u8,
    pub features: u16,
}

impl ExtraInfo {
    pub fn decode(b: &[u8]) -> ExtraInfo {
        let mut data = [0u8; 6];
        data.copy_from_slice(&b[2..8]);
        ExtraInfo {
            kind: b[0],
            flags: b[1],
            data,
        }
    }
    pub fn encode(&self, out: &mut [u8]) {
        out[0] = self.kind;
        out[1] = self.flags;
        out[2..8].copy_from_slice(&self.data);
    }
    pub fn new_gso(g: GsoInfo, more: bool) -> ExtraInfo {
        let mut data = [0u8; 6];
        data[0..2].copy_from_slice(&g.size.to_le_bytes());
        data[2] = g.gso_type;
        data[4..6].copy_from_slice(&g.features.to_le_bytes());
        ExtraInfo {
            kind: XEN_NETIF_EXTRA_TYPE_GSO,
            flags: if more { XEN_NETIF_EXTRA_FLAG_MORE } else { 0 },
            data,
        }
    }
    /// The GSO fields, when this is a GSO slot.
    pub fn gso(&self) -> Option<GsoInfo> {
        (self.kind == XEN_NETIF_EXTRA_TYPE_GSO).then(|| GsoInfo {
            size: u16::from_le_bytes([self.data[0], self.data[1]]),
            gso_type: self.data[2],
            features: u16::from_le_bytes([self.data[4], self.data[5]]),
        })
    }
    pub fn more(&self) -> bool {
        self.flags & XEN_NETIF_EXTRA_FLAG_MORE != 0
    }
}

/// One TX ring slot as copied out of shared memory: a request or an extra-info slot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxSlot(pub [u8; 12]);

impl TxSlot {
    pub fn request(&self) -> TxRequest {
        let b = &self.0;
        TxRequest {
            gref: u32_at(b, 0),
            offset: u16_at(b, 4),
            flags: u16_at(b, 6),
            id: u16_at(b, 8),
            size: u16_at(b, 10),
        }
    }
    pub fn extra(&self) -> ExtraInfo {
        ExtraInfo::decode(&self.0[..8])
    }
    pub fn from_request(r: &TxRequest) -> TxSlot {
        let mut b = [0u8; 12];
        b[0..4].copy_from_slice(&r.gref.to_le_bytes());
        b[4..6].copy_from_slice(&r.offset.to_le_bytes());
        b[6..8].copy_from_slice(&r.flags.to_le_bytes());
        b[8..10].copy_from_slice(&r.id.to_le_bytes());
        b[10..12].copy_from_slice(&r.size.to_le_bytes());
        TxSlot(b)
    }
    pub fn from_extra(e: &ExtraInfo) -> TxSlot {
        let mut b = [0u8; 12];
        e.encode(&mut b[..8]);
        TxSlot(b)
    }
}

/// One RX ring response slot as copied out of shared memory: a response or an extra-info slot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxSlot(pub [u8; 8]);

impl RxSlot {
    pub fn response(&self) -> RxResponse {
        let b = &self.0;
        RxResponse {
            id: u16_at(b, 0),
            offset: u16_at(b, 2),
            flags: u16_at(b, 4),
            status: u16_at(b, 6) as i16,
        }
    }
    pub fn extra(&self) -> ExtraInfo {
        ExtraInfo::decode(&self.0)
    }
    pub fn from_response(r: &RxResponse) -> RxSlot {
        let mut b = [0u8; 8];
        b[0..2].copy_from_slice(&r.id.to_le_bytes());
        b[2..4].copy_from_slice(&r.offset.to_le_bytes());
        b[4..6].copy_from_slice(&r.flags.to_le_bytes());
        b[6..8].copy_from_slice(&r.status.to_le_bytes());
        RxSlot(b)
    }
    pub fn from_extra(e: &ExtraInfo) -> RxSlot {
        let mut b = [0u8; 8];
        e.encode(&mut b);
        RxSlot(b)
    }
}

impl RingKind for TxRing {
    const ENTRY_SIZE: usize = 12;
    type Request = TxSlot;
    type Response = TxResponse;
    fn decode_request(b: &[u8]) -> TxSlot {
        let mut s = [0u8; 12];
        s.copy_from_slice(&b[..12]);
        TxSlot(s)
    }
    fn encode_request(req: &TxSlot, out: &mut [u8]) {
        out[..12].copy_from_slice(&req.0);
    }
    fn decode_response(b: &[u8]) -> TxResponse {
        TxResponse {
            id: u16_at(b, 0),
            status: u16_at(b, 2) as i16,
        }
    }
    fn encode_response(r: &TxResponse, out: &mut [u8]) {
        out[0..2].copy_from_slice(&r.id.to_le_bytes());
        out[2..4].copy_from_slice(&r.status.to_le_bytes());
        out[4..12].fill(0);
    }
}

impl RingKind for RxRing {
    const ENTRY_SIZE: usize = 8;
    type Request = RxRequest;
    type Response = RxSlot;
    fn decode_request(b: &[u8]) -> RxRequest {
        RxRequest {
            id: u16_at(b, 0),
            gref: u32_at(b, 4),
        }
    }
    fn encode_request(r: &RxRequest, out: &mut [u8]) {
        out[0..2].copy_from_slice(&r.id.to_le_bytes());
        out[2..4].fill(0);
        out[4..8].copy_from_slice(&r.gref.to_le_bytes());
    }
    fn decode_response(b: &[u8]) -> RxSlot {
        let mut s = [0u8; 8];
        s.copy_from_slice(&b[..8]);
        RxSlot(s)
    }
    fn encode_response(r: &RxSlot, out: &mut [u8]) {
        out[..8].copy_from_slice(&r.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tx_request_layout() {
        let r = TxRequest {
            gref: 0x0403_0201,
            offset: 0x0605,
            flags: 0x0807,
            id: 0x0a09,
            size: 0x0c0b,
        };
        let s = TxSlot::from_request(&r);
        assert_eq!(s.0, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        assert_eq!(s.request(), r);
    }

    #[test]
    fn rx_response_layout_and_negative_status() {
        let r = RxResponse {
            id: 0x0201,
            offset: 0x0403,
            flags: NETRXF_MORE_DATA,
            status: NETIF_RSP_ERROR,
        };
        let s = RxSlot::from_response(&r);
        assert_eq!(&s.0[..6], &[1, 2, 3, 4, 4, 0]);
        assert_eq!(&s.0[6..], &[0xff, 0xff]);
        assert_eq!(s.response(), r);
    }

    #[test]
    fn rx_request_layout() {
        let mut b = [0xEEu8; 8];
        RxRing::encode_request(
            &RxRequest {
                id: 0x0201,
                gref: 0x0807_0605,
            },
            &mut b,
        );
        assert_eq!(b, [1, 2, 0, 0, 5, 6, 7, 8]);
        assert_eq!(
            RxRing::decode_request(&b),
            RxRequest {
                id: 0x0201,
                gref: 0x0807_0605
            }
        );
    }

    #[test]
    fn tx_response_layout() {
        let mut b = [0xEEu8; 12];
        TxRing::encode_response(
            &TxResponse {
                id: 3,
                status: NETIF_RSP_DROPPED,
            },
            &mut b,
        );
        assert_eq!(&b[..4], &[3, 0, 0xfe, 0xff]);
        assert_eq!(
            TxRing::decode_response(&b),
            TxResponse { id: 3, status: -2 }
        );
    }

    #[test]
    fn gso_extra_round_trip() {
        let g = GsoInfo {
            size: 1448,
            gso_type: XEN_NETIF_GSO_TYPE_TCPV4,
            features: 0,
        };
        let e = ExtraInfo::new_gso(g, false);
        let s = TxSlot::from_extra(&e);
        assert_eq!(s.0[0], XEN_NETIF_EXTRA_TYPE_GSO);
        assert_eq!(&s.0[2..4], &1448u16.to_le_bytes());
        assert_eq!(s.extra().gso(), Some(g));
        assert!(!s.extra().more());
        let r = RxSlot::from_extra(&ExtraInfo::new_gso(g, true));
        assert_eq!(r.extra().gso(), Some(g));
        assert!(r.extra().more());
    }

    #[test]
    fn non_gso_extra_has_no_gso_view() {
        let e = ExtraInfo {
            kind: XEN_NETIF_EXTRA_TYPE_MCAST_ADD,
            flags: 0,
            data: [1, 2, 3, 4, 5, 6],
        };
        assert_eq!(e.gso(), None);
    }
}
