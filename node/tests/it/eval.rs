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

/// Measured on the shipped sets, 2026-12-06, with the sentence encoder
/// (`hybrid`: cos + 0.1 × bm25/(bm25+20), relevance floor 0.25, tuned on
/// node/eval/deep's tuning part only; `semantic`: the encoder alone) and the
/// static model (`fast`, the hybrid before the encoder), the analyzer
/// `amos-en-4` (stems, joined compounds, no stop-words, CJK bigrams):
///
/// | set | lexical | semantic | hybrid | fast |
/// |---|---|---|---|---|
/// | golden | 0.689 / 0.889 / 0.764 | 0.844 / 0.933 / 0.885 | 0.867 / 0.956 / 0.907 | 0.800 / 0.978 / 0.859 |
/// | held-out | 0.744 / 0.884 / 0.806 | 0.907 / 1.000 / 0.950 | 0.907 / 1.000 / 0.953 | 0.884 / 1.000 / 0.927 |
/// | unseen | 0.600 / 0.627 / 0.613 | 0.867 / 0.933 / 0.897 | 0.853 / 0.933 / 0.888 | 0.733 / 0.867 / 0.803 |
///
/// (hit@1 / hit@5 / MRR). These sets have saturated (node/eval/deep is the
/// harder yardstick, `deep_eval`): the encoder's hybrid puts 3 more golden
/// questions first than the static hybrid did and one fewer in the top 5.
/// Before the encoder, `hybrid` was today's `fast` (its row above); with
/// stop-words as terms (`amos-en-2`, before 2026-12-06) lexical was golden
/// 0.644 / 0.956 / 0.753, held-out 0.605 / 0.860 / 0.689, unseen 0.627 /
/// 0.707 / 0.663 (every question it lost from its top 5 matched its memory
/// only by stop-words). The thresholds sit just below: a change that costs
/// recall quality on these sets fails here; one that gains should raise them.
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
    at_least(&v, "semantic", [0.82, 0.93, 0.88]);
    at_least(&v, "hybrid", [0.84, 0.95, 0.90]);
    at_least(&v, "fast", [0.78, 0.97, 0.85]);

    let r = eval(&heldout());
    assert_eq!(r.code, 0, "{r:?}");
    let h = r.json();
    assert!(h["queries"].as_u64().unwrap() >= 30);
    at_least(&h, "lexical", [0.72, 0.86, 0.79]);
    at_least(&h, "semantic", [0.88, 0.98, 0.93]);
    at_least(&h, "hybrid", [0.88, 0.98, 0.93]);
    at_least(&h, "fast", [0.86, 0.98, 0.91]);

    let r = eval(&unseen());
    assert_eq!(r.code, 0, "{r:?}");
    let u = r.json();
    let queries = u["queries"].as_u64().unwrap();
    assert!(queries >= 30);
    assert!(u["paraphrases"].as_u64().unwrap() * 3 >= queries);
    at_least(&u, "lexical", [0.59, 0.61, 0.60]);
    at_least(&u, "semantic", [0.85, 0.92, 0.88]);
    at_least(&u, "hybrid", [0.84, 0.92, 0.87]);
    at_least(&u, "fast", [0.72, 0.85, 0.79]);
    for (v, margin) in [(&v, 0.15), (&h, 0.15), (&u, 0.15)] {
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
    for mode in ["lexical", "semantic", "hybrid", "fast"] {
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
