//! Back-pressure from the guests to the physical port, bounded so that no guest can hold the
//! others hostage.
//!
//! While a guest's queue cannot take another poll's worth of packets, the port's receive queue
//! that carries its frames is not polled: the kernel's ring keeps the frames (a slow guest loses
//! nothing, and a burst is not dropped). With a receive queue per guest (the default: see
//! `pvnet_pnic::Pnic::pause_queues`) only that guest's queue waits, as a NIC with VMDq stops
//! one pool; the other guests are served on, and what overflows the waiting queue's ring is
//! dropped by the kernel in that queue. With one queue the whole port waits. But a guest that
//! holds its queue back must keep taking packets: from the moment it first does, it has
//! [`STALL_NS`] to take one queue's worth of packets (its packet cap, [`PROGRESS`] by default;
//! then its window starts over). One that does not is not waited for during [`PENALTY_NS`]:
//! its queue is polled as if it were not there, and its packets are dropped at its full queue
//! (netback counts them). Reopening the port now and then does not reset the window, so a
//! guest that takes nothing, or just enough to let a poll through from time to time, holds its
//! queue back for at most `STALL_NS` in every `STALL_NS + PENALTY_NS`; a guest that is merely
//! slower than the wire (thousands of packets per window) is waited for as long as it is slow,
//! which with one queue holds back every guest.

use std::collections::BTreeMap;

/// How long a full guest may hold the port back without taking a queue's worth of packets (ns).
pub const STALL_NS: u64 = 100_000_000;
/// Packets a guest must take within [`STALL_NS`] while it holds the port back: one queue's worth
/// ([`GuestLoad::progress`]); this with the default queue.
pub const PROGRESS: u64 = crate::netback::RX_QUEUE_LIMIT as u64;
/// How long a guest that stalled is not waited for (ns).
pub const PENALTY_NS: u64 = 10_000_000_000;

/// What the port does now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Poll: no guest to wait for.
    Poll,
    /// Don't poll: a full guest is within its window.
    Wait,
    /// Poll: a full guest has just stalled (it is penalized from now on).
    Stalled,
}

/// One guest as the gate sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuestLoad {
    pub dom: u16,
    /// Its queue cannot take another poll's worth of packets.
    pub full: bool,
    /// Packets it has taken so far (a running count).
    pub taken: u64,
    /// Packets it must take within [`STALL_NS`] to be waited for again: its queue's worth.
    pub progress: u64,
}

/// The port's back-pressure state. Time is passed in (ns, any monotonic origin).
#[derive(Clone, Debug, Default)]
pub struct PortGate {
    /// Per guest that held the port back: when its window began, and its count then.
    window: BTreeMap<u16, (u64, u64)>,
    /// Guests not waited for, until when.
    penalty: BTreeMap<u16, u64>,
    /// Stalls so far: guests that were then not waited for.
    stalls: u64,
}

impl PortGate {
    /// Decides for the guests as they are now.
    pub fn check(&mut self, now: u64, guests: impl IntoIterator<Item = GuestLoad>) -> Gate {
        self.check_each(now, guests, |_| {})
    }

    /// [`PortGate::check`], telling `waiting` each guest that is waited for (full, within its
    /// window): a port with a receive queue per guest stops only those guests' queues.
    pub fn check_each(
        &mut self,
        now: u64,
        guests: impl IntoIterator<Item = GuestLoad>,
        mut waiting_for: impl FnMut(u16),
    ) -> Gate {
        self.penalty.retain(|_, until| *until > now);
        let (mut waiting, mut stalled) = (false, false);
        for g in guests {
            if self.penalty.contains_key(&g.dom) {
                continue;
            }
            let w = self.window.get(&g.dom).copied();
            let (start, base) = match w {
                // It kept taking packets: a new window.
                Some((_, base)) if g.taken.saturating_sub(base) >= g.progress.max(1) => {
                    (now, g.taken)
                }
                Some(w) => w,
                None => (now, g.taken),
            };
            if !g.full {
                // Not holding the port back. A window that ran out without a stall is forgotten;
                // one still running stays, so reopening the port briefly does not reset it.
                if w.is_some() && (start == now || now.saturating_sub(start) >= STALL_NS) {
                    self.window.remove(&g.dom);
                } else if w.is_some() {
                    self.window.insert(g.dom, (start, base));
                }
                continue;
            }
            if now.saturating_sub(start) >= STALL_NS {
                self.window.remove(&g.dom);
                self.penalty.insert(g.dom, now.saturating_add(PENALTY_NS));
                self.stalls += 1;
                stalled = true;
                continue;
            }
            self.window.insert(g.dom, (start, base));
            waiting_for(g.dom);
            waiting = true;
        }
        // Another full guest still within its window is waited for even when one stalled.
        match (waiting, stalled) {
            (true, _) => Gate::Wait,
            (false, true) => Gate::Stalled,
            (false, false) => Gate::Poll,
        }
    }

    /// Guests that stalled so far (each then not waited for during [`PENALTY_NS`]).
    pub fn stalls(&self) -> u64 {
        self.stalls
    }

    /// Whether domain `dom` is not waited for now.
    pub fn penalized(&self, dom: u16, now: u64) -> bool {
        self.penalty.get(&dom).is_some_and(|until| *until > now)
    }

    /// Forgets a domain (it disconnected).
    pub fn remove(&mut self, dom: u16) {
        self.penalty.remove(&dom);
        self.window.remove(&dom);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn g(dom: u16, full: bool, taken: u64) -> GuestLoad {
        GuestLoad {
            dom,
            full,
            taken,
            progress: PROGRESS,
        }
    }

    #[test]
    fn waits_for_a_full_guest_within_its_window() {
        let mut p = PortGate::default();
        assert_eq!(p.check(0, [g(3, false, 0)]), Gate::Poll);
        assert_eq!(p.check(1, [g(3, true, 0)]), Gate::Wait);
        assert_eq!(p.check(STALL_NS, [g(3, true, 10)]), Gate::Wait);
        assert!(!p.penalized(3, STALL_NS));
    }

    #[test]
    fn the_progress_asked_of_a_guest_is_its_own_queue_s_worth() {
        // 5 packets per ms: 500 per window. Enough with a 128-packet queue, not with 1024.
        let run = |progress: u64| {
            let mut p = PortGate::default();
            for ms in 0..1000u64 {
                let load = GuestLoad {
                    dom: 3,
                    full: true,
                    taken: 5 * ms,
                    progress,
                };
                if p.check(ms * MS, [load]) == Gate::Stalled {
                    return Some(ms);
                }
            }
            None
        };
        assert_eq!(run(128), None);
        assert_eq!(run(PROGRESS), Some(STALL_NS / MS));
    }

    #[test]
    fn a_slow_guest_that_keeps_taking_packets_is_waited_for_as_long_as_it_is_slow() {
        let mut p = PortGate::default();
        // Full all the time, taking 20 packets per ms (20,000 per second) for 10 s.
        for ms in 0..10_000u64 {
            assert_eq!(
                p.check(ms * MS, [g(3, true, 20 * ms)]),
                Gate::Wait,
                "at {ms} ms"
            );
        }
        assert!(!p.penalized(3, 10_000 * MS));
    }

    #[test]
    fn a_guest_that_takes_nothing_is_not_waited_for_then() {
        let mut p = PortGate::default();
        assert_eq!(p.check(0, [g(3, true, 5)]), Gate::Wait);
        assert_eq!(p.check(STALL_NS, [g(3, true, 5)]), Gate::Stalled);
        assert!(p.penalized(3, STALL_NS));
        // Still full: the port is polled (its packets are dropped at its queue).
        assert_eq!(p.check(STALL_NS + MS, [g(3, true, 5)]), Gate::Poll);
        assert_eq!(
            p.check(STALL_NS + PENALTY_NS - 1, [g(3, true, 5)]),
            Gate::Poll
        );
        // The penalty is over: it is waited for again, within a new window.
        assert_eq!(p.check(STALL_NS + PENALTY_NS, [g(3, true, 5)]), Gate::Wait);
    }

    #[test]
    fn reopening_the_port_now_and_then_holds_it_back_a_bounded_share() {
        // Hostile: full, but takes 65 packets every 99 ms, just enough to let one poll through.
        let mut p = PortGate::default();
        let (mut waited, mut taken) = (0u64, 0u64);
        let end = 60_000 * MS;
        for ms in 0..end / MS {
            let open = ms % 99 == 0;
            if open {
                taken += 65;
            }
            if p.check(ms * MS, [g(7, !open, taken)]) == Gate::Wait {
                waited += MS;
            }
        }
        // At most one window per window + penalty.
        let bound = (end / (STALL_NS + PENALTY_NS) + 1) * STALL_NS;
        assert!(
            waited <= bound,
            "waited {waited} ns of {end}, bound {bound}"
        );
        assert!(waited >= STALL_NS / 2);
    }

    #[test]
    fn one_stalled_guest_does_not_stop_the_wait_for_another() {
        let mut p = PortGate::default();
        assert_eq!(p.check(0, [g(3, true, 0), g(4, false, 0)]), Gate::Wait);
        assert_eq!(
            p.check(STALL_NS - MS, [g(3, true, 0), g(4, true, 0)]),
            Gate::Wait
        );
        // 3 stalls; 4's window is young: still waiting, for 4.
        assert_eq!(
            p.check(STALL_NS, [g(3, true, 0), g(4, true, 0)]),
            Gate::Wait
        );
        assert!(p.penalized(3, STALL_NS) && !p.penalized(4, STALL_NS));
        p.remove(3);
        assert!(!p.penalized(3, STALL_NS));
    }
}
