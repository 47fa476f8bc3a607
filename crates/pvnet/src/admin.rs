//! The admin protocol between the `pvnet` commands (`stat`, `set`, `down`, the bench) and a
//! running daemon: typed requests and replies, one JSON message each way on a
//! `SOCK_SEQPACKET` socket in the run's directory.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use anyhow::{bail, Context, Result};
use nix::sys::socket::{self, AddressFamily, SockFlag, SockType, UnixAddr};
use pvnet_dd::lro;
use pvnet_dd::netback::credit::TxRate;
use pvnet_hv::ctl;
use serde::{Deserialize, Serialize};

use crate::rundir;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum AdminRequest {
    Stat,
    Down,
    /// Reconfigures the data path of a running system; None leaves a setting as it is.
    Set(SetRequest),
    /// Starts a capture at guest `guest`'s bridge port (`pvnet capture vif<i>`): answered with
    /// [`AdminReply::Capture`] and the reader's end of the capture's socket
    /// ([`pvnet_dd::capture`]).
    Capture {
        guest: usize,
    },
    /// Restarts the driver domain (`pvnet restart-dd`): answered with
    /// [`AdminReply::Restarting`] once the old one is gone and the new one's ports are open;
    /// the frontends reconnect after (`stat`'s `restart`).
    RestartDd,
}

/// `pvnet set`'s changes, parsed by the command (the daemon receives types, not strings).
/// The daemon checks every change before it applies any: a refused request changes nothing.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SetRequest {
    /// The physical port to change (None: the only one).
    pub port: Option<String>,
    /// The aggregation policy, or off.
    pub lro: Option<LroChange>,
    pub mode: Option<lro::Mode>,
    pub bo: Option<bool>,
    /// Guest-to-guest frames in one copy, grant to grant (on by default).
    #[serde(default)]
    pub g2g: Option<bool>,
    /// The HVM guests' port-I/O path, flipped in every HVM domain's ioreq page.
    #[serde(default)]
    pub hvm_path: Option<pvnet_hvm::Path>,
    /// Transmit rates: a vif by index (None: every vif) and its rate (None: unlimited).
    #[serde(default)]
    pub vif_rate: Vec<(Option<u16>, Option<TxRate>)>,
}

/// A change of the aggregation policy. (Not an `Option<Policy>`: inside `SetRequest`'s own
/// `Option`, JSON would read "off" (`Some(None)`) back as "unchanged" (`None`).)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LroChange {
    Off,
    On(lro::Policy),
}

impl LroChange {
    /// The policy it sets (None: aggregation off).
    pub fn policy(self) -> Option<lro::Policy> {
        match self {
            LroChange::Off => None,
            LroChange::On(p) => Some(p),
        }
    }
}

/// The data path's settings, as `set` leaves them and `stat` shows them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    pub port: String,
    /// The flush policy, or `off`.
    pub lro: String,
    pub mode: lro::Mode,
    pub bo: bool,
    /// Guest-to-guest frames in one copy.
    #[serde(default)]
    pub g2g: bool,
    /// The HVM guests' port-I/O path (None: the run has no HVM guest).
    #[serde(default)]
    pub hvm_path: Option<pvnet_hvm::Path>,
    /// HVM domains the path applies to.
    #[serde(default)]
    pub hvm_domains: usize,
    /// The vifs' transmit rates, by index.
    #[serde(default)]
    pub vif_rates: std::collections::BTreeMap<u16, TxRate>,
}

/// The daemon's answer to an [`AdminRequest`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum AdminReply {
    /// `Down`: the daemon is stopping.
    Stopping,
    /// `Set` applied: the settings now.
    Set(Settings),
    /// `Stat`: every counter, as `pvnet stat --json` prints it.
    Stat(serde_json::Value),
    /// `Capture` started: records of the port named follow on the descriptor sent with this
    /// reply.
    Capture { port: String },
    /// `RestartDd`: the driver domain was replaced; this many backends went away, whose
    /// frontends are reconnecting.
    Restarting { vifs: usize },
    /// The request was refused, and nothing changed.
    Error(String),
}

/// Sends one admin request to run `id`'s daemon and returns its answer.
pub fn call(id: &str, req: &AdminRequest) -> Result<AdminReply> {
    call_with_fds(id, req).map(|(r, _)| r)
}

/// [`call`], also returning the descriptors the daemon sent with its answer.
pub fn call_with_fds(id: &str, req: &AdminRequest) -> Result<(AdminReply, Vec<OwnedFd>)> {
    let path = rundir::ctl_path(id);
    let fd = socket::socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    socket::connect(fd.as_raw_fd(), &UnixAddr::new(&path)?)
        .with_context(|| format!("connecting to the pvnet daemon at {}", path.display()))?;
    ctl::send(fd.as_fd(), req, &[])?;
    match ctl::recv::<AdminReply>(fd.as_fd())? {
        Some(v) => Ok(v),
        None => bail!("the daemon closed the connection without answering"),
    }
}

/// Run `id`'s counters ([`AdminRequest::Stat`]).
pub fn stat(id: &str) -> Result<serde_json::Value> {
    match call(id, &AdminRequest::Stat)? {
        AdminReply::Stat(v) => Ok(v),
        AdminReply::Error(e) => bail!("{e}"),
        other => bail!("the daemon answered a stat request with {other:?}"),
    }
}

/// How often the daemon tries again to open its ports that are closed (the NIC gone, the stack
/// TAP deleted, or a restart that could not open them), in ms.
pub const PORT_RETRY_MS: u64 = 250;

/// How long [`restart_dd`] waits for every frontend to reconnect.
pub const RECONNECT_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Restarts run `id`'s driver domain (`pvnet restart-dd`) and, when `wait`, waits until every
/// frontend has reconnected (at most [`RECONNECT_WAIT`]). Returns how many vifs lost their
/// backend and `stat`'s `restart` object after the wait (its `last` describes this restart).
pub fn restart_dd(id: &str, wait: bool) -> Result<(usize, serde_json::Value)> {
    let vifs = match call(id, &AdminRequest::RestartDd)? {
        AdminReply::Restarting { vifs } => vifs,
        AdminReply::Error(e) => bail!("{e}"),
        other => bail!("the daemon answered a restart request with {other:?}"),
    };
    let deadline = std::time::Instant::now() + RECONNECT_WAIT;
    let mut r = stat(id)?["restart"].clone();
    while wait && r["last"]["reconnect_ms"].is_null() {
        if std::time::Instant::now() > deadline {
            bail!(
                "the frontends did not all reconnect within {} s ({} of {vifs})",
                RECONNECT_WAIT.as_secs(),
                r["last"]["reconnected"]
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
        r = stat(id)?["restart"].clone();
    }
    Ok((vifs, r))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_request_survives_the_socket() {
        let max = pvnet_hvm::Path::Fast(pvnet_ne2000::Class::Max);
        for lro in [
            None,
            Some(LroChange::Off),
            Some(LroChange::On(lro::Policy::Every(2))),
            Some(LroChange::On(lro::Policy::Timeout { us: 50 })),
        ] {
            let r = AdminRequest::Set(SetRequest {
                port: Some("eth0".into()),
                lro,
                mode: Some(lro::Mode::Page),
                bo: Some(false),
                g2g: Some(false),
                hvm_path: Some(max),
                vif_rate: vec![
                    (
                        Some(2),
                        Some(TxRate {
                            bytes: 9,
                            usec: 5000,
                        }),
                    ),
                    (None, None),
                ],
            });
            let back: AdminRequest =
                serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
            let AdminRequest::Set(b) = back else {
                panic!("not a set request")
            };
            assert_eq!(b.lro, lro);
            assert_eq!(
                (b.port.as_deref(), b.mode, b.bo),
                (Some("eth0"), Some(lro::Mode::Page), Some(false))
            );
            assert_eq!((b.g2g, b.hvm_path), (Some(false), Some(max)));
            // `off` for every vif stays `off`, not "unchanged".
            assert_eq!(
                b.vif_rate,
                vec![
                    (
                        Some(2),
                        Some(TxRate {
                            bytes: 9,
                            usec: 5000
                        })
                    ),
                    (None, None)
                ]
            );
        }
    }
}
