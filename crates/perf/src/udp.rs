//! UDP_STREAM-like test: fixed-size datagrams, each verifiable on its own, counted by the receiver.
//!
//! A workload that sizes packets: with a datagram size below the path MTU every datagram is one
//! frame, so throughput and CPU cost can be measured per packet size (Santos, Janakiraman and Turner compare page
//! flipping with copying by packet size and derives break-even sizes).
//!
//! # Protocol
//!
//! The test runs over a TCP control connection to a [`crate::serve`] server plus UDP datagrams:
//!
//! 1. client → server: the 32-byte hello [`Hello::Udp`] (datagram size, test id, planned
//!    duration, datagram limit). The server rejects sizes outside 1..=[`MAX_DATAGRAM`].
//! 2. server → client: one JSON line [`UdpReady`]: the UDP port the receiver bound (on the
//!    control connection's local address) and the receive buffer the kernel granted.
//! 3. client → server: datagrams `0, 1, 2, ...` from a socket bound to the control connection's
//!    local address; the receiver accepts datagrams from the control peer's address only.
//! 4. client → server: one JSON line [`UdpStop`] with the number of datagrams sent.
//! 5. The receiver drains what is still in flight (until every sent datagram is in, or nothing
//!    arrived for [`UdpLimits::drain_quiet`], at most [`UdpLimits::drain_max`]), reads what is
//!    queued already without waiting (datagrams beyond the sender's count), then sends one JSON
//!    line [`UdpReport`] and closes.
//!
//! Neither side waits forever: the receiver gives up when neither a datagram nor a control byte
//! arrived for [`UdpLimits::idle`], or the stop is [`UdpLimits::stop_grace`] past the planned
//! duration, or the control connection closes without a stop ([`UdpRecvError`]); the sender
//! waits at most [`READY_TIMEOUT`] for the ready line and [`REPORT_TIMEOUT`] for the report.
//!
//! # Datagram format
//!
//! Datagram `seq` of a test with size `n` is the first `n` bytes of:
//!
//! | bytes  | field                                                              |
//! |--------|--------------------------------------------------------------------|
//! | 0..8   | `seq`, little-endian                                               |
//! | 8..12  | test id, little-endian                                             |
//! | 12..   | [`crate::pattern`] bytes at stream offsets `seq * n + 12 ..`       |
//!
//! That is the datagrams read as one stream of `n`-byte records with a header over the first 12
//! bytes of each, so the payload is keyed by the sequence number and any datagram can be
//! verified alone: a datagram whose sequence field was damaged no longer matches its payload.
//! Datagrams shorter than 12 bytes carry a truncated header: below 8 bytes the receiver extends
//! the low bytes of the sequence number to the value nearest the next expected one (so a run of
//! more than half the truncated number space lost in a row, more than 128 datagrams at size 1,
//! is misattributed), and below 12 bytes the test id is only partly (or not) present.
//!
//! # Counting
//!
//! Every datagram from the sender's address whose test id bytes match belongs to the test
//! (`received`, `bytes`) and is exactly one of: `corrupt` (wrong length, or a payload that
//! differs from the pattern for its sequence number: its sequence number is not trusted),
//! `duplicated` (sequence number already seen), `stale` (more than [`WINDOW`] behind the
//! highest sequence number: too old to tell), or `unique`. `reordered` counts the unique ones
//! that arrived after a higher sequence number. `lost` is the sequence numbers below the
//! sender's count that never arrived. Anything else is `foreign` and not counted otherwise.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpStream, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{setsockopt, sockopt};
use serde::{Deserialize, Serialize};

use crate::pattern;
use crate::proto::{self, Hello};

/// Largest datagram (UDP payload over IPv4).
pub const MAX_DATAGRAM: usize = proto::MAX_DATAGRAM as usize;
/// Sequence number (8) and test id (4) at the start of each datagram.
pub const HEADER_LEN: usize = 12;
/// Sequence numbers the receiver remembers behind the highest one (2 MiB of bitmap).
pub const WINDOW: u64 = 1 << 24;
/// Datagrams per `sendmmsg`/`recvmmsg` call at most.
pub const BATCH: usize = 64;
/// Receive buffer the receiver asks for (`SO_RCVBUFFORCE` as root, else `SO_RCVBUF`, which the
/// kernel caps at `net.core.rmem_max`).
pub const RCVBUF_WANT: usize = 32 << 20;
/// The pacer lets the sender catch up at most this much of its schedule at once (the token
/// bucket's depth, in time at the offered rate): enough to absorb a late wake-up on a busy
/// machine (with 2 ms, 4 runnable threads per core made a 5000/s sender skip 13 % of its
/// slots); what is late by more is skipped and counted.
pub const BURST: Duration = Duration::from_millis(10);
/// How long the sender waits for the receiver's ready line.
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the sender waits for the report after its stop.
pub const REPORT_TIMEOUT: Duration = Duration::from_secs(15);
/// Longest control line accepted (ready, stop); the report may be twice that.
const MAX_LINE: usize = 4096;

/// Offered load of a UDP stream.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rate {
    /// UDP payload bits per second (headers not counted, as iperf3's `-b`).
    BitsPerSec(f64),
    /// Datagrams per second.
    DatagramsPerSec(f64),
}

impl Rate {
    /// Datagrams per second at datagram size `size`.
    pub fn datagrams_per_sec(&self, size: usize) -> f64 {
        match *self {
            Rate::BitsPerSec(b) => b / (8.0 * size as f64),
            Rate::DatagramsPerSec(d) => d,
        }
    }
}

/// Parses `<number>[k|K|M|G][unit]`: no unit, `b`, `bps` or `bit/s` are bits per second;
/// `pps` or `dps` are datagrams per second. E.g. `100M`, `2.5Gbps`, `50kpps`.
impl FromStr for Rate {
    type Err = String;

    fn from_str(s: &str) -> Result<Rate, String> {
        let bad = || {
            format!("rate {s:?}: want a positive number with an optional k/M/G prefix and unit bps (default) or pps, e.g. 100M or 50kpps")
        };
        let t = s.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E'))
            .unwrap_or(t.len());
        // 'e' is also no unit letter here: "1e6" is a number, "1e" is not.
        let (num, rest) = t.split_at(split);
        let v: f64 = num.parse().map_err(|_| bad())?;
        let (mult, unit) = match rest.chars().next() {
            Some('k' | 'K') => (1e3, &rest[1..]),
            Some('M') => (1e6, &rest[1..]),
            Some('G') => (1e9, &rest[1..]),
            _ => (1.0, rest),
        };
        let v = v * mult;
        if !(v.is_finite() && v > 0.0) {
            return Err(bad());
        }
        match unit {
            "" | "b" | "bps" | "bit/s" => Ok(Rate::BitsPerSec(v)),
            "pps" | "dps" => Ok(Rate::DatagramsPerSec(v)),
            _ => Err(bad()),
        }
    }
}

/// Options of [`udp_send`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UdpOpts {
    /// Bytes per datagram (UDP payload), 1..=[`MAX_DATAGRAM`].
    pub size: usize,
    /// Stop sending after this long.
    pub duration: Option<Duration>,
    /// Stop after this many datagrams. At least one of `duration` and `datagrams` is required;
    /// with both, whichever comes first ends the test.
    pub datagrams: Option<u64>,
    /// Offered load; `None` sends as fast as the socket takes datagrams.
    pub rate: Option<Rate>,
    /// Test id carried in each datagram; `None` picks one from the clock and the process id.
    pub test_id: Option<u32>,
    /// Depth of the pacer's token bucket in time at the offered rate (at least one datagram);
    /// `None` is [`BURST`].
    pub burst: Option<Duration>,
}

impl Default for UdpOpts {
    fn default() -> Self {
        UdpOpts {
            size: 1472,
            duration: Some(Duration::from_secs(10)),
            datagrams: None,
            rate: None,
            test_id: None,
            burst: None,
        }
    }
}

/// Receiver → sender after the hello: where to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct UdpReady {
    /// UDP port of the receiver, on the address the control connection reached.
    pub port: u16,
    /// Receive buffer the kernel granted (`getsockopt(SO_RCVBUF)`, which counts overhead).
    pub rcvbuf: u64,
}

/// Sender → receiver when done: how many datagrams were sent (sequence numbers `0..sent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct UdpStop {
    pub sent: u64,
}

/// What the receiver counted and verified (see the module docs for the classes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UdpReport {
    pub test_id: u32,
    /// Expected datagram size.
    pub size: u32,
    /// Datagrams the sender said it sent; 0 in a report made without a stop.
    pub sent: u64,
    /// Datagrams of this test that arrived: `unique + duplicated + corrupt + stale`.
    pub received: u64,
    /// Their bytes (a datagram longer than `size` counts `size`: the kernel cut it there).
    pub bytes: u64,
    /// Verified datagrams with a sequence number not seen before (including `beyond`).
    pub unique: u64,
    /// Sequence numbers below `sent` that never arrived (`stale` ones count as arrived).
    pub lost: u64,
    /// Of `unique`, those that arrived after a higher sequence number.
    pub reordered: u64,
    /// Verified datagrams whose sequence number was already seen.
    pub duplicated: u64,
    /// Wrong length or pattern mismatch.
    pub corrupt: u64,
    /// Of `corrupt`, those of the wrong length.
    pub wrong_size: u64,
    /// Of `unique`, those numbered at or past `sent` (exact while the highest sequence number
    /// is within [`WINDOW`] of `sent`).
    pub beyond: u64,
    /// Verified datagrams more than [`WINDOW`] behind the highest sequence number.
    pub stale: u64,
    /// Datagrams from another address or with another test id (counted nowhere else).
    pub foreign: u64,
    /// Datagrams the kernel dropped on the receiving socket (`SO_MEMINFO`, else the last
    /// `SO_RXQ_OVFL` value seen); `None` if neither is available.
    pub kernel_drops: Option<u64>,
    /// Receive buffer the kernel granted.
    pub rcvbuf: u64,
    /// From the first to the last datagram of the test (arrival times are taken once per
    /// `recvmmsg` batch: 0 when everything came in one).
    pub seconds: f64,
    /// Unique datagrams per second over `seconds`.
    pub pps: f64,
    /// Unique payload megabits (10^6 bit) per second over `seconds`.
    pub mbps: f64,
}

/// The sender's own counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UdpSenderStats {
    pub test_id: u32,
    pub size: u32,
    /// Datagrams the socket accepted.
    pub sent: u64,
    /// Their bytes.
    pub bytes: u64,
    /// From the first send to the end of the last.
    pub seconds: f64,
    /// `sent / seconds`.
    pub pps: f64,
    /// Payload megabits per second: `bytes * 8 / seconds / 1e6`.
    pub mbps: f64,
    /// The offered rate in datagrams per second, if paced.
    pub target_pps: Option<f64>,
    /// Schedule slots given up because the sender fell more than [`BURST`] behind.
    pub skipped: u64,
    /// Sends refused with `ENOBUFS`/`EAGAIN` and retried.
    pub retries: u64,
}

/// Sender's view plus the receiver's report; what `pvnet perf udp-stream` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UdpOutcome {
    pub sender: UdpSenderStats,
    pub receiver: UdpReport,
}

/// Receiver time limits (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpLimits {
    /// Give up when neither a datagram nor a control byte arrived for this long before the stop.
    pub idle: Duration,
    /// Give up when the stop has not arrived this long after the planned duration (when the
    /// hello gave one), even if datagrams keep coming.
    pub stop_grace: Duration,
    /// After the stop, end the drain after this long without a datagram.
    pub drain_quiet: Duration,
    /// After the stop, end the drain after this long in any case.
    pub drain_max: Duration,
}

impl Default for UdpLimits {
    fn default() -> Self {
        UdpLimits {
            idle: Duration::from_secs(30),
            stop_grace: Duration::from_secs(10),
            drain_quiet: Duration::from_millis(200),
            drain_max: Duration::from_secs(2),
        }
    }
}

/// Why a receiver ended without a report to send. The timeouts carry what was counted so far
/// (with `sent` = 0, so `lost` = 0).
#[derive(Debug, thiserror::Error)]
pub enum UdpRecvError {
    #[error("not a UDP test: {0}")]
    NotUdp(String),
    #[error("no stop from the sender: nothing arrived for {0:?}")]
    Idle(Duration, Box<UdpReport>),
    #[error("no stop from the sender {0:?} after the planned duration")]
    Overdue(Duration, Box<UdpReport>),
    #[error("the sender closed the control connection without a stop")]
    ControlClosed(Box<UdpReport>),
    #[error("bad control message: {0}")]
    BadControl(String),
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Fewest datagrams per second a paced stream may ask for: a receiver gives up after
/// [`UdpLimits::idle`] (30 s) without one, so a datagram every 10 s at the slowest.
pub const MIN_PPS: f64 = 0.1;
/// Most datagrams per second a paced stream may ask for: a datagram a nanosecond, beyond what
/// any sender here reaches, and the pacer's schedule stays in whole nanoseconds.
pub const MAX_PPS: f64 = 1e9;

/// Checks the datagrams per second a paced stream asks for.
fn check_pps(pps: f64) -> anyhow::Result<f64> {
    if !(MIN_PPS..=MAX_PPS).contains(&pps) {
        bail!(
            "--rate asks for {pps:.3e} datagrams per second, outside {MIN_PPS} to {MAX_PPS:e} \
             (the receiver gives up after 30 s without a datagram)"
        );
    }
    Ok(pps)
}

fn check_size(size: usize) -> anyhow::Result<()> {
    if !(1..=MAX_DATAGRAM).contains(&size) {
        bail!("datagram size {size} out of range 1..={MAX_DATAGRAM}");
    }
    Ok(())
}

/// Pattern stream offset of the first payload byte (index [`HEADER_LEN`]) of datagram `seq`:
/// `seq * size + HEADER_LEN` modulo the pattern period.
pub fn payload_offset(seq: u64, size: usize) -> u64 {
    let p = pattern::PERIOD as u64;
    ((seq % p) * (size as u64 % p) + HEADER_LEN as u64) % p
}

/// Datagram `seq` of test `test_id`, `buf.len()` bytes long (see the module docs).
pub fn encode_datagram(test_id: u32, seq: u64, buf: &mut [u8]) {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(&seq.to_le_bytes());
    h[8..].copy_from_slice(&test_id.to_le_bytes());
    let n = buf.len().min(HEADER_LEN);
    buf[..n].copy_from_slice(&h[..n]);
    if buf.len() > HEADER_LEN {
        let off = payload_offset(seq, buf.len());
        pattern::fill(off, &mut buf[HEADER_LEN..]);
    }
}

/// Token bucket on absolute deadlines, in nanoseconds of a monotonic clock passed in.
///
/// Slot `k` of the schedule is due at `origin + k * interval`; a slot is granted once due, so
/// the long-run rate is exactly the schedule's whatever the wake-up jitter. A sender that fell
/// more than `depth` slots behind gives up the excess (the bucket overflowed) rather than
/// bursting to catch up.
#[derive(Debug, Clone)]
pub(crate) struct Pacer {
    origin: u64,
    interval: f64,
    depth: u64,
    /// Next slot to grant.
    slot: u64,
    /// Slots given up.
    skipped: u64,
}

impl Pacer {
    pub(crate) fn new(per_sec: f64, burst: Duration, start_ns: u64) -> Pacer {
        let depth = (per_sec * burst.as_secs_f64()).ceil().clamp(1.0, 4096.0) as u64;
        Pacer {
            origin: start_ns,
            interval: 1e9 / per_sec,
            depth,
            slot: 0,
            skipped: 0,
        }
    }

    /// When slot `k` is due.
    fn due(&self, k: u64) -> u64 {
        self.origin
            .saturating_add((k as f64 * self.interval) as u64)
    }

    /// Grants up to `max` slots due at `now`.
    pub(crate) fn grant(&mut self, now: u64, max: u64) -> u64 {
        if now < self.origin {
            return 0;
        }
        // Slots 0..=last are due by now.
        let due = ((now - self.origin) as f64 / self.interval).floor() as u64 + 1;
        let mut avail = due.saturating_sub(self.slot);
        if avail > self.depth {
            self.skipped += avail - self.depth;
            self.slot += avail - self.depth;
            avail = self.depth;
        }
        let n = avail.min(max);
        self.slot += n;
        n
    }

    /// Gives back `n` granted slots that were not used (a partial send).
    pub(crate) fn unuse(&mut self, n: u64) {
        self.slot -= n.min(self.slot);
    }

    /// When the next slot is due.
    pub(crate) fn next_due(&self) -> u64 {
        self.due(self.slot)
    }
}

/// How one datagram was classified by [`Tally::datagram`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Unique { reordered: bool },
    Duplicate,
    Corrupt { wrong_size: bool },
    Stale,
    Foreign,
}

/// The receiver's counting, independent of sockets (time passed in).
pub(crate) struct Tally {
    test_id: u32,
    size: usize,
    r: UdpReport,
    /// Highest unique sequence number + 1 (0 before the first).
    next: u64,
    /// Ring bitmap over sequence numbers `next - WINDOW .. next`; allocated on first use.
    seen: Vec<u64>,
    first: Option<Instant>,
    last: Option<Instant>,
    /// Last `SO_RXQ_OVFL` value seen.
    ovfl: Option<u32>,
}

impl Tally {
    pub(crate) fn new(test_id: u32, size: usize) -> Tally {
        Tally {
            test_id,
            size,
            r: UdpReport {
                test_id,
                size: size as u32,
                sent: 0,
                received: 0,
                bytes: 0,
                unique: 0,
                lost: 0,
                reordered: 0,
                duplicated: 0,
                corrupt: 0,
                wrong_size: 0,
                beyond: 0,
                stale: 0,
                foreign: 0,
                kernel_drops: None,
                rcvbuf: 0,
                seconds: 0.0,
                pps: 0.0,
                mbps: 0.0,
            },
            next: 0,
            seen: Vec::new(),
            first: None,
            last: None,
            ovfl: None,
        }
    }

    fn bit(seq: u64) -> (usize, u64) {
        let i = seq % WINDOW;
        ((i / 64) as usize, 1u64 << (i % 64))
    }

    /// Counts a datagram from the sender's address; `truncated` if the kernel cut it
    /// (`MSG_TRUNC`: it was longer than the expected size).
    pub(crate) fn datagram(&mut self, data: &[u8], truncated: bool, now: Instant) -> Verdict {
        let v = self.classify(data, truncated);
        if v == Verdict::Foreign {
            self.r.foreign += 1;
            return v;
        }
        self.r.received += 1;
        self.r.bytes += data.len() as u64;
        self.first.get_or_insert(now);
        self.last = Some(now);
        match v {
            Verdict::Unique { reordered } => {
                self.r.unique += 1;
                self.r.reordered += reordered as u64;
            }
            Verdict::Duplicate => self.r.duplicated += 1,
            Verdict::Corrupt { wrong_size } => {
                self.r.corrupt += 1;
                self.r.wrong_size += wrong_size as u64;
            }
            Verdict::Stale => self.r.stale += 1,
            Verdict::Foreign => {} // counted above
        }
        v
    }

    /// Counts a datagram from another address.
    pub(crate) fn foreign(&mut self) {
        self.r.foreign += 1;
    }

    fn classify(&mut self, data: &[u8], truncated: bool) -> Verdict {
        let len = data.len();
        if len > 8 {
            let n = len.min(HEADER_LEN) - 8;
            if data[8..8 + n] != self.test_id.to_le_bytes()[..n] {
                return Verdict::Foreign;
            }
        }
        if truncated || len != self.size {
            return Verdict::Corrupt { wrong_size: true };
        }
        let seq = if len >= 8 {
            let mut b = [0u8; 8];
            b.copy_from_slice(&data[..8]);
            u64::from_le_bytes(b)
        } else {
            let mut b = [0u8; 8];
            b[..len].copy_from_slice(data);
            extend_seq(u64::from_le_bytes(b), 8 * len as u32, self.next)
        };
        if len > HEADER_LEN {
            let want = pattern::slice_at(payload_offset(seq, len), len - HEADER_LEN);
            if data[HEADER_LEN..] != *want {
                return Verdict::Corrupt { wrong_size: false };
            }
        }
        self.record(seq)
    }

    fn record(&mut self, seq: u64) -> Verdict {
        if self.seen.is_empty() {
            self.seen = vec![0u64; (WINDOW / 64) as usize];
        }
        if seq >= self.next {
            // Slots of next..=seq still hold bits of numbers WINDOW older: clear them.
            if seq - self.next >= WINDOW {
                self.seen.fill(0);
            } else {
                for s in self.next..=seq {
                    let (w, m) = Self::bit(s);
                    self.seen[w] &= !m;
                }
            }
            let (w, m) = Self::bit(seq);
            self.seen[w] |= m;
            // Saturates at u64::MAX: a hostile datagram numbered u64::MAX is counted unique
            // each time it comes; no sender gets there.
            self.next = seq.saturating_add(1);
            return Verdict::Unique { reordered: false };
        }
        if self.next - seq > WINDOW {
            return Verdict::Stale;
        }
        let (w, m) = Self::bit(seq);
        if self.seen[w] & m != 0 {
            Verdict::Duplicate
        } else {
            self.seen[w] |= m;
            Verdict::Unique { reordered: true }
        }
    }

    /// True once every number below `sent` arrived (and nothing beyond it).
    fn complete(&self, sent: u64) -> bool {
        self.next <= sent && self.r.unique + self.r.stale >= sent
    }

    /// The report as of now, with the sender's count `sent`.
    pub(crate) fn report(&self, sent: u64, kernel_drops: Option<u64>, rcvbuf: u64) -> UdpReport {
        let mut r = self.r.clone();
        r.sent = sent;
        r.beyond = 0;
        if self.next > sent && !self.seen.is_empty() {
            let lo = sent.max(self.next.saturating_sub(WINDOW));
            r.beyond = (lo..self.next)
                .filter(|&s| {
                    let (w, m) = Self::bit(s);
                    self.seen[w] & m != 0
                })
                .count() as u64;
        }
        r.lost = sent.saturating_sub(r.unique - r.beyond + r.stale);
        r.kernel_drops = kernel_drops.or(self.ovfl.map(u64::from));
        r.rcvbuf = rcvbuf;
        r.seconds = match (self.first, self.last) {
            (Some(a), Some(b)) => b.duration_since(a).as_secs_f64(),
            _ => 0.0,
        };
        if r.seconds > 0.0 {
            r.pps = r.unique as f64 / r.seconds;
            r.mbps = (r.unique * self.size as u64) as f64 * 8.0 / r.seconds / 1e6;
        }
        r
    }
}

/// The full sequence number whose low `bits` bits are `low`, nearest to `expected`.
fn extend_seq(low: u64, bits: u32, expected: u64) -> u64 {
    let m = 1i128 << bits;
    let e = expected as i128;
    let mut d = (low as i128 - e).rem_euclid(m);
    // Ties go forward: up to m/2 lost in a row, or m/2 - 1 late, are told apart.
    if d > m / 2 {
        d -= m;
    }
    let mut r = e + d;
    if r < 0 {
        r += m;
    }
    r.min(u64::MAX as i128) as u64
}

/// Reads one `\n`-terminated line of at most `max` bytes, byte by byte so nothing after it is
/// consumed. EOF before the newline is an error.
fn read_line(sock: &mut TcpStream, max: usize) -> io::Result<String> {
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    loop {
        match sock.read(&mut b) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "peer closed the control connection",
                ))
            }
            Ok(_) if b[0] == b'\n' => break,
            Ok(_) => {
                if line.len() >= max {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "control line too long",
                    ));
                }
                line.push(b[0]);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    String::from_utf8(line).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

fn write_json_line(sock: &mut TcpStream, v: &impl Serialize) -> io::Result<()> {
    let mut line = serde_json::to_vec(v).map_err(io::Error::other)?;
    line.push(b'\n');
    sock.write_all(&line)
}

/// The sender's end of one UDP test: the control connection and a UDP socket connected to the
/// receiver's test port. [`udp_send`] drives one; a test can send its own datagrams instead.
pub struct UdpSession {
    ctl: TcpStream,
    sock: UdpSocket,
    ready: UdpReady,
    size: usize,
    test_id: u32,
}

impl UdpSession {
    /// Connects the control connection, sends the hello and waits for the receiver's port.
    pub fn connect(
        addr: SocketAddr,
        size: usize,
        test_id: u32,
        planned: Option<Duration>,
        max_datagrams: Option<u64>,
    ) -> anyhow::Result<UdpSession> {
        check_size(size)?;
        let mut ctl = crate::connect(addr).with_context(|| format!("connect {addr}"))?;
        ctl.set_nodelay(true)?;
        ctl.set_read_timeout(Some(READY_TIMEOUT))?;
        ctl.set_write_timeout(Some(READY_TIMEOUT))?;
        let hello = Hello::Udp {
            size: size as u32,
            test_id,
            duration_ms: planned.map_or(0, |d| proto::duration_ms(d).max(1)),
            max_datagrams: max_datagrams.unwrap_or(0),
        };
        ctl.write_all(&hello.encode()).context("send hello")?;
        let line = read_line(&mut ctl, MAX_LINE)
            .context("waiting for the receiver's ready line (does the server know UDP tests?)")?;
        let ready: UdpReady =
            serde_json::from_str(&line).with_context(|| format!("ready line {line:?}"))?;
        let target = SocketAddr::new(ctl.peer_addr()?.ip(), ready.port);
        let sock = UdpSocket::bind(SocketAddr::new(ctl.local_addr()?.ip(), 0))
            .context("bind the UDP socket")?;
        sock.connect(target)
            .with_context(|| format!("connect UDP to {target}"))?;
        Ok(UdpSession {
            ctl,
            sock,
            ready,
            size,
            test_id,
        })
    }

    /// The UDP socket, connected to the receiver's test port.
    pub fn socket(&self) -> &UdpSocket {
        &self.sock
    }

    /// What the receiver announced.
    pub fn ready(&self) -> UdpReady {
        self.ready
    }

    pub fn size(&self) -> usize {
        self.size
    }

    pub fn test_id(&self) -> u32 {
        self.test_id
    }

    /// Sends the stop (`sent` datagrams, numbered `0..sent`) and waits up to [`REPORT_TIMEOUT`]
    /// for the receiver's report.
    pub fn finish(self, sent: u64) -> anyhow::Result<UdpReport> {
        self.finish_within(sent, REPORT_TIMEOUT)
    }

    /// [`UdpSession::finish`] waiting at most `timeout` for the report.
    pub fn finish_within(mut self, sent: u64, timeout: Duration) -> anyhow::Result<UdpReport> {
        write_json_line(&mut self.ctl, &UdpStop { sent }).context("send stop")?;
        self.ctl.set_read_timeout(Some(timeout))?;
        let line = read_line(&mut self.ctl, 2 * MAX_LINE).context("waiting for the report")?;
        let report: UdpReport =
            serde_json::from_str(&line).with_context(|| format!("report line {line:?}"))?;
        let _ = self.ctl.shutdown(Shutdown::Both);
        Ok(report)
    }
}

/// Test id from the clock and the process id (only needs to differ between nearby tests).
fn pick_test_id() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let x = t ^ (u64::from(std::process::id()) << 32);
    (x ^ (x >> 32)) as u32
}

/// Run a UDP stream against a [`crate::serve`] server: the sender's counts and the receiver's
/// report. Loss, reordering and corruption are reported, not errors; errors are a bad option,
/// a broken control connection, a refused test port, or a missing report.
pub fn udp_send(addr: SocketAddr, opts: &UdpOpts) -> anyhow::Result<UdpOutcome> {
    check_size(opts.size)?;
    if opts.duration.is_none() && opts.datagrams.is_none() {
        bail!("a UDP stream needs a duration or a datagram count");
    }
    if opts.duration == Some(Duration::ZERO) || opts.datagrams == Some(0) {
        bail!("the duration and the datagram count must be positive");
    }
    let target_pps = match opts.rate {
        Some(r) => Some(check_pps(r.datagrams_per_sec(opts.size))?),
        None => None,
    };
    let test_id = opts.test_id.unwrap_or_else(pick_test_id);
    let session = UdpSession::connect(addr, opts.size, test_id, opts.duration, opts.datagrams)?;
    let sender = send_datagrams(&session, opts, target_pps)?;
    let receiver = session.finish(sender.sent)?;
    Ok(UdpOutcome { sender, receiver })
}

/// Monotonic clock in nanoseconds (`CLOCK_MONOTONIC`, the clock `clock_nanosleep` sleeps on).
fn mono_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC is always available on Linux");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// Sleeps until `ns` on the monotonic clock (absolute, so late wake-ups do not accumulate).
fn sleep_until(ns: u64) {
    use nix::time::{clock_nanosleep, ClockId, ClockNanosleepFlags};
    let ts = nix::sys::time::TimeSpec::new(
        (ns / 1_000_000_000) as libc::time_t,
        (ns % 1_000_000_000) as libc::c_long,
    );
    // EINTR just returns early: the caller's loop re-checks the clock.
    let _ = clock_nanosleep(
        ClockId::CLOCK_MONOTONIC,
        ClockNanosleepFlags::TIMER_ABSTIME,
        &ts,
    );
}

/// Restores the thread's timer slack when dropped.
struct TimerSlack(Option<libc::c_ulong>);

impl TimerSlack {
    /// Sets this thread's timer slack (default 50 µs) to 1 µs, so paced sleeps end on time.
    fn tighten() -> TimerSlack {
        let old = nix::sys::prctl::get_timerslack().ok();
        if old.is_some() && nix::sys::prctl::set_timerslack(1_000).is_ok() {
            TimerSlack(old.map(|v| v as libc::c_ulong))
        } else {
            TimerSlack(None)
        }
    }
}

impl Drop for TimerSlack {
    fn drop(&mut self) {
        if let Some(v) = self.0 {
            let _ = nix::sys::prctl::set_timerslack(v);
        }
    }
}

fn send_datagrams(
    session: &UdpSession,
    opts: &UdpOpts,
    target_pps: Option<f64>,
) -> anyhow::Result<UdpSenderStats> {
    let size = opts.size;
    let fd = session.sock.as_raw_fd();
    let limit = opts.datagrams.unwrap_or(u64::MAX);
    let mut tx = TxBatch::new(size);
    let _slack = target_pps.map(|_| TimerSlack::tighten());
    let start = mono_ns();
    let end = opts
        .duration
        .map_or(u64::MAX, |d| start.saturating_add(d.as_nanos() as u64));
    let burst = opts.burst.unwrap_or(BURST);
    let mut pacer = target_pps.map(|pps| Pacer::new(pps, burst, start));
    let mut sent = 0u64;
    let mut retries = 0u64;
    let mut now = start;
    while sent < limit && now < end {
        let want = (limit - sent).min(BATCH as u64);
        let n = match pacer.as_mut() {
            Some(p) => {
                let n = p.grant(now, want);
                if n == 0 {
                    let due = p.next_due();
                    if due >= end {
                        break;
                    }
                    sleep_until(due);
                    now = mono_ns();
                    continue;
                }
                n
            }
            None => want,
        };
        match tx.send(fd, session.test_id, sent, n as usize) {
            Ok(k) => {
                sent += k as u64;
                if let Some(p) = pacer.as_mut() {
                    p.unuse(n - k as u64);
                }
            }
            Err(e) => {
                if let Some(p) = pacer.as_mut() {
                    p.unuse(n);
                }
                match e.raw_os_error() {
                    Some(libc::EINTR) => {}
                    Some(libc::ENOBUFS | libc::EAGAIN) => {
                        retries += 1;
                        std::thread::sleep(Duration::from_micros(50));
                    }
                    Some(libc::ECONNREFUSED) => {
                        bail!("the receiver's UDP port refused datagrams (ICMP port unreachable) after {sent}")
                    }
                    _ => return Err(e).context(format!("sendmmsg after {sent} datagrams")),
                }
            }
        }
        now = mono_ns();
    }
    let seconds = (now.max(start) - start) as f64 / 1e9;
    let bytes = sent * size as u64;
    let (pps, mbps) = if seconds > 0.0 {
        (sent as f64 / seconds, bytes as f64 * 8.0 / seconds / 1e6)
    } else {
        (0.0, 0.0)
    };
    Ok(UdpSenderStats {
        test_id: session.test_id,
        size: size as u32,
        sent,
        bytes,
        seconds,
        pps,
        mbps,
        target_pps,
        skipped: pacer.map_or(0, |p| p.skipped),
        retries,
    })
}

/// Serves one UDP test on an accepted control connection: reads the hello itself (which must
/// be a UDP hello), then as [`crate::serve`] does. Returns the report that was sent.
pub fn serve_udp_test(ctl: &mut TcpStream, limits: &UdpLimits) -> Result<UdpReport, UdpRecvError> {
    ctl.set_read_timeout(Some(limits.idle))?;
    let mut h = [0u8; proto::HELLO_LEN];
    ctl.read_exact(&mut h)?;
    match Hello::decode(&h) {
        Ok(Hello::Udp {
            size,
            test_id,
            duration_ms,
            ..
        }) => receive(ctl, size as usize, test_id, duration_ms, limits),
        Ok(other) => Err(UdpRecvError::NotUdp(format!("{other:?}"))),
        Err(e) => Err(UdpRecvError::NotUdp(e.to_string())),
    }
}

/// Binds the test's UDP socket on `ip`: non-blocking, a large receive buffer, `SO_RXQ_OVFL`.
fn bind_test_socket(ip: IpAddr) -> io::Result<(socket2::Socket, u64)> {
    use socket2::{Domain, Protocol, Socket, Type};
    let addr = SocketAddr::new(ip, 0);
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    s.set_cloexec(true)?;
    s.set_nonblocking(true)?;
    if setsockopt(&s, sockopt::RcvBufForce, &RCVBUF_WANT).is_err() {
        // Not root: the kernel caps this at net.core.rmem_max.
        s.set_recv_buffer_size(RCVBUF_WANT)?;
    }
    // Without it kernel_drops falls back to SO_MEMINFO only.
    let _ = setsockopt(&s, sockopt::RxqOvfl, &1);
    s.bind(&addr.into())?;
    let rcvbuf = s.recv_buffer_size()? as u64;
    Ok((s, rcvbuf))
}

/// The socket's drop counter (`SO_MEMINFO`, `SK_MEMINFO_DROPS`; Linux 4.6+).
fn meminfo_drops(fd: RawFd) -> Option<u64> {
    let mut v = [0u32; 16]; // SK_MEMINFO_VARS is 9 today; the kernel writes at most len
    let mut len = std::mem::size_of_val(&v) as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `v`, a live local array of exactly
    // that size, and updates `len`; `fd` is an open socket owned by the caller.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            v.as_mut_ptr().cast(),
            &mut len,
        )
    };
    let i = libc::SK_MEMINFO_DROPS as usize;
    (r == 0 && len as usize >= (i + 1) * 4).then(|| u64::from(v[i]))
}

/// Receiver side after the hello (see the module docs for the exchange).
pub(crate) fn receive(
    ctl: &mut TcpStream,
    size: usize,
    test_id: u32,
    duration_ms: u32,
    limits: &UdpLimits,
) -> Result<UdpReport, UdpRecvError> {
    let local = ctl.local_addr()?.ip();
    let peer = ctl.peer_addr()?.ip().to_canonical();
    let (sock, rcvbuf) = bind_test_socket(local)?;
    let port = sock
        .local_addr()?
        .as_socket()
        .map(|a| a.port())
        .ok_or_else(|| io::Error::other("UDP socket has no IP address"))?;
    ctl.set_write_timeout(Some(limits.idle))?;
    write_json_line(ctl, &UdpReady { port, rcvbuf })?;

    let fd = sock.as_raw_fd();
    let mut tally = Tally::new(test_id, size);
    let mut rx = RxBatch::new(size);
    let start = Instant::now();
    let overdue_at = (duration_ms > 0)
        .then(|| start + Duration::from_millis(duration_ms.into()) + limits.stop_grace);
    let partial = |t: &Tally| Box::new(t.report(0, meminfo_drops(fd), rcvbuf));
    let mut last_activity = start;
    let mut ctl_line: Vec<u8> = Vec::new();
    let mut batches = 0u32;

    let stop: UdpStop = loop {
        let n = rx.recv(fd)?;
        if n > 0 {
            rx.count(n, peer, &mut tally);
            last_activity = Instant::now();
            batches += 1;
            // A busy socket is rarely empty: look at the control connection now and then.
            if batches < 64 {
                continue;
            }
        }
        batches = 0;
        let now = Instant::now();
        let mut wait = limits.idle.saturating_sub(now - last_activity);
        if wait.is_zero() {
            return Err(UdpRecvError::Idle(limits.idle, partial(&tally)));
        }
        if let Some(t) = overdue_at {
            if now >= t {
                return Err(UdpRecvError::Overdue(limits.stop_grace, partial(&tally)));
            }
            wait = wait.min(t - now);
        }
        if n > 0 {
            wait = Duration::ZERO;
        }
        let mut fds = [
            PollFd::new(sock.as_fd(), PollFlags::POLLIN),
            PollFd::new(ctl.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, poll_timeout(wait)) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(io::Error::from(e).into()),
        }
        let ctl_ready = fds[1].revents().is_some_and(|r| {
            !(r & (PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR)).is_empty()
        });
        if !ctl_ready {
            continue;
        }
        let mut buf = [0u8; 512];
        let k = match ctl.read(&mut buf) {
            Ok(0) => return Err(UdpRecvError::ControlClosed(partial(&tally))),
            Ok(k) => k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        last_activity = Instant::now();
        ctl_line.extend_from_slice(&buf[..k]);
        if let Some(i) = ctl_line.iter().position(|&b| b == b'\n') {
            let text = String::from_utf8_lossy(&ctl_line[..i]).into_owned();
            break serde_json::from_str(&text)
                .map_err(|e| UdpRecvError::BadControl(format!("{text:?}: {e}")))?;
        }
        if ctl_line.len() > MAX_LINE {
            return Err(UdpRecvError::BadControl("stop line too long".into()));
        }
    };

    // Drain what is still in flight: what is queued already always counts (datagrams beyond
    // the sender's count, say), and once the socket is empty the drain ends when every sent
    // datagram is in, nothing came for a while, or its time is up.
    let drain_end = Instant::now() + limits.drain_max;
    loop {
        let n = rx.recv(fd)?;
        let now = Instant::now();
        if n > 0 {
            rx.count(n, peer, &mut tally);
            if now < drain_end {
                continue;
            }
        }
        if now >= drain_end || tally.complete(stop.sent) {
            break;
        }
        let mut fds = [PollFd::new(sock.as_fd(), PollFlags::POLLIN)];
        match poll(
            &mut fds,
            poll_timeout(limits.drain_quiet.min(drain_end - now)),
        ) {
            Ok(0) => break,
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(io::Error::from(e).into()),
        }
    }
    let report = tally.report(stop.sent, meminfo_drops(fd), rcvbuf);
    write_json_line(ctl, &report)?;
    let _ = ctl.shutdown(Shutdown::Both);
    Ok(report)
}

fn poll_timeout(d: Duration) -> PollTimeout {
    // Round up so a short wait is not a busy zero-timeout poll.
    let ms = d.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32;
    PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
}

/// Source address of a received datagram.
fn source_ip(ss: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<IpAddr> {
    let len = len as usize;
    match libc::c_int::from(ss.ss_family) {
        libc::AF_INET if len >= std::mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: sockaddr_storage is sized and aligned for every socket address type and
            // the kernel wrote a sockaddr_in (family AF_INET, length checked).
            let sin =
                unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                sin.sin_addr.s_addr,
            ))))
        }
        libc::AF_INET6 if len >= std::mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for sockaddr_in6 (family AF_INET6, length checked).
            let sin6 =
                unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)).to_canonical())
        }
        _ => None,
    }
}

/// Control buffer per received datagram: room for one `SO_RXQ_OVFL` message (a u32), 8-aligned.
type CmsgBuf = [u64; 8];

/// Buffers for one `recvmmsg` call. The headers point into the vectors, which are never resized.
struct RxBatch {
    size: usize,
    bufs: Vec<u8>,
    _iovs: Vec<libc::iovec>,
    names: Vec<libc::sockaddr_storage>,
    _ctrl: Vec<CmsgBuf>,
    msgs: Vec<libc::mmsghdr>,
}

impl RxBatch {
    fn new(size: usize) -> RxBatch {
        // Fewer slots for large datagrams (at most 2 MiB of buffers).
        let n = ((2 << 20) / size).clamp(4, BATCH);
        let mut bufs = vec![0u8; n * size];
        let mut iovs: Vec<libc::iovec> = bufs
            .chunks_exact_mut(size)
            .map(|c| libc::iovec {
                iov_base: c.as_mut_ptr().cast(),
                iov_len: size,
            })
            .collect();
        // SAFETY: sockaddr_storage is plain old data; all zeroes is a valid (AF_UNSPEC) value.
        let mut names: Vec<libc::sockaddr_storage> = vec![unsafe { std::mem::zeroed() }; n];
        let mut ctrl: Vec<CmsgBuf> = vec![[0u64; 8]; n];
        let msgs = (0..n)
            .map(|i| {
                // SAFETY: mmsghdr is plain old data (pointers and integers); zero is valid.
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_iov = &mut iovs[i];
                m.msg_hdr.msg_iovlen = 1;
                m.msg_hdr.msg_name = (&mut names[i] as *mut libc::sockaddr_storage).cast();
                m.msg_hdr.msg_control = ctrl[i].as_mut_ptr().cast();
                m
            })
            .collect();
        RxBatch {
            size,
            bufs,
            _iovs: iovs,
            names,
            _ctrl: ctrl,
            msgs,
        }
    }

    /// Receives up to one batch without blocking; 0 if the socket is empty.
    fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        for m in &mut self.msgs {
            m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as _;
            m.msg_hdr.msg_controllen = std::mem::size_of::<CmsgBuf>() as _;
            m.msg_hdr.msg_flags = 0;
            m.msg_len = 0;
        }
        loop {
            // SAFETY: every header points at buffers owned by `self` (data slots of `size`
            // bytes, a sockaddr_storage, a control buffer) whose lengths are set above; they
            // live and stay in place for the call; `fd` is the caller's open socket.
            let r = unsafe {
                libc::recvmmsg(
                    fd,
                    self.msgs.as_mut_ptr(),
                    self.msgs.len() as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if r >= 0 {
                return Ok(r as usize);
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => return Ok(0),
                _ => return Err(e),
            }
        }
    }

    /// Counts the first `n` received datagrams into `tally`; only those from `peer` are the
    /// test's.
    fn count(&mut self, n: usize, peer: IpAddr, tally: &mut Tally) {
        let now = Instant::now();
        for i in 0..n {
            let m = &self.msgs[i];
            if let Some(v) = rxq_ovfl(&m.msg_hdr) {
                tally.ovfl = Some(v);
            }
            if source_ip(&self.names[i], m.msg_hdr.msg_namelen) != Some(peer) {
                tally.foreign();
                continue;
            }
            let len = (m.msg_len as usize).min(self.size);
            let truncated = m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
            let data = &self.bufs[i * self.size..i * self.size + len];
            tally.datagram(data, truncated, now);
        }
    }
}

/// The `SO_RXQ_OVFL` drop counter in a received message's control data, if present.
fn rxq_ovfl(h: &libc::msghdr) -> Option<u32> {
    // SAFETY: `h` is a header the kernel filled by recvmmsg: msg_control points at a live
    // control buffer and msg_controllen is the length the kernel wrote, which the CMSG_*
    // helpers stay within. The data of an SO_RXQ_OVFL message is one u32 (read unaligned).
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET
                && (*c).cmsg_type == libc::SO_RXQ_OVFL
                && (*c).cmsg_len as usize >= libc::CMSG_LEN(4) as usize
            {
                return Some(std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<u32>()));
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    None
}

/// Headers and iovecs for one `sendmmsg` call: each datagram is its header (from its slot)
/// plus a slice of the pattern table, so nothing but the header is copied.
struct TxBatch {
    size: usize,
    hdrs: Vec<[u8; HEADER_LEN]>,
    iovs: Vec<[libc::iovec; 2]>,
    msgs: Vec<libc::mmsghdr>,
}

impl TxBatch {
    fn new(size: usize) -> TxBatch {
        let empty = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        TxBatch {
            size,
            hdrs: vec![[0u8; HEADER_LEN]; BATCH],
            iovs: vec![[empty, empty]; BATCH],
            // SAFETY: mmsghdr is plain old data (pointers and integers); zero is valid.
            msgs: vec![unsafe { std::mem::zeroed() }; BATCH],
        }
    }

    /// Sends datagrams `first .. first + n` (n ≤ BATCH); returns how many the socket took.
    fn send(&mut self, fd: RawFd, test_id: u32, first: u64, n: usize) -> io::Result<usize> {
        let size = self.size;
        let head = size.min(HEADER_LEN);
        for j in 0..n {
            let seq = first + j as u64;
            self.hdrs[j][..8].copy_from_slice(&seq.to_le_bytes());
            self.hdrs[j][8..].copy_from_slice(&test_id.to_le_bytes());
            self.iovs[j][0] = libc::iovec {
                iov_base: self.hdrs[j].as_mut_ptr().cast(),
                iov_len: head,
            };
            let mut iovlen = 1;
            if size > HEADER_LEN {
                let p = pattern::slice_at(payload_offset(seq, size), size - HEADER_LEN);
                // The kernel only reads from send iovecs; the pattern table is never written.
                self.iovs[j][1] = libc::iovec {
                    iov_base: p.as_ptr() as *mut libc::c_void,
                    iov_len: p.len(),
                };
                iovlen = 2;
            }
            let h = &mut self.msgs[j].msg_hdr;
            h.msg_iov = self.iovs[j].as_mut_ptr();
            h.msg_iovlen = iovlen;
            h.msg_name = std::ptr::null_mut();
            h.msg_namelen = 0;
        }
        loop {
            // SAFETY: the first `n` headers point at iovecs in `self` that point at headers in
            // `self` and at the static pattern table, all live for the call; no address (the
            // socket is connected); `fd` is the caller's open socket.
            let r = unsafe { libc::sendmmsg(fd, self.msgs.as_mut_ptr(), n as libc::c_uint, 0) };
            if r >= 0 {
                return Ok(r as usize);
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dgram(test_id: u32, seq: u64, size: usize) -> Vec<u8> {
        let mut b = vec![0u8; size];
        encode_datagram(test_id, seq, &mut b);
        b
    }

    #[test]
    fn rate_parsing() {
        let ok = [
            ("100M", Rate::BitsPerSec(1e8)),
            ("2.5Gbps", Rate::BitsPerSec(2.5e9)),
            ("1e6", Rate::BitsPerSec(1e6)),
            ("800kbit/s", Rate::BitsPerSec(8e5)),
            ("50kpps", Rate::DatagramsPerSec(5e4)),
            ("1000dps", Rate::DatagramsPerSec(1000.0)),
        ];
        for (s, want) in ok {
            assert_eq!(s.parse::<Rate>(), Ok(want), "{s}");
        }
        for s in ["", "0", "-5M", "10x", "5mpps", "M", "1e", "inf", "NaN"] {
            assert!(s.parse::<Rate>().is_err(), "{s} accepted");
        }
        assert_eq!(Rate::BitsPerSec(8000.0).datagrams_per_sec(100), 10.0);
    }

    #[test]
    fn a_rate_the_pacer_or_the_receiver_cannot_keep_is_refused() {
        for (r, size) in [
            ("1e40", 1472),           // a datagram every 1e-32 ns: the schedule overflowed
            ("0.000000001pps", 1472), // one every 31 years: the receiver gives up after 30 s
            ("1", 1472),              // 1 bit/s: one every 3.3 hours
            ("2Gpps", 64),
        ] {
            let rate: Rate = r.parse().unwrap();
            let e = check_pps(rate.datagrams_per_sec(size))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("--rate") && e.contains("datagrams per second"),
                "{e}"
            );
        }
        for (r, size) in [("100M", 1472), ("1kpps", 64), ("0.1pps", 64), ("1Gpps", 64)] {
            let rate: Rate = r.parse().unwrap();
            assert!(check_pps(rate.datagrams_per_sec(size)).is_ok(), "{r}");
        }
    }

    #[test]
    fn pacer_follows_absolute_schedule() {
        // 1000/s: slot k due at k ms; depth 2 (2 ms).
        let ms = 1_000_000u64;
        let mut p = Pacer::new(1000.0, Duration::from_millis(2), 0);
        assert_eq!(p.depth, 2);
        assert_eq!(p.grant(0, 64), 1); // slot 0 at t=0
        assert_eq!(p.grant(0, 64), 0);
        assert_eq!(p.next_due(), ms);
        // Late wake-up by 0.9 ms: one slot, and the next is still due at 2 ms (no drift).
        assert_eq!(p.grant(ms + 900_000, 64), 1);
        assert_eq!(p.next_due(), 2 * ms);
        // 1.5 slots late: both owed slots at once (within the depth).
        assert_eq!(p.grant(3 * ms + 500_000, 64), 2);
        // A partial send gives a slot back.
        assert_eq!(p.grant(4 * ms, 64), 1);
        p.unuse(1);
        assert_eq!(p.next_due(), 4 * ms);
        // A 10 ms stall: slots 4..=14 are due, only `depth` are granted, the rest skipped.
        assert_eq!(p.grant(14 * ms, 64), 2);
        assert_eq!(p.skipped, 9);
        assert_eq!(p.next_due(), 15 * ms);
        // `max` caps a grant without skipping.
        let mut q = Pacer::new(1e6, Duration::from_millis(2), 0); // depth 2000
        assert_eq!(q.grant(100_000, 64), 64); // 101 due
        assert_eq!(q.grant(100_000, 64), 37);
        assert_eq!(q.skipped, 0);
        // Over a long run the grants follow the rate exactly.
        let mut r = Pacer::new(12_345.0, BURST, 7);
        let mut got = 0;
        let mut t = 7;
        while t < 7 + 1_000_000_000 {
            got += r.grant(t, 64);
            t += 37_000; // wake every 37 µs
        }
        assert!((12_344..=12_346).contains(&got), "{got}");
    }

    #[test]
    fn extend_seq_picks_the_nearest() {
        assert_eq!(extend_seq(5, 8, 0), 5);
        assert_eq!(extend_seq(0xff, 8, 0), 255); // nearest would be -1: not a sequence number
        assert_eq!(extend_seq(0x00, 8, 0x1ff), 0x200);
        assert_eq!(extend_seq(0xfe, 8, 0x201), 0x1fe); // a little late
        assert_eq!(extend_seq(0x80, 8, 0x100), 0x180); // 128 lost in a row
        assert_eq!(extend_seq(0x81, 8, 0x100), 0x81); // 127 late
        assert_eq!(extend_seq(0x1234, 16, 0x5_1230), 0x5_1234);
        assert_eq!(extend_seq(0, 56, u64::MAX), u64::MAX);
    }

    #[test]
    fn encode_matches_pattern_stream_with_headers() {
        let size = 100;
        let d = dgram(0xabcd_ef01, 3, size);
        assert_eq!(&d[..8], &3u64.to_le_bytes());
        assert_eq!(&d[8..12], &0xabcd_ef01u32.to_le_bytes());
        for (i, &b) in d.iter().enumerate().skip(HEADER_LEN) {
            assert_eq!(b, pattern::byte_at(3 * size as u64 + i as u64));
        }
        assert_eq!(dgram(1, 0x0102, 2), vec![0x02, 0x01]);
    }

    #[test]
    fn tally_classifies_exactly() {
        let now = Instant::now();
        let id = 77;
        let size = 200;
        let mut t = Tally::new(id, size);
        let v = |t: &mut Tally, d: &[u8]| t.datagram(d, false, now);
        assert_eq!(
            v(&mut t, &dgram(id, 0, size)),
            Verdict::Unique { reordered: false }
        );
        assert_eq!(
            v(&mut t, &dgram(id, 2, size)),
            Verdict::Unique { reordered: false }
        );
        assert_eq!(
            v(&mut t, &dgram(id, 1, size)),
            Verdict::Unique { reordered: true }
        );
        assert_eq!(v(&mut t, &dgram(id, 1, size)), Verdict::Duplicate);
        assert_eq!(v(&mut t, &dgram(id + 1, 3, size)), Verdict::Foreign);
        let mut bad = dgram(id, 4, size);
        bad[150] ^= 1;
        assert_eq!(v(&mut t, &bad), Verdict::Corrupt { wrong_size: false });
        // A damaged sequence number no longer matches its payload.
        let mut bad = dgram(id, 5, size);
        bad[0] ^= 0x40;
        assert_eq!(v(&mut t, &bad), Verdict::Corrupt { wrong_size: false });
        assert_eq!(
            v(&mut t, &dgram(id, 6, size - 1)[..]),
            Verdict::Corrupt { wrong_size: true }
        );
        assert_eq!(
            t.datagram(&dgram(id, 7, size), true, now),
            Verdict::Corrupt { wrong_size: true }
        );
        // Far ahead, then a stale one from before the window.
        assert_eq!(
            v(&mut t, &dgram(id, WINDOW + 10, size)),
            Verdict::Unique { reordered: false }
        );
        assert_eq!(v(&mut t, &dgram(id, 9, size)), Verdict::Stale);
        assert_eq!(
            v(&mut t, &dgram(id, 11, size)),
            Verdict::Unique { reordered: true }
        );
        let r = t.report(20, None, 0);
        assert_eq!(r.received, 11);
        assert_eq!(r.foreign, 1);
        assert_eq!(r.unique, 5);
        assert_eq!(r.reordered, 2);
        assert_eq!(r.duplicated, 1);
        assert_eq!((r.corrupt, r.wrong_size), (4, 2));
        assert_eq!(r.stale, 1);
        assert_eq!(r.beyond, 1); // WINDOW + 10 >= 20
                                 // Below 20: 0, 1, 2, 11 unique, 9 stale => 15 lost.
        assert_eq!(r.lost, 15);
        assert_eq!(r.received, r.unique + r.duplicated + r.corrupt + r.stale);
    }

    #[test]
    fn kernel_drops_are_read_exactly() {
        // A receive buffer at the kernel's minimum, 50 datagrams: most are dropped.
        use socket2::{Domain, Protocol, Socket, Type};
        let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
        s.set_recv_buffer_size(0).unwrap();
        s.set_nonblocking(true).unwrap();
        setsockopt(&s, sockopt::RxqOvfl, &1).unwrap();
        s.bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
            .unwrap();
        let addr = s.local_addr().unwrap().as_socket().unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(addr).unwrap();
        let (id, size, fd) = (5u32, 1000usize, s.as_raw_fd());
        let peer: IpAddr = "127.0.0.1".parse().unwrap();
        let mut tally = Tally::new(id, size);
        let mut rx = RxBatch::new(size);
        for seq in 0..50 {
            tx.send(&dgram(id, seq, size)).unwrap();
        }
        // Everything is either received or dropped once the kernel has processed it.
        let give_up = Instant::now() + Duration::from_secs(10);
        let drops = loop {
            let n = rx.recv(fd).unwrap();
            rx.count(n, peer, &mut tally);
            let d = meminfo_drops(fd).expect("SO_MEMINFO (Linux 4.6+)");
            if tally.r.unique + d == 50 {
                break d;
            }
            assert!(Instant::now() < give_up, "{} + {d} != 50", tally.r.unique);
            std::thread::sleep(Duration::from_millis(1));
        };
        assert!(drops > 0 && tally.r.unique > 0, "{drops}");
        assert_eq!(tally.ovfl, None); // queued before any drop: no SO_RXQ_OVFL message
                                      // The next datagram carries the socket's drop count.
        tx.send(&dgram(id, 50, size)).unwrap();
        while tally.r.unique + drops < 51 {
            let n = rx.recv(fd).unwrap();
            rx.count(n, peer, &mut tally);
            assert!(Instant::now() < give_up);
        }
        assert_eq!(tally.ovfl, Some(drops as u32));
        let r = tally.report(51, meminfo_drops(fd), 0);
        assert_eq!((r.lost, r.kernel_drops), (drops, Some(drops)));
        assert_eq!((r.corrupt, r.duplicated, r.foreign), (0, 0, 0));
    }

    #[test]
    fn tiny_datagrams_extend_their_sequence() {
        let now = Instant::now();
        let mut t = Tally::new(1, 1);
        for seq in 0..1000u64 {
            if seq == 300 {
                continue; // comes after 350
            }
            assert_eq!(
                t.datagram(&dgram(1, seq, 1), false, now),
                Verdict::Unique { reordered: false }
            );
            if seq == 350 {
                assert_eq!(
                    t.datagram(&dgram(1, 300, 1), false, now),
                    Verdict::Unique { reordered: true }
                );
            }
        }
        assert_eq!(
            t.datagram(&dgram(1, 999, 1), false, now),
            Verdict::Duplicate
        );
        assert!(t.complete(1000));
        let r = t.report(1000, None, 0);
        assert_eq!(
            (r.unique, r.lost, r.reordered, r.duplicated),
            (1000, 0, 1, 1)
        );
        // Size 10: test id partly present (2 bytes) and checked.
        let mut t = Tally::new(0x0102_0304, 10);
        assert_eq!(
            t.datagram(&dgram(0x0102_0304, 5, 10), false, now),
            Verdict::Unique { reordered: false }
        );
        assert_eq!(
            t.datagram(&dgram(0x0102_ffff, 6, 10), false, now),
            Verdict::Foreign
        );
    }
}
