//! One aggregation engine per receive queue of the physical port.
//!
//! A NIC with several receive queues runs one NAPI instance per queue, and Linux keeps the GRO
//! lists per NAPI instance: each queue's flows are aggregated on that queue's own timeline.
//! The same holds here. The frames of one queue reach the driver domain in the order they
//! arrived, but two queues do not: one may hand over frames that waited a millisecond behind
//! a long backlog while the next hands over frames that arrived just now. One engine for both
//! would take the second queue's arrival times as the first queue's "now" and flush its held
//! aggregates as late, though the segments that continue them are waiting in their queue. So
//! every queue gets its own engine ([`Queues::queue`]); what concerns them all (policy,
//! deadlines, statistics, detaching leases, flushing) goes to each in turn.

use super::stats::Counters;
use super::{Config, Lro, LroStats, Mode, Policy};
use crate::packet::Packet;

/// The engines of a port's receive queues (at least one).
#[derive(Debug)]
pub struct Queues {
    engines: Vec<Lro>,
    /// The counts of engines that [`Queues::resize`] took away: the statistics never go back.
    retired: Option<Counters>,
}

impl Queues {
    /// `n` engines (at least one) of configuration `cfg`.
    pub fn new(cfg: Config, n: usize) -> Queues {
        Queues {
            engines: (0..n.max(1)).map(|_| Lro::new(cfg.clone())).collect(),
            retired: None,
        }
    }

    /// Engines (receive queues).
    pub fn len(&self) -> usize {
        self.engines.len()
    }

    /// Never: there is at least one engine.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// As many engines as the port has queues (at least one). Engines that go flush what
    /// they hold into `out` (reason "shutdown") and leave their counts in [`Queues::stats`];
    /// new ones take the first engine's settings.
    pub fn resize(&mut self, n: usize, now: u64, out: &mut Vec<Packet>) {
        let n = n.max(1);
        while self.engines.len() > n {
            if let Some(mut l) = self.engines.pop() {
                l.flush_all(now, out);
                self.retired.get_or_insert_with(Counters::new).absorb(&l.c);
            }
        }
        let cfg = self.engines[0].config().clone();
        while self.engines.len() < n {
            self.engines.push(Lro::new(cfg.clone()));
        }
    }

    /// The engine of receive queue `q`.
    ///
    /// # Panics
    /// When `q` is not below [`Queues::len`].
    pub fn queue(&mut self, q: usize) -> &mut Lro {
        &mut self.engines[q]
    }

    /// The configuration (every engine has the same).
    pub fn config(&self) -> &Config {
        self.engines[0].config()
    }

    /// [`Lro::set_policy`] on every engine.
    pub fn set_policy(&mut self, p: Policy) {
        self.engines.iter_mut().for_each(|l| l.set_policy(p));
    }

    /// [`Lro::set_mode`] on every engine.
    pub fn set_mode(&mut self, m: Mode, now: u64, out: &mut Vec<Packet>) {
        self.engines
            .iter_mut()
            .for_each(|l| l.set_mode(m, now, out));
    }

    /// [`Lro::detach_held`] on every engine; the buffers copied.
    pub fn detach_held(&mut self) -> usize {
        self.engines.iter_mut().map(Lro::detach_held).sum()
    }

    /// [`Lro::detach_newest`] on every engine; the buffers copied.
    pub fn detach_newest(&mut self) -> usize {
        self.engines.iter_mut().map(Lro::detach_newest).sum()
    }

    /// The earliest deadline of any engine.
    pub fn next_deadline(&self) -> Option<u64> {
        self.engines.iter().filter_map(Lro::next_deadline).min()
    }

    /// [`Lro::expire`] on every engine. `now` is the caller's clock, which no arrival time
    /// of any queue is later than.
    pub fn expire(&mut self, now: u64, out: &mut Vec<Packet>) {
        self.engines.iter_mut().for_each(|l| l.expire(now, out));
    }

    /// [`Lro::flush_all`] on every engine.
    pub fn flush_all(&mut self, now: u64, out: &mut Vec<Packet>) {
        self.engines.iter_mut().for_each(|l| l.flush_all(now, out));
    }

    /// Aggregates held by all engines.
    pub fn held(&self) -> usize {
        self.engines.iter().map(Lro::held).sum()
    }

    /// The engines' counters added up, with those of engines that [`Queues::resize`] took
    /// away (one flush latency histogram of them all).
    pub fn stats(&self) -> LroStats {
        if let ([one], None) = (&self.engines[..], &self.retired) {
            return one.stats();
        }
        let mut c = Counters::new();
        for l in self.engines.iter().map(|l| &l.c).chain(&self.retired) {
            c.absorb(l);
        }
        c.snapshot(self.held(), self.engines[0].t.per_us)
    }
}
