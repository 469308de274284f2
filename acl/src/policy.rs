//! Peer policies: the local operator's statement of what a peer shares with
//! us and we with it. `full` (a node of the same operator: everything flows),
//! a set of `global`, `team:ID`, `project:ID` scopes, or `none` (no facts
//! either way: a pure relay link, docs/design.md §7.11).
//!
//! Invariant: a policy is set by the local operator only; nothing a peer
//! sends can change it.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use amos_protocol::{Grants, OrgScope, ProtocolError, Scope};

/// What flows between us and one peer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PeerPolicy {
    /// The same operator's node: everything flows, including private and
    /// `agent:` memories, agents and profiles.
    Full,
    /// Only memories shared with (and org records of) these scopes. Holds
    /// only `Global`, `Team` and `Project` scopes; empty is `none` (nothing
    /// flows, what a stranger is given).
    Scoped(BTreeSet<Scope>),
}

impl PeerPolicy {
    /// Whether this is a `full` policy (the same operator's node).
    pub fn is_full(&self) -> bool {
        matches!(self, PeerPolicy::Full)
    }

    /// The `none` policy: no facts either way (a pure relay link). Admits
    /// no grants, no org record, nothing: what a stranger is given.
    pub fn none() -> Self {
        PeerPolicy::Scoped(BTreeSet::new())
    }

    /// Whether this is the `none` policy (no facts either way).
    pub fn is_none(&self) -> bool {
        matches!(self, PeerPolicy::Scoped(s) if s.is_empty())
    }

    /// A scoped policy from scopes; refuses `private`, `agent:` and empty
    /// sets (`none` is said with [`PeerPolicy::none`], never by accident).
    pub fn scoped(scopes: impl IntoIterator<Item = Scope>) -> Result<Self, ProtocolError> {
        let set: BTreeSet<Scope> = scopes.into_iter().collect();
        if set.is_empty() {
            return Err(ProtocolError::Malformed(
                "a policy needs at least one scope (or `full`)".into(),
            ));
        }
        for s in &set {
            if matches!(s, Scope::Private | Scope::Agent(_)) {
                return Err(ProtocolError::Malformed(format!(
                    "policy scope {s} is not allowed: private and agent: memories only flow to full peers"
                )));
            }
        }
        Ok(PeerPolicy::Scoped(set))
    }

    /// Whether a memory with these (effective) grants may go to the peer.
    pub fn admits_grants(&self, grants: &Grants) -> bool {
        match self {
            PeerPolicy::Full => true,
            PeerPolicy::Scoped(s) => grants.iter().any(|g| s.contains(g)),
        }
    }

    /// The grants that take effect on our node for a memory this peer sent:
    /// `grants ∩ policy` (all of them for a full peer).
    pub fn effective(&self, grants: &Grants) -> Grants {
        match self {
            PeerPolicy::Full => grants.clone(),
            PeerPolicy::Scoped(s) => grants.iter().filter(|g| s.contains(g)).cloned().collect(),
        }
    }

    /// Whether org records of `scope` (the team or project record and its
    /// memberships) are named by the policy: a team only if the policy names
    /// the team, a project only if it names the project. (The import gate
    /// and export also let a `project:P` policy carry P's team record and
    /// the team memberships P's members need; who may *author* those is the
    /// org origin rule's business, in `amos-sync`.)
    pub fn admits_org(&self, scope: &OrgScope) -> bool {
        let PeerPolicy::Scoped(s) = self else {
            return true;
        };
        match scope {
            OrgScope::Team(t) => s.contains(&Scope::Team(t.clone())),
            OrgScope::Project(p) => s.contains(&Scope::Project(p.clone())),
        }
    }

    /// The projects a scoped policy names (none for full).
    pub fn projects(&self) -> impl Iterator<Item = &amos_protocol::ProjectId> {
        self.scopes().filter_map(|s| match s {
            Scope::Project(p) => Some(p),
            _ => None,
        })
    }

    /// The scopes of a scoped policy (empty for full).
    pub fn scopes(&self) -> impl Iterator<Item = &Scope> {
        let set = match self {
            PeerPolicy::Full => None,
            PeerPolicy::Scoped(s) => Some(s),
        };
        set.into_iter().flatten()
    }
}

impl FromStr for PeerPolicy {
    type Err = ProtocolError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s == "full" {
            return Ok(PeerPolicy::Full);
        }
        if s == "none" {
            return Ok(PeerPolicy::none());
        }
        let scopes = s
            .split(',')
            .map(|p| p.trim().parse::<Scope>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ProtocolError::Malformed(format!("malformed policy {s:?}: {e}")))?;
        PeerPolicy::scoped(scopes)
    }
}

impl fmt::Display for PeerPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerPolicy::Full => f.write_str("full"),
            PeerPolicy::Scoped(s) if s.is_empty() => f.write_str("none"),
            PeerPolicy::Scoped(s) => {
                let parts: Vec<String> = s.iter().map(ToString::to_string).collect();
                f.write_str(&parts.join(","))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use amos_protocol::{ProjectId, TeamId};

    fn g(s: &[&str]) -> Grants {
        s.iter().map(|x| x.parse().unwrap()).collect()
    }

    #[test]
    fn parse_and_print() {
        assert_eq!("full".parse::<PeerPolicy>().unwrap(), PeerPolicy::Full);
        let p: PeerPolicy = "team:a, global".parse().unwrap();
        assert_eq!(p.to_string(), "global,team:a");
        for bad in [
            "",
            "private",
            "agent:x",
            "team:a,agent:b",
            "team:",
            "everything",
        ] {
            assert!(bad.parse::<PeerPolicy>().is_err(), "{bad}");
        }
    }

    #[test]
    fn none_admits_nothing_and_round_trips() {
        let none: PeerPolicy = "none".parse().unwrap();
        assert!(none.is_none() && !none.is_full());
        assert_eq!(none.to_string(), "none");
        assert_eq!(none.to_string().parse::<PeerPolicy>().unwrap(), none);
        assert!(!none.admits_grants(&g(&["global", "team:a"])));
        assert!(!none.admits_grants(&Grants::private()));
        assert!(none.effective(&g(&["global", "team:a"])).is_private());
        assert!(!none.admits_org(&OrgScope::Team(TeamId::parse("a").unwrap())));
        assert_eq!(none.scopes().count(), 0);
        assert!(!"global".parse::<PeerPolicy>().unwrap().is_none());
        assert!(!PeerPolicy::Full.is_none());
        for bad in ["none,global", "global,none"] {
            assert!(bad.parse::<PeerPolicy>().is_err(), "{bad}");
        }
    }

    #[test]
    fn effective_is_the_intersection() {
        let p: PeerPolicy = "team:a".parse().unwrap();
        assert_eq!(
            p.effective(&g(&["global", "team:a", "agent:x"])),
            g(&["team:a"])
        );
        assert!(p.effective(&g(&["global"])).is_private());
        assert!(p.admits_grants(&g(&["team:a", "global"])));
        assert!(!p.admits_grants(&g(&["team:b", "agent:x"])));
        assert!(!p.admits_grants(&Grants::private()));
        assert!(PeerPolicy::Full.admits_grants(&Grants::private()));
        assert_eq!(
            PeerPolicy::Full.effective(&g(&["agent:x"])),
            g(&["agent:x"])
        );
    }

    #[test]
    fn org_admission_names_the_scope_exactly() {
        let p: PeerPolicy = "project:ui".parse().unwrap();
        let apollo = OrgScope::Team(TeamId::parse("apollo").unwrap());
        assert!(
            !p.admits_org(&apollo),
            "a project policy never admits a team"
        );
        assert!(p.admits_org(&OrgScope::Project(ProjectId::parse("ui").unwrap())));
        assert!(!p.admits_org(&OrgScope::Project(ProjectId::parse("other").unwrap())));
        let t: PeerPolicy = "team:apollo".parse().unwrap();
        assert!(t.admits_org(&apollo));
        assert!(!t.admits_org(&OrgScope::Project(ProjectId::parse("ui").unwrap())));
        assert!(PeerPolicy::Full.admits_org(&apollo));
    }
}
