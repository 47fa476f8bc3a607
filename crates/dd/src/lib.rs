//! The driver domain: physical port, bridge, netback, and the daemon core that joins them.

pub mod bridge;
pub mod gate;
pub mod lro;
pub mod mock;
pub mod netback;
pub mod nf;
pub mod packet;
pub mod route;
pub mod switch;
