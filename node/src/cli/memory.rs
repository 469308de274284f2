//! Memory commands: add, supersede, timeline, get, update, history, share,
//! unshare, forget, link, feedback, restore-memory, list — their arguments
//! and their printing; the node API does the work.

use amos_node::{Node, NodeError};
use amos_protocol::MemoryType;
use anyhow::Result;
use clap::Subcommand;
use serde_json::json;

use super::output::{self, Out, memory_json};
use super::recall::TimeArgs;
use super::{AsAgent, bad, who};

#[derive(Subcommand, Debug)]
pub(super) enum MemoryCmd {
    /// Store a memory owned by the requesting agent (default: private)
    Add {
        /// The text; `-` reads stdin
        text: String,
        #[command(flatten)]
        who: AsAgent,
        #[arg(long = "type", value_name = "T")]
        kind: Option<String>,
        /// private, global, agent:ID, team:ID or project:ID (repeatable)
        #[arg(long, value_name = "SCOPE")]
        share: Vec<String>,
        #[arg(long, default_value_t = 0.5, allow_negative_numbers = true)]
        importance: f32,
        #[arg(long)]
        tag: Vec<String>,
        #[arg(long)]
        pin: bool,
        /// A duration from now (e.g. 30d) or an RFC 3339 time
        #[arg(long, value_name = "DURATION|RFC3339")]
        expires: Option<String>,
        #[command(flatten)]
        valid: ValidArgs,
        /// The id of a memory this one replaces (it stays, marked superseded)
        #[arg(long, value_name = "ID")]
        supersedes: Option<String>,
    },
    /// Replace a memory with a new one (the old stays, its valid time ends
    /// where the new one's starts). Type and tags are the old one's; so are
    /// its grants when you own it, unless --share says otherwise.
    Supersede {
        /// The memory replaced
        id: String,
        /// The new text; `-` reads stdin
        text: String,
        #[command(flatten)]
        who: AsAgent,
        /// private, global, agent:ID, team:ID or project:ID (repeatable)
        #[arg(long, value_name = "SCOPE")]
        share: Vec<String>,
        #[command(flatten)]
        valid: ValidArgs,
    },
    /// Visible memories and their supersessions in valid-time order
    Timeline {
        #[command(flatten)]
        who: AsAgent,
        /// Events at or after this time (RFC 3339, date, or offset like -7d)
        #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
        since: Option<String>,
        /// Events at or before this time
        #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
        until: Option<String>,
        /// Only memories shared with this scope (private: shared with no one)
        #[arg(long, value_name = "SCOPE")]
        scope: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// One memory, if visible
    Get {
        id: String,
        #[command(flatten)]
        who: AsAgent,
    },
    /// Edit a memory's content (owner only; on its origin or a full peer of it).
    /// Concurrent edits on two nodes are merged, never dropped.
    Update {
        id: String,
        /// The new text (omit to change only the valid time)
        #[arg(required_unless_present_any = ["valid_from", "valid_to"])]
        text: Option<String>,
        #[command(flatten)]
        valid: ValidArgs,
        /// The origin compacts the memory's edit history once it holds more
        /// than this many bytes
        #[arg(long, value_name = "BYTES", env = "AMOS_TEXT_COMPACT_BYTES", default_value_t = amos_node::api::DEFAULT_COMPACT_BYTES)]
        compact_at: u64,
        #[command(flatten)]
        who: AsAgent,
    },
    /// The edits of a memory: author node, clock and size, oldest first
    History {
        id: String,
        #[command(flatten)]
        who: AsAgent,
    },
    /// Add a grant to a memory (owner only)
    Share {
        id: String,
        scope: String,
        #[command(flatten)]
        who: AsAgent,
    },
    /// Remove a grant from a memory (owner only)
    Unshare {
        id: String,
        scope: String,
        #[command(flatten)]
        who: AsAgent,
    },
    /// Tombstone a memory (owner only), or with --agent A --all every memory A owns
    Forget {
        /// The memory (omit with --agent A --all)
        #[arg(required_unless_present = "every_of")]
        id: Option<String>,
        #[command(flatten)]
        who: AsAgent,
        /// Forget every memory this agent owns (needs --all)
        #[arg(
            long = "agent",
            id = "every_of",
            value_name = "AGENT",
            requires = "all",
            conflicts_with = "id"
        )]
        every_of: Option<String>,
        /// With --agent: everything it owns
        #[arg(long, requires = "every_of")]
        all: bool,
        /// Do not ask for confirmation
        #[arg(long)]
        yes: bool,
    },
    /// Associate two memories the agent can see
    Link {
        a: String,
        b: String,
        #[arg(long)]
        relation: Option<String>,
        #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
        weight: f32,
        #[command(flatten)]
        who: AsAgent,
    },
    /// Recall feedback (local-only)
    Feedback {
        #[arg(required = true)]
        ids: Vec<String>,
        #[command(flatten)]
        who: AsAgent,
        #[arg(
            long,
            conflicts_with = "unhelpful",
            required_unless_present = "unhelpful"
        )]
        helpful: bool,
        #[arg(long)]
        unhelpful: bool,
    },
    /// Bring an archived memory back into recall
    RestoreMemory {
        id: String,
        #[command(flatten)]
        who: AsAgent,
    },
    /// Newest first, gated
    List {
        #[command(flatten)]
        who: AsAgent,
        #[arg(long = "type")]
        kind: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: usize,
        #[command(flatten)]
        time: TimeArgs,
    },
}

/// A memory's valid time (`amos add`, `update`, `supersede`).
#[derive(clap::Args, Debug, Clone, Default)]
pub(super) struct ValidArgs {
    /// When the content became true (RFC 3339, date, `now`, or offset like -7d; default: now)
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    valid_from: Option<String>,
    /// When it stopped being true
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    valid_to: Option<String>,
}

/// Run one of this group's commands on an open node.
pub(super) fn run(node: &mut Node, out: &Out, cmd: MemoryCmd) -> Result<()> {
    match cmd {
        MemoryCmd::Add {
            text,
            who: w,
            kind,
            share,
            importance,
            tag,
            pin,
            expires,
            valid,
            supersedes,
        } => {
            let text = text_arg(text)?;
            let who = who(node, &w)?;
            let new = amos_node::front::AddRequest {
                content: text,
                kind,
                share,
                tags: tag,
                importance: Some(importance),
                pin,
                expires,
                valid_from: valid.valid_from,
                valid_to: valid.valid_to,
                supersedes,
            }
            .memory_with(
                node.now_ms(),
                |f| format!("--{f}"),
                |s| node.resolve_scope(s),
            )?;
            let added = node.add_noting_similar(&who, new)?;
            let id = added.id.to_string();
            out.emit(&json!({"id": id, "similar": added.similar}), || id.clone());
            // The hint goes to stderr: stdout stays the bare id for scripts.
            if !out.json
                && !out.quiet
                && let Some(s) = added.similar.first()
            {
                let more = match added.similar.len() {
                    1 => String::new(),
                    n => format!(" (and {} more: amos --json add)", n - 1),
                };
                eprintln!(
                    "similar: {} ({:.2}) \"{}\"{more} — supersede it with amos supersede {} TEXT --as AGENT",
                    s.id, s.similarity, s.excerpt, s.id
                );
            }
        }
        MemoryCmd::Supersede {
            id,
            text,
            who: w,
            share,
            valid,
        } => {
            let text = text_arg(text)?;
            let who = who(node, &w)?;
            let validity = valid.validity(node.now_ms())?;
            let share = match share.is_empty() {
                true => None,
                false => Some(
                    share
                        .iter()
                        .map(|s| node.resolve_scope(s))
                        .collect::<Result<Vec<_>, _>>()?,
                ),
            };
            let new = node.supersede(&who, &id, text, share, validity)?;
            out.emit(&json!({"id": new.to_string(), "supersedes": id}), || {
                new.to_string()
            });
        }
        MemoryCmd::Timeline {
            who: w,
            since,
            until,
            scope,
            limit,
        } => {
            let who = who(node, &w)?;
            let q = TimeArgs {
                since,
                until,
                ..TimeArgs::default()
            }
            .query(node.now_ms())?;
            let scope = scope.map(|s| node.resolve_scope(&s)).transpose()?;
            let events = node.timeline(&who, q.since_ms, q.until_ms, scope.as_ref(), limit)?;
            if events.is_empty() {
                out.nothing(|| {
                    let mut line = format!("no memories visible to {}", w.name());
                    if let Some(s) = &scope {
                        line.push_str(&format!(" shared with {s}"));
                    }
                    line.push_str(" start, end or are superseded");
                    if let Some(ms) = q.since_ms {
                        line.push_str(&format!(" at or after {}", output::rfc3339(ms)));
                    }
                    if let Some(ms) = q.until_ms {
                        let and = if q.since_ms.is_some() { " and" } else { "" };
                        line.push_str(&format!("{and} at or before {}", output::rfc3339(ms)));
                    }
                    line
                });
            }
            out.emit(&json!({"events": events}), || {
                events
                    .iter()
                    .map(amos_node::front::timeline_line)
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        MemoryCmd::Get { id, who: w } => {
            let who = who(node, &w)?;
            let m = node.get(&who, &id)?;
            out.emit(&memory_json(&m), || output::memory_text(&m));
        }
        MemoryCmd::Update {
            id,
            text,
            valid,
            compact_at,
            who: w,
        } => {
            let who = who(node, &w)?;
            let validity = match (&valid.valid_from, &valid.valid_to) {
                (None, None) => None,
                _ => Some(valid.validity(node.now_ms())?),
            };
            let id = node.revise(&who, &id, text.as_deref(), validity, compact_at)?;
            out.emit(&json!({"id": id.to_string()}), || format!("updated {id}"));
        }
        MemoryCmd::History { id, who: w } => {
            let who = who(node, &w)?;
            let (id, lines) = node.history(&who, &id)?;
            out.emit(&json!({"id": id.to_string(), "edits": lines}), || {
                lines
                    .iter()
                    .map(|l| {
                        let size = l
                            .bytes
                            .map_or_else(|| "compacted".to_owned(), |b| format!("{b} B"));
                        format!(
                            "{}  {:<8}  {}  {}",
                            amos_node::clock::rfc3339(l.wall_ms),
                            l.kind,
                            &l.author[..10.min(l.author.len())],
                            size
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        MemoryCmd::Share { id, scope, who: w } => set_grant(node, out, &w, &id, &scope, true)?,
        MemoryCmd::Unshare { id, scope, who: w } => set_grant(node, out, &w, &id, &scope, false)?,
        MemoryCmd::Forget {
            every_of: Some(agent),
            yes,
            ..
        } => super::moves::forget_agent(node, out, &agent, yes)?,
        MemoryCmd::Forget { id, who: w, .. } => {
            let id = id.ok_or_else(|| bad("name the memory to forget, or --agent A --all"))?;
            let who = who(node, &w)?;
            let id = node.forget(&who, &id)?;
            out.emit(&json!({"id": id.to_string()}), || format!("forgot {id}"));
        }
        MemoryCmd::Link {
            a,
            b,
            relation,
            weight,
            who: w,
        } => {
            let who = who(node, &w)?;
            node.link(&who, &a, &b, relation.as_deref(), weight)?;
            out.emit(&json!({"from": a, "to": b}), || format!("linked {a} → {b}"));
        }
        MemoryCmd::Feedback {
            ids,
            who: w,
            helpful,
            ..
        } => {
            let who = who(node, &w)?;
            let r = node.feedback(&who, &ids, helpful)?;
            out.emit(
                &json!({"updated": r.memories, "links": r.links, "associations": r.associations}),
                || {
                    format!(
                        "feedback recorded for {} memories, {} links and {} associations among them",
                        r.memories, r.links, r.associations
                    )
                },
            );
        }
        MemoryCmd::RestoreMemory { id, who: w } => {
            let who = who(node, &w)?;
            let changed = node.set_archived(&who, &id, false)?;
            out.emit(&json!({"id": id, "restored": changed}), || {
                if changed {
                    format!("restored {id}")
                } else {
                    format!("{id} was not archived")
                }
            });
        }
        MemoryCmd::List {
            who: w,
            kind,
            limit,
            time,
        } => {
            let who = who(node, &w)?;
            let kind = kind
                .map(|k| MemoryType::parse(&k))
                .transpose()
                .map_err(NodeError::from)?;
            let q = time.query(node.now_ms())?;
            let timed = node.list_in_time(&who, kind.as_ref(), limit, &q)?;
            if timed.is_empty() {
                // Types are free slugs, and what others hold is not ours to
                // tell: never "unknown type", only what this requester sees.
                out.nothing(|| {
                    let of = kind
                        .as_ref()
                        .map(|k| format!(" of type {k}"))
                        .unwrap_or_default();
                    format!(
                        "no memories{of} visible to {}{}",
                        w.name(),
                        output::time_filters_text(&q)
                    )
                });
            }
            let ms: Vec<_> = timed.iter().map(|(m, _)| m.clone()).collect();
            out.emit(
                &json!({"memories": timed.iter().map(|(m, vt)| amos_node::front::timed_json(m, vt)).collect::<Vec<_>>()}),
                || {
                    ms.iter()
                        .map(|m| {
                            format!(
                                "{}  [{}] {}: {}",
                                m.id(),
                                m.kind(),
                                m.owner(),
                                output::one_line(m.content(), 100)
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("\n")
                },
            );
        }
    }
    Ok(())
}

/// A text argument; `-` reads stdin.
pub(super) fn text_arg(text: String) -> Result<String> {
    if text != "-" {
        return Ok(text);
    }
    let mut s = String::new();
    std::io::Read::read_to_string(&mut std::io::stdin(), &mut s).map_err(|e| {
        if e.kind() == std::io::ErrorKind::InvalidData {
            bad("content on stdin is not valid UTF-8")
        } else {
            anyhow::Error::new(e).context("reading stdin")
        }
    })?;
    Ok(s)
}

impl ValidArgs {
    fn validity(&self, now_ms: u64) -> Result<amos_protocol::Validity> {
        Ok(amos_node::front::validity(
            self.valid_from.as_deref(),
            self.valid_to.as_deref(),
            now_ms,
            &|f: &str| format!("--{f}"),
        )?)
    }
}

fn set_grant(
    node: &mut Node,
    out: &Out,
    w: &AsAgent,
    id: &str,
    scope: &str,
    share: bool,
) -> Result<()> {
    let who = who(node, w)?;
    let (id, grants) = node.set_grant(&who, id, scope, share)?;
    let shown: Vec<String> = if grants.is_private() {
        vec!["private".to_owned()]
    } else {
        grants.iter().map(|g| node.scope_label(g)).collect()
    };
    out.emit(&json!({"id": id.to_string(), "visibility": shown}), || {
        format!("{id} visible to: {}", shown.join(","))
    });
    Ok(())
}
