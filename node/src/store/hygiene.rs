//! What the hygiene jobs (`amos retention`, `amos consolidate`) consider:
//! live, unarchived memory rows with the columns each job judges by.
//!
//! Boundary: rows as stored, ungated: only the node's own maintenance reads
//! them (no requester), and what they do is archive (local-only) or sign a
//! link. Which rows go is the job's decision (`api::maintenance`).

use amos_protocol::MemoryId;

use super::memory::LIVE;
use super::{Readable, sql};
use crate::error::Result;

/// A live, unarchived, unpinned memory as retention judges it.
#[derive(Debug, Clone, PartialEq)]
pub struct RetentionCandidate {
    pub id: MemoryId,
    pub created_ms: i64,
    /// The content register's clock (its sort key), if any.
    pub v: Option<Vec<u8>>,
    pub last_access_ms: Option<i64>,
    pub expires_ms: Option<i64>,
}

/// Every memory retention may archive, oldest first.
pub fn retention_candidates(r: &(impl Readable + ?Sized)) -> Result<Vec<RetentionCandidate>> {
    live_rows(
        r,
        "created_ms, v, last_access_ms, expires_ms",
        "AND pinned = 0 ORDER BY created_ms, id",
        |id, row| {
            Ok(RetentionCandidate {
                id,
                created_ms: row.get(1)?,
                v: row.get(2)?,
                last_access_ms: row.get(3)?,
                expires_ms: row.get(4)?,
            })
        },
    )
}

/// Live, unarchived memory rows (`columns` after the id, then `tail`: more
/// conditions and the order), each read by `read` with its id; a row whose
/// id is malformed is skipped.
fn live_rows<T>(
    r: &(impl Readable + ?Sized),
    columns: &str,
    tail: &str,
    read: impl Fn(MemoryId, &rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> Result<Vec<T>> {
    let mut stmt = sql(r).prepare(&format!(
        "SELECT id, {columns} FROM memories WHERE {LIVE} AND archived = 0 {tail}"
    ))?;
    let mut rows = stmt.query([])?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        if let Some(id) = MemoryId::from_slice(&row.get::<_, Vec<u8>>(0)?) {
            out.push(read(id, row)?);
        }
    }
    Ok(out)
}

/// A live, unarchived memory as consolidation groups it.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsolidationCandidate {
    pub id: MemoryId,
    pub owner: String,
    /// The signed grants as stored (canonical, comma-joined).
    pub grants: String,
    pub kind: String,
    pub content: String,
    pub pinned: bool,
}

/// Every memory consolidation may merge, pinned first, then oldest.
pub fn consolidation_candidates(
    r: &(impl Readable + ?Sized),
) -> Result<Vec<ConsolidationCandidate>> {
    live_rows(
        r,
        "owner, grants, kind, content, pinned",
        "ORDER BY pinned DESC, created_ms, id",
        |id, row| {
            Ok(ConsolidationCandidate {
                id,
                owner: row.get(1)?,
                grants: row.get(2)?,
                kind: row.get::<_, Option<String>>(3)?.unwrap_or_default(),
                content: row.get(4)?,
                pinned: row.get::<_, Option<bool>>(5)?.unwrap_or(false),
            })
        },
    )
}
