//! The netif ring path in one process: a real `Netfront` (guest crate) and a real `Netback`
//! joined through a real grant table, memfd guest memory and eventfd event channel; and a
//! hostile mock frontend (`pvnet_dd::mock`) that writes anything into the rings.

use std::collections::VecDeque;
use std::sync::Arc;

use proptest::prelude::*;
use pvnet_dd::mock::MockFrontend;
use pvnet_dd::netback::{Fatal, Features, Netback, VifStats};
use pvnet_dd::packet::{Chain, Frag, Packet};
use pvnet_guest::netfront::{Layout, Netfront};
use pvnet_hv::evtchn::channel_pair;
use pvnet_hv::grant::{Hypervisor, GTF_PERMIT_ACCESS};
use pvnet_hv::mem::GuestMemory;
use pvnet_hv::{DomId, PAGE_SIZE};
use pvnet_netif::*;
use pvnet_wire::vnet::{self, VirtioNetHdr};

use crate::ring_common;
use ring_common::*;

// ------------------------------------------------------------------------------ harness

fn all_features() -> Features {
    Features {
        sg: true,
        gso_tcpv4: true,
        gso_tcpv6: false,
        rx_notify: true,
    }
}

fn pair(features: Features) -> Pair {
    let layout = Layout { grant_frames: 4 };
    let mem = Arc::new(GuestMemory::create("guest", layout.pages()).unwrap());
    let hv = Arc::new(Hypervisor::new());
    hv.add_domain(GUEST, mem.clone(), 4);
    let (front_end, back_end) = channel_pair().unwrap();
    let nf = Netfront::new(mem, layout, DomId::DRIVER, front_end).unwrap();
    let nb = Netback::connect(
        hv.clone(),
        GUEST,
        nf.tx_ring_ref(),
        nf.rx_ring_ref(),
        back_end,
        features,
    )
    .unwrap();
    Pair { hv, nf, nb }
}

fn data_valid() -> VirtioNetHdr {
    VirtioNetHdr {
        flags: vnet::F_DATA_VALID,
        ..Default::default()
    }
}

/// Splits `data` into a head and chain pieces of odd sizes (some empty, some crossing pages).
fn chained(vnet: VirtioNetHdr, data: &[u8], rng: &mut XorShift) -> Packet {
    const SIZES: [usize; 9] = [1, 3, 4095, 4097, 7, 0, 1999, 8191, 13];
    let head_len = (14 + rng.below(200)).min(data.len());
    let mut p = Packet {
        vnet,
        head: data[..head_len].into(),
        frags: Vec::new(),
        chain: if rng.below(2) == 0 {
            Chain::FragList
        } else {
            Chain::PageFrags
        },
    };
    let mut off = head_len;
    while off < data.len() {
        let n = SIZES[rng.below(SIZES.len())].min(data.len() - off);
        // Some pieces keep bytes before their data start, as a receive buffer whose headers
        // were pulled does.
        let skip = rng.below(3) * 27;
        let mut buf = vec![0xee; skip];
        buf.extend_from_slice(&data[off..off + n]);
        p.frags.push(Frag {
            buf: buf.into(),
            start: skip,
        });
        off += n;
    }
    p
}

fn rx_slots_of(len: usize, vnet: &VirtioNetHdr) -> u64 {
    (len.div_ceil(PAGE_SIZE) + usize::from(vnet.gso_kind() != vnet::GSO_NONE)) as u64
}

type Delivered = Vec<(VirtioNetHdr, Vec<u8>)>;

fn rx_poll_into(nf: &mut Netfront, out: &mut Delivered) -> usize {
    nf.rx_poll(|h, pieces| {
        out.push((*h, pieces.concat()));
        Ok(())
    })
}

// ------------------------------------------------------------------------------ RX path

#[test]
fn rx_many_sizes_chains_and_gso_wrap_the_ring() {
    let Pair { mut nf, mut nb, .. } = pair(all_features());
    nf.rx_refill();
    let start = nf.resources();
    let mut rng = XorShift(0x1234_5678_9abc_def1);
    const FIXED: [usize; 12] = [
        60, 1514, 4096, 4097, 9000, 65549, 14, 4095, 8192, 8193, 66, 65535,
    ];
    let mut expected: VecDeque<(VirtioNetHdr, Vec<u8>)> = VecDeque::new();
    let mut got: Delivered = Vec::new();
    let (mut n_pkts, mut n_slots, mut n_gso, mut n_bytes) = (0u64, 0u64, 0u64, 0u64);
    let mut n_segs = 0u64;
    let mut seed = 0u32;
    let mut make = |rng: &mut XorShift| -> (Packet, VirtioNetHdr) {
        seed += 1;
        let len = if seed as usize <= FIXED.len() * 2 {
            FIXED[(seed as usize - 1) % FIXED.len()]
        } else {
            match rng.below(4) {
                0 => 60 + rng.below(1500),
                1 => 14 + rng.below(200),
                2 => 4000 + rng.below(10000),
                _ => 66 + rng.below(65549 - 66 + 1),
            }
        };
        // Offload kind: GSO and csum on TCP frames only (netfront must find the headers).
        let kind = if len < 66 { rng.below(2) } else { rng.below(4) };
        let (vnet, data, delivered_hdr) = match kind {
            0 => (
                VirtioNetHdr::default(),
                raw_frame(len, seed),
                VirtioNetHdr::default(),
            ),
            1 => (data_valid(), raw_frame(len, seed), data_valid()),
            2 => (needs_csum(), tcp4_frame(len, seed), needs_csum()),
            _ => (tso(1448), tcp4_frame(len, seed), tso(1448)),
        };
        let pkt = if rng.below(3) == 0 && len > 14 {
            chained(vnet, &data, rng)
        } else {
            Packet::linear(vnet, data)
        };
        (pkt, delivered_hdr)
    };
    let mut rounds = 0;
    while n_pkts < 1500 {
        rounds += 1;
        let burst = 1 + rng.below(40);
        for _ in 0..burst {
            let (pkt, hdr) = make(&mut rng);
            let bytes: Vec<u8> = pkt.pieces().flat_map(|p| p.iter().copied()).collect();
            n_slots += rx_slots_of(bytes.len(), &pkt.vnet);
            n_gso += u64::from(pkt.vnet.gso_kind() != vnet::GSO_NONE);
            n_segs += match pkt.vnet.gso_kind() {
                vnet::GSO_NONE => 1,
                _ => (bytes.len() - usize::from(pkt.vnet.hdr_len))
                    .div_ceil(usize::from(pkt.vnet.gso_size)) as u64,
            };
            n_bytes += bytes.len() as u64;
            n_pkts += 1;
            assert!(nb.rx_enqueue(pkt));
            expected.push_back((hdr, bytes));
        }
        nb.rx_flush().unwrap();
        rx_poll_into(&mut nf, &mut got);
    }
    // Drain what back-pressure kept queued.
    for _ in 0..1000 {
        if nb.rx_queued() == 0 {
            break;
        }
        nb.rx_flush().unwrap();
        rx_poll_into(&mut nf, &mut got);
    }
    assert_eq!(nb.rx_queued(), 0);
    assert!(rounds > 10);
    {
        let mut j = 0;
        let mut shown = 0;
        for (k, (eh, eb)) in expected.iter().enumerate() {
            if j < got.len() && got[j].1 == *eb {
                j += 1;
            } else if shown < 8 {
                shown += 1;
                eprintln!("missing #{k}: len {} hdr {:?}", eb.len(), eh);
            }
        }
    }
    assert_eq!(got.len(), expected.len());
    for (i, ((gh, gb), (eh, eb))) in got.iter().zip(expected.iter()).enumerate() {
        assert_eq!(gb.len(), eb.len(), "packet {i} length");
        assert!(gb == eb, "packet {i} bytes differ");
        assert_eq!(gh, eh, "packet {i} virtio header");
    }
    assert_eq!(nb.stats.rx_packets, n_pkts);
    assert_eq!(nb.stats.rx_slots, n_slots);
    assert_eq!(nb.stats.rx_gso_packets, n_gso);
    assert_eq!(nb.stats.rx_segments, n_segs);
    assert!(n_segs > n_pkts, "GSO packets carried several segments");
    assert_eq!(nb.stats.rx_bytes, n_bytes);
    assert!(
        n_slots > 20 * 256,
        "the ring wrapped many times ({n_slots} slots)"
    );
    assert_eq!(nf.stats.rx_packets, n_pkts);
    assert_eq!(nf.stats.rx_gso_packets, n_gso);
    assert_eq!(nf.stats.rx_bytes, n_bytes);
    assert_eq!(nf.stats.rx_errors + nf.stats.rx_bad_response, 0);
    assert_eq!(nb.fatal(), None);
    // All buffers are posted again and no grant leaked.
    assert_eq!(nf.resources(), start);
}

/// A GSO packet that fits one slot: its extra follows the (only) data slot. Before the fix
/// netfront delivered it before reading the extra (losing gso_size) and pinned the extra on the
/// next packet; and the buffer of the request the extra used up was never reposted.
#[test]
fn rx_one_slot_gso_packet_keeps_its_extra() {
    let Pair { mut nf, mut nb, .. } = pair(all_features());
    nf.rx_refill();
    let start = nf.resources();
    let mut got = Vec::new();
    for round in 0..600u32 {
        let gso = tcp4_frame(1000 + round as usize, round);
        let plain = raw_frame(200, round);
        assert!(nb.rx_enqueue(Packet::linear(tso(536), gso.clone())));
        assert!(nb.rx_enqueue(Packet::linear(VirtioNetHdr::default(), plain.clone())));
        assert_eq!(nb.rx_flush(), Ok(2), "round {round}: buffers leaked");
        got.clear();
        assert_eq!(rx_poll_into(&mut nf, &mut got), 2);
        assert_eq!(got[0], (tso(536), gso));
        assert_eq!(got[1], (VirtioNetHdr::default(), plain));
    }
    assert_eq!(nf.stats.rx_errors, 0);
    assert_eq!(nf.stats.rx_gso_packets, 600);
    assert_eq!(nf.resources(), start);
}

#[test]
fn rx_back_pressure_keeps_everything_in_order() {
    let Pair { mut nf, mut nb, .. } = pair(all_features());
    nf.rx_refill();
    let start = nf.resources();
    let mut expected = Vec::new();
    // 400 packets need far more than 256 slots: 60 B, 9000 B (3 slots), 65549 B GSO (18).
    for i in 0..400u32 {
        let (vnet, data) = match i % 10 {
            3 => (VirtioNetHdr::default(), raw_frame(9000, i)),
            7 => (tso(1448), tcp4_frame(65549, i)),
            _ => (VirtioNetHdr::default(), raw_frame(60, i)),
        };
        assert!(nb.rx_enqueue(Packet::linear(vnet, data.clone())));
        expected.push(data);
    }
    let first = nb.rx_flush().unwrap();
    assert!(first > 0 && first < 400, "flushed {first}");
    assert_eq!(nb.rx_queued(), 400 - first);
    assert!(nb.stats.rx_slots <= 256);
    assert_eq!(nb.stats.rx_packets, first as u64);
    // A second flush without the guest posting buffers moves nothing.
    assert_eq!(nb.rx_flush().unwrap(), 0);
    let mut got = Vec::new();
    let mut rounds = 0;
    while got.len() < 400 {
        rounds += 1;
        assert!(rounds < 100, "no progress");
        rx_poll_into(&mut nf, &mut got);
        nb.rx_flush().unwrap();
    }
    rx_poll_into(&mut nf, &mut got);
    assert_eq!(got.len(), 400);
    for (i, (_, b)) in got.iter().enumerate() {
        assert!(*b == expected[i], "packet {i}");
    }
    assert_eq!(nb.rx_queued(), 0);
    assert_eq!(nb.stats.rx_queue_full, 0);
    assert_eq!(nf.resources(), start);
}

#[test]
fn rx_queue_limit_drops_are_counted() {
    let Pair { mut nf, mut nb, .. } = pair(all_features());
    nb.set_rx_queue_limit(8);
    for i in 0..11u32 {
        let queued = nb.rx_enqueue(Packet::linear(VirtioNetHdr::default(), raw_frame(100, i)));
        assert_eq!(queued, i < 8);
    }
    assert_eq!(nb.stats.rx_queue_full, 3);
    // No buffers posted: nothing moves, nothing is lost.
    assert_eq!(nb.rx_flush().unwrap(), 0);
    assert_eq!(nb.rx_queued(), 8);
    nf.rx_refill();
    assert_eq!(nb.rx_flush().unwrap(), 8);
    let mut got = Vec::new();
    assert_eq!(rx_poll_into(&mut nf, &mut got), 8);
    for (i, (_, b)) in got.iter().enumerate() {
        assert!(*b == raw_frame(100, i as u32));
    }
    // The other RX drops have their own counters.
    assert!(!nb.rx_enqueue(Packet::linear(VirtioNetHdr::default(), vec![0; 13])));
    assert!(!nb.rx_enqueue(Packet::linear(VirtioNetHdr::default(), vec![0; 65550])));
    assert_eq!(nb.stats.rx_bad_length, 2);
    let v6 = VirtioNetHdr {
        gso_type: vnet::GSO_TCPV6,
        gso_size: 1440,
        ..needs_csum()
    };
    assert!(!nb.rx_enqueue(Packet::linear(v6, tcp4_frame(3000, 1))));
    assert_eq!(nb.stats.rx_gso_unsupported, 1);
    assert_eq!(nb.stats.rx_queue_full, 3);
}

#[test]
fn rx_without_sg_drops_multi_page_packets() {
    let Pair { mut nb, .. } = pair(Features {
        sg: false,
        ..all_features()
    });
    assert!(nb.rx_enqueue(Packet::linear(VirtioNetHdr::default(), raw_frame(4096, 0))));
    assert!(!nb.rx_enqueue(Packet::linear(VirtioNetHdr::default(), raw_frame(4097, 0))));
    assert_eq!(nb.stats.rx_no_sg, 1);
}

/// The guest posted some buffers, but fewer than the next packet needs. netback must wait
/// (before the fix, the final check said "requests pending" forever and rx_flush recursed until
/// the stack overflowed).
#[test]
fn rx_too_few_buffers_for_the_next_packet_waits() {
    let (mut m, mut nb) = MockFrontend::connect(20, all_features()).unwrap();
    let mut grefs = Vec::new();
    for i in 0..3u16 {
        let g = m.grant(u32::from(i), false);
        grefs.push(g);
        m.put_rx(i, g.0);
    }
    m.push_rx();
    let data = tcp4_frame(65549, 9);
    assert!(nb.rx_enqueue(Packet::linear(tso(1448), data.clone())));
    assert_eq!(nb.rx_flush(), Ok(0));
    assert_eq!(nb.rx_queued(), 1);
    for i in 3..18u16 {
        let g = m.grant(u32::from(i), false);
        m.put_rx(i, g.0);
    }
    m.push_rx();
    assert_eq!(nb.rx_flush(), Ok(1));
    let rsp = m.take_rx_responses().unwrap();
    assert_eq!(rsp.len(), 18);
    let r0 = rsp[0].response();
    assert_eq!(
        r0.flags & (NETRXF_EXTRA_INFO | NETRXF_MORE_DATA),
        NETRXF_EXTRA_INFO | NETRXF_MORE_DATA
    );
    assert_eq!(rsp[1].extra().gso().unwrap().size, 1448);
    let mut out = Vec::new();
    for (k, s) in rsp.iter().enumerate().filter(|(k, _)| *k != 1) {
        let r = s.response();
        let page = u32::from(r.id);
        out.extend(m.read_data(page, r.offset as usize, r.status as usize));
        assert_eq!(r.flags & NETRXF_MORE_DATA != 0, k + 1 < rsp.len());
    }
    assert!(out == data);
}

/// RX ring indices crossing 2^32 (a mock frontend can start anywhere).
#[test]
fn rx_across_the_index_wrap() {
    let (mut m, mut nb) =
        MockFrontend::connect_at(8, all_features(), RingIdx(u32::MAX - 2)).unwrap();
    for i in 0..8u16 {
        let g = m.grant(u32::from(i), false);
        m.put_rx(i, g.0);
    }
    m.push_rx();
    for i in 0..8u32 {
        assert!(nb.rx_enqueue(Packet::linear(
            VirtioNetHdr::default(),
            raw_frame(100 + i as usize, i)
        )));
    }
    assert_eq!(nb.rx_flush(), Ok(8));
    let rsp = m.take_rx_responses().unwrap();
    assert_eq!(rsp.len(), 8);
    for (i, s) in rsp.iter().enumerate() {
        let r = s.response();
        assert_eq!(r.id, i as u16);
        assert_eq!(r.status, 100 + i as i16);
        assert!(m.read_data(i as u32, 0, 100 + i) == raw_frame(100 + i, i as u32));
    }
}

#[test]
fn rx_notifications_follow_the_event_indices() {
    let Pair { mut nf, mut nb, .. } = pair(all_features());
    nf.rx_refill();
    assert_eq!(
        nb.evtchn().consume(),
        1,
        "first post notifies (req_event = 1)"
    );
    let mut got = Vec::new();
    for i in 0..3u32 {
        nb.rx_enqueue(Packet::linear(VirtioNetHdr::default(), raw_frame(60, i)));
    }
    nb.rx_flush().unwrap();
    assert_eq!(nf.evtchn().consume(), 1);
    // The guest has not looked yet: more responses, no new notification.
    for round in 0..5u32 {
        nb.rx_enqueue(Packet::linear(
            VirtioNetHdr::default(),
            raw_frame(60, round),
        ));
        nb.rx_flush().unwrap();
    }
    assert_eq!(nf.evtchn().consume(), 0);
    assert_eq!(nb.stats.rx_notifications, 1);
    // The guest polls (re-arms rsp_event); netback was not waiting for buffers, so the refill
    // does not notify it.
    assert_eq!(rx_poll_into(&mut nf, &mut got), 8);
    assert_eq!(nb.evtchn().consume(), 0);
    nb.rx_enqueue(Packet::linear(VirtioNetHdr::default(), raw_frame(60, 99)));
    nb.rx_flush().unwrap();
    assert_eq!(nf.evtchn().consume(), 1);
    rx_poll_into(&mut nf, &mut got);
    // Netback runs out of buffers: it asks, and the refill notifies it exactly once.
    for i in 0..300u32 {
        nb.rx_enqueue(Packet::linear(VirtioNetHdr::default(), raw_frame(60, i)));
    }
    nb.rx_flush().unwrap();
    assert!(nb.rx_queued() > 0);
    assert_eq!(nf.evtchn().consume(), 1);
    rx_poll_into(&mut nf, &mut got);
    assert_eq!(
        nb.evtchn().consume(),
        1,
        "refill after netback waited notifies"
    );
    assert_eq!(nb.rx_flush().unwrap(), 300 - 256);
    assert_eq!(nb.rx_queued(), 0);
}

// ------------------------------------------------------------------------------ TX path

fn tx_expect(hdr: &VirtioNetHdr) -> VirtioNetHdr {
    // What netback rebuilds from the slot flags: csum placement comes from csum_setup.
    if hdr.needs_csum() {
        VirtioNetHdr {
            gso_type: hdr.gso_type,
            gso_size: hdr.gso_size,
            ..needs_csum()
        }
    } else if hdr.data_valid() {
        data_valid()
    } else {
        VirtioNetHdr::default()
    }
}

#[test]
fn tx_frames_arrive_byte_exact_and_nothing_leaks() {
    let Pair { hv, mut nf, mut nb } = pair(all_features());
    nf.rx_refill();
    let start = nf.resources();
    let hv_start = hv.stats();
    let mut rng = XorShift(42);
    let mut sent: VecDeque<(VirtioNetHdr, Vec<u8>)> = VecDeque::new();
    let mut got: Vec<Packet> = Vec::new();
    let (mut n_slots, mut n_gso, mut n_bytes) = (0u64, 0u64, 0u64);
    let mut i = 0u32;
    let mut full = 0;
    while i < 3000 {
        let burst = 1 + rng.below(60);
        for _ in 0..burst {
            let (hdr, frame) = match i % 4 {
                0 => (VirtioNetHdr::default(), raw_frame(60, i)),
                1 => (needs_csum(), tcp4_frame(1514, i)),
                2 => (tso(1448), tcp4_frame(65535 - rng.below(3000), i)),
                _ => (data_valid(), raw_frame(14 + rng.below(1504), i)),
            };
            match tap_send(&mut nf, &hdr, &frame).unwrap() {
                Some(n) => {
                    assert_eq!(n, frame.len());
                    let gso = hdr.gso_kind() != vnet::GSO_NONE;
                    n_slots += (frame.len().div_ceil(PAGE_SIZE) + usize::from(gso)) as u64;
                    n_gso += u64::from(gso);
                    n_bytes += frame.len() as u64;
                    sent.push_back((tx_expect(&hdr), frame));
                    i += 1;
                }
                None => {
                    full += 1;
                    break;
                }
            }
        }
        nf.tx_push();
        nb.tx_poll(64, |p| got.push(p)).unwrap();
        nf.tx_complete();
    }
    // Drain.
    nb.tx_poll(usize::MAX, |p| got.push(p)).unwrap();
    nf.tx_complete();
    assert!(
        full > 0,
        "the page pool ran full at least once (back-pressure exercised)"
    );
    assert!(sent.len() >= 3000);
    assert_eq!(got.len(), sent.len());
    for (k, (p, (h, f))) in got.iter().zip(sent.iter()).enumerate() {
        assert!(!p.is_chained());
        assert!(p.head == *f, "frame {k} bytes");
        assert_eq!(p.vnet, *h, "frame {k} header");
    }
    assert_eq!(nb.stats.tx_packets, sent.len() as u64);
    assert_eq!(nb.stats.tx_slots, n_slots);
    assert_eq!(nb.stats.tx_gso_packets, n_gso);
    assert_eq!(nb.stats.tx_bytes, n_bytes);
    assert_eq!(nb.stats.tx_oversize + nb.stats.tx_bad_csum, 0);
    assert_eq!(
        nf.stats.tx_errors + nf.stats.tx_bad_response + nf.stats.tx_dropped,
        0
    );
    assert!(nf.tx_has_room());
    assert_eq!(nf.resources(), start, "no id, page or grant leaked");
    let hv_end = hv.stats();
    assert_eq!(hv_end.general_error, hv_start.general_error);
    assert_eq!(hv_end.bad_gntref, hv_start.bad_gntref);
    assert_eq!(nb.fatal(), None);
}

#[test]
fn tx_frame_over_64k_is_dropped_by_netfront_not_sent_truncated() {
    let Pair { mut nf, mut nb, .. } = pair(all_features());
    let start = nf.resources();
    // 65549 B does not fit the first slot's u16 size: before the fix it went out as
    // size 13 and netback disconnected the (well-behaved) guest with TxBadSize.
    assert_eq!(
        tap_send(&mut nf, &tso(1448), &tcp4_frame(65549, 1)).unwrap(),
        Some(0)
    );
    assert_eq!(nf.stats.tx_dropped, 1);
    assert_eq!(nf.resources(), start);
    assert_eq!(
        tap_send(&mut nf, &tso(1448), &tcp4_frame(65535, 2)).unwrap(),
        Some(65535)
    );
    nf.tx_push();
    let mut got = Vec::new();
    assert_eq!(nb.tx_poll(8, |p| got.push(p)), Ok(1));
    assert_eq!(got[0].head, tcp4_frame(65535, 2));
    // Runt and unsupported GSO are dropped at the frontend too.
    assert_eq!(
        tap_send(&mut nf, &VirtioNetHdr::default(), &[0u8; 13]).unwrap(),
        Some(0)
    );
    let udp = VirtioNetHdr {
        gso_type: vnet::GSO_UDP,
        ..needs_csum()
    };
    assert_eq!(
        tap_send(&mut nf, &udp, &tcp4_frame(3000, 3)).unwrap(),
        Some(0)
    );
    assert_eq!(nf.stats.tx_dropped, 3);
}

#[test]
fn tx_oversize_and_bad_csum_are_answered_with_errors() {
    let Pair { mut nf, mut nb, .. } = pair(all_features());
    let start = nf.resources();
    // Non-GSO frame over 1518 B: netback answers with an error.
    tap_send(&mut nf, &VirtioNetHdr::default(), &raw_frame(3000, 1)).unwrap();
    // csum_blank on a frame without IP headers.
    tap_send(&mut nf, &needs_csum(), &raw_frame(200, 2)).unwrap();
    tap_send(&mut nf, &VirtioNetHdr::default(), &raw_frame(60, 3)).unwrap();
    nf.tx_push();
    let mut got = Vec::new();
    assert_eq!(nb.tx_poll(8, |p| got.push(p)), Ok(3));
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].head, raw_frame(60, 3));
    assert_eq!(nb.stats.tx_oversize, 1);
    assert_eq!(nb.stats.tx_bad_csum, 1);
    assert_eq!(nb.stats.tx_packets, 1);
    assert_eq!(nb.fatal(), None);
    nf.tx_complete();
    assert_eq!(nf.stats.tx_errors, 2);
    assert_eq!(nf.resources(), start);
}

#[test]
fn tx_jumbo_frames_follow_the_vif_mtu() {
    let Pair { mut nf, mut nb, .. } = pair(all_features());
    let start = nf.resources();
    assert_eq!(nb.max_frame(), 1518, "MTU 1500 unless told");
    // Default MTU: one byte over a tagged 1500-byte frame is refused.
    tap_send(&mut nf, &VirtioNetHdr::default(), &raw_frame(1519, 1)).unwrap();
    nf.tx_push();
    let mut got = Vec::new();
    assert_eq!(nb.tx_poll(8, |p| got.push(p)), Ok(1));
    assert!(got.is_empty());
    assert_eq!(nb.stats.tx_oversize, 1);

    // MTU 9000: a frame of 9018 bytes spans three pages and arrives intact; 9019 is refused.
    nb.set_mtu(9000);
    assert_eq!(nb.max_frame(), 9018);
    let slots0 = nb.stats.tx_slots;
    tap_send(&mut nf, &VirtioNetHdr::default(), &raw_frame(9018, 2)).unwrap();
    tap_send(&mut nf, &VirtioNetHdr::default(), &raw_frame(9019, 3)).unwrap();
    nf.tx_push();
    assert_eq!(nb.tx_poll(8, |p| got.push(p)), Ok(2));
    assert_eq!(got.len(), 1);
    assert!(got[0].head == raw_frame(9018, 2), "jumbo frame intact");
    assert_eq!(nb.stats.tx_slots - slots0, 3 + 3);
    assert_eq!(nb.stats.tx_oversize, 2);

    // The largest MTU a TAP takes: a 65535-byte frame in 16 pages (within the 18 slots Linux
    // netback takes, XEN_NETIF_NR_SLOTS_MIN), intact.
    nb.set_mtu(65521);
    assert_eq!(nb.max_frame(), 65539);
    tap_send(&mut nf, &VirtioNetHdr::default(), &raw_frame(65535, 4)).unwrap();
    nf.tx_push();
    assert_eq!(nb.tx_poll(8, |p| got.push(p)), Ok(1));
    assert_eq!(got.len(), 2);
    assert!(got[1].head == raw_frame(65535, 4), "64 KiB frame intact");
    nb.set_mtu(usize::MAX);
    assert_eq!(nb.max_frame(), pvnet_dd::netback::MAX_PACKET);

    assert_eq!(nb.stats.tx_oversize, 2);
    assert_eq!(nb.stats.tx_packets, 2);
    assert_eq!(nb.fatal(), None);
    nf.tx_complete();
    // Every slot of a refused frame is answered with the error: 1 + 3.
    assert_eq!(nf.stats.tx_errors, 4);
    assert_eq!(nf.resources(), start, "nothing leaked");
}

/// Posts one 60-byte frame (pattern `i`) and pushes the request.
fn send(nf: &mut Netfront, i: u32) {
    tap_send(nf, &VirtioNetHdr::default(), &raw_frame(60, i))
        .unwrap()
        .unwrap();
    nf.tx_push();
}

#[test]
fn tx_notifications_are_suppressed_until_rearmed() {
    let Pair { mut nf, mut nb, .. } = pair(all_features());
    send(&mut nf, 0);
    assert_eq!(nb.evtchn().consume(), 1, "fresh ring: req_event = 1");
    for i in 1..11 {
        send(&mut nf, i);
    }
    assert_eq!(nb.evtchn().consume(), 0, "backend has not re-armed");
    // A budget-limited poll does not reach the final check: still no notifications.
    let mut got = Vec::new();
    assert_eq!(nb.tx_poll(2, |p| got.push(p)), Ok(2));
    send(&mut nf, 11);
    assert_eq!(nb.evtchn().consume(), 0);
    // Responses: rsp_event = 1, so the first push notifies the frontend, later ones don't.
    assert_eq!(nf.evtchn().consume(), 1);
    assert_eq!(nb.tx_poll(100, |p| got.push(p)), Ok(10));
    assert_eq!(nf.evtchn().consume(), 0);
    assert_eq!(nb.stats.tx_notifications, 1);
    // Drained to the final check: re-armed, the next push notifies once.
    send(&mut nf, 12);
    send(&mut nf, 13);
    assert_eq!(nb.evtchn().consume(), 1);
    // The frontend collects (re-arming rsp_event): the next response notifies it.
    assert_eq!(nf.tx_complete(), 12);
    assert_eq!(nb.tx_poll(100, |p| got.push(p)), Ok(2));
    assert_eq!(nf.evtchn().consume(), 1);
    assert_eq!(nb.stats.tx_notifications, 2);
    assert_eq!(nf.tx_complete(), 2);
    assert_eq!(got.len(), 14);
    assert_eq!(nf.stats.notifications_sent, 2);
}

#[test]
fn tx_reap_collects_without_asking_for_the_next_event() {
    let Pair { mut nf, mut nb, .. } = pair(all_features());
    let start = nf.resources();
    let mut got = Vec::new();
    // The fresh ring's rsp_event (1) asks for the first response; reaping it asks for nothing.
    send(&mut nf, 0);
    assert_eq!(nb.tx_poll(100, |p| got.push(p)), Ok(1));
    assert_eq!(nf.evtchn().consume(), 1);
    assert_eq!(nf.tx_reap(), 1);
    // Request/response: one packet out, its answer back, a reap at the next wake-up; the
    // backend never notifies for these answers.
    for i in 1..6 {
        send(&mut nf, i);
        assert_eq!(nb.tx_poll(100, |p| got.push(p)), Ok(1));
        assert_eq!(nf.evtchn().consume(), 0, "round {i}: no event asked for");
        assert_eq!(nf.tx_reap(), 1);
    }
    assert_eq!(nb.stats.tx_notifications, 1);
    // Out of room, the frontend asks (tx_complete): the next answer notifies it.
    send(&mut nf, 6);
    assert_eq!(nf.tx_complete(), 0);
    assert_eq!(nb.tx_poll(100, |p| got.push(p)), Ok(1));
    assert_eq!(nf.evtchn().consume(), 1);
    assert_eq!(nb.stats.tx_notifications, 2);
    assert_eq!(nf.tx_reap(), 1);
    assert_eq!(got.len(), 7);
    assert_eq!(nf.resources(), start, "every id, page and grant came back");
}

// ------------------------------------------------------------------------------ hostile frontend

/// Every fatal and drop counter, by name.
const ERROR_COUNTERS: [&str; 17] = [
    "rx_queue_full",
    "rx_no_sg",
    "rx_gso_unsupported",
    "rx_bad_length",
    "tx_oversize",
    "tx_bad_csum",
    "tx_ring_overflow",
    "rx_ring_overflow",
    "tx_cross_page",
    "tx_runt",
    "tx_too_many_slots",
    "tx_bad_extra",
    "tx_bad_size",
    "tx_bad_gref",
    "tx_copy_failed",
    "rx_bad_gref",
    "rx_copy_failed",
];

fn counter(stats: &VifStats, name: &str) -> u64 {
    serde_json::to_value(stats).unwrap()[name].as_u64().unwrap()
}

/// `f` was returned, its counter is 1, every other error counter is 0, and from now on netback
/// returns the same error without touching either ring.
fn assert_disconnected(
    m: &mut MockFrontend,
    nb: &mut Netback,
    got: Result<usize, Fatal>,
    f: Fatal,
) {
    assert_eq!(got, Err(f));
    assert_eq!(nb.fatal(), Some(f));
    for name in ERROR_COUNTERS {
        let want = u64::from(name == f.name());
        assert_eq!(counter(&nb.stats, name), want, "counter {name} after {f:?}");
    }
    assert_eq!(nb.stats.tx_packets + nb.stats.rx_packets, 0);
    // Give it work on both rings; it must not look.
    nb.rx_enqueue(Packet::linear(VirtioNetHdr::default(), raw_frame(60, 0)));
    let rings = m.ring_pages();
    let stats = nb.stats.clone();
    let hv = m.hv.stats();
    for _ in 0..3 {
        assert_eq!(
            nb.tx_poll(64, |_| panic!("delivered after disconnect")),
            Err(f)
        );
        assert_eq!(nb.rx_flush(), Err(f));
    }
    assert!(
        m.ring_pages() == rings,
        "a ring page changed after the disconnect"
    );
    assert_eq!(nb.stats, stats);
    assert_eq!(m.hv.stats().copy_ops, hv.copy_ops);
}

fn mock() -> (MockFrontend, Netback) {
    MockFrontend::connect(24, all_features()).unwrap()
}

fn req(gref: u32, offset: u16, flags: u16, id: u16, size: u16) -> TxRequest {
    TxRequest {
        gref,
        offset,
        flags,
        id,
        size,
    }
}

#[test]
fn hostile_a_tx_req_prod_past_the_ring() {
    for prod in [257u32, 1000, u32::MAX, 0x8000_0000] {
        let (mut m, mut nb) = mock();
        m.set_tx_req_prod(RingIdx(prod));
        let r = nb.tx_poll(64, |_| panic!());
        assert_disconnected(&mut m, &mut nb, r, Fatal::TxRingOverflow);
    }
    // Exactly a ring's worth is legal (256 garbage-free zero slots -> a runt, not overflow).
    let (mut m, mut nb) = mock();
    m.set_tx_req_prod(RingIdx(256));
    let r = nb.tx_poll(64, |_| panic!());
    assert_disconnected(&mut m, &mut nb, r, Fatal::TxRunt);
}

#[test]
fn hostile_b_rx_req_prod_past_the_ring() {
    let (mut m, mut nb) = mock();
    nb.rx_enqueue(Packet::linear(VirtioNetHdr::default(), raw_frame(60, 0)));
    m.set_rx_req_prod(RingIdx(5000));
    let r = nb.rx_flush();
    assert_disconnected(&mut m, &mut nb, r, Fatal::RxRingOverflow);
    // Also with nothing queued: the index is still checked.
    let (mut m, mut nb) = mock();
    m.set_rx_req_prod(RingIdx(u32::MAX));
    let r = nb.rx_flush();
    assert_disconnected(&mut m, &mut nb, r, Fatal::RxRingOverflow);
}

#[test]
fn hostile_c_tx_gref_beyond_the_table() {
    for gref in [512u32, 517, u32::MAX] {
        let (mut m, mut nb) = mock();
        assert_eq!(m.nr_grant_entries(), 512);
        m.write_data(0, 0, &raw_frame(60, 0));
        m.put_tx(req(gref, 0, 0, 0, 60));
        m.push_tx();
        let r = nb.tx_poll(64, |_| panic!());
        assert_disconnected(&mut m, &mut nb, r, Fatal::TxBadGref);
    }
    // In a later slot of a chain.
    let (mut m, mut nb) = mock();
    let g = m.grant(0, true);
    m.put_tx(req(g.0, 0, NETTXF_MORE_DATA, 0, 200));
    m.put_tx(req(9999, 0, 0, 1, 100));
    m.push_tx();
    let r = nb.tx_poll(64, |_| panic!());
    assert_disconnected(&mut m, &mut nb, r, Fatal::TxBadGref);
}

#[test]
fn hostile_d_rx_gref_beyond_the_table() {
    let (mut m, mut nb) = mock();
    m.put_rx(0, 512);
    m.push_rx();
    nb.rx_enqueue(Packet::linear(VirtioNetHdr::default(), raw_frame(60, 0)));
    let r = nb.rx_flush();
    assert_disconnected(&mut m, &mut nb, r, Fatal::RxBadGref);
}

#[test]
fn hostile_e_tx_gref_granted_to_another_domain() {
    let (mut m, mut nb) = mock();
    let g = m.gnt.alloc().unwrap();
    m.gnt
        .raw_write_entry(g, GTF_PERMIT_ACCESS, 5, m.data_pfn(0).0);
    m.write_data(0, 0, &raw_frame(60, 0));
    m.put_tx(req(g.0, 0, 0, 0, 60));
    m.push_tx();
    let before = m.hv.stats().general_error;
    let r = nb.tx_poll(64, |_| panic!());
    assert_eq!(m.hv.stats().general_error, before + 1);
    assert_disconnected(&mut m, &mut nb, r, Fatal::TxCopyFailed);
}

#[test]
fn hostile_f_tx_slot_crossing_its_page() {
    // A later slot: offset + size > 4096.
    let (mut m, mut nb) = mock();
    let g0 = m.grant(0, true);
    let g1 = m.grant(1, true);
    m.put_tx(req(g0.0, 0, NETTXF_MORE_DATA, 0, 1000));
    m.put_tx(req(g1.0, 4000, 0, 1, 200));
    m.push_tx();
    let r = nb.tx_poll(64, |_| panic!());
    assert_disconnected(&mut m, &mut nb, r, Fatal::TxCrossPage);
    // The first slot of a one-slot packet.
    let (mut m, mut nb) = mock();
    let g = m.grant(0, true);
    m.put_tx(req(g.0, 4000, 0, 0, 200));
    m.push_tx();
    let r = nb.tx_poll(64, |_| panic!());
    assert_disconnected(&mut m, &mut nb, r, Fatal::TxCrossPage);
    // The first slot's own share (total - rest) crossing.
    let (mut m, mut nb) = mock();
    let (g0, g1) = (m.grant(0, true), m.grant(1, true));
    m.put_tx(req(g0.0, 100, NETTXF_MORE_DATA, 0, 5000));
    m.put_tx(req(g1.0, 0, 0, 1, 100));
    m.push_tx();
    let r = nb.tx_poll(64, |_| panic!());
    assert_disconnected(&mut m, &mut nb, r, Fatal::TxCrossPage);
    // First slot offset at or past the page end.
    let (mut m, mut nb) = mock();
    let g = m.grant(0, true);
    m.put_tx(req(g.0, u16::MAX, 0, 0, 60));
    m.push_tx();
    let r = nb.tx_poll(64, |_| panic!());
    assert_disconnected(&mut m, &mut nb, r, Fatal::TxCrossPage);
}

#[test]
fn hostile_g_tx_runt() {
    for size in [0u16, 1, 13] {
        let (mut m, mut nb) = mock();
        let g = m.grant(0, true);
        m.put_tx(req(g.0, 0, 0, 0, size));
        m.push_tx();
        let r = nb.tx_poll(64, |_| panic!());
        assert_disconnected(&mut m, &mut nb, r, Fatal::TxRunt);
    }
}

#[test]
fn hostile_h_tx_too_many_slots() {
    // 18 data slots is the limit and works...
    let (mut m, mut nb) = mock();
    let frame = raw_frame(18 * 80, 7);
    for (i, c) in frame.chunks(80).enumerate() {
        let g = m.grant(i as u32, true);
        m.write_data(i as u32, 0, c);
        let more = if i < 17 { NETTXF_MORE_DATA } else { 0 };
        let size = if i == 0 { frame.len() as u16 } else { 80 };
        m.put_tx(req(g.0, 0, more, i as u16, size));
    }
    m.push_tx();
    let mut got = Vec::new();
    assert_eq!(nb.tx_poll(64, |p| got.push(p)), Ok(1));
    assert_eq!(got[0].head, frame);
    let rsp = m.take_tx_responses().unwrap();
    assert_eq!(rsp.len(), 18);
    assert!(rsp.iter().all(|r| r.status == NETIF_RSP_OKAY));
    // ...19 is malicious, even split across two pushes.
    let (mut m, mut nb) = mock();
    for i in 0..19u16 {
        let g = m.grant(u32::from(i), true);
        let more = if i < 18 { NETTXF_MORE_DATA } else { 0 };
        let size = if i == 0 { 19 * 100 } else { 100 };
        m.put_tx(req(g.0, 0, more, i, size));
        if i == 9 {
            m.push_tx();
            assert_eq!(nb.tx_poll(64, |_| panic!()), Ok(0));
        }
    }
    m.push_tx();
    let r = nb.tx_poll(64, |_| panic!());
    assert_disconnected(&mut m, &mut nb, r, Fatal::TxTooManySlots);
}

#[test]
fn hostile_i_tx_bad_extra() {
    let gso = |size: u16, gso_type: u8| {
        ExtraInfo::new_gso(
            GsoInfo {
                size,
                gso_type,
                features: 0,
            },
            false,
        )
    };
    let unknown = ExtraInfo {
        kind: 9,
        flags: 0,
        data: [0; 6],
    };
    let mut dup_more = gso(1448, XEN_NETIF_GSO_TYPE_TCPV4);
    dup_more.flags = XEN_NETIF_EXTRA_FLAG_MORE;
    let cases: Vec<Vec<ExtraInfo>> = vec![
        vec![unknown],
        vec![gso(1448, 7)],
        vec![gso(0, XEN_NETIF_GSO_TYPE_TCPV4)],
        vec![dup_more, gso(1448, XEN_NETIF_GSO_TYPE_TCPV4)],
        vec![ExtraInfo {
            kind: XEN_NETIF_EXTRA_TYPE_NONE,
            flags: 0,
            data: [0; 6],
        }],
    ];
    for extras in cases {
        let (mut m, mut nb) = mock();
        let g = m.grant(0, true);
        m.write_data(0, 0, &tcp4_frame(200, 0));
        m.put_tx(req(g.0, 0, NETTXF_EXTRA_INFO, 0, 200));
        for e in extras {
            m.put_tx_extra(e);
        }
        m.push_tx();
        let r = nb.tx_poll(64, |_| panic!());
        assert_disconnected(&mut m, &mut nb, r, Fatal::TxBadExtra);
    }
}

#[test]
fn hostile_j_rx_into_a_read_only_grant() {
    let (mut m, mut nb) = mock();
    let g = m.grant(0, true);
    m.put_rx(0, g.0);
    m.push_rx();
    nb.rx_enqueue(Packet::linear(VirtioNetHdr::default(), raw_frame(60, 0)));
    let r = nb.rx_flush();
    assert_eq!(m.hv.stats().readonly_violation, 1);
    assert_disconnected(&mut m, &mut nb, r, Fatal::RxCopyFailed);
    assert_eq!(
        m.read_data(0, 0, 60),
        vec![0; 60],
        "nothing written into the page"
    );
}

#[test]
fn hostile_k_tx_sizes_that_do_not_add_up() {
    for (total, rest) in [
        (100u16, vec![100u16]),
        (100, vec![60, 40]),
        (14, vec![4000, 4000]),
        (200, vec![0, 300]),
    ] {
        let (mut m, mut nb) = mock();
        let g = m.grant(0, true);
        m.put_tx(req(g.0, 0, NETTXF_MORE_DATA, 0, total));
        for (i, s) in rest.iter().enumerate() {
            let g = m.grant(1 + i as u32, true);
            let more = if i + 1 < rest.len() {
                NETTXF_MORE_DATA
            } else {
                0
            };
            m.put_tx(req(g.0, 0, more, 1 + i as u16, *s));
        }
        m.push_tx();
        let r = nb.tx_poll(64, |_| panic!());
        assert_disconnected(&mut m, &mut nb, r, Fatal::TxBadSize);
    }
}

#[test]
fn mock_well_formed_tx_including_gso_works() {
    let (mut m, mut nb) = mock();
    let frame = tcp4_frame(20000, 5);
    let gso = GsoInfo {
        size: 1448,
        gso_type: XEN_NETIF_GSO_TYPE_TCPV4,
        features: 0,
    };
    let ids = m.post_tx_frame(&frame, NETTXF_CSUM_BLANK, Some(gso), 0, 0);
    m.push_tx();
    let mut got = Vec::new();
    assert_eq!(nb.tx_poll(64, |p| got.push(p)), Ok(1));
    assert_eq!(got[0].head, frame);
    assert_eq!(got[0].vnet, tso(1448));
    let rsp = m.take_tx_responses().unwrap();
    assert_eq!(rsp.len(), ids.len() + 1);
    assert_eq!(rsp.iter().filter(|r| r.status == NETIF_RSP_NULL).count(), 1);
}

/// A transmit rate through the mock guest (so that Miri runs the credit's stop over shared
/// memory): the frames beyond the window's credit stay on the ring, unanswered, and go whole
/// and in order once the clock reaches the next window.
#[test]
fn mock_tx_rate_leaves_requests_on_the_ring_until_the_next_window() {
    let (mut m, mut nb) = mock();
    let frames: Vec<Vec<u8>> = (0..3).map(|i| tcp4_frame(1000, i)).collect();
    let len = frames[0].len() as u64;
    // Two frames' worth a millisecond.
    nb.set_tx_rate(Some(pvnet_dd::netback::credit::TxRate {
        bytes: 2 * len,
        usec: 1000,
    }));
    nb.set_now(5_000_000);
    for (i, f) in frames.iter().enumerate() {
        m.post_tx_frame(f, 0, None, i as u32, i as u16);
    }
    m.push_tx();
    let mut got = Vec::new();
    assert_eq!(nb.tx_poll(64, |p| got.push(p)), Ok(2));
    assert_eq!(nb.tx_credit_wait(), Some(6_000_000));
    assert_eq!(
        m.take_tx_responses().unwrap().len(),
        2,
        "the third is not answered yet"
    );
    nb.set_now(6_000_000);
    assert_eq!(nb.tx_poll(64, |p| got.push(p)), Ok(1));
    assert_eq!(nb.tx_credit_wait(), None);
    let heads: Vec<Vec<u8>> = got.iter().map(|p| p.to_vec()).collect();
    assert_eq!(heads, frames);
    assert_eq!(m.take_tx_responses().unwrap().len(), 1);
    assert_eq!(
        (nb.stats.tx_credit_waits, nb.stats.tx_credit_charged),
        (1, 3 * len)
    );
}

// ------------------------------------------------------------------------------ fuzz

fn check_outcome(
    nb: &Netback,
    r: Result<usize, Fatal>,
    budget: usize,
) -> Result<(), TestCaseError> {
    let fatal_sum: u64 = ERROR_COUNTERS[6..]
        .iter()
        .map(|n| counter(&nb.stats, n))
        .sum();
    match r {
        Ok(n) => {
            prop_assert!(n <= budget);
            prop_assert_eq!(nb.fatal(), None);
            prop_assert_eq!(fatal_sum, 0);
        }
        Err(f) => {
            prop_assert_eq!(nb.fatal(), Some(f));
            prop_assert_eq!(counter(&nb.stats, f.name()), 1);
            prop_assert_eq!(fatal_sum, 1);
        }
    }
    Ok(())
}

fn tx_slot_bytes() -> impl Strategy<Value = [u8; 12]> {
    prop_oneof![
        any::<[u8; 12]>(),
        (0u32..530, 0u16..4200, 0u16..16, any::<u16>(), 0u16..9000).prop_map(|(g, o, f, id, s)| {
            TxSlot::from_request(&TxRequest {
                gref: g,
                offset: o,
                flags: f,
                id,
                size: s,
            })
            .0
        }),
        (0u32..40, 0u16..64, 0u16..16, any::<u16>(), 14u16..2000).prop_map(|(g, o, f, id, s)| {
            TxSlot::from_request(&TxRequest {
                gref: g,
                offset: o,
                flags: f,
                id,
                size: s,
            })
            .0
        }),
        (0u8..10, 0u8..2, any::<u16>(), 0u8..4).prop_map(|(k, fl, size, t)| {
            let mut e = ExtraInfo::new_gso(
                GsoInfo {
                    size,
                    gso_type: t,
                    features: 0,
                },
                fl != 0,
            );
            e.kind = k;
            TxSlot::from_extra(&e).0
        }),
    ]
}

fn grant_entries() -> impl Strategy<Value = Vec<(u32, u16, u16, u32)>> {
    // (ref, flags, domid, frame): mostly plausible grants to dom0, some garbage.
    prop::collection::vec(
        (
            0u32..48,
            prop_oneof![Just(1u16), Just(5u16), 0u16..32],
            prop_oneof![Just(0u16), Just(0u16), Just(5u16), any::<u16>()],
            prop_oneof![3u32..11, 0u32..16],
        ),
        0..64,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn fuzz_hostile_tx_ring(
        start in prop_oneof![Just(0u32), Just(u32::MAX - 100), any::<u32>()],
        slots in prop::collection::vec(tx_slot_bytes(), 0..300),
        delta in -512i64..=512,
        grants in grant_entries(),
        budgets in prop::collection::vec(1usize..80, 1..5),
    ) {
        let (mut m, mut nb) = MockFrontend::connect_at(8, all_features(), RingIdx(start)).unwrap();
        for (r, flags, domid, frame) in grants {
            // Refs 0 and 1 hold the rings, already mapped: rewriting them is allowed too.
            m.gnt.raw_write_entry(pvnet_hv::GrantRef(r), flags, domid, frame);
        }
        for (i, s) in slots.iter().enumerate() {
            m.tx_raw(RingIdx(start).plus(i as u32), *s);
        }
        m.set_tx_req_prod(RingIdx(start.wrapping_add(delta as u32)));
        let mut first_err = None;
        for budget in budgets {
            let r = nb.tx_poll(budget, |p| {
                assert!(p.len() >= 14 && p.len() <= 65535);
            });
            check_outcome(&nb, r, budget)?;
            if let Some(e) = first_err {
                prop_assert_eq!(r, Err(e));
            }
            if let Err(e) = r {
                first_err = Some(e);
            }
        }
    }

    #[test]
    fn fuzz_hostile_rx_ring(
        start in prop_oneof![Just(0u32), Just(u32::MAX - 3), any::<u32>()],
        reqs in prop::collection::vec((any::<u16>(), prop_oneof![2u32..48, any::<u32>()]), 0..300),
        delta in -512i64..=512,
        grants in grant_entries(),
        sizes in prop::collection::vec(14usize..20000, 1..20),
    ) {
        let (mut m, mut nb) = MockFrontend::connect_at(8, all_features(), RingIdx(start)).unwrap();
        for (r, flags, domid, frame) in grants {
            m.gnt.raw_write_entry(pvnet_hv::GrantRef(r), flags, domid, frame);
        }
        for (i, (id, gref)) in reqs.iter().enumerate() {
            let mut b = [0u8; 8];
            b[0..2].copy_from_slice(&id.to_le_bytes());
            b[4..8].copy_from_slice(&gref.to_le_bytes());
            m.rx_raw(RingIdx(start).plus(i as u32), b);
        }
        m.set_rx_req_prod(RingIdx(start.wrapping_add(delta as u32)));
        for (k, s) in sizes.iter().enumerate() {
            nb.rx_enqueue(Packet::linear(VirtioNetHdr::default(), raw_frame(*s, k as u32)));
        }
        let r1 = nb.rx_flush();
        check_outcome(&nb, r1, usize::MAX)?;
        let r2 = nb.rx_flush();
        check_outcome(&nb, r2, usize::MAX)?;
        if let Err(e) = r1 {
            prop_assert_eq!(r2, Err(e));
        }
    }
}
