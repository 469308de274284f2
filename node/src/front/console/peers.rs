//! `/peers`: one row per peer as Syncthing shows remote devices — policy,
//! address, its link (a relay link, `peers add --relay`; the relay it is
//! reached `--via`; its mailbox directory, `--mailbox`), last sync and its result, facts and bytes each way of the last
//! session that completed (run by any process on this home: `amos serve`,
//! `amos sync`, this console), whether the scoped digests agreed at the end
//! of the last session that compared them, one that moved no fact (the
//! peer's over the scopes it gives us, against ours over the same) — with "sync now" per peer and for all, pairing
//! by code (`amos join`), invites (`amos team invite`: code, QR, expiry) and
//! removal (`amos peers remove`); and `/events`, the live status stream.
//!
//! Must never: sync, pair or invite by any path but the node API and
//! `crate::net` the CLI uses.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use askama::Template;
use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::Stream;
use serde::Deserialize;

use super::App;
use super::i18n::Locale;
use super::page::{Chrome, FormIn, PageError, given, html, items, see, with_node};
use crate::api::pairing::Invite;
use crate::front::view::{outcome_line, rfc3339};
use crate::store::peers::LastSession;

/// One peer's row.
struct PeerRow {
    node_id: String,
    name: String,
    addr: String,
    policy: String,
    last_sync: String,
    /// The last session's result word (`ok`, `refused`, …; `never`): its
    /// CSS class and what the live stream sets.
    result: String,
    /// That result as shown (`never synced` in the page's language).
    result_word: String,
    /// `agree`, `disagree` or `unknown` (never compared): the peer's
    /// session digest over the scopes it gives us against ours.
    digest: String,
    /// What was compared, when, and both fact counts.
    digest_note: String,
    /// The last completed session, whichever process on this home ran it.
    session: Option<LastSession>,
    /// When it ended and how long it took.
    session_note: String,
    /// The protocol version its last session spoke (`v2`; `–` before one)
    /// and the facts held back for it (docs/design.md §13).
    protocol: String,
    /// What that means.
    protocol_note: String,
    /// A relay link (`peers add --relay`, docs/design.md §7.11).
    relay: bool,
    /// The relay it is reached through (`--via`): its name here if it has
    /// one, else its short id; and its id.
    via: Option<(String, String)>,
    /// Its mailbox directory (`--mailbox`, docs/design.md §8.2).
    mailbox: Option<String>,
    /// Dialled directly: neither of those, an address known.
    direct: bool,
}

/// An invite just made.
struct InviteView {
    code: String,
    team: String,
    policy: String,
    expires: String,
    addrs: String,
    qr: String,
}

#[derive(Template)]
#[template(path = "console/peers.html")]
struct PeersPage {
    chrome: Chrome,
    rows: Vec<PeerRow>,
    teams: Vec<String>,
    invite: Option<InviteView>,
}

fn page(
    node: &crate::api::Node,
    app: &App,
    flash: Vec<String>,
    loc: &Locale,
) -> Result<PeersPage, PageError> {
    let mut chrome = Chrome::new(app, node, "peers", "", loc)?;
    chrome.flash = flash;
    let lang = loc.lang;
    let peers = node.peer_list()?;
    let named: std::collections::HashMap<String, String> = peers
        .iter()
        .filter(|p| !p.name.is_empty())
        .map(|p| (p.node_id.clone(), p.name.clone()))
        .collect();
    let rows = peers
        .into_iter()
        .map(|p| PeerRow {
            direct: !p.relay && p.via.is_none() && p.mailbox.is_none() && p.addr.is_some(),
            relay: p.relay,
            via: p.via.map(|id| {
                let shown = named
                    .get(&id)
                    .cloned()
                    .unwrap_or_else(|| id.chars().take(12).collect());
                (shown, id)
            }),
            mailbox: p.mailbox,
            protocol: match (p.protocol, p.held_back) {
                (None, _) => "–".into(),
                (Some(v), 0) => format!("v{v}"),
                (Some(v), n) => format!("v{v}, {n} {}", lang.t("peers.held_back")),
            },
            protocol_note: if p.held_back > 0 {
                format!("{} {}", p.held_back, lang.t("peers.held_back_note"))
            } else {
                lang.t("peers.protocol_note").into()
            },
            session: p.last_session,
            session_note: p.last_session.map_or_else(
                || lang.t("peers.no_session").into(),
                |s| {
                    format!(
                        "{} {} · {} ms",
                        lang.t("peers.session_ended"),
                        rfc3339(s.at_ms),
                        s.ms
                    )
                },
            ),
            digest: p
                .digest
                .as_ref()
                .map_or("unknown", |d| super::live::digest_word(Some(d.agree)))
                .into(),
            digest_note: p.digest.as_ref().map_or_else(
                || lang.t("peers.no_comparison").into(),
                |d| {
                    format!(
                        "{} {} · {} · {}: {} · {}: {}",
                        lang.t("peers.scopes"),
                        d.scopes,
                        rfc3339(d.at_ms),
                        lang.t("peers.peer_holds"),
                        d.peer_facts,
                        lang.t("peers.this_node_holds"),
                        d.my_facts
                    )
                },
            ),
            last_sync: p
                .last_sync
                .map_or_else(|| lang.t("frame.never").into(), rfc3339),
            result_word: match p.last_result.as_deref() {
                None => lang.t("peers.never_synced").into(),
                Some(r) => r.to_owned(),
            },
            result: p.last_result.unwrap_or_else(|| "never".into()),
            addr: p.addr.unwrap_or_else(|| lang.t("peers.no_address").into()),
            node_id: p.node_id,
            name: p.name,
            policy: p.policy,
        })
        .collect();
    Ok(PeersPage {
        chrome,
        rows,
        teams: node.team_list()?.into_iter().map(|t| t.id).collect(),
        invite: None,
    })
}

pub(crate) async fn show(
    State(app): State<Arc<App>>,
    Extension(loc): Extension<Locale>,
) -> Result<Response, PageError> {
    let p = with_node(&app, move |node, app| page(node, app, Vec::new(), &loc)).await?;
    html(&p)
}

#[derive(Deserialize)]
pub(crate) struct SyncForm {
    /// One peer (NodeId, prefix or name); every peer with an address if absent.
    peer: Option<String>,
}

/// `amos sync now [PEER]`: one pass, a line per peer, then one per
/// mailbox (directory or relay).
pub(crate) async fn sync(
    State(app): State<Arc<App>>,
    Extension(loc): Extension<Locale>,
    FormIn(f): FormIn<SyncForm>,
) -> Result<Response, PageError> {
    let identity = Arc::new(app.home.load_identity()?);
    let outcomes = crate::net::sync_pass(&app.home, identity.clone(), given(&f.peer), None).await?;
    // Then the mailboxes (directories and relays), as `amos sync now` does:
    // what came in live goes out in the posted bundles.
    let mailboxes =
        crate::net::relay::mailbox::mailbox_pass(&app.home, identity, given(&f.peer)).await?;
    let mut flash: Vec<String> = outcomes
        .iter()
        .map(outcome_line)
        .chain(mailboxes.iter().map(crate::api::mailbox_line))
        .collect();
    if flash.is_empty() {
        flash.push(loc.lang.t("peers.nothing_to_sync").into());
    }
    let p = with_node(&app, move |node, app| page(node, app, flash, &loc)).await?;
    html(&p)
}

#[derive(Deserialize)]
pub(crate) struct JoinForm {
    code: String,
    /// This node's agent for the inviter to add (`amos join --as`).
    agent: Option<String>,
}

/// `amos join CODE [--as AGENT]`.
pub(crate) async fn join(
    State(app): State<Arc<App>>,
    Extension(loc): Extension<Locale>,
    FormIn(f): FormIn<JoinForm>,
) -> Result<Response, PageError> {
    let code = f.code.trim().to_owned();
    if code.is_empty() {
        return Err(PageError::bad("paste the pairing code (amos1-…)"));
    }
    // The join rule `amos join` applies (crate::net::join).
    let agent = crate::net::join_agent(&code, given(&f.agent), false)?;
    let home = app.home.clone();
    let joining = agent.clone();
    let r = tokio::task::spawn_blocking(move || {
        crate::net::join_blocking(&home, &code, &joining, None)
    })
    .await
    .map_err(|e| PageError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    let mut flash = vec![r.paired_line()];
    if let crate::net::JoinAgent::LeftOut { agent, why } = &agent {
        flash.push(format!("agent {agent} not carried: {why}"));
    }
    if let Some(a) = &r.registered {
        flash.push(format!("agent {a} registered on this node"));
    }
    if let Some(o) = &r.first_sync {
        flash.push(format!("first sync: {}", outcome_line(o)));
    }
    let p = with_node(&app, move |node, app| page(node, app, flash, &loc)).await?;
    html(&p)
}

#[derive(Deserialize)]
pub(crate) struct InviteForm {
    team: String,
    policy: Option<String>,
    /// How long the code stays valid (default 10m).
    ttl: Option<String>,
    /// Addresses the joiner dials (HOST:PORT, comma-separated); default:
    /// where `amos serve` listens.
    addrs: Option<String>,
}

/// `amos team invite TEAM [--policy P] [--ttl DUR]`: the page shows the code.
pub(crate) async fn invite(
    State(app): State<Arc<App>>,
    Extension(loc): Extension<Locale>,
    FormIn(f): FormIn<InviteForm>,
) -> Result<Response, PageError> {
    let ttl_text = given(&f.ttl).unwrap_or("10m").to_owned();
    let ttl = humantime::parse_duration(&ttl_text)
        .map_err(|_| PageError::bad(format!("malformed ttl {ttl_text:?}: use e.g. 10m or 2h")))?;
    let p = with_node(&app, move |node, app| {
        let addrs = given(&f.addrs).map(items).unwrap_or_default();
        let inv: Invite = node.team_invite(f.team.trim(), given(&f.policy), ttl, &addrs)?;
        let mut p = page(node, app, Vec::new(), &loc)?;
        p.invite = Some(InviteView {
            qr: super::qr::svg(&inv.code).unwrap_or_default(),
            expires: rfc3339(inv.expires),
            addrs: inv.addrs.join(", "),
            code: inv.code,
            team: inv.team,
            policy: inv.policy,
        });
        Ok(p)
    })
    .await?;
    html(&p)
}

#[derive(Deserialize)]
pub(crate) struct RemoveForm {
    peer: String,
}

/// `amos peers remove ID`.
pub(crate) async fn remove(
    State(app): State<Arc<App>>,
    FormIn(f): FormIn<RemoveForm>,
) -> Result<Response, PageError> {
    with_node(&app, move |node, _| Ok(node.peer_remove(f.peer.trim())?)).await?;
    Ok(see("/peers".into()))
}

/// `/events`: a `peer` event (JSON of [`PeerLive`]) after every session.
pub(crate) async fn events(
    State(app): State<Arc<App>>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let rx = app.live.subscribe();
    let stop = app.stopping.subscribe();
    let stream = futures_util::stream::unfold((rx, stop), |(mut rx, mut stop)| async move {
        loop {
            if *stop.borrow() {
                return None;
            }
            tokio::select! {
                got = rx.recv() => match got {
                    Ok(p) => {
                        let data = serde_json::to_string(&p).unwrap_or_default();
                        let ev = Event::default().event("peer").data(data);
                        return Some((Ok(ev), (rx, stop)));
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                },
                // The console is stopping (or gone): end the stream.
                changed = stop.changed() => if changed.is_err() { return None },
            }
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}
