//! `MockFrontend::reconnect_at` (what the netback fuzz target uses to keep one memfd for every
//! input): the new connection starts from zeroed memory, fresh counters, fresh rings at the
//! asked index and an empty queue, and works like a first one (a posted frame comes out intact).

use pvnet_dd::mock::MockFrontend;
use pvnet_dd::netback::{Features, VifStats};
use pvnet_dd::packet::Packet;
use pvnet_hv::PAGE_SIZE;
use pvnet_netif::RingIdx;
use pvnet_wire::vnet::VirtioNetHdr;

fn features() -> Features {
    pvnet_dd::mock::sg_tso4_features()
}

fn frame(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add(i as u8)).collect()
}

#[test]
fn a_reconnected_mock_starts_from_nothing_and_works() {
    let (mut m, mut nb) = MockFrontend::connect(4, features()).unwrap();
    let a = frame(300, 7);
    m.post_tx_frame(&a, 0, None, 0, 0);
    m.push_tx();
    let mut got = Vec::new();
    assert_eq!(nb.tx_poll(64, |p| got.push(p.to_vec())), Ok(1));
    assert_eq!(got, vec![a]);
    // Leave things behind: a dirty page, a queued packet, counters and copies that moved.
    m.write_data(3, 100, &[0xaa; 64]);
    assert!(nb.rx_enqueue(Packet::linear(VirtioNetHdr::default(), frame(200, 1))));
    assert_ne!(nb.stats, VifStats::default());
    assert!(m.hv.stats().copy_ops > 0);
    drop(nb);

    let start = RingIdx(u32::MAX - 1);
    let (mut m, mut nb) = m.reconnect_at(features(), start).unwrap();
    for i in 0..m.data_pages() {
        assert!(
            m.read_data(i, 0, PAGE_SIZE).iter().all(|&b| b == 0),
            "page {i}"
        );
    }
    assert_eq!(nb.stats, VifStats::default());
    assert_eq!(nb.rx_queued(), 0);
    assert_eq!(m.hv.stats().copy_ops, 0);
    assert_eq!(m.tx.req_prod_pvt(), start);
    assert_eq!(m.take_tx_responses().unwrap().len(), 0);
    // The new connection carries frames across the index wrap like a first one.
    let b = frame(1500, 9);
    let c = frame(60, 3);
    m.post_tx_frame(&b, 0, None, 1, 0);
    m.post_tx_frame(&c, 0, None, 2, 1);
    m.push_tx();
    let mut got = Vec::new();
    assert_eq!(nb.tx_poll(64, |p| got.push(p.to_vec())), Ok(2));
    assert_eq!(got, vec![b, c]);
    assert_eq!(m.tx.req_prod_pvt(), start.plus(2));
    assert_eq!(m.take_tx_responses().unwrap().len(), 2);
}
