//! The running session digests (docs/design.md §7.3): one
//! [`SetDigest`] per policy a session asked for, kept up to date by every
//! write transaction, so that a session digest reads one row instead of
//! scanning what the policy admits.
//!
//! How: a write transaction notes each row it is about to change
//! ([`Tracker::touch`], before the change) with that row's share of every
//! running digest — the facts of the row the policy's export (from 0,
//! without retractions, as `amos digest --scope`) sends — and, before it
//! commits ([`Tracker::flush`]), adds each noted row's share now and takes
//! out the noted one. A row's share also depends on other rows, which are
//! noted with it: a link on its two memories, a `project:` policy's team
//! record and team memberships on the projects and their memberships.
//!
//! Must never: count a fact the policy's export would not send (the share
//! of a row mirrors `replica::export_facts` from 0), or miss a change: every
//! write of a replicated row in `store/` notes it first. The property test
//! `running_digests_equal_the_full_scan` holds the running digests to the
//! full scan after random writes, shares, revocations, policy changes and
//! tombstones.

use std::collections::HashMap;

use amos_acl::PeerPolicy;
use amos_protocol::{OrgScope, ProjectId, TeamId};
use amos_sync::digest::{SetDigest, Term};
use amos_sync::export::{self, MemoryExport};
use rusqlite::{Connection, OptionalExtension, params};

use crate::error::{NodeError, Result};
use crate::store::split_grants;

/// At most this many policies have a running digest: a new one beyond
/// them drops every one no peer's policy names (but `full`).
pub const MAX_RUNNING: usize = 16;

/// A replicated row, by its key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum RowKey {
    Memory(Vec<u8>),
    Link(Vec<u8>, Vec<u8>, String),
    Team(String),
    Project(String),
    Membership(String, String),
    Agent(String),
    Profile(String),
}

/// What one write transaction noted (see the module's doc).
#[derive(Default)]
pub(crate) struct Tracker {
    /// The policies with a running digest (`None`: not read yet).
    policies: Option<Vec<(String, PeerPolicy)>>,
    /// Whether a policy names a project (its team records and memberships
    /// then depend on the projects').
    via: bool,
    /// Each noted row's share when it was first noted, per policy.
    before: HashMap<RowKey, Vec<SetDigest>>,
    /// What the transaction adds to each running digest so far.
    delta: Vec<SetDigest>,
}

impl Tracker {
    fn load(&mut self, conn: &Connection) -> Result<bool> {
        if self.policies.is_none() {
            let mut stmt =
                conn.prepare_cached("SELECT policy FROM digest_running ORDER BY policy")?;
            let names: Vec<String> = stmt
                .query_map([], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            let mut policies = Vec::with_capacity(names.len());
            for n in names {
                let p: PeerPolicy = n
                    .parse()
                    .map_err(|e| NodeError::Corrupt(format!("running digest policy {n}: {e}")))?;
                policies.push((n, p));
            }
            self.via = policies.iter().any(|(_, p)| p.projects().next().is_some());
            self.delta = vec![SetDigest::new(); policies.len()];
            self.policies = Some(policies);
        }
        Ok(self.policies.as_ref().is_some_and(|p| !p.is_empty()))
    }

    /// Note `key` before it changes (and the rows whose share depends on
    /// it). A no-op when no policy has a running digest.
    pub(crate) fn touch(&mut self, conn: &Connection, key: RowKey) -> Result<()> {
        if !self.load(conn)? || self.before.contains_key(&key) {
            return Ok(());
        }
        let deps = self.dependents(conn, &key)?;
        self.note(conn, key)?;
        for d in deps {
            self.note(conn, d)?;
        }
        Ok(())
    }

    /// A project record is about to change: its team (`team`, from the
    /// fact: the row may not exist yet) depends on it under a `project:` policy.
    pub(crate) fn touch_project(&mut self, conn: &Connection, id: &str, team: &str) -> Result<()> {
        if !self.load(conn)? {
            return Ok(());
        }
        self.touch(conn, RowKey::Project(id.to_owned()))?;
        if self.via {
            self.note(conn, RowKey::Team(team.to_owned()))?;
            for agent in members(conn, &format!("team:{team}"))? {
                self.note(conn, RowKey::Membership(format!("team:{team}"), agent))?;
            }
        }
        Ok(())
    }

    /// A memory row that did not exist was just written whole from these
    /// facts (`put_new_memory`): its share is added at once, no row read.
    pub(crate) fn new_memory(
        &mut self,
        conn: &Connection,
        id: &[u8],
        effective: &str,
        facts: [&[u8]; 2],
    ) -> Result<()> {
        if !self.load(conn)? || self.before.contains_key(&RowKey::Memory(id.to_vec())) {
            // Noted already: the flush reads what the row holds then.
            return Ok(());
        }
        let effective = split_grants(effective);
        let terms = facts.map(Term::of);
        let policies = self.policies.as_deref().unwrap_or_default();
        for ((_, p), d) in policies.iter().zip(self.delta.iter_mut()) {
            if decide(p, &effective, false) == MemoryExport::Whole {
                for t in terms {
                    d.insert(t);
                }
            }
        }
        Ok(())
    }

    fn note(&mut self, conn: &Connection, key: RowKey) -> Result<()> {
        if self.before.contains_key(&key) {
            return Ok(());
        }
        let share = share(conn, &key, self.policies.as_deref().unwrap_or_default())?;
        self.before.insert(key, share);
        Ok(())
    }

    fn dependents(&self, conn: &Connection, key: &RowKey) -> Result<Vec<RowKey>> {
        let mut out = Vec::new();
        match key {
            RowKey::Memory(id) => {
                let mut stmt = conn.prepare_cached(
                    "SELECT from_id, to_id, relation FROM links WHERE from_id = ?1
                     UNION SELECT from_id, to_id, relation FROM links WHERE to_id = ?1",
                )?;
                let rows =
                    stmt.query_map([id], |r| Ok(RowKey::Link(r.get(0)?, r.get(1)?, r.get(2)?)))?;
                for r in rows {
                    out.push(r?);
                }
            }
            RowKey::Membership(scope, agent) if self.via => {
                if let Some(p) = scope.strip_prefix("project:")
                    && let Some(team) = project_team(conn, p)?
                {
                    out.push(RowKey::Membership(format!("team:{team}"), agent.clone()));
                }
            }
            _ => {}
        }
        Ok(out)
    }

    /// Add the noted rows' change to the running digests, inside the
    /// transaction, before it commits.
    pub(crate) fn flush(&mut self, conn: &Connection) -> Result<()> {
        let Some(policies) = self.policies.take() else {
            return Ok(());
        };
        if policies.is_empty() {
            return Ok(());
        }
        let before = std::mem::take(&mut self.before);
        let mut delta = std::mem::take(&mut self.delta);
        for (key, was) in before {
            let now = share(conn, &key, &policies)?;
            for ((d, n), w) in delta.iter_mut().zip(&now).zip(&was) {
                d.add(n);
                d.sub(w);
            }
        }
        let mut read =
            conn.prepare_cached("SELECT sum, facts FROM digest_running WHERE policy = ?1")?;
        let mut write = conn
            .prepare_cached("UPDATE digest_running SET sum = ?2, facts = ?3 WHERE policy = ?1")?;
        for ((name, _), d) in policies.iter().zip(&delta) {
            if *d == SetDigest::new() {
                continue;
            }
            // Gone (dropped by a start in this transaction): nothing to keep.
            let Some((sum, facts)): Option<(Vec<u8>, i64)> = read
                .query_row([name], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?
            else {
                continue;
            };
            let mut running = SetDigest::from_parts(&sum, facts as u64)
                .ok_or_else(|| NodeError::Corrupt(format!("running digest of {name}")))?;
            running.add(d);
            write.execute(params![
                name,
                &running.sum_bytes()[..],
                running.facts() as i64
            ])?;
        }
        Ok(())
    }
}

/// The memory export decision the digest uses: from 0, without
/// retractions (`replica::export_facts`' `decide`).
fn decide(
    policy: &PeerPolicy,
    effective: &amos_protocol::Grants,
    tombstoned: bool,
) -> MemoryExport {
    let d = export::memory(
        policy,
        effective,
        &amos_protocol::Grants::private(),
        tombstoned,
    );
    if !policy.is_full() && d == MemoryExport::Retraction {
        MemoryExport::None
    } else {
        d
    }
}

fn project_team(conn: &Connection, p: &str) -> Result<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT team FROM projects WHERE id = ?1")?
        .query_row([p], |r| r.get(0))
        .optional()?)
}

fn members(conn: &Connection, scope: &str) -> Result<Vec<String>> {
    let mut stmt = conn.prepare_cached("SELECT agent FROM memberships WHERE scope = ?1")?;
    let rows = stmt.query_map([scope], |r| r.get(0))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// A memory's export decision per policy, from its row (`None`: no row).
fn memory_decisions(
    conn: &Connection,
    id: &[u8],
    policies: &[(String, PeerPolicy)],
) -> Result<Option<Vec<MemoryExport>>> {
    let row: Option<(String, bool)> = conn
        .prepare_cached("SELECT effective, tombstone_fact IS NOT NULL FROM memories WHERE id = ?1")?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    Ok(row.map(|(effective, tomb)| {
        let effective = split_grants(&effective);
        policies
            .iter()
            .map(|(_, p)| decide(p, &effective, tomb))
            .collect()
    }))
}

/// A `project:` policy's teams and, for each, the projects that reach it
/// (`export::teams_via_projects`).
fn via(
    conn: &Connection,
    policy: &PeerPolicy,
) -> Result<std::collections::BTreeMap<TeamId, Vec<ProjectId>>> {
    let mut err = None;
    let out = export::teams_via_projects(policy, |p| match project_team(conn, p.as_str()) {
        Ok(t) => t.and_then(|t| TeamId::parse(&t).ok()),
        Err(e) => {
            err = Some(e);
            None
        }
    });
    match err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// The share of one row in each policy's digest: the facts of it that
/// policy's export from 0 without retractions sends.
fn share(
    conn: &Connection,
    key: &RowKey,
    policies: &[(String, PeerPolicy)],
) -> Result<Vec<SetDigest>> {
    let mut out = vec![SetDigest::new(); policies.len()];
    let one = |sql: &str, args: &[&dyn rusqlite::ToSql]| -> Result<Option<Vec<u8>>> {
        Ok(conn
            .prepare_cached(sql)?
            .query_row(args, |r| r.get::<_, Vec<u8>>(0))
            .optional()?)
    };
    match key {
        RowKey::Memory(id) => {
            type Row = (
                String,
                Option<Vec<u8>>,
                Option<Vec<u8>>,
                Option<Vec<u8>>,
                bool,
            );
            let row: Option<Row> = conn
                .prepare_cached(
                    "SELECT effective, content_fact, acl_fact, tombstone_fact, edited
                     FROM memories WHERE id = ?1",
                )?
                .query_row([id], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                })
                .optional()?;
            let Some((effective, content, acl, tomb, edited)) = row else {
                return Ok(out);
            };
            let effective = split_grants(&effective);
            let tombstoned = tomb.is_some();
            let mut log: Vec<Term> = Vec::new();
            if edited {
                let mut stmt = conn.prepare_cached(
                    "SELECT fact FROM memory_text WHERE memory = ?1 AND fact IS NOT NULL",
                )?;
                let mut rows = stmt.query([id])?;
                while let Some(r) = rows.next()? {
                    let f: Vec<u8> = r.get(0)?;
                    if content.as_ref() != Some(&f) {
                        log.push(Term::of(&f));
                    }
                }
            }
            let (content, acl, tomb) = (
                content.as_deref().map(Term::of),
                acl.as_deref().map(Term::of),
                tomb.as_deref().map(Term::of),
            );
            for ((_, p), d) in policies.iter().zip(out.iter_mut()) {
                match decide(p, &effective, tombstoned) {
                    MemoryExport::None => {}
                    MemoryExport::Retraction => {
                        for t in [acl, tomb].into_iter().flatten() {
                            d.insert(t);
                        }
                    }
                    MemoryExport::Whole => {
                        for t in log
                            .iter()
                            .copied()
                            .chain([content, acl, tomb].into_iter().flatten())
                        {
                            d.insert(t);
                        }
                    }
                }
            }
        }
        RowKey::Link(a, b, rel) => {
            let Some(fact) = one(
                "SELECT fact FROM links WHERE from_id = ?1 AND to_id = ?2 AND relation = ?3",
                &[a, b, rel],
            )?
            else {
                return Ok(out);
            };
            let t = Term::of(&fact);
            let ends = |id: &[u8]| -> Result<Vec<MemoryExport>> {
                Ok(memory_decisions(conn, id, policies)?
                    .unwrap_or_else(|| vec![MemoryExport::None; policies.len()]))
            };
            let (ea, eb) = (ends(a)?, ends(b)?);
            for (i, d) in out.iter_mut().enumerate() {
                if export::link(ea[i], eb[i]) {
                    d.insert(t);
                }
            }
        }
        RowKey::Team(id) => {
            let Some(fact) = one("SELECT fact FROM teams WHERE id = ?1", &[id])? else {
                return Ok(out);
            };
            let t = Term::of(&fact);
            let Ok(team) = TeamId::parse(id) else {
                return Ok(out);
            };
            for ((_, p), d) in policies.iter().zip(out.iter_mut()) {
                let direct = export::org(p, &OrgScope::Team(team.clone()));
                let through =
                    !direct && p.projects().next().is_some() && via(conn, p)?.contains_key(&team);
                if direct || through {
                    d.insert(t);
                }
            }
        }
        RowKey::Project(id) => {
            let Some(fact) = one("SELECT fact FROM projects WHERE id = ?1", &[id])? else {
                return Ok(out);
            };
            let t = Term::of(&fact);
            let Ok(project) = ProjectId::parse(id) else {
                return Ok(out);
            };
            for ((_, p), d) in policies.iter().zip(out.iter_mut()) {
                if export::org(p, &OrgScope::Project(project.clone())) {
                    d.insert(t);
                }
            }
        }
        RowKey::Membership(scope, agent) => {
            let Some(fact) = one(
                "SELECT fact FROM memberships WHERE scope = ?1 AND agent = ?2",
                &[scope, agent],
            )?
            else {
                return Ok(out);
            };
            let t = Term::of(&fact);
            let Some(org) = crate::store::org::parse_org_scope(scope) else {
                return Ok(out);
            };
            let mut member = conn.prepare_cached(
                "SELECT EXISTS(SELECT 1 FROM memberships WHERE scope = ?1 AND agent = ?2 AND present = 1)",
            )?;
            for ((_, p), d) in policies.iter().zip(out.iter_mut()) {
                let mut admitted = export::org(p, &org);
                if !admitted
                    && let OrgScope::Team(team) = &org
                    && p.projects().next().is_some()
                    && let Some(projects) = via(conn, p)?.get(team)
                {
                    for pr in projects {
                        if member
                            .query_row(params![format!("project:{pr}"), agent], |r| r.get(0))?
                        {
                            admitted = true;
                            break;
                        }
                    }
                }
                if admitted {
                    d.insert(t);
                }
            }
        }
        RowKey::Agent(id) | RowKey::Profile(id) => {
            let sql = if matches!(key, RowKey::Agent(_)) {
                "SELECT fact FROM agents WHERE id = ?1"
            } else {
                "SELECT fact FROM profiles WHERE agent = ?1"
            };
            let Some(fact) = one(sql, &[id])? else {
                return Ok(out);
            };
            let t = Term::of(&fact);
            for ((_, p), d) in policies.iter().zip(out.iter_mut()) {
                if export::registry(p) {
                    d.insert(t);
                }
            }
        }
    }
    Ok(out)
}

/// The running digest of `policy`, or `None` if it has none yet.
pub(crate) fn running(conn: &Connection, policy: &str) -> Result<Option<SetDigest>> {
    let row: Option<(Vec<u8>, i64)> = conn
        .prepare_cached("SELECT sum, facts FROM digest_running WHERE policy = ?1")?
        .query_row([policy], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    Ok(row.and_then(|(s, n)| SetDigest::from_parts(&s, n as u64)))
}

/// Start keeping a running digest of `policy` from `scan` (the full scan,
/// computed in the same write transaction), dropping the running digests
/// no peer's policy names (but `full`) when there are too many.
pub(crate) fn start(conn: &Connection, policy: &str, scan: &SetDigest) -> Result<()> {
    let n: i64 = conn.query_row("SELECT COUNT(*) FROM digest_running", [], |r| r.get(0))?;
    if n as usize >= MAX_RUNNING {
        conn.execute(
            "DELETE FROM digest_running WHERE policy != 'full'
               AND policy NOT IN (SELECT policy FROM peers)",
            [],
        )?;
    }
    conn.execute(
        "INSERT INTO digest_running(policy, sum, facts) VALUES (?1, ?2, ?3)
         ON CONFLICT(policy) DO UPDATE SET sum = excluded.sum, facts = excluded.facts",
        params![policy, &scan.sum_bytes()[..], scan.facts() as i64],
    )?;
    Ok(())
}

/// [`running`] through any readable view of the store.
#[cfg(test)]
pub(crate) fn running_of(
    conn: &(impl super::Readable + ?Sized),
    policy: &PeerPolicy,
) -> Result<Option<SetDigest>> {
    running(super::sql(conn), &policy.to_string())
}
