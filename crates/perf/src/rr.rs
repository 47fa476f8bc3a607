//! TCP_RR-like request/response test with a bounded-memory latency histogram.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use crate::pattern;
use crate::proto::{self, Hello};

/// Options of [`rr_client`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RrOpts {
    /// How long to run.
    pub duration: Duration,
    /// Request size in bytes (default 1).
    pub req_size: usize,
    /// Response size in bytes (default 1).
    pub rsp_size: usize,
}

impl Default for RrOpts {
    fn default() -> Self {
        RrOpts {
            duration: Duration::from_secs(10),
            req_size: 1,
            rsp_size: 1,
        }
    }
}

/// Result of a request/response test (latencies in microseconds, ≈3 % resolution).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RrReport {
    pub transactions: u64,
    pub seconds: f64,
    /// Transactions per second.
    pub tps: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    /// Exact maximum.
    pub max_us: f64,
    /// Responses whose echoed sequence number did not match the request.
    pub errors: u64,
}

/// Log-linear latency histogram in nanoseconds: exact below 64 ns, then 32 buckets per power
/// of two (relative error ≤ 1/64 at the bucket midpoint), fixed 15 KiB whatever the count.
#[derive(Debug, Clone)]
pub struct LatencyHistogram {
    counts: Box<[u64; Self::BUCKETS]>,
    total: u64,
    max: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistogram {
    const SUB_BITS: u32 = 5;
    const SUB: u64 = 1 << Self::SUB_BITS; // 32 buckets per octave
    const LINEAR: u64 = 2 * Self::SUB; // values below this are exact
    const BUCKETS: usize = (Self::LINEAR + (64 - Self::SUB_BITS as u64 - 1) * Self::SUB) as usize;

    pub fn new() -> Self {
        LatencyHistogram {
            counts: Box::new([0; Self::BUCKETS]),
            total: 0,
            max: 0,
        }
    }

    fn index(v: u64) -> usize {
        if v < Self::LINEAR {
            return v as usize;
        }
        let e = 63 - v.leading_zeros(); // ≥ SUB_BITS + 1
        let shift = e - Self::SUB_BITS;
        let top = v >> shift; // in [SUB, 2*SUB)
        (Self::LINEAR + (e - Self::SUB_BITS - 1) as u64 * Self::SUB + (top - Self::SUB)) as usize
    }

    /// Lower bound and width of a bucket.
    fn bucket(i: usize) -> (u64, u64) {
        let i = i as u64;
        if i < Self::LINEAR {
            return (i, 1);
        }
        let j = i - Self::LINEAR;
        let shift = (j / Self::SUB) as u32 + 1;
        let top = Self::SUB + j % Self::SUB;
        (top << shift, 1 << shift)
    }

    /// Record one sample in nanoseconds.
    pub fn record(&mut self, ns: u64) {
        self.counts[Self::index(ns)] += 1;
        self.total += 1;
        self.max = self.max.max(ns);
    }

    /// Number of samples.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// Largest sample (exact), 0 if empty.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The `q`-quantile (0..=1) in nanoseconds: midpoint of the bucket holding the sample of
    /// rank `ceil(q * count)`, never above the maximum. 0 if empty.
    pub fn quantile(&self, q: f64) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (lo, w) = Self::bucket(i);
                let mid = lo as f64 + (w - 1) as f64 / 2.0;
                return mid.min(self.max as f64);
            }
        }
        self.max as f64
    }
}

/// What one slice of a [`RrSession`] did.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RrSlice {
    pub transactions: u64,
    pub seconds: f64,
    /// Responses whose echoed sequence number did not match the request.
    pub errors: u64,
}

/// One request/response connection to a [`crate::serve`] server: TCP_NODELAY, one outstanding
/// transaction at a time, every response's echoed sequence number checked. It runs in slices
/// ([`RrSession::run`]); between slices nothing is in flight, so whoever drives it can change
/// the path under it and attribute every transaction to the setting it ran under.
pub struct RrSession {
    sock: TcpStream,
    req: Vec<u8>,
    rsp: Vec<u8>,
    echo: usize,
    seq_len: usize,
    seq: u64,
}

impl RrSession {
    /// Connects and sends the hello; `planned` is only informational for the server.
    pub fn connect(
        addr: SocketAddr,
        req_size: usize,
        rsp_size: usize,
        planned: Duration,
    ) -> anyhow::Result<RrSession> {
        let max = proto::MAX_MSG as usize;
        if !(1..=max).contains(&req_size) || !(1..=max).contains(&rsp_size) {
            bail!("req_size/rsp_size must be in 1..={max}");
        }
        let mut sock = crate::connect(addr).with_context(|| format!("connect {addr}"))?;
        sock.set_nodelay(true)?;
        sock.set_read_timeout(Some(Duration::from_secs(10)))?;
        sock.set_write_timeout(Some(Duration::from_secs(10)))?;
        let hello = Hello::Rr {
            req_size: req_size as u32,
            rsp_size: rsp_size as u32,
            duration_ms: proto::duration_ms(planned),
        };
        sock.write_all(&hello.encode()).context("send hello")?;
        let mut req = vec![0u8; req_size];
        pattern::fill(0, &mut req);
        Ok(RrSession {
            sock,
            req,
            rsp: vec![0u8; rsp_size],
            echo: req_size.min(rsp_size).min(8),
            seq_len: req_size.min(8),
            seq: 0,
        })
    }

    /// Runs transactions back to back for `duration` (the last one may end past it), each
    /// latency into `hist` when one is given.
    pub fn run(
        &mut self,
        duration: Duration,
        mut hist: Option<&mut LatencyHistogram>,
    ) -> anyhow::Result<RrSlice> {
        let first = self.seq;
        let mut errors = 0u64;
        let start = Instant::now();
        let deadline = start + duration;
        let mut now = start;
        while now < deadline {
            let seq = self.seq;
            let sb = seq.to_le_bytes();
            self.req[..self.seq_len].copy_from_slice(&sb[..self.seq_len]);
            self.sock
                .write_all(&self.req)
                .with_context(|| format!("send request {seq}"))?;
            read_full(&mut self.sock, &mut self.rsp)
                .with_context(|| format!("read response {seq}"))?;
            let t = Instant::now();
            if let Some(h) = hist.as_deref_mut() {
                h.record(t.duration_since(now).as_nanos() as u64);
            }
            now = t;
            if self.rsp[..self.echo] != sb[..self.echo] {
                errors += 1;
            }
            self.seq += 1;
        }
        Ok(RrSlice {
            transactions: self.seq - first,
            seconds: now.duration_since(start).as_secs_f64(),
            errors,
        })
    }
}

/// Run a request/response test against a [`crate::serve`] server: one [`RrSession`] slice of
/// `opts.duration`.
pub fn rr_client(addr: SocketAddr, opts: &RrOpts) -> anyhow::Result<RrReport> {
    let mut session = RrSession::connect(addr, opts.req_size, opts.rsp_size, opts.duration)?;
    let mut hist = LatencyHistogram::new();
    let slice = session.run(opts.duration, Some(&mut hist))?;
    let us = |ns: f64| ns / 1e3;
    Ok(RrReport {
        transactions: slice.transactions,
        seconds: slice.seconds,
        tps: slice.tps(),
        p50_us: us(hist.quantile(0.50)),
        p90_us: us(hist.quantile(0.90)),
        p99_us: us(hist.quantile(0.99)),
        max_us: us(hist.max() as f64),
        errors: slice.errors,
    })
}

/// Drives `session` from a line protocol, for a bench that changes the path between slices:
/// each input line is a slice length in seconds; after running it, one JSON [`RrSlice`] line
/// goes out (flushed). End of input ends the session. A line that is not a positive number of
/// seconds (at most an hour) is an error, as is a slice with a mismatched response.
pub fn rr_steps(
    session: &mut RrSession,
    input: impl io::BufRead,
    mut output: impl Write,
) -> anyhow::Result<u64> {
    let mut total = 0;
    for line in input.lines() {
        let line = line.context("reading the next slice length")?;
        let secs: f64 = match line.trim().parse() {
            Ok(s) if s > 0.0 && s <= 3600.0 => s,
            _ => bail!("slice length {line:?}: want seconds in (0, 3600]"),
        };
        let slice = session.run(Duration::from_secs_f64(secs), None)?;
        total += slice.transactions;
        // The slice's line goes out first: a failing slice's counts are not lost.
        writeln!(output, "{}", serde_json::to_string(&slice)?)?;
        output.flush()?;
        check_echoes(slice.errors)?;
    }
    Ok(total)
}

/// `Err` when `errors` responses did not echo their request: a test that saw one fails, whole
/// ([`rr_client`]'s report) or by slice ([`rr_steps`]).
pub fn check_echoes(errors: u64) -> anyhow::Result<()> {
    if errors > 0 {
        bail!("{errors} responses did not echo their request");
    }
    Ok(())
}

impl RrSlice {
    /// Transactions per second (0 for an empty slice).
    pub fn tps(&self) -> f64 {
        if self.seconds > 0.0 {
            self.transactions as f64 / self.seconds
        } else {
            0.0
        }
    }
}

/// `read_exact` that retries on EINTR (std's already does) with a clearer EOF message.
fn read_full(sock: &mut TcpStream, buf: &mut [u8]) -> io::Result<()> {
    sock.read_exact(buf).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            io::Error::new(e.kind(), "peer closed mid-test")
        } else {
            e
        }
    })
}

/// Server side: answer requests until the client closes; returns the transaction count.
pub(crate) fn respond(sock: &mut TcpStream, req_size: usize, rsp_size: usize) -> io::Result<u64> {
    sock.set_nodelay(true)?;
    let mut req = vec![0u8; req_size];
    let mut rsp = vec![0u8; rsp_size];
    pattern::fill(0, &mut rsp);
    let echo = req_size.min(rsp_size).min(8);
    let mut n = 0u64;
    loop {
        // First byte separately: EOF here is the normal end of the test.
        let got = loop {
            match sock.read(&mut req) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => break r?,
            }
        };
        if got == 0 {
            return Ok(n);
        }
        sock.read_exact(&mut req[got..])?;
        rsp[..echo].copy_from_slice(&req[..echo]);
        sock.write_all(&rsp)?;
        n += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_consistent() {
        let mut last = 0usize;
        for v in (0..100_000u64).chain([u64::MAX / 3, u64::MAX]) {
            let i = LatencyHistogram::index(v);
            assert!(i < LatencyHistogram::BUCKETS, "{v}");
            assert!(i >= last || v > 100_000);
            last = i;
            let (lo, w) = LatencyHistogram::bucket(i);
            assert!(lo <= v && v - lo < w, "v {v} bucket {i} lo {lo} w {w}");
            assert!(w == 1 || (w as f64) / (lo as f64) <= 1.0 / 32.0 + 1e-12);
        }
    }

    #[test]
    fn histogram_quantiles() {
        let mut h = LatencyHistogram::new();
        assert_eq!(h.quantile(0.5), 0.0);
        for v in 1..=10_000u64 {
            h.record(v * 1000);
        }
        assert_eq!(h.count(), 10_000);
        assert_eq!(h.max(), 10_000_000);
        for (q, want) in [(0.5, 5e6), (0.9, 9e6), (0.99, 9.9e6)] {
            let got = h.quantile(q);
            assert!((got - want).abs() / want < 0.02, "q {q}: {got} vs {want}");
        }
        assert!(h.quantile(1.0) <= 10_000_000.0);
    }
}
