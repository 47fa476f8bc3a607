//! The control-socket transport between the toolstack and guest processes: one JSON message per
//! `SOCK_SEQPACKET` datagram, with file descriptors (guest memory, event channels) passed as
//! `SCM_RIGHTS`.
//!
//! Blocking and non-blocking use: [`recv`] blocks on a blocking socket; on a socket set to
//! `O_NONBLOCK` (or with [`try_recv`], which passes `MSG_DONTWAIT`) an empty queue comes back as
//! `io::ErrorKind::WouldBlock`, untouched, for the caller's event loop. `EINTR` is retried.
//!
//! A peer is untrusted: a datagram or fd list that did not fit, or bytes that are not the
//! expected JSON, is `io::ErrorKind::InvalidData`; any fds that came with it are closed.

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::sys::socket::{
    recvmsg, sendmsg, socketpair as nix_socketpair, AddressFamily, ControlMessage,
    ControlMessageOwned, MsgFlags, SockFlag, SockType,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Largest message (JSON bytes) in one datagram.
pub const MAX_MSG: usize = 64 * 1024;
/// Most fds sent with one message (the kernel's `SCM_MAX_FD`).
pub const MAX_FDS: usize = 253;

/// A connected pair of `SOCK_SEQPACKET` UNIX sockets (close-on-exec).
pub fn socketpair() -> io::Result<(OwnedFd, OwnedFd)> {
    nix_socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(io::Error::from)
}

/// Sends `msg` as JSON in one datagram, with `fds` attached.
pub fn send<T: Serialize>(sock: BorrowedFd<'_>, msg: &T, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let bytes =
        serde_json::to_vec(msg).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    if bytes.len() > MAX_MSG {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "message too large",
        ));
    }
    if fds.len() > MAX_FDS {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "too many fds"));
    }
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let cmsgs: &[ControlMessage<'_>] = &[ControlMessage::ScmRights(&raw)];
    let cmsgs = if raw.is_empty() { &[][..] } else { cmsgs };
    let iov = [IoSlice::new(&bytes)];
    loop {
        match sendmsg::<()>(sock.as_raw_fd(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None) {
            Ok(n) if n == bytes.len() => return Ok(()),
            Ok(_) => return Err(io::Error::new(io::ErrorKind::WriteZero, "short send")),
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Receives one message and its fds, blocking if the socket blocks. `Ok(None)` on orderly EOF.
pub fn recv<T: DeserializeOwned>(sock: BorrowedFd<'_>) -> io::Result<Option<(T, Vec<OwnedFd>)>> {
    recv_flags(sock, MsgFlags::empty())
}

/// Like [`recv`], but never blocks: `Err(WouldBlock)` when nothing is queued.
pub fn try_recv<T: DeserializeOwned>(
    sock: BorrowedFd<'_>,
) -> io::Result<Option<(T, Vec<OwnedFd>)>> {
    recv_flags(sock, MsgFlags::MSG_DONTWAIT)
}

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}

fn recv_flags<T: DeserializeOwned>(
    sock: BorrowedFd<'_>,
    flags: MsgFlags,
) -> io::Result<Option<(T, Vec<OwnedFd>)>> {
    let mut buf = vec![0u8; MAX_MSG];
    let mut cmsg_buf = nix::cmsg_space!([RawFd; MAX_FDS]);
    let (bytes, fds, msg_flags) = loop {
        let mut iov = [IoSliceMut::new(&mut buf)];
        match recvmsg::<()>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg_buf),
            flags | MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(m) => {
                let mut fds = Vec::new();
                // Take ownership of every received fd first, so they are closed on any error.
                let cmsgs = m.cmsgs().map_err(|_| invalid("control data truncated"))?;
                for c in cmsgs {
                    if let ControlMessageOwned::ScmRights(raw) = c {
                        for fd in raw {
                            // SAFETY: the kernel just installed `fd` in our table for this
                            // message; nothing else owns it.
                            fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
                        }
                    }
                }
                break (m.bytes, fds, m.flags);
            }
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    if msg_flags.contains(MsgFlags::MSG_CTRUNC) {
        return Err(invalid("control data truncated"));
    }
    if msg_flags.contains(MsgFlags::MSG_TRUNC) {
        return Err(invalid("message truncated"));
    }
    if bytes == 0 && fds.is_empty() {
        // We never send empty datagrams, so this is the peer closing.
        return Ok(None);
    }
    let msg = serde_json::from_slice(&buf[..bytes])
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    Ok(Some((msg, fds)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evtchn::EvtchnEnd;
    use crate::mem::GuestMemory;
    use crate::Pfn;
    use serde::Deserialize;
    use std::os::fd::AsFd;

    #[derive(Debug, Serialize, Deserialize, PartialEq)]
    struct Hello {
        dom: u16,
        name: String,
    }

    #[test]
    fn roundtrip_without_fds() {
        let (a, b) = socketpair().unwrap();
        let m = Hello {
            dom: 5,
            name: "vif".into(),
        };
        send(a.as_fd(), &m, &[]).unwrap();
        let (got, fds) = recv::<Hello>(b.as_fd()).unwrap().unwrap();
        assert_eq!(got, m);
        assert!(fds.is_empty());
    }

    #[test]
    fn passes_memfd_and_eventfd() {
        let (a, b) = socketpair().unwrap();
        let mem = GuestMemory::create("g", 2).unwrap();
        let (ours, theirs) = crate::evtchn::channel_pair().unwrap();
        let (n, w) = theirs.into_fds();
        send(a.as_fd(), &7u32, &[mem.fd(), n.as_fd(), w.as_fd()]).unwrap();
        drop((n, w));
        let (v, mut fds) = recv::<u32>(b.as_fd()).unwrap().unwrap();
        assert_eq!(v, 7);
        assert_eq!(fds.len(), 3);
        let w = fds.pop().unwrap();
        let n = fds.pop().unwrap();
        let m = fds.pop().unwrap();
        // Memory written through the received memfd is seen by the sender.
        let guest = GuestMemory::from_fd(m).unwrap();
        guest.write(Pfn(1), 3, b"via fd").unwrap();
        let mut out = [0u8; 6];
        mem.read(Pfn(1), 3, &mut out).unwrap();
        assert_eq!(&out, b"via fd");
        // The received event channel end works.
        let theirs = EvtchnEnd::from_fds(n, w);
        theirs.notify().unwrap();
        assert_eq!(ours.consume(), 1);
        ours.notify().unwrap();
        assert_eq!(theirs.consume(), 1);
    }

    #[test]
    fn eof_is_none() {
        let (a, b) = socketpair().unwrap();
        drop(a);
        assert!(recv::<Hello>(b.as_fd()).unwrap().is_none());
    }

    #[test]
    fn garbage_is_invalid_data() {
        let (a, b) = socketpair().unwrap();
        nix::unistd::write(&a, b"{not json").unwrap();
        let e = recv::<Hello>(b.as_fd()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        // Valid JSON of the wrong shape too.
        send(a.as_fd(), &[1, 2, 3], &[]).unwrap();
        let e = recv::<Hello>(b.as_fd()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn oversized_datagram_is_invalid_data() {
        let (a, b) = socketpair().unwrap();
        let big = vec![b' '; MAX_MSG + 1];
        nix::unistd::write(&a, &big).unwrap();
        let e = recv::<Hello>(b.as_fd()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn oversized_send_refused() {
        let (a, _b) = socketpair().unwrap();
        let big = "x".repeat(MAX_MSG);
        let e = send(a.as_fd(), &big, &[]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn try_recv_would_block() {
        let (a, b) = socketpair().unwrap();
        let e = try_recv::<Hello>(b.as_fd()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        send(
            a.as_fd(),
            &Hello {
                dom: 1,
                name: String::new(),
            },
            &[],
        )
        .unwrap();
        assert!(try_recv::<Hello>(b.as_fd()).unwrap().is_some());
    }
}
