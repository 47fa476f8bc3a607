//! CPU accounting without hardware counters: `/proc/stat` per-CPU ticks, per-process CPU time
//! from schedstat, and the TSC rate to turn CPU time into cycles.

use std::fs;
use std::io;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// One `/proc/stat` `cpuN` line, in USER_HZ ticks ([`clk_tck`] per second).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuTimes {
    pub user: u64,
    pub nice: u64,
    pub system: u64,
    pub idle: u64,
    pub iowait: u64,
    pub irq: u64,
    pub softirq: u64,
    pub steal: u64,
}

impl CpuTimes {
    /// Everything but idle and iowait (guest time is already included in user/nice).
    pub fn busy(&self) -> u64 {
        self.user + self.nice + self.system + self.irq + self.softirq + self.steal
    }

    /// All ticks.
    pub fn total(&self) -> u64 {
        self.busy() + self.idle + self.iowait
    }

    fn parse_fields(rest: &str) -> io::Result<CpuTimes> {
        let mut v = [0u64; 8];
        let mut it = rest.split_ascii_whitespace();
        for (i, slot) in v.iter_mut().enumerate() {
            // Old kernels lack steal (and iowait/irq/softirq on very old ones): treat as 0.
            match it.next() {
                Some(s) => *slot = s.parse().map_err(|_| bad(format!("field {i}: {s:?}")))?,
                None if i >= 4 => break,
                None => return Err(bad("short cpu line".into())),
            }
        }
        Ok(CpuTimes {
            user: v[0],
            nice: v[1],
            system: v[2],
            idle: v[3],
            iowait: v[4],
            irq: v[5],
            softirq: v[6],
            steal: v[7],
        })
    }
}

fn bad(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// Parse the `cpuN` line (or the aggregate `cpu` line for `None`) from `/proc/stat` text.
pub fn parse_proc_stat(text: &str, cpu: Option<usize>) -> io::Result<CpuTimes> {
    let want = match cpu {
        Some(n) => format!("cpu{n}"),
        None => "cpu".to_string(),
    };
    for line in text.lines() {
        if let Some((name, rest)) = line.split_once(|c: char| c.is_ascii_whitespace()) {
            if name == want {
                return CpuTimes::parse_fields(rest);
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!("{want} not in /proc/stat"),
    ))
}

/// Ticks of CPU `cpu` from `/proc/stat`.
pub fn read_cpu(cpu: usize) -> io::Result<CpuTimes> {
    parse_proc_stat(&fs::read_to_string("/proc/stat")?, Some(cpu))
}

/// Ticks summed over all CPUs (the `cpu` line of `/proc/stat`).
pub fn read_cpu_all() -> io::Result<CpuTimes> {
    parse_proc_stat(&fs::read_to_string("/proc/stat")?, None)
}

/// USER_HZ: ticks per second of `/proc/stat` and `/proc/<pid>/stat` (usually 100).
pub fn clk_tck() -> u64 {
    static HZ: OnceLock<u64> = OnceLock::new();
    *HZ.get_or_init(|| {
        // SAFETY: sysconf has no preconditions; it only reads a configuration value.
        let v = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        if v > 0 {
            v as u64
        } else {
            100
        }
    })
}

/// Nanoseconds on CPU of process `pid`, all threads, including threads that already exited.
///
/// Sources, best first:
/// 1. the kernel's process CPU clock (`clock_getcpuclockid` + `clock_gettime`): ns resolution,
///    monotonic, counts exited threads;
/// 2. the sum of the first field of `/proc/<pid>/task/*/schedstat` ([`threads_cpu_ns`]): ns
///    resolution but only live threads, so it can go *down* when a thread exits;
/// 3. `utime + stime` of `/proc/<pid>/stat` (tick resolution, counts exited threads).
pub fn process_cpu_ns(pid: i32) -> io::Result<u64> {
    use nix::time::{clock_getcpuclockid, clock_gettime};
    use nix::unistd::Pid;
    if pid <= 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("pid {pid}"),
        ));
    }
    // The clock id encodes the pid shifted left by 3: only use it for pids that fit
    // (PID_MAX_LIMIT is 2^22).
    if pid < 1 << 28 {
        if let Ok(ts) = clock_getcpuclockid(Pid::from_raw(pid)).and_then(clock_gettime) {
            return Ok(ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64);
        }
    }
    match threads_cpu_ns(pid) {
        Ok(Some(ns)) => Ok(ns),
        Ok(None) => stat_ns(pid),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // Either the process is gone (then stat fails too) or schedstat is missing.
            stat_ns(pid)
        }
        Err(e) => Err(e),
    }
}

/// Sum of the first field (ns on CPU) of `/proc/<pid>/task/*/schedstat`, over live threads
/// only; `Ok(None)` if the process exists but no thread has a schedstat file
/// (`CONFIG_SCHED_INFO` off).
pub fn threads_cpu_ns(pid: i32) -> io::Result<Option<u64>> {
    schedstat_ns(pid)
}

/// `Ok(None)` if the process exists but no thread has a schedstat file.
fn schedstat_ns(pid: i32) -> io::Result<Option<u64>> {
    let mut sum = 0u64;
    let mut found = false;
    for ent in fs::read_dir(format!("/proc/{pid}/task"))? {
        let ent = ent?;
        let path = ent.path().join("schedstat");
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            // Thread exited between readdir and open, or schedstat is not configured.
            Err(e)
                if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH) =>
            {
                continue
            }
            Err(e) => return Err(e),
        };
        let first = text
            .split_ascii_whitespace()
            .next()
            .ok_or_else(|| bad(format!("empty {}", path.display())))?;
        sum += first
            .parse::<u64>()
            .map_err(|_| bad(format!("{}: {first:?}", path.display())))?;
        found = true;
    }
    Ok(found.then_some(sum))
}

/// `utime + stime` of `/proc/<pid>/stat` (includes exited threads) in nanoseconds.
fn stat_ns(pid: i32) -> io::Result<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let ticks = parse_stat_utime_stime(&text)?;
    Ok(ticks_to_ns(ticks))
}

/// `utime + stime` ticks from `/proc/<pid>/stat` text (comm may contain spaces and parens).
pub fn parse_stat_utime_stime(text: &str) -> io::Result<u64> {
    let close = text
        .rfind(')')
        .ok_or_else(|| bad("no ')' in stat".into()))?;
    // After "comm)": state(3) ppid(4) ... utime(14) stime(15); index 0 here is field 3.
    let f: Vec<&str> = text[close + 1..].split_ascii_whitespace().collect();
    let get = |i: usize| -> io::Result<u64> {
        f.get(i)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad(format!("stat field {}", i + 3)))
    };
    Ok(get(11)? + get(12)?)
}

/// Ticks of USER_HZ to nanoseconds.
pub fn ticks_to_ns(ticks: u64) -> u64 {
    (ticks as u128 * 1_000_000_000 / clk_tck() as u128) as u64
}

/// Time stamp counter (x86_64); elsewhere monotonic nanoseconds since first use.
#[cfg(target_arch = "x86_64")]
#[inline]
pub fn rdtsc() -> u64 {
    // SAFETY: RDTSC is available on every x86_64 CPU and has no memory effects.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Time stamp counter (x86_64); elsewhere monotonic nanoseconds since first use.
#[cfg(not(target_arch = "x86_64"))]
#[inline]
pub fn rdtsc() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// TSC ticks per second, calibrated once against CLOCK_MONOTONIC over ~100 ms (cached).
/// 1e9 where [`rdtsc`] is the nanosecond fallback.
pub fn tsc_hz() -> u64 {
    static HZ: OnceLock<u64> = OnceLock::new();
    *HZ.get_or_init(|| {
        if cfg!(not(target_arch = "x86_64")) {
            return 1_000_000_000;
        }
        // Bracket each clock read with TSC reads and keep the tighter pair.
        let pair = || {
            (0..5)
                .map(|_| {
                    let a = rdtsc();
                    let t = Instant::now();
                    let b = rdtsc();
                    (b.wrapping_sub(a), a / 2 + b / 2, t)
                })
                .min_by_key(|x| x.0)
                .map(|(_, c, t)| (c, t))
                .expect("five samples")
        };
        let (c0, t0) = pair();
        std::thread::sleep(Duration::from_millis(100));
        let (c1, t1) = pair();
        let ns = t1.duration_since(t0).as_nanos().max(1);
        (c1.wrapping_sub(c0) as u128 * 1_000_000_000 / ns) as u64
    })
}

/// Monotonic nanoseconds (CLOCK_MONOTONIC via `Instant`, since first use).
fn mono_ns() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// A snapshot of one CPU's ticks and some processes' CPU time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuSample {
    pub cpu: usize,
    pub times: CpuTimes,
    /// `(pid, ns on CPU)` in the order given to [`sample`].
    pub pids: Vec<(i32, u64)>,
    /// Monotonic nanoseconds at the sample.
    pub wall_ns: u64,
    /// [`rdtsc`] at the sample.
    pub tsc: u64,
}

/// What happened between two samples.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuDelta {
    /// Busy time of the sampled CPU (tick resolution: 1e9 / clk_tck ns).
    pub busy_ns: u64,
    /// Of it, time in softirq (receive processing that interrupted, or ran at the end of a
    /// bottom-half-disabled section of, whatever task was current).
    pub softirq_ns: u64,
    /// All time of the sampled CPU, busy or not (≈ wall_ns).
    pub total_ns: u64,
    /// `(pid, ns on CPU)` for each pid present in both samples.
    pub pid_ns: Vec<(i32, u64)>,
    pub wall_ns: u64,
    pub tsc: u64,
}

impl CpuDelta {
    /// Fraction of the CPU that was busy (0..=1), from ticks.
    pub fn utilization(&self) -> f64 {
        if self.total_ns == 0 {
            0.0
        } else {
            self.busy_ns as f64 / self.total_ns as f64
        }
    }
}

/// Sample CPU `cpu` and the CPU time of `pids` (fails if any pid cannot be read).
pub fn sample(cpu: usize, pids: &[i32]) -> io::Result<CpuSample> {
    let times = read_cpu(cpu)?;
    let pids = pids
        .iter()
        .map(|&p| process_cpu_ns(p).map(|ns| (p, ns)))
        .collect::<io::Result<Vec<_>>>()?;
    Ok(CpuSample {
        cpu,
        times,
        pids,
        wall_ns: mono_ns(),
        tsc: rdtsc(),
    })
}

/// `b - a` (saturating: counters never go backwards, but a pid may have been reused).
pub fn delta(a: &CpuSample, b: &CpuSample) -> CpuDelta {
    let pid_ns = b
        .pids
        .iter()
        .filter_map(|&(p, nb)| {
            a.pids
                .iter()
                .find(|&&(q, _)| q == p)
                .map(|&(_, na)| (p, nb.saturating_sub(na)))
        })
        .collect();
    CpuDelta {
        busy_ns: ticks_to_ns(b.times.busy().saturating_sub(a.times.busy())),
        softirq_ns: ticks_to_ns(b.times.softirq.saturating_sub(a.times.softirq)),
        total_ns: ticks_to_ns(b.times.total().saturating_sub(a.times.total())),
        pid_ns,
        wall_ns: b.wall_ns.saturating_sub(a.wall_ns),
        tsc: b.tsc.wrapping_sub(a.tsc),
    }
}

/// CPU cycles per byte: `busy_ns × tsc_hz / 1e9 / bytes` (0 if `bytes` is 0).
pub fn cycles_per_byte(busy_ns: u64, bytes: u64) -> f64 {
    if bytes == 0 {
        return 0.0;
    }
    busy_ns as f64 * tsc_hz() as f64 / 1e9 / bytes as f64
}

/// CPU nanoseconds per byte (0 if `bytes` is 0).
pub fn ns_per_byte(busy_ns: u64, bytes: u64) -> f64 {
    if bytes == 0 {
        0.0
    } else {
        busy_ns as f64 / bytes as f64
    }
}

/// Pin the calling thread to one CPU.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    use nix::sched::{sched_setaffinity, CpuSet};
    use nix::unistd::Pid;
    let mut set = CpuSet::new();
    set.set(cpu).map_err(io::Error::from)?;
    sched_setaffinity(Pid::from_raw(0), &set).map_err(io::Error::from)
}

/// Number of CPUs listed in `/proc/stat`.
pub fn num_cpus() -> io::Result<usize> {
    let text = fs::read_to_string("/proc/stat")?;
    Ok(text
        .lines()
        .filter(|l| {
            l.strip_prefix("cpu")
                .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
        })
        .count())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hint::black_box;

    fn spin(d: Duration) -> u64 {
        let t = Instant::now();
        let mut x = 0u64;
        while t.elapsed() < d {
            for i in 0..10_000u64 {
                x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
            }
        }
        x
    }

    #[test]
    fn parse_stat_lines() {
        let text = "cpu  10 1 20 300 4 5 6 7 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\ncpu1 9 9 9 9\n";
        let c0 = parse_proc_stat(text, Some(0)).unwrap();
        assert_eq!(
            c0,
            CpuTimes {
                user: 1,
                nice: 2,
                system: 3,
                idle: 4,
                iowait: 5,
                irq: 6,
                softirq: 7,
                steal: 8
            }
        );
        assert_eq!(c0.busy(), 1 + 2 + 3 + 6 + 7 + 8);
        assert_eq!(c0.total(), 36);
        assert_eq!(parse_proc_stat(text, None).unwrap().user, 10);
        assert_eq!(parse_proc_stat(text, Some(1)).unwrap().steal, 0);
        assert!(parse_proc_stat(text, Some(2)).is_err());
        assert!(parse_proc_stat(text, Some(10)).is_err()); // "cpu1" must not match "cpu10"
        let stat = "1234 (a b) c)) S 1 2 3 4 5 6 7 8 9 10 111 222 0 0 20 0";
        assert_eq!(parse_stat_utime_stime(stat).unwrap(), 333);
    }

    #[test]
    fn read_cpu_busy_grows_while_spinning() {
        let a = read_cpu(0).unwrap();
        assert!(a.total() > 0);
        std::thread::spawn(|| {
            // Pinning may be refused in a restricted cpuset; the spin still counts somewhere.
            let _ = pin_current_thread(0);
            spin(Duration::from_millis(150))
        })
        .join()
        .unwrap();
        let b = read_cpu(0).unwrap();
        assert!(b.busy() >= a.busy());
        assert!(b.total() >= a.total());
        assert!(
            b.total() > a.total(),
            "150 ms passed but cpu0 ticks did not move"
        );
        assert!(num_cpus().unwrap() >= 1);
    }

    #[test]
    fn process_cpu_ns_grows() {
        let pid = std::process::id() as i32;
        let a = process_cpu_ns(pid).unwrap();
        spin(Duration::from_millis(100));
        let b = process_cpu_ns(pid).unwrap();
        assert!(b > a, "{a} -> {b}");
        // Lenient: on a loaded 2-vCPU machine the spinner may get a fraction of a CPU.
        assert!(b - a >= 10_000_000, "only {} ns for a 100 ms spin", b - a);
        assert!(stat_ns(pid).unwrap() > 0);
        assert!(threads_cpu_ns(pid).unwrap().unwrap() > 0);
        assert!(process_cpu_ns(i32::MAX).is_err());
        assert!(process_cpu_ns((1 << 28) - 1).is_err());
        assert!(process_cpu_ns(0).is_err());
    }

    #[test]
    fn tsc_rate_is_plausible() {
        let hz = tsc_hz();
        assert!((100_000_000..=10_000_000_000).contains(&hz), "{hz}");
        assert_eq!(tsc_hz(), hz); // cached
        let a = rdtsc();
        let b = rdtsc();
        assert!(b >= a);
        let c = cycles_per_byte(1_000_000_000, hz);
        assert!((c - 1.0).abs() < 1e-9);
        assert_eq!(cycles_per_byte(5, 0), 0.0);
    }

    #[test]
    fn sample_and_delta() {
        let pid = std::process::id() as i32;
        let a = sample(0, &[pid]).unwrap();
        spin(Duration::from_millis(60));
        let b = sample(0, &[pid]).unwrap();
        let d = delta(&a, &b);
        assert!(d.wall_ns >= 60_000_000);
        assert_eq!(d.pid_ns.len(), 1);
        assert!(d.pid_ns[0].1 >= 5_000_000);
        assert!(d.busy_ns <= d.total_ns || d.total_ns == 0);
        assert!(d.tsc > 0);
        assert!((0.0..=1.0).contains(&d.utilization()));
    }
}
