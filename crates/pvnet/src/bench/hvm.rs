//! The HVM configurations' figures in the seed's terms (Zhang, Li and Guan: throughput, VM
//! exits, device-model CPU, context switches), from the daemon's counters (`pvnet stat`'s
//! `hvm` array: each HVM guest's vCPU and device-model counters, reported by the two
//! processes every [`pvnet_hvm::process::STATS_EVERY`]) and the bench's own CPU sampling.
//!
//! The counters reach the daemon every [`pvnet_hvm::process::STATS_EVERY`], so a snapshot can
//! be that old. The bench therefore reads them on a quiet testbed on both sides of the
//! stream: before it (nothing moved since the last report) and [`SETTLE`] after it (the last
//! report came after the stream's last frame). The difference is then the stream's, exactly.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How long after a stream the bench waits before reading the HVM counters: the processes
/// look at their report clock ([`pvnet_hvm::process::STATS_EVERY`]) when their loop wakes, at
/// the latest every tick ([`pvnet_hvm::dm::TICK`], [`pvnet_hvm::guest::TICK`]), so two reports
/// are at most a period and a tick apart; and a margin.
pub const SETTLE: Duration = Duration::from_millis(
    (pvnet_hvm::process::STATS_EVERY.as_millis() + pvnet_hvm::dm::TICK.as_millis()) as u64 + 150,
);

/// The HVM guests' counters summed over the guests (one snapshot of `pvnet stat`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HvmCounters {
    /// VM exits (port accesses; a `rep` string is one).
    pub exits: u64,
    /// Of them, served at the trap, and sent to the device model (one ioreq round trip each).
    pub served_at_trap: u64,
    pub ioreqs: u64,
    /// Frames the guests' drivers sent and received.
    pub frames_out: u64,
    pub frames_in: u64,
    /// Interrupt handler runs in the guests.
    pub interrupts: u64,
    /// CPU time and context switches (voluntary, involuntary) of the device-model processes
    /// and of the guests' (vCPU) processes, from `getrusage(RUSAGE_SELF)` in each.
    pub dm_cpu_ns: u64,
    pub dm_csw_voluntary: u64,
    pub dm_csw_involuntary: u64,
    pub vcpu_cpu_ns: u64,
    pub vcpu_csw_voluntary: u64,
    pub vcpu_csw_involuntary: u64,
}

impl HvmCounters {
    /// The sums over `stat["hvm"]`; None when the run has no HVM guest or a guest has not
    /// reported yet.
    pub fn of_stat(stat: &Value) -> Option<HvmCounters> {
        let guests = stat["hvm"].as_array().filter(|a| !a.is_empty())?;
        let mut c = HvmCounters::default();
        for h in guests {
            let (g, d) = (&h["guest"], &h["device_model"]);
            if !g.is_object() || !d.is_object() {
                return None;
            }
            let u = |v: &Value| v.as_u64().unwrap_or(0);
            let v = &g["vcpu"];
            c.exits += u(&v["exits_original"]) + u(&v["exits_fast"]);
            c.served_at_trap += u(&v["served_at_trap"]);
            c.ioreqs += u(&v["ioreqs"]);
            c.frames_out += u(&g["frames_out"]);
            c.frames_in += u(&g["frames_in"]);
            c.interrupts += u(&g["interrupts"]);
            c.dm_cpu_ns += u(&d["process"]["cpu_ns"]);
            c.dm_csw_voluntary += u(&d["process"]["csw_voluntary"]);
            c.dm_csw_involuntary += u(&d["process"]["csw_involuntary"]);
            c.vcpu_cpu_ns += u(&g["process"]["cpu_ns"]);
            c.vcpu_csw_voluntary += u(&g["process"]["csw_voluntary"]);
            c.vcpu_csw_involuntary += u(&g["process"]["csw_involuntary"]);
        }
        Some(c)
    }

    /// What moved from `before` to `self` (counters only grow; a restarted process would
    /// make one smaller, which counts as 0).
    pub fn since(&self, before: &HvmCounters) -> HvmCounters {
        let d = |a: u64, b: u64| a.saturating_sub(b);
        HvmCounters {
            exits: d(self.exits, before.exits),
            served_at_trap: d(self.served_at_trap, before.served_at_trap),
            ioreqs: d(self.ioreqs, before.ioreqs),
            frames_out: d(self.frames_out, before.frames_out),
            frames_in: d(self.frames_in, before.frames_in),
            interrupts: d(self.interrupts, before.interrupts),
            dm_cpu_ns: d(self.dm_cpu_ns, before.dm_cpu_ns),
            dm_csw_voluntary: d(self.dm_csw_voluntary, before.dm_csw_voluntary),
            dm_csw_involuntary: d(self.dm_csw_involuntary, before.dm_csw_involuntary),
            vcpu_cpu_ns: d(self.vcpu_cpu_ns, before.vcpu_cpu_ns),
            vcpu_csw_voluntary: d(self.vcpu_csw_voluntary, before.vcpu_csw_voluntary),
            vcpu_csw_involuntary: d(self.vcpu_csw_involuntary, before.vcpu_csw_involuntary),
        }
    }
}

/// One stream's HVM figures: the counters' movement over it, and what they are divided by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HvmSample {
    pub counters: HvmCounters,
    /// Stream bytes the receivers got.
    pub bytes: u64,
    /// Whether the guests sent the stream (their data frames are `frames_out`) or received it.
    pub sending: bool,
    /// The stream's wall time, nanoseconds (the CPU sampling window).
    pub wall_ns: u64,
    /// Device-model CPU time over that window, from `/proc/<pid>/stat` of the device-model
    /// processes (the bench's own sampling, exact to the window).
    pub dm_window_ns: u64,
    /// The modelled exit cost the guests ran with.
    pub exit_cost_ns: u64,
}

impl HvmSample {
    /// The stream's data frames: the frames the card carried in the stream's direction.
    pub fn data_frames(&self) -> u64 {
        if self.sending {
            self.counters.frames_out
        } else {
            self.counters.frames_in
        }
    }

    fn per_frame(&self, n: u64) -> Option<f64> {
        let f = self.data_frames();
        (f > 0).then(|| n as f64 / f as f64)
    }

    /// VM exits per megabyte (10^6 bytes) of the stream.
    pub fn exits_per_mb(&self) -> Option<f64> {
        (self.bytes > 0).then(|| self.counters.exits as f64 * 1e6 / self.bytes as f64)
    }

    /// VM exits per data frame.
    pub fn exits_per_frame(&self) -> Option<f64> {
        self.per_frame(self.counters.exits)
    }

    /// Device-model round trips (ioreqs) per data frame.
    pub fn round_trips_per_frame(&self) -> Option<f64> {
        self.per_frame(self.counters.ioreqs)
    }

    /// Device-model CPU as a percentage of one CPU over the stream.
    pub fn dm_cpu_pct(&self) -> Option<f64> {
        (self.wall_ns > 0).then(|| 100.0 * self.dm_window_ns as f64 / self.wall_ns as f64)
    }

    /// Device-model CPU milliseconds per megabyte (10^6 bytes) of the stream: the seed's
    /// figure was the device model's CPU share while sending 10^9 bytes, so per byte is what
    /// compares across paths of different speed.
    pub fn dm_cpu_ms_per_mb(&self) -> Option<f64> {
        (self.bytes > 0).then(|| self.dm_window_ns as f64 / 1e6 / (self.bytes as f64 / 1e6))
    }

    /// Context switches (voluntary and involuntary) of the device model and the vCPU process
    /// per data frame.
    pub fn csw_per_frame(&self) -> Option<f64> {
        let c = &self.counters;
        self.per_frame(
            c.dm_csw_voluntary
                + c.dm_csw_involuntary
                + c.vcpu_csw_voluntary
                + c.vcpu_csw_involuntary,
        )
    }

    /// Of them, the device model's.
    pub fn dm_csw_per_frame(&self) -> Option<f64> {
        let c = &self.counters;
        self.per_frame(c.dm_csw_voluntary + c.dm_csw_involuntary)
    }

    /// Frames the card carried the other way (a sending guest's received ACKs) per data frame.
    pub fn other_frames_per_frame(&self) -> Option<f64> {
        let c = &self.counters;
        self.per_frame(if self.sending {
            c.frames_in
        } else {
            c.frames_out
        })
    }

    /// Interrupt handler runs per data frame.
    pub fn interrupts_per_frame(&self) -> Option<f64> {
        self.per_frame(self.counters.interrupts)
    }
}

/// The HVM counters of run `id` once settled: [`SETTLE`] after now, and again (up to
/// [`SETTLE_TRIES`] times) while a guest has not reported yet, as on a loaded host after boot.
pub fn settled_counters(id: &str) -> Option<HvmCounters> {
    settled_stat(id).and_then(|st| HvmCounters::of_stat(&st))
}

/// Attempts of [`settled_stat`].
pub const SETTLE_TRIES: usize = 8;

/// `pvnet stat` of run `id` [`SETTLE`] after now, retried while the HVM counters are not all
/// there yet; the last answer (or None) after [`SETTLE_TRIES`].
pub fn settled_stat(id: &str) -> Option<Value> {
    let mut last = None;
    for _ in 0..SETTLE_TRIES {
        std::thread::sleep(SETTLE);
        let st = crate::admin::stat(id).ok();
        if st
            .as_ref()
            .is_some_and(|s| HvmCounters::of_stat(s).is_some())
        {
            return st;
        }
        last = st.or(last);
    }
    last
}

/// The device-model pids of a `pvnet stat` answer.
pub fn dm_pids(stat: &Value) -> Vec<i32> {
    (stat["hvm"].as_array().into_iter().flatten())
        .filter_map(|h| h["dm_pid"].as_i64())
        .filter_map(|p| i32::try_from(p).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn guest(exits: (u64, u64), ioreqs: u64, out: u64, csw: (u64, u64, u64, u64)) -> Value {
        json!({
            "dm_pid": 4242,
            "guest": {
                "frames_out": out, "frames_in": out / 2, "interrupts": out,
                "vcpu": {"exits_original": exits.0, "exits_fast": exits.1,
                         "served_at_trap": exits.0 + exits.1 - ioreqs, "ioreqs": ioreqs},
                "process": {"cpu_ns": 5, "csw_voluntary": csw.2, "csw_involuntary": csw.3},
            },
            "device_model": {
                "process": {"cpu_ns": 7, "csw_voluntary": csw.0, "csw_involuntary": csw.1},
            },
        })
    }

    #[test]
    fn counters_sum_over_guests_and_differ_over_a_stream() {
        let before = json!({"hvm": [guest((10, 0), 10, 2, (1, 0, 1, 0)), guest((0, 4), 1, 2, (0, 0, 0, 0))]});
        let after = json!({"hvm": [guest((1010, 0), 1010, 42, (41, 4, 61, 1)), guest((0, 804), 81, 42, (40, 0, 40, 0))]});
        let (b, a) = (
            HvmCounters::of_stat(&before).unwrap(),
            HvmCounters::of_stat(&after).unwrap(),
        );
        assert_eq!((b.exits, b.ioreqs, b.served_at_trap), (14, 11, 3));
        let d = a.since(&b);
        assert_eq!((d.exits, d.ioreqs, d.served_at_trap), (1800, 1080, 720));
        assert_eq!((d.frames_out, d.frames_in), (80, 40));
        assert_eq!(d.dm_csw_voluntary + d.dm_csw_involuntary, 84);
        let s = HvmSample {
            counters: d,
            bytes: 2_000_000,
            sending: true,
            wall_ns: 2_000_000_000,
            dm_window_ns: 500_000_000,
            exit_cost_ns: 0,
        };
        assert_eq!(s.exits_per_mb(), Some(900.0));
        assert_eq!(s.exits_per_frame(), Some(22.5));
        assert_eq!(s.round_trips_per_frame(), Some(13.5));
        assert_eq!(s.dm_cpu_pct(), Some(25.0));
        assert_eq!(s.dm_cpu_ms_per_mb(), Some(250.0));
        assert_eq!(s.csw_per_frame(), Some((84.0 + 101.0) / 80.0));
        assert_eq!(s.dm_csw_per_frame(), Some(84.0 / 80.0));
        let rx = HvmSample {
            sending: false,
            ..s
        };
        assert_eq!(rx.round_trips_per_frame(), Some(27.0));
        assert_eq!(s.other_frames_per_frame(), Some(0.5));
        assert_eq!(rx.other_frames_per_frame(), Some(2.0));
        assert_eq!(dm_pids(&after), vec![4242, 4242]);
    }

    #[test]
    fn no_hvm_guest_or_no_report_yet_is_none() {
        assert_eq!(HvmCounters::of_stat(&json!({"hvm": []})), None);
        assert_eq!(HvmCounters::of_stat(&json!({})), None);
        assert_eq!(
            HvmCounters::of_stat(&json!({"hvm": [{"guest": null, "device_model": null}]})),
            None
        );
        let empty = HvmSample::default();
        assert_eq!(empty.exits_per_mb(), None);
        assert_eq!(empty.round_trips_per_frame(), None);
        assert_eq!(empty.dm_cpu_pct(), None);
        // A counter that went backwards (a restarted process) counts as nothing moved.
        let a = HvmCounters {
            exits: 5,
            ..Default::default()
        };
        let b = HvmCounters {
            exits: 9,
            ..Default::default()
        };
        assert_eq!(a.since(&b).exits, 0);
    }
}
