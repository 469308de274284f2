//! Reading memory rows back as [`MemoryRecord`]s: the one shape the gate,
//! ranking and output all work on.

use amos_acl::Gated;
use amos_protocol::{AgentId, Grants, Hlc, MemoryId, MemoryType, NodeId};
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::split_grants;
use crate::error::Result;

/// A memory as this node holds it now.
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryRecord {
    pub id: MemoryId,
    pub owner: AgentId,
    pub origin: NodeId,
    pub created_ms: u64,
    /// Wall time of the content register's clock (the last edit).
    pub updated_ms: u64,
    pub kind: MemoryType,
    pub content: String,
    pub tags: Vec<String>,
    pub importance: f32,
    pub confidence: f32,
    pub pinned: bool,
    pub expires_ms: Option<u64>,
    pub supersedes: Option<MemoryId>,
    /// The grants as signed by the memory's author.
    pub grants: Grants,
    /// The grants in force on this node (what the gate uses).
    pub effective: Grants,
    pub tombstoned: bool,
    /// Local-only: out of recall until restored.
    pub archived: bool,
    /// Local-only reinforcement factor from recall feedback.
    pub reinforcement: f32,
    /// Whether the owner rule holds here (the memory's origin is this node or
    /// a `full` peer); false for memories from scoped peers.
    pub owner_trusted: bool,
    pub seq: i64,
}

impl Gated for MemoryRecord {
    fn owner(&self) -> &AgentId {
        &self.owner
    }
    fn effective_grants(&self) -> &Grants {
        &self.effective
    }
    fn is_tombstoned(&self) -> bool {
        self.tombstoned
    }
    fn expires_ms(&self) -> Option<u64> {
        self.expires_ms
    }
    fn owner_is_authoritative(&self) -> bool {
        self.owner_trusted
    }
}

/// The columns [`from_row`] reads, in order.
pub const COLUMNS: &str = "id, owner, origin, created_ms, v, kind, content, tags, importance, \
     confidence, pinned, expires_ms, supersedes, grants, effective, tombstone_fact IS NOT NULL, \
     archived, reinforcement, seq, owner_trusted";

/// Rows that can be shown at all: content present (a memory whose acl fact
/// arrived before its content is not yet a memory), not tombstoned.
pub const LIVE: &str = "content_fact IS NOT NULL AND tombstone_fact IS NULL";

/// Decode one row selected with [`COLUMNS`]. Rows with unparsable fields (which
/// only a damaged store can hold) come back as `None`: invisible, fail closed.
pub fn from_row(r: &Row<'_>) -> rusqlite::Result<Option<MemoryRecord>> {
    let id: Vec<u8> = r.get(0)?;
    let owner: String = r.get(1)?;
    let origin: Vec<u8> = r.get(2)?;
    let v: Option<Vec<u8>> = r.get(4)?;
    let kind: Option<String> = r.get(5)?;
    let tags: Option<String> = r.get(7)?;
    let supersedes: Option<Vec<u8>> = r.get(12)?;
    let (Some(id), Ok(owner), Ok(origin)) = (
        MemoryId::from_slice(&id),
        AgentId::parse(&owner),
        <[u8; 32]>::try_from(origin.as_slice()),
    ) else {
        return Ok(None);
    };
    let kind = kind
        .and_then(|k| MemoryType::parse(&k).ok())
        .unwrap_or_default();
    Ok(Some(MemoryRecord {
        id,
        owner,
        origin: NodeId(origin),
        created_ms: r.get::<_, i64>(3)? as u64,
        updated_ms: v
            .as_deref()
            .and_then(Hlc::from_sort_key)
            .map(|h| h.wall_ms)
            .unwrap_or(0),
        kind,
        content: r.get::<_, Option<String>>(6)?.unwrap_or_default(),
        tags: tags
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default(),
        importance: r.get::<_, Option<f64>>(8)?.unwrap_or(0.5) as f32,
        confidence: r.get::<_, Option<f64>>(9)?.unwrap_or(1.0) as f32,
        pinned: r.get::<_, Option<bool>>(10)?.unwrap_or(false),
        expires_ms: r.get::<_, Option<i64>>(11)?.map(|e| e as u64),
        supersedes: supersedes.as_deref().and_then(MemoryId::from_slice),
        grants: split_grants(&r.get::<_, String>(13)?),
        effective: split_grants(&r.get::<_, String>(14)?),
        tombstoned: r.get(15)?,
        archived: r.get(16)?,
        reinforcement: r.get::<_, f64>(17)? as f32,
        seq: r.get(18)?,
        owner_trusted: r.get(19)?,
    }))
}

/// One memory by id, whatever its state (live, tombstoned, content missing).
pub fn get(conn: &Connection, id: &MemoryId) -> Result<Option<MemoryRecord>> {
    let sql = format!("SELECT {COLUMNS} FROM memories WHERE id = ?1 AND content_fact IS NOT NULL");
    Ok(conn
        .prepare_cached(&sql)?
        .query_row([&id.0[..]], from_row)
        .optional()?
        .flatten())
}

/// Whether any row (even a tombstone) exists for this id.
pub fn exists(conn: &Connection, id: &MemoryId) -> Result<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM memories WHERE id = ?1")?
        .query_row([&id.0[..]], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Live memories by id, in the order given; missing ids are skipped.
///
/// Outside a transaction the rows are read in one read snapshot (one
/// lock and one look at the WAL for all of them, not one per row).
pub fn get_many(conn: &Connection, ids: &[MemoryId]) -> Result<Vec<MemoryRecord>> {
    let snapshot = if conn.is_autocommit() && ids.len() > 1 {
        Some(conn.unchecked_transaction()?)
    } else {
        None
    };
    let out = read_many(conn, ids)?;
    if let Some(tx) = snapshot {
        tx.commit()?;
    }
    Ok(out)
}

fn read_many(conn: &Connection, ids: &[MemoryId]) -> Result<Vec<MemoryRecord>> {
    let sql = format!("SELECT {COLUMNS} FROM memories WHERE id = ?1 AND {LIVE}");
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(Some(m)) = stmt.query_row([&id.0[..]], from_row).optional()? {
            out.push(m);
        }
    }
    Ok(out)
}

/// Live, unarchived memories the given scopes (or owner) may see, newest
/// first, as candidates for the gate (which still checks each one).
pub fn list_candidates(
    conn: &Connection,
    owner: Option<&str>,
    scopes: &[String],
    kind: Option<&str>,
    limit: usize,
) -> Result<Vec<MemoryRecord>> {
    let mut sql = format!("SELECT {COLUMNS} FROM memories m WHERE {LIVE} AND archived = 0");
    let mut args: Vec<rusqlite::types::Value> = Vec::new();
    if let Some(owner) = owner {
        let placeholders = (0..scopes.len())
            .map(|i| format!("?{}", i + 2))
            .collect::<Vec<_>>()
            .join(",");
        args.push(owner.to_owned().into());
        sql.push_str(&format!(
            " AND ((owner = ?1 AND owner_trusted = 1) OR EXISTS (SELECT 1 FROM memory_grants g WHERE g.memory = m.id AND g.scope IN ({})))",
            if placeholders.is_empty() { "NULL".to_owned() } else { placeholders }
        ));
        args.extend(scopes.iter().map(|s| s.clone().into()));
    }
    if let Some(kind) = kind {
        args.push(kind.to_owned().into());
        sql.push_str(&format!(" AND kind = ?{}", args.len()));
    }
    args.push((limit as i64).into());
    sql.push_str(&format!(
        " ORDER BY created_ms DESC, id DESC LIMIT ?{}",
        args.len()
    ));
    let mut stmt = conn.prepare(&sql)?;
    let rows = stmt.query_map(rusqlite::params_from_iter(args), from_row)?;
    let mut out = Vec::new();
    for r in rows {
        if let Some(m) = r? {
            out.push(m);
        }
    }
    Ok(out)
}

/// Record that memories were recalled (local-only state).
pub fn note_recalled(conn: &Connection, ids: &[MemoryId], now_ms: u64) -> Result<()> {
    let mut stmt = conn.prepare_cached(
        "UPDATE memories SET recall_count = recall_count + 1, last_access_ms = ?2 WHERE id = ?1",
    )?;
    for id in ids {
        stmt.execute(params![&id.0[..], now_ms as i64])?;
    }
    Ok(())
}
