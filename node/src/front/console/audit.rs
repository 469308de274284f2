//! `/audit`: facts refused from peers (newest first: peer, author, code,
//! reason — `amos audit`) and facts held back in quarantine (`amos status`).
//!
//! Must never: show more of a refused fact than the audit log keeps (no
//! content is kept there).

use std::sync::Arc;

use askama::Template;
use axum::extract::{Extension, State};
use axum::response::Response;
use serde::Deserialize;

use super::App;
use super::i18n::Locale;
use super::page::{Chrome, PageError, QueryIn, html, with_node};
use crate::front::view::rfc3339;
use crate::store::replica::{AuditEntry, DeferredInfo};

const MAX_LIMIT: usize = 10_000;

#[derive(Template)]
#[template(path = "console/audit.html")]
struct AuditPage {
    chrome: Chrome,
    refused: Vec<(String, AuditEntry)>,
    quarantined: Vec<DeferredInfo>,
    limit: usize,
}

#[derive(Deserialize)]
pub(crate) struct AuditQuery {
    limit: Option<usize>,
}

pub(crate) async fn show(
    State(app): State<Arc<App>>,
    Extension(loc): Extension<Locale>,
    QueryIn(q): QueryIn<AuditQuery>,
) -> Result<Response, PageError> {
    let limit = q.limit.unwrap_or(100);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(PageError::bad(format!(
            "limit must be between 1 and {MAX_LIMIT}"
        )));
    }
    let p = with_node(&app, move |node, app| {
        Ok(AuditPage {
            chrome: Chrome::new(app, node, "audit", "", &loc)?,
            refused: node
                .audit(limit)?
                .into_iter()
                .map(|e| (rfc3339(e.time_ms), e))
                .collect(),
            quarantined: node.quarantined()?,
            limit,
        })
    })
    .await?;
    html(&p)
}
