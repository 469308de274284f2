//! The replicated state: facts. A fact is one register of one record, stamped
//! with the [`Hlc`] of the write; its author is the clock's node.
//!
//! | record | register | fields |
//! |---|---|---|
//! | memory | content (`v`) | fixed fields, type, text, tags, importance, confidence, pinned, expiry, supersedes |
//! | memory | acl (`acl_v`) | grants |
//! | memory | tombstone | terminal |
//! | link | link | weight, present |
//! | team / project / membership | org (`acl_v`) | name / team / role, present |
//! | agent | agent | kind, display name, present |
//! | profile | profile | per-type ranking weights |
//!
//! Every memory fact repeats the memory's fixed fields ([`MemoryFixed`]) so
//! that a receiver can check them (and the origin rule) against what it holds.

use bincode::{Decode, Encode};

use crate::{
    AgentId, Grants, Hlc, MemoryId, MemoryType, NodeId, ProjectId, ProtocolError, Relation, TeamId,
};

/// Largest memory text, in bytes of UTF-8.
pub const MAX_TEXT_BYTES: usize = 64 * 1024;
/// Most tags on one memory.
pub const MAX_TAGS: usize = 32;
/// Longest tag, in characters.
pub const MAX_TAG_CHARS: usize = 64;
/// Longest display name (team, project, agent) in characters.
pub const MAX_NAME_CHARS: usize = 256;

/// One signed unit of replicated state.
#[derive(Clone, Debug, PartialEq, Encode, Decode)]
pub struct Fact {
    pub clock: Hlc,
    pub body: FactBody,
}

impl Fact {
    /// The node that made (and must have signed) this fact.
    pub fn author(&self) -> NodeId {
        self.clock.node
    }

    /// Check the data-model rules a decoded fact must obey (slugs, sizes,
    /// finite weights). Signature checks are separate ([`crate::SignedFact::verify`]).
    pub fn validate(&self) -> Result<(), ProtocolError> {
        self.body.validate()
    }
}

/// What a fact says.
#[derive(Clone, Debug, PartialEq, Encode, Decode)]
pub enum FactBody {
    MemoryContent(MemoryContent),
    MemoryAcl(MemoryAcl),
    MemoryTombstone(MemoryTombstone),
    Link(LinkFact),
    Team(TeamFact),
    Project(ProjectFact),
    Membership(MembershipFact),
    Agent(AgentFact),
    Profile(ProfileFact),
}

/// Fields of a memory fixed at creation; a fact that disagrees with the stored
/// values is rejected.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub struct MemoryFixed {
    pub owner: AgentId,
    pub created_ms: u64,
    /// The node where the memory was created: the only one (with its `full`
    /// peers) that may author its facts.
    pub origin: NodeId,
}

/// The text a content fact carries. New representations are appended as
/// variants, never inserted, so old encodings stay valid.
///
/// A memory's text is [`MemoryText::Plain`] until its first edit; from then
/// on content facts carry automerge changes to a document every node builds
/// the same way (docs/design.md §4, `amos_sync::text`), and the text readers see
/// is that document's.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub enum MemoryText {
    /// The whole text (a memory never edited; also the base of the first edit).
    Plain(String),
    /// One automerge change to the text document. Empty: this fact changes
    /// other fields only.
    Edit(Vec<u8>),
    /// The origin's compaction: the whole document, saved by automerge. Only
    /// the memory's origin may author one.
    Snapshot(Vec<u8>),
}

impl MemoryText {
    /// The text, if this fact carries it whole.
    pub fn plain(&self) -> Option<&str> {
        match self {
            MemoryText::Plain(s) => Some(s),
            MemoryText::Edit(_) | MemoryText::Snapshot(_) => None,
        }
    }

    /// Whether this fact may change the text of an edited memory.
    pub fn changes_text(&self) -> bool {
        match self {
            MemoryText::Plain(_) | MemoryText::Snapshot(_) => true,
            MemoryText::Edit(c) => !c.is_empty(),
        }
    }
}

/// Largest automerge change one edit fact may carry.
pub const MAX_CHANGE_BYTES: usize = 256 * 1024;
/// Largest saved document a compaction fact may carry.
pub const MAX_SNAPSHOT_BYTES: usize = 512 * 1024;

/// The content register of a memory (clock `v`).
#[derive(Clone, Debug, PartialEq, Encode, Decode)]
pub struct MemoryContent {
    pub id: MemoryId,
    pub fixed: MemoryFixed,
    pub kind: MemoryType,
    pub text: MemoryText,
    pub tags: Vec<String>,
    pub importance: f32,
    pub confidence: f32,
    pub pinned: bool,
    pub expires_ms: Option<u64>,
    pub supersedes: Option<MemoryId>,
}

/// The acl register of a memory (clock `acl_v`).
#[derive(Clone, Debug, PartialEq, Encode, Decode)]
pub struct MemoryAcl {
    pub id: MemoryId,
    pub fixed: MemoryFixed,
    pub grants: Grants,
}

/// A terminal tombstone: beats every other fact about the memory.
#[derive(Clone, Debug, PartialEq, Encode, Decode)]
pub struct MemoryTombstone {
    pub id: MemoryId,
    pub fixed: MemoryFixed,
}

/// A directed, typed association between two memories.
#[derive(Clone, Debug, PartialEq, Encode, Decode)]
pub struct LinkFact {
    pub from: MemoryId,
    pub to: MemoryId,
    pub relation: Relation,
    pub weight: f32,
    pub present: bool,
}

/// A team's record. Its `origin` is fixed at creation: the node that
/// created the team, the only one (with its `full` peers) that may author
/// the team's record and memberships (the org origin rule).
#[derive(Clone, Debug, PartialEq, Encode, Decode)]
pub struct TeamFact {
    pub id: TeamId,
    /// Fixed at creation.
    pub origin: NodeId,
    pub name: String,
    pub present: bool,
}

/// A project's record; `team` and `origin` are fixed at creation, as for a
/// team.
#[derive(Clone, Debug, PartialEq, Encode, Decode)]
pub struct ProjectFact {
    pub id: ProjectId,
    /// Fixed at creation.
    pub team: TeamId,
    /// Fixed at creation.
    pub origin: NodeId,
    pub name: String,
    pub present: bool,
}

/// A team or a project: the org scopes an agent can be a member of.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Encode, Decode)]
pub enum OrgScope {
    Team(TeamId),
    Project(ProjectId),
}

impl std::fmt::Display for OrgScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OrgScope::Team(t) => write!(f, "team:{t}"),
            OrgScope::Project(p) => write!(f, "project:{p}"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Encode, Decode)]
pub struct MembershipFact {
    pub scope: OrgScope,
    pub agent: AgentId,
    pub role: String,
    pub present: bool,
}

#[derive(Clone, Debug, PartialEq, Encode, Decode)]
pub struct AgentFact {
    pub id: AgentId,
    pub kind: String,
    pub display_name: String,
    pub present: bool,
}

/// Per-agent ranking weights by memory type.
#[derive(Clone, Debug, PartialEq, Encode, Decode)]
pub struct ProfileFact {
    pub agent: AgentId,
    pub weights: Vec<(MemoryType, f32)>,
}

/// Which register a fact writes: facts with equal registers compete under
/// last-writer-wins; facts with different registers never interact.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Encode, Decode)]
pub enum Register {
    MemoryContent(MemoryId),
    MemoryAcl(MemoryId),
    MemoryTombstone(MemoryId),
    Link(MemoryId, MemoryId, Relation),
    Team(TeamId),
    Project(ProjectId),
    Membership(OrgScope, AgentId),
    Agent(AgentId),
    Profile(AgentId),
}

impl FactBody {
    /// The register this fact writes.
    pub fn register(&self) -> Register {
        match self {
            FactBody::MemoryContent(m) => Register::MemoryContent(m.id),
            FactBody::MemoryAcl(m) => Register::MemoryAcl(m.id),
            FactBody::MemoryTombstone(m) => Register::MemoryTombstone(m.id),
            FactBody::Link(l) => Register::Link(l.from, l.to, l.relation.clone()),
            FactBody::Team(t) => Register::Team(t.id.clone()),
            FactBody::Project(p) => Register::Project(p.id.clone()),
            FactBody::Membership(m) => Register::Membership(m.scope.clone(), m.agent.clone()),
            FactBody::Agent(a) => Register::Agent(a.id.clone()),
            FactBody::Profile(p) => Register::Profile(p.agent.clone()),
        }
    }

    /// The memory this fact is about, with its fixed fields, if it is a memory fact.
    pub fn memory(&self) -> Option<(MemoryId, &MemoryFixed)> {
        match self {
            FactBody::MemoryContent(m) => Some((m.id, &m.fixed)),
            FactBody::MemoryAcl(m) => Some((m.id, &m.fixed)),
            FactBody::MemoryTombstone(m) => Some((m.id, &m.fixed)),
            _ => None,
        }
    }

    fn validate(&self) -> Result<(), ProtocolError> {
        let bad = |m: &str| Err(ProtocolError::InvalidFact(m.to_owned()));
        match self {
            FactBody::MemoryContent(m) => {
                check_fixed(&m.fixed)?;
                if !m.kind.is_valid() {
                    return bad("memory type is not a slug");
                }
                match &m.text {
                    MemoryText::Plain(t) => check_text(t)?,
                    MemoryText::Edit(c) => check_size("text change", c.len(), MAX_CHANGE_BYTES)?,
                    MemoryText::Snapshot(d) => {
                        if d.is_empty() {
                            return bad("empty text snapshot");
                        }
                        check_size("text snapshot", d.len(), MAX_SNAPSHOT_BYTES)?
                    }
                }
                check_tags(&m.tags)?;
                check_unit("importance", m.importance)?;
                check_unit("confidence", m.confidence)?;
                if m.supersedes == Some(m.id) {
                    return bad("a memory cannot supersede itself");
                }
            }
            FactBody::MemoryAcl(m) => {
                check_fixed(&m.fixed)?;
                if !m.grants.is_valid() {
                    return bad("grants are not canonical");
                }
            }
            FactBody::MemoryTombstone(m) => check_fixed(&m.fixed)?,
            FactBody::Link(l) => {
                if l.from == l.to {
                    return bad("a link must join two different memories");
                }
                if !l.relation.is_valid() {
                    return bad("relation is not a slug");
                }
                check_unit("link weight", l.weight)?;
            }
            FactBody::Team(t) => {
                if !t.id.is_valid() {
                    return bad("team id is not a slug");
                }
                check_name(&t.name)?;
            }
            FactBody::Project(p) => {
                if !p.id.is_valid() || !p.team.is_valid() {
                    return bad("project or team id is not a slug");
                }
                check_name(&p.name)?;
            }
            FactBody::Membership(m) => {
                let scope_ok = match &m.scope {
                    OrgScope::Team(t) => t.is_valid(),
                    OrgScope::Project(p) => p.is_valid(),
                };
                if !scope_ok || !m.agent.is_valid() {
                    return bad("membership ids are not slugs");
                }
                check_name(&m.role)?;
            }
            FactBody::Agent(a) => {
                if !a.id.is_valid() {
                    return bad("agent id is not a slug");
                }
                check_name(&a.kind)?;
                check_name(&a.display_name)?;
            }
            FactBody::Profile(p) => {
                if !p.agent.is_valid() {
                    return bad("agent id is not a slug");
                }
                if p.weights.len() > 64 {
                    return bad("too many profile weights");
                }
                for (t, w) in &p.weights {
                    if !t.is_valid() || !w.is_finite() || *w < 0.0 || *w > 10.0 {
                        return bad("profile weights must be slugs with weights in 0..=10");
                    }
                }
            }
        }
        Ok(())
    }
}

fn check_fixed(f: &MemoryFixed) -> Result<(), ProtocolError> {
    if f.owner.is_valid() {
        Ok(())
    } else {
        Err(ProtocolError::InvalidFact("owner is not a slug".into()))
    }
}

/// Check a memory text: non-empty after trimming, within [`MAX_TEXT_BYTES`].
pub fn check_text(text: &str) -> Result<(), ProtocolError> {
    if text.trim().is_empty() {
        return Err(ProtocolError::malformed("empty content"));
    }
    if text.len() > MAX_TEXT_BYTES {
        return Err(ProtocolError::TooLarge {
            what: "content",
            size: text.len(),
            limit: MAX_TEXT_BYTES,
        });
    }
    Ok(())
}

fn check_size(what: &'static str, size: usize, limit: usize) -> Result<(), ProtocolError> {
    if size > limit {
        return Err(ProtocolError::TooLarge { what, size, limit });
    }
    Ok(())
}

/// Check tags: at most [`MAX_TAGS`], each 1..=[`MAX_TAG_CHARS`] characters, no
/// control characters or commas.
pub fn check_tags(tags: &[String]) -> Result<(), ProtocolError> {
    if tags.len() > MAX_TAGS {
        return Err(ProtocolError::malformed(format!(
            "too many tags: {} (limit {MAX_TAGS})",
            tags.len()
        )));
    }
    for t in tags {
        let n = t.chars().count();
        if n == 0 || n > MAX_TAG_CHARS || t.chars().any(|c| c.is_control() || c == ',') {
            return Err(ProtocolError::malformed(format!(
                "malformed tag {t:?}: 1-{MAX_TAG_CHARS} characters, no commas or control characters"
            )));
        }
    }
    Ok(())
}

/// Check a value that must be a finite number in `0..=1`.
pub fn check_unit(what: &str, x: f32) -> Result<(), ProtocolError> {
    if x.is_finite() && (0.0..=1.0).contains(&x) {
        Ok(())
    } else {
        Err(ProtocolError::malformed(format!(
            "{what} must be between 0 and 1, got {x}"
        )))
    }
}

fn check_name(name: &str) -> Result<(), ProtocolError> {
    if name.chars().count() > MAX_NAME_CHARS || name.chars().any(char::is_control) {
        return Err(ProtocolError::malformed(format!(
            "name {name:?} is longer than {MAX_NAME_CHARS} characters or has control characters"
        )));
    }
    Ok(())
}
