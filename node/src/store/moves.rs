//! The SQL of moving memories in and out (`amos import`, `amos export`,
//! `amos forget --agent`): whether an imported memory, link or profile is
//! already held, which memories an agent owns, and the links among them.
//!
//! Reads only, for the node API to decide with; every write goes through
//! [`super::Tx::put`] / `put_new_memory` as signed facts. Must never hand
//! out memory content: content leaves the store only through the gate
//! (`store::memory`).

use amos_protocol::{AgentId, MemoryFixed, MemoryId, NodeId, Relation};
use rusqlite::{OptionalExtension, params};

use crate::error::Result;

/// What is held of one memory id: its fixed fields, and whether it is
/// tombstoned. `None`: no row (never seen here).
pub fn memory_fixed(
    conn: &(impl super::Readable + ?Sized),
    id: &MemoryId,
) -> Result<Option<(MemoryFixed, bool)>> {
    let conn = super::sql(conn);
    let row: Option<(String, Vec<u8>, i64, bool)> = conn
        .prepare_cached(
            "SELECT owner, origin, created_ms, tombstone_fact IS NOT NULL FROM memories WHERE id = ?1",
        )?
        .query_row([&id.0[..]], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .optional()?;
    let Some((owner, origin, created_ms, tombstoned)) = row else {
        return Ok(None);
    };
    let (Ok(owner), Ok(origin)) = (AgentId::parse(&owner), <[u8; 32]>::try_from(&origin[..]))
    else {
        return Err(crate::error::NodeError::Corrupt(format!(
            "memory {id} has a malformed owner or origin"
        )));
    };
    Ok(Some((
        MemoryFixed {
            owner,
            created_ms: created_ms as u64,
            origin: NodeId(origin),
        },
        tombstoned,
    )))
}

/// Whether a present link `from → to` of `relation` is held.
pub fn link_present(
    conn: &(impl super::Readable + ?Sized),
    from: &MemoryId,
    to: &MemoryId,
    relation: &Relation,
) -> Result<bool> {
    let conn = super::sql(conn);
    Ok(conn
        .prepare_cached(
            "SELECT present FROM links WHERE from_id = ?1 AND to_id = ?2 AND relation = ?3",
        )?
        .query_row(params![&from.0[..], &to.0[..], relation.as_str()], |r| {
            r.get::<_, bool>(0)
        })
        .optional()?
        .unwrap_or(false))
}

/// The live (not tombstoned) memories `owner` owns, oldest first; with
/// `origin`, only those made there.
pub fn owned_live(
    conn: &(impl super::Readable + ?Sized),
    owner: &AgentId,
    origin: Option<&NodeId>,
) -> Result<Vec<MemoryId>> {
    let conn = super::sql(conn);
    let mut stmt = conn.prepare(
        "SELECT id FROM memories WHERE owner = ?1 AND content_fact IS NOT NULL
           AND tombstone_fact IS NULL AND (?2 IS NULL OR origin = ?2)
         ORDER BY created_ms, id",
    )?;
    let rows = stmt.query_map(params![owner.as_str(), origin.map(|o| o.0.to_vec())], |r| {
        r.get::<_, Vec<u8>>(0)
    })?;
    let mut out = Vec::new();
    for r in rows {
        if let Some(id) = MemoryId::from_slice(&r?) {
            out.push(id);
        }
    }
    Ok(out)
}

/// A present link as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredLink {
    pub from: MemoryId,
    pub to: MemoryId,
    pub relation: String,
    pub weight: f32,
}

/// The present links leaving any of `ids` (either end may be outside).
/// Ungated: the far end may be a memory the caller may not show; the node
/// API passes the ends through the read gate before any leaves.
pub fn links_from(
    conn: &(impl super::Readable + ?Sized),
    ids: &[MemoryId],
) -> Result<Vec<StoredLink>> {
    let conn = super::sql(conn);
    let mut stmt = conn.prepare_cached(
        "SELECT to_id, relation, weight FROM links WHERE from_id = ?1 AND present = 1
         ORDER BY to_id, relation",
    )?;
    let mut out = Vec::new();
    for from in ids {
        let rows = stmt.query_map([&from.0[..]], |r| {
            Ok((
                r.get::<_, Vec<u8>>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, f64>(2)?,
            ))
        })?;
        for r in rows {
            let (to, relation, weight) = r?;
            if let Some(to) = MemoryId::from_slice(&to) {
                out.push(StoredLink {
                    from: *from,
                    to,
                    relation,
                    weight: weight as f32,
                });
            }
        }
    }
    Ok(out)
}
