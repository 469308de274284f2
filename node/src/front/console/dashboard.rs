//! `/?as=AGENT`: the dashboard — the memories the agent may see per scope
//! and per type, writes and recalls per day over 14 days as an SVG chart
//! drawn here, the memories it recalls most, and the node's health (index
//! and encoder lag, each peer's last session, digests, facts held back);
//! `/api/dashboard?as=AGENT[&days=N]`, the same figures as JSON.
//!
//! Must never: compute a figure itself — every one is `Node::dashboard`'s
//! (the gate's aggregate for the agent) or `Node::health`'s; or put text
//! into the chart but through the template (askama escapes it: no `|safe`).

use std::sync::Arc;

use askama::Template;
use axum::extract::{Extension, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::App;
use super::i18n::Locale;
use super::page::{Chrome, PageError, QueryIn, given, html, with_node};
use crate::api::{DASHBOARD_DAYS, Dashboard, NodeHealth};
use crate::front::view::one_line;

/// The chart's size (SVG user units) and the room kept for its labels.
const CHART_W: u32 = 700;
const CHART_H: u32 = 220;
const CHART_TOP: u32 = 16;
const CHART_BOTTOM: u32 = 36;
const CHART_LEFT: u32 = 40;

/// One bar of the chart.
struct Bar {
    x: u32,
    y: u32,
    w: u32,
    h: u32,
    /// `writes` or `recalls` (its CSS class).
    series: &'static str,
    /// Its figure, for the bar's tooltip.
    title: String,
}

/// A label under a day's pair of bars.
struct Label {
    x: u32,
    text: String,
}

/// Writes and recalls per day, drawn on the server.
struct Chart {
    w: u32,
    h: u32,
    base: u32,
    bars: Vec<Bar>,
    labels: Vec<Label>,
    /// The largest figure (the top of the scale).
    max: u64,
    left: u32,
    top: u32,
    right: u32,
}

impl Chart {
    fn of(d: &Dashboard) -> Chart {
        let max = d
            .per_day
            .iter()
            .map(|p| p.writes.max(p.recalls))
            .max()
            .unwrap_or(0)
            .max(1);
        let days = d.per_day.len().max(1) as u32;
        let slot = (CHART_W - CHART_LEFT - 4) / days;
        let bar_w = (slot.saturating_sub(6) / 2).max(1);
        let base = CHART_H - CHART_BOTTOM;
        let room = base - CHART_TOP;
        let height = |n: u64| ((n as f64 / max as f64) * room as f64).round() as u32;
        let mut bars = Vec::new();
        let mut labels = Vec::new();
        for (i, p) in d.per_day.iter().enumerate() {
            let x0 = CHART_LEFT + i as u32 * slot + 3;
            for (k, (series, n)) in [("writes", p.writes), ("recalls", p.recalls)]
                .into_iter()
                .enumerate()
            {
                let h = height(n);
                bars.push(Bar {
                    x: x0 + k as u32 * bar_w,
                    y: base - h,
                    w: bar_w,
                    h,
                    series,
                    title: format!("{} {series}: {n}", p.day),
                });
            }
            labels.push(Label {
                x: x0 + bar_w,
                // MM-DD
                text: p.day.get(5..).unwrap_or(&p.day).to_owned(),
            });
        }
        Chart {
            w: CHART_W,
            h: CHART_H,
            base,
            bars,
            labels,
            max,
            left: CHART_LEFT,
            top: CHART_TOP,
            right: CHART_W,
        }
    }
}

/// A most-recalled row.
struct RecalledRow {
    id: String,
    text: String,
    recalls: u64,
}

#[derive(Template)]
#[template(path = "console/dashboard.html")]
struct DashboardPage {
    chrome: Chrome,
    /// The agent's figures (`None`: no agent chosen).
    d: Option<Dashboard>,
    recalled: Vec<RecalledRow>,
    chart: Option<Chart>,
    health: NodeHealth,
    encoder_off: bool,
    encoder_pending: u64,
}

impl DashboardPage {
    fn new(chrome: Chrome, d: Option<Dashboard>, health: NodeHealth) -> DashboardPage {
        let recalled = d
            .iter()
            .flat_map(|d| &d.most_recalled)
            .map(|r| RecalledRow {
                id: r.id.clone(),
                text: one_line(&r.content, 160),
                recalls: r.recalls,
            })
            .collect();
        DashboardPage {
            chrome,
            recalled,
            chart: d.as_ref().map(Chart::of),
            encoder_off: health.encoder_pending.is_none(),
            encoder_pending: health.encoder_pending.unwrap_or(0),
            health,
            d,
        }
    }
}

#[derive(Deserialize)]
pub(crate) struct DashQuery {
    #[serde(rename = "as")]
    agent: Option<String>,
    days: Option<u64>,
}

pub(crate) async fn show(
    State(app): State<Arc<App>>,
    Extension(loc): Extension<Locale>,
    QueryIn(q): QueryIn<DashQuery>,
) -> Result<Response, PageError> {
    let days = q.days.unwrap_or(DASHBOARD_DAYS);
    let p = with_node(&app, move |node, app| {
        let agent = given(&q.agent).unwrap_or("").to_owned();
        let chrome = Chrome::new(app, node, "dashboard", &agent, &loc)?;
        if agent.is_empty() {
            return Ok(DashboardPage::new(chrome, None, node.health()?));
        }
        let who = node.requester(&agent)?;
        let d = node.dashboard(&who, days)?;
        let health = d.health.clone();
        Ok(DashboardPage::new(chrome, Some(d), health))
    })
    .await?;
    html(&p)
}

/// A JSON answer with its status.
fn json_answer(status: StatusCode, v: &impl serde::Serialize) -> Response {
    let body = serde_json::to_string(v).unwrap_or_else(|_| "{}".into());
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// A JSON answer's error: its status and `{"error": message}`.
fn json_error(e: PageError) -> Response {
    json_answer(e.status, &serde_json::json!({ "error": e.message }))
}

/// `/api/dashboard?as=AGENT[&days=N]`: [`Dashboard`] as JSON; bad input is
/// 400 with `{"error"}`.
pub(crate) async fn json(
    State(app): State<Arc<App>>,
    q: Result<QueryIn<DashQuery>, PageError>,
) -> Response {
    let q = match q {
        Ok(QueryIn(q)) => q,
        Err(e) => return json_error(e),
    };
    let Some(agent) = given(&q.agent).map(str::to_owned) else {
        return json_error(PageError::new(
            StatusCode::BAD_REQUEST,
            "name the agent: /api/dashboard?as=AGENT",
        ));
    };
    let days = q.days.unwrap_or(DASHBOARD_DAYS);
    match with_node(&app, move |node, _| {
        let who = node.requester(&agent)?;
        Ok(node.dashboard(&who, days)?)
    })
    .await
    {
        Ok(d) => json_answer(StatusCode::OK, &d),
        Err(e) => json_error(e),
    }
}
