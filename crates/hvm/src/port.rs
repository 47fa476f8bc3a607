//! Frame ports: where the device model's network side and the guest kernel's stack side meet
//! the outside, one Ethernet frame per call.
//!
//! Contract of a [`FramePort`]: `recv` never blocks (it says `Ok(None)` when nothing is
//! queued) and fills at most `buf.len()` bytes; a frame longer than `buf` is cut, which the
//! caller sees as a frame of `buf.len()` bytes and refuses (the card takes at most 1514). `send`
//! hands one whole frame over or fails; it may wait a bounded time for room. `fd` becomes
//! readable when `recv` has something.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{recv, send, MsgFlags};

/// One side of a frame path.
pub trait FramePort {
    /// Sends one Ethernet frame.
    fn send(&mut self, frame: &[u8]) -> io::Result<()>;
    /// Takes one frame if one is queued: its length, or `None`.
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>>;
    /// Readable when [`FramePort::recv`] has a frame (for poll/epoll).
    fn fd(&self) -> BorrowedFd<'_>;
}

/// How long [`SeqPacketPort::send`] waits for room by default before the frame is given up.
pub const SEND_WAIT: Duration = Duration::from_millis(200);

/// A `SOCK_SEQPACKET` (or `SOCK_DGRAM`) UNIX socket carrying one frame per message: the device
/// model's network side (its peer is a bridge port in the daemon) and the tests' mock network.
#[derive(Debug)]
pub struct SeqPacketPort {
    fd: OwnedFd,
    send_wait: Duration,
}

impl SeqPacketPort {
    /// Wraps `fd`, making it non-blocking.
    pub fn new(fd: OwnedFd) -> io::Result<SeqPacketPort> {
        set_nonblocking(fd.as_fd())?;
        Ok(SeqPacketPort {
            fd,
            send_wait: SEND_WAIT,
        })
    }

    /// How long [`FramePort::send`] waits for room (default [`SEND_WAIT`]).
    pub fn set_send_wait(&mut self, wait: Duration) {
        self.send_wait = wait;
    }

    /// A connected pair (close-on-exec, both non-blocking).
    pub fn pair() -> io::Result<(SeqPacketPort, SeqPacketPort)> {
        let (a, b) = pvnet_hv::ctl::socketpair()?;
        Ok((SeqPacketPort::new(a)?, SeqPacketPort::new(b)?))
    }

    /// A second handle on the same socket (for a reader and a writer in two threads).
    pub fn try_clone(&self) -> io::Result<SeqPacketPort> {
        Ok(SeqPacketPort {
            fd: self.fd.try_clone()?,
            send_wait: self.send_wait,
        })
    }

    /// The socket.
    pub fn into_fd(self) -> OwnedFd {
        self.fd
    }

    /// Receives one frame, waiting up to `timeout` for one (for tests and simple readers).
    pub fn recv_timeout(&mut self, buf: &mut [u8], timeout: Duration) -> io::Result<Option<usize>> {
        if let Some(n) = self.recv(buf)? {
            return Ok(Some(n));
        }
        if !wait_for(self.fd.as_fd(), PollFlags::POLLIN, timeout)? {
            return Ok(None);
        }
        self.recv(buf)
    }
}

/// Sets `O_NONBLOCK` on `fd`.
pub fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let fl = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL).map_err(io::Error::from)?);
    fcntl(fd, FcntlArg::F_SETFL(fl | OFlag::O_NONBLOCK)).map_err(io::Error::from)?;
    Ok(())
}

/// Polls `fd` for `flags` up to `timeout` (EINTR retried). True when ready (or hung up).
pub fn wait_for(fd: BorrowedFd<'_>, flags: PollFlags, timeout: Duration) -> io::Result<bool> {
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    loop {
        let mut fds = [PollFd::new(fd, flags)];
        match poll(
            &mut fds,
            PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
        ) {
            Ok(0) => return Ok(false),
            Ok(_) => return Ok(true),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

impl FramePort for SeqPacketPort {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        let deadline = std::time::Instant::now() + self.send_wait;
        loop {
            match send(self.fd.as_raw_fd(), frame, MsgFlags::MSG_NOSIGNAL) {
                Ok(_) => return Ok(()),
                Err(nix::errno::Errno::EINTR) => continue,
                Err(nix::errno::Errno::EAGAIN) => {
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        return Err(io::ErrorKind::WouldBlock.into());
                    }
                    wait_for(self.fd.as_fd(), PollFlags::POLLOUT, left)?;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        loop {
            match recv(self.fd.as_raw_fd(), buf, MsgFlags::MSG_DONTWAIT) {
                // A zero-length message from a SEQPACKET peer is its end of file.
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => return Ok(Some(n)),
                Err(nix::errno::Errno::EINTR) => continue,
                Err(nix::errno::Errno::EAGAIN) => return Ok(None),
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
