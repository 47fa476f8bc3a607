//! The driver domain's learning bridge, with Linux bridge semantics (`net/bridge/br_fdb.c`,
//! `br_input.c`), as pure logic: no frames, no ports' I/O, time passed in.
//!
//! Per frame the caller gives ingress port, source and destination MAC, and `now`;
//! [`Bridge::input`] learns the source and returns a [`Decision`] the caller carries out.
//!
//! Rules:
//! - An ingress port that is not attached drops the frame (`NoSuchPort`) before anything else.
//! - A multicast or all-zero source is dropped and never learned (`BadSource`; Linux drops frames
//!   whose source fails `is_valid_ether_addr`).
//! - Learning: a new source is inserted unless the dynamic entries already number `max_fdb`
//!   (counted in `fdb_full`, the frame is still forwarded). A known dynamic source has its time
//!   refreshed and moves to the ingress port if it was elsewhere (`moved`). Static entries are
//!   neither refreshed nor moved.
//! - Destination: broadcast/multicast → `Flood`; a live entry → `Forward(port)`, or
//!   `Drop(SamePort)` if that port is the ingress port; no live entry → `Flood`.
//! - Ageing: a dynamic entry last seen at `t` is expired at `now` when `now - t >= ageing_ns`
//!   (Linux `has_expired`). Expired entries are ignored by lookups at once and removed by
//!   [`Bridge::age`]. `max_fdb` limits dynamic entries only (like Linux `max_learned`);
//!   static entries come from the toolstack and are always accepted.
//!
//! Lookups are O(1) (`HashMap` with the default, randomly keyed hasher: source MACs are chosen by
//! guests, so a predictable hash would let one guest degrade the table for all).

use std::collections::{BTreeSet, HashMap};

use pvnet_wire::ethernet::MacAddr;

/// A bridge port: a vif, the physical port, the driver domain's own stack port, an NE2000 model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortId(pub u16);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BridgeConfig {
    /// Idle time after which a learned entry expires (Linux default 300 s).
    pub ageing_ns: u64,
    /// Most dynamic (learned) entries; learning beyond it is refused and counted.
    pub max_fdb: usize,
}

impl Default for BridgeConfig {
    fn default() -> Self {
        BridgeConfig {
            ageing_ns: 300_000_000_000,
            max_fdb: 1024,
        }
    }
}

/// What to do with a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Send out of this one port.
    Forward(PortId),
    /// Send out of every attached port except the ingress port.
    Flood,
    Drop(DropReason),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Multicast, broadcast or all-zero source MAC.
    BadSource,
    /// The destination was learned on the ingress port: the frame is already there.
    SamePort,
    /// The ingress port is not attached.
    NoSuchPort,
    // The bridge itself never returns the reasons below; they let the alternatives of
    // `crate::switch` (netback routing, the filter pass) share this type.
    /// Shorter than an Ethernet header (`crate::switch`, `crate::route`).
    Runt,
    /// A guest sent with a source MAC other than its vif's (`crate::route`).
    Spoofed,
    /// Unicast from the physical port to a MAC that is neither a vif's nor the driver domain's
    /// (`crate::route`), or unknown unicast with no physical port to send it to.
    UnknownDestination,
    /// Dropped by a rule (or the default policy) of the filter pass (`crate::nf`).
    Filtered,
}

/// Counters, one per event; drops have one per [`DropReason`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct BridgeStats {
    /// New dynamic entries.
    pub learned: u64,
    /// Dynamic entries that moved to another port.
    pub moved: u64,
    /// Dynamic entries removed by [`Bridge::age`].
    pub aged: u64,
    /// Sources not learned because `max_fdb` dynamic entries existed.
    pub fdb_full: u64,
    pub forwarded: u64,
    pub flooded: u64,
    pub dropped_bad_source: u64,
    pub dropped_same_port: u64,
    pub dropped_no_port: u64,
}

#[derive(Clone, Copy, Debug)]
struct FdbEntry {
    port: PortId,
    /// Last time the source was seen (unused for static entries).
    updated_ns: u64,
    is_static: bool,
}

#[derive(Debug)]
pub struct Bridge {
    cfg: BridgeConfig,
    ports: BTreeSet<PortId>,
    fdb: HashMap<MacAddr, FdbEntry>,
    /// Number of non-static entries in `fdb` (what `max_fdb` limits).
    dynamic: usize,
    stats: BridgeStats,
}

impl Bridge {
    pub fn new(cfg: BridgeConfig) -> Bridge {
        Bridge {
            cfg,
            ports: BTreeSet::new(),
            fdb: HashMap::new(),
            dynamic: 0,
            stats: BridgeStats::default(),
        }
    }

    pub fn config(&self) -> BridgeConfig {
        self.cfg
    }

    /// Attaches a port (no effect if already attached).
    pub fn add_port(&mut self, p: PortId) {
        self.ports.insert(p);
    }

    /// Detaches a port and forgets every entry on it, static ones included.
    pub fn remove_port(&mut self, p: PortId) {
        if !self.ports.remove(&p) {
            return;
        }
        let mut removed_dynamic = 0;
        self.fdb.retain(|_, e| {
            let keep = e.port != p;
            if !keep && !e.is_static {
                removed_dynamic += 1;
            }
            keep
        });
        self.dynamic -= removed_dynamic;
    }

    /// Attached ports in ascending order.
    pub fn ports(&self) -> impl Iterator<Item = PortId> + '_ {
        self.ports.iter().copied()
    }

    pub fn has_port(&self, p: PortId) -> bool {
        self.ports.contains(&p)
    }

    /// Installs a static entry (`bridge fdb add MAC dev PORT static`): never ages, never moved
    /// by learning; replaces a dynamic or static entry for the same MAC. Returns false, and
    /// installs nothing, when `p` is not attached or `mac` is not a unicast address.
    pub fn set_static(&mut self, mac: MacAddr, p: PortId) -> bool {
        if !self.ports.contains(&p) || !mac.is_unicast() {
            return false;
        }
        let old = self.fdb.insert(
            mac,
            FdbEntry {
                port: p,
                updated_ns: 0,
                is_static: true,
            },
        );
        if matches!(old, Some(e) if !e.is_static) {
            self.dynamic -= 1;
        }
        true
    }

    /// Learns `src` on `ingress` and decides where a frame to `dst` goes (see the module doc).
    pub fn input(&mut self, ingress: PortId, src: MacAddr, dst: MacAddr, now_ns: u64) -> Decision {
        if !self.ports.contains(&ingress) {
            self.stats.dropped_no_port += 1;
            return Decision::Drop(DropReason::NoSuchPort);
        }
        if !src.is_unicast() {
            self.stats.dropped_bad_source += 1;
            return Decision::Drop(DropReason::BadSource);
        }
        self.learn(ingress, src, now_ns);

        if dst.is_multicast() {
            self.stats.flooded += 1;
            return Decision::Flood;
        }
        match self.lookup(dst, now_ns) {
            Some(p) if p == ingress => {
                self.stats.dropped_same_port += 1;
                Decision::Drop(DropReason::SamePort)
            }
            Some(p) => {
                self.stats.forwarded += 1;
                Decision::Forward(p)
            }
            None => {
                self.stats.flooded += 1;
                Decision::Flood
            }
        }
    }

    fn learn(&mut self, ingress: PortId, src: MacAddr, now_ns: u64) {
        if let Some(e) = self.fdb.get_mut(&src) {
            if e.is_static {
                return;
            }
            if e.port != ingress {
                e.port = ingress;
                self.stats.moved += 1;
            }
            e.updated_ns = now_ns;
            return;
        }
        if self.dynamic >= self.cfg.max_fdb {
            self.stats.fdb_full += 1;
            return;
        }
        self.fdb.insert(
            src,
            FdbEntry {
                port: ingress,
                updated_ns: now_ns,
                is_static: false,
            },
        );
        self.dynamic += 1;
        self.stats.learned += 1;
    }

    fn expired(&self, e: &FdbEntry, now_ns: u64) -> bool {
        // A clock that went backwards leaves the entry alive.
        !e.is_static && now_ns.saturating_sub(e.updated_ns) >= self.cfg.ageing_ns
    }

    /// Removes expired dynamic entries; returns how many.
    pub fn age(&mut self, now_ns: u64) -> usize {
        let ageing = self.cfg.ageing_ns;
        let before = self.fdb.len();
        self.fdb
            .retain(|_, e| e.is_static || now_ns.saturating_sub(e.updated_ns) < ageing);
        let n = before - self.fdb.len();
        self.dynamic -= n;
        self.stats.aged += n as u64;
        n
    }

    /// The port `mac` was learned (or statically set) on, unless the entry has expired.
    pub fn lookup(&self, mac: MacAddr, now_ns: u64) -> Option<PortId> {
        let e = self.fdb.get(&mac)?;
        if self.expired(e, now_ns) {
            return None;
        }
        Some(e.port)
    }

    /// Entries in the table, expired ones not yet aged out included.
    pub fn fdb_len(&self) -> usize {
        self.fdb.len()
    }

    pub fn stats(&self) -> BridgeStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P1: PortId = PortId(1);
    const P2: PortId = PortId(2);
    const P3: PortId = PortId(3);
    const AGE: u64 = 300_000_000_000;

    fn mac(n: u8) -> MacAddr {
        MacAddr([0x00, 0x16, 0x3e, 0, 0, n])
    }

    fn bridge() -> Bridge {
        let mut b = Bridge::new(BridgeConfig::default());
        for p in [P1, P2, P3] {
            b.add_port(p);
        }
        b
    }

    #[test]
    fn default_config() {
        let c = BridgeConfig::default();
        assert_eq!((c.ageing_ns, c.max_fdb), (AGE, 1024));
    }

    #[test]
    fn learns_then_forwards() {
        let mut b = bridge();
        assert_eq!(b.input(P1, mac(1), mac(2), 0), Decision::Flood);
        assert_eq!(b.input(P2, mac(2), mac(1), 10), Decision::Forward(P1));
        assert_eq!(b.input(P1, mac(1), mac(2), 20), Decision::Forward(P2));
        assert_eq!(b.lookup(mac(1), 20), Some(P1));
        let s = b.stats();
        assert_eq!((s.learned, s.forwarded, s.flooded, s.moved), (2, 2, 1, 0));
    }

    #[test]
    fn unknown_unicast_floods() {
        let mut b = bridge();
        assert_eq!(b.input(P1, mac(1), mac(9), 0), Decision::Flood);
        assert_eq!(b.stats().flooded, 1);
        assert_eq!(b.lookup(mac(9), 0), None);
    }

    #[test]
    fn broadcast_and_multicast_flood() {
        let mut b = bridge();
        b.input(P2, mac(2), mac(1), 0);
        assert_eq!(b.input(P1, mac(1), MacAddr::BROADCAST, 0), Decision::Flood);
        let mcast = MacAddr([0x01, 0x00, 0x5e, 0x00, 0x00, 0x01]);
        assert_eq!(b.input(P1, mac(1), mcast, 0), Decision::Flood);
        let v6mcast = MacAddr([0x33, 0x33, 0, 0, 0, 1]);
        assert_eq!(b.input(P1, mac(1), v6mcast, 0), Decision::Flood);
        assert_eq!(b.stats().flooded, 4);
        assert_eq!(b.stats().forwarded, 0);
    }

    #[test]
    fn destination_on_ingress_port_dropped() {
        let mut b = bridge();
        b.input(P1, mac(1), mac(9), 0);
        assert_eq!(
            b.input(P1, mac(2), mac(1), 1),
            Decision::Drop(DropReason::SamePort)
        );
        assert_eq!(b.stats().dropped_same_port, 1);
        // The source was still learned.
        assert_eq!(b.lookup(mac(2), 1), Some(P1));
    }

    #[test]
    fn source_moves_between_ports() {
        let mut b = bridge();
        b.input(P1, mac(1), mac(9), 0);
        assert_eq!(b.input(P2, mac(1), mac(9), 5), Decision::Flood);
        assert_eq!(b.lookup(mac(1), 5), Some(P2));
        assert_eq!(b.input(P3, mac(3), mac(1), 6), Decision::Forward(P2));
        let s = b.stats();
        assert_eq!((s.learned, s.moved), (2, 1));
        // Seen again on the same port: no move.
        b.input(P2, mac(1), mac(9), 7);
        assert_eq!(b.stats().moved, 1);
    }

    #[test]
    fn ageing_with_explicit_time() {
        let mut b = bridge();
        let t0 = 1_000;
        b.input(P1, mac(1), mac(9), t0);
        assert_eq!(b.lookup(mac(1), t0 + AGE - 1), Some(P1));
        assert_eq!(b.age(t0 + AGE - 1), 0);
        assert_eq!(b.lookup(mac(1), t0 + AGE + 1), None);
        // Expired but not yet aged out: traffic to it floods.
        assert_eq!(b.input(P2, mac(2), mac(1), t0 + AGE + 1), Decision::Flood);
        assert_eq!(b.age(t0 + AGE + 1), 1);
        assert_eq!(b.fdb_len(), 1); // mac(2), learned at t0 + AGE + 1
        assert_eq!(b.stats().aged, 1);
    }

    #[test]
    fn expiry_boundary_is_ageing_time() {
        let mut b = bridge();
        b.input(P1, mac(1), mac(9), 0);
        assert_eq!(b.lookup(mac(1), AGE), None);
    }

    #[test]
    fn traffic_refreshes_entries() {
        let mut b = bridge();
        b.input(P1, mac(1), mac(9), 0);
        b.input(P1, mac(1), mac(9), AGE - 1);
        assert_eq!(b.age(AGE + 1), 0);
        assert_eq!(b.lookup(mac(1), 2 * AGE - 2), Some(P1));
    }

    #[test]
    fn clock_going_backwards_keeps_entries() {
        let mut b = bridge();
        b.input(P1, mac(1), mac(9), 1_000);
        assert_eq!(b.lookup(mac(1), 0), Some(P1));
        assert_eq!(b.age(0), 0);
    }

    #[test]
    fn static_entries_neither_age_nor_move() {
        let mut b = bridge();
        assert!(b.set_static(mac(1), P1));
        assert_eq!(b.input(P2, mac(1), mac(9), 0), Decision::Flood);
        assert_eq!(b.lookup(mac(1), 0), Some(P1));
        assert_eq!(b.age(10 * AGE), 0);
        assert_eq!(b.lookup(mac(1), 10 * AGE), Some(P1));
        assert_eq!(b.input(P3, mac(3), mac(1), 10 * AGE), Decision::Forward(P1));
        let s = b.stats();
        assert_eq!((s.moved, s.learned, s.aged), (0, 1, 0));
    }

    #[test]
    fn static_replaces_dynamic_and_is_validated() {
        let mut b = bridge();
        b.input(P2, mac(1), mac(9), 0);
        assert!(b.set_static(mac(1), P1));
        assert_eq!(b.lookup(mac(1), 10 * AGE), Some(P1));
        assert!(!b.set_static(mac(5), PortId(77)), "port not attached");
        assert!(!b.set_static(MacAddr::BROADCAST, P1));
        assert!(!b.set_static(MacAddr([0; 6]), P1));
        assert_eq!(b.fdb_len(), 1);
    }

    #[test]
    fn fdb_limit_refuses_learning_and_counts() {
        let mut b = Bridge::new(BridgeConfig {
            ageing_ns: AGE,
            max_fdb: 2,
        });
        b.add_port(P1);
        b.add_port(P2);
        b.input(P1, mac(1), mac(9), 0);
        b.input(P1, mac(2), mac(9), 0);
        // Not learned, but still forwarded by destination.
        assert_eq!(b.input(P1, mac(3), mac(9), 0), Decision::Flood);
        assert_eq!(b.lookup(mac(3), 0), None);
        assert_eq!(b.stats().fdb_full, 1);
        assert_eq!(b.stats().learned, 2);
        // Known sources still refresh and move at the limit.
        b.input(P2, mac(1), mac(9), 1);
        assert_eq!(b.lookup(mac(1), 1), Some(P2));
        // Static entries do not count against the limit.
        assert!(b.set_static(mac(4), P2));
        // After ageing there is room again.
        assert_eq!(b.age(AGE + 1), 2);
        b.input(P1, mac(3), mac(9), AGE + 1);
        assert_eq!(b.lookup(mac(3), AGE + 1), Some(P1));
        assert_eq!(b.stats().fdb_full, 1);
    }

    #[test]
    fn remove_port_forgets_its_entries() {
        let mut b = bridge();
        b.input(P1, mac(1), mac(9), 0);
        b.input(P2, mac(2), mac(9), 0);
        assert!(b.set_static(mac(3), P1));
        b.remove_port(P1);
        assert_eq!(b.ports().collect::<Vec<_>>(), vec![P2, P3]);
        assert!(!b.has_port(P1));
        assert_eq!(b.lookup(mac(1), 0), None);
        assert_eq!(b.lookup(mac(3), 0), None);
        assert_eq!(b.lookup(mac(2), 0), Some(P2));
        assert_eq!(b.input(P2, mac(2), mac(1), 1), Decision::Flood);
        assert_eq!(
            b.input(P1, mac(1), mac(2), 1),
            Decision::Drop(DropReason::NoSuchPort)
        );
        assert_eq!(b.stats().dropped_no_port, 1);
        // Removing twice, or an unknown port, is harmless.
        b.remove_port(P1);
        b.remove_port(PortId(99));
        assert_eq!(b.fdb_len(), 1);
    }

    #[test]
    fn bad_source_dropped_and_not_learned() {
        let mut b = bridge();
        for src in [
            MacAddr::BROADCAST,
            MacAddr([0x01, 0x00, 0x5e, 0, 0, 1]),
            MacAddr([0; 6]),
        ] {
            assert_eq!(
                b.input(P1, src, mac(1), 0),
                Decision::Drop(DropReason::BadSource)
            );
            assert_eq!(b.lookup(src, 0), None);
        }
        let s = b.stats();
        assert_eq!((s.dropped_bad_source, s.learned, s.flooded), (3, 0, 0));
        assert_eq!(b.fdb_len(), 0);
    }

    #[test]
    fn unknown_ingress_dropped_before_learning() {
        let mut b = bridge();
        assert_eq!(
            b.input(PortId(42), mac(1), mac(2), 0),
            Decision::Drop(DropReason::NoSuchPort)
        );
        assert_eq!(b.fdb_len(), 0);
        assert_eq!(b.stats().dropped_no_port, 1);
    }
}
