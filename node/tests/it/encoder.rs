//! The sentence encoder's recall through the real product's front ends (CLI
//! processes, MCP, console): paraphrases found after an add, a bulk import and
//! a catch-up; a fact at the end of a long memory; the encoder off and on;
//! edits and deletes; the gate before ranking for every candidate source
//! (lexical, encoder, static vectors of pending memories) in every mode; and
//! the `similar` hints of `amos add` / `memory_add`, which never name nor
//! count what the writer cannot see. Owns no product code; must never sleep
//! as synchronisation nor assert on timings.

use serde_json::{Value, json};

use crate::common::Home;
use crate::common::console::{Console, listed_ids};

const MODES: [&str; 4] = ["hybrid", "semantic", "fast", "lexical"];

/// Shares no content word with [`PAYROLL`].
const PARAPHRASE: &str = "who can fix a mistake in my paycheck";

const PAYROLL: &str =
    "Payroll corrections go to Dana Whitfield in HR; send her the pay period and the wrong amount";

/// Shared with team hr: other topics, so the paraphrase has one answer.
const DISTRACTORS: &[&str] = &[
    "The cafeteria serves vegetarian lunch on Thursdays",
    "Deploys go out through the release pipeline on weekdays",
    "Lost badges are replaced at the security desk on floor two",
    "The quarterly churn model flags customers likely to cancel",
    "Printer toner is ordered by the office manager every month",
    "Parking permits renew every January through the facilities portal",
];

/// Nearer the paraphrase than [`PAYROLL`], in meaning and in words.
const HIDDEN: &str = "If there is a mistake in your paycheck, Priya can fix it the same day";

/// `amos --json search QUERY --as AGENT --mode MODE -k 10 --explain`: hits.
fn search(h: &Home, agent: &str, mode: &str, query: &str) -> Vec<Value> {
    h.json(&[
        "search",
        query,
        "--as",
        agent,
        "--mode",
        mode,
        "-k",
        "10",
        "--explain",
    ])["hits"]
        .as_array()
        .expect("hits")
        .clone()
}

fn ids(hits: &[Value]) -> Vec<String> {
    hits.iter()
        .map(|x| x["id"].as_str().expect("id").to_owned())
        .collect()
}

/// 1-based rank of `id` in `mode`'s answer to `query` for `agent`.
fn rank(h: &Home, agent: &str, mode: &str, query: &str, id: &str) -> Option<usize> {
    ids(&search(h, agent, mode, query))
        .iter()
        .position(|x| x == id)
        .map(|i| i + 1)
}

/// What must not move when a hidden memory comes or goes: the order and
/// each hit's place among the visible lexical and semantic candidates.
fn ranks(hits: &[Value]) -> Vec<Value> {
    hits.iter()
        .map(|x| {
            json!([
                x["id"],
                x["explain"]["lexical_rank"],
                x["explain"]["semantic_rank"]
            ])
        })
        .collect()
}

/// `amos --json index catch-up`.
fn catch_up(h: &Home) -> Value {
    h.json(&["index", "catch-up"])
}

/// Write `texts` as a Mem0 export and import it as `agent` (a bulk path:
/// the memories stay pending for the encoder).
fn import_mem0(h: &Home, agent: &str, texts: &[&str], share: &[&str]) {
    let file = h.path().join(format!("mem0-{agent}-{}.json", texts.len()));
    let rows: Vec<Value> = texts.iter().map(|t| json!({"memory": t})).collect();
    std::fs::write(&file, serde_json::to_string(&rows).unwrap()).unwrap();
    let mut a = vec!["import", "mem0", file.to_str().unwrap(), "--as", agent];
    for s in share {
        a.extend_from_slice(&["--share", s]);
    }
    h.json(&a);
}

/// Team hr (alice, bob) and team finance (carol); the distractors and the
/// payroll memory shared with hr.
fn org() -> (Home, String, Vec<String>) {
    let h = Home::new();
    h.ok(&["team", "create", "hr"]);
    h.ok(&["team", "create", "finance"]);
    h.ok(&["agent", "add", "alice", "--team", "hr"]);
    h.ok(&["agent", "add", "bob", "--team", "hr"]);
    h.ok(&["agent", "add", "carol", "--team", "finance"]);
    let mut visible: Vec<String> = DISTRACTORS
        .iter()
        .map(|t| h.add("alice", t, &["team:hr"]))
        .collect();
    let payroll = h.add("alice", PAYROLL, &["team:hr"]);
    visible.push(payroll.clone());
    (h, payroll, visible)
}

/// The attack, for every candidate source and mode: memories bob may not see
/// are the best paraphrase match — alice's private one (encoded inline),
/// carol's team's (encoded inline) and alice's imported one (pending: found
/// by its static vector). Bob never gets them from the CLI, MCP or the
/// console, and his answers — order, lexical and semantic ranks, pack
/// report — are exactly those he gets once they are gone.
#[test]
fn hidden_paraphrase_matches_never_appear_nor_move_a_rank_in_any_mode_or_front_end() {
    let (h, payroll, visible) = org();
    let private = h.add("alice", HIDDEN, &[]);
    let team = h.add("carol", HIDDEN, &["team:finance"]);
    import_mem0(&h, "alice", &[HIDDEN], &[]);
    let pending = h.json(&["search", "Priya", "--as", "alice", "--mode", "lexical"])["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["id"].as_str().unwrap().to_owned())
        .find(|id| *id != private)
        .expect("the imported memory");
    let hidden = [private.clone(), team.clone(), pending.clone()];

    // Teeth: for those who may see them, they lead (by meaning too).
    for mode in ["hybrid", "semantic"] {
        let top = ids(&search(&h, "alice", mode, PARAPHRASE));
        assert!(
            top[..2].contains(&private) && top[..3].contains(&pending),
            "{mode}: alice's hidden memories lead her answer: {top:?}"
        );
        assert_eq!(
            rank(&h, "carol", mode, PARAPHRASE, &team),
            Some(1),
            "{mode}: carol's team memory leads her answer"
        );
    }

    let mut before = Vec::new();
    for mode in MODES {
        let bob = search(&h, "bob", mode, PARAPHRASE);
        for id in ids(&bob) {
            assert!(!hidden.contains(&id), "{mode}: leaked {id}");
            assert!(visible.contains(&id), "{mode}: {id} is not bob's to see");
        }
        if mode != "lexical" {
            assert_eq!(
                bob.first().map(|x| x["id"].as_str().unwrap()),
                Some(payroll.as_str()),
                "{mode}: the visible answer leads bob's: {bob:?}"
            );
            assert_eq!(bob[0]["explain"]["semantic_rank"], 1, "{mode}: {bob:?}");
        }
        before.push(bob);
    }
    let pack = |h: &Home| -> Vec<Value> {
        h.json(&["pack", PARAPHRASE, "--as", "bob", "--report"])["report"]
            .as_array()
            .expect("report")
            .iter()
            .map(|r| json!([r["id"], r["included"], r["decision"]]))
            .collect()
    };
    let pack_before = pack(&h);
    assert!(
        pack_before
            .iter()
            .all(|r| !hidden.iter().any(|id| r[0] == *id)),
        "{pack_before:?}"
    );

    // MCP answers bob as the CLI does, in every mode.
    let mut mcp = crate::mcp::Client::start(&h, "bob");
    for (mode, cli) in MODES.iter().zip(&before) {
        let r = mcp.ok(
            "memory_search",
            json!({"query": PARAPHRASE, "mode": mode, "k": 10}),
        );
        let got = ids(r["hits"].as_array().unwrap());
        assert_eq!(got, ids(cli), "{mode}: MCP answers as the CLI");
    }
    drop(mcp);

    // The console (hybrid, the default) too.
    let console = Console::start(h.path());
    let page = console.get(&format!(
        "/memories?as=bob&q={}&limit=10",
        PARAPHRASE.replace(' ', "+")
    ));
    assert_eq!(page.status, 200);
    assert_eq!(
        listed_ids(&page.body),
        ids(&before[0]),
        "console = CLI hybrid"
    );
    drop(console);

    // Gone: bob's answers keep their order and every rank.
    h.ok(&["forget", &private, "--as", "alice"]);
    h.ok(&["forget", &pending, "--as", "alice"]);
    h.ok(&["forget", &team, "--as", "carol"]);
    for (mode, b) in MODES.iter().zip(&before) {
        let after = search(&h, "bob", mode, PARAPHRASE);
        assert_eq!(ranks(&after), ranks(b), "{mode}: ranks moved");
        if *mode == "semantic" {
            let sim = |v: &[Value]| -> Vec<Value> {
                v.iter().map(|x| x["explain"]["semantic"].clone()).collect()
            };
            assert_eq!(sim(&after), sim(b), "semantic similarities moved");
        }
    }
    assert_eq!(pack(&h), pack_before, "pack report moved");
}

/// A single add is encoded inline: the paraphrase finds it by meaning, in
/// hybrid and semantic mode, with nothing pending afterwards.
#[test]
fn a_paraphrase_finds_a_memory_after_a_single_add() {
    let (h, payroll, _) = org();
    for mode in ["hybrid", "semantic"] {
        assert_eq!(
            rank(&h, "bob", mode, PARAPHRASE, &payroll),
            Some(1),
            "{mode}"
        );
    }
    let r = catch_up(&h);
    assert_eq!(r["encoded"], 0, "every add was encoded inline: {r}");
    assert_eq!(r["pending"], 0, "{r}");
    assert!(r["model"].as_str().is_some_and(|m| !m.is_empty()), "{r}");
}

/// A bulk import leaves its memories pending: the paraphrase still finds
/// them (their static vectors), and `index catch-up` encodes exactly them;
/// after it the answer stands.
#[test]
fn imported_memories_are_found_while_pending_and_after_catch_up() {
    let h = Home::new();
    h.ok(&["agent", "add", "bob"]);
    let mut texts: Vec<&str> = DISTRACTORS.to_vec();
    texts.push(PAYROLL);
    import_mem0(&h, "bob", &texts, &[]);
    let payroll =
        h.json(&["search", "Whitfield", "--as", "bob", "--mode", "lexical"])["hits"][0]["id"]
            .as_str()
            .expect("imported")
            .to_owned();
    for mode in ["hybrid", "semantic"] {
        let got = rank(&h, "bob", mode, PARAPHRASE, &payroll);
        assert!(got.is_some_and(|r| r <= 3), "{mode} while pending: {got:?}");
    }
    let r = catch_up(&h);
    assert_eq!(
        r["encoded"],
        texts.len(),
        "the import left all pending: {r}"
    );
    assert_eq!(r["pending"], 0, "{r}");
    assert_eq!(catch_up(&h)["encoded"], 0, "nothing left");
    for mode in ["hybrid", "semantic"] {
        assert_eq!(
            rank(&h, "bob", mode, PARAPHRASE, &payroll),
            Some(1),
            "{mode} after catch-up"
        );
    }
}

/// A bundle import (another bulk path) leaves what it brings pending: found
/// by its static vector before any catch-up, encoded by `index catch-up`.
#[test]
fn a_bundle_imported_memory_is_found_while_pending_and_after_catch_up() {
    let (a, b) = (Home::new(), Home::new());
    let id_of = |h: &Home| h.json(&["id"])["node_id"].as_str().unwrap().to_owned();
    let (ia, ib) = (id_of(&a), id_of(&b));
    a.ok(&["peers", "add", &ib, "--policy", "full"]);
    b.ok(&["peers", "add", &ia, "--policy", "full"]);
    a.ok(&["agent", "add", "bob"]);
    for t in DISTRACTORS {
        a.add("bob", t, &["global"]);
    }
    let payroll = a.add("bob", PAYROLL, &["global"]);
    let file = b.path().join("a-to-b.amb");
    a.json(&["bundle", "export", file.to_str().unwrap(), "--for", &ib]);
    b.json(&["bundle", "import", file.to_str().unwrap()]);
    for mode in ["hybrid", "semantic"] {
        let got = rank(&b, "bob", mode, PARAPHRASE, &payroll);
        assert!(got.is_some_and(|r| r <= 3), "{mode} while pending: {got:?}");
    }
    let r = catch_up(&b);
    assert_eq!(r["encoded"], DISTRACTORS.len() + 1, "all pending: {r}");
    for mode in ["hybrid", "semantic"] {
        assert_eq!(
            rank(&b, "bob", mode, PARAPHRASE, &payroll),
            Some(1),
            "{mode}"
        );
    }
}

/// Over 256 word pieces: a section at the end (only in the last window) is
/// found by a question about it — first in hybrid, and by meaning alone in
/// semantic mode (the first window, all filler, is below the floor). Its
/// window is mostly filler, so its similarity is diluted: 0.37 for the
/// question below, 0.78 for the same sentence alone (measured by hand);
/// so semantic mode is asked to find it, not to rank it first.
#[test]
fn a_fact_near_the_end_of_a_long_memory_is_found() {
    let (h, _, _) = org();
    let filler = [
        "The quarterly planning meeting reviewed the marketing budget for the spring campaign.",
        "Sales targets for the northern region were raised after a strong winter season.",
        "The design team presented new color palettes for the mobile application screens.",
        "Customer interviews suggested that onboarding emails should be shorter and friendlier.",
        "Engineering agreed to move the analytics dashboards onto the shared reporting cluster.",
        "Legal asked everyone to finish the annual compliance training before the end of March.",
    ];
    let mut long = String::new();
    while long.split_whitespace().count() < 400 {
        for f in filler {
            long.push_str(f);
            long.push(' ');
        }
    }
    long.push_str(
        "Server room access: the spare key for the server room hangs in the red lockbox \
         behind reception. Ask the receptionist for the lockbox code; the key must be signed \
         out in the key log and returned the same day. If the key is missing, the facilities \
         manager keeps a second spare key for the server room.",
    );
    let id = h.add("alice", &long, &["team:hr"]);
    let question = "where is the spare key for the server room";
    assert_eq!(rank(&h, "bob", "hybrid", question, &id), Some(1));
    let semantic = search(&h, "bob", "semantic", question);
    assert!(ids(&semantic).contains(&id), "semantic: {semantic:?}");
    assert!(
        rank(&h, "bob", "semantic", "the quarterly planning meeting", &id).is_some(),
        "the first window is found too"
    );
}

/// `amos config set encoder off`: hybrid still answers (static), the
/// catch-up says the encoder is off and adds stay pending; on again, the
/// catch-up encodes what was added meanwhile and the paraphrase is found.
#[test]
fn the_encoder_off_and_on_again() {
    let (h, _, _) = org();
    h.ok(&["config", "set", "encoder", "off"]);
    let off_add = h.json(&["add", PAYROLL, "--as", "alice", "--share", "team:hr"]);
    let added_off = off_add["id"].as_str().unwrap().to_owned();
    assert_eq!(
        off_add["similar"],
        json!([]),
        "no similar hints with the encoder off, even for the same text: {off_add}"
    );
    let hits = ids(&search(&h, "bob", "hybrid", "payroll corrections"));
    assert_eq!(
        hits.first(),
        Some(&added_off),
        "hybrid answers with the encoder off"
    );
    let off = catch_up(&h);
    assert!(off["model"].is_null() && off["encoded"] == 0, "{off}");
    let text = h.ok(&["index", "catch-up"]).stdout;
    assert!(text.contains("encoder is off"), "{text}");

    h.ok(&["config", "set", "encoder", "on"]);
    let on = catch_up(&h);
    assert_eq!(on["encoded"], 1, "the add made while off was pending: {on}");
    let again = h.json(&["add", PAYROLL, "--as", "alice", "--share", "team:hr"]);
    assert_eq!(
        again["similar"].as_array().map(Vec::len),
        Some(2),
        "{again}"
    );
    assert_eq!(
        rank(&h, "bob", "semantic", PARAPHRASE, &added_off).map(|r| r <= 2),
        Some(true)
    );
}

/// An edited memory is pending again (a catch-up encodes it) and found by
/// its new meaning meanwhile; a forgotten one is gone from every mode.
#[test]
fn an_edited_memory_is_pending_and_found_and_a_forgotten_one_is_gone() {
    let (h, payroll, _) = org();
    let edited = h.add(
        "alice",
        "The fire drill is scheduled for the first Monday of each quarter",
        &["team:hr"],
    );
    h.ok(&[
        "update",
        &edited,
        "Reimbursement of travel costs is approved by Omar in accounting within a week",
        "--as",
        "alice",
    ]);
    let question = "who pays me back for my trip expenses";
    for mode in ["hybrid", "semantic"] {
        assert_eq!(rank(&h, "bob", mode, question, &edited), Some(1), "{mode}");
    }
    let r = catch_up(&h);
    assert_eq!(r["encoded"], 1, "the edit made it pending: {r}");
    for mode in ["hybrid", "semantic"] {
        assert_eq!(rank(&h, "bob", mode, question, &edited), Some(1), "{mode}");
    }

    h.ok(&["forget", &payroll, "--as", "alice"]);
    for mode in MODES {
        let got = ids(&search(&h, "bob", mode, PARAPHRASE));
        assert!(!got.contains(&payroll), "{mode}: forgotten but found");
    }
}

// ------------------------------------------------------------ similar on add

/// Bob's new memory says what three memories he can see say, and what
/// carol's private one says even more closely. `amos add` returns the three
/// (best first, each with similarity and excerpt) — never carol's, whose
/// presence changes nothing — and MCP's memory_add does the same; an
/// unrelated add finds none. Text mode prints one hint line on stderr.
#[test]
fn add_returns_similar_visible_memories_and_never_a_hidden_one() {
    let (h, payroll, _) = org();
    let near = [
        payroll.clone(),
        h.add(
            "alice",
            "Payroll corrections are handled by Dana Whitfield in HR: send the pay period and amount",
            &["team:hr"],
        ),
        h.add(
            "alice",
            "For payroll corrections contact Dana Whitfield in HR with the pay period and the wrong amount",
            &["team:hr"],
        ),
    ];
    let new = "Dana Whitfield in HR handles payroll corrections; send her the pay period and the wrong amount";
    let hidden = h.add("carol", new, &[]);
    let hidden_team = h.add("carol", new, &["team:finance"]);

    let r = h.json(&["add", new, "--as", "bob", "--share", "team:hr"]);
    let similar = r["similar"].as_array().expect("similar").clone();
    let got: Vec<&str> = similar.iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(similar.len(), 3, "{r}");
    for id in &got {
        assert!(
            near.iter().any(|n| n == id),
            "{id} is not a visible near-duplicate: {r}"
        );
        assert!(*id != hidden && *id != hidden_team, "leaked {id}");
    }
    let sims: Vec<f64> = similar
        .iter()
        .map(|s| s["similarity"].as_f64().unwrap())
        .collect();
    assert!(
        sims.windows(2).all(|w| w[0] >= w[1]),
        "best first: {sims:?}"
    );
    assert!(sims.iter().all(|s| *s >= 0.75 && *s <= 1.0001), "{sims:?}");
    assert!(
        similar
            .iter()
            .all(|s| s["excerpt"].as_str().is_some_and(|e| e.contains("Dana"))),
        "{r}"
    );
    assert_ne!(r["id"].as_str(), got.first().copied(), "not itself");

    // Carol sees her own near-duplicates (teeth: they would qualify).
    let carol = h.json(&["add", new, "--as", "carol"]);
    let carol_ids: Vec<&str> = carol["similar"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert!(carol_ids.contains(&hidden.as_str()), "{carol}");

    // MCP: the same list for bob.
    let mut mcp = crate::mcp::Client::start(&h, "bob");
    let m = mcp.ok("memory_add", json!({"content": new, "share": ["team:hr"]}));
    let mcp_ids: Vec<&str> = m["similar"]
        .as_array()
        .expect("similar")
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    let bob_first = r["id"].as_str().unwrap();
    assert!(
        !mcp_ids.contains(&hidden.as_str()) && !mcp_ids.contains(&hidden_team.as_str()),
        "{m}"
    );
    // Bob's first add is now the nearest of all (the same text).
    assert_eq!(mcp_ids.first(), Some(&bob_first), "{m}");
    assert_eq!(mcp_ids.len(), 3, "{m}");
    drop(mcp);

    // Text mode: the id on stdout, one hint line on stderr.
    let t = h.ok(&["add", new, "--as", "bob"]);
    assert_eq!(t.stdout.trim().lines().count(), 1, "{t:?}");
    let hint: Vec<&str> = t
        .stderr
        .lines()
        .filter(|l| l.starts_with("similar: "))
        .collect();
    assert_eq!(hint.len(), 1, "{t:?}");
    assert!(hint[0].contains("amos supersede"), "{t:?}");
    assert!(!t.stderr.contains(&hidden) && !t.stderr.contains(&hidden_team));

    // Related but another fact (0.42 to the cafeteria memory bob can see,
    // above the recall's floor, below the threshold): none, and the JSON
    // still says so.
    let other = h.json(&[
        "add",
        "The cafeteria closes early on public holidays",
        "--as",
        "bob",
    ]);
    assert_eq!(other["similar"], json!([]), "{other}");
}
