//! Moving memories in: `amos import SOURCE …`. Each source has a parser
//! (one file each: [`aos`] for agent-memory-os, [`mem0`], [`chatgpt`],
//! [`hermes`], and [`amos`] for this node's own `amos export`) that turns
//! bytes into a neutral [`Plan`] and never touches the node; then
//! [`Node::import`] turns the plan into signed facts of this node, in ONE
//! transaction (all or nothing), exactly as `amos add`, `amos link`, the org
//! commands and `amos profile set` would write them.
//!
//! Idempotent: an imported memory's id is derived from (this node, the
//! source kind, the source's id) by [`derived_id`], and whatever is already
//! held (memory, link, agent, team, project, membership, equal profile) is
//! left alone, so importing the same input twice writes nothing the second
//! time (the digest does not move).
//!
//! Must never: write a fact this node could not author (org records of
//! another origin are refused like `amos team add` refuses them), widen a
//! grant (a token it cannot map makes the memory *private* and is
//! reported), or write anything when the input is malformed (the parser
//! fails first, with the line number, exit 2). Nor reach beyond what the
//! file brings without the operator's word ([`ImportOptions`]): no member
//! added to a team or project that already exists here, no memory or
//! profile of an agent that already exists here (docs/design.md §5.1).

pub mod amos;
pub mod aos;
pub mod chatgpt;
pub mod hermes;
pub mod mem0;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use amos_acl::OrgGraph;
use amos_protocol::{
    AgentFact, AgentId, Fact, FactBody, Grants, LinkFact, MAX_TAG_CHARS, MAX_TAGS, MembershipFact,
    MemoryAcl, MemoryContent, MemoryFixed, MemoryId, MemoryText, MemoryTombstone, MemoryType,
    NodeId, OrgScope, ProfileFact, ProjectFact, ProjectId, Relation, Scope, TeamFact, TeamId,
    Validity, check_text,
};
use serde::Serialize;

use super::memories::check_validity;
use super::node::Node;
use super::org::check_org_authority;
use super::signing::{admit_local, sign_each};
use crate::error::{NodeError, Result};
use crate::progress::Progress;
use crate::store::moves;
use crate::store::org;
use crate::store::profile::{MAX_WEIGHT, ProfileWeights};

/// Where a plan came from; part of every derived id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// An agent-memory-os bundle.
    AgentMemoryOs,
    /// A mem0 export (JSON).
    Mem0,
    /// A ChatGPT data export.
    Chatgpt,
    /// Hermes' memory files.
    Hermes,
    /// An amos export (`amos export`).
    Amos,
}

impl Source {
    /// The name `amos import --from` takes; part of every derived id.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::AgentMemoryOs => "agent-memory-os",
            Source::Mem0 => "mem0",
            Source::Chatgpt => "chatgpt",
            Source::Hermes => "hermes",
            Source::Amos => "amos",
        }
    }
}

/// A memory as a parser read it, mapped to amos's vocabulary.
#[derive(Debug, Clone)]
pub struct PlanMemory {
    /// The source's id (or, for sources without ids, a stable key of the
    /// item): the input of [`derived_id`].
    pub source_id: String,
    /// The owning agent.
    pub owner: AgentId,
    /// The text.
    pub text: String,
    /// Its memory type.
    pub kind: MemoryType,
    /// Grants as the source meant them (private: empty).
    pub grants: Vec<Scope>,
    /// Its tags.
    pub tags: Vec<String>,
    /// Importance.
    pub importance: f32,
    /// Confidence.
    pub confidence: f32,
    /// Pinned in the source.
    pub pinned: bool,
    /// When the source says the memory was made: its valid-from (see
    /// [`source_validity`]).
    pub created_ms: Option<u64>,
    /// When the source says it stopped being true (an amos export's
    /// `valid_to`).
    pub valid_to_ms: Option<u64>,
    /// When it expires (Unix ms), if the source says.
    pub expires_ms: Option<u64>,
    /// Archived in the source: imported archived (local-only state here).
    pub archived: bool,
    /// The source id of the memory this one replaces (an amos export's
    /// `supersedes`): kept when that memory is in the same input.
    pub supersedes: Option<String>,
}

impl PlanMemory {
    /// A note of one agent's own export (`import mem0|chatgpt|hermes --as
    /// AGENT`): owned by `owner`, shared with `share`, defaults otherwise.
    /// The same file imported for two agents makes two sets: the source id
    /// is the agent's and the item's `key`.
    pub fn of_agent(
        owner: &AgentId,
        key: &str,
        text: String,
        share: &[Scope],
        tags: Vec<String>,
        created_ms: Option<u64>,
    ) -> PlanMemory {
        PlanMemory {
            source_id: format!("{owner}\u{0}{key}"),
            owner: owner.clone(),
            text,
            kind: MemoryType::default(),
            grants: share.to_vec(),
            tags,
            importance: 0.5,
            confidence: 1.0,
            pinned: false,
            created_ms,
            valid_to_ms: None,
            expires_ms: None,
            archived: false,
            supersedes: None,
        }
    }
}

/// The files an export given as `path` is made of: `path` itself, or the
/// files of `names` found in it when it is a directory (`what` names the
/// export in the error when none is).
pub fn export_files(path: &Path, names: &[&str], what: &str) -> Result<Vec<PathBuf>> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let found: Vec<PathBuf> = names
        .iter()
        .map(|f| path.join(f))
        .filter(|p| p.is_file())
        .collect();
    if found.is_empty() {
        return Err(NodeError::BadInput(format!(
            "{} is not {what}: no {} in it",
            path.display(),
            names.join(" or ")
        )));
    }
    Ok(found)
}

/// A team with members, as the source has it.
#[derive(Debug, Clone)]
pub struct PlanTeam {
    /// The team's id.
    pub id: TeamId,
    /// Its display name.
    pub name: String,
    /// Its members.
    pub members: Vec<AgentId>,
}

/// A project with members, as the source has it.
#[derive(Debug, Clone)]
pub struct PlanProject {
    /// The project's id.
    pub id: ProjectId,
    /// The team it belongs to.
    pub team: TeamId,
    /// Its display name.
    pub name: String,
    /// Its members.
    pub members: Vec<AgentId>,
}

/// A link between two source memories (by source id).
#[derive(Debug, Clone)]
pub struct PlanLink {
    /// Source id of the memory it starts from.
    pub from: String,
    /// Source id of the memory it points to.
    pub to: String,
    /// The relation.
    pub relation: Relation,
    /// Its weight.
    pub weight: f32,
}

/// What a parser produced: pure data, nothing written yet.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The source it was read from.
    pub source: Source,
    /// Agents to register (owners, grantees and members are added anyway).
    pub agents: BTreeSet<AgentId>,
    /// Teams to create or join.
    pub teams: Vec<PlanTeam>,
    /// Projects to create or join.
    pub projects: Vec<PlanProject>,
    /// The memories.
    pub memories: Vec<PlanMemory>,
    /// Links between them.
    pub links: Vec<PlanLink>,
    /// Profile weights per agent and memory type.
    pub profiles: Vec<(AgentId, Vec<(MemoryType, f32)>)>,
    /// Source ids of deleted memories.
    pub tombstones: Vec<String>,
    /// What the parser could not map, and why → how often.
    pub unmapped: BTreeMap<String, usize>,
}

impl Plan {
    /// An empty plan from `source`.
    pub fn new(source: Source) -> Plan {
        Plan {
            source,
            agents: BTreeSet::new(),
            teams: Vec::new(),
            projects: Vec::new(),
            memories: Vec::new(),
            links: Vec::new(),
            profiles: Vec::new(),
            tombstones: Vec::new(),
            unmapped: BTreeMap::new(),
        }
    }

    /// Note something the plan leaves out or changes, and why.
    pub fn unmapped(&mut self, why: impl Into<String>) {
        *self.unmapped.entry(why.into()).or_default() += 1;
    }
}

/// How to import a plan: what the operator asked for on the command line.
#[derive(Debug, Clone, Copy, Default)]
pub struct ImportOptions {
    /// Report what the import would do; write nothing (`--dry-run`).
    pub dry_run: bool,
    /// Add the file's members to teams and projects that already exist
    /// here (`--add-members`). Without it a file never changes who is in
    /// a team or project it did not bring: those memberships are left out
    /// and listed.
    pub add_members: bool,
    /// Let the file write memories for, and set the profile of, agents
    /// that already exist here: the operator named the owner (`--as`) or
    /// said `--existing-agents`. Without it a file speaks only for the
    /// agents it brings: the rest is left out and counted.
    pub existing_agents: bool,
}

/// A source's name for an agent, team or project as an amos slug: lower
/// case, other characters as `-`, at most 64 characters. `None` if nothing
/// usable is left.
pub fn slug_of(raw: &str) -> Option<String> {
    let mut s: String = raw
        .trim()
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    let start = s.find(|c: char| c.is_ascii_alphanumeric())?;
    s.drain(..start);
    s.truncate(amos_protocol::Slug::MAX_LEN);
    amos_protocol::Slug::is_valid(&s).then_some(s)
}

/// A memory id derived from (this node, source kind, source id): the same
/// input on the same node gives the same id (so a re-import finds what it
/// wrote), two nodes importing the same file make distinct memories (each
/// is its own origin). Shaped as a UUIDv7 (version and variant bits set).
pub fn derived_id(me: NodeId, source: Source, source_id: &str) -> MemoryId {
    let mut h = blake3::Hasher::new_derive_key("amos 2026-12 import memory id");
    h.update(&me.0);
    h.update(source.as_str().as_bytes());
    h.update(&[0]);
    h.update(source_id.as_bytes());
    let mut b = [0u8; 16];
    b.copy_from_slice(&h.finalize().as_bytes()[..16]);
    b[6] = (b[6] & 0x0f) | 0x70;
    b[8] = (b[8] & 0x3f) | 0x80;
    MemoryId(b)
}

/// Where an imported memory keeps the time its source says it was made:
/// its valid time starts then (this is the ONE place that decides), and,
/// with `valid_to`, ends when the source says it stopped being true.
pub fn source_validity(created_ms: Option<u64>, valid_to_ms: Option<u64>) -> Validity {
    Validity {
        from_ms: created_ms,
        // An end not after the start is no validity the node accepts.
        to_ms: valid_to_ms.filter(|to| created_ms.is_none_or(|from| *to > from)),
    }
}

/// Parse the timestamps sources write ([`crate::clock::parse_source_time`]:
/// RFC 3339 with any zone, or seconds since 1970), `None` past the bound.
pub fn parse_time(s: &str) -> Option<u64> {
    crate::clock::parse_source_time(s)
}

/// Tags kept from a source: trimmed, commas and control characters
/// replaced, cut to the tag length limit, at most `MAX_TAGS - reserve`.
pub fn clean_tags(raw: impl IntoIterator<Item = String>, reserve: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for t in raw {
        let t: String = t
            .trim()
            .chars()
            .map(|c| if c == ',' || c.is_control() { ' ' } else { c })
            .take(MAX_TAG_CHARS)
            .collect();
        let t = t.trim().to_owned();
        if !t.is_empty() && !out.contains(&t) && out.len() + reserve < MAX_TAGS {
            out.push(t);
        }
    }
    out
}

/// A number in `0..=1`, or `default` for anything else.
pub fn unit_or(x: Option<f64>, default: f32) -> f32 {
    match x {
        Some(x) if x.is_finite() => (x as f32).clamp(0.0, 1.0),
        _ => default,
    }
}

/// What an import did (or, with `--dry-run`, would do).
#[derive(Debug, Clone, Default, Serialize)]
pub struct ImportReport {
    /// The source's name ([`Source::as_str`]).
    pub source: String,
    /// Whether nothing was written (`--dry-run`).
    pub dry_run: bool,
    /// New memories, by type and by scope (`private`, `global`, `agent`,
    /// `team`, `project`; a memory with several grants counts in each).
    pub memories: usize,
    /// New memories per type.
    pub memories_by_type: BTreeMap<String, usize>,
    /// New memories per scope kind.
    pub memories_by_scope: BTreeMap<String, usize>,
    /// Memories already held (an earlier import): left alone.
    pub memories_held: usize,
    /// New memories archived in the source (kept archived).
    pub archived: usize,
    /// New memories by owner: whose memories the import writes.
    pub memories_by_owner: BTreeMap<String, usize>,
    /// New memories pinned in the source (kept pinned).
    pub pinned: usize,
    /// Agents registered.
    pub agents: usize,
    /// Teams created.
    pub teams: usize,
    /// Projects created.
    pub projects: usize,
    /// Memberships added.
    pub memberships: usize,
    /// Members added to teams and projects that already exist here
    /// (`--add-members`), as `SCOPE AGENT`.
    pub joins: Vec<String>,
    /// Members of teams and projects that already exist here, left out
    /// for want of `--add-members`, as `SCOPE AGENT`.
    pub joins_refused: Vec<String>,
    /// Memories left out because their owner already exists here and the
    /// operator did not name it (`--as`, `--existing-agents`), by owner.
    pub owners_refused: BTreeMap<String, usize>,
    /// New links.
    pub links: usize,
    /// Links already held: left alone.
    pub links_held: usize,
    /// Profiles written.
    pub profiles: usize,
    /// Memories an earlier import made here, deleted in the source since:
    /// forgotten.
    pub tombstones: usize,
    /// Facts written (0 for a dry run or a re-import).
    pub facts: usize,
    /// What could not be mapped, and why → how often.
    pub unmapped: BTreeMap<String, usize>,
}

/// The facts an import will write, decided from the store as it is.
struct Prepared {
    /// Agents, teams, projects, memberships: written first.
    org: Vec<FactBody>,
    /// New memories: (content, acl, archived).
    memories: Vec<(FactBody, FactBody, bool)>,
    /// Tombstones, links, profiles: written last.
    after: Vec<FactBody>,
    report: ImportReport,
}

fn scope_kind(s: &Scope) -> &'static str {
    match s {
        Scope::Private => "private",
        Scope::Global => "global",
        Scope::Agent(_) => "agent",
        Scope::Team(_) => "team",
        Scope::Project(_) => "project",
    }
}

/// Decide, from the store as `conn` shows it, what `plan` adds.
fn prepare(
    conn: &(impl crate::store::Readable + ?Sized),
    me: NodeId,
    plan: &Plan,
    opts: &ImportOptions,
    now_ms: u64,
) -> Result<Prepared> {
    let mut report = ImportReport {
        source: plan.source.as_str().into(),
        unmapped: plan.unmapped.clone(),
        ..Default::default()
    };
    let mut unmapped = |why: String| *report.unmapped.entry(why).or_default() += 1;
    let mut org_facts = Vec::new();

    // Agents: declared, owners, members, grantees, profile holders.
    let mut agents: BTreeSet<AgentId> = plan.agents.clone();
    agents.extend(plan.memories.iter().map(|m| m.owner.clone()));
    for t in &plan.teams {
        agents.extend(t.members.iter().cloned());
    }
    for p in &plan.projects {
        agents.extend(p.members.iter().cloned());
    }
    for m in &plan.memories {
        for g in &m.grants {
            if let Scope::Agent(a) = g {
                agents.insert(a.clone());
            }
        }
    }
    agents.extend(plan.profiles.iter().map(|p| p.0.clone()));
    let mut new_agents = 0;
    // Agents here before this import: the file speaks for them only with
    // the operator's word (`opts.existing_agents`).
    let mut existing: BTreeSet<&AgentId> = BTreeSet::new();
    for a in &agents {
        if org::agent_present(conn, a)? {
            existing.insert(a);
        } else {
            new_agents += 1;
            org_facts.push(FactBody::Agent(AgentFact {
                id: a.clone(),
                kind: "imported".into(),
                display_name: a.to_string(),
                present: true,
            }));
        }
    }

    // Teams, projects, memberships.
    let mut teams: BTreeSet<TeamId> = BTreeSet::new();
    let (mut new_teams, mut new_projects, mut new_members) = (0, 0, 0);
    let (mut joins, mut joins_refused) = (Vec::new(), Vec::new());
    // A team or project already as the source has it needs no authority
    // here; one to create or to add members to must be this node's (or a
    // full peer's), else the whole import is refused.
    //
    // A file reaches no further than what it brings: a team or project
    // that has a record here (present, or deleted here) gets no member
    // from it, and is not made again, unless the operator says
    // `--add-members` (§5.1); those memberships are listed either way.
    let org_graph = org::StoredOrg(conn);
    for t in &plan.teams {
        let scope = OrgScope::Team(t.id.clone());
        let held = org_graph.team(&t.id);
        if held.is_some() && !opts.add_members {
            if held.as_ref().is_some_and(|h| h.present) {
                teams.insert(t.id.clone());
            } else {
                unmapped(format!(
                    "team {} was deleted here: left out (--add-members makes it again)",
                    t.id
                ));
            }
            for a in &t.members {
                if !org::is_member(conn, &scope, a)? {
                    joins_refused.push(format!(
                        "{} {a}",
                        org::scope_label(conn, &crate::api::org::scope_of(&scope))
                    ));
                }
            }
            continue;
        }
        if !held.as_ref().is_some_and(|h| h.present) {
            let origin = check_org_authority(conn, me, &scope)?;
            new_teams += 1;
            org_facts.push(FactBody::Team(TeamFact {
                id: t.id.clone(),
                origin,
                name: t.name.clone(),
                present: true,
            }));
        }
        teams.insert(t.id.clone());
        for a in &t.members {
            if !org::is_member(conn, &scope, a)? {
                check_org_authority(conn, me, &scope)?;
                new_members += 1;
                if held.is_some() {
                    joins.push(format!(
                        "{} {a}",
                        org::scope_label(conn, &crate::api::org::scope_of(&scope))
                    ));
                }
                org_facts.push(membership(scope.clone(), a));
            }
        }
    }
    let mut projects: BTreeSet<ProjectId> = BTreeSet::new();
    for p in &plan.projects {
        if !teams.contains(&p.team) && !org::team_present(conn, &p.team) {
            unmapped(format!(
                "project {} names team {}, which does not exist: left out",
                p.id, p.team
            ));
            continue;
        }
        let scope = OrgScope::Project(p.id.clone());
        let state = org::project_state(conn, &p.id);
        if let Some(s) = &state
            && s.team != p.team
        {
            unmapped(format!(
                "project {} belongs to team {} here, not {}: its members left out",
                p.id, s.team, p.team
            ));
            continue;
        }
        let held = state.is_some();
        if held && !opts.add_members {
            if state.as_ref().is_some_and(|s| s.present) {
                projects.insert(p.id.clone());
            } else {
                unmapped(format!(
                    "project {} was deleted here: left out (--add-members makes it again)",
                    p.id
                ));
            }
            for a in &p.members {
                if !org::is_member(conn, &scope, a)? {
                    joins_refused.push(format!(
                        "{} {a}",
                        org::scope_label(conn, &crate::api::org::scope_of(&scope))
                    ));
                }
            }
            continue;
        }
        if !state.is_some_and(|s| s.present) {
            // As `amos project create`: authority over the team too.
            check_org_authority(conn, me, &OrgScope::Team(p.team.clone()))?;
            let origin = check_org_authority(conn, me, &scope)?;
            new_projects += 1;
            org_facts.push(FactBody::Project(ProjectFact {
                id: p.id.clone(),
                team: p.team.clone(),
                origin,
                name: p.name.clone(),
                present: true,
            }));
        }
        projects.insert(p.id.clone());
        for a in &p.members {
            if !org::is_member(conn, &scope, a)? {
                check_org_authority(conn, me, &scope)?;
                new_members += 1;
                if held {
                    joins.push(format!(
                        "{} {a}",
                        org::scope_label(conn, &crate::api::org::scope_of(&scope))
                    ));
                }
                org_facts.push(membership(scope.clone(), a));
            }
        }
    }
    report.joins = joins;
    report.joins_refused = joins_refused;
    report.agents = new_agents;
    report.teams = new_teams;
    report.projects = new_projects;
    report.memberships = new_members;

    // Memories.
    let tombstoned: BTreeSet<&str> = plan.tombstones.iter().map(String::as_str).collect();
    // Source id → amos id, for every memory held or made here.
    let mut ids: HashMap<&str, MemoryId> = HashMap::new();
    let mut scope_ok: HashMap<Scope, bool> = HashMap::new();
    let mut memories = Vec::with_capacity(plan.memories.len());
    // (index in `memories`, source id of the memory it replaces)
    let mut replacing: Vec<(usize, &str)> = Vec::new();
    for m in &plan.memories {
        if tombstoned.contains(m.source_id.as_str()) {
            continue; // deleted in the source: handled with the tombstones
        }
        let id = derived_id(me, plan.source, &m.source_id);
        if moves::memory_fixed(conn, &id)?.is_some() {
            report.memories_held += 1;
            ids.insert(&m.source_id, id);
            continue;
        }
        if let Some(own) = held_as_itself(conn, plan.source, m)? {
            report.memories_held += 1;
            ids.insert(&m.source_id, own);
            continue;
        }
        if ids.contains_key(m.source_id.as_str()) {
            unmapped(format!(
                "a second memory with the same {} id: left out",
                plan.source.as_str()
            ));
            continue;
        }
        if !opts.existing_agents && existing.contains(&m.owner) {
            *report
                .owners_refused
                .entry(m.owner.to_string())
                .or_default() += 1;
            continue;
        }
        if let Err(e) = check_text(&m.text) {
            unmapped(format!("memory text unusable ({e}): left out"));
            continue;
        }
        let mut grants = Grants::private();
        for g in &m.grants {
            let ok = match scope_ok.get(g) {
                Some(ok) => *ok,
                None => {
                    let ok = match g {
                        Scope::Private | Scope::Global => true,
                        Scope::Agent(a) => agents.contains(a),
                        Scope::Team(t) => teams.contains(t) || org::team_present(conn, t),
                        Scope::Project(p) => {
                            projects.contains(p)
                                || org::project_state(conn, p).is_some_and(|s| s.present)
                        }
                    };
                    scope_ok.insert(g.clone(), ok);
                    ok
                }
            };
            if ok {
                grants.insert(g.clone());
            } else {
                unmapped(format!("grant {g} names nothing that exists: dropped"));
            }
        }
        if grants.len() > Grants::MAX {
            unmapped(format!("more than {} grants: made private", Grants::MAX));
            grants = Grants::private();
        }
        if grants.is_empty() {
            *report
                .memories_by_scope
                .entry("private".into())
                .or_default() += 1;
        }
        for g in grants.iter() {
            *report
                .memories_by_scope
                .entry(scope_kind(g).into())
                .or_default() += 1;
        }
        *report
            .memories_by_type
            .entry(m.kind.as_str().into())
            .or_default() += 1;
        *report
            .memories_by_owner
            .entry(m.owner.to_string())
            .or_default() += 1;
        if m.pinned {
            report.pinned += 1;
        }
        let tags = clean_tags(m.tags.iter().cloned(), 0);
        let mut validity = source_validity(m.created_ms, m.valid_to_ms);
        if validity.to_ms != m.valid_to_ms || check_validity(&validity, now_ms).is_err() {
            unmapped("valid-to not after valid-from: left out".into());
            validity.to_ms = None;
        }
        let fixed = MemoryFixed {
            owner: m.owner.clone(),
            created_ms: now_ms,
            origin: me,
        };
        let content = FactBody::MemoryContent(MemoryContent {
            id,
            fixed: fixed.clone(),
            kind: m.kind.clone(),
            text: MemoryText::Plain(m.text.clone()),
            tags,
            importance: m.importance,
            confidence: m.confidence,
            pinned: m.pinned,
            expires_ms: m.expires_ms,
            supersedes: None,
            validity,
        });
        let acl = FactBody::MemoryAcl(MemoryAcl { id, fixed, grants });
        if m.archived {
            report.archived += 1;
        }
        if let Some(old) = &m.supersedes {
            replacing.push((memories.len(), old.as_str()));
        }
        memories.push((content, acl, m.archived));
        ids.insert(&m.source_id, id);
    }
    report.memories = memories.len();
    // Supersession, once every memory's id is known (a file may list the
    // new memory before the one it replaces): only within what the input
    // brings, held or new.
    for (at, old) in replacing {
        let old = ids.get(old).copied();
        match (&mut memories[at].0, old) {
            (FactBody::MemoryContent(c), Some(old)) if old != c.id => c.supersedes = Some(old),
            _ => unmapped("supersedes a memory not in the input: left out".into()),
        }
    }

    // Tombstones: only for a memory an earlier import made here.
    let mut after = Vec::new();
    for sid in &plan.tombstones {
        let id = derived_id(me, plan.source, sid);
        match moves::memory_fixed(conn, &id)? {
            Some((fixed, false)) if fixed.origin == me => {
                report.tombstones += 1;
                after.push(FactBody::MemoryTombstone(MemoryTombstone { id, fixed }));
            }
            Some((_, true)) => {}
            Some(_) => unmapped("a deleted memory held from another node: left alone".into()),
            None => unmapped("deleted in the source before any import: nothing to erase".into()),
        }
    }
    let gone: BTreeSet<MemoryId> = after
        .iter()
        .filter_map(|f| match f {
            FactBody::MemoryTombstone(t) => Some(t.id),
            _ => None,
        })
        .collect();

    // Links between memories held or made here.
    let mut seen_links = BTreeSet::new();
    for l in &plan.links {
        let (Some(from), Some(to)) = (ids.get(l.from.as_str()), ids.get(l.to.as_str())) else {
            unmapped("link to a memory not imported: left out".into());
            continue;
        };
        if from == to || gone.contains(from) || gone.contains(to) {
            unmapped("link to itself or to a deleted memory: left out".into());
            continue;
        }
        if !seen_links.insert((*from, *to, l.relation.clone())) {
            continue;
        }
        if moves::link_present(conn, from, to, &l.relation)? {
            report.links_held += 1;
            continue;
        }
        report.links += 1;
        after.push(FactBody::Link(LinkFact {
            from: *from,
            to: *to,
            relation: l.relation.clone(),
            weight: if l.weight.is_finite() {
                l.weight.clamp(0.0, 1.0)
            } else {
                1.0
            },
            present: true,
        }));
    }

    // Profiles: the source's weights replace the agent's; equal is held.
    // An agent that was here before the import keeps its own unless the
    // operator named it.
    for (agent, weights) in &plan.profiles {
        let mut map = BTreeMap::new();
        for (k, w) in weights {
            if w.is_finite() && (0.0..=MAX_WEIGHT).contains(w) {
                if *w != 1.0 {
                    map.insert(k.as_str().to_owned(), *w);
                }
            } else {
                unmapped(format!("profile weight outside 0..={MAX_WEIGHT}: left out"));
            }
        }
        if map.len() > 64 {
            unmapped("profile with more than 64 type weights: left out".into());
            continue;
        }
        let held = if org::agent_present(conn, agent)? {
            ProfileWeights::load(conn, agent)?.0
        } else {
            BTreeMap::new()
        };
        if held == map {
            continue;
        }
        if !opts.existing_agents && existing.contains(agent) {
            unmapped(format!(
                "profile of {agent}, who already exists here: left out (--existing-agents sets it)"
            ));
            continue;
        }
        report.profiles += 1;
        after.push(FactBody::Profile(ProfileFact {
            agent: agent.clone(),
            weights: map
                .iter()
                .map(|(k, w)| Ok((MemoryType::parse(k)?, *w)))
                .collect::<Result<Vec<_>>>()?,
        }));
    }

    Ok(Prepared {
        org: org_facts,
        memories,
        after,
        report,
    })
}

/// An amos export names each memory by its own id: imported into a node
/// that holds that very memory live (the node that exported it, or one
/// holding a replica), it is that memory, held, not made again. Only a
/// live memory of the same owner counts: a file cannot claim another
/// agent's memory, and one forgotten here (`amos forget --agent A --all`
/// before a re-import) comes back as a new memory.
fn held_as_itself(
    conn: &(impl crate::store::Readable + ?Sized),
    source: Source,
    m: &PlanMemory,
) -> Result<Option<MemoryId>> {
    if source != Source::Amos {
        return Ok(None);
    }
    let Ok(own) = m.source_id.parse::<MemoryId>() else {
        return Ok(None);
    };
    Ok(moves::memory_fixed(conn, &own)?
        .is_some_and(|(f, forgotten)| !forgotten && f.owner == m.owner)
        .then_some(own))
}

/// `plan` with every team and project named as this node holds it
/// (docs/design.md §3): a name held here is that scope, so the import
/// rules of §5.1 judge it against its record; a name held nowhere is a
/// scope created here, its id qualified by this node. An ambiguous name is
/// refused. A qualified id in the source is kept as it is.
fn held_names(
    conn: &(impl crate::store::Readable + ?Sized),
    me: NodeId,
    plan: &Plan,
) -> Result<Plan> {
    use crate::api::scopes::{Unheld, resolve_project, resolve_team};
    let team = |t: &TeamId| -> Result<TeamId> {
        if t.is_qualified() {
            return Ok(t.clone());
        }
        resolve_team(conn, t.as_str(), Unheld::CreatedBy(me))
    };
    let project = |p: &ProjectId| -> Result<ProjectId> {
        if p.is_qualified() {
            return Ok(p.clone());
        }
        resolve_project(conn, p.as_str(), Unheld::CreatedBy(me))
    };
    let mut plan = plan.clone();
    for t in &mut plan.teams {
        t.id = team(&t.id)?;
    }
    for p in &mut plan.projects {
        p.id = project(&p.id)?;
        p.team = team(&p.team)?;
    }
    for m in &mut plan.memories {
        m.grants = m
            .grants
            .iter()
            .map(|g| {
                Ok(match g {
                    Scope::Team(t) => Scope::Team(team(t)?),
                    Scope::Project(p) => Scope::Project(project(p)?),
                    other => other.clone(),
                })
            })
            .collect::<Result<_>>()?;
    }
    Ok(plan)
}

fn membership(scope: OrgScope, agent: &AgentId) -> FactBody {
    FactBody::Membership(MembershipFact {
        scope,
        agent: agent.clone(),
        role: "member".into(),
        present: true,
    })
}

impl Node {
    /// Check grants an operator gives an import (`--share`): each must name
    /// an agent, team or project that exists here, as for `amos add`.
    /// Returns them as held here (a team or project name resolved, as
    /// [`Node::resolve_scope`] does).
    pub fn check_share(&self, scopes: &[Scope]) -> Result<Vec<Scope>> {
        self.store.read(|r| {
            scopes
                .iter()
                .map(|s| {
                    let s = crate::api::scopes::canonical_scope(
                        r,
                        s,
                        crate::api::scopes::Unheld::AsTyped,
                    )?;
                    Self::check_grant_target(r, &s)?;
                    Ok(s)
                })
                .collect()
        })
    }

    /// Write `plan` as facts of this node, in one transaction, or (with
    /// `opts.dry_run`) only report what that would do. `progress` counts
    /// memories as they are stored.
    pub fn import(
        &mut self,
        plan: &Plan,
        opts: &ImportOptions,
        progress: &Progress,
    ) -> Result<ImportReport> {
        let me = self.node_id();
        let now = self.now_ms();
        let plan = &self.store.read(|r| held_names(r, me, plan))?;
        if opts.dry_run {
            let mut r = self
                .store
                .read(|conn| prepare(conn, me, plan, opts, now))?
                .report;
            r.dry_run = true;
            return Ok(r);
        }
        let identity = &self.identity;
        self.store.write(|tx| {
            let Prepared {
                org,
                memories,
                after,
                mut report,
            } = prepare(tx, me, plan, opts, now)?;
            progress.set_len(memories.len() as u64);
            let mut unsigned = Vec::with_capacity(org.len() + 2 * memories.len() + after.len());
            let mut archived = Vec::new();
            for body in org {
                unsigned.push(Fact {
                    clock: tx.tick(now, me)?,
                    body,
                });
            }
            let n_org = unsigned.len();
            for (content, acl, arch) in memories {
                if arch && let FactBody::MemoryContent(c) = &content {
                    archived.push(c.id);
                }
                unsigned.push(Fact {
                    clock: tx.tick(now, me)?,
                    body: content,
                });
                unsigned.push(Fact {
                    clock: tx.tick(now, me)?,
                    body: acl,
                });
            }
            let n_mem = unsigned.len() - n_org;
            for body in after {
                unsigned.push(Fact {
                    clock: tx.tick(now, me)?,
                    body,
                });
            }
            report.facts = unsigned.len();
            // Written as signed, in order (`sign_each`): the org facts, the
            // memories as new rows (content, then acl; a pair may straddle
            // two chunks), then the rest.
            let mut at = 0usize;
            let mut content = None;
            sign_each(identity, unsigned, |chunk| {
                for f in chunk {
                    let i = at;
                    at += 1;
                    if i < n_org || i >= n_org + n_mem {
                        tx.put(&admit_local(identity, f)?)?;
                    } else if let Some(c) = content.take() {
                        tx.put_new_memory(&admit_local(identity, c)?, &admit_local(identity, f)?)?;
                        progress.inc(1);
                    } else {
                        content = Some(f);
                    }
                }
                Ok(())
            })?;
            if content.is_some() {
                return Err(NodeError::Corrupt(
                    "an imported memory's content fact came without its acl".into(),
                ));
            }
            for id in &archived {
                tx.set_archived(id, true)?;
            }
            Ok(report)
        })
    }
}

/// A parse error at `line` of `file` (1-based): exit 2, nothing written.
pub fn bad_line(file: &str, line: usize, why: impl std::fmt::Display) -> NodeError {
    NodeError::BadInput(format!("{file}:{line}: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An import large enough to be signed on several threads, with its
    /// agent's fact ahead of the memories (so their pairs straddle the
    /// signed chunks), stores each memory as one row whose facts verify as
    /// this node's, content then acl, clocks rising with `seq`.
    #[test]
    fn a_large_import_stores_every_memory_verified_and_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let home = crate::home::Home::new(dir.path().join("home"));
        Node::init(&home, Some("a")).unwrap();
        let mut node = Node::open(&home).unwrap();
        let alice = AgentId::parse("alice").unwrap();
        let mut plan = Plan::new(Source::Mem0);
        plan.agents.insert(alice.clone());
        for i in 0..301 {
            let text = format!("imported memory {i}");
            plan.memories.push(PlanMemory::of_agent(
                &alice,
                &i.to_string(),
                text,
                &[],
                vec![],
                None,
            ));
        }
        let report = node
            .import(
                &plan,
                &ImportOptions::default(),
                &crate::progress::Progress::hidden(),
            )
            .unwrap();
        assert_eq!(report.memories, 301);
        let rows: Vec<(String, Vec<u8>, Vec<u8>)> = node
            .store
            .read(|r| crate::store::inspect::signed_rows(r))
            .unwrap()
            .into_iter()
            .map(|r| (r.content, r.content_fact, r.acl_fact))
            .collect();
        assert_eq!(rows.len(), 301);
        let mut last: Option<amos_protocol::Hlc> = None;
        for (i, (text, content, acl)) in rows.iter().enumerate() {
            assert_eq!(text, &format!("imported memory {i}"));
            let content = amos_protocol::SignedFact::decode_verified(content).unwrap();
            let acl = amos_protocol::SignedFact::decode_verified(acl).unwrap();
            assert!(matches!(&content.fact.body, FactBody::MemoryContent(_)));
            assert!(matches!(&acl.fact.body, FactBody::MemoryAcl(_)));
            for f in [&content, &acl] {
                assert_eq!(f.fact.author(), node.node_id());
                assert!(last.is_none_or(|l| l < f.fact.clock));
                last = Some(f.fact.clock);
            }
        }
    }

    #[test]
    fn times_parse() {
        assert_eq!(parse_time("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_time("1970-01-01T00:00:01.5+00:00"), Some(1500));
        assert_eq!(parse_time("1970-01-01T01:00:00+01:00"), Some(0));
        assert_eq!(
            parse_time("2025-03-01T10:00:00+00:00"),
            Some(1_740_823_200_000)
        );
        assert_eq!(parse_time("2025-03-01 10:00:00"), Some(1_740_823_200_000));
        assert_eq!(parse_time("1740823200"), Some(1_740_823_200_000));
        for bad in [
            "",
            "yesterday",
            "2025-13-01T00:00:00Z",
            "2025-03-01T10:00:00+0",
            // Issue 37: a zone that is not ASCII digits (this one panicked
            // at a byte slice inside the 'é').
            "2025-03-01T10:00:00+aé1",
            "2025-03-01T10:00:00+é:1",
            "2025-03-01T10:00:00+1é",
            "2025-03-01T10:00:00+99:00",
            "2025-03-01T10:00:00+01:00:00",
            "+025-03-01T10:00:00Z",
            "2025-03-01T10é00:00Z",
            "2025-03-01T10:00:00.é",
            // Past 9999-12-31T23:59:59.999Z (issue 37): no time.
            "1e12",
            "1e300",
            "253402300800",
            "9999-12-31T23:59:59-00:01",
        ] {
            assert_eq!(parse_time(bad), None, "{bad}");
        }
        // The bound itself is kept.
        assert_eq!(
            parse_time("9999-12-31T23:59:59.999Z"),
            Some(amos_protocol::MAX_TIME_MS)
        );
        assert_eq!(parse_time("253402300799"), Some(253_402_300_799_000));
    }

    proptest::proptest! {
        /// Issue 37: any text, no panic, nothing past the bound.
        #[test]
        fn any_text_parses_without_panic_within_the_bound(s in ".{0,40}") {
            if let Some(ms) = parse_time(&s) {
                proptest::prop_assert!(ms <= amos_protocol::MAX_TIME_MS);
            }
        }

        /// Texts shaped like the times sources write, with any byte put in.
        #[test]
        fn near_times_parse_without_panic(
            i in 0usize..30,
            c in proptest::char::any(),
        ) {
            let mut s: Vec<char> = "2025-03-01T10:00:00.123+01:00".chars().collect();
            s.insert(i.min(s.len()), c);
            let s: String = s.into_iter().collect();
            if let Some(ms) = parse_time(&s) {
                proptest::prop_assert!(ms <= amos_protocol::MAX_TIME_MS);
            }
        }
    }

    #[test]
    fn slugs_and_ids() {
        assert_eq!(slug_of("Alice Smith").as_deref(), Some("alice-smith"));
        assert_eq!(slug_of("  _x").as_deref(), Some("x"));
        assert_eq!(slug_of("日本"), None);
        let me = NodeId([7; 32]);
        let a = derived_id(me, Source::Mem0, "m1");
        assert_eq!(a, derived_id(me, Source::Mem0, "m1"));
        assert_ne!(a, derived_id(me, Source::Hermes, "m1"));
        assert_ne!(a, derived_id(NodeId([8; 32]), Source::Mem0, "m1"));
        assert_eq!(a.to_string().as_bytes()[14], b'7');
    }

    #[test]
    fn the_source_time_is_the_valid_from() {
        let v = source_validity(Some(1_000), Some(2_000));
        assert_eq!((v.from_ms, v.to_ms), (Some(1_000), Some(2_000)));
        assert_eq!(source_validity(Some(2_000), Some(2_000)).to_ms, None);
        assert!(source_validity(None, None).is_open());
    }
}
