//! Netback MAC routing, the bridge's alternative in Santos, Janakiraman and Turner's "Network optimizations for PV guests" ("Network alternative to bridge"):
//! netback keeps the vif ↔ interface mappings the toolstack gives it and sends each frame by
//! destination MAC straight to a guest, the physical port or the driver domain's own stack, or to
//! all of them for broadcast/multicast. Nothing is learned and nothing ages.
//!
//! Pure logic: the toolstack fills the table ([`RouteTable::set_physical`],
//! [`RouteTable::set_own`], [`RouteTable::add_vif`]), the data path asks
//! [`RouteTable::lookup`] per frame and carries out the [`Decision`] (the bridge's type, so the
//! daemon treats both alike; see `crate::switch`).
//!
//! Rules, in order, each drop with its own counter in [`RouteStats`]:
//! 1. A frame shorter than an Ethernet header: `Drop(Runt)`.
//! 2. An ingress port that is not in the table: `Drop(NoSuchPort)`.
//! 3. Source: from a vif, the source MAC must be that vif's MAC (`Drop(Spoofed)` otherwise: a
//!    guest cannot claim another's address, nor a group address); from the physical port or the
//!    driver domain's stack it must be a valid unicast address (`Drop(BadSource)`, as the
//!    bridge).
//! 4. Destination broadcast/multicast: `Flood`, i.e. every port in the table but the ingress.
//! 5. Destination a vif's MAC or the driver domain's MAC: `Forward` to that port, or
//!    `Drop(SamePort)` when that port is the ingress port.
//! 6. Any other unicast destination: from a vif or the driver domain's stack it is the outside
//!    world, `Forward(physical port)` (counted in `unknown_to_physical` as well); from the
//!    physical port, or when no physical port is set, `Drop(UnknownDestination)`.
//!
//! The table refuses inconsistent configuration instead of guessing ([`RouteError`]): a port has
//! one role, a MAC one owner, and only unicast MACs are registered.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use pvnet_wire::ethernet::{self, MacAddr};

use crate::bridge::{Decision, DropReason, PortId};

/// What a port is to the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The physical port: the outside world.
    Physical,
    /// The driver domain's own network stack, with its MAC.
    Own(MacAddr),
    /// A guest's vif, with the guest's MAC.
    Vif(MacAddr),
}

/// A configuration the table refuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// Only unicast addresses are routed to (a group or all-zero MAC would make its port
    /// receive, or claim, other traffic).
    #[error("{0} is not a unicast MAC address")]
    NotUnicast(MacAddr),
    /// The MAC is already the address of another port (a vif or the driver domain's stack).
    #[error("MAC {mac} is already the address of port {}", owner.0)]
    MacInUse { mac: MacAddr, owner: PortId },
    /// The port already has a role (a vif registered twice, or a vif on the physical port).
    #[error("port {} is already in use as {role:?}", port.0)]
    PortInUse { port: PortId, role: Role },
}

/// Counters, one per event; every drop reason has its own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RouteStats {
    /// Frames sent out of one port (`unknown_to_physical` included).
    pub forwarded: u64,
    /// Unknown unicast from a vif or the driver domain's stack, sent to the physical port.
    pub unknown_to_physical: u64,
    /// Broadcast/multicast frames sent to every port but the ingress.
    pub flooded: u64,
    pub dropped_runt: u64,
    pub dropped_no_port: u64,
    /// Group or all-zero source from the physical port or the driver domain's stack.
    pub dropped_bad_source: u64,
    /// A vif's frame whose source MAC is not that vif's.
    pub dropped_spoofed: u64,
    /// Destination is the ingress port's own MAC.
    pub dropped_same_port: u64,
    /// Unknown unicast from the physical port (or with no physical port set).
    pub dropped_unknown_dst: u64,
}

/// The routing table and its counters.
#[derive(Debug, Default)]
pub struct RouteTable {
    physical: Option<PortId>,
    own: Option<(PortId, MacAddr)>,
    /// Vif by MAC (the per-frame destination lookup). The default hasher is randomly keyed:
    /// destination MACs come from guests and the wire.
    vif_by_mac: HashMap<MacAddr, PortId>,
    /// MAC by vif (the per-frame source check).
    mac_by_vif: HashMap<PortId, MacAddr>,
    /// Every port with a role, in ascending order (the flood list).
    ports: BTreeSet<PortId>,
    stats: RouteStats,
}

impl RouteTable {
    pub fn new() -> RouteTable {
        RouteTable::default()
    }

    /// The role of `port`, if it has one.
    pub fn role(&self, port: PortId) -> Option<Role> {
        if self.physical == Some(port) {
            return Some(Role::Physical);
        }
        match self.own {
            Some((p, mac)) if p == port => return Some(Role::Own(mac)),
            _ => {}
        }
        self.mac_by_vif.get(&port).map(|m| Role::Vif(*m))
    }

    /// Refuses `port` when it already has a role other than `may_be`.
    fn port_free(&self, port: PortId, may_be: fn(Role) -> bool) -> Result<(), RouteError> {
        match self.role(port) {
            Some(role) if !may_be(role) => Err(RouteError::PortInUse { port, role }),
            _ => Ok(()),
        }
    }

    /// Refuses `mac` when it is not unicast, or is the address of a port other than `port`.
    fn mac_free(&self, mac: MacAddr, port: PortId) -> Result<(), RouteError> {
        if !mac.is_unicast() {
            return Err(RouteError::NotUnicast(mac));
        }
        let owner = match self.own {
            Some((p, m)) if m == mac => Some(p),
            _ => self.vif_by_mac.get(&mac).copied(),
        };
        match owner {
            Some(owner) if owner != port => Err(RouteError::MacInUse { mac, owner }),
            _ => Ok(()),
        }
    }

    /// Makes `port` the physical port (replacing any previous one). Refused when `port` is the
    /// driver domain's port or a vif.
    pub fn set_physical(&mut self, port: PortId) -> Result<(), RouteError> {
        self.port_free(port, |r| r == Role::Physical)?;
        if let Some(old) = self.physical.replace(port) {
            self.ports.remove(&old);
        }
        self.ports.insert(port);
        Ok(())
    }

    /// Makes `port` the driver domain's own stack with address `mac` (replacing any previous
    /// one). Refused when `port` is the physical port or a vif, or `mac` is not unicast or is a
    /// vif's.
    pub fn set_own(&mut self, port: PortId, mac: MacAddr) -> Result<(), RouteError> {
        self.port_free(port, |r| matches!(r, Role::Own(_)))?;
        self.mac_free(mac, port)?;
        if let Some((old, _)) = self.own.replace((port, mac)) {
            self.ports.remove(&old);
        }
        self.ports.insert(port);
        Ok(())
    }

    /// Registers a guest's vif. Refused when `port` already has a role (a vif cannot be
    /// registered twice), or `mac` is not unicast or already belongs to another port.
    pub fn add_vif(&mut self, port: PortId, mac: MacAddr) -> Result<(), RouteError> {
        self.port_free(port, |_| false)?;
        self.mac_free(mac, port)?;
        self.vif_by_mac.insert(mac, port);
        self.mac_by_vif.insert(port, mac);
        self.ports.insert(port);
        Ok(())
    }

    /// Forgets a vif; returns its MAC, or `None` when `port` is not a vif.
    pub fn remove_vif(&mut self, port: PortId) -> Option<MacAddr> {
        let mac = self.mac_by_vif.remove(&port)?;
        self.vif_by_mac.remove(&mac);
        self.ports.remove(&port);
        Some(mac)
    }

    /// Forgets whatever role `port` has (vif, physical or own); returns it.
    pub fn remove_port(&mut self, port: PortId) -> Option<Role> {
        let role = self.role(port)?;
        match role {
            Role::Physical => self.physical = None,
            Role::Own(_) => self.own = None,
            Role::Vif(_) => {
                self.remove_vif(port);
            }
        }
        self.ports.remove(&port);
        Some(role)
    }

    pub fn physical(&self) -> Option<PortId> {
        self.physical
    }

    pub fn own(&self) -> Option<(PortId, MacAddr)> {
        self.own
    }

    /// The MAC registered for vif `port`.
    pub fn vif_mac(&self, port: PortId) -> Option<MacAddr> {
        self.mac_by_vif.get(&port).copied()
    }

    /// Every port with a role, in ascending order (a `Flood` goes to all but the ingress).
    pub fn ports(&self) -> impl Iterator<Item = PortId> + '_ {
        self.ports.iter().copied()
    }

    pub fn has_port(&self, port: PortId) -> bool {
        self.ports.contains(&port)
    }

    /// Routes one frame from `ingress` (see the module doc); only its Ethernet header is read.
    pub fn lookup(&mut self, ingress: PortId, frame: &[u8]) -> Decision {
        let Ok(eth) = ethernet::Frame::new_checked(frame) else {
            self.stats.dropped_runt += 1;
            return Decision::Drop(DropReason::Runt);
        };
        self.decide(ingress, eth.src(), eth.dst())
    }

    /// [`RouteTable::lookup`] for a frame whose MACs the caller already read.
    pub fn decide(&mut self, ingress: PortId, src: MacAddr, dst: MacAddr) -> Decision {
        let from_vif = match self.mac_by_vif.get(&ingress) {
            Some(mac) => {
                if *mac != src {
                    self.stats.dropped_spoofed += 1;
                    return Decision::Drop(DropReason::Spoofed);
                }
                true
            }
            None if self.physical == Some(ingress) || self.own.is_some_and(|o| o.0 == ingress) => {
                if !src.is_unicast() {
                    self.stats.dropped_bad_source += 1;
                    return Decision::Drop(DropReason::BadSource);
                }
                false
            }
            None => {
                self.stats.dropped_no_port += 1;
                return Decision::Drop(DropReason::NoSuchPort);
            }
        };
        if dst.is_multicast() {
            self.stats.flooded += 1;
            return Decision::Flood;
        }
        let known = match self.own {
            Some((p, m)) if m == dst => Some(p),
            _ => self.vif_by_mac.get(&dst).copied(),
        };
        let to = match known {
            Some(p) if p == ingress => {
                self.stats.dropped_same_port += 1;
                return Decision::Drop(DropReason::SamePort);
            }
            Some(p) => p,
            // Unknown unicast from inside goes to the outside world; from outside it is for
            // nobody here (nothing is learned, so nothing else could know better).
            None => match self.physical {
                Some(phys) if from_vif || self.own.is_some_and(|o| o.0 == ingress) => {
                    self.stats.unknown_to_physical += 1;
                    phys
                }
                _ => {
                    self.stats.dropped_unknown_dst += 1;
                    return Decision::Drop(DropReason::UnknownDestination);
                }
            },
        };
        self.stats.forwarded += 1;
        Decision::Forward(to)
    }

    pub fn stats(&self) -> RouteStats {
        self.stats
    }

    /// The table's contents, vifs by port (for status output).
    pub fn vifs(&self) -> BTreeMap<PortId, MacAddr> {
        self.mac_by_vif.iter().map(|(p, m)| (*p, *m)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PHYS: PortId = PortId(0);
    const OWN: PortId = PortId(1);
    const VIF1: PortId = PortId(2);
    const VIF2: PortId = PortId(3);
    const VIF3: PortId = PortId(4);

    fn mac(n: u8) -> MacAddr {
        MacAddr([0x02, 0x70, 0x76, 0, 0, n])
    }
    const OWN_MAC: MacAddr = MacAddr([0x02, 0x70, 0x76, 0, 0, 2]);
    /// The remote host's MAC: not in the table.
    const REMOTE: MacAddr = MacAddr([0x02, 0x70, 0x76, 0, 0, 1]);

    fn frame(dst: MacAddr, src: MacAddr) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&dst.0);
        f.extend_from_slice(&src.0);
        f.extend_from_slice(&0x0800u16.to_be_bytes());
        f.extend_from_slice(&[0x45; 20]);
        f
    }

    fn table() -> RouteTable {
        let mut t = RouteTable::new();
        t.set_physical(PHYS).unwrap();
        t.set_own(OWN, OWN_MAC).unwrap();
        t.add_vif(VIF1, mac(10)).unwrap();
        t.add_vif(VIF2, mac(11)).unwrap();
        t.add_vif(VIF3, mac(12)).unwrap();
        t
    }

    type Field = fn(&mut RouteStats) -> &mut u64;

    /// Looks up one frame and checks that exactly the counters in `moved` moved, by one.
    fn route(t: &mut RouteTable, ingress: PortId, f: &[u8], moved: &[Field]) -> Decision {
        let mut want = t.stats();
        for m in moved {
            *m(&mut want) += 1;
        }
        let d = t.lookup(ingress, f);
        assert_eq!(t.stats(), want, "counters after {d:?}");
        d
    }

    #[test]
    fn guest_to_guest_phys_to_guest_and_to_own() {
        let mut t = table();
        let fwd: Field = |s| &mut s.forwarded;
        let f = frame(mac(11), mac(10));
        assert_eq!(route(&mut t, VIF1, &f, &[fwd]), Decision::Forward(VIF2));
        let f = frame(mac(12), REMOTE);
        assert_eq!(route(&mut t, PHYS, &f, &[fwd]), Decision::Forward(VIF3));
        let f = frame(OWN_MAC, REMOTE);
        assert_eq!(route(&mut t, PHYS, &f, &[fwd]), Decision::Forward(OWN));
        let f = frame(OWN_MAC, mac(12));
        assert_eq!(route(&mut t, VIF3, &f, &[fwd]), Decision::Forward(OWN));
        let f = frame(mac(10), OWN_MAC);
        assert_eq!(route(&mut t, OWN, &f, &[fwd]), Decision::Forward(VIF1));
    }

    #[test]
    fn unknown_unicast_from_inside_goes_to_the_physical_port() {
        let mut t = table();
        let moved: [Field; 2] = [|s| &mut s.forwarded, |s| &mut s.unknown_to_physical];
        let f = frame(REMOTE, mac(10));
        assert_eq!(route(&mut t, VIF1, &f, &moved), Decision::Forward(PHYS));
        let f = frame(REMOTE, OWN_MAC);
        assert_eq!(route(&mut t, OWN, &f, &moved), Decision::Forward(PHYS));
        // Nothing was learned: the remote MAC is still unknown from outside.
        let f = frame(mac(10), REMOTE);
        assert_eq!(
            route(&mut t, PHYS, &f, &[|s| &mut s.forwarded]),
            Decision::Forward(VIF1)
        );
        assert_eq!(t.role(PHYS), Some(Role::Physical));
    }

    #[test]
    fn unknown_unicast_from_outside_is_dropped() {
        let mut t = table();
        let f = frame(mac(99), REMOTE);
        assert_eq!(
            route(&mut t, PHYS, &f, &[|s| &mut s.dropped_unknown_dst]),
            Decision::Drop(DropReason::UnknownDestination)
        );
        // With no physical port there is nowhere to send unknown unicast from inside.
        t.remove_port(PHYS);
        let f = frame(REMOTE, mac(10));
        assert_eq!(
            route(&mut t, VIF1, &f, &[|s| &mut s.dropped_unknown_dst]),
            Decision::Drop(DropReason::UnknownDestination)
        );
    }

    #[test]
    fn broadcast_and_multicast_flood_to_all_but_the_ingress() {
        let mut t = table();
        let flood: Field = |s| &mut s.flooded;
        let groups = [
            MacAddr::BROADCAST,
            MacAddr([0x01, 0x00, 0x5e, 0, 0, 1]),
            MacAddr([0x33, 0x33, 0, 0, 0, 1]),
        ];
        for (ingress, src) in [(VIF2, mac(11)), (PHYS, REMOTE), (OWN, OWN_MAC)] {
            for dst in groups {
                let f = frame(dst, src);
                assert_eq!(route(&mut t, ingress, &f, &[flood]), Decision::Flood);
            }
            let out: Vec<PortId> = t.ports().filter(|p| *p != ingress).collect();
            assert_eq!(out.len(), 4);
            assert!(!out.contains(&ingress));
        }
        assert_eq!(
            t.ports().collect::<Vec<_>>(),
            vec![PHYS, OWN, VIF1, VIF2, VIF3]
        );
    }

    #[test]
    fn spoofed_source_from_a_guest_is_dropped() {
        let mut t = table();
        let spoof: Field = |s| &mut s.dropped_spoofed;
        // Another guest's MAC, the driver domain's, an unknown one, a group address.
        for src in [mac(11), OWN_MAC, REMOTE, MacAddr::BROADCAST, MacAddr::ZERO] {
            let f = frame(mac(12), src);
            assert_eq!(
                route(&mut t, VIF1, &f, &[spoof]),
                Decision::Drop(DropReason::Spoofed)
            );
            // Broadcast with a spoofed source is not flooded either.
            let f = frame(MacAddr::BROADCAST, src);
            assert_eq!(
                route(&mut t, VIF1, &f, &[spoof]),
                Decision::Drop(DropReason::Spoofed)
            );
        }
    }

    #[test]
    fn bad_source_from_outside_or_own_is_dropped() {
        let mut t = table();
        let bad: Field = |s| &mut s.dropped_bad_source;
        for ingress in [PHYS, OWN] {
            for src in [
                MacAddr::BROADCAST,
                MacAddr([0x01, 0, 0x5e, 0, 0, 9]),
                MacAddr::ZERO,
            ] {
                let f = frame(mac(10), src);
                assert_eq!(
                    route(&mut t, ingress, &f, &[bad]),
                    Decision::Drop(DropReason::BadSource)
                );
            }
        }
    }

    #[test]
    fn frame_to_its_own_port_is_dropped() {
        let mut t = table();
        let same: Field = |s| &mut s.dropped_same_port;
        let f = frame(mac(10), mac(10));
        assert_eq!(
            route(&mut t, VIF1, &f, &[same]),
            Decision::Drop(DropReason::SamePort)
        );
        let f = frame(OWN_MAC, OWN_MAC);
        assert_eq!(
            route(&mut t, OWN, &f, &[same]),
            Decision::Drop(DropReason::SamePort)
        );
    }

    #[test]
    fn unknown_ingress_and_runts_are_dropped() {
        let mut t = table();
        let f = frame(mac(10), mac(20));
        assert_eq!(
            route(&mut t, PortId(77), &f, &[|s| &mut s.dropped_no_port]),
            Decision::Drop(DropReason::NoSuchPort)
        );
        let runt: Field = |s| &mut s.dropped_runt;
        for n in [0, 6, 12, 13] {
            assert_eq!(
                route(&mut t, VIF1, &f[..n], &[runt]),
                Decision::Drop(DropReason::Runt)
            );
        }
        // Exactly a header is enough.
        assert_eq!(
            route(&mut t, PHYS, &f[..14], &[|s| &mut s.forwarded]),
            Decision::Forward(VIF1)
        );
    }

    #[test]
    fn add_and_remove_vifs() {
        let mut t = table();
        assert_eq!(t.remove_vif(VIF2), Some(mac(11)));
        assert_eq!(t.remove_vif(VIF2), None);
        assert!(!t.has_port(VIF2));
        assert_eq!(t.vif_mac(VIF2), None);
        // Its MAC is unknown now: from outside dropped, from a guest out to the wire.
        let f = frame(mac(11), REMOTE);
        assert_eq!(
            route(&mut t, PHYS, &f, &[|s| &mut s.dropped_unknown_dst]),
            Decision::Drop(DropReason::UnknownDestination)
        );
        let f = frame(mac(11), mac(10));
        assert_eq!(t.lookup(VIF1, &f), Decision::Forward(PHYS));
        // Its port no longer sends.
        assert_eq!(
            t.lookup(VIF2, &frame(mac(10), mac(11))),
            Decision::Drop(DropReason::NoSuchPort)
        );
        // The MAC and the port can be registered again, even together as another guest.
        t.add_vif(PortId(9), mac(11)).unwrap();
        assert_eq!(
            t.lookup(PHYS, &frame(mac(11), REMOTE)),
            Decision::Forward(PortId(9))
        );
        t.add_vif(VIF2, mac(13)).unwrap();
        assert_eq!(t.vifs().len(), 4);
        assert_eq!(t.remove_port(OWN), Some(Role::Own(OWN_MAC)));
        assert_eq!(t.own(), None);
        assert_eq!(t.remove_port(OWN), None);
        assert_eq!(t.remove_port(PortId(9)), Some(Role::Vif(mac(11))));
        assert_eq!(t.ports().collect::<Vec<_>>(), vec![PHYS, VIF1, VIF2, VIF3]);
    }

    #[test]
    fn conflicting_configuration_is_refused() {
        let mut t = table();
        // Two vifs, one MAC.
        assert_eq!(
            t.add_vif(PortId(9), mac(10)),
            Err(RouteError::MacInUse {
                mac: mac(10),
                owner: VIF1
            })
        );
        // One vif registered twice (same or another MAC).
        for m in [mac(10), mac(50)] {
            assert_eq!(
                t.add_vif(VIF1, m),
                Err(RouteError::PortInUse {
                    port: VIF1,
                    role: Role::Vif(mac(10))
                })
            );
        }
        // A guest with the driver domain's MAC, or on its port or the physical port.
        assert_eq!(
            t.add_vif(PortId(9), OWN_MAC),
            Err(RouteError::MacInUse {
                mac: OWN_MAC,
                owner: OWN
            })
        );
        assert!(matches!(
            t.add_vif(PHYS, mac(50)),
            Err(RouteError::PortInUse {
                role: Role::Physical,
                ..
            })
        ));
        assert!(matches!(
            t.add_vif(OWN, mac(50)),
            Err(RouteError::PortInUse {
                role: Role::Own(_),
                ..
            })
        ));
        for m in [
            MacAddr::BROADCAST,
            MacAddr([0x01, 0, 0x5e, 0, 0, 1]),
            MacAddr::ZERO,
        ] {
            assert_eq!(t.add_vif(PortId(9), m), Err(RouteError::NotUnicast(m)));
            assert_eq!(t.set_own(OWN, m), Err(RouteError::NotUnicast(m)));
        }
        // The driver domain's stack cannot take a guest's MAC or port; the physical port
        // cannot be a vif's.
        assert!(matches!(
            t.set_own(OWN, mac(11)),
            Err(RouteError::MacInUse { owner: VIF2, .. })
        ));
        assert!(matches!(
            t.set_own(VIF1, mac(50)),
            Err(RouteError::PortInUse { .. })
        ));
        assert!(matches!(
            t.set_physical(VIF1),
            Err(RouteError::PortInUse { .. })
        ));
        assert!(matches!(
            t.set_physical(OWN),
            Err(RouteError::PortInUse { .. })
        ));
        // Nothing refused changed the table.
        assert_eq!(
            t.ports().collect::<Vec<_>>(),
            vec![PHYS, OWN, VIF1, VIF2, VIF3]
        );
        assert_eq!(t.own(), Some((OWN, OWN_MAC)));
        assert_eq!(t.vif_mac(VIF1), Some(mac(10)));
        assert_eq!(t.stats(), RouteStats::default());
        // Re-setting a role on its own port is allowed (a new MAC for the driver domain).
        t.set_own(OWN, mac(60)).unwrap();
        t.set_physical(PHYS).unwrap();
        assert_eq!(
            t.lookup(VIF1, &frame(mac(60), mac(10))),
            Decision::Forward(OWN)
        );
        // Moving the physical port frees the old one.
        t.set_physical(PortId(20)).unwrap();
        assert!(!t.has_port(PHYS));
        assert_eq!(
            t.lookup(VIF1, &frame(REMOTE, mac(10))),
            Decision::Forward(PortId(20))
        );
    }

    proptest::proptest! {
        /// Any bytes from any port: no panic, and exactly one outcome counter moves by one.
        #[test]
        fn any_frame_moves_one_counter(
            frame in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40),
            ingress in 0u16..8,
            src_known in 0usize..6,
        ) {
            let mut t = table();
            let mut frame = frame;
            // Often use a registered source, so the later rules are reached too.
            let srcs = [mac(10), mac(11), OWN_MAC, REMOTE, mac(12), MacAddr::BROADCAST];
            if frame.len() >= 12 {
                frame[6..12].copy_from_slice(&srcs[src_known].0);
            }
            let before = t.stats();
            let d = t.lookup(PortId(ingress), &frame);
            let a = t.stats();
            let total = |s: RouteStats| {
                s.forwarded + s.flooded + s.dropped_runt + s.dropped_no_port
                    + s.dropped_bad_source + s.dropped_spoofed + s.dropped_same_port
                    + s.dropped_unknown_dst
            };
            proptest::prop_assert_eq!(total(a), total(before) + 1);
            if let Decision::Forward(p) = d {
                proptest::prop_assert!(t.has_port(p) && p != PortId(ingress));
            }
        }
    }

    #[test]
    fn error_messages_name_the_culprit() {
        let e = RouteError::MacInUse {
            mac: mac(10),
            owner: VIF1,
        };
        assert_eq!(
            e.to_string(),
            "MAC 02:70:76:00:00:0a is already the address of port 2"
        );
        assert_eq!(
            RouteError::NotUnicast(MacAddr::BROADCAST).to_string(),
            "ff:ff:ff:ff:ff:ff is not a unicast MAC address"
        );
    }
}
