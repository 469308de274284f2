//! The `links` rows that touch one memory, both directions, as stored.
//!
//! Boundary: returns ids only; whoever shows a link must pass its other end
//! through the read gate (`Store::visible`) first — nothing here gates.

use amos_protocol::MemoryId;
use rusqlite::Connection;

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
pub fn touching(conn: &Connection, id: &MemoryId, limit: usize) -> Result<Vec<LinkRow>> {
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
