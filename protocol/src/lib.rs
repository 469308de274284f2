//! amos-protocol: the vocabulary every amos node shares.
//!
//! Owns ids ([`NodeId`], [`MemoryId`], slugs), the hybrid logical clock
//! ([`Hlc`]), scopes and grants ([`Scope`], [`Grants`]), the replicated
//! [`Fact`] types, their canonical encoding (bincode 2) and ed25519 signing
//! ([`NodeIdentity`], [`SignedFact`], [`Verified`]), the one verifier of
//! signed facts from outside ([`verify_all`] and its kin), and the bundle file
//! format ([`BundleWriter`], [`verify_bundle`], [`read_verified`]; encrypted
//! under a [`MeshKey`]).
//!
//! Invariant: a [`Verified`] fact carries a valid signature by its author and
//! passed [`Fact::validate`]; only this crate can build one.
//!
//! Boundary: this crate does no I/O of its own: bundles are read from and
//! written to the `std::io::Read`/`Write` values callers hand in. Time and
//! randomness come in as arguments.
//!
//! # Surface
//!
//! Modules are private and the types a caller needs are re-exported here,
//! so `amos_protocol::Fact`, never `amos_protocol::fact::Fact`. Three
//! modules stay public because their namespace is the point: [`codec`]
//! (`codec::encode`, `codec::decode_signed`: the canonical encoding's
//! free functions, which would read as anything at the root), [`wire`]
//! (the versioned session messages, `wire::SyncMessage::V1`, one module
//! per the style guide so a format change is one place) and [`pairing`]
//! (the pairing code and the proofs built from its secret:
//! `pairing::join_proof`, `pairing::invite_id`).
#![warn(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod bundle;
pub mod codec;
mod error;
mod fact;
mod hlc;
mod id;
mod mesh;
pub mod pairing;
mod scope;
mod sign;
mod verify;
pub mod wire;

pub use bundle::{
    BundleError, BundleHeader, BundleInfo, BundleSummary, BundleWriter,
    FORMAT_VERSION as BUNDLE_FORMAT_VERSION, FRAME_FACTS as BUNDLE_FRAME_FACTS, OpenWith,
    PairingProof, Postmark, ReadError, Recipient, SEALED_FORMAT_VERSION as BUNDLE_SEALED_VERSION,
    SealTo, VerifiedBundle, peek_header, read_verified, read_verified_with, verify_bundle,
    verify_bundle_with,
};
pub use error::ProtocolError;
pub use fact::{
    AgentFact, Fact, FactBody, LinkFact, MAX_CHANGE_BYTES, MAX_SNAPSHOT_BYTES, MAX_TAG_CHARS,
    MAX_TAGS, MAX_TEXT_BYTES, MembershipFact, MemoryAcl, MemoryContent, MemoryFixed, MemoryText,
    MemoryTombstone, OrgScope, ProfileFact, ProjectFact, Register, TeamFact, Validity, check_tags,
    check_text, check_unit,
};
pub use hlc::{Hlc, HlcState, MAX_TIME_MS};
pub use id::{
    AgentId, MemoryId, MemoryType, NodeId, ProjectId, QUALIFIER_LEN, Relation, Slug, TeamId,
    base32_decode, base32_encode, qualifier_of,
};
pub use mesh::MeshKey;
pub use scope::{Grants, Scope};
pub use sign::{NodeIdentity, SignedFact, Verified};
pub use verify::{
    BatchError, CheckedBatch, PARALLEL_MIN as VERIFY_PARALLEL_MIN, verify_all, verify_batch,
    verify_each, verify_one,
};
