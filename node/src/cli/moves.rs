//! Moving memories in and out of a node: `amos import`, `amos export
//! --agent`, signed bundles (`amos bundle export|import`) and `amos forget
//! --agent --all`: arguments to the node API and printing; no logic.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;

use amos_node::Progress;
use amos_node::api::Sealing;
use amos_node::api::import::{self, ImportOptions, ImportReport};
use amos_node::{Node, NodeError};
use amos_protocol::{AgentId, Scope};
use anyhow::Result;
use clap::Subcommand;

use super::bad;
use super::output::Out;

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ImportSource {
    AgentMemoryOs,
    Mem0,
    Chatgpt,
    Hermes,
    Amos,
}

#[derive(Subcommand, Debug)]
pub(super) enum MovesCmd {
    /// Import memories: agent-memory-os (a home or a bundle), mem0, chatgpt,
    /// hermes (owned by --as), or an `amos export` file
    Import {
        #[arg(value_enum)]
        source: ImportSource,
        path: PathBuf,
        /// The agent that owns what mem0, chatgpt and hermes imports; for amos, the
        /// export's own agent
        #[arg(long = "as", env = "AMOS_AGENT", value_name = "AGENT")]
        agent: Option<String>,
        /// Grants for mem0, chatgpt and hermes imports (default: private; repeatable)
        #[arg(long, value_name = "SCOPE")]
        share: Vec<String>,
        /// Print what would be imported; write nothing
        #[arg(long)]
        dry_run: bool,
        /// Add the file's members to teams and projects that already exist here
        /// (agent-memory-os; without it they are left out and listed)
        #[arg(long)]
        add_members: bool,
        /// Let the file write memories and profiles of agents that already exist
        /// here (agent-memory-os, amos; without it they are left out and counted)
        #[arg(long)]
        existing_agents: bool,
    },
    /// Write everything an agent owns to FILE as JSON Lines (`amos import amos` reads it)
    Export {
        #[arg(long, value_name = "AGENT")]
        agent: String,
        file: PathBuf,
    },
    /// Signed (and, with a mesh key, encrypted) bundle files for air-gapped exchange
    #[command(subcommand)]
    Bundle(BundleCmd),
}

#[derive(Subcommand, Debug)]
pub(super) enum BundleCmd {
    /// Write the facts a policy lets out to FILE
    Export {
        file: PathBuf,
        /// Export what these scopes admit (repeatable)
        #[arg(long = "scope", value_name = "S")]
        scopes: Vec<String>,
        /// Export what this peer's policy admits
        #[arg(long = "for", value_name = "PEER")]
        for_peer: Option<String>,
        /// Seal the bundle to the peer (--for): only its identity opens it,
        /// no mesh key needed [default: sealed when --for is given and no
        /// mesh key is set]
        #[arg(long, conflicts_with = "no_seal")]
        seal: bool,
        /// Do not seal, even without a mesh key (a reader of the release
        /// before sealing can read it)
        #[arg(long)]
        no_seal: bool,
    },
    /// Verify FILE completely, then apply it through the import gate
    Import { file: PathBuf },
}

/// Run one of this group's commands on an open node.
pub(super) fn run(node: &mut Node, out: &Out, cmd: MovesCmd) -> Result<()> {
    match cmd {
        MovesCmd::Import {
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
                let scopes = node.check_share(&scopes)?;
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
        MovesCmd::Export { agent, file } => {
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
        MovesCmd::Bundle(BundleCmd::Export {
            file,
            scopes,
            for_peer,
            seal,
            no_seal,
        }) => {
            let sealing = match (seal, no_seal) {
                (true, _) => Sealing::Seal,
                (_, true) => Sealing::NoSeal,
                _ => Sealing::Auto,
            };
            let r = node.bundle_export_sealing(
                &file,
                &scopes,
                for_peer.as_deref(),
                sealing,
                out.feedback(),
            )?;
            out.emit(&r, || {
                format!(
                    "wrote {} facts in {} frames ({} bytes, {}) to {}, for {}",
                    r.facts,
                    r.frames,
                    r.bytes,
                    if r.sealed {
                        "sealed to its recipient"
                    } else if r.encrypted {
                        "encrypted"
                    } else {
                        "NOT encrypted: no mesh key"
                    },
                    r.file,
                    r.recipient
                )
            });
        }
        MovesCmd::Bundle(BundleCmd::Import { file }) => {
            let r = node.bundle_import(&file, out.feedback())?;
            out.emit(&r, || {
                format!(
                    "{} facts from {}: {} applied, {} already known, {} refused, {} quarantined",
                    r.facts,
                    &r.sender[..10.min(r.sender.len())],
                    r.applied,
                    r.stale,
                    r.refused,
                    r.quarantined
                )
            });
        }
    }
    Ok(())
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
