//! What a result was measured on and with: kernel, CPU, TSC rate, the source revision, the time.

use serde_json::{json, Value};

/// The git commit the binary was built from (`build.rs`), or "unknown" outside a checkout.
pub const REVISION: &str = env!("PVNET_REVISION");

/// Kernel, CPU model, CPUs, TSC rate, memory, whether it is a virtual machine, and the default TCP
/// congestion control.
pub fn describe(tsc_hz: u64) -> Value {
    let uts = nix::sys::utsname::uname().ok();
    let s = |f: fn(&nix::sys::utsname::UtsName) -> &std::ffi::OsStr| {
        uts.as_ref()
            .map(|u| f(u).to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |name: &str| {
        cpuinfo
            .lines()
            .find(|l| l.split(':').next().map(str::trim) == Some(name))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    };
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kib = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok());
    json!({
        "kernel": s(|u| u.release()),
        "kernel_version": s(|u| u.version()),
        "arch": s(|u| u.machine()),
        "cpu_model": field("model name").unwrap_or_else(|| "unknown".into()),
        "cpus": pvnet_testbed::cpu::nr_cpus(),
        "tsc_hz": tsc_hz,
        "virtualized": field("flags").is_some_and(|f| f.split_whitespace().any(|x| x == "hypervisor")),
        "memory_kib": mem_kib,
        "tcp_congestion_control": tcp_congestion_control(),
    })
}

/// The kernel's default TCP congestion control: new network namespaces inherit it, so it is
/// the one the remote host's senders use. It moves the results (on the machine of
/// docs/guest-scaling.md, CUBIC instead of BBR took `xen`'s eight-guest ratio from 0.82 to 0.86
/// by slowing one guest), so the report names it.
fn tcp_congestion_control() -> Option<String> {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// Bytes of a cache line, and the words in one: the probe's chain visits one word per line.
const LINE: usize = 64;
const WORDS: usize = LINE / std::mem::size_of::<usize>();
/// Reads of the probe over main memory: enough for a stable mean (about 0.4 s).
const PROBE_READS: usize = 2 << 20;

/// Sizes the cache estimate steps through (MiB): around the L3 share a shared VM is left,
/// which on the first host of docs/guest-scaling.md was about 10 MiB in quiet hours and 1–4 MiB
/// in slow ones, and 12–16 MiB on the second.
const CACHE_STEPS_MIB: [usize; 9] = [1, 2, 3, 4, 6, 8, 12, 16, 24];
/// A read under this share of main memory's latency is answered by a cache ([`cache_estimate`]).
const CACHE_SHARE_OF_MEMORY: f64 = 1.0 / 3.0;
/// Reads per step of the cache estimate: about 0.2 s beyond the cache.
const STEP_READS: usize = 1 << 20;

/// The memory as the receiving CPU sees it now: nanoseconds per dependent random read over
/// 8 MiB (within this machine's L3, when its neighbours leave it alone) and over 64 MiB (main
/// memory), and how much of the cache answers at cache speed (`cache_mib`, from reads over
/// each of [`CACHE_STEPS_MIB`]: see [`cache_estimate`]). The PV path's extra cost at many
/// guests is memory latency on packet data that has waited (docs/guest-scaling.md), and on a
/// shared virtual machine that latency changes with the hour, because the host's other guests
/// leave this one more or less of the L3; the bench runs this at its start and end so that a
/// result can be set against the state of the machine it was measured in. `None` when the
/// thread cannot be pinned to `cpu`.
pub fn memory_probe(cpu: usize) -> Option<Value> {
    std::thread::scope(|sc| {
        sc.spawn(|| {
            pvnet_testbed::cpu::pin_current_thread(cpu).ok()?;
            let ns = |bytes: usize, reads: usize| {
                let chain = line_cycle(bytes / LINE, 0x9e37_79b9_7f4a_7c15);
                // The thread's own CPU time: a probe that waits for the CPU (the kernel still
                // tearing down a testbed) measures the memory, not the wait.
                let (mut at, t0) = (0usize, pvnet_hvm::thread_cpu_ns());
                for _ in 0..reads {
                    at = chain[at];
                }
                let spent = pvnet_hvm::thread_cpu_ns().saturating_sub(t0);
                let ns = spent as f64 / reads as f64;
                // The end of the chase, so that the reads are not optimized away.
                std::hint::black_box(at);
                (ns * 10.0).round() / 10.0
            };
            let memory = ns(64 << 20, PROBE_READS);
            let steps: Vec<f64> = CACHE_STEPS_MIB
                .iter()
                .map(|&mib| ns(mib << 20, STEP_READS))
                .collect();
            // [MiB, ns] pairs in the steps' order (an object would sort "12" before "2").
            let by_mib: Vec<Value> = CACHE_STEPS_MIB
                .iter()
                .zip(&steps)
                .map(|(mib, ns)| json!([mib, ns]))
                .collect();
            // 8 MiB is one of the steps: its reading is the step's, not a second chase.
            let mib8 = CACHE_STEPS_MIB.iter().position(|&m| m == 8);
            Some(json!({
                "cpu": cpu,
                "random_read_ns_8mib": mib8.map(|i| steps[i]),
                "random_read_ns_64mib": memory,
                "random_read_ns_by_mib": by_mib,
                "cache_mib": cache_estimate(&CACHE_STEPS_MIB, &steps, memory),
            }))
        })
        .join()
        .ok()
        .flatten()
    })
}

/// How many MiB answer at cache speed: the largest of `steps_mib` (ascending) up to which every
/// read (`ns`, one per step) stays under [`CACHE_SHARE_OF_MEMORY`] of main memory's (`memory_ns`,
/// the read over 64 MiB). 0 when not even the first step does.
///
/// The bound is a share of main memory's latency, not a point between the fastest step and it:
/// where the first step fits in a private L2 (2 MiB a core on the Intel Xeon host of 2026-11-30,
/// at 6 ns), the geometric midpoint between it and memory (30 ns) lies under that host's L3 (33–54
/// ns up to 16 MiB), and the estimate named the L2. Measured so far: an L3 at 0.09–0.33 of main
/// memory's latency (13–15 ns against 125–140 in the first host's quiet hours, 17–22 against
/// 180–220 in its slow ones, 33–54 against 150–170 on the second host); a step half cached at
/// the cliff's edge at 0.34–0.37 (54–68 ns on the first host), past it 0.4 or more. A third
/// reproduces every estimate recorded on the first host.
fn cache_estimate(steps_mib: &[usize], ns: &[f64], memory_ns: f64) -> usize {
    let bound = memory_ns * CACHE_SHARE_OF_MEMORY;
    steps_mib
        .iter()
        .zip(ns)
        .take_while(|&(_, &ns)| ns < bound)
        .last()
        .map_or(0, |(&mib, _)| mib)
}

/// The memory probe of a run's start, kept until its end: [`memory_probe`] on one CPU at both.
pub struct Probes {
    cpu: usize,
    start: Option<Value>,
}

impl Probes {
    /// Probes `cpu` now, at the run's start.
    pub fn start(cpu: usize) -> Probes {
        Probes {
            cpu,
            start: memory_probe(cpu),
        }
    }

    /// `{start, end}`: the start's probe and one taken now (either null where it could not run).
    pub fn finish(self) -> Value {
        json!({ "start": self.start, "end": memory_probe(self.cpu) })
    }
}

/// `machine` (from [`describe`]) with the memory probes of the run's start and end
/// ([`Probes::finish`]) as `memory_probe`.
pub fn with_probes(mut machine: Value, probes: Value) -> Value {
    machine["memory_probe"] = probes;
    machine
}

/// A chain of `lines` cache lines in one random cycle (Sattolo's shuffle, seeded): the word at
/// the start of each line holds the index of the next line's first word, so following it from
/// index 0 visits every line once before coming back, in an order no prefetcher can guess.
fn line_cycle(lines: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..lines).collect();
    let mut x = seed | 1;
    for i in (1..lines).rev() {
        // xorshift64: the shuffle needs no quality beyond defeating the prefetcher.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % i as u64) as usize);
    }
    // order[i] is the line after line i: Sattolo's shuffle makes it a single cycle.
    let mut chain = vec![0usize; lines * WORDS];
    for (i, &next) in order.iter().enumerate() {
        chain[i * WORDS] = next * WORDS;
    }
    chain
}

/// `YYYY-MM-DD HH:MM:SS` (UTC) of a Unix time, and a compact form for directory names.
pub fn utc(unix: u64) -> (String, String) {
    let (days, secs) = (unix / 86400, unix % 86400);
    // Civil from days (H. Hinnant's algorithm), for dates after 1970.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let (hh, mm, ss) = (secs / 3600, secs / 60 % 60, secs % 60);
    (
        format!("{y:04}-{m:02}-{d:02} {hh:02}:{mm:02}:{ss:02}"),
        format!("{y:04}{m:02}{d:02}-{hh:02}{mm:02}{ss:02}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_chain_is_one_cycle_through_every_line() {
        for lines in [1usize, 2, 3, 64, 1000] {
            let (chain, words) = (line_cycle(lines, 42), WORDS);
            assert_eq!(chain.len(), lines * words);
            let (mut at, mut seen) = (0usize, vec![false; lines]);
            for _ in 0..lines {
                assert_eq!(at % words, 0, "{lines}: a line's first word");
                assert!(!seen[at / words], "{lines}: line {} twice", at / words);
                seen[at / words] = true;
                at = chain[at];
            }
            assert_eq!(at, 0, "{lines}: back to the start after every line");
            assert!(seen.iter().all(|&s| s));
        }
    }

    #[test]
    fn the_probe_reads_memory_on_the_cpu_it_names() {
        let v = memory_probe(0).expect("CPU 0 exists");
        assert_eq!(v["cpu"], 0);
        for k in ["random_read_ns_8mib", "random_read_ns_64mib"] {
            let ns = v[k].as_f64().unwrap();
            assert!(ns > 0.0 && ns.is_finite(), "{k}: {v}");
        }
        let steps = v["random_read_ns_by_mib"].as_array().unwrap();
        assert_eq!(steps.len(), CACHE_STEPS_MIB.len(), "{v}");
        for (step, mib) in steps.iter().zip(CACHE_STEPS_MIB) {
            assert_eq!(step[0].as_u64(), Some(mib as u64), "{v}");
            assert!(step[1].as_f64().unwrap() > 0.0, "{v}");
        }
        let cache = v["cache_mib"].as_u64().unwrap() as usize;
        assert!(cache == 0 || CACHE_STEPS_MIB.contains(&cache), "{v}");
        assert!(memory_probe(usize::MAX >> 8).is_none(), "no such CPU");
    }

    #[test]
    fn the_cache_estimate_is_the_last_step_before_the_cliff() {
        let steps = [1, 2, 3, 4, 6, 8];
        // A slow hour of the machine of docs/guest-scaling.md: a cliff between 4 and 6 MiB.
        let slow = [17.0, 18.0, 19.0, 22.0, 168.0, 178.0];
        assert_eq!(cache_estimate(&steps, &slow, 221.0), 4);
        // A step past the cliff that happens to read fast again does not extend it.
        let relapse = [17.0, 18.0, 119.0, 25.0, 170.0, 180.0];
        assert_eq!(cache_estimate(&steps, &relapse, 210.0), 2);
        // Everything at cache speed: the largest step; nothing: 0.
        assert_eq!(cache_estimate(&steps, &[13.0; 6], 130.0), 8);
        assert_eq!(cache_estimate(&steps, &[150.0; 6], 150.0), 0);
        // A quiet hour: reads over 12 MiB at 33 ns still under the bound (47 ns), 16 MiB not.
        let quiet = [12.0, 12.4, 13.0, 13.2, 13.5, 13.6, 33.0, 90.0];
        assert_eq!(
            cache_estimate(&[1, 2, 3, 4, 6, 8, 12, 16], &quiet, 140.0),
            12
        );
        // The second host (2026-11-30): its 2 MiB L2 at 6–19 ns, then its L3 at 33–43 ns up to
        // 16 MiB, 24 MiB half cached, memory at 151 ns. The L3 counts, not only the L2.
        let l2_then_l3 = [5.7, 18.5, 33.3, 36.7, 37.1, 38.4, 42.2, 43.4, 77.4];
        assert_eq!(cache_estimate(&CACHE_STEPS_MIB, &l2_then_l3, 151.5), 16);
        // The first host's slow hour as the probe read it at the start and end of a run
        // (docs/guests/hour/study15): the same estimates as the earlier rule gave.
        let start = [17.8, 23.0, 151.1, 169.9, 166.1, 163.0, 172.6, 182.2, 185.1];
        assert_eq!(cache_estimate(&CACHE_STEPS_MIB, &start, 187.0), 2);
        let end = [17.9, 19.1, 44.9, 143.1, 153.2, 150.5, 168.8, 175.6, 183.2];
        assert_eq!(cache_estimate(&CACHE_STEPS_MIB, &end, 184.6), 3);
    }

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0).0, "1970-01-01 00:00:00");
        assert_eq!(utc(951_782_400).0, "2000-02-29 00:00:00");
        assert_eq!(utc(1_767_225_599).1, "20251231-235959");
    }

    #[test]
    fn describes_this_machine() {
        let m = describe(1_000_000_000);
        assert!(m["cpus"].as_u64().unwrap() >= 1);
        assert!(!m["kernel"].as_str().unwrap().is_empty());
        assert!(!REVISION.is_empty());
        let cc = m["tcp_congestion_control"].as_str().unwrap();
        let available =
            std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control").unwrap();
        assert!(
            available.split_whitespace().any(|a| a == cc),
            "{cc} not in {available}"
        );
    }
}
