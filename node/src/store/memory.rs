//! Reading memory rows back, and the read gate's only way out of the store.
//!
//! Owns [`MemoryRecord`] (the one shape the gate, ranking and output work on)
//! and the `impl Store` read entry points [`Store::visible`],
//! [`Store::visible_newest`], [`Store::visible_pinned`],
//! [`Store::visible_by_valid_start`] and [`Store::visible_superseded_before`],
//! which hand out memories only as [`Visible`] values admitted by the
//! requester's [`AuthorizedScopes`]. The ordered ones walk an index in the
//! order they answer in (`memories_created_id`, `memories_valid_from`)
//! and stop after a page.
//!
//! Invariant: the row readers here are private to the crate; whatever
//! prints, ranks or serialises a memory gets it as a `Visible<MemoryRecord>`.
//! A `MemoryRecord` is built only by this module's row decoder and its fields
//! are crate-private, so outside amos-node nobody can make one, change one
//! and re-admit it: a `Visible<MemoryRecord>` there is always a stored row
//! the gate let through. Never returns a row to a caller without the gate.

use amos_acl::{AuthorizedScopes, Gated, Visible};
use amos_protocol::{AgentId, Grants, Hlc, MemoryId, MemoryType, NodeId, Scope, Validity};
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::{Store, split_grants};
use crate::error::Result;

/// A memory as this node holds it now. Read it through its accessors; only
/// the store decodes one (the fields are private to amos-node).
///
/// Outside amos-node a record can be neither built nor altered (so never
/// re-admitted with forged grants or content):
///
/// ```compile_fail,E0451
/// use amos_node::store::memory::MemoryRecord;
/// fn forge(real: MemoryRecord) -> MemoryRecord {
///     MemoryRecord { content: "forged".into(), ..real }
/// }
/// ```
///
/// ```compile_fail,E0616
/// use amos_acl::{AuthorizedScopes, Visible};
/// use amos_node::store::memory::MemoryRecord;
/// fn widen(v: Visible<MemoryRecord>, bob: &AuthorizedScopes) -> Option<Visible<MemoryRecord>> {
///     let mut m = v.into_inner();
///     m.effective = m.grants().clone();
///     bob.admit(m, 0)
/// }
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryRecord {
    pub(crate) id: MemoryId,
    pub(crate) owner: AgentId,
    pub(crate) origin: NodeId,
    pub(crate) created_ms: u64,
    /// Wall time of the content register's clock (the last edit).
    pub(crate) updated_ms: u64,
    pub(crate) kind: MemoryType,
    pub(crate) content: String,
    pub(crate) tags: Vec<String>,
    pub(crate) importance: f32,
    pub(crate) confidence: f32,
    pub(crate) pinned: bool,
    pub(crate) expires_ms: Option<u64>,
    pub(crate) supersedes: Option<MemoryId>,
    /// When the content was true in the world, as signed.
    pub(crate) validity: Validity,
    /// The grants as signed by the memory's author.
    pub(crate) grants: Grants,
    /// The grants in force on this node (what the gate uses).
    pub(crate) effective: Grants,
    /// The effective grants as shown here: a team or project by its display
    /// name, qualified only where another here has the same name
    /// (`org::grant_labels`, filled in when the gate admits the row).
    pub(crate) visibility: Vec<String>,
    pub(crate) tombstoned: bool,
    /// Local-only: out of recall until restored.
    pub(crate) archived: bool,
    /// Local-only reinforcement factor from recall feedback.
    pub(crate) reinforcement: f32,
    /// Whether the owner rule holds here (the memory's origin is this node or
    /// a `full` peer); false for memories from scoped peers.
    pub(crate) owner_trusted: bool,
    pub(crate) seq: i64,
    /// Local-only: when recall last noted it (`None`: never).
    pub(crate) last_access_ms: Option<u64>,
}

impl MemoryRecord {
    /// The memory's id.
    pub fn id(&self) -> MemoryId {
        self.id
    }
    /// The agent that owns it.
    pub fn owner(&self) -> &AgentId {
        &self.owner
    }
    /// The node that created it (the only one that may speak for it).
    pub fn origin(&self) -> NodeId {
        self.origin
    }
    /// When it was created (Unix ms).
    pub fn created_ms(&self) -> u64 {
        self.created_ms
    }
    /// Wall time of the content register's clock (the last edit).
    pub fn updated_ms(&self) -> u64 {
        self.updated_ms
    }
    /// Its type (`fact`, `decision`, …).
    pub fn kind(&self) -> &MemoryType {
        &self.kind
    }
    /// Its text.
    pub fn content(&self) -> &str {
        &self.content
    }
    /// Its tags.
    pub fn tags(&self) -> &[String] {
        &self.tags
    }
    /// Signed importance, a factor of its score.
    pub fn importance(&self) -> f32 {
        self.importance
    }
    /// Signed confidence, a factor of its score.
    pub fn confidence(&self) -> f32 {
        self.confidence
    }
    /// Pinned: no freshness decay, first into a pack.
    pub fn pinned(&self) -> bool {
        self.pinned
    }
    /// When it stops being visible (Unix ms; `None`: never).
    pub fn expires_ms(&self) -> Option<u64> {
        self.expires_ms
    }
    /// The memory it replaces, if any (`amos supersede`).
    pub fn supersedes(&self) -> Option<MemoryId> {
        self.supersedes
    }
    /// When the content was true in the world, as signed (not yet cut short
    /// by a superseder: see `recall::time`).
    pub fn validity(&self) -> Validity {
        self.validity
    }
    /// Start of valid time: the signed `valid_from`, else the creation.
    pub fn valid_from_ms(&self) -> u64 {
        self.validity.from_ms.unwrap_or(self.created_ms)
    }
    /// The grants as signed by the memory's author.
    pub fn grants(&self) -> &Grants {
        &self.grants
    }
    /// The grants in force on this node (what the gate uses).
    pub fn effective(&self) -> &Grants {
        &self.effective
    }
    /// The effective grants as shown here (`team:zeus`, or
    /// `team:zeus@3f2a…` where two teams here are named zeus).
    pub fn visibility(&self) -> &[String] {
        &self.visibility
    }
    /// Forgotten: a tombstone is terminal.
    pub fn tombstoned(&self) -> bool {
        self.tombstoned
    }
    /// Local-only: out of recall until restored.
    pub fn archived(&self) -> bool {
        self.archived
    }
    /// Local-only reinforcement factor from recall feedback.
    pub fn reinforcement(&self) -> f32 {
        self.reinforcement
    }
    /// Whether the owner rule holds here.
    pub fn owner_trusted(&self) -> bool {
        self.owner_trusted
    }
    /// The row's local `seq` (moves whenever the row does).
    pub fn seq(&self) -> i64 {
        self.seq
    }
    /// Local-only: when recall last noted it (`None`: never).
    pub fn last_access_ms(&self) -> Option<u64> {
        self.last_access_ms
    }
}

impl Gated for MemoryRecord {
    fn owner(&self) -> &AgentId {
        &self.owner
    }
    fn effective_grants(&self) -> &Grants {
        &self.effective
    }
    fn is_tombstoned(&self) -> bool {
        self.tombstoned
    }
    fn expires_ms(&self) -> Option<u64> {
        self.expires_ms
    }
    fn owner_is_authoritative(&self) -> bool {
        self.owner_trusted
    }
}

/// The columns [`from_row`] reads, in order.
const COLUMNS: &str = "id, owner, origin, created_ms, v, kind, content, tags, importance, \
     confidence, pinned, expires_ms, supersedes, grants, effective, tombstone_fact IS NOT NULL, \
     archived, reinforcement, seq, owner_trusted, valid_from_ms, valid_to_ms, last_access_ms";

/// Where a memory's valid time starts: its signed `valid_from`, else its
/// creation (`MemoryRecord::valid_from_ms`).
const VALID_START: &str = "COALESCE(valid_from_ms, created_ms)";

/// [`Store::visible_by_valid_start`]'s statement and its parameters: two
/// ordered walks merged — the memories without a signed `valid_from` by
/// `memories_created_id`, the ones with it by `memories_valid_from` (a
/// partial index: a write of a memory without one pays no index for it) —
/// each from just after `after`, stopping at `limit`.
fn valid_start_sql(
    who: &AuthorizedScopes,
    after: Option<(u64, MemoryId)>,
    limit: usize,
    now_ms: u64,
) -> (String, Vec<Value>) {
    let (after_ms, after_id) = after.map_or((-1, Vec::new()), |(t, id)| (t as i64, id.0.to_vec()));
    let mut args: Vec<Value> = vec![
        (now_ms as i64).into(),
        after_ms.into(),
        after_id.into(),
        (limit as i64).into(),
    ];
    let access = access_clause(who, &mut args);
    let arm = |start: &str, which: &str| {
        format!(
            "SELECT {COLUMNS}, {start} AS valid_start FROM memories m
             WHERE {which} AND {LIVE} AND archived = 0 AND (expires_ms IS NULL OR expires_ms > ?1)
               AND {start} >= ?2 AND ({start} > ?2 OR id > ?3) AND {access}"
        )
    };
    let sql = format!(
        "{} UNION ALL {} ORDER BY valid_start, id LIMIT ?4",
        arm("created_ms", "valid_from_ms IS NULL"),
        arm("valid_from_ms", "valid_from_ms IS NOT NULL"),
    );
    (sql, args)
}

/// One page of [`Store::visible_by_valid_start`].
#[derive(Debug)]
pub struct ValidStartPage {
    /// The rows read that the gate let through, in order.
    pub memories: Vec<Visible<MemoryRecord>>,
    /// The start and id of the last row read (`None`: none was): where the
    /// next page starts after.
    pub last: Option<(u64, MemoryId)>,
    /// Whether no row is left after this page.
    pub exhausted: bool,
}

/// Rows that can be shown at all: content present (a memory whose acl fact
/// arrived before its content is not yet a memory), not tombstoned.
pub(crate) const LIVE: &str = "content_fact IS NOT NULL AND tombstone_fact IS NULL";

/// Decode one row selected with [`COLUMNS`]. Rows with unparsable fields (which
/// only a damaged store can hold) come back as `None`: invisible, fail closed.
fn from_row(r: &Row<'_>) -> rusqlite::Result<Option<MemoryRecord>> {
    // Borrowed where a field is parsed rather than kept: no copy of the
    // id, origin, clock, type or tags on their way to their types.
    let blob = |i: usize| -> rusqlite::Result<Option<&[u8]>> {
        r.get_ref(i)?.as_blob_or_null().map_err(Into::into)
    };
    let text = |i: usize| -> rusqlite::Result<Option<&str>> {
        r.get_ref(i)?.as_str_or_null().map_err(Into::into)
    };
    let (Some(id), Ok(owner), Some(origin)) = (
        blob(0)?.and_then(MemoryId::from_slice),
        AgentId::parse(text(1)?.unwrap_or_default()),
        blob(2)?.and_then(|o| <[u8; 32]>::try_from(o).ok()),
    ) else {
        return Ok(None);
    };
    let kind = text(5)?
        .and_then(|k| MemoryType::parse(k).ok())
        .unwrap_or_default();
    let effective = split_grants(text(14)?.unwrap_or_default());
    Ok(Some(MemoryRecord {
        visibility: effective.to_strings(),
        effective,
        id,
        owner,
        origin: NodeId(origin),
        created_ms: r.get::<_, i64>(3)? as u64,
        updated_ms: blob(4)?
            .and_then(Hlc::from_sort_key)
            .map(|h| h.wall_ms)
            .unwrap_or(0),
        kind,
        content: r.get::<_, Option<String>>(6)?.unwrap_or_default(),
        tags: text(7)?
            .and_then(|t| serde_json::from_str(t).ok())
            .unwrap_or_default(),
        importance: r.get::<_, Option<f64>>(8)?.unwrap_or(0.5) as f32,
        confidence: r.get::<_, Option<f64>>(9)?.unwrap_or(1.0) as f32,
        pinned: r.get::<_, Option<bool>>(10)?.unwrap_or(false),
        expires_ms: r.get::<_, Option<i64>>(11)?.map(|e| e as u64),
        supersedes: blob(12)?.and_then(MemoryId::from_slice),
        validity: Validity {
            from_ms: r.get::<_, Option<i64>>(20)?.map(|t| t as u64),
            to_ms: r.get::<_, Option<i64>>(21)?.map(|t| t as u64),
        },
        grants: split_grants(text(13)?.unwrap_or_default()),
        tombstoned: r.get(15)?,
        archived: r.get(16)?,
        reinforcement: r.get::<_, f64>(17)? as f32,
        seq: r.get(18)?,
        owner_trusted: r.get(19)?,
        last_access_ms: r.get::<_, Option<i64>>(22)?.map(|t| t.max(0) as u64),
    }))
}

/// Live memories by id, in the order given; missing ids are skipped.
fn read_many(conn: &Connection, ids: &[MemoryId]) -> Result<Vec<MemoryRecord>> {
    let sql = format!("SELECT {COLUMNS} FROM memories WHERE id = ?1 AND {LIVE}");
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(Some(m)) = stmt.query_row([&id.0[..]], from_row).optional()? {
            out.push(m);
        }
    }
    Ok(out)
}

/// [`list_candidates`]' statement and its parameters: `memories_created_id`
/// walked from the newest, stopping at `limit`.
fn list_sql(
    owner: Option<&str>,
    scopes: &[String],
    kind: Option<&str>,
    limit: usize,
) -> (String, Vec<Value>) {
    let mut sql = format!("SELECT {COLUMNS} FROM memories m WHERE {LIVE} AND archived = 0");
    let mut args: Vec<rusqlite::types::Value> = Vec::new();
    if let Some(owner) = owner {
        let placeholders = (0..scopes.len())
            .map(|i| format!("?{}", i + 2))
            .collect::<Vec<_>>()
            .join(",");
        args.push(owner.to_owned().into());
        sql.push_str(&format!(
            " AND ((owner = ?1 AND owner_trusted = 1) OR EXISTS (SELECT 1 FROM memory_grants g WHERE g.memory = m.id AND g.scope IN ({})))",
            if placeholders.is_empty() { "NULL".to_owned() } else { placeholders }
        ));
        args.extend(scopes.iter().map(|s| s.clone().into()));
    }
    if let Some(kind) = kind {
        args.push(kind.to_owned().into());
        sql.push_str(&format!(" AND kind = ?{}", args.len()));
    }
    args.push((limit as i64).into());
    sql.push_str(&format!(
        " ORDER BY created_ms DESC, id DESC LIMIT ?{}",
        args.len()
    ));
    (sql, args)
}

/// Live, unarchived memories the given scopes (or owner) may see, newest
/// first, as candidates for the gate (which still checks each one).
fn list_candidates(
    conn: &Connection,
    owner: Option<&str>,
    scopes: &[String],
    kind: Option<&str>,
    limit: usize,
) -> Result<Vec<MemoryRecord>> {
    let (sql, args) = list_sql(owner, scopes, kind, limit);
    let mut stmt = conn.prepare(&sql)?;
    let rows = stmt.query_map(rusqlite::params_from_iter(args), from_row)?;
    let mut out = Vec::new();
    for r in rows {
        if let Some(m) = r? {
            out.push(m);
        }
    }
    Ok(out)
}

/// Days of the daily recall counter kept; older rows are dropped as new
/// ones come.
pub(crate) const RECALL_DAYS_KEPT: i64 = 60;

/// Record that memories were recalled (local-only state): their count and
/// when, and one more recall each on the UTC day of `now_ms` in
/// `recall_days` (the dashboard's recalls per day; days older than
/// [`RECALL_DAYS_KEPT`] dropped). Never a fact, never `seq`, never in a
/// digest.
pub(crate) fn note_recalled(tx: &mut super::Tx<'_>, ids: &[MemoryId], now_ms: u64) -> Result<()> {
    let day = (now_ms / 86_400_000) as i64;
    for id in ids {
        // The standing the kept figures count its recall by, if counted.
        let counted: Option<(String, String, bool, bool)> = super::sql(&*tx)
            .prepare_cached(
                "UPDATE memories SET recall_count = recall_count + 1, last_access_ms = ?2
                 WHERE id = ?1
                 RETURNING effective, owner, owner_trusted, content_fact IS NOT NULL
                    AND tombstone_fact IS NULL AND expires_ms IS NULL",
            )?
            .query_row(params![&id.0[..], now_ms as i64], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .optional()?;
        let Some((effective, owner, trusted, kept)) = counted else {
            continue;
        };
        super::sql(&*tx)
            .prepare_cached(
                "INSERT INTO recall_days(day, memory, recalls) VALUES (?1, ?2, 1)
                 ON CONFLICT(day, memory) DO UPDATE SET recalls = recalls + 1",
            )?
            .execute(params![day, &id.0[..]])?;
        tx.figures
            .recalled(&id.0, day, kept.then_some((effective, owner, trusted)));
    }
    super::sql(&*tx)
        .prepare_cached("DELETE FROM recall_days WHERE day < ?1")?
        .execute([day - RECALL_DAYS_KEPT])?;
    tx.figures.pruned_below(day - RECALL_DAYS_KEPT);
    Ok(())
}

// ---------------------------------------------------------------- the gate

/// The gate on one row just read: `m` if `who` may see it at `now_ms`.
/// The id of another memory is output too (§5, invariant 2): the one `m`
/// supersedes stays only if `who` may see that memory as well, else it
/// reads as `None`, as if `m` replaced nothing.
fn admit(
    conn: &Connection,
    who: &AuthorizedScopes,
    mut m: MemoryRecord,
    now_ms: u64,
) -> Result<Option<Visible<MemoryRecord>>> {
    if !who.may_see(&m, now_ms) {
        return Ok(None);
    }
    if let Some(old) = m.supersedes
        && !read_many(conn, &[old])?
            .first()
            .is_some_and(|o| who.may_see(o, now_ms))
    {
        m.supersedes = None;
    }
    if m.effective
        .iter()
        .any(|g| matches!(g, Scope::Team(_) | Scope::Project(_)))
    {
        m.visibility = super::org::grant_labels(conn, &m.effective);
    }
    Ok(who.admit(m, now_ms))
}

/// Live memories by id, in the order given, each passed through the gate
/// for `who` at `now_ms`; missing and invisible ids are skipped alike.
/// Archived memories are included (recall leaves them out itself).
pub(crate) fn visible(
    r: &(impl super::Readable + ?Sized),
    who: &AuthorizedScopes,
    ids: &[MemoryId],
    now_ms: u64,
) -> Result<Vec<Visible<MemoryRecord>>> {
    let conn = super::sql(r);
    // Outside a transaction, one read snapshot (one lock and one look at
    // the WAL) for all the rows and the memories they supersede.
    let snapshot = if conn.is_autocommit() && !ids.is_empty() {
        Some(conn.unchecked_transaction()?)
    } else {
        None
    };
    let mut out = Vec::with_capacity(ids.len());
    for m in read_many(conn, ids)? {
        out.extend(admit(conn, who, m, now_ms)?);
    }
    if let Some(tx) = snapshot {
        tx.commit()?;
    }
    Ok(out)
}

/// An SQL condition on `m` (a `memories` row) that pre-filters to rows the
/// requester may see by ownership or grant ("1" for the local admin); its
/// parameters are appended to `args`. Only a pre-filter: rows it lets through
/// still go through the gate.
pub(crate) fn access_clause(who: &AuthorizedScopes, args: &mut Vec<Value>) -> String {
    let Some(agent) = who.requester() else {
        return "1".to_owned();
    };
    args.push(agent.as_str().to_owned().into());
    let owner = args.len();
    let scopes: Vec<String> = who.scopes().map(ToString::to_string).collect();
    let placeholders = (0..scopes.len())
        .map(|i| format!("?{}", owner + 1 + i))
        .collect::<Vec<_>>()
        .join(",");
    args.extend(scopes.into_iter().map(Value::from));
    format!(
        "((m.owner = ?{owner} AND m.owner_trusted = 1) OR EXISTS (SELECT 1 FROM memory_grants g \
         WHERE g.memory = m.id AND g.scope IN ({})))",
        if placeholders.is_empty() {
            "NULL".to_owned()
        } else {
            placeholders
        }
    )
}

/// The live memories `who` may see at `now_ms` that replace one of `ids`
/// (`supersedes` names it), each with the id it replaces. Archived ones
/// count: archiving is local, and what replaced what must read the same on
/// every node.
pub(crate) fn visible_superseders(
    conn: &(impl super::Readable + ?Sized),
    who: &AuthorizedScopes,
    ids: &[MemoryId],
    now_ms: u64,
) -> Result<Vec<(MemoryId, Visible<MemoryRecord>)>> {
    let conn = super::sql(conn);
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT id FROM memories WHERE supersedes = ?1 AND {LIVE}"
    ))?;
    let mut found = Vec::new();
    for id in ids {
        let rows = stmt.query_map([&id.0[..]], |r| r.get::<_, Vec<u8>>(0))?;
        for r in rows {
            if let Some(s) = MemoryId::from_slice(&r?) {
                found.push(s);
            }
        }
    }
    Ok(visible(conn, who, &found, now_ms)?
        .into_iter()
        .filter_map(|s| s.supersedes.map(|old| (old, s)))
        .collect())
}

impl Store {
    /// The read gate's way out of the store: the live memories among `ids`
    /// that `who` may see at `now_ms`, in the order given (missing and
    /// invisible are the same: skipped). Archived memories are included.
    pub fn visible(
        &self,
        who: &AuthorizedScopes,
        ids: &[MemoryId],
        now_ms: u64,
    ) -> Result<Vec<Visible<MemoryRecord>>> {
        visible(self.conn(), who, ids, now_ms)
    }

    /// Up to `limit` live, unarchived memories `who` may see at `now_ms`,
    /// newest first, optionally of one type.
    pub fn visible_newest(
        &self,
        who: &AuthorizedScopes,
        kind: Option<&MemoryType>,
        limit: usize,
        now_ms: u64,
    ) -> Result<Vec<Visible<MemoryRecord>>> {
        let scopes: Vec<String> = who.scopes().map(ToString::to_string).collect();
        // Over-fetch a little: expired rows are dropped by the gate.
        let mut fetch = limit.max(1);
        loop {
            let rows = list_candidates(
                self.conn(),
                who.requester().map(AgentId::as_str),
                &scopes,
                kind.map(MemoryType::as_str),
                fetch,
            )?;
            let exhausted = rows.len() < fetch;
            let mut visible = Vec::with_capacity(rows.len());
            for m in rows {
                visible.extend(admit(self.conn(), who, m, now_ms)?);
            }
            if visible.len() >= limit || exhausted {
                return Ok(visible.into_iter().take(limit).collect());
            }
            fetch *= 2;
        }
    }

    /// Up to `limit` rows of the live, unarchived memories `who` may see at
    /// `now_ms`, in the order their valid time starts (the signed
    /// `valid_from`, else the creation; ties by id), after the row `after`
    /// (its start and id; `None`: from the first): two index walks merged
    /// in order (`valid_start_sql`), the gate's pre-filter on each row,
    /// stopping at `limit`. Each row read then passes the gate itself. With the key of
    /// the last row read (`None`: none was) and whether the walk reached
    /// the end.
    pub fn visible_by_valid_start(
        &self,
        who: &AuthorizedScopes,
        after: Option<(u64, MemoryId)>,
        limit: usize,
        now_ms: u64,
    ) -> Result<ValidStartPage> {
        let (sql, args) = valid_start_sql(who, after, limit, now_ms);
        let conn = self.conn();
        let snapshot = conn.unchecked_transaction()?;
        let mut page = ValidStartPage {
            memories: Vec::new(),
            last: None,
            exhausted: false,
        };
        let mut read = 0;
        {
            let mut stmt = conn.prepare_cached(&sql)?;
            let mut rows = stmt.query(rusqlite::params_from_iter(args))?;
            while let Some(row) = rows.next()? {
                read += 1;
                let start: i64 = row.get("valid_start")?;
                if let Some(id) = MemoryId::from_slice(&row.get::<_, Vec<u8>>("id")?) {
                    page.last = Some((start.max(0) as u64, id));
                }
                if let Some(m) = from_row(row)? {
                    page.memories.extend(admit(conn, who, m, now_ms)?);
                }
            }
        }
        snapshot.commit()?;
        page.exhausted = read < limit;
        Ok(page)
    }

    /// The live, unarchived memories `who` may see at `now_ms` that a live
    /// memory it may also see (archived or not) replaces, where that
    /// replacement's valid time starts before `before_ms` (any start:
    /// `None`), each through the gate.
    pub fn visible_superseded_before(
        &self,
        who: &AuthorizedScopes,
        before_ms: Option<u64>,
        now_ms: u64,
    ) -> Result<Vec<Visible<MemoryRecord>>> {
        let mut args: Vec<Value> = vec![
            (now_ms as i64).into(),
            before_ms
                .map_or(i64::MAX, |t| t.min(i64::MAX as u64) as i64)
                .into(),
        ];
        let access = access_clause(who, &mut args);
        let sql = format!(
            "SELECT DISTINCT m.supersedes FROM memories m
             WHERE m.supersedes IS NOT NULL AND {LIVE} AND (expires_ms IS NULL OR expires_ms > ?1)
               AND {VALID_START} < ?2 AND {access}"
        );
        let mut ids = Vec::new();
        {
            let mut stmt = self.conn().prepare_cached(&sql)?;
            let rows =
                stmt.query_map(rusqlite::params_from_iter(args), |r| r.get::<_, Vec<u8>>(0))?;
            for r in rows {
                if let Some(id) = MemoryId::from_slice(&r?) {
                    ids.push(id);
                }
            }
        }
        Ok(visible(self.conn(), who, &ids, now_ms)?
            .into_iter()
            .filter(|m| !m.archived)
            .collect())
    }

    /// Up to `limit` live, unarchived, unexpired pinned memories `who` may
    /// see at `now_ms`, most important first, leaving out `except`.
    pub fn visible_pinned(
        &self,
        who: &AuthorizedScopes,
        except: &[MemoryId],
        limit: usize,
        now_ms: u64,
    ) -> Result<Vec<Visible<MemoryRecord>>> {
        let mut args: Vec<Value> = vec![(now_ms as i64).into()];
        let access = access_clause(who, &mut args);
        let sql = format!(
            "SELECT {COLUMNS} FROM memories m WHERE {LIVE} AND archived = 0 AND pinned = 1
             AND (expires_ms IS NULL OR expires_ms > ?1) AND {access}
             ORDER BY importance DESC, created_ms DESC, id DESC LIMIT {}",
            limit + except.len()
        );
        let mut stmt = self.conn().prepare_cached(&sql)?;
        let rows = stmt.query_map(rusqlite::params_from_iter(args), from_row)?;
        let mut out = Vec::new();
        for r in rows {
            let Some(m) = r? else { continue };
            if except.contains(&m.id) {
                continue;
            }
            // The gate, on the row just read.
            if let Some(v) = admit(self.conn(), who, m, now_ms)? {
                out.push(v);
                if out.len() == limit {
                    break;
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod plan_tests {
    use amos_protocol::MemoryId;
    use rusqlite::types::Value;

    use crate::api::NewMemory;
    use crate::api::node::test_node;

    /// SQLite's plan of `sql` with `args` on the node's store, one line per
    /// step.
    fn plan(node: &crate::Node, sql: &str, args: Vec<Value>) -> String {
        let conn = node.store.conn();
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let rows = stmt
            .query_map(rusqlite::params_from_iter(args), |r| r.get::<_, String>(3))
            .unwrap();
        rows.map(Result::unwrap).collect::<Vec<_>>().join("\n")
    }

    /// The newest-first list and the timeline's walk read their index in
    /// the order they answer in and sort nothing, so a page stops after
    /// its rows instead of reading every visible row (as the list did
    /// with wide rows selected: a scan of every row and a sort).
    #[test]
    fn the_ordered_pages_walk_their_index_and_sort_nothing() {
        let (_dir, _home, mut node, who) = test_node("alice");
        node.team_create("apollo", None).unwrap();
        node.team_member("apollo", "alice", true).unwrap();
        let who_now = node.requester("alice").unwrap();
        for i in 0..40 {
            let mut m = NewMemory::new(format!("memory {i} {}", "words ".repeat(50)));
            if i % 2 == 0 {
                m.share = vec!["team:apollo".parse().unwrap()];
            }
            node.add(&who, m).unwrap();
        }
        let scopes: Vec<String> = who_now.scopes().map(ToString::to_string).collect();
        for kind in [None, Some("note")] {
            let (sql, args) = super::list_sql(Some("alice"), &scopes, kind, 20);
            let p = plan(&node, &sql, args);
            assert!(p.contains("memories_created_id"), "{kind:?}: {p}");
            assert!(!p.contains("TEMP B-TREE"), "{kind:?}: {p}");
        }
        let after = Some((node.now_ms(), MemoryId([0; 16])));
        for after in [None, after] {
            let (sql, args) = super::valid_start_sql(&who_now, after, 64, node.now_ms());
            let p = plan(&node, &sql, args);
            assert!(
                p.contains("SEARCH m USING INDEX memories_created_id"),
                "{p}"
            );
            assert!(
                p.contains("SEARCH m USING INDEX memories_valid_from"),
                "{p}"
            );
            assert!(p.contains("MERGE"), "{p}");
            assert!(!p.contains("TEMP B-TREE"), "{p}");
        }
    }
}
