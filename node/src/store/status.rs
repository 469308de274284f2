//! Whole-store figures: what `amos status`, `amos check`, `amos doctor` and
//! the `/metrics` gauges count, each a typed question. Reads only, except
//! the "refusals seen" mark `amos status` moves (local-only, in `meta`).
//!
//! Boundary: counts and raw rows; what they mean for a report is the
//! caller's (`api::maintenance`, `ops::doctor`, `ops::metrics`).

use rusqlite::OptionalExtension;

use super::memory::LIVE;
use super::{Readable, Tx, sql};
use crate::error::Result;

fn count(r: &(impl Readable + ?Sized), query: &str) -> Result<i64> {
    Ok(sql(r).query_row(query, [], |row| row.get(0))?)
}

/// Live memories (content held, no tombstone), archived ones included.
pub fn live_memories(r: &(impl Readable + ?Sized)) -> Result<i64> {
    count(r, &format!("SELECT count(*) FROM memories WHERE {LIVE}"))
}

/// Memory rows by state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryCounts {
    /// Live and not archived: what recall finds.
    pub live: i64,
    /// Live and archived (retention, consolidation): kept, out of recall.
    pub archived: i64,
    /// Tombstoned: the content erased, the tombstone kept.
    pub forgotten: i64,
}

/// Every memory row counted by state (bare acl rows, with neither content
/// nor tombstone, in none): the counts kept on write (`store::figures`),
/// no scan.
pub fn memory_counts(r: &(impl Readable + ?Sized)) -> Result<MemoryCounts> {
    let t = super::figures::tally(r)?;
    Ok(MemoryCounts {
        live: t.live,
        archived: t.archived,
        forgotten: t.forgotten,
    })
}

/// [`memory_counts`] by a scan of every row: what the kept counts must
/// equal.
#[cfg(test)]
pub fn memory_counts_scanned(r: &(impl Readable + ?Sized)) -> Result<MemoryCounts> {
    Ok(sql(r).query_row(
        &format!(
            "SELECT coalesce(sum({LIVE} AND archived = 0), 0),
                    coalesce(sum({LIVE} AND archived = 1), 0),
                    coalesce(sum(tombstone_fact IS NOT NULL), 0)
             FROM memories"
        ),
        [],
        |row| {
            Ok(MemoryCounts {
                live: row.get(0)?,
                archived: row.get(1)?,
                forgotten: row.get(2)?,
            })
        },
    )?)
}

/// Live memories not archived: what the full-text index should hold.
pub fn live_unarchived_memories(r: &(impl Readable + ?Sized)) -> Result<i64> {
    count(
        r,
        &format!("SELECT count(*) FROM memories WHERE {LIVE} AND archived = 0"),
    )
}

/// Every memory row, tombstones and bare acl rows included.
pub fn memory_rows(r: &(impl Readable + ?Sized)) -> Result<i64> {
    count(r, "SELECT count(*) FROM memories")
}

/// Present agents, teams and projects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrgCounts {
    pub agents: i64,
    pub teams: i64,
    pub projects: i64,
}

pub fn org_counts(r: &(impl Readable + ?Sized)) -> Result<OrgCounts> {
    Ok(OrgCounts {
        agents: count(r, "SELECT count(*) FROM agents WHERE present = 1")?,
        teams: count(r, "SELECT count(*) FROM teams WHERE present = 1")?,
        projects: count(r, "SELECT count(*) FROM projects WHERE present = 1")?,
    })
}

/// Registered peers.
pub fn peer_count(r: &(impl Readable + ?Sized)) -> Result<i64> {
    count(r, "SELECT count(*) FROM peers")
}

/// Facts held back for peers that lack a feature they need, over all
/// peers (docs/design.md §13).
pub fn held_back(r: &(impl Readable + ?Sized)) -> Result<i64> {
    count(r, "SELECT coalesce(sum(held_back), 0) FROM peers")
}

/// Every refusal in the audit log.
pub fn audit_refusals(r: &(impl Readable + ?Sized)) -> Result<i64> {
    count(r, "SELECT count(*) FROM audit")
}

/// The newest audit entry's id and the one `amos status` last saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditMark {
    pub newest: i64,
    pub seen: i64,
}

pub fn audit_mark(r: &(impl Readable + ?Sized)) -> Result<AuditMark> {
    Ok(sql(r).query_row(
        "SELECT coalesce((SELECT max(id) FROM audit), 0),
                coalesce((SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'status_audit_seen'), 0)",
        [],
        |row| {
            Ok(AuditMark {
                newest: row.get(0)?,
                seen: row.get(1)?,
            })
        },
    )?)
}

/// Refusals recorded after audit entry `seen`.
pub fn audit_refusals_after(r: &(impl Readable + ?Sized), seen: i64) -> Result<i64> {
    Ok(
        sql(r).query_row("SELECT count(*) FROM audit WHERE id > ?1", [seen], |row| {
            row.get(0)
        })?,
    )
}

/// Remember audit entry `newest` as seen by `amos status`.
pub fn mark_audit_seen(tx: &Tx<'_>, newest: i64) -> Result<()> {
    sql(tx).execute(
        "INSERT INTO meta(key, value) VALUES ('status_audit_seen', ?1)
         ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        [newest.to_string()],
    )?;
    Ok(())
}

/// SQLite's `PRAGMA quick_check`: "ok", or what is wrong.
pub fn quick_check(r: &(impl Readable + ?Sized)) -> Result<String> {
    Ok(sql(r).query_row("PRAGMA quick_check", [], |row| row.get(0))?)
}

/// A present link whose endpoint memory is missing, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DanglingRow {
    pub from: Vec<u8>,
    pub to: Vec<u8>,
    pub relation: String,
}

const DANGLING: &str = "l.present = 1 AND (
    NOT EXISTS (SELECT 1 FROM memories m WHERE m.id = l.from_id)
    OR NOT EXISTS (SELECT 1 FROM memories m WHERE m.id = l.to_id))";

/// How many present links have an endpoint this store does not hold.
pub fn dangling_links(r: &(impl Readable + ?Sized)) -> Result<i64> {
    count(r, &format!("SELECT count(*) FROM links l WHERE {DANGLING}"))
}

/// The first `limit` of them, by endpoints.
pub fn dangling_link_rows(r: &(impl Readable + ?Sized), limit: usize) -> Result<Vec<DanglingRow>> {
    let mut stmt = sql(r).prepare(&format!(
        "SELECT l.from_id, l.to_id, l.relation FROM links l WHERE {DANGLING}
         ORDER BY l.from_id, l.to_id LIMIT ?1"
    ))?;
    let rows = stmt.query_map([limit as i64], |row| {
        Ok(DanglingRow {
            from: row.get(0)?,
            to: row.get(1)?,
            relation: row.get(2)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Refused facts in the audit log per stored code (`Refusal::code`).
pub fn audit_codes(r: &(impl Readable + ?Sized)) -> Result<Vec<(String, i64)>> {
    codes(r, "SELECT code, count(*) FROM audit GROUP BY code")
}

/// Facts held aside per stored code (`DeferReason::code`).
pub fn deferred_codes(r: &(impl Readable + ?Sized)) -> Result<Vec<(String, i64)>> {
    codes(r, "SELECT code, count(*) FROM deferred GROUP BY code")
}

fn codes(r: &(impl Readable + ?Sized), query: &str) -> Result<Vec<(String, i64)>> {
    let mut stmt = sql(r).prepare(query)?;
    let rows = stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Whether the database at `path` looks like an amos store of a schema
/// version from 1 to `newest`, with a log epoch: read through a read-only
/// connection, never changed.
pub fn is_backup(path: &std::path::Path, newest: u32) -> Result<bool> {
    let src = match super::connect(path, super::Connect::READ_ONLY) {
        Ok(src) => src,
        Err(e)
            if matches!(
                e.sqlite_error_code(),
                Some(rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt)
            ) =>
        {
            return Ok(false);
        }
        Err(e) => {
            return Err(crate::error::NodeError::BadInput(format!(
                "cannot open {}: {e}",
                path.display()
            )));
        }
    };
    let version: u32 = match src.query_row("PRAGMA user_version", [], |row| row.get(0)) {
        Ok(v) => v,
        Err(_) => return Ok(false),
    };
    let has_meta = src
        .query_row("SELECT count(*) FROM meta WHERE key = 'epoch'", [], |row| {
            row.get::<_, i64>(0)
        })
        .optional()
        .ok()
        .flatten()
        .unwrap_or(0);
    Ok(version != 0 && version <= newest && has_meta == 1)
}
