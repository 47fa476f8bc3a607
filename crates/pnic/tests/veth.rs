//! Root tests on a throwaway veth pair: the Pnic sits on `IF_A` in namespace `a`, the remote
//! host is namespace `b` with a plain raw socket on `IF_B`.

mod common;

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use common::*;
use pvnet_pnic::{Buf, Pnic, PnicConfig, PnicError, RxFrame, VirtioNetHdr};
use pvnet_wire::vnet::{F_NEEDS_CSUM, GSO_NONE, GSO_TCPV4};

fn open_a(bed: &Bed, frame_nr: u32) -> Pnic {
    open_a_slots(bed, frame_nr, pvnet_pnic::DEFAULT_FRAME_SIZE)
}

fn open_a_slots(bed: &Bed, frame_nr: u32, frame_size: u32) -> Pnic {
    in_ns(&bed.a.0, || {
        Pnic::open(&PnicConfig {
            frame_nr,
            frame_size,
            ..PnicConfig::new(IF_A)
        })
        .expect("open pnic")
    })
}

/// Sets the MTU of both ends of the veth.
fn set_mtu(bed: &Bed, mtu: u32) {
    let mtu = mtu.to_string();
    run_in(&bed.b.0, &["link", "set", IF_B, "mtu", &mtu]);
    run_in(&bed.a.0, &["link", "set", IF_A, "mtu", &mtu]);
}

fn peer(bed: &Bed, vnet: bool) -> RawSock {
    in_ns(&bed.b.0, || RawSock::open(IF_B, vnet))
}

/// A port on the peer's end (a small ring), to send GSO frames from with their vnet header.
fn peer_port(bed: &Bed) -> Pnic {
    in_ns(&bed.b.0, || {
        Pnic::open(&PnicConfig {
            frame_nr: 32,
            ..PnicConfig::new(IF_B)
        })
        .expect("open the peer's port")
    })
}

/// Waits until the rx fd is readable (or the timeout passes).
fn wait_rx(p: &Pnic, ms: i32) -> bool {
    let mut pfd = libc::pollfd {
        fd: p.rx_fd().as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut pfd, 1, ms) > 0 }
}

/// Polls until `pick` returned `want` values or `ms` passed; returns them.
fn poll_until<T>(
    p: &mut Pnic,
    want: usize,
    ms: u64,
    mut pick: impl FnMut(RxFrame<'_>) -> Option<T>,
) -> Vec<T> {
    let end = Instant::now() + Duration::from_millis(ms);
    let mut out = Vec::new();
    while out.len() < want && Instant::now() < end {
        wait_rx(p, 20);
        p.poll(64, |f| out.extend(pick(f)));
    }
    out
}

/// Polls until `want` frames matched `keep` or `ms` passed; returns the kept frames' copies.
fn collect(p: &mut Pnic, want: usize, ms: u64, keep: impl Fn(&[u8]) -> bool) -> Vec<Vec<u8>> {
    poll_until(p, want, ms, |f| keep(f.data()).then(|| f.data().to_vec()))
}

/// Sends test frames `seqs` of `len` bytes from the peer.
fn send_test(s: &RawSock, seqs: std::ops::Range<u32>, len: usize) {
    for i in seqs {
        s.send(&test_frame(MAC_A, MAC_B, i, len)).unwrap();
    }
}

/// Polls until `want` test frames came (or `ms` passed); returns their sequence numbers.
fn collect_seqs(p: &mut Pnic, want: usize, ms: u64) -> Vec<u32> {
    poll_until(p, want, ms, |f| test_seq(f.data()))
}

/// Polls until `want` test frames were taken (or 2 s passed); returns them as taken.
fn take_test_frames(p: &mut Pnic, want: usize) -> Vec<Buf> {
    poll_until(p, want, 2000, |f| {
        test_seq(f.data()).is_some().then(|| f.take())
    })
}

#[test]
fn open_errors() {
    if !is_root() {
        return;
    }
    let bed = Bed::new();
    in_ns(&bed.a.0, || {
        // The peer's interface is not in this namespace.
        let e = Pnic::open(&PnicConfig::new(IF_B)).unwrap_err();
        assert!(
            matches!(e, PnicError::NoSuchInterface(ref n) if n == IF_B),
            "{e}"
        );
        // A slot too small to be useful.
        let e = Pnic::open(&PnicConfig {
            frame_size: 64,
            ..PnicConfig::new(IF_A)
        })
        .unwrap_err();
        assert!(matches!(e, PnicError::InvalidConfig(_)), "{e}");
    });
    let p = open_a(&bed, 9);
    assert_eq!(
        p.frame_nr(),
        32,
        "rounded up to a whole block: 32 slots in 13 pages"
    );
    assert_eq!(p.frame_size(), pvnet_pnic::DEFAULT_FRAME_SIZE);
}

/// (a) Crafted frames from the peer arrive byte-exact, in order, and the budget is respected.
#[test]
fn raw_frames_in_order_with_budget() {
    if !is_root() {
        return;
    }
    let bed = Bed::new();
    let mut p = open_a(&bed, 4096);
    let s = peer(&bed, false);
    assert!(!p.rx_ready(), "nothing received yet");
    let sent: Vec<Vec<u8>> = (0..100u32)
        .map(|i| test_frame(MAC_A, MAC_B, i, 60 + (i as usize * 37) % 1455))
        .collect();
    for f in &sent {
        s.send(f).unwrap();
    }
    // Let the softirqs deliver everything into the ring.
    std::thread::sleep(Duration::from_millis(100));
    assert!(wait_rx(&p, 0), "rx fd must be readable");
    assert!(p.rx_ready(), "the ring shows a waiting frame");
    assert!(p.rx_ready(), "looking does not take it");
    let mut got = Vec::new();
    let mut polls = 0;
    loop {
        let n = p.poll(16, |f| {
            assert!(!f.truncated);
            assert_eq!(f.wire_len as usize, f.data().len());
            got.push(f.data().to_vec());
        });
        polls += 1;
        assert!(n <= 16);
        if n < 16 {
            break;
        }
    }
    assert_eq!(got.len(), 100, "all frames and nothing else");
    assert_eq!(got, sent, "byte-exact and in order");
    assert_eq!(polls, 7);
    assert_eq!(p.poll(16, |_| panic!("ring must be empty")), 0);
    assert!(!wait_rx(&p, 0), "rx fd not readable once drained");
    assert!(!p.rx_ready(), "nor does the ring show a frame");
    let st = p.stats();
    assert_eq!(st.rx_frames, 100);
    assert_eq!(
        st.rx_bytes,
        sent.iter().map(|f| f.len() as u64).sum::<u64>()
    );
    assert_eq!((st.rx_truncated, st.rx_bad, st.tp_drops), (0, 0, 0));
    assert_eq!(st.tp_packets, 100);
}

/// Frames longer than a slot arrive truncated and are flagged; the vnet header is intact. The
/// longest frame of a 1500-byte MTU with a VLAN tag (1518 bytes) still fits a default slot.
#[test]
fn oversized_frame_is_truncated() {
    if !is_root() {
        return;
    }
    let bed = Bed::new();
    set_mtu(&bed, 4000);
    let mut p = open_a(&bed, 64);
    let s = peer(&bed, false);
    let full = test_frame(MAC_A, MAC_B, 6, 1518);
    let big = test_frame(MAC_A, MAC_B, 7, 3000);
    s.send(&full).unwrap();
    s.send(&big).unwrap();
    let mut seen = Vec::new();
    let end = Instant::now() + Duration::from_secs(2);
    while seen.len() < 2 && Instant::now() < end {
        wait_rx(&p, 20);
        p.poll(8, |f| {
            assert_eq!(f.vnet, VirtioNetHdr::default());
            seen.push((f.wire_len, f.truncated, f.data().to_vec()));
        });
    }
    assert_eq!(seen.len(), 2);
    assert_eq!((seen[0].0, seen[0].1), (1518, false));
    assert_eq!(seen[0].2, full);
    let (wire_len, truncated, data) = &seen[1];
    assert!(*truncated);
    assert_eq!(*wire_len, 3000);
    assert!(data.len() < pvnet_pnic::DEFAULT_FRAME_SIZE as usize);
    assert_eq!(data[..], big[..data.len()]);
    assert_eq!(p.stats().rx_truncated, 1);
}

fn run_in(ns: &str, args: &[&str]) {
    let mut a = vec!["-n", ns];
    a.extend_from_slice(args);
    let st = std::process::Command::new("ip").args(&a).status().unwrap();
    assert!(st.success());
}

/// The link going down leaves `ENETDOWN` on the receive socket, and poll(2) reports it ready
/// until someone reads the error: a ring consumer that never reads the socket would never
/// sleep again. `take_socket_errors` reads it once, counts it, and poll sleeps again; frames
/// sent once the link is back up arrive.
#[test]
fn a_link_that_went_down_leaves_one_error_to_take() {
    if !is_root() {
        return;
    }
    let bed = Bed::new();
    let mut p = open_a(&bed, 256);
    let s = peer(&bed, false);
    assert!(!wait_rx(&p, 0), "nothing to report before the link moves");
    assert_eq!(p.take_socket_errors(), 0, "no error yet");
    run_in(&bed.a.0, &["link", "set", IF_A, "down"]);
    run_in(&bed.a.0, &["link", "set", IF_A, "up"]);
    assert!(wait_rx(&p, 0), "the error makes the socket ready");
    assert!(wait_rx(&p, 0), "and keeps it ready while nobody reads it");
    assert!(!p.rx_ready(), "though the ring holds no frame");
    assert!(p.take_socket_errors() >= 1, "the receive socket had one");
    let st = p.stats();
    assert!(st.socket_errors >= 1, "{st:?}");
    assert_eq!(st.last_socket_errno, libc::ENETDOWN, "{st:?}");
    assert!(!wait_rx(&p, 0), "taken: poll sleeps again");
    assert_eq!(p.take_socket_errors(), 0, "taken once");
    // The kernel hooks the socket back when the link comes up: frames still arrive.
    let end = Instant::now() + Duration::from_secs(5);
    let mut got = Vec::new();
    while got.is_empty() && Instant::now() < end {
        send_test(&s, 0..1, 100);
        got = collect_seqs(&mut p, 1, 100);
    }
    assert_eq!(got, vec![0], "a frame after the link came back");
}

/// (b) A TCP SYN from the peer's own stack arrives with its checksum state.
#[test]
fn tcp_syn_from_peer_stack() {
    if !is_root() {
        return;
    }
    let bed = Bed::new();
    let mut p = open_a(&bed, 256);
    // Namespace a owns 10.77.0.2 and answers ARP, then RSTs the SYN (we do not see our
    // side's answers: PACKET_IGNORE_OUTGOING).
    let r = in_ns(&bed.b.0, || {
        std::net::TcpStream::connect_timeout(
            &"10.77.0.2:7777".parse().unwrap(),
            Duration::from_secs(2),
        )
    });
    assert!(r.is_err(), "nobody listens on 7777");
    let mut syn = None;
    let mut arp = 0;
    let mut others = Vec::new();
    let end = Instant::now() + Duration::from_secs(2);
    while syn.is_none() && Instant::now() < end {
        wait_rx(&p, 20);
        p.poll(64, |f| {
            assert_ne!(
                &f.data()[6..12],
                &MAC_A,
                "own transmissions must not come back"
            );
            match ethertype(f.data()) {
                0x0806 => arp += 1,
                0x0800 if f.data()[23] == 6 => {
                    syn = Some((f.data().to_vec(), f.vnet, f.csum_not_ready, f.csum_valid))
                }
                t => others.push(t),
            }
        });
    }
    let (d, vnet, not_ready, valid) = syn.expect("TCP SYN seen");
    eprintln!(
        "SYN: {} bytes, arp frames {arp}, other ethertypes {others:x?}, csum_not_ready {not_ready}, \
         csum_valid {valid}, vnet {vnet:?}",
        d.len()
    );
    assert!(arp >= 1, "the ARP request precedes the SYN");
    assert_eq!(&d[30..34], &IP_A);
    assert_eq!(u16::from_be_bytes([d[36], d[37]]), 7777);
    assert_eq!(d[47] & 0x02, 0x02, "SYN flag");
    if not_ready {
        // Partial checksum: the vnet header says where to complete it.
        assert!(vnet.flags & F_NEEDS_CSUM != 0);
        assert_eq!((vnet.csum_start, vnet.csum_offset), (34, 16));
    } else {
        assert!(tcp_checksums_ok(&d));
    }
}

/// (c) + (d) Frames sent with `send`/`send_batch` arrive byte-exact at the peer, and none of
/// them is read back by `poll`.
#[test]
fn send_arrives_and_is_not_read_back() {
    if !is_root() {
        return;
    }
    let bed = Bed::new();
    let mut p = open_a(&bed, 256);
    let s = peer(&bed, false);
    let frames: Vec<Vec<u8>> = (0..60u32)
        .map(|i| test_frame(MAC_B, MAC_A, i, 60 + (i as usize * 97) % 1455))
        .collect();
    let none = VirtioNetHdr::default();
    // 20 single sends, each frame split in three pieces.
    for f in &frames[..20] {
        let (x, rest) = f.split_at(7);
        let (y, z) = rest.split_at(rest.len() / 2);
        p.send(&none, &[x, y, z]).unwrap();
    }
    // One frame in 40 pieces (heap iovec path).
    let f = &frames[20];
    let pieces: Vec<&[u8]> = f.chunks(f.len().div_ceil(40)).collect();
    assert!(pieces.len() > 32);
    p.send(&none, &pieces).unwrap();
    // 39 frames in batches of 13.
    for chunk in frames[21..].chunks(13) {
        let parts: Vec<[&[u8]; 2]> = chunk.iter().map(|f| [&f[..20], &f[20..]]).collect();
        let batch: Vec<(VirtioNetHdr, &[&[u8]])> = parts.iter().map(|p| (none, &p[..])).collect();
        let mut at = 0;
        while at < batch.len() {
            at += p.send_batch(&batch[at..]).unwrap();
        }
    }
    let mut got = Vec::new();
    while got.len() < frames.len() {
        match s.recv(2000) {
            Some(f) if test_seq(&f).is_some() => got.push(f),
            Some(_) => {}
            None => break,
        }
    }
    assert_eq!(got.len(), frames.len());
    assert_eq!(got, frames, "byte-exact and in order");
    // (d) nothing of ours comes back.
    std::thread::sleep(Duration::from_millis(50));
    let mut back = 0;
    p.poll(1024, |f| {
        eprintln!(
            "unexpected frame: {:x?}",
            &f.data()[..f.data().len().min(34)]
        );
        back += 1;
    });
    assert_eq!(back, 0, "own transmissions must not be read back");
    let st = p.stats();
    assert_eq!(st.tx_frames, 60);
    assert_eq!(
        st.tx_bytes,
        frames.iter().map(|f| f.len() as u64).sum::<u64>()
    );
    assert_eq!((st.tx_errors, st.tx_would_block, st.rx_frames), (0, 0, 0));

    // Errors are distinct and counted: an over-MTU non-GSO frame is refused.
    let huge = test_frame(MAC_B, MAC_A, 999, 3000);
    let e = p.send(&none, &[&huge]).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EMSGSIZE), "{e}");
    assert_eq!(p.stats().tx_errors, 1);

    // Back-pressure is distinct: with the peer down, veth drops at the device and the kernel
    // reports ENOBUFS, surfaced as DeviceBusy. Once the kernel's link watch has seen the lost
    // carrier (asynchronously, at most once a second for all links) it swaps in the noop
    // qdisc, which drops without an error: then the send counts as sent.
    run_in(&bed.b.0, &["link", "set", IF_B, "down"]);
    let f = test_frame(MAC_B, MAC_A, 1000, 60);
    let batch = [(none, &[&f[..]][..])];
    let (mut blocked, mut sent) = (0, 0);
    for r in [
        p.send(&none, &[&f]),
        p.send_batch(&batch).map(|n| assert_eq!(n, 1)),
    ] {
        match r {
            Err(PnicError::DeviceBusy) => blocked += 1,
            Ok(()) => sent += 1,
            Err(e) => panic!("peer down: {e}"),
        }
    }
    eprintln!("peer down: {blocked} sends refused with ENOBUFS, {sent} dropped silently");
    let st = p.stats();
    assert_eq!(
        (st.tx_would_block, st.tx_errors, st.tx_frames),
        (blocked, 1, 60 + sent)
    );
}

fn gso_send(p: &Pnic, seq: u32) -> Vec<u8> {
    let payload: Vec<u8> = (0..3000u32).map(|i| (i * 7 + 3) as u8).collect();
    let hdr = tcp_headers(seq, payload.len());
    let vnet = VirtioNetHdr {
        flags: F_NEEDS_CSUM,
        gso_type: GSO_TCPV4,
        hdr_len: 54,
        gso_size: 1000,
        csum_start: 34,
        csum_offset: 16,
    };
    p.send(&vnet, &[&hdr, &payload[..1500], &payload[1500..]])
        .unwrap();
    payload
}

/// Collects the TCP frames to port 5001 at the peer until 3000 payload bytes arrived.
fn gso_collect(s: &RawSock, vnet: bool) -> Vec<(Option<VirtioNetHdr>, Vec<u8>)> {
    let mut out = Vec::new();
    let mut bytes = 0;
    while bytes < 3000 {
        let Some(b) = s.recv(2000) else { break };
        let (v, f) = if vnet {
            (VirtioNetHdr::parse(&b), b[10..].to_vec())
        } else {
            (None, b)
        };
        if ethertype(&f) == 0x0800 && f[23] == 6 && f[36..38] == 5001u16.to_be_bytes() {
            bytes += f.len() - 54;
            out.push((v, f));
        }
    }
    out
}

/// (c) A GSO frame (3000 bytes, gso_size 1000, TCPV4, NEEDS_CSUM) sent through the pnic.
///
/// veth advertises TSO, so by default the kernel passes the GSO skb through unsegmented: the
/// peer sees one 3054-byte frame with the GSO metadata (visible with PACKET_VNET_HDR) and a
/// partial checksum, which its stack accepts as one GSO packet. With TSO and TX checksumming
/// off on the pnic's port (a "dumb" NIC), the kernel segments and checksums in software: the
/// peer sees three 1054-byte segments with valid IPv4 and TCP checksums.
#[test]
fn gso_frame_segmented_where_needed() {
    if !is_root() {
        return;
    }
    let bed = Bed::new();
    let mut p = open_a(&bed, 64);
    let s = peer(&bed, true);

    // Default offloads: one GSO frame.
    let payload = gso_send(&p, 1_000_000);
    let got = gso_collect(&s, true);
    eprintln!(
        "GSO, TSO on: {} frame(s) of {:?} bytes, vnet {:?}",
        got.len(),
        got.iter().map(|g| g.1.len()).collect::<Vec<_>>(),
        got.iter().map(|g| g.0).collect::<Vec<_>>()
    );
    let mut data = Vec::new();
    for (_, f) in &got {
        data.extend_from_slice(&f[54..]);
    }
    assert_eq!(data, payload);
    if got.len() == 1 {
        let v = got[0].0.unwrap();
        assert_eq!((v.gso_kind(), v.gso_size), (GSO_TCPV4, 1000));
        assert_eq!(got[0].1.len(), 3054);
    } else {
        assert_eq!(got.len(), 3);
    }

    // A port without TSO and checksum offload: software segmentation + checksums.
    const ETHTOOL_STXCSUM: u32 = 0x17;
    const ETHTOOL_STSO: u32 = 0x1f;
    in_ns(&bed.a.0, || {
        ethtool_set(IF_A, ETHTOOL_STSO, 0);
        ethtool_set(IF_A, ETHTOOL_STXCSUM, 0);
    });
    let payload = gso_send(&p, 2_000_000);
    let got = gso_collect(&s, true);
    assert_eq!(got.len(), 3, "three MTU-sized segments");
    let mut data = Vec::new();
    for (i, (v, f)) in got.iter().enumerate() {
        assert_eq!(f.len(), 1054);
        assert!(tcp_checksums_ok(f), "segment {i} checksums");
        let seq = u32::from_be_bytes(f[38..42].try_into().unwrap());
        assert_eq!(seq, 2_000_000 + 1000 * i as u32);
        assert_eq!(v.unwrap().gso_type, GSO_NONE);
        data.extend_from_slice(&f[54..]);
    }
    assert_eq!(data, payload);
    let st = p.stats();
    assert_eq!((st.tx_frames, st.tx_bytes, st.tx_errors), (2, 6108, 0));
}

/// (e) A tiny ring overflows under a burst: the kernel's drops show in stats, nothing
/// panics, and the ring works afterwards.
#[test]
fn small_ring_overflows_and_recovers() {
    if !is_root() {
        return;
    }
    let bed = Bed::new();
    // 2 KiB slots: one block is one page of 2, so the ring is exactly 8 slots.
    let mut p = open_a_slots(&bed, 8, 2048);
    assert_eq!(p.frame_nr(), 8);
    let s = peer(&bed, false);
    for i in 0..500u32 {
        s.send(&test_frame(MAC_A, MAC_B, i, 100)).unwrap();
    }
    std::thread::sleep(Duration::from_millis(100));
    let mut seqs = Vec::new();
    loop {
        let n = p.poll(4, |f| seqs.push(test_seq(f.data()).expect("test frame")));
        if n == 0 {
            break;
        }
    }
    let st = p.stats();
    eprintln!("overflow: polled {} frames, stats {st:?}", seqs.len());
    assert_eq!(
        seqs,
        (0..8).collect::<Vec<_>>(),
        "the first 8 fill the ring"
    );
    assert!(st.tp_drops > 0);
    assert_eq!(st.tp_packets, st.rx_frames + st.tp_drops);
    assert!(st.tp_packets <= 500);
    // Reading PACKET_STATISTICS resets the kernel counters; ours accumulate.
    let st2 = p.stats();
    assert_eq!((st2.tp_packets, st2.tp_drops), (st.tp_packets, st.tp_drops));
    // The ring keeps working, in order, past the wrap.
    for round in 0..5u32 {
        for i in 0..6u32 {
            s.send(&test_frame(MAC_A, MAC_B, 1000 + round * 10 + i, 80))
                .unwrap();
        }
        let got = collect(&mut p, 6, 2000, |d| test_seq(d).is_some());
        let got: Vec<u32> = got.iter().map(|d| test_seq(d).unwrap()).collect();
        assert_eq!(
            got,
            (0..6).map(|i| 1000 + round * 10 + i).collect::<Vec<_>>()
        );
    }
    let st3 = p.stats();
    assert_eq!(st3.tp_drops, st.tp_drops);
}

/// Rough numbers (printed): cost of draining a full ring, and frames/s polled while a peer
/// thread streams 64-byte frames. Asserted: every test frame the peer sent was polled once,
/// in order, or counted as a kernel drop.
#[test]
fn measure_poll_rate() {
    if !is_root() {
        return;
    }
    let bed = Bed::new();
    let mut p = open_a(&bed, 4096);
    let s = peer(&bed, false);

    // Drain a full ring, three times (the first pass over a fresh mapping is slower).
    let n_fill = p.frame_nr();
    for round in 0..3 {
        let drops0 = p.stats().tp_drops;
        for i in 0..n_fill {
            s.send(&test_frame(MAC_A, MAC_B, i, 60)).unwrap();
        }
        std::thread::sleep(Duration::from_millis(100));
        let t = Instant::now();
        let mut got = 0usize;
        let mut seqs = Vec::with_capacity(n_fill as usize);
        loop {
            let n = p.poll(64, |f| seqs.extend(test_seq(f.data())));
            got += n;
            if n == 0 {
                break;
            }
        }
        let dt = t.elapsed();
        let drops = p.stats().tp_drops - drops0;
        eprintln!(
            "drain round {round}: {got} frames in {dt:?} = {:.1} ns/frame ({:.1} Mframes/s); \
             kernel drops {drops}",
            dt.as_nanos() as f64 / got.max(1) as f64,
            got as f64 / dt.as_secs_f64() / 1e6,
        );
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]) && seqs.iter().all(|&q| q < n_fill),
            "round {round}: test frames out of order, repeated or foreign"
        );
        assert!(
            seqs.len() as u64 + drops >= u64::from(n_fill),
            "round {round}: {} of {n_fill} polled and {drops} dropped: frames lost unaccounted",
            seqs.len()
        );
    }

    // Streaming: a sender thread in the peer namespace, the poller here.
    const N: u32 = 300_000;
    let drops0 = p.stats().tp_drops;
    let sender = std::thread::spawn(move || {
        let f = test_frame(MAC_A, MAC_B, 0, 60);
        let t = Instant::now();
        let mut sent = 0u32;
        for _ in 0..N {
            if s.send(&f).is_ok() {
                sent += 1;
            }
        }
        (sent, t.elapsed())
    });
    let t = Instant::now();
    let mut got = 0u64;
    let mut test_got = 0u64;
    let mut polls = 0u64;
    let mut idle = 0;
    while idle < 50 {
        if !wait_rx(&p, 10) {
            if sender.is_finished() {
                idle += 1;
            }
            continue;
        }
        let n = p.poll(64, |f| test_got += u64::from(test_seq(f.data()).is_some()));
        polls += 1;
        got += n as u64;
    }
    let (sent, sdt) = sender.join().unwrap();
    let dt = t.elapsed().saturating_sub(Duration::from_millis(500));
    let drops = p.stats().tp_drops - drops0;
    eprintln!(
        "stream: sender {sent} frames in {sdt:?} ({:.2} Mframes/s); polled {got} in ~{dt:?} \
         ({:.2} Mframes/s, {:.1} frames/poll); kernel drops {drops}",
        f64::from(sent) / sdt.as_secs_f64() / 1e6,
        got as f64 / dt.as_secs_f64() / 1e6,
        got as f64 / polls.max(1) as f64,
    );
    assert!(sent > 0, "the peer sent nothing");
    assert!(
        test_got <= u64::from(sent),
        "{test_got} polled of {sent} sent"
    );
    assert!(
        test_got + drops >= u64::from(sent),
        "{test_got} polled and {drops} dropped of {sent} sent: frames lost unaccounted"
    );
}

/// Slots sized for a larger MTU carry its largest frame whole.
#[test]
fn slots_sized_for_the_mtu_hold_its_largest_frame() {
    if !is_root() {
        return;
    }
    let bed = Bed::new();
    set_mtu(&bed, 4000);
    let mut p = open_a_slots(&bed, 64, pvnet_pnic::frame_size_for_mtu(4000));
    let s = peer(&bed, false);
    let full = test_frame(MAC_A, MAC_B, 9, 4014);
    s.send(&full).unwrap();
    let got = collect(&mut p, 1, 2000, |d| test_seq(d) == Some(9));
    assert_eq!(got, vec![full]);
    assert_eq!(p.stats().rx_truncated, 0);
}

/// Jumbo MTUs up to the most a veth takes: the largest untagged (MTU + 14) and VLAN-tagged
/// (MTU + 18) frames the kernel lets through arrive whole in slots sized by
/// `frame_size_for_mtu`.
#[test]
fn jumbo_slots_hold_tagged_and_untagged_full_frames() {
    if !is_root() {
        return;
    }
    let bed = Bed::new();
    for (k, mtu) in [9000u32, 16110, 65535].into_iter().enumerate() {
        set_mtu(&bed, mtu);
        let mut p = open_a_slots(&bed, 16, pvnet_pnic::frame_size_for_mtu(mtu));
        let s = peer(&bed, false);
        let seq = 100 + k as u32;
        let full = test_frame(MAC_A, MAC_B, seq, mtu as usize + 14);
        // The same with an 802.1Q tag (VLAN 5) in front of the test ethertype: 4 bytes more.
        let mut tagged = full[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
        tagged.extend_from_slice(&full[12..]);
        s.send(&full).unwrap();
        s.send(&tagged).unwrap();
        let (f2, t2) = (full.clone(), tagged.clone());
        let got = collect(&mut p, 2, 2000, move |d| {
            d.len() > 1000 && (d == f2 || d == t2)
        });
        assert_eq!(got.len(), 2, "MTU {mtu}");
        assert!(got[0] == full, "MTU {mtu}: untagged frame whole");
        // The receive path takes the tag out of the frame (`skb_vlan_untag`; TPACKET_V2 puts
        // it in `tp_vlan_tci`), so the tagged frame fills a slot no more than the untagged
        // one; either way its bytes are whole.
        assert!(
            got[1] == full || got[1] == tagged,
            "MTU {mtu}: tagged frame whole ({} bytes)",
            got[1].len()
        );
        assert_eq!(p.stats().rx_truncated, 0, "MTU {mtu}");
    }
}

/// Frames taken as leases stay in their slots, untouched by the kernel, until handed back;
/// past half the ring `take` copies instead; a lease in the kernel's way is reported; handed
/// back, the slots receive again, in order; a lease outlives the port.
#[test]
fn leased_slots_keep_their_frames_until_handed_back() {
    if !is_root() {
        return;
    }
    let bed = Bed::new();
    // 2 KiB slots: the ring is exactly 8 slots, at most 4 of them leased.
    let mut p = open_a_slots(&bed, 8, 2048);
    let s = peer(&bed, false);
    send_test(&s, 0..6, 100);
    let mut bufs = take_test_frames(&mut p, 6);
    let seqs: Vec<u32> = bufs.iter().map(|b| test_seq(b).unwrap()).collect();
    assert_eq!(seqs, (0..6).collect::<Vec<_>>());
    let leased: Vec<bool> = bufs.iter().map(|b| b.is_leased()).collect();
    assert_eq!(
        leased,
        [true, true, true, true, false, false],
        "cap: half the ring"
    );
    let st = p.stats();
    assert_eq!((st.rx_leased, st.rx_lease_copies), (4, 2), "{st:?}");
    assert_eq!((p.leases(), st.rx_leases_outstanding), (4, 4));
    let per_queue: Vec<u32> = p.queue_stats().iter().map(|q| q.leases).collect();
    assert_eq!(per_queue, [4], "the one queue holds them");
    // The newest frame's slot (5) was handed back; the next one (6) is the kernel's.
    assert!(!p.lease_in_the_way());

    // The kernel fills slots 6 and 7, then meets the lease on slot 0 and drops.
    send_test(&s, 100..105, 100);
    let got = collect_seqs(&mut p, 5, 300);
    assert_eq!(got, [100, 101], "two free slots before the first lease");
    assert!(p.stats().tp_drops >= 3);
    assert!(p.lease_in_the_way(), "the kernel's next slot is leased");
    // The leased frames were not overwritten, and a lease can be written (header fix-ups).
    for (i, b) in bufs.iter_mut().enumerate() {
        assert_eq!(test_seq(b), Some(i as u32));
        assert_eq!(b.len(), 100);
    }
    bufs[0][99] = 0xee;
    assert_eq!(bufs[0][99], 0xee);

    // Detached, a buffer keeps its bytes and its slot goes back.
    let mut first = bufs.remove(0);
    assert!(first.detach());
    assert_eq!((test_seq(&first), first[99]), (Some(0), 0xee));
    assert_eq!(p.leases(), 3);
    drop(bufs);
    assert_eq!(p.leases(), 0);
    assert_eq!(p.queue_stats()[0].leases, 0);
    assert!(!p.lease_in_the_way());
    send_test(&s, 200..206, 100);
    assert_eq!(
        collect_seqs(&mut p, 6, 2000),
        (200..206).collect::<Vec<_>>()
    );
    assert_eq!(p.stats().rx_leases_outstanding, 0);

    // A lease outlives the port: its bytes stay readable after the Pnic is closed.
    send_test(&s, 7..8, 200);
    let kept = take_test_frames(&mut p, 1).pop().expect("frame 7");
    assert!(kept.is_leased());
    drop(p);
    assert_eq!((test_seq(&kept), kept.len()), (Some(7), 200));
}

/// The oldest lease still out ages with every slot consumed after it and is reported as aging
/// once the kernel could reach its slot within a quarter of the ring; handed back, the age is
/// the next lease's, or none.
#[test]
fn lease_aging_follows_the_oldest_lease_still_out() {
    if !is_root() {
        return;
    }
    let bed = Bed::new();
    // 8 slots: a lease is aging when taken more than 6 frames ago.
    let mut p = open_a_slots(&bed, 8, 2048);
    let s = peer(&bed, false);
    assert!(!p.lease_aging(), "no lease out");
    send_test(&s, 0..1, 100);
    let first = take_test_frames(&mut p, 1);
    send_test(&s, 1..2, 100);
    let second = take_test_frames(&mut p, 1);
    send_test(&s, 2..6, 100);
    assert_eq!(collect_seqs(&mut p, 4, 2000), [2, 3, 4, 5]);
    assert!(!p.lease_aging(), "slot 0 taken 6 frames ago");
    send_test(&s, 6..7, 100);
    assert_eq!(collect_seqs(&mut p, 1, 2000), [6]);
    assert!(p.lease_aging(), "slot 0 taken 7 frames ago");
    drop(first);
    assert!(
        !p.lease_aging(),
        "the oldest is now slot 1, taken 6 frames ago"
    );
    send_test(&s, 7..8, 100);
    assert_eq!(collect_seqs(&mut p, 1, 2000), [7]);
    assert!(p.lease_aging(), "slot 1 taken 7 frames ago");
    drop(second);
    assert!(!p.lease_aging(), "none out");
    // The ring receives on, past the slots handed back.
    send_test(&s, 8..16, 100);
    assert_eq!(collect_seqs(&mut p, 8, 2000), (8..16).collect::<Vec<_>>());
    assert!(!p.lease_aging());
}

/// Sends, from a second port on the peer's end, one TCP GSO frame of `frame_len` bytes (54
/// bytes of headers, a partial checksum, `gso_size` 1448): veth advertises TSO, so the frame
/// crosses whole, as a coalesced frame does when GRO on the port built it. Returns it.
fn send_gso_from_peer(peer: &Pnic, seq: u32, frame_len: usize) -> Vec<u8> {
    let payload: Vec<u8> = (0..frame_len - 54)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[2])
        .collect();
    let mut hdr = tcp_headers(seq, payload.len());
    // Toward the pnic's side: swap the MAC addresses (the checksum seed does not depend on
    // the order of the IP addresses).
    let (dst, src) = (hdr[0..6].to_vec(), hdr[6..12].to_vec());
    hdr[0..6].copy_from_slice(&src);
    hdr[6..12].copy_from_slice(&dst);
    let vnet = VirtioNetHdr {
        flags: F_NEEDS_CSUM,
        gso_type: GSO_TCPV4,
        hdr_len: 54,
        gso_size: 1448,
        csum_start: 34,
        csum_offset: 16,
    };
    peer.send(&vnet, &[&hdr, &payload[..30_000], &payload[30_000..]])
        .expect("peer sends the GSO frame");
    let mut f = hdr;
    f.extend_from_slice(&payload);
    f
}

/// Slots sized for port GRO hold 64 KiB frames whole: the largest frame GRO builds at the
/// standard MSS (45 segments, 65,226 bytes) and the largest a capped `gro_max_size` allows,
/// each in one slot with its GSO metadata; in the default slot the same frame is truncated,
/// and counted.
#[test]
fn gro_slots_hold_64_kib_frames_whole() {
    if !is_root() {
        eprintln!("skipping gro_slots_hold_64_kib_frames_whole: needs root (namespaces, veth)");
        return;
    }
    let bed = Bed::new();
    let size = pvnet_pnic::gro_frame_size_for_mtu(1500);
    assert_eq!(size, pvnet_pnic::GRO_FRAME_SIZE);
    let mut p = open_a_slots(&bed, 8, size);
    let peer = peer_port(&bed);
    // The longest frame within the cap: an IP length of gro_max_size - 1.
    let longest = 14 + pvnet_pnic::gro_max_size_for(size) as usize - 1;
    assert_eq!(longest, pvnet_pnic::max_frame_in(size) as usize - 1);
    for (seq, len) in [(1u32, 65_226usize), (2, longest)] {
        let sent = send_gso_from_peer(&peer, seq, len);
        let got = poll_until(&mut p, 1, 2000, |f| {
            (f.data().len() > 1000).then(|| (f.vnet, f.truncated, f.wire_len, f.data().to_vec()))
        });
        assert_eq!(got.len(), 1, "{len}-byte frame arrived");
        let (vnet, truncated, wire_len, data) = &got[0];
        assert!(!truncated && *wire_len as usize == len, "{len}: whole");
        assert!(*data == sent, "{len}: bytes intact");
        assert_eq!((vnet.gso_kind(), vnet.gso_size), (GSO_TCPV4, 1448));
        assert!(vnet.needs_csum());
        assert_eq!((vnet.csum_start, vnet.csum_offset), (34, 16));
    }
    let st = p.stats();
    assert_eq!((st.rx_truncated, st.rx_gso), (0, 2));
    assert_eq!(st.rx_max_frame as usize, longest);

    // The default slot cuts the same frame, and says so.
    drop(p);
    let mut small = open_a(&bed, 32);
    send_gso_from_peer(&peer, 3, 65_226);
    let got = poll_until(&mut small, 1, 2000, |f| {
        (f.wire_len > 1000).then(|| (f.truncated, f.data().len()))
    });
    assert_eq!(got.len(), 1);
    assert!(got[0].0 && got[0].1 < 1664, "{got:?}");
    assert_eq!(small.stats().rx_truncated, 1);
}

/// The port-GRO V3 ring of `blocks` blocks on side A.
fn open_a_v3(bed: &Bed, blocks: u32) -> Pnic {
    in_ns(&bed.a.0, || {
        Pnic::open(&PnicConfig {
            frame_size: pvnet_pnic::GRO_FRAME_SIZE,
            v3: Some(pvnet_pnic::BlockGeometry {
                block_nr: blocks,
                ..pvnet_pnic::gro_v3_blocks()
            }),
            ..PnicConfig::new(IF_A)
        })
        .expect("open pnic (v3)")
    })
}

#[test]
fn v3_blocks_hold_64_kib_gso_frames_whole_and_leases_hold_their_block() {
    if !is_root() {
        eprintln!(
            "skipping v3_blocks_hold_64_kib_gso_frames_whole...: needs root (namespaces, veth)"
        );
        return;
    }
    let bed = Bed::new();
    let mut p = open_a_v3(&bed, 4);
    assert_eq!(p.blocks().map(|b| b.block_nr), Some(4));
    let peer = peer_port(&bed);
    let size = pvnet_pnic::GRO_FRAME_SIZE;
    let longest = 14 + pvnet_pnic::gro_max_size_for(size) as usize - 1;
    // Two whole 64 KiB GSO frames, the vnet header read from before each frame's data;
    // the first kept as a lease.
    let mut kept = Vec::new();
    let mut sent = Vec::new();
    for (seq, len) in [(1u32, 65_226usize), (2, longest)] {
        sent.push(send_gso_from_peer(&peer, seq, len));
    }
    let got = poll_until(&mut p, 2, 3000, |f| {
        (f.data().len() > 1000).then(|| {
            let meta = (f.vnet, f.truncated, f.wire_len, f.data().to_vec());
            if f.wire_len == 65_226 {
                kept.push(f.take());
            }
            meta
        })
    });
    assert_eq!(got.len(), 2, "both frames arrived");
    for ((vnet, truncated, wire_len, data), want) in got.iter().zip(&sent) {
        assert!(!truncated && *wire_len as usize == want.len(), "whole");
        assert!(data == want, "{}: bytes intact", want.len());
        assert_eq!((vnet.gso_kind(), vnet.gso_size), (GSO_TCPV4, 1448));
        assert!(vnet.needs_csum());
        assert_eq!((vnet.csum_start, vnet.csum_offset), (34, 16));
    }
    assert_eq!(kept.len(), 1);
    assert!(
        kept[0].is_leased() && *kept[0] == sent[0][..],
        "the lease reads the frame"
    );
    let st = p.stats();
    assert_eq!((st.rx_truncated, st.rx_gso, st.rx_bad_blocks), (0, 2, 0));
    assert_eq!(st.rx_max_frame as usize, longest);
    assert!(st.rx_blocks >= 1, "{st:?}");
    // Both frames may share a block (the retire timer fired after the second) or not; the
    // lease holds the first one's until it lets go.
    assert_eq!(
        (st.rx_leases_outstanding, st.rx_blocks_held),
        (1, 1),
        "{st:?}"
    );
    drop(kept);
    let st = p.stats();
    assert_eq!(
        (st.rx_leases_outstanding, st.rx_blocks_held),
        (0, 0),
        "{st:?}"
    );
    assert!(!p.lease_in_the_way());
    // The ring goes on: many more frames than 4 blocks hold, all read.
    for seq in 10..40u32 {
        send_gso_from_peer(&peer, seq, 65_226);
        let got = poll_until(&mut p, 1, 3000, |f| (f.wire_len > 1000).then_some(()));
        assert_eq!(got.len(), 1, "frame {seq}");
    }
    let st = p.stats();
    assert_eq!(
        (st.rx_bad_blocks, st.tp_drops, st.tp_ring_frozen),
        (0, 0, 0),
        "{st:?}"
    );
}

/// A V3 ring whose consumer keeps up but holds one old block: the kernel comes round to
/// the held block and stops the ring there (its freeze count moves, frames are dropped), and
/// the consumer, arriving at the same block, counts the stop once; given back, the ring flows
/// again and the count stays. A consumer that falls behind freezes the ring without a stop.
#[test]
fn a_v3_ring_that_comes_round_to_a_held_block_stops_there_and_counts_it() {
    if !is_root() {
        eprintln!("skipping a_v3_ring_that_comes_round_to_a_held_block...: needs root (veth)");
        return;
    }
    let bed = Bed::new();
    let mut p = open_a_v3(&bed, 4);
    let peer = peer_port(&bed);
    let big = |f: &RxFrame<'_>| f.data().len() > 1000;
    send_gso_from_peer(&peer, 1, 65_226);
    let kept = poll_until(&mut p, 1, 3000, |f| big(&f).then(|| f.take()));
    assert_eq!(kept.len(), 1, "the first frame, leased");
    // Four blocks of 256 KiB hold at most 16 such frames: 40, each read as it comes (the
    // retire timer hands over a block a millisecond after its last frame), lap the ring.
    let mut read = 0;
    for seq in 2..42u32 {
        send_gso_from_peer(&peer, seq, 65_226);
        read += poll_until(&mut p, 1, 30, |f| big(&f).then_some(())).len();
    }
    let st = p.stats();
    assert_eq!(st.rx_hold_stops, 1, "{st:?}");
    assert!(st.tp_ring_frozen >= 1 && st.tp_drops >= 1, "{st:?}");
    assert!(read < 40, "frames were dropped at the held block: {st:?}");
    assert!(p.lease_in_the_way());
    drop(kept);
    // Given back: the kernel thaws at the next frame and the ring flows again.
    for seq in 42..62u32 {
        send_gso_from_peer(&peer, seq, 65_226);
        let got = poll_until(&mut p, 1, 3000, |f| big(&f).then_some(()));
        assert_eq!(got.len(), 1, "frame {seq} after the hold let go");
    }
    let after = p.stats();
    assert_eq!(after.rx_hold_stops, 1, "{after:?}");
    assert_eq!(after.tp_drops, st.tp_drops, "{after:?}");
    // A consumer that falls behind freezes the ring too, at blocks it has not read: the
    // kernel's count moves, the hold stops do not.
    for seq in 62..102u32 {
        send_gso_from_peer(&peer, seq, 65_226);
        std::thread::sleep(Duration::from_millis(2));
    }
    let behind = poll_until(&mut p, 40, 200, |f| big(&f).then_some(())).len();
    let last = p.stats();
    assert!(behind < 40, "{last:?}");
    assert!(last.tp_ring_frozen > after.tp_ring_frozen, "{last:?}");
    assert_eq!(last.rx_hold_stops, 1, "{last:?}");
}

/// Nanoseconds since the Unix epoch now (`CLOCK_REALTIME`, the packet ring's clock).
fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// Each frame carries the time the kernel put it in the ring, on the wall clock, in order: in
/// a slot (V2) and in a block (V3).
#[test]
fn frames_carry_their_receive_time() {
    if !is_root() {
        eprintln!("skipping frames_carry_their_receive_time: needs root (namespaces, veth)");
        return;
    }
    for v3 in [false, true] {
        let bed = Bed::new();
        let mut p = if v3 {
            open_a_v3(&bed, 4)
        } else {
            open_a(&bed, 256)
        };
        let s = peer(&bed, false);
        let before = wall_ns();
        for i in 0..10u32 {
            s.send(&test_frame(MAC_A, MAC_B, i, 200)).unwrap();
            if i == 4 {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let got = poll_until(&mut p, 10, 3000, |f| {
            test_seq(f.data()).map(|q| (q, f.stamp_ns))
        });
        let after = wall_ns();
        assert_eq!(got.len(), 10, "v3 {v3}");
        for w in got.windows(2) {
            assert!(w[0].0 < w[1].0 && w[0].1 <= w[1].1, "in order: {got:?}");
        }
        for (q, t) in &got {
            assert!(before <= *t && *t <= after, "frame {q}: {t}");
        }
        // The pause between the fifth and sixth frame shows between their stamps.
        assert!(got[5].1 - got[4].1 >= 20_000_000, "v3 {v3}: {got:?}");
    }
}

/// Several receive queues: the kernel sorts frames by their destination MAC address's last
/// byte, and one poll shares its budget between the queues, so a queue with a long backlog
/// does not hold up the frames behind it for other addresses (one ring would hand over the
/// 300 frames of the first address before any other). Every frame arrives intact, each
/// address's in order.
#[test]
fn queues_sort_by_destination_and_share_a_poll() {
    if !is_root() {
        return;
    }
    let bed = Bed::new();
    in_ns(&bed.a.0, || {
        for (queues, v3) in [(0, false), (pvnet_pnic::MAX_QUEUES + 1, false), (2, true)] {
            let e = Pnic::open(&PnicConfig {
                queues,
                v3: v3.then(pvnet_pnic::gro_v3_blocks),
                ..PnicConfig::new(IF_A)
            })
            .unwrap_err();
            assert!(matches!(e, PnicError::InvalidConfig(_)), "{queues}: {e}");
        }
    });
    let mut p = in_ns(&bed.a.0, || {
        Pnic::open(&PnicConfig {
            frame_nr: 2048,
            queues: 4,
            ..PnicConfig::new(IF_A)
        })
        .expect("open pnic with 4 queues")
    });
    assert_eq!((p.queue_count(), p.rx_fds().count()), (4, 4));
    assert_eq!(p.frame_nr(), 2048, "the slots are split between the queues");
    let s = peer(&bed, false);
    // Last bytes 0x10, 0x11, 0x12: queues 0, 1 and 2 of 4.
    let dst = |last: u8| [0x02, 0x77, 0, 0, 0, last];
    let mut sent: Vec<Vec<u8>> = Vec::new();
    for (last, n, first) in [(0x10u8, 300u32, 0u32), (0x11, 20, 1000), (0x12, 20, 2000)] {
        for i in first..first + n {
            let f = test_frame(dst(last), MAC_B, i, 60 + (i as usize * 37) % 1455);
            s.send(&f).unwrap();
            sent.push(f);
        }
    }
    std::thread::sleep(Duration::from_millis(100));
    let mut polls: Vec<Vec<Vec<u8>>> = Vec::new();
    loop {
        let mut got = Vec::new();
        let n = p.poll(64, |f| {
            if test_seq(f.data()).is_some() {
                got.push(f.data().to_vec());
            }
        });
        assert!(n <= 64);
        polls.push(got);
        if n == 0 {
            break;
        }
    }
    let last_byte = |f: &Vec<u8>| f[5];
    let first = &polls[0];
    for b in [0x11, 0x12] {
        assert_eq!(
            first.iter().filter(|f| last_byte(f) == b).count(),
            20,
            "the first poll takes all 20 frames to ..:{b:02x} from its own queue"
        );
    }
    assert!(
        first.iter().filter(|f| last_byte(f) == 0x10).count() >= 16,
        "and a share of the long queue"
    );
    let all: Vec<Vec<u8>> = polls.into_iter().flatten().collect();
    assert_eq!(all.len(), sent.len(), "every frame, once");
    for b in [0x10, 0x11, 0x12] {
        let got: Vec<&Vec<u8>> = all.iter().filter(|f| last_byte(f) == b).collect();
        let want: Vec<&Vec<u8>> = sent.iter().filter(|f| last_byte(f) == b).collect();
        assert_eq!(got, want, "..:{b:02x}: byte-exact and in order");
    }
    let qs = p.queue_stats();
    assert!(
        qs[0].frames >= 300 && qs[1].frames >= 20 && qs[2].frames >= 20,
        "sorted by address: {qs:?}"
    );
    assert!(qs.iter().all(|q| q.drops == 0), "{qs:?}");
    assert_eq!(
        p.stats().rx_frames,
        qs.iter().map(|q| q.frames).sum::<u64>()
    );
    // What the port sends stays out of every queue (the group ignores outgoing frames), to
    // any of the four queues' addresses, and reaches the peer.
    let none = VirtioNetHdr::default();
    for (i, last) in (0x10u8..0x14).enumerate() {
        p.send(
            &none,
            &[&test_frame(dst(last), MAC_A, 5000 + i as u32, 200)],
        )
        .unwrap();
    }
    let mut back = 0;
    let end = Instant::now() + Duration::from_millis(200);
    while Instant::now() < end {
        p.poll(64, |f| back += usize::from(test_seq(f.data()).is_some()));
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(back, 0, "own frames read back");
    let mut at_peer = 0;
    while let Some(f) = s.recv(200) {
        at_peer += usize::from(test_seq(&f).is_some_and(|q| (5000..5004).contains(&q)));
    }
    assert_eq!(at_peer, 4);
}

/// A paused receive queue is skipped by the polls, by `rx_ready` and by `rx_fds`; its frames
/// wait in its ring, and what overflows it is dropped by the kernel in that queue alone,
/// while the other queue's frames keep coming. Served again, it hands over what it kept, in
/// order.
#[test]
fn a_paused_queue_keeps_its_frames_and_the_others_flow() {
    if !is_root() {
        return;
    }
    let bed = Bed::new();
    let mut p = in_ns(&bed.a.0, || {
        Pnic::open(&PnicConfig {
            frame_nr: 512,
            queues: 2,
            ..PnicConfig::new(IF_A)
        })
        .expect("open pnic with 2 queues")
    });
    let dst = |last: u8| [0x02, 0x77, 0, 0, 0, last];
    let (held, flowing) = (dst(0x21), dst(0x20));
    assert_eq!((p.queue_of(&held), p.queue_of(&flowing)), (1, 0));
    p.pause_queues(0b10 | 0b1000);
    assert_eq!(
        p.paused_queues(),
        0b10,
        "bits beyond the queues are ignored"
    );
    assert_eq!(
        p.rx_fds().count(),
        1,
        "the paused queue's socket is not waited on"
    );
    let s = peer(&bed, false);
    // More for the paused queue than its 256 slots hold.
    let mut sent_held = Vec::new();
    for i in 0..400u32 {
        let f = test_frame(held, MAC_B, i, 200);
        s.send(&f).unwrap();
        sent_held.push(f);
    }
    std::thread::sleep(Duration::from_millis(50));
    assert!(!p.rx_ready(), "only the paused queue has frames");
    assert_eq!(p.poll(64, |_| panic!("a frame from the paused queue")), 0);
    let sent_flowing: Vec<Vec<u8>> = (1000..1050u32)
        .map(|i| test_frame(flowing, MAC_B, i, 300))
        .collect();
    for f in &sent_flowing {
        s.send(f).unwrap();
    }
    std::thread::sleep(Duration::from_millis(50));
    assert!(p.rx_ready());
    let mut got = Vec::new();
    while p.poll(64, |f| {
        if test_seq(f.data()).is_some() {
            got.push(f.data().to_vec());
        }
    }) > 0
    {}
    assert_eq!(
        got, sent_flowing,
        "the other queue's frames, and only those"
    );
    let qs = p.queue_stats();
    assert!(qs[1].paused && !qs[0].paused, "{qs:?}");
    assert_eq!(qs[0].drops, 0, "{qs:?}");
    assert!(
        qs[1].drops >= 400 - 256,
        "the paused queue overflowed: {qs:?}"
    );
    // Served again: what its ring kept, in order, intact.
    p.pause_queues(0);
    assert_eq!(p.rx_fds().count(), 2);
    let mut kept = Vec::new();
    while p.poll(64, |f| {
        if test_seq(f.data()).is_some() {
            kept.push(f.data().to_vec());
        }
    }) > 0
    {}
    assert!(kept.len() >= 200, "{} kept", kept.len());
    assert_eq!(
        kept[..],
        sent_held[..kept.len()],
        "the first frames, in order"
    );
    assert!(!p.queue_stats()[1].paused);
}
