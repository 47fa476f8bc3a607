//! Software GSO: a GSO packet back into wire segments (Linux `tcp_gso_segment`).

use std::borrow::Cow;
use std::net::IpAddr;

use pvnet_wire::checksum;
use pvnet_wire::flow::{parse_tcp, FlowKey};
use pvnet_wire::vnet::{self, VirtioNetHdr};
use pvnet_wire::{ipv6, Error, TcpFlags};
use thiserror::Error;

use crate::packet::Packet;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum SegmentError {
    #[error("GSO packet does not parse as Ethernet + IP + TCP: {0}")]
    Malformed(Error),
    #[error("unsupported GSO type {0:#x} (only TCPV4 and TCPV6)")]
    Unsupported(u8),
    #[error("GSO type {gso_type:#x} does not match the packet's IP version")]
    VersionMismatch { gso_type: u8 },
    #[error("GSO packet with gso_size 0")]
    ZeroGsoSize,
}

/// Cuts a GSO packet (`vnet.gso_type` TCPV4/TCPV6) into segments of `gso_size` payload bytes
/// each, every header (IPv6 extension headers included) copied from the packet's: IPv4 ID + 1 per segment, lengths and IP header checksum, sequence numbers, PSH and FIN
/// only on the last segment, CWR only on the first, the full TCP checksum computed; each
/// segment linear with vnet `DATA_VALID`. A non-GSO packet comes back as one packet, unchanged.
pub fn segment(pkt: &Packet) -> Result<Vec<Packet>, SegmentError> {
    let kind = pkt.vnet.gso_kind();
    let v6 = match kind {
        vnet::GSO_NONE => return Ok(vec![pkt.clone()]),
        vnet::GSO_TCPV4 => false,
        vnet::GSO_TCPV6 => true,
        k => return Err(SegmentError::Unsupported(k)),
    };
    let mss = usize::from(pkt.vnet.gso_size);
    if mss == 0 {
        return Err(SegmentError::ZeroGsoSize);
    }
    let bytes: Cow<[u8]> = if pkt.is_chained() {
        Cow::Owned(pkt.to_vec())
    } else {
        Cow::Borrowed(&pkt.head)
    };
    let m = parse_tcp(&bytes).map_err(SegmentError::Malformed)?;
    if m.is_ipv6() != v6 {
        return Err(SegmentError::VersionMismatch {
            gso_type: pkt.vnet.gso_type,
        });
    }
    let (l3, l4, hdr) = (m.l3_off, m.l4_off, m.payload_off);
    let payload = &bytes[hdr..m.l3_end()];
    let n = payload.len().div_ceil(mss).max(1);
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let chunk = payload
            .get(i * mss..((i + 1) * mss).min(payload.len()))
            .unwrap_or(&[]);
        let mut f = Vec::with_capacity(hdr + chunk.len());
        f.extend_from_slice(&bytes[..hdr]);
        f.extend_from_slice(chunk);
        let tcp_len = f.len() - l4;
        if v6 {
            // The payload length covers the extension headers, copied as they are.
            let payload_len = (f.len() - l3 - ipv6::HEADER_LEN) as u16;
            f[l3 + 4..l3 + 6].copy_from_slice(&payload_len.to_be_bytes());
        } else {
            let total = (f.len() - l3) as u16;
            f[l3 + 2..l3 + 4].copy_from_slice(&total.to_be_bytes());
            let id = m.ip_ident.wrapping_add(i as u16);
            f[l3 + 4..l3 + 6].copy_from_slice(&id.to_be_bytes());
            f[l3 + 10..l3 + 12].fill(0);
            let c = checksum::checksum(&f[l3..l4]);
            f[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
        }
        let seq = m.seq.wrapping_add((i * mss) as u32);
        f[l4 + 4..l4 + 8].copy_from_slice(&seq.to_be_bytes());
        let mut flags = m.flags;
        if i + 1 < n {
            flags = flags.without(TcpFlags::PSH | TcpFlags::FIN);
        }
        if i > 0 {
            flags = flags.without(TcpFlags::CWR);
        }
        f[l4 + 13] = flags.bits();
        f[l4 + 16..l4 + 18].fill(0);
        let Some(pseudo) = pseudo_header(&m.key, tcp_len as u32) else {
            return Err(SegmentError::VersionMismatch {
                gso_type: pkt.vnet.gso_type,
            });
        };
        let c = !checksum::fold(checksum::combine(pseudo, checksum::sum(&f[l4..])));
        f[l4 + 16..l4 + 18].copy_from_slice(&c.to_be_bytes());
        let vnet = VirtioNetHdr {
            flags: vnet::F_DATA_VALID,
            ..VirtioNetHdr::default()
        };
        out.push(Packet::linear(vnet, f));
    }
    Ok(out)
}

/// The TCP pseudo-header sum of `key`'s addresses for a segment of `len` bytes (`None` for
/// addresses of different families, which `parse_tcp` never returns).
fn pseudo_header(key: &FlowKey, len: u32) -> Option<u32> {
    match (key.src, key.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => Some(checksum::pseudo_header_v4(s, d, 6, len)),
        (IpAddr::V6(s), IpAddr::V6(d)) => Some(checksum::pseudo_header_v6(s, d, 6, len)),
        _ => None,
    }
}
