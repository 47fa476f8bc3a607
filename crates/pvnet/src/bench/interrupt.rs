//! Ctrl-C (and SIGTERM, SIGHUP) during a bench: the handler only records the signal; the bench
//! notices at its next check, stops what runs, tears the current testbed down and exits
//! non-zero. Nothing is left behind because teardown runs in the normal code path, not in the
//! handler.

use std::sync::atomic::{AtomicI32, Ordering};

use nix::sys::signal::{self, SaFlags, SigAction, SigHandler, SigSet, Signal};

static CAUGHT: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    // Async-signal-safe: one atomic store.
    CAUGHT.store(sig, Ordering::SeqCst);
}

/// The error a bench returns once interrupted.
#[derive(Debug)]
pub struct Interrupted(pub &'static str);

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "interrupted by {}", self.0)
    }
}

impl std::error::Error for Interrupted {}

/// Installs the handlers (idempotent).
pub fn install() -> anyhow::Result<()> {
    let act = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        // SAFETY: the handler makes one atomic store, which is async-signal-safe, and touches
        // no other state.
        unsafe { signal::sigaction(sig, &act) }?;
    }
    Ok(())
}

/// Errs with [`Interrupted`] once a signal has arrived.
pub fn check() -> Result<(), Interrupted> {
    match CAUGHT.load(Ordering::SeqCst) {
        0 => Ok(()),
        libc::SIGINT => Err(Interrupted("SIGINT (Ctrl-C)")),
        libc::SIGTERM => Err(Interrupted("SIGTERM")),
        _ => Err(Interrupted("SIGHUP")),
    }
}
