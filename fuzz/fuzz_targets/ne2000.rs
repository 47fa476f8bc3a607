//! The NE2000 card (`pvnet-ne2000`) under arbitrary guest port I/O and arriving frames: single
//! accesses of any width at any port (`Card::dm_access`, behind `trap_access` on the fast
//! paths), `rep insl` / `rep outsl` on the data port (`dm_rep_read` / `dm_rep_write`) and
//! frames of any length and destination (`Card::receive`), after Linux's initialisation half of
//! the time.
//!
//! Invariants (the differential test `crates/ne2000/tests/differential.rs`, with fuzz-chosen
//! sequences): the original path (every access to the device model) and the fast path with
//! both classifications return the same value, interrupt line and wake flag after every
//! access, accept or refuse the same frames, transmit the same frames, and end with the same
//! registers, card memory, counters and trap totals. No access panics, card memory keeps its
//! size, and a transmitted frame fits in it.

#![no_main]

use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use pvnet_ne2000::direct::{Direct, Path};
use pvnet_ne2000::driver::PortIo;
use pvnet_ne2000::{Access, Class, Width, DATA_PORT, RESET_PORT};

const MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x01, 0x02, 0x03];
const CR: [u8; 12] = [
    0x21, 0x22, 0x62, 0xa2, 0xe2, 0x0a, 0x12, 0x1a, 0x26, 0x20, 0x61, 0x25,
];

fn width(u: &mut Unstructured<'_>) -> Result<Width> {
    Ok(*u.choose(&[Width::W1, Width::W2, Width::W4])?)
}

fn access(u: &mut Unstructured<'_>) -> Result<Access> {
    Ok(match u.int_in_range(0..=7u8)? {
        0 => Access::outb(
            0,
            if u.ratio(4, 5)? {
                *u.choose(&CR)?
            } else {
                u.arbitrary()?
            },
        ),
        1 => Access::outb(u.int_in_range(1..=0x0f)?, u.arbitrary()?),
        2 => Access::outb(u.int_in_range(1..=0x0f)?, u.int_in_range(0x3c..=0xc3)?),
        3 => Access::inb(u.int_in_range(0..=0x0f)?),
        4 => Access::Read {
            port: DATA_PORT,
            width: width(u)?,
        },
        5 => Access::Write {
            port: DATA_PORT,
            width: width(u)?,
            value: u.arbitrary()?,
        },
        6 => Access::inb(RESET_PORT),
        _ => {
            let (port, w) = (u.arbitrary()?, width(u)?);
            if u.arbitrary()? {
                Access::Write {
                    port,
                    width: w,
                    value: u.arbitrary()?,
                }
            } else {
                Access::Read { port, width: w }
            }
        }
    })
}

fn frame(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    let dst: [u8; 6] = match u.int_in_range(0..=3u8)? {
        0 => MAC,
        1 => [0xff; 6],
        2 => {
            let mut d: [u8; 6] = u.arbitrary()?;
            d[0] = 0x01;
            d
        }
        _ => u.arbitrary()?,
    };
    let len = match u.int_in_range(0..=2u8)? {
        0 => u.int_in_range(0..=200usize)?,
        1 => u.int_in_range(1400..=1600usize)?,
        _ => u.int_in_range(0..=2000usize)?,
    };
    let seed: u8 = u.arbitrary()?;
    let mut f: Vec<u8> = (0..len).map(|i| seed.wrapping_add(i as u8)).collect();
    let n = len.min(6);
    f[..n].copy_from_slice(&dst[..n]);
    Ok(f)
}

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let mut paths = [
        Direct::new(MAC, Path::Original),
        Direct::new(MAC, Path::Fast(Class::Seed)),
        Direct::new(MAC, Path::Fast(Class::Max)),
    ];
    let mem_len = paths[0].card.memory().len();
    if u.ratio(3, 4)? {
        for a in pvnet_ne2000::direct::linux_init(MAC) {
            for d in paths.iter_mut() {
                d.access(a);
            }
        }
    }
    let mut steps = 0;
    while !u.is_empty() && steps < 400 {
        steps += 1;
        match u.int_in_range(0..=26u8)? {
            0..=19 => {
                let a = access(u)?;
                let r: Vec<_> = paths.iter_mut().map(|d| d.access(a)).collect();
                for (k, x) in r.iter().enumerate().skip(1) {
                    assert_eq!(x, &r[0], "{a:?} on {:?}", paths[k].path);
                }
            }
            20 | 21 => {
                let len = u.int_in_range(0..=64usize)?;
                let bufs: Vec<Vec<u8>> = paths
                    .iter_mut()
                    .map(|d| {
                        let mut b = vec![0u8; len];
                        d.insl(DATA_PORT, &mut b);
                        b
                    })
                    .collect();
                for b in &bufs[1..] {
                    assert_eq!(b, &bufs[0], "rep insl");
                }
            }
            22 | 23 => {
                let n = u.int_in_range(0..=64usize)?;
                let b = u.bytes(n.min(u.len()))?.to_vec();
                for d in paths.iter_mut() {
                    d.outsl(DATA_PORT, &b);
                }
            }
            _ => {
                let f = frame(u)?;
                let r: Vec<_> = paths.iter_mut().map(|d| d.deliver(&f)).collect();
                for x in &r[1..] {
                    assert_eq!(x, &r[0], "frame of {}", f.len());
                }
            }
        }
        let irq = paths[0].irq();
        assert!(
            paths.iter().all(|d| d.irq() == irq),
            "interrupt line differs"
        );
    }
    let base = &paths[0];
    for d in &paths[1..] {
        assert_eq!(
            d.shared.snapshot(),
            base.shared.snapshot(),
            "registers, {:?}",
            d.path
        );
        assert!(
            d.card.memory() == base.card.memory(),
            "card memory, {:?}",
            d.path
        );
        assert_eq!(
            d.card.counters(),
            base.card.counters(),
            "counters, {:?}",
            d.path
        );
        assert_eq!(d.sent, base.sent, "frames sent, {:?}", d.path);
        assert_eq!(d.wakes, base.wakes);
        assert_eq!(d.stats.total(), base.stats.total(), "same number of traps");
    }
    for d in &paths {
        assert_eq!(d.card.memory().len(), mem_len, "card memory changed size");
        assert!(d.sent.iter().all(|f| f.len() <= mem_len));
    }
    assert!(paths[2].stats.served() >= paths[1].stats.served());
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
