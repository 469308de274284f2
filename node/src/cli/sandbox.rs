//! Commands that run in homes of their own, never the user's: `demo` (a
//! mesh in throw-away homes), `eval` (recall quality on a golden set) and
//! `bench` (a workload, its generator, the mesh simulator).

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::Subcommand;

use super::output::Out;
use super::{bad, demo, eval};

#[derive(Subcommand, Debug)]
pub(super) enum SandboxCmd {
    /// Three nodes in throw-away homes pair by code, converge, recall by meaning through the gate and revoke, over loopback QUIC
    Demo,
    /// Recall quality on a golden set (hit@1, hit@5, MRR per mode) in a throw-away home
    Eval {
        /// The golden set: JSON, JSON lines, or a directory of JSON-lines files (e.g. node/eval/golden.jsonl, node/eval/deep)
        file: PathBuf,
        /// Ask only the questions of one part of the set: tune or heldout
        #[arg(long, value_name = "PART")]
        split: Option<String>,
        /// Mix these memories into the set, shared with everyone (JSON lines, {"content": "..."} each)
        #[arg(long, value_name = "FILE")]
        distractors: Option<PathBuf>,
        /// Mix in at most N of the distractors
        #[arg(long, value_name = "N", requires = "distractors")]
        distractor_limit: Option<usize>,
        /// Also write each question's lexical and semantic candidates (BM25, cosine) to FILE, as JSON lines (for tuning fusion on the tuning part)
        #[arg(long, value_name = "FILE")]
        candidates: Option<PathBuf>,
    },
    /// Benchmark on a workload directory (org.json, memories.jsonl, queries.jsonl), or write one
    Bench {
        /// The workload to run on
        #[arg(long, value_name = "DIR", required_unless_present_any = ["generate", "mesh"])]
        corpus: Option<PathBuf>,
        /// Write a workload of N memories into DIR instead (same N and seed, same bytes)
        #[arg(long, num_args = 2, value_names = ["N", "DIR"], conflicts_with = "corpus")]
        generate: Option<Vec<String>>,
        /// Simulate a mesh of N nodes instead (in memory, virtual time, deterministic)
        #[arg(long, value_name = "N", conflicts_with_all = ["corpus", "generate"])]
        mesh: Option<usize>,
        /// Neighbours per node of --mesh
        #[arg(long, value_name = "D", default_value_t = 4, requires = "mesh")]
        degree: usize,
        /// Seed of --generate [default: 20261130] or --mesh [default: 1]
        #[arg(long)]
        seed: Option<u64>,
        #[arg(long, default_value_t = 3)]
        passes: usize,
        /// Load at most N memories
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        /// Single durable adds to time after the load
        #[arg(long, default_value_t = 200)]
        adds: usize,
        /// Directory for the temporary home
        #[arg(long)]
        workdir: Option<PathBuf>,
        /// Keep the homes and the bundle afterwards (the report says where)
        #[arg(long)]
        keep: bool,
        /// Skip the live-sync section (two in-process nodes over loopback QUIC)
        #[arg(long)]
        no_sync: bool,
        /// The sentence encoder: on, or off to skip it (for 100k and 1M runs; the default mode is then as --mode fast)
        #[arg(long, value_name = "on|off", default_value = "on", value_parser = ["on", "off"])]
        encoder: String,
    },
}

/// Run one of this group's commands. `model` is `--model` as given.
pub(super) fn run(out: &Out, model: Option<&Path>, cmd: SandboxCmd) -> Result<()> {
    match cmd {
        SandboxCmd::Demo => demo::run(out),
        SandboxCmd::Eval {
            file,
            split,
            distractors,
            distractor_limit,
            candidates,
        } => {
            let split = match split.as_deref() {
                None => None,
                Some(s) => Some(amos_node::bench::eval::Split::parse(s).ok_or_else(|| {
                    bad(format!("eval --split: expected tune or heldout, got {s:?}"))
                })?),
            };
            let opts = amos_node::bench::eval::EvalOptions {
                split,
                distractors,
                distractor_limit,
                model: model.map(Path::to_path_buf),
                candidates,
            };
            eval::run(out, &file, &opts)
        }
        SandboxCmd::Bench {
            mesh: Some(nodes),
            degree,
            seed,
            ..
        } => {
            if nodes < 2 || degree < 1 || degree >= nodes {
                return Err(bad(format!(
                    "bench --mesh: needs at least 2 nodes and a degree from 1 to N-1 (got {nodes} nodes, degree {degree})"
                )));
            }
            let r = amos_node::bench::run_mesh(nodes, degree, seed.unwrap_or(1));
            out.emit(&r, || serde_json::to_string_pretty(&r).unwrap_or_default());
            Ok(())
        }
        SandboxCmd::Bench {
            generate: Some(args),
            seed,
            ..
        } => {
            let [n, dir] = args.as_slice() else {
                return Err(bad("amos bench --generate needs N and DIR"));
            };
            let memories = n.parse::<usize>().map_err(|_| {
                bad(format!(
                    "bench --generate: N must be a number of memories, at least 1 (got {n:?})"
                ))
            })?;
            let cfg = amos_node::bench::GenerateConfig {
                memories,
                dir: PathBuf::from(dir),
                seed: seed.unwrap_or(amos_node::bench::DEFAULT_SEED),
                feedback: out.feedback(),
            };
            let r = amos_node::bench::generate(&cfg)?;
            out.emit(&r, || {
                format!(
                    "wrote {} memories and {} queries to {} (seed {})",
                    r.memories, r.queries, r.dir, r.seed
                )
            });
            Ok(())
        }
        SandboxCmd::Bench {
            corpus,
            seed,
            passes,
            limit,
            adds,
            workdir,
            keep,
            no_sync,
            encoder,
            ..
        } => {
            let Some(corpus) = corpus else {
                return Err(bad(
                    "amos bench needs --corpus DIR, --generate N DIR or --mesh N",
                ));
            };
            if seed.is_some() {
                return Err(bad("bench: --seed goes with --generate or --mesh"));
            }
            let cfg = amos_node::bench::BenchConfig {
                corpus,
                passes: passes.max(1),
                limit,
                single_adds: adds,
                workdir,
                feedback: out.feedback(),
                keep,
                sync: !no_sync,
                encoder: encoder == "on",
            };
            let r = amos_node::bench::run(&cfg)?;
            out.emit(&r, || serde_json::to_string_pretty(&r).unwrap_or_default());
            Ok(())
        }
    }
}
