//! Replication seen from one node: peers, mesh key, bundles, digest, audit.

use amos_node::{Home, Node};
use anyhow::Result;
use clap::Subcommand;
use serde_json::json;

use super::bad;
use super::output::Out;

#[derive(Subcommand, Debug)]
pub(super) enum ReplicationCmd {
    /// Convergence digest of the replicated facts (optionally those scopes admit)
    Digest {
        #[arg(long = "scope", value_name = "S")]
        scopes: Vec<String>,
    },
    /// Peers and their policies
    #[command(subcommand)]
    Peers(PeersCmd),
    /// The mesh key that encrypts bundles
    #[command(subcommand)]
    Mesh(MeshCmd),
    /// Sync with peers over QUIC
    #[command(subcommand)]
    Sync(SyncCmd),
    /// Pair with the node that printed CODE (`amos team invite`), then sync
    Join {
        code: String,
        /// Record the inviter without a network, for bundle-only exchange
        #[arg(long)]
        offline: bool,
        /// This node's agent, for the inviter to add to the invite's team or project
        #[arg(long = "as", env = "AMOS_AGENT", value_name = "AGENT")]
        agent: Option<String>,
        #[command(flatten)]
        dial: DialArgs,
    },
    /// Nodes seen on the LAN via mDNS (registered peers are recognised)
    Discover {
        /// How long to listen
        #[arg(long, value_name = "DUR", default_value = "3s")]
        timeout: String,
    },
}

#[derive(Subcommand, Debug)]
pub(super) enum PeersCmd {
    /// Register a peer by NodeId, with the policy we give it
    Add {
        node_id: String,
        /// host:port, if it serves (omit for bundle-only peers)
        addr: Option<String>,
        /// full, none (no facts either way: a pure relay link), or a
        /// comma-separated list of global, team:ID, project:ID
        #[arg(long)]
        policy: String,
        /// A directory to exchange sealed bundles with it through (a shared
        /// folder, a USB stick, a synced directory): `amos sync now` and
        /// `amos serve` post and import there
        #[arg(long, value_name = "DIR")]
        mailbox: Option<std::path::PathBuf>,
        /// Make the link a relay link (on both sides): either side may
        /// forward the other's connections end to end, and a side that
        /// knows the other's address keeps a connection to it open
        #[arg(long)]
        relay: bool,
        /// Reach this peer through RELAY_ID, a registered relay peer
        #[arg(long, value_name = "RELAY_ID")]
        via: Option<String>,
    },
    /// Forget a peer; its connections and bundles are refused from now on
    Remove { node_id: String },
    /// List peers
    List,
    /// Change the policy we give a peer
    Policy { node_id: String, policy: String },
    /// Set a peer's mailbox directory, or a relay to hold it (--relay), or
    /// stop using one (--off)
    Mailbox {
        node_id: String,
        /// The directory (must exist)
        #[arg(required_unless_present_any = ["off", "relay"], conflicts_with_all = ["off", "relay"])]
        dir: Option<std::path::PathBuf>,
        /// Let RELAY_ID, a relay peer of this node and of the peer
        /// (`--relay` links), hold the sealed bundles: each side names it
        /// for the other, and `amos sync` posts and fetches there
        #[arg(long, value_name = "RELAY_ID", conflicts_with = "off")]
        relay: Option<String>,
        /// Stop exchanging bundles through a mailbox with this peer
        #[arg(long)]
        off: bool,
    },
}

#[derive(Subcommand, Debug)]
pub(super) enum MeshCmd {
    /// The mesh key
    #[command(subcommand)]
    Key(MeshKeyCmd),
}

#[derive(Subcommand, Debug)]
pub(super) enum MeshKeyCmd {
    /// Print the mesh key (a secret: anyone holding it can read bundles)
    Show,
    /// Set the mesh key printed by another node of the mesh
    Set { key: String },
    /// Make a new random mesh key and set it
    Generate,
}

#[derive(Subcommand, Debug)]
pub(super) enum SyncCmd {
    /// Sync with one peer (NodeId, prefix or name) or every peer with an address now, then the mailboxes
    Now {
        peer: Option<String>,
        /// Reconcile the whole set of facts each side may send the other
        /// (range-based repair) instead of trusting the watermarks
        #[arg(long)]
        repair: bool,
        #[command(flatten)]
        dial: DialArgs,
    },
    /// Sync once with every peer with an address, then every mailbox; unreachable peers are not fatal
    Auto {
        #[command(flatten)]
        dial: DialArgs,
    },
    /// Retry the deferred facts now (a clock that was ahead, a missing endpoint)
    Retry,
}

/// How long a dial waits for the peer (the commands that dial).
#[derive(clap::Args, Debug, Clone, Default)]
pub(super) struct DialArgs {
    /// Give up on a peer that has not answered the handshake by then (e.g.
    /// 10s, for relays and slow links) [default: 2.5s]
    #[arg(long, value_name = "DUR")]
    connect_timeout: Option<String>,
}

impl DialArgs {
    /// Bound this process's dials by `--connect-timeout`, if given.
    pub(super) fn apply(&self) -> Result<()> {
        let Some(text) = &self.connect_timeout else {
            return Ok(());
        };
        let d = humantime::parse_duration(text)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| {
                bad(format!(
                    "malformed --connect-timeout {text:?}: use a duration, e.g. 10s"
                ))
            })?;
        amos_node::net::set_connect_timeout(d);
        Ok(())
    }
}

/// Run one of this group's commands: the network ones on the home (each
/// opens the node when it needs to), the others on the opened node.
pub(super) fn run(home: &Home, out: &Out, cmd: ReplicationCmd) -> Result<()> {
    match &cmd {
        ReplicationCmd::Sync(SyncCmd::Now { dial, .. } | SyncCmd::Auto { dial })
        | ReplicationCmd::Join { dial, .. } => dial.apply()?,
        _ => {}
    }
    match cmd {
        ReplicationCmd::Sync(cmd) => sync_cmd(home, out, cmd),
        ReplicationCmd::Join {
            code,
            offline,
            agent,
            ..
        } => join_cmd(home, out, &code, offline, agent.as_deref()),
        ReplicationCmd::Discover { timeout } => discover_cmd(home, out, &timeout),
        cmd => on_node(&mut Node::open(home)?, out, cmd),
    }
}

/// The commands that read or change this node's records only.
fn on_node(node: &mut Node, out: &Out, cmd: ReplicationCmd) -> Result<()> {
    match cmd {
        ReplicationCmd::Digest { scopes } => {
            let (digest, facts) = node.digest(&scopes)?;
            out.emit(&json!({"digest": digest, "facts": facts}), || {
                format!("{digest}  ({facts} facts)")
            });
        }
        ReplicationCmd::Peers(p) => match p {
            PeersCmd::Add {
                node_id,
                addr,
                policy,
                mailbox,
                relay,
                via,
            } => {
                if let Some(dir) = &mailbox
                    && !dir.is_dir()
                {
                    return Err(bad(format!("mailbox {}: not a directory", dir.display())));
                }
                node.peer_add_link(&node_id, addr.as_deref(), &policy, relay, via.as_deref())?;
                if let Some(dir) = &mailbox {
                    node.peer_set_mailbox(&node_id, Some(dir))?;
                }
                let mut link = match (relay, &via) {
                    (true, Some(v)) => format!(", relay link, via {v}"),
                    (true, None) => ", relay link".to_owned(),
                    (false, Some(v)) => format!(", via {v}"),
                    (false, None) => String::new(),
                };
                if let Some(d) = &mailbox {
                    link.push_str(&format!(", mailbox {}", d.display()));
                }
                out.emit(
                    &json!({"peer": node_id, "policy": policy, "relay": relay, "via": via, "mailbox": mailbox}),
                    || format!("peer {node_id} ({policy}{link})"),
                );
            }
            PeersCmd::Mailbox {
                node_id,
                relay: Some(relay),
                ..
            } => {
                node.peer_set_mailbox_relay(&node_id, &relay)?;
                out.emit(&json!({"peer": node_id, "mailbox_relay": relay}), || {
                    format!("peer {node_id}: mailbox held by relay {relay}")
                });
            }
            PeersCmd::Mailbox {
                node_id, dir, off, ..
            } => {
                let dir = if off { None } else { dir };
                node.peer_set_mailbox(&node_id, dir.as_deref())?;
                out.emit(&json!({"peer": node_id, "mailbox": dir}), || match &dir {
                    Some(d) => format!("peer {node_id}: mailbox {}", d.display()),
                    None => format!("peer {node_id}: no mailbox"),
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
                            let mut link = String::new();
                            if p.relay {
                                link.push_str("  relay");
                            }
                            if let Some(v) = &p.via {
                                link.push_str(&format!("  via {}", v.get(..12).unwrap_or(v)));
                            }
                            let mut line = format!(
                                "{}  {:<22} {:<24} {}{link}",
                                p.node_id,
                                p.addr.as_deref().unwrap_or("-"),
                                p.policy,
                                p.last_result.as_deref().unwrap_or("never synced")
                            );
                            if let Some(m) = &p.mailbox {
                                line.push_str(&format!("  mailbox {m}"));
                            }
                            line
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
        ReplicationCmd::Mesh(MeshCmd::Key(k)) => {
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
        ReplicationCmd::Sync(_) | ReplicationCmd::Join { .. } | ReplicationCmd::Discover { .. } => {
            unreachable!("run handles the network commands")
        }
    }
    Ok(())
}

/// `amos join CODE [--offline] [--as AGENT]`.
fn join_cmd(home: &Home, out: &Out, code: &str, offline: bool, agent: Option<&str>) -> Result<()> {
    use amos_node::SyncResult;
    use amos_node::net::{AgentLeftOut, JoinAgent};
    // Validates the home (exit 2 if it is not one).
    Node::open(home)?;
    let agent = amos_node::net::join_agent(code, agent, offline)?;
    if let JoinAgent::LeftOut { agent: a, why } = &agent {
        match why {
            AgentLeftOut::Offline => eprintln!(
                "amos: note: --as {a} is not carried by an offline join; the inviter's operator \
                 makes it a member there (`amos agent add {a} --team TEAM`)"
            ),
            AgentLeftOut::NoOrgScope(policy) => eprintln!(
                "amos: note: the invite's policy ({policy}) names no team or project: --as {a} ignored"
            ),
        }
    }
    let r = if offline {
        amos_node::api::join_offline(home, code, agent.named())?
    } else {
        let progress = amos_node::SyncProgress::new(out.feedback());
        amos_node::net::join_blocking(home, code, &agent, progress.observer())?
    };
    out.emit(&r, || {
        let mut s = format!(
            "{}; mesh key: {}",
            r.paired_line(),
            serde_json::to_value(r.mesh_key)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        );
        match &r.first_sync {
            Some(o) if o.result == SyncResult::Ok => s.push_str(&format!(
                "\nfirst sync ok: {} facts in, {} out",
                o.facts_in, o.facts_out
            )),
            Some(o) => s.push_str(&format!(
                "\nfirst sync {}: {} (the next `amos sync` retries)",
                o.result.as_str(),
                o.error.as_deref().unwrap_or("")
            )),
            None => s.push_str("\noffline: exchange bundles with `amos bundle export --for PEER`"),
        }
        if let Some(a) = &r.registered {
            s.push_str(&format!(
                "\nagent {a} registered on this node (agents are local: this is where it acts)"
            ));
        }
        if let Some(a) = &r.agent {
            if r.member_of.is_empty() {
                s.push_str(&format!("\nagent {a}: the inviter added it to nothing"));
            } else {
                s.push_str(&format!(
                    "\nagent {a} is a member of {} on the inviter",
                    r.member_of.join(", ")
                ));
            }
        }
        s
    });
    Ok(())
}

/// `amos sync now|auto`: one pass, one line (or JSON object) per peer.
fn sync_cmd(home: &Home, out: &Out, cmd: SyncCmd) -> Result<()> {
    use amos_node::SyncResult;
    let (only, auto) = match &cmd {
        SyncCmd::Now { peer, .. } => (peer.as_deref(), false),
        SyncCmd::Auto { .. } => (None, true),
        SyncCmd::Retry => return retry_cmd(home, out),
    };
    // Validates the home (exit 2 if it is not one).
    let mut node = Node::open(home)?;
    if let SyncCmd::Now { repair: true, .. } = &cmd {
        // Kept in the peer's row until a repair with it completes.
        node.ask_repair_of(only)?;
    }
    // A peer named that has a mailbox and no address syncs through its
    // mailbox only (docs/design.md §8.2).
    let mailbox_only = match only {
        Some(want) => {
            let peers = node.peer_list()?;
            let named = amos_node::store::peers_named(&peers, want);
            matches!(named.as_slice(), [p] if p.addr.is_none() && p.mailbox.is_some())
        }
        None => false,
    };
    drop(node);
    let outcomes = if mailbox_only {
        Vec::new()
    } else {
        let progress = amos_node::SyncProgress::new(out.feedback());
        let outcomes = amos_node::net::sync_pass_blocking(home, only, progress.observer())?;
        drop(progress);
        outcomes
    };
    // Then the mailboxes, in directories and on relays: what came in live
    // goes out in the posted bundles.
    let mailboxes = amos_node::net::relay::mailbox::mailbox_pass_blocking(home, only)?;
    out.emit(&json!({"peers": outcomes, "mailboxes": mailboxes}), || {
        if outcomes.is_empty() && mailboxes.is_empty() {
            return "no peers with an address or a mailbox to sync with".into();
        }
        outcomes
            .iter()
            .map(amos_node::front::outcome_line)
            .chain(mailboxes.iter().map(amos_node::api::mailbox_line))
            .collect::<Vec<_>>()
            .join("\n")
    });
    let failed_mailboxes = mailboxes
        .iter()
        .filter(|m| m.error.is_some() || !m.left.is_empty())
        .count();
    let failed = outcomes
        .iter()
        .filter(|o| match o.result {
            SyncResult::Ok => false,
            SyncResult::Unreachable => !auto,
            SyncResult::Refused | SyncResult::Failed => true,
        })
        .count();
    if failed > 0 {
        anyhow::bail!(
            "sync failed with {failed} of {} peer{}",
            outcomes.len(),
            if outcomes.len() == 1 { "" } else { "s" }
        );
    }
    if failed_mailboxes > 0 {
        anyhow::bail!(
            "{failed_mailboxes} of {} mailbox{} did not complete (see above)",
            mailboxes.len(),
            if mailboxes.len() == 1 { "" } else { "es" }
        );
    }
    Ok(())
}

/// `amos sync retry`: the deferred facts retried once, on this home, with
/// no network: how many were taken up, applied, and are still deferred.
fn retry_cmd(home: &Home, out: &Out) -> Result<()> {
    let r = Node::open(home)?.retry()?;
    out.emit(&json!(r), || {
        let mut s = format!(
            "retried {} deferred fact{}: {} applied, {} still deferred",
            r.retried,
            if r.retried == 1 { "" } else { "s" },
            r.applied,
            r.still_deferred
        );
        if r.stale + r.refused > 0 {
            s.push_str(&format!(" ({} stale, {} refused)", r.stale, r.refused));
        }
        s
    });
    Ok(())
}

/// `amos discover`: browse mDNS for a while, one line (or object) per node.
fn discover_cmd(home: &Home, out: &Out, timeout: &str) -> Result<()> {
    let timeout = humantime::parse_duration(timeout)
        .map_err(|_| bad(format!("malformed --timeout {timeout:?}: use e.g. 3s")))?;
    let nodes = amos_node::net::discover(home, timeout)?;
    out.emit(&json!({"nodes": nodes}), || {
        if nodes.is_empty() {
            return "no amos nodes seen".into();
        }
        nodes
            .iter()
            .map(|n| {
                let who = match (&n.peer, n.itself) {
                    (Some(p), _) => format!("peer {p}"),
                    (None, true) => "this node".into(),
                    (None, false) => "unknown".into(),
                };
                format!("{}  port {}  {who}", n.addrs.join(","), n.port)
            })
            .collect::<Vec<_>>()
            .join("\n")
    });
    Ok(())
}
