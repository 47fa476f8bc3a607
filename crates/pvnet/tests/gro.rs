//! End to end with aggregation outside pvnet: GRO at the physical port (`--port-gro`, alone
//! and with pvnet's LRO on top) and GRO in the guests' TAPs (`--guest-gro`). Each carries a
//! verified GiB into one guest alone, then a GiB into each of two guests at once; segments
//! with bad checksums from the wire reach the guest's stack unverified and are dropped there.
//! Needs root.

use crate::common::*;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const GIB: u64 = 1 << 30;

/// A counter of the `Tcp:` lines of `/proc/net/snmp` in namespace `role` of `run`.
fn tcp_counter(run: &Run, role: &str, name: &str) -> u64 {
    let o = pvnet(&["exec", "--id", &run.id, role, "cat", "/proc/net/snmp"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("Tcp:")).collect();
    let (names, values) = (&lines[0], &lines[1]);
    let i = names
        .split_whitespace()
        .position(|n| n == name)
        .unwrap_or_else(|| panic!("no {name} in {names}"));
    values.split_whitespace().nth(i).unwrap().parse().unwrap()
}

/// A GiB into guest 0 alone, then a GiB into each of guests 0 and 1 at once; all verified.
/// Returns the run's counters after.
fn gib_alone_then_beside_another(run: &Run) -> serde_json::Value {
    stream_intact(run, "g0", "10.77.0.10", GIB);
    let r = &run;
    let (a, b) = std::thread::scope(|sc| {
        let a = sc.spawn(move || flow(r, ("remote", "g0", "10.77.0.10"), 5301, GIB, 120));
        let b = sc.spawn(move || flow(r, ("remote", "g1", "10.77.0.11"), 5302, GIB, 120));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert_intact(&a.expect("stream into g0"), GIB);
    assert_intact(&b.expect("stream into g1"), GIB);
    let st = run.stat();
    for vif in st["vifs"].as_array().unwrap() {
        assert_eq!(vif["state"], "connected", "{vif}");
    }
    // Nothing refused at the port: what the kernel coalesced is what it says it is.
    let refused = &st["daemon"]["port_refused"];
    for k in ["odd_flags", "gso_unchecked", "gso_mismatch", "csum_offsets"] {
        assert_eq!(u(&refused[k]), 0, "{k}: {refused}");
    }
    st
}

/// The port's side of port GRO: 64 KiB slots, coalesced frames in them whole, each reaching
/// its guest as one GSO packet.
fn assert_port_gro(st: &serde_json::Value) {
    let pn = &st["pnic"];
    assert_eq!(
        u(&pn["ring_frame_size"]),
        u64::from(pvnet_pnic::GRO_FRAME_SIZE)
    );
    assert_eq!(u(&pn["ring_frames"]), u64::from(pvnet_pnic::GRO_FRAME_NR));
    assert_eq!(u(&pn["rx_truncated"]), 0, "{pn}");
    // 3 GiB in coalesced frames: far fewer frames than MTU segments (2.2 million).
    assert!(u(&pn["rx_gso"]) > 10_000, "{pn}");
    assert!(u(&pn["rx_frames"]) < 1_000_000, "{pn}");
    assert!(u(&pn["rx_max_frame"]) > 32_000, "{pn}");
    assert!(
        u(&pn["rx_max_frame"]) <= u64::from(pvnet_pnic::max_frame_in(pvnet_pnic::GRO_FRAME_SIZE))
    );
    for vif in st["vifs"].as_array().unwrap() {
        assert!(u(&vif["netback"]["rx_gso_packets"]) > 5_000, "{vif}");
        assert_eq!(u(&vif["netback"]["rx_gso_segmented"]), 0, "{vif}");
    }
}

#[test]
fn port_gro_carries_gibs_alone_and_beside_another_guest() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("port_gro_carries_gibs_alone_and_beside_another_guest") {
        return;
    }
    let run = Run::up(&["--guests", "2", "--port-gro", "--lro", "off"]);
    let st = gib_alone_then_beside_another(&run);
    assert_port_gro(&st);
    assert_eq!(st["pnic"]["gro"], true);
    assert!(st["lro"].is_null() || st["lro"]["frames_in"].as_u64() == Some(0));
}

#[test]
fn port_gro_with_adaptive_lro_on_top_carries_gibs_alone_and_beside_another_guest() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root(
        "port_gro_with_adaptive_lro_on_top_carries_gibs_alone_and_beside_another_guest",
    ) {
        return;
    }
    let run = Run::up(&["--guests", "2", "--port-gro", "--lro", "adaptive"]);
    let st = gib_alone_then_beside_another(&run);
    assert_port_gro(&st);
    // The engine saw every frame; the coalesced ones went through it whole.
    let l = &st["lro"];
    assert_eq!(
        u(&l["frames_in"]),
        u(&st["pnic"]["rx_frames"]) - u(&st["pnic"]["rx_bad"]),
        "{l}"
    );
    assert!(u(&l["flush"]["gso_input"]) > 10_000, "{l}");
}

/// Port GRO with the TPACKET_V3 ring (`--port-ring v3`): 512 MiB verified into guest 0
/// alone, then 256 MiB into each of two guests at once; coalesced frames of over 60 KB arrive
/// whole through the blocks, leases hold blocks and give every one back, and no block is
/// malformed.
#[test]
fn port_gro_with_a_v3_ring_carries_verified_streams_and_64_kib_frames_whole() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("port_gro_with_a_v3_ring_carries_verified_streams_and_64_kib_frames_whole")
    {
        return;
    }
    const MIB: u64 = 1 << 20;
    let run = Run::up(&["--guests", "2", "--port-gro", "--port-ring", "v3"]);
    stream_intact(&run, "g0", "10.77.0.10", 512 * MIB);
    let r = &run;
    let (a, b) = std::thread::scope(|sc| {
        let a = sc.spawn(move || flow(r, ("remote", "g0", "10.77.0.10"), 5301, 256 * MIB, 120));
        let b = sc.spawn(move || flow(r, ("remote", "g1", "10.77.0.11"), 5302, 256 * MIB, 120));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert_intact(&a.expect("stream into g0"), 256 * MIB);
    assert_intact(&b.expect("stream into g1"), 256 * MIB);
    let st = run.stat();
    let pn = &st["pnic"];
    assert_eq!(pn["ring"], "v3", "{pn}");
    assert_eq!(u(&pn["ring_blocks"]), u64::from(pvnet_pnic::V3_BLOCK_NR));
    assert_eq!(
        u(&pn["ring_block_size"]),
        u64::from(pvnet_pnic::V3_BLOCK_SIZE)
    );
    assert_eq!(u(&pn["rx_truncated"]), 0, "{pn}");
    assert_eq!(u(&pn["rx_bad_blocks"]), 0, "{pn}");
    assert_eq!(u(&pn["rx_bad"]), 0, "{pn}");
    // Blocks, not frames: each block carried several coalesced frames.
    assert!(
        u(&pn["rx_blocks"]) > 0 && u(&pn["rx_blocks"]) < u(&pn["rx_frames"]),
        "{pn}"
    );
    assert!(u(&pn["rx_gso"]) > 5_000, "{pn}");
    assert!(
        u(&pn["rx_leased"]) > 5_000,
        "frames went on as leases: {pn}"
    );
    // Frames near 64 KiB came whole (the largest GRO builds at this MSS is 65,226 bytes).
    assert!(u(&pn["rx_max_frame"]) > 60_000, "{pn}");
    assert!(
        u(&pn["rx_max_frame"]) <= u64::from(pvnet_pnic::max_frame_in(pvnet_pnic::GRO_FRAME_SIZE))
    );
    for vif in st["vifs"].as_array().unwrap() {
        assert_eq!(vif["state"], "connected", "{vif}");
        assert!(u(&vif["netback"]["rx_gso_packets"]) > 1_000, "{vif}");
        assert_eq!(u(&vif["netback"]["rx_gso_segmented"]), 0, "{vif}");
    }
    let refused = &st["daemon"]["port_refused"];
    for k in ["odd_flags", "gso_unchecked", "gso_mismatch", "csum_offsets"] {
        assert_eq!(u(&refused[k]), 0, "{k}: {refused}");
    }
}

/// `--port-ring-block-kib` sizes the V3 ring's blocks and keeps its memory: 64 blocks of
/// 1 MiB instead of 256 of 256 KiB, and a stream through them arrives intact.
#[test]
fn a_v3_ring_takes_the_block_size_it_is_given() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("a_v3_ring_takes_the_block_size_it_is_given") {
        return;
    }
    const MIB: u64 = 1 << 20;
    let run = Run::up(&[
        "--guests",
        "1",
        "--port-gro",
        "--port-ring",
        "v3",
        "--port-ring-block-kib",
        "1024",
    ]);
    stream_intact(&run, "g0", "10.77.0.10", 128 * MIB);
    let st = run.stat();
    let pn = &st["pnic"];
    assert_eq!(u(&pn["ring_block_size"]), MIB, "{pn}");
    let memory = u64::from(pvnet_pnic::V3_BLOCK_SIZE) * u64::from(pvnet_pnic::V3_BLOCK_NR);
    assert_eq!(u(&pn["ring_blocks"]), memory / MIB, "{pn}");
    assert!(u(&pn["rx_blocks"]) > 0, "{pn}");
    assert_eq!(u(&pn["rx_bad_blocks"]), 0, "{pn}");
}

#[test]
fn guest_gro_carries_gibs_alone_and_beside_another_guest_coalesced_in_the_guest() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root(
        "guest_gro_carries_gibs_alone_and_beside_another_guest_coalesced_in_the_guest",
    ) {
        return;
    }
    let run = Run::up(&["--guests", "2", "--guest-gro", "--lro", "off"]);
    let st = gib_alone_then_beside_another(&run);
    // Netback delivered MTU frames (no aggregation before the guest)...
    let pn = &st["pnic"];
    assert_eq!(
        u(&pn["ring_frame_size"]),
        u64::from(pvnet_pnic::DEFAULT_FRAME_SIZE)
    );
    assert!(u(&pn["rx_frames"]) > 2_000_000, "{pn}");
    assert_eq!(u(&st["vifs"][0]["netback"]["rx_gso_packets"]), 0);
    // ...and each guest's TCP got them coalesced: 2 GiB into guest 0 are 1.48 million
    // segments, its stack took a small fraction of that many packets (`InSegs` counts what
    // TCP receives, an aggregate once).
    let segs_in = tcp_counter(&run, "g0", "InSegs");
    assert!(
        segs_in < 1_480_000 / 4,
        "guest 0 took {segs_in} TCP packets"
    );
}

/// A raw socket in the remote host's namespace, on its veth end.
struct Wire(OwnedFd);

/// The remote host's namespace of `run`, where [`Wire`] and [`Resets`] open their sockets.
fn remote_ns(run: &Run) -> pvnet_testbed::Netns {
    let id = pvnet_testbed::RunId::parse(&run.id).unwrap();
    pvnet_testbed::Netns::open(&id.ns_name("remote")).unwrap()
}

impl Wire {
    fn open(run: &Run) -> Wire {
        let ifname = pvnet_testbed::RunId::parse(&run.id)
            .unwrap()
            .short_link_name(pvnet_testbed::topology::REMOTE_IF_SUFFIX);
        let ns = remote_ns(run);
        ns.run(move || {
            // SAFETY: plain syscall with constant arguments.
            let fd =
                unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
            assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
            // SAFETY: a fresh descriptor we own.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            let name = std::ffi::CString::new(ifname).unwrap();
            // SAFETY: a valid NUL-terminated name.
            let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
            assert!(ifindex > 0);
            // SAFETY: sockaddr_ll is plain data; all-zero is valid.
            let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            sll.sll_family = libc::AF_PACKET as u16;
            sll.sll_ifindex = ifindex as i32;
            // SAFETY: sll is a valid sockaddr_ll of the given length.
            let r = unsafe {
                libc::bind(
                    fd.as_raw_fd(),
                    (&sll as *const libc::sockaddr_ll).cast(),
                    std::mem::size_of::<libc::sockaddr_ll>() as u32,
                )
            };
            assert_eq!(r, 0, "bind: {}", std::io::Error::last_os_error());
            Wire(fd)
        })
        .unwrap()
    }

    fn send(&self, frame: &[u8]) {
        // SAFETY: frame is a live buffer of the given length.
        let r = unsafe { libc::send(self.0.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
        assert_eq!(
            r,
            frame.len() as isize,
            "{}",
            std::io::Error::last_os_error()
        );
    }
}

/// The TCP resets that reach the remote host's stack, seen through a raw socket in its
/// namespace whose filter passes only segments with RST set: each as (source port,
/// destination port). Reading them on the wire pins a reset to the segment that
/// drew it, where the guest's `OutRsts` also counts any other connection's.
struct Resets(socket2::Socket);

impl Resets {
    fn open(run: &Run) -> Resets {
        use socket2::{Domain, Protocol, Socket, Type};
        let ns = remote_ns(run);
        ns.run(|| {
            let sock = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::TCP)).unwrap();
            sock.set_nonblocking(true).unwrap();
            let op = |code: u32, jt: u8, jf: u8, k: u32| libc::sock_filter {
                code: code as u16,
                jt,
                jf,
                k,
            };
            // A raw IPv4 socket's filter sees the packet from its IP header, reassembled.
            sock.attach_filter(&[
                // X = the IP header's length; A = the TCP flags.
                op(libc::BPF_LDX | libc::BPF_B | libc::BPF_MSH, 0, 0, 0),
                op(libc::BPF_LD | libc::BPF_B | libc::BPF_IND, 0, 0, 13),
                op(libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K, 0, 1, 0x04),
                op(libc::BPF_RET | libc::BPF_K, 0, 0, 0xffff),
                op(libc::BPF_RET | libc::BPF_K, 0, 0, 0),
            ])
            .unwrap();
            Resets(sock)
        })
        .unwrap()
    }

    /// The resets received since the last call.
    fn take(&self) -> Vec<(u16, u16)> {
        use std::io::Read;
        let mut out = Vec::new();
        let mut b = [0u8; 2048];
        loop {
            let n = match (&self.0).read(&mut b) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return out,
                Err(e) => panic!("recv: {e}"),
            };
            let ip = pvnet_wire::ipv4::Packet::new_checked(&b[..n]).unwrap();
            let tcp = pvnet_wire::tcp::Segment::new_checked(ip.payload()).unwrap();
            // What was queued before the filter was attached passed unfiltered.
            if tcp.flags().contains(pvnet_wire::tcp::TcpFlags::RST) {
                out.push((tcp.src_port(), tcp.dst_port()));
            }
        }
    }
}

fn sum16(mut acc: u32, b: &[u8]) -> u32 {
    for c in b.chunks(2) {
        acc += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    acc
}

fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// A TCP segment from the remote host (10.77.0.1:40001) to guest 0 (10.77.0.10:9, nothing
/// listening), `payload` bytes at `seq`, its IPv4 checksum right and its TCP checksum right
/// or, with `bad`, off by one.
fn segment_to_guest(seq: u32, payload: &[u8], bad: bool) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&pvnet_testbed::topology::guest_mac(0));
    f.extend_from_slice(&[0x02, 0x70, 0x76, 0xee, 0, 1]);
    f.extend_from_slice(&[0x08, 0x00]);
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&((40 + payload.len()) as u16).to_be_bytes());
    ip[6] = 0x40;
    ip[8] = 64;
    ip[9] = 6;
    ip[12..16].copy_from_slice(&[10, 77, 0, 1]);
    ip[16..20].copy_from_slice(&[10, 77, 0, 10]);
    let c = !fold(sum16(0, &ip));
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    let mut tcp = [0u8; 20];
    tcp[0..2].copy_from_slice(&40001u16.to_be_bytes());
    tcp[2..4].copy_from_slice(&9u16.to_be_bytes());
    tcp[4..8].copy_from_slice(&seq.to_be_bytes());
    tcp[8..12].copy_from_slice(&1u32.to_be_bytes());
    tcp[12] = 5 << 4;
    tcp[13] = 0x10;
    tcp[14..16].copy_from_slice(&1000u16.to_be_bytes());
    let mut acc = sum16(0, &ip[12..20]) + 6 + (20 + payload.len()) as u32;
    acc = sum16(acc, &tcp);
    acc = sum16(acc, payload);
    let c = (!fold(acc)).wrapping_add(u16::from(bad));
    tcp[16..18].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&tcp);
    f.extend_from_slice(payload);
    f
}

/// Segments with bad TCP checksums, sent back to back in one flow while port GRO is on (and
/// a stream keeps GRO busy), are not merged by GRO and reach the guest marked neither valid
/// nor partial: the guest's stack verifies each and counts exactly that many checksum errors.
#[test]
fn bad_checksums_from_the_wire_are_left_to_the_guest_with_port_gro() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("bad_checksums_from_the_wire_are_left_to_the_guest_with_port_gro") {
        return;
    }
    let run = Run::up(&["--guests", "1", "--port-gro", "--lro", "off"]);
    let mut srv = server(&run, "g0", "10.77.0.10");
    let errors0 = tcp_counter(&run, "g0", "InCsumErrors");
    let wire = Wire::open(&run);
    let resets = Resets::open(&run);
    // The segments' own: from the guest's port 9 to the remote host's 40001.
    let answers = |seen: &[(u16, u16)]| seen.iter().filter(|&&r| r == (9, 40001)).count();
    let r = &run;
    const BAD: u64 = 40;
    std::thread::scope(|sc| {
        let streamer = sc.spawn(move || stream(r, "10.77.0.10", 256 << 20));
        std::thread::sleep(std::time::Duration::from_millis(300));
        let payload = [0xa5u8; 1000];
        for i in 0..BAD as u32 {
            wire.send(&segment_to_guest(1_000_000 + i * 1000, &payload, true));
        }
        let v = streamer.join().unwrap();
        assert_eq!(v["receiver"]["mismatches"].as_u64(), Some(0), "{v}");
        assert_eq!(v["receiver"]["bytes"].as_u64(), Some(256 << 20), "{v}");
    });
    let _ = srv.wait();
    // Let the last of them through.
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(tcp_counter(&run, "g0", "InCsumErrors") - errors0, BAD);
    // Not one was answered (a segment to a closed port that passed would draw a reset)...
    let seen = resets.take();
    assert_eq!(answers(&seen), 0, "resets seen (ports): {seen:?}");
    // ...while the same segments with good checksums are answered.
    for i in 0..3u32 {
        wire.send(&segment_to_guest(
            5_000_000 + i * 70_000,
            &[0x5a; 1000],
            false,
        ));
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let seen = resets.take();
    assert_eq!(answers(&seen), 3, "resets seen (ports): {seen:?}");
    assert_eq!(tcp_counter(&run, "g0", "InCsumErrors") - errors0, BAD);
    let st = run.stat();
    assert_eq!(u(&st["daemon"]["port_refused"]["gso_unchecked"]), 0);
}
