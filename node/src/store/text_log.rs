//! Edited memories' text on SQLite: the `memory_text` log (one row per
//! base, snapshot and edit: [`amos_sync::text::TextLog`]), the text it
//! materialises into `memories.content`, and a local cache of the automerge
//! document (`memories.text_doc`).
//!
//! Boundary: which facts the log keeps and what the text is are decided by
//! `amos_sync::text`; this module only loads and stores rows. The cache is
//! never replicated and can always be rebuilt from the log.

use amos_protocol::{FactBody, Hlc, MemoryId, MemoryText, SignedFact, Verified, codec};
use amos_sync::Admission;
use amos_sync::text::{LogEntry, LogKey, TextDoc, TextError, TextLog};
use rusqlite::{Connection, OptionalExtension, params};

use super::Tx;
use crate::error::{NodeError, Result};

const BASE: &[u8] = b"base";
const SNAPSHOT: &[u8] = b"snapshot";

fn key_bytes(k: &LogKey) -> Vec<u8> {
    match k {
        LogKey::Base => BASE.to_vec(),
        LogKey::Snapshot => SNAPSHOT.to_vec(),
        LogKey::Edit(c) => c.to_vec(),
    }
}

fn key_of(b: &[u8]) -> Option<LogKey> {
    match b {
        BASE => Some(LogKey::Base),
        SNAPSHOT => Some(LogKey::Snapshot),
        _ => b.try_into().ok().map(LogKey::Edit),
    }
}

fn corrupt(e: TextError) -> NodeError {
    NodeError::Corrupt(format!("memory text: {e}"))
}

/// The text log of memory `id` (empty if it was never edited here).
pub fn load_log(conn: &(impl super::Readable + ?Sized), id: &MemoryId) -> Result<TextLog> {
    let conn = super::sql(conn);
    let mut stmt = conn.prepare_cached("SELECT key, v, fact FROM memory_text WHERE memory = ?1")?;
    let mut rows = stmt.query([&id.0[..]])?;
    let mut log = TextLog::default();
    while let Some(r) = rows.next()? {
        let key: Vec<u8> = r.get(0)?;
        let v: Vec<u8> = r.get(1)?;
        let (Some(key), Some(clock)) = (key_of(&key), Hlc::from_sort_key(&v)) else {
            return Err(NodeError::Corrupt(
                "memory_text row with a bad key or clock".into(),
            ));
        };
        log.entries.insert(
            key,
            LogEntry {
                clock,
                fact: r.get(2)?,
            },
        );
    }
    Ok(log)
}

/// One entry of `amos history`, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryEntry {
    /// Which text fact: the base, the snapshot or one edit.
    pub key: LogKey,
    /// Its clock.
    pub clock: Hlc,
    /// Bytes of the change (or base text, or snapshot) the fact carries;
    /// `None` once compacted into the snapshot.
    pub bytes: Option<usize>,
}

/// The history of memory `id`: its text log, or, for a memory never edited,
/// its one content fact as the base.
pub fn history(conn: &(impl super::Readable + ?Sized), id: &MemoryId) -> Result<Vec<HistoryEntry>> {
    let conn = super::sql(conn);
    let log = load_log(conn, id)?;
    let mut out = Vec::new();
    if log.entries.is_empty() {
        let fact: Option<Vec<u8>> = conn
            .prepare_cached("SELECT content_fact FROM memories WHERE id = ?1")?
            .query_row([&id.0[..]], |r| r.get(0))
            .optional()?
            .flatten();
        if let Some(b) = fact {
            let f = decode(&b)?;
            out.push(HistoryEntry {
                key: LogKey::Base,
                clock: f.fact.clock,
                bytes: Some(carried(&f)),
            });
        }
        return Ok(out);
    }
    for (key, e) in log.entries {
        let bytes = match (&e.fact, key) {
            (Some(b), _) => Some(carried(&decode(b)?)),
            // A marker of an edit the snapshot holds: the snapshot stands for it.
            (None, LogKey::Edit(_)) => continue,
            (None, _) => None,
        };
        out.push(HistoryEntry {
            key,
            clock: e.clock,
            bytes,
        });
    }
    out.sort_by_key(|e| e.clock);
    Ok(out)
}

fn decode(b: &[u8]) -> Result<SignedFact> {
    codec::decode_signed(b).map_err(|e| NodeError::Corrupt(format!("stored text fact: {e}")))
}

fn carried(f: &SignedFact) -> usize {
    match &f.fact.body {
        FactBody::MemoryContent(c) => match &c.text {
            MemoryText::Plain(t) => t.len(),
            MemoryText::Edit(b) | MemoryText::Snapshot(b) => b.len(),
        },
        _ => 0,
    }
}

/// Stored bytes of an edited memory's text: its log facts and its cached
/// document (for the storage-overhead figure of `amos bench`).
pub fn stored_bytes(conn: &(impl super::Readable + ?Sized), id: &MemoryId) -> Result<(u64, u64)> {
    let conn = super::sql(conn);
    let log: i64 = conn.query_row(
        "SELECT coalesce(sum(length(fact)), 0) FROM memory_text WHERE memory = ?1",
        [&id.0[..]],
        |r| r.get(0),
    )?;
    let doc: i64 = conn.query_row(
        "SELECT coalesce(length(text_doc), 0) FROM memories WHERE id = ?1",
        [&id.0[..]],
        |r| r.get(0),
    )?;
    Ok((log as u64, doc as u64))
}

/// Drop the documents this process keeps warm (the bench measures the
/// cold path with it).
pub fn forget_warm_documents() {
    warm::clear();
}

/// What a memory row says about its text.
struct TextRow {
    edited: bool,
    cache: Option<Vec<u8>>,
    content_fact: Option<Vec<u8>>,
    seq: i64,
}

fn text_row(conn: &Connection, id: &MemoryId) -> Result<Option<TextRow>> {
    Ok(conn
        .prepare_cached("SELECT edited, text_doc, content_fact, seq FROM memories WHERE id = ?1")?
        .query_row([&id.0[..]], |r| {
            Ok(TextRow {
                edited: r.get(0)?,
                cache: r.get(1)?,
                content_fact: r.get(2)?,
                seq: r.get(3)?,
            })
        })
        .optional()?)
}

/// Documents this process built or loaded lately, by (store log epoch,
/// memory), each with the row `seq` it is the document of. Loading an
/// automerge document costs milliseconds; a long-running process (`amos
/// serve`, `amos mcp`) that merges edits of one memory again and again
/// skips that. A document is taken out while in use and put back after its
/// write; one whose row has moved since (another process wrote, or the
/// write rolled back) is never used: its `seq` no longer matches.
mod warm {
    use std::collections::HashMap;
    use std::sync::Mutex;

    use amos_protocol::MemoryId;
    use amos_sync::text::TextDoc;

    const MAX: usize = 64;

    type Key = (String, MemoryId);
    static DOCS: Mutex<Option<HashMap<Key, (i64, TextDoc)>>> = Mutex::new(None);

    pub fn take(epoch: &str, id: &MemoryId, seq: i64) -> Option<TextDoc> {
        let mut docs = DOCS.lock().ok()?;
        let (at, doc) = docs.as_mut()?.remove(&(epoch.to_owned(), *id))?;
        (at == seq).then_some(doc)
    }

    pub fn clear() {
        if let Ok(mut docs) = DOCS.lock() {
            *docs = None;
        }
    }

    pub fn put(epoch: &str, id: MemoryId, seq: i64, doc: TextDoc) {
        let Ok(mut docs) = DOCS.lock() else {
            return;
        };
        let docs = docs.get_or_insert_with(HashMap::new);
        if docs.len() >= MAX {
            docs.clear();
        }
        docs.insert((epoch.to_owned(), id), (seq, doc));
    }
}

/// The text state of a memory as a write transaction sees it.
pub struct TextState {
    /// The memory's text facts as held.
    pub log: TextLog,
    /// The text document they make.
    pub doc: TextDoc,
    /// Whether the memory was edited before (its log exists).
    pub edited: bool,
    /// The memory row's `seq` as it stands (`None`: no row yet).
    row_seq: Option<i64>,
}

impl Tx<'_> {
    /// The log and document of memory `id`. For a memory never edited, a
    /// fresh log whose base is its current plain content fact.
    pub fn text_state(&self, id: &MemoryId) -> Result<TextState> {
        let row = text_row(&self.tx, id)?;
        let edited = row.as_ref().is_some_and(|r| r.edited);
        let row_seq = row.as_ref().map(|r| r.seq);
        let log = if edited {
            load_log(&*self.tx, id)?
        } else {
            let current = row
                .as_ref()
                .and_then(|r| r.content_fact.as_deref())
                .map(decode)
                .transpose()?;
            TextLog::start(current.as_ref())
        };
        let warm = match &row {
            Some(r) if edited => warm::take(&self.epoch()?, id, r.seq),
            _ => None,
        };
        let cached = warm.or_else(|| {
            row.and_then(|r| r.cache)
                .filter(|_| edited)
                .and_then(|c| TextDoc::load(*id, &c).ok())
        });
        // The cache is written only for a document that holds every edit
        // of the log, in the transaction that writes the log.
        let doc = match cached {
            Some(d) => d,
            None => log.build(*id).map_err(corrupt)?,
        };
        Ok(TextState {
            log,
            doc,
            edited,
            row_seq,
        })
    }

    /// Store a content fact of memory `id` whose text must go through the
    /// text log (the memory was edited, or the fact is an edit or snapshot).
    /// With `fields_win`, the fact also becomes the content register (it won
    /// by clock); otherwise only its text counts. Returns whether anything
    /// changed.
    pub(super) fn put_edited_content(
        &mut self,
        fact: &Verified<SignedFact>,
        owner_trusted: bool,
        fields_win: bool,
    ) -> Result<bool> {
        let FactBody::MemoryContent(m) = &fact.fact.body else {
            return Ok(false);
        };
        let state = self.text_state(&m.id)?;
        self.write_text(fact, owner_trusted, fields_win, state)
    }

    /// Store an edit this node just made from `state` (the state
    /// [`Tx::text_state`] gave, whose document already holds the change), as
    /// the memory's content register: the document is not loaded again.
    pub fn put_local_edit(&mut self, edit: &Admission, state: TextState) -> Result<()> {
        self.write_text(edit.fact(), true, true, state).map(|_| ())
    }

    fn write_text(
        &mut self,
        fact: &Verified<SignedFact>,
        owner_trusted: bool,
        fields_win: bool,
        state: TextState,
    ) -> Result<bool> {
        let FactBody::MemoryContent(m) = &fact.fact.body else {
            return Ok(false);
        };
        // Its text log is part of the row's share of the running digests.
        self.touch_memory(&m.id)?;
        let TextState {
            mut log,
            mut doc,
            edited,
            row_seq,
        } = state;
        // A log started here is new: its base row is written too, with the
        // row's seq as it stands — the base is the content fact peers synced
        // up to that seq already hold, so it is not sent again.
        let (before, mut base_seq) = if edited {
            (log.clone(), None)
        } else {
            (TextLog::default(), row_seq)
        };
        let started_base = log.entries.get(&LogKey::Base).cloned();
        let changed = log.offer(m.id, fact, &mut doc).map_err(corrupt)?;
        // A base this fact brought (a purged memory's, arriving before its
        // edits) is news to peers: it takes the new seq.
        if log.entries.get(&LogKey::Base) != started_base.as_ref() {
            base_seq = None;
        }
        if !changed && !fields_win && edited {
            return Ok(false);
        }
        let seq = self.next_seq()?;
        self.write_log(&m.id, &before, &log, seq, base_seq)?;
        let text = doc.text();
        let cache = (!doc.waiting()).then(|| doc.save());
        if fields_win {
            self.put_content_row(fact, &text, seq, owner_trusted)?;
        }
        self.tx
            .prepare_cached(
                "UPDATE memories SET content = CASE WHEN content_fact IS NULL THEN NULL ELSE ?2 END,
                    edited = 1, text_doc = ?3, seq = ?4, touched = ?4
                 WHERE id = ?1",
            )?
            .execute(params![&m.id.0[..], text, cache, seq])?;
        if !doc.waiting() && !doc.broken() {
            warm::put(&self.epoch()?, m.id, seq, doc);
        }
        Ok(true)
    }

    /// Offer the text of a content fact that lost by clock (see
    /// [`amos_sync::Verdict::MergeText`]).
    pub(crate) fn merge_text(&mut self, admission: &Admission) -> Result<bool> {
        let fact = admission.fact();
        // Without `fields_win` the row keeps its own owner rule.
        self.put_edited_content(fact, false, false)
    }

    fn write_log(
        &self,
        id: &MemoryId,
        before: &TextLog,
        after: &TextLog,
        seq: i64,
        base_seq: Option<i64>,
    ) -> Result<()> {
        let mut put = self.tx.prepare_cached(
            "INSERT INTO memory_text(memory, key, v, fact, seq) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT(memory, key) DO UPDATE SET v = excluded.v, fact = excluded.fact,
                seq = excluded.seq",
        )?;
        for (k, e) in &after.entries {
            if before.entries.get(k) != Some(e) {
                put.execute(params![
                    &id.0[..],
                    key_bytes(k),
                    &e.clock.sort_key()[..],
                    e.fact,
                    match (k, base_seq) {
                        (LogKey::Base, Some(s)) => s,
                        _ => seq,
                    }
                ])?;
            }
        }
        Ok(())
    }

    /// Forget an edited memory's text (purge or tombstone).
    pub(super) fn drop_text(&self, id: &MemoryId) -> Result<()> {
        self.tx
            .prepare_cached("DELETE FROM memory_text WHERE memory = ?1")?
            .execute([&id.0[..]])?;
        self.tx
            .prepare_cached("UPDATE memories SET edited = 0, text_doc = NULL WHERE id = ?1")?
            .execute([&id.0[..]])?;
        Ok(())
    }

    /// Send the whole text log again with the memory's new visibility.
    pub(super) fn resend_text(&self, id: &MemoryId, seq: i64) -> Result<()> {
        self.tx
            .prepare_cached("UPDATE memory_text SET seq = ?2 WHERE memory = ?1")?
            .execute(params![&id.0[..], seq])?;
        Ok(())
    }
}

/// An edited memory's content as its records stood at `t_ms` (record time,
/// the facts' clocks): the text of the log's facts stamped at or before
/// `t_ms`, and the validity of the newest content fact held (log or
/// register) stamped then. `None` when the log
/// cannot say (never edited, or nothing in it that old): the current content
/// then stands, which for a never-edited memory is its only version.
///
/// Reach: a compaction folds the edits before it into its snapshot; for a
/// time before a held snapshot the text is the base's (what was surely on
/// record then), without the folded edits.
pub fn content_at(
    conn: &(impl super::Readable + ?Sized),
    id: &MemoryId,
    t_ms: u64,
) -> Result<Option<(String, amos_protocol::Validity)>> {
    let conn = super::sql(conn);
    let log = load_log(conn, id)?;
    if log.entries.is_empty() {
        return Ok(None);
    }
    let snapshot_later = log
        .entries
        .get(&LogKey::Snapshot)
        .is_some_and(|e| e.clock.wall_ms > t_ms);
    let entries: std::collections::BTreeMap<LogKey, LogEntry> = log
        .entries
        .into_iter()
        .filter(|(k, e)| {
            e.clock.wall_ms <= t_ms && e.fact.is_some() && !(snapshot_later && *k != LogKey::Base)
        })
        .collect();
    // The other fields are the newest content fact then on record: a log
    // fact, or the register (a change of valid time alone is an empty edit,
    // which the log does not keep: only the newest one is held).
    let register: Option<Vec<u8>> = conn
        .prepare_cached("SELECT content_fact FROM memories WHERE id = ?1")?
        .query_row([&id.0[..]], |r| r.get(0))
        .optional()?
        .flatten();
    let mut newest: Option<(Hlc, amos_protocol::Validity)> = None;
    for b in entries
        .values()
        .filter_map(|e| e.fact.as_ref())
        .chain(register.as_ref())
    {
        let f = decode(b)?;
        if let FactBody::MemoryContent(c) = f.fact.body
            && f.fact.clock.wall_ms <= t_ms
            && newest.is_none_or(|(h, _)| f.fact.clock > h)
        {
            newest = Some((f.fact.clock, c.validity));
        }
    }
    let Some((_, validity)) = newest else {
        return Ok(None);
    };
    let log = TextLog { entries };
    let text = log.build(*id).map_err(corrupt)?.text();
    Ok(Some((text, validity)))
}

/// Memories whose text log holds a fact stamped after `t_ms`: those whose
/// text may have read otherwise at `t_ms` (the `--known-at` candidates the
/// index, which holds today's text, cannot find).
pub fn changed_since(conn: &(impl super::Readable + ?Sized), t_ms: u64) -> Result<Vec<MemoryId>> {
    let conn = super::sql(conn);
    let after = Hlc {
        wall_ms: t_ms,
        logical: u32::MAX,
        node: amos_protocol::NodeId([0xff; 32]),
    }
    .sort_key();
    let mut stmt = conn.prepare_cached("SELECT DISTINCT memory FROM memory_text WHERE v > ?1")?;
    let rows = stmt.query_map([&after[..]], |r| r.get::<_, Vec<u8>>(0))?;
    let mut out = Vec::new();
    for r in rows {
        out.extend(MemoryId::from_slice(&r?));
    }
    Ok(out)
}
