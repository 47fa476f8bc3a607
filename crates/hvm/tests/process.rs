//! The device model's process entry point, run on a thread: booted from a control message with
//! its seven descriptors, it serves a guest, reports its counters and stops on Shutdown.

mod common;

use std::os::fd::AsFd;
use std::sync::Arc;

use common::*;
use pvnet_hv::ctl;
use pvnet_hv::evtchn::channel_pair;
use pvnet_hv::exit::ExitCost;
use pvnet_hv::ioreq::{DeviceState, IoreqClient, IoreqPage};
use pvnet_hv::mem::GuestMemory;
use pvnet_hvm::guest::HvmGuest;
use pvnet_hvm::process::{run_device_model, DmBoot, FromDm, ToDm};
use pvnet_hvm::vcpu::Vcpu;
use pvnet_hvm::{HvmShared, SeqPacketPort, SHARED_OFFSET};
use pvnet_ne2000::direct::Path;
use pvnet_ne2000::Class;

fn recv_dm(sock: &std::os::fd::OwnedFd) -> FromDm {
    ctl::recv::<FromDm>(sock.as_fd())
        .unwrap()
        .expect("device model alive")
        .0
}

#[test]
fn the_device_model_process_boots_serves_reports_and_stops() {
    let page =
        Arc::new(IoreqPage::create("hvm-proc", 1, std::mem::size_of::<HvmShared>()).unwrap());
    let mem = Arc::new(GuestMemory::create("hvm-proc-mem", GUEST_PAGES).unwrap());
    let (vcpu_io, dm_io) = channel_pair().unwrap();
    let (vcpu_dev, dm_dev) = channel_pair().unwrap();
    let (net_dm, mut wire) = SeqPacketPort::pair().unwrap();
    wire.set_send_wait(PATIENCE);
    let (ctl_ts, ctl_dm) = ctl::socketpair().unwrap();
    let dm = std::thread::spawn(move || run_device_model(ctl_dm));

    // A boot message with the wrong number of descriptors would be refused; this one is right.
    let (io_n, io_w) = dm_io.into_fds();
    let (dev_n, dev_w) = dm_dev.into_fds();
    let net_fd = net_dm.into_fd();
    ctl::send(
        ctl_ts.as_fd(),
        &ToDm::Boot(DmBoot {
            domid: 7,
            mac: MAC,
            mem_pages: GUEST_PAGES,
            ioreq_port: EVTCHN_PORT.0,
        }),
        &[
            page.fd(),
            mem.fd(),
            io_n.as_fd(),
            io_w.as_fd(),
            dev_n.as_fd(),
            dev_w.as_fd(),
            net_fd.as_fd(),
        ],
    )
    .unwrap();
    drop((io_n, io_w, dev_n, dev_w, net_fd));
    assert!(matches!(recv_dm(&ctl_ts), FromDm::Ready));

    // The toolstack selects the path through its own mapping of the page.
    let shared = DeviceState::<HvmShared>::new(page.clone(), SHARED_OFFSET).unwrap();
    shared.set_path(Path::Fast(Class::Seed));
    let client = IoreqClient::new(page.clone(), 0, EVTCHN_PORT, vcpu_io).unwrap();
    let vcpu = Vcpu::new(
        DeviceState::new(page.clone(), SHARED_OFFSET).unwrap(),
        client,
        vcpu_dev,
        ExitCost::free(),
        mem.clone(),
    )
    .unwrap();
    let (mut stack_g, mut stack) = SeqPacketPort::pair().unwrap();
    stack_g.set_send_wait(PATIENCE);
    stack.set_send_wait(PATIENCE);
    let (stop, stop_g) = channel_pair().unwrap();
    let guest = std::thread::spawn(move || {
        let mut g = HvmGuest::boot(vcpu, stack_g).expect("boot");
        g.run(Some(stop_g.wait_fd()), |_, w| {
            Ok(w == pvnet_hvm::dm::Wake::Control)
        })
        .unwrap();
        g.stats()
    });
    let n = 200;
    for i in 0..n {
        let f = frame(PEER, MAC, size(i, 11), i as u32);
        put(&mut stack, &f);
        assert_eq!(take(&mut wire), padded(f));
        let f = frame(MAC, PEER, size(i, 500), i as u32);
        put(&mut wire, &f);
        assert_eq!(take(&mut stack), padded(f));
    }
    stop.notify().unwrap();
    let g = guest.join().unwrap();
    // Periodic reports arrive while it runs; Shutdown gets a last one and the loop's end.
    ctl::send(ctl_ts.as_fd(), &ToDm::Shutdown, &[]).unwrap();
    let last = loop {
        match recv_dm(&ctl_ts) {
            FromDm::Stats(s) => {
                if s.frames_out == n as u64 && s.frames_in == n as u64 {
                    break s;
                }
            }
            m => panic!("unexpected {m:?}"),
        }
    };
    dm.join().unwrap().expect("device model exits cleanly");
    assert_eq!(last.server.requests_served, g.vcpu.ioreqs);
    assert!(last.cpu_ns > 0);
    assert!(
        g.vcpu.served_at_trap > 0,
        "seed path selected by the toolstack"
    );
    let mut buf = [0u8; 2048];
    let end = pvnet_hvm::FramePort::recv(&mut wire, &mut buf);
    assert!(
        matches!(&end, Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof),
        "nothing left, and the device model's end closed: {end:?}"
    );
    assert!(
        ctl::recv::<FromDm>(ctl_ts.as_fd()).unwrap().is_none(),
        "socket closed at exit"
    );
}

#[test]
fn a_boot_message_with_missing_descriptors_fails_cleanly() {
    let (ctl_ts, ctl_dm) = ctl::socketpair().unwrap();
    let dm = std::thread::spawn(move || run_device_model(ctl_dm));
    let mem = GuestMemory::create("hvm-proc-bad", GUEST_PAGES).unwrap();
    ctl::send(
        ctl_ts.as_fd(),
        &ToDm::Boot(DmBoot {
            domid: 1,
            mac: MAC,
            mem_pages: GUEST_PAGES,
            ioreq_port: 1,
        }),
        &[mem.fd()],
    )
    .unwrap();
    match recv_dm(&ctl_ts) {
        FromDm::Failed(e) => assert!(e.contains("expected 7"), "{e}"),
        m => panic!("unexpected {m:?}"),
    }
    assert!(dm.join().unwrap().is_err());
}
