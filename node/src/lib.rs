//! amos-node: one amos node on one machine.
//!
//! Owns the home directory ([`home`]), the authoritative SQLite store
//! ([`store`]), the disposable tantivy index ([`index`]), the recall pipeline
//! ([`recall`]) and the node API ([`node::Node`]) that the `amos` binary's CLI
//! is a thin shell over.
//!
//! Boundary: merge and visibility rules are not re-implemented here; the gate
//! is `amos-acl`, facts and signatures are `amos-protocol`.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod bench;
pub mod bundles;
pub mod clock;
pub mod discovery;
pub mod doctor;
pub mod error;
pub mod fleet;
pub mod home;
pub mod index;
pub mod mcp;
pub mod mesh;
pub mod metrics;
pub mod node;
pub mod ops;
pub mod pairing;
pub mod peers;
pub mod profile;
pub mod progress;
pub mod recall;
pub mod replica;
pub mod service;
pub mod store;
pub mod text;
pub mod view;

pub use error::{NodeError, Result};
pub use home::Home;
pub use node::{NewMemory, Node};
