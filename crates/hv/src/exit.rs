//! A modelled VM-exit cost, and the cheap clock it runs on.
//!
//! When an HVM vCPU executes `IN`/`OUT`, the processor leaves guest mode (a VM exit), saves the
//! guest state into the VMCS and loads the host state; the VM entry back does the reverse
//! (Zhang, Li and Guan, section II.B). In pvnet the HVM guest is a process and its "exit" is a function
//! call, which costs almost nothing. [`ExitCost::spend`] puts the price back: it keeps the calling
//! CPU busy for the configured number of nanoseconds (`--exit-cost-ns N`), as a real exit keeps the
//! physical CPU busy. It spins, it never sleeps: a sleeping vCPU would hand its CPU to the device
//! model for free, which a real exit does not.
//!
//! Time comes from the TSC (`rdtsc`) on x86-64 when the CPU reports an invariant rate
//! (`constant_tsc` and `nonstop_tsc` in `/proc/cpuinfo`), calibrated once per process against
//! `CLOCK_MONOTONIC` over about 10 ms; otherwise, and on other architectures, from
//! `CLOCK_MONOTONIC` itself. [`now_ns`] reads the same clock, for counters that add up waiting
//! time.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How the process reads time: the calibrated TSC, or the monotonic clock.
#[derive(Debug)]
struct Clock {
    /// The monotonic clock's origin, for the fallback and the calibration.
    origin: Instant,
    /// `Some((tsc at origin, ns per tick))` when the TSC is used.
    tsc: Option<(u64, f64)>,
}

static CLOCK: OnceLock<Clock> = OnceLock::new();

#[cfg(target_arch = "x86_64")]
fn rdtsc() -> u64 {
    // SAFETY: `rdtsc` has no preconditions on x86-64 user mode (CR4.TSD is not set by Linux);
    // it only reads the time-stamp counter.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(target_arch = "x86_64")]
fn tsc_is_invariant() -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
        return false;
    };
    info.lines()
        .find(|l| l.starts_with("flags"))
        .is_some_and(|l| {
            let has = |w: &str| l.split_whitespace().any(|x| x == w);
            has("constant_tsc") && has("nonstop_tsc")
        })
}

impl Clock {
    fn calibrate() -> Clock {
        #[cfg(target_arch = "x86_64")]
        if tsc_is_invariant() {
            // Read both clocks back to back at the start and after ~10 ms; the pair read closest
            // together (fewest ticks between the two TSC reads around the clock read) is kept, so
            // a preemption between the reads does not skew the rate.
            let pair = || {
                let mut best = (u64::MAX, 0u64, Instant::now());
                for _ in 0..5 {
                    let a = rdtsc();
                    let t = Instant::now();
                    let b = rdtsc();
                    if b.wrapping_sub(a) < best.0 {
                        best = (b.wrapping_sub(a), a / 2 + b / 2, t);
                    }
                }
                (best.1, best.2)
            };
            let (c0, t0) = pair();
            std::thread::sleep(Duration::from_millis(10));
            let (c1, t1) = pair();
            let ns = t1.duration_since(t0).as_nanos() as f64;
            let ticks = c1.wrapping_sub(c0) as f64;
            if ns > 0.0 && ticks > 0.0 {
                return Clock {
                    origin: t0,
                    tsc: Some((c0, ns / ticks)),
                };
            }
        }
        Clock {
            origin: Instant::now(),
            tsc: None,
        }
    }

    fn get() -> &'static Clock {
        CLOCK.get_or_init(Clock::calibrate)
    }

    fn now_ns(&self) -> u64 {
        #[cfg(target_arch = "x86_64")]
        if let Some((c0, ns_per_tick)) = self.tsc {
            return (rdtsc().wrapping_sub(c0) as f64 * ns_per_tick) as u64;
        }
        self.origin.elapsed().as_nanos() as u64
    }
}

/// Calibrates the clock now rather than at its first use (about 10 ms, once per process): call
/// it when a process starts, so the first round trip or exit measured does not pay for it.
pub fn calibrate() {
    let _ = Clock::get();
}

/// Nanoseconds since an arbitrary origin fixed at the process's first use of this clock
/// (monotonic; the calibrated TSC where available, see the module docs). The first call
/// calibrates (see [`calibrate`]).
pub fn now_ns() -> u64 {
    Clock::get().now_ns()
}

/// Whether [`now_ns`] and [`ExitCost::spend`] read the TSC (as opposed to `CLOCK_MONOTONIC`).
pub fn uses_tsc() -> bool {
    Clock::get().tsc.is_some()
}

/// Nanoseconds per TSC tick as calibrated, or `None` when the TSC is not used.
pub fn tsc_ns_per_tick() -> Option<f64> {
    Clock::get().tsc.map(|(_, r)| r)
}

/// The cost of one modelled VM exit and entry: [`ExitCost::spend`] burns that much CPU time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ExitCost {
    ns: u64,
}

impl ExitCost {
    /// An exit that costs `ns` nanoseconds of busy CPU. Calibrates the clock if this is the
    /// process's first use of it (about 10 ms, once), so construct it before measuring.
    pub fn new(ns: u64) -> ExitCost {
        if ns != 0 {
            calibrate();
        }
        ExitCost { ns }
    }

    /// A free exit: [`ExitCost::spend`] returns at once.
    pub const fn free() -> ExitCost {
        ExitCost { ns: 0 }
    }

    /// The configured cost in nanoseconds.
    pub fn ns(&self) -> u64 {
        self.ns
    }

    /// Keeps this CPU busy for the configured time (spinning on the clock, never sleeping).
    pub fn spend(&self) {
        if self.ns == 0 {
            return;
        }
        let clock = Clock::get();
        let start = clock.now_ns();
        while clock.now_ns().wrapping_sub(start) < self.ns {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread_cpu_ns() -> u64 {
        let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).unwrap();
        t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
    }

    #[test]
    fn clock_is_monotonic_and_tracks_the_monotonic_clock() {
        let a = now_ns();
        let t = Instant::now();
        std::thread::sleep(Duration::from_millis(20));
        let b = now_ns();
        let wall = t.elapsed().as_nanos() as u64;
        assert!(b > a);
        // Loose: the calibrated clock agrees with CLOCK_MONOTONIC within a tenth.
        assert!(
            b - a >= wall - wall / 10,
            "clock {} ns vs wall {wall} ns",
            b - a
        );
        println!(
            "exit clock: tsc={} ns/tick={:?}",
            uses_tsc(),
            tsc_ns_per_tick()
        );
    }

    #[test]
    fn free_exit_costs_nothing_and_keeps_its_value() {
        let c = ExitCost::free();
        assert_eq!(c.ns(), 0);
        c.spend();
        assert_eq!(ExitCost::new(1234).ns(), 1234);
    }

    #[test]
    fn spend_burns_at_least_about_what_is_asked_on_the_cpu() {
        // 40 ms, so that a sleeping implementation (CPU time ~0) is told apart from a spinning
        // one even on a loaded machine; the bounds are loose on purpose.
        let n = 40_000_000u64;
        let cost = ExitCost::new(n);
        let cpu0 = thread_cpu_ns();
        let t = Instant::now();
        cost.spend();
        let wall = t.elapsed().as_nanos() as u64;
        let cpu = thread_cpu_ns() - cpu0;
        assert!(wall >= n - n / 10, "spent {wall} ns of wall time for {n}");
        assert!(cpu >= n / 20, "only {cpu} ns of CPU for {n}: it slept");

        // Short exits, as the data path spends them: each at least about its cost.
        let short = ExitCost::new(2_000);
        let t = Instant::now();
        for _ in 0..2_000 {
            short.spend();
        }
        let per = t.elapsed().as_nanos() as u64 / 2_000;
        assert!(per >= 1_800, "{per} ns per 2000 ns exit");
        println!("exit cost: 2000 ns asked, {per} ns spent per exit (mean of 2000)");
    }
}
