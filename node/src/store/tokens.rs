//! The `agent_tokens` table: the bearer tokens an agent's HTTP clients
//! present (`amos agent token`, `amos serve --http`). A row holds a
//! token's public id, its agent, its label, when it was made, when it
//! expires and when it was revoked, and the hash of its secret.
//!
//! Must never: store or return a token's secret (only its hash, which the
//! node API computes); be replicated — the table is local-only, no fact
//! names it and no write here moves `seq`.

use rusqlite::{OptionalExtension, params};

use crate::error::Result;

/// A token as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredToken {
    /// The public id (what `amos agent token list` shows).
    pub id: String,
    /// The agent it acts as.
    pub agent: String,
    /// The operator's label, if any.
    pub label: Option<String>,
    /// The hash of its secret.
    pub hash: Vec<u8>,
    /// When it was made (ms since 1970).
    pub created_ms: u64,
    /// When it stops working, if ever.
    pub expires_ms: Option<u64>,
    /// When it was revoked, if it was.
    pub revoked_ms: Option<u64>,
}

const COLUMNS: &str = "id, agent, label, hash, created_ms, expires_ms, revoked_ms";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<StoredToken> {
    Ok(StoredToken {
        id: r.get(0)?,
        agent: r.get(1)?,
        label: r.get(2)?,
        hash: r.get(3)?,
        created_ms: r.get::<_, i64>(4)?.max(0) as u64,
        expires_ms: r.get::<_, Option<i64>>(5)?.map(|v| v.max(0) as u64),
        revoked_ms: r.get::<_, Option<i64>>(6)?.map(|v| v.max(0) as u64),
    })
}

/// Record a new token.
pub fn insert(tx: &super::Tx<'_>, t: &StoredToken) -> Result<()> {
    let conn = super::sql(tx);
    conn.execute(
        "INSERT INTO agent_tokens(id, agent, label, hash, created_ms, expires_ms, revoked_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            t.id,
            t.agent,
            t.label,
            t.hash,
            t.created_ms as i64,
            t.expires_ms.map(|v| v as i64),
            t.revoked_ms.map(|v| v as i64),
        ],
    )?;
    Ok(())
}

/// The token with public id `id`, if any.
pub fn get(conn: &(impl super::Readable + ?Sized), id: &str) -> Result<Option<StoredToken>> {
    let conn = super::sql(conn);
    let mut stmt =
        conn.prepare_cached(&format!("SELECT {COLUMNS} FROM agent_tokens WHERE id = ?1"))?;
    Ok(stmt.query_row([id], row).optional()?)
}

/// Every token (of `agent` only, if given), oldest first.
pub fn list(
    conn: &(impl super::Readable + ?Sized),
    agent: Option<&str>,
) -> Result<Vec<StoredToken>> {
    let conn = super::sql(conn);
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM agent_tokens WHERE ?1 IS NULL OR agent = ?1
         ORDER BY created_ms, id"
    ))?;
    let rows = stmt
        .query_map([agent], row)?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// Revoke `agent`'s tokens not yet revoked — the one with public id `id`,
/// or all of them with `None` — at `now_ms`. Returns the ids revoked.
pub fn revoke(
    tx: &super::Tx<'_>,
    agent: &str,
    id: Option<&str>,
    now_ms: u64,
) -> Result<Vec<String>> {
    let conn = super::sql(tx);
    let mut stmt = conn.prepare_cached(
        "UPDATE agent_tokens SET revoked_ms = ?3
         WHERE agent = ?1 AND (?2 IS NULL OR id = ?2) AND revoked_ms IS NULL
         RETURNING id",
    )?;
    let mut ids = stmt
        .query_map(params![agent, id, now_ms as i64], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    ids.sort();
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(id: &str, agent: &str, created_ms: u64) -> StoredToken {
        StoredToken {
            id: id.into(),
            agent: agent.into(),
            label: Some("ci".into()),
            hash: vec![7; 32],
            created_ms,
            expires_ms: Some(created_ms + 10),
            revoked_ms: None,
        }
    }

    #[test]
    fn tokens_are_kept_listed_and_revoked_per_agent_without_moving_seq() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = super::super::Store::create(&dir.path().join("db"), [1; 16]).unwrap();
        let seq = store.max_seq().unwrap();
        store
            .write(|tx| {
                insert(tx, &token("a1", "alice", 1))?;
                insert(tx, &token("a2", "alice", 2))?;
                insert(tx, &token("b1", "bob", 3))
            })
            .unwrap();
        assert_eq!(
            store.read(|r| get(r, "a1")).unwrap(),
            Some(token("a1", "alice", 1))
        );
        assert_eq!(store.read(|r| get(r, "zz")).unwrap(), None);
        let ids = |agent| -> Vec<String> {
            store
                .read(|r| list(r, agent))
                .unwrap()
                .into_iter()
                .map(|t| t.id)
                .collect()
        };
        assert_eq!(ids(None), ["a1", "a2", "b1"]);
        assert_eq!(ids(Some("alice")), ["a1", "a2"]);
        // One of alice's; then bob's id named as alice's revokes nothing.
        let r = store
            .write(|tx| revoke(tx, "alice", Some("a2"), 50))
            .unwrap();
        assert_eq!(r, ["a2"]);
        let r = store
            .write(|tx| revoke(tx, "alice", Some("b1"), 50))
            .unwrap();
        assert!(r.is_empty());
        // All of alice's not yet revoked; a2 keeps its first revocation.
        let r = store.write(|tx| revoke(tx, "alice", None, 60)).unwrap();
        assert_eq!(r, ["a1"]);
        assert_eq!(
            store.read(|r| get(r, "a2")).unwrap().unwrap().revoked_ms,
            Some(50)
        );
        assert_eq!(
            store.read(|r| get(r, "b1")).unwrap().unwrap().revoked_ms,
            None
        );
        assert_eq!(store.max_seq().unwrap(), seq, "local-only");
    }
}
