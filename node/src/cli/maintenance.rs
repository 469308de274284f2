//! Looking after a node: id, status, doctor, check, index, backup,
//! restore, consolidate, retention.

use super::*;

/// Run one of this group's commands on an open node.
pub(super) fn run(node: &mut Node, out: &Out, cmd: Cmd) -> Result<()> {
    match cmd {
        Cmd::Id => out.emit(
            &json!({"node_id": node.node_id().to_string(), "name": node.name()}),
            || node.node_id().to_string(),
        ),
        Cmd::Status => {
            let s = node.status()?;
            out.emit(&s, || {
                let mut lines = vec![
                    format!("node {} ({})", s.node_id, s.name),
                    format!("home {}", s.home),
                    format!(
                        "memories {}  agents {}  teams {}  projects {}",
                        s.memories, s.agents, s.teams, s.projects
                    ),
                    format!(
                        "schema v{}  seq {}  index lag {}",
                        s.schema_version, s.seq, s.index_lag
                    ),
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
        Cmd::Doctor { offline } => {
            let r = amos_node::ops::doctor::run(node, !offline)?;
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
        Cmd::Check => {
            let r = node.check()?;
            out.emit(&r, || {
                format!(
                    "{}: schema v{}, integrity {}, {} memories, {} indexed (lag {}), {} dangling links",
                    if r.ok { "ok" } else { "PROBLEMS" },
                    r.schema_version, r.integrity, r.memories, r.index_docs, r.index_lag, r.dangling_links
                )
            });
            if !r.ok {
                anyhow::bail!("check failed");
            }
        }
        Cmd::Index(IndexCmd::Rebuild) => {
            let r = node.index_rebuild(out.feedback())?;
            out.emit(&r, || {
                format!(
                    "indexed {} memories ({} bytes), {} vectors ({} bytes)",
                    r.indexed, r.index_bytes, r.vectors, r.vector_bytes
                )
            });
        }
        Cmd::Backup { file, keep } => {
            let r = node.backup_rotating(&file, keep)?;
            out.emit(&r, || output::backup_text(&r));
        }
        Cmd::Restore { file, force } => {
            node.restore(&file, force)?;
            out.emit(&json!({"restored": file}), || {
                format!("restored from {}", file.display())
            });
        }
        Cmd::Consolidate { apply } => {
            let r = node.consolidate(apply)?;
            out.emit(&r, || output::hygiene_text(&r));
        }
        Cmd::Retention { apply, idle } => {
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
        other => {
            return Err(anyhow::anyhow!(
                "internal: {other:?} is not a maintenance command"
            ));
        }
    }
    Ok(())
}
