//! Tests of the gate (docs/design.md §5).
//!
//! The gate is checked against a deliberately naive reference model written
//! literally from §5 ([`reference_visible`]), which reads the in-memory org
//! graph directly and never goes through [`AuthorizedScopes`]: by proptest over
//! random org graphs, by exhaustive enumeration of a one-agent/one-team/
//! one-project world, and by named unit tests for the cases that matter.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;

// ---------------------------------------------------------------------------
// Fixtures: an in-memory org graph and a test memory.
// ---------------------------------------------------------------------------

fn agent(s: &str) -> AgentId {
    AgentId::parse(s).unwrap()
}

fn team(s: &str) -> TeamId {
    TeamId::parse(s).unwrap()
}

fn project(s: &str) -> ProjectId {
    ProjectId::parse(s).unwrap()
}

/// An org graph as the local store would hold it: every team, project and
/// membership ever seen, each with its `present` flag (`false` = removed).
/// Something missing from a map never existed.
#[derive(Clone, Debug, Default)]
struct Org {
    teams: BTreeMap<TeamId, bool>,
    projects: BTreeMap<ProjectId, (TeamId, bool)>,
    members: BTreeMap<(AgentId, OrgScope), bool>,
}

impl Org {
    fn with_team(mut self, t: &str, present: bool) -> Self {
        self.teams.insert(team(t), present);
        self
    }

    fn with_project(mut self, p: &str, t: &str, present: bool) -> Self {
        self.projects.insert(project(p), (team(t), present));
        self
    }

    fn with_team_member(mut self, a: &str, t: &str, present: bool) -> Self {
        self.members
            .insert((agent(a), OrgScope::Team(team(t))), present);
        self
    }

    fn with_project_member(mut self, a: &str, p: &str, present: bool) -> Self {
        self.members
            .insert((agent(a), OrgScope::Project(project(p))), present);
        self
    }
}

impl OrgGraph for Org {
    fn team(&self, id: &TeamId) -> Option<TeamState> {
        self.teams.get(id).map(|&present| TeamState { present })
    }

    fn project(&self, id: &ProjectId) -> Option<ProjectState> {
        self.projects.get(id).map(|(team, present)| ProjectState {
            team: team.clone(),
            present: *present,
        })
    }

    fn memberships_of(&self, a: &AgentId) -> Vec<OrgScope> {
        self.members
            .iter()
            .filter(|((who, _), present)| who == a && **present)
            .map(|((_, scope), _)| scope.clone())
            .collect()
    }
}

#[derive(Clone, Debug, PartialEq)]
struct Mem {
    owner: AgentId,
    grants: Grants,
    tombstoned: bool,
    expires_ms: Option<u64>,
}

impl Mem {
    fn new(owner: &str, grants: &[&str]) -> Self {
        Mem {
            owner: agent(owner),
            grants: grants.iter().map(|g| g.parse::<Scope>().unwrap()).collect(),
            tombstoned: false,
            expires_ms: None,
        }
    }

    fn tombstoned(mut self) -> Self {
        self.tombstoned = true;
        self
    }

    fn expiring_at(mut self, ms: u64) -> Self {
        self.expires_ms = Some(ms);
        self
    }
}

impl Gated for Mem {
    fn owner(&self) -> &AgentId {
        &self.owner
    }

    fn effective_grants(&self) -> &Grants {
        &self.grants
    }

    fn is_tombstoned(&self) -> bool {
        self.tombstoned
    }

    fn expires_ms(&self) -> Option<u64> {
        self.expires_ms
    }
}

// ---------------------------------------------------------------------------
// The reference model, literally docs/design.md §5. Reads `Org` directly.
// ---------------------------------------------------------------------------

fn reference_live(m: &Mem, now: u64) -> bool {
    let expired = match m.expires_ms {
        Some(e) => e <= now,
        None => false,
    };
    !m.tombstoned && !expired
}

fn reference_visible(org: &Org, m: &Mem, r: &AgentId, now: u64) -> bool {
    if !reference_live(m, now) {
        return false;
    }
    let team_present = |t: &TeamId| org.teams.get(t) == Some(&true);
    let present_member = |s: OrgScope| org.members.get(&(r.clone(), s)) == Some(&true);

    // r is owner(m)
    if m.owner == *r {
        return true;
    }
    for g in m.grants.iter() {
        let ok = match g {
            Scope::Private => false,
            // global ∈ visibility
            Scope::Global => true,
            // agent:r ∈ visibility
            Scope::Agent(a) => a == r,
            // team:t ∈ visibility, r a present member of t, t present
            Scope::Team(t) => present_member(OrgScope::Team(t.clone())) && team_present(t),
            // project:p ∈ visibility, r a present member of p, p present,
            // p's team present, r a present member of p's team
            Scope::Project(p) => match org.projects.get(p) {
                Some((pt, p_present)) => {
                    present_member(OrgScope::Project(p.clone()))
                        && *p_present
                        && team_present(pt)
                        && present_member(OrgScope::Team(pt.clone()))
                }
                None => false,
            },
        };
        if ok {
            return true;
        }
    }
    false
}

/// The scopes §5 says `r` satisfies (for checking `scopes()`), again read
/// directly from the org.
fn reference_scopes(org: &Org, r: &AgentId) -> BTreeSet<Scope> {
    let mut out = BTreeSet::from([Scope::Global, Scope::Agent(r.clone())]);
    let present_member = |s: OrgScope| org.members.get(&(r.clone(), s)) == Some(&true);
    for (t, &present) in &org.teams {
        if present && present_member(OrgScope::Team(t.clone())) {
            out.insert(Scope::Team(t.clone()));
        }
    }
    for (p, (pt, p_present)) in &org.projects {
        if *p_present
            && present_member(OrgScope::Project(p.clone()))
            && org.teams.get(pt) == Some(&true)
            && present_member(OrgScope::Team(pt.clone()))
        {
            out.insert(Scope::Project(p.clone()));
        }
    }
    out
}

/// Checks one (org, memory, requester, now) against the reference and the
/// gate's own consistency rules; returns the verdict.
fn check_against_reference(org: &Org, m: &Mem, r: &AgentId, now: u64) -> bool {
    let auth = AuthorizedScopes::for_agent(r.clone(), org);
    let expected = reference_visible(org, m, r, now);
    let got = auth.may_see(m, now);
    assert_eq!(
        got, expected,
        "may_see disagrees with §5 for requester {r:?} at {now}\nmemory: {m:?}\norg: {org:?}"
    );
    let admitted = auth.admit(m.clone(), now);
    assert_eq!(
        admitted.is_some(),
        got,
        "admit must return Some iff may_see"
    );
    if let Some(v) = admitted {
        assert_eq!(v.into_inner(), *m, "admit must hand back the same memory");
    }
    assert_eq!(auth.owns(m), m.owner == *r);
    assert_eq!(auth.requester(), Some(r));
    assert!(!auth.is_admin());
    got
}

// ---------------------------------------------------------------------------
// Property test over random org graphs.
// ---------------------------------------------------------------------------

const AGENTS: [&str; 4] = ["a0", "a1", "a2", "a3"];
const TEAMS: [&str; 3] = ["t0", "t1", "t2"];
const PROJECTS: [&str; 3] = ["p0", "p1", "p2"];

/// Every scope that can be named from the pools (including `private`).
fn scope_pool() -> Vec<Scope> {
    let mut v = vec![Scope::Private, Scope::Global];
    v.extend(AGENTS.iter().map(|a| Scope::Agent(agent(a))));
    v.extend(TEAMS.iter().map(|t| Scope::Team(team(t))));
    v.extend(PROJECTS.iter().map(|p| Scope::Project(project(p))));
    v
}

fn org_scope_pool() -> Vec<OrgScope> {
    let mut v: Vec<OrgScope> = TEAMS.iter().map(|t| OrgScope::Team(team(t))).collect();
    v.extend(PROJECTS.iter().map(|p| OrgScope::Project(project(p))));
    v
}

/// `None` = never existed, `Some(present)`.
fn existence() -> impl Strategy<Value = Option<bool>> {
    prop_oneof![
        Just(None),
        Just(Some(false)),
        Just(Some(true)),
        Just(Some(true))
    ]
}

fn arb_org() -> impl Strategy<Value = Org> {
    let teams = prop::collection::vec(existence(), TEAMS.len());
    let projects = prop::collection::vec((existence(), 0..TEAMS.len()), PROJECTS.len());
    let members = prop::collection::vec(existence(), AGENTS.len() * (TEAMS.len() + PROJECTS.len()));
    (teams, projects, members).prop_map(|(teams, projects, members)| {
        let mut org = Org::default();
        for (t, e) in TEAMS.iter().zip(teams) {
            if let Some(present) = e {
                org.teams.insert(team(t), present);
            }
        }
        // A project may name a team that is absent or never existed.
        for (p, (e, ti)) in PROJECTS.iter().zip(projects) {
            if let Some(present) = e {
                org.projects.insert(project(p), (team(TEAMS[ti]), present));
            }
        }
        // Memberships may name scopes that do not exist, and project
        // memberships need not come with a team membership.
        let scopes = org_scope_pool();
        let pairs = AGENTS
            .iter()
            .flat_map(|a| scopes.iter().map(move |s| (*a, s)));
        for ((a, s), e) in pairs.zip(members) {
            if let Some(present) = e {
                org.members.insert((agent(a), s.clone()), present);
            }
        }
        org
    })
}

fn arb_mem() -> impl Strategy<Value = Mem> {
    let pool = scope_pool();
    (
        0..AGENTS.len(),
        prop::collection::vec(prop::sample::select(pool), 0..4),
        prop::bool::weighted(0.15),
        prop::option::weighted(0.3, 0..20u64),
    )
        .prop_map(|(owner, grants, tombstoned, expires_ms)| Mem {
            owner: agent(AGENTS[owner]),
            grants: Grants::from_scopes(grants),
            tombstoned,
            expires_ms,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn gate_matches_reference_on_random_orgs(
        org in arb_org(),
        mems in prop::collection::vec(arb_mem(), 1..8),
        now in 0..20u64,
    ) {
        let admin = AuthorizedScopes::local_admin();
        for r in AGENTS.iter().map(|a| agent(a)) {
            let auth = AuthorizedScopes::for_agent(r.clone(), &org);
            let scopes: BTreeSet<Scope> = auth.scopes().cloned().collect();
            prop_assert_eq!(&scopes, &reference_scopes(&org, &r));
            prop_assert!(!scopes.contains(&Scope::Private));
            for m in &mems {
                check_against_reference(&org, m, &r, now);
            }
        }
        for m in &mems {
            prop_assert_eq!(admin.may_see(m, now), reference_live(m, now));
            prop_assert_eq!(admin.admit(m.clone(), now).is_some(), reference_live(m, now));
            prop_assert!(!admin.owns(m));
        }
    }
}

// ---------------------------------------------------------------------------
// Exhaustive small world: agent r (and another agent o), team t, project p of t.
// ---------------------------------------------------------------------------

#[test]
fn gate_matches_reference_exhaustively_in_small_world() {
    // None = never existed, Some(false) = removed, Some(true) = present.
    const STATES: [Option<bool>; 3] = [None, Some(false), Some(true)];
    const NOW: u64 = 100;
    let grants: [&[&str]; 6] = [
        &[],
        &["global"],
        &["agent:r"],
        &["agent:o"],
        &["team:t"],
        &["project:p"],
    ];
    // (tombstoned, expires_ms)
    let lives: [(bool, Option<u64>); 5] = [
        (false, None),
        (false, Some(NOW + 1)),
        (false, Some(NOW)),
        (false, Some(NOW - 1)),
        (true, None),
    ];
    let r = agent("r");
    let mut checked = 0usize;
    // Visible count per grant, for live memories owned by `o`.
    let mut visible_by_grant = BTreeMap::<String, usize>::new();
    for team_state in STATES {
        for project_state in STATES {
            for team_mem in STATES {
                for project_mem in STATES {
                    let mut org = Org::default();
                    if let Some(present) = team_state {
                        org = org.with_team("t", present);
                    }
                    if let Some(present) = project_state {
                        org = org.with_project("p", "t", present);
                    }
                    if let Some(present) = team_mem {
                        org = org.with_team_member("r", "t", present);
                    }
                    if let Some(present) = project_mem {
                        org = org.with_project_member("r", "p", present);
                    }
                    // The other agent is always a full member: it must not
                    // lend r anything.
                    org = org
                        .with_team_member("o", "t", true)
                        .with_project_member("o", "p", true);
                    for g in grants {
                        for owner in ["r", "o"] {
                            for (tombstoned, expires_ms) in lives {
                                let m = Mem {
                                    tombstoned,
                                    expires_ms,
                                    ..Mem::new(owner, g)
                                };
                                let seen = check_against_reference(&org, &m, &r, NOW);
                                checked += 1;
                                let live = !tombstoned && expires_ms.is_none_or(|e| e > NOW);
                                if owner == "o" && live {
                                    *visible_by_grant.entry(g.join(",")).or_default() +=
                                        usize::from(seen);
                                } else if owner == "r" {
                                    assert_eq!(
                                        seen, live,
                                        "the owner sees exactly its live memories"
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    assert_eq!(checked, 81 * 6 * 2 * 5);
    // 81 org worlds × 2 live lifetimes per grant. The reference is not vacuous:
    let expect = |g: &str| visible_by_grant.get(g).copied().unwrap_or(0);
    assert_eq!(expect(""), 0, "private memory of another agent");
    assert_eq!(expect("global"), 81 * 2);
    assert_eq!(expect("agent:r"), 81 * 2);
    assert_eq!(expect("agent:o"), 0);
    // team present and r's team membership present; project side free (9).
    assert_eq!(expect("team:t"), 9 * 2);
    // all four present: exactly one world.
    assert_eq!(expect("project:p"), 2);
}

// ---------------------------------------------------------------------------
// Named cases.
// ---------------------------------------------------------------------------

const NOW: u64 = 1_000;

fn sees(org: &Org, who: &str, m: &Mem) -> bool {
    let r = agent(who);
    let got = AuthorizedScopes::for_agent(r.clone(), org).may_see(m, NOW);
    assert_eq!(got, reference_visible(org, m, &r, NOW));
    got
}

/// Team `t` (present) with project `p` (present); `r` a present member of both.
fn full_member_org() -> Org {
    Org::default()
        .with_team("t", true)
        .with_project("p", "t", true)
        .with_team_member("r", "t", true)
        .with_project_member("r", "p", true)
}

#[test]
fn full_member_sees_team_and_project_memories() {
    let org = full_member_org();
    assert!(sees(&org, "r", &Mem::new("o", &["team:t"])));
    assert!(sees(&org, "r", &Mem::new("o", &["project:p"])));
    // An outsider sees neither.
    assert!(!sees(&org, "x", &Mem::new("o", &["team:t"])));
    assert!(!sees(&org, "x", &Mem::new("o", &["project:p"])));
}

#[test]
fn project_access_needs_team_membership() {
    // Member of the project only: no project access.
    let org = Org::default()
        .with_team("t", true)
        .with_project("p", "t", true)
        .with_project_member("r", "p", true);
    assert!(!sees(&org, "r", &Mem::new("o", &["project:p"])));
    let auth = AuthorizedScopes::for_agent(agent("r"), &org);
    assert!(!auth.scopes().any(|s| *s == Scope::Project(project("p"))));

    // Membership of some *other* team does not count: it must be p's team.
    let org = org.with_team("u", true).with_team_member("r", "u", true);
    assert!(!sees(&org, "r", &Mem::new("o", &["project:p"])));
    assert!(sees(&org, "r", &Mem::new("o", &["team:u"])));

    // Adding the membership of p's team grants it.
    let org = org.with_team_member("r", "t", true);
    assert!(sees(&org, "r", &Mem::new("o", &["project:p"])));
}

#[test]
fn project_access_needs_project_membership() {
    let org = full_member_org().with_project_member("r", "p", false);
    assert!(!sees(&org, "r", &Mem::new("o", &["project:p"])));
    assert!(sees(&org, "r", &Mem::new("o", &["team:t"])));
    let mut org = org;
    org.members
        .remove(&(agent("r"), OrgScope::Project(project("p"))));
    assert!(!sees(&org, "r", &Mem::new("o", &["project:p"])));
}

#[test]
fn removed_team_membership_revokes_team_and_project_access() {
    let team_mem = Mem::new("o", &["team:t"]);
    let project_mem = Mem::new("o", &["project:p"]);
    assert!(sees(&full_member_org(), "r", &team_mem));
    assert!(sees(&full_member_org(), "r", &project_mem));

    let org = full_member_org().with_team_member("r", "t", false);
    assert!(!sees(&org, "r", &team_mem));
    assert!(!sees(&org, "r", &project_mem));
    // Global still works, and so do r's own memories.
    assert!(sees(&org, "r", &Mem::new("o", &["global"])));
    assert!(sees(&org, "r", &Mem::new("r", &["team:t"])));
}

#[test]
fn deleted_team_revokes_access_to_its_projects() {
    let org = full_member_org().with_team("t", false);
    assert!(!sees(&org, "r", &Mem::new("o", &["team:t"])));
    assert!(!sees(&org, "r", &Mem::new("o", &["project:p"])));
    // A team that never existed grants nothing either.
    let mut org = full_member_org();
    org.teams.clear();
    assert!(!sees(&org, "r", &Mem::new("o", &["team:t"])));
    assert!(!sees(&org, "r", &Mem::new("o", &["project:p"])));
}

#[test]
fn deleted_project_revokes_project_access_only() {
    let org = full_member_org().with_project("p", "t", false);
    assert!(!sees(&org, "r", &Mem::new("o", &["project:p"])));
    assert!(sees(&org, "r", &Mem::new("o", &["team:t"])));
    let mut org = full_member_org();
    org.projects.clear();
    assert!(!sees(&org, "r", &Mem::new("o", &["project:p"])));
}

#[test]
fn membership_in_a_missing_scope_grants_nothing() {
    let org = Org::default()
        .with_team_member("r", "t", true)
        .with_project_member("r", "p", true);
    assert!(!sees(&org, "r", &Mem::new("o", &["team:t"])));
    assert!(!sees(&org, "r", &Mem::new("o", &["project:p"])));
    let scopes: Vec<Scope> = AuthorizedScopes::for_agent(agent("r"), &org)
        .scopes()
        .cloned()
        .collect();
    assert_eq!(scopes, vec![Scope::Global, Scope::Agent(agent("r"))]);
}

#[test]
fn private_and_agent_grants() {
    let org = full_member_org();
    let private = Mem::new("o", &[]);
    assert!(private.grants.is_private());
    assert!(!sees(&org, "r", &private));
    assert!(sees(&org, "o", &private));
    assert!(sees(&org, "r", &Mem::new("o", &["agent:r"])));
    assert!(!sees(&org, "r", &Mem::new("o", &["agent:x"])));
    assert!(sees(&org, "r", &Mem::new("o", &["agent:x", "team:t"])));
    assert!(sees(&org, "nobody", &Mem::new("o", &["global"])));
}

#[test]
fn expired_memory_is_invisible_even_to_owner_and_admin() {
    let org = full_member_org();
    let admin = AuthorizedScopes::local_admin();
    let owner = AuthorizedScopes::for_agent(agent("o"), &org);
    for grants in [&[][..], &["global"], &["agent:o"], &["team:t"]] {
        // expires_ms <= now means expired; the boundary itself is expired.
        for at in [NOW - 1, NOW] {
            let m = Mem::new("o", grants).expiring_at(at);
            assert!(!owner.may_see(&m, NOW), "owner, {grants:?}, expires {at}");
            assert!(!admin.may_see(&m, NOW), "admin, {grants:?}, expires {at}");
            assert!(owner.admit(m.clone(), NOW).is_none());
            assert!(admin.admit(m.clone(), NOW).is_none());
            assert!(!sees(&org, "r", &m));
        }
        let m = Mem::new("o", grants).expiring_at(NOW + 1);
        assert!(owner.may_see(&m, NOW));
        assert!(admin.may_see(&m, NOW));
    }
}

#[test]
fn tombstoned_memory_is_invisible_even_to_owner_and_admin() {
    let org = full_member_org();
    let admin = AuthorizedScopes::local_admin();
    let owner = AuthorizedScopes::for_agent(agent("o"), &org);
    for grants in [&[][..], &["global"], &["agent:o"], &["team:t"]] {
        let m = Mem::new("o", grants).tombstoned();
        assert!(!owner.may_see(&m, NOW));
        assert!(!admin.may_see(&m, NOW));
        assert!(owner.admit(m.clone(), NOW).is_none());
        assert!(admin.admit(m.clone(), NOW).is_none());
        assert!(!sees(&org, "r", &m));
        // Still the owner's, even though hidden.
        assert!(owner.owns(&m));
    }
}

#[test]
fn local_admin_sees_every_live_memory_but_is_no_requester() {
    let admin = AuthorizedScopes::local_admin();
    assert!(admin.is_admin());
    assert_eq!(admin.requester(), None);
    assert_eq!(admin.scopes().count(), 0);
    for (owner, grants) in [
        ("o", &[][..]),
        ("r", &["agent:x"][..]),
        ("o", &["team:nowhere"][..]),
        ("o", &["project:nowhere"][..]),
        ("o", &["global"][..]),
    ] {
        let m = Mem::new(owner, grants);
        assert!(admin.may_see(&m, NOW));
        assert!(!admin.owns(&m));
        let v = admin.admit(m.clone(), NOW).unwrap();
        assert_eq!(*v, m);
    }
    // for_agent never yields an admin, whatever the agent is called.
    let not_admin = AuthorizedScopes::for_agent(agent("admin"), &Org::default());
    assert!(!not_admin.is_admin());
    assert!(!not_admin.may_see(&Mem::new("o", &[]), NOW));
}

#[test]
fn owns_is_true_only_for_the_owner() {
    let org = full_member_org();
    let m = Mem::new("o", &["global", "team:t", "agent:r"]);
    assert!(AuthorizedScopes::for_agent(agent("o"), &org).owns(&m));
    // Seeing is not owning.
    let r = AuthorizedScopes::for_agent(agent("r"), &org);
    assert!(r.may_see(&m, NOW));
    assert!(!r.owns(&m));
    assert!(!AuthorizedScopes::local_admin().owns(&m));
}

#[test]
fn agent_scopes_contain_global_and_self_never_private() {
    for org in [Org::default(), full_member_org()] {
        let auth = AuthorizedScopes::for_agent(agent("r"), &org);
        let scopes: BTreeSet<Scope> = auth.scopes().cloned().collect();
        assert!(scopes.contains(&Scope::Global));
        assert!(scopes.contains(&Scope::Agent(agent("r"))));
        assert!(!scopes.contains(&Scope::Private));
        assert!(!scopes.contains(&Scope::Agent(agent("o"))));
        assert_eq!(auth.requester(), Some(&agent("r")));
    }
    let scopes: BTreeSet<Scope> = AuthorizedScopes::for_agent(agent("r"), &full_member_org())
        .scopes()
        .cloned()
        .collect();
    assert_eq!(
        scopes,
        BTreeSet::from([
            Scope::Global,
            Scope::Agent(agent("r")),
            Scope::Team(team("t")),
            Scope::Project(project("p")),
        ])
    );
}

#[test]
fn visible_reads_the_admitted_value() {
    let m = Mem::new("o", &["global"]);
    let v = AuthorizedScopes::for_agent(agent("r"), &Org::default())
        .admit(m.clone(), NOW)
        .unwrap();
    assert_eq!(v.owner, m.owner);
    assert_eq!(*v, m);
    assert_eq!(v.into_inner(), m);
}

/// A memory that arrived from a scoped peer: the owner rule does not hold,
/// so a peer cannot make a memory visible to one of our agents by naming it
/// as the owner. Its grants still work.
struct ForeignMem {
    inner: Mem,
}

impl Gated for ForeignMem {
    fn owner(&self) -> &AgentId {
        &self.inner.owner
    }
    fn effective_grants(&self) -> &Grants {
        &self.inner.grants
    }
    fn is_tombstoned(&self) -> bool {
        self.inner.tombstoned
    }
    fn expires_ms(&self) -> Option<u64> {
        self.inner.expires_ms
    }
    fn owner_is_authoritative(&self) -> bool {
        false
    }
}

#[test]
fn owner_rule_only_holds_where_the_owner_is_authoritative() {
    struct NoOrg;
    impl OrgGraph for NoOrg {
        fn team(&self, _: &TeamId) -> Option<TeamState> {
            None
        }
        fn project(&self, _: &ProjectId) -> Option<ProjectState> {
            None
        }
        fn memberships_of(&self, _: &AgentId) -> Vec<OrgScope> {
            Vec::new()
        }
    }
    let carol = AuthorizedScopes::for_agent(agent("carol"), &NoOrg);
    let private = Mem::new("carol", &[]);
    assert!(
        carol.may_see(&private, 0),
        "local private memory: owner sees it"
    );
    let foreign = ForeignMem {
        inner: Mem::new("carol", &[]),
    };
    assert!(
        !carol.may_see(&foreign, 0),
        "a foreign memory naming carol as owner stays hidden"
    );
    let foreign_global = ForeignMem {
        inner: Mem::new("carol", &["global"]),
    };
    assert!(carol.may_see(&foreign_global, 0), "grants still apply");
}
