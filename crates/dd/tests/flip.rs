//! netback's `flip` mechanism on the real ring path: a real `Netfront` with a flip window and a
//! real `Netback` over one hypervisor with machine frames, packets that arrived in the driver
//! domain's frames (as the frame port delivers them) and packets that did not; and hostile
//! frontends next to a good one: a bad or foreign transfer gref, an offer that is not a
//! transfer, a page the guest does not own, a guest that stops posting buffers. Each hostile
//! vif ends (or is bounded) with a named counter while the good vif keeps receiving intact.

use std::sync::Arc;

use pvnet_dd::frameport::FramePool;
use pvnet_dd::netback::{Config, Fatal, Features, Mechanism, Netback, RX_QUEUE_LIMIT};
use pvnet_dd::packet::Packet;
use pvnet_guest::netfront::{Layout, Netfront, RX_BUFS};
use pvnet_hv::evtchn::channel_pair;
use pvnet_hv::frames::Machine;
use pvnet_hv::grant::{GuestGrantTable, Hypervisor, GTF_ACCEPT_TRANSFER, GTF_PERMIT_ACCESS};
use pvnet_hv::mem::{GuestMemory, OwnPage};
use pvnet_hv::{DomId, GrantRef, Pfn};
use pvnet_netif::*;
use pvnet_pnic::{Buf, FrameSource, LentBuf};
use pvnet_wire::vnet::VirtioNetHdr;

use crate::ring_common;
use ring_common::*;

const POOL: u32 = 64;

fn features() -> Features {
    pvnet_dd::mock::sg_tso4_features()
}

struct World {
    hv: Arc<Hypervisor>,
    machine: Arc<Machine>,
    pool: Arc<FramePool>,
}

impl World {
    fn new() -> World {
        let hv = Arc::new(Hypervisor::new());
        let machine = Machine::create("machine", POOL + 4 * RX_BUFS).unwrap();
        hv.set_machine(machine.clone());
        let pool = FramePool::new(&hv, POOL).unwrap();
        World { hv, machine, pool }
    }

    /// A guest `dom` with a flip window over its RX buffers, its netfront switched to flip
    /// and a netback for it negotiated as the daemon does.
    fn good_guest(&self, dom: DomId) -> (Netfront, Netback) {
        let layout = Layout { grant_frames: 4 };
        let mem = Arc::new(GuestMemory::create("guest", layout.pages()).unwrap());
        let first = layout.rx_buf(0).0;
        let p2m = self.machine.add_domain(dom, first, RX_BUFS).unwrap();
        mem.attach_frames(self.machine.fd(), first, &p2m).unwrap();
        self.hv.add_domain(dom, mem.clone(), 4);
        let (front_end, back_end) = channel_pair().unwrap();
        let mut nf = Netfront::new(mem, layout, DomId::DRIVER, front_end).unwrap();
        assert!(nf.use_flip());
        let config = Config::negotiated_with(Mechanism::Flip, false, true);
        let mut nb = Netback::connect_with(
            self.hv.clone(),
            dom,
            nf.tx_ring_ref(),
            nf.rx_ring_ref(),
            back_end,
            features(),
            config,
        )
        .unwrap();
        nb.set_frame_pool(self.pool.clone());
        nf.rx_refill();
        (nf, nb)
    }

    /// A packet sitting in a driver-domain frame, as the frame port hands it over.
    fn in_frame(&self, bytes: &[u8]) -> Packet {
        let (id, page) = self.pool.take().expect("a free frame");
        // SAFETY: a free frame of the pool, one page; `bytes` is private memory.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), page.as_ptr(), bytes.len()) };
        let src: Arc<dyn FrameSource> = self.pool.clone();
        // SAFETY: (id, page) came from take() and is not given back; len <= 4096.
        let lent = unsafe { LentBuf::new(src, id, page, 0, bytes.len()) };
        Packet::linear(VirtioNetHdr::default(), Buf::from(lent))
    }

    fn assert_conserved(&self, guests: &[DomId]) {
        self.machine.with_table(|t| t.check()).unwrap();
        assert_eq!(self.machine.owned(DomId::DRIVER), POOL);
        for g in guests {
            assert_eq!(self.machine.owned(*g), RX_BUFS);
        }
    }
}

/// Sends `n` frames (every other one in a driver frame, the rest on the heap) to the good
/// guest and checks every byte and the counters.
fn deliver(w: &World, nf: &mut Netfront, nb: &mut Netback, n: u32, seed: u32) {
    let before = nb.stats.clone();
    let mut want = Vec::new();
    let mut got = Vec::new();
    let mut heap = 0;
    for i in 0..n {
        let f = raw_frame(60 + (i as usize * 97) % 1455, seed + i);
        let p = if i % 2 == 0 {
            w.in_frame(&f)
        } else {
            heap += 1;
            Packet::linear(VirtioNetHdr::default(), f.clone())
        };
        want.push(f);
        assert!(nb.rx_enqueue(p));
        nb.rx_flush().unwrap();
        nf.rx_poll(|_, pieces| {
            got.push(pieces.concat());
            Ok(())
        });
    }
    assert_eq!(got, want);
    assert_eq!(nb.stats.rx_flips - before.rx_flips, u64::from(n));
    assert_eq!(nb.stats.rx_flip_copied - before.rx_flip_copied, heap);
    assert_eq!(nb.stats.rx_copy_ops, 0);
    assert_eq!(
        w.pool.free(),
        POOL as usize,
        "every driver frame is back in the pool"
    );
}

#[test]
fn flip_delivers_every_byte_and_conserves_frames() {
    let w = World::new();
    let g = DomId(1);
    let (mut nf, mut nb) = w.good_guest(g);
    deliver(&w, &mut nf, &mut nb, 3 * RX_BUFS, 1);
    assert_eq!(nf.stats.rx_flips, u64::from(3 * RX_BUFS));
    assert_eq!(w.machine.stats().flips, u64::from(3 * RX_BUFS));
    w.assert_conserved(&[g]);
    assert_eq!(nb.fatal(), None);
}

#[test]
fn flip_carries_one_page_per_packet() {
    // The frontend advertised sg and GSO; under flip netback cuts an aggregate back into
    // segments and drops what is longer than a page without them.
    let w = World::new();
    let (mut nf, mut nb) = w.good_guest(DomId(1));
    assert!(!nb.features().sg && !nb.features().gso_tcpv4);
    assert!(!nb.rx_enqueue(Packet::linear(VirtioNetHdr::default(), raw_frame(5000, 3))));
    assert_eq!(nb.stats.rx_no_sg, 1);
    assert!(nb.rx_enqueue(Packet::linear(
        tso(1448),
        tcp4_frame(14 + 20 + 20 + 4 * 1448, 5)
    )));
    assert_eq!(nb.stats.rx_gso_segmented, 1);
    nb.rx_flush().unwrap();
    let mut n = 0;
    nf.rx_poll(|_, _| {
        n += 1;
        Ok(())
    });
    assert_eq!(n, 4);
}

/// A hostile frontend: its own rings and grant table, a flip window, nothing else.
struct Hostile {
    gnt: GuestGrantTable,
    rx: FrontRing<RxRing, OwnPage>,
    nb: Netback,
    window_first: u32,
}

fn hostile(w: &World, dom: DomId) -> Hostile {
    // Page 0 grant table, 1 TX ring, 2 RX ring, 3..3+8 flip window.
    let mem = Arc::new(GuestMemory::create("hostile", 3 + 8).unwrap());
    let p2m = w.machine.add_domain(dom, 3, 8).unwrap();
    mem.attach_frames(w.machine.fd(), 3, &p2m).unwrap();
    w.hv.add_domain(dom, mem.clone(), 1);
    let mut gnt = GuestGrantTable::new(mem.clone(), 1);
    let tx = FrontRing::<TxRing, _>::init(OwnPage::new(mem.clone(), Pfn(1)).unwrap());
    let rx = FrontRing::<RxRing, _>::init(OwnPage::new(mem.clone(), Pfn(2)).unwrap());
    let (txr, rxr) = (gnt.alloc().unwrap(), gnt.alloc().unwrap());
    gnt.grant_access(txr, DomId::DRIVER, Pfn(1), false);
    gnt.grant_access(rxr, DomId::DRIVER, Pfn(2), false);
    drop(tx);
    let (_front, back) = channel_pair().unwrap();
    let mut nb = Netback::connect_with(
        w.hv.clone(),
        dom,
        txr,
        rxr,
        back,
        features(),
        Config::negotiated_with(Mechanism::Flip, false, true),
    )
    .unwrap();
    nb.set_frame_pool(w.pool.clone());
    Hostile {
        gnt,
        rx,
        nb,
        window_first: 3,
    }
}

/// Posts one RX request naming `gref`, gives the hostile vif a frame-port packet, and
/// expects its vif to end with `f` (counted once) while the good vif keeps receiving.
fn expect_fatal(
    w: &World,
    h: &mut Hostile,
    gref: GrantRef,
    f: Fatal,
    good: &mut (Netfront, Netback),
) {
    h.rx.put_request(&RxRequest {
        id: 0,
        gref: gref.0,
    });
    h.rx.push_requests();
    let refused = w.machine.stats().flips_refused;
    assert!(h.nb.rx_enqueue(w.in_frame(&raw_frame(900, 7))));
    assert_eq!(h.nb.rx_flush(), Err(f));
    assert_eq!(h.nb.fatal(), Some(f));
    let v = serde_json::to_value(&h.nb.stats).unwrap();
    assert_eq!(v[f.name()].as_u64(), Some(1), "counter {}", f.name());
    assert_eq!(h.nb.stats.rx_flips, 0);
    if f != Fatal::RxBadGref {
        assert_eq!(w.machine.stats().flips_refused, refused + 1);
    }
    // Dead: nothing more is taken or answered.
    assert_eq!(h.nb.rx_flush(), Err(f));
    // Its packet's frame went back to the pool; the good guest is unaffected.
    let (nf, nb) = good;
    deliver(w, nf, nb, 40, 100);
    assert_eq!(nb.fatal(), None);
}

#[test]
fn hostile_transfer_grefs_end_that_vif_only() {
    let w = World::new();
    let mut good = w.good_guest(DomId(1));
    let mut all = vec![DomId(1)];
    type MakeGref = Box<dyn Fn(&mut Hostile) -> GrantRef>;
    let cases: Vec<(&str, MakeGref, Fatal)> = vec![
        (
            "a gref beyond the table",
            Box::new(|h: &mut Hostile| GrantRef(h.gnt.nr_entries() + 3)),
            Fatal::RxBadGref,
        ),
        (
            "an offer to another domain (foreign)",
            Box::new(|h: &mut Hostile| {
                let r = h.gnt.alloc().unwrap();
                h.gnt
                    .raw_write_entry(r, GTF_ACCEPT_TRANSFER, 5, h.window_first);
                r
            }),
            Fatal::RxFlipRefused,
        ),
        (
            "an access grant, not a transfer offer",
            Box::new(|h: &mut Hostile| {
                let r = h.gnt.alloc().unwrap();
                h.gnt
                    .raw_write_entry(r, GTF_PERMIT_ACCESS, 0, h.window_first);
                r
            }),
            Fatal::RxFlipRefused,
        ),
        (
            "a page the guest does not own as a frame (its grant table)",
            Box::new(|h: &mut Hostile| {
                let r = h.gnt.alloc().unwrap();
                h.gnt.grant_transfer(r, DomId::DRIVER, Pfn(0));
                r
            }),
            Fatal::RxFlipRefused,
        ),
        (
            "a page beyond its memory",
            Box::new(|h: &mut Hostile| {
                let r = h.gnt.alloc().unwrap();
                h.gnt.grant_transfer(r, DomId::DRIVER, Pfn(1 << 30));
                r
            }),
            Fatal::RxFlipRefused,
        ),
    ];
    for (i, (what, gref, f)) in cases.into_iter().enumerate() {
        let dom = DomId(2 + i as u16);
        let mut h = hostile(&w, dom);
        let r = gref(&mut h);
        eprintln!("case: {what}");
        expect_fatal(&w, &mut h, r, f, &mut good);
        all.push(dom);
        w.assert_conserved(&[]);
        for d in &all[1..] {
            assert_eq!(
                w.machine.owned(*d),
                8,
                "{what}: the hostile guest kept its frames"
            );
        }
    }
}

#[test]
fn a_guest_that_stops_posting_buffers_holds_no_driver_frame_and_is_bounded() {
    // A guest that stops giving pages back (posts no RX request): its packets wait in its
    // queue, bounded by the queue limit (rx_queue_full counts the rest); detaching them (the
    // data path does when the pool runs low) returns their frames, and the good guest keeps
    // receiving from the same pool.
    let w = World::new();
    let mut good = w.good_guest(DomId(1));
    let mut h = hostile(&w, DomId(2));
    h.nb.set_rx_queue_limit(POOL as usize / 2);
    let mut dropped = 0;
    for i in 0..POOL {
        if !h.nb.rx_enqueue(w.in_frame(&raw_frame(500, i))) {
            dropped += 1;
        }
        h.nb.rx_flush().unwrap();
    }
    assert_eq!(dropped, POOL / 2);
    assert_eq!(h.nb.stats.rx_queue_full, u64::from(POOL / 2));
    assert_eq!(
        w.pool.free(),
        POOL as usize / 2,
        "the queued packets hold their frames"
    );
    assert_eq!(h.nb.detach_queued(), POOL as usize / 2);
    assert_eq!(w.pool.free(), POOL as usize);
    let (nf, nb) = &mut good;
    deliver(&w, nf, nb, 100, 9);
    assert_eq!(h.nb.fatal(), None);
    w.assert_conserved(&[DomId(1)]);
    assert_eq!(w.machine.owned(DomId(2)), 8);
    assert!(RX_QUEUE_LIMIT > POOL as usize / 2);
}

#[test]
fn packet_frames_never_leak_on_a_flip_storm() {
    // Frames circulate: many more packets than the pool holds, all from the frame port.
    let w = World::new();
    let (mut nf, mut nb) = w.good_guest(DomId(1));
    for round in 0..20u32 {
        for i in 0..POOL / 2 {
            assert!(nb.rx_enqueue(w.in_frame(&raw_frame(1514, round * 100 + i))));
        }
        nb.rx_flush().unwrap();
        let mut n = 0;
        nf.rx_poll(|_, pieces| {
            assert_eq!(pieces.concat().len(), 1514);
            n += 1;
            Ok(())
        });
        assert_eq!(n, POOL / 2);
        assert_eq!(w.pool.free(), POOL as usize);
    }
    w.assert_conserved(&[DomId(1)]);
}

#[test]
fn tx_under_flip_is_grant_copy() {
    // Xen flipped only on receive; the guest's packets are grant-copied.
    let w = World::new();
    let (mut nf, mut nb) = w.good_guest(DomId(1));
    let mut sent = Vec::new();
    for i in 0..20u32 {
        let frame = raw_frame(100 + 50 * i as usize, i);
        assert!(tap_send(&mut nf, &VirtioNetHdr::default(), &frame)
            .unwrap()
            .is_some());
        sent.push(frame);
    }
    nf.tx_push();
    let mut got = Vec::new();
    nb.tx_poll(usize::MAX, |p| got.push(p.head.to_vec()))
        .unwrap();
    assert_eq!(got, sent);
    assert_eq!(nb.stats.tx_copy_ops, 20);
    assert_eq!(nb.stats.grant_maps, 0);
    assert_eq!(w.hv.stats().maps, 2, "only the two ring pages are mapped");
}

#[test]
fn guest_to_guest_under_flip_is_one_copy_then_a_flip() {
    // The seed's old guest-to-guest path: netback copies the sender's page into a
    // driver-domain frame (TX), and that frame is flipped to the receiver as it is (RX).
    let w = World::new();
    let (mut a_nf, mut a_nb) = w.good_guest(DomId(1));
    let (mut b_nf, mut b_nb) = w.good_guest(DomId(2));
    let mut sent = Vec::new();
    let mut got = Vec::new();
    for round in 0..10u32 {
        for i in 0..20u32 {
            let frame = raw_frame(
                60 + ((round * 20 + i) as usize * 131) % 1455,
                round * 20 + i,
            );
            assert!(tap_send(&mut a_nf, &VirtioNetHdr::default(), &frame)
                .unwrap()
                .is_some());
            sent.push(frame);
        }
        a_nf.tx_push();
        let mut pkts = Vec::new();
        a_nb.tx_poll(usize::MAX, |p| pkts.push(p)).unwrap();
        a_nf.tx_complete();
        for p in pkts {
            assert!(p.head.lent().is_some(), "copied into a driver frame");
            assert!(b_nb.rx_enqueue(p));
        }
        b_nb.rx_flush().unwrap();
        b_nf.rx_poll(|_, pieces| {
            got.push(pieces.concat());
            Ok(())
        });
    }
    assert!(
        got == sent,
        "{} of {} frames, bytes differ",
        got.len(),
        sent.len()
    );
    assert_eq!(a_nb.stats.tx_into_frame, 200);
    assert_eq!(a_nb.stats.tx_copy_ops, 200);
    assert_eq!(b_nb.stats.rx_flips, 200);
    assert_eq!(b_nb.stats.rx_flip_copied, 0, "no second copy");
    assert_eq!(w.pool.free(), POOL as usize);
    w.assert_conserved(&[DomId(1), DomId(2)]);
}
