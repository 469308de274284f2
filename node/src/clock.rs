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
    /// Now, in Unix milliseconds.
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
/// (`2026-03-01`, `2026-03-01T09:30:00Z`), `now`, or a signed offset from
/// `now_ms` (`-7d` ago, `+12h` ahead). A bare duration (`7d`) is refused:
/// it is a length, not a time, and its direction is the user's to say
/// ([`time_refusal`]). A time past [`MAX_TIME_MS`] is refused
/// (docs/design.md §4).
pub fn parse_time(s: &str, now_ms: u64) -> Result<u64> {
    let ms = parse_time_unbounded(s, now_ms).map_err(|_| time_refusal("time", s, false))?;
    within_bound(ms, "time", s)
}

/// [`parse_time`] without the bound: only a malformed time is an error
/// (the caller words it with [`time_refusal`]).
pub(crate) fn parse_time_unbounded(s: &str, now_ms: u64) -> Result<u64> {
    let s = s.trim();
    if s == "now" {
        return Ok(now_ms);
    }
    let offset = match s.as_bytes().first() {
        Some(b'+') => Some((1i8, &s[1..])),
        Some(b'-') => Some((-1, &s[1..])),
        _ => None,
    };
    if let Some((sign, rest)) = offset
        && let Ok(d) = humantime::parse_duration(rest.trim())
    {
        let d = duration_ms(d);
        return Ok(if sign > 0 {
            now_ms.saturating_add(d)
        } else {
            now_ms.saturating_sub(d)
        });
    }
    parse_rfc3339(s)
        .or_else(|| parse_rfc3339(&format!("{s} 00:00:00")))
        .ok_or_else(|| time_refusal("time", s, false))
}

/// The one line refusing `input`, given as the time `what` (`--valid-at`,
/// `valid_at`, `time`): for a bare duration, which sign was meant —
/// `ahead` for a time usually in the future (`--valid-to`), else the past;
/// for anything else, what a time may be.
pub(crate) fn time_refusal(what: &str, input: &str, ahead: bool) -> NodeError {
    let input = input.trim();
    if humantime::parse_duration(input).is_ok() {
        let words = spelled(input);
        let (sign, when) = if ahead {
            ('+', format!("{words} from now"))
        } else {
            ('-', format!("{words} ago"))
        };
        return NodeError::BadInput(format!(
            "{what} {input}: a time is needed; did you mean {sign}{input} ({when})?"
        ));
    }
    NodeError::BadInput(format!(
        "malformed {what} {input:?}: use an RFC 3339 time or date (2026-03-01), now, \
         or a signed offset (-7d ago, +12h ahead)"
    ))
}

/// A duration as a user wrote it, in words when it is one number and one
/// unit (`7d`: `7 days`), else as written.
fn spelled(d: &str) -> String {
    let digits = d.bytes().take_while(u8::is_ascii_digit).count();
    let (n, unit) = d.split_at(digits);
    let word = match unit.trim() {
        "s" => "second",
        "m" | "min" => "minute",
        "h" => "hour",
        "d" => "day",
        "w" => "week",
        "y" => "year",
        _ => return d.to_owned(),
    };
    match n {
        "" => d.to_owned(),
        "1" => format!("1 {word}"),
        n => format!("{n} {word}s"),
    }
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

/// An expiry as a user writes it: a lifetime, i.e. a duration from
/// `now_ms` (`30d`, `12h`, or `+30d` as a time flag writes it), or an
/// RFC 3339 time. One past [`MAX_TIME_MS`] is refused.
pub fn parse_expiry(s: &str, now_ms: u64) -> Result<u64> {
    within_bound(parse_expiry_unbounded(s, now_ms)?, "expiry", s)
}

/// [`parse_expiry`] without the bound: only a malformed expiry is an error.
pub(crate) fn parse_expiry_unbounded(s: &str, now_ms: u64) -> Result<u64> {
    let lifetime = s.trim();
    let lifetime = lifetime.strip_prefix('+').unwrap_or(lifetime);
    if let Ok(d) = humantime::parse_duration(lifetime) {
        return Ok(now_ms.saturating_add(duration_ms(d)));
    }
    parse_rfc3339(s).ok_or_else(|| {
        NodeError::BadInput(format!(
            "malformed expiry {s:?}: use a lifetime (30d, 12h) or an RFC 3339 time"
        ))
    })
}

/// An RFC 3339 / ISO 8601 time as `YYYY-MM-DD[T ]HH:MM:SS[.fff]` with
/// `Z`, `±HH:MM` (or `±HHMM`) or no zone (UTC), in ms since 1970,
/// unbounded: the one grammar of written times, for what users type
/// ([`parse_time`], [`parse_expiry`]) and what sources write
/// ([`parse_source_time`]). Never panics, whatever `s` holds.
pub fn parse_rfc3339(s: &str) -> Option<u64> {
    let s = s.trim();
    let b = s.as_bytes();
    // Every byte sliced below is an ASCII digit or separator, checked
    // before any slice: a multi-byte character can never be cut.
    let digits = |r: std::ops::Range<usize>| -> Option<i64> {
        let d = b.get(r)?;
        if d.is_empty() || !d.iter().all(u8::is_ascii_digit) {
            return None;
        }
        d.iter().try_fold(0i64, |n, c| {
            n.checked_mul(10)?.checked_add(i64::from(c - b'0'))
        })
    };
    if b.len() < 19
        || b[4] != b'-'
        || b[7] != b'-'
        || !(b[10] == b'T' || b[10] == b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (y, mo, d) = (digits(0..4)?, digits(5..7)?, digits(8..10)?);
    let (h, mi, sec) = (digits(11..13)?, digits(14..16)?, digits(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut rest = &b[19..];
    let mut ms = 0i64;
    if let Some(frac) = rest.strip_prefix(b".") {
        let n = frac.iter().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 {
            return None;
        }
        let f = digits(20..20 + n.min(3))?;
        ms = f * 10i64.pow(3 - n.min(3) as u32);
        rest = &frac[n..];
    }
    let offset_min = match rest {
        b"" | b"Z" | b"z" => 0,
        [sign @ (b'+' | b'-'), zone @ ..] => {
            let sign = if *sign == b'+' { 1 } else { -1 };
            let hm: Vec<u8> = zone.iter().copied().filter(|c| *c != b':').collect();
            if hm.len() != 4 || !hm.iter().all(u8::is_ascii_digit) || zone.len() > 5 {
                return None;
            }
            let (zh, zm) = (
                i64::from(hm[0] - b'0') * 10 + i64::from(hm[1] - b'0'),
                i64::from(hm[2] - b'0') * 10 + i64::from(hm[3] - b'0'),
            );
            if zh > 23 || zm > 59 {
                return None;
            }
            sign * (zh * 60 + zm)
        }
        _ => return None,
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let (y2, m2) = if mo <= 2 {
        (y - 1, mo + 9)
    } else {
        (y, mo - 3)
    };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let doy = (153 * m2 + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let total = ((days * 24 + h) * 60 + mi - offset_min) * 60 + sec;
    (total >= 0).then(|| (total * 1000 + ms) as u64)
}

/// A time as sources write it (importers): [`parse_rfc3339`], or a number
/// of seconds since 1970 (ChatGPT). `None` if it is neither, or if it is
/// past [`MAX_TIME_MS`] (docs/design.md §4): a source's time out of bounds
/// is no time, as a malformed one. Never panics, whatever `s` holds.
pub fn parse_source_time(s: &str) -> Option<u64> {
    let s = s.trim();
    let ms = match s.parse::<f64>() {
        // `as` saturates: 1e300 seconds is u64::MAX, past the bound.
        Ok(secs) => (secs.is_finite() && secs >= 0.0).then_some((secs * 1000.0) as u64),
        Err(_) => parse_rfc3339(s),
    };
    ms.filter(|ms| *ms <= MAX_TIME_MS)
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
    #[test]
    fn users_and_sources_share_one_grammar() {
        // A zone, which humantime's parser did not read, is read for both.
        let t = "2025-03-01T11:00:00+01:00";
        assert_eq!(parse_rfc3339(t), Some(1_740_823_200_000));
        assert_eq!(parse_time(t, 0).unwrap(), 1_740_823_200_000);
        assert_eq!(parse_expiry(t, 0).unwrap(), 1_740_823_200_000);
        assert_eq!(parse_source_time(t), Some(1_740_823_200_000));
        // A date is midnight UTC for a user; a source must give a time.
        assert_eq!(parse_time("2025-03-01", 0).unwrap(), 1_740_787_200_000);
        assert_eq!(parse_source_time("2025-03-01"), None);
        // Seconds since 1970 are a source's, not a user's (a bare number
        // is no time for a user).
        assert_eq!(parse_source_time("1740823200"), Some(1_740_823_200_000));
        assert!(parse_time("2025-03-01T10:00:00+99:00", 0).is_err());
        assert!(parse_time("1740823200", 0).is_err());
    }

    /// A time is signed: `-7d` ago, `+7d` ahead; a bare `7d` is refused
    /// with the sign meant. A lifetime (`--expires`) is bare, or `+`.
    #[test]
    fn a_time_offset_is_signed_and_a_lifetime_need_not_be() {
        let day = 86_400_000;
        let now = 10 * day;
        assert_eq!(parse_time("-7d", now).unwrap(), 3 * day);
        assert_eq!(parse_time("+7d", now).unwrap(), 17 * day);
        assert_eq!(parse_time("now", now).unwrap(), now);
        let e = parse_time("7d", now).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert_eq!(
            e.to_string(),
            "time 7d: a time is needed; did you mean -7d (7 days ago)?"
        );
        assert_eq!(
            time_refusal("--valid-to", "1h", true).to_string(),
            "--valid-to 1h: a time is needed; did you mean +1h (1 hour from now)?"
        );
        assert_eq!(
            time_refusal("--since", "2 weeks", false).to_string(),
            "--since 2 weeks: a time is needed; did you mean -2 weeks (2 weeks ago)?"
        );
        assert!(
            parse_time("someday", now)
                .unwrap_err()
                .to_string()
                .starts_with("malformed time \"someday\"")
        );
        assert_eq!(parse_expiry("7d", now).unwrap(), 17 * day);
        assert_eq!(parse_expiry("+7d", now).unwrap(), 17 * day);
        assert!(parse_expiry("-7d", now).is_err());
    }

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
