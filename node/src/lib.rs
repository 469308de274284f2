//! amos-node: one amos node on one machine.
//!
//! Layers, lowest first (each module uses only its own layer and those
//! below; `tests/tests/it/layers.rs` checks it): [`error`], [`clock`],
//! [`events`] → [`home`] → [`progress`] → [`store`] (all SQL of the
//! replicated state) → [`index`] (tantivy, disposable) → [`recall`] (the
//! engine) → [`api`] (the node API, every `impl Node`) → [`net`] (QUIC
//! sessions, dialling, pairing, discovery) → [`ops`] (serve, metrics,
//! doctor, services) → [`front`] (MCP, shared views and request parsing)
//! → [`bench`]. The `amos` binary's CLI is a thin shell over the top.
//!
//! Boundary: merge and visibility rules are not re-implemented here; the gate
//! is `amos-acl` and `amos-sync`, facts and signatures are `amos-protocol`.
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
