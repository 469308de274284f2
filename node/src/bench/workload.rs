//! The workload format `amos bench --corpus` reads and
//! `amos bench --generate` writes: a directory holding
//!
//! * `org.json`: `{"agents": [..], "projects": {P: {"members": [..], "team": T}}, "teams": {T: [..]}}`;
//! * `memories.jsonl`: one memory a line, `{"content", "importance", "owner", "share", "tags", "type"}`,
//!   `share` in the CLI's scope syntax (`[]` = private);
//! * `queries.jsonl`: one recall a line, `{"as": AGENT, "query": TEXT}`.
//!
//! Fields are declared in alphabetical order, so the files read the same
//! as ones written with sorted keys.

use std::collections::BTreeMap;

use amos_protocol::{MemoryType, Scope};
use serde::{Deserialize, Serialize};

use crate::api::NewMemory;
use crate::error::Result;

/// `org.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Org {
    /// Every agent id.
    pub agents: Vec<String>,
    /// Projects by id.
    pub projects: BTreeMap<String, OrgProject>,
    /// Teams by id, with their members.
    pub teams: BTreeMap<String, Vec<String>>,
}

/// A project of `org.json`: its team and the agents in it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrgProject {
    /// The agents in it.
    pub members: Vec<String>,
    /// The team it belongs to.
    pub team: String,
}

/// A line of `memories.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadMemory {
    /// The text.
    pub content: String,
    /// Importance (default 0.5).
    #[serde(default = "half")]
    pub importance: f32,
    /// The owning agent.
    pub owner: String,
    /// Scopes it is shared with, as `amos add --share` takes them.
    #[serde(default)]
    pub share: Vec<String>,
    /// Its tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Its memory type (`type` in the file).
    #[serde(rename = "type")]
    pub kind: String,
}

impl WorkloadMemory {
    /// The memory as the node API takes it.
    pub fn to_new(&self) -> Result<NewMemory> {
        let mut n = NewMemory::new(self.content.clone());
        n.kind = MemoryType::parse(&self.kind)?;
        n.share = self
            .share
            .iter()
            .map(|s| s.parse::<Scope>())
            .collect::<std::result::Result<_, _>>()?;
        n.tags = self.tags.clone();
        n.importance = self.importance;
        Ok(n)
    }
}

fn half() -> f32 {
    0.5
}

/// A line of `queries.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadQuery {
    /// The agent asking (`as` in the file).
    #[serde(rename = "as")]
    pub agent: String,
    /// The query's text.
    pub query: String,
}
