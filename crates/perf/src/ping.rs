//! ICMP echo (what `ping` does), so tests and users need no extra tool: a raw ICMP socket,
//! echo requests with an id and sequence number, replies matched on both.

use std::io;
use std::mem::MaybeUninit;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use serde::Serialize;
use socket2::{Domain, Protocol, Socket, Type};

#[derive(Clone, Debug, Default, Serialize)]
pub struct PingReport {
    pub sent: u32,
    pub received: u32,
    pub rtt_us: Vec<f64>,
    /// ICMP payload bytes per echo request (what `ping -s` sets); the IP packet is 28 more.
    pub payload: usize,
    /// Replies that matched a request's id and sequence but not its payload (not counted in
    /// `received`).
    pub corrupted: u32,
}

/// Default ICMP payload, as `ping`'s: a 84-byte IP packet.
pub const DEFAULT_PAYLOAD: usize = 56;
/// Largest ICMP payload: a 65535-byte IP packet less the IP and ICMP headers.
pub const MAX_PAYLOAD: usize = 65535 - 20 - 8;

fn checksum(b: &[u8]) -> u16 {
    let mut s: u32 = 0;
    for c in b.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from_be_bytes([c[0], 0])
        };
        s += w as u32;
    }
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// The payload of echo request `seq`: a pattern that differs per request.
pub fn payload_byte(seq: u16, i: usize) -> u8 {
    (i as u32).wrapping_mul(31).wrapping_add(u32::from(seq)) as u8
}

/// Sends `count` echo requests to `dst`, one every `interval`, waiting up to `timeout` for each
/// reply, with the default payload. Needs CAP_NET_RAW.
pub fn ping(
    dst: Ipv4Addr,
    count: u32,
    interval: Duration,
    timeout: Duration,
) -> io::Result<PingReport> {
    ping_sized(dst, count, interval, timeout, DEFAULT_PAYLOAD)
}

/// [`ping`] with `payload` bytes of ICMP payload (0 to [`MAX_PAYLOAD`]), sent with Don't
/// Fragment (`IP_PMTUDISC_DO`, `ping -M do`): a request larger than the route's MTU fails
/// with EMSGSIZE instead of going out in fragments, so a reply proves the path carried the
/// whole packet. A reply counts only with its payload intact.
pub fn ping_sized(
    dst: Ipv4Addr,
    count: u32,
    interval: Duration,
    timeout: Duration,
    payload: usize,
) -> io::Result<PingReport> {
    if payload > MAX_PAYLOAD {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("ICMP payload of {payload} bytes: at most {MAX_PAYLOAD}"),
        ));
    }
    let sock = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::ICMPV4))?;
    sock.set_read_timeout(Some(Duration::from_millis(50)))?;
    let df: libc::c_int = libc::IP_PMTUDISC_DO;
    // SAFETY: IP_MTU_DISCOVER takes an int; `df` lives across the call and its size is passed.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            (&df as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    let id = (std::process::id() & 0xffff) as u16;
    let to = SocketAddr::V4(SocketAddrV4::new(dst, 0));
    let mut rep = PingReport {
        payload,
        ..PingReport::default()
    };
    let mut pkt = vec![0u8; 8 + payload];
    let mut buf = vec![MaybeUninit::<u8>::uninit(); 65536];
    for seq in 0..count as u16 {
        pkt.fill(0);
        pkt[0] = 8; // echo request
        pkt[4..6].copy_from_slice(&id.to_be_bytes());
        pkt[6..8].copy_from_slice(&seq.to_be_bytes());
        for (i, b) in pkt[8..].iter_mut().enumerate() {
            *b = payload_byte(seq, i);
        }
        let c = checksum(&pkt);
        pkt[2..4].copy_from_slice(&c.to_be_bytes());
        let t0 = Instant::now();
        sock.send_to(&pkt, &to.into())?;
        rep.sent += 1;
        let deadline = t0 + timeout;
        while Instant::now() < deadline {
            let (n, from) = match sock.recv_from(&mut buf) {
                Ok(x) => x,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    continue
                }
                Err(e) => return Err(e),
            };
            // SAFETY: recv_from initialized the first n bytes.
            let b: &[u8] = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n) };
            if from.as_socket_ipv4().map(|a| *a.ip()) != Some(dst) || b.len() < 28 {
                continue;
            }
            let ihl = (b[0] & 0xf) as usize * 4;
            let icmp = &b[ihl.min(b.len())..];
            if icmp.len() >= 8
                && icmp[0] == 0
                && u16::from_be_bytes([icmp[4], icmp[5]]) == id
                && u16::from_be_bytes([icmp[6], icmp[7]]) == seq
            {
                if icmp[8..] != pkt[8..] {
                    rep.corrupted += 1;
                    continue;
                }
                rep.received += 1;
                rep.rtt_us.push(t0.elapsed().as_secs_f64() * 1e6);
                break;
            }
        }
        if seq + 1 < count as u16 {
            std::thread::sleep(interval);
        }
    }
    Ok(rep)
}

impl PingReport {
    /// `Err` naming what went wrong when a request had no intact reply: how many, and how
    /// many replies came back with a payload other than the request's.
    pub fn check(&self, dst: Ipv4Addr) -> Result<(), String> {
        if self.received == self.sent {
            return Ok(());
        }
        let mut e = format!(
            "{} of {} echo requests to {dst} had no intact reply",
            self.sent - self.received,
            self.sent
        );
        if self.corrupted > 0 {
            e += &format!(
                " ({} replies came back with a payload other than the request's)",
                self.corrupted
            );
        }
        Err(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_corrupted_reply_is_named_apart_from_a_missing_one() {
        let dst = Ipv4Addr::new(10, 77, 0, 10);
        let rep = |received, corrupted| PingReport {
            sent: 3,
            received,
            corrupted,
            ..PingReport::default()
        };
        assert_eq!(rep(3, 0).check(dst), Ok(()));
        assert_eq!(
            rep(2, 0).check(dst),
            Err("1 of 3 echo requests to 10.77.0.10 had no intact reply".into())
        );
        let e = rep(1, 2).check(dst).unwrap_err();
        assert!(
            e.starts_with("2 of 3 echo requests")
                && e.contains("(2 replies came back with a payload other than the request's)"),
            "{e}"
        );
    }

    #[test]
    fn icmp_checksum_known_value() {
        // Echo request, id 1, seq 1, no data: checksum 0xf7fd.
        let p = [8u8, 0, 0, 0, 0, 1, 0, 1];
        assert_eq!(checksum(&p), 0xf7fd);
    }

    #[test]
    fn ping_loopback_when_root() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipping: needs root (raw ICMP socket)");
            return;
        }
        let r = ping(
            Ipv4Addr::LOCALHOST,
            2,
            Duration::from_millis(10),
            Duration::from_secs(1),
        )
        .unwrap();
        assert_eq!((r.sent, r.received), (2, 2));
        // Loopback's MTU is 65536: the largest echo goes whole, and comes back intact.
        let r = ping_sized(
            Ipv4Addr::LOCALHOST,
            2,
            Duration::from_millis(10),
            Duration::from_secs(1),
            MAX_PAYLOAD,
        )
        .unwrap();
        assert_eq!((r.sent, r.received, r.corrupted), (2, 2, 0));
        assert!(ping_sized(
            Ipv4Addr::LOCALHOST,
            1,
            Duration::ZERO,
            Duration::from_secs(1),
            MAX_PAYLOAD + 1
        )
        .is_err());
    }
}
