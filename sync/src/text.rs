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

pub use amos_protocol::{MAX_CHANGE_BYTES, MAX_SNAPSHOT_BYTES};

const TEXT_KEY: &str = "text";

/// Why text bytes were not accepted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TextError {
    /// Bytes that are not a valid change or snapshot for this memory.
    #[error("malformed text change: {0}")]
    Malformed(String),
    /// The document holds edits but not yet the base they were made on
    /// (a peer sent an edit before the memory's first version): nothing to
    /// edit until the base arrives.
    #[error("the text is incomplete here: its base has not arrived yet")]
    Incomplete,
    /// A change or snapshot over its size limit.
    #[error("text {what} of {size} bytes exceeds the limit of {limit}")]
    TooLarge {
        /// What was too large (`change`, `snapshot`, `text`).
        what: &'static str,
        /// Its size in bytes.
        size: usize,
        /// The limit.
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
    check_chunks(bytes, &[CHUNK_CHANGE, CHUNK_COMPRESSED_CHANGE], Some(1))?;
    Change::try_from(bytes).map_err(malformed)
}

const MAGIC: [u8; 4] = [0x85, 0x6f, 0x4a, 0x83];
const CHUNK_DOCUMENT: u8 = 0;
const CHUNK_CHANGE: u8 = 1;
const CHUNK_COMPRESSED_CHANGE: u8 = 2;

/// Walk automerge's chunk headers (magic, checksum, type, LEB128 length)
/// before automerge parses anything: only the chunk types amos writes are
/// accepted (some others make automerge abort, which no `catch_unwind` can
/// stop), lengths must add up exactly, and `most` bounds the count.
fn check_chunks(bytes: &[u8], allowed: &[u8], most: Option<usize>) -> Result<(), TextError> {
    let mut rest = bytes;
    let mut count = 0usize;
    while !rest.is_empty() {
        count += 1;
        if most.is_some_and(|m| count > m) {
            return Err(malformed("more automerge chunks than expected"));
        }
        if rest.len() < 9 || rest[..4] != MAGIC {
            return Err(malformed("not an automerge chunk"));
        }
        if !allowed.contains(&rest[8]) {
            return Err(malformed(format!(
                "automerge chunk type {} not accepted",
                rest[8]
            )));
        }
        let (mut len, mut shift, mut at) = (0u64, 0u32, 9usize);
        loop {
            let b = *rest
                .get(at)
                .ok_or_else(|| malformed("truncated automerge chunk length"))?;
            at += 1;
            if shift > 56 {
                return Err(malformed("automerge chunk length too long"));
            }
            len |= u64::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                break;
            }
        }
        let end = usize::try_from(len)
            .ok()
            .and_then(|l| at.checked_add(l))
            .filter(|&e| e <= rest.len())
            .ok_or_else(|| malformed("automerge chunk longer than its bytes"))?;
        rest = &rest[end..];
    }
    if count == 0 {
        return Err(malformed("no automerge chunk"));
    }
    Ok(())
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
    let list = doc
        .put_object(ROOT, TEXT_KEY, ObjType::List)
        .map_err(malformed)?;
    doc.splice(&list, 0, 0, tokens(base)).map_err(malformed)?;
    doc.commit_with(CommitOptions::default().with_time(0));
    doc.get_last_local_change()
        .ok_or_else(|| malformed("the seed made no change"))
}

/// The id of the seed change for `base` (to tell whether a snapshot covers it).
pub fn seed_id(id: &MemoryId, base: &str) -> Result<ChangeId, TextError> {
    Ok(seed(id, base)?.hash().0)
}

/// Split text into tokens: each maximal run of non-whitespace, and each
/// maximal run of whitespace. The document holds one list element per
/// token (a 10 kB text is about 3,000 elements, not 10,000 characters, which
/// is what automerge's costs grow with), and edits insert and delete whole
/// tokens: a concurrent insertion never lands inside a word.
fn tokens(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut prev: Option<bool> = None;
    for (i, c) in text.char_indices() {
        let space = c.is_whitespace();
        if prev.is_some_and(|p| p != space) {
            out.push(&text[start..i]);
            start = i;
        }
        prev = Some(space);
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

/// Turn the list `old` (the document's elements) into `new_text`, one
/// splice per changed run.
///
/// The diff is of the old text's tokens against the new text's. Elements
/// are never split across a change of whitespace, so every token boundary
/// of the old text is an element boundary and each hunk is a run of whole
/// elements; but elements need not be whole tokens (after a merge "w1" and
/// "w2" may be neighbours, read as the one token "w1w2"), so a replaced
/// run goes through [`refine`], which keeps every old element the new text
/// still spells — a concurrent delete of it must still delete it.
fn splice_tokens(
    doc: &mut AutoCommit,
    obj: &automerge::ObjId,
    old: &[String],
    new_text: &str,
) -> Result<(), TextError> {
    use similar::DiffOp;
    let old_text = old.concat();
    let (a, b) = (tokens(&old_text), tokens(new_text));
    // Byte offsets of the tokens, and of the elements.
    let offsets = |ts: &[&str]| -> Vec<usize> {
        let mut at = 0;
        let mut v = Vec::with_capacity(ts.len() + 1);
        for t in ts {
            v.push(at);
            at += t.len();
        }
        v.push(at);
        v
    };
    let (ta, tb) = (offsets(&a), offsets(&b));
    let els: Vec<&str> = old.iter().map(String::as_str).collect();
    let te = offsets(&els);
    let element_at = |byte: usize| te.partition_point(|&o| o < byte);
    // The hunks are the gaps between the runs the diff found equal (old
    // tokens o0..o1 become new tokens n0..n1). Only the equal runs are
    // used: similar's Myers can report the index of an insert or delete
    // out of step with them.
    let mut hunks: Vec<(usize, usize, usize, usize)> = Vec::new();
    let (mut o, mut n) = (0usize, 0usize);
    for op in similar::capture_diff_slices(similar::Algorithm::Myers, &a, &b) {
        if let DiffOp::Equal {
            old_index,
            new_index,
            len,
        } = op
        {
            if old_index < o || new_index < n {
                continue;
            }
            if old_index > o || new_index > n {
                hunks.push((o, old_index, n, new_index));
            }
            (o, n) = (old_index + len, new_index + len);
        }
    }
    if o < a.len() || n < b.len() {
        hunks.push((o, a.len(), n, b.len()));
    }
    // From the last hunk back, so earlier positions stay valid.
    for (o0, o1, n0, n1) in hunks.into_iter().rev() {
        let (e0, e1) = (element_at(ta[o0]), element_at(ta[o1]));
        let to = &new_text[tb[n0]..tb[n1]];
        if e0 == e1 || to.is_empty() {
            doc.splice(obj, e0, (e1 - e0) as isize, tokens(to))
                .map_err(malformed)?;
            continue;
        }
        for (s, e, ins) in refine(&els[e0..e1], to).into_iter().rev() {
            doc.splice(
                obj,
                e0 + s,
                (e - s) as isize,
                ins.iter().map(String::as_str),
            )
            .map_err(malformed)?;
        }
    }
    Ok(())
}

/// Within one replaced run: the splices that turn the old elements `els`
/// into the text `to`, keeping every old element that `to` still spells,
/// in order. Returns splices `(start, end, tokens)` relative to the run, in
/// order.
///
/// Old elements need not be canonical tokens (a merge can leave "w1" and
/// "w2" side by side, read as "w1w2"), and the new text may join what were
/// separate words, so tokens alone cannot say what was kept. This picks
/// the old elements to keep by dynamic programming over (element, position
/// in `to`), maximising the characters kept; what lies between kept
/// elements is inserted as new tokens. A run too large for that is
/// replaced whole.
fn refine(els: &[&str], to: &str) -> Vec<(usize, usize, Vec<String>)> {
    let (m, n) = (els.len(), to.len());
    let owned = |t: &str| tokens(t).into_iter().map(str::to_owned).collect::<Vec<_>>();
    if m.saturating_mul(n + 1) > 1 << 20 {
        return vec![(0, m, owned(to))];
    }
    let b = to.as_bytes();
    let fits = |k: usize, p: usize| {
        let e = els[k].as_bytes();
        !e.is_empty() && to.is_char_boundary(p) && b[p..].starts_with(e)
    };
    // best[k][p]: most characters keepable from element k on, at `to`[p..].
    // take[k][p]: the best when element k is kept at some q >= p, and that q.
    let w = n + 1;
    let mut best = vec![0usize; (m + 1) * w];
    let mut take = vec![(0usize, usize::MAX); (m + 1) * w];
    for k in (0..m).rev() {
        let len = els[k].len();
        let mut suffix = (0usize, usize::MAX);
        for p in (0..=n).rev() {
            if p + len <= n && fits(k, p) {
                let v = len + best[(k + 1) * w + p + len];
                if v >= suffix.0 {
                    suffix = (v, p);
                }
            }
            take[k * w + p] = suffix;
            best[k * w + p] = best[(k + 1) * w + p].max(suffix.0);
        }
    }
    // Walk the choices: kept elements, and what replaces the rest.
    let mut out = Vec::new();
    let (mut p, mut pending): (usize, Option<usize>) = (0, None);
    for k in 0..m {
        let (v, q) = take[k * w + p];
        if q != usize::MAX && v > 0 && v >= best[(k + 1) * w + p] {
            if pending.is_some() || q > p {
                out.push((pending.unwrap_or(k), k, owned(&to[p..q])));
            }
            pending = None;
            p = q + els[k].len();
        } else {
            pending.get_or_insert(k);
        }
    }
    if pending.is_some() || p < n {
        out.push((pending.unwrap_or(m), m, owned(&to[p..])));
    }
    out
}

/// One memory's text document.
#[derive(Clone)]
pub struct TextDoc {
    id: MemoryId,
    doc: AutoCommit,
    /// A change was applied that the document does not hold yet (automerge
    /// queues a change until what it depends on arrives; a saved document
    /// does not carry that queue).
    waiting: bool,
    /// A change broke automerge's state (see [`TextDoc::guarded`]).
    broken: bool,
    /// The seed changes (bases) held, kept as changes are applied: an edit
    /// names them ([`TextDoc::seed_mark`]) without walking the history.
    /// `None`: not known (a loaded document, until the first edit reads
    /// its history once).
    seeds: Option<BTreeSet<ChangeId>>,
    /// How many times the whole change history was read for the seeds.
    history_walks: u32,
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
            waiting: false,
            broken: false,
            seeds: Some(BTreeSet::new()),
            history_walks: 0,
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
        check_chunks(
            bytes,
            &[CHUNK_DOCUMENT, CHUNK_CHANGE, CHUNK_COMPRESSED_CHANGE],
            None,
        )?;
        let loaded = std::panic::catch_unwind(|| {
            AutoCommit::load(bytes).map(|mut doc| {
                // Read back what a caller will read, while a panic is caught.
                let _ = doc.get_heads();
                doc
            })
        });
        let doc = match loaded {
            Ok(Ok(doc)) => doc,
            Ok(Err(e)) => return Err(malformed(e)),
            Err(_) => return Err(malformed("the saved document does not load")),
        };
        Ok(TextDoc {
            id,
            doc,
            waiting: false,
            broken: false,
            seeds: None,
            history_walks: 0,
        })
    }

    /// Build from the facts that make up the text: the base text (if held),
    /// a snapshot (if any) and the edits' changes, in any order. A change
    /// that does not decode or fit is left out — the same one on every node,
    /// since what fits depends only on the set of changes.
    pub fn build<'a>(
        id: MemoryId,
        base: Option<&str>,
        snapshot: Option<&[u8]>,
        changes: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<TextDoc, TextError> {
        let start = || -> Result<TextDoc, TextError> {
            let mut doc = match snapshot {
                Some(s) => TextDoc::load(id, s)?,
                None => TextDoc::empty(id),
            };
            if let Some(base) = base {
                doc.add_base(base)?;
            }
            Ok(doc)
        };
        // Changes that do not decode are left out at once; the others go in
        // as one batch (automerge orders them causally).
        let mut decoded: Vec<Change> = changes
            .into_iter()
            .filter_map(|c| decode_change(c).ok())
            .collect();
        decoded.sort_by_key(|c| c.hash());
        let ids: Vec<ChangeId> = decoded.iter().map(|c| c.hash().0).collect();
        // Whether an applied change (not left out) still waits.
        let settle = |mut doc: TextDoc, left_out: &BTreeSet<ChangeHash>| {
            doc.waiting = !ids
                .iter()
                .filter(|c| !left_out.contains(&ChangeHash(**c)))
                .all(|c| doc.contains(c));
            doc
        };
        let mut doc = start()?;
        if doc.try_apply(decoded.clone()).is_ok() {
            let doc = settle(doc, &BTreeSet::new());
            if !doc.broken() {
                return Ok(doc);
            }
        }
        // One of them does not fit: one by one, leaving out each that fails
        // (and starting again from scratch after it, since a failed apply
        // may leave automerge's state half-changed).
        let mut left_out: BTreeSet<ChangeHash> = BTreeSet::new();
        loop {
            let mut doc = start()?;
            let mut failed = None;
            for c in decoded.iter().filter(|c| !left_out.contains(&c.hash())) {
                if doc.try_apply(vec![c.clone()]).is_err() || doc.broken() {
                    failed = Some(c.hash());
                    break;
                }
            }
            match failed {
                Some(h) => {
                    left_out.insert(h);
                }
                None => return Ok(settle(doc, &left_out)),
            }
        }
    }

    /// Add the seed change of `base` (a no-op if the document holds it).
    pub fn add_base(&mut self, base: &str) -> Result<(), TextError> {
        let s = seed(&self.id, base)?;
        self.try_apply(vec![s])
    }

    /// Merge one change (a no-op if held; queued by automerge until its
    /// dependencies arrive).
    ///
    /// automerge can panic on a change that decodes but whose operations do
    /// not fit the document; that is an error here, after which the document
    /// must be built again ([`TextDoc::build`] leaves such a change out).
    pub fn apply(&mut self, change: &[u8]) -> Result<(), TextError> {
        let c = decode_change(change)?;
        let id = c.hash().0;
        if self.contains(&id) {
            return Ok(());
        }
        self.try_apply(vec![c])?;
        if !self.contains(&id) {
            self.waiting = true;
        }
        Ok(())
    }

    /// Whether an applied change still waits for one it depends on.
    pub fn waiting(&self) -> bool {
        self.waiting
    }

    fn try_apply(&mut self, changes: Vec<Change>) -> Result<(), TextError> {
        let hashes: Vec<ChangeHash> = changes.iter().map(Change::hash).collect();
        let seeder = actor(b"seed", &[&self.id.0]);
        let seeds: Vec<ChangeId> = changes
            .iter()
            .filter(|c| c.actor_id() == &seeder)
            .map(|c| c.hash().0)
            .collect();
        // Applied, and read back: automerge can take a change that breaks
        // its later reads, so that is part of applying.
        let applied = self.guarded(None, |doc| {
            Some(doc.apply_changes(changes).map(|()| {
                for h in &hashes {
                    let _ = doc.get_change_by_hash(h);
                }
                let _ = doc.get_heads();
            }))
        });
        match applied {
            Some(Ok(())) => {
                // A seed depends on nothing, so it is held once applied; if
                // one somehow is not, the seeds are read from the history.
                for c in seeds {
                    if self.contains(&c) {
                        if let Some(held) = self.seeds.as_mut() {
                            held.insert(c);
                        }
                    } else {
                        self.seeds = None;
                    }
                }
                Ok(())
            }
            Some(Err(e)) => {
                self.seeds = None;
                Err(malformed(e))
            }
            None => Err(malformed("the change does not fit the document")),
        }
    }

    /// Run `f` on the automerge document, turning a panic into `default`.
    /// automerge's state after a panic is not to be touched, not even
    /// dropped (its drop can panic again): it is leaked, and the document
    /// is left empty and marked broken, for the caller to build again.
    fn guarded<T>(&mut self, default: T, f: impl FnOnce(&mut AutoCommit) -> T) -> T {
        if self.broken {
            return default;
        }
        let doc = &mut self.doc;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(doc))) {
            Ok(v) => v,
            Err(_) => {
                std::mem::forget(std::mem::replace(&mut self.doc, AutoCommit::new()));
                self.broken = true;
                self.seeds = None;
                default
            }
        }
    }

    /// Run a read on the document, turning a panic into `default`.
    fn read<T>(&self, default: T, f: impl FnOnce(&AutoCommit) -> T) -> T {
        if self.broken {
            return default;
        }
        let doc = &self.doc;
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(doc))).unwrap_or(default)
    }

    /// Whether a change broke the document (it must be built again).
    pub fn broken(&self) -> bool {
        self.broken
    }

    /// Whether the document holds (has applied) change `c`.
    pub fn contains(&mut self, c: &ChangeId) -> bool {
        self.guarded(false, |doc| {
            doc.get_change_by_hash(&ChangeHash(*c)).is_some()
        })
    }

    /// The seed changes (bases) this document holds, as one value: their
    /// sorted ids, concatenated.
    /// Kept as changes are applied; the history is read only when they are
    /// not known (once after a load).
    fn seed_mark(&mut self) -> Vec<u8> {
        if let Some(seeds) = &self.seeds {
            return seeds.iter().flatten().copied().collect();
        }
        let seeder = actor(b"seed", &[&self.id.0]);
        self.history_walks += 1;
        let ids: Option<BTreeSet<ChangeId>> = self.guarded(None, |doc| {
            Some(
                doc.get_changes(&[])
                    .into_iter()
                    .filter(|c| c.actor_id() == &seeder)
                    .map(|c| c.hash().0)
                    .collect(),
            )
        });
        let mark = ids
            .as_ref()
            .map(|ids| ids.iter().flatten().copied().collect())
            .unwrap_or_default();
        self.seeds = ids;
        mark
    }

    /// The ids of every change the document holds.
    pub fn change_ids(&mut self) -> Vec<ChangeId> {
        self.guarded(Vec::new(), |doc| {
            doc.get_changes(&[])
                .into_iter()
                .map(|c| c.hash().0)
                .collect()
        })
    }

    /// The text as readers see it ("" until the base is held).
    pub fn text(&self) -> String {
        let Some(obj) = self.list() else {
            return String::new();
        };
        self.read(String::new(), |doc| {
            let mut out = String::new();
            for item in doc.list_range(&obj, ..) {
                if let automerge::ValueRef::Scalar(automerge::ScalarValueRef::Str(s)) = item.value {
                    out.push_str(&s);
                }
            }
            out
        })
    }

    fn list(&self) -> Option<automerge::ObjId> {
        self.read(None, |doc| match doc.get(ROOT, TEXT_KEY) {
            Ok(Some((Value::Object(ObjType::List), obj))) => Some(obj),
            _ => None,
        })
    }

    /// The document's tokens, in order (elements that are not strings,
    /// which only a foreign change could make, read as nothing).
    fn elements(&self) -> Vec<String> {
        let Some(obj) = self.list() else {
            return Vec::new();
        };
        self.read(Vec::new(), |doc| {
            doc.list_range(&obj, ..)
                .map(|item| match item.value {
                    automerge::ValueRef::Scalar(automerge::ScalarValueRef::Str(s)) => {
                        s.into_owned()
                    }
                    _ => String::new(),
                })
                .collect()
        })
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
        self.edit_as(new_text, author, b"", clock)
    }

    /// [`TextDoc::edit`] with the author's `lineage`: one automerge actor
    /// serves a node's every edit of a memory while its store lives (fewer
    /// actors keep the document small and quick to load); a store restored
    /// from a backup, with a new log epoch as lineage, starts a new actor
    /// rather than reuse sequence numbers its peers already hold.
    pub fn edit_as(
        &mut self,
        new_text: &str,
        author: &NodeId,
        lineage: &[u8],
        clock: &Hlc,
    ) -> Result<Option<Vec<u8>>, TextError> {
        let old = self.elements();
        if old.concat() == new_text {
            return Ok(None);
        }
        let obj = self.list().ok_or(TextError::Incomplete)?;
        let time = i64::try_from(clock.wall_ms).unwrap_or(i64::MAX);
        let id = self.id;
        // The actor is also a function of the base the document grew from:
        // after a new plain base, this node's edits of the old one no longer
        // fit (they wait for the old seed), and an actor that had made them
        // would start again at a sequence number they already took — two
        // changes under one (actor, seq), which no document holds both of.
        let base = self.seed_mark();
        let made = self.guarded(None, |doc| {
            doc.set_actor(actor(b"edit", &[&author.0, &id.0, lineage, &base]));
            Some(splice_tokens(doc, &obj, &old, new_text).map(|()| {
                doc.commit_with(CommitOptions::default().with_time(time));
                doc.get_last_local_change()
                    .map(|mut c| c.bytes().into_owned())
            }))
        });
        match made {
            // Never ship a change that does not say what was asked.
            Some(Ok(Some(_))) if self.text() != new_text => {
                Err(malformed("the edit does not reproduce the new text"))
            }
            Some(Ok(Some(change))) => Ok(Some(change)),
            Some(Ok(None)) => Err(malformed("the edit made no change")),
            Some(Err(e)) => Err(e),
            None => Err(malformed("the document broke while editing")),
        }
    }

    /// The whole document (history included), compressed: the local cache
    /// and what a compaction signs.
    /// Empty if the document is broken.
    pub fn save(&mut self) -> Vec<u8> {
        self.guarded(Vec::new(), AutoCommit::save)
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
    /// Each held fact's entry by its key: the base, the snapshot, each edit.
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
        if changed && (doc.waiting() || doc.broken()) {
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
                // is kept, and every node leaves the same one out).
                if doc.apply(change).is_err() || doc.broken() {
                    *doc = self.build(id)?;
                }
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
    fn tokens_split_words_from_whitespace_and_rejoin_exactly() {
        for t in [
            "",
            "a",
            " a b\n\nc  ",
            "step one\nstep two\n",
            "  ",
            "é ✓\tx",
        ] {
            assert_eq!(tokens(t).concat(), t);
        }
        assert_eq!(tokens(" a b\n\nc"), vec![" ", "a", " ", "b", "\n\n", "c"]);
    }

    #[test]
    fn refining_keeps_every_old_element_the_new_text_still_holds() {
        let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
        // "w1" and "w2" read as one word; the text after is the same.
        assert!(refine(&["w1", "w2", " ", "\n"], "w1w2 \n").is_empty());
        // Deleting "w001 " before a merged "w002w008": w002 and w008 stay.
        assert_eq!(
            refine(&["w001", " ", "w002", "w008", " ", "\n"], "w002w008 \n"),
            vec![(0, 2, vec![])]
        );
        // Deleting " w002" joins w001 and w008: both stay.
        assert_eq!(
            refine(&["w001", " ", "w002", "w008", " "], "w001w008 "),
            vec![(1, 3, vec![])]
        );
        // A changed word: the old element goes, the new one comes.
        assert_eq!(
            refine(&["w1", "w2", " "], "w1x2 "),
            vec![(1, 2, s(&["x2"]))]
        );
        assert_eq!(refine(&[], "new"), vec![(0, 0, s(&["new"]))]);
    }

    proptest::proptest! {
        /// Whatever the elements (merges leave them non-canonical), an
        /// edit yields exactly the text asked for.
        #[test]
        fn any_edit_of_any_elements_yields_the_new_text(
            els in proptest::collection::vec(
                proptest::sample::select(vec!["a", "b", "ab", "ba", " ", "\n", "  ", "c"]), 0..12),
            new in proptest::collection::vec(
                proptest::sample::select(vec!["a", "b", "c", " ", "\n", "ab"]), 0..12),
        ) {
            let id = MemoryId::new(1_700_000_000_000, [1; 10]);
            let a = NodeIdentity::from_secret([1; 32]).node_id();
            let mut doc = TextDoc::empty(id);
            let list = doc.doc.put_object(ROOT, TEXT_KEY, ObjType::List).unwrap();
            doc.doc.splice(&list, 0, 0, els.iter().copied()).unwrap();
            doc.doc.commit_with(CommitOptions::default().with_time(0));
            let new = new.concat();
            let before = doc.text();
            let made = doc.edit(&new, &a, &clock(1, &a)).unwrap();
            proptest::prop_assert_eq!(made.is_some(), before != new);
            proptest::prop_assert_eq!(doc.text(), new);
        }
    }

    /// The seeds as the whole history says (what `seed_mark` once read on
    /// every edit).
    fn seeds_by_walking(d: &mut TextDoc) -> Vec<u8> {
        let seeder = actor(b"seed", &[&d.id.0]);
        let mut ids: Vec<ChangeId> = d
            .doc
            .get_changes(&[])
            .into_iter()
            .filter(|c| c.actor_id() == &seeder)
            .map(|c| c.hash().0)
            .collect();
        ids.sort();
        ids.concat()
    }

    /// An edit names the seeds it was made on without reading the change
    /// history: never for a document built here, once after a load; and
    /// the mark is the one the history gives.
    #[test]
    fn an_edit_does_not_walk_the_history_for_its_seeds() {
        let id = MemoryId::new(1_700_000_000_000, [1; 10]);
        let a = NodeIdentity::from_secret([1; 32]).node_id();
        let mut d = TextDoc::build(id, Some("alpha beta"), None, []).unwrap();
        for i in 0..40u64 {
            d.edit(&format!("alpha beta {i}"), &a, &clock(i + 1, &a))
                .unwrap()
                .unwrap();
        }
        assert_eq!(d.history_walks, 0, "40 edits read no history");
        assert_eq!(d.seed_mark(), seeds_by_walking(&mut d));
        assert_eq!(d.seed_mark().len(), 32, "one seed");

        let mut loaded = TextDoc::load(id, &d.save()).unwrap();
        for i in 0..10u64 {
            let t = format!("{} {i}", loaded.text());
            loaded.edit(&t, &a, &clock(100 + i, &a)).unwrap().unwrap();
        }
        assert_eq!(loaded.history_walks, 1, "once after the load");
        assert_eq!(loaded.seed_mark(), seeds_by_walking(&mut loaded));
        assert_eq!(loaded.seed_mark(), d.seed_mark());
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

    /// Found by the mixed-topology property on the real store: after a
    /// new plain base, a node's earlier edits no longer fit (they wait for
    /// the old base's seed, forever); its next edit must not reuse their
    /// (actor, seq), or a document holding the waiting change cannot take
    /// the new one, and the edit is lost (one way or the other depending on
    /// how the document was built, and on change hashes).
    #[test]
    fn an_edit_after_a_new_base_is_kept_however_the_document_was_built() {
        let id = MemoryId::new(1_700_000_000_000, [1; 10]);
        let a = NodeIdentity::from_secret([1; 32]).node_id();
        let mut d = TextDoc::build(id, Some("alpha beta"), None, []).unwrap();
        let old = d.edit("alpha x beta", &a, &clock(1, &a)).unwrap().unwrap();
        // A plain update: the new base, which the old edit does not fit.
        let base = "alpha x beta / edit 2";
        let mut fresh = TextDoc::build(id, Some(base), None, [&old[..]]).unwrap();
        assert_eq!(fresh.text(), base, "the old edit is left out");
        let new = fresh
            .edit("y alpha x beta / edit 2", &a, &clock(3, &a))
            .unwrap()
            .unwrap();
        let want = "y alpha x beta / edit 2";
        // Built from the log at once, in any order.
        for changes in [[&old[..], &new[..]], [&new[..], &old[..]]] {
            let mut again = TextDoc::build(id, Some(base), None, changes).unwrap();
            assert_eq!(again.text(), want);
            assert!(again.contains(&change_id(&new).unwrap()));
        }
        // Offered to a document that holds the old one waiting (how the
        // store takes a change).
        let mut held = TextDoc::build(id, Some(base), None, [&old[..]]).unwrap();
        held.apply(&new).unwrap();
        assert_eq!(held.text(), want);
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
