//! `amos mcp`: a Model Context Protocol server on stdio (rmcp), so agents
//! reach their memory as tools. Every tool runs as one agent — the
//! `AMOS_AGENT` the server was started with, or over HTTP (`amos serve
//! --http`, `crate::front::http`) the [`RequestAgent`] each request's
//! bearer token names — through the same node API and gate as the CLI: this module parses arguments, calls [`Node`], and
//! renders results with [`crate::front::view`]; it holds no memory logic of its own.
//! Each tool carries its annotations (what it does to the store) and an
//! output schema its `structuredContent` fits; the memories the agent may
//! see are resources, `amos://memory/{id}`, read through the same gate.
//!
//! Invariant: a memory the agent cannot see is answered exactly like a
//! missing one, by every tool and `resources/read` ("no such memory"), and
//! is never listed.
//! Invariant: a bad argument is a tool error (`isError: true`) with a
//! one-line message, and changes nothing; the server keeps serving.
//! Boundary: stdout carries only protocol messages; logs go to stderr.

use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ResourceTemplate, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
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

/// The MCP server: one node, one agent (or one per request, over HTTP).
pub struct MemoryServer {
    node: Arc<Mutex<Node>>,
    agent: String,
    /// Each request runs as its own [`RequestAgent`] (`agent` unused).
    per_request: bool,
}

/// The agent an HTTP request was authenticated as (its bearer token's),
/// put in the request's extensions by the HTTP front end; rmcp's
/// streamable HTTP server hands each handler the request's parts.
#[derive(Debug, Clone)]
pub struct RequestAgent(pub String);

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
            per_request: false,
        })
    }

    /// A server over a shared node whose every request runs as the
    /// [`RequestAgent`] its HTTP request carries; a request without one is
    /// refused.
    pub fn per_request(node: Arc<Mutex<Node>>) -> MemoryServer {
        MemoryServer {
            node,
            agent: String::new(),
            per_request: true,
        }
    }

    /// The agent a request runs as: the server's, or the request's own.
    fn agent_of(&self, context: &RequestContext<RoleServer>) -> Result<String, McpError> {
        if !self.per_request {
            return Ok(self.agent.clone());
        }
        context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<RequestAgent>())
            .map(|a| a.0.clone())
            .ok_or_else(|| McpError::invalid_request("no authenticated agent", None))
    }

    /// Run one tool call to completion (blocking): the one entry point the
    /// protocol handler and the tests use.
    pub fn call(&self, name: &str, args: Map<String, Value>) -> ToolOutcome {
        self.call_as(&self.agent, name, args)
    }

    /// [`MemoryServer::call`] as `agent`.
    pub fn call_as(&self, agent: &str, name: &str, args: Map<String, Value>) -> ToolOutcome {
        let mut node = self.locked();
        let r = node
            .requester(agent)
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

/// The URI of a memory as a resource: `amos://memory/{id}`.
pub const MEMORY_URI: &str = "amos://memory/";

/// Memories per page of `resources/list`.
const RESOURCES_PAGE: usize = 100;

impl MemoryServer {
    fn locked(&self) -> std::sync::MutexGuard<'_, Node> {
        match self.node.lock() {
            Ok(n) => n,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// `resources/read`: the memory object (JSON) of `amos://memory/{id}`,
    /// if the agent may see it. A memory it cannot see is `NoSuchMemory`,
    /// exactly as a missing one.
    pub fn read_memory(&self, uri: &str) -> Result<String> {
        self.read_memory_as(&self.agent, uri)
    }

    /// [`MemoryServer::read_memory`] as `agent`.
    pub fn read_memory_as(&self, agent: &str, uri: &str) -> Result<String> {
        let Some(id) = uri.strip_prefix(MEMORY_URI) else {
            return Err(NodeError::BadInput(format!(
                "unknown resource {uri:?}: amos serves {MEMORY_URI}{{id}}"
            )));
        };
        let node = self.locked();
        let who = node.requester(agent)?;
        let m = node.get(&who, id)?;
        Ok(view::memory_json(&m).to_string())
    }

    /// `resources/list`: one page of the memories the agent may see,
    /// newest first, from `offset`: (uri, title) each, and whether more
    /// follow.
    pub fn list_memories(&self, offset: usize) -> Result<(Vec<(String, String)>, bool)> {
        self.list_memories_as(&self.agent, offset)
    }

    /// [`MemoryServer::list_memories`] as `agent`.
    pub fn list_memories_as(
        &self,
        agent: &str,
        offset: usize,
    ) -> Result<(Vec<(String, String)>, bool)> {
        let node = self.locked();
        let who = node.requester(agent)?;
        let want = offset.saturating_add(RESOURCES_PAGE).saturating_add(1);
        let all = node.list(&who, None, want)?;
        let more = all.len() == want;
        Ok((
            all.iter()
                .skip(offset)
                .take(RESOURCES_PAGE)
                .map(|m| {
                    (
                        format!("{MEMORY_URI}{}", m.id),
                        format!("[{}] {}", m.kind, view::one_line(&m.content, 60)),
                    )
                })
                .collect(),
            more,
        ))
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
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("amos", env!("CARGO_PKG_VERSION")))
        .with_instructions(format!(
            "Long-term memory shared with your team, as {}. Search before \
                 answering from scratch; add what you learn (facts, decisions, procedures, \
                 lessons); share with team:ID or project:ID when others need it.",
            match self.per_request {
                true => "the agent your token names".to_owned(),
                false => format!("agent {}", self.agent),
            }
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<ListResourcesResult, McpError> {
        let agent = self.agent_of(&context)?;
        let offset = match request.and_then(|r| r.cursor) {
            None => 0,
            Some(c) => c
                .parse::<usize>()
                .map_err(|_| McpError::invalid_params(format!("bad cursor {c:?}"), None))?,
        };
        let (page, more) = tokio::task::block_in_place(|| self.list_memories_as(&agent, offset))
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        let n = page.len();
        let mut result = ListResourcesResult::with_all_items(
            page.into_iter()
                .map(|(uri, title)| {
                    let name = uri.trim_start_matches(MEMORY_URI).to_owned();
                    Resource::new(uri, name)
                        .with_title(title)
                        .with_mime_type("application/json")
                })
                .collect(),
        );
        if more {
            result.next_cursor = Some((offset + n).to_string());
        }
        Ok(result)
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<ListResourceTemplatesResult, McpError> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new(format!("{MEMORY_URI}{{id}}"), "memory")
                .with_title("A memory you may see")
                .with_description(
                    "One memory by id, as memory_get returns it (JSON). A memory you may \
                     not see reads as missing.",
                )
                .with_mime_type("application/json"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<ReadResourceResponse, McpError> {
        let agent = self.agent_of(&context)?;
        let uri = request.uri;
        match tokio::task::block_in_place(|| self.read_memory_as(&agent, &uri)) {
            Ok(text) => Ok(ReadResourceResult::new(vec![
                ResourceContents::text(text, uri).with_mime_type("application/json"),
            ])
            .into()),
            Err(e @ (NodeError::NoSuchMemory(_) | NodeError::BadInput(_))) => {
                Err(McpError::resource_not_found(e.to_string(), None))
            }
            Err(e) => Err(McpError::internal_error(e.to_string(), None)),
        }
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResponse, McpError> {
        let agent = self.agent_of(&context)?;
        let name = request.name.to_string();
        if !TOOLS.iter().any(|t| t.name == name) {
            return Err(McpError::invalid_params(
                format!("unknown tool {name:?}"),
                None,
            ));
        }
        let args = request.arguments.unwrap_or_default();
        let outcome = tokio::task::block_in_place(|| self.call_as(&agent, &name, args));
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
    /// The input schema.
    schema: fn() -> Value,
    /// What the tool does to the store (its `annotations`).
    hints: Hints,
    /// The shape of its `structuredContent` (its `outputSchema`).
    output: fn() -> Value,
}

/// A tool's behaviour hints (MCP `ToolAnnotations`). Every amos tool acts
/// on this node's memory alone: `openWorldHint` is false for all.
#[derive(Clone, Copy)]
struct Hints {
    read_only: bool,
    destructive: bool,
    idempotent: bool,
}

/// Reads: change nothing an agent sees (recall's local-only counters aside,
/// docs/design.md §4.7); the same call again answers the same.
const READ: Hints = Hints {
    read_only: true,
    destructive: false,
    idempotent: true,
};
/// Writes that only add (a new memory, a feedback step).
const WRITE: Hints = Hints {
    read_only: false,
    destructive: false,
    idempotent: false,
};
/// Writes that only add, and leave the same state when repeated.
const WRITE_IDEMPOTENT: Hints = Hints {
    read_only: false,
    destructive: false,
    idempotent: true,
};
/// Writes that take something away (a grant, a memory), the same when
/// repeated.
const DESTRUCTIVE_IDEMPOTENT: Hints = Hints {
    read_only: false,
    destructive: true,
    idempotent: true,
};
/// Writes that take something away and add anew each time (parking a
/// context forgets the one it replaces).
const DESTRUCTIVE: Hints = Hints {
    read_only: false,
    destructive: true,
    idempotent: false,
};

impl Hints {
    fn annotations(self) -> ToolAnnotations {
        ToolAnnotations::new()
            .read_only(self.read_only)
            .destructive(self.destructive)
            .idempotent(self.idempotent)
            .open_world(false)
    }
}

const ID: &str = "memory id (a UUID, as returned by memory_add or memory_search)";

const TOOLS: &[ToolSpec] = &[
    ToolSpec {
        name: "memory_add",
        hints: WRITE,
        output: add_out,
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
        hints: READ,
        output: search_out,
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
        hints: READ,
        output: memory_schema,
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
        hints: READ,
        output: pack_out,
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
        hints: WRITE_IDEMPOTENT,
        output: id_out,
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
        hints: READ,
        output: timeline_out,
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
        hints: WRITE_IDEMPOTENT,
        output: grants_out,
        description: "Let a scope see a memory you own: team:ID, project:ID, agent:ID or global.",
        schema: scope_schema,
    },
    ToolSpec {
        name: "memory_unshare",
        hints: DESTRUCTIVE_IDEMPOTENT,
        output: grants_out,
        description: "Stop a scope from seeing a memory you own; replicas drop it too.",
        schema: scope_schema,
    },
    ToolSpec {
        name: "memory_forget",
        hints: DESTRUCTIVE_IDEMPOTENT,
        output: id_out,
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
        hints: WRITE_IDEMPOTENT,
        output: link_out,
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
        hints: WRITE,
        output: feedback_out,
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
    ToolSpec {
        name: "memory_offload_context",
        hints: DESTRUCTIVE,
        output: context_out,
        description: "Park your working context (what you are doing, what is left, what             you know) under a name, so your next session picks up where this one stopped             (memory_reload_context). Private to you; at most 32 KiB; expires (ttl, default             7d, at most 90d). Parking again under the same name replaces it.",
        schema: || {
            obj(
                json!({
                    "name": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,56}$", "description": "e.g. the task's name"},
                    "content": {"type": "string", "description": "the context (at most 32 KiB)"},
                    "ttl": {"type": "string", "description": "lifetime (12h, 7d; at most 90d) or RFC 3339 time (default 7d)"}
                }),
                &["name", "content"],
            )
        },
    },
    ToolSpec {
        name: "memory_reload_context",
        hints: READ,
        output: reload_out,
        description: "Bring back a working context you parked with memory_offload_context:             by name, or your newest when no name is given. Also lists the names you have parked.",
        schema: || {
            obj(
                json!({
                    "name": {"type": "string", "description": "the name it was parked under (default: your newest)"}
                }),
                &[],
            )
        },
    },
    ToolSpec {
        name: "memory_changes_since",
        hints: READ,
        output: changes_out,
        description: "What changed for you since a time: memories you may now see that you             could not then (added), ones you could see that were edited or superseded, and             ones you no longer may see (revoked: id only). For catching up at the start of a             session.",
        schema: || {
            obj(
                json!({
                    "since": {"type": "string", "description": "RFC 3339, date, or offset like -1d"},
                    "limit": {"type": "integer", "minimum": 1, "description": "most changes (default 100)"}
                }),
                &["since"],
            )
        },
    },
    ToolSpec {
        name: "memory_consolidate",
        hints: READ,
        output: consolidate_out,
        description: "Dry run: which of the memories you may see are duplicates or near-            duplicates of another (same owner, type and sharing) and would be merged into it.             Changes nothing; the node's operator applies it (amos consolidate --apply).",
        schema: || obj(json!({}), &[]),
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

fn as_object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// The tool catalog as `tools/list` returns it: each tool with its input
/// and output schemas and its annotations.
pub fn tools() -> Vec<Tool> {
    TOOLS
        .iter()
        .map(|t| {
            Tool::new(t.name, t.description, Arc::new(as_object((t.schema)())))
                .with_raw_output_schema(Arc::new(as_object((t.output)())))
                .with_annotations(t.hints.annotations())
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Output schemas: the shapes of `structuredContent` (front/view.rs renders
// them; docs/cli.md names the same fields)

/// A closed object: exactly these properties, `required` among them.
fn out(properties: Value, required: &[&str]) -> Value {
    obj(properties, required)
}

fn string() -> Value {
    json!({"type": "string"})
}

fn nullable_string() -> Value {
    json!({"type": ["string", "null"]})
}

fn strings() -> Value {
    json!({"type": "array", "items": {"type": "string"}})
}

/// The memory object (`view::memory_json`).
fn memory_properties() -> Map<String, Value> {
    as_object(json!({
        "id": string(),
        "content": string(),
        "owner": string(),
        "type": string(),
        "visibility": strings(),
        "tags": strings(),
        "importance": {"type": "number"},
        "confidence": {"type": "number"},
        "pinned": {"type": "boolean"},
        "created": string(),
        "updated": string(),
        "expires": nullable_string(),
        "origin": string(),
        "archived": {"type": "boolean"},
        "valid_from": string(),
        "valid_to": nullable_string(),
        "supersedes": nullable_string()
    }))
}

fn memory_schema() -> Value {
    let props = memory_properties();
    let required: Vec<&str> = props.keys().map(String::as_str).collect();
    out(Value::Object(props.clone()), &required)
}

/// A hit (`view::hit_json`): the memory and its score.
fn hit_schema(extra: &[(&str, Value)]) -> Value {
    let mut props = memory_properties();
    props.insert("score".into(), json!({"type": "number"}));
    props.insert("relevance".into(), json!({"type": "number"}));
    props.insert("explain".into(), json!({"type": "object"}));
    for (k, v) in extra {
        props.insert((*k).into(), v.clone());
    }
    let required: Vec<&str> = props.keys().map(String::as_str).collect();
    out(Value::Object(props.clone()), &required)
}

fn add_out() -> Value {
    out(
        json!({
            "id": string(),
            "similar": {"type": "array", "items": out(json!({
                "id": string(),
                "similarity": {"type": "number"},
                "excerpt": string()
            }), &["id", "similarity", "excerpt"])}
        }),
        &["id", "similar"],
    )
}

fn search_out() -> Value {
    out(
        json!({"hits": {"type": "array", "items": hit_schema(&[])}}),
        &["hits"],
    )
}

fn pack_out() -> Value {
    out(
        json!({
            "items": {"type": "array", "items": hit_schema(&[("conflict_with", strings())])},
            "tokens": {"type": "integer", "minimum": 0},
            "budget": {"type": "integer", "minimum": 0},
            "reserved": {"type": "integer", "minimum": 0},
            "conflicts": {"type": "array", "items": {"type": "object"}},
            "report": {"type": "array", "items": {"type": "object"}}
        }),
        &["items", "tokens", "budget", "reserved", "conflicts"],
    )
}

fn id_out() -> Value {
    out(json!({"id": string()}), &["id"])
}

fn grants_out() -> Value {
    out(
        json!({"id": string(), "visibility": strings()}),
        &["id", "visibility"],
    )
}

fn link_out() -> Value {
    out(json!({"from": string(), "to": string()}), &["from", "to"])
}

fn feedback_out() -> Value {
    let n = json!({"type": "integer", "minimum": 0});
    out(
        json!({"updated": n, "links": n, "associations": n}),
        &["updated", "links", "associations"],
    )
}

fn timeline_out() -> Value {
    out(
        json!({"events": {"type": "array", "items": out(json!({
            "at_ms": {"type": "integer", "minimum": 0},
            "event": {"type": "string", "enum": ["starts", "superseded", "ends"]},
            "memory": string(),
            "owner": string(),
            "text": string(),
            "by": string()
        }), &["at_ms", "event", "memory", "owner", "text"])}}),
        &["events"],
    )
}

/// A parked context's summary (`view::context_summary_json`).
fn context_summary_schema() -> Value {
    out(
        json!({
            "name": string(),
            "id": string(),
            "parked": string(),
            "expires": string(),
            "bytes": {"type": "integer", "minimum": 0}
        }),
        &["name", "id", "parked", "expires", "bytes"],
    )
}

fn context_out() -> Value {
    out(
        json!({
            "id": string(),
            "name": string(),
            "content": string(),
            "parked": string(),
            "expires": string(),
            "bytes": {"type": "integer", "minimum": 0}
        }),
        &["id", "name", "content", "parked", "expires", "bytes"],
    )
}

fn reload_out() -> Value {
    let mut v = context_out();
    v["properties"]["contexts"] = json!({"type": "array", "items": context_summary_schema()});
    v["required"] = json!([
        "id", "name", "content", "parked", "expires", "bytes", "contexts"
    ]);
    v
}

fn changes_out() -> Value {
    out(
        json!({
            "since": string(),
            "until": string(),
            "truncated": {"type": "boolean"},
            "changes": {"type": "array", "items": out(json!({
                "kind": {"type": "string", "enum": ["added", "edited", "superseded", "revoked"]},
                "at": string(),
                "id": string(),
                "memory": memory_schema(),
                "by": string()
            }), &["kind", "at", "id"])}
        }),
        &["since", "until", "truncated", "changes"],
    )
}

fn consolidate_out() -> Value {
    out(
        json!({
            "applied": {"type": "boolean", "const": false},
            "actions": {"type": "array", "items": out(json!({
                "id": string(),
                "action": string(),
                "reason": string(),
                "into": string()
            }), &["id", "action", "reason"])}
        }),
        &["applied", "actions"],
    )
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OffloadArgs {
    name: String,
    content: String,
    ttl: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReloadArgs {
    name: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChangesArgs {
    since: String,
    limit: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

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
        "memory_offload_context" => {
            let a: OffloadArgs = parse(tool, args)?;
            let now = node.now_ms();
            let expires = a
                .ttl
                .as_deref()
                .map(|t| crate::clock::parse_expiry(t, now))
                .transpose()?;
            let c = node.offload_context(who, &a.name, a.content, expires)?;
            Ok((
                format!(
                    "parked context {} ({} bytes) as {}, until {}",
                    c.name,
                    c.content.len(),
                    c.id,
                    view::rfc3339(c.expires_ms)
                ),
                view::context_json(&c),
            ))
        }
        "memory_reload_context" => {
            let a: ReloadArgs = parse(tool, args)?;
            let c = node.reload_context(who, a.name.as_deref())?;
            let mut v = view::context_json(&c);
            v["contexts"] = json!(
                node.contexts(who)?
                    .iter()
                    .map(view::context_summary_json)
                    .collect::<Vec<_>>()
            );
            Ok((
                format!(
                    "context {} (parked {}):\n{}",
                    c.name,
                    view::rfc3339(c.parked_ms),
                    c.content
                ),
                v,
            ))
        }
        "memory_changes_since" => {
            let a: ChangesArgs = parse(tool, args)?;
            let since = crate::clock::parse_time(&a.since, node.now_ms())?;
            let c = node.changes_since(who, since, a.limit.unwrap_or(100))?;
            let mut lines: Vec<String> = c.changes.iter().map(view::change_line).collect();
            if lines.is_empty() {
                lines.push(format!("no changes since {}", view::rfc3339(c.since_ms)));
            }
            if c.truncated {
                lines.push("(more: ask again with a later since, or a higher limit)".into());
            }
            Ok((lines.join("\n"), view::changes_json(&c)))
        }
        "memory_consolidate" => {
            let _: NoArgs = parse(tool, args)?;
            let r = node.consolidation_preview(who)?;
            let text = if r.actions.is_empty() {
                "nothing to consolidate".to_owned()
            } else {
                r.actions
                    .iter()
                    .map(|a| format!("{} {}: {}", a.action, a.id, a.reason))
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            Ok((text, json!(r)))
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
