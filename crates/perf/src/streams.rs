//! Several verified streams at once, switched on and off in slices on the same connections:
//! the guest-scaling comparison on one testbed.
//!
//! One connection per receiver stays open for the whole session, each with a writer thread.
//! The session runs slices on command ([`Session::slice`]): the streams named active write,
//! the others pause (their writer stops between two writes and the path drains what they had
//! in flight). A slice waits `settle` after the switch, then counts each stream's bytes
//! acknowledged by its receiver (`TCP_INFO` `tcpi_bytes_acked`) over `seconds`, and samples
//! every stream's `TCP_INFO` every [`TCP_INFO_EVERY`] meanwhile: where the senders hold their
//! bytes. Every byte is still verified by its receiver when the session ends
//! ([`Session::finish`]).
//!
//! A paused connection keeps its state: with `net.ipv4.tcp_slow_start_after_idle` at 0 in the
//! sender's namespace (the bench sets it) its congestion window survives the pause, so a
//! stream that resumes does not start over from the initial window.

use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use crate::pattern;
use crate::proto::{self, Hello};
use crate::stream::{
    check_msg_size, is_bbr, median, pattern_source, read_report, read_tcp_info, SenderTcp,
    StreamReport, TcpSample, TCP_INFO_EVERY,
};

/// What one slice measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamsSlice {
    /// The streams that were writing, by index.
    pub active: Vec<usize>,
    /// The measured window (after the settling time).
    pub seconds: f64,
    /// Bytes each stream's receiver acknowledged in the window (every stream, active or not).
    pub bytes: Vec<u64>,
    /// Each stream's sender over the window: the medians of its `TCP_INFO` samples, taken
    /// every [`TCP_INFO_EVERY`] (paused streams too). Empty from versions before it was added.
    #[serde(default)]
    pub tcp: Vec<SenderTcp>,
    /// Median over the window's samples of every stream's bytes in flight together.
    #[serde(default)]
    pub in_flight_bytes: u64,
}

impl StreamsSlice {
    /// Megabits per second of all streams together over the window.
    pub fn mbps(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes.iter().sum::<u64>() as f64 * 8.0 / self.seconds / 1e6
        } else {
            0.0
        }
    }

    /// Megabits per second of each active stream, in `active` order.
    pub fn active_mbps(&self) -> Vec<f64> {
        (self.active.iter())
            .map(|&i| match self.bytes.get(i) {
                Some(&b) if self.seconds > 0.0 => b as f64 * 8.0 / self.seconds / 1e6,
                _ => 0.0,
            })
            .collect()
    }
}

/// What the session's receivers verified, and what was sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamsResult {
    pub sent: Vec<u64>,
    pub receivers: Vec<StreamReport>,
}

impl StreamsResult {
    /// Every stream arrived whole and unchanged.
    pub fn intact(&self) -> bool {
        self.sent.len() == self.receivers.len()
            && (self.sent.iter().zip(&self.receivers))
                .all(|(s, r)| r.bytes == *s && r.mismatches == 0)
    }
}

const PAUSED: u8 = 0;
const ACTIVE: u8 = 1;
const STOP: u8 = 2;

/// One stream's writer.
struct Writer {
    sock: TcpStream,
    /// Whether the socket's congestion control is BBR (its estimate is then sampled too).
    bbr: bool,
    state: Arc<AtomicU8>,
    sent: Arc<AtomicU64>,
    thread: Option<JoinHandle<anyhow::Result<()>>>,
}

/// A set of open streams driven slice by slice.
pub struct Session {
    writers: Vec<Writer>,
}

/// How long a paused writer sleeps between looks at its state.
const PAUSE_POLL: Duration = Duration::from_millis(2);

impl Session {
    /// Connects to every receiver (a [`crate::serve`] server), says hello, and starts one
    /// paused writer per stream. `limit` bounds how long any socket operation may block.
    pub fn start(to: &[SocketAddr], msg_size: usize, limit: Duration) -> anyhow::Result<Session> {
        if to.is_empty() {
            bail!("no receiver to stream to");
        }
        check_msg_size(msg_size)?;
        let src = Arc::new(pattern_source(msg_size));
        let mut writers = Vec::with_capacity(to.len());
        for &addr in to {
            let mut sock = crate::connect(addr).with_context(|| format!("connect {addr}"))?;
            sock.set_write_timeout(Some(limit))?;
            sock.set_read_timeout(Some(limit))?;
            let hello = Hello::Stream {
                msg_size: msg_size as u32,
                duration_ms: proto::duration_ms(limit),
                max_bytes: 0,
            };
            std::io::Write::write_all(&mut sock, &hello.encode()).context("send hello")?;
            let state = Arc::new(AtomicU8::new(PAUSED));
            let sent = Arc::new(AtomicU64::new(0));
            let thread = {
                let (mut sock, state, sent, src) =
                    (sock.try_clone()?, state.clone(), sent.clone(), src.clone());
                std::thread::spawn(move || write_loop(&mut sock, &state, &sent, &src, msg_size))
            };
            writers.push(Writer {
                bbr: is_bbr(&sock),
                sock,
                state,
                sent,
                thread: Some(thread),
            });
        }
        Ok(Session { writers })
    }

    /// Streams in the session.
    pub fn len(&self) -> usize {
        self.writers.len()
    }

    /// Whether the session has no stream (never: [`Session::start`] refuses that).
    pub fn is_empty(&self) -> bool {
        self.writers.is_empty()
    }

    /// Runs one slice: the streams in `active` write, the others pause; after `settle`, each
    /// stream's acknowledged bytes are counted over `seconds`.
    pub fn slice(
        &mut self,
        active: &[usize],
        settle: Duration,
        seconds: Duration,
    ) -> anyhow::Result<StreamsSlice> {
        if let Some(&i) = active.iter().find(|&&i| i >= self.writers.len()) {
            bail!("stream {i} does not exist ({} streams)", self.writers.len());
        }
        for (i, w) in self.writers.iter().enumerate() {
            let on = active.contains(&i);
            w.state
                .store(if on { ACTIVE } else { PAUSED }, Ordering::Release);
            if on {
                if let Some(t) = &w.thread {
                    t.thread().unpark();
                }
            }
        }
        std::thread::sleep(settle);
        self.check_writers()?;
        let before = self.acked()?;
        let t0 = Instant::now();
        let samples = self.sample_until(t0 + seconds);
        let after = self.acked()?;
        let measured = t0.elapsed().as_secs_f64();
        self.check_writers()?;
        let mut active = active.to_vec();
        active.sort_unstable();
        active.dedup();
        let together = (samples.iter())
            .map(|at| at.iter().map(|s| s.map_or(0, |s| s.in_flight)).sum())
            .collect();
        let tcp = (0..self.writers.len())
            .map(|i| {
                let mine: Vec<TcpSample> = samples.iter().filter_map(|at| at[i]).collect();
                SenderTcp::of(&mine)
            })
            .collect();
        Ok(StreamsSlice {
            active,
            seconds: measured,
            bytes: after.iter().zip(&before).map(|(a, b)| a - b).collect(),
            tcp,
            in_flight_bytes: median(together).unwrap_or_default(),
        })
    }

    /// Samples every stream's sender every [`TCP_INFO_EVERY`] until `end`, and returns at
    /// `end`: one entry per sampling time, one sample per stream (`None` where the kernel
    /// answered none).
    fn sample_until(&self, end: Instant) -> Vec<Vec<Option<TcpSample>>> {
        let mut samples = Vec::new();
        let mut next = Instant::now() + TCP_INFO_EVERY;
        while next < end {
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
            samples.push(
                (self.writers.iter())
                    .map(|w| TcpSample::of(&w.sock, w.bbr))
                    .collect(),
            );
            next += TCP_INFO_EVERY;
        }
        std::thread::sleep(end.saturating_duration_since(Instant::now()));
        samples
    }

    /// Stops every writer, closes each stream's sending side and reads its receiver's report.
    pub fn finish(mut self) -> anyhow::Result<StreamsResult> {
        for w in &self.writers {
            w.state.store(STOP, Ordering::Release);
            if let Some(t) = &w.thread {
                t.thread().unpark();
            }
        }
        let mut sent = Vec::with_capacity(self.writers.len());
        let mut receivers = Vec::with_capacity(self.writers.len());
        for (i, w) in self.writers.iter_mut().enumerate() {
            let t = w.thread.take().expect("joined once");
            t.join()
                .map_err(|_| anyhow::anyhow!("stream {i}: the writer panicked"))?
                .with_context(|| format!("stream {i}"))?;
            sent.push(w.sent.load(Ordering::Acquire));
            w.sock
                .shutdown(Shutdown::Write)
                .with_context(|| format!("stream {i}: shutdown(Write)"))?;
            let report = read_report(w.sock.try_clone()?)
                .with_context(|| format!("stream {i}: reading the receiver's report"))?;
            receivers.push(report);
        }
        Ok(StreamsResult { sent, receivers })
    }

    /// Fails with the first writer's error, if one has ended.
    fn check_writers(&mut self) -> anyhow::Result<()> {
        for (i, w) in self.writers.iter_mut().enumerate() {
            if w.thread.as_ref().is_some_and(|t| t.is_finished()) {
                let t = w.thread.take().expect("checked");
                return match t.join() {
                    Ok(Err(e)) => Err(e.context(format!("stream {i}"))),
                    Ok(Ok(())) => bail!("stream {i}: the writer stopped"),
                    Err(_) => bail!("stream {i}: the writer panicked"),
                };
            }
        }
        Ok(())
    }

    /// Each stream's bytes acknowledged so far.
    fn acked(&self) -> anyhow::Result<Vec<u64>> {
        (self.writers.iter().enumerate())
            .map(|(i, w)| {
                bytes_acked(&w.sock)
                    .with_context(|| format!("stream {i}: TCP_INFO (tcpi_bytes_acked)"))
            })
            .collect()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        for w in &self.writers {
            w.state.store(STOP, Ordering::Release);
            let _ = w.sock.shutdown(Shutdown::Both);
        }
    }
}

/// A writer: the pattern, message by message, while its state is ACTIVE.
fn write_loop(
    sock: &mut TcpStream,
    state: &AtomicU8,
    sent: &AtomicU64,
    src: &[u8],
    msg_size: usize,
) -> anyhow::Result<()> {
    let mut n = 0u64;
    loop {
        match state.load(Ordering::Acquire) {
            STOP => return Ok(()),
            PAUSED => {
                std::thread::park_timeout(PAUSE_POLL);
                continue;
            }
            _ => {}
        }
        let pos = (n % pattern::PERIOD as u64) as usize;
        match std::io::Write::write(sock, &src[pos..pos + msg_size]) {
            Ok(0) => bail!("connection closed by the receiver after {n} bytes"),
            Ok(k) => {
                n += k as u64;
                sent.store(n, Ordering::Release);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context(format!("send after {n} bytes")),
        }
    }
}

/// `tcpi_bytes_acked` of `sock` (Linux 4.1 and later).
fn bytes_acked(sock: &TcpStream) -> std::io::Result<u64> {
    let (info, len) = read_tcp_info(sock)?;
    if len < std::mem::offset_of!(libc::tcp_info, tcpi_bytes_acked) + 8 {
        return Err(std::io::Error::other(
            "the kernel's TCP_INFO has no tcpi_bytes_acked (Linux 4.1 or later needed)",
        ));
    }
    Ok(info.tcpi_bytes_acked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::{serve_on, ServerEvent};

    /// Loopback servers, one stream test each, handing back their reports.
    fn servers(n: usize) -> (Vec<SocketAddr>, Vec<std::thread::JoinHandle<StreamReport>>) {
        (0..n)
            .map(|_| {
                let l = crate::bind_listener("127.0.0.1:0".parse().unwrap()).unwrap();
                let addr = l.local_addr().unwrap();
                let t = std::thread::spawn(move || {
                    let mut got = None;
                    serve_on(l, true, |ev| {
                        if let ServerEvent::Stream(r) = ev {
                            got = Some(r);
                        }
                    })
                    .unwrap();
                    got.expect("a stream report")
                });
                (addr, t)
            })
            .unzip()
    }

    #[test]
    fn slices_move_only_the_active_streams_and_every_byte_arrives() {
        let (addrs, threads) = servers(3);
        let mut s = Session::start(&addrs, 16 << 10, Duration::from_secs(20)).unwrap();
        assert_eq!(s.len(), 3);
        let settle = Duration::from_millis(100);
        let window = Duration::from_millis(200);
        let one = s.slice(&[1], settle, window).unwrap();
        assert_eq!(one.active, [1]);
        assert!(one.bytes[1] > 0, "{one:?}");
        assert_eq!(
            (one.bytes[0], one.bytes[2]),
            (0, 0),
            "paused streams moved: {one:?}"
        );
        // 200 ms sampled every 50: three samples of every stream, paused ones too.
        assert_eq!(one.tcp.len(), 3, "{one:?}");
        assert!(
            one.tcp.iter().all(|t| (1..=3).contains(&t.samples)),
            "{one:?}"
        );
        assert!(one.tcp[1].cwnd > 0 && one.tcp[1].rtt_us > 0, "{one:?}");
        let all = s.slice(&[2, 0, 1, 2], settle, window).unwrap();
        assert_eq!(all.active, [0, 1, 2]);
        assert!(all.bytes.iter().all(|&b| b > 0), "{all:?}");
        assert!(all.tcp.iter().all(|t| t.cwnd > 0), "{all:?}");
        assert_eq!(all.active_mbps().len(), 3);
        assert!(all.mbps() > 0.0);
        // Streams that wrote and are paused now: once what they had in flight has drained
        // (the settling time, on loopback), nothing more of theirs is acknowledged.
        let again = s.slice(&[0], settle, window).unwrap();
        assert!(again.bytes[0] > 0, "{again:?}");
        assert_eq!((again.bytes[1], again.bytes[2]), (0, 0), "{again:?}");
        assert!(s.slice(&[3], settle, window).is_err(), "no stream 3");
        let r = s.finish().unwrap();
        assert!(r.intact(), "{r:?}");
        assert!(r.sent.iter().all(|&b| b > 0), "{r:?}");
        for (t, sent) in threads.into_iter().zip(&r.sent) {
            let rep = t.join().unwrap();
            assert_eq!((rep.bytes, rep.mismatches), (*sent, 0));
        }
    }

    #[test]
    fn a_slice_from_an_earlier_version_still_reads() {
        let s: StreamsSlice =
            serde_json::from_str(r#"{"active":[0],"seconds":0.5,"bytes":[10,0]}"#).unwrap();
        assert!(s.tcp.is_empty());
        assert_eq!(s.in_flight_bytes, 0);
    }

    #[test]
    fn bad_arguments_are_refused() {
        assert!(Session::start(&[], 1024, Duration::from_secs(1)).is_err());
        let (addrs, _t) = servers(1);
        let e = Session::start(&addrs, 0, Duration::from_secs(1))
            .err()
            .unwrap();
        assert!(e.to_string().contains("msg_size"), "{e}");
        let r = StreamsResult {
            sent: vec![5, 6],
            receivers: vec![StreamReport::new(5, 0, 1.0), StreamReport::new(6, 1, 1.0)],
        };
        assert!(!r.intact(), "a mismatch is not intact");
    }
}
