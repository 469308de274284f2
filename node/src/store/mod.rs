//! The authoritative store: one SQLite file per home.
//!
//! Owns the schema ([`schema`]), the persisted hybrid logical clock, the local
//! sequence counter and log epoch (docs/design.md §7), and writing admitted facts
//! into their register rows ([`Tx::put`]: it takes only an
//! [`amos_sync::Admission`], which only the import gate or a local write
//! signed by this node's key can make). Reading memory rows is in
//! [`memory`], the org graph in [`org`].
//!
//! Every SQL statement of amos-node is in this folder (a layers test holds
//! it there: `tests/tests/it/layers.rs`); the rest of the crate asks typed
//! questions. Reads go through [`Readable`] — a [`Store::read`] closure's
//! [`Reader`] or a held [`Snapshot`] (each one consistent snapshot), or a
//! write's [`Tx`] (what it has written so far); the [`Store`] itself is not
//! readable, so no caller reads outside a snapshot by accident — and writes
//! take a [`Tx`], made only by [`Store::write`] (one `BEGIN IMMEDIATE`). No raw connection leaves the store; every
//! connection to a store file is opened by `connect` (`connect.rs`).
//!
//! Invariant: every write runs in one `BEGIN IMMEDIATE` transaction, so many
//! processes may share a home; the clock and `seq` are read and advanced inside
//! that transaction and never go backwards. Two local-only writes run beside
//! a read and take their own: the read audit's rows (`reads::record`, its own
//! `BEGIN IMMEDIATE`) and the digest cache (`replica::digest_bytes`, best
//! effort, never a fact, never `seq`).
//!
//! Boundary: the store decides nothing about who may see or change what (that
//! is `amos-acl` and the node API) nor which of two facts wins (that is
//! `amos-sync`); `put` writes what the gate admitted.

pub(crate) mod catchup;
pub(crate) mod checkpoint;
pub(crate) mod clashes;
mod connect;
pub(crate) mod dashboard;
pub(crate) mod digest;
pub(crate) mod echo;
pub(crate) mod figures;
pub(crate) mod foreign;
pub(crate) mod history;
pub(crate) mod hygiene;
#[cfg(any(test, feature = "inspect"))]
pub mod inspect;
pub(crate) mod invites;
pub(crate) mod latency;
pub(crate) mod links;
pub(crate) mod memory;
pub(crate) mod moves;
pub(crate) mod org;
pub(crate) mod peers;
pub(crate) mod profile;
pub(crate) mod provenance;
pub(crate) mod reads;
pub(crate) mod recall;
pub(crate) mod repair;
pub(crate) mod replica;
pub(crate) mod schema;
pub(crate) mod status;
pub(crate) mod text_log;
pub(crate) mod tokens;

use std::path::Path;
use std::time::Duration;

use amos_protocol::{FactBody, Grants, Hlc, HlcState, MemoryId, NodeId, SignedFact, Verified};
use amos_sync::{Admission, Effect};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use crate::error::{NodeError, Result};

pub(in crate::store) use connect::connect;
pub use connect::{Access, BUSY_TIMEOUT, Connect, SEQ_POLL, WATCH_WAIT, Watch};
pub use memory::MemoryRecord;
pub use org::{AgentInfo, ProjectInfo, StoredOrg, TeamInfo};
pub use peers::{DigestCheck, LastSession, RepairState};
pub use reads::ReadRow;
pub use replica::{AuditEntry, DeferredInfo, PeerInfo, peers_named};
pub use schema::version_creating;
pub use text_log::{HistoryEntry, TextState};

/// An open store.
pub struct Store {
    conn: Connection,
    /// The checkpoint thread beside the connection.
    checkpoints: checkpoint::Checkpoints,
}

impl Drop for Store {
    fn drop(&mut self) {
        self.checkpoints.stop();
    }
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
        let conn = connect(path, Connect::CREATE).map_err(corrupt_if_not_db(path))?;
        let mut store = Store::configure(conn, path)?;
        store.write(|tx| {
            tx.tx.execute(
                "INSERT OR IGNORE INTO meta(key, value) VALUES ('epoch', ?1)",
                params![data_encoding::HEXLOWER.encode(&epoch)],
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
        let conn = connect(path, Connect::EXISTING).map_err(corrupt_if_not_db(path))?;
        Store::configure(conn, path)
    }

    fn configure(mut conn: Connection, path: &Path) -> Result<Store> {
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .map_err(corrupt_if_not_db(path))?;
        if !mode.eq_ignore_ascii_case("wal") {
            conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0))?;
        }
        schema::migrate(&mut conn).map_err(|e| match e {
            NodeError::Db(e) => corrupt_if_not_db(path)(e),
            e => e,
        })?;
        // After the migration: its schema changes checkpoint as SQLite
        // always did, before any thread beside this connection exists.
        let checkpoints = checkpoint::install(&mut conn, path)?;
        Ok(Store { conn, checkpoints })
    }

    /// The raw connection, for the store's own statements.
    pub(in crate::store) fn conn(&self) -> &Connection {
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
            digests: Default::default(),
            figures: Default::default(),
            arrival: None,
        };
        let out = f(&mut w)?;
        w.flush()?;
        w.tx.commit()?;
        Ok(out)
    }

    /// [`Store::write`], waiting at most `wait` (not [`BUSY_TIMEOUT`]) for
    /// another process's write lock: for bookkeeping a busy store may drop.
    pub fn write_waiting<T>(
        &mut self,
        wait: Duration,
        f: impl FnOnce(&mut Tx<'_>) -> Result<T>,
    ) -> Result<T> {
        self.conn.busy_timeout(wait)?;
        let done = self.write(f);
        self.conn.busy_timeout(BUSY_TIMEOUT)?;
        done
    }

    /// A read transaction held while the caller reads through this store:
    /// a consistent snapshot, and SQLite's WAL read lock taken once instead
    /// of around each statement (two fcntl calls per statement: a sixth of
    /// a search at 10k when its reads ran one row a statement). Ends with
    /// `commit()` or when dropped; fails if a transaction is already open.
    pub(crate) fn snapshot(&self) -> Result<Snapshot<'_>> {
        Ok(Snapshot(self.conn.unchecked_transaction()?))
    }

    /// Run `f` inside one read transaction: everything it reads through
    /// the [`Reader`] is one consistent snapshot.
    /// Fails if a transaction is already open on this store (a
    /// [`Store::snapshot`] held: read through it instead).
    pub fn read<T>(&self, f: impl FnOnce(&Reader<'_>) -> Result<T>) -> Result<T> {
        let tx = self.conn.unchecked_transaction()?;
        let out = f(&Reader { conn: &tx })?;
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

    /// The schema version the file is at.
    pub fn schema_version(&self) -> Result<u32> {
        Ok(self
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))?)
    }
}

/// What the store is read through: a [`Store::read`] closure's [`Reader`]
/// or a held [`Snapshot`] (one consistent snapshot each), or a write's
/// [`Tx`] (what it has written so far). Sealed: only
/// the store implements it, and only the store reaches the connection.
pub trait Readable {
    #[doc(hidden)]
    fn connection(&self, _: sealed::Key) -> &Connection;
}

mod sealed {
    /// Only the store can name this, so only the store can call
    /// [`super::Readable::connection`].
    pub struct Key(pub(super) ());
}

/// The connection behind `r`, for the store's own statements.
pub(in crate::store) fn sql<R: Readable + ?Sized>(r: &R) -> &Connection {
    r.connection(sealed::Key(()))
}

/// One read snapshot: what a [`Store::read`] closure reads through.
pub struct Reader<'c> {
    conn: &'c Connection,
}

impl Readable for Reader<'_> {
    fn connection(&self, _: sealed::Key) -> &Connection {
        self.conn
    }
}

/// A read snapshot held open while the caller reads through the [`Store`]
/// (`Store::snapshot`): ends with [`Snapshot::commit`] or when dropped.
pub struct Snapshot<'c>(rusqlite::Transaction<'c>);

impl Snapshot<'_> {
    /// End the snapshot.
    pub fn commit(self) -> Result<()> {
        Ok(self.0.commit()?)
    }
}

impl Readable for Snapshot<'_> {
    fn connection(&self, _: sealed::Key) -> &Connection {
        &self.0
    }
}

impl Readable for Connection {
    fn connection(&self, _: sealed::Key) -> &Connection {
        self
    }
}

impl Readable for Tx<'_> {
    fn connection(&self, _: sealed::Key) -> &Connection {
        &self.tx
    }
}

pub(crate) fn max_seq(conn: &(impl Readable + ?Sized)) -> Result<i64> {
    let conn = sql(conn);
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

/// A write transaction. The sequence counter and the clock are read once,
/// advanced in memory, and written back once when the transaction commits.
pub struct Tx<'c> {
    tx: rusqlite::Transaction<'c>,
    seq: Option<i64>,
    hlc: Option<HlcState>,
    /// The rows this transaction changes, for the running digests.
    digests: digest::Tracker,
    /// What this transaction moves in the kept figures (`store::figures`).
    figures: figures::Keeper,
    /// The peer whose facts this transaction applies (`store::provenance`).
    arrival: Option<provenance::Arrival>,
}

impl Tx<'_> {
    pub(in crate::store) fn conn(&self) -> &Connection {
        &self.tx
    }

    /// The store's log epoch (see [`Store::epoch`]).
    pub fn epoch(&self) -> Result<String> {
        meta_text(&self.tx, "epoch")?
            .ok_or_else(|| NodeError::Corrupt("store has no log epoch".into()))
    }

    /// The last local sequence number this transaction handed out, if any.
    pub fn last_seq(&self) -> Option<i64> {
        self.seq
    }

    /// Hand out the next local sequence number.
    pub fn next_seq(&mut self) -> Result<i64> {
        let seq = match self.seq {
            Some(s) => s + 1,
            None => max_seq(&*self.tx)? + 1,
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
        self.digests.flush(&self.tx)?;
        self.figures.flush(&self.tx)?;
        self.write_counters()
    }

    /// Write the counter and clock as advanced so far into `meta` (again
    /// when the transaction commits): a scan inside the transaction
    /// (`replica::keep_running`) reads up to the stored counter, and must
    /// see this transaction's writes.
    pub(crate) fn write_counters(&mut self) -> Result<()> {
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

    /// Note memory `id`'s row before it changes, for the running digests
    /// (`store::digest`) and the kept figures (`store::figures`).
    pub(in crate::store) fn touch_memory(&mut self, id: &MemoryId) -> Result<()> {
        if let Some(a) = &mut self.arrival {
            a.row_changed();
        }
        self.digests
            .touch(&self.tx, digest::RowKey::Memory(id.0.to_vec()))?;
        self.figures.touch(&self.tx, &id.0)
    }

    /// Note the row `body` writes, before it changes, for the running
    /// digests (`store::digest`) and the kept figures (`store::figures`).
    fn note_row(&mut self, body: &FactBody) -> Result<()> {
        use digest::RowKey;
        let key = match body {
            FactBody::MemoryContent(m) => return self.touch_memory(&m.id),
            FactBody::MemoryAcl(m) => return self.touch_memory(&m.id),
            FactBody::MemoryTombstone(m) => return self.touch_memory(&m.id),
            FactBody::Link(l) => RowKey::Link(
                l.from.0.to_vec(),
                l.to.0.to_vec(),
                l.relation.as_str().to_owned(),
            ),
            FactBody::Team(t) => RowKey::Team(t.id.as_str().to_owned()),
            FactBody::Project(p) => {
                return self
                    .digests
                    .touch_project(&self.tx, p.id.as_str(), p.team.as_str());
            }
            FactBody::Membership(m) => {
                RowKey::Membership(m.scope.to_string(), m.agent.as_str().to_owned())
            }
            FactBody::Agent(a) => RowKey::Agent(a.id.as_str().to_owned()),
            FactBody::Profile(p) => RowKey::Profile(p.agent.as_str().to_owned()),
        };
        self.digests.touch(&self.tx, key)
    }

    /// Write an admitted fact into its register row, verbatim with its
    /// signature, as its effect says (for an acl fact: the grants in force
    /// on this node; whether the owner rule holds; whether to erase
    /// content). Does not decide whether the fact should win: callers
    /// (local writes, `amos-sync`) have.
    ///
    /// The only way in is an admission (this compiles):
    ///
    /// ```no_run
    /// fn store(tx: &mut amos_node::store::Tx<'_>, a: &amos_sync::Admission) {
    ///     tx.put(a).unwrap();
    /// }
    /// ```
    ///
    /// A bare verified fact is not one:
    ///
    /// ```compile_fail
    /// fn store(tx: &mut amos_node::store::Tx<'_>, f: &amos_protocol::Verified<amos_protocol::SignedFact>) {
    ///     tx.put(f).unwrap();
    /// }
    /// ```
    ///
    /// and the raw writer under it is private:
    ///
    /// ```compile_fail
    /// fn store(tx: &mut amos_node::store::Tx<'_>, a: &amos_sync::Admission) {
    ///     tx.put_fact(a.fact(), a.effect()).unwrap();
    /// }
    /// ```
    pub fn put(&mut self, admission: &Admission) -> Result<()> {
        self.put_fact(admission.fact(), admission.effect())
    }

    fn put_fact(&mut self, fact: &Verified<SignedFact>, effect: &Effect) -> Result<()> {
        self.note_row(&fact.fact.body)?;
        let seq = self.next_seq()?;
        let bytes = fact.to_bytes();
        let v = fact.fact.clock.sort_key().to_vec();
        let tx = &self.tx;
        match &fact.fact.body {
            FactBody::MemoryContent(m) => {
                let edited: bool = tx
                    .prepare_cached("SELECT edited FROM memories WHERE id = ?1")?
                    .query_row([&m.id.0[..]], |r| r.get(0))
                    .optional()?
                    .unwrap_or(false);
                match m.text.plain() {
                    Some(text) if !edited => {
                        self.put_content_row(fact, text, seq, effect.owner_trusted())?
                    }
                    _ => {
                        self.put_edited_content(fact, effect.owner_trusted(), true)?;
                    }
                }
            }
            FactBody::MemoryAcl(m) => {
                let effective = effect.effective().unwrap_or(&m.grants);
                let ever = self.grants_ever_with(&m.id, effective)?;
                let before = history::current(tx, &m.id)?;
                history::note_change(
                    tx,
                    &m.id,
                    before,
                    fact.fact.clock.wall_ms,
                    (&join_grants(effective), effect.owner_trusted(), false),
                )?;
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
                    effect.owner_trusted(),
                    join_grants(&ever),
                ])?;
                self.write_memory_grants(&m.id, effective)?;
                self.resend_text(&m.id, seq)?;
                if effect.purge_content() {
                    self.purge_content(&m.id)?;
                }
            }
            FactBody::MemoryTombstone(m) => {
                let before = history::current(tx, &m.id)?;
                history::note_change(
                    tx,
                    &m.id,
                    before,
                    fact.fact.clock.wall_ms,
                    ("", false, true),
                )?;
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
                    effect.owner_trusted(),
                ])?;
                // Terminal: erase content, its text log and visibility everywhere.
                self.drop_text(&m.id)?;
                tx.prepare_cached(
                    "UPDATE memories SET kind = NULL, content = NULL, tags = NULL,
                        importance = NULL, confidence = NULL, pinned = NULL, expires_ms = NULL,
                        supersedes = NULL, valid_from_ms = NULL, valid_to_ms = NULL,
                        v = NULL, content_fact = NULL, grants = '',
                        effective = '', acl_v = NULL, acl_fact = NULL
                     WHERE id = ?1",
                )?
                .execute([&m.id.0[..]])?;
                self.write_memory_grants(&m.id, &Grants::private())?;
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
                    "INSERT INTO teams(id, name, present, v, fact, seq, origin)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                     ON CONFLICT(id) DO UPDATE SET name = excluded.name, present = excluded.present,
                        v = excluded.v, fact = excluded.fact, seq = excluded.seq",
                )?
                .execute(params![
                    t.id.as_str(),
                    t.name,
                    t.present,
                    v,
                    bytes,
                    seq,
                    &t.origin.0[..]
                ])?;
            }
            FactBody::Project(p) => {
                tx.prepare_cached(
                    "INSERT INTO projects(id, team, name, present, v, fact, seq, origin)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
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
                    seq,
                    &p.origin.0[..]
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

    /// No local agent can see the memory and it is not ours (nor a full
    /// peer's): erase the content but keep its clock `v`, so an older replay
    /// stays stale (the same fact is taken back once the memory is needed
    /// here again, `amos_sync::merge::decide_memory`).
    fn purge_content(&self, id: &MemoryId) -> Result<()> {
        self.drop_text(id)?;
        self.tx
            .prepare_cached(
                "UPDATE memories SET kind = NULL, content = NULL, tags = NULL,
                    importance = NULL, confidence = NULL, pinned = NULL,
                    expires_ms = NULL, supersedes = NULL, valid_from_ms = NULL,
                    valid_to_ms = NULL, content_fact = NULL
                 WHERE id = ?1",
            )?
            .execute([&id.0[..]])?;
        Ok(())
    }

    /// Drop the memberships of the clashed legacy scope `scope` (text form,
    /// `team:ID`) whose author `foreign` says may mean the other one
    /// (docs/design.md §6.2): a store of a release before the clash rule
    /// took them into its own roster; the gate refuses them from now on.
    /// Returns how many went.
    pub(crate) fn drop_clashed_members(
        &mut self,
        scope: &str,
        foreign: impl Fn(NodeId) -> bool,
    ) -> Result<usize> {
        let rows: Vec<(String, Vec<u8>)> = self
            .tx
            .prepare_cached("SELECT agent, v FROM memberships WHERE scope = ?1")?
            .query_map([scope], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let mut dropped = 0;
        for (agent, v) in rows {
            let author = Hlc::from_sort_key(&v).map(|c| c.node);
            if author.is_some_and(|a| !foreign(a)) {
                continue;
            }
            self.digests.touch(
                &self.tx,
                digest::RowKey::Membership(scope.to_owned(), agent.clone()),
            )?;
            self.tx
                .prepare_cached("DELETE FROM memberships WHERE scope = ?1 AND agent = ?2")?
                .execute(params![scope, agent])?;
            dropped += 1;
        }
        Ok(dropped)
    }

    /// Re-judge a stored memory's standing here (its origin's policy
    /// changed): the grants in force, the owner rule, and whether its
    /// content must go. Takes a fresh `seq` (what leaves for peers may have
    /// changed) and moves `touched` (the index re-reads it).
    pub(crate) fn set_standing(
        &mut self,
        id: &MemoryId,
        effective: &Grants,
        owner_trusted: bool,
        purge: bool,
    ) -> Result<()> {
        self.touch_memory(id)?;
        let seq = self.next_seq()?;
        let ever = self.grants_ever_with(id, effective)?;
        // No fact stamps a re-judged standing: it ends now, by this
        // machine's clock.
        let before = history::current(&self.tx, id)?;
        history::note_change(
            &self.tx,
            id,
            before,
            crate::clock::WallClock::now_ms(&crate::clock::SystemClock),
            (&join_grants(effective), owner_trusted, false),
        )?;
        self.tx
            .prepare_cached(
                "UPDATE memories SET effective = ?2, owner_trusted = ?3, grants_ever = ?4,
                    seq = ?5, touched = ?5
                 WHERE id = ?1",
            )?
            .execute(params![
                &id.0[..],
                join_grants(effective),
                owner_trusted,
                join_grants(&ever),
                seq
            ])?;
        self.write_memory_grants(id, effective)?;
        self.resend_text(id, seq)?;
        if purge {
            self.purge_content(id)?;
        }
        Ok(())
    }

    /// Every grant memory `id` has ever had in force here, with `effective`:
    /// whom a retraction must reach.
    fn grants_ever_with(&self, id: &MemoryId, effective: &Grants) -> Result<Grants> {
        let mut ever: Grants = self
            .tx
            .prepare_cached("SELECT grants_ever FROM memories WHERE id = ?1")?
            .query_row([&id.0[..]], |r| r.get::<_, String>(0))
            .optional()?
            .map(|s| split_grants(&s))
            .unwrap_or_default();
        for g in effective.iter() {
            ever.insert(g.clone());
        }
        Ok(ever)
    }

    /// Replace memory `id`'s rows in `memory_grants` (the grants in force
    /// here, which the read gate's pre-filter joins on).
    fn write_memory_grants(&self, id: &MemoryId, effective: &Grants) -> Result<()> {
        self.tx
            .prepare_cached("DELETE FROM memory_grants WHERE memory = ?1")?
            .execute([&id.0[..]])?;
        self.insert_memory_grants(id, effective)
    }

    /// Add memory `id`'s rows in `memory_grants`, for a row that has none
    /// (one just inserted: the foreign key and the cascade keep a memory's
    /// grant rows from outliving it, and a left-over one would fail the
    /// insert on the primary key, never be kept twice).
    fn insert_memory_grants(&self, id: &MemoryId, effective: &Grants) -> Result<()> {
        let mut ins = self
            .tx
            .prepare_cached("INSERT INTO memory_grants(memory, scope) VALUES (?1, ?2)")?;
        for g in effective.iter() {
            ins.execute(params![&id.0[..], g.to_string()])?;
        }
        Ok(())
    }

    /// Write a content fact as the memory's content register, with `text`
    /// as the text readers see.
    fn put_content_row(
        &mut self,
        fact: &Verified<SignedFact>,
        text: &str,
        seq: i64,
        owner_trusted: bool,
    ) -> Result<()> {
        let FactBody::MemoryContent(m) = &fact.fact.body else {
            return Err(NodeError::Corrupt(
                "put_content_row takes a content fact".into(),
            ));
        };
        let bytes = fact.to_bytes();
        let v = fact.fact.clock.sort_key().to_vec();
        let tx = &self.tx;
        let tags = serde_json::to_string(&m.tags).unwrap_or_else(|_| "[]".into());
        tx.prepare_cached(
                    "INSERT INTO memories(id, owner, origin, created_ms, kind, content, tags,
                        importance, confidence, pinned, expires_ms, supersedes, v, content_fact,
                        seq, touched, owner_trusted, valid_from_ms, valid_to_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?15, ?16,
                        ?17, ?18)
                     ON CONFLICT(id) DO UPDATE SET kind = excluded.kind, content = excluded.content,
                        tags = excluded.tags, importance = excluded.importance,
                        confidence = excluded.confidence, pinned = excluded.pinned,
                        expires_ms = excluded.expires_ms, supersedes = excluded.supersedes,
                        valid_from_ms = excluded.valid_from_ms, valid_to_ms = excluded.valid_to_ms,
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
                    text,
                    tags,
                    m.importance as f64,
                    m.confidence as f64,
                    m.pinned,
                    m.expires_ms.map(|e| e as i64),
                    m.supersedes.map(|s| s.0.to_vec()),
                    v,
                    bytes,
                    seq,
                    owner_trusted,
                    m.validity.from_ms.map(|t| t as i64),
                    m.validity.to_ms.map(|t| t as i64),
                ])?;
        Ok(())
    }

    /// Write a memory that has no row yet from its content and acl facts
    /// (same id and fixed fields) as one new row: the row that `put_fact`
    /// of the acl fact (with `effective` in force, never purging) then of
    /// the content fact (with `owner_trusted`) would leave, in one insert
    /// instead of an insert and an update. Two `seq`s are taken; the row
    /// carries the second. Fails if a row for the id exists. In a
    /// transaction applying a peer's facts, the row names the peer as where
    /// it arrived from at once (`provenance::arriving_from`).
    pub(crate) fn put_new_memory(&mut self, content: &Admission, acl: &Admission) -> Result<()> {
        let owner_trusted = content.effect().owner_trusted();
        let (content, acl_effect, acl) = (content.fact(), acl.effect(), acl.fact());
        let (FactBody::MemoryContent(m), FactBody::MemoryAcl(a)) =
            (&content.fact.body, &acl.fact.body)
        else {
            return Err(NodeError::Corrupt(
                "put_new_memory takes a content fact and an acl fact".into(),
            ));
        };
        if m.id != a.id || m.fixed != a.fixed {
            return Err(NodeError::Corrupt(
                "put_new_memory: the content and acl facts name different memories".into(),
            ));
        }
        let Some(text) = m.text.plain() else {
            return Err(NodeError::Corrupt(
                "put_new_memory takes plain text; an edit goes through the text log".into(),
            ));
        };
        let effective = acl_effect.effective().unwrap_or(&a.grants);
        self.next_seq()?;
        let seq = self.next_seq()?;
        let tags = serde_json::to_string(&m.tags).unwrap_or_else(|_| "[]".into());
        let effective_text = join_grants(effective);
        let (content_bytes, acl_bytes) = (content.to_bytes(), acl.to_bytes());
        let arrived_from = self
            .arrival
            .as_ref()
            .and_then(|a| a.names(&m.fixed.origin))
            .map(|from| from.0);
        let tx = &self.tx;
        tx.prepare_cached(
            "INSERT INTO memories(id, owner, origin, created_ms, kind, content, tags,
                importance, confidence, pinned, expires_ms, supersedes, v, content_fact,
                grants, effective, acl_v, acl_fact, seq, touched, owner_trusted, grants_ever,
                valid_from_ms, valid_to_ms, arrived_from)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14,
                ?15, ?16, ?17, ?18, ?19, ?19, ?20, ?16, ?21, ?22, ?23)",
        )?
        .execute(params![
            &m.id.0[..],
            m.fixed.owner.as_str(),
            &m.fixed.origin.0[..],
            m.fixed.created_ms as i64,
            m.kind.as_str(),
            text,
            tags,
            m.importance as f64,
            m.confidence as f64,
            m.pinned,
            m.expires_ms.map(|e| e as i64),
            m.supersedes.map(|s| s.0.to_vec()),
            &content.fact.clock.sort_key()[..],
            &content_bytes,
            join_grants(&a.grants),
            &effective_text,
            &acl.fact.clock.sort_key()[..],
            &acl_bytes,
            seq,
            owner_trusted,
            m.validity.from_ms.map(|t| t as i64),
            m.validity.to_ms.map(|t| t as i64),
            arrived_from.as_ref().map(|b| &b[..]),
        ])?;
        self.digests.new_memory(
            &self.tx,
            &m.id.0,
            &effective_text,
            [&content_bytes, &acl_bytes],
        )?;
        self.figures.new_live(
            &m.id.0,
            (
                effective_text,
                m.fixed.owner.as_str().to_owned(),
                owner_trusted,
            ),
            m.kind.as_str(),
            m.fixed.created_ms,
            m.expires_ms.is_some(),
        );
        self.insert_memory_grants(&m.id, effective)
    }

    /// Set local-only memory state (archived flag); moves `touched` so the
    /// index notices, never `seq`, `v` or `acl_v`.
    pub fn set_archived(&mut self, id: &amos_protocol::MemoryId, archived: bool) -> Result<bool> {
        self.figures.touch(&self.tx, &id.0)?;
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
    /// Replace the whole database with the one in `file` (SQLite's backup
    /// API, the source opened read-only through `connect`), migrate it and
    /// give it the new log epoch `epoch`, so that every peer's watermark
    /// for it is known stale: one step, never a restored store with its old
    /// epoch.
    pub fn restore_from(&mut self, file: &Path, epoch: [u8; 16]) -> Result<()> {
        let cannot = |e: rusqlite::Error| {
            NodeError::BadInput(format!("cannot restore {}: {e}", file.display()))
        };
        {
            let src = connect(file, Connect::READ_ONLY).map_err(cannot)?;
            let copy = rusqlite::backup::Backup::new(&src, &mut self.conn).map_err(cannot)?;
            copy.run_to_completion(100, Duration::from_millis(250), None)
                .map_err(cannot)?;
        }
        schema::migrate(&mut self.conn)?;
        self.write(|tx| {
            tx.tx.execute(
                "UPDATE meta SET value = ?1 WHERE key = 'epoch'",
                params![data_encoding::HEXLOWER.encode(&epoch)],
            )?;
            // The backup's org and tokens replaced ours without a trigger.
            tx.tx
                .execute("UPDATE gate_stamp SET stamp = random() WHERE id = 1", [])?;
            Ok(())
        })
    }

    /// Copy the whole database into `file` (SQLite's online backup API:
    /// consistent while others write), the file opened through `connect`.
    pub fn backup_to(&self, file: &Path) -> Result<()> {
        let cannot = |e: rusqlite::Error| {
            NodeError::BadInput(format!("cannot write backup {}: {e}", file.display()))
        };
        let mut dst = connect(file, Connect::CREATE).map_err(cannot)?;
        let copy = rusqlite::backup::Backup::new(&self.conn, &mut dst).map_err(cannot)?;
        copy.run_to_completion(100, Duration::from_millis(250), None)
            .map_err(cannot)
    }
}

#[cfg(test)]
mod tests {
    use amos_protocol::{
        AgentId, Fact, MemoryAcl, MemoryContent, MemoryFixed, MemoryId, MemoryText, MemoryType,
        NodeIdentity, Scope, TeamId,
    };

    use super::*;

    /// Every column of every memory row, and the grants table, as text.
    fn dump(store: &Store) -> Vec<String> {
        let mut out = Vec::new();
        let mut stmt = store
            .conn()
            .prepare("SELECT * FROM memories ORDER BY id")
            .unwrap();
        let n = stmt.column_count();
        let mut rows = stmt.query([]).unwrap();
        while let Some(r) = rows.next().unwrap() {
            for i in 0..n {
                let v: rusqlite::types::Value = r.get(i).unwrap();
                out.push(format!("{i}={v:?}"));
            }
        }
        let mut stmt = store
            .conn()
            .prepare("SELECT memory, scope FROM memory_grants ORDER BY memory, scope")
            .unwrap();
        let mut rows = stmt.query([]).unwrap();
        while let Some(r) = rows.next().unwrap() {
            let m: Vec<u8> = r.get(0).unwrap();
            let s: String = r.get(1).unwrap();
            out.push(format!("grant {m:?} {s}"));
        }
        out.push(format!("seq {}", store.max_seq().unwrap()));
        out
    }

    #[test]
    fn put_new_memory_leaves_the_row_two_put_facts_leave() {
        let dir = tempfile::tempdir().unwrap();
        let identity = NodeIdentity::from_secret([7; 32]);
        let me = identity.node_id();
        let fixed = MemoryFixed {
            owner: AgentId::parse("alice").unwrap(),
            created_ms: 1_000,
            origin: me,
        };
        let id = MemoryId::new(1_000, [3; 10]);
        let grants =
            Grants::from_scopes([Scope::Team(TeamId::parse("apollo").unwrap()), Scope::Global]);
        // A restriction in force here narrower than the signed grants.
        let effective = Grants::from_scopes([Scope::Global]);
        let mut hlc = HlcState::default();
        let content = identity
            .sign(Fact {
                clock: hlc.tick(1_000, me),
                body: FactBody::MemoryContent(MemoryContent {
                    id,
                    fixed: fixed.clone(),
                    kind: MemoryType::default(),
                    text: MemoryText::Plain("nebula plan".into()),
                    tags: vec!["x".into()],
                    importance: 0.7,
                    confidence: 1.0,
                    pinned: false,
                    expires_ms: None,
                    supersedes: None,
                    validity: Default::default(),
                }),
            })
            .unwrap();
        let acl = identity
            .sign(Fact {
                clock: hlc.tick(1_000, me),
                body: FactBody::MemoryAcl(MemoryAcl { id, fixed, grants }),
            })
            .unwrap();
        // Admissions as the node makes them: a local write (owner rule
        // holds, signed grants in force), and the gate's for a memory from a
        // scoped peer (`global` only: narrower than the signed grants).
        let admit = |owner_trusted: bool, fact: &Verified<SignedFact>| -> Admission {
            if owner_trusted {
                return Admission::local(&identity, fact.clone()).unwrap();
            }
            let other = NodeIdentity::from_secret([8; 32]).node_id();
            let mut replica = amos_sync::MemStore::new(other);
            let policy: amos_acl::PeerPolicy = "global".parse().unwrap();
            replica.set_peer_policy(me, policy.clone());
            let sender = amos_sync::Sender { node: me, policy };
            match amos_sync::gate::check(&mut replica, &sender, fact.clone()).unwrap() {
                amos_sync::gate::Gate::Admit(a) => a,
                other => panic!("not admitted: {other:?}"),
            }
        };
        for owner_trusted in [true, false] {
            let acl_admission = admit(owner_trusted, &acl);
            let content_admission = admit(owner_trusted, &content);
            if !owner_trusted {
                assert_eq!(acl_admission.effect().effective(), Some(&effective));
            }
            let mut one =
                Store::create(&dir.path().join(format!("a{owner_trusted}")), [1; 16]).unwrap();
            one.write(|tx| {
                tx.put(&acl_admission)?;
                tx.put(&content_admission)
            })
            .unwrap();
            let mut two =
                Store::create(&dir.path().join(format!("b{owner_trusted}")), [1; 16]).unwrap();
            two.write(|tx| tx.put_new_memory(&content_admission, &acl_admission))
                .unwrap();
            assert_eq!(dump(&one), dump(&two));
            // A local write puts content first, then acl: the same row.
            let mut three =
                Store::create(&dir.path().join(format!("c{owner_trusted}")), [1; 16]).unwrap();
            three
                .write(|tx| {
                    tx.put(&content_admission)?;
                    tx.put(&acl_admission)
                })
                .unwrap();
            assert_eq!(dump(&three), dump(&two));
            // Applied from a peer: either way the row names the peer it
            // arrived from (as it is inserted, or by `note_arrivals`), unless
            // it is a memory of the node applying it.
            let peer = NodeIdentity::from_secret([9; 32]).node_id();
            for here in [me, NodeIdentity::from_secret([10; 32]).node_id()] {
                let arrived = |name: &str, put: &dyn Fn(&mut Tx<'_>) -> Result<()>| {
                    let file = format!("{name}{owner_trusted}{}", here == me);
                    let mut store = Store::create(&dir.path().join(file), [1; 16]).unwrap();
                    store
                        .write(|tx| {
                            provenance::arriving_from(tx, &peer, &here);
                            let before = max_seq(&*tx)?;
                            put(tx)?;
                            provenance::note_arrivals(tx, before + 1, tx.last_seq().unwrap())
                        })
                        .unwrap();
                    store
                };
                let one = arrived("d", &|tx| {
                    tx.put(&acl_admission)?;
                    tx.put(&content_admission)
                });
                let two = arrived("e", &|tx| {
                    tx.put_new_memory(&content_admission, &acl_admission)
                });
                assert_eq!(dump(&one), dump(&two));
                let held = provenance::signed_registers(two.conn(), &id)
                    .unwrap()
                    .unwrap();
                assert_eq!(held.arrived_from, (here != me).then_some(peer));
            }
        }
    }
}
