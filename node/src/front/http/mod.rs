//! `amos serve --http ADDR`: agents over HTTP, on one listener — the JSON
//! API under `/v1` ([`routes`], its OpenAPI 3 document [`openapi`], errors
//! as problem details [`problem`]) and MCP over Streamable HTTP at `/mcp`
//! ([`mcp_http`], rmcp's server over [`crate::front::mcp`]'s tools). Every
//! request but the OpenAPI document's runs as the agent its bearer token
//! names ([`guard`]; tokens are `amos agent token create`'s).
//!
//! Must never: decide anything itself — every operation is one call on the
//! node API (`crate::api`) with the token's gate, the call the CLI makes,
//! so a memory the token cannot see is 404 exactly as a missing one, and
//! never counted, ranked or shown; let a request name its agent; listen
//! beyond loopback unless asked in so many words (`--allow-remote`).

mod guard;
mod mcp_http;
mod openapi;
mod problem;
mod routes;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tracing::warn;

use crate::api::node::Node;
use crate::error::{NodeError, Result};
use crate::home::Home;
use problem::Problem;

/// Where the OpenAPI document is served (without a token).
pub(crate) const OPENAPI_PATH: &str = "/v1/openapi.json";

/// The largest request body read (JSON API and MCP alike): a memory's
/// text is at most 64 KiB.
pub const MAX_BODY: usize = 1024 * 1024;

/// How `--http` is run.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// The TCP address to serve on.
    pub listen: SocketAddr,
    /// Allow an address other than loopback (`--allow-remote`).
    pub allow_remote: bool,
}

/// Shared by every request.
pub(crate) struct App {
    /// One node for the API and MCP (a store connection is not `Sync`:
    /// requests take turns, each on its own thread, [`run`]).
    pub node: Arc<Mutex<Node>>,
    /// The bound address.
    pub addr: SocketAddr,
}

/// Refuse a non-loopback address unless `allow_remote`; warn when allowed.
pub fn check_listen(opts: &HttpOptions) -> Result<()> {
    if opts.listen.ip().is_loopback() {
        return Ok(());
    }
    if !opts.allow_remote {
        return Err(NodeError::BadInput(format!(
            "--http {} is not a loopback address: the API would be reachable from the network; \
             pass --allow-remote to mean it",
            opts.listen
        )));
    }
    eprintln!(
        "amos: warning: the HTTP API listens on {}, reachable from the network over plain \
         HTTP: put TLS in front of it; whoever holds an agent's token acts as that agent",
        opts.listen
    );
    Ok(())
}

/// The HTTP API bound and serving on a thread of its own.
pub struct HttpServer {
    /// The bound address.
    pub addr: SocketAddr,
}

/// Bind (checking the address first) and serve on a background thread with
/// its own runtime, for `amos serve --http`. Returns once bound.
pub fn start(home: &Home, opts: HttpOptions) -> Result<HttpServer> {
    check_listen(&opts)?;
    let mut node = Node::open(home)?;
    // Reads over HTTP (JSON API and MCP) are audited as this front end's.
    node.set_front("http");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("amos-http".into())
        .spawn(move || {
            let rt = match crate::net::runtime() {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            rt.block_on(async move {
                let listener = match TcpListener::bind(opts.listen).await {
                    Ok(l) => l,
                    Err(e) => {
                        let _ = tx.send(Err(NodeError::io(format!(
                            "cannot listen on {}",
                            opts.listen
                        ))(e)));
                        return;
                    }
                };
                let addr = match listener.local_addr() {
                    Ok(a) => a,
                    Err(e) => {
                        let _ = tx.send(Err(NodeError::io("reading the HTTP address")(e)));
                        return;
                    }
                };
                let app = Arc::new(App {
                    node: Arc::new(Mutex::new(node)),
                    addr,
                });
                let _ = tx.send(Ok(addr));
                if let Err(e) = axum::serve(listener, router(app)).await {
                    warn!("the HTTP API stopped: {e}");
                }
            });
        })
        .map_err(NodeError::io("starting the HTTP thread"))?;
    let addr = rx
        .recv()
        .map_err(|_| NodeError::Failed("the HTTP thread ended before binding".into()))??;
    Ok(HttpServer { addr })
}

pub(crate) fn router(app: Arc<App>) -> Router {
    Router::new()
        .route(OPENAPI_PATH, get(openapi::serve))
        .route("/v1/status", get(routes::status))
        .route("/v1/memories", post(routes::add).get(routes::list))
        .route(
            "/v1/memories/{id}",
            get(routes::get)
                .patch(routes::update)
                .delete(routes::forget),
        )
        .route("/v1/memories/{id}/share", post(routes::share))
        .route("/v1/memories/{id}/unshare", post(routes::unshare))
        .route("/v1/memories/{id}/links", get(routes::links))
        .route("/v1/links", post(routes::link))
        .route("/v1/feedback", post(routes::feedback))
        .route("/v1/search", get(routes::search))
        .route("/v1/pack", post(routes::pack))
        .route("/v1/timeline", get(routes::timeline))
        .route("/v1/contexts", get(routes::contexts))
        .route(
            "/v1/contexts/{name}",
            get(routes::reload_context).put(routes::offload_context),
        )
        .route("/v1/changes", get(routes::changes))
        .route("/v1/consolidation", get(routes::consolidation))
        .route_service("/mcp", mcp_http::service(app.node.clone()))
        .fallback(routes::not_found)
        .method_not_allowed_fallback(routes::method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            guard::guard,
        ))
        .with_state(app)
}

/// Run `f` on the node (requests take turns), on the request's own thread:
/// `block_in_place` hands this worker's other tasks to another thread
/// meanwhile, as MCP's tools do, and the answer needs no hop back from a
/// blocking thread.
pub(crate) async fn run<T, F>(app: &Arc<App>, f: F) -> std::result::Result<T, Problem>
where
    F: FnOnce(&mut Node) -> Result<T>,
{
    tokio::task::block_in_place(|| {
        let mut node = app.node.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut node)
    })
    .map_err(Problem::from)
}
