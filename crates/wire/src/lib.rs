//! Packet views and checksums for pvnet: Ethernet, IPv4, TCP and the `virtio_net_hdr` that the
//! kernel puts in front of frames on TAP devices and `PACKET_VNET_HDR` sockets.
//!
//! Contract (after smoltcp's `wire`): untrusted bytes go through `new_checked`; once it has
//! succeeded no accessor panics.

pub mod vnet;

pub use vnet::VirtioNetHdr;
