//! The guest process: boots from what the toolstack sends, creates its network interface (a
//! TAP with a vnet header, in the guest's namespace, which the process already is in), does
//! the xenbus handshake, then moves packets between the TAP and the rings until told to stop.
//!
//! Once connected it keeps a watch on its backend's state: a backend that goes away (a driver
//! domain restarted) is followed through [`crate::reconnect`]: the frontend writes `Closing`,
//! takes its grants back, writes `Closed`, and when a new backend shows `InitWait` writes
//! `Initialising`, publishes fresh rings, writes `Connected` and, once the backend is
//! connected, posts again what the old one left unanswered. The TAP, and with it the guest's
//! TCP connections, stays up throughout; frames the guest sends meanwhile wait in the TAP's
//! queue (the TAP is not read while there is no backend).

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use pvnet_hv::ctl;
use pvnet_hv::evtchn::EvtchnEnd;
use pvnet_hv::frames::Mfn;
use pvnet_hv::mem::GuestMemory;
use pvnet_hv::DomId;
use pvnet_netif::keys;
use pvnet_testbed::ethtool::{self, Feature};
use pvnet_testbed::{link, Tap};

use crate::netfront::{Layout, Netfront, PoolMode};
use crate::proto::{BootInfo, FromGuest, ToGuest};
use crate::reconnect::{Action, Reconnector};
use crate::tapbatch::TapBatch;
use crate::xenbus::{
    await_backend, backend_state, publish, publish_and_connect, read_features, set_front_state,
    BackendFeatures, XsClient,
};
use pvnet_hv::store::XenbusState;

/// The token of the frontend's watch on its backend's state.
const BACKEND_WATCH: &str = "backend-state";

const EV_CTL: u64 = 1;
const EV_EVTCHN: u64 = 2;
const EV_TAP: u64 = 3;
/// Frames read from the TAP before the requests are pushed.
const TX_BATCH: usize = 64;
/// How often the guest reports its counters.
const STATS_EVERY: Duration = Duration::from_millis(500);

/// Receives the boot message and its three descriptors.
pub fn boot(sock: &OwnedFd) -> Result<(BootInfo, GuestMemory, EvtchnEnd)> {
    let (msg, mut fds) = ctl::recv::<ToGuest>(sock.as_fd())?
        .ok_or_else(|| anyhow!("toolstack closed the control socket before boot"))?;
    let ToGuest::Boot(info) = msg else {
        bail!("expected a boot message, got {msg:?}")
    };
    let want = 3 + usize::from(info.flip.is_some());
    if fds.len() != want {
        bail!(
            "boot message carried {} descriptors, expected {want}",
            fds.len()
        );
    }
    let machine = if info.flip.is_some() { fds.pop() } else { None };
    let wait = fds.pop().expect("3");
    let notify = fds.pop().expect("2");
    let mem = GuestMemory::from_fd(fds.pop().expect("1")).context("mapping guest memory")?;
    if mem.pages() != info.mem_pages {
        bail!(
            "guest memory has {} pages, boot info says {}",
            mem.pages(),
            info.mem_pages
        );
    }
    if let (Some(f), Some(machine)) = (&info.flip, machine) {
        let p2m: Vec<Mfn> = f.p2m.iter().map(|&m| Mfn(m)).collect();
        mem.attach_frames(machine.as_fd(), f.first_pfn, &p2m)
            .context("mapping the flip window")?;
    }
    Ok((info, mem, EvtchnEnd::from_fds(notify, wait)))
}

/// Runs a guest on an inherited control socket until Shutdown or the socket closes.
pub fn run_guest(sock: OwnedFd) -> Result<()> {
    let xs_sock = sock;
    let (info, mem, evtchn) = boot(&xs_sock)?;
    let mut xs = XsClient::new(xs_sock);
    match run_booted(&mut xs, info, mem, evtchn) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = xs.send(&FromGuest::Failed(format!("{e:#}")));
            Err(e)
        }
    }
}

fn run_booted(
    xs: &mut XsClient,
    info: BootInfo,
    mem: GuestMemory,
    evtchn: EvtchnEnd,
) -> Result<()> {
    let mem = Arc::new(mem);
    let dev = info.device_path.clone();
    let mac_s = xs
        .read(&format!("{dev}/{}", keys::MAC))?
        .ok_or_else(|| anyhow!("no mac in {dev}"))?;
    let mac = parse_mac(&mac_s)?;

    let tap = Tap::open_with(&info.ifname, true, info.gro).context("creating the guest's TAP")?;
    link::set_mtu(tap.name(), info.mtu)?;
    link::set_mac(tap.name(), mac)?;
    let addr: Ipv4Addr = info.ipv4.parse().context("guest ipv4 address")?;
    link::add_ipv4(tap.name(), addr, info.prefix)?;

    let (backend, bf) = await_backend(xs, &dev)?;
    let layout = Layout {
        grant_frames: info.grant_frames,
    };
    let mut nf = Netfront::new(mem, layout, DomId::DRIVER, evtchn).context("netfront setup")?;
    // Persistent grants whenever the backend offers them: netfront's buffers are a fixed set.
    let persistent = bf.persistent && nf.use_persistent_grants();
    // A pool whenever the backend offers one (pvnet_dd::pool): granted once, here.
    let mode = if bf.premapped {
        Some((PoolMode::Premapped, keys::FEATURE_PREMAPPED))
    } else if bf.static_buffer {
        Some((PoolMode::Static, keys::FEATURE_STATIC_BUFFER))
    } else {
        None
    };
    let mut pool_key = None;
    if let Some((mode, key)) = mode {
        match nf.use_pool(mode) {
            Some(g) => {
                for (k, v) in [
                    (keys::POOL_REF, g.first_ref),
                    (keys::POOL_RX_SLOTS, g.rx_slots),
                    (keys::POOL_TX_SLOTS, g.tx_slots),
                ] {
                    xs.write(&format!("{dev}/{k}"), &v.to_string())?;
                }
                pool_key = Some(key);
            }
            None => eprintln!("pvnet guest: cannot grant a pool ({key}): per-request grants"),
        }
    }
    // Page flipping when the backend offers it and the toolstack gave us a flip window.
    let flip = !persistent && bf.rx_flip && nf.use_flip();
    if flip {
        // A flip vif carries one page per packet (its backend offers no GSO or sg): the
        // guest's stack segments what it sends, as a 2006 netfront's did, so that a packet
        // to another guest fits the driver-domain frame it is copied into and is flipped on.
        ethtool::set_feature(tap.name(), Feature::Tso, false)?;
        ethtool::set_feature(tap.name(), Feature::Gso, false)?;
    }
    publish_and_connect(
        xs,
        &dev,
        &backend,
        nf.tx_ring_ref().0,
        nf.rx_ring_ref().0,
        info.evtchn_port,
        &front_features(&bf, info.gso, persistent, pool_key, flip),
    )?;
    nf.rx_refill();
    link::set_up(tap.name(), true)?;
    // From now on a backend that goes away is followed (it fires once now: Connected).
    xs.watch(&format!("{backend}/{}", keys::STATE), BACKEND_WATCH)?;
    xs.send(&FromGuest::Ready)?;
    let mut front = Front {
        dev,
        backend,
        port: info.evtchn_port,
        gso: info.gso,
        machine: Reconnector::new(),
    };
    event_loop(xs, &mut nf, &tap, &mut front)
}

/// The frontend's features, for the backend's offer `bf`.
fn front_features(
    bf: &BackendFeatures,
    gso: bool,
    persistent: bool,
    pool_key: Option<&str>,
    flip: bool,
) -> [(&'static str, bool); 8] {
    [
        (keys::FEATURE_SG, bf.sg),
        (keys::FEATURE_GSO_TCPV4, bf.gso_tcpv4 && gso),
        (keys::FEATURE_GSO_TCPV6, bf.gso_tcpv6 && gso),
        (keys::FEATURE_RX_NOTIFY, true),
        (keys::FEATURE_PERSISTENT, persistent),
        (
            keys::FEATURE_PREMAPPED,
            pool_key == Some(keys::FEATURE_PREMAPPED),
        ),
        (
            keys::FEATURE_STATIC_BUFFER,
            pool_key == Some(keys::FEATURE_STATIC_BUFFER),
        ),
        // Linux netfront's way to ask for flipping: request-rx-copy = 0.
        (keys::REQUEST_RX_COPY, !flip),
    ]
}

/// What the guest keeps of its vif's xenbus side once connected.
struct Front {
    dev: String,
    backend: String,
    port: u32,
    gso: bool,
    machine: Reconnector,
}

/// The backend's state changed (or may have): carries out what the reconnection machine says.
/// Returns whether the TAP may be read (a backend is connected).
fn backend_changed(
    xs: &mut XsClient,
    nf: &mut Netfront,
    front: &mut Front,
    batch: &mut TapBatch<&Tap>,
) -> Result<bool> {
    let be = backend_state(xs, &front.backend)?;
    for action in front.machine.steps(be) {
        match action {
            Action::Disconnect => {
                // What the backend answered before it went is taken first: received packets go
                // to the stack, sent frames are done with.
                nf.rx_poll_batch(|pkts, ok| batch.write(pkts, ok));
                nf.tx_reap();
                set_front_state(xs, &front.dev, XenbusState::Closing)?;
                let kept = nf.disconnect();
                set_front_state(xs, &front.dev, XenbusState::Closed)?;
                eprintln!(
                    "pvnet guest: backend went away ({be:?}): grants taken back, {kept} TX frame(s) kept to post again"
                );
            }
            Action::Reconnect => {
                set_front_state(xs, &front.dev, XenbusState::Initialising)?;
                let bf = read_features(xs, &front.backend)?;
                nf.reconnect(bf.persistent)
                    .context("netfront: setting up rings for the new backend")?;
                publish(
                    xs,
                    &front.dev,
                    nf.tx_ring_ref().0,
                    nf.rx_ring_ref().0,
                    front.port,
                    &front_features(&bf, front.gso, nf.persistent(), None, false),
                )?;
            }
            Action::Resume => {
                let n = nf.repost();
                eprintln!("pvnet guest: reconnected; {n} TX frame(s) posted again");
            }
        }
    }
    Ok(!nf.is_disconnected() && front.machine.phase() == crate::reconnect::Phase::Connected)
}

fn event_loop(xs: &mut XsClient, nf: &mut Netfront, tap: &Tap, front: &mut Front) -> Result<()> {
    let ep = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
    ep.add(
        xs.sock().as_fd(),
        EpollEvent::new(EpollFlags::EPOLLIN, EV_CTL),
    )?;
    ep.add(
        nf.evtchn().wait_fd(),
        EpollEvent::new(EpollFlags::EPOLLIN, EV_EVTCHN),
    )?;
    ep.add(tap.fd(), EpollEvent::new(EpollFlags::EPOLLIN, EV_TAP))?;
    let mut tap_armed = true;
    let mut batch = TapBatch::new(tap);
    if let Some(why) = &batch.fallback {
        eprintln!("pvnet guest: one writev per packet into the TAP ({why})");
    }
    let mut events = [EpollEvent::empty(); 8];
    let mut last_stats = Instant::now();
    let tap_fd = tap.fd().as_raw_fd();
    loop {
        let n = match ep.wait(
            &mut events,
            EpollTimeout::from(STATS_EVERY.as_millis() as u16),
        ) {
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => 0,
            Err(e) => return Err(e.into()),
        };
        let mut kick = false;
        for ev in &events[..n] {
            match ev.data() {
                EV_CTL => {
                    if let Some(stop) = handle_ctl(xs, nf)? {
                        if stop {
                            let _ = xs.send(&FromGuest::Stats(nf.stats.clone()));
                            return Ok(());
                        }
                    }
                }
                EV_EVTCHN => {
                    nf.evtchn().consume();
                    kick = true;
                }
                _ => kick = true,
            }
        }
        // Watch events (read now, or queued while waiting for a reply): the backend's state.
        let watched = xs.take_events();
        if watched.iter().any(|(_, t)| t == BACKEND_WATCH) {
            let up = backend_changed(xs, nf, front, &mut batch)?;
            if up != tap_armed {
                let fl = if up {
                    EpollFlags::EPOLLIN
                } else {
                    EpollFlags::empty()
                };
                ep.modify(tap.fd(), &mut EpollEvent::new(fl, EV_TAP))?;
                tap_armed = up;
            }
            kick = up;
        }
        if nf.is_disconnected() || front.machine.phase() != crate::reconnect::Phase::Connected {
            // No backend: the rings are not touched and the TAP is not read.
            kick = false;
        }
        if kick || (n == 0 && !nf.is_disconnected()) {
            // RX: responses into the TAP, a pass over the ring at a time.
            nf.rx_poll_batch(|pkts, ok| batch.write(pkts, ok));
            // TX: the answers that are there, then frames from the TAP while there is room.
            nf.tx_reap();
            let mut sent = 0;
            loop {
                match nf.tx_read_with(|iov| tap.readv(iov)) {
                    Ok(Some(_)) => {
                        sent += 1;
                        if sent % TX_BATCH == 0 {
                            nf.tx_push();
                        }
                    }
                    Ok(None) => {
                        // No room: stop watching the TAP until the backend answers.
                        if tap_armed {
                            ep.modify(tap.fd(), &mut EpollEvent::new(EpollFlags::empty(), EV_TAP))?;
                            tap_armed = false;
                        }
                        break;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(anyhow!("reading TAP (fd {tap_fd}): {e}")),
                }
            }
            if sent > 0 {
                nf.tx_push();
            }
            if !tap_armed {
                // Out of room: from now on the backend's next TX answer wakes us.
                nf.tx_complete();
            }
            if !tap_armed && nf.tx_has_room() {
                ep.modify(tap.fd(), &mut EpollEvent::new(EpollFlags::EPOLLIN, EV_TAP))?;
                tap_armed = true;
            }
        }
        if last_stats.elapsed() >= STATS_EVERY {
            xs.send(&FromGuest::Stats(nf.stats.clone()))?;
            last_stats = Instant::now();
        }
    }
}

/// Handles one control message. Some(true) = shut down.
fn handle_ctl(xs: &mut XsClient, _nf: &mut Netfront) -> Result<Option<bool>> {
    while let Some(m) = xs.other.pop_front() {
        if matches!(m, ToGuest::Shutdown) {
            return Ok(Some(true));
        }
    }
    let m = match ctl::recv::<ToGuest>(xs.sock().as_fd()) {
        Ok(Some((m, _))) => m,
        Ok(None) => return Ok(Some(true)), // toolstack gone: stop
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    Ok(match m {
        ToGuest::Shutdown => Some(true),
        ToGuest::Watch { path, token } => {
            xs.push_event(path, token);
            None
        }
        _ => None, // late replies are of no interest once connected
    })
}

pub fn parse_mac(s: &str) -> Result<[u8; 6]> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        bail!("bad MAC address {s:?}");
    }
    let mut m = [0u8; 6];
    for (i, p) in parts.iter().enumerate() {
        m[i] = u8::from_str_radix(p, 16).map_err(|_| anyhow!("bad MAC address {s:?}"))?;
    }
    Ok(m)
}

pub fn format_mac(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_round_trip() {
        let m = [0x02, 0x70, 0x76, 0, 0, 0x0a];
        assert_eq!(parse_mac(&format_mac(&m)).unwrap(), m);
        assert!(parse_mac("02:70:76:00:00").is_err());
        assert!(parse_mac("02:70:76:00:00:zz").is_err());
    }
}
