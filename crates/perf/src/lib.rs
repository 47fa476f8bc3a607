//! pvnet-perf: the traffic tool behind `pvnet perf` and CPU accounting for the benchmark.
//!
//! * [`pattern`] — a verifiable byte-stream content pattern (prime period, memcmp-speed check).
//! * [`proto`] — the 32-byte hello that opens every test connection.
//! * [`stream`] — TCP_STREAM-like bulk transfer, verified byte-exact by the receiver.
//! * [`streams`] — several verified streams on open connections, switched on and off in
//!   slices (the guest-scaling comparison on one testbed).
//! * [`rr`] — TCP_RR-like request/response with a bounded-memory latency histogram.
//! * [`udp`] — UDP_STREAM-like fixed-size datagrams, paced, each verified and counted alone.
//! * [`records`] — paced records of one size over TCP, each verified and acknowledged (the
//!   HVM paper's Fig. 6 workload).
//! * [`server`] — the receiving side of all four tests.
//! * [`cpu`] — `/proc/stat`, per-process CPU time, TSC; cycles per byte without hardware counters.

pub mod cpu;
pub mod pattern;
pub mod ping;
pub mod proto;
pub mod records;
pub mod rr;
pub mod server;
pub mod stream;
pub mod streams;
pub mod udp;

pub use cpu::{CpuDelta, CpuSample, CpuTimes};
pub use records::{records_send, RecordOpts, RecordsReport, RecordsResult};
pub use rr::{rr_client, rr_steps, LatencyHistogram, RrOpts, RrReport, RrSession, RrSlice};
pub use server::{bind_listener, serve, serve_on, RrSummary, ServerEvent, ServerOpts};
pub use stream::{
    check_msg_size, stream_send, stream_send_outcome, SenderTcp, StreamOpts, StreamOutcome,
    StreamReport, StreamResult, TcpSample,
};
pub use streams::{Session as StreamsSession, StreamsResult, StreamsSlice};
pub use udp::{
    udp_send, Rate, UdpLimits, UdpOpts, UdpOutcome, UdpRecvError, UdpReport, UdpSenderStats,
    UdpSession,
};

/// Connects to a test server, retrying for up to [`CONNECT_PATIENCE`] while the connection is
/// refused: a server started a moment ago (in another namespace, on a loaded host) may not
/// listen yet. Any other error, or a refusal past the patience, is returned.
pub fn connect(addr: std::net::SocketAddr) -> std::io::Result<std::net::TcpStream> {
    let deadline = std::time::Instant::now() + CONNECT_PATIENCE;
    loop {
        match std::net::TcpStream::connect(addr) {
            Err(e)
                if e.kind() == std::io::ErrorKind::ConnectionRefused
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            r => return r,
        }
    }
}

/// How long [`connect`] waits for a server to listen.
pub const CONNECT_PATIENCE: std::time::Duration = std::time::Duration::from_secs(5);
