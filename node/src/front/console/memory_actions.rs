//! The memory page's actions, each a POST form under the guard's CSRF and
//! session rules, one node API call as the agent named in the form, then a
//! redirect (303) back: edit (`amos update`), share/unshare, forget,
//! feedback (`amos feedback`), supersede (`amos supersede`) and pin/unpin.
//!
//! Must never: act but as the form's agent through the node API, whose
//! gate answers a memory that agent cannot see with "no such memory"
//! (404) before anything is written; or act on a GET.

use std::sync::Arc;

use amos_acl::AuthorizedScopes;
use axum::extract::{Path, State};
use axum::response::Response;
use serde::Deserialize;

use super::App;
use super::page::{FormIn, PageError, as_query, given, need_agent, see, urlencode, with_node};
use crate::api::Node;

/// The memory's page as `agent`.
fn page_of(id: &str, agent: &str) -> String {
    format!("/memories/{}?{}", urlencode(id), as_query(agent))
}

/// Run `f` on memory `id` as `agent`, then back to its page.
async fn as_agent<F>(app: &Arc<App>, agent: String, id: String, f: F) -> Result<Response, PageError>
where
    F: FnOnce(&mut Node, &AuthorizedScopes, &str) -> Result<(), PageError> + Send + 'static,
{
    let (a, i) = (agent.clone(), id.clone());
    with_node(app, move |node, _| {
        let who = node.requester(&a)?;
        f(node, &who, &i)
    })
    .await?;
    Ok(see(page_of(&id, &agent)))
}

#[derive(Deserialize)]
pub(crate) struct GrantForm {
    #[serde(rename = "as")]
    agent: Option<String>,
    scope: String,
    /// `share` or `unshare`.
    action: String,
}

/// `amos share` / `amos unshare`.
pub(crate) async fn grant(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    FormIn(f): FormIn<GrantForm>,
) -> Result<Response, PageError> {
    let agent = need_agent(&f.agent)?;
    let share = match f.action.as_str() {
        "share" => true,
        "unshare" => false,
        other => {
            return Err(PageError::bad(format!(
                "unknown action {other:?}: share or unshare"
            )));
        }
    };
    as_agent(&app, agent, id, move |node, who, id| {
        node.set_grant(who, id, f.scope.trim(), share)?;
        Ok(())
    })
    .await
}

#[derive(Deserialize)]
pub(crate) struct EditForm {
    #[serde(rename = "as")]
    agent: Option<String>,
    text: String,
}

/// `amos update`.
pub(crate) async fn edit(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    FormIn(f): FormIn<EditForm>,
) -> Result<Response, PageError> {
    let agent = need_agent(&f.agent)?;
    as_agent(&app, agent, id, move |node, who, id| {
        node.update(who, id, &f.text)?;
        Ok(())
    })
    .await
}

#[derive(Deserialize)]
pub(crate) struct AsForm {
    #[serde(rename = "as")]
    agent: Option<String>,
}

/// `amos forget`: then the agent's list.
pub(crate) async fn forget(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    FormIn(f): FormIn<AsForm>,
) -> Result<Response, PageError> {
    let agent = need_agent(&f.agent)?;
    let a = agent.clone();
    with_node(&app, move |node, _| {
        let who = node.requester(&a)?;
        node.forget(&who, &id)?;
        Ok(())
    })
    .await?;
    Ok(see(format!("/memories?{}", as_query(&agent))))
}

#[derive(Deserialize)]
pub(crate) struct FeedbackForm {
    #[serde(rename = "as")]
    agent: Option<String>,
    /// `helpful` or `unhelpful`.
    verdict: String,
}

/// `amos feedback ID --helpful|--unhelpful`: local-only reinforcement.
pub(crate) async fn feedback(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    FormIn(f): FormIn<FeedbackForm>,
) -> Result<Response, PageError> {
    let agent = need_agent(&f.agent)?;
    let helpful = match f.verdict.as_str() {
        "helpful" => true,
        "unhelpful" => false,
        other => {
            return Err(PageError::bad(format!(
                "unknown verdict {other:?}: helpful or unhelpful"
            )));
        }
    };
    as_agent(&app, agent, id, move |node, who, id| {
        node.feedback(who, &[id.to_owned()], helpful)?;
        Ok(())
    })
    .await
}

#[derive(Deserialize)]
pub(crate) struct SupersedeForm {
    #[serde(rename = "as")]
    agent: Option<String>,
    text: String,
    valid_from: Option<String>,
}

/// `amos supersede ID TEXT [--valid-from T]`: a new memory of the agent's
/// that replaces this one (its type and tags; its grants when the agent
/// owns it). Back to the replaced memory's page, which names it.
pub(crate) async fn supersede(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    FormIn(f): FormIn<SupersedeForm>,
) -> Result<Response, PageError> {
    let agent = need_agent(&f.agent)?;
    if f.text.trim().is_empty() {
        return Err(PageError::bad("the new memory's text is empty"));
    }
    as_agent(&app, agent, id, move |node, who, id| {
        let validity =
            crate::front::validity(given(&f.valid_from), None, node.now_ms(), &|l: &str| {
                l.replace('-', "_")
            })?;
        node.supersede(who, id, f.text, None, validity)?;
        Ok(())
    })
    .await
}

#[derive(Deserialize)]
pub(crate) struct PinForm {
    #[serde(rename = "as")]
    agent: Option<String>,
    /// `pin` or `unpin`.
    action: String,
}

/// Pin or unpin (owner only): a signed change of the memory's `pinned`.
pub(crate) async fn pin(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    FormIn(f): FormIn<PinForm>,
) -> Result<Response, PageError> {
    let agent = need_agent(&f.agent)?;
    let pinned = match f.action.as_str() {
        "pin" => true,
        "unpin" => false,
        other => {
            return Err(PageError::bad(format!(
                "unknown action {other:?}: pin or unpin"
            )));
        }
    };
    as_agent(&app, agent, id, move |node, who, id| {
        node.set_pinned(who, id, pinned)?;
        Ok(())
    })
    .await
}
