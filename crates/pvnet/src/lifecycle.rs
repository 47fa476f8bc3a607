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
    std::fs::create_dir_all(rundir::run_dir(&cfg.id))?;
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

/// Asks a run's daemon to stop and waits until it is gone; cleans up after a dead one.
pub fn down(id: &str) -> Result<()> {
    let pid = rundir::read_info(id).map(|i| i.pid).unwrap_or(0);
    if admin::call(id, &AdminRequest::Down).is_ok() {
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
        std::thread::sleep(Duration::from_millis(100));
    }
    // Whatever a crashed daemon left behind.
    pvnet_testbed::cleanup_run(id)?;
    let _ = std::fs::remove_dir_all(rundir::run_dir(id));
    Ok(())
}
