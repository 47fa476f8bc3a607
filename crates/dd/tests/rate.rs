//! A vif's transmit rate (Xen netback's credit, `pvnet up --vif-rate`): what a guest sends
//! beyond it waits on its ring, in order, until its next window; nothing is lost, the wait is
//! not an idle poll, and the data path polls the vif again when the window starts without
//! the guest notifying.

use crate::dp_common;
use crate::lro_common;

use dp_common::*;
use lro_common::MAC_DST;
use pvnet_dd::netback::credit::TxRate;

/// A MAC on the wire, beyond the physical port.
const WIRE: [u8; 6] = [0x02, 0, 0, 0, 0, 0x99];

/// 3000 bytes a millisecond.
const RATE: TxRate = TxRate {
    bytes: 3000,
    usec: 1000,
};

fn sent_to_wire(dp: &Path) -> Vec<Vec<u8>> {
    (dp.phy().unwrap().tx.iter())
        .map(|(_, b)| b.clone())
        .collect()
}

#[test]
fn a_guest_at_its_rate_waits_for_its_next_window_and_loses_nothing() {
    let (mut dp, clock, mut g) = path_with(&[MAC_DST], None, 4);
    assert!(dp.set_vif_rate(g[0].dom, Some(RATE)));
    let frames: Vec<Vec<u8>> = (0..20)
        .map(|i| frame_to(WIRE, MAC_DST, 1000, i as u8))
        .collect();
    for f in &frames {
        g[0].send(f);
    }
    dp.tick();
    assert!(
        !dp.vif_event(g[0].dom),
        "a poll that left work for later is not spurious"
    );
    // One window's credit: three 1000-byte frames.
    assert_eq!(sent_to_wire(&dp).len(), 3);
    let due = dp.vif_credit_due(g[0].dom).expect("waiting for its window");
    assert_eq!(due.as_nanos(), 1_000_000);
    assert_eq!(dp.tx_credit_due(), Some(due));
    assert!(
        !dp.has_tx_more(),
        "a guest at its rate is not polled in a loop"
    );
    let s = dp.vif_stats(g[0].dom).unwrap();
    assert_eq!(
        (s.tx_packets, s.tx_credit_waits, s.tx_credit_charged),
        (3, 1, 3000)
    );
    assert_eq!(dp.vif_events(g[0].dom).unwrap().idle_polls, 0);
    // Before the window ends, a pass takes nothing.
    clock.advance(999_000);
    dp.tick();
    dp.serve_tx_more();
    assert_eq!(sent_to_wire(&dp).len(), 3);
    // Each window from then on: three more, without a notification from the guest.
    let mut windows = 1;
    while sent_to_wire(&dp).len() < frames.len() {
        clock.advance(1_000);
        dp.tick();
        dp.serve_tx_more();
        windows += 1;
        let n = sent_to_wire(&dp).len();
        assert_eq!(n, (3 * windows).min(frames.len()), "window {windows}");
        clock.advance(999_000);
        assert!(windows < 20);
    }
    assert_eq!(sent_to_wire(&dp), frames, "every frame, once, in order");
    // The ring drained: no wait left, and the next frame goes at once (credit remains).
    dp.serve_tx_more();
    assert_eq!(dp.vif_credit_due(g[0].dom), None);
    assert_eq!(dp.tx_credit_due(), None);
}

#[test]
fn a_rate_lifted_while_a_guest_waits_lets_the_rest_go_at_once() {
    let (mut dp, _clock, mut g) = path_with(&[MAC_DST], None, 64);
    assert!(dp.set_vif_rate(g[0].dom, Some(RATE)));
    for i in 0..10 {
        g[0].send(&frame_to(WIRE, MAC_DST, 1000, i));
    }
    dp.tick();
    dp.vif_event(g[0].dom);
    assert_eq!(sent_to_wire(&dp).len(), 3);
    assert!(dp.set_vif_rate(g[0].dom, None));
    assert!(
        dp.has_tx_more(),
        "polled again without waiting for a window or an event"
    );
    dp.serve_tx_more();
    assert_eq!(sent_to_wire(&dp).len(), 10);
    assert_eq!(dp.netback(g[0].dom).unwrap().tx_rate(), None);
    assert!(!dp.set_vif_rate(9, Some(RATE)), "no such vif");
}

/// Guest to guest, where a frame goes grant to grant in one copy: the rate holds there too.
#[test]
fn the_rate_holds_guest_to_guest() {
    let (mut dp, clock, mut g) = path_with(&[MAC_DST, MAC_G2], None, 64);
    assert!(dp.g2g_direct());
    assert!(dp.set_vif_rate(g[0].dom, Some(RATE)));
    let frames: Vec<Vec<u8>> = (0..9).map(|i| frame_to(MAC_G2, MAC_DST, 1000, i)).collect();
    for f in &frames {
        g[0].send(f);
    }
    dp.tick();
    dp.vif_event(g[0].dom);
    assert_eq!(g[1].take_bytes(), frames[..3].to_vec());
    clock.advance(1_000_000);
    dp.tick();
    dp.serve_tx_more();
    assert_eq!(g[1].take_bytes(), frames[3..6].to_vec());
    clock.advance(1_000_000);
    dp.tick();
    dp.serve_tx_more();
    assert_eq!(g[1].take_bytes(), frames[6..].to_vec());
    assert!(dp.vif_stats(g[0].dom).unwrap().tx_direct_packets > 0);
}
