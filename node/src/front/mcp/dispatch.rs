//! MCP tool calls: arguments parsed (unknown fields refused), one node API
//! call as the requesting agent, the result rendered by `front/view.rs` as
//! text and `structuredContent`.
//!
//! Must never: decide anything the node API decides, or answer a memory the
//! agent cannot see differently from a missing one.

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use crate::api::node::Node;
use crate::error::{NodeError, Result};
use crate::front::request::{self, AddRequest, TimeRequest};
use crate::front::view;
use crate::recall::{DEFAULT_BUDGET, DEFAULT_K, PackOptions, RecallOptions};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    query: String,
    k: Option<usize>,
    since: Option<String>,
    until: Option<String>,
    valid_at: Option<String>,
    known_at: Option<String>,
    mode: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TimelineArgs {
    since: Option<String>,
    until: Option<String>,
    scope: Option<String>,
    limit: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IdArgs {
    id: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PackArgs {
    query: String,
    budget: Option<usize>,
    #[serde(default)]
    report: bool,
    since: Option<String>,
    until: Option<String>,
    valid_at: Option<String>,
    known_at: Option<String>,
    mode: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateArgs {
    id: String,
    content: Option<String>,
    valid_from: Option<String>,
    valid_to: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScopeArgs {
    id: String,
    scope: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkArgs {
    a: String,
    b: String,
    relation: Option<String>,
    weight: Option<f32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FeedbackArgs {
    ids: Vec<String>,
    helpful: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OffloadArgs {
    name: String,
    content: String,
    ttl: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReloadArgs {
    name: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChangesArgs {
    since: String,
    limit: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

/// The time filters of a recall tool.
fn time_of(
    since: Option<String>,
    until: Option<String>,
    valid_at: Option<String>,
    known_at: Option<String>,
    now_ms: u64,
) -> Result<crate::recall::TimeQuery> {
    TimeRequest {
        since,
        until,
        valid_at,
        known_at,
    }
    .query(now_ms, str::to_owned)
}

/// Arguments into a tool's struct; the error names the field at fault.
fn parse<T: DeserializeOwned>(tool: &str, args: Map<String, Value>) -> Result<T> {
    serde_path_to_error::deserialize(Value::Object(args)).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            NodeError::BadInput(format!("{tool}: {inner}"))
        } else {
            NodeError::BadInput(format!("{tool}: {path}: {inner}"))
        }
    })
}

/// The `mode` argument: hybrid when absent.
pub(super) fn dispatch(
    node: &mut Node,
    who: &amos_acl::AuthorizedScopes,
    tool: &str,
    args: Map<String, Value>,
) -> Result<(String, Value)> {
    match tool {
        "memory_add" => {
            let a: AddRequest = parse(tool, args)?;
            let new = a.memory_with(node.now_ms(), str::to_owned, |s| node.resolve_scope(s))?;
            let added = node.add_noting_similar(who, new)?;
            let mut text = format!("stored {}", added.id);
            for s in &added.similar {
                text.push_str(&format!(
                    "\nsimilar: {} ({:.2}) \"{}\" (memory_add with supersedes={} replaces it)",
                    s.id, s.similarity, s.excerpt, s.id
                ));
            }
            Ok((
                text,
                json!({"id": added.id.to_string(), "similar": added.similar}),
            ))
        }
        "memory_search" => {
            let a: SearchArgs = parse(tool, args)?;
            let opts = RecallOptions {
                k: a.k.unwrap_or(DEFAULT_K),
                time: time_of(a.since, a.until, a.valid_at, a.known_at, node.now_ms())?,
                mode: request::recall_mode(a.mode.as_deref())?,
                ..RecallOptions::default()
            };
            let hits = node.search_with(who, &a.query, &opts)?;
            let text = if hits.is_empty() {
                "no matching memories".to_owned()
            } else {
                hits.iter()
                    .map(|h| {
                        format!(
                            "{} [{}] (by {}, score {:.3}): {}",
                            h.memory.id, h.memory.kind, h.memory.owner, h.score, h.memory.content
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            Ok((
                text,
                json!({"hits": hits.iter().map(view::hit_json).collect::<Vec<_>>()}),
            ))
        }
        "memory_get" => {
            let a: IdArgs = parse(tool, args)?;
            let m = node.get(who, &a.id)?;
            Ok((
                format!("{} [{}] (by {}): {}", m.id, m.kind, m.owner, m.content),
                view::memory_json(&m),
            ))
        }
        "memory_context_pack" => {
            let a: PackArgs = parse(tool, args)?;
            let mut opts = PackOptions::new(a.budget.unwrap_or(DEFAULT_BUDGET));
            opts.recall.time = time_of(a.since, a.until, a.valid_at, a.known_at, node.now_ms())?;
            opts.recall.mode = request::recall_mode(a.mode.as_deref())?;
            let p = node.pack_with(who, &a.query, &opts)?;
            let mut lines: Vec<String> = p
                .items
                .iter()
                .map(|h| format!("- [{}] {}", h.memory.kind, h.memory.content))
                .collect();
            lines.push(format!("({} of {} tokens)", p.tokens, p.budget));
            Ok((lines.join("\n"), view::pack_json(&p, a.report)))
        }
        "memory_update" => {
            let a: UpdateArgs = parse(tool, args)?;
            let validity = match (&a.valid_from, &a.valid_to) {
                (None, None) => None,
                (from, to) => Some(request::validity(
                    from.as_deref(),
                    to.as_deref(),
                    node.now_ms(),
                    &str::to_owned,
                )?),
            };
            if a.content.is_none() && validity.is_none() {
                return Err(NodeError::BadInput(
                    "memory_update: give content, valid_from or valid_to".into(),
                ));
            }
            let id = node.revise(
                who,
                &a.id,
                a.content.as_deref(),
                validity,
                crate::api::DEFAULT_COMPACT_BYTES,
            )?;
            Ok((format!("updated {id}"), json!({"id": id.to_string()})))
        }
        "memory_timeline" => {
            let a: TimelineArgs = parse(tool, args)?;
            let now = node.now_ms();
            let q = TimeRequest {
                since: a.since,
                until: a.until,
                ..TimeRequest::default()
            }
            .query(now, str::to_owned)?;
            let scope = a.scope.map(|s| node.resolve_scope(&s)).transpose()?;
            let events = node.timeline(
                who,
                q.since_ms,
                q.until_ms,
                scope.as_ref(),
                a.limit.unwrap_or(100),
            )?;
            let text = if events.is_empty() {
                "no events".to_owned()
            } else {
                events
                    .iter()
                    .map(view::timeline_line)
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            Ok((text, json!({"events": events})))
        }
        "memory_share" | "memory_unshare" => {
            let a: ScopeArgs = parse(tool, args)?;
            let (id, grants) = node.set_grant(who, &a.id, &a.scope, tool == "memory_share")?;
            let shown = node.grant_labels(&grants);
            Ok((
                format!("{id} visible to {}", shown.join(",")),
                json!({"id": id.to_string(), "visibility": shown}),
            ))
        }
        "memory_forget" => {
            let a: IdArgs = parse(tool, args)?;
            let id = node.forget(who, &a.id)?;
            Ok((format!("forgot {id}"), json!({"id": id.to_string()})))
        }
        "memory_link" => {
            let a: LinkArgs = parse(tool, args)?;
            node.link(
                who,
                &a.a,
                &a.b,
                a.relation.as_deref(),
                a.weight.unwrap_or(1.0),
            )?;
            Ok((
                format!("linked {} and {}", a.a, a.b),
                json!({"from": a.a, "to": a.b}),
            ))
        }
        "memory_feedback" => {
            let a: FeedbackArgs = parse(tool, args)?;
            let r = node.feedback(who, &a.ids, a.helpful)?;
            Ok((
                format!(
                    "feedback recorded for {} memories, {} links and {} associations among them",
                    r.memories, r.links, r.associations
                ),
                json!({"updated": r.memories, "links": r.links, "associations": r.associations}),
            ))
        }
        "memory_offload_context" => {
            let a: OffloadArgs = parse(tool, args)?;
            let now = node.now_ms();
            let expires = a
                .ttl
                .as_deref()
                .map(|t| crate::clock::parse_expiry(t, now))
                .transpose()?;
            let c = node.offload_context(who, &a.name, a.content, expires)?;
            Ok((
                format!(
                    "parked context {} ({} bytes) as {}, until {}",
                    c.name,
                    c.content.len(),
                    c.id,
                    view::rfc3339(c.expires_ms)
                ),
                view::context_json(&c),
            ))
        }
        "memory_reload_context" => {
            let a: ReloadArgs = parse(tool, args)?;
            let c = node.reload_context(who, a.name.as_deref())?;
            let mut v = view::context_json(&c);
            v["contexts"] = json!(
                node.contexts(who)?
                    .iter()
                    .map(view::context_summary_json)
                    .collect::<Vec<_>>()
            );
            Ok((
                format!(
                    "context {} (parked {}):\n{}",
                    c.name,
                    view::rfc3339(c.parked_ms),
                    c.content
                ),
                v,
            ))
        }
        "memory_changes_since" => {
            let a: ChangesArgs = parse(tool, args)?;
            let since = crate::clock::parse_time(&a.since, node.now_ms())?;
            let c = node.changes_since(who, since, a.limit.unwrap_or(100))?;
            let mut lines: Vec<String> = c.changes.iter().map(view::change_line).collect();
            if lines.is_empty() {
                lines.push(format!("no changes since {}", view::rfc3339(c.since_ms)));
            }
            if c.truncated {
                lines.push("(more: ask again with a later since, or a higher limit)".into());
            }
            Ok((lines.join("\n"), view::changes_json(&c)))
        }
        "memory_consolidate" => {
            let _: NoArgs = parse(tool, args)?;
            let r = node.consolidation_preview(who)?;
            let text = if r.actions.is_empty() {
                "nothing to consolidate".to_owned()
            } else {
                r.actions
                    .iter()
                    .map(|a| format!("{} {}: {}", a.action, a.id, a.reason))
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            Ok((text, json!(r)))
        }
        other => Err(NodeError::BadInput(format!("unknown tool {other:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::super::catalog::as_object;
    use super::*;

    /// MCP reads a scope as every front end does (`Node::resolve_scope`): a
    /// prefix of a qualifier names the team, and the timeline's scope too.
    #[test]
    fn a_scope_is_resolved_by_the_node_as_the_cli_resolves_it() {
        let (_dir, _home, mut node, _) = crate::api::node::test_node("alice");
        let zeus = node.team_create("zeus", None).unwrap();
        node.team_member("zeus", "alice", true).unwrap();
        let who = node.requester("alice").unwrap();
        let q = zeus.qualifier().unwrap();
        let scope = format!("team:zeus@{}", &q[..4]);
        let (_, added) = dispatch(
            &mut node,
            &who,
            "memory_add",
            as_object(json!({"content": "zeus meets on fridays", "share": [scope.clone()]})),
        )
        .unwrap();
        let id = added["id"].as_str().unwrap().to_owned();
        let got = node.get(&who, &id).unwrap();
        let want: amos_protocol::Scope = format!("team:{zeus}").parse().unwrap();
        assert!(got.grants().contains(&want), "{:?}", got.grants());
        let (_, events) = dispatch(
            &mut node,
            &who,
            "memory_timeline",
            as_object(json!({"scope": scope})),
        )
        .unwrap();
        assert!(events.to_string().contains(&id), "{events}");
    }
}
