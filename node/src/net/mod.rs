//! The network edge: the QUIC transport ([`transport`]) the sync sessions
//! run over.
//!
//! Boundary: sockets live here and in the session driver; the sync session
//! itself (`amos_sync::session`) is sans-IO.

pub mod transport;
