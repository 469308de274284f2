//! Recall alone, for profiling it: `search` or `pack` over a workload's
//! queries against a home that already holds the memories (one kept by
//! `amos bench --keep`), in this process, and the p50 / p99 of each call.
//!
//! ```text
//! cargo build --release -p amos-node --example recall_loop
//! perf record --call-graph dwarf target/release/examples/recall_loop HOME pack 2 QUERIES
//! target/release/examples/recall_loop HOME search 2 QUERIES fast
//! ```
//!
//! HOME is the node home, `search` or `pack` what to time, then the passes
//! over QUERIES (a workload's `queries.jsonl`), then optionally a recall
//! mode (`fast`, `lexical`, `hybrid`, `semantic`: the node's default when
//! left out), parsed by the front ends' one parser. Every query runs once
//! untimed first (warm), as `scripts/python-search-latency.py` does, so the
//! two give the Rust and the Python call on the same home the same way
//! (docs/bench.md, "Front ends"). Writes nothing but what a
//! recall writes anyway (recall counts, latency samples). With
//! `RECALL_LOOP_ANSWERS=1` it also prints every answer of the first pass
//! (ids and scores; a pack's decisions), to compare two builds' answers.

use std::path::PathBuf;
use std::time::Instant;

use amos_node::front::recall_mode;
use amos_node::recall::{PackOptions, RecallOptions};
use amos_node::{Home, Node, NodeError, Result};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (home, what, passes, queries, mode) = match args.as_slice() {
        [home, what, passes, queries] => (home, what, passes, queries, None),
        [home, what, passes, queries, mode] => (home, what, passes, queries, Some(mode.as_str())),
        _ => {
            return Err(NodeError::BadInput(
                "usage: recall_loop HOME search|pack PASSES QUERIES [MODE]".into(),
            ));
        }
    };
    let mode = recall_mode(mode)?;
    let passes: usize = passes
        .parse()
        .map_err(|_| NodeError::BadInput(format!("passes: not a number: {passes}")))?;
    let text = std::fs::read_to_string(queries)
        .map_err(|e| NodeError::BadInput(format!("reading {queries}: {e}")))?;
    let mut asks = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let q: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| NodeError::BadInput(format!("a query line: {e}")))?;
        match (q["as"].as_str(), q["query"].as_str()) {
            (Some(who), Some(query)) => asks.push((who.to_owned(), query.to_owned())),
            _ => return Err(NodeError::BadInput("a query line without as/query".into())),
        }
    }
    let mut node = Node::open(&Home::new(PathBuf::from(home)))?;
    let answers = std::env::var_os("RECALL_LOOP_ANSWERS").is_some_and(|v| v == "1");
    let search = RecallOptions {
        k: 10,
        mode,
        ..RecallOptions::default()
    };
    let mut pack = PackOptions::new(1200);
    pack.recall.mode = mode;
    let mut ms = Vec::new();
    // Pass 0 is the untimed warm-up.
    for pass in 0..=passes {
        for (who, query) in &asks {
            let t0 = Instant::now();
            let who = node.requester(who)?;
            let answer: Vec<String> = match what.as_str() {
                "pack" => {
                    let pack = node.pack_with(&who, query, &pack)?;
                    pack.report
                        .iter()
                        .map(|d| format!("{} {} {:.6} {}", d.id, d.decision, d.score, d.reason))
                        .collect()
                }
                "search" => node
                    .search_with(&who, query, &search)?
                    .iter()
                    .map(|h| format!("{} {:.6}", h.memory.id(), h.score))
                    .collect(),
                other => return Err(NodeError::BadInput(format!("not search or pack: {other}"))),
            };
            if pass > 0 {
                ms.push(t0.elapsed().as_secs_f64() * 1e3);
            }
            if answers && pass == 1 {
                println!("{query}\n  {}", answer.join("\n  "));
            }
        }
    }
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| {
        ms.get(((ms.len() as f64 - 1.0) * q) as usize)
            .copied()
            .unwrap_or(0.0)
    };
    println!(
        "{{\"recall\": \"{what}\", \"calls\": {}, \"p50_ms\": {:.3}, \"p99_ms\": {:.3}}}",
        ms.len(),
        at(0.5),
        at(0.99)
    );
    Ok(())
}
