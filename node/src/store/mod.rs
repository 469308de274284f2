//! The authoritative store: one SQLite file per home.
//!
//! Owns the schema ([`schema`]), the persisted hybrid logical clock, the local
//! sequence counter and log epoch (DESIGN.md §7), and writing verified facts
//! into their register rows ([`Tx::put_fact`]). Reading memory rows is in
//! [`memory`], the org graph in [`org`].
//!
//! Invariant: every write runs in one `BEGIN IMMEDIATE` transaction, so many
//! processes may share a home; the clock and `seq` are read and advanced inside
//! that transaction and never go backwards.
//!
//! Boundary: the store decides nothing about who may see or change what (that
//! is `amos-acl` and the node API) nor which of two facts wins (that is
//! `amos-sync`); `put_fact` writes what it is given.

pub mod memory;
pub mod org;
pub mod schema;

use std::path::Path;
use std::time::Duration;

use amos_protocol::{FactBody, Grants, Hlc, HlcState, NodeId, SignedFact, Verified};
use amos_sync::Effect;
use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior, params};

use crate::error::{NodeError, Result};

/// How long a writer waits for another process's write lock.
pub(crate) const BUSY_TIMEOUT: Duration = Duration::from_secs(60);

/// An open store.
pub struct Store {
    conn: Connection,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Store")
    }
}

fn corrupt_if_not_db(path: &Path) -> impl Fn(rusqlite::Error) -> NodeError + '_ {
    move |e| match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::NotADatabase) | Some(rusqlite::ErrorCode::DatabaseCorrupt) => {
            NodeError::Corrupt(format!(
                "{} is not a valid amos database: {e}",
                path.display()
            ))
        }
        _ => NodeError::Db(e),
    }
}

impl Store {
    /// Create (or open) the database at `path`, migrate it, and give it a log
    /// epoch if it has none.
    pub fn create(path: &Path, epoch: [u8; 16]) -> Result<Store> {
        let conn = Connection::open(path)?;
        let mut store = Store::configure(conn, path)?;
        store.write(|tx| {
            tx.tx.execute(
                "INSERT OR IGNORE INTO meta(key, value) VALUES ('epoch', ?1)",
                params![hex(&epoch)],
            )?;
            tx.tx.execute(
                "INSERT OR IGNORE INTO meta(key, value) VALUES ('seq', 0)",
                [],
            )?;
            Ok(())
        })?;
        Ok(store)
    }

    /// Open an existing database; never creates one.
    pub fn open(path: &Path) -> Result<Store> {
        if !path.is_file() {
            return Err(NodeError::Corrupt(format!(
                "database {} is missing",
                path.display()
            )));
        }
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(corrupt_if_not_db(path))?;
        Store::configure(conn, path)
    }

    fn configure(mut conn: Connection, path: &Path) -> Result<Store> {
        conn.busy_timeout(BUSY_TIMEOUT)?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .map_err(corrupt_if_not_db(path))?;
        if !mode.eq_ignore_ascii_case("wal") {
            conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0))?;
        }
        // NORMAL in WAL mode: a committed write survives a crash of the
        // process; a power cut may lose the last commits but never corrupts.
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", true)?;
        schema::migrate(&mut conn).map_err(|e| match e {
            NodeError::Db(e) => corrupt_if_not_db(path)(e),
            e => e,
        })?;
        Ok(Store { conn })
    }

    /// The raw connection, for reads.
    pub fn conn(&self) -> &Connection {
        &self.conn
    }

    /// Run `f` inside one immediate (write-locked) transaction; commit on Ok.
    pub fn write<T>(&mut self, f: impl FnOnce(&mut Tx<'_>) -> Result<T>) -> Result<T> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut w = Tx {
            tx,
            seq: None,
            hlc: None,
        };
        let out = f(&mut w)?;
        w.flush()?;
        w.tx.commit()?;
        Ok(out)
    }

    /// Run `f` inside one read transaction (a consistent snapshot).
    pub fn read<T>(&mut self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Deferred)?;
        let out = f(&tx)?;
        tx.commit()?;
        Ok(out)
    }

    /// The log epoch (changes when the store is restored or reset).
    pub fn epoch(&self) -> Result<String> {
        meta_text(&self.conn, "epoch")?
            .ok_or_else(|| NodeError::Corrupt("store has no log epoch".into()))
    }

    /// The highest sequence number handed out.
    pub fn max_seq(&self) -> Result<i64> {
        max_seq(&self.conn)
    }

    /// The persisted clock state.
    pub fn hlc_state(&self) -> Result<HlcState> {
        hlc_state(&self.conn)
    }

    pub fn schema_version(&self) -> Result<u32> {
        Ok(self
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))?)
    }
}

pub(crate) fn max_seq(conn: &Connection) -> Result<i64> {
    Ok(conn
        .query_row("SELECT value FROM meta WHERE key = 'seq'", [], |r| r.get(0))
        .optional()?
        .unwrap_or(0))
}

fn meta_text(conn: &Connection, key: &str) -> Result<Option<String>> {
    Ok(conn
        .query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
        .optional()?)
}

fn hlc_state(conn: &Connection) -> Result<HlcState> {
    let get = |k: &str| -> Result<i64> {
        Ok(conn
            .query_row("SELECT value FROM meta WHERE key = ?1", [k], |r| r.get(0))
            .optional()?
            .unwrap_or(0))
    };
    Ok(HlcState {
        wall_ms: get("hlc_wall")? as u64,
        logical: get("hlc_logical")? as u32,
    })
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A write transaction. The sequence counter and the clock are read once,
/// advanced in memory, and written back once when the transaction commits.
pub struct Tx<'c> {
    tx: rusqlite::Transaction<'c>,
    seq: Option<i64>,
    hlc: Option<HlcState>,
}

impl Tx<'_> {
    pub fn conn(&self) -> &Connection {
        &self.tx
    }

    /// Hand out the next local sequence number.
    pub fn next_seq(&mut self) -> Result<i64> {
        let seq = match self.seq {
            Some(s) => s + 1,
            None => max_seq(&self.tx)? + 1,
        };
        self.seq = Some(seq);
        Ok(seq)
    }

    fn hlc(&mut self) -> Result<HlcState> {
        match self.hlc {
            Some(h) => Ok(h),
            None => hlc_state(&self.tx),
        }
    }

    /// Issue the clock of a local write: the persisted clock, advanced past
    /// `now_ms` and past everything issued or observed before.
    pub fn tick(&mut self, now_ms: u64, node: NodeId) -> Result<Hlc> {
        let mut state = self.hlc()?;
        let hlc = state.tick(now_ms, node);
        self.hlc = Some(state);
        Ok(hlc)
    }

    /// Record a clock seen on an incoming fact.
    pub fn observe(&mut self, remote: &Hlc) -> Result<()> {
        let mut state = self.hlc()?;
        state.observe(remote);
        self.hlc = Some(state);
        Ok(())
    }

    /// Persist the advanced counter and clock (inside the transaction).
    fn flush(&mut self) -> Result<()> {
        let mut stmt = self.tx.prepare_cached(
            "INSERT INTO meta(key, value) VALUES (?1, ?2)
             ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        )?;
        if let Some(seq) = self.seq {
            stmt.execute(params!["seq", seq])?;
        }
        if let Some(s) = self.hlc {
            stmt.execute(params!["hlc_wall", s.wall_ms as i64])?;
            stmt.execute(params!["hlc_logical", s.logical as i64])?;
        }
        Ok(())
    }

    /// Write a verified fact into its register row, verbatim with its
    /// signature. `effect` says how (for an acl fact: the grants in force on
    /// this node; whether the owner rule holds; whether to erase content).
    /// Does not decide whether the fact should win: callers (local writes,
    /// `amos-sync`) have.
    pub fn put_fact(&mut self, fact: &Verified<SignedFact>, effect: &Effect) -> Result<()> {
        let seq = self.next_seq()?;
        let bytes = fact.to_bytes();
        let v = fact.fact.clock.sort_key().to_vec();
        let tx = &self.tx;
        match &fact.fact.body {
            FactBody::MemoryContent(m) => {
                let tags = serde_json::to_string(&m.tags).unwrap_or_else(|_| "[]".into());
                tx.prepare_cached(
                    "INSERT INTO memories(id, owner, origin, created_ms, kind, content, tags,
                        importance, confidence, pinned, expires_ms, supersedes, v, content_fact,
                        seq, touched, owner_trusted)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?15, ?16)
                     ON CONFLICT(id) DO UPDATE SET kind = excluded.kind, content = excluded.content,
                        tags = excluded.tags, importance = excluded.importance,
                        confidence = excluded.confidence, pinned = excluded.pinned,
                        expires_ms = excluded.expires_ms, supersedes = excluded.supersedes,
                        v = excluded.v, content_fact = excluded.content_fact,
                        seq = excluded.seq, touched = excluded.touched,
                        owner_trusted = excluded.owner_trusted",
                )?
                .execute(params![
                    &m.id.0[..],
                    m.fixed.owner.as_str(),
                    &m.fixed.origin.0[..],
                    m.fixed.created_ms as i64,
                    m.kind.as_str(),
                    m.text.as_str(),
                    tags,
                    m.importance as f64,
                    m.confidence as f64,
                    m.pinned,
                    m.expires_ms.map(|e| e as i64),
                    m.supersedes.map(|s| s.0.to_vec()),
                    v,
                    bytes,
                    seq,
                    effect.owner_trusted,
                ])?;
            }
            FactBody::MemoryAcl(m) => {
                let effective = effect.effective.as_ref().unwrap_or(&m.grants);
                let mut ever: Grants = tx
                    .prepare_cached("SELECT grants_ever FROM memories WHERE id = ?1")?
                    .query_row([&m.id.0[..]], |r| r.get::<_, String>(0))
                    .optional()?
                    .map(|s| split_grants(&s))
                    .unwrap_or_default();
                for g in effective.iter() {
                    ever.insert(g.clone());
                }
                tx.prepare_cached(
                    "INSERT INTO memories(id, owner, origin, created_ms, grants, effective, acl_v,
                        acl_fact, seq, touched, owner_trusted, grants_ever)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9, ?10, ?11)
                     ON CONFLICT(id) DO UPDATE SET grants = excluded.grants,
                        effective = excluded.effective, acl_v = excluded.acl_v,
                        acl_fact = excluded.acl_fact, seq = excluded.seq, touched = excluded.touched,
                        owner_trusted = excluded.owner_trusted, grants_ever = excluded.grants_ever",
                )?
                .execute(params![
                    &m.id.0[..],
                    m.fixed.owner.as_str(),
                    &m.fixed.origin.0[..],
                    m.fixed.created_ms as i64,
                    join_grants(&m.grants),
                    join_grants(effective),
                    v,
                    bytes,
                    seq,
                    effect.owner_trusted,
                    join_grants(&ever),
                ])?;
                tx.prepare_cached("DELETE FROM memory_grants WHERE memory = ?1")?
                    .execute([&m.id.0[..]])?;
                let mut ins =
                    tx.prepare_cached("INSERT INTO memory_grants(memory, scope) VALUES (?1, ?2)")?;
                for g in effective.iter() {
                    ins.execute(params![&m.id.0[..], g.to_string()])?;
                }
                if effect.purge_content {
                    // No local agent can see it and it is not ours: erase the
                    // content but keep its clock `v`, so an older replay stays
                    // stale (the origin re-sends it whole if it is shared again).
                    tx.prepare_cached(
                        "UPDATE memories SET kind = NULL, content = NULL, tags = NULL,
                            importance = NULL, confidence = NULL, pinned = NULL,
                            expires_ms = NULL, supersedes = NULL, content_fact = NULL
                         WHERE id = ?1",
                    )?
                    .execute([&m.id.0[..]])?;
                }
            }
            FactBody::MemoryTombstone(m) => {
                tx.prepare_cached(
                    "INSERT INTO memories(id, owner, origin, created_ms, tombstone_fact, seq, touched,
                        owner_trusted)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7)
                     ON CONFLICT(id) DO UPDATE SET tombstone_fact = excluded.tombstone_fact,
                        seq = excluded.seq, touched = excluded.touched",
                )?
                .execute(params![
                    &m.id.0[..],
                    m.fixed.owner.as_str(),
                    &m.fixed.origin.0[..],
                    m.fixed.created_ms as i64,
                    bytes,
                    seq,
                    effect.owner_trusted,
                ])?;
                // Terminal: erase content and visibility everywhere.
                tx.prepare_cached(
                    "UPDATE memories SET kind = NULL, content = NULL, tags = NULL,
                        importance = NULL, confidence = NULL, pinned = NULL, expires_ms = NULL,
                        supersedes = NULL, v = NULL, content_fact = NULL, grants = '',
                        effective = '', acl_v = NULL, acl_fact = NULL
                     WHERE id = ?1",
                )?
                .execute([&m.id.0[..]])?;
                tx.prepare_cached("DELETE FROM memory_grants WHERE memory = ?1")?
                    .execute([&m.id.0[..]])?;
            }
            FactBody::Link(l) => {
                tx.prepare_cached(
                    "INSERT INTO links(from_id, to_id, relation, weight, present, v, fact, seq)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                     ON CONFLICT(from_id, to_id, relation) DO UPDATE SET weight = excluded.weight,
                        present = excluded.present, v = excluded.v, fact = excluded.fact,
                        seq = excluded.seq",
                )?
                .execute(params![
                    &l.from.0[..],
                    &l.to.0[..],
                    l.relation.as_str(),
                    l.weight as f64,
                    l.present,
                    v,
                    bytes,
                    seq
                ])?;
            }
            FactBody::Team(t) => {
                tx.prepare_cached(
                    "INSERT INTO teams(id, name, present, v, fact, seq) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                     ON CONFLICT(id) DO UPDATE SET name = excluded.name, present = excluded.present,
                        v = excluded.v, fact = excluded.fact, seq = excluded.seq",
                )?
                .execute(params![t.id.as_str(), t.name, t.present, v, bytes, seq])?;
            }
            FactBody::Project(p) => {
                tx.prepare_cached(
                    "INSERT INTO projects(id, team, name, present, v, fact, seq)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                     ON CONFLICT(id) DO UPDATE SET name = excluded.name, present = excluded.present,
                        v = excluded.v, fact = excluded.fact, seq = excluded.seq",
                )?
                .execute(params![
                    p.id.as_str(),
                    p.team.as_str(),
                    p.name,
                    p.present,
                    v,
                    bytes,
                    seq
                ])?;
            }
            FactBody::Membership(m) => {
                tx.prepare_cached(
                    "INSERT INTO memberships(scope, agent, role, present, v, fact, seq)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                     ON CONFLICT(scope, agent) DO UPDATE SET role = excluded.role,
                        present = excluded.present, v = excluded.v, fact = excluded.fact,
                        seq = excluded.seq",
                )?
                .execute(params![
                    m.scope.to_string(),
                    m.agent.as_str(),
                    m.role,
                    m.present,
                    v,
                    bytes,
                    seq
                ])?;
            }
            FactBody::Agent(a) => {
                tx.prepare_cached(
                    "INSERT INTO agents(id, kind, display_name, present, v, fact, seq)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                     ON CONFLICT(id) DO UPDATE SET kind = excluded.kind,
                        display_name = excluded.display_name, present = excluded.present,
                        v = excluded.v, fact = excluded.fact, seq = excluded.seq",
                )?
                .execute(params![
                    a.id.as_str(),
                    a.kind,
                    a.display_name,
                    a.present,
                    v,
                    bytes,
                    seq
                ])?;
            }
            FactBody::Profile(p) => {
                let weights: serde_json::Map<String, serde_json::Value> = p
                    .weights
                    .iter()
                    .map(|(t, w)| (t.to_string(), serde_json::json!(w)))
                    .collect();
                tx.prepare_cached(
                    "INSERT INTO profiles(agent, weights, v, fact, seq) VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT(agent) DO UPDATE SET weights = excluded.weights, v = excluded.v,
                        fact = excluded.fact, seq = excluded.seq",
                )?
                .execute(params![
                    p.agent.as_str(),
                    serde_json::Value::Object(weights).to_string(),
                    v,
                    bytes,
                    seq
                ])?;
            }
        }
        Ok(())
    }

    /// Set local-only memory state (archived flag); moves `touched` so the
    /// index notices, never `seq`, `v` or `acl_v`.
    pub fn set_archived(&mut self, id: &amos_protocol::MemoryId, archived: bool) -> Result<bool> {
        let touched = self.next_seq()?;
        let n = self.tx.execute(
            "UPDATE memories SET archived = ?2, touched = ?3 WHERE id = ?1 AND archived != ?2",
            params![&id.0[..], archived, touched],
        )?;
        Ok(n > 0)
    }
}

/// Grants as stored: canonical, comma-joined, empty for private.
pub fn join_grants(g: &Grants) -> String {
    g.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Inverse of [`join_grants`]. Stored values were canonical when written;
/// anything unparsable is dropped (fails closed: fewer grants, never more).
pub fn split_grants(s: &str) -> Grants {
    s.split(',')
        .filter(|p| !p.is_empty())
        .filter_map(|p| p.parse().ok())
        .collect()
}

impl Store {
    /// Replace the whole database with the one in `file` (SQLite backup API).
    pub fn restore_from(&mut self, file: &Path) -> Result<()> {
        self.conn
            .restore(
                rusqlite::MAIN_DB,
                file,
                None::<fn(rusqlite::backup::Progress)>,
            )
            .map_err(|e| NodeError::BadInput(format!("cannot restore {}: {e}", file.display())))?;
        schema::migrate(&mut self.conn)?;
        Ok(())
    }
}
