//! Guest to guest in one copy: frames one guest sends to another through the data path arrive
//! intact, the payload crosses once (grant to grant, counted by the hypervisor's byte
//! counter), the counters move by exactly the number of frames, and frames that cannot take
//! the direct path (no buffers posted, flooded, the path turned off) still arrive, in order.

use crate::dp_common;

use std::sync::Arc;

use dp_common::*;
use pvnet_dd::datapath::{DataPath, PathConfig};
use pvnet_dd::lro::Mode;
use pvnet_dd::mock::{MockClock, MockPhy};
use pvnet_dd::netback::{Fatal, Netback, G2G_HEAD_LEN};
use pvnet_guest::netfront::{Layout, Netfront};
use pvnet_hv::evtchn::channel_pair;
use pvnet_hv::grant::Hypervisor;
use pvnet_hv::mem::GuestMemory;
use pvnet_hv::DomId;

const MAC_A: [u8; 6] = [0x00, 0x16, 0x3e, 0, 0, 0x0a];
const MAC_B: [u8; 6] = [0x00, 0x16, 0x3e, 0, 0, 0x0b];
const MAC_C: [u8; 6] = [0x00, 0x16, 0x3e, 0, 0, 0x0c];

/// Two guests (domids 1 and 2) on one data path and one hypervisor, both MTUs 64 KiB so
/// frames span several pages; guest 2 posts its RX buffers only if `b_posts`.
fn two_guests(b_posts: bool) -> (Path, Arc<Hypervisor>, Vec<Guest>) {
    guests(&[true, b_posts])
}

/// Guests 1, 2, ... (MACs A, B, C) as [`two_guests`]; guest `i + 1` posts its RX buffers only
/// if `posts[i]`.
fn guests(posts: &[bool]) -> (Path, Arc<Hypervisor>, Vec<Guest>) {
    let clock = MockClock::default();
    clock.advance(1_000_000);
    let mut dp = DataPath::new(
        PathConfig {
            budget: 64,
            bo: false,
        },
        clock,
        None,
        Mode::Skb,
    );
    dp.attach_phy(MockPhy::default()).unwrap();
    let hv = Arc::new(Hypervisor::new());
    let mut guests = Vec::new();
    for (i, mac) in [MAC_A, MAC_B, MAC_C][..posts.len()].iter().enumerate() {
        let dom = i as u16 + 1;
        let layout = Layout { grant_frames: 4 };
        let mem = Arc::new(GuestMemory::create("guest", layout.pages()).unwrap());
        hv.add_domain(DomId(dom), mem.clone(), 4);
        let (front, back) = channel_pair().unwrap();
        let mut nf = Netfront::new(mem, layout, DomId::DRIVER, front).unwrap();
        let mut nb = Netback::connect(
            hv.clone(),
            DomId(dom),
            nf.tx_ring_ref(),
            nf.rx_ring_ref(),
            back,
            features(),
        )
        .unwrap();
        nb.set_mtu(65535);
        if posts[i] {
            nf.rx_refill();
        }
        dp.add_guest_port(dom);
        assert!(dp.connect_vif(dom, *mac, nb));
        guests.push(Guest { dom, nf });
    }
    (dp, hv, guests)
}

/// Frames from A to B of lengths all longer than the head, some over several pages.
fn frames() -> Vec<Vec<u8>> {
    [129, 200, 1000, 1514, 4095, 4096, 4097, 9000, 20000, 60000]
        .iter()
        .enumerate()
        .map(|(i, &n)| frame_to(MAC_B, MAC_A, n, i as u8))
        .collect()
}

fn send_all(dp: &mut Path, a: &mut Guest, sent: &[Vec<u8>]) {
    for f in sent {
        a.send(f);
        dp.vif_event(a.dom);
        a.nf.tx_complete();
    }
}

#[test]
fn frames_go_guest_to_guest_in_one_copy_intact() {
    let (mut dp, hv, mut g) = two_guests(true);
    let sent = frames();
    let total: u64 = sent.iter().map(|f| f.len() as u64).sum();
    let g0 = hv.stats();
    send_all(&mut dp, &mut g[0], &sent);
    let got = g[1].take_bytes();
    assert_eq!(got, sent, "every frame arrived intact, in order");
    let n = sent.len() as u64;
    let s = dp.stats.g2g;
    assert_eq!(s.single_copy_packets, n);
    assert_eq!(s.head_bytes, n * G2G_HEAD_LEN as u64);
    assert_eq!(s.single_copy_bytes, total - n * G2G_HEAD_LEN as u64);
    assert_eq!(dp.vif_stats(1).unwrap().tx_direct_packets, n);
    assert_eq!(dp.vif_stats(2).unwrap().rx_direct_packets, n);
    assert_eq!(dp.vif_stats(2).unwrap().rx_packets, n);
    assert_eq!(dp.vif_stats(2).unwrap().rx_bytes, total);
    // The hypervisor moved each payload byte once and each header byte twice (out of the
    // sender to be validated, into the receiver from that copy).
    let copied = hv.stats().copy_bytes - g0.copy_bytes;
    assert_eq!(copied, total + n * G2G_HEAD_LEN as u64);
    assert!(dp.phy().unwrap().tx.is_empty(), "nothing left for the wire");
    assert_eq!(g[1].nf.stats.rx_errors, 0);
}

#[test]
fn without_the_direct_path_the_same_frames_cost_two_copies() {
    let (mut dp, hv, mut g) = two_guests(true);
    dp.set_g2g_direct(false);
    let sent = frames();
    let total: u64 = sent.iter().map(|f| f.len() as u64).sum();
    let g0 = hv.stats();
    send_all(&mut dp, &mut g[0], &sent);
    assert_eq!(g[1].take_bytes(), sent);
    assert_eq!(dp.stats.g2g.single_copy_packets, 0);
    assert_eq!(dp.vif_stats(2).unwrap().rx_direct_packets, 0);
    assert_eq!(hv.stats().copy_bytes - g0.copy_bytes, 2 * total);
}

#[test]
fn a_receiver_without_buffers_gets_the_frames_later_in_order() {
    let (mut dp, _hv, mut g) = two_guests(false);
    let sent = frames();
    // All frames in one poll: the first is refused (no buffers) and queued; the rest must
    // not overtake it.
    for f in &sent {
        g[0].send(f);
    }
    dp.vif_event(1);
    g[0].nf.tx_complete();
    let s = dp.stats.g2g;
    assert_eq!(s.receiver_no_buffers, 1);
    assert_eq!(s.behind_fallback, sent.len() as u64 - 1);
    assert_eq!(s.single_copy_packets, 0);
    assert_eq!(dp.netback(2).unwrap().rx_queued(), sent.len());
    // B posts its buffers and notifies: everything arrives, in order.
    g[1].nf.rx_refill();
    dp.vif_event(2);
    let mut got = g[1].take_bytes();
    while got.len() < sent.len() {
        g[1].nf.rx_refill();
        dp.vif_event(2);
        let more = g[1].take_bytes();
        assert!(!more.is_empty(), "progress");
        got.extend(more);
    }
    assert_eq!(got, sent);
    // Queue empty again: the next frame goes in one copy.
    let one = frame_to(MAC_B, MAC_A, 3000, 77);
    g[1].nf.rx_refill();
    send_all(&mut dp, &mut g[0], std::slice::from_ref(&one));
    assert_eq!(g[1].take_bytes(), vec![one]);
    assert_eq!(dp.stats.g2g.single_copy_packets, 1);
}

#[test]
fn flooded_frames_reach_every_port_whole() {
    let (mut dp, _hv, mut g) = two_guests(true);
    let bcast = frame_to([0xff; 6], MAC_A, 700, 5);
    let unicast = frame_to(MAC_B, MAC_A, 900, 6);
    // Broadcast then unicast in one poll: the unicast frame must not overtake the broadcast.
    g[0].send(&bcast);
    g[0].send(&unicast);
    dp.vif_event(1);
    assert_eq!(g[1].take_bytes(), vec![bcast.clone(), unicast]);
    assert_eq!(dp.phy().unwrap().tx.len(), 1, "the wire got the broadcast");
    assert_eq!(dp.phy().unwrap().tx[0].1, bcast);
    let s = dp.stats.g2g;
    assert_eq!(
        (s.flooded, s.behind_fallback, s.single_copy_packets),
        (1, 1, 0)
    );
}

/// Invalidates every read-only grant (a TX page the guest granted) of the guest whose memory
/// is `mem` except the one holding `head` (the frame's first bytes): the head can still be
/// copied out, the rest of the frame no longer can. Returns how many it revoked.
fn revoke_tx_pages_but_the_head(mem: &GuestMemory, head: &[u8]) -> usize {
    use pvnet_hv::grant::{GTF_PERMIT_ACCESS, GTF_READONLY, GTF_TYPE_MASK};
    use pvnet_hv::{Pfn, PAGE_SIZE};
    let mut revoked = 0;
    for r in 0..4 * 512usize {
        let (pfn, off) = ((r * 8 / PAGE_SIZE) as u32, r * 8 % PAGE_SIZE);
        let mut e = [0u8; 8];
        mem.read(Pfn(pfn), off, &mut e).unwrap();
        let flags = u16::from_le_bytes([e[0], e[1]]);
        if flags & GTF_TYPE_MASK != GTF_PERMIT_ACCESS || flags & GTF_READONLY == 0 {
            continue;
        }
        let frame = u32::from_le_bytes([e[4], e[5], e[6], e[7]]);
        let mut page = vec![0u8; PAGE_SIZE];
        mem.read(Pfn(frame), 0, &mut page).unwrap();
        if page.windows(head.len()).any(|w| w == head) {
            continue;
        }
        mem.write(Pfn(pfn), off, &[0, 0]).unwrap();
        revoked += 1;
    }
    revoked
}

#[test]
fn a_sender_whose_pages_fail_the_copy_fails_alone() {
    let (mut dp, hv, mut g) = two_guests(true);
    let mem = hv.domain_memory(DomId(1)).unwrap();
    let bad = frame_to(MAC_B, MAC_A, 9000, 9);
    g[0].send(&bad);
    // The guest takes back its payload pages behind netback's back (an entry rewritten, not
    // ended): the headers are still readable, the payload is not.
    assert_eq!(revoke_tx_pages_but_the_head(&mem, &bad[..14]), 2);
    dp.vif_event(1);
    let failed = dp.take_failed();
    assert_eq!(failed.len(), 1);
    assert_eq!((failed[0].0, failed[0].2), (1, Fatal::TxCopyFailed));
    assert_eq!(dp.stats.g2g.sender_failed, 1);
    assert_eq!(dp.stats.g2g.single_copy_packets, 0);
    // The receiver lost the frame, was told so, and goes on.
    assert!(g[1].take_bytes().is_empty());
    assert_eq!(g[1].nf.stats.rx_errors, 1);
    let s2 = dp.vif_stats(2).unwrap();
    assert_eq!((s2.rx_peer_copy_failed, s2.rx_packets), (1, 0));
    assert!(dp.netback(2).unwrap().fatal().is_none());
    let from_wire = frame_to(MAC_B, [0x02, 0, 0, 0, 0, 1], 1500, 3);
    dp.phy_mut().unwrap().inject(&from_wire);
    pass(&mut dp);
    assert_eq!(g[1].take_bytes(), vec![from_wire]);
}

#[test]
fn a_receiver_without_buffers_holds_back_only_its_own_frames() {
    // Guest 2 has no buffers, guest 3 has.
    let (mut dp, _hv, mut g) = guests(&[true, false, true]);
    let to_b: Vec<Vec<u8>> = (0..3).map(|i| frame_to(MAC_B, MAC_A, 3000, i)).collect();
    let to_c: Vec<Vec<u8>> = (0..3)
        .map(|i| frame_to(MAC_C, MAC_A, 5000, 10 + i))
        .collect();
    // Interleaved in one poll: B, C, B, C, B, C.
    for (b, c) in to_b.iter().zip(&to_c) {
        g[0].send(b);
        g[0].send(c);
    }
    dp.vif_event(1);
    let s = dp.stats.g2g;
    assert_eq!(s.receiver_no_buffers, 1);
    assert_eq!(
        s.behind_fallback, 2,
        "B's later frames wait behind its first"
    );
    assert_eq!(s.single_copy_packets, 3, "C's frames all went in one copy");
    assert_eq!(g[2].take_bytes(), to_c);
    g[1].nf.rx_refill();
    dp.vif_event(2);
    assert_eq!(g[1].take_bytes(), to_b);
}
