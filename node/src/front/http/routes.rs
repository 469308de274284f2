//! The JSON API's routes under `/v1`: each parses its request (JSON body,
//! query string, path), makes the one node API call the CLI makes for it
//! with the token's gate ([`Caller`]), and answers with the JSON views the
//! CLI's `--json` and MCP print ([`crate::front::view`]).
//!
//! Must never: read or change a memory but through that call; answer a
//! memory the token cannot see other than as missing (404, never 403);
//! read a body past [`MAX_BODY`] (413, nothing done); take a `k`, budget or
//! limit past its bound.

use std::sync::Arc;

use axum::Extension;
use axum::extract::rejection::PathRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::guard::Caller;
use super::problem::Problem;
use super::{App, MAX_BODY, run};
use crate::error::NodeError;
use crate::front::request::{self, AddRequest, TimeRequest};
use crate::front::view;
use crate::recall::{DEFAULT_BUDGET, DEFAULT_K, PackOptions, RecallOptions};

/// The largest pack budget (tokens).
pub const MAX_BUDGET: usize = 100_000;
/// The most memories `GET /v1/memories` lists and `GET /v1/timeline` shows.
pub const MAX_LIMIT: usize = 1000;
/// How many of either by default.
const DEFAULT_LIMIT: usize = 100;

type Answer = std::result::Result<Response, Problem>;

/// A JSON body (`Content-Type: application/json`, at most [`MAX_BODY`]
/// bytes); one that does not parse is 400 naming the field.
pub(crate) struct JsonIn<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonIn<T> {
    type Rejection = Problem;

    async fn from_request(req: Request, _: &S) -> Result<Self, Problem> {
        let json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|m| {
                let m = m.trim().to_ascii_lowercase();
                m == "application/json" || (m.starts_with("application/") && m.ends_with("+json"))
            });
        if !json {
            return Err(Problem::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "the body must be JSON (Content-Type: application/json)",
            ));
        }
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > MAX_BODY as u64) {
            return Err(Problem::too_large(MAX_BODY));
        }
        let bytes = axum::body::to_bytes(req.into_body(), MAX_BODY)
            .await
            .map_err(|_| Problem::too_large(MAX_BODY))?;
        let de = &mut serde_json::Deserializer::from_slice(&bytes);
        serde_path_to_error::deserialize(de)
            .map(JsonIn)
            .map_err(|e| field_error("body", e))
    }
}

/// The query string as `T`; one that does not parse is 400 naming the field.
pub(crate) struct QueryIn<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for QueryIn<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Problem> {
        let q = parts.uri.query().unwrap_or("");
        serde_urlencoded::from_str(q)
            .map(QueryIn)
            .map_err(|e| Problem::bad(format!("malformed query: {e}")))
    }
}

fn field_error(what: &str, e: serde_path_to_error::Error<serde_json::Error>) -> Problem {
    let path = e.path().to_string();
    let inner = e.into_inner();
    if path == "." {
        Problem::bad(format!("malformed {what}: {inner}"))
    } else {
        Problem::bad(format!("malformed {what}: {path}: {inner}"))
    }
}

/// The `{id}` of the path.
fn id_of(p: Result<Path<String>, PathRejection>) -> Result<String, Problem> {
    p.map(|Path(id)| id)
        .map_err(|e| Problem::bad(format!("malformed path: {e}")))
}

fn json_answer(status: StatusCode, v: Value) -> Response {
    json_body(status, v.to_string().into_bytes())
}

/// An answer of `body`, serialized JSON.
fn json_body(status: StatusCode, body: Vec<u8>) -> Response {
    let mut r = (status, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn ok(v: Value) -> Answer {
    Ok(json_answer(StatusCode::OK, v))
}

/// The `mode` parameter: hybrid when absent.
/// A limit parameter within 1..=[`MAX_LIMIT`].
fn limit_of(limit: Option<usize>) -> Result<usize, Problem> {
    match limit.unwrap_or(DEFAULT_LIMIT) {
        n @ 1..=MAX_LIMIT => Ok(n),
        n => Err(Problem::bad(format!(
            "limit must be between 1 and {MAX_LIMIT}, not {n}"
        ))),
    }
}

// ---------------------------------------------------------------------------
// Routes

pub(crate) async fn not_found() -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        "no_such_route",
        "no such route (the API is described at /v1/openapi.json)",
    )
}

pub(crate) async fn method_not_allowed() -> Problem {
    Problem::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this route does not take that method (see /v1/openapi.json)",
    )
}

/// `GET /v1/status`: the node and the token's agent; no memory data.
pub(crate) async fn status(State(app): State<Arc<App>>, Extension(c): Extension<Caller>) -> Answer {
    let (node_id, name) = run(&app, |n| Ok((n.node_id().to_string(), n.name().to_owned()))).await?;
    ok(json!({
        "node_id": node_id,
        "name": name,
        "version": env!("CARGO_PKG_VERSION"),
        "api": "v1",
        "agent": c.0.agent,
        "token": c.0.token,
    }))
}

/// `POST /v1/memories`: `amos add` (the `memory_add` tool's body); 201
/// with `Location`, the id and up to 3 similar memories the agent sees.
pub(crate) async fn add(
    State(app): State<Arc<App>>,
    Extension(c): Extension<Caller>,
    JsonIn(body): JsonIn<AddRequest>,
) -> Answer {
    let added = run(&app, move |n| {
        let new = body.memory_with(n.now_ms(), str::to_owned, |s| n.resolve_scope(s))?;
        n.add_noting_similar(&c.0.who, new)
    })
    .await?;
    let mut r = json_answer(
        StatusCode::CREATED,
        json!({"id": added.id.to_string(), "similar": added.similar}),
    );
    if let Ok(v) = HeaderValue::from_str(&format!("/v1/memories/{}", added.id)) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    Ok(r)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    #[serde(rename = "type")]
    kind: Option<String>,
    limit: Option<usize>,
}

/// `GET /v1/memories?type=&limit=`: `amos list`, newest first.
pub(crate) async fn list(
    State(app): State<Arc<App>>,
    Extension(c): Extension<Caller>,
    QueryIn(q): QueryIn<ListQuery>,
) -> Answer {
    let limit = limit_of(q.limit)?;
    let memories = run(&app, move |n| {
        let kind = q
            .kind
            .as_deref()
            .map(amos_protocol::MemoryType::parse)
            .transpose()?;
        n.list(&c.0.who, kind.as_ref(), limit)
    })
    .await?;
    ok(json!({"memories": memories.iter().map(view::memory_json).collect::<Vec<_>>()}))
}

/// `GET /v1/memories/{id}`: `amos get`.
pub(crate) async fn get(
    State(app): State<Arc<App>>,
    Extension(c): Extension<Caller>,
    id: Result<Path<String>, PathRejection>,
) -> Answer {
    let id = id_of(id)?;
    let m = run(&app, move |n| n.get(&c.0.who, &id)).await?;
    ok(view::memory_json(&m))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpdateBody {
    content: Option<String>,
    valid_from: Option<String>,
    valid_to: Option<String>,
}

/// `PATCH /v1/memories/{id}`: `amos update` (text, valid time or both).
pub(crate) async fn update(
    State(app): State<Arc<App>>,
    Extension(c): Extension<Caller>,
    id: Result<Path<String>, PathRejection>,
    JsonIn(b): JsonIn<UpdateBody>,
) -> Answer {
    let id = id_of(id)?;
    if b.content.is_none() && b.valid_from.is_none() && b.valid_to.is_none() {
        return Err(Problem::bad("give content, valid_from or valid_to"));
    }
    let id = run(&app, move |n| {
        let validity = match (&b.valid_from, &b.valid_to) {
            (None, None) => None,
            (from, to) => Some(request::validity(
                from.as_deref(),
                to.as_deref(),
                n.now_ms(),
                &str::to_owned,
            )?),
        };
        n.revise(
            &c.0.who,
            &id,
            b.content.as_deref(),
            validity,
            crate::api::DEFAULT_COMPACT_BYTES,
        )
    })
    .await?;
    ok(json!({"id": id.to_string()}))
}

/// `DELETE /v1/memories/{id}`: `amos forget` (owner only); 204.
pub(crate) async fn forget(
    State(app): State<Arc<App>>,
    Extension(c): Extension<Caller>,
    id: Result<Path<String>, PathRejection>,
) -> Answer {
    let id = id_of(id)?;
    run(&app, move |n| n.forget(&c.0.who, &id)).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ScopeBody {
    scope: String,
}

async fn grant(
    app: Arc<App>,
    c: Caller,
    id: Result<Path<String>, PathRejection>,
    scope: String,
    share: bool,
) -> Answer {
    let id = id_of(id)?;
    let (id, shown) = run(&app, move |n| {
        let (id, grants) = n.set_grant(&c.0.who, &id, &scope, share)?;
        Ok((id, n.grant_labels(&grants)))
    })
    .await?;
    ok(json!({"id": id.to_string(), "visibility": shown}))
}

/// `POST /v1/memories/{id}/share` `{"scope"}`: `amos share`.
pub(crate) async fn share(
    State(app): State<Arc<App>>,
    Extension(c): Extension<Caller>,
    id: Result<Path<String>, PathRejection>,
    JsonIn(b): JsonIn<ScopeBody>,
) -> Answer {
    grant(app, c, id, b.scope, true).await
}

/// `POST /v1/memories/{id}/unshare` `{"scope"}`: `amos unshare`.
pub(crate) async fn unshare(
    State(app): State<Arc<App>>,
    Extension(c): Extension<Caller>,
    id: Result<Path<String>, PathRejection>,
    JsonIn(b): JsonIn<ScopeBody>,
) -> Answer {
    grant(app, c, id, b.scope, false).await
}

/// `GET /v1/memories/{id}/links`: its links whose other end the agent sees.
pub(crate) async fn links(
    State(app): State<Arc<App>>,
    Extension(c): Extension<Caller>,
    id: Result<Path<String>, PathRejection>,
) -> Answer {
    let id = id_of(id)?;
    let links = run(&app, move |n| n.links(&c.0.who, &id)).await?;
    let links: Vec<Value> = links
        .iter()
        .map(|l| {
            json!({
                "outgoing": l.outgoing,
                "relation": l.relation,
                "weight": l.weight,
                "other": view::memory_json(&l.other),
            })
        })
        .collect();
    ok(json!({ "links": links }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LinkBody {
    a: String,
    b: String,
    relation: Option<String>,
    weight: Option<f32>,
}

/// `POST /v1/links` `{"a", "b", "relation", "weight"}`: `amos link`; 201.
pub(crate) async fn link(
    State(app): State<Arc<App>>,
    Extension(c): Extension<Caller>,
    JsonIn(b): JsonIn<LinkBody>,
) -> Answer {
    let (from, to) = (b.a.clone(), b.b.clone());
    run(&app, move |n| {
        n.link(
            &c.0.who,
            &b.a,
            &b.b,
            b.relation.as_deref(),
            b.weight.unwrap_or(1.0),
        )
    })
    .await?;
    Ok(json_answer(
        StatusCode::CREATED,
        json!({"from": from, "to": to}),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FeedbackBody {
    ids: Vec<String>,
    helpful: bool,
}

/// `POST /v1/feedback` `{"ids", "helpful"}`: `amos feedback`.
pub(crate) async fn feedback(
    State(app): State<Arc<App>>,
    Extension(c): Extension<Caller>,
    JsonIn(b): JsonIn<FeedbackBody>,
) -> Answer {
    if b.ids.len() > MAX_LIMIT {
        return Err(Problem::bad(format!("at most {MAX_LIMIT} ids")));
    }
    let r = run(&app, move |n| n.feedback(&c.0.who, &b.ids, b.helpful)).await?;
    ok(json!({"updated": r.memories, "links": r.links, "associations": r.associations}))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SearchQuery {
    q: String,
    k: Option<usize>,
    mode: Option<String>,
    since: Option<String>,
    until: Option<String>,
    valid_at: Option<String>,
    known_at: Option<String>,
}

/// `GET /v1/search?q=&k=&mode=&since=&until=&valid_at=&known_at=`:
/// `amos search`; `{"hits": [...]}`, best first.
pub(crate) async fn search(
    State(app): State<Arc<App>>,
    Extension(c): Extension<Caller>,
    QueryIn(q): QueryIn<SearchQuery>,
) -> Answer {
    let mode = crate::front::request::recall_mode(q.mode.as_deref())?;
    let hits = run(&app, move |n| {
        let time = TimeRequest {
            since: q.since,
            until: q.until,
            valid_at: q.valid_at,
            known_at: q.known_at,
        }
        .query(n.now_ms(), str::to_owned)?;
        let opts = RecallOptions {
            k: q.k.unwrap_or(DEFAULT_K),
            time,
            mode,
            ..RecallOptions::default()
        };
        n.search_with(&c.0.who, &q.q, &opts)
    })
    .await?;
    // Serialized straight from the hits (no `Value` in between): the bytes
    // `{"hits": [hit_json, ...]}` would be.
    #[derive(serde::Serialize)]
    struct Hits<'a> {
        hits: Vec<view::HitView<'a>>,
    }
    let hits = Hits {
        hits: hits.iter().map(view::HitView).collect(),
    };
    let body = serde_json::to_vec(&hits).map_err(|e| NodeError::Failed(format!("JSON: {e}")))?;
    Ok(json_body(StatusCode::OK, body))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PackBody {
    query: String,
    budget: Option<usize>,
    #[serde(default)]
    report: bool,
    mode: Option<String>,
    since: Option<String>,
    until: Option<String>,
    valid_at: Option<String>,
    known_at: Option<String>,
}

/// `POST /v1/pack`: `amos pack`, a context pack within a token budget.
pub(crate) async fn pack(
    State(app): State<Arc<App>>,
    Extension(c): Extension<Caller>,
    JsonIn(b): JsonIn<PackBody>,
) -> Answer {
    let budget = b.budget.unwrap_or(DEFAULT_BUDGET);
    if budget > MAX_BUDGET {
        return Err(Problem::bad(format!(
            "budget must be at most {MAX_BUDGET} tokens, not {budget}"
        )));
    }
    let mode = crate::front::request::recall_mode(b.mode.as_deref())?;
    let report = b.report;
    let p = run(&app, move |n| {
        let mut opts = PackOptions::new(budget);
        opts.recall.time = TimeRequest {
            since: b.since,
            until: b.until,
            valid_at: b.valid_at,
            known_at: b.known_at,
        }
        .query(n.now_ms(), str::to_owned)?;
        opts.recall.mode = mode;
        n.pack_with(&c.0.who, &b.query, &opts)
    })
    .await?;
    ok(view::pack_json(&p, report))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TimelineQuery {
    since: Option<String>,
    until: Option<String>,
    scope: Option<String>,
    limit: Option<usize>,
}

/// `GET /v1/timeline?since=&until=&scope=&limit=`: `amos timeline`.
pub(crate) async fn timeline(
    State(app): State<Arc<App>>,
    Extension(c): Extension<Caller>,
    QueryIn(q): QueryIn<TimelineQuery>,
) -> Answer {
    let limit = limit_of(q.limit)?;
    let events = run(&app, move |n| {
        let t = TimeRequest {
            since: q.since,
            until: q.until,
            ..TimeRequest::default()
        }
        .query(n.now_ms(), str::to_owned)?;
        let scope = q.scope.map(|s| n.resolve_scope(&s)).transpose()?;
        n.timeline(&c.0.who, t.since_ms, t.until_ms, scope.as_ref(), limit)
    })
    .await?;
    ok(json!({ "events": events }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ContextBody {
    content: String,
    ttl: Option<String>,
}

/// `PUT /v1/contexts/{name}` `{"content", "ttl"}`: park the agent's working
/// context under `name` (`memory_offload_context`), replacing the last.
pub(crate) async fn offload_context(
    State(app): State<Arc<App>>,
    Extension(c): Extension<Caller>,
    name: Result<Path<String>, PathRejection>,
    JsonIn(b): JsonIn<ContextBody>,
) -> Answer {
    let name = id_of(name)?;
    let parked = run(&app, move |n| {
        let expires = b
            .ttl
            .as_deref()
            .map(|t| crate::clock::parse_expiry(t, n.now_ms()))
            .transpose()?;
        n.offload_context(&c.0.who, &name, b.content, expires)
    })
    .await?;
    ok(view::context_json(&parked))
}

/// `GET /v1/contexts/{name}`: the agent's parked context `name`
/// (`memory_reload_context`); 404 `no_such_context` for a name it never
/// parked, or one only another agent parked.
pub(crate) async fn reload_context(
    State(app): State<Arc<App>>,
    Extension(c): Extension<Caller>,
    name: Result<Path<String>, PathRejection>,
) -> Answer {
    let name = id_of(name)?;
    let parked = run(&app, move |n| n.reload_context(&c.0.who, Some(&name))).await?;
    ok(view::context_json(&parked))
}

/// `GET /v1/contexts`: the agent's parked contexts, newest first, without
/// their text.
pub(crate) async fn contexts(
    State(app): State<Arc<App>>,
    Extension(c): Extension<Caller>,
) -> Answer {
    let all = run(&app, move |n| n.contexts(&c.0.who)).await?;
    ok(json!({"contexts": all.iter().map(view::context_summary_json).collect::<Vec<_>>()}))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ChangesQuery {
    since: String,
    limit: Option<usize>,
}

/// `GET /v1/changes?since=&limit=`: what changed for the agent since a
/// time (`memory_changes_since`).
pub(crate) async fn changes(
    State(app): State<Arc<App>>,
    Extension(c): Extension<Caller>,
    QueryIn(q): QueryIn<ChangesQuery>,
) -> Answer {
    let limit = limit_of(q.limit)?;
    let changes = run(&app, move |n| {
        let since = crate::clock::parse_time(&q.since, n.now_ms())?;
        n.changes_since(&c.0.who, since, limit)
    })
    .await?;
    ok(view::changes_json(&changes))
}

/// `GET /v1/consolidation`: what consolidation would merge among the
/// memories the agent sees (`memory_consolidate`); always a dry run.
pub(crate) async fn consolidation(
    State(app): State<Arc<App>>,
    Extension(c): Extension<Caller>,
) -> Answer {
    let r = run(&app, move |n| n.consolidation_preview(&c.0.who)).await?;
    ok(json!(r))
}
