//! The console dashboard's figures for one requester, in SQL: how many
//! memories it may see (in all, per scope in force, per type), how many of
//! them were created and how many recalls were noted on each of the last
//! days, and the ones recalled most. Recalls per day are read from the
//! local-only daily counter `recall_days`, which `memory::note_recalled`
//! bumps in the transaction that notes a recall.
//!
//! Every figure is one aggregate over the rows the read gate admits: the
//! live rule ([`LIVE`]), the gate's expiry and the gate's own pre-filter
//! ([`access_clause`]) — which, `memory_grants` holding the grants in
//! force, is exactly `AuthorizedScopes::may_see`; a test in this module
//! checks the two agree row by row.
//!
//! Must never: count a row outside that condition, or hand out a memory
//! but through [`super::memory::visible`].

use amos_acl::{AuthorizedScopes, Visible};
use amos_protocol::MemoryId;
use rusqlite::types::Value;

use super::Readable;
use super::memory::{LIVE, MemoryRecord, access_clause, visible};
use crate::error::Result;

/// One day in milliseconds (days are UTC days since the Unix epoch).
pub const DAY_MS: u64 = 86_400_000;

/// How many memories `who` may see: in all, per scope in force (`private`
/// for a memory shared with no one; a memory shared with two scopes counts
/// in both) and per type, each list sorted by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VisibleCounts {
    /// Memories `who` may see.
    pub total: u64,
    /// Per scope in force.
    pub by_scope: Vec<(String, u64)>,
    /// Per memory type.
    pub by_type: Vec<(String, u64)>,
}

/// The condition on `m` (a `memories` row) that holds exactly for the rows
/// the gate lets `who` see at `now_ms`; its parameters appended to `args`.
fn gate_clause(who: &AuthorizedScopes, now_ms: u64, args: &mut Vec<Value>) -> String {
    args.push((now_ms as i64).into());
    let now = args.len();
    let access = access_clause(who, args);
    format!("{LIVE} AND (m.expires_ms IS NULL OR m.expires_ms > ?{now}) AND {access}")
}

fn pairs(r: &(impl Readable + ?Sized), sql: &str, args: Vec<Value>) -> Result<Vec<(String, u64)>> {
    let mut stmt = super::sql(r).prepare_cached(sql)?;
    let rows = stmt.query_map(rusqlite::params_from_iter(args), |row| {
        Ok((
            row.get::<_, String>(0)?,
            row.get::<_, i64>(1)?.max(0) as u64,
        ))
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

fn day_counts(
    r: &(impl Readable + ?Sized),
    sql: &str,
    args: Vec<Value>,
) -> Result<Vec<(i64, i64)>> {
    let mut stmt = super::sql(r).prepare_cached(sql)?;
    let rows = stmt.query_map(rusqlite::params_from_iter(args), |row| {
        Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?))
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// [`VisibleCounts`] for `who` at `now_ms`.
pub fn visible_counts(
    r: &(impl Readable + ?Sized),
    who: &AuthorizedScopes,
    now_ms: u64,
) -> Result<VisibleCounts> {
    let mut args = Vec::new();
    let gate = gate_clause(who, now_ms, &mut args);
    let by_type = pairs(
        r,
        &format!(
            "SELECT COALESCE(m.kind, 'note'), COUNT(*) FROM memories m WHERE {gate} \
             GROUP BY 1 ORDER BY 1"
        ),
        args,
    )?;
    let mut args = Vec::new();
    let gate = gate_clause(who, now_ms, &mut args);
    let by_scope = pairs(
        r,
        &format!(
            "SELECT COALESCE(s.scope, 'private'), COUNT(*) FROM memories m \
             LEFT JOIN memory_grants s ON s.memory = m.id WHERE {gate} GROUP BY 1 ORDER BY 1"
        ),
        args,
    )?;
    Ok(VisibleCounts {
        total: by_type.iter().map(|(_, n)| n).sum(),
        by_scope,
        by_type,
    })
}

/// For each of the `days` days up to the one holding `now_ms` (oldest
/// first): the day (days since the epoch), how many memories `who` may see
/// were created on it, and how many recalls of them were noted on it.
pub fn per_day(
    r: &(impl Readable + ?Sized),
    who: &AuthorizedScopes,
    now_ms: u64,
    days: u64,
) -> Result<Vec<(u64, u64, u64)>> {
    let today = now_ms / DAY_MS;
    let first = today.saturating_sub(days.saturating_sub(1));
    let mut args = vec![Value::from((first * DAY_MS) as i64)];
    let gate = gate_clause(who, now_ms, &mut args);
    let writes = day_counts(
        r,
        &format!(
            "SELECT m.created_ms / {DAY_MS}, COUNT(*) FROM memories m \
             WHERE m.created_ms >= ?1 AND {gate} GROUP BY m.created_ms / {DAY_MS}"
        ),
        args,
    )?;
    let mut args = vec![Value::from(first as i64)];
    let gate = gate_clause(who, now_ms, &mut args);
    let recalls = day_counts(
        r,
        &format!(
            "SELECT d.day, SUM(d.recalls) FROM recall_days d \
             JOIN memories m ON m.id = d.memory WHERE d.day >= ?1 AND {gate} GROUP BY d.day"
        ),
        args,
    )?;
    let of = |list: &[(i64, i64)], day: u64| {
        list.iter()
            .find(|(d, _)| *d == day as i64)
            .map_or(0, |(_, n)| (*n).max(0) as u64)
    };
    Ok((first..=today)
        .map(|d| (d, of(&writes, d), of(&recalls, d)))
        .collect())
}

/// Up to `limit` memories `who` may see that were recalled at least once,
/// most recalled first, each with its recall count (local-only: recalls
/// noted on this node).
pub fn most_recalled(
    r: &(impl Readable + ?Sized),
    who: &AuthorizedScopes,
    now_ms: u64,
    limit: usize,
) -> Result<Vec<(Visible<MemoryRecord>, u64)>> {
    let mut args = Vec::new();
    let gate = gate_clause(who, now_ms, &mut args);
    args.push((limit as i64).into());
    let sql = format!(
        "SELECT m.id, m.recall_count FROM memories m WHERE m.recall_count > 0 AND {gate} \
         ORDER BY m.recall_count DESC, m.id DESC LIMIT ?{}",
        args.len()
    );
    let mut stmt = super::sql(r).prepare_cached(&sql)?;
    let rows = stmt.query_map(rusqlite::params_from_iter(args), |row| {
        Ok((row.get::<_, Vec<u8>>(0)?, row.get::<_, i64>(1)?))
    })?;
    let mut counted: Vec<(MemoryId, u64)> = Vec::new();
    for row in rows {
        let (id, n) = row?;
        if let Some(id) = MemoryId::from_slice(&id) {
            counted.push((id, n.max(0) as u64));
        }
    }
    let ids: Vec<MemoryId> = counted.iter().map(|(id, _)| *id).collect();
    // The gate itself, on each row the aggregate named.
    Ok(visible(r, who, &ids, now_ms)?
        .into_iter()
        .filter_map(|m| {
            let n = counted.iter().find(|(id, _)| *id == m.id())?.1;
            Some((m, n))
        })
        .collect())
}
