//! `pvnet_hv::store::Store::handle` with request sequences from the driver domain and three
//! guests (domids 1, 2, 3): paths built from the components that matter to the permission
//! rules (`local`, `domain`, domids, `backend`, `vif`, ...) or raw fuzz strings, values and
//! tokens of fuzz bytes.
//!
//! Invariants, checked after every request, against rules written here independently of the
//! store's (`docs/misc/xenstore.txt` as `store.rs` documents it):
//! - a guest's read, directory or watch succeeds only on a path it may read (its own
//!   `/local/domain/<id>` subtree, or `/local/domain/0/backend/<type>/<id>/...`); its write
//!   or rm only strictly below its own `/local/domain/<id>/`;
//! - whatever a guest asks, no node outside its own subtree changes (the whole tree is
//!   compared, as the driver domain sees it, before and after);
//! - a write that succeeded reads back, and its node is listed by its parent's directory;
//! - every fired watch event goes to a domain that may read the event's path (no node names
//!   leak through watches);
//! - a guest never holds more than `MAX_WATCHES_PER_GUEST` watches nor creates more than
//!   `MAX_NODES_PER_GUEST` nodes; pending events stay below `MAX_PENDING_EVENTS`.

#![no_main]

use std::collections::BTreeSet;

use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use pvnet_hv::store::{
    Store, XsReply, XsRequest, MAX_NODES_PER_GUEST, MAX_PENDING_EVENTS, MAX_WATCHES_PER_GUEST,
};
use pvnet_hv::DomId;

const DOMS: [DomId; 4] = [DomId::DRIVER, DomId(1), DomId(2), DomId(3)];
const WORDS: [&str; 12] = [
    "local", "domain", "0", "1", "2", "3", "backend", "vif", "device", "state", "a-b", "10",
];

fn path(u: &mut Unstructured<'_>) -> Result<String> {
    if u.ratio(1, 8)? {
        return u.arbitrary::<String>();
    }
    let mut p = String::new();
    // Most paths start where the permission rules look.
    if u.ratio(3, 4)? {
        p.push_str("/local/domain");
    }
    for _ in 0..u.int_in_range(0..=5u8)? {
        p.push('/');
        if u.ratio(1, 10)? {
            p.push_str(&u.arbitrary::<String>()?);
        } else {
            p.push_str(u.choose(&WORDS)?);
        }
    }
    if p.is_empty() {
        p.push('/');
    }
    Ok(p)
}

fn small_string(u: &mut Unstructured<'_>) -> Result<String> {
    Ok(if u.ratio(1, 4)? {
        u.arbitrary::<String>()?
    } else {
        u.choose(&["", "1", "4", "t", "x y"])?.to_string()
    })
}

fn is_under(child: &str, parent: &str) -> bool {
    child == parent
        || (child.len() > parent.len()
            && child.starts_with(parent)
            && child.as_bytes()[parent.len()] == b'/')
}

fn may_read(who: DomId, p: &str) -> bool {
    if who == DomId::DRIVER {
        return true;
    }
    let own = format!("/local/domain/{}", who.0);
    let backend = p.strip_prefix("/local/domain/0/backend/").and_then(|rest| {
        let mut c = rest.split('/');
        let (_ty, d) = (c.next()?, c.next()?);
        Some(d == who.0.to_string())
    });
    is_under(p, &own) || backend == Some(true)
}

fn may_write(who: DomId, p: &str) -> bool {
    let own = format!("/local/domain/{}", who.0);
    who == DomId::DRIVER || (p != own && is_under(p, &own))
}

/// Every node and value outside `own` (and `own` itself) into `out`, length-prefixed (values
/// may hold any character), in path order: two such buffers are equal exactly when the trees
/// agree outside `own`. Straight from [`Store::nodes`], into a buffer kept across steps.
fn outside(s: &Store, own: &str, out: &mut Vec<u8>) {
    out.clear();
    for (k, v) in s.nodes() {
        if !is_under(k, own) || k == own {
            for x in [k, v] {
                out.extend_from_slice(&x.len().to_le_bytes());
                out.extend_from_slice(x.as_bytes());
            }
        }
    }
}

/// Every node and value, as the driver domain sees them through its requests (`directory` and
/// `read`, which `Store::handle` dispatches to for `XS_DIRECTORY` and `XS_READ`).
fn dump(s: &Store) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut todo = vec!["/".to_string()];
    while let Some(dir) = todo.pop() {
        let kids = match s.directory(DomId::DRIVER, &dir) {
            Ok(k) => k,
            Err(e) => panic!("driver cannot list {dir}: {e:?}"),
        };
        for k in kids {
            let p = if dir == "/" {
                format!("/{k}")
            } else {
                format!("{dir}/{k}")
            };
            match s.read(DomId::DRIVER, &p) {
                Ok(Some(v)) => out.push((p.clone(), v)),
                other => panic!("listed node {p} does not read: {other:?}"),
            };
            todo.push(p);
        }
    }
    out.sort_unstable();
    out
}

fn run(u: &mut Unstructured<'_>, s: &mut Store) -> Result<()> {
    // The toolstack's usual layout, so guests have something to poke at.
    for d in 1..=3 {
        for (p, v) in [
            (format!("/local/domain/{d}/device/vif/0/state"), "1"),
            (format!("/local/domain/0/backend/vif/{d}/0/state"), "2"),
        ] {
            assert_eq!(
                s.handle(
                    DomId::DRIVER,
                    XsRequest::Write {
                        path: p,
                        value: v.into()
                    }
                ),
                XsReply::Ok
            );
        }
    }
    let mut watches: BTreeSet<(u16, String, String)> = BTreeSet::new();
    // (owner, token) of every watch ever registered: events may outlive their watch.
    let mut ever: BTreeSet<(u16, String)> = BTreeSet::new();
    let (mut before, mut after) = (Vec::new(), Vec::new());
    let mut steps = 0;
    while !u.is_empty() && steps < 100 {
        steps += 1;
        let who = *u.choose(&DOMS)?;
        let p = path(u)?;
        let req = match u.int_in_range(0..=7u8)? {
            0 => XsRequest::Read { path: p.clone() },
            1 | 2 => XsRequest::Write {
                path: p.clone(),
                value: small_string(u)?,
            },
            3 => XsRequest::Rm { path: p.clone() },
            4 => XsRequest::Directory { path: p.clone() },
            5 | 6 => XsRequest::Watch {
                path: p.clone(),
                token: small_string(u)?,
            },
            _ => {
                // Unwatch something registered (or anything).
                if let (true, Some(w)) = (u.arbitrary::<bool>()?, watches.iter().next()) {
                    XsRequest::Unwatch {
                        path: w.1.clone(),
                        token: w.2.clone(),
                    }
                } else {
                    XsRequest::Unwatch {
                        path: p.clone(),
                        token: small_string(u)?,
                    }
                }
            }
        };
        let own = format!("/local/domain/{}", who.0);
        if who != DomId::DRIVER {
            outside(s, &own, &mut before);
        }
        let reply = s.handle(who, req.clone());
        let ok = !matches!(reply, XsReply::Err(_));
        match &req {
            XsRequest::Read { path } | XsRequest::Directory { path } => {
                assert!(!ok || may_read(who, path), "{who:?} read {path}");
            }
            XsRequest::Watch { path, token } => {
                assert!(!ok || may_read(who, path), "{who:?} watched {path}");
                if ok {
                    assert!(
                        watches.insert((who.0, path.clone(), token.clone())),
                        "duplicate watch accepted"
                    );
                    ever.insert((who.0, token.clone()));
                }
            }
            XsRequest::Unwatch { path, token } => {
                assert_eq!(
                    ok,
                    watches.remove(&(who.0, path.clone(), token.clone())),
                    "unwatch"
                );
            }
            XsRequest::Write { path, value } => {
                assert!(!ok || may_write(who, path), "{who:?} wrote {path}");
                if ok {
                    let v = s.handle(who, XsRequest::Read { path: path.clone() });
                    assert_eq!(
                        v,
                        XsReply::Value(Some(value.clone())),
                        "write does not read back"
                    );
                    let (parent, name) = path.rsplit_once('/').unwrap();
                    let parent = if parent.is_empty() { "/" } else { parent };
                    match s.handle(
                        DomId::DRIVER,
                        XsRequest::Directory {
                            path: parent.into(),
                        },
                    ) {
                        XsReply::List(k) => {
                            assert!(k.iter().any(|k| k == name), "{path} not listed")
                        }
                        other => panic!("parent of {path}: {other:?}"),
                    }
                }
            }
            XsRequest::Rm { path } => {
                assert!(!ok || may_write(who, path), "{who:?} removed {path}");
                if ok {
                    let v = s.handle(DomId::DRIVER, XsRequest::Read { path: path.clone() });
                    assert_eq!(v, XsReply::Value(None), "rm left the node");
                }
            }
        }
        if who != DomId::DRIVER {
            // Nothing outside the guest's own subtree changed.
            outside(s, &own, &mut after);
            assert!(
                before == after,
                "{who:?} changed a node outside its subtree"
            );
        }
        for d in &DOMS[1..] {
            assert!(s.nodes_of(*d) <= MAX_NODES_PER_GUEST);
            let n = watches.iter().filter(|w| w.0 == d.0).count();
            assert!(n <= MAX_WATCHES_PER_GUEST, "{d:?} holds {n} watches");
        }
        if u.ratio(1, 3)? {
            let ev = s.take_events();
            assert!(ev.len() <= MAX_PENDING_EVENTS);
            for e in ev {
                assert!(
                    may_read(e.owner, &e.path),
                    "event for {} sent to {:?}",
                    e.path,
                    e.owner
                );
                assert!(
                    ever.contains(&(e.owner.0, e.token.clone())),
                    "event with an unknown token"
                );
            }
        }
        if u.ratio(1, 40)? {
            let d = *u.choose(&DOMS[1..])?;
            s.remove_watches_of(d);
            watches.retain(|w| w.0 != d.0);
            for e in s.take_events() {
                assert!(
                    e.owner != d,
                    "an event of a removed domain's watch remained"
                );
                assert!(may_read(e.owner, &e.path));
            }
        }
    }
    Ok(())
}

/// The tree as the driver domain walks it (every listed node reads, every node lists) is the
/// store's whole tree. Once per input, after [`run`] however it ended.
fn whole_tree(s: &Store) {
    let walked = dump(s);
    assert!(
        walked
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .eq(s.nodes()),
        "the tree walked by directory and read is not the store's"
    );
}

fuzz_target!(|data: &[u8]| {
    let mut s = Store::new();
    let _ = run(&mut Unstructured::new(data), &mut s);
    whole_tree(&s);
});
