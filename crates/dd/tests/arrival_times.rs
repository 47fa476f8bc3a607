//! The aggregation engine on the port's receive times: a driver domain taken off the CPU in the
//! middle of a message does not cut the message's aggregate, and the aggregation timer does not
//! flush while frames that may continue an aggregate wait at the port.

use crate::dp_common;
use crate::lro_common;

use dp_common::*;
use lro_common::{stream, MAC_DST, PSH};
use pvnet_dd::lro::Policy;
use pvnet_dd::mock::MockClock;
use pvnet_wire::vnet;

const MSS: usize = 1448;
const SEGS: usize = 32;
/// The wall clock reads this far ahead of the ticks (any offset: only differences matter).
const WALL: u64 = 1_700_000_000_000_000_000;

/// Message `m` of one flow: `SEGS` segments, the last with PSH, stamped 2 µs apart from
/// `first_ns` on the wall clock (when `stamped`), queued at the port.
fn queue_message(dp: &mut Path, m: usize, first_ns: u64, stamped: bool) {
    let s = stream(false, 1 + (m * SEGS * MSS) as u32, MSS, SEGS);
    for (k, seg) in s.into_iter().enumerate() {
        let seg = seg.with(|x| {
            x.ip_id = (m * SEGS + k) as u16;
            if k + 1 == SEGS {
                x.flags |= PSH;
            }
        });
        let phy = dp.phy_mut().unwrap();
        if stamped {
            phy.inject_at(&seg.build(), first_ns + 2_000 * k as u64);
        } else {
            phy.inject(&seg.build());
        }
    }
}

/// An adaptive path with one guest, a 16-frame budget and a wall clock.
fn stamped_path() -> (Path, MockClock, Vec<Guest>) {
    path_on(
        MockClock::with_realtime(WALL),
        &[MAC_DST],
        Some(Policy::Adaptive),
        16,
    )
}

/// Segments in each packet the guest got.
fn sizes(g: &mut Guest) -> Vec<usize> {
    g.take()
        .into_iter()
        .map(|(h, b)| {
            if h.gso_type == vnet::GSO_NONE {
                1
            } else {
                (b.len() - usize::from(h.hdr_len)).div_ceil(usize::from(h.gso_size))
            }
        })
        .collect()
}

/// Polls the port as the daemon does, with `off_cpu_ns` spent off the CPU after the first poll.
fn pass_preempted(dp: &mut Path, clock: &MockClock, off_cpu_ns: u64) {
    dp.tick();
    let mut more = dp.phy_poll();
    clock.advance(off_cpu_ns);
    while more {
        dp.tick();
        more = dp.phy_poll();
    }
    dp.end_pass();
}

/// One flow on a 16-frame budget: a first message teaches the engine the flow streams, then a
/// message whose halves the driver domain polls 3 ms apart (it was preempted in between).
fn preempted_message(stamped: bool) -> (Vec<usize>, Path) {
    let clock = if stamped {
        MockClock::with_realtime(WALL)
    } else {
        MockClock::default()
    };
    let (mut dp, clock, mut g) = path_on(clock, &[MAC_DST], Some(Policy::Adaptive), 16);
    let wall = |c: &MockClock| c.0.get() + WALL;
    // Message 0 arrived over the last 64 µs; the daemon takes it in one pass.
    queue_message(&mut dp, 0, wall(&clock) - 64_000, stamped);
    pass_preempted(&mut dp, &clock, 0);
    let first = sizes(&mut g[0]);
    assert_eq!(first.iter().sum::<usize>(), SEGS, "{first:?}");
    // 500 µs later message 1 arrives whole; the daemon is preempted between its two polls.
    clock.advance(500_000);
    queue_message(&mut dp, 1, wall(&clock) - 64_000, stamped);
    pass_preempted(&mut dp, &clock, 3_000_000);
    (sizes(&mut g[0]), dp)
}

#[test]
fn a_message_polled_across_a_preemption_leaves_whole_on_receive_times() {
    let (got, dp) = preempted_message(true);
    assert_eq!(got, vec![SEGS], "one aggregate of the whole message");
    assert_eq!(dp.lro_stats().unwrap().flush.psh, 2);
}

#[test]
fn without_receive_times_the_preemption_cuts_the_message() {
    // The same run on a port without receive times: the second half is seen 3 ms after the
    // first, past the hold limit, so the first half has left alone.
    let (got, dp) = preempted_message(false);
    assert_eq!(got, vec![SEGS / 2, SEGS / 2]);
    assert_eq!(dp.lro_stats().unwrap().flush.hold_limit, 1);
}

#[test]
fn the_timer_waits_for_the_frames_at_the_port() {
    let (mut dp, clock, mut g) = stamped_path();
    let wall = |c: &MockClock| c.0.get() + WALL;
    queue_message(&mut dp, 0, wall(&clock) - 64_000, true);
    pass_preempted(&mut dp, &clock, 0);
    assert_eq!(sizes(&mut g[0]).iter().sum::<usize>(), SEGS);
    clock.advance(500_000);
    queue_message(&mut dp, 1, wall(&clock) - 64_000, true);
    // First half polled and held; then the daemon is off the CPU past the aggregate's deadline
    // and its timer is served first when it is back.
    dp.tick();
    assert!(dp.phy_poll());
    assert_eq!(dp.lro_held(), 1);
    clock.advance(3_000_000);
    dp.tick();
    dp.timer_fired();
    assert_eq!(dp.stats.lro_timer_deferred, 1);
    assert_eq!(
        dp.lro_held(),
        1,
        "still held: its next segments wait at the port"
    );
    assert!(g[0].take().is_empty());
    // The rest of the pass takes them.
    while dp.phy_poll() {
        dp.tick();
    }
    dp.end_pass();
    assert_eq!(sizes(&mut g[0]), vec![SEGS]);
    // With nothing at the port, the timer flushes as before.
    dp.timer_fired();
    assert_eq!(dp.stats.lro_timer_deferred, 1);
}

#[test]
fn flush_latency_is_the_time_held_not_the_wait_at_the_port() {
    let (mut dp, clock, mut g) = stamped_path();
    // A message that waited 4 ms in the port's ring, read and flushed in one pass (the mock
    // clock does not move during it): held for no time at all.
    queue_message(&mut dp, 0, clock.0.get() + WALL - 4_000_000, true);
    pass_preempted(&mut dp, &clock, 0);
    assert_eq!(sizes(&mut g[0]).iter().sum::<usize>(), SEGS);
    let lat = dp.lro_stats().unwrap().flush_latency;
    assert!(lat.count >= 1 && lat.max_us < 1.0, "{lat:?}");
    // Preempted for 3 ms in the middle of the next message, the held half really waited.
    clock.advance(500_000);
    queue_message(&mut dp, 1, clock.0.get() + WALL - 64_000, true);
    pass_preempted(&mut dp, &clock, 3_000_000);
    let lat = dp.lro_stats().unwrap().flush_latency;
    assert!(lat.max_us >= 3000.0, "{lat:?}");
}
