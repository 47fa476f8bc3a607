//! In-process [`PortIo`] over a card: the guest's accesses go straight to [`Card::dm_access`]
//! (the original path) or first to [`trap_access`] (the fast path), with every trap counted.
//! For tests and benchmarks; the real processes put an ioreq page between the two halves.

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::driver::PortIo;
use crate::trap::{trap_access, trap_rep, Class, TrapOutcome, TrapStats};
use crate::{Access, Card, Completion, RxAccepted, RxRefused, SharedRegs, Width};

/// Which path guest accesses take. Named `original`, `seed` and `max` wherever a user or a
/// file names it (`--hvm-path`, the daemon's configuration, `pvnet stat`): [`FromStr`] and
/// [`Display`](std::fmt::Display) are the one mapping, and serde writes and reads the same names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Path {
    /// Every access to the device model.
    Original,
    /// The trap handler first, with this classification; the device model for the rest.
    Fast(Class),
}

impl Path {
    /// Every path, in the order the documentation gives them.
    pub const ALL: [Path; 3] = [
        Path::Original,
        Path::Fast(Class::Seed),
        Path::Fast(Class::Max),
    ];

    /// The path's name: `original`, `seed` or `max`.
    pub fn name(self) -> &'static str {
        match self {
            Path::Original => "original",
            Path::Fast(Class::Seed) => "seed",
            Path::Fast(Class::Max) => "max",
        }
    }
}

impl Default for Path {
    /// The original path: what an unmodified Xen does.
    fn default() -> Self {
        Path::Original
    }
}

/// A name that is no [`Path`]'s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownPath(pub String);

impl fmt::Display for UnknownPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no HVM path {:?}: original, seed or max", self.0)
    }
}

impl std::error::Error for UnknownPath {}

impl FromStr for Path {
    type Err = UnknownPath;

    fn from_str(s: &str) -> Result<Path, UnknownPath> {
        Path::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| UnknownPath(s.to_string()))
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for Path {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Path {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Path, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A card, its shared registers, and the path between a guest driver and them.
#[derive(Debug)]
pub struct Direct {
    /// The device model's card.
    pub card: Card,
    /// The shared register page.
    pub shared: SharedRegs,
    /// The path accesses take.
    pub path: Path,
    /// Where each trap was served (on [`Path::Original`] everything counts as forwarded).
    pub stats: TrapStats,
    /// Frames the card transmitted, oldest first.
    pub sent: VecDeque<Vec<u8>>,
    /// Accesses that returned `wake_rx`.
    pub wakes: u64,
}

impl Direct {
    /// A powered-on card with station address `mac`.
    pub fn new(mac: [u8; 6], path: Path) -> Direct {
        let card = Card::new(mac);
        let shared = SharedRegs::new();
        card.power_on(&shared);
        Direct {
            card,
            shared,
            path,
            stats: TrapStats::default(),
            sent: VecDeque::new(),
            wakes: 0,
        }
    }

    /// One trap.
    pub fn access(&mut self, access: Access) -> Completion {
        let outcome = match self.path {
            Path::Original => TrapOutcome::Forward,
            Path::Fast(class) => trap_access(&self.shared, access, class),
        };
        self.stats.record(access, &outcome);
        let c = match outcome {
            TrapOutcome::Served(c) => c,
            TrapOutcome::Forward => self.card.dm_access(&self.shared, access),
        };
        self.after(c)
    }

    fn rep(&mut self, port: u8, read: Option<&mut [u8]>, write: Option<&[u8]>) {
        if let Path::Fast(class) = self.path {
            // Always Forward; asked anyway so the fast path is exercised as a caller would.
            let _ = trap_rep(&self.shared, port, Width::W4, class);
        }
        self.stats.forwarded_reps += 1;
        let c = match (read, write) {
            (Some(buf), _) => self.card.dm_rep_read(&self.shared, port, Width::W4, buf),
            (None, Some(buf)) => self.card.dm_rep_write(&self.shared, port, Width::W4, buf),
            (None, None) => return,
        };
        self.after(c);
    }

    fn after(&mut self, c: Completion) -> Completion {
        if let Some(tx) = c.tx {
            self.sent.push_back(self.card.tx_bytes(tx).to_vec());
        }
        self.wakes += u64::from(c.wake_rx);
        c
    }

    /// A frame arrives from the network.
    pub fn deliver(&mut self, frame: &[u8]) -> Result<RxAccepted, RxRefused> {
        self.card.receive(&self.shared, frame)
    }

    /// The interrupt line.
    pub fn irq(&self) -> bool {
        self.shared.irq_line()
    }
}

impl PortIo for Direct {
    fn inb(&mut self, port: u8) -> u8 {
        self.access(Access::inb(port)).value as u8
    }
    fn outb(&mut self, port: u8, value: u8) {
        self.access(Access::outb(port, value));
    }
    fn inw(&mut self, port: u8) -> u16 {
        self.access(Access::inw(port)).value as u16
    }
    fn outw(&mut self, port: u8, value: u16) {
        self.access(Access::outw(port, value));
    }
    fn inl(&mut self, port: u8) -> u32 {
        self.access(Access::inl(port)).value
    }
    fn outl(&mut self, port: u8, value: u32) {
        self.access(Access::outl(port, value));
    }
    fn insl(&mut self, port: u8, buf: &mut [u8]) {
        self.rep(port, Some(buf), None);
    }
    fn outsl(&mut self, port: u8, buf: &[u8]) {
        self.rep(port, None, Some(buf));
    }
}

/// The register writes of Linux's `ne2k-pci` initialisation with station address `mac`, as
/// single accesses: after them the card accepts frames for `mac` and transmits (what the
/// differential test and the fuzz target start from before their random part).
pub fn linux_init(mac: [u8; 6]) -> Vec<Access> {
    let mut v = vec![];
    for (p, x) in [
        (0, 0x21),
        (0x0e, 0x49),
        (0x0a, 0),
        (0x0b, 0),
        (0x0c, 0x20),
        (0x0d, 0x02),
        (0x04, 0x40),
    ] {
        v.push(Access::outb(p, x));
    }
    for (p, x) in [
        (0x01, 0x4c),
        (0x03, 0x7f),
        (0x02, 0x80),
        (0x07, 0xff),
        (0x0f, 0),
        (0, 0x61),
    ] {
        v.push(Access::outb(p, x));
    }
    for (i, b) in mac.iter().enumerate() {
        v.push(Access::outb(1 + i as u8, *b));
    }
    for (p, x) in [
        (0x07, 0x4c),
        (0, 0x21),
        (0x07, 0xff),
        (0x0f, 0x3f),
        (0, 0x22),
        (0x0d, 0),
        (0x0c, 0x0c),
    ] {
        v.push(Access::outb(p, x));
    }
    v
}

#[cfg(test)]
mod path_tests {
    use super::*;

    #[test]
    fn path_names_parse_print_and_serialize_alike() {
        for p in Path::ALL {
            assert_eq!(p.name().parse::<Path>(), Ok(p));
            assert_eq!(p.to_string(), p.name());
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(json, format!("\"{}\"", p.name()));
            assert_eq!(serde_json::from_str::<Path>(&json).unwrap(), p);
        }
        assert_eq!(Path::default(), Path::Original);
        let e = "fast".parse::<Path>().unwrap_err();
        assert_eq!(e, UnknownPath("fast".into()));
        assert!(e.to_string().contains("original, seed or max"), "{e}");
        assert!(serde_json::from_str::<Path>("\"Seed\"").is_err());
        assert!(serde_json::from_str::<Path>("1").is_err());
    }
}
