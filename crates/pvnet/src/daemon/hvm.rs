//! The toolstack's HVM domains (Zhang, Li and Guan's NE2000 paper): for each, guest memory, the ioreq page (with the
//! card's registers and the path selector in its device area), two event channels, the device
//! model process in the driver domain's namespace, the HVM guest process in its own namespace,
//! and the device model's network side on the bridge.
//!
//! qemu-dm would put its NIC on a TAP enslaved to the driver domain's kernel bridge; here the
//! bridge lives in the daemon, so the device model gets one end of a `SOCK_SEQPACKET` socketpair
//! (one Ethernet frame per message) and the daemon attaches the other as a bridge port
//! ([`SocketPort`], a [`TapPort`]). The NE2000 has no offloads: what the bridge hands it goes
//! out as plain frames: a GSO packet (from a PV guest's TSO, or an aggregate) is segmented in
//! software and a partial checksum completed, as the kernel does before a device without
//! those features (`validate_xmit_skb`).

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nix::sys::socket::{recv, send, MsgFlags};
use pvnet_dd::datapath::TapPort;
use pvnet_dd::packet::Packet;
use pvnet_hv::ctl;
use pvnet_hv::evtchn::channel_pair;
use pvnet_hv::ioreq::{DeviceState, IoreqPage};
use pvnet_hv::mem::GuestMemory;
use pvnet_hvm::dm::DmStats;
use pvnet_hvm::guest::GuestStats;
use pvnet_hvm::process::{DmBoot, FromDm, FromHvm, HvmBoot, ToDm, ToHvm};
use pvnet_hvm::{HvmShared, SHARED_OFFSET};
use pvnet_ne2000::direct::Path;
use pvnet_testbed::{topology, Netns};
use pvnet_wire::checksum;
use pvnet_wire::vnet::{VirtioNetHdr, VNET_HDR_LEN};
use serde::Serialize;

/// Pages of an HVM guest's memory (the driver's bounce buffer lives in it).
pub const HVM_PAGES: u32 = 64;
/// The vCPU's ioreq event-channel port inside the domain.
pub const IOREQ_PORT: u32 = 1;

/// What the bridge port of a device model did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SocketStats {
    /// Frames written to the device model, their bytes, and writes refused (socket full).
    pub to_dm: u64,
    pub to_dm_bytes: u64,
    pub to_dm_dropped: u64,
    /// GSO packets segmented in software, and the segments they made.
    pub gso_packets: u64,
    pub gso_segments: u64,
    /// Partial checksums completed.
    pub csum_completed: u64,
    /// Packets that could not be segmented or checksummed (dropped).
    pub malformed: u64,
}

/// The daemon's end of a device model's network socket, as a bridge port.
pub struct SocketPort {
    fd: OwnedFd,
    pub stats: SocketStats,
}

impl SocketPort {
    /// Wraps the daemon's end (made non-blocking: the daemon never waits for a device model).
    pub fn new(fd: OwnedFd) -> io::Result<SocketPort> {
        pvnet_hvm::port::set_nonblocking(fd.as_fd())?;
        Ok(SocketPort {
            fd,
            stats: SocketStats::default(),
        })
    }

    fn send_frame(&mut self, frame: &[u8]) -> io::Result<()> {
        loop {
            match send(self.fd.as_raw_fd(), frame, MsgFlags::MSG_NOSIGNAL) {
                Ok(_) => {
                    self.stats.to_dm += 1;
                    self.stats.to_dm_bytes += frame.len() as u64;
                    return Ok(());
                }
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => {
                    self.stats.to_dm_dropped += 1;
                    return Err(e.into());
                }
            }
        }
    }

    /// One plain frame: the packet's bytes with a partial checksum completed.
    fn plain(&mut self, pkt: &Packet) -> io::Result<Vec<u8>> {
        let mut f = pkt.to_vec();
        if pkt.vnet.needs_csum() {
            if checksum::complete_partial(
                &mut f,
                usize::from(pkt.vnet.csum_start),
                usize::from(pkt.vnet.csum_offset),
            )
            .is_err()
            {
                self.stats.malformed += 1;
                return Err(io::ErrorKind::InvalidData.into());
            }
            self.stats.csum_completed += 1;
        }
        Ok(f)
    }
}

impl TapPort for SocketPort {
    fn push(&mut self, pkt: Packet) -> io::Result<()> {
        if pkt.vnet.gso_kind() == pvnet_wire::vnet::GSO_NONE {
            let f = self.plain(&pkt)?;
            return self.send_frame(&f);
        }
        let segs = pvnet_dd::lro::segment(&pkt).map_err(|_| {
            self.stats.malformed += 1;
            io::Error::from(io::ErrorKind::InvalidData)
        })?;
        self.stats.gso_packets += 1;
        self.stats.gso_segments += segs.len() as u64;
        let mut r = Ok(());
        for s in &segs {
            let f = self.plain(s)?;
            if let Err(e) = self.send_frame(&f) {
                r = Err(e);
            }
        }
        r
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.len() < VNET_HDR_LEN {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        let (hdr, data) = buf.split_at_mut(VNET_HDR_LEN);
        loop {
            match recv(self.fd.as_raw_fd(), data, MsgFlags::MSG_DONTWAIT) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    // A plain frame: no offload asked for, checksums done by the guest.
                    hdr.copy_from_slice(&VirtioNetHdr::default().to_bytes());
                    return Ok(VNET_HDR_LEN + n);
                }
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn stats(&self) -> serde_json::Value {
        serde_json::to_value(&self.stats).unwrap_or_default()
    }
}

/// One HVM domain as the toolstack keeps it.
pub struct HvmDomain {
    pub domid: u16,
    pub mac: [u8; 6],
    /// The toolstack's mapping of the ioreq page: the path selector is flipped through it.
    pub shared: DeviceState<HvmShared>,
    pub dm_ctl: Option<OwnedFd>,
    pub guest_ctl: Option<OwnedFd>,
    /// A second handle on the bridge port's socket, for the epoll set.
    pub net_watch: OwnedFd,
    pub dm: Option<Child>,
    pub guest: Option<Child>,
    pub dm_ready: bool,
    pub guest_ready: bool,
    pub failed: Option<String>,
    pub dm_stats: Option<DmStats>,
    pub guest_stats: Option<GuestStats>,
}

/// What [`create`] hands back: the domain, and the bridge port for the data path.
pub struct Created {
    pub domain: HvmDomain,
    pub port: SocketPort,
}

/// Spawns `pvnet <args>` in `ns` with `ctl` at descriptor 3, pinned to `cpu`.
fn spawn_in(ns: &Netns, args: &[&str], ctl: OwnedFd, cpu: Option<usize>) -> Result<Child> {
    let exe = std::env::current_exe()?;
    let mut cmd = ns.command(&exe);
    cmd.args(args).stdin(Stdio::null());
    let raw = ctl.as_raw_fd();
    // SAFETY: the closure runs in the child between fork and exec and only makes
    // async-signal-safe system calls (dup2, prctl, sched_setaffinity).
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(raw, 3) < 0 {
                return Err(io::Error::last_os_error());
            }
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if let Some(c) = cpu {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(c, &mut set);
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
            }
            Ok(())
        });
    }
    let child = cmd
        .spawn()
        .with_context(|| format!("spawning pvnet {}", args[0]))?;
    drop(ctl);
    Ok(child)
}

/// Builds HVM domain `domid` as guest `i` of the testbed: memory, ioreq page, channels, the
/// two processes (booted), the bridge port. The control sockets are non-blocking.
#[allow(clippy::too_many_arguments)]
pub fn create(
    domid: u16,
    i: usize,
    dd: &Netns,
    guest_ns: &Netns,
    cpu: Option<usize>,
    path: Path,
    exit_cost_ns: u64,
) -> Result<Created> {
    let mac = topology::guest_mac(i);
    let mem = Arc::new(GuestMemory::create(
        &format!("pvnet-hvm{domid}"),
        HVM_PAGES,
    )?);
    let page = Arc::new(IoreqPage::create(
        &format!("pvnet-ioreq{domid}"),
        1,
        std::mem::size_of::<HvmShared>(),
    )?);
    let shared = DeviceState::<HvmShared>::new(page.clone(), SHARED_OFFSET)?;
    shared.set_path(path);
    let (vcpu_io, dm_io) = channel_pair()?;
    let (vcpu_dev, dm_dev) = channel_pair()?;
    let (net_dd, net_dm) = ctl::socketpair()?;
    let (dm_ctl, dm_ctl_child) = ctl::socketpair()?;
    let (g_ctl, g_ctl_child) = ctl::socketpair()?;

    let dm = spawn_in(dd, &["device-model", "--ctl-fd", "3"], dm_ctl_child, cpu)?;
    let (n, w) = dm_io.into_fds();
    let (dn, dw) = dm_dev.into_fds();
    ctl::send(
        dm_ctl.as_fd(),
        &ToDm::Boot(DmBoot {
            domid,
            mac,
            mem_pages: HVM_PAGES,
            ioreq_port: IOREQ_PORT,
        }),
        &[
            page.fd(),
            mem.fd(),
            n.as_fd(),
            w.as_fd(),
            dn.as_fd(),
            dw.as_fd(),
            net_dm.as_fd(),
        ],
    )?;
    drop((n, w, dn, dw, net_dm));

    let guest = spawn_in(
        guest_ns,
        &["hvm-guest-run", "--ctl-fd", "3"],
        g_ctl_child,
        cpu,
    )?;
    let (n, w) = vcpu_io.into_fds();
    let (dn, dw) = vcpu_dev.into_fds();
    ctl::send(
        g_ctl.as_fd(),
        &ToHvm::Boot(HvmBoot {
            domid,
            mac,
            mem_pages: HVM_PAGES,
            ioreq_port: IOREQ_PORT,
            ifname: "eth0".into(),
            ipv4: topology::guest_addr(i).to_string(),
            prefix: topology::SUBNET_PREFIX,
            exit_cost_ns,
        }),
        &[
            page.fd(),
            mem.fd(),
            n.as_fd(),
            w.as_fd(),
            dn.as_fd(),
            dw.as_fd(),
        ],
    )?;
    drop((n, w, dn, dw));
    pvnet_hvm::port::set_nonblocking(dm_ctl.as_fd())?;
    pvnet_hvm::port::set_nonblocking(g_ctl.as_fd())?;
    let net_watch = net_dd.try_clone()?;
    Ok(Created {
        domain: HvmDomain {
            domid,
            mac,
            shared,
            dm_ctl: Some(dm_ctl),
            guest_ctl: Some(g_ctl),
            net_watch,
            dm: Some(dm),
            guest: Some(guest),
            dm_ready: false,
            guest_ready: false,
            failed: None,
            dm_stats: None,
            guest_stats: None,
        },
        port: SocketPort::new(net_dd)?,
    })
}

impl HvmDomain {
    /// Reads what the device model sent. False when its socket closed (or broke): the caller
    /// takes it out of its epoll set and drops it.
    pub fn dm_messages(&mut self) -> bool {
        let dom = self.domid;
        let (ready, stats, failed) = (&mut self.dm_ready, &mut self.dm_stats, &mut self.failed);
        drain(self.dm_ctl.as_ref(), |m| match m {
            FromDm::Ready => *ready = true,
            FromDm::Stats(st) => *stats = Some(*st),
            FromDm::Failed(e) => {
                eprintln!("pvnet: device model of domain {dom} failed: {e}");
                *failed = Some(format!("device model: {e}"));
            }
        })
    }

    /// Reads what the guest sent. False when its socket closed (or broke), as above.
    pub fn guest_messages(&mut self) -> bool {
        let dom = self.domid;
        let (ready, stats, failed) = (
            &mut self.guest_ready,
            &mut self.guest_stats,
            &mut self.failed,
        );
        drain(self.guest_ctl.as_ref(), |m| match m {
            FromHvm::Ready => *ready = true,
            FromHvm::Stats(st) => *stats = Some(*st),
            FromHvm::Failed(e) => {
                eprintln!("pvnet: HVM guest {dom} failed: {e}");
                *failed = Some(format!("guest: {e}"));
            }
        })
    }

    /// Up: both processes said Ready.
    pub fn ready(&self) -> bool {
        self.dm_ready && self.guest_ready
    }

    /// Asks both processes to stop (guest first: its vCPU needs the device model until then).
    pub fn stop(&mut self, deadline: Instant) {
        if let Some(s) = self.guest_ctl.as_ref() {
            let _ = ctl::send(s.as_fd(), &ToHvm::Shutdown, &[]);
        }
        reap(self.guest.as_mut(), deadline);
        // The last counters, if they came (behind at most a few batches: its process is gone).
        drain_batches(|| self.guest_messages());
        if let Some(s) = self.dm_ctl.as_ref() {
            let _ = ctl::send(s.as_fd(), &ToDm::Shutdown, &[]);
        }
        reap(self.dm.as_mut(), deadline);
        drain_batches(|| self.dm_messages());
        self.guest = None;
        self.dm = None;
    }

    /// What `pvnet stat` shows.
    pub fn stat_json(&self) -> serde_json::Value {
        let (path, valid) = self.shared.path();
        serde_json::json!({
            "domid": self.domid,
            "mac": pvnet_guest::run::format_mac(&self.mac),
            "path": path,
            "path_valid": valid,
            "ready": self.ready(),
            "failed": self.failed,
            "dm_pid": self.dm.as_ref().map(Child::id),
            "guest_pid": self.guest.as_ref().map(Child::id),
            "device_model": self.dm_stats,
            "guest": self.guest_stats,
        })
    }
}

/// Waits for `child` until `deadline`, then kills it.
fn reap(child: Option<&mut Child>, deadline: Instant) {
    let Some(c) = child else { return };
    loop {
        match c.try_wait() {
            Ok(Some(_)) => return,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = c.kill();
                let _ = c.wait();
                return;
            }
        }
    }
}

/// Messages [`drain`] takes from one control socket per wake. The emulation's processes send
/// a handful (Ready, their counters twice a second); one that sent without pause would
/// otherwise hold the data path's thread in its socket. The rest wait for the next pass of
/// the loop (the socket stays ready: level-triggered), behind the other domains' work.
const DRAIN_MAX: usize = 64;

/// Calls `batch` (one [`drain`] of a socket) until it says the socket is closed, at most
/// [`DRAIN_MAX`] times: a process that is gone left at most that much behind it.
fn drain_batches(mut batch: impl FnMut() -> bool) {
    for _ in 0..DRAIN_MAX {
        if !batch() {
            break;
        }
    }
}

/// Hands the messages waiting on control socket `sock` to `on`, at most [`DRAIN_MAX`]. False
/// when the socket is absent, closed or broken.
fn drain<M: serde::de::DeserializeOwned>(sock: Option<&OwnedFd>, mut on: impl FnMut(M)) -> bool {
    let Some(s) = sock else {
        return false;
    };
    for _ in 0..DRAIN_MAX {
        match ctl::try_recv::<M>(s.as_fd()) {
            Ok(Some((m, _))) => on(m),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Ok(None) | Err(_) => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};

    #[test]
    fn drain_takes_at_most_drain_max_messages_a_wake_in_order_then_sees_the_close() {
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .unwrap();
        let sent = DRAIN_MAX as u32 + 36;
        for i in 0..sent {
            ctl::send(theirs.as_fd(), &i, &[]).unwrap();
        }
        drop(theirs);
        let mut got = Vec::new();
        assert!(drain(Some(&ours), |m: u32| got.push(m)), "still open");
        assert_eq!(got.len(), DRAIN_MAX, "one wake's worth");
        assert!(
            !drain(Some(&ours), |m: u32| got.push(m)),
            "closed after the rest"
        );
        assert_eq!(got, (0..sent).collect::<Vec<_>>());
        assert!(!drain::<u32>(None, |_| {}), "no socket");
    }
}
