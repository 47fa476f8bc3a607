//! Links and addresses over rtnetlink (synchronous `netlink-sys` socket).
//!
//! Every function opens its own netlink socket, so it acts in the network namespace of the
//! CALLING THREAD (enter a namespace with [`crate::Netns::run`] to act inside it).

use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{anyhow, bail, Context};
use netlink_packet_core::{
    NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoVeth, LinkAttribute, LinkFlags, LinkInfo, LinkMessage,
};
use netlink_packet_route::tc::{TcAttribute, TcHandle, TcMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

use crate::netns::Netns;
use crate::Result;

static SEQ: AtomicU32 = AtomicU32::new(1);

/// Sends one request and collects the replies until the ack (or NLMSG_DONE for dumps).
/// An NLMSG_ERROR with a non-zero code becomes an `io::Error` with that errno.
fn request(msg: RouteNetlinkMessage, flags: u16) -> io::Result<Vec<RouteNetlinkMessage>> {
    let mut sock = Socket::new(NETLINK_ROUTE)?;
    sock.bind_auto()?;
    sock.connect(&SocketAddr::new(0, 0))?;
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let mut req = NetlinkMessage::from(msg);
    req.header.flags = flags | NLM_F_REQUEST | NLM_F_ACK;
    req.header.sequence_number = seq;
    req.finalize();
    let mut buf = vec![0u8; req.buffer_len()];
    req.serialize(&mut buf);
    sock.send(&buf, 0)?;

    let dump = flags & NLM_F_DUMP == NLM_F_DUMP;
    let mut out = Vec::new();
    loop {
        let (data, _) = sock.recv_from_full()?;
        if data.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "netlink: empty read",
            ));
        }
        let mut off = 0;
        while off < data.len() {
            let m = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&data[off..])
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
            let len = m.header.length as usize;
            if len == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "netlink: zero length",
                ));
            }
            off += (len + 3) & !3;
            if m.header.sequence_number != seq {
                continue;
            }
            match m.payload {
                NetlinkPayload::Error(e) => {
                    if e.code.is_none() {
                        // The ack. For dumps the kernel sends DONE instead; keep reading.
                        if !dump {
                            return Ok(out);
                        }
                    } else {
                        return Err(e.to_io());
                    }
                }
                NetlinkPayload::Done(_) => return Ok(out),
                NetlinkPayload::InnerMessage(inner) => out.push(inner),
                _ => {}
            }
        }
    }
}

fn link_by_name(name: &str) -> Result<LinkMessage> {
    check_ifname(name)?;
    let mut msg = LinkMessage::default();
    msg.attributes.push(LinkAttribute::IfName(name.to_string()));
    match request(RouteNetlinkMessage::GetLink(msg), 0) {
        Ok(v) => v
            .into_iter()
            .find_map(|m| match m {
                RouteNetlinkMessage::NewLink(l) => Some(l),
                _ => None,
            })
            .ok_or_else(|| anyhow!("no such interface {name}")),
        Err(e) if e.raw_os_error() == Some(libc::ENODEV) => bail!("no such interface {name}"),
        Err(e) => Err(e).with_context(|| format!("RTM_GETLINK {name}")),
    }
}

fn check_ifname(name: &str) -> Result<()> {
    if name.is_empty()
        || name.len() > 15
        || name.contains('/')
        || name.contains(char::is_whitespace)
    {
        bail!("invalid interface name {name:?}");
    }
    Ok(())
}

fn set_link(name: &str, what: &str, build: impl FnOnce(&mut LinkMessage)) -> Result<()> {
    let mut msg = LinkMessage::default();
    msg.header.index = ifindex(name)?;
    build(&mut msg);
    request(RouteNetlinkMessage::SetLink(msg), 0).with_context(|| format!("{what} on {name}"))?;
    Ok(())
}

/// Creates a veth pair `a` <-> `b` in the calling thread's namespace.
pub fn create_veth(a: &str, b: &str) -> Result<()> {
    check_ifname(a)?;
    check_ifname(b)?;
    let mut peer = LinkMessage::default();
    peer.attributes.push(LinkAttribute::IfName(b.to_string()));
    let mut msg = LinkMessage::default();
    msg.attributes.push(LinkAttribute::IfName(a.to_string()));
    msg.attributes.push(LinkAttribute::LinkInfo(vec![
        LinkInfo::Kind(InfoKind::Veth),
        LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer))),
    ]));
    request(RouteNetlinkMessage::NewLink(msg), NLM_F_CREATE | NLM_F_EXCL)
        .with_context(|| format!("creating veth pair {a} <-> {b}"))?;
    Ok(())
}

/// Deletes the link `name` (for a veth, the peer goes too).
pub fn delete_link(name: &str) -> Result<()> {
    let mut msg = LinkMessage::default();
    msg.header.index = ifindex(name)?;
    request(RouteNetlinkMessage::DelLink(msg), 0).with_context(|| format!("deleting {name}"))?;
    Ok(())
}

/// Sets the link administratively up or down.
pub fn set_up(name: &str, up: bool) -> Result<()> {
    set_link(name, if up { "set up" } else { "set down" }, |m| {
        if up {
            m.header.flags |= LinkFlags::Up;
        }
        m.header.change_mask |= LinkFlags::Up;
    })
}

/// Whether the link is administratively up.
pub fn is_up(name: &str) -> Result<bool> {
    Ok(link_by_name(name)?.header.flags.contains(LinkFlags::Up))
}

/// Sets the MTU. When the kernel refuses it, the error names the device and the range its
/// driver allows (`IFLA_MIN_MTU`..`IFLA_MAX_MTU`: 68 to 65535 for a veth, 68 to 65521 for a
/// TAP, whose limit leaves room for the Ethernet header in a 64 KiB frame).
pub fn set_mtu(name: &str, mtu: u32) -> Result<()> {
    let r = set_link(name, "set mtu", |m| {
        m.attributes.push(LinkAttribute::Mtu(mtu))
    });
    let Err(e) = r else { return Ok(()) };
    match mtu_range(name) {
        Ok((min, max)) if !(min..=max).contains(&mtu) => Err(e.context(format!(
            "the kernel refused MTU {mtu} on {name}: that device allows {min} to {max}"
        ))),
        _ => Err(e),
    }
}

/// Sets the largest packet GRO may build on the device (`IFLA_GRO_MAX_SIZE`, bytes from the
/// network header on; GRO stops merging before a packet reaches it). Linux 5.19 and later.
pub fn set_gro_max_size(name: &str, size: u32) -> Result<()> {
    set_link(name, "set gro_max_size", |m| {
        m.attributes.push(LinkAttribute::GroMaxSize(size))
    })
}

/// The device's `IFLA_GRO_MAX_SIZE`.
pub fn gro_max_size(name: &str) -> Result<u32> {
    link_by_name(name)?
        .attributes
        .iter()
        .find_map(|a| match a {
            LinkAttribute::GroMaxSize(m) => Some(*m),
            _ => None,
        })
        .ok_or_else(|| anyhow!("{name} reports no gro_max_size"))
}

/// The MTUs the device's driver accepts, `(IFLA_MIN_MTU, IFLA_MAX_MTU)`.
pub fn mtu_range(name: &str) -> Result<(u32, u32)> {
    let l = link_by_name(name)?;
    let find = |want_max: bool| {
        l.attributes.iter().find_map(|a| match (a, want_max) {
            (LinkAttribute::MinMtu(m), false) | (LinkAttribute::MaxMtu(m), true) => Some(*m),
            _ => None,
        })
    };
    match (find(false), find(true)) {
        (Some(min), Some(max)) => Ok((min, max)),
        _ => bail!("{name} reports no MTU range"),
    }
}

/// Reads the MTU.
pub fn get_mtu(name: &str) -> Result<u32> {
    link_by_name(name)?
        .attributes
        .iter()
        .find_map(|a| match a {
            LinkAttribute::Mtu(m) => Some(*m),
            _ => None,
        })
        .ok_or_else(|| anyhow!("{name} has no MTU attribute"))
}

/// A link's packet counters (`IFLA_STATS64`), as `ip -s link` shows them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkCounters {
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    /// For a veth: a frame its peer sent and it refused (too long for its MTU, say) counts
    /// as `rx_dropped` here and as `tx_dropped` on the peer.
    pub rx_dropped: u64,
    pub tx_dropped: u64,
}

/// Reads the link's counters.
pub fn counters(name: &str) -> Result<LinkCounters> {
    link_by_name(name)?
        .attributes
        .iter()
        .find_map(|a| match a {
            LinkAttribute::Stats64(s) => Some(LinkCounters {
                rx_packets: s.rx_packets,
                tx_packets: s.tx_packets,
                rx_bytes: s.rx_bytes,
                tx_bytes: s.tx_bytes,
                rx_dropped: s.rx_dropped,
                tx_dropped: s.tx_dropped,
            }),
            _ => None,
        })
        .ok_or_else(|| anyhow!("{name} reports no counters"))
}

/// Sets the MAC address.
pub fn set_mac(name: &str, mac: [u8; 6]) -> Result<()> {
    set_link(name, "set address", |m| {
        m.attributes.push(LinkAttribute::Address(mac.to_vec()))
    })
}

/// Reads the MAC address.
pub fn get_mac(name: &str) -> Result<[u8; 6]> {
    link_by_name(name)?
        .attributes
        .iter()
        .find_map(|a| match a {
            LinkAttribute::Address(v) if v.len() == 6 => v.as_slice().try_into().ok(),
            _ => None,
        })
        .ok_or_else(|| anyhow!("{name} has no 6-byte link address"))
}

/// The interface index of `name`; "no such interface X" if absent.
pub fn ifindex(name: &str) -> Result<u32> {
    Ok(link_by_name(name)?.header.index)
}

/// Whether a link called `name` exists in the calling thread's namespace.
pub fn link_exists(name: &str) -> bool {
    ifindex(name).is_ok()
}

/// The names of all links in the calling thread's namespace, in index order.
pub fn link_names() -> Result<Vec<String>> {
    let v = request(
        RouteNetlinkMessage::GetLink(LinkMessage::default()),
        NLM_F_DUMP,
    )
    .context("RTM_GETLINK dump")?;
    let mut out: Vec<(u32, String)> = v
        .into_iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewLink(l) => {
                let idx = l.header.index;
                l.attributes.into_iter().find_map(|a| match a {
                    LinkAttribute::IfName(n) => Some((idx, n)),
                    _ => None,
                })
            }
            _ => None,
        })
        .collect();
    out.sort();
    Ok(out.into_iter().map(|(_, n)| n).collect())
}

/// Replaces the root qdisc of `name` by `kind`, a qdisc that takes no options (`pfifo_fast`,
/// `pfifo`, `noqueue`...): `tc qdisc replace dev NAME root KIND`.
pub fn set_root_qdisc(name: &str, kind: &str) -> Result<()> {
    let index = ifindex(name)?;
    let mut msg = TcMessage::with_index(index as i32);
    msg.header.parent = TcHandle::ROOT;
    msg.attributes.push(TcAttribute::Kind(kind.to_string()));
    request(
        RouteNetlinkMessage::NewQueueDiscipline(msg),
        NLM_F_CREATE | netlink_packet_core::NLM_F_REPLACE,
    )
    .with_context(|| format!("setting the root qdisc of {name} to {kind}"))?;
    Ok(())
}

/// The kind of the root qdisc of `name` (`noqueue` for a virtual device nobody configured).
pub fn root_qdisc(name: &str) -> Result<String> {
    let index = ifindex(name)? as i32;
    let v = request(
        RouteNetlinkMessage::GetQueueDiscipline(TcMessage::default()),
        NLM_F_DUMP,
    )
    .context("RTM_GETQDISC dump")?;
    v.into_iter()
        .find_map(|m| match m {
            RouteNetlinkMessage::NewQueueDiscipline(q)
                if q.header.index == index && q.header.parent == TcHandle::ROOT =>
            {
                q.attributes.into_iter().find_map(|a| match a {
                    TcAttribute::Kind(k) => Some(k),
                    _ => None,
                })
            }
            _ => None,
        })
        .ok_or_else(|| anyhow!("{name} has no root qdisc"))
}

/// Adds `addr/prefix` (with its broadcast address) to `name`.
pub fn add_ipv4(name: &str, addr: Ipv4Addr, prefix: u8) -> Result<()> {
    if prefix > 32 {
        bail!("invalid IPv4 prefix length {prefix}");
    }
    let mut msg = AddressMessage::default();
    msg.header.family = AddressFamily::Inet;
    msg.header.prefix_len = prefix;
    msg.header.index = ifindex(name)?;
    msg.attributes
        .push(AddressAttribute::Local(IpAddr::V4(addr)));
    msg.attributes
        .push(AddressAttribute::Address(IpAddr::V4(addr)));
    if prefix < 31 {
        let brd = Ipv4Addr::from(u32::from(addr) | (u32::MAX >> prefix));
        msg.attributes.push(AddressAttribute::Broadcast(brd));
    }
    request(
        RouteNetlinkMessage::NewAddress(msg),
        NLM_F_CREATE | NLM_F_EXCL,
    )
    .with_context(|| format!("adding {addr}/{prefix} to {name}"))?;
    Ok(())
}

/// The IPv4 addresses (with prefix lengths) on `name`.
pub fn ipv4_addrs(name: &str) -> Result<Vec<(Ipv4Addr, u8)>> {
    let index = ifindex(name)?;
    let mut q = AddressMessage::default();
    q.header.family = AddressFamily::Inet;
    let v = request(RouteNetlinkMessage::GetAddress(q), NLM_F_DUMP).context("RTM_GETADDR dump")?;
    Ok(v.into_iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewAddress(a) if a.header.index == index => {
                let p = a.header.prefix_len;
                a.attributes.into_iter().find_map(|at| match at {
                    AddressAttribute::Local(IpAddr::V4(ip)) => Some((ip, p)),
                    _ => None,
                })
            }
            _ => None,
        })
        .collect())
}

/// Moves the link `name` from the calling thread's namespace into `ns` (IFLA_NET_NS_FD).
pub fn move_to_netns(name: &str, ns: &Netns) -> Result<()> {
    let fd = ns.fd().as_raw_fd();
    set_link(name, &format!("move to namespace {}", ns.name()), |m| {
        m.attributes.push(LinkAttribute::NetNsFd(fd))
    })
}
