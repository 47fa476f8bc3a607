//! netback's pool mechanisms, `premapped` and `static` (`pvnet_dd::pool`), on the real ring
//! path — a real `Netfront` with its pool and a real `Netback` over one grant table, memfd
//! guest memory and an eventfd channel — and against the hostile mock frontend on a live data
//! path: bytes intact both ways with no grant operation per packet, counters exact, and each
//! abuse of the pool ending that vif only, with its own counter, while another vif keeps
//! carrying traffic both ways.

use std::collections::VecDeque;
use std::sync::Arc;

use pvnet_dd::mock::{MockFrontend, MockPhy, MOCK_DOMID};
use pvnet_dd::netback::{Config, Fatal, Mechanism, Netback};
use pvnet_dd::packet::Packet;
use pvnet_dd::pool::{PoolSpec, POOL_AUDIT_EVERY};
use pvnet_guest::netfront::{Layout, Netfront, PoolMode, RX_BUFS, TX_PAGES};
use pvnet_hv::evtchn::channel_pair;
use pvnet_hv::grant::{Hypervisor, GTF_PERMIT_ACCESS, GTF_READONLY};
use pvnet_hv::mem::GuestMemory;
use pvnet_hv::{DomId, PAGE_SIZE};
use pvnet_netif::*;
use pvnet_wire::vnet::VirtioNetHdr;

use crate::ring_common;
use ring_common::*;

use crate::dp_common;
use dp_common::{frame_to, pass, Path, MAC_G2, STACK_MAC};

const POOLS: [(Mechanism, PoolMode); 2] = [
    (Mechanism::Premapped, PoolMode::Premapped),
    (Mechanism::Static, PoolMode::Static),
];

// ------------------------------------------------------------------------------ harness

/// A netfront with its pool granted and a netback that mapped it, over `hv` as guest `dom`.
fn pool_pair(
    hv: &Arc<Hypervisor>,
    dom: DomId,
    mech: Mechanism,
    mode: PoolMode,
) -> (Netfront, Netback) {
    let layout = Layout { grant_frames: 4 };
    let mem = Arc::new(GuestMemory::create("guest", layout.pages()).unwrap());
    hv.add_domain(dom, mem.clone(), 4);
    let (front_end, back_end) = channel_pair().unwrap();
    let mut nf = Netfront::new(mem, layout, DomId::DRIVER, front_end).unwrap();
    let g = nf.use_pool(mode).expect("a fresh netfront grants its pool");
    assert_eq!((g.rx_slots, g.tx_slots), (RX_BUFS, TX_PAGES));
    let mut nb = Netback::connect_with(
        hv.clone(),
        dom,
        nf.tx_ring_ref(),
        nf.rx_ring_ref(),
        back_end,
        dp_common::features(),
        Config {
            mechanism: mech,
            ..Config::default()
        },
    )
    .unwrap();
    nb.attach_pool(PoolSpec {
        first_ref: g.first_ref,
        rx_slots: g.rx_slots,
        tx_slots: g.tx_slots,
    })
    .unwrap();
    (nf, nb)
}

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
    const FIXED: [usize; 10] = [14, 60, 1514, 4095, 4096, 4097, 9000, 20000, 65535, 65549];
    if i < FIXED.len() {
        return FIXED[i];
    }
    match rng.below(3) {
        0 => 14 + rng.below(1500),
        1 => 1515 + rng.below(15000),
        _ => 1515 + rng.below(65549 - 1515 + 1),
    }
}

// ------------------------------------------------------------------------------ both ways

/// Many sizes to the guest and from it under each pool mechanism: every byte intact, the pool
/// mapped once (512 pages) and no grant operation at all afterwards, one pool copy per data
/// slot in netback and, under `static`, one more in netfront.
#[test]
fn pools_carry_every_size_both_ways_with_no_grant_operation() {
    for (mech, mode) in POOLS {
        let hv = Arc::new(Hypervisor::new());
        let (mut nf, mut nb) = pool_pair(&hv, GUEST, mech, mode);
        assert_eq!(nb.stats.grant_mechanism, mech);
        assert_eq!((nb.stats.pool_maps, nb.stats.pool_mapped), (512, 512));
        let after_connect = hv.stats();
        assert_eq!(after_connect.maps, 2 + 512, "two rings and the pool");
        nf.rx_refill();
        let mut rng = XorShift(0x5eed ^ mech as u64);
        // RX
        let mut expected: VecDeque<Vec<u8>> = VecDeque::new();
        let mut got: Vec<Vec<u8>> = Vec::new();
        let mut slots = 0u64;
        let mut i = 0;
        while i < 600 {
            for _ in 0..1 + rng.below(20) {
                let len = random_len(&mut rng, i);
                let (hdr, frame) = frame_for(len, i as u32, &mut rng);
                slots += len.div_ceil(PAGE_SIZE) as u64;
                assert!(nb.rx_enqueue(Packet::linear(hdr, frame.clone())));
                expected.push_back(frame);
                i += 1;
            }
            for _ in 0..8 {
                nb.rx_flush().unwrap();
                nf.rx_poll(|_, pieces| {
                    got.push(pieces.concat());
                    Ok(())
                });
                if nb.rx_queued() == 0 {
                    break;
                }
            }
        }
        assert_eq!(got.len(), expected.len(), "{mech}");
        for (g, e) in got.iter().zip(&expected) {
            assert!(
                g == e,
                "{mech}: a packet of {} bytes arrived changed",
                e.len()
            );
        }
        // TX
        let mut sent: Vec<Vec<u8>> = Vec::new();
        let mut out: Vec<Vec<u8>> = Vec::new();
        let mut tx_slots = 0u64;
        for i in 0..400 {
            let len = random_len(&mut rng, i).min(65535);
            let (hdr, frame) = frame_for(len, 10_000 + i as u32, &mut rng);
            if tap_send(&mut nf, &hdr, &frame).unwrap().is_none() {
                nf.tx_push();
                nb.tx_poll(usize::MAX, |p| out.push(p.to_vec())).unwrap();
                nf.tx_complete();
                assert!(tap_send(&mut nf, &hdr, &frame).unwrap().is_some());
            }
            tx_slots += len.div_ceil(PAGE_SIZE) as u64;
            sent.push(frame);
        }
        nf.tx_push();
        nb.tx_poll(usize::MAX, |p| out.push(p.to_vec())).unwrap();
        nf.tx_complete();
        assert_eq!(out.len(), sent.len(), "{mech}");
        for (o, s) in out.iter().zip(&sent) {
            assert!(o == s, "{mech}: a packet of {} bytes left changed", s.len());
        }
        // Exactly one pool copy per data slot each way; nothing else touched a grant.
        let copies = match mech {
            Mechanism::Static => nb.stats.static_copies,
            _ => nb.stats.premapped_copies,
        };
        assert_eq!(copies, slots + tx_slots, "{mech}");
        let other = match mech {
            Mechanism::Static => nb.stats.premapped_copies,
            _ => nb.stats.static_copies,
        };
        assert_eq!(other, 0);
        let nf_copies = if mech == Mechanism::Static {
            slots + tx_slots
        } else {
            0
        };
        assert_eq!(nf.stats.static_copies, nf_copies, "{mech}");
        assert_eq!(
            hv.stats(),
            after_connect,
            "{mech}: a grant operation per packet"
        );
        assert_eq!((nb.stats.rx_copy_ops, nb.stats.tx_copy_ops), (0, 0));
        assert_eq!((nb.stats.grant_maps, nb.stats.grant_unmaps), (0, 0));
        assert_eq!(nb.fatal(), None);
        // Every grant stays pinned while the backend holds the pool: netfront cannot end
        // access (it defers); once the vif is unmapped, it can.
        assert_eq!(nf.end_pool(), 512);
        nb.unmap_all();
        assert_eq!((nb.stats.pool_unmaps, nb.stats.pool_mapped), (512, 0));
        assert_eq!(nf.end_pool(), 0);
    }
}

/// The audit runs by itself every POOL_AUDIT_EVERY packets and costs no grant operation.
#[test]
fn the_pool_is_audited_every_so_many_packets() {
    let hv = Arc::new(Hypervisor::new());
    let (mut nf, mut nb) = pool_pair(&hv, GUEST, Mechanism::Premapped, PoolMode::Premapped);
    nf.rx_refill();
    let before = hv.stats();
    let mut n = 0u64;
    while n < 2 * POOL_AUDIT_EVERY + 10 {
        for _ in 0..64 {
            assert!(nb.rx_enqueue(Packet::linear(
                VirtioNetHdr::default(),
                raw_frame(60, n as u32)
            )));
        }
        n += nb.rx_flush().unwrap() as u64;
        nf.rx_poll(|_, _| Ok(()));
    }
    assert_eq!(nb.stats.pool_audits, 2);
    assert_eq!(hv.stats(), before);
}

// ------------------------------------------------------------------------------ hostile

const MAC_MOCK: [u8; 6] = [0x00, 0x16, 0x3e, 0x00, 0x00, 0x01];
/// A host beyond the physical port (unknown to the switch: flooded).
const MAC_REMOTE: [u8; 6] = [0x02, 0, 0, 0, 0, 0x99];
const POOL_RX: u32 = 4;
const POOL_TX: u32 = 4;

/// A live data path with two vifs under `mech`: the hostile mock frontend (guest 1, its pool
/// of POOL_RX + POOL_TX pages granted from data pages 0..8 and mapped), and a well-behaved
/// netfront with its full pool (guest 2).
struct Live {
    dp: Path,
    m: MockFrontend,
    spec: PoolSpec,
    good: dp_common::Guest,
}

fn mock_pool(mech: Mechanism, rx_readonly: bool) -> (MockFrontend, Netback, PoolSpec) {
    let (mut m, nb) = MockFrontend::connect_with(
        24,
        dp_common::features(),
        Config {
            mechanism: mech,
            ..Config::default()
        },
    )
    .unwrap();
    let first = m.grant(0, rx_readonly);
    for i in 1..POOL_RX + POOL_TX {
        let g = m.grant(i, i >= POOL_RX || rx_readonly);
        assert_eq!(
            g.0,
            first.0 + i,
            "the mock allocates consecutive references"
        );
    }
    let spec = PoolSpec {
        first_ref: first.0,
        rx_slots: POOL_RX,
        tx_slots: POOL_TX,
    };
    (m, nb, spec)
}

fn live(mech: Mechanism, mode: PoolMode) -> Live {
    let (m, mut nb, spec) = mock_pool(mech, false);
    nb.attach_pool(spec).unwrap();
    let (mut dp, _clock, _) = dp_common::path_with(&[], None, 64);
    dp.add_guest_port(MOCK_DOMID.0);
    assert!(dp.connect_vif(MOCK_DOMID.0, MAC_MOCK, nb));
    let hv = Arc::new(Hypervisor::new());
    let (mut nf, nb2) = pool_pair(&hv, DomId(2), mech, mode);
    nf.rx_refill();
    dp.add_guest_port(2);
    assert!(dp.connect_vif(2, MAC_G2, nb2));
    Live {
        dp,
        m,
        spec,
        good: dp_common::Guest { dom: 2, nf },
    }
}

impl Live {
    /// The other vif carries frames both ways, intact, and its counters move by exactly that.
    fn other_vif_keeps_working(&mut self, round: u8) {
        let before = self.dp.vif_stats(2).expect("still on the path").clone();
        let frames: Vec<Vec<u8>> = (0..20)
            .map(|i| frame_to(MAC_G2, STACK_MAC, 60 + 70 * i, round ^ i as u8))
            .collect();
        for f in &frames {
            self.dp.phy_mut().unwrap().inject(f);
        }
        pass(&mut self.dp);
        assert_eq!(self.good.take_bytes(), frames);
        let out: Vec<Vec<u8>> = (0..20)
            .map(|i| frame_to(MAC_REMOTE, MAC_G2, 100 + 50 * i, round ^ 0x80 ^ i as u8))
            .collect();
        self.dp.phy_mut().unwrap().tx.clear();
        for f in &out {
            self.good.send(f);
        }
        self.dp.vif_event(2);
        pass(&mut self.dp);
        let phy: &MockPhy = self.dp.phy().unwrap();
        let sent: Vec<Vec<u8>> = phy.tx.iter().map(|(_, b)| b.clone()).collect();
        assert_eq!(sent, out);
        self.good.nf.tx_complete();
        let after = self.dp.vif_stats(2).unwrap();
        assert_eq!(after.rx_packets, before.rx_packets + 20);
        assert_eq!(after.tx_packets, before.tx_packets + 20);
        assert_eq!(after.fatal_count(), 0);
    }

    /// The mock's vif was taken off the path for `f`, counted once, its pool unmapped.
    fn mock_failed_with(&mut self, f: Fatal) -> Netback {
        let mut failed = self.dp.take_failed();
        assert_eq!(failed.len(), 1, "exactly the hostile vif failed");
        let (dom, nb, got) = failed.pop().unwrap();
        assert_eq!((dom, got), (MOCK_DOMID.0, f));
        let v = serde_json::to_value(&nb.stats).unwrap();
        assert_eq!(v[f.name()].as_u64(), Some(1), "counter {}", f.name());
        assert_eq!(nb.stats.pool_mapped, 0);
        assert_eq!(nb.stats.pool_maps, nb.stats.pool_unmaps);
        // Nothing of the pool stays pinned: the frontend can end access to all of it.
        for i in 0..self.spec.rx_slots {
            assert!(self.m.gnt.end_access(self.spec.rx_ref(i)));
        }
        nb
    }
}

/// Helper on VifStats: every fatal counter summed (through its JSON form, so a new reason is
/// not forgotten).
trait FatalCount {
    fn fatal_count(&self) -> u64;
}

impl FatalCount for pvnet_dd::netback::VifStats {
    fn fatal_count(&self) -> u64 {
        let v = serde_json::to_value(self).unwrap();
        [
            "rx_pool_bad_slot",
            "tx_pool_bad_slot",
            "pool_map_failed",
            "pool_revoked",
            "tx_bad_size",
            "tx_cross_page",
            "rx_ring_overflow",
            "tx_ring_overflow",
        ]
        .iter()
        .map(|k| v[*k].as_u64().unwrap())
        .sum()
    }
}

/// An RX request naming a slot beyond the pool's RX slots (or a TX slot, or 2^32 - 1) ends
/// that vif; no pool page is written; the other vif carries on.
#[test]
fn hostile_rx_slot_outside_the_pool() {
    for (mech, mode) in POOLS {
        for bad in [POOL_RX, POOL_RX + POOL_TX, u32::MAX] {
            let mut l = live(mech, mode);
            l.other_vif_keeps_working(1);
            let sentinel = vec![0xa5u8; PAGE_SIZE];
            for i in 0..POOL_RX + POOL_TX + 1 {
                l.m.write_data(i, 0, &sentinel);
            }
            // One good request, then the bad one: a broadcast reaches both vifs.
            assert!(l.m.put_rx(0, 0));
            assert!(l.m.put_rx(1, bad));
            l.m.push_rx();
            l.dp.vif_event(MOCK_DOMID.0);
            for k in 0..2 {
                l.dp.phy_mut()
                    .unwrap()
                    .inject(&frame_to([0xff; 6], STACK_MAC, 200, k));
            }
            pass(&mut l.dp);
            l.mock_failed_with(Fatal::RxPoolBadSlot);
            // The batch was refused whole: not even the good slot was written.
            for i in 0..POOL_RX + POOL_TX + 1 {
                assert_eq!(l.m.read_data(i, 0, PAGE_SIZE), sentinel, "{mech}: page {i}");
            }
            // The broadcasts reached the good guest.
            assert_eq!(l.good.take_bytes().len(), 2);
            l.other_vif_keeps_working(2);
        }
    }
}

/// TX requests naming a slot outside the pool's TX slots end the vif.
#[test]
fn hostile_tx_slot_outside_the_pool() {
    for (mech, mode) in POOLS {
        for bad in [POOL_TX, POOL_TX + POOL_RX, u32::MAX] {
            let mut l = live(mech, mode);
            assert!(l.m.put_tx(TxRequest {
                gref: bad,
                offset: 0,
                flags: 0,
                id: 0,
                size: 100,
            }));
            l.m.push_tx();
            l.dp.vif_event(MOCK_DOMID.0);
            pass(&mut l.dp);
            l.mock_failed_with(Fatal::TxPoolBadSlot);
            l.other_vif_keeps_working(3);
        }
    }
}

/// TX requests that lie about lengths and offsets inside a valid slot: each ends the vif with
/// the reason every mechanism uses; no byte is read beyond the slot's page.
#[test]
fn hostile_tx_lengths_that_lie() {
    /// (offset, size, flags) of each slot, and the reason the vif ends for.
    type Lie = (&'static [(u16, u16, u16)], Fatal);
    let lies: [Lie; 4] = [
        (&[(4000, 200, 0)], Fatal::TxCrossPage),
        (&[(5000, 60, 0)], Fatal::TxCrossPage),
        // The rest of the chain is as long as the packet it claims to be part of.
        (&[(0, 100, NETTXF_MORE_DATA), (0, 100, 0)], Fatal::TxBadSize),
        // The first slot's share (total - rest) does not fit its page.
        (
            &[(100, 8000, NETTXF_MORE_DATA), (0, 10, 0)],
            Fatal::TxCrossPage,
        ),
    ];
    for (mech, mode) in POOLS {
        for (slots, f) in lies {
            let mut l = live(mech, mode);
            for (i, &(offset, size, flags)) in slots.iter().enumerate() {
                assert!(l.m.put_tx(TxRequest {
                    gref: i as u32,
                    offset,
                    flags,
                    id: i as u16,
                    size,
                }));
            }
            l.m.push_tx();
            l.dp.vif_event(MOCK_DOMID.0);
            pass(&mut l.dp);
            l.mock_failed_with(f);
            l.other_vif_keeps_working(4);
        }
    }
}

/// A pool that is not all granted at connect — a grant revoked before, granted to another
/// domain, read-only where the backend writes, or beyond the table — is refused whole:
/// `pool_map_failed`, and nothing stays mapped or pinned.
#[test]
fn hostile_pool_not_granted_at_connect() {
    for (mech, _) in POOLS {
        type Spoil = fn(&mut MockFrontend, &mut PoolSpec);
        let spoilers: [(&str, Spoil); 4] = [
            ("revoked", |m, s| {
                assert!(m.gnt.end_access(s.tx_ref(POOL_TX - 1)));
            }),
            ("foreign", |m, s| {
                let pfn = m.data_pfn(2);
                m.gnt.grant_access(s.rx_ref(2), DomId(7), pfn, false);
            }),
            ("read-only rx", |m, s| {
                let pfn = m.data_pfn(1);
                m.gnt.grant_access(s.rx_ref(1), DomId::DRIVER, pfn, true);
            }),
            ("beyond the table", |m, s| {
                s.first_ref = m.nr_grant_entries() - POOL_RX;
            }),
        ];
        for (what, spoil) in spoilers {
            let (mut m, mut nb, mut spec) = mock_pool(mech, false);
            spoil(&mut m, &mut spec);
            let maps = m.hv.stats().maps;
            assert_eq!(nb.attach_pool(spec), Err(Fatal::PoolMapFailed), "{what}");
            assert_eq!(nb.fatal(), Some(Fatal::PoolMapFailed));
            assert_eq!(nb.stats.pool_map_failed, 1);
            assert_eq!(nb.stats.pool_mapped, 0);
            assert_eq!(nb.stats.pool_maps, nb.stats.pool_unmaps, "{what}");
            let hv = m.hv.stats();
            assert_eq!(hv.maps - maps, nb.stats.pool_maps, "{what}");
            // Every pool grant that was granted can be ended: no pin left behind.
            for i in 0..POOL_RX {
                let r = spec.rx_ref(i);
                if r.0 < m.nr_grant_entries() {
                    let e = m.gnt.entry(r);
                    if e.flags & GTF_PERMIT_ACCESS != 0 {
                        assert!(m.gnt.end_access(r), "{what}: slot {i} still pinned");
                    }
                }
            }
            // And the vif stays dead.
            assert!(nb.rx_enqueue(Packet::linear(VirtioNetHdr::default(), raw_frame(60, 0))));
            assert_eq!(nb.rx_flush(), Err(Fatal::PoolMapFailed));
        }
        // A pool named twice, or to a vif of another mechanism, is refused too.
        let (_m, mut nb, spec) = mock_pool(mech, false);
        nb.attach_pool(spec).unwrap();
        assert_eq!(nb.attach_pool(spec), Err(Fatal::PoolMapFailed));
        let (_m, mut nb, spec) = mock_pool(Mechanism::Copy, false);
        assert_eq!(nb.attach_pool(spec), Err(Fatal::PoolMapFailed));
    }
}

/// Revocation while the pool is mapped. The frontend's `end_access` is refused (the grants are
/// pinned, as Xen's mapped grants are), so the backend only ever writes pages that are still
/// granted; once the vif is taken off the path the pool is unmapped and every grant can be
/// ended. The other vif keeps working throughout.
#[test]
fn hostile_pool_revoked_while_mapped() {
    for (mech, mode) in POOLS {
        let mut l = live(mech, mode);
        for i in 0..POOL_RX {
            assert!(
                !l.m.gnt.end_access(l.spec.rx_ref(i)),
                "{mech}: rx slot {i} revoked"
            );
        }
        for j in 0..POOL_TX {
            assert!(
                !l.m.gnt.end_access(l.spec.tx_ref(j)),
                "{mech}: tx slot {j} revoked"
            );
        }
        // Still granted, so still written: a packet lands in slot 3.
        assert!(l.m.put_rx(0, 3));
        l.m.push_rx();
        l.dp.vif_event(MOCK_DOMID.0);
        let f = frame_to(MAC_MOCK, STACK_MAC, 300, 9);
        l.dp.phy_mut().unwrap().inject(&f);
        pass(&mut l.dp);
        assert_eq!(l.m.read_data(3, 0, 300), f);
        assert!(l.dp.take_failed().is_empty());
        l.other_vif_keeps_working(5);
        // The guest goes away: the toolstack takes the vif off, which unmaps the pool.
        let nb = l.dp.disconnect_vif(MOCK_DOMID.0).unwrap();
        assert_eq!((nb.stats.pool_mapped, nb.stats.pool_unmaps), (0, 8));
        for i in 0..POOL_RX {
            assert!(l.m.gnt.end_access(l.spec.rx_ref(i)));
        }
        for j in 0..POOL_TX {
            assert!(l.m.gnt.end_access(l.spec.tx_ref(j)));
        }
        l.other_vif_keeps_working(6);
    }
}

/// The audit, on a vif on the path: a rewritten pool entry ends the vif with `pool_revoked`
/// at the next audit, the pool is unmapped, and the other vif carries on.
#[test]
fn hostile_rewritten_pool_entry_is_found_by_the_audit() {
    for (mech, mode) in POOLS {
        for clobber in [0u16, GTF_PERMIT_ACCESS | GTF_READONLY] {
            let (mut m, mut nb, spec) = mock_pool(mech, false);
            nb.attach_pool(spec).unwrap();
            assert_eq!(nb.audit_pool(), Ok(()));
            let pfn = m.data_pfn(1);
            m.gnt
                .raw_write_entry(spec.rx_ref(1), clobber, DomId::DRIVER.0, pfn.0);
            // Packets flow until the audit is due; then the vif ends.
            let mut n = 0u64;
            let r = loop {
                for id in 0..POOL_RX as u16 {
                    m.put_rx(id, u32::from(id));
                }
                m.push_rx();
                for _ in 0..POOL_RX {
                    nb.rx_enqueue(Packet::linear(VirtioNetHdr::default(), raw_frame(60, 1)));
                }
                match nb.rx_flush() {
                    Ok(k) => n += k as u64,
                    Err(f) => break f,
                }
                m.take_rx_responses().unwrap();
                assert!(n <= POOL_AUDIT_EVERY, "the audit did not run");
            };
            assert_eq!(r, Fatal::PoolRevoked);
            assert_eq!(n + POOL_RX as u64, POOL_AUDIT_EVERY);
            assert_eq!(nb.stats.pool_revoked, 1);
            assert_eq!((nb.stats.pool_mapped, nb.stats.pool_unmaps), (0, 8));
        }
        // On a live path: the hostile vif ends at its audit, the other keeps working.
        let mut l = live(mech, mode);
        let pfn = l.m.data_pfn(0);
        l.m.gnt
            .raw_write_entry(l.spec.rx_ref(0), 0, DomId::DRIVER.0, pfn.0);
        let mut sent = 0u64;
        while l.dp.vif_stats(MOCK_DOMID.0).is_some() {
            for id in 0..POOL_RX as u16 {
                l.m.put_rx(id, u32::from(id));
            }
            l.m.push_rx();
            l.dp.vif_event(MOCK_DOMID.0);
            for k in 0..POOL_RX {
                l.dp.phy_mut()
                    .unwrap()
                    .inject(&frame_to(MAC_MOCK, STACK_MAC, 60, k as u8));
            }
            pass(&mut l.dp);
            let _ = l.m.take_rx_responses();
            sent += u64::from(POOL_RX);
            assert!(sent <= 2 * POOL_AUDIT_EVERY);
        }
        l.mock_failed_with(Fatal::PoolRevoked);
        l.other_vif_keeps_working(6);
    }
}
