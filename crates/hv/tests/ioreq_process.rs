//! ioreq round trips between two processes: this test binary is the toolstack and the vCPU, and
//! re-executes itself as the device model (`PVNET_IOREQ_DM_SOCK` set), which receives the ioreq
//! page, its end of the event channel and the guest's memory as fds over a control socket, as a
//! device-model process would from the toolstack.
//!
//! `harness = false`: `main` runs the tests in order, or the device model in the child.

mod common;

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{mask, median_p99, serve_n, value, Toy, DATA, LEN, REGS};
use pvnet_hv::ctl;
use pvnet_hv::evtchn::{channel_pair, EvtchnEnd};
use pvnet_hv::foreign::{ForeignMemory, ForeignStats};
use pvnet_hv::ioreq::{
    DeviceState, Ioreq, IoreqClient, IoreqError, IoreqPage, IoreqServer, ServerStats, SharedPlain,
};
use pvnet_hv::mem::GuestMemory;
use pvnet_hv::Port;
use serde::{Deserialize, Serialize};

const ENV: &str = "PVNET_IOREQ_DM_SOCK";
const NR_VCPUS: u32 = 2;
const VCPU: u32 = 1;
const PORT: Port = Port(11);
const IDLE: Duration = Duration::from_secs(10);

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Serve `n` requests, report the counters, exit.
    Serve,
    /// Take one request, say so, and hang without answering (until killed).
    Hang,
}

#[derive(Serialize, Deserialize, Debug)]
struct Setup {
    nr_vcpus: u32,
    vcpu: u32,
    port: u32,
    mode: Mode,
    n: u64,
}

/// Device state both processes see in the ioreq page's device area.
#[repr(C)]
struct Shared {
    /// Written by the vCPU side before the device model starts.
    magic: AtomicU64,
    /// Written by the device model when it is done.
    served: AtomicU64,
}
// SAFETY: repr(C), made only of integer atomics.
unsafe impl SharedPlain for Shared {}

const MAGIC: u64 = 0x5eed_cafe_f00d_0001;

#[derive(Serialize, Deserialize, Debug)]
enum Report {
    /// The counters, and the magic the device model found in the device area.
    Done(ServerStats, ForeignStats, u64),
    /// The request taken: its address and size.
    Took(u64, u32),
}

fn device_model(sock: OwnedFd) {
    let (setup, mut fds) = ctl::recv::<Setup>(sock.as_fd())
        .expect("recv")
        .expect("setup");
    assert_eq!(fds.len(), 4);
    let mem = Arc::new(GuestMemory::from_fd(fds.pop().unwrap()).unwrap());
    let wait = fds.pop().unwrap();
    let notify = fds.pop().unwrap();
    let page = Arc::new(IoreqPage::from_fd(fds.pop().unwrap(), setup.nr_vcpus).unwrap());
    let evtchn = EvtchnEnd::from_fds(notify, wait);
    let foreign = Arc::new(ForeignMemory::new(mem));
    let shared = DeviceState::<Shared>::new(page.clone(), 0).unwrap();
    let mut server = IoreqServer::new(page, setup.vcpu, Port(setup.port), evtchn)
        .unwrap()
        .with_memory(foreign.clone());
    match setup.mode {
        Mode::Serve => {
            let mut toy = Toy::default();
            assert!(serve_n(&mut server, &mut toy, setup.n, IDLE), "idle");
            shared
                .served
                .store(server.stats().requests_served, Ordering::Release);
            let magic = shared.magic.load(Ordering::Acquire);
            let report = Report::Done(server.stats(), foreign.stats(), magic);
            ctl::send(sock.as_fd(), &report, &[]).unwrap();
        }
        Mode::Hang => {
            let req = loop {
                assert!(server.wait(Some(IDLE)).unwrap(), "idle");
                if let Some(r) = server.next() {
                    break r;
                }
            };
            let took = Report::Took(req.addr, req.size);
            ctl::send(sock.as_fd(), &took, &[]).unwrap();
            std::thread::sleep(IDLE);
        }
    }
}

/// The toolstack's half: the page, the channel and guest memory, and a device-model process
/// holding its ends.
struct World {
    client: IoreqClient,
    shared: DeviceState<Shared>,
    mem: Arc<GuestMemory>,
    sock: OwnedFd,
    child: Child,
}

fn pidfd_open(pid: u32) -> OwnedFd {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1; no pointers.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    assert!(fd >= 0, "pidfd_open: {}", io::Error::last_os_error());
    // SAFETY: a fresh fd returned by the kernel, owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd as RawFd) }
}

fn start(mode: Mode, n: u64) -> World {
    let page = Arc::new(IoreqPage::create("ioreq", NR_VCPUS, 0).unwrap());
    let mem = Arc::new(GuestMemory::create("guest", 4).unwrap());
    let (vcpu_end, dm_end) = channel_pair().unwrap();
    let shared = DeviceState::<Shared>::new(page.clone(), 0).unwrap();
    shared.magic.store(MAGIC, Ordering::Release);
    let (sock, child_sock) = ctl::socketpair().unwrap();
    let raw = child_sock.as_raw_fd();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.env(ENV, raw.to_string());
    // SAFETY: the closure runs in the forked child before exec and only calls fcntl, which is
    // async-signal-safe; it clears close-on-exec on the one fd the device model inherits.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(raw, libc::F_SETFD, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().unwrap();
    drop(child_sock);
    let (notify, wait) = dm_end.into_fds();
    let setup = Setup {
        nr_vcpus: NR_VCPUS,
        vcpu: VCPU,
        port: PORT.0,
        mode,
        n,
    };
    ctl::send(
        sock.as_fd(),
        &setup,
        &[page.fd(), notify.as_fd(), wait.as_fd(), mem.fd()],
    )
    .unwrap();
    let mut client = IoreqClient::new(page, VCPU, PORT, vcpu_end).unwrap();
    client.watch_peer(pidfd_open(child.id()));
    World {
        client,
        shared,
        mem,
        sock,
        child,
    }
}

fn round_trips_between_processes() {
    let regs = 4000;
    let timed = 3000u64;
    let n = regs + timed + 4;
    let mut w = start(Mode::Serve, n);
    let c = &mut w.client;
    for i in 0..regs / 2 {
        let size = [1u32, 2, 4, 8][(i % 4) as usize];
        let port = REGS + (i % 16) as u16;
        let v = value(i);
        c.round_trip(&Ioreq::pio_out(port, size, v)).unwrap();
        let got = c.round_trip(&Ioreq::pio_in(port, size)).unwrap();
        assert_eq!(
            got,
            (v & mask(size)).wrapping_add(1) & mask(size),
            "request {i}"
        );
    }
    let mut t = Vec::with_capacity(timed as usize);
    for i in 0..timed {
        let t0 = Instant::now();
        let v = c
            .round_trip(&Ioreq::pio_in(REGS + (i % 16) as u16, 8))
            .unwrap();
        t.push(t0.elapsed().as_nanos() as u64);
        // Register k last held the low bytes of value(j), j = 1984 + k, written j % 4 wide.
        let j = regs / 2 - 16 + i % 16;
        assert_eq!(v, (value(j) & mask([1, 2, 4, 8][(j % 4) as usize])) + 1);
    }
    let (med, p99) = median_p99(&mut t);
    println!("ioreq round trip, processes: median {med} ns, p99 {p99} ns over {timed}");

    // rep outs / rep ins through the guest memory the device model received as an fd.
    let pattern: Vec<u8> = (0..1500u32).map(|i| (i * 13 + 1) as u8).collect();
    let f = ForeignMemory::new(w.mem.clone());
    f.write(0x1f00, &pattern).unwrap();
    c.round_trip(&Ioreq::pio_outs(DATA, 2, 750, 0x1f00, false))
        .unwrap();
    assert_eq!(c.round_trip(&Ioreq::pio_in(LEN, 4)).unwrap(), 1500);
    c.round_trip(&Ioreq::pio_ins(DATA, 1, 1500, 0x3000, false))
        .unwrap();
    let mut back = vec![0u8; 1500];
    f.read(0x3000, &mut back).unwrap();
    assert_eq!(back, pattern, "bytes crossed two processes intact");
    // Past the end of the 4 pages: refused in the device model, nothing written.
    c.round_trip(&Ioreq::pio_ins(DATA, 4, 4, 0x3ffc, false))
        .unwrap();

    let (report, _) = ctl::recv::<Report>(w.sock.as_fd()).unwrap().unwrap();
    let Report::Done(s, fs, magic) = report else {
        panic!("{report:?}")
    };
    // The device area is shared both ways.
    assert_eq!(magic, MAGIC);
    assert_eq!(w.shared.served.load(Ordering::Acquire), n - 1);
    assert_eq!(s.slot_copies, n);
    assert_eq!(s.requests_served, n - 1);
    assert_eq!((s.refused_bad_ptr, s.refused_total()), (1, 1));
    assert_eq!((fs.reads, fs.bytes_read), (1, 1500));
    assert_eq!((fs.writes, fs.bytes_written), (1, 1500));
    let cs = c.stats();
    assert_eq!((cs.requests_sent, cs.round_trips), (n, n));
    assert!(w.child.wait().unwrap().success());
}

fn killed_device_model_gives_peer_died() {
    let mut w = start(Mode::Hang, 0);
    w.client.set_timeout(None);
    let pid = nix::unistd::Pid::from_raw(w.child.id() as i32);
    let sock = w.sock.try_clone().unwrap();
    // Kills the device model once it holds the request (the pid is our own child's).
    let killer = std::thread::spawn(move || {
        let (report, _) = ctl::recv::<Report>(sock.as_fd()).unwrap().unwrap();
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
        report
    });
    match w.client.round_trip(&Ioreq::pio_in(REGS + 5, 2)) {
        Err(IoreqError::PeerDied) => {}
        other => panic!("{other:?}"),
    }
    let report = killer.join().unwrap();
    assert!(matches!(report, Report::Took(0x305, 2)), "{report:?}");
    assert_eq!(w.client.stats().peer_deaths, 1);
    assert!(!w.child.wait().unwrap().success());
}

fn main() {
    if let Ok(fd) = std::env::var(ENV) {
        let fd: RawFd = fd.parse().expect("fd number");
        // SAFETY: the parent passed this fd across exec for us alone (close-on-exec cleared
        // on it only); nothing else in this process owns it.
        device_model(unsafe { OwnedFd::from_raw_fd(fd) });
        return;
    }
    let tests: [(&str, fn()); 2] = [
        (
            "round_trips_between_processes",
            round_trips_between_processes,
        ),
        (
            "killed_device_model_gives_peer_died",
            killed_device_model_gives_peer_died,
        ),
    ];
    for (name, f) in tests {
        println!("test {name} ...");
        f();
        println!("test {name} ... ok");
    }
}
