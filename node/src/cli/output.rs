//! Printing: `--json` objects with CLI.md's field names, or short text.

use amos_node::ops::HygieneReport;
use amos_node::recall::Hit;
use amos_node::store::memory::MemoryRecord;
use serde::Serialize;
use serde_json::{Value, json};

/// Where and how results are printed.
pub struct Out {
    pub json: bool,
    pub quiet: bool,
}

impl Out {
    /// Print `value` as JSON with `--json`, else `text()` unless `--quiet`.
    pub fn emit<T: Serialize + ?Sized>(&self, value: &T, text: impl FnOnce() -> String) {
        if self.json {
            match serde_json::to_string(value) {
                Ok(s) => println!("{s}"),
                Err(e) => eprintln!("amos: cannot encode output: {e}"),
            }
        } else if !self.quiet {
            let t = text();
            if !t.is_empty() {
                println!("{t}");
            }
        }
    }
}

pub fn rfc3339(ms: u64) -> String {
    humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
        .to_string()
}

/// A memory object: `id, content, owner, type, visibility, tags, importance,
/// confidence, pinned, created, updated, expires, origin`.
pub fn memory_json(m: &MemoryRecord) -> Value {
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

/// A search hit: the memory object plus `score` and `relevance`.
pub fn hit_json(h: &Hit) -> Value {
    let mut v = memory_json(&h.memory);
    v["score"] = json!(h.score);
    v["relevance"] = json!(h.relevance);
    v
}

pub fn memory_text(m: &MemoryRecord) -> String {
    format!(
        "{}\n  owner {}  type {}  visibility {}  importance {}{}\n  created {}\n{}",
        m.id,
        m.owner,
        m.kind,
        m.effective,
        m.importance,
        if m.pinned { "  pinned" } else { "" },
        rfc3339(m.created_ms),
        m.content
    )
}

pub fn one_line(s: &str, max: usize) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > max {
        format!("{}…", flat.chars().take(max).collect::<String>())
    } else {
        flat
    }
}

pub fn hygiene_text(r: &HygieneReport) -> String {
    let mut lines: Vec<String> = r
        .actions
        .iter()
        .map(|a| format!("{} {} ({})", a.action, a.id, a.reason))
        .collect();
    lines.push(if r.applied {
        format!("applied {} actions", r.actions.len())
    } else {
        format!(
            "dry run: {} actions (pass --apply to apply)",
            r.actions.len()
        )
    });
    lines.join("\n")
}
