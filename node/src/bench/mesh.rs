//! `amos bench --mesh N`: the mesh simulator's scenarios (`amos_sim::bench`)
//! on N nodes of degree D — first sync, idle bytes, revocation with push
//! off, push latency, repair after a restore — as one JSON report.
//!
//! Boundary: no home, no store, no sockets: the simulator's in-memory
//! replicas on virtual time; it measures the sync protocol and its rules
//! at scale, not this machine.

pub use amos_sim::bench::MeshReport;

/// Run every scenario on a mesh of `nodes` nodes of degree `degree`.
pub fn run(nodes: usize, degree: usize, seed: u64) -> MeshReport {
    amos_sim::bench::run(&amos_sim::bench::MeshBench::new(nodes, degree, seed))
}
