//! pvnet-guest
