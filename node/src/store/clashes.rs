//! Legacy scope clashes (docs/design.md §6.2), local-only: a legacy team or
//! project id (a bare slug, from before ids were qualified) that another
//! node created too, recorded when a record of it with another origin
//! arrives (`amos_sync::ReplicaStore::record_clash`), or found in the audit
//! log of a store migrated from before this table. What the gate reads to
//! fail closed on such an id (`amos_sync::gate::clash_cut`) and what
//! `amos doctor` reports.
//!
//! Must never become a fact or leave this node: it is what this node saw,
//! not something a peer may tell it. Decides nothing itself; the rule is
//! `amos-sync`'s.

use amos_protocol::{NodeId, OrgScope};
use rusqlite::{OptionalExtension, params};

use crate::error::{NodeError, Result};
use crate::store::org::{org_origin, parse_org_scope};

/// One clashed legacy id as recorded here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClashInfo {
    /// The legacy team or project id.
    pub scope: OrgScope,
    /// The origin of the one held here (`None`: no longer held, which a
    /// record's fixed origin never allows; kept for a damaged store).
    pub held: Option<NodeId>,
    /// The other origins seen (for a clash found in the audit log of a
    /// store migrated from before this table: the refused record's author).
    pub theirs: Vec<NodeId>,
    /// A `full` peer brought one (docs/design.md §6.2: then every node but
    /// the held origin and this one may mean the other).
    pub closed: bool,
    /// When it was first seen (Unix ms).
    pub first_ms: u64,
}

/// Record that a record of legacy `scope` with origin `theirs` arrived,
/// from a `full` peer (`closed`) or a scoped one. Returns whether this is
/// news (then what is held must be re-judged: marked not judged).
pub(crate) fn record(
    tx: &super::Tx<'_>,
    scope: &OrgScope,
    theirs: &NodeId,
    closed: bool,
    now_ms: u64,
) -> Result<bool> {
    let n = tx
        .conn()
        .prepare_cached(
            "INSERT INTO scope_clashes(scope, theirs, closed, first_ms, judged)
             VALUES (?1, ?2, ?3, ?4, 0)
             ON CONFLICT(scope, theirs) DO UPDATE SET closed = 1, judged = 0
             WHERE excluded.closed = 1 AND scope_clashes.closed = 0",
        )?
        .execute(params![
            scope.to_string(),
            &theirs.0[..],
            closed,
            now_ms as i64
        ])?;
    Ok(n > 0)
}

/// If `scope` is a clashed legacy id held here: what is known of it.
pub(crate) fn clash(
    conn: &(impl super::Readable + ?Sized),
    scope: &OrgScope,
) -> Result<Option<amos_sync::Clash>> {
    if scope.is_qualified() {
        return Ok(None);
    }
    let rows: Vec<(Vec<u8>, bool)> = super::sql(conn)
        .prepare_cached("SELECT theirs, closed FROM scope_clashes WHERE scope = ?1")?
        .query_map([scope.to_string()], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    if rows.is_empty() {
        return Ok(None);
    }
    let Some(held) = org_origin(conn, scope)? else {
        return Ok(None);
    };
    let mut theirs = Vec::with_capacity(rows.len());
    let mut closed = false;
    for (t, c) in rows {
        theirs.push(node(t)?);
        closed |= c;
    }
    Ok(Some(amos_sync::Clash {
        held,
        theirs,
        closed,
    }))
}

fn node(bytes: Vec<u8>) -> Result<NodeId> {
    Ok(NodeId(bytes.try_into().map_err(|_| {
        NodeError::Corrupt("stored clash origin".into())
    })?))
}

/// Whether any clash has not had the memories held re-judged for it yet
/// (one found by the migration, or recorded by a node that stopped).
pub(crate) fn unjudged(conn: &(impl super::Readable + ?Sized)) -> Result<bool> {
    Ok(super::sql(conn)
        .prepare_cached("SELECT 1 FROM scope_clashes WHERE judged = 0 LIMIT 1")?
        .query_row([], |r| r.get::<_, i64>(0))
        .optional()?
        .is_some())
}

/// Mark every clash as judged: the memories held were re-judged for it.
pub(crate) fn mark_judged(tx: &super::Tx<'_>) -> Result<()> {
    tx.conn()
        .prepare_cached("UPDATE scope_clashes SET judged = 1 WHERE judged = 0")?
        .execute([])?;
    Ok(())
}

/// Every clash recorded here, by scope.
pub(crate) fn list(conn: &(impl super::Readable + ?Sized)) -> Result<Vec<ClashInfo>> {
    let rows: Vec<(String, Vec<u8>, bool, i64)> = super::sql(conn)
        .prepare_cached(
            "SELECT scope, theirs, closed, first_ms FROM scope_clashes ORDER BY scope, first_ms",
        )?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let mut out: Vec<ClashInfo> = Vec::new();
    for (scope, theirs, closed, first) in rows {
        let scope = parse_org_scope(&scope)
            .ok_or_else(|| NodeError::Corrupt(format!("stored clash scope {scope:?}")))?;
        let theirs = node(theirs)?;
        match out.last_mut() {
            Some(c) if c.scope == scope => {
                c.theirs.push(theirs);
                c.closed |= closed;
                c.first_ms = c.first_ms.min(first as u64);
            }
            _ => {
                let held = org_origin(conn, &scope)?;
                out.push(ClashInfo {
                    scope,
                    held,
                    theirs: vec![theirs],
                    closed,
                    first_ms: first as u64,
                });
            }
        }
    }
    Ok(out)
}

/// Every legacy team and project id held here (present or not): what a
/// store made before qualified ids carries, to be migrated by creating the
/// scope anew (docs/design.md §3).
pub(crate) fn legacy_held(conn: &(impl super::Readable + ?Sized)) -> Result<Vec<OrgScope>> {
    let rows: Vec<String> = super::sql(conn)
        .prepare_cached(
            "SELECT 'team:' || id FROM teams WHERE instr(id, '@') = 0
             UNION ALL
             SELECT 'project:' || id FROM projects WHERE instr(id, '@') = 0
             ORDER BY 1",
        )?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows.iter().filter_map(|s| parse_org_scope(s)).collect())
}
