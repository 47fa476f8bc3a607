//! What the data-path tests share: a data path on a mock port and clock with real netbacks
//! joined to real netfronts, guests that send and take frames, frames, and one loop pass.
#![allow(dead_code)]

use std::sync::Arc;

use pvnet_dd::datapath::{DataPath, PathConfig};
use pvnet_dd::lro::{Mode, Policy};
use pvnet_dd::mock::{MockClock, MockPhy};
use pvnet_dd::netback::{Features, Netback};
use pvnet_guest::netfront::{Layout, Netfront};
use pvnet_hv::evtchn::channel_pair;
use pvnet_hv::grant::Hypervisor;
use pvnet_hv::mem::GuestMemory;
use pvnet_hv::DomId;
use pvnet_wire::vnet::VirtioNetHdr;

pub type Path = DataPath<MockPhy, MockClock>;

pub const MAC_G2: [u8; 6] = [0x00, 0x16, 0x3e, 0x00, 0x00, 0x2a];
pub const STACK_MAC: [u8; 6] = [0x02, 0x70, 0x76, 0, 0, 2];

pub fn features() -> Features {
    Features {
        sg: true,
        gso_tcpv4: true,
        gso_tcpv6: true,
        rx_notify: true,
    }
}

pub struct Guest {
    pub dom: u16,
    pub nf: Netfront,
}

impl Guest {
    /// Every packet netback delivered, without its header.
    pub fn take_bytes(&mut self) -> Vec<Vec<u8>> {
        self.take().into_iter().map(|(_, b)| b).collect()
    }

    /// Takes every packet netback delivered (header and bytes).
    pub fn take(&mut self) -> Vec<(VirtioNetHdr, Vec<u8>)> {
        let mut out = Vec::new();
        self.nf.rx_poll(|h, pieces| {
            out.push((*h, pieces.concat()));
            Ok(())
        });
        out
    }

    /// Posts `frame` on the TX ring as the guest's stack would hand it over.
    pub fn send(&mut self, frame: &[u8]) {
        let mut bytes = VirtioNetHdr::default().to_bytes().to_vec();
        bytes.extend_from_slice(frame);
        let posted = self
            .nf
            .tx_read_with(|iov| {
                let mut off = 0;
                for v in iov.iter_mut() {
                    let n = v.len().min(bytes.len() - off);
                    v[..n].copy_from_slice(&bytes[off..off + n]);
                    off += n;
                }
                Ok(off)
            })
            .unwrap();
        assert_eq!(posted, Some(frame.len()));
        self.nf.tx_push();
    }
}

/// A data path with a mock port and clock, and `macs.len()` guests (domids 1, 2, ...) whose
/// vifs are connected, their RX rings filled.
pub fn path_with(
    macs: &[[u8; 6]],
    lro: Option<Policy>,
    budget: usize,
) -> (Path, MockClock, Vec<Guest>) {
    path_on(MockClock::default(), macs, lro, budget)
}

/// [`path_with`] on a clock of the test's making (one with a wall clock, say).
pub fn path_on(
    clock: MockClock,
    macs: &[[u8; 6]],
    lro: Option<Policy>,
    budget: usize,
) -> (Path, MockClock, Vec<Guest>) {
    clock.advance(1_000_000);
    let mut dp = Path::new(
        PathConfig { budget, bo: false },
        clock.clone(),
        lro,
        Mode::Skb,
    );
    dp.attach_phy(MockPhy::default()).unwrap();
    let hv = Arc::new(Hypervisor::new());
    let mut guests = Vec::new();
    for (i, mac) in macs.iter().enumerate() {
        let dom = i as u16 + 1;
        let layout = Layout { grant_frames: 4 };
        let mem = Arc::new(GuestMemory::create("guest", layout.pages()).unwrap());
        hv.add_domain(DomId(dom), mem.clone(), 4);
        let (front, back) = channel_pair().unwrap();
        let mut nf = Netfront::new(mem, layout, DomId::DRIVER, front).unwrap();
        let nb = Netback::connect(
            hv.clone(),
            DomId(dom),
            nf.tx_ring_ref(),
            nf.rx_ring_ref(),
            back,
            features(),
        )
        .unwrap();
        nf.rx_refill();
        dp.add_guest_port(dom);
        assert!(dp.connect_vif(dom, *mac, nb));
        guests.push(Guest { dom, nf });
    }
    (dp, clock, guests)
}

pub fn frame_to(dst: [u8; 6], src: [u8; 6], len: usize, seed: u8) -> Vec<u8> {
    let mut f: Vec<u8> = (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect();
    f[0..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    f
}

/// One pass as the daemon makes it when the port is readable.
pub fn pass(dp: &mut Path) {
    dp.tick();
    while dp.phy_poll() {
        dp.tick();
        dp.serve_tx_more();
    }
    dp.end_pass();
}
