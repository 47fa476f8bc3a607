//! The LRO flush policies with an explicit clock (µs ticks): poll, every:N, timeout, adaptive,
//! the hold limit, the idle flush, eviction, run-time reconfiguration, and the stats surface.

use crate::lro_common;

use lro_common::*;
use pvnet_dd::lro::{
    Config, Lro, Mode, Policy, Reason, HOLD_LIMIT_US, IDLE_FLUSH_US, STREAM_GAP_US,
};
use pvnet_dd::packet::{Chain, Packet};
use pvnet_wire::vnet;

/// An engine driven like the daemon does: the timer is served (at its deadline) before
/// anything else happens at a later time.
struct Sim {
    lro: Lro,
    out: Vec<Packet>,
    now: u64,
}

impl Sim {
    fn new(mode: Mode, policy: Policy) -> Sim {
        Sim {
            lro: engine(mode, policy),
            out: Vec::new(),
            now: 0,
        }
    }

    fn at(&mut self, t: u64) -> &mut Sim {
        for _ in 0..10_000 {
            match self.lro.next_deadline() {
                Some(d) if d <= t => {
                    self.now = self.now.max(d);
                    self.lro.expire(self.now, &mut self.out);
                }
                _ => {
                    self.now = t;
                    return self;
                }
            }
        }
        panic!("expire does not make progress");
    }

    /// The next frame of the same poll arrived at `t`: no timer runs inside a poll.
    fn arrived(&mut self, t: u64) -> &mut Sim {
        self.now = self.now.max(t);
        self
    }

    fn rx(&mut self, s: &Seg) -> &mut Sim {
        self.lro
            .receive(s.build(), no_vnet(), self.now, &mut self.out);
        self
    }

    fn end(&mut self, frames: usize) -> &mut Sim {
        self.lro.end_poll(frames, self.now, &mut self.out);
        self
    }

    fn flushed(&self, r: Reason) -> u64 {
        self.lro.stats().flush.get(r)
    }

    /// Number of segments in each output packet.
    fn sizes(&self) -> Vec<u16> {
        self.out
            .iter()
            .map(|p| {
                if p.vnet.gso_type == vnet::GSO_NONE {
                    1
                } else {
                    ((p.len() - usize::from(p.vnet.hdr_len)) / usize::from(p.vnet.gso_size)) as u16
                }
            })
            .collect()
    }
}

#[test]
fn poll_flushes_at_the_end_of_each_poll() {
    let s = stream(false, 1, 1000, 6);
    let mut sim = Sim::new(Mode::Page, Policy::Poll);
    sim.rx(&s[0]).rx(&s[1]).rx(&s[2]);
    assert!(sim.out.is_empty());
    assert_eq!(sim.lro.held(), 1);
    sim.end(3);
    assert_eq!(sim.sizes(), vec![3]);
    assert_eq!(sim.lro.next_deadline(), None);
    sim.at(10).rx(&s[3]).rx(&s[4]).rx(&s[5]).end(3);
    assert_eq!(sim.sizes(), vec![3, 3]);
    assert_eq!(sim.flushed(Reason::Poll), 2);
}

#[test]
fn every_2_flushes_every_other_poll() {
    let s = stream(false, 1, 1000, 6);
    let mut sim = Sim::new(Mode::Skb, Policy::Every(2));
    sim.rx(&s[0]).rx(&s[1]).end(2);
    assert!(sim.out.is_empty(), "held across the first poll");
    sim.at(20).rx(&s[2]).rx(&s[3]).end(2);
    assert_eq!(sim.sizes(), vec![4]);
    sim.at(40).rx(&s[4]).end(1).at(60).rx(&s[5]).end(1);
    assert_eq!(sim.sizes(), vec![4, 2]);
    assert_eq!(sim.flushed(Reason::Every), 2);
    assert_eq!(per_flow(&sim.out)[&(false, 40000)].len(), 6);
}

#[test]
fn every_n_flushes_an_idle_port() {
    let s = stream(false, 1, 1000, 3);
    let mut sim = Sim::new(Mode::Page, Policy::Every(2));
    sim.at(5).rx(&s[0]).rx(&s[1]).end(2);
    let idle = 5 + u64::from(IDLE_FLUSH_US);
    assert_eq!(sim.lro.next_deadline(), Some(idle));
    sim.lro.expire(idle - 1, &mut sim.out);
    assert!(sim.out.is_empty());
    sim.lro.expire(idle, &mut sim.out);
    assert_eq!(sim.sizes(), vec![2]);
    assert_eq!(sim.flushed(Reason::Idle), 1);
    assert_eq!(sim.lro.next_deadline(), None);
}

#[test]
fn idle_deadline_is_enforced_by_receive_too() {
    // The timer was not served: the next frame finds the overdue aggregate and flushes it first.
    let s = stream(false, 1, 1000, 3);
    let mut lro = engine(Mode::Page, Policy::Every(2));
    let mut out = Vec::new();
    lro.receive(s[0].build(), no_vnet(), 0, &mut out);
    lro.receive(s[1].build(), no_vnet(), 0, &mut out);
    lro.end_poll(2, 0, &mut out);
    lro.receive(
        s[2].build(),
        no_vnet(),
        u64::from(IDLE_FLUSH_US) + 50,
        &mut out,
    );
    assert_eq!(out.len(), 1);
    assert_eq!(lro.held(), 1);
    assert_eq!(lro.stats().flush.idle, 1);
}

#[test]
fn poll_policy_without_end_poll_still_flushes_when_idle() {
    let s = stream(true, 1, 1000, 2);
    let mut sim = Sim::new(Mode::Page, Policy::Poll);
    sim.at(7).rx(&s[0]).rx(&s[1]);
    assert_eq!(sim.lro.next_deadline(), Some(7 + u64::from(IDLE_FLUSH_US)));
    sim.at(1000);
    assert_eq!(sim.sizes(), vec![2]);
    assert_eq!(sim.flushed(Reason::Idle), 1);
}

#[test]
fn timeout_counts_from_the_first_segment() {
    let s = stream(false, 1, 1000, 4);
    let mut sim = Sim::new(Mode::Page, Policy::Timeout { us: 100 });
    sim.rx(&s[0]).at(10).rx(&s[1]).at(20).end(2);
    assert!(sim.out.is_empty());
    assert_eq!(sim.lro.next_deadline(), Some(100));
    sim.lro.expire(99, &mut sim.out);
    assert!(sim.out.is_empty());
    sim.at(100);
    assert_eq!(sim.sizes(), vec![2]);
    assert_eq!(sim.flushed(Reason::Timeout), 1);
    let lat = sim.lro.stats().flush_latency;
    assert_eq!(lat.count, 1);
    assert!((lat.p50_us - 100.0).abs() < 1.0 && (lat.max_us - 100.0).abs() < 1.0);
}

#[test]
fn timeout_is_checked_in_receive() {
    let s = stream(false, 1, 1000, 3);
    let mut lro = engine(Mode::Skb, Policy::Timeout { us: 100 });
    let mut out = Vec::new();
    lro.receive(s[0].build(), no_vnet(), 0, &mut out);
    lro.receive(s[1].build(), no_vnet(), 10, &mut out);
    lro.end_poll(2, 20, &mut out);
    lro.receive(s[2].build(), no_vnet(), 150, &mut out);
    assert_eq!(out.len(), 1, "flushed before the late segment");
    assert_eq!(lro.held(), 1, "the late segment starts a new aggregate");
    assert_eq!(lro.stats().flush.timeout, 1);
    assert_eq!(lro.stats().flush.seq, 0);
}

#[test]
fn hold_limit_bounds_every_policy() {
    // A stream that never stops: one 100-byte segment every 20 µs, a poll per segment.
    for policy in [Policy::Every(1_000_000), Policy::Adaptive] {
        let s = stream(false, 1, 100, 60);
        let mut sim = Sim::new(Mode::Page, policy);
        for (i, seg) in s.iter().enumerate() {
            sim.at(20 * i as u64).rx(seg).end(1);
            if let Some(d) = sim.lro.next_deadline() {
                assert!(d <= sim.now + u64::from(HOLD_LIMIT_US));
            }
        }
        assert!(sim.flushed(Reason::HoldLimit) >= 1, "{policy}");
        let lat = sim.lro.stats().flush_latency;
        assert!(lat.max_us <= f64::from(HOLD_LIMIT_US), "{policy}: {lat:?}");
        assert!(
            lat.max_us >= f64::from(HOLD_LIMIT_US) - 20.0,
            "{policy}: {lat:?}"
        );
    }
}

#[test]
fn idle_port_never_holds_without_bound() {
    for policy in [
        Policy::Poll,
        Policy::Every(3),
        Policy::Timeout { us: 1000 },
        Policy::Adaptive,
    ] {
        for mode in [Mode::Skb, Mode::Page] {
            let s = stream(false, 1, 1000, 3);
            let mut sim = Sim::new(mode, policy);
            sim.at(3).rx(&s[0]).rx(&s[1]).rx(&s[2]);
            let d = sim.lro.next_deadline().expect("something held");
            assert!(d <= 3 + u64::from(HOLD_LIMIT_US));
            sim.at(u64::MAX / 2);
            assert_eq!(sim.lro.held(), 0, "{policy}");
            assert_eq!(sim.lro.next_deadline(), None);
            let max = sim.lro.stats().flush_latency.max_us;
            assert!(max <= f64::from(HOLD_LIMIT_US), "{policy}: {max}");
        }
    }
}

/// One flow of `count` segments, one per poll, `gap` µs apart, with timers served.
fn paced(policy: Policy, gap: u64, per_poll: usize, count: usize) -> Sim {
    let s = stream(false, 1, 1448, count);
    let mut sim = Sim::new(Mode::Page, policy);
    for (i, chunk) in s.chunks(per_poll).enumerate() {
        sim.at(gap * i as u64);
        for seg in chunk {
            sim.rx(seg);
        }
        sim.end(chunk.len());
    }
    sim.at(u64::MAX / 2);
    assert_eq!(per_flow(&sim.out)[&(false, 40000)].len(), count);
    sim
}

#[test]
fn adaptive_aggregates_bulk_at_least_as_much_as_every_2() {
    for (gap, per_poll) in [(2, 1), (5, 1), (12, 1), (20, 4), (40, 16)] {
        let every2 = paced(Policy::Every(2), gap, per_poll, 400).lro.stats();
        let adaptive = paced(Policy::Adaptive, gap, per_poll, 400).lro.stats();
        assert!(
            adaptive.lro_rate >= every2.lro_rate,
            "gap {gap} per poll {per_poll}: adaptive {} < every:2 {}",
            adaptive.lro_rate,
            every2.lro_rate
        );
        assert!(adaptive.lro_rate > 10.0, "gap {gap}: {}", adaptive.lro_rate);
    }
}

#[test]
fn adaptive_flushes_a_full_aggregate_at_once() {
    let sim = paced(Policy::Adaptive, 5, 1, 46);
    // The first segment has no history and leaves at its poll's end; then 45 fill 64 KiB.
    assert_eq!(sim.sizes(), vec![1, 45]);
    assert_eq!(sim.flushed(Reason::SizeLimit), 1);
}

#[test]
fn adaptive_request_response_sees_no_added_delay() {
    // A request every 100 µs (without PSH, the harder case), a bulk flow alongside.
    let mut sim = Sim::new(Mode::Page, Policy::Adaptive);
    let bulk = stream(false, 1, 1448, 200);
    let mut b = bulk.iter();
    for round in 0..20u32 {
        let req = Seg::v4(round * 300, &bytes(round, 300)).with(|s| {
            s.src_port = 7000;
            s.ip_id = round as u16;
        });
        for k in 0..10u64 {
            sim.at(u64::from(round) * 100 + k * 10);
            let before = sim.out.len();
            if k == 0 {
                sim.rx(&req);
            }
            let seg = b.next().unwrap();
            sim.rx(seg).end(1 + usize::from(k == 0));
            if k == 0 {
                let left = sim.out[before..].iter().any(|p| {
                    pvnet_wire::flow::parse_tcp(&p.to_vec())
                        .unwrap()
                        .key
                        .src_port
                        == 7000
                });
                assert!(
                    left,
                    "round {round}: the request left at the end of its poll"
                );
            }
        }
    }
    sim.at(u64::MAX / 2);
    let st = sim.lro.stats();
    assert!(st.lro_rate > 5.0, "bulk still aggregates: {}", st.lro_rate);
    let flows = per_flow(&sim.out);
    assert_eq!(flows[&(false, 7000)].len(), 20);
    assert_eq!(flows[&(false, 40000)].len(), 200);
}

#[test]
fn adaptive_fast_request_response_without_psh_is_held_at_most_once() {
    // One 200-byte request every 30 µs (within the streaming horizon), never PSH; each
    // acknowledges the previous response (open loop: the sender does not wait for us).
    let mut sim = Sim::new(Mode::Page, Policy::Adaptive);
    let mut delayed = 0;
    for i in 0..50u32 {
        let t = 30 * u64::from(i);
        let req = Seg::v4(i * 200, &bytes(i, 200)).with(|s| {
            s.ip_id = i as u16;
            s.ack = 1000 * i;
        });
        sim.at(t).rx(&req).end(1);
        if sim.lro.held() > 0 {
            delayed += 1;
        }
    }
    assert!(delayed <= 1, "{delayed} requests held past their poll");
}

#[test]
fn adaptive_lone_request_leaves_at_end_of_poll() {
    let mut sim = Sim::new(Mode::Skb, Policy::Adaptive);
    sim.rx(&Seg::v6(1, b"GET / HTTP/1.1"));
    assert_eq!(sim.lro.held(), 1);
    sim.end(1);
    assert_eq!(sim.out.len(), 1);
    assert_eq!(sim.flushed(Reason::Adaptive), 1);
}

#[test]
fn adaptive_deadline_follows_the_flow_gap() {
    let s = stream(false, 1, 1448, 5);
    let mut sim = Sim::new(Mode::Page, Policy::Adaptive);
    for (i, seg) in s.iter().enumerate() {
        sim.at(6 * i as u64).rx(seg).end(1);
    }
    // Gaps of 6 µs: held after the last segment (at 24) until 24 + 2 × 6.
    assert_eq!(sim.lro.held(), 1);
    assert_eq!(sim.lro.next_deadline(), Some(36));
    sim.lro.expire(35, &mut sim.out);
    assert_eq!(sim.sizes(), vec![1]);
    sim.lro.expire(36, &mut sim.out);
    assert_eq!(sim.sizes(), vec![1, 4]);
    assert_eq!(sim.flushed(Reason::Adaptive), 2);
}

#[test]
fn adaptive_holds_whole_messages_of_a_sender_that_pauses_between_them() {
    // Messages of 40 segments 2 µs apart, the last with PSH, one every 700 µs; each message
    // reaches the engine in two polls. The pause between messages is far above the streaming
    // bound, the gaps inside them far below: from the second message on, each leaves whole.
    let (mss, per_msg, msgs) = (1448, 40usize, 12u32);
    let s = stream(false, 1, mss, per_msg * msgs as usize);
    let mut sim = Sim::new(Mode::Page, Policy::Adaptive);
    for m in 0..msgs as usize {
        let t0 = 700 * m as u64;
        for (k, seg) in s[m * per_msg..(m + 1) * per_msg].iter().enumerate() {
            let seg = seg.clone().with(|x| {
                if k + 1 == per_msg {
                    x.flags |= PSH;
                }
            });
            let t = t0 + 2 * k as u64;
            if k % (per_msg / 2) == 0 {
                // A poll starts: the timer is served first.
                sim.at(t);
            }
            sim.arrived(t).rx(&seg);
            if (k + 1) % (per_msg / 2) == 0 {
                sim.end(per_msg / 2);
            }
        }
    }
    sim.at(u64::MAX / 2);
    let sizes = sim.sizes();
    // The first message: no history at its first poll's end, so its first half leaves then.
    assert_eq!(&sizes[..2], &[20, 20], "{sizes:?}");
    assert!(
        sizes[2..].iter().all(|&n| n == 40),
        "every later message whole: {sizes:?}"
    );
    assert_eq!(sim.flushed(Reason::Psh), u64::from(msgs));
}

#[test]
fn adaptive_does_not_hold_a_slow_flow() {
    let gap = u64::from(STREAM_GAP_US) + 10;
    let sim = paced(Policy::Adaptive, gap, 1, 20);
    assert_eq!(sim.sizes(), vec![1; 20]);
    let lat = sim.lro.stats().flush_latency;
    assert_eq!(lat.max_us, 0.0, "never held past its poll");
}

#[test]
fn eviction_flushes_the_oldest_aggregate() {
    let mut lro = Lro::new(Config {
        mode: Mode::Page,
        policy: Policy::Every(4),
        max_flows: 2,
        max_flows_per_dst: 2,
        ticks_per_us: 1,
    });
    let mut out = Vec::new();
    let flow = |port: u16| {
        stream(false, 1, 1000, 2)
            .into_iter()
            .map(move |s| s.with(|s| s.src_port = port))
            .collect::<Vec<_>>()
    };
    let (a, b, c) = (flow(1), flow(2), flow(3));
    for (t, s) in [(0, &a), (1, &b)] {
        for seg in s {
            lro.receive(seg.build(), no_vnet(), t, &mut out);
        }
    }
    assert_eq!(lro.held(), 2);
    lro.receive(c[0].build(), no_vnet(), 2, &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(
        per_flow(&out).keys().copied().collect::<Vec<_>>(),
        vec![(false, 1)]
    );
    let st = lro.stats();
    assert_eq!((st.evictions, st.flush.eviction, st.flows), (1, 1, 2));
    // A flow whose aggregate has left keeps no claim on the table.
    lro.flush_all(3, &mut out);
    lro.receive(a[0].build(), no_vnet(), 4, &mut out);
    assert_eq!(lro.stats().evictions, 1);
}

#[test]
fn set_policy_at_run_time_keeps_what_is_held() {
    let s = stream(false, 1, 1000, 4);
    let mut sim = Sim::new(Mode::Page, Policy::Every(2));
    sim.rx(&s[0]).rx(&s[1]).end(2);
    sim.lro.set_policy(Policy::Poll);
    assert_eq!(sim.lro.held(), 1);
    assert_eq!(sim.lro.config().policy, Policy::Poll);
    sim.at(10).rx(&s[2]).end(1);
    assert_eq!(sim.sizes(), vec![3]);
    assert_eq!(sim.flushed(Reason::Poll), 1);

    sim.lro.set_policy(Policy::Every(5));
    sim.at(20).rx(&s[3]).end(1);
    sim.lro.set_policy(Policy::Timeout { us: 30 });
    assert_eq!(sim.lro.next_deadline(), Some(50));
    sim.at(50);
    assert_eq!(sim.flushed(Reason::Timeout), 1);
    assert_eq!(sim.lro.held(), 0);
}

#[test]
fn set_policy_to_adaptive_lets_a_flow_without_history_go() {
    let s = stream(false, 1, 1000, 2);
    let mut sim = Sim::new(Mode::Page, Policy::Every(9));
    sim.rx(&s[0]).rx(&s[1]).end(2);
    sim.lro.set_policy(Policy::Adaptive);
    sim.at(1).end(0);
    assert_eq!(sim.sizes(), vec![2]);
    assert_eq!(sim.flushed(Reason::Adaptive), 1);
}

#[test]
fn set_mode_flushes_then_switches_representation() {
    let s = stream(false, 1, 1000, 4);
    let mut sim = Sim::new(Mode::Page, Policy::Every(2));
    sim.rx(&s[0]).rx(&s[1]);
    let mut out = Vec::new();
    sim.lro.set_mode(Mode::Skb, 0, &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].chain, Chain::PageFrags);
    assert_eq!(sim.flushed(Reason::Reconfigure), 1);
    assert_eq!(sim.lro.config().mode, Mode::Skb);
    sim.rx(&s[2]).rx(&s[3]);
    sim.lro.flush_all(0, &mut out);
    assert_eq!(out[1].chain, Chain::FragList);
    assert_eq!(sim.flushed(Reason::Shutdown), 1);
    assert_eq!(per_flow(&out)[&(false, 40000)].len(), 4);
}

#[test]
fn flush_all_leaves_nothing() {
    let mut sim = Sim::new(Mode::Skb, Policy::Every(2));
    for port in 1..=5u16 {
        for seg in stream(port % 2 == 0, 1, 500, 3) {
            sim.rx(&seg.with(|s| s.src_port = port));
        }
    }
    assert_eq!(sim.lro.held(), 5);
    sim.lro.flush_all(0, &mut sim.out);
    assert_eq!(sim.lro.held(), 0);
    assert_eq!(sim.lro.next_deadline(), None);
    assert_eq!(sim.sizes(), vec![3; 5]);
    let st = sim.lro.stats();
    assert_eq!((st.flush.shutdown, st.flows, st.gso_out), (5, 0, 5));
    assert_eq!(st.lro_rate, 3.0);
}

#[test]
fn stats_serialize_with_the_documented_names() {
    let sim = paced(Policy::Every(2), 5, 1, 10);
    let st = sim.lro.stats();
    assert_eq!(st.frames_in, st.segments_in + st.passthrough);
    let v = serde_json::to_value(&st).unwrap();
    for k in [
        "frames_in",
        "segments_in",
        "aggregates_out",
        "gso_out",
        "passthrough",
        "lro_rate",
        "evictions",
        "flows",
        "flush",
        "flush_latency",
    ] {
        assert!(v.get(k).is_some(), "{k}");
    }
    for r in Reason::ALL {
        assert!(v["flush"].get(r.name()).is_some(), "{}", r.name());
    }
    for k in ["count", "p50_us", "p99_us", "max_us"] {
        assert!(v["flush_latency"].get(k).is_some(), "{k}");
    }
    assert_eq!(v["flush"]["every"], 5);
    assert_eq!(v["lro_rate"], 2.0);
}

#[test]
fn mode_and_policy_strings() {
    for (s, p) in [
        ("poll", Policy::Poll),
        ("every:2", Policy::Every(2)),
        ("every:1", Policy::Every(1)),
        ("timeout:1", Policy::Timeout { us: 1 }),
        ("timeout:1000", Policy::Timeout { us: 1000 }),
        ("adaptive", Policy::Adaptive),
    ] {
        assert_eq!(s.parse::<Policy>().unwrap(), p);
        assert_eq!(p.to_string(), s);
        assert_eq!(serde_json::to_string(&p).unwrap(), format!("\"{s}\""));
        assert_eq!(
            serde_json::from_str::<Policy>(&format!("\"{s}\"")).unwrap(),
            p
        );
    }
    for bad in [
        "",
        "Poll",
        "every",
        "every:",
        "every:0",
        "every:-1",
        "every:x",
        "timeout:0",
        "timeout:1001",
        "timeout:",
        "fast",
    ] {
        let e = bad.parse::<Policy>().unwrap_err().to_string();
        assert!(e.contains(&format!("{bad:?}")), "{e}");
        assert!(serde_json::from_str::<Policy>(&format!("\"{bad}\"")).is_err());
    }
    assert!("timeout:5000"
        .parse::<Policy>()
        .unwrap_err()
        .to_string()
        .contains("1..=1000"));
    for (s, m) in [("skb", Mode::Skb), ("page", Mode::Page)] {
        assert_eq!(s.parse::<Mode>().unwrap(), m);
        assert_eq!(m.to_string(), s);
        assert_eq!(serde_json::to_string(&m).unwrap(), format!("\"{s}\""));
    }
    assert!("frag"
        .parse::<Mode>()
        .unwrap_err()
        .to_string()
        .contains("\"skb\""));
    let cfg: Config = serde_json::from_str(r#"{"mode":"skb","policy":"every:2"}"#).unwrap();
    assert_eq!(
        (cfg.mode, cfg.policy, cfg.max_flows),
        (Mode::Skb, Policy::Every(2), 32)
    );
    let d = Config::default();
    assert_eq!(d.max_flows, 32);
}

/// Two receive queues on two timelines, 1 ms apart (queue 0 hands over frames that waited
/// behind a backlog): with an engine per queue, the adaptive policy holds each flow across its
/// polls, its segments coming back within microseconds on its own queue's clock. One engine fed both queues in turn takes queue 1's
/// times as queue 0's "now" and flushes queue 0's aggregate at every poll.
#[test]
fn adaptive_per_queue_engines_keep_their_timelines() {
    use pvnet_dd::lro::Queues;
    let cfg = Config {
        policy: Policy::Adaptive,
        max_flows: 32,
        max_flows_per_dst: 32,
        ticks_per_us: 1,
        ..Config::default()
    };
    let polls = 6u32;
    let run = |engines: usize| {
        let mut q = Queues::new(cfg.clone(), engines);
        let mut out = Vec::new();
        for p in 0..polls {
            for (qi, base, port) in [(0usize, 10_000u64, 40000u16), (1, 11_000, 40001)] {
                let e = q.queue(qi.min(engines - 1));
                for k in 0..4u32 {
                    let i = p * 4 + k;
                    let s = Seg::v4(1 + i * 1000, &[7; 1000]).with(|s| s.src_port = port);
                    e.receive(s.build(), no_vnet(), base + u64::from(i) * 2, &mut out);
                }
                e.end_poll(4, base + u64::from(p * 4 + 3) * 2, &mut out);
            }
        }
        q.flush_all(20_000, &mut out);
        let st = q.stats();
        assert_eq!(
            st.segments_in,
            u64::from(2 * polls * 4),
            "every segment counted"
        );
        let flows = per_tuple(&out);
        assert_eq!(flows.len(), 2);
        for segs in flows.values() {
            let seqs: Vec<u32> = segs.iter().map(|(s, _)| *s).collect();
            assert_eq!(
                seqs,
                (0..polls * 4).map(|i| 1 + i * 1000).collect::<Vec<_>>()
            );
        }
        (st.aggregates_out, st.flush_latency.count)
    };
    // Per flow: the first poll's four segments (no history yet), then one aggregate of the
    // twenty after them.
    assert_eq!(run(2), (4, 4), "two aggregates per flow");
    let (aggs, _) = run(1);
    assert!(
        aggs >= 4 + 4,
        "one engine for both cuts queue 0's flow: {aggs} aggregates"
    );
}

/// Engines that a resize takes away flush what they hold and leave their counts in the
/// statistics: the port's aggregation counters never go back.
#[test]
fn queues_resize_keeps_the_counts_of_engines_that_go() {
    use pvnet_dd::lro::Queues;
    let cfg = Config {
        policy: Policy::Timeout { us: 500 },
        max_flows: 32,
        max_flows_per_dst: 32,
        ticks_per_us: 1,
        ..Config::default()
    };
    let mut q = Queues::new(cfg, 3);
    let mut out = Vec::new();
    for (e, port) in [(0usize, 40000u16), (1, 40001), (2, 40002)] {
        for k in 0..4u32 {
            let s = Seg::v4(1 + k * 1000, &[7; 1000]).with(|s| s.src_port = port);
            q.queue(e)
                .receive(s.build(), no_vnet(), 10 + u64::from(k), &mut out);
        }
    }
    assert!(out.is_empty(), "the timeout holds every flow");
    q.resize(1, 20, &mut out);
    assert_eq!(q.len(), 1);
    assert_eq!(out.len(), 2, "engines 1 and 2 flushed their aggregates");
    assert_eq!(q.held(), 1, "engine 0 still holds its flow");
    let st = q.stats();
    assert_eq!((st.frames_in, st.segments_in), (12, 12), "{st:?}");
    assert_eq!(st.aggregates_out, 2, "{st:?}");
    q.flush_all(30, &mut out);
    let st = q.stats();
    assert_eq!(
        (st.aggregates_out, st.flush_latency.count),
        (3, 3),
        "{st:?}"
    );
    assert_eq!(per_tuple(&out).len(), 3);
    q.resize(2, 40, &mut out);
    assert_eq!(q.stats().frames_in, 12, "growing keeps the counts too");
}
