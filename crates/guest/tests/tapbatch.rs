//! TapBatch against a real TAP: needs root (a namespace and a TAP); skips otherwise.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use pvnet_guest::netfront::RxPacket;
use pvnet_guest::tapbatch::TapBatch;
use pvnet_testbed::{link, Netns, Tap};
use pvnet_wire::vnet::VirtioNetHdr;

static N: AtomicU32 = AtomicU32::new(0);

struct NsGuard(String);
impl Drop for NsGuard {
    fn drop(&mut self) {
        let _ = pvnet_testbed::netns::delete_by_name(&self.0);
    }
}

/// An Ethernet frame of a local experimental ethertype (the stack ignores it) carrying `i`.
fn frame(i: u32, len: usize) -> Vec<u8> {
    let mut f = vec![
        0x02, 0x70, 0x76, 0, 0, 2, 0x02, 0x70, 0x76, 0, 0, 1, 0x88, 0xb5,
    ];
    f.extend_from_slice(&i.to_be_bytes());
    f.extend((0..len - f.len()).map(|k| (k as u32 ^ i) as u8));
    f
}

/// An AF_PACKET socket on `ifname` of the calling thread's namespace, seeing what the TAP
/// receives.
fn packet_socket(ifname: &str) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    let idx = link::ifindex(ifname).unwrap();
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: plain socket(2); the descriptor is owned right away.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK,
            proto.into(),
        )
    };
    assert!(fd >= 0, "{}", std::io::Error::last_os_error());
    // SAFETY: fd was just returned by socket(2) and is owned by nothing else.
    let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_ll is plain old data; all zeroes is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto;
    sll.sll_ifindex = idx as i32;
    // SAFETY: bind reads size_of::<sockaddr_ll>() bytes of the local `sll`.
    let r = unsafe {
        libc::bind(
            fd,
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    owned
}

/// Frames of the experimental ethertype seen on the socket, until `want` or 2 s.
fn receive(fd: &std::os::fd::OwnedFd, want: usize) -> Vec<Vec<u8>> {
    use std::os::fd::AsRawFd;
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut buf = vec![0u8; 4096];
    while got.len() < want && Instant::now() < deadline {
        // SAFETY: recv writes at most buf.len() bytes into buf.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        let f = &buf[..n as usize];
        if f.len() >= 14 && f[12..14] == [0x88, 0xb5] {
            got.push(f.to_vec());
        }
    }
    got
}

#[test]
fn a_batch_enters_the_tap_whole_and_in_order() {
    if !nix::unistd::geteuid().is_root() {
        println!("skipping a_batch_enters_the_tap_whole_and_in_order: needs root");
        return;
    }
    let name = format!(
        "pvnet-tb{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let _g = NsGuard(name.clone());
    let ns = Netns::create(&name).unwrap();
    let tap = ns.run(|| Tap::open("pvtap0", true).unwrap()).unwrap();
    ns.run(|| link::set_up("pvtap0", true).unwrap()).unwrap();
    let sock = ns.run(|| packet_socket("pvtap0")).unwrap();
    let mut batch = TapBatch::new(&tap);

    // 100 frames, some in one piece, some split in three, one with a header TUN refuses.
    let frames: Vec<Vec<u8>> = (0..100)
        .map(|i| frame(i, 60 + (i as usize * 13) % 1400))
        .collect();
    let bad = VirtioNetHdr {
        gso_type: 0x7f, // no such GSO type: the write fails with EINVAL
        ..VirtioNetHdr::default()
    };
    let splits: Vec<Vec<&[u8]>> = frames
        .iter()
        .enumerate()
        .map(|(i, f)| {
            if i % 3 == 0 {
                let (a, rest) = f.split_at(14);
                let (b, c) = rest.split_at(rest.len() / 2);
                vec![a, b, c]
            } else {
                vec![f.as_slice()]
            }
        })
        .collect();
    let pkts: Vec<RxPacket<'_>> = splits
        .iter()
        .enumerate()
        .map(|(i, p)| RxPacket {
            hdr: if i == 50 {
                bad
            } else {
                VirtioNetHdr::default()
            },
            pieces: p,
        })
        .collect();
    let mut ok = vec![false; pkts.len()];
    batch.write(&pkts, &mut ok);
    assert!(!ok[50], "the refused header is reported");
    assert!(ok.iter().enumerate().all(|(i, o)| *o || i == 50), "{ok:?}");
    if let Some(why) = &batch.fallback {
        println!("io_uring not used here ({why}): checked the writev fallback");
    } else {
        assert_eq!((batch.batches, batch.batched_packets), (1, 100));
    }
    let got = receive(&sock, 99);
    let want: Vec<&Vec<u8>> = frames
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 50)
        .map(|(_, f)| f)
        .collect();
    assert_eq!(got.len(), 99, "frames seen on the TAP");
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, *w, "frame {k} differs or is out of order");
    }

    // A batch of one takes the plain writev path.
    let one = frame(1000, 200);
    let pieces = [one.as_slice()];
    let mut ok = [false];
    batch.write(
        &[RxPacket {
            hdr: VirtioNetHdr::default(),
            pieces: &pieces,
        }],
        &mut ok,
    );
    assert!(ok[0]);
    assert_eq!(receive(&sock, 1), vec![one]);
}
