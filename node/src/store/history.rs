//! The grant history (`grant_history`, local-only, docs/design.md §12.3):
//! the standing a memory had on this node — its effective grants, whether
//! the owner rule held — before each change of it (a revocation, a share, a
//! tombstone, a re-judged origin), and when that standing ended. What
//! `changes_since` reads to tell whether an agent could see a memory at a
//! past time.
//!
//! Invariant: rows are only appended, inside the write transaction that
//! changed the standing; a change that leaves the standing as it was
//! writes none.
//! Boundary: decides nothing about who may see what: it hands out
//! [`PastStanding`]s, which the gate (`amos_acl::AuthorizedScopes::may_see`)
//! judges; never content.

use amos_acl::Gated;
use amos_protocol::{AgentId, Grants, MemoryId};
use rusqlite::{Connection, OptionalExtension, params};

use crate::error::Result;
use crate::store::{Readable, split_grants, sql};

/// A memory's standing here before a change: (effective grants as stored,
/// owner rule, tombstoned). `None`: no row yet.
pub(in crate::store) fn current(
    conn: &Connection,
    id: &MemoryId,
) -> Result<Option<(String, bool, bool)>> {
    Ok(conn
        .prepare_cached(
            "SELECT effective, owner_trusted, tombstone_fact IS NOT NULL FROM memories
             WHERE id = ?1",
        )?
        .query_row([&id.0[..]], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?)
}

/// Record that memory `id`'s standing `before` (from [`current`]) ended at
/// `until_ms`, if it differs from the standing that follows (`effective`,
/// `owner_trusted`, `tombstoned`). A tombstoned row has no standing left to
/// end.
pub(in crate::store) fn note_change(
    conn: &Connection,
    id: &MemoryId,
    before: Option<(String, bool, bool)>,
    until_ms: u64,
    after: (&str, bool, bool),
) -> Result<()> {
    let Some((effective, owner_trusted, tombstoned)) = before else {
        return Ok(());
    };
    if tombstoned || (effective.as_str(), owner_trusted, tombstoned) == after {
        return Ok(());
    }
    conn.prepare_cached(
        "INSERT INTO grant_history(memory, until_ms, effective, owner_trusted)
         VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![
        &id.0[..],
        until_ms.min(i64::MAX as u64) as i64,
        effective,
        owner_trusted
    ])?;
    Ok(())
}

/// A memory's standing at a past time, as the gate judges it: owner,
/// effective grants and owner rule then, and its expiry (as held now; a
/// purged or forgotten memory has none). Never carries content.
#[derive(Debug, Clone)]
pub struct PastStanding {
    /// The memory.
    pub id: MemoryId,
    /// Its owner (fixed).
    pub owner: AgentId,
    /// Its expiry as held now.
    pub expires_ms: Option<u64>,
    /// The effective grants in force then.
    pub effective: Grants,
    /// Whether the owner rule held then.
    pub owner_trusted: bool,
    /// When its standing last changed here (the end of the newest
    /// recorded standing).
    pub changed_ms: u64,
}

impl Gated for PastStanding {
    fn owner(&self) -> &AgentId {
        &self.owner
    }
    fn effective_grants(&self) -> &Grants {
        &self.effective
    }
    fn is_tombstoned(&self) -> bool {
        false
    }
    fn expires_ms(&self) -> Option<u64> {
        self.expires_ms
    }
    fn owner_is_authoritative(&self) -> bool {
        self.owner_trusted
    }
}

/// Every memory whose standing changed here after `t_ms`, with the
/// standing it had at `t_ms` (the one its first change after `t_ms`
/// ended). Memories created after `t_ms` are left out.
pub fn changed_since(r: &(impl Readable + ?Sized), t_ms: u64) -> Result<Vec<PastStanding>> {
    let t = t_ms.min(i64::MAX as u64) as i64;
    let conn = sql(r);
    let mut stmt = conn.prepare_cached(
        "SELECT h.memory, m.owner, m.expires_ms, h.effective, h.owner_trusted,
                (SELECT max(until_ms) FROM grant_history WHERE memory = h.memory)
         FROM grant_history h JOIN memories m ON m.id = h.memory
         WHERE h.until_ms > ?1 AND m.created_ms <= ?1
           AND h.until_ms = (SELECT min(until_ms) FROM grant_history
                             WHERE memory = h.memory AND until_ms > ?1)
         ORDER BY h.memory, h.rowid",
    )?;
    let rows = stmt.query_map([t], |row| {
        Ok((
            row.get::<_, Vec<u8>>(0)?,
            row.get::<_, String>(1)?,
            row.get::<_, Option<i64>>(2)?,
            row.get::<_, String>(3)?,
            row.get::<_, bool>(4)?,
            row.get::<_, i64>(5)?,
        ))
    })?;
    let mut out: Vec<PastStanding> = Vec::new();
    for row in rows {
        let (id, owner, expires, effective, trusted, changed) = row?;
        // Unparsable fields (a damaged store only) are left out: fail closed.
        let (Some(id), Ok(owner)) = (MemoryId::from_slice(&id), AgentId::parse(&owner)) else {
            continue;
        };
        // Two changes stamped alike: the first recorded is the standing then.
        if out.last().is_some_and(|p| p.id == id) {
            continue;
        }
        out.push(PastStanding {
            id,
            owner,
            expires_ms: expires.map(|e| e.max(0) as u64),
            effective: split_grants(&effective),
            owner_trusted: trusted,
            changed_ms: changed.max(0) as u64,
        });
    }
    Ok(out)
}
