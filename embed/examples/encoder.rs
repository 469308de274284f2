//! Times the sentence encoder:
//! `cargo run --release -p amos-embed --example encoder -- [--dir DIR] [--runs N] [--memories N]`
//! prints the load time, a ~10-word query's p50 and p99 over N runs, and the
//! batch throughput in memories/s for 64-word texts (`embed_batch`, rayon's
//! threads: set RAYON_NUM_THREADS). A measuring tool, not a test.

use std::time::Instant;

use amos_embed::Encoder;

const WORDS: &[&str] = &[
    "the",
    "payroll",
    "team",
    "reviews",
    "every",
    "correction",
    "before",
    "month",
    "end",
    "and",
    "security",
    "replaces",
    "lost",
    "badges",
    "at",
    "front",
    "desk",
    "after",
    "checking",
    "identity",
    "churn",
    "model",
    "predicts",
    "which",
    "customers",
    "may",
    "leave",
    "next",
    "quarter",
    "so",
    "support",
    "calls",
    "them",
    "early",
    "with",
    "an",
    "offer",
    "deploys",
    "roll",
    "back",
];

fn main() -> Result<(), amos_embed::ModelError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opt = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let runs: usize = opt("--runs").and_then(|r| r.parse().ok()).unwrap_or(200);
    let memories: usize = opt("--memories")
        .and_then(|r| r.parse().ok())
        .unwrap_or(256);
    let start = Instant::now();
    let owned;
    let e = match opt("--dir") {
        Some(d) => {
            owned = Encoder::from_dir(std::path::Path::new(&d))?;
            &owned
        }
        None => Encoder::builtin()?,
    };
    let load = start.elapsed();
    let first = Instant::now();
    e.embed_query("warm up");
    println!(
        "{}: load {:.2} ms, first query {:.2} ms",
        e.name(),
        load.as_secs_f64() * 1e3,
        first.elapsed().as_secs_f64() * 1e3
    );
    let query = "how do we guess which clients are about to leave us soon";
    let mut times: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(e.embed_query(query));
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    let pct = |p: f64| times[((times.len() - 1) as f64 * p).round() as usize];
    println!(
        "query ({} pieces): p50 {:.2} ms, p99 {:.2} ms, min {:.2} ms over {runs} runs",
        e.windows(query)[0].len(),
        pct(0.5),
        pct(0.99),
        times[0]
    );
    let texts: Vec<String> = (0..memories)
        .map(|i| {
            (0..64)
                .map(|j| WORDS[(i * 7 + j * 13 + j * j) % WORDS.len()])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let t = Instant::now();
    let out = e.embed_batch(&refs);
    let s = t.elapsed().as_secs_f64();
    println!(
        "batch: {memories} memories of 64 words ({} pieces each) in {s:.2} s: {:.1} memories/s on {} threads",
        e.windows(refs[0])[0].len(),
        out.len() as f64 / s,
        rayon::current_num_threads()
    );
    Ok(())
}
