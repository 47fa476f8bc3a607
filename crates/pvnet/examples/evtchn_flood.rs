//! A measurement helper for docs/ctl-flood.md ("The event channel"), not part of `pvnet`:
//! takes an attached domain of a run as an external frontend does (from its attach socket),
//! completes the xenbus handshake with empty rings, then notifies its event channel without
//! pause for SECONDS. Prints how many notifications it sent.
//!
//! Usage: evtchn_flood /run/pvnet/ID/attach-DOM.sock SECONDS

use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, UnixAddr};
use pvnet_guest::netfront::Layout;
use pvnet_guest::xenbus::{await_backend, publish_and_connect, XsClient};
use pvnet_hv::grant::GuestGrantTable;
use pvnet_hv::mem::OwnPage;
use pvnet_hv::{ctl, DomId};
use pvnet_netif::{keys, FrontRing, RxRing, TxRing};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, path, secs] = &args[..] else {
        return Err(anyhow!("usage: evtchn_flood ATTACH_SOCKET SECONDS"));
    };
    let secs: f64 = secs.parse().context("SECONDS")?;
    let s = socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    connect(s.as_raw_fd(), &UnixAddr::new(path.as_str())?).context("the attach socket")?;
    let (_, mut fds) = ctl::recv::<String>(s.as_fd())?.ok_or_else(|| anyhow!("no attach"))?;
    let sock = fds.pop().ok_or_else(|| anyhow!("no control socket"))?;
    let (info, mem, evt) = pvnet_guest::run::boot(&sock)?;
    let mem = Arc::new(mem);
    let mut xs = XsClient::new(sock);
    let (backend, _) = await_backend(&mut xs, &info.device_path)?;
    let layout = Layout {
        grant_frames: info.grant_frames,
    };
    let mut gnt = GuestGrantTable::new(mem.clone(), layout.grant_frames);
    let page = |pfn| OwnPage::new(mem.clone(), pfn).ok_or_else(|| anyhow!("ring page {pfn:?}"));
    let _tx = FrontRing::<TxRing, _>::init(page(layout.tx_ring())?);
    let _rx = FrontRing::<RxRing, _>::init(page(layout.rx_ring())?);
    let gref = |g: &mut GuestGrantTable| g.alloc().ok_or_else(|| anyhow!("no grant reference"));
    let (txr, rxr) = (gref(&mut gnt)?, gref(&mut gnt)?);
    gnt.grant_access(txr, DomId::DRIVER, layout.tx_ring(), false);
    gnt.grant_access(rxr, DomId::DRIVER, layout.rx_ring(), false);
    publish_and_connect(
        &mut xs,
        &info.device_path,
        &backend,
        txr.0,
        rxr.0,
        info.evtchn_port,
        &[(keys::FEATURE_RX_NOTIFY, true)],
    )?;
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut n = 0u64;
    while Instant::now() < end {
        for _ in 0..100 {
            if evt.notify().is_err() {
                println!("{n}");
                return Ok(());
            }
            n += 1;
        }
    }
    println!("{n}");
    Ok(())
}
