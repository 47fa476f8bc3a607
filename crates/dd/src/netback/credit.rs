//! A vif's transmit rate: Xen netback's credit scheduler (`rate=RATE/s@INTERVAL` in a vif's
//! xl configuration, the backend's xenstore key `rate` = `BYTES,USEC`). The guest may send
//! [`TxRate::bytes`] every [`TxRate::usec`] microseconds; what it posts beyond that stays on
//! its TX ring until the next window, so its frontend, and the guest's stack above it, hold
//! their packets back: the limit drops nothing.
//!
//! Netback checks the credit where a packet starts ([`Credit::allows`]) and charges the
//! packet's whole size once its first slot is read ([`Credit::charge`]). Linux netback instead
//! looks at the first slot before taking it, and leaves a packet larger than the credit left on
//! the ring; here the slot is copied out of the ring once, and a packet may overdraw the credit,
//! the overdraft repaid from the next window. Over any run of whole windows the guest sends at
//! most its rate, plus one packet. As in Linux, the credit never piles up beyond one window's,
//! or 128 KiB when a window's is smaller, so that a packet of 64 KiB always goes through
//! ([`MIN_BURST`]).

use serde::{Deserialize, Serialize};

/// The least credit a window may pile up to, whatever the rate: Linux netback's, so that a
/// 64 KiB GSO packet goes through at any rate.
pub const MIN_BURST: u64 = 131_072;

/// xl's default window, 50 ms.
pub const DEFAULT_WINDOW_USEC: u64 = 50_000;

/// The longest window accepted, one second: beyond it a limited guest's TCP retransmits in
/// the gaps.
pub const MAX_WINDOW_USEC: u64 = 1_000_000;

/// The shortest window accepted, 1 ms: the daemon's wait is counted in whole milliseconds, so
/// a guest at a shorter window's rate would be woken late for every window (1 Gbit/s at 200 µs
/// made 0.43 of it; at 1 ms, 0.98: docs/vif-rate.md).
pub const MIN_WINDOW_USEC: u64 = 1000;

/// A transmit rate: `bytes` every `usec` microseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxRate {
    pub bytes: u64,
    pub usec: u64,
}

/// Why a rate was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum RateError {
    #[error(
        "expected RATE[/s][@INTERVAL] as in xl's `rate=`: a number with a unit (B, KB, MB, GB \
         for bytes; b, Kb, Mb, Gb for bits; decimal), per second, and a window in us or ms \
         (default 50ms), e.g. 100Mb/s@20ms; got {0:?}"
    )]
    Syntax(String),
    #[error("the rate must be at least one byte per window; got {0:?}")]
    Zero(String),
    #[error("the window must be from 1ms to 1000ms; got {0:?}")]
    Window(String),
    #[error("the xenstore key `rate` must be BYTES,USEC; got {0:?}")]
    Key(String),
}

impl TxRate {
    /// Parses xl's syntax: `RATE[/s][@INTERVAL]`. RATE is a number with a unit, `B`, `KB`,
    /// `MB`, `GB` (bytes) or `b`, `Kb`, `Mb`, `Gb` (bits), in powers of 1000 as xl's; the
    /// window INTERVAL is a number with `us` or `ms`, 50 ms when left out.
    pub fn parse(s: &str) -> Result<TxRate, RateError> {
        let bad = || RateError::Syntax(s.to_string());
        let (rate, window) = match s.split_once('@') {
            Some((r, w)) => (r, Some(w)),
            None => (s, None),
        };
        let rate = rate.strip_suffix("/s").unwrap_or(rate);
        let split = rate
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let (num, unit) = rate.split_at(split);
        let num: f64 = num.parse().map_err(|_| bad())?;
        let bits_per_unit = match unit {
            "B" => 8.0,
            "KB" | "kB" => 8e3,
            "MB" => 8e6,
            "GB" => 8e9,
            "b" => 1.0,
            "Kb" | "kb" => 1e3,
            "Mb" => 1e6,
            "Gb" => 1e9,
            _ => return Err(bad()),
        };
        let usec = match window {
            None => DEFAULT_WINDOW_USEC,
            Some(w) => {
                let (n, scale) = if let Some(n) = w.strip_suffix("ms") {
                    (n, 1000.0)
                } else if let Some(n) = w.strip_suffix("us") {
                    (n, 1.0)
                } else {
                    return Err(bad());
                };
                let n: f64 = n.parse().map_err(|_| bad())?;
                let usec = n * scale;
                if !usec.is_finite()
                    || !(MIN_WINDOW_USEC as f64..=MAX_WINDOW_USEC as f64).contains(&usec)
                {
                    return Err(RateError::Window(s.to_string()));
                }
                usec.round() as u64
            }
        };
        let bytes_per_sec = num * bits_per_unit / 8.0;
        if !bytes_per_sec.is_finite() {
            return Err(bad());
        }
        let bytes = (bytes_per_sec * usec as f64 / 1e6).floor();
        if bytes < 1.0 {
            return Err(RateError::Zero(s.to_string()));
        }
        Ok(TxRate {
            bytes: bytes.min(u32::MAX as f64 * 1e3) as u64,
            usec,
        })
    }

    /// The value of the backend's xenstore key `rate`: `BYTES,USEC`.
    pub fn to_key(&self) -> String {
        format!("{},{}", self.bytes, self.usec)
    }

    /// Reads the backend's xenstore key `rate` (`BYTES,USEC`).
    pub fn from_key(v: &str) -> Result<TxRate, RateError> {
        let bad = || RateError::Key(v.to_string());
        let (b, u) = v.split_once(',').ok_or_else(bad)?;
        let bytes: u64 = b.trim().parse().map_err(|_| bad())?;
        let usec: u64 = u.trim().parse().map_err(|_| bad())?;
        if bytes == 0 || !(MIN_WINDOW_USEC..=MAX_WINDOW_USEC).contains(&usec) {
            return Err(bad());
        }
        Ok(TxRate { bytes, usec })
    }

    /// Bits a second.
    pub fn bits_per_sec(&self) -> f64 {
        self.bytes as f64 * 8.0 * 1e6 / self.usec as f64
    }

    fn window_ns(&self) -> u64 {
        self.usec * 1000
    }

    fn max_burst(&self) -> i64 {
        self.bytes.max(MIN_BURST).min(i64::MAX as u64) as i64
    }
}

/// As `stat` and `set` print a rate: `100 Mbit/s @ 20 ms`.
impl std::fmt::Display for TxRate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bits = self.bits_per_sec();
        let (v, unit) = if bits >= 1e9 {
            (bits / 1e9, "Gbit/s")
        } else if bits >= 1e6 {
            (bits / 1e6, "Mbit/s")
        } else if bits >= 1e3 {
            (bits / 1e3, "kbit/s")
        } else {
            (bits, "bit/s")
        };
        let v = (v * 1000.0).round() / 1000.0;
        if self.usec.is_multiple_of(1000) {
            write!(f, "{v} {unit} @ {} ms", self.usec / 1000)
        } else {
            write!(f, "{v} {unit} @ {} us", self.usec)
        }
    }
}

/// A vif's credit: what is left of the current window, and when the window started.
#[derive(Clone, Debug)]
pub struct Credit {
    rate: TxRate,
    /// Bytes the guest may still start sending in this window; below zero after a packet
    /// overdrew it.
    remaining: i64,
    window_start: u64,
    /// The last check found no credit: the next window starts exactly when this one ends (the
    /// daemon's timer may wake a little later), so that the rate does not drift down.
    blocked: bool,
}

impl Credit {
    /// A credit that fills at the first check.
    pub fn new(rate: TxRate) -> Credit {
        Credit {
            rate,
            remaining: 0,
            window_start: 0,
            blocked: false,
        }
    }

    pub fn rate(&self) -> TxRate {
        self.rate
    }

    /// Whether a packet may start at `now_ns`: starts a new window first when the current one
    /// is over.
    pub fn allows(&mut self, now_ns: u64) -> bool {
        let next = self.next_window();
        if now_ns >= next || self.window_start == 0 {
            // A guest that waited for this window starts it where the last one ended, so
            // that the daemon's wake a little late does not slow it down; one that was idle,
            // or that the daemon woke more than a window late, starts it now. Either way the
            // window ends after `now_ns`.
            let on_time = self.blocked
                && self.window_start != 0
                && now_ns < next.saturating_add(self.rate.window_ns());
            self.window_start = if on_time { next } else { now_ns.max(1) };
            self.remaining =
                (self.remaining.saturating_add(self.rate.bytes as i64)).min(self.rate.max_burst());
        }
        self.blocked = self.remaining <= 0;
        !self.blocked
    }

    /// Charges a packet of `bytes`.
    pub fn charge(&mut self, bytes: usize) {
        self.remaining = self.remaining.saturating_sub(bytes as i64);
    }

    /// When the current window ends (ns, the clock [`Credit::allows`] is given).
    pub fn next_window(&self) -> u64 {
        self.window_start.saturating_add(self.rate.window_ns())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_xl_syntax() {
        let r = TxRate::parse("100Mb/s@20ms").unwrap();
        assert_eq!(
            r,
            TxRate {
                bytes: 250_000,
                usec: 20_000
            }
        );
        assert_eq!(r.to_key(), "250000,20000");
        assert_eq!(r.bits_per_sec(), 100e6);
        // xl's default window, and bytes.
        assert_eq!(
            TxRate::parse("10MB/s").unwrap(),
            TxRate {
                bytes: 500_000,
                usec: 50_000
            }
        );
        assert_eq!(
            TxRate::parse("1Gb@1500us").unwrap(),
            TxRate {
                bytes: 187_500,
                usec: 1500
            }
        );
        assert_eq!(TxRate::parse("2.5Kb/s@1000ms").unwrap().bytes, 312);
    }

    #[test]
    fn refuses_what_xl_would_not_take() {
        for s in [
            "",
            "100",
            "Mb/s",
            "100Mbit/s",
            "100Mb/s@20",
            "100Mb/s@20s",
            "-5Mb/s",
            "1..2Mb",
        ] {
            assert!(matches!(TxRate::parse(s), Err(RateError::Syntax(_))), "{s}");
        }
        assert!(matches!(TxRate::parse("1b/s"), Err(RateError::Zero(_))));
        assert!(matches!(
            TxRate::parse("1Gb/s@500us"),
            Err(RateError::Window(_))
        ));
        assert!(matches!(
            TxRate::parse("1Gb/s@2000ms"),
            Err(RateError::Window(_))
        ));
    }

    #[test]
    fn key_round_trips_and_refuses_garbage() {
        let r = TxRate {
            bytes: 4096,
            usec: 1000,
        };
        assert_eq!(TxRate::from_key(&r.to_key()).unwrap(), r);
        for v in [
            "",
            "1",
            "0,1000",
            "5,0",
            "5,999",
            "x,1000",
            "5,1000,7",
            "5,2000000",
        ] {
            assert!(TxRate::from_key(v).is_err(), "{v}");
        }
    }

    /// A guest that always has packets: over whole windows it sends its rate, plus at most one
    /// packet; and the window does not drift when the daemon wakes late.
    #[test]
    fn sends_the_rate_over_whole_windows() {
        let rate = TxRate {
            bytes: 150_000,
            usec: 1000,
        };
        let mut c = Credit::new(rate);
        let (mut t, mut sent, pkt) = (1_000_000u64, 0u64, 1514usize);
        let end = t + 100 * 1_000_000; // 100 windows of 1 ms
        while t < end {
            while c.allows(t) {
                c.charge(pkt);
                sent += pkt as u64;
            }
            // The daemon wakes 30 µs after the window's end.
            t = c.next_window() + 30_000;
        }
        let windows = 100;
        assert!(sent >= rate.bytes * (windows - 1), "{sent}");
        assert!(sent <= rate.bytes * (windows + 1) + pkt as u64, "{sent}");
    }

    /// A wake more than a window late starts the window at the wake: one window's credit, and
    /// the next window ends after the wake (no burst of missed windows, no wait in the past).
    #[test]
    fn a_very_late_wake_starts_the_window_then() {
        let mut c = Credit::new(TxRate {
            bytes: 1000,
            usec: 1000,
        });
        assert!(c.allows(1_000_000));
        c.charge(5000);
        assert!(!c.allows(1_000_001));
        let late = c.next_window() + 10_000_000;
        assert!(!c.allows(late), "still in debt after one window's credit");
        assert!(c.next_window() > late);
        assert_eq!(c.next_window(), late + 1_000_000);
    }

    /// Credit does not pile up while the guest is quiet: after a long pause it may send what
    /// was left plus one window's; a packet larger than a window's credit overdraws it and
    /// holds the guest until the windows after it have repaid it.
    #[test]
    fn idle_credit_is_capped_and_overdrafts_are_repaid() {
        let mut c = Credit::new(TxRate {
            bytes: 1000,
            usec: 1000,
        });
        assert!(c.allows(5_000_000));
        c.charge(100);
        let t = 900_000_000;
        let mut sent = 0;
        while c.allows(t) {
            c.charge(100);
            sent += 100;
        }
        assert_eq!(sent, 1900);
        assert!(!c.allows(t + 10_000));
        // A 64 KiB packet at the next window: 65 windows to repay it.
        let mut w = c.next_window();
        assert!(c.allows(w));
        c.charge(65_536);
        let mut held = 0;
        loop {
            w = c.next_window();
            if c.allows(w) {
                break;
            }
            held += 1;
        }
        assert_eq!(held, 64);
    }

    /// The cap: a large window's credit piles up to itself, never beyond, and a small one's
    /// to [`MIN_BURST`] at most.
    #[test]
    fn burst_is_bounded() {
        let mut c = Credit::new(TxRate {
            bytes: 100_000,
            usec: 1000,
        });
        assert!(c.allows(1_000_000));
        assert!(c.allows(50_000_000));
        assert_eq!(c.remaining, 131_072);
        let mut c = Credit::new(TxRate {
            bytes: 500_000,
            usec: 1000,
        });
        assert!(c.allows(1_000_000));
        assert!(c.allows(50_000_000));
        assert_eq!(c.remaining, 500_000);
    }
}
