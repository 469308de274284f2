//! The org graph on the node (`impl Node`): agents, teams, projects and
//! their memberships, and the org origin rule a local write must keep
//! ([`check_org_authority`]): only a scope's origin (or its `full` peer)
//! speaks for its record and roster.

use crate::error::{Rule, UnknownKind};
use amos_protocol::{
    AgentFact, AgentId, FactBody, MembershipFact, NodeId, OrgScope, ProjectFact, ProjectId,
    TeamFact, TeamId,
};

use crate::error::{NodeError, Result};
use crate::store::org::{self, AgentInfo, ProjectInfo, TeamInfo};
use crate::store::replica::org_origin;
use crate::store::{Readable, Tx};

use crate::api::node::Node;
use crate::api::scopes::{Unheld, resolve_project, resolve_team};

impl Node {
    /// Register (or update) an agent, optionally joining teams.
    pub fn agent_add(&mut self, id: &str, kind: &str, teams: &[String]) -> Result<()> {
        let id = AgentId::parse(id)?;
        let teams = teams
            .iter()
            .map(|t| self.store.read(|r| resolve_team(r, t, Unheld::AsTyped)))
            .collect::<Result<Vec<_>>>()?;
        let kind = kind.to_owned();
        let me = self.node_id();
        self.commit(|tx| {
            for t in &teams {
                if !org::team_present(tx, t) {
                    return Err(NodeError::unknown(UnknownKind::Team, t));
                }
                check_org_authority(tx, me, &OrgScope::Team(t.clone())).map_err(|e| match e {
                    NodeError::Refused { .. } => roster_elsewhere(tx, t, &id),
                    e => e,
                })?;
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

    /// Every agent registered here, with its memberships.
    pub fn agent_list(&self) -> Result<Vec<AgentInfo>> {
        self.store.read(|r| org::list_agents(r))
    }

    /// Create team `id` (named `name`, else its id) as its origin: its id is
    /// qualified by this node (`id@QUALIFIER`, docs/design.md §3), so a team
    /// of the same name made elsewhere is another team. Returns the id.
    pub fn team_create(&mut self, id: &str, name: Option<&str>) -> Result<TeamId> {
        let me = self.node_id();
        let id = own_id(id, me, UnknownKind::Team, TeamId::parse, TeamId::qualified)?;
        let name = name.unwrap_or(id.name()).to_owned();
        let out = id.clone();
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
        Ok(out)
    }

    /// Delete team `id`; only its origin may.
    pub fn team_delete(&mut self, id: &str) -> Result<()> {
        let id = self.store.read(|r| resolve_team(r, id, Unheld::AsTyped))?;
        let me = self.node_id();
        self.commit(|tx| {
            let name = org::list_teams(tx)?
                .into_iter()
                .find(|t| t.qualified_id == id.as_str())
                .map(|t| t.name)
                .ok_or_else(|| NodeError::unknown(UnknownKind::Team, &id))?;
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

    /// Every team present, with its members.
    pub fn team_list(&self) -> Result<Vec<TeamInfo>> {
        self.store.read(|r| org::list_teams(r))
    }

    /// Add or remove a team member.
    pub fn team_member(&mut self, team: &str, agent: &str, present: bool) -> Result<()> {
        let team = self
            .store
            .read(|r| resolve_team(r, team, Unheld::AsTyped))?;
        let agent = AgentId::parse(agent)?;
        let me = self.node_id();
        self.commit(|tx| {
            check_org_authority(tx, me, &OrgScope::Team(team.clone()))?;
            let fact = team_member_fact(tx, &team, &agent, present, AgentAt::Here)?;
            Ok((vec![fact], ()))
        })?;
        Ok(())
    }

    /// Create project `id` in `team` (named `name`, else its id) as its
    /// origin, its id qualified by this node as a team's is. Returns the id.
    pub fn project_create(
        &mut self,
        id: &str,
        team: &str,
        name: Option<&str>,
    ) -> Result<ProjectId> {
        let me = self.node_id();
        let id = own_id(
            id,
            me,
            UnknownKind::Project,
            ProjectId::parse,
            ProjectId::qualified,
        )?;
        let team = self
            .store
            .read(|r| resolve_team(r, team, Unheld::AsTyped))?;
        let name = name.unwrap_or(id.name()).to_owned();
        let out = id.clone();
        self.commit(|tx| {
            if !org::team_present(tx, &team) {
                return Err(NodeError::unknown(UnknownKind::Team, &team));
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
        Ok(out)
    }

    /// Delete project `id`; only its origin may.
    pub fn project_delete(&mut self, id: &str) -> Result<()> {
        let id = self
            .store
            .read(|r| resolve_project(r, id, Unheld::AsTyped))?;
        let me = self.node_id();
        self.commit(|tx| {
            let p = org::list_projects(tx)?
                .into_iter()
                .find(|p| p.qualified_id == id.as_str())
                .ok_or_else(|| NodeError::unknown(UnknownKind::Project, &id))?;
            let team = org::project_state(tx, &id)
                .map(|s| s.team)
                .ok_or_else(|| NodeError::unknown(UnknownKind::Project, &id))?;
            let origin = check_org_authority(tx, me, &OrgScope::Project(id.clone()))?;
            Ok((
                vec![FactBody::Project(ProjectFact {
                    id,
                    team,
                    origin,
                    name: p.name,
                    present: false,
                })],
                (),
            ))
        })?;
        Ok(())
    }

    /// Every project present, with its team and members.
    pub fn project_list(&self) -> Result<Vec<ProjectInfo>> {
        self.store.read(|r| org::list_projects(r))
    }

    /// Add or remove a project member; adding needs membership of the project's team.
    pub fn project_member(&mut self, project: &str, agent: &str, present: bool) -> Result<()> {
        let project = self
            .store
            .read(|r| resolve_project(r, project, Unheld::AsTyped))?;
        let agent = AgentId::parse(agent)?;
        let me = self.node_id();
        self.commit(|tx| {
            check_org_authority(tx, me, &OrgScope::Project(project.clone()))?;
            let (fact, _) = project_member_fact(tx, &project, &agent, present, AgentAt::Here)?;
            Ok((vec![fact], ()))
        })?;
        Ok(())
    }
}

/// Set to `1`, teams and projects are created with legacy ids (a bare
/// slug) as the release before qualified ids did (docs/design.md §3): the
/// tests' stand-in for a home made before them (a legacy clash, its
/// migration). Never needed otherwise.
pub const LEGACY_IDS_ENV: &str = "AMOS_LEGACY_IDS";

/// The id a team or project created here gets: `text` qualified by this
/// node (`NAME` → `NAME@QUALIFIER`; a legacy id under [`LEGACY_IDS_ENV`]). A qualified id may be typed only if
/// it is this node's own: a node cannot create another's scope.
fn own_id<T: std::fmt::Display>(
    text: &str,
    me: NodeId,
    kind: UnknownKind,
    parse: impl Fn(&str) -> std::result::Result<T, amos_protocol::ProtocolError>,
    qualified: impl Fn(&str, &NodeId) -> std::result::Result<T, amos_protocol::ProtocolError>,
) -> Result<T> {
    let text = text.trim();
    match text.split_once('@') {
        None if std::env::var_os(LEGACY_IDS_ENV).is_some_and(|v| v == "1") => Ok(parse(text)?),
        None => Ok(qualified(text, &me)?),
        Some((name, _)) => {
            let typed = parse(text)?;
            let mine = qualified(name, &me)?;
            if typed.to_string() == mine.to_string() {
                Ok(mine)
            } else {
                Err(NodeError::BadInput(format!(
                    "{kind} {text} is not this node's to create: a {kind} created here is \
                     qualified by this node ({mine}); create it as {name}"
                )))
            }
        }
    }
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
    let Some(origin) = org_origin(conn, scope)? else {
        return Ok(me);
    };
    if origin == me
        || crate::store::replica::peer_policy(conn, &origin)?.is_some_and(|p| p.is_full())
    {
        return Ok(origin);
    }
    let scope = org::scope_label(conn, &scope_of(scope));
    Err(NodeError::refused(
        Rule::OrgOrigin,
        format!(
            "{scope} belongs to node {o}, which created it: only that node (or a node that has it \
         as a full peer) may change its record or members (the org origin rule); run this on \
         node {o} and sync",
            o = origin.short()
        ),
    ))
}

/// The visibility scope an org scope is.
pub(crate) fn scope_of(scope: &OrgScope) -> amos_protocol::Scope {
    match scope {
        OrgScope::Team(t) => amos_protocol::Scope::Team(t.clone()),
        OrgScope::Project(p) => amos_protocol::Scope::Project(p.clone()),
    }
}

/// `amos agent add AGENT --team TEAM` on a node that is not TEAM's origin:
/// refused (the org origin rule), saying where to add the member and how
/// to act as the agent here.
fn roster_elsewhere(conn: &(impl Readable + ?Sized), team: &TeamId, agent: &AgentId) -> NodeError {
    let origin = match org_origin(conn, &OrgScope::Team(team.clone())) {
        Ok(Some(o)) => o.short(),
        _ => "?".into(),
    };
    let team = org::org_label(conn, org::OrgKind::Team, team.as_str());
    NodeError::refused(
        Rule::OrgOrigin,
        format!(
            "team {team}'s roster belongs to node {origin}, which created it (the org origin rule): \
         add {agent} there (`amos agent add {agent} --team {team}` on node {origin}) and sync; \
         then `amos agent add {agent}` here lets {agent} act on this node"
        ),
    )
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
        return Err(NodeError::unknown(UnknownKind::Team, team));
    }
    if at == AgentAt::Here && !org::agent_present(tx, agent)? {
        return Err(if present {
            NodeError::unknown_with(
                UnknownKind::Agent,
                agent,
                format!(
                    "unknown agent {agent}: register it with `amos agent add {agent} --team {team}`"
                ),
            )
        } else {
            NodeError::unknown(UnknownKind::Agent, agent)
        });
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
        .ok_or_else(|| NodeError::unknown(UnknownKind::Project, project))?;
    if at == AgentAt::Here && !org::agent_present(tx, agent)? {
        return Err(if present {
            NodeError::unknown_with(
                UnknownKind::Agent,
                agent,
                format!(
                    "unknown agent {agent}: register it with `amos agent add {agent} --team {}`, \
                     then `amos project add {project} {agent}`",
                    state.team
                ),
            )
        } else {
            NodeError::unknown(UnknownKind::Agent, agent)
        });
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

#[cfg(test)]
mod tests {
    use crate::api::node::test_node;

    /// `amos agent list` names only the teams and projects that exist: a
    /// deleted one's memberships stay in the store (their registers are
    /// kept) but are not listed.
    #[test]
    fn agent_list_leaves_out_a_deleted_project_and_team() {
        let (_dir, _home, mut node, _who) = test_node("carol");
        node.team_create("apollo", None).unwrap();
        node.team_create("zeus", None).unwrap();
        node.agent_add("bob", "agent", &["apollo".into(), "zeus".into()])
            .unwrap();
        node.project_create("moon", "apollo", None).unwrap();
        node.project_create("mars", "apollo", None).unwrap();
        node.project_member("moon", "bob", true).unwrap();
        node.project_member("mars", "bob", true).unwrap();
        let bob = |node: &crate::api::Node| {
            let a = node
                .agent_list()
                .unwrap()
                .into_iter()
                .find(|a| a.id == "bob")
                .unwrap();
            (a.teams, a.projects)
        };
        let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
        assert_eq!(bob(&node), (s(&["apollo", "zeus"]), s(&["mars", "moon"])));
        node.project_delete("moon").unwrap();
        assert_eq!(bob(&node), (s(&["apollo", "zeus"]), s(&["mars"])));
        node.team_delete("zeus").unwrap();
        assert_eq!(bob(&node), (s(&["apollo"]), s(&["mars"])));
    }
}
