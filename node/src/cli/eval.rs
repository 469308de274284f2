//! `amos eval FILE`: prints what `amos_node::bench::eval` measured.

use std::path::Path;

use amos_node::bench::eval::{self, EvalOptions, Metrics};
use anyhow::Result;

use super::output::Out;

pub fn run(out: &Out, file: &Path, opts: &EvalOptions) -> Result<()> {
    let r = eval::run_with(file, opts)?;
    out.emit(&r, || {
        let row = |name: &str, m: &Metrics| {
            format!(
                "{name:<14} {:>6.3} {:>6.3} {:>6.3} {:>8}",
                m.hit_at_1, m.hit_at_5, m.mrr, m.queries
            )
        };
        let mut lines = vec![
            format!(
                "{}: {} memories{}, {} queries{} ({} paraphrased), top {}",
                r.file,
                r.memories,
                match r.distractors {
                    0 => String::new(),
                    n => format!(" + {n} distractors"),
                },
                r.queries,
                match r.split {
                    Some(eval::Split::Tune) => " of the tuning part",
                    Some(eval::Split::Heldout) => " of the held-out part",
                    None => "",
                },
                r.paraphrases,
                r.k
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
            for (tag, t) in &m.tags {
                lines.push(row(&format!("  {tag}"), t));
            }
            if let Some(n) = m.unrelated_returned {
                lines.push(format!("  unrelated: {n:.1} memories returned a question"));
            }
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
