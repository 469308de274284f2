//! amos-sim: a deterministic mesh simulator over the product's sans-IO
//! sync session.
//!
//! N nodes hold in-memory replicas ([`replica::SimReplica`]: the twin
//! `amos_sync::memstore::MemStore` plus a change log, epoch and
//! watermarks) and sync with their neighbours in a random topology
//! ([`topology::Graph`]) on a virtual clock ([`clock::Clock`]): every
//! session is two `amos_sync::session::Session`s exchanging `SyncV1`
//! messages through the real codec, sizes counted, latency per message
//! ([`mesh::Mesh`]). Scheduling is periodic and/or push (docs/design.md
//! §7.8, §7.10), each node running the product's schedulers
//! (`amos_sync::Pacing`, `amos_sync::PushScheduler`); faults are message
//! loss, partitions, nodes offline and restores from backup (whose
//! sessions repair, `amos_sync::repair`).
//! Each node speaks a protocol version and features ([`mesh::Speaks`]):
//! sessions negotiate, pick their digest kind and hold back what a peer
//! cannot decode by the product's rules (docs/design.md §13,
//! `amos_sync::session::HeldBack`), so a mesh can be upgraded node by node.
//! A mesh may have relays and members behind NAT ([`mesh::RelayConfig`],
//! docs/design.md §7.11): a **relayed link** between A and B exists only
//! through a relay node R — R online, A–R and B–R reachable, B listening
//! at R — and R, a pure relay (policy `none` with both, no sync link),
//! holds nothing of theirs; a relayed session's frames are checked end to
//! end and may be corrupted, dropped or reordered as the product's
//! `AMOS_RELAY_FAULT` does ([`mesh::RelayFault`]), which fails sessions or
//! delays them, never changes a store; a member behind NAT is dialled
//! only through its relay, or dials out itself ([`mesh::Reach`]).
//! [`check::convergence`] judges a mesh ([`check::convergence_among`] a
//! part of a mixed one), [`check::stores_authentic`] and
//! [`check::watermarks_hold`] the invariants no fault may break; [`bench`] runs the scenarios
//! `amos --json bench --mesh N` reports.
//!
//! Invariant: same configuration and seed, same run (no real clock, no
//! OS randomness, ordered maps only).
//!
//! Boundary: no sockets, files, threads or async runtime; every merge,
//! gate, export, digest and scheduling rule is the product's
//! (`amos_sync`), never re-implemented here. Modules point one way: `rng`, `clock`, `topology`
//! ← `replica` ← `mesh` ← `check` ← `bench`.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod bench;
pub mod check;
pub mod clock;
pub mod mesh;
pub mod replica;
pub mod rng;
pub mod topology;

pub use amos_sync::PushConfig;
pub use check::{Convergence, convergence};
pub use clock::{MS, Micros, SECOND};
pub use mesh::{Mesh, MeshConfig, SessionRecord, Stats};
