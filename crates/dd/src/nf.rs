//! A per-packet filter pass standing for bridge netfilter (`CONFIG_BRIDGE_NETFILTER`, the cost
//! seed 003 finds in the bridge path): an ordered list of rules, each `accept` or `drop`, the
//! first matching rule decides, a default policy decides the rest; every rule and the policy
//! count the packets and bytes they decided.
//!
//! # Rule file
//! One rule per line; `#` starts a comment; blank lines are ignored. A line is either
//! `policy accept|drop` (at most once; the policy is `accept` without it, like an iptables
//! built-in chain) or an action followed by `keyword value` pairs, all of which must match:
//!
//! | keyword | value | matches |
//! |---|---|---|
//! | `in`, `out` | `phys`, `dd`, `vif<domid>` or a port number | ingress / egress port |
//! | `src-mac`, `dst-mac` | `aa:bb:cc:dd:ee:ff[/mask]`, `multicast`, `broadcast` | `(mac & mask) == addr` |
//! | `ethertype` | `ipv4`, `ipv6`, `arp`, `vlan` or `0xNNNN` (≥ `0x0600`) | ethertype (inside one 802.1Q tag) |
//! | `vlan` | `id` or `lo-hi` (0–4095) | 802.1Q VLAN id of a tagged frame |
//! | `src-ip`, `dst-ip` | IPv4 or IPv6 `addr[/len]` | address in the prefix (same family only) |
//! | `proto` | `tcp`, `udp`, `icmp`, `icmpv6` or 0–255 | IPv4 protocol / IPv6 next header |
//! | `sport`, `dport` | `port` or `lo-hi` | TCP/UDP port (needs `proto tcp` or `proto udp`) |
//! | `tcp-flags` | `mask/value`, each `none`, `all` or `syn,ack,...` | `(flags & mask) == value` (needs `proto tcp`) |
//! | `icmp-type` | `type` or `lo-hi` | ICMP / ICMPv6 type (needs `proto icmp` or `proto icmpv6`) |
//!
//! A value prefixed with `!` negates that match. Ranges include both ends. A keyword appears at
//! most once per rule. Contradictions that could never match (IPv4 and IPv6 in one rule, an IP
//! match under a non-IP ethertype, ports without a protocol that has them) are parse errors, as
//! are host bits beyond a prefix or MAC bits outside a mask. Every error names the line and the
//! offending token ([`ParseError`]).
//!
//! # Matching
//! Each frame is parsed once (no allocation) into the fields above. A field the frame does not
//! have is absent, and a rule asking for an absent field does not match, negated or not: a frame
//! shorter than an Ethernet header matches only rules on ports; a non-IP frame, or an IP header
//! that fails validation (version, IHL ≥ 5, header within the bytes, total length ≥ header),
//! matches no L3 or L4 rule; a TCP/UDP/ICMP header shorter than its fixed part (20/8/4 bytes),
//! a non-first IPv4 fragment, or an IPv6 packet whose next header is an extension header,
//! matches no L4 rule; an untagged frame matches no `vlan` rule. An IPv4 total length beyond the
//! bytes given is accepted, because the caller passes only the head of a chained aggregate (its
//! headers), with the whole packet's length for the byte counters.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use pvnet_wire::ethernet::{
    MacAddr, ETHERTYPE_ARP, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_VLAN, HEADER_LEN,
};

use crate::bridge::PortId;
use crate::switch::{vif_port, PORT_OWN, PORT_PHYSICAL};

/// The default rule set (`rules/default.rules`): anti-spoofing for the driver domain's stack
/// and guests 1 to 8, martian sources from outside, malformed TCP, a few blocked services, then
/// the services the benchmark uses; the policy accepts.
pub const DEFAULT_RULES: &str = include_str!("../rules/default.rules");

const PROTO_ICMP: u8 = 1;
const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;
const PROTO_ICMPV6: u8 = 58;

/// The highest domid a `vif<domid>` port name takes (Xen's `DOMID_FIRST_RESERVED` - 1).
const MAX_DOMID: u16 = 0x7fef;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Accept,
    Drop,
}

/// The outcome of [`Filter::check`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub action: Action,
    /// Index of the rule that decided, `None` for the default policy.
    pub rule: Option<usize>,
}

/// Packets and bytes decided by one rule (or the policy).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counter {
    pub packets: u64,
    pub bytes: u64,
}

impl Counter {
    fn add(&mut self, len: usize) {
        self.packets += 1;
        self.bytes += len as u64;
    }
}

/// One rule's counters with where it came from.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RuleStats {
    /// Line in the rule file (1-based).
    pub line: usize,
    /// The rule as written, comment and surrounding blanks removed.
    pub rule: String,
    pub packets: u64,
    pub bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct FilterStats {
    pub policy: Action,
    /// Packets accepted / dropped, by rules and policy together.
    pub accepted: u64,
    pub dropped: u64,
    /// Packets and bytes the policy decided.
    pub policy_hits: Counter,
    pub rules: Vec<RuleStats>,
}

/// A match value, possibly negated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct M<T> {
    v: T,
    neg: bool,
}

impl<T> M<T> {
    fn of(neg: bool, v: T) -> M<T> {
        M { v, neg }
    }
}

/// Inclusive range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span<T> {
    lo: T,
    hi: T,
}

impl<T: PartialOrd + Copy> Span<T> {
    fn has(self, x: T) -> bool {
        self.lo <= x && x <= self.hi
    }
}

/// A MAC and mask, each in the low 48 bits (address bits outside the mask are zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct MacMask {
    addr: u64,
    mask: u64,
}

/// A prefix (address bits beyond it are zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Net {
    V4 { addr: u32, mask: u32 },
    V6 { addr: u128, mask: u128 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Flags {
    mask: u8,
    value: u8,
}

/// A compiled rule: `None` fields are not asked for.
#[derive(Clone, Debug)]
struct Rule {
    action: Action,
    in_port: Option<M<u16>>,
    out_port: Option<M<u16>>,
    src_mac: Option<M<MacMask>>,
    dst_mac: Option<M<MacMask>>,
    ethertype: Option<M<u16>>,
    vlan: Option<M<Span<u16>>>,
    src_ip: Option<M<Net>>,
    dst_ip: Option<M<Net>>,
    proto: Option<M<u8>>,
    sport: Option<M<Span<u16>>>,
    dport: Option<M<Span<u16>>>,
    tcp_flags: Option<M<Flags>>,
    icmp_type: Option<M<Span<u8>>>,
    hits: Counter,
}

impl Rule {
    fn new(action: Action) -> Rule {
        Rule {
            action,
            in_port: None,
            out_port: None,
            src_mac: None,
            dst_mac: None,
            ethertype: None,
            vlan: None,
            src_ip: None,
            dst_ip: None,
            proto: None,
            sport: None,
            dport: None,
            tcp_flags: None,
            icmp_type: None,
            hits: Counter::default(),
        }
    }

    fn matches(&self, p: &Meta) -> bool {
        is(self.in_port, Some(p.in_port), |a, b| a == b)
            && is(self.out_port, Some(p.out_port), |a, b| a == b)
            && is(self.src_mac, p.l2.then_some(p.src_mac), |m, v| {
                v & m.mask == m.addr
            })
            && is(self.dst_mac, p.l2.then_some(p.dst_mac), |m, v| {
                v & m.mask == m.addr
            })
            && is(self.ethertype, p.l2.then_some(p.ethertype), |a, b| a == b)
            && is(self.vlan, p.vlan, Span::has)
            && ip_is(self.src_ip, p.ip, true)
            && ip_is(self.dst_ip, p.ip, false)
            && is(self.proto, p.proto, |a, b| a == b)
            && is(self.sport, p.ports.map(|x| x.0), Span::has)
            && is(self.dport, p.ports.map(|x| x.1), Span::has)
            && is(self.tcp_flags, p.tcp_flags, |f, v| v & f.mask == f.value)
            && is(self.icmp_type, p.icmp_type, Span::has)
    }
}

/// One match: true when not asked for; false when asked for and the field is absent; else the
/// test, inverted when negated.
#[inline(always)]
fn is<T: Copy, V: Copy>(m: Option<M<T>>, v: Option<V>, hit: impl Fn(T, V) -> bool) -> bool {
    match (m, v) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(m), Some(v)) => hit(m.v, v) != m.neg,
    }
}

/// An address match: an address of the other family counts as absent.
#[inline(always)]
fn ip_is(m: Option<M<Net>>, ip: Ip, src: bool) -> bool {
    let Some(m) = m else { return true };
    let hit = match (m.v, ip) {
        (Net::V4 { addr, mask }, Ip::V4 { src: s, dst: d }) => {
            (if src { s } else { d }) & mask == addr
        }
        (Net::V6 { addr, mask }, Ip::V6 { src: s, dst: d }) => {
            (if src { s } else { d }) & mask == addr
        }
        _ => return false,
    };
    hit != m.neg
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Ip {
    #[default]
    None,
    V4 {
        src: u32,
        dst: u32,
    },
    V6 {
        src: u128,
        dst: u128,
    },
}

/// The fields of one frame (see the module doc for when each is present).
#[derive(Clone, Copy, Debug, Default)]
struct Meta {
    in_port: u16,
    out_port: u16,
    /// The Ethernet header is there (the MACs and ethertype are valid).
    l2: bool,
    src_mac: u64,
    dst_mac: u64,
    ethertype: u16,
    vlan: Option<u16>,
    ip: Ip,
    proto: Option<u8>,
    /// TCP or UDP (source, destination).
    ports: Option<(u16, u16)>,
    tcp_flags: Option<u8>,
    icmp_type: Option<u8>,
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn mac48(b: &[u8]) -> u64 {
    b[..6].iter().fold(0u64, |acc, x| acc << 8 | u64::from(*x))
}

impl Meta {
    fn parse(in_port: PortId, out_port: PortId, frame: &[u8]) -> Meta {
        let mut m = Meta {
            in_port: in_port.0,
            out_port: out_port.0,
            ..Meta::default()
        };
        if frame.len() < HEADER_LEN {
            return m;
        }
        m.l2 = true;
        m.dst_mac = mac48(&frame[0..6]);
        m.src_mac = mac48(&frame[6..12]);
        let mut ethertype = be16(frame, 12);
        let mut off = HEADER_LEN;
        if ethertype == ETHERTYPE_VLAN && frame.len() >= HEADER_LEN + 4 {
            m.vlan = Some(be16(frame, 14) & 0x0fff);
            ethertype = be16(frame, 16);
            off += 4;
        }
        m.ethertype = ethertype;
        let l3 = &frame[off..];
        let (l4, proto) = match ethertype {
            ETHERTYPE_IPV4 => {
                if l3.len() < 20 || l3[0] >> 4 != 4 {
                    return m;
                }
                let hl = usize::from(l3[0] & 0x0f) * 4;
                if hl < 20 || hl > l3.len() || usize::from(be16(l3, 2)) < hl {
                    return m;
                }
                let a =
                    |at: usize| u32::from_be_bytes([l3[at], l3[at + 1], l3[at + 2], l3[at + 3]]);
                m.ip = Ip::V4 {
                    src: a(12),
                    dst: a(16),
                };
                m.proto = Some(l3[9]);
                if be16(l3, 6) & 0x1fff != 0 {
                    // A later fragment: no transport header here.
                    return m;
                }
                (&l3[hl..], l3[9])
            }
            ETHERTYPE_IPV6 => {
                if l3.len() < 40 || l3[0] >> 4 != 6 {
                    return m;
                }
                let a =
                    |at: usize| u128::from_be_bytes(l3[at..at + 16].try_into().expect("16 bytes"));
                m.ip = Ip::V6 {
                    src: a(8),
                    dst: a(24),
                };
                m.proto = Some(l3[6]);
                (&l3[40..], l3[6])
            }
            _ => return m,
        };
        let v6 = matches!(m.ip, Ip::V6 { .. });
        match proto {
            PROTO_TCP if l4.len() >= 20 && l4[12] >> 4 >= 5 => {
                m.ports = Some((be16(l4, 0), be16(l4, 2)));
                m.tcp_flags = Some(l4[13]);
            }
            PROTO_UDP if l4.len() >= 8 => m.ports = Some((be16(l4, 0), be16(l4, 2))),
            PROTO_ICMP if !v6 && l4.len() >= 4 => m.icmp_type = Some(l4[0]),
            PROTO_ICMPV6 if v6 && l4.len() >= 4 => m.icmp_type = Some(l4[0]),
            _ => {}
        }
        m
    }
}

/// The rule list, its policy and counters.
#[derive(Clone, Debug)]
pub struct Filter {
    rules: Vec<Rule>,
    /// (line, text) of each rule, for [`Filter::stats`].
    sources: Vec<(usize, String)>,
    policy: Action,
    policy_hits: Counter,
    accepted: u64,
    dropped: u64,
}

impl Filter {
    /// Parses a rule file (format in the module doc).
    pub fn parse(text: &str) -> Result<Filter, ParseError> {
        let mut f = Filter {
            rules: Vec::new(),
            sources: Vec::new(),
            policy: Action::Accept,
            policy_hits: Counter::default(),
            accepted: 0,
            dropped: 0,
        };
        let mut policy_seen = false;
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let body = raw.split('#').next().unwrap_or("").trim();
            let mut toks = body.split_whitespace();
            let Some(first) = toks.next() else { continue };
            let err = |token: &str, kind| ParseError {
                line,
                token: token.to_string(),
                kind,
            };
            let action = match first {
                "accept" => Action::Accept,
                "drop" => Action::Drop,
                "policy" => {
                    if policy_seen {
                        return Err(err(first, ParseErrorKind::DuplicatePolicy));
                    }
                    f.policy = match toks.next() {
                        Some("accept") => Action::Accept,
                        Some("drop") => Action::Drop,
                        Some(t) => return Err(err(t, ParseErrorKind::BadPolicy)),
                        None => return Err(err(first, ParseErrorKind::MissingValue)),
                    };
                    if let Some(t) = toks.next() {
                        return Err(err(t, ParseErrorKind::Unexpected));
                    }
                    policy_seen = true;
                    continue;
                }
                _ => return Err(err(first, ParseErrorKind::UnknownAction)),
            };
            let rule = parse_rule(action, toks).map_err(|(token, kind)| err(token, kind))?;
            f.rules.push(rule);
            f.sources.push((line, body.to_string()));
        }
        Ok(f)
    }

    /// The shipped rule set, [`DEFAULT_RULES`].
    pub fn default_rules() -> Filter {
        Filter::parse(DEFAULT_RULES).expect("the shipped rule set parses (tested)")
    }

    pub fn policy(&self) -> Action {
        self.policy
    }

    /// Number of rules (the policy not counted).
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Decides one frame going from `in_port` to `out_port`: the first matching rule, else the
    /// policy, and counts it (one packet, `len` bytes). `frame` needs to hold only the headers;
    /// `len` is the whole packet's length. Allocates nothing.
    pub fn check(
        &mut self,
        in_port: PortId,
        out_port: PortId,
        frame: &[u8],
        len: usize,
    ) -> Verdict {
        let meta = Meta::parse(in_port, out_port, frame);
        let (action, rule) = match self
            .rules
            .iter_mut()
            .enumerate()
            .find(|(_, r)| r.matches(&meta))
        {
            Some((i, r)) => {
                r.hits.add(len);
                (r.action, Some(i))
            }
            None => {
                self.policy_hits.add(len);
                (self.policy, None)
            }
        };
        match action {
            Action::Accept => self.accepted += 1,
            Action::Drop => self.dropped += 1,
        }
        Verdict { action, rule }
    }

    /// Counters of rule `i`.
    pub fn rule_hits(&self, i: usize) -> Option<Counter> {
        self.rules.get(i).map(|r| r.hits)
    }

    pub fn policy_hits(&self) -> Counter {
        self.policy_hits
    }

    pub fn stats(&self) -> FilterStats {
        FilterStats {
            policy: self.policy,
            accepted: self.accepted,
            dropped: self.dropped,
            policy_hits: self.policy_hits,
            rules: self
                .rules
                .iter()
                .zip(&self.sources)
                .map(|(r, (line, text))| RuleStats {
                    line: *line,
                    rule: text.clone(),
                    packets: r.hits.packets,
                    bytes: r.hits.bytes,
                })
                .collect(),
        }
    }
}

impl FromStr for Filter {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Filter, ParseError> {
        Filter::parse(s)
    }
}

/// A rule file that does not parse: where, what, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: `{token}`: {kind}")]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// The offending token as written.
    pub token: String,
    pub kind: ParseErrorKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseErrorKind {
    #[error("a line starts with `accept`, `drop` or `policy`")]
    UnknownAction,
    #[error("the policy is `accept` or `drop`")]
    BadPolicy,
    #[error("the policy is set twice")]
    DuplicatePolicy,
    #[error("nothing may follow the policy")]
    Unexpected,
    #[error("unknown match (in, out, src-mac, dst-mac, ethertype, vlan, src-ip, dst-ip, proto, sport, dport, tcp-flags, icmp-type)")]
    UnknownMatch,
    #[error("missing value")]
    MissingValue,
    #[error("the same match twice in one rule")]
    DuplicateMatch,
    #[error("bad port (phys, dd, vif<domid> with domid 1-32751, or a number 0-65535)")]
    BadPort,
    #[error("bad MAC address (aa:bb:cc:dd:ee:ff, multicast or broadcast)")]
    BadMac,
    #[error("bad MAC mask, or address bits outside the mask")]
    BadMacMask,
    #[error("bad ethertype (ipv4, ipv6, arp, vlan, or 0x0600-0xffff)")]
    BadEthertype,
    #[error("bad VLAN id or range (0-4095, lo-hi with lo <= hi)")]
    BadVlan,
    #[error("bad IPv4/IPv6 prefix (address[/length], length at most 32 or 128)")]
    BadPrefix,
    #[error("address bits set beyond the prefix length")]
    HostBits,
    #[error("bad protocol (tcp, udp, icmp, icmpv6, or 0-255)")]
    BadProto,
    #[error("bad port number or range (0-65535, lo-hi with lo <= hi)")]
    BadPortRange,
    #[error("bad TCP flags (mask/value, each none, all or a list of fin,syn,rst,psh,ack,urg,ece,cwr; value within mask)")]
    BadTcpFlags,
    #[error("bad ICMP type or range (0-255, lo-hi with lo <= hi)")]
    BadIcmpType,
    #[error("needs `proto tcp` or `proto udp` in the same rule")]
    NeedsTcpOrUdp,
    #[error("needs `proto tcp` in the same rule")]
    NeedsTcp,
    #[error("needs `proto icmp` or `proto icmpv6` in the same rule")]
    NeedsIcmp,
    #[error("mixes IPv4 and IPv6 in one rule")]
    FamilyConflict,
    #[error("an IP match under an ethertype that is neither ipv4 nor ipv6")]
    NotIp,
}

type Bad<'a> = (&'a str, ParseErrorKind);

/// Family a match implies (for the conflict checks).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    V4,
    V6,
}

fn parse_rule<'a>(
    action: Action,
    mut toks: impl Iterator<Item = &'a str>,
) -> Result<Rule, Bad<'a>> {
    use ParseErrorKind as K;
    let mut r = Rule::new(action);
    // (keyword, value) of each match, for the checks across matches.
    let mut seen: Vec<(&'a str, &'a str)> = Vec::new();
    while let Some(key) = toks.next() {
        let raw = toks.next().ok_or((key, K::MissingValue))?;
        if seen.iter().any(|(k, _)| *k == key) {
            return Err((key, K::DuplicateMatch));
        }
        let (neg, v) = match raw.strip_prefix('!') {
            Some(rest) => (true, rest),
            None => (false, raw),
        };
        let bad = |k| (raw, k);
        match key {
            "in" => r.in_port = Some(M::of(neg, port(v).ok_or(bad(K::BadPort))?)),
            "out" => r.out_port = Some(M::of(neg, port(v).ok_or(bad(K::BadPort))?)),
            "src-mac" => r.src_mac = Some(M::of(neg, mac_mask(v).map_err(bad)?)),
            "dst-mac" => r.dst_mac = Some(M::of(neg, mac_mask(v).map_err(bad)?)),
            "ethertype" => {
                r.ethertype = Some(M::of(neg, ethertype(v).ok_or(bad(K::BadEthertype))?))
            }
            "vlan" => {
                let s = span::<u16>(v).filter(|s| s.hi <= 4095);
                r.vlan = Some(M::of(neg, s.ok_or(bad(K::BadVlan))?));
            }
            "src-ip" => r.src_ip = Some(M::of(neg, net(v).map_err(bad)?)),
            "dst-ip" => r.dst_ip = Some(M::of(neg, net(v).map_err(bad)?)),
            "proto" => r.proto = Some(M::of(neg, proto(v).ok_or(bad(K::BadProto))?)),
            "sport" => r.sport = Some(M::of(neg, span(v).ok_or(bad(K::BadPortRange))?)),
            "dport" => r.dport = Some(M::of(neg, span(v).ok_or(bad(K::BadPortRange))?)),
            "tcp-flags" => r.tcp_flags = Some(M::of(neg, tcp_flags(v).ok_or(bad(K::BadTcpFlags))?)),
            "icmp-type" => r.icmp_type = Some(M::of(neg, span(v).ok_or(bad(K::BadIcmpType))?)),
            _ => return Err((key, K::UnknownMatch)),
        }
        seen.push((key, raw));
    }
    let value = |key: &'static str| -> &'a str {
        seen.iter()
            .find(|(k, _)| *k == key)
            .map_or(key, |(_, v)| *v)
    };

    // Transport fields need a protocol that has them (iptables asks for `-p tcp` too).
    let proto_is = |ps: &[u8]| r.proto.is_some_and(|p| !p.neg && ps.contains(&p.v));
    if r.sport.is_some() && !proto_is(&[PROTO_TCP, PROTO_UDP]) {
        return Err(("sport", K::NeedsTcpOrUdp));
    }
    if r.dport.is_some() && !proto_is(&[PROTO_TCP, PROTO_UDP]) {
        return Err(("dport", K::NeedsTcpOrUdp));
    }
    if r.tcp_flags.is_some() && !proto_is(&[PROTO_TCP]) {
        return Err(("tcp-flags", K::NeedsTcp));
    }
    if r.icmp_type.is_some() && !proto_is(&[PROTO_ICMP, PROTO_ICMPV6]) {
        return Err(("icmp-type", K::NeedsIcmp));
    }

    // Every family implied by a match must agree.
    let net_family = |n: Option<M<Net>>| {
        n.map(|n| match n.v {
            Net::V4 { .. } => Family::V4,
            Net::V6 { .. } => Family::V6,
        })
    };
    let mut implied: Vec<(&str, Family)> = Vec::new();
    if let Some(f) = net_family(r.src_ip) {
        implied.push(("src-ip", f));
    }
    if let Some(f) = net_family(r.dst_ip) {
        implied.push(("dst-ip", f));
    }
    match r.proto {
        Some(M {
            v: PROTO_ICMP,
            neg: false,
        }) => implied.push(("proto", Family::V4)),
        Some(M {
            v: PROTO_ICMPV6,
            neg: false,
        }) => implied.push(("proto", Family::V6)),
        _ => {}
    }
    if let Some((_, first)) = implied.first() {
        if let Some((key, _)) = implied.iter().find(|(_, f)| f != first) {
            return Err((value(key), K::FamilyConflict));
        }
    }
    let wants_ip = r.src_ip.is_some() || r.dst_ip.is_some() || r.proto.is_some();
    if let Some(M { v: et, neg: false }) = r.ethertype {
        let family = match et {
            ETHERTYPE_IPV4 => Some(Family::V4),
            ETHERTYPE_IPV6 => Some(Family::V6),
            _ => None,
        };
        match family {
            None if wants_ip => return Err((value("ethertype"), K::NotIp)),
            Some(f) if implied.iter().any(|(_, g)| *g != f) => {
                return Err((value("ethertype"), K::FamilyConflict));
            }
            _ => {}
        }
    }
    Ok(r)
}

fn port(v: &str) -> Option<u16> {
    match v {
        "phys" => Some(PORT_PHYSICAL.0),
        "dd" => Some(PORT_OWN.0),
        _ => match v.strip_prefix("vif") {
            Some(d) => {
                let d = num::<u16>(d)?;
                (1..=MAX_DOMID).contains(&d).then(|| vif_port(d).0)
            }
            None => num(v),
        },
    }
}

/// A decimal number: digits only (no sign, no blanks).
fn num<T: FromStr>(v: &str) -> Option<T> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok()
}

fn span<T: FromStr + PartialOrd + Copy>(v: &str) -> Option<Span<T>> {
    let (lo, hi) = match v.split_once('-') {
        Some((lo, hi)) => (num(lo)?, num(hi)?),
        None => {
            let x = num(v)?;
            (x, x)
        }
    };
    (lo <= hi).then_some(Span { lo, hi })
}

fn mac_mask(v: &str) -> Result<MacMask, ParseErrorKind> {
    let group = mac48(&[1, 0, 0, 0, 0, 0]);
    let all = mac48(&[0xff; 6]);
    match v {
        "multicast" => {
            return Ok(MacMask {
                addr: group,
                mask: group,
            })
        }
        "broadcast" => {
            return Ok(MacMask {
                addr: all,
                mask: all,
            })
        }
        _ => {}
    }
    let (a, m) = match v.split_once('/') {
        Some((a, m)) => (a, Some(m)),
        None => (v, None),
    };
    let addr = mac48(&MacAddr::from_str(a).map_err(|_| ParseErrorKind::BadMac)?.0);
    let mask = match m {
        Some(m) => mac48(
            &MacAddr::from_str(m)
                .map_err(|_| ParseErrorKind::BadMacMask)?
                .0,
        ),
        None => all,
    };
    if addr & !mask != 0 {
        return Err(ParseErrorKind::BadMacMask);
    }
    Ok(MacMask { addr, mask })
}

fn ethertype(v: &str) -> Option<u16> {
    let t = match v {
        "ipv4" => ETHERTYPE_IPV4,
        "ipv6" => ETHERTYPE_IPV6,
        "arp" => ETHERTYPE_ARP,
        "vlan" => ETHERTYPE_VLAN,
        _ => {
            let hex = v.strip_prefix("0x")?;
            if hex.is_empty() || hex.len() > 4 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            u16::from_str_radix(hex, 16).ok()?
        }
    };
    // Below 0x0600 the field is an 802.3 length, not a type.
    (t >= 0x0600).then_some(t)
}

fn net(v: &str) -> Result<Net, ParseErrorKind> {
    use ParseErrorKind as K;
    let (a, len) = match v.split_once('/') {
        Some((a, l)) => (a, Some(num::<u8>(l).ok_or(K::BadPrefix)?)),
        None => (v, None),
    };
    if a.contains(':') {
        let addr = u128::from(Ipv6Addr::from_str(a).map_err(|_| K::BadPrefix)?);
        let len = len.unwrap_or(128);
        if len > 128 {
            return Err(K::BadPrefix);
        }
        let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
        if addr & !mask != 0 {
            return Err(K::HostBits);
        }
        Ok(Net::V6 { addr, mask })
    } else {
        let addr = u32::from(Ipv4Addr::from_str(a).map_err(|_| K::BadPrefix)?);
        let len = len.unwrap_or(32);
        if len > 32 {
            return Err(K::BadPrefix);
        }
        let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
        if addr & !mask != 0 {
            return Err(K::HostBits);
        }
        Ok(Net::V4 { addr, mask })
    }
}

fn proto(v: &str) -> Option<u8> {
    match v {
        "tcp" => Some(PROTO_TCP),
        "udp" => Some(PROTO_UDP),
        "icmp" => Some(PROTO_ICMP),
        "icmpv6" => Some(PROTO_ICMPV6),
        _ => num(v),
    }
}

fn tcp_flag_set(v: &str) -> Option<u8> {
    match v {
        "none" => return Some(0),
        "all" => return Some(0xff),
        _ => {}
    }
    v.split(',').try_fold(0u8, |acc, name| {
        let bit = match name {
            "fin" => 0x01,
            "syn" => 0x02,
            "rst" => 0x04,
            "psh" => 0x08,
            "ack" => 0x10,
            "urg" => 0x20,
            "ece" => 0x40,
            "cwr" => 0x80,
            _ => return None,
        };
        Some(acc | bit)
    })
}

fn tcp_flags(v: &str) -> Option<Flags> {
    let (m, val) = v.split_once('/')?;
    let (mask, value) = (tcp_flag_set(m)?, tcp_flag_set(val)?);
    (value & !mask == 0).then_some(Flags { mask, value })
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Action::Accept => "accept",
            Action::Drop => "drop",
        })
    }
}
