//! `amos eval FILE`: recall quality on a golden set — memories with keys,
//! owners and shares, and questions asked *as an agent* with the keys of
//! the memories that answer them — measured as hit@1, hit@5 and MRR per
//! recall mode, in a throw-away home (docs/cli.md, "amos eval").
//!
//! The file is JSON (`{"org": …, "memories": […], "queries": […]}`) or
//! JSON lines (one `{"org": …}`, then `{"memory": …}` and `{"query": …}`
//! lines); the shipped set is `node/eval/golden.jsonl`.
//!
//! Owns the golden-set format, loading it and the metrics. Every question
//! runs as its agent through `Node::search`, the path the CLI and MCP use,
//! so the gate applies: a memory the agent cannot see is never a hit and
//! never takes a rank. An expected key the agent may not see is refused as
//! bad input, so a hidden memory can never count.
//!
//! Boundary: never touches a real home; never bypasses the gate.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

use amos_protocol::{MemoryId, Scope};
use serde::{Deserialize, Serialize};

use super::corpus::build_org;
use super::workload::{Org, WorkloadMemory};
use crate::api::NewMemory;
use crate::api::node::Node;
use crate::error::{NodeError, Result};
use crate::home::Home;
use crate::recall::{RecallMode, RecallOptions};

/// Hits asked for per question (the MRR cut-off).
pub const EVAL_K: usize = 10;

/// A golden set, whichever file form it came from.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GoldenSet {
    /// The agents, teams and projects the memories and questions name.
    pub org: Org,
    /// The memories, written before any question is asked.
    pub memories: Vec<GoldenMemory>,
    /// The questions.
    pub queries: Vec<GoldenQuery>,
}

/// A memory of the set: a bench workload memory plus the key questions
/// name it by.
#[derive(Debug, Clone, Deserialize)]
pub struct GoldenMemory {
    /// The name questions expect it by.
    pub key: String,
    /// The memory as it is written.
    #[serde(flatten)]
    pub memory: WorkloadMemory,
}

/// A question of the set.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GoldenQuery {
    /// The agent asking.
    #[serde(rename = "as")]
    pub agent: String,
    /// The question's text.
    pub query: String,
    /// Keys of the memories that answer it (any one counts); each must be
    /// visible to the agent.
    pub expect: Vec<String>,
    /// Phrased in other words than the memory (the semantic yardstick).
    #[serde(default)]
    pub paraphrase: bool,
    /// Which part of the set it belongs to: `tune` (what recall may be
    /// tuned on) or `heldout` (what it is judged on); none for the older
    /// sets, which are one part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<Split>,
    /// Kinds the question is also reported under (`near-miss`, `entity`,
    /// `gate`, `long-tail`, `ja`, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Why the question is there (ignored by the run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The two parts of a set written for tuning (docs/cli.md, "amos eval").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    /// Questions recall may be tuned on.
    Tune,
    /// Questions recall is judged on, never tuned to.
    Heldout,
}

impl Split {
    /// Parse `tune` or `heldout`.
    pub fn parse(s: &str) -> Option<Split> {
        match s {
            "tune" => Some(Split::Tune),
            "heldout" => Some(Split::Heldout),
            _ => None,
        }
    }
}

/// What to run of a set, besides its questions.
#[derive(Debug, Clone, Default)]
pub struct EvalOptions {
    /// Only the questions of this part (all when `None`).
    pub split: Option<Split>,
    /// Real text to mix into the set as memories every agent may see
    /// (JSON lines, `{"content": "..."}` each): recall among distractors.
    pub distractors: Option<PathBuf>,
    /// Use at most this many distractors (all when `None`).
    pub distractor_limit: Option<usize>,
    /// Another static embedding model's directory (`--model`).
    pub model: Option<PathBuf>,
    /// Write each question's lexical and semantic candidates (top
    /// [`CANDIDATES_K`] of each, with BM25 and cosine, through the gated
    /// search) to this file as JSON lines: what fusion is tuned from.
    pub candidates: Option<PathBuf>,
}

/// The tag of a question no memory of the set answers: it counts only
/// under its tag, by how many memories recall gave it.
pub const UNRELATED: &str = "unrelated";

impl GoldenQuery {
    /// Whether no memory of the set should answer it.
    pub fn unrelated(&self) -> bool {
        self.tags.iter().any(|t| t == UNRELATED)
    }
}

/// Candidates per list written by [`EvalOptions::candidates`].
pub const CANDIDATES_K: usize = 100;

/// One distractor line.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Distractor {
    content: String,
}

/// One line of the JSON-lines form.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
enum Line {
    Org(Org),
    Memory(GoldenMemory),
    Query(GoldenQuery),
}

/// The modes an eval runs, each with its own entry under `modes`.
pub const MODES: [RecallMode; 4] = [
    RecallMode::Lexical,
    RecallMode::Semantic,
    RecallMode::Hybrid,
    RecallMode::Fast,
];

/// hit@1, hit@5 and MRR over some questions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Metrics {
    /// Share of questions whose first hit is an expected memory.
    pub hit_at_1: f64,
    /// Share with an expected memory in the top five.
    pub hit_at_5: f64,
    /// Mean reciprocal rank of the first expected memory within the top
    /// [`EVAL_K`] (0 when it is not there).
    pub mrr: f64,
    /// How many questions these figures are over.
    pub queries: usize,
}

impl Metrics {
    /// From the rank (1-based) of each question's first expected hit.
    pub fn of(ranks: &[Option<usize>]) -> Metrics {
        let n = ranks.len();
        if n == 0 {
            return Metrics::default();
        }
        let share = |ok: &dyn Fn(usize) -> bool| {
            ranks.iter().filter(|r| r.is_some_and(ok)).count() as f64 / n as f64
        };
        Metrics {
            hit_at_1: share(&|r| r == 1),
            hit_at_5: share(&|r| r <= 5),
            mrr: ranks.iter().flatten().map(|&r| 1.0 / r as f64).sum::<f64>() / n as f64,
            queries: n,
        }
    }
}

/// One mode's figures: over all questions (flattened), and split into the
/// literal and the paraphrased ones.
#[derive(Debug, Clone, Serialize)]
pub struct ModeReport {
    /// Over every question.
    #[serde(flatten)]
    pub all: Metrics,
    /// Over the questions worded like their memory.
    pub literal: Metrics,
    /// Over the paraphrased questions.
    pub paraphrase: Metrics,
    /// Each tag's questions (`near-miss`, `gate`, `ja`, ...).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, Metrics>,
    /// The mean number of memories (of the top [`EVAL_K`]) returned for a
    /// question nothing should answer (tagged [`UNRELATED`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unrelated_returned: Option<f64>,
    /// Each question's outcome.
    pub results: Vec<QueryResult>,
}

/// What one question got.
#[derive(Debug, Clone, Serialize)]
pub struct QueryResult {
    /// The agent that asked.
    #[serde(rename = "as")]
    pub agent: String,
    /// The question.
    pub query: String,
    /// Keys of the memories that answer it.
    pub expect: Vec<String>,
    /// Whether it is paraphrased.
    pub paraphrase: bool,
    /// Its tags.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// The part of the set it belongs to, if the set is split.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub split: Option<Split>,
    /// How many memories the search returned (at most [`EVAL_K`]).
    pub returned: usize,
    /// Rank of the first expected memory (1-based), if in the top k.
    pub rank: Option<usize>,
    /// Keys of the top 5 hits (all visible to the agent).
    pub top: Vec<String>,
}

/// What `amos eval` reports.
#[derive(Debug, Clone, Serialize)]
pub struct EvalReport {
    /// The golden set read.
    pub file: String,
    /// Memories written (distractors apart).
    pub memories: usize,
    /// Questions asked.
    pub queries: usize,
    /// Of those, paraphrased.
    pub paraphrases: usize,
    /// The part of the set asked (`tune`, `heldout`), if one was chosen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub split: Option<Split>,
    /// Distractor memories mixed in.
    pub distractors: usize,
    /// Hits asked for per question ([`EVAL_K`]).
    pub k: usize,
    /// Each recall mode's figures, by mode name.
    pub modes: BTreeMap<String, ModeReport>,
}

/// Read a golden set (JSON or JSON lines), or a directory of JSON-lines
/// files read in name order as one set (`node/eval/deep/`).
pub fn load(path: &Path) -> Result<GoldenSet> {
    let text = match path.is_dir() {
        true => read_parts(path)?,
        false => fs::read_to_string(path)
            .map_err(|e| NodeError::BadInput(format!("cannot read {}: {e}", path.display())))?,
    };
    let bad = |e: serde_json::Error| NodeError::BadInput(format!("{}: {e}", path.display()));
    let values: Vec<serde_json::Value> = serde_json::Deserializer::from_str(&text)
        .into_iter()
        .collect::<std::result::Result<_, _>>()
        .map_err(bad)?;
    if let [one] = values.as_slice()
        && one.get("memories").is_some()
    {
        return serde_json::from_value(one.clone()).map_err(bad);
    }
    let mut org = None;
    let (mut memories, mut queries) = (Vec::new(), Vec::new());
    for (i, v) in values.into_iter().enumerate() {
        let at = |e: serde_json::Error| {
            NodeError::BadInput(format!("{}: entry {}: {e}", path.display(), i + 1))
        };
        match serde_json::from_value(v).map_err(at)? {
            Line::Org(o) if org.is_none() => org = Some(o),
            Line::Org(_) => {
                return Err(NodeError::BadInput(format!(
                    "{}: more than one org entry",
                    path.display()
                )));
            }
            Line::Memory(m) => memories.push(m),
            Line::Query(q) => queries.push(q),
        }
    }
    let org = org.ok_or_else(|| {
        NodeError::BadInput(format!("{}: no {{\"org\": …}} entry", path.display()))
    })?;
    Ok(GoldenSet {
        org,
        memories,
        queries,
    })
}

/// The `*.jsonl` files of `dir`, in name order, as one text.
fn read_parts(dir: &Path) -> Result<String> {
    let cannot =
        |e: std::io::Error| NodeError::BadInput(format!("cannot read {}: {e}", dir.display()));
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .map_err(cannot)?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()
        .map_err(cannot)?;
    files.retain(|f| f.extension().is_some_and(|x| x == "jsonl"));
    files.sort();
    if files.is_empty() {
        return Err(NodeError::BadInput(format!(
            "{}: no .jsonl files",
            dir.display()
        )));
    }
    let mut text = String::new();
    for f in files {
        let part = fs::read_to_string(&f)
            .map_err(|e| NodeError::BadInput(format!("cannot read {}: {e}", f.display())))?;
        text.push_str(&part);
        text.push('\n');
    }
    Ok(text)
}

/// Read a distractor file: one `{"content": "..."}` per line.
pub fn load_distractors(path: &Path, limit: Option<usize>) -> Result<Vec<String>> {
    let text = fs::read_to_string(path)
        .map_err(|e| NodeError::BadInput(format!("cannot read {}: {e}", path.display())))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        if limit.is_some_and(|n| out.len() >= n) {
            break;
        }
        let d: Distractor = serde_json::from_str(line)
            .map_err(|e| NodeError::BadInput(format!("{}: line {}: {e}", path.display(), i + 1)))?;
        out.push(d.content);
    }
    Ok(out)
}

/// Load `file` and run every mode on it as `opts` says.
pub fn run_with(file: &Path, opts: &EvalOptions) -> Result<EvalReport> {
    let set = load(file)?;
    run_set(&set, file.to_path_buf(), opts)
}

/// Run every mode on `set` in a throw-away home.
pub fn run_set(set: &GoldenSet, file: PathBuf, opts: &EvalOptions) -> Result<EvalReport> {
    if set.queries.is_empty() {
        return Err(NodeError::BadInput("the golden set has no queries".into()));
    }
    let distractors = match &opts.distractors {
        Some(path) => load_distractors(path, opts.distractor_limit)?,
        None => Vec::new(),
    };
    let tmp = tempfile::tempdir().map_err(NodeError::io("creating a temporary home"))?;
    let home = Home::new(tmp.path().join("home")).with_model(opts.model.clone());
    Node::init(&home, Some("eval"))?;
    let mut node = Node::open(&home)?;
    let requesters = build_org(&mut node, &set.org)?;
    let requester = |agent: &str| {
        requesters
            .get(agent)
            .ok_or_else(|| NodeError::BadInput(format!("unknown agent {agent:?} (not in org)")))
    };

    let mut seen = HashSet::new();
    let mut batch = Vec::with_capacity(set.memories.len());
    for m in &set.memories {
        if !seen.insert(m.key.as_str()) {
            return Err(NodeError::BadInput(format!(
                "memory key {:?} appears twice",
                m.key
            )));
        }
        let new = m
            .memory
            .to_new()
            .map_err(|e| NodeError::BadInput(format!("memory {:?}: {e}", m.key)))?;
        batch.push((requester(&m.memory.owner)?, new));
    }
    let ids = node.add_many(batch)?;
    if !distractors.is_empty() {
        // Owned by the org's first agent, shared with everyone: every
        // question's asker may see every distractor.
        let owner = set
            .org
            .agents
            .first()
            .ok_or_else(|| NodeError::BadInput("the org names no agent".into()))?;
        let who = requester(owner)?;
        for chunk in distractors.chunks(1000) {
            let batch = chunk
                .iter()
                .map(|text| {
                    let mut n = NewMemory::new(text.clone());
                    n.share = vec![Scope::Global];
                    (who, n)
                })
                .collect();
            node.add_many(batch)?;
        }
    }
    // Every memory encoded before a question is asked (a bulk load leaves
    // them pending, as an import does).
    node.encoder_catch_up(usize::MAX, &crate::progress::Progress::hidden())?;
    let key_of: HashMap<MemoryId, &str> = ids
        .iter()
        .copied()
        .zip(set.memories.iter().map(|m| m.key.as_str()))
        .collect();
    let id_of: HashMap<&str, MemoryId> = key_of.iter().map(|(id, k)| (*k, *id)).collect();

    // Every expected key must exist and be one the asking agent may see.
    for (i, q) in set.queries.iter().enumerate() {
        let who = requester(&q.agent)?;
        if q.expect.is_empty() && !q.unrelated() {
            return Err(NodeError::BadInput(format!(
                "query {} ({:?}): expect names no memory (tag it \"{UNRELATED}\" if none should answer)",
                i + 1,
                q.query
            )));
        }
        for key in &q.expect {
            let id = id_of.get(key.as_str()).ok_or_else(|| {
                NodeError::BadInput(format!(
                    "query {} ({:?}): no memory has key {key:?}",
                    i + 1,
                    q.query
                ))
            })?;
            match node.get(who, &id.to_string()) {
                Ok(_) => {}
                Err(NodeError::NoSuchMemory(_)) => {
                    return Err(NodeError::BadInput(format!(
                        "query {} ({:?}): expected memory {key:?} is not visible to {}; expect only what the agent may see",
                        i + 1,
                        q.query,
                        q.agent
                    )));
                }
                Err(e) => return Err(e),
            }
        }
    }

    let asked: Vec<&GoldenQuery> = set
        .queries
        .iter()
        .filter(|q| opts.split.is_none() || q.split == opts.split)
        .collect();
    if asked.is_empty() {
        return Err(NodeError::BadInput(
            "no question of the set is in the chosen split".into(),
        ));
    }
    if let Some(path) = &opts.candidates {
        let mut out = String::new();
        for q in &asked {
            let who = requester(&q.agent)?;
            let mut lists = Vec::new();
            for mode in [RecallMode::Lexical, RecallMode::Semantic] {
                let opts = RecallOptions {
                    k: CANDIDATES_K,
                    mode,
                    note_recall: false,
                    ..RecallOptions::default()
                };
                let hits = node.search_with(who, &q.query, &opts)?;
                let list: Vec<(String, f32)> = hits
                    .iter()
                    .filter_map(|h| {
                        let part = match mode {
                            RecallMode::Lexical => h.explain.direct.bm25,
                            _ => h.explain.direct.semantic.unwrap_or(0.0),
                        };
                        key_of.get(&h.memory.id).map(|k| ((*k).to_owned(), part))
                    })
                    .collect();
                lists.push(list);
            }
            let line = serde_json::json!({
                "as": q.agent, "query": q.query, "expect": q.expect,
                "paraphrase": q.paraphrase, "split": q.split, "tags": q.tags,
                "lexical": lists[0], "semantic": lists[1],
            });
            out.push_str(&line.to_string());
            out.push('\n');
        }
        fs::write(path, out).map_err(NodeError::io(format!("writing {}", path.display())))?;
    }
    let mut modes = BTreeMap::new();
    for mode in MODES {
        let mut results = Vec::with_capacity(asked.len());
        for q in &asked {
            let who = requester(&q.agent)?;
            let opts = RecallOptions {
                k: EVAL_K,
                mode,
                note_recall: false,
                ..RecallOptions::default()
            };
            let hits = node.search_with(who, &q.query, &opts)?;
            let scored: Vec<(String, f32)> = hits
                .iter()
                .filter_map(|h| key_of.get(&h.memory.id).map(|k| ((*k).to_owned(), h.score)))
                .collect();
            let rank = rank_of(&scored, &q.expect);
            let keys: Vec<String> = scored.into_iter().map(|(k, _)| k).collect();
            results.push(QueryResult {
                agent: q.agent.clone(),
                query: q.query.clone(),
                expect: q.expect.clone(),
                paraphrase: q.paraphrase,
                tags: q.tags.clone(),
                split: q.split,
                returned: hits.len(),
                rank,
                top: keys.into_iter().take(5).collect(),
            });
        }
        // A question nothing should answer counts only under its tag, as
        // the memories it was given.
        let ranks = |f: &dyn Fn(&QueryResult) -> bool| -> Vec<Option<usize>> {
            results
                .iter()
                .filter(|r| !r.tags.iter().any(|t| t == UNRELATED) && f(r))
                .map(|r| r.rank)
                .collect()
        };
        let unrelated: Vec<&QueryResult> = results
            .iter()
            .filter(|r| r.tags.iter().any(|t| t == UNRELATED))
            .collect();
        let given = match unrelated.is_empty() {
            true => None,
            false => Some(
                unrelated.iter().map(|r| r.returned).sum::<usize>() as f64 / unrelated.len() as f64,
            ),
        };
        let tags: BTreeMap<String, Metrics> = asked
            .iter()
            .flat_map(|q| q.tags.iter())
            .filter(|t| *t != UNRELATED)
            .map(|t| {
                let m = Metrics::of(&ranks(&|r| r.tags.contains(t)));
                (t.clone(), m)
            })
            .collect();
        modes.insert(
            mode.as_str().to_owned(),
            ModeReport {
                all: Metrics::of(&ranks(&|_| true)),
                literal: Metrics::of(&ranks(&|r| !r.paraphrase)),
                paraphrase: Metrics::of(&ranks(&|r| r.paraphrase)),
                tags,
                unrelated_returned: given,
                results,
            },
        );
    }
    Ok(EvalReport {
        file: file.display().to_string(),
        memories: set.memories.len(),
        queries: asked.len(),
        paraphrases: asked.iter().filter(|q| q.paraphrase).count(),
        split: opts.split,
        distractors: distractors.len(),
        k: EVAL_K,
        modes,
    })
}

/// The rank (1-based) of the first expected memory among `hits` (best
/// first), if there: every other hit scored at least as high counts as
/// ranked before it, so a tie is never a win and the figure does not depend
/// on how tied hits happen to be ordered (by memory id, which is random).
pub fn rank_of(hits: &[(String, f32)], expect: &[String]) -> Option<usize> {
    let (_, best) = hits.iter().find(|(k, _)| expect.contains(k))?;
    let before = hits
        .iter()
        .filter(|(k, s)| !expect.contains(k) && *s >= *best)
        .count();
    Some(before + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_of_ranks() {
        let m = Metrics::of(&[Some(1), Some(2), None, Some(10)]);
        assert_eq!(m.queries, 4);
        assert_eq!(m.hit_at_1, 0.25);
        assert_eq!(m.hit_at_5, 0.5);
        assert!((m.mrr - (1.0 + 0.5 + 0.1) / 4.0).abs() < 1e-12);
        assert_eq!(Metrics::of(&[]), Metrics::default());
    }

    #[test]
    fn a_tie_is_never_a_win() {
        let hits = |v: &[(&str, f32)]| -> Vec<(String, f32)> {
            v.iter().map(|(k, s)| ((*k).to_owned(), *s)).collect()
        };
        let want = ["b".to_owned()];
        assert_eq!(rank_of(&hits(&[("b", 2.0), ("a", 2.0)]), &want), Some(2));
        assert_eq!(rank_of(&hits(&[("a", 2.0), ("b", 2.0)]), &want), Some(2));
        assert_eq!(rank_of(&hits(&[("b", 3.0), ("a", 2.0)]), &want), Some(1));
        assert_eq!(rank_of(&hits(&[("a", 3.0), ("c", 2.0)]), &want), None);
        // Another expected memory tied with the first is no loss.
        let both = ["a".to_owned(), "b".to_owned()];
        assert_eq!(rank_of(&hits(&[("b", 2.0), ("a", 2.0)]), &both), Some(1));
    }
}
