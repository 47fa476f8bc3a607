//! The driver domain's data path outside the daemon: a mock physical port and clock, real
//! netbacks joined to real netfronts (guest crate) through a real grant table, and mock TAP
//! ports. What used to be testable only by running the `pvnet` binary as root.

use crate::dp_common;
use crate::lro_common;

use dp_common::*;
use lro_common::{stream, Seg, MAC_DST, MAC_SRC};
use pvnet_dd::datapath::{
    vif_port, DataPath, PathConfig, TxRefused, PORT_DDSTACK, PORT_PNIC, TAP_READS_PER_CALL,
    TX_BACKLOG_MAX, TX_BACKLOG_TIMEOUT_NS,
};
use pvnet_dd::gate::STALL_NS;
use pvnet_dd::lro::{Mode, Policy};
use pvnet_dd::mock::{MockClock, MockFrontend, MockPhy, MockTap};
use pvnet_dd::netback::Fatal;
use pvnet_netif::RingIdx;

#[test]
fn frames_from_the_wire_reach_their_guest_intact() {
    let (mut dp, _clock, mut g) = path_with(&[MAC_DST, MAC_G2], None, 64);
    let sent: Vec<Vec<u8>> = (0..200)
        .map(|i| frame_to(MAC_DST, MAC_SRC, 60 + i * 7, i as u8))
        .collect();
    for f in &sent {
        dp.phy_mut().unwrap().inject(f);
    }
    pass(&mut dp);
    let got: Vec<Vec<u8>> = g[0].take().into_iter().map(|(_, b)| b).collect();
    assert_eq!(got, sent);
    assert!(g[1].take().is_empty(), "the other guest got nothing");
    assert_eq!(dp.stats.frames, 200);
    // 200 frames at a budget of 64: three full polls and one of 8.
    assert_eq!(dp.phy().unwrap().polls, vec![64, 64, 64, 64]);
    assert_eq!(dp.stats.polls, 4);
    assert_eq!(dp.stats.polls_full_budget, 3);
    assert_eq!(dp.vif_stats(1).unwrap().rx_packets, 200);
    // The mock clock only moves when told: the stages read no time, but every packet went
    // through the switching stage once.
    assert_eq!(dp.stats.stages.switched_packets, 200);
}

#[test]
fn stage_times_follow_the_clock() {
    use std::cell::Cell;
    use std::rc::Rc;
    // A clock that moves 10 ticks (10 ns at 1000 per µs) on every read.
    #[derive(Clone, Default)]
    struct Ticking(Rc<Cell<u64>>);
    impl pvnet_dd::datapath::Clock for Ticking {
        fn now_ns(&self) -> u64 {
            self.0.get()
        }
        fn ticks(&self) -> u64 {
            self.0.set(self.0.get() + 10);
            self.0.get()
        }
        fn ticks_per_us(&self) -> u64 {
            1000
        }
    }
    let mut dp: DataPath<MockPhy, Ticking> = DataPath::new(
        PathConfig {
            budget: 64,
            bo: false,
        },
        Ticking::default(),
        Some(Policy::Poll),
        Mode::Skb,
    );
    dp.attach_phy(MockPhy::default()).unwrap();
    for s in stream(false, 1, 1448, 8) {
        dp.phy_mut().unwrap().inject(&s.build());
    }
    dp.tick();
    dp.phy_poll();
    let st = dp.stats.stages.clone();
    // Each frame's merge is timed (10 ticks each), plus the end of the poll.
    assert!(st.aggregation_ticks >= 8 * 10, "{st:?}");
    assert!(st.port_ticks > 0 && st.switching_ticks > 0, "{st:?}");
    assert_eq!(st.switched_packets, 1, "one aggregate routed");
    let ns = dp.stage_ns();
    assert_eq!(ns.aggregation, st.aggregation_ticks);
    assert_eq!(ns.switching_per_packet, st.switching_ticks as f64);
}

#[test]
fn a_guests_frames_reach_the_wire_and_the_other_guest() {
    let (mut dp, _clock, mut g) = path_with(&[MAC_DST, MAC_G2], None, 64);
    let out = frame_to([0x02, 0, 0, 0, 0, 0x99], MAC_DST, 1514, 7);
    let to_g2 = frame_to(MAC_G2, MAC_DST, 800, 9);
    g[0].send(&out);
    g[0].send(&to_g2);
    dp.tick();
    dp.vif_event(g[0].dom);
    dp.end_pass();
    // The unknown destination is flooded: the wire gets it, and so does the other guest.
    let tx = &dp.phy().unwrap().tx;
    assert_eq!(tx.len(), 1);
    assert_eq!(tx[0].1, out);
    let got: Vec<Vec<u8>> = g[1].take().into_iter().map(|(_, b)| b).collect();
    assert_eq!(got, vec![out.clone(), to_g2]);
    assert_eq!(dp.stats.flooded_copies, 1);
    assert_eq!(g[0].nf.tx_complete(), 2);
}

#[test]
fn broadcast_floods_every_port_but_its_own() {
    let (mut dp, _clock, mut g) = path_with(&[MAC_DST, MAC_G2], None, 64);
    let stack = MockTap::default();
    dp.attach_tap(PORT_DDSTACK, STACK_MAC, Box::new(stack.clone()))
        .unwrap();
    let b = frame_to([0xff; 6], MAC_SRC, 100, 1);
    dp.phy_mut().unwrap().inject(&b);
    pass(&mut dp);
    assert_eq!(g[0].take()[0].1, b);
    assert_eq!(g[1].take()[0].1, b);
    assert_eq!(stack.0.borrow().written, vec![b.clone()]);
    assert!(dp.phy().unwrap().tx.is_empty(), "not back out of the port");
    assert_eq!(dp.stats.flooded_copies, 2);
    assert_eq!(dp.stats.ddtap_tx, 1);
    assert_eq!(dp.tap_stats(PORT_DDSTACK).unwrap().0.tx, 1);
}

#[test]
fn a_tap_whose_device_went_comes_off_the_path_and_a_new_one_takes_its_place() {
    let (mut dp, _clock, mut g) = path_with(&[MAC_DST], None, 64);
    let stack = MockTap::default();
    dp.attach_tap(PORT_DDSTACK, STACK_MAC, Box::new(stack.clone()))
        .unwrap();
    // Still there: nothing to read is no failure.
    dp.tap_input(PORT_DDSTACK);
    assert!(dp.take_gone_taps().is_empty());
    // Its interface deleted: the read fails for good, and the port comes off once.
    stack.0.borrow_mut().gone = true;
    dp.tap_input(PORT_DDSTACK);
    assert_eq!(dp.take_gone_taps(), vec![PORT_DDSTACK]);
    assert!(dp.take_gone_taps().is_empty(), "reported once");
    assert!(dp.tap_stats(PORT_DDSTACK).is_none(), "off the path");
    assert_eq!(dp.stats.ddtap_errors, 1);
    dp.tap_input(PORT_DDSTACK);
    assert!(dp.take_gone_taps().is_empty(), "nothing left to read");
    assert!(!dp.detach_tap(PORT_DDSTACK), "nothing left to detach");
    // A broadcast from the wire reaches the guest, and nothing else.
    let b = frame_to([0xff; 6], MAC_SRC, 100, 1);
    dp.phy_mut().unwrap().inject(&b);
    pass(&mut dp);
    assert_eq!(g[0].take()[0].1, b);
    assert!(stack.0.borrow().written.is_empty());
    // A new stack port takes its place and reads again.
    let fresh = MockTap::default();
    dp.attach_tap(PORT_DDSTACK, STACK_MAC, Box::new(fresh.clone()))
        .expect("a new stack port");
    let f = frame_to(MAC_DST, STACK_MAC, 300, 3);
    fresh.inject(&f);
    dp.tap_input(PORT_DDSTACK);
    assert_eq!(g[0].take()[0].1, f);
    assert_eq!(dp.tap_stats(PORT_DDSTACK).unwrap().0.rx, 1);
}

#[test]
fn the_stack_port_reads_frames_and_counts_short_ones() {
    let (mut dp, _clock, mut g) = path_with(&[MAC_DST], None, 64);
    let stack = MockTap::default();
    dp.attach_tap(PORT_DDSTACK, STACK_MAC, Box::new(stack.clone()))
        .unwrap();
    let f = frame_to(MAC_DST, [0x02, 0x70, 0x76, 0, 0, 2], 300, 3);
    stack.inject(&f);
    stack.inject(&[0u8; 5]);
    dp.tick();
    dp.tap_input(PORT_DDSTACK);
    assert_eq!(g[0].take()[0].1, f);
    assert_eq!((dp.stats.ddtap_rx, dp.stats.ddtap_errors), (1, 1));
    let c = dp.tap_stats(PORT_DDSTACK).unwrap().0;
    assert_eq!((c.rx, c.rx_errors), (1, 1));
}

#[test]
fn a_refused_send_is_counted() {
    let (mut dp, _clock, mut g) = path_with(&[MAC_DST], None, 64);
    dp.phy_mut().unwrap().refuse_sends = true;
    g[0].send(&frame_to([0x02, 0, 0, 0, 0, 0x99], MAC_DST, 200, 1));
    dp.tick();
    dp.vif_event(g[0].dom);
    assert_eq!(dp.stats.pnic_send_errors, 1);
}

/// A MAC on the wire, beyond the physical port.
const WIRE: [u8; 6] = [0x02, 0, 0, 0, 0, 0x99];

#[test]
fn a_full_port_holds_the_guests_frames_back_and_loses_none() {
    // Budget 4: a TX poll takes at most 16 packets.
    let (mut dp, _clock, mut g) = path_with(&[MAC_DST], None, 4);
    let frames: Vec<Vec<u8>> = (0..40)
        .map(|i| frame_to(WIRE, MAC_DST, 100 + i, i as u8))
        .collect();
    dp.phy_mut().unwrap().tx_full = Some(TxRefused::Full);
    for f in &frames[..20] {
        g[0].send(f);
    }
    dp.tick();
    dp.vif_event(g[0].dom);
    // The poll took 16 requests; the port took none of their frames, which wait in order.
    assert!(dp.phy().unwrap().tx.is_empty());
    assert_eq!(dp.tx_backlog_len(), 16);
    assert_eq!(
        dp.tx_backlog_wait(),
        Some(true),
        "a full send buffer: wait until writable"
    );
    assert_eq!(
        (dp.stats.pnic_tx_deferred, dp.stats.pnic_send_errors),
        (16, 0)
    );
    // While they wait, the guest's requests stay on its ring: the poll its full budget asked
    // for, and the one its next notification brings, take nothing.
    assert!(dp.has_tx_more());
    dp.serve_tx_more();
    for f in &frames[20..] {
        g[0].send(f);
    }
    dp.vif_event(g[0].dom);
    assert_eq!(dp.vif_stats(g[0].dom).unwrap().tx_packets, 16);
    assert_eq!(dp.stats.tx_polls_held, 2);
    assert_eq!(
        dp.vif_events(g[0].dom).unwrap().idle_polls,
        0,
        "held, not idle"
    );
    assert!(!dp.has_tx_more(), "a held guest is not polled in a loop");
    // The device's queue is full instead: nothing to wait on but time.
    dp.phy_mut().unwrap().tx_full = Some(TxRefused::Busy);
    dp.tx_drain();
    assert_eq!(dp.tx_backlog_wait(), Some(false));
    assert_eq!(dp.tx_backlog_len(), 16);
    // The port has room again: the waiting frames go first, then the guest is polled again.
    dp.phy_mut().unwrap().tx_full = None;
    dp.tx_drain();
    assert_eq!((dp.tx_backlog_len(), dp.tx_backlog_wait()), (0, None));
    assert_eq!(dp.phy().unwrap().tx.len(), 16);
    assert!(dp.has_tx_more(), "the held guest is polled again");
    while dp.has_tx_more() {
        dp.serve_tx_more();
    }
    let sent: Vec<Vec<u8>> = (dp.phy().unwrap().tx.iter())
        .map(|(_, b)| b.clone())
        .collect();
    assert_eq!(sent, frames, "every frame, once, in order");
    assert_eq!(dp.stats.pnic_tx_backlog_drops, 0);
    assert_eq!(dp.stats.pnic_tx_backlog_max, 16);
}

#[test]
fn a_port_whose_nic_went_comes_off_the_path_and_another_takes_its_place() {
    let (mut dp, _clock, mut g) = path_with(&[MAC_DST], None, 4);
    // Frames wait for the old port, which takes none.
    dp.phy_mut().unwrap().tx_full = Some(TxRefused::Full);
    for i in 0..20 {
        g[0].send(&frame_to(WIRE, MAC_DST, 100, i));
    }
    dp.tick();
    dp.vif_event(g[0].dom);
    assert_eq!(dp.tx_backlog_len(), 16);
    // Its NIC goes: the port comes off with what waited for it, and the guest is not held.
    let old = dp.detach_phy().expect("the port");
    assert!(old.tx.is_empty());
    assert!(dp.phy().is_none());
    assert_eq!((dp.tx_backlog_len(), dp.tx_backlog_wait()), (0, None));
    assert_eq!(dp.stats.pnic_tx_backlog_drops, 16);
    assert!(dp.has_tx_more(), "the held guest is polled again");
    while dp.has_tx_more() {
        dp.serve_tx_more();
    }
    assert_eq!(dp.vif_stats(g[0].dom).unwrap().tx_packets, 20);
    assert!(!dp.phy_poll(), "no port to poll");
    assert!(dp.detach_phy().is_none(), "nothing left to detach");
    // A new port on the NIC that came back carries both ways again.
    dp.attach_phy(MockPhy::default()).expect("a new port");
    let back = frame_to(MAC_DST, WIRE, 300, 7);
    dp.phy_mut().unwrap().inject(&back);
    pass(&mut dp);
    let got: Vec<Vec<u8>> = g[0].take().into_iter().map(|(_, b)| b).collect();
    assert_eq!(got, vec![back]);
    let out = frame_to(WIRE, MAC_DST, 200, 9);
    g[0].send(&out);
    dp.vif_event(g[0].dom);
    let sent: Vec<Vec<u8>> = (dp.phy().unwrap().tx.iter())
        .map(|(_, b)| b.clone())
        .collect();
    assert_eq!(sent, vec![out], "only what came after it");
}

#[test]
fn a_port_that_takes_nothing_for_long_drops_what_waits_and_the_guests_go_on() {
    let (mut dp, clock, mut g) = path_with(&[MAC_DST], None, 4);
    dp.phy_mut().unwrap().tx_full = Some(TxRefused::Busy);
    for i in 0..20 {
        g[0].send(&frame_to(WIRE, MAC_DST, 100, i));
    }
    dp.tick();
    dp.vif_event(g[0].dom);
    assert_eq!(dp.tx_backlog_len(), 16);
    clock.advance(TX_BACKLOG_TIMEOUT_NS - 1_000);
    dp.tick();
    dp.tx_drain();
    assert_eq!(dp.tx_backlog_len(), 16, "not yet");
    clock.advance(2_000);
    dp.tick();
    dp.tx_drain();
    assert_eq!(dp.tx_backlog_len(), 0);
    assert_eq!(
        (
            dp.stats.pnic_tx_backlog_drops,
            dp.stats.pnic_tx_backlog_timeouts
        ),
        (16, 1)
    );
    // The guest's four other frames go once the port takes frames again.
    dp.phy_mut().unwrap().tx_full = None;
    while dp.has_tx_more() {
        dp.serve_tx_more();
    }
    assert_eq!(dp.phy().unwrap().tx.len(), 4);
}

#[test]
fn the_ports_backlog_is_bounded() {
    let (mut dp, _clock, _g) = path_with(&[MAC_DST], None, 64);
    let stack = MockTap::default();
    dp.attach_tap(PORT_DDSTACK, STACK_MAC, Box::new(stack.clone()))
        .unwrap();
    dp.phy_mut().unwrap().tx_full = Some(TxRefused::Full);
    let n = TX_BACKLOG_MAX + 76;
    for i in 0..n {
        stack.inject(&frame_to(WIRE, STACK_MAC, 80, i as u8));
    }
    dp.tick();
    for _ in 0..n.div_ceil(TAP_READS_PER_CALL) {
        dp.tap_input(PORT_DDSTACK);
    }
    assert_eq!(dp.stats.ddtap_rx, n as u64);
    assert_eq!(dp.tx_backlog_len(), TX_BACKLOG_MAX);
    assert_eq!(dp.stats.pnic_tx_backlog_drops, 76);
    dp.phy_mut().unwrap().tx_full = None;
    dp.tx_drain();
    assert_eq!(dp.phy().unwrap().tx.len(), TX_BACKLOG_MAX);
}

#[test]
fn aggregation_merges_a_stream_and_keeps_its_bytes() {
    let (mut dp, _clock, mut g) = path_with(&[MAC_DST], Some(Policy::Poll), 64);
    let segs: Vec<Seg> = stream(false, 1000, 1448, 40);
    for s in &segs {
        dp.phy_mut().unwrap().inject(&s.build());
    }
    pass(&mut dp);
    let got = g[0].take();
    assert!(got.len() < 40 / 10, "40 segments in {} packets", got.len());
    // The payloads, concatenated in order, are the stream's bytes.
    let payload: Vec<u8> = got.iter().flat_map(|(_, b)| b[66..].to_vec()).collect();
    let want: Vec<u8> = segs.iter().flat_map(|s| s.payload.clone()).collect();
    assert_eq!(payload.len(), want.len());
    assert_eq!(payload, want);
    let l = dp.lro_stats().unwrap();
    assert_eq!(l.segments_in, 40);
}

#[test]
fn a_timeout_aggregate_waits_for_the_timer() {
    let (mut dp, clock, mut g) = path_with(&[MAC_DST], Some(Policy::Timeout { us: 100 }), 64);
    for s in stream(false, 1, 1448, 3) {
        dp.phy_mut().unwrap().inject(&s.build());
    }
    pass(&mut dp);
    assert!(g[0].take().is_empty(), "held until its deadline");
    let deadline = dp.timer_due().expect("the engine has a deadline");
    assert_eq!(dp.ticks_until(deadline).as_micros(), 100);
    dp.timer_armed(deadline);
    assert_eq!(dp.timer_due(), None, "armed already");
    clock.advance(100_000);
    dp.tick();
    dp.timer_fired();
    assert_eq!(g[0].take().len(), 1);
    assert_eq!((dp.stats.lro_timer_arms, dp.stats.lro_timer_fires), (1, 1));
}

#[test]
fn set_turns_aggregation_off_and_flushes_what_it_held() {
    let (mut dp, _clock, mut g) =
        path_with(&[MAC_DST], Some(Policy::Timeout { us: 1_000_000 }), 64);
    for s in stream(false, 1, 1448, 5) {
        dp.phy_mut().unwrap().inject(&s.build());
    }
    pass(&mut dp);
    assert!(g[0].take().is_empty());
    dp.set(Some(None), None, Some(true));
    assert_eq!(g[0].take().len(), 1);
    assert_eq!(dp.lro_policy(), None);
    assert!(dp.config().bo);
    dp.set(Some(Some(Policy::Every(2))), Some(Mode::Page), None);
    assert_eq!(
        (dp.lro_policy(), dp.lro_mode()),
        (Some(Policy::Every(2)), Mode::Page)
    );
}

#[test]
fn a_full_guest_holds_the_port_back_until_it_stalls() {
    let (mut dp, clock, mut g) = path_with(&[MAC_DST], None, 64);
    // More than the guest's 256 RX buffers and netback's queue together.
    for i in 0..1400 {
        dp.phy_mut()
            .unwrap()
            .inject(&frame_to(MAC_DST, MAC_SRC, 100, i as u8));
    }
    pass(&mut dp);
    assert!(dp.stats.pnic_deferred >= 1, "the port waited for the guest");
    assert!(!dp.phy_watched());
    let left = dp.phy().unwrap().rx.len();
    assert!(left > 0, "frames stayed with the port");
    // The guest takes nothing for a whole window: it stalls and the port goes on.
    clock.advance(STALL_NS + 1);
    pass(&mut dp);
    assert_eq!(dp.stats.pnic_stalls, 1);
    assert!(dp.phy().unwrap().rx.len() < left);
    assert!(dp.vif_stats(1).unwrap().rx_queue_full > 0);
    // Nothing delivered was damaged.
    for (_, b) in g[0].take() {
        assert_eq!(b.len(), 100);
    }
}

/// With a receive queue per guest a full guest stops only its own queue: the other guest's
/// frames keep flowing, and the full guest's wait in its queue until it stalls.
#[test]
fn a_full_guest_pauses_only_its_own_receive_queue() {
    let (mut dp, clock, mut g) = path_with(&[MAC_DST, MAC_G2], None, 64);
    // Three queues: MAC_DST (last byte 0x0a) lands in queue 1, MAC_G2 (0x2a) in queue 0.
    dp.phy_mut().unwrap().queues = 3;
    let (q_full, q_other) = (1u32, 0u32);
    // More than g0's 256 RX buffers and netback's queue together, with g1's frames among them.
    let mut to_g1 = Vec::new();
    for i in 0..1400u32 {
        let phy = dp.phy_mut().unwrap();
        phy.inject(&frame_to(MAC_DST, MAC_SRC, 100, i as u8));
        if i % 7 == 0 {
            let f = frame_to(MAC_G2, MAC_SRC, 200, i as u8);
            phy.inject(&f);
            to_g1.push(f);
        }
    }
    pass(&mut dp);
    assert_eq!(
        dp.stats.pnic_deferred, 0,
        "the port as a whole never waited"
    );
    assert!(dp.stats.pnic_queues_paused >= 1, "{:?}", dp.stats);
    assert!(dp.phy_watched() && dp.phy_held());
    assert_eq!(dp.phy().unwrap().paused, 1 << q_full);
    // Every frame for g1 came through, in order, though most of g0's came after them.
    let got: Vec<Vec<u8>> = g[1].take().into_iter().map(|(_, b)| b).collect();
    assert_eq!(got, to_g1);
    let left = dp.phy().unwrap().rx.len();
    assert!(left > 0, "g0's frames stayed in its queue");
    // The daemon would sleep: nothing to take from the queues it serves.
    assert!(!pvnet_dd::datapath::Phy::rx_ready(dp.phy().unwrap()));
    // New frames for g1 still come through while g0's queue waits.
    let late = frame_to(MAC_G2, MAC_SRC, 300, 1);
    dp.phy_mut().unwrap().inject(&late);
    assert!(
        pvnet_dd::datapath::Phy::rx_ready(dp.phy().unwrap()),
        "g1's frame is seen beside g0's paused queue"
    );
    pass(&mut dp);
    assert_eq!(
        g[1].take().into_iter().map(|(_, b)| b).collect::<Vec<_>>(),
        [late]
    );
    assert_eq!(dp.phy().unwrap().rx.len(), left);
    assert_eq!(dp.phy().unwrap().paused & (1 << q_other), 0);
    // g0 takes nothing for a whole window: it stalls, its queue is served again, and its
    // packets are dropped at its full queue in netback.
    clock.advance(STALL_NS + 1);
    pass(&mut dp);
    assert_eq!(dp.stats.pnic_stalls, 1);
    assert_eq!(dp.phy().unwrap().paused, 0);
    assert!(!dp.phy_held());
    assert!(dp.phy().unwrap().rx.len() < left);
    assert!(dp.vif_stats(1).unwrap().rx_queue_full > 0);
    for (_, b) in g[0].take() {
        assert_eq!(b.len(), 100);
    }
}

#[test]
fn leases_in_the_way_are_detached_before_a_sleep() {
    let (mut dp, _clock, _g) = path_with(&[MAC_DST], None, 64);
    // In the way before and after the newest buffers are copied: the fallback copies
    // everything, after which the lease is out of the way.
    dp.phy_mut().unwrap().in_the_way.set(2);
    dp.before_sleep();
    assert_eq!(dp.stats.sleeps_detaching, 1);
    assert_eq!(dp.stats.sleeps_detaching_all, 1);
    // In the way only before: the newest buffers were enough.
    dp.phy_mut().unwrap().in_the_way.set(1);
    dp.before_sleep();
    assert_eq!(dp.stats.sleeps_detaching, 2);
    assert_eq!(dp.stats.sleeps_detaching_all, 1);
    // A port with frames waiting is not slept on: nothing to detach.
    dp.phy_mut()
        .unwrap()
        .inject(&frame_to(MAC_DST, MAC_SRC, 60, 0));
    dp.phy_mut().unwrap().in_the_way.set(2);
    dp.before_sleep();
    assert_eq!(dp.stats.sleeps_detaching, 2);
}

#[test]
fn an_aging_lease_detaches_after_the_poll() {
    let (mut dp, _clock, _g) = path_with(&[MAC_DST], None, 64);
    dp.phy_mut().unwrap().aging = true;
    dp.phy_mut()
        .unwrap()
        .inject(&frame_to(MAC_DST, MAC_SRC, 60, 0));
    pass(&mut dp);
    assert_eq!(dp.stats.aging_detaches, 1);
}

#[test]
fn a_hostile_vif_is_taken_off_and_the_other_goes_on() {
    // Guest 1 is a mock frontend that overflows its TX ring; guest 2 is well behaved.
    let (mut dp, _clock, mut g) = path_with(&[MAC_G2], None, 64);
    let (mut bad, nb) = MockFrontend::connect(4, features()).unwrap();
    let bad_dom = 7;
    dp.add_guest_port(bad_dom);
    assert!(dp.connect_vif(bad_dom, [0x02, 0, 0, 0, 0, 7], nb));
    bad.set_tx_req_prod(RingIdx(10_000));
    dp.tick();
    dp.vif_event(bad_dom);
    let failed = dp.take_failed();
    assert_eq!(failed.len(), 1);
    assert_eq!((failed[0].0, failed[0].2), (bad_dom, Fatal::TxRingOverflow));
    assert!(dp.netback(bad_dom).is_none(), "off the path");
    // Frames for the hostile guest are now dropped; the other guest's still arrive.
    let f = frame_to(MAC_G2, MAC_SRC, 500, 2);
    dp.phy_mut().unwrap().inject(&f);
    pass(&mut dp);
    assert_eq!(g[0].take()[0].1, f);
    assert!(dp.take_failed().is_empty());
}

#[test]
fn a_relayed_port_gets_its_guests_frames_in_batches() {
    let clock = MockClock::default();
    let mut dp = Path::new(
        PathConfig {
            budget: 64,
            bo: false,
        },
        clock,
        None,
        Mode::Skb,
    );
    dp.attach_phy(MockPhy::default()).unwrap();
    let relay = MockTap::default();
    dp.attach_tap(vif_port(1), MAC_DST, Box::new(relay.clone()))
        .unwrap();
    // A frame from the relayed guest teaches the bridge its MAC.
    relay.inject(&frame_to([0x02, 0, 0, 0, 0, 0x99], MAC_DST, 80, 0));
    dp.tick();
    dp.tap_input(vif_port(1));
    assert_eq!(dp.phy().unwrap().tx.len(), 1);
    for i in 0..10 {
        dp.phy_mut()
            .unwrap()
            .inject(&frame_to(MAC_DST, MAC_SRC, 100, i));
    }
    let flushes = relay.0.borrow().flushes;
    pass(&mut dp);
    let s = relay.0.borrow();
    assert_eq!(s.written.len(), 10);
    assert!(s.flushes > flushes);
    assert_eq!(dp.tap_stats(vif_port(1)).unwrap().0.tx, 10);
    assert!(dp.tap_ports().eq([vif_port(1)]));
    let _ = PORT_PNIC;
}

#[test]
fn a_guest_s_share_of_the_lro_table_is_what_the_data_path_was_given() {
    let (dp, _clock, _guests) = path_with(&[MAC_DST], Some(Policy::Poll), 64);
    assert_eq!(
        dp.lro_flows_per_guest(),
        Some(pvnet_dd::lro::MAX_FLOWS_PER_DST)
    );
    let mut dp = dp.with_lro_flows_per_guest(4);
    assert_eq!(dp.lro_flows_per_guest(), Some(4));
    // Turned off and on again (`pvnet set`), the engine keeps the share.
    dp.set(Some(None), None, None);
    assert_eq!(dp.lro_flows_per_guest(), None);
    dp.set(Some(Some(Policy::Adaptive)), None, None);
    assert_eq!(dp.lro_flows_per_guest(), Some(4));
    // Never more than the table, never none.
    let table = pvnet_dd::lro::Config::default().max_flows;
    assert_eq!(
        dp.with_lro_flows_per_guest(1000).lro_flows_per_guest(),
        Some(table)
    );
    let (dp, _clock, _guests) = path_with(&[MAC_DST], Some(Policy::Poll), 64);
    assert_eq!(
        dp.with_lro_flows_per_guest(0).lro_flows_per_guest(),
        Some(1)
    );
}
