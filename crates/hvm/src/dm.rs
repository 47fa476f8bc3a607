//! The device model (qemu-dm) for one RTL8029: serves the vCPU's I/O requests and moves frames
//! between the card and the network.
//!
//! # The loop ([`DeviceModel::run`])
//!
//! It waits on the ioreq channel, the device channel (a `wake_rx` from the vCPU's trap handler),
//! its network port (while it holds no frame) and the caller's control fd, and:
//!
//! - serves the vCPU's request first whenever one is READY (the vCPU is stopped until then):
//!   plain `in`/`out` go to [`Card::dm_access`]; `rep ins/outs` (`data_is_ptr`) move
//!   `count × size` bytes between the card and guest memory through [`ForeignMemory`] (QEMU's
//!   `cpu_ioreq_pio`); a transmitted frame goes out on the network port;
//! - takes frames from the network into the receive ring ([`Card::receive`]); when the ring is
//!   full the frame is *held* (the port is no longer read, so the network backs up) and
//!   retried when a completion or the vCPU says `wake_rx`, and on every tick;
//! - raises the interrupt (notifies the device channel) when placing a frame made the line go
//!   up (`SharedRegs::irq_raised` moved);
//! - announces frames the driver acknowledged without reading ([`Card::reannounce`]: Linux's
//!   `ei_receive` stops after 9 frames, and a frame placed between its last CURR read and its
//!   PRX acknowledgement goes unseen): after every request served, on the vCPU's wake, on a
//!   hold and on every tick. Without it a held frame and a full ring wait for each other
//!   forever.
//!
//! # Trust
//!
//! Requests come from the guest's slot: [`IoreqServer::next`] copies and validates them (its
//! refusal counters); what it lets through is checked again here: a port outside the card's
//! window reads all ones and is dropped (`unclaimed`), an 8-byte access to the card reads all
//! ones (`bad_width`). A `rep` moves at most 64 KiB ([`pvnet_hv::ioreq::MAX_REP_BYTES`]) and only
//! inside guest memory (checked before any byte moves). Nothing in a request or a frame makes
//! the loop panic or stop; only its own control fd, or a broken channel, ends it.

use std::io;
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use pvnet_hv::evtchn::EvtchnEnd;
use pvnet_hv::foreign::ForeignMemory;
use pvnet_hv::foreign::ForeignStats;
use pvnet_hv::ioreq::{DeviceState, Dir, Ioreq, IoreqServer, ServerStats, STATE_IOREQ_READY};
use pvnet_ne2000::{Access, Card, CardCounters, Completion, RxRefused, Width, MAX_FRAME};
use serde::{Deserialize, Serialize};

use crate::{FramePort, HvmShared, PortCounts, IO_BASE};

/// Frames taken from the network per wake before the loop looks at the ioreq slot again.
const RX_BATCH: usize = 16;
/// Longest frame read from the network (longer ones are cut and then refused as oversize).
const RX_BUF: usize = 2048;

/// The card's counters, as `pvnet stat` shows them.
pub type CardStats = CardCounters;

/// What the device model counted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DmStats {
    /// Requests served, by port offset in the card's window and direction.
    pub ioreqs: PortCounts,
    /// Of those, `rep ins` / `rep outs` (`data_is_ptr`).
    pub rep_reads: u64,
    pub rep_writes: u64,
    /// Bytes moved by them.
    pub rep_bytes: u64,
    /// Valid requests for ports outside the card's window (all ones / dropped).
    pub unclaimed: u64,
    /// Requests to the card with an 8-byte width (all ones / dropped).
    pub bad_width: u64,
    /// `rep` requests whose guest-memory copy failed (answered, nothing moved).
    pub rep_failed: u64,
    /// Frames taken from the network.
    pub net_in: u64,
    /// Frames placed in the receive ring.
    pub frames_in: u64,
    /// Frames the card transmitted.
    pub frames_out: u64,
    /// Transmitted frames the network port refused (dropped).
    pub net_out_errors: u64,
    /// Network frames the card refused for a reason other than a full ring (dropped; the card's
    /// counters say which reason).
    pub rx_dropped: u64,
    /// Receives refused for a full ring (a first refusal and every failed retry).
    pub ring_full: u64,
    /// Frames held after a full ring.
    pub holds: u64,
    /// Retries of a held frame.
    pub hold_retries: u64,
    /// Retries because a completion of a forwarded access said `wake_rx`.
    pub wakes_completion: u64,
    /// Device-channel events from the vCPU (`wake_rx` after a write served at the trap).
    pub wakes_vcpu: u64,
    /// PRX raised again for frames left in the ring after the driver's acknowledgement
    /// ([`Card::reannounce`]).
    pub reannounced: u64,
    /// Interrupts raised (device-channel notifications).
    pub interrupts_sent: u64,
    /// Network read errors other than "nothing there" (the port is not read after one).
    pub net_errors: u64,
    /// CPU time of the thread running the loop, in nanoseconds (at the last tick or stop).
    pub cpu_ns: u64,
    /// The device-model process's CPU time and context switches (the process reports them;
    /// zero when the model runs as a thread).
    #[serde(default)]
    pub process: crate::ProcessUsage,
    /// The ioreq server's counters (its refusals by reason).
    pub server: ServerStats,
    /// The foreign mapping's counters.
    pub foreign: ForeignStats,
    /// The card's counters.
    pub card: CardStats,
}

/// What woke [`DeviceModel::run`]'s caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// The control fd is readable.
    Control,
    /// A tick passed (about every [`TICK`]).
    Tick,
}

/// How often the loop ticks.
pub const TICK: Duration = Duration::from_millis(250);

/// The device model for one card and one vCPU.
pub struct DeviceModel<P: FramePort> {
    card: Card,
    shared: DeviceState<HvmShared>,
    server: IoreqServer,
    device: EvtchnEnd,
    net: P,
    memory: Arc<ForeignMemory>,
    held: Option<Vec<u8>>,
    net_closed: bool,
    rep_buf: Vec<u8>,
    rx_buf: Vec<u8>,
    stats: DmStats,
}

impl<P: FramePort> std::fmt::Debug for DeviceModel<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceModel")
            .field("card", &self.card)
            .field("held", &self.held.as_ref().map(Vec::len))
            .finish()
    }
}

impl<P: FramePort> DeviceModel<P> {
    /// A device model for a card with station address `mac`, whose registers live in `shared`
    /// (powered on here), serving `server` (which must have the guest's memory, for `rep`),
    /// raising interrupts on `device` and connected to the network by `net`.
    pub fn new(
        mac: [u8; 6],
        shared: DeviceState<HvmShared>,
        server: IoreqServer,
        device: EvtchnEnd,
        net: P,
    ) -> Result<DeviceModel<P>> {
        let memory = server
            .memory()
            .cloned()
            .context("the ioreq server has no guest memory for rep ins/outs")?;
        let card = Card::new(mac);
        card.power_on(&shared.regs);
        Ok(DeviceModel {
            card,
            shared,
            server,
            device,
            net,
            memory,
            held: None,
            net_closed: false,
            rep_buf: Vec::new(),
            rx_buf: vec![0u8; RX_BUF],
            stats: DmStats::default(),
        })
    }

    /// The counters, with the card's, the server's and the foreign mapping's.
    pub fn stats(&self) -> DmStats {
        let mut s = self.stats.clone();
        s.server = self.server.stats();
        s.foreign = self.memory.stats();
        s.card = self.card.counters();
        s
    }

    /// The card.
    pub fn card(&self) -> &Card {
        &self.card
    }

    /// The shared page's contents.
    pub fn shared(&self) -> &HvmShared {
        &self.shared
    }

    /// Whether a frame is held for a full ring.
    pub fn holding(&self) -> bool {
        self.held.is_some()
    }

    /// The network port.
    pub fn net(&self) -> &P {
        &self.net
    }

    /// Runs until `on_wake` returns `Ok(true)` (it is called when `control` is readable and on
    /// every tick) or a channel breaks.
    pub fn run(
        &mut self,
        control: Option<BorrowedFd<'_>>,
        mut on_wake: impl FnMut(&mut Self, Wake) -> Result<bool>,
    ) -> Result<()> {
        let mut next_tick = Instant::now() + TICK;
        loop {
            let (ioreq, vcpu, net, ctl) = self.wait(control, next_tick)?;
            if ioreq {
                self.server.evtchn().consume();
                self.serve_pending();
            }
            if vcpu {
                self.device.consume();
                self.stats.wakes_vcpu += 1;
                self.retry_held();
                self.reannounce();
            }
            if net {
                self.pump_net();
            }
            if ctl && on_wake(self, Wake::Control)? {
                self.stats.cpu_ns = crate::thread_cpu_ns();
                return Ok(());
            }
            if Instant::now() >= next_tick {
                next_tick = Instant::now() + TICK;
                // A hold that lost its wake (the vCPU's notify failed) is retried here.
                self.retry_held();
                self.reannounce();
                self.stats.cpu_ns = crate::thread_cpu_ns();
                if on_wake(self, Wake::Tick)? {
                    return Ok(());
                }
            }
        }
    }

    /// Polls the four sources; returns which are ready.
    fn wait(
        &self,
        control: Option<BorrowedFd<'_>>,
        until: Instant,
    ) -> io::Result<(bool, bool, bool, bool)> {
        let left = until.saturating_duration_since(Instant::now());
        let ms = left.as_millis().min(i32::MAX as u128) as i32;
        let mut fds = vec![
            PollFd::new(self.server.evtchn().wait_fd(), PollFlags::POLLIN),
            PollFd::new(self.device.wait_fd(), PollFlags::POLLIN),
        ];
        let net_at = (self.held.is_none() && !self.net_closed).then(|| {
            fds.push(PollFd::new(self.net.fd(), PollFlags::POLLIN));
            fds.len() - 1
        });
        let ctl_at = control.map(|c| {
            fds.push(PollFd::new(c, PollFlags::POLLIN));
            fds.len() - 1
        });
        match poll(
            &mut fds,
            PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
        ) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => return Ok((false, false, false, false)),
            Err(e) => return Err(e.into()),
        }
        let ready = |i: usize| {
            fds[i].revents().is_some_and(|r| {
                r.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR)
            })
        };
        Ok((
            ready(0),
            ready(1),
            net_at.is_some_and(ready),
            ctl_at.is_some_and(ready),
        ))
    }

    /// Serves the vCPU's request if one is READY (refused ones are answered by the server).
    pub fn serve_pending(&mut self) {
        if let Some(req) = self.server.next() {
            let data = self.serve(&req);
            // Before the answer, so the vCPU finds the line up when it resumes.
            self.reannounce();
            // A failed notify leaves the vCPU to its timeout; nothing better can be done here.
            let _ = self.server.complete(data);
        }
    }

    fn slot_ready(&self) -> bool {
        self.server
            .page()
            .slot_state(self.server.vcpu())
            .is_ok_and(|s| s == STATE_IOREQ_READY)
    }

    /// Serves one validated request; returns the answer's `data`.
    fn serve(&mut self, req: &Ioreq) -> u64 {
        let read = req.dir == Dir::Read;
        let ones = if read && !req.data_is_ptr {
            u64::MAX
        } else {
            req.data
        };
        let offset = req
            .addr
            .checked_sub(u64::from(IO_BASE))
            .filter(|o| *o < u64::from(pvnet_ne2000::IO_SIZE));
        let Some(offset) = offset else {
            self.stats.unclaimed += 1;
            self.stats.ioreqs.count(None, !read);
            return ones;
        };
        self.stats.ioreqs.count(Some(offset as u16), !read);
        let Some(width) = Width::from_bytes(req.size as usize) else {
            self.stats.bad_width += 1;
            return ones;
        };
        let port = offset as u8;
        if let Some(rep) = req.rep() {
            let len = rep.len() as usize;
            let mut buf = std::mem::take(&mut self.rep_buf);
            buf.clear();
            buf.resize(len, 0);
            let c = if read {
                self.stats.rep_reads += 1;
                let c = self
                    .card
                    .dm_rep_read(&self.shared.regs, port, width, &mut buf);
                if self.memory.write_rep(&rep, &buf).is_err() {
                    self.stats.rep_failed += 1;
                }
                Some(c)
            } else {
                self.stats.rep_writes += 1;
                if self.memory.read_rep(&rep, &mut buf).is_ok() {
                    Some(self.card.dm_rep_write(&self.shared.regs, port, width, &buf))
                } else {
                    self.stats.rep_failed += 1;
                    None
                }
            };
            self.stats.rep_bytes += len as u64;
            self.rep_buf = buf;
            if let Some(c) = c {
                self.after(c);
            }
            return req.data;
        }
        let access = if read {
            Access::Read { port, width }
        } else {
            Access::Write {
                port,
                width,
                value: req.data as u32,
            }
        };
        let c = self.card.dm_access(&self.shared.regs, access);
        let value = u64::from(c.value);
        self.after(c);
        if read {
            value
        } else {
            req.data
        }
    }

    /// What a completion asks for: a frame to send, a held frame to retry.
    fn after(&mut self, c: Completion) {
        if let Some(tx) = c.tx {
            self.stats.frames_out += 1;
            let frame = self.card.tx_bytes(tx);
            if self.net.send(frame).is_err() {
                self.stats.net_out_errors += 1;
            }
        }
        if c.wake_rx && self.held.is_some() {
            self.stats.wakes_completion += 1;
            self.retry_held();
        }
    }

    /// Raises PRX again for frames the driver acknowledged without reading
    /// ([`Card::reannounce`]); notifies if the line rose.
    fn reannounce(&mut self) {
        let regs = &self.shared.regs;
        let raised = regs.irq_raised();
        if self.card.reannounce(regs) {
            self.stats.reannounced += 1;
            if regs.irq_raised() != raised {
                self.stats.interrupts_sent += 1;
                let _ = self.device.notify();
            }
        }
    }

    /// Retries the held frame, if any.
    fn retry_held(&mut self) {
        if let Some(frame) = self.held.take() {
            self.stats.hold_retries += 1;
            self.offer(frame);
        }
    }

    /// Offers one frame to the card; holds it if the ring is full.
    fn offer(&mut self, frame: Vec<u8>) {
        let regs = &self.shared.regs;
        let raised = regs.irq_raised();
        match self.card.receive(regs, &frame) {
            Ok(_) => {
                self.stats.frames_in += 1;
                if regs.irq_raised() != raised {
                    self.stats.interrupts_sent += 1;
                    // A failed notify leaves the frame until the vCPU next looks at the line.
                    let _ = self.device.notify();
                }
            }
            Err(RxRefused::RingFull) => {
                self.stats.ring_full += 1;
                if self.held.is_none() {
                    self.held = Some(frame);
                }
                self.reannounce();
            }
            Err(_) => self.stats.rx_dropped += 1,
        }
    }

    /// Takes frames from the network while no frame is held, serving the vCPU in between.
    fn pump_net(&mut self) {
        for _ in 0..RX_BATCH {
            if self.held.is_some() {
                return;
            }
            if self.slot_ready() {
                self.serve_pending();
            }
            let mut buf = std::mem::take(&mut self.rx_buf);
            let r = self.net.recv(&mut buf);
            let frame = match r {
                Ok(Some(n)) => Some(buf[..n.min(MAX_FRAME + 1)].to_vec()),
                Ok(None) => None,
                Err(e) => {
                    self.stats.net_errors += 1;
                    if e.kind() != io::ErrorKind::Interrupted {
                        // Closed or broken: stop reading it (the vCPU is still served).
                        self.net_closed = true;
                    }
                    None
                }
            };
            self.rx_buf = buf;
            let Some(frame) = frame else { return };
            self.stats.net_in += 1;
            let before_holds = self.held.is_some();
            self.offer(frame);
            if !before_holds && self.held.is_some() {
                self.stats.holds += 1;
            }
        }
    }
}
