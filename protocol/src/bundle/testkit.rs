//! What the bundle tests share: identities and facts to put in a bundle,
//! writers of both formats (today's compressed one and the uncompressed one
//! still read), both passes as one import, and a bundle's layout (where
//! the header, each frame and the trailer lie), so a test can damage one
//! region and say what it expects.

use super::format::PREFIX_LEN;
use super::{
    BundleError, BundleWriter, OpenWith, PairingProof, Postmark, ReadError, Recipient, SealTo,
    read_verified, read_verified_with, verify_bundle, verify_bundle_with,
};
use crate::{
    AgentId, Fact, FactBody, Hlc, MemoryContent, MemoryFixed, MemoryId, MemoryText, MemoryType,
    MeshKey, NodeId, NodeIdentity, TeamFact, TeamId,
};

pub(super) fn ident(seed: u8) -> NodeIdentity {
    NodeIdentity::from_secret([seed; 32])
}

pub(super) fn clock(node: NodeId, wall_ms: u64) -> Hlc {
    Hlc {
        wall_ms,
        logical: 0,
        node,
    }
}

pub(super) fn memory_fact(id: &NodeIdentity, i: u64) -> Vec<u8> {
    let mut random = [0u8; 10];
    random[..8].copy_from_slice(&i.to_le_bytes());
    memory_with(
        id,
        1_700_000_000_000 + i,
        random,
        format!("memory {i}: the release build runs clippy with -D warnings first"),
        vec!["build".into(), "rust".into()],
        0.5,
    )
}

pub(super) fn team_fact(id: &NodeIdentity, i: u64) -> Vec<u8> {
    let fact = Fact {
        clock: clock(id.node_id(), 1_000 + i),
        body: FactBody::Team(TeamFact {
            id: TeamId::parse(&format!("team-{i}")).unwrap(),
            origin: NodeId([7; 32]),
            name: format!("Team {i}"),
            present: true,
        }),
    };
    id.sign(fact).unwrap().to_bytes()
}

pub(super) fn key() -> MeshKey {
    MeshKey::from_bytes([0x42; 32])
}

pub(super) fn scopes() -> Vec<String> {
    vec!["team:apollo".into(), "global".into()]
}

pub(super) fn build_with(
    id: &NodeIdentity,
    key: Option<&MeshKey>,
    seed: [u8; 16],
    frames: &[Vec<Vec<u8>>],
) -> Vec<u8> {
    build_format(Format::Compressed, id, key, seed, frames)
}

/// Which format a test bundle is written in.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Format {
    /// What amos writes (5, or 6 with a pairing proof).
    Compressed,
    /// What it wrote before and still reads (3, or 4).
    Uncompressed,
}

pub(super) const FORMATS: [Format; 2] = [Format::Compressed, Format::Uncompressed];

pub(super) fn writer(
    format: Format,
    id: &NodeIdentity,
    recipient: Recipient,
    key: Option<&MeshKey>,
    seed: [u8; 16],
    pairing: Option<PairingProof>,
) -> BundleWriter<Vec<u8>> {
    let make = match format {
        Format::Compressed => BundleWriter::with_pairing,
        Format::Uncompressed => BundleWriter::uncompressed,
    };
    make(
        Vec::new(),
        id,
        recipient,
        clock(id.node_id(), 5_000),
        scopes(),
        key,
        seed,
        pairing,
    )
    .unwrap()
}

pub(super) fn build_format(
    format: Format,
    id: &NodeIdentity,
    key: Option<&MeshKey>,
    seed: [u8; 16],
    frames: &[Vec<Vec<u8>>],
) -> Vec<u8> {
    let mut w = writer(format, id, Recipient::AnyPeer, key, seed, None);
    for f in frames {
        w.write_frame(f).unwrap();
    }
    let (bytes, summary) = w.finish().unwrap();
    assert_eq!(summary.bytes, bytes.len() as u64);
    assert_eq!(summary.frames, frames.len() as u64);
    bytes
}

/// Three frames of 2, 1 and 3 facts from two authors (the sender relays
/// a fact written by another node).
pub(super) fn sample_frames() -> Vec<Vec<Vec<u8>>> {
    let a = ident(1);
    let b = ident(2);
    vec![
        vec![memory_fact(&a, 1), team_fact(&a, 2)],
        vec![memory_fact(&b, 3)],
        vec![team_fact(&b, 4), memory_fact(&a, 5), team_fact(&a, 6)],
    ]
}

pub(super) fn sample(key: Option<&MeshKey>) -> Vec<u8> {
    build_with(&ident(1), key, [7; 16], &sample_frames())
}

pub(super) fn sample_in(format: Format, key: Option<&MeshKey>) -> Vec<u8> {
    build_format(format, &ident(1), key, [7; 16], &sample_frames())
}

/// Both passes; returns the facts per frame as wire bytes.
pub(super) fn import(
    bytes: &[u8],
    key: Option<&MeshKey>,
) -> Result<Vec<Vec<Vec<u8>>>, BundleError> {
    let verified = verify_bundle(bytes, key)?;
    let mut frames = Vec::new();
    let summary = read_verified(bytes, key, &verified, |facts| {
        frames.push(facts.iter().map(|f| f.to_bytes()).collect::<Vec<_>>());
        Ok::<(), std::convert::Infallible>(())
    })
    .map_err(|e| match e {
        ReadError::Bundle(b) => b,
        ReadError::Apply(never) => match never {},
    })?;
    assert_eq!(summary, verified.summary());
    Ok(frames)
}

/// Byte ranges of the regions of a well-formed bundle.
pub(super) struct Layout {
    pub(super) header_end: usize,
    pub(super) frames: Vec<(usize, usize)>, // (start of length prefix, end of frame bytes)
    pub(super) terminator: usize,
    pub(super) trailer_len: usize,
}

pub(super) fn layout(bytes: &[u8]) -> Layout {
    let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap()) as usize;
    let header_end = PREFIX_LEN + u32_at(10);
    let mut at = header_end;
    let mut frames = Vec::new();
    loop {
        let len = u32_at(at);
        if len == 0 {
            break;
        }
        frames.push((at, at + 4 + len));
        at += 4 + len;
    }
    Layout {
        header_end,
        frames,
        terminator: at,
        trailer_len: at + 4,
    }
}

/// A memory fact with the given text and tags, by `author`.
pub(super) fn memory_with(
    author: &NodeIdentity,
    ms: u64,
    random: [u8; 10],
    text: String,
    tags: Vec<String>,
    importance: f32,
) -> Vec<u8> {
    let node = author.node_id();
    let fact = Fact {
        clock: clock(node, ms),
        body: FactBody::MemoryContent(MemoryContent {
            id: MemoryId::new(ms, random),
            fixed: MemoryFixed {
                owner: AgentId::parse("claude-1").unwrap(),
                created_ms: ms,
                origin: node,
            },
            kind: MemoryType::default(),
            text: MemoryText::Plain(text),
            tags,
            importance,
            confidence: 1.0,
            pinned: false,
            expires_ms: None,
            supersedes: None,
            validity: Default::default(),
        }),
    };
    author.sign(fact).unwrap().to_bytes()
}

/// A bundle by `sender` sealed to `to`, holding `frames`.
pub(super) fn sealed_with(
    sender: &NodeIdentity,
    to: &NodeIdentity,
    ephemeral: [u8; 32],
    seed: [u8; 16],
    frames: &[Vec<Vec<u8>>],
    pairing: Option<PairingProof>,
    postmark: Option<Postmark>,
) -> Vec<u8> {
    let mut w = BundleWriter::sealed(
        Vec::new(),
        sender,
        SealTo {
            recipient: to.node_id(),
            ephemeral,
        },
        clock(sender.node_id(), 5_000),
        scopes(),
        seed,
        pairing,
        postmark,
    )
    .unwrap();
    for f in frames {
        w.write_frame(f).unwrap();
    }
    w.finish().unwrap().0
}

/// The sample frames from `ident(1)`, sealed to `ident(3)`.
pub(super) fn sealed_sample() -> Vec<u8> {
    sealed_with(
        &ident(1),
        &ident(3),
        [5; 32],
        [7; 16],
        &sample_frames(),
        None,
        None,
    )
}

/// Both passes with `keys`; returns the facts per frame as wire bytes.
pub(super) fn import_with(
    bytes: &[u8],
    keys: OpenWith<'_>,
) -> Result<Vec<Vec<Vec<u8>>>, BundleError> {
    let verified = verify_bundle_with(bytes, keys)?;
    let mut frames = Vec::new();
    let summary = read_verified_with(bytes, keys, &verified, |facts| {
        frames.push(facts.iter().map(|f| f.to_bytes()).collect::<Vec<_>>());
        Ok::<(), std::convert::Infallible>(())
    })
    .map_err(|e| match e {
        ReadError::Bundle(b) => b,
        ReadError::Apply(never) => match never {},
    })?;
    assert_eq!(summary, verified.summary());
    Ok(frames)
}

/// The keys of a node holding the mesh key and `identity`.
pub(super) fn keys<'a>(mesh: Option<&'a MeshKey>, identity: &'a NodeIdentity) -> OpenWith<'a> {
    OpenWith {
        mesh,
        identity: Some(identity),
    }
}
