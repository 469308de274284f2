//! What the indexes catch up from: every memory row whose `touched` moved
//! after a watermark, with the columns a search index holds, read in chunks
//! in one snapshot.
//!
//! Boundary: rows as stored, ungated; only the disposable indexes read
//! them, and they return ids whose rows the read gate re-reads.

use amos_protocol::MemoryId;
use rusqlite::params;

use super::memory::LIVE;
use super::{Store, max_seq};
use crate::error::Result;

/// A memory row as an index needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChangedRow {
    pub id: MemoryId,
    /// What is searched: content, tags and type, space-joined.
    pub text: String,
    /// The owner, where the owner rule holds (the origin is this node or
    /// a full peer); elsewhere the owner is just a name: `None`.
    pub trusted_owner: Option<String>,
    /// The grants in force here, as stored (canonical, comma-joined).
    pub effective: String,
    pub expires_ms: Option<u64>,
    /// Live and not archived.
    pub live: bool,
}

const ENCODER_KEY: &str = "encoder";

/// Whether this node keeps encoder vectors (`amos config set encoder`;
/// on unless set off).
pub fn encoder_enabled(r: &(impl super::Readable + ?Sized)) -> Result<bool> {
    Ok(super::reads::meta(super::sql(r), ENCODER_KEY)?.as_deref() != Some("off"))
}

/// Switch the encoder on or off for this node (local, never replicated).
pub fn set_encoder_enabled(tx: &super::Tx<'_>, on: bool) -> Result<()> {
    super::reads::set_meta(super::sql(tx), ENCODER_KEY, if on { "on" } else { "off" })
}

/// How many memory rows moved after `seq` (every row when `None`: an index
/// with no watermark in this epoch takes them all): what an index whose
/// watermark is `seq` has not taken up — its lag. Other facts (agents,
/// teams, links) move the store's `seq` but concern no index.
pub fn rows_touched_after(r: &(impl super::Readable + ?Sized), seq: Option<i64>) -> Result<i64> {
    Ok(super::sql(r).query_row(
        "SELECT count(*) FROM memories WHERE touched > ?1",
        params![seq.unwrap_or(i64::MIN)],
        |r| r.get(0),
    )?)
}

/// The ids of every live memory (not archived), in id order: what the
/// encoder's catch-up compares with the memories it has encoded.
pub fn live_ids(store: &mut Store) -> Result<Vec<MemoryId>> {
    store.read(|r| {
        let conn = super::sql(r);
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT id FROM memories WHERE {LIVE} AND archived = 0 ORDER BY id"
        ))?;
        let ids = stmt
            .query_map([], |r| r.get::<_, Vec<u8>>(0))?
            .filter_map(|b| b.map(|b| MemoryId::from_slice(&b)).transpose())
            .collect::<rusqlite::Result<Vec<MemoryId>>>()?;
        Ok(ids)
    })
}

/// The rows of memories `ids` as an index needs them (missing ids are
/// left out), in one read snapshot.
pub fn rows_of(store: &mut Store, ids: &[MemoryId]) -> Result<Vec<ChangedRow>> {
    store.read(|r| {
        let conn = super::sql(r);
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT id, content, tags, kind, CASE WHEN owner_trusted = 1 THEN owner END, effective,
                    {LIVE} AND archived = 0, expires_ms
             FROM memories WHERE id = ?1"
        ))?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let mut rows = stmt.query([&id.0[..]])?;
            if let Some(r) = rows.next()? {
                out.push(row_of(*id, r)?);
            }
        }
        Ok(out)
    })
}

fn row_of(id: MemoryId, r: &rusqlite::Row<'_>) -> rusqlite::Result<ChangedRow> {
    let tags: Vec<String> = r
        .get::<_, Option<String>>(2)?
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    let text = format!(
        "{} {} {}",
        r.get::<_, Option<String>>(1)?.unwrap_or_default(),
        tags.join(" "),
        r.get::<_, Option<String>>(3)?.unwrap_or_default()
    );
    Ok(ChangedRow {
        id,
        text,
        trusted_owner: r.get(4)?,
        effective: r.get(5)?,
        expires_ms: r.get::<_, Option<i64>>(7)?.map(|e| e.max(0) as u64),
        live: r.get(6)?,
    })
}

/// Every memory row touched after `from`, handed to `each` in chunks of at
/// most `chunk` rows as they are read (never all of them at once: a first
/// build at 1M), all in one read snapshot; `start` is told their number
/// first. Returns the store's high-water mark they were read at.
pub fn changed_rows(
    store: &mut Store,
    from: i64,
    chunk: usize,
    start: impl FnOnce(u64),
    mut each: impl FnMut(Vec<ChangedRow>) -> Result<()>,
) -> Result<i64> {
    store.read(|r| {
        let conn = super::sql(r);
        let high = max_seq(conn)?;
        let total: i64 = conn.query_row(
            "SELECT count(*) FROM memories WHERE touched > ?1 AND touched <= ?2",
            params![from, high],
            |r| r.get(0),
        )?;
        start(total as u64);
        let mut stmt = conn.prepare(&format!(
            "SELECT id, content, tags, kind, CASE WHEN owner_trusted = 1 THEN owner END, effective,
                    {LIVE} AND archived = 0, expires_ms
             FROM memories WHERE touched > ?1 AND touched <= ?2"
        ))?;
        let mut rows = stmt.query(params![from, high])?;
        let mut out = Vec::with_capacity(chunk.min(total as usize));
        while let Some(r) = rows.next()? {
            let Some(id) = MemoryId::from_slice(&r.get::<_, Vec<u8>>(0)?) else {
                continue;
            };
            out.push(row_of(id, r)?);
            if out.len() >= chunk.max(1) {
                each(std::mem::take(&mut out))?;
            }
        }
        if !out.is_empty() {
            each(out)?;
        }
        Ok(high)
    })
}
