//! Physical time, injectable: the node reads the wall clock only through
//! [`WallClock`], so tests can run a node whose clock jumps backwards.

use std::time::{SystemTime, UNIX_EPOCH};

/// A source of physical time in Unix milliseconds.
pub trait WallClock: Send + Sync {
    fn now_ms(&self) -> u64;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl WallClock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// A fixed clock, for tests.
#[derive(Debug, Clone, Copy)]
pub struct FixedClock(pub u64);

impl WallClock for FixedClock {
    fn now_ms(&self) -> u64 {
        self.0
    }
}

/// A Unix time in ms as RFC 3339 with milliseconds (`2026-03-01T09:30:00.000Z`):
/// the one formatter of times amos shows or writes. Never fails: RFC 3339
/// has four-digit years, so a time past [`amos_protocol::MAX_TIME_MS`]
/// (which no valid fact carries, but a store written before that rule
/// may hold) is shown as that bound, `9999-12-31T23:59:59.999Z`.
pub fn rfc3339(ms: u64) -> String {
    let t = std::time::UNIX_EPOCH
        + std::time::Duration::from_millis(ms.min(amos_protocol::MAX_TIME_MS));
    humantime::format_rfc3339_millis(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use amos_protocol::MAX_TIME_MS;
    use proptest::prelude::*;

    #[test]
    fn the_bound_and_beyond_show_as_the_bound() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(MAX_TIME_MS), "9999-12-31T23:59:59.999Z");
        assert_eq!(rfc3339(MAX_TIME_MS + 1), "9999-12-31T23:59:59.999Z");
        assert_eq!(rfc3339(u64::MAX), "9999-12-31T23:59:59.999Z");
    }

    proptest! {
        /// Any u64 formats; one within the bound reads back as itself.
        #[test]
        fn rfc3339_never_panics_and_round_trips(ms in any::<u64>(), small in 0..=MAX_TIME_MS) {
            let _ = rfc3339(ms);
            let s = rfc3339(small);
            let back = humantime::parse_rfc3339(&s).unwrap();
            prop_assert_eq!(back.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64, small);
        }
    }
}
