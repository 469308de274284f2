//! Bundles end to end (docs/design.md §6 and §8, docs/cli.md "Mesh"): two real homes
//! exchanging `amos bundle export` / `amos bundle import` files.
//!
//! * full peers converge both ways, with and without a mesh key;
//! * scoped peers (`team:apollo`) let nothing outside the scope cross in
//!   either direction — checked on the raw database, not only through recall;
//! * every region of a bundle file (header, frames, terminator, trailer),
//!   flipped or truncated, is refused with one line and changes nothing; so
//!   are a wrong or missing mesh key, an unknown sender and our own bundle;
//!   importing twice is a no-op;
//! * a malicious scoped peer's validly signed bundle cannot edit, widen,
//!   delete or re-own our memories, change our teams, or reach our agents by
//!   name;
//! * `--for PEER` exports carry only what the policy admits, and a revocation
//!   travels as an acl fact alone and hides the memory on the receiver.

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use crate::common::{Home, Run, contains, db_hits};
use amos_node::{NewMemory, Node};
use amos_protocol::{
    AgentFact, AgentId, BundleWriter, Fact, FactBody, Grants, Hlc, MembershipFact, MemoryAcl,
    MemoryContent, MemoryFixed, MemoryId, MemoryText, MemoryTombstone, MemoryType, MeshKey, NodeId,
    OrgScope, Scope, SignedFact, TeamFact, TeamId, read_verified, verify_bundle,
};
use serde_json::{Value, json};

// ------------------------------------------------------------------ helpers

fn node_id(h: &Home) -> String {
    h.json(&["id"])["node_id"]
        .as_str()
        .expect("node_id")
        .to_owned()
}

/// `a` registers `b` and `b` registers `a`, both with `policy`.
fn pair(a: &Home, b: &Home, policy: &str) {
    let (ia, ib) = (node_id(a), node_id(b));
    a.ok(&["peers", "add", &ib, "--policy", policy]);
    b.ok(&["peers", "add", &ia, "--policy", policy]);
}

/// `a` generates a mesh key, `b` sets it; returns it.
fn share_mesh_key(a: &Home, b: &Home) -> MeshKey {
    let key = a.json(&["mesh", "key", "generate"])["mesh_key"]
        .as_str()
        .expect("mesh_key")
        .to_owned();
    b.ok(&["mesh", "key", "set", &key]);
    assert_eq!(
        b.json(&["mesh", "key", "show"])["mesh_key"].as_str(),
        Some(key.as_str())
    );
    key.parse().expect("mesh key parses")
}

fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// `amos --json bundle export FILE ARGS…` → the report.
fn export(h: &Home, file: &Path, args: &[&str]) -> Value {
    let mut a = vec!["bundle", "export", p(file)];
    a.extend_from_slice(args);
    h.json(&a)
}

/// `amos --json bundle import FILE` (exit 0) → the report.
fn import(h: &Home, file: &Path) -> Value {
    h.json(&["bundle", "import", p(file)])
}

fn digest(h: &Home, scopes: &[&str]) -> Value {
    let mut a = vec!["digest"];
    for s in scopes {
        a.extend_from_slice(&["--scope", s]);
    }
    h.json(&a)
}

/// What "nothing changed" compares: the harness fingerprint and the digest.
fn state(h: &Home) -> Value {
    json!({"fingerprint": h.fingerprint(), "digest": digest(h, &[])})
}

fn audit(h: &Home) -> Value {
    h.json(&["audit"])
}

fn u64_of(v: &Value, field: &str) -> u64 {
    v[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} in {v}"))
}

/// `amos get ID --as AGENT` must answer "no such memory" (exit 2).
fn invisible(h: &Home, agent: &str, id: &str) {
    let r = h.run(&["get", id, "--as", agent]);
    assert_eq!(r.code, 2, "{agent} should not see {id}: {r:?}");
    assert!(r.stderr.contains("no such memory"), "{r:?}");
}

/// Every file under the home whose raw bytes contain `word` (database, WAL,
/// index segments…).
fn file_hits(dir: &Path, word: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        if path.is_dir() {
            out.extend(file_hits(&path, word));
        } else if let Ok(bytes) = std::fs::read(&path)
            && contains(&bytes, word.as_bytes())
        {
            out.push(path);
        }
    }
    out
}

/// Every fact of a bundle, after full verification.
fn bundle_facts(file: &Path, key: Option<&MeshKey>) -> (Vec<String>, bool, Vec<SignedFact>) {
    let open = || BufReader::new(File::open(file).expect("open bundle"));
    let verified = verify_bundle(open(), key).expect("bundle verifies");
    let mut facts = Vec::new();
    read_verified(open(), key, &verified, |batch| {
        facts.extend(batch.into_iter().map(|f| f.into_inner()));
        Ok::<(), Infallible>(())
    })
    .expect("bundle reads");
    let h = verified.header();
    (h.scopes.clone(), h.encrypted, facts)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn scope(s: &str) -> Scope {
    s.parse().unwrap()
}

fn grants(s: &[&str]) -> Grants {
    Grants::from_scopes(s.iter().map(|x| scope(x)))
}

/// apollo (alice, bob) and zeus (carol), made through the CLI.
fn org(h: &Home) {
    h.ok(&["team", "create", "apollo"]);
    h.ok(&["team", "create", "zeus"]);
    h.ok(&["agent", "add", "alice", "--team", "apollo"]);
    h.ok(&["agent", "add", "bob", "--team", "apollo"]);
    h.ok(&["agent", "add", "carol", "--team", "zeus"]);
}

// ------------------------------------------------------------- 1. full peers

/// How the full peers' bundles are protected.
#[derive(Clone, Copy, PartialEq)]
enum Protect {
    /// Encrypted under the shared mesh key.
    MeshKey,
    /// Neither (`--no-seal`, no mesh key).
    Plain,
    /// Sealed to the recipient: what `--for` does with no mesh key.
    Sealed,
}

fn full_peers_exchange_both_ways(protect: Protect) {
    let with_key = protect == Protect::MeshKey;
    let flags: &[&str] = if protect == Protect::Plain {
        &["--no-seal"]
    } else {
        &[]
    };
    let a = Home::new();
    let b = Home::new();
    let tmp = tempfile::tempdir().unwrap();
    if with_key {
        share_mesh_key(&a, &b);
    }
    pair(&a, &b, "full");
    org(&a);
    a.add(
        "alice",
        "orbitfullalpha checklist for the launch",
        &["team:apollo"],
    );
    a.add("alice", "orbitfullprivate diary of alice", &[]);

    let ab = tmp.path().join("a-to-b.amosb");
    let ib = node_id(&b);
    let rep = export(&a, &ab, &[&["--for", ib.as_str()][..], flags].concat());
    assert_eq!(rep["encrypted"], json!(protect != Protect::Plain), "{rep}");
    assert_eq!(rep["sealed"], json!(protect == Protect::Sealed), "{rep}");
    assert_eq!(rep["policy"], json!("full"), "{rep}");
    // Encrypted frames hide the text. (A plaintext bundle's frames are
    // compressed: the text is there, but not necessarily byte for byte.)
    let bytes = std::fs::read(&ab).unwrap();
    if protect != Protect::Plain {
        assert!(!contains(&bytes, b"orbitfullalpha"));
    }
    let r = import(&b, &ab);
    assert_eq!(r["sealed"], json!(protect == Protect::Sealed), "{r}");
    assert!(u64_of(&r, "applied") > 0, "{r}");
    assert_eq!(u64_of(&r, "refused"), 0, "{r}");
    assert_eq!(r["sender"], json!(node_id(&a)));

    // bob arrived as an agent record from a full peer: he can write on b.
    b.add(
        "bob",
        "orbitfullbeta telemetry from the other side",
        &["team:apollo"],
    );
    let ba = tmp.path().join("b-to-a.amosb");
    let ia = node_id(&a);
    let rep = export(&b, &ba, &[&["--for", ia.as_str()][..], flags].concat());
    assert_eq!(rep["encrypted"], json!(protect != Protect::Plain), "{rep}");
    let r = import(&a, &ba);
    assert!(u64_of(&r, "applied") > 0, "{r}");
    assert_eq!(u64_of(&r, "refused"), 0, "{r}");

    let (da, db) = (digest(&a, &[]), digest(&b, &[]));
    assert_eq!(da, db, "full peers did not converge");
    assert!(u64_of(&da, "facts") > 0);
    assert_eq!(
        a.search_texts("alice", "orbitfullbeta"),
        vec!["orbitfullbeta telemetry from the other side"]
    );
    assert_eq!(
        b.search_texts("bob", "orbitfullalpha"),
        vec!["orbitfullalpha checklist for the launch"]
    );
    // Full peers carry private memories too (the same operator's machines).
    assert_eq!(
        b.search_texts("alice", "orbitfullprivate"),
        vec!["orbitfullprivate diary of alice"]
    );
    assert!(b.search_texts("bob", "orbitfullprivate").is_empty());
}

#[test]
fn full_peers_converge_both_ways_with_mesh_key() {
    full_peers_exchange_both_ways(Protect::MeshKey);
}

#[test]
fn full_peers_converge_both_ways_with_plaintext_bundles() {
    full_peers_exchange_both_ways(Protect::Plain);
}

#[test]
fn full_peers_converge_both_ways_with_bundles_sealed_by_default() {
    full_peers_exchange_both_ways(Protect::Sealed);
}

// ----------------------------------------------------------- 2. scoped peers

#[test]
fn scoped_peers_exchange_nothing_outside_the_scope_either_way() {
    let a = Home::new();
    let b = Home::new();
    let tmp = tempfile::tempdir().unwrap();
    share_mesh_key(&a, &b);
    pair(&a, &b, "team:apollo");
    org(&a);
    // b: its own agents (agent records never cross a scoped peer) and its own
    // team zeus; team apollo and its memberships arrive from a.
    for agent in ["alice", "bob", "carol"] {
        b.ok(&["agent", "add", agent]);
    }
    b.ok(&["team", "create", "zeus"]);
    b.ok(&["team", "add", "zeus", "carol"]);

    let a_out = [
        ("alice", "wqaprivate", vec![]),
        ("alice", "wqaagent", vec!["agent:bob"]),
        ("carol", "wqazeus", vec!["team:zeus"]),
        ("alice", "wqaglobal", vec!["global"]),
    ];
    for (who, word, share) in &a_out {
        a.add(who, &format!("{word} kept at home"), share);
    }
    a.add("alice", "wqateam shared with apollo", &["team:apollo"]);

    let ab = tmp.path().join("a-to-b.amosb");
    export(&a, &ab, &["--for", &node_id(&b)]);
    let r = import(&b, &ab);
    assert!(u64_of(&r, "applied") > 0, "{r}");

    let b_out = [
        ("bob", "wqbprivate", vec![]),
        ("bob", "wqbagent", vec!["agent:alice"]),
        ("carol", "wqbzeus", vec!["team:zeus"]),
        ("bob", "wqbglobal", vec!["global"]),
    ];
    for (who, word, share) in &b_out {
        b.add(who, &format!("{word} kept at home"), share);
    }
    b.add("bob", "wqbteam shared with apollo", &["team:apollo"]);
    let ba = tmp.path().join("b-to-a.amosb");
    export(&b, &ba, &["--for", &node_id(&a)]);
    let r = import(&a, &ba);
    assert!(u64_of(&r, "applied") > 0, "{r}");
    // And once more a → b, so both have seen everything the other may send.
    export(&a, &ab, &["--for", &node_id(&b)]);
    import(&b, &ab);

    for (from, to, out, shared) in [(&a, &b, &a_out, "wqateam"), (&b, &a, &b_out, "wqbteam")] {
        // The scanner finds what did cross (and the sender's own words)…
        assert!(!db_hits(to, shared).is_empty(), "{shared} did not cross");
        for (_, word, _) in out.iter() {
            assert!(!db_hits(from, word).is_empty(), "{word} missing at home");
            // …and nothing else crossed, anywhere in the receiver's home.
            assert_eq!(db_hits(to, word), Vec::<String>::new(), "{word} crossed");
            assert_eq!(
                file_hits(to.path(), word),
                Vec::<PathBuf>::new(),
                "{word} crossed"
            );
        }
    }
    assert_eq!(
        b.search_texts("bob", "wqateam"),
        vec!["wqateam shared with apollo"]
    );
    assert_eq!(
        a.search_texts("alice", "wqbteam"),
        vec!["wqbteam shared with apollo"]
    );
    // b's team zeus did not leak into a's team zeus, nor a's into b's.
    let zeus = |h: &Home| {
        h.json(&["team", "list"])["teams"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == "zeus")
            .map(|t| t["members"].clone())
    };
    assert_eq!(zeus(&a), Some(json!(["carol"])));
    assert_eq!(zeus(&b), Some(json!(["carol"])));
    let (da, db) = (digest(&a, &["team:apollo"]), digest(&b, &["team:apollo"]));
    assert_eq!(da, db, "scoped digests differ");
    // Two memories, their acl facts, team apollo and two memberships.
    assert!(u64_of(&da, "facts") >= 7, "{da}");
    assert_ne!(digest(&a, &[]), digest(&b, &[]));
}

// ------------------------------------------------------------ 3. tampering

/// A sender and a receiver sharing a mesh key, each registering the other
/// as `full`, and an encrypted bundle of the sender's store with `bulk`
/// extra memories (made through the library).
struct Fixture {
    sender: Home,
    receiver: Home,
    tmp: tempfile::TempDir,
    bundle: PathBuf,
    key: MeshKey,
}

fn fixture(bulk: usize) -> Fixture {
    let sender = Home::new();
    let receiver = Home::new();
    let tmp = tempfile::tempdir().unwrap();
    let key = share_mesh_key(&sender, &receiver);
    pair(&sender, &receiver, "full");
    org(&sender);
    sender.add("alice", "tamperword apollo runbook", &["team:apollo"]);
    sender.add("carol", "tamperword zeus secret", &["team:zeus"]);
    if bulk > 0 {
        let home = amos_node::Home::new(sender.path());
        let mut node = Node::open(&home).unwrap();
        let who = node.requester("alice").unwrap();
        let items = (0..bulk)
            .map(|i| {
                let mut m = NewMemory::new(format!("bulk memory {i} about topic {}", i % 7));
                m.share = vec![scope("team:apollo")];
                (&who, m)
            })
            .collect();
        node.add_many(items).unwrap();
    }
    let bundle = tmp.path().join("valid.amosb");
    let rep = export(&sender, &bundle, &[]);
    assert_eq!(rep["encrypted"], json!(true));
    Fixture {
        sender,
        receiver,
        tmp,
        bundle,
        key,
    }
}

/// Byte ranges of a bundle, found from its length prefixes (bundle.rs).
#[derive(Debug)]
struct Layout {
    /// Header body length `H` (the body is at 14 .. 14 + H).
    header: usize,
    /// For each frame: offset of its length prefix, and its length.
    frames: Vec<(usize, usize)>,
    /// Offset of the 4-byte zero terminator.
    terminator: usize,
    /// Offset of the trailer length, and the trailer body length.
    trailer: (usize, usize),
}

fn u32_at(b: &[u8], at: usize) -> usize {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize
}

fn layout(b: &[u8]) -> Layout {
    assert_eq!(&b[..8], b"AMOSBNDL");
    assert_eq!(
        u16::from_le_bytes([b[8], b[9]]),
        amos_protocol::BUNDLE_FORMAT_VERSION
    );
    let header = u32_at(b, 10);
    let mut at = 14 + header;
    let mut frames = Vec::new();
    loop {
        let len = u32_at(b, at);
        if len == 0 {
            break;
        }
        frames.push((at, len));
        at += 4 + len;
    }
    let terminator = at;
    let t = u32_at(b, at + 4);
    assert_eq!(at + 8 + t, b.len(), "trailer must end the file");
    Layout {
        header,
        frames,
        terminator,
        trailer: (at + 4, t),
    }
}

/// What a refused bundle's one line may say (BundleError's messages).
const ANY_REASON: &[&str] = &[
    "not an amos bundle",
    "format version",
    "truncated",
    "too large",
    "tampered",
    "different mesh key",
    "does not decode",
    "signature",
    "unexpected bytes",
];

/// Import `file` into `h`: exit `code`, exactly one line on stderr naming
/// the file and containing one of `says`, nothing on stdout, and no change
/// to the fingerprint, the digest or the audit log.
fn refused_import(h: &Home, file: &Path, code: i32, says: &[&str], what: &str) -> String {
    let before = (state(h), audit(h));
    let r: Run = h.run(&["bundle", "import", p(file)]);
    assert_eq!(r.code, code, "{what}: {r:?}");
    assert!(r.stdout.trim().is_empty(), "{what}: {r:?}");
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{what}: stderr must be one line: {r:?}");
    let line = lines[0];
    assert!(
        line.contains(p(file)),
        "{what}: does not name the file: {line}"
    );
    assert!(
        says.iter().any(|s| line.contains(s)),
        "{what}: {line:?} says none of {says:?}"
    );
    assert_eq!((state(h), audit(h)), before, "{what}: the receiver changed");
    line.to_owned()
}

#[test]
fn tampered_or_truncated_bundles_are_refused_and_change_nothing() {
    // Enough memories (two facts each) for more than one frame.
    let bulk = amos_protocol::BUNDLE_FRAME_FACTS / 2 + 16;
    let f = fixture(bulk);
    let good = std::fs::read(&f.bundle).unwrap();
    let l = layout(&good);
    assert!(
        l.frames.len() >= 2,
        "the fixture should span several frames: {l:?}"
    );
    let before = state(&f.receiver);
    assert_eq!(u64_of(&before["digest"], "facts"), 0);

    // (offset, region, what the message must say)
    let mut flips: Vec<(usize, String, &[&str])> = vec![
        (0, "magic".into(), &["not an amos bundle"]),
        (7, "magic".into(), &["not an amos bundle"]),
        // Version 5 with its low bit flipped is 4, a version still read
        // (uncompressed, with a pairing proof the header then lacks).
        (
            8,
            "version".into(),
            &["format version", "header does not decode"],
        ),
        (9, "version".into(), &["format version"]),
    ];
    for i in 10..14 {
        flips.push((i, "header length".into(), ANY_REASON));
    }
    let h = l.header;
    // sender, creation clock, scopes, `encrypted`, nonce seed, key check
    for i in [14, 14 + 1, 14 + h / 2, 14 + h - 33, 14 + h - 17, 14 + h - 1] {
        flips.push((i, "header body".into(), ANY_REASON));
    }
    for (n, &(at, len)) in l.frames.iter().enumerate() {
        for i in at..at + 4 {
            flips.push((i, format!("frame {n} length"), ANY_REASON));
        }
        let body = at + 4;
        for i in [
            body,
            body + 1,
            body + len / 2,
            body + len - 17,
            body + len - 1,
        ] {
            flips.push((i, format!("frame {n} body"), &["tampered"]));
        }
    }
    for i in l.terminator..l.terminator + 4 {
        flips.push((i, "terminator".into(), ANY_REASON));
    }
    let (tl, t) = l.trailer;
    for i in tl..tl + 4 {
        flips.push((i, "trailer length".into(), ANY_REASON));
    }
    for i in [tl + 4, tl + 5, tl + 4 + t / 2, tl + 4 + t - 1] {
        flips.push((i, "trailer body".into(), ANY_REASON));
    }

    let bad = f.tmp.path().join("bad.amosb");
    let mut seen = BTreeSet::new();
    for (at, region, says) in flips {
        if !seen.insert(at) {
            continue;
        }
        let mut bytes = good.clone();
        bytes[at] ^= 1 << (at % 8);
        std::fs::write(&bad, &bytes).unwrap();
        refused_import(
            &f.receiver,
            &bad,
            1,
            says,
            &format!("bit flip at {at} ({region})"),
        );
    }

    let (f0, f0len) = l.frames[0];
    let cuts = [
        (0, "empty file"),
        (5, "mid-magic"),
        (9, "mid-version"),
        (12, "mid-header length"),
        (14 + h / 2, "mid-header body"),
        (f0 + 2, "mid-frame length"),
        (f0 + 4 + f0len / 2, "mid-frame body"),
        (f0 + 4 + f0len, "frame boundary"),
        (l.terminator, "before the terminator"),
        (l.terminator + 2, "mid-terminator"),
        (tl, "just before the trailer"),
        (tl + 4, "after the trailer length"),
        (good.len() - 1, "one byte short"),
    ];
    for (len, what) in cuts {
        std::fs::write(&bad, &good[..len]).unwrap();
        let says: &[&str] = if len == 0 {
            &["not an amos bundle", "truncated"]
        } else {
            &["truncated"]
        };
        refused_import(
            &f.receiver,
            &bad,
            1,
            says,
            &format!("truncated at {len} ({what})"),
        );
    }

    let mut longer = good.clone();
    longer.push(0);
    std::fs::write(&bad, &longer).unwrap();
    refused_import(
        &f.receiver,
        &bad,
        1,
        &["unexpected bytes"],
        "a byte appended",
    );

    // Two frames swapped (each with its own valid tag): refused.
    let (f1, f1len) = l.frames[1];
    let mut swapped = good[..f0].to_vec();
    swapped.extend_from_slice(&good[f1..f1 + 4 + f1len]);
    swapped.extend_from_slice(&good[f0..f1]);
    swapped.extend_from_slice(&good[f1 + 4 + f1len..]);
    assert_eq!(swapped.len(), good.len());
    std::fs::write(&bad, &swapped).unwrap();
    refused_import(&f.receiver, &bad, 1, &["tampered"], "frames swapped");

    assert_eq!(state(&f.receiver), before);
    // The untouched file imports and converges: the refusals were the tampering.
    let r = import(&f.receiver, &f.bundle);
    assert_eq!(u64_of(&r, "refused"), 0, "{r}");
    assert!(u64_of(&r, "applied") >= 2 * bulk as u64, "{r}");
    assert_eq!(digest(&f.receiver, &[]), digest(&f.sender, &[]));
}

#[test]
fn tampered_plaintext_bundle_is_refused() {
    let sender = Home::new();
    let receiver = Home::new();
    let tmp = tempfile::tempdir().unwrap();
    pair(&sender, &receiver, "full");
    org(&sender);
    sender.add("alice", "plainword apollo runbook", &["team:apollo"]);
    let file = tmp.path().join("plain.amosb");
    assert_eq!(export(&sender, &file, &[])["encrypted"], json!(false));
    let good = std::fs::read(&file).unwrap();
    let l = layout(&good);
    let bad = tmp.path().join("bad.amosb");
    // Without a tag, a flipped byte of a frame (its declared length, its
    // compressed facts) is caught by the bundle signature.
    let (f0, f0len) = l.frames[0];
    for at in [
        f0 + 4,
        f0 + 4 + 4,
        f0 + 4 + f0len / 3,
        f0 + 4 + f0len / 2,
        f0 + 4 + f0len - 1,
    ] {
        let mut bytes = good.clone();
        bytes[at] ^= 0x20;
        std::fs::write(&bad, &bytes).unwrap();
        refused_import(
            &receiver,
            &bad,
            1,
            ANY_REASON,
            &format!("plaintext flip at {at}"),
        );
    }
    // The plain bundle's text edited into another valid word, the frame
    // compressed again (its declared length, then one zstd frame): a
    // well-formed frame, still refused by the bundle signature.
    let stored = &good[f0 + 4..f0 + 4 + f0len];
    let mut plain = zstd::bulk::decompress(&stored[4..], 16 << 20).unwrap();
    assert_eq!(stored[..4], (plain.len() as u32).to_le_bytes());
    let text_at = plain
        .windows(9)
        .position(|w| w == b"plainword")
        .expect("the frame carries the text");
    plain[text_at..text_at + 9].copy_from_slice(b"plainWORD");
    let z = zstd::bulk::compress(&plain, 3).unwrap();
    let mut edited = good[..f0].to_vec();
    edited.extend_from_slice(&((4 + z.len()) as u32).to_le_bytes());
    edited.extend_from_slice(&(plain.len() as u32).to_le_bytes());
    edited.extend_from_slice(&z);
    edited.extend_from_slice(&good[f0 + 4 + f0len..]);
    std::fs::write(&bad, &edited).unwrap();
    refused_import(&receiver, &bad, 1, &["signature"], "edited text");
    assert_eq!(u64_of(&import(&receiver, &file), "refused"), 0);
}

#[test]
fn wrong_key_missing_key_unknown_sender_own_bundle_and_missing_file() {
    let f = fixture(0);
    let bundle = f.bundle.as_path();

    // Wrong mesh key.
    let other = Home::new();
    other.ok(&["peers", "add", &node_id(&f.sender), "--policy", "full"]);
    other.ok(&["mesh", "key", "generate"]);
    let line = refused_import(&other, bundle, 1, &["different mesh key"], "wrong key");
    assert!(!line.contains("tampered"), "{line}");

    // No mesh key at all.
    let keyless = Home::new();
    keyless.ok(&["peers", "add", &node_id(&f.sender), "--policy", "full"]);
    refused_import(&keyless, bundle, 1, &["set the mesh key"], "no key");

    // The right key, but the sender is not registered here.
    let stranger = Home::new();
    stranger.ok(&["mesh", "key", "set", &f.key.to_string()]);
    let line = refused_import(
        &stranger,
        bundle,
        1,
        &["not a registered peer"],
        "unknown sender",
    );
    assert!(
        line.contains(&node_id(&f.sender)[..10]),
        "names the sender: {line}"
    );

    // Our own bundle.
    refused_import(&f.sender, bundle, 1, &["made by this node"], "own bundle");

    // A sender removed since: refused like a stranger.
    f.receiver.ok(&["peers", "remove", &node_id(&f.sender)]);
    refused_import(
        &f.receiver,
        bundle,
        1,
        &["not a registered peer"],
        "removed peer",
    );

    // A file that does not exist: bad input.
    let missing = f.tmp.path().join("no-such.amosb");
    refused_import(&f.receiver, &missing, 2, &["no such file"], "missing file");
}

#[test]
fn importing_the_same_bundle_twice_is_a_no_op() {
    let sender = Home::new();
    let receiver = Home::new();
    let tmp = tempfile::tempdir().unwrap();
    share_mesh_key(&sender, &receiver);
    // The receiver gives the sender team:apollo; the sender exports
    // everything, so the first import also refuses (and audits) facts.
    receiver.ok(&["peers", "add", &node_id(&sender), "--policy", "team:apollo"]);
    org(&sender);
    sender.add("alice", "twiceword apollo", &["team:apollo"]);
    sender.add("carol", "twiceword zeus", &["team:zeus"]);
    for agent in ["alice", "bob"] {
        receiver.ok(&["agent", "add", agent]);
    }
    let file = tmp.path().join("twice.amosb");
    export(&sender, &file, &[]);

    let first = import(&receiver, &file);
    assert!(u64_of(&first, "applied") > 0, "{first}");
    assert!(u64_of(&first, "refused") > 0, "{first}");
    let after_first = (state(&receiver), audit(&receiver));
    assert!(
        !after_first.1["refused"].as_array().unwrap().is_empty(),
        "{after_first:?}"
    );
    assert_eq!(
        receiver.search_texts("bob", "twiceword"),
        vec!["twiceword apollo"]
    );

    let second = import(&receiver, &file);
    assert_eq!(u64_of(&second, "applied"), 0, "{second}");
    assert_eq!(second["facts"], first["facts"]);
    assert_eq!(
        (state(&receiver), audit(&receiver)),
        after_first,
        "the second import changed the receiver"
    );
}

// --------------------------------------------------------- 4. escalation

fn sign(id: &amos_protocol::NodeIdentity, wall_ms: u64, logical: u32, body: FactBody) -> Vec<u8> {
    let clock = Hlc {
        wall_ms,
        logical,
        node: id.node_id(),
    };
    id.sign(Fact { clock, body }).expect("sign").to_bytes()
}

#[test]
fn a_scoped_peer_cannot_escalate_through_a_bundle() {
    let ours = Home::new();
    let mallory = Home::new();
    let tmp = tempfile::tempdir().unwrap();
    let key = share_mesh_key(&ours, &mallory);
    pair(&ours, &mallory, "team:apollo");
    org(&ours);
    let mem = ours.add("alice", "apollo launch window is tuesday", &["team:apollo"]);
    let ours_id: NodeId = node_id(&ours).parse().unwrap();
    let mallory_id_text = node_id(&mallory);

    // Mallory legitimately receives our memory.
    let to_mallory = tmp.path().join("to-mallory.amosb");
    export(&ours, &to_mallory, &["--for", &mallory_id_text]);
    import(&mallory, &to_mallory);
    let (_, _, facts) = bundle_facts(&to_mallory, Some(&key));
    let mid: MemoryId = mem.parse().unwrap();
    let content = facts
        .iter()
        .find_map(|f| match &f.fact.body {
            FactBody::MemoryContent(c) if c.id == mid => Some(c.clone()),
            _ => None,
        })
        .expect("our memory went to mallory");
    assert_eq!(content.fixed.origin, ours_id);
    let fixed = content.fixed.clone();

    let view = |agent: &str| {
        let m = ours.json(&["get", &mem, "--as", agent]);
        (
            m["content"].clone(),
            m["visibility"].clone(),
            m["owner"].clone(),
        )
    };
    let before_alice = view("alice");
    let before_bob = view("bob");
    assert_eq!(before_alice.1, json!(["team:apollo"]));
    let teams_before = ours.json(&["team", "list"]);
    let agents_before = ours.json(&["agent", "list"]);

    // Mallory crafts a validly signed bundle with its own identity.
    let identity = amos_node::Home::new(mallory.path())
        .load_identity()
        .unwrap();
    assert_eq!(identity.node_id().to_string(), mallory_id_text);
    let now = now_ms() + 1000;
    let carol = AgentId::parse("carol").unwrap();
    let mallory_mem = |id: MemoryId, text: &str, g: &[&str], t: u32| {
        let fixed = MemoryFixed {
            owner: carol.clone(),
            created_ms: now,
            origin: identity.node_id(),
        };
        vec![
            sign(
                &identity,
                now,
                t,
                FactBody::MemoryContent(MemoryContent {
                    id,
                    fixed: fixed.clone(),
                    kind: MemoryType::default(),
                    text: MemoryText::Plain(text.into()),
                    tags: vec![],
                    importance: 1.0,
                    confidence: 1.0,
                    pinned: true,
                    expires_ms: None,
                    supersedes: None,
                    validity: Default::default(),
                }),
            ),
            sign(
                &identity,
                now,
                t + 1,
                FactBody::MemoryAcl(MemoryAcl {
                    id,
                    fixed,
                    grants: grants(g),
                }),
            ),
        ]
    };
    // Our teams' ids are qualified by us (docs/design.md §3).
    let apollo = format!("team:apollo@{}", &node_id(&ours)[..12]);
    let x = MemoryId::new(now, [1; 10]);
    let y = MemoryId::new(now, [2; 10]);
    let zeus = OrgScope::Team(TeamId::qualified("zeus", &ours_id).unwrap());
    let refused_facts = vec![
        // (a) widen our memory to global
        sign(
            &identity,
            now,
            1,
            FactBody::MemoryAcl(MemoryAcl {
                id: mid,
                fixed: fixed.clone(),
                grants: grants(&["global"]),
            }),
        ),
        // (b) rewrite its content
        sign(
            &identity,
            now,
            2,
            FactBody::MemoryContent(MemoryContent {
                text: MemoryText::Plain("mallorywashere launch is cancelled".into()),
                ..content.clone()
            }),
        ),
        // (c) delete it
        sign(
            &identity,
            now,
            3,
            FactBody::MemoryTombstone(MemoryTombstone { id: mid, fixed }),
        ),
        // (d) rewrite team zeus: add alice, remove carol, delete the team
        sign(
            &identity,
            now,
            4,
            FactBody::Membership(MembershipFact {
                scope: zeus.clone(),
                agent: AgentId::parse("alice").unwrap(),
                role: "member".into(),
                present: true,
            }),
        ),
        sign(
            &identity,
            now,
            5,
            FactBody::Membership(MembershipFact {
                scope: zeus,
                agent: carol.clone(),
                role: "member".into(),
                present: false,
            }),
        ),
        sign(
            &identity,
            now,
            6,
            FactBody::Team(TeamFact {
                id: TeamId::qualified("zeus", &ours_id).unwrap(),
                origin: ours_id,
                name: "zeus".into(),
                present: false,
            }),
        ),
        // and remove our agent carol
        sign(
            &identity,
            now,
            7,
            FactBody::Agent(AgentFact {
                id: carol.clone(),
                kind: "agent".into(),
                display_name: "carol".into(),
                present: false,
            }),
        ),
    ];
    // (e) its own memory, "owned" by carol and shared globally and with her
    // by name; (f) the same plus team:apollo.
    let mut admitted = mallory_mem(
        x,
        "carolbait mallory wants carol to read",
        &["global", "agent:carol"],
        10,
    );
    admitted.extend(mallory_mem(
        y,
        "apollobait mallory note for apollo",
        &["global", "agent:carol", &apollo],
        20,
    ));
    let evil = tmp.path().join("evil.amosb");
    let mut w = BundleWriter::new(
        File::create(&evil).unwrap(),
        &identity,
        amos_protocol::Recipient::AnyPeer,
        Hlc {
            wall_ms: now,
            logical: 30,
            node: identity.node_id(),
        },
        vec![apollo.clone()],
        Some(&key),
        [7; 16],
    )
    .unwrap();
    let mut all = refused_facts.clone();
    all.extend(admitted.iter().cloned());
    w.write_frame(&all).unwrap();
    w.finish().unwrap();

    let r = import(&ours, &evil);
    assert_eq!(r["sender"], json!(mallory_id_text));
    assert_eq!(u64_of(&r, "facts"), all.len() as u64, "{r}");
    assert!(u64_of(&r, "refused") >= 4, "{r}");
    assert_eq!(u64_of(&r, "refused"), refused_facts.len() as u64, "{r}");
    assert_eq!(u64_of(&r, "applied"), admitted.len() as u64, "{r}");

    // The audit log names each refusal and why.
    let entries = audit(&ours)["refused"].as_array().unwrap().clone();
    let reasons: BTreeMap<String, String> = entries
        .iter()
        .filter(|e| e["peer"] == json!(mallory_id_text))
        .map(|e| {
            (
                e["register"].as_str().unwrap().to_owned(),
                e["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    for reg in ["acl", "content", "tombstone"] {
        let reason = &reasons[&format!("memory:{mem}/{reg}")];
        assert!(
            reason.contains("not authored by the memory's origin"),
            "{reg}: {reason}"
        );
    }
    let zeus_id = format!("team:zeus@{}", &node_id(&ours)[..12]);
    for reg in [
        format!("membership:{zeus_id}/alice"),
        format!("membership:{zeus_id}/carol"),
        zeus_id.clone(),
        "agent:carol".to_owned(),
    ] {
        let reason = reasons
            .get(&reg)
            .unwrap_or_else(|| panic!("{reg} not audited: {reasons:?}"));
        assert!(
            reason.contains("outside the peer's policy"),
            "{reg}: {reason}"
        );
    }
    assert_eq!(reasons.len(), refused_facts.len(), "{reasons:?}");

    // Our memory: unchanged for alice and bob; still not carol's.
    assert_eq!(view("alice"), before_alice);
    assert_eq!(view("bob"), before_bob);
    invisible(&ours, "carol", &mem);
    assert!(ours.search_texts("bob", "mallorywashere").is_empty());
    // Mallory's memories: nothing reaches carol, by name, ownership or global.
    for id in [x.to_string(), y.to_string()] {
        invisible(&ours, "carol", &id);
    }
    assert!(ours.search_texts("carol", "carolbait").is_empty());
    assert!(ours.search_texts("carol", "apollobait").is_empty());
    let carol_list = ours.json(&["list", "--as", "carol", "--limit", "100"]);
    assert!(!carol_list.to_string().contains("mallory"), "{carol_list}");
    // x has no team:apollo grant: nobody here sees it, global or not.
    invisible(&ours, "alice", &x.to_string());
    assert!(ours.search_texts("bob", "carolbait").is_empty());
    // y is visible through team:apollo only.
    let got = ours.json(&["get", &y.to_string(), "--as", "alice"]);
    assert_eq!(got["visibility"], json!(["team:apollo"]), "{got}");
    assert_eq!(
        ours.search_texts("bob", "apollobait"),
        vec!["apollobait mallory note for apollo"]
    );
    // Teams and agents are as they were.
    assert_eq!(ours.json(&["team", "list"]), teams_before);
    assert_eq!(ours.json(&["agent", "list"]), agents_before);
}

// ------------------------------------------------------- 5. export --for

#[test]
fn export_for_a_scoped_peer_carries_only_its_scope_and_retractions() {
    let a = Home::new();
    let b = Home::new();
    let tmp = tempfile::tempdir().unwrap();
    let key = share_mesh_key(&a, &b);
    pair(&a, &b, "team:apollo");
    org(&a);
    for agent in ["alice", "bob", "carol"] {
        b.ok(&["agent", "add", agent]);
    }
    let private = a.add("alice", "fvprivate alice only", &[]);
    let agent = a.add("alice", "fvagent for bob by name", &["agent:bob"]);
    let zeus = a.add("carol", "fvzeus zeus plans", &["team:zeus"]);
    let global = a.add("alice", "fvglobal for everyone", &["global"]);
    let t1 = a.add("alice", "fvapolloone first apollo note", &["team:apollo"]);
    let t2 = a.add("alice", "fvapollotwo second apollo note", &["team:apollo"]);
    let tg = a.add("alice", "fvapolloglobal", &["team:apollo", "global"]);
    let tc = a.add("alice", "fvapollocarol", &["team:apollo", "agent:carol"]);
    a.ok(&["link", &t1, &t2, "--as", "alice"]);
    a.ok(&["link", &t1, &private, "--as", "alice"]);
    a.ok(&["link", &tg, &global, "--as", "alice"]);
    // apollo is a's team: its id is qualified by a (docs/design.md §3).
    let apollo = format!("apollo@{}", &node_id(&a)[..12]);
    let policy = grants(&[&format!("team:{apollo}")]);
    let bid = node_id(&b);

    struct Seen {
        content: BTreeSet<String>,
        acl: BTreeMap<String, Grants>,
        links: Vec<(String, String)>,
    }
    let check = |file: &Path| -> Seen {
        let (scopes, encrypted, facts) = bundle_facts(file, Some(&key));
        assert_eq!(scopes, vec![format!("team:{apollo}")]);
        assert!(encrypted);
        let mut seen = Seen {
            content: BTreeSet::new(),
            acl: BTreeMap::new(),
            links: Vec::new(),
        };
        for f in &facts {
            match &f.fact.body {
                FactBody::MemoryContent(c) => {
                    for w in ["fvprivate", "fvagent", "fvzeus", "fvglobal"] {
                        assert!(!c.text.plain().unwrap_or_default().contains(w), "{c:?}");
                    }
                    seen.content.insert(c.id.to_string());
                }
                FactBody::MemoryAcl(m) => {
                    seen.acl.insert(m.id.to_string(), m.grants.clone());
                }
                FactBody::MemoryTombstone(t) => panic!("unexpected tombstone {t:?}"),
                FactBody::Link(l) => seen.links.push((l.from.to_string(), l.to.to_string())),
                FactBody::Team(t) => assert_eq!(t.id.as_str(), apollo, "{t:?}"),
                FactBody::Membership(m) => {
                    assert_eq!(m.scope.to_string(), format!("team:{apollo}"), "{m:?}")
                }
                other => panic!("not for a scoped peer: {other:?}"),
            }
        }
        // Every memory whose content goes has an acl fact in the bundle
        // meeting the policy.
        for id in &seen.content {
            let g = seen
                .acl
                .get(id)
                .unwrap_or_else(|| panic!("content of {id} without its acl"));
            assert!(!g.intersection(&policy).is_empty(), "{id}: {g}");
        }
        seen
    };

    let first = tmp.path().join("first.amosb");
    export(&a, &first, &["--for", &bid]);
    let s = check(&first);
    let expected: BTreeSet<String> = [&t1, &t2, &tg, &tc].into_iter().cloned().collect();
    assert_eq!(s.content, expected);
    assert_eq!(s.acl.keys().cloned().collect::<BTreeSet<_>>(), expected);
    assert_eq!(s.links, vec![(t1.clone(), t2.clone())]);
    for id in [&private, &agent, &zeus, &global] {
        assert!(!s.acl.contains_key(id));
    }
    import(&b, &first);
    // The linked second note comes along by resonance.
    assert_eq!(
        b.search_texts("bob", "fvapolloone"),
        vec![
            "fvapolloone first apollo note",
            "fvapollotwo second apollo note"
        ]
    );
    // On b the agent:carol and global grants have no effect.
    let got = b.json(&["get", &tc, "--as", "bob"]);
    assert_eq!(got["visibility"], json!(["team:apollo"]));
    invisible(&b, "carol", &tc);
    invisible(&b, "carol", &tg);

    // Unshare t1 from apollo: it goes out again, as a retraction only.
    a.ok(&["unshare", &t1, "team:apollo", "--as", "alice"]);
    let second = tmp.path().join("second.amosb");
    export(&a, &second, &["--for", &bid]);
    let s = check(&second);
    assert!(!s.content.contains(&t1), "revoked content went out");
    let g = s.acl.get(&t1).expect("the retraction goes out");
    assert!(g.intersection(&policy).is_empty(), "{g}");
    assert!(s.links.iter().all(|(x, y)| x != &t1 && y != &t1));
    let still: BTreeSet<String> = [&t2, &tg, &tc].into_iter().cloned().collect();
    assert_eq!(s.content, still);

    let r = import(&b, &second);
    assert!(u64_of(&r, "applied") >= 1, "{r}");
    assert!(b.search_texts("bob", "fvapolloone").is_empty());
    assert!(b.search_texts("alice", "fvapolloone").is_empty());
    invisible(&b, "bob", &t1);
    invisible(&b, "alice", &t1);
    // No local agent may see it any longer: its content is purged.
    assert_eq!(db_hits(&b, "fvapolloone"), Vec::<String>::new());
    assert!(!db_hits(&b, "fvapollotwo").is_empty());
    assert_eq!(digest(&a, &["team:apollo"]), digest(&b, &["team:apollo"]));
}

// ------------------------------------------------------- recipient (item 9)

/// A bundle names its recipient in its signed header: one that A exported
/// `--for C` is refused by B (exit 3, one line, nothing applied, nothing
/// audited) — even though B has A as a full peer — and imported by C.
#[test]
fn a_bundle_made_for_another_node_is_refused_and_changes_nothing() {
    let (a, b, c) = (Home::new(), Home::new(), Home::new());
    let tmp = tempfile::tempdir().unwrap();
    share_mesh_key(&a, &b);
    let key = a.json(&["mesh", "key", "show"])["mesh_key"]
        .as_str()
        .expect("mesh_key")
        .to_owned();
    c.ok(&["mesh", "key", "set", &key]);
    pair(&a, &b, "full");
    pair(&a, &c, "full");
    org(&a);
    a.add("alice", "addressedonly for carol's node", &["global"]);
    let cid = node_id(&c);

    let for_c = tmp.path().join("for-c.amosb");
    let rep = export(&a, &for_c, &["--for", &cid]);
    assert_eq!(rep["recipient"], json!(cid), "{rep}");
    assert!(u64_of(&rep, "facts") > 0, "{rep}");

    // B: refused, exit 3, one line naming the file, the recipient and B.
    let line = refused_import(&b, &for_c, 3, &["was made for node"], "bundle for C at B");
    assert!(line.contains(&cid), "names the recipient: {line}");
    assert!(line.contains(&node_id(&b)), "names this node: {line}");
    // (refused_import checked that B's digest, memory count and audit log
    // are unchanged; B never had a memory.)
    assert_eq!(b.json(&["status"])["memories"], json!(0));
    // Refused before anything else about the sender is looked at: a node
    // that does not even know A gets the same answer.
    let d = Home::new();
    d.ok(&["mesh", "key", "set", &key]);
    refused_import(&d, &for_c, 3, &["was made for node"], "bundle for C at D");
    // And A itself is told the bundle is its own.
    refused_import(&a, &for_c, 1, &["made by this node"], "bundle for C at A");

    // Positive control: C imports the very same file.
    let r = import(&c, &for_c);
    assert_eq!(r["recipient"], json!(cid), "{r}");
    assert!(u64_of(&r, "applied") > 0, "{r}");
    assert_eq!(u64_of(&r, "refused"), 0, "{r}");
    assert_eq!(digest(&a, &[]), digest(&c, &[]));
    assert_eq!(
        c.search_texts("alice", "addressedonly"),
        vec!["addressedonly for carol's node"]
    );

    // An export not made `--for` one peer says so, and any peer imports it.
    let any = tmp.path().join("any.amosb");
    let rep = export(&a, &any, &[]);
    assert_eq!(rep["recipient"], json!("any peer"), "{rep}");
    let r = import(&b, &any);
    assert_eq!(r["recipient"], json!("any peer"), "{r}");
    assert!(u64_of(&r, "applied") > 0, "{r}");
    assert_eq!(digest(&a, &[]), digest(&b, &[]));
}

// ------------------------------------------- 6. the origin rule on imports

/// The bytes an amos signature covers (amos_protocol::sign, a wire
/// constant): to sign a forgery the protocol's own signer refuses to make.
fn forged(id: &amos_protocol::NodeIdentity, wall_ms: u64, body: FactBody) -> Vec<u8> {
    use ed25519_dalek::Signer;
    let fact = Fact {
        clock: Hlc {
            wall_ms,
            logical: 0,
            node: id.node_id(),
        },
        body,
    };
    assert!(
        fact.validate().is_err(),
        "the forgery breaks a protocol rule"
    );
    let mut msg = b"amos-fact-v1\0".to_vec();
    msg.extend(amos_protocol::codec::encode(&fact));
    let key = ed25519_dalek::SigningKey::from_bytes(&id.secret());
    SignedFact {
        fact,
        signature: key.sign(&msg).to_bytes(),
    }
    .to_bytes()
}

/// A bundle from `identity` (any peer) holding `facts` in one frame.
fn bundle_of(
    path: &Path,
    identity: &amos_protocol::NodeIdentity,
    key: &MeshKey,
    scopes: Vec<String>,
    facts: &[Vec<u8>],
) {
    let mut w = BundleWriter::new(
        File::create(path).unwrap(),
        identity,
        amos_protocol::Recipient::AnyPeer,
        Hlc {
            wall_ms: now_ms() + 2000,
            logical: 0,
            node: identity.node_id(),
        },
        scopes,
        Some(key),
        [9; 16],
    )
    .unwrap();
    w.write_frame(facts).unwrap();
    w.finish().unwrap();
}

/// "Close the side channels" for imports (issue 40 item 2): a scoped
/// peer's bundle cannot bring a record of our team under its own claim of
/// origin, a record of a scope under our qualifier, or a membership our
/// team's origin did not write; and a record naming a scope under another
/// node's qualifier is a forgery the whole bundle is refused for. Nothing
/// changes on our node but the audit log.
#[test]
fn a_bundle_cannot_bring_a_team_record_or_member_its_origin_did_not_write() {
    let ours = Home::new();
    let mallory = Home::new();
    let tmp = tempfile::tempdir().unwrap();
    let key = share_mesh_key(&ours, &mallory);
    pair(&ours, &mallory, "team:apollo");
    org(&ours);
    ours.ok(&["agent", "add", "eve"]);
    let mem = ours.add("alice", "apollo dock code is 7311", &["team:apollo"]);
    let ours_id: NodeId = node_id(&ours).parse().unwrap();
    let apollo = TeamId::qualified("apollo", &ours_id).unwrap();
    let identity = amos_node::Home::new(mallory.path())
        .load_identity()
        .unwrap();
    let mallory_id = identity.node_id();
    let now = now_ms() + 1000;
    let scopes = vec![format!("team:{apollo}")];
    let before = (state(&ours), ours.json(&["team", "list"]));

    // (1) Our apollo's record, claimed as mallory's own: its id is
    // qualified by us, so the record is a forgery (Fact::validate) and the
    // bundle is refused whole, in one line, changing nothing.
    let forgery = tmp.path().join("forged-origin.amosb");
    bundle_of(
        &forgery,
        &identity,
        &key,
        scopes.clone(),
        &[forged(
            &identity,
            now,
            FactBody::Team(TeamFact {
                id: apollo.clone(),
                origin: mallory_id,
                name: "apollo".into(),
                present: true,
            }),
        )],
    );
    refused_import(
        &ours,
        &forgery,
        1,
        &["must be qualified by its origin"],
        "a record under our qualifier claiming another origin",
    );

    // (2) Validly signed by mallory, each refused alone by the origin rule:
    // eve added to our apollo, bob removed, our apollo renamed and deleted.
    let member = |agent: &str, present: bool, t: u32| {
        sign(
            &identity,
            now,
            t,
            FactBody::Membership(MembershipFact {
                scope: OrgScope::Team(apollo.clone()),
                agent: AgentId::parse(agent).unwrap(),
                role: "member".into(),
                present,
            }),
        )
    };
    let facts = vec![
        member("eve", true, 1),
        member("bob", false, 2),
        sign(
            &identity,
            now,
            3,
            FactBody::Team(TeamFact {
                id: apollo.clone(),
                origin: ours_id,
                name: "mallory's apollo".into(),
                present: false,
            }),
        ),
    ];
    let side = tmp.path().join("side-channel.amosb");
    bundle_of(&side, &identity, &key, scopes, &facts);
    let r = import(&ours, &side);
    assert_eq!(u64_of(&r, "refused"), 3, "{r}");
    assert_eq!(u64_of(&r, "applied"), 0, "{r}");
    let codes: BTreeSet<String> = audit(&ours)["refused"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["peer"] == json!(mallory_id.to_string()))
        .map(|e| e["code"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(codes, BTreeSet::from(["org_not_origin".to_owned()]));
    // Nothing changed: the teams, their rosters and who sees what.
    assert_eq!((state(&ours), ours.json(&["team", "list"])), before);
    invisible(&ours, "eve", &mem);
    assert_eq!(
        ours.search_texts("bob", "dock code"),
        vec!["apollo dock code is 7311"]
    );
}

// ------------------------------------------------- sealed bundles (§8.1)

/// A bundle sealed to one node's identity (`--for B --seal`) opens only on
/// B: a third node holding the same mesh key, even registered as a full
/// peer of the sender, is refused in one line (exit 3) and changes
/// nothing; so is a node that does not know the sender. Any byte of any
/// region changed is refused and changes nothing on B; the intact file
/// then imports. `--seal` without `--for` is bad input.
#[test]
fn a_sealed_bundle_opens_only_on_its_recipient_whatever_key_a_third_node_holds() {
    let (a, b, c) = (Home::new(), Home::new(), Home::new());
    let tmp = tempfile::tempdir().unwrap();
    share_mesh_key(&a, &b);
    let key = a.json(&["mesh", "key", "show"])["mesh_key"]
        .as_str()
        .expect("mesh_key")
        .to_owned();
    c.ok(&["mesh", "key", "set", &key]);
    pair(&a, &b, "full");
    pair(&a, &c, "full");
    pair(&b, &c, "full");
    org(&a);
    a.add("alice", "sealedonly for bob's node", &["global"]);
    let (bid, cid) = (node_id(&b), node_id(&c));

    let for_b = tmp.path().join("for-b.amosb");
    let rep = export(&a, &for_b, &["--for", &bid, "--seal"]);
    assert_eq!(
        (&rep["sealed"], &rep["encrypted"]),
        (&json!(true), &json!(true)),
        "{rep}"
    );
    let good = std::fs::read(&for_b).unwrap();
    assert_eq!(
        u16::from_le_bytes([good[8], good[9]]),
        amos_protocol::BUNDLE_SEALED_VERSION
    );
    assert!(!contains(&good, b"sealedonly"));

    // C holds the mesh key and has A as a full peer: still refused.
    let line = refused_import(&c, &for_b, 3, &["is sealed to node"], "sealed for B at C");
    assert!(line.contains(&bid), "names the recipient: {line}");
    assert!(line.contains(&cid), "names this node: {line}");
    assert_eq!(db_hits(&c, "sealedonly"), Vec::<String>::new());
    // The mesh key alone opens nothing either (the library, no identity).
    let key: MeshKey = key.parse().unwrap();
    let err = verify_bundle(BufReader::new(File::open(&for_b).unwrap()), Some(&key))
        .unwrap_err()
        .to_string();
    assert!(err.contains("is sealed to node"), "{err}");
    // A node that knows nobody: the same answer.
    let d = Home::new();
    refused_import(&d, &for_b, 3, &["is sealed to node"], "sealed for B at D");

    // Every region of it, changed, is refused on B and changes nothing.
    let h = u32::from_le_bytes(good[10..14].try_into().unwrap()) as usize;
    let frame = 14 + h + 4 + 3;
    let len = good.len();
    for (at, region) in [
        (9, "version"),
        (14 + 40, "header: recipient"),
        (14 + h - 20, "header: ephemeral key"),
        (14 + h - 1, "header: postmark"),
        (frame, "frame"),
        (len - 70, "trailer: counts"),
        (len - 5, "trailer: signature"),
    ] {
        let bad = tmp.path().join(format!("bad-{at}.amosb"));
        let mut bytes = good.clone();
        bytes[at] ^= 0x10;
        std::fs::write(&bad, &bytes).unwrap();
        refused_import(
            &b,
            &bad,
            if at == 14 + 40 { 3 } else { 1 },
            ANY_REASON_SEALED,
            region,
        );
    }
    let cut = tmp.path().join("cut.amosb");
    std::fs::write(&cut, &good[..len / 2]).unwrap();
    refused_import(&b, &cut, 1, &["truncated"], "truncated");

    // B opens the intact one.
    let r = import(&b, &for_b);
    assert_eq!(r["sealed"], json!(true), "{r}");
    assert!(u64_of(&r, "applied") > 0, "{r}");
    assert_eq!(
        b.search_texts("alice", "sealedonly"),
        vec!["sealedonly for bob's node"]
    );

    // --seal needs one recipient.
    let r = a.run(&["bundle", "export", p(&tmp.path().join("x.amosb")), "--seal"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("--seal needs --for"), "{r:?}");
}

/// What a refused sealed bundle's one line may say: a changed recipient
/// byte makes it sealed to another node; anything else is damage.
const ANY_REASON_SEALED: &[&str] = &[
    "is sealed to node",
    "not supported",
    "corrupt or was tampered with",
    "does not decode",
    "truncated",
    "too large",
    "after its end",
];

/// A scoped peer is given no mesh key: a bundle `--for` it is sealed by
/// default (without `--no-seal`), opens there, and carries only what its
/// policy admits.
#[test]
fn a_scoped_peer_without_the_mesh_key_reads_a_bundle_sealed_to_it() {
    let (a, b) = (Home::new(), Home::new());
    let tmp = tempfile::tempdir().unwrap();
    pair(&a, &b, "team:apollo");
    org(&a);
    for agent in ["alice", "bob"] {
        b.ok(&["agent", "add", agent]);
    }
    a.add("alice", "sealscope apollo plan", &["team:apollo"]);
    a.add("alice", "sealprivate diary", &[]);
    let f = tmp.path().join("for-b.amosb");
    let rep = export(&a, &f, &["--for", &node_id(&b)]);
    assert_eq!(rep["sealed"], json!(true), "{rep}");
    let r = import(&b, &f);
    assert!(u64_of(&r, "applied") > 0, "{r}");
    assert_eq!(
        b.search_texts("bob", "sealscope"),
        vec!["sealscope apollo plan"]
    );
    assert_eq!(db_hits(&b, "sealprivate"), Vec::<String>::new());
}
