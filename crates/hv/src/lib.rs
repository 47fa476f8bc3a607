//! pvnet-hv
