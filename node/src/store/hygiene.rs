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
    let mut stmt = sql(r).prepare(&format!(
        "SELECT id, created_ms, v, last_access_ms, expires_ms FROM memories
         WHERE {LIVE} AND archived = 0 AND pinned = 0 ORDER BY created_ms, id"
    ))?;
    let rows = stmt.query_map([], |row| {
        Ok((
            row.get::<_, Vec<u8>>(0)?,
            row.get(1)?,
            row.get(2)?,
            row.get(3)?,
            row.get(4)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (id, created_ms, v, last_access_ms, expires_ms) = row?;
        if let Some(id) = MemoryId::from_slice(&id) {
            out.push(RetentionCandidate {
                id,
                created_ms,
                v,
                last_access_ms,
                expires_ms,
            });
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
    let mut stmt = sql(r).prepare(&format!(
        "SELECT id, owner, grants, kind, content, pinned FROM memories
         WHERE {LIVE} AND archived = 0 ORDER BY pinned DESC, created_ms, id"
    ))?;
    let rows = stmt.query_map([], |row| {
        Ok((
            row.get::<_, Vec<u8>>(0)?,
            row.get(1)?,
            row.get(2)?,
            row.get::<_, Option<String>>(3)?.unwrap_or_default(),
            row.get(4)?,
            row.get::<_, Option<bool>>(5)?.unwrap_or(false),
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (id, owner, grants, kind, content, pinned) = row?;
        if let Some(id) = MemoryId::from_slice(&id) {
            out.push(ConsolidationCandidate {
                id,
                owner,
                grants,
                kind,
                content,
                pinned,
            });
        }
    }
    Ok(out)
}
