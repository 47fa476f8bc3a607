//! The run directory `/run/pvnet/<id>/`: what `pvnet up` started, where its daemon listens,
//! its log. `pvnet stat` and `pvnet down` find a run here.

use pvnet_testbed::procs::PF_EXITING;
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

/// Creates run `id`'s directory, readable and writable by its owner alone (0700, whatever the
/// umask): its sockets take `set`, `down` and a frontend's attach from whoever can reach them,
/// and the directory's mode is what keeps other users out.
pub fn create_run_dir(id: &str) -> Result<PathBuf> {
    create_run_dir_in(Path::new(RUN_ROOT), id)
}

fn create_run_dir_in(root: &Path, id: &str) -> Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::create_dir_all(root).with_context(|| format!("creating {}", root.display()))?;
    let dir = root.join(id);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .or_else(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists if dir.is_dir() => Ok(()),
            _ => Err(e),
        })
        .with_context(|| format!("creating {}", dir.display()))?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("setting the mode of {}", dir.display()))?;
    Ok(dir)
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
    runs_in(Path::new(RUN_ROOT), |_| true)
}

/// Ids of the run directories under `root` that `keep` accepts, sorted.
fn runs_in(root: &Path, keep: impl Fn(&Path) -> bool) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(root)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.path().is_dir() && keep(&e.path()))
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// A run directory without `info.json` counts as a run starting up for this long; older, it
/// is what a daemon that never got ready left behind.
pub const STARTING_GRACE: std::time::Duration = std::time::Duration::from_secs(60);

/// Ids of the runs that are up: a run directory whose `info.json` names a live daemon, or one
/// still starting (no `info.json` yet, made less than [`STARTING_GRACE`] ago). Directories
/// left behind (`pvnet down --all` removes them) do not count: the bench's warning that other
/// runs share the CPUs must not come from a directory with nothing running in it.
pub fn live_runs() -> Vec<String> {
    live_runs_in(Path::new(RUN_ROOT), std::time::SystemTime::now())
}

fn live_runs_in(root: &Path, now: std::time::SystemTime) -> Vec<String> {
    runs_in(root, |dir| run_is_live(dir, now))
}

fn run_is_live(dir: &Path, now: std::time::SystemTime) -> bool {
    match std::fs::read_to_string(dir.join("info.json")) {
        Ok(s) => serde_json::from_str::<RunInfo>(&s).is_ok_and(|i| pid_alive(i.pid)),
        Err(_) => std::fs::metadata(dir)
            .and_then(|m| m.modified())
            .map(|t| now.duration_since(t).unwrap_or_default() < STARTING_GRACE)
            .unwrap_or(false),
    }
}

/// The run a command means: the given id, or the only run there is.
pub fn pick_run(id: Option<&str>) -> Result<String> {
    if let Some(id) = id {
        // An id is a name in /run/pvnet, never a path: checked before it is joined to one.
        if let Err(e) = pvnet_testbed::RunId::parse(id) {
            bail!("no pvnet run with id {id:?}: {e}");
        }
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
    fn a_run_directory_is_its_owners_alone() {
        use std::os::unix::fs::PermissionsExt;
        let root = std::env::temp_dir().join(format!("pvnet-rundir-mode-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        let d = create_run_dir_in(&root, "r1").unwrap();
        assert_eq!((d.clone(), mode(&d)), (root.join("r1"), 0o700));
        // One left open by an earlier start is closed again.
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        create_run_dir_in(&root, "r1").unwrap();
        assert_eq!(mode(&d), 0o700);
        // A file where the directory should be is an error, not a directory.
        std::fs::write(root.join("f"), "").unwrap();
        let e = format!("{:#}", create_run_dir_in(&root, "f").unwrap_err());
        assert!(e.contains("creating") && e.contains("/f"), "{e}");
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// Live: a daemon that answers, or a run still starting. Not: a dead daemon's directory,
    /// or one without `info.json` older than the grace.
    #[test]
    fn only_live_or_starting_runs_count_as_up() {
        let root = std::env::temp_dir().join(format!("pvnet-rundir-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let info = |pid: i32| RunInfo {
            id: String::new(),
            pid,
            mode: "xen".into(),
            remote_ns: String::new(),
            dd_ns: String::new(),
            guest_ns: Vec::new(),
            remote_addr: String::new(),
            dd_addr: String::new(),
            guest_addrs: Vec::new(),
            pnic_if: String::new(),
            guest_pids: Vec::new(),
            guest_napi_pids: Vec::new(),
            guest_cgroups: Vec::new(),
            attach: Vec::new(),
        };
        // A process that has exited and been reaped: its pid names nothing (or, reused, a
        // process that is not this test's; either way not ours to count on, so take one
        // that is surely gone: a child waited for).
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id() as i32;
        child.wait().unwrap();
        for (id, content) in [
            ("alive", Some(info(std::process::id() as i32))),
            ("dead", Some(info(dead))),
            ("starting", None),
        ] {
            let d = root.join(id);
            std::fs::create_dir_all(&d).unwrap();
            if let Some(i) = content {
                std::fs::write(d.join("info.json"), serde_json::to_string(&i).unwrap()).unwrap();
            }
        }
        let now = std::time::SystemTime::now();
        let live = live_runs_in(&root, now);
        assert!(live.contains(&"alive".to_string()) && live.contains(&"starting".to_string()));
        if !pid_alive(dead) {
            assert!(!live.contains(&"dead".to_string()), "{live:?}");
        }
        // A minute on, the directory without info.json is what a failed start left.
        let later = live_runs_in(
            &root,
            now + STARTING_GRACE + std::time::Duration::from_secs(1),
        );
        assert!(!later.contains(&"starting".to_string()), "{later:?}");
        assert!(later.contains(&"alive".to_string()));
        std::fs::remove_dir_all(&root).unwrap();
    }

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
