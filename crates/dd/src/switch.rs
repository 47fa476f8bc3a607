//! The driver domain's switching alternatives behind one face (seed 003, "Bridge optimization"):
//! the learning bridge (`crate::bridge`), the bridge with a per-packet filter pass standing for
//! bridge netfilter (`crate::nf`), and netback MAC routing (`crate::route`). The daemon calls
//! [`Switch::input`] per frame and carries out the [`Decision`], whichever mode runs.
//!
//! Contract:
//! - A frame shorter than an Ethernet header is dropped first (`Drop(Runt)`, counted in `runts`)
//!   in every mode.
//! - `Forward(p)`: in `bridge-nf` the filter then decides the frame from the ingress to `p`
//!   (after learning, like Linux's `NF_BR_FORWARD` hook, which runs after `br_fdb_update`); a
//!   drop becomes `Drop(Filtered)` and counts in `filtered`.
//! - `Flood`: [`Switch::flood_ports`] gives the ports a copy goes to: every port but the
//!   ingress (the bridge's attached ports, or the routing table's), and in `bridge-nf` only
//!   those the filter accepts for that copy (Linux runs the hook once per flooded clone); each
//!   refused copy counts in `filtered`.
//! - Ports follow the daemon's numbering: [`PORT_PHYSICAL`], [`PORT_OWN`], [`vif_port`].
//!   The bridge takes any port; the routing table needs to know each port's role and a vif's
//!   MAC up front, so ports are added by role ([`Switch::add_physical`], [`Switch::add_own`],
//!   [`Switch::add_vif`]).

use std::fmt;
use std::str::FromStr;

use pvnet_wire::ethernet::{MacAddr, HEADER_LEN};

use crate::bridge::{Bridge, BridgeConfig, BridgeStats, Decision, DropReason, PortId};
use crate::nf::{Action, Filter, FilterStats};
use crate::packet::Packet;
use crate::route::{RouteError, RouteStats, RouteTable};

/// The physical port.
pub const PORT_PHYSICAL: PortId = PortId(0);
/// The driver domain's own stack (a TAP in its namespace).
pub const PORT_OWN: PortId = PortId(1);

/// The vif of guest `domid` (1 + domid; Xen domids stay below `DOMID_FIRST_RESERVED`, 0x7ff0).
pub fn vif_port(domid: u16) -> PortId {
    PortId(domid.saturating_add(1))
}

/// Which alternative forwards the frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// The learning bridge.
    Bridge,
    /// The learning bridge plus the filter pass.
    BridgeNf,
    /// Netback MAC routing.
    Route,
}

impl Mode {
    pub const ALL: [Mode; 3] = [Mode::Bridge, Mode::BridgeNf, Mode::Route];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Bridge => "bridge",
            Mode::BridgeNf => "bridge-nf",
            Mode::Route => "route",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown switching mode `{0}` (bridge, bridge-nf or route)")]
pub struct ParseModeError(pub String);

impl FromStr for Mode {
    type Err = ParseModeError;

    fn from_str(s: &str) -> Result<Mode, ParseModeError> {
        Mode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| ParseModeError(s.to_string()))
    }
}

#[derive(Debug)]
enum Core {
    Bridge(Bridge),
    Route(RouteTable),
}

/// Counters of the switch and of the alternative that runs (the others are `None`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SwitchStats {
    pub mode: Mode,
    /// Frames shorter than an Ethernet header.
    pub runts: u64,
    /// Forwarded frames and flooded copies the filter dropped.
    pub filtered: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bridge: Option<BridgeStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub route: Option<RouteStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter: Option<FilterStats>,
}

#[derive(Debug)]
pub struct Switch {
    mode: Mode,
    core: Core,
    /// Present in `bridge-nf` only.
    filter: Option<Filter>,
    runts: u64,
    filtered: u64,
}

impl Switch {
    /// A switch in `mode`; `bridge-nf` filters with the default rule set
    /// ([`crate::nf::DEFAULT_RULES`]); `cfg` is used by the bridge modes.
    pub fn new(mode: Mode, cfg: BridgeConfig) -> Switch {
        match mode {
            Mode::Bridge => Switch::build(mode, Core::Bridge(Bridge::new(cfg)), None),
            Mode::BridgeNf => Switch::bridge_nf(cfg, Filter::default_rules()),
            Mode::Route => Switch::build(mode, Core::Route(RouteTable::new()), None),
        }
    }

    /// The bridge with the filter pass `filter`.
    pub fn bridge_nf(cfg: BridgeConfig, filter: Filter) -> Switch {
        Switch::build(Mode::BridgeNf, Core::Bridge(Bridge::new(cfg)), Some(filter))
    }

    fn build(mode: Mode, core: Core, filter: Option<Filter>) -> Switch {
        Switch {
            mode,
            core,
            filter,
            runts: 0,
            filtered: 0,
        }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Adds the physical port.
    pub fn add_physical(&mut self, port: PortId) -> Result<(), RouteError> {
        match &mut self.core {
            Core::Bridge(b) => {
                b.add_port(port);
                Ok(())
            }
            Core::Route(r) => r.set_physical(port),
        }
    }

    /// Adds the driver domain's own stack port, whose MAC is `mac` (the bridge learns it).
    pub fn add_own(&mut self, port: PortId, mac: MacAddr) -> Result<(), RouteError> {
        match &mut self.core {
            Core::Bridge(b) => {
                b.add_port(port);
                Ok(())
            }
            Core::Route(r) => r.set_own(port, mac),
        }
    }

    /// Adds a guest's vif whose MAC is `mac`. The bridge only attaches the port (it pins the
    /// MAC at [`Switch::set_static`], when the frontend connects, as before); the routing table
    /// registers the MAC now and refuses a vif twice or a MAC twice.
    pub fn add_vif(&mut self, port: PortId, mac: MacAddr) -> Result<(), RouteError> {
        match &mut self.core {
            Core::Bridge(b) => {
                b.add_port(port);
                Ok(())
            }
            Core::Route(r) => r.add_vif(port, mac),
        }
    }

    /// Pins `mac` to `port` (the bridge's static entry). The routing table has no entry to add:
    /// it answers whether `mac` is what it already holds for vif `port`.
    pub fn set_static(&mut self, mac: MacAddr, port: PortId) -> bool {
        match &mut self.core {
            Core::Bridge(b) => b.set_static(mac, port),
            Core::Route(r) => r.vif_mac(port) == Some(mac),
        }
    }

    /// Removes a port (and, in the bridge, every entry on it).
    pub fn remove_port(&mut self, port: PortId) {
        match &mut self.core {
            Core::Bridge(b) => b.remove_port(port),
            Core::Route(r) => {
                r.remove_port(port);
            }
        }
    }

    pub fn has_port(&self, port: PortId) -> bool {
        match &self.core {
            Core::Bridge(b) => b.has_port(port),
            Core::Route(r) => r.has_port(port),
        }
    }

    /// Every port, ascending.
    pub fn ports(&self) -> Vec<PortId> {
        match &self.core {
            Core::Bridge(b) => b.ports().collect(),
            Core::Route(r) => r.ports().collect(),
        }
    }

    /// Decides where `pkt`, received on `ingress`, goes (see the module doc). Only the head
    /// (which holds the headers) is read; the byte counters count the whole packet.
    pub fn input(&mut self, ingress: PortId, pkt: &Packet, now_ns: u64) -> Decision {
        self.input_frame(ingress, &pkt.head, pkt.len(), now_ns)
    }

    /// [`Switch::input`] for a frame given as bytes that hold its headers and its total length.
    pub fn input_frame(
        &mut self,
        ingress: PortId,
        frame: &[u8],
        len: usize,
        now_ns: u64,
    ) -> Decision {
        if frame.len() < HEADER_LEN {
            self.runts += 1;
            return Decision::Drop(DropReason::Runt);
        }
        let dst = MacAddr::from_slice(&frame[0..6]).expect("checked length");
        let src = MacAddr::from_slice(&frame[6..12]).expect("checked length");
        let d = match &mut self.core {
            Core::Bridge(b) => b.input(ingress, src, dst, now_ns),
            Core::Route(r) => r.decide(ingress, src, dst),
        };
        if let (Decision::Forward(out), Some(f)) = (d, &mut self.filter) {
            if f.check(ingress, out, frame, len).action == Action::Drop {
                self.filtered += 1;
                return Decision::Drop(DropReason::Filtered);
            }
        }
        d
    }

    /// After `Flood`: fills `out` with the ports that get a copy of `pkt` (see the module doc).
    pub fn flood_ports(&mut self, ingress: PortId, pkt: &Packet, out: &mut Vec<PortId>) {
        self.flood_ports_frame(ingress, &pkt.head, pkt.len(), out)
    }

    /// [`Switch::flood_ports`] for a frame given as bytes and its total length.
    pub fn flood_ports_frame(
        &mut self,
        ingress: PortId,
        frame: &[u8],
        len: usize,
        out: &mut Vec<PortId>,
    ) {
        out.clear();
        match &self.core {
            Core::Bridge(b) => out.extend(b.ports().filter(|p| *p != ingress)),
            Core::Route(r) => out.extend(r.ports().filter(|p| *p != ingress)),
        }
        if let Some(f) = &mut self.filter {
            let before = out.len();
            out.retain(|p| f.check(ingress, *p, frame, len).action == Action::Accept);
            self.filtered += (before - out.len()) as u64;
        }
    }

    /// Ages the bridge's table (nothing ages in the routing table); returns entries removed.
    pub fn age(&mut self, now_ns: u64) -> usize {
        match &mut self.core {
            Core::Bridge(b) => b.age(now_ns),
            Core::Route(_) => 0,
        }
    }

    pub fn bridge(&self) -> Option<&Bridge> {
        match &self.core {
            Core::Bridge(b) => Some(b),
            Core::Route(_) => None,
        }
    }

    pub fn route(&self) -> Option<&RouteTable> {
        match &self.core {
            Core::Route(r) => Some(r),
            Core::Bridge(_) => None,
        }
    }

    pub fn filter(&self) -> Option<&Filter> {
        self.filter.as_ref()
    }

    pub fn stats(&self) -> SwitchStats {
        SwitchStats {
            mode: self.mode,
            runts: self.runts,
            filtered: self.filtered,
            bridge: self.bridge().map(Bridge::stats),
            route: self.route().map(RouteTable::stats),
            filter: self.filter.as_ref().map(Filter::stats),
        }
    }
}
