//! `amos bench`: the benchmark that ships with amos.
//!
//! * `amos bench --corpus DIR` loads a workload into a throw-away home and
//!   times the node on it (`corpus.rs`), with two sections of its own: live
//!   sync between two in-process nodes over loopback QUIC (`sync.rs`) and
//!   concurrent edits of one long memory (`text.rs`).
//!
//! Boundary: the bench drives the node through its public API (the same
//! calls the CLI makes); it never bypasses the gate, verification or the
//! import path, and talks to nothing but its own loopback endpoints.

mod corpus;
mod stats;
mod sync;
mod text;
mod workload;

pub use corpus::{BenchConfig, BenchReport, run};
pub use stats::{Millis, peak_rss_bytes};
pub use sync::SyncReport;
pub use text::TextReport;
pub use workload::{Org, OrgProject, WorkloadMemory, WorkloadQuery};
