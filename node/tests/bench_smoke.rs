//! `amos bench` on the shared w10k workload, reduced (first 1000 memories,
//! one pass): correctness only — the report has every field, the load
//! stored every memory, and recall returns hits. No timing assertions.

mod common;

use std::path::PathBuf;

use common::Home;

fn corpus() -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/bench/w10k");
    p.join("memories.jsonl").is_file().then_some(p)
}

#[test]
fn bench_runs_on_the_shared_workload() {
    let Some(corpus) = corpus() else {
        eprintln!("SKIPPED: ../shared/bench/w10k not found beside the repository");
        return;
    };
    let home = Home::uninit();
    let r = home.run(&[
        "--json",
        "bench",
        "--corpus",
        corpus.to_str().unwrap(),
        "--limit",
        "1000",
        "--passes",
        "1",
        "--adds",
        "5",
        "--workdir",
        home.path().to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    for field in [
        "memories",
        "load_per_s",
        "add_ms",
        "search_ms",
        "pack_ms",
        "index_rebuild_s",
        "db_bytes",
        "index_bytes",
        "peak_rss_bytes",
    ] {
        assert!(!v[field].is_null(), "missing {field}: {v}");
    }
    assert_eq!(v["memories"], 1000);
    assert_eq!(v["queries"], 200);
    assert!(v["search_ms"]["p50"].as_f64().unwrap() > 0.0);
    assert!(v["db_bytes"].as_u64().unwrap() > 0);
    // Most queries find something this agent may see.
    assert!(v["queries_with_hits"].as_u64().unwrap() > 100, "{v}");
    // The temporary home is removed afterwards.
    let left: Vec<_> = std::fs::read_dir(home.path()).unwrap().collect();
    assert!(left.is_empty(), "bench left files behind: {left:?}");
}
