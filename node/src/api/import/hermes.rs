//! Hermes' memory files → [`Plan`]: `MEMORY.md` (notes) and `USER.md`
//! (what it knows of its user, imported as type `preference`), entries
//! separated by a line holding only `§`. FILE is one such file or a
//! directory holding them (a Hermes profile's `memories/`). An entry's
//! key is its file kind and its text, so an edited file re-imports only
//! the entries that changed (the old ones stay; forget them by hand).
//!
//! Every memory is owned by the agent named with `--as`, with the grants of
//! `--share` (private by default). Pure: never touches the node.

use std::path::Path;

use amos_protocol::{AgentId, MemoryType, Scope};

use super::{Plan, PlanMemory, Source, bad_line, export_files};
use crate::error::{NodeError, Result};

/// The entries of a Hermes memory file.
pub fn sections(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        if line.trim() == "§" {
            if !cur.trim().is_empty() {
                out.push(cur.trim().to_owned());
            }
            cur.clear();
        } else {
            cur.push_str(line);
            cur.push('\n');
        }
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_owned());
    }
    out
}

/// Read Hermes' memory files (one file or a directory) at `path` as
/// memories of `owner` with the grants `share`.
pub fn read(path: &Path, owner: &AgentId, share: &[Scope]) -> Result<Plan> {
    let files = export_files(path, &["MEMORY.md", "USER.md"], "a Hermes memory directory")?;
    let mut plan = Plan::new(Source::Hermes);
    for f in files {
        let name = f.display().to_string();
        let bytes = std::fs::read(&f)
            .map_err(|e| NodeError::BadInput(format!("cannot read {name}: {e}")))?;
        let text = String::from_utf8(bytes).map_err(|e| {
            let line = 1 + e.as_bytes()[..e.utf8_error().valid_up_to()]
                .iter()
                .filter(|b| **b == b'\n')
                .count();
            bad_line(&name, line, "not UTF-8 text: not a Hermes memory file")
        })?;
        if let Some(i) = text.find('\0') {
            let line = 1 + text[..i].matches('\n').count();
            return Err(bad_line(
                &name,
                line,
                "a NUL byte: not a Hermes memory file",
            ));
        }
        let user = f
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.eq_ignore_ascii_case("USER.md"));
        let (kind, file_kind) = if user {
            (MemoryType::parse("preference")?, "user")
        } else {
            (MemoryType::default(), "memory")
        };
        for s in sections(&text) {
            plan.memories.push(PlanMemory {
                kind: kind.clone(),
                ..PlanMemory::of_agent(
                    owner,
                    &format!("{file_kind}:{s}"),
                    s.clone(),
                    share,
                    vec!["hermes".into(), format!("hermes-{file_kind}")],
                    None,
                )
            });
        }
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    #[test]
    fn sections_split_on_a_lone_section_sign() {
        let s = super::sections("a\nb\n§\n\n§\nc § d\n §  \ne\n");
        assert_eq!(s, vec!["a\nb", "c § d", "e"]);
    }
}
