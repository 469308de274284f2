//! `amos bench` end to end, on a workload `amos bench --generate` writes in a
//! temp dir: the generator is deterministic by seed (same seed, same bytes;
//! another seed, other memories and queries) and refuses bad input in one
//! line; the bench on 1,000 generated memories (one pass) reports every
//! field, stored every memory, recall finds hits, and the live-sync and text
//! sections converged; `bench --mesh` reports a converged, repaired,
//! deterministic simulated mesh. No timing assertions.

use std::path::Path;

use crate::common::Home;

const FILES: [&str; 3] = ["org.json", "memories.jsonl", "queries.jsonl"];

fn generate(home: &Home, n: &str, dir: &Path, seed: Option<&str>) -> serde_json::Value {
    let mut args = vec!["--json", "bench", "--generate", n, dir.to_str().unwrap()];
    if let Some(s) = seed {
        args.extend(["--seed", s]);
    }
    home.ok(&args).json()
}

fn files(dir: &Path) -> Vec<Vec<u8>> {
    FILES
        .iter()
        .map(|f| std::fs::read(dir.join(f)).unwrap())
        .collect()
}

#[test]
fn generate_is_deterministic_by_seed() {
    let home = Home::uninit();
    let (a, b, c) = (
        home.path().join("a"),
        home.path().join("b"),
        home.path().join("c"),
    );
    let r = generate(&home, "500", &a, None);
    assert_eq!(r["memories"], 500, "{r}");
    assert_eq!(r["queries"], 200, "{r}");
    assert_eq!(r["seed"], 20_261_130, "{r}");
    assert_eq!(r["framed_queries"], 60, "{r}");
    let mix = &r["visibility"];
    let total: u64 = ["private", "agent", "team", "project", "global"]
        .iter()
        .map(|k| mix[k].as_u64().unwrap())
        .sum();
    assert_eq!(total, 500, "{r}");
    let bytes: u64 = FILES
        .iter()
        .map(|f| std::fs::metadata(a.join(f)).unwrap().len())
        .sum();
    assert_eq!(r["bytes"], bytes, "{r}");
    // Only the three files: the temporary ones were renamed into place.
    assert_eq!(std::fs::read_dir(&a).unwrap().count(), 3);

    // The default seed, given explicitly: the same bytes.
    generate(&home, "500", &b, Some("20261130"));
    assert_eq!(files(&a), files(&b));
    // Generating again over an existing workload replaces it with the same bytes.
    generate(&home, "500", &b, None);
    assert_eq!(files(&a), files(&b));
    // Another seed: the same org, other memories and queries.
    generate(&home, "500", &c, Some("7"));
    let (fa, fc) = (files(&a), files(&c));
    assert_eq!(fa[0], fc[0]);
    assert_ne!(fa[1], fc[1]);
    assert_ne!(fa[2], fc[2]);
    // Without --json: one line saying what was written.
    let r = home.ok(&["bench", "--generate", "3", c.to_str().unwrap()]);
    assert_eq!(r.stdout.lines().count(), 1, "{r:?}");
    assert!(
        r.stdout.starts_with("wrote 3 memories and 200 queries to "),
        "{r:?}"
    );
    assert_eq!(
        std::fs::read_to_string(c.join("memories.jsonl"))
            .unwrap()
            .lines()
            .count(),
        3
    );
}

#[test]
fn generate_refuses_bad_input_in_one_line() {
    let home = Home::uninit();
    let file = home.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let dir = home.path().join("w");
    let d = dir.to_str().unwrap();
    for (args, says) in [
        (vec!["bench", "--generate", "0", d], "at least 1"),
        (vec!["bench", "--generate", "ten", d], "at least 1"),
        (
            vec!["bench", "--generate", "5", file.to_str().unwrap()],
            "not a directory",
        ),
    ] {
        let r = home.run(&args);
        assert_eq!(r.code, 2, "{args:?}: {r:?}");
        assert!(r.stderr.contains(says), "{args:?}: {r:?}");
        assert_eq!(r.stderr.trim().lines().count(), 1, "{args:?}: {r:?}");
        assert!(r.stdout.is_empty(), "{args:?}: {r:?}");
    }
    assert!(!dir.exists(), "nothing was written");
    // Usage errors (clap's): --seed without --generate, both modes at once.
    let r = home.run(&["bench", "--corpus", d, "--seed", "3"]);
    assert_eq!(r.code, 2, "{r:?}");
    let r = home.run(&["bench", "--corpus", d, "--generate", "5", d]);
    assert_eq!(r.code, 2, "{r:?}");
}

#[test]
fn bench_runs_on_a_generated_workload() {
    let home = Home::uninit();
    let corpus = home.path().join("workload");
    let work = home.path().join("work");
    std::fs::create_dir(&work).unwrap();
    generate(&home, "1000", &corpus, None);
    let r = home.run(&[
        "--json",
        "bench",
        "--corpus",
        corpus.to_str().unwrap(),
        "--passes",
        "1",
        "--adds",
        "5",
        "--workdir",
        work.to_str().unwrap(),
        "--encoder",
        "off",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    // The encoder is skipped: no encoder figures, nothing searched during
    // a catch-up.
    assert!(v["encoder"].is_null(), "{v}");
    assert!(v["search_during_catch_up_ms"].is_null(), "{v}");
    for field in [
        "memories",
        "queries",
        "passes",
        "load_s",
        "load_per_s",
        "add_ms",
        "search_ms",
        "pack_ms",
        "index_build_s",
        "index_rebuild_s",
        "db_bytes",
        "index_bytes",
        "peak_rss_bytes",
        "export_s",
        "import_s",
        "bundle_bytes",
        "import_verify_s",
        "import_apply_s",
        "import_applied",
        "queries_with_hits",
        "mean_hits",
        "sync",
        "text",
    ] {
        assert!(!v[field].is_null(), "missing {field}: {v}");
    }
    for field in [
        "add_ms",
        "search_ms",
        "pack_ms",
        "search_fast_ms",
        "pack_fast_ms",
    ] {
        assert!(v[field]["p50"].is_f64() && v[field]["p99"].is_f64(), "{v}");
    }
    // The machine that ran it, so that runs on two machines are not read as one.
    assert!(
        v["machine"]["cores"].as_u64().is_some_and(|n| n >= 1),
        "{v}"
    );
    assert_eq!(v["machine"]["amos"], env!("CARGO_PKG_VERSION"), "{v}");
    if cfg!(target_os = "linux") {
        assert!(v["machine"]["load_before"].is_f64(), "{v}");
    }
    assert_eq!(v["memories"], 1000);
    assert_eq!(v["queries"], 200);
    assert_eq!(v["passes"], 1);
    assert!(v["kept"].is_null() && v["sync_error"].is_null() && v["text_error"].is_null());
    assert!(v["search_ms"]["p50"].as_f64().unwrap() > 0.0);
    assert!(v["db_bytes"].as_u64().unwrap() > 0);
    assert!(v["bundle_bytes"].as_u64().unwrap() > 0);
    // The import applied everything the exporter had: at least the two
    // facts (content and acl) of each memory.
    assert!(v["import_applied"].as_u64().unwrap() >= 2000, "{v}");
    // Most queries find something their agent may see.
    assert!(v["queries_with_hits"].as_u64().unwrap() > 100, "{v}");
    assert!(v["mean_hits"].as_f64().unwrap() > 1.0, "{v}");
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
    // Facts moved: the incremental session compared no digests.
    assert_eq!(sync["incremental_compared"], false, "{sync}");
    // Nothing to do: nothing moves, only the session's own messages; the
    // digests are compared, and agree.
    assert_eq!(sync["idle_facts"], 0, "{sync}");
    assert_eq!(sync["idle_digest_agree"], true, "{sync}");
    assert!(sync["idle_cached_ms"].as_f64().is_some(), "{sync}");
    // Two hellos, two dones and two digests: a few watermarks and hashes,
    // no per-fact or per-row cost (one signed fact alone is over 200 bytes).
    let idle_bytes = sync["idle_bytes"].as_u64().unwrap();
    assert!(idle_bytes > 0 && idle_bytes < 512, "{sync}");
    assert!(sync["initial_bytes"].as_u64().unwrap() > idle_bytes);
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
    // The temporary homes are removed afterwards.
    let left: Vec<_> = std::fs::read_dir(&work).unwrap().collect();
    assert!(left.is_empty(), "bench left files behind: {left:?}");
}

/// With the encoder (the default), the bulk load leaves every memory
/// pending; the bench's catch-up encodes them all, reports its time, rate
/// and query figures, and searches between its batches.
#[test]
fn bench_encodes_what_the_bulk_load_left_pending() {
    let home = Home::uninit();
    let corpus = home.path().join("workload");
    let work = home.path().join("work");
    std::fs::create_dir(&work).unwrap();
    generate(&home, "1000", &corpus, None);
    let r = home.run(&[
        "--json",
        "bench",
        "--corpus",
        corpus.to_str().unwrap(),
        "--limit",
        "130",
        "--passes",
        "1",
        "--adds",
        "2",
        "--no-sync",
        "--workdir",
        work.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    assert_eq!(v["memories"], 130, "{v}");
    let e = &v["encoder"];
    assert!(
        e["model"].as_str().is_some_and(|m| m.contains("minilm")),
        "{v}"
    );
    assert_eq!(e["encoded"], 130, "every loaded memory was pending: {v}");
    assert!(e["catch_up_s"].as_f64().is_some_and(|s| s > 0.0), "{v}");
    assert!(e["memories_per_s"].as_f64().is_some_and(|s| s > 0.0), "{v}");
    assert!(
        e["query_ms"]["p50"].as_f64().is_some_and(|s| s > 0.0),
        "{v}"
    );
    // 130 memories are three batches of 64: a search after each.
    let during = &v["search_during_catch_up_ms"];
    assert!(during["p50"].as_f64().is_some_and(|s| s > 0.0), "{v}");
    for field in ["search_ms", "pack_ms", "search_fast_ms", "pack_fast_ms"] {
        assert!(
            v[field]["p50"].as_f64().is_some_and(|s| s > 0.0),
            "{field}: {v}"
        );
    }
    assert!(v["rss"]["encoder"]["peak_bytes"].is_u64(), "{v}");
}

/// `bench --mesh`: the simulated mesh's report has the fields, has
/// converged, repaired the restored node, and is the same for the same seed.
#[test]
fn bench_mesh_reports_a_converged_deterministic_mesh() {
    let home = Home::uninit();
    let args = [
        "--json", "bench", "--mesh", "12", "--degree", "3", "--seed", "2",
    ];
    let r = home.run(&args);
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    for field in [
        "nodes",
        "degree",
        "diameter",
        "converged",
        "push_apply_s",
        "revocation_periods",
        "idle_bytes_per_node",
        "repair",
    ] {
        assert!(v.get(field).is_some(), "{field} missing: {v}");
    }
    assert_eq!(v["nodes"], 12);
    assert_eq!(v["degree"], 3);
    assert_eq!(v["converged"], true, "{v}");
    assert!(v["push_apply_s"].as_f64().is_some_and(|s| s > 0.0), "{v}");
    assert!(v["idle_bytes_per_node"].as_f64().is_some_and(|b| b > 0.0));
    let repair = &v["repair"];
    assert!(repair["round_trips"].as_u64().is_some_and(|n| n > 0), "{v}");
    assert!(
        repair["bytes"].as_u64().unwrap() < repair["full_resend_bytes"].as_u64().unwrap(),
        "{v}"
    );
    assert_eq!(home.run(&args).stdout, r.stdout, "same seed, same report");
    for bad in [["bench", "--mesh", "1"], ["bench", "--mesh", "x"]] {
        let r = home.run(&bad);
        assert_eq!(r.code, 2, "{bad:?}: {r:?}");
        assert!(r.stdout.is_empty());
    }
}
