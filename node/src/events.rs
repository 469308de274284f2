//! Sync events: what the mesh tells whoever listens while sessions run —
//! a dialler's [`SyncObserver`] (the CLI's progress line) and the
//! process-wide [`Listener`]s (the `/metrics` counters) — and the small
//! types they speak of.
//!
//! Boundary: the mesh emits, listeners count or draw; nothing here reaches
//! the store or the network, so any layer may listen without an import
//! cycle (metrics and progress never import the mesh).

use std::sync::{Arc, RwLock};
use std::time::Duration;

use amos_protocol::NodeId;
use amos_sync::ApplyReport;
use serde::Serialize;

/// What one session moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SessionStats {
    /// Facts received from the peer.
    pub facts_in: u64,
    /// Facts sent to the peer.
    pub facts_out: u64,
    /// Frame bytes received.
    pub bytes_in: u64,
    /// Frame bytes sent.
    pub bytes_out: u64,
    /// Whether the peer's digest over the scopes it gives us agreed with
    /// ours (`None`: not compared).
    pub digest_agree: Option<bool>,
}

/// Told what a dialled session moves while it moves it (`amos sync now`
/// and `amos join` draw their progress line from it, see
/// [`crate::progress::SyncProgress`]). Called on the session's blocking
/// threads: must be cheap and never block.
pub trait SyncObserver: Send + Sync {
    /// A batch of `facts` from `peer` went through the import gate.
    fn applied(&self, peer: &NodeId, facts: u64, report: &ApplyReport);
    /// `facts` more of ours were queued for `peer`.
    fn sent(&self, peer: &NodeId, facts: u64);
}

/// A shared [`SyncObserver`].
pub type Observer = Arc<dyn SyncObserver>;

/// The outcome of syncing with one peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SyncResult {
    /// The session completed.
    Ok,
    /// No connection was made: the address did not resolve, nothing answered
    /// or the handshake failed.
    Unreachable,
    /// The peer's handshake refused us: we are not an accepted peer there.
    Refused,
    /// Anything else: no address known, a local error, or the session broke
    /// off.
    Failed,
}

impl SyncResult {
    /// The lower-case name `--json` output and `/metrics` labels use.
    pub fn as_str(self) -> &'static str {
        match self {
            SyncResult::Ok => "ok",
            SyncResult::Unreachable => "unreachable",
            SyncResult::Refused => "refused",
            SyncResult::Failed => "failed",
        }
    }
}

/// One peer's line in a sync pass report.
#[derive(Debug, Clone, Serialize)]
pub struct PeerOutcome {
    /// The peer's node id (hex).
    pub peer: String,
    /// The peer's name as registered here.
    pub name: String,
    /// The address dialled (`None`: none known).
    pub addr: Option<String>,
    /// How the session ended.
    pub result: SyncResult,
    /// Facts received from the peer.
    pub facts_in: u64,
    /// Facts sent to the peer.
    pub facts_out: u64,
    /// Frame bytes received.
    pub bytes_in: u64,
    /// Frame bytes sent.
    pub bytes_out: u64,
    /// Wall time of the session, dial included, in milliseconds.
    pub ms: u64,
    /// Whether the peer's digest over the scopes it gives us agreed with
    /// ours at the session's end (`None`: not compared).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest_agree: Option<bool>,
    /// Why it did not end `ok`, in one line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Which side of a session this node was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// We dialled (`amos sync`, `serve --sync-every`, a join's first sync).
    Dial,
    /// The peer dialled our `amos serve`.
    Accept,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Dial => "dial",
            Role::Accept => "accept",
        }
    }
}

/// Something that happened to a sync session.
#[derive(Debug, Clone, Copy)]
pub enum SyncEvent<'a> {
    /// A batch from a peer went through the import gate.
    Applied(&'a ApplyReport),
    /// A batch from `peer` committed and took our `seq`s `first..=last`
    /// (none if it changed nothing): push on change relays them to every
    /// other peer, not back to `peer` (docs/design.md §7.10).
    Stored {
        peer: &'a NodeId,
        first: i64,
        last: i64,
    },
    /// A session with `peer` ended (`stats` only when it succeeded).
    Finished {
        /// The peer's node id, as text.
        peer: &'a str,
        role: Role,
        result: SyncResult,
        elapsed: Duration,
        stats: Option<&'a SessionStats>,
    },
}

/// Hears every [`SyncEvent`] of this process. Called on session threads:
/// must be cheap and never block.
pub trait Listener: Send + Sync {
    fn event(&self, e: &SyncEvent<'_>);
}

static LISTENERS: RwLock<Vec<Arc<dyn Listener>>> = RwLock::new(Vec::new());

/// Add a process-wide listener (kept for the life of the process).
pub fn listen(l: Arc<dyn Listener>) {
    LISTENERS.write().unwrap_or_else(|e| e.into_inner()).push(l);
}

/// Tell every listener.
pub fn emit(e: SyncEvent<'_>) {
    for l in LISTENERS.read().unwrap_or_else(|e| e.into_inner()).iter() {
        l.event(&e);
    }
}
