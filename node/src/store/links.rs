//! The `links` rows that touch one memory, both directions, as stored.
//!
//! Also the neighbours resonance spreads over (links and local
//! associations), pre-filtered by the requester's scopes.
//!
//! Boundary: returns ids only; whoever shows a link must pass its other end
//! through the read gate (`Store::visible`) first — nothing here gates.

use amos_acl::AuthorizedScopes;
use amos_protocol::MemoryId;
use rusqlite::types::Value;

use super::memory::{LIVE, access_clause};
use super::{Readable, sql};
use crate::error::Result;

/// One present link touching a memory.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkRow {
    pub from: MemoryId,
    pub to: MemoryId,
    pub relation: String,
    pub weight: f32,
}

/// The present links from or to `id`, at most `limit`, strongest first.
pub fn touching(
    conn: &(impl super::Readable + ?Sized),
    id: &MemoryId,
    limit: usize,
) -> Result<Vec<LinkRow>> {
    let conn = super::sql(conn);
    let mut stmt = conn.prepare_cached(
        "SELECT from_id, to_id, relation, weight FROM links
         WHERE (from_id = ?1 OR to_id = ?1) AND present = 1
         ORDER BY weight DESC, relation LIMIT ?2",
    )?;
    let rows = stmt.query_map(rusqlite::params![&id.0[..], limit as i64], |r| {
        Ok((
            r.get::<_, Vec<u8>>(0)?,
            r.get::<_, Vec<u8>>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, f64>(3)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (from, to, relation, weight) = row?;
        if let (Some(from), Some(to)) = (MemoryId::from_slice(&from), MemoryId::from_slice(&to)) {
            out.push(LinkRow {
                from,
                to,
                relation,
                weight: weight as f32,
            });
        }
    }
    Ok(out)
}

/// The neighbours of `id` over present links and local associations (either
/// direction), each with `weight × strength` of its strongest link (an
/// association's weight is its strength), strongest first, at most `cap`.
/// Only rows `who`'s scopes (or ownership) may admit, live, unexpired at
/// `now_ms` and not archived, so hidden neighbours take up no slot. A
/// pre-filter: the caller passes every id through the gate before use.
pub fn neighbours(
    r: &(impl Readable + ?Sized),
    who: &AuthorizedScopes,
    now_ms: u64,
    id: &MemoryId,
    cap: usize,
) -> Result<Vec<(MemoryId, f32)>> {
    let mut args: Vec<Value> = vec![id.0.to_vec().into(), (now_ms as i64).into()];
    let access = access_clause(who, &mut args);
    let query = format!(
        "SELECT n.other, max(n.w) AS w FROM (
            SELECT to_id AS other, weight * strength AS w FROM links WHERE from_id = ?1 AND present = 1
            UNION ALL
            SELECT from_id AS other, weight * strength AS w FROM links WHERE to_id = ?1 AND present = 1
            UNION ALL
            SELECT b AS other, strength AS w FROM associations WHERE a = ?1
            UNION ALL
            SELECT a AS other, strength AS w FROM associations WHERE b = ?1
         ) n JOIN memories m ON m.id = n.other
         WHERE {LIVE} AND m.archived = 0 AND (m.expires_ms IS NULL OR m.expires_ms > ?2) AND {access}
         GROUP BY n.other ORDER BY w DESC, n.other LIMIT {cap}",
    );
    let mut stmt = sql(r).prepare_cached(&query)?;
    let rows = stmt.query_map(rusqlite::params_from_iter(args), |r| {
        Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, f64>(1)?))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (b, w) = row?;
        if let Some(id) = MemoryId::from_slice(&b) {
            out.push((id, w as f32));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use amos_protocol::Scope;

    use crate::api::NewMemory;

    /// The pre-filter: a neighbour the requester may not see is never
    /// listed, so it takes no fan-out slot (the gate after it is the rule).
    #[test]
    fn neighbours_are_only_those_the_requester_may_see() {
        let (_dir, _home, mut node, alice) = crate::api::node::test_node("alice");
        node.agent_add("bob", "test", &[]).unwrap();
        let bob = node.requester("bob").unwrap();
        let hub = node.add(&alice, NewMemory::new("hub".to_owned())).unwrap();
        let hidden = node
            .add(&alice, NewMemory::new("hidden".to_owned()))
            .unwrap();
        let mut shared = NewMemory::new("shared".to_owned());
        shared.share = vec![Scope::Global];
        let shared = node.add(&alice, shared).unwrap();
        for to in [&hidden, &shared] {
            node.link(&alice, &hub.to_string(), &to.to_string(), None, 1.0)
                .unwrap();
        }
        let ids = |who| -> Vec<_> {
            let mut v: Vec<_> = node
                .store()
                .read(|r| super::neighbours(r, who, 0, &hub, 10))
                .unwrap()
                .into_iter()
                .map(|(id, _)| id)
                .collect();
            v.sort();
            v
        };
        let mut both = vec![hidden, shared];
        both.sort();
        assert_eq!(ids(&alice), both);
        assert_eq!(ids(&bob), [shared]);
    }
}
