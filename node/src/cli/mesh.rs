//! Replication seen from one node: peers, mesh key, bundles, digest, audit.

use super::*;

/// Run one of this group's commands on an open node.
pub(super) fn run(node: &mut Node, out: &Out, cmd: Cmd) -> Result<()> {
    match cmd {
        Cmd::Digest { scopes } => {
            let (digest, facts) = node.digest(&scopes)?;
            out.emit(&json!({"digest": digest, "facts": facts}), || {
                format!("{digest}  ({facts} facts)")
            });
        }
        Cmd::Peers(p) => match p {
            PeersCmd::Add {
                node_id,
                addr,
                policy,
            } => {
                node.peer_add(&node_id, addr.as_deref(), &policy)?;
                out.emit(&json!({"peer": node_id, "policy": policy}), || {
                    format!("peer {node_id} ({policy})")
                });
            }
            PeersCmd::Remove { node_id } => {
                node.peer_remove(&node_id)?;
                out.emit(&json!({"peer": node_id, "removed": true}), || {
                    format!("removed peer {node_id}")
                });
            }
            PeersCmd::List => {
                let peers = node.peer_list()?;
                out.emit(&json!({"peers": peers}), || {
                    peers
                        .iter()
                        .map(|p| {
                            format!(
                                "{}  {:<22} {:<24} {}",
                                p.node_id,
                                p.addr.as_deref().unwrap_or("-"),
                                p.policy,
                                p.last_result.as_deref().unwrap_or("never synced")
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("\n")
                });
            }
            PeersCmd::Policy { node_id, policy } => {
                node.peer_set_policy(&node_id, &policy)?;
                out.emit(&json!({"peer": node_id, "policy": policy}), || {
                    format!("peer {node_id} now {policy}")
                });
            }
        },
        Cmd::Mesh(MeshCmd::Key(k)) => {
            let key = match k {
                MeshKeyCmd::Show => node
                    .mesh_key()?
                    .ok_or_else(|| bad("no mesh key is set (amos mesh key generate, or set)"))?,
                MeshKeyCmd::Set { key } => node.mesh_key_set(&key)?,
                MeshKeyCmd::Generate => node.mesh_key_generate()?,
            };
            out.emit(
                &json!({"mesh_key": key.to_string(), "fingerprint": key.fingerprint()}),
                || key.to_string(),
            );
        }
        Cmd::Bundle(BundleCmd::Export {
            file,
            scopes,
            for_peer,
        }) => {
            let r = node.bundle_export(&file, &scopes, for_peer.as_deref(), out.feedback())?;
            out.emit(&r, || {
                format!(
                    "wrote {} facts in {} frames ({} bytes, {}) to {}, for {}",
                    r.facts,
                    r.frames,
                    r.bytes,
                    if r.encrypted {
                        "encrypted"
                    } else {
                        "NOT encrypted: no mesh key"
                    },
                    r.file,
                    r.recipient
                )
            });
        }
        Cmd::Bundle(BundleCmd::Import { file }) => {
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
        Cmd::Audit { limit, .. } => {
            let entries = node.audit(limit)?;
            out.emit(&json!({"refused": entries}), || {
                entries
                    .iter()
                    .map(|e| {
                        format!(
                            "{}  peer {}  {}  {}  {}",
                            output::rfc3339(e.time_ms),
                            &e.peer[..10.min(e.peer.len())],
                            e.code,
                            e.register,
                            e.reason
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        other => return Err(anyhow::anyhow!("internal: {other:?} is not a mesh command")),
    }
    Ok(())
}
