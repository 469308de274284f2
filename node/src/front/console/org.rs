//! `/org`: agents, teams, projects and memberships, editable — the
//! `amos agent`, `team` and `project` commands as forms.
//!
//! Must never: change the org graph but through those node API calls (the
//! authority checks are theirs).

use std::sync::Arc;

use askama::Template;
use axum::extract::{Extension, State};
use axum::response::Response;
use serde::Deserialize;

use super::App;
use super::i18n::Locale;
use super::page::{Chrome, FormIn, PageError, given, html, items, see, with_node};
use crate::store::org::{AgentInfo, ProjectInfo, TeamInfo};

#[derive(Template)]
#[template(path = "console/org.html")]
struct OrgPage {
    chrome: Chrome,
    agents: Vec<AgentInfo>,
    teams: Vec<TeamInfo>,
    projects: Vec<ProjectInfo>,
}

pub(crate) async fn show(
    State(app): State<Arc<App>>,
    Extension(loc): Extension<Locale>,
) -> Result<Response, PageError> {
    let p = with_node(&app, move |node, app| {
        Ok(OrgPage {
            chrome: Chrome::new(app, node, "org", "", &loc)?,
            agents: node.agent_list()?,
            teams: node.team_list()?,
            projects: node.project_list()?,
        })
    })
    .await?;
    html(&p)
}

#[derive(Deserialize)]
pub(crate) struct AgentForm {
    id: String,
    kind: Option<String>,
    /// Teams to join, comma- or space-separated.
    teams: Option<String>,
}

/// `amos agent add ID [--kind K] [--team T]...`.
pub(crate) async fn agent(
    State(app): State<Arc<App>>,
    FormIn(f): FormIn<AgentForm>,
) -> Result<Response, PageError> {
    with_node(&app, move |node, _| {
        let teams = given(&f.teams).map(items).unwrap_or_default();
        Ok(node.agent_add(f.id.trim(), given(&f.kind).unwrap_or("agent"), &teams)?)
    })
    .await?;
    Ok(see("/org".into()))
}

#[derive(Deserialize)]
pub(crate) struct TeamForm {
    id: String,
    name: Option<String>,
}

/// `amos team create ID [--name N]`.
pub(crate) async fn team(
    State(app): State<Arc<App>>,
    FormIn(f): FormIn<TeamForm>,
) -> Result<Response, PageError> {
    with_node(&app, move |node, _| {
        node.team_create(f.id.trim(), given(&f.name))?;
        Ok(())
    })
    .await?;
    Ok(see("/org".into()))
}

#[derive(Deserialize)]
pub(crate) struct ProjectForm {
    id: String,
    team: String,
    name: Option<String>,
}

/// `amos project create ID --team T [--name N]`.
pub(crate) async fn project(
    State(app): State<Arc<App>>,
    FormIn(f): FormIn<ProjectForm>,
) -> Result<Response, PageError> {
    with_node(&app, move |node, _| {
        node.project_create(f.id.trim(), f.team.trim(), given(&f.name))?;
        Ok(())
    })
    .await?;
    Ok(see("/org".into()))
}

#[derive(Deserialize)]
pub(crate) struct MemberForm {
    /// `team` or `project`.
    group: String,
    id: String,
    agent: String,
    /// `add` or `remove`.
    action: String,
}

/// `amos team|project add|remove ID AGENT`.
pub(crate) async fn member(
    State(app): State<Arc<App>>,
    FormIn(f): FormIn<MemberForm>,
) -> Result<Response, PageError> {
    let present = match f.action.as_str() {
        "add" => true,
        "remove" => false,
        other => {
            return Err(PageError::bad(format!(
                "unknown action {other:?}: add or remove"
            )));
        }
    };
    with_node(&app, move |node, _| {
        let (id, agent) = (f.id.trim(), f.agent.trim());
        match f.group.as_str() {
            "team" => Ok(node.team_member(id, agent, present)?),
            "project" => Ok(node.project_member(id, agent, present)?),
            other => Err(PageError::bad(format!(
                "unknown group {other:?}: team or project"
            ))),
        }
    })
    .await?;
    Ok(see("/org".into()))
}

#[derive(Deserialize)]
pub(crate) struct DeleteForm {
    /// `team` or `project`.
    group: String,
    id: String,
}

/// `amos team delete ID` / `amos project delete ID`.
pub(crate) async fn delete(
    State(app): State<Arc<App>>,
    FormIn(f): FormIn<DeleteForm>,
) -> Result<Response, PageError> {
    with_node(&app, move |node, _| match f.group.as_str() {
        "team" => Ok(node.team_delete(f.id.trim())?),
        "project" => Ok(node.project_delete(f.id.trim())?),
        other => Err(PageError::bad(format!(
            "unknown group {other:?}: team or project"
        ))),
    })
    .await?;
    Ok(see("/org".into()))
}
