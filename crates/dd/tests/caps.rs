//! Per-guest resource caps (issue 22): a guest that pushes past each cap is held at it, the cap
//! has a named counter that moves by exactly the refused amount, and what was admitted is
//! delivered (byte for byte where the test compares bytes). The caps: queued packets
//! (`rx_queue_full`), queued bytes — the guest's memory in the driver domain
//! (`rx_queue_memory_full`), data-page mappings (`persistent_overflow`), aggregates held in the
//! shared LRO table (`guest_flow_cap`), and which guest's aggregate a full table gives up.

use crate::lro_common;
use crate::ring_common;

use pvnet_dd::lro::{self, Lro, Policy, MAX_FLOWS_PER_DST};
use pvnet_dd::mock::MockFrontend;
use pvnet_dd::netback::{
    Config, Fatal, Features, Mechanism, Netback, MAX_PACKET, RX_QUEUE_BYTES, RX_QUEUE_LIMIT,
};
use pvnet_dd::packet::Packet;
use pvnet_wire::vnet::VirtioNetHdr;

fn features() -> Features {
    pvnet_dd::mock::sg_tso4_features()
}

fn frame(len: usize, seed: u32) -> Packet {
    Packet::linear(VirtioNetHdr::default(), ring_common::raw_frame(len, seed))
}

/// Posts an RX buffer (data page `i`) per id in `ids`, and pushes them.
fn post_rx(m: &mut MockFrontend, ids: std::ops::Range<u32>) {
    for i in ids {
        let g = m.grant(i, false);
        assert!(m.put_rx(i as u16, g.0));
    }
    m.push_rx();
}

/// Takes the RX responses and returns the bytes each delivered (one slot per packet here).
fn delivered(m: &mut MockFrontend) -> Vec<Vec<u8>> {
    let slots = m.take_rx_responses().unwrap();
    slots
        .iter()
        .map(|s| {
            let r = s.response();
            assert!(r.status > 0, "error response {r:?}");
            m.read_data(u32::from(r.id), usize::from(r.offset), r.status as usize)
        })
        .collect()
}

#[test]
fn a_guest_that_posts_no_buffers_is_held_at_its_packet_cap() {
    let (mut m, mut nb) = MockFrontend::connect(64, features()).unwrap();
    let pushed = RX_QUEUE_LIMIT as u32 + 500;
    let mut admitted = 0;
    for i in 0..pushed {
        admitted += u32::from(nb.rx_enqueue(frame(100, i)));
        assert!(nb.rx_queued() <= RX_QUEUE_LIMIT);
    }
    assert_eq!(admitted, RX_QUEUE_LIMIT as u32);
    assert_eq!(nb.stats.rx_queue_full, 500);
    assert_eq!(nb.stats.rx_queue_memory_full, 0);
    // The guest starts taking packets: the first 64 come out intact and in order, and the
    // queue has room again.
    post_rx(&mut m, 0..64);
    assert_eq!(nb.rx_flush(), Ok(64));
    let got = delivered(&mut m);
    for (i, b) in got.iter().enumerate() {
        assert!(*b == ring_common::raw_frame(100, i as u32), "packet {i}");
    }
    assert_eq!(nb.rx_queued(), RX_QUEUE_LIMIT - 64);
    assert!(nb.rx_enqueue(frame(100, 9999)));
    assert_eq!(nb.stats.rx_queue_full, 500);
}

#[test]
fn a_configured_packet_cap_holds_instead_of_the_default() {
    for cap in [128usize, 3000] {
        let (_m, mut nb) = MockFrontend::connect_with(
            64,
            features(),
            Config {
                rx_queue_packets: cap,
                ..Config::default()
            },
        )
        .unwrap();
        let mut admitted = 0;
        for i in 0..cap as u32 + 100 {
            admitted += usize::from(nb.rx_enqueue(frame(100, i)));
        }
        assert_eq!(admitted, cap);
        assert_eq!(nb.rx_queued(), cap);
        assert_eq!(nb.stats.rx_queue_full, 100);
        // The port's gate sees the same cap.
        assert!(!nb.rx_queue_can_take(1, 0));
    }
}

#[test]
fn a_guest_is_held_at_its_memory_cap() {
    const { assert!(RX_QUEUE_BYTES >= MAX_PACKET) };
    let cap = 64 * 1024 + MAX_PACKET;
    let (mut m, mut nb) = MockFrontend::connect_with(
        64,
        features(),
        Config {
            rx_queue_bytes: cap,
            ..Config::default()
        },
    )
    .unwrap();
    // 1000-byte packets: the packet cap (1024) is far away, the memory cap is not.
    let fit = cap / 1000;
    assert!(nb.rx_queue_can_take(fit, fit * 1000));
    assert!(
        !nb.rx_queue_can_take(1, cap + 1),
        "the port's gate sees the memory cap"
    );
    assert!(!nb.rx_queue_can_take(RX_QUEUE_LIMIT + 1, 0));
    for i in 0..2000u32 {
        let queued = nb.rx_enqueue(frame(1000, i));
        assert_eq!(queued, (i as usize) < fit, "packet {i}");
        assert!(nb.rx_queued_bytes() <= cap);
    }
    assert_eq!(nb.rx_queued_bytes(), fit * 1000);
    assert!(!nb.rx_queue_can_take(1, 1000));
    assert!(nb.rx_queue_can_take(1, cap - fit * 1000));
    assert_eq!(nb.stats.rx_queue_memory_full, (2000 - fit) as u64);
    assert_eq!(nb.stats.rx_queue_full, 0);
    // Draining gives the memory back, byte for byte.
    post_rx(&mut m, 0..64);
    assert_eq!(nb.rx_flush(), Ok(64));
    assert_eq!(delivered(&mut m).len(), 64);
    assert_eq!(nb.rx_queued_bytes(), (fit - 64) * 1000);
    assert!(nb.rx_enqueue(frame(1000, 5000)));
    // A cap below one largest packet is raised to it: a guest can always receive one.
    nb.set_rx_queue_bytes(1);
    assert_eq!(nb.stats.rx_queue_memory_full, (2000 - fit) as u64);
    assert!(!nb.rx_enqueue(frame(1000, 5001)));
    assert_eq!(nb.stats.rx_queue_memory_full, (2000 - fit) as u64 + 1);
}

#[test]
fn a_guest_cannot_hold_more_mappings_than_its_cap() {
    const CAP: usize = 6;
    let (mut m, mut nb): (MockFrontend, Netback) = MockFrontend::connect_with(
        32,
        features(),
        Config {
            mechanism: Mechanism::Persistent,
            persistent_max: CAP,
            ..Config::default()
        },
    )
    .unwrap();
    let live = |nb: &Netback| nb.stats.grant_maps - nb.stats.grant_unmaps;
    // Within the cap: every buffer mapped once, kept.
    post_rx(&mut m, 0..CAP as u32);
    for i in 0..CAP as u32 {
        assert!(nb.rx_enqueue(frame(500, i)));
    }
    assert_eq!(nb.rx_flush(), Ok(CAP));
    assert_eq!(delivered(&mut m).len(), CAP);
    assert_eq!(live(&nb), CAP as u64);
    // The guest pushes past it: more live grants, none ended. The extra one is never mapped,
    // the vif ends with the named counter, and every mapping is gone.
    post_rx(&mut m, CAP as u32..CAP as u32 + 4);
    for i in 0..4 {
        nb.rx_enqueue(frame(500, 100 + i));
    }
    let r = nb.rx_flush();
    assert_eq!(r, Err(Fatal::PersistentOverflow));
    assert!(nb.stats.grant_maps <= CAP as u64, "{:?}", nb.stats);
    assert_eq!(nb.stats.persistent_overflow, 1);
    assert_eq!(live(&nb), 0);
    assert_eq!(nb.stats.persistent_mapped, 0);
}

#[test]
fn a_guest_with_many_flows_holds_at_most_its_share_of_the_lro_table() {
    use lro_common::{per_flow, stream, MAC_DST};
    let mut lro = Lro::new(lro::Config {
        policy: Policy::Every(8),
        ticks_per_us: 1,
        ..lro::Config::default()
    });
    assert_eq!(lro.config().max_flows_per_dst, MAX_FLOWS_PER_DST);
    assert!(MAX_FLOWS_PER_DST < lro.config().max_flows);
    let mut out = Vec::new();
    let noisy = MAX_FLOWS_PER_DST + 4;
    // Guest A (MAC_DST): `noisy` flows of 3 segments each, interleaved; guest B: one flow.
    let guest_b = lro_common::MAC_DST2;
    let flows: Vec<Vec<_>> = (0..=noisy)
        .map(|f| {
            stream(false, 1, 1000, 3)
                .into_iter()
                .map(|s| {
                    s.with(|s| {
                        s.src_port = 41000 + f as u16;
                        s.flags &= !lro_common::PSH;
                        if f == noisy {
                            s.dst_mac = guest_b;
                        }
                    })
                })
                .collect()
        })
        .collect();
    let mut now = 1;
    for k in 0..3 {
        for f in &flows {
            lro.receive(f[k].build(), lro_common::no_vnet(), now, &mut out);
            now += 1;
            // Guest B holds at most one aggregate: the rest of the table is A's, at its cap.
            assert!(lro.held() <= MAX_FLOWS_PER_DST + 1);
        }
    }
    // B's aggregate was never pushed out: nothing of B's has left yet.
    assert!(out.iter().all(|p| p.head[..6] == MAC_DST));
    assert_eq!(lro.held(), MAX_FLOWS_PER_DST + 1);
    // Every later segment of A's first round (4), and then every one of A's segments in
    // rounds 2 and 3 (its 20 flows cycle through 16 places), flushed A's own oldest.
    let st = lro.stats();
    assert_eq!(st.guest_flow_cap, 4 + 2 * noisy as u64);
    assert_eq!(
        st.evictions, st.guest_flow_cap,
        "no eviction by the shared table"
    );
    lro.flush_all(now, &mut out);
    let b: Vec<&Packet> = out.iter().filter(|p| p.head[..6] == guest_b).collect();
    assert_eq!(b.len(), 1, "B's three segments left as one aggregate");
    assert_eq!(b[0].len(), 14 + 20 + 20 + 12 + 3000);
    // Nothing lost, duplicated or reordered: every flow's bytes arrive whole.
    let got = per_flow(&out);
    assert_eq!(got.len(), noisy + 1);
    for (_, segs) in got {
        let bytes: Vec<u8> = segs.iter().flat_map(|(_, b)| b.clone()).collect();
        assert_eq!(bytes, lro_common::bytes(1, 3000));
    }
}

#[test]
fn in_a_full_table_a_new_flow_displaces_the_largest_holder_never_a_guest_within_its_share() {
    use lro_common::{bytes, no_vnet, per_flow, stream, PSH};
    // Three guests share one table of 6 (as on one port queue), each capped at 4.
    let mut lro = Lro::new(lro::Config {
        policy: Policy::Every(64),
        max_flows: 6,
        max_flows_per_dst: 4,
        ticks_per_us: 1,
        ..lro::Config::default()
    });
    let (a, b, c) = (1u8, 2u8, 3u8);
    let mut now = 1;
    let mut out = Vec::new();
    let mut all = Vec::new();
    // Opens flow `port` of guest `g` with one segment, and names the flows that left.
    let mut open = |lro: &mut Lro, g: u8, port: u16| -> Vec<u16> {
        let s = stream(false, 1, 1000, 2).remove(0).with(|s| {
            s.src_port = port;
            s.dst_mac = [0x00, 0x16, 0x3e, 0x00, 0x01, g];
            s.flags &= !PSH;
        });
        lro.receive(s.build(), no_vnet(), now, &mut out);
        now += 1;
        let left = per_flow(&out).keys().map(|k| k.1).collect();
        all.append(&mut out);
        left
    };
    // B's and C's first aggregates are the table's oldest; then A fills it to its cap.
    assert!(open(&mut lro, b, 200).is_empty());
    assert!(open(&mut lro, c, 300).is_empty());
    for p in 100..104 {
        assert!(open(&mut lro, a, p).is_empty());
    }
    assert_eq!(lro.held(), 6);
    // A holds the most, so its oldest leaves, not the table's oldest (B's, then C's).
    assert_eq!(open(&mut lro, b, 201), vec![100]);
    assert_eq!(open(&mut lro, c, 301), vec![101]);
    // Each now holds 2, an equal share: a new flow displaces its own guest's oldest.
    assert_eq!(open(&mut lro, a, 104), vec![102]);
    assert_eq!(open(&mut lro, c, 302), vec![300]);
    assert_eq!(open(&mut lro, b, 202), vec![200]);
    let st = lro.stats();
    assert_eq!((st.evictions, st.guest_flow_cap), (5, 0));
    lro.flush_all(now, &mut all);
    // Nothing lost or duplicated: every flow's one segment arrives once, whole.
    let got = per_flow(&all);
    assert_eq!(got.len(), 11);
    for (_, segs) in got {
        assert_eq!(segs, vec![(1, bytes(1, 1000))]);
    }
}
