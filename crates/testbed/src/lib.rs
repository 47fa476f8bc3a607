//! pvnet-testbed: the test hosts and the kernel plumbing behind them.
//!
//! Network namespaces (`netns`), links and addresses over rtnetlink (`link`), offload
//! switches over the legacy ethtool ioctl (`ethtool`), TAP devices (`tap`), sysfs and sysctl
//! access inside a namespace (`sys`), CPU pinning (`cpu`), ending the processes that run in a
//! namespace (`procs`) and the standard pvnet testbed (`topology`): a remote host, a driver
//! domain and guests, each in a namespace of its own.
//!
//! Nothing here shells out to `ip`, `ethtool` or any other tool. Every function that touches
//! the network acts in the network namespace of the calling thread unless it takes a
//! [`netns::Netns`].

pub mod cpu;
pub mod ethtool;
pub mod link;
pub mod netns;
pub mod procs;
pub mod runid;
pub mod sys;
pub mod tap;
pub mod topology;

/// The result type of this crate.
pub type Result<T> = anyhow::Result<T>;

pub use netns::{list_netns, Netns};
pub use runid::RunId;
pub use tap::Tap;
pub use topology::{
    cleanup_run, end_run_processes, teardown_run, RunTeardown, Testbed, TestbedConfig,
};
