//! The bulk load of `amos bench --corpus DIR` alone, for profiling it: the
//! workload's org is created in a throw-away home, then every memory goes
//! through `Node::add_many`, 1,000 per transaction, as in the bench; the
//! rest of the bench (index, recall, bundle, sync) is not run.
//!
//! ```text
//! cargo run --release -p amos-node --example bulk_load -- DIR [RUNS]
//! ```
//!
//! Prints one line per run: memories, seconds, memories per second. Parsing
//! the workload file happens before the clock starts.

use std::path::PathBuf;
use std::time::Instant;

use amos_node::Home;
use amos_node::api::Node;
use amos_node::bench::{Org, WorkloadMemory, build_org};

const BATCH: usize = 1000;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(
        args.next()
            .ok_or_else(|| anyhow::anyhow!("usage: bulk_load DIR [RUNS]"))?,
    );
    let runs: usize = match args.next() {
        Some(r) => r.parse()?,
        None => 1,
    };
    let org: Org = serde_json::from_str(&std::fs::read_to_string(dir.join("org.json"))?)?;
    let memories: Vec<WorkloadMemory> = std::fs::read_to_string(dir.join("memories.jsonl"))?
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    for _ in 0..runs {
        let tmp = tempfile::tempdir()?;
        let home = Home::new(tmp.path().join("home"));
        Node::init(&home, Some("bulk-load"))?;
        let mut node = Node::open(&home)?;
        let requesters = build_org(&mut node, &org)?;
        let t0 = Instant::now();
        for chunk in memories.chunks(BATCH) {
            let mut batch = Vec::with_capacity(chunk.len());
            for m in chunk {
                let who = requesters
                    .get(&m.owner)
                    .ok_or_else(|| anyhow::anyhow!("unknown owner {}", m.owner))?;
                batch.push((who, m.to_new()?));
            }
            node.add_many(batch)?;
        }
        let s = t0.elapsed().as_secs_f64();
        println!(
            "{} memories {:.3} s {:.0} /s",
            memories.len(),
            s,
            memories.len() as f64 / s
        );
    }
    Ok(())
}
