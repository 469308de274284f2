//! The replicated state: facts. A fact is one register of one record, stamped
//! with the [`Hlc`] of the write; its author is the clock's node.
//!
//! | record | register | fields |
//! |---|---|---|
//! | memory | content (`v`) | fixed fields, type, text, tags, importance, confidence, pinned, expiry, supersedes, validity |
//! | memory | acl (`acl_v`) | grants |
//! | memory | tombstone | terminal |
//! | link | link | weight, present |
//! | team / project / membership | org (`acl_v`) | name / team / role, present |
//! | agent | agent | kind, display name, present |
//! | profile | profile | per-type ranking weights |
//!
//! Every memory fact repeats the memory's fixed fields ([`MemoryFixed`]) so
//! that a receiver can check them (and the origin rule) against what it holds.

use bincode::de::Decoder;
use bincode::enc::Encoder;
use bincode::error::{DecodeError, EncodeError};
use bincode::{Decode, Encode};

use crate::{
    AgentId, Grants, Hlc, MAX_TIME_MS, MemoryId, MemoryType, NodeId, ProjectId, ProtocolError,
    Relation, TeamId,
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
    /// When and by which node the fact was written; last-writer-wins compares it.
    pub clock: Hlc,
    /// What the fact says.
    pub body: FactBody,
}

impl Fact {
    /// The node that made (and must have signed) this fact.
    pub fn author(&self) -> NodeId {
        self.clock.node
    }

    /// Check the data-model rules a decoded fact must obey (slugs, sizes,
    /// finite weights, times within [`MAX_TIME_MS`]). Signature checks are
    /// separate ([`crate::SignedFact::verify`]). The time bound is checked
    /// last: a [`ProtocolError::TimeOutOfBounds`] says every other rule holds.
    pub fn validate(&self) -> Result<(), ProtocolError> {
        self.body.validate()?;
        self.check_times()
    }

    /// Every rule of [`Fact::validate`] but the time bound.
    pub(crate) fn validate_except_times(&self) -> Result<(), ProtocolError> {
        self.body.validate()
    }

    /// Every time this fact carries is at most [`MAX_TIME_MS`]
    /// (docs/design.md §4): its clock's wall time and, for a memory fact,
    /// its creation, expiry and valid time. Past it, a
    /// [`ProtocolError::TimeOutOfBounds`] naming the first such field.
    pub fn check_times(&self) -> Result<(), ProtocolError> {
        let at = |what: &'static str, ms: Option<u64>| match ms {
            Some(ms) if ms > MAX_TIME_MS => Err(ProtocolError::TimeOutOfBounds { what, ms }),
            _ => Ok(()),
        };
        at("clock", Some(self.clock.wall_ms))?;
        if let Some((_, fixed)) = self.body.memory() {
            at("created", Some(fixed.created_ms))?;
        }
        if let FactBody::MemoryContent(m) = &self.body {
            at("expires", m.expires_ms)?;
            at("valid_from", m.validity.from_ms)?;
            at("valid_to", m.validity.to_ms)?;
        }
        Ok(())
    }
}

/// What a fact says.
///
/// Encoded as bincode's derive would encode it (a `u32` variant index, then
/// the fields), with one versioned addition: a content fact with a
/// [`Validity`] set is written under variant index `CONTENT_WITH_VALIDITY` (9)
/// with the validity after the other fields. A content fact without one keeps
/// the original variant 0 and bytes, so every fact signed before valid time
/// existed still decodes, re-encodes to the same bytes and verifies.
#[derive(Clone, Debug, PartialEq)]
pub enum FactBody {
    /// A memory's content register: text, tags, scores, validity.
    MemoryContent(MemoryContent),
    /// A memory's acl register: its grants.
    MemoryAcl(MemoryAcl),
    /// A memory's terminal tombstone.
    MemoryTombstone(MemoryTombstone),
    /// A link between two memories.
    Link(LinkFact),
    /// A team's record.
    Team(TeamFact),
    /// A project's record.
    Project(ProjectFact),
    /// An agent's membership of a team or project.
    Membership(MembershipFact),
    /// An agent's record.
    Agent(AgentFact),
    /// An agent's ranking weights.
    Profile(ProfileFact),
}

/// Fields of a memory fixed at creation; a fact that disagrees with the stored
/// values is rejected.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub struct MemoryFixed {
    /// The agent that owns the memory.
    pub owner: AgentId,
    /// When the memory was created, in Unix milliseconds.
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
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryContent {
    /// The memory this content belongs to.
    pub id: MemoryId,
    /// The fields fixed at creation, repeated in every register's fact.
    pub fixed: MemoryFixed,
    /// What kind of memory it is (ranked by profile weights).
    pub kind: MemoryType,
    /// The text: plain, or an edited text's automerge change or snapshot.
    pub text: MemoryText,
    /// Tags, each a short slug-like word ([`MAX_TAGS`] at most).
    pub tags: Vec<String>,
    /// How much the memory matters, 0 to 1.
    pub importance: f32,
    /// How sure its writer is of it, 0 to 1.
    pub confidence: f32,
    /// Pinned memories are reserved a place in a pack.
    pub pinned: bool,
    /// When the memory stops being recalled, in Unix milliseconds; `None` never.
    pub expires_ms: Option<u64>,
    /// The memory this one replaces. The replaced memory is never written
    /// to: its effective end of validity is derived where it is read
    /// (docs/design.md §11).
    pub supersedes: Option<MemoryId>,
    /// When the content was true in the world (valid time).
    pub validity: Validity,
}

/// When a memory's content was true in the world, in Unix milliseconds:
/// from `from_ms` (inclusive; unset = from the memory's creation) to `to_ms`
/// (exclusive; unset = still true). Valid time is the world's, not the
/// store's: it never changes what a node holds or sends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Encode, Decode)]
pub struct Validity {
    /// Start of validity, inclusive; `None` from the memory's creation.
    pub from_ms: Option<u64>,
    /// End of validity, exclusive; `None` still true.
    pub to_ms: Option<u64>,
}

impl Validity {
    /// Neither end set: the content is true from creation on.
    pub fn is_open(&self) -> bool {
        self.from_ms.is_none() && self.to_ms.is_none()
    }
}

/// Variant index of a content fact that carries a [`Validity`].
pub const CONTENT_WITH_VALIDITY: u32 = 9;

impl MemoryContent {
    /// The fields of the original (variant 0) encoding, in their order.
    fn encode_fields<E: Encoder>(&self, e: &mut E) -> Result<(), EncodeError> {
        self.id.encode(e)?;
        self.fixed.encode(e)?;
        self.kind.encode(e)?;
        self.text.encode(e)?;
        self.tags.encode(e)?;
        self.importance.encode(e)?;
        self.confidence.encode(e)?;
        self.pinned.encode(e)?;
        self.expires_ms.encode(e)?;
        self.supersedes.encode(e)
    }

    fn decode_fields<D: Decoder>(d: &mut D, validity: bool) -> Result<Self, DecodeError> {
        let mut m = MemoryContent {
            id: Decode::decode(d)?,
            fixed: Decode::decode(d)?,
            kind: Decode::decode(d)?,
            text: Decode::decode(d)?,
            tags: Decode::decode(d)?,
            importance: Decode::decode(d)?,
            confidence: Decode::decode(d)?,
            pinned: Decode::decode(d)?,
            expires_ms: Decode::decode(d)?,
            supersedes: Decode::decode(d)?,
            validity: Validity::default(),
        };
        if validity {
            m.validity = Decode::decode(d)?;
        }
        Ok(m)
    }
}

impl Encode for FactBody {
    fn encode<E: Encoder>(&self, e: &mut E) -> Result<(), EncodeError> {
        fn tagged<E: Encoder, T: Encode>(e: &mut E, i: u32, v: &T) -> Result<(), EncodeError> {
            i.encode(e)?;
            v.encode(e)
        }
        match self {
            FactBody::MemoryContent(m) if m.validity.is_open() => {
                0u32.encode(e)?;
                m.encode_fields(e)
            }
            FactBody::MemoryContent(m) => {
                CONTENT_WITH_VALIDITY.encode(e)?;
                m.encode_fields(e)?;
                m.validity.encode(e)
            }
            FactBody::MemoryAcl(v) => tagged(e, 1, v),
            FactBody::MemoryTombstone(v) => tagged(e, 2, v),
            FactBody::Link(v) => tagged(e, 3, v),
            FactBody::Team(v) => tagged(e, 4, v),
            FactBody::Project(v) => tagged(e, 5, v),
            FactBody::Membership(v) => tagged(e, 6, v),
            FactBody::Agent(v) => tagged(e, 7, v),
            FactBody::Profile(v) => tagged(e, 8, v),
        }
    }
}

impl<Context> Decode<Context> for FactBody {
    fn decode<D: Decoder<Context = Context>>(d: &mut D) -> Result<Self, DecodeError> {
        let index = u32::decode(d)?;
        Ok(match index {
            0 => FactBody::MemoryContent(MemoryContent::decode_fields(d, false)?),
            CONTENT_WITH_VALIDITY => {
                let m = MemoryContent::decode_fields(d, true)?;
                if m.validity.is_open() {
                    // Variant 0 is the one spelling of an open validity.
                    return Err(DecodeError::OtherString(
                        "content with an empty validity under the validity variant".into(),
                    ));
                }
                FactBody::MemoryContent(m)
            }
            1 => FactBody::MemoryAcl(Decode::decode(d)?),
            2 => FactBody::MemoryTombstone(Decode::decode(d)?),
            3 => FactBody::Link(Decode::decode(d)?),
            4 => FactBody::Team(Decode::decode(d)?),
            5 => FactBody::Project(Decode::decode(d)?),
            6 => FactBody::Membership(Decode::decode(d)?),
            7 => FactBody::Agent(Decode::decode(d)?),
            8 => FactBody::Profile(Decode::decode(d)?),
            found => {
                return Err(DecodeError::UnexpectedVariant {
                    type_name: "FactBody",
                    allowed: &bincode::error::AllowedEnumVariants::Range { min: 0, max: 9 },
                    found,
                });
            }
        })
    }
}
bincode::impl_borrow_decode!(FactBody);

/// The acl register of a memory (clock `acl_v`).
#[derive(Clone, Debug, PartialEq, Encode, Decode)]
pub struct MemoryAcl {
    /// The memory whose grants these are.
    pub id: MemoryId,
    /// The fields fixed at creation.
    pub fixed: MemoryFixed,
    /// The scopes, besides the owner, that may see the memory.
    pub grants: Grants,
}

/// A terminal tombstone: beats every other fact about the memory.
#[derive(Clone, Debug, PartialEq, Encode, Decode)]
pub struct MemoryTombstone {
    /// The memory deleted.
    pub id: MemoryId,
    /// The fields fixed at creation.
    pub fixed: MemoryFixed,
}

/// A directed, typed association between two memories.
#[derive(Clone, Debug, PartialEq, Encode, Decode)]
pub struct LinkFact {
    /// The memory the link starts at.
    pub from: MemoryId,
    /// The memory it points to.
    pub to: MemoryId,
    /// What the link says (related, supports, contradicts, …).
    pub relation: Relation,
    /// Its strength, 0 to 1.
    pub weight: f32,
    /// `false` retracts the link.
    pub present: bool,
}

/// A team's record. Its `origin` is fixed at creation: the node that
/// created the team, the only one (with its `full` peers) that may author
/// the team's record and memberships (the org origin rule).
#[derive(Clone, Debug, PartialEq, Encode, Decode)]
pub struct TeamFact {
    /// The team's slug.
    pub id: TeamId,
    /// Fixed at creation.
    pub origin: NodeId,
    /// Its display name.
    pub name: String,
    /// `false` removes the team.
    pub present: bool,
}

/// A project's record; `team` and `origin` are fixed at creation, as for a
/// team.
#[derive(Clone, Debug, PartialEq, Encode, Decode)]
pub struct ProjectFact {
    /// The project's slug.
    pub id: ProjectId,
    /// Fixed at creation.
    pub team: TeamId,
    /// Fixed at creation.
    pub origin: NodeId,
    /// Its display name.
    pub name: String,
    /// `false` removes the project.
    pub present: bool,
}

/// A team or a project: the org scopes an agent can be a member of.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Encode, Decode)]
pub enum OrgScope {
    /// A team, `team:ID`.
    Team(TeamId),
    /// A project, `project:ID`.
    Project(ProjectId),
}

impl OrgScope {
    /// Whether the scope's id is qualified (`NAME@QUALIFIER`).
    pub fn is_qualified(&self) -> bool {
        match self {
            OrgScope::Team(t) => t.is_qualified(),
            OrgScope::Project(p) => p.is_qualified(),
        }
    }
}

impl std::fmt::Display for OrgScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OrgScope::Team(t) => write!(f, "team:{t}"),
            OrgScope::Project(p) => write!(f, "project:{p}"),
        }
    }
}

/// An agent's membership of a team or project: what project and team grants are checked against.
#[derive(Clone, Debug, PartialEq, Encode, Decode)]
pub struct MembershipFact {
    /// The team or project.
    pub scope: OrgScope,
    /// The member.
    pub agent: AgentId,
    /// Its role there (free text, e.g. `member`).
    pub role: String,
    /// `false` ends the membership.
    pub present: bool,
}

/// An agent's record: who may own memories and ask for them on this mesh.
#[derive(Clone, Debug, PartialEq, Encode, Decode)]
pub struct AgentFact {
    /// The agent's slug.
    pub id: AgentId,
    /// What kind of agent it is (free text, e.g. `assistant`).
    pub kind: String,
    /// Its display name.
    pub display_name: String,
    /// `false` removes the agent.
    pub present: bool,
}

/// Per-agent ranking weights by memory type.
#[derive(Clone, Debug, PartialEq, Encode, Decode)]
pub struct ProfileFact {
    /// The agent the weights rank for.
    pub agent: AgentId,
    /// A weight per memory type; types not named weigh 1.
    pub weights: Vec<(MemoryType, f32)>,
}

/// Which register a fact writes: facts with equal registers compete under
/// last-writer-wins; facts with different registers never interact.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Encode, Decode)]
pub enum Register {
    /// A memory's content.
    MemoryContent(MemoryId),
    /// A memory's grants.
    MemoryAcl(MemoryId),
    /// A memory's tombstone.
    MemoryTombstone(MemoryId),
    /// A link, by its two ends and relation.
    Link(MemoryId, MemoryId, Relation),
    /// A team's record.
    Team(TeamId),
    /// A project's record.
    Project(ProjectId),
    /// An agent's membership of one team or project.
    Membership(OrgScope, AgentId),
    /// An agent's record.
    Agent(AgentId),
    /// An agent's profile weights.
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
                if let Some(to) = m.validity.to_ms
                    && to <= m.validity.from_ms.unwrap_or(m.fixed.created_ms)
                {
                    return bad("valid_to must be later than valid_from (default: creation)");
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
                if !t.id.admits_origin(&t.origin) {
                    return bad("a qualified team id must be qualified by its origin");
                }
                check_name(&t.name)?;
            }
            FactBody::Project(p) => {
                if !p.id.is_valid() || !p.team.is_valid() {
                    return bad("project or team id is not a slug");
                }
                if !p.id.admits_origin(&p.origin) {
                    return bad("a qualified project id must be qualified by its origin");
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec;

    /// The content fact's layout before valid time, as bincode's derive
    /// wrote it: what every fact signed until then is made of.
    #[derive(Encode)]
    struct LegacyContent {
        id: MemoryId,
        fixed: MemoryFixed,
        kind: MemoryType,
        text: MemoryText,
        tags: Vec<String>,
        importance: f32,
        confidence: f32,
        pinned: bool,
        expires_ms: Option<u64>,
        supersedes: Option<MemoryId>,
    }

    #[derive(Encode)]
    enum LegacyBody {
        MemoryContent(LegacyContent),
    }

    fn content(supersedes: Option<MemoryId>, validity: Validity) -> MemoryContent {
        MemoryContent {
            id: MemoryId([1; 16]),
            fixed: MemoryFixed {
                owner: AgentId::parse("alice").unwrap(),
                created_ms: 1_000,
                origin: NodeId([2; 32]),
            },
            kind: MemoryType::default(),
            text: MemoryText::Plain("deploy port is 8080".into()),
            tags: vec!["ops".into()],
            importance: 0.5,
            confidence: 1.0,
            pinned: false,
            expires_ms: Some(9_000),
            supersedes,
            validity,
        }
    }

    fn legacy(m: &MemoryContent) -> Vec<u8> {
        codec::encode(&LegacyBody::MemoryContent(LegacyContent {
            id: m.id,
            fixed: m.fixed.clone(),
            kind: m.kind.clone(),
            text: m.text.clone(),
            tags: m.tags.clone(),
            importance: m.importance,
            confidence: m.confidence,
            pinned: m.pinned,
            expires_ms: m.expires_ms,
            supersedes: m.supersedes,
        }))
    }

    #[test]
    fn a_content_fact_without_validity_keeps_its_old_bytes() {
        for sup in [None, Some(MemoryId([3; 16]))] {
            let m = content(sup, Validity::default());
            let old = legacy(&m);
            assert_eq!(codec::encode(&FactBody::MemoryContent(m.clone())), old);
            let back: FactBody = codec::decode_canonical("fact", &old).unwrap();
            assert_eq!(back, FactBody::MemoryContent(m));
        }
    }

    #[test]
    fn validity_travels_under_its_own_variant_and_round_trips() {
        let v = Validity {
            from_ms: Some(500),
            to_ms: Some(2_000),
        };
        let m = content(None, v);
        let bytes = codec::encode(&FactBody::MemoryContent(m.clone()));
        assert_eq!(bytes[0], CONTENT_WITH_VALIDITY as u8);
        // The old fields, then the validity.
        assert_eq!(&bytes[1..], {
            let mut old = legacy(&m)[1..].to_vec();
            old.extend(codec::encode(&v));
            old
        });
        let back: FactBody = codec::decode_canonical("fact", &bytes).unwrap();
        assert_eq!(back, FactBody::MemoryContent(m));
    }

    #[test]
    fn an_empty_validity_under_the_validity_variant_is_refused() {
        let m = content(None, Validity::default());
        let mut bytes = vec![CONTENT_WITH_VALIDITY as u8];
        bytes.extend(&legacy(&m)[1..]);
        bytes.extend(codec::encode(&Validity::default()));
        assert!(codec::decode_canonical::<FactBody>("fact", &bytes).is_err());
        // An unknown variant past it is refused too.
        let mut bytes = vec![10u8];
        bytes.extend(&legacy(&m)[1..]);
        assert!(codec::decode_canonical::<FactBody>("fact", &bytes).is_err());
    }

    #[test]
    fn a_qualified_record_must_name_the_origin_its_id_is_qualified_by() {
        let origin = NodeId([2; 32]);
        let other = NodeId([9; 32]);
        let team = |id: &str, origin| {
            FactBody::Team(TeamFact {
                id: TeamId::parse(id).unwrap(),
                origin,
                name: "zeus".into(),
                present: true,
            })
        };
        let mine = TeamId::qualified("zeus", &origin).unwrap();
        assert!(team(mine.as_str(), origin).validate().is_ok());
        assert!(team(mine.as_str(), other).validate().is_err());
        // A legacy id names whichever origin created it.
        assert!(team("zeus", other).validate().is_ok());
        let project = |id: &ProjectId, origin| {
            FactBody::Project(ProjectFact {
                id: id.clone(),
                team: mine.clone(),
                origin,
                name: "ui".into(),
                present: true,
            })
        };
        let ui = ProjectId::qualified("ui", &origin).unwrap();
        assert!(project(&ui, origin).validate().is_ok());
        assert!(project(&ui, other).validate().is_err());
    }

    #[test]
    fn validity_must_end_after_it_starts() {
        let ok = |v: Validity| FactBody::MemoryContent(content(None, v)).validate();
        assert!(
            ok(Validity {
                from_ms: Some(10),
                to_ms: Some(11)
            })
            .is_ok()
        );
        assert!(
            ok(Validity {
                from_ms: Some(10),
                to_ms: Some(10)
            })
            .is_err()
        );
        // An unset start is the creation (1_000).
        assert!(
            ok(Validity {
                from_ms: None,
                to_ms: Some(1_000)
            })
            .is_err()
        );
        assert!(
            ok(Validity {
                from_ms: None,
                to_ms: Some(1_001)
            })
            .is_ok()
        );
        // A start before the creation is a fact about the world: allowed.
        assert!(
            ok(Validity {
                from_ms: Some(1),
                to_ms: None
            })
            .is_ok()
        );
    }

    #[test]
    fn every_time_a_fact_carries_is_bounded_and_the_bound_itself_is_kept() {
        let fact = |wall_ms: u64, body: FactBody| Fact {
            clock: Hlc {
                wall_ms,
                logical: 0,
                node: NodeId([2; 32]),
            },
            body,
        };
        let m = content(None, Validity::default());
        let fixed = MemoryFixed {
            created_ms: MAX_TIME_MS,
            ..m.fixed.clone()
        };
        // Each time field at the bound: kept.
        let at_bound = MemoryContent {
            fixed: fixed.clone(),
            expires_ms: Some(MAX_TIME_MS),
            validity: Validity {
                from_ms: Some(MAX_TIME_MS - 1),
                to_ms: Some(MAX_TIME_MS),
            },
            ..m.clone()
        };
        let acl = MemoryAcl {
            id: m.id,
            fixed: fixed.clone(),
            grants: Grants::private(),
        };
        let tomb = MemoryTombstone { id: m.id, fixed };
        for body in [
            FactBody::MemoryContent(at_bound.clone()),
            FactBody::MemoryAcl(acl.clone()),
            FactBody::MemoryTombstone(tomb.clone()),
        ] {
            assert_eq!(fact(MAX_TIME_MS, body).validate(), Ok(()));
        }
        // Each one past it: refused, naming the field.
        let past = MAX_TIME_MS + 1;
        let late_created = MemoryFixed {
            created_ms: past,
            ..m.fixed.clone()
        };
        let cases = [
            ("clock", fact(past, FactBody::MemoryContent(m.clone()))),
            (
                "clock",
                fact(
                    u64::MAX,
                    FactBody::Team(TeamFact {
                        id: TeamId::parse("a").unwrap(),
                        origin: NodeId([2; 32]),
                        name: "a".into(),
                        present: true,
                    }),
                ),
            ),
            (
                "created",
                fact(
                    1,
                    FactBody::MemoryContent(MemoryContent {
                        fixed: late_created.clone(),
                        ..m.clone()
                    }),
                ),
            ),
            (
                "created",
                fact(
                    1,
                    FactBody::MemoryAcl(MemoryAcl {
                        fixed: late_created.clone(),
                        ..acl
                    }),
                ),
            ),
            (
                "created",
                fact(
                    1,
                    FactBody::MemoryTombstone(MemoryTombstone {
                        fixed: late_created,
                        ..tomb
                    }),
                ),
            ),
            (
                "expires",
                fact(
                    1,
                    FactBody::MemoryContent(MemoryContent {
                        expires_ms: Some(past),
                        ..m.clone()
                    }),
                ),
            ),
            (
                "valid_from",
                fact(
                    1,
                    FactBody::MemoryContent(content(
                        None,
                        Validity {
                            from_ms: Some(past),
                            to_ms: None,
                        },
                    )),
                ),
            ),
            (
                "valid_to",
                fact(
                    1,
                    FactBody::MemoryContent(content(
                        None,
                        Validity {
                            from_ms: None,
                            to_ms: Some(u64::MAX),
                        },
                    )),
                ),
            ),
        ];
        for (what, f) in cases {
            match f.validate() {
                Err(ProtocolError::TimeOutOfBounds { what: w, ms }) => {
                    assert_eq!(w, what);
                    assert!(ms > MAX_TIME_MS);
                }
                other => panic!("{what}: {other:?}"),
            }
            assert!(f.check_times().is_err(), "{what}");
        }
        // The bound is 9999-12-31T23:59:59.999Z.
        assert_eq!(MAX_TIME_MS, 253_402_300_800_000 - 1);
        assert_eq!((MAX_TIME_MS + 1) / 86_400_000, 2_932_897);
    }
}
