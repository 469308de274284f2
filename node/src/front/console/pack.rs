//! `/pack?as=AGENT&q=QUERY[&budget=N]`: the context pack the agent would
//! get for the query (`amos pack`), and beside every candidate the decision
//! and its reasons — included (pinned or relevant), over budget, duplicate
//! or near-duplicate, reserve full, CONFLICT — the very `PackDecision`s
//! `amos pack --report` prints. A superseded memory is no candidate at all
//! (recall's valid-time rule), and nothing the gate kept out is named or
//! counted.
//!
//! Must never: decide or explain anything itself — the decisions and their
//! words are `Node::pack_with`'s; or count the preview as the agent's
//! recall (it notes none).

use std::sync::Arc;

use askama::Template;
use axum::extract::{Extension, State};
use axum::response::Response;
use serde::Deserialize;

use super::App;
use super::i18n::{Lang, Locale};
use super::page::{Chrome, PageError, QueryIn, given, html, with_node};
use crate::front::view::one_line;
use crate::recall::{DEFAULT_BUDGET, PackOptions};

/// The largest budget the preview takes.
const MAX_BUDGET: usize = 1_000_000;

/// One candidate's row.
struct DecisionRow {
    id: String,
    text: String,
    included: bool,
    /// `pinned`, `relevant`, `duplicate`, … (the report's word).
    decision: &'static str,
    /// The decision in the page's language.
    word: &'static str,
    reason: String,
    tokens: usize,
    score: String,
    conflict: bool,
}

/// A decision's word in `lang` (one the catalogue lacks: the report's own).
fn word(lang: Lang, decision: &'static str) -> &'static str {
    match decision {
        "pinned" => lang.t("decision.pinned"),
        "relevant" => lang.t("decision.relevant"),
        "duplicate" => lang.t("decision.duplicate"),
        "near-duplicate" => lang.t("decision.near-duplicate"),
        "over-budget" => lang.t("decision.over-budget"),
        "reserve-full" => lang.t("decision.reserve-full"),
        other => other,
    }
}

#[derive(Template)]
#[template(path = "console/pack.html")]
struct PackPage {
    chrome: Chrome,
    q: String,
    budget: usize,
    /// Whether a pack was asked for (an agent and a query).
    asked: bool,
    tokens: usize,
    reserved: usize,
    rows: Vec<DecisionRow>,
}

#[derive(Deserialize)]
pub(crate) struct PackQuery {
    #[serde(rename = "as")]
    agent: Option<String>,
    q: Option<String>,
    budget: Option<String>,
}

pub(crate) async fn show(
    State(app): State<Arc<App>>,
    Extension(loc): Extension<Locale>,
    QueryIn(q): QueryIn<PackQuery>,
) -> Result<Response, PageError> {
    let budget = match given(&q.budget) {
        None => DEFAULT_BUDGET,
        Some(b) => b
            .parse::<usize>()
            .ok()
            .filter(|b| (1..=MAX_BUDGET).contains(b))
            .ok_or_else(|| {
                PageError::bad(format!(
                    "malformed budget {b:?}: a number of tokens from 1 to {MAX_BUDGET}"
                ))
            })?,
    };
    let p = with_node(&app, move |node, app| {
        let agent = given(&q.agent).unwrap_or("").to_owned();
        let query = given(&q.q).unwrap_or("").to_owned();
        let mut page = PackPage {
            chrome: Chrome::new(app, node, "pack", &agent, &loc)?,
            asked: !agent.is_empty() && !query.is_empty(),
            q: query,
            budget,
            tokens: 0,
            reserved: 0,
            rows: Vec::new(),
        };
        if agent.is_empty() {
            return Ok(page);
        }
        let who = node.requester(&agent)?;
        if !page.asked {
            return Ok(page);
        }
        let mut opts = PackOptions::new(budget);
        // A preview: what the agent would get, not a recall of its own.
        opts.recall.note_recall = false;
        let pack = node.pack_with(&who, &page.q, &opts)?;
        page.tokens = pack.tokens;
        page.reserved = pack.reserved;
        for d in &pack.report {
            let text = match pack
                .items
                .iter()
                .find(|h| h.memory.id().to_string() == d.id)
            {
                Some(h) => h.memory.content().to_owned(),
                // Left out: read through the gate like any memory shown
                // (every candidate is one the agent sees).
                None => node.get(&who, &d.id)?.content().to_owned(),
            };
            page.rows.push(DecisionRow {
                id: d.id.clone(),
                text: one_line(&text, 200),
                included: d.included,
                decision: d.decision,
                word: word(loc.lang, d.decision),
                reason: d.reason.clone(),
                tokens: d.tokens,
                score: format!("{:.4}", d.score),
                conflict: !d.conflict_with.is_empty(),
            });
        }
        Ok(page)
    })
    .await?;
    html(&p)
}
