//! pvnet-dd
