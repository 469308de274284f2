//! The console's gate in front of every route: a live session's cookie
//! ([`super::sessions`]), or a GET with the access token as `?token=`,
//! answered by a redirect (303) to the same address without it that sets a
//! new session's cookie; the Host header on a loopback console (DNS
//! rebinding); and for every request that is not a GET or HEAD the CSRF
//! token (form field `csrf` or header `X-CSRF-Token`) and a same-origin
//! check (`Sec-Fetch-Site`, `Origin`). It also stamps every answer with the
//! security headers and a `Server-Timing` header (the handler's time, for
//! the page-time figures).
//!
//! Must never: let a request past without a live session, or a
//! state-changing one without the CSRF token; put the token in a cookie
//! (every server on the console's host receives its cookies, whatever its
//! port) or echo it into a page.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::App;
use super::cookie::cookie;
use super::page::PageError;
use super::token::same;

/// The largest form the console reads.
pub const MAX_FORM: usize = 256 * 1024;

pub(crate) async fn guard(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let mut resp = match check(&app, req).await {
        Ok(Verdict::Pass(req)) => next.run(req).await,
        Ok(Verdict::Exchange { location, session }) => {
            let mut resp = Response::new(Body::empty());
            *resp.status_mut() = StatusCode::SEE_OTHER;
            if let Ok(v) = HeaderValue::from_str(&location) {
                resp.headers_mut().insert(header::LOCATION, v);
            }
            if let Some(secret) = session {
                let c = format!(
                    "{}={secret}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}",
                    app.cookie,
                    app.sessions.lifetime().as_secs()
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

/// What the gate does with a request.
enum Verdict {
    /// Let through (its body re-attached).
    Pass(Request),
    /// A GET with the access token: redirect to `location` (the same
    /// address without the token), setting this new session's cookie
    /// (`None`: the request's session is live already).
    Exchange {
        location: String,
        session: Option<String>,
    },
}

async fn check(app: &App, req: Request) -> Result<Verdict, PageError> {
    let headers = req.headers();
    if app.addr.ip().is_loopback() && !host_ok(app, headers) {
        return Err(PageError::new(
            StatusCode::FORBIDDEN,
            "this console answers only to its own address (Host header refused)",
        ));
    }
    let query = req.uri().query().map(form_urlencoded_pairs);
    let query_token = query
        .iter()
        .flatten()
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v.as_str());
    let get = matches!(*req.method(), Method::GET | Method::HEAD);
    let session_ok = cookie(headers, &app.cookie).is_some_and(|c| app.sessions.check(&c));
    // The token only ever opens a session, on a GET (the address the
    // console prints); it is never a credential by itself.
    if get && query_token.is_some_and(|t| same(t, &app.token)) {
        let rest: Vec<&(String, String)> = query
            .iter()
            .flatten()
            .filter(|(k, _)| k != "token")
            .collect();
        // One leading slash: `//host` or `/\host` would leave the console.
        let mut location = format!("/{}", req.uri().path().trim_start_matches(['/', '\\']));
        if !rest.is_empty() {
            location.push('?');
            location.push_str(&serde_urlencoded::to_string(&rest).unwrap_or_default());
        }
        return Ok(Verdict::Exchange {
            location,
            session: (!session_ok).then(|| app.sessions.open()),
        });
    }
    if !session_ok {
        return Err(PageError::new(
            StatusCode::UNAUTHORIZED,
            "the console needs its access token: open the URL `amos console --print-url` prints",
        ));
    }
    if get {
        return Ok(Verdict::Pass(req));
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
    Ok(Verdict::Pass(Request::from_parts(parts, Body::from(bytes))))
}

fn host_ok(app: &App, headers: &HeaderMap) -> bool {
    own_host(app.addr, headers)
}

/// Whether the request's Host names the loopback listener at `addr`
/// itself (its address, or localhost, 127.0.0.1 or [::1] with its port):
/// a page on a name rebound to 127.0.0.1 (DNS rebinding) sends its own.
/// The HTTP API's guard asks the same.
pub(crate) fn own_host(addr: std::net::SocketAddr, headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let port = addr.port();
    host == addr.to_string()
        || host == format!("localhost:{port}")
        || host == format!("127.0.0.1:{port}")
        || host == format!("[::1]:{port}")
}

fn form_urlencoded_pairs(s: &str) -> Vec<(String, String)> {
    serde_urlencoded::from_str::<Vec<(String, String)>>(s).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use super::super::sessions::Sessions;
    use super::super::{ConsoleOptions, bind_with, serve_on};
    use crate::api::node::Node;
    use crate::home::Home;

    use crate::clock::MovingClock as Moving;

    /// One plain HTTP/1.1 GET: the answer's head (status line and headers).
    fn get(port: u16, path: &str, cookie: Option<&str>) -> String {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let cookie = cookie
            .map(|c| format!("Cookie: {c}\r\n"))
            .unwrap_or_default();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{cookie}Connection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        answer[..answer.find("\r\n\r\n").unwrap()].to_owned()
    }

    fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
        head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    /// The token is exchanged for a session: a redirect to the address
    /// without it, a cookie that holds a fresh secret, never the token,
    /// which itself is no cookie; the session ends at its lifetime.
    #[test]
    fn the_token_buys_an_expiring_session_and_is_never_the_cookie() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::new(dir.path());
        Node::init(&home, Some("a")).unwrap();
        let clock = std::sync::Arc::new(Moving(AtomicU64::new(5_000_000)));
        let sessions = Sessions::new(Duration::from_secs(3600), clock.clone());
        let opts = ConsoleOptions {
            listen: "127.0.0.1:0".parse().unwrap(),
            allow_remote: false,
            serving: None,
        };
        let rt = crate::net::runtime().unwrap();
        let (listener, app) = rt.block_on(bind_with(&home, &opts, sessions)).unwrap();
        let (port, token) = (app.addr.port(), app.token.clone());
        rt.spawn(serve_on(listener, app, std::future::pending()));

        let head = get(port, &format!("/memories?as=alice&token={token}&q=x"), None);
        assert!(head.starts_with("HTTP/1.1 303"), "{head}");
        assert_eq!(header(&head, "location"), Some("/memories?as=alice&q=x"));
        let set = header(&head, "set-cookie").expect("a session cookie");
        assert!(!set.contains(&token), "the cookie holds no token: {set}");
        for attr in ["Path=/", "HttpOnly", "SameSite=Strict", "Max-Age=3600"] {
            assert!(set.contains(attr), "{attr}: {set}");
        }
        let session = set.split(';').next().unwrap().to_owned();
        let (name, secret) = session.split_once('=').unwrap();
        assert_eq!(name, format!("amos_console_{port}"));
        assert_eq!(secret.len(), 64);
        assert!(get(port, "/", Some(&session)).starts_with("HTTP/1.1 200"));
        // With a live session, the token is still stripped; no new session.
        let again = get(port, &format!("/?token={token}"), Some(&session));
        assert!(again.starts_with("HTTP/1.1 303"), "{again}");
        assert_eq!(header(&again, "location"), Some("/"));
        assert_eq!(header(&again, "set-cookie"), None);
        // The token in a cookie (what the cookie held before) opens nothing.
        let as_cookie = format!("{name}={token}");
        assert!(get(port, "/", Some(&as_cookie)).starts_with("HTTP/1.1 401"));
        // `//host` never leaves the console.
        let odd = get(port, &format!("//evil.example/?token={token}"), None);
        assert_eq!(header(&odd, "location"), Some("/evil.example/"), "{odd}");

        clock.0.store(5_000_000 + 3_599_999, Ordering::Relaxed);
        assert!(get(port, "/", Some(&session)).starts_with("HTTP/1.1 200"));
        clock.0.store(5_000_000 + 3_600_000, Ordering::Relaxed);
        let expired = get(port, "/", Some(&session));
        assert!(expired.starts_with("HTTP/1.1 401"), "expired: {expired}");
    }
}
