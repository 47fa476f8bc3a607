//! Test-only plumbing: throwaway namespace pairs built with `ip`, a plain raw socket for the
//! remote side, frame builders. Library code never shells out; only these tests do.

#![allow(dead_code)]

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use nix::sched::{setns, CloneFlags};

pub const MAC_A: [u8; 6] = [0x02, 0x77, 0, 0, 0, 0x02];
pub const MAC_B: [u8; 6] = [0x02, 0x77, 0, 0, 0, 0x01];
pub const IP_A: [u8; 4] = [10, 77, 0, 2];
pub const IP_B: [u8; 4] = [10, 77, 0, 1];
pub const IF_A: &str = "pvA";
pub const IF_B: &str = "pvB";
/// Local experimental ethertype used for crafted frames.
pub const ETH_TEST: u16 = 0x88b5;

pub fn is_root() -> bool {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipping: needs root");
        return false;
    }
    true
}

fn run(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {:?} failed: {}",
        args,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A named network namespace, deleted on drop.
pub struct Ns(pub String);

impl Ns {
    fn add(name: String) -> Ns {
        run(&["netns", "add", &name]);
        Ns(name)
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// Two namespaces joined by a veth: `a` holds `IF_A` (the pnic side, 10.77.0.2), `b` holds
/// `IF_B` (the remote host, 10.77.0.1). IPv6 is disabled so nothing chatters on the link.
pub struct Bed {
    pub a: Ns,
    pub b: Ns,
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

impl Bed {
    pub fn new() -> Bed {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let a = Ns::add(format!("pnic-{pid}-{n}-a"));
        let b = Ns::add(format!("pnic-{pid}-{n}-b"));
        for ns in [&a.0, &b.0] {
            for k in ["all", "default"] {
                in_ns(ns, || {
                    std::fs::write(format!("/proc/sys/net/ipv6/conf/{k}/disable_ipv6"), "1")
                        .expect("disable ipv6")
                });
            }
        }
        let mac = |m: [u8; 6]| {
            m.iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":")
        };
        run(&[
            "-n",
            &a.0,
            "link",
            "add",
            IF_A,
            "address",
            &mac(MAC_A),
            "type",
            "veth",
            "peer",
            "name",
            IF_B,
            "address",
            &mac(MAC_B),
            "netns",
            &b.0,
        ]);
        run(&["-n", &a.0, "addr", "add", "10.77.0.2/24", "dev", IF_A]);
        run(&["-n", &b.0, "addr", "add", "10.77.0.1/24", "dev", IF_B]);
        for (ns, dev) in [(&a.0, IF_A), (&b.0, IF_B)] {
            run(&["-n", ns, "link", "set", "lo", "up"]);
            run(&["-n", ns, "link", "set", dev, "up"]);
        }
        // Wait for carrier on both ends.
        for _ in 0..100 {
            let up = [(&a.0, IF_A), (&b.0, IF_B)].iter().all(|(ns, dev)| {
                let o = Command::new("ip")
                    .args(["-n", ns, "-o", "link", "show", dev])
                    .output()
                    .unwrap();
                String::from_utf8_lossy(&o.stdout).contains("LOWER_UP")
            });
            if up {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Bed { a, b }
    }
}

/// Runs `f` with the calling thread in namespace `name`, then switches back (also on panic).
pub fn in_ns<R>(name: &str, f: impl FnOnce() -> R) -> R {
    struct Back(File);
    impl Drop for Back {
        fn drop(&mut self) {
            setns(self.0.as_fd(), CloneFlags::CLONE_NEWNET).expect("setns back");
        }
    }
    let orig = File::open("/proc/thread-self/ns/net").expect("open own netns");
    let target = File::open(format!("/run/netns/{name}")).expect("open netns");
    setns(target.as_fd(), CloneFlags::CLONE_NEWNET).expect("setns");
    let _back = Back(orig);
    f()
}

/// A plain AF_PACKET raw socket (the remote host's tool), ignoring its own output.
pub struct RawSock(OwnedFd);

impl RawSock {
    /// Opens in the calling thread's namespace, bound to `ifname`.
    pub fn open(ifname: &str, vnet: bool) -> RawSock {
        let proto = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: plain syscall.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::c_int::from(proto),
            )
        };
        assert!(fd >= 0, "socket: {}", io::Error::last_os_error());
        // SAFETY: fresh fd we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let one: libc::c_int = 1;
        setopt(&fd, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &one);
        if vnet {
            setopt(&fd, libc::SOL_PACKET, libc::PACKET_VNET_HDR, &one);
        }
        let big: libc::c_int = 8 << 20;
        setopt(&fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &big);
        let cname = std::ffi::CString::new(ifname).unwrap();
        // SAFETY: valid C string.
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        assert!(ifindex > 0);
        // SAFETY: all-zero sockaddr_ll is valid.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto;
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: sll is a valid sockaddr_ll.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        assert_eq!(r, 0, "bind: {}", io::Error::last_os_error());
        RawSock(fd)
    }

    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        // SAFETY: frame is a live readable buffer.
        let r = unsafe { libc::send(self.0.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Receives one frame, waiting up to `timeout_ms`.
    pub fn recv(&self, timeout_ms: i32) -> Option<Vec<u8>> {
        let mut pfd = libc::pollfd {
            fd: self.0.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        if r <= 0 {
            return None;
        }
        let mut buf = vec![0u8; 70000];
        // SAFETY: buf is a writable buffer of buf.len() bytes.
        let n = unsafe {
            libc::recv(
                self.0.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            return None;
        }
        buf.truncate(n as usize);
        Some(buf)
    }
}

fn setopt<T>(fd: &OwnedFd, level: libc::c_int, name: libc::c_int, v: &T) {
    // SAFETY: v is a live T of the given size.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as u32,
        )
    };
    assert_eq!(r, 0, "setsockopt {name}: {}", io::Error::last_os_error());
}

/// Legacy ethtool "set value" ioctl (e.g. ETHTOOL_STSO 0x1f, ETHTOOL_STXCSUM 0x17) on
/// `ifname` in the calling thread's namespace.
pub fn ethtool_set(ifname: &str, cmd: u32, val: u32) {
    #[repr(C)]
    struct EthtoolValue {
        cmd: u32,
        data: u32,
    }
    #[repr(C)]
    struct IfReq {
        name: [u8; 16],
        data: *mut EthtoolValue,
        _pad: [u8; 16],
    }
    let mut ev = EthtoolValue { cmd, data: val };
    let mut req = IfReq {
        name: [0; 16],
        data: &mut ev,
        _pad: [0; 16],
    };
    req.name[..ifname.len()].copy_from_slice(ifname.as_bytes());
    // SAFETY: plain syscall.
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    assert!(s >= 0);
    // SAFETY: fresh fd we own.
    let s = unsafe { OwnedFd::from_raw_fd(s) };
    // SAFETY: req is a valid ifreq whose data points to a live ethtool_value.
    let r = unsafe { libc::ioctl(s.as_raw_fd(), libc::SIOCETHTOOL, &mut req) };
    assert_eq!(r, 0, "SIOCETHTOOL {cmd:#x}: {}", io::Error::last_os_error());
}

/// A crafted frame from `src` to `dst` with ethertype ETH_TEST carrying `seq` and a pattern.
pub fn test_frame(dst: [u8; 6], src: [u8; 6], seq: u32, len: usize) -> Vec<u8> {
    let len = len.max(60);
    let mut f = Vec::with_capacity(len);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ETH_TEST.to_be_bytes());
    f.extend_from_slice(&seq.to_be_bytes());
    while f.len() < len {
        f.push((f.len() as u32 ^ seq) as u8);
    }
    f
}

pub fn ethertype(f: &[u8]) -> u16 {
    if f.len() < 14 {
        return 0;
    }
    u16::from_be_bytes([f[12], f[13]])
}

pub fn test_seq(f: &[u8]) -> Option<u32> {
    (ethertype(f) == ETH_TEST && f.len() >= 18)
        .then(|| u32::from_be_bytes([f[14], f[15], f[16], f[17]]))
}

/// One's-complement sum of `b` (not folded).
pub fn csum_add(mut acc: u32, b: &[u8]) -> u32 {
    let mut it = b.chunks_exact(2);
    for c in &mut it {
        acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [x] = it.remainder() {
        acc += u32::from(*x) << 8;
    }
    acc
}

pub fn fold(mut acc: u32) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

pub fn pseudo_sum(src: [u8; 4], dst: [u8; 4], proto: u8, len: u16) -> u32 {
    let mut a = csum_add(0, &src);
    a = csum_add(a, &dst);
    a += u32::from(proto);
    a += u32::from(len);
    a
}

/// Builds the 54-byte Ethernet + IPv4 + TCP header of a segment with `payload_len` bytes;
/// the TCP check field holds the pseudo-header seed (for NEEDS_CSUM).
pub fn tcp_headers(seq: u32, payload_len: usize) -> Vec<u8> {
    let mut h = Vec::with_capacity(54);
    h.extend_from_slice(&MAC_B);
    h.extend_from_slice(&MAC_A);
    h.extend_from_slice(&0x0800u16.to_be_bytes());
    let tot = (20 + 20 + payload_len) as u16;
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&tot.to_be_bytes());
    ip[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
    ip[6..8].copy_from_slice(&0x4000u16.to_be_bytes());
    ip[8] = 64;
    ip[9] = 6;
    ip[12..16].copy_from_slice(&IP_A);
    ip[16..20].copy_from_slice(&IP_B);
    let c = !fold(csum_add(0, &ip));
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    h.extend_from_slice(&ip);
    let mut tcp = [0u8; 20];
    tcp[0..2].copy_from_slice(&40000u16.to_be_bytes());
    tcp[2..4].copy_from_slice(&5001u16.to_be_bytes());
    tcp[4..8].copy_from_slice(&seq.to_be_bytes());
    tcp[8..12].copy_from_slice(&1u32.to_be_bytes());
    tcp[12] = 5 << 4;
    tcp[13] = 0x18;
    tcp[14..16].copy_from_slice(&65535u16.to_be_bytes());
    let seed = fold(pseudo_sum(IP_A, IP_B, 6, (20 + payload_len) as u16));
    tcp[16..18].copy_from_slice(&seed.to_be_bytes());
    h.extend_from_slice(&tcp);
    h
}

/// Checks the IPv4 header checksum and the TCP checksum of an Ethernet/IPv4/TCP frame.
pub fn tcp_checksums_ok(f: &[u8]) -> bool {
    if f.len() < 54 || ethertype(f) != 0x0800 {
        return false;
    }
    let ip = &f[14..34];
    if fold(csum_add(0, ip)) != 0xffff {
        return false;
    }
    let tot = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    let tcp = &f[34..14 + tot];
    let src: [u8; 4] = ip[12..16].try_into().unwrap();
    let dst: [u8; 4] = ip[16..20].try_into().unwrap();
    fold(csum_add(pseudo_sum(src, dst, 6, tcp.len() as u16), tcp)) == 0xffff
}
