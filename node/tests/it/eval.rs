//! `amos eval`: the shipped golden sets keep their figures in every mode, the gate
//! holds inside the eval (a hidden memory never counts), and a bad golden
//! set is refused with exit 2.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::common::{Home, Run};

fn golden() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("eval/golden.jsonl")
}

fn eval(file: &std::path::Path) -> Run {
    let h = Home::uninit();
    h.run(&["--json", "eval", file.to_str().unwrap()])
}

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn heldout() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("eval/heldout.jsonl")
}

fn unseen() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("eval/unseen.jsonl")
}

/// `set`'s figures in `mode` must reach `floor` (hit@1, hit@5, MRR).
fn at_least(v: &Value, mode: &str, floor: [f64; 3]) {
    let m = &v["modes"][mode];
    for (k, min) in ["hit_at_1", "hit_at_5", "mrr"].into_iter().zip(floor) {
        let got = m[k].as_f64().unwrap();
        assert!(got >= min, "{} {mode} {k} {got} < {min}", v["file"]);
    }
}

/// Measured on the shipped sets with the analyzer without stop-words
/// (`amos-en-4`: stems, joined compounds, English stop-words dropped, CJK
/// bigrams) and the built-in model (384-dim int8, tuned on WordNet's
/// definitions by models/tune.py over all 160,175 texts, cosine floor
/// 0.17), 2026-12-06:
///
/// | set | lexical | semantic | hybrid |
/// |---|---|---|---|
/// | golden | 0.689 / 0.889 / 0.764 | 0.756 / 0.978 / 0.838 | 0.800 / 0.978 / 0.859 |
/// | held-out | 0.744 / 0.884 / 0.806 | 0.791 / 1.000 / 0.878 | 0.884 / 1.000 / 0.927 |
/// | unseen | 0.600 / 0.627 / 0.613 | 0.747 / 0.907 / 0.814 | 0.733 / 0.867 / 0.803 |
///
/// (hit@1 / hit@5 / MRR), with BM25's statistics counted over each
/// requester's visible memories (docs/design.md §9, "Statistics"). With
/// stop-words as terms (`amos-en-2`, before 2026-12-06) they were:
///
/// | set | lexical | semantic | hybrid |
/// |---|---|---|---|
/// | golden | 0.644 / 0.956 / 0.753 | 0.756 / 0.978 / 0.838 | 0.822 / 1.000 / 0.881 |
/// | held-out | 0.605 / 0.860 / 0.689 | 0.791 / 1.000 / 0.878 | 0.837 / 0.977 / 0.903 |
/// | unseen | 0.627 / 0.707 / 0.663 | 0.747 / 0.907 / 0.814 | 0.760 / 0.880 / 0.811 |
///
/// Dropping stop-words raised held-out in both modes and golden's lexical
/// hit@1 (29 → 31 of 45 first), and lowered the floors that fell: every
/// question lexical recall lost from its top 5 is a paraphrase whose
/// expected memory shared nothing but stop-words with it (golden "who gets
/// woken up at night when something breaks" matched the on-call rotation
/// by `at`; unseen "what's expected of someone who just joined during
/// their initial month?" was first by `who`, `just`, `their`): matches
/// issue 39 asks to stop counting. Hybrid lost one question's first place
/// on golden (37 → 36) and two on unseen (57 → 55), the same stop-word
/// matches no longer adding to the lexical share of the fusion. So golden's
/// margin of hybrid over lexical at hit@1 is now 5 questions (36 against
/// 31), below the 15 points it had to keep: it is 10 points for every set
/// until the fusion is tuned (issue 39 item 8). Earlier: BM25 over the
/// whole store (before 2026-12-06) gave golden lexical 0.667 / 0.956 /
/// 0.759; the analyzer before stemming 0.644 / 0.889 / 0.736. The
/// thresholds sit just below: a change that costs recall quality on these
/// sets fails here; one that gains should raise them.
#[test]
fn the_shipped_golden_sets_keep_their_figures() {
    let r = eval(&golden());
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    assert!(v["memories"].as_u64().unwrap() >= 40, "{v}");
    let queries = v["queries"].as_u64().unwrap();
    assert!(queries >= 30);
    assert!(v["paraphrases"].as_u64().unwrap() * 3 >= queries);
    let lexical = &v["modes"]["lexical"];
    assert_eq!(lexical["queries"], queries);
    for part in ["literal", "paraphrase"] {
        assert!(lexical[part]["queries"].as_u64().unwrap() > 0);
    }
    assert_eq!(lexical["results"].as_array().unwrap().len() as u64, queries);
    at_least(&v, "lexical", [0.68, 0.88, 0.76]);
    at_least(&v, "semantic", [0.73, 0.96, 0.82]);
    at_least(&v, "hybrid", [0.78, 0.97, 0.85]);

    let r = eval(&heldout());
    assert_eq!(r.code, 0, "{r:?}");
    let h = r.json();
    assert!(h["queries"].as_u64().unwrap() >= 30);
    at_least(&h, "lexical", [0.72, 0.86, 0.79]);
    at_least(&h, "semantic", [0.77, 0.98, 0.86]);
    at_least(&h, "hybrid", [0.86, 0.98, 0.91]);

    let r = eval(&unseen());
    assert_eq!(r.code, 0, "{r:?}");
    let u = r.json();
    let queries = u["queries"].as_u64().unwrap();
    assert!(queries >= 30);
    assert!(u["paraphrases"].as_u64().unwrap() * 3 >= queries);
    at_least(&u, "lexical", [0.59, 0.61, 0.60]);
    at_least(&u, "semantic", [0.73, 0.89, 0.80]);
    at_least(&u, "hybrid", [0.72, 0.85, 0.79]);
    for (v, margin) in [(&v, 0.1), (&h, 0.1), (&u, 0.1)] {
        let hit1 = |m: &str| v["modes"][m]["hit_at_1"].as_f64().unwrap();
        assert!(hit1("hybrid") >= hit1("lexical") + margin, "{}", v["file"]);
    }
}

/// The same figures run twice: ties are never a win, so the report does not
/// depend on memory ids (random) or index layout.
#[test]
fn the_figures_do_not_depend_on_the_run() {
    let a = eval(&golden()).json();
    let b = eval(&golden()).json();
    for mode in ["lexical", "semantic", "hybrid"] {
        for k in ["hit_at_1", "hit_at_5", "mrr"] {
            assert_eq!(a["modes"][mode][k], b["modes"][mode][k], "{mode} {k}");
        }
    }
}

fn gate_set(expect: &str) -> Value {
    json!({
        "org": {"agents": ["alice", "bob"], "teams": {}, "projects": {}},
        "memories": [
            {"key": "hidden", "owner": "alice", "share": [], "type": "note",
             "content": "the vault unseal key is in the red binder in the vault room"},
            {"key": "shared", "owner": "alice", "share": ["global"], "type": "procedure",
             "content": "ask security to unseal vault"},
            {"key": "other", "owner": "alice", "share": ["global"], "type": "note",
             "content": "the lunch menu changes on Mondays"}
        ],
        "queries": [
            {"as": "alice", "query": "where is the vault unseal key", "expect": ["shared"]},
            {"as": "bob", "query": "where is the vault unseal key", "expect": [expect]}
        ]
    })
}

/// A memory the agent cannot see never takes a rank and never counts: for
/// alice (who may see it) it ranks above the shared answer; for bob the
/// shared answer is first and the hidden one is nowhere in his results.
/// Expecting the hidden memory for bob is refused, not scored.
#[test]
fn a_hidden_memory_that_would_rank_first_never_counts() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(&dir, "gate.json", &gate_set("shared").to_string());
    let r = eval(&file);
    assert_eq!(r.code, 0, "{r:?}");
    let results = r.json()["modes"]["lexical"]["results"].clone();
    assert_eq!(results[0]["as"], "alice");
    assert_eq!(results[0]["top"][0], "hidden", "{results}");
    assert_eq!(results[0]["rank"], 2);
    assert_eq!(results[1]["as"], "bob");
    assert_eq!(results[1]["rank"], 1, "{results}");
    assert!(
        !results[1]["top"]
            .as_array()
            .unwrap()
            .contains(&json!("hidden")),
        "{results}"
    );

    let file = write(&dir, "gate-bad.json", &gate_set("hidden").to_string());
    let r = eval(&file);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stdout.is_empty(), "{r:?}");
    assert!(
        r.stderr.contains("\"hidden\" is not visible to bob"),
        "{r:?}"
    );
}

/// The JSON-lines form reads like the JSON one.
#[test]
fn json_lines_and_json_give_the_same_figures() {
    let dir = tempfile::tempdir().unwrap();
    let set = gate_set("shared");
    let mut lines = vec![json!({"org": set["org"]}).to_string()];
    for m in set["memories"].as_array().unwrap() {
        lines.push(json!({ "memory": m }).to_string());
    }
    for q in set["queries"].as_array().unwrap() {
        lines.push(json!({ "query": q }).to_string());
    }
    let jsonl = write(&dir, "gate.jsonl", &lines.join("\n"));
    let json = write(&dir, "gate.json", &set.to_string());
    let a = eval(&jsonl).json();
    let b = eval(&json).json();
    assert_eq!(a["modes"]["lexical"]["mrr"], b["modes"]["lexical"]["mrr"]);
    assert_eq!(a["queries"], 2);
}

#[test]
fn a_bad_golden_set_is_refused_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.jsonl");
    let unknown_key = {
        let mut s = gate_set("shared");
        s["queries"][0]["expect"] = json!(["no-such-key"]);
        s
    };
    let unknown_agent = {
        let mut s = gate_set("shared");
        s["queries"][0]["as"] = json!("mallory");
        s
    };
    let twice = {
        let mut s = gate_set("shared");
        s["memories"][1]["key"] = json!("hidden");
        s
    };
    let cases = [
        (missing, "cannot read"),
        (write(&dir, "syntax.jsonl", "{\"org\": "), "EOF"),
        (
            write(&dir, "key.json", &unknown_key.to_string()),
            "no memory has key",
        ),
        (
            write(&dir, "agent.json", &unknown_agent.to_string()),
            "unknown agent",
        ),
        (write(&dir, "twice.json", &twice.to_string()), "twice"),
        (
            write(
                &dir,
                "noorg.jsonl",
                "{\"query\": {\"as\": \"a\", \"query\": \"q\", \"expect\": [\"k\"]}}",
            ),
            "no {\"org\"",
        ),
    ];
    for (file, why) in cases {
        let r = eval(&file);
        assert_eq!(r.code, 2, "{file:?}: {r:?}");
        assert!(r.stdout.is_empty(), "{r:?}");
        assert!(r.stderr.contains(why), "{file:?}: want {why:?} in {r:?}");
    }
}
