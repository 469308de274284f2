//! Property tests: no edit is ever lost (docs/design.md §4, "Concurrent content
//! edits"; `amos_sync::text`).
//!
//! Two to four in-memory replicas, all `full` peers of each other, edit the
//! same memories concurrently — insert a word, delete a word they see,
//! append — and exchange random subsets of their facts in random order
//! (duplicates and loss included); the origin sometimes compacts a history
//! into a snapshot. After a final all-to-all exchange:
//!
//! * every replica holds byte-identical text for every memory, and the same
//!   digest;
//! * every word inserted anywhere that no edit deleted is in the text, its
//!   characters together (a delete is always causally after the insert:
//!   the deleter saw the word);
//! * no deleted word is in the text (words are unique, and a delete removes
//!   the only copy — concurrent deletes of one word both "win");
//! * the other content fields are still last-writer-wins: every replica
//!   holds the same content fact, the one with the greatest clock.

use std::collections::BTreeSet;

use amos_acl::PeerPolicy;
use amos_protocol::{
    AgentId, FactBody, Grants, Hlc, MemoryAcl, MemoryContent, MemoryFixed, MemoryId, MemoryText,
    MemoryType, NodeIdentity, Register, SignedFact, Verified,
};
use amos_sync::MemStore;
use amos_sync::{Sender, apply_batch};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

const BASE_MS: u64 = 1_750_000_000_000;
const MAX_SKEW_MS: u64 = 600_000;

#[derive(Clone, Debug)]
enum Op {
    /// Insert a fresh word before word `pos` (mod the words there are + 1).
    Insert { at: usize, mem: usize, pos: usize },
    /// Delete word `pos` of the text replica `at` sees.
    Delete { at: usize, mem: usize, pos: usize },
    /// Change importance only (a fields-only update on an edited memory).
    Importance { at: usize, mem: usize, value: u8 },
    /// The origin (replica 0) compacts the history.
    Compact { mem: usize },
    /// Send a random subset of `from`'s facts to `to`, shuffled.
    Exchange {
        from: usize,
        to: usize,
        keep: Vec<bool>,
        seed: u64,
    },
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0usize..4, 0usize..2, 0usize..64).prop_map(|(at, mem, pos)| Op::Insert { at, mem, pos }),
        2 => (0usize..4, 0usize..2, 0usize..64).prop_map(|(at, mem, pos)| Op::Delete { at, mem, pos }),
        1 => (0usize..4, 0usize..2, 0u8..=100).prop_map(|(at, mem, value)| Op::Importance { at, mem, value }),
        1 => (0usize..2).prop_map(|mem| Op::Compact { mem }),
        3 => (0usize..4, 0usize..4, prop::collection::vec(any::<bool>(), 0..48), any::<u64>())
            .prop_map(|(from, to, keep, seed)| Op::Exchange { from, to, keep, seed }),
    ]
}

struct World {
    ids: Vec<NodeIdentity>,
    stores: Vec<MemStore>,
    mems: Vec<MemoryId>,
    /// Physical time: advances on every step.
    t: u64,
    next_word: usize,
    inserted: BTreeSet<String>,
    deleted: BTreeSet<String>,
}

/// Every word is `w` and three digits; nothing else has a `w`.
const WORD_LEN: usize = 4;

/// Byte offsets where the words of `text` start.
fn word_starts(text: &str) -> Vec<usize> {
    text.match_indices('w').map(|(i, _)| i).collect()
}

impl World {
    fn new(n: usize) -> World {
        let ids: Vec<NodeIdentity> = (0..n)
            .map(|i| NodeIdentity::from_secret([i as u8 + 1; 32]))
            .collect();
        let mut stores: Vec<MemStore> = ids.iter().map(|i| MemStore::new(i.node_id())).collect();
        for (i, s) in stores.iter_mut().enumerate() {
            for (j, other) in ids.iter().enumerate() {
                if i != j {
                    s.peers.insert(other.node_id(), PeerPolicy::Full);
                }
            }
        }
        let mut w = World {
            ids,
            stores,
            mems: Vec::new(),
            t: BASE_MS,
            next_word: 0,
            inserted: BTreeSet::new(),
            deleted: BTreeSet::new(),
        };
        // Two memories made at replica 0 and given to everyone.
        for m in 0..2u8 {
            let id = MemoryId::new(BASE_MS, [m; 10]);
            let fixed = MemoryFixed {
                owner: AgentId::parse("x").unwrap(),
                created_ms: BASE_MS,
                origin: w.ids[0].node_id(),
            };
            let base: Vec<String> = (0..4).map(|_| w.fresh_word()).collect();
            let text = base.join(" ") + "\n";
            w.stores[0].write(
                &w.ids[0],
                FactBody::MemoryContent(MemoryContent {
                    id,
                    fixed: fixed.clone(),
                    kind: MemoryType::parse("note").unwrap(),
                    text: MemoryText::Plain(text),
                    tags: vec![],
                    importance: 0.5,
                    confidence: 1.0,
                    pinned: false,
                    expires_ms: None,
                    supersedes: None,
                    validity: Default::default(),
                }),
                BASE_MS,
            );
            w.stores[0].write(
                &w.ids[0],
                FactBody::MemoryAcl(MemoryAcl {
                    id,
                    fixed,
                    grants: Grants::from_scopes(["global".parse().unwrap()]),
                }),
                BASE_MS,
            );
            w.mems.push(id);
        }
        for to in 1..n {
            w.send(0, to, None, 0);
        }
        w
    }

    fn fresh_word(&mut self) -> String {
        let w = format!("w{:03}", self.next_word);
        self.next_word += 1;
        self.inserted.insert(w.clone());
        w
    }

    fn send(&mut self, from: usize, to: usize, keep: Option<&[bool]>, seed: u64) {
        if from == to {
            return;
        }
        let mut facts: Vec<Verified<SignedFact>> = self.stores[from].export(&PeerPolicy::Full);
        if let Some(keep) = keep {
            let mut i = 0;
            facts.retain(|_| {
                let k = keep.get(i).copied().unwrap_or(i % 3 == 0);
                i += 1;
                k
            });
            // A deterministic shuffle and a duplicate.
            let len = facts.len();
            if len > 1 {
                let mut s = seed | 1;
                for i in (1..len).rev() {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    facts.swap(i, (s % (i as u64 + 1)) as usize);
                }
                facts.push(facts[0].clone());
            }
        }
        let sender = Sender {
            node: self.ids[from].node_id(),
            policy: PeerPolicy::Full,
        };
        let Ok(report) = apply_batch(&mut self.stores[to], &sender, facts, self.t, MAX_SKEW_MS);
        assert_eq!(report.refused, 0, "{report:?}");
        assert_eq!(report.deferred, 0, "{report:?}");
    }

    fn text(&self, at: usize, mem: usize) -> Option<String> {
        let t = self.stores[at].text(&self.mems[mem]);
        // The document a replica keeps in step is exactly what its log builds.
        if let Some((log, _)) = self.stores[at].texts.get(&self.mems[mem]) {
            let built = log.build(self.mems[mem]).unwrap().text();
            assert_eq!(
                Some(built),
                t.clone(),
                "replica {at}: kept document and log differ"
            );
        }
        t
    }

    fn step(&mut self, op: &Op) {
        let n = self.stores.len();
        self.t += 7;
        match *op {
            Op::Insert { at, mem, pos } => {
                let at = at % n;
                // Not held, or held without its base yet: nothing to edit.
                let Some(text) = self.text(at, mem).filter(|t| !t.is_empty()) else {
                    return;
                };
                let starts = word_starts(&text);
                let w = self.fresh_word();
                let k = pos % (starts.len() + 1);
                let new = match starts.get(k) {
                    Some(&i) => format!("{}{w} {}", &text[..i], &text[i..]),
                    None => match text.strip_suffix('\n') {
                        Some(t) => format!("{t} {w}\n"),
                        None => format!("{text} {w}"),
                    },
                };
                let id = self.mems[mem];
                let e = self.stores[at].edit_text(&self.ids[at], &id, &new, self.t);
                assert!(e.is_some(), "the edit was made");
                assert_eq!(self.text(at, mem).as_deref(), Some(new.as_str()));
            }
            Op::Delete { at, mem, pos } => {
                let at = at % n;
                let Some(text) = self.text(at, mem).filter(|t| !t.is_empty()) else {
                    return;
                };
                let starts = word_starts(&text);
                if starts.len() < 2 {
                    return;
                }
                let i = starts[pos % starts.len()];
                let (mut from, mut to) = (i, i + WORD_LEN);
                // Take one space with it: the one after, else the one before.
                if text[to..].starts_with(' ') {
                    to += 1;
                } else if text[..from].ends_with(' ') {
                    from -= 1;
                }
                let gone = text[i..i + WORD_LEN].to_owned();
                let new = format!("{}{}", &text[..from], &text[to..]);
                let id = self.mems[mem];
                let e = self.stores[at].edit_text(&self.ids[at], &id, &new, self.t);
                assert!(e.is_some(), "the edit was made");
                assert_eq!(self.text(at, mem).as_deref(), Some(new.as_str()));
                self.deleted.insert(gone);
            }
            Op::Importance { at, mem, value } => {
                let at = at % n;
                let id = self.mems[mem];
                let Some(FactBody::MemoryContent(mut c)) = self.stores[at]
                    .facts
                    .get(&Register::MemoryContent(id))
                    .map(|f| f.fact.body.clone())
                else {
                    return;
                };
                c.importance = f32::from(value) / 100.0;
                // On an edited memory a fields-only update carries no change;
                // on a plain one it repeats the plain text.
                if !matches!(c.text, MemoryText::Plain(_))
                    || self.stores[at].texts.contains_key(&id)
                {
                    c.text = MemoryText::Edit(Vec::new());
                }
                self.stores[at].write(&self.ids[at], FactBody::MemoryContent(c), self.t);
            }
            Op::Compact { mem } => {
                let id = self.mems[mem];
                self.stores[0].compact_text(&self.ids[0], &id, self.t);
            }
            Op::Exchange {
                from,
                to,
                ref keep,
                seed,
            } => self.send(from % n, to % n, Some(keep), seed),
        }
    }

    fn converge(&mut self) {
        let n = self.stores.len();
        for _ in 0..2 {
            for from in 0..n {
                for to in 0..n {
                    self.send(from, to, None, 0);
                }
            }
        }
    }
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/text_merge.txt",
        ))),
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config(96))]

    #[test]
    fn concurrent_edits_converge_and_lose_no_word(
        n in 2usize..=4,
        ops in prop::collection::vec(arb_op(), 1..40),
    ) {
        let mut w = World::new(n);
        for op in &ops {
            w.step(op);
        }
        w.converge();
        let digest = w.stores[0].digest();
        for mem in 0..w.mems.len() {
            let text = w.text(0, mem).expect("replica 0 holds the memory");
            for at in 1..n {
                let theirs = w.text(at, mem);
                prop_assert_eq!(theirs.as_deref(), Some(text.as_str()), "replica {} memory {}", at, mem);
            }
            let id = w.mems[mem];
            for word in &w.deleted {
                prop_assert!(!text.contains(word.as_str()), "deleted {} is back in {:?}", word, text);
            }
            let content: Vec<Option<Hlc>> = w
                .stores
                .iter()
                .map(|s| s.facts.get(&Register::MemoryContent(id)).map(|f| f.fact.clock))
                .collect();
            prop_assert!(content.windows(2).all(|p| p[0] == p[1]), "{:?}", content);
        }
        // Every inserted, undeleted word is in the texts exactly once, its
        // characters together (a word is `w` and three digits, so it cannot
        // be found across two others). The whitespace between two words may
        // go when one side deletes a word and the other inserts next to it:
        // that is whitespace, not an edit, lost.
        let all: String = (0..w.mems.len()).filter_map(|m| w.text(0, m)).collect();
        for word in w.inserted.difference(&w.deleted) {
            let found = all.matches(word.as_str()).count();
            prop_assert_eq!(found, 1, "word {} in {:?}", word, all);
        }
        for s in &w.stores {
            prop_assert_eq!(s.digest(), digest.clone());
        }
    }
}

/// The example: two agents append to the same runbook while their
/// machines are apart; both lines survive, in the same order everywhere.
#[test]
fn two_appends_made_apart_both_survive() {
    let mut w = World::new(2);
    let id = w.mems[0];
    let base = w.text(0, 0).unwrap();
    w.t += 10;
    let t = w.t;
    let a = format!("{base}restart the api\n");
    let b = format!("{base}rotate the logs\n");
    assert!(w.stores[0].edit_text(&w.ids[0], &id, &a, t).is_some());
    assert!(w.stores[1].edit_text(&w.ids[1], &id, &b, t).is_some());
    w.converge();
    let x = w.text(0, 0).unwrap();
    assert_eq!(Some(x.clone()), w.text(1, 0));
    assert!(x.starts_with(&base), "{x:?}");
    assert!(
        x.contains("restart the api\n") && x.contains("rotate the logs\n"),
        "{x:?}"
    );
    assert_eq!(w.stores[0].digest(), w.stores[1].digest());
}

/// The origin rule holds for edits: a scoped peer's edit of a memory it did
/// not create is refused, and so is a compaction by anyone but the origin
/// (even a `full` peer); a change whose bytes were altered after signing
/// fails verification; a signed change that does not decode is refused.
#[test]
fn edits_obey_the_origin_rule_and_altered_changes_fail() {
    let mut w = World::new(3);
    let id = w.mems[0];
    let origin = w.ids[0].node_id();
    // Replica 1 is a full peer of 0 and may edit; replica 2 is *scoped* for
    // replica 0 from now on.
    w.stores[0]
        .peers
        .insert(w.ids[2].node_id(), "global".parse::<PeerPolicy>().unwrap());
    let t = w.t + 10;
    let text = w.text(2, 0).unwrap();
    let edit = w.stores[2]
        .edit_text(&w.ids[2], &id, &format!("{text}mallory was here\n"), t)
        .expect("edit made on 2");
    let from2 = Sender {
        node: w.ids[2].node_id(),
        policy: "global".parse().unwrap(),
    };
    let Ok(r) = apply_batch(&mut w.stores[0], &from2, vec![edit.clone()], t, MAX_SKEW_MS);
    assert_eq!(r.refused, 1, "{r:?}");
    assert!(!w.text(0, 0).unwrap().contains("mallory"));

    // A snapshot by a full peer that is not the origin.
    let ok = w.stores[1].edit_text(&w.ids[1], &id, &format!("{text}fine\n"), t);
    assert!(ok.is_some());
    let snap = w.stores[1]
        .compact_text(&w.ids[1], &id, t + 1)
        .expect("made");
    let from1 = Sender {
        node: w.ids[1].node_id(),
        policy: PeerPolicy::Full,
    };
    let Ok(r) = apply_batch(&mut w.stores[0], &from1, vec![snap], t + 1, MAX_SKEW_MS);
    assert_eq!(r.refused, 1, "only the origin compacts: {r:?}");
    assert_ne!(w.ids[1].node_id(), origin);

    // Altered bytes: flip one byte inside the change; the signature fails.
    let mut bytes = edit.to_bytes();
    let at = bytes.len() - 80;
    bytes[at] ^= 1;
    assert!(SignedFact::decode_verified(&bytes).is_err());

    // A change that does not decode, properly signed by the origin itself.
    let Some(FactBody::MemoryContent(mut c)) = w.stores[0]
        .facts
        .get(&Register::MemoryContent(id))
        .map(|f| f.fact.body.clone())
    else {
        panic!("content held");
    };
    c.text = MemoryText::Edit(b"not an automerge change".to_vec());
    let forged = w.ids[0]
        .sign(amos_protocol::Fact {
            clock: Hlc {
                wall_ms: t + 2,
                logical: 0,
                node: origin,
            },
            body: FactBody::MemoryContent(c),
        })
        .expect("signed");
    let from0 = Sender {
        node: origin,
        policy: PeerPolicy::Full,
    };
    let before = w.text(1, 0);
    let Ok(r) = apply_batch(&mut w.stores[1], &from0, vec![forged], t + 2, MAX_SKEW_MS);
    assert_eq!(r.refused, 1, "{r:?}");
    assert_eq!(w.text(1, 0), before);
}
