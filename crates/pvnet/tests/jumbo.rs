//! Jumbo frames end to end (`pvnet up --mtu 9000`): 9000-byte IP packets cross the wire, the
//! physical port, netback and netfront whole (a ping with Don't Fragment, a verified stream),
//! under `xen` and with aggregation; a frame longer than the port allows is refused and
//! counted, from either side; bad `--mtu` values are refused. Needs root (except the argument
//! checks).

use crate::common::*;

use std::time::{Duration, Instant};

use pvnet_testbed::ethtool::{self, Feature};
use pvnet_testbed::{link, topology, Netns, RunId};
use pvnet_wire::vnet::{self, VirtioNetHdr};

const MIB: u64 = 1 << 20;
/// ICMP payload of a 9000-byte IP packet (`ping -M do -s 8972`).
const JUMBO_PING: &str = "8972";

fn names(run: &Run) -> (RunId, String, String) {
    let id = RunId::parse(&run.id).unwrap();
    let r = id.short_link_name(topology::REMOTE_IF_SUFFIX);
    let p = id.short_link_name(topology::DD_IF_SUFFIX);
    (id, r, p)
}

/// The MTU of `ifname` in namespace `role` of the run.
fn mtu_in(run: &Run, role: &str, ifname: &str) -> u32 {
    let (id, ..) = names(run);
    let ns = Netns::open(&id.ns_name(role)).unwrap();
    let ifname = ifname.to_string();
    ns.run(move || link::get_mtu(&ifname).unwrap()).unwrap()
}

/// Runs `f` in namespace `role` of the run.
fn in_ns<R: Send>(run: &Run, role: &str, f: impl FnOnce() -> R + Send) -> R {
    let (id, ..) = names(run);
    Netns::open(&id.ns_name(role)).unwrap().run(f).unwrap()
}

/// Pings `dst` from `role` with `size` bytes of payload and Don't Fragment; the output.
fn ping_sized(run: &Run, role: &str, dst: &str, size: &str) -> std::process::Output {
    run.exec(role, &["perf", "ping", dst, "--count", "3", "--size", size])
}

/// [`ping_sized`] for requests that must go unanswered: each waits half a second for its reply
/// (an answer on this path takes well under a millisecond) instead of the default two.
fn ping_unanswered(run: &Run, role: &str, dst: &str, size: &str) -> std::process::Output {
    let args = [
        "perf", "ping", dst, "--count", "3", "--size", size, "--wait", "0.5",
    ];
    run.exec(role, &args)
}

/// Every interface on the path has the MTU, a 9000-byte ping goes both ways whole, a 256 MiB
/// stream arrives intact in jumbo frames and nothing was truncated or refused. Returns the
/// counters after the stream.
fn jumbo_path(extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["--guests", "1", "--mtu", "9000"];
    args.extend_from_slice(extra);
    let run = Run::up(&args);
    let (_, rif, pif) = names(&run);
    assert_eq!(mtu_in(&run, "remote", &rif), 9000);
    assert_eq!(mtu_in(&run, "dd", &pif), 9000);
    assert_eq!(mtu_in(&run, "dd", "pvdd0"), 9000);
    assert_eq!(mtu_in(&run, "g0", "eth0"), 9000);

    // 9000-byte IP packets, unfragmented, each way; and one byte more cannot leave.
    for (from, to) in [
        ("remote", "10.77.0.10"),
        ("g0", "10.77.0.1"),
        ("g0", "10.77.0.2"),
    ] {
        let o = ping_sized(&run, from, to, JUMBO_PING);
        assert!(
            o.status.success(),
            "{from} -> {to}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!((u(&v["received"]), u(&v["corrupted"])), (3, 0), "{v}");
    }
    let o = ping_sized(&run, "remote", "10.77.0.10", "8973");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("Message too long"),
        "{err}"
    );

    stream_intact(&run, "g0", "10.77.0.10", 256 * MIB);
    let st = run.stat();
    let pn = &st["pnic"];
    assert_eq!(u(&pn["mtu"]), 9000, "{pn}");
    assert_eq!(
        u(&pn["ring_frame_size"]),
        u64::from(pvnet_pnic::frame_size_for_mtu(9000)),
        "{pn}"
    );
    // The wire carried jumbo frames: at 1500 the port's frames average at most 1514 bytes.
    assert!(u(&pn["rx_frames"]) > 0, "{pn}");
    let per_frame = u(&pn["rx_bytes"]) / u(&pn["rx_frames"]);
    assert!(per_frame > 4000, "{per_frame} bytes per frame: {pn}");
    assert_eq!(u(&pn["rx_truncated"]), 0, "{pn}");
    assert_eq!(u(&pn["rx_bad"]), 0, "{pn}");
    let vif = &st["vifs"][0];
    assert_eq!(vif["state"], "connected", "{vif}");
    let nb = &vif["netback"];
    // Packets for the guest span several pages each.
    assert!(u(&nb["rx_slots"]) > 2 * u(&nb["rx_packets"]), "{nb}");
    assert!(u(&nb["rx_bytes"]) / u(&nb["rx_packets"]) > 4000, "{nb}");
    for c in [
        "tx_oversize",
        "rx_bad_length",
        "rx_no_sg",
        "tx_too_many_slots",
    ] {
        assert_eq!(u(&nb[c]), 0, "{c}: {nb}");
    }
    let nf = &vif["netfront"];
    for c in ["tx_dropped", "tx_errors", "rx_errors", "rx_bad_response"] {
        assert_eq!(u(&nf[c]), 0, "{c}: {nf}");
    }
    st
}

#[test]
fn jumbo_9000_through_xen() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("jumbo_9000_through_xen") {
        return;
    }
    let st = jumbo_path(&["--lro", "off"]);
    // Without aggregation every frame reaches the guest as it came off the wire.
    let nb = &st["vifs"][0]["netback"];
    assert_eq!(u(&nb["rx_gso_packets"]), 0, "{nb}");
}

#[test]
fn jumbo_9000_through_adaptive_aggregation() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("jumbo_9000_through_adaptive_aggregation") {
        return;
    }
    let st = jumbo_path(&["--lro", "adaptive"]);
    let l = &st["lro"];
    assert!(u(&l["gso_out"]) > 100, "{l}");
    let nb = &st["vifs"][0]["netback"];
    assert!(u(&nb["rx_gso_packets"]) > 100, "{nb}");
    // Aggregates of jumbo segments: more than 9000 bytes per packet to the guest on average.
    assert!(u(&nb["rx_bytes"]) / u(&nb["rx_packets"]) > 9000, "{nb}");
}

/// Waits until `f(stat)` holds; panics with the last stat after 10 s.
fn wait_for(run: &Run, what: &str, f: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let t0 = Instant::now();
    loop {
        let st = run.stat();
        if f(&st) {
            return st;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "{what}: {st}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sends, from the remote host's veth end `ifname` (TSO on), one TCP/IPv4 segment of
/// `payload` bytes to guest 0 as a GSO packet of `gso_size`-byte segments, through a packet
/// socket with a vnet header: the kernel passes it to the veth unsegmented, and the veth hands
/// it to its peer whole, longer than the peer's MTU.
fn inject_gso(ifname: &str, payload: usize, gso_size: u16) {
    ethtool::set_feature(ifname, Feature::TxCsum, true).unwrap();
    ethtool::set_feature(ifname, Feature::Sg, true).unwrap();
    ethtool::set_feature(ifname, Feature::Tso, true).unwrap();
    ethtool::set_feature(ifname, Feature::Gso, true).unwrap();
    let src_mac = link::get_mac(ifname).unwrap();
    let (src, dst) = (
        topology::remote_addr().octets(),
        topology::guest_addr(0).octets(),
    );
    let mut f = Vec::with_capacity(54 + payload);
    f.extend_from_slice(&topology::guest_mac(0));
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let ip_len = (20 + 20 + payload) as u16;
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[6] = 0x40; // DF
    ip[8] = 64;
    ip[9] = 6;
    ip[12..16].copy_from_slice(&src);
    ip[16..20].copy_from_slice(&dst);
    let c = !fold(sum(&ip));
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    let mut tcp = [0u8; 20];
    tcp[0..2].copy_from_slice(&40000u16.to_be_bytes());
    tcp[2..4].copy_from_slice(&9u16.to_be_bytes());
    tcp[4..8].copy_from_slice(&1u32.to_be_bytes());
    tcp[12] = 5 << 4;
    tcp[13] = 0x10; // ACK
    tcp[14..16].copy_from_slice(&65535u16.to_be_bytes());
    // CHECKSUM_PARTIAL: the field holds the pseudo-header sum.
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&src);
    pseudo.extend_from_slice(&dst);
    pseudo.extend_from_slice(&[0, 6]);
    pseudo.extend_from_slice(&((20 + payload) as u16).to_be_bytes());
    tcp[16..18].copy_from_slice(&fold(sum(&pseudo)).to_be_bytes());
    f.extend_from_slice(&tcp);
    f.extend((0..payload).map(|i| i as u8));
    let h = VirtioNetHdr {
        flags: vnet::F_NEEDS_CSUM,
        gso_type: vnet::GSO_TCPV4,
        hdr_len: 54,
        gso_size,
        csum_start: 34,
        csum_offset: 16,
    };
    let mut pkt = h.to_bytes().to_vec();
    pkt.extend_from_slice(&f);

    let ifindex = link::ifindex(ifname).unwrap();
    // SAFETY: plain socket calls on a descriptor this function owns; every pointer passed
    // refers to a live local of the size given.
    unsafe {
        let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "{}", std::io::Error::last_os_error());
        let on: libc::c_int = 1;
        let r = libc::setsockopt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_VNET_HDR,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
        let mut sll: libc::sockaddr_ll = std::mem::zeroed();
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_IP as u16).to_be();
        sll.sll_ifindex = ifindex as i32;
        sll.sll_halen = 6;
        sll.sll_addr[..6].copy_from_slice(&topology::guest_mac(0));
        let n = libc::sendto(
            fd,
            pkt.as_ptr().cast(),
            pkt.len(),
            0,
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        );
        let e = std::io::Error::last_os_error();
        libc::close(fd);
        assert_eq!(n, pkt.len() as isize, "{e}");
    }
}

fn sum(b: &[u8]) -> u32 {
    b.chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum()
}

fn fold(mut s: u32) -> u16 {
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

#[test]
fn frames_longer_than_the_port_allows_are_refused_and_counted() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("frames_longer_than_the_port_allows_are_refused_and_counted") {
        return;
    }
    let run = Run::up(&["--guests", "1", "--mtu", "9000"]);
    let (_, rif, pif) = names(&run);
    let nb = |st: &serde_json::Value, c: &str| u(&st["vifs"][0]["netback"][c]);
    let nf = |st: &serde_json::Value, c: &str| u(&st["vifs"][0]["netfront"][c]);

    // 1. A guest sending above the vif's MTU (its own interface raised to 9100): netback
    //    refuses the frame (9092 bytes > 9000 + 18) with an error on each of its 3 slots.
    in_ns(&run, "g0", || link::set_mtu("eth0", 9100).unwrap());
    let before = run.stat();
    let o = ping_unanswered(&run, "g0", "10.77.0.1", "9050");
    assert!(!o.status.success(), "an oversize echo request got through");
    let st = wait_for(&run, "netback counted the oversize frames", |st| {
        nf(st, "tx_errors") >= nf(&before, "tx_errors") + 9
    });
    assert_eq!(
        nb(&st, "tx_oversize") - nb(&before, "tx_oversize"),
        3,
        "{st}"
    );
    assert_eq!(nf(&st, "tx_errors") - nf(&before, "tx_errors"), 9, "{st}");
    assert!(
        st["vifs"][0]["fatal"].is_null(),
        "a refusal, not a disconnection"
    );
    in_ns(&run, "g0", || link::set_mtu("eth0", 9000).unwrap());

    // 2. The remote host sending above the port's MTU (its veth end raised to 9100): the
    //    driver domain's veth end refuses the frame (the kernel's `is_skb_forwardable`) and
    //    counts it; the packet ring never sees it.
    let rc0 = in_ns(&run, "remote", || link::counters(&rif).unwrap());
    let pc0 = in_ns(&run, "dd", || link::counters(&pif).unwrap());
    let before = run.stat();
    in_ns(&run, "remote", || link::set_mtu(&rif, 9100).unwrap());
    let o = ping_unanswered(&run, "remote", "10.77.0.10", "9050");
    assert!(!o.status.success(), "an oversize echo request got through");
    in_ns(&run, "remote", || link::set_mtu(&rif, 9000).unwrap());
    let rc1 = in_ns(&run, "remote", || link::counters(&rif).unwrap());
    let pc1 = in_ns(&run, "dd", || link::counters(&pif).unwrap());
    // The three requests, dropped: the port's rx_dropped (and the sender's tx_dropped).
    let what = format!("remote {rc0:?} -> {rc1:?}, port {pc0:?} -> {pc1:?}");
    assert_eq!(pc1.rx_dropped - pc0.rx_dropped, 3, "{what}");
    assert_eq!(rc1.tx_dropped - rc0.tx_dropped, 3, "{what}");
    let st = run.stat();
    assert_eq!(
        u(&st["pnic"]["rx_truncated"]),
        u(&before["pnic"]["rx_truncated"])
    );
    assert_eq!(u(&st["pnic"]["rx_bad"]), 0);

    // 3. A GSO packet the veth passes whole (20 KB, TSO on at the remote end): longer than a
    //    slot of the packet ring, it arrives truncated and is counted (`rx_truncated`), never
    //    forwarded cut short.
    let before = run.stat();
    let rif2 = rif.clone();
    in_ns(&run, "remote", move || inject_gso(&rif2, 20_000, 8948));
    let st = wait_for(&run, "the port counted a truncated frame", |st| {
        u(&st["pnic"]["rx_truncated"]) > u(&before["pnic"]["rx_truncated"])
    });
    assert_eq!(
        u(&st["pnic"]["rx_truncated"]) - u(&before["pnic"]["rx_truncated"]),
        1,
        "{st}"
    );
    // Nothing of it reached the guest (its counters move only with what crossed whole).
    assert!(
        nb(&st, "rx_bytes") - nb(&before, "rx_bytes") < 20_000,
        "{st}"
    );

    // The path still carries jumbo frames afterwards.
    let o = ping_sized(&run, "remote", "10.77.0.10", JUMBO_PING);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn bad_mtu_values_are_refused() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bounds = "--mtu must be between 1280 and 65535";
    for (args, want) in [
        (&["up", "--mtu", "1279"][..], bounds),
        (&["up", "--mtu", "65536"][..], bounds),
        (&["up", "--mtu", "0"][..], bounds),
        (&["up", "--mtu", "nine"][..], "invalid value"),
        (&["bench", "--quick", "--mtu", "576"][..], bounds),
    ] {
        fails_saying(args, want);
    }
    if !is_root() {
        eprintln!("skipping the kernel's own limits: needs root");
        return;
    }
    // A TAP takes at most 65521 (a 64 KiB frame with its Ethernet header): the PV modes, which
    // give the driver domain's stack a TAP, fail naming it; the native one takes 65535.
    let id = unique_id();
    fails_saying(
        &["up", "--id", &id, "--mtu", "65535"],
        "the kernel refused MTU 65535 on pvdd0: that device allows 68 to 65521",
    );
    assert_run_gone(&id);
    let run = Run::up(&["--mode", "linux", "--mtu", "65535"]);
    let (_, rif, pif) = names(&run);
    assert_eq!(mtu_in(&run, "remote", &rif), 65535);
    assert_eq!(mtu_in(&run, "dd", &pif), 65535);
}

#[test]
fn bench_runs_every_configuration_at_the_mtu_and_records_it() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("bench_runs_every_configuration_at_the_mtu_and_records_it") {
        return;
    }
    let out = std::env::temp_dir().join(format!("pvnet-bench-{}", unique_id()));
    ok(&[
        "bench",
        "--quick",
        "--configs",
        "linux,xen,adaptive",
        "--paired-rounds",
        "0",
        "--mtu",
        "9000",
        "--out",
        out.to_str().unwrap(),
    ]);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let p = &v["parameters"];
    assert_eq!(u(&p["mtu"]), 9000, "{p}");
    assert_eq!(
        u(&p["ring_frame_size"]),
        u64::from(pvnet_pnic::frame_size_for_mtu(9000)),
        "{p}"
    );
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("MTU 9000 on the wire"), "{report}");
    let samples = v["samples"].as_array().unwrap();
    assert_eq!(samples.len(), 6, "a warm-up and a repetition of each");
    for s in samples {
        assert!(s["throughput_mbps"].as_f64().unwrap() > 0.0, "{s}");
        if s["config"] != "linux" {
            // The PV testbeds' ports ran at the MTU and carried jumbo frames.
            let pn = &s["stat"]["pnic"];
            assert_eq!(u(&pn["mtu"]), 9000, "{pn}");
            assert!(
                u(&pn["rx_bytes"]) / u(&pn["rx_frames"]).max(1) > 4000,
                "{pn}"
            );
            assert_eq!(u(&pn["rx_truncated"]), 0, "{pn}");
        }
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn jumbo_9000_through_the_relay() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("jumbo_9000_through_the_relay") {
        return;
    }
    let run = Run::up(&["--mode", "relay", "--mtu", "9000"]);
    assert_eq!(mtu_in(&run, "g0", "eth0"), 9000);
    for (from, to) in [("remote", "10.77.0.10"), ("g0", "10.77.0.1")] {
        let o = ping_sized(&run, from, to, JUMBO_PING);
        assert!(
            o.status.success(),
            "{from} -> {to}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    stream_intact(&run, "g0", "10.77.0.10", 64 * MIB);
    let pn = &run.stat()["pnic"];
    assert!(u(&pn["rx_bytes"]) / u(&pn["rx_frames"]) > 4000, "{pn}");
    assert_eq!(u(&pn["rx_truncated"]), 0, "{pn}");
}
