//! The node API: every operation the CLI (and later MCP) offers, as one
//! method each, so no front end holds logic of its own.
//!
//! A write turns into signed facts ([`Node::commit`]) stamped with the
//! persisted HLC. A read builds the requester's [`AuthorizedScopes`] from the
//! org graph *as stored now*, and every memory it returns comes from the
//! store's gated readers ([`Store::visible`] and friends) as a
//! [`Visible`] admitted by [`AuthorizedScopes::admit`].
//!
//! Invariant: a memory the requester cannot see is reported exactly like one
//! that does not exist ([`NodeError::NoSuchMemory`]); owner-only operations
//! on a visible memory refuse others with [`NodeError::Refused`].

use std::borrow::Cow;
use std::sync::Arc;

use amos_acl::{AuthorizedScopes, Visible};
use amos_protocol::{
    AgentFact, AgentId, Fact, FactBody, Grants, LinkFact, MAX_TIME_MS, MembershipFact, MemoryAcl,
    MemoryContent, MemoryFixed, MemoryId, MemoryText, MemoryTombstone, MemoryType, NodeId,
    NodeIdentity, OrgScope, ProjectFact, ProjectId, Relation, Scope, SignedFact, TeamFact, TeamId,
    Validity, Verified, check_tags, check_text, check_unit,
};
use rand::RngExt;

use crate::clock::{SystemClock, WallClock};
use crate::error::{NodeError, Result};
use crate::home::Home;
use crate::index::RecallIndex;
use crate::index::vectors::VectorIndex;
use crate::recall::RecallMode;
use crate::recall::time::{self, TimeQuery, ValidTime};
use crate::store::memory::MemoryRecord;
use crate::store::org::{self, AgentInfo, ProjectInfo, StoredOrg, TeamInfo};
use crate::store::{Readable, Store, Tx};
use amos_embed::StaticModel;

/// A new memory as a caller describes it.
#[derive(Debug, Clone)]
pub struct NewMemory {
    pub text: String,
    pub kind: MemoryType,
    pub share: Vec<Scope>,
    pub tags: Vec<String>,
    pub importance: f32,
    pub pinned: bool,
    pub expires_ms: Option<u64>,
    /// The memory this one replaces (it must be visible to the requester).
    pub supersedes: Option<MemoryId>,
    /// When the content was true in the world.
    pub validity: Validity,
}

/// A point in time as a user writes it: an RFC 3339 time or date
/// (`2026-03-01`, `2026-03-01T09:30:00Z`), `now`, or an offset from `now_ms`
/// (`-7d`, `+12h`; a bare duration such as `7d` counts back). A time past
/// [`MAX_TIME_MS`] is refused (docs/design.md §4).
pub fn parse_time(s: &str, now_ms: u64) -> Result<u64> {
    within_bound(parse_time_unbounded(s, now_ms)?, "time", s)
}

/// [`parse_time`] without the bound: only a malformed time is an error.
pub(crate) fn parse_time_unbounded(s: &str, now_ms: u64) -> Result<u64> {
    let s = s.trim();
    if s == "now" {
        return Ok(now_ms);
    }
    let (sign, rest) = match s.as_bytes().first() {
        Some(b'+') => (1i8, &s[1..]),
        Some(b'-') => (-1, &s[1..]),
        _ => (-1, s),
    };
    if let Ok(d) = humantime::parse_duration(rest.trim()) {
        let d = duration_ms(d);
        return Ok(if sign > 0 {
            now_ms.saturating_add(d)
        } else {
            now_ms.saturating_sub(d)
        });
    }
    let t = humantime::parse_rfc3339_weak(s)
        .or_else(|_| humantime::parse_rfc3339_weak(&format!("{s} 00:00:00")))
        .map_err(|_| {
            NodeError::BadInput(format!(
                "malformed time {s:?}: use an RFC 3339 time or date (2026-03-01), now, or an offset (-7d)"
            ))
        })?;
    Ok(t.duration_since(std::time::UNIX_EPOCH)
        .map(duration_ms)
        .unwrap_or(0))
}

/// A duration in whole ms, saturating (`as u64` would wrap a huge one
/// round to a small time).
fn duration_ms(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `ms`, if it is at most [`MAX_TIME_MS`], the latest time amos keeps;
/// past it, one line naming the input: what (`time`, `--expires`, …) and
/// how the user wrote it.
pub(crate) fn within_bound(ms: u64, what: &str, input: &str) -> Result<u64> {
    if ms <= MAX_TIME_MS {
        return Ok(ms);
    }
    let input = input.trim();
    let when = if input.starts_with(|c: char| c.is_ascii_digit()) && !input.contains('-') {
        format!("{input} from now")
    } else {
        input.to_owned()
    };
    Err(NodeError::BadInput(format!(
        "{what} {when} is past {}, the latest time amos keeps",
        crate::clock::rfc3339(MAX_TIME_MS)
    )))
}

/// A validity's ends must be in order; an unset start is the memory's
/// creation at `created_ms`.
pub(crate) fn check_validity(v: &Validity, created_ms: u64) -> Result<()> {
    if let Some(to) = v.to_ms
        && to <= v.from_ms.unwrap_or(created_ms)
    {
        return Err(NodeError::BadInput(match v.from_ms {
            Some(_) => "valid-to must be later than valid-from".into(),
            None => {
                "valid-to must be later than valid-from, which defaults to the memory's creation"
                    .into()
            }
        }));
    }
    Ok(())
}

/// An expiry as a user writes it: a duration from `now_ms` (`30d`, `12h`)
/// or an RFC 3339 time. One past [`MAX_TIME_MS`] is refused.
pub fn parse_expiry(s: &str, now_ms: u64) -> Result<u64> {
    within_bound(parse_expiry_unbounded(s, now_ms)?, "expiry", s)
}

/// [`parse_expiry`] without the bound: only a malformed expiry is an error.
pub(crate) fn parse_expiry_unbounded(s: &str, now_ms: u64) -> Result<u64> {
    if let Ok(d) = humantime::parse_duration(s) {
        return Ok(now_ms.saturating_add(duration_ms(d)));
    }
    let t = humantime::parse_rfc3339_weak(s).map_err(|_| {
        NodeError::BadInput(format!(
            "malformed expiry {s:?}: use a duration (30d, 12h) or an RFC 3339 time"
        ))
    })?;
    Ok(t.duration_since(std::time::UNIX_EPOCH)
        .map(duration_ms)
        .unwrap_or(0))
}

impl NewMemory {
    pub fn new(text: impl Into<String>) -> Self {
        NewMemory {
            text: text.into(),
            kind: MemoryType::default(),
            share: Vec::new(),
            tags: Vec::new(),
            importance: 0.5,
            pinned: false,
            expires_ms: None,
            supersedes: None,
            validity: Validity::default(),
        }
    }
}

/// What `amos init` reports.
#[derive(Debug, Clone, serde::Serialize)]
pub struct InitReport {
    pub node_id: String,
    pub home: String,
    pub created: bool,
}

/// What one recall reads, caught up: see [`Node::recall_parts`].
pub(crate) struct RecallParts<'a> {
    pub index: &'a RecallIndex,
    pub vectors: Option<(&'a VectorIndex, &'a StaticModel)>,
    pub store: &'a mut Store,
    /// The thread a recall's vector walk runs on while it reads rows; only
    /// with `vectors` (`None`: a lexical recall, a node's first, one core,
    /// or no thread could be started; the walk then runs first, on the
    /// caller's thread).
    pub walker: Option<&'a rayon::ThreadPool>,
}

/// An open node: identity, store and (lazily) the index.
pub struct Node {
    home: Home,
    pub(crate) identity: NodeIdentity,
    name: String,
    pub(crate) store: Store,
    index: Option<RecallIndex>,
    /// The vector index and the model that fills it, opened on first use.
    vectors: Option<(VectorIndex, Cow<'static, StaticModel>)>,
    /// The recall's second thread ([`RecallParts::walker`]), started with
    /// the second recall that walks the vectors: a process that recalls
    /// once (a CLI command) would pay more to start it than it saves.
    /// (`None`: not tried yet; `Some(None)`: no thread, walk in line.)
    pub(crate) walker: Option<Option<rayon::ThreadPool>>,
    /// Whether a recall has walked the vectors yet.
    walked: bool,
    pub(crate) clock: Arc<dyn WallClock>,
    /// The front end reads come through, for the read audit (`api::reads`).
    pub(crate) front: &'static str,
}

/// The one-thread pool a recall's vector walk runs on, where there is a
/// second core for it; `None` otherwise, or when no thread can be started.
fn start_walker() -> Option<rayon::ThreadPool> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores < 2 {
        return None;
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .thread_name(|_| "amos-vector-walk".to_owned())
        .build()
        .map_err(|e| tracing::debug!(error = %e, "no vector-walk thread; walking in line"))
        .ok()
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Node({:?})", self.identity.node_id())
    }
}

impl Node {
    /// Create a home (identity, database) if it does not exist; idempotent.
    pub fn init(home: &Home, name: Option<&str>) -> Result<InitReport> {
        let mut rng = rand::rng();
        let secret: [u8; 32] = rng.random();
        let epoch: [u8; 16] = rng.random();
        let default_name = std::env::var("HOSTNAME").unwrap_or_else(|_| "amos".into());
        let (identity, created) = home.create(name.unwrap_or(&default_name), secret)?;
        Store::create(&home.db_path(), epoch)?;
        Ok(InitReport {
            node_id: identity.node_id().to_string(),
            home: home.root().display().to_string(),
            created,
        })
    }

    /// Open an existing home with the system clock.
    pub fn open(home: &Home) -> Result<Node> {
        Node::open_with_clock(home, Arc::new(SystemClock))
    }

    /// Open an existing home with an injected clock (tests).
    pub fn open_with_clock(home: &Home, clock: Arc<dyn WallClock>) -> Result<Node> {
        let info = home.info()?;
        let identity = home.load_identity()?;
        let store = Store::open(&home.db_path())?;
        Ok(Node {
            home: home.clone(),
            identity,
            name: info.name,
            store,
            index: None,
            vectors: None,
            walker: None,
            walked: false,
            clock,
            front: "cli",
        })
    }

    pub fn node_id(&self) -> NodeId {
        self.identity.node_id()
    }
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn home(&self) -> &Home {
        &self.home
    }
    /// The node's signing identity (for bundle trailers and pairing).
    pub(crate) fn identity(&self) -> &NodeIdentity {
        &self.identity
    }
    pub fn store(&self) -> &Store {
        &self.store
    }
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// The index, opened on first use.
    pub fn index(&mut self) -> Result<&mut RecallIndex> {
        if self.index.is_none() {
            self.index = Some(RecallIndex::open(&self.home)?);
        }
        self.index
            .as_mut()
            .ok_or_else(|| NodeError::Index("index not open".into()))
    }

    /// The embedding model: `--model`, else `AMOS_MODEL`, else the built-in
    /// one. A directory that is not a model is bad input.
    fn load_model(&self) -> Result<Cow<'static, StaticModel>> {
        let model = match self.home.model_dir() {
            Some(dir) => StaticModel::from_dir(dir).map(Cow::Owned),
            None => StaticModel::from_env(),
        };
        model.map_err(|e| NodeError::BadInput(format!("embedding model: {e}")))
    }

    /// The vector index, its model and the store, opened on first use.
    fn vector_parts(&mut self) -> Result<(&mut VectorIndex, &StaticModel, &mut Store)> {
        if self.vectors.is_none() {
            let model = self.load_model()?;
            self.vectors = Some((VectorIndex::open(&self.home)?, model));
        }
        let Node { vectors, store, .. } = self;
        let (vectors, model) = vectors
            .as_mut()
            .ok_or_else(|| NodeError::Index("vector index not open".into()))?;
        Ok((vectors, model, store))
    }

    /// Catch up what a recall in `mode` reads — the full-text index (even
    /// in semantic mode: resonance and `--known-at` use its analyzer) and,
    /// unless lexical, the vector index — and hand them out with the store.
    pub(crate) fn recall_parts(&mut self, mode: RecallMode) -> Result<RecallParts<'_>> {
        self.index()?;
        if mode.semantic() {
            self.vector_parts()?;
        }
        let Node {
            index,
            vectors,
            store,
            walker,
            walked,
            ..
        } = self;
        let index = index
            .as_mut()
            .ok_or_else(|| NodeError::Index("index not open".into()))?;
        index.catch_up(store)?;
        let vectors = match vectors.as_mut() {
            Some((v, model)) if mode.semantic() => {
                v.catch_up(store, model)?;
                Some((&*v, &**model))
            }
            _ => None,
        };
        let walker = match vectors {
            Some(_) if *walked => walker.get_or_insert_with(start_walker).as_ref(),
            _ => None,
        };
        *walked |= vectors.is_some();
        Ok(RecallParts {
            index,
            vectors,
            store,
            walker,
        })
    }

    /// Catch the vector index up: what the next semantic search would
    /// otherwise do first for it.
    pub(crate) fn caught_up_vectors(&mut self) -> Result<()> {
        let (vectors, model, store) = self.vector_parts()?;
        vectors.catch_up(store, model).map(|_| ())
    }

    /// Drop and rebuild the vector index; returns what it did and `(vectors, bytes)`.
    pub(crate) fn rebuild_vectors(
        &mut self,
        progress: &crate::progress::Progress,
    ) -> Result<(crate::index::CatchUp, (u64, u64))> {
        let (vectors, model, store) = self.vector_parts()?;
        let done = vectors.rebuild(store, model, progress)?;
        Ok((done, vectors.stats()?))
    }

    /// Catch the index up and hand out both it and the store.
    pub fn caught_up_index(&mut self) -> Result<(&RecallIndex, &mut Store)> {
        self.index()?;
        let Node { index, store, .. } = self;
        let index = index
            .as_mut()
            .ok_or_else(|| NodeError::Index("index not open".into()))?;
        index.catch_up(store)?;
        Ok((index, store))
    }

    /// Drop and rebuild the index; returns what it did and `(docs, bytes)`.
    pub(crate) fn rebuild_index(
        &mut self,
        progress: &crate::progress::Progress,
    ) -> Result<(crate::index::CatchUp, (u64, u64))> {
        self.index()?;
        let Node { index, store, .. } = self;
        let index = index
            .as_mut()
            .ok_or_else(|| NodeError::Index("index not open".into()))?;
        let done = index.rebuild(store, progress)?;
        Ok((done, index.stats()))
    }

    /// Sign and store facts authored by this node, all in one transaction.
    /// `build` gets the transaction (to read current state) and returns the
    /// bodies to write; each gets its own fresh clock.
    pub(crate) fn commit<T>(
        &mut self,
        build: impl FnOnce(&mut Tx<'_>) -> Result<(Vec<FactBody>, T)>,
    ) -> Result<(Vec<Verified<SignedFact>>, T)> {
        let now = self.clock.now_ms();
        let me = self.identity.node_id();
        let identity = &self.identity;
        self.store.write(|tx| {
            let (bodies, out) = build(tx)?;
            let mut unsigned = Vec::with_capacity(bodies.len());
            for body in bodies {
                unsigned.push(Fact {
                    clock: tx.tick(now, me)?,
                    body,
                });
            }
            let facts = sign_all(identity, unsigned)?;
            for signed in &facts {
                tx.put(&admit_local(identity, signed.clone())?)?;
            }
            Ok((facts, out))
        })
    }

    // ---------------------------------------------------------------- requesters

    /// The gate for `agent`, built from the org graph as stored now. An
    /// unknown agent is bad input (there is no implicit requester).
    pub fn requester(&self, agent: &str) -> Result<AuthorizedScopes> {
        let agent = AgentId::parse(agent)?;
        if !org::agent_present(&self.store, &agent)? {
            return Err(NodeError::BadInput(format!(
                "unknown agent {agent} (register it with `amos agent add {agent}`)"
            )));
        }
        Ok(AuthorizedScopes::for_agent(agent, &StoredOrg(&self.store)))
    }

    /// Read a memory for `who`: missing and invisible are the same answer.
    /// A read the read audit records (`get`).
    pub fn get(&self, who: &AuthorizedScopes, id: &str) -> Result<Visible<MemoryRecord>> {
        let m = self.gated(who, id)?;
        self.audit_reads(who, &[m.id], "get");
        Ok(m)
    }

    /// [`Node::get`] for the node's own checks (the memory an update, share,
    /// link or feedback names): not a read shown to the agent, not audited.
    pub(crate) fn gated(&self, who: &AuthorizedScopes, id: &str) -> Result<Visible<MemoryRecord>> {
        let not_found = || NodeError::NoSuchMemory(id.trim().to_owned());
        let mid: MemoryId = id.parse().map_err(|_| not_found())?;
        self.store
            .visible(who, &[mid], self.now_ms())?
            .pop()
            .ok_or_else(not_found)
    }

    /// Newest first, gated.
    pub fn list(
        &self,
        who: &AuthorizedScopes,
        kind: Option<&MemoryType>,
        limit: usize,
    ) -> Result<Vec<Visible<MemoryRecord>>> {
        if limit == 0 {
            return Err(NodeError::BadInput("--limit must be at least 1".into()));
        }
        let out = self.store.visible_newest(who, kind, limit, self.now_ms())?;
        let ids: Vec<MemoryId> = out.iter().map(|m| m.id).collect();
        self.audit_reads(who, &ids, "list");
        Ok(out)
    }

    /// [`Node::list`] under time filters (`amos list --since/--until/
    /// --valid-at/--known-at`): newest first, each with its valid time.
    pub fn list_in_time(
        &self,
        who: &AuthorizedScopes,
        kind: Option<&MemoryType>,
        limit: usize,
        q: &TimeQuery,
    ) -> Result<Vec<(Visible<MemoryRecord>, ValidTime)>> {
        let out = self.visible_in_time(who, kind, limit, q)?;
        let ids: Vec<MemoryId> = out.iter().map(|(m, _)| m.id).collect();
        self.audit_reads(who, &ids, "list");
        Ok(out)
    }

    /// [`Node::list_in_time`] without the read audit, for callers that show
    /// only part of it (the timeline audits what it shows).
    pub(crate) fn visible_in_time(
        &self,
        who: &AuthorizedScopes,
        kind: Option<&MemoryType>,
        limit: usize,
        q: &TimeQuery,
    ) -> Result<Vec<(Visible<MemoryRecord>, ValidTime)>> {
        if limit == 0 {
            return Err(NodeError::BadInput("--limit must be at least 1".into()));
        }
        let now = self.now_ms();
        let mut fetch = limit;
        loop {
            let recs = self.store.visible_newest(who, kind, fetch, now)?;
            let exhausted = recs.len() < fetch;
            let mut out = time::view(&self.store, who, recs, q, now)?;
            if out.len() >= limit || exhausted {
                out.truncate(limit);
                return Ok(out);
            }
            fetch = fetch.saturating_mul(4);
        }
    }

    // ---------------------------------------------------------------- org graph

    pub(crate) fn check_grant_target(conn: &(impl Readable + ?Sized), s: &Scope) -> Result<()> {
        let ok = match s {
            Scope::Private | Scope::Global => true,
            Scope::Agent(a) => org::agent_present(conn, a)?,
            Scope::Team(t) => org::team_present(conn, t),
            Scope::Project(p) => org::project_state(conn, p).is_some_and(|p| p.present),
        };
        if ok {
            Ok(())
        } else {
            let what = match s {
                Scope::Agent(_) => "agent",
                Scope::Team(_) => "team",
                _ => "project",
            };
            let id = s.to_string();
            let id = id.split_once(':').map(|x| x.1).unwrap_or(&id);
            Err(NodeError::BadInput(format!("unknown {what} {id}")))
        }
    }

    /// Register (or update) an agent, optionally joining teams.
    pub fn agent_add(&mut self, id: &str, kind: &str, teams: &[String]) -> Result<()> {
        let id = AgentId::parse(id)?;
        let teams = teams
            .iter()
            .map(|t| TeamId::parse(t))
            .collect::<Result<Vec<_>, _>>()?;
        let kind = kind.to_owned();
        let me = self.node_id();
        self.commit(|tx| {
            for t in &teams {
                if !org::team_present(tx, t) {
                    return Err(NodeError::BadInput(format!("unknown team {t}")));
                }
                check_org_authority(tx, me, &OrgScope::Team(t.clone()))?;
            }
            let mut bodies = vec![FactBody::Agent(AgentFact {
                id: id.clone(),
                kind,
                display_name: id.to_string(),
                present: true,
            })];
            for t in teams {
                bodies.push(membership(OrgScope::Team(t), &id, true));
            }
            Ok((bodies, ()))
        })?;
        Ok(())
    }

    pub fn agent_list(&self) -> Result<Vec<AgentInfo>> {
        org::list_agents(&self.store)
    }

    pub fn team_create(&mut self, id: &str, name: Option<&str>) -> Result<()> {
        let id = TeamId::parse(id)?;
        let name = name.unwrap_or(id.as_str()).to_owned();
        let me = self.node_id();
        self.commit(|tx| {
            let origin = check_org_authority(tx, me, &OrgScope::Team(id.clone()))?;
            Ok((
                vec![FactBody::Team(TeamFact {
                    id,
                    origin,
                    name,
                    present: true,
                })],
                (),
            ))
        })?;
        Ok(())
    }

    pub fn team_delete(&mut self, id: &str) -> Result<()> {
        let id = TeamId::parse(id)?;
        let me = self.node_id();
        self.commit(|tx| {
            let name = org::list_teams(tx)?
                .into_iter()
                .find(|t| t.id == id.as_str())
                .map(|t| t.name)
                .ok_or_else(|| NodeError::BadInput(format!("unknown team {id}")))?;
            let origin = check_org_authority(tx, me, &OrgScope::Team(id.clone()))?;
            Ok((
                vec![FactBody::Team(TeamFact {
                    id,
                    origin,
                    name,
                    present: false,
                })],
                (),
            ))
        })?;
        Ok(())
    }

    pub fn team_list(&self) -> Result<Vec<TeamInfo>> {
        org::list_teams(&self.store)
    }

    /// Add or remove a team member.
    pub fn team_member(&mut self, team: &str, agent: &str, present: bool) -> Result<()> {
        let team = TeamId::parse(team)?;
        let agent = AgentId::parse(agent)?;
        let me = self.node_id();
        self.commit(|tx| {
            check_org_authority(tx, me, &OrgScope::Team(team.clone()))?;
            let fact = team_member_fact(tx, &team, &agent, present, AgentAt::Here)?;
            Ok((vec![fact], ()))
        })?;
        Ok(())
    }

    pub fn project_create(&mut self, id: &str, team: &str, name: Option<&str>) -> Result<()> {
        let id = ProjectId::parse(id)?;
        let team = TeamId::parse(team)?;
        let name = name.unwrap_or(id.as_str()).to_owned();
        let me = self.node_id();
        self.commit(|tx| {
            if !org::team_present(tx, &team) {
                return Err(NodeError::BadInput(format!("unknown team {team}")));
            }
            check_org_authority(tx, me, &OrgScope::Team(team.clone()))?;
            let origin = check_org_authority(tx, me, &OrgScope::Project(id.clone()))?;
            if let Some(existing) = org::project_state(tx, &id)
                && existing.team != team
            {
                return Err(NodeError::BadInput(format!(
                    "project {id} belongs to team {}; a project cannot move teams",
                    existing.team
                )));
            }
            Ok((
                vec![FactBody::Project(ProjectFact {
                    id,
                    team,
                    origin,
                    name,
                    present: true,
                })],
                (),
            ))
        })?;
        Ok(())
    }

    pub fn project_delete(&mut self, id: &str) -> Result<()> {
        let id = ProjectId::parse(id)?;
        let me = self.node_id();
        self.commit(|tx| {
            let p = org::list_projects(tx)?
                .into_iter()
                .find(|p| p.id == id.as_str())
                .ok_or_else(|| NodeError::BadInput(format!("unknown project {id}")))?;
            let origin = check_org_authority(tx, me, &OrgScope::Project(id.clone()))?;
            Ok((
                vec![FactBody::Project(ProjectFact {
                    id,
                    team: TeamId::parse(&p.team)?,
                    origin,
                    name: p.name,
                    present: false,
                })],
                (),
            ))
        })?;
        Ok(())
    }

    pub fn project_list(&self) -> Result<Vec<ProjectInfo>> {
        org::list_projects(&self.store)
    }

    /// Add or remove a project member; adding needs membership of the project's team.
    pub fn project_member(&mut self, project: &str, agent: &str, present: bool) -> Result<()> {
        let project = ProjectId::parse(project)?;
        let agent = AgentId::parse(agent)?;
        let me = self.node_id();
        self.commit(|tx| {
            check_org_authority(tx, me, &OrgScope::Project(project.clone()))?;
            let (fact, _) = project_member_fact(tx, &project, &agent, present, AgentAt::Here)?;
            Ok((vec![fact], ()))
        })?;
        Ok(())
    }

    // ---------------------------------------------------------------- memories

    /// Store a new memory owned by the requester. Default visibility: private.
    pub fn add(&mut self, who: &AuthorizedScopes, new: NewMemory) -> Result<MemoryId> {
        let ids = self.add_many(vec![(who, new)])?;
        ids.into_iter()
            .next()
            .ok_or_else(|| NodeError::Corrupt("add produced no id".into()))
    }

    /// Store several memories in one transaction (all or none), each owned by
    /// its requester. The same checks and facts as [`Node::add`].
    pub fn add_many(
        &mut self,
        items: Vec<(&AuthorizedScopes, NewMemory)>,
    ) -> Result<Vec<MemoryId>> {
        let now = self.now_ms();
        let origin = self.node_id();
        let mut rng = rand::rng();
        let mut prepared = Vec::with_capacity(items.len());
        for (who, new) in items {
            let owner = who.requester().cloned().ok_or_else(|| {
                NodeError::BadInput("a memory needs an owner: pass --as AGENT".into())
            })?;
            check_text(&new.text)?;
            check_tags(&new.tags)?;
            check_unit("importance", new.importance)?;
            if new.expires_ms.is_some_and(|e| e <= now) {
                return Err(NodeError::BadInput(
                    "expiry is in the past: a memory must expire after it is made".into(),
                ));
            }
            check_validity(&new.validity, now)?;
            if let Some(old) = new.supersedes {
                // Only what the requester can see may be replaced: a hidden
                // id reads as missing, as everywhere else.
                self.gated(who, &old.to_string())?;
            }
            let id = MemoryId::new(now, rng.random());
            let fixed = MemoryFixed {
                owner,
                created_ms: now,
                origin,
            };
            let grants = Grants::from_scopes(new.share.iter().cloned());
            prepared.push((id, fixed, grants, new));
        }
        let ids = prepared.iter().map(|p| p.0).collect();
        let me = self.identity.node_id();
        let identity = &self.identity;
        self.store.write(|tx| {
            let mut checked: Vec<Scope> = Vec::new();
            let mut unsigned = Vec::with_capacity(2 * prepared.len());
            for (id, fixed, grants, new) in prepared {
                for s in grants.iter() {
                    if !checked.contains(s) {
                        Self::check_grant_target(tx, s)?;
                        checked.push(s.clone());
                    }
                }
                let content = FactBody::MemoryContent(MemoryContent {
                    id,
                    fixed: fixed.clone(),
                    kind: new.kind,
                    text: MemoryText::Plain(new.text),
                    tags: new.tags,
                    importance: new.importance,
                    confidence: 1.0,
                    pinned: new.pinned,
                    expires_ms: new.expires_ms,
                    supersedes: new.supersedes,
                    validity: new.validity,
                });
                let acl = FactBody::MemoryAcl(MemoryAcl { id, fixed, grants });
                unsigned.push(Fact {
                    clock: tx.tick(now, me)?,
                    body: content,
                });
                unsigned.push(Fact {
                    clock: tx.tick(now, me)?,
                    body: acl,
                });
            }
            // Fresh ids: each memory is one new row (content, then acl; a
            // chunk is even, so a pair never straddles two).
            sign_each(identity, unsigned, |chunk| {
                let mut facts = chunk.into_iter();
                while let Some(content) = facts.next() {
                    let acl = facts.next().ok_or_else(|| {
                        NodeError::Corrupt("a memory's content fact came without its acl".into())
                    })?;
                    tx.put_new_memory(
                        &admit_local(identity, content)?,
                        &admit_local(identity, acl)?,
                    )?;
                }
                Ok(())
            })
        })?;
        Ok(ids)
    }

    /// The memory, visible to `who`, that `who` may change: owner (or the
    /// explicit local admin when `admin_ok`), and authored here.
    fn editable(&self, who: &AuthorizedScopes, id: &str, admin_ok: bool) -> Result<MemoryRecord> {
        let rec = self.gated(who, id)?.into_inner();
        if !(who.owns(&rec) || (admin_ok && who.is_admin())) {
            return Err(NodeError::Refused(format!(
                "only the owner ({}) may change memory {}",
                rec.owner(),
                rec.id
            )));
        }
        if rec.origin != self.node_id() {
            return Err(NodeError::Refused(format!(
                "memory {} originates at node {}; a replica is read-only, change it there",
                rec.id,
                rec.origin.short()
            )));
        }
        Ok(rec)
    }

    /// Add (`share`) or remove a grant. Owner only. Returns the new grants.
    pub fn set_grant(
        &mut self,
        who: &AuthorizedScopes,
        id: &str,
        scope: &str,
        share: bool,
    ) -> Result<(MemoryId, Grants)> {
        let scope: Scope = scope.parse()?;
        let rec = self.editable(who, id, false)?;
        let mut grants = rec.grants.clone();
        if share {
            grants.insert(scope.clone());
        } else if scope == Scope::Private {
            return Err(NodeError::BadInput(
                "cannot unshare private; share with a scope instead".into(),
            ));
        } else {
            grants.remove(&scope);
        }
        let fixed = fixed_of(&rec);
        let out = grants.clone();
        self.commit(|tx| {
            if share {
                Self::check_grant_target(tx, &scope)?;
            }
            Ok((
                vec![FactBody::MemoryAcl(MemoryAcl {
                    id: rec.id,
                    fixed,
                    grants,
                })],
                (),
            ))
        })?;
        Ok((rec.id, out))
    }

    /// Tombstone a memory (owner only): terminal, content erased.
    pub fn forget(&mut self, who: &AuthorizedScopes, id: &str) -> Result<MemoryId> {
        let rec = self.editable(who, id, false)?;
        let body = FactBody::MemoryTombstone(MemoryTombstone {
            id: rec.id,
            fixed: fixed_of(&rec),
        });
        self.commit(|_| Ok((vec![body], ())))?;
        Ok(rec.id)
    }

    /// Link two memories the requester can both see.
    pub fn link(
        &mut self,
        who: &AuthorizedScopes,
        a: &str,
        b: &str,
        relation: Option<&str>,
        weight: f32,
    ) -> Result<()> {
        let relation = relation
            .map(Relation::parse)
            .transpose()?
            .unwrap_or_default();
        check_unit("weight", weight)?;
        let from = self.gated(who, a)?.id;
        let to = self.gated(who, b)?.id;
        if from == to {
            return Err(NodeError::BadInput("cannot link a memory to itself".into()));
        }
        self.commit(|_| {
            Ok((
                vec![FactBody::Link(LinkFact {
                    from,
                    to,
                    relation,
                    weight,
                    present: true,
                })],
                (),
            ))
        })?;
        Ok(())
    }

    /// Archive or restore a memory locally (local-only state).
    pub fn set_archived(
        &mut self,
        who: &AuthorizedScopes,
        id: &str,
        archived: bool,
    ) -> Result<bool> {
        let rec = self.gated(who, id)?;
        if !who.owns(&*rec) && !who.is_admin() {
            return Err(NodeError::Refused(format!(
                "only the owner ({}) may archive memory {}",
                rec.owner, rec.id
            )));
        }
        let mid = rec.id;
        self.store.write(|tx| tx.set_archived(&mid, archived))
    }
}

/// Facts signed per chunk: one field inversion for the chunk
/// ([`NodeIdentity::sign_batch`]), and the unit of work handed between
/// threads. Even, so a memory's content and acl facts share a chunk.
pub(crate) const SIGN_CHUNK: usize = 64;

/// Sign facts, in order ([`sign_each`] collected).
pub(crate) fn sign_all(
    identity: &NodeIdentity,
    facts: Vec<Fact>,
) -> Result<Vec<Verified<SignedFact>>> {
    let mut out = Vec::with_capacity(facts.len());
    sign_each(identity, facts, |chunk| {
        out.extend(chunk);
        Ok(())
    })?;
    Ok(out)
}

/// Sign `facts` and hand them to `put` in their order, [`SIGN_CHUNK`] at a
/// time (the last chunk may be shorter), on the calling thread (the one
/// holding the transaction). ed25519 signing is most of a batched write's
/// work, so from two chunks on, other threads (one per further core, at
/// most one per chunk after the first) sign chunks ahead while `put`
/// writes the ones already signed, and the calling thread signs too
/// whenever the next chunk is not ready yet: signing and writing overlap
/// instead of taking turns. The signatures are
/// the same bytes whichever thread makes them (ed25519 is deterministic).
/// The first error, from signing or from `put`, ends the batch; the chunks
/// after it are not handed to `put`.
pub(crate) fn sign_each(
    identity: &NodeIdentity,
    facts: Vec<Fact>,
    mut put: impl FnMut(Vec<Verified<SignedFact>>) -> Result<()>,
) -> Result<()> {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;

    let sign = |chunk: Vec<Fact>| identity.sign_batch(chunk).map_err(NodeError::from);
    let mut chunks: Vec<Vec<Fact>> = Vec::with_capacity(facts.len().div_ceil(SIGN_CHUNK));
    let mut it = facts.into_iter().peekable();
    while it.peek().is_some() {
        chunks.push(it.by_ref().take(SIGN_CHUNK).collect());
    }
    let helpers = std::thread::available_parallelism().map_or(1, |n| n.get()) - 1;
    let helpers = helpers.min(chunks.len().saturating_sub(1));
    if helpers == 0 {
        for chunk in chunks {
            put(sign(chunk)?)?;
        }
        return Ok(());
    }
    let n = chunks.len();
    // Each chunk is taken once: the counter says which is next, the slot
    // holds it until then.
    let slots: Vec<Mutex<Option<Vec<Fact>>>> =
        chunks.into_iter().map(|c| Mutex::new(Some(c))).collect();
    let next = AtomicUsize::new(0);
    let claim = || -> Option<(usize, Vec<Fact>)> {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let slot = slots.get(i)?;
        let chunk = slot.lock().unwrap_or_else(|p| p.into_inner()).take()?;
        Some((i, chunk))
    };
    type Signed = Result<Vec<Verified<SignedFact>>>;
    std::thread::scope(|scope| {
        let (send, signed) = mpsc::channel::<(usize, Signed)>();
        let handles: Vec<_> = (0..helpers)
            .map(|_| {
                let send = send.clone();
                let claim = &claim;
                let sign = &sign;
                scope.spawn(move || {
                    while let Some((i, chunk)) = claim() {
                        // The receiver is gone once the batch failed.
                        if send.send((i, sign(chunk))).is_err() {
                            break;
                        }
                    }
                })
            })
            .collect();
        drop(send);
        let mut ready: Vec<Option<Signed>> = (0..n).map(|_| None).collect();
        let mut written = || -> Result<()> {
            for want in 0..n {
                loop {
                    if let Some(done) = ready[want].take() {
                        put(done?)?;
                        break;
                    }
                    while let Ok((i, done)) = signed.try_recv() {
                        ready[i] = Some(done);
                    }
                    if ready[want].is_some() {
                        continue;
                    }
                    if let Some((i, chunk)) = claim() {
                        ready[i] = Some(sign(chunk));
                        continue;
                    }
                    // Every chunk is taken: wait for a helper's.
                    let (i, done) = signed.recv().map_err(|_| {
                        NodeError::Corrupt("a signing thread stopped before its chunk".into())
                    })?;
                    ready[i] = Some(done);
                }
            }
            Ok(())
        };
        let out = written();
        // Stop the helpers: nothing more to claim, nobody to send to.
        next.store(n, Ordering::Relaxed);
        drop(signed);
        let mut panicked = false;
        for h in handles {
            panicked |= h.join().is_err();
        }
        match out {
            Ok(()) if panicked => Err(NodeError::Corrupt("a signing thread panicked".into())),
            out => out,
        }
    })
}

/// Whether this node may author the record and memberships of `scope`
/// (the org origin rule): it created the scope, or its creator is a `full`
/// peer (the same operator's node); a scope not held yet is created here.
/// Returns the scope's origin. Every other node would refuse such a fact
/// from us, so it is refused here first.
pub(crate) fn check_org_authority(
    conn: &(impl Readable + ?Sized),
    me: NodeId,
    scope: &OrgScope,
) -> Result<NodeId> {
    let Some(origin) = crate::store::replica::org_origin(conn, scope)? else {
        return Ok(me);
    };
    if origin == me
        || crate::store::replica::peer_policy(conn, &origin)?.is_some_and(|p| p.is_full())
    {
        return Ok(origin);
    }
    Err(NodeError::Refused(format!(
        "{scope} was created by node {}; only that node (or its full peers) may change its record or members",
        origin.short()
    )))
}

/// Admit a fact this node just signed (a local write proves its author is
/// this node: [`amos_sync::Admission::local`]).
pub(crate) fn admit_local(
    identity: &NodeIdentity,
    fact: Verified<SignedFact>,
) -> Result<amos_sync::Admission> {
    amos_sync::Admission::local(identity, fact)
        .map_err(|_| NodeError::Corrupt("a local write signed by another key".into()))
}

/// Whose agent a membership write names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AgentAt {
    /// One of this node's agents: registered here and, to join a project,
    /// already a member of the project's team.
    Here,
    /// A joining node's agent (`amos join --as`): registered on that node,
    /// not here; the caller writes its team membership in the same commit.
    Joiner,
}

/// The checks for adding (`present`) or removing `agent` in `team`, as
/// stored in `tx`, and the membership fact to commit.
pub(crate) fn team_member_fact(
    tx: &mut Tx<'_>,
    team: &TeamId,
    agent: &AgentId,
    present: bool,
    at: AgentAt,
) -> Result<FactBody> {
    if !org::team_present(tx, team) {
        return Err(NodeError::BadInput(format!("unknown team {team}")));
    }
    if at == AgentAt::Here && !org::agent_present(tx, agent)? {
        return Err(NodeError::BadInput(format!("unknown agent {agent}")));
    }
    let scope = OrgScope::Team(team.clone());
    if !present && !org::is_member(tx, &scope, agent)? {
        return Err(NodeError::BadInput(format!(
            "agent {agent} is not a member of team {team}"
        )));
    }
    Ok(membership(scope, agent, present))
}

/// Like [`team_member_fact`] for a project; also returns the project's team.
pub(crate) fn project_member_fact(
    tx: &mut Tx<'_>,
    project: &ProjectId,
    agent: &AgentId,
    present: bool,
    at: AgentAt,
) -> Result<(FactBody, TeamId)> {
    let state = org::project_state(tx, project)
        .filter(|p| p.present)
        .ok_or_else(|| NodeError::BadInput(format!("unknown project {project}")))?;
    if at == AgentAt::Here && !org::agent_present(tx, agent)? {
        return Err(NodeError::BadInput(format!("unknown agent {agent}")));
    }
    let scope = OrgScope::Project(project.clone());
    if present {
        if at == AgentAt::Here && !org::is_member(tx, &OrgScope::Team(state.team.clone()), agent)? {
            return Err(NodeError::BadInput(format!(
                "agent {agent} is not a member of team {}, which owns project {project}",
                state.team
            )));
        }
    } else if !org::is_member(tx, &scope, agent)? {
        return Err(NodeError::BadInput(format!(
            "agent {agent} is not a member of project {project}"
        )));
    }
    Ok((membership(scope, agent, present), state.team))
}

fn membership(scope: OrgScope, agent: &AgentId, present: bool) -> FactBody {
    FactBody::Membership(MembershipFact {
        scope,
        agent: agent.clone(),
        role: "member".into(),
        present,
    })
}

fn fixed_of(rec: &MemoryRecord) -> MemoryFixed {
    MemoryFixed {
        owner: rec.owner.clone(),
        created_ms: rec.created_ms,
        origin: rec.origin,
    }
}

/// A new node in a temporary home (kept while the `TempDir` lives) with
/// one registered agent, and that agent as a requester: the set-up of the
/// crate's tests that write memories through the node.
#[cfg(test)]
pub(crate) fn test_node(agent: &str) -> (tempfile::TempDir, Home, Node, AuthorizedScopes) {
    let dir = tempfile::tempdir().unwrap();
    let home = Home::new(dir.path().join("home"));
    Node::init(&home, Some("a")).unwrap();
    let mut node = Node::open(&home).unwrap();
    node.agent_add(agent, "test", &[]).unwrap();
    let who = node.requester(agent).unwrap();
    (dir, home, node, who)
}

#[cfg(test)]
mod tests {
    use amos_protocol::{Hlc, MemoryTombstone};

    use super::*;

    fn tombstones(id: &NodeIdentity, n: usize) -> Vec<Fact> {
        let node = id.node_id();
        (0..n)
            .map(|i| Fact {
                clock: Hlc {
                    wall_ms: 1_000,
                    logical: i as u32,
                    node,
                },
                body: FactBody::MemoryTombstone(MemoryTombstone {
                    id: MemoryId((i as u128).to_be_bytes()),
                    fixed: MemoryFixed {
                        owner: AgentId::parse("a").unwrap(),
                        created_ms: 1,
                        origin: node,
                    },
                }),
            })
            .collect()
    }

    /// Whatever thread signs a chunk, `put` sees every fact once, in order,
    /// signed exactly as `sign` signs it alone, in chunks of `SIGN_CHUNK`.
    #[test]
    fn sign_each_hands_every_fact_over_in_order() {
        let id = NodeIdentity::from_secret([9; 32]);
        for n in [0, 1, 63, 64, 65, 129, 1000, 2001] {
            let facts = tombstones(&id, n);
            let mut seen = Vec::new();
            let mut sizes = Vec::new();
            sign_each(&id, facts.clone(), |chunk| {
                sizes.push(chunk.len());
                seen.extend(chunk);
                Ok(())
            })
            .unwrap();
            assert_eq!(seen.len(), n);
            for (s, f) in seen.iter().zip(facts) {
                assert_eq!(**s, *id.sign(f).unwrap());
            }
            let (last, whole) = sizes.split_last().map_or((0, &[][..]), |(l, w)| (*l, w));
            assert!(whole.iter().all(|s| *s == SIGN_CHUNK), "{n}: {sizes:?}");
            assert!((1..=SIGN_CHUNK).contains(&last) || n == 0, "{n}: {sizes:?}");
        }
    }

    /// The first error ends the batch: from `put`, no later chunk is handed
    /// over; from signing (another node's fact in the middle), the error is
    /// returned and no chunk from it on reaches `put`.
    #[test]
    fn sign_each_stops_at_the_first_error() {
        let id = NodeIdentity::from_secret([9; 32]);
        let mut calls = 0;
        let out = sign_each(&id, tombstones(&id, 1000), |_| {
            calls += 1;
            if calls == 3 {
                return Err(NodeError::BadInput("stop".into()));
            }
            Ok(())
        });
        assert!(matches!(out, Err(NodeError::BadInput(_))));
        assert_eq!(calls, 3);

        let other = NodeIdentity::from_secret([8; 32]);
        let mut facts = tombstones(&id, 1000);
        facts[500] = tombstones(&other, 1).remove(0);
        let mut handed = 0;
        let out = sign_each(&id, facts, |chunk| {
            handed += chunk.len();
            Ok(())
        });
        assert!(out.is_err());
        assert!(handed <= 500 - 500 % SIGN_CHUNK, "{handed}");
    }

    /// A batch large enough to be signed on several threads stores rows whose
    /// facts all verify as this node's, content then acl, with clocks rising
    /// with `seq`, in the order given.
    #[test]
    fn add_many_stores_verified_facts_in_order() {
        let (_dir, _home, mut node, alice) = test_node("alice");
        let items: Vec<_> = (0..300)
            .map(|i| {
                let new = NewMemory {
                    text: format!("memory number {i}"),
                    kind: MemoryType::parse("note").unwrap(),
                    share: if i % 2 == 0 {
                        vec![]
                    } else {
                        vec![Scope::Agent(AgentId::parse("alice").unwrap())]
                    },
                    tags: vec![],
                    importance: 0.5,
                    pinned: false,
                    expires_ms: None,
                    supersedes: None,
                    validity: Validity::default(),
                };
                (&alice, new)
            })
            .collect();
        let ids = node.add_many(items).unwrap();
        let me = node.node_id();
        type Row = (Vec<u8>, String, Vec<u8>, Vec<u8>);
        let rows: Vec<Row> = crate::store::inspect::signed_rows(&node.store)
            .unwrap()
            .into_iter()
            .map(|r| (r.id, r.content, r.content_fact, r.acl_fact))
            .collect();
        assert_eq!(rows.len(), 300);
        let mut last: Option<Hlc> = None;
        for (i, ((mid, text, content, acl), id)) in rows.iter().zip(&ids).enumerate() {
            assert_eq!(&mid[..], &id.0[..]);
            assert_eq!(text, &format!("memory number {i}"));
            let content = SignedFact::decode_verified(content).unwrap();
            let acl = SignedFact::decode_verified(acl).unwrap();
            assert!(matches!(&content.fact.body, FactBody::MemoryContent(c) if c.id == *id));
            assert!(matches!(&acl.fact.body, FactBody::MemoryAcl(a) if a.id == *id));
            for f in [&content, &acl] {
                assert_eq!(f.fact.author(), me);
                assert!(last.is_none_or(|l| l < f.fact.clock));
                last = Some(f.fact.clock);
            }
        }
    }
}
