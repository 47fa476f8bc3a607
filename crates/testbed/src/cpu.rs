//! CPU affinity.

use anyhow::{anyhow, bail, Context};
use nix::sched::{sched_setaffinity, CpuSet};
use nix::unistd::{sysconf, Pid, SysconfVar};

use crate::Result;

/// Number of online CPUs of the machine (not of the caller's affinity mask).
pub fn nr_cpus() -> usize {
    match sysconf(SysconfVar::_NPROCESSORS_ONLN) {
        Ok(Some(n)) if n > 0 => n as usize,
        _ => std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
    }
}

/// CPUs a run may pin or steer packets to: the online ones, at most 32 (the RPS mask the
/// testbed writes has 32 bits).
pub fn steerable_cpus() -> usize {
    nr_cpus().min(32)
}

fn one_cpu(cpu: usize) -> Result<CpuSet> {
    let n = nr_cpus();
    if cpu >= n {
        bail!("cpu {cpu} out of range: this machine has {n} online CPUs");
    }
    let mut set = CpuSet::new();
    set.set(cpu)
        .map_err(|e| anyhow!(e))
        .with_context(|| format!("cpu {cpu}"))?;
    Ok(set)
}

/// Pins the calling thread to `cpu`.
pub fn pin_current_thread(cpu: usize) -> Result<()> {
    let set = one_cpu(cpu)?;
    sched_setaffinity(Pid::from_raw(0), &set)
        .with_context(|| format!("pinning the current thread to cpu {cpu}"))
}

/// Pins the task `pid` (a process's main thread, or a thread id) to `cpu`.
pub fn pin_pid(pid: i32, cpu: usize) -> Result<()> {
    if pid <= 0 {
        bail!("invalid pid {pid}");
    }
    let set = one_cpu(cpu)?;
    sched_setaffinity(Pid::from_raw(pid), &set)
        .with_context(|| format!("pinning pid {pid} to cpu {cpu}"))
}

/// Real-time priority of the kernel threads that stand in for a NIC's softirq (threaded NAPI):
/// Linux's own threaded interrupt handlers (`irq/N-NAME`) run `SCHED_FIFO` at 50.
pub const NAPI_FIFO_PRIORITY: i32 = 50;

/// Puts `pid` under `SCHED_FIFO` at `priority`.
pub fn set_fifo(pid: i32, priority: i32) -> Result<()> {
    if pid <= 0 {
        bail!("invalid pid {pid}");
    }
    let p = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: p is a valid sched_param for the duration of the call.
    if unsafe { libc::sched_setscheduler(pid, libc::SCHED_FIFO, &p) } < 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("SCHED_FIFO {priority} for pid {pid}"));
    }
    Ok(())
}

/// The scheduling policy of `pid` (`SCHED_OTHER`, `SCHED_FIFO`, ...).
pub fn policy(pid: i32) -> Result<i32> {
    // SAFETY: plain syscall on a pid.
    let r = unsafe { libc::sched_getscheduler(pid) };
    if r < 0 {
        return Err(std::io::Error::last_os_error()).with_context(|| format!("policy of {pid}"));
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pin_in_thread() {
        assert!(nr_cpus() >= 1);
        std::thread::spawn(|| {
            pin_current_thread(0).unwrap();
            let set = nix::sched::sched_getaffinity(Pid::from_raw(0)).unwrap();
            assert!(set.is_set(0).unwrap());
            for c in 1..nr_cpus() {
                assert!(!set.is_set(c).unwrap());
            }
        })
        .join()
        .unwrap();
        assert!(pin_current_thread(nr_cpus()).is_err());
    }
}
