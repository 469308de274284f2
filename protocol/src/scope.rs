//! Scopes and grants: who a memory is shared with, in the textual form
//! `private`, `global`, `agent:ID`, `team:ID`, `project:ID`.
//!
//! This is wire vocabulary (grants travel inside signed acl facts), so it
//! lives here; what a grant *means* is `amos-acl`'s business.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use bincode::{Decode, Encode};

use crate::{AgentId, ProjectId, ProtocolError, TeamId};

/// One visibility scope.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Encode, Decode)]
pub enum Scope {
    /// Only the owner. Carries no grant: an empty [`Grants`] means private.
    Private,
    /// Every agent on the mesh.
    Global,
    /// One agent (besides the owner).
    Agent(AgentId),
    /// The members of a team.
    Team(TeamId),
    /// The members of a project (and of its team).
    Project(ProjectId),
}

impl FromStr for Scope {
    type Err = ProtocolError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        match s {
            "private" => return Ok(Scope::Private),
            "global" => return Ok(Scope::Global),
            _ => {}
        }
        let bad = || {
            ProtocolError::malformed(format!(
                "malformed scope {s:?}: use private, global, agent:ID, team:ID or project:ID"
            ))
        };
        let (kind, id) = s.split_once(':').ok_or_else(bad)?;
        match kind {
            "agent" => AgentId::parse(id).map(Scope::Agent),
            "team" => TeamId::parse(id).map(Scope::Team),
            "project" => ProjectId::parse(id).map(Scope::Project),
            _ => Err(bad()),
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Private => f.write_str("private"),
            Scope::Global => f.write_str("global"),
            Scope::Agent(a) => write!(f, "agent:{a}"),
            Scope::Team(t) => write!(f, "team:{t}"),
            Scope::Project(p) => write!(f, "project:{p}"),
        }
    }
}

impl Scope {
    /// Whether every id inside is a valid slug (for decoded values).
    pub fn is_valid(&self) -> bool {
        match self {
            Scope::Private | Scope::Global => true,
            Scope::Agent(a) => a.is_valid(),
            Scope::Team(t) => t.is_valid(),
            Scope::Project(p) => p.is_valid(),
        }
    }

    /// Whether this is a team or project scope with a qualified id
    /// (`team:NAME@QUALIFIER`), which a receiver decodes only with
    /// `wire::Features::QUALIFIED_SCOPES`.
    pub fn is_qualified(&self) -> bool {
        match self {
            Scope::Team(t) => t.is_qualified(),
            Scope::Project(p) => p.is_qualified(),
            Scope::Private | Scope::Global | Scope::Agent(_) => false,
        }
    }
}

/// A memory's visibility: a canonical (sorted, de-duplicated) set of scopes
/// that never contains [`Scope::Private`]. Empty means private.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default, Encode, Decode)]
pub struct Grants(BTreeSet<Scope>);

impl Grants {
    /// At most this many grants on one memory.
    pub const MAX: usize = 64;

    /// No grants: only the owner sees the memory.
    pub fn private() -> Self {
        Grants(BTreeSet::new())
    }

    /// Grants of these scopes.
    pub fn from_scopes(scopes: impl IntoIterator<Item = Scope>) -> Self {
        Grants(
            scopes
                .into_iter()
                .filter(|s| *s != Scope::Private)
                .collect(),
        )
    }

    /// Whether no scope is granted.
    pub fn is_private(&self) -> bool {
        self.0.is_empty()
    }

    /// The scopes, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Scope> {
        self.0.iter()
    }

    /// How many scopes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none (the same as [`Grants::is_private`]).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `s` is granted.
    pub fn contains(&self, s: &Scope) -> bool {
        self.0.contains(s)
    }

    /// Add a scope; `private` makes the set empty again ("share with private"
    /// is how a user makes a memory private).
    pub fn insert(&mut self, s: Scope) {
        if s == Scope::Private {
            self.0.clear();
        } else {
            self.0.insert(s);
        }
    }

    /// Take `s` away; whether it was granted.
    pub fn remove(&mut self, s: &Scope) -> bool {
        self.0.remove(s)
    }

    /// The grants both sets hold.
    pub fn intersection(&self, other: &Grants) -> Grants {
        Grants(self.0.intersection(&other.0).cloned().collect())
    }

    /// The textual scopes, `["private"]` for an empty set.
    pub fn to_strings(&self) -> Vec<String> {
        if self.0.is_empty() {
            vec!["private".to_owned()]
        } else {
            self.0.iter().map(ToString::to_string).collect()
        }
    }

    /// Whether a decoded value obeys the invariants (no `Private`, valid ids, bounded).
    pub fn is_valid(&self) -> bool {
        self.0.len() <= Self::MAX && self.0.iter().all(|s| *s != Scope::Private && s.is_valid())
    }
}

impl FromIterator<Scope> for Grants {
    fn from_iter<I: IntoIterator<Item = Scope>>(iter: I) -> Self {
        Grants::from_scopes(iter)
    }
}

impl fmt::Display for Grants {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_strings().join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_text_round_trip() {
        for s in [
            "private",
            "global",
            "agent:a1",
            "team:apollo",
            "project:apollo-ui",
            "team:apollo@abcdefgh2345",
            "project:ui@abcdefgh2345",
        ] {
            assert_eq!(s.parse::<Scope>().unwrap().to_string(), s);
        }
        for bad in [
            "",
            "public",
            "team:",
            "team:Apollo",
            "role:x",
            "agent",
            ":x",
            "team:a:b",
            "team:apollo@abc",
        ] {
            let err = bad.parse::<Scope>().unwrap_err().to_string();
            assert!(err.contains("scope") || err.contains("id"), "{bad}: {err}");
        }
    }

    #[test]
    fn grants_are_canonical() {
        let g: Grants = ["team:b", "global", "team:a", "global", "private"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(g.to_strings(), vec!["global", "team:a", "team:b"]);
        assert_eq!(Grants::private().to_strings(), vec!["private"]);
        let mut g2 = g.clone();
        g2.insert(Scope::Private);
        assert!(g2.is_private());
    }
}
