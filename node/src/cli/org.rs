//! The org graph: agent, team and project commands.

use amos_node::Node;
use anyhow::Result;
use clap::Subcommand;
use serde_json::json;

use super::bad;
use super::output::{Out, say};

#[derive(Subcommand, Debug)]
pub(super) enum OrgCmd {
    /// Agents
    #[command(subcommand)]
    Agent(AgentCmd),
    /// Teams and team membership
    #[command(subcommand)]
    Team(TeamCmd),
    /// Projects and project membership
    #[command(subcommand)]
    Project(ProjectCmd),
}

#[derive(Subcommand, Debug)]
pub(super) enum AgentCmd {
    Add {
        id: String,
        #[arg(long, default_value = "agent")]
        kind: String,
        #[arg(long)]
        team: Vec<String>,
    },
    List,
    /// Apply <home>/agents.toml now (also done at every start of `serve` and `mcp`)
    Apply,
    /// Bearer tokens for an agent's HTTP clients (`amos serve --http`)
    #[command(subcommand)]
    Token(TokenCmd),
}

#[derive(Subcommand, Debug)]
pub(super) enum TokenCmd {
    /// Make a token that acts as AGENT; it is printed this once (the node keeps only its hash)
    Create {
        /// The registered agent the token acts as
        agent: String,
        /// Stop working after this long (e.g. 30d, 12h) or at this RFC 3339 time [default: never]
        #[arg(long, value_name = "DUR")]
        expires: Option<String>,
        /// A label to tell tokens apart in `list` (e.g. the machine it is for)
        #[arg(long, value_name = "LABEL")]
        name: Option<String>,
    },
    /// The tokens made on this node: id, agent, name, dates and state (never a secret)
    List {
        /// Only this agent's tokens
        #[arg(long, value_name = "AGENT")]
        agent: Option<String>,
    },
    /// Revoke an agent's token ID, or all its tokens with --all; they fail with 401 at once
    Revoke {
        /// Whose token(s)
        #[arg(long, value_name = "AGENT")]
        agent: String,
        /// Every token of the agent's
        #[arg(long, conflicts_with = "id")]
        all: bool,
        /// The token's id (as `list` shows it)
        #[arg(required_unless_present = "all")]
        id: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
pub(super) enum TeamCmd {
    Create {
        id: String,
        #[arg(long)]
        name: Option<String>,
    },
    List,
    Delete {
        id: String,
    },
    Add {
        team: String,
        agent: String,
    },
    Remove {
        team: String,
        agent: String,
    },
    /// Print a one-time pairing code (amos1-…); the serving node answers `amos join`
    Invite {
        team: String,
        /// What the joining node may receive: `full` or scopes (default: team:TEAM)
        #[arg(long, value_name = "P")]
        policy: Option<String>,
        /// How long the code stays valid (e.g. 10m, 2h; at most 7d)
        #[arg(long, value_name = "DUR", default_value = "10m")]
        ttl: String,
        /// Address the joiner dials (HOST:PORT; repeatable). Default: where
        /// `amos serve` listens
        #[arg(long = "addr", value_name = "HOST:PORT")]
        addrs: Vec<String>,
        /// Put this relay peer in the code: the joiner reaches this node
        /// through it (a relay link with an address; it must serve the
        /// joiner too)
        #[arg(long, value_name = "RELAY_ID")]
        via: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
pub(super) enum ProjectCmd {
    Create {
        id: String,
        #[arg(long)]
        team: String,
        #[arg(long)]
        name: Option<String>,
    },
    List,
    Delete {
        id: String,
    },
    Add {
        project: String,
        agent: String,
    },
    Remove {
        project: String,
        agent: String,
    },
}

/// Run one of this group's commands on an open node.
pub(super) fn run(node: &mut Node, out: &Out, cmd: OrgCmd) -> Result<()> {
    match cmd {
        OrgCmd::Agent(AgentCmd::Add { id, kind, team }) => {
            node.agent_add(&id, &kind, &team)?;
            out.emit(&json!({"agent": id}), || format!("agent {id}"));
        }
        OrgCmd::Agent(AgentCmd::Apply) => {
            let home = node.home().clone();
            let r = amos_node::ops::apply_fleet(node, &home)?;
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
        OrgCmd::Agent(AgentCmd::Token(cmd)) => token(node, out, cmd)?,
        OrgCmd::Agent(AgentCmd::List) => {
            let agents = node.agent_list()?;
            out.emit(&json!({"agents": agents}), || {
                agents
                    .iter()
                    .map(|a| format!("{:<20} {:<10} teams: {}", a.id, a.kind, a.teams.join(",")))
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        OrgCmd::Team(t) => match t {
            TeamCmd::Create { id, name } => {
                let made = node.team_create(&id, name.as_deref())?;
                let shown = node.scope_label(&amos_protocol::Scope::Team(made.clone()));
                let shown = shown.trim_start_matches("team:").to_owned();
                out.emit(
                    &json!({"team": shown, "qualified_id": made.to_string()}),
                    || format!("team {shown} (id {made})"),
                );
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
                via,
            } => {
                let ttl = humantime::parse_duration(&ttl)
                    .map_err(|_| bad(format!("malformed --ttl {ttl:?}: use e.g. 10m")))?;
                let inv =
                    node.team_invite_via(&team, policy.as_deref(), ttl, &addrs, via.as_deref())?;
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
        OrgCmd::Project(p) => match p {
            ProjectCmd::Create { id, team, name } => {
                let made = node.project_create(&id, &team, name.as_deref())?;
                let shown = node.scope_label(&amos_protocol::Scope::Project(made.clone()));
                let shown = shown.trim_start_matches("project:").to_owned();
                out.emit(
                    &json!({"project": shown, "qualified_id": made.to_string(), "team": team}),
                    || format!("project {shown} in team {team} (id {made})"),
                );
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
    }
    Ok(())
}

/// `amos agent token create|list|revoke`.
fn token(node: &mut Node, out: &Out, cmd: TokenCmd) -> Result<()> {
    match cmd {
        TokenCmd::Create {
            agent,
            expires,
            name,
        } => {
            let expires_ms = expires
                .map(|e| {
                    amos_node::api::parse_expiry(&e, node.now_ms()).map_err(|_| {
                        bad(format!(
                            "malformed --expires {e:?}: use a lifetime (30d, 12h) or an RFC 3339 time"
                        ))
                    })
                })
                .transpose()?;
            let t = node.token_create(&agent, expires_ms, name.as_deref())?;
            // The token is printed whatever -q says: it is never shown again.
            if out.json {
                say(&serde_json::to_string(&t)?);
            } else {
                say(&t.token);
                if !out.quiet {
                    eprintln!(
                        "token {} for agent {} ({}); shown this once: the node keeps only its hash",
                        t.info.id,
                        t.info.agent,
                        match &t.info.expires {
                            Some(e) => format!("expires {e}"),
                            None => "never expires; revoke it with amos agent token revoke".into(),
                        }
                    );
                }
            }
        }
        TokenCmd::List { agent } => {
            let tokens = node.token_list(agent.as_deref())?;
            if tokens.is_empty() {
                out.nothing(|| "no tokens (amos agent token create AGENT makes one)".into());
            }
            out.emit(&json!({ "tokens": tokens }), || {
                tokens
                    .iter()
                    .map(|t| {
                        format!(
                            "{}  {:<16} {:<8} created {}  expires {}  {}",
                            t.id,
                            t.agent,
                            t.state,
                            t.created,
                            t.expires.as_deref().unwrap_or("never"),
                            t.name.as_deref().unwrap_or("")
                        )
                        .trim_end()
                        .to_owned()
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        TokenCmd::Revoke { agent, all: _, id } => {
            let revoked = node.token_revoke(&agent, id.as_deref())?;
            out.emit(
                &json!({ "agent": agent, "revoked": revoked }),
                || match revoked.len() {
                    0 => format!("no token of {agent}'s to revoke (already revoked)"),
                    n => format!("revoked {n} token(s) of {agent}'s: {}", revoked.join(" ")),
                },
            );
        }
    }
    Ok(())
}
