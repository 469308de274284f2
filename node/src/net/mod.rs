//! The network edge (docs/design.md §7): sync sessions with peers over
//! QUIC — the session driver ([`session`]), dialling a pass ([`dial`]),
//! accepting a connection ([`accept`]), pairing over the wire ([`join`]),
//! when to push news to peers ([`push`], sans-IO),
//! LAN discovery ([`discovery`]), relays and relayed connections
//! ([`relay`]) and the transport itself ([`transport`]).
//! `amos serve` composes these with the operations around them in
//! `crate::ops::serve`.
//!
//! A session runs over one bidirectional QUIC stream (the dialling side opens
//! it); every frame carries one `SyncMessage::V1`, at the protocol version
//! the handshake's ALPN id chose (docs/design.md §13). The protocol itself is
//! the sans-IO `Session` of `amos-sync`; this module only carries out its
//! actions:
//!
//! * the node work runs on blocking threads, each with its own [`Node`](crate::api::Node)
//!   opened from the [`Home`](crate::home::Home) (a store connection is not `Sync`): one thread drives the
//!   session and applies the peer's batches, and a second one streams our
//!   export while the first keeps applying — so neither side can stall the
//!   other with a full pipe; the batches already received are applied
//!   together (up to `APPLY_MAX` facts, one transaction), and the next
//!   group verifies on a thread of its own meanwhile;
//! * two async tasks shuttle frames between the stream halves and bounded
//!   channels (backpressure, bounded memory); every wait on the peer has a
//!   timeout;
//! * every fact is verified before it is applied; any transport, protocol
//!   or verification error aborts the session, and the session guarantees
//!   no watermark moved past what committed;
//! * a dialler may pass a [`SyncObserver`](crate::events::SyncObserver) that hears of every batch applied
//!   and sent (the CLI's progress line); the sans-IO session knows nothing
//!   of it.
//!
//! Completion: a side finishes its send stream only after its session
//! finished, so reading the peer's end of stream means the peer finished
//! too; the dialler then closes the connection.

//!
//! Boundary: sockets, the async runtime and session threads live here; the
//! protocol is `amos_sync::session` (sans-IO), storage is the node API.
//! Sessions tell what they do as [`crate::events`]; nothing here imports
//! metrics or progress.

pub(crate) mod accept;
pub(crate) mod dial;
pub(crate) mod discovery;
pub(crate) mod join;
pub(crate) mod push;
pub mod relay;
pub(crate) mod session;
pub mod transport;

pub use dial::{
    Pacing, Probe, probe_blocking, sync_pass, sync_pass_blocking, sync_peers, sync_with,
};
pub use discovery::{SeenNode, discover};
pub use join::{AgentLeftOut, JoinAgent, join_agent, join_blocking};
pub use push::PushConfig;
pub use session::{drive_accepted_session, drive_session, learned_addr};

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use amos_sync::session::SessionError;

use crate::error::{NodeError, Result};
use crate::events::SyncResult;
use transport::TransportError;

/// Where `amos serve` listens by default (docs/design.md §7: UDP 4747).
pub const DEFAULT_LISTEN: &str = "[::]:4747";
/// The longest wait for anything from the peer.
pub(crate) const PEER_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest wait for the peer's end of stream after its `Done` (it
/// comes once the peer has received our whole export).
pub(crate) const AFTER_DONE_TIMEOUT: Duration = Duration::from_secs(6 * 3600);
/// The longest wait for an incoming handshake to complete.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest wait, by default, for a peer we dial to resolve and answer
/// the handshake: what an unreachable peer costs a dial. Two of QUIC's
/// handshake retransmissions fit in it (a lossy LAN); relays and slow
/// links ask for more with `--connect-timeout`.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_millis(2500);
/// This process's bound on a dial's handshake, in ms ([`connect_timeout`]).
static DIAL_TIMEOUT_MS: AtomicU64 = AtomicU64::new(DEFAULT_CONNECT_TIMEOUT.as_millis() as u64);

/// Bound every dial this process makes from now on (`--connect-timeout`):
/// resolving the address and the handshake, each. A front end sets it
/// once, before it dials.
pub fn set_connect_timeout(d: Duration) {
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1);
    DIAL_TIMEOUT_MS.store(ms, Ordering::Relaxed);
}

/// How long a dial waits for the peer's handshake (and for its address to
/// resolve): [`DEFAULT_CONNECT_TIMEOUT`] unless [`set_connect_timeout`]
/// said otherwise.
pub(crate) fn connect_timeout() -> Duration {
    Duration::from_millis(DIAL_TIMEOUT_MS.load(Ordering::Relaxed))
}
/// Facts per `Facts` message.
pub(crate) const EXPORT_BATCH: usize = 64;
/// At most this many facts from a peer are verified and applied at once:
/// the batches already received go in together (one transaction).
pub(crate) const APPLY_MAX: usize = 4096;
/// Depth of the channels between the stream tasks and the node threads.
pub(crate) const CHANNEL_DEPTH: usize = 8;

/// Why a session failed.
#[derive(Debug, thiserror::Error)]
pub enum MeshError {
    /// The connection failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The session's state machine refused a message.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The node failed (store, index).
    #[error(transparent)]
    Node(#[from] NodeError),
    /// A fact from the peer did not verify.
    #[error("a fact from the peer does not verify: {0}")]
    BadFact(String),
    /// The peer sent bytes that do not decode.
    #[error("the peer sent an undecodable message: {0}")]
    BadMessage(String),
    /// The session could not go on (a stream or channel closed, nothing sent).
    #[error("{0}")]
    Closed(String),
    /// The peer speaks a protocol version older than we accept (it was
    /// sent the same line).
    #[error("refused: {0}")]
    Version(#[from] amos_protocol::wire::VersionError),
}

impl MeshError {
    /// How a pass reports this failure.
    pub(crate) fn result(&self) -> SyncResult {
        match self {
            MeshError::Transport(TransportError::Refused { .. })
            | MeshError::Session(SessionError::Refused(_))
            | MeshError::Version(_) => SyncResult::Refused,
            MeshError::Transport(TransportError::Unreachable { .. }) => SyncResult::Unreachable,
            _ => SyncResult::Failed,
        }
    }
}

/// A multi-threaded runtime for the blocking entry points.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(NodeError::io("starting the async runtime"))
}
