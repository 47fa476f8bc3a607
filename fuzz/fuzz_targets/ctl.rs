//! The control-socket decoding (`pvnet_hv::ctl::try_recv`) of arbitrary datagrams: the fuzz
//! bytes go, as one `SOCK_SEQPACKET` datagram (sometimes with a file descriptor attached), to
//! the receiving end, which decodes them as one of the messages that cross a trust boundary
//! there: `FromGuest` (what the daemon reads from a guest), `ToGuest` (what a guest reads),
//! or the bare `XsRequest` / `XsReply` of the store.
//!
//! Invariants:
//! - a queued datagram never reads as `WouldBlock`; anything undecodable is `InvalidData`;
//!   `Ok(None)` (EOF) only for an empty datagram without descriptors;
//! - a decoded message is exactly what `serde_json` makes of the bytes, and it survives a
//!   round trip through `ctl::send` / `ctl::try_recv` unchanged (same JSON re-encoding);
//! - descriptors: handed over with the message, or closed when the message is refused (the
//!   process's descriptor count is back where it was);
//! - nothing stays queued on the socket.

#![no_main]

use std::io::ErrorKind;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use pvnet_guest::proto::{FromGuest, ToGuest};
use pvnet_hv::ctl;
use pvnet_hv::store::{XsReply, XsRequest};
use serde::de::DeserializeOwned;
use serde::Serialize;

struct Pair {
    a: OwnedFd,
    b: OwnedFd,
    /// An fd to attach (a pipe end), dup'ed by the kernel on each send.
    extra: OwnedFd,
}

fn pair() -> &'static Pair {
    static P: OnceLock<Pair> = OnceLock::new();
    P.get_or_init(|| {
        let (a, b) = ctl::socketpair().expect("socketpair");
        let (r, _w) = nix::unistd::pipe().expect("pipe");
        let open = std::fs::read_dir("/proc/self/fd").expect("/proc").count();
        assert!(
            open + 16 < FD_WINDOW as usize,
            "{open} descriptors open: the leak check's window is too small"
        );
        Pair { a, b, extra: r }
    })
}

/// Descriptor numbers below this are watched for leaks.
const FD_WINDOW: i32 = 64;

/// Which descriptors below [`FD_WINDOW`] are open, one bit each (`F_GETFD` per number: two
/// orders of magnitude cheaper than listing `/proc/self/fd`, which this ran twice per input).
/// The kernel gives every new descriptor the lowest free number, and [`pair`] checks that
/// fewer than `FD_WINDOW - 16` are open at the start, so a descriptor an input leaves open is
/// always in the window: an equal mask before and after is an equal set of open descriptors.
fn open_fds() -> u64 {
    let mut mask = 0u64;
    for fd in 0..FD_WINDOW {
        // SAFETY: `F_GETFD` only reads the descriptor's flags; on a number that is not open it
        // fails with EBADF and touches nothing.
        if unsafe { nix::libc::fcntl(fd, nix::libc::F_GETFD) } != -1 {
            mask |= 1 << fd;
        }
    }
    mask
}

/// Sends `bytes` raw (not through `ctl::send`, which only sends what it encoded itself).
fn send_raw(p: &Pair, bytes: &[u8], with_fd: bool) {
    let iov = [std::io::IoSlice::new(bytes)];
    let fds = [p.extra.as_raw_fd()];
    let cmsg = [nix::sys::socket::ControlMessage::ScmRights(&fds)];
    let cmsgs: &[_] = if with_fd { &cmsg } else { &[] };
    nix::sys::socket::sendmsg::<()>(
        p.a.as_raw_fd(),
        &iov,
        cmsgs,
        nix::sys::socket::MsgFlags::MSG_DONTWAIT,
        None,
    )
    .expect("send a small datagram");
}

fn check<T: Serialize + DeserializeOwned>(bytes: &[u8], with_fd: bool) {
    let p = pair();
    let fds_before = open_fds();
    send_raw(p, bytes, with_fd);
    let got = ctl::try_recv::<T>(p.b.as_fd());
    match got {
        Ok(None) => assert!(bytes.is_empty() && !with_fd, "EOF for a real datagram"),
        Ok(Some((msg, fds))) => {
            assert_eq!(
                fds.len(),
                usize::from(with_fd),
                "descriptors lost or invented"
            );
            drop(fds);
            let direct: T =
                serde_json::from_slice(bytes).expect("ctl decoded what serde_json refuses");
            let enc = serde_json::to_vec(&msg).unwrap();
            assert_eq!(enc, serde_json::to_vec(&direct).unwrap());
            // Round trip through the transport.
            ctl::send(p.a.as_fd(), &msg, &[]).expect("re-send a decoded message");
            let (again, fds) = ctl::try_recv::<T>(p.b.as_fd()).unwrap().unwrap();
            assert!(fds.is_empty());
            assert_eq!(
                serde_json::to_vec(&again).unwrap(),
                enc,
                "round trip changed the message"
            );
        }
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::InvalidData, "{e}");
            assert!(serde_json::from_slice::<T>(bytes).is_err() || with_fd && bytes.is_empty());
        }
    }
    assert_eq!(open_fds(), fds_before, "a received descriptor leaked");
    assert_eq!(
        ctl::try_recv::<T>(p.b.as_fd()).err().map(|e| e.kind()),
        Some(ErrorKind::WouldBlock),
        "something stayed queued"
    );
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, bytes)) = data.split_first() else {
        return;
    };
    let with_fd = sel & 0x80 != 0;
    match sel & 3 {
        0 => check::<FromGuest>(bytes, with_fd),
        1 => check::<ToGuest>(bytes, with_fd),
        2 => check::<XsRequest>(bytes, with_fd),
        _ => check::<XsReply>(bytes, with_fd),
    }
});
