//! The trap handler's side of the fast path: serve an access from the shared registers, or say
//! it must go to the device model.
//!
//! Contract: [`trap_access`] never needs card memory. When it returns
//! [`TrapOutcome::Served`] it has performed the access exactly as [`Card::dm_access`] would
//! have (both call the same register code), including ISR/IMR side effects, and returns the
//! interrupt line recomputed after it and whether a held frame should be retried
//! ([`Completion::wake_rx`]: set after a BNRY write, or any other write, that gives a blocked
//! receive room). When it returns [`TrapOutcome::Forward`] it has changed nothing; the caller
//! passes the same access to [`Card::dm_access`].
//!
//! Always forwarded (need card memory): data-port accesses (0x10), reset-port reads (0x1f), and
//! CR writes with TXP and STP clear. Also forwarded by both classes: reset-port writes, and
//! writes to CURR (page 1, 0x07) because the device model's receive path owns CURR.
//!
//! - [`Class::Seed`], the paper's rule: every register *read* is served; writes to *state*
//!   registers (TPSR, TBCR0/1, RSAR0/1, RBCR0/1, PAR0-5, MAR0-7) are served; every write to a
//!   *control* register (CR, PSTART, PSTOP, BNRY, ISR, RCR, TCR, DCR, IMR, CURR, and any page 2
//!   or 3 register) is forwarded.
//! - [`Class::Max`]: everything that needs no card memory is served: CR writes (page select,
//!   start/stop, remote-DMA start/abort: starting a remote DMA moves no data in this model, the
//!   data moves on data-port accesses, which are forwarded), ISR acknowledge, IMR, BNRY, PSTART,
//!   PSTOP, RCR, TCR, DCR and the state registers. Forwarded: the always-forwarded set above.
//!
//! Accesses outside 0x00..=0x1f, or of a width other than 1 on 0x00..=0x0f, do nothing but read
//! all ones; both classes serve them. `rep` string accesses ([`trap_rep`]) are always
//! forwarded.
//!
//! [`Card::dm_access`]: crate::Card::dm_access

use crate::regs::{field, port};
use crate::shared::{needs_card, register_access, SharedRegs};
use crate::{Access, Completion, Width};

/// Which accesses the trap handler serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// The paper's rule: reads and state-register writes at the trap, control writes forwarded.
    Seed,
    /// Everything that needs no card memory at the trap.
    Max,
}

/// The trap handler's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrapOutcome {
    /// Done at the trap.
    Served(Completion),
    /// Untouched: hand the access to the device model.
    Forward,
}

/// Serve `access` at the trap if `class` allows and it needs no card memory.
pub fn trap_access(shared: &SharedRegs, access: Access, class: Class) -> TrapOutcome {
    let access = access.normalised();
    if needs_card(access) || forwarded_by_class(shared, access, class) {
        return TrapOutcome::Forward;
    }
    TrapOutcome::Served(register_access(shared, access))
}

/// A `rep ins/outs` string access: always forwarded (both classes), so one trap per string.
pub fn trap_rep(_shared: &SharedRegs, _port: u8, _width: Width, _class: Class) -> TrapOutcome {
    TrapOutcome::Forward
}

fn forwarded_by_class(shared: &SharedRegs, access: Access, class: Class) -> bool {
    let Access::Write { port: p, width, .. } = access else {
        return false;
    };
    if p == port::RESET {
        return true;
    }
    if p >= 0x10 || width != Width::W1 {
        return false;
    }
    if p == port::CR {
        // TXP was caught by needs_card; Max serves the rest.
        return class == Class::Seed;
    }
    let offset = p | shared.page() << 4;
    if offset == field::CURR {
        return true;
    }
    match class {
        Class::Max => false,
        Class::Seed => is_control(offset),
    }
}

/// Control registers for [`Class::Seed`] (offset = port | page << 4, port != 0).
fn is_control(offset: u8) -> bool {
    matches!(
        offset,
        field::PSTART
            | field::PSTOP
            | field::BNRY
            | field::ISR
            | field::RCR
            | field::TCR
            | field::DCR
            | field::IMR
            | field::CURR
    ) || offset >= 0x20
}

/// Where accesses were served, for the fast path's accounting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrapStats {
    /// Reads served at the trap.
    pub served_reads: u64,
    /// Writes served at the trap.
    pub served_writes: u64,
    /// Reads forwarded to the device model.
    pub forwarded_reads: u64,
    /// Writes forwarded to the device model.
    pub forwarded_writes: u64,
    /// `rep` string accesses (always forwarded; one trap each).
    pub forwarded_reps: u64,
    /// Served writes that said `wake_rx`.
    pub wakes: u64,
}

impl TrapStats {
    /// Count one single access and its outcome.
    pub fn record(&mut self, access: Access, outcome: &TrapOutcome) {
        match (outcome, access.is_write()) {
            (TrapOutcome::Served(c), true) => {
                self.served_writes += 1;
                self.wakes += u64::from(c.wake_rx);
            }
            (TrapOutcome::Served(_), false) => self.served_reads += 1,
            (TrapOutcome::Forward, true) => self.forwarded_writes += 1,
            (TrapOutcome::Forward, false) => self.forwarded_reads += 1,
        }
    }

    /// Traps served at the trap handler.
    pub fn served(&self) -> u64 {
        self.served_reads + self.served_writes
    }

    /// Traps that went to the device model.
    pub fn forwarded(&self) -> u64 {
        self.forwarded_reads + self.forwarded_writes + self.forwarded_reps
    }

    /// All traps.
    pub fn total(&self) -> u64 {
        self.served() + self.forwarded()
    }
}
