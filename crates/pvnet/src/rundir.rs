//! The run directory `/run/pvnet/<id>/`: what `pvnet up` started, where its daemon listens,
//! its log. `pvnet stat` and `pvnet down` find a run here.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

pub const RUN_ROOT: &str = "/run/pvnet";

/// Everything a user needs to reach a run, written by the daemon once it is ready.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunInfo {
    pub id: String,
    pub pid: i32,
    pub mode: String,
    pub remote_ns: String,
    pub dd_ns: String,
    pub guest_ns: Vec<String>,
    pub remote_addr: String,
    pub dd_addr: String,
    pub guest_addrs: Vec<String>,
    pub pnic_if: String,
    /// Guest pids (spawned frontends), by guest index.
    pub guest_pids: Vec<i32>,
    /// The kernel threads polling the guests' TAPs (`--guest-gro`: threaded NAPI), the guests'
    /// receive path as much as their own processes.
    #[serde(default)]
    pub guest_napi_pids: Vec<i32>,
    /// `--guest-cgroups on`: each PV guest's CPU cgroup directory, by guest index (empty:
    /// no groups).
    #[serde(default)]
    pub guest_cgroups: Vec<String>,
    /// Domains waiting for an external frontend: (domid, socket path).
    pub attach: Vec<(u16, String)>,
}

pub fn run_dir(id: &str) -> PathBuf {
    Path::new(RUN_ROOT).join(id)
}

pub fn ctl_path(id: &str) -> PathBuf {
    run_dir(id).join("ctl.sock")
}

pub fn info_path(id: &str) -> PathBuf {
    run_dir(id).join("info.json")
}

pub fn log_path(id: &str) -> PathBuf {
    run_dir(id).join("daemon.log")
}

pub fn read_info(id: &str) -> Result<RunInfo> {
    let p = info_path(id);
    let s = std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
    serde_json::from_str(&s).with_context(|| format!("parsing {}", p.display()))
}

/// Ids of the runs that have a run directory.
pub fn list_runs() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(RUN_ROOT)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.path().is_dir())
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The run a command means: the given id, or the only run there is.
pub fn pick_run(id: Option<&str>) -> Result<String> {
    if let Some(id) = id {
        if !run_dir(id).is_dir() {
            bail!("no pvnet run with id {id} (see /run/pvnet)");
        }
        return Ok(id.to_string());
    }
    let runs = list_runs();
    match runs.len() {
        0 => bail!("no pvnet run is up (start one with `pvnet up`)"),
        1 => Ok(runs[0].clone()),
        _ => bail!(
            "several pvnet runs are up ({}): say which with --id",
            runs.join(", ")
        ),
    }
}

/// Whether a process is alive. A zombie (exited, not yet reaped by its parent, e.g. a daemon
/// that `bench` started) counts as gone, and so does a process that is exiting (PF_EXITING: a
/// killed daemon can spend a while in uninterruptible sleep releasing what it held, after it
/// has left its namespaces).
pub fn pid_alive(pid: i32) -> bool {
    if pid <= 0 || nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err() {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => running(&s),
        Err(_) => false,
    }
}

/// `PF_EXITING` in the flags of `/proc/PID/stat` (Linux `include/linux/sched.h`).
const PF_EXITING: u64 = 0x4;

/// Whether the text of `/proc/PID/stat` shows a process that is neither a zombie nor exiting.
fn running(stat: &str) -> bool {
    // The state follows the parenthesized command name, which may itself hold spaces; the
    // flags are the seventh field after it (proc(5)).
    let Some((_, rest)) = stat.rsplit_once(") ") else {
        return true;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let zombie = f
        .first()
        .is_some_and(|s| s.starts_with('Z') || s.starts_with('X'));
    let exiting = f
        .get(6)
        .and_then(|x| x.parse::<u64>().ok())
        .is_some_and(|x| x & PF_EXITING != 0);
    !zombie && !exiting
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zombies_and_exiting_processes_are_not_running() {
        // Seen on a daemon just killed: in uninterruptible sleep, PF_EXITING set (0x40050c).
        let dying = "8421 (pvnet) D 1 8421 8421 0 -1 4195596 763 0 0 0 0 1 0";
        assert!(!running(dying));
        assert!(!running("8421 (pvnet) Z 1 8421 8421 0 -1 4194316 763 0 0"));
        assert!(running("8421 (a) b) S 1 8421 8421 0 -1 4194560 763 0 0"));
        assert!(pid_alive(std::process::id() as i32));
        assert!(!pid_alive(0));
    }
}
