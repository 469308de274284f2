//! `amos demo`: a scripted single-node tour in a throw-away home — a team,
//! three agents, memories in every scope, and who recalls what.

use amos_node::{Home, NewMemory, Node};
use amos_protocol::Scope;
use anyhow::Result;
use serde_json::json;

use super::output::Out;

pub fn run(out: &Out) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let home = Home::new(dir.path().join("home"));
    Node::init(&home, Some("demo"))?;
    let mut node = Node::open(&home)?;
    node.team_create("apollo", Some("Apollo"))?;
    node.project_create("apollo-ui", "apollo", Some("Apollo UI"))?;
    for (agent, teams) in [
        ("alice", vec!["apollo"]),
        ("bob", vec!["apollo"]),
        ("carol", vec![]),
    ] {
        let teams: Vec<String> = teams.into_iter().map(String::from).collect();
        node.agent_add(agent, "agent", &teams)?;
    }
    node.project_member("apollo-ui", "alice", true)?;

    let alice = node.requester("alice")?;
    let memories: [(&str, Option<&str>); 5] = [
        (
            "deploy key rotation: alice keeps her staging deploy token in the vault",
            None,
        ),
        (
            "deploy runbook: the apollo team deploys on Tuesdays after the standup",
            Some("team:apollo"),
        ),
        (
            "deploy checklist for the apollo-ui project: run the visual tests first",
            Some("project:apollo-ui"),
        ),
        (
            "deploy tip for bob: the canary dashboard is in grafana",
            Some("agent:bob"),
        ),
        (
            "deploy policy: every deploy needs a green CI run",
            Some("global"),
        ),
    ];
    let mut rows = Vec::new();
    for (text, share) in memories {
        let mut m = NewMemory::new(text);
        m.share = share
            .map(|s| s.parse::<Scope>())
            .transpose()?
            .into_iter()
            .collect();
        let id = node.add(&alice, m)?;
        rows.push(json!({"id": id.to_string(), "scope": share.unwrap_or("private"), "text": text}));
    }
    let mut recalls = serde_json::Map::new();
    let mut text = vec![
        format!("demo node {} in a throw-away home", node.node_id().short()),
        "team apollo = alice, bob; project apollo-ui = alice; carol is in no team".into(),
        "alice wrote 5 memories about deploys, one in each scope:".into(),
    ];
    for r in &rows {
        text.push(format!(
            "  {:<20} {}",
            r["scope"].as_str().unwrap_or(""),
            r["text"].as_str().unwrap_or("")
        ));
    }
    text.push(String::new());
    text.push("who recalls what for the query \"deploy\":".into());
    for agent in ["alice", "bob", "carol"] {
        let who = node.requester(agent)?;
        let hits = node.search(&who, "deploy", 10)?;
        let seen: Vec<String> = hits
            .iter()
            .map(|h| h.memory.effective().to_string())
            .collect();
        text.push(format!(
            "  {agent:<6} sees {} memories: {}",
            hits.len(),
            seen.join(" | ")
        ));
        recalls.insert(agent.into(), json!(seen));
    }
    node.team_member("apollo", "bob", false)?;
    let bob = node.requester("bob")?;
    let after = node.search(&bob, "deploy", 10)?;
    text.push(format!(
        "after `amos team remove apollo bob`, bob sees {}: {}",
        after.len(),
        after
            .iter()
            .map(|h| h.memory.effective().to_string())
            .collect::<Vec<_>>()
            .join(" | ")
    ));
    out.emit(
        &json!({"node_id": node.node_id().to_string(), "memories": rows, "recalls": recalls,
                "bob_after_removal": after.iter().map(|h| h.memory.effective().to_string()).collect::<Vec<_>>()}),
        || text.join("\n"),
    );
    Ok(())
}
