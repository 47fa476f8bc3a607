//! `pvnet`: the Xen PV network path in user space, and its benchmark.

mod bench;
mod daemon;
mod relay;
mod rundir;

use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::{Parser, Subcommand};
use daemon::{AdminRequest, Daemon, DaemonConfig, Mode};

/// Every packet the driver domain takes from the wire is a fresh buffer, freed once it has
/// been copied into a guest: glibc's allocator gave that churn about 4 % of the receiving CPU
/// (its free lists, and page faults after it trimmed the heap).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "pvnet",
    version,
    about = "The Xen paravirtual network path in user space, measured"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start a remote host, a driver domain and guests; runs until `pvnet down` (needs root).
    Up {
        /// Guests to start.
        #[arg(long, default_value_t = 1)]
        guests: usize,
        /// `xen` (the PV path), `linux` (no virtualization: the driver domain's veth end gets
        /// 10.77.0.2) or `relay` (the daemon writes each guest's packets straight into its TAP:
        /// the packet ring and the TAP without the Xen machinery, this emulation's floor).
        #[arg(long, value_enum, default_value_t = Mode::Xen)]
        mode: Mode,
        /// Run id (default: a fresh one); names are pvnet-<id>-<role>.
        #[arg(long)]
        id: Option<String>,
        /// Frames per physical-port poll (NAPI budget), 1 to 512.
        #[arg(long, default_value_t = daemon::DEFAULT_BUDGET)]
        budget: usize,
        /// Slots of the physical port's packet ring (256 to 65536; 1664 bytes each). Fewer slots
        /// stay warmer in the cache, but the kernel drops what arrives while they are full.
        #[arg(long, default_value_t = pvnet_pnic::DEFAULT_FRAME_NR)]
        ring_frames: u32,
        /// Extra domains served to an external frontend through a socket (for tests).
        #[arg(long, default_value_t = 0, hide = true)]
        attach: usize,
        /// Stay in the foreground instead of detaching.
        #[arg(long)]
        foreground: bool,
        /// CPU for the driver domain and guests (the receiving CPU); -1 = no pinning.
        #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
        cpu: i64,
        /// Leave GRO on on the physical port's veth end (off by default; `linux-gro` in bench).
        #[arg(long)]
        gro: bool,
        /// The CPU your traffic sender runs on: the remote host's input (ACKs) is steered
        /// there, so the sender's work is not charged to the receiving CPU.
        #[arg(long)]
        sender_cpu: Option<usize>,
        #[command(flatten)]
        lro: LroArgs,
    },
    /// Change the data path of a running system: aggregation policy, representation, BO.
    Set {
        #[arg(long)]
        id: Option<String>,
        /// The physical port (default: the run's only one).
        #[arg(long)]
        port: Option<String>,
        /// `off`, or a flush policy: `poll`, `every:N`, `timeout:USEC`, `adaptive`.
        #[arg(long)]
        lro: Option<String>,
        /// Aggregate representation: `skb` (chain of receive buffers) or `page` (fragments).
        #[arg(long)]
        lro_mode: Option<String>,
        /// Bridge optimization: forward skb-mode aggregates without linearizing them.
        #[arg(long, value_parser = on_off)]
        bo: Option<bool>,
    },
    /// Stop a run and remove everything it created.
    Down {
        #[arg(long)]
        id: Option<String>,
        /// Stop every run.
        #[arg(long)]
        all: bool,
    },
    /// Counters per port and per vif.
    Stat {
        #[arg(long)]
        id: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Print where a run's namespaces and addresses are.
    Info {
        #[arg(long)]
        id: Option<String>,
    },
    /// Run a command inside one of a run's namespaces (`remote`, `dd`, `g0`, ...).
    Exec {
        #[arg(long)]
        id: Option<String>,
        /// Role: remote, dd, g0, g1, ...
        role: String,
        #[arg(trailing_var_arg = true, required = true)]
        cmd: Vec<String>,
    },
    /// The traffic tool: a TCP stream and a TCP request/response test (netperf-like).
    Perf {
        #[command(subcommand)]
        cmd: PerfCmd,
    },
    /// Run configurations side by side and report throughput, TCP_RR and cycles per byte.
    Bench(bench::BenchArgs),
    /// (internal) the driver-domain daemon in the foreground.
    #[command(hide = true)]
    Daemon {
        #[arg(long)]
        config: String,
    },
    /// (internal) a guest process on an inherited control socket.
    #[command(hide = true)]
    GuestRun {
        #[arg(long)]
        ctl_fd: i32,
    },
}

/// Aggregation settings of `up`.
#[derive(clap::Args, Clone, Debug)]
struct LroArgs {
    /// Receive aggregation at the physical port: `off`, or a flush policy: `poll` (every
    /// poll, seed 000's LRO), `every:N` (every Nth poll, DA), `timeout:USEC`, `adaptive`.
    #[arg(long, default_value = "off")]
    lro: String,
    /// Aggregate representation: `skb` (chain of receive buffers) or `page` (fragments).
    #[arg(long, default_value = "skb")]
    lro_mode: String,
    /// Bridge optimization: forward skb-mode aggregates without linearizing them.
    #[arg(long)]
    bo: bool,
    /// Whether guests advertise GSO (`off`: aggregates are cut back into segments for them).
    #[arg(long, value_parser = on_off, default_value = "on", action = clap::ArgAction::Set)]
    guest_gso: bool,
}

fn on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" | "1" | "true" | "yes" => Ok(true),
        "off" | "0" | "false" | "no" => Ok(false),
        _ => Err(format!("expected on or off, got {s:?}")),
    }
}

fn parse_lro_mode(s: &str) -> Result<pvnet_dd::lro::Mode> {
    s.parse()
        .map_err(|e| anyhow!("--lro-mode {s:?}: {e} (expected skb or page)"))
}

impl LroArgs {
    fn settings(&self) -> Result<Option<daemon::LroSettings>> {
        let mode = parse_lro_mode(&self.lro_mode)?;
        if self.lro == "off" {
            return Ok(None);
        }
        let policy = self
            .lro
            .parse()
            .map_err(|e| anyhow!("--lro {:?}: {e}", self.lro))?;
        Ok(Some(daemon::LroSettings { policy, mode }))
    }
}

#[derive(Subcommand)]
enum PerfCmd {
    /// Accept connections and serve stream and request/response tests.
    Server {
        #[arg(long, default_value = "0.0.0.0:5201")]
        bind: SocketAddr,
        /// Exit after the first test.
        #[arg(long)]
        once: bool,
    },
    /// Send a verified byte stream; prints the receiver's report as JSON.
    Stream {
        to: String,
        #[arg(long, default_value_t = 5201)]
        port: u16,
        /// Seconds.
        #[arg(long, default_value_t = 10.0)]
        duration: f64,
        /// Bytes per write.
        #[arg(long, default_value_t = 65536)]
        msg_size: usize,
        /// Stop after this many bytes.
        #[arg(long)]
        bytes: Option<u64>,
        /// Pace the sender at this many Mbit/s (a wire of that speed).
        #[arg(long)]
        pace: Option<u64>,
    },
    /// ICMP echo; prints sent/received/RTTs as JSON; fails unless every echo is answered.
    Ping {
        to: std::net::Ipv4Addr,
        #[arg(long, default_value_t = 3)]
        count: u32,
    },
    /// Request/response transactions; prints rate and latency percentiles as JSON.
    Rr {
        to: String,
        #[arg(long, default_value_t = 5201)]
        port: u16,
        #[arg(long, default_value_t = 10.0)]
        duration: f64,
        #[arg(long, default_value_t = 1)]
        req_size: usize,
        #[arg(long, default_value_t = 1)]
        rsp_size: usize,
        /// Keep one connection and run slices on demand: each line on stdin is a slice length
        /// in seconds, answered by one JSON line; end of input ends it (`--duration` is then
        /// only the planned total). For a bench that switches the path between slices.
        #[arg(long)]
        stepped: bool,
    },
}

fn need_root(what: &str) -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!("`pvnet {what}` needs root (network namespaces, veth, TAP and raw sockets): run it with sudo");
    }
    Ok(())
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr> {
    (host, port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| anyhow!("cannot resolve {host}"))
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("pvnet: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.cmd {
        Cmd::Up {
            guests,
            mode,
            id,
            budget,
            ring_frames,
            attach,
            foreground,
            cpu,
            gro,
            sender_cpu,
            lro,
        } => {
            let settings = lro.settings()?;
            need_root("up")?;
            if guests == 0 && mode != Mode::Linux && attach == 0 {
                bail!("--guests must be at least 1");
            }
            if mode == Mode::Relay && attach > 0 {
                bail!("--attach needs --mode xen (a relayed guest has no frontend)");
            }
            if mode == Mode::Relay && !lro.guest_gso {
                bail!("--guest-gso off needs --mode xen (a relayed guest's TAP takes GSO packets)");
            }
            daemon::check_budget(budget)?;
            daemon::check_ring_frames(ring_frames)?;
            let cfg = DaemonConfig {
                id: match id {
                    Some(i) => pvnet_testbed::RunId::parse(&i)?.as_str().to_string(),
                    None => pvnet_testbed::RunId::new().as_str().to_string(),
                },
                mode,
                guests,
                attach,
                budget,
                cpu: usize::try_from(cpu).ok(),
                rps: true,
                sender_cpu,
                lro: settings,
                bo: lro.bo,
                guest_gso: lro.guest_gso,
                gro,
                ring_frames,
            };
            if mode == Mode::Linux && (settings.is_some() || lro.bo) {
                bail!("--lro and --bo need the driver domain (--mode xen or relay)");
            }
            if rundir::run_dir(&cfg.id).exists() {
                bail!(
                    "a run with id {} exists already (see `pvnet info --id {}`)",
                    cfg.id,
                    cfg.id
                );
            }
            if foreground {
                return daemon_main(cfg, true);
            }
            let info = start_daemon(&cfg, true)?;
            print_info(&info);
            Ok(())
        }
        Cmd::Down { id, all } => {
            need_root("down")?;
            let ids = if all {
                rundir::list_runs()
            } else {
                vec![rundir::pick_run(id.as_deref())?]
            };
            for id in ids {
                let r = down_ending(&id)?;
                for l in r.lines() {
                    println!("pvnet: {l}");
                }
                let n = r.ended.len();
                match n {
                    0 => println!("pvnet: run {id} is down"),
                    _ => println!(
                        "pvnet: run {id} is down (ended {n} process{} of its domains)",
                        if n == 1 { "" } else { "es" }
                    ),
                }
            }
            Ok(())
        }
        Cmd::Stat { id, json } => {
            need_root("stat")?;
            let id = rundir::pick_run(id.as_deref())?;
            let v = daemon::admin_call(&id, &AdminRequest::Stat)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                print_stat(&v);
            }
            Ok(())
        }
        Cmd::Set {
            id,
            port,
            lro,
            lro_mode,
            bo,
        } => {
            let mode = lro_mode.as_deref().map(parse_lro_mode).transpose()?;
            if let Some(l) = lro.as_deref().filter(|l| *l != "off") {
                l.parse::<pvnet_dd::lro::Policy>()
                    .map_err(|e| anyhow!("--lro {l:?}: {e}"))?;
            }
            if lro.is_none() && mode.is_none() && bo.is_none() {
                bail!("nothing to set: give --lro, --lro-mode or --bo");
            }
            need_root("set")?;
            let id = rundir::pick_run(id.as_deref())?;
            let v = daemon::admin_call(
                &id,
                &AdminRequest::Set(daemon::SetRequest {
                    port,
                    lro,
                    mode,
                    bo,
                }),
            )?;
            if v["ok"].as_bool() != Some(true) {
                bail!("{}", v["error"].as_str().unwrap_or("the daemon refused"));
            }
            let st = &v["settings"];
            println!(
                "pvnet: {}: lro {}, mode {}, bo {}",
                st["port"].as_str().unwrap_or("?"),
                st["lro"].as_str().unwrap_or("?"),
                st["mode"].as_str().unwrap_or("?"),
                if st["bo"].as_bool() == Some(true) {
                    "on"
                } else {
                    "off"
                }
            );
            Ok(())
        }
        Cmd::Info { id } => {
            let id = rundir::pick_run(id.as_deref())?;
            print_info(&rundir::read_info(&id)?);
            Ok(())
        }
        Cmd::Exec { id, role, cmd } => {
            need_root("exec")?;
            let id = rundir::pick_run(id.as_deref())?;
            // A process started into a run that is going or gone would hold a namespace that
            // no `down` can name any more.
            let info = rundir::read_info(&id).map_err(|_| {
                anyhow!("run {id} is not up (no daemon has reported ready); `pvnet down --id {id}` removes what is left")
            })?;
            if !rundir::pid_alive(info.pid) {
                bail!(
                    "run {id} is not up: its daemon (pid {}) is gone; `pvnet down --id {id}` removes what is left",
                    info.pid
                );
            }
            let ns = pvnet_testbed::Netns::open(&format!("pvnet-{id}-{role}"))
                .with_context(|| format!("no namespace for role {role} in run {id}"))?;
            let err = ns.command(&cmd[0]).args(&cmd[1..]).exec();
            Err(anyhow!("exec {}: {err}", cmd[0]))
        }
        Cmd::Perf { cmd } => perf(cmd),
        Cmd::Bench(args) => bench::run(args),
        Cmd::Daemon { config } => {
            let cfg: DaemonConfig = serde_json::from_str(&config).context("daemon config")?;
            daemon_main(cfg, false)
        }
        Cmd::GuestRun { ctl_fd } => {
            if ctl_fd < 3 {
                bail!("--ctl-fd must name an inherited descriptor");
            }
            // SAFETY: the daemon placed the guest's control socket at this descriptor number
            // for us (dup2 before exec); nothing else in this process owns it.
            let sock = unsafe { OwnedFd::from_raw_fd(ctl_fd) };
            pvnet_guest::run::run_guest(sock)
        }
    }
}

/// Runs the daemon in this process: start, write info, serve, tear down.
fn daemon_main(cfg: DaemonConfig, print: bool) -> Result<()> {
    let id = cfg.id.clone();
    let mut d = match Daemon::start(cfg) {
        Ok(d) => d,
        Err(e) => {
            let _ = pvnet_testbed::cleanup_run(&id);
            // A parent waiting for us reads the log and removes the directory.
            if print {
                let _ = std::fs::remove_dir_all(rundir::run_dir(&id));
            }
            return Err(e);
        }
    };
    let info = d.info();
    let tmp = rundir::info_path(&id).with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_string_pretty(&info)?)?;
    std::fs::rename(&tmp, rundir::info_path(&id))?;
    if print {
        print_info(&info);
    }
    let r = d.run();
    d.shutdown();
    r
}

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
fn down_ending(id: &str) -> Result<pvnet_testbed::procs::EndReport> {
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
    if polite && daemon::admin_call(id, &AdminRequest::Down).is_ok() {
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
    let _ = std::fs::remove_dir_all(rundir::run_dir(id));
    Ok(report)
}

fn print_info(i: &rundir::RunInfo) {
    println!("pvnet run {} ({} mode), daemon pid {}", i.id, i.mode, i.pid);
    println!("  remote host   {:<24} {}", i.remote_ns, i.remote_addr);
    println!(
        "  driver domain {:<24} {} (own stack), physical port {}",
        i.dd_ns, i.dd_addr, i.pnic_if
    );
    for (k, (ns, a)) in i.guest_ns.iter().zip(&i.guest_addrs).enumerate() {
        println!("  guest {k}       {ns:<24} {a}");
    }
    for (d, p) in &i.attach {
        println!("  domain {d} waits for an external frontend at {p}");
    }
    println!(
        "  e.g.  sudo ip netns exec {} iperf3 -s",
        i.guest_ns.first().unwrap_or(&i.dd_ns)
    );
    println!(
        "        sudo pvnet stat --id {}      sudo pvnet down --id {}",
        i.id, i.id
    );
}

fn print_stat(v: &serde_json::Value) {
    println!(
        "run {}  mode {}  up {:.1} s",
        v["id"].as_str().unwrap_or("?"),
        v["mode"],
        v["uptime_s"].as_f64().unwrap_or(0.0)
    );
    let flat = |prefix: &str, o: &serde_json::Value| {
        if let Some(m) = o.as_object() {
            let parts: Vec<String> = m
                .iter()
                .filter(|(_, v)| v.as_u64() != Some(0) && !v.is_object() && !v.is_null())
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            println!("  {prefix:<9} {}", parts.join(" "));
        }
    };
    flat("daemon", &v["daemon"]);
    flat("pnic", &v["pnic"]);
    flat("grant", &v["grant"]);
    flat("bridge", &v["bridge"]);
    flat("settings", &v["settings"]);
    if v["lro"].is_object() {
        flat("lro", &v["lro"]);
        flat("  flush", &v["lro"]["flush"]);
        flat("  latency", &v["lro"]["flush_latency"]);
    }
    if let Some(vifs) = v["vifs"].as_array() {
        for vif in vifs {
            println!(
                "  vif {}  {}  {}{}",
                vif["domid"],
                vif["mac"].as_str().unwrap_or(""),
                vif["state"].as_str().unwrap_or(""),
                vif["fatal"]
                    .as_str()
                    .map(|f| format!(" ({f})"))
                    .unwrap_or_default()
            );
            flat("  netback", &vif["netback"]);
            flat("  netfront", &vif["netfront"]);
        }
    }
    for r in v["relay"].as_array().into_iter().flatten() {
        println!(
            "  relay {}  {}",
            r["domid"],
            r["mac"].as_str().unwrap_or("")
        );
        flat("  tap", &r["stats"]);
    }
}

fn perf(cmd: PerfCmd) -> Result<()> {
    use pvnet_perf::{rr, server, stream};
    match cmd {
        PerfCmd::Server { bind, once } => {
            server::serve(&server::ServerOpts { bind, once }, |ev| match ev {
                server::ServerEvent::Stream(r) => {
                    println!("{}", serde_json::to_string(&r).unwrap_or_default())
                }
                server::ServerEvent::Rr(r) => println!(
                    "{{\"rr_transactions\":{},\"seconds\":{}}}",
                    r.transactions, r.seconds
                ),
                server::ServerEvent::Error { peer, message } => {
                    eprintln!("pvnet perf: {peer:?}: {message}")
                }
            })
        }
        PerfCmd::Stream {
            to,
            port,
            duration,
            msg_size,
            bytes,
            pace,
        } => {
            if msg_size == 0 || duration <= 0.0 {
                bail!("--msg-size and --duration must be positive");
            }
            let opts = stream::StreamOpts {
                msg_size,
                duration: Duration::from_secs_f64(duration),
                max_bytes: bytes,
                pace_mbps: pace,
            };
            if pace == Some(0) {
                bail!("--pace must be positive (Mbit/s)");
            }
            let out = stream::stream_send_outcome(resolve(&to, port)?, &opts)?;
            println!(
                "{}",
                serde_json::json!({"sent": out.sent, "receiver": out.report})
            );
            if out.report.bytes != out.sent || out.report.mismatches != 0 {
                bail!(
                    "stream not intact: sent {} bytes, receiver verified {} with {} mismatches",
                    out.sent,
                    out.report.bytes,
                    out.report.mismatches
                );
            }
            Ok(())
        }
        PerfCmd::Ping { to, count } => {
            let r = pvnet_perf::ping::ping(
                to,
                count,
                Duration::from_millis(200),
                Duration::from_secs(2),
            )?;
            println!("{}", serde_json::to_string(&r)?);
            if r.received != r.sent {
                bail!(
                    "{} of {} echo requests to {to} were not answered",
                    r.sent - r.received,
                    r.sent
                );
            }
            Ok(())
        }
        PerfCmd::Rr {
            to,
            port,
            duration,
            req_size,
            rsp_size,
            stepped,
        } => {
            if stepped {
                let mut session = rr::RrSession::connect(
                    resolve(&to, port)?,
                    req_size,
                    rsp_size,
                    Duration::from_secs_f64(duration.max(0.0)),
                )?;
                rr::rr_steps(&mut session, std::io::stdin().lock(), std::io::stdout())?;
                return Ok(());
            }
            let opts = rr::RrOpts {
                duration: Duration::from_secs_f64(duration),
                req_size,
                rsp_size,
            };
            let r = rr::rr_client(resolve(&to, port)?, &opts)?;
            println!("{}", serde_json::to_string(&r)?);
            Ok(())
        }
    }
}
