//! The MCP tool catalog: each tool's name, description, input schema,
//! annotations (what it does to the store) and output schema (the shape of
//! its `structuredContent`, which `front/view.rs` renders and docs/cli.md
//! names).
//!
//! Must never: describe a tool [`super::dispatch`] does not answer, or a
//! result field the views do not render (it/mcp_describe.rs checks both).

use std::sync::Arc;

use rmcp::model::{Tool, ToolAnnotations};
use serde_json::{Map, Value, json};

pub(super) struct ToolSpec {
    pub(super) name: &'static str,
    description: &'static str,
    /// The input schema.
    schema: fn() -> Value,
    /// What the tool does to the store (its `annotations`).
    hints: Hints,
    /// The shape of its `structuredContent` (its `outputSchema`).
    output: fn() -> Value,
}

/// A tool's behaviour hints (MCP `ToolAnnotations`). Every amos tool acts
/// on this node's memory alone: `openWorldHint` is false for all.
#[derive(Clone, Copy)]
struct Hints {
    read_only: bool,
    destructive: bool,
    idempotent: bool,
}

/// Reads: change nothing an agent sees (recall's local-only counters aside,
/// docs/design.md §4.7); the same call again answers the same.
const READ: Hints = Hints {
    read_only: true,
    destructive: false,
    idempotent: true,
};
/// Writes that only add (a new memory, a feedback step).
const WRITE: Hints = Hints {
    read_only: false,
    destructive: false,
    idempotent: false,
};
/// Writes that only add, and leave the same state when repeated.
const WRITE_IDEMPOTENT: Hints = Hints {
    read_only: false,
    destructive: false,
    idempotent: true,
};
/// Writes that take something away (a grant, a memory), the same when
/// repeated.
const DESTRUCTIVE_IDEMPOTENT: Hints = Hints {
    read_only: false,
    destructive: true,
    idempotent: true,
};
/// Writes that take something away and add anew each time (parking a
/// context forgets the one it replaces).
const DESTRUCTIVE: Hints = Hints {
    read_only: false,
    destructive: true,
    idempotent: false,
};

impl Hints {
    fn annotations(self) -> ToolAnnotations {
        ToolAnnotations::new()
            .read_only(self.read_only)
            .destructive(self.destructive)
            .idempotent(self.idempotent)
            .open_world(false)
    }
}

const ID: &str = "memory id (a UUID, as returned by memory_add or memory_search)";

pub(super) const TOOLS: &[ToolSpec] = &[
    ToolSpec {
        name: "memory_add",
        hints: WRITE,
        output: add_out,
        description: "Store a new memory owned by you. It is private unless you share it: \
            share=[\"team:ID\"], [\"project:ID\"], [\"agent:ID\"] or [\"global\"]. Keep one \
            fact, decision, procedure or lesson per memory, written so it stands alone. \
            Returns the new id, and `similar`: up to 3 memories you can see that say \
            nearly the same (id, similarity, excerpt) — supersede one instead of adding a \
            contradiction.",
        schema: || {
            obj(
                json!({
                    "content": {"type": "string", "description": "the memory text (at most 64 KiB)"},
                    "type": {"type": "string", "description": "e.g. note, fact, decision, procedure, lesson, preference (default note)"},
                    "share": {"type": "array", "items": {"type": "string"}, "description": "scopes that may see it"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "importance": {"type": "number", "minimum": 0, "maximum": 1, "description": "default 0.5"},
                    "pin": {"type": "boolean", "description": "always recalled first, never decays"},
                    "expires": {"type": "string", "description": "duration (30d, 12h) or RFC 3339 time"},
                    "valid_from": {"type": "string", "description": "when this became true (RFC 3339, date, or offset like -7d; default now)"},
                    "valid_to": {"type": "string", "description": "when this stopped being true"},
                    "supersedes": {"type": "string", "description": "id of the memory this one replaces (it stays, marked superseded)"}
                }),
                &["content"],
            )
        },
    },
    ToolSpec {
        name: "memory_search",
        hints: READ,
        output: search_out,
        description: "Find the memories you may see that best match a query, ranked. Use \
            before answering questions about past work, decisions or procedures.",
        schema: || {
            obj(
                json!({
                    "query": {"type": "string"},
                    "k": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "how many (default 10)"},
                    "since": {"type": "string", "description": "only memories whose valid time starts at/after this (RFC 3339, date, or offset like -7d)"},
                    "until": {"type": "string", "description": "only memories whose valid time starts at/before this"},
                    "valid_at": {"type": "string", "description": "what was true then: superseded and ended memories drop out"},
                    "known_at": {"type": "string", "description": "answer with what was on record then"},
                    "mode": {"type": "string", "enum": ["hybrid", "lexical", "semantic", "fast"], "description": "candidates: hybrid (default: words and meaning, by the sentence encoder), lexical (words), semantic (meaning) or fast (words and the static model)"}
                }),
                &["query"],
            )
        },
    },
    ToolSpec {
        name: "memory_get",
        hints: READ,
        output: memory_schema,
        description: "Read one memory by id.",
        schema: || {
            obj(
                json!({"id": {"type": "string", "description": ID}}),
                &["id"],
            )
        },
    },
    ToolSpec {
        name: "memory_context_pack",
        hints: READ,
        output: pack_out,
        description: "The best memories for a task, fitted into a token budget with \
            near-duplicates left out; report=true explains each include/exclude decision.",
        schema: || {
            obj(
                json!({
                    "query": {"type": "string"},
                    "budget": {"type": "integer", "minimum": 1, "description": "tokens (default 1200)"},
                    "report": {"type": "boolean"},
                    "since": {"type": "string", "description": "only memories whose valid time starts at/after this (RFC 3339, date, or offset like -7d)"},
                    "until": {"type": "string", "description": "only memories whose valid time starts at/before this"},
                    "valid_at": {"type": "string", "description": "what was true then: superseded and ended memories drop out"},
                    "known_at": {"type": "string", "description": "answer with what was on record then"},
                    "mode": {"type": "string", "enum": ["hybrid", "lexical", "semantic", "fast"], "description": "candidates: hybrid (default: words and meaning, by the sentence encoder), lexical (words), semantic (meaning) or fast (words and the static model)"}
                }),
                &["query"],
            )
        },
    },
    ToolSpec {
        name: "memory_update",
        hints: WRITE_IDEMPOTENT,
        output: id_out,
        description: "Replace the text of a memory you own, or its valid time (valid_from, \
            valid_to), or both.",
        schema: || {
            obj(
                json!({
                    "id": {"type": "string", "description": ID},
                    "content": {"type": "string"},
                    "valid_from": {"type": "string"},
                    "valid_to": {"type": "string"}
                }),
                &["id"],
            )
        },
    },
    ToolSpec {
        name: "memory_timeline",
        hints: READ,
        output: timeline_out,
        description: "The memories you may see in the order they became true, with what \
            replaced what: for 'what did we decide last week' or 'what changed since'.",
        schema: || {
            obj(
                json!({
                    "since": {"type": "string", "description": "RFC 3339, date, or offset like -7d"},
                    "until": {"type": "string"},
                    "scope": {"type": "string", "description": "only memories shared with this scope (private, team:ID, ...)"},
                    "limit": {"type": "integer", "minimum": 1, "description": "most events (default 100)"}
                }),
                &[],
            )
        },
    },
    ToolSpec {
        name: "memory_share",
        hints: WRITE_IDEMPOTENT,
        output: grants_out,
        description: "Let a scope see a memory you own: team:ID, project:ID, agent:ID or global.",
        schema: scope_schema,
    },
    ToolSpec {
        name: "memory_unshare",
        hints: DESTRUCTIVE_IDEMPOTENT,
        output: grants_out,
        description: "Stop a scope from seeing a memory you own; replicas drop it too.",
        schema: scope_schema,
    },
    ToolSpec {
        name: "memory_forget",
        hints: DESTRUCTIVE_IDEMPOTENT,
        output: id_out,
        description: "Delete a memory you own, everywhere (a tombstone; it cannot come back).",
        schema: || {
            obj(
                json!({"id": {"type": "string", "description": ID}}),
                &["id"],
            )
        },
    },
    ToolSpec {
        name: "memory_link",
        hints: WRITE_IDEMPOTENT,
        output: link_out,
        description: "Associate two memories you can see, so recalling one brings the other.",
        schema: || {
            obj(
                json!({
                    "a": {"type": "string", "description": ID},
                    "b": {"type": "string", "description": ID},
                    "relation": {"type": "string", "description": "e.g. related, supports, contradicts (default related)"},
                    "weight": {"type": "number", "description": "link strength (default 1)"}
                }),
                &["a", "b"],
            )
        },
    },
    ToolSpec {
        name: "memory_feedback",
        hints: WRITE,
        output: feedback_out,
        description: "Say whether recalled memories helped (helpful=true) or not; this tunes \
            your future recall.",
        schema: || {
            obj(
                json!({
                    "ids": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                    "helpful": {"type": "boolean"}
                }),
                &["ids", "helpful"],
            )
        },
    },
    ToolSpec {
        name: "memory_offload_context",
        hints: DESTRUCTIVE,
        output: context_out,
        description: "Park your working context (what you are doing, what is left, what             you know) under a name, so your next session picks up where this one stopped             (memory_reload_context). Private to you; at most 32 KiB; expires (ttl, default             7d, at most 90d). Parking again under the same name replaces it.",
        schema: || {
            obj(
                json!({
                    "name": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,56}$", "description": "e.g. the task's name"},
                    "content": {"type": "string", "description": "the context (at most 32 KiB)"},
                    "ttl": {"type": "string", "description": "lifetime (12h, 7d; at most 90d) or RFC 3339 time (default 7d)"}
                }),
                &["name", "content"],
            )
        },
    },
    ToolSpec {
        name: "memory_reload_context",
        hints: READ,
        output: reload_out,
        description: "Bring back a working context you parked with memory_offload_context:             by name, or your newest when no name is given. Also lists the names you have parked.",
        schema: || {
            obj(
                json!({
                    "name": {"type": "string", "description": "the name it was parked under (default: your newest)"}
                }),
                &[],
            )
        },
    },
    ToolSpec {
        name: "memory_changes_since",
        hints: READ,
        output: changes_out,
        description: "What changed for you since a time: memories you may now see that you             could not then (added), ones you could see that were edited or superseded, and             ones you no longer may see (revoked: id only). For catching up at the start of a             session.",
        schema: || {
            obj(
                json!({
                    "since": {"type": "string", "description": "RFC 3339, date, or offset like -1d"},
                    "limit": {"type": "integer", "minimum": 1, "description": "most changes (default 100)"}
                }),
                &["since"],
            )
        },
    },
    ToolSpec {
        name: "memory_consolidate",
        hints: READ,
        output: consolidate_out,
        description: "Dry run: which of the memories you may see are duplicates or near-            duplicates of another (same owner, type and sharing) and would be merged into it.             Changes nothing; the node's operator applies it (amos consolidate --apply).",
        schema: || obj(json!({}), &[]),
    },
];

fn scope_schema() -> Value {
    obj(
        json!({
            "id": {"type": "string", "description": ID},
            "scope": {"type": "string", "description": "team:ID, project:ID, agent:ID or global"}
        }),
        &["id", "scope"],
    )
}

fn obj(properties: Value, required: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false
    })
}

pub(super) fn as_object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// The tool catalog as `tools/list` returns it: each tool with its input
/// and output schemas and its annotations.
pub fn tools() -> Vec<Tool> {
    TOOLS
        .iter()
        .map(|t| {
            Tool::new(t.name, t.description, Arc::new(as_object((t.schema)())))
                .with_raw_output_schema(Arc::new(as_object((t.output)())))
                .with_annotations(t.hints.annotations())
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Output schemas: the shapes of `structuredContent` (front/view.rs renders
// them; docs/cli.md names the same fields)

/// A closed object: exactly these properties, `required` among them.
fn out(properties: Value, required: &[&str]) -> Value {
    obj(properties, required)
}

fn string() -> Value {
    json!({"type": "string"})
}

fn nullable_string() -> Value {
    json!({"type": ["string", "null"]})
}

fn strings() -> Value {
    json!({"type": "array", "items": {"type": "string"}})
}

/// The memory object (`view::memory_json`).
fn memory_properties() -> Map<String, Value> {
    as_object(json!({
        "id": string(),
        "content": string(),
        "owner": string(),
        "type": string(),
        "visibility": strings(),
        "tags": strings(),
        "importance": {"type": "number"},
        "confidence": {"type": "number"},
        "pinned": {"type": "boolean"},
        "created": string(),
        "updated": string(),
        "expires": nullable_string(),
        "origin": string(),
        "archived": {"type": "boolean"},
        "valid_from": string(),
        "valid_to": nullable_string(),
        "supersedes": nullable_string()
    }))
}

fn memory_schema() -> Value {
    let props = memory_properties();
    let required: Vec<&str> = props.keys().map(String::as_str).collect();
    out(Value::Object(props.clone()), &required)
}

/// A hit (`view::hit_json`): the memory and its score.
fn hit_schema(extra: &[(&str, Value)]) -> Value {
    let mut props = memory_properties();
    props.insert("score".into(), json!({"type": "number"}));
    props.insert("relevance".into(), json!({"type": "number"}));
    props.insert("explain".into(), json!({"type": "object"}));
    for (k, v) in extra {
        props.insert((*k).into(), v.clone());
    }
    let required: Vec<&str> = props.keys().map(String::as_str).collect();
    out(Value::Object(props.clone()), &required)
}

fn add_out() -> Value {
    out(
        json!({
            "id": string(),
            "similar": {"type": "array", "items": out(json!({
                "id": string(),
                "similarity": {"type": "number"},
                "excerpt": string()
            }), &["id", "similarity", "excerpt"])}
        }),
        &["id", "similar"],
    )
}

fn search_out() -> Value {
    out(
        json!({"hits": {"type": "array", "items": hit_schema(&[])}}),
        &["hits"],
    )
}

fn pack_out() -> Value {
    out(
        json!({
            "items": {"type": "array", "items": hit_schema(&[("conflict_with", strings())])},
            "tokens": {"type": "integer", "minimum": 0},
            "budget": {"type": "integer", "minimum": 0},
            "reserved": {"type": "integer", "minimum": 0},
            "conflicts": {"type": "array", "items": {"type": "object"}},
            "report": {"type": "array", "items": {"type": "object"}}
        }),
        &["items", "tokens", "budget", "reserved", "conflicts"],
    )
}

fn id_out() -> Value {
    out(json!({"id": string()}), &["id"])
}

fn grants_out() -> Value {
    out(
        json!({"id": string(), "visibility": strings()}),
        &["id", "visibility"],
    )
}

fn link_out() -> Value {
    out(json!({"from": string(), "to": string()}), &["from", "to"])
}

fn feedback_out() -> Value {
    let n = json!({"type": "integer", "minimum": 0});
    out(
        json!({"updated": n, "links": n, "associations": n}),
        &["updated", "links", "associations"],
    )
}

fn timeline_out() -> Value {
    out(
        json!({"events": {"type": "array", "items": out(json!({
            "at_ms": {"type": "integer", "minimum": 0},
            "event": {"type": "string", "enum": ["starts", "superseded", "ends"]},
            "memory": string(),
            "owner": string(),
            "text": string(),
            "by": string()
        }), &["at_ms", "event", "memory", "owner", "text"])}}),
        &["events"],
    )
}

/// A parked context's summary (`view::context_summary_json`).
fn context_summary_schema() -> Value {
    out(
        json!({
            "name": string(),
            "id": string(),
            "parked": string(),
            "expires": string(),
            "bytes": {"type": "integer", "minimum": 0}
        }),
        &["name", "id", "parked", "expires", "bytes"],
    )
}

fn context_out() -> Value {
    out(
        json!({
            "id": string(),
            "name": string(),
            "content": string(),
            "parked": string(),
            "expires": string(),
            "bytes": {"type": "integer", "minimum": 0}
        }),
        &["id", "name", "content", "parked", "expires", "bytes"],
    )
}

fn reload_out() -> Value {
    let mut v = context_out();
    v["properties"]["contexts"] = json!({"type": "array", "items": context_summary_schema()});
    v["required"] = json!([
        "id", "name", "content", "parked", "expires", "bytes", "contexts"
    ]);
    v
}

fn changes_out() -> Value {
    out(
        json!({
            "since": string(),
            "until": string(),
            "truncated": {"type": "boolean"},
            "changes": {"type": "array", "items": out(json!({
                "kind": {"type": "string", "enum": ["added", "edited", "superseded", "revoked"]},
                "at": string(),
                "id": string(),
                "memory": memory_schema(),
                "by": string()
            }), &["kind", "at", "id"])}
        }),
        &["since", "until", "truncated", "changes"],
    )
}

fn consolidate_out() -> Value {
    out(
        json!({
            "applied": {"type": "boolean", "const": false},
            "actions": {"type": "array", "items": out(json!({
                "id": string(),
                "action": string(),
                "reason": string(),
                "into": string()
            }), &["id", "action", "reason"])}
        }),
        &["applied", "actions"],
    )
}
