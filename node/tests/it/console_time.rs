//! The console's timeline (`/timeline`), a memory's provenance (`/memories/ID`:
//! why the node believes it) and the relation graph (`/graph`), over HTTP
//! against a real console process: each is the node API the CLI uses, seen
//! through the acting agent's gate — a memory the agent cannot see is never
//! shown, linked, drawn nor counted, even as the superseder, the superseded
//! or the linked end of one it sees; bad input is 400 with nothing changed;
//! what a memory says is escaped.

use crate::common::Home;
use crate::common::console::Console;
use crate::common::server::{Server, id, pair};

/// The cast: alice and bob in team apollo, carol outside it.
/// - `old` (team): replaced by `new` (team) and by `secret_next` (alice's,
///   private), linked to `secret` (alice's, private) and to `new`;
/// - `heir` (team) replaces `hidden_root` (alice's, private).
struct Cast {
    h: Home,
    old: String,
    new: String,
    secret: String,
    secret_next: String,
    hidden_root: String,
    heir: String,
}

fn cast() -> Cast {
    let h = Home::apollo();
    h.ok(&["agent", "add", "bob", "--team", "apollo"]);
    h.ok(&["agent", "add", "carol"]);
    let add = |args: &[&str]| -> String {
        let mut a = vec!["add"];
        a.extend_from_slice(args);
        h.json(&a)["id"].as_str().unwrap().to_owned()
    };
    let old = add(&[
        "the launch is on tuesday",
        "--as",
        "alice",
        "--share",
        "team:apollo",
        "--valid-from",
        "2026-01-01",
    ]);
    let new = h.json(&[
        "supersede",
        &old,
        "the launch moved to wednesday",
        "--as",
        "alice",
        "--valid-from",
        "2026-02-01",
    ])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let secret_next = add(&[
        "alices private successor plan",
        "--as",
        "alice",
        "--supersedes",
        &old,
        "--valid-from",
        "2026-01-15",
    ]);
    let secret = add(&["alices private launch codes", "--as", "alice"]);
    h.ok(&[
        "link",
        &old,
        &secret,
        "--as",
        "alice",
        "--relation",
        "supports",
    ]);
    h.ok(&["link", &old, &new, "--as", "alice", "--relation", "related"]);
    let hidden_root = add(&[
        "alices private first draft",
        "--as",
        "alice",
        "--valid-from",
        "2026-01-01",
    ]);
    let heir = add(&[
        "the published schedule",
        "--as",
        "alice",
        "--share",
        "team:apollo",
        "--supersedes",
        &hidden_root,
        "--valid-from",
        "2026-03-01",
    ]);
    Cast {
        h,
        old,
        new,
        secret,
        secret_next,
        hidden_root,
        heir,
    }
}

/// The `data-id`s of the rows of table `#table` in `page`.
fn table_ids(page: &str, table: &str) -> Vec<String> {
    let Some(at) = page.find(&format!("id=\"{table}\"")) else {
        return Vec::new();
    };
    let body = &page[at..];
    let body = &body[..body.find("</table>").unwrap_or(body.len())];
    body.split("<tr data-id=\"")
        .skip(1)
        .map(|s| s[..s.find('"').unwrap()].to_owned())
        .collect()
}

/// The events of a timeline page: (memory, event, by).
fn page_events(page: &str) -> Vec<(String, String, String)> {
    let Some(at) = page.find("id=\"timeline\"") else {
        return Vec::new();
    };
    page[at..]
        .split("<tr data-id=\"")
        .skip(1)
        .map(|row| {
            let id = row[..row.find('"').unwrap()].to_owned();
            let ev = &row[row.find("data-event=\"").unwrap() + 12..];
            let ev = ev[..ev.find('"').unwrap()].to_owned();
            let row = &row[..row.find("</tr>").unwrap()];
            let by = row
                .find("class=\"by\" href=\"/memories/")
                .map(|i| {
                    let s = &row[i + 27..];
                    s[..s.find('?').unwrap()].to_owned()
                })
                .unwrap_or_default();
            (id, ev, by)
        })
        .collect()
}

fn cli_events(h: &Home, agent: &str, extra: &[&str]) -> Vec<(String, String, String)> {
    let mut a = vec!["timeline", "--as", agent, "--limit", "200"];
    a.extend_from_slice(extra);
    h.json(&a)["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or("").to_owned();
            (s("memory"), s("event"), s("by"))
        })
        .collect()
}

/// The timeline is `amos timeline`'s, per agent: bob sees `old` superseded
/// by `new` only (alice's private successor neither ends it nor is named),
/// and `heir` starting, never the private memory it replaces; alice sees
/// her own too. `valid_at` adds what was true then, as `amos list
/// --valid-at` gives it.
#[test]
fn the_timeline_is_amos_timeline_behind_the_agents_gate() {
    let c = cast();
    let console = Console::start(c.h.path());
    for agent in ["alice", "bob", "carol"] {
        let page = console.get(&format!("/timeline?as={agent}"));
        assert_eq!(page.status, 200, "{agent}: {page:?}");
        assert_eq!(
            page_events(&page.body),
            cli_events(&c.h, agent, &[]),
            "{agent}"
        );
    }
    let bob = console.get("/timeline?as=bob").body;
    for hidden in [&c.secret, &c.secret_next, &c.hidden_root] {
        assert!(
            !bob.contains(hidden.as_str()),
            "bob's timeline names {hidden}"
        );
    }
    assert!(!bob.contains("private"), "{bob}");
    let events = page_events(&bob);
    assert!(
        events.contains(&(c.old.clone(), "superseded".into(), c.new.clone())),
        "{events:?}"
    );
    // alice: her private successor ends `old` first (it starts earlier).
    let alice = page_events(&console.get("/timeline?as=alice").body);
    assert!(
        alice.contains(&(c.old.clone(), "superseded".into(), c.secret_next.clone())),
        "{alice:?}"
    );
    // Since/until narrow it as the CLI's do.
    let narrow = console.get("/timeline?as=bob&since=2026-01-20&until=2026-02-15");
    assert_eq!(
        page_events(&narrow.body),
        cli_events(
            &c.h,
            "bob",
            &["--since", "2026-01-20", "--until", "2026-02-15"]
        )
    );
    // What was true on 2026-01-20: for bob `old` (its visible superseder
    // starts later); for alice nothing of `old` (her successor had started).
    for (agent, at) in [
        ("bob", "2026-01-20"),
        ("alice", "2026-01-20"),
        ("bob", "2026-02-10"),
    ] {
        let page = console.get(&format!("/timeline?as={agent}&valid_at={at}"));
        assert_eq!(page.status, 200);
        let want: Vec<String> =
            c.h.json(&["list", "--as", agent, "--valid-at", at, "--limit", "200"])["memories"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["id"].as_str().unwrap().to_owned())
                .collect();
        assert_eq!(table_ids(&page.body, "true-then"), want, "{agent} at {at}");
    }
    let then = console.get("/timeline?as=bob&valid_at=2026-01-20").body;
    assert_eq!(table_ids(&then, "true-then"), vec![c.old.clone()]);
    // No agent: the prompt.
    assert!(console.get("/timeline").body.contains("class=\"empty\""));
}

/// A memory's page says why the node believes it, and nothing of what the
/// agent cannot see: bob sees `old` replaced by `new` only and linked to
/// `new` only; `heir` replaces nothing he sees. alice sees all of hers.
#[test]
fn provenance_shows_only_what_the_agent_sees() {
    let c = cast();
    c.h.ok(&["config", "set", "read-audit", "on"]);
    c.h.ok(&["get", &c.old, "--as", "bob"]);
    let console = Console::start(c.h.path());
    let bob = console.get(&format!("/memories/{}?as=bob", c.old));
    assert_eq!(bob.status, 200, "{bob:?}");
    let b = &bob.body;
    for hidden in [&c.secret, &c.secret_next, &c.hidden_root] {
        assert!(!b.contains(hidden.as_str()), "bob's page names {hidden}");
    }
    assert!(!b.contains("private successor") && !b.contains("launch codes"));
    assert!(!b.contains("supports"), "the link to the hidden memory");
    assert_eq!(table_ids(b, "links"), vec![c.new.clone()]);
    let by = &b[b.find("id=\"superseded-by\"").unwrap()..];
    let by = &by[..by.find("</td>").unwrap()];
    assert_eq!(by.matches("data-id=").count(), 1, "{by}");
    assert!(by.contains(&c.new));
    // Who and where: alice wrote it here; both signed facts check out.
    assert!(b.contains("<td id=\"owner\">alice</td>"));
    let node_id = id(&c.h);
    assert!(
        b.contains(&format!("data-origin=\"here\"><code>{node_id}</code>")),
        "{b}"
    );
    for register in ["content", "acl"] {
        let row = format!("<tr data-register=\"{register}\">");
        let at = b.find(&row).unwrap_or_else(|| panic!("{register}: {b}"));
        let row = &b[at..at + b[at..].find("</tr>").unwrap()];
        assert!(
            row.contains(&node_id) && row.contains("class=\"ok\""),
            "{row}"
        );
    }
    // Recalled: the read audit's rows for it (bob's CLI get, this page).
    let reads = &b[b.find("id=\"reads\"").expect("the reads table")..];
    assert!(
        reads.contains("<td>bob</td><td>cli</td><td>get</td>"),
        "{reads}"
    );
    assert!(reads.contains("<td>console</td>"), "{reads}");
    // heir replaces a memory bob cannot see: "none", no id.
    let heir = console.get(&format!("/memories/{}?as=bob", c.heir)).body;
    let sup = &heir[heir.find("id=\"supersedes\"").unwrap()..];
    let sup = &sup[..sup.find("</td>").unwrap()];
    assert!(!sup.contains("data-id="), "{sup}");
    assert!(!heir.contains(&c.hidden_root) && !heir.contains("first draft"));
    // alice sees both successors, both links, and what heir replaced.
    let alice = console.get(&format!("/memories/{}?as=alice", c.old)).body;
    let by = &alice[alice.find("id=\"superseded-by\"").unwrap()..];
    let by = &by[..by.find("</td>").unwrap()];
    assert_eq!(by.matches("data-id=").count(), 2, "{by}");
    let mut links = table_ids(&alice, "links");
    links.sort();
    let mut want = vec![c.new.clone(), c.secret.clone()];
    want.sort();
    assert_eq!(links, want);
    let heir = console.get(&format!("/memories/{}?as=alice", c.heir)).body;
    assert!(heir.contains(&format!("data-id=\"{}\"", c.hidden_root)));
    // carol sees none of it: exactly the missing page.
    let hidden = console.get(&format!("/memories/{}?as=carol", c.old));
    assert_eq!(hidden.status, 404);
    let missing_id = "01a2333b-3a25-7244-8e30-373782ecb05e";
    let missing = console.get(&format!("/memories/{missing_id}?as=carol"));
    assert_eq!(
        hidden.body.replace(&c.old, "ID"),
        missing.body.replace(missing_id, "ID")
    );
}

/// A memory that came from a peer names its origin node, the peer it
/// arrived from and the signer of each fact: relayed C → B → A (A knows C
/// but cannot dial it), A's page says origin C, arrived from B, both facts
/// signed by C and verified; one B wrote itself
/// arrived from B and originates there.
#[test]
fn provenance_names_the_origin_and_the_peer_a_memory_arrived_from() {
    let a = Home::apollo();
    let b = Home::new();
    let c = Home::new();
    b.ok(&["agent", "add", "yves"]);
    c.ok(&["agent", "add", "zed"]);
    let from_c = c.add("zed", "written on the far node", &["global"]);
    let from_b = b.add("yves", "written on the middle node", &["global"]);
    let server_c = Server::start(c.path());
    pair(&c, &b, &server_c, "full");
    assert_eq!(b.sync(&["now"]).0, 0);
    let server_b = Server::start(b.path());
    pair(&b, &a, &server_b, "full");
    // A knows C (its facts' standing here is the policy A gives C) but
    // cannot dial it: C's memories reach A through B.
    a.ok(&["peers", "add", &id(&c), "--policy", "full"]);
    let before = a.fingerprint();
    assert_eq!(a.sync(&["now"]).0, 0);
    assert_ne!(a.fingerprint(), before, "the sync brought both");
    let console = Console::start(a.path());
    let (bid, cid) = (id(&b), id(&c));
    let page = console.get(&format!("/memories/{from_c}?as=alice"));
    assert_eq!(page.status, 200, "{page:?}");
    let p = &page.body;
    assert!(
        p.contains(&format!("data-origin=\"peer\"><code>{cid}</code>")),
        "{p}"
    );
    let arrived = &p[p.find("id=\"arrived\"").unwrap()..];
    let arrived = &arrived[..arrived.find("</td>").unwrap()];
    assert!(
        arrived.contains(&format!("<code>{bid}</code>")),
        "{arrived}"
    );
    for register in ["content", "acl"] {
        let row = &p[p
            .find(&format!("<tr data-register=\"{register}\">"))
            .unwrap()..];
        let row = &row[..row.find("</tr>").unwrap()];
        assert!(row.contains(&cid) && row.contains("class=\"ok\""), "{row}");
    }
    let page = console.get(&format!("/memories/{from_b}?as=alice")).body;
    assert!(
        page.contains(&format!("data-origin=\"peer\"><code>{bid}</code>")),
        "{page}"
    );
    let arrived = &page[page.find("id=\"arrived\"").unwrap()..];
    assert!(arrived[..arrived.find("</td>").unwrap()].contains(&bid));
    // Written here: no arrival.
    let mine = a.add("alice", "written here", &[]);
    let page = console.get(&format!("/memories/{mine}?as=alice")).body;
    let arrived = &page[page.find("id=\"arrived\"").unwrap()..];
    assert!(!arrived[..arrived.find("</td>").unwrap()].contains("<code>"));
}

/// The graph draws what the agent sees around a memory and nothing else;
/// each memory is a link to its page; no script; the CSP is the console's.
#[test]
fn the_graph_draws_only_what_the_agent_sees() {
    let c = cast();
    let console = Console::start(c.h.path());
    let drawn = |agent: &str, around: &str, depth: &str| -> Vec<String> {
        let p = console.get(&format!("/graph?as={agent}&around={around}&depth={depth}"));
        assert_eq!(p.status, 200, "{p:?}");
        assert!(p.body.contains("<svg id=\"graph\""));
        let mut ids: Vec<String> = p
            .body
            .split("<a class=\"node")
            .skip(1)
            .map(|s| {
                let s = &s[s.find("href=\"/memories/").unwrap() + 16..];
                let id = s[..s.find('?').unwrap()].to_owned();
                assert!(s.starts_with(&format!("{id}?as={agent}\"")), "{s}");
                id
            })
            .collect();
        ids.sort();
        ids
    };
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    assert_eq!(
        drawn("bob", &c.old, "2"),
        sorted(vec![c.old.clone(), c.new.clone()])
    );
    assert_eq!(
        drawn("alice", &c.old, "1"),
        sorted(vec![
            c.old.clone(),
            c.new.clone(),
            c.secret.clone(),
            c.secret_next.clone()
        ])
    );
    assert_eq!(
        drawn("alice", &c.heir, "1"),
        sorted(vec![c.heir.clone(), c.hidden_root.clone()])
    );
    assert_eq!(drawn("bob", &c.heir, "3"), vec![c.heir.clone()]);
    let page = console.get(&format!("/graph?as=bob&around={}", c.old));
    for hidden in [&c.secret, &c.secret_next, &c.hidden_root] {
        assert!(!page.body.contains(hidden.as_str()));
    }
    // Two memories, one link and one supersession between them (both ways
    // of seeing it drawn once each).
    assert!(page.body.contains("<strong>2</strong>"), "{}", page.body);
    assert_eq!(page.body.matches("<line class=\"edge").count(), 2);
    assert_eq!(page.body.matches("class=\"edge supersedes\"").count(), 1);
    assert!(!page.body.contains("<script>") && page.body.matches("<script").count() == 1);
    assert_eq!(
        page.header("content-security-policy"),
        console.get("/").header("content-security-policy")
    );
    // The centre must be visible: a hidden one is the missing memory's 404.
    let hidden = console.get(&format!("/graph?as=bob&around={}", c.secret));
    assert_eq!(hidden.status, 404);
    assert!(!hidden.body.contains("launch codes"));
    // No memory named: the prompt, no drawing.
    let none = console.get("/graph?as=bob");
    assert_eq!(none.status, 200);
    assert!(!none.body.contains("<svg id=\"graph\""));
}

#[test]
fn bad_input_to_the_timeline_and_graph_is_400_and_changes_nothing() {
    let c = cast();
    let console = Console::start(c.h.path());
    let before = c.h.fingerprint();
    for path in [
        "/timeline?as=mallory".to_owned(),
        "/timeline?as=alice&since=someday".to_owned(),
        "/timeline?as=alice&valid_at=never".to_owned(),
        "/timeline?as=alice&since=2026-03-01&until=2026-01-01".to_owned(),
        "/timeline?as=alice&limit=0".to_owned(),
        "/timeline?as=alice&limit=lots".to_owned(),
        "/timeline?as=alice&limit=1000000".to_owned(),
        format!("/graph?as=mallory&around={}", c.old),
        format!("/graph?as=alice&around={}&depth=0", c.old),
        format!("/graph?as=alice&around={}&depth=9", c.old),
        format!("/graph?as=alice&around={}&depth=deep", c.old),
        format!("/memories/{}", c.old),
    ] {
        let r = console.get(&path);
        assert_eq!(r.status, 400, "{path}: {r:?}");
        assert!(r.body.contains("id=\"error-message\""), "{path}");
    }
    assert_eq!(console.get("/graph?as=alice&around=not-an-id").status, 404);
    assert_eq!(c.h.fingerprint(), before, "nothing changed");
}

#[test]
fn the_timeline_provenance_and_graph_escape_what_memories_say() {
    let h = Home::apollo();
    let evil = "<script>alert(1)</script><img src=x onerror=alert(2)> launch";
    let a = h.add("alice", evil, &["team:apollo"]);
    let b = h.json(&["supersede", &a, "<b>bold</b> successor", "--as", "alice"])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    h.ok(&["link", &a, &b, "--as", "alice"]);
    let console = Console::start(h.path());
    for p in [
        "/timeline?as=alice".to_owned(),
        "/timeline?as=alice&valid_at=2030-01-01".to_owned(),
        format!("/memories/{a}?as=alice"),
        format!("/memories/{b}?as=alice"),
        format!("/graph?as=alice&around={a}"),
    ] {
        let page = console.get(&p);
        assert_eq!(page.status, 200, "{p}");
        assert!(!page.body.contains("<script>alert"), "{p} has raw script");
        assert!(!page.body.contains("<img src=x"), "{p} has a raw img");
        assert!(!page.body.contains("<b>bold"), "{p} has raw markup");
        assert!(page.body.contains("&#60;"), "{p}: shown as text");
    }
}
