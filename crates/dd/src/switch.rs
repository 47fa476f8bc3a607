//! The driver domain's switching alternatives behind one face (Santos, Janakiraman and Turner, "Bridge optimization"):
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
//!   The bridge takes any port; the routing table needs each port's role and a vif's MAC, so
//!   ports are added by role ([`Switch::add_physical`], [`Switch::add_own`],
//!   [`Switch::add_vif`]), or a vif by number first ([`Switch::add_port`]) and by MAC when its
//!   frontend connects ([`Switch::set_static`], which pins the MAC in the bridge).

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
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// The learning bridge.
    #[default]
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

    /// Attaches a port by number only, as the bridge does (`Bridge::add_port`). The routing
    /// table needs a role and a MAC, so it takes nothing here: a vif attached this way is
    /// routed once [`Switch::set_static`] gives its MAC (until then frames from it are
    /// `NoSuchPort` and none go to it, as frames for a vif without a frontend are lost in the
    /// bridge too).
    pub fn add_port(&mut self, port: PortId) {
        if let Core::Bridge(b) = &mut self.core {
            b.add_port(port);
        }
    }

    /// Pins `mac` to vif `port` (the bridge's static entry; false when the port is not
    /// attached or the MAC not unicast). The routing table registers the vif if it has not
    /// already ([`Switch::add_vif`]); false when that is refused, or when the port is already a
    /// vif with another MAC.
    pub fn set_static(&mut self, mac: MacAddr, port: PortId) -> bool {
        match &mut self.core {
            Core::Bridge(b) => b.set_static(mac, port),
            Core::Route(r) => match r.vif_mac(port) {
                Some(m) => m == mac,
                None => r.add_vif(port, mac).is_ok(),
            },
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
        // The length (a walk over a chain's pieces) is only needed for the filter's counters.
        let len = if self.filter.is_some() { pkt.len() } else { 0 };
        self.input_frame(ingress, &pkt.head, len, now_ns)
    }

    /// [`Switch::input`] for a frame given as bytes that hold its headers and its total length
    /// (used only by the filter's byte counters).
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nf::tests::{
        arp_frame, benchmark_frames, eth, guest_ip, guest_mac, tcp, tcp4_frame, v4, ACK, PSH,
        REMOTE_IP, REMOTE_MAC,
    };
    use pvnet_wire::ethernet::ETHERTYPE_IPV4;
    use pvnet_wire::VirtioNetHdr;

    const OWN_MAC: MacAddr = MacAddr([0x02, 0x70, 0x76, 0, 0, 2]);
    const VIF1: PortId = PortId(2);
    const VIF2: PortId = PortId(3);

    /// A switch with the physical port, the driver domain's port and guests 1 and 2 (pinned).
    fn switch(mode: Mode) -> Switch {
        let mut s = Switch::new(mode, BridgeConfig::default());
        s.add_physical(PORT_PHYSICAL).unwrap();
        s.add_own(PORT_OWN, OWN_MAC).unwrap();
        for d in 1..=2u8 {
            let (p, m) = (vif_port(u16::from(d)), MacAddr(guest_mac(d)));
            s.add_vif(p, m).unwrap();
            assert!(s.set_static(m, p));
        }
        s
    }

    fn pkt(frame: Vec<u8>) -> Packet {
        Packet::linear(VirtioNetHdr::default(), frame)
    }

    #[test]
    fn modes_parse_and_print() {
        for m in Mode::ALL {
            assert_eq!(m.to_string().parse::<Mode>(), Ok(m));
        }
        assert_eq!("bridge-nf".parse::<Mode>(), Ok(Mode::BridgeNf));
        let e = "switch".parse::<Mode>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown switching mode `switch` (bridge, bridge-nf or route)"
        );
        assert_eq!(vif_port(1), VIF1);
        assert_eq!(vif_port(u16::MAX), PortId(u16::MAX));
    }

    #[test]
    fn every_mode_forwards_known_unicast() {
        for mode in Mode::ALL {
            let mut s = switch(mode);
            assert_eq!(s.mode(), mode);
            assert_eq!(
                s.ports(),
                vec![PORT_PHYSICAL, PORT_OWN, VIF1, VIF2],
                "{mode}"
            );
            let to_guest = pkt(tcp4_frame(PSH | ACK));
            assert_eq!(
                s.input(PORT_PHYSICAL, &to_guest, 0),
                Decision::Forward(VIF1),
                "{mode}"
            );
            let st = s.stats();
            assert_eq!(st.mode, mode);
            assert_eq!((st.runts, st.filtered), (0, 0));
            match mode {
                Mode::Bridge | Mode::BridgeNf => {
                    assert_eq!(st.bridge.unwrap().forwarded, 1);
                    assert!(st.route.is_none());
                }
                Mode::Route => {
                    assert_eq!(st.route.unwrap().forwarded, 1);
                    assert!(st.bridge.is_none());
                }
            }
            // Only bridge-nf runs the filter; it counted the frame's whole length once.
            match st.filter {
                Some(f) => {
                    assert_eq!(mode, Mode::BridgeNf);
                    assert_eq!(f.accepted, 1);
                    let hit: Vec<_> = f.rules.iter().filter(|r| r.packets > 0).collect();
                    assert_eq!(hit.len(), 1);
                    assert_eq!(hit[0].bytes, to_guest.len() as u64);
                }
                None => assert_ne!(mode, Mode::BridgeNf),
            }
        }
    }

    #[test]
    fn unknown_unicast_floods_in_the_bridge_and_goes_out_when_routed() {
        let from_guest = pkt(eth(
            REMOTE_MAC,
            guest_mac(1),
            ETHERTYPE_IPV4,
            &v4(guest_ip(1), REMOTE_IP, 6, &tcp(5201, 40000, ACK)),
        ));
        let mut out = Vec::new();
        for mode in [Mode::Bridge, Mode::BridgeNf] {
            let mut s = switch(mode);
            assert_eq!(s.input(VIF1, &from_guest, 0), Decision::Flood);
            s.flood_ports(VIF1, &from_guest, &mut out);
            assert_eq!(out, vec![PORT_PHYSICAL, PORT_OWN, VIF2], "{mode}");
            // Once the remote host has spoken, the bridge knows where it is.
            let reply = pkt(tcp4_frame(ACK));
            assert_eq!(s.input(PORT_PHYSICAL, &reply, 1), Decision::Forward(VIF1));
            assert_eq!(
                s.input(VIF1, &from_guest, 2),
                Decision::Forward(PORT_PHYSICAL)
            );
        }
        let mut s = switch(Mode::Route);
        assert_eq!(
            s.input(VIF1, &from_guest, 0),
            Decision::Forward(PORT_PHYSICAL)
        );
        assert_eq!(s.stats().route.unwrap().unknown_to_physical, 1);
    }

    #[test]
    fn broadcast_floods_everywhere_but_the_ingress_in_every_mode() {
        let mut out = vec![PortId(99)];
        for mode in Mode::ALL {
            let mut s = switch(mode);
            for (ingress, src) in [
                (PORT_PHYSICAL, REMOTE_MAC),
                (VIF2, guest_mac(2)),
                (PORT_OWN, OWN_MAC.0),
            ] {
                let a = pkt(arp_frame(src));
                assert_eq!(s.input(ingress, &a, 0), Decision::Flood, "{mode}");
                s.flood_ports(ingress, &a, &mut out);
                let want: Vec<PortId> = [PORT_PHYSICAL, PORT_OWN, VIF1, VIF2]
                    .into_iter()
                    .filter(|p| *p != ingress)
                    .collect();
                assert_eq!(out, want, "{mode} from {ingress:?}");
            }
            assert_eq!(s.stats().filtered, 0);
        }
    }

    #[test]
    fn runts_are_dropped_and_counted_in_every_mode() {
        for mode in Mode::ALL {
            let mut s = switch(mode);
            for n in [0, 12, 13] {
                let f = &tcp4_frame(ACK)[..n];
                assert_eq!(
                    s.input_frame(PORT_PHYSICAL, f, n, 0),
                    Decision::Drop(DropReason::Runt)
                );
            }
            let st = s.stats();
            assert_eq!(st.runts, 3, "{mode}");
            // Nothing reached the bridge, the table or the filter.
            if let Some(b) = st.bridge {
                assert_eq!(b, BridgeStats::default());
            }
            if let Some(r) = st.route {
                assert_eq!(r, RouteStats::default());
            }
            if let Some(f) = st.filter {
                assert_eq!(f.accepted + f.dropped, 0);
            }
        }
    }

    #[test]
    fn bridge_nf_drops_by_rule_after_learning() {
        let rules =
            Filter::parse("drop out vif1 proto tcp dport 22\ndrop out vif2 dst-mac broadcast\n")
                .unwrap();
        let mut s = Switch::bridge_nf(BridgeConfig::default(), rules);
        s.add_physical(PORT_PHYSICAL).unwrap();
        s.add_own(PORT_OWN, OWN_MAC).unwrap();
        s.add_vif(VIF1, MacAddr(guest_mac(1))).unwrap();
        s.add_vif(VIF2, MacAddr(guest_mac(2))).unwrap();
        assert!(s.set_static(MacAddr(guest_mac(1)), VIF1));
        let ssh = pkt(eth(
            guest_mac(1),
            REMOTE_MAC,
            ETHERTYPE_IPV4,
            &v4(REMOTE_IP, guest_ip(1), 6, &tcp(40000, 22, 0x02)),
        ));
        assert_eq!(
            s.input(PORT_PHYSICAL, &ssh, 0),
            Decision::Drop(DropReason::Filtered)
        );
        assert_eq!(s.stats().filtered, 1);
        // The bridge learned the source before the filter dropped the frame (as Linux does).
        assert_eq!(
            s.bridge().unwrap().lookup(MacAddr(REMOTE_MAC), 0),
            Some(PORT_PHYSICAL)
        );
        let f = s.filter().unwrap();
        assert_eq!(f.rule_hits(0).unwrap().packets, 1);
        // A flooded copy is filtered per port: vif2 gets no broadcast, the others do.
        let a = pkt(arp_frame(REMOTE_MAC));
        assert_eq!(s.input(PORT_PHYSICAL, &a, 0), Decision::Flood);
        let mut out = Vec::new();
        s.flood_ports(PORT_PHYSICAL, &a, &mut out);
        assert_eq!(out, vec![PORT_OWN, VIF1]);
        let st = s.stats();
        assert_eq!(st.filtered, 2);
        let f = st.filter.unwrap();
        assert_eq!((f.accepted, f.dropped), (2, 2));
        assert_eq!(f.rules[1].packets, 1);
        // Traffic the rules let through is forwarded.
        assert_eq!(
            s.input(PORT_PHYSICAL, &pkt(tcp4_frame(ACK)), 0),
            Decision::Forward(VIF1)
        );
        assert_eq!(s.stats().filtered, 2);
    }

    #[test]
    fn bridge_nf_default_rules_pass_the_benchmark() {
        let mut s = switch(Mode::BridgeNf);
        let mut out = Vec::new();
        for d in 1..=2u8 {
            for (name, i, o, frame) in benchmark_frames(d) {
                let p = pkt(frame);
                match s.input(i, &p, 0) {
                    Decision::Forward(to) => assert_eq!(to, o, "guest {d} {name}"),
                    Decision::Flood => {
                        s.flood_ports(i, &p, &mut out);
                        assert!(out.contains(&o), "guest {d} {name}: {out:?}");
                        assert_eq!(out.len(), 3, "guest {d} {name}: {out:?}");
                    }
                    other => panic!("guest {d} {name}: {other:?}"),
                }
            }
        }
        let st = s.stats();
        assert_eq!(st.filtered, 0);
        assert_eq!(st.filter.unwrap().dropped, 0);
    }

    #[test]
    fn route_mode_refuses_spoofing_and_conflicts() {
        let mut s = switch(Mode::Route);
        let spoof = pkt(eth(REMOTE_MAC, guest_mac(2), ETHERTYPE_IPV4, &[0x45; 20]));
        assert_eq!(
            s.input(VIF1, &spoof, 0),
            Decision::Drop(DropReason::Spoofed)
        );
        assert_eq!(s.stats().route.unwrap().dropped_spoofed, 1);
        assert!(matches!(
            s.add_vif(PortId(9), MacAddr(guest_mac(1))),
            Err(RouteError::MacInUse { owner: VIF1, .. })
        ));
        // set_static on a registered vif checks what the table holds.
        assert!(s.set_static(MacAddr(guest_mac(1)), VIF1));
        assert!(!s.set_static(MacAddr(guest_mac(2)), VIF1));
        // A port attached by number only is not routed until set_static gives its MAC.
        let vif3 = vif_port(3);
        s.add_port(vif3);
        assert!(!s.has_port(vif3));
        let to3 = pkt(eth(guest_mac(3), REMOTE_MAC, ETHERTYPE_IPV4, &[0x45; 20]));
        assert_eq!(
            s.input(PORT_PHYSICAL, &to3, 0),
            Decision::Drop(DropReason::UnknownDestination)
        );
        assert!(!s.set_static(MacAddr(guest_mac(1)), vif3), "guest 1's MAC");
        assert!(!s.set_static(MacAddr::BROADCAST, vif3));
        assert!(s.set_static(MacAddr(guest_mac(3)), vif3));
        assert_eq!(s.input(PORT_PHYSICAL, &to3, 0), Decision::Forward(vif3));
        assert_eq!(s.age(u64::MAX), 0);
        s.remove_port(VIF2);
        assert!(!s.has_port(VIF2));
        assert_eq!(
            s.input(
                PORT_PHYSICAL,
                &pkt(eth(guest_mac(2), REMOTE_MAC, ETHERTYPE_IPV4, &[0x45; 20])),
                0
            ),
            Decision::Drop(DropReason::UnknownDestination)
        );
    }

    #[test]
    fn bridge_mode_port_management_matches_the_bridge() {
        let mut s = switch(Mode::Bridge);
        // The bridge takes any port for any role; the vif's MAC is pinned by set_static.
        assert!(s.add_vif(PortId(9), MacAddr(guest_mac(1))).is_ok());
        s.add_port(PortId(10));
        assert!(s.has_port(PortId(10)));
        assert!(s.set_static(MacAddr(guest_mac(5)), PortId(10)));
        assert_eq!(
            s.bridge().unwrap().lookup(MacAddr(guest_mac(5)), 0),
            Some(PortId(10))
        );
        s.remove_port(PortId(10));
        assert!(!s.set_static(MacAddr::BROADCAST, VIF1));
        s.remove_port(PortId(9));
        assert!(!s.has_port(PortId(9)));
        s.input(PORT_PHYSICAL, &pkt(tcp4_frame(ACK)), 0);
        assert_eq!(s.bridge().unwrap().fdb_len(), 3);
        assert_eq!(s.age(BridgeConfig::default().ageing_ns), 1);
        assert!(s.route().is_none() && s.filter().is_none());
    }

    #[test]
    fn stats_serialize_with_the_mode() {
        let s = switch(Mode::BridgeNf);
        let v = serde_json::to_value(s.stats()).unwrap();
        assert_eq!(v["mode"], "bridge-nf");
        assert!(v.get("route").is_none());
        assert!(v["bridge"]["forwarded"].is_u64());
        assert!(v["filter"]["rules"].as_array().unwrap().len() >= 40);
    }

    /// Prints the cost of one forwarding decision in each mode (no assertion).
    #[test]
    fn cost_per_frame_by_mode() {
        let data = pkt(tcp4_frame(PSH | ACK));
        for mode in Mode::ALL {
            let mut s = switch(mode);
            let n = 100_000;
            let ns = (0..5)
                .map(|_| {
                    let t = std::time::Instant::now();
                    for k in 0..n {
                        std::hint::black_box(s.input(
                            PORT_PHYSICAL,
                            std::hint::black_box(&data),
                            k,
                        ));
                    }
                    t.elapsed().as_nanos() as f64 / n as f64
                })
                .fold(f64::INFINITY, f64::min);
            println!("switch {mode}: {ns:.1} ns/frame (TCP data, physical port to guest 1)");
        }
    }
}
