//! The standard pvnet testbed: a remote host, a driver domain and guests, each a network
//! namespace, with one veth pair as the wire between the remote host and the driver domain.

use std::net::Ipv4Addr;

use anyhow::{bail, Context};

use crate::ethtool::{self, Feature};
use crate::link;
use crate::netns::{self, list_netns, Netns};
use crate::procs::{self, EndReport, NsProcess};
use crate::runid::RunId;
use crate::sys;
use crate::Result;

/// Prefix length of the testbed subnet 10.77.0.0/24.
pub const SUBNET_PREFIX: u8 = 24;

/// The remote host's address, 10.77.0.1.
pub fn remote_addr() -> Ipv4Addr {
    Ipv4Addr::new(10, 77, 0, 1)
}

/// The driver domain's own stack (or the native receiver in the `linux` configuration),
/// 10.77.0.2.
pub fn dd_addr() -> Ipv4Addr {
    Ipv4Addr::new(10, 77, 0, 2)
}

/// Guests the address plan has room for: 10.77.0.10 to 10.77.0.254.
pub const MAX_GUESTS: usize = 245;

/// Guest `i`'s address, 10.77.0.(10+i). Panics past 10.77.0.254.
pub fn guest_addr(i: usize) -> Ipv4Addr {
    assert!(i < MAX_GUESTS, "guest index {i} out of range");
    Ipv4Addr::new(10, 77, 0, (10 + i) as u8)
}

/// Guest `i`'s MAC address, 02:70:76:00:00:(10+i) (locally administered, unicast).
pub fn guest_mac(i: usize) -> [u8; 6] {
    assert!(i < MAX_GUESTS, "guest index {i} out of range");
    [0x02, 0x70, 0x76, 0x00, 0x00, (10 + i) as u8]
}

/// Suffix of the remote host's veth end (`pv{id}r`).
pub const REMOTE_IF_SUFFIX: &str = "r";
/// Suffix of the driver domain's veth end, its physical port (`pv{id}p`).
pub const DD_IF_SUFFIX: &str = "p";

/// The root qdisc of the remote host's veth end.
pub const WIRE_QDISC: &str = "pfifo_fast";

/// Makes the NAPI instances of `ifname` (in `ns`) kernel threads and pins them to `cpu`
/// (when given), under `SCHED_FIFO` ([`crate::cpu::NAPI_FIFO_PRIORITY`]): a NIC's NAPI runs in
/// softirq, ahead of every task, and its thread must not wait behind them (on a loaded CPU a
/// plain thread made TCP_RR 10–30 times slower). Waits up to a second for the threads to
/// appear, and returns their pids. Threads of the same name that existed before (an interface
/// of that name in another namespace: every guest's TAP is `eth0`) are left alone.
pub fn pin_napi_threads(ns: &Netns, ifname: &str, cpu: Option<usize>) -> Result<Vec<i32>> {
    let before = sys::napi_threads(ifname)?;
    sys::set_napi_threaded(ns, ifname)?;
    let t0 = std::time::Instant::now();
    loop {
        let mut pids = sys::napi_threads(ifname)?;
        pids.retain(|p| !before.contains(p));
        if !pids.is_empty() {
            for &p in &pids {
                if let Some(cpu) = cpu {
                    crate::cpu::pin_pid(p, cpu)?;
                }
                crate::cpu::set_fifo(p, crate::cpu::NAPI_FIFO_PRIORITY)?;
            }
            return Ok(pids);
        }
        if t0.elapsed() > std::time::Duration::from_secs(1) {
            bail!("no napi/{ifname}-* kernel thread appeared after enabling threaded NAPI");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// What to build.
#[derive(Clone, Debug)]
pub struct TestbedConfig {
    /// Names everything of this run.
    pub id: RunId,
    /// Number of guest namespaces.
    pub guests: usize,
    /// MTU of both veth ends.
    pub mtu: u32,
    /// RPS on the driver domain's veth end steers receive work to this CPU.
    pub rps_cpu: Option<usize>,
    /// GRO on the driver domain's veth end. Off by default: a driver domain must see the
    /// frames as they came off the wire, and `linux` is the LRO paper's native baseline (GRO off);
    /// on for `linux-gro`, today's native anchor.
    pub gro: bool,
    /// With `gro`: the largest packet GRO may build on the driver domain's veth end
    /// (`gro_max_size`; None leaves the kernel's default, 64 KiB). Port GRO caps it at what a
    /// slot of the port's packet ring holds.
    pub gro_max_size: Option<u32>,
    /// RPS on the remote host's veth end steers its input (the ACKs, and the new data its TCP
    /// sends in reply) to this CPU, the sender's: without it a veth runs the peer's input in
    /// the transmitting thread, and the sender's work is charged to the receiving CPU.
    pub remote_rps_cpu: Option<usize>,
}

impl Default for TestbedConfig {
    fn default() -> Self {
        TestbedConfig {
            id: RunId::new(),
            guests: 1,
            mtu: 1500,
            rps_cpu: Some(0),
            gro: false,
            gro_max_size: None,
            remote_rps_cpu: None,
        }
    }
}

/// A running testbed. [`Testbed::teardown`] (also run on drop) ends every process in its
/// namespaces (see [`procs`]) and removes the namespace names; the namespaces and the veth pair
/// vanish once nothing refers to them any more (the `Netns` fds held here are closed when the
/// `Testbed` is dropped).
#[derive(Debug)]
pub struct Testbed {
    /// The run id.
    pub id: RunId,
    /// The remote host.
    pub remote: Netns,
    /// The driver domain.
    pub dd: Netns,
    /// One namespace per guest.
    pub guests: Vec<Netns>,
    /// The remote host's veth end (in `remote`), with `remote_addr()/24`.
    pub remote_if: String,
    /// The driver domain's veth end (in `dd`): its physical port, no address.
    pub dd_if: String,
    /// The configuration it was built with.
    pub config: TestbedConfig,
    torn_down: bool,
}

/// What `create` made so far, for rollback.
#[derive(Default)]
struct Progress {
    ns: Vec<String>,
    root_links: Vec<String>,
}

impl Progress {
    fn rollback(&self) {
        for l in &self.root_links {
            if link::link_exists(l) {
                let _ = link::delete_link(l);
            }
        }
        for n in self.ns.iter().rev() {
            let _ = netns::delete_by_name(n);
        }
    }
}

fn lo_up(ns: &Netns) -> Result<()> {
    ns.run(|| link::set_up("lo", true))?
        .with_context(|| format!("bringing lo up in {}", ns.name()))
}

impl Testbed {
    /// Builds the testbed. On any error, everything created so far is removed first.
    ///
    /// The veth pair is created in the calling thread's namespace (normally the root one)
    /// and both ends are moved out of it at once.
    pub fn create(cfg: TestbedConfig) -> Result<Testbed> {
        let mut progress = Progress::default();
        match Self::build(cfg, &mut progress) {
            Ok(tb) => Ok(tb),
            Err(e) => {
                progress.rollback();
                Err(e)
            }
        }
    }

    fn build(cfg: TestbedConfig, progress: &mut Progress) -> Result<Testbed> {
        if cfg.mtu < 68 {
            bail!("MTU {} too small", cfg.mtu);
        }
        for c in [cfg.rps_cpu, cfg.remote_rps_cpu].into_iter().flatten() {
            if c >= crate::cpu::steerable_cpus() {
                bail!("RPS CPU {c} out of range");
            }
        }
        let id = cfg.id.clone();
        let mut mk = |role: &str| -> Result<Netns> {
            let name = id.ns_name(role);
            let ns = Netns::create(&name)?;
            progress.ns.push(name);
            lo_up(&ns)?;
            Ok(ns)
        };
        let remote = mk("remote")?;
        let dd = mk("dd")?;
        let mut guests = Vec::with_capacity(cfg.guests);
        for i in 0..cfg.guests {
            guests.push(mk(&format!("g{i}"))?);
        }

        let remote_if = id.short_link_name(REMOTE_IF_SUFFIX);
        let dd_if = id.short_link_name(DD_IF_SUFFIX);
        progress.root_links.push(remote_if.clone());
        progress.root_links.push(dd_if.clone());
        link::create_veth(&remote_if, &dd_if)?;
        link::set_mtu(&remote_if, cfg.mtu)?;
        link::set_mtu(&dd_if, cfg.mtu)?;
        link::move_to_netns(&remote_if, &remote)?;
        link::move_to_netns(&dd_if, &dd)?;

        remote
            .run(|| -> Result<()> {
                link::add_ipv4(&remote_if, remote_addr(), SUBNET_PREFIX)?;
                // Wire-like frames: MTU-sized and fully checksummed.
                ethtool::set_feature(&remote_if, Feature::Tso, false)?;
                ethtool::set_feature(&remote_if, Feature::Gso, false)?;
                ethtool::set_feature(&remote_if, Feature::TxCsum, false)?;
                // A queue in front of the wire, as a NIC driver has: when the peer's NAPI ring
                // (veth with GRO on) is full, veth stops the queue and the qdisc holds the
                // packet. With veth's default `noqueue` it is dropped (a retransmission).
                link::set_root_qdisc(&remote_if, WIRE_QDISC)?;
                link::set_up(&remote_if, true)
            })?
            .context("configuring the remote host's veth end")?;
        let (gro, gro_max) = (cfg.gro, cfg.gro_max_size);
        dd.run(|| -> Result<()> {
            ethtool::set_feature(&dd_if, Feature::Gro, gro)?;
            if let (true, Some(n)) = (gro, gro_max) {
                link::set_gro_max_size(&dd_if, n)?;
            }
            link::set_up(&dd_if, true)
        })?
        .context("configuring the driver domain's veth end")?;
        if let Some(c) = cfg.rps_cpu {
            sys::set_rps_cpus(&dd, &dd_if, 0, 1u32 << c)
                .context("RPS on the driver domain's veth end")?;
        }
        if gro {
            // With GRO on, veth receives through NAPI, and NAPI runs on the CPU that scheduled
            // it: the sender's. A receiving NIC's NAPI runs on the receiving machine, so the
            // instances become kernel threads pinned to the receiving CPU.
            pin_napi_threads(&dd, &dd_if, cfg.rps_cpu)
                .map(drop)
                .context("threaded NAPI on the driver domain's veth end")?;
        }
        if let Some(c) = cfg.remote_rps_cpu {
            sys::set_rps_cpus(&remote, &remote_if, 0, 1u32 << c)
                .context("RPS on the remote host's veth end")?;
        }

        Ok(Testbed {
            id,
            remote,
            dd,
            guests,
            remote_if,
            dd_if,
            config: cfg,
            torn_down: false,
        })
    }

    /// The `linux` configuration: puts `dd_addr()/24` on the driver domain's veth end so a
    /// receiver in the dd namespace is reached directly.
    pub fn native_addr(&self) -> Result<()> {
        let dd_if = self.dd_if.clone();
        self.dd
            .run(move || link::add_ipv4(&dd_if, dd_addr(), SUBNET_PREFIX))?
            .context("adding the native address in the driver domain")
    }

    /// All namespaces of this testbed.
    pub fn namespaces(&self) -> impl Iterator<Item = &Netns> {
        [&self.remote, &self.dd]
            .into_iter()
            .chain(self.guests.iter())
    }

    /// The namespaces of this testbed as [`procs::end_processes_in`] takes them.
    fn inodes(&self) -> Vec<(u64, String)> {
        self.namespaces()
            .filter_map(|ns| Some((procs::netns_inode(ns.fd()).ok()?, ns.name().to_string())))
            .collect()
    }

    /// Ends every process in this testbed's namespaces (SIGTERM, `grace`, SIGKILL), except
    /// this process and its ancestors. The `Netns` fds held here keep each namespace, and so
    /// its inode, alive meanwhile.
    pub fn end_processes(&self, grace: std::time::Duration) -> Result<EndReport> {
        procs::end_processes_in(&self.inodes(), grace, |_| false)
    }

    /// Ends every process in the namespaces (saying so on stderr, one line each), then removes
    /// every namespace name of this testbed. Idempotent; also run on drop.
    pub fn teardown(&mut self) -> Result<()> {
        if self.torn_down {
            return Ok(());
        }
        let mut first_err = None;
        let mut report = EndReport::default();
        match self.end_processes(procs::DEFAULT_GRACE) {
            Ok(r) => report = r,
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
        for ns in self.namespaces() {
            if let Err(e) = ns.delete() {
                first_err.get_or_insert(e);
            }
        }
        // Whoever entered through an fd opened before the names went.
        match self.end_processes(procs::DEFAULT_GRACE) {
            Ok(r) => report.merge(r),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
        for l in report.lines() {
            eprintln!("pvnet: {}: {l}", self.id.as_str());
        }
        // Belt and braces: anything else named for this run (from a crash, say).
        if let Err(e) = cleanup_run(self.id.as_str()) {
            first_err.get_or_insert(e);
        }
        match first_err {
            None => {
                self.torn_down = true;
                Ok(())
            }
            Some(e) => Err(e),
        }
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

/// What [`teardown_run`] did.
#[derive(Debug, Default)]
pub struct RunTeardown {
    /// The processes it ended (and any it left).
    pub processes: EndReport,
    /// What it removed: namespace names, then link names.
    pub removed: Vec<String>,
}

/// Ends every process in the namespaces `/run/netns/pvnet-{id}-*` (SIGTERM, `grace`, SIGKILL;
/// never this process, its ancestors, or what `spare` picks), then deletes those names, and the
/// run's veth ends if they are still in the calling thread's namespace (a crash between
/// creating and moving them).
///
/// The namespaces are held open from before the first scan until after the last, so their
/// inodes stay theirs. A sweep runs again after the names are gone, for a process that entered
/// through an fd opened before. Every step is tried; the first error is returned.
pub fn teardown_run(
    id: &str,
    grace: std::time::Duration,
    spare: impl Fn(&NsProcess) -> bool,
) -> Result<RunTeardown> {
    let id = RunId::parse(id)?;
    let (names, held, inodes) = run_namespaces(&id);
    let mut first_err = None;
    let mut out = RunTeardown::default();
    match procs::end_processes_in(&inodes, grace, &spare) {
        Ok(r) => out.processes = r,
        Err(e) => {
            first_err.get_or_insert(e);
        }
    }
    for name in names {
        match netns::delete_by_name(&name) {
            Ok(()) => out.removed.push(name),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    match procs::end_processes_in(&inodes, grace, &spare) {
        Ok(r) => out.processes.merge(r),
        Err(e) => {
            first_err.get_or_insert(e);
        }
    }
    drop(held);
    for suffix in [REMOTE_IF_SUFFIX, DD_IF_SUFFIX] {
        let l = id.short_link_name(suffix);
        if link::link_exists(&l) {
            // Deleting one end of a veth removes the other; ignore "already gone".
            if link::delete_link(&l).is_ok() {
                out.removed.push(l);
            }
        }
    }
    match first_err {
        None => Ok(out),
        Some(e) => Err(e),
    }
}

/// The names `/run/netns/pvnet-{id}-*`, the namespaces among them opened (held), and those
/// as [`procs::end_processes_in`] takes them. A name whose bind mount is gone (a half-made
/// namespace) is only a file: it has no process to end.
fn run_namespaces(id: &RunId) -> (Vec<String>, Vec<Netns>, Vec<(u64, String)>) {
    let prefix = format!("pvnet-{}-", id.as_str());
    let names: Vec<String> = list_netns()
        .into_iter()
        .filter(|n| n.starts_with(&prefix))
        .collect();
    let held: Vec<Netns> = names.iter().filter_map(|n| Netns::open(n).ok()).collect();
    let inodes = held
        .iter()
        .filter_map(|ns| Some((procs::netns_inode(ns.fd()).ok()?, ns.name().to_string())))
        .collect();
    (names, held, inodes)
}

/// Ends every process in the namespaces `/run/netns/pvnet-{id}-*` like [`teardown_run`], but
/// leaves the names: for a caller that stops the run's own processes (`spare`) another way
/// afterwards.
pub fn end_run_processes(
    id: &str,
    grace: std::time::Duration,
    spare: impl Fn(&NsProcess) -> bool,
) -> Result<EndReport> {
    let id = RunId::parse(id)?;
    let (_names, held, inodes) = run_namespaces(&id);
    let r = procs::end_processes_in(&inodes, grace, spare);
    drop(held);
    r
}

/// [`teardown_run`] sparing nothing but this process and its ancestors, with the default grace
/// period; says on stderr what it ended, one line each. Returns what it removed (namespace
/// names, then link names).
pub fn cleanup_run(id: &str) -> Result<Vec<String>> {
    let t = teardown_run(id, procs::DEFAULT_GRACE, |_| false)?;
    for l in t.processes.lines() {
        eprintln!("pvnet: {id}: {l}");
    }
    Ok(t.removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        assert_eq!(remote_addr().to_string(), "10.77.0.1");
        assert_eq!(dd_addr().to_string(), "10.77.0.2");
        assert_eq!(guest_addr(0).to_string(), "10.77.0.10");
        assert_eq!(guest_addr(3).to_string(), "10.77.0.13");
        assert_eq!(guest_mac(1), [0x02, 0x70, 0x76, 0, 0, 11]);
        assert_eq!(guest_mac(0)[0] & 0x03, 0x02, "locally administered unicast");
    }
}
