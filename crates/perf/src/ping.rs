//! ICMP echo (what `ping` does), so tests and users need no extra tool: a raw ICMP socket,
//! echo requests with an id and sequence number, replies matched on both.

use std::io;
use std::mem::MaybeUninit;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

use serde::Serialize;
use socket2::{Domain, Protocol, Socket, Type};

#[derive(Clone, Debug, Default, Serialize)]
pub struct PingReport {
    pub sent: u32,
    pub received: u32,
    pub rtt_us: Vec<f64>,
}

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

/// Sends `count` echo requests to `dst`, one every `interval`, waiting up to `timeout` for each
/// reply. Needs CAP_NET_RAW.
pub fn ping(
    dst: Ipv4Addr,
    count: u32,
    interval: Duration,
    timeout: Duration,
) -> io::Result<PingReport> {
    let sock = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::ICMPV4))?;
    sock.set_read_timeout(Some(Duration::from_millis(50)))?;
    let id = (std::process::id() & 0xffff) as u16;
    let to = SocketAddr::V4(SocketAddrV4::new(dst, 0));
    let mut rep = PingReport::default();
    for seq in 0..count as u16 {
        let mut pkt = [0u8; 64];
        pkt[0] = 8; // echo request
        pkt[4..6].copy_from_slice(&id.to_be_bytes());
        pkt[6..8].copy_from_slice(&seq.to_be_bytes());
        for (i, b) in pkt[8..].iter_mut().enumerate() {
            *b = i as u8;
        }
        let c = checksum(&pkt);
        pkt[2..4].copy_from_slice(&c.to_be_bytes());
        let t0 = Instant::now();
        sock.send_to(&pkt, &to.into())?;
        rep.sent += 1;
        let deadline = t0 + timeout;
        while Instant::now() < deadline {
            let mut buf = [MaybeUninit::<u8>::uninit(); 1500];
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
            let b: Vec<u8> = buf[..n]
                .iter()
                .map(|x| unsafe { x.assume_init() })
                .collect();
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

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
