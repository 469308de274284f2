//! JSON views of what recall returns: the one shape of a memory, a hit and
//! a context pack, printed by the CLI's `--json` and returned by the MCP
//! tools (the field names of docs/cli.md).
//!
//! Boundary: renders only what came through the gate: every function takes
//! a `Visible<MemoryRecord>` (directly, or inside a [`Hit`] or a [`Pack`],
//! which hold only `Visible` memories); never reads the store.

use amos_acl::Visible;
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Value, json};

use crate::api::{Changes, ContextSummary, ParkedContext, TimelineEntry, TimelineEvent};
use crate::recall::time::ValidTime;
use crate::recall::{Hit, Pack};
use crate::store::memory::MemoryRecord;

pub use crate::clock::rfc3339;

/// One peer's line of a sync pass, as `amos sync now` prints it.
pub fn outcome_line(o: &crate::events::PeerOutcome) -> String {
    match o.result {
        crate::events::SyncResult::Ok => format!(
            "{}  ok: {} facts in, {} out, {} B in, {} B out, {} ms{}",
            o.peer,
            o.facts_in,
            o.facts_out,
            o.bytes_in,
            o.bytes_out,
            o.ms,
            match o.digest_agree {
                Some(true) => ", digests agree",
                Some(false) => ", digests disagree",
                None => "",
            }
        ),
        r => format!(
            "{}  {}: {}",
            o.peer,
            r.as_str(),
            o.error.as_deref().unwrap_or("")
        ),
    }
}

/// A memory object: `id, content, owner, type, visibility, tags, importance,
/// confidence, pinned, created, updated, expires, origin`.
pub fn memory_json(m: &Visible<MemoryRecord>) -> Value {
    as_value(&MemoryView(m))
}

/// A memory object ([`memory_json`]) to serialize straight into a body or
/// another front end's values, without building its [`Value`] first: the
/// same fields, in the same (sorted) order, with the same numbers.
pub struct MemoryView<'a>(pub &'a Visible<MemoryRecord>);

/// A search hit ([`hit_json`]) to serialize straight, as [`MemoryView`].
pub struct HitView<'a>(pub &'a Hit);

impl Serialize for MemoryView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        entries(s, self.0, None)
    }
}

impl Serialize for HitView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        entries(s, &self.0.memory, Some(self.0))
    }
}

/// The one list of a memory object's fields (and a hit's), in the order a
/// [`Value`]'s object keeps them (sorted), each number as the `f64` a
/// [`Value`] holds it as, so a view writes the bytes its [`Value`] would.
fn entries<S: Serializer>(
    s: S,
    m: &Visible<MemoryRecord>,
    hit: Option<&Hit>,
) -> Result<S::Ok, S::Error> {
    let mut map = s.serialize_map(Some(if hit.is_some() { 20 } else { 17 }))?;
    map.serialize_entry("archived", &m.archived)?;
    map.serialize_entry("confidence", &f64::from(m.confidence))?;
    map.serialize_entry("content", &m.content)?;
    map.serialize_entry("created", &rfc3339(m.created_ms))?;
    map.serialize_entry("expires", &m.expires_ms.map(rfc3339))?;
    if let Some(h) = hit {
        // Its own sorted keys and f64 numbers, as `json!` gives them.
        map.serialize_entry("explain", &json!(h.explain))?;
    }
    map.serialize_entry("id", &Shown(&m.id))?;
    map.serialize_entry("importance", &f64::from(m.importance))?;
    map.serialize_entry("origin", &Shown(&m.origin))?;
    map.serialize_entry("owner", m.owner.as_str())?;
    map.serialize_entry("pinned", &m.pinned)?;
    if let Some(h) = hit {
        map.serialize_entry("relevance", &f64::from(h.relevance))?;
        map.serialize_entry("score", &f64::from(h.score))?;
    }
    map.serialize_entry("supersedes", &m.supersedes.as_ref().map(Shown))?;
    map.serialize_entry("tags", &m.tags)?;
    map.serialize_entry("type", m.kind.as_str())?;
    map.serialize_entry("updated", &rfc3339(m.updated_ms))?;
    map.serialize_entry("valid_from", &rfc3339(m.valid_from_ms()))?;
    map.serialize_entry("valid_to", &m.validity.to_ms.map(rfc3339))?;
    map.serialize_entry("visibility", m.visibility())?;
    map.end()
}

/// A value serialized as its `Display` text.
struct Shown<'a, T>(&'a T);

impl<T: std::fmt::Display> Serialize for Shown<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self.0)
    }
}

/// A view as a [`Value`] (a view of maps with string keys always is one).
fn as_value(v: &impl Serialize) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// A memory with its effective valid time (`amos list` under time filters):
/// the memory object plus `valid_until` (the end a superseder or `valid_to`
/// gives it) and `superseded_by`.
pub fn timed_json(m: &Visible<MemoryRecord>, vt: &ValidTime) -> Value {
    let mut v = memory_json(m);
    v["valid_until"] = json!(vt.to_ms.map(rfc3339));
    v["superseded_by"] = json!(vt.superseded_by.map(|s| s.id.to_string()));
    v
}

/// One timeline event as a line of text.
pub fn timeline_line(e: &TimelineEntry) -> String {
    let what = match e.event {
        TimelineEvent::Starts => "starts    ".to_owned(),
        TimelineEvent::Ends => "ends      ".to_owned(),
        TimelineEvent::Superseded => "superseded".to_owned(),
    };
    let by =
        e.by.as_deref()
            .map(|b| format!(" (by {b})"))
            .unwrap_or_default();
    format!(
        "{}  {what}  {}  {}: {}{by}",
        rfc3339(e.at_ms),
        e.memory,
        e.owner,
        one_line(&e.text, 80)
    )
}

/// `s` on one line, its first `max` characters and an ellipsis if longer.
pub fn one_line(s: &str, max: usize) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > max {
        format!("{}…", flat.chars().take(max).collect::<String>())
    } else {
        flat
    }
}

/// A search hit: the memory object plus `score`, `relevance` and `explain`
/// (every factor of the score).
pub fn hit_json(h: &Hit) -> Value {
    as_value(&HitView(h))
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

/// A parked context: `{"id", "name", "content", "parked", "expires", "bytes"}`.
pub fn context_json(c: &ParkedContext) -> Value {
    json!({
        "id": c.id.to_string(),
        "name": c.name,
        "content": c.content,
        "parked": rfc3339(c.parked_ms),
        "expires": rfc3339(c.expires_ms),
        "bytes": c.content.len(),
    })
}

/// One of an agent's parked contexts, without its text: `{"name", "id",
/// "parked", "expires", "bytes"}`.
pub fn context_summary_json(c: &ContextSummary) -> Value {
    json!({
        "name": c.name,
        "id": c.id.to_string(),
        "parked": rfc3339(c.parked_ms),
        "expires": rfc3339(c.expires_ms),
        "bytes": c.bytes,
    })
}

/// What changed since T: `{"since", "until", "truncated", "changes": [{"kind",
/// "at", "id", "memory"?, "by"?}]}`; a `revoked` change has no `memory`.
pub fn changes_json(c: &Changes) -> Value {
    let changes: Vec<Value> = c
        .changes
        .iter()
        .map(|ch| {
            let mut v = json!({
                "kind": ch.kind,
                "at": rfc3339(ch.at_ms),
                "id": ch.id.to_string(),
            });
            if let Some(m) = &ch.memory {
                v["memory"] = memory_json(m);
            }
            if let Some(by) = ch.by {
                v["by"] = json!(by.to_string());
            }
            v
        })
        .collect();
    json!({
        "since": rfc3339(c.since_ms),
        "until": rfc3339(c.until_ms),
        "truncated": c.truncated,
        "changes": changes,
    })
}

/// One change as a line of text (a revoked memory shows its id alone).
pub fn change_line(ch: &crate::api::Change) -> String {
    let kind = match ch.kind {
        crate::api::ChangeKind::Added => "added     ",
        crate::api::ChangeKind::Edited => "edited    ",
        crate::api::ChangeKind::Superseded => "superseded",
        crate::api::ChangeKind::Revoked => "revoked   ",
    };
    let what = match &ch.memory {
        Some(m) => format!(" {}: {}", m.owner, one_line(&m.content, 80)),
        None => String::new(),
    };
    let by = ch.by.map(|b| format!(" (by {b})")).unwrap_or_default();
    format!("{}  {kind}  {}{what}{by}", rfc3339(ch.at_ms), ch.id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::NewMemory;
    use crate::api::node::test_node;

    /// The fields of a memory object and a hit as they were written when
    /// the views built their `Value`s with `json!` (the reference).
    fn reference(h: &Hit) -> Value {
        let m = &h.memory;
        let mut v = json!({
            "id": m.id.to_string(),
            "content": m.content,
            "owner": m.owner.as_str(),
            "type": m.kind.as_str(),
            "visibility": m.visibility(),
            "tags": m.tags,
            "importance": m.importance,
            "confidence": m.confidence,
            "pinned": m.pinned,
            "created": rfc3339(m.created_ms),
            "updated": rfc3339(m.updated_ms),
            "expires": m.expires_ms.map(rfc3339),
            "origin": m.origin.to_string(),
            "archived": m.archived,
            "valid_from": rfc3339(m.valid_from_ms()),
            "valid_to": m.validity.to_ms.map(rfc3339),
            "supersedes": m.supersedes.map(|s| s.to_string()),
        });
        v["score"] = json!(h.score);
        v["relevance"] = json!(h.relevance);
        v["explain"] = json!(h.explain);
        v
    }

    #[test]
    fn a_view_writes_the_bytes_and_the_value_of_the_json_it_stands_for() {
        let (_d, _h, mut node, who) = test_node("alice");
        let old = node
            .add(&who, NewMemory::new("zebra crossing at noon"))
            .unwrap();
        let mut new = NewMemory::new("a zebra with 0.1 stripes, tagged");
        new.tags = vec!["zoo".into(), "b".into()];
        new.importance = 0.1;
        new.pinned = true;
        new.expires_ms = Some(4_000_000_000_000);
        new.supersedes = Some(old);
        node.add(&who, new).unwrap();
        let hits = node.search(&who, "zebra", 10).unwrap();
        assert_eq!(hits.len(), 2);
        for h in &hits {
            let want = reference(h);
            assert_eq!(hit_json(h), want);
            assert_eq!(
                serde_json::to_string(&HitView(h)).unwrap(),
                want.to_string()
            );
            let mut memory = want.clone();
            for k in ["score", "relevance", "explain"] {
                memory.as_object_mut().unwrap().remove(k);
            }
            assert_eq!(memory_json(&h.memory), memory);
            assert_eq!(
                serde_json::to_string(&MemoryView(&h.memory)).unwrap(),
                memory.to_string()
            );
        }
    }
}
