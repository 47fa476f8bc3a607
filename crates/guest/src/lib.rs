//! The guest side of a vif: netfront (the frontend's ring logic, with no process or event loop
//! inside, so tests drive it in-process beside a real netback), the xenbus client and the
//! frontend's handshake, the guest process the toolstack starts in the guest's namespace (boot
//! from a message on its control socket, open the TAP that stands for the guest kernel's NIC,
//! move packets between the TAP and the rings), and the batched TAP writer. The last two are
//! the `tap` feature (on by default); without it the crate is the frontend and its protocols
//! alone.

pub mod netfront;
pub mod proto;
pub mod reconnect;
#[cfg(feature = "tap")]
pub mod run;
#[cfg(feature = "tap")]
pub mod tapbatch;
pub mod xenbus;
