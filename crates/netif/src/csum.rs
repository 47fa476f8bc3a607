//! Checksum offsets for `csum_blank` packets: what Linux netback and netfront do with
//! `skb_checksum_setup` before handing a packet with a blank checksum to a stack. The ring
//! carries only the flag; the position of the checksum field is found by parsing the headers.

use pvnet_wire::ipv6;
use pvnet_wire::vnet::{self, VirtioNetHdr};

use crate::slots::{GsoInfo, XEN_NETIF_GSO_TYPE_TCPV4, XEN_NETIF_GSO_TYPE_TCPV6};

/// Where the partial checksum lives, and how long the headers are (for GSO `hdr_len`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CsumSetup {
    /// Offset of the transport header from the start of the Ethernet frame.
    pub csum_start: u16,
    /// Offset of the checksum field inside the transport header (16 TCP, 6 UDP).
    pub csum_offset: u16,
    /// Length of all headers up to the payload (TCP: includes options; UDP: 8).
    pub hdr_len: u16,
    /// Transport protocol (6 or 17).
    pub proto: u8,
    /// True for IPv6.
    pub ipv6: bool,
}

/// Parses Ethernet + IPv4/IPv6 + TCP/UDP far enough to place the checksum. IPv6 hop-by-hop,
/// routing and destination options headers are walked over (as Linux `skb_checksum_setup_ipv6`
/// does; LRO aggregates may carry them). `None` for anything else (other protocols, truncated
/// or inconsistent headers, other IPv6 extension headers).
pub fn csum_setup(frame: &[u8]) -> Option<CsumSetup> {
    if frame.len() < 14 {
        return None;
    }
    let ethertype = u16::from_be_bytes([frame[12], frame[13]]);
    let (l4, proto, ipv6) = match ethertype {
        0x0800 => {
            let ip = frame.get(14..34)?;
            if ip[0] >> 4 != 4 {
                return None;
            }
            let ihl = (ip[0] & 0xf) as usize * 4;
            if ihl < 20 || frame.len() < 14 + ihl {
                return None;
            }
            (14 + ihl, ip[9], false)
        }
        0x86DD => {
            let ip = frame.get(14..54)?;
            if ip[0] >> 4 != 6 {
                return None;
            }
            let (mut nh, mut at) = (ip[6], 54usize);
            while ipv6::is_gro_ext_header(nh) {
                let h = frame.get(at..at + 2)?;
                nh = h[0];
                at += (usize::from(h[1]) + 1) * 8;
            }
            frame.get(..at)?;
            (at, nh, true)
        }
        _ => return None,
    };
    let (csum_offset, hdr_len) = match proto {
        6 => {
            let tcp = frame.get(l4..l4 + 20)?;
            let doff = (tcp[12] >> 4) as usize * 4;
            if doff < 20 || frame.len() < l4 + doff {
                return None;
            }
            (16, l4 + doff)
        }
        17 => {
            frame.get(l4..l4 + 8)?;
            (6, l4 + 8)
        }
        _ => return None,
    };
    Some(CsumSetup {
        csum_start: l4 as u16,
        csum_offset,
        hdr_len: hdr_len as u16,
        proto,
        ipv6,
    })
}

/// The `virtio_net_hdr` a stack needs for a packet that crossed the ring with these flags (the
/// same on both rings: netback's TX and netfront's RX). `csum_blank` or GSO means the checksum
/// field holds only the pseudo-header sum, so the header says where it is (`NEEDS_CSUM`);
/// `None` when the headers can't be parsed far enough to say. `head` is the packet's first
/// piece, which holds its headers.
pub fn vnet_hdr_for(
    head: &[u8],
    csum_blank: bool,
    data_validated: bool,
    gso: Option<GsoInfo>,
) -> Option<VirtioNetHdr> {
    let mut h = VirtioNetHdr::default();
    if csum_blank || gso.is_some() {
        let cs = csum_setup(head)?;
        h.flags = vnet::F_NEEDS_CSUM;
        h.csum_start = cs.csum_start;
        h.csum_offset = cs.csum_offset;
        h.hdr_len = cs.hdr_len;
    } else if data_validated {
        h.flags = vnet::F_DATA_VALID;
    }
    if let Some(g) = gso {
        h.gso_size = g.size;
        h.gso_type = xen_gso_to_vnet(g.gso_type);
    }
    Some(h)
}

/// `XEN_NETIF_GSO_TYPE_*` → `VIRTIO_NET_HDR_GSO_*` (the ring carries only TCP types).
pub fn xen_gso_to_vnet(t: u8) -> u8 {
    if t == XEN_NETIF_GSO_TYPE_TCPV6 {
        vnet::GSO_TCPV6
    } else {
        vnet::GSO_TCPV4
    }
}

/// A virtio GSO kind the netif ring has no type for (UDP).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnsupportedGso(pub u8);

/// `VIRTIO_NET_HDR_GSO_*` (ECN bit ignored) → the ring's GSO type: `Ok(None)` for no GSO.
pub fn vnet_gso_to_xen(kind: u8) -> Result<Option<u8>, UnsupportedGso> {
    match kind & !vnet::GSO_ECN {
        vnet::GSO_NONE => Ok(None),
        vnet::GSO_TCPV4 => Ok(Some(XEN_NETIF_GSO_TYPE_TCPV4)),
        vnet::GSO_TCPV6 => Ok(Some(XEN_NETIF_GSO_TYPE_TCPV6)),
        k => Err(UnsupportedGso(k)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp4(ihl_words: u8, doff_words: u8) -> Vec<u8> {
        let mut f = vec![0u8; 14 + ihl_words as usize * 4 + doff_words as usize * 4 + 10];
        f[12] = 0x08;
        f[14] = 0x40 | ihl_words;
        f[14 + 9] = 6;
        f[14 + ihl_words as usize * 4 + 12] = doff_words << 4;
        f
    }

    #[test]
    fn tcp_ipv4_plain_and_with_options() {
        let s = csum_setup(&tcp4(5, 5)).unwrap();
        assert_eq!(
            (s.csum_start, s.csum_offset, s.hdr_len, s.proto),
            (34, 16, 54, 6)
        );
        let s = csum_setup(&tcp4(6, 8)).unwrap();
        assert_eq!((s.csum_start, s.hdr_len), (38, 70));
    }

    #[test]
    fn udp_ipv6() {
        let mut f = vec![0u8; 14 + 40 + 8 + 4];
        f[12] = 0x86;
        f[13] = 0xDD;
        f[14] = 0x60;
        f[14 + 6] = 17;
        let s = csum_setup(&f).unwrap();
        assert_eq!(
            (s.csum_start, s.csum_offset, s.hdr_len, s.ipv6),
            (54, 6, 62, true)
        );
    }

    #[test]
    fn vnet_header_for_ring_flags() {
        let f = tcp4(5, 5);
        let h = vnet_hdr_for(&f, true, true, None).unwrap();
        assert_eq!(
            (h.flags, h.csum_start, h.csum_offset, h.hdr_len),
            (vnet::F_NEEDS_CSUM, 34, 16, 54)
        );
        let g = GsoInfo {
            size: 1448,
            gso_type: XEN_NETIF_GSO_TYPE_TCPV4,
            features: 0,
        };
        let h = vnet_hdr_for(&f, false, false, Some(g)).unwrap();
        assert_eq!(
            (h.flags, h.gso_type, h.gso_size),
            (vnet::F_NEEDS_CSUM, vnet::GSO_TCPV4, 1448)
        );
        assert_eq!(
            vnet_hdr_for(&f, false, true, None).unwrap().flags,
            vnet::F_DATA_VALID
        );
        assert_eq!(
            vnet_hdr_for(&f, false, false, None).unwrap(),
            VirtioNetHdr::default()
        );
        assert_eq!(vnet_hdr_for(&f[..20], true, false, None), None);
    }

    #[test]
    fn gso_type_mapping() {
        assert_eq!(vnet_gso_to_xen(vnet::GSO_NONE), Ok(None));
        assert_eq!(
            vnet_gso_to_xen(vnet::GSO_TCPV4 | vnet::GSO_ECN),
            Ok(Some(XEN_NETIF_GSO_TYPE_TCPV4))
        );
        assert_eq!(
            vnet_gso_to_xen(vnet::GSO_TCPV6),
            Ok(Some(XEN_NETIF_GSO_TYPE_TCPV6))
        );
        assert_eq!(
            vnet_gso_to_xen(vnet::GSO_UDP),
            Err(UnsupportedGso(vnet::GSO_UDP))
        );
        assert_eq!(xen_gso_to_vnet(XEN_NETIF_GSO_TYPE_TCPV6), vnet::GSO_TCPV6);
        assert_eq!(xen_gso_to_vnet(XEN_NETIF_GSO_TYPE_TCPV4), vnet::GSO_TCPV4);
    }

    #[test]
    fn tcp_ipv6_after_extension_headers() {
        // Hop-by-hop (8 bytes) then destination options (16) then TCP with 12 option bytes.
        let mut f = vec![0u8; 14 + 40 + 24 + 32 + 10];
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        f[14] = 0x60;
        f[14 + 6] = 0;
        f[54] = 60;
        f[62] = 6;
        f[63] = 1;
        f[78 + 12] = 8 << 4;
        let s = csum_setup(&f).unwrap();
        assert_eq!(
            (s.csum_start, s.hdr_len, s.proto, s.ipv6),
            (78, 110, 6, true)
        );
        // A chain running past the frame, or ending in a fragment header: no setup.
        f[63] = 200;
        assert_eq!(csum_setup(&f), None);
        f[63] = 1;
        f[62] = 44;
        assert_eq!(csum_setup(&f), None);
    }

    #[test]
    fn rejects_garbage() {
        assert_eq!(csum_setup(&[0u8; 10]), None);
        let mut f = tcp4(5, 5);
        f[14] = 0x44; // IHL 4 words
        assert_eq!(csum_setup(&f), None);
        let mut f = tcp4(5, 5);
        f[14 + 20 + 12] = 0x40; // TCP data offset 4 words
        assert_eq!(csum_setup(&f), None);
        let f = tcp4(5, 15); // TCP header claims 60 bytes, frame shorter
        assert_eq!(csum_setup(&f[..14 + 20 + 40]), None);
        let mut f = tcp4(5, 5);
        f[14 + 9] = 1; // ICMP
        assert_eq!(csum_setup(&f), None);
        let mut f = tcp4(5, 5);
        f[12] = 0x08;
        f[13] = 0x06; // ARP
        assert_eq!(csum_setup(&f), None);
    }
}
