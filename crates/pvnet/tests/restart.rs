//! The driver domain restarted under load (`pvnet restart-dd`, docs/restart.md): with two
//! guests, a verified TCP stream into guest 0 and one out of guest 1 run through two restarts
//! and arrive intact; every frontend reconnected each time. The driver domain's NIC going down,
//! or away and back, and its stack TAP deleted, under it; a restart while the NIC is gone.
//! Needs root.
//!
//! Nothing here is timed: the reconnection is asserted to have happened (and counted), its
//! duration is measured by docs/restart.md's runs, not asserted.

use crate::common::*;

const MIB: u64 = 1 << 20;

/// Runs `pvnet restart-dd --json` (which waits for every frontend) and returns its report.
fn restart_dd(run: &Run) -> serde_json::Value {
    let out = ok(&["restart-dd", "--id", &run.id, "--json"]);
    serde_json::from_str(&out).expect("restart-dd json")
}

#[test]
fn tcp_streams_into_and_out_of_guests_survive_two_driver_domain_restarts() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("tcp_streams_into_and_out_of_guests_survive_two_driver_domain_restarts") {
        return;
    }
    let run = Run::up(&["--guests", "2"]);
    // Large enough that both streams are still under way at the second restart on a quiet
    // host (a GiB can take under two seconds here).
    let bytes = 4096 * MIB;
    let (into, out_of, reports) = std::thread::scope(|s| {
        let into = s.spawn(|| flow(&run, ("remote", "g0", "10.77.0.10"), 5301, bytes, 120));
        let out_of = s.spawn(|| flow(&run, ("g1", "remote", "10.77.0.1"), 5302, bytes, 120));
        let mut reports = Vec::new();
        for _ in 0..2 {
            std::thread::sleep(std::time::Duration::from_millis(1000));
            // Both streams are under way when the driver domain goes.
            let live = (!into.is_finished(), !out_of.is_finished());
            reports.push((live, restart_dd(&run)));
        }
        (into.join().unwrap(), out_of.join().unwrap(), reports)
    });
    assert_intact(&into.expect("the stream into guest 0"), bytes);
    assert_intact(&out_of.expect("the stream out of guest 1"), bytes);
    for (i, (live, r)) in reports.iter().enumerate() {
        eprintln!("restart {i}: streams under way {live:?}: {r}");
        assert_eq!(*live, (true, true), "restart {i} came after a stream ended");
        assert_eq!(u(&r["restarts"]), i as u64 + 1, "{r}");
        assert_eq!(u(&r["last"]["vifs"]), 2, "{r}");
        assert_eq!(u(&r["last"]["reconnected"]), 2, "{r}");
        assert!(r["last"]["reconnect_ms"].is_f64(), "{r}");
    }
    let st = run.stat();
    assert_eq!(u(&st["restart"]["reconnections"]), 4, "{}", st["restart"]);
    for v in st["vifs"].as_array().unwrap() {
        assert_eq!(v["state"], "connected", "{v}");
        assert_eq!(u(&v["reconnections"]), 2, "{v}");
        // The frontend's own count of what it went through (reported every 500 ms).
        let nf = &v["netfront"];
        assert_eq!(u(&nf["disconnects"]), 2, "{nf}");
        assert_eq!(u(&nf["reconnects"]), 2, "{nf}");
        assert_eq!(u(&nf["tx_lost_at_disconnect"]), 0, "{nf}");
    }
    // After the restarts the path still carries a fresh verified stream each way.
    assert_intact(
        &flow(&run, ("remote", "g1", "10.77.0.11"), 5303, 64 * MIB, 60).expect("a stream after"),
        64 * MIB,
    );
}

#[test]
fn a_restart_with_persistent_grants_and_aggregation_keeps_a_stream_intact() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("a_restart_with_persistent_grants_and_aggregation_keeps_a_stream_intact") {
        return;
    }
    // Persistent grants are negotiated again with the new backend; segments the old
    // aggregation engine held die with it and TCP sends them again.
    let run = Run::up(&[
        "--guests",
        "2",
        "--grant",
        "persistent",
        "--lro",
        "adaptive",
    ]);
    let bytes = 2048 * MIB;
    let (into, r) = std::thread::scope(|s| {
        let into = s.spawn(|| flow(&run, ("remote", "g1", "10.77.0.11"), 5311, bytes, 120));
        std::thread::sleep(std::time::Duration::from_millis(1000));
        let live = !into.is_finished();
        let r = restart_dd(&run);
        assert!(live, "the restart came after the stream ended");
        (into.join().unwrap(), r)
    });
    assert_intact(&into.expect("the stream into guest 1"), bytes);
    assert_eq!(u(&r["last"]["reconnected"]), 2, "{r}");
    let st = run.stat();
    let v1 = &st["vifs"][1];
    assert_eq!(v1["state"], "connected", "{v1}");
    assert_eq!(u(&v1["reconnections"]), 1, "{v1}");
    // The new backend runs persistent grants again, and used them.
    let nb = &v1["netback"];
    assert_eq!(nb["grant_mechanism"], "persistent", "{nb}");
    assert!(u(&nb["persistent_hits"]) > 0, "{nb}");
    assert_eq!(u(&v1["netfront"]["grants_leaked"]), 0, "{v1}");
}

#[test]
fn a_guest_that_dies_during_a_restart_is_reclaimed_and_the_restart_completes() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("a_guest_that_dies_during_a_restart_is_reclaimed_and_the_restart_completes")
    {
        return;
    }
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let run = Run::up(&["--guests", "2"]);
    let info = run.info();
    let victim = Pid::from_raw(info["guest_pids"][1].as_i64().expect("guest 1's pid") as i32);
    // Guest 1 cannot answer its backend's going: it is stopped.
    kill(victim, Signal::SIGSTOP).expect("stop guest 1");
    let out = ok(&["restart-dd", "--id", &run.id, "--no-wait", "--json"]);
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(u(&r["last"]["vifs"]), 2, "{r}");
    let st = stat_until(&run, "guest 0 reconnects", |st| {
        st["restart"]["last"]["reconnected"].as_u64() == Some(1)
    });
    assert!(
        st["restart"]["last"]["reconnect_ms"].is_null(),
        "guest 1 is pending: {st}"
    );
    assert_eq!(st["vifs"][1]["state"], "restarting", "{}", st["vifs"][1]);
    // It dies before it let go: its domain is reclaimed and the restart's account closes.
    kill(victim, Signal::SIGKILL).expect("kill guest 1");
    let st = stat_until(&run, "guest 1 reclaimed", |st| {
        st["vifs"][1]["state"] == "closed"
    });
    let last = &st["restart"]["last"];
    assert!(last["reconnect_ms"].is_f64(), "{last}");
    assert_eq!(u(&last["reconnected"]), 1, "{last}");
    assert_eq!(u(&st["reclaimed"]["domains"]), 1, "{st}");
    assert_eq!(st["vifs"][0]["state"], "connected");
    // Guest 0 goes on through the new driver domain.
    assert_intact(
        &flow(&run, ("remote", "g0", "10.77.0.10"), 5321, 64 * MIB, 60).expect("a stream after"),
        64 * MIB,
    );
}

#[test]
fn restart_dd_is_refused_without_a_driver_domain() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("restart_dd_is_refused_without_a_driver_domain") {
        return;
    }
    let run = Run::up(&["--mode", "linux"]);
    fails_saying(
        &["restart-dd", "--id", &run.id],
        "no driver domain to restart",
    );
    // Nor a port: `stat` does not call it closed (false is a port that failed).
    let st = run.stat();
    assert!(st["port"]["open"].is_null(), "{}", st["port"]);
}

/// The run's driver-domain namespace and the name of its NIC (the veth end the port opens).
fn dd_nic(run: &Run) -> (pvnet_testbed::Netns, String) {
    let id = pvnet_testbed::RunId::parse(&run.id).unwrap();
    let dd = pvnet_testbed::Netns::open(&id.ns_name("dd")).unwrap();
    (
        dd,
        id.short_link_name(pvnet_testbed::topology::DD_IF_SUFFIX),
    )
}

#[test]
fn the_nic_going_down_or_away_and_the_stack_tap_deleted_leave_the_driver_domain_asleep_and_its_ports_come_back(
) {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root(
        "the_nic_going_down_or_away_and_the_stack_tap_deleted_leave_the_driver_domain_asleep_and_its_ports_come_back",
    ) {
        return;
    }
    use pvnet_testbed::link;
    let run = Run::up(&[]);
    let (dd, nic) = dd_nic(&run);
    // 1. The link goes down and up.
    dd.run(|| {
        link::set_up(&nic, false).unwrap();
        link::set_up(&nic, true).unwrap();
    })
    .unwrap();
    // The kernel left ENETDOWN on the port's socket; the daemon read it.
    let st = stat_until(&run, "the daemon reads the port's error", |st| {
        u(&st["pnic"]["socket_errors"]) >= 1
    });
    assert_eq!(
        st["pnic"]["last_socket_error"]
            .as_str()
            .map(|e| e.contains("down")),
        Some(true),
        "{}",
        st["pnic"]
    );
    assert_eq!(
        st["port"]["nic_lost"], 0,
        "a link that came back is no NIC lost"
    );
    assert_asleep(&run, "after the link went down and up");
    // And the port carries a stream again.
    assert_intact(
        &flow(&run, ("remote", "g0", "10.77.0.10"), 5331, 64 * MIB, 60).expect("a stream after"),
        64 * MIB,
    );
    // 2. The driver domain's stack TAP is deleted: it comes off the path, and is made again.
    dd.run(|| link::delete_link("pvdd0").unwrap()).unwrap();
    let st = stat_until(&run, "the stack TAP is made again", |st| {
        u(&st["port"]["reopened"]) == 1
    });
    assert_eq!(u(&st["port"]["stack_tap_lost"]), 1, "{}", st["port"]);
    assert_eq!(
        st["port"]["open"], true,
        "the physical port stayed: {}",
        st["port"]
    );
    assert_asleep(&run, "after the stack TAP was deleted");
    ping(&run, "g0", "10.77.0.2", 3);
    // 3. The NIC leaves the namespace: the port comes off the path and is tried again.
    let aside = pvnet_testbed::Netns::create(&format!("pvnet-{}-aside", run.id)).unwrap();
    dd.run(|| link::move_to_netns(&nic, &aside).unwrap())
        .unwrap();
    let st = stat_until(&run, "the port comes off and is tried again", |st| {
        u(&st["port"]["retries"]) >= 2
    });
    assert_eq!(st["port"]["open"], false, "{}", st["port"]);
    assert_eq!(u(&st["port"]["nic_lost"]), 1, "{}", st["port"]);
    assert!(st["pnic"].is_null(), "no port on the path: {}", st["pnic"]);
    // It comes back: the port opens on it, without a restart, and carries a stream.
    aside
        .run(|| link::move_to_netns(&nic, &dd).unwrap())
        .unwrap();
    dd.run(|| link::set_up(&nic, true).unwrap()).unwrap();
    let st = stat_until(&run, "the port opens again", |st| {
        st["port"]["open"] == true
    });
    assert_eq!(u(&st["port"]["reopened"]), 2, "{}", st["port"]);
    assert_eq!(u(&st["restart"]["restarts"]), 0, "{}", st["restart"]);
    assert_intact(
        &flow(&run, ("remote", "g0", "10.77.0.10"), 5333, 64 * MIB, 60).expect("a stream after"),
        64 * MIB,
    );
}

#[test]
fn a_restart_without_its_nic_brings_the_guests_back_and_the_port_once_the_nic_returns() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root(
        "a_restart_without_its_nic_brings_the_guests_back_and_the_port_once_the_nic_returns",
    ) {
        return;
    }
    use pvnet_testbed::link;
    let run = Run::up(&["--guests", "2"]);
    let (dd, nic) = dd_nic(&run);
    // The NIC leaves the driver domain (into a namespace of the run's, which `down` deletes).
    let aside = pvnet_testbed::Netns::create(&format!("pvnet-{}-aside", run.id)).unwrap();
    dd.run(|| link::move_to_netns(&nic, &aside).unwrap())
        .unwrap();
    let o = pvnet(&["restart-dd", "--id", &run.id, "--json"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "a restart without its NIC succeeded");
    assert!(
        err.contains("ports did not open") && err.contains(&nic),
        "{err}"
    );
    // The vifs came back all the same: the restart went on without the port.
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("restart-dd json");
    let last = &r["last"];
    assert_eq!((u(&last["vifs"]), u(&last["reconnected"])), (2, 2), "{r}");
    assert!(last["port_opened_ms"].is_null(), "{r}");
    assert!(last["port_error"].as_str().unwrap().contains(&nic), "{r}");
    // Guest to guest goes through the new driver domain's switch.
    ping(&run, "g0", "10.77.0.11", 3);
    let st = stat_until(&run, "the daemon tries the port again", |st| {
        u(&st["restart"]["last"]["port_retries"]) >= 2
    });
    assert!(st["restart"]["last"]["port_opened_ms"].is_null(), "{st}");
    // The NIC comes back: the next try opens the port, and the wire carries a stream again.
    aside
        .run(|| link::move_to_netns(&nic, &dd).unwrap())
        .unwrap();
    dd.run(|| link::set_up(&nic, true).unwrap()).unwrap();
    let st = stat_until(&run, "the port opens", |st| {
        st["restart"]["last"]["port_opened_ms"].is_f64()
    });
    assert!(
        st["pnic"].is_object(),
        "the port is on the data path again: {st}"
    );
    // The NIC's leaving took the old port off before the restart; the loop opened the new
    // driver domain's ports once.
    let port = &st["port"];
    assert_eq!(
        (port["open"].as_bool(), u(&port["reopened"])),
        (Some(true), 1),
        "{port}"
    );
    for v in st["vifs"].as_array().unwrap() {
        assert_eq!(v["state"], "connected", "{v}");
    }
    assert_intact(
        &flow(&run, ("remote", "g1", "10.77.0.11"), 5332, 64 * MIB, 60).expect("a stream after"),
        64 * MIB,
    );
}
