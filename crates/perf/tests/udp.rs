//! UDP stream tests over 127.0.0.1 (no root needed).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use pvnet_perf::proto::Hello;
use pvnet_perf::udp::{encode_datagram, serve_udp_test, UdpReady, MAX_DATAGRAM};
use pvnet_perf::{
    bind_listener, serve_on, udp_send, Rate, ServerEvent, UdpLimits, UdpOpts, UdpRecvError,
    UdpReport, UdpSession,
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

fn server_udp_report(rx: &mpsc::Receiver<ServerEvent>) -> UdpReport {
    match rx.recv().unwrap() {
        ServerEvent::Udp(r) => r,
        e => panic!("unexpected {e:?}"),
    }
}

/// The counts every clean run must satisfy, whatever the loopback dropped.
fn assert_consistent(r: &UdpReport, sent: u64, size: usize) {
    assert_eq!(r.sent, sent, "{r:?}");
    assert_eq!(r.size as usize, size);
    assert_eq!(r.corrupt, 0, "{r:?}");
    assert_eq!(r.duplicated, 0, "{r:?}");
    assert_eq!((r.beyond, r.stale, r.foreign), (0, 0, 0), "{r:?}");
    assert_eq!(r.received, r.unique, "{r:?}");
    assert_eq!(r.bytes, r.unique * size as u64, "{r:?}");
    assert_eq!(r.unique + r.lost, sent, "{r:?}");
    if let Some(k) = r.kernel_drops {
        // Every datagram the socket dropped is one we never saw.
        assert!(k <= r.lost, "{r:?}");
    }
}

/// The server's copy of a report equals the client's (floats up to a JSON round trip's ULP).
fn assert_same(a: &UdpReport, b: &UdpReport) {
    let ints = |r: &UdpReport| UdpReport {
        seconds: 0.0,
        pps: 0.0,
        mbps: 0.0,
        ..r.clone()
    };
    assert_eq!(ints(a), ints(b));
    for (x, y) in [(a.seconds, b.seconds), (a.pps, b.pps), (a.mbps, b.mbps)] {
        assert!((x - y).abs() <= 1e-9 * x.abs().max(1.0), "{a:?} vs {b:?}");
    }
}

/// A session whose datagrams the test writes by hand.
fn session(addr: SocketAddr, size: usize, test_id: u32) -> UdpSession {
    UdpSession::connect(addr, size, test_id, None, None).unwrap()
}

fn send_seq(s: &UdpSession, test_id: u32, seq: u64, size: usize) {
    let mut b = vec![0u8; size];
    encode_datagram(test_id, seq, &mut b);
    assert_eq!(s.socket().send(&b).unwrap(), size);
}

#[test]
fn every_size_from_1_to_65507_is_verified() {
    for size in [1usize, 18, 1472, 8000, MAX_DATAGRAM] {
        let (addr, rx, h) = server_once();
        let opts = UdpOpts {
            size,
            duration: None,
            datagrams: Some(400),
            rate: Some(Rate::DatagramsPerSec(4000.0)),
            test_id: Some(0x5eed_0000 + size as u32),
            burst: None,
        };
        let out = udp_send(addr, &opts).unwrap();
        h.join().unwrap().unwrap();
        eprintln!("size {size}: {:?}", out.receiver);
        assert_eq!(out.sender.sent, 400);
        assert_eq!(out.sender.bytes, 400 * size as u64);
        assert_eq!(out.receiver.test_id, 0x5eed_0000 + size as u32);
        assert!(out.receiver.unique > 0, "{:?}", out.receiver);
        assert_consistent(&out.receiver, 400, size);
        assert_same(&server_udp_report(&rx), &out.receiver);
    }
}

#[test]
fn unpaced_run_counts_consistently() {
    let (addr, rx, h) = server_once();
    let opts = UdpOpts {
        size: 1472,
        duration: Some(Duration::from_millis(300)),
        datagrams: None,
        rate: None,
        test_id: None,
        burst: None,
    };
    let out = udp_send(addr, &opts).unwrap();
    h.join().unwrap().unwrap();
    eprintln!("unpaced: {out:?}");
    assert!(out.sender.sent > 0);
    assert_eq!(out.sender.target_pps, None);
    assert_eq!(out.sender.test_id, out.receiver.test_id);
    assert_consistent(&out.receiver, out.sender.sent, 1472);
    assert!(out.receiver.rcvbuf > 0);
    assert!(out.receiver.kernel_drops.is_some(), "SO_MEMINFO on Linux");
    assert_same(&server_udp_report(&rx), &out.receiver);
}

#[test]
fn paced_run_holds_the_rate_loosely() {
    // 40 Mbit/s of 1000-byte datagrams = 5000 datagrams/s, for 0.6 s.
    let (addr, _rx, h) = server_once();
    let opts = UdpOpts {
        size: 1000,
        duration: Some(Duration::from_millis(600)),
        datagrams: None,
        rate: Some(Rate::BitsPerSec(40e6)),
        test_id: None,
        burst: None,
    };
    let out = udp_send(addr, &opts).unwrap();
    h.join().unwrap().unwrap();
    eprintln!("paced: {:?}", out.sender);
    let s = &out.sender;
    assert_eq!(s.target_pps, Some(5000.0));
    // The pacer never runs ahead of its schedule: at most one burst (10 ms) over.
    assert!(s.sent <= 3000 + 50 + 1, "{s:?}");
    // Not wildly off (loose: the machine is shared).
    assert!(s.pps > 2500.0 && s.pps < 7500.0, "{s:?}");
    assert!(s.sent > 1500, "{s:?}");
    assert_consistent(&out.receiver, s.sent, 1000);
}

#[test]
fn injected_anomalies_are_counted_exactly() {
    let (addr, rx, h) = server_once();
    let (id, size) = (42u32, 100usize);
    let s = session(addr, size, id);
    for seq in [0, 1, 2, 4, 3, 4] {
        send_seq(&s, id, seq, size); // 3 out of order, 4 twice
    }
    let mut bad = vec![0u8; size];
    encode_datagram(id, 5, &mut bad);
    bad[60] ^= 0x10; // payload damaged
    s.socket().send(&bad).unwrap();
    encode_datagram(id, 6, &mut bad[..size - 1]); // one byte short
    s.socket().send(&bad[..size - 1]).unwrap();
    let mut long = vec![0u8; size + 1]; // one byte long: cut by the kernel (MSG_TRUNC)
    encode_datagram(id, 7, &mut long);
    s.socket().send(&long).unwrap();
    send_seq(&s, id + 1, 8, size); // another test's datagram
    send_seq(&s, id, 8, size);
    // 9 never sent: lost.
    send_seq(&s, id, 10, size);
    let r = s.finish(11).unwrap();
    h.join().unwrap().unwrap();
    eprintln!("{r:?}");
    assert_eq!(r.sent, 11);
    assert_eq!(r.unique, 7); // 0 1 2 3 4 8 10
    assert_eq!(r.reordered, 1); // 3
    assert_eq!(r.duplicated, 1); // 4
    assert_eq!((r.corrupt, r.wrong_size), (3, 2)); // 5; 6 and 7
    assert_eq!(r.foreign, 1);
    assert_eq!(r.lost, 4); // 5 6 7 (their numbers are not trusted) and 9
    assert_eq!(r.received, 11);
    assert_eq!(r.bytes, 11 * size as u64 - 1); // the long one was cut to `size`
    assert_eq!((r.beyond, r.stale), (0, 0));
    assert_same(&server_udp_report(&rx), &r);
}

#[test]
fn datagrams_from_another_address_are_foreign() {
    // The control connection comes from 127.0.0.1; a datagram from 127.0.0.2 is not the test's.
    let (addr, _rx, h) = server_once();
    let (id, size) = (9u32, 64usize);
    let s = session(addr, size, id);
    let target = s.socket().peer_addr().unwrap();
    let other = UdpSocket::bind("127.0.0.2:0").unwrap();
    let mut b = vec![0u8; size];
    encode_datagram(id, 0, &mut b);
    other.send_to(&b, target).unwrap();
    send_seq(&s, id, 0, size);
    let r = s.finish(1).unwrap();
    h.join().unwrap().unwrap();
    assert_eq!(
        (r.unique, r.foreign, r.lost, r.duplicated),
        (1, 1, 0, 0),
        "{r:?}"
    );
}

#[test]
fn lost_tail_does_not_hang_and_is_counted() {
    let (addr, _rx, h) = server_once();
    let (id, size) = (7u32, 18usize);
    let s = session(addr, size, id);
    for seq in 0..5 {
        send_seq(&s, id, seq, size);
    }
    // The sender claims 10: the last 5 "were lost on the way".
    let r = s.finish(10).unwrap();
    h.join().unwrap().unwrap();
    assert_eq!((r.unique, r.lost, r.received), (5, 5, 5), "{r:?}");
}

#[test]
fn a_sender_that_claims_fewer_sees_beyond() {
    let (addr, _rx, h) = server_once();
    let (id, size) = (3u32, 32usize);
    let s = session(addr, size, id);
    for seq in 0..6 {
        send_seq(&s, id, seq, size);
    }
    let r = s.finish(4).unwrap();
    h.join().unwrap().unwrap();
    assert_eq!((r.unique, r.beyond, r.lost), (6, 2, 0), "{r:?}");
}

#[test]
fn bad_sizes_and_options_are_rejected_clearly() {
    // Checked before connecting: nothing listens on port 9.
    let nowhere: SocketAddr = "127.0.0.1:9".parse().unwrap();
    for size in [0usize, MAX_DATAGRAM + 1, 1 << 20] {
        let opts = UdpOpts {
            size,
            datagrams: Some(1),
            ..UdpOpts::default()
        };
        let e = udp_send(nowhere, &opts).unwrap_err().to_string();
        assert_eq!(e, format!("datagram size {size} out of range 1..=65507"));
        let e = UdpSession::connect(nowhere, size, 1, None, Some(1))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("out of range 1..=65507"), "{e}");
    }
    let no_limit = UdpOpts {
        duration: None,
        datagrams: None,
        ..UdpOpts::default()
    };
    let e = udp_send(nowhere, &no_limit).unwrap_err().to_string();
    assert!(e.contains("needs a duration or a datagram count"), "{e}");
    let zero_rate = UdpOpts {
        rate: Some(Rate::DatagramsPerSec(0.0)),
        ..UdpOpts::default()
    };
    assert!(udp_send(nowhere, &zero_rate).is_err());

    // A raw hello with a bad size: the server refuses it and keeps serving.
    let (addr, rx, h) = server_once();
    let mut c = TcpStream::connect(addr).unwrap();
    let mut hello = Hello::Udp {
        size: 100,
        test_id: 1,
        duration_ms: 0,
        max_datagrams: 0,
    }
    .encode();
    hello[12..16].copy_from_slice(&70_000u32.to_le_bytes());
    c.write_all(&hello).unwrap();
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest); // closed without a ready line
    assert!(rest.is_empty());
    match rx.recv().unwrap() {
        ServerEvent::Error { message, .. } => assert!(
            message.contains("datagram size 70000 out of range 1..=65507"),
            "{message}"
        ),
        e => panic!("unexpected {e:?}"),
    }
    let out = udp_send(
        addr,
        &UdpOpts {
            size: 512,
            duration: None,
            datagrams: Some(10),
            rate: Some(Rate::DatagramsPerSec(1000.0)),
            test_id: None,
            burst: None,
        },
    )
    .unwrap();
    h.join().unwrap().unwrap();
    assert_consistent(&out.receiver, 10, 512);
    assert!(matches!(rx.recv().unwrap(), ServerEvent::Udp(_)));
}

/// A listener whose one connection is served by [`serve_udp_test`] with `limits`.
fn receiver_with(limits: UdpLimits) -> (SocketAddr, JoinHandle<Result<UdpReport, UdpRecvError>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let h = thread::spawn(move || {
        let (mut c, _) = l.accept().unwrap();
        serve_udp_test(&mut c, &limits)
    });
    (addr, h)
}

fn short_limits() -> UdpLimits {
    UdpLimits {
        idle: Duration::from_millis(300),
        stop_grace: Duration::from_millis(200),
        drain_quiet: Duration::from_millis(50),
        drain_max: Duration::from_millis(500),
    }
}

#[test]
fn receiver_without_a_stop_times_out_idle() {
    let (addr, h) = receiver_with(short_limits());
    let (id, size) = (11u32, 1472usize);
    let s = session(addr, size, id);
    for seq in 0..3 {
        send_seq(&s, id, seq, size);
    }
    // No stop: the receiver gives up after 300 ms of silence, with what it counted.
    match h.join().unwrap() {
        Err(UdpRecvError::Idle(d, partial)) => {
            assert_eq!(d, Duration::from_millis(300));
            assert_eq!((partial.unique, partial.sent, partial.lost), (3, 0, 0));
        }
        r => panic!("unexpected {r:?}"),
    }
    // The sender then gets an error, not a hang.
    let e = s.finish_within(3, Duration::from_secs(5)).unwrap_err();
    assert!(format!("{e:#}").contains("report"), "{e:#}");
}

#[test]
fn receiver_without_a_stop_times_out_past_the_planned_duration() {
    let (addr, h) = receiver_with(UdpLimits {
        idle: Duration::from_secs(30),
        ..short_limits()
    });
    let (id, size) = (12u32, 64usize);
    // Planned 100 ms; datagrams keep coming (so it is never idle) but the stop never does.
    let s = UdpSession::connect(addr, size, id, Some(Duration::from_millis(100)), None).unwrap();
    let mut seq = 0;
    while !h.is_finished() && seq < 1000 {
        send_seq(&s, id, seq, size);
        seq += 1;
        thread::sleep(Duration::from_millis(10));
    }
    match h.join().unwrap() {
        Err(UdpRecvError::Overdue(d, partial)) => {
            assert_eq!(d, Duration::from_millis(200));
            assert!(partial.unique > 0 && partial.unique <= seq, "{partial:?}");
        }
        r => panic!("unexpected {r:?}"),
    }
}

#[test]
fn receiver_notices_a_closed_control_connection() {
    let (addr, h) = receiver_with(UdpLimits {
        idle: Duration::from_secs(30),
        ..short_limits()
    });
    let (id, size) = (13u32, 200usize);
    let s = session(addr, size, id);
    send_seq(&s, id, 0, size);
    send_seq(&s, id, 1, size);
    thread::sleep(Duration::from_millis(50));
    drop(s);
    match h.join().unwrap() {
        Err(UdpRecvError::ControlClosed(partial)) => assert_eq!(partial.unique, 2),
        r => panic!("unexpected {r:?}"),
    }
}

#[test]
fn sender_gives_up_on_a_receiver_that_never_reports() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let fake = thread::spawn(move || {
        let (mut c, _) = l.accept().unwrap();
        let mut h = [0u8; 32];
        c.read_exact(&mut h).unwrap();
        let u = UdpSocket::bind("127.0.0.1:0").unwrap();
        let ready = UdpReady {
            port: u.local_addr().unwrap().port(),
            rcvbuf: 0,
        };
        writeln!(c, "{}", serde_json::to_string(&ready).unwrap()).unwrap();
        // Hold the connection open, never report.
        let _ = done_rx.recv();
    });
    let s = session(addr, 100, 1);
    send_seq(&s, 1, 0, 100);
    let e = s.finish_within(1, Duration::from_millis(300)).unwrap_err();
    assert!(format!("{e:#}").contains("waiting for the report"), "{e:#}");
    done_tx.send(()).unwrap();
    fake.join().unwrap();
}

#[test]
fn a_stream_hello_is_not_a_udp_test() {
    let (addr, h) = receiver_with(short_limits());
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(
        &Hello::Stream {
            msg_size: 1,
            duration_ms: 0,
            max_bytes: 0,
        }
        .encode(),
    )
    .unwrap();
    assert!(matches!(h.join().unwrap(), Err(UdpRecvError::NotUdp(_))));
}
