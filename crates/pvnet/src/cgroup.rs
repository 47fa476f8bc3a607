//! Guests as scheduling entities: each guest's processes in a CPU cgroup of its own, all
//! with the same weight (`--guest-cgroups`).
//!
//! A hypervisor schedules domains, not the threads inside them: Xen's credit scheduler gives
//! each domain a weight (`xl sched-credit -w`, default 256) and shares a CPU between domains
//! in proportion to it, whatever runs inside. Here a guest is a process (its netfront, whose
//! TAP writes run the guest kernel's receive path) plus what a benchmark starts in its
//! namespace (its receiver); without a group, the kernel's fair scheduler weighs each thread
//! on its own. With `--guest-cgroups on` (the default), `pvnet up` makes one group per run and under it one
//! per guest, `pvnet-<run id>/guest<i>`, with the default weight (cgroup v2 `cpu.weight` 100,
//! or cgroup v1 `cpu.shares` 1024 when the cpu controller is bound to a v1 hierarchy, as on
//! hosts mounting the hybrid layout), and puts each guest's netfront (an HVM guest's vCPU
//! process; its device model is the driver domain's) in its group; its children inherit it. A benchmark adds its receiver with [`join`].
//!
//! Contract: [`GuestGroups::create`] either makes every group or none (what it made is removed
//! on error); [`GuestGroups::remove`] (and drop) moves any process still inside back to the
//! hierarchy's root and removes every directory it made. Where neither hierarchy offers the cpu
//! controller, `create` says why and the run goes on without groups.
//!
//! Kernel interfaces: Documentation/admin-guide/cgroup-v2.rst (`cgroup.controllers`,
//! `cgroup.subtree_control`, `cpu.weight`, `cgroup.procs`) and
//! Documentation/admin-guide/cgroup-v1/cgroups.rst (`cpu.shares` in scheduler/sched-design-CFS).

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Which cgroup hierarchy holds the cpu controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The unified hierarchy: `cpu.weight` (1..10000, default 100).
    V2,
    /// A v1 hierarchy with the cpu controller: `cpu.shares` (default 1024).
    V1,
}

impl Kind {
    /// The weight file and the equal weight every guest gets (each file's default).
    pub fn weight(self) -> (&'static str, u64) {
        match self {
            Kind::V2 => ("cpu.weight", 100),
            Kind::V1 => ("cpu.shares", 1024),
        }
    }
}

/// One run's guest groups.
#[derive(Debug)]
pub struct GuestGroups {
    kind: Kind,
    /// The hierarchy's mount point (its root group).
    mount: PathBuf,
    /// `<mount>/pvnet-<run id>`.
    run: PathBuf,
    /// The guests' groups, by guest index.
    guests: Vec<PathBuf>,
    removed: bool,
}

/// The directory name of run `id`'s group.
pub fn run_group_name(id: &str) -> String {
    format!("pvnet-{id}")
}

/// Where the cpu controller can be used: a cgroup2 mount whose root lists `cpu` among its
/// controllers, else a v1 mount with the `cpu` option. Read from /proc/self/mountinfo.
pub fn find_cpu_hierarchy() -> Result<(Kind, PathBuf), String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("reading /proc/self/mountinfo: {e}"))?;
    let (v2, v1) = parse_mountinfo(&info);
    let mut why = Vec::new();
    match v2 {
        Some(m) => {
            let ctl = std::fs::read_to_string(m.join("cgroup.controllers")).unwrap_or_default();
            if ctl.split_whitespace().any(|c| c == "cpu") {
                return Ok((Kind::V2, m));
            }
            why.push(format!(
                "cgroup2 at {} has no cpu controller (controllers: {:?})",
                m.display(),
                ctl.trim()
            ));
        }
        None => why.push("no cgroup2 mount".to_string()),
    }
    match v1 {
        Some(m) => Ok((Kind::V1, m)),
        None => {
            why.push("no cgroup v1 mount with the cpu controller".to_string());
            Err(why.join("; "))
        }
    }
}

/// The first cgroup2 mount point and the first v1 mount with the `cpu` controller in its
/// super options, from mountinfo's text (proc(5): the mount point is field 5; after the
/// ` - ` separator come the file system type, the source and the super options).
fn parse_mountinfo(text: &str) -> (Option<PathBuf>, Option<PathBuf>) {
    let (mut v2, mut v1) = (None, None);
    for line in text.lines() {
        let Some((pre, post)) = line.split_once(" - ") else {
            continue;
        };
        let Some(mnt) = pre.split(' ').nth(4) else {
            continue;
        };
        let mut post = post.split(' ');
        let (fstype, opts) = (post.next(), post.nth(1).unwrap_or(""));
        match fstype {
            Some("cgroup2") if v2.is_none() => v2 = Some(PathBuf::from(mnt)),
            Some("cgroup") if v1.is_none() && opts.split(',').any(|o| o == "cpu") => {
                v1 = Some(PathBuf::from(mnt))
            }
            _ => {}
        }
    }
    (v2, v1)
}

fn write(path: &Path, what: &str) -> io::Result<()> {
    std::fs::write(path, what).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("writing {what:?} to {}: {e}", path.display()),
        )
    })
}

/// Enables the cpu controller for `dir`'s children (cgroup v2).
fn enable_cpu(dir: &Path) -> io::Result<()> {
    let f = dir.join("cgroup.subtree_control");
    let now = std::fs::read_to_string(&f).unwrap_or_default();
    if now.split_whitespace().any(|c| c == "cpu") {
        return Ok(());
    }
    write(&f, "+cpu")
}

impl GuestGroups {
    /// Makes run `id`'s group and `guests` guest groups under it, each with the equal weight.
    pub fn create(id: &str, guests: usize) -> Result<GuestGroups, String> {
        let (kind, mount) = find_cpu_hierarchy()?;
        Self::create_in(kind, &mount, id, guests).map_err(|e| format!("{e}"))
    }

    fn create_in(kind: Kind, mount: &Path, id: &str, guests: usize) -> io::Result<GuestGroups> {
        let run = mount.join(run_group_name(id));
        // A leftover of a run of the same id killed before it could clean up: empty groups
        // are removed; one with processes in it makes mkdir fail below.
        remove_tree(mount, &run);
        if kind == Kind::V2 {
            enable_cpu(mount)?;
        }
        std::fs::create_dir(&run)
            .map_err(|e| io::Error::new(e.kind(), format!("creating {}: {e}", run.display())))?;
        let mut g = GuestGroups {
            kind,
            mount: mount.to_path_buf(),
            run,
            guests: Vec::with_capacity(guests),
            removed: false,
        };
        // On error `g` is dropped, which removes what was made.
        if kind == Kind::V2 {
            enable_cpu(&g.run)?;
        }
        let (file, weight) = kind.weight();
        for i in 0..guests {
            let dir = g.run.join(format!("guest{i}"));
            std::fs::create_dir(&dir)?;
            g.guests.push(dir.clone());
            write(&dir.join(file), &weight.to_string())?;
        }
        Ok(g)
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The guests' group directories, by guest index.
    pub fn paths(&self) -> &[PathBuf] {
        &self.guests
    }

    /// Moves process `pid` (all its threads) into guest `i`'s group.
    pub fn add(&self, i: usize, pid: u32) -> io::Result<()> {
        let dir = self.guests.get(i).ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, format!("no group for guest {i}"))
        })?;
        join(dir, pid)
    }

    /// Moves what is still inside back to the root and removes every group made.
    pub fn remove(&mut self) {
        if !std::mem::replace(&mut self.removed, true) {
            remove_tree(&self.mount, &self.run);
        }
    }
}

impl Drop for GuestGroups {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Removes run `id`'s groups if a daemon that was killed left them (nothing when there are
/// none or no cpu controller).
pub fn remove_leftover(id: &str) {
    if let Ok((_, mount)) = find_cpu_hierarchy() {
        remove_tree(&mount, &mount.join(run_group_name(id)));
    }
}

/// Moves process `pid` (all its threads) into the group at `dir`.
pub fn join(dir: &Path, pid: u32) -> io::Result<()> {
    write(&dir.join("cgroup.procs"), &pid.to_string())
}

/// The pids in the group at `dir` (empty when it does not exist).
pub fn procs(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Removes `dir` (a group under `mount`) and its child groups, moving their processes to the
/// root first. A process that has just been killed may hold its group for a moment: retried
/// for up to a second.
fn remove_tree(mount: &Path, dir: &Path) {
    if !dir.is_dir() {
        return;
    }
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                remove_tree(mount, &e.path());
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        for pid in procs(dir) {
            let _ = join(mount, pid);
        }
        match std::fs::remove_dir(dir) {
            Ok(()) => return,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return,
            Err(e) if Instant::now() >= deadline => {
                eprintln!("pvnet: removing cgroup {}: {e}", dir.display());
                return;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_finds_the_unified_and_the_v1_cpu_hierarchy() {
        let text = "\
30 25 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
34 30 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 30 0:31 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
36 30 0:32 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
";
        let (v2, v1) = parse_mountinfo(text);
        assert_eq!(v2.as_deref(), Some(Path::new("/sys/fs/cgroup/unified")));
        // `cpuacct` and `cpuset` are other controllers, not `cpu`.
        assert_eq!(v1.as_deref(), Some(Path::new("/sys/fs/cgroup/cpu")));
        let (v2, v1) = parse_mountinfo("31 25 0:27 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
        assert_eq!(v2.as_deref(), Some(Path::new("/sys/fs/cgroup")));
        assert_eq!(v1, None);
        assert_eq!(parse_mountinfo("garbage\n\n1 2 3\n"), (None, None));
    }

    #[test]
    fn groups_get_the_equal_weight_hold_a_process_and_are_removed() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: needs root (cgroup directories)");
            return;
        }
        let (kind, _) = match find_cpu_hierarchy() {
            Ok(k) => k,
            Err(e) => {
                eprintln!("skipped: no cpu controller: {e}");
                return;
            }
        };
        let id = format!("cgtest{}", std::process::id());
        let mut g = GuestGroups::create(&id, 2).expect("groups");
        assert_eq!(g.kind(), kind);
        let (file, weight) = kind.weight();
        for p in g.paths() {
            let w = std::fs::read_to_string(p.join(file)).unwrap();
            assert_eq!(w.trim(), weight.to_string());
        }
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        g.add(1, child.id()).unwrap();
        assert_eq!(procs(&g.paths()[1]), [child.id()]);
        assert!(procs(&g.paths()[0]).is_empty());
        assert!(g.add(2, child.id()).is_err());
        let run = g.paths()[0].parent().unwrap().to_path_buf();
        // Removal with the process still inside: it goes back to the root, the groups go.
        g.remove();
        assert!(!run.exists());
        let _ = child.kill();
        let _ = child.wait();
    }
}
