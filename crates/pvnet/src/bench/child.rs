//! The bench's child processes: pinned to a CPU, killed when dropped, waited for with a deadline
//! and an eye on Ctrl-C.

use std::io::Read;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};

use super::interrupt;

/// A child process that is killed when dropped.
pub struct Guard(pub Child);

impl Guard {
    pub fn pid(&self) -> i32 {
        self.0.id() as i32
    }

    /// Whether it has exited; its stderr (if piped) when it has.
    pub fn exited(&mut self) -> Option<String> {
        match self.0.try_wait() {
            Ok(Some(st)) => {
                let mut err = String::new();
                if let Some(e) = self.0.stderr.as_mut() {
                    let _ = e.read_to_string(&mut err);
                }
                Some(format!("{st}: {}", err.trim()))
            }
            _ => None,
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `cmd` pinned to `cpu` and killed (SIGKILL) if the bench dies.
pub fn pinned(cmd: Command, cpu: usize) -> Command {
    pinned_mask(cmd, 1 << cpu)
}

/// `cmd` allowed on the CPUs whose bits are set in `mask` (CPU 0 is bit 0) and killed
/// (SIGKILL) if the bench dies.
pub fn pinned_mask(mut cmd: Command, mask: u64) -> Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: only async-signal-safe calls (sched_setaffinity, prctl) between fork and exec; the
    // cpu_set_t lives on the child's stack.
    unsafe {
        cmd.pre_exec(move || {
            let set = cpu_set(mask);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd
}

/// The CPU set of `mask`'s bits.
fn cpu_set(mask: u64) -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is a plain bit array, for which all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for cpu in (0..64).filter(|c| mask & (1 << c) != 0) {
        // SAFETY: `cpu` is below 64, well inside the set's CPU_SETSIZE bits.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    set
}

/// Allows task `tid` (a process's main thread or one of its threads) on the CPUs of `mask`.
pub fn set_affinity(tid: i32, mask: u64) -> std::io::Result<()> {
    let set = cpu_set(mask);
    // SAFETY: `set` is a valid cpu_set_t of the size passed; the call only reads it.
    let r = unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Runs `cmd` to its end and collects its output, like [`Command::output`], but kills it when
/// the bench is interrupted or `limit` passes.
pub fn output(cmd: &mut Command, what: &str, limit: Duration) -> Result<Output> {
    let mut outs = outputs_started(
        std::slice::from_mut(cmd),
        what,
        limit,
        |_| Ok(()),
        || Ok(()),
    )?;
    Ok(outs.remove(0))
}

/// Runs `cmds` at once to their ends and collects their outputs (in the commands' order),
/// killing them all when the bench is interrupted or `limit` passes. `started` gets every pid
/// once all run, `ended` is called once all have exited and before any is reaped (while
/// their pids still name them): to account for their CPU time from their first instant to
/// their last.
pub fn outputs_started(
    cmds: &mut [Command],
    what: &str,
    limit: Duration,
    started: impl FnOnce(&[i32]) -> Result<()>,
    ended: impl FnOnce() -> Result<()>,
) -> Result<Vec<Output>> {
    let mut children = Vec::with_capacity(cmds.len());
    for cmd in cmds.iter_mut() {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        children.push(Guard(
            cmd.spawn().with_context(|| format!("starting {what}"))?,
        ));
    }
    let pids: Vec<i32> = children.iter().map(Guard::pid).collect();
    started(&pids)?;
    let readers: Vec<_> = (children.iter_mut())
        .map(|c| (read_all(c.0.stdout.take()), read_all(c.0.stderr.take())))
        .collect();
    let deadline = Instant::now() + limit;
    loop {
        let mut done = true;
        for c in &children {
            done &= exited_unreaped(c.pid())?;
        }
        if done {
            break;
        }
        interrupt::check()?;
        if Instant::now() > deadline {
            return Err(anyhow!(
                "{what} did not finish within {:.0} s",
                limit.as_secs_f64()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    ended()?;
    let mut outs = Vec::with_capacity(children.len());
    for (c, (out, err)) in children.iter_mut().zip(readers) {
        outs.push(Output {
            status: c.0.wait()?,
            stdout: out.join().unwrap_or_default(),
            stderr: err.join().unwrap_or_default(),
        });
    }
    Ok(outs)
}

/// Reads a child's pipe to its end in a thread: a chatty child never blocks on a full pipe
/// while it is waited for.
fn read_all(r: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut r) = r {
            let _ = r.read_to_end(&mut buf);
        }
        buf
    })
}

/// Whether child `pid` still runs (has not exited; it is not reaped).
pub fn running(pid: i32) -> bool {
    matches!(exited_unreaped(pid), Ok(false))
}

/// Whether child `pid` has exited, without reaping it (`waitid` with `WNOWAIT`).
fn exited_unreaped(pid: i32) -> Result<bool> {
    use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    match waitid(Id::Pid(nix::unistd::Pid::from_raw(pid)), flags)? {
        WaitStatus::StillAlive => Ok(false),
        _ => Ok(true),
    }
}

/// Whether `program` is on `PATH`.
pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p).any(|d| {
            let f = d.join(program);
            std::fs::metadata(&f).is_ok_and(|m| {
                use std::os::unix::fs::PermissionsExt;
                m.is_file() && m.permissions().mode() & 0o111 != 0
            })
        })
    })
}

/// The threads of process `pid` (just `pid` when they cannot be listed).
pub fn tasks_of(pid: i32) -> Vec<i32> {
    let mut v: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    if v.is_empty() {
        v.push(pid);
    }
    v
}
