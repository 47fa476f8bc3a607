//! Differential test: random access sequences mixed with arriving frames, run on the original
//! path (every access to the device model) and on the fast path with each classification. The
//! driver must see identical values, interrupt line and wake flags after every access, the same
//! frames must go out, the same frames must be accepted or refused, and the card must end in
//! the same state (registers, card memory, counters).

use proptest::prelude::*;

use pvnet_ne2000::direct::{Direct, Path};
use pvnet_ne2000::driver::PortIo;
use pvnet_ne2000::{Access, Class, Width, DATA_PORT, RESET_PORT};

const MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x01, 0x02, 0x03];

#[derive(Clone, Debug)]
enum Op {
    Access(Access),
    /// `rep insl` / `rep outsl` of `len` bytes on the data port.
    RepIn(usize),
    RepOut(Vec<u8>),
    Frame(Vec<u8>),
}

fn cr_value() -> impl Strategy<Value = u8> {
    prop_oneof![
        4 => prop::sample::select(vec![0x21u8, 0x22, 0x62, 0xa2, 0xe2, 0x0a, 0x12, 0x1a, 0x26, 0x20, 0x61, 0x25]),
        1 => any::<u8>(),
    ]
}

fn width() -> impl Strategy<Value = Width> {
    prop::sample::select(vec![Width::W1, Width::W2, Width::W4])
}

fn access() -> impl Strategy<Value = Access> {
    prop_oneof![
        3 => cr_value().prop_map(|v| Access::outb(0, v)),
        6 => (1u8..0x10, any::<u8>()).prop_map(|(p, v)| Access::outb(p, v)),
        // Values that make sense for the ring/DMA registers.
        3 => (1u8..0x10, 0x3cu8..0xc4).prop_map(|(p, v)| Access::outb(p, v)),
        6 => (0u8..0x10).prop_map(Access::inb),
        4 => width().prop_map(|w| Access::Read { port: DATA_PORT, width: w }),
        4 => (width(), any::<u32>()).prop_map(|(w, v)| Access::Write { port: DATA_PORT, width: w, value: v }),
        1 => Just(Access::inb(RESET_PORT)),
        1 => (any::<u8>(), width(), any::<u32>(), any::<bool>()).prop_map(|(p, w, v, wr)| if wr {
            Access::Write { port: p, width: w, value: v }
        } else {
            Access::Read { port: p, width: w }
        }),
    ]
}

fn frame() -> impl Strategy<Value = Vec<u8>> {
    let dst = prop_oneof![
        Just(MAC),
        Just([0xff; 6]),
        any::<[u8; 5]>().prop_map(|t| [0x01, t[0], t[1], t[2], t[3], t[4]]),
        any::<[u8; 6]>(),
    ];
    (
        dst,
        prop_oneof![4 => 0usize..200, 2 => 1400usize..1600, 1 => 0usize..1600],
        any::<u8>(),
    )
        .prop_map(|(dst, len, seed)| {
            let mut f: Vec<u8> = (0..len).map(|i| seed.wrapping_add(i as u8)).collect();
            let n = len.min(6);
            f[..n].copy_from_slice(&dst[..n]);
            f
        })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        20 => access().prop_map(Op::Access),
        2 => (0usize..64).prop_map(Op::RepIn),
        2 => prop::collection::vec(any::<u8>(), 0..64).prop_map(Op::RepOut),
        3 => frame().prop_map(Op::Frame),
    ]
}

fn run(ops: &[Op]) -> Result<(), TestCaseError> {
    let mut paths = [
        Direct::new(MAC, Path::Original),
        Direct::new(MAC, Path::Fast(Class::Seed)),
        Direct::new(MAC, Path::Fast(Class::Max)),
    ];
    let all: Vec<Op> = pvnet_ne2000::direct::linux_init(MAC)
        .into_iter()
        .map(Op::Access)
        .chain(ops.iter().cloned())
        .collect();
    for (i, op) in all.iter().enumerate() {
        match op {
            Op::Access(a) => {
                let results: Vec<_> = paths.iter_mut().map(|d| d.access(*a)).collect();
                for (k, r) in results.iter().enumerate().skip(1) {
                    prop_assert_eq!(r, &results[0], "op {} {:?} path {:?}", i, a, paths[k].path);
                }
            }
            Op::RepIn(len) => {
                let bufs: Vec<Vec<u8>> = paths
                    .iter_mut()
                    .map(|d| {
                        let mut b = vec![0u8; *len];
                        d.insl(DATA_PORT, &mut b);
                        b
                    })
                    .collect();
                for b in &bufs[1..] {
                    prop_assert_eq!(b, &bufs[0], "op {} rep insl", i);
                }
            }
            Op::RepOut(buf) => {
                for d in paths.iter_mut() {
                    d.outsl(DATA_PORT, buf);
                }
            }
            Op::Frame(f) => {
                let results: Vec<_> = paths.iter_mut().map(|d| d.deliver(f)).collect();
                for r in &results[1..] {
                    prop_assert_eq!(r, &results[0], "op {} frame of {}", i, f.len());
                }
            }
        }
        let irqs: Vec<bool> = paths.iter().map(|d| d.irq()).collect();
        prop_assert!(
            irqs.iter().all(|x| *x == irqs[0]),
            "op {} line {:?}",
            i,
            irqs
        );
    }
    let base = &paths[0];
    for d in &paths[1..] {
        prop_assert_eq!(
            d.shared.snapshot(),
            base.shared.snapshot(),
            "registers, {:?}",
            d.path
        );
        prop_assert!(
            d.card.memory() == base.card.memory(),
            "card memory, {:?}",
            d.path
        );
        prop_assert_eq!(
            d.card.counters(),
            base.card.counters(),
            "counters, {:?}",
            d.path
        );
        prop_assert_eq!(&d.sent, &base.sent, "frames sent, {:?}", d.path);
        prop_assert_eq!(d.wakes, base.wakes);
        prop_assert_eq!(d.stats.total(), base.stats.total(), "same number of traps");
    }
    // The fast paths did serve something at the trap (otherwise the comparison is empty).
    prop_assert!(paths[2].stats.served() >= paths[1].stats.served());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn original_and_fast_paths_agree(ops in prop::collection::vec(op(), 0..300)) {
        run(&ops)?;
    }
}

/// A fixed run with known content, so the comparison is known to cover transmits, receives and
/// wakes (the random runs may or may not hit them).
#[test]
fn fixed_run_covers_transmit_receive_and_wake() {
    let mut ops = vec![];
    let big = [MAC.as_slice(), &[0x5a; 1508]].concat();
    for _ in 0..10 {
        ops.push(Op::Frame(big.clone()));
    }
    // Consume: BNRY forward, which frees the ring and must wake.
    ops.push(Op::Access(Access::outb(0x03, 0x57)));
    ops.push(Op::Frame(big.clone()));
    // Transmit 100 bytes from page 0x40 through remote DMA.
    for (p, x) in [(0x0a, 100u8), (0x0b, 0), (0x08, 0), (0x09, 0x40), (0, 0x12)] {
        ops.push(Op::Access(Access::outb(p, x)));
    }
    ops.push(Op::RepOut((0..100u8).collect()));
    for (p, x) in [(0x04, 0x40u8), (0x05, 100), (0x06, 0), (0, 0x26)] {
        ops.push(Op::Access(Access::outb(p, x)));
    }
    run(&ops).unwrap();
    let mut d = Direct::new(MAC, Path::Fast(Class::Max));
    for op in pvnet_ne2000::direct::linux_init(MAC)
        .into_iter()
        .map(Op::Access)
        .chain(ops)
    {
        match op {
            Op::Access(a) => {
                d.access(a);
            }
            Op::RepOut(b) => d.outsl(DATA_PORT, &b),
            Op::Frame(f) => {
                let _ = d.deliver(&f);
            }
            Op::RepIn(_) => {}
        }
    }
    assert_eq!(d.sent.len(), 1);
    assert_eq!(d.sent[0], (0..100u8).collect::<Vec<_>>());
    assert_eq!(d.wakes, 1);
    assert_eq!(d.card.counters().rx_frames, 9);
    assert_eq!(d.card.counters().rx_ring_full, 2);
}
