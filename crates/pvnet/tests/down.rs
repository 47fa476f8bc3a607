//! Teardown ends what runs in a run's domains (issue 25): processes a user started with
//! `pvnet exec` in the remote host, the driver domain and a guest are gone after `pvnet down`
//! and after Ctrl-C of `pvnet up --foreground`, and so is every namespace of the run, checked
//! through /proc, not by name. A process outside the run with the same command line survives.
//! `exec` into a run whose daemon is gone is refused. Needs root.

use crate::common::*;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pvnet_testbed::procs::netns_of;

/// The command line every long-running process here has, inside the run and outside it.
const SLEEP: [&str; 2] = ["sleep", "1000.5"];

/// `pvnet down` on drop, whatever happened, so a failing test leaves no run behind.
struct Down(String);

impl Drop for Down {
    fn drop(&mut self) {
        if std::path::Path::new(&format!("/run/pvnet/{}", self.0)).exists() {
            let _ = pvnet(&["down", "--id", &self.0]);
        }
    }
}

/// Kills and reaps a child on drop (a failing test, or the process outside the run).
struct Kid(Child);

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Kid {
    fn pid(&self) -> i32 {
        self.0.id() as i32
    }
}

/// The inodes of the run's namespaces, by role.
fn inodes(id: &str, roles: &[&str]) -> Vec<(String, u64)> {
    roles
        .iter()
        .map(|r| {
            let p = format!("/run/netns/pvnet-{id}-{r}");
            let ino = std::fs::metadata(&p)
                .unwrap_or_else(|e| panic!("{p}: {e}"))
                .ino();
            (r.to_string(), ino)
        })
        .collect()
}

/// `pvnet exec --id ID ROLE ARGS...`, waited for until it is in the role's namespace.
fn exec_in(id: &str, role: &str, ino: u64, args: &[&str], stdout: Stdio) -> Kid {
    let kid = Kid(Command::new(exe())
        .args(["exec", "--id", id, role])
        .args(args)
        .stdin(Stdio::null())
        .stdout(stdout)
        .spawn()
        .expect("spawn pvnet exec"));
    let t0 = Instant::now();
    while netns_of(kid.pid()) != Some(ino) {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "pvnet exec {role} never entered its namespace"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    kid
}

/// What `pvnet exec` started in a run: a sleep in each role, and in the last role a shell that
/// ignores SIGTERM with a background sleep of its own (it ignores SIGTERM too).
struct Started {
    sleeps: Vec<Kid>,
    shell: Kid,
    /// The shell's background sleep (not our child).
    grandchild: i32,
}

fn start_in(id: &str, ns: &[(String, u64)]) -> Started {
    let sleeps = ns
        .iter()
        .map(|(r, ino)| exec_in(id, r, *ino, &SLEEP, Stdio::null()))
        .collect();
    let (role, ino) = ns.last().unwrap();
    let script = format!("trap '' TERM; {} {} & echo $!; wait", SLEEP[0], SLEEP[1]);
    let mut shell = exec_in(id, role, *ino, &["sh", "-c", &script], Stdio::piped());
    let mut line = String::new();
    BufReader::new(shell.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let grandchild: i32 = line.trim().parse().expect("background pid");
    let t0 = Instant::now();
    while netns_of(grandchild) != Some(*ino) {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no background sleep"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    Started {
        sleeps,
        shell,
        grandchild,
    }
}

/// Every task (thread) and open fd on the machine that refers to one of `gone`: from
/// `/proc/*/task/*/ns/net` and `/proc/*/fd/*`. An inode that a namespace bound under
/// /run/netns has now (the kernel hands freed inodes out again) is another run's.
fn holders(gone: &[u64]) -> Vec<String> {
    let rebound: BTreeSet<u64> = std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| std::fs::metadata(e.path()).ok())
                .map(|m| m.ino())
                .collect()
        })
        .unwrap_or_default();
    let wanted: Vec<String> = gone
        .iter()
        .filter(|i| !rebound.contains(i))
        .map(|i| format!("net:[{i}]"))
        .collect();
    let mut found = Vec::new();
    let links = |dir: String| -> Vec<(String, String)> {
        std::fs::read_dir(&dir)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter_map(|e| {
                        let l = std::fs::read_link(e.path()).ok()?;
                        Some((e.path().display().to_string(), l.display().to_string()))
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    for p in std::fs::read_dir("/proc").unwrap().filter_map(|e| e.ok()) {
        let name = p.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let mut refs = links(format!("/proc/{name}/fd"));
        for t in std::fs::read_dir(format!("/proc/{name}/task"))
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok())
        {
            let ns = t.path().join("ns/net");
            if let Ok(l) = std::fs::read_link(&ns) {
                refs.push((ns.display().to_string(), l.display().to_string()));
            }
        }
        for (path, target) in refs {
            if wanted.contains(&target) {
                let comm =
                    std::fs::read_to_string(format!("/proc/{name}/comm")).unwrap_or_default();
                found.push(format!("{path} -> {target} ({})", comm.trim()));
            }
        }
    }
    found
}

/// After a teardown: every process started is gone (the sleeps by SIGTERM, the shell and its
/// background sleep, which ignore it, by SIGKILL), nothing refers to the run's namespaces, no
/// name is left, and the same command line outside the run still runs.
fn check_all_ended(id: &str, ns: &[(String, u64)], mut s: Started, outside: &mut Kid) {
    for k in &mut s.sleeps {
        let st = k.0.wait().unwrap();
        assert_eq!(st.signal(), Some(libc::SIGTERM), "exec'd sleep: {st}");
    }
    let st = s.shell.0.wait().unwrap();
    assert_eq!(
        st.signal(),
        Some(libc::SIGKILL),
        "the shell that ignores SIGTERM: {st}"
    );
    let gone: Vec<u64> = ns.iter().map(|(_, i)| *i).collect();
    let left = holders(&gone);
    assert!(
        left.is_empty(),
        "run {id}'s namespaces are still held: {left:?}"
    );
    // The background sleep is not our child; if it were alive it would be in its namespace,
    // which `holders` just found empty.
    assert_ne!(
        netns_of(s.grandchild),
        Some(ns.last().unwrap().1),
        "the background sleep survived"
    );
    assert!(namespaces_of(id).is_empty(), "{:?}", namespaces_of(id));
    assert!(
        matches!(outside.0.try_wait(), Ok(None)),
        "the same command line outside the run was ended"
    );
}

/// The pids a teardown's report names as ended.
fn ended_pids(text: &str) -> BTreeSet<i32> {
    text.lines()
        .filter_map(|l| l.split("ended pid ").nth(1))
        .filter_map(|r| r.split_whitespace().next()?.parse().ok())
        .collect()
}

fn wanted_pids(s: &Started) -> BTreeSet<i32> {
    s.sleeps
        .iter()
        .map(Kid::pid)
        .chain([s.shell.pid(), s.grandchild])
        .collect()
}

const ROLES: [&str; 3] = ["remote", "dd", "g0"];

#[test]
fn down_ends_what_exec_started_in_every_domain() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("down_ends_what_exec_started_in_every_domain") {
        return;
    }
    let id = unique_id();
    let _d = Down(id.clone());
    ok(&["up", "--id", &id, "--guests", "1"]);
    let ns = inodes(&id, &ROLES);
    let mut outside = Kid(Command::new(SLEEP[0]).arg(SLEEP[1]).spawn().unwrap());
    let s = start_in(&id, &ns);
    let want = wanted_pids(&s);

    let out = ok(&["down", "--id", &id]);
    assert_eq!(ended_pids(&out), want, "down said:\n{out}");
    assert!(
        out.contains(&format!("run {id} is down (ended {} processes", want.len())),
        "{out}"
    );
    check_all_ended(&id, &ns, s, &mut outside);
    // The run is gone: exec into it is refused.
    fails_saying(&["exec", "--id", &id, "g0", "true"], "no pvnet run");
}

#[test]
fn ctrl_c_of_a_foreground_run_ends_what_exec_started() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("ctrl_c_of_a_foreground_run_ends_what_exec_started") {
        return;
    }
    let id = unique_id();
    let _d = Down(id.clone());
    let up = Kid(Command::new(exe())
        .args(["up", "--id", &id, "--guests", "1", "--foreground"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap());
    let info = format!("/run/pvnet/{id}/info.json");
    let t0 = Instant::now();
    while !std::path::Path::new(&info).exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "run did not come up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let ns = inodes(&id, &ROLES);
    let mut outside = Kid(Command::new(SLEEP[0]).arg(SLEEP[1]).spawn().unwrap());
    let s = start_in(&id, &ns);
    let want = wanted_pids(&s);

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(up.pid()),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let mut up = up;
    let mut err = String::new();
    std::io::Read::read_to_string(up.0.stderr.as_mut().unwrap(), &mut err).unwrap();
    let st = up.0.wait().unwrap();
    assert!(
        st.code().is_some(),
        "pvnet up died of a signal: {st}\n{err}"
    );
    assert_eq!(ended_pids(&err), want, "the daemon said:\n{err}");
    check_all_ended(&id, &ns, s, &mut outside);
    assert!(!std::path::Path::new(&format!("/run/pvnet/{id}")).exists());
}

#[test]
fn exec_refuses_a_run_whose_daemon_is_gone_and_down_ends_what_it_left() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("exec_refuses_a_run_whose_daemon_is_gone_and_down_ends_what_it_left") {
        return;
    }
    let id = unique_id();
    let _d = Down(id.clone());
    ok(&["up", "--id", &id, "--guests", "1"]);
    let ns = inodes(&id, &ROLES);
    let mut outside = Kid(Command::new(SLEEP[0]).arg(SLEEP[1]).spawn().unwrap());
    let s = start_in(&id, &ns);
    let want = wanted_pids(&s);

    // The daemon crashes: its guests go with it (PR_SET_PDEATHSIG), the user's processes stay.
    let v: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(format!("/run/pvnet/{id}/info.json")).unwrap(),
    )
    .unwrap();
    let daemon = v["pid"].as_i64().unwrap() as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let guests: Vec<i32> = v["guest_pids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_i64().unwrap() as i32)
        .collect();
    assert_eq!(guests.len(), 1);
    let t0 = Instant::now();
    while netns_of(daemon).is_some() || guests.iter().any(|g| netns_of(*g).is_some()) {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the daemon or its guest survived SIGKILL"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    fails_saying(&["exec", "--id", &id, "g0", "true"], "is not up");
    assert!(!namespaces_of(&id).is_empty(), "a crash removes no name");

    let out = ok(&["down", "--id", &id]);
    assert_eq!(ended_pids(&out), want, "down said:\n{out}");
    check_all_ended(&id, &ns, s, &mut outside);
}

#[test]
fn down_run_from_a_shell_inside_the_run_leaves_that_shell() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("down_run_from_a_shell_inside_the_run_leaves_that_shell") {
        return;
    }
    let id = unique_id();
    let _d = Down(id.clone());
    ok(&["up", "--id", &id, "--guests", "1"]);
    let ns = inodes(&id, &["g0"]);
    let mut outside = Kid(Command::new(SLEEP[0]).arg(SLEEP[1]).spawn().unwrap());
    let mut sleeper = exec_in(&id, "g0", ns[0].1, &SLEEP, Stdio::null());
    // A shell in the guest runs `pvnet down`: it is down's parent, never to be signalled,
    // by down or by the daemon.
    let script = format!("echo shell $$; {} down --id {id}; echo status $?", exe());
    let o = Command::new(exe())
        .args(["exec", "--id", &id, "g0", "sh", "-c", &script])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "the shell did not finish: {o:?}");
    assert!(out.contains("status 0"), "{out}\n{err}");
    let shell: i32 = out
        .lines()
        .find_map(|l| l.strip_prefix("shell "))
        .and_then(|p| p.trim().parse().ok())
        .expect("the shell's pid");
    assert!(
        out.contains(&format!("left pid {shell} (sh) in pvnet-{id}-g0")),
        "{out}\n{err}"
    );
    assert_eq!(ended_pids(&out), BTreeSet::from([sleeper.pid()]), "{out}");
    assert_eq!(sleeper.0.wait().unwrap().signal(), Some(libc::SIGTERM));
    // The shell has exited since: nothing holds the guest's namespace any more.
    let left = holders(&[ns[0].1]);
    assert!(left.is_empty(), "{left:?}");
    assert!(namespaces_of(&id).is_empty(), "{:?}", namespaces_of(&id));
    assert!(matches!(outside.0.try_wait(), Ok(None)));
}
