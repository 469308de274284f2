//! Memory text as an automerge document (DESIGN.md §4, "Concurrent content
//! edits"): the part of the merge rule that keeps both of two concurrent
//! edits.
//!
//! A memory's text is plain until its first edit. From then on it is the
//! text of one automerge document built from a set of facts:
//!
//! * the **base**: the memory's plain text. Every node derives the same
//!   *seed change* from it and the memory id (fixed actor, timestamp 0), so
//!   the seed's hash — and every edit built on it — is the same everywhere;
//! * **edits**: one automerge change each, made by the node that edited, with
//!   an actor derived from that fact's author and clock;
//! * at most one **snapshot**: the whole document as the origin saved it
//!   when it compacted the history. It is only a re-encoding of the changes
//!   it holds, so the text is always that of the *union* of the changes the
//!   node holds, whichever of them came packed in a snapshot.
//!
//! The union of change sets is commutative, associative and idempotent, and
//! automerge's text merge is deterministic, so replicas holding the same
//! facts hold byte-identical text.
//!
//! Must never: read clocks or storage. Bytes from peers are decoded here
//! (they come signed, but are still checked, and any failure is an error,
//! never a panic).

use std::collections::{BTreeMap, BTreeSet};

use automerge::transaction::{CommitOptions, Transactable};
use automerge::{ActorId, AutoCommit, Change, ChangeHash, ObjType, ROOT, ReadDoc, Value};

use amos_protocol::{FactBody, Hlc, MemoryId, MemoryText, NodeId, SignedFact};

/// The id of one change: automerge's change hash.
pub type ChangeId = [u8; 32];

pub use amos_protocol::fact::{MAX_CHANGE_BYTES, MAX_SNAPSHOT_BYTES};

const TEXT_KEY: &str = "text";

/// Why text bytes were not accepted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TextError {
    #[error("malformed text change: {0}")]
    Malformed(String),
    #[error("text {what} of {size} bytes exceeds the limit of {limit}")]
    TooLarge {
        what: &'static str,
        size: usize,
        limit: usize,
    },
}

fn malformed(e: impl std::fmt::Display) -> TextError {
    TextError::Malformed(e.to_string())
}

/// Check the text a content fact carries decodes (a change, or a saved
/// document); plain text is checked by `Fact::validate`.
pub fn check(text: &MemoryText) -> Result<(), TextError> {
    match text {
        MemoryText::Plain(_) => Ok(()),
        MemoryText::Edit(c) if c.is_empty() => Ok(()),
        MemoryText::Edit(c) => change_id(c).map(|_| ()),
        MemoryText::Snapshot(d) => TextDoc::load(MemoryId([0; 16]), d).map(|_| ()),
    }
}

/// Decode one change a fact carries and return its id.
pub fn change_id(bytes: &[u8]) -> Result<ChangeId, TextError> {
    Ok(decode_change(bytes)?.hash().0)
}

fn decode_change(bytes: &[u8]) -> Result<Change, TextError> {
    if bytes.len() > MAX_CHANGE_BYTES {
        return Err(TextError::TooLarge {
            what: "change",
            size: bytes.len(),
            limit: MAX_CHANGE_BYTES,
        });
    }
    Change::try_from(bytes).map_err(malformed)
}

fn actor(domain: &[u8], parts: &[&[u8]]) -> ActorId {
    let mut h = blake3::Hasher::new_derive_key("amos text actor v1");
    h.update(domain);
    for p in parts {
        h.update(p);
    }
    ActorId::from(&h.finalize().as_bytes()[..16])
}

/// The seed change every node derives from a memory's plain text.
fn seed(id: &MemoryId, base: &str) -> Result<Change, TextError> {
    let mut doc = AutoCommit::new().with_actor(actor(b"seed", &[&id.0]));
    let text = doc
        .put_object(ROOT, TEXT_KEY, ObjType::Text)
        .map_err(malformed)?;
    doc.splice_text(&text, 0, 0, base).map_err(malformed)?;
    doc.commit_with(CommitOptions::default().with_time(0));
    doc.get_last_local_change()
        .ok_or_else(|| malformed("the seed made no change"))
}

/// The id of the seed change for `base` (to tell whether a snapshot covers it).
pub fn seed_id(id: &MemoryId, base: &str) -> Result<ChangeId, TextError> {
    Ok(seed(id, base)?.hash().0)
}

/// Split text into words, each with the whitespace after it (leading
/// whitespace is a word of its own): the units edits insert and delete.
fn words(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut in_space = false;
    for (i, c) in text.char_indices() {
        let space = c.is_whitespace();
        if in_space && !space && i > start {
            out.push(&text[start..i]);
            start = i;
        }
        in_space = space;
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

/// Turn `old` into `new` from a word-level diff: words are inserted and
/// deleted whole, so a concurrent insertion never lands inside a word this
/// edit keeps; where words are replaced, only the characters between the
/// replaced run's common prefix and suffix change.
fn splice_by_words(
    doc: &mut AutoCommit,
    obj: &automerge::ObjId,
    old: &str,
    new: &str,
) -> Result<(), TextError> {
    use similar::DiffOp;
    let (a, b) = (words(old), words(new));
    let chars = |ws: &[&str]| ws.iter().map(|w| w.chars().count()).sum::<usize>();
    // Merge each run of deletes, inserts and replaces into one hunk
    // (old words a[o0..o1] become new words b[n0..n1]).
    let mut hunks: Vec<(usize, usize, usize, usize)> = Vec::new();
    let mut open: Option<(usize, usize, usize, usize)> = None;
    for op in similar::capture_diff_slices(similar::Algorithm::Myers, &a, &b) {
        let (o, n) = (op.old_range(), op.new_range());
        if let DiffOp::Equal { .. } = op {
            hunks.extend(open.take());
            continue;
        }
        open = Some(match open {
            Some((o0, _, n0, _)) => (o0, o.end, n0, n.end),
            None => (o.start, o.end, n.start, n.end),
        });
    }
    hunks.extend(open);
    // Apply from the last hunk back, so earlier positions stay valid.
    for (o0, o1, n0, n1) in hunks.into_iter().rev() {
        let pos = chars(&a[..o0]);
        // Keep the characters both sides share at the ends (a word whose
        // trailing whitespace changed stays the same word).
        let was: Vec<char> = a[o0..o1].concat().chars().collect();
        let now: Vec<char> = b[n0..n1].concat().chars().collect();
        let pre = was.iter().zip(&now).take_while(|(x, y)| x == y).count();
        let suf = was[pre..]
            .iter()
            .rev()
            .zip(now[pre..].iter().rev())
            .take_while(|(x, y)| x == y)
            .count();
        let ins: String = now[pre..now.len() - suf].iter().collect();
        let del = was.len() - pre - suf;
        if del > 0 || !ins.is_empty() {
            doc.splice_text(obj, pos + pre, del as isize, &ins)
                .map_err(malformed)?;
        }
    }
    Ok(())
}

/// One memory's text document.
pub struct TextDoc {
    id: MemoryId,
    doc: AutoCommit,
}

impl std::fmt::Debug for TextDoc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextDoc").field("id", &self.id).finish()
    }
}

impl TextDoc {
    /// An empty document (no base yet).
    pub fn empty(id: MemoryId) -> TextDoc {
        TextDoc {
            id,
            doc: AutoCommit::new(),
        }
    }

    /// Load a document saved by [`TextDoc::save`] (a local cache) or carried
    /// by a snapshot fact.
    pub fn load(id: MemoryId, bytes: &[u8]) -> Result<TextDoc, TextError> {
        if bytes.len() > MAX_SNAPSHOT_BYTES {
            return Err(TextError::TooLarge {
                what: "snapshot",
                size: bytes.len(),
                limit: MAX_SNAPSHOT_BYTES,
            });
        }
        let doc = AutoCommit::load(bytes).map_err(malformed)?;
        Ok(TextDoc { id, doc })
    }

    /// Build from the facts that make up the text: the base text (if held),
    /// a snapshot (if any) and the edits' changes, in any order. A change
    /// that does not decode or fit is left out.
    pub fn build<'a>(
        id: MemoryId,
        base: Option<&str>,
        snapshot: Option<&[u8]>,
        changes: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<TextDoc, TextError> {
        let mut doc = match snapshot {
            Some(s) => TextDoc::load(id, s)?,
            None => TextDoc::empty(id),
        };
        if let Some(base) = base {
            doc.add_base(base)?;
        }
        for c in changes {
            // A change that does not decode or fit is left out of the text
            // (it was signed by a node allowed to edit; its fact is kept).
            let _ = doc.apply(c);
        }
        Ok(doc)
    }

    /// Add the seed change of `base` (a no-op if the document holds it).
    pub fn add_base(&mut self, base: &str) -> Result<(), TextError> {
        let s = seed(&self.id, base)?;
        self.doc.apply_changes([s]).map_err(malformed)
    }

    /// Merge one change (a no-op if held; queued by automerge until its
    /// dependencies arrive).
    ///
    /// automerge can panic on a change that decodes but whose operations do
    /// not fit the document; such a change is an error here, and the
    /// document is left as it was.
    pub fn apply(&mut self, change: &[u8]) -> Result<(), TextError> {
        let c = decode_change(change)?;
        if self.contains(&c.hash().0) {
            return Ok(());
        }
        let before = self.doc.clone();
        let doc = &mut self.doc;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| doc.apply_changes([c]))) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => {
                self.doc = before;
                Err(malformed(e))
            }
            Err(_) => {
                self.doc = before;
                Err(malformed("the change does not fit the document"))
            }
        }
    }

    /// Whether the document holds (has applied) change `c`.
    pub fn contains(&mut self, c: &ChangeId) -> bool {
        self.doc.get_change_by_hash(&ChangeHash(*c)).is_some()
    }

    /// The ids of every change the document holds.
    pub fn change_ids(&mut self) -> Vec<ChangeId> {
        self.doc
            .get_changes(&[])
            .into_iter()
            .map(|c| c.hash().0)
            .collect()
    }

    /// The text as readers see it ("" until the base is held).
    pub fn text(&self) -> String {
        match self.doc.get(ROOT, TEXT_KEY) {
            Ok(Some((Value::Object(ObjType::Text), obj))) => {
                self.doc.text(&obj).unwrap_or_default()
            }
            _ => String::new(),
        }
    }

    /// Make the change that turns the text into `new_text`, authored by
    /// `author` at `clock` (the clock of the fact that will carry it).
    /// `None` if the text is already `new_text`. The document keeps the
    /// change.
    pub fn edit(
        &mut self,
        new_text: &str,
        author: &NodeId,
        clock: &Hlc,
    ) -> Result<Option<Vec<u8>>, TextError> {
        if self.text() == new_text {
            return Ok(None);
        }
        let obj = match self.doc.get(ROOT, TEXT_KEY) {
            Ok(Some((Value::Object(ObjType::Text), obj))) => obj,
            _ => return Err(malformed("the document has no base text to edit")),
        };
        self.doc
            .set_actor(actor(b"edit", &[&author.0, &clock.sort_key()]));
        let old = self.text();
        splice_by_words(&mut self.doc, &obj, &old, new_text)?;
        let time = i64::try_from(clock.wall_ms).unwrap_or(i64::MAX);
        self.doc
            .commit_with(CommitOptions::default().with_time(time));
        let mut change = self
            .doc
            .get_last_local_change()
            .ok_or_else(|| malformed("the edit made no change"))?;
        Ok(Some(change.bytes().into_owned()))
    }

    /// The whole document (history included), compressed: the local cache
    /// and what a compaction signs.
    pub fn save(&mut self) -> Vec<u8> {
        self.doc.save()
    }
}

/// Which fact of a text log an entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogKey {
    /// The memory's plain text (the newest plain content fact held).
    Base,
    /// The origin's compaction (the newest held).
    Snapshot,
    /// One edit, by its change id.
    Edit(ChangeId),
}

/// One entry of a text log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEntry {
    /// The clock of the fact (its author is the clock's node).
    pub clock: Hlc,
    /// The signed fact's wire bytes; `None` once the snapshot covers it: a
    /// marker, with the snapshot's clock, so that the edit is known to be
    /// in the text when it arrives again (the fact is neither kept nor sent).
    pub fact: Option<Vec<u8>>,
}

/// The facts an edited memory's text is made of, as one node holds them.
///
/// Two nodes that were offered the same facts, in any order, hold equal
/// logs: the base and the snapshot are last-writer-wins by clock, edits are
/// a grow-only set, and an entry's fact is dropped exactly when the held
/// snapshot contains its change.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TextLog {
    pub entries: BTreeMap<LogKey, LogEntry>,
}

fn content_text(bytes: &[u8]) -> Result<(Hlc, MemoryText), TextError> {
    let f = amos_protocol::codec::decode_signed(bytes).map_err(malformed)?;
    match f.fact.body {
        FactBody::MemoryContent(c) => Ok((f.fact.clock, c.text)),
        _ => Err(malformed("a text log entry is not a content fact")),
    }
}

impl TextLog {
    /// The log of a memory edited for the first time here: its current
    /// content fact, if it carries plain text, becomes the base.
    pub fn start(current: Option<&SignedFact>) -> TextLog {
        let mut log = TextLog::default();
        if let Some(f) = current
            && let FactBody::MemoryContent(c) = &f.fact.body
            && c.text.plain().is_some()
        {
            log.entries.insert(
                LogKey::Base,
                LogEntry {
                    clock: f.fact.clock,
                    fact: Some(f.to_bytes()),
                },
            );
        }
        log
    }

    /// The base text, if held.
    pub fn base_text(&self) -> Result<Option<String>, TextError> {
        self.held(LogKey::Base)
            .map(|b| match content_text(b)? {
                (_, MemoryText::Plain(t)) => Ok(t),
                _ => Err(malformed("the base is not plain text")),
            })
            .transpose()
    }

    fn held(&self, key: LogKey) -> Option<&[u8]> {
        self.entries.get(&key).and_then(|e| e.fact.as_deref())
    }

    /// The facts held (their wire bytes): what is exported and digested.
    pub fn facts(&self) -> impl Iterator<Item = &[u8]> {
        self.entries.values().filter_map(|e| e.fact.as_deref())
    }

    /// Build the document from the log.
    pub fn build(&self, id: MemoryId) -> Result<TextDoc, TextError> {
        let base = self.base_text()?;
        let snapshot = match self.held(LogKey::Snapshot) {
            Some(b) => match content_text(b)? {
                (_, MemoryText::Snapshot(d)) => Some(d),
                _ => return Err(malformed("the snapshot entry carries no snapshot")),
            },
            None => None,
        };
        let mut changes = Vec::new();
        for (k, e) in &self.entries {
            if let (LogKey::Edit(_), Some(b)) = (k, &e.fact)
                && let (_, MemoryText::Edit(c)) = content_text(b)?
            {
                changes.push(c);
            }
        }
        TextDoc::build(
            id,
            base.as_deref(),
            snapshot.as_deref(),
            changes.iter().map(Vec::as_slice),
        )
    }

    /// Whether `doc` holds every edit this log holds (false while an edit
    /// waits for one it depends on: automerge keeps such a change queued,
    /// and a saved document does not carry the queue).
    pub fn complete(&self, doc: &mut TextDoc) -> bool {
        self.entries.iter().all(|(k, e)| match (k, &e.fact) {
            (LogKey::Edit(c), Some(_)) => doc.contains(c),
            _ => true,
        })
    }

    /// Offer one content fact of this memory, already admitted by the gate
    /// (the caller decides its other fields by clock). `doc` is this log's
    /// document ([`TextLog::build`]) and is kept in step. Returns whether the
    /// log changed.
    pub fn offer(
        &mut self,
        id: MemoryId,
        fact: &SignedFact,
        doc: &mut TextDoc,
    ) -> Result<bool, TextError> {
        let changed = self.offer_one(id, fact, doc)?;
        // An edit that waited for one it depends on may not have been taken
        // up when that one came inside a snapshot or a new base: build the
        // document again from the log, which applies every held edit.
        if changed && !self.complete(doc) {
            *doc = self.build(id)?;
        }
        Ok(changed)
    }

    fn offer_one(
        &mut self,
        id: MemoryId,
        fact: &SignedFact,
        doc: &mut TextDoc,
    ) -> Result<bool, TextError> {
        let FactBody::MemoryContent(c) = &fact.fact.body else {
            return Ok(false);
        };
        let clock = fact.fact.clock;
        let newer = |e: Option<&LogEntry>| e.is_none_or(|e| e.clock < clock);
        match &c.text {
            MemoryText::Plain(t) => {
                if !newer(self.entries.get(&LogKey::Base)) {
                    return Ok(false);
                }
                let same_text = self.base_text()?.as_deref() == Some(t.as_str());
                let covered = self.snapshot_ids()?.contains(&seed_id(&id, t)?);
                self.entries.insert(
                    LogKey::Base,
                    LogEntry {
                        clock,
                        fact: (!covered).then(|| fact.to_bytes()),
                    },
                );
                if !same_text {
                    *doc = self.build(id)?;
                }
                Ok(true)
            }
            MemoryText::Edit(change) if change.is_empty() => Ok(false),
            MemoryText::Edit(change) => {
                let cid = change_id(change)?;
                let key = LogKey::Edit(cid);
                if self.entries.contains_key(&key) {
                    return Ok(false);
                }
                // (An edit the held snapshot covers has a marker entry.)
                self.entries.insert(
                    key,
                    LogEntry {
                        clock,
                        fact: Some(fact.to_bytes()),
                    },
                );
                // A change that does not fit stays out of the text (its fact
                // is kept, so every node decides the same).
                let _ = doc.apply(change);
                Ok(true)
            }
            MemoryText::Snapshot(saved) => {
                if !newer(self.entries.get(&LogKey::Snapshot)) {
                    return Ok(false);
                }
                let ids: BTreeSet<ChangeId> =
                    TextDoc::load(id, saved)?.change_ids().into_iter().collect();
                self.entries.insert(
                    LogKey::Snapshot,
                    LogEntry {
                        clock,
                        fact: Some(fact.to_bytes()),
                    },
                );
                let base_seed = self.base_text()?.map(|t| seed_id(&id, &t)).transpose()?;
                if base_seed.is_some_and(|s| ids.contains(&s))
                    && let Some(b) = self.entries.get_mut(&LogKey::Base)
                {
                    b.fact = None;
                }
                // Every change the snapshot holds becomes a marker (no fact,
                // the snapshot's clock), whether its edit was held here or
                // not: a node's log then depends only on the facts it was
                // offered, never on their order.
                for c in ids {
                    if Some(c) != base_seed {
                        self.entries
                            .insert(LogKey::Edit(c), LogEntry { clock, fact: None });
                    }
                }
                // Rebuilt rather than merged into: automerge can leave a
                // change queued across a merge, and the document must be
                // exactly what the log builds.
                *doc = self.build(id)?;
                Ok(true)
            }
        }
    }

    fn snapshot_ids(&self) -> Result<BTreeSet<ChangeId>, TextError> {
        let Some(b) = self.held(LogKey::Snapshot) else {
            return Ok(BTreeSet::new());
        };
        match content_text(b)? {
            (_, MemoryText::Snapshot(d)) => Ok(TextDoc::load(MemoryId([0; 16]), &d)?
                .change_ids()
                .into_iter()
                .collect()),
            _ => Err(malformed("the snapshot entry carries no snapshot")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use amos_protocol::NodeIdentity;

    fn clock(ms: u64, n: &NodeId) -> Hlc {
        Hlc {
            wall_ms: ms,
            logical: 0,
            node: *n,
        }
    }

    #[test]
    fn words_keep_their_whitespace_and_rejoin_exactly() {
        for t in ["", "a", " a b\n\nc  ", "step one\nstep two\n", "  "] {
            assert_eq!(words(t).concat(), t);
        }
        assert_eq!(words(" a b\n"), vec![" ", "a ", "b\n"]);
    }

    #[test]
    fn an_edit_reproduces_the_new_text_exactly() {
        let id = MemoryId::new(1_700_000_000_000, [1; 10]);
        let a = NodeIdentity::from_secret([1; 32]).node_id();
        let mut d = TextDoc::build(id, Some("alpha beta gamma\ndelta"), None, []).unwrap();
        let steps = [
            "alpha gamma\ndelta",
            "alpha gamma\ndelta épsilon ✓",
            "x",
            "x y\n\n z",
            "z y x",
        ];
        for (i, t) in steps.iter().enumerate() {
            d.edit(t, &a, &clock(i as u64 + 1, &a)).unwrap().unwrap();
            assert_eq!(d.text(), *t);
        }
    }

    #[test]
    fn the_seed_is_the_same_everywhere() {
        let id = MemoryId::new(1_700_000_000_000, [1; 10]);
        assert_eq!(
            seed_id(&id, "runbook").unwrap(),
            seed_id(&id, "runbook").unwrap()
        );
        assert_ne!(
            seed_id(&id, "runbook").unwrap(),
            seed_id(&id, "runbook!").unwrap()
        );
        let other = MemoryId::new(1_700_000_000_001, [1; 10]);
        assert_ne!(
            seed_id(&id, "runbook").unwrap(),
            seed_id(&other, "runbook").unwrap()
        );
    }

    #[test]
    fn concurrent_appends_both_survive_in_the_same_order_everywhere() {
        let id = MemoryId::new(1_700_000_000_000, [1; 10]);
        let a = NodeIdentity::from_secret([1; 32]).node_id();
        let b = NodeIdentity::from_secret([2; 32]).node_id();
        let base = "step one\n";
        let mut da = TextDoc::build(id, Some(base), None, []).unwrap();
        let mut db = TextDoc::build(id, Some(base), None, []).unwrap();
        let ca = da
            .edit("step one\nstep two (a)\n", &a, &clock(5, &a))
            .unwrap()
            .unwrap();
        let cb = db
            .edit("step one\nstep two (b)\n", &b, &clock(5, &b))
            .unwrap()
            .unwrap();
        let x = TextDoc::build(id, Some(base), None, [&ca[..], &cb[..]]).unwrap();
        let y = TextDoc::build(id, Some(base), None, [&cb[..], &ca[..]]).unwrap();
        assert_eq!(x.text(), y.text());
        assert!(x.text().contains("step two (a)") && x.text().contains("step two (b)"));
        // A change before its base is held waits, then applies.
        let mut z = TextDoc::empty(id);
        z.apply(&cb).unwrap();
        assert_eq!(z.text(), "");
        z.add_base(base).unwrap();
        z.apply(&ca).unwrap();
        assert_eq!(z.text(), x.text());
    }

    #[test]
    fn a_snapshot_is_the_union_it_holds() {
        let id = MemoryId::new(1_700_000_000_000, [1; 10]);
        let a = NodeIdentity::from_secret([1; 32]).node_id();
        let mut d = TextDoc::build(id, Some("x"), None, []).unwrap();
        let c1 = d.edit("x y", &a, &clock(1, &a)).unwrap().unwrap();
        let snap = d.save();
        let c2 = d.edit("x y z", &a, &clock(2, &a)).unwrap().unwrap();
        let mut from_snap = TextDoc::build(id, None, Some(&snap), [&c2[..], &c1[..]]).unwrap();
        assert_eq!(from_snap.text(), "x y z");
        assert!(from_snap.contains(&change_id(&c1).unwrap()));
        assert!(from_snap.contains(&seed_id(&id, "x").unwrap()));
    }

    #[test]
    fn altered_bytes_are_an_error_not_a_panic() {
        let id = MemoryId::new(1_700_000_000_000, [1; 10]);
        let a = NodeIdentity::from_secret([1; 32]).node_id();
        let mut d = TextDoc::build(id, Some("hello"), None, []).unwrap();
        let c = d.edit("hello world", &a, &clock(1, &a)).unwrap().unwrap();
        // Bytes 4..8 are a checksum automerge does not insist on (the fact's
        // signature is what makes alteration fail); any other flip either
        // fails to decode or names another change. Nothing panics.
        for i in 0..c.len() {
            let mut bad = c.clone();
            bad[i] ^= 0x20;
            let mut doc = TextDoc::build(id, Some("hello"), None, []).unwrap();
            let _ = doc.apply(&bad);
            if let (Ok(h), false) = (change_id(&bad), (4..8).contains(&i)) {
                assert_ne!(h, change_id(&c).unwrap(), "flip at {i} of {}", c.len());
            }
        }
        assert!(change_id(&[]).is_err());
        assert!(TextDoc::load(id, b"garbage").is_err());
    }
}
