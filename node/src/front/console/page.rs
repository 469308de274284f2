//! What every console page shares: the frame around it ([`Chrome`]), the
//! error page ([`PageError`], from a `NodeError` with the status its exit
//! code means), running node work on a blocking thread ([`with_node`]),
//! form and query extractors that answer bad input with 400, and the
//! embedded assets.
//!
//! Must never: render anything but through an askama template (which
//! escapes), or call the node outside [`with_node`].

use std::sync::Arc;

use askama::Template;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use serde::de::DeserializeOwned;

use super::App;
use super::i18n::{Lang, Locale};
use crate::api::node::Node;
use crate::error::NodeError;

/// The frame of every page: which page, its language, the CSRF token for
/// its forms, the agent acted as (if any), the agents to choose from, and a
/// message.
pub(crate) struct Chrome {
    pub page: &'static str,
    pub lang: Lang,
    /// This page's address without `lang` (the language switch's links).
    pub locale: Locale,
    pub csrf: String,
    pub agent: String,
    pub agents: Vec<String>,
    pub flash: Vec<String>,
}

impl Chrome {
    /// The frame for `page` in `locale`'s language, reading the agents
    /// from `node`.
    pub fn new(
        app: &App,
        node: &Node,
        page: &'static str,
        agent: &str,
        locale: &Locale,
    ) -> crate::Result<Chrome> {
        Ok(Chrome {
            page,
            lang: locale.lang,
            locale: locale.clone(),
            csrf: app.csrf.clone(),
            agent: agent.to_owned(),
            agents: node.agent_list()?.into_iter().map(|a| a.id).collect(),
            flash: Vec::new(),
        })
    }

    /// The catalogue's text for `key` in this page's language.
    pub fn t(&self, key: &str) -> &'static str {
        self.lang.t(key)
    }

    /// The languages to switch to: (tag, name, address, whether current).
    pub fn languages(&self) -> Vec<(&'static str, &'static str, String, bool)> {
        Lang::ALL
            .into_iter()
            .map(|l| (l.tag(), l.name(), self.locale.switch_to(l), l == self.lang))
            .collect()
    }
}

/// An error page with its status.
#[derive(Debug)]
pub(crate) struct PageError {
    pub status: StatusCode,
    pub message: String,
}

impl PageError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> PageError {
        PageError {
            status,
            message: message.into(),
        }
    }

    /// 400 with `message`.
    pub fn bad(message: impl Into<String>) -> PageError {
        PageError::new(StatusCode::BAD_REQUEST, message)
    }
}

impl From<NodeError> for PageError {
    fn from(e: NodeError) -> PageError {
        let status = match &e {
            NodeError::NoSuchMemory(_) => StatusCode::NOT_FOUND,
            NodeError::Refused { .. } => StatusCode::FORBIDDEN,
            // An unknown name here is one the request typed (`?as=`, a
            // form's agent or team), not the page its path names.
            NodeError::Unknown { .. }
            | NodeError::BadInput(_)
            | NodeError::Protocol(_)
            | NodeError::NotAHome(_) => StatusCode::BAD_REQUEST,
            NodeError::Unreachable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        PageError::new(status, e.to_string())
    }
}

#[derive(Template)]
#[template(path = "console/error.html")]
struct ErrorPage<'a> {
    lang: Lang,
    status: u16,
    reason: &'a str,
    message: &'a str,
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let page = ErrorPage {
            lang: super::i18n::current(),
            status: self.status.as_u16(),
            reason: self.status.canonical_reason().unwrap_or(""),
            message: &self.message,
        };
        match page.render() {
            Ok(body) => (self.status, Html(body)).into_response(),
            Err(_) => (self.status, self.message).into_response(),
        }
    }
}

/// Render a page.
pub(crate) fn html<T: Template>(t: &T) -> Result<Response, PageError> {
    t.render().map(|b| Html(b).into_response()).map_err(|e| {
        PageError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("rendering the page: {e}"),
        )
    })
}

/// After a change: back to `to` (303, so a reload does not repeat it).
pub(crate) fn see(to: String) -> Response {
    Redirect::to(&to).into_response()
}

/// Run `f` on the console's node on a blocking thread.
pub(crate) async fn with_node<T, F>(app: &Arc<App>, f: F) -> Result<T, PageError>
where
    F: FnOnce(&mut Node, &App) -> Result<T, PageError> + Send + 'static,
    T: Send + 'static,
{
    let app = app.clone();
    tokio::task::spawn_blocking(move || {
        let mut node = app.node.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut node, &app)
    })
    .await
    .map_err(|e| {
        PageError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("console task: {e}"),
        )
    })?
}

/// A form body; one that does not parse is 400 (not axum's 422).
pub(crate) struct FormIn<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for FormIn<T> {
    type Rejection = PageError;

    async fn from_request(req: Request, state: &S) -> Result<Self, PageError> {
        axum::Form::<T>::from_request(req, state)
            .await
            .map(|axum::Form(t)| FormIn(t))
            .map_err(|e| PageError::bad(e.body_text()))
    }
}

/// A query string; one that does not parse is 400.
pub(crate) struct QueryIn<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for QueryIn<T> {
    type Rejection = PageError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, PageError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(t)| QueryIn(t))
            .map_err(|e| PageError::bad(e.body_text()))
    }
}

/// `Some(trimmed)` unless blank.
pub(crate) fn given(s: &Option<String>) -> Option<&str> {
    s.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

/// The agent a request acts as (`as`), which it must name: else 400.
pub(crate) fn need_agent(a: &Option<String>) -> Result<String, PageError> {
    given(a)
        .map(str::to_owned)
        .ok_or_else(|| PageError::bad("choose the agent to act as (?as=AGENT)"))
}

/// Comma- or whitespace-separated items of a form field.
pub(crate) fn items(s: &str) -> Vec<String> {
    s.split([',', ' ', '\n', '\t'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// `?as=AGENT` for a link.
pub(crate) fn as_query(agent: &str) -> String {
    format!("as={}", urlencode(agent))
}

pub(crate) fn urlencode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

pub(crate) async fn script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("assets/console.js"),
    )
        .into_response()
}

pub(crate) async fn style() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("assets/console.css"),
    )
        .into_response()
}

pub(crate) async fn not_found() -> PageError {
    PageError::new(StatusCode::NOT_FOUND, "no such page")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Rule, UnknownKind};

    /// The console branches on what failed: a hidden memory is 404, a
    /// refusal 403, an unknown name or bad input 400, an unreachable peer
    /// 503, the rest 500; the message is the error's line.
    #[test]
    fn each_error_has_its_status() {
        let cases = [
            (NodeError::NoSuchMemory("m".into()), StatusCode::NOT_FOUND),
            (
                NodeError::refused(Rule::NotOwner, "x".into()),
                StatusCode::FORBIDDEN,
            ),
            (
                NodeError::unknown(UnknownKind::Agent, "mallory"),
                StatusCode::BAD_REQUEST,
            ),
            (NodeError::BadInput("x".into()), StatusCode::BAD_REQUEST),
            (
                NodeError::Unreachable {
                    peer: amos_protocol::NodeId([2; 32]),
                    message: "x".into(),
                },
                StatusCode::SERVICE_UNAVAILABLE,
            ),
            (
                NodeError::Corrupt("x".into()),
                StatusCode::INTERNAL_SERVER_ERROR,
            ),
        ];
        for (e, status) in cases {
            let line = e.to_string();
            let page = PageError::from(e);
            assert_eq!(page.status, status, "{line}");
            assert_eq!(page.message, line);
        }
    }
}
