//! A peer's echo ranges on SQLite (docs/design.md §7.1): which of the
//! `seq`s a batch applied from that peer took hold only what the peer has,
//! judged over every fact of every row the batch moved
//! ([`amos_sync::held_by_peer`]), and kept per peer and epoch of its
//! log in `echo_ranges` (local-only).
//!
//! Must never: record a range outside the transaction that applied the
//! batch (only inside it are the `seq`s the batch's alone), or skip a row
//! of the run when judging it. The rule is `amos_sync::echo`'s.

use amos_protocol::NodeId;
use amos_sync::{EchoRanges, MAX_ECHO_RANGES, held_by_peer};
use rusqlite::params;

use crate::error::Result;
use crate::store::Tx;

/// The tables whose rows hold one fact each, with a `seq`.
const ONE_FACT_TABLES: [&str; 6] = [
    "links",
    "teams",
    "projects",
    "memberships",
    "agents",
    "profiles",
];

/// The echo ranges of `peer` recorded under its log epoch `epoch` (hex).
pub fn load(
    conn: &(impl super::Readable + ?Sized),
    peer: &NodeId,
    epoch: &str,
) -> Result<EchoRanges> {
    let conn = super::sql(conn);
    let mut stmt = conn.prepare_cached(
        "SELECT first_seq, last_seq FROM echo_ranges WHERE peer = ?1 AND epoch = ?2",
    )?;
    let rows = stmt.query_map(params![&peer.0[..], epoch], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(EchoRanges::from_ranges(
        rows.collect::<rusqlite::Result<Vec<(i64, i64)>>>()?,
    ))
}

/// Inside the transaction that applied a batch from `peer` (log epoch
/// `epoch`, hex) and took our `seq`s `first..=last`: judge every row that
/// now carries one of them, and add the run, minus the rows that hold a
/// fact `peer` lacks, to its echo ranges. `sent(fact)`: the fact came in
/// the batch. Ranges of another epoch of `peer` go.
pub fn record_run(
    tx: &mut Tx<'_>,
    peer: &NodeId,
    epoch: &str,
    (first, last): (i64, i64),
    mut sent: impl FnMut(&[u8]) -> bool,
) -> Result<()> {
    let conn = tx.conn();
    let mut not_echo = Vec::new();
    {
        let mut rows = conn.prepare_cached(
            "SELECT seq, id, edited, content_fact, acl_fact, tombstone_fact FROM memories
             WHERE seq BETWEEN ?1 AND ?2",
        )?;
        let mut log = conn.prepare_cached(
            "SELECT fact FROM memory_text WHERE memory = ?1 AND fact IS NOT NULL",
        )?;
        let mut q = rows.query(params![first, last])?;
        while let Some(r) = q.next()? {
            let seq: i64 = r.get(0)?;
            let slots: [Option<Vec<u8>>; 3] = [r.get(3)?, r.get(4)?, r.get(5)?];
            let mut facts: Vec<Vec<u8>> = slots.into_iter().flatten().collect();
            if r.get::<_, bool>(2)? {
                let id: Vec<u8> = r.get(1)?;
                let entries = log.query_map([id], |l| l.get::<_, Vec<u8>>(0))?;
                facts.extend(entries.collect::<rusqlite::Result<Vec<_>>>()?);
            }
            if !held_by_peer(facts.iter().map(Vec::as_slice), peer, &mut sent) {
                not_echo.push(seq);
            }
        }
    }
    for table in ONE_FACT_TABLES {
        let mut rows = conn.prepare_cached(&format!(
            "SELECT seq, fact FROM {table} WHERE seq BETWEEN ?1 AND ?2"
        ))?;
        let mut q = rows.query(params![first, last])?;
        while let Some(r) = q.next()? {
            let fact: Option<Vec<u8>> = r.get(1)?;
            if !held_by_peer(fact.as_deref(), peer, &mut sent) {
                not_echo.push(r.get(0)?);
            }
        }
    }
    let mut ranges = load(conn, peer, epoch)?;
    ranges.insert_run(first, last, &not_echo);
    ranges.cap(MAX_ECHO_RANGES);
    conn.prepare_cached("DELETE FROM echo_ranges WHERE peer = ?1")?
        .execute([&peer.0[..]])?;
    let mut put = conn.prepare_cached(
        "INSERT INTO echo_ranges(peer, epoch, first_seq, last_seq) VALUES (?1, ?2, ?3, ?4)",
    )?;
    for &(a, b) in ranges.ranges() {
        put.execute(params![&peer.0[..], epoch, a, b])?;
    }
    Ok(())
}

/// Forget every echo range of `peer` (it was removed).
pub fn forget(tx: &super::Tx<'_>, peer: &NodeId) -> Result<()> {
    let conn = super::sql(tx);
    conn.prepare_cached("DELETE FROM echo_ranges WHERE peer = ?1")?
        .execute([&peer.0[..]])?;
    Ok(())
}
