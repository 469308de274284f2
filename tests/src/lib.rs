//! amos-tests: cross-crate and multi-node tests, simulations and the
//! benchmark harness. Single-node CLI tests live beside the binary in
//! `node/tests/` (they need `CARGO_BIN_EXE_amos`); multi-node tests that
//! start several `amos` processes arrive here with replication.
//!
//! [`replica`] is the one replica contract the convergence property tests
//! and the escalation matrix run on, over the in-memory twin and over the
//! real SQLite store.

pub mod replica;
