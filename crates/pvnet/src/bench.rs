//! `pvnet bench`: configurations side by side, interleaved across repetitions, measured the way
//! seed 000 did (stream throughput, TCP_RR rate, receive-CPU cycles per byte split by domain),
//! every figure also as a ratio against `linux` from the same run.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use pvnet_perf::cpu;
use pvnet_testbed::Netns;
use serde::Serialize;
use serde_json::json;

use crate::daemon::{DaemonConfig, LroSettings, Mode};
use crate::rundir::RunInfo;
use pvnet_dd::lro;

#[derive(clap::Args, Clone, Debug)]
pub struct BenchArgs {
    /// Comma-separated configurations: linux, xen, lro, bo, da, timeout, adaptive.
    #[arg(long, default_value = "linux,xen,lro,bo,da,timeout,adaptive")]
    pub configs: String,
    /// A short run (fewer, shorter repetitions).
    #[arg(long)]
    pub quick: bool,
    /// Repetitions of each configuration (default 3, quick 1).
    #[arg(long)]
    pub reps: Option<usize>,
    /// Seconds per stream test (default 10, quick 3).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Seconds per TCP_RR test (default 5, quick 2).
    #[arg(long)]
    pub rr_duration: Option<f64>,
    /// Bytes per send call of the stream sender.
    #[arg(long, default_value_t = 65536)]
    pub msg_size: usize,
    /// Write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
}

const RX_CPU: usize = 0;
const TX_CPU: usize = 1;
const PORT: u16 = 5201;

#[derive(Clone, Debug, Default, Serialize)]
struct Sample {
    throughput_mbps: f64,
    bytes: u64,
    mismatches: u64,
    rr_tps: f64,
    rr_p50_us: f64,
    rr_p99_us: f64,
    cpu_busy_ns: u64,
    driver_ns: u64,
    guest_ns: u64,
    cycles_per_byte_total: f64,
    cycles_per_byte_driver: f64,
    cycles_per_byte_guest: f64,
    /// Segments per aggregate during the stream (0 without aggregation).
    lro_rate: f64,
    flush_latency_p50_us: f64,
    flush_latency_p99_us: f64,
    errors: Vec<String>,
    stat: serde_json::Value,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The configurations (seed 000, Table III, plus the flush policies it left open).
const CONFIGS: [(&str, &str); 7] = [
    ("linux", "native Linux, no virtualization"),
    ("xen", "the PV path, no aggregation"),
    ("lro", "LRO, flush at the end of every poll (skb-mode)"),
    (
        "bo",
        "LRO + BO: the bridge forwards aggregates without linearizing",
    ),
    ("da", "LRO with delayed aggregation: flush every 2nd poll"),
    (
        "timeout",
        "LRO, flush an aggregate 50 us after its first segment",
    ),
    ("adaptive", "LRO with the self-tuning flush"),
];

/// The daemon settings of a configuration.
fn daemon_config(config: &str) -> DaemonConfig {
    let lro = |p: &str| {
        Some(LroSettings {
            policy: p.parse().expect("a valid policy"),
            mode: lro::Mode::Skb,
        })
    };
    let (mode, lro, bo) = match config {
        "linux" => (Mode::Linux, None, false),
        "lro" => (Mode::Xen, lro("poll"), false),
        "bo" => (Mode::Xen, lro("poll"), true),
        "da" => (Mode::Xen, lro("every:2"), false),
        "timeout" => (Mode::Xen, lro("timeout:50"), false),
        "adaptive" => (Mode::Xen, lro("adaptive"), false),
        _ => (Mode::Xen, None, false),
    };
    DaemonConfig {
        mode,
        guests: 1,
        lro,
        bo,
        sender_cpu: Some(TX_CPU),
        ..DaemonConfig::default()
    }
}

fn parse_configs(s: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for c in s.split(',').map(str::trim).filter(|c| !c.is_empty()) {
        if !CONFIGS.iter().any(|(n, _)| *n == c) {
            let known: Vec<&str> = CONFIGS.iter().map(|(n, _)| *n).collect();
            bail!("unknown configuration {c:?} (known: {})", known.join(", "));
        }
        if !out.iter().any(|o| o == c) {
            out.push(c.to_string());
        }
    }
    if out.is_empty() {
        bail!("--configs names no configuration");
    }
    Ok(out)
}

pub fn run(args: BenchArgs) -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!("`pvnet bench` needs root (network namespaces, veth, TAP and raw sockets): run it with sudo");
    }
    if pvnet_testbed::cpu::nr_cpus() < 2 {
        bail!("`pvnet bench` needs two CPUs (receiver on CPU 0, sender on CPU 1)");
    }
    let configs = parse_configs(&args.configs)?;
    let reps = args.reps.unwrap_or(if args.quick { 1 } else { 3 });
    let dur = args.duration.unwrap_or(if args.quick { 3.0 } else { 10.0 });
    let rr_dur = args
        .rr_duration
        .unwrap_or(if args.quick { 2.0 } else { 5.0 });
    let tsc_hz = cpu::tsc_hz();
    let mut samples: BTreeMap<String, Vec<Sample>> = BTreeMap::new();
    let started = Instant::now();
    let total = reps * configs.len();
    let mut k = 0;
    for rep in 0..reps {
        for c in &configs {
            k += 1;
            eprintln!(
                "pvnet bench: [{k}/{total}] {c} (repetition {}), {:.0} s elapsed",
                rep + 1,
                started.elapsed().as_secs_f64()
            );
            let s = run_one(c, dur, rr_dur, args.msg_size, tsc_hz)?;
            samples.entry(c.clone()).or_default().push(s);
        }
    }
    let report = summarize(&configs, &samples, tsc_hz, reps, dur, rr_dur, args.msg_size);
    print_table(&configs, &report);
    if let Some(p) = &args.json {
        std::fs::write(p, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", p.display()))?;
        eprintln!("pvnet bench: wrote {}", p.display());
    }
    let bad: Vec<&String> = configs
        .iter()
        .filter(|c| {
            report["configs"][c.as_str()]["errors"]
                .as_array()
                .is_some_and(|e| !e.is_empty())
        })
        .collect();
    if !bad.is_empty() {
        bail!("errors in {bad:?}: see the report");
    }
    Ok(())
}

/// A child process that is killed when dropped.
struct Guard(Option<Child>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn pinned(mut cmd: Command, cpu_n: usize) -> Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: only async-signal-safe calls (sched_setaffinity, prctl) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu_n, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd
}

fn run_one(config: &str, dur: f64, rr_dur: f64, msg_size: usize, tsc_hz: u64) -> Result<Sample> {
    let cfg = daemon_config(config);
    let mode = cfg.mode;
    let info = crate::start_daemon(&cfg, false)?;
    let res = measure(&info, mode, dur, rr_dur, msg_size, tsc_hz);
    let down = crate::down(&info.id);
    let s = res?;
    down?;
    Ok(s)
}

fn measure(
    info: &RunInfo,
    mode: Mode,
    dur: f64,
    rr_dur: f64,
    msg_size: usize,
    tsc_hz: u64,
) -> Result<Sample> {
    let exe = std::env::current_exe()?;
    let (rx_ns, rx_addr) = match mode {
        Mode::Linux => (info.dd_ns.clone(), info.dd_addr.clone()),
        Mode::Xen => (info.guest_ns[0].clone(), info.guest_addrs[0].clone()),
    };
    let rx = Netns::open(&rx_ns)?;
    let remote = Netns::open(&info.remote_ns)?;
    let mut s = Sample::default();

    // Stream.
    let server = start_receiver(&exe, &rx, &remote, &rx_addr)?;
    let server_pid = server.0.as_ref().map(|c| c.id() as i32).unwrap_or(0);
    let mut guest_pids: Vec<i32> = info.guest_pids.clone();
    guest_pids.push(server_pid);
    let mut all = guest_pids.clone();
    all.push(info.pid);
    let before = cpu::sample(RX_CPU, &all)?;
    let out = pinned(remote.command(&exe), TX_CPU)
        .args([
            "perf",
            "stream",
            &rx_addr,
            "--duration",
            &dur.to_string(),
            "--msg-size",
            &msg_size.to_string(),
        ])
        .stderr(Stdio::piped())
        .output()?;
    let after = cpu::sample(RX_CPU, &all)?;
    drop(server);
    let text = String::from_utf8_lossy(&out.stdout);
    match serde_json::from_str::<serde_json::Value>(text.trim()) {
        Ok(v) => {
            s.bytes = v["receiver"]["bytes"].as_u64().unwrap_or(0);
            s.mismatches = v["receiver"]["mismatches"].as_u64().unwrap_or(0);
            s.throughput_mbps = v["receiver"]["mbps"].as_f64().unwrap_or(0.0);
            if v["sent"].as_u64() != Some(s.bytes) || s.mismatches != 0 {
                s.errors.push(format!(
                    "stream not intact: sent {}, verified {}, {} mismatches",
                    v["sent"], s.bytes, s.mismatches
                ));
            }
        }
        Err(_) => s.errors.push(format!(
            "stream failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
    let d = cpu::delta(&before, &after);
    s.cpu_busy_ns = d.busy_ns;
    let pid_ns = |p: i32| {
        d.pid_ns
            .iter()
            .find(|(q, _)| *q == p)
            .map(|(_, n)| *n)
            .unwrap_or(0)
    };
    if mode == Mode::Xen {
        s.guest_ns = guest_pids.iter().map(|p| pid_ns(*p)).sum();
        s.driver_ns = d.busy_ns.saturating_sub(s.guest_ns);
    }
    let cpb = |ns: u64| {
        if s.bytes == 0 {
            0.0
        } else {
            ns as f64 * tsc_hz as f64 / 1e9 / s.bytes as f64
        }
    };
    s.cycles_per_byte_total = cpb(s.cpu_busy_ns);
    s.cycles_per_byte_driver = cpb(s.driver_ns);
    s.cycles_per_byte_guest = cpb(s.guest_ns);
    if mode == Mode::Xen {
        s.stat = crate::daemon::admin_call(&info.id, &crate::daemon::AdminRequest::Stat)
            .unwrap_or_default();
        let l = &s.stat["lro"];
        s.lro_rate = l["lro_rate"].as_f64().unwrap_or(0.0);
        s.flush_latency_p50_us = l["flush_latency"]["p50_us"].as_f64().unwrap_or(0.0);
        s.flush_latency_p99_us = l["flush_latency"]["p99_us"].as_f64().unwrap_or(0.0);
    }

    // Request/response.
    let server = start_receiver(&exe, &rx, &remote, &rx_addr)?;
    let out = pinned(remote.command(&exe), TX_CPU)
        .args(["perf", "rr", &rx_addr, "--duration", &rr_dur.to_string()])
        .stderr(Stdio::piped())
        .output()?;
    drop(server);
    match serde_json::from_slice::<serde_json::Value>(&out.stdout) {
        Ok(v) => {
            s.rr_tps = v["tps"].as_f64().unwrap_or(0.0);
            s.rr_p50_us = v["p50_us"].as_f64().unwrap_or(0.0);
            s.rr_p99_us = v["p99_us"].as_f64().unwrap_or(0.0);
            if v["errors"].as_u64().unwrap_or(0) > 0 {
                s.errors.push(format!("rr reported {} errors", v["errors"]));
            }
        }
        Err(_) => s.errors.push(format!(
            "rr failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
    Ok(s)
}

/// Starts a one-test `perf server` in the receiver's namespace on the receiving CPU and waits
/// until the remote host can reach it.
fn start_receiver(
    exe: &std::path::Path,
    rx: &Netns,
    remote: &Netns,
    rx_addr: &str,
) -> Result<Guard> {
    let server = Guard(Some(
        pinned(rx.command(exe), RX_CPU)
            .args([
                "perf",
                "server",
                "--once",
                "--bind",
                &format!("0.0.0.0:{PORT}"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    ));
    wait_listening(remote, rx_addr)?;
    Ok(server)
}

/// Waits until a TCP connect from the remote host to the receiver succeeds.
fn wait_listening(remote: &Netns, addr: &str) -> Result<()> {
    let target: std::net::SocketAddr = format!("{addr}:{PORT}").parse()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // A probe connection is accepted and closed by the server as a failed hello; `--once`
        // servers keep serving after a bad hello.
        let ok = remote.run(move || {
            std::net::TcpStream::connect_timeout(&target, Duration::from_millis(200)).is_ok()
        })?;
        if ok {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(anyhow!("the receiver at {target} did not start listening"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[allow(clippy::too_many_arguments)]
fn summarize(
    configs: &[String],
    samples: &BTreeMap<String, Vec<Sample>>,
    tsc_hz: u64,
    reps: usize,
    dur: f64,
    rr_dur: f64,
    msg_size: usize,
) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for c in configs {
        let v = &samples[c];
        let m = |f: &dyn Fn(&Sample) -> f64| median(v.iter().map(f).collect());
        let errors: Vec<String> = v.iter().flat_map(|s| s.errors.clone()).collect();
        out.insert(
            c.clone(),
            json!({
                "throughput_mbps": m(&|s| s.throughput_mbps),
                "throughput_mbps_min": v.iter().map(|s| s.throughput_mbps).fold(f64::INFINITY, f64::min),
                "throughput_mbps_max": v.iter().map(|s| s.throughput_mbps).fold(0.0, f64::max),
                "rr_tps": m(&|s| s.rr_tps),
                "rr_p50_us": m(&|s| s.rr_p50_us),
                "rr_p99_us": m(&|s| s.rr_p99_us),
                "cycles_per_byte": {
                    "total": m(&|s| s.cycles_per_byte_total),
                    "driver": if c == "linux" { serde_json::Value::Null } else { json!(m(&|s| s.cycles_per_byte_driver)) },
                    "guest": if c == "linux" { serde_json::Value::Null } else { json!(m(&|s| s.cycles_per_byte_guest)) },
                },
                "lro_rate": m(&|s| s.lro_rate),
                "flush_latency_us": { "p50": m(&|s| s.flush_latency_p50_us), "p99": m(&|s| s.flush_latency_p99_us) },
                "bytes_verified": v.iter().map(|s| s.bytes).sum::<u64>(),
                "errors": errors,
                "samples": v,
            }),
        );
    }
    json!({
        "machine": { "cpus": pvnet_testbed::cpu::nr_cpus(), "tsc_hz": tsc_hz },
        "parameters": { "reps": reps, "stream_seconds": dur, "rr_seconds": rr_dur, "msg_size": msg_size, "rx_cpu": RX_CPU, "tx_cpu": TX_CPU },
        "configs": out,
    })
}

fn print_table(configs: &[String], r: &serde_json::Value) {
    let c = &r["configs"];
    let get = |cfg: &str, path: &[&str]| -> Option<f64> {
        let mut v = &c[cfg];
        for p in path {
            v = &v[*p];
        }
        v.as_f64()
    };
    print!("{:<28}", "metric");
    for cfg in configs {
        print!("{cfg:>12}");
    }
    println!();
    let rows: [(&str, &[&str]); 9] = [
        ("throughput (Mbit/s)", &["throughput_mbps"]),
        ("TCP_RR (trans/s)", &["rr_tps"]),
        ("cycles/byte total", &["cycles_per_byte", "total"]),
        ("cycles/byte driver domain", &["cycles_per_byte", "driver"]),
        ("cycles/byte guest", &["cycles_per_byte", "guest"]),
        ("RR p99 latency (us)", &["rr_p99_us"]),
        ("LRO rate (segments/aggr.)", &["lro_rate"]),
        ("flush latency p50 (us)", &["flush_latency_us", "p50"]),
        ("flush latency p99 (us)", &["flush_latency_us", "p99"]),
    ];
    let has_linux = configs.iter().any(|x| x == "linux");
    for (name, path) in rows {
        print!("{name:<28}");
        for cfg in configs {
            match get(cfg, path) {
                Some(x) => print!("{x:>12.2}"),
                None => print!("{:>12}", "NA"),
            }
        }
        println!();
        if has_linux
            && (path[0] != "cycles_per_byte" || path[1] == "total")
            && path[0] != "rr_p99_us"
            && path[0] != "lro_rate"
            && path[0] != "flush_latency_us"
        {
            print!("{:<28}", "  vs linux (%)");
            let base = get("linux", path).unwrap_or(0.0);
            for cfg in configs {
                match get(cfg, path) {
                    Some(x) if base > 0.0 => print!("{:>12.1}", 100.0 * x / base),
                    _ => print!("{:>12}", "NA"),
                }
            }
            println!();
        }
    }
}
