//! A xenstore-like tree: keys, permissions, watches and the XenbusState values
//! (`xen/include/public/io/xenbus.h`, `docs/misc/xenstore.txt`).
//!
//! Nodes are `/`-separated paths holding string values; writing a node creates its missing
//! parents with empty values, removing a node removes its subtree.
//!
//! Permissions are fixed by path rather than stored per node: the driver domain
//! ([`DomId::DRIVER`]) reads and writes everything; a guest `D` writes only below
//! `/local/domain/D/`, and reads its own subtree plus its backend directories
//! `/local/domain/0/backend/<type>/D/...`. Watches need read permission on the watched path.
//! The missing parents a write creates must be writable by the caller too: a guest cannot
//! create its own `/local/domain/D` (the toolstack does), nor anything above it.
//!
//! Watches behave as in xenstored: registering fires once immediately; a watch on `P` fires for
//! a write or removal of `P` or anything below it (event path = the changed node), and for the
//! removal of an ancestor of `P` (event path = `P`). Events queue until [`Store::take_events`].
//!
//! Resources a guest can consume are bounded: nodes and watches per guest, and pending events
//! (the oldest events are dropped past the bound, counted by [`Store::dropped_events`]).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;

use serde::{Deserialize, Serialize};

use crate::DomId;

/// Longest path accepted (xenstored's `XENSTORE_ABS_PATH_MAX`).
pub const MAX_PATH_LEN: usize = 3072;
/// Longest value accepted (`XENSTORE_PAYLOAD_MAX`).
pub const MAX_VALUE_LEN: usize = 4096;
/// Longest watch token accepted.
pub const MAX_TOKEN_LEN: usize = 1024;
/// Nodes a guest may create (xenstored's default quota).
pub const MAX_NODES_PER_GUEST: usize = 1000;
/// Watches a guest may register.
pub const MAX_WATCHES_PER_GUEST: usize = 128;
/// Events held until `take_events`; older ones are dropped beyond this.
pub const MAX_PENDING_EVENTS: usize = 65536;

/// Errors of store operations.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The caller may not access that path.
    #[error("permission denied")]
    PermissionDenied,
    /// Malformed path, value or token.
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    /// The node (for `directory`) or watch (for `unwatch`) does not exist.
    #[error("not found")]
    NotFound,
    /// The same watch (path and token) is already registered.
    #[error("watch already exists")]
    Exists,
    /// The guest's node or watch quota is used up.
    #[error("quota exceeded")]
    Quota,
}

/// A fired watch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchEvent {
    /// The domain that registered the watch.
    pub owner: DomId,
    /// The node that changed (or the watched path, on registration and ancestor removal).
    pub path: String,
    /// The watch's token.
    pub token: String,
}

#[derive(Debug, Clone)]
struct Node {
    value: String,
    owner: DomId,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Watch {
    owner: DomId,
    path: String,
    token: String,
}

/// The store.
#[derive(Debug, Default)]
pub struct Store {
    nodes: BTreeMap<String, Node>,
    node_count: HashMap<DomId, usize>,
    watches: Vec<Watch>,
    events: VecDeque<WatchEvent>,
    dropped_events: u64,
}

/// `child` is `parent` or below it.
fn is_under(child: &str, parent: &str) -> bool {
    parent == "/"
        || child == parent
        || (child.len() > parent.len()
            && child.starts_with(parent)
            && child.as_bytes()[parent.len()] == b'/')
}

fn validate_path(path: &str) -> Result<(), StoreError> {
    if !path.starts_with('/') {
        return Err(StoreError::Invalid("path must be absolute"));
    }
    if path.len() > MAX_PATH_LEN {
        return Err(StoreError::Invalid("path too long"));
    }
    if path == "/" {
        return Ok(());
    }
    for c in path[1..].split('/') {
        if c.is_empty() {
            return Err(StoreError::Invalid("empty path component"));
        }
        if !c
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'@' | b'.'))
        {
            return Err(StoreError::Invalid("bad character in path"));
        }
    }
    Ok(())
}

fn validate_node_path(path: &str) -> Result<(), StoreError> {
    validate_path(path)?;
    if path == "/" {
        return Err(StoreError::Invalid("cannot modify the root"));
    }
    Ok(())
}

/// The components of `/local/domain/<who>`.
fn own_dir(who: DomId) -> String {
    format!("/local/domain/{}", who.0)
}

fn can_read(who: DomId, path: &str) -> bool {
    if who == DomId::DRIVER || is_under(path, &own_dir(who)) {
        return true;
    }
    // /local/domain/0/backend/<type>/<who>/...
    let mut c = path[1..].split('/');
    let backend_prefix = ["local", "domain", "0", "backend"];
    if !backend_prefix.iter().all(|p| c.next() == Some(p)) {
        return false;
    }
    let (Some(_ty), Some(d)) = (c.next(), c.next()) else {
        return false;
    };
    d == who.0.to_string()
}

fn can_write(who: DomId, path: &str) -> bool {
    let own = own_dir(who);
    who == DomId::DRIVER || (path != own && is_under(path, &own))
}

/// Ancestors of `path`, shortest first, excluding the root and `path` itself.
fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    path.match_indices('/')
        .skip(1)
        .map(move |(i, _)| &path[..i])
}

impl Store {
    /// An empty store.
    pub fn new() -> Store {
        Store::default()
    }

    /// Reads a node: `None` if it does not exist.
    pub fn read(&self, who: DomId, path: &str) -> Result<Option<String>, StoreError> {
        validate_path(path)?;
        if !can_read(who, path) {
            return Err(StoreError::PermissionDenied);
        }
        if path == "/" {
            return Ok(Some(String::new()));
        }
        Ok(self.nodes.get(path).map(|n| n.value.clone()))
    }

    /// Writes a node, creating missing parents with empty values.
    pub fn write(&mut self, who: DomId, path: &str, value: &str) -> Result<(), StoreError> {
        validate_node_path(path)?;
        if value.len() > MAX_VALUE_LEN {
            return Err(StoreError::Invalid("value too long"));
        }
        if !can_write(who, path) {
            return Err(StoreError::PermissionDenied);
        }
        // The missing parents are created too, so the caller must be allowed to write each of
        // them: a guest never (re)creates its own `/local/domain/D` or anything above it.
        if ancestors(path).any(|p| !self.nodes.contains_key(p) && !can_write(who, p)) {
            return Err(StoreError::PermissionDenied);
        }
        let missing = ancestors(path)
            .chain(std::iter::once(path))
            .filter(|p| !self.nodes.contains_key(*p))
            .count();
        if who != DomId::DRIVER {
            let used = self.node_count.get(&who).copied().unwrap_or(0);
            if used + missing > MAX_NODES_PER_GUEST {
                return Err(StoreError::Quota);
            }
        }
        for p in ancestors(path) {
            if !self.nodes.contains_key(p) {
                self.nodes.insert(
                    p.to_string(),
                    Node {
                        value: String::new(),
                        owner: who,
                    },
                );
            }
        }
        match self.nodes.get_mut(path) {
            Some(n) => n.value = value.to_string(),
            None => {
                self.nodes.insert(
                    path.to_string(),
                    Node {
                        value: value.to_string(),
                        owner: who,
                    },
                );
            }
        }
        *self.node_count.entry(who).or_insert(0) += missing;
        self.fire(path, false);
        Ok(())
    }

    /// Removes a node and everything below it. Removing a missing node succeeds and fires
    /// nothing.
    pub fn rm(&mut self, who: DomId, path: &str) -> Result<(), StoreError> {
        validate_node_path(path)?;
        if !can_write(who, path) {
            return Err(StoreError::PermissionDenied);
        }
        if !self.nodes.contains_key(path) {
            return Ok(());
        }
        let doomed: Vec<String> = self
            .nodes
            .range(path.to_string()..)
            .take_while(|(k, _)| k.starts_with(path))
            .filter(|(k, _)| is_under(k, path))
            .map(|(k, _)| k.clone())
            .collect();
        for k in doomed {
            if let Some(n) = self.nodes.remove(&k) {
                if let Some(c) = self.node_count.get_mut(&n.owner) {
                    *c = c.saturating_sub(1);
                }
            }
        }
        self.fire(path, true);
        Ok(())
    }

    /// Names of the children of a node.
    pub fn directory(&self, who: DomId, path: &str) -> Result<Vec<String>, StoreError> {
        validate_path(path)?;
        if !can_read(who, path) {
            return Err(StoreError::PermissionDenied);
        }
        if path != "/" && !self.nodes.contains_key(path) {
            return Err(StoreError::NotFound);
        }
        let prefix = if path == "/" {
            "/".to_string()
        } else {
            format!("{path}/")
        };
        // Children only, in path order, without walking their subtrees: the keys that start
        // with `prefix + child + "/"` are exactly those from there up to (excluding)
        // `prefix + child + "0"` ('0' follows '/'), so on meeting one the search jumps past
        // them all. Listing a node costs O(children · log n), not O(descendants): the driver
        // domain lists `/` and large subtrees, and a guest may build deep ones.
        let mut out = Vec::new();
        let mut from = (Bound::Included(prefix.clone()), Bound::Unbounded);
        while let Some((k, _)) = self.nodes.range::<String, _>(from.clone()).next() {
            let Some(rest) = k.strip_prefix(&prefix) else {
                break;
            };
            from = match rest.find('/') {
                None => {
                    out.push(rest.to_string());
                    (Bound::Excluded(k.clone()), Bound::Unbounded)
                }
                Some(i) => (
                    Bound::Included(format!("{prefix}{}0", &rest[..i])),
                    Bound::Unbounded,
                ),
            };
        }
        Ok(out)
    }

    /// Every node and its value, in path order, as the driver domain sees them (tests and
    /// fuzz targets compare whole trees with it; the root, which holds no value, is not
    /// listed).
    pub fn nodes(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.nodes
            .iter()
            .map(|(k, n)| (k.as_str(), n.value.as_str()))
    }

    /// Registers a watch; it fires once immediately.
    pub fn watch(&mut self, who: DomId, path: &str, token: &str) -> Result<(), StoreError> {
        validate_path(path)?;
        if token.len() > MAX_TOKEN_LEN {
            return Err(StoreError::Invalid("token too long"));
        }
        if !can_read(who, path) {
            return Err(StoreError::PermissionDenied);
        }
        if self
            .watches
            .iter()
            .any(|w| w.owner == who && w.path == path && w.token == token)
        {
            return Err(StoreError::Exists);
        }
        if who != DomId::DRIVER
            && self.watches.iter().filter(|w| w.owner == who).count() >= MAX_WATCHES_PER_GUEST
        {
            return Err(StoreError::Quota);
        }
        let w = Watch {
            owner: who,
            path: path.to_string(),
            token: token.to_string(),
        };
        self.push_event(WatchEvent {
            owner: who,
            path: w.path.clone(),
            token: w.token.clone(),
        });
        self.watches.push(w);
        Ok(())
    }

    /// Removes a watch registered with the same path and token.
    pub fn unwatch(&mut self, who: DomId, path: &str, token: &str) -> Result<(), StoreError> {
        let before = self.watches.len();
        self.watches
            .retain(|w| !(w.owner == who && w.path == path && w.token == token));
        if self.watches.len() == before {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }

    /// Drops every watch of a domain (it went away), and its pending events.
    pub fn remove_watches_of(&mut self, who: DomId) {
        self.watches.retain(|w| w.owner != who);
        self.events.retain(|e| e.owner != who);
    }

    /// Takes the fired events, oldest first.
    pub fn take_events(&mut self) -> Vec<WatchEvent> {
        self.events.drain(..).collect()
    }

    /// Events dropped because `MAX_PENDING_EVENTS` were pending.
    pub fn dropped_events(&self) -> u64 {
        self.dropped_events
    }

    /// Nodes currently created by `who`.
    pub fn nodes_of(&self, who: DomId) -> usize {
        self.node_count.get(&who).copied().unwrap_or(0)
    }

    fn push_event(&mut self, e: WatchEvent) {
        if self.events.len() >= MAX_PENDING_EVENTS {
            self.events.pop_front();
            self.dropped_events += 1;
        }
        self.events.push_back(e);
    }

    fn fire(&mut self, changed: &str, removed: bool) {
        let mut fired = Vec::new();
        for w in &self.watches {
            let path = if is_under(changed, &w.path) {
                changed
            } else if removed && is_under(&w.path, changed) {
                // A removed ancestor takes the watched node with it.
                &w.path
            } else {
                continue;
            };
            fired.push(WatchEvent {
                owner: w.owner,
                path: path.to_string(),
                token: w.token.clone(),
            });
        }
        for e in fired {
            self.push_event(e);
        }
    }

    /// Serves one request of a guest over the control socket.
    pub fn handle(&mut self, who: DomId, req: XsRequest) -> XsReply {
        let r = match req {
            XsRequest::Read { path } => self.read(who, &path).map(XsReply::Value),
            XsRequest::Write { path, value } => {
                self.write(who, &path, &value).map(|()| XsReply::Ok)
            }
            XsRequest::Rm { path } => self.rm(who, &path).map(|()| XsReply::Ok),
            XsRequest::Directory { path } => self.directory(who, &path).map(XsReply::List),
            XsRequest::Watch { path, token } => {
                self.watch(who, &path, &token).map(|()| XsReply::Ok)
            }
            XsRequest::Unwatch { path, token } => {
                self.unwatch(who, &path, &token).map(|()| XsReply::Ok)
            }
        };
        r.unwrap_or_else(|e| XsReply::Err(e.to_string()))
    }
}

/// A store request sent by a guest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum XsRequest {
    /// Read a node.
    Read {
        /// Node path.
        path: String,
    },
    /// Write a node.
    Write {
        /// Node path.
        path: String,
        /// New value.
        value: String,
    },
    /// Remove a subtree.
    Rm {
        /// Node path.
        path: String,
    },
    /// List children.
    Directory {
        /// Node path.
        path: String,
    },
    /// Register a watch.
    Watch {
        /// Watched path.
        path: String,
        /// Token echoed in events.
        token: String,
    },
    /// Remove a watch.
    Unwatch {
        /// Watched path.
        path: String,
        /// Token it was registered with.
        token: String,
    },
}

/// The reply to an [`XsRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum XsReply {
    /// Result of `Read`.
    Value(Option<String>),
    /// Result of `Directory`.
    List(Vec<String>),
    /// Success without data.
    Ok,
    /// Failure, with the error's text.
    Err(String),
}

/// The connection state machine of a split driver end (`enum xenbus_state`).
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum XenbusState {
    /// Not set up.
    Unknown = 0,
    /// Setting up.
    Initialising = 1,
    /// Waiting for the peer's details (backend) before finishing setup.
    InitWait = 2,
    /// Details published (frontend).
    Initialised = 3,
    /// Running.
    Connected = 4,
    /// Shutting down.
    Closing = 5,
    /// Shut down.
    Closed = 6,
    /// Reconfiguring.
    Reconfiguring = 7,
    /// Reconfigured.
    Reconfigured = 8,
}

impl XenbusState {
    /// Parses the decimal number stored in a `state` node ("4" → `Connected`). Anything else,
    /// including signs, spaces and out-of-range numbers, is `None`.
    pub fn from_str_value(s: &str) -> Option<XenbusState> {
        if s.is_empty() || s.len() > 3 || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        use XenbusState::*;
        Some(match s.parse::<u32>().ok()? {
            0 => Unknown,
            1 => Initialising,
            2 => InitWait,
            3 => Initialised,
            4 => Connected,
            5 => Closing,
            6 => Closed,
            7 => Reconfiguring,
            8 => Reconfigured,
            _ => return None,
        })
    }

    /// The value to store ("4" for `Connected`).
    pub fn as_value(self) -> String {
        (self as u8).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: DomId = DomId(5);
    const E: DomId = DomId(6);

    #[test]
    fn write_read_creates_parents() {
        let mut s = Store::new();
        s.write(DomId::DRIVER, "/local/domain/5/device/vif/0/state", "1")
            .unwrap();
        assert_eq!(
            s.read(DomId::DRIVER, "/local/domain/5/device/vif/0/state")
                .unwrap(),
            Some("1".into())
        );
        assert_eq!(
            s.read(DomId::DRIVER, "/local/domain/5/device").unwrap(),
            Some(String::new())
        );
        assert_eq!(s.read(DomId::DRIVER, "/nope").unwrap(), None);
        assert_eq!(s.directory(DomId::DRIVER, "/").unwrap(), ["local"]);
    }

    #[test]
    fn directory_lists_children_only() {
        let mut s = Store::new();
        s.write(DomId::DRIVER, "/a/b/c", "x").unwrap();
        s.write(DomId::DRIVER, "/a/d", "y").unwrap();
        s.write(DomId::DRIVER, "/ab", "z").unwrap();
        assert_eq!(s.directory(DomId::DRIVER, "/a").unwrap(), ["b", "d"]);
        assert_eq!(
            s.directory(DomId::DRIVER, "/a/b/c").unwrap(),
            Vec::<String>::new()
        );
        assert_eq!(s.directory(DomId::DRIVER, "/x"), Err(StoreError::NotFound));
    }

    #[test]
    fn directory_lists_children_around_names_that_sort_near_the_separator() {
        // '-' and '.' sort before '/', '0' right after it: the children's subtrees interleave
        // with their siblings in path order.
        let mut s = Store::new();
        for p in [
            "/p/a/x/y", "/p/a-b/x", "/p/a.b", "/p/a0/z", "/p/b", "/p/a/-", "/p/a/0", "/pa", "/p-q",
        ] {
            s.write(DomId::DRIVER, p, "v").unwrap();
        }
        assert_eq!(
            s.directory(DomId::DRIVER, "/p").unwrap(),
            ["a", "a-b", "a.b", "a0", "b"]
        );
        assert_eq!(s.directory(DomId::DRIVER, "/p/a").unwrap(), ["-", "0", "x"]);
        assert_eq!(s.directory(DomId::DRIVER, "/").unwrap(), ["p", "p-q", "pa"]);
    }

    /// Children by brute force: every node whose parent is `path`.
    fn children_naive(s: &Store, path: &str) -> Vec<String> {
        let prefix = if path == "/" {
            "/".to_string()
        } else {
            format!("{path}/")
        };
        s.nodes()
            .filter_map(|(k, _)| k.strip_prefix(&prefix))
            .filter(|rest| !rest.contains('/'))
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn directory_of_every_node_matches_brute_force() {
        // A few hundred nodes from a fixed pseudo-random walk over a small alphabet (names
        // that share prefixes and sort around '/').
        let mut s = Store::new();
        let names = ["a", "a-", "a.", "a0", "ab", "b", "-", "0", "a/a"];
        let mut x: u32 = 12345;
        let mut next = |n: usize| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            (x >> 16) as usize % n
        };
        for _ in 0..300 {
            let mut p = String::new();
            for _ in 0..=next(5) {
                p.push('/');
                p.push_str(names[next(names.len())]);
            }
            s.write(DomId::DRIVER, &p, "v").unwrap();
        }
        let all: Vec<String> = s.nodes().map(|(k, _)| k.to_string()).collect();
        assert!(all.len() > 100, "{} nodes", all.len());
        for p in std::iter::once("/".to_string()).chain(all) {
            assert_eq!(
                s.directory(DomId::DRIVER, &p).unwrap(),
                children_naive(&s, &p),
                "{p}"
            );
        }
    }

    #[test]
    fn nodes_lists_every_node_and_value_in_path_order() {
        let mut s = Store::new();
        s.write(DomId::DRIVER, "/a/b", "x").unwrap();
        s.write(DomId::DRIVER, "/a-c", "y").unwrap();
        s.write(DomId(1), "/a/b", "z").unwrap_err();
        assert_eq!(
            s.nodes().collect::<Vec<_>>(),
            [("/a", ""), ("/a-c", "y"), ("/a/b", "x")]
        );
        s.rm(DomId::DRIVER, "/a").unwrap();
        assert_eq!(s.nodes().collect::<Vec<_>>(), [("/a-c", "y")]);
    }

    #[test]
    fn rm_is_recursive_and_exact() {
        let mut s = Store::new();
        s.write(DomId::DRIVER, "/a/b/c", "x").unwrap();
        s.write(DomId::DRIVER, "/a/bc", "y").unwrap();
        s.rm(DomId::DRIVER, "/a/b").unwrap();
        assert_eq!(s.read(DomId::DRIVER, "/a/b/c").unwrap(), None);
        assert_eq!(s.read(DomId::DRIVER, "/a/b").unwrap(), None);
        assert_eq!(s.read(DomId::DRIVER, "/a/bc").unwrap(), Some("y".into()));
        s.rm(DomId::DRIVER, "/a/b").unwrap(); // missing: fine
    }

    #[test]
    fn invalid_paths_and_values() {
        let mut s = Store::new();
        let w = DomId::DRIVER;
        assert!(matches!(
            s.write(w, "a/b", "x"),
            Err(StoreError::Invalid(_))
        ));
        assert!(matches!(
            s.write(w, "/a//b", "x"),
            Err(StoreError::Invalid(_))
        ));
        assert!(matches!(
            s.write(w, "/a/", "x"),
            Err(StoreError::Invalid(_))
        ));
        assert!(matches!(s.write(w, "/", "x"), Err(StoreError::Invalid(_))));
        assert!(matches!(
            s.write(w, "/a b", "x"),
            Err(StoreError::Invalid(_))
        ));
        let long = format!("/{}", "a".repeat(MAX_PATH_LEN));
        assert!(matches!(s.read(w, &long), Err(StoreError::Invalid(_))));
        let big = "v".repeat(MAX_VALUE_LEN + 1);
        assert!(matches!(
            s.write(w, "/a", &big),
            Err(StoreError::Invalid(_))
        ));
        s.write(w, "/a", &big[1..]).unwrap();
    }

    #[test]
    fn guest_writes_only_own_subtree() {
        let mut s = Store::new();
        s.write(DomId::DRIVER, "/local/domain/5", "").unwrap();
        s.write(D, "/local/domain/5/device/vif/0/state", "1")
            .unwrap();
        assert_eq!(
            s.write(D, "/local/domain/6/x", "1"),
            Err(StoreError::PermissionDenied)
        );
        assert_eq!(
            s.write(D, "/local/domain/5", "1"),
            Err(StoreError::PermissionDenied)
        );
        assert_eq!(
            s.write(D, "/local/domain/0/backend/vif/5/0/state", "4"),
            Err(StoreError::PermissionDenied)
        );
        assert_eq!(
            s.write(D, "/local/domain/55/x", "1"),
            Err(StoreError::PermissionDenied)
        );
        assert_eq!(s.rm(D, "/local"), Err(StoreError::PermissionDenied));
        s.rm(D, "/local/domain/5/device").unwrap();
    }

    #[test]
    fn guest_reads_own_and_backend_dirs_only() {
        let mut s = Store::new();
        s.write(DomId::DRIVER, "/local/domain/0/backend/vif/5/0/state", "2")
            .unwrap();
        s.write(DomId::DRIVER, "/local/domain/0/backend/vif/6/0/state", "2")
            .unwrap();
        s.write(DomId::DRIVER, "/local/domain/6/secret", "x")
            .unwrap();
        assert_eq!(
            s.read(D, "/local/domain/0/backend/vif/5/0/state").unwrap(),
            Some("2".into())
        );
        assert_eq!(
            s.read(D, "/local/domain/0/backend/vif/6/0/state"),
            Err(StoreError::PermissionDenied)
        );
        assert_eq!(
            s.read(D, "/local/domain/6/secret"),
            Err(StoreError::PermissionDenied)
        );
        assert_eq!(
            s.read(D, "/local/domain/0/backend/vif"),
            Err(StoreError::PermissionDenied)
        );
        assert_eq!(s.directory(D, "/"), Err(StoreError::PermissionDenied));
        assert_eq!(s.read(D, "/local/domain/5").unwrap(), None);
        assert_eq!(
            s.read(E, "/local/domain/6/secret").unwrap(),
            Some("x".into())
        );
    }

    /// Found by the `xenstore` fuzz target: after the toolstack removed a guest's directory
    /// (or everything above it), a write below it recreated `/local`, `/local/domain` and
    /// `/local/domain/D` as the guest's nodes.
    #[test]
    fn guest_cannot_create_its_home_or_above() {
        let mut s = Store::new();
        s.write(DomId::DRIVER, "/local/domain/5/device/vif/0/state", "1")
            .unwrap();
        // Missing parents below its home are the guest's to create.
        s.write(D, "/local/domain/5/data/a/b", "x").unwrap();
        assert_eq!(s.nodes_of(D), 3);
        for gone in ["/local/domain/5", "/local/domain", "/local"] {
            s.rm(DomId::DRIVER, gone).unwrap();
            assert_eq!(
                s.write(D, "/local/domain/5/device/vif/0/state", "4"),
                Err(StoreError::PermissionDenied)
            );
            assert_eq!(s.read(DomId::DRIVER, gone).unwrap(), None);
            assert_eq!(s.nodes_of(D), 0);
        }
        assert_eq!(
            s.directory(DomId::DRIVER, "/").unwrap(),
            Vec::<String>::new()
        );
    }

    #[test]
    fn guest_node_quota() {
        let mut s = Store::new();
        s.write(DomId::DRIVER, "/local/domain/5", "").unwrap();
        for i in 0..MAX_NODES_PER_GUEST {
            s.write(D, &format!("/local/domain/5/n{i}"), "").unwrap();
        }
        assert_eq!(s.nodes_of(D), MAX_NODES_PER_GUEST);
        assert_eq!(
            s.write(D, "/local/domain/5/more", ""),
            Err(StoreError::Quota)
        );
        s.write(D, "/local/domain/5/n0", "overwrite ok").unwrap();
        s.rm(D, "/local/domain/5/n1").unwrap();
        s.write(D, "/local/domain/5/more", "").unwrap();
    }

    #[test]
    fn watch_fires_on_registration() {
        let mut s = Store::new();
        s.watch(D, "/local/domain/5/device", "tok").unwrap();
        assert_eq!(
            s.take_events(),
            [WatchEvent {
                owner: D,
                path: "/local/domain/5/device".into(),
                token: "tok".into()
            }]
        );
        assert!(s.take_events().is_empty());
    }

    #[test]
    fn watch_fires_on_self_and_children_not_unrelated() {
        let mut s = Store::new();
        s.watch(DomId::DRIVER, "/a/b", "t").unwrap();
        s.take_events();
        s.write(DomId::DRIVER, "/a/b", "1").unwrap();
        s.write(DomId::DRIVER, "/a/b/c/d", "2").unwrap();
        s.write(DomId::DRIVER, "/a/bc", "3").unwrap();
        s.write(DomId::DRIVER, "/a", "4").unwrap();
        s.write(DomId::DRIVER, "/x", "5").unwrap();
        let paths: Vec<String> = s.take_events().into_iter().map(|e| e.path).collect();
        assert_eq!(paths, ["/a/b", "/a/b/c/d"]);
    }

    #[test]
    fn watch_fires_on_removal_of_node_and_ancestor() {
        let mut s = Store::new();
        s.write(DomId::DRIVER, "/a/b/c", "1").unwrap();
        s.watch(DomId::DRIVER, "/a/b", "t").unwrap();
        s.take_events();
        s.rm(DomId::DRIVER, "/a/b/c").unwrap();
        s.rm(DomId::DRIVER, "/a").unwrap();
        let paths: Vec<String> = s.take_events().into_iter().map(|e| e.path).collect();
        assert_eq!(paths, ["/a/b/c", "/a/b"]);
    }

    #[test]
    fn watch_permissions_duplicates_and_unwatch() {
        let mut s = Store::new();
        assert_eq!(
            s.watch(D, "/local/domain/6", "t"),
            Err(StoreError::PermissionDenied)
        );
        s.watch(D, "/local/domain/0/backend/vif/5", "t").unwrap();
        assert_eq!(
            s.watch(D, "/local/domain/0/backend/vif/5", "t"),
            Err(StoreError::Exists)
        );
        s.take_events();
        s.write(DomId::DRIVER, "/local/domain/0/backend/vif/5/0/state", "4")
            .unwrap();
        assert_eq!(s.take_events().len(), 1);
        s.unwatch(D, "/local/domain/0/backend/vif/5", "t").unwrap();
        assert_eq!(
            s.unwatch(D, "/local/domain/0/backend/vif/5", "t"),
            Err(StoreError::NotFound)
        );
        s.write(DomId::DRIVER, "/local/domain/0/backend/vif/5/0/state", "5")
            .unwrap();
        assert!(s.take_events().is_empty());
    }

    #[test]
    fn remove_watches_of_domain() {
        let mut s = Store::new();
        s.write(DomId::DRIVER, "/local/domain/5", "").unwrap();
        s.watch(D, "/local/domain/5", "t").unwrap();
        s.watch(DomId::DRIVER, "/local/domain/5", "u").unwrap();
        s.remove_watches_of(D);
        let ev = s.take_events();
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].owner, DomId::DRIVER);
        s.write(D, "/local/domain/5/x", "1").unwrap();
        let ev = s.take_events();
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].token, "u");
    }

    #[test]
    fn guest_watch_quota() {
        let mut s = Store::new();
        for i in 0..MAX_WATCHES_PER_GUEST {
            s.watch(D, "/local/domain/5", &i.to_string()).unwrap();
        }
        assert_eq!(s.watch(D, "/local/domain/5", "x"), Err(StoreError::Quota));
    }

    #[test]
    fn pending_events_are_bounded() {
        let mut s = Store::new();
        s.watch(DomId::DRIVER, "/a", "t").unwrap();
        for _ in 0..MAX_PENDING_EVENTS {
            s.write(DomId::DRIVER, "/a", "x").unwrap();
        }
        assert_eq!(s.dropped_events(), 1);
        assert_eq!(s.take_events().len(), MAX_PENDING_EVENTS);
    }

    #[test]
    fn xenbus_state_values() {
        assert_eq!(
            XenbusState::from_str_value("4"),
            Some(XenbusState::Connected)
        );
        assert_eq!(XenbusState::from_str_value("0"), Some(XenbusState::Unknown));
        assert_eq!(
            XenbusState::from_str_value("8"),
            Some(XenbusState::Reconfigured)
        );
        for bad in ["", "9", "-1", "+4", " 4", "4 ", "x", "0004"] {
            assert_eq!(XenbusState::from_str_value(bad), None, "{bad:?}");
        }
        assert_eq!(XenbusState::InitWait.as_value(), "2");
        for v in 0..=8 {
            let st = XenbusState::from_str_value(&v.to_string()).unwrap();
            assert_eq!(st.as_value(), v.to_string());
        }
    }

    #[test]
    fn handle_requests() {
        let mut s = Store::new();
        s.write(DomId::DRIVER, "/local/domain/5", "").unwrap();
        let r = s.handle(
            D,
            XsRequest::Write {
                path: "/local/domain/5/a".into(),
                value: "v".into(),
            },
        );
        assert_eq!(r, XsReply::Ok);
        assert_eq!(
            s.handle(
                D,
                XsRequest::Read {
                    path: "/local/domain/5/a".into()
                }
            ),
            XsReply::Value(Some("v".into()))
        );
        assert_eq!(
            s.handle(
                D,
                XsRequest::Directory {
                    path: "/local/domain/5".into()
                }
            ),
            XsReply::List(vec!["a".into()])
        );
        assert_eq!(
            s.handle(
                D,
                XsRequest::Watch {
                    path: "/local/domain/5".into(),
                    token: "t".into()
                }
            ),
            XsReply::Ok
        );
        assert_eq!(
            s.handle(
                D,
                XsRequest::Unwatch {
                    path: "/local/domain/5".into(),
                    token: "t".into()
                }
            ),
            XsReply::Ok
        );
        assert_eq!(
            s.handle(
                D,
                XsRequest::Rm {
                    path: "/local/domain/5/a".into()
                }
            ),
            XsReply::Ok
        );
        assert_eq!(
            s.handle(
                D,
                XsRequest::Read {
                    path: "/local/domain/6".into()
                }
            ),
            XsReply::Err("permission denied".into())
        );
        // JSON round trip, as sent over the control socket.
        let req = XsRequest::Write {
            path: "/p".into(),
            value: "v".into(),
        };
        let j = serde_json::to_string(&req).unwrap();
        assert_eq!(serde_json::from_str::<XsRequest>(&j).unwrap(), req);
    }
}
