//! Port GRO through the data path: frames the kernel coalesced at the physical port (GSO type,
//! `gso_size`, partial checksum in their `virtio_net_hdr`) cross netback's GSO extra slot and
//! come out of a real netfront with the header the guest's TAP is written with; headers the
//! frame does not bear out are dropped and counted; pvnet's own LRO stacks on top.

use crate::dp_common;
use crate::lro_common;

use dp_common::*;
use lro_common::{slow_sum, tcp_csum_ok, Seg, MAC_DST};
use pvnet_dd::lro::Policy;
use pvnet_wire::vnet::{self, VirtioNetHdr};

/// A frame as the ring hands over what GRO made of `segs` MSS-sized segments from `seq` on:
/// one TCP packet, its check field the pseudo-header seed, with `NEEDS_CSUM` and the GSO type.
fn coalesced(v6: bool, seq: u32, segs: usize, mss: usize) -> (Vec<u8>, VirtioNetHdr, Vec<u8>) {
    let payload: Vec<u8> = (0..segs * mss)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[1])
        .collect();
    let s = if v6 {
        Seg::v6(seq, &payload)
    } else {
        Seg::v4(seq, &payload)
    };
    let (f, mut v) = s.build_partial();
    v.gso_type = if v6 { vnet::GSO_TCPV6 } else { vnet::GSO_TCPV4 };
    v.gso_size = mss as u16;
    // The kernel says the linear part's length here, not the headers'.
    v.hdr_len = 128;
    (f, v, payload)
}

/// Completes the partial checksum at `csum_start + csum_offset` as the guest's stack would
/// (the sum from `csum_start` to the end, the seed included), and returns the frame.
fn complete(f: &[u8], h: &VirtioNetHdr) -> Vec<u8> {
    let mut b = f.to_vec();
    let (start, at) = (
        usize::from(h.csum_start),
        usize::from(h.csum_start + h.csum_offset),
    );
    let c = !slow_sum(&b[start..]);
    b[at..at + 2].copy_from_slice(&c.to_be_bytes());
    b
}

#[test]
fn a_coalesced_frame_reaches_the_guest_as_one_gso_packet_with_its_checksum_state() {
    let (mut dp, _clock, mut g) = path_with(&[MAC_DST], None, 64);
    // IPv4 with timestamps (MSS 1448, 45 segments: 65,226 bytes, the most GRO builds here),
    // and IPv6 (MSS 1428).
    let cases = [
        coalesced(false, 1000, 45, 1448),
        coalesced(true, 5000, 20, 1428),
    ];
    for (f, v, _) in &cases {
        dp.phy_mut().unwrap().rx.push_back((*v, f.clone()));
    }
    pass(&mut dp);
    let got = g[0].take();
    assert_eq!(got.len(), 2, "one packet per coalesced frame");
    for ((f, v, payload), (h, bytes)) in cases.iter().zip(&got) {
        assert_eq!(bytes, f, "bytes intact");
        let v6 = v.gso_kind() == vnet::GSO_TCPV6;
        let l4: u16 = if v6 { 54 } else { 34 };
        // The header netfront writes into the TAP: one GSO packet of the wire's segment size,
        // its checksum partial at the TCP checksum field, hdr_len the real headers' length.
        assert_eq!(
            *h,
            VirtioNetHdr {
                flags: vnet::F_NEEDS_CSUM,
                gso_type: v.gso_type,
                hdr_len: l4 + 32,
                gso_size: v.gso_size,
                csum_start: l4,
                csum_offset: 16,
            }
        );
        // Completing it as the guest's stack does gives the right TCP checksum over the whole
        // aggregate: the seed was the kernel's, left as it was.
        assert!(!tcp_csum_ok(bytes), "still partial on the way");
        assert!(tcp_csum_ok(&complete(bytes, h)));
        assert_eq!(&bytes[usize::from(l4) + 32..], &payload[..]);
    }
    let nb = dp.vif_stats(1).unwrap();
    assert_eq!((nb.rx_packets, nb.rx_gso_packets), (2, 2));
    // The guest's aggregation rate counts the wire segments each packet carried.
    let segments: usize = (cases.iter())
        .map(|(_, v, payload)| payload.len().div_ceil(usize::from(v.gso_size)))
        .sum();
    assert!(segments > 2 * 10, "{segments}");
    assert_eq!(nb.rx_segments, segments as u64);
    // 65,226 bytes take 16 pages and the extra slot; 28,634 take 7 and the extra slot.
    assert_eq!(nb.rx_slots, 17 + 8);
    assert_eq!(dp.stats.port_refused.total(), 0);
    assert_eq!(g[0].nf.stats.rx_gso_packets, 2);
}

#[test]
fn headers_the_frame_does_not_bear_out_are_dropped_and_counted() {
    let (mut dp, _clock, mut g) = path_with(&[MAC_DST], None, 64);
    let (f, v, _) = coalesced(false, 1, 10, 1448);
    let bad = [
        // Unknown flag bits.
        VirtioNetHdr { flags: 0x81, ..v },
        // An aggregate nobody verified.
        VirtioNetHdr { flags: 0, ..v },
        // IPv6 GSO on an IPv4 frame; gso_size 0.
        VirtioNetHdr {
            gso_type: vnet::GSO_TCPV6,
            ..v
        },
        VirtioNetHdr { gso_size: 0, ..v },
        // The partial checksum placed elsewhere than the TCP checksum.
        VirtioNetHdr {
            csum_start: 30,
            ..v
        },
        VirtioNetHdr {
            csum_offset: 6,
            ..v
        },
    ];
    for h in bad {
        dp.phy_mut().unwrap().rx.push_back((h, f.clone()));
    }
    // A cut aggregate: its IP length says more than the frame holds.
    dp.phy_mut()
        .unwrap()
        .rx
        .push_back((v, f[..f.len() - 100].to_vec()));
    // And the good one last: it alone arrives.
    dp.phy_mut().unwrap().rx.push_back((v, f.clone()));
    pass(&mut dp);
    let got = g[0].take();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1, f);
    let r = dp.stats.port_refused;
    assert_eq!(
        (r.odd_flags, r.gso_unchecked, r.gso_mismatch, r.csum_offsets),
        (1, 1, 3, 2)
    );
    // Every frame was taken from the port, refused ones included.
    assert_eq!(dp.stats.frames, 8);
    assert_eq!(dp.vif_stats(1).unwrap().rx_packets, 1);
}

#[test]
fn a_segment_gro_did_not_merge_arrives_unverified_for_the_guest_to_check() {
    // GRO does not merge a segment whose checksum is bad: it comes as it came, flags 0. It is
    // handed on with flags 0, so the guest's stack verifies (and drops) it.
    let (mut dp, _clock, mut g) = path_with(&[MAC_DST], None, 64);
    let mut f = Seg::v4(77, &[0x5a; 1448]).build();
    let n = f.len();
    f[n - 1] ^= 0xff;
    assert!(!tcp_csum_ok(&f));
    dp.phy_mut().unwrap().inject(&f);
    pass(&mut dp);
    let got = g[0].take();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1, f);
    assert_eq!(got[0].0.flags, 0, "not marked valid, not partial");
    assert_eq!(got[0].0.gso_type, vnet::GSO_NONE);
}

#[test]
fn pvnet_lro_stacks_on_port_gro() {
    // Coalesced frames pass the engine whole (counted as GSO input); the MTU segments between
    // them (what GRO did not merge) are aggregated by pvnet. The guest gets every byte, in
    // order, with GSO metadata on both kinds of aggregate.
    let (mut dp, _clock, mut g) = path_with(&[MAC_DST], Some(Policy::Poll), 64);
    let mss = 1448;
    let (a, va, pa) = coalesced(false, 0, 20, mss);
    let tail: Vec<Vec<u8>> = (0..8)
        .map(|i| {
            let seq = (20 * mss + i * mss) as u32;
            Seg::v4(seq, &pa[..mss]).build()
        })
        .collect();
    let q = &mut dp.phy_mut().unwrap().rx;
    q.push_back((va, a.clone()));
    for t in &tail {
        q.push_back((VirtioNetHdr::default(), t.clone()));
    }
    pass(&mut dp);
    let got = g[0].take();
    assert_eq!(got.len(), 2, "the port's aggregate and pvnet's");
    assert_eq!(got[0].1, a);
    assert_eq!(got[0].0.gso_size, mss as u16);
    assert_eq!(got[1].0.gso_type, vnet::GSO_TCPV4);
    assert_eq!(got[1].0.gso_size, mss as u16);
    let payload_of = |b: &[u8]| b[66..].to_vec();
    assert_eq!(payload_of(&got[1].1), pa[..mss].repeat(8));
    let l = dp.lro_stats().unwrap();
    assert_eq!((l.flush.gso_input, l.passthrough), (1, 1), "{l:?}");
}
