//! `/memories?as=AGENT[&q=QUERY]`: memories as one agent sees them — ranked
//! search (`amos search`) or newest first (`amos list`) — and `amos add`
//! from its form. One memory's page is [`super::memory`].
//!
//! Must never: read a memory but through the node API with the chosen
//! agent's gate; a memory that agent cannot see is "no such memory" (404),
//! exactly as a missing one.

use std::sync::Arc;

use amos_acl::Visible;
use askama::Template;
use axum::extract::{Extension, State};
use axum::response::Response;
use serde::Deserialize;

use super::App;
use super::i18n::Locale;
use super::page::{
    Chrome, FormIn, PageError, QueryIn, as_query, given, html, need_agent, see, with_node,
};
use crate::front::request::AddRequest;
use crate::front::view::{one_line, rfc3339};
use crate::store::memory::MemoryRecord;

/// How many memories a list shows by default, and at most.
const DEFAULT_LIMIT: usize = 20;
const MAX_LIMIT: usize = 500;

/// A memory as a list row.
struct Row {
    id: String,
    kind: String,
    owner: String,
    visibility: String,
    updated: String,
    text: String,
    score: String,
}

impl Row {
    fn of(m: &Visible<MemoryRecord>, score: Option<f32>) -> Row {
        Row {
            id: m.id().to_string(),
            kind: m.kind().as_str().to_owned(),
            owner: m.owner().to_string(),
            visibility: m.effective().to_string(),
            updated: rfc3339(m.updated_ms()),
            text: one_line(m.content(), 200),
            score: score.map(|s| format!("{s:.3}")).unwrap_or_default(),
        }
    }
}

#[derive(Template)]
#[template(path = "console/memories.html")]
struct ListPage {
    chrome: Chrome,
    q: String,
    kind: String,
    limit: usize,
    searched: bool,
    rows: Vec<Row>,
}

#[derive(Deserialize)]
pub(crate) struct ListQuery {
    #[serde(rename = "as")]
    agent: Option<String>,
    q: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    limit: Option<usize>,
}

pub(crate) async fn list(
    State(app): State<Arc<App>>,
    Extension(loc): Extension<Locale>,
    QueryIn(q): QueryIn<ListQuery>,
) -> Result<Response, PageError> {
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(PageError::bad(format!(
            "limit must be between 1 and {MAX_LIMIT}"
        )));
    }
    let p = with_node(&app, move |node, app| {
        let agent = given(&q.agent).unwrap_or("").to_owned();
        let query = given(&q.q).unwrap_or("").to_owned();
        let kind = given(&q.kind).unwrap_or("").to_owned();
        let mut page = ListPage {
            chrome: Chrome::new(app, node, "memories", &agent, &loc)?,
            searched: !query.is_empty(),
            q: query,
            kind,
            limit,
            rows: Vec::new(),
        };
        if agent.is_empty() {
            return Ok(page);
        }
        let who = node.requester(&agent)?;
        if page.searched {
            let opts = crate::recall::RecallOptions::top(limit);
            page.rows = node
                .search_with(&who, &page.q, &opts)?
                .iter()
                .map(|h| Row::of(&h.memory, Some(h.score)))
                .collect();
        } else {
            let kind = (!page.kind.is_empty())
                .then(|| amos_protocol::MemoryType::parse(&page.kind))
                .transpose()
                .map_err(crate::NodeError::from)?;
            page.rows = node
                .list(&who, kind.as_ref(), limit)?
                .iter()
                .map(|m| Row::of(m, None))
                .collect();
        }
        Ok(page)
    })
    .await?;
    html(&p)
}

#[derive(Deserialize)]
pub(crate) struct AddForm {
    #[serde(rename = "as")]
    agent: Option<String>,
    content: String,
    #[serde(rename = "type")]
    kind: Option<String>,
    /// Scopes, comma- or space-separated.
    share: Option<String>,
    tags: Option<String>,
    importance: Option<String>,
    pin: Option<String>,
    expires: Option<String>,
    /// Valid time (`amos add --valid-from/--valid-to/--supersedes`).
    valid_from: Option<String>,
    valid_to: Option<String>,
    supersedes: Option<String>,
}

/// `amos add`: then the new memory's page.
pub(crate) async fn add(
    State(app): State<Arc<App>>,
    FormIn(f): FormIn<AddForm>,
) -> Result<Response, PageError> {
    let agent = need_agent(&f.agent)?;
    let importance = given(&f.importance)
        .map(|i| {
            i.parse::<f32>().map_err(|_| {
                PageError::bad(format!(
                    "malformed importance {i:?}: use a number from 0 to 1"
                ))
            })
        })
        .transpose()?;
    let req = AddRequest {
        content: f.content,
        kind: given(&f.kind).map(str::to_owned),
        share: given(&f.share).map(super::page::items).unwrap_or_default(),
        tags: given(&f.tags).map(super::page::items).unwrap_or_default(),
        importance,
        pin: given(&f.pin).is_some(),
        expires: given(&f.expires).map(str::to_owned),
        valid_from: given(&f.valid_from).map(str::to_owned),
        valid_to: given(&f.valid_to).map(str::to_owned),
        supersedes: given(&f.supersedes).map(str::to_owned),
    };
    let a = agent.clone();
    let id = with_node(&app, move |node, _| {
        let who = node.requester(&a)?;
        let new = req.memory_with(node.now_ms(), str::to_owned, |s| node.resolve_scope(s))?;
        Ok(node.add(&who, new)?)
    })
    .await?;
    Ok(see(format!("/memories/{id}?{}", as_query(&agent))))
}
