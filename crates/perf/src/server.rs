//! The receiving side of stream, request/response, UDP stream and records tests.

use std::io::{self, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use anyhow::Context;
use nix::sys::socket::{
    bind, listen, setsockopt, socket, sockopt, AddressFamily, Backlog, SockFlag, SockType,
    SockaddrIn, SockaddrIn6,
};
use serde::{Deserialize, Serialize};

use crate::proto::{Hello, HELLO_LEN};
use crate::records::{self, RecordsReport};
use crate::{rr, stream, udp, StreamReport, UdpReport};

/// A connection that sends nothing for this long is dropped.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Options of [`serve`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerOpts {
    pub bind: SocketAddr,
    /// Return after the first stream or rr connection ends.
    pub once: bool,
}

/// Summary of one request/response connection, as seen by the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RrSummary {
    pub transactions: u64,
    /// From the hello to the client's close.
    pub seconds: f64,
}

/// What [`serve`] reports per connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ServerEvent {
    /// A stream test ended; this report was also sent to the client.
    Stream(StreamReport),
    /// A request/response test ended.
    Rr(RrSummary),
    /// A UDP stream test ended; this report was also sent to the client.
    Udp(UdpReport),
    /// A records test ended; this report was also sent to the client.
    Records(RecordsReport),
    /// A connection was rejected (bad hello) or failed; the server keeps serving
    /// unless `once` was set and the hello was valid.
    Error {
        peer: Option<SocketAddr>,
        message: String,
    },
}

/// A listening TCP socket with SO_REUSEADDR set before bind.
pub fn bind_listener(addr: SocketAddr) -> io::Result<TcpListener> {
    let family = match addr {
        SocketAddr::V4(_) => AddressFamily::Inet,
        SocketAddr::V6(_) => AddressFamily::Inet6,
    };
    let fd: OwnedFd = socket(family, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)?;
    setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    match addr {
        SocketAddr::V4(a) => bind(fd.as_raw_fd(), &SockaddrIn::from(a))?,
        SocketAddr::V6(a) => bind(fd.as_raw_fd(), &SockaddrIn6::from(a))?,
    }
    listen(&fd, Backlog::new(128)?)?;
    Ok(TcpListener::from(fd))
}

/// Bind `opts.bind` and serve test connections one at a time, calling `on_report` as each ends.
pub fn serve(opts: &ServerOpts, on_report: impl FnMut(ServerEvent)) -> anyhow::Result<()> {
    let l = bind_listener(opts.bind).with_context(|| format!("bind {}", opts.bind))?;
    serve_on(l, opts.once, on_report)
}

/// Serve on an already bound listener (e.g. bound to port 0 to learn the port first).
pub fn serve_on(
    listener: TcpListener,
    once: bool,
    mut on_report: impl FnMut(ServerEvent),
) -> anyhow::Result<()> {
    loop {
        let (mut sock, peer) = match listener.accept() {
            Ok(x) => x,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).context("accept"),
        };
        match handle(&mut sock) {
            Ok(ev) => {
                on_report(ev);
                if once {
                    return Ok(());
                }
            }
            Err(ConnError::Hello(e)) => on_report(ServerEvent::Error {
                peer: Some(peer),
                message: format!("hello: {e}"),
            }),
            Err(ConnError::Test(e)) => {
                let message = format!("test connection from {peer}: {e}");
                on_report(ServerEvent::Error {
                    peer: Some(peer),
                    message: message.clone(),
                });
                if once {
                    anyhow::bail!(message);
                }
            }
        }
    }
}

enum ConnError {
    /// Before a valid hello: not a test connection.
    Hello(anyhow::Error),
    /// After a valid hello.
    Test(anyhow::Error),
}

fn handle(sock: &mut TcpStream) -> Result<ServerEvent, ConnError> {
    sock.set_read_timeout(Some(IDLE_TIMEOUT))
        .and_then(|_| sock.set_write_timeout(Some(IDLE_TIMEOUT)))
        .map_err(|e| ConnError::Hello(e.into()))?;
    let mut h = [0u8; HELLO_LEN];
    sock.read_exact(&mut h)
        .map_err(|e| ConnError::Hello(e.into()))?;
    let hello = Hello::decode(&h).map_err(|e| ConnError::Hello(e.into()))?;
    match hello {
        Hello::Stream { .. } => stream::receive(sock)
            .map(ServerEvent::Stream)
            .map_err(|e| ConnError::Test(e.into())),
        Hello::Rr {
            req_size, rsp_size, ..
        } => {
            let t = Instant::now();
            let transactions = rr::respond(sock, req_size as usize, rsp_size as usize)
                .map_err(|e| ConnError::Test(e.into()))?;
            Ok(ServerEvent::Rr(RrSummary {
                transactions,
                seconds: t.elapsed().as_secs_f64(),
            }))
        }
        Hello::Udp {
            size,
            test_id,
            duration_ms,
            ..
        } => udp::receive(
            sock,
            size as usize,
            test_id,
            duration_ms,
            &udp::UdpLimits::default(),
        )
        .map(ServerEvent::Udp)
        .map_err(|e| ConnError::Test(e.into())),
        Hello::Records { size, count } => records::receive(sock, size as usize, count)
            .map(ServerEvent::Records)
            .map_err(|e| ConnError::Test(e.into())),
    }
}
