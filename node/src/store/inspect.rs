//! Rows as stored, for tests only: the unit tests of this crate and, with
//! the `inspect` feature, the `amos-tests` harness that runs the replica
//! contract's properties on SQLite beside the twin. Compiled only for
//! them: no amos code path calls it. It is also that harness's way to
//! the store below the node API: the replica, export, digest and peer-row
//! functions it drives the real store with are re-exported here, so the
//! store's own modules stay private.
//!
//! Boundary: ungated and raw by design (a test compares what a write left);
//! product code reads memories only through the gate (`Store::visible`).

use amos_protocol::{MemoryId, NodeId, Register};
use rusqlite::OptionalExtension;

use super::memory::LIVE;
use super::{Readable, sql};
use crate::error::Result;

pub use super::peers::{reset_watermark, set_policy, upsert};
pub use super::replica::{
    ExportSpec, SqlReplica, digest, export_facts, peer_policy, restand_origin, take_deferred,
};

/// A memory row's id, plain content and signed facts.
#[derive(Debug, Clone, PartialEq)]
pub struct SignedRow {
    /// The memory id's bytes.
    pub id: Vec<u8>,
    /// The plain content column.
    pub content: String,
    /// The content register's signed fact, as stored.
    pub content_fact: Vec<u8>,
    /// The acl register's signed fact, as stored.
    pub acl_fact: Vec<u8>,
}

/// Every memory row holding content and acl facts, in `seq` order.
pub fn signed_rows(r: &(impl Readable + ?Sized)) -> Result<Vec<SignedRow>> {
    let mut stmt =
        sql(r).prepare("SELECT id, content, content_fact, acl_fact FROM memories ORDER BY seq")?;
    let rows = stmt.query_map([], |r| {
        Ok(SignedRow {
            id: r.get(0)?,
            content: r.get(1)?,
            content_fact: r.get(2)?,
            acl_fact: r.get(3)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

fn ids(r: &(impl Readable + ?Sized), query: &str) -> Result<Vec<MemoryId>> {
    let mut stmt = sql(r).prepare(query)?;
    let rows = stmt.query_map([], |r| r.get::<_, Vec<u8>>(0))?;
    let mut out = Vec::new();
    for b in rows {
        out.extend(MemoryId::from_slice(&b?));
    }
    Ok(out)
}

/// Ids of the rows that can be shown at all (content held, no tombstone).
pub fn live_ids(r: &(impl Readable + ?Sized)) -> Result<Vec<MemoryId>> {
    ids(r, &format!("SELECT id FROM memories WHERE {LIVE}"))
}

/// Every memory row's id, by id.
pub fn memory_ids(r: &(impl Readable + ?Sized)) -> Result<Vec<MemoryId>> {
    ids(r, "SELECT id FROM memories ORDER BY id")
}

/// One memory row's columns a test compares.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryRow {
    /// The owner column.
    pub owner: String,
    /// The creation time column.
    pub created_ms: i64,
    /// The origin node's id bytes.
    pub origin: Vec<u8>,
    /// The effective grants in force, as stored.
    pub effective: String,
    /// Whether the owner rule holds here.
    pub owner_trusted: bool,
    /// Whether a tombstone is held.
    pub tombstoned: bool,
    /// Whether a content fact is held.
    pub content_held: bool,
    /// The content register's clock (sort key).
    pub v: Option<Vec<u8>>,
    /// The plain content column.
    pub content: Option<String>,
}

/// Memory `id`'s row, if it has one.
pub fn memory_row(r: &(impl Readable + ?Sized), id: &MemoryId) -> Result<Option<MemoryRow>> {
    Ok(sql(r)
        .query_row(
            "SELECT owner, created_ms, origin, effective, owner_trusted,
                    tombstone_fact IS NOT NULL, content_fact IS NOT NULL, v, content
             FROM memories WHERE id = ?1",
            [&id.0[..]],
            |r| {
                Ok(MemoryRow {
                    owner: r.get(0)?,
                    created_ms: r.get(1)?,
                    origin: r.get(2)?,
                    effective: r.get(3)?,
                    owner_trusted: r.get(4)?,
                    tombstoned: r.get(5)?,
                    content_held: r.get(6)?,
                    v: r.get(7)?,
                    content: r.get(8)?,
                })
            },
        )
        .optional()?)
}

/// The signed fact held for `register`, as stored.
pub fn fact_bytes(r: &(impl Readable + ?Sized), register: &Register) -> Result<Option<Vec<u8>>> {
    let conn = sql(r);
    let one = |query: &str, p: &[&dyn rusqlite::ToSql]| -> Result<Option<Vec<u8>>> {
        Ok(conn
            .query_row(query, p, |r| r.get::<_, Option<Vec<u8>>>(0))
            .optional()?
            .flatten())
    };
    match register {
        Register::MemoryContent(id) => one(
            "SELECT content_fact FROM memories WHERE id = ?1",
            &[&&id.0[..]],
        ),
        Register::MemoryAcl(id) => {
            one("SELECT acl_fact FROM memories WHERE id = ?1", &[&&id.0[..]])
        }
        Register::MemoryTombstone(id) => one(
            "SELECT tombstone_fact FROM memories WHERE id = ?1",
            &[&&id.0[..]],
        ),
        Register::Link(a, b, rel) => one(
            "SELECT fact FROM links WHERE from_id = ?1 AND to_id = ?2 AND relation = ?3",
            &[&&a.0[..], &&b.0[..], &rel.as_str()],
        ),
        Register::Team(t) => one("SELECT fact FROM teams WHERE id = ?1", &[&t.as_str()]),
        Register::Project(p) => one("SELECT fact FROM projects WHERE id = ?1", &[&p.as_str()]),
        Register::Membership(s, a) => one(
            "SELECT fact FROM memberships WHERE scope = ?1 AND agent = ?2",
            &[&s.to_string(), &a.as_str()],
        ),
        Register::Agent(a) => one("SELECT fact FROM agents WHERE id = ?1", &[&a.as_str()]),
        Register::Profile(a) => one("SELECT fact FROM profiles WHERE agent = ?1", &[&a.as_str()]),
    }
}

/// Every signed fact held, of every register.
pub fn all_fact_bytes(r: &(impl Readable + ?Sized)) -> Result<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    for query in [
        "SELECT content_fact FROM memories",
        "SELECT acl_fact FROM memories",
        "SELECT tombstone_fact FROM memories",
        "SELECT fact FROM links",
        "SELECT fact FROM teams",
        "SELECT fact FROM projects",
        "SELECT fact FROM memberships",
        "SELECT fact FROM agents",
        "SELECT fact FROM profiles",
    ] {
        let mut stmt = sql(r).prepare(query)?;
        let facts = stmt.query_map([], |r| r.get::<_, Option<Vec<u8>>>(0))?;
        for f in facts {
            out.extend(f?);
        }
    }
    Ok(out)
}

/// A fact refused or held aside, with its sender and what is kept of why.
#[derive(Debug, Clone, PartialEq)]
pub struct AsideRow<W> {
    /// The signed fact, as stored.
    pub fact: Vec<u8>,
    /// The peer that sent it.
    pub peer: NodeId,
    /// What is kept of why: a refusal's code, or how far a deferred fact's
    /// clock was ahead.
    pub why: W,
}

fn peer(b: Vec<u8>) -> NodeId {
    NodeId(<[u8; 32]>::try_from(b.as_slice()).unwrap_or([0; 32]))
}

/// The audit log in order: each refused fact with its stable code.
pub fn refused(r: &(impl Readable + ?Sized)) -> Result<Vec<AsideRow<String>>> {
    let mut stmt = sql(r).prepare("SELECT fact, peer, code FROM audit ORDER BY id")?;
    let rows = stmt.query_map([], |r| {
        Ok(AsideRow {
            fact: r.get(0)?,
            peer: peer(r.get(1)?),
            why: r.get(2)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// The facts held aside, oldest first: each with how far ahead its clock ran.
pub fn deferred(r: &(impl Readable + ?Sized)) -> Result<Vec<AsideRow<Option<u64>>>> {
    let mut stmt =
        sql(r).prepare("SELECT fact, peer, ahead_ms FROM deferred ORDER BY since_ms, hash")?;
    let rows = stmt.query_map([], |r| {
        Ok(AsideRow {
            fact: r.get(0)?,
            peer: peer(r.get(1)?),
            why: r.get::<_, Option<i64>>(2)?.map(|a| a as u64),
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}
