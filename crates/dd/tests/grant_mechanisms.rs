//! netback's grant mechanisms (`copy`, `map`, `persistent`) on the real ring path — a real
//! `Netfront` and a real `Netback` over one grant table, memfd guest memory and an eventfd
//! channel — and against the hostile mock frontend: bytes intact in both directions under
//! every mechanism, counters exact, and each grant abuse ending the vif with its own counter.

use std::collections::VecDeque;
use std::sync::Arc;

use pvnet_dd::mock::MockFrontend;
use pvnet_dd::netback::{Config, Fatal, Features, Mechanism, Netback, TX_COPY_LEN};
use pvnet_dd::packet::{Frag, Packet};
use pvnet_guest::netfront::{Layout, Netfront, RX_BUFS};
use pvnet_hv::evtchn::channel_pair;
use pvnet_hv::grant::{Hypervisor, GTF_PERMIT_ACCESS};
use pvnet_hv::mem::GuestMemory;
use pvnet_hv::{DomId, Pfn, PAGE_SIZE};
use pvnet_netif::*;
use pvnet_wire::vnet::VirtioNetHdr;

use crate::ring_common;
use ring_common::*;

// ------------------------------------------------------------------------------ harness

fn features() -> Features {
    pvnet_dd::mock::sg_tso4_features()
}

/// A netfront and a netback under `mech`, negotiated as the daemon does: persistent grants
/// when the frontend takes them.
fn pair(mech: Mechanism) -> Pair {
    let layout = Layout { grant_frames: 4 };
    let mem = Arc::new(GuestMemory::create("guest", layout.pages()).unwrap());
    let hv = Arc::new(Hypervisor::new());
    hv.add_domain(GUEST, mem.clone(), 4);
    let (front_end, back_end) = channel_pair().unwrap();
    let mut nf = Netfront::new(mem, layout, DomId::DRIVER, front_end).unwrap();
    let persistent = mech == Mechanism::Persistent && nf.use_persistent_grants();
    let config = Config::negotiated(mech, persistent);
    assert_eq!(config.mechanism, mech);
    let nb = Netback::connect_with(
        hv.clone(),
        GUEST,
        nf.tx_ring_ref(),
        nf.rx_ring_ref(),
        back_end,
        features(),
        config,
    )
    .unwrap();
    assert_eq!(nb.stats.grant_mechanism, mech);
    Pair { hv, nf, nb }
}

/// `data` as a head and fragments of uneven sizes (several pieces land in one RX page).
fn chained(vnet: VirtioNetHdr, data: &[u8], rng: &mut XorShift) -> Packet {
    let head_len = (14 + rng.below(100)).min(data.len());
    let mut p = Packet::linear(vnet, data[..head_len].to_vec());
    let mut off = head_len;
    while off < data.len() {
        let n = [1usize, 700, 4095, 4097, 9000][rng.below(5)].min(data.len() - off);
        p.frags.push(Frag {
            buf: data[off..off + n].to_vec().into(),
            start: 0,
        });
        off += n;
    }
    p
}

/// A frame of `len` bytes and the virtio header it travels with (GSO above one MTU).
fn frame_for(len: usize, seed: u32, rng: &mut XorShift) -> (VirtioNetHdr, Vec<u8>) {
    if len > 1514 {
        (tso(1448), tcp4_frame(len, seed))
    } else if len >= 66 && rng.below(2) == 0 {
        (needs_csum(), tcp4_frame(len, seed))
    } else {
        (VirtioNetHdr::default(), raw_frame(len, seed))
    }
}

fn random_len(rng: &mut XorShift, i: usize) -> usize {
    const FIXED: [usize; 14] = [
        14, 60, 127, 128, 129, 1514, 4095, 4096, 4097, 8192, 9000, 20000, 65535, 65549,
    ];
    if i < FIXED.len() {
        return FIXED[i];
    }
    match rng.below(4) {
        0 => 14 + rng.below(200),
        1 => 60 + rng.below(1455),
        2 => 1515 + rng.below(15000),
        _ => 1515 + rng.below(65549 - 1515 + 1),
    }
}

// ------------------------------------------------------------------------------ RX

/// Many sizes, linear and chained, GSO and not, to the guest under `mech`; returns the netback
/// counters after every packet arrived intact, and the RX data slots used.
fn rx_under(mech: Mechanism) -> (Pair, u64) {
    let mut p = pair(mech);
    p.nf.rx_refill();
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15 ^ mech as u64);
    let mut expected: VecDeque<Vec<u8>> = VecDeque::new();
    let mut got: Vec<Vec<u8>> = Vec::new();
    let mut data_slots = 0u64;
    let mut i = 0usize;
    while i < 1200 {
        for _ in 0..1 + rng.below(30) {
            let len = random_len(&mut rng, i);
            let (hdr, frame) = frame_for(len, i as u32, &mut rng);
            let pkt = if rng.below(3) == 0 {
                chained(hdr, &frame, &mut rng)
            } else {
                Packet::linear(hdr, frame.clone())
            };
            data_slots += len.div_ceil(PAGE_SIZE) as u64;
            assert!(p.nb.rx_enqueue(pkt));
            expected.push_back(frame);
            i += 1;
        }
        for _ in 0..4 {
            p.nb.rx_flush().unwrap();
            if mech == Mechanism::Map {
                // Every page mapped for a packet is unmapped before the next one.
                assert_eq!(p.nb.stats.grant_maps, p.nb.stats.grant_unmaps);
            }
            p.nf.rx_poll(|_, pieces| {
                got.push(pieces.concat());
                Ok(())
            });
            if p.nb.rx_queued() == 0 {
                break;
            }
        }
    }
    assert_eq!(p.nb.rx_queued(), 0);
    assert_eq!(got.len(), expected.len());
    for (k, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert!(g == e, "{mech}: packet {k} ({} bytes) differs", e.len());
    }
    assert_eq!(p.nb.stats.rx_packets, expected.len() as u64);
    assert_eq!(p.nf.stats.rx_errors + p.nf.stats.rx_bad_response, 0);
    assert_eq!(p.nb.fatal(), None);
    (p, data_slots)
}

#[test]
fn rx_copy_uses_no_mapping() {
    let (p, _) = rx_under(Mechanism::Copy);
    let s = &p.nb.stats;
    assert!(s.rx_copy_ops > 0);
    assert_eq!(
        (
            s.grant_maps,
            s.grant_unmaps,
            s.persistent_hits,
            s.persistent_misses
        ),
        (0, 0, 0, 0)
    );
}

#[test]
fn rx_map_maps_and_unmaps_every_data_slot_once() {
    let (p, data_slots) = rx_under(Mechanism::Map);
    let s = &p.nb.stats;
    assert_eq!(s.grant_maps, data_slots);
    assert_eq!(s.grant_unmaps, data_slots);
    assert_eq!((s.rx_copy_ops, s.rx_copy_batches), (0, 0));
    assert_eq!(s.persistent_hits + s.persistent_misses, 0);
    // The hypervisor agrees: only the two ring pages are still mapped.
    let hv = p.hv.stats();
    assert_eq!(hv.maps, data_slots + 2);
    assert_eq!(hv.unmaps, data_slots);
}

#[test]
fn rx_persistent_maps_each_buffer_once_and_hits_after() {
    let (mut p, data_slots) = rx_under(Mechanism::Persistent);
    let s = p.nb.stats.clone();
    // Every one of netfront's RX buffers carried data at some point, and each was mapped
    // exactly once: its first use is the miss, every later use a hit.
    assert_eq!(s.persistent_misses, u64::from(RX_BUFS));
    assert_eq!(s.persistent_hits + s.persistent_misses, data_slots);
    assert_eq!(s.persistent_evictions, 0);
    assert_eq!(s.persistent_mapped, s.persistent_misses);
    assert_eq!((s.grant_maps, s.grant_unmaps), (s.persistent_misses, 0));
    assert_eq!(s.rx_copy_ops, 0);
    // The frontend kept one grant per buffer.
    assert!(p.nf.rx_persistent_gref(0).is_some());
    // Disconnect: everything is unmapped, and then the frontend can end every grant.
    p.nb.unmap_all();
    assert_eq!(p.nb.stats.grant_unmaps, s.grant_maps);
    assert_eq!(p.nb.stats.persistent_mapped, 0);
    let hv = p.hv.stats();
    assert_eq!(hv.maps - hv.unmaps, 2, "only the ring pages stay mapped");
    assert_eq!(p.nf.end_persistent_grants(), 0);
}

// ------------------------------------------------------------------------------ TX

struct TxCounts {
    packets: u64,
    slots: u64,
    /// Slots `map` maps: every slot but a first one of at most TX_COPY_LEN bytes.
    mapped: u64,
}

/// Many sizes from the guest under `mech`; every frame arrives intact.
fn tx_under(mech: Mechanism) -> (Pair, TxCounts) {
    let mut p = pair(mech);
    p.nf.rx_refill();
    let mut rng = XorShift(0xdead_beef ^ mech as u64);
    let mut sent: VecDeque<Vec<u8>> = VecDeque::new();
    let mut got: Vec<Packet> = Vec::new();
    let mut c = TxCounts {
        packets: 0,
        slots: 0,
        mapped: 0,
    };
    let mut i = 0usize;
    while i < 1500 {
        for _ in 0..1 + rng.below(40) {
            // Netfront sends at most XEN_NETIF_MAX_TX_SIZE bytes.
            let len = random_len(&mut rng, i).min(XEN_NETIF_MAX_TX_SIZE);
            let (hdr, frame) = frame_for(len, i as u32, &mut rng);
            match tap_send(&mut p.nf, &hdr, &frame).unwrap() {
                Some(n) => {
                    assert_eq!(n, len);
                    let slots = len.div_ceil(PAGE_SIZE) as u64;
                    let first = len.min(PAGE_SIZE);
                    c.packets += 1;
                    c.slots += slots;
                    c.mapped += slots - 1 + u64::from(first > TX_COPY_LEN);
                    sent.push_back(frame);
                    i += 1;
                }
                None => break,
            }
        }
        p.nf.tx_push();
        let before = (p.nb.stats.grant_maps, p.nb.stats.grant_unmaps);
        p.nb.tx_poll(64, |pkt| got.push(pkt)).unwrap();
        if mech == Mechanism::Map {
            let s = &p.nb.stats;
            assert_eq!(s.grant_maps - before.0, s.grant_unmaps - before.1);
        }
        p.nf.tx_complete();
    }
    p.nb.tx_poll(usize::MAX, |pkt| got.push(pkt)).unwrap();
    p.nf.tx_complete();
    assert_eq!(got.len(), sent.len());
    for (k, (g, e)) in got.iter().zip(&sent).enumerate() {
        assert!(
            g.head == *e,
            "{mech}: frame {k} ({} bytes) differs",
            e.len()
        );
    }
    assert_eq!(p.nb.stats.tx_packets, c.packets);
    assert_eq!(p.nb.stats.tx_oversize + p.nb.stats.tx_bad_csum, 0);
    assert_eq!(p.nf.stats.tx_errors + p.nf.stats.tx_bad_response, 0);
    assert_eq!(p.nb.fatal(), None);
    (p, c)
}

#[test]
fn tx_copy_copies_every_slot() {
    let (p, c) = tx_under(Mechanism::Copy);
    assert_eq!(p.nb.stats.tx_copy_ops, c.slots);
    assert_eq!(p.nb.stats.grant_maps, 0);
}

#[test]
fn tx_map_copies_the_headers_and_maps_the_rest() {
    let (p, c) = tx_under(Mechanism::Map);
    let s = &p.nb.stats;
    assert!(c.mapped < c.slots, "some frames fit in the copied headers");
    assert_eq!(s.tx_copy_ops, c.packets, "one header copy per frame");
    assert_eq!(s.grant_maps, c.mapped);
    assert_eq!(s.grant_unmaps, c.mapped);
    let hv = p.hv.stats();
    assert_eq!((hv.maps, hv.unmaps), (c.mapped + 2, c.mapped));
}

#[test]
fn tx_persistent_maps_each_page_once() {
    let (p, c) = tx_under(Mechanism::Persistent);
    let s = &p.nb.stats;
    assert_eq!(s.tx_copy_ops, 0);
    assert_eq!(s.persistent_hits + s.persistent_misses, c.slots);
    assert!(s.persistent_misses <= 256, "{}", s.persistent_misses);
    assert!(s.persistent_hits > 10 * s.persistent_misses);
    assert_eq!(s.persistent_evictions, 0);
    assert_eq!(s.grant_maps, s.persistent_misses);
    assert_eq!(s.persistent_mapped, s.persistent_misses);
}

#[test]
fn persistent_both_directions_stay_within_the_bound() {
    let mut p = pair(Mechanism::Persistent);
    p.nf.rx_refill();
    let mut rng = XorShift(7);
    let mut rx_got = Vec::new();
    let mut tx_got = Vec::new();
    let mut rx_sent = Vec::new();
    let mut tx_sent = Vec::new();
    for i in 0..3000usize {
        let len = random_len(&mut rng, i % 20);
        let (hdr, frame) = frame_for(len, i as u32, &mut rng);
        if i % 2 == 0 {
            assert!(p.nb.rx_enqueue(Packet::linear(hdr, frame.clone())));
            rx_sent.push(frame);
        } else if len <= XEN_NETIF_MAX_TX_SIZE
            && tap_send(&mut p.nf, &hdr, &frame).unwrap() == Some(len)
        {
            tx_sent.push(frame);
        }
        if i % 16 == 15 {
            p.nf.tx_push();
            p.nb.tx_poll(usize::MAX, |pkt| tx_got.push(pkt.head))
                .unwrap();
            p.nf.tx_complete();
            p.nb.rx_flush().unwrap();
            p.nf.rx_poll(|_, pieces| {
                rx_got.push(pieces.concat());
                Ok(())
            });
        }
    }
    p.nf.tx_push();
    p.nb.tx_poll(usize::MAX, |pkt| tx_got.push(pkt.head))
        .unwrap();
    p.nb.rx_flush().unwrap();
    p.nf.rx_poll(|_, pieces| {
        rx_got.push(pieces.concat());
        Ok(())
    });
    assert!(rx_got == rx_sent && tx_got == tx_sent);
    let s = &p.nb.stats;
    assert!(s.persistent_mapped <= 512 && s.persistent_misses <= 512);
    assert_eq!(s.persistent_evictions, 0);
    assert_eq!(p.nb.fatal(), None);
}

// ------------------------------------------------------------------------------ hostile

fn mock_with(mech: Mechanism, persistent_max: usize) -> (MockFrontend, Netback) {
    MockFrontend::connect_with(
        24,
        features(),
        Config {
            mechanism: mech,
            persistent_max,
            ..Config::default()
        },
    )
    .unwrap()
}

/// The vif is dead with `f` counted once, and stays dead without touching anything.
fn assert_fatal(m: &mut MockFrontend, nb: &mut Netback, got: Result<usize, Fatal>, f: Fatal) {
    assert_eq!(got, Err(f));
    assert_eq!(nb.fatal(), Some(f));
    let v = serde_json::to_value(&nb.stats).unwrap();
    assert_eq!(v[f.name()].as_u64(), Some(1), "counter {}", f.name());
    // No mapping outlives the failure.
    assert_eq!(nb.stats.grant_maps, nb.stats.grant_unmaps);
    assert_eq!(nb.stats.persistent_mapped, 0);
    nb.rx_enqueue(Packet::linear(VirtioNetHdr::default(), raw_frame(60, 0)));
    let rings = m.ring_pages();
    let stats = nb.stats.clone();
    let hv = m.hv.stats();
    for _ in 0..3 {
        assert_eq!(nb.tx_poll(64, |_| panic!("delivered after fatal")), Err(f));
        assert_eq!(nb.rx_flush(), Err(f));
    }
    assert!(m.ring_pages() == rings);
    assert_eq!(nb.stats, stats);
    assert_eq!(m.hv.stats(), hv);
}

fn rx_frame(seed: u32) -> Packet {
    Packet::linear(VirtioNetHdr::default(), raw_frame(1000, seed))
}

/// The frontend ends access to a persistent grant the backend has mapped; a later request
/// naming it must not write the page.
#[test]
fn hostile_persistent_grant_revoked_while_mapped_is_never_written_again() {
    let (mut m, mut nb) = mock_with(Mechanism::Persistent, 512);
    let g = m.grant(0, false);
    assert!(m.put_rx(0, g.0));
    m.push_rx();
    assert!(nb.rx_enqueue(rx_frame(1)));
    assert_eq!(nb.rx_flush(), Ok(1));
    assert_eq!(m.read_data(0, 0, 1000), raw_frame(1000, 1));
    assert_eq!(m.take_rx_responses().unwrap().len(), 1);
    assert_eq!(
        (nb.stats.persistent_misses, nb.stats.persistent_mapped),
        (1, 1)
    );
    // The backend holds the mapping but no pin: the revocation succeeds at once.
    assert_eq!(m.gnt.entry(g).flags, GTF_PERMIT_ACCESS);
    assert!(m.gnt.end_access(g));
    // Watch the page: fill it, then give netback a request naming the revoked grant.
    let sentinel = vec![0x5a; PAGE_SIZE];
    m.write_data(0, 0, &sentinel);
    assert!(m.put_rx(1, g.0));
    m.push_rx();
    assert!(nb.rx_enqueue(rx_frame(2)));
    let r = nb.rx_flush();
    assert_eq!(
        m.read_data(0, 0, PAGE_SIZE),
        sentinel,
        "the page was written"
    );
    assert_eq!(nb.stats.persistent_evictions, 1);
    assert_eq!(m.hv.stats().persistent_moved, 0);
    assert_fatal(&mut m, &mut nb, r, Fatal::RxGrantRevoked);
    assert_eq!(m.read_data(0, 0, PAGE_SIZE), sentinel);
    // Granting it again does not revive the vif.
    m.gnt.grant_access(g, DomId::DRIVER, m.data_pfn(0), false);
    assert_eq!(nb.rx_flush(), Err(Fatal::RxGrantRevoked));
    assert_eq!(m.read_data(0, 0, PAGE_SIZE), sentinel);
}

/// Same for TX: a revoked TX grant is never read through the old mapping.
#[test]
fn hostile_persistent_tx_grant_revoked_ends_the_vif() {
    let (mut m, mut nb) = mock_with(Mechanism::Persistent, 512);
    let frame = raw_frame(300, 3);
    m.write_data(0, 0, &frame);
    let g = m.grant(0, true);
    let tx = |m: &mut MockFrontend, id| {
        assert!(m.put_tx(TxRequest {
            gref: g.0,
            offset: 0,
            flags: 0,
            id,
            size: 300,
        }));
        m.push_tx();
    };
    tx(&mut m, 0);
    let mut got = Vec::new();
    assert_eq!(nb.tx_poll(64, |p| got.push(p)), Ok(1));
    tx(&mut m, 1);
    assert_eq!(nb.tx_poll(64, |p| got.push(p)), Ok(1));
    assert!(got.iter().all(|p| p.head == frame));
    assert_eq!(
        (nb.stats.persistent_misses, nb.stats.persistent_hits),
        (1, 1)
    );
    assert!(m.gnt.end_access(g));
    tx(&mut m, 2);
    let r = nb.tx_poll(64, |_| panic!("read a revoked grant"));
    assert_fatal(&mut m, &mut nb, r, Fatal::TxGrantRevoked);
}

/// A grant ended and granted again for another page: the stale mapping is evicted, the new
/// page written, the old one left alone.
#[test]
fn persistent_grant_moved_to_another_page_is_remapped() {
    let (mut m, mut nb) = mock_with(Mechanism::Persistent, 512);
    let g = m.grant(0, false);
    m.put_rx(0, g.0);
    m.push_rx();
    nb.rx_enqueue(rx_frame(1));
    assert_eq!(nb.rx_flush(), Ok(1));
    assert!(m.gnt.end_access(g));
    m.gnt.grant_access(g, DomId::DRIVER, m.data_pfn(1), false);
    let old = m.read_data(0, 0, PAGE_SIZE);
    m.put_rx(1, g.0);
    m.push_rx();
    nb.rx_enqueue(rx_frame(2));
    assert_eq!(nb.rx_flush(), Ok(1));
    assert_eq!(m.read_data(1, 0, 1000), raw_frame(1000, 2));
    assert_eq!(m.read_data(0, 0, PAGE_SIZE), old);
    let s = &nb.stats;
    assert_eq!(
        (
            s.persistent_misses,
            s.persistent_hits,
            s.persistent_evictions,
            s.persistent_mapped
        ),
        (2, 0, 1, 1)
    );
    assert_eq!((s.grant_maps, s.grant_unmaps), (2, 1));
    assert_eq!(m.hv.stats().persistent_moved, 1);
    assert_eq!(nb.fatal(), None);
}

/// More live persistent grants than the table's bound end the vif; grants the frontend has
/// ended make room instead.
#[test]
fn hostile_more_persistent_grants_than_the_bound() {
    const MAX: usize = 8;
    let (mut m, mut nb) = mock_with(Mechanism::Persistent, MAX);
    let grefs: Vec<_> = (0..MAX as u32 + 2).map(|i| m.grant(i, false)).collect();
    for (i, g) in grefs[..MAX].iter().enumerate() {
        m.put_rx(i as u16, g.0);
    }
    m.push_rx();
    for i in 0..MAX as u32 {
        nb.rx_enqueue(rx_frame(i));
    }
    assert_eq!(nb.rx_flush(), Ok(MAX));
    assert_eq!(nb.stats.persistent_mapped, MAX as u64);
    // One ended grant: the next new one takes its place.
    assert!(m.gnt.end_access(grefs[3]));
    m.put_rx(20, grefs[MAX].0);
    m.push_rx();
    nb.rx_enqueue(rx_frame(20));
    assert_eq!(nb.rx_flush(), Ok(1));
    let s = &nb.stats;
    assert_eq!(
        (
            s.persistent_misses,
            s.persistent_evictions,
            s.persistent_mapped
        ),
        (MAX as u64 + 1, 1, MAX as u64)
    );
    assert_eq!(m.read_data(MAX as u32, 0, 1000), raw_frame(1000, 20));
    // Then one more live grant than the bound.
    m.put_rx(21, grefs[MAX + 1].0);
    m.push_rx();
    nb.rx_enqueue(rx_frame(21));
    let untouched = m.read_data(MAX as u32 + 1, 0, PAGE_SIZE);
    let r = nb.rx_flush();
    assert_eq!(m.read_data(MAX as u32 + 1, 0, PAGE_SIZE), untouched);
    assert_eq!(
        nb.stats.grant_maps,
        MAX as u64 + 1,
        "the extra grant was never mapped"
    );
    assert_fatal(&mut m, &mut nb, r, Fatal::PersistentOverflow);
}

#[test]
fn hostile_map_rx_bad_and_foreign_grefs() {
    // Beyond the table.
    let (mut m, mut nb) = mock_with(Mechanism::Map, 512);
    m.put_rx(0, 512);
    m.push_rx();
    nb.rx_enqueue(rx_frame(0));
    let r = nb.rx_flush();
    assert_fatal(&mut m, &mut nb, r, Fatal::RxBadGref);
    // Granted to another domain.
    let (mut m, mut nb) = mock_with(Mechanism::Map, 512);
    let g = m.gnt.alloc().unwrap();
    m.gnt
        .raw_write_entry(g, GTF_PERMIT_ACCESS, 5, m.data_pfn(0).0);
    m.put_rx(0, g.0);
    m.push_rx();
    nb.rx_enqueue(rx_frame(0));
    let before = m.hv.stats().general_error;
    let untouched = m.read_data(0, 0, PAGE_SIZE);
    let r = nb.rx_flush();
    assert_eq!(m.hv.stats().general_error, before + 1);
    assert_eq!(m.read_data(0, 0, PAGE_SIZE), untouched);
    assert_fatal(&mut m, &mut nb, r, Fatal::RxMapFailed);
    // Read-only: cannot be mapped for writing.
    let (mut m, mut nb) = mock_with(Mechanism::Map, 512);
    let g = m.grant(0, true);
    m.put_rx(0, g.0);
    m.push_rx();
    nb.rx_enqueue(rx_frame(0));
    let r = nb.rx_flush();
    assert_eq!(m.hv.stats().readonly_violation, 1);
    assert_fatal(&mut m, &mut nb, r, Fatal::RxMapFailed);
}

#[test]
fn hostile_map_tx_bad_and_foreign_grefs() {
    let post = |m: &mut MockFrontend, second: u32| {
        let frame = raw_frame(600, 9);
        m.write_data(0, 0, &frame[..400]);
        let g = m.grant(0, true);
        m.put_tx(TxRequest {
            gref: g.0,
            offset: 0,
            flags: NETTXF_MORE_DATA,
            id: 0,
            size: 600,
        });
        m.put_tx(TxRequest {
            gref: second,
            offset: 0,
            flags: 0,
            id: 1,
            size: 200,
        });
        m.push_tx();
    };
    // A second slot beyond the table.
    let (mut m, mut nb) = mock_with(Mechanism::Map, 512);
    post(&mut m, 9999);
    let r = nb.tx_poll(64, |_| panic!());
    assert_eq!(nb.stats.tx_copy_ops, 1, "the headers were copied");
    assert_fatal(&mut m, &mut nb, r, Fatal::TxBadGref);
    // A second slot granted to another domain: its map is refused.
    let (mut m, mut nb) = mock_with(Mechanism::Map, 512);
    let foreign = m.gnt.alloc().unwrap();
    m.gnt
        .raw_write_entry(foreign, GTF_PERMIT_ACCESS, 5, m.data_pfn(1).0);
    post(&mut m, foreign.0);
    let r = nb.tx_poll(64, |_| panic!());
    // The first slot's page beyond its headers was mapped and unmapped again.
    assert_eq!((nb.stats.grant_maps, nb.stats.grant_unmaps), (1, 1));
    assert_fatal(&mut m, &mut nb, r, Fatal::TxMapFailed);
    // A foreign first slot fails at the header copy.
    let (mut m, mut nb) = mock_with(Mechanism::Map, 512);
    let foreign = m.gnt.alloc().unwrap();
    m.gnt
        .raw_write_entry(foreign, GTF_PERMIT_ACCESS, 5, m.data_pfn(1).0);
    m.put_tx(TxRequest {
        gref: foreign.0,
        offset: 0,
        flags: 0,
        id: 0,
        size: 600,
    });
    m.push_tx();
    let r = nb.tx_poll(64, |_| panic!());
    assert_eq!(nb.stats.grant_maps, 0);
    assert_fatal(&mut m, &mut nb, r, Fatal::TxCopyFailed);
}

#[test]
fn hostile_persistent_foreign_and_bad_grefs() {
    let (mut m, mut nb) = mock_with(Mechanism::Persistent, 512);
    m.put_rx(0, 600);
    m.push_rx();
    nb.rx_enqueue(rx_frame(0));
    let r = nb.rx_flush();
    assert_fatal(&mut m, &mut nb, r, Fatal::RxBadGref);
    let (mut m, mut nb) = mock_with(Mechanism::Persistent, 512);
    let g = m.gnt.alloc().unwrap();
    m.gnt
        .raw_write_entry(g, GTF_PERMIT_ACCESS, 5, m.data_pfn(0).0);
    m.put_rx(0, g.0);
    m.push_rx();
    nb.rx_enqueue(rx_frame(0));
    let r = nb.rx_flush();
    assert_fatal(&mut m, &mut nb, r, Fatal::RxMapFailed);
}

/// A frontend that did not promise persistent grants gets `map`.
#[test]
fn persistent_without_the_frontends_promise_is_map() {
    assert_eq!(
        Config::negotiated(Mechanism::Persistent, false).mechanism,
        Mechanism::Map
    );
    assert_eq!(
        Config::negotiated(Mechanism::Persistent, true).mechanism,
        Mechanism::Persistent
    );
    assert_eq!(
        Config::negotiated(Mechanism::Copy, true).mechanism,
        Mechanism::Copy
    );
    for m in Mechanism::ALL {
        assert_eq!(m.name().parse::<Mechanism>(), Ok(m));
    }
    assert!("flop".parse::<Mechanism>().is_err());
    // flip needs the frontend's request (request-rx-copy = 0); without it, copy.
    assert_eq!(
        Config::negotiated_with(Mechanism::Flip, false, false).mechanism,
        Mechanism::Copy
    );
    assert_eq!(
        Config::negotiated_with(Mechanism::Flip, false, true).mechanism,
        Mechanism::Flip
    );
    let _ = Pfn(0);
}

/// The frontend's side of revocation: ending a persistent grant the backend is using at that
/// moment is refused by the hypervisor and deferred; the retry after the use succeeds.
#[test]
fn netfront_defers_ending_a_grant_the_backend_is_using() {
    let mut p = pair(Mechanism::Persistent);
    p.nf.rx_refill();
    let g =
        p.nf.rx_persistent_gref(0)
            .expect("buffer 0 has a persistent grant");
    // The backend's mapping of that grant, in the middle of a use.
    let pm =
        p.hv.map_grant_persistent(DomId::DRIVER, GUEST, g, false)
            .unwrap();
    let access = pm.access(true).unwrap();
    let other = p.nf.rx_persistent_gref(1).unwrap();
    assert!(p.hv.map_grant(DomId::DRIVER, GUEST, other, false).is_ok());
    assert_eq!(
        p.nf.end_persistent_grants(),
        1,
        "the grant in use is deferred"
    );
    // Every other grant is gone already: the backend cannot use them any more.
    assert!(p.hv.map_grant(DomId::DRIVER, GUEST, other, false).is_err());
    drop(access);
    assert_eq!(p.nf.end_persistent_grants(), 0);
    assert!(pm.access(true).is_err(), "ended: no further access");
}
