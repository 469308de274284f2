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

pub mod api;
pub mod bench;
pub mod clock;
pub mod error;
pub mod events;
pub mod front;
pub mod home;
pub mod index;
pub mod net;
pub mod ops;
pub mod progress;
pub mod recall;
pub mod store;

pub use api::{NewMemory, Node};
pub use error::{NodeError, Result};
pub use home::Home;
