//! Captures at a bridge port of the data path ([`pvnet_dd::capture`]): a mock port and clock,
//! real netbacks joined to real netfronts, and a real `SOCK_SEQPACKET` sink read back here.
//! No root needed.

use crate::dp_common;
use crate::lro_common;

use std::os::fd::{AsFd, OwnedFd};

use dp_common::*;
use lro_common::{stream, MAC_DST, MAC_SRC};
use nix::sys::socket::{self, MsgFlags};
use pvnet_dd::capture::{read_record, sink_pair, Dir, RecordHeader, MAX_RECORD, RECORD_HDR_LEN};
use pvnet_dd::datapath::{vif_port, PORT_PNIC};
use pvnet_dd::lro::Policy;

const WIRE_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x99];
/// The Unix time the tests tell the data path it is when a capture starts.
const UNIX_AT_START: u64 = 1_700_000_000_000_000_000;

/// Starts a capture of `port`; returns the reader's end.
fn capture(dp: &mut Path, port: pvnet_dd::bridge::PortId) -> OwnedFd {
    let (w, r) = sink_pair().unwrap();
    dp.capture_start(port, w, UNIX_AT_START);
    r
}

/// Every record waiting on the reader's end.
fn drain(r: &OwnedFd) -> Vec<(RecordHeader, Vec<u8>)> {
    let mut buf = vec![0u8; MAX_RECORD];
    let mut out = Vec::new();
    loop {
        match read_record(r.as_fd(), &mut buf, MsgFlags::MSG_DONTWAIT) {
            Ok(Some((h, b))) => out.push((h, b.to_vec())),
            Ok(None) => panic!("the data path closed the sink"),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return out,
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
fn a_capture_records_exactly_the_packets_crossing_its_port() {
    let (mut dp, clock, mut g) = path_with(&[MAC_DST, MAC_G2], None, 64);
    // Before the capture starts: not recorded.
    let early = frame_to(MAC_DST, MAC_SRC, 100, 0);
    dp.phy_mut().unwrap().inject(&early);
    pass(&mut dp);
    let r = capture(&mut dp, vif_port(g[0].dom));
    // Starting at clock 1 ms; the packets go through 5 µs later.
    clock.advance(5_000);
    let to_g1: Vec<Vec<u8>> = (0..10)
        .map(|i| frame_to(MAC_DST, MAC_SRC, 60 + 111 * i, i as u8))
        .collect();
    let to_g2: Vec<Vec<u8>> = (0..4)
        .map(|i| frame_to(MAC_G2, MAC_SRC, 200, 100 + i as u8))
        .collect();
    for (k, f) in to_g1.iter().enumerate() {
        dp.phy_mut().unwrap().inject(f);
        if k < to_g2.len() {
            dp.phy_mut().unwrap().inject(&to_g2[k]);
        }
    }
    pass(&mut dp);
    // Guest 1 sends one frame to the wire (flooded: its destination is unknown) and guest 2
    // one to guest 1: both cross guest 1's port, the first outwards, the second inwards.
    let out = frame_to(WIRE_MAC, MAC_DST, 1514, 7);
    let g2_to_g1 = frame_to(MAC_DST, MAC_G2, 300, 9);
    g[0].send(&out);
    dp.tick();
    dp.vif_event(g[0].dom);
    g[1].send(&g2_to_g1);
    dp.vif_event(g[1].dom);
    dp.end_pass();

    let recs = drain(&r);
    let mut want: Vec<(Dir, Vec<u8>)> = to_g1.iter().map(|f| (Dir::ToPort, f.clone())).collect();
    want.push((Dir::FromPort, out.clone()));
    want.push((Dir::ToPort, g2_to_g1.clone()));
    let got: Vec<(Dir, Vec<u8>)> = recs.iter().map(|(h, b)| (h.dir, b.clone())).collect();
    assert_eq!(got, want);
    for (h, b) in &recs {
        assert_eq!(h.orig_len as usize, b.len());
        assert_eq!(h.dropped_before, 0);
        assert_eq!(
            h.ts_ns,
            UNIX_AT_START + 5_000,
            "stamped by the data path's clock"
        );
    }
    // The guests got their packets all the same.
    let got1 = g[0].take_bytes();
    assert_eq!(got1.len(), 1 + 10 + 1);
    assert_eq!(&got1[1..11], &to_g1[..]);
    assert_eq!(g[1].take_bytes()[..4], to_g2[..]);
    let s = dp.capture_summary();
    assert_eq!(s.active.len(), 1);
    assert_eq!(s.active[0].0, vif_port(g[0].dom).0);
    assert_eq!(s.active[0].1.records, 12);
    assert_eq!(
        s.active[0].1.bytes,
        want.iter().map(|(_, f)| f.len() as u64).sum::<u64>()
    );
    assert_eq!(s.active[0].1.dropped, 0);
}

#[test]
fn an_aggregate_is_one_record_with_its_gso_size() {
    let (mut dp, _clock, mut g) = path_with(&[MAC_DST], Some(Policy::Poll), 64);
    let r = capture(&mut dp, vif_port(g[0].dom));
    let segs = stream(false, 1000, 1448, 20);
    for s in &segs {
        dp.phy_mut().unwrap().inject(&s.build());
    }
    pass(&mut dp);
    let recs = drain(&r);
    let delivered = g[0].take_bytes();
    assert!(recs.len() < 20 / 4, "20 segments in {} records", recs.len());
    // The records are the packets the guest received, byte for byte.
    let bytes: Vec<Vec<u8>> = recs.iter().map(|(_, b)| b.clone()).collect();
    assert_eq!(bytes, delivered);
    let big = &recs[0];
    assert!(big.1.len() > 1514, "an aggregate of {} bytes", big.1.len());
    assert_eq!(big.0.gso_size, 1448);
    let payload: Vec<u8> = recs.iter().flat_map(|(_, b)| b[66..].to_vec()).collect();
    let want: Vec<u8> = segs.iter().flat_map(|s| s.payload.clone()).collect();
    assert_eq!(payload, want);
}

#[test]
fn no_capture_no_records_and_other_ports_are_not_recorded() {
    let (mut dp, _clock, mut g) = path_with(&[MAC_DST, MAC_G2], None, 64);
    // A capture of guest 2's port sees nothing of guest 1's traffic.
    let r2 = capture(&mut dp, vif_port(g[1].dom));
    for i in 0..5 {
        dp.phy_mut()
            .unwrap()
            .inject(&frame_to(MAC_DST, MAC_SRC, 90, i));
    }
    pass(&mut dp);
    assert_eq!(g[0].take_bytes().len(), 5);
    assert!(drain(&r2).is_empty());
    assert_eq!(dp.capture_summary().active[0].1.records, 0);
    // A capture of the physical port sees what comes in from it and what goes out to it.
    let rp = capture(&mut dp, PORT_PNIC);
    let f = frame_to(MAC_DST, MAC_SRC, 77, 1);
    dp.phy_mut().unwrap().inject(&f);
    pass(&mut dp);
    let out = frame_to(MAC_SRC, MAC_DST, 500, 2);
    g[0].send(&out);
    dp.tick();
    dp.vif_event(g[0].dom);
    let got: Vec<(Dir, Vec<u8>)> = drain(&rp).into_iter().map(|(h, b)| (h.dir, b)).collect();
    assert_eq!(got, vec![(Dir::FromPort, f), (Dir::ToPort, out)]);
}

#[test]
fn a_full_sink_drops_records_and_counts_them() {
    let (mut dp, _clock, mut g) = path_with(&[MAC_DST], None, 64);
    let (w, r) = sink_pair().unwrap();
    // A small buffer, so that it fills (the kernel doubles the value and keeps a minimum).
    socket::setsockopt(&w, socket::sockopt::SndBuf, &16384).unwrap();
    dp.capture_start(vif_port(g[0].dom), w, UNIX_AT_START);
    let frames: Vec<Vec<u8>> = (0..60)
        .map(|i| frame_to(MAC_DST, MAC_SRC, 1400, i as u8))
        .collect();
    for f in &frames {
        dp.phy_mut().unwrap().inject(f);
    }
    // One poll at a time, the guest taking its packets: its queue never holds the port back.
    for _ in 0..frames.len() {
        dp.tick();
        dp.phy_poll();
        dp.end_pass();
        g[0].take_bytes();
        g[0].nf.rx_refill();
        dp.vif_event(g[0].dom);
    }
    let recs = drain(&r);
    let s = dp.capture_summary().active[0].1;
    assert!(
        !recs.is_empty() && s.dropped > 0,
        "{} records, {s:?}",
        recs.len()
    );
    assert_eq!(recs.len() as u64 + s.dropped, 60);
    assert_eq!(s.records, recs.len() as u64);
    // The records that got through are the first frames, in order: the buffer filled and
    // stayed full since nobody read.
    let bytes: Vec<Vec<u8>> = recs.iter().map(|(_, b)| b.clone()).collect();
    assert_eq!(bytes, frames[..recs.len()]);
    assert!(recs.iter().all(|(h, _)| h.dropped_before == 0));
    // Now read: the next record carries the number dropped before it.
    let next = frame_to(MAC_DST, MAC_SRC, 100, 0xee);
    dp.phy_mut().unwrap().inject(&next);
    pass(&mut dp);
    let more = drain(&r);
    assert_eq!(more.len(), 1);
    assert_eq!(more[0].1, next);
    assert_eq!(u64::from(more[0].0.dropped_before), s.dropped);
    let s2 = dp.capture_summary().active[0].1;
    assert_eq!((s2.records, s2.dropped), (s.records + 1, s.dropped));
}

#[test]
fn a_capture_ends_when_its_reader_goes_away() {
    let (mut dp, _clock, mut g) = path_with(&[MAC_DST], None, 64);
    let r = capture(&mut dp, vif_port(g[0].dom));
    let keep = capture(&mut dp, vif_port(g[0].dom));
    let f = frame_to(MAC_DST, MAC_SRC, 64, 3);
    dp.phy_mut().unwrap().inject(&f);
    pass(&mut dp);
    assert_eq!(drain(&r).len(), 1);
    drop(r);
    dp.phy_mut().unwrap().inject(&f);
    pass(&mut dp);
    let s = dp.capture_summary();
    assert_eq!((s.started, s.ended, s.ended_records), (2, 1, 1));
    assert_eq!(s.active.len(), 1, "the other capture of the port goes on");
    assert_eq!(drain(&keep).len(), 2);
    // A reader that goes away while its port is quiet is noticed when the counters are read.
    let quiet = capture(&mut dp, PORT_PNIC);
    assert_eq!(dp.capture_summary().active.len(), 2);
    drop(quiet);
    let s = dp.capture_summary();
    assert_eq!((s.started, s.ended, s.active.len()), (3, 2, 1));
    assert_eq!(
        g[0].take_bytes(),
        vec![f.clone(), f],
        "the guest is not affected"
    );
    // Clearing the path closes the remaining sink: its reader sees the end.
    dp.clear();
    let mut buf = vec![0u8; MAX_RECORD];
    assert!(read_record(keep.as_fd(), &mut buf, MsgFlags::MSG_DONTWAIT)
        .unwrap()
        .is_none());
}

#[test]
fn a_record_header_survives_its_bytes_and_junk_is_refused() {
    let h = RecordHeader {
        ts_ns: 0x0102_0304_0506_0708,
        orig_len: 65549,
        dropped_before: 7,
        dir: Dir::FromPort,
        gso_type: 1,
        gso_size: 1448,
    };
    let b = h.to_bytes();
    assert_eq!(b.len(), RECORD_HDR_LEN);
    assert_eq!(RecordHeader::parse(&b), Some(h));
    assert_eq!(RecordHeader::parse(&b[..RECORD_HDR_LEN - 1]), None);
    let mut bad = b;
    bad[16] = 2;
    assert_eq!(RecordHeader::parse(&bad), None);
}
