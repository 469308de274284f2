//! Working-context commands: `amos context offload|reload|list` (a parked
//! working context, docs/design.md §12.4) and `amos changes --since T`
//! (what changed for an agent since T, §12.3) — their arguments and their
//! printing; the node API does the work, as it does for MCP's
//! `memory_offload_context`, `memory_reload_context` and
//! `memory_changes_since`.

use amos_node::Node;
use amos_node::front::{change_line, changes_json, context_json, context_summary_json};
use anyhow::Result;
use clap::Subcommand;
use serde_json::json;

use super::memory::text_arg;
use super::output::{self, Out};
use super::{AsAgent, who};

#[derive(Subcommand, Debug)]
pub(super) enum ContextCmd {
    /// An agent's parked working context: park it, bring it back, list them
    Context {
        #[command(subcommand)]
        cmd: ContextSub,
    },
    /// What changed for an agent since a time: memories it may now see
    /// (added), ones it saw that were edited or superseded, ones it may no
    /// longer see (revoked: id only)
    Changes {
        #[command(flatten)]
        who: AsAgent,
        /// Since when (RFC 3339, date, or offset like -1d)
        #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
        since: String,
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
}

#[derive(Subcommand, Debug)]
pub(super) enum ContextSub {
    /// Park a working context under NAME (private, at most 32 KiB; replaces
    /// the one of that name)
    Offload {
        /// The name (letters, digits, '-', '_', '.')
        name: String,
        /// The context; `-` reads stdin
        text: String,
        #[command(flatten)]
        who: AsAgent,
        /// Lifetime (12h, 7d; at most 90d) or an RFC 3339 time (default 7d)
        #[arg(long, value_name = "DURATION|RFC3339")]
        ttl: Option<String>,
    },
    /// Print a parked context (NAME, or the newest)
    Reload {
        name: Option<String>,
        #[command(flatten)]
        who: AsAgent,
    },
    /// The agent's parked contexts, newest first
    List {
        #[command(flatten)]
        who: AsAgent,
    },
}

/// Run one of this group's commands on an open node.
pub(super) fn run(node: &mut Node, out: &Out, cmd: ContextCmd) -> Result<()> {
    match cmd {
        ContextCmd::Context {
            cmd:
                ContextSub::Offload {
                    name,
                    text,
                    who: w,
                    ttl,
                },
        } => {
            let text = text_arg(text)?;
            let who = who(node, &w)?;
            let expires = ttl
                .as_deref()
                .map(|t| amos_node::api::parse_expiry(t, node.now_ms()))
                .transpose()?;
            let c = node.offload_context(&who, &name, text, expires)?;
            out.emit(&context_json(&c), || {
                format!(
                    "parked {} ({} bytes) until {}",
                    c.name,
                    c.content.len(),
                    output::rfc3339(c.expires_ms)
                )
            });
        }
        ContextCmd::Context {
            cmd: ContextSub::Reload { name, who: w },
        } => {
            let who = who(node, &w)?;
            let c = node.reload_context(&who, name.as_deref())?;
            out.emit(&context_json(&c), || c.content.clone());
        }
        ContextCmd::Context {
            cmd: ContextSub::List { who: w },
        } => {
            let who = who(node, &w)?;
            let list = node.contexts(&who)?;
            if list.is_empty() {
                out.nothing(|| format!("no parked contexts of {}", w.name()));
            }
            let json: Vec<_> = list.iter().map(context_summary_json).collect();
            out.emit(&json!({ "contexts": json }), || {
                list.iter()
                    .map(|c| {
                        format!(
                            "{}  {} bytes  parked {}  expires {}",
                            c.name,
                            c.bytes,
                            output::rfc3339(c.parked_ms),
                            output::rfc3339(c.expires_ms)
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        ContextCmd::Changes {
            who: w,
            since,
            limit,
        } => {
            let who = who(node, &w)?;
            let since = amos_node::api::parse_time(&since, node.now_ms())?;
            let c = node.changes_since(&who, since, limit)?;
            if c.changes.is_empty() {
                out.nothing(|| {
                    format!(
                        "nothing changed for {} since {}",
                        w.name(),
                        output::rfc3339(since)
                    )
                });
            }
            out.emit(&changes_json(&c), || {
                let mut lines: Vec<String> = c.changes.iter().map(change_line).collect();
                if c.truncated {
                    lines.push(format!("(more than {limit}: raise --limit)"));
                }
                lines.join("\n")
            });
        }
    }
    Ok(())
}
