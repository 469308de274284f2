//! Errors as RFC 9457 problem details (`application/problem+json`): the
//! HTTP status a [`NodeError`] maps to, a stable `code` to branch on, and
//! the node's one-line message as `detail`.
//!
//! Must never: tell a memory the requester cannot see from a missing one
//! (both are 404 `no_such_memory`); put a store's internal error in an
//! answer (a 500 says only that it failed; the log has the rest).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::error::{NodeError, Rule, UnknownKind};

/// One problem answer.
#[derive(Debug)]
pub(crate) struct Problem {
    pub status: StatusCode,
    /// Stable, snake case: `bad_input`, `no_such_memory`, `bad_token`, a
    /// refusal's rule code, …
    pub code: &'static str,
    pub detail: String,
    /// `WWW-Authenticate` (401 only).
    pub challenge: Option<String>,
}

impl Problem {
    pub fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> Problem {
        Problem {
            status,
            code,
            detail: detail.into(),
            challenge: None,
        }
    }

    /// 400 `bad_input`.
    pub fn bad(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::BAD_REQUEST, "bad_input", detail)
    }

    /// 401 with its challenge; `error` is RFC 6750's `invalid_token` when
    /// a token was presented and failed.
    pub fn unauthorized(detail: impl Into<String>, invalid_token: bool) -> Problem {
        let challenge = match invalid_token {
            true => r#"Bearer realm="amos", error="invalid_token""#,
            false => r#"Bearer realm="amos""#,
        };
        Problem {
            challenge: Some(challenge.to_owned()),
            ..Problem::new(StatusCode::UNAUTHORIZED, "bad_token", detail)
        }
    }

    /// 413: the body is larger than `limit` bytes.
    pub fn too_large(limit: usize) -> Problem {
        Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("the request body is larger than {limit} bytes"),
        )
    }
}

impl From<NodeError> for Problem {
    fn from(e: NodeError) -> Problem {
        let detail = e.to_string();
        match e {
            NodeError::BadInput(_) | NodeError::Protocol(_) => Problem::bad(detail),
            // A context is the requester's own, named in the path: missing.
            NodeError::Unknown {
                kind: UnknownKind::Context,
                ..
            } => Problem::new(StatusCode::NOT_FOUND, "no_such_context", detail),
            NodeError::Unknown { kind, .. } => Problem::new(
                StatusCode::BAD_REQUEST,
                match kind {
                    UnknownKind::Agent => "unknown_agent",
                    UnknownKind::Team => "unknown_team",
                    UnknownKind::Project => "unknown_project",
                    _ => "unknown_name",
                },
                detail,
            ),
            NodeError::NoSuchMemory(_) => {
                Problem::new(StatusCode::NOT_FOUND, "no_such_memory", detail)
            }
            NodeError::Refused {
                rule: Rule::BadToken,
                message,
            } => Problem::unauthorized(message, true),
            NodeError::Refused { rule, .. } => {
                Problem::new(StatusCode::FORBIDDEN, rule.code(), detail)
            }
            e => {
                tracing::warn!("http: a request failed: {e}");
                Problem::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "failed",
                    "the node could not complete the request (its log says why)",
                )
            }
        }
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let body = json!({
            "type": "about:blank",
            "title": self.status.canonical_reason().unwrap_or("Error"),
            "status": self.status.as_u16(),
            "detail": self.detail,
            "code": self.code,
        });
        let mut resp = (self.status, body.to_string()).into_response();
        let h = resp.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(c) = self.challenge.and_then(|c| HeaderValue::from_str(&c).ok()) {
            h.insert(header::WWW_AUTHENTICATE, c);
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_errors_map_to_their_status_and_code() {
        let cases: Vec<(NodeError, u16, &str)> = vec![
            (NodeError::BadInput("x".into()), 400, "bad_input"),
            (NodeError::NoSuchMemory("m".into()), 404, "no_such_memory"),
            (
                NodeError::refused(Rule::NotOwner, "only the owner".into()),
                403,
                "not_owner",
            ),
            (
                NodeError::refused(Rule::BadToken, "token revoked".into()),
                401,
                "bad_token",
            ),
            (NodeError::Corrupt("secret path".into()), 500, "failed"),
        ];
        for (e, status, code) in cases {
            let p = Problem::from(e);
            assert_eq!((p.status.as_u16(), p.code), (status, code), "{p:?}");
            assert!(!p.detail.contains("secret path"), "{p:?}");
        }
        let p = Problem::from(NodeError::refused(Rule::BadToken, "token revoked".into()));
        assert_eq!(p.detail, "token revoked");
        assert!(p.challenge.unwrap().contains("invalid_token"));
    }
}
