//! The guest process: boots from what the toolstack sends, creates its network interface (a
//! TAP with a vnet header, in the guest's namespace, which the process already is in), does
//! the xenbus handshake, then moves packets between the TAP and the rings until told to stop.

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use pvnet_hv::ctl;
use pvnet_hv::evtchn::EvtchnEnd;
use pvnet_hv::mem::GuestMemory;
use pvnet_hv::DomId;
use pvnet_netif::keys;
use pvnet_testbed::{link, Tap};

use crate::netfront::{Layout, Netfront};
use crate::proto::{BootInfo, FromGuest, ToGuest};
use crate::tapbatch::TapBatch;
use crate::xenbus::{await_backend, publish_and_connect, XsClient};

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
    if fds.len() != 3 {
        bail!("boot message carried {} descriptors, expected 3", fds.len());
    }
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
    publish_and_connect(
        xs,
        &dev,
        &backend,
        nf.tx_ring_ref().0,
        nf.rx_ring_ref().0,
        info.evtchn_port,
        &[
            (keys::FEATURE_SG, bf.sg),
            (keys::FEATURE_GSO_TCPV4, bf.gso_tcpv4 && info.gso),
            (keys::FEATURE_GSO_TCPV6, bf.gso_tcpv6 && info.gso),
            (keys::FEATURE_RX_NOTIFY, true),
            (keys::FEATURE_PERSISTENT, persistent),
        ],
    )?;
    nf.rx_refill();
    link::set_up(tap.name(), true)?;
    xs.send(&FromGuest::Ready)?;
    event_loop(xs, &mut nf, &tap)
}

fn event_loop(xs: &mut XsClient, nf: &mut Netfront, tap: &Tap) -> Result<()> {
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
        if kick || n == 0 {
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
        _ => None, // late replies and watch events are of no interest once connected
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
