//! pvnet-perf
