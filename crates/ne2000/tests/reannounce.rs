//! `Card::reannounce`: frames left in the ring after Linux's 9-frame receive loop acknowledged
//! PRX are announced again, and only then.

use pvnet_ne2000::direct::{Direct, Path};
use pvnet_ne2000::driver::Ne2kPci;
use pvnet_ne2000::RxRefused;

const MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x9a, 0xbc, 0xde];

fn frame(seq: u8) -> Vec<u8> {
    let mut f = vec![seq; 60];
    f[..6].copy_from_slice(&MAC);
    f
}

#[test]
fn frames_left_after_the_ack_are_announced_again() {
    let mut io = Direct::new(MAC, Path::Original);
    let mut drv = Ne2kPci::probe(&mut io).unwrap();
    drv.open(&mut io);
    assert!(
        !io.card.reannounce(&io.shared),
        "empty ring: nothing to announce"
    );
    // Small frames take one page each: fill the ring until it refuses.
    let mut placed = 0u8;
    while io.deliver(&frame(placed)).is_ok() {
        placed += 1;
    }
    assert_eq!(io.deliver(&frame(0)), Err(RxRefused::RingFull));
    assert!(placed > 20);
    assert!(io.irq());
    // One handler run: ei_receive takes 9 frames, then acknowledges PRX; the ISR loop finds
    // nothing else and returns with frames still in the ring.
    drv.interrupt(&mut io);
    let mut got = 0u8;
    while drv.take_rx().is_some() {
        got += 1;
    }
    assert_eq!(got, 9);
    assert!(!io.irq(), "the line is down with frames unread");
    assert!(io.card.reannounce(&io.shared), "announced again");
    assert!(io.irq());
    assert!(
        !io.card.reannounce(&io.shared),
        "PRX already set: nothing more"
    );
    // The driver now reads on, 9 at a time, until the ring is empty.
    while io.irq() {
        drv.interrupt(&mut io);
        while drv.take_rx().is_some() {
            got += 1;
        }
        io.card.reannounce(&io.shared);
    }
    assert_eq!(got, placed);
    assert!(!io.card.reannounce(&io.shared), "empty again");
}
