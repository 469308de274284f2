//! MCP over Streamable HTTP at `/mcp`: rmcp's streamable HTTP server (a
//! tower service axum mounts) over [`MemoryServer`]'s tools, on the node
//! the JSON API shares. Each request runs as the agent its bearer token
//! names: the guard put a [`crate::front::mcp::RequestAgent`] in its
//! extensions, and rmcp hands the request's parts to the tool call.
//!
//! Must never: check Host or Origin itself (the guard does, for every
//! route: one rule) or take a body past [`MAX_BODY`] (rmcp answers 413).

use std::sync::{Arc, Mutex};

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use super::MAX_BODY;
use crate::api::node::Node;
use crate::front::mcp::MemoryServer;

/// The `/mcp` service: one [`MemoryServer`] per MCP session, every one
/// over `node`.
pub(crate) fn service(
    node: Arc<Mutex<Node>>,
) -> StreamableHttpService<MemoryServer, LocalSessionManager> {
    let config = StreamableHttpServerConfig::default()
        // The guard checks Host (on loopback) and Origin for every route.
        .disable_allowed_hosts()
        .disable_allowed_origins()
        .with_max_request_body_bytes(MAX_BODY);
    StreamableHttpService::new(
        move || Ok(MemoryServer::per_request(node.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}
