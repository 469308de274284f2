//! Local-only recall state in SQLite: what feedback does to a memory's
//! reinforcement, the local strength of links among memories named
//! together, and their Hebbian associations. Never a replicated fact.

use amos_protocol::MemoryId;
use rusqlite::params;

use crate::error::Result;

/// One feedback: its multipliers (above 1 when helpful), the bounds the
/// recall engine keeps them in (`crate::recall`), and its time.
#[derive(Debug, Clone, Copy)]
pub struct Feedback {
    pub factor: f64,
    pub link_factor: f64,
    pub reinforcement_range: (f64, f64),
    pub link_strength_range: (f64, f64),
    pub association_start: f64,
    pub association_min: f64,
    /// How much one feedback grows (helpful) or shrinks an association.
    pub association_step: f64,
    pub now_ms: i64,
}

/// Apply feedback on `mids` (named together): returns how many memories,
/// links and associations changed.
pub fn feedback(
    tx: &super::Tx<'_>,
    mids: &[MemoryId],
    helpful: bool,
    f: &Feedback,
) -> Result<(usize, usize, usize)> {
    let conn = super::sql(tx);
    let mut memories = 0;
    let mut stmt = conn.prepare_cached(
        "UPDATE memories SET reinforcement = min(?3, max(?2, reinforcement * ?4)),
            last_access_ms = max(coalesce(last_access_ms, 0), ?5)
         WHERE id = ?1",
    )?;
    for id in mids {
        memories += stmt.execute(params![
            &id.0[..],
            f.reinforcement_range.0,
            f.reinforcement_range.1,
            f.factor,
            f.now_ms
        ])?;
    }
    let mut links = 0;
    let mut stmt = conn.prepare_cached(
        "UPDATE links SET strength = min(?4, max(?3, strength * ?5))
         WHERE from_id = ?1 AND to_id = ?2 AND present = 1",
    )?;
    for a in mids {
        for b in mids {
            if a != b {
                links += stmt.execute(params![
                    &a.0[..],
                    &b.0[..],
                    f.link_strength_range.0,
                    f.link_strength_range.1,
                    f.link_factor
                ])?;
            }
        }
    }
    let mut associations = 0;
    let mut grow = conn.prepare_cached(
        "INSERT INTO associations(a, b, strength) VALUES (?1, ?2, ?3)
         ON CONFLICT(a, b) DO UPDATE SET strength = min(?4, strength * ?5)",
    )?;
    let mut shrink = conn.prepare_cached(
        "UPDATE associations SET strength = strength / ?3 WHERE a = ?1 AND b = ?2",
    )?;
    let mut drop =
        conn.prepare_cached("DELETE FROM associations WHERE a = ?1 AND b = ?2 AND strength < ?3")?;
    for (i, a) in mids.iter().enumerate() {
        for b in &mids[i + 1..] {
            let (lo, hi) = if a < b { (a, b) } else { (b, a) };
            associations += if helpful {
                grow.execute(params![
                    &lo.0[..],
                    &hi.0[..],
                    f.association_start,
                    f.link_strength_range.1,
                    f.association_step
                ])?
            } else {
                let n = shrink.execute(params![&lo.0[..], &hi.0[..], f.association_step])?;
                drop.execute(params![&lo.0[..], &hi.0[..], f.association_min])?;
                n
            };
        }
    }
    Ok((memories, links, associations))
}
