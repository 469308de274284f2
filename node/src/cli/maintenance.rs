//! Looking after a node: id, status, doctor, check, index, backup,
//! restore, consolidate, retention.

use std::path::PathBuf;

use amos_node::{Home, Node};
use anyhow::Result;
use clap::Subcommand;
use serde_json::json;

use super::bad;
use super::output::{self, Out};

#[derive(Subcommand, Debug)]
pub(super) enum MaintenanceCmd {
    /// Create the home, identity and database (idempotent)
    Init {
        #[arg(long)]
        name: Option<String>,
    },
    /// Print this node's NodeId
    Id,
    /// Node, peers, index lag
    Status,
    /// Check home and keys, database, index, clocks, listener, mDNS and peers
    Doctor {
        /// Skip the network checks (listener probe, peers)
        #[arg(long)]
        offline: bool,
        #[command(flatten)]
        dial: super::mesh::DialArgs,
    },
    /// Integrity of store, index and links
    Check,
    /// The disposable index
    #[command(subcommand)]
    Index(IndexCmd),
    /// Online backup of the store to FILE
    Backup {
        file: PathBuf,
        /// Write FILE.<YYYYMMDDTHHMMSSmmmZ> and keep only the N newest such backups
        #[arg(long, value_name = "N")]
        keep: Option<usize>,
    },
    /// Replace the store with a backup
    Restore {
        file: PathBuf,
        #[arg(long)]
        force: bool,
    },
    /// Merge exact and near duplicates into one memory (dry run unless --apply)
    Consolidate {
        #[arg(long)]
        apply: bool,
    },
    /// Archive expired and long-idle memories (dry run unless --apply)
    Retention {
        #[arg(long)]
        apply: bool,
        /// Idle period: not recalled or edited for this long (e.g. 90d); `off` disables
        #[arg(long, value_name = "DUR", default_value = "90d", env = "AMOS_IDLE")]
        idle: String,
    },
}

#[derive(Subcommand, Debug)]
pub(super) enum IndexCmd {
    /// Drop and rebuild the index from the store (the encoder's vectors are dropped too: catch-up re-encodes them)
    Rebuild,
    /// Encode the memories waiting for the sentence encoder (bulk writes leave them pending; `serve` does this in the background)
    CatchUp {
        /// Encode at most N memories
        #[arg(long, value_name = "N")]
        max: Option<usize>,
    },
}

/// Run one of this group's commands: `init` makes the home, the others
/// open it (exit 2 if it is not one).
pub(super) fn run(home: &Home, out: &Out, cmd: MaintenanceCmd) -> Result<()> {
    match cmd {
        MaintenanceCmd::Init { name } => {
            let r = Node::init(home, name.as_deref())?;
            amos_node::front::console::ensure_token(home)?;
            out.emit(&json!({"node_id": r.node_id, "home": r.home}), || {
                format!(
                    "{} node {} in {}",
                    if r.created {
                        "created"
                    } else {
                        "already initialised:"
                    },
                    r.node_id,
                    r.home
                )
            });
            Ok(())
        }
        cmd => on_node(&mut Node::open(home)?, out, cmd),
    }
}

/// Every command of the group but `init`, on the opened node.
fn on_node(node: &mut Node, out: &Out, cmd: MaintenanceCmd) -> Result<()> {
    match cmd {
        MaintenanceCmd::Id => out.emit(
            &json!({"node_id": node.node_id().to_string(), "name": node.name()}),
            || node.node_id().to_string(),
        ),
        MaintenanceCmd::Status => {
            let s = node.status()?;
            out.emit(&s, || {
                let mut lines = vec![
                    format!("node {} ({})", s.node_id, s.name),
                    format!("home {}", s.home),
                    format!(
                        "memories {} live, {} archived, {} forgotten  agents {}  teams {}  projects {}",
                        s.memories_live,
                        s.memories_archived,
                        s.memories_forgotten,
                        s.agents,
                        s.teams,
                        s.projects
                    ),
                    format!(
                        "schema v{}  seq {}  index lag {}",
                        s.schema_version, s.seq, s.index_lag
                    ),
                    match &s.encoder {
                        Some(e) => format!(
                            "encoder {}  encoded {}  pending {}",
                            e.model, e.progress.encoded, e.progress.pending
                        ),
                        None => "encoder off".to_owned(),
                    },
                    format!("peers: {}", if s.peers.is_empty() { "none" } else { "" }),
                ];
                for p in &s.peers {
                    lines.push(format!(
                        "  {} {} {}",
                        &p.node_id[..10.min(p.node_id.len())],
                        p.policy,
                        p.last_result.as_deref().unwrap_or("never synced")
                    ));
                }
                lines.push(format!("quarantined facts: {}", s.quarantined.len()));
                for q in &s.quarantined {
                    lines.push(format!(
                        "  from {} {}: {}",
                        &q.peer[..10.min(q.peer.len())],
                        q.register,
                        q.reason
                    ));
                }
                lines.push(format!(
                    "refused facts (audit): {} ({} new since the last status; `amos audit` lists them)",
                    s.audit_refusals, s.audit_refusals_new
                ));
                lines.join("\n")
            })
        }
        MaintenanceCmd::Doctor { offline, dial } => {
            dial.apply()?;
            let r = amos_node::ops::doctor(node, !offline)?;
            out.emit(&r, || {
                r.checks
                    .iter()
                    .map(|c| {
                        let hint = c
                            .hint
                            .as_deref()
                            .map(|h| format!("  → {h}"))
                            .unwrap_or_default();
                        format!("{:<5} {:<13} {}{hint}", c.status, c.name, c.detail)
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
            if !r.ok {
                anyhow::bail!("doctor found failures");
            }
        }
        MaintenanceCmd::Check => {
            let r = node.check()?;
            out.emit(&r, || {
                let caught_up = match r.index_caught_up {
                    0 => String::new(),
                    n => format!(", {n} changes caught up now"),
                };
                format!(
                    "{}: schema v{}, integrity {}, {} memories, {} indexed (lag {}{caught_up}), {} dangling links",
                    if r.ok { "ok" } else { "PROBLEMS" },
                    r.schema_version, r.integrity, r.memories, r.index_docs, r.index_lag, r.dangling_links
                )
            });
            if !r.ok {
                anyhow::bail!("check failed");
            }
        }
        MaintenanceCmd::Index(IndexCmd::Rebuild) => {
            let r = node.index_rebuild(out.feedback())?;
            out.emit(&r, || {
                let pending = match r.encoder_pending {
                    Some(n) => format!("; {n} memories wait for the encoder (amos index catch-up)"),
                    None => String::new(),
                };
                format!(
                    "indexed {} memories ({} bytes), {} vectors ({} bytes){pending}",
                    r.indexed, r.index_bytes, r.vectors, r.vector_bytes
                )
            });
        }
        MaintenanceCmd::Index(IndexCmd::CatchUp { max }) => {
            let r = node.index_catch_up(out.feedback(), max)?;
            out.emit(&r, || match &r.model {
                None => "the encoder is off on this node (amos config set encoder on)".to_owned(),
                Some(model) => format!(
                    "encoded {} memories with {model} in {:.1}s; {} pending",
                    r.encoded, r.seconds, r.pending
                ),
            });
        }
        MaintenanceCmd::Backup { file, keep } => {
            let r = node.backup_rotating(&file, keep)?;
            out.emit(&r, || output::backup_text(&r));
        }
        MaintenanceCmd::Restore { file, force } => {
            node.restore(&file, force)?;
            out.emit(&json!({"restored": file}), || {
                format!("restored from {}", file.display())
            });
        }
        MaintenanceCmd::Consolidate { apply } => {
            let r = node.consolidate(apply)?;
            out.emit(&r, || output::hygiene_text(&r));
        }
        MaintenanceCmd::Retention { apply, idle } => {
            let idle_ms = if idle == "off" {
                None
            } else {
                Some(
                    humantime::parse_duration(&idle)
                        .ok()
                        .filter(|d| !d.is_zero())
                        .ok_or_else(|| {
                            bad(format!("malformed --idle {idle:?}: use e.g. 90d, or off"))
                        })?
                        .as_millis() as u64,
                )
            };
            let r = node.retention_with(&amos_node::api::RetentionPolicy { idle_ms }, apply)?;
            out.emit(&r, || output::hygiene_text(&r));
        }
        MaintenanceCmd::Init { .. } => unreachable!("run handles init"),
    }
    Ok(())
}
