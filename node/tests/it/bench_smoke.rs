//! `amos bench` on the shared w10k workload, reduced (first 1000 memories,
//! one pass): correctness only — the report has every field, the load
//! stored every memory, recall returns hits, and the live-sync section
//! converged (equal digests, every fact moved once, an idle sync moves
//! nothing). No timing assertions.

use std::path::PathBuf;

use crate::common::Home;

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
    // Live sync, A (loaded) → fresh B over loopback QUIC.
    let sync = &v["sync"];
    assert!(sync.is_object(), "missing sync section: {v}");
    assert_eq!(sync["digests_equal"], true, "{sync}");
    // Every replicated fact of A reached B in the initial sync: 2 per
    // memory, plus the org graph (5 teams, 10 projects, 20 agents and
    // their memberships).
    let digest_facts = sync["digest_facts"].as_u64().unwrap();
    assert!(digest_facts > 2000, "{sync}");
    assert_eq!(
        sync["initial_facts"].as_u64().unwrap(),
        digest_facts,
        "{sync}"
    );
    // 100 edited memories: export is per changed row, so each sends its
    // new content fact and its (unchanged) acl fact; nothing else moves.
    assert_eq!(sync["incremental_changed"], 100, "{sync}");
    assert_eq!(sync["incremental_facts"], 200, "{sync}");
    // Nothing to do: nothing moves, only the session's own messages.
    assert_eq!(sync["idle_facts"], 0, "{sync}");
    // Two hellos and two dones: a few watermarks, no per-fact or per-row
    // cost (one signed fact alone is over 200 bytes).
    let idle_bytes = sync["idle_bytes"].as_u64().unwrap();
    assert!(idle_bytes > 0 && idle_bytes < 512, "{sync}");
    assert!(sync["initial_bytes"].as_u64().unwrap() > sync["idle_bytes"].as_u64().unwrap());
    // Concurrent edits of one 10 kB memory on two full peers: both sides'
    // edits survive on both; one one-line edit travels as one small fact;
    // compaction keeps an edited memory's storage within 3x its text.
    let text = &v["text"];
    assert!(text.is_object(), "missing text section: {v}");
    assert_eq!(text["converged"], true, "{text}");
    assert!(text["text_bytes"].as_u64().unwrap() >= 10_000, "{text}");
    assert!(text["edit_fact_bytes"].as_u64().unwrap() < 1024, "{text}");
    let after = text["overhead_after"].as_f64().unwrap();
    assert!(after > 0.0 && after <= 3.0, "{text}");
    assert!(
        text["overhead_after"].as_f64() < text["overhead_before"].as_f64(),
        "{text}"
    );
    // The temporary home is removed afterwards.
    let left: Vec<_> = std::fs::read_dir(home.path()).unwrap().collect();
    assert!(left.is_empty(), "bench left files behind: {left:?}");
}
