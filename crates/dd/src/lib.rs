//! The driver domain: physical port, receive aggregation (`lro`), bridge, netback, and the
//! data path that joins them (`datapath`), free of any event loop or process so that it runs
//! in the `pvnet` daemon and, with the `mock` feature's port, clock and frontend, in tests.

pub mod bridge;
pub mod capture;
pub mod datapath;
pub mod gate;
pub mod lro;
#[cfg(feature = "mock")]
pub mod mock;
pub mod netback;
pub mod packet;
pub mod xenbus;
