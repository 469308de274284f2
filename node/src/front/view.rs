//! JSON views of what recall returns: the one shape of a memory, a hit and
//! a context pack, printed by the CLI's `--json` and returned by the MCP
//! tools (the field names of docs/cli.md).
//!
//! Boundary: renders only what came through the gate: every function takes
//! a `Visible<MemoryRecord>` (directly, or inside a [`Hit`] or a [`Pack`],
//! which hold only `Visible` memories); never reads the store.

use amos_acl::Visible;
use serde_json::{Value, json};

use crate::recall::{Hit, Pack};
use crate::store::memory::MemoryRecord;

pub fn rfc3339(ms: u64) -> String {
    humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
        .to_string()
}

/// A memory object: `id, content, owner, type, visibility, tags, importance,
/// confidence, pinned, created, updated, expires, origin`.
pub fn memory_json(m: &Visible<MemoryRecord>) -> Value {
    json!({
        "id": m.id.to_string(),
        "content": m.content,
        "owner": m.owner.as_str(),
        "type": m.kind.as_str(),
        "visibility": m.effective.to_strings(),
        "tags": m.tags,
        "importance": m.importance,
        "confidence": m.confidence,
        "pinned": m.pinned,
        "created": rfc3339(m.created_ms),
        "updated": rfc3339(m.updated_ms),
        "expires": m.expires_ms.map(rfc3339),
        "origin": m.origin.to_string(),
        "archived": m.archived,
    })
}

/// A search hit: the memory object plus `score`, `relevance` and `explain`
/// (every factor of the score).
pub fn hit_json(h: &Hit) -> Value {
    let mut v = memory_json(&h.memory);
    v["score"] = json!(h.score);
    v["relevance"] = json!(h.relevance);
    v["explain"] = json!(h.explain);
    v
}

/// A context pack: `{"items": [...], "tokens", "budget", "reserved",
/// "conflicts"}` plus `"report"` when asked; items carry `conflict_with`.
pub fn pack_json(p: &Pack, report: bool) -> Value {
    let items: Vec<Value> = p
        .items
        .iter()
        .map(|h| {
            let mut v = hit_json(h);
            v["conflict_with"] = json!(p.conflicts_of(&h.memory.id));
            v
        })
        .collect();
    let mut v = json!({
        "items": items,
        "tokens": p.tokens,
        "budget": p.budget,
        "reserved": p.reserved,
        "conflicts": p.conflicts,
    });
    if report {
        v["report"] = json!(p.report);
    }
    v
}
