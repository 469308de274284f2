//! ChatGPT's data export → [`Plan`]: `conversations.json` (a list of
//! conversations, each a `mapping` of message nodes; the user's turns
//! become memories, tagged with the conversation's title) and, when the
//! export has one, `memory.json` (ChatGPT's saved memories: a list of
//! strings or objects with `content`/`text`/`memory`, or an object holding
//! one under `memories`). FILE is either file or the export's directory.
//!
//! Every memory is owned by the agent named with `--as`, with the grants of
//! `--share` (private by default). Pure: never touches the node.

use std::path::Path;

use amos_protocol::{AgentId, Scope};
use serde_json::Value;

use super::mem0::{first, read_json};
use super::{Plan, PlanMemory, Source, export_files, parse_time};
use crate::error::{NodeError, Result};

/// Read a ChatGPT export (a file or its directory) at `path` as memories
/// of `owner` with the grants `share`.
pub fn read(path: &Path, owner: &AgentId, share: &[Scope]) -> Result<Plan> {
    let mut plan = Plan::new(Source::Chatgpt);
    let mut files = export_files(
        path,
        &["conversations.json", "memory.json"],
        "a ChatGPT export",
    )?;
    // conversations.json with a memory.json beside it: both.
    if !path.is_dir()
        && path.file_name().is_some_and(|n| n == "conversations.json")
        && let Some(m) = path.parent().map(|d| d.join("memory.json"))
        && m.is_file()
    {
        files.push(m);
    }
    for f in files {
        read_one(&f, owner, share, &mut plan)?;
    }
    Ok(plan)
}

fn time(v: Option<&Value>) -> Option<u64> {
    match v? {
        Value::Number(n) => n.as_f64().and_then(|f| parse_time(&f.to_string())),
        Value::String(s) => parse_time(s),
        _ => None,
    }
}

fn read_one(path: &Path, owner: &AgentId, share: &[Scope], plan: &mut Plan) -> Result<()> {
    let name = path.display().to_string();
    let data = read_json(path)?;
    let not_it = |why: &str| NodeError::BadInput(format!("{name}: not a ChatGPT export: {why}"));
    // Saved memories.
    let entries = match &data {
        Value::Object(_) => first(&data, &["memories", "user_memories", "memory"]),
        Value::Array(a) if a.iter().all(|x| x.is_string()) => Some(&data),
        _ => None,
    };
    if let Some(entries) = entries {
        let Value::Array(entries) = entries else {
            return Err(not_it("memories is not a list"));
        };
        for (i, row) in entries.iter().enumerate() {
            let text = match row {
                Value::String(s) => Some(s.as_str()),
                Value::Object(_) => {
                    first(row, &["content", "text", "memory"]).and_then(Value::as_str)
                }
                _ => None,
            };
            let Some(text) = text.filter(|t| !t.trim().is_empty()) else {
                return Err(NodeError::BadInput(format!(
                    "{name}: memory {}: no text",
                    i + 1
                )));
            };
            let key = row
                .get("id")
                .and_then(Value::as_str)
                .map(|id| format!("memory:{id}"))
                .unwrap_or_else(|| format!("memory-text:{text}"));
            let created = time(first(row, &["created_at", "create_time", "updated_at"]));
            plan.memories.push(PlanMemory::of_agent(
                owner,
                &key,
                text.trim().to_owned(),
                share,
                vec!["chatgpt-memory".into()],
                created,
            ));
        }
        return Ok(());
    }
    // conversations.json: user turns.
    let Value::Array(convs) = &data else {
        return Err(not_it("expected a list of conversations"));
    };
    for (c, conv) in convs.iter().enumerate() {
        let Some(mapping) = conv.get("mapping").and_then(Value::as_object) else {
            return Err(NodeError::BadInput(format!(
                "{name}: conversation {}: no mapping of messages (not a ChatGPT conversations.json)",
                c + 1
            )));
        };
        let title: String = conv
            .get("title")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let conv_id = conv
            .get("id")
            .or_else(|| conv.get("conversation_id"))
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| format!("#{c}"));
        for (node_id, node) in mapping {
            let Some(msg) = node.get("message").filter(|m| m.is_object()) else {
                continue;
            };
            if msg.pointer("/author/role").and_then(Value::as_str) != Some("user") {
                continue;
            }
            let parts = msg
                .pointer("/content/parts")
                .and_then(Value::as_array)
                .map(|p| {
                    p.iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_default();
            if parts.trim().is_empty() {
                plan.unmapped("a user turn without text (an image or a file): left out".to_owned());
                continue;
            }
            let key = format!(
                "conversation:{conv_id}:{}",
                msg.get("id").and_then(Value::as_str).unwrap_or(node_id)
            );
            let mut tags = vec!["chatgpt".to_owned()];
            if !title.trim().is_empty() {
                tags.push(format!("chat:{title}"));
            }
            let created = time(msg.get("create_time")).or_else(|| time(conv.get("create_time")));
            plan.memories.push(PlanMemory::of_agent(
                owner,
                &key,
                parts.trim().to_owned(),
                share,
                tags,
                created,
            ));
        }
    }
    Ok(())
}
