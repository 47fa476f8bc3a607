//! The guest side of a vif: netfront and the guest process around it.

pub mod netfront;
pub mod proto;
pub mod run;
pub mod tapbatch;
pub mod xenbus;
