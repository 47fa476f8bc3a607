//! Starting a run's daemon and stopping it: what `up`, `down` and the bench's testbeds share.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::admin::{self, AdminRequest};
use crate::config::DaemonConfig;
use crate::rundir;

/// Spawns `pvnet daemon` detached and waits until it is ready (its info file appears).
pub fn start_daemon(cfg: &DaemonConfig, detach: bool) -> Result<rundir::RunInfo> {
    rundir::create_run_dir(&cfg.id)?;
    let log = std::fs::File::create(rundir::log_path(&cfg.id))?;
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.args(["daemon", "--config", &serde_json::to_string(cfg)?])
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    if detach {
        // SAFETY: setsid is async-signal-safe; it detaches the daemon from our terminal so a
        // Ctrl-C here doesn't reach it.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
    } else {
        // SAFETY: prctl is async-signal-safe. An attached daemon (bench) gets SIGTERM, and so
        // tears its testbed down, if the process that started it dies without `down`.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
    }
    let mut child = cmd.spawn().context("starting the daemon")?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if rundir::info_path(&cfg.id).exists() {
            return rundir::read_info(&cfg.id);
        }
        if let Some(st) = child.try_wait()? {
            let log = std::fs::read_to_string(rundir::log_path(&cfg.id)).unwrap_or_default();
            let _ = std::fs::remove_dir_all(rundir::run_dir(&cfg.id));
            bail!(
                "the daemon exited ({st}) before it was ready:\n{}",
                log.trim()
            );
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!("the daemon was not ready within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// [`down_ending`], saying on stderr what it ended (for `bench`, whose own tools are gone by
/// then: a line here is a process that outlived them).
pub fn down(id: &str) -> Result<()> {
    for l in down_ending(id)?.lines() {
        eprintln!("pvnet: {id}: {l}");
    }
    Ok(())
}

/// Ends every process in the run's namespaces, asks its daemon to stop and waits until it is
/// gone, and cleans up after a dead one. Returns what it ended.
///
/// What the user started in the run's domains goes first (SIGTERM, a grace period, SIGKILL),
/// sparing the daemon and its children, the guests it stops itself. After the daemon, whatever
/// is still in the run's namespaces (a crashed daemon's guests, a late `exec`) is ended before
/// the names go. Processes are found by namespace (see `pvnet_testbed::procs`), never by name;
/// this process and its ancestors are never signalled.
pub fn down_ending(id: &str) -> Result<pvnet_testbed::procs::EndReport> {
    use pvnet_testbed::procs::DEFAULT_GRACE;
    let info = rundir::read_info(id).ok();
    let pid = info.as_ref().map(|i| i.pid).unwrap_or(0);
    let mut report = if rundir::pid_alive(pid) {
        let mut r =
            pvnet_testbed::end_run_processes(id, DEFAULT_GRACE, |p| p.pid == pid || p.ppid == pid)?;
        // The daemon and its guests are not news; our own ancestors (a shell in a guest that
        // runs `pvnet down`) are.
        let ours = pvnet_testbed::procs::ancestors();
        r.spared.retain(|p| ours.contains(&p.pid));
        r
    } else {
        Default::default()
    };
    // The daemon's own teardown would end our ancestors in the run: then it is stopped without
    // one (SIGKILL below; its guests die with it), and what is left is removed below, sparing
    // them.
    let polite = report.spared.is_empty();
    if polite && admin::call(id, &AdminRequest::Down).is_ok() {
        let deadline = Instant::now() + Duration::from_secs(15);
        while rundir::pid_alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    if rundir::pid_alive(pid) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        // It, and the guests that die with it, are gone before the sweep below, which would
        // otherwise report them as ended.
        let guests = info.map(|i| i.guest_pids).unwrap_or_default();
        let deadline = Instant::now() + Duration::from_secs(5);
        while (rundir::pid_alive(pid) || guests.iter().any(|&g| rundir::pid_alive(g)))
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    // Whatever a crashed daemon left behind.
    let t = pvnet_testbed::teardown_run(id, DEFAULT_GRACE, |_| false)?;
    report.merge(t.processes);
    // A killed daemon's guest cgroups (`--guest-cgroups`), now that nothing runs in them.
    crate::cgroup::remove_leftover(id);
    let _ = std::fs::remove_dir_all(rundir::run_dir(id));
    Ok(report)
}
