//! amos-protocol: the vocabulary every amos node shares.
//!
//! Owns ids ([`NodeId`], [`MemoryId`], slugs), the hybrid logical clock
//! ([`Hlc`]), scopes and grants ([`Scope`], [`Grants`]), the replicated
//! [`Fact`] types, their canonical encoding (bincode 2) and ed25519 signing
//! ([`NodeIdentity`], [`SignedFact`], [`Verified`]), the one verifier of
//! signed facts from outside ([`verify`]), and the bundle file
//! format ([`bundle`], encrypted under a [`MeshKey`]).
//!
//! Invariant: a [`Verified`] fact carries a valid signature by its author and
//! passed [`Fact::validate`]; only this crate can build one.
//!
//! Boundary: this crate does no I/O of its own: bundles are read from and
//! written to the `std::io::Read`/`Write` values callers hand in. Time and
//! randomness come in as arguments.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod bundle;
pub mod codec;
pub mod error;
pub mod fact;
pub mod hlc;
pub mod id;
pub mod mesh;
pub mod pairing;
pub mod scope;
pub mod sign;
pub mod verify;
pub mod wire;

pub use bundle::{
    BundleError, BundleHeader, BundleSummary, BundleWriter, PairingProof, ReadError, Recipient,
    VerifiedBundle, read_verified, verify_bundle,
};
pub use error::ProtocolError;
pub use fact::{
    AgentFact, Fact, FactBody, LinkFact, MembershipFact, MemoryAcl, MemoryContent, MemoryFixed,
    MemoryText, MemoryTombstone, OrgScope, ProfileFact, ProjectFact, Register, TeamFact, Validity,
};
pub use hlc::{Hlc, HlcState, MAX_TIME_MS};
pub use id::{AgentId, MemoryId, MemoryType, NodeId, ProjectId, Relation, Slug, TeamId};
pub use mesh::MeshKey;
pub use scope::{Grants, Scope};
pub use sign::{NodeIdentity, SignedFact, Verified};
pub use verify::{BatchError, CheckedBatch, verify_all, verify_batch, verify_each, verify_one};
