//! Team and project names as users type them, resolved to the scopes this
//! node holds (docs/design.md §3): `team:zeus` is the one present team
//! named `zeus` here, whether its id is qualified (`zeus@3f2a…`) or legacy
//! (`zeus`); when more than one carries the name, the name is ambiguous
//! and must be qualified (`team:zeus@3f2a`, any unique prefix of the
//! qualifier, or `team:zeus@` for the legacy id). Every front end's scope
//! text goes through [`Node::resolve_scope`] (or the crate's
//! [`resolve_scope`] inside a transaction), and scopes a front end parsed
//! itself through [`canonical_scope`].
//!
//! Must never: pick one of two scopes of the same name by itself, or turn a
//! name into a scope of another name. It reads the org tables only; what a
//! scope lets anyone see is the gate's business.

use amos_protocol::{NodeId, ProjectId, QUALIFIER_LEN, Scope, TeamId};

use crate::api::node::Node;
use crate::error::{NodeError, Result, UnknownKind};
use crate::store::Readable;
use crate::store::org::{self, OrgKind};

/// What a name that no present scope here carries resolves to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unheld {
    /// The id as typed (a legacy id, or a qualified one in full): the
    /// caller's own checks say whether it must exist.
    AsTyped,
    /// The scope that node would have created under that name (an import's
    /// team created here: this node's own).
    CreatedBy(NodeId),
}

fn kind_word(kind: OrgKind) -> (&'static str, UnknownKind) {
    match kind {
        OrgKind::Team => ("team", UnknownKind::Team),
        OrgKind::Project => ("project", UnknownKind::Project),
    }
}

/// The id `text` names among the present teams (or projects) here.
fn resolve_id(
    conn: &(impl Readable + ?Sized),
    kind: OrgKind,
    text: &str,
    unheld: Unheld,
) -> Result<String> {
    let text = text.trim();
    let (word, unknown) = kind_word(kind);
    let parse = |id: &str| -> Result<String> {
        match kind {
            OrgKind::Team => TeamId::parse(id).map(|t| t.as_str().to_owned()),
            OrgKind::Project => ProjectId::parse(id).map(|p| p.as_str().to_owned()),
        }
        .map_err(NodeError::from)
    };
    let (name, prefix) = match text.split_once('@') {
        None => (text, None),
        Some((n, q)) => (n, Some(q)),
    };
    // The name must be a slug whatever follows it (the parse error names `text`).
    if parse(name).is_err() || name.contains('@') {
        return parse(text);
    }
    let held = org::ids_named(conn, kind, name)?;
    let candidates: Vec<String> = match prefix {
        // `NAME@`: the legacy id, held or not.
        Some("") => return Ok(name.to_owned()),
        // A qualified id in full: as typed (the caller checks it exists).
        Some(q) if q.len() == QUALIFIER_LEN => return parse(text),
        Some(q) => held
            .into_iter()
            .filter(|id| id.split_once('@').is_some_and(|(_, iq)| iq.starts_with(q)))
            .collect(),
        None => held,
    };
    match candidates.len() {
        1 => Ok(candidates.into_iter().next().unwrap_or_default()),
        0 => match (prefix, unheld) {
            (Some(_), _) => {
                // A malformed qualifier is bad input, a good one unknown.
                if !prefix.is_some_and(|q| {
                    q.bytes()
                        .all(|c| c.is_ascii_lowercase() || (b'2'..=b'7').contains(&c))
                }) {
                    return parse(text);
                }
                Err(NodeError::unknown(unknown, text))
            }
            (None, Unheld::AsTyped) => Ok(name.to_owned()),
            (None, Unheld::CreatedBy(node)) => match kind {
                OrgKind::Team => TeamId::qualified(name, &node).map(|t| t.as_str().to_owned()),
                OrgKind::Project => {
                    ProjectId::qualified(name, &node).map(|p| p.as_str().to_owned())
                }
            }
            .map_err(NodeError::from),
        },
        _ => {
            let shown: Vec<String> = candidates
                .iter()
                .map(|id| {
                    if id.contains('@') {
                        format!("{word}:{id}")
                    } else {
                        format!("{word}:{id}@ (the legacy id)")
                    }
                })
                .collect();
            Err(NodeError::Ambiguous {
                kind: unknown,
                name: text.to_owned(),
                message: format!(
                    "{word} name {text} is ambiguous: {} scopes here carry it, so name one \
                     qualified (a unique prefix of what follows the @ is enough): {}",
                    candidates.len(),
                    shown.join(", ")
                ),
                candidates: candidates.iter().map(|id| format!("{word}:{id}")).collect(),
            })
        }
    }
}

/// The team `text` names here ([`Unheld`] says what an unheld name means).
pub(crate) fn resolve_team(
    conn: &(impl Readable + ?Sized),
    text: &str,
    unheld: Unheld,
) -> Result<TeamId> {
    Ok(TeamId::parse(&resolve_id(
        conn,
        OrgKind::Team,
        text,
        unheld,
    )?)?)
}

/// The project `text` names here.
pub(crate) fn resolve_project(
    conn: &(impl Readable + ?Sized),
    text: &str,
    unheld: Unheld,
) -> Result<ProjectId> {
    Ok(ProjectId::parse(&resolve_id(
        conn,
        OrgKind::Project,
        text,
        unheld,
    )?)?)
}

/// The scope `text` names: `team:NAME` and `project:NAME` resolved here,
/// any other scope parsed as it is.
pub(crate) fn resolve_scope(
    conn: &(impl Readable + ?Sized),
    text: &str,
    unheld: Unheld,
) -> Result<Scope> {
    let text = text.trim();
    match text.split_once(':') {
        Some(("team", t)) => Ok(Scope::Team(resolve_team(conn, t, unheld)?)),
        Some(("project", p)) => Ok(Scope::Project(resolve_project(conn, p, unheld)?)),
        _ => Ok(text.parse::<Scope>()?),
    }
}

/// A scope a front end parsed itself (`team:zeus` parses as the legacy id
/// `zeus`), resolved as if typed: a legacy-form team or project id means
/// the one scope of that name held here. Qualified ids and other scopes
/// are kept.
pub(crate) fn canonical_scope(
    conn: &(impl Readable + ?Sized),
    scope: &Scope,
    unheld: Unheld,
) -> Result<Scope> {
    match scope {
        Scope::Team(t) if !t.is_qualified() => resolve_scope(conn, &scope.to_string(), unheld),
        Scope::Project(p) if !p.is_qualified() => resolve_scope(conn, &scope.to_string(), unheld),
        other => Ok(other.clone()),
    }
}

/// A policy as a user types it (`full`, or scopes comma-separated), each
/// team and project name resolved here ([`resolve_scope`]).
pub(crate) fn resolve_policy(
    conn: &(impl Readable + ?Sized),
    text: &str,
    unheld: Unheld,
) -> Result<amos_acl::PeerPolicy> {
    let text = text.trim();
    if text == "full" {
        return Ok(amos_acl::PeerPolicy::Full);
    }
    if text == "none" {
        return Ok(amos_acl::PeerPolicy::none());
    }
    // The parse first, for its one-line message on a malformed policy.
    let _: amos_acl::PeerPolicy = relaxed(text).parse()?;
    let scopes = text
        .split(',')
        .map(|s| resolve_scope(conn, s, unheld))
        .collect::<Result<Vec<_>>>()?;
    Ok(amos_acl::PeerPolicy::scoped(scopes)?)
}

/// A policy as shown here: each team and project by its label
/// ([`org::scope_label`]), which [`resolve_policy`] reads back.
pub(crate) fn policy_label(
    conn: &(impl Readable + ?Sized),
    policy: &amos_acl::PeerPolicy,
) -> String {
    match policy {
        amos_acl::PeerPolicy::Full => "full".to_owned(),
        none if none.is_none() => "none".to_owned(),
        amos_acl::PeerPolicy::Scoped(s) => s
            .iter()
            .map(|s| org::scope_label(conn, s))
            .collect::<Vec<_>>()
            .join(","),
    }
}

/// `text` with every `@…` qualifier (a prefix, or `@` alone) left out, so
/// that the policy parser judges the rest.
fn relaxed(text: &str) -> String {
    text.split(',')
        .map(|s| s.split_once('@').map_or(s, |(n, _)| n))
        .collect::<Vec<_>>()
        .join(",")
}

impl Node {
    /// The scope a user's text names here: `team:zeus` is the one team
    /// named zeus this node holds; an ambiguous name is
    /// [`NodeError::Ambiguous`], listing the qualified ids. A name held
    /// nowhere here is kept as typed (what it is used for decides whether
    /// it must exist).
    pub fn resolve_scope(&self, text: &str) -> Result<Scope> {
        self.store.read(|r| resolve_scope(r, text, Unheld::AsTyped))
    }

    /// How `scope` is shown here: the display name, qualified only where
    /// another scope held here has the same name.
    pub fn scope_label(&self, scope: &Scope) -> String {
        self.store
            .read(|r| Ok(org::scope_label(r, scope)))
            .unwrap_or_else(|_| scope.to_string())
    }

    /// A memory's grants as shown here: [`Node::scope_label`] of each,
    /// `private` for none.
    pub fn grant_labels(&self, grants: &amos_protocol::Grants) -> Vec<String> {
        self.store
            .read(|r| Ok(org::grant_labels(r, grants)))
            .unwrap_or_else(|_| grants.to_strings())
    }

    /// [`Node::scope_label`] of a team or project.
    pub fn org_scope_label(&self, scope: &amos_protocol::OrgScope) -> String {
        self.scope_label(&match scope {
            amos_protocol::OrgScope::Team(t) => Scope::Team(t.clone()),
            amos_protocol::OrgScope::Project(p) => Scope::Project(p.clone()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::node::test_node;

    #[test]
    fn a_name_resolves_to_the_one_scope_that_carries_it_and_an_ambiguous_one_is_refused() {
        let (_dir, _home, mut node, _who) = test_node("alice");
        node.team_create("zeus", None).unwrap();
        let mine = TeamId::qualified("zeus", &node.node_id()).unwrap();
        assert_eq!(
            node.resolve_scope("team:zeus").unwrap(),
            Scope::Team(mine.clone())
        );
        assert_eq!(node.scope_label(&Scope::Team(mine.clone())), "team:zeus");
        // A second zeus: a full peer's, created there independently.
        let peer = amos_protocol::NodeIdentity::from_secret([9; 32]);
        let other = peer.node_id();
        node.peer_add(&other.to_string(), None, "full").unwrap();
        let theirs = TeamId::qualified("zeus", &other).unwrap();
        let fact = amos_protocol::Fact {
            clock: amos_protocol::Hlc {
                wall_ms: node.now_ms(),
                logical: 0,
                node: other,
            },
            body: amos_protocol::FactBody::Team(amos_protocol::TeamFact {
                id: theirs.clone(),
                origin: other,
                name: "zeus".into(),
                present: true,
            }),
        };
        let report = node
            .apply_from(&other, vec![peer.sign(fact).unwrap()])
            .unwrap();
        assert_eq!(report.applied, 1, "both zeus records are held: {report:?}");
        let e = node.resolve_scope("team:zeus").unwrap_err();
        let NodeError::Ambiguous { candidates, .. } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(candidates.len(), 2);
        assert!(e.to_string().contains(&format!("team:{mine}")), "{e}");
        assert!(e.to_string().contains(&format!("team:{theirs}")), "{e}");
        assert_eq!(e.exit_code(), 2);
        // Any unique prefix of the qualifier names one.
        let q = theirs.qualifier().unwrap();
        assert_eq!(
            node.resolve_scope(&format!("team:zeus@{}", &q[..3]))
                .unwrap(),
            Scope::Team(theirs.clone())
        );
        assert_eq!(
            node.resolve_scope(&format!("team:{mine}")).unwrap(),
            Scope::Team(mine.clone())
        );
        // Both are shown qualified now.
        assert_eq!(
            node.scope_label(&Scope::Team(theirs.clone())),
            format!("team:{theirs}")
        );
        // A name held nowhere is kept as typed; a prefix held nowhere is unknown.
        assert_eq!(
            node.resolve_scope("team:apollo").unwrap(),
            "team:apollo".parse().unwrap()
        );
        assert!(matches!(
            node.resolve_scope("team:zeus@zzzz").unwrap_err(),
            NodeError::Unknown { .. }
        ));
        let e = node.resolve_scope("team:Zeus").unwrap_err();
        assert!(e.to_string().contains("malformed team id \"Zeus\""), "{e}");
        assert_eq!(e.exit_code(), 2);
        // A name created by a node is qualified by it.
        assert_eq!(
            node.store
                .read(|r| resolve_scope(r, "team:apollo", Unheld::CreatedBy(other)))
                .unwrap(),
            Scope::Team(TeamId::qualified("apollo", &other).unwrap())
        );
    }
    /// A signed team record of `origin`'s, created there as `id`.
    fn team_record(
        node: &Node,
        origin: &amos_protocol::NodeIdentity,
        id: &TeamId,
    ) -> amos_protocol::Verified<amos_protocol::SignedFact> {
        let fact = amos_protocol::Fact {
            clock: amos_protocol::Hlc {
                wall_ms: node.now_ms(),
                logical: 0,
                node: origin.node_id(),
            },
            body: amos_protocol::FactBody::Team(amos_protocol::TeamFact {
                id: id.clone(),
                origin: origin.node_id(),
                name: id.name().into(),
                present: true,
            }),
        };
        origin.sign(fact).unwrap()
    }

    #[test]
    fn a_policy_naming_a_team_not_held_yet_admits_its_first_record_and_fails_closed_on_two() {
        let (_dir, _home, mut node, _who) = test_node("alice");
        // A scoped peer relays a team a third node created.
        let relay = amos_protocol::NodeIdentity::from_secret([7; 32]);
        let creator = amos_protocol::NodeIdentity::from_secret([8; 32]);
        let other = amos_protocol::NodeIdentity::from_secret([9; 32]);
        node.peer_add(&relay.node_id().to_string(), None, "team:apollo")
            .unwrap();
        node.peer_add(&other.node_id().to_string(), None, "full")
            .unwrap();
        let unresolved: amos_acl::PeerPolicy = "team:apollo".parse().unwrap();
        assert_eq!(
            node.peer_policy(&relay.node_id()).unwrap(),
            Some(unresolved.clone())
        );
        let theirs = TeamId::qualified("apollo", &creator.node_id()).unwrap();
        let report = node
            .apply_from(
                &relay.node_id(),
                vec![team_record(&node, &creator, &theirs)],
            )
            .unwrap();
        assert_eq!(
            report.applied, 1,
            "the first apollo is admitted: {report:?}"
        );
        assert_eq!(
            node.peer_policy(&relay.node_id()).unwrap(),
            Some(amos_acl::PeerPolicy::scoped([Scope::Team(theirs.clone())]).unwrap()),
            "the name now means the one apollo held"
        );
        // A second apollo (from a full peer): the name admits neither.
        let second = TeamId::qualified("apollo", &other.node_id()).unwrap();
        let report = node
            .apply_from(&other.node_id(), vec![team_record(&node, &other, &second)])
            .unwrap();
        assert_eq!(report.applied, 1, "{report:?}");
        assert_eq!(
            node.peer_policy(&relay.node_id()).unwrap(),
            Some(unresolved)
        );
    }
}
