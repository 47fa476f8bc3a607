//! The driver domain: physical port, receive aggregation (`lro`), the switch (a learning
//! bridge, optionally with a netfilter-like rule pass, or netback MAC routing), netback, and the
//! data path that joins them (`datapath`), free of any event loop or process so that it runs
//! in the `pvnet` daemon and, with the `mock` feature's port, clock and frontend, in tests.

pub mod bridge;
pub mod capture;
pub mod datapath;
pub mod frameport;
pub mod gate;
pub mod lro;
#[cfg(feature = "mock")]
pub mod mock;
pub mod netback;
pub mod nf;
pub mod packet;
pub mod pool;
pub mod portvnet;
pub mod route;
pub mod switch;
pub mod xenbus;
