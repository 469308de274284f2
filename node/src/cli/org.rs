//! The org graph: agent, team and project commands.

use super::*;

/// Run one of this group's commands on an open node.
pub(super) fn run(node: &mut Node, out: &Out, cmd: Cmd) -> Result<()> {
    match cmd {
        Cmd::Agent(AgentCmd::Add { id, kind, team }) => {
            node.agent_add(&id, &kind, &team)?;
            out.emit(&json!({"agent": id}), || format!("agent {id}"));
        }
        Cmd::Agent(AgentCmd::Apply) => {
            let home = node.home().clone();
            let r = amos_node::ops::fleet::apply(node, &home)?;
            out.emit(&r, || {
                if !r.file {
                    return "no agents.toml in the home: nothing to apply".into();
                }
                let mut lines = r.changes.clone();
                lines.push(format!(
                    "{} declared agents, {} changes",
                    r.declared,
                    r.changes.len()
                ));
                lines.join("\n")
            });
        }
        Cmd::Agent(AgentCmd::List) => {
            let agents = node.agent_list()?;
            out.emit(&json!({"agents": agents}), || {
                agents
                    .iter()
                    .map(|a| format!("{:<20} {:<10} teams: {}", a.id, a.kind, a.teams.join(",")))
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        Cmd::Team(t) => match t {
            TeamCmd::Create { id, name } => {
                node.team_create(&id, name.as_deref())?;
                out.emit(&json!({"team": id}), || format!("team {id}"));
            }
            TeamCmd::List => {
                let teams = node.team_list()?;
                out.emit(&json!({"teams": teams}), || {
                    teams
                        .iter()
                        .map(|t| format!("{:<20} {:<20} {}", t.id, t.name, t.members.join(",")))
                        .collect::<Vec<_>>()
                        .join("\n")
                });
            }
            TeamCmd::Delete { id } => {
                node.team_delete(&id)?;
                out.emit(&json!({"team": id, "deleted": true}), || {
                    format!("team {id} deleted")
                });
            }
            TeamCmd::Add { team, agent } => {
                node.team_member(&team, &agent, true)?;
                out.emit(&json!({"team": team, "agent": agent}), || {
                    format!("{agent} joined team {team}")
                });
            }
            TeamCmd::Invite {
                team,
                policy,
                ttl,
                addrs,
            } => {
                let ttl = humantime::parse_duration(&ttl)
                    .map_err(|_| bad(format!("malformed --ttl {ttl:?}: use e.g. 10m")))?;
                let inv = node.team_invite(&team, policy.as_deref(), ttl, &addrs)?;
                let expires = humantime::format_rfc3339_seconds(
                    std::time::UNIX_EPOCH + std::time::Duration::from_millis(inv.expires),
                );
                out.emit(
                    &json!({"code": inv.code, "expires": expires.to_string(), "expires_ms": inv.expires,
                            "team": inv.team, "policy": inv.policy, "addrs": inv.addrs}),
                    || {
                        format!(
                            "{}\n(one use, for team {} with policy {}, expires {expires}; \
                             the joiner runs `amos join <code>` while this node serves)",
                            inv.code, inv.team, inv.policy
                        )
                    },
                );
            }
            TeamCmd::Remove { team, agent } => {
                node.team_member(&team, &agent, false)?;
                out.emit(
                    &json!({"team": team, "agent": agent, "removed": true}),
                    || format!("{agent} left team {team}"),
                );
            }
        },
        Cmd::Project(p) => match p {
            ProjectCmd::Create { id, team, name } => {
                node.project_create(&id, &team, name.as_deref())?;
                out.emit(&json!({"project": id, "team": team}), || {
                    format!("project {id} in team {team}")
                });
            }
            ProjectCmd::List => {
                let projects = node.project_list()?;
                out.emit(&json!({"projects": projects}), || {
                    projects
                        .iter()
                        .map(|p| {
                            format!("{:<20} team {:<16} {}", p.id, p.team, p.members.join(","))
                        })
                        .collect::<Vec<_>>()
                        .join("\n")
                });
            }
            ProjectCmd::Delete { id } => {
                node.project_delete(&id)?;
                out.emit(&json!({"project": id, "deleted": true}), || {
                    format!("project {id} deleted")
                });
            }
            ProjectCmd::Add { project, agent } => {
                node.project_member(&project, &agent, true)?;
                out.emit(&json!({"project": project, "agent": agent}), || {
                    format!("{agent} joined project {project}")
                });
            }
            ProjectCmd::Remove { project, agent } => {
                node.project_member(&project, &agent, false)?;
                out.emit(
                    &json!({"project": project, "agent": agent, "removed": true}),
                    || format!("{agent} left project {project}"),
                );
            }
        },
        other => return Err(anyhow::anyhow!("internal: {other:?} is not a org command")),
    }
    Ok(())
}
