//! amos-sync: how facts converge between nodes — sans-IO.
//!
//! Owns the replica contract ([`replica`]: [`ReplicaStore`], [`MemoryState`],
//! [`Sender`]), what the import gate decides with ([`admission`]: refusals
//! with stable codes, deferrals, a memory's standing, the [`Admission`] of
//! a fact), the gate itself ([`gate`]: what a peer's facts may do here), the
//! merge rule ([`merge`]: last-writer-wins per register, terminal
//! tombstones, fixed fields), applying a batch of verified facts through
//! both ([`apply::apply_batch`]), edited text as automerge documents
//! ([`text`]), export selection ([`export`]: what may leave for a peer,
//! including retractions; [`echo`]: the `seq` ranges whose rows hold only
//! what a peer has, which an export to it skips), the convergence digest
//! ([`digest`]), range-based repair
//! ([`repair`]: negentropy set reconciliation over what a peer may
//! receive) and the sync session state machine ([`session`]). Storage is reached only through
//! [`ReplicaStore`], which `amos-node` implements over SQLite; the
//! in-memory twin `memstore::MemStore` (feature `twin`, for tests)
//! implements it in memory.
//!
//! Invariant: apply takes only `Verified` facts; every fact from a peer goes
//! through the gate before the merge rule, and a refused fact never reaches
//! the store (it is reported, and the rest of the batch still applies).
//!
//! Boundary: sans-IO — no SQL, no sockets, no clocks (`now_ms` is an
//! argument), no async runtime; the QUIC transport that carries sessions
//! lives in `amos-node` (`net::transport`). The dependency direction is
//! `amos-protocol` ← `amos-acl` ← `amos-sync` ← `amos-node`. Modules
//! point one way: `admission` ← `replica` ← `gate`, `merge` ← `apply`.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod admission;
pub mod apply;
pub mod digest;
pub mod echo;
pub mod export;
pub mod gate;
#[cfg(any(test, feature = "twin"))]
pub mod memstore;
pub mod merge;
pub mod repair;
pub mod replica;
pub mod session;
pub mod text;

pub use apply::{ApplyReport, apply_batch};
pub use gate::{Admission, DeferReason, Effect, Refusal};
pub use merge::Verdict;
pub use replica::{MemoryState, ReplicaStore, Sender};
