//! The deep eval set (`node/eval/deep/`, issue 39): its shape is what the
//! issue asks for — checked with the product's own loader and analyzer —
//! and recall on its held-out part keeps its figures.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use amos_node::bench::eval::{self, Split};
use serde_json::Value;

use crate::common::Home;

fn deep() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("eval/deep")
}

fn is_ja(tags: &[String]) -> bool {
    tags.iter().any(|t| t == "ja")
}

/// At least 400 English memories over at least 8 teams, at least 300 English
/// questions, 40 % of them paraphrases that share no content word with an
/// expected memory (by the analyzer recall uses: stems, joined compounds, no
/// stop-words), a tuning and a held-out part for every kind, questions asked
/// by agents who cannot see the best answer, and at least 50 Japanese ones.
#[test]
fn the_deep_set_is_as_hard_as_promised() {
    let set = eval::load(&deep()).unwrap();
    let english: Vec<_> = set
        .memories
        .iter()
        .filter(|m| !m.key.starts_with("ja-"))
        .collect();
    assert!(english.len() >= 400, "{} English memories", english.len());
    let teams: HashSet<&str> = english
        .iter()
        .filter_map(|m| m.key.split('-').next())
        .collect();
    assert!(teams.len() >= 8, "{teams:?}");
    let content: HashMap<&str, &str> = set
        .memories
        .iter()
        .map(|m| (m.key.as_str(), m.memory.content.as_str()))
        .collect();

    let answerable: Vec<_> = set.queries.iter().filter(|q| !q.unrelated()).collect();
    let en: Vec<_> = answerable.iter().filter(|q| !is_ja(&q.tags)).collect();
    let ja = answerable.iter().filter(|q| is_ja(&q.tags)).count();
    assert!(en.len() >= 300, "{} English questions", en.len());
    assert!(ja >= 50, "{ja} Japanese questions");
    let paraphrases: Vec<_> = en.iter().filter(|q| q.paraphrase).collect();
    assert!(
        paraphrases.len() * 10 >= en.len() * 4,
        "{} of {} paraphrased",
        paraphrases.len(),
        en.len()
    );
    let mut shared = Vec::new();
    for q in &paraphrases {
        let asked: HashSet<String> = amos_node::index::analyze(&q.query).into_iter().collect();
        for key in &q.expect {
            let terms: HashSet<String> = amos_node::index::analyze(content[key.as_str()])
                .into_iter()
                .collect();
            let common: Vec<&String> = asked.intersection(&terms).collect();
            if !common.is_empty() {
                shared.push(format!("{:?} / {key}: {common:?}", q.query));
            }
        }
    }
    assert!(
        shared.is_empty(),
        "paraphrases sharing a content term with their memory:\n{}",
        shared.join("\n")
    );
    for kind in [true, false] {
        for split in [Split::Tune, Split::Heldout] {
            assert!(
                en.iter()
                    .any(|q| q.paraphrase == kind && q.split == Some(split)),
                "no {} question in {split:?}",
                if kind { "paraphrased" } else { "literal" }
            );
        }
    }
    assert!(answerable.iter().all(|q| q.split.is_some()));
    let gate = answerable
        .iter()
        .filter(|q| q.tags.iter().any(|t| t == "gate"))
        .count();
    assert!(
        gate >= 10,
        "{gate} questions by agents who cannot see the best answer"
    );
    assert!(set.queries.iter().any(|q| q.unrelated()));
}

/// Measured on the held-out part (`amos --json eval node/eval/deep --split
/// heldout`, 2026-12-06, the fusion tuned on the tuning part only):
///
/// | mode | hit@1 | hit@5 | paraphrase hit@5 | Japanese hit@1 | off-topic returned |
/// |---|---|---|---|---|---|
/// | hybrid | 0.647 | 0.844 | 0.691 | 0.582 | 0.7 |
/// | semantic | 0.592 | 0.806 | 0.702 | 0.164 | 0.6 |
/// | fast | 0.477 | 0.667 | 0.337 | 0.418 | 5.4 |
/// | lexical | 0.475 | 0.552 | 0.034 | 0.582 | 3.3 |
///
/// (over the 417 answerable questions, English and Japanese, 178 of them
/// paraphrased; English alone, hybrid 0.657 / 0.870, paraphrases 0.446 /
/// 0.752). The thresholds sit
/// a little below: a change that costs recall on the held-out part fails.
#[test]
fn the_deep_sets_held_out_part_keeps_its_figures() {
    let h = Home::uninit();
    let dir = deep();
    let r = h.run(&[
        "--json",
        "eval",
        dir.to_str().unwrap(),
        "--split",
        "heldout",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    let v: Value = r.json();
    let m = |mode: &str, k: &str| v["modes"][mode][k].as_f64().unwrap();
    let part = |mode: &str, part: &str, k: &str| v["modes"][mode][part][k].as_f64().unwrap();
    let tag = |mode: &str, t: &str, k: &str| v["modes"][mode]["tags"][t][k].as_f64().unwrap();
    assert!(
        m("hybrid", "hit_at_1") >= 0.62,
        "{}",
        m("hybrid", "hit_at_1")
    );
    assert!(
        m("hybrid", "hit_at_5") >= 0.82,
        "{}",
        m("hybrid", "hit_at_5")
    );
    assert!(part("hybrid", "paraphrase", "hit_at_5") >= 0.66);
    assert!(tag("hybrid", "ja", "hit_at_1") >= 0.55);
    assert!(m("hybrid", "hit_at_1") >= m("lexical", "hit_at_1") + 0.15);
    assert!(m("hybrid", "hit_at_5") >= m("fast", "hit_at_5") + 0.15);
    let off_topic = v["modes"]["hybrid"]["unrelated_returned"].as_f64().unwrap();
    assert!(
        off_topic <= 1.5,
        "{off_topic} memories for an off-topic question"
    );
    assert!(off_topic < v["modes"]["fast"]["unrelated_returned"].as_f64().unwrap());
}
