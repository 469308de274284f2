//! `amos import`, `amos export --agent`, `amos forget --agent --all`:
//! arguments to the node API and printing; no logic.

use std::io::{BufRead, IsTerminal, Write};

use amos_node::api::import::{self, ImportOptions, ImportReport};
use amos_node::progress::Progress;
use amos_protocol::AgentId;

use super::output::rfc3339;
use super::*;

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ImportSource {
    AgentMemoryOs,
    Mem0,
    Chatgpt,
    Hermes,
    Amos,
}

pub(super) fn run(node: &mut Node, out: &Out, cmd: Cmd) -> Result<()> {
    match cmd {
        Cmd::Import {
            source,
            path,
            agent,
            share,
            dry_run,
            add_members,
            existing_agents,
        } => {
            let owned = |what: &str| -> Result<(AgentId, Vec<Scope>)> {
                let agent = agent.as_deref().map(str::trim).filter(|a| !a.is_empty());
                let Some(agent) = agent else {
                    return Err(bad(format!(
                        "amos import {what} needs the agent that owns the memories: --as AGENT"
                    )));
                };
                let agent = AgentId::parse(agent).map_err(NodeError::from)?;
                let mut scopes = Vec::new();
                for s in &share {
                    let s: Scope = s.parse().map_err(NodeError::from)?;
                    if s != Scope::Private {
                        scopes.push(s);
                    }
                }
                node.check_share(&scopes)?;
                Ok((agent, scopes))
            };
            // `--as` given on the command line, not only AMOS_AGENT's.
            let as_given = std::env::args().any(|a| a == "--as" || a.starts_with("--as="));
            if source == ImportSource::AgentMemoryOs
                && (!share.is_empty() || (agent.is_some() && as_given))
            {
                return Err(bad(
                    "--as and --share are for mem0, chatgpt and hermes: an agent-memory-os home names its owners and grants",
                ));
            }
            if source == ImportSource::Amos && !share.is_empty() {
                return Err(bad(
                    "--share is for mem0, chatgpt and hermes: an amos export names its grants",
                ));
            }
            if add_members && source != ImportSource::AgentMemoryOs {
                return Err(bad(
                    "--add-members is for agent-memory-os: only its homes carry teams and projects",
                ));
            }
            // Whether the operator named the owner: mem0, chatgpt and hermes
            // always do (`--as`); an amos export's agent is confirmed by
            // `--as`; an agent-memory-os home only by the flag.
            let mut named = existing_agents
                || matches!(
                    source,
                    ImportSource::Mem0 | ImportSource::Chatgpt | ImportSource::Hermes
                );
            let plan = match source {
                ImportSource::AgentMemoryOs => import::aos::read(&path)?,
                ImportSource::Amos => {
                    // An export is its header agent's; `--as` may only
                    // confirm it (AMOS_AGENT alone does not select).
                    let a = match agent.as_deref().map(str::trim) {
                        Some(a) if as_given && !a.is_empty() => {
                            Some(AgentId::parse(a).map_err(NodeError::from)?)
                        }
                        _ => None,
                    };
                    named |= a.is_some();
                    import::amos::read(&path, a.as_ref())?
                }
                ImportSource::Mem0 => {
                    let (a, s) = owned("mem0")?;
                    import::mem0::read(&path, &a, &s)?
                }
                ImportSource::Chatgpt => {
                    let (a, s) = owned("chatgpt")?;
                    import::chatgpt::read(&path, &a, &s)?
                }
                ImportSource::Hermes => {
                    let (a, s) = owned("hermes")?;
                    import::hermes::read(&path, &a, &s)?
                }
            };
            let progress = Progress::bar(out.feedback(), "import", "memories", 0);
            let opts = ImportOptions {
                dry_run,
                add_members,
                existing_agents: named,
            };
            let r = node.import(&plan, &opts, &progress)?;
            drop(progress);
            out.emit(&r, || report_text(&r));
        }
        Cmd::Export { agent, file } => {
            let r = node.export_agent(&agent, &file)?;
            out.emit(&r, || {
                format!(
                    "wrote {} memories, {} links{} of {} to {}",
                    r.memories,
                    r.links,
                    if r.profile { " and the profile" } else { "" },
                    r.agent,
                    r.file
                )
            });
        }
        Cmd::Config(ConfigCmd::Set { key, value }) => {
            let c = match key.as_str() {
                "read-audit" => match value.as_str() {
                    "on" => node.set_read_audit(true)?,
                    "off" => node.set_read_audit(false)?,
                    v => return Err(bad(format!("read-audit is on or off, not {v:?}"))),
                },
                "read-audit-retention" => {
                    let d = humantime::parse_duration(&value).map_err(|_| {
                        bad(format!(
                            "malformed retention {value:?}: use a duration, e.g. 30d"
                        ))
                    })?;
                    node.set_read_audit_retention(d.as_millis() as u64)?
                }
                k => {
                    return Err(bad(format!(
                        "unknown setting {k:?}: read-audit, read-audit-retention"
                    )));
                }
            };
            out.emit(&c, || config_text(&c));
        }
        Cmd::Config(ConfigCmd::Show) => {
            let c = node.read_audit_config()?;
            out.emit(&c, || config_text(&c));
        }
        Cmd::Audit {
            what:
                Some(AuditCmd::Reads {
                    agent,
                    memory,
                    since,
                    limit,
                }),
            ..
        } => {
            let since_ms = since
                .map(|s| match humantime::parse_duration(&s) {
                    Ok(d) => Ok(node.now_ms().saturating_sub(d.as_millis() as u64)),
                    Err(_) => humantime::parse_rfc3339_weak(&s)
                        .ok()
                        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                        .map(|d| d.as_millis() as u64)
                        .ok_or_else(|| {
                            bad(format!(
                                "malformed --since {s:?}: use a duration (1h, 7d) or an RFC 3339 time"
                            ))
                        }),
                })
                .transpose()?;
            let rows = node.read_audit(agent.as_deref(), memory.as_deref(), since_ms, limit)?;
            out.emit(&json!({ "reads": rows }), || {
                rows.iter()
                    .map(|r| {
                        format!(
                            "{}  {:<16} {}  {} via {}",
                            rfc3339(r.time_ms),
                            r.agent,
                            r.memory,
                            r.front,
                            r.via
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        _ => unreachable!("not a moves command"),
    }
    Ok(())
}

fn config_text(c: &amos_node::api::reads::ReadAuditConfig) -> String {
    format!(
        "read-audit {}{} (stored: {}), retention {}",
        if c.on { "on" } else { "off" },
        c.env
            .as_ref()
            .map(|e| format!(" by AMOS_READ_AUDIT={e}"))
            .unwrap_or_default(),
        if c.stored { "on" } else { "off" },
        humantime::format_duration(std::time::Duration::from_millis(c.retention_ms))
    )
}

fn counts(m: &std::collections::BTreeMap<String, usize>) -> String {
    m.iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn report_text(r: &ImportReport) -> String {
    let verb = if r.dry_run {
        "would import"
    } else {
        "imported"
    };
    let mut s = format!(
        "{verb} {} memories from {} ({} held already), {} archived; {} agents, {} teams, {} projects, {} memberships, {} links ({} held), {} profiles, {} tombstones",
        r.memories,
        r.source,
        r.memories_held,
        r.archived,
        r.agents,
        r.teams,
        r.projects,
        r.memberships,
        r.links,
        r.links_held,
        r.profiles,
        r.tombstones
    );
    if !r.memories_by_type.is_empty() {
        s.push_str(&format!("\nby type: {}", counts(&r.memories_by_type)));
    }
    if !r.memories_by_scope.is_empty() {
        s.push_str(&format!("\nby scope: {}", counts(&r.memories_by_scope)));
    }
    if !r.memories_by_owner.is_empty() {
        s.push_str(&format!("\nby owner: {}", counts(&r.memories_by_owner)));
    }
    if r.pinned > 0 {
        s.push_str(&format!("\npinned: {}", r.pinned));
    }
    if !r.joins.is_empty() {
        s.push_str(&format!(
            "\n{} to teams and projects that exist here (--add-members): {}",
            if r.dry_run { "would add" } else { "added" },
            r.joins.join(", ")
        ));
    }
    if !r.joins_refused.is_empty() {
        s.push_str(&format!(
            "\nleft out, members of teams and projects that exist here (add them with --add-members): {}",
            r.joins_refused.join(", ")
        ));
    }
    if !r.owners_refused.is_empty() {
        s.push_str(&format!(
            "\nleft out, memories of agents that already exist here (--existing-agents, or --as AGENT for an amos export): {}",
            counts(&r.owners_refused)
        ));
    }
    for (why, n) in &r.unmapped {
        s.push_str(&format!("\nnot mapped ({n}×): {why}"));
    }
    s
}

/// `amos forget --agent A --all [--yes]`.
pub(super) fn forget_agent(node: &mut Node, out: &Out, agent: &str, yes: bool) -> Result<()> {
    if !yes {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            return Err(bad(format!(
                "forget --agent {agent} --all tombstones every memory {agent} owns: confirm with --yes"
            )));
        }
        eprint!("tombstone every memory {agent} owns, on every node it reaches? type yes: ");
        let _ = std::io::stderr().flush();
        let mut line = String::new();
        stdin.lock().read_line(&mut line)?;
        if line.trim() != "yes" {
            return Err(bad("not confirmed: nothing forgotten"));
        }
    }
    let r = node.forget_agent(agent)?;
    out.emit(&r, || {
        let mut s = format!("forgot {} memories of {}", r.forgotten, r.agent);
        if r.elsewhere > 0 {
            s.push_str(&format!(
                "; {} were made on nodes this one may not speak for: forget them there",
                r.elsewhere
            ));
        }
        s
    });
    Ok(())
}
