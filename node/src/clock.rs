//! Time on the node's edges: physical time, injectable (the node reads the
//! wall clock only through [`WallClock`], so tests can run a node whose
//! clock jumps backwards); a time as a user writes it ([`parse_time`],
//! [`parse_expiry`]: every front end's one parser), and as amos shows it
//! ([`rfc3339`], which never fails). Both keep the protocol's bound,
//! [`amos_protocol::MAX_TIME_MS`].

use std::time::{SystemTime, UNIX_EPOCH};

use amos_protocol::MAX_TIME_MS;

use crate::error::{NodeError, Result};

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

/// A point in time as a user writes it: an RFC 3339 time or date
/// (`2026-03-01`, `2026-03-01T09:30:00Z`), `now`, or an offset from `now_ms`
/// (`-7d`, `+12h`; a bare duration such as `7d` counts back). A time past
/// [`MAX_TIME_MS`] is refused (docs/design.md §4).
pub fn parse_time(s: &str, now_ms: u64) -> Result<u64> {
    within_bound(parse_time_unbounded(s, now_ms)?, "time", s)
}

/// [`parse_time`] without the bound: only a malformed time is an error.
pub(crate) fn parse_time_unbounded(s: &str, now_ms: u64) -> Result<u64> {
    let s = s.trim();
    if s == "now" {
        return Ok(now_ms);
    }
    let (sign, rest) = match s.as_bytes().first() {
        Some(b'+') => (1i8, &s[1..]),
        Some(b'-') => (-1, &s[1..]),
        _ => (-1, s),
    };
    if let Ok(d) = humantime::parse_duration(rest.trim()) {
        let d = duration_ms(d);
        return Ok(if sign > 0 {
            now_ms.saturating_add(d)
        } else {
            now_ms.saturating_sub(d)
        });
    }
    let t = humantime::parse_rfc3339_weak(s)
        .or_else(|_| humantime::parse_rfc3339_weak(&format!("{s} 00:00:00")))
        .map_err(|_| {
            NodeError::BadInput(format!(
                "malformed time {s:?}: use an RFC 3339 time or date (2026-03-01), now, or an offset (-7d)"
            ))
        })?;
    Ok(t.duration_since(std::time::UNIX_EPOCH)
        .map(duration_ms)
        .unwrap_or(0))
}

/// A duration in whole ms, saturating (`as u64` would wrap a huge one
/// round to a small time).
fn duration_ms(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `ms`, if it is at most [`MAX_TIME_MS`], the latest time amos keeps;
/// past it, one line naming the input: what (`time`, `--expires`, …) and
/// how the user wrote it.
pub(crate) fn within_bound(ms: u64, what: &str, input: &str) -> Result<u64> {
    if ms <= MAX_TIME_MS {
        return Ok(ms);
    }
    let input = input.trim();
    let when = if input.starts_with(|c: char| c.is_ascii_digit()) && !input.contains('-') {
        format!("{input} from now")
    } else {
        input.to_owned()
    };
    Err(NodeError::BadInput(format!(
        "{what} {when} is past {}, the latest time amos keeps",
        crate::clock::rfc3339(MAX_TIME_MS)
    )))
}

/// An expiry as a user writes it: a duration from `now_ms` (`30d`, `12h`)
/// or an RFC 3339 time. One past [`MAX_TIME_MS`] is refused.
pub fn parse_expiry(s: &str, now_ms: u64) -> Result<u64> {
    within_bound(parse_expiry_unbounded(s, now_ms)?, "expiry", s)
}

/// [`parse_expiry`] without the bound: only a malformed expiry is an error.
pub(crate) fn parse_expiry_unbounded(s: &str, now_ms: u64) -> Result<u64> {
    if let Ok(d) = humantime::parse_duration(s) {
        return Ok(now_ms.saturating_add(duration_ms(d)));
    }
    let t = humantime::parse_rfc3339_weak(s).map_err(|_| {
        NodeError::BadInput(format!(
            "malformed expiry {s:?}: use a duration (30d, 12h) or an RFC 3339 time"
        ))
    })?;
    Ok(t.duration_since(std::time::UNIX_EPOCH)
        .map(duration_ms)
        .unwrap_or(0))
}

/// A clock a test moves by hand (`.0.store(ms)`), shared between threads.
#[cfg(test)]
pub(crate) struct MovingClock(pub std::sync::atomic::AtomicU64);

#[cfg(test)]
impl WallClock for MovingClock {
    fn now_ms(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
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
