//! The read audit: which agent read which memory, when, through which front
//! end (`amos audit reads`). Local-only: its rows are never facts, never
//! exported, never in the digest, and are pruned after the retention
//! period. Off unless switched on (`amos config set read-audit on` or
//! `AMOS_READ_AUDIT=on`); its settings live in `meta`.
//!
//! Must never record a memory the reader was not shown: callers pass only
//! ids that came out of the read gate.

use amos_protocol::MemoryId;
use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use crate::error::{NodeError, Result};

/// How long rows are kept when no retention is set: 90 days.
pub const DEFAULT_RETENTION_MS: u64 = 90 * 24 * 3600 * 1000;

const ON_KEY: &str = "read_audit";
const RETENTION_KEY: &str = "read_audit_retention_ms";

pub(in crate::store) fn meta(conn: &Connection, key: &str) -> Result<Option<String>> {
    Ok(conn
        .query_row(
            "SELECT CAST(value AS TEXT) FROM meta WHERE key = ?1",
            [key],
            |r| r.get(0),
        )
        .optional()?)
}

pub(in crate::store) fn set_meta(conn: &Connection, key: &str, value: &str) -> Result<()> {
    conn.execute(
        "INSERT INTO meta(key, value) VALUES (?1, ?2)
         ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        params![key, value],
    )?;
    Ok(())
}

/// Whether the audit is switched on in the store.
pub fn enabled(conn: &(impl super::Readable + ?Sized)) -> Result<bool> {
    let conn = super::sql(conn);
    Ok(meta(conn, ON_KEY)?.as_deref() == Some("on"))
}

pub fn set_enabled(tx: &super::Tx<'_>, on: bool) -> Result<()> {
    let conn = super::sql(tx);
    set_meta(conn, ON_KEY, if on { "on" } else { "off" })
}

/// How long rows are kept.
pub fn retention_ms(conn: &(impl super::Readable + ?Sized)) -> Result<u64> {
    let conn = super::sql(conn);
    Ok(meta(conn, RETENTION_KEY)?
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_RETENTION_MS))
}

pub fn set_retention_ms(tx: &super::Tx<'_>, ms: u64) -> Result<()> {
    let conn = super::sql(tx);
    if ms == 0 {
        return Err(NodeError::BadInput(
            "read-audit retention must be positive".into(),
        ));
    }
    set_meta(conn, RETENTION_KEY, &ms.to_string())
}

/// Record that `agent` was shown `ids` via `via` through `front`, and drop
/// rows older than the retention, in one write (`BEGIN IMMEDIATE`) of its
/// own: local-only bookkeeping beside a read, which holds the store shared.
pub fn record(
    store: &super::Store,
    now_ms: u64,
    agent: &str,
    ids: &[MemoryId],
    front: &str,
    via: &str,
) -> Result<()> {
    let tx = rusqlite::Transaction::new_unchecked(
        store.conn(),
        rusqlite::TransactionBehavior::Immediate,
    )?;
    let conn = &*tx;
    let keep = retention_ms(conn)?;
    {
        let mut stmt = conn.prepare_cached(
            "INSERT INTO read_audit(time_ms, agent, memory, front, via) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        for id in ids {
            stmt.execute(params![now_ms as i64, agent, &id.0[..], front, via])?;
        }
    }
    conn.execute(
        "DELETE FROM read_audit WHERE time_ms < ?1",
        [now_ms.saturating_sub(keep) as i64],
    )?;
    tx.commit()?;
    Ok(())
}

/// One audited read.
#[derive(Debug, Clone, Serialize)]
pub struct ReadRow {
    /// When it was read (Unix ms).
    pub time_ms: u64,
    /// The requesting agent.
    pub agent: String,
    /// The memory read (id).
    pub memory: String,
    /// The front end it came through (`cli`, `mcp`, `console`).
    pub front: String,
    /// The operation (`add`, `get`, `list`, `search`, `pack`, `timeline`).
    pub via: String,
}

/// Rows, newest first, optionally of one agent, one memory, since a time.
pub fn list(
    conn: &(impl super::Readable + ?Sized),
    agent: Option<&str>,
    memory: Option<&MemoryId>,
    since_ms: Option<u64>,
    limit: usize,
) -> Result<Vec<ReadRow>> {
    let conn = super::sql(conn);
    let mut stmt = conn.prepare(
        "SELECT time_ms, agent, memory, front, via FROM read_audit
         WHERE (?1 IS NULL OR agent = ?1) AND (?2 IS NULL OR memory = ?2) AND time_ms >= ?3
         ORDER BY time_ms DESC, id DESC LIMIT ?4",
    )?;
    let rows = stmt.query_map(
        params![
            agent,
            memory.map(|m| m.0.to_vec()),
            since_ms.unwrap_or(0) as i64,
            limit as i64
        ],
        |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Vec<u8>>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, String>(4)?,
            ))
        },
    )?;
    let mut out = Vec::new();
    for r in rows {
        let (t, agent, m, front, via) = r?;
        out.push(ReadRow {
            time_ms: t as u64,
            agent,
            memory: MemoryId::from_slice(&m)
                .map(|m| m.to_string())
                .unwrap_or_default(),
            front,
            via,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_older_than_the_retention_are_pruned_on_the_next_record() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = crate::store::Store::create(&dir.path().join("amos.db"), [0; 16]).unwrap();
        store.write(|tx| set_retention_ms(tx, 1000)).unwrap();
        let m = MemoryId([1; 16]);
        record(&store, 10_000, "alice", &[m], "cli", "get").unwrap();
        record(&store, 10_500, "bob", &[m], "cli", "get").unwrap();
        assert_eq!(
            store.read(|r| list(r, None, None, None, 10)).unwrap().len(),
            2
        );
        record(&store, 11_200, "carol", &[m], "mcp", "search").unwrap();
        let left: Vec<String> = store
            .read(|r| list(r, None, None, None, 10))
            .unwrap()
            .into_iter()
            .map(|r| r.agent)
            .collect();
        assert_eq!(left, ["carol", "bob"]);
        assert!(store.write(|tx| set_retention_ms(tx, 0)).is_err());
    }
}
