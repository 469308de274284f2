//! The gate in front of every route of `amos serve --http`: the Host
//! header on a loopback listener (DNS rebinding, as the console checks
//! it), no cross-site request (`Origin` other than the listener's own, or
//! `Sec-Fetch-Site` cross-site or same-site: 403), and a bearer token
//! (`Authorization: Bearer amos_…`) that [`Node::authenticate`] accepts
//! (else 401 with `WWW-Authenticate`). The token's agent goes into the
//! request's extensions ([`Caller`] for the JSON API, [`RequestAgent`]
//! for MCP); nothing in a request can name another. Only the OpenAPI
//! document is served without a token (it holds no data). Every answer
//! gets `Cache-Control: no-store` and `X-Content-Type-Options: nosniff`.
//!
//! Must never: let a request past without a live token; log a token.
//!
//! [`Node::authenticate`]: crate::api::Node::authenticate

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::problem::Problem;
use super::{App, OPENAPI_PATH, run};
use crate::api::Authenticated;
use crate::front::console::guard::own_host;
use crate::front::mcp::RequestAgent;

/// The authenticated requester of a JSON API request.
#[derive(Debug, Clone)]
pub(crate) struct Caller(pub Authenticated);

pub(crate) async fn guard(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let mut resp = match check(&app, req).await {
        Ok(req) => next.run(req).await,
        Err(p) => p.into_response(),
    };
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    resp
}

async fn check(app: &Arc<App>, mut req: Request) -> Result<Request, Problem> {
    let headers = req.headers();
    if app.addr.ip().is_loopback() && !own_host(app.addr, headers) {
        return Err(Problem::new(
            StatusCode::FORBIDDEN,
            "bad_host",
            "this server answers only to its own address (Host header refused)",
        ));
    }
    if let Some(why) = cross_site(headers) {
        return Err(Problem::new(StatusCode::FORBIDDEN, "cross_site", why));
    }
    if req.uri().path() == OPENAPI_PATH {
        return Ok(req);
    }
    let Some(token) = bearer(headers) else {
        return Err(Problem::unauthorized(
            "a bearer token is needed: Authorization: Bearer <token> \
             (amos agent token create AGENT makes one)",
            false,
        ));
    };
    let authed = run(app, move |node| node.authenticate(&token)).await?;
    req.extensions_mut()
        .insert(RequestAgent(authed.agent.clone()));
    req.extensions_mut().insert(Caller(authed));
    Ok(req)
}

/// The token of `Authorization: Bearer TOKEN`, if that is what it holds.
fn bearer(headers: &HeaderMap) -> Option<String> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = v.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim().to_owned())
}

/// Why a request is refused as coming from another site, if it is: a
/// browser says so in `Sec-Fetch-Site`, or names another `Origin` than the
/// `Host` it addressed (over http, or https behind a proxy). A client
/// that is not a browser sends neither.
fn cross_site(headers: &HeaderMap) -> Option<String> {
    if let Some(site) = headers.get("sec-fetch-site") {
        let site = site.to_str().unwrap_or("");
        if site != "same-origin" && site != "none" {
            return Some(format!(
                "refused a {site} request: this API takes no requests from web pages of other sites"
            ));
        }
    }
    let origin = headers.get(header::ORIGIN)?;
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    let origin = origin.to_str().unwrap_or("");
    if origin == format!("http://{host}") || origin == format!("https://{host}") {
        return None;
    }
    Some(format!(
        "refused a request from origin {origin:?}: this API takes no requests from web pages of other sites"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn another_origin_or_a_cross_site_fetch_is_refused_and_a_plain_client_is_not() {
        let host = ("host", "127.0.0.1:8080");
        assert_eq!(cross_site(&headers(&[host])), None);
        assert_eq!(
            cross_site(&headers(&[host, ("origin", "http://127.0.0.1:8080")])),
            None
        );
        for bad in [
            "http://evil.example",
            "null",
            "http://127.0.0.1:8081",
            "http://127.0.0.1:8080.evil",
        ] {
            assert!(
                cross_site(&headers(&[host, ("origin", bad)])).is_some(),
                "{bad}"
            );
        }
        for site in ["cross-site", "same-site"] {
            assert!(cross_site(&headers(&[host, ("sec-fetch-site", site)])).is_some());
        }
        assert_eq!(
            cross_site(&headers(&[host, ("sec-fetch-site", "none")])),
            None
        );
    }

    #[test]
    fn only_a_bearer_authorization_holds_a_token() {
        assert_eq!(
            bearer(&headers(&[("authorization", "Bearer amos_x_y")])).as_deref(),
            Some("amos_x_y")
        );
        assert_eq!(
            bearer(&headers(&[("authorization", "bearer  amos_x ")])).as_deref(),
            Some("amos_x")
        );
        assert_eq!(bearer(&headers(&[("authorization", "Basic YTpi")])), None);
        assert_eq!(bearer(&headers(&[])), None);
    }
}
