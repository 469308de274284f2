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

mod catalog;
mod dispatch;

use catalog::TOOLS;
pub use catalog::tools;
use dispatch::dispatch;

use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ResourceTemplate, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Map, Value, json};

use crate::api::node::Node;
use crate::error::{NodeError, Result};
use crate::front::view;
use crate::home::Home;

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
