//! Ending the processes that live in a set of network namespaces.
//!
//! Shutting a domain down ends what runs in it. [`end_processes_in`] ends every process whose
//! network namespace is one of the given ones: SIGTERM first, then, after a grace period,
//! SIGKILL.
//!
//! The contract:
//! - A namespace is named by its nsfs inode (`stat` of `/run/netns/NAME`, `fstat` of an fd on
//!   it, or the `net:[INODE]` that `readlink /proc/PID/ns/net` gives). A process belongs to it
//!   when its `/proc/PID/ns/net` (the thread-group leader's namespace) reads `net:[INODE]`.
//!   Names and command lines are never looked at.
//! - The caller holds every namespace (an open fd, a bind mount) for the whole call: an inode
//!   is unique only while its namespace exists, and a freed inode is soon handed to a new
//!   namespace (the kernel allocates them lowest first).
//! - Never signalled: the calling process, its ancestors (up to pid 1), kernel threads, and what
//!   the caller's `spare` predicate picks. Those that are in a target namespace are reported as
//!   spared.
//! - Every signal goes through a pidfd (`pidfd_open`, `pidfd_send_signal`, Linux 5.3): the pidfd
//!   is opened first, then the namespace is read again, then the signal is sent, so a pid that
//!   exited and was reused between the scan and the signal is never signalled.
//! - Processes that appear meanwhile (a shell that forks when told to stop, say) are found by
//!   rescanning `/proc` while waiting: those found during the grace period get SIGTERM, those
//!   found after it SIGKILL. The call returns once a scan finds no process left, or after
//!   [`KILL_WAIT`] past the grace period with what is still alive reported as survivors (a task
//!   in uninterruptible sleep).
//! - Zombies are not in any namespace (a task leaves its namespaces on exit): they are neither
//!   signalled nor reported. Reaping them is their parent's business.
//! - Left alone: a process that only holds an fd on a namespace, or whose non-leader thread has
//!   entered one (a process whose leader thread is elsewhere is not "in" the domain).

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use nix::sys::signal::Signal;

use crate::Result;

/// How long processes get to exit after SIGTERM before they get SIGKILL.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(2);

/// How long, after the grace period, SIGKILLed processes get to disappear before the call
/// gives up on them.
pub const KILL_WAIT: Duration = Duration::from_secs(5);

/// How often `/proc` is rescanned while waiting.
const POLL_STEP: Duration = Duration::from_millis(25);

/// `PF_KTHREAD` in the flags of `/proc/PID/stat` (Linux `include/linux/sched.h`).
const PF_KTHREAD: u64 = 0x0020_0000;
/// `PF_EXITING` in the same flags: the process is in `do_exit`.
pub const PF_EXITING: u64 = 0x4;

/// A process found in a target namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NsProcess {
    pub pid: i32,
    pub ppid: i32,
    /// `/proc/PID/comm` (at most 15 bytes, as the kernel keeps it).
    pub comm: String,
    /// The inode of the namespace it is in.
    pub netns: u64,
    /// Already exiting (`PF_EXITING`): a process killed a moment ago, still releasing its
    /// memory, keeps its namespace until then.
    pub exiting: bool,
}

/// A process that [`end_processes_in`] ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ended {
    pub pid: i32,
    pub comm: String,
    /// The name the caller gave its namespace.
    pub netns: String,
    /// The last signal it was sent: SIGTERM, or SIGKILL when it outlived the grace period.
    pub signal: Signal,
}

impl fmt::Display for Ended {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pid {} ({}) in {}, {}",
            self.pid,
            self.comm,
            self.netns,
            self.signal.as_str()
        )
    }
}

/// A process [`end_processes_in`] left in a target namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Left {
    pub pid: i32,
    pub comm: String,
    /// The name the caller gave its namespace.
    pub netns: String,
}

/// What [`end_processes_in`] did.
#[derive(Clone, Debug, Default)]
pub struct EndReport {
    /// Processes it signalled that have exited, in the order they exited.
    pub ended: Vec<Ended>,
    /// Processes in a target namespace it would not signal (itself, an ancestor, `spare`).
    pub spared: Vec<Left>,
    /// Processes still in a target namespace when it gave up (uninterruptible, say).
    pub survivors: Vec<Left>,
}

impl EndReport {
    /// Adds what a later call did: its ended and spared processes, and its survivors in place
    /// of ours (it looked last).
    pub fn merge(&mut self, later: EndReport) {
        self.ended.extend(later.ended);
        for s in later.spared {
            if !self.spared.iter().any(|p| p.pid == s.pid) {
                self.spared.push(s);
            }
        }
        self.survivors = later.survivors;
    }

    /// One line per process: what was ended, what was spared, what survived.
    pub fn lines(&self) -> Vec<String> {
        let mut v: Vec<String> = self.ended.iter().map(|e| format!("ended {e}")).collect();
        v.extend(self.spared.iter().map(|p| {
            format!(
                "left pid {} ({}) in {}, not signalled (this process, an ancestor, or spared)",
                p.pid, p.comm, p.netns
            )
        }));
        v.extend(self.survivors.iter().map(|p| {
            format!(
                "pid {} ({}) is still in {} after SIGKILL",
                p.pid, p.comm, p.netns
            )
        }));
        v
    }
}

/// The inode of the namespace `fd` refers to.
pub fn netns_inode(fd: BorrowedFd<'_>) -> Result<u64> {
    let st = nix::sys::stat::fstat(fd).context("fstat of a namespace fd")?;
    Ok(st.st_ino)
}

/// The inode of the namespace bound at `path` (e.g. `/run/netns/NAME`).
pub fn netns_inode_at(path: &Path) -> Result<u64> {
    Ok(fs::metadata(path)
        .with_context(|| format!("stat {}", path.display()))?
        .ino())
}

/// The inode of the network namespace process `pid` is in; `None` when it is gone, a zombie,
/// or not ours to look at.
pub fn netns_of(pid: i32) -> Option<u64> {
    let l = fs::read_link(format!("/proc/{pid}/ns/net")).ok()?;
    parse_ns_link(l.to_str()?)
}

/// `net:[4026531840]` -> 4026531840.
fn parse_ns_link(s: &str) -> Option<u64> {
    s.strip_prefix("net:[")?.strip_suffix(']')?.parse().ok()
}

/// The comm, ppid and flags in the text of `/proc/PID/stat`. The comm is parenthesized and may
/// itself hold spaces and parentheses: the last `)` ends it.
fn parse_stat(s: &str) -> Option<(String, i32, u64)> {
    let open = s.find('(')?;
    let close = s.rfind(')')?;
    let comm = s.get(open + 1..close)?.to_string();
    // After the comm: state ppid pgrp session tty_nr tpgid flags ... (proc(5)).
    let rest: Vec<&str> = s.get(close + 1..)?.split_whitespace().collect();
    let ppid = rest.get(1)?.parse().ok()?;
    let flags = rest.get(6)?.parse().ok()?;
    Some((comm, ppid, flags))
}

/// Comm, ppid and flags of `pid`.
fn stat_of(pid: i32) -> Option<(String, i32, u64)> {
    parse_stat(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The calling process and its ancestors, up to pid 1.
pub fn ancestors() -> Vec<i32> {
    let mut chain = vec![std::process::id() as i32];
    let mut pid = chain[0];
    // Bounded: a pid chain cannot be longer than the pid space, and a cycle cannot happen, but a
    // racing reparent should not make this loop.
    for _ in 0..4096 {
        match stat_of(pid) {
            Some((_, ppid, _)) if ppid > 0 && !chain.contains(&ppid) => {
                chain.push(ppid);
                pid = ppid;
            }
            _ => break,
        }
    }
    chain
}

/// The user processes (no kernel threads) in any of the namespaces `inodes`, by pid.
pub fn processes_in(inodes: &[u64]) -> Result<Vec<NsProcess>> {
    let mut out = Vec::new();
    if inodes.is_empty() {
        return Ok(out);
    }
    for e in fs::read_dir("/proc").context("reading /proc")? {
        let Ok(e) = e else { continue };
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        // A process may vanish at any step: skip it then.
        let Some(ns) = netns_of(pid) else { continue };
        if !inodes.contains(&ns) {
            continue;
        }
        let Some((comm, ppid, flags)) = stat_of(pid) else {
            continue;
        };
        if flags & PF_KTHREAD != 0 {
            continue;
        }
        out.push(NsProcess {
            pid,
            ppid,
            comm,
            netns: ns,
            exiting: flags & PF_EXITING != 0,
        });
    }
    out.sort_by_key(|p| p.pid);
    Ok(out)
}

/// `pidfd_open(pid, 0)`; `None` when the process is gone.
fn pidfd_open(pid: i32) -> Result<Option<OwnedFd>> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1; it reads
    // and writes no memory of ours.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ESRCH) {
            return Ok(None);
        }
        return Err(e).context("pidfd_open (needs Linux 5.3 or later)");
    }
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(r as i32) }))
}

/// Sends `sig` to the process `fd` refers to; `false` when it has exited already.
fn pidfd_signal(fd: BorrowedFd<'_>, sig: Option<Signal>) -> Result<bool> {
    let sig = sig.map(|s| s as libc::c_int).unwrap_or(0);
    // SAFETY: pidfd_send_signal with a null siginfo reads no memory of ours; `fd` is a pidfd
    // we own for the duration of the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0u32,
        )
    };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ESRCH) {
            return Ok(false);
        }
        return Err(e).context("pidfd_send_signal");
    }
    Ok(true)
}

/// Whether the process behind a pidfd has exited (a pidfd polls readable then).
fn pidfd_exited(fd: BorrowedFd<'_>) -> bool {
    let mut p = [nix::poll::PollFd::new(fd, nix::poll::PollFlags::POLLIN)];
    matches!(nix::poll::poll(&mut p, nix::poll::PollTimeout::ZERO), Ok(n) if n > 0)
}

struct Tracked {
    proc: NsProcess,
    fd: OwnedFd,
    signal: Signal,
}

/// Ends every process in the network namespaces `namespaces` (inode, name for the report):
/// SIGTERM, up to `grace` to exit, then SIGKILL. See the module docs for what is spared and
/// why the caller must hold the namespaces.
pub fn end_processes_in(
    namespaces: &[(u64, String)],
    grace: Duration,
    spare: impl Fn(&NsProcess) -> bool,
) -> Result<EndReport> {
    let mut report = EndReport::default();
    if namespaces.is_empty() {
        return Ok(report);
    }
    let inodes: Vec<u64> = namespaces.iter().map(|(i, _)| *i).collect();
    let name_of = |ino: u64| {
        namespaces
            .iter()
            .find(|(i, _)| *i == ino)
            .map(|(_, n)| n.clone())
            .unwrap_or_else(|| format!("net:[{ino}]"))
    };
    let left = |p: &NsProcess| Left {
        pid: p.pid,
        comm: p.comm.clone(),
        netns: name_of(p.netns),
    };
    let protected = ancestors();
    let mut live: BTreeMap<i32, Tracked> = BTreeMap::new();
    let retire = |t: Tracked, report: &mut EndReport| {
        // Found already exiting: waited for, never signalled, not reported as ended (whoever
        // killed it did, such as a daemon's guest dying with it).
        if t.proc.exiting {
            return;
        }
        report.ended.push(Ended {
            pid: t.proc.pid,
            comm: t.proc.comm.clone(),
            netns: name_of(t.proc.netns),
            signal: t.signal,
        });
    };

    let start = Instant::now();
    let kill_at = start + grace;
    let give_up = kill_at + KILL_WAIT;
    loop {
        let now = Instant::now();
        let sig = if now < kill_at {
            Signal::SIGTERM
        } else {
            Signal::SIGKILL
        };
        // Whoever has exited since the last pass is done.
        let gone: Vec<i32> = live
            .iter()
            .filter(|(_, t)| pidfd_exited(t.fd.as_fd()))
            .map(|(p, _)| *p)
            .collect();
        for p in gone {
            if let Some(t) = live.remove(&p) {
                retire(t, &mut report);
            }
        }
        // Past the grace period, what was told politely is told firmly.
        if sig == Signal::SIGKILL {
            for t in live.values_mut().filter(|t| !t.proc.exiting) {
                if t.signal != Signal::SIGKILL && pidfd_signal(t.fd.as_fd(), Some(sig))? {
                    t.signal = sig;
                    // It may have exec'd since it was found (a shell's fork becoming a command).
                    if let Ok(c) = fs::read_to_string(format!("/proc/{}/comm", t.proc.pid)) {
                        t.proc.comm = c.trim_end().to_string();
                    }
                }
            }
        }
        let mut found_new = false;
        for p in processes_in(&inodes)? {
            if live.contains_key(&p.pid) {
                continue;
            }
            if protected.contains(&p.pid) || spare(&p) {
                if !report.spared.iter().any(|s| s.pid == p.pid) {
                    report.spared.push(left(&p));
                }
                continue;
            }
            let Some(fd) = pidfd_open(p.pid)? else {
                continue;
            };
            // The pidfd names whoever had the pid when it was opened. A pid is freed only when
            // its process is reaped, so if the signal below reaches that process, this second
            // look saw it and not a successor; if it was reaped, the signal fails (ESRCH).
            if netns_of(p.pid) != Some(p.netns) {
                continue;
            }
            if p.exiting || pidfd_signal(fd.as_fd(), Some(sig))? {
                found_new = true;
                live.insert(
                    p.pid,
                    Tracked {
                        proc: p,
                        fd,
                        signal: sig,
                    },
                );
            }
        }
        if live.is_empty() && !found_new {
            break;
        }
        if Instant::now() >= give_up {
            break;
        }
        wait_any(&live, POLL_STEP);
    }
    report.survivors = processes_in(&inodes)?
        .iter()
        .filter(|p| !report.spared.iter().any(|s| s.pid == p.pid))
        .map(left)
        .collect();
    for t in live.into_values() {
        if pidfd_exited(t.fd.as_fd()) {
            retire(t, &mut report);
        } else if !report.survivors.iter().any(|s| s.pid == t.proc.pid) {
            report.survivors.push(left(&t.proc));
        }
    }
    Ok(report)
}

/// Waits up to `step` for any tracked process to exit.
fn wait_any(live: &BTreeMap<i32, Tracked>, step: Duration) {
    if live.is_empty() {
        std::thread::sleep(step);
        return;
    }
    let mut fds: Vec<nix::poll::PollFd<'_>> = live
        .values()
        .map(|t| nix::poll::PollFd::new(t.fd.as_fd(), nix::poll::PollFlags::POLLIN))
        .collect();
    let ms = u16::try_from(step.as_millis()).unwrap_or(u16::MAX);
    let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_links() {
        assert_eq!(parse_ns_link("net:[4026531840]"), Some(4026531840));
        assert_eq!(parse_ns_link("net:[]"), None);
        assert_eq!(parse_ns_link("mnt:[4026531840]"), None);
        assert_eq!(parse_ns_link("net:[12"), None);
        assert_eq!(parse_ns_link("net:[-1]"), None);
    }

    #[test]
    fn stat_lines() {
        // A comm with spaces and a closing parenthesis of its own.
        let s = "4242 (a) b (c)) S 17 4242 4242 0 -1 4194560 103 0 0 0 0 0 0 0 20 0 1 0";
        assert_eq!(parse_stat(s), Some(("a) b (c)".to_string(), 17, 4194560)));
        let k = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0";
        let (_, ppid, flags) = parse_stat(k).unwrap();
        assert_eq!(ppid, 0);
        assert_ne!(flags & PF_KTHREAD, 0);
        assert_eq!(parse_stat("4242 (trunc"), None);
        assert_eq!(parse_stat("4242 (x) S"), None);
    }

    #[test]
    fn ancestors_start_with_us_and_include_our_parent() {
        let a = ancestors();
        assert_eq!(a[0], std::process::id() as i32);
        assert!(a.contains(&(nix::unistd::getppid().as_raw())), "{a:?}");
        let mut sorted = a.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), a.len(), "no pid twice: {a:?}");
    }

    #[test]
    fn our_own_namespace_is_readable() {
        let ino = netns_of(std::process::id() as i32).expect("our own ns/net");
        let f = fs::File::open("/proc/self/ns/net").unwrap();
        assert_eq!(netns_inode(f.as_fd()).unwrap(), ino);
        assert_eq!(netns_inode_at(Path::new("/proc/self/ns/net")).unwrap(), ino);
    }

    #[test]
    fn nothing_to_end_in_no_namespace() {
        let r = end_processes_in(&[], Duration::ZERO, |_| false).unwrap();
        assert!(r.ended.is_empty() && r.spared.is_empty() && r.survivors.is_empty());
        assert!(processes_in(&[]).unwrap().is_empty());
    }
}
