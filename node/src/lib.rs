//! amos-node: one amos node on one machine.
//!
//! Layers, lowest first (each module uses only its own layer and those
//! below; `tests/tests/it/layers.rs` checks it): `error`, [`clock`],
//! `events` → `home` → `progress` → [`store`] (all SQL of the
//! replicated state) → [`index`] (tantivy, disposable) → [`recall`] (the
//! engine) → [`api`] (the node API, every `impl Node`) → [`net`] (QUIC
//! sessions, dialling, pairing, discovery) → [`ops`] (serve, metrics,
//! doctor, services) → [`front`] (MCP, shared views and request parsing)
//! → [`bench`]. The `amos` binary's CLI is a thin shell over the top.
//!
//! The surface is curated: inside each layer the modules are private and
//! the layer re-exports what callers use (`amos_node::recall::PackOptions`,
//! `amos_node::store::MemoryRecord`); the small layers `error`, `events`,
//! `home` and `progress` are private, their types re-exported here
//! ([`NodeError`], [`SyncResult`], [`Home`], [`Progress`]). A module stays
//! public only as a namespace its functions need (`api::import::aos::read`,
//! `bench::eval::run`, `front::console::start`, `front::mcp::serve_stdio`,
//! `net::transport::connect`, `ops::service::plan`, `index::vectors`, and
//! `store::inspect`, amos-tests' access below the node API, feature
//! `inspect`).
//!
//! Boundary: merge and visibility rules are not re-implemented here; the gate
//! is `amos-acl` and `amos-sync`, facts and signatures are `amos-protocol`.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]

pub mod api;
pub mod bench;
pub mod clock;
mod error;
mod events;
pub mod front;
mod home;
pub mod index;
pub mod net;
pub mod ops;
mod progress;
pub mod recall;
pub mod store;

pub use api::{NewMemory, Node};
pub use error::{NodeError, Result, Rule, UnknownKind};
pub use events::{Observer, PeerOutcome, SessionStats, SyncObserver, SyncResult};
pub use home::{Home, NodeInfo};
pub use progress::{Feedback, Progress, SyncProgress};
