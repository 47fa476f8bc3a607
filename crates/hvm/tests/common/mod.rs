//! A device model thread and an HVM guest thread joined by an ioreq page, two event channels
//! and guest memory, as the processes are; the network and the guest's stack are socketpairs
//! whose other ends the test holds.

#![allow(dead_code)]

use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pvnet_hv::evtchn::{channel_pair, EvtchnEnd};
use pvnet_hv::exit::ExitCost;
use pvnet_hv::foreign::ForeignMemory;
use pvnet_hv::ioreq::{DeviceState, IoreqClient, IoreqPage, IoreqServer};
use pvnet_hv::mem::GuestMemory;
use pvnet_hv::Port;
use pvnet_hvm::dm::{DeviceModel, Wake};
use pvnet_hvm::guest::HvmGuest;
use pvnet_hvm::vcpu::Vcpu;
use pvnet_hvm::{FramePort, HvmShared, SeqPacketPort, SHARED_OFFSET};
use pvnet_ne2000::direct::Path;

pub const MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
pub const PEER: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x09];
pub const GUEST_PAGES: u32 = 16;
pub const EVTCHN_PORT: Port = Port(3);
/// How long a test waits for a frame before it calls it lost.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// The parts before the threads start.
pub struct Parts {
    pub page: Arc<IoreqPage>,
    pub mem: Arc<GuestMemory>,
    pub dm: DeviceModel<SeqPacketPort>,
    /// The vCPU's ioreq client and device channel end, the shared page view.
    pub client: IoreqClient,
    pub vcpu_dev: EvtchnEnd,
    pub vcpu_shared: DeviceState<HvmShared>,
    /// The network's end (the test's).
    pub wire: SeqPacketPort,
}

pub fn parts(path: Path) -> Parts {
    let page =
        Arc::new(IoreqPage::create("hvm-test", 1, std::mem::size_of::<HvmShared>()).unwrap());
    let mem = Arc::new(GuestMemory::create("hvm-test-mem", GUEST_PAGES).unwrap());
    let (vcpu_io, dm_io) = channel_pair().unwrap();
    let (vcpu_dev, dm_dev) = channel_pair().unwrap();
    let server = IoreqServer::new(page.clone(), 0, EVTCHN_PORT, dm_io)
        .unwrap()
        .with_memory(Arc::new(ForeignMemory::new(mem.clone())));
    let client = IoreqClient::new(page.clone(), 0, EVTCHN_PORT, vcpu_io).unwrap();
    let dm_shared = DeviceState::<HvmShared>::new(page.clone(), SHARED_OFFSET).unwrap();
    let vcpu_shared = DeviceState::<HvmShared>::new(page.clone(), SHARED_OFFSET).unwrap();
    dm_shared.set_path(path);
    let (mut net, mut wire) = SeqPacketPort::pair().unwrap();
    net.set_send_wait(PATIENCE);
    wire.set_send_wait(PATIENCE);
    let dm = DeviceModel::new(MAC, dm_shared, server, dm_dev, net).unwrap();
    Parts {
        page,
        mem,
        dm,
        client,
        vcpu_dev,
        vcpu_shared,
        wire,
    }
}

/// Both sides running.
pub struct Rig {
    pub page: Arc<IoreqPage>,
    pub shared: DeviceState<HvmShared>,
    pub wire: SeqPacketPort,
    pub stack: SeqPacketPort,
    dm_stop: EvtchnEnd,
    guest_stop: EvtchnEnd,
    dm: Option<JoinHandle<DeviceModel<SeqPacketPort>>>,
    guest: Option<JoinHandle<HvmGuest<SeqPacketPort>>>,
}

/// Spawns the device model's thread.
pub fn spawn_dm(
    mut dm: DeviceModel<SeqPacketPort>,
) -> (EvtchnEnd, JoinHandle<DeviceModel<SeqPacketPort>>) {
    let (stop, stop_dm) = channel_pair().unwrap();
    let h = std::thread::spawn(move || {
        dm.run(Some(stop_dm.wait_fd()), |_, w| Ok(w == Wake::Control))
            .expect("device model loop");
        dm
    });
    (stop, h)
}

impl Rig {
    pub fn start(path: Path, exit_ns: u64) -> Rig {
        let p = parts(path);
        let shared = DeviceState::<HvmShared>::new(p.page.clone(), SHARED_OFFSET).unwrap();
        let (dm_stop, dm) = spawn_dm(p.dm);
        let vcpu = Vcpu::new(
            p.vcpu_shared,
            p.client,
            p.vcpu_dev,
            ExitCost::new(exit_ns),
            p.mem.clone(),
        )
        .unwrap();
        Self::with_vcpu(p.page, shared, p.wire, dm_stop, dm, vcpu)
    }

    pub fn with_vcpu(
        page: Arc<IoreqPage>,
        shared: DeviceState<HvmShared>,
        wire: SeqPacketPort,
        dm_stop: EvtchnEnd,
        dm: JoinHandle<DeviceModel<SeqPacketPort>>,
        vcpu: Vcpu,
    ) -> Rig {
        let (mut stack_g, mut stack) = SeqPacketPort::pair().unwrap();
        stack_g.set_send_wait(PATIENCE);
        stack.set_send_wait(PATIENCE);
        let (guest_stop, stop_g) = channel_pair().unwrap();
        let (tx, rx) = mpsc::channel();
        let guest = std::thread::spawn(move || {
            let mut g = HvmGuest::boot(vcpu, stack_g).expect("guest boot");
            tx.send(g.mac()).unwrap();
            g.run(Some(stop_g.wait_fd()), |_, w| Ok(w == Wake::Control))
                .expect("guest loop");
            g
        });
        let mac = rx.recv_timeout(PATIENCE).expect("guest booted");
        assert_eq!(mac, MAC, "the driver read the card's address from the PROM");
        Rig {
            page,
            shared,
            wire,
            stack,
            dm_stop,
            guest_stop,
            dm: Some(dm),
            guest: Some(guest),
        }
    }

    /// Stops both threads and returns them.
    pub fn stop(mut self) -> (DeviceModel<SeqPacketPort>, HvmGuest<SeqPacketPort>) {
        self.guest_stop.notify().unwrap();
        let g = self.guest.take().unwrap().join().expect("guest thread");
        self.dm_stop.notify().unwrap();
        let d = self.dm.take().unwrap().join().expect("dm thread");
        (d, g)
    }
}

/// A frame to `dst` of `len` bytes whose payload encodes `seq` and `len`.
pub fn frame(dst: [u8; 6], src: [u8; 6], len: usize, seq: u32) -> Vec<u8> {
    let mut f = vec![0u8; len];
    let n = len.min(6);
    f[..n].copy_from_slice(&dst[..n]);
    for (i, b) in f.iter_mut().enumerate().skip(6) {
        *b = (seq.wrapping_mul(31).wrapping_add(i as u32 * 7) ^ (i as u32 >> 8)) as u8;
    }
    if len >= 12 {
        f[6..12].copy_from_slice(&src);
    }
    if len >= 18 {
        f[14..18].copy_from_slice(&seq.to_le_bytes());
    }
    f
}

/// The frame as the other side sees it: padded with zeros to 60 bytes (the driver pads on
/// transmit, the card on receive).
pub fn padded(mut f: Vec<u8>) -> Vec<u8> {
    if f.len() < 60 {
        f.resize(60, 0);
    }
    f
}

/// Sends, insisting (the port waits for room up to PATIENCE).
pub fn put(port: &mut SeqPacketPort, f: &[u8]) {
    port.send(f).expect("frame sent");
}

/// Receives one frame or fails the test after PATIENCE.
pub fn take(port: &mut SeqPacketPort) -> Vec<u8> {
    let mut buf = vec![0u8; 4096];
    let deadline = Instant::now() + PATIENCE;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "no frame within {PATIENCE:?}");
        if let Some(n) = port.recv_timeout(&mut buf, left).unwrap() {
            return buf[..n].to_vec();
        }
    }
}

/// Nothing more arrives within `d`.
pub fn quiet(port: &mut SeqPacketPort, d: Duration) -> bool {
    let mut buf = vec![0u8; 4096];
    port.recv_timeout(&mut buf, d).unwrap().is_none()
}

/// Sizes 14..=1514 in a stride that visits every one, starting at `seed`.
pub fn size(i: usize, seed: usize) -> usize {
    14 + (seed + i * 7) % 1501
}
