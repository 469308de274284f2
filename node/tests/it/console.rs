//! `amos console` over HTTP (a real console process, a plain HTTP client):
//! every route needs the token; reads go through the same gate as the CLI
//! for each agent (an invisible memory reads exactly as a missing one);
//! every change is the CLI's change, needs the CSRF token and is refused
//! cross-site; bad input is 400 with a message and changes nothing; every
//! page escapes what it shows.

use crate::common::Home;
use crate::common::console::{Answer, Console, cli_list, listed_ids};
use crate::common::server::{Server, id, pair};

const PAGES: [&str; 11] = [
    "/",
    "/?as=alice",
    "/api/dashboard?as=alice",
    "/node",
    "/pack?as=alice&q=launch",
    "/peers",
    "/memories",
    "/memories?as=alice",
    "/org",
    "/audit",
    "/memories/01a2333b-3a25-7244-8e30-373782ecb05e?as=alice",
];

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

#[test]
fn every_route_needs_a_session_and_the_token_opens_one_without_being_the_cookie() {
    let h = Home::apollo();
    // `amos init` made the token, readable by its owner only.
    let token_file = h.path().join("console.token");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let made = std::fs::read_to_string(&token_file).unwrap();
    let c = Console::start(h.path());
    assert_eq!(c.token, made.trim());
    for p in PAGES
        .iter()
        .chain(&["/events", "/assets/console.js", "/nowhere"])
    {
        let a = c.get_with(p, &[]);
        assert_eq!(a.status, 401, "{p} without a token: {a:?}");
        assert!(a.body.contains("access token"), "{p}: {}", a.body);
        let wrong = c.get_with(
            p,
            &[(
                "Cookie",
                &format!("amos_console_{}=00{}", c.port, &c.token[2..]),
            )],
        );
        assert_eq!(wrong.status, 401, "{p} with a wrong cookie");
    }
    for p in ["/peers/sync", "/memories", "/org/team"] {
        let a = c.post_with(p, &[("csrf", &c.csrf())], &[]);
        assert_eq!(a.status, 401, "POST {p} without a token");
    }
    // The printed URL opens a session: a redirect to the address without
    // the token, setting a cookie that holds a fresh secret, never the
    // token (every server on 127.0.0.1, whatever its port, receives the
    // console's cookies).
    let first = c.get_with(&format!("/peers?token={}&x=1", c.token), &[]);
    assert_eq!(first.status, 303, "{first:?}");
    assert_eq!(first.header("location"), Some("/peers?x=1"));
    let cookie = first
        .header("set-cookie")
        .expect("the first visit sets the cookie");
    assert!(
        !cookie.contains(&c.token),
        "the token in a cookie: {cookie}"
    );
    assert!(
        cookie.starts_with(&format!("amos_console_{}=", c.port)),
        "{cookie}"
    );
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let session = cookie.split(';').next().unwrap();
    assert_ne!(session, c.cookie(), "a session per visit");
    let first = c.get_with("/peers?x=1", &[("Cookie", session)]);
    assert_eq!(first.status, 200);
    // The token itself is no cookie.
    let token_cookie = format!("amos_console_{}={}", c.port, c.token);
    assert_eq!(c.get_with("/", &[("Cookie", &token_cookie)]).status, 401);
    let csrf = c.csrf();
    let a = c.post_with(
        &format!("/org/team?token={}", c.token),
        &[("csrf", &csrf), ("id", "zeus")],
        &[],
    );
    assert_eq!(a.status, 401, "a POST with the token but no session");
    assert!(
        first
            .header("server-timing")
            .is_some_and(|t| t.starts_with("app;dur="))
    );
    assert!(first.header("content-security-policy").is_some());
    let wrong_query = c.get_with("/?token=nope", &[]);
    assert_eq!(wrong_query.status, 401);
    // The printed URL is the same as --print-url's (the token is kept).
    let printed = h.ok(&["console", "--print-url", "--listen", &c.base[7..]]);
    assert_eq!(printed.stdout.trim(), c.url());
    // Another Host (DNS rebinding) is refused even with the cookie.
    let a = c.get_with(
        "/",
        &[
            ("Cookie", &c.cookie()),
            ("Host", &format!("evil.example:{}", c.port)),
        ],
    );
    assert_eq!(a.status, 403, "{a:?}");
}

#[test]
fn each_agent_sees_in_the_console_exactly_what_the_cli_shows() {
    let (h, team, alice_own, carol_own) = org();
    let c = Console::start(h.path());
    for agent in ["alice", "bob", "carol"] {
        let page = c.get(&format!("/memories?as={agent}"));
        assert_eq!(page.status, 200, "{page:?}");
        assert_eq!(
            listed_ids(&page.body),
            cli_list(&h, agent),
            "list as {agent}"
        );
        let search = c.get(&format!("/memories?as={agent}&q=launch"));
        assert_eq!(search.status, 200);
        assert_eq!(
            listed_ids(&search.body),
            // The console searches in the default mode, as the CLI does
            // without --mode (search_ids alone asks lexical).
            h.search_ids_with(agent, "launch", &["-k", "20", "--mode", "hybrid"]),
            "search as {agent}"
        );
    }
    // What bob may not see is not in any page of his, not even counted.
    let bob = c.get("/memories?as=bob&q=launch");
    assert!(!bob.body.contains("launch codes") && !bob.body.contains("party"));
    assert!(bob.body.contains(": 1 shown"), "{}", bob.body);
    // One memory: visible → its page; invisible → exactly the missing page.
    let ok = c.get(&format!("/memories/{team}?as=bob"));
    assert_eq!(ok.status, 200);
    assert!(ok.body.contains("launch window opens tuesday"));
    assert!(ok.body.contains("team:apollo"));
    let hidden = c.get(&format!("/memories/{carol_own}?as=alice"));
    let missing_id = "01a2333b-3a25-7244-8e30-373782ecb05e";
    let missing = c.get(&format!("/memories/{missing_id}?as=alice"));
    assert_eq!(hidden.status, 404);
    assert_eq!(missing.status, 404);
    assert_eq!(
        hidden.body.replace(&carol_own, "ID"),
        missing.body.replace(missing_id, "ID"),
        "an invisible memory reads exactly as a missing one"
    );
    assert!(!hidden.body.contains("party"));
    // The CLI agrees.
    assert_eq!(h.run(&["get", &carol_own, "--as", "alice"]).code, 2);
    // Links show only ends the reader sees.
    h.ok(&[
        "link",
        &alice_own,
        &team,
        "--as",
        "alice",
        "--relation",
        "supports",
    ]);
    let mine = c.get(&format!("/memories/{team}?as=alice"));
    assert!(
        mine.body.contains("supports") && mine.body.contains("launch codes"),
        "{}",
        mine.body
    );
    let bobs = c.get(&format!("/memories/{team}?as=bob"));
    assert!(!bobs.body.contains("supports") && !bobs.body.contains("launch codes"));
    assert!(
        bobs.body
            .contains("No links to memories this agent can see")
    );
    // An unknown agent is bad input, as on the command line.
    assert_eq!(c.get("/memories?as=mallory").status, 400);
}

#[test]
fn changes_are_the_cli_changes_and_need_csrf_from_the_same_origin() {
    let (h, team, _, _) = org();
    let c = Console::start(h.path());
    let before = h.fingerprint();
    let csrf = c.csrf();
    let form = [("as", "alice"), ("content", "added in the console")];
    // No CSRF token; a wrong one; the right one from another site.
    let refusals = [
        c.post_with("/memories", &form, &[("Cookie", &c.cookie())]),
        c.post_with(
            "/memories",
            &[form[0], form[1], ("csrf", "0000")],
            &[("Cookie", &c.cookie())],
        ),
        c.post_with(
            "/memories",
            &[form[0], form[1], ("csrf", &csrf)],
            &[("Cookie", &c.cookie()), ("Origin", "http://evil.example")],
        ),
        c.post_with(
            "/memories",
            &[form[0], form[1], ("csrf", &csrf)],
            &[("Cookie", &c.cookie()), ("Sec-Fetch-Site", "cross-site")],
        ),
    ];
    for r in &refusals {
        assert_eq!(r.status, 403, "{r:?}");
    }
    assert_eq!(h.fingerprint(), before, "a refused POST changed nothing");

    // Add: redirected to the new memory, which the CLI reads.
    let a = c.post(
        "/memories",
        &[
            ("as", "alice"),
            ("content", "added in the console"),
            ("share", "team:apollo"),
            ("tags", "ops, web"),
            ("type", "procedure"),
        ],
    );
    assert_eq!(a.status, 303, "{a:?}");
    let to = a.header("location").unwrap();
    let new_id = to["/memories/".len()..to.find('?').unwrap()].to_owned();
    let m = h.json(&["get", &new_id, "--as", "bob"]);
    assert_eq!(m["content"], "added in the console");
    assert_eq!(m["type"], "procedure");
    assert_eq!(m["tags"], serde_json::json!(["ops", "web"]));
    // Valid time, as `amos add --valid-from --valid-to` takes it.
    let v = c.post(
        "/memories",
        &[
            ("as", "alice"),
            ("content", "the old runbook"),
            ("valid_from", "2026-03-01"),
            ("valid_to", "2026-04-01"),
        ],
    );
    let loc = v.header("location").unwrap();
    let vid = &loc["/memories/".len()..loc.find('?').unwrap()];
    let vm = h.json(&["get", vid, "--as", "alice"]);
    assert!(
        vm["valid_from"].as_str().unwrap().starts_with("2026-03-01"),
        "{vm}"
    );
    assert!(
        vm["valid_to"].as_str().unwrap().starts_with("2026-04-01"),
        "{vm}"
    );
    // Share and unshare, edit, forget.
    assert_eq!(
        c.post(
            &format!("/memories/{new_id}/grant"),
            &[
                ("as", "alice"),
                ("scope", "agent:carol"),
                ("action", "share")
            ]
        )
        .status,
        303
    );
    assert_eq!(
        h.json(&["get", &new_id, "--as", "carol"])["id"],
        new_id.as_str()
    );
    c.post(
        &format!("/memories/{new_id}/grant"),
        &[
            ("as", "alice"),
            ("scope", "agent:carol"),
            ("action", "unshare"),
        ],
    );
    assert_eq!(h.run(&["get", &new_id, "--as", "carol"]).code, 2);
    c.post(
        &format!("/memories/{new_id}/edit"),
        &[("as", "alice"), ("text", "edited in the console")],
    );
    assert_eq!(
        h.json(&["get", &new_id, "--as", "alice"])["content"],
        "edited in the console"
    );
    let hist = c.get(&format!("/memories/{new_id}?as=alice"));
    assert!(hist.body.contains(">edit<"), "the history shows the edit");
    // Not the owner: refused (403), nothing changed.
    let before = h.fingerprint();
    let r = c.post(&format!("/memories/{team}/forget"), &[("as", "bob")]);
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(h.fingerprint(), before);
    assert_eq!(
        c.post(&format!("/memories/{new_id}/forget"), &[("as", "alice")])
            .status,
        303
    );
    assert_eq!(h.run(&["get", &new_id, "--as", "alice"]).code, 2);

    // Org.
    assert_eq!(
        c.post("/org/team", &[("id", "hermes"), ("name", "Hermes")])
            .status,
        303
    );
    assert_eq!(
        c.post("/org/agent", &[("id", "dave"), ("teams", "hermes")])
            .status,
        303
    );
    assert_eq!(
        c.post("/org/project", &[("id", "moon"), ("team", "hermes")])
            .status,
        303
    );
    assert_eq!(
        c.post(
            "/org/member",
            &[
                ("group", "project"),
                ("id", "moon"),
                ("agent", "dave"),
                ("action", "add")
            ]
        )
        .status,
        303
    );
    c.post(
        "/org/member",
        &[
            ("group", "team"),
            ("id", "apollo"),
            ("agent", "carol"),
            ("action", "add"),
        ],
    );
    let agents = h.json(&["agent", "list"]);
    let dave = agents["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == "dave")
        .unwrap()
        .clone();
    assert_eq!(dave["teams"], serde_json::json!(["hermes"]));
    assert_eq!(dave["projects"], serde_json::json!(["moon"]));
    assert!(
        h.ok(&["list", "--as", "carol"])
            .stdout
            .contains("launch window"),
        "carol joined apollo"
    );
    c.post(
        "/org/member",
        &[
            ("group", "team"),
            ("id", "apollo"),
            ("agent", "carol"),
            ("action", "remove"),
        ],
    );
    assert!(
        !h.ok(&["list", "--as", "carol"])
            .stdout
            .contains("launch window")
    );
    assert_eq!(
        c.post("/org/delete", &[("group", "project"), ("id", "moon")])
            .status,
        303
    );
    let org = c.get("/org");
    assert!(org.body.contains("dave") && org.body.contains("Hermes"));
    assert!(
        !org.body.contains("<td>moon</td><td>hermes</td>"),
        "the project is gone"
    );

    // Peers: invite (the code is on the page), remove.
    h.ok(&["peers", "add", &id(&Home::new()), "--policy", "full"]);
    let inv = c.post(
        "/peers/invite",
        &[
            ("team", "apollo"),
            ("ttl", "5m"),
            ("addrs", "127.0.0.1:4747"),
        ],
    );
    assert_eq!(inv.status, 200);
    assert!(
        inv.body
            .contains("id=\"invite-code\" class=\"code\">amos1-"),
        "{}",
        inv.body
    );
    let peer = h.json(&["peers", "list"])["peers"][0]["node_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(c.get("/peers").body.contains(&peer));
    assert_eq!(c.post("/peers/remove", &[("peer", &peer)]).status, 303);
    assert_eq!(h.json(&["peers", "list"])["peers"], serde_json::json!([]));
}

#[test]
fn bad_input_is_400_with_a_message_and_changes_nothing() {
    let (h, team, _, _) = org();
    let c = Console::start(h.path());
    let before = h.fingerprint();
    let grant = format!("/memories/{team}/grant");
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a str);
    let posts: [Case; 12] = [
        (
            "/memories",
            vec![("as", "alice"), ("content", "x"), ("share", "teem:x")],
            "teem",
        ),
        (
            "/memories",
            vec![("as", "mallory"), ("content", "x")],
            "unknown agent",
        ),
        ("/memories", vec![("content", "x")], "agent to act as"),
        (
            "/memories",
            vec![("as", "alice"), ("content", "x"), ("importance", "lots")],
            "importance",
        ),
        (
            "/memories",
            vec![("as", "alice"), ("content", "x"), ("expires", "soon")],
            "expires",
        ),
        ("/memories", vec![("as", "alice")], "content"),
        (
            "/memories/not-an-id/grant",
            vec![("as", "alice"), ("scope", "global"), ("action", "share")],
            "no such memory",
        ),
        (
            &grant,
            vec![("as", "alice"), ("scope", "global"), ("action", "publish")],
            "unknown action",
        ),
        ("/org/team", vec![("id", "Not A Team!")], "team"),
        (
            "/org/member",
            vec![
                ("group", "guild"),
                ("id", "apollo"),
                ("agent", "bob"),
                ("action", "add"),
            ],
            "unknown group",
        ),
        (
            "/peers/invite",
            vec![("team", "apollo"), ("ttl", "forever")],
            "ttl",
        ),
        ("/peers/join", vec![("code", "amos1-garbage")], ""),
    ];
    for (path, form, says) in &posts {
        let r = c.post(path, form);
        assert!(
            r.status == 400 || r.status == 404,
            "POST {path} {form:?}: {r:?}"
        );
        assert!(
            r.body.contains(says),
            "POST {path}: {says:?} not in {}",
            r.body
        );
        assert!(r.body.contains("id=\"error-message\""));
    }
    // What the request said is escaped in the error page too.
    let r = c.post("/org/team", &[("id", "<script>x</script>")]);
    assert_eq!(r.status, 400);
    assert!(!r.body.contains("<script>x"), "{}", r.body);
    for get in [
        "/memories?as=alice&limit=0",
        "/memories?as=alice&limit=lots",
        "/audit?limit=-1",
        "/memories?as=alice&type=Not%20A%20Type%21",
    ] {
        let r = c.get(get);
        assert_eq!(r.status, 400, "{get}: {r:?}");
    }
    assert_eq!(h.fingerprint(), before, "nothing changed");
    assert_eq!(
        h.json(&["team", "list"])["teams"].as_array().unwrap().len(),
        1
    );
}

#[test]
fn every_page_escapes_what_it_shows() {
    let h = Home::apollo();
    let evil = "<script>alert(1)</script><img src=x onerror=alert(2)>\"'&";
    let id = h.add("alice", evil, &["team:apollo"]);
    h.ok(&["team", "create", "t-x", "--name", "<b>bold team</b>"]);
    let c = Console::start(h.path());
    for p in [
        "/memories?as=alice".to_owned(),
        format!("/memories?as=alice&q={}", "%3Cscript%3E"),
        format!("/memories/{id}?as=alice"),
        "/org".to_owned(),
        "/peers".to_owned(),
    ] {
        let page = c.get(&p);
        assert_eq!(page.status, 200, "{p}");
        assert!(!page.body.contains("<script>alert"), "{p} has raw script");
        assert!(!page.body.contains("<img src=x"), "{p} has a raw img");
        assert!(!page.body.contains("<b>bold"), "{p} has raw markup");
    }
    let one = c.get(&format!("/memories/{id}?as=alice"));
    assert!(
        one.body
            .contains("&#60;script&#62;alert(1)&#60;/script&#62;"),
        "{}",
        one.body
    );
    // Query text echoed back is escaped too.
    let q = c.get("/memories?as=alice&q=%22%3E%3Cscript%3Ex%3C%2Fscript%3E");
    assert!(!q.body.contains("\"><script>x"));
}

#[test]
fn node_peers_audit_and_events_pages_show_the_node() {
    let a = Home::apollo();
    let b = Home::new();
    // B has a team of its own, and A gives B only its apollo: A's gate
    // refuses B's team record (audit).
    b.ok(&["team", "create", "apollo"]);
    let server = Server::start(b.path());
    pair(&b, &a, &server, "full");
    a.ok(&["peers", "policy", &id(&b), "team:apollo"]);
    let c = Console::start(a.path());
    let node = c.get("/node");
    assert!(node.body.contains(&id(&a)));
    assert!(node.body.contains("<svg"), "the NodeId's QR code");
    assert!(node.body.contains("not set: bundles are not encrypted"));
    let peers = c.get("/peers");
    assert!(peers.body.contains(&id(&b)) && peers.body.contains("never synced"));
    let synced = c.post("/peers/sync", &[("peer", &id(&b))]);
    assert_eq!(synced.status, 200);
    assert!(
        synced.body.contains(&format!("{}  ok:", id(&b))),
        "{}",
        synced.body
    );
    assert!(synced.body.contains("result result-ok\">ok<"));
    assert_eq!(a.json(&["peers", "list"])["peers"][0]["last_result"], "ok");
    let audit = c.get("/audit");
    assert_eq!(audit.status, 200);
    let entry = &a.json(&["audit"])["refused"][0];
    assert_eq!(entry["code"], "outside_policy");
    for field in ["peer", "code", "register"] {
        assert!(
            audit.body.contains(entry[field].as_str().unwrap()),
            "{field}"
        );
    }
    assert!(audit.body.contains("No fact is held back"));
    // The live stream: its head (the stream itself never ends).
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(&c.base[7..]).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    write!(
        s,
        "GET /events HTTP/1.1\r\nHost: {}\r\nCookie: {}\r\n\r\n",
        &c.base[7..],
        c.cookie()
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).expect("the stream's head");
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("content-type: text/event-stream"), "{head}");
    // SIGTERM stops the console cleanly even with the stream still open.
    let mut c = c;
    assert!(c.stop(), "the console exits 0 on SIGTERM with /events open");
    drop(s);
}

#[test]
fn a_home_made_before_the_console_gets_its_token_on_first_use() {
    let h = Home::new();
    std::fs::remove_file(h.path().join("console.token")).unwrap();
    let url = h.ok(&["console", "--print-url"]).stdout;
    let made = std::fs::read_to_string(h.path().join("console.token")).unwrap();
    assert_eq!(
        url.trim(),
        format!("http://127.0.0.1:7474/?token={}", made.trim())
    );
    assert_eq!(h.json(&["console", "--print-url"])["url"], url.trim());
    let c = Console::start(h.path());
    assert_eq!(c.token, made.trim(), "the same token, kept");
}

#[test]
fn a_non_loopback_console_needs_the_explicit_flag() {
    let h = Home::new();
    for args in [
        vec!["console", "--listen", "0.0.0.0:0"],
        vec![
            "serve",
            "--no-mdns",
            "--listen",
            "127.0.0.1:0",
            "--console",
            "0.0.0.0:0",
        ],
    ] {
        let r = h.run(&args);
        assert_eq!(r.code, 2, "{args:?}: {r:?}");
        assert!(r.stderr.contains("--allow-remote"), "{}", r.stderr);
    }
    let r = h.run(&["console", "--listen", "nowhere"]);
    assert_eq!(r.code, 2);
}

/// The serving `inviter` runs `amos team invite apollo EXTRA…`; a fresh
/// joiner with agent bob pastes the code, and bob, into its console. The
/// joiner, its console, the code and the join's page (checked: paired).
fn join_in_console(inviter: &Home, extra: &[&str]) -> (Home, Console, String, Answer) {
    let mut invite = vec!["team", "invite", "apollo"];
    invite.extend_from_slice(extra);
    let code = inviter.json(&invite)["code"].as_str().unwrap().to_owned();
    let joiner = Home::new();
    joiner.ok(&["agent", "add", "bob"]);
    let c = Console::start(joiner.path());
    let r = c.post("/peers/join", &[("code", &code), ("agent", "bob")]);
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        r.body.contains(&format!("paired with {}", id(inviter))),
        "{}",
        r.body
    );
    (joiner, c, code, r)
}

#[test]
fn pairing_by_code_in_the_console_is_amos_join() {
    // The inviter serves; its code is pasted into the joiner's console.
    let inviter = Home::apollo();
    inviter.add("alice", "standup moves to 10:30", &["team:apollo"]);
    let server = Server::start(inviter.path());
    let (joiner, c, code, r) = join_in_console(&inviter, &[]);
    assert!(r.body.contains("first sync: "), "{}", r.body);
    let peers = joiner.json(&["peers", "list"])["peers"].clone();
    assert_eq!(peers[0]["node_id"], id(&inviter).as_str());
    assert_eq!(peers[0]["policy"], "team:apollo");
    // bob was made a member on the inviter and now reads the team's memory.
    assert!(
        joiner
            .ok(&["list", "--as", "bob"])
            .stdout
            .contains("standup")
    );
    // The code is one-time: a second use is refused and changes nothing.
    let before = joiner.json(&["peers", "list"]);
    let again = c.post("/peers/join", &[("code", &code)]);
    assert!(again.status == 400 || again.status == 403, "{again:?}");
    assert_eq!(joiner.json(&["peers", "list"]), before);
    drop(server);
}

/// The console's join applies `amos join`'s rule for the joiner's agent: an
/// invite whose policy names no team or project carries no agent, and the
/// page says so, as `amos join --as` notes it.
#[test]
fn the_console_join_leaves_out_an_agent_the_invite_cannot_take() {
    let inviter = Home::apollo();
    let server = Server::start(inviter.path());
    let (_joiner, _console, _code, r) = join_in_console(&inviter, &["--policy", "global"]);
    assert!(r.body.contains("agent bob not carried: "), "{}", r.body);
    assert!(
        r.body.contains("policy (global) names no team or project"),
        "{}",
        r.body
    );
    drop(server);
}

/// With the read audit on, what a console page showed an agent is recorded
/// as read through the console, and only that: a memory the agent may not
/// see (the page says it is missing) leaves no row.
#[test]
fn console_reads_are_audited_as_console() {
    let (h, team, alice, _) = org();
    h.ok(&["config", "set", "read-audit", "on"]);
    let c = Console::start(h.path());
    assert_eq!(c.get(&format!("/memories/{team}?as=bob")).status, 200);
    assert_eq!(c.get(&format!("/memories/{alice}?as=bob")).status, 404);
    let rows = h.json(&["audit", "reads", "--agent", "bob"])["reads"].clone();
    let rows = rows.as_array().unwrap();
    assert!(!rows.is_empty(), "the team memory was shown to bob");
    assert!(
        rows.iter()
            .all(|r| r["front"] == "console" && r["memory"] == team.as_str()),
        "{rows:?}"
    );
}

/// The peers page's link column (docs/design.md §7.11, §8.2): a relay
/// link says so, a peer reached through it names the relay it goes
/// `--via` (its id in full on hover), a mailbox directory shows, a peer
/// dialled at its address is direct — in English and in Japanese.
#[test]
fn the_peers_page_shows_relay_links_vias_and_mailboxes() {
    let a = Home::new();
    let (relay, far, near) = (Home::new(), Home::new(), Home::new());
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("box");
    std::fs::create_dir(&dir).unwrap();
    let dir = std::fs::canonicalize(&dir).unwrap();
    let (ir, ifar, inear) = (id(&relay), id(&far), id(&near));
    a.ok(&[
        "peers",
        "add",
        &ir,
        "127.0.0.1:9",
        "--policy",
        "none",
        "--relay",
    ]);
    a.ok(&["peers", "add", &ifar, "--policy", "full", "--via", &ir]);
    a.ok(&["peers", "mailbox", &ifar, dir.to_str().unwrap()]);
    a.ok(&["peers", "add", &inear, "127.0.0.1:10", "--policy", "full"]);
    let c = Console::start(a.path());
    // The link cell of the peer's row.
    let cell = |body: &str, peer: &str| -> String {
        let row = body
            .split(&format!("<tr data-peer=\"{peer}\">"))
            .nth(1)
            .expect("the peer's row");
        let row = &row[..row.find("</tr>").unwrap()];
        let cell = row
            .split("<td class=\"link\">")
            .nth(1)
            .expect("the link column");
        cell[..cell.find("</td>").unwrap()].to_owned()
    };
    let en = c.get("/peers");
    assert_eq!(en.status, 200);
    assert!(en.body.contains("<th>Link</th>"));
    let r = cell(&en.body, &ir);
    assert!(
        r.contains("class=\"relay\"") && r.contains("relay link"),
        "{r}"
    );
    assert!(!r.contains("class=\"via\"") && !r.contains("class=\"direct\""));
    let f = cell(&en.body, &ifar);
    let via = format!("via <code title=\"{ir}\">{}</code>", &ir[..12]);
    assert!(f.contains("class=\"via\"") && f.contains(&via), "{f}");
    assert!(
        f.contains(&format!("mailbox <code>{}</code>", dir.display())),
        "{f}"
    );
    assert!(!f.contains("class=\"relay\"") && !f.contains("class=\"direct\""));
    let n = cell(&en.body, &inear);
    assert!(
        n.contains("class=\"direct\"") && n.contains("direct"),
        "{n}"
    );
    assert!(!n.contains("class=\"via\"") && !n.contains("mailbox"));
    let ja = c.get("/peers?lang=ja");
    assert!(ja.body.contains("<th>リンク</th>"));
    assert!(cell(&ja.body, &ir).contains("中継リンク"));
    let f = cell(&ja.body, &ifar);
    assert!(f.contains("経由") && f.contains("メールボックス"), "{f}");
    assert!(cell(&ja.body, &inear).contains("直接"));
}

/// The console's "sync now" runs the mailboxes too, as `amos sync now`
/// does: a peer with only a mailbox directory gets its sealed bundle posted
/// and the page says so.
#[test]
fn sync_now_in_the_console_posts_to_a_mailbox() {
    let a = Home::apollo();
    let b = Home::new();
    let dir = tempfile::tempdir().expect("mailbox dir");
    let d = dir.path().to_str().expect("utf-8 path");
    a.ok(&["peers", "add", &id(&b), "--policy", "full", "--mailbox", d]);
    a.ok(&["add", "a memory for the mailbox", "--as", "alice"]);
    let c = Console::start(a.path());
    let synced = c.post("/peers/sync", &[]);
    assert_eq!(synced.status, 200);
    let posted: Vec<_> = std::fs::read_dir(dir.path())
        .expect("read the mailbox")
        .filter_map(|e| e.ok())
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .collect();
    assert_eq!(posted.len(), 1, "one bundle posted for B");
    assert!(
        synced.body.contains(&format!("mailbox {d}: 0 bundles in"))
            && synced.body.contains("1 posted"),
        "{}",
        synced.body
    );
}
