//! Short unique identifiers for one testbed run.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Number of hex digits in a run id.
pub const RUN_ID_LEN: usize = 6;

/// Linux limit on interface names (IFNAMSIZ - 1).
pub const MAX_IFNAME_LEN: usize = 15;

/// A short unique id (6 lowercase hex digits) naming one run's namespaces and links.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RunId(String);

static COUNTER: AtomicU64 = AtomicU64::new(0);

impl RunId {
    /// A fresh id mixed from the pid, the time, a process-wide counter and the random keys
    /// of std's `RandomState`.
    pub fn new() -> RunId {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let mut h = RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.write_u128(nanos);
        h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        let v = h.finish();
        let v = (v ^ (v >> 24) ^ (v >> 48)) & 0xff_ffff;
        RunId(format!("{v:06x}"))
    }

    /// Parses an existing id (e.g. given to `pvnet down`): 1 to 6 lowercase hex digits.
    pub fn parse(s: &str) -> crate::Result<RunId> {
        if s.is_empty()
            || s.len() > RUN_ID_LEN
            || !s
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            anyhow::bail!("invalid run id {s:?}: expected 1 to {RUN_ID_LEN} lowercase hex digits");
        }
        Ok(RunId(s.to_string()))
    }

    /// The id itself.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name of this run's namespace for `role`: `pvnet-{id}-{role}`.
    pub fn ns_name(&self, role: &str) -> String {
        format!("pvnet-{}-{role}", self.0)
    }

    /// A link name for this run: `pv{id}{suffix}`. Panics if the result would exceed the
    /// kernel's 15-character limit (suffix longer than 7 characters).
    pub fn short_link_name(&self, suffix: &str) -> String {
        let name = format!("pv{}{suffix}", self.0);
        assert!(
            name.len() <= MAX_IFNAME_LEN,
            "link name {name:?} longer than {MAX_IFNAME_LEN} characters"
        );
        name
    }
}

impl Default for RunId {
    fn default() -> Self {
        RunId::new()
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_and_uniqueness() {
        let ids: Vec<RunId> = (0..64).map(|_| RunId::new()).collect();
        for id in &ids {
            assert_eq!(id.as_str().len(), 6);
            assert!(id
                .as_str()
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
            assert_eq!(id.ns_name("dd"), format!("pvnet-{id}-dd"));
            let l = id.short_link_name("r");
            assert_eq!(l, format!("pv{id}r"));
            assert!(id.short_link_name("1234567").len() <= 15);
        }
        let mut s: Vec<&str> = ids.iter().map(|i| i.as_str()).collect();
        s.sort();
        s.dedup();
        assert!(s.len() >= 62, "too many collisions");
    }

    #[test]
    fn parse() {
        assert!(RunId::parse("0a1b2c").is_ok());
        assert!(RunId::parse("").is_err());
        assert!(RunId::parse("0A1B2C").is_err());
        assert!(RunId::parse("1234567").is_err());
        assert!(RunId::parse("../x").is_err());
    }

    #[test]
    #[should_panic]
    fn long_link_name_panics() {
        RunId::new().short_link_name("12345678");
    }
}
