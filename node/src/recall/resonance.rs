//! Resonance: memories linked to strong candidates are pulled into recall even
//! when they share no query term, weighted by link weight × local strength and
//! damped per hop (never above the memory they spread from), with bounded
//! hops and fan-out. Local associations (memories found helpful together,
//! see `Node::feedback`) count as links whose weight is their strength.
//!
//! Invariant: traversal runs only over memories visible to the requester.
//! Every neighbour is re-read from SQLite and passed through the gate
//! *before* it is used as a bridge, scored or counted; an invisible memory
//! never bridges two visible ones and is never named, counted or shown.
//! The SQL that lists neighbours already restricts them to rows the
//! requester's scopes (or ownership) may admit, live, unexpired and not
//! archived, so hidden neighbours cannot even take up fan-out slots.

use std::collections::HashMap;

use amos_acl::{AuthorizedScopes, Visible};
use amos_protocol::MemoryId;

use super::rank::{ResonanceConfig, ResonancePath};
use crate::error::Result;
use crate::store::memory::{self, MemoryRecord};
use crate::store::{Readable, links};

/// Hard cap on the neighbours read per memory before the fan-out cut (the
/// SQL orders by link strength, so these are the strongest visible ones).
const NEIGHBOUR_READ_CAP: usize = 256;

/// A memory reached over links.
pub struct Resonant {
    pub memory: Visible<MemoryRecord>,
    pub relevance: f32,
    pub path: ResonancePath,
}

/// Spread relevance from `seeds` (visible memories with their relevance)
/// over links. `known` holds the best relevance each memory already has;
/// only memories that resonance would rank higher come back.
pub fn spread(
    conn: &(impl Readable + ?Sized),
    who: &AuthorizedScopes,
    now_ms: u64,
    seeds: &[(MemoryId, f32)],
    known: &HashMap<MemoryId, f32>,
    cfg: &ResonanceConfig,
) -> Result<Vec<Resonant>> {
    let mut best: HashMap<MemoryId, f32> = known.clone();
    let mut found: HashMap<MemoryId, Resonant> = HashMap::new();
    let mut frontier: Vec<(MemoryId, f32)> = seeds.to_vec();
    for hop in 1..=cfg.hops {
        let mut next = Vec::new();
        for (from, rel) in &frontier {
            for (n, link) in visible_neighbours(conn, who, now_ms, from, cfg.fan_out)? {
                // Never more than the memory it spreads from.
                let carried = (rel * link * cfg.damping).min(*rel);
                if carried <= 0.0 || best.get(&n.id).is_some_and(|b| *b >= carried) {
                    continue;
                }
                best.insert(n.id, carried);
                next.push((n.id, carried));
                found.insert(
                    n.id,
                    Resonant {
                        path: ResonancePath {
                            via: from.to_string(),
                            hops: hop,
                            link,
                        },
                        relevance: carried,
                        memory: n,
                    },
                );
            }
        }
        if next.is_empty() {
            break;
        }
        frontier = next;
    }
    Ok(found.into_values().collect())
}

/// The neighbours of `id` over present links and local associations (either
/// direction) that pass
/// the gate, strongest first, at most `fan_out`, each with `weight ×
/// strength` of its strongest link.
fn visible_neighbours(
    conn: &(impl Readable + ?Sized),
    who: &AuthorizedScopes,
    now_ms: u64,
    id: &MemoryId,
    fan_out: usize,
) -> Result<Vec<(Visible<MemoryRecord>, f32)>> {
    if fan_out == 0 {
        return Ok(Vec::new());
    }
    let links = links::neighbours(conn, who, now_ms, id, NEIGHBOUR_READ_CAP)?;
    let ids: Vec<MemoryId> = links.iter().map(|(id, _)| *id).collect();
    let strength: HashMap<MemoryId, f32> = links.into_iter().collect();
    let mut out = Vec::new();
    // The gate, on rows re-read from SQLite, before anything else.
    for v in memory::visible(conn, who, &ids, now_ms)? {
        if v.archived {
            continue;
        }
        let w = strength.get(&v.id).copied().unwrap_or(0.0);
        out.push((v, w));
        if out.len() == fan_out {
            break;
        }
    }
    Ok(out)
}
