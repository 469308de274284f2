//! Replication on the SQLite store: the [`ReplicaStore`] that `amos-sync`
//! applies batches through, export of the facts a peer may receive, the
//! convergence digest, peers, the audit log and deferred (quarantined) facts.
//!
//! Boundary: the merge rule, the import gate and the export rules are
//! `amos-sync`'s and `amos-acl`'s; this module only reads and writes rows.

use amos_acl::PeerPolicy;
use amos_protocol::{
    FactBody, Grants, Hlc, MemoryFixed, MemoryId, NodeId, OrgScope, ProjectId, Register, Scope,
    SignedFact, TeamId,
};
use amos_sync::EchoRanges;
use amos_sync::export::{self, MemoryExport};
use amos_sync::gate::{self, Standing};
use amos_sync::{Admission, DeferReason, MemoryState, Refusal, ReplicaStore};
use std::collections::HashMap;

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use crate::error::{NodeError, Result};
pub use crate::store::org::org_origin;
use crate::store::org::{OrgKind, ids_named};
use crate::store::{Tx, split_grants};

/// The replica view of one write transaction.
///
/// It remembers the [`MemoryState`] of every memory it read or wrote (the
/// transaction is the only writer, so they stay true), and holds back the
/// acl fact of a memory that has no row yet: when its content follows in
/// the same batch (acl facts apply first), both become one new row.
/// [`SqlReplica::finish`] writes whatever is still held back; call it
/// before the transaction commits.
pub struct SqlReplica<'t, 'c> {
    tx: &'t mut Tx<'c>,
    me: NodeId,
    now_ms: u64,
    /// Peer policies read during this transaction (as they apply until a
    /// team or project record is written: a name a policy names may then
    /// resolve, [`peer_policy_arriving`]).
    policies: HashMap<NodeId, Option<PeerPolicy>>,
    /// Memories as they stand in this transaction (`None`: no row).
    states: HashMap<MemoryId, Option<MemoryState>>,
    /// Acl facts of memories without a row, not written yet.
    held_acl: HashMap<MemoryId, Admission>,
}

impl<'t, 'c> SqlReplica<'t, 'c> {
    /// The replica of node `me` inside `tx`, its clock read at `now_ms`.
    pub fn new(tx: &'t mut Tx<'c>, me: NodeId, now_ms: u64) -> Self {
        SqlReplica {
            tx,
            me,
            now_ms,
            policies: Default::default(),
            states: Default::default(),
            held_acl: Default::default(),
        }
    }

    /// Write every acl fact still held back. Until this runs, the store
    /// lacks them: call it once the batch is applied, before committing.
    pub fn finish(&mut self) -> Result<()> {
        // In memory-id order: the same batch takes the same `seq`s on every
        // run (a map's order would make export order, and so what a peer
        // receives first, vary between runs).
        let mut held: Vec<_> = self.held_acl.drain().collect();
        held.sort_by_key(|(id, _)| *id);
        for (_, admission) in held {
            self.tx.put(&admission)?;
        }
        Ok(())
    }

    /// Re-judge every memory held for the legacy scope clashes recorded
    /// (docs/design.md §6.2): a grant [`gate::clash_cut`] cuts stops
    /// counting here (content no longer needed goes, as on arrival); and
    /// drop each clashed id's memberships authored by neither its held
    /// origin nor this node. Only removes, so it may run any number of
    /// times; marks every clash judged. Returns the rows changed.
    pub fn rejudge_clashed(&mut self) -> Result<usize> {
        type Row = (Vec<u8>, Vec<u8>, String, String, bool);
        let rows: Vec<Row> = {
            let mut stmt = self.tx.conn().prepare(
                "SELECT id, origin, grants, effective, owner_trusted FROM memories
                 WHERE origin != ?1 AND tombstone_fact IS NULL AND acl_fact IS NOT NULL
                   AND effective != ''",
            )?;
            stmt.query_map([&self.me.0[..]], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })?
            .collect::<rusqlite::Result<_>>()?
        };
        let mut changed = 0;
        for (id, origin, grants, effective, owner_trusted) in rows {
            let id = MemoryId(
                id.try_into()
                    .map_err(|_| NodeError::Corrupt("stored memory id".into()))?,
            );
            let origin = NodeId(
                origin
                    .try_into()
                    .map_err(|_| NodeError::Corrupt("stored origin is not a node id".into()))?,
            );
            let cut = gate::clash_cut(self, origin, &split_grants(&grants))?;
            let mut now = split_grants(&effective);
            if !cut.iter().any(|g| now.remove(g)) {
                continue;
            }
            self.release(&id)?;
            self.tx
                .set_standing(&id, &now, owner_trusted, !owner_trusted && now.is_empty())?;
            self.states.remove(&id);
            changed += 1;
        }
        // Members of a clashed id another node wrote (taken in by a release
        // before this rule) leave its roster here, as the gate now refuses
        // them.
        for info in super::clashes::list(self.tx.conn())? {
            if let Some(clash) = super::clashes::clash(self.tx.conn(), &info.scope)? {
                let me = self.me;
                changed += self
                    .tx
                    .drop_clashed_members(&info.scope.to_string(), |author| {
                        clash.may_mean_other(author, me)
                    })?;
            }
        }
        super::clashes::mark_judged(self.tx)?;
        Ok(changed)
    }

    /// Write the held-back acl fact of `id`, if any.
    fn release(&mut self, id: &MemoryId) -> Result<()> {
        if let Some(admission) = self.held_acl.remove(id) {
            self.tx.put(&admission)?;
        }
        Ok(())
    }

    fn read_memory(&mut self, id: &MemoryId) -> Result<Option<MemoryState>> {
        type Row = (
            String,
            i64,
            Vec<u8>,
            Option<Vec<u8>>,
            bool,
            Option<Vec<u8>>,
            Option<Vec<u8>>,
            String,
            bool,
            bool,
        );
        let row: Option<Row> = self
            .tx
            .conn()
            .prepare_cached(
                "SELECT owner, created_ms, origin, v, content_fact IS NOT NULL, acl_v,
                        tombstone_fact, effective, edited, owner_trusted
                 FROM memories WHERE id = ?1",
            )?
            .query_row([&id.0[..]], |r| Row::try_from(r))
            .optional()?;
        let Some((
            owner,
            created,
            origin,
            v,
            content_held,
            acl_v,
            tomb,
            effective,
            edited,
            owner_trusted,
        )) = row
        else {
            return Ok(None);
        };
        let fixed = MemoryFixed {
            owner: amos_protocol::AgentId::parse(&owner)
                .map_err(|e| NodeError::Corrupt(format!("stored owner: {e}")))?,
            created_ms: created as u64,
            origin: NodeId(
                origin
                    .try_into()
                    .map_err(|_| NodeError::Corrupt("stored origin is not a node id".into()))?,
            ),
        };
        let tombstone_v = tomb
            .map(|b| {
                amos_protocol::codec::decode_signed(&b)
                    .map(|f| f.fact.clock)
                    .map_err(|e| NodeError::Corrupt(format!("stored tombstone: {e}")))
            })
            .transpose()?;
        Ok(Some(MemoryState {
            fixed,
            content_v: clock(v),
            content_held,
            acl_v: clock(acl_v),
            tombstone_v,
            effective: split_grants(&effective),
            owner_trusted,
            edited,
        }))
    }
}

fn clock(bytes: Option<Vec<u8>>) -> Option<Hlc> {
    bytes.as_deref().and_then(Hlc::from_sort_key)
}

fn one_clock(conn: &Connection, sql: &str, args: impl rusqlite::Params) -> Result<Option<Hlc>> {
    Ok(clock(
        conn.prepare_cached(sql)?
            .query_row(args, |r| r.get::<_, Option<Vec<u8>>>(0))
            .optional()?
            .flatten(),
    ))
}

/// The policy we gave `node`, if registered, as it applies now
/// ([`peer_policy_arriving`] with nothing arriving).
pub fn peer_policy(
    conn: &(impl super::Readable + ?Sized),
    node: &NodeId,
) -> Result<Option<PeerPolicy>> {
    peer_policy_arriving(conn, node, &[])
}

/// The policy we gave `node`, if registered, as it applies to a batch
/// carrying the team and project records `arriving` (docs/design.md §3).
///
/// A policy names a team or project by a legacy-form id when the operator
/// typed a name no scope here carried (a team not synced yet), or when it
/// was stored before qualified ids; such a name is resolved each time the
/// policy is read: the legacy id itself if held here, else the one
/// qualified id of that name held here, else (none held) the one qualified
/// id of that name arriving, so that the first record of the team is
/// admitted. Two or more held (or arriving, none held) and no legacy id:
/// the name stays unresolved and admits none of them (fail closed).
pub fn peer_policy_arriving(
    conn: &(impl super::Readable + ?Sized),
    node: &NodeId,
    arriving: &[OrgScope],
) -> Result<Option<PeerPolicy>> {
    let text: Option<String> = super::sql(conn)
        .prepare_cached("SELECT policy FROM peers WHERE node_id = ?1")?
        .query_row([&node.0[..]], |r| r.get(0))
        .optional()?;
    let Some(text) = text else {
        return Ok(None);
    };
    let policy = text
        .parse::<PeerPolicy>()
        .map_err(|e| NodeError::Corrupt(format!("stored policy of peer {}: {e}", node.short())))?;
    let PeerPolicy::Scoped(scopes) = &policy else {
        return Ok(Some(policy));
    };
    if scopes.is_empty() {
        // `none`: nothing to resolve.
        return Ok(Some(policy));
    }
    let mut resolved = Vec::with_capacity(scopes.len());
    for scope in scopes {
        resolved.push(match scope {
            Scope::Team(t) if !t.is_qualified() => {
                let id = held_or_arriving(conn, OrgKind::Team, t.as_str(), arriving)?;
                Scope::Team(TeamId::parse(&id)?)
            }
            Scope::Project(p) if !p.is_qualified() => {
                let id = held_or_arriving(conn, OrgKind::Project, p.as_str(), arriving)?;
                Scope::Project(ProjectId::parse(&id)?)
            }
            other => other.clone(),
        });
    }
    Ok(Some(PeerPolicy::scoped(resolved)?))
}

/// What a policy's legacy-form id `name` means now ([`peer_policy_arriving`]).
fn held_or_arriving(
    conn: &(impl super::Readable + ?Sized),
    kind: OrgKind,
    name: &str,
    arriving: &[OrgScope],
) -> Result<String> {
    let held = ids_named(conn, kind, name)?;
    if held.iter().any(|id| id == name) {
        return Ok(name.to_owned());
    }
    let one = |ids: Vec<String>| {
        if ids.len() == 1 {
            ids.into_iter().next()
        } else {
            None
        }
    };
    if !held.is_empty() {
        return Ok(one(held).unwrap_or_else(|| name.to_owned()));
    }
    let mut coming: Vec<String> = arriving
        .iter()
        .filter_map(|s| match (kind, s) {
            (OrgKind::Team, OrgScope::Team(t)) => Some(t.as_str()),
            (OrgKind::Project, OrgScope::Project(p)) => Some(p.as_str()),
            _ => None,
        })
        .filter(|id| id.split_once('@').is_some_and(|(n, _)| n == name))
        .map(str::to_owned)
        .collect();
    coming.sort();
    coming.dedup();
    Ok(one(coming).unwrap_or_else(|| name.to_owned()))
}

/// The operator changed the policy it gives `peer`: re-judge every memory
/// that peer originated as the gate now would ([`gate::peer_standing`]) —
/// the grants in force here, the owner rule, and its content: erased if no
/// longer needed, accepted again (the very fact that was purged, at its own
/// clock) when it is — but content that came before its acl is left for
/// the acl to judge. A re-judged row takes a fresh `seq`, so what it now
/// lets out reaches the peers that may have it. Returns the rows changed.
pub fn restand_origin(
    tx: &mut Tx<'_>,
    me: NodeId,
    peer: &NodeId,
    policy: &PeerPolicy,
) -> Result<usize> {
    let standing: Standing = gate::peer_standing(policy);
    let rows: Vec<(Vec<u8>, String, String, bool, bool)> = {
        let mut stmt = tx.conn().prepare(
            "SELECT id, grants, effective, owner_trusted, acl_fact IS NOT NULL FROM memories
             WHERE origin = ?1 AND tombstone_fact IS NULL",
        )?;
        stmt.query_map([&peer.0[..]], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })?
        .collect::<rusqlite::Result<_>>()?
    };
    let mut changed = 0;
    for (id, grants, effective, owner_trusted, has_acl) in rows {
        let id = MemoryId(
            id.try_into()
                .map_err(|_| NodeError::Corrupt("stored memory id".into()))?,
        );
        let grants = split_grants(&grants);
        let mut now = standing.effective(&grants);
        // A grant to a clashed legacy scope that may mean the other one
        // counts no more after a policy change than before it.
        let cut = gate::clash_cut(&mut SqlReplica::new(tx, me, 0), *peer, &grants)?;
        for g in cut.iter() {
            now.remove(g);
        }
        if now == split_grants(&effective) && owner_trusted == standing.owner_trusted {
            continue;
        }
        // Content that came before its acl waits for the acl to judge it
        // (as on arrival): a policy change alone does not erase it.
        tx.set_standing(
            &id,
            &now,
            standing.owner_trusted,
            has_acl && !standing.keeps_content(&now),
        )?;
        changed += 1;
    }
    Ok(changed)
}

fn project_team(conn: &Connection, p: &ProjectId) -> Result<Option<TeamId>> {
    let t: Option<String> = conn
        .prepare_cached("SELECT team FROM projects WHERE id = ?1")?
        .query_row([p.as_str()], |r| r.get(0))
        .optional()?;
    Ok(t.and_then(|t| TeamId::parse(&t).ok()))
}

impl ReplicaStore for SqlReplica<'_, '_> {
    type Error = NodeError;

    fn local_node(&self) -> NodeId {
        self.me
    }

    fn peer_policy(&mut self, node: &NodeId) -> Result<Option<PeerPolicy>> {
        if let Some(p) = self.policies.get(node) {
            return Ok(p.clone());
        }
        let p = peer_policy(self.tx.conn(), node)?;
        self.policies.insert(*node, p.clone());
        Ok(p)
    }

    fn memory(&mut self, id: &MemoryId) -> Result<Option<MemoryState>> {
        if let Some(state) = self.states.get(id) {
            return Ok(state.clone());
        }
        let state = self.read_memory(id)?;
        self.states.insert(*id, state.clone());
        Ok(state)
    }

    fn clock_of(&mut self, register: &Register) -> Result<Option<Hlc>> {
        match register {
            Register::MemoryContent(id) => return Ok(self.memory(id)?.and_then(|m| m.content_v)),
            Register::MemoryAcl(id) => return Ok(self.memory(id)?.and_then(|m| m.acl_v)),
            Register::MemoryTombstone(id) => {
                return Ok(self.memory(id)?.and_then(|m| m.tombstone_v));
            }
            _ => {}
        }
        let c = self.tx.conn();
        match register {
            Register::Link(a, b, rel) => one_clock(
                c,
                "SELECT v FROM links WHERE from_id = ?1 AND to_id = ?2 AND relation = ?3",
                params![&a.0[..], &b.0[..], rel.as_str()],
            ),
            Register::Team(t) => one_clock(c, "SELECT v FROM teams WHERE id = ?1", [t.as_str()]),
            Register::Project(p) => {
                one_clock(c, "SELECT v FROM projects WHERE id = ?1", [p.as_str()])
            }
            Register::Membership(s, a) => one_clock(
                c,
                "SELECT v FROM memberships WHERE scope = ?1 AND agent = ?2",
                params![s.to_string(), a.as_str()],
            ),
            Register::Agent(a) => one_clock(c, "SELECT v FROM agents WHERE id = ?1", [a.as_str()]),
            Register::Profile(a) => {
                one_clock(c, "SELECT v FROM profiles WHERE agent = ?1", [a.as_str()])
            }
            Register::MemoryContent(_) | Register::MemoryAcl(_) | Register::MemoryTombstone(_) => {
                Ok(None)
            }
        }
    }

    fn project_team(&mut self, project: &ProjectId) -> Result<Option<TeamId>> {
        project_team(self.tx.conn(), project)
    }

    fn org_origin(&mut self, scope: &OrgScope) -> Result<Option<NodeId>> {
        org_origin(self.tx.conn(), scope)
    }

    fn clash(&mut self, scope: &OrgScope) -> Result<Option<amos_sync::Clash>> {
        super::clashes::clash(self.tx.conn(), scope)
    }

    fn record_clash(
        &mut self,
        scope: &OrgScope,
        _held: &NodeId,
        theirs: &NodeId,
        closed: bool,
    ) -> Result<()> {
        if super::clashes::record(self.tx, scope, theirs, closed, self.now_ms)? {
            self.rejudge_clashed()?;
        }
        Ok(())
    }

    fn put(&mut self, admission: Admission) -> Result<()> {
        let fact = admission.fact();
        let Some((id, fixed)) = fact.fact.body.memory() else {
            if matches!(fact.fact.body, FactBody::Team(_) | FactBody::Project(_)) {
                self.policies.clear();
            }
            return self.tx.put(&admission);
        };
        match &fact.fact.body {
            // A memory new here: hold its acl back for its content.
            FactBody::MemoryAcl(a)
                if !admission.effect().purge_content()
                    && !self.held_acl.contains_key(&id)
                    && self.memory(&id)?.is_none() =>
            {
                let effective = admission
                    .effect()
                    .effective()
                    .cloned()
                    .unwrap_or_else(|| a.grants.clone());
                self.states.insert(
                    id,
                    Some(MemoryState {
                        fixed: fixed.clone(),
                        content_v: None,
                        content_held: false,
                        acl_v: Some(fact.fact.clock),
                        tombstone_v: None,
                        effective,
                        owner_trusted: admission.effect().owner_trusted(),
                        edited: false,
                    }),
                );
                self.held_acl.insert(id, admission);
                Ok(())
            }
            // Its content: one new row with both (plain text; an edit goes
            // through the text log, after the acl).
            FactBody::MemoryContent(c)
                if self.held_acl.contains_key(&id) && c.text.plain().is_some() =>
            {
                let Some(acl) = self.held_acl.remove(&id) else {
                    return Ok(());
                };
                self.tx.put_new_memory(&admission, &acl)?;
                if let Some(Some(state)) = self.states.get_mut(&id) {
                    state.content_v = Some(fact.fact.clock);
                    state.content_held = true;
                    state.owner_trusted = admission.effect().owner_trusted();
                }
                Ok(())
            }
            _ => {
                self.release(&id)?;
                self.tx.put(&admission)?;
                // Re-read on next use: the row changed in ways only SQL knows.
                self.states.remove(&id);
                Ok(())
            }
        }
    }

    fn merge_text(&mut self, admission: &Admission) -> Result<bool> {
        let Some((id, _)) = admission.fact().fact.body.memory() else {
            return Ok(false);
        };
        self.release(&id)?;
        let changed = self.tx.merge_text(admission)?;
        self.states.remove(&id);
        Ok(changed)
    }

    fn observe(&mut self, clock: &Hlc) -> Result<()> {
        self.tx.observe(clock)
    }

    fn defer(&mut self, fact: &SignedFact, from: &NodeId, reason: &DeferReason) -> Result<()> {
        let bytes = fact.to_bytes();
        let ahead = match reason {
            DeferReason::ClockSkew { ahead_ms } => Some(*ahead_ms as i64),
            DeferReason::MissingEndpoint | DeferReason::MissingScope => None,
        };
        self.tx
            .conn()
            .prepare_cached(
                "INSERT INTO deferred(hash, fact, peer, reason, ahead_ms, since_ms, code)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT(hash) DO UPDATE SET reason = excluded.reason, ahead_ms = excluded.ahead_ms,
                code = excluded.code",
            )?
            .execute(params![
                blake3::hash(&bytes).as_bytes().to_vec(),
                bytes,
                &from.0[..],
                reason.to_string(),
                ahead,
                self.now_ms as i64,
                reason.code()
            ])?;
        Ok(())
    }

    fn refuse(&mut self, fact: &SignedFact, from: &NodeId, reason: &Refusal) -> Result<()> {
        let bytes = fact.to_bytes();
        self.tx
            .conn()
            .prepare_cached(
                "INSERT OR IGNORE INTO audit(time_ms, peer, author, register, reason, fact, hash, code)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?
            .execute(params![
                self.now_ms as i64,
                &from.0[..],
                &fact.fact.author().0[..],
                register_text(&fact.fact.body.register()),
                reason.to_string(),
                bytes.clone(),
                blake3::hash(&bytes).as_bytes().to_vec(),
                reason.code(),
            ])?;
        Ok(())
    }
}

/// A register as people read it: `memory:<id>/acl`, `team:apollo`, …
pub fn register_text(r: &Register) -> String {
    match r {
        Register::MemoryContent(id) => format!("memory:{id}/content"),
        Register::MemoryAcl(id) => format!("memory:{id}/acl"),
        Register::MemoryTombstone(id) => format!("memory:{id}/tombstone"),
        Register::Link(a, b, rel) => format!("link:{a}->{b}/{rel}"),
        Register::Team(t) => format!("team:{t}"),
        Register::Project(p) => format!("project:{p}"),
        Register::Membership(s, a) => format!("membership:{s}/{a}"),
        Register::Agent(a) => format!("agent:{a}"),
        Register::Profile(a) => format!("profile:{a}"),
    }
}

// ------------------------------------------------------------------ export

/// How an export reads the store: which facts of rows changed after `since`
/// may go to a peer with `policy`. `retractions` = false gives the facts the
/// policy admits *now* (what the scoped digest covers).
pub struct ExportSpec<'a> {
    /// The policy the peer is given.
    pub policy: &'a PeerPolicy,
    /// Only rows whose `seq` is past this.
    pub since: i64,
    /// Also what the peer could once receive and no longer may (retractions).
    pub retractions: bool,
    /// Leave out facts this node authored (the requesting peer, on an
    /// incremental sync: it has its own facts, or its epoch would have
    /// changed and it would have asked from 0).
    pub skip_author: Option<NodeId>,
    /// `seq`s not to read: the requesting peer's echo ranges (rows that
    /// hold only what it has; [`amos_sync::EchoRanges`]), on the same terms as
    /// `skip_author`.
    pub echo: Option<&'a EchoRanges>,
    /// Read no row past this `seq` (a mailbox bundle's cap, docs/design.md
    /// §8.2): the export covers `since..=until` as if the store stood
    /// there, and a row changed later goes with the next export. `None`:
    /// up to the store's latest `seq`.
    pub until: Option<i64>,
}

/// The `seq` that closes a window of at most `rows` rows changed after
/// `since` (of every table an export reads rows of by `seq`), or `None`
/// if fewer than that many changed: a mailbox bundle's cap
/// ([`ExportSpec::until`]).
pub fn window_end(
    conn: &(impl super::Readable + ?Sized),
    since: i64,
    rows: usize,
) -> Result<Option<i64>> {
    let conn = super::sql(conn);
    let offset = i64::try_from(rows.max(1) - 1).unwrap_or(i64::MAX);
    Ok(conn
        .prepare_cached(
            "SELECT seq FROM (
                SELECT seq FROM memories WHERE seq > ?1
                UNION ALL SELECT seq FROM memory_text WHERE seq > ?1
                UNION ALL SELECT seq FROM links WHERE seq > ?1
                UNION ALL SELECT seq FROM teams WHERE seq > ?1
                UNION ALL SELECT seq FROM projects WHERE seq > ?1
                UNION ALL SELECT seq FROM memberships WHERE seq > ?1
                UNION ALL SELECT seq FROM agents WHERE seq > ?1
                UNION ALL SELECT seq FROM profiles WHERE seq > ?1
             ) ORDER BY seq LIMIT 1 OFFSET ?2",
        )?
        .query_row(params![since, offset], |r| r.get(0))
        .optional()?)
}

/// Read, in `seq` order, the wire bytes of every fact that `spec` lets out,
/// calling `emit` per batch of at most `batch` facts; returns the highest
/// `seq` covered. With echo ranges, only the rows in the gaps between them
/// are read (each table in `seq` order within a gap, the gaps in order).
pub fn export_facts(
    conn: &(impl super::Readable + ?Sized),
    spec: &ExportSpec<'_>,
    batch: usize,
    mut emit: impl FnMut(Vec<Vec<u8>>) -> Result<()>,
) -> Result<i64> {
    let conn = super::sql(conn);
    let high = crate::store::max_seq(conn)?;
    let high = spec.until.map_or(high, |u| u.min(high));
    let gaps = match spec.echo {
        Some(echo) => echo.gaps(spec.since, high),
        None if spec.since < high => vec![(spec.since, high)],
        None => Vec::new(),
    };
    let decide = |effective: &str, ever: &str, tombstoned: bool| -> MemoryExport {
        let effective = split_grants(effective);
        let ever = if spec.retractions {
            split_grants(ever)
        } else {
            Grants::private()
        };
        let d = export::memory(spec.policy, &effective, &ever, tombstoned);
        if !spec.retractions && !spec.policy.is_full() && d == MemoryExport::Retraction {
            MemoryExport::None
        } else {
            d
        }
    };
    let mut out: Vec<Vec<u8>> = Vec::with_capacity(batch);
    let mut push = |f: Vec<u8>, out: &mut Vec<Vec<u8>>| -> Result<()> {
        // The author from the fact's head: a whole decode of every row
        // would cost the export more than the rest of its work.
        if let Some(skip) = spec.skip_author
            && amos_protocol::codec::author_of(&f) == Some(skip)
        {
            return Ok(());
        }
        out.push(f);
        if out.len() >= batch {
            emit(std::mem::take(out))?;
        }
        Ok(())
    };

    // Org records first, so a receiver applying frame by frame has them
    // before the memories that are shared with them.
    for (table, kind) in [("teams", 0), ("projects", 1), ("memberships", 2)] {
        let key = if kind == 2 { "scope" } else { "id" };
        let sql =
            format!("SELECT {key}, fact FROM {table} WHERE seq > ?1 AND seq <= ?2 ORDER BY seq");
        let mut stmt = conn.prepare_cached(&sql)?;
        for &(after, upto) in &gaps {
            let mut rows = stmt.query(params![after, upto])?;
            while let Some(r) = rows.next()? {
                let key: String = r.get(0)?;
                let scope = match kind {
                    0 => TeamId::parse(&key).ok().map(OrgScope::Team),
                    1 => ProjectId::parse(&key).ok().map(OrgScope::Project),
                    _ => crate::store::org::parse_org_scope(&key),
                };
                if scope.is_some_and(|s| export::org(spec.policy, &s)) {
                    push(r.get(1)?, &mut out)?;
                }
            }
        }
    }
    // A `project:` policy's teams: the record and the memberships of the
    // projects' members. Only what changed after `since` — or what a change
    // after it made needed: a project record new to the peer needs its
    // team's record and its members' memberships, a project membership new
    // to it that member's unchanged team membership. An export from 0 (the
    // digest, a first sync, a policy change) sends them all.
    let via = export::teams_via_projects(spec.policy, |p| project_team(conn, p).ok().flatten());
    let mut project_seq =
        conn.prepare_cached("SELECT seq FROM projects WHERE id = ?1 AND seq <= ?2")?;
    let mut member = conn.prepare_cached(
        "SELECT seq FROM memberships WHERE scope = ?1 AND agent = ?2 AND present = 1 AND seq <= ?3",
    )?;
    for (team, projects) in &via {
        let mut projects_new = false;
        for p in projects {
            let seq: Option<i64> = project_seq
                .query_row(params![p.as_str(), high], |r| r.get(0))
                .optional()?;
            projects_new |= seq.is_some_and(|s| s > spec.since);
        }
        let record: Option<(Vec<u8>, i64)> = conn
            .prepare_cached("SELECT fact, seq FROM teams WHERE id = ?1 AND seq <= ?2")?
            .query_row(params![team.as_str(), high], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        if let Some((f, seq)) = record
            && (projects_new || seq > spec.since)
        {
            push(f, &mut out)?;
        }
        let mut stmt = conn.prepare_cached(
            "SELECT m.fact, m.agent, m.seq FROM memberships m WHERE m.scope = ?1 AND m.seq <= ?2 ORDER BY m.seq",
        )?;
        let mut rows = stmt.query(params![format!("team:{team}"), high])?;
        while let Some(r) = rows.next()? {
            let agent: String = r.get(1)?;
            let mut needed = false;
            let mut fresh = projects_new || r.get::<_, i64>(2)? > spec.since;
            for p in projects {
                let seq: Option<i64> = member
                    .query_row(params![format!("project:{p}"), agent, high], |r| r.get(0))
                    .optional()?;
                if let Some(seq) = seq {
                    needed = true;
                    fresh |= seq > spec.since;
                }
            }
            if needed && fresh {
                push(r.get(0)?, &mut out)?;
            }
        }
    }
    if export::registry(spec.policy) {
        for table in ["agents", "profiles"] {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT fact FROM {table} WHERE seq > ?1 AND seq <= ?2 ORDER BY seq"
            ))?;
            for &(after, upto) in &gaps {
                let mut rows = stmt.query(params![after, upto])?;
                while let Some(r) = rows.next()? {
                    push(r.get(0)?, &mut out)?;
                }
            }
        }
    }
    {
        let mut stmt = conn.prepare(
            "SELECT effective, grants_ever, tombstone_fact IS NOT NULL, content_fact, acl_fact,
                    tombstone_fact, edited, id
             FROM memories WHERE seq > ?1 AND seq <= ?2 ORDER BY seq",
        )?;
        // An edited memory's text log: every fact of it that changed since
        // `since` (all of them after a change of visibility).
        let mut text_log = conn.prepare_cached(
            "SELECT fact FROM memory_text
             WHERE memory = ?1 AND seq > ?2 AND seq <= ?3 AND fact IS NOT NULL ORDER BY seq",
        )?;
        for &(after, upto) in &gaps {
            let mut rows = stmt.query(params![after, upto])?;
            while let Some(r) = rows.next()? {
                let d = decide(&r.get::<_, String>(0)?, &r.get::<_, String>(1)?, r.get(2)?);
                let content: Option<Vec<u8>> = r.get(3)?;
                let acl: Option<Vec<u8>> = r.get(4)?;
                let tomb: Option<Vec<u8>> = r.get(5)?;
                if d == MemoryExport::Whole && r.get::<_, bool>(6)? {
                    let id: Vec<u8> = r.get(7)?;
                    let mut log = text_log.query(params![id, spec.since, high])?;
                    while let Some(l) = log.next()? {
                        let f: Vec<u8> = l.get(0)?;
                        if content.as_ref() != Some(&f) {
                            push(f, &mut out)?;
                        }
                    }
                }
                match d {
                    MemoryExport::None => {}
                    MemoryExport::Retraction => {
                        for f in [acl, tomb].into_iter().flatten() {
                            push(f, &mut out)?;
                        }
                    }
                    MemoryExport::Whole => {
                        for f in [content, acl, tomb].into_iter().flatten() {
                            push(f, &mut out)?;
                        }
                    }
                }
            }
        }
    }
    {
        let mut ends = conn.prepare_cached(
            "SELECT effective, grants_ever, tombstone_fact IS NOT NULL FROM memories WHERE id = ?1",
        )?;
        let mut end = |id: &[u8]| -> Result<MemoryExport> {
            Ok(ends
                .query_row([id], |r| {
                    Ok(decide(
                        &r.get::<_, String>(0)?,
                        &r.get::<_, String>(1)?,
                        r.get(2)?,
                    ))
                })
                .optional()?
                .unwrap_or(MemoryExport::None))
        };
        let mut stmt = conn.prepare(
            "SELECT from_id, to_id, fact FROM links WHERE seq > ?1 AND seq <= ?2 ORDER BY seq",
        )?;
        for &(after, upto) in &gaps {
            let mut rows = stmt.query(params![after, upto])?;
            while let Some(r) = rows.next()? {
                let a: Vec<u8> = r.get(0)?;
                let b: Vec<u8> = r.get(1)?;
                if export::link(end(&a)?, end(&b)?) {
                    push(r.get(2)?, &mut out)?;
                }
            }
        }
    }
    if !out.is_empty() {
        emit(out)?;
    }
    Ok(high)
}

/// The convergence digest over the facts `policy` admits now (`Full` = all).
pub fn digest(store: &super::Store, policy: &PeerPolicy) -> Result<(String, usize)> {
    let (d, n) = digest_bytes(store, policy)?;
    Ok((amos_sync::digest::to_hex(&d), n))
}

/// [`digest`] as the bytes a sync session's `Digest` message carries.
/// Cached per policy in `digest_cache` while the store's `seq` does not
/// move (every change an export could see takes a fresh `seq`); an idle
/// sync reads it instead of scanning the store. The cache is the store's
/// own: a read may fill it (best effort, never replicated, never moving
/// `seq`), which is why only the store reaches the connection it writes on.
pub fn digest_bytes(store: &super::Store, policy: &PeerPolicy) -> Result<([u8; 32], usize)> {
    let conn = store.conn();
    let key = policy.to_string();
    let seq = crate::store::max_seq(conn)?;
    let cached: Option<(i64, Vec<u8>, i64)> = conn
        .prepare_cached("SELECT seq, digest, facts FROM digest_cache WHERE policy = ?1")?
        .query_row([&key], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    if let Some((at, d, n)) = cached
        && at == seq
        && let Ok(d) = <[u8; 32]>::try_from(d.as_slice())
    {
        return Ok((d, n.max(0) as usize));
    }
    let (d, n) = compute_digest(conn, policy)?;
    // Only if nothing committed while we read (the scan is not one
    // snapshot); best effort: a busy store just skips the cache. Rows of
    // an older `seq` can never match again and go.
    if crate::store::max_seq(conn)? == seq {
        let _ = conn.execute(
            "INSERT INTO digest_cache(policy, seq, digest, facts) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT(policy) DO UPDATE SET seq = excluded.seq, digest = excluded.digest,
                facts = excluded.facts",
            params![key, seq, &d[..], n as i64],
        );
        let _ = conn.execute("DELETE FROM digest_cache WHERE seq < ?1", [seq]);
    }
    Ok((d, n))
}

/// The digest over what `policy` admits now, read from the store.
fn compute_digest(conn: &Connection, policy: &PeerPolicy) -> Result<([u8; 32], usize)> {
    let mut d = amos_sync::digest::Digest::new();
    export_facts(
        conn,
        &ExportSpec {
            policy,
            since: 0,
            retractions: false,
            skip_author: None,
            echo: None,
            until: None,
        },
        4096,
        |facts| {
            for f in facts {
                d.add(&f);
            }
            Ok(())
        },
    )?;
    Ok(d.finish_bytes())
}

/// The running set digest of what `policy` admits now (a session digest
/// with a peer whose protocol has it, docs/design.md §7.3): one row read.
/// The first time a policy is asked for, it is computed by a full scan and
/// kept from then on by every write (`store::digest`), both in one write
/// transaction; when this connection is already inside a transaction, the
/// scan is returned and nothing is kept.
pub fn set_digest_bytes(store: &super::Store, policy: &PeerPolicy) -> Result<([u8; 32], usize)> {
    let conn = store.conn();
    let key = policy.to_string();
    if let Some(d) = super::digest::running(conn, &key)? {
        return Ok(d.finish_bytes());
    }
    if !conn.is_autocommit() {
        return Ok(compute_set_digest(conn, policy)?.finish_bytes());
    }
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let started = (|| -> Result<amos_sync::digest::SetDigest> {
        if let Some(d) = super::digest::running(conn, &key)? {
            return Ok(d);
        }
        let scan = compute_set_digest(conn, policy)?;
        super::digest::start(conn, &key, &scan)?;
        Ok(scan)
    })();
    match started {
        Ok(d) => {
            conn.execute_batch("COMMIT")?;
            Ok(d.finish_bytes())
        }
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

/// Start keeping the running set digest of `policy` inside `tx`, if it has
/// none (a peer registered, or given a new policy): on an empty store
/// free, on a full one a scan at the operator's command rather than in the
/// first idle session after. Call it after the transaction's other writes:
/// the scan covers them, and the transaction's own notes do not know the
/// policy.
pub fn keep_running(tx: &mut super::Tx<'_>, policy: &PeerPolicy) -> Result<()> {
    // The scan exports up to the stored counter: store this transaction's
    // first, or the rows it gave a fresh `seq` are left out of the scan.
    tx.write_counters()?;
    let conn = super::sql(&*tx);
    let key = policy.to_string();
    if super::digest::running(conn, &key)?.is_some() {
        return Ok(());
    }
    let scan = compute_set_digest(conn, policy)?;
    super::digest::start(conn, &key, &scan)
}

/// The set digest over what `policy` admits now, by a full scan (what the
/// running one must always equal).
pub fn compute_set_digest(
    conn: &(impl super::Readable + ?Sized),
    policy: &PeerPolicy,
) -> Result<amos_sync::digest::SetDigest> {
    let conn = super::sql(conn);
    let mut hashes: Vec<[u8; 32]> = Vec::new();
    export_facts(
        conn,
        &ExportSpec {
            policy,
            since: 0,
            retractions: false,
            skip_author: None,
            echo: None,
            until: None,
        },
        4096,
        |facts| {
            hashes.extend(facts.iter().map(|f| *blake3::hash(f).as_bytes()));
            Ok(())
        },
    )?;
    hashes.sort_unstable();
    hashes.dedup();
    let mut d = amos_sync::digest::SetDigest::new();
    for h in &hashes {
        d.insert(amos_sync::digest::Term::from_hash(h));
    }
    Ok(d)
}

// ------------------------------------------------------------------ peers

/// One registered peer.
#[derive(Debug, Clone, Serialize)]
pub struct PeerInfo {
    /// The peer's node id (hex).
    pub node_id: String,
    /// The name it is registered by here.
    pub name: String,
    /// The address to dial (`None`: none known).
    pub addr: Option<String>,
    /// The policy we give it, as `amos peers policy` takes it.
    pub policy: String,
    /// When a session with it last ended (Unix ms).
    pub last_sync: Option<u64>,
    /// How that session ended ([`crate::SyncResult::as_str`]).
    pub last_result: Option<String>,
    /// The last comparison of the peer's session digest with ours over the
    /// scopes it gives us (`None`: never compared).
    pub digest: Option<crate::store::peers::DigestCheck>,
    /// The figures of the last session with the peer that completed, run
    /// by any process on this home (`None`: none yet).
    pub last_session: Option<crate::store::peers::LastSession>,
    /// The protocol version its last session spoke (docs/design.md §13;
    /// `None`: no session since this was recorded).
    pub protocol: Option<u16>,
    /// Facts held back for it: they need a feature it lacks, and go once it
    /// has it.
    pub held_back: u64,
    /// The directory sealed bundles are exchanged with it through
    /// (docs/design.md §8.2; `None`: no mailbox).
    pub mailbox: Option<String>,
    /// The link is a relay link (`peers add --relay`, docs/design.md
    /// §7.11): either side may forward the other's connections, and a side
    /// knowing the other's address keeps a standing connection to it.
    pub relay: bool,
    /// The relay it is reached through (`--via`), a registered peer's id.
    pub via: Option<String>,
    /// That relay's address, if it has one (what a dial through it uses).
    #[serde(skip)]
    pub via_addr: Option<String>,
}

impl PeerInfo {
    /// Whether a sync session may run with it: its policy is not `none`
    /// (a pure relay link carries no facts either way).
    pub fn syncs(&self) -> bool {
        self.policy != "none"
    }

    /// Whether a sync pass dials it: it syncs, and it has an address or a
    /// relay to be reached through.
    pub fn dialable(&self) -> bool {
        self.syncs() && (self.addr.is_some() || self.via.is_some())
    }
}

/// The peers `want` names (`amos sync now PEER`): exactly by NodeId or name,
/// else every NodeId it begins; the caller decides what none or several mean.
pub fn peers_named<'p>(peers: &'p [PeerInfo], want: &str) -> Vec<&'p PeerInfo> {
    let exact: Vec<&PeerInfo> = peers
        .iter()
        .filter(|p| p.node_id == want || p.name == want)
        .collect();
    if !exact.is_empty() {
        return exact;
    }
    peers
        .iter()
        .filter(|p| p.node_id.starts_with(want))
        .collect()
}

pub fn list_peers(conn: &(impl super::Readable + ?Sized)) -> Result<Vec<PeerInfo>> {
    let conn = super::sql(conn);
    let mut stmt = conn.prepare(
        "SELECT p.node_id, p.name, p.addr, p.policy, p.last_sync_ms, p.last_result,
            p.digest_agree, p.digest_ms, p.digest_scopes, p.digest_peer_facts,
            p.digest_my_facts, p.session_at_ms, p.session_ms, p.session_facts_in,
            p.session_facts_out, p.session_bytes_in, p.session_bytes_out,
            p.protocol, p.held_back, p.relay, p.via, r.addr, p.mailbox
         FROM peers p LEFT JOIN peers r ON r.node_id = p.via ORDER BY p.added_ms",
    )?;
    let rows = stmt.query_map([], |r| {
        let id: Vec<u8> = r.get(0)?;
        Ok(PeerInfo {
            node_id: <[u8; 32]>::try_from(id.as_slice())
                .map(|a| NodeId(a).to_string())
                .unwrap_or_default(),
            name: r.get(1)?,
            addr: r.get(2)?,
            policy: r.get(3)?,
            last_sync: r.get::<_, Option<i64>>(4)?.map(|x| x as u64),
            last_result: r.get(5)?,
            digest: crate::store::peers::digest_check(r, 6)?,
            last_session: crate::store::peers::last_session(r, 11)?,
            protocol: r
                .get::<_, Option<i64>>(17)?
                .and_then(|v| u16::try_from(v).ok()),
            held_back: u64::try_from(r.get::<_, i64>(18)?).unwrap_or(0),
            relay: r.get::<_, i64>(19)? != 0,
            via: r
                .get::<_, Option<Vec<u8>>>(20)?
                .and_then(|v| <[u8; 32]>::try_from(v.as_slice()).ok())
                .map(|a| NodeId(a).to_string()),
            via_addr: r.get(21)?,
            mailbox: r.get(22)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// One audit entry: a refused fact.
#[derive(Debug, Clone, Serialize)]
pub struct AuditEntry {
    /// When the fact was refused (Unix ms).
    pub time_ms: u64,
    /// The peer that sent it (node id).
    pub peer: String,
    /// The node that signed it.
    pub author: String,
    /// The register it wrote ([`register_text`]).
    pub register: String,
    /// The refusal's stable code (`amos_sync::Refusal::code`).
    pub code: String,
    /// The refusal as people read it (may change between versions).
    pub reason: String,
}

pub fn audit(conn: &(impl super::Readable + ?Sized), limit: usize) -> Result<Vec<AuditEntry>> {
    let conn = super::sql(conn);
    let mut stmt = conn.prepare(
        "SELECT time_ms, peer, author, register, reason, code FROM audit
         ORDER BY id DESC LIMIT ?1",
    )?;
    let id = |b: Vec<u8>| {
        <[u8; 32]>::try_from(b.as_slice())
            .map(|a| NodeId(a).to_string())
            .unwrap_or_default()
    };
    let rows = stmt.query_map([limit as i64], |r| {
        Ok(AuditEntry {
            time_ms: r.get::<_, i64>(0)? as u64,
            peer: id(r.get(1)?),
            author: id(r.get(2)?),
            register: r.get(3)?,
            reason: r.get(4)?,
            code: r.get(5)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Deferred (quarantined) facts: `(peer, reason, ahead_ms)`.
#[derive(Debug, Clone, Serialize)]
pub struct DeferredInfo {
    /// The peer that sent it (node id).
    pub peer: String,
    /// Why it waits (clock skew, a missing endpoint or scope).
    pub reason: String,
    /// For clock skew: how far its clock was ahead of ours.
    pub ahead_ms: Option<u64>,
    /// The register it writes ([`register_text`]).
    pub register: String,
}

pub fn deferred(conn: &(impl super::Readable + ?Sized)) -> Result<Vec<DeferredInfo>> {
    let conn = super::sql(conn);
    let mut stmt =
        conn.prepare("SELECT peer, reason, ahead_ms, fact FROM deferred ORDER BY since_ms")?;
    let rows = stmt.query_map([], |r| {
        let peer: Vec<u8> = r.get(0)?;
        let fact: Vec<u8> = r.get(3)?;
        Ok(DeferredInfo {
            peer: <[u8; 32]>::try_from(peer.as_slice())
                .map(|a| NodeId(a).to_string())
                .unwrap_or_default(),
            reason: r.get(1)?,
            ahead_ms: r.get::<_, Option<i64>>(2)?.map(|x| x as u64),
            register: amos_protocol::codec::decode_signed(&fact)
                .map(|f| register_text(&f.fact.body.register()))
                .unwrap_or_else(|_| "?".into()),
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// How many facts are deferred.
pub fn deferred_count(conn: &(impl super::Readable + ?Sized)) -> Result<usize> {
    let conn = super::sql(conn);
    let n: i64 = conn
        .prepare_cached("SELECT COUNT(*) FROM deferred")?
        .query_row([], |r| r.get(0))?;
    Ok(n.max(0) as usize)
}

/// Take every deferred fact out of the table (for a retry), grouped by peer.
pub fn take_deferred(tx: &super::Tx<'_>) -> Result<Vec<(NodeId, Vec<u8>)>> {
    let conn = super::sql(tx);
    let mut stmt = conn.prepare("SELECT peer, fact FROM deferred ORDER BY since_ms")?;
    let rows: Vec<(Vec<u8>, Vec<u8>)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    conn.execute("DELETE FROM deferred", [])?;
    Ok(rows
        .into_iter()
        .filter_map(|(p, f)| {
            <[u8; 32]>::try_from(p.as_slice())
                .ok()
                .map(|a| (NodeId(a), f))
        })
        .collect())
}
