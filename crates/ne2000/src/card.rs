//! The device model's half of the card: card memory, the PROM, the data port, receive and
//! transmit.
//!
//! Contract: [`Card::dm_access`] serves any [`Access`] (it is the whole card on the original
//! path, and the back end of the fast path); [`Card::receive`] places a frame from the network
//! in the receive ring or says why not. Neither panics nor touches memory outside the card for
//! any register contents (see the crate docs' safety contract). Register state is in the
//! [`SharedRegs`] passed in; a `Card` holds nothing the trap handler needs.
//!
//! Receive follows QEMU `ne2000_receive`: frames under 60 bytes are padded with zeros; the
//! 4-byte header (status, next page, length incl. header, little-endian) goes at CURR's page;
//! the next page leaves room for a 4-byte CRC (`(len + 4 + 4 + 255) & !255`); data wraps from
//! PSTOP to PSTART; ISR.PRX is set. Acceptance: PRO takes all; broadcast needs AB; a group
//! address needs AM and its bit in MAR (index: the top 6 bits of the Ethernet CRC of the
//! destination, [`mcast_index`]); a unicast must equal PAR.

use std::sync::atomic::Ordering::SeqCst;

use crate::regs::{cr, dcr, isr, port, rsr, tsr, Rcr};
use crate::shared::{
    needs_card, register_access, write_cr, Ring, SharedRegs, ETH_HLEN, MAX_FRAME, MIN_FRAME,
    PMEM_END, PMEM_SIZE, PMEM_START,
};
use crate::{Access, Completion, Width};

/// Bytes of PROM visible at remote-DMA addresses 0..32.
const PROM_SIZE: usize = 32;

/// Why a frame from the network was not placed in the ring. One counter each in
/// [`CardCounters`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RxRefused {
    /// Shorter than an Ethernet header (14 bytes).
    Runt,
    /// Longer than 1514 bytes.
    Oversize,
    /// CR.STP is set (the driver has not started the card).
    Stopped,
    /// The destination address does not pass the filter (PAR, RCR.AB/AM/PRO, MAR).
    NotForUs,
    /// PSTART/PSTOP/CURR do not describe a ring inside card memory.
    BadRing,
    /// No room for a maximal frame before BNRY. The caller may hold the frame and retry when a
    /// [`Completion::wake_rx`] says so.
    RingFull,
}

/// A frame placed in the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxAccepted {
    /// The ring page holding its header.
    pub page: u8,
    /// Bytes stored after the header (the frame, padded to 60).
    pub len: usize,
    /// The interrupt line after ISR.PRX was set.
    pub irq: bool,
}

/// A transmitted frame: a span of card memory, read with [`Card::tx_bytes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxFrame {
    offset: u16,
    len: u16,
}

impl TxFrame {
    /// Frame length in bytes.
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }
    /// Never true (frames are at least 14 bytes); for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// What the card did, one counter per event and per refusal reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CardCounters {
    /// Frames placed in the ring.
    pub rx_frames: u64,
    /// Bytes of those frames (before padding).
    pub rx_bytes: u64,
    /// Refused: [`RxRefused::Runt`].
    pub rx_runt: u64,
    /// Refused: [`RxRefused::Oversize`].
    pub rx_oversize: u64,
    /// Refused: [`RxRefused::Stopped`].
    pub rx_stopped: u64,
    /// Refused: [`RxRefused::NotForUs`].
    pub rx_not_for_us: u64,
    /// Refused: [`RxRefused::BadRing`].
    pub rx_bad_ring: u64,
    /// Refused: [`RxRefused::RingFull`].
    pub rx_ring_full: u64,
    /// Frames transmitted (handed back in [`Completion::tx`]).
    pub tx_frames: u64,
    /// Bytes of those frames.
    pub tx_bytes: u64,
    /// TXP with TBCR under 14: nothing sent.
    pub tx_runt: u64,
    /// TXP with TBCR over 1514: nothing sent.
    pub tx_oversize: u64,
    /// TXP with TPSR/TBCR reaching outside card memory: nothing sent.
    pub tx_bad_range: u64,
    /// Remote-DMA bytes that hit no memory (read as 0xff or dropped) or the read-only PROM on
    /// write.
    pub dma_unmapped: u64,
    /// Reads of the reset port.
    pub resets: u64,
}

/// The device model's card: memory, PROM, counters. Register state is in [`SharedRegs`].
#[derive(Clone)]
pub struct Card {
    mem: Box<[u8]>,
    prom: [u8; PROM_SIZE],
    mac: [u8; 6],
    counters: CardCounters,
}

impl std::fmt::Debug for Card {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Card")
            .field("mac", &self.mac)
            .field("counters", &self.counters)
            .finish()
    }
}

/// Index (0..64) of a group address in the 64-bit MAR hash: the top 6 bits of the Ethernet CRC
/// computed most-significant-bit first over the bits of each byte taken least significant first,
/// without final inversion (QEMU `net_crc32(addr, 6) >> 26`; Linux `ether_crc(6, addr) >> 26`).
/// MAR byte `index >> 3`, bit `index & 7`.
pub fn mcast_index(addr: &[u8; 6]) -> u8 {
    const POLY: u32 = 0x04c1_1db6;
    let mut crc: u32 = 0xffff_ffff;
    for &byte in addr {
        let mut b = byte;
        for _ in 0..8 {
            let carry = (crc >> 31) ^ u32::from(b & 1);
            crc <<= 1;
            b >>= 1;
            if carry != 0 {
                crc = (crc ^ POLY) | carry;
            }
        }
    }
    (crc >> 26) as u8
}

impl Card {
    /// A card with station address `mac`. Its PROM holds the address, zeros, 'W' 'W' at bytes
    /// 14 and 15, each byte doubled (QEMU `ne2000_reset`).
    pub fn new(mac: [u8; 6]) -> Card {
        let mut raw = [0u8; 16];
        raw[..6].copy_from_slice(&mac);
        raw[14] = 0x57;
        raw[15] = 0x57;
        let mut prom = [0u8; PROM_SIZE];
        for (i, b) in raw.iter().enumerate() {
            prom[2 * i] = *b;
            prom[2 * i + 1] = *b;
        }
        Card {
            mem: vec![0u8; PMEM_SIZE as usize].into_boxed_slice(),
            prom,
            mac,
            counters: CardCounters::default(),
        }
    }

    /// The station address in the PROM.
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// The counters.
    pub fn counters(&self) -> CardCounters {
        self.counters
    }

    /// Card memory (0x4000..0xC000), for inspection.
    pub fn memory(&self) -> &[u8] {
        &self.mem
    }

    /// The PROM as the data port shows it at addresses 0..32.
    pub fn prom(&self) -> &[u8; PROM_SIZE] {
        &self.prom
    }

    /// Put `shared` in the power-on state: every register 0 except CR = STP|RD_ABORT (0x21) and
    /// ISR = RST; the magic set; no held frame. Card memory is left as it is.
    pub fn power_on(&self, shared: &SharedRegs) {
        let zero8 = [
            &shared.imr,
            &shared.dcr,
            &shared.rcr,
            &shared.tcr,
            &shared.tsr,
            &shared.rsr,
            &shared.pstart,
            &shared.pstop,
            &shared.bnry,
            &shared.curr,
            &shared.tpsr,
            &shared.rx_blocked,
        ];
        for r in zero8
            .into_iter()
            .chain(&shared.par)
            .chain(&shared.mar)
            .chain(&shared.reserved)
        {
            r.store(0, SeqCst);
        }
        shared.tbcr.store(0, SeqCst);
        shared.rsar.store(0, SeqCst);
        shared.rbcr.store(0, SeqCst);
        shared.irq_raised.store(0, SeqCst);
        shared.cr.store(cr::STP | cr::RD_ABORT, SeqCst);
        shared.isr.store(isr::RST, SeqCst);
        shared.magic.store(crate::SHARED_MAGIC, SeqCst);
    }

    /// Serve one port access (any port, any width): the device model's side.
    pub fn dm_access(&mut self, shared: &SharedRegs, access: Access) -> Completion {
        let access = access.normalised();
        if !needs_card(access) {
            return register_access(shared, access);
        }
        match access {
            Access::Read { port: p, width } if p == port::DATA => {
                let v = self.dma_read(shared, width) & width.mask();
                Completion::value(v, shared.irq_line())
            }
            Access::Write {
                port: p,
                width,
                value,
            } if p == port::DATA => {
                self.dma_write(shared, width, value);
                Completion {
                    value: 0,
                    irq: shared.irq_line(),
                    wake_rx: shared.wake_rx(),
                    tx: None,
                }
            }
            Access::Write { value, .. } => {
                // A CR write with TXP and STP clear (needs_card's only write case).
                write_cr(shared, value as u8);
                let tx = self.transmit(shared);
                shared.tsr.store(tsr::PTX, SeqCst);
                shared.cr.fetch_and(!cr::TXP, SeqCst);
                let irq = shared.raise(isr::PTX);
                Completion {
                    value: 0,
                    irq,
                    wake_rx: shared.wake_rx(),
                    tx,
                }
            }
            Access::Read { .. } => {
                // The reset port (QEMU `ne2000_reset`: ISR = RST; the PROM is fixed here).
                self.counters.resets += 1;
                shared.isr.swap(isr::RST, SeqCst);
                Completion::value(0, shared.irq_line())
            }
        }
    }

    /// `rep ins` of `buf.len() / width` accesses at `port`, in order, little-endian into `buf`
    /// (a trailing partial element is left untouched). Same effect as that many
    /// [`dm_access`](Self::dm_access) reads.
    pub fn dm_rep_read(
        &mut self,
        shared: &SharedRegs,
        port: u8,
        width: Width,
        buf: &mut [u8],
    ) -> Completion {
        let n = width.bytes();
        let mut last = Completion::value(0, shared.irq_line());
        for chunk in buf.chunks_exact_mut(n) {
            last = self.dm_access(shared, Access::Read { port, width });
            chunk.copy_from_slice(&last.value.to_le_bytes()[..n]);
        }
        last.value = 0;
        last
    }

    /// `rep outs` of `buf.len() / width` little-endian elements of `buf` to `port`, in order (a
    /// trailing partial element is ignored). Same effect as that many writes. A transmit among
    /// them (only for writes to CR, which no driver does with `rep`) is reported if it is last.
    pub fn dm_rep_write(
        &mut self,
        shared: &SharedRegs,
        port: u8,
        width: Width,
        buf: &[u8],
    ) -> Completion {
        let n = width.bytes();
        let mut last = Completion {
            value: 0,
            irq: shared.irq_line(),
            wake_rx: false,
            tx: None,
        };
        let mut wake = false;
        for chunk in buf.chunks_exact(n) {
            let mut le = [0u8; 4];
            le[..n].copy_from_slice(chunk);
            last = self.dm_access(
                shared,
                Access::Write {
                    port,
                    width,
                    value: u32::from_le_bytes(le),
                },
            );
            wake |= last.wake_rx;
        }
        last.wake_rx = wake;
        last
    }

    /// The device model gives up the frame it held after [`RxRefused::RingFull`]: clear the
    /// hold so that guest writes stop saying `wake_rx`. (Placing any frame also clears it.)
    pub fn cancel_hold(&self, shared: &SharedRegs) {
        shared.rx_blocked.store(0, SeqCst);
    }

    /// Re-raises ISR.PRX for frames the ring still holds after the driver acknowledged PRX.
    ///
    /// Linux's `ei_receive` takes at most 9 frames per call and then acknowledges PRX, and a
    /// frame placed between its last CURR read and that acknowledgement is left unannounced as
    /// well. A DP8390 on a wire announces the next frame that arrives (PRX, or OVW once the ring
    /// is full), which makes the driver read the ring again; a device model that *holds* the
    /// next frame while the ring is full (as QEMU queues it) delivers no next frame, and the
    /// driver would never read the ring again. The device model calls this when it holds a
    /// frame or has just served the guest. It sets PRX when the card is started, the ring is
    /// usable and not empty (BNRY + 1, wrapped from PSTOP to PSTART, differs from CURR) and PRX
    /// is clear, and says whether it did (a rising line is counted in `irq_raised`).
    pub fn reannounce(&self, shared: &SharedRegs) -> bool {
        if shared.cr.load(SeqCst) & cr::STP != 0 || shared.isr.load(SeqCst) & isr::PRX != 0 {
            return false;
        }
        let Some(ring) = shared.ring() else {
            return false;
        };
        let mut next = u32::from(shared.bnry.load(SeqCst)).wrapping_add(1) << 8;
        if next >= ring.stop || next < ring.start {
            next = ring.start;
        }
        if next == ring.curr {
            return false;
        }
        shared.raise(isr::PRX);
        true
    }

    /// The bytes of a transmitted frame.
    pub fn tx_bytes(&self, frame: TxFrame) -> &[u8] {
        let start = usize::from(frame.offset);
        self.mem.get(start..start + frame.len()).unwrap_or(&[])
    }

    /// A frame arrives from the network.
    pub fn receive(&mut self, shared: &SharedRegs, frame: &[u8]) -> Result<RxAccepted, RxRefused> {
        let r = self.try_receive(shared, frame);
        let c = &mut self.counters;
        match r {
            Ok(_) => {
                c.rx_frames += 1;
                c.rx_bytes += frame.len() as u64;
            }
            Err(RxRefused::Runt) => c.rx_runt += 1,
            Err(RxRefused::Oversize) => c.rx_oversize += 1,
            Err(RxRefused::Stopped) => c.rx_stopped += 1,
            Err(RxRefused::NotForUs) => c.rx_not_for_us += 1,
            Err(RxRefused::BadRing) => c.rx_bad_ring += 1,
            Err(RxRefused::RingFull) => c.rx_ring_full += 1,
        }
        r
    }

    fn try_receive(&mut self, shared: &SharedRegs, frame: &[u8]) -> Result<RxAccepted, RxRefused> {
        if frame.len() < ETH_HLEN {
            return Err(RxRefused::Runt);
        }
        if frame.len() > MAX_FRAME {
            return Err(RxRefused::Oversize);
        }
        if shared.cr.load(SeqCst) & cr::STP != 0 {
            return Err(RxRefused::Stopped);
        }
        if !accepts(shared, frame) {
            return Err(RxRefused::NotForUs);
        }
        let ring = shared.ring().ok_or(RxRefused::BadRing)?;
        // Announce the hold before looking at BNRY (see the shared module's ordering note).
        shared.rx_blocked.store(1, SeqCst);
        if ring.full(shared.bnry.load(SeqCst)) {
            return Err(RxRefused::RingFull);
        }
        shared.rx_blocked.store(0, SeqCst);

        let mut padded = [0u8; MIN_FRAME];
        let data: &[u8] = if frame.len() < MIN_FRAME {
            padded[..frame.len()].copy_from_slice(frame);
            &padded
        } else {
            frame
        };
        let total = data.len() + 4;
        let size = ring.stop - ring.start;
        let advance = (total as u32 + 4 + 255) & !255;
        let next = ring.start + (ring.curr - ring.start + advance) % size;
        let status = rsr::PRX | if frame[0] & 1 != 0 { rsr::PHY } else { 0 };
        let header = [status, (next >> 8) as u8, total as u8, (total >> 8) as u8];
        let at = self.ring_write(&ring, ring.curr, &header);
        self.ring_write(&ring, at, data);
        shared.rsr.store(status, SeqCst);
        shared.curr.store((next >> 8) as u8, SeqCst);
        let irq = shared.raise(isr::PRX);
        Ok(RxAccepted {
            page: (ring.curr >> 8) as u8,
            len: data.len(),
            irq,
        })
    }

    /// Copy `bytes` into the ring at `at`, wrapping from `stop` to `start`; returns where it
    /// ended. `ring` is validated, so every index is inside card memory.
    fn ring_write(&mut self, ring: &Ring, mut at: u32, mut bytes: &[u8]) -> u32 {
        while !bytes.is_empty() {
            let room = (ring.stop - at) as usize;
            let n = room.min(bytes.len());
            let off = (at - PMEM_START) as usize;
            self.mem[off..off + n].copy_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            at += n as u32;
            if at == ring.stop {
                at = ring.start;
            }
        }
        at
    }

    /// QEMU's transmit: TBCR bytes from TPSR << 8 (TPSR at or above 0xC0 is moved down by the
    /// size of card memory, QEMU's NetWare hack). Checked here against card memory and the frame
    /// size limits.
    fn transmit(&mut self, shared: &SharedRegs) -> Option<TxFrame> {
        let mut index = u32::from(shared.tpsr.load(SeqCst)) << 8;
        if index >= PMEM_END {
            index -= PMEM_SIZE;
        }
        let len = u32::from(shared.tbcr.load(SeqCst));
        let c = &mut self.counters;
        if (len as usize) < ETH_HLEN {
            c.tx_runt += 1;
            return None;
        }
        if len as usize > MAX_FRAME {
            c.tx_oversize += 1;
            return None;
        }
        if index < PMEM_START || index + len > PMEM_END {
            c.tx_bad_range += 1;
            return None;
        }
        c.tx_frames += 1;
        c.tx_bytes += u64::from(len);
        Some(TxFrame {
            offset: (index - PMEM_START) as u16,
            len: len as u16,
        })
    }

    /// Bytes moved by one data-port access: 4 for `inl/outl`, else 2 or 1 as DCR.WTS says.
    fn dma_len(shared: &SharedRegs, width: Width) -> u32 {
        match width {
            Width::W4 => 4,
            _ if shared.dcr.load(SeqCst) & dcr::WTS != 0 => 2,
            _ => 1,
        }
    }

    fn dma_read(&mut self, shared: &SharedRegs, width: Width) -> u32 {
        let n = Self::dma_len(shared, width);
        let rsar = u32::from(shared.rsar.load(SeqCst));
        let addr = if n > 1 { rsar & !1 } else { rsar };
        let mut v = 0u32;
        for i in 0..n {
            v |= u32::from(self.mem_read(addr + i)) << (8 * i);
        }
        self.dma_update(shared, n);
        v
    }

    fn dma_write(&mut self, shared: &SharedRegs, width: Width, value: u32) {
        // QEMU: a write with the byte count at zero does nothing.
        if shared.rbcr.load(SeqCst) == 0 {
            return;
        }
        let n = Self::dma_len(shared, width);
        let rsar = u32::from(shared.rsar.load(SeqCst));
        let addr = if n > 1 { rsar & !1 } else { rsar };
        for i in 0..n {
            self.mem_write(addr + i, (value >> (8 * i)) as u8);
        }
        self.dma_update(shared, n);
    }

    /// QEMU `ne2000_dma_update`: advance RSAR (wrapping from PSTOP to PSTART when it lands on
    /// PSTOP exactly), count RBCR down, RDC when it reaches zero.
    fn dma_update(&mut self, shared: &SharedRegs, n: u32) {
        let mut rsar = shared.rsar.load(SeqCst).wrapping_add(n as u16);
        if rsar == u16::from(shared.pstop.load(SeqCst)) << 8 {
            rsar = u16::from(shared.pstart.load(SeqCst)) << 8;
        }
        shared.rsar.store(rsar, SeqCst);
        let rbcr = u32::from(shared.rbcr.load(SeqCst));
        if rbcr <= n {
            shared.rbcr.store(0, SeqCst);
            shared.raise(isr::RDC);
        } else {
            shared.rbcr.store((rbcr - n) as u16, SeqCst);
        }
    }

    fn mem_read(&mut self, addr: u32) -> u8 {
        if (addr as usize) < PROM_SIZE {
            self.prom[addr as usize]
        } else if (PMEM_START..PMEM_END).contains(&addr) {
            self.mem[(addr - PMEM_START) as usize]
        } else {
            self.counters.dma_unmapped += 1;
            0xff
        }
    }

    fn mem_write(&mut self, addr: u32, v: u8) {
        if (PMEM_START..PMEM_END).contains(&addr) {
            self.mem[(addr - PMEM_START) as usize] = v;
        } else {
            self.counters.dma_unmapped += 1;
        }
    }
}

/// The address filter (QEMU `ne2000_receive`, unicast against PAR).
fn accepts(shared: &SharedRegs, frame: &[u8]) -> bool {
    let rcr = Rcr(shared.rcr.load(SeqCst));
    if rcr.promiscuous() {
        return true;
    }
    let mut dst = [0u8; 6];
    dst.copy_from_slice(&frame[..6]);
    if dst == [0xff; 6] {
        return rcr.broadcast();
    }
    if dst[0] & 1 != 0 {
        if !rcr.multicast() {
            return false;
        }
        let idx = mcast_index(&dst);
        return shared.mar[usize::from(idx >> 3)].load(SeqCst) & (1 << (idx & 7)) != 0;
    }
    dst.iter()
        .zip(&shared.par)
        .all(|(a, b)| *a == b.load(SeqCst))
}
