//! amos's own per-agent export (`amos export --agent A FILE`) and its
//! reader (`amos import amos FILE`), and `amos forget --agent A --all`.
//!
//! The file is JSON Lines: a header `{"kind": "amos-export", "version": 1,
//! "agent", "node", "exported"}`, then one `memory` record per memory the
//! agent owns (text, type, grants, tags, importance, confidence, pinned,
//! created, valid from/to, expiry, archived, the memory it supersedes, and
//! its edit history), one `link` record per link
//! leaving one of them, and the agent's `profile`. Memories leave the
//! store only through the read gate, as the agent itself sees them.
//!
//! Must never export what the agent does not own, nor a link to a memory
//! the agent may not see, nor tombstone a memory this node may not speak
//! for (one made on a node that is not a full peer); nor import from an
//! export anything but its header agent's memories and profile.

use crate::error::UnknownKind;
use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::Path;

use amos_protocol::{AgentId, FactBody, MemoryTombstone, MemoryType, Relation, Scope};
use serde::Serialize;
use serde_json::{Value, json};

use super::{Plan, PlanLink, PlanMemory, Source, bad_line, unit_or};
use crate::api::node::Node;
use crate::clock::rfc3339;
use crate::error::{NodeError, Result};
use crate::store::moves;
use crate::store::profile::ProfileWeights;

const KIND: &str = "amos-export";

const VERSION: i64 = 1;

/// What `amos export` wrote.
#[derive(Debug, Clone, Serialize)]
pub struct ExportReport {
    /// The agent whose memories were exported.
    pub agent: String,
    /// The file written.
    pub file: String,
    /// Memories written.
    pub memories: usize,
    /// Links written.
    pub links: usize,
    /// Whether the agent's profile was written.
    pub profile: bool,
}

/// What `amos forget --agent` did.
#[derive(Debug, Clone, Serialize)]
pub struct ForgetReport {
    /// The agent whose memories were forgotten.
    pub agent: String,
    /// Memories forgotten (tombstoned).
    pub forgotten: usize,
    /// Owned memories made on a node this one may not speak for: forget
    /// them there.
    pub elsewhere: usize,
}

impl Node {
    /// Write everything `agent` owns to `file` (atomically).
    pub fn export_agent(&mut self, agent: &str, file: &Path) -> Result<ExportReport> {
        let who = self.requester(agent)?;
        let owner = AgentId::parse(agent)?;
        let now = self.now_ms();
        let ids = self.store.read(|r| moves::owned_live(r, &owner, None))?;
        let mut lines = vec![json!({
            "kind": KIND,
            "version": VERSION,
            "agent": owner.as_str(),
            "node": self.node_id().to_string(),
            "exported": rfc3339(now),
        })];
        let mut n = 0;
        let mut shown = Vec::new();
        for chunk in ids.chunks(512) {
            for m in self.store.visible(&who, chunk, now)? {
                if m.owner() != &owner {
                    continue;
                }
                let (_, history) = self.history(&who, &m.id().to_string())?;
                lines.push(json!({
                    "kind": "memory",
                    "id": m.id().to_string(),
                    "owner": m.owner().as_str(),
                    "text": m.content(),
                    "type": m.kind().as_str(),
                    "grants": m.grants().to_strings(),
                    "tags": m.tags(),
                    "importance": m.importance(),
                    "confidence": m.confidence(),
                    "pinned": m.pinned(),
                    "created": rfc3339(m.created_ms()),
                    "valid_from": rfc3339(m.valid_from_ms()),
                    "valid_to": m.validity().to_ms.map(rfc3339),
                    "expires": m.expires_ms().map(rfc3339),
                    "archived": m.archived(),
                    "origin": m.origin().to_string(),
                    "supersedes": m.supersedes().map(|s| s.to_string()),
                    "history": history,
                }));
                shown.push(m.id());
                n += 1;
            }
        }
        // A link is an id of another memory: only those whose other end
        // the agent may see too leave (the gate, as for the memories).
        let mut links = self.store.read(|r| moves::links_from(r, &shown))?;
        let mut ends: Vec<_> = links.iter().map(|l| l.to).collect();
        ends.sort();
        ends.dedup();
        let mut seen = std::collections::BTreeSet::new();
        for chunk in ends.chunks(512) {
            seen.extend(self.store.visible(&who, chunk, now)?.iter().map(|m| m.id()));
        }
        links.retain(|l| seen.contains(&l.to));
        for l in &links {
            lines.push(json!({
                "kind": "link",
                "from": l.from.to_string(),
                "to": l.to.to_string(),
                "relation": l.relation,
                "weight": l.weight,
            }));
        }
        let profile = self.store.read(|r| ProfileWeights::load(r, &owner))?;
        let has_profile = !profile.is_empty();
        if has_profile {
            lines.push(json!({"kind": "profile", "agent": owner.as_str(), "weights": profile}));
        }
        let mut buf = Vec::new();
        for l in &lines {
            serde_json::to_writer(&mut buf, l)
                .map_err(|e| NodeError::Failed(format!("cannot encode the export: {e}")))?;
            buf.write_all(b"\n")
                .map_err(NodeError::io("writing the export"))?;
        }
        crate::home::write_atomic(file, &buf, 0o600)?;
        Ok(ExportReport {
            agent: owner.to_string(),
            file: file.display().to_string(),
            memories: n,
            links: links.len(),
            profile: has_profile,
        })
    }

    /// Tombstone every live memory `agent` owns that this node may speak
    /// for (made here, or on a full peer): one signed tombstone each, in
    /// one transaction.
    pub fn forget_agent(&mut self, agent: &str) -> Result<ForgetReport> {
        let owner = AgentId::parse(agent)?;
        if !self
            .store
            .read(|r| crate::store::org::agent_present(r, &owner))?
        {
            return Err(NodeError::unknown(UnknownKind::Agent, &owner));
        }
        let me = self.node_id();
        let (_, (forgotten, elsewhere)) = self.commit(|tx| {
            let ids = moves::owned_live(tx, &owner, None)?;
            let mut bodies = Vec::new();
            let mut elsewhere = 0;
            for id in ids {
                let Some((fixed, false)) = moves::memory_fixed(tx, &id)? else {
                    continue;
                };
                let ours = fixed.origin == me
                    || crate::store::replica::peer_policy(tx, &fixed.origin)?
                        .is_some_and(|p| p.is_full());
                if ours {
                    bodies.push(FactBody::MemoryTombstone(MemoryTombstone { id, fixed }));
                } else {
                    elsewhere += 1;
                }
            }
            let n = bodies.len();
            Ok((bodies, (n, elsewhere)))
        })?;
        Ok(ForgetReport {
            agent: owner.to_string(),
            forgotten,
            elsewhere,
        })
    }
}

fn bad(at: &str, why: impl std::fmt::Display) -> NodeError {
    NodeError::BadInput(format!("{at}: {why}"))
}

/// Read an `amos export` file: the memories and profile of the agent its
/// header names, and only those (a record of another agent is left out
/// and reported: an export is one agent's). `as_agent` (`--as`) must be
/// that agent: naming another refuses the file, nothing read.
pub fn read(path: &Path, as_agent: Option<&AgentId>) -> Result<Plan> {
    let name = path.display().to_string();
    let f = std::fs::File::open(path)
        .map_err(|e| NodeError::BadInput(format!("cannot read {name}: {e}")))?;
    let mut plan = Plan::new(Source::Amos);
    let mut header: Option<AgentId> = None;
    let mut profile = None;
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let n = i + 1;
        let at = format!("{name}:{n}");
        let line = line.map_err(|e| bad_line(&name, n, format!("unreadable: {e}")))?;
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(&line)
            .map_err(|e| bad_line(&name, n, format!("not JSON: {e}")))?;
        let kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
        let Some(agent) = &header else {
            if kind != KIND {
                return Err(bad_line(
                    &name,
                    n,
                    "not an amos export (no amos-export header)",
                ));
            }
            if v.get("version").and_then(Value::as_i64) != Some(VERSION) {
                return Err(bad_line(
                    &name,
                    n,
                    format!(
                        "unknown amos export version {}: this amos reads {VERSION}",
                        v.get("version").unwrap_or(&Value::Null)
                    ),
                ));
            }
            let agent = v
                .get("agent")
                .and_then(Value::as_str)
                .ok_or_else(|| bad(&at, "the header names no agent"))
                .and_then(|a| AgentId::parse(a).map_err(|e| bad(&at, e)))?;
            if let Some(a) = as_agent
                && a != &agent
            {
                return Err(bad(
                    &at,
                    format!(
                        "an export of {agent}, not of {a}: nothing imported (import it without --as, or --as {agent})"
                    ),
                ));
            }
            header = Some(agent);
            continue;
        };
        let s = |k: &str| {
            v.get(k)
                .and_then(Value::as_str)
                .ok_or_else(|| bad(&at, format!("{k} missing or not a string")))
        };
        match kind {
            "memory" => {
                let owner = AgentId::parse(s("owner")?).map_err(|e| bad(&at, e))?;
                if &owner != agent {
                    plan.unmapped(format!(
                        "a memory of {owner} in {agent}'s export: left out (an export imports only its agent's)"
                    ));
                    continue;
                }
                let mut grants = Vec::new();
                for g in v
                    .get("grants")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let g: Scope = g
                        .as_str()
                        .ok_or_else(|| bad(&at, "grants must be strings"))?
                        .parse()
                        .map_err(|e| bad(&at, e))?;
                    grants.push(g);
                }
                let tags = v
                    .get("tags")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|t| t.as_str().map(str::to_owned))
                    .collect();
                let time = |k: &str| v.get(k).and_then(Value::as_str).and_then(super::parse_time);
                plan.memories.push(PlanMemory {
                    source_id: s("id")?.to_owned(),
                    owner,
                    text: s("text")?.to_owned(),
                    kind: MemoryType::parse(s("type")?).map_err(|e| bad(&at, e))?,
                    grants,
                    tags,
                    importance: unit_or(v.get("importance").and_then(Value::as_f64), 0.5),
                    confidence: unit_or(v.get("confidence").and_then(Value::as_f64), 1.0),
                    pinned: v.get("pinned").and_then(Value::as_bool).unwrap_or(false),
                    created_ms: time("valid_from").or_else(|| time("created")),
                    valid_to_ms: time("valid_to"),
                    expires_ms: time("expires"),
                    archived: v.get("archived").and_then(Value::as_bool).unwrap_or(false),
                    supersedes: v
                        .get("supersedes")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                });
            }
            "link" => plan.links.push(PlanLink {
                from: s("from")?.to_owned(),
                to: s("to")?.to_owned(),
                relation: Relation::parse(s("relation")?).map_err(|e| bad(&at, e))?,
                weight: unit_or(v.get("weight").and_then(Value::as_f64), 1.0),
            }),
            "profile" => {
                let of = AgentId::parse(s("agent")?).map_err(|e| bad(&at, e))?;
                if &of != agent {
                    plan.unmapped(format!(
                        "the profile of {of} in {agent}'s export: left out (an export imports only its agent's)"
                    ));
                    continue;
                }
                let mut w = Vec::new();
                let weights: BTreeMap<String, f32> = v
                    .get("weights")
                    .cloned()
                    .map(serde_json::from_value)
                    .transpose()
                    .map_err(|e| bad(&at, format!("weights: {e}")))?
                    .unwrap_or_default();
                for (k, x) in weights {
                    w.push((MemoryType::parse(&k).map_err(|e| bad(&at, e))?, x));
                }
                profile = Some((of, w));
            }
            other => plan.unmapped(format!("record kind {other:?} unknown: left out")),
        }
    }
    if header.is_none() {
        return Err(bad_line(&name, 1, "empty: not an amos export"));
    }
    // Links to memories not in the file (another agent's) are left out by
    // the import, and reported there.
    plan.profiles.extend(profile);
    Ok(plan)
}
