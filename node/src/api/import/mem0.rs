//! Mem0's JSON export → [`Plan`]: a list of memory objects, or an object
//! holding one under `results`, `memories` or `data`. Each object has its
//! text under `memory`, `text` or `content`, and may carry `id` (else the
//! text is the key), `user_id`/`agent_id` (kept as a tag), `metadata`
//! (string values of `categories` become tags) and `created_at`.
//!
//! Every memory is owned by the agent named with `--as`, with the grants of
//! `--share` (private by default). Pure: never touches the node.

use std::path::Path;

use amos_protocol::{AgentId, Scope};
use serde_json::Value;

use super::{Plan, PlanMemory, Source, bad_line, parse_time};
use crate::error::{NodeError, Result};

/// Read a JSON file whole; a syntax error names its line.
pub(super) fn read_json(path: &Path) -> Result<Value> {
    let name = path.display().to_string();
    let bytes =
        std::fs::read(path).map_err(|e| NodeError::BadInput(format!("cannot read {name}: {e}")))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| bad_line(&name, e.line().max(1), format!("not JSON: {e}")))
}

pub(super) fn first<'a>(o: &'a Value, keys: &[&str]) -> Option<&'a Value> {
    keys.iter()
        .filter_map(|k| o.get(*k))
        .find(|v| !v.is_null() && v.as_str() != Some(""))
}

/// Read a mem0 export at `path` as memories of `owner` with the grants
/// `share`.
pub fn read(path: &Path, owner: &AgentId, share: &[Scope]) -> Result<Plan> {
    let name = path.display().to_string();
    let data = read_json(path)?;
    let rows = match &data {
        Value::Array(a) => a,
        Value::Object(_) => match first(&data, &["results", "memories", "data"]) {
            Some(Value::Array(a)) => a,
            _ => {
                return Err(NodeError::BadInput(format!(
                    "{name}: not a Mem0 export: no list of memories (expected a list, or results/memories)"
                )));
            }
        },
        _ => {
            return Err(NodeError::BadInput(format!(
                "{name}: not a Mem0 export: expected a list or an object"
            )));
        }
    };
    let mut plan = Plan::new(Source::Mem0);
    for (i, row) in rows.iter().enumerate() {
        let at = || format!("{name}: memory {}", i + 1);
        if !row.is_object() {
            return Err(NodeError::BadInput(format!("{}: not an object", at())));
        }
        let Some(text) = first(row, &["memory", "text", "content"]).and_then(Value::as_str) else {
            return Err(NodeError::BadInput(format!(
                "{}: no text (memory, text or content)",
                at()
            )));
        };
        let key = match first(row, &["id", "hash"]) {
            Some(Value::String(s)) => s.clone(),
            Some(v @ Value::Number(_)) => v.to_string(),
            _ => format!("text:{text}"),
        };
        let mut tags = Vec::new();
        if let Some(u) = first(row, &["user_id", "agent_id"]).and_then(Value::as_str) {
            tags.push(format!("mem0-user:{u}"));
        }
        let cats = row
            .get("categories")
            .or_else(|| row.get("metadata").and_then(|m| m.get("categories")));
        if let Some(Value::Array(c)) = cats {
            tags.extend(c.iter().filter_map(|c| c.as_str().map(str::to_owned)));
        }
        let created_ms = match first(row, &["created_at", "timestamp"]) {
            None => None,
            Some(v) => {
                let t = v
                    .as_str()
                    .map(str::to_owned)
                    .or_else(|| v.as_f64().map(|f| f.to_string()));
                match t.as_deref().and_then(parse_time) {
                    Some(t) => Some(t),
                    None => {
                        plan.unmapped(format!("created_at {v} is not a time: left out"));
                        None
                    }
                }
            }
        };
        plan.memories.push(PlanMemory::of_agent(
            owner,
            &key,
            text.to_owned(),
            share,
            tags,
            created_ms,
        ));
    }
    Ok(plan)
}
