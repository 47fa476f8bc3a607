//! The vCPU and its trap handler: Xen's part of an HVM guest's port I/O.
//!
//! Every [`PortIo`] call on a [`Vcpu`] is one VM exit (Zhang, Li and Guan, section IV.D, steps 1–5):
//!
//! 1. it is counted, per port of the card's window and per direction ([`VcpuStats::exits`]);
//! 2. its cost is spent ([`ExitCost::spend`], the modelled exit and entry);
//! 3. the path selected in the ioreq page ([`HvmShared::path`], read at every exit, so the
//!    toolstack can flip it while the guest runs) decides who serves it:
//!    - original: the access goes to the device model as one ioreq round trip;
//!    - fast(class): [`trap_access`] serves it from the registers in the page if `class` allows
//!      and it needs no card memory (the paper's "switch"); otherwise it is forwarded as above.
//!
//! When the trap served a write that gives a held frame room ([`Completion::wake_rx`], a BNRY
//! write), the vCPU notifies the device model on the device channel: a notification, not a
//! round trip. When it served an ISR or IMR write it recomputes the line itself (the completion
//! carries it); on the original path the line is read from the page after the answer, as Xen
//! would find the level the device model set. [`Vcpu::irq_line`] is what the guest's interrupt
//! controller sees.
//!
//! Likewise, when the trap served a write acknowledging ISR.PRX while the ring still holds
//! frames (Linux's receive loop stops after 9), it notifies the device model, which announces
//! them again (`Card::reannounce`): on the other paths that write reaches it as an ioreq.
//!
//! `rep insl` / `rep outsl` are one exit and one ioreq each, with `data_is_ptr` set and `data`
//! the guest-physical address of a bounce buffer in the guest's own memory ([`crate::BOUNCE_GPA`]):
//! the device model reaches those bytes only through its foreign mapping. A string longer than
//! the bounce buffer is split, one exit per piece (the driver never does that: frames fit).
//!
//! Failure: a round trip that fails (device model dead or silent past the ioreq timeout) makes
//! the vCPU *failed*: that access and every later one read all ones without exiting, and
//! [`Vcpu::error`] says why; the guest runtime stops on it.

use std::sync::Arc;

use pvnet_hv::evtchn::EvtchnEnd;
use pvnet_hv::exit::ExitCost;
use pvnet_hv::ioreq::{ClientStats, DeviceState, Ioreq, IoreqClient, IoreqError};
use pvnet_hv::mem::GuestMemory;
use pvnet_hv::{Pfn, PAGE_SIZE};
use pvnet_ne2000::direct::Path;
use pvnet_ne2000::driver::PortIo;
use pvnet_ne2000::{trap_access, trap_rep, Access, TrapOutcome, Width};
use serde::{Deserialize, Serialize};

#[cfg(doc)]
use pvnet_ne2000::Completion;

use crate::{HvmShared, PortCounts, BOUNCE_GPA, BOUNCE_PAGES, IO_BASE};

/// What the vCPU counted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VcpuStats {
    /// VM exits by port offset and direction (a `rep` string is one exit at its port).
    pub exits: PortCounts,
    /// Exits that were `rep insl` / `rep outsl`.
    pub rep_exits: u64,
    /// Exits taken on the original path.
    pub exits_original: u64,
    /// Exits taken on a fast path.
    pub exits_fast: u64,
    /// Accesses the trap handler served (no device model involved).
    pub served_at_trap: u64,
    /// Accesses sent to the device model (one ioreq each).
    pub ioreqs: u64,
    /// Of those, forwarded by the fast path's switch (the rest went on the original path).
    pub forwarded_by_trap: u64,
    /// Device-channel notifications for `wake_rx` after a write served at the trap.
    pub wake_notifies: u64,
    /// Device-channel notifications after a trap-served ISR write acknowledged PRX with frames
    /// left in the ring.
    pub unread_notifies: u64,
    /// Exits that found a path selector no path has (served as original).
    pub bad_path: u64,
    /// Times the selected path differed from the previous exit's.
    pub path_changes: u64,
    /// Round trips that failed (the vCPU is failed from the first).
    pub ioreq_errors: u64,
    /// Nanoseconds spent in exits (modelled cost, trap handler and round trips).
    pub exit_ns: u64,
    /// The ioreq client's own counters.
    pub client: ClientStats,
}

/// The vCPU's port I/O: see the module docs.
#[derive(Debug)]
pub struct Vcpu {
    shared: DeviceState<HvmShared>,
    client: IoreqClient,
    device: EvtchnEnd,
    exit: ExitCost,
    mem: Arc<GuestMemory>,
    stats: VcpuStats,
    last_path: Option<Path>,
    error: Option<String>,
}

impl Vcpu {
    /// A vCPU whose exits go through `client` (its ioreq slot and channel), whose trap handler
    /// uses the registers in `shared`, and which talks to the device model's interrupt side over
    /// `device`. `mem` is the guest's memory; it must hold the bounce buffer
    /// ([`crate::MIN_GUEST_PAGES`]).
    pub fn new(
        shared: DeviceState<HvmShared>,
        client: IoreqClient,
        device: EvtchnEnd,
        exit: ExitCost,
        mem: Arc<GuestMemory>,
    ) -> Result<Vcpu, IoreqError> {
        if mem.pages() < crate::MIN_GUEST_PAGES {
            return Err(IoreqError::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "guest memory too small for the bounce buffer",
            )));
        }
        Ok(Vcpu {
            shared,
            client,
            device,
            exit,
            mem,
            stats: VcpuStats::default(),
            last_path: None,
            error: None,
        })
    }

    /// The counters (with the ioreq client's).
    pub fn stats(&self) -> VcpuStats {
        let mut s = self.stats.clone();
        s.client = self.client.stats();
        s
    }

    /// The shared page's contents.
    pub fn shared(&self) -> &HvmShared {
        &self.shared
    }

    /// The device channel: its wait fd becomes readable when the device model raises the
    /// interrupt.
    pub fn device(&self) -> &EvtchnEnd {
        &self.device
    }

    /// The interrupt line as the guest's interrupt controller sees it.
    pub fn irq_line(&self) -> bool {
        self.shared.regs.irq_line()
    }

    /// Why the vCPU failed, if it did.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// The exit cost charged per exit.
    pub fn exit_cost(&self) -> ExitCost {
        self.exit
    }

    /// The path for this exit, counting changes and garbage.
    fn path(&mut self) -> Path {
        let (p, valid) = self.shared.path();
        if !valid {
            self.stats.bad_path += 1;
        }
        if self.last_path.is_some_and(|l| l != p) {
            self.stats.path_changes += 1;
        }
        self.last_path = Some(p);
        match p {
            Path::Original => self.stats.exits_original += 1,
            Path::Fast(_) => self.stats.exits_fast += 1,
        }
        p
    }

    /// A write served at the trap acknowledged ISR.PRX while the ring still holds frames: the
    /// device model must announce them again (see `Card::reannounce`), and it only learns of
    /// a trap-served write through the device channel.
    fn acked_unread(&self, access: Access) -> bool {
        let Access::Write {
            port: 0x07,
            width: Width::W1,
            value,
        } = access
        else {
            return false;
        };
        let r = self.shared.regs.snapshot();
        if value & 0x01 == 0 || r.cr & 0xc0 != 0 || r.pstart >= r.pstop {
            return false;
        }
        let mut next = r.bnry.wrapping_add(1);
        if next >= r.pstop || next < r.pstart {
            next = r.pstart;
        }
        next != r.curr
    }

    /// Steps 1 and 2 of every exit; false when the vCPU has failed (no exit happens).
    fn enter_exit(&mut self, port: u8, write: bool) -> bool {
        if self.error.is_some() {
            return false;
        }
        self.stats.exits.count(Some(u16::from(port)), write);
        self.exit.spend();
        true
    }

    fn round_trip(&mut self, req: &Ioreq) -> Option<u64> {
        self.stats.ioreqs += 1;
        match self.client.round_trip(req) {
            Ok(v) => Some(v),
            Err(e) => {
                self.stats.ioreq_errors += 1;
                self.error = Some(format!("ioreq round trip failed: {e}"));
                None
            }
        }
    }

    /// One single (non-`rep`) access; returns the value read (all ones on failure).
    pub fn access(&mut self, access: Access) -> u32 {
        let t0 = pvnet_hv::exit::now_ns();
        let v = self.access_inner(access);
        self.stats.exit_ns += pvnet_hv::exit::now_ns().saturating_sub(t0);
        v
    }

    fn access_inner(&mut self, access: Access) -> u32 {
        let ones = match access {
            Access::Read { width, .. } | Access::Write { width, .. } => width.mask(),
        };
        if !self.enter_exit(access.port(), access.is_write()) {
            return ones;
        }
        let outcome = match self.path() {
            Path::Original => TrapOutcome::Forward,
            Path::Fast(class) => {
                let o = trap_access(&self.shared.regs, access, class);
                if o == TrapOutcome::Forward {
                    self.stats.forwarded_by_trap += 1;
                }
                o
            }
        };
        match outcome {
            TrapOutcome::Served(c) => {
                self.stats.served_at_trap += 1;
                if c.wake_rx {
                    self.stats.wake_notifies += 1;
                    // A failed notify leaves the frame to the device model's periodic retry.
                    let _ = self.device.notify();
                } else if self.acked_unread(access) {
                    self.stats.unread_notifies += 1;
                    let _ = self.device.notify();
                }
                c.value
            }
            TrapOutcome::Forward => {
                let port = IO_BASE + u16::from(access.port());
                let req = match access {
                    Access::Read { width, .. } => Ioreq::pio_in(port, width.bytes() as u32),
                    Access::Write { width, value, .. } => {
                        Ioreq::pio_out(port, width.bytes() as u32, u64::from(value))
                    }
                };
                match self.round_trip(&req) {
                    Some(v) if !access.is_write() => v as u32 & ones,
                    Some(_) => 0,
                    None => ones,
                }
            }
        }
    }

    /// `rep ins` (`read`) or `rep outs` of `buf` at `port`, `size` bytes per item: one exit
    /// and one ioreq per bounce-buffer-full.
    fn rep(&mut self, port: u8, size: usize, buf: &mut [u8], read: bool) {
        let t0 = pvnet_hv::exit::now_ns();
        let max = BOUNCE_PAGES as usize * PAGE_SIZE;
        let whole = buf.len() / size * size;
        for piece in buf[..whole].chunks_mut(max) {
            self.rep_piece(port, size, piece, read);
        }
        self.stats.exit_ns += pvnet_hv::exit::now_ns().saturating_sub(t0);
    }

    fn rep_piece(&mut self, port: u8, size: usize, piece: &mut [u8], read: bool) {
        if !self.enter_exit(port, !read) {
            piece.fill(0xff);
            return;
        }
        self.stats.rep_exits += 1;
        if let Path::Fast(class) = self.path() {
            let width = Width::from_bytes(size).unwrap_or(Width::W4);
            // Always forwarded (string accesses need card memory); asked as Xen's switch would.
            let _ = trap_rep(&self.shared.regs, port, width, class);
            self.stats.forwarded_by_trap += 1;
        }
        let count = (piece.len() / size) as u32;
        let io_port = IO_BASE + u16::from(port);
        if read {
            let req = Ioreq::pio_ins(io_port, size as u32, count, BOUNCE_GPA, false);
            if self.round_trip(&req).is_some() {
                self.bounce_read(piece);
            } else {
                piece.fill(0xff);
            }
        } else {
            self.bounce_write(piece);
            let req = Ioreq::pio_outs(io_port, size as u32, count, BOUNCE_GPA, false);
            let _ = self.round_trip(&req);
        }
    }

    /// Copies the bounce buffer's first `out.len()` bytes out of guest memory.
    fn bounce_read(&self, out: &mut [u8]) {
        let mut done = 0;
        while done < out.len() {
            let gpa = BOUNCE_GPA as usize + done;
            let (pfn, off) = (gpa / PAGE_SIZE, gpa % PAGE_SIZE);
            let n = (PAGE_SIZE - off).min(out.len() - done);
            // In range: new() checked the memory holds the bounce buffer, and out is no longer.
            let _ = self
                .mem
                .read(Pfn(pfn as u32), off, &mut out[done..done + n]);
            done += n;
        }
    }

    /// Copies `data` into the bounce buffer.
    fn bounce_write(&self, data: &[u8]) {
        let mut done = 0;
        while done < data.len() {
            let gpa = BOUNCE_GPA as usize + done;
            let (pfn, off) = (gpa / PAGE_SIZE, gpa % PAGE_SIZE);
            let n = (PAGE_SIZE - off).min(data.len() - done);
            let _ = self.mem.write(Pfn(pfn as u32), off, &data[done..done + n]);
            done += n;
        }
    }
}

impl PortIo for Vcpu {
    fn inb(&mut self, port: u8) -> u8 {
        self.access(Access::inb(port)) as u8
    }
    fn outb(&mut self, port: u8, value: u8) {
        self.access(Access::outb(port, value));
    }
    fn inw(&mut self, port: u8) -> u16 {
        self.access(Access::inw(port)) as u16
    }
    fn outw(&mut self, port: u8, value: u16) {
        self.access(Access::outw(port, value));
    }
    fn inl(&mut self, port: u8) -> u32 {
        self.access(Access::inl(port))
    }
    fn outl(&mut self, port: u8, value: u32) {
        self.access(Access::outl(port, value));
    }
    fn insl(&mut self, port: u8, buf: &mut [u8]) {
        self.rep(port, 4, buf, true);
    }
    fn outsl(&mut self, port: u8, buf: &[u8]) {
        let mut copy = buf.to_vec();
        self.rep(port, 4, &mut copy, false);
    }
}
