//! `/memories/ID?as=AGENT`: one memory as that agent sees it, and why the
//! node believes it (`Node::provenance`): its author agent and origin
//! node, the peer it arrived from, its stored signed facts checked again
//! on every view, what it
//! replaces and what replaced it, its edits, its links, its recalls and
//! audited reads; with the forms of its actions ([`super::memory_actions`]).
//!
//! Must never: read the memory but through the node API with the agent's
//! gate — a memory it cannot see is "no such memory" (404), exactly as a
//! missing one; or show, link or count a superseding, superseded or
//! linked memory the agent cannot see (the node API leaves them out).

use std::sync::Arc;

use askama::Template;
use axum::extract::{Extension, Path, State};
use axum::response::Response;
use serde::Deserialize;

use super::App;
use super::i18n::{Lang, Locale};
use super::page::{Chrome, PageError, QueryIn, html, need_agent, with_node};
use crate::api::{Node, Provenance};
use crate::front::view::{one_line, rfc3339};

/// A link row on the memory page.
struct LinkRow {
    direction: &'static str,
    relation: String,
    weight: String,
    other: String,
    text: String,
}

/// An edit on the memory page.
struct EditRow {
    kind: &'static str,
    author: String,
    at: String,
    size: String,
}

/// Another memory named on the page (one the agent sees).
struct Other {
    id: String,
    text: String,
    valid_from: String,
}

/// A stored signed fact, checked again.
struct SigRow {
    register: &'static str,
    signer: String,
    at: String,
    ok: bool,
    problem: String,
}

/// An audited read.
struct ReadRow {
    at: String,
    agent: String,
    front: String,
    via: String,
}

#[derive(Template)]
#[template(path = "console/memory.html")]
struct MemoryPage {
    chrome: Chrome,
    id: String,
    content: String,
    owner: String,
    is_owner: bool,
    kind: String,
    grants: String,
    effective: String,
    tags: String,
    importance: f32,
    confidence: f32,
    pinned: bool,
    archived: bool,
    created: String,
    updated: String,
    expires: String,
    valid: String,
    origin: String,
    /// `here`, `peer` or `relayed` (its origin is no peer of ours).
    origin_is: &'static str,
    origin_peer: String,
    /// The peer whose batch brought it here (empty: not recorded), and its
    /// name here.
    arrived_from: String,
    arrived_peer: String,
    signatures: Vec<SigRow>,
    supersedes: Option<Other>,
    superseded_by: Vec<Other>,
    history: Vec<EditRow>,
    links: Vec<LinkRow>,
    recall_count: u64,
    last_recalled: String,
    read_audit_on: bool,
    reads: Vec<ReadRow>,
}

#[derive(Deserialize)]
pub(crate) struct AsQuery {
    #[serde(rename = "as")]
    agent: Option<String>,
}

pub(crate) async fn show(
    State(app): State<Arc<App>>,
    Extension(loc): Extension<Locale>,
    Path(id): Path<String>,
    QueryIn(q): QueryIn<AsQuery>,
) -> Result<Response, PageError> {
    let agent = need_agent(&q.agent)?;
    let p = with_node(&app, move |node, app| {
        memory_page(node, app, &agent, &id, &loc)
    })
    .await?;
    html(&p)
}

fn other(m: &amos_acl::Visible<crate::store::memory::MemoryRecord>) -> Other {
    Other {
        id: m.id().to_string(),
        text: one_line(m.content(), 160),
        valid_from: rfc3339(m.valid_from_ms()),
    }
}

fn memory_page(
    node: &mut Node,
    app: &App,
    agent: &str,
    id: &str,
    loc: &Locale,
) -> Result<MemoryPage, PageError> {
    let lang = loc.lang;
    let who = node.requester(agent)?;
    let p: Provenance = node.provenance(&who, id)?;
    let m = &p.memory;
    Ok(MemoryPage {
        chrome: Chrome::new(app, node, "memories", agent, loc)?,
        id: m.id().to_string(),
        content: m.content().to_owned(),
        owner: m.owner().to_string(),
        is_owner: m.owner().as_str() == agent,
        kind: m.kind().as_str().to_owned(),
        grants: m.grants().to_string(),
        effective: m.effective().to_string(),
        tags: m.tags().join(", "),
        importance: m.importance(),
        confidence: m.confidence(),
        pinned: m.pinned(),
        archived: m.archived(),
        created: rfc3339(m.created_ms()),
        updated: rfc3339(m.updated_ms()),
        expires: m
            .expires_ms()
            .map_or_else(|| lang.t("frame.never").into(), rfc3339),
        valid: format!(
            "{} → {}",
            rfc3339(m.valid_from_ms()),
            m.validity()
                .to_ms
                .map_or_else(|| lang.t("tl.now").into(), rfc3339)
        ),
        origin: m.origin().to_string(),
        origin_is: match (&p.origin_here, &p.origin_peer) {
            (true, _) => "here",
            (false, Some(_)) => "peer",
            (false, None) => "relayed",
        },
        origin_peer: p.origin_peer.clone().unwrap_or_default(),
        arrived_from: p.arrived_from.map(|n| n.to_string()).unwrap_or_default(),
        arrived_peer: p.arrived_peer.clone().unwrap_or_default(),
        signatures: p
            .signatures
            .iter()
            .map(|s| SigRow {
                register: s.register,
                signer: s.signer.map(|n| n.to_string()).unwrap_or_default(),
                at: s.at_ms.map(rfc3339).unwrap_or_default(),
                ok: s.problem.is_none(),
                problem: s.problem.clone().unwrap_or_default(),
            })
            .collect(),
        supersedes: p.supersedes.as_ref().map(other),
        superseded_by: p.superseded_by.iter().map(other).collect(),
        history: p
            .history
            .iter()
            .map(|l| EditRow {
                kind: edit_word(lang, l.kind),
                at: rfc3339(l.wall_ms),
                size: l
                    .bytes
                    .map_or_else(|| lang.t("mem.compacted").to_owned(), |b| format!("{b} B")),
                author: l.author.clone(),
            })
            .collect(),
        links: p
            .links
            .iter()
            .map(|l| LinkRow {
                direction: if l.outgoing { "→" } else { "←" },
                relation: l.relation.clone(),
                weight: format!("{:.2}", l.weight),
                other: l.other.id().to_string(),
                text: one_line(l.other.content(), 120),
            })
            .collect(),
        recall_count: p.recall_count,
        last_recalled: p
            .last_recalled_ms
            .map_or_else(|| lang.t("frame.never").into(), rfc3339),
        read_audit_on: p.read_audit_on,
        reads: p
            .reads
            .iter()
            .map(|r| ReadRow {
                at: rfc3339(r.time_ms),
                agent: r.agent.clone(),
                front: r.front.clone(),
                via: r.via.clone(),
            })
            .collect(),
    })
}

/// An edit line's kind in `lang`.
fn edit_word(lang: Lang, kind: &'static str) -> &'static str {
    match kind {
        "created" => lang.t("mem.created_edit"),
        "edit" => lang.t("mem.edit_edit"),
        "snapshot" => lang.t("mem.snapshot"),
        other => other,
    }
}
