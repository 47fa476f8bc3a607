//! What a packet ring costs per byte with 64 KiB frames: TPACKET_V2 with 64 KiB slots (what
//! `Pnic` uses for port GRO) against TPACKET_V3 blocks, frames packed one after the other.
//!
//! `ringcost IFNAME v2|v3 SECONDS`, run in the namespace of IFNAME (e.g. with `ip netns exec`)
//! while a stream crosses it: reads every frame for SECONDS (touching its first and last byte,
//! as a consumer would), then prints one JSON line with frames, bytes, the kernel's drops and
//! this process's CPU time. The kernel's copy into the ring runs in the receiving CPU's
//! softirq, not here: compare the receiving CPU's busy time with and without a reader.
//! Both rings hold 64 MiB. Needs CAP_NET_RAW.

use std::time::{Duration, Instant};

const V2_FRAME: u32 = 65536;
const V3_BLOCK: u32 = 1 << 20;
const RING_BYTES: u32 = 64 << 20;

fn die(what: &str) -> ! {
    eprintln!("ringcost: {what}: {}", std::io::Error::last_os_error());
    std::process::exit(1)
}

fn setsockopt<T>(fd: i32, name: i32, v: &T, what: &str) {
    // SAFETY: v points to a live T of the given size for the call.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_PACKET,
            name,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as u32,
        )
    };
    if r < 0 {
        die(what)
    }
}

fn cpu_ns() -> u64 {
    // SAFETY: rusage is plain data; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as u64 * 1_000_000_000 + tv.tv_usec as u64 * 1000;
    t(ru.ru_utime) + t(ru.ru_stime)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!("usage: ringcost IFNAME v2|v3 SECONDS");
        std::process::exit(2);
    }
    let v3 = args[2] == "v3";
    let secs: f64 = args[3].parse().expect("seconds");
    let name = std::ffi::CString::new(args[1].as_str()).unwrap();
    // SAFETY: a valid NUL-terminated name.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if ifindex == 0 {
        die("if_nametoindex")
    }
    // SAFETY: plain syscall.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
    if fd < 0 {
        die("socket")
    }
    let one: i32 = 1;
    setsockopt(
        fd,
        libc::PACKET_IGNORE_OUTGOING,
        &one,
        "PACKET_IGNORE_OUTGOING",
    );
    setsockopt(fd, libc::PACKET_VNET_HDR, &one, "PACKET_VNET_HDR");
    let version = if v3 {
        libc::tpacket_versions::TPACKET_V3
    } else {
        libc::tpacket_versions::TPACKET_V2
    } as i32;
    setsockopt(fd, libc::PACKET_VERSION, &version, "PACKET_VERSION");
    let (block, nblocks) = if v3 {
        (V3_BLOCK, RING_BYTES / V3_BLOCK)
    } else {
        (V2_FRAME, RING_BYTES / V2_FRAME)
    };
    if v3 {
        let req = libc::tpacket_req3 {
            tp_block_size: block,
            tp_block_nr: nblocks,
            tp_frame_size: 2048,
            tp_frame_nr: block / 2048 * nblocks,
            // Blocks retire when full or after 1 ms.
            tp_retire_blk_tov: 1,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        setsockopt(fd, libc::PACKET_RX_RING, &req, "PACKET_RX_RING v3");
    } else {
        let req = libc::tpacket_req {
            tp_block_size: block,
            tp_block_nr: nblocks,
            tp_frame_size: V2_FRAME,
            tp_frame_nr: nblocks,
        };
        setsockopt(fd, libc::PACKET_RX_RING, &req, "PACKET_RX_RING v2");
    }
    let len = (block * nblocks) as usize;
    // SAFETY: maps the socket's ring; the kernel checks the length.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        die("mmap")
    }
    let base = base.cast::<u8>();
    // SAFETY: sockaddr_ll is plain data.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: a valid sockaddr_ll of the given length.
    if unsafe {
        libc::bind(
            fd,
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    } < 0
    {
        die("bind")
    }
    let (mut frames, mut bytes, mut sink) = (0u64, 0u64, 0u8);
    let mut i = 0usize;
    let (cpu0, t0) = (cpu_ns(), Instant::now());
    let end = t0 + Duration::from_secs_f64(secs);
    let status = |off: usize| {
        // SAFETY: off is a block or slot start inside the mapping, 8-byte aligned; the word is
        // shared with the kernel and only read and written atomically.
        unsafe { &*base.add(off).cast::<std::sync::atomic::AtomicU32>() }
    };
    use std::sync::atomic::Ordering::{Acquire, Release};
    while Instant::now() < end {
        let off = i * block as usize;
        // Both headers begin with a status word (V3: block_status after version and
        // offset_to_priv, 8 bytes in).
        let st = if v3 { status(off + 8) } else { status(off) };
        if st.load(Acquire) & libc::TP_STATUS_USER == 0 {
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(&mut p, 1, 10) };
            continue;
        }
        if v3 {
            // SAFETY: the block is ours (TP_STATUS_USER); its descriptor is plain data at its
            // start, and each packet's header at the offsets the kernel wrote, inside the block.
            unsafe {
                let bd = &*base.add(off).cast::<libc::tpacket_block_desc>();
                let h1 = bd.hdr.bh1;
                let mut at = h1.offset_to_first_pkt as usize;
                for _ in 0..h1.num_pkts {
                    let ph = &*base.add(off + at).cast::<libc::tpacket3_hdr>();
                    let data = base.add(off + at + ph.tp_mac as usize);
                    sink ^= *data ^ *data.add(ph.tp_snaplen as usize - 1);
                    frames += 1;
                    bytes += u64::from(ph.tp_snaplen);
                    at += ph.tp_next_offset as usize;
                }
            }
        } else {
            // SAFETY: the slot is ours (TP_STATUS_USER); its header is plain data at its start.
            unsafe {
                let h = &*base.add(off).cast::<libc::tpacket2_hdr>();
                let data = base.add(off + h.tp_mac as usize);
                sink ^= *data ^ *data.add(h.tp_snaplen as usize - 1);
                bytes += u64::from(h.tp_snaplen);
            }
            frames += 1;
        }
        st.store(libc::TP_STATUS_KERNEL, Release);
        i = (i + 1) % nblocks as usize;
    }
    let cpu = cpu_ns() - cpu0;
    // SAFETY: tpacket_stats_v3 is plain data (its first two fields are V2's).
    let mut ks: libc::tpacket_stats_v3 = unsafe { std::mem::zeroed() };
    let mut l = std::mem::size_of::<libc::tpacket_stats_v3>() as u32;
    // SAFETY: ks/l describe a writable buffer.
    unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            (&mut ks as *mut libc::tpacket_stats_v3).cast(),
            &mut l,
        )
    };
    println!(
        "{{\"ring\":\"{}\",\"frames\":{frames},\"bytes\":{bytes},\"drops\":{},\"reader_cpu_ns\":{cpu},\"seconds\":{:.3},\"x\":{sink}}}",
        args[2],
        ks.tp_drops,
        t0.elapsed().as_secs_f64()
    );
}
