//! `amos mcp`: a Model Context Protocol server on stdio (rmcp), so agents
//! reach their memory as tools. Every tool runs as one agent — the
//! `AMOS_AGENT` the server was started with — through the same node API and
//! gate as the CLI: this module parses arguments, calls [`Node`], and
//! renders results with [`crate::front::view`]; it holds no memory logic of its own.
//!
//! Invariant: a memory the agent cannot see is answered exactly like a
//! missing one, by every tool ("no such memory").
//! Invariant: a bad argument is a tool error (`isError: true`) with a
//! one-line message, and changes nothing; the server keeps serving.
//! Boundary: stdout carries only protocol messages; logs go to stderr.

use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use crate::api::node::Node;
use crate::error::{NodeError, Result};
use crate::front::request::{self, AddRequest, TimeRequest};
use crate::front::view;
use crate::home::Home;
use crate::recall::{DEFAULT_BUDGET, DEFAULT_K, PackOptions, RecallMode, RecallOptions};

/// The MCP server: one node, one agent.
pub struct MemoryServer {
    node: Arc<Mutex<Node>>,
    agent: String,
}

impl MemoryServer {
    /// Open the node for `agent`, which must be a registered agent.
    pub fn open(home: &Home, agent: &str) -> Result<MemoryServer> {
        let mut node = Node::open(home)?;
        node.set_front("mcp");
        let fleet = crate::ops::fleet::apply(&mut node, home)?;
        for change in &fleet.changes {
            tracing::info!("agents.toml: {change}");
        }
        // Fails for an unknown or malformed agent id, with the command that
        // registers it: an MCP client's environment never makes an
        // identity (a typo would otherwise write, unseen, as a new agent
        // no one else reads).
        node.requester(agent).map_err(|e| {
            let why = format!(
                "amos mcp serves a registered agent and makes none: AMOS_AGENT={agent}: {e}"
            );
            match e {
                NodeError::BadInput(_) => NodeError::BadInput(why),
                NodeError::Unknown { kind, name, .. } => NodeError::Unknown {
                    kind,
                    name,
                    message: why,
                },
                e => e,
            }
        })?;
        Ok(MemoryServer {
            node: Arc::new(Mutex::new(node)),
            agent: agent.to_owned(),
        })
    }

    /// Run one tool call to completion (blocking): the one entry point the
    /// protocol handler and the tests use.
    pub fn call(&self, name: &str, args: Map<String, Value>) -> ToolOutcome {
        let mut node = match self.node.lock() {
            Ok(n) => n,
            Err(poisoned) => poisoned.into_inner(),
        };
        let r = node
            .requester(&self.agent)
            .and_then(|who| dispatch(&mut node, &who, name, args));
        match r {
            Ok((text, structured)) => ToolOutcome {
                ok: true,
                text,
                structured: Some(structured),
            },
            Err(e) => ToolOutcome {
                ok: false,
                text: e.to_string(),
                structured: None,
            },
        }
    }
}

/// What one tool call produced.
#[derive(Debug, Clone)]
pub struct ToolOutcome {
    /// Whether the call succeeded (else `text` says why).
    pub ok: bool,
    /// What the agent reads.
    pub text: String,
    /// The same as JSON, for tools that return structured content.
    pub structured: Option<Value>,
}

/// `amos mcp`: serve MCP on stdin/stdout until stdin closes.
pub fn serve_stdio(home: &Home, agent: &str) -> Result<()> {
    let server = MemoryServer::open(home, agent)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(NodeError::io("starting the async runtime"))?;
    rt.block_on(async move {
        // stdin is screened before rmcp reads it (a line that is not JSON
        // gets its error reply here: rmcp drops it silently, and a client
        // waiting for an answer would hang); one writer owns stdout and
        // takes whole lines from both.
        let (to_rmcp, rmcp_in) = tokio::io::duplex(64 * 1024);
        let (rmcp_out, from_rmcp) = tokio::io::duplex(64 * 1024);
        let (lines, queued) = tokio::sync::mpsc::channel(64);
        let writer = tokio::spawn(write_lines(queued, tokio::io::stdout()));
        tokio::spawn(relay_lines(from_rmcp, lines.clone()));
        let screen = tokio::spawn(screen_lines(tokio::io::stdin(), to_rmcp, lines, MAX_LINE));
        let running = server
            .serve((rmcp_in, rmcp_out))
            .await
            .map_err(|e| NodeError::Failed(format!("MCP initialisation failed: {e}")))?;
        let stopped = running.waiting().await;
        // rmcp has closed its end: the relay ends; stop screening so the
        // writer sees the last sender go and ends after the last line.
        screen.abort();
        let _ = writer.await;
        stopped.map_err(|e| NodeError::Failed(format!("MCP server stopped: {e}")))?;
        Ok(())
    })
}

/// The longest line read from the client: rmcp's own bound.
const MAX_LINE: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;

/// A JSON-RPC error that answers no request (`id` null), as one line.
fn error_line(code: i64, message: &str) -> Vec<u8> {
    let mut line =
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}})
            .to_string()
            .into_bytes();
    line.push(b'\n');
    line
}

/// The reply a line from the client gets here instead of going on to rmcp:
/// JSON-RPC's parse error (-32700) for a line that is not JSON. A blank
/// line, or any JSON (rmcp judges its shape), gets none.
fn screen_reply(line: &[u8]) -> Option<Vec<u8>> {
    let body = line.strip_prefix("\u{feff}".as_bytes()).unwrap_or(line);
    if body.trim_ascii().is_empty() {
        return None;
    }
    match serde_json::from_slice::<serde::de::IgnoredAny>(body) {
        Ok(_) => None,
        Err(e) => Some(error_line(-32700, &format!("Parse error: {e}"))),
    }
}

/// Copy the client's lines from `input` to `forward` (rmcp), answering on
/// `replies` each line [`screen_reply`] answers and each line longer than
/// `max_line` (dropped unread: -32600). Never holds more than one line.
async fn screen_lines<R, W>(
    input: R,
    mut forward: W,
    replies: tokio::sync::mpsc::Sender<Vec<u8>>,
    max_line: usize,
) -> std::io::Result<()>
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let mut input = tokio::io::BufReader::new(input);
    let mut line = Vec::new();
    let mut oversized = false;
    loop {
        let buf = input.fill_buf().await?;
        if buf.is_empty() {
            // End of input; an unterminated last line is no message (rmcp
            // drops it too).
            return Ok(());
        }
        let end = buf.iter().position(|b| *b == b'\n');
        let n = end.map_or(buf.len(), |i| i + 1);
        if !oversized && line.len() + n <= max_line {
            line.extend_from_slice(&buf[..n]);
        } else {
            oversized = true;
            line.clear();
        }
        input.consume(n);
        if end.is_none() {
            continue;
        }
        let reply = if oversized {
            Some(error_line(
                -32600,
                &format!("Invalid Request: a line longer than {max_line} bytes, dropped"),
            ))
        } else {
            screen_reply(&line)
        };
        match reply {
            Some(r) => {
                if replies.send(r).await.is_err() {
                    return Ok(());
                }
            }
            None => {
                forward.write_all(&line).await?;
                forward.flush().await?;
            }
        }
        line.clear();
        oversized = false;
    }
}

/// rmcp's output, line by line, onto the writer's queue.
async fn relay_lines<R: tokio::io::AsyncRead + Unpin>(
    from: R,
    lines: tokio::sync::mpsc::Sender<Vec<u8>>,
) -> std::io::Result<()> {
    use tokio::io::AsyncBufReadExt;
    let mut from = tokio::io::BufReader::new(from);
    loop {
        let mut line = Vec::new();
        if from.read_until(b'\n', &mut line).await? == 0 || lines.send(line).await.is_err() {
            return Ok(());
        }
    }
}

/// Write whole lines to `out` until every sender is gone.
async fn write_lines<W: tokio::io::AsyncWrite + Unpin>(
    mut queued: tokio::sync::mpsc::Receiver<Vec<u8>>,
    mut out: W,
) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    while let Some(line) = queued.recv().await {
        out.write_all(&line).await?;
        out.flush().await?;
    }
    Ok(())
}

impl ServerHandler for MemoryServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("amos", env!("CARGO_PKG_VERSION")))
            .with_instructions(format!(
                "Long-term memory shared with your team, as agent {}. Search before \
                 answering from scratch; add what you learn (facts, decisions, procedures, \
                 lessons); share with team:ID or project:ID when others need it.",
                self.agent
            ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResponse, McpError> {
        let name = request.name.to_string();
        if !TOOLS.iter().any(|t| t.name == name) {
            return Err(McpError::invalid_params(
                format!("unknown tool {name:?}"),
                None,
            ));
        }
        let args = request.arguments.unwrap_or_default();
        let outcome = tokio::task::block_in_place(|| self.call(&name, args));
        let mut result = if outcome.ok {
            CallToolResult::success(vec![ContentBlock::text(outcome.text)])
        } else {
            CallToolResult::error(vec![ContentBlock::text(outcome.text)])
        };
        result.structured_content = outcome.structured;
        Ok(result.into())
    }
}

// ---------------------------------------------------------------------------
// The tool catalog

struct ToolSpec {
    name: &'static str,
    description: &'static str,
    schema: fn() -> Value,
}

const ID: &str = "memory id (a UUID, as returned by memory_add or memory_search)";

const TOOLS: &[ToolSpec] = &[
    ToolSpec {
        name: "memory_add",
        description: "Store a new memory owned by you. It is private unless you share it: \
            share=[\"team:ID\"], [\"project:ID\"], [\"agent:ID\"] or [\"global\"]. Keep one \
            fact, decision, procedure or lesson per memory, written so it stands alone. \
            Returns the new id, and `similar`: up to 3 memories you can see that say \
            nearly the same (id, similarity, excerpt) — supersede one instead of adding a \
            contradiction.",
        schema: || {
            obj(
                json!({
                    "content": {"type": "string", "description": "the memory text (at most 64 KiB)"},
                    "type": {"type": "string", "description": "e.g. note, fact, decision, procedure, lesson, preference (default note)"},
                    "share": {"type": "array", "items": {"type": "string"}, "description": "scopes that may see it"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "importance": {"type": "number", "minimum": 0, "maximum": 1, "description": "default 0.5"},
                    "pin": {"type": "boolean", "description": "always recalled first, never decays"},
                    "expires": {"type": "string", "description": "duration (30d, 12h) or RFC 3339 time"},
                    "valid_from": {"type": "string", "description": "when this became true (RFC 3339, date, or offset like -7d; default now)"},
                    "valid_to": {"type": "string", "description": "when this stopped being true"},
                    "supersedes": {"type": "string", "description": "id of the memory this one replaces (it stays, marked superseded)"}
                }),
                &["content"],
            )
        },
    },
    ToolSpec {
        name: "memory_search",
        description: "Find the memories you may see that best match a query, ranked. Use \
            before answering questions about past work, decisions or procedures.",
        schema: || {
            obj(
                json!({
                    "query": {"type": "string"},
                    "k": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "how many (default 10)"},
                    "since": {"type": "string", "description": "only memories whose valid time starts at/after this (RFC 3339, date, or offset like -7d)"},
                    "until": {"type": "string", "description": "only memories whose valid time starts at/before this"},
                    "valid_at": {"type": "string", "description": "what was true then: superseded and ended memories drop out"},
                    "known_at": {"type": "string", "description": "answer with what was on record then"},
                    "mode": {"type": "string", "enum": ["hybrid", "lexical", "semantic", "fast"], "description": "candidates: hybrid (default: words and meaning, by the sentence encoder), lexical (words), semantic (meaning) or fast (words and the static model)"}
                }),
                &["query"],
            )
        },
    },
    ToolSpec {
        name: "memory_get",
        description: "Read one memory by id.",
        schema: || {
            obj(
                json!({"id": {"type": "string", "description": ID}}),
                &["id"],
            )
        },
    },
    ToolSpec {
        name: "memory_context_pack",
        description: "The best memories for a task, fitted into a token budget with \
            near-duplicates left out; report=true explains each include/exclude decision.",
        schema: || {
            obj(
                json!({
                    "query": {"type": "string"},
                    "budget": {"type": "integer", "minimum": 1, "description": "tokens (default 1200)"},
                    "report": {"type": "boolean"},
                    "since": {"type": "string", "description": "only memories whose valid time starts at/after this (RFC 3339, date, or offset like -7d)"},
                    "until": {"type": "string", "description": "only memories whose valid time starts at/before this"},
                    "valid_at": {"type": "string", "description": "what was true then: superseded and ended memories drop out"},
                    "known_at": {"type": "string", "description": "answer with what was on record then"},
                    "mode": {"type": "string", "enum": ["hybrid", "lexical", "semantic", "fast"], "description": "candidates: hybrid (default: words and meaning, by the sentence encoder), lexical (words), semantic (meaning) or fast (words and the static model)"}
                }),
                &["query"],
            )
        },
    },
    ToolSpec {
        name: "memory_update",
        description: "Replace the text of a memory you own, or its valid time (valid_from, \
            valid_to), or both.",
        schema: || {
            obj(
                json!({
                    "id": {"type": "string", "description": ID},
                    "content": {"type": "string"},
                    "valid_from": {"type": "string"},
                    "valid_to": {"type": "string"}
                }),
                &["id"],
            )
        },
    },
    ToolSpec {
        name: "memory_timeline",
        description: "The memories you may see in the order they became true, with what \
            replaced what: for 'what did we decide last week' or 'what changed since'.",
        schema: || {
            obj(
                json!({
                    "since": {"type": "string", "description": "RFC 3339, date, or offset like -7d"},
                    "until": {"type": "string"},
                    "scope": {"type": "string", "description": "only memories shared with this scope (private, team:ID, ...)"},
                    "limit": {"type": "integer", "minimum": 1, "description": "most events (default 100)"}
                }),
                &[],
            )
        },
    },
    ToolSpec {
        name: "memory_share",
        description: "Let a scope see a memory you own: team:ID, project:ID, agent:ID or global.",
        schema: scope_schema,
    },
    ToolSpec {
        name: "memory_unshare",
        description: "Stop a scope from seeing a memory you own; replicas drop it too.",
        schema: scope_schema,
    },
    ToolSpec {
        name: "memory_forget",
        description: "Delete a memory you own, everywhere (a tombstone; it cannot come back).",
        schema: || {
            obj(
                json!({"id": {"type": "string", "description": ID}}),
                &["id"],
            )
        },
    },
    ToolSpec {
        name: "memory_link",
        description: "Associate two memories you can see, so recalling one brings the other.",
        schema: || {
            obj(
                json!({
                    "a": {"type": "string", "description": ID},
                    "b": {"type": "string", "description": ID},
                    "relation": {"type": "string", "description": "e.g. related, supports, contradicts (default related)"},
                    "weight": {"type": "number", "description": "link strength (default 1)"}
                }),
                &["a", "b"],
            )
        },
    },
    ToolSpec {
        name: "memory_feedback",
        description: "Say whether recalled memories helped (helpful=true) or not; this tunes \
            your future recall.",
        schema: || {
            obj(
                json!({
                    "ids": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                    "helpful": {"type": "boolean"}
                }),
                &["ids", "helpful"],
            )
        },
    },
];

fn scope_schema() -> Value {
    obj(
        json!({
            "id": {"type": "string", "description": ID},
            "scope": {"type": "string", "description": "team:ID, project:ID, agent:ID or global"}
        }),
        &["id", "scope"],
    )
}

fn obj(properties: Value, required: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false
    })
}

/// The tool catalog as `tools/list` returns it.
pub fn tools() -> Vec<Tool> {
    TOOLS
        .iter()
        .map(|t| {
            let schema = match (t.schema)() {
                Value::Object(m) => m,
                _ => Map::new(),
            };
            Tool::new(t.name, t.description, Arc::new(schema))
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Dispatch: arguments → the node API → (text, structured)

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    query: String,
    k: Option<usize>,
    since: Option<String>,
    until: Option<String>,
    valid_at: Option<String>,
    known_at: Option<String>,
    mode: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TimelineArgs {
    since: Option<String>,
    until: Option<String>,
    scope: Option<String>,
    limit: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IdArgs {
    id: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PackArgs {
    query: String,
    budget: Option<usize>,
    #[serde(default)]
    report: bool,
    since: Option<String>,
    until: Option<String>,
    valid_at: Option<String>,
    known_at: Option<String>,
    mode: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateArgs {
    id: String,
    content: Option<String>,
    valid_from: Option<String>,
    valid_to: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScopeArgs {
    id: String,
    scope: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkArgs {
    a: String,
    b: String,
    relation: Option<String>,
    weight: Option<f32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FeedbackArgs {
    ids: Vec<String>,
    helpful: bool,
}

/// The time filters of a recall tool.
fn time_of(
    since: Option<String>,
    until: Option<String>,
    valid_at: Option<String>,
    known_at: Option<String>,
    now_ms: u64,
) -> Result<crate::recall::TimeQuery> {
    TimeRequest {
        since,
        until,
        valid_at,
        known_at,
    }
    .query(now_ms, str::to_owned)
}

/// Arguments into a tool's struct; the error names the field at fault.
fn parse<T: DeserializeOwned>(tool: &str, args: Map<String, Value>) -> Result<T> {
    serde_path_to_error::deserialize(Value::Object(args)).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            NodeError::BadInput(format!("{tool}: {inner}"))
        } else {
            NodeError::BadInput(format!("{tool}: {path}: {inner}"))
        }
    })
}

/// The `mode` argument: hybrid when absent.
fn mode_of(mode: Option<&str>) -> Result<RecallMode> {
    match mode {
        None => Ok(RecallMode::default()),
        Some(m) => RecallMode::parse(m).ok_or_else(|| {
            NodeError::BadInput(format!(
                "mode must be hybrid, lexical, semantic or fast, not {m:?}"
            ))
        }),
    }
}

fn dispatch(
    node: &mut Node,
    who: &amos_acl::AuthorizedScopes,
    tool: &str,
    args: Map<String, Value>,
) -> Result<(String, Value)> {
    match tool {
        "memory_add" => {
            let a: AddRequest = parse(tool, args)?;
            let new = a.memory(node.now_ms(), str::to_owned)?;
            let added = node.add_noting_similar(who, new)?;
            let mut text = format!("stored {}", added.id);
            for s in &added.similar {
                text.push_str(&format!(
                    "\nsimilar: {} ({:.2}) \"{}\" (memory_add with supersedes={} replaces it)",
                    s.id, s.similarity, s.excerpt, s.id
                ));
            }
            Ok((
                text,
                json!({"id": added.id.to_string(), "similar": added.similar}),
            ))
        }
        "memory_search" => {
            let a: SearchArgs = parse(tool, args)?;
            let opts = RecallOptions {
                k: a.k.unwrap_or(DEFAULT_K),
                time: time_of(a.since, a.until, a.valid_at, a.known_at, node.now_ms())?,
                mode: mode_of(a.mode.as_deref())?,
                ..RecallOptions::default()
            };
            let hits = node.search_with(who, &a.query, &opts)?;
            let text = if hits.is_empty() {
                "no matching memories".to_owned()
            } else {
                hits.iter()
                    .map(|h| {
                        format!(
                            "{} [{}] (by {}, score {:.3}): {}",
                            h.memory.id, h.memory.kind, h.memory.owner, h.score, h.memory.content
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            Ok((
                text,
                json!({"hits": hits.iter().map(view::hit_json).collect::<Vec<_>>()}),
            ))
        }
        "memory_get" => {
            let a: IdArgs = parse(tool, args)?;
            let m = node.get(who, &a.id)?;
            Ok((
                format!("{} [{}] (by {}): {}", m.id, m.kind, m.owner, m.content),
                view::memory_json(&m),
            ))
        }
        "memory_context_pack" => {
            let a: PackArgs = parse(tool, args)?;
            let mut opts = PackOptions::new(a.budget.unwrap_or(DEFAULT_BUDGET));
            opts.recall.time = time_of(a.since, a.until, a.valid_at, a.known_at, node.now_ms())?;
            opts.recall.mode = mode_of(a.mode.as_deref())?;
            let p = node.pack_with(who, &a.query, &opts)?;
            let mut lines: Vec<String> = p
                .items
                .iter()
                .map(|h| format!("- [{}] {}", h.memory.kind, h.memory.content))
                .collect();
            lines.push(format!("({} of {} tokens)", p.tokens, p.budget));
            Ok((lines.join("\n"), view::pack_json(&p, a.report)))
        }
        "memory_update" => {
            let a: UpdateArgs = parse(tool, args)?;
            let validity = match (&a.valid_from, &a.valid_to) {
                (None, None) => None,
                (from, to) => Some(request::validity(
                    from.as_deref(),
                    to.as_deref(),
                    node.now_ms(),
                    &str::to_owned,
                )?),
            };
            if a.content.is_none() && validity.is_none() {
                return Err(NodeError::BadInput(
                    "memory_update: give content, valid_from or valid_to".into(),
                ));
            }
            let id = node.revise(
                who,
                &a.id,
                a.content.as_deref(),
                validity,
                crate::api::DEFAULT_COMPACT_BYTES,
            )?;
            Ok((format!("updated {id}"), json!({"id": id.to_string()})))
        }
        "memory_timeline" => {
            let a: TimelineArgs = parse(tool, args)?;
            let now = node.now_ms();
            let q = TimeRequest {
                since: a.since,
                until: a.until,
                ..TimeRequest::default()
            }
            .query(now, str::to_owned)?;
            let scope = a
                .scope
                .map(|s| s.parse::<amos_protocol::Scope>().map_err(NodeError::from))
                .transpose()?;
            let events = node.timeline(
                who,
                q.since_ms,
                q.until_ms,
                scope.as_ref(),
                a.limit.unwrap_or(100),
            )?;
            let text = if events.is_empty() {
                "no events".to_owned()
            } else {
                events
                    .iter()
                    .map(view::timeline_line)
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            Ok((text, json!({"events": events})))
        }
        "memory_share" | "memory_unshare" => {
            let a: ScopeArgs = parse(tool, args)?;
            let (id, grants) = node.set_grant(who, &a.id, &a.scope, tool == "memory_share")?;
            Ok((
                format!("{id} visible to {grants}"),
                json!({"id": id.to_string(), "visibility": grants.to_strings()}),
            ))
        }
        "memory_forget" => {
            let a: IdArgs = parse(tool, args)?;
            let id = node.forget(who, &a.id)?;
            Ok((format!("forgot {id}"), json!({"id": id.to_string()})))
        }
        "memory_link" => {
            let a: LinkArgs = parse(tool, args)?;
            node.link(
                who,
                &a.a,
                &a.b,
                a.relation.as_deref(),
                a.weight.unwrap_or(1.0),
            )?;
            Ok((
                format!("linked {} and {}", a.a, a.b),
                json!({"from": a.a, "to": a.b}),
            ))
        }
        "memory_feedback" => {
            let a: FeedbackArgs = parse(tool, args)?;
            let r = node.feedback(who, &a.ids, a.helpful)?;
            Ok((
                format!(
                    "feedback recorded for {} memories, {} links and {} associations among them",
                    r.memories, r.links, r.associations
                ),
                json!({"updated": r.memories, "links": r.links, "associations": r.associations}),
            ))
        }
        other => Err(NodeError::BadInput(format!("unknown tool {other:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Screen `input` with lines of at most `max_line` bytes: (what went on
    /// to rmcp, the replies made here).
    fn screen(input: &str, max_line: usize) -> (String, Vec<Value>) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let (forward, mut forwarded) = tokio::io::duplex(1 << 20);
            let (replies, mut replied) = tokio::sync::mpsc::channel(16);
            screen_lines(input.as_bytes(), forward, replies, max_line)
                .await
                .expect("screened");
            let mut out = Vec::new();
            tokio::io::AsyncReadExt::read_to_end(&mut forwarded, &mut out)
                .await
                .expect("read");
            let mut answers = Vec::new();
            while let Ok(line) = replied.try_recv() {
                assert_eq!(line.last(), Some(&b'\n'), "one line each");
                answers.push(serde_json::from_slice(&line).expect("a JSON reply"));
            }
            (String::from_utf8(out).expect("utf-8"), answers)
        })
    }

    #[test]
    fn a_line_that_is_not_json_gets_a_parse_error_and_the_rest_goes_on() {
        let request = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
        let input = format!("hello there\n{request}\n\n{{\"half\": \n[1, 2]\n");
        let (forwarded, replies) = screen(&input, 1 << 20);
        // The request, the blank line and the well-formed `[1, 2]` (rmcp
        // judges a message's shape) go on; the two broken lines do not.
        assert_eq!(forwarded, format!("{request}\n\n[1, 2]\n"));
        assert_eq!(replies.len(), 2, "{replies:?}");
        for r in &replies {
            assert_eq!(r["jsonrpc"], "2.0");
            assert_eq!(r["id"], Value::Null);
            assert_eq!(r["error"]["code"], -32700, "{r}");
        }
    }

    #[test]
    fn a_line_too_long_is_dropped_with_an_answer_and_the_next_goes_on() {
        let long = format!("{{\"x\": \"{}\"}}", "a".repeat(100));
        let input = format!("{long}\n{{}}\n");
        let (forwarded, replies) = screen(&input, 64);
        assert_eq!(forwarded, "{}\n");
        assert_eq!(replies.len(), 1);
        assert_eq!(replies[0]["error"]["code"], -32600, "{}", replies[0]);
    }
}
