//! A backend that goes away and a new one that takes its place (a driver domain restarted,
//! docs/restart.md) on the real ring path: a real `Netfront`, a real `Netback` that is then
//! destroyed, and a second `Netback` on the same hypervisor, memory and event channel.
//!
//! What the frontend must get right: what the old backend answered is taken (RX delivered, TX
//! done with); what it did not answer is posted again on the new rings, in order and byte for
//! byte; every grant the old backend had is ended; nothing leaks across the reconnection.

use std::sync::Arc;

use pvnet_dd::netback::{Config, Features, Mechanism, Netback};
use pvnet_dd::packet::Packet;
use pvnet_guest::netfront::{Layout, Netfront, RX_BUFS};
use pvnet_hv::evtchn::channel_pair;
use pvnet_hv::grant::Hypervisor;
use pvnet_hv::mem::GuestMemory;
use pvnet_hv::DomId;
use pvnet_wire::vnet::{self, VirtioNetHdr};

use crate::ring_common;
use ring_common::*;

fn features() -> Features {
    pvnet_dd::mock::sg_tso4_features()
}

fn data_valid() -> VirtioNetHdr {
    VirtioNetHdr {
        flags: vnet::F_DATA_VALID,
        ..Default::default()
    }
}

fn connect(
    hv: &Arc<Hypervisor>,
    nf: &Netfront,
    evt: pvnet_hv::evtchn::EvtchnEnd,
    mech: Mechanism,
) -> Netback {
    Netback::connect_with(
        hv.clone(),
        GUEST,
        nf.tx_ring_ref(),
        nf.rx_ring_ref(),
        evt,
        features(),
        Config::negotiated(mech, nf.persistent()),
    )
    .map(|mut nb| {
        // Jumbo frames: a frame over two pages crosses as one non-GSO packet.
        nb.set_mtu(9000);
        nb
    })
    .expect("the backend maps the frontend's rings")
}

/// Compares frames without printing kilobytes of bytes.
fn same(a: &[Vec<u8>], b: &[Vec<u8>]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

fn rx_take(nf: &mut Netfront) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    nf.rx_poll(|_, pieces| {
        got.push(pieces.concat());
        Ok(())
    });
    got
}

/// One reconnection under `mech`; returns nothing, asserts everything.
fn backend_goes_and_comes_back(mech: Mechanism) {
    let layout = Layout { grant_frames: 4 };
    let mem = Arc::new(GuestMemory::create("guest", layout.pages()).unwrap());
    let hv = Arc::new(Hypervisor::new());
    hv.add_domain(GUEST, mem.clone(), 4);
    let (front_end, back_end) = channel_pair().unwrap();
    let mut nf = Netfront::new(mem, layout, DomId::DRIVER, front_end).unwrap();
    if mech == Mechanism::Persistent {
        assert!(nf.use_persistent_grants());
    }
    let mut nb = connect(&hv, &nf, back_end, mech);
    nf.rx_refill();
    let fresh = nf.resources();

    // Frame A is sent and answered; B and C (C two pages long) are posted and never answered.
    let frames: Vec<Vec<u8>> = [(1514, 1), (900, 2), (6000, 3)]
        .iter()
        .map(|&(len, seed)| raw_frame(len, seed))
        .collect();
    let mut out: Vec<Packet> = Vec::new();
    tap_send(&mut nf, &data_valid(), &frames[0])
        .unwrap()
        .unwrap();
    nf.tx_push();
    assert_eq!(nb.tx_poll(64, |p| out.push(p)), Ok(1));
    for f in &frames[1..] {
        tap_send(&mut nf, &data_valid(), f).unwrap().unwrap();
    }
    nf.tx_push();
    // RX: packet P1 is copied into a guest buffer and answered, but netfront has not looked.
    let p1 = raw_frame(3000, 7);
    assert!(nb.rx_enqueue(Packet::linear(data_valid(), p1.clone())));
    assert_eq!(nb.rx_flush(), Ok(1));
    let old = (nf.tx_ring_ref(), nf.rx_ring_ref());

    // The driver domain goes: its netback is destroyed, the channel comes back unbound.
    let evt = nb.unbind();
    // Netfront takes what was answered, then lets go.
    assert!(same(&rx_take(&mut nf), &[p1]), "P1 delivered");
    nf.tx_reap();
    let posted = nf.resources().rx_posted;
    assert_eq!(posted, RX_BUFS as usize, "the RX ring was full again");
    assert_eq!(nf.disconnect(), 2, "B and C kept");
    assert!(nf.is_disconnected());
    // Every grant the old backend had is gone: the old ring references map no more.
    for r in [old.0, old.1] {
        assert!(
            hv.map_grant(DomId::DRIVER, GUEST, r, false).is_err(),
            "{r:?}"
        );
    }
    // Nothing is polled or posted while there is no backend.
    assert!(rx_take(&mut nf).is_empty());
    assert!(!nf.tx_has_room());
    assert_eq!(tap_send(&mut nf, &data_valid(), &frames[0]).unwrap(), None);
    let r = nf.resources();
    assert_eq!(
        (r.rx_posted, r.tx_in_flight),
        (0, 3),
        "C's two pages and B's"
    );

    // A new backend: fresh rings, the unanswered frames posted again, the RX ring filled.
    nf.reconnect(mech == Mechanism::Persistent).unwrap();
    let mut nb2 = connect(&hv, &nf, evt, mech);
    assert_eq!(nf.repost(), 2);
    let mut out2: Vec<Packet> = Vec::new();
    assert_eq!(nb2.tx_poll(64, |p| out2.push(p)), Ok(2));
    assert_eq!(out.len(), 1);
    assert!(out[0].to_vec() == frames[0], "A");
    let got: Vec<Vec<u8>> = out2.iter().map(Packet::to_vec).collect();
    assert!(same(&got, &frames[1..]), "B then C, byte for byte");
    nf.tx_complete();
    // RX through the new backend.
    let p2 = raw_frame(9000, 9);
    assert!(nb2.rx_enqueue(Packet::linear(data_valid(), p2.clone())));
    assert_eq!(nb2.rx_flush(), Ok(1));
    assert!(same(&rx_take(&mut nf), &[p2]), "P2 delivered");

    let s = &nf.stats;
    assert_eq!((s.disconnects, s.reconnects), (1, 1));
    assert_eq!(s.tx_reposted, 2);
    assert_eq!(s.rx_reclaimed_at_disconnect, posted as u64);
    assert_eq!(s.tx_lost_at_disconnect + s.grants_leaked, 0);
    assert_eq!(
        s.tx_errors + s.tx_bad_response + s.rx_bad_response + s.rx_errors,
        0
    );
    // Nothing leaked: as many grants, pages and ids as a fresh frontend with a full RX ring.
    let mut want = fresh;
    if mech == Mechanism::Persistent {
        // The three TX pages posted again (B's, C's two) keep their persistent grants, as
        // pages used under persistent grants do; A's ended with the old backend.
        want.grants_free -= 3;
    }
    assert_eq!(nf.resources(), want, "{mech:?}");
    assert_eq!(nb2.fatal(), None);
}

#[test]
fn a_new_backend_gets_what_the_old_left_unanswered_copy() {
    backend_goes_and_comes_back(Mechanism::Copy);
}

#[test]
fn a_new_backend_gets_what_the_old_left_unanswered_map() {
    backend_goes_and_comes_back(Mechanism::Map);
}

#[test]
fn a_new_backend_gets_what_the_old_left_unanswered_persistent() {
    backend_goes_and_comes_back(Mechanism::Persistent);
}

#[test]
fn reconnect_is_refused_while_connected_and_disconnect_is_idempotent() {
    let layout = Layout { grant_frames: 4 };
    let mem = Arc::new(GuestMemory::create("guest", layout.pages()).unwrap());
    let hv = Arc::new(Hypervisor::new());
    hv.add_domain(GUEST, mem.clone(), 4);
    let (front_end, _back_end) = channel_pair().unwrap();
    let mut nf = Netfront::new(mem, layout, DomId::DRIVER, front_end).unwrap();
    nf.rx_refill();
    assert!(nf.reconnect(false).is_err());
    assert_eq!(nf.disconnect(), 0);
    assert_eq!(nf.disconnect(), 0);
    assert_eq!(nf.stats.disconnects, 1);
    nf.reconnect(false).unwrap();
    assert_eq!(nf.stats.reconnects, 1);
}
