//! The `invites` table: one-time pairing invites (only the proof key of a
//! code is stored, never its secret) and whether each was used.

use rusqlite::{OptionalExtension, params};

use crate::error::Result;

/// An invite as stored.
#[derive(Debug, Clone)]
pub struct StoredInvite {
    pub proof_key: Vec<u8>,
    pub policy: String,
    pub expires_ms: i64,
    pub used_ms: Option<i64>,
}

/// Record a new invite.
pub fn insert(
    tx: &super::Tx<'_>,
    id: &[u8],
    proof_key: &[u8],
    team: &str,
    policy: &str,
    created_ms: u64,
    expires_ms: u64,
) -> Result<()> {
    let conn = super::sql(tx);
    conn.execute(
        "INSERT INTO invites(id, proof_key, team, policy, created_ms, expires_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            id,
            proof_key,
            team,
            policy,
            created_ms as i64,
            expires_ms as i64
        ],
    )?;
    Ok(())
}

/// The invite `id`, if any.
pub fn get(conn: &(impl super::Readable + ?Sized), id: &[u8]) -> Result<Option<StoredInvite>> {
    let conn = super::sql(conn);
    Ok(conn
        .query_row(
            "SELECT proof_key, policy, expires_ms, used_ms FROM invites WHERE id = ?1",
            [id],
            |r| {
                Ok(StoredInvite {
                    proof_key: r.get(0)?,
                    policy: r.get(1)?,
                    expires_ms: r.get(2)?,
                    used_ms: r.get(3)?,
                })
            },
        )
        .optional()?)
}

/// Mark invite `id` used by `joiner` at `now_ms`.
pub fn mark_used(tx: &super::Tx<'_>, id: &[u8], joiner: &[u8], now_ms: u64) -> Result<()> {
    let conn = super::sql(tx);
    conn.execute(
        "UPDATE invites SET used_ms = ?2, used_by = ?3 WHERE id = ?1",
        params![id, now_ms as i64, joiner],
    )?;
    Ok(())
}

/// Whether any invite is unused and unexpired at `now_ms`.
pub fn any_pending(conn: &(impl super::Readable + ?Sized), now_ms: u64) -> Result<bool> {
    let conn = super::sql(conn);
    Ok(conn
        .query_row(
            "SELECT EXISTS(SELECT 1 FROM invites WHERE used_ms IS NULL AND expires_ms > ?1)",
            [now_ms as i64],
            |r| r.get::<_, bool>(0),
        )
        .optional()?
        .unwrap_or(false))
}

/// The distinct policies of the invites unused and unexpired at `now_ms`.
pub fn pending_policies(
    conn: &(impl super::Readable + ?Sized),
    now_ms: u64,
) -> Result<Vec<String>> {
    let conn = super::sql(conn);
    let mut stmt = conn.prepare_cached(
        "SELECT DISTINCT policy FROM invites WHERE used_ms IS NULL AND expires_ms > ?1 ORDER BY policy",
    )?;
    let rows = stmt
        .query_map([now_ms as i64], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}
