//! The console's gate in front of every route: the access token (query
//! parameter or cookie; a valid query token sets the cookie), the Host
//! header on a loopback console (DNS rebinding), and for every request that
//! is not a GET or HEAD the CSRF token (form field `csrf` or header
//! `X-CSRF-Token`) and a same-origin check (`Sec-Fetch-Site`, `Origin`).
//! It also stamps every answer with the security headers and a
//! `Server-Timing` header (the handler's time, for the page-time figures).
//!
//! Must never: let a request past without the token, or a state-changing
//! one without the CSRF token; echo the token into a page.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::App;
use super::page::PageError;
use super::token::same;

/// The largest form the console reads.
pub const MAX_FORM: usize = 256 * 1024;

pub(crate) async fn guard(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let mut resp = match check(&app, req).await {
        Ok((req, set_cookie)) => {
            let mut resp = next.run(req).await;
            if set_cookie {
                let c = format!(
                    "{}={}; Path=/; HttpOnly; SameSite=Strict",
                    app.cookie, app.token
                );
                if let Ok(v) = HeaderValue::from_str(&c) {
                    resp.headers_mut().append(header::SET_COOKIE, v);
                }
            }
            resp
        }
        Err(e) => e.into_response(),
    };
    let h = resp.headers_mut();
    let timing = format!("app;dur={:.2}", started.elapsed().as_secs_f64() * 1000.0);
    if let Ok(v) = HeaderValue::from_str(&timing) {
        h.insert("server-timing", v);
    }
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // Not `no-referrer`: with it, browsers send `Origin: null` on form
    // posts, which the same-origin check would refuse; `same-origin` still
    // keeps a URL with the token from leaving for another site.
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    resp
}

/// The request, let through (its body re-attached), and whether the
/// answer should set the cookie.
async fn check(app: &App, req: Request) -> Result<(Request, bool), PageError> {
    let headers = req.headers();
    if app.addr.ip().is_loopback() && !host_ok(app, headers) {
        return Err(PageError::new(
            StatusCode::FORBIDDEN,
            "this console answers only to its own address (Host header refused)",
        ));
    }
    let query_token = req.uri().query().and_then(|q| {
        form_urlencoded_pairs(q)
            .into_iter()
            .find(|(k, _)| k == "token")
            .map(|(_, v)| v)
    });
    let cookie_ok = cookie(headers, &app.cookie).is_some_and(|c| same(&c, &app.token));
    let query_ok = query_token.as_deref().is_some_and(|t| same(t, &app.token));
    if !cookie_ok && !query_ok {
        return Err(PageError::new(
            StatusCode::UNAUTHORIZED,
            "the console needs its access token: open the URL `amos console --print-url` prints",
        ));
    }
    let set_cookie = query_ok && !cookie_ok;
    if matches!(*req.method(), Method::GET | Method::HEAD) {
        return Ok((req, set_cookie));
    }
    // State-changing: same origin only, and the CSRF token.
    if let Some(site) = headers.get("sec-fetch-site") {
        let site = site.to_str().unwrap_or("");
        if site != "same-origin" && site != "none" {
            return Err(PageError::new(
                StatusCode::FORBIDDEN,
                format!(
                    "refused a {site} request: the console takes changes from its own pages only"
                ),
            ));
        }
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        if origin.to_str().ok() != Some(&format!("http://{host}")) {
            return Err(PageError::new(
                StatusCode::FORBIDDEN,
                "refused a request from another origin: the console takes changes from its own pages only",
            ));
        }
    }
    let header_csrf = headers
        .get("x-csrf-token")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_FORM)
        .await
        .map_err(|_| PageError::bad(format!("the form is larger than {MAX_FORM} bytes")))?;
    let form_csrf = std::str::from_utf8(&bytes).ok().and_then(|b| {
        form_urlencoded_pairs(b)
            .into_iter()
            .find(|(k, _)| k == "csrf")
            .map(|(_, v)| v)
    });
    let ok = header_csrf
        .or(form_csrf)
        .is_some_and(|t| same(&t, &app.csrf));
    if !ok {
        return Err(PageError::new(
            StatusCode::FORBIDDEN,
            "missing or wrong CSRF token: reload the page and try again",
        ));
    }
    Ok((Request::from_parts(parts, Body::from(bytes)), false))
}

fn host_ok(app: &App, headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let port = app.addr.port();
    host == app.addr.to_string()
        || host == format!("localhost:{port}")
        || host == format!("127.0.0.1:{port}")
        || host == format!("[::1]:{port}")
}

fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

fn form_urlencoded_pairs(s: &str) -> Vec<(String, String)> {
    serde_urlencoded::from_str::<Vec<(String, String)>>(s).unwrap_or_default()
}
