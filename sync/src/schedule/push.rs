//! Push on change (docs/design.md §7.10): which peers a node dials when it
//! has news, and when. It owns the rule — what counts as news for which
//! peer (relay on apply: the `seq`s a batch from peer P took are news for
//! every peer but P), the debounce, at most one push session in flight per
//! peer with exactly one follow-up for news noted while it ran, a cap on
//! concurrent push sessions, and backoff from failing peers (the
//! [`Pacing`] of periodic sync, with a short base).
//!
//! Boundary: decisions only; `amos serve` reads the store's `seq`, hears
//! the sync events, dials and reports back, and the simulator does the
//! same on its virtual clock.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::time::Duration;

use super::pacing::{Pacing, SessionOutcome};

/// How long an observed `seq` waits before it is judged, so that the
/// report naming the peer whose batch took it (sent right after that batch
/// committed) is in first. Well under any sane debounce.
pub const SETTLE_MS: u64 = 100;

/// The scheduler's knobs (`amos serve --push-debounce`, `--push-sessions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PushConfig {
    /// A peer with news is dialled this long after its first unsent news.
    pub debounce_ms: u64,
    /// At most this many push sessions at once (at least 1).
    pub max_sessions: usize,
    /// The backoff's base: after `n` failed pushes in a row a peer waits
    /// `base·2^n − base/2` (n capped at 5; [`Pacing::backoff_ms`]).
    pub backoff_base: Duration,
}

impl Default for PushConfig {
    /// `amos serve`'s: 200 ms, 8 sessions, a 1 s base.
    fn default() -> Self {
        PushConfig {
            debounce_ms: 200,
            max_sessions: 8,
            backoff_base: Duration::from_secs(1),
        }
    }
}

#[derive(Debug, Clone)]
struct PeerState {
    /// Whether it is a peer we can dial now (registered, with an address).
    reachable: bool,
    /// When the oldest news not yet carried to it was noted.
    news_since: Option<u64>,
    /// When the newest such news was noted.
    news_last: Option<u64>,
    /// When our push session to it started, while one runs.
    in_flight: Option<u64>,
}

impl PeerState {
    const NEW: PeerState = PeerState {
        reachable: false,
        news_since: None,
        news_last: None,
        in_flight: None,
    };

    fn note_news(&mut self, at: u64) {
        self.news_since = Some(self.news_since.map_or(at, |s| s.min(at)));
        self.news_last = Some(self.news_last.map_or(at, |l| l.max(at)));
    }

    fn clear_news(&mut self) {
        self.news_since = None;
        self.news_last = None;
    }
}

/// The push scheduler of one serving node, its peers named by `P`.
#[derive(Debug, Clone)]
pub struct PushScheduler<P> {
    cfg: PushConfig,
    peers: BTreeMap<P, PeerState>,
    backoff: Pacing<P>,
    /// The `seq` up to which news was judged (`None`: no baseline yet).
    judged: Option<i64>,
    /// The highest `seq` observed and when, not judged yet.
    observed: Option<(i64, u64)>,
    /// `seq` ranges (inclusive) taken by batches applied from a peer.
    stored: Vec<(P, i64, i64)>,
}

impl<P: Ord + Clone> PushScheduler<P> {
    /// A scheduler with no peers and no baseline yet (the first
    /// [`PushScheduler::observe_seq`] sets it).
    pub fn new(cfg: PushConfig) -> Self {
        PushScheduler {
            cfg: PushConfig {
                max_sessions: cfg.max_sessions.max(1),
                ..cfg
            },
            peers: BTreeMap::new(),
            backoff: Pacing::default(),
            judged: None,
            observed: None,
            stored: Vec::new(),
        }
    }

    /// The configuration in force (`max_sessions` at least 1).
    pub fn config(&self) -> PushConfig {
        self.cfg
    }

    /// The peers we can dial now. A peer no longer among them keeps no
    /// news (a session in flight still reports back).
    pub fn set_peers(&mut self, reachable: impl IntoIterator<Item = impl Into<P>>) {
        for p in self.peers.values_mut() {
            p.reachable = false;
        }
        for id in reachable {
            self.peers
                .entry(id.into())
                .or_insert(PeerState::NEW)
                .reachable = true;
        }
        self.peers
            .retain(|_, p| p.reachable || p.in_flight.is_some());
        for p in self.peers.values_mut().filter(|p| !p.reachable) {
            p.clear_news();
        }
    }

    /// The store's `seq` counter read `seq` at `now_ms`. The first reading
    /// is the baseline: starting pushes nothing.
    pub fn observe_seq(&mut self, seq: i64, now_ms: u64) {
        match self.judged {
            None => self.judged = Some(seq),
            Some(j) if seq == j => self.observed = None,
            Some(_) => {
                // Keep the first time the current range was seen: its news
                // is as old as that.
                let at = match self.observed {
                    Some((s, at)) if s == seq => at,
                    Some((_, at)) => at.min(now_ms),
                    None => now_ms,
                };
                self.observed = Some((seq, at));
            }
        }
    }

    /// A batch applied from `peer` took `seq`s `first..=last`: news for
    /// every other peer, not for `peer`.
    pub fn stored<Q>(&mut self, peer: &Q, first: i64, last: i64)
    where
        Q: ToOwned<Owned = P> + ?Sized,
    {
        if first <= last && self.judged.is_none_or(|j| last > j) {
            self.stored.push((peer.to_owned(), first, last));
        }
    }

    /// A session with `peer` that this scheduler did not start (a periodic
    /// pass, one the peer dialled) ended: if it succeeded, it carried
    /// whatever news was noted before it `started_ms`, and it ends the
    /// peer's backoff.
    pub fn session_ended<Q>(
        &mut self,
        peer: &Q,
        outcome: impl Into<SessionOutcome>,
        started_ms: u64,
    ) where
        P: Borrow<Q>,
        Q: Ord + ToOwned<Owned = P> + ?Sized,
    {
        if outcome.into() != SessionOutcome::Ok {
            return;
        }
        self.backoff
            .record(peer, SessionOutcome::Ok, 0, self.cfg.backoff_base);
        if let Some(p) = self.peers.get_mut(peer) {
            match (p.news_since, p.news_last) {
                (Some(_), Some(last)) if last < started_ms => p.clear_news(),
                (Some(since), Some(last)) if since < started_ms => p.news_since = Some(last),
                _ => {}
            }
        }
    }

    /// Our push to `peer` (returned by [`PushScheduler::poll`]) ended at
    /// `now_ms`. A failure keeps the news it was to carry and backs the
    /// peer off; news noted while it ran is the one follow-up.
    pub fn push_finished<Q>(&mut self, peer: &Q, outcome: impl Into<SessionOutcome>, now_ms: u64)
    where
        P: Borrow<Q>,
        Q: Ord + ToOwned<Owned = P> + ?Sized,
    {
        let outcome = outcome.into();
        self.backoff
            .record(peer, outcome, now_ms, self.cfg.backoff_base);
        let Some(p) = self.peers.get_mut(peer) else {
            return;
        };
        let started = p.in_flight.take();
        if outcome != SessionOutcome::Ok
            && let Some(started) = started
        {
            p.note_news(started);
        }
        if !p.reachable && p.in_flight.is_none() {
            self.peers.remove(peer);
        }
    }

    /// Judge what was observed (once settled) and start whatever is due at
    /// `now_ms`: the peers to dial, each now in flight, oldest news first.
    pub fn poll(&mut self, now_ms: u64) -> Vec<P> {
        self.judge(now_ms);
        let room = self.cfg.max_sessions.saturating_sub(self.in_flight());
        let mut due: Vec<(u64, &P)> = self
            .peers
            .iter()
            .filter(|(id, p)| p.reachable && p.in_flight.is_none() && self.backoff.due(*id, now_ms))
            .filter_map(|(id, p)| {
                let since = p.news_since?;
                (now_ms >= since.saturating_add(self.cfg.debounce_ms)).then_some((since, id))
            })
            .collect();
        due.sort();
        let chosen: Vec<P> = due
            .into_iter()
            .take(room)
            .map(|(_, id)| id.clone())
            .collect();
        for id in &chosen {
            if let Some(p) = self.peers.get_mut(id) {
                // The session starting now carries every news noted so far.
                p.in_flight = Some(now_ms);
                p.clear_news();
            }
        }
        chosen
    }

    /// When [`PushScheduler::poll`] should run next (`None`: only when
    /// something new is reported).
    pub fn next_wake(&self) -> Option<u64> {
        let settle = self.observed.map(|(_, at)| at.saturating_add(SETTLE_MS));
        let peers = (self.in_flight() < self.cfg.max_sessions)
            .then(|| {
                self.peers
                    .iter()
                    .filter(|(_, p)| p.reachable && p.in_flight.is_none())
                    .filter_map(|(id, p)| {
                        let debounced = p.news_since?.saturating_add(self.cfg.debounce_ms);
                        Some(debounced.max(self.backoff.due_at(id).unwrap_or(0)))
                    })
                    .min()
            })
            .flatten();
        [settle, peers].into_iter().flatten().min()
    }

    /// How many of our push sessions are in flight.
    pub fn in_flight(&self) -> usize {
        self.peers
            .values()
            .filter(|p| p.in_flight.is_some())
            .count()
    }

    /// Whether `peer` has news it has not been sent (for tests and logs).
    pub fn has_news<Q>(&self, peer: &Q) -> bool
    where
        P: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.peers.get(peer).is_some_and(|p| p.news_since.is_some())
    }

    /// Turn a settled observation into news, peer by peer.
    fn judge(&mut self, now_ms: u64) {
        let (Some(judged), Some((seq, at))) = (self.judged, self.observed) else {
            return;
        };
        if now_ms < at.saturating_add(SETTLE_MS) {
            return;
        }
        self.observed = None;
        self.judged = Some(seq);
        // A `seq` that went back (a restored store) is news for everyone.
        let (lo, hi) = if seq > judged {
            (judged + 1, seq)
        } else {
            (1, 0)
        };
        for (id, p) in self.peers.iter_mut().filter(|(_, p)| p.reachable) {
            if hi >= lo && covered(&self.stored, id, lo, hi) {
                continue;
            }
            p.note_news(at);
        }
        self.stored.retain(|(_, _, last)| *last > seq);
    }
}

/// Whether every `seq` in `lo..=hi` was taken by batches from `peer`.
fn covered<P, Q>(stored: &[(P, i64, i64)], peer: &Q, lo: i64, hi: i64) -> bool
where
    P: Borrow<Q>,
    Q: Eq + ?Sized,
{
    let mut ranges: Vec<(i64, i64)> = stored
        .iter()
        .filter(|(p, first, last)| p.borrow() == peer && *last >= lo && *first <= hi)
        .map(|&(_, first, last)| (first, last))
        .collect();
    ranges.sort_unstable();
    let mut next = lo;
    for (first, last) in ranges {
        if first > next {
            return false;
        }
        next = next.max(last.saturating_add(1));
        if next > hi {
            return true;
        }
    }
    next > hi
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    type Sched = PushScheduler<String>;

    const A: &str = "a";
    const B: &str = "b";
    const C: &str = "c";

    fn sched(max: usize) -> Sched {
        let mut s = Sched::new(PushConfig {
            debounce_ms: 200,
            max_sessions: max,
            backoff_base: Duration::from_secs(1),
        });
        s.set_peers([A, B, C]);
        s.observe_seq(10, 0);
        s
    }

    /// Observe `seq` at `now` and poll once it settled.
    fn change(s: &mut Sched, seq: i64, now: u64) -> Vec<String> {
        s.observe_seq(seq, now);
        s.poll(now + SETTLE_MS)
    }

    /// `A` the one peer, a change at 0 and its push to `A` started at 200.
    fn pushing_to_a_alone() -> Sched {
        let mut s = sched(8);
        s.set_peers([A]);
        change(&mut s, 11, 0);
        assert_eq!(s.poll(200), vec![A]);
        s
    }

    #[test]
    fn the_baseline_is_no_news() {
        let mut s = sched(8);
        assert!(s.poll(10_000).is_empty());
        assert_eq!(s.next_wake(), None);
        s.observe_seq(10, 20_000);
        assert!(s.poll(30_000).is_empty());
    }

    #[test]
    fn a_local_change_reaches_every_peer_after_the_debounce() {
        let mut s = sched(8);
        assert!(
            change(&mut s, 11, 1_000).is_empty(),
            "not before the debounce"
        );
        assert_eq!(s.next_wake(), Some(1_200));
        assert!(s.poll(1_199).is_empty());
        assert_eq!(s.poll(1_200), vec![A, B, C]);
        assert!(s.poll(5_000).is_empty(), "in flight: not again");
    }

    #[test]
    fn later_news_in_the_window_does_not_push_the_dial_back() {
        let mut s = sched(8);
        change(&mut s, 11, 1_000);
        s.observe_seq(12, 1_150);
        assert_eq!(s.poll(1_200), vec![A, B, C]);
    }

    #[test]
    fn facts_from_a_peer_are_news_for_the_others_only() {
        let mut s = sched(8);
        s.stored(A, 11, 14);
        change(&mut s, 14, 1_000);
        assert_eq!(s.poll(1_200), vec![B, C]);
        assert!(!s.has_news(A));
        // A local write beside A's batch is news for A too.
        s.stored(A, 15, 16);
        change(&mut s, 17, 2_000);
        assert!(s.has_news(A));
    }

    #[test]
    fn news_while_a_push_runs_makes_exactly_one_follow_up() {
        let mut s = sched(8);
        change(&mut s, 11, 0);
        assert_eq!(s.poll(200), vec![A, B, C]);
        for (i, t) in [300, 400, 500].into_iter().enumerate() {
            change(&mut s, 12 + i as i64, t);
        }
        assert!(s.poll(1_000).is_empty(), "one in flight per peer");
        s.push_finished(A, SessionOutcome::Ok, 1_000);
        assert_eq!(s.poll(1_000), vec![A], "one follow-up");
        s.push_finished(A, SessionOutcome::Ok, 1_100);
        assert!(s.poll(5_000).is_empty(), "and only one");
    }

    #[test]
    fn a_session_the_peer_started_after_the_news_carried_it() {
        let mut s = sched(8);
        change(&mut s, 11, 1_000);
        s.session_ended(B, SessionOutcome::Ok, 1_050);
        s.session_ended(C, SessionOutcome::Ok, 900);
        s.session_ended(A, SessionOutcome::Failed, 1_050);
        assert_eq!(s.poll(1_200), vec![A, C]);
    }

    #[test]
    fn at_most_the_cap_run_at_once_oldest_news_first() {
        let mut s = sched(2);
        s.stored(A, 11, 11);
        change(&mut s, 11, 0); // news for b, c at 0
        s.observe_seq(12, 150); // and a at 150
        assert_eq!(s.poll(1_000), vec![B, C]);
        assert_eq!(s.next_wake(), None, "full: nothing to wake for");
        s.push_finished(C, SessionOutcome::Ok, 1_100);
        assert_eq!(s.poll(1_100), vec![A]);
    }

    #[test]
    fn a_failed_push_keeps_its_news_and_backs_off() {
        let mut s = pushing_to_a_alone();
        s.push_finished(A, SessionOutcome::Failed, 300);
        assert!(s.has_news(A), "kept");
        // 1 s base: due again 1.5 s after the failure.
        assert_eq!(s.next_wake(), Some(1_800));
        assert!(s.poll(1_799).is_empty());
        assert_eq!(s.poll(1_800), vec![A]);
        s.push_finished(A, SessionOutcome::Ok, 1_900);
        assert!(!s.has_news(A));
        change(&mut s, 12, 2_000);
        assert_eq!(s.poll(2_200), vec![A], "success ended the backoff");
    }

    #[test]
    fn a_peer_gone_from_the_table_keeps_no_news() {
        let mut s = sched(8);
        change(&mut s, 11, 0);
        s.set_peers([A, B]);
        assert_eq!(s.poll(200), vec![A, B]);
        s.set_peers([B]);
        s.push_finished(A, SessionOutcome::Failed, 300);
        assert!(!s.has_news(A));
        change(&mut s, 12, 1_000);
        s.push_finished(B, SessionOutcome::Ok, 1_000);
        assert_eq!(s.poll(1_200), vec![B]);
    }

    #[test]
    fn a_seq_gone_back_is_news_for_everyone() {
        let mut s = sched(8);
        s.stored(A, 1, 3);
        change(&mut s, 3, 0);
        assert_eq!(s.poll(200), vec![A, B, C]);
    }

    #[test]
    fn coverage_needs_every_seq() {
        let st = |v: &[(&str, i64, i64)]| -> Vec<(String, i64, i64)> {
            v.iter().map(|&(p, a, b)| (p.to_owned(), a, b)).collect()
        };
        assert!(covered(&st(&[(A, 1, 3), (A, 4, 9)]), A, 2, 9));
        assert!(!covered(&st(&[(A, 1, 3), (A, 5, 9)]), A, 1, 9));
        assert!(!covered(&st(&[(A, 1, 3), (B, 4, 9)]), A, 1, 9));
        assert!(!covered(&st(&[]), A, 1, 1));
        assert!(covered(&st(&[(A, 0, 100)]), A, 5, 6));
    }

    #[test]
    fn a_failed_peer_is_retried_at_the_backoff_time_and_a_recovered_one_resets() {
        let mut s = pushing_to_a_alone();
        // Fails twice in a row: 1.5 s, then 3.5 s.
        s.push_finished(A, SessionOutcome::Failed, 1_000);
        assert_eq!(s.next_wake(), Some(2_500));
        assert_eq!(s.poll(2_500), vec![A]);
        s.push_finished(A, SessionOutcome::Failed, 3_000);
        assert_eq!(s.next_wake(), Some(6_500));
        assert!(s.poll(6_499).is_empty());
        // A session the peer dialled got through: the backoff is over, and
        // news it could not have carried goes out a debounce later.
        s.session_ended(A, SessionOutcome::Ok, 500);
        assert!(s.has_news(A), "noted after that session started");
        assert_eq!(
            s.next_wake(),
            Some(2_700),
            "a debounce after it: no backoff"
        );
        assert_eq!(s.poll(4_000), vec![A]);
    }

    /// What happens to the scheduler in a step of the property tests.
    #[derive(Debug, Clone)]
    enum Step {
        /// Some ms pass, then a local write.
        Local(u64),
        /// Some ms pass, then a batch from peer `i` (`n` seqs).
        FromPeer(u64, usize, i64),
        /// Some ms pass, then whatever is in flight to peer `i` ends.
        Finish(u64, usize, bool),
        /// Some ms pass.
        Wait(u64),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (0..500u64).prop_map(Step::Local),
            (0..500u64, 0..4usize, 1..5i64).prop_map(|(t, i, n)| Step::FromPeer(t, i, n)),
            (0..2_000u64, 0..4usize, any::<bool>()).prop_map(|(t, i, ok)| Step::Finish(t, i, ok)),
            (0..5_000u64).prop_map(Step::Wait),
        ]
    }

    const PEERS: [&str; 4] = ["p0", "p1", "p2", "p3"];

    proptest! {
        /// Never more than the cap in flight, never two to one peer; every
        /// dial is to a peer with news older than the debounce; and at the
        /// end, once every session ended well and time passed, nobody has
        /// news left (nothing is dropped).
        #[test]
        fn the_rules_hold_for_any_history(steps in prop::collection::vec(step(), 1..80), cap in 1..4usize) {
            let mut s = Sched::new(PushConfig { debounce_ms: 200, max_sessions: cap, backoff_base: Duration::from_secs(1) });
            s.set_peers(PEERS);
            let (mut now, mut seq) = (0u64, 0i64);
            s.observe_seq(seq, now);
            let mut flying: BTreeMap<String, u64> = BTreeMap::new();
            let drive = |s: &mut Sched, now: u64, flying: &mut BTreeMap<String, u64>| {
                for id in s.poll(now) {
                    prop_assert!(!flying.contains_key(&id), "two in flight to {id}");
                    flying.insert(id, now);
                }
                prop_assert!(flying.len() <= cap);
                Ok(())
            };
            for st in steps {
                match st {
                    Step::Local(t) => { now += t; seq += 1; s.observe_seq(seq, now); }
                    Step::FromPeer(t, i, n) => {
                        now += t;
                        s.stored(PEERS[i], seq + 1, seq + n);
                        seq += n;
                        s.observe_seq(seq, now);
                    }
                    Step::Finish(t, i, ok) => {
                        now += t;
                        if flying.remove(PEERS[i]).is_some() {
                            let r = if ok { SessionOutcome::Ok } else { SessionOutcome::Failed };
                            s.push_finished(PEERS[i], r, now);
                        }
                    }
                    Step::Wait(t) => now += t,
                }
                drive(&mut s, now, &mut flying)?;
            }
            // Settle: every session ends well, time passes, until quiet.
            for _ in 0..64 {
                for (id, _) in std::mem::take(&mut flying) {
                    s.push_finished(&id, SessionOutcome::Ok, now);
                }
                now += 40_000;
                drive(&mut s, now, &mut flying)?;
            }
            for id in flying.keys() { s.push_finished(id, SessionOutcome::Ok, now); }
            for p in PEERS { prop_assert!(!s.has_news(p), "{p} still has news"); }
        }

        /// A dead peer: however many changes, the dials to it are bounded
        /// by the backoff (base·2^n − base/2 after n failures), not by the
        /// number of changes.
        #[test]
        fn a_dead_peer_costs_dials_by_backoff_not_by_changes(gaps in prop::collection::vec(1..400u64, 10..300)) {
            let mut s = Sched::new(PushConfig::default());
            s.set_peers(["dead"]);
            let (mut now, mut seq) = (0u64, 0i64);
            s.observe_seq(seq, now);
            let mut dials = 0u64;
            for g in &gaps {
                now += g;
                seq += 1;
                s.observe_seq(seq, now);
                for id in s.poll(now) {
                    dials += 1;
                    // Fails at once.
                    s.push_finished(&id, SessionOutcome::Failed, now);
                }
            }
            // After k failures the waits sum to at least
            // 1000·(2^(k+1) − 2) − 500·k ms (n capped at 5: 31.5 s each).
            let bound = |elapsed: u64| -> u64 {
                let mut k = 0u64;
                let mut spent = 0u64;
                loop {
                    let n = (k + 1).min(5);
                    let wait = 1000 * (1 << n) - 500;
                    if spent + wait > elapsed { return k + 1; }
                    spent += wait;
                    k += 1;
                }
            };
            prop_assert!(dials >= 1);
            prop_assert!(dials <= bound(now), "{dials} dials in {now} ms for {} changes", gaps.len());
        }
    }
}
