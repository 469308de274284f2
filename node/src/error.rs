//! The node's error type: every variant maps to one CLI exit code.

use std::path::PathBuf;

/// What can go wrong in a node operation, grouped by what the caller can do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// Bad usage or input the user typed, in free form: a malformed scope or
    /// time, an empty content, a flag out of range. Only for messages no
    /// caller branches on; a name the node does not know is
    /// [`NodeError::Unknown`], a memory it cannot show is
    /// [`NodeError::NoSuchMemory`].
    #[error("{0}")]
    BadInput(String),
    /// A well-formed name of an agent, team, project or peer that this node
    /// does not know. `message` is the line shown (it may say how to
    /// register the name); exit code of bad input.
    #[error("{message}")]
    Unknown {
        /// What kind of thing was named.
        kind: UnknownKind,
        /// The name as given (a peer's short id for a peer).
        name: String,
        /// The line shown to the user.
        message: String,
    },
    /// A team or project name that more than one scope held here carries
    /// (two nodes created one name independently): it must be qualified.
    /// `candidates` are the qualified ids, each a valid answer; exit code of
    /// bad input.
    #[error("{message}")]
    Ambiguous {
        /// A team or a project.
        kind: UnknownKind,
        /// The name as given.
        name: String,
        /// The scopes it may mean, qualified (`team:zeus@3f2a…`).
        candidates: Vec<String>,
        /// The line shown to the user.
        message: String,
    },
    /// The memory does not exist *or the requester cannot see it* (the two are
    /// indistinguishable by design).
    #[error("no such memory: {0}")]
    NoSuchMemory(String),
    /// The requester may not do this, by `rule` (e.g. a non-owner sharing a
    /// memory: [`Rule::NotOwner`]); `message` says what to do instead.
    #[error("refused: {message}")]
    Refused {
        /// The rule that refused it.
        rule: Rule,
        /// Why, and what to do instead.
        message: String,
    },
    /// An operation failed (a bundle that does not verify, a peer that
    /// cannot be reached); the message says why.
    #[error("{0}")]
    Failed(String),
    /// A peer could not be reached at any address tried (nothing was
    /// exchanged); `message` lists what each address answered.
    #[error("{message}")]
    Unreachable {
        /// The node that was dialled.
        peer: amos_protocol::NodeId,
        /// The line shown to the user.
        message: String,
    },
    /// The directory is not an amos home.
    #[error("{} is not an amos home (run `amos init` first)", .0.display())]
    NotAHome(PathBuf),
    /// Stored data is damaged or of an unknown format.
    #[error("corrupt store: {0}")]
    Corrupt(String),
    /// A protocol value did not decode, validate or verify: a bad signature,
    /// a non-canonical encoding, a fact that breaks the data model, a time
    /// past the bound. Kept whole, so a caller can tell a verification
    /// failure from plain bad input (a malformed id or scope a user typed
    /// is [`NodeError::BadInput`]); its exit code is bad input's.
    #[error(transparent)]
    Protocol(amos_protocol::ProtocolError),
    /// A SQLite statement or connection failed.
    #[error("database error: {0}")]
    Db(#[from] rusqlite::Error),
    /// The full-text or vector index failed (tantivy's message).
    #[error("index error: {0}")]
    Index(String),
    /// A file or socket operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, e.g. `cannot read <path>`.
        context: String,
        /// The operating system's error.
        source: std::io::Error,
    },
}

impl NodeError {
    /// The CLI exit code (docs/cli.md): 1 failed, 2 bad input, 3 refused.
    pub fn exit_code(&self) -> u8 {
        match self {
            NodeError::BadInput(_)
            | NodeError::Unknown { .. }
            | NodeError::Ambiguous { .. }
            | NodeError::Protocol(_)
            | NodeError::NoSuchMemory(_)
            | NodeError::NotAHome(_) => 2,
            NodeError::Refused { .. } => 3,
            _ => 1,
        }
    }

    /// `unknown KIND NAME`: a name this node does not know.
    pub(crate) fn unknown(kind: UnknownKind, name: impl std::fmt::Display) -> NodeError {
        let name = name.to_string();
        NodeError::Unknown {
            message: format!("unknown {kind} {name}"),
            kind,
            name,
        }
    }

    /// [`NodeError::unknown`] with its own line (one that says how to
    /// register the name).
    pub(crate) fn unknown_with(
        kind: UnknownKind,
        name: impl std::fmt::Display,
        message: String,
    ) -> NodeError {
        NodeError::Unknown {
            kind,
            name: name.to_string(),
            message,
        }
    }

    /// A refusal by `rule`.
    pub(crate) fn refused(rule: Rule, message: String) -> NodeError {
        NodeError::Refused { rule, message }
    }

    /// The rule that refused this, if it is a refusal.
    pub fn rule(&self) -> Option<Rule> {
        match self {
            NodeError::Refused { rule, .. } => Some(*rule),
            _ => None,
        }
    }

    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> NodeError {
        let context = context.into();
        move |source| NodeError::Io { context, source }
    }
}

/// What kind of name [`NodeError::Unknown`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum UnknownKind {
    /// An agent of this node.
    Agent,
    /// A team.
    Team,
    /// A project.
    Project,
    /// A registered peer node.
    Peer,
    /// A working context an agent parked (`amos context offload`).
    Context,
}

impl UnknownKind {
    /// The word shown (`agent`, `team`, `project`, `peer`).
    pub fn as_str(self) -> &'static str {
        match self {
            UnknownKind::Agent => "agent",
            UnknownKind::Team => "team",
            UnknownKind::Project => "project",
            UnknownKind::Peer => "peer",
            UnknownKind::Context => "context",
        }
    }
}

impl std::fmt::Display for UnknownKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The rule behind a [`NodeError::Refused`], each with a stable code
/// ([`Rule::code`]) a front end may show or branch on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Rule {
    /// Only a memory's owner (or the local administrator, where the
    /// operation allows it) may do this (docs/design.md §5.1).
    NotOwner,
    /// Only a memory's origin node speaks for its grants and tombstone
    /// (docs/design.md §6.2).
    MemoryOrigin,
    /// Only a memory's origin or a full peer of it may edit it
    /// (docs/design.md §5.1).
    NotAFullPeer,
    /// Only the node that created a team or project (or a full peer of it)
    /// may change its record or roster: the org origin rule.
    OrgOrigin,
    /// Facts come and go only between registered peers (docs/design.md
    /// §6.6).
    NotAPeer,
    /// A bundle addressed to another node is read only there
    /// (docs/design.md §8).
    WrongRecipient,
    /// A restore would replace a store that holds memories, without
    /// `--force`.
    StoreNotEmpty,
    /// A node cannot pair with itself.
    PairWithSelf,
    /// The pairing code is not one this node issued.
    UnknownCode,
    /// The pairing code already paired a node.
    CodeUsed,
    /// The pairing code has expired.
    CodeExpired,
    /// A join asked for an agent id the invite cannot take (malformed, one
    /// of the inviter's own agents, or outside the invite's scope).
    JoinAgent,
    /// A bearer token that is not one this node issued, or is expired or
    /// revoked, or whose agent is no longer registered here (HTTP 401).
    BadToken,
}

impl Rule {
    /// The stable code: `not_owner`, `org_not_origin`, … (snake case, never
    /// renamed). A rule the sync gate also enforces on a peer's facts has
    /// the gate's code ([`amos_sync::Refusal::code`], what the audit log
    /// says), so one refusal has one code wherever it is met.
    pub fn code(self) -> &'static str {
        use amos_sync::Refusal;
        match self {
            Rule::NotOwner => "not_owner",
            Rule::MemoryOrigin => Refusal::NotOrigin.code(),
            Rule::NotAFullPeer => "not_a_full_peer",
            Rule::OrgOrigin => Refusal::OrgNotOrigin(String::new()).code(),
            Rule::NotAPeer => Refusal::UnknownPeer.code(),
            Rule::WrongRecipient => "wrong_recipient",
            Rule::StoreNotEmpty => "store_not_empty",
            Rule::PairWithSelf => "pair_with_self",
            Rule::UnknownCode => "unknown_code",
            Rule::CodeUsed => "code_used",
            Rule::CodeExpired => "code_expired",
            Rule::JoinAgent => "join_agent",
            Rule::BadToken => "bad_token",
        }
    }
}

/// A textual value that did not parse (an id, a scope, a slug: what a user
/// types) is bad input; every other protocol error stays itself.
impl From<amos_protocol::ProtocolError> for NodeError {
    fn from(e: amos_protocol::ProtocolError) -> Self {
        match e {
            amos_protocol::ProtocolError::Malformed(m) => NodeError::BadInput(m),
            e => NodeError::Protocol(e),
        }
    }
}

impl From<tantivy::TantivyError> for NodeError {
    fn from(e: tantivy::TantivyError) -> Self {
        NodeError::Index(e.to_string())
    }
}

/// The result of every fallible call of this crate.
pub type Result<T, E = NodeError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use amos_protocol::{AgentId, ProtocolError};

    /// What a user typed wrong is bad input; a signature that does not
    /// verify stays a protocol error a caller can match, with the same
    /// exit code and message.
    #[test]
    fn a_verification_failure_is_not_bad_input() {
        let typed: NodeError = AgentId::parse("").unwrap_err().into();
        assert!(matches!(typed, NodeError::BadInput(_)), "{typed:?}");
        let forged: NodeError = ProtocolError::BadSignature.into();
        assert!(
            matches!(forged, NodeError::Protocol(ProtocolError::BadSignature)),
            "{forged:?}"
        );
        assert_eq!(forged.exit_code(), 2);
        assert_eq!(forged.to_string(), ProtocolError::BadSignature.to_string());
    }

    /// Every variant keeps its exit code (docs/cli.md: 1 failed, 2 bad
    /// input, 3 refused) and the line users saw before the variants were
    /// typed.
    #[test]
    fn each_variant_maps_to_its_exit_code_and_line() {
        let peer = amos_protocol::NodeId([1; 32]);
        let io = std::io::Error::other("gone");
        let cases: Vec<(NodeError, u8, &str)> = vec![
            (
                NodeError::BadInput("empty content".into()),
                2,
                "empty content",
            ),
            (
                NodeError::unknown(UnknownKind::Team, "apollo"),
                2,
                "unknown team apollo",
            ),
            (
                NodeError::NoSuchMemory("m1".into()),
                2,
                "no such memory: m1",
            ),
            (
                NodeError::NotAHome(PathBuf::from("/x")),
                2,
                "/x is not an amos home (run `amos init` first)",
            ),
            (ProtocolError::BadSignature.into(), 2, "bad signature"),
            (
                NodeError::refused(Rule::NotOwner, "only the owner".into()),
                3,
                "refused: only the owner",
            ),
            (NodeError::Failed("no".into()), 1, "no"),
            (
                NodeError::Unreachable {
                    peer,
                    message: "cannot reach the inviter".into(),
                },
                1,
                "cannot reach the inviter",
            ),
            (NodeError::Corrupt("bad".into()), 1, "corrupt store: bad"),
            (
                NodeError::Db(rusqlite::Error::InvalidQuery),
                1,
                "database error: Query is not read-only",
            ),
            (NodeError::Index("x".into()), 1, "index error: x"),
            (NodeError::io("reading f")(io), 1, "reading f: gone"),
        ];
        for (e, code, line) in cases {
            assert_eq!(e.exit_code(), code, "{e:?}");
            assert_eq!(e.to_string(), line, "{e:?}");
        }
    }

    /// A caller branches on the kind and the rule, not on the words: the
    /// name is kept apart from the line, and each rule has its own code.
    #[test]
    fn unknown_names_and_rules_are_typed() {
        let e = NodeError::unknown_with(UnknownKind::Agent, "zed", "register zed".into());
        assert!(
            matches!(&e, NodeError::Unknown { kind: UnknownKind::Agent, name, .. } if name == "zed"),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "register zed");
        assert_eq!(e.rule(), None);
        let r = NodeError::refused(Rule::OrgOrigin, "x".into());
        assert_eq!(r.rule(), Some(Rule::OrgOrigin));
        let all = [
            Rule::NotOwner,
            Rule::MemoryOrigin,
            Rule::NotAFullPeer,
            Rule::OrgOrigin,
            Rule::NotAPeer,
            Rule::WrongRecipient,
            Rule::StoreNotEmpty,
            Rule::PairWithSelf,
            Rule::UnknownCode,
            Rule::CodeUsed,
            Rule::CodeExpired,
            Rule::JoinAgent,
            Rule::BadToken,
        ];
        let codes: std::collections::HashSet<&str> = all.iter().map(|r| r.code()).collect();
        assert_eq!(codes.len(), all.len(), "two rules share a code");
        assert_eq!(Rule::NotOwner.code(), "not_owner");
        // The rules the sync gate shares keep the audit log's codes.
        assert_eq!(Rule::MemoryOrigin.code(), "not_origin");
        assert_eq!(Rule::OrgOrigin.code(), "org_not_origin");
        assert_eq!(Rule::NotAPeer.code(), "unknown_peer");
        for r in [Rule::MemoryOrigin, Rule::OrgOrigin, Rule::NotAPeer] {
            assert!(amos_sync::Refusal::CODES.contains(&r.code()), "{r:?}");
        }
    }
}
