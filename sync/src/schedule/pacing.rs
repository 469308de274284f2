//! Pacing (docs/design.md §7.8): the jitter of periodic passes and the
//! backoff from failing peers. Push (§7.10) backs off with the same rule
//! and a 1 s base.
//!
//! Boundary: no clock, no random source: `now_ms` and the random draw are
//! arguments.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::time::Duration;

/// How a session ended, as far as scheduling cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionOutcome {
    /// It ran to its end: it carried what was news when it started.
    Ok,
    /// It did not (unreachable, refused, failed): the peer backs off.
    Failed,
}

/// After this many failures in a row the backoff stops growing
/// (`2^5` = 32 periods).
const MAX_DOUBLINGS: u32 = 5;

/// Each pass after the period ±10 % (so a fleet started together does not
/// dial in step), and a peer that failed `n` times in a row is tried again
/// only `period·2^n − period/2` later (`n` capped at 5: about every 32
/// periods) until a session with it succeeds.
#[derive(Debug, Clone)]
pub struct Pacing<P> {
    /// Failing peers: failures in a row, and when they are due again.
    failing: BTreeMap<P, (u32, u64)>,
}

impl<P> Default for Pacing<P> {
    fn default() -> Self {
        Pacing {
            failing: BTreeMap::new(),
        }
    }
}

impl<P: Ord + Clone> Pacing<P> {
    /// The wait before the next pass; `unit` in [0, 1) is the caller's
    /// random draw (clamped into [0, 1]).
    pub fn next_wait(period: Duration, unit: f64) -> Duration {
        period.mul_f64(0.9 + 0.2 * unit.clamp(0.0, 1.0))
    }

    /// The wait after the `n`th failure in a row (`n` ≥ 1) with this
    /// `period`: `period·2^n − period/2`, `n` capped at 5. Due half a period
    /// early, so the pass that many periods on (give or take the jitter)
    /// tries the peer.
    pub fn backoff_ms(period: Duration, failures: u32) -> u64 {
        let period = u64::try_from(period.as_millis()).unwrap_or(u64::MAX);
        let periods = 1u64 << failures.clamp(1, MAX_DOUBLINGS);
        period.saturating_mul(periods).saturating_sub(period / 2)
    }

    /// Whether `peer` is due at `now_ms` (it is, unless it is failing and
    /// its wait has not ended).
    pub fn due<Q>(&self, peer: &Q, now_ms: u64) -> bool
    where
        P: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.failing
            .get(peer)
            .is_none_or(|&(_, next_ms)| now_ms >= next_ms)
    }

    /// When `peer` is due again (`None`: now; it is not failing).
    pub fn due_at<Q>(&self, peer: &Q) -> Option<u64>
    where
        P: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.failing.get(peer).map(|&(_, next_ms)| next_ms)
    }

    /// A session with `peer` ended at `now_ms`: a success ends its backoff,
    /// a failure makes it longer.
    pub fn record<Q>(
        &mut self,
        peer: &Q,
        outcome: impl Into<SessionOutcome>,
        now_ms: u64,
        period: Duration,
    ) where
        P: Borrow<Q>,
        Q: Ord + ToOwned<Owned = P> + ?Sized,
    {
        if outcome.into() == SessionOutcome::Ok {
            self.failing.remove(peer);
            return;
        }
        let n = self
            .failing
            .get(peer)
            .map_or(1, |&(n, _)| n.saturating_add(1));
        let next = now_ms.saturating_add(Self::backoff_ms(period, n));
        self.failing.insert(peer.to_owned(), (n, next));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    type Pace = Pacing<String>;

    #[test]
    fn passes_are_jittered_within_ten_percent() {
        let p = Duration::from_secs(30);
        assert_eq!(Pace::next_wait(p, 0.0), Duration::from_secs(27));
        assert_eq!(Pace::next_wait(p, 0.5), Duration::from_secs(30));
        assert!(Pace::next_wait(p, 0.999) < Duration::from_secs(33));
        assert_eq!(Pace::next_wait(p, 7.0), Duration::from_secs(33));
        assert_eq!(Pace::next_wait(p, -1.0), Duration::from_secs(27));
    }

    #[test]
    fn the_backoff_doubles_and_stops_at_32_periods() {
        let p = Duration::from_secs(1);
        let waits: Vec<u64> = (1..=8).map(|n| Pace::backoff_ms(p, n)).collect();
        assert_eq!(
            waits,
            [1_500, 3_500, 7_500, 15_500, 31_500, 31_500, 31_500, 31_500]
        );
    }

    #[test]
    fn a_dead_peer_is_tried_exponentially_less_often_until_it_answers() {
        let period = Duration::from_secs(10);
        let mut p = Pace::default();
        let mut now = 1_000_000;
        assert!(p.due("a", now));
        // Count the passes (one per period) at which "a" is tried while it fails.
        let mut tried = Vec::new();
        for pass in 0..80u64 {
            now += 10_000;
            if p.due("a", now) {
                tried.push(pass);
                p.record("a", SessionOutcome::Failed, now, period);
            }
            p.record("b", SessionOutcome::Ok, now, period);
            assert!(p.due("b", now + 1));
        }
        let gaps: Vec<u64> = tried.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(&gaps[..5], &[2, 4, 8, 16, 32], "{tried:?}");
        assert!(gaps[5..].iter().all(|&g| g == 32), "capped: {gaps:?}");
        // One success and it is back to every period.
        p.record("a", SessionOutcome::Ok, now, period);
        assert!(p.due("a", now));
        assert_eq!(p.due_at("a"), None);
    }

    proptest! {
        /// Whatever the draw, a pass waits within the period ±10 %.
        #[test]
        fn the_jitter_stays_in_range(period_ms in 1..10_000_000u64, unit in -2.0..3.0f64) {
            let period = Duration::from_millis(period_ms);
            let w = Pace::next_wait(period, unit);
            prop_assert!(w >= period.mul_f64(0.9) && w <= period.mul_f64(1.1), "{w:?}");
        }

        /// Failures in a row never shorten the wait, and it never exceeds
        /// 32 periods; a success ends it whatever came before.
        #[test]
        fn the_backoff_grows_caps_and_resets(failures in 1..40u32, period_ms in 1..100_000u64, now in 0..1u64 << 40) {
            let period = Duration::from_millis(period_ms);
            let mut p = Pace::default();
            let mut last = 0;
            for _ in 0..failures {
                p.record("x", SessionOutcome::Failed, now, period);
                let wait = p.due_at("x").unwrap() - now;
                prop_assert!(wait >= last);
                prop_assert!(wait <= 32 * period_ms);
                prop_assert!(!p.due("x", now));
                last = wait;
            }
            prop_assert!(p.due("x", now + last));
            p.record("x", SessionOutcome::Ok, now, period);
            prop_assert!(p.due("x", now));
        }
    }
}
