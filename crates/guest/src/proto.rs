//! Messages between the toolstack (the daemon) and a guest process over the guest's control
//! socket (`pvnet_hv::ctl`, one JSON message per datagram, file descriptors alongside).

use pvnet_hv::store::{XsReply, XsRequest};
use serde::{Deserialize, Serialize};

use crate::netfront::FrontStats;

/// What the toolstack tells a guest when it builds it. Sent with three file descriptors:
/// the guest memory memfd, the event channel's notify eventfd and its wait eventfd.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BootInfo {
    pub domid: u16,
    pub mem_pages: u32,
    pub grant_frames: u32,
    /// The frontend's xenstore directory, e.g. `/local/domain/1/device/vif/0`.
    pub device_path: String,
    /// Event channel port number of the vif (written to `event-channel`).
    pub evtchn_port: u32,
    /// Name of the guest's network interface (the TAP).
    pub ifname: String,
    /// IPv4 address and prefix of the guest's interface.
    pub ipv4: String,
    pub prefix: u8,
    /// Whether netfront advertises `feature-gso-tcpv4/6` (where the backend offers them). A
    /// guest without them must never be handed an aggregate.
    #[serde(default = "yes")]
    pub gso: bool,
    /// MTU of the guest's interface (the toolstack's `--mtu`; 1500 from one that predates it).
    #[serde(default = "default_mtu")]
    pub mtu: u32,
    /// Open the guest's TAP with `IFF_NAPI`, so that the guest kernel's GRO coalesces the
    /// frames netfront writes (the `guest-gro` configuration: GRO in the guest's virtual NIC).
    /// Off by default: then each written frame goes up the guest's stack as it is.
    #[serde(default)]
    pub gro: bool,
    /// Page flipping: the guest's flip window (its RX buffers are machine frames; the machine
    /// memfd comes as a fourth descriptor). `None` for every other grant mechanism.
    #[serde(default)]
    pub flip: Option<FlipBoot>,
}

/// The flip window a guest boots with (`pvnet_hv::frames`): pfns `first_pfn..` are backed by
/// the machine frames `p2m` names.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlipBoot {
    pub first_pfn: u32,
    pub p2m: Vec<u32>,
}

fn yes() -> bool {
    true
}

fn default_mtu() -> u32 {
    1500
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum ToGuest {
    Boot(BootInfo),
    Xs(XsReply),
    Watch {
        path: String,
        token: String,
    },
    /// Stop: the guest answers with its final stats and exits.
    Shutdown,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum FromGuest {
    Xs(XsRequest),
    /// The frontend is connected and its interface is up.
    Ready,
    Stats(FrontStats),
    /// Something went wrong; the guest exits after sending this.
    Failed(String),
}
