//! Event channels as eventfd pairs (docs/architecture.md, "Xen concept → pvnet").
//!
//! A channel is two eventfds. End A notifies by writing the eventfd end B waits on, and the other
//! way round, so each end has a `notify` fd and a `wait` fd. Both are non-blocking; the wait fd
//! goes into the owner's epoll set, and [`EvtchnEnd::consume`] clears pending events. Whether to
//! notify at all is decided by the ring's event indices (`io/ring.h`), not here.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

pub(crate) fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with no pointer arguments.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor returned by eventfd, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Creates a connected channel: each end's notifications wake the other end.
pub fn channel_pair() -> io::Result<(EvtchnEnd, EvtchnEnd)> {
    let a_to_b = eventfd()?;
    let b_to_a = eventfd()?;
    let a = EvtchnEnd::from_fds(a_to_b.try_clone()?, b_to_a.try_clone()?);
    let b = EvtchnEnd::from_fds(b_to_a, a_to_b);
    Ok((a, b))
}

/// One end of an event channel.
#[derive(Debug)]
pub struct EvtchnEnd {
    notify: OwnedFd,
    wait: OwnedFd,
    notifications: AtomicU64,
}

impl EvtchnEnd {
    /// An end from its fds (as received over the control socket): `notify` is written to signal
    /// the peer, `wait` becomes readable when the peer signals us.
    pub fn from_fds(notify: OwnedFd, wait: OwnedFd) -> EvtchnEnd {
        EvtchnEnd {
            notify,
            wait,
            notifications: AtomicU64::new(0),
        }
    }

    /// Splits into `(notify, wait)` fds, e.g. to pass to the guest process.
    pub fn into_fds(self) -> (OwnedFd, OwnedFd) {
        (self.notify, self.wait)
    }

    /// Signals the peer. An eventfd counter at its maximum (`EAGAIN`) already has an event
    /// pending, so that counts as delivered.
    pub fn notify(&self) -> io::Result<()> {
        let one = 1u64.to_ne_bytes();
        loop {
            // SAFETY: writes 8 bytes from a live local buffer to an fd we own.
            let n = unsafe { libc::write(self.notify.as_raw_fd(), one.as_ptr().cast(), one.len()) };
            if n == 8 {
                break;
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => break,
                _ => return Err(e),
            }
        }
        self.notifications.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// How many times this end notified its peer.
    pub fn notifications(&self) -> u64 {
        self.notifications.load(Ordering::Relaxed)
    }

    /// The fd that becomes readable when the peer notifies (register it with epoll).
    pub fn wait_fd(&self) -> BorrowedFd<'_> {
        self.wait.as_fd()
    }

    /// The fd written by [`EvtchnEnd::notify`].
    pub fn notify_fd(&self) -> BorrowedFd<'_> {
        self.notify.as_fd()
    }

    /// Reads and clears the pending event count: 0 if nothing is pending (or on error).
    pub fn consume(&self) -> u64 {
        let mut buf = [0u8; 8];
        loop {
            // SAFETY: reads at most 8 bytes into a live local buffer from an fd we own.
            let n =
                unsafe { libc::read(self.wait.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n == 8 {
                return u64::from_ne_bytes(buf);
            }
            if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notify_reaches_peer_only() {
        let (a, b) = channel_pair().unwrap();
        a.notify().unwrap();
        a.notify().unwrap();
        assert_eq!(a.notifications(), 2);
        assert_eq!(a.consume(), 0, "own notifications are not seen locally");
        assert_eq!(b.consume(), 2);
        assert_eq!(b.consume(), 0);
        b.notify().unwrap();
        assert_eq!(a.consume(), 1);
        assert_eq!(b.notifications(), 1);
    }

    #[test]
    fn wait_fd_is_pollable() {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let (a, b) = channel_pair().unwrap();
        let ready = |e: &EvtchnEnd| {
            let mut fds = [PollFd::new(e.wait_fd(), PollFlags::POLLIN)];
            poll(&mut fds, PollTimeout::ZERO).unwrap()
        };
        assert_eq!(ready(&b), 0);
        a.notify().unwrap();
        assert_eq!(ready(&b), 1);
        b.consume();
        assert_eq!(ready(&b), 0);
    }

    #[test]
    fn fds_roundtrip() {
        let (a, b) = channel_pair().unwrap();
        let (n, w) = b.into_fds();
        let b = EvtchnEnd::from_fds(n, w);
        b.notify().unwrap();
        assert_eq!(a.consume(), 1);
        a.notify().unwrap();
        assert_eq!(b.consume(), 1);
    }
}
