//! The daemon refuses a frontend that asks for a pool mechanism the backend did not offer
//! (`feature-premapped` / `feature-static-buffer`, docs/premapped-static.md): external
//! frontends attach, complete the xenbus handshake up to `Connected` with such a request, and
//! must see the backend go to `Closing` instead of `Connected`, with `feature_refused` counted
//! on their vif only, while a real guest streams intact under `premapped`. Needs root.

use crate::common::*;

use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use pvnet_guest::netfront::Layout;
use pvnet_guest::xenbus::{await_backend, XsClient};
use pvnet_hv::grant::GuestGrantTable;
use pvnet_hv::store::XenbusState;
use pvnet_hv::{ctl, DomId};
use pvnet_netif::keys;

/// Attaches to domain `dom`, grants its rings and writes a complete frontend with the extra
/// `asks` keys, says `Connected`, and returns the state the backend then goes to.
fn ask(run_id: &str, dom: u16, asks: &[(&str, &str)]) -> XenbusState {
    let s = socket_seqpacket(&format!("/run/pvnet/{run_id}/attach-{dom}.sock"));
    let (_m, mut fds) = ctl::recv::<String>(s.as_fd())
        .unwrap()
        .expect("attach message");
    let sock = fds.pop().expect("control socket");
    let (info, mem, _evt) = pvnet_guest::run::boot(&sock).unwrap();
    let mem = Arc::new(mem);
    let mut xs = XsClient::new(sock);
    let d = info.device_path.clone();
    let (backend, f) = await_backend(&mut xs, &d).unwrap();
    assert!(
        f.premapped && !f.static_buffer,
        "the backend offers premapped only"
    );
    let layout = Layout {
        grant_frames: info.grant_frames,
    };
    let mut gnt = GuestGrantTable::new(mem.clone(), layout.grant_frames);
    let (txr, rxr) = (gnt.alloc().unwrap(), gnt.alloc().unwrap());
    gnt.grant_access(txr, DomId::DRIVER, layout.tx_ring(), false);
    gnt.grant_access(rxr, DomId::DRIVER, layout.rx_ring(), false);
    let mut kv: Vec<(String, String)> = vec![
        (keys::TX_RING_REF.into(), txr.0.to_string()),
        (keys::RX_RING_REF.into(), rxr.0.to_string()),
        (keys::EVENT_CHANNEL.into(), info.evtchn_port.to_string()),
        (keys::REQUEST_RX_COPY.into(), "1".into()),
        (keys::POOL_REF.into(), "10".into()),
        (keys::POOL_RX_SLOTS.into(), "4".into()),
        (keys::POOL_TX_SLOTS.into(), "4".into()),
    ];
    kv.extend(asks.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    for (k, v) in &kv {
        xs.write(&format!("{d}/{k}"), v).unwrap();
    }
    xs.write(
        &format!("{d}/{}", keys::STATE),
        &XenbusState::Connected.as_value(),
    )
    .unwrap();
    let st = xs
        .wait_state(
            &format!("{backend}/{}", keys::STATE),
            &[
                XenbusState::Connected,
                XenbusState::Closing,
                XenbusState::Closed,
            ],
            Duration::from_secs(10),
        )
        .unwrap();
    drop(mem);
    st
}

#[test]
fn a_frontend_asking_for_a_pool_that_was_not_offered_is_refused_alone() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("a_frontend_asking_for_a_pool_that_was_not_offered_is_refused_alone") {
        return;
    }
    // Domain 1 is a real guest under premapped; domains 2 and 3 are attached frontends.
    let run = Run::up(&["--guests", "1", "--attach", "2", "--grant", "premapped"]);
    let mut srv = server(&run, "g0", "10.77.0.10");
    let bytes: u64 = 1 << 30;
    let r = &run;
    std::thread::scope(|sc| {
        let streamer = sc.spawn(move || stream(r, "10.77.0.10", bytes));
        std::thread::sleep(Duration::from_millis(300));
        // Asks for static, which was not offered.
        assert_eq!(
            ask(&run.id, 2, &[(keys::FEATURE_STATIC_BUFFER, "1")]),
            XenbusState::Closing
        );
        // Asks for both.
        assert_eq!(
            ask(
                &run.id,
                3,
                &[
                    (keys::FEATURE_STATIC_BUFFER, "1"),
                    (keys::FEATURE_PREMAPPED, "1")
                ]
            ),
            XenbusState::Closing
        );
        let v = streamer.join().unwrap();
        assert_intact(&v, bytes);
    });
    let _ = srv.wait();
    let st = run.stat();
    for v in st["vifs"].as_array().unwrap() {
        let nb = &v["netback"];
        match u(&v["domid"]) {
            1 => {
                assert_eq!(v["state"], "connected", "{v}");
                assert_eq!(u(&nb["feature_refused"]), 0, "{nb}");
                assert_eq!(u(&nb["pool_mapped"]), 512, "{nb}");
            }
            _ => {
                assert_ne!(v["state"], "connected", "{v}");
                assert_eq!(u(&nb["feature_refused"]), 1, "{nb}");
                assert_eq!(u(&nb["pool_maps"]), 0, "{nb}");
            }
        }
    }
}
