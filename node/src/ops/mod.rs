//! Operations around a running node: `amos serve` ([`serve`]) and its
//! background encoder catch-up ([`encoder`]), the `/metrics` endpoint ([`metrics`]), `amos doctor` ([`doctor`]), systemd
//! units ([`service`]) and `agents.toml` ([`fleet`]).
//!
//! Boundary: composes the node API (`crate::api`) and the network layer
//! (`crate::net`); neither of those imports anything from here.

pub(crate) mod doctor;
pub(crate) mod encoder;
pub(crate) mod fleet;
pub(crate) mod metrics;
pub(crate) mod serve;
pub mod service;

pub use doctor::{DoctorCheck, DoctorReport, run as doctor};
pub use fleet::{DeclaredAgent, FleetReport, apply as apply_fleet};
pub use serve::{ServeOptions, Started, serve};
