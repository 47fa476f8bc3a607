//! Helpers for the end-to-end tests: they drive the real `pvnet` binary, as root, and check
//! that nothing is left behind.
#![allow(dead_code)]

use std::process::{Command, Output};
use std::sync::Mutex;

/// End-to-end tests share two CPUs: run them one at a time.
pub static SERIAL: Mutex<()> = Mutex::new(());

pub fn exe() -> &'static str {
    env!("CARGO_BIN_EXE_pvnet")
}

pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Skips (returns true) when not root, saying why.
pub fn skip_unless_root(name: &str) -> bool {
    if !is_root() {
        eprintln!("skipping {name}: needs root (network namespaces, veth, TAP, raw sockets)");
        return true;
    }
    false
}

pub fn unique_id() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("{:04x}{:02x}", std::process::id() & 0xffff, n & 0xff)
}

pub fn pvnet(args: &[&str]) -> Output {
    Command::new(exe()).args(args).output().expect("run pvnet")
}

pub fn ok(args: &[&str]) -> String {
    let o = pvnet(args);
    assert!(
        o.status.success(),
        "pvnet {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn namespaces_of(id: &str) -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with(&format!("pvnet-{id}-")))
                .collect()
        })
        .unwrap_or_default()
}

/// Run `id` left no namespace and no run directory behind.
pub fn assert_run_gone(id: &str) {
    assert!(
        namespaces_of(id).is_empty(),
        "run {id} left {:?}",
        namespaces_of(id)
    );
    assert!(!std::path::Path::new(&format!("/run/pvnet/{id}")).exists());
}

/// A run brought up with `pvnet up`, brought down (and checked clean) on drop.
pub struct Run {
    pub id: String,
}

impl Run {
    pub fn up(extra: &[&str]) -> Run {
        let id = unique_id();
        let mut args = vec!["up", "--id", &id];
        args.extend_from_slice(extra);
        ok(&args);
        Run { id }
    }

    /// Runs `pvnet <args>` inside namespace role `role` of this run.
    pub fn exec(&self, role: &str, args: &[impl AsRef<str>]) -> Output {
        let mut a = vec!["exec", "--id", &self.id, role, exe()];
        a.extend(args.iter().map(AsRef::as_ref));
        pvnet(&a)
    }

    pub fn spawn(&self, role: &str, args: &[impl AsRef<str>]) -> std::process::Child {
        let mut a = vec!["exec", "--id", &self.id, role, exe()];
        a.extend(args.iter().map(AsRef::as_ref));
        Command::new(exe())
            .args(&a)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn")
    }

    pub fn stat(&self) -> serde_json::Value {
        serde_json::from_str(&ok(&["stat", "--id", &self.id, "--json"])).expect("stat json")
    }

    /// The run's `info.json`: the daemon's pid (`pid`), the guests' (`guest_pids`), ...
    pub fn info(&self) -> serde_json::Value {
        let path = format!("/run/pvnet/{}/info.json", self.id);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let o = pvnet(&["down", "--id", &self.id]);
        if !std::thread::panicking() {
            assert!(
                o.status.success(),
                "down failed: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            assert!(
                namespaces_of(&self.id).is_empty(),
                "namespaces left: {:?}",
                namespaces_of(&self.id)
            );
        }
    }
}

/// A receiver started by [`server`]; killed when dropped unfinished (a failed test), so it does
/// not outlive its namespace.
pub struct Server(std::process::Child);

impl Server {
    pub fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        self.0.wait()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Starts a `perf server --once` in `role` and waits until it accepts connections.
pub fn server(run: &Run, role: &str, addr: &str) -> Server {
    let child = run.spawn(role, &["perf", "server", "--once"]);
    for _ in 0..100 {
        let o = run.exec("remote", &["perf", "ping", addr, "--count", "1"]);
        if o.status.success() {
            break;
        }
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    Server(child)
}

/// Streams `bytes` from the remote host to `addr`; returns the parsed receiver report.
pub fn stream(run: &Run, addr: &str, bytes: u64) -> serde_json::Value {
    stream_capped(run, addr, bytes, 120)
}

/// [`stream`], the sender giving up after `cap_secs` seconds (a stalled path then fails the
/// stream sooner).
pub fn stream_capped(run: &Run, addr: &str, bytes: u64, cap_secs: u32) -> serde_json::Value {
    let o = run.exec(
        "remote",
        &[
            "perf",
            "stream",
            addr,
            "--duration",
            &cap_secs.to_string(),
            "--bytes",
            &bytes.to_string(),
        ],
    );
    assert!(
        o.status.success(),
        "stream to {addr} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("stream json")
}

/// A counter from `stat --json`; panics, naming it, when it is not one.
pub fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a counter: {v}"))
}

/// Streams `bytes` from the remote host to `addr`, served in namespace `role`, and checks that
/// every byte arrived intact.
pub fn stream_intact(run: &Run, role: &str, addr: &str, bytes: u64) {
    stream_intact_capped(run, role, addr, bytes, 120)
}

/// [`stream_intact`], the sender giving up after `cap_secs` seconds.
pub fn stream_intact_capped(run: &Run, role: &str, addr: &str, bytes: u64, cap_secs: u32) {
    let mut srv = server(run, role, addr);
    assert_intact(&stream_capped(run, addr, bytes, cap_secs), bytes);
    let _ = srv.wait();
}

/// Pings `dst` `count` times from namespace `role` (`perf ping` fails unless every echo is
/// answered); returns its report.
pub fn ping(run: &Run, role: &str, dst: &str, count: u32) -> serde_json::Value {
    let o = run.exec(role, &["perf", "ping", dst, "--count", &count.to_string()]);
    assert!(
        o.status.success(),
        "{role} -> {dst}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("ping report")
}

/// Runs `pvnet <args>` and checks that it fails saying `want`.
pub fn fails_saying(args: &[&str], want: &str) {
    let o = pvnet(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains(want), "{args:?}: {err}");
}

/// A `perf server` for one stream on `port` in namespace `role`, given half a second to listen.
pub fn listen(run: &Run, role: &str, port: u16) -> std::process::Child {
    let bind = format!("0.0.0.0:{port}");
    let srv = run.spawn(role, &["perf", "server", "--once", "--bind", &bind]);
    std::thread::sleep(std::time::Duration::from_millis(500));
    srv
}

/// `perf stream`'s arguments for `bytes` to `to_addr:port`, the sender giving up after
/// `cap_secs`.
pub fn stream_args(to_addr: &str, port: u16, bytes: u64, cap_secs: u32) -> Vec<String> {
    let (port, cap, bytes) = (port.to_string(), cap_secs.to_string(), bytes.to_string());
    [
        "perf",
        "stream",
        to_addr,
        "--port",
        &port,
        "--duration",
        &cap,
        "--bytes",
        &bytes,
    ]
    .map(String::from)
    .to_vec()
}

/// Streams `bytes` from namespace `from` to a `perf server` on `port` in namespace `to`
/// (address `to_addr`), the sender giving up after `cap_secs`; returns the sender's report, or
/// its error output. Several can run at once on different ports.
pub fn flow(
    run: &Run,
    (from, to, to_addr): (&str, &str, &str),
    port: u16,
    bytes: u64,
    cap_secs: u32,
) -> Result<serde_json::Value, String> {
    let mut srv = listen(run, to, port);
    let args = stream_args(to_addr, port, bytes, cap_secs);
    let o = run.exec(from, &args);
    let _ = srv.kill();
    let _ = srv.wait();
    if !o.status.success() {
        return Err(String::from_utf8_lossy(&o.stderr).into_owned());
    }
    serde_json::from_slice(&o.stdout).map_err(|e| e.to_string())
}

/// Checks a [`flow`]'s report: every byte of `bytes` sent and verified.
pub fn assert_intact(v: &serde_json::Value, bytes: u64) {
    assert_eq!(v["sent"].as_u64(), Some(bytes), "{v}");
    assert_eq!(v["receiver"]["bytes"].as_u64(), Some(bytes), "{v}");
    assert_eq!(v["receiver"]["mismatches"].as_u64(), Some(0), "{v}");
}

/// Polls `stat` (at most 20 s) until `done` holds; returns the last `stat`.
pub fn stat_until(
    run: &Run,
    what: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let st = run.stat();
        if done(&st) {
            return st;
        }
        assert!(std::time::Instant::now() < deadline, "{what}: {st}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Asserts that the daemon, idle, sleeps: a few passes of its loop in a second, not the
/// millions a descriptor that polls ready for ever gives.
pub fn assert_asleep(run: &Run, when: &str) {
    let passes = |st: &serde_json::Value| u(&st["daemon"]["loop_passes"]);
    let before = passes(&run.stat());
    std::thread::sleep(std::time::Duration::from_secs(1));
    let after = passes(&run.stat());
    assert!(
        after - before < 1000,
        "{when}: the daemon's loop made {} passes in an idle second",
        after - before
    );
}

/// A blocking `SOCK_SEQPACKET` Unix socket connected to `path` (a run's admin or attach socket).
pub fn socket_seqpacket(path: &str) -> std::os::fd::OwnedFd {
    use nix::sys::socket::*;
    let fd = socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .unwrap();
    connect(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &UnixAddr::new(path).unwrap(),
    )
    .unwrap();
    fd
}
