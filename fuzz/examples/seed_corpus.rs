//! Write valid inputs for the fuzz targets into `corpus/<target>/`, so the
//! fuzzer starts from well-formed bundles, facts and sync frames (one of
//! every session message) and mutates inward.
//! `cargo run --example seed_corpus` (run.sh does it).

use std::fs;
use std::path::Path;

use amos_protocol::wire::{SyncMessage, SyncV1, Watermark};
use amos_protocol::{
    AgentId, BundleWriter, Fact, FactBody, Hlc, MemoryContent, MemoryFixed, MemoryId, MemoryText,
    MemoryType, MeshKey, NodeId, NodeIdentity, OrgScope, PairingProof, Postmark, Recipient, Scope,
    SealTo, TeamFact, TeamId,
};

fn fact(id: &NodeIdentity, i: u64) -> Vec<u8> {
    let node = id.node_id();
    let clock = Hlc {
        wall_ms: 1_700_000_000_000 + i,
        logical: 0,
        node,
    };
    let body = if i.is_multiple_of(2) {
        FactBody::Team(TeamFact {
            id: TeamId::parse(&format!("team-{i}")).expect("slug"),
            origin: NodeId([7; 32]),
            name: format!("Team {i}"),
            present: true,
        })
    } else {
        FactBody::MemoryContent(MemoryContent {
            id: MemoryId::new(clock.wall_ms, [i as u8; 10]),
            fixed: MemoryFixed {
                owner: AgentId::parse("claude-1").expect("slug"),
                created_ms: clock.wall_ms,
                origin: node,
            },
            kind: MemoryType::default(),
            text: MemoryText::Plain(format!("memory {i}")),
            tags: vec!["seed".into()],
            importance: 0.5,
            confidence: 1.0,
            pinned: false,
            expires_ms: None,
            // Every fourth: a replacement with a valid time (the
            // validity variant of the body).
            supersedes: (i % 4 == 1 && i > 1).then(|| MemoryId::new(clock.wall_ms, [0; 10])),
            validity: match i % 4 {
                1 => amos_protocol::Validity {
                    from_ms: Some(clock.wall_ms.saturating_sub(1_000)),
                    to_ms: Some(clock.wall_ms + 86_400_000),
                },
                _ => Default::default(),
            },
        })
    };
    id.sign(Fact { clock, body })
        .expect("valid fact")
        .to_bytes()
}

fn bundle(
    id: &NodeIdentity,
    recipient: Recipient,
    key: Option<&MeshKey>,
    frames: &[Vec<Vec<u8>>],
) -> Vec<u8> {
    let created = Hlc {
        wall_ms: 1,
        logical: 0,
        node: id.node_id(),
    };
    let mut w = BundleWriter::new(
        Vec::new(),
        id,
        recipient,
        created,
        vec!["global".into()],
        key,
        [7; 16],
    )
    .expect("header");
    for f in frames {
        w.write_frame(f).expect("frame");
    }
    w.finish().expect("finish").0
}

/// One of each `SyncV1` variant, named.
fn sync_messages(facts: &[Vec<u8>]) -> Vec<(&'static str, SyncV1)> {
    let upto = Watermark {
        epoch: [3; 16],
        seq: 42,
    };
    let apollo = TeamId::parse("apollo").expect("slug");
    vec![
        (
            "hello",
            SyncV1::Hello {
                epoch: [1; 16],
                have: Some(upto),
                listen: vec!["0.0.0.0:4747".into(), "[::1]:4748".into()],
            },
        ),
        (
            "facts",
            SyncV1::Facts {
                facts: facts[..3].to_vec(),
            },
        ),
        ("done", SyncV1::Done { upto }),
        (
            "refused",
            SyncV1::Refused {
                reason: "not a registered peer".into(),
            },
        ),
        (
            "join",
            SyncV1::Join {
                invite: [5; 16],
                proof: [6; 32],
                name: "laptop".into(),
                listen_port: Some(4747),
                agent: Some(AgentId::parse("bob").expect("slug")),
            },
        ),
        (
            "welcome",
            SyncV1::Welcome {
                policy: "team:apollo".into(),
                name: "server".into(),
                mesh_key: Some([0x42; 32]),
                member_of: vec![OrgScope::Team(apollo.clone())],
            },
        ),
        (
            "digest-scoped",
            SyncV1::Digest {
                scopes: vec![Scope::Global, Scope::Team(apollo)],
                digest: [7; 32],
                facts: 1234,
            },
        ),
        (
            "digest-full",
            SyncV1::Digest {
                scopes: vec![],
                digest: [8; 32],
                facts: 0,
            },
        ),
        (
            "repair-open",
            SyncV1::RepairOpen {
                round: repair_rounds().0,
            },
        ),
        (
            "repair-range",
            SyncV1::RepairRange {
                round: repair_rounds().1,
            },
        ),
        (
            "repair-need",
            SyncV1::RepairNeed {
                ids: vec![[1; 32], [2; 32], [0xfe; 32]],
            },
        ),
        ("repair-done", SyncV1::RepairDone { upto }),
    ]
}

/// A repair set of `n` items (ids and times spread out).
fn repair_set(n: u32, skip: u32) -> amos_sync::repair::ItemSet {
    amos_sync::repair::ItemSet::new((0..n).filter(|i| i % 7 != skip).map(|i| {
        amos_sync::repair::Item {
            ts: u64::from(i / 3) << 16,
            id: amos_sync::repair::fact_id(&i.to_le_bytes()),
        }
    }))
}

/// A real opening round (over 200 items) and a responder's reply to it
/// (over a set that differs): what `RepairOpen` and `RepairRange` carry.
fn repair_rounds() -> (Vec<u8>, Vec<u8>) {
    let (_, open) = amos_sync::repair::Initiator::open(repair_set(200, 3)).expect("open");
    let reply = amos_sync::repair::respond(&repair_set(200, 5), &open).expect("reply");
    (open, reply)
}

fn main() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let (b, f) = (root.join("bundle_reader"), root.join("fact_decoder"));
    fs::create_dir_all(&b)?;
    fs::create_dir_all(&f)?;
    let id = NodeIdentity::from_secret([1; 32]);
    let other = NodeIdentity::from_secret([2; 32]);
    let key = MeshKey::from_bytes([0x42; 32]); // FUZZ_KEY in bundle_reader.rs
    let facts: Vec<Vec<u8>> = (0..6u64)
        .map(|i| fact(if i.is_multiple_of(3) { &other } else { &id }, i))
        .collect();
    for (i, x) in facts.iter().enumerate() {
        fs::write(f.join(format!("seed-{i}")), x)?;
    }
    let frames = vec![
        facts[..2].to_vec(),
        facts[2..3].to_vec(),
        facts[3..].to_vec(),
    ];
    let any = Recipient::AnyPeer;
    let to_other = Recipient::Node(other.node_id());
    fs::write(b.join("seed-plain"), bundle(&id, any, None, &frames))?;
    fs::write(
        b.join("seed-encrypted"),
        bundle(&id, any, Some(&key), &frames),
    )?;
    fs::write(b.join("seed-empty"), bundle(&id, any, None, &[]))?;
    fs::write(
        b.join("seed-one"),
        bundle(&id, to_other, Some(&key), &frames[1..2]),
    )?;
    fs::write(
        b.join("seed-addressed"),
        bundle(&id, to_other, None, &frames),
    )?;
    // Today's format with a pairing proof (version 6), plain and encrypted.
    for (name, key) in [
        ("seed-pairing", None),
        ("seed-pairing-encrypted", Some(&key)),
    ] {
        let mut w = BundleWriter::with_pairing(
            Vec::new(),
            &id,
            to_other,
            Hlc {
                wall_ms: 1,
                logical: 0,
                node: id.node_id(),
            },
            vec!["global".into()],
            key,
            [8; 16],
            Some(PairingProof {
                invite: [3; 16],
                proof: [4; 32],
            }),
        )
        .expect("header");
        for f in &frames {
            w.write_frame(f).expect("frame");
        }
        fs::write(b.join(name), w.finish().expect("finish").0)?;
    }
    // Sealed to `other` (format 7): plain, with a pairing proof, with a
    // mailbox postmark; the sealed_bundle target opens them as `other`
    // (RECIPIENT there), bundle_reader gets them too (it cannot open them).
    let s = root.join("sealed_bundle");
    fs::create_dir_all(&s)?;
    let postmark = Postmark {
        epoch: [4; 16],
        since: 3,
        upto: 17,
        have: Some(Watermark {
            epoch: [5; 16],
            seq: 9,
        }),
    };
    for (name, pairing, postmark, frames) in [
        ("seed-sealed", None, None, &frames[..]),
        ("seed-sealed-empty", None, None, &frames[..0]),
        (
            "seed-sealed-pairing",
            Some(PairingProof {
                invite: [3; 16],
                proof: [4; 32],
            }),
            None,
            &frames[..],
        ),
        ("seed-sealed-postmark", None, Some(postmark), &frames[1..]),
    ] {
        let mut w = BundleWriter::sealed(
            Vec::new(),
            &id,
            SealTo {
                recipient: other.node_id(),
                ephemeral: [9; 32],
            },
            Hlc {
                wall_ms: 1,
                logical: 0,
                node: id.node_id(),
            },
            vec!["global".into()],
            [8; 16],
            pairing,
            postmark,
        )
        .expect("header");
        for f in frames {
            w.write_frame(f).expect("frame");
        }
        let bytes = w.finish().expect("finish").0;
        fs::write(s.join(name), &bytes)?;
        fs::write(b.join(name), &bytes)?;
    }
    // The other formats, as the sealed target sees them (refused or read).
    for name in ["seed-plain", "seed-encrypted", "seed-pairing"] {
        fs::copy(b.join(name), s.join(name))?;
    }
    // The uncompressed formats amos wrote before (3, and 4 with a pairing
    // proof), still read: the protocol's committed fixtures.
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../protocol/tests/fixtures");
    for name in [
        "bundle-v3-plain.bndl",
        "bundle-v3-encrypted.bndl",
        "bundle-v4-pairing.bndl",
    ] {
        fs::write(
            b.join(format!("seed-{name}")),
            fs::read(fixtures.join(name))?,
        )?;
    }
    // fact_batch: a mode byte, then u16 LE length-prefixed facts (see
    // fuzz_targets/fact_batch.rs); mode 1 repeats the batch past the
    // threaded verifier's threshold.
    let fb = root.join("fact_batch");
    fs::create_dir_all(&fb)?;
    let batch = |mode: u8, items: &[Vec<u8>]| {
        let mut out = vec![mode];
        for x in items {
            out.extend_from_slice(&(x.len() as u16).to_le_bytes());
            out.extend_from_slice(x);
        }
        out
    };
    fs::write(fb.join("seed-all"), batch(0, &facts))?;
    fs::write(fb.join("seed-one"), batch(0, &facts[..1]))?;
    fs::write(fb.join("seed-three"), batch(0, &facts[..3]))?;
    fs::write(fb.join("seed-repeated"), batch(1, &facts))?;
    let mut bad = facts.clone();
    let last = bad[4].len() - 1;
    bad[4][last] ^= 1;
    fs::write(fb.join("seed-one-bad"), batch(0, &bad))?;
    // text_change: a real edit's change and a saved document.
    let t = root.join("text_change");
    fs::create_dir_all(&t)?;
    let mem = amos_protocol::MemoryId([7; 16]);
    let mut doc = amos_sync::text::TextDoc::build(mem, Some("alpha beta gamma\n"), None, [])
        .expect("seed document");
    let clock = Hlc {
        wall_ms: 1_700_000_000_000,
        logical: 0,
        node: id.node_id(),
    };
    let change = doc
        .edit("alpha beta delta gamma\n", &id.node_id(), &clock)
        .expect("edit")
        .expect("a change");
    fs::write(t.join("seed-change"), change)?;
    fs::write(t.join("seed-saved"), doc.save())?;
    // model_loader: a mode byte, then a model part (see fuzz_targets/model_loader.rs).
    let m = root.join("model_loader");
    fs::create_dir_all(&m)?;
    let header = r#"{"embeddings":{"dtype":"F16","shape":[4,2],"data_offsets":[0,16]}}"#;
    let mut tensors = (header.len() as u64).to_le_bytes().to_vec();
    tensors.extend_from_slice(header.as_bytes());
    tensors.extend_from_slice(&[0x00, 0x3c].repeat(8));
    let tokenizer = br###"{"normalizer":{"type":"BertNormalizer","lowercase":true},"pre_tokenizer":{"type":"BertPreTokenizer"},"model":{"type":"WordPiece","unk_token":"[UNK]","vocab":{"[UNK]":0,"red":1,"##dish":2,"blue":3}}}"###;
    let config = br#"{"model_type":"model2vec","normalize":false}"#;
    let with_mode = |mode: u8, rest: &[u8]| [&[mode][..], rest].concat();
    fs::write(m.join("seed-tensors"), with_mode(0, &tensors))?;
    fs::write(m.join("seed-tokenizer"), with_mode(1, tokenizer))?;
    fs::write(m.join("seed-config"), with_mode(2, config))?;
    let text = "Héllo, reddish wörld! 中文";
    fs::write(m.join("seed-text"), with_mode(3, text.as_bytes()))?;
    let mut all = vec![4];
    for part in [&tensors[..], &tokenizer[..]] {
        all.extend_from_slice(&(part.len() as u16).to_le_bytes());
        all.extend_from_slice(part);
    }
    all.extend_from_slice(config);
    fs::write(m.join("seed-all"), all)?;
    // vector_snapshot: a small index file with two terms.
    let v = root.join("vector_snapshot");
    fs::create_dir_all(&v)?;
    let mut table = amos_node::index::vectors::VectorTable::new(20);
    for i in 0..12u8 {
        let x: Vec<f32> = (0..20)
            .map(|j| ((i as usize * 5 + j * 3) % 11) as f32 - 5.0)
            .collect();
        if let Some(q) = amos_node::index::vectors::quantize(&x) {
            let terms = [if i % 2 == 0 { "team:x" } else { "owner:bob" }.to_string()];
            table.upsert(amos_protocol::MemoryId([i; 16]), q, &terms);
        }
    }
    let provenance = amos_node::index::vectors::Provenance {
        model: "builtin".into(),
        epoch: "e".into(),
        watermark: 9,
    };
    fs::write(
        v.join("seed-table"),
        amos_node::index::vectors::encode(&provenance, &table.to_parts()),
    )?;
    // sync_message: one frame of every session message, the `Digest` (the
    // newest variant) scoped and full.
    let s = root.join("sync_message");
    fs::create_dir_all(&s)?;
    for (name, m) in sync_messages(&facts) {
        fs::write(s.join(format!("seed-{name}")), SyncMessage::V1(m).encode())?;
    }
    // repair_round: a real opening round and a reply, as the target splits
    // its input (first byte: which side reads it).
    let r = root.join("repair_round");
    fs::create_dir_all(&r)?;
    let (open, reply) = repair_rounds();
    fs::write(r.join("seed-open"), [&[0u8][..], &open].concat())?;
    fs::write(r.join("seed-reply"), [&[1u8][..], &reply].concat())?;
    // import_files: the importers' own test fixtures, as they are.
    let imp = root.join("import_files");
    fs::create_dir_all(&imp)?;
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
    for (i, rel) in [
        "mem0/memories.json",
        "chatgpt/conversations.json",
        "chatgpt/memory.json",
        "hermes/MEMORY.md",
        "agent-memory-os/bundle.jsonl",
        "agent-memory-os/bundle-after.jsonl",
    ]
    .iter()
    .enumerate()
    {
        fs::write(imp.join(format!("seed-{i}")), fs::read(fixtures.join(rel))?)?;
    }
    println!("seed corpus written to {}", root.display());
    Ok(())
}
