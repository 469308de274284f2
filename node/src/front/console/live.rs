//! Live peer status for the console: a process-wide sync [`Listener`] that
//! tells the `/events` stream (server-sent events) about each session this
//! process runs or accepts (result, facts and bytes each way, whether the
//! digests agreed). What a page shows on load comes from the peer rows in
//! the store, where every process records its sessions.
//!
//! Must never: carry memory content or anything a requester gate guards —
//! only peer NodeIds, results and counts, as `/metrics` does.

use std::sync::Arc;

use serde::Serialize;
use tokio::sync::broadcast;

use crate::clock::{SystemClock, WallClock};
use crate::events::{self, Listener, SessionStats, SyncEvent};
use crate::store::peers::LastSession;

/// One session this process saw with one peer.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PeerLive {
    pub peer: String,
    pub result: String,
    pub role: String,
    /// When it ended, how long it took, what it moved (zeros if it failed).
    #[serde(flatten)]
    pub session: LastSession,
    /// `agree`, `disagree`, or empty (not compared).
    pub digest: String,
}

/// The channel `/events` listens on.
pub struct Live {
    tx: broadcast::Sender<PeerLive>,
}

impl Live {
    /// A new board, listening to every sync of this process from now on.
    pub fn start() -> Arc<Live> {
        let (tx, _) = broadcast::channel(64);
        let live = Arc::new(Live { tx });
        events::listen(Arc::new(Hearing(Arc::downgrade(&live))));
        live
    }

    pub fn subscribe(&self) -> broadcast::Receiver<PeerLive> {
        self.tx.subscribe()
    }

    fn record(&self, p: PeerLive) {
        // Nobody listening is fine.
        let _ = self.tx.send(p);
    }
}

/// The listener registered for a board (weak: a board dropped stops hearing).
struct Hearing(std::sync::Weak<Live>);

impl Listener for Hearing {
    fn event(&self, e: &SyncEvent<'_>) {
        let SyncEvent::Finished {
            peer,
            role,
            result,
            elapsed,
            stats,
        } = e
        else {
            return;
        };
        let Some(live) = self.0.upgrade() else {
            return;
        };
        let s = stats.copied().unwrap_or(SessionStats::default());
        live.record(PeerLive {
            peer: (*peer).to_owned(),
            result: result.as_str().to_owned(),
            role: role.as_str().to_owned(),
            session: LastSession::of(&s, SystemClock.now_ms(), *elapsed),
            digest: digest_word(s.digest_agree).to_owned(),
        });
    }
}

/// How the console names a digest comparison.
pub fn digest_word(agree: Option<bool>) -> &'static str {
    match agree {
        Some(true) => "agree",
        Some(false) => "disagree",
        None => "",
    }
}
