//! amos-acl: who may see what.
//!
//! Owns the visibility rule of docs/design.md §5 over an org-graph view
//! ([`OrgGraph`]), the per-query [`AuthorizedScopes`], and [`Visible`], the
//! only proof of visibility that ranking and output accept; and peer
//! policies ([`PeerPolicy`]): what may leave for a peer and what a peer's
//! facts may do here.
//!
//! Invariant: a [`Visible<M>`] exists only if `M` passed the gate for the
//! requester of the [`AuthorizedScopes`] that admitted it, at the given time.
//! Nothing outside [`AuthorizedScopes::admit`] builds one, and nothing turns
//! one `Visible` into a `Visible` of something else (no `map`, no
//! projection; the `compile_fail` examples on [`Visible`] prove it).
//! There is no implicit admin: [`AuthorizedScopes::local_admin`] is explicit
//! and the node never builds one for a peer.
//!
//! Boundary: pure. No storage, no ranking, no clocks (time comes in as `now_ms`).
#![warn(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::collections::BTreeSet;

pub use amos_protocol::{AgentId, Grants, OrgScope, ProjectId, Scope, TeamId};

/// What the gate needs to know of a team.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TeamState {
    /// Whether the team exists (its latest record is not a removal).
    pub present: bool,
}

/// What the gate needs to know of a project.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProjectState {
    /// The team that owns the project (fixed at creation).
    pub team: TeamId,
    /// Whether the project exists.
    pub present: bool,
}

/// A read-only view of the org graph (teams, projects, memberships) as the
/// local store holds it now.
pub trait OrgGraph {
    /// The team's state, if any record of it is held.
    fn team(&self, id: &TeamId) -> Option<TeamState>;
    /// The project's state, if any record of it is held.
    fn project(&self, id: &ProjectId) -> Option<ProjectState>;
    /// The scopes in which `agent` has a *present* membership (the scopes
    /// themselves may be absent; the gate checks).
    fn memberships_of(&self, agent: &AgentId) -> Vec<OrgScope>;
}

/// What the gate reads of a memory.
pub trait Gated {
    /// The agent that owns the memory.
    fn owner(&self) -> &AgentId;
    /// The grants in force on this node (for memories from a scoped peer,
    /// already intersected with that peer's policy).
    fn effective_grants(&self) -> &Grants;
    /// Whether the memory is forgotten (tombstoned): then nobody sees it.
    fn is_tombstoned(&self) -> bool;
    /// When the memory expires, in Unix milliseconds: past it nobody sees it.
    fn expires_ms(&self) -> Option<u64>;
    /// Whether the owner may see the memory by being its owner. False for a
    /// memory that arrived from a scoped peer: a peer cannot make a memory
    /// visible to one of our agents by naming it as the owner.
    fn owner_is_authoritative(&self) -> bool {
        true
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Who {
    Agent(AgentId),
    LocalAdmin,
}

/// The grants one requester satisfies right now, computed once per query from
/// the current org graph. A memory is visible iff its owner is the requester
/// or one of its grants is in this set (and it is live).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthorizedScopes {
    who: Who,
    scopes: BTreeSet<Scope>,
}

impl AuthorizedScopes {
    /// The scopes `agent` satisfies in `org`: `global`, `agent:<agent>`, every
    /// present team it is a present member of, and every present project it is
    /// a present member of whose team is present and has it as a present member.
    pub fn for_agent(agent: AgentId, org: &impl OrgGraph) -> Self {
        let mut scopes = BTreeSet::from([Scope::Global, Scope::Agent(agent.clone())]);
        let memberships: BTreeSet<OrgScope> = org.memberships_of(&agent).into_iter().collect();
        let team_ok = |t: &TeamId| {
            memberships.contains(&OrgScope::Team(t.clone()))
                && org.team(t).is_some_and(|s| s.present)
        };
        for m in &memberships {
            match m {
                OrgScope::Team(t) if team_ok(t) => {
                    scopes.insert(Scope::Team(t.clone()));
                }
                OrgScope::Project(p) => {
                    if let Some(ps) = org.project(p)
                        && ps.present
                        && team_ok(&ps.team)
                    {
                        scopes.insert(Scope::Project(p.clone()));
                    }
                }
                OrgScope::Team(_) => {}
            }
        }
        AuthorizedScopes {
            who: Who::Agent(agent),
            scopes,
        }
    }

    /// The explicit, local-only administrator: sees every live memory. Never
    /// built for a peer or by default.
    pub fn local_admin() -> Self {
        AuthorizedScopes {
            who: Who::LocalAdmin,
            scopes: BTreeSet::new(),
        }
    }

    /// The requesting agent, or `None` for the local admin.
    pub fn requester(&self) -> Option<&AgentId> {
        match &self.who {
            Who::Agent(a) => Some(a),
            Who::LocalAdmin => None,
        }
    }

    /// Whether these are the local admin's scopes (the operator at the CLI, not an agent).
    pub fn is_admin(&self) -> bool {
        self.who == Who::LocalAdmin
    }

    /// The grants this requester satisfies (empty for the admin, who needs none).
    pub fn scopes(&self) -> impl Iterator<Item = &Scope> {
        self.scopes.iter()
    }

    /// Whether `m` is visible to this requester at `now_ms`.
    pub fn may_see(&self, m: &impl Gated, now_ms: u64) -> bool {
        if m.is_tombstoned() || m.expires_ms().is_some_and(|e| e <= now_ms) {
            return false;
        }
        match &self.who {
            Who::LocalAdmin => true,
            Who::Agent(r) => {
                (m.owner_is_authoritative() && m.owner() == r)
                    || m.effective_grants().iter().any(|g| self.scopes.contains(g))
            }
        }
    }

    /// The gate: `Some(Visible)` iff [`Self::may_see`].
    pub fn admit<M: Gated>(&self, m: M, now_ms: u64) -> Option<Visible<M>> {
        self.may_see(&m, now_ms).then_some(Visible(m))
    }

    /// Whether this requester owns `m` (the admin owns nothing).
    pub fn owns(&self, m: &impl Gated) -> bool {
        self.requester() == Some(m.owner())
    }
}

/// Proof that the wrapped memory passed the gate. Built only by
/// [`AuthorizedScopes::admit`]: the field is private, and there is no other
/// constructor, no `Default`, no `Deserialize` and no way to change or
/// replace the value inside (only [`Deref`](std::ops::Deref) to read it and
/// [`Visible::into_inner`] to give the proof up).
///
/// There is deliberately no `map` or projection. Any `Visible<M> ->
/// Visible<N>` taking a caller's function launders: the function may ignore
/// its argument and return anything (a captured string, a `'static`), and
/// even `fn(&M) -> &N` may return a reference to a static. Code that needs
/// the admitted value together with something else (a score) keeps the
/// `Visible` next to it; code that renders reads through `&Visible<M>`.
///
/// Outside this crate a `Visible` cannot be built by its constructor, by a
/// struct literal or by transforming another one:
///
/// ```compile_fail,E0603
/// let v = amos_acl::Visible("forged");
/// ```
///
/// ```compile_fail,E0451
/// let v: amos_acl::Visible<&str> = amos_acl::Visible { 0: "forged" };
/// ```
///
/// ```compile_fail,E0599
/// # use amos_acl::{AuthorizedScopes, Grants, Gated, AgentId, Visible};
/// # struct M(AgentId, Grants);
/// # impl Gated for M {
/// #     fn owner(&self) -> &AgentId { &self.0 }
/// #     fn effective_grants(&self) -> &Grants { &self.1 }
/// #     fn is_tombstoned(&self) -> bool { false }
/// #     fn expires_ms(&self) -> Option<u64> { None }
/// # }
/// # let who = AuthorizedScopes::local_admin();
/// # let m = M(AgentId::parse("alice").unwrap(), Grants::default());
/// let v: Visible<M> = who.admit(m, 0).unwrap();
/// // No map: a visible memory cannot become a visible anything.
/// let forged: Visible<&str> = v.map(|_| "forged");
/// ```
///
/// ```compile_fail,E0594
/// # use amos_acl::{AuthorizedScopes, Grants, Gated, AgentId, Visible};
/// # struct M(AgentId, Grants);
/// # impl Gated for M {
/// #     fn owner(&self) -> &AgentId { &self.0 }
/// #     fn effective_grants(&self) -> &Grants { &self.1 }
/// #     fn is_tombstoned(&self) -> bool { false }
/// #     fn expires_ms(&self) -> Option<u64> { None }
/// # }
/// # let who = AuthorizedScopes::local_admin();
/// # let m = M(AgentId::parse("alice").unwrap(), Grants::default());
/// let mut v: Visible<M> = who.admit(m, 0).unwrap();
/// // The value inside is read-only: no `&mut` through the proof.
/// *v = M(AgentId::parse("mallory").unwrap(), Grants::default());
/// ```
///
/// ```compile_fail,E0277
/// # use amos_acl::Visible;
/// let v: Visible<String> = Default::default();
/// ```
///
/// The gate is the way in (this one compiles and runs):
///
/// ```
/// # use amos_acl::{AuthorizedScopes, Grants, Gated, AgentId, Visible};
/// # struct M(AgentId, Grants);
/// # impl Gated for M {
/// #     fn owner(&self) -> &AgentId { &self.0 }
/// #     fn effective_grants(&self) -> &Grants { &self.1 }
/// #     fn is_tombstoned(&self) -> bool { false }
/// #     fn expires_ms(&self) -> Option<u64> { None }
/// # }
/// let who = AuthorizedScopes::local_admin();
/// let m = M(AgentId::parse("alice").unwrap(), Grants::default());
/// let v: Visible<M> = who.admit(m, 0).expect("the admin sees a live memory");
/// assert_eq!(v.owner().as_str(), "alice");
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Visible<M>(M);

impl<M> Visible<M> {
    /// Give up the proof and keep the value.
    pub fn into_inner(self) -> M {
        self.0
    }
}

impl<M> std::ops::Deref for Visible<M> {
    type Target = M;
    fn deref(&self) -> &M {
        &self.0
    }
}

mod policy;
pub use policy::PeerPolicy;

#[cfg(test)]
mod tests;
