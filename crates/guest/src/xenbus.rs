//! The guest's side of xenbus: a xenstore client over the control socket, and the vif
//! handshake of `io/netif.h` (frontend: Initialising → Connected once the backend is in
//! InitWait; backend: InitWait → Connected once it has mapped the rings).

use std::collections::VecDeque;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use pvnet_hv::ctl;
use pvnet_hv::store::{XenbusState, XsReply, XsRequest};
use pvnet_netif::keys;

use crate::proto::{FromGuest, ToGuest};

/// A xenstore client: synchronous requests; watch events that arrive meanwhile are queued.
pub struct XsClient {
    sock: OwnedFd,
    events: VecDeque<(String, String)>,
    /// Messages other than replies and watches (e.g. Shutdown) seen while waiting.
    pub other: VecDeque<ToGuest>,
}

impl XsClient {
    pub fn new(sock: OwnedFd) -> XsClient {
        XsClient {
            sock,
            events: VecDeque::new(),
            other: VecDeque::new(),
        }
    }

    pub fn sock(&self) -> &OwnedFd {
        &self.sock
    }

    /// Takes the watch events that arrived while waiting for replies.
    pub fn take_events(&mut self) -> Vec<(String, String)> {
        self.events.drain(..).collect()
    }

    /// Queues a watch event that arrived outside a request.
    pub fn push_event(&mut self, path: String, token: String) {
        self.events.push_back((path, token));
    }

    pub fn send(&self, msg: &FromGuest) -> Result<()> {
        ctl::send(self.sock.as_fd(), msg, &[]).context("control socket send")
    }

    /// Receives the next message, blocking.
    pub fn recv(&mut self) -> Result<ToGuest> {
        match ctl::recv::<ToGuest>(self.sock.as_fd()).context("control socket receive")? {
            Some((m, _fds)) => Ok(m),
            None => bail!("toolstack closed the control socket"),
        }
    }

    fn request(&mut self, req: XsRequest) -> Result<XsReply> {
        self.send(&FromGuest::Xs(req))?;
        loop {
            match self.recv()? {
                ToGuest::Xs(r) => return Ok(r),
                ToGuest::Watch { path, token } => self.events.push_back((path, token)),
                other => self.other.push_back(other),
            }
        }
    }

    pub fn read(&mut self, path: &str) -> Result<Option<String>> {
        match self.request(XsRequest::Read {
            path: path.to_string(),
        })? {
            XsReply::Value(v) => Ok(v),
            XsReply::Err(e) => bail!("xenstore read {path}: {e}"),
            r => bail!("xenstore read {path}: unexpected reply {r:?}"),
        }
    }

    /// Sends a request whose only good answer is `Ok`.
    fn request_ok(&mut self, what: &str, path: &str, req: XsRequest) -> Result<()> {
        match self.request(req)? {
            XsReply::Ok => Ok(()),
            XsReply::Err(e) => bail!("xenstore {what} {path}: {e}"),
            r => bail!("xenstore {what} {path}: unexpected reply {r:?}"),
        }
    }

    pub fn write(&mut self, path: &str, value: &str) -> Result<()> {
        let req = XsRequest::Write {
            path: path.to_string(),
            value: value.to_string(),
        };
        self.request_ok("write", path, req)
    }

    pub fn watch(&mut self, path: &str, token: &str) -> Result<()> {
        let req = XsRequest::Watch {
            path: path.to_string(),
            token: token.to_string(),
        };
        self.request_ok("watch", path, req)
    }

    pub fn unwatch(&mut self, path: &str, token: &str) -> Result<()> {
        let req = XsRequest::Unwatch {
            path: path.to_string(),
            token: token.to_string(),
        };
        self.request_ok("unwatch", path, req)
    }

    /// Waits until a watch event arrives (or one is queued), with a deadline.
    pub fn wait_event(&mut self, deadline: Instant) -> Result<(String, String)> {
        loop {
            if let Some(e) = self.events.pop_front() {
                return Ok(e);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!("timed out waiting for xenstore");
            }
            let mut fds = [nix::poll::PollFd::new(
                self.sock.as_fd(),
                nix::poll::PollFlags::POLLIN,
            )];
            let ms = left.as_millis().min(i32::MAX as u128) as i32;
            nix::poll::poll(
                &mut fds,
                nix::poll::PollTimeout::try_from(ms).unwrap_or(nix::poll::PollTimeout::MAX),
            )
            .context("poll control socket")?;
            if fds[0].revents().is_some_and(|r| !r.is_empty()) {
                match self.recv()? {
                    ToGuest::Watch { path, token } => self.events.push_back((path, token)),
                    other => self.other.push_back(other),
                }
            }
        }
    }

    /// Waits until the state node at `path` holds one of `want`; fails on Closing/Closed.
    pub fn wait_state(
        &mut self,
        path: &str,
        want: &[XenbusState],
        timeout: Duration,
    ) -> Result<XenbusState> {
        let deadline = Instant::now() + timeout;
        self.watch(path, "state-wait")?;
        let r = self.wait_state_watched(path, want, deadline);
        self.unwatch(path, "state-wait")?;
        self.events.clear();
        r
    }

    fn wait_state_watched(
        &mut self,
        path: &str,
        want: &[XenbusState],
        deadline: Instant,
    ) -> Result<XenbusState> {
        loop {
            let cur = self
                .read(path)?
                .and_then(|v| XenbusState::from_str_value(&v))
                .unwrap_or(XenbusState::Unknown);
            if want.contains(&cur) {
                return Ok(cur);
            }
            if matches!(cur, XenbusState::Closing | XenbusState::Closed) && !want.contains(&cur) {
                bail!("backend state went to {cur:?} at {path}");
            }
            self.wait_event(deadline)?;
        }
    }
}

/// What the backend offers, read from its directory.
#[derive(Clone, Copy, Debug, Default)]
pub struct BackendFeatures {
    pub sg: bool,
    pub gso_tcpv4: bool,
    pub gso_tcpv6: bool,
    pub rx_copy: bool,
    /// `feature-persistent`: the backend keeps mappings of grants a frontend reuses.
    pub persistent: bool,
    /// `feature-premapped`: the backend maps a frontend's pool of packet pages once.
    pub premapped: bool,
    /// `feature-static-buffer`: the backend maps a frontend's static buffer once.
    pub static_buffer: bool,
    /// `feature-rx-flip`: the backend can hand over received pages (page flipping).
    pub rx_flip: bool,
}

/// The frontend's half of the handshake up to "rings published": waits for the backend's
/// InitWait and reads its features. Returns the backend directory and the features.
pub fn await_backend(xs: &mut XsClient, device_path: &str) -> Result<(String, BackendFeatures)> {
    let backend = xs
        .read(&format!("{device_path}/{}", keys::BACKEND))?
        .ok_or_else(|| anyhow!("no backend path under {device_path}"))?;
    xs.write(
        &format!("{device_path}/{}", keys::STATE),
        &XenbusState::Initialising.as_value(),
    )?;
    xs.wait_state(
        &format!("{backend}/{}", keys::STATE),
        &[XenbusState::InitWait, XenbusState::Connected],
        Duration::from_secs(10),
    )?;
    let f = read_features(xs, &backend)?;
    Ok((backend, f))
}

/// Reads what the backend at `backend` offers; fails when it does not offer rx-copy.
pub fn read_features(xs: &mut XsClient, backend: &str) -> Result<BackendFeatures> {
    let mut flag = |k: &str| -> Result<bool> {
        Ok(xs.read(&format!("{backend}/{k}"))?.as_deref() == Some("1"))
    };
    let f = BackendFeatures {
        sg: flag(keys::FEATURE_SG)?,
        gso_tcpv4: flag(keys::FEATURE_GSO_TCPV4)?,
        gso_tcpv6: flag(keys::FEATURE_GSO_TCPV6)?,
        rx_copy: flag(keys::FEATURE_RX_COPY)?,
        persistent: flag(keys::FEATURE_PERSISTENT)?,
        premapped: flag(keys::FEATURE_PREMAPPED)?,
        static_buffer: flag(keys::FEATURE_STATIC_BUFFER)?,
        rx_flip: flag(keys::FEATURE_RX_FLIP)?,
    };
    if !f.rx_copy {
        bail!("backend does not offer feature-rx-copy");
    }
    Ok(f)
}

/// The backend's state at `backend` (None: the node is gone or holds no state).
pub fn backend_state(xs: &mut XsClient, backend: &str) -> Result<Option<XenbusState>> {
    Ok(xs
        .read(&format!("{backend}/{}", keys::STATE))?
        .and_then(|v| XenbusState::from_str_value(&v)))
}

/// Writes the frontend's own state.
pub fn set_front_state(xs: &mut XsClient, device_path: &str, st: XenbusState) -> Result<()> {
    xs.write(&format!("{device_path}/{}", keys::STATE), &st.as_value())
}

/// Publishes ring references, event channel and the frontend's features, then switches the
/// frontend to Connected and waits for the backend to follow.
#[allow(clippy::too_many_arguments)]
pub fn publish_and_connect(
    xs: &mut XsClient,
    device_path: &str,
    backend: &str,
    tx_ref: u32,
    rx_ref: u32,
    port: u32,
    features: &[(&str, bool)],
) -> Result<()> {
    publish(xs, device_path, tx_ref, rx_ref, port, features)?;
    xs.wait_state(
        &format!("{backend}/{}", keys::STATE),
        &[XenbusState::Connected],
        Duration::from_secs(10),
    )?;
    Ok(())
}

/// Publishes ring references, event channel and the frontend's features, then switches the
/// frontend to Connected, without waiting for the backend (a reconnection waits in the guest's
/// event loop instead).
pub fn publish(
    xs: &mut XsClient,
    device_path: &str,
    tx_ref: u32,
    rx_ref: u32,
    port: u32,
    features: &[(&str, bool)],
) -> Result<()> {
    let d = device_path;
    xs.write(&format!("{d}/{}", keys::TX_RING_REF), &tx_ref.to_string())?;
    xs.write(&format!("{d}/{}", keys::RX_RING_REF), &rx_ref.to_string())?;
    xs.write(&format!("{d}/{}", keys::EVENT_CHANNEL), &port.to_string())?;
    xs.write(&format!("{d}/{}", keys::REQUEST_RX_COPY), "1")?;
    for (k, on) in features {
        xs.write(&format!("{d}/{k}"), if *on { "1" } else { "0" })?;
    }
    xs.write(
        &format!("{d}/{}", keys::STATE),
        &XenbusState::Connected.as_value(),
    )
}
