//! pvnet-pnic
