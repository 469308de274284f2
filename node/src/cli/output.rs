//! Printing: `--json` objects with the field names of docs/cli.md, or short text.
//!
//! Boundary: prints memories only as the gate handed them out (a
//! `Visible<MemoryRecord>`, or a `Hit`/`Pack` holding them); never reads the store.

use amos_acl::Visible;
use amos_node::api::{BackupReport, HygieneReport};
pub use amos_node::clock::rfc3339;
pub use amos_node::front::{hit_json, memory_json, one_line, pack_json};
use amos_node::recall::{Hit, Pack, TimeQuery};
use amos_node::store::MemoryRecord;
use serde::Serialize;

/// Where and how results are printed.
pub struct Out {
    pub json: bool,
    pub quiet: bool,
}

impl Out {
    /// Progress on stderr: never with `--json` or `-q`.
    pub fn feedback(&self) -> amos_node::Feedback {
        if self.json || self.quiet {
            amos_node::Feedback::Quiet
        } else {
            amos_node::Feedback::Auto
        }
    }

    /// Print `value` as JSON with `--json`, else `text()` unless `--quiet`.
    pub fn emit<T: Serialize + ?Sized>(&self, value: &T, text: impl FnOnce() -> String) {
        if self.json {
            match serde_json::to_string(value) {
                Ok(s) => say(&s),
                Err(e) => eprintln!("amos: cannot encode output: {e}"),
            }
        } else if !self.quiet {
            let t = text();
            if !t.is_empty() {
                say(&t);
            }
        }
    }
}

/// One line on stdout. A reader that has gone away is not this process's
/// failure: a command that prints and exits has SIGPIPE's default action
/// back and ends there (`cli::main`); `serve`, `console` and `mcp` keep
/// serving (`amos serve | head -1` must not stop the node), so the write's
/// error is dropped instead of panicking as `println!` would.
pub fn say(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

impl Out {
    /// Say that a command found nothing: one line on stderr, so that stdout
    /// stays empty for a script reading it (`--json` prints its empty list
    /// instead, `-q` nothing).
    pub fn nothing(&self, line: impl FnOnce() -> String) {
        if !self.json && !self.quiet {
            eprintln!("{}", line());
        }
    }
}

/// The time filters of a query as words, for the line an empty answer
/// prints: `" valid at T (…)"`, or `""` with none.
pub fn time_filters_text(q: &TimeQuery) -> String {
    let t = |ms: u64| amos_node::clock::rfc3339(ms);
    let mut parts = Vec::new();
    if let Some(ms) = q.since_ms {
        parts.push(format!("starting at or after {}", t(ms)));
    }
    if let Some(ms) = q.until_ms {
        parts.push(format!("starting at or before {}", t(ms)));
    }
    if let Some(ms) = q.valid_at_ms {
        parts.push(format!("valid at {}", t(ms)));
    }
    if let Some(ms) = q.known_at_ms {
        parts.push(format!("on record at {}", t(ms)));
    }
    if parts.is_empty() {
        return String::new();
    }
    let mut s = format!(" {}", parts.join(", "));
    if q.since_ms.is_some() || q.until_ms.is_some() || q.valid_at_ms.is_some() {
        s.push_str(" (a memory is valid from its creation unless --valid-from says otherwise)");
    } else {
        s.push_str(" (a memory is on record from when it was written)");
    }
    s
}

/// Search hits as text; with `explain`, a second line per hit with each factor.
pub fn hits_text(hits: &[Hit], explain: bool) -> String {
    let mut lines = Vec::new();
    for h in hits {
        lines.push(format!(
            "{:>7.3}  {}  [{}] {}: {}",
            h.score,
            h.memory.id(),
            h.memory.kind(),
            h.memory.owner(),
            one_line(h.memory.content(), 100)
        ));
        if explain {
            let e = &h.explain;
            let via = e
                .resonance
                .as_ref()
                .map(|p| {
                    format!(
                        " (resonance via {} over {} hop(s), link {:.2})",
                        p.via, p.hops, p.link
                    )
                })
                .unwrap_or_default();
            let superseded = e
                .superseded_by
                .as_ref()
                .map(|by| {
                    format!(
                        " × superseded {} (by {by})",
                        amos_node::recall::SUPERSEDED_FACTOR
                    )
                })
                .unwrap_or_default();
            let place = |r: Option<usize>| r.map_or_else(|| "-".to_owned(), |r| format!("#{r}"));
            let parts = format!(
                "lexical {} bm25 {:.4}; semantic {} cosine {}",
                place(e.direct.lexical_rank),
                e.direct.bm25,
                place(e.direct.semantic_rank),
                e.direct
                    .semantic
                    .map_or_else(|| "-".to_owned(), |c| format!("{c:.4}"))
            );
            lines.push(format!(
                "         relevance {:.4}{via} [{parts}] × importance {:.2} × confidence {:.2} × freshness {:.4} (age {:.1}d, half-life {:.1}d{}) × reinforcement {:.3} × profile {:.2}{superseded} = {:.6}",
                e.relevance,
                e.importance,
                e.confidence,
                e.freshness,
                e.age_days,
                e.half_life_days,
                if e.pinned { ", pinned: no decay" } else { "" },
                e.reinforcement,
                e.profile_weight,
                e.score
            ));
        }
    }
    lines.join("\n")
}

pub fn pack_text(p: &Pack, report: bool) -> String {
    let mut s: Vec<String> = p
        .items
        .iter()
        .map(|h| {
            let conflicts = p.conflicts_of(&h.memory.id());
            let mark = if conflicts.is_empty() {
                String::new()
            } else {
                format!(" [CONFLICT with {}]", conflicts.join(", "))
            };
            format!("- [{}] {}{mark}", h.memory.kind(), h.memory.content())
        })
        .collect();
    s.push(format!("({} of {} tokens)", p.tokens, p.budget));
    if report {
        for d in &p.report {
            s.push(format!(
                "{} {} ({} tokens): {}",
                if d.included { "+" } else { "-" },
                d.id,
                d.tokens,
                d.reason
            ));
        }
    }
    s.join("\n")
}

pub fn backup_text(r: &BackupReport) -> String {
    let mut lines = vec![format!("backed up to {} ({} bytes)", r.file, r.bytes)];
    lines.extend(r.removed.iter().map(|f| format!("removed old backup {f}")));
    lines.join("\n")
}

pub fn memory_text(m: &Visible<MemoryRecord>) -> String {
    format!(
        "{}\n  owner {}  type {}  visibility {}  importance {}{}\n  created {}\n{}",
        m.id(),
        m.owner(),
        m.kind(),
        m.visibility().join(","),
        m.importance(),
        if m.pinned() { "  pinned" } else { "" },
        rfc3339(m.created_ms()),
        m.content()
    )
}

pub fn hygiene_text(r: &HygieneReport) -> String {
    let mut lines: Vec<String> = r
        .actions
        .iter()
        .map(|a| match &a.into {
            Some(into) => format!(
                "{} {} → merged into {} ({})",
                a.action, a.id, into, a.reason
            ),
            None => format!("{} {} ({})", a.action, a.id, a.reason),
        })
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
