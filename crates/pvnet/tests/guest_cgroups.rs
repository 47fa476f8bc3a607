//! `pvnet up --guest-cgroups on`: each guest's process (a PV guest's netfront, an HVM guest's
//! vCPU process), every thread of it, sits in a CPU cgroup of its own (`pvnet-<id>/guest<i>`)
//! with the default weight, the same for every guest (a relayed guest, which has no process,
//! gets its group too, for what runs in it); `pvnet down` removes the groups. With `off` no group is made. Needs root (and a cpu
//! controller, cgroup v2 or v1; skipped with a message without one).

use crate::common::*;

use std::path::Path;

/// The run's info file.
fn info(id: &str) -> serde_json::Value {
    let s = std::fs::read_to_string(format!("/run/pvnet/{id}/info.json")).expect("info.json");
    serde_json::from_str(&s).expect("info json")
}

/// Task `tid`'s group in the cpu controller's hierarchy, from /proc/<pid>/task/<tid>/cgroup
/// (v1: the line whose controller list names `cpu`; v2: the `0::` line).
fn cpu_group_of(pid: u64, tid: &str, v2: bool) -> String {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/cgroup")).expect("cgroup");
    s.lines()
        .find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, ctl, path) = (f.next()?, f.next()?, f.next()?);
            let hit = if v2 {
                ctl.is_empty()
            } else {
                ctl.split(',').any(|c| c == "cpu")
            };
            hit.then(|| path.to_string())
        })
        .expect("a cpu line")
}

/// Checks that each of `run`'s guests (`n` of them) sits alone, every thread of it, in its
/// own group of the equal weight; returns the run's group directory, or None when this host
/// has no usable cpu controller (the daemon said why).
fn check_groups(run: &Run, n: usize) -> Option<std::path::PathBuf> {
    let inf = info(&run.id);
    let dirs: Vec<String> = inf["guest_cgroups"]
        .as_array()
        .expect("guest_cgroups")
        .iter()
        .map(|d| d.as_str().unwrap().to_string())
        .collect();
    if dirs.is_empty() {
        let log = std::fs::read_to_string(format!("/run/pvnet/{}/daemon.log", run.id))
            .unwrap_or_default();
        assert!(
            log.contains("without groups"),
            "no groups and no reason: {log}"
        );
        eprintln!("skipping: no usable cpu controller here ({})", log.trim());
        return None;
    }
    // PV guests' netfronts first, then HVM guests' vCPU processes: the testbed's order.
    let pids: Vec<u64> = inf["guest_pids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_u64().unwrap())
        .collect();
    assert_eq!(dirs.len(), n);
    assert_eq!(pids.len(), n);
    let run_dir = Path::new(&dirs[0]).parent().unwrap().to_path_buf();
    assert!(run_dir.ends_with(format!("pvnet-{}", run.id)));
    for (i, (dir, &pid)) in dirs.iter().zip(&pids).enumerate() {
        let dir = Path::new(dir);
        assert_eq!(dir, run_dir.join(format!("guest{i}")));
        // The equal weight: each interface's default.
        let v2 = dir.join("cpu.weight").exists();
        let (file, want) = if v2 {
            ("cpu.weight", "100")
        } else {
            ("cpu.shares", "1024")
        };
        let w = std::fs::read_to_string(dir.join(file)).expect("weight file");
        assert_eq!(w.trim(), want, "guest {i}'s {file}");
        // The guest's process, and nothing else, is in it.
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap();
        let procs: Vec<u64> = procs
            .split_whitespace()
            .map(|p| p.parse().unwrap())
            .collect();
        assert_eq!(procs, [pid], "guest {i}'s group holds its own process only");
        // Every thread of it, as the kernel reports the task's group.
        let want_rel = format!("/pvnet-{}/guest{i}", run.id);
        let mut threads = 0;
        for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
            let tid = t.unwrap().file_name().into_string().unwrap();
            assert_eq!(
                cpu_group_of(pid, &tid, v2),
                want_rel,
                "thread {tid} of guest {i}"
            );
            threads += 1;
        }
        assert!(threads >= 1);
    }
    Some(run_dir)
}

#[test]
fn guests_sit_in_their_own_weighted_cgroups_until_down() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("guests_sit_in_their_own_weighted_cgroups_until_down") {
        return;
    }
    let run = Run::up(&["--guests", "2", "--guest-cgroups", "on"]);
    let Some(run_dir) = check_groups(&run, 2) else {
        return;
    };
    drop(run);
    assert!(!run_dir.exists(), "{} left after down", run_dir.display());

    // An HVM guest is a guest too: its vCPU process gets the group after the PV guest's (its
    // device model is the driver domain's and stays out).
    let run = Run::up(&["--guests", "1", "--hvm", "1", "--guest-cgroups", "on"]);
    let run_dir = check_groups(&run, 2).expect("groups, as in the first run");
    drop(run);
    assert!(!run_dir.exists(), "{} left after down", run_dir.display());

    // A relayed guest has no process of its own, but its group is there for what runs in it
    // (the bench's receiver joins it), so the floor is measured under the same scheduling of
    // guests as the PV path: two empty groups of the equal weight, removed at down.
    let run = Run::up(&["--mode", "relay", "--guests", "2", "--guest-cgroups", "on"]);
    let inf = info(&run.id);
    let dirs: Vec<&str> = (inf["guest_cgroups"]
        .as_array()
        .expect("guest_cgroups")
        .iter())
    .map(|d| d.as_str().unwrap())
    .collect();
    assert_eq!(dirs.len(), 2, "{inf}");
    for (i, dir) in dirs.iter().enumerate() {
        let dir = Path::new(dir);
        assert_eq!(
            dir,
            run_dir
                .parent()
                .unwrap()
                .join(format!("pvnet-{}/guest{i}", run.id))
        );
        let (file, want) = if dir.join("cpu.weight").exists() {
            ("cpu.weight", "100")
        } else {
            ("cpu.shares", "1024")
        };
        let w = std::fs::read_to_string(dir.join(file)).expect("weight file");
        assert_eq!(w.trim(), want, "relayed guest {i}'s {file}");
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap();
        assert_eq!(procs.trim(), "", "relayed guest {i}'s group starts empty");
    }
    let relay_dir = Path::new(dirs[0]).parent().unwrap().to_path_buf();
    drop(run);
    assert!(
        !relay_dir.exists(),
        "{} left after down",
        relay_dir.display()
    );

    // Off: no group is made.
    let run = Run::up(&["--guests", "1", "--guest-cgroups", "off"]);
    let inf = info(&run.id);
    assert_eq!(inf["guest_cgroups"].as_array().map(Vec::len), Some(0));
    let parent = run_dir.parent().unwrap();
    assert!(!parent.join(format!("pvnet-{}", run.id)).exists());
}
