//! The org graph as stored: agents, teams, projects, memberships, and the
//! [`OrgGraph`] view the gate reads.

use amos_acl::{OrgGraph, ProjectState, TeamState};
use amos_protocol::{AgentId, Grants, NodeId, OrgScope, ProjectId, Scope, TeamId};
use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use crate::error::{NodeError, Result};

/// The org graph read straight from SQLite (so a membership change is in
/// force on the very next query).
pub struct StoredOrg<'c, R: super::Readable + ?Sized>(pub &'c R);

impl<R: super::Readable + ?Sized> OrgGraph for StoredOrg<'_, R> {
    fn team(&self, id: &TeamId) -> Option<TeamState> {
        super::sql(self.0)
            .prepare_cached("SELECT present FROM teams WHERE id = ?1")
            .and_then(|mut s| s.query_row([id.as_str()], |r| r.get(0)).optional())
            .ok()
            .flatten()
            .map(|present| TeamState { present })
    }

    fn project(&self, id: &ProjectId) -> Option<ProjectState> {
        let row: Option<(String, bool)> = super::sql(self.0)
            .prepare_cached("SELECT team, present FROM projects WHERE id = ?1")
            .and_then(|mut s| {
                s.query_row([id.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()
            })
            .ok()
            .flatten();
        let (team, present) = row?;
        Some(ProjectState {
            team: TeamId::parse(&team).ok()?,
            present,
        })
    }

    fn memberships_of(&self, agent: &AgentId) -> Vec<OrgScope> {
        let Ok(mut stmt) = super::sql(self.0)
            .prepare_cached("SELECT scope FROM memberships WHERE agent = ?1 AND present = 1")
        else {
            return Vec::new();
        };
        let Ok(rows) = stmt.query_map([agent.as_str()], |r| r.get::<_, String>(0)) else {
            return Vec::new();
        };
        rows.filter_map(|r| r.ok())
            .filter_map(|s| parse_org_scope(&s))
            .collect()
    }
}

/// The org graph as it stood at a past time `T` (ms), as far as the store
/// can tell without a history of it: a team, project or membership whose
/// record was last written after `T` is taken as absent then (its state
/// at `T` is not known). So every scope [`AuthorizedScopes::for_agent`]
/// grants over it was granted at `T` too — never one more (what
/// `changes_since` needs to say an agent could see a memory then).
///
/// [`AuthorizedScopes::for_agent`]: amos_acl::AuthorizedScopes::for_agent
pub struct StoredOrgAt<'c, R: super::Readable + ?Sized>(pub &'c R, pub u64);

impl<R: super::Readable + ?Sized> StoredOrgAt<'_, R> {
    /// Sort keys below this are clocks of wall time `T` or earlier.
    fn bound(&self) -> Vec<u8> {
        self.1.saturating_add(1).to_be_bytes().to_vec()
    }
}

impl<R: super::Readable + ?Sized> OrgGraph for StoredOrgAt<'_, R> {
    fn team(&self, id: &TeamId) -> Option<TeamState> {
        super::sql(self.0)
            .prepare_cached("SELECT present FROM teams WHERE id = ?1 AND v < ?2")
            .and_then(|mut s| {
                s.query_row(params![id.as_str(), self.bound()], |r| r.get(0))
                    .optional()
            })
            .ok()
            .flatten()
            .map(|present| TeamState { present })
    }

    fn project(&self, id: &ProjectId) -> Option<ProjectState> {
        let row: Option<(String, bool)> = super::sql(self.0)
            .prepare_cached("SELECT team, present FROM projects WHERE id = ?1 AND v < ?2")
            .and_then(|mut s| {
                s.query_row(params![id.as_str(), self.bound()], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .optional()
            })
            .ok()
            .flatten();
        let (team, present) = row?;
        Some(ProjectState {
            team: TeamId::parse(&team).ok()?,
            present,
        })
    }

    fn memberships_of(&self, agent: &AgentId) -> Vec<OrgScope> {
        let Ok(mut stmt) = super::sql(self.0).prepare_cached(
            "SELECT scope FROM memberships WHERE agent = ?1 AND present = 1 AND v < ?2",
        ) else {
            return Vec::new();
        };
        let Ok(rows) = stmt.query_map(params![agent.as_str(), self.bound()], |r| {
            r.get::<_, String>(0)
        }) else {
            return Vec::new();
        };
        rows.filter_map(|r| r.ok())
            .filter_map(|s| parse_org_scope(&s))
            .collect()
    }
}

/// A team or a project: which table a name is looked up in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrgKind {
    /// `teams`.
    Team,
    /// `projects`.
    Project,
}

/// The ids of the present teams (or projects) whose display name is `name`
/// (docs/design.md §3): the legacy id `name` and every qualified
/// `name@…`, in order.
pub fn ids_named(
    conn: &(impl super::Readable + ?Sized),
    kind: OrgKind,
    name: &str,
) -> Result<Vec<String>> {
    let sql = match kind {
        OrgKind::Team => {
            "SELECT id FROM teams WHERE present = 1
               AND (id = ?1 OR substr(id, 1, length(?1) + 1) = ?1 || '@') ORDER BY id"
        }
        OrgKind::Project => {
            "SELECT id FROM projects WHERE present = 1
               AND (id = ?1 OR substr(id, 1, length(?1) + 1) = ?1 || '@') ORDER BY id"
        }
    };
    let conn = super::sql(conn);
    let mut stmt = conn.prepare_cached(sql)?;
    let rows = stmt.query_map([name], |r| r.get(0))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// How a team or project id is shown here: its display name when no
/// other present scope of its kind here carries that name, else qualified
/// in full (a legacy id as `NAME@`, the form that names it when a
/// qualified one shares its name). What users type back resolves to it.
pub fn org_label(conn: &(impl super::Readable + ?Sized), kind: OrgKind, id: &str) -> String {
    let (name, qualified) = match id.split_once('@') {
        Some((n, _)) => (n, true),
        None => (id, false),
    };
    let alone = ids_named(conn, kind, name)
        .map(|ids| ids.iter().all(|i| i == id))
        .unwrap_or(false);
    if alone {
        name.to_owned()
    } else if qualified {
        id.to_owned()
    } else {
        format!("{id}@")
    }
}

/// [`org_label`] of a scope (`team:`/`project:` with the label; any other
/// scope as its text).
pub fn scope_label(conn: &(impl super::Readable + ?Sized), scope: &Scope) -> String {
    match scope {
        Scope::Team(t) => format!("team:{}", org_label(conn, OrgKind::Team, t.as_str())),
        Scope::Project(p) => format!("project:{}", org_label(conn, OrgKind::Project, p.as_str())),
        other => other.to_string(),
    }
}

/// A memory's grants as shown here: [`scope_label`] of each, `private` for none.
pub fn grant_labels(conn: &(impl super::Readable + ?Sized), grants: &Grants) -> Vec<String> {
    if grants.is_private() {
        return vec!["private".to_owned()];
    }
    grants.iter().map(|s| scope_label(conn, s)).collect()
}

/// Parse `team:ID` / `project:ID`.
pub fn parse_org_scope(s: &str) -> Option<OrgScope> {
    match s.split_once(':')? {
        ("team", t) => TeamId::parse(t).ok().map(OrgScope::Team),
        ("project", p) => ProjectId::parse(p).ok().map(OrgScope::Project),
        _ => None,
    }
}

/// An agent as `amos agent list` shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct AgentInfo {
    /// The agent's id.
    pub id: String,
    /// What kind of agent it is (free text, e.g. `assistant`).
    pub kind: String,
    /// The name it is shown by.
    pub display_name: String,
    /// Teams it is a member of.
    pub teams: Vec<String>,
    /// Projects it is a member of.
    pub projects: Vec<String>,
}

/// A team as `amos team list` shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TeamInfo {
    /// The team as shown and typed here: its display name, qualified only
    /// where another team here has that name ([`org_label`]).
    pub id: String,
    /// Its full id (`NAME@QUALIFIER`, or a legacy slug).
    pub qualified_id: String,
    /// Its display name.
    pub name: String,
    /// Its members' agent ids.
    pub members: Vec<String>,
}

/// A project as `amos project list` shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ProjectInfo {
    /// The project as shown and typed here ([`org_label`]).
    pub id: String,
    /// Its full id.
    pub qualified_id: String,
    /// The team it belongs to, as shown here.
    pub team: String,
    /// Its display name.
    pub name: String,
    /// Its members' agent ids.
    pub members: Vec<String>,
}

/// The gate's stamp: a random value the schema's triggers draw afresh on
/// every insert, update or delete of an agent, team, project, membership or
/// agent token, from any connection (and a restore draws one too). Equal
/// stamps read in two snapshots mean no requester's gate and no token's
/// check could read differently in them (`api::gates` keeps what it built
/// under one).
pub fn gate_stamp(conn: &(impl super::Readable + ?Sized)) -> Result<i64> {
    let conn = super::sql(conn);
    Ok(conn
        .prepare_cached("SELECT stamp FROM gate_stamp WHERE id = 1")?
        .query_row([], |r| r.get(0))?)
}

pub fn agent_present(conn: &(impl super::Readable + ?Sized), id: &AgentId) -> Result<bool> {
    let conn = super::sql(conn);
    Ok(conn
        .prepare_cached("SELECT present FROM agents WHERE id = ?1")?
        .query_row([id.as_str()], |r| r.get::<_, bool>(0))
        .optional()?
        .unwrap_or(false))
}

pub fn team_present(conn: &(impl super::Readable + ?Sized), id: &TeamId) -> bool {
    let conn = super::sql(conn);
    StoredOrg(conn).team(id).is_some_and(|t| t.present)
}

pub fn project_state(
    conn: &(impl super::Readable + ?Sized),
    id: &ProjectId,
) -> Option<ProjectState> {
    let conn = super::sql(conn);
    StoredOrg(conn).project(id)
}

/// Whether `agent` is a present member of `scope`.
pub fn is_member(
    conn: &(impl super::Readable + ?Sized),
    scope: &OrgScope,
    agent: &AgentId,
) -> Result<bool> {
    let conn = super::sql(conn);
    Ok(conn
        .prepare_cached("SELECT present FROM memberships WHERE scope = ?1 AND agent = ?2")?
        .query_row([scope.to_string(), agent.to_string()], |r| {
            r.get::<_, bool>(0)
        })
        .optional()?
        .unwrap_or(false))
}

fn members(conn: &Connection, scope: &str) -> Result<Vec<String>> {
    let mut stmt = conn.prepare_cached(
        "SELECT agent FROM memberships WHERE scope = ?1 AND present = 1 ORDER BY agent",
    )?;
    let rows = stmt.query_map([scope], |r| r.get(0))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub fn list_agents(conn: &(impl super::Readable + ?Sized)) -> Result<Vec<AgentInfo>> {
    let conn = super::sql(conn);
    let mut stmt =
        conn.prepare("SELECT id, kind, display_name FROM agents WHERE present = 1 ORDER BY id")?;
    let rows: Vec<(String, String, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?;
    // Only scopes that exist here: a membership outlives its deleted team
    // or project (its register stays), and such a scope is not listed.
    let mut scope_stmt = conn.prepare_cached(
        "SELECT m.scope FROM memberships m WHERE m.agent = ?1 AND m.present = 1
           AND ((m.scope LIKE 'team:%' AND EXISTS(SELECT 1 FROM teams t
                    WHERE t.id = substr(m.scope, 6) AND t.present = 1))
             OR (m.scope LIKE 'project:%' AND EXISTS(SELECT 1 FROM projects p
                    WHERE p.id = substr(m.scope, 9) AND p.present = 1)))
         ORDER BY m.scope",
    )?;
    let mut out = Vec::new();
    for (id, kind, display_name) in rows {
        let scopes: Vec<String> = scope_stmt
            .query_map([&id], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        let pick = |prefix: &str, kind| {
            scopes
                .iter()
                .filter_map(|s| s.strip_prefix(prefix))
                .map(|id| org_label(conn, kind, id))
                .collect()
        };
        out.push(AgentInfo {
            teams: pick("team:", OrgKind::Team),
            projects: pick("project:", OrgKind::Project),
            id,
            kind,
            display_name,
        });
    }
    Ok(out)
}

pub fn list_teams(conn: &(impl super::Readable + ?Sized)) -> Result<Vec<TeamInfo>> {
    let conn = super::sql(conn);
    let mut stmt = conn.prepare("SELECT id, name FROM teams WHERE present = 1 ORDER BY id")?;
    let rows: Vec<(String, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    rows.into_iter()
        .map(|(id, name)| {
            Ok(TeamInfo {
                members: members(conn, &format!("team:{id}"))?,
                id: org_label(conn, OrgKind::Team, &id),
                qualified_id: id,
                name,
            })
        })
        .collect()
}

pub fn list_projects(conn: &(impl super::Readable + ?Sized)) -> Result<Vec<ProjectInfo>> {
    let conn = super::sql(conn);
    let mut stmt =
        conn.prepare("SELECT id, team, name FROM projects WHERE present = 1 ORDER BY id")?;
    let rows: Vec<(String, String, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?;
    rows.into_iter()
        .map(|(id, team, name)| {
            Ok(ProjectInfo {
                members: members(conn, &format!("project:{id}"))?,
                id: org_label(conn, OrgKind::Project, &id),
                qualified_id: id,
                team: org_label(conn, OrgKind::Team, &team),
                name,
            })
        })
        .collect()
}

/// The node that created a team or project we hold.
pub fn org_origin(
    conn: &(impl super::Readable + ?Sized),
    scope: &OrgScope,
) -> Result<Option<NodeId>> {
    let conn = super::sql(conn);
    let (sql, key) = match scope {
        OrgScope::Team(t) => ("SELECT origin FROM teams WHERE id = ?1", t.as_str()),
        OrgScope::Project(p) => ("SELECT origin FROM projects WHERE id = ?1", p.as_str()),
    };
    let origin: Option<Option<Vec<u8>>> = conn
        .prepare_cached(sql)?
        .query_row([key], |r| r.get(0))
        .optional()?;
    origin
        .flatten()
        .map(|b| {
            b.try_into()
                .map(NodeId)
                .map_err(|_| NodeError::Corrupt(format!("stored origin of {scope}")))
        })
        .transpose()
}
