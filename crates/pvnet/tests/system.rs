//! The system tests of the `pvnet` command, in one test binary (one build and link instead of
//! twenty): each module drives the real `pvnet` binary through one capability, most of them
//! as root, one test at a time ([`common::SERIAL`]). Run one module with
//! `cargo test --release -p pvnet --test system <module>::`.

mod common;

mod admin;
mod capture;
mod consolidation;
mod down;
mod e2e;
mod g2g;
mod grant_e2e;
mod gro;
mod guest_cgroups;
mod hostile;
mod hvm;
mod jumbo;
mod lro;
mod many;
mod pool_refusal;
mod port_tx;
mod rate;
mod relay;
mod restart;
mod scaling;
mod soak;
mod switch;
