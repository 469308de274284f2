//! The index analyzer through the real binary: stems, joined compounds and
//! ASCII folding find a memory in the other form, at index and query time,
//! and `--known-at` judges an old text by the same terms; stop-words carry
//! no match; unspaced Japanese is found by its character bigrams, behind
//! the gate.

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

/// Stop-words never carry a match: a memory that shares only `a`, `in`,
/// `my` with a question is no lexical candidate, and a question made only
/// of stop-words finds nothing, while the memory sharing a content word is
/// found.
#[test]
fn a_memory_sharing_only_stop_words_is_not_a_lexical_hit() {
    let h = Home::apollo();
    let payroll = h.add(
        "alice",
        "Payroll fixes a mistake in a paycheck within two working days",
        &["team:apollo"],
    );
    h.add(
        "alice",
        "If my badge is lost, ask in a message to the front desk for a new one",
        &["team:apollo"],
    );
    h.add(
        "alice",
        "What it is: the kettle is broken",
        &["team:apollo"],
    );
    assert_eq!(
        h.search_ids("alice", "who can fix a mistake in my paycheck", 10),
        vec![payroll]
    );
    assert_eq!(
        h.search_ids("alice", "what is it and how do we do that", 10),
        Vec::<String>::new()
    );
    // A compound whose second word is a stop-word is still one term.
    let login = h.add("alice", "Log in to the VPN with your badge", &[]);
    assert_eq!(h.search_ids("alice", "login", 10), vec![login]);
}

/// An unspaced Japanese sentence (longer than the 40-byte word limit) is
/// indexed as character bigrams: a Japanese question sharing a word with it
/// finds it, and English words beside Japanese ones are found too.
#[test]
fn an_unspaced_japanese_memory_is_found_by_a_japanese_query() {
    let h = Home::apollo();
    let expenses = h.add(
        "alice",
        "経費精算は毎月二十五日までに経理部の山田さんへ提出してください。",
        &["team:apollo"],
    );
    let deploys = h.add(
        "alice",
        "本番環境へのデプロイは金曜日には行わないこと。",
        &["team:apollo"],
    );
    let vpn = h.add(
        "alice",
        "VPNの設定手順はConfluenceのITページにあります",
        &["team:apollo"],
    );
    h.add(
        "alice",
        "the kettle in the kitchen is broken",
        &["team:apollo"],
    );
    // The memory sharing the question's words comes first (others may
    // follow on a shared ending such as `して`).
    let first = |q: &str| h.search_ids("alice", q, 10).first().cloned();
    assert_eq!(
        first("経費精算の締め切りはいつですか"),
        Some(expenses.clone())
    );
    assert_eq!(
        h.search_ids("alice", "経費精算", 10),
        vec![expenses.clone()]
    );
    assert_eq!(h.search_ids("alice", "山田", 10), vec![expenses]);
    assert_eq!(first("金曜日にデプロイしてもいい?"), Some(deploys.clone()));
    assert_eq!(h.search_ids("alice", "デプロイ", 10), vec![deploys]);
    assert_eq!(
        h.search_ids("alice", "confluence 設定", 10),
        vec![vpn.clone()]
    );
    assert_eq!(h.search_ids("alice", "VPN", 10), vec![vpn]);
}

/// The gate holds for Japanese terms as for any: another agent's private
/// Japanese memory is not found by a query that finds it for its owner.
#[test]
fn a_private_japanese_memory_is_not_found_by_another_agent() {
    let h = Home::apollo();
    h.ok(&["agent", "add", "bob", "--team", "apollo"]);
    let private = h.add("alice", "給与テーブルは人事部の鈴木さんだけが見られる", &[]);
    let shared = h.add("alice", "人事部の窓口は三階です", &["team:apollo"]);
    assert_eq!(
        h.search_ids("alice", "給与テーブル", 10),
        vec![private.clone()]
    );
    assert_eq!(
        h.search_ids("bob", "給与テーブル", 10),
        Vec::<String>::new()
    );
    let bob = h.search_ids("bob", "人事部の給与テーブル", 10);
    assert_eq!(bob, vec![shared]);
    assert!(!bob.contains(&private));
}
