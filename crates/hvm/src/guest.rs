//! The HVM guest's kernel, as far as its network card goes: one vCPU running Linux's
//! `ne2k-pci` driver.
//!
//! [`HvmGuest::boot`] probes and opens the card (`ne2k_pci_init_one`, `ei_open`). Then
//! [`HvmGuest::run`] loops, on the vCPU's thread:
//!
//! - at every "instruction boundary" (after each driver entry point returns) the interrupt
//!   line is sampled; while it is up the driver's handler (`ei_interrupt`) runs, and the frames
//!   it received go up the stack (the stack [`FramePort`]: the guest's TAP in the process);
//! - frames the stack hands down are given to `ei_start_xmit`; when both transmit slots are busy
//!   the frame waits for the transmit interrupt (as the kernel's queue would stop);
//! - it sleeps (HLT) on the device channel (the device model raising the line), the stack's fd
//!   and the caller's control fd.
//!
//! Level-triggered, as the 8259 input the card is wired to: the line is re-sampled after every
//! handler run and before sleeping, so a frame placed while the handler ran is not missed even
//! though it raised no new edge (and so no event).

use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use pvnet_ne2000::driver::{DriverStats, Ne2kPci, XmitError};
use serde::{Deserialize, Serialize};

use crate::vcpu::{Vcpu, VcpuStats};
use crate::FramePort;

/// Frames taken from the stack per loop turn before the line is looked at again.
const TX_BATCH: usize = 32;
/// Handler runs in a row before the loop turns (a line stuck high cannot starve the rest).
const MAX_HANDLER_RUNS: u32 = 64;
/// Read buffer for the stack (a longer frame is cut and refused as too long).
const STACK_BUF: usize = 2048;
/// How often [`HvmGuest::run`] ticks.
pub const TICK: Duration = Duration::from_millis(250);

/// The guest driver's counters that `pvnet stat` shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriverCounters {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub rx_errors: u64,
    pub rx_over_errors: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub tx_errors: u64,
    pub interrupts: u64,
    pub dma_timeouts: u64,
    pub trigger_busy: u64,
}

impl From<DriverStats> for DriverCounters {
    fn from(s: DriverStats) -> DriverCounters {
        DriverCounters {
            rx_packets: s.rx_packets,
            rx_bytes: s.rx_bytes,
            rx_errors: s.rx_errors,
            rx_over_errors: s.rx_over_errors,
            tx_packets: s.tx_packets,
            tx_bytes: s.tx_bytes,
            tx_errors: s.tx_errors,
            interrupts: s.interrupts,
            dma_timeouts: s.dma_timeouts,
            trigger_busy: s.trigger_busy,
        }
    }
}

/// What the guest counted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestStats {
    /// Interrupt handler runs (the line was up at a boundary).
    pub interrupts: u64,
    /// Device-channel events (the device model raised the line while the vCPU slept or ran).
    pub irq_events: u64,
    /// Frames received by the driver and handed to the stack.
    pub frames_in: u64,
    /// Frames the stack refused (write errors), and a read error that closed it.
    pub stack_errors: u64,
    /// Frames taken from the stack.
    pub stack_frames: u64,
    /// Frames queued for transmit by the driver.
    pub frames_out: u64,
    /// `start_xmit` found both slots busy (the frame waited).
    pub xmit_busy: u64,
    /// Frames from the stack over 1514 bytes (dropped).
    pub xmit_too_long: u64,
    /// The vCPU's exits and ioreqs.
    pub vcpu: VcpuStats,
    /// The driver's own counters.
    pub driver: DriverCounters,
    /// The guest process's (vCPU thread and its stack's) CPU time and context switches (the
    /// process reports them; zero when the guest runs as a thread).
    #[serde(default)]
    pub process: crate::ProcessUsage,
}

/// Why the probe failed, as an error.
fn probe_error(e: pvnet_ne2000::driver::ProbeError) -> anyhow::Error {
    anyhow!("ne2k-pci probe failed: {e:?}")
}

/// What woke [`HvmGuest::run`]'s caller.
pub use crate::dm::Wake;

/// One guest: a vCPU, the driver on it, and the stack above.
#[derive(Debug)]
pub struct HvmGuest<P: FramePort> {
    vcpu: Vcpu,
    drv: Ne2kPci,
    stack: P,
    pending: Option<Vec<u8>>,
    stack_closed: bool,
    buf: Vec<u8>,
    stats: GuestStats,
}

impl<P: FramePort> HvmGuest<P> {
    /// Probes and opens the card through `vcpu`.
    pub fn boot(mut vcpu: Vcpu, stack: P) -> Result<HvmGuest<P>> {
        let drv = Ne2kPci::probe(&mut vcpu).map_err(probe_error);
        if let Some(e) = vcpu.error() {
            bail!("probing the card: {e}");
        }
        let mut drv = drv?;
        drv.open(&mut vcpu);
        let mut g = HvmGuest {
            vcpu,
            drv,
            stack,
            pending: None,
            stack_closed: false,
            buf: vec![0u8; STACK_BUF],
            stats: GuestStats::default(),
        };
        g.service_irq();
        g.check()?;
        Ok(g)
    }

    /// The station address the driver read from the card's PROM.
    pub fn mac(&self) -> [u8; 6] {
        self.drv.mac()
    }

    /// The counters (with the vCPU's and the driver's).
    pub fn stats(&self) -> GuestStats {
        let mut s = self.stats.clone();
        s.vcpu = self.vcpu.stats();
        s.driver = self.drv.stats().into();
        s
    }

    /// The vCPU.
    pub fn vcpu(&self) -> &Vcpu {
        &self.vcpu
    }

    /// The stack's port.
    pub fn stack(&self) -> &P {
        &self.stack
    }

    fn check(&self) -> Result<()> {
        match self.vcpu.error() {
            Some(e) => bail!("vCPU failed: {e}"),
            None => Ok(()),
        }
    }

    /// Runs the interrupt handler while the line is up; hands received frames to the stack.
    /// Returns the handler runs.
    pub fn service_irq(&mut self) -> u32 {
        let mut runs = 0;
        while runs < MAX_HANDLER_RUNS && self.vcpu.error().is_none() && self.vcpu.irq_line() {
            self.drv.interrupt(&mut self.vcpu);
            self.stats.interrupts += 1;
            runs += 1;
            while let Some(f) = self.drv.take_rx() {
                self.stats.frames_in += 1;
                if self.stack.send(&f).is_err() {
                    self.stats.stack_errors += 1;
                }
            }
        }
        runs
    }

    /// Moves frames from the stack to the driver (at most a batch). Returns frames queued.
    pub fn transmit(&mut self) -> usize {
        let mut queued = 0;
        while queued < TX_BATCH && self.vcpu.error().is_none() && !self.stack_closed {
            let frame = match self.pending.take() {
                Some(f) => f,
                None => {
                    let mut buf = std::mem::take(&mut self.buf);
                    let r = self.stack.recv(&mut buf);
                    let f = match r {
                        Ok(Some(n)) => Some(buf[..n].to_vec()),
                        Ok(None) => None,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => None,
                        Err(_) => {
                            // Closed or broken: stop reading it.
                            self.stats.stack_errors += 1;
                            self.stack_closed = true;
                            None
                        }
                    };
                    self.buf = buf;
                    match f {
                        Some(f) => {
                            self.stats.stack_frames += 1;
                            f
                        }
                        None => break,
                    }
                }
            };
            match self.drv.start_xmit(&mut self.vcpu, &frame) {
                Ok(()) => {
                    self.stats.frames_out += 1;
                    queued += 1;
                }
                Err(XmitError::Busy) => {
                    self.stats.xmit_busy += 1;
                    self.pending = Some(frame);
                    // The transmit interrupt frees a slot; it is due at this boundary.
                    if self.service_irq() == 0 {
                        break;
                    }
                    continue;
                }
                Err(XmitError::TooLong) => self.stats.xmit_too_long += 1,
            }
            self.service_irq();
        }
        queued
    }

    /// Runs until `on_wake` returns `Ok(true)` (called when `control` is readable and every
    /// [`TICK`]) or the vCPU fails (an error).
    pub fn run(
        &mut self,
        control: Option<BorrowedFd<'_>>,
        mut on_wake: impl FnMut(&mut Self, Wake) -> Result<bool>,
    ) -> Result<()> {
        let mut next_tick = Instant::now() + TICK;
        loop {
            self.service_irq();
            self.transmit();
            self.check()?;
            if self.vcpu.irq_line() {
                // Still up (a frame landed since the last sample): serve before sleeping.
                continue;
            }
            let left = next_tick.saturating_duration_since(Instant::now());
            let ms = left.as_millis().min(i32::MAX as u128) as i32;
            let mut fds = vec![PollFd::new(self.vcpu.device().wait_fd(), PollFlags::POLLIN)];
            if self.pending.is_none() && !self.stack_closed {
                fds.push(PollFd::new(self.stack.fd(), PollFlags::POLLIN));
            }
            let ctl_at = control.map(|c| {
                fds.push(PollFd::new(c, PollFlags::POLLIN));
                fds.len() - 1
            });
            match poll(
                &mut fds,
                PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
            ) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
            let ready = |i: usize| {
                fds[i].revents().is_some_and(|r| {
                    r.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR)
                })
            };
            let irq = ready(0);
            let ctl = ctl_at.is_some_and(ready);
            drop(fds);
            if irq {
                self.vcpu.device().consume();
                self.stats.irq_events += 1;
            }
            if ctl && on_wake(self, Wake::Control)? {
                return Ok(());
            }
            if Instant::now() >= next_tick {
                next_tick = Instant::now() + TICK;
                if on_wake(self, Wake::Tick)? {
                    return Ok(());
                }
            }
        }
    }
}
