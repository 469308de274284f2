//! The declared agent fleet: `<home>/agents.toml`, applied at every start of
//! `amos mcp` and `amos serve`, and by `amos agent apply`.
//!
//! ```toml
//! [agents.alice]
//! kind = "claude-code"
//! teams = ["apollo"]
//! projects = ["apollo-ui"]
//! ```
//!
//! Invariant: a declared agent ends with exactly the declared kind, teams and
//! projects (the file is authoritative for it); agents the file does not
//! name are never touched. Applying an unchanged file writes nothing (no
//! new facts, so the digest does not move).
//! Boundary: only the node's org-graph API; no visibility rules here.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::api::node::Node;
use crate::error::{NodeError, Result};
use crate::home::Home;

/// One declared agent.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeclaredAgent {
    /// What kind of agent it is (default `agent`).
    #[serde(default = "default_kind")]
    pub kind: String,
    /// The teams it is a member of, exactly.
    #[serde(default)]
    pub teams: BTreeSet<String>,
    /// The projects it is a member of, exactly.
    #[serde(default)]
    pub projects: BTreeSet<String>,
}

fn default_kind() -> String {
    "agent".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FleetFile {
    #[serde(default)]
    agents: BTreeMap<String, DeclaredAgent>,
}

/// What applying the file changed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FleetReport {
    /// Whether `agents.toml` exists.
    pub file: bool,
    /// Agents the file declares.
    pub declared: usize,
    /// One line per change, e.g. `alice: joined team apollo`.
    pub changes: Vec<String>,
}

/// Read and apply `<home>/agents.toml` (no file: nothing to do).
pub fn apply(node: &mut Node, home: &Home) -> Result<FleetReport> {
    let path = home.root().join("agents.toml");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(FleetReport::default()),
        Err(e) => return Err(NodeError::io(format!("reading {}", path.display()))(e)),
    };
    let fleet: FleetFile = toml::from_str(&text).map_err(|e| {
        let msg = e.message().to_owned();
        NodeError::BadInput(format!("{}: {msg}", path.display()))
    })?;
    let mut report = FleetReport {
        file: true,
        declared: fleet.agents.len(),
        changes: Vec::new(),
    };
    // Check everything before changing anything.
    let teams: BTreeSet<String> = node.team_list()?.into_iter().map(|t| t.id).collect();
    let projects: BTreeMap<String, String> = node
        .project_list()?
        .into_iter()
        .map(|p| (p.id, p.team))
        .collect();
    for (id, want) in &fleet.agents {
        let bad =
            |why: String| NodeError::BadInput(format!("{}: agent {id}: {why}", path.display()));
        amos_protocol::AgentId::parse(id).map_err(|e| bad(e.to_string()))?;
        if let Some(t) = want.teams.iter().find(|t| !teams.contains(*t)) {
            return Err(bad(format!("unknown team {t}")));
        }
        for p in &want.projects {
            match projects.get(p) {
                None => return Err(bad(format!("unknown project {p}"))),
                Some(team) if !want.teams.contains(team) => {
                    return Err(bad(format!(
                        "project {p} belongs to team {team}, which the agent is not declared in"
                    )));
                }
                Some(_) => {}
            }
        }
    }
    let current: BTreeMap<String, crate::store::org::AgentInfo> = node
        .agent_list()?
        .into_iter()
        .map(|a| (a.id.clone(), a))
        .collect();
    for (id, want) in &fleet.agents {
        let have = current.get(id);
        let have_teams: BTreeSet<String> = have
            .map(|a| a.teams.iter().cloned().collect())
            .unwrap_or_default();
        let have_projects: BTreeSet<String> = have
            .map(|a| a.projects.iter().cloned().collect())
            .unwrap_or_default();
        if have.is_none_or(|a| a.kind != want.kind) {
            node.agent_add(id, &want.kind, &[])?;
            report.changes.push(match have {
                None => format!("{id}: added ({})", want.kind),
                Some(_) => format!("{id}: kind is now {}", want.kind),
            });
        }
        // Leave projects first (a project needs its team), then teams; join
        // teams first, then projects.
        for p in have_projects.difference(&want.projects) {
            node.project_member(p, id, false)?;
            report.changes.push(format!("{id}: left project {p}"));
        }
        for t in have_teams.difference(&want.teams) {
            node.team_member(t, id, false)?;
            report.changes.push(format!("{id}: left team {t}"));
        }
        for t in want.teams.difference(&have_teams) {
            node.team_member(t, id, true)?;
            report.changes.push(format!("{id}: joined team {t}"));
        }
        for p in want.projects.difference(&have_projects) {
            node.project_member(p, id, true)?;
            report.changes.push(format!("{id}: joined project {p}"));
        }
    }
    Ok(report)
}
