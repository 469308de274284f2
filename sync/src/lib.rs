//! amos-sync: how facts converge between nodes.
//!
//! Owns the merge rule ([`merge`]: last-writer-wins per register, terminal
//! tombstones, fixed fields), the import gate ([`gate`]: what a peer's facts
//! may do here), applying a batch of verified facts through both
//! ([`apply::apply_batch`]), export selection ([`export`]: what may leave for
//! a peer, including retractions), the convergence digest ([`digest`]), the
//! sync session state machine ([`session`]) and, at the edge, the QUIC
//! transport ([`transport`]: mutual TLS with raw ed25519 keys, framing).
//! Storage is reached only through [`ReplicaStore`], which `amos-node`
//! implements over SQLite and [`memstore::MemStore`] implements in memory.
//!
//! Invariant: apply takes only `Verified` facts; every fact from a peer goes
//! through the gate before the merge rule, and a refused fact never reaches
//! the store (it is reported, and the rest of the batch still applies).
//!
//! Boundary: everything but [`transport`] is sans-IO — no SQL, no sockets, no
//! clocks (`now_ms` is an argument); [`transport`] owns sockets and never
//! touches storage. The dependency direction is `amos-protocol` ←
//! `amos-acl` ← `amos-sync` ← `amos-node`.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod apply;
pub mod digest;
pub mod export;
pub mod gate;
pub mod memstore;
pub mod merge;
pub mod session;
pub mod text;
pub mod transport;

pub use apply::{ApplyReport, MemoryState, ReplicaStore, Sender, apply_batch};
pub use gate::{Admission, DeferReason, Effect, Refusal};
pub use merge::Verdict;
