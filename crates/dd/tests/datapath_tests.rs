//! The data path's tests, in one test binary (one link instead of one per file): each module
//! drives netback, the LRO engine, the switch and the port through the `mock` feature, in one
//! process. Run one module with `cargo test --release -p pvnet-dd --test datapath_tests
//! <module>::`. `switch_no_alloc` stays a binary of its own: its global allocator counts
//! allocations.

mod dp_common;
mod lro_common;
mod ring_common;

mod arrival_times;
mod caps;
mod capture;
mod datapath;
mod flip;
mod g2g;
mod grant_mechanisms;
mod guests_served;
mod lro_policy;
mod lro_prop;
mod lro_rules;
mod mock_reconnect;
mod pool_mechanisms;
mod port_gro;
mod rate;
mod restart_ring;
mod ring_path;
