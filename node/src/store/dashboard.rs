//! The console dashboard's figures for one requester: how many memories
//! it may see (in all, per scope in force, per type), how many of them were
//! created and how many recalls were noted on each of the last days, and
//! the ones recalled most. Recalls per day are read from the local-only
//! daily counter `recall_days`, which `memory::note_recalled` bumps in the
//! transaction that notes a recall.
//!
//! The counts of memories and of writes per day add up the figures kept
//! on write (`store::figures`: counts per standing — effective grants,
//! owner, owner rule — type and day) over the standings
//! `AuthorizedScopes::may_see` admits, plus the few memories with an expiry
//! still ahead, read live and gated one by one: no scan of every memory.
//! The recalls per day and the most recalled are aggregates over the rows
//! the read gate admits: the live rule ([`LIVE`]), the gate's expiry and
//! the gate's own pre-filter ([`access_clause`]) — which, `memory_grants`
//! holding the grants in force, is exactly `AuthorizedScopes::may_see`.
//! The tests in `api::dashboard` check every figure against the gate read
//! memory by memory, and the kept counts against the full scan (`scan`,
//! test-only) after random writes of every kind.
//!
//! Must never: count a memory the gate does not admit, or hand out a
//! memory but through [`super::memory::visible`].

use std::collections::BTreeMap;

use amos_acl::{AuthorizedScopes, Visible};
use amos_protocol::MemoryId;
use rusqlite::types::Value;

use super::memory::{LIVE, MemoryRecord, access_clause, visible};
use super::{Readable, figures};
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

#[cfg(test)]
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

/// [`VisibleCounts`] for `who` at `now_ms`: the kept counts
/// (`store::figures`) of the standings the gate admits, and the memories
/// with an expiry still ahead, read live, each through the gate.
pub fn visible_counts(
    r: &(impl Readable + ?Sized),
    who: &AuthorizedScopes,
    now_ms: u64,
) -> Result<VisibleCounts> {
    let mut total = 0;
    let mut by_scope: BTreeMap<String, u64> = BTreeMap::new();
    let mut by_type: BTreeMap<String, u64> = BTreeMap::new();
    let kept = figures::by_kind(r)?.into_iter();
    let expiring = figures::expiring(r, now_ms)?
        .into_iter()
        .map(|(s, kind, _)| (s, kind, 1));
    for (standing, kind, n) in kept.chain(expiring) {
        if n == 0 || !who.may_see(&standing, now_ms) {
            continue;
        }
        total += n;
        *by_type.entry(kind).or_default() += n;
        if standing.effective().is_private() {
            *by_scope.entry("private".to_owned()).or_default() += n;
        }
        for scope in standing.effective().iter() {
            *by_scope.entry(scope.to_string()).or_default() += n;
        }
    }
    Ok(VisibleCounts {
        total,
        by_scope: by_scope.into_iter().collect(),
        by_type: by_type.into_iter().collect(),
    })
}

/// For each of the `days` days up to the one holding `now_ms` (oldest
/// first): the day (days since the epoch), how many memories `who` may see
/// were created on it (the kept counts per standing and day the gate
/// admits, and the memories with an expiry still ahead, each through the
/// gate), and how many recalls of them were noted on it.
pub fn per_day(
    r: &(impl Readable + ?Sized),
    who: &AuthorizedScopes,
    now_ms: u64,
    days: u64,
) -> Result<Vec<(u64, u64, u64)>> {
    let today = now_ms / DAY_MS;
    let first = today.saturating_sub(days.saturating_sub(1));
    let mut writes: BTreeMap<u64, u64> = BTreeMap::new();
    let kept = figures::by_day(r, first)?.into_iter();
    let expiring = figures::expiring(r, now_ms)?
        .into_iter()
        .filter(|(_, _, day)| *day >= first)
        .map(|(s, _, day)| (s, day, 1));
    for (standing, day, n) in kept.chain(expiring) {
        if who.may_see(&standing, now_ms) {
            *writes.entry(day).or_default() += n;
        }
    }
    let mut recalls: BTreeMap<u64, u64> = BTreeMap::new();
    let kept = figures::recalls_by_day(r, first)?.into_iter();
    let expiring = figures::expiring_recalls(r, now_ms, first)?.into_iter();
    for (standing, day, n) in kept.chain(expiring) {
        if who.may_see(&standing, now_ms) {
            *recalls.entry(day).or_default() += n;
        }
    }
    Ok((first..=today)
        .map(|d| {
            let of = |m: &BTreeMap<u64, u64>| m.get(&d).copied().unwrap_or(0);
            (d, of(&writes), of(&recalls))
        })
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

/// The figures as one aggregate over every row the gate's SQL pre-filter
/// admits (what the dashboard read before the kept figures): the reference
/// the kept figures are checked against.
#[cfg(test)]
pub(crate) mod scan {
    use amos_acl::AuthorizedScopes;
    use rusqlite::types::Value;

    use super::{DAY_MS, Readable, Result, VisibleCounts, gate_clause};

    fn pairs(
        r: &(impl Readable + ?Sized),
        sql: &str,
        args: Vec<Value>,
    ) -> Result<Vec<(String, u64)>> {
        let mut stmt = crate::store::sql(r).prepare_cached(sql)?;
        let rows = stmt.query_map(rusqlite::params_from_iter(args), |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, i64>(1)?.max(0) as u64,
            ))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// [`VisibleCounts`] by a full scan.
    pub(crate) fn visible_counts(
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

    /// Recalls noted on each day from `first` on of the memories `who` may
    /// see, by a full join: (day, how many), days with none left out.
    pub(crate) fn recalls_per_day(
        r: &(impl Readable + ?Sized),
        who: &AuthorizedScopes,
        now_ms: u64,
        first: u64,
    ) -> Result<Vec<(u64, u64)>> {
        let mut args = vec![Value::from(first as i64)];
        let gate = gate_clause(who, now_ms, &mut args);
        Ok(super::day_counts(
            r,
            &format!(
                "SELECT d.day, SUM(d.recalls) FROM recall_days d \
                 JOIN memories m ON m.id = d.memory WHERE d.day >= ?1 AND {gate} \
                 GROUP BY d.day ORDER BY d.day"
            ),
            args,
        )?
        .into_iter()
        .map(|(d, n)| (d.max(0) as u64, n.max(0) as u64))
        .collect())
    }

    /// Memories `who` may see created on each day from `first` on, by a
    /// full scan: (day, how many), days with none left out.
    pub(crate) fn writes_per_day(
        r: &(impl Readable + ?Sized),
        who: &AuthorizedScopes,
        now_ms: u64,
        first: u64,
    ) -> Result<Vec<(u64, u64)>> {
        let mut args = vec![Value::from((first * DAY_MS) as i64)];
        let gate = gate_clause(who, now_ms, &mut args);
        Ok(super::day_counts(
            r,
            &format!(
                "SELECT m.created_ms / {DAY_MS}, COUNT(*) FROM memories m \
                 WHERE m.created_ms >= ?1 AND {gate} GROUP BY 1 ORDER BY 1"
            ),
            args,
        )?
        .into_iter()
        .map(|(d, n)| (d.max(0) as u64, n.max(0) as u64))
        .collect())
    }
}
