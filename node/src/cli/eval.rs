//! `amos eval FILE`: prints what `amos_node::bench::eval` measured.

use std::path::Path;

use amos_node::bench::eval::{self, Metrics};
use anyhow::Result;

use super::output::Out;

pub fn run(out: &Out, file: &Path, model: Option<&Path>) -> Result<()> {
    let r = eval::run(file, model)?;
    out.emit(&r, || {
        let row = |name: &str, m: &Metrics| {
            format!(
                "{name:<14} {:>6.3} {:>6.3} {:>6.3} {:>8}",
                m.hit_at_1, m.hit_at_5, m.mrr, m.queries
            )
        };
        let mut lines = vec![
            format!(
                "{}: {} memories, {} queries ({} paraphrased), top {}",
                r.file, r.memories, r.queries, r.paraphrases, r.k
            ),
            format!(
                "{:<14} {:>6} {:>6} {:>6} {:>8}",
                "mode", "hit@1", "hit@5", "MRR", "queries"
            ),
        ];
        for (mode, m) in &r.modes {
            lines.push(row(mode, &m.all));
            lines.push(row("  literal", &m.literal));
            lines.push(row("  paraphrase", &m.paraphrase));
        }
        for (mode, m) in &r.modes {
            let missed: Vec<String> = m
                .results
                .iter()
                .filter(|q| q.rank.is_none_or(|r| r > 5))
                .map(|q| {
                    let rank = q.rank.map_or("-".to_owned(), |r| r.to_string());
                    format!("  [{rank:>2}] {} asks {:?}", q.agent, q.query)
                })
                .collect();
            if !missed.is_empty() {
                lines.push(format!("{mode}: not in the top 5 ({}):", missed.len()));
                lines.extend(missed);
            }
        }
        lines.join("\n")
    });
    Ok(())
}
