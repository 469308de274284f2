//! `/timeline?as=AGENT[&since=T][&until=T][&valid_at=T][&limit=N]`: the
//! valid-time events of the memories the agent may see — each one's start,
//! its end, and its supersession by a memory the agent also sees — as
//! `amos timeline` lists them (`Node::timeline`); with `valid_at`, also
//! what was true then (`amos list --valid-at`, `Node::list_in_time`).
//!
//! Must never: order, filter or decide anything of time itself — the
//! events, their order and the superseders are the node API's, behind the
//! agent's gate (a superseder the agent cannot see neither ends a memory
//! nor is named).

use std::sync::Arc;

use askama::Template;
use axum::extract::{Extension, State};
use axum::response::Response;
use serde::Deserialize;

use super::App;
use super::i18n::{Lang, Locale};
use super::page::{Chrome, PageError, QueryIn, given, html, with_node};
use crate::api::TimelineEvent;
use crate::front::TimeRequest;
use crate::front::view::{one_line, rfc3339};
use crate::recall::TimeQuery;

/// Events shown by default, and at most.
const DEFAULT_LIMIT: usize = 200;
const MAX_LIMIT: usize = 2_000;

/// One event's row.
struct EventRow {
    at: String,
    /// `starts`, `superseded`, `ends` (a CSS class and `data-event`).
    event: &'static str,
    /// The event in the page's language.
    word: &'static str,
    id: String,
    owner: String,
    text: String,
    /// The superseder's id, for `superseded`.
    by: String,
}

/// A memory true at `valid_at`.
struct TrueRow {
    id: String,
    owner: String,
    text: String,
    valid: String,
}

#[derive(Template)]
#[template(path = "console/timeline.html")]
struct TimelinePage {
    chrome: Chrome,
    since: String,
    until: String,
    valid_at: String,
    limit: usize,
    rows: Vec<EventRow>,
    /// `Some` when `valid_at` was asked: the memories true then.
    true_then: Option<Vec<TrueRow>>,
    valid_at_shown: String,
}

#[derive(Deserialize)]
pub(crate) struct TimelineQuery {
    #[serde(rename = "as")]
    agent: Option<String>,
    since: Option<String>,
    until: Option<String>,
    valid_at: Option<String>,
    limit: Option<String>,
}

fn event_word(lang: Lang, e: TimelineEvent) -> (&'static str, &'static str) {
    match e {
        TimelineEvent::Starts => ("starts", lang.t("tl.starts")),
        TimelineEvent::Superseded => ("superseded", lang.t("tl.superseded")),
        TimelineEvent::Ends => ("ends", lang.t("tl.ends")),
    }
}

pub(crate) async fn show(
    State(app): State<Arc<App>>,
    Extension(loc): Extension<Locale>,
    QueryIn(q): QueryIn<TimelineQuery>,
) -> Result<Response, PageError> {
    let limit = match given(&q.limit) {
        None => DEFAULT_LIMIT,
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|l| (1..=MAX_LIMIT).contains(l))
            .ok_or_else(|| {
                PageError::bad(format!(
                    "malformed limit {l:?}: a number of events from 1 to {MAX_LIMIT}"
                ))
            })?,
    };
    let p = with_node(&app, move |node, app| {
        let agent = given(&q.agent).unwrap_or("").to_owned();
        let req = TimeRequest {
            since: given(&q.since).map(str::to_owned),
            until: given(&q.until).map(str::to_owned),
            valid_at: given(&q.valid_at).map(str::to_owned),
            known_at: None,
        };
        // Bad times are refused with or without an agent.
        let tq = req.query(node.now_ms(), |f| f.replace('-', "_"))?;
        let mut page = TimelinePage {
            chrome: Chrome::new(app, node, "timeline", &agent, &loc)?,
            since: req.since.clone().unwrap_or_default(),
            until: req.until.clone().unwrap_or_default(),
            valid_at: req.valid_at.clone().unwrap_or_default(),
            limit,
            rows: Vec::new(),
            true_then: None,
            valid_at_shown: tq.valid_at_ms.map(rfc3339).unwrap_or_default(),
        };
        if agent.is_empty() {
            return Ok(page);
        }
        let who = node.requester(&agent)?;
        page.rows = node
            .timeline(&who, tq.since_ms, tq.until_ms, None, limit)?
            .into_iter()
            .map(|e| {
                let (event, word) = event_word(loc.lang, e.event);
                EventRow {
                    at: rfc3339(e.at_ms),
                    event,
                    word,
                    id: e.memory.to_string(),
                    owner: e.owner,
                    text: one_line(&e.text, 160),
                    by: e.by.unwrap_or_default(),
                }
            })
            .collect();
        if let Some(at) = tq.valid_at_ms {
            let only = TimeQuery {
                valid_at_ms: Some(at),
                ..TimeQuery::default()
            };
            page.true_then = Some(
                node.list_in_time(&who, None, limit, &only)?
                    .into_iter()
                    .map(|(m, vt)| TrueRow {
                        id: m.id().to_string(),
                        owner: m.owner().to_string(),
                        text: one_line(m.content(), 160),
                        valid: format!(
                            "{} → {}",
                            rfc3339(vt.from_ms),
                            vt.to_ms
                                .map_or_else(|| loc.lang.t("tl.now").to_owned(), rfc3339)
                        ),
                    })
                    .collect(),
            );
        }
        Ok(page)
    })
    .await?;
    html(&p)
}
