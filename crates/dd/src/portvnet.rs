//! The physical port's receive metadata, checked against the frame it describes.
//!
//! With `PACKET_VNET_HDR` the kernel puts a `virtio_net_hdr` in front of every frame in the
//! packet ring: whether the transport checksum was verified (`DATA_VALID`) or is partial
//! (`NEEDS_CSUM`, with `csum_start`/`csum_offset`), and, for what GRO on the port coalesced (or
//! a local sender's TSO left whole), the GSO type and `gso_size`. The data path hands that
//! header on to netback, which turns it into the guest's RX flags and GSO extra slot, and the
//! guest's TAP believes it: a GSO packet marked partial is not verified again.
//!
//! So the header is taken as the kernel hands it over, but not on trust: before a frame enters
//! the data path, [`check`] holds the header against the frame's own headers, and a frame
//! whose header says something the frame does not bear out is dropped and counted by reason
//! ([`PortVnetStats`]). What is checked:
//! - `flags` has no bits besides `NEEDS_CSUM` and `DATA_VALID` (Linux's
//!   `virtio_net_hdr_from_skb` sets at most one of them);
//! - `NEEDS_CSUM` points at the transport checksum field the frame's headers place
//!   (`csum_start` at the TCP/UDP header, `csum_offset` 16 or 6), as Linux's
//!   `skb_checksum_setup` would find it;
//! - a TCP GSO frame (`GSO_TCPV4`/`GSO_TCPV6`, ECN bit allowed) is TCP over that IP version,
//!   has a non-zero `gso_size`, an IP length that is the frame's, and a checksum state
//!   (`NEEDS_CSUM` or `DATA_VALID`): an unverified aggregate would otherwise reach the guest
//!   marked partial, its payload never checked by anyone. GRO verifies every segment it
//!   merges; a segment with a bad checksum is not merged and arrives as it came, flags 0, for
//!   the guest's stack to verify and drop.
//!
//! `hdr_len` is not compared: the kernel fills it with the length of the skb's linear part,
//! not the headers' (netfront recomputes it from the frame). Other GSO kinds (UDP) pass here;
//! netback segments or drops them, counted, as it does for any packet a frontend cannot take.

use pvnet_netif::csum::csum_setup;
use pvnet_wire::vnet::{self, VirtioNetHdr};
use serde::Serialize;

/// Why a frame's header was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `flags` bits other than `NEEDS_CSUM` and `DATA_VALID`.
    OddFlags,
    /// A GSO frame with neither `NEEDS_CSUM` nor `DATA_VALID`.
    GsoUnchecked,
    /// A TCP GSO frame that is not TCP over the GSO type's IP version, has `gso_size` 0, or an
    /// IP length other than the frame's.
    GsoMismatch,
    /// `NEEDS_CSUM` whose offsets do not point at the frame's transport checksum.
    CsumOffsets,
}

/// Frames the port's header check refused, by reason (`pvnet stat`: `daemon.port_refused`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PortVnetStats {
    pub odd_flags: u64,
    pub gso_unchecked: u64,
    pub gso_mismatch: u64,
    pub csum_offsets: u64,
}

impl PortVnetStats {
    /// Counts one refusal.
    pub fn count(&mut self, r: Refusal) {
        let c = match r {
            Refusal::OddFlags => &mut self.odd_flags,
            Refusal::GsoUnchecked => &mut self.gso_unchecked,
            Refusal::GsoMismatch => &mut self.gso_mismatch,
            Refusal::CsumOffsets => &mut self.csum_offsets,
        };
        *c += 1;
    }

    /// All refusals.
    pub fn total(&self) -> u64 {
        self.odd_flags + self.gso_unchecked + self.gso_mismatch + self.csum_offsets
    }
}

const ETH_HLEN: usize = 14;

/// Checks `vnet` against `frame` (see the module documentation).
pub fn check(vnet: &VirtioNetHdr, frame: &[u8]) -> Result<(), Refusal> {
    if vnet.flags & !(vnet::F_NEEDS_CSUM | vnet::F_DATA_VALID) != 0 {
        return Err(Refusal::OddFlags);
    }
    let kind = vnet.gso_kind();
    let tcp_gso = matches!(kind, vnet::GSO_TCPV4 | vnet::GSO_TCPV6);
    if kind != vnet::GSO_NONE && !vnet.needs_csum() && !vnet.data_valid() {
        return Err(Refusal::GsoUnchecked);
    }
    if !vnet.needs_csum() && !tcp_gso {
        return Ok(());
    }
    // Both cases need the headers placed.
    let setup = csum_setup(frame);
    if tcp_gso {
        let Some(s) = setup else {
            return Err(Refusal::GsoMismatch);
        };
        if s.proto != 6 || s.ipv6 != (kind == vnet::GSO_TCPV6) || vnet.gso_size == 0 {
            return Err(Refusal::GsoMismatch);
        }
        // csum_setup saw at least the fixed IP header, so these bytes are there.
        let ip_len = if s.ipv6 {
            40 + usize::from(u16::from_be_bytes([frame[18], frame[19]]))
        } else {
            usize::from(u16::from_be_bytes([frame[16], frame[17]]))
        };
        if ETH_HLEN + ip_len != frame.len() {
            return Err(Refusal::GsoMismatch);
        }
    }
    if vnet.needs_csum() {
        match setup {
            Some(s) if s.csum_start == vnet.csum_start && s.csum_offset == vnet.csum_offset => {}
            _ => return Err(Refusal::CsumOffsets),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet + IPv4 + TCP frame with `payload` bytes, IP length set.
    fn tcp4(payload: usize) -> Vec<u8> {
        let mut f = vec![0u8; 54 + payload];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&((40 + payload) as u16).to_be_bytes());
        f[23] = 6;
        f[46] = 5 << 4;
        f
    }

    fn tcp6(payload: usize) -> Vec<u8> {
        let mut f = vec![0u8; 74 + payload];
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        f[14] = 0x60;
        f[18..20].copy_from_slice(&((20 + payload) as u16).to_be_bytes());
        f[20] = 6;
        f[54 + 12] = 5 << 4;
        f
    }

    fn gso(kind: u8, start: u16) -> VirtioNetHdr {
        VirtioNetHdr {
            flags: vnet::F_NEEDS_CSUM,
            gso_type: kind,
            hdr_len: 54,
            gso_size: 1448,
            csum_start: start,
            csum_offset: 16,
        }
    }

    #[test]
    fn what_gro_hands_over_passes() {
        // A coalesced IPv4 frame, as the ring delivers it (hdr_len is the linear part's).
        let f = tcp4(45 * 1448);
        let mut v = gso(vnet::GSO_TCPV4, 34);
        v.hdr_len = 1200;
        assert_eq!(check(&v, &f), Ok(()));
        assert_eq!(check(&gso(vnet::GSO_TCPV4 | vnet::GSO_ECN, 34), &f), Ok(()));
        assert_eq!(check(&gso(vnet::GSO_TCPV6, 54), &tcp6(3 * 1428)), Ok(()));
        // Verified, not partial: a GSO frame may also be DATA_VALID.
        let dv = VirtioNetHdr {
            flags: vnet::F_DATA_VALID,
            csum_start: 0,
            csum_offset: 0,
            ..gso(vnet::GSO_TCPV4, 0)
        };
        assert_eq!(check(&dv, &f), Ok(()));
        // Plain frames: no flags, verified, or partial at the right place.
        assert_eq!(check(&VirtioNetHdr::default(), &[0u8; 3]), Ok(()));
        let valid = VirtioNetHdr {
            flags: vnet::F_DATA_VALID,
            ..Default::default()
        };
        assert_eq!(check(&valid, &tcp4(100)), Ok(()));
        let partial = VirtioNetHdr {
            flags: vnet::F_NEEDS_CSUM,
            csum_start: 34,
            csum_offset: 16,
            ..Default::default()
        };
        assert_eq!(check(&partial, &tcp4(100)), Ok(()));
        // UDP GSO is netback's business.
        let udp = VirtioNetHdr {
            flags: vnet::F_DATA_VALID,
            gso_type: vnet::GSO_UDP,
            ..Default::default()
        };
        assert_eq!(check(&udp, &tcp4(10)), Ok(()));
    }

    #[test]
    fn odd_headers_are_refused_by_reason() {
        let f = tcp4(3000);
        let odd = VirtioNetHdr {
            flags: 0x04,
            ..Default::default()
        };
        assert_eq!(check(&odd, &f), Err(Refusal::OddFlags));
        let unchecked = VirtioNetHdr {
            flags: 0,
            ..gso(vnet::GSO_TCPV4, 34)
        };
        assert_eq!(check(&unchecked, &f), Err(Refusal::GsoUnchecked));
        // Wrong IP version for the GSO type, either way.
        assert_eq!(
            check(&gso(vnet::GSO_TCPV6, 34), &f),
            Err(Refusal::GsoMismatch)
        );
        assert_eq!(
            check(&gso(vnet::GSO_TCPV4, 54), &tcp6(3000)),
            Err(Refusal::GsoMismatch)
        );
        // gso_size 0.
        let zero = VirtioNetHdr {
            gso_size: 0,
            ..gso(vnet::GSO_TCPV4, 34)
        };
        assert_eq!(check(&zero, &f), Err(Refusal::GsoMismatch));
        // IP length disagreeing with the frame (a cut or padded aggregate).
        assert_eq!(
            check(&gso(vnet::GSO_TCPV4, 34), &f[..f.len() - 1]),
            Err(Refusal::GsoMismatch)
        );
        let mut padded = f.clone();
        padded.push(0);
        assert_eq!(
            check(&gso(vnet::GSO_TCPV4, 34), &padded),
            Err(Refusal::GsoMismatch)
        );
        // UDP under a TCP GSO type; no IP at all; headers cut short.
        let mut udp = f.clone();
        udp[23] = 17;
        assert_eq!(
            check(&gso(vnet::GSO_TCPV4, 34), &udp),
            Err(Refusal::GsoMismatch)
        );
        assert_eq!(
            check(&gso(vnet::GSO_TCPV4, 34), &[0u8; 60]),
            Err(Refusal::GsoMismatch)
        );
        assert_eq!(
            check(&gso(vnet::GSO_TCPV4, 34), &f[..40]),
            Err(Refusal::GsoMismatch)
        );
        // NEEDS_CSUM pointing elsewhere than the TCP checksum, or past the frame.
        for (start, off) in [
            (30u16, 16u16),
            (34, 6),
            (34, 17),
            (60000, 16),
            (u16::MAX, u16::MAX),
        ] {
            let v = VirtioNetHdr {
                flags: vnet::F_NEEDS_CSUM,
                csum_start: start,
                csum_offset: off,
                ..Default::default()
            };
            assert_eq!(check(&v, &f), Err(Refusal::CsumOffsets), "{start}/{off}");
            let g = VirtioNetHdr {
                csum_start: start,
                csum_offset: off,
                ..gso(vnet::GSO_TCPV4, 0)
            };
            assert_eq!(check(&g, &f), Err(Refusal::CsumOffsets), "{start}/{off}");
        }
        // NEEDS_CSUM on a frame whose headers cannot be placed.
        let v = VirtioNetHdr {
            flags: vnet::F_NEEDS_CSUM,
            csum_start: 34,
            csum_offset: 16,
            ..Default::default()
        };
        assert_eq!(check(&v, &[0u8; 20]), Err(Refusal::CsumOffsets));
    }

    #[test]
    fn counters_by_reason() {
        let mut s = PortVnetStats::default();
        for r in [
            Refusal::OddFlags,
            Refusal::GsoMismatch,
            Refusal::GsoMismatch,
            Refusal::CsumOffsets,
        ] {
            s.count(r);
        }
        assert_eq!(
            (s.odd_flags, s.gso_unchecked, s.gso_mismatch, s.csum_offsets),
            (1, 0, 2, 1)
        );
        assert_eq!(s.total(), 4);
    }

    #[test]
    fn never_panics_on_garbage() {
        // Every header against short and odd frames: an answer, never a panic.
        let frames: Vec<Vec<u8>> = vec![
            vec![],
            vec![0x08; 15],
            tcp4(0)[..34].to_vec(),
            tcp6(0)[..60].to_vec(),
            tcp4(10),
        ];
        for f in &frames {
            for flags in [0u8, 1, 2, 3, 0xff] {
                for kind in [0u8, 1, 3, 4, 5, 0x81, 0xff] {
                    for start in [0u16, 14, 34, 54, u16::MAX] {
                        let v = VirtioNetHdr {
                            flags,
                            gso_type: kind,
                            hdr_len: start,
                            gso_size: start,
                            csum_start: start,
                            csum_offset: start,
                        };
                        let _ = check(&v, f);
                    }
                }
            }
        }
    }
}
