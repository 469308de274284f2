//! Recall commands: search, pack and the ranking profiles, with the ranking
//! and time options they share (`list` and `timeline` take the time ones).

use amos_node::Node;
use anyhow::Result;
use clap::{Args, Subcommand};
use serde_json::json;

use super::output::{self, Out, hit_json};
use super::{AsAgent, bad, who};

#[derive(Subcommand, Debug)]
pub(super) enum RecallCmd {
    /// Gated, ranked recall
    Search {
        query: String,
        #[command(flatten)]
        who: AsAgent,
        /// How many hits, at most (1000)
        #[arg(short, long = "limit", default_value_t = amos_node::recall::DEFAULT_K)]
        k: usize,
        /// Show every factor of each hit's score
        #[arg(long)]
        explain: bool,
        #[command(flatten)]
        ranking: Ranking,
        #[command(flatten)]
        time: TimeArgs,
    },
    /// Token-budgeted context pack
    Pack {
        query: String,
        #[command(flatten)]
        who: AsAgent,
        /// Token budget
        #[arg(long, default_value_t = amos_node::recall::DEFAULT_BUDGET)]
        budget: usize,
        /// Explain every include/exclude decision
        #[arg(long)]
        report: bool,
        /// Count using the pack as helpful feedback on its items (local-only)
        #[arg(long)]
        reinforce: bool,
        #[command(flatten)]
        ranking: Ranking,
        #[command(flatten)]
        time: TimeArgs,
    },
    /// Per-agent ranking weights by memory type (replicated)
    #[command(subcommand)]
    Profile(ProfileCmd),
}

#[derive(Subcommand, Debug)]
pub(super) enum ProfileCmd {
    /// Set type weights, e.g. `procedure=1.5 note=0.7` (1 removes a weight)
    Set {
        agent: String,
        #[arg(required = true, value_name = "TYPE=WEIGHT")]
        weights: Vec<String>,
    },
    /// Show an agent's type weights
    Show { agent: String },
}

/// Ranking options shared by search and pack.
#[derive(Args, Debug, Clone)]
pub(super) struct Ranking {
    /// Freshness half-life (e.g. 30d); pinned memories never decay
    #[arg(
        long,
        value_name = "DUR",
        default_value = "30d",
        env = "AMOS_HALF_LIFE"
    )]
    half_life: String,
    /// Candidates: hybrid (words and meaning by the sentence encoder, fused), lexical (words), semantic (meaning) or fast (words and the static model)
    #[arg(long, value_enum, default_value = "hybrid", env = "AMOS_RECALL_MODE")]
    mode: ModeArg,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ModeArg {
    Hybrid,
    Lexical,
    Semantic,
    Fast,
}

impl From<ModeArg> for amos_node::recall::RecallMode {
    fn from(m: ModeArg) -> Self {
        match m {
            ModeArg::Hybrid => Self::Hybrid,
            ModeArg::Lexical => Self::Lexical,
            ModeArg::Semantic => Self::Semantic,
            ModeArg::Fast => Self::Fast,
        }
    }
}

impl Ranking {
    fn half_life_ms(&self) -> Result<u64> {
        humantime::parse_duration(&self.half_life)
            .ok()
            .map(|d| d.as_millis() as u64)
            .filter(|ms| *ms >= 1000)
            .ok_or_else(|| {
                bad(format!(
                    "malformed --half-life {:?}: use a duration of at least 1s, e.g. 30d",
                    self.half_life
                ))
            })
    }
}

/// Time filters of recall (`search`, `pack`, `list`).
#[derive(clap::Args, Debug, Clone, Default)]
pub(super) struct TimeArgs {
    /// Only memories whose valid time starts at or after this
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub(super) since: Option<String>,
    /// Only memories whose valid time starts at or before this
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub(super) until: Option<String>,
    /// What was true then: superseded and ended memories drop out
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub(super) valid_at: Option<String>,
    /// Answer with what was on record then: exact for a never-edited memory;
    /// an edited one back to its latest compaction, before which it reads as
    /// its base text (docs/design.md §12.2)
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub(super) known_at: Option<String>,
}

impl TimeArgs {
    pub(super) fn query(self, now_ms: u64) -> Result<amos_node::recall::TimeQuery> {
        Ok(amos_node::front::TimeRequest {
            since: self.since,
            until: self.until,
            valid_at: self.valid_at,
            known_at: self.known_at,
        }
        .query(now_ms, |f| format!("--{f}"))?)
    }
}

/// Run one of this group's commands on an open node.
pub(super) fn run(node: &mut Node, out: &Out, cmd: RecallCmd) -> Result<()> {
    match cmd {
        RecallCmd::Search {
            query,
            who: w,
            k,
            explain,
            ranking,
            time,
        } => {
            let who = who(node, &w)?;
            let opts = amos_node::recall::RecallOptions {
                k,
                half_life_ms: ranking.half_life_ms()?,
                time: time.query(node.now_ms())?,
                mode: ranking.mode.into(),
                ..Default::default()
            };
            let hits = node.search_with(&who, &query, &opts)?;
            if hits.is_empty() {
                out.nothing(|| {
                    format!(
                        "no memories visible to {} match {query:?}{}",
                        w.name(),
                        output::time_filters_text(&opts.time)
                    )
                });
            }
            out.emit(
                &json!({"hits": hits.iter().map(hit_json).collect::<Vec<_>>()}),
                || output::hits_text(&hits, explain),
            );
        }
        RecallCmd::Pack {
            query,
            who: w,
            budget,
            report,
            reinforce,
            ranking,
            time,
        } => {
            let who = who(node, &w)?;
            let mut opts = amos_node::recall::PackOptions::new(budget);
            opts.recall.half_life_ms = ranking.half_life_ms()?;
            opts.recall.mode = ranking.mode.into();
            opts.recall.time = time.query(node.now_ms())?;
            opts.reinforce = reinforce;
            let p = node.pack_with(&who, &query, &opts)?;
            out.emit(&output::pack_json(&p, report), || {
                output::pack_text(&p, report)
            });
        }
        RecallCmd::Profile(p) => {
            let (agent, weights) = match p {
                ProfileCmd::Set { agent, weights } => {
                    let weights = weights
                        .iter()
                        .map(|w| amos_node::api::parse_weight(w))
                        .collect::<Result<Vec<_>, _>>()?;
                    let set = node.profile_set(&agent, &weights)?;
                    (agent, set)
                }
                ProfileCmd::Show { agent } => {
                    let w = node.profile_show(&agent)?;
                    (agent, w)
                }
            };
            out.emit(&json!({"agent": agent, "weights": weights}), || {
                if weights.is_empty() {
                    format!("{agent}: no weights (every type weighs 1)")
                } else {
                    weights
                        .iter()
                        .map(|(t, w)| format!("{agent}  {t}={w}"))
                        .collect::<Vec<_>>()
                        .join("\n")
                }
            });
        }
    }
    Ok(())
}
