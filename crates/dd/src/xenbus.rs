//! netback's side of the xenbus handshake (Linux `drivers/net/xen-netback/xenbus.c`), on the
//! store: what the backend advertises when it probes a vif, what it reads from the frontend
//! when that says `Connected`, and the backend's state transitions.
//!
//! The sequence, as Xen's `io/netif.h` and `xenbus.h` describe it:
//! 1. the toolstack writes both directories (frontend `device/vif/0`, backend
//!    `backend/vif/<domid>/0`), the frontend's state `Initialising`;
//! 2. [`probe`]: the backend advertises its features and goes to `InitWait`, watching the
//!    frontend's state;
//! 3. the frontend grants its rings, binds an event channel, writes `tx-ring-ref`,
//!    `rx-ring-ref`, `event-channel`, `request-rx-copy` and its features, and says `Connected`;
//! 4. [`read_frontend`] reads those keys (untrusted strings: every one parsed and checked), the
//!    backend maps the rings and goes to `Connected` ([`set_state`]);
//! 5. a frontend that goes to `Closing` or `Closed`, or a backend that disconnects a vif for a
//!    protocol violation, ends with the backend in `Closing`/`Closed`.

use pvnet_hv::store::{Store, StoreError, XenbusState};
use pvnet_hv::{DomId, GrantRef};
use pvnet_netif::keys;

use crate::netback::credit::{RateError, TxRate};
use crate::netback::{Features, Mechanism};
use crate::pool::PoolSpec;

/// The frontend's directory of guest `dom`'s vif 0.
pub fn device_path(dom: u16) -> String {
    format!("/local/domain/{dom}/device/vif/0")
}

/// The backend's directory of guest `dom`'s vif 0.
pub fn backend_path(dom: u16) -> String {
    format!("/local/domain/0/backend/vif/{dom}/0")
}

/// The token of the backend's watch on guest `dom`'s frontend state.
pub fn watch_token(dom: u16) -> String {
    format!("fe:{dom}")
}

/// The guest whose frontend a watch token of [`watch_token`] names.
pub fn watched_dom(token: &str) -> Option<u16> {
    token.strip_prefix("fe:")?.parse().ok()
}

/// What a frontend that says `Connected` gave the backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrontendConfig {
    pub tx_ring_ref: GrantRef,
    pub rx_ring_ref: GrantRef,
    pub event_channel: u32,
    pub features: Features,
    /// The frontend wrote `feature-persistent` = 1: it reuses a bounded set of grants.
    pub persistent: bool,
    /// The frontend wrote `request-rx-copy` = 0 where the backend offers `feature-rx-flip`:
    /// it wants received pages flipped.
    pub rx_flip: bool,
}

/// Why a frontend's keys cannot connect it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    #[error("frontend did not write {0}")]
    Missing(&'static str),
    #[error("frontend's {key} is not a number: {value:?}")]
    NotANumber { key: &'static str, value: String },
    #[error("frontend named event channel {0}, which is not bound to it")]
    WrongEventChannel(u32),
    #[error("frontend did not request rx-copy (page flipping is not offered)")]
    NoRxCopy,
    #[error("frontend requested {0}, which this backend did not offer")]
    NotOffered(&'static str),
    #[error("frontend requested both feature-premapped and feature-static-buffer")]
    BothPools,
    #[error("frontend's pool is out of bounds: {0:?} (1 to 256 slots each way)")]
    BadPool(PoolSpec),
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

/// netback's probe of guest `dom`'s vif: advertises its features, goes to `InitWait`, and
/// watches the frontend's state (token [`watch_token`]).
pub fn probe(store: &mut Store, dom: u16) -> Result<(), StoreError> {
    probe_with(store, dom, false)
}

/// [`probe`], advertising `feature-persistent` when `persistent` (a vif configured for the
/// persistent grant mechanism).
pub fn probe_with(store: &mut Store, dom: u16, persistent: bool) -> Result<(), StoreError> {
    probe_features(store, dom, persistent, false)
}

/// [`probe_with`], also advertising `feature-rx-flip` = 1 when `flip` (a vif configured for
/// page flipping).
pub fn probe_features(
    store: &mut Store,
    dom: u16,
    persistent: bool,
    flip: bool,
) -> Result<(), StoreError> {
    let be = backend_path(dom);
    let mut w = |k: &str, v: &str| store.write(DomId::DRIVER, &format!("{be}/{k}"), v);
    if persistent {
        w(keys::FEATURE_PERSISTENT, "1")?;
    }
    // A flip vif carries one page per packet: no sg, no GSO (netback docs, "Page flipping").
    let big = if flip { "0" } else { "1" };
    w(keys::FEATURE_SG, big)?;
    w(keys::FEATURE_GSO_TCPV4, big)?;
    w(keys::FEATURE_GSO_TCPV6, big)?;
    w(keys::FEATURE_RX_COPY, "1")?;
    w(keys::FEATURE_RX_FLIP, if flip { "1" } else { "0" })?;
    w(keys::STATE, &XenbusState::InitWait.as_value())?;
    store.watch(
        DomId::DRIVER,
        &format!("{}/{}", device_path(dom), keys::STATE),
        &watch_token(dom),
    )
}

/// [`probe`], advertising what the vif's configured grant mechanism needs from the frontend:
/// `feature-persistent`, `feature-premapped` or `feature-static-buffer` (nothing for `copy`
/// and `map`).
pub fn probe_offer(store: &mut Store, dom: u16, mechanism: Mechanism) -> Result<(), StoreError> {
    let be = backend_path(dom);
    let key = match mechanism {
        Mechanism::Premapped => Some(keys::FEATURE_PREMAPPED),
        Mechanism::Static => Some(keys::FEATURE_STATIC_BUFFER),
        _ => None,
    };
    if let Some(k) = key {
        store.write(DomId::DRIVER, &format!("{be}/{k}"), "1")?;
    }
    probe_features(
        store,
        dom,
        mechanism == Mechanism::Persistent,
        mechanism == Mechanism::Flip,
    )
}

/// The pool mechanism the frontend of guest `dom` took, given the one the backend `offered`
/// (its configured mechanism), and its pool (see [`crate::pool`]): `None` when it took no pool
/// (the vif then runs `copy` if a pool mechanism was offered). Refuses a frontend that asks for
/// a pool mechanism that was not offered, for both, or describes a pool out of bounds.
pub fn read_frontend_pool(
    store: &Store,
    dom: u16,
    offered: Mechanism,
) -> Result<Option<(Mechanism, PoolSpec)>, HandshakeError> {
    let dev = device_path(dom);
    let flag = |k: &str| {
        store
            .read(DomId::DRIVER, &format!("{dev}/{k}"))
            .ok()
            .flatten()
            .as_deref()
            == Some("1")
    };
    let premapped = flag(keys::FEATURE_PREMAPPED);
    let stat = flag(keys::FEATURE_STATIC_BUFFER);
    let wanted = match (premapped, stat) {
        (false, false) => return Ok(None),
        (true, true) => return Err(HandshakeError::BothPools),
        (true, false) => Mechanism::Premapped,
        (false, true) => Mechanism::Static,
    };
    if wanted != offered {
        return Err(HandshakeError::NotOffered(if premapped {
            keys::FEATURE_PREMAPPED
        } else {
            keys::FEATURE_STATIC_BUFFER
        }));
    }
    let num = |k: &'static str| -> Result<u32, HandshakeError> {
        let s = store
            .read(DomId::DRIVER, &format!("{dev}/{k}"))?
            .ok_or(HandshakeError::Missing(k))?;
        s.trim()
            .parse::<u32>()
            .map_err(|_| HandshakeError::NotANumber { key: k, value: s })
    };
    let spec = PoolSpec {
        first_ref: num(keys::POOL_REF)?,
        rx_slots: num(keys::POOL_RX_SLOTS)?,
        tx_slots: num(keys::POOL_TX_SLOTS)?,
    };
    if !spec.valid() {
        return Err(HandshakeError::BadPool(spec));
    }
    Ok(Some((wanted, spec)))
}

/// The frontend's state, if it wrote a valid one.
pub fn frontend_state(store: &Store, dom: u16) -> Option<XenbusState> {
    let path = format!("{}/{}", device_path(dom), keys::STATE);
    let s = store.read(DomId::DRIVER, &path).ok().flatten()?;
    XenbusState::from_str_value(&s)
}

/// Reads what the frontend of guest `dom` wrote to connect, checking every key; `port` is the
/// event channel port the toolstack bound for it.
pub fn read_frontend(store: &Store, dom: u16, port: u32) -> Result<FrontendConfig, HandshakeError> {
    let dev = device_path(dom);
    let rd = |k: &'static str| -> Result<String, HandshakeError> {
        store
            .read(DomId::DRIVER, &format!("{dev}/{k}"))?
            .ok_or(HandshakeError::Missing(k))
    };
    let num = |k: &'static str| -> Result<u32, HandshakeError> {
        let s = rd(k)?;
        s.trim()
            .parse::<u32>()
            .map_err(|_| HandshakeError::NotANumber { key: k, value: s })
    };
    let flag = |k: &str| {
        store
            .read(DomId::DRIVER, &format!("{dev}/{k}"))
            .ok()
            .flatten()
            .as_deref()
            == Some("1")
    };
    let tx = num(keys::TX_RING_REF)?;
    let rx = num(keys::RX_RING_REF)?;
    let event_channel = num(keys::EVENT_CHANNEL)?;
    if event_channel != port {
        return Err(HandshakeError::WrongEventChannel(event_channel));
    }
    let flip_offered = store
        .read(
            DomId::DRIVER,
            &format!("{}/{}", backend_path(dom), keys::FEATURE_RX_FLIP),
        )
        .ok()
        .flatten()
        .as_deref()
        == Some("1");
    let rx_flip = !flag(keys::REQUEST_RX_COPY);
    if rx_flip && !flip_offered {
        return Err(HandshakeError::NoRxCopy);
    }
    Ok(FrontendConfig {
        tx_ring_ref: GrantRef(tx),
        rx_ring_ref: GrantRef(rx),
        event_channel,
        features: Features {
            sg: flag(keys::FEATURE_SG),
            gso_tcpv4: flag(keys::FEATURE_GSO_TCPV4),
            gso_tcpv6: flag(keys::FEATURE_GSO_TCPV6),
            rx_notify: flag(keys::FEATURE_RX_NOTIFY),
        },
        persistent: flag(keys::FEATURE_PERSISTENT),
        rx_flip,
    })
}

/// Sets the backend's state of guest `dom`'s vif.
pub fn set_state(store: &mut Store, dom: u16, state: XenbusState) -> Result<(), StoreError> {
    let path = format!("{}/{}", backend_path(dom), keys::STATE);
    store.write(DomId::DRIVER, &path, &state.as_value())
}

/// The toolstack's side of a vif's transmit rate (xl's `rate=`): writes `rate` = `BYTES,USEC`
/// in guest `dom`'s backend directory, or removes it (none: unlimited).
pub fn write_rate(store: &mut Store, dom: u16, rate: Option<TxRate>) -> Result<(), StoreError> {
    let path = format!("{}/{}", backend_path(dom), keys::RATE);
    match rate {
        Some(r) => store.write(DomId::DRIVER, &path, &r.to_key()),
        None => store.rm(DomId::DRIVER, &path),
    }
}

/// netback's side: the rate in guest `dom`'s backend directory, read when the frontend
/// connects, as Linux netback does (none when the key is absent).
pub fn read_rate(store: &Store, dom: u16) -> Result<Option<TxRate>, RateError> {
    let path = format!("{}/{}", backend_path(dom), keys::RATE);
    match store.read(DomId::DRIVER, &path).ok().flatten() {
        Some(v) => TxRate::from_key(&v).map(Some),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frontend(store: &mut Store, dom: u16, kv: &[(&str, &str)]) {
        for (k, v) in kv {
            let p = format!("{}/{k}", device_path(dom));
            store.write(DomId::DRIVER, &p, v).unwrap();
        }
    }

    const GOOD: [(&str, &str); 6] = [
        (keys::TX_RING_REF, "8"),
        (keys::RX_RING_REF, " 9 "),
        (keys::EVENT_CHANNEL, "1"),
        (keys::REQUEST_RX_COPY, "1"),
        (keys::FEATURE_SG, "1"),
        (keys::FEATURE_GSO_TCPV4, "1"),
    ];

    #[test]
    fn probe_advertises_and_waits() {
        let mut s = Store::new();
        probe(&mut s, 3).unwrap();
        let be = backend_path(3);
        let rd = |k: &str| s.read(DomId::DRIVER, &format!("{be}/{k}")).unwrap();
        assert_eq!(rd(keys::FEATURE_RX_COPY).as_deref(), Some("1"));
        assert_eq!(rd(keys::FEATURE_RX_FLIP).as_deref(), Some("0"));
        assert_eq!(
            rd(keys::STATE).as_deref(),
            Some(XenbusState::InitWait.as_value().as_str())
        );
        // The watch fires on the frontend's state.
        s.take_events();
        frontend(&mut s, 3, &[(keys::STATE, "4")]);
        let ev = s.take_events();
        assert_eq!(ev.len(), 1);
        assert_eq!(watched_dom(&ev[0].token), Some(3));
        assert_eq!(frontend_state(&s, 3), Some(XenbusState::Connected));
    }

    #[test]
    fn a_complete_frontend_connects() {
        let mut s = Store::new();
        frontend(&mut s, 1, &GOOD);
        let c = read_frontend(&s, 1, 1).unwrap();
        assert_eq!((c.tx_ring_ref, c.rx_ring_ref), (GrantRef(8), GrantRef(9)));
        assert!(c.features.sg && c.features.gso_tcpv4);
        assert!(!c.features.gso_tcpv6 && !c.features.rx_notify);
        assert!(!c.persistent);
    }

    #[test]
    fn persistent_is_advertised_only_when_asked_and_read_back() {
        let mut s = Store::new();
        probe(&mut s, 1).unwrap();
        probe_with(&mut s, 2, true).unwrap();
        let rd = |s: &Store, d: u16| {
            s.read(
                DomId::DRIVER,
                &format!("{}/{}", backend_path(d), keys::FEATURE_PERSISTENT),
            )
            .unwrap()
        };
        assert_eq!(rd(&s, 1), None);
        assert_eq!(rd(&s, 2).as_deref(), Some("1"));
        frontend(&mut s, 2, &GOOD);
        frontend(&mut s, 2, &[(keys::FEATURE_PERSISTENT, "1")]);
        assert!(read_frontend(&s, 2, 1).unwrap().persistent);
        frontend(&mut s, 2, &[(keys::FEATURE_PERSISTENT, "yes")]);
        assert!(!read_frontend(&s, 2, 1).unwrap().persistent);
    }

    #[test]
    fn every_bad_key_is_refused_by_name() {
        let cases: [(&str, Option<&str>, HandshakeError); 5] = [
            (
                keys::TX_RING_REF,
                None,
                HandshakeError::Missing(keys::TX_RING_REF),
            ),
            (
                keys::RX_RING_REF,
                Some("-1"),
                HandshakeError::NotANumber {
                    key: keys::RX_RING_REF,
                    value: "-1".into(),
                },
            ),
            (
                keys::EVENT_CHANNEL,
                Some("7"),
                HandshakeError::WrongEventChannel(7),
            ),
            (keys::REQUEST_RX_COPY, Some("0"), HandshakeError::NoRxCopy),
            (keys::REQUEST_RX_COPY, None, HandshakeError::NoRxCopy),
        ];
        for (key, value, want) in cases {
            let mut s = Store::new();
            let kv: Vec<(&str, &str)> = GOOD.iter().copied().filter(|(k, _)| *k != key).collect();
            frontend(&mut s, 1, &kv);
            if let Some(v) = value {
                frontend(&mut s, 1, &[(key, v)]);
            }
            assert_eq!(
                read_frontend(&s, 1, 1).unwrap_err(),
                want,
                "{key}={value:?}"
            );
        }
    }

    #[test]
    fn pool_features_are_offered_by_mechanism_and_refused_when_not_offered() {
        let mut s = Store::new();
        for (dom, m) in [
            (1, Mechanism::Copy),
            (2, Mechanism::Premapped),
            (3, Mechanism::Static),
        ] {
            probe_offer(&mut s, dom, m).unwrap();
        }
        let rd = |s: &Store, d: u16, k: &str| {
            s.read(DomId::DRIVER, &format!("{}/{k}", backend_path(d)))
                .unwrap()
        };
        assert_eq!(rd(&s, 1, keys::FEATURE_PREMAPPED), None);
        assert_eq!(rd(&s, 1, keys::FEATURE_STATIC_BUFFER), None);
        assert_eq!(rd(&s, 2, keys::FEATURE_PREMAPPED).as_deref(), Some("1"));
        assert_eq!(rd(&s, 2, keys::FEATURE_STATIC_BUFFER), None);
        assert_eq!(rd(&s, 3, keys::FEATURE_STATIC_BUFFER).as_deref(), Some("1"));
        let pool = [
            (keys::POOL_REF, "10"),
            (keys::POOL_RX_SLOTS, "256"),
            (keys::POOL_TX_SLOTS, "256"),
        ];
        for d in 1..=3 {
            frontend(&mut s, d, &pool);
        }
        // A frontend that takes no pool runs without one, whatever was offered.
        assert_eq!(read_frontend_pool(&s, 2, Mechanism::Premapped), Ok(None));
        frontend(&mut s, 2, &[(keys::FEATURE_PREMAPPED, "1")]);
        let spec = PoolSpec {
            first_ref: 10,
            rx_slots: 256,
            tx_slots: 256,
        };
        assert_eq!(
            read_frontend_pool(&s, 2, Mechanism::Premapped),
            Ok(Some((Mechanism::Premapped, spec)))
        );
        // Asked of a backend that offered copy, or static: refused by name.
        frontend(&mut s, 1, &[(keys::FEATURE_PREMAPPED, "1")]);
        assert_eq!(
            read_frontend_pool(&s, 1, Mechanism::Copy),
            Err(HandshakeError::NotOffered(keys::FEATURE_PREMAPPED))
        );
        assert_eq!(
            read_frontend_pool(&s, 2, Mechanism::Static),
            Err(HandshakeError::NotOffered(keys::FEATURE_PREMAPPED))
        );
        frontend(&mut s, 3, &[(keys::FEATURE_STATIC_BUFFER, "1")]);
        assert_eq!(
            read_frontend_pool(&s, 3, Mechanism::Premapped),
            Err(HandshakeError::NotOffered(keys::FEATURE_STATIC_BUFFER))
        );
        assert_eq!(
            read_frontend_pool(&s, 3, Mechanism::Static)
                .unwrap()
                .unwrap()
                .0,
            Mechanism::Static
        );
        // Both at once.
        frontend(&mut s, 3, &[(keys::FEATURE_PREMAPPED, "1")]);
        assert_eq!(
            read_frontend_pool(&s, 3, Mechanism::Static),
            Err(HandshakeError::BothPools)
        );
        // Pools out of bounds, and keys that are not numbers.
        for (k, v) in [
            (keys::POOL_RX_SLOTS, "257"),
            (keys::POOL_TX_SLOTS, "0"),
            (keys::POOL_REF, "4294967295"),
        ] {
            let mut s2 = Store::new();
            frontend(&mut s2, 2, &pool);
            frontend(&mut s2, 2, &[(keys::FEATURE_PREMAPPED, "1"), (k, v)]);
            assert!(
                matches!(
                    read_frontend_pool(&s2, 2, Mechanism::Premapped),
                    Err(HandshakeError::BadPool(_))
                ),
                "{k}={v}"
            );
        }
        frontend(&mut s, 2, &[(keys::POOL_REF, "x")]);
        assert!(matches!(
            read_frontend_pool(&s, 2, Mechanism::Premapped),
            Err(HandshakeError::NotANumber { .. })
        ));
    }

    #[test]
    fn tokens_name_their_guest_only() {
        assert_eq!(watched_dom(&watch_token(65535)), Some(65535));
        assert_eq!(watched_dom("fe:70000"), None);
        assert_eq!(watched_dom("be:1"), None);
    }
}
