//! Printing: `--json` objects with CLI.md's field names, or short text.

use amos_node::ops::HygieneReport;
use amos_node::store::memory::MemoryRecord;
pub use amos_node::view::{hit_json, memory_json, rfc3339};
use serde::Serialize;

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
