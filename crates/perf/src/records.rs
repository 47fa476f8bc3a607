//! Paced records, each acknowledged: the workload of Zhang, Li and Guan's Fig. 6 (Chariot
//! endpoints sending 2000 records of one size at 50 records per second, throughput and time
//! per record reported per size).
//!
//! # Protocol
//!
//! After the hello ([`Hello::Records`]: record size and count) the client sends records
//! 0, 1, ... count−1. Record `i` is `size` bytes: the first `min(8, size)` bytes are `i`
//! little-endian, the rest the [`pattern`] at stream offset `i * size + 8` onwards (so every
//! record's body differs from its neighbours'). One record is in flight at a time: the client
//! sends record `i`, waits for its acknowledgement, then waits for record `i + 1`'s slot in the
//! schedule (`start + (i + 1) / rate`); a record whose slot has passed is sent at once, and
//! counted as late when it is more than one interval behind. The server reads each record whole, compares every byte with what record
//! `i` must hold, and answers a 16-byte [`Ack`]: the sequence number it expected, the bytes
//! that differed (saturating at `u32::MAX`), and [`ACK_MAGIC`]. After the last acknowledgement
//! the client shuts down its write side; the server answers one JSON line ([`RecordsReport`])
//! and closes. A record beyond the count, or the end of the connection before the count, is an
//! error on the server's side.
//!
//! Time per record is from the first byte's `write` to the acknowledgement's arrival; the
//! throughput is the record bytes over the time from the first record's send to the last
//! acknowledgement.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use crate::pattern;
use crate::proto::{self, Hello};
use crate::rr::LatencyHistogram;

/// Bytes of an acknowledgement.
pub const ACK_LEN: usize = 16;
/// The last four bytes of every acknowledgement.
pub const ACK_MAGIC: [u8; 4] = *b"ACK1";
/// Most records one test may have.
pub const MAX_RECORDS: u64 = 10_000_000;
/// Most records per second a schedule may ask for.
pub const MAX_RATE: f64 = 1_000_000.0;
/// Fewest records per second a schedule may ask for: one every 30 s, half of [`PATIENCE`]
/// (and of the server's idle timeout), so a connection never waits long enough to be dropped.
pub const MIN_RATE: f64 = 1.0 / 30.0;
/// How long either side waits for the other's next bytes.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// The seed's run: 2000 records at 50 per second.
pub const SEED_COUNT: u64 = 2000;
pub const SEED_RATE: f64 = 50.0;

/// Bytes of record `seq` of a test with `size`-byte records.
pub fn fill_record(seq: u64, buf: &mut [u8]) {
    let n = buf.len().min(8);
    buf[..n].copy_from_slice(&seq.to_le_bytes()[..n]);
    pattern::fill(body_offset(seq, buf.len()), &mut buf[n..]);
}

/// Bytes of `buf` that differ from record `seq` of a test with `buf.len()`-byte records.
pub fn verify_record(seq: u64, buf: &[u8]) -> u64 {
    let n = buf.len().min(8);
    let head = (buf[..n].iter())
        .zip(&seq.to_le_bytes()[..n])
        .filter(|(a, b)| a != b)
        .count() as u64;
    head + pattern::verify(body_offset(seq, buf.len()), &buf[n..])
}

/// Pattern offset of record `seq`'s body (after its sequence bytes).
fn body_offset(seq: u64, size: usize) -> u64 {
    seq.wrapping_mul(size as u64).wrapping_add(8)
}

/// The server's answer to one record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ack {
    /// The record's sequence number (the one the server expected).
    pub seq: u64,
    /// Bytes of the record that were not what record `seq` holds (saturating).
    pub mismatches: u32,
}

/// Why an acknowledgement was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AckError {
    #[error("acknowledgement without its magic (got {0:02x?})")]
    BadMagic([u8; 4]),
}

impl Ack {
    /// The 16 bytes on the wire.
    pub fn encode(&self) -> [u8; ACK_LEN] {
        let mut b = [0u8; ACK_LEN];
        b[0..8].copy_from_slice(&self.seq.to_le_bytes());
        b[8..12].copy_from_slice(&self.mismatches.to_le_bytes());
        b[12..16].copy_from_slice(&ACK_MAGIC);
        b
    }

    /// Parses 16 bytes from the (untrusted) server.
    pub fn decode(b: &[u8; ACK_LEN]) -> Result<Ack, AckError> {
        let mut magic = [0u8; 4];
        magic.copy_from_slice(&b[12..16]);
        if magic != ACK_MAGIC {
            return Err(AckError::BadMagic(magic));
        }
        let mut seq = [0u8; 8];
        seq.copy_from_slice(&b[0..8]);
        let mut mm = [0u8; 4];
        mm.copy_from_slice(&b[8..12]);
        Ok(Ack {
            seq: u64::from_le_bytes(seq),
            mismatches: u32::from_le_bytes(mm),
        })
    }
}

/// What the server saw of one test.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RecordsReport {
    /// Records received whole (and acknowledged).
    pub records: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Bytes that were not what their record holds, over all records.
    pub mismatches: u64,
    /// Records with at least one such byte.
    pub bad_records: u64,
}

/// Options of [`records_send`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordOpts {
    /// Bytes per record, 1..=[`proto::MAX_MSG`].
    pub size: usize,
    /// Records, 1..=[`MAX_RECORDS`].
    pub count: u64,
    /// Records per second the schedule asks for (None: each as soon as the last is acknowledged).
    pub rate: Option<f64>,
}

impl RecordOpts {
    /// Checks the bounds above.
    pub fn check(&self) -> anyhow::Result<()> {
        if !(1..=proto::MAX_MSG as usize).contains(&self.size) {
            bail!(
                "record size {} out of range 1..={}",
                self.size,
                proto::MAX_MSG
            );
        }
        if !(1..=MAX_RECORDS).contains(&self.count) {
            bail!("record count {} out of range 1..={MAX_RECORDS}", self.count);
        }
        if let Some(r) = self.rate {
            if !(MIN_RATE..=MAX_RATE).contains(&r) {
                bail!(
                    "record rate {r} out of range: one every 30 s to {MAX_RATE} records per \
                     second (0: unpaced; a server drops a connection idle for 60 s)"
                );
            }
        }
        Ok(())
    }
}

/// Time per record, milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RecordTimes {
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// What [`records_send`] measured, with the server's report.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RecordsResult {
    pub size: usize,
    pub count: u64,
    /// The schedule's records per second (None: unpaced).
    pub rate: Option<f64>,
    /// Records sent, and acknowledged with the sequence number sent.
    pub sent: u64,
    pub acked: u64,
    /// Records the server found corrupt (its acknowledgement counted mismatched bytes).
    pub nacked: u64,
    /// Records sent more than one interval after their slot in the schedule.
    pub late: u64,
    /// From the first record's send to the last acknowledgement.
    pub seconds: f64,
    /// Record bytes per second over `seconds`, Mbit/s.
    pub throughput_mbps: f64,
    pub time_per_record: RecordTimes,
    /// The server's count and verification.
    pub receiver: RecordsReport,
}

impl RecordsResult {
    /// Every record sent, acknowledged and verified whole by the server.
    pub fn intact(&self) -> bool {
        self.sent == self.count
            && self.acked == self.count
            && self.nacked == 0
            && self.receiver.records == self.count
            && self.receiver.bytes == self.count * self.size as u64
            && self.receiver.mismatches == 0
    }
}

/// Runs a records test against a [`crate::serve`] server.
pub fn records_send(addr: SocketAddr, opts: &RecordOpts) -> anyhow::Result<RecordsResult> {
    opts.check()?;
    let mut sock = crate::connect(addr).with_context(|| format!("connect {addr}"))?;
    sock.set_nodelay(true)?;
    sock.set_read_timeout(Some(PATIENCE))?;
    sock.set_write_timeout(Some(PATIENCE))?;
    let hello = Hello::Records {
        size: opts.size as u32,
        count: opts.count,
    };
    sock.write_all(&hello.encode()).context("send hello")?;
    let mut r = RecordsResult {
        size: opts.size,
        count: opts.count,
        rate: opts.rate,
        ..RecordsResult::default()
    };
    let interval = opts.rate.map(|r| Duration::from_secs_f64(1.0 / r));
    let mut buf = vec![0u8; opts.size];
    let mut hist = LatencyHistogram::new();
    let mut total_ns = 0u128;
    let start = Instant::now();
    for seq in 0..opts.count {
        if let Some(iv) = interval {
            let slot = start + iv.mul_f64(seq as f64);
            let now = Instant::now();
            if now < slot {
                std::thread::sleep(slot - now);
            } else if now > slot + iv {
                r.late += 1;
            }
        }
        fill_record(seq, &mut buf);
        let t = Instant::now();
        sock.write_all(&buf)
            .with_context(|| format!("sending record {seq}"))?;
        r.sent += 1;
        let mut a = [0u8; ACK_LEN];
        sock.read_exact(&mut a)
            .with_context(|| format!("waiting for record {seq}'s acknowledgement"))?;
        let ns = t.elapsed().as_nanos();
        let ack = Ack::decode(&a).with_context(|| format!("record {seq}"))?;
        if ack.seq != seq {
            bail!(
                "record {seq} acknowledged as record {}: the server lost count",
                ack.seq
            );
        }
        r.acked += 1;
        if ack.mismatches > 0 {
            r.nacked += 1;
        }
        hist.record(u64::try_from(ns).unwrap_or(u64::MAX));
        total_ns += ns;
    }
    r.seconds = start.elapsed().as_secs_f64();
    sock.shutdown(Shutdown::Write).context("shutdown(Write)")?;
    r.receiver = read_report(&sock).context("reading the server's report")?;
    let bytes = r.acked * opts.size as u64;
    r.throughput_mbps = if r.seconds > 0.0 {
        bytes as f64 * 8.0 / r.seconds / 1e6
    } else {
        0.0
    };
    r.time_per_record = RecordTimes {
        mean_ms: total_ns as f64 / r.acked.max(1) as f64 / 1e6,
        p50_ms: hist.quantile(0.5) / 1e6,
        p99_ms: hist.quantile(0.99) / 1e6,
        max_ms: hist.max() as f64 / 1e6,
    };
    Ok(r)
}

/// The server's one-line JSON report (bounded to 4 KiB).
fn read_report(sock: &TcpStream) -> anyhow::Result<RecordsReport> {
    let mut line = String::new();
    BufReader::new(sock.take(4096)).read_line(&mut line)?;
    if line.is_empty() {
        bail!("the server closed without a report");
    }
    Ok(serde_json::from_str(line.trim_end())?)
}

/// Why the server side of a records test failed.
#[derive(Debug, thiserror::Error)]
pub enum RecordsError {
    #[error("the client closed after {got} of {count} records")]
    Short { got: u64, count: u64 },
    #[error("the client closed in the middle of record {seq} ({got} of {size} bytes)")]
    Torn { seq: u64, got: usize, size: usize },
    #[error("bytes after the last of {count} records")]
    Excess { count: u64 },
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Reads into `buf` until it is full or the peer closes; the bytes read.
fn read_full(sock: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match sock.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Server side: `count` records of `size` bytes, each verified and acknowledged, then the
/// client's end of file, then the report line.
pub(crate) fn receive<S: Read + Write>(
    sock: &mut S,
    size: usize,
    count: u64,
) -> Result<RecordsReport, RecordsError> {
    let mut buf = vec![0u8; size];
    let mut rep = RecordsReport::default();
    for seq in 0..count {
        match read_full(sock, &mut buf)? {
            0 => return Err(RecordsError::Short { got: seq, count }),
            n if n < size => return Err(RecordsError::Torn { seq, got: n, size }),
            _ => {}
        }
        let bad = verify_record(seq, &buf);
        rep.records += 1;
        rep.bytes += size as u64;
        rep.mismatches += bad;
        rep.bad_records += u64::from(bad > 0);
        let ack = Ack {
            seq,
            mismatches: u32::try_from(bad).unwrap_or(u32::MAX),
        };
        sock.write_all(&ack.encode())?;
    }
    let mut one = [0u8; 1];
    if read_full(sock, &mut one)? != 0 {
        return Err(RecordsError::Excess { count });
    }
    let mut line = serde_json::to_vec(&rep).map_err(io::Error::other)?;
    line.push(b'\n');
    sock.write_all(&line)?;
    Ok(rep)
}

/// Parses a record size: bytes, or with a binary suffix `k`/`K`/`KiB`, `m`/`M`/`MiB`
/// (`64K` is 65536, `1M` 1048576).
pub fn parse_size(s: &str) -> Result<usize, String> {
    Some(parse_bytes(s)?)
        .filter(|v| (1..=proto::MAX_MSG as usize).contains(v))
        .ok_or_else(|| format!("{s:?}: a record is 1 byte to {} bytes", proto::MAX_MSG))
}

/// Parses a byte count: digits, optionally followed by `K`, `M` or `G` (powers of 1024; also
/// `KiB`, `MiB`, `GiB`, and lower case).
pub fn parse_bytes(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let (num, shift) = match t.find(|c: char| !c.is_ascii_digit()) {
        None => (t, 0),
        Some(i) => {
            let shift = match &t[i..] {
                "k" | "K" | "KiB" => 10,
                "m" | "M" | "MiB" => 20,
                "g" | "G" | "GiB" => 30,
                other => {
                    return Err(format!(
                        "{s:?} is not a byte count: unknown suffix {other:?} (K, M or G)"
                    ))
                }
            };
            (&t[..i], shift)
        }
    };
    num.parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(1usize << shift))
        .ok_or_else(|| format!("{s:?} is not a byte count (digits, optionally K, M or G)"))
}

/// Parses a comma-separated list of record sizes (see [`parse_size`]), sorted, duplicates
/// dropped.
pub fn parse_sizes(s: &str) -> Result<Vec<usize>, String> {
    let mut v = (s.split(','))
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(parse_size)
        .collect::<Result<Vec<_>, _>>()?;
    v.sort_unstable();
    v.dedup();
    if v.is_empty() {
        return Err("no record size given".into());
    }
    Ok(v)
}

/// A size as the report writes it: `1 KiB`, `64 KiB`, `1 MiB`, or bytes.
pub fn size_name(n: usize) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn records_verify_byte_for_byte_and_differ_from_their_neighbours() {
        for size in [1, 7, 8, 9, 100, 70_000] {
            let mut a = vec![0u8; size];
            fill_record(3, &mut a);
            assert_eq!(verify_record(3, &a), 0, "size {size}");
            assert!(
                verify_record(4, &a) > 0,
                "record 3 passed as 4, size {size}"
            );
            let mut b = a.clone();
            b[size - 1] ^= 0x40;
            assert_eq!(verify_record(3, &b), 1, "size {size}");
            if size > 9 {
                b[0] ^= 1;
                b[9] ^= 1;
                assert_eq!(verify_record(3, &b), 3, "size {size}");
            }
        }
    }

    #[test]
    fn acks_round_trip_and_refuse_garbage() {
        let a = Ack {
            seq: 0x0102_0304_0506_0708,
            mismatches: 77,
        };
        assert_eq!(Ack::decode(&a.encode()), Ok(a));
        let mut b = a.encode();
        b[15] = b'2';
        assert_eq!(Ack::decode(&b), Err(AckError::BadMagic(*b"ACK2")));
    }

    /// A server on loopback running [`receive`] for one connection.
    fn server() -> (
        SocketAddr,
        std::thread::JoinHandle<Result<RecordsReport, String>>,
    ) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let h = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut h = [0u8; proto::HELLO_LEN];
            s.read_exact(&mut h).map_err(|e| e.to_string())?;
            match Hello::decode(&h).map_err(|e| e.to_string())? {
                Hello::Records { size, count } => {
                    receive(&mut s, size as usize, count).map_err(|e| e.to_string())
                }
                other => Err(format!("not a records hello: {other:?}")),
            }
        });
        (addr, h)
    }

    #[test]
    fn every_record_is_acknowledged_and_counted() {
        let (addr, h) = server();
        let opts = RecordOpts {
            size: 5000,
            count: 25,
            rate: Some(1000.0),
        };
        let r = records_send(addr, &opts).unwrap();
        let srv = h.join().unwrap().unwrap();
        assert!(r.intact(), "{r:?}");
        assert_eq!((r.sent, r.acked, r.nacked), (25, 25, 0));
        assert_eq!(srv.records, 25);
        assert_eq!(srv.bytes, 25 * 5000);
        assert_eq!(r.receiver, srv);
        assert!(r.time_per_record.max_ms >= r.time_per_record.p50_ms);
        // 25 records at 1000 per second: the last one's slot is 24 ms after the first.
        assert!(r.seconds >= 0.024, "{}", r.seconds);
    }

    #[test]
    fn a_corrupt_record_is_acknowledged_with_its_mismatches() {
        let (addr, h) = server();
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(&Hello::Records { size: 64, count: 2 }.encode())
            .unwrap();
        let mut rec = vec![0u8; 64];
        fill_record(0, &mut rec);
        s.write_all(&rec).unwrap();
        let mut a = [0u8; ACK_LEN];
        s.read_exact(&mut a).unwrap();
        assert_eq!(
            Ack::decode(&a).unwrap(),
            Ack {
                seq: 0,
                mismatches: 0
            }
        );
        fill_record(1, &mut rec);
        rec[10] ^= 0xff;
        rec[20] ^= 0xff;
        s.write_all(&rec).unwrap();
        s.read_exact(&mut a).unwrap();
        assert_eq!(
            Ack::decode(&a).unwrap(),
            Ack {
                seq: 1,
                mismatches: 2
            }
        );
        s.shutdown(Shutdown::Write).unwrap();
        let rep = read_report(&s).unwrap();
        assert_eq!(
            rep,
            RecordsReport {
                records: 2,
                bytes: 128,
                mismatches: 2,
                bad_records: 1
            }
        );
        assert_eq!(h.join().unwrap().unwrap(), rep);
    }

    #[test]
    fn short_torn_and_excess_tests_are_errors_on_the_server() {
        let run = |records: &[u64], extra: &[u8], tail: usize| {
            let (addr, h) = server();
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(&Hello::Records { size: 32, count: 2 }.encode())
                .unwrap();
            let mut rec = vec![0u8; 32];
            for &seq in records {
                fill_record(seq, &mut rec);
                s.write_all(&rec).unwrap();
                let mut a = [0u8; ACK_LEN];
                s.read_exact(&mut a).unwrap();
            }
            s.write_all(&rec[..tail]).unwrap();
            s.write_all(extra).unwrap();
            s.shutdown(Shutdown::Write).unwrap();
            h.join().unwrap().unwrap_err()
        };
        let e = run(&[0], &[], 0);
        assert!(e.contains("after 1 of 2 records"), "{e}");
        let e = run(&[0], &[], 5);
        assert!(e.contains("middle of record 1 (5 of 32 bytes)"), "{e}");
        let e = run(&[0, 1], b"x", 0);
        assert!(e.contains("after the last of 2 records"), "{e}");
    }

    #[test]
    fn options_and_sizes_are_checked() {
        let ok = RecordOpts {
            size: 1,
            count: 1,
            rate: None,
        };
        assert!(ok.check().is_ok());
        for bad in [
            RecordOpts { size: 0, ..ok },
            RecordOpts {
                size: proto::MAX_MSG as usize + 1,
                ..ok
            },
            RecordOpts { count: 0, ..ok },
            RecordOpts {
                count: MAX_RECORDS + 1,
                ..ok
            },
            RecordOpts {
                rate: Some(0.0),
                ..ok
            },
            RecordOpts {
                rate: Some(f64::NAN),
                ..ok
            },
            RecordOpts {
                rate: Some(-5.0),
                ..ok
            },
            // A record every 30 years (or never: 1/1e-20 s is past what a Duration holds).
            RecordOpts {
                rate: Some(1e-9),
                ..ok
            },
            RecordOpts {
                rate: Some(1e-20),
                ..ok
            },
        ] {
            assert!(bad.check().is_err(), "{bad:?}");
        }
        let slowest = RecordOpts {
            rate: Some(MIN_RATE),
            ..ok
        };
        assert!(slowest.check().is_ok());
        assert_eq!(parse_size("1024"), Ok(1024));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size(" 2k "), Ok(2048));
        for bad in [
            "0",
            "",
            "K",
            "1G",
            "17M",
            "-1",
            "1.5K",
            "99999999999999999999K",
        ] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_sizes("1M,1K,1024"), Ok(vec![1024, 1 << 20]));
        assert!(parse_sizes(",").is_err());
        assert_eq!(size_name(1024), "1 KiB");
        assert_eq!(size_name(1 << 20), "1 MiB");
        assert_eq!(size_name(1000), "1000 B");
    }

    #[test]
    fn byte_counts() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("512K"), Ok(512 << 10));
        assert_eq!(parse_bytes("16M"), Ok(16 << 20));
        assert_eq!(parse_bytes("1g"), Ok(1 << 30));
        for bad in ["", "M", "1.5M", "-1", "12T", "99999999999999999999G"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
    }
}
