//! The console's sessions: the access token, presented once as `?token=`,
//! is exchanged for a session secret — 32 random bytes as hex, made for
//! that visit, held in this console process's memory only and good for
//! [`SESSION_LIFETIME`] — which is what the cookie carries.
//!
//! Browsers scope cookies by host, not port: every other server on the
//! console's loopback address receives its cookie. So the cookie never
//! holds the token (which lasts, on disk, across runs); what another port
//! receives dies with this console process or after its lifetime.
//!
//! Must never: accept an expired or unknown secret; keep a secret on disk
//! or in a log; compare secrets in time that depends on their content.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::RngExt;

use super::token::same;
use crate::clock::WallClock;

/// How long a session lasts from the visit that opened it.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);

/// Live sessions kept at most: opening one more forgets the one that
/// expires first.
const MAX_SESSIONS: usize = 64;

/// The live sessions of one console process.
pub(crate) struct Sessions {
    lifetime: Duration,
    clock: Arc<dyn WallClock>,
    /// (secret, expiry in Unix ms).
    live: Mutex<Vec<(String, u64)>>,
}

impl Sessions {
    pub fn new(lifetime: Duration, clock: Arc<dyn WallClock>) -> Sessions {
        Sessions {
            lifetime,
            clock,
            live: Mutex::new(Vec::new()),
        }
    }

    /// How long a session lasts.
    pub fn lifetime(&self) -> Duration {
        self.lifetime
    }

    /// A new session: its secret.
    pub fn open(&self) -> String {
        let bytes: [u8; 32] = rand::rng().random();
        let secret = data_encoding::HEXLOWER.encode(&bytes);
        let now = self.clock.now_ms();
        let expires = now.saturating_add(self.lifetime.as_millis() as u64);
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.retain(|(_, until)| *until > now);
        if live.len() >= MAX_SESSIONS {
            live.sort_by_key(|(_, until)| std::cmp::Reverse(*until));
            live.truncate(MAX_SESSIONS - 1);
        }
        live.push((secret.clone(), expires));
        secret
    }

    /// Whether `secret` names a live session: compared with every one
    /// held, each in time that depends only on the lengths.
    pub fn check(&self, secret: &str) -> bool {
        let now = self.clock.now_ms();
        let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.iter().fold(false, |found, (s, until)| {
            found | (same(s, secret) & (*until > now))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    use crate::clock::MovingClock as Moving;

    #[test]
    fn a_session_is_fresh_random_and_lasts_its_lifetime_only() {
        let clock = Arc::new(Moving(AtomicU64::new(1_000_000)));
        let s = Sessions::new(Duration::from_secs(60), clock.clone());
        let a = s.open();
        let b = s.open();
        assert_eq!(a.len(), 64);
        assert_ne!(a, b, "one secret per visit");
        assert!(s.check(&a) && s.check(&b));
        assert!(!s.check("") && !s.check(&format!("00{}", &a[2..])));
        clock.0.store(1_000_000 + 59_999, Ordering::Relaxed);
        assert!(s.check(&a), "within its lifetime");
        clock.0.store(1_000_000 + 60_000, Ordering::Relaxed);
        assert!(!s.check(&a) && !s.check(&b), "expired");
        let c = s.open();
        assert!(s.check(&c));
        assert_eq!(s.live.lock().unwrap().len(), 1, "expired ones forgotten");
    }

    #[test]
    fn past_the_cap_the_session_expiring_first_is_forgotten() {
        let clock = Arc::new(Moving(AtomicU64::new(0)));
        let s = Sessions::new(Duration::from_secs(60), clock.clone());
        let first = s.open();
        clock.0.store(1, Ordering::Relaxed);
        let rest: Vec<String> = (1..MAX_SESSIONS).map(|_| s.open()).collect();
        assert!(s.check(&first));
        let one_more = s.open();
        assert!(!s.check(&first), "the oldest went");
        assert!(s.check(&one_more) && rest.iter().all(|r| s.check(r)));
    }
}
