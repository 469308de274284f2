//! `amos bench`: the benchmark that ships with amos.
//!
//! * `amos bench --generate N DIR [--seed S]` writes a deterministic
//!   workload (org, memories, queries) from a fixed corpus model
//!   (`generate.rs`; the format is in `workload.rs`).
//! * `amos bench --corpus DIR` loads a workload into a throw-away home and
//!   times the node on it (`corpus.rs`), with two sections of its own: live
//!   sync between two in-process nodes over loopback QUIC (`sync.rs`) and
//!   concurrent edits of one long memory (`text.rs`).
//!
//! * `amos bench --mesh N [--degree D] [--seed S]` simulates a mesh of N
//!   in-memory nodes on a virtual clock (`amos_sim`) and reports its sync
//!   figures (`mesh.rs`).
//!
//! * `amos eval FILE` measures recall quality (hit@1, hit@5, MRR per mode)
//!   on a golden set in a throw-away home (`eval.rs`).
//!
//! `docs/bench.md` says how to reproduce every published figure.
//!
//! Boundary: the bench drives the node through its public API (the same
//! calls the CLI makes); it never bypasses the gate, verification or the
//! import path, and talks to nothing but its own loopback endpoints.

mod corpus;
mod edits;
pub mod eval;
mod generate;
pub(crate) mod mesh;
mod stats;
mod sync;
mod workload;

pub use corpus::{BenchConfig, BenchReport, EncoderBench, build_org, run};
pub use edits::TextReport;
pub use generate::{
    DEFAULT_SEED, GenerateConfig, GenerateReport, VisibilityMix, generate, is_framed, org,
};
pub use mesh::{MeshReport, run as run_mesh};
pub use stats::{Machine, Millis, PhaseMemory, peak_rss_bytes};
pub use sync::SyncReport;
pub use workload::{Org, OrgProject, WorkloadMemory, WorkloadQuery};
