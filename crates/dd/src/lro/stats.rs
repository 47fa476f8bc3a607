//! Counters of one LRO engine, as `pvnet stat` and the benchmark JSON show them.

use hdrhistogram::Histogram;
use serde::Serialize;

use super::rules::{FlushCounts, Reason, N_REASONS};

/// A snapshot of the counters (cheap: a few µs, fine a few times per second).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LroStats {
    /// Every frame offered to `receive`.
    pub frames_in: u64,
    /// TCP data segments taken into an aggregate.
    pub segments_in: u64,
    /// Packets that left the flow table, each holding ≥ 1 segment.
    pub aggregates_out: u64,
    /// Of those, with ≥ 2 segments (sent as GSO).
    pub gso_out: u64,
    /// Frames passed on unchanged (never in an aggregate).
    pub passthrough: u64,
    /// `segments_in / aggregates_out` (0 when nothing left yet).
    pub lro_rate: f64,
    /// Aggregates flushed to make room for a new flow.
    pub evictions: u64,
    /// Evictions (counted in `evictions` too) of a guest's oldest aggregate because that
    /// guest (destination MAC) held its cap ([`super::Config::max_flows_per_dst`]).
    pub guest_flow_cap: u64,
    /// Aggregates held now.
    pub flows: usize,
    /// One counter per reason (see [`Reason`]).
    pub flush: FlushCounts,
    /// Time from reading an aggregate's first segment to its flush (the time aggregation held
    /// it; its wait at the port before it was read is not counted).
    pub flush_latency: Latency,
}

/// Summary of the flush latency histogram, in microseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Latency {
    pub count: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

/// The engine's live counters.
#[derive(Debug)]
pub(crate) struct Counters {
    pub frames_in: u64,
    pub segments_in: u64,
    pub aggregates_out: u64,
    pub gso_out: u64,
    pub passthrough: u64,
    pub evictions: u64,
    pub guest_flow_cap: u64,
    pub flush: [u64; N_REASONS],
    /// Ticks from first segment to flush (auto-resizing, 3 significant digits).
    pub latency: Histogram<u64>,
}

impl Counters {
    pub fn new() -> Counters {
        Counters {
            frames_in: 0,
            segments_in: 0,
            aggregates_out: 0,
            gso_out: 0,
            passthrough: 0,
            evictions: 0,
            guest_flow_cap: 0,
            flush: [0; N_REASONS],
            latency: Histogram::new(3).expect("3 significant digits is valid"),
        }
    }

    /// Adds `o`'s counts and latencies to these.
    pub fn absorb(&mut self, o: &Counters) {
        self.frames_in += o.frames_in;
        self.segments_in += o.segments_in;
        self.aggregates_out += o.aggregates_out;
        self.gso_out += o.gso_out;
        self.passthrough += o.passthrough;
        self.evictions += o.evictions;
        self.guest_flow_cap += o.guest_flow_cap;
        for (a, b) in self.flush.iter_mut().zip(o.flush) {
            *a += b;
        }
        // Both histograms resize themselves, so adding cannot fail on range.
        let _ = self.latency.add(&o.latency);
    }

    pub fn count(&mut self, r: Reason) {
        self.flush[r as usize] += 1;
    }

    pub fn snapshot(&self, flows: usize, ticks_per_us: u64) -> LroStats {
        let us = |ticks: u64| ticks as f64 / ticks_per_us as f64;
        let h = &self.latency;
        LroStats {
            frames_in: self.frames_in,
            segments_in: self.segments_in,
            aggregates_out: self.aggregates_out,
            gso_out: self.gso_out,
            passthrough: self.passthrough,
            lro_rate: if self.aggregates_out == 0 {
                0.0
            } else {
                self.segments_in as f64 / self.aggregates_out as f64
            },
            evictions: self.evictions,
            guest_flow_cap: self.guest_flow_cap,
            flows,
            flush: FlushCounts::from_array(&self.flush),
            flush_latency: Latency {
                count: h.len(),
                p50_us: us(h.value_at_quantile(0.5)),
                p99_us: us(h.value_at_quantile(0.99)),
                max_us: us(h.max()),
            },
        }
    }
}
