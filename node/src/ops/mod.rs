//! Operations around a running node: `amos serve` ([`serve`]) and its
//! background encoder catch-up ([`encoder`]), the `/metrics` endpoint ([`metrics`]), `amos doctor` ([`doctor`]), systemd
//! units ([`service`]) and `agents.toml` ([`fleet`]).
//!
//! Boundary: composes the node API (`crate::api`) and the network layer
//! (`crate::net`); neither of those imports anything from here.

pub mod doctor;
pub(crate) mod encoder;
pub mod fleet;
pub mod metrics;
pub(crate) mod serve;
pub mod service;

pub use serve::{ServeOptions, serve};
