//! pvnet-testbed
