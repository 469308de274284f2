//! amos-sync: how facts converge between nodes — sans-IO.
//!
//! Owns the replica contract (`replica`: [`ReplicaStore`], [`MemoryState`],
//! [`Sender`]), what the import gate decides with (`admission`: refusals
//! with stable codes, deferrals, a memory's standing, the [`Admission`] of
//! a fact), the gate itself ([`gate`]: what a peer's facts may do here), the
//! merge rule (`merge`: last-writer-wins per register, terminal
//! tombstones, fixed fields), applying a batch of verified facts through
//! both ([`apply_batch`]), edited text as automerge documents
//! ([`text`]), export selection ([`export`]: what may leave for a peer,
//! including retractions; `echo`: the `seq` ranges, [`EchoRanges`], whose rows hold only
//! what a peer has, which an export to it skips), the convergence digest
//! ([`digest`]), range-based repair
//! ([`repair`]: negentropy set reconciliation over what a peer may
//! receive), the sync session state machine ([`session`]) and when to
//! dial whom (`schedule`: the passes' [`Pacing`] and the
//! [`PushScheduler`], which `amos serve` and amos-sim both drive).
//! Storage is reached only through [`ReplicaStore`], which `amos-node`
//! implements over SQLite; the in-memory twin `MemStore`
//! (feature `twin`, for tests) implements it in memory.
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
//!
//! # Surface
//!
//! Modules are private and the chosen types are re-exported here
//! (`amos_sync::Admission`, `amos_sync::EchoRanges`, `amos_sync::MemStore`).
//! Six stay public because their namespace is the point: [`gate`]
//! (`gate::check` and its verdict `gate::Gate`), [`export`] (the export
//! filter's predicates, `export::memory`, `export::org`, `export::link`),
//! [`digest`] (`digest::compared_over`, `digest::to_hex`), [`repair`] (the
//! reconciliation's `Initiator`, `Step`, `respond`), [`session`] (the
//! session's `Event`, `Action`, `Session`) and [`text`] (`TextDoc`,
//! `TextLog` and the checks of a change): names that read as anything
//! without their module.
#![warn(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod admission;
mod apply;
pub mod digest;
mod echo;
pub mod export;
pub mod gate;
#[cfg(any(test, feature = "twin"))]
mod memstore;
mod merge;
pub mod repair;
mod replica;
mod schedule;
pub mod session;
pub mod text;

pub use admission::{Admission, DeferReason, Effect, Refusal, Standing};
pub use apply::{ApplyReport, apply_batch};
pub use echo::{EchoRanges, MAX_RANGES as MAX_ECHO_RANGES, held_by_peer};
#[cfg(any(test, feature = "twin"))]
pub use memstore::{MemMeta, MemStore};
pub use merge::Verdict;
pub use replica::{Clash, MemoryState, ReplicaStore, Sender};
pub use schedule::{Pacing, PushConfig, PushScheduler, SETTLE_MS, SessionOutcome};
