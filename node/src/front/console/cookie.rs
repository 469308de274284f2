//! Reading a request's cookies: the session's (`guard`) and the chosen
//! language's (`i18n`). Must never: set a cookie or decide what one means.

use axum::http::{HeaderMap, header};

/// The value of the cookie `name`, if the request carries it.
pub(super) fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}
