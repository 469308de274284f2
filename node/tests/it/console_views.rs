//! The console's views of what agents remember and why, over HTTP (a real
//! console process, a plain HTTP client): the dashboard (`/?as=A` and its
//! JSON, `/api/dashboard?as=A`), whose every memory figure counts only what
//! the agent may see; the pack preview (`/pack`), whose decisions are
//! `amos pack --report`'s; both languages on every page; bad input is 400
//! and changes nothing; what a memory says is escaped.

use serde_json::Value;

use crate::common::Home;
use crate::common::console::{Console, pages};

/// alice and bob in team apollo, carol outside it; a team memory, a
/// private memory each for alice and carol.
fn org() -> (Home, String, String, String) {
    let h = Home::apollo();
    h.ok(&["agent", "add", "bob", "--team", "apollo"]);
    h.ok(&["agent", "add", "carol"]);
    let team = h.add("alice", "launch window opens tuesday", &["team:apollo"]);
    let alice = h.add("alice", "alice keeps the launch codes", &[]);
    let carol = h.add("carol", "carol plans the launch party", &[]);
    (h, team, alice, carol)
}

/// Text askama escaped, back as it was.
fn unescape(s: &str) -> String {
    s.replace("&#60;", "<")
        .replace("&#62;", ">")
        .replace("&#34;", "\"")
        .replace("&#39;", "'")
        .replace("&#38;", "&")
}

fn dashboard(c: &Console, agent: &str) -> Value {
    let a = c.get(&format!("/api/dashboard?as={agent}"));
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(a.header("content-type"), Some("application/json"));
    serde_json::from_str(&a.body).unwrap()
}

/// The memory figures of a dashboard (the node's health aside: the same
/// for every agent, and moved by any write).
fn memory_figures(d: &Value) -> Value {
    serde_json::json!({
        "visible": d["visible"], "by_scope": d["by_scope"], "by_type": d["by_type"],
        "per_day": d["per_day"], "most_recalled": d["most_recalled"],
    })
}

fn ids_listed(h: &Home, agent: &str) -> Vec<String> {
    h.json(&["list", "--as", agent, "--limit", "1000"])["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Every number on an agent's dashboard counts only memories it may see:
/// what another agent writes privately, in a scope it is not in, of a type
/// it has none of, and recalls, moves none of them — and what it may see
/// moves them.
#[test]
fn no_dashboard_figure_counts_what_the_agent_cannot_see() {
    let (h, team, _, _) = org();
    // Recalls: alice and bob search; the team memory is recalled.
    h.ok(&["search", "launch", "--as", "alice"]);
    let c = Console::start(h.path());
    for agent in ["alice", "bob", "carol"] {
        let d = dashboard(&c, agent);
        assert_eq!(d["agent"], agent);
        let listed = ids_listed(&h, agent);
        assert_eq!(d["visible"], listed.len() as u64, "{agent}: {d}");
        let by_type: u64 = d["by_type"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(by_type, listed.len() as u64, "{agent}");
        let per_day = d["per_day"].as_array().unwrap();
        assert_eq!(per_day.len(), 14);
        let writes: u64 = per_day.iter().map(|p| p["writes"].as_u64().unwrap()).sum();
        assert_eq!(writes, listed.len() as u64, "{agent}: all made today");
        for r in d["most_recalled"].as_array().unwrap() {
            assert!(
                listed.contains(&r["id"].as_str().unwrap().to_owned()),
                "{agent}: {r}"
            );
        }
        // The page shows the same figures.
        let page = c.get(&format!("/?as={agent}"));
        assert_eq!(page.status, 200);
        assert!(
            page.body
                .contains(&format!("<span id=\"visible\">{}</span>", d["visible"])),
            "{agent}: {}",
            page.body
        );
        assert!(page.body.contains("<svg id=\"activity\""), "the chart");
    }
    let bob = dashboard(&c, "bob");
    assert_eq!(bob["visible"], 1, "{bob}");
    assert_eq!(bob["by_scope"], serde_json::json!({"team:apollo": 1}));
    assert_eq!(bob["most_recalled"][0]["id"], team.as_str(), "{bob}");
    let alice = dashboard(&c, "alice");
    assert_eq!(alice["visible"], 2);
    assert_eq!(
        alice["by_scope"],
        serde_json::json!({"private": 1, "team:apollo": 1})
    );

    // carol writes what bob may not see — a new type, a new scope, recalled
    // — and bob's figures do not move; alice's move where she may see.
    let before = memory_figures(&bob);
    h.ok(&["team", "create", "hermes"]);
    h.ok(&["agent", "add", "dave", "--team", "hermes"]);
    h.ok(&[
        "add",
        "the secret plan",
        "--as",
        "carol",
        "--type",
        "decision",
    ]);
    h.ok(&[
        "add",
        "hermes ships friday",
        "--as",
        "dave",
        "--share",
        "team:hermes",
        "--type",
        "procedure",
    ]);
    h.ok(&["search", "secret plan", "--as", "carol"]);
    h.ok(&["search", "hermes", "--as", "dave"]);
    let after = memory_figures(&dashboard(&c, "bob"));
    assert_eq!(after, before, "bob's dashboard counted what he cannot see");
    let text = c.get("/?as=bob").body;
    for hidden in [
        "secret",
        "hermes",
        "decision",
        "procedure",
        "party",
        "launch codes",
    ] {
        assert!(!text.contains(hidden), "bob's page names {hidden}");
    }
    // A memory shared with bob moves his figures.
    h.ok(&[
        "add",
        "lunch is at noon",
        "--as",
        "carol",
        "--share",
        "agent:bob",
    ]);
    let shared = dashboard(&c, "bob");
    assert_eq!(shared["visible"], 2);
    assert_eq!(shared["by_scope"]["agent:bob"], 1);
    // Recalls count per day: alice's search noted recalls today.
    let today = |d: &Value| {
        d["per_day"].as_array().unwrap().last().unwrap()["recalls"]
            .as_u64()
            .unwrap()
    };
    assert!(
        today(&dashboard(&c, "alice")) >= 2,
        "alice recalled both of hers"
    );
    assert_eq!(
        today(&dashboard(&c, "bob")),
        1,
        "only the team memory's recall"
    );
}

/// The preview shows the pack the agent would get and every candidate's
/// decision with the reasons `amos pack --report` gives; a memory the
/// agent may not see is never a candidate, named or counted.
#[test]
fn the_pack_preview_is_amos_pack_report() {
    let (h, team, alice, carol) = org();
    let c = Console::start(h.path());
    // A budget for one of alice's two matching memories: the other is over.
    let page = c.get("/pack?as=alice&q=launch&budget=22");
    assert_eq!(page.status, 200, "{page:?}");
    let cli = h.json(&[
        "pack", "launch", "--as", "alice", "--budget", "22", "--report",
    ]);
    let report = cli["report"].as_array().unwrap();
    assert!(report.len() >= 2, "{cli}");
    let strip = |s: &str| {
        s.chars()
            .filter(|c| !c.is_ascii_digit())
            .collect::<String>()
    };
    for d in report {
        let id = d["id"].as_str().unwrap();
        let decision = d["decision"].as_str().unwrap();
        let row = format!("<tr data-id=\"{id}\" data-decision=\"{decision}\"");
        assert!(page.body.contains(&row), "{row} not in {}", page.body);
        // The reason's words (its scores may move in their last digits
        // between the two recalls).
        let reason = d["reason"].as_str().unwrap();
        let at = page.body.find(&row).unwrap();
        let cell = &page.body[at..];
        let cell = &cell[cell.find("<td class=\"reason\">").unwrap() + 19..];
        let cell = &cell[..cell.find("</td>").unwrap()];
        assert_eq!(strip(&unescape(cell)), strip(reason), "{id}");
    }
    assert!(
        page.body.contains("data-decision=\"over-budget\""),
        "{}",
        page.body
    );
    assert!(page.body.contains(&team) && page.body.contains(&alice));
    assert!(!page.body.contains(&carol) && !page.body.contains("party"));
    // bob: only the team memory; nothing says anything was left out.
    let bob = c.get("/pack?as=bob&q=launch");
    assert_eq!(bob.status, 200);
    assert_eq!(bob.body.matches("<tr data-id=").count(), 1, "{}", bob.body);
    assert!(bob.body.contains(&team) && !bob.body.contains(&alice) && !bob.body.contains("codes"));
    // No query: the form only; no agent: the prompt.
    assert!(c.get("/pack?as=alice").body.contains("id=\"pack-form\""));
    assert!(c.get("/pack").body.contains("class=\"empty\""));
}

#[test]
fn bad_input_to_the_new_views_is_400_and_changes_nothing() {
    let (h, _, _, _) = org();
    let c = Console::start(h.path());
    let before = h.fingerprint();
    for (path, says) in [
        ("/api/dashboard", "name the agent"),
        ("/api/dashboard?as=mallory", "mallory"),
        ("/api/dashboard?as=alice&days=0", "days"),
        ("/api/dashboard?as=alice&days=lots", "days"),
    ] {
        let r = c.get(path);
        assert_eq!(r.status, 400, "{path}: {r:?}");
        let v: Value = serde_json::from_str(&r.body).expect("a JSON error");
        assert!(v["error"].as_str().unwrap().contains(says), "{path}: {v}");
    }
    for path in [
        "/?as=mallory",
        "/?as=alice&days=400",
        "/pack?as=mallory&q=x",
        "/pack?as=alice&q=x&budget=0",
        "/pack?as=alice&q=x&budget=lots",
        "/pack?as=alice&q=x&budget=-3",
    ] {
        let r = c.get(path);
        assert_eq!(r.status, 400, "{path}: {r:?}");
        assert!(r.body.contains("id=\"error-message\""), "{path}");
    }
    assert_eq!(h.fingerprint(), before, "nothing changed");
}

#[test]
fn the_new_views_escape_what_memories_say() {
    let h = Home::apollo();
    let evil = "<script>alert(1)</script><img src=x onerror=alert(2)> launch";
    h.add("alice", evil, &["team:apollo"]);
    h.ok(&["search", "launch", "--as", "alice"]);
    let c = Console::start(h.path());
    for p in [
        "/?as=alice",
        "/pack?as=alice&q=launch",
        "/pack?as=alice&q=%3Cscript%3E",
    ] {
        let page = c.get(p);
        assert_eq!(page.status, 200, "{p}");
        assert!(!page.body.contains("<script>alert"), "{p} has raw script");
        assert!(!page.body.contains("<img src=x"), "{p} has a raw img");
    }
    assert!(
        c.get("/?as=alice")
            .body
            .contains("&#60;script&#62;alert(1)"),
        "recalled, shown as text"
    );
    let d = dashboard(&c, "alice");
    assert_eq!(
        d["most_recalled"][0]["content"], evil,
        "JSON carries the text as it is"
    );
}

/// Every page (`common::console::pages`, the one list) in both
/// languages: `Accept-Language` picks one, `?lang=` switches and is kept
/// in a cookie; no page shows a key the catalogue lacks, and each shows
/// what it is about.
#[test]
fn every_page_speaks_english_and_japanese() {
    let (h, team, _, _) = org();
    let c = Console::start(h.path());
    let paths: Vec<String> = pages(&team).into_iter().map(|(_, p, _)| p).collect();
    for p in &paths {
        let cookie = c.cookie();
        for (accept, lang, word) in [
            ("ja,en;q=0.5", "ja", "ダッシュボード"),
            ("en-GB, ja;q=0.2", "en", ">Dashboard<"),
            ("fr", "en", ">Dashboard<"),
        ] {
            let a = c.get_with(p, &[("Cookie", &cookie), ("Accept-Language", accept)]);
            assert_eq!(a.status, 200, "{p} {accept}");
            assert!(
                a.body.contains(&format!("<html lang=\"{lang}\">")),
                "{p} {accept}"
            );
            assert!(a.body.contains(word), "{p} {accept}");
            assert!(!a.body.contains('⟦'), "{p} in {lang}: an untranslated key");
            let main = pages(&team)
                .into_iter()
                .find(|(_, q, _)| q == p)
                .map(|(_, _, m)| m)
                .unwrap();
            if let Some(id) = main.strip_prefix('#') {
                assert!(a.body.contains(&format!("id=\"{id}\"")), "{p}: {main}");
            }
        }
    }
    // An error page speaks the request's language too.
    let e = c.get_with(
        "/memories/01a2333b-3a25-7244-8e30-373782ecb05e?as=alice",
        &[("Cookie", &c.cookie()), ("Accept-Language", "ja")],
    );
    assert_eq!(e.status, 404);
    assert!(e.body.contains("<html lang=\"ja\">") && e.body.contains("ダッシュボードに戻る"));
    assert!(!e.body.contains('⟦'));
    // The switch: `?lang=ja` answers in Japanese and keeps it in a cookie.
    let a = c.get_with(
        "/?as=alice&lang=ja",
        &[("Cookie", &c.cookie()), ("Accept-Language", "en")],
    );
    assert!(a.body.contains("<html lang=\"ja\">"));
    let kept = a.header("set-cookie").expect("the language cookie");
    assert!(kept.starts_with("amos_console_lang=ja;"), "{kept}");
    // The switch's links keep the page's address.
    assert!(
        a.body.contains("href=\"/?as=alice&#38;lang=en\""),
        "{}",
        a.body
    );
    let both = format!("{}; amos_console_lang=ja", c.cookie());
    let b = c.get_with("/org", &[("Cookie", &both), ("Accept-Language", "en")]);
    assert!(
        b.body.contains("<html lang=\"ja\">"),
        "the cookie outranks the header"
    );
    assert!(
        c.get_with("/org?lang=xx", &[("Cookie", &c.cookie())])
            .status
            == 200
    );
}
