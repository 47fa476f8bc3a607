//! End to end with receive aggregation in the driver domain: every flush policy and both
//! representations carry a GiB of real TCP into a guest intact, request/response keeps working
//! under delayed flushes, `pvnet set` reconfigures a running system under load, and a guest
//! without GSO never sees an aggregate. Needs root.

use crate::common::*;

const GIB: u64 = 1 << 30;

/// Streams a GiB into guest 0 of a run started with `args` and checks it arrived intact
/// and aggregated; returns the run's counters afterwards.
fn gib_through(args: &[&str]) -> serde_json::Value {
    let mut a = vec!["--guests", "1"];
    a.extend_from_slice(args);
    let run = Run::up(&a);
    stream_intact(&run, "g0", "10.77.0.10", GIB);
    let st = run.stat();
    let l = &st["lro"];
    assert!(l.is_object(), "no aggregation counters: {st}");
    // Aggregates were built and reached the guest as GSO packets.
    assert!(u(&l["segments_in"]) > 100_000, "{l}");
    assert!(u(&l["gso_out"]) > 1000, "{l}");
    assert!(l["lro_rate"].as_f64().unwrap() > 1.5, "{l}");
    assert_eq!(u(&l["flows"]), 0, "nothing held after the stream: {l}");
    assert!(u(&l["flush_latency"]["count"]) > 0, "{l}");
    let vif = &st["vifs"][0];
    assert_eq!(vif["state"], "connected");
    assert!(u(&vif["netback"]["rx_gso_packets"]) > 1000, "{vif}");
    assert!(u(&vif["netfront"]["rx_gso_packets"]) > 1000, "{vif}");
    // The guest's own aggregation rate (the bench's per-guest LRO rate): the segments its
    // packets carried, per packet. Its one stream is all the engine aggregated.
    let (segs, pkts) = (
        u(&vif["netback"]["rx_segments"]),
        u(&vif["netback"]["rx_packets"]),
    );
    assert!(segs as f64 > 0.9 * u(&l["segments_in"]) as f64, "{vif} {l}");
    let (mine, all) = (segs as f64 / pkts as f64, l["lro_rate"].as_f64().unwrap());
    assert!(
        (mine - all).abs() < 0.1 * all,
        "guest {mine} against {all}: {vif}"
    );
    assert_eq!(u(&st["pnic"]["kernel_drops"]), 0, "{st}");
    // Every wire frame fit its slot.
    assert_eq!(u(&st["pnic"]["rx_truncated"]), 0, "{st}");
    // Frames went from their ring slots straight to the guest's pages (leases), and no slot
    // is still leased once the stream is over.
    let pn = &st["pnic"];
    assert!(u(&pn["rx_leased"]) > u(&pn["rx_frames"]) / 2, "{pn}");
    assert_eq!(u(&pn["rx_leases_outstanding"]), 0, "{pn}");
    st
}

#[test]
fn lro_flush_every_poll_skb_mode() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("lro_flush_every_poll_skb_mode") {
        return;
    }
    let st = gib_through(&["--lro", "poll", "--lro-mode", "skb"]);
    assert!(u(&st["lro"]["flush"]["poll"]) > 0, "{}", st["lro"]);
    // Baseline bridge: skb-mode chains were linearized.
    assert!(
        u(&st["daemon"]["linearized_bytes"]) > GIB / 2,
        "{}",
        st["daemon"]
    );
    assert_eq!(st["settings"]["lro"], "poll");
}

#[test]
fn bo_forwards_chains_without_linearizing() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("bo_forwards_chains_without_linearizing") {
        return;
    }
    let st = gib_through(&["--lro", "poll", "--bo"]);
    assert_eq!(u(&st["daemon"]["linearized_bytes"]), 0, "{}", st["daemon"]);
    assert!(
        u(&st["daemon"]["chains_forwarded"]) > 1000,
        "{}",
        st["daemon"]
    );
    assert_eq!(st["settings"]["bo"], true);
}

#[test]
fn delayed_aggregation_every_second_poll_page_mode() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("delayed_aggregation_every_second_poll_page_mode") {
        return;
    }
    let st = gib_through(&["--lro", "every:2", "--lro-mode", "page"]);
    assert!(u(&st["lro"]["flush"]["every"]) > 0, "{}", st["lro"]);
    // Page-mode aggregates are fragments: nothing to linearize even without BO.
    assert_eq!(u(&st["daemon"]["linearized_bytes"]), 0, "{}", st["daemon"]);
    assert!(u(&st["daemon"]["chains_forwarded"]) > 1000);
}

#[test]
fn timeout_flush_skb_mode() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("timeout_flush_skb_mode") {
        return;
    }
    let st = gib_through(&["--lro", "timeout:50", "--lro-mode", "skb"]);
    let f = &st["lro"]["flush"];
    assert!(u(&f["timeout"]) + u(&f["size_limit"]) > 0, "{f}");
    assert_eq!(u(&f["poll"]) + u(&f["every"]), 0, "{f}");
    // No aggregate waited without bound. The latency also counts time the daemon was off the
    // CPU (it shares it with the guest, and CI machines are shared): 5 ms was once exceeded
    // here, so the bound is far above the 1 ms hold limit yet far below a stream's length.
    let max = st["lro"]["flush_latency"]["max_us"].as_f64().unwrap();
    assert!(max < 100_000.0, "{max} us");
}

#[test]
fn adaptive_flush_page_mode() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("adaptive_flush_page_mode") {
        return;
    }
    let st = gib_through(&["--lro", "adaptive", "--lro-mode", "page"]);
    assert_eq!(
        u(&st["lro"]["flush"]["poll"]) + u(&st["lro"]["flush"]["every"]),
        0
    );
}

fn rr_works(policy: &str) {
    let run = Run::up(&["--guests", "1", "--lro", policy]);
    let mut srv = server(&run, "g0", "10.77.0.10");
    let o = run.exec("remote", &["perf", "rr", "10.77.0.10", "--duration", "2"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // A held request that no later frame flushes would stall the exchange for good; any
    // steady flow of transactions shows it does not. The rate itself is the bench's to
    // measure (a CI run on a busy host once saw 879 in 2 s, each waiting for a 4 ms tick).
    assert!(u(&v["transactions"]) > 100, "{policy}: {v}");
    assert_eq!(v["errors"].as_u64(), Some(0));
    let _ = srv.wait();
    let st = run.stat();
    assert!(u(&st["lro"]["frames_in"]) > 1000, "{}", st["lro"]);
}

#[test]
fn request_response_under_delayed_and_adaptive_flush() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("request_response_under_delayed_and_adaptive_flush") {
        return;
    }
    rr_works("every:2");
    rr_works("adaptive");
}

#[test]
fn a_guest_without_gso_never_receives_an_aggregate() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("a_guest_without_gso_never_receives_an_aggregate") {
        return;
    }
    let run = Run::up(&["--guests", "1", "--lro", "every:2", "--guest-gso", "off"]);
    let mut srv = server(&run, "g0", "10.77.0.10");
    let bytes = GIB / 4;
    let v = stream(&run, "10.77.0.10", bytes);
    assert_eq!(v["receiver"]["bytes"].as_u64(), Some(bytes), "{v}");
    assert_eq!(v["receiver"]["mismatches"].as_u64(), Some(0), "{v}");
    let _ = srv.wait();
    let st = run.stat();
    let vif = &st["vifs"][0];
    assert!(u(&st["lro"]["gso_out"]) > 100, "{}", st["lro"]);
    assert!(u(&vif["netback"]["rx_gso_segmented"]) > 100, "{vif}");
    assert_eq!(u(&vif["netback"]["rx_gso_packets"]), 0, "{vif}");
    assert_eq!(u(&vif["netfront"]["rx_gso_packets"]), 0, "{vif}");
    assert_eq!(u(&vif["netback"]["rx_gso_unsupported"]), 0, "{vif}");
}

#[test]
fn set_reconfigures_a_running_system_under_load() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("set_reconfigures_a_running_system_under_load") {
        return;
    }
    // From the plain PV path (not `up`'s default, which aggregates).
    let run = Run::up(&["--guests", "1", "--lro", "off"]);
    assert!(run.stat()["lro"].is_null());
    // Bad input is refused with a reason and changes nothing.
    for (args, says) in [
        (vec!["--lro", "every:0"], "every"),
        (vec!["--lro", "sometimes"], "sometimes"),
        (vec!["--lro-mode", "pages"], "skb or page"),
        (vec!["--bo", "maybe"], "on or off"),
        (vec!["--port", "eth9", "--lro", "poll"], "eth9"),
        (vec![], "nothing to set"),
    ] {
        let mut a = vec!["set", "--id", &run.id];
        a.extend_from_slice(&args);
        fails_saying(&a, says);
    }
    assert!(run.stat()["lro"].is_null());

    let mut srv = server(&run, "g0", "10.77.0.10");
    let bytes = 2 * GIB;
    let sender = run.spawn(
        "remote",
        &[
            "perf",
            "stream",
            "10.77.0.10",
            "--duration",
            "120",
            "--bytes",
            &bytes.to_string(),
        ],
    );
    let steps: [&[&str]; 6] = [
        &["--lro", "poll"],
        &["--lro", "every:2", "--lro-mode", "page"],
        &["--bo", "on", "--lro-mode", "skb"],
        &["--lro", "timeout:100"],
        &["--lro", "adaptive"],
        &["--lro", "off"],
    ];
    for s in steps {
        std::thread::sleep(std::time::Duration::from_millis(300));
        let mut a = vec!["set", "--id", &run.id];
        a.extend_from_slice(s);
        let out = ok(&a);
        assert!(out.contains("lro "), "{out}");
    }
    let o = sender.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["receiver"]["bytes"].as_u64(), Some(bytes), "{v}");
    assert_eq!(v["receiver"]["mismatches"].as_u64(), Some(0), "{v}");
    let _ = srv.wait();
    let st = run.stat();
    assert_eq!(st["settings"]["lro"], "off");
    assert_eq!(st["settings"]["bo"], true);
    assert!(st["lro"].is_null());
    assert!(u(&st["vifs"][0]["netback"]["rx_gso_packets"]) > 0);
}

/// The only interface of namespace `ns` other than loopback, and its MAC address.
fn the_interface(ns: &pvnet_testbed::netns::Netns) -> (String, [u8; 6]) {
    ns.run(|| {
        let name = nix::net::if_::if_nameindex()
            .unwrap()
            .iter()
            .map(|i| i.name().to_string_lossy().into_owned())
            .find(|n| n != "lo")
            .expect("an interface");
        let mac = nix::ifaddrs::getifaddrs()
            .unwrap()
            .filter(|a| a.interface_name == name)
            .find_map(|a| a.address?.as_link_addr()?.addr())
            .expect("a link address");
        (name, mac)
    })
    .unwrap()
}

/// A TCP/IPv4 segment with correct checksums, flags ACK only (no PSH), built with the wire
/// crate's views.
fn segment(dst: [u8; 6], src: [u8; 6], seq: u32, id: u16, payload: &[u8]) -> Vec<u8> {
    use pvnet_wire::checksum::{combine, fold, pseudo_header_v4, sum};
    use pvnet_wire::{ethernet, ipv4, tcp};
    use std::net::Ipv4Addr;
    let (sip, dip) = (Ipv4Addr::new(10, 77, 0, 1), Ipv4Addr::new(10, 77, 0, 10));
    let (l3, l4) = (
        ethernet::HEADER_LEN,
        ethernet::HEADER_LEN + ipv4::HEADER_LEN,
    );
    let tcp_len = tcp::HEADER_LEN + payload.len();
    let mut f = vec![0u8; l4 + tcp_len];
    let mut eth = ethernet::Frame::new_unchecked(&mut f[..]);
    eth.set_dst(ethernet::MacAddr(dst));
    eth.set_src(ethernet::MacAddr(src));
    eth.set_ethertype(ethernet::ETHERTYPE_IPV4);
    let mut ip = ipv4::Packet::new_unchecked(&mut f[l3..]);
    ip.set_version_ihl(ipv4::HEADER_LEN);
    ip.set_total_len((ipv4::HEADER_LEN + tcp_len) as u16);
    ip.set_ident(id);
    ip.set_unfragmented(true);
    ip.set_ttl(64);
    ip.set_protocol(ipv4::PROTO_TCP);
    ip.set_src_addr(sip);
    ip.set_dst_addr(dip);
    ip.fill_checksum();
    // The data offset (no options): the view has no setter for it.
    f[l4 + 12] = ((tcp::HEADER_LEN / 4) << 4) as u8;
    let mut t = tcp::Segment::new_unchecked(&mut f[l4..]);
    t.set_src_port(40000);
    t.set_dst_port(5302);
    t.set_seq_number(seq);
    t.set_ack_number(1);
    t.set_flags(tcp::TcpFlags::ACK);
    t.set_window(4096);
    t.payload_mut().copy_from_slice(payload);
    let ph = pseudo_header_v4(sip, dip, ipv4::PROTO_TCP, tcp_len as u32);
    let c = !fold(combine(ph, sum(&f[l4..])));
    tcp::Segment::new_unchecked(&mut f[l4..]).set_checksum(c);
    f
}

/// The daemon's aggregation timer delivers what nothing else would. Bursts of segments
/// without PSH are written onto the remote host's wire with a pause after each: each burst
/// ends as an aggregate held with nothing behind it, and only the timer (armed at the end of
/// the pass, served from the daemon's epoll) lets it go. The guest's interface must see each
/// burst as one packet carrying all its bytes in order. Real TCP cannot be used here: every
/// aggregate of the remote host's TCP ended on a PSH segment, in a bulk stream and in bursts
/// sent with `MSG_MORE` alike (measured on kernel 6.18), and a bulk stream makes the daemon
/// read frames so late that they are due when read (0 to 3 timer arms in a GiB).
#[test]
fn the_timer_flushes_a_burst_nothing_follows() {
    use pvnet_pnic::{Pnic, PnicConfig};
    use pvnet_testbed::netns::Netns;
    use pvnet_wire::vnet::VirtioNetHdr;

    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("the_timer_flushes_a_burst_nothing_follows") {
        return;
    }
    const BURSTS: usize = 20;
    const SEGS: usize = 6;
    const LEN: usize = 1000;
    let run = Run::up(&["--guests", "1", "--lro", "timeout:1000"]);
    let g0 = Netns::open(&format!("pvnet-{}-g0", run.id)).unwrap();
    let remote = Netns::open(&format!("pvnet-{}-remote", run.id)).unwrap();
    let (g0_if, g0_mac) = the_interface(&g0);
    let (wire, wire_mac) = the_interface(&remote);
    let open = |ns: &Netns, ifname: String| {
        ns.run(move || {
            let mut cfg = PnicConfig::new(ifname);
            (cfg.frame_size, cfg.frame_nr) = (16384, 256);
            Pnic::open(&cfg).unwrap()
        })
        .unwrap()
    };
    let mut guest_side = open(&g0, g0_if);
    let sender = open(&remote, wire);
    let d0 = run.stat()["daemon"].clone();
    let payload = |i: usize| (i.wrapping_mul(7) ^ (i >> 8)) as u8;
    let mut seen = Vec::new();
    for b in 0..BURSTS {
        for s in 0..SEGS {
            let at = (b * SEGS + s) * LEN;
            let bytes: Vec<u8> = (at..at + LEN).map(payload).collect();
            let f = segment(
                g0_mac,
                wire_mac,
                1 + at as u32,
                (b * SEGS + s) as u16,
                &bytes,
            );
            sender.send(&VirtioNetHdr::default(), &[&f]).unwrap();
        }
        // The next burst goes once this one has reached the guest (it would continue the
        // aggregate otherwise): at once with a timer of 1 ms, within seconds on a loaded host.
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while seen.len() <= b && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(2));
            guest_side.poll(64, |fr| {
                let d = fr.data();
                match pvnet_wire::flow::parse_tcp(d) {
                    Ok(m) if m.key.dst_port == 5302 => {
                        seen.push((m.seq, d[m.payload_off..m.l3_end()].to_vec()))
                    }
                    _ => {}
                }
            });
        }
    }
    // Each burst reached the guest as one packet, whole and in order.
    assert_eq!(
        seen.len(),
        BURSTS,
        "packets at the guest: {:?}",
        seen.iter().map(|s| (s.0, s.1.len())).collect::<Vec<_>>()
    );
    for (b, (seq, data)) in seen.iter().enumerate() {
        let at = b * SEGS * LEN;
        assert_eq!(*seq, 1 + at as u32);
        assert_eq!(data.len(), SEGS * LEN, "burst {b}");
        assert!(
            data.iter().enumerate().all(|(i, &x)| x == payload(at + i)),
            "burst {b}"
        );
    }
    let st = run.stat();
    let d = &st["daemon"];
    let fires = u(&d["lro_timer_fires"]) - u(&d0["lro_timer_fires"]);
    // One fire a burst, unless the daemon was off the CPU for the whole millisecond between
    // reading a burst and ending its pass (the end of the pass then lets it go as due).
    assert!(fires as usize >= BURSTS / 2, "{fires} fires: {d}");
    let f = &st["lro"]["flush"];
    assert!(u(&f["timeout"]) >= BURSTS as u64, "{f}");
    assert_eq!(u(&f["psh"]), 0, "{f}");
}
