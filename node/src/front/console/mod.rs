//! The web console (`amos console`, `amos serve --console ADDR`): the node,
//! its peers, its memories, its org graph and its audit log as
//! server-rendered pages (askama templates compiled into the binary, a
//! little plain JavaScript in `assets/`, nothing fetched from elsewhere).
//!
//! Stable addresses: `/` the dashboard (`?as=AGENT`; its figures as JSON
//! at `/api/dashboard?as=AGENT`), `/node`, `/peers`,
//! `/memories?as=AGENT&q=QUERY`, `/memories/ID?as=AGENT` (with why the node
//! believes it, and its actions), `/pack?as=AGENT&q=QUERY&budget=N`,
//! `/timeline?as=AGENT[&valid_at=T]`, `/graph?as=AGENT&around=ID[&depth=N]`,
//! `/org`, `/audit`; `/events` streams
//! peer status (server-sent events). Pages speak English or Japanese
//! ([`i18n`]: `?lang=`, a cookie, `Accept-Language`). Every request needs a session: the access token
//! ([`token`]), given as `?token=` in the printed URL, opens one
//! ([`sessions`]: a per-visit secret, in memory, for 12 hours) and is
//! answered by a redirect to the address without it that sets the
//! session's cookie; every state-changing request also needs the CSRF
//! token and is refused when it comes from another site ([`guard`]).
//!
//! Must never: decide anything itself — every operation is one call on the
//! node API (`crate::api`, `crate::net` for sync and join), with the same
//! gate as the CLI, so a memory the chosen agent cannot see reads as
//! missing; put unescaped text in a page (askama escapes every `{{ }}`;
//! the only `|safe` is the QR code's SVG, which is drawn from bytes, not
//! text); listen beyond loopback unless asked in so many words.

mod audit;
mod cookie;
mod dashboard;
mod graph;
pub(crate) mod guard;
mod i18n;
pub(crate) mod live;
mod memories;
mod memory;
mod memory_actions;
mod node_page;
mod org;
mod pack;
mod page;
mod peers;
mod qr;
mod sessions;
mod timeline;
pub(crate) mod token;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::Router;
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tracing::{info, warn};

use crate::api::node::Node;
use crate::error::{NodeError, Result};
use crate::home::Home;

pub use token::ensure as ensure_token;

/// Where `amos console` listens by default.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7474";

/// How the console is run.
#[derive(Debug, Clone)]
pub struct ConsoleOptions {
    /// The address to serve the console on.
    pub listen: SocketAddr,
    /// Allow an address other than loopback (`--allow-remote`).
    pub allow_remote: bool,
    /// Set when the console runs inside `amos serve`: its addresses.
    pub serving: Option<Serving>,
}

/// The addresses of the `amos serve` a console runs in.
#[derive(Debug, Clone)]
pub struct Serving {
    /// The QUIC listener's address.
    pub listen: SocketAddr,
    /// Where `/metrics` is served, if it is.
    pub metrics: Option<SocketAddr>,
}

/// Shared by every request.
pub(crate) struct App {
    pub home: Home,
    /// One node for the console's reads and writes (a store connection is
    /// not `Sync`: requests take turns, on blocking threads).
    pub node: Mutex<Node>,
    pub token: String,
    pub csrf: String,
    /// The session cookie's name (the port: two consoles on one host keep
    /// theirs apart).
    pub cookie: String,
    pub sessions: sessions::Sessions,
    pub started: Instant,
    pub addr: SocketAddr,
    pub serving: Option<Serving>,
    pub live: Arc<live::Live>,
    /// Set once the console is stopping: open event streams end then (a
    /// graceful shutdown waits for every connection).
    pub stopping: tokio::sync::watch::Sender<bool>,
}

/// The console's URL with the access token (what `--print-url` prints).
pub fn url(addr: SocketAddr, token: &str) -> String {
    format!("http://{addr}/?token={token}")
}

/// Refuse a non-loopback address unless `allow_remote`; warn when allowed.
pub fn check_listen(opts: &ConsoleOptions) -> Result<()> {
    if opts.listen.ip().is_loopback() {
        return Ok(());
    }
    if !opts.allow_remote {
        return Err(NodeError::BadInput(format!(
            "--console/--listen {} is not a loopback address: the console would be reachable \
             from the network; pass --allow-remote to mean it",
            opts.listen
        )));
    }
    eprintln!(
        "amos: warning: the console listens on {}, reachable from the network over plain \
         HTTP; whoever holds the token controls this node",
        opts.listen
    );
    Ok(())
}

/// A console bound and serving on a thread of its own.
pub struct Console {
    /// The bound address.
    pub addr: SocketAddr,
    /// The URL to open: the address and the access token.
    pub url: String,
}

/// Bind (checking the address first) and serve on a background thread with
/// its own runtime, for `amos serve --console`. Returns once bound.
pub fn start(home: &Home, opts: ConsoleOptions) -> Result<Console> {
    check_listen(&opts)?;
    let (tx, rx) = std::sync::mpsc::channel();
    let home = home.clone();
    std::thread::Builder::new()
        .name("amos-console".into())
        .spawn(move || {
            let rt = match crate::net::runtime() {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            rt.block_on(async move {
                match bind(&home, &opts).await {
                    Ok((listener, app)) => {
                        let _ = tx.send(Ok((app.addr, url(app.addr, &app.token))));
                        if let Err(e) = serve_on(listener, app, std::future::pending()).await {
                            warn!("the console stopped: {e}");
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            });
        })
        .map_err(NodeError::io("starting the console thread"))?;
    let (addr, url) = rx
        .recv()
        .map_err(|_| NodeError::Failed("the console thread ended before binding".into()))??;
    Ok(Console { addr, url })
}

/// `amos console`: bind, call `ready` with the URL, serve until SIGINT or
/// SIGTERM. Requests still running then (a sync or a join from the page
/// waiting on a slow peer) get `amos serve`'s grace, then are dropped.
pub fn run(home: &Home, opts: &ConsoleOptions, ready: impl FnOnce(&str)) -> Result<()> {
    use crate::ops::serve::{STOP_GRACE, STOP_IDLE};
    check_listen(opts)?;
    let rt = crate::net::runtime()?;
    let r = rt.block_on(async {
        // Watching for SIGINT/SIGTERM from before the URL is printed.
        let signal = crate::net::accept::shutdown_signal();
        let (listener, app) = bind(home, opts).await?;
        ready(&url(app.addr, &app.token));
        let (signalled, heard) = tokio::sync::oneshot::channel();
        let shutdown = async move {
            signal.await;
            let _ = signalled.send(());
        };
        let serving = serve_on(listener, app, shutdown);
        tokio::pin!(serving);
        tokio::select! {
            r = &mut serving => return r,
            Ok(()) = heard => {}
        }
        match tokio::time::timeout(STOP_GRACE, serving).await {
            Ok(r) => r,
            Err(_) => {
                info!("stopped with requests still running");
                Ok(())
            }
        }
    });
    // A join from the page runs on a blocking thread: it ends with the
    // process (it records nothing until the inviter welcomed us).
    rt.shutdown_timeout(STOP_IDLE);
    r
}

async fn bind(home: &Home, opts: &ConsoleOptions) -> Result<(TcpListener, Arc<App>)> {
    let sessions = sessions::Sessions::new(
        sessions::SESSION_LIFETIME,
        Arc::new(crate::clock::SystemClock),
    );
    bind_with(home, opts, sessions).await
}

/// [`bind`] with these sessions (a test's lifetime and clock).
async fn bind_with(
    home: &Home,
    opts: &ConsoleOptions,
    sessions: sessions::Sessions,
) -> Result<(TcpListener, Arc<App>)> {
    let token = token::ensure(home)?;
    let mut node = Node::open(home)?;
    // Reads shown on the console's pages are audited as the console's.
    node.set_front("console");
    let listener = TcpListener::bind(opts.listen)
        .await
        .map_err(NodeError::io(format!("cannot listen on {}", opts.listen)))?;
    let addr = listener
        .local_addr()
        .map_err(NodeError::io("reading the console's address"))?;
    let app = Arc::new(App {
        home: home.clone(),
        node: Mutex::new(node),
        csrf: token::csrf_of(&token),
        cookie: format!("amos_console_{}", addr.port()),
        sessions,
        token,
        started: Instant::now(),
        addr,
        serving: opts.serving.clone(),
        live: live::Live::start(),
        stopping: tokio::sync::watch::Sender::new(false),
    });
    Ok((listener, app))
}

async fn serve_on(
    listener: TcpListener,
    app: Arc<App>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let stopping = app.stopping.clone();
    axum::serve(listener, router(app))
        .with_graceful_shutdown(async move {
            shutdown.await;
            stopping.send_replace(true);
        })
        .await
        .map_err(NodeError::io("serving the console"))
}

fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(dashboard::show))
        .route("/api/dashboard", get(dashboard::json))
        .route("/node", get(node_page::show))
        .route("/pack", get(pack::show))
        .route("/peers", get(peers::show))
        .route("/peers/sync", post(peers::sync))
        .route("/peers/join", post(peers::join))
        .route("/peers/invite", post(peers::invite))
        .route("/peers/remove", post(peers::remove))
        .route("/memories", get(memories::list).post(memories::add))
        .route("/memories/{id}", get(memory::show))
        .route("/memories/{id}/grant", post(memory_actions::grant))
        .route("/memories/{id}/edit", post(memory_actions::edit))
        .route("/memories/{id}/forget", post(memory_actions::forget))
        .route("/memories/{id}/feedback", post(memory_actions::feedback))
        .route("/memories/{id}/supersede", post(memory_actions::supersede))
        .route("/memories/{id}/pin", post(memory_actions::pin))
        .route("/timeline", get(timeline::show))
        .route("/graph", get(graph::show))
        .route("/org", get(org::show))
        .route("/org/agent", post(org::agent))
        .route("/org/team", post(org::team))
        .route("/org/project", post(org::project))
        .route("/org/member", post(org::member))
        .route("/org/delete", post(org::delete))
        .route("/audit", get(audit::show))
        .route("/events", get(peers::events))
        .route("/assets/console.js", get(page::script))
        .route("/assets/console.css", get(page::style))
        .fallback(page::not_found)
        // Inside the guard: a request it refuses needs no language.
        .layer(axum::middleware::from_fn(i18n::negotiate))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            guard::guard,
        ))
        .with_state(app)
}
