//! Receive aggregation (LRO) for the driver domain's physical port (F. Nakanjima and H. Oi, "Optimizations of Large Receive
//! Offload in Xen", NCA 2009): TCP segments of
//! one flow, received in one or more NAPI-like polls, leave as one GSO packet.
//!
//! # Contract
//! - [`Lro::receive`] takes every frame of the port, in order. What is not mergeable passes
//!   through byte for byte with its own metadata, after its flow's held aggregate (per-flow order
//!   is kept; frames that do not parse as TCP belong to no flow and pass at once).
//! - An aggregate of one segment leaves as the frame it was (`DATA_VALID` added when its TCP
//!   checksum was verified here). An aggregate of several leaves as one [`Packet`] with GSO
//!   metadata (`NEEDS_CSUM`, `GSO_TCPV4`/`GSO_TCPV6`, `gso_size` = the first segment's payload
//!   length, the TCP check field holding the folded, non-complemented pseudo-header sum over the
//!   whole TCP length, IP lengths and the IPv4 header checksum rewritten; PSH and FIN if the
//!   last segment had them; IPv6 extension headers and IPv4 fields as in the first segment).
//!   [`segment`] cuts such a packet back into wire segments.
//! - An aggregate's IP packet (headers included) is at most [`MAX_IP_PACKET`] = 65535 bytes,
//!   exactly what Linux GRO allows by default (see `lro/rules.rs`).
//! - Representation ([`Mode`]): **skb** — the head is the first frame, each later receive buffer
//!   a [`Frag`](crate::packet::Frag) starting at its payload
//!   ([`Chain::FragList`](crate::packet::Chain::FragList)); **page** — the head is a copy of the
//!   headers, every payload (the first one's too) a fragment of its receive buffer
//!   ([`Chain::PageFrags`](crate::packet::Chain::PageFrags)). No payload byte is copied in either.
//! - Time is an argument (`now`, in ticks of [`Config::ticks_per_us`]): a frame's arrival time
//!   for `receive`, the port's time for `end_poll` and `expire`; nothing here reads a clock
//!   ([`Lro::set_wall`] tells it the caller's, for the flush latency only: the time aggregation
//!   held a segment, from when it was read, not its wait at the port before). No aggregate is
//!   held longer than [`HOLD_LIMIT_US`] after its first segment, and [`Lro::next_deadline`]
//!   tells when [`Lro::expire`] next has work, so an idle port never holds data without bound.
//! - The merge rules are a flat list of named predicates in `lro/rules.rs` (`FRAME_RULES`,
//!   `MATCH_RULES`, `END_RULES`, after Linux `tcp_gro_receive`), each with its own [`Reason`]
//!   and counter in [`LroStats::flush`]. Its documentation compares them with Linux GRO case
//!   by case and lists every difference with its reason.
//!
//! # Flush policies
//! - `poll`: everything leaves at the end of each poll (the paper's LRO).
//! - `every:N`: everything leaves at the end of every N-th poll that ended with something held
//!   (the paper's delayed aggregation, N = 2).
//! - `timeout:USEC`: an aggregate leaves when its first segment has waited USEC (Linux
//!   `gro_flush_timeout`).
//! - `adaptive`: see below.
//!
//! `poll` and `every:N` also flush everything when the port saw neither `receive` nor `end_poll`
//! for [`IDLE_FLUSH_US`] ("idle"). Deadlines other than the adaptive one are checked on every
//! `receive` too; the adaptive one only by `end_poll` and `expire` (a segment that arrives late,
//! before the timer has been served, still merges).
//!
//! # The adaptive policy
//! Hold an aggregate past the end of a poll only when its flow is *streaming*, and only as long
//! as its next segment is expected:
//! 1. Per flow, an EWMA `g` (weight 1/4) of the gap between a segment and the flow's previous
//!    one *when a poll boundary lies between them* and the previous one did not end a message
//!    (PSH or FIN): how soon a message's next segment comes once a poll has ended inside it.
//!    The pause after a message is the sender's, between messages (a 64 KiB write every
//!    0.7 ms per flow with eight guests); counted, it pushed `g` past the bound and cut every
//!    message in two at the next poll boundary. Times are the frames' arrival times (the
//!    driver domain passes the port's receive times), so the driver domain's own time off the
//!    CPU is not a gap either.
//! 2. At the end of a poll a held aggregate stays only if its flow streams (`g` ≤
//!    [`STREAM_GAP_US`]: it comes back well within `every:N`'s idle bound) and it has
//!    room for another full segment; its deadline is then last segment + 2 × `g`. A flow without
//!    history (a lone request) leaves at once.
//! 3. A deadline that passes without the next segment flushes the aggregate and doubles `g`.
//!    A hold that ends (deadline or any other flush) without the flow having continued the
//!    aggregate marks the flow: until a later hold pays off, it is held again only with evidence
//!    — an aggregate of ≥ 2 segments, or `g` ≤ [`STREAM_GAP_US`] / 2. An aggregate that fills
//!    up leaves at once (nothing to gain from holding it).
//!
//! So bulk flows aggregate until 64 KiB or PSH across as many polls as they keep coming (at
//! least what `every:2` gets), request/response flows see no delay beyond the poll (PSH ends
//! every message; without PSH a lone request has no history, the next request carries a new ACK
//! and cannot merge, and a flow whose hold missed once stops being held while its messages stay
//! single segments), and the same rule follows the
//! load: sparse traffic behaves like `poll`, dense traffic like an unbounded delayed aggregation,
//! all within [`HOLD_LIMIT_US`].

mod agg;
mod queues;
mod rules;
mod segment;
mod stats;

use std::fmt;
use std::str::FromStr;

use pvnet_wire::flow::{parse_tcp, FlowKey};
use pvnet_wire::vnet::VirtioNetHdr;
use pvnet_wire::TcpFlags;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use thiserror::Error;

use crate::packet::{Buf, Packet};
use agg::Agg;
pub use agg::MAX_IP_PACKET;
pub use queues::Queues;
use rules::Seg;
pub use rules::{FlushCounts, Reason};
pub use segment::{segment, SegmentError};
use stats::Counters;
pub use stats::{Latency, LroStats};

/// No aggregate is held longer than this after its first segment (µs).
pub const HOLD_LIMIT_US: u32 = 1000;
/// `poll` / `every:N`: a port that saw no frame and no poll for this long flushes everything
/// (µs). A safety net, so it must exceed how long the driver domain is off the CPU under load:
/// at 50 µs it made 15 % of `poll`'s and 22 % of `every:2`'s flushes on a 2-CPU machine where
/// the daemon shares its CPU with the guest; at 200 µs about 1 %.
pub const IDLE_FLUSH_US: u32 = 200;
/// Most segments in one aggregate (a full 64 KiB aggregate of 1448-byte segments has 46).
pub const MAX_SEGS: usize = 64;
/// Default [`Config::max_flows_per_dst`]: half the default table, so one guest never holds
/// more than half of it.
pub const MAX_FLOWS_PER_DST: usize = 16;
/// Adaptive policy: a flow streams when it comes back within this (µs) across polls.
pub const STREAM_GAP_US: u32 = 50;

/// Representation of an aggregate (the LRO paper's skb and page modes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// A list of whole receive buffers (`Chain::FragList`): the representation of the LRO paper's
    /// r8169 NIC, the one BO applies to, and the default everywhere (`pvnet up`, `bench`).
    #[default]
    Skb,
    /// Header copy + payload fragments (`Chain::PageFrags`).
    Page,
}

/// When held aggregates leave (see the module documentation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Policy {
    #[default]
    Poll,
    Every(u32),
    Timeout {
        us: u32,
    },
    Adaptive,
}

/// A mode or policy string that does not parse.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ParseError {
    #[error("unknown LRO mode {0:?}: expected \"skb\" or \"page\"")]
    Mode(String),
    #[error(
        "unknown LRO policy {0:?}: expected \"poll\", \"every:N\", \"timeout:USEC\" or \"adaptive\""
    )]
    Policy(String),
    #[error("bad LRO policy {0:?}: every:N needs a whole number N >= 1")]
    Every(String),
    #[error(
        "bad LRO policy {0:?}: timeout:USEC needs a whole number of microseconds in 1..={HOLD_LIMIT_US} (the hold limit)"
    )]
    Timeout(String),
}

impl FromStr for Mode {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Mode, ParseError> {
        match s {
            "skb" => Ok(Mode::Skb),
            "page" => Ok(Mode::Page),
            _ => Err(ParseError::Mode(s.to_owned())),
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Skb => "skb",
            Mode::Page => "page",
        })
    }
}

impl FromStr for Policy {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Policy, ParseError> {
        if let Some(n) = s.strip_prefix("every:") {
            return match n.parse::<u32>() {
                Ok(n) if n >= 1 => Ok(Policy::Every(n)),
                _ => Err(ParseError::Every(s.to_owned())),
            };
        }
        if let Some(us) = s.strip_prefix("timeout:") {
            return match us.parse::<u32>() {
                Ok(us) if (1..=HOLD_LIMIT_US).contains(&us) => Ok(Policy::Timeout { us }),
                _ => Err(ParseError::Timeout(s.to_owned())),
            };
        }
        match s {
            "poll" => Ok(Policy::Poll),
            "adaptive" => Ok(Policy::Adaptive),
            _ => Err(ParseError::Policy(s.to_owned())),
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Policy::Poll => f.write_str("poll"),
            Policy::Every(n) => write!(f, "every:{n}"),
            Policy::Timeout { us } => write!(f, "timeout:{us}"),
            Policy::Adaptive => f.write_str("adaptive"),
        }
    }
}

/// Serde as the `Display` / `FromStr` string.
macro_rules! serde_as_string {
    ($t:ty) => {
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<$t, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

serde_as_string!(Mode);
serde_as_string!(Policy);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    pub mode: Mode,
    pub policy: Policy,
    /// Flows tracked at once (held aggregates and adaptive history); at least 1.
    pub max_flows: usize,
    /// Most aggregates held at once for one destination MAC address, i.e. one guest (its
    /// cap in the shared table; at least 1). A segment that would open one more for a
    /// destination at its cap first flushes that destination's oldest aggregate (counted:
    /// `guest_flow_cap`, and as an eviction). In a full table a new flow displaces the oldest
    /// aggregate of the destination that holds the most, its own when it is among them, so a
    /// guest that holds no more than an equal share of the table never loses an aggregate to
    /// another guest's flows.
    pub max_flows_per_dst: usize,
    /// Clock rate of `now` (the daemon passes the TSC); at least 1.
    pub ticks_per_us: u64,
}

impl Default for Config {
    /// [`Mode::default`] (skb), `poll`, 32 flows, at most [`MAX_FLOWS_PER_DST`] of them
    /// held for one destination, `now` in nanoseconds.
    fn default() -> Config {
        Config {
            mode: Mode::default(),
            policy: Policy::Poll,
            max_flows: 32,
            max_flows_per_dst: MAX_FLOWS_PER_DST,
            ticks_per_us: 1000,
        }
    }
}

/// Durations in ticks.
#[derive(Debug)]
struct Ticks {
    per_us: u64,
    hold: u64,
    idle: u64,
    timeout: u64,
    stream: u64,
}

impl Ticks {
    fn new(cfg: &Config) -> Ticks {
        let per_us = cfg.ticks_per_us.max(1);
        let us = |v: u32| u64::from(v) * per_us;
        let timeout = match cfg.policy {
            Policy::Timeout { us: t } => us(t.clamp(1, HOLD_LIMIT_US)),
            _ => us(HOLD_LIMIT_US),
        };
        Ticks {
            per_us,
            hold: us(HOLD_LIMIT_US),
            idle: us(IDLE_FLUSH_US),
            timeout,
            stream: us(STREAM_GAP_US),
        }
    }
}

/// A flow the engine knows: its adaptive history, and its held aggregate if any.
#[derive(Debug)]
struct Flow {
    key: FlowKey,
    /// Arrival of its last data segment.
    last_at: u64,
    /// The poll (`Lro::epoch`) of its last data segment; `None` before the first.
    last_epoch: Option<u64>,
    /// EWMA of gaps across poll boundaries (ticks); `None` without history.
    gap: Option<u64>,
    /// Its last adaptive hold ended without the flow continuing the aggregate.
    missed: bool,
    /// Its last data segment ended a message (PSH or FIN).
    after_end: bool,
    held: Option<Agg>,
}

impl Flow {
    fn new(key: FlowKey) -> Flow {
        Flow {
            key,
            last_at: 0,
            last_epoch: None,
            gap: None,
            missed: false,
            after_end: false,
            held: None,
        }
    }

    /// A data segment arrived at `now` during poll `epoch`; `ends` when it ends a message
    /// (PSH or FIN). The pause after a message is the sender's, between messages: it says
    /// nothing about how soon a message's next segment comes, so it is not sampled.
    fn observe(&mut self, now: u64, epoch: u64, cap: u64, ends: bool) {
        if self.last_epoch.is_some_and(|e| e != epoch) && !self.after_end {
            let sample = now.saturating_sub(self.last_at).min(cap);
            self.gap = Some(self.gap.map_or(sample, |g| (3 * g + sample) / 4));
        }
        self.last_at = now;
        self.last_epoch = Some(epoch);
        self.after_end = ends;
    }
}

fn same_flow(a: &FlowKey, b: &FlowKey) -> bool {
    a.src_port == b.src_port && a.dst_port == b.dst_port && a.src == b.src && a.dst == b.dst
}

/// The LRO engine of one port.
#[derive(Debug)]
pub struct Lro {
    cfg: Config,
    t: Ticks,
    /// At most `max_flows` entries; scanned linearly.
    flows: Vec<Flow>,
    /// Entries of `flows` holding an aggregate.
    held: usize,
    /// Number of `end_poll` calls so far.
    epoch: u64,
    /// Last `receive` or `end_poll` (for the idle flush).
    last_active: u64,
    /// `every:N`: polls that ended with something held since the table was last empty.
    polls_held: u32,
    /// No hard deadline (hold limit, timeout, idle) falls before this (may be early, never late).
    hard_due: u64,
    /// The caller's clock when it is ahead of the times passed in (see [`Lro::set_wall`]).
    wall: u64,
    c: Counters,
}

impl Lro {
    pub fn new(mut cfg: Config) -> Lro {
        cfg.max_flows = cfg.max_flows.max(1);
        cfg.max_flows_per_dst = cfg.max_flows_per_dst.max(1);
        cfg.ticks_per_us = cfg.ticks_per_us.max(1);
        Lro {
            t: Ticks::new(&cfg),
            flows: Vec::with_capacity(cfg.max_flows),
            cfg,
            held: 0,
            epoch: 0,
            last_active: 0,
            polls_held: 0,
            hard_due: u64::MAX,
            wall: 0,
            c: Counters::new(),
        }
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Changes the policy on a running port; held aggregates stay (they obey the new policy).
    pub fn set_policy(&mut self, p: Policy) {
        self.cfg.policy = p;
        self.t = Ticks::new(&self.cfg);
        self.hard_due = 0;
        for a in self.flows.iter_mut().filter_map(|f| f.held.as_mut()) {
            a.deadline = None;
        }
    }

    /// Changes the representation: flushes everything held first (reason "reconfigure").
    pub fn set_mode(&mut self, m: Mode, now: u64, out: &mut Vec<Packet>) {
        self.flush_every(Reason::Reconfigure, now, out);
        self.cfg.mode = m;
    }

    /// Offers one received frame (Ethernet frame, as received; `vnet` its receive metadata).
    /// Emits to `out`, in order, whatever must leave now (pass-through frames, flushed
    /// aggregates).
    pub fn receive(
        &mut self,
        frame: impl Into<Buf>,
        vnet: VirtioNetHdr,
        now: u64,
        out: &mut Vec<Packet>,
    ) {
        let frame: Buf = frame.into();
        self.c.frames_in += 1;
        if now >= self.hard_due {
            self.expire_due(now, false, out);
        }
        self.last_active = self.last_active.max(now);
        let meta = match parse_tcp(&frame) {
            Ok(m) => m,
            Err(e) => return self.pass(Reason::of_parse_error(e), frame, vnet, out),
        };
        let idx = self.find(&meta.key);
        let seg = Seg {
            meta,
            frame: &frame,
            vnet,
        };
        if let Some(r) = rules::refuse(&seg) {
            if let Some(i) = idx {
                self.flush_flow(i, now, out);
            }
            return self.pass(r, frame, vnet, out);
        }
        self.c.segments_in += 1;
        let cap = 2 * self.t.stream;
        let ends = seg.meta.flags.intersects(TcpFlags::PSH | TcpFlags::FIN);
        if let Some(i) = idx {
            self.flows[i].observe(now, self.epoch, cap, ends);
            if let Some(a) = &self.flows[i].held {
                match rules::mismatch(a, &seg) {
                    None => {
                        let end = rules::ends(a, &seg);
                        let Seg { meta, .. } = seg;
                        let f = &mut self.flows[i];
                        let a = f.held.as_mut().expect("checked above");
                        if a.deadline.is_some() {
                            // An adaptive hold paid off: the flow came back in time.
                            a.grew = true;
                            f.missed = false;
                        }
                        a.merge(frame, &meta, self.cfg.mode);
                        let full = self.cfg.policy == Policy::Adaptive && !a.has_room();
                        match end {
                            Some(r) => self.flush_flow_for(r, i, now, out),
                            None if full => self.flush_flow_for(Reason::SizeLimit, i, now, out),
                            None => {}
                        }
                        return;
                    }
                    Some(r) => self.flush_flow_for(r, i, now, out),
                }
            }
        }
        let sw = !rules::trusted(&vnet, &seg.meta);
        let Seg { meta, .. } = seg;
        let end = if meta.flags.contains(TcpFlags::PSH) {
            Some(Reason::Psh)
        } else if meta.flags.contains(TcpFlags::FIN) {
            Some(Reason::Fin)
        } else {
            None
        };
        let mut dst = [0u8; 6];
        dst.copy_from_slice(&frame[..6]);
        let mut agg = Agg::start(frame, vnet, &meta, sw, now);
        agg.first_seen = self.wall.max(now);
        if let Some(r) = end {
            // A lone PSH or FIN segment leaves at once (`tcp_gro_receive` flushes it; it is
            // never held); remember its flow only if that costs no eviction.
            if idx.is_none() {
                if let Some(i) = self.free_slot(meta.key) {
                    self.flows[i].observe(now, self.epoch, cap, true);
                }
            }
            self.c.count(r);
            return self.emit(agg, now, out);
        }
        if let Some(j) = self.oldest_if_capped(&dst) {
            // Its guest holds its cap of aggregates: its own oldest leaves to make room, as
            // the table's oldest does when the table is full (Linux GRO flushes the oldest of
            // a full bucket); no other guest's aggregate is touched.
            self.c.guest_flow_cap += 1;
            self.c.evictions += 1;
            self.flush_flow_for(Reason::Eviction, j, now, out);
        }
        let i = match idx {
            Some(i) => i,
            None => {
                let i = self.new_slot(meta.key, &dst, now, out);
                self.flows[i].observe(now, self.epoch, cap, false);
                i
            }
        };
        self.hard_due = self.hard_due.min(self.due(&agg, false).0);
        self.flows[i].held = Some(agg);
        self.held += 1;
    }

    /// Moves the held aggregates' buffers that are still leased from the port's ring to the
    /// heap (before the daemon sleeps: no slot stays leased across a sleep). Returns how many
    /// buffers it copied.
    pub fn detach_held(&mut self) -> usize {
        self.flows
            .iter_mut()
            .filter_map(|f| f.held.as_mut())
            .map(Agg::detach)
            .sum()
    }

    /// [`Lro::detach_held`] for the newest segment of each held aggregate only.
    pub fn detach_newest(&mut self) -> usize {
        self.flows
            .iter_mut()
            .filter_map(|f| f.held.as_mut())
            .map(|a| usize::from(a.detach_newest()))
            .sum()
    }

    /// The caller's clock now, when the times it passes are the frames' arrival times (which
    /// lag it while frames wait in the port): the flush latency is timed on it, from reading an
    /// aggregate's first segment to its flush. The rules and deadlines go by the times passed in.
    pub fn set_wall(&mut self, now: u64) {
        self.wall = self.wall.max(now);
    }

    /// End of one NAPI poll that delivered `frames` frames: the policy decides what leaves.
    pub fn end_poll(&mut self, frames: usize, now: u64, out: &mut Vec<Packet>) {
        let _ = frames; // the policies look at the flows, not at the batch size
        self.last_active = self.last_active.max(now);
        match self.cfg.policy {
            Policy::Poll => self.flush_every(Reason::Poll, now, out),
            Policy::Every(n) => {
                if self.held == 0 {
                    self.polls_held = 0;
                } else {
                    self.polls_held += 1;
                    if self.polls_held >= n.max(1) {
                        self.flush_every(Reason::Every, now, out);
                        self.polls_held = 0;
                    }
                }
            }
            Policy::Timeout { .. } => {}
            Policy::Adaptive => self.adapt(now, out),
        }
        self.epoch += 1;
        self.expire_due(now, true, out);
    }

    /// Earliest time at which `expire` has something to do (None when nothing is held).
    pub fn next_deadline(&self) -> Option<u64> {
        self.flows
            .iter()
            .filter_map(|f| f.held.as_ref())
            .map(|a| self.due(a, true).0)
            .min()
    }

    /// Flushes what is due at `now` (timeouts, hold limit, idle port, adaptive deadlines).
    pub fn expire(&mut self, now: u64, out: &mut Vec<Packet>) {
        self.expire_due(now, true, out);
    }

    /// Flushes everything (reason "shutdown").
    pub fn flush_all(&mut self, now: u64, out: &mut Vec<Packet>) {
        self.flush_every(Reason::Shutdown, now, out);
    }

    /// Aggregates currently held.
    pub fn held(&self) -> usize {
        self.held
    }

    pub fn stats(&self) -> LroStats {
        self.c.snapshot(self.held, self.t.per_us)
    }

    // ------------------------------------------------------------------------------ internals

    /// When destination `dst` (a guest) holds its cap of aggregates, the entry of its oldest.
    fn oldest_if_capped(&self, dst: &[u8; 6]) -> Option<usize> {
        let mine = || {
            (self.flows.iter().enumerate())
                .filter_map(|(i, f)| f.held.as_ref().map(|a| (i, a)))
                .filter(|(_, a)| a.macs()[..6] == dst[..])
        };
        if mine().count() < self.cfg.max_flows_per_dst {
            return None;
        }
        mine().min_by_key(|(_, a)| a.first_at).map(|(i, _)| i)
    }

    fn find(&self, key: &FlowKey) -> Option<usize> {
        self.flows.iter().position(|f| same_flow(&f.key, key))
    }

    /// A table entry for a new flow without evicting anything: a fresh one, or the least
    /// recently active entry that holds nothing.
    fn free_slot(&mut self, key: FlowKey) -> Option<usize> {
        if self.flows.len() < self.cfg.max_flows {
            self.flows.push(Flow::new(key));
            return Some(self.flows.len() - 1);
        }
        let (i, _) = self
            .flows
            .iter()
            .enumerate()
            .filter(|(_, f)| f.held.is_none())
            .min_by_key(|(_, f)| f.last_at)?;
        self.flows[i] = Flow::new(key);
        Some(i)
    }

    /// A table entry for a new flow of destination `dst`; when every entry holds an
    /// aggregate, one leaves (reason "eviction"): the oldest of the destination (guest) that
    /// holds the most, `dst` itself when it is among them. So a guest's new flow displaces
    /// another guest's aggregate only when that guest holds more than it does, and a guest
    /// that holds no more than an equal share of the table never loses one to another guest.
    /// With one destination this is Linux GRO's rule for a full bucket: the oldest leaves.
    fn new_slot(&mut self, key: FlowKey, dst: &[u8; 6], now: u64, out: &mut Vec<Packet>) -> usize {
        if let Some(i) = self.free_slot(key) {
            return i;
        }
        let i = self.victim(dst).expect("a full table holds an aggregate");
        self.c.evictions += 1;
        self.flush_flow_for(Reason::Eviction, i, now, out);
        self.flows[i] = Flow::new(key);
        i
    }

    /// The entry [`Self::new_slot`] empties in a full table for a new flow of `dst`.
    fn victim(&self, dst: &[u8; 6]) -> Option<usize> {
        // Per destination: how many aggregates it holds, and the entry and age of its oldest.
        // The table is small (32 by default) and this runs only when every entry is held.
        let mut per: Vec<(&[u8], usize, usize, u64)> = Vec::new();
        for (i, f) in self.flows.iter().enumerate() {
            let Some(a) = f.held.as_ref() else { continue };
            let d = &a.macs()[..6];
            match per.iter_mut().find(|p| p.0 == d) {
                Some(p) => {
                    p.1 += 1;
                    if a.first_at < p.3 {
                        (p.2, p.3) = (i, a.first_at);
                    }
                }
                None => per.push((d, 1, i, a.first_at)),
            }
        }
        per.iter()
            .max_by_key(|p| (p.1, p.0 == &dst[..], std::cmp::Reverse(p.3)))
            .map(|p| p.2)
    }

    /// Passes a frame on unchanged.
    fn pass(&mut self, r: Reason, frame: Buf, vnet: VirtioNetHdr, out: &mut Vec<Packet>) {
        self.c.count(r);
        self.c.passthrough += 1;
        out.push(Packet::linear(vnet, frame));
    }

    /// The held aggregate of flow `i` (if any) leaves; the caller counts the reason.
    fn flush_flow(&mut self, i: usize, now: u64, out: &mut Vec<Packet>) {
        if let Some(a) = self.flows[i].held.take() {
            if a.deadline.is_some() && !a.grew {
                // Held at the end of a poll for nothing: the flow did not continue it.
                self.flows[i].missed = true;
            }
            self.held -= 1;
            if self.held == 0 {
                self.hard_due = u64::MAX;
            }
            self.emit(a, now, out);
        }
    }

    fn flush_flow_for(&mut self, r: Reason, i: usize, now: u64, out: &mut Vec<Packet>) {
        self.c.count(r);
        self.flush_flow(i, now, out);
    }

    /// Every held aggregate leaves, each counted under `r`.
    fn flush_every(&mut self, r: Reason, now: u64, out: &mut Vec<Packet>) {
        for i in 0..self.flows.len() {
            if self.flows[i].held.is_some() {
                self.flush_flow_for(r, i, now, out);
            }
        }
    }

    fn emit(&mut self, a: Agg, now: u64, out: &mut Vec<Packet>) {
        self.c.aggregates_out += 1;
        if a.segs > 1 {
            self.c.gso_out += 1;
        }
        // From when the first segment was read to when the aggregate leaves, on the caller's
        // clock: the time aggregation kept it, not its wait at the port before it was read.
        // An auto-resizing histogram only fails on counter overflow; losing a sample is fine.
        let left = self.wall.max(now);
        let _ = self.c.latency.record(left.saturating_sub(a.first_seen));
        out.push(a.finish(self.cfg.mode));
    }

    /// The earliest deadline of `a` and its reason; `soft` includes the adaptive deadline.
    fn due(&self, a: &Agg, soft: bool) -> (u64, Reason) {
        let at = |d: u64| a.first_at.saturating_add(d);
        let hold = (at(self.t.hold), Reason::HoldLimit);
        let other = match self.cfg.policy {
            Policy::Timeout { .. } => Some((at(self.t.timeout), Reason::Timeout)),
            Policy::Poll | Policy::Every(_) => {
                Some((self.last_active.saturating_add(self.t.idle), Reason::Idle))
            }
            Policy::Adaptive if soft => a.deadline.map(|d| (d, Reason::Adaptive)),
            Policy::Adaptive => None,
        };
        other.map_or(hold, |o| o.min(hold))
    }

    /// Flushes every aggregate whose deadline has come; refreshes `hard_due`.
    fn expire_due(&mut self, now: u64, soft: bool, out: &mut Vec<Packet>) {
        let mut next = u64::MAX;
        for i in 0..self.flows.len() {
            let Some(a) = &self.flows[i].held else {
                continue;
            };
            let (d, r) = self.due(a, soft);
            if d > now {
                next = next.min(self.due(a, false).0);
                continue;
            }
            if r == Reason::Adaptive {
                // The next segment is late: the stream paused; make it prove itself again.
                let f = &mut self.flows[i];
                f.gap = f.gap.map(|g| (2 * g).clamp(1, 2 * self.t.stream));
            }
            self.flush_flow_for(r, i, now, out);
        }
        self.hard_due = next;
    }

    /// Adaptive end of poll: keep what streams and has room, with a deadline; flush the rest.
    fn adapt(&mut self, now: u64, out: &mut Vec<Packet>) {
        for i in 0..self.flows.len() {
            let f = &self.flows[i];
            let Some(a) = &f.held else {
                continue;
            };
            let bound = self.t.stream;
            let keep = match f.gap {
                Some(g)
                    if g <= bound
                        && a.has_room()
                        && (!f.missed || a.segs >= 2 || 2 * g <= bound) =>
                {
                    Some(f.last_at + (2 * g).max(1))
                }
                _ => None,
            };
            match keep {
                Some(d) => {
                    if let Some(a) = self.flows[i].held.as_mut() {
                        a.deadline = Some(d);
                        a.grew = false;
                    }
                }
                None => self.flush_flow_for(Reason::Adaptive, i, now, out),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> FlowKey {
        FlowKey {
            src: [10, 0, 0, 1].into(),
            dst: [10, 0, 0, 2].into(),
            src_port: 1,
            dst_port: 2,
        }
    }

    #[test]
    fn gap_is_sampled_only_across_polls() {
        let mut f = Flow::new(key());
        f.observe(100, 0, 1000, false);
        f.observe(101, 0, 1000, false); // same poll: processing time, not arrival
        assert_eq!(f.gap, None);
        f.observe(141, 1, 1000, false);
        assert_eq!(f.gap, Some(40));
        f.observe(161, 2, 1000, false);
        assert_eq!(f.gap, Some((3 * 40 + 20) / 4));
        f.observe(100_000, 3, 1000, false); // a long pause counts as the cap
        assert_eq!(f.gap, Some((3 * 35 + 1000) / 4));
    }

    #[test]
    fn the_pause_after_a_message_is_not_a_gap() {
        let mut f = Flow::new(key());
        f.observe(100, 0, 1000, false);
        f.observe(110, 1, 1000, true); // a message's last segment, in the next poll
        assert_eq!(f.gap, Some(10));
        // The sender's pause before its next message, across polls: not sampled.
        f.observe(900, 2, 1000, false);
        assert_eq!(f.gap, Some(10));
        // Inside that message, across the next boundary: sampled.
        f.observe(920, 3, 1000, false);
        assert_eq!(f.gap, Some((3 * 10 + 20) / 4));
    }

    #[test]
    fn degenerate_config_is_clamped() {
        let lro = Lro::new(Config {
            max_flows: 0,
            ticks_per_us: 0,
            policy: Policy::Timeout { us: 0 },
            ..Config::default()
        });
        assert_eq!((lro.config().max_flows, lro.config().ticks_per_us), (1, 1));
        assert_eq!(lro.t.timeout, 1);
        let mut lro = lro;
        lro.set_policy(Policy::Timeout { us: 99_999 });
        assert_eq!(lro.t.timeout, u64::from(HOLD_LIMIT_US));
        lro.set_policy(Policy::Every(0));
        let mut out = Vec::new();
        lro.end_poll(0, 0, &mut out); // every:0 behaves as every:1, no panic
        assert!(out.is_empty());
    }
}
