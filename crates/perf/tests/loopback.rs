//! Stream and request/response tests over 127.0.0.1.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use pvnet_perf::proto::Hello;
use pvnet_perf::{
    bind_listener, pattern, rr_client, rr_steps, serve, serve_on, stream_send, stream_send_outcome,
    LatencyHistogram, RrOpts, RrSession, ServerEvent, ServerOpts, StreamOpts, StreamReport,
};

fn server_once() -> (
    SocketAddr,
    mpsc::Receiver<ServerEvent>,
    JoinHandle<anyhow::Result<()>>,
) {
    let l = bind_listener("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    let h = thread::spawn(move || serve_on(l, true, |ev| tx.send(ev).unwrap()));
    (addr, rx, h)
}

/// The transaction count the server reported for the one RR connection it served.
fn server_rr_transactions(rx: &mpsc::Receiver<ServerEvent>) -> u64 {
    match rx.recv().unwrap() {
        ServerEvent::Rr(s) => s.transactions,
        e => panic!("unexpected {e:?}"),
    }
}

#[test]
fn stream_one_second_verifies_every_byte() {
    let (addr, rx, h) = server_once();
    let opts = StreamOpts {
        msg_size: 65536,
        duration: Duration::from_millis(1000),
        max_bytes: None,
        pace_mbps: None,
    };
    let r = stream_send(addr, &opts).unwrap();
    h.join().unwrap().unwrap();
    eprintln!("loopback stream: {r:?}");
    assert!(r.bytes > 0);
    assert_eq!(r.mismatches, 0);
    assert!(r.seconds > 0.5 && r.seconds < 2.0, "{r:?}");
    assert!(r.mbps > 0.0);
    match rx.recv().unwrap() {
        ServerEvent::Stream(s) => {
            assert_eq!((s.bytes, s.mismatches), (r.bytes, r.mismatches));
            assert!((s.mbps - r.mbps).abs() <= 1e-9 * r.mbps);
        }
        e => panic!("unexpected {e:?}"),
    }
}

#[test]
fn stream_max_bytes_and_odd_message_size() {
    let (addr, _rx, h) = server_once();
    let opts = StreamOpts {
        msg_size: 1000,
        duration: Duration::from_secs(2),
        max_bytes: Some(3_333_333),
        pace_mbps: None,
    };
    let o = stream_send_outcome(addr, &opts).unwrap();
    h.join().unwrap().unwrap();
    assert_eq!(o.sent, 3_333_333);
    assert_eq!(o.report.bytes, 3_333_333);
    assert_eq!(o.report.mismatches, 0);
}

#[test]
fn stream_samples_the_senders_tcp_info() {
    let (addr, _rx, h) = server_once();
    let opts = StreamOpts {
        msg_size: 65536,
        duration: Duration::from_millis(600),
        max_bytes: None,
        pace_mbps: Some(200),
    };
    let o = stream_send_outcome(addr, &opts).unwrap();
    h.join().unwrap().unwrap();
    assert_eq!(o.report.bytes, o.sent);
    // One sample every 50 ms over 600 ms: about 11, whatever the scheduler does to a few.
    assert!(o.tcp.samples >= 5, "{:?}", o.tcp);
    // A connection that has carried data has a window and a measured round trip.
    assert!(o.tcp.cwnd >= 1, "{:?}", o.tcp);
    assert!(o.tcp.rtt_us >= 1, "{:?}", o.tcp);
    // Never more in flight than the window allows (plus one segment of rounding).
    assert!(
        o.tcp.in_flight_bytes <= (u64::from(o.tcp.cwnd) + 1) * 65536,
        "{:?}",
        o.tcp
    );
}

#[test]
fn corrupting_client_is_counted_exactly() {
    let (addr, rx, h) = server_once();
    let mut s = TcpStream::connect(addr).unwrap();
    let hello = Hello::Stream {
        msg_size: 65536,
        duration_ms: 0,
        max_bytes: 0,
    };
    s.write_all(&hello.encode()).unwrap();
    let mut data = vec![0u8; 5_000_000];
    pattern::fill(0, &mut data);
    let bad_at = [0usize, 1, 65520, 65521, 1_000_003, 4_999_999];
    for &i in &bad_at {
        data[i] ^= 0xa5;
    }
    for chunk in data.chunks(12_345) {
        s.write_all(chunk).unwrap();
    }
    s.shutdown(Shutdown::Write).unwrap();
    let mut line = String::new();
    s.read_to_string(&mut line).unwrap();
    let r: StreamReport = serde_json::from_str(line.trim()).unwrap();
    h.join().unwrap().unwrap();
    assert_eq!(r.bytes, data.len() as u64);
    assert_eq!(r.mismatches, bad_at.len() as u64);
    // Floats may differ by one ULP after a JSON round trip (no serde_json float_roundtrip).
    assert!(
        matches!(rx.recv().unwrap(), ServerEvent::Stream(x) if (x.bytes, x.mismatches) == (r.bytes, r.mismatches))
    );
}

#[test]
fn dropped_bytes_on_the_wire_are_detected() {
    // A "relay" that loses 1448 bytes: everything after is shifted.
    let (addr, _rx, h) = server_once();
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(
        &Hello::Stream {
            msg_size: 1,
            duration_ms: 0,
            max_bytes: 0,
        }
        .encode(),
    )
    .unwrap();
    let mut data = vec![0u8; 1_000_000];
    pattern::fill(0, &mut data);
    s.write_all(&data[..100_000]).unwrap();
    s.write_all(&data[101_448..]).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let mut line = String::new();
    s.read_to_string(&mut line).unwrap();
    let r: StreamReport = serde_json::from_str(line.trim()).unwrap();
    h.join().unwrap().unwrap();
    assert!(r.mismatches > 800_000, "{r:?}");
}

#[test]
fn rr_half_second() {
    let (addr, rx, h) = server_once();
    let r = rr_client(
        addr,
        &RrOpts {
            duration: Duration::from_millis(500),
            req_size: 1,
            rsp_size: 1,
        },
    )
    .unwrap();
    h.join().unwrap().unwrap();
    eprintln!("loopback rr: {r:?}");
    assert!(r.transactions > 0);
    assert_eq!(r.errors, 0);
    assert!(r.p50_us <= r.p90_us && r.p90_us <= r.p99_us && r.p99_us <= r.max_us);
    assert!(r.tps > 0.0);
    assert_eq!(server_rr_transactions(&rx), r.transactions);
}

#[test]
fn rr_session_in_slices_counts_every_transaction_once() {
    let (addr, rx, h) = server_once();
    let mut session = RrSession::connect(addr, 16, 32, Duration::from_millis(300)).unwrap();
    let mut hist = LatencyHistogram::new();
    let mut total = 0;
    for _ in 0..3 {
        let slice = session
            .run(Duration::from_millis(100), Some(&mut hist))
            .unwrap();
        assert!(slice.transactions > 0, "{slice:?}");
        assert!(slice.seconds >= 0.1, "{slice:?}");
        assert_eq!(slice.errors, 0);
        assert!((slice.tps() - slice.transactions as f64 / slice.seconds).abs() < 1e-9);
        total += slice.transactions;
        // Idle between slices: nothing is in flight, the server just waits.
        thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(hist.count(), total);
    drop(session);
    h.join().unwrap().unwrap();
    // The server counted the same transactions over the one connection.
    assert_eq!(server_rr_transactions(&rx), total);
}

#[test]
fn rr_steps_answers_each_line_and_rejects_nonsense() {
    let (addr, rx, h) = server_once();
    let mut session = RrSession::connect(addr, 1, 1, Duration::from_millis(100)).unwrap();
    let mut out = Vec::new();
    let total = rr_steps(&mut session, &b"0.05\n0.05\n"[..], &mut out).unwrap();
    let lines: Vec<pvnet_perf::RrSlice> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines.iter().map(|l| l.transactions).sum::<u64>(), total);
    assert!(lines.iter().all(|l| l.transactions > 0 && l.errors == 0));
    for bad in ["-1", "abc", "0", "1e9"] {
        let e = rr_steps(&mut session, format!("{bad}\n").as_bytes(), Vec::new()).unwrap_err();
        assert!(e.to_string().contains("want seconds"), "{bad}: {e}");
    }
    drop(session);
    h.join().unwrap().unwrap();
    assert_eq!(server_rr_transactions(&rx), total);
}

#[test]
fn rr_larger_messages() {
    let (addr, _rx, h) = server_once();
    let r = rr_client(
        addr,
        &RrOpts {
            duration: Duration::from_millis(200),
            req_size: 300,
            rsp_size: 70_000,
        },
    )
    .unwrap();
    h.join().unwrap().unwrap();
    assert!(r.transactions > 0);
    assert_eq!(r.errors, 0);
}

#[test]
fn bad_hello_is_rejected_and_server_keeps_serving() {
    // `serve` binds itself: pick a free port first.
    let port = bind_listener("127.0.0.1:0".parse().unwrap())
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let (tx, rx) = mpsc::channel();
    let h = thread::spawn(move || {
        serve(
            &ServerOpts {
                bind: addr,
                once: true,
            },
            |ev| tx.send(ev).unwrap(),
        )
    });
    let connect = || {
        for _ in 0..200 {
            if let Ok(s) = TcpStream::connect(addr) {
                return s;
            }
            thread::sleep(Duration::from_millis(5));
        }
        panic!("server did not come up");
    };
    let mut s = connect();
    s.write_all(&[0u8; 32]).unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest); // server closes
    assert!(matches!(rx.recv().unwrap(), ServerEvent::Error { .. }));
    let r = stream_send(
        addr,
        &StreamOpts {
            msg_size: 65536,
            duration: Duration::from_millis(100),
            max_bytes: Some(1 << 20),
            pace_mbps: None,
        },
    )
    .unwrap();
    assert_eq!(r.bytes, 1 << 20);
    h.join().unwrap().unwrap();
    assert!(matches!(rx.recv().unwrap(), ServerEvent::Stream(_)));
}
