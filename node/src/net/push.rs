//! Push on change (docs/design.md §7.10), in the node's words: the rule —
//! news per peer, relay on apply, debounce, one push in flight per peer
//! and one follow-up, the cap, backoff — is `amos_sync::PushScheduler`,
//! the one the mesh simulator runs too; here it is named by peer ids as
//! text and fed the outcomes of real sessions.
//!
//! `ops::serve` is the shell that drives it: it reads the store's `seq`,
//! hears the sync events, arms a tokio timer for
//! [`PushScheduler::next_wake`] on a monotonic clock, dials whom
//! [`PushScheduler::poll`] names, and reports back.
//!
//! Boundary: no rule of its own; nothing here decides whom to dial or when.

use amos_sync::SessionOutcome;

use crate::events::SyncResult;

pub use amos_sync::PushConfig;

/// The push scheduler of one serving node, its peers named by NodeId text.
pub type PushScheduler = amos_sync::PushScheduler<String>;

impl From<SyncResult> for SessionOutcome {
    /// Unreachable, refused and failed all back the peer off alike.
    fn from(r: SyncResult) -> Self {
        match r {
            SyncResult::Ok => SessionOutcome::Ok,
            SyncResult::Unreachable | SyncResult::Refused | SyncResult::Failed => {
                SessionOutcome::Failed
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every way a session can end maps to the scheduler's outcome: only a
    /// success carries news and ends a backoff.
    #[test]
    fn only_a_success_counts_as_one() {
        let table = [
            (SyncResult::Ok, SessionOutcome::Ok),
            (SyncResult::Unreachable, SessionOutcome::Failed),
            (SyncResult::Refused, SessionOutcome::Failed),
            (SyncResult::Failed, SessionOutcome::Failed),
        ];
        for (r, want) in table {
            assert_eq!(SessionOutcome::from(r), want, "{r:?}");
        }
    }

    /// The node's session results drive the shared scheduler: a refused
    /// push keeps its news and backs the peer off by the shared rule.
    #[test]
    fn a_refused_push_backs_the_peer_off() {
        let mut s = PushScheduler::new(PushConfig::default());
        s.set_peers(["p"]);
        s.observe_seq(1, 0);
        s.observe_seq(2, 0);
        s.poll(100);
        assert_eq!(s.poll(200), ["p"]);
        s.push_finished("p", SyncResult::Refused, 300);
        assert!(s.has_news("p"));
        assert_eq!(s.next_wake(), Some(1_800));
    }
}
