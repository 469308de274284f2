//! When to dial whom (docs/design.md §7.8, §7.10): the pacing of periodic
//! sync passes and the push-on-change scheduler, as sans-IO state machines
//! that `amos serve` (amos-node's `net::dial`, `net::push`, `ops::serve`)
//! and the mesh simulator (amos-sim's `mesh`) both drive — the one copy of
//! the rule.
//!
//! Events go in as method calls (the store's `seq` moved, a batch from a
//! peer took some `seq`s, the reachable peers changed, a session ended
//! well or not, time passed); decisions come out (the peers to dial now,
//! when to ask again). Times are milliseconds on a monotonic clock the
//! caller owns; randomness (the passes' jitter) is an argument. Peers are
//! whatever key the caller names them by (`P: Ord + Clone`: NodeIds as
//! text in the node, indexes in the simulator).
//!
//! Modules point one way: `pacing` ← `push`.
//!
//! Boundary: decisions only. It must never touch a socket, a store, a
//! clock, a random source or an async runtime.

mod pacing;
mod push;

pub use pacing::{Pacing, SessionOutcome};
pub use push::{PushConfig, PushScheduler, SETTLE_MS};
