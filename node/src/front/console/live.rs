//! Live peer status for the console: a process-wide sync [`Listener`] that
//! keeps the last session with each peer (result, facts and bytes each way)
//! and tells the `/events` stream (server-sent events) about each one.
//!
//! Must never: carry memory content or anything a requester gate guards —
//! only peer NodeIds, results and counts, as `/metrics` does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use tokio::sync::broadcast;

use crate::clock::{SystemClock, WallClock};
use crate::events::{self, Listener, SessionStats, SyncEvent};

/// The last session this process saw with one peer.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PeerLive {
    pub peer: String,
    pub result: String,
    pub role: String,
    pub at_ms: u64,
    pub ms: u64,
    pub facts_in: u64,
    pub facts_out: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// `agree`, `disagree`, or empty (not compared).
    pub digest: String,
}

/// Sessions seen, by peer, and the channel `/events` listens on.
pub struct Live {
    peers: Mutex<HashMap<String, PeerLive>>,
    tx: broadcast::Sender<PeerLive>,
}

impl Live {
    /// A new board, listening to every sync of this process from now on.
    pub fn start() -> Arc<Live> {
        let (tx, _) = broadcast::channel(64);
        let live = Arc::new(Live {
            peers: Mutex::new(HashMap::new()),
            tx,
        });
        events::listen(Arc::new(Hearing(Arc::downgrade(&live))));
        live
    }

    /// The last session with `peer`, if this process saw one.
    pub fn get(&self, peer: &str) -> Option<PeerLive> {
        self.peers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(peer)
            .cloned()
    }

    pub fn subscribe(&self) -> broadcast::Receiver<PeerLive> {
        self.tx.subscribe()
    }

    fn record(&self, p: PeerLive) {
        self.peers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(p.peer.clone(), p.clone());
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
            at_ms: SystemClock.now_ms(),
            ms: elapsed.as_millis() as u64,
            facts_in: s.facts_in,
            facts_out: s.facts_out,
            bytes_in: s.bytes_in,
            bytes_out: s.bytes_out,
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
