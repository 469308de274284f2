//! agent-memory-os → [`Plan`]: its home's SQLite database (read through
//! [`crate::store::foreign`], read-only) or a bundle it exported
//! (`agent-memory sync export FILE.jsonl`, versions 1–3: a header line
//! `{"kind": "bundle", "version": N}`, then one record a line). Database
//! rows and bundle records have the same keys, so one mapper reads both.
//!
//! Mapping: owners → agents; visibility tokens → grants (`global`,
//! `agent:X`, `team:X`, `project:X`, and the bare `team` token naming
//! `source.team_id`); any other token grants nothing (reported); teams,
//! projects and their members → org facts; links, profiles, pinned,
//! importance, confidence, expiry as they are; archived rows → archived;
//! tombstones → tombstones. Pure: never touches the node.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;

use amos_protocol::{AgentId, MemoryType, ProjectId, Relation, Scope, TeamId};
use serde_json::{Map, Value};

use super::{
    Plan, PlanLink, PlanMemory, PlanProject, PlanTeam, Source, bad_line, parse_time, slug_of,
    unit_or,
};
use crate::error::{NodeError, Result};
use crate::store::foreign::ForeignDb;

/// Bundle versions this reader knows (agent-memory-os 1.10.1 writes 3).
const VERSIONS: [i64; 3] = [1, 2, 3];

/// Read PATH: a home directory (its `memories.db`), the database file
/// itself, or a bundle (JSON Lines).
pub fn read(path: &Path) -> Result<Plan> {
    let db = if path.is_dir() {
        let db = path.join("memories.db");
        if !db.is_file() {
            return Err(NodeError::BadInput(format!(
                "{} is not an agent-memory-os home: no memories.db in it",
                path.display()
            )));
        }
        Some(db)
    } else {
        let mut head = [0u8; 16];
        let n = std::fs::File::open(path)
            .and_then(|mut f| std::io::Read::read(&mut f, &mut head))
            .map_err(|e| NodeError::BadInput(format!("cannot read {}: {e}", path.display())))?;
        (n == 16 && &head == b"SQLite format 3\0").then(|| path.to_path_buf())
    };
    match db {
        Some(db) => read_db(&db),
        None => read_bundle(path),
    }
}

/// One source's records, gathered before mapping (org tombstones must see
/// every team and project first).
#[derive(Default)]
struct Gathered {
    agents: Vec<String>,
    memories: Vec<(Map<String, Value>, bool, String)>,
    links: Vec<(Map<String, Value>, String)>,
    profiles: Vec<(Map<String, Value>, String)>,
    tombstones: Vec<(Map<String, Value>, String)>,
    teams: Vec<(Map<String, Value>, String)>,
    projects: Vec<(Map<String, Value>, String)>,
    org_tombstones: Vec<(Map<String, Value>, String)>,
    unknown: Vec<String>,
}

/// A bundle: header, then records; a malformed line stops everything.
pub fn read_bundle(path: &Path) -> Result<Plan> {
    let name = path.display().to_string();
    let f = std::fs::File::open(path)
        .map_err(|e| NodeError::BadInput(format!("cannot read {name}: {e}")))?;
    let mut g = Gathered::default();
    let mut header = false;
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let n = i + 1;
        let line = line.map_err(|e| bad_line(&name, n, format!("unreadable: {e}")))?;
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(&line)
            .map_err(|e| bad_line(&name, n, format!("not JSON: {e}")))?;
        let Value::Object(mut obj) = v else {
            return Err(bad_line(&name, n, "a record must be a JSON object"));
        };
        let kind = obj
            .remove("kind")
            .and_then(|k| k.as_str().map(str::to_owned))
            .ok_or_else(|| bad_line(&name, n, "record without a \"kind\""))?;
        let at = format!("{name}:{n}");
        if !header {
            header = true;
            if kind != "bundle" {
                return Err(bad_line(
                    &name,
                    n,
                    "not an agent-memory-os bundle (the first line must be its header)",
                ));
            }
            let version = obj.get("version").and_then(Value::as_i64);
            if !version.is_some_and(|v| VERSIONS.contains(&v)) {
                return Err(bad_line(
                    &name,
                    n,
                    format!(
                        "unknown agent-memory-os bundle version {}: this amos reads 1, 2 and 3",
                        obj.get("version").unwrap_or(&Value::Null)
                    ),
                ));
            }
            continue;
        }
        match kind.as_str() {
            "memory" => g.memories.push((obj, false, at)),
            "link" => g.links.push((obj, at)),
            "profile" => g.profiles.push((obj, at)),
            "tombstone" => g.tombstones.push((obj, at)),
            "team" => g.teams.push((obj, at)),
            "project" => g.projects.push((obj, at)),
            "org_tombstone" => g.org_tombstones.push((obj, at)),
            "bundle" => return Err(bad_line(&name, n, "a second bundle header")),
            other => g.unknown.push(other.to_owned()),
        }
    }
    if !header {
        return Err(bad_line(&name, 1, "empty: not an agent-memory-os bundle"));
    }
    map(g)
}

/// A home's database, read-only.
pub fn read_db(path: &Path) -> Result<Plan> {
    let name = path.display().to_string();
    let db = ForeignDb::open(path)?;
    if !db.has_table("memories")? {
        return Err(NodeError::BadInput(format!(
            "{name} is not an agent-memory-os database: it has no memories table"
        )));
    }
    let at = |t: &str, i: usize| format!("{name}: {t} row {}", i + 1);
    let mut g = Gathered::default();
    // Each table read one row at a time (`ForeignDb::each_row` bounds a
    // value and refuses computed columns); a missing table is empty.
    let each = |t: &str, f: &mut dyn FnMut(usize, Map<String, Value>)| -> Result<()> {
        if db.has_table(t)? {
            db.each_row(t, |i, r| {
                f(i, r);
                Ok(())
            })?;
        }
        Ok(())
    };
    each("memories", &mut |i, r| {
        g.memories.push((r, false, at("memories", i)))
    })?;
    each("memories_archive", &mut |i, r| {
        g.memories.push((r, true, at("memories_archive", i)))
    })?;
    for t in ["memory_links", "memory_links_archive"] {
        each(t, &mut |i, r| g.links.push((r, at(t, i))))?;
    }
    each("recall_profiles", &mut |i, r| {
        g.profiles.push((r, at("recall_profiles", i)))
    })?;
    each("tombstones", &mut |i, r| {
        g.tombstones.push((r, at("tombstones", i)))
    })?;
    each("agents", &mut |_, r| {
        if let Some(id) = r.get("id").and_then(Value::as_str) {
            g.agents.push(id.to_owned());
        }
    })?;
    // Members from the join tables, as a bundle carries them.
    let mut members: BTreeMap<(String, String), Vec<Value>> = BTreeMap::new();
    for (t, key, kind) in [
        ("team_members", "team_id", "team"),
        ("project_members", "project_id", "project"),
    ] {
        each(t, &mut |_, r| {
            if let (Some(s), Some(a)) = (
                r.get(key).and_then(Value::as_str),
                r.get("agent_id").and_then(Value::as_str),
            ) {
                members
                    .entry((kind.to_owned(), s.to_owned()))
                    .or_default()
                    .push(Value::from(a));
            }
        })?;
    }
    for (t, kind) in [("teams", "team"), ("projects", "project")] {
        each(t, &mut |i, mut r| {
            let id = r.get("id").and_then(Value::as_str).unwrap_or("").to_owned();
            let m = members.remove(&(kind.to_owned(), id)).unwrap_or_default();
            r.insert("members".into(), Value::Array(m));
            if kind == "team" {
                g.teams.push((r, at(t, i)));
            } else {
                g.projects.push((r, at(t, i)));
            }
        })?;
    }
    each("org_tombstones", &mut |i, mut r| {
        if let Some(k) = r.remove("kind") {
            r.insert("tomb_kind".into(), k);
        }
        g.org_tombstones.push((r, at("org_tombstones", i)));
    })?;
    map(g)
}

fn bad(at: &str, why: impl std::fmt::Display) -> NodeError {
    NodeError::BadInput(format!("{at}: {why}"))
}

fn text<'a>(o: &'a Map<String, Value>, key: &str, at: &str) -> Result<&'a str> {
    o.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| bad(at, format!("{key} missing or not a string")))
}

/// A field agent-memory-os stores as JSON text (tags, visibility, source,
/// weights) — or, in some bundles, as the JSON value itself.
fn json_field(o: &Map<String, Value>, key: &str, at: &str) -> Result<Value> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(Value::Null),
        Some(Value::String(s)) => {
            serde_json::from_str(s).map_err(|e| bad(at, format!("{key} is not JSON text: {e}")))
        }
        Some(v) => Ok(v.clone()),
    }
}

fn agent(raw: &str, plan: &mut Plan, at: &str) -> Result<AgentId> {
    let s = slug_of(raw).ok_or_else(|| bad(at, format!("agent {raw:?} has no usable id")))?;
    if s != raw {
        plan.unmapped(format!("agent {raw:?} is {s} here"));
    }
    Ok(AgentId::parse(&s)?)
}

fn team_id(raw: &str, plan: &mut Plan) -> Option<TeamId> {
    let s = slug_of(raw)?;
    if s != raw {
        plan.unmapped(format!("team {raw:?} is {s} here"));
    }
    TeamId::parse(&s).ok()
}

fn project_id(raw: &str, plan: &mut Plan) -> Option<ProjectId> {
    let s = slug_of(raw)?;
    if s != raw {
        plan.unmapped(format!("project {raw:?} is {s} here"));
    }
    ProjectId::parse(&s).ok()
}

fn members(o: &Map<String, Value>, plan: &mut Plan, at: &str) -> Result<Vec<AgentId>> {
    let mut out = Vec::new();
    match o.get("members") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) => {
            for m in a {
                let m = m
                    .as_str()
                    .ok_or_else(|| bad(at, "members must be strings"))?;
                out.push(agent(m, plan, at)?);
            }
        }
        Some(_) => return Err(bad(at, "members must be a list")),
    }
    Ok(out)
}

/// One visibility token → a grant, or `None` (reported) if unrecognised.
fn grant(tok: &str, source: &Value, plan: &mut Plan) -> Option<Scope> {
    let tok = tok.trim();
    let out = match tok.split_once(':') {
        None if tok == "global" => Some(Scope::Global),
        None if tok == "team" => source
            .get("team_id")
            .and_then(Value::as_str)
            .and_then(|t| team_id(t, plan))
            .map(Scope::Team),
        Some(("agent", a)) => slug_of(a)
            .and_then(|a| AgentId::parse(&a).ok())
            .map(Scope::Agent),
        Some(("team", t)) => team_id(t, plan).map(Scope::Team),
        Some(("project", p)) => project_id(p, plan).map(Scope::Project),
        _ => None,
    };
    if out.is_none() {
        plan.unmapped(format!(
            "visibility token {tok:?} not recognised: grants nothing (private)"
        ));
    }
    out
}

fn map(g: Gathered) -> Result<Plan> {
    let mut plan = Plan::new(Source::AgentMemoryOs);
    for u in g.unknown {
        plan.unmapped(format!(
            "record kind {u:?} has no amos counterpart: left out"
        ));
    }
    for a in g.agents {
        if let Some(s) = slug_of(&a).and_then(|s| AgentId::parse(&s).ok()) {
            plan.agents.insert(s);
        } else {
            plan.unmapped(format!("agent {a:?} has no usable id: left out"));
        }
    }
    // Org tombstones: a team or project deleted at or after its last change.
    let mut deleted: BTreeMap<(String, String), u64> = BTreeMap::new();
    for (o, at) in &g.org_tombstones {
        let kind = text(o, "tomb_kind", at)?.to_owned();
        let id = text(o, "id", at)?.to_owned();
        let t = o
            .get("deleted_at")
            .and_then(Value::as_str)
            .and_then(parse_time)
            .unwrap_or(u64::MAX);
        deleted.insert((kind, id), t);
    }
    let is_deleted = |kind: &str, o: &Map<String, Value>, id: &str| {
        deleted
            .get(&(kind.to_owned(), id.to_owned()))
            .is_some_and(|d| {
                let updated = o
                    .get("updated_at")
                    .and_then(Value::as_str)
                    .and_then(parse_time)
                    .unwrap_or(0);
                *d >= updated
            })
    };
    for (o, at) in &g.teams {
        let raw = text(o, "id", at)?;
        if is_deleted("team", o, raw) {
            plan.unmapped("team deleted in the source: left out".to_owned());
            continue;
        }
        let Some(id) = team_id(raw, &mut plan) else {
            plan.unmapped(format!("team {raw:?} has no usable id: left out"));
            continue;
        };
        let name = o
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.trim().is_empty())
            .unwrap_or(raw)
            .to_owned();
        let members = members(o, &mut plan, at)?;
        plan.teams.push(PlanTeam { id, name, members });
    }
    for (o, at) in &g.projects {
        let raw = text(o, "id", at)?;
        if is_deleted("project", o, raw) {
            plan.unmapped("project deleted in the source: left out".to_owned());
            continue;
        }
        let team_raw = text(o, "team_id", at)?;
        let (Some(id), Some(team)) = (project_id(raw, &mut plan), team_id(team_raw, &mut plan))
        else {
            plan.unmapped(format!("project {raw:?} has no usable id: left out"));
            continue;
        };
        let name = o
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.trim().is_empty())
            .unwrap_or(raw)
            .to_owned();
        let members = members(o, &mut plan, at)?;
        plan.projects.push(PlanProject {
            id,
            team,
            name,
            members,
        });
    }
    for (o, archived, at) in &g.memories {
        let source_id = text(o, "id", at)?.to_owned();
        let owner = agent(text(o, "owner", at)?, &mut plan, at)?;
        let body = text(o, "content", at)?.to_owned();
        let source = json_field(o, "source", at)?;
        let mut grants = Vec::new();
        match json_field(o, "visibility", at)? {
            Value::Null => {}
            Value::Array(toks) => {
                for t in toks {
                    let t = t
                        .as_str()
                        .ok_or_else(|| bad(at, "visibility tokens must be strings"))?;
                    if let Some(s) = grant(t, &source, &mut plan)
                        && !grants.contains(&s)
                    {
                        grants.push(s);
                    }
                }
            }
            _ => return Err(bad(at, "visibility must be a list")),
        }
        let tags = match json_field(o, "tags", at)? {
            Value::Array(t) => t
                .into_iter()
                .filter_map(|t| t.as_str().map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        };
        let kind_raw = o.get("type").and_then(Value::as_str).unwrap_or("note");
        let kind = match slug_of(kind_raw).and_then(|k| MemoryType::parse(&k).ok()) {
            Some(k) => k,
            None => {
                plan.unmapped(format!(
                    "memory type {kind_raw:?} unusable: imported as note"
                ));
                MemoryType::default()
            }
        };
        let created_ms = o
            .get("created_at")
            .and_then(Value::as_str)
            .and_then(parse_time);
        let expires_ms = match o.get("expires_at") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_str()
                    .and_then(parse_time)
                    .ok_or_else(|| bad(at, format!("expires_at {v} is not a time")))?,
            ),
        };
        let pinned = match o.get("pinned") {
            Some(Value::Bool(b)) => *b,
            Some(Value::Number(n)) => n.as_i64().unwrap_or(0) != 0,
            _ => false,
        };
        plan.memories.push(PlanMemory {
            source_id,
            owner,
            text: body,
            kind,
            grants,
            tags,
            importance: unit_or(o.get("importance").and_then(Value::as_f64), 0.5),
            confidence: unit_or(o.get("confidence").and_then(Value::as_f64), 0.8),
            pinned,
            created_ms,
            valid_to_ms: None,
            expires_ms,
            archived: *archived,
            supersedes: None,
        });
    }
    for (o, at) in &g.links {
        let rel_raw = o
            .get("relation")
            .and_then(Value::as_str)
            .unwrap_or("related_to");
        let relation = match rel_raw {
            "related_to" => Relation::default(),
            r => match slug_of(r).and_then(|r| Relation::parse(&r).ok()) {
                Some(r) => r,
                None => {
                    plan.unmapped(format!("link relation {r:?} unusable: imported as related"));
                    Relation::default()
                }
            },
        };
        plan.links.push(PlanLink {
            from: text(o, "src_id", at)?.to_owned(),
            to: text(o, "dst_id", at)?.to_owned(),
            relation,
            weight: unit_or(o.get("weight").and_then(Value::as_f64), 0.5),
        });
    }
    for (o, at) in &g.profiles {
        let who = agent(text(o, "agent_id", at)?, &mut plan, at)?;
        let mut weights = Vec::new();
        if let Value::Object(w) = json_field(o, "type_weights", at)? {
            for (k, v) in w {
                match (
                    slug_of(&k).and_then(|k| MemoryType::parse(&k).ok()),
                    v.as_f64(),
                ) {
                    (Some(k), Some(v)) => weights.push((k, v as f32)),
                    _ => plan.unmapped(format!("profile weight {k:?} unusable: left out")),
                }
            }
        }
        if let Value::Object(s) = json_field(o, "scope_weights", at)?
            && !s.is_empty()
        {
            plan.unmapped("profile scope weights have no amos counterpart: left out".to_owned());
        }
        plan.profiles.push((who, weights));
    }
    for (o, at) in &g.tombstones {
        plan.tombstones.push(text(o, "id", at)?.to_owned());
    }
    Ok(plan)
}
