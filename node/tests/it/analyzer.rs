//! The index analyzer through the real binary: stems, joined compounds and
//! ASCII folding find a memory in the other form, at index and query time,
//! and `--known-at` judges an old text by the same terms.

use crate::common::Home;

#[test]
fn an_inflection_finds_its_stem() {
    let h = Home::apollo();
    let id = h.add("alice", "the apollo team deploys on Tuesdays", &[]);
    h.add("alice", "the redis cache holds sessions", &[]);
    assert_eq!(h.search_ids("alice", "deploy", 5), vec![id.clone()]);
    assert_eq!(h.search_ids("alice", "deploying", 5), vec![id]);
}

#[test]
fn a_split_compound_finds_the_joined_word_and_back() {
    let h = Home::apollo();
    let rollback = h.add(
        "alice",
        "Rollback: pick the previous revision in Argo CD",
        &[],
    );
    let setup = h.add("alice", "setting up a laptop takes a day", &[]);
    h.add("alice", "roll the dice, back the winner", &[]);
    assert_eq!(
        h.search_ids("alice", "how to roll back", 5),
        vec![rollback.clone()]
    );
    assert_eq!(h.search_ids("alice", "rolled back", 5), vec![rollback]);
    assert_eq!(h.search_ids("alice", "setup", 5), vec![setup]);
    let logout = h.add("alice", "users are logged out after an update", &[]);
    assert_eq!(h.search_ids("alice", "logout", 5), vec![logout]);
}

#[test]
fn accents_fold_both_ways() {
    let h = Home::apollo();
    let fr = h.add("alice", "Déploiement du vendredi interdit", &[]);
    let en = h.add("alice", "the cafe on the corner", &[]);
    assert_eq!(h.search_ids("alice", "deploiement", 5), vec![fr.clone()]);
    assert_eq!(h.search_ids("alice", "DÉPLOIEMENT", 5), vec![fr]);
    assert_eq!(h.search_ids("alice", "café", 5), vec![en]);
}

/// Under `--known-at` the index holds today's text; the old text is judged
/// by its analysed terms, so a compound written apart then still matches.
#[test]
fn known_at_matches_the_old_text_by_its_terms() {
    let h = Home::apollo();
    let id = h.add("alice", "we rolled back the release on Friday", &[]);
    let created = h.json(&["get", &id, "--as", "alice"])["created"]
        .as_str()
        .unwrap()
        .to_owned();
    h.ok(&[
        "update",
        &id,
        "the release went out on Friday",
        "--as",
        "alice",
    ]);
    assert_eq!(h.search_ids("alice", "rollback", 5), Vec::<String>::new());
    assert_eq!(
        h.search_ids_with("alice", "rollback", &["--known-at", &created]),
        vec![id.clone()]
    );
    // A substring is not a term: "roll" is not in the old text's terms.
    assert_eq!(
        h.search_ids_with("alice", "roll", &["--known-at", &created]),
        Vec::<String>::new()
    );
}
