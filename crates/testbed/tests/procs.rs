//! `procs::end_processes_in` against real processes in private network namespaces. Needs root
//! (a child unshares CLONE_NEWNET before exec); skips otherwise.
//!
//! Every namespace a test targets is held open by the test (an fd on `/proc/PID/ns/net`) for the
//! whole sweep, as the contract asks, so no inode can be handed to an unrelated namespace.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::os::fd::AsFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use pvnet_testbed::procs::{self, end_processes_in, netns_inode, netns_of, processes_in};

fn is_root() -> bool {
    if nix::unistd::geteuid().is_root() {
        true
    } else {
        println!("skipping: needs root (unshare(CLONE_NEWNET))");
        false
    }
}

/// Kills and reaps a child on drop, so a failing test leaves nothing running.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Reaped {
    fn pid(&self) -> i32 {
        self.0.id() as i32
    }

    fn alive(&mut self) -> bool {
        matches!(self.0.try_wait(), Ok(None))
    }
}

/// Waits (bounded) until `pid`'s network namespace is no longer ours, then returns an fd that
/// holds it and its inode.
fn hold_ns_of(pid: i32) -> (File, u64) {
    let ours = netns_of(std::process::id() as i32).unwrap();
    let t0 = Instant::now();
    loop {
        if let Some(ino) = netns_of(pid).filter(|&i| i != ours) {
            let f = File::open(format!("/proc/{pid}/ns/net")).unwrap();
            assert_eq!(
                netns_inode(f.as_fd()).unwrap(),
                ino,
                "{pid} moved meanwhile"
            );
            return (f, ino);
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "{pid} never left our namespace"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `cmd` started in a fresh network namespace of its own: the child, and the held namespace.
fn in_fresh_netns(mut cmd: Command) -> (Reaped, File, u64) {
    // SAFETY: unshare is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::unshare(libc::CLONE_NEWNET) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = Reaped(cmd.spawn().expect("spawn in a fresh namespace"));
    let (f, ino) = hold_ns_of(child.pid());
    (child, f, ino)
}

fn sleeper() -> Command {
    let mut c = Command::new("sleep");
    c.arg("1000.25");
    c
}

fn sh(script: &str) -> Command {
    let mut c = Command::new("sh");
    c.args(["-c", script]).stdout(Stdio::piped());
    c
}

#[test]
fn ends_what_runs_in_the_namespace_and_nothing_else() {
    if !is_root() {
        return;
    }
    let (mut inside, _hold, ino) = in_fresh_netns(sleeper());
    // The same command line in our namespace and in another private one.
    let mut outside = Reaped(sleeper().spawn().unwrap());
    let (mut elsewhere, _hold2, ino2) = in_fresh_netns(sleeper());
    assert_ne!(ino, ino2);

    let r = end_processes_in(&[(ino, "target".into())], procs::DEFAULT_GRACE, |_| false).unwrap();
    assert_eq!(r.ended.len(), 1, "{:?}", r.ended);
    let e = &r.ended[0];
    assert_eq!(
        (e.pid, e.comm.as_str(), e.netns.as_str(), e.signal),
        (inside.pid(), "sleep", "target", Signal::SIGTERM)
    );
    assert!(r.spared.is_empty() && r.survivors.is_empty(), "{r:?}");
    let st = inside.0.wait().unwrap();
    assert_eq!(st.signal(), Some(libc::SIGTERM), "{st}");
    assert!(outside.alive(), "a process outside the namespace was ended");
    assert!(
        elsewhere.alive(),
        "a process in another namespace was ended"
    );
    assert!(processes_in(&[ino]).unwrap().is_empty());
    assert_eq!(processes_in(&[ino2]).unwrap().len(), 1);
}

#[test]
fn a_process_that_ignores_sigterm_gets_sigkill_and_so_do_its_children() {
    if !is_root() {
        return;
    }
    // The shell and its background sleep both ignore SIGTERM (SIG_IGN survives fork and exec).
    let (mut shell, _hold, ino) = in_fresh_netns(sh("trap '' TERM; sleep 1000.25 & echo $!; wait"));
    let mut out = BufReader::new(shell.0.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let child: i32 = line.trim().parse().unwrap();
    assert_eq!(processes_in(&[ino]).unwrap().len(), 2);

    let r = end_processes_in(
        &[(ino, "stubborn".into())],
        Duration::from_millis(300),
        |_| false,
    )
    .unwrap();
    let mut got: Vec<(i32, Signal)> = r.ended.iter().map(|e| (e.pid, e.signal)).collect();
    got.sort_unstable();
    let mut want = vec![(shell.pid(), Signal::SIGKILL), (child, Signal::SIGKILL)];
    want.sort_unstable();
    assert_eq!(got, want, "{r:?}");
    assert!(r.survivors.is_empty(), "{r:?}");
    assert_eq!(shell.0.wait().unwrap().signal(), Some(libc::SIGKILL));
    // The namespace is held, so its inode is still its own: nothing is in it any more.
    assert!(processes_in(&[ino]).unwrap().is_empty());
}

#[test]
fn a_process_started_during_the_grace_period_is_ended_too() {
    if !is_root() {
        return;
    }
    // Told to stop, the shell starts a new long sleep (with the default SIGTERM action: a trap
    // with a command does not pass on to children) and carries on.
    let (mut shell, _hold, ino) = in_fresh_netns(sh(
        "trap 'sleep 1000.25 & echo $!' TERM; echo ready; while :; do sleep 0.02; done",
    ));
    let mut out = BufReader::new(shell.0.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");

    let r = end_processes_in(&[(ino, "forks".into())], Duration::from_millis(500), |_| {
        false
    })
    .unwrap();
    assert_eq!(shell.0.wait().unwrap().signal(), Some(libc::SIGKILL));
    // Every writer of the pipe is gone once the late sleep is: this read ends.
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let late: Vec<i32> = rest.lines().map(|l| l.trim().parse().unwrap()).collect();
    assert!(!late.is_empty(), "the trap never ran");
    for p in &late {
        assert!(
            r.ended.iter().any(|e| e.pid == *p),
            "the sleep {p} started during the grace period is not among {:?}",
            r.ended
        );
    }
    assert!(r.survivors.is_empty(), "{r:?}");
    assert!(processes_in(&[ino]).unwrap().is_empty());
}

#[test]
fn spared_processes_and_zombies_are_left_alone() {
    if !is_root() {
        return;
    }
    let (mut keep, _hold, ino) = in_fresh_netns(sleeper());
    // A second process in the same namespace: a child that joins it by setns.
    let ns = File::open(format!("/proc/{}/ns/net", keep.pid())).unwrap();
    let mut cmd = sleeper();
    let raw = std::os::fd::AsRawFd::as_raw_fd(&ns);
    // SAFETY: setns is async-signal-safe; the fd stays open in the parent until after spawn.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setns(raw, libc::CLONE_NEWNET) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut zombie = Reaped(cmd.spawn().unwrap());
    let t0 = Instant::now();
    while netns_of(zombie.pid()) != Some(ino) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "setns child never joined"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // Make it a zombie: killed, not reaped.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(zombie.pid()), Signal::SIGKILL).unwrap();
    let t0 = Instant::now();
    while netns_of(zombie.pid()).is_some() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "killed child still in its namespace"
        );
        std::thread::sleep(Duration::from_millis(5));
    }

    let kept = keep.pid();
    let r = end_processes_in(&[(ino, "mixed".into())], procs::DEFAULT_GRACE, |p| {
        p.pid == kept
    })
    .unwrap();
    assert!(r.ended.is_empty(), "{r:?}");
    assert_eq!(r.spared.len(), 1, "{r:?}");
    assert_eq!(
        (r.spared[0].pid, r.spared[0].netns.as_str()),
        (kept, "mixed")
    );
    assert!(
        r.survivors.is_empty(),
        "the spared one is not a survivor: {r:?}"
    );
    assert!(keep.alive());
    // Reaped here, by its parent, with the status our own SIGKILL gave it.
    assert_eq!(zombie.0.wait().unwrap().signal(), Some(libc::SIGKILL));
}

#[test]
fn testbed_teardown_ends_what_runs_in_each_domain() {
    if !is_root() {
        return;
    }
    let id = pvnet_testbed::RunId::new();
    let mut tb = pvnet_testbed::Testbed::create(pvnet_testbed::TestbedConfig {
        id: id.clone(),
        guests: 1,
        rps_cpu: None,
        ..Default::default()
    })
    .unwrap();
    let mut kids: Vec<Reaped> = tb
        .namespaces()
        .map(|ns| Reaped(ns.command("sleep").arg("1000.25").spawn().unwrap()))
        .collect();
    let mut outside = Reaped(sleeper().spawn().unwrap());
    let held: Vec<u64> = tb
        .namespaces()
        .map(|ns| netns_inode(ns.fd()).unwrap())
        .collect();
    for (k, ino) in kids.iter().zip(&held) {
        let t0 = Instant::now();
        while netns_of(k.pid()) != Some(*ino) {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "child never entered"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    tb.teardown().unwrap();
    for k in &mut kids {
        assert_eq!(k.0.wait().unwrap().signal(), Some(libc::SIGTERM));
    }
    assert!(outside.alive());
    // `tb` still holds the namespaces: their inodes are theirs, and nothing is in them.
    assert!(processes_in(&held).unwrap().is_empty());
    let prefix = format!("pvnet-{}-", id.as_str());
    assert!(
        !pvnet_testbed::list_netns()
            .iter()
            .any(|n| n.starts_with(&prefix)),
        "names left"
    );
}

#[test]
fn teardown_run_ends_processes_by_namespace_then_removes_the_names() {
    if !is_root() {
        return;
    }
    let id = pvnet_testbed::RunId::new();
    let name = id.ns_name("g0");
    let ns = pvnet_testbed::Netns::create(&name).unwrap();
    let ino = netns_inode(ns.fd()).unwrap();
    let mut kid = Reaped(ns.command("sleep").arg("1000.25").spawn().unwrap());
    let mut spared = Reaped(ns.command("sleep").arg("1000.25").spawn().unwrap());
    let t0 = Instant::now();
    while netns_of(kid.pid()) != Some(ino) || netns_of(spared.pid()) != Some(ino) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "children never entered"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let sp = spared.pid();
    let t =
        pvnet_testbed::teardown_run(id.as_str(), procs::DEFAULT_GRACE, |p| p.pid == sp).unwrap();
    assert_eq!(t.removed, vec![name.clone()]);
    let ended: Vec<(i32, &str)> = t
        .processes
        .ended
        .iter()
        .map(|e| (e.pid, e.netns.as_str()))
        .collect();
    assert_eq!(ended, vec![(kid.pid(), name.as_str())]);
    assert_eq!(kid.0.wait().unwrap().signal(), Some(libc::SIGTERM));
    assert!(spared.alive());
    assert_eq!(t.processes.spared.len(), 1);
    assert!(!pvnet_testbed::list_netns().contains(&name));
    // The spared one still holds the namespace (`ns` too): end it by hand.
    drop(spared);
    assert!(processes_in(&[ino]).unwrap().is_empty());
}
