//! TCP_STREAM-like bulk transfer, verified byte-exact by the receiver.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use crate::pattern;
use crate::proto::{self, Hello};

/// Bytes the server asks for per `read`: 64 KiB, what iperf3's server reads per call at the default
/// message size. Larger reads hold the socket longer, so more ACKs leave from `recvmsg` and the
/// sender's CPU takes an RPS IPI for each: with 256 KiB, natively iperf3 measured 8 % faster.
pub const RECV_BUF: usize = 64 << 10;

/// Options of [`stream_send`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamOpts {
    /// Bytes per `write` (default 65536).
    pub msg_size: usize,
    /// How long to send.
    pub duration: Duration,
    /// Stop after this many bytes even if the duration has not elapsed.
    pub max_bytes: Option<u64>,
    /// Pace the sender's TCP at this many Mbit/s (`SO_MAX_PACING_RATE`): a wire of that speed.
    pub pace_mbps: Option<u64>,
}

impl Default for StreamOpts {
    fn default() -> Self {
        StreamOpts {
            msg_size: 65536,
            duration: Duration::from_secs(10),
            max_bytes: None,
            pace_mbps: None,
        }
    }
}

/// What the receiver counted and verified.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamReport {
    /// Payload bytes received after the hello.
    pub bytes: u64,
    /// Bytes that differ from the pattern at their stream offset.
    pub mismatches: u64,
    /// Receiver time from the first payload byte to EOF.
    pub seconds: f64,
    /// Megabits (10^6 bit) per second: `bytes * 8 / seconds / 1e6`.
    pub mbps: f64,
}

impl StreamReport {
    pub(crate) fn new(bytes: u64, mismatches: u64, seconds: f64) -> Self {
        let mbps = if seconds > 0.0 {
            bytes as f64 * 8.0 / seconds / 1e6
        } else {
            0.0
        };
        StreamReport {
            bytes,
            mismatches,
            seconds,
            mbps,
        }
    }
}

/// How often the sender samples its socket's `TCP_INFO` during a stream.
pub const TCP_INFO_EVERY: Duration = Duration::from_millis(50);

/// One look at a sender's socket: `TCP_INFO`, and BBR's own estimate when BBR is its
/// congestion control.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpSample {
    /// Bytes in flight: `tcpi_unacked × tcpi_snd_mss`.
    pub in_flight: u64,
    /// Smoothed round-trip time (`tcpi_rtt`, µs).
    pub rtt_us: u32,
    /// Congestion window (`tcpi_snd_cwnd`, segments).
    pub cwnd: u32,
    /// BBR's minimum-RTT estimate (`TCP_CC_INFO`'s `bbr_min_rtt`, µs); `None` when the socket's
    /// congestion control is not BBR.
    pub bbr_min_rtt_us: Option<u32>,
}

impl TcpSample {
    /// Samples `sock`; `bbr` says whether its congestion control is BBR ([`is_bbr`]).
    /// `None` when the kernel answers no `TCP_INFO`.
    pub fn of(sock: &TcpStream, bbr: bool) -> Option<TcpSample> {
        // The kernel fills what it knows of the struct; the fields read here are in every
        // version since 2.6 (the first 104 bytes).
        let (info, len) = read_tcp_info(sock).ok()?;
        (len >= 104).then(|| TcpSample {
            in_flight: u64::from(info.tcpi_unacked) * u64::from(info.tcpi_snd_mss),
            rtt_us: info.tcpi_rtt,
            cwnd: info.tcpi_snd_cwnd,
            bbr_min_rtt_us: if bbr { bbr_min_rtt_us(sock) } else { None },
        })
    }
}

/// The sender's TCP state over a stream, from `TCP_INFO` sampled every [`TCP_INFO_EVERY`]:
/// where the path holds the stream's data. Bytes in flight are `tcpi_unacked × tcpi_snd_mss`
/// (sent, not yet acknowledged: on the wire, in the receiver's queues, or acknowledged by an
/// ACK still on its way back).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SenderTcp {
    /// Samples taken (0: the stream ended before the first).
    pub samples: u32,
    /// Median of the samples' bytes in flight.
    pub in_flight_bytes: u64,
    /// Median of the samples' smoothed round-trip time (`tcpi_rtt`, µs).
    pub rtt_us: u32,
    /// Median congestion window (`tcpi_snd_cwnd`, segments).
    pub cwnd: u32,
    /// Median of BBR's minimum-RTT estimate (µs) over the samples that have one; absent when
    /// the congestion control is not BBR (and from versions before it was added).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bbr_min_rtt_us: Option<u32>,
}

impl SenderTcp {
    /// Each figure's median over `samples` (the upper median of an even count).
    pub fn of(samples: &[TcpSample]) -> SenderTcp {
        let f: Vec<u64> = samples.iter().map(|s| s.in_flight).collect();
        let r: Vec<u32> = samples.iter().map(|s| s.rtt_us).collect();
        let c: Vec<u32> = samples.iter().map(|s| s.cwnd).collect();
        let m: Vec<u32> = samples.iter().filter_map(|s| s.bbr_min_rtt_us).collect();
        SenderTcp {
            samples: samples.len() as u32,
            in_flight_bytes: median(f).unwrap_or_default(),
            rtt_us: median(r).unwrap_or_default(),
            cwnd: median(c).unwrap_or_default(),
            bbr_min_rtt_us: median(m),
        }
    }
}

/// The upper median of `v`; `None` when it is empty.
pub fn median<T: Ord + Copy>(mut v: Vec<T>) -> Option<T> {
    v.sort_unstable();
    v.get(v.len() / 2).copied()
}

/// Sender's view plus the receiver's report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamOutcome {
    /// Bytes the sender wrote after the hello.
    pub sent: u64,
    /// Sender time from the first write to `shutdown(Write)`.
    pub send_seconds: f64,
    /// The sender's TCP state over the stream.
    pub tcp: SenderTcp,
    /// The receiver's report.
    pub report: StreamReport,
}

/// What `pvnet perf stream` prints: the sender's count and the receiver's report. The bench
/// reads it back with this type, so a renamed field fails there instead of reading as 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamResult {
    pub sent: u64,
    /// The sender's TCP state (absent from the output of versions before it was added).
    #[serde(default)]
    pub sender: Option<SenderTcp>,
    pub receiver: StreamReport,
}

/// Run a stream test against a [`crate::serve`] server and return the receiver's report.
///
/// Fails if the connection breaks or the receiver counted a different number of bytes than
/// were sent (content errors are reported in `mismatches`, not as an error); use
/// [`stream_send_outcome`] to get both counts instead.
pub fn stream_send(addr: SocketAddr, opts: &StreamOpts) -> anyhow::Result<StreamReport> {
    let o = stream_send_outcome(addr, opts)?;
    if o.sent != o.report.bytes {
        bail!(
            "receiver counted {} bytes, sender wrote {} (report {:?})",
            o.report.bytes,
            o.sent,
            o.report
        );
    }
    Ok(o.report)
}

/// Like [`stream_send`] but never fails on a count discrepancy: returns the sender's count too.
pub fn stream_send_outcome(addr: SocketAddr, opts: &StreamOpts) -> anyhow::Result<StreamOutcome> {
    check_msg_size(opts.msg_size)?;
    let mut sock = crate::connect(addr).with_context(|| format!("connect {addr}"))?;
    if let Some(mbps) = opts.pace_mbps {
        set_pacing(&sock, mbps).context("setting SO_MAX_PACING_RATE")?;
    }
    // Never hang forever on a stalled path.
    sock.set_write_timeout(Some(opts.duration + Duration::from_secs(10)))?;
    sock.set_read_timeout(Some(opts.duration + Duration::from_secs(30)))?;
    let hello = Hello::Stream {
        msg_size: opts.msg_size as u32,
        duration_ms: proto::duration_ms(opts.duration),
        max_bytes: opts.max_bytes.unwrap_or(0),
    };
    sock.write_all(&hello.encode()).context("send hello")?;

    let src = pattern_source(opts.msg_size);
    let limit = opts.max_bytes.unwrap_or(u64::MAX);
    let start = Instant::now();
    let deadline = start + opts.duration;
    let mut sent = 0u64;
    let mut tcp = Vec::new();
    let bbr = is_bbr(&sock);
    let mut next_info = start + TCP_INFO_EVERY;
    loop {
        let now = Instant::now();
        if sent >= limit || now >= deadline {
            break;
        }
        if now >= next_info {
            next_info += TCP_INFO_EVERY;
            tcp.extend(TcpSample::of(&sock, bbr));
        }
        let pos = (sent % pattern::PERIOD as u64) as usize;
        let len = (opts.msg_size as u64).min(limit - sent) as usize;
        match sock.write(&src[pos..pos + len]) {
            Ok(0) => bail!("connection closed by receiver after {sent} bytes"),
            Ok(n) => sent += n as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context(format!("send after {sent} bytes")),
        }
    }
    let send_seconds = start.elapsed().as_secs_f64();
    sock.shutdown(Shutdown::Write).context("shutdown(Write)")?;
    let report = read_report(sock).context("read receiver report")?;
    Ok(StreamOutcome {
        sent,
        send_seconds,
        tcp: SenderTcp::of(&tcp),
        report,
    })
}

/// A sender's message size: 1 to [`proto::MAX_MSG`].
pub fn check_msg_size(msg_size: usize) -> anyhow::Result<()> {
    if msg_size == 0 || msg_size > proto::MAX_MSG as usize {
        bail!("msg_size {msg_size} out of range 1..={}", proto::MAX_MSG);
    }
    Ok(())
}

/// A sender's source buffer: the pattern from phase 0 over one period plus one message, so
/// every write is a slice of it (no per-write fill): the bytes at stream offset `n` start at
/// `n % PERIOD`.
pub(crate) fn pattern_source(msg_size: usize) -> Vec<u8> {
    let mut src = vec![0u8; pattern::PERIOD + msg_size];
    pattern::fill(0, &mut src);
    src
}

/// Read the server's one-line JSON report (bounded to 4 KiB).
pub(crate) fn read_report(sock: TcpStream) -> anyhow::Result<StreamReport> {
    let mut line = String::new();
    BufReader::new(sock.take(4096)).read_line(&mut line)?;
    if line.is_empty() {
        bail!("receiver closed without a report");
    }
    Ok(serde_json::from_str(line.trim_end())?)
}

/// Server side: count and verify every byte until EOF, then send the report line.
pub(crate) fn receive(sock: &mut TcpStream) -> io::Result<StreamReport> {
    let mut buf = vec![0u8; RECV_BUF];
    let mut bytes = 0u64;
    let mut bad = 0u64;
    let mut first: Option<Instant> = None;
    loop {
        let n = match sock.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        first.get_or_insert_with(Instant::now);
        bad += pattern::verify(bytes, &buf[..n]);
        bytes += n as u64;
    }
    let seconds = first.map_or(0.0, |t| t.elapsed().as_secs_f64());
    let report = StreamReport::new(bytes, bad, seconds);
    let mut line = serde_json::to_vec(&report).map_err(io::Error::other)?;
    line.push(b'\n');
    sock.write_all(&line)?;
    let _ = sock.shutdown(Shutdown::Both);
    Ok(report)
}

/// Whether `sock`'s congestion control is BBR (`TCP_CONGESTION` reads `bbr`).
pub fn is_bbr(sock: &TcpStream) -> bool {
    let mut name = [0u8; 16];
    tcp_sockopt(sock, libc::TCP_CONGESTION, &mut name)
        .is_ok_and(|n| name[..n].split(|&b| b == 0).next() == Some(b"bbr".as_slice()))
}

/// BBR's minimum-RTT estimate of `sock` in µs: the third field of the kernel's
/// `struct tcp_bbr_info` (`bbr_bw_lo`, `bbr_bw_hi`, `bbr_min_rtt`, `bbr_pacing_gain`,
/// `bbr_cwnd_gain`, each a `u32`), which `TCP_CC_INFO` answers for a BBR socket.
fn bbr_min_rtt_us(sock: &TcpStream) -> Option<u32> {
    let mut info = [0u8; 5 * 4];
    let n = tcp_sockopt(sock, libc::TCP_CC_INFO, &mut info).ok()?;
    let field = info.get(8..12).filter(|_| n >= 12)?;
    Some(u32::from_ne_bytes(field.try_into().ok()?))
}

/// `TCP_INFO` of `sock`, and how many bytes of it the kernel filled (older kernels fill a
/// prefix of the struct; the rest stays zero).
pub(crate) fn read_tcp_info(sock: &TcpStream) -> io::Result<(libc::tcp_info, usize)> {
    let mut buf = [0u8; std::mem::size_of::<libc::tcp_info>()];
    let n = tcp_sockopt(sock, libc::TCP_INFO, &mut buf)?;
    // SAFETY: `buf` holds exactly `size_of::<tcp_info>()` bytes, read unaligned; tcp_info is
    // plain integers, for which every bit pattern is a valid value.
    let info = unsafe { std::ptr::read_unaligned(buf.as_ptr().cast::<libc::tcp_info>()) };
    Ok((info, n))
}

/// `getsockopt(IPPROTO_TCP, opt)` of `sock` into `buf`: how many bytes the kernel wrote.
fn tcp_sockopt(sock: &TcpStream, opt: libc::c_int, buf: &mut [u8]) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    let mut len = libc::socklen_t::try_from(buf.len()).map_err(io::Error::other)?;
    // SAFETY: getsockopt writes at most `len` bytes into `buf`, a live slice of that length,
    // and `len` back; the descriptor is the open socket `sock` borrows.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            opt,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((len as usize).min(buf.len()))
}

/// Caps the socket's TCP pacing rate (TCP paces internally when the qdisc is not fq).
fn set_pacing(sock: &TcpStream, mbps: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let bytes_per_s: u64 = mbps.saturating_mul(1_000_000) / 8;
    // SAFETY: setsockopt reads exactly `size_of::<u64>()` bytes from a live local value; the
    // descriptor is the open socket `sock` borrows.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MAX_PACING_RATE,
            (&bytes_per_s as *const u64).cast(),
            std::mem::size_of::<u64>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sender_tcp_takes_each_figure_s_median() {
        let s = |in_flight, rtt_us, cwnd, bbr_min_rtt_us| TcpSample {
            in_flight,
            rtt_us,
            cwnd,
            bbr_min_rtt_us,
        };
        let v = [
            s(300, 9, 10, Some(90)),
            s(100, 7, 30, None),
            s(200, 8, 20, Some(70)),
        ];
        assert_eq!(
            SenderTcp::of(&v),
            SenderTcp {
                samples: 3,
                in_flight_bytes: 200,
                rtt_us: 8,
                cwnd: 20,
                // Over the two samples that have one: the upper median.
                bbr_min_rtt_us: Some(90),
            }
        );
        // Even count: the upper median.
        let v = [1, 4, 2, 3].map(|x| s(x, 1, 1, None));
        assert_eq!(SenderTcp::of(&v).in_flight_bytes, 3);
        assert_eq!(SenderTcp::of(&v).bbr_min_rtt_us, None);
        assert_eq!(SenderTcp::of(&[]), SenderTcp::default());
    }

    /// A loopback connection carrying data: BBR's state when the namespace runs BBR, and
    /// `TCP_INFO` in any case.
    #[test]
    fn a_socket_s_sample_reads_tcp_info_and_bbr_s_estimate() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let sock = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut peer, _) = l.accept().unwrap();
        (&sock).write_all(&[7u8; 1 << 16]).unwrap();
        let mut got = vec![0u8; 1 << 16];
        peer.read_exact(&mut got).unwrap();
        let bbr = is_bbr(&sock);
        let t = TcpSample::of(&sock, bbr).expect("TCP_INFO");
        assert!(t.cwnd > 0 && t.rtt_us > 0, "{t:?}");
        let cc = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control").unwrap();
        assert_eq!(bbr, cc.trim() == "bbr", "default congestion control {cc:?}");
        if bbr {
            let m = t.bbr_min_rtt_us.expect("BBR's minimum RTT");
            assert!(m > 0 && m < 1_000_000, "loopback min RTT {m} µs");
        } else {
            eprintln!("the default congestion control is {cc:?}, not BBR: its estimate not read");
            assert_eq!(t.bbr_min_rtt_us, None);
        }
    }

    #[test]
    fn a_result_without_the_sender_s_figures_still_reads() {
        let r: StreamResult = serde_json::from_str(
            r#"{"sent":5,"receiver":{"bytes":5,"mismatches":0,"seconds":1.0,"mbps":0.0}}"#,
        )
        .unwrap();
        assert_eq!(r.sender, None);
    }
}
