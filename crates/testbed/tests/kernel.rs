//! Tests against the real kernel: they need root and skip otherwise.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use pvnet_testbed::ethtool::{self, Feature};
use pvnet_testbed::topology::{self, dd_addr, remote_addr};
use pvnet_testbed::{
    cleanup_run, link, list_netns, sys, Netns, RunId, Tap, Testbed, TestbedConfig,
};

fn is_root() -> bool {
    if nix::unistd::geteuid().is_root() {
        true
    } else {
        println!("skipping: needs root");
        false
    }
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A unique namespace name for this test process.
fn unique(tag: &str) -> String {
    format!(
        "pvnet-t{}-{}-{tag}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// A unique short link name (≤ 15 characters).
fn unique_link(tag: &str) -> String {
    let n = format!(
        "t{:x}{}{tag}",
        std::process::id() & 0xfffff,
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    assert!(n.len() <= 15, "{n}");
    n
}

/// Deletes the namespace names on drop, also when the test fails.
struct NsGuard(Vec<String>);

impl Drop for NsGuard {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = pvnet_testbed::netns::delete_by_name(n);
        }
    }
}

/// Deletes root-namespace links on drop.
struct LinkGuard(Vec<String>);

impl Drop for LinkGuard {
    fn drop(&mut self) {
        for l in &self.0 {
            if link::link_exists(l) {
                let _ = link::delete_link(l);
            }
        }
    }
}

#[test]
fn netns_lifecycle() {
    if !is_root() {
        return;
    }
    let name = unique("life");
    let _g = NsGuard(vec![name.clone()]);
    let ns = Netns::create(&name).unwrap();
    assert_eq!(ns.name(), name);
    assert!(list_netns().contains(&name));

    let err = Netns::create(&name).unwrap_err().to_string();
    assert!(err.contains("already exists"), "{err}");

    let again = Netns::open(&name).unwrap();
    let st1 = nix::sys::stat::fstat(ns.fd()).unwrap();
    let st2 = nix::sys::stat::fstat(again.fd()).unwrap();
    assert_eq!(
        st1.st_ino, st2.st_ino,
        "open() refers to the same namespace"
    );

    ns.delete().unwrap();
    assert!(!list_netns().contains(&name));
    ns.delete().unwrap(); // idempotent
    assert!(Netns::open(&name).is_err());
    // The name is free again.
    let ns2 = Netns::create(&name).unwrap();
    ns2.delete().unwrap();
}

#[test]
fn run_and_command_execute_inside() {
    if !is_root() {
        return;
    }
    let name = unique("run");
    let _g = NsGuard(vec![name.clone()]);
    let ns = Netns::create(&name).unwrap();

    let inside = ns.run(|| link::link_names().unwrap()).unwrap();
    assert_eq!(inside, vec!["lo".to_string()]);
    assert!(!ns.run(|| link::is_up("lo").unwrap()).unwrap());
    ns.run(|| link::set_up("lo", true).unwrap()).unwrap();
    assert!(ns.run(|| link::is_up("lo").unwrap()).unwrap());

    // The calling thread is unaffected.
    let my_ns = std::fs::read_link("/proc/thread-self/ns/net").unwrap();
    let their_ns = ns
        .run(|| std::fs::read_link("/proc/thread-self/ns/net").unwrap())
        .unwrap();
    assert_ne!(my_ns, their_ns);
    assert_eq!(
        my_ns,
        std::fs::read_link("/proc/thread-self/ns/net").unwrap()
    );

    // A child process: compare its /proc/self/ns/net link with the namespace's.
    let out = ns
        .command("readlink")
        .arg("/proc/self/ns/net")
        .output()
        .unwrap();
    assert!(out.status.success());
    let child = String::from_utf8(out.stdout).unwrap();
    assert_eq!(child.trim(), their_ns.to_str().unwrap());
    // The child's interface list (/proc/net/dev follows its namespace; sysfs would not).
    let out = ns.command("cat").arg("/proc/net/dev").output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let ifs: Vec<&str> = text
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(str::trim)
        .collect();
    assert_eq!(ifs, vec!["lo"]);

    // The command still works after the Netns is dropped.
    let mut cmd = ns.command("true");
    drop(ns);
    assert!(cmd.status().unwrap().success());
}

#[test]
fn veth_create_move_addr_up() {
    if !is_root() {
        return;
    }
    let a = unique_link("a");
    let b = unique_link("b");
    let nsname = unique("veth");
    let _lg = LinkGuard(vec![a.clone(), b.clone()]);
    let _g = NsGuard(vec![nsname.clone()]);
    let ns = Netns::create(&nsname).unwrap();

    link::create_veth(&a, &b).unwrap();
    assert!(link::link_exists(&a) && link::link_exists(&b));
    assert!(link::create_veth(&a, &b).is_err(), "EXCL");
    link::set_mtu(&a, 1400).unwrap();
    assert_eq!(link::get_mtu(&a).unwrap(), 1400);
    // A veth takes jumbo frames up to 64 KiB; past that the kernel refuses, and the error
    // names the device and its range.
    assert_eq!(link::mtu_range(&a).unwrap(), (68, 65535));
    link::set_mtu(&a, 65535).unwrap();
    assert_eq!(link::get_mtu(&a).unwrap(), 65535);
    let err = format!("{:#}", link::set_mtu(&a, 65536).unwrap_err());
    assert!(err.contains(&format!("MTU 65536 on {a}")), "{err}");
    assert!(err.contains("68 to 65535"), "{err}");
    assert_eq!(
        link::get_mtu(&a).unwrap(),
        65535,
        "unchanged after the refusal"
    );
    link::set_mtu(&a, 1400).unwrap();
    let mac = [0x02, 0x70, 0x76, 0xaa, 0xbb, 0xcc];
    link::set_mac(&a, mac).unwrap();
    assert_eq!(link::get_mac(&a).unwrap(), mac);

    link::move_to_netns(&a, &ns).unwrap();
    assert!(!link::link_exists(&a));
    let err = link::ifindex(&a).unwrap_err().to_string();
    assert!(err.contains("no such interface"), "{err}");
    let a2 = a.clone();
    ns.run(move || {
        assert!(link::ifindex(&a2).unwrap() > 1);
        assert_eq!(link::get_mac(&a2).unwrap(), mac, "MAC survives the move");
        link::add_ipv4(&a2, "10.77.0.1".parse().unwrap(), 24).unwrap();
        assert_eq!(
            link::ipv4_addrs(&a2).unwrap(),
            vec![("10.77.0.1".parse().unwrap(), 24)]
        );
        link::set_up(&a2, true).unwrap();
        assert!(link::is_up(&a2).unwrap());
        link::set_up(&a2, false).unwrap();
        assert!(!link::is_up(&a2).unwrap());
    })
    .unwrap();

    link::delete_link(&b).unwrap();
    assert!(!link::link_exists(&b));
    assert!(!ns.run(|| link::link_exists(&a)).unwrap(), "peer gone too");
}

#[test]
fn ethtool_features_on_veth() {
    if !is_root() {
        return;
    }
    let nsname = unique("eth");
    let _g = NsGuard(vec![nsname.clone()]);
    let ns = Netns::create(&nsname).unwrap();
    ns.run(|| {
        link::create_veth("e0", "e1").unwrap();
        for f in [
            Feature::Tso,
            Feature::Gso,
            Feature::TxCsum,
            Feature::Sg,
            Feature::RxCsum,
        ] {
            ethtool::set_feature("e0", f, false).unwrap();
            assert!(!ethtool::get_feature("e0", f).unwrap(), "{f:?} off");
        }
        for f in [
            Feature::Sg,
            Feature::TxCsum,
            Feature::RxCsum,
            Feature::Gso,
            Feature::Tso,
        ] {
            ethtool::set_feature("e0", f, true).unwrap();
            assert!(ethtool::get_feature("e0", f).unwrap(), "{f:?} on");
        }
        ethtool::set_feature("e1", Feature::Gro, true).unwrap();
        assert!(ethtool::get_feature("e1", Feature::Gro).unwrap());
        ethtool::set_feature("e1", Feature::Gro, false).unwrap();
        assert!(!ethtool::get_feature("e1", Feature::Gro).unwrap());
        let err = ethtool::get_feature("nosuch0", Feature::Tso).unwrap_err();
        assert!(err.to_string().contains("no such interface"), "{err}");
    })
    .unwrap();
}

#[test]
fn tap_in_namespace() {
    if !is_root() {
        return;
    }
    let nsname = unique("tap");
    let _g = NsGuard(vec![nsname.clone()]);
    let ns = Netns::create(&nsname).unwrap();
    let tap = ns.run(|| Tap::open("pvtap0", true).unwrap()).unwrap();
    assert_eq!(tap.name(), "pvtap0");
    assert_eq!(tap.vnet_hdr_size().unwrap(), 10);
    assert!(
        !link::link_exists("pvtap0"),
        "created in the namespace, not here"
    );
    let idx = ns.run(|| link::ifindex("pvtap0").unwrap()).unwrap();
    assert!(idx > 1);
    // A TAP's MTU stops 14 bytes short of a veth's (the Ethernet header of a 64 KiB frame);
    // the refusal names the device and its limit.
    let err = ns
        .run(|| {
            assert_eq!(link::mtu_range("pvtap0").unwrap(), (68, 65521));
            link::set_mtu("pvtap0", 65521).unwrap();
            assert_eq!(link::get_mtu("pvtap0").unwrap(), 65521);
            let e = format!("{:#}", link::set_mtu("pvtap0", 65522).unwrap_err());
            link::set_mtu("pvtap0", 1500).unwrap();
            e
        })
        .unwrap();
    assert!(
        err.contains("MTU 65522 on pvtap0") && err.contains("68 to 65521"),
        "{err}"
    );

    // Nothing queued yet: non-blocking read.
    let mut buf = [0u8; 2048];
    let e = tap.read(&mut buf).unwrap_err();
    assert!(
        e.kind() == std::io::ErrorKind::WouldBlock || e.raw_os_error() == Some(libc::EIO),
        "{e}"
    );

    // A frame written with a zero vnet header goes in (counted as received by the device).
    ns.run(|| link::set_up("pvtap0", true).unwrap()).unwrap();
    let hdr = [0u8; 10];
    let mut frame = vec![0xffu8; 6];
    frame.extend_from_slice(&[0x02, 0x70, 0x76, 0, 0, 1, 0x88, 0xb5]);
    frame.extend_from_slice(&[0u8; 46]);
    let n = tap
        .writev(&[std::io::IoSlice::new(&hdr), std::io::IoSlice::new(&frame)])
        .unwrap();
    assert_eq!(n, 10 + frame.len());

    let plain = ns.run(|| Tap::open("pvtap%d", false).unwrap()).unwrap();
    assert!(plain.name().starts_with("pvtap"));
    assert!(!plain.vnet_hdr());
    drop(tap);
    // The device goes with the last descriptor. Other tests in this binary fork children
    // concurrently, and a child holds a copy of every descriptor (close-on-exec included)
    // from its fork to its exec, so the last close may come a moment after ours.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while ns.run(|| link::link_exists("pvtap0")).unwrap() {
        assert!(
            std::time::Instant::now() < deadline,
            "non-persistent: pvtap0 still exists 5 s after its descriptor was closed"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn rps_and_sysctl_in_namespace() {
    if !is_root() {
        return;
    }
    let n1 = unique("rps");
    let n2 = unique("rps2");
    let _g = NsGuard(vec![n1.clone(), n2.clone()]);
    let ns = Netns::create(&n1).unwrap();
    let other = Netns::create(&n2).unwrap();
    ns.run(|| link::create_veth("r0", "r1").unwrap()).unwrap();
    assert_eq!(sys::get_rps_cpus(&ns, "r0", 0).unwrap(), 0);
    sys::set_rps_cpus(&ns, "r0", 0, 1).unwrap();
    assert_eq!(sys::get_rps_cpus(&ns, "r0", 0).unwrap(), 1);
    assert_eq!(sys::get_rps_cpus(&ns, "r1", 0).unwrap(), 0);
    let err = sys::set_rps_cpus(&other, "r0", 0, 1).unwrap_err();
    assert!(format!("{err:#}").contains("no such interface"), "{err:#}");

    // /proc/sys/net follows the calling thread's namespace.
    sys::write_sysctl_in(&ns, "net/ipv4/ip_forward", "1").unwrap();
    assert_eq!(
        sys::read_sysctl_in(&ns, "net/ipv4/ip_forward").unwrap(),
        "1"
    );
    assert_eq!(
        sys::read_sysctl_in(&other, "net.ipv4.ip_forward").unwrap(),
        "0"
    );
    sys::write_sysctl_in(&ns, "net/ipv4/tcp_rmem", "4096 131072 6291456").unwrap();
    let v = sys::read_sysctl_in(&ns, "net/ipv4/tcp_rmem").unwrap();
    assert_eq!(
        v.split_whitespace().collect::<Vec<_>>(),
        ["4096", "131072", "6291456"]
    );
}

#[test]
fn testbed_native_tcp() {
    if !is_root() {
        return;
    }
    let id = RunId::new();
    let cfg = TestbedConfig {
        id: id.clone(),
        guests: 2,
        mtu: 1500,
        rps_cpu: Some(0),
        gro: false,
        gro_max_size: None,
        remote_rps_cpu: (pvnet_testbed::cpu::nr_cpus() > 1).then_some(1),
    };
    let names: Vec<String> = ["remote", "dd", "g0", "g1"]
        .iter()
        .map(|r| id.ns_name(r))
        .collect();
    // Guards in case an assertion fails before teardown.
    let _g = NsGuard(names.clone());
    let _lg = LinkGuard(vec![id.short_link_name("r"), id.short_link_name("p")]);

    let mut tb = Testbed::create(cfg).unwrap();
    let listed = list_netns();
    for n in &names {
        assert!(listed.contains(n), "{n} missing");
    }
    assert!(!link::link_exists(&tb.remote_if) && !link::link_exists(&tb.dd_if));

    let rif = tb.remote_if.clone();
    tb.remote
        .run(|| {
            assert!(!ethtool::get_feature(&rif, Feature::Tso).unwrap());
            assert!(!ethtool::get_feature(&rif, Feature::Gso).unwrap());
            assert!(!ethtool::get_feature(&rif, Feature::TxCsum).unwrap());
            assert_eq!(
                link::root_qdisc(&rif).unwrap(),
                pvnet_testbed::topology::WIRE_QDISC
            );
            assert_eq!(link::root_qdisc("lo").unwrap(), "noqueue");
            assert_eq!(link::get_mtu(&rif).unwrap(), 1500);
            assert_eq!(link::ipv4_addrs(&rif).unwrap(), vec![(remote_addr(), 24)]);
            assert!(link::is_up(&rif).unwrap() && link::is_up("lo").unwrap());
        })
        .unwrap();
    let dif = tb.dd_if.clone();
    tb.dd
        .run(|| {
            assert!(!ethtool::get_feature(&dif, Feature::Gro).unwrap());
            assert!(link::ipv4_addrs(&dif).unwrap().is_empty());
            assert!(link::is_up(&dif).unwrap());
        })
        .unwrap();
    assert_eq!(sys::get_rps_cpus(&tb.dd, &tb.dd_if, 0).unwrap(), 1);
    let want_remote = if pvnet_testbed::cpu::nr_cpus() > 1 {
        2
    } else {
        0
    };
    assert_eq!(
        sys::get_rps_cpus(&tb.remote, &tb.remote_if, 0).unwrap(),
        want_remote
    );
    for g in &tb.guests {
        assert_eq!(g.run(|| link::link_names().unwrap()).unwrap(), vec!["lo"]);
    }

    tb.native_addr().unwrap();
    let listener = tb
        .dd
        .run(|| TcpListener::bind(SocketAddr::from((dd_addr(), 0))).unwrap())
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    let payload: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let expect = payload.clone();
    std::thread::scope(|s| {
        let server = s.spawn(move || {
            let (mut c, peer) = listener.accept().unwrap();
            assert_eq!(peer.ip(), std::net::IpAddr::V4(remote_addr()));
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut got = Vec::new();
            c.read_to_end(&mut got).unwrap();
            c.write_all(b"ok").unwrap();
            got
        });
        let reply = tb
            .remote
            .run(|| {
                let mut c = TcpStream::connect_timeout(
                    &SocketAddr::from((dd_addr(), port)),
                    Duration::from_secs(5),
                )
                .unwrap();
                c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                c.write_all(&payload).unwrap();
                c.shutdown(std::net::Shutdown::Write).unwrap();
                let mut r = Vec::new();
                c.read_to_end(&mut r).unwrap();
                r
            })
            .unwrap();
        assert_eq!(reply, b"ok");
        assert_eq!(server.join().unwrap(), expect);
    });

    tb.teardown().unwrap();
    tb.teardown().unwrap(); // idempotent
    let listed = list_netns();
    for n in &names {
        assert!(!listed.contains(n), "{n} left behind");
    }
    assert!(!link::link_exists(&id.short_link_name("r")));
    assert!(!link::link_exists(&id.short_link_name("p")));
    drop(tb);
    assert!(cleanup_run(id.as_str()).unwrap().is_empty());
}

#[test]
fn testbed_gro_option_turns_gro_on_at_the_driver_domain_port() {
    if !is_root() {
        return;
    }
    let id = RunId::new();
    let names: Vec<String> = ["remote", "dd"].iter().map(|r| id.ns_name(r)).collect();
    let _g = NsGuard(names);
    let _lg = LinkGuard(vec![id.short_link_name("r"), id.short_link_name("p")]);
    let mut tb = Testbed::create(TestbedConfig {
        id: id.clone(),
        guests: 0,
        mtu: 1500,
        rps_cpu: Some(0),
        gro: true,
        gro_max_size: Some(65442),
        remote_rps_cpu: None,
    })
    .unwrap();
    let dif = tb.dd_if.clone();
    let (on, max) = tb
        .dd
        .run(move || {
            (
                ethtool::get_feature(&dif, Feature::Gro).unwrap(),
                pvnet_testbed::link::gro_max_size(&dif).unwrap(),
            )
        })
        .unwrap();
    assert!(
        on,
        "gro: true leaves GRO on on the driver domain's veth end"
    );
    assert_eq!(max, 65442, "gro_max_size reached the kernel");
    // veth's NAPI runs in kernel threads pinned to the receiving CPU.
    let pids = sys::napi_threads(&tb.dd_if).unwrap();
    assert!(!pids.is_empty(), "no napi/{}-* thread", tb.dd_if);
    for p in &pids {
        let set = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(*p)).unwrap();
        let cpus: Vec<usize> = (0..pvnet_testbed::cpu::nr_cpus())
            .filter(|&c| set.is_set(c).unwrap())
            .collect();
        assert_eq!(cpus, [0], "napi thread {p} pinned to the receiving CPU");
        assert_eq!(
            pvnet_testbed::cpu::policy(*p).unwrap(),
            libc::SCHED_FIFO,
            "napi thread {p} runs ahead of tasks, as a softirq would"
        );
    }
    let dd_if = tb.dd_if.clone();
    tb.teardown().unwrap();
    // The namespace (and the veth in it) goes when its last handle closes, dismantled by a
    // kernel work queue: give it a moment.
    drop(tb);
    let t0 = std::time::Instant::now();
    while !sys::napi_threads(&dd_if).unwrap().is_empty() {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(10),
            "the napi threads end with the veth"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn testbed_rollback_and_cleanup_run() {
    if !is_root() {
        return;
    }
    let id = RunId::new();
    let names: Vec<String> = ["remote", "dd", "g0"]
        .iter()
        .map(|r| id.ns_name(r))
        .collect();
    let _g = NsGuard(names.clone());
    let _lg = LinkGuard(vec![id.short_link_name("r"), id.short_link_name("p")]);
    // Occupy the dd name: create() must fail and remove what it made.
    let blocker = Netns::create(&id.ns_name("dd")).unwrap();
    let err = Testbed::create(TestbedConfig {
        id: id.clone(),
        guests: 1,
        mtu: 1500,
        rps_cpu: None,
        gro: false,
        gro_max_size: None,
        remote_rps_cpu: None,
    })
    .unwrap_err();
    assert!(err.to_string().contains("already exists"), "{err}");
    let listed = list_netns();
    assert!(!listed.contains(&id.ns_name("remote")), "rolled back");
    assert!(listed.contains(&id.ns_name("dd")), "not ours to remove");

    // A leftover veth in the root namespace and the blocker are swept by cleanup_run.
    link::create_veth(&id.short_link_name("r"), &id.short_link_name("p")).unwrap();
    let removed = cleanup_run(id.as_str()).unwrap();
    assert!(removed.contains(&id.ns_name("dd")), "{removed:?}");
    assert!(removed.contains(&id.short_link_name("r")), "{removed:?}");
    assert!(!link::link_exists(&id.short_link_name("p")));
    assert!(!list_netns().contains(&blocker.name().to_string()));
    assert!(cleanup_run("../etc").is_err());
    let _ = topology::SUBNET_PREFIX;
}
