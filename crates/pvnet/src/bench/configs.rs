//! The configurations `pvnet bench` knows (Nakanjima and Oi's Table III, plus today's native anchor and
//! the flush policies the paper left open), and the daemon settings of each.

use anyhow::{bail, Context, Result};
use pvnet_dd::netback::Mechanism;
use pvnet_dd::{lro, switch};
use serde::Serialize;

use crate::admin::{LroChange, SetRequest};
use crate::config::{DaemonConfig, LroSettings, Mode};
use pvnet_hvm::Path;
use pvnet_ne2000::Class;

/// The receiving CPU (driver domain, guests, receivers) and the sending CPU (the remote
/// host's sender), as the papers measured: a receiving machine and a sending machine.
pub const RX_CPU: usize = 0;
pub const TX_CPU: usize = 1;

/// Name and one-line description of every named configuration, in report order.
pub const CONFIGS: [(&str, &str); 8] = [
    (
        "linux",
        "native Linux, no virtualization, receiver GRO off (the LRO paper's baseline)",
    ),
    (
        "linux-gro",
        "native Linux with GRO on at the receiving veth (today's native anchor)",
    ),
    ("xen", "the PV path, no aggregation"),
    ("lro", "LRO, flush at the end of every poll (skb-mode)"),
    (
        "bo",
        "LRO + BO: the bridge forwards aggregates without linearizing",
    ),
    ("da", "LRO with delayed aggregation: flush every 2nd poll"),
    (
        "timeout",
        "LRO, flush an aggregate 50 us after its first segment",
    ),
    ("adaptive", "LRO with the self-tuning flush"),
];

/// Named configurations outside the default set: the floor of this emulation, and the
/// switching alternatives (`--configs linux,xen,relay,route,...`). Not in the default run,
/// which must stay under 5 minutes.
pub const EXTRA: [(&str, &str); 19] = [
    (
        "port-gro",
        "the PV path with GRO at the physical port (standing for a NIC's LRO): 64 KiB coalesced frames through the ring, netback's GSO extra slot and netfront's TAP",
    ),
    (
        "port-gro-v3",
        "port GRO with a TPACKET_V3 ring: frames packed in 256 KiB blocks, retired when full or after 1 ms",
    ),
    (
        "port-gro+adaptive",
        "port GRO with pvnet's LRO (the self-tuning flush) on top, for what GRO did not merge",
    ),
    (
        "guest-gro",
        "the PV path with GRO in the guest's virtual NIC: the guest's TAP opened with IFF_NAPI",
    ),
    (
        "hvm",
        "an HVM guest on the emulated NE2000: every port access an ioreq round trip to its device model (Zhang, Li and Guan's original path)",
    ),
    (
        "hvm-seed",
        "the HVM guest with the paper's fast path: register reads and state-register writes served at the trap",
    ),
    (
        "hvm-fast",
        "the HVM guest with everything that needs no card memory served at the trap",
    ),
    (
        "map",
        "the PV path with netback mapping each granted page per packet instead of grant copy",
    ),
    (
        "persistent",
        "the PV path with persistent grants: netback keeps its mappings of the guest's buffers",
    ),
    (
        "premapped",
        "the PV path with the guest's packet pool granted and mapped once at connect: one copy per packet, no grant operation (the seed's bound)",
    ),
    (
        "static",
        "the PV path with a static buffer granted and mapped once at connect: the backend copies into it, the guest out of it (two copies, no grant operation)",
    ),
    (
        "flip",
        "the PV path with page flipping on RX (GNTTABOP_transfer of the driver-domain frame the port received into; TX by grant copy)",
    ),
    (
        "copy-frames",
        "the PV path with grant copy from the same frame port as flip (the fair copy to compare flip with)",
    ),
    (
        "relay",
        "the floor: packet ring and TAP only, the daemon writes each frame into the guest's TAP (no Xen)",
    ),
    (
        "relay-adaptive",
        "the floor with aggregation: the relay with the self-tuning flush, chains passed whole",
    ),
    (
        "route",
        "the PV path with netback MAC routing instead of the bridge (Santos, Janakiraman and Turner)",
    ),
    (
        "bridge-nf",
        "the PV path with the bridge plus a per-packet rule pass (the default rule set) standing for bridge netfilter",
    ),
    (
        "g2g-copy",
        "a stream from guest 0 to guest 1 on the same driver domain, netback under copy: one copy, grant to grant",
    ),
    (
        "g2g-copy2",
        "g2g-copy with the one-copy path off: copied out of guest 0 into a driver-domain buffer, then into guest 1 (two copies)",
    ),
];

/// Each PV configuration that has a floor, and that floor: the relay on the same port with the
/// same flush, without the grant copy, the guest's ring and netfront. What Xen's machinery
/// costs is the distance between the two in the same run.
pub const FLOORS: [(&str, &str); 2] = [("xen", "relay"), ("adaptive", "relay-adaptive")];

/// The floor of the configuration base `base` (`xen`: `relay`), if it has one.
pub fn floor_of(base: &str) -> Option<&'static str> {
    FLOORS.iter().find(|(c, _)| *c == base).map(|(_, f)| *f)
}

/// The prefix of the guest-to-guest configurations: `g2g-MECHANISM` streams from guest 0 to
/// guest 1 with netback running that grant mechanism (any of [`Mechanism::ALL`], so a new
/// mechanism gets its configuration by being added there).
pub const G2G_PREFIX: &str = "g2g-";

/// The grant mechanism of a guest-to-guest configuration (`g2g-copy`: copy); None for any
/// other configuration, an error for `g2g-` and a name that is no mechanism.
pub fn g2g_mechanism(base: &str) -> Option<Result<Mechanism>> {
    let m = base.strip_prefix(G2G_PREFIX)?;
    if base == G2G_TWO_COPIES {
        return Some(Ok(Mechanism::Copy));
    }
    Some(m.parse::<Mechanism>().map_err(|e| {
        let all: Vec<&str> = Mechanism::ALL.iter().map(|m| m.name()).collect();
        anyhow::anyhow!(
            "configuration {base:?}: {e}; the guest-to-guest configurations are g2g-{}",
            all.join(", g2g-")
        )
    }))
}

/// The guest-to-guest configuration under copy with the one-copy path off.
pub const G2G_TWO_COPIES: &str = "g2g-copy2";

/// Whether configuration `config` streams from one guest to another.
pub fn is_g2g(config: &str) -> bool {
    Name::parse(config).is_ok_and(|n| n.base.starts_with(G2G_PREFIX))
}

/// The default `--configs`: every named configuration but the [`EXTRA`] ones.
pub fn all() -> Vec<String> {
    CONFIGS.iter().map(|(n, _)| n.to_string()).collect()
}

/// Which way a configuration's stream goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// From the remote host into the guest (the receive path the LRO paper measured).
    Rx,
    /// From the guest to the remote host (the transmit path; the NE2000 paper's workload).
    Tx,
}

/// The suffix of a configuration's transmit variant: `xen@tx` is `xen` streaming from the
/// guest to the remote host.
pub const TX_SUFFIX: &str = "@tx";

/// The suffix of a configuration run with several guests, each receiving (or sending) its
/// own stream at once: `xen/g4` is `xen` with 4 guests.
pub const GUESTS_SUFFIX: &str = "/g";

/// Most guests a bench configuration runs.
pub const MAX_GUESTS: usize = 16;

/// A configuration name taken apart: `BASE[@tx][/gN]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Name<'a> {
    pub base: &'a str,
    pub dir: Direction,
    /// Guests streaming at once (1 without `/gN`).
    pub guests: usize,
}

impl<'a> Name<'a> {
    /// Takes a configuration name apart (its base is not checked here: see
    /// [`daemon_config`]). A `/gN` suffix with N outside 1 to [`MAX_GUESTS`] is an error.
    pub fn parse(config: &'a str) -> Result<Name<'a>> {
        let (rest, guests) = match config.rsplit_once(GUESTS_SUFFIX) {
            Some((rest, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
                let g: usize = n.parse().unwrap_or(0);
                if !(1..=MAX_GUESTS).contains(&g) {
                    bail!("configuration {config:?}: 1 to {MAX_GUESTS} guests, not {n}");
                }
                (rest, g)
            }
            _ => (config, 1),
        };
        let (base, dir) = match rest.strip_suffix(TX_SUFFIX) {
            Some(base) => (base, Direction::Tx),
            None => (rest, Direction::Rx),
        };
        Ok(Name { base, dir, guests })
    }

    /// The name of configuration `base` with this one's direction and guests.
    pub fn with_base(&self, base: &str) -> String {
        let mut s = base.to_string();
        if self.dir == Direction::Tx {
            s.push_str(TX_SUFFIX);
        }
        if self.guests > 1 {
            s.push_str(&format!("{GUESTS_SUFFIX}{}", self.guests));
        }
        s
    }
}

/// What a configuration runs: a named one, or LRO (skb-mode) with any flush policy
/// (`timeout:USEC`, `every:N`: what `--sweep` uses); `@tx` streams the other way.
pub fn describe(config: &str) -> String {
    let Ok(name) = Name::parse(config) else {
        return config.to_string();
    };
    let base = name.base;
    let (base, exit_cost_ns) = split_exit_cost(base).unwrap_or((base, 0));
    let mut d = match CONFIGS.iter().chain(&EXTRA).find(|(n, _)| *n == base) {
        Some((_, d)) => d.to_string(),
        None => match g2g_mechanism(base) {
            Some(Ok(m)) => format!(
                "a stream from guest 0 to guest 1 on the same driver domain, netback under {m}"
            ),
            _ => format!("LRO with flush policy {base}"),
        },
    };
    if exit_cost_ns > 0 {
        d.push_str(&format!(
            "; {exit_cost_ns} ns of CPU spent on every VM exit"
        ));
    }
    if name.dir == Direction::Tx {
        d.push_str("; the stream from the guest to the remote host");
    }
    if name.guests > 1 {
        d.push_str(&format!(
            "; {} guests, one stream each, at once",
            name.guests
        ));
    }
    d
}

/// Whether the configuration runs a driver domain and a guest (the PV path or the relay).
pub fn is_pv(config: &str) -> bool {
    daemon_config(config).is_ok_and(|c| c.mode != Mode::Linux)
}

/// The daemon settings of a configuration.
pub fn daemon_config(config: &str) -> Result<DaemonConfig> {
    let name = Name::parse(config)?;
    let (config, exit_cost_ns) = split_exit_cost(name.base)?;
    let lro = |p: &str| -> Result<Option<LroSettings>> {
        let policy = p
            .parse()
            .map_err(|e| anyhow::anyhow!("configuration {config:?}: {e}"))?;
        Ok(Some(LroSettings {
            policy,
            mode: lro::Mode::Skb,
        }))
    };
    let g2g = g2g_mechanism(config).transpose()?;
    if g2g.is_some() && (name.dir == Direction::Tx || name.guests > 1) {
        bail!("configuration {config:?} streams from guest 0 to guest 1: it has no @tx or /gN variant");
    }
    let grant = match config {
        "map" => Mechanism::Map,
        "persistent" => Mechanism::Persistent,
        "premapped" => Mechanism::Premapped,
        "static" => Mechanism::Static,
        "flip" => Mechanism::Flip,
        _ => g2g.unwrap_or(Mechanism::Copy),
    };
    let (mode, lro, bo, gro) = match config {
        "linux" => (Mode::Linux, None, false, false),
        "linux-gro" => (Mode::Linux, None, false, true),
        "xen" | "map" | "persistent" | "premapped" | "static" | "flip" | "copy-frames" => {
            (Mode::Xen, None, false, false)
        }
        "lro" => (Mode::Xen, lro("poll")?, false, false),
        "bo" => (Mode::Xen, lro("poll")?, true, false),
        "da" => (Mode::Xen, lro("every:2")?, false, false),
        "timeout" => (Mode::Xen, lro("timeout:50")?, false, false),
        "adaptive" => (Mode::Xen, lro("adaptive")?, false, false),
        "port-gro" | "port-gro-v3" => (Mode::Xen, None, false, true),
        "port-gro+adaptive" => (Mode::Xen, lro("adaptive")?, false, true),
        "guest-gro" => (Mode::Xen, None, false, false),
        "relay" => (Mode::Relay, None, false, false),
        // A TAP write takes a chain as it is: the floor does not linearize.
        "relay-adaptive" => (Mode::Relay, lro("adaptive")?, true, false),
        "route" | "bridge-nf" => (Mode::Xen, None, false, false),
        "hvm" | "hvm-seed" | "hvm-fast" => (Mode::Xen, None, false, false),
        _ if g2g.is_some() => (Mode::Xen, None, false, false),
        p if p.contains(':') => (Mode::Xen, lro(p)?, false, false),
        _ => {
            let known: Vec<&str> = CONFIGS.iter().chain(&EXTRA).map(|(n, _)| *n).collect();
            bail!(
                "unknown configuration {config:?} (known: {}; or a flush policy such as timeout:100 or every:4)",
                known.join(", ")
            )
        }
    };
    // An HVM configuration's guests are HVM guests (no PV guest).
    let hvm_path = hvm_path(config);
    if exit_cost_ns > 0 && hvm_path.is_none() {
        bail!("configuration {config:?}: {EXIT_SUFFIX}N is for the HVM configurations (hvm, hvm-seed, hvm-fast)");
    }
    let cfg = DaemonConfig {
        mode,
        guests: match (hvm_path, g2g) {
            (Some(_), _) => 0,
            // The sender and the receiver.
            (None, Some(_)) => 2,
            (None, None) => name.guests,
        },
        hvm: if hvm_path.is_some() { name.guests } else { 0 },
        hvm_path: hvm_path.unwrap_or_default(),
        exit_cost_ns,
        lro,
        bo,
        gro,
        guest_gro: config == "guest-gro",
        port_ring: if config == "port-gro-v3" {
            crate::config::PortRing::V3
        } else {
            crate::config::PortRing::V2
        },
        grant,
        budget: crate::config::default_budget(mode),
        // Flip needs the driver domain's machine frames (g2g-flip too); copy-frames is copy
        // from the same frame port.
        port_frames: crate::config::frame_port(matches!(config, "flip" | "copy-frames"), grant),
        // The remote host's input (ACKs) runs on the sender's CPU: the sender's work is not
        // charged to the receiving CPU.
        sender_cpu: Some(TX_CPU),
        g2g: config != G2G_TWO_COPIES,
        switch: match config {
            "route" => switch::Mode::Route,
            "bridge-nf" => switch::Mode::BridgeNf,
            _ => switch::Mode::Bridge,
        },
        ..DaemonConfig::default()
    };
    // The port `pvnet up` would give these guests, so that every path that runs this
    // configuration (the bench's runs, the scenarios, the soak) runs what an operator gets
    // unless it is asked otherwise.
    Ok(DaemonConfig {
        ring_frames: ring_frames_for(&cfg, None),
        port_queues: port_queues_for(&cfg, None),
        ..cfg
    })
}

/// The port-I/O path of an HVM configuration's base name (None: not an HVM configuration).
pub fn hvm_path(base: &str) -> Option<Path> {
    match base {
        "hvm" => Some(Path::Original),
        "hvm-seed" => Some(Path::Fast(Class::Seed)),
        "hvm-fast" => Some(Path::Fast(Class::Max)),
        _ => None,
    }
}

/// Whether a configuration runs HVM guests.
pub fn is_hvm(config: &str) -> bool {
    daemon_config(config).is_ok_and(|c| c.hvm > 0)
}

/// The suffix of an HVM configuration run with a modelled exit cost: `hvm-fast+exit1000` is
/// `hvm-fast` with 1000 ns of CPU spent on every VM exit (`--exit-cost-ns`).
pub const EXIT_SUFFIX: &str = "+exit";

/// Most nanoseconds an exit cost may be (10 ms: far beyond any hardware, a typo's guard).
pub const MAX_EXIT_COST_NS: u64 = 10_000_000;

/// Splits `BASE+exitN` into `BASE` and N (0 without the suffix).
pub fn split_exit_cost(base: &str) -> Result<(&str, u64)> {
    let Some((b, n)) = base.rsplit_once(EXIT_SUFFIX) else {
        return Ok((base, 0));
    };
    match n.parse::<u64>() {
        Ok(ns) if n.bytes().all(|c| c.is_ascii_digit()) && ns <= MAX_EXIT_COST_NS => Ok((b, ns)),
        _ => bail!(
            "configuration {base:?}: {EXIT_SUFFIX}N takes nanoseconds, 0 to {MAX_EXIT_COST_NS}, not {n:?}"
        ),
    }
}

/// The name of HVM configuration `name` run at `exit_cost_ns` (the plain name at 0): the
/// suffix goes on the base, before `@tx` and `/gN`.
pub fn with_exit_cost(config: &str, exit_cost_ns: u64) -> Result<String> {
    let n = Name::parse(config)?;
    let (b, _) = split_exit_cost(n.base)?;
    Ok(if exit_cost_ns == 0 {
        n.with_base(b)
    } else {
        n.with_base(&format!("{b}{EXIT_SUFFIX}{exit_cost_ns}"))
    })
}

/// Parses `--exit-cost-ns`: nanoseconds, comma-separated, order kept, duplicates dropped.
pub fn parse_exit_costs(s: &str) -> Result<Vec<u64>> {
    let mut v = Vec::new();
    for x in s.split(',').map(str::trim).filter(|x| !x.is_empty()) {
        match x.parse::<u64>() {
            Ok(ns) if ns <= MAX_EXIT_COST_NS => {
                if !v.contains(&ns) {
                    v.push(ns)
                }
            }
            _ => bail!("--exit-cost-ns: {x:?} is not a cost in nanoseconds between 0 and {MAX_EXIT_COST_NS}"),
        }
    }
    if v.is_empty() {
        bail!("--exit-cost-ns names no cost");
    }
    Ok(v)
}

/// The physical port's settings a bench run is asked for (`--ring-frames`, `--port-queues`,
/// `--ring-prefetch`, `--budget`, `--mtu`), applied the same way to the daemon of every
/// configuration it runs, whatever it measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PortParams {
    /// Slots of the port's packet ring (PV configurations), or None for each configuration's
    /// default ([`crate::config::default_ring_frames`]).
    pub ring_frames: Option<u32>,
    /// Receive queues of the port (PV configurations), or None for each configuration's
    /// default ([`crate::config::default_port_queues`]).
    pub port_queues: Option<u32>,
    /// Slots of the port's ring loaded before use (PV configurations), or None for the
    /// default ([`pvnet_pnic::DEFAULT_PREFETCH`]).
    pub ring_prefetch: Option<u32>,
    /// Frames per poll of the port (PV configurations), or None for each configuration's
    /// default ([`crate::config::default_budget`]).
    pub budget: Option<usize>,
    /// MTU of the wire and every interface on the path.
    pub mtu: u32,
}

impl PortParams {
    /// `base` (a configuration's daemon, [`daemon_config`]) with these settings applied.
    pub fn apply(&self, base: DaemonConfig) -> DaemonConfig {
        DaemonConfig {
            ring_frames: ring_frames_for(&base, self.ring_frames),
            port_queues: port_queues_for(&base, self.port_queues),
            ring_prefetch: self.ring_prefetch.unwrap_or(base.ring_prefetch),
            budget: self.budget.unwrap_or(base.budget),
            mtu: self.mtu,
            ..base
        }
    }
}

/// Slots of the physical port's ring for `cfg`, the bench having been asked for `asked`
/// (`--ring-frames`, which counts MTU slots): with port GRO the slots hold 64 KiB, and the
/// ring has a quarter as many, at least the least `up` accepts. Not asked: what `pvnet up`
/// gives `cfg`'s guests ([`crate::config::default_ring_frames`]).
pub fn ring_frames_for(cfg: &DaemonConfig, asked: Option<u32>) -> u32 {
    let gro = cfg.gro && cfg.mode != Mode::Linux;
    match asked {
        None => crate::config::default_ring_frames(cfg.testbed_guests(), gro),
        Some(n) if gro => (n / 4).max(crate::config::RING_FRAMES_MIN),
        Some(n) => n,
    }
}

/// Receive queues of the physical port for `cfg`, the bench having been asked for `asked`
/// (`--port-queues`): what `pvnet up` gives `cfg`'s guests when not asked
/// ([`crate::config::default_port_queues`]); one on the frame port and on a V3 ring, which
/// have one, whatever was asked.
pub fn port_queues_for(cfg: &DaemonConfig, asked: Option<u32>) -> u32 {
    let (frames, ring) = (cfg.port_frames, cfg.port_ring);
    asked
        .and_then(|n| crate::config::check_port_queues(n, frames, ring).ok())
        .unwrap_or_else(|| crate::config::default_port_queues(cfg.testbed_guests(), frames, ring))
}

/// Parses `--configs`: comma-separated, duplicates dropped, order kept.
pub fn parse(s: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for c in s.split(',').map(str::trim).filter(|c| !c.is_empty()) {
        daemon_config(c)?;
        if !out.iter().any(|o| o == c) {
            out.push(c.to_string());
        }
    }
    if out.is_empty() {
        bail!("--configs names no configuration");
    }
    Ok(out)
}

/// Parses `--paired BASE,OTHER`: two PV configurations (the paired comparison switches
/// between them on a running testbed, which native Linux cannot be). The same one twice is an
/// A/A run: it shows the spread and bias of the method itself.
pub fn parse_pair(s: &str) -> Result<(String, String)> {
    let names: Vec<&str> = s.split(',').map(str::trim).collect();
    let [base, other] = names[..] else {
        bail!("--paired takes two configurations, BASE,OTHER (e.g. xen,adaptive), got {s:?}");
    };
    for c in [base, other] {
        set_request(c).with_context(|| format!("--paired {s}"))?;
    }
    Ok((base.to_string(), other.to_string()))
}

/// Parses `--sweep-values`: microseconds, comma-separated, each within the engine's hold limit.
pub fn parse_sweep_values(s: &str) -> Result<Vec<u32>> {
    let mut v = Vec::new();
    for x in s.split(',').map(str::trim).filter(|x| !x.is_empty()) {
        match x.parse::<u32>() {
            Ok(us) if (1..=lro::HOLD_LIMIT_US).contains(&us) => v.push(us),
            _ => bail!(
                "--sweep-values: {x:?} is not a timeout in microseconds between 1 and {}",
                lro::HOLD_LIMIT_US
            ),
        }
    }
    v.sort_unstable();
    v.dedup();
    if v.is_empty() {
        bail!("--sweep-values names no value");
    }
    Ok(v)
}

/// Parses `--sweep-values` of `--sweep guests`: guests, 1 to [`MAX_GUESTS`].
pub fn parse_guest_values(s: &str) -> Result<Vec<u32>> {
    let mut v = Vec::new();
    for x in s.split(',').map(str::trim).filter(|x| !x.is_empty()) {
        match x.parse::<u32>() {
            Ok(g) if (1..=MAX_GUESTS as u32).contains(&g) => v.push(g),
            _ => {
                bail!("--sweep-values: {x:?} is not a number of guests between 1 and {MAX_GUESTS}")
            }
        }
    }
    v.sort_unstable();
    v.dedup();
    if v.is_empty() {
        bail!("--sweep-values names no value");
    }
    Ok(v)
}

/// The live settings that turn a running PV testbed into `config`.
pub fn set_request(config: &str) -> Result<SetRequest> {
    let c = daemon_config(config)?;
    if c.switch != switch::Mode::Bridge {
        bail!("{config} changes the switch, which cannot be switched to on a running testbed");
    }
    if c.mode != Mode::Xen {
        bail!("{config} is not a PV configuration (the xen path, with or without aggregation): it cannot be switched to on a running testbed");
    }
    if c.gro || c.guest_gro {
        bail!("{config} sets GRO on the physical port or in the guests' TAPs, fixed when the testbed is built: it cannot be switched to on a running testbed");
    }
    if c.hvm > 0 {
        bail!("{config} runs an HVM guest, which cannot be switched to on a running testbed");
    }
    if c.port_frames {
        bail!("{config} receives into the driver domain's machine frames, which is fixed when the port opens: it cannot be switched to on a running testbed");
    }
    if c.grant != Mechanism::Copy {
        bail!("{config} chooses netback's grant mechanism, which is fixed when a vif connects: it cannot be switched to on a running testbed");
    }
    Ok(match &c.lro {
        Some(l) => SetRequest {
            port: None,
            lro: Some(LroChange::On(l.policy)),
            mode: Some(l.mode),
            bo: Some(c.bo),
            g2g: None,
            hvm_path: None,
            vif_rate: Vec::new(),
        },
        None => SetRequest {
            port: None,
            lro: Some(LroChange::Off),
            mode: None,
            bo: Some(c.bo),
            g2g: None,
            hvm_path: None,
            vif_rate: Vec::new(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has_lro(config: &str) -> bool {
        daemon_config(config).is_ok_and(|c| c.lro.is_some())
    }

    #[test]
    fn each_floor_is_the_relay_with_its_configuration_s_flush() {
        for (c, f) in FLOORS {
            assert_eq!(floor_of(c), Some(f));
            let (pv, floor) = (daemon_config(c).unwrap(), daemon_config(f).unwrap());
            assert_eq!((pv.mode, floor.mode), (Mode::Xen, Mode::Relay), "{c}, {f}");
            assert_eq!(pv.lro, floor.lro, "{c} and {f} flush alike");
        }
        assert_eq!(floor_of("relay"), None);
        assert_eq!(floor_of("da"), None, "no relay flushes every 2nd poll");
    }

    #[test]
    fn every_named_configuration_has_daemon_settings() {
        for (c, _) in CONFIGS.iter().chain(&EXTRA) {
            daemon_config(c).unwrap();
        }
        assert!(!all().iter().any(|c| EXTRA.iter().any(|(e, _)| e == c)));
        assert!(is_pv("relay") && !has_lro("relay") && has_lro("relay-adaptive"));
        assert!(daemon_config("relay-adaptive").unwrap().bo);
        assert!(daemon_config("linux-gro").unwrap().gro);
        assert!(!daemon_config("linux").unwrap().gro);
        assert!(!is_pv("linux-gro") && is_pv("xen") && !has_lro("xen") && has_lro("da"));
        assert!(daemon_config("bo").unwrap().bo);
        assert_eq!(daemon_config("map").unwrap().grant, Mechanism::Map);
        assert_eq!(
            daemon_config("persistent").unwrap().grant,
            Mechanism::Persistent
        );
        assert_eq!(daemon_config("xen").unwrap().grant, Mechanism::Copy);
        assert!(is_pv("map") && !has_lro("persistent"));
        assert!(!all().iter().any(|c| c == "map" || c == "persistent"));
        assert!(set_request("persistent").is_err() && set_request("map").is_err());
        assert_eq!(
            daemon_config("premapped").unwrap().grant,
            Mechanism::Premapped
        );
        assert_eq!(daemon_config("static").unwrap().grant, Mechanism::Static);
        assert_eq!(daemon_config("static@tx").unwrap().grant, Mechanism::Static);
        assert!(is_pv("premapped") && is_pv("static") && !has_lro("static"));
        assert!(set_request("premapped").is_err() && set_request("static").is_err());
    }

    #[test]
    fn guest_to_guest_configurations_follow_the_mechanisms() {
        for m in Mechanism::ALL {
            let name = format!("{G2G_PREFIX}{m}");
            let c = daemon_config(&name).unwrap();
            assert_eq!((c.grant, c.guests, c.mode), (m, 2, Mode::Xen), "{name}");
            assert!(is_g2g(&name) && is_pv(&name));
            assert!(describe(&name).contains(m.name()), "{}", describe(&name));
            // Flip runs on the driver domain's machine frames, guest to guest too.
            assert_eq!(c.port_frames, m == Mechanism::Flip, "{name}");
        }
        assert!(!is_g2g("xen") && !is_g2g("xen@tx"));
        let two = daemon_config(G2G_TWO_COPIES).unwrap();
        assert_eq!(
            (two.grant, two.g2g, two.guests),
            (Mechanism::Copy, false, 2)
        );
        assert!(daemon_config("g2g-copy").unwrap().g2g);
        let e = format!("{:#}", daemon_config("g2g-teleport").unwrap_err());
        assert!(e.contains("g2g-copy"), "{e}");
        assert!(daemon_config("g2g-copy@tx").is_err());
        assert!(daemon_config("g2g-copy/g4").is_err());
        assert!(!all().iter().any(|c| is_g2g(c)));
    }

    #[test]
    fn where_each_aggregation_configuration_aggregates() {
        let c = |n| daemon_config(n).unwrap();
        let pg = c("port-gro");
        assert!(pg.gro && !pg.guest_gro && pg.lro.is_none() && pg.mode == Mode::Xen);
        let pga = c("port-gro+adaptive");
        assert!(pga.gro && pga.lro.map(|l| l.policy) == Some(lro::Policy::Adaptive));
        let gg = c("guest-gro");
        assert!(!gg.gro && gg.guest_gro && gg.lro.is_none() && gg.mode == Mode::Xen);
        assert!(!c("xen").gro && !c("xen").guest_gro && !c("adaptive").guest_gro);
        assert!(c("linux-gro").gro && c("linux-gro").mode == Mode::Linux);
        assert_eq!(c("port-gro/g2").guests, 2);
        let v3 = c("port-gro-v3");
        assert!(v3.gro && v3.port_ring == crate::config::PortRing::V3 && v3.lro.is_none());
        assert_eq!(pg.port_ring, crate::config::PortRing::V2);
        for n in ["port-gro", "port-gro+adaptive", "guest-gro"] {
            assert!(is_pv(n) && !all().iter().any(|a| a == n), "{n}");
            let e = set_request(n).unwrap_err().to_string();
            assert!(e.contains("cannot be switched to"), "{e}");
        }
        // Port GRO's ring: a quarter of the slots asked for (they are 64 KiB each).
        assert_eq!(ring_frames_for(&pg, Some(4096)), 1024);
        assert_eq!(ring_frames_for(&pg, Some(256)), 256);
        assert_eq!(ring_frames_for(&c("xen"), Some(4096)), 4096);
        assert_eq!(ring_frames_for(&c("linux-gro"), Some(4096)), 4096);
        assert_eq!(ring_frames_for(&gg, Some(2048)), 2048);
        // Not asked: `up`'s default for the configuration's guests. Asked: the number asked,
        // whatever the guests.
        assert_eq!(ring_frames_for(&c("xen"), None), 4096);
        assert_eq!(ring_frames_for(&c("adaptive/g2"), None), 8192);
        assert_eq!(ring_frames_for(&c("xen/g3"), None), 8192);
        assert_eq!(ring_frames_for(&c("xen/g8"), None), 16384);
        assert_eq!(ring_frames_for(&c("xen/g16"), None), 32768);
        assert_eq!(ring_frames_for(&c("xen/g8"), Some(4096)), 4096);
        assert_eq!(ring_frames_for(&pg, None), pvnet_pnic::GRO_FRAME_NR);
        assert_eq!(
            ring_frames_for(&c("port-gro/g8"), None),
            pvnet_pnic::GRO_FRAME_NR
        );
        // Receive queues: one per guest unless asked; one on a port that has one.
        assert_eq!(port_queues_for(&c("xen"), None), 1);
        assert_eq!(port_queues_for(&c("adaptive/g8"), None), 8);
        assert_eq!(port_queues_for(&c("relay/g4"), None), 4);
        assert_eq!(port_queues_for(&c("xen/g8"), Some(1)), 1);
        assert_eq!(port_queues_for(&c("xen/g2"), Some(4)), 4);
        assert_eq!(port_queues_for(&c("port-gro-v3/g8"), None), 1);
        assert_eq!(port_queues_for(&c("port-gro-v3/g8"), Some(8)), 1);
        let flip = c("flip/g2");
        assert!(flip.port_frames);
        assert_eq!(port_queues_for(&flip, Some(2)), 1);
        // A configuration comes with that port, so no path that runs it can forget to size it.
        for n in ["xen", "adaptive/g4", "relay/g8", "port-gro/g8", "flip/g2"] {
            let d = c(n);
            assert_eq!(d.ring_frames, ring_frames_for(&d, None), "{n}");
            assert_eq!(d.port_queues, port_queues_for(&d, None), "{n}");
        }
        assert_eq!(
            (c("adaptive/g4").port_queues, c("adaptive/g4").ring_frames),
            (4, 8192)
        );
    }

    #[test]
    fn pvnet_up_by_default_is_the_default_configuration() {
        // `up` without --lro, --port-gro, --guest-gro or --bo runs the bench configuration
        // issue #24's rule chose; `xen` (the DaemonConfig default) is `up --lro off`.
        let c = |n| daemon_config(n).unwrap();
        let want = c(crate::config::DEFAULT_CONFIG);
        let up = DaemonConfig {
            lro: crate::config::default_lro(Mode::Xen, false, false),
            ..DaemonConfig::default()
        };
        assert_eq!(up.lro, want.lro);
        assert_eq!(
            (up.mode, up.gro, up.guest_gro, up.bo, up.guest_gso),
            (want.mode, want.gro, want.guest_gro, want.bo, want.guest_gso)
        );
        assert_eq!((up.grant, up.switch), (want.grant, want.switch));
        assert!(is_pv(crate::config::DEFAULT_CONFIG));
        let xen = daemon_config("xen").unwrap();
        assert_eq!(DaemonConfig::default().lro, xen.lro);
        assert!(xen.lro.is_none() && want.lro.is_some());
        // `up --port-gro` and `up --guest-gro` are the bench's `port-gro` and `guest-gro`.
        for n in ["port-gro", "guest-gro"] {
            assert_eq!(crate::config::default_lro(Mode::Xen, false, true), c(n).lro);
        }
        // A configuration the paired TCP_RR comparison can switch to live, against `xen`.
        assert!(set_request(crate::config::DEFAULT_CONFIG).is_ok());
    }

    #[test]
    fn policies_are_configurations_too() {
        assert!(has_lro("timeout:100"));
        assert!(daemon_config("timeout:0").is_err());
        assert!(daemon_config("warp").is_err());
        assert_eq!(
            parse("xen, da,xen,timeout:20").unwrap(),
            ["xen", "da", "timeout:20"]
        );
        assert!(parse(",").is_err());
    }

    #[test]
    fn sweep_values_are_checked_sorted_and_unique() {
        assert_eq!(parse_sweep_values("100,10,100").unwrap(), [10, 100]);
        assert!(parse_sweep_values("0").is_err());
        assert!(parse_sweep_values("5000").is_err());
        assert!(parse_sweep_values("x").is_err());
    }

    #[test]
    fn a_pair_is_two_pv_configurations() {
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(parse_pair("xen,adaptive").unwrap(), pair("xen", "adaptive"));
        assert_eq!(parse_pair(" xen , xen ").unwrap(), pair("xen", "xen"));
        assert_eq!(parse_pair("lro,every:4").unwrap(), pair("lro", "every:4"));
        let err = |s: &str| format!("{:#}", parse_pair(s).unwrap_err());
        for bad in ["xen", "xen,lro,da", ""] {
            assert!(
                err(bad).contains("takes two configurations"),
                "{bad}: {}",
                err(bad)
            );
        }
        assert!(
            err("linux,xen").contains("not a PV configuration"),
            "{}",
            err("linux,xen")
        );
        assert!(
            err("relay,xen").contains("not a PV configuration"),
            "{}",
            err("relay,xen")
        );
        assert!(
            err("xen,").contains("unknown configuration"),
            "{}",
            err("xen,")
        );
        assert!(
            err("xen,warp").contains("--paired xen,warp"),
            "{}",
            err("xen,warp")
        );
    }

    #[test]
    fn a_transmit_configuration_runs_its_base() {
        let n = |c| Name::parse(c).map(|n| (n.base, n.dir)).unwrap();
        assert_eq!(n("xen@tx"), ("xen", Direction::Tx));
        assert_eq!(n("timeout:50"), ("timeout:50", Direction::Rx));
        let c = daemon_config("adaptive@tx").unwrap();
        assert_eq!(c.lro.map(|l| l.policy), Some(lro::Policy::Adaptive));
        assert_eq!(daemon_config("linux@tx").unwrap().mode, Mode::Linux);
        assert!(daemon_config("warp@tx").is_err());
        assert!(parse("xen,xen@tx").is_ok());
    }

    #[test]
    fn hvm_configurations_run_hvm_guests_only() {
        let c = daemon_config("hvm-fast/g2").unwrap();
        assert_eq!(
            (c.guests, c.hvm, c.hvm_path),
            (0, 2, Path::Fast(Class::Max))
        );
        assert_eq!(daemon_config("hvm").unwrap().hvm_path, Path::Original);
        assert_eq!(
            daemon_config("hvm-seed@tx").unwrap().hvm_path,
            Path::Fast(Class::Seed)
        );
        assert_eq!(daemon_config("hvm-fast").unwrap().exit_cost_ns, 0);
        assert!(is_hvm("hvm-seed@tx") && !is_hvm("xen"));
        assert_eq!(daemon_config("xen").unwrap().hvm, 0);
        assert!(set_request("hvm").is_err());
        assert!(!all().iter().any(|c| c.starts_with("hvm")));
    }

    #[test]
    fn hvm_configurations_carry_an_exit_cost() {
        let c = daemon_config("hvm-fast+exit1000@tx/g2").unwrap();
        assert_eq!(
            (c.hvm, c.hvm_path, c.exit_cost_ns),
            (2, Path::Fast(Class::Max), 1000)
        );
        assert_eq!(daemon_config("hvm+exit0").unwrap().exit_cost_ns, 0);
        for bad in [
            "xen+exit1000",
            "hvm+exit",
            "hvm+exit-1",
            "hvm+exit1x",
            "hvm+exit99999999999",
        ] {
            assert!(daemon_config(bad).is_err(), "{bad}");
        }
        assert_eq!(
            with_exit_cost("hvm@tx/g2", 500).unwrap(),
            "hvm+exit500@tx/g2"
        );
        assert_eq!(with_exit_cost("hvm+exit500@tx", 0).unwrap(), "hvm@tx");
        assert_eq!(
            with_exit_cost("hvm-seed", 1000).unwrap(),
            "hvm-seed+exit1000"
        );
        assert!(describe("hvm+exit1000@tx").contains("1000 ns of CPU"));
        assert_eq!(parse_exit_costs("0, 1000,0").unwrap(), [0, 1000]);
        for bad in ["", ",", "x", "-1", "10000001"] {
            assert!(parse_exit_costs(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn configurations_with_several_guests() {
        let n = Name::parse("adaptive@tx/g4").unwrap();
        assert_eq!((n.base, n.dir, n.guests), ("adaptive", Direction::Tx, 4));
        assert_eq!(n.with_base("linux"), "linux@tx/g4");
        assert_eq!(Name::parse("xen").unwrap().with_base("linux"), "linux");
        assert_eq!(daemon_config("xen/g8").unwrap().guests, 8);
        assert_eq!(daemon_config("timeout:50/g2").unwrap().guests, 2);
        for bad in ["xen/g0", "xen/g17", "xen/g99999999999999999999"] {
            assert!(daemon_config(bad).is_err(), "{bad}");
        }
        assert!(describe("xen/g4").contains("4 guests"));
    }

    #[test]
    fn set_requests_of_the_pv_configurations() {
        let x = set_request("xen").unwrap();
        use pvnet_dd::lro::Policy;
        assert_eq!(x.lro, Some(LroChange::Off));
        assert_eq!(x.bo, Some(false));
        let a = set_request("adaptive").unwrap();
        assert_eq!(a.lro, Some(LroChange::On(Policy::Adaptive)));
        let b = set_request("bo").unwrap();
        assert_eq!(
            (b.lro, b.bo),
            (Some(LroChange::On(Policy::Poll)), Some(true))
        );
        assert_eq!(
            set_request("da").unwrap().lro,
            Some(LroChange::On(Policy::Every(2)))
        );
        let e = set_request("linux").unwrap_err().to_string();
        assert!(e.contains("not a PV configuration"), "{e}");
        assert!(set_request("nonsense").is_err());
    }
}
