//! The two processes of an HVM domain, as the toolstack starts them: the device model
//! ([`run_device_model`], in the driver domain's namespace) and the HVM guest
//! ([`run_hvm_guest`], in the guest's namespace). Each boots from one message on its control
//! socket (`pvnet_hv::ctl`, JSON with fds), says [`FromDm::Ready`] / [`FromHvm::Ready`], sends
//! its counters every [`STATS_EVERY`], and on `Shutdown` (or the socket closing) sends them a
//! last time and exits.
//!
//! Descriptors, in order:
//! - device model ([`DmBoot`]): the ioreq page, the guest's memory, the ioreq channel's notify
//!   and wait eventfds, the device channel's notify and wait eventfds, and its network socket
//!   (`SOCK_SEQPACKET`, one Ethernet frame per message; the daemon's bridge holds the peer);
//! - guest ([`HvmBoot`]): the ioreq page, the guest's memory, the ioreq channel's two eventfds,
//!   the device channel's two eventfds. The guest creates its TAP itself (its kernel's
//!   interface) with the MAC and address it is told, as the PV guest does.
//!
//! The guest waits (up to [`POWER_ON_WAIT`]) for the device model to power the card on (the
//! magic in the shared registers) before it probes.

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use pvnet_hv::evtchn::EvtchnEnd;
use pvnet_hv::exit::ExitCost;
use pvnet_hv::foreign::ForeignMemory;
use pvnet_hv::ioreq::{DeviceState, IoreqClient, IoreqPage, IoreqServer};
use pvnet_hv::mem::GuestMemory;
use pvnet_hv::{ctl, Port};
use pvnet_ne2000::SHARED_MAGIC;
use pvnet_testbed::{link, Tap};
use serde::{Deserialize, Serialize};

use crate::dm::{DeviceModel, DmStats, Wake};
use crate::guest::{GuestStats, HvmGuest};
use crate::vcpu::Vcpu;
use crate::{FramePort, HvmShared, SeqPacketPort, SHARED_OFFSET};

/// How often the processes report their counters.
pub const STATS_EVERY: Duration = Duration::from_millis(500);
/// How long the guest waits for the card to be powered on.
pub const POWER_ON_WAIT: Duration = Duration::from_secs(10);

/// What the toolstack tells the device model.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DmBoot {
    pub domid: u16,
    /// The card's station address (its PROM).
    pub mac: [u8; 6],
    /// Pages of guest memory (checked against the memfd).
    pub mem_pages: u32,
    /// The vCPU's ioreq event-channel port (`vp_eport`).
    pub ioreq_port: u32,
}

/// What the toolstack tells the HVM guest.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HvmBoot {
    pub domid: u16,
    /// The MAC of the guest's interface (must be the card's: the driver filters on it).
    pub mac: [u8; 6],
    pub mem_pages: u32,
    pub ioreq_port: u32,
    /// The guest's interface name, address and prefix.
    pub ifname: String,
    pub ipv4: String,
    pub prefix: u8,
    /// Modelled cost of one VM exit, nanoseconds.
    pub exit_cost_ns: u64,
}

/// Toolstack to device model.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum ToDm {
    Boot(DmBoot),
    Shutdown,
}

/// Device model to toolstack.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum FromDm {
    /// The card is powered on and the loop is about to run.
    Ready,
    /// Counters, with the process's CPU time in `cpu_ns`.
    Stats(Box<DmStats>),
    Failed(String),
}

/// Toolstack to HVM guest.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum ToHvm {
    Boot(HvmBoot),
    Shutdown,
}

/// HVM guest to toolstack.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum FromHvm {
    /// The driver probed and opened the card; the interface is up.
    Ready,
    Stats(Box<GuestStats>),
    Failed(String),
}

fn take_fds<const N: usize>(fds: Vec<OwnedFd>) -> Result<[OwnedFd; N]> {
    let n = fds.len();
    fds.try_into()
        .map_err(|_| anyhow!("boot message carried {n} descriptors, expected {N}"))
}

fn map_memory(fd: OwnedFd, pages: u32) -> Result<Arc<GuestMemory>> {
    let mem = GuestMemory::from_fd(fd).context("mapping guest memory")?;
    if mem.pages() != pages {
        bail!(
            "guest memory has {} pages, boot info says {pages}",
            mem.pages()
        );
    }
    Ok(Arc::new(mem))
}

/// Reads one control message without blocking: `Ok(None)` when none is queued, `Ok(Some(None))`
/// at end of file.
fn poll_ctl<T: serde::de::DeserializeOwned>(sock: BorrowedFd<'_>) -> Result<Option<Option<T>>> {
    match ctl::try_recv::<T>(sock) {
        Ok(Some((m, _))) => Ok(Some(Some(m))),
        Ok(None) => Ok(Some(None)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The device-model process: boots from `sock`, serves until told to stop.
pub fn run_device_model(sock: OwnedFd) -> Result<()> {
    let r = dm_booted(&sock);
    if let Err(e) = &r {
        let _ = ctl::send(sock.as_fd(), &FromDm::Failed(format!("{e:#}")), &[]);
    }
    r
}

fn dm_booted(sock: &OwnedFd) -> Result<()> {
    let (msg, fds) = ctl::recv::<ToDm>(sock.as_fd())?
        .ok_or_else(|| anyhow!("toolstack closed the control socket before boot"))?;
    let ToDm::Boot(boot) = msg else {
        bail!("expected a boot message, got {msg:?}")
    };
    let [page, mem, io_n, io_w, dev_n, dev_w, net] = take_fds::<7>(fds)?;
    let page = Arc::new(IoreqPage::from_fd(page, 1).context("mapping the ioreq page")?);
    let mem = map_memory(mem, boot.mem_pages)?;
    let server = IoreqServer::new(
        page.clone(),
        0,
        Port(boot.ioreq_port),
        EvtchnEnd::from_fds(io_n, io_w),
    )?
    .with_memory(Arc::new(ForeignMemory::new(mem)));
    let shared = DeviceState::<HvmShared>::new(page, SHARED_OFFSET)?;
    let net = SeqPacketPort::new(net)?;
    let mut dm = DeviceModel::new(
        boot.mac,
        shared,
        server,
        EvtchnEnd::from_fds(dev_n, dev_w),
        net,
    )?;
    crate::port::set_nonblocking(sock.as_fd())?;
    ctl::send(sock.as_fd(), &FromDm::Ready, &[])?;
    let mut last = Instant::now();
    let report = |dm: &DeviceModel<SeqPacketPort>| {
        let mut s = dm.stats();
        s.process = crate::process_usage();
        s.cpu_ns = s.process.cpu_ns;
        FromDm::Stats(Box::new(s))
    };
    dm.run(Some(sock.as_fd()), |dm, wake| {
        match wake {
            Wake::Control => loop {
                match poll_ctl::<ToDm>(sock.as_fd())? {
                    None => break,
                    Some(Some(ToDm::Boot(_))) => {}
                    Some(Some(ToDm::Shutdown)) | Some(None) => {
                        let _ = ctl::send(sock.as_fd(), &report(dm), &[]);
                        return Ok(true);
                    }
                }
            },
            Wake::Tick => {}
        }
        if last.elapsed() >= STATS_EVERY {
            last = Instant::now();
            ctl::send(sock.as_fd(), &report(dm), &[])?;
        }
        Ok(false)
    })
}

/// The guest kernel's interface: a TAP without a vnet header (the NE2000 offers no offloads,
/// so the kernel hands it whole frames with their checksums done).
#[derive(Debug)]
pub struct TapStack(pub Tap);

impl FramePort for TapStack {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        self.0.write(frame).map(drop)
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        match self.0.read(buf) {
            Ok(n) => Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.0.fd()
    }
}

/// The HVM guest process: boots from `sock`, creates its interface, runs until told to stop.
pub fn run_hvm_guest(sock: OwnedFd) -> Result<()> {
    let r = hvm_booted(&sock);
    if let Err(e) = &r {
        let _ = ctl::send(sock.as_fd(), &FromHvm::Failed(format!("{e:#}")), &[]);
    }
    r
}

fn hvm_booted(sock: &OwnedFd) -> Result<()> {
    let (msg, fds) = ctl::recv::<ToHvm>(sock.as_fd())?
        .ok_or_else(|| anyhow!("toolstack closed the control socket before boot"))?;
    let ToHvm::Boot(boot) = msg else {
        bail!("expected a boot message, got {msg:?}")
    };
    let [page, mem, io_n, io_w, dev_n, dev_w] = take_fds::<6>(fds)?;
    let page = Arc::new(IoreqPage::from_fd(page, 1).context("mapping the ioreq page")?);
    let mem = map_memory(mem, boot.mem_pages)?;
    let client = IoreqClient::new(
        page.clone(),
        0,
        Port(boot.ioreq_port),
        EvtchnEnd::from_fds(io_n, io_w),
    )?;
    let shared = DeviceState::<HvmShared>::new(page, SHARED_OFFSET)?;
    let deadline = Instant::now() + POWER_ON_WAIT;
    while shared.regs.magic() != SHARED_MAGIC {
        if Instant::now() > deadline {
            bail!("the device model did not power the card on within {POWER_ON_WAIT:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let tap = Tap::open(&boot.ifname, false).context("creating the guest's TAP")?;
    link::set_mac(tap.name(), boot.mac)?;
    let addr: Ipv4Addr = boot.ipv4.parse().context("guest ipv4 address")?;
    link::add_ipv4(tap.name(), addr, boot.prefix)?;
    let ifname = tap.name().to_string();
    let vcpu = Vcpu::new(
        shared,
        client,
        EvtchnEnd::from_fds(dev_n, dev_w),
        ExitCost::new(boot.exit_cost_ns),
        mem,
    )?;
    let mut guest = HvmGuest::boot(vcpu, TapStack(tap))?;
    if guest.mac() != boot.mac {
        bail!(
            "the card's PROM says {:02x?}, the interface has {:02x?}",
            guest.mac(),
            boot.mac
        );
    }
    link::set_up(&ifname, true)?;
    crate::port::set_nonblocking(sock.as_fd())?;
    ctl::send(sock.as_fd(), &FromHvm::Ready, &[])?;
    let mut last = Instant::now();
    let report = |g: &HvmGuest<TapStack>| {
        let mut s = g.stats();
        s.process = crate::process_usage();
        FromHvm::Stats(Box::new(s))
    };
    guest.run(Some(sock.as_fd()), |g, wake| {
        if wake == Wake::Control {
            loop {
                match poll_ctl::<ToHvm>(sock.as_fd())? {
                    None => break,
                    Some(Some(ToHvm::Boot(_))) => {}
                    Some(Some(ToHvm::Shutdown)) | Some(None) => {
                        let _ = ctl::send(sock.as_fd(), &report(g), &[]);
                        return Ok(true);
                    }
                }
            }
        }
        if last.elapsed() >= STATS_EVERY {
            last = Instant::now();
            ctl::send(sock.as_fd(), &report(g), &[])?;
        }
        Ok(false)
    })
}
