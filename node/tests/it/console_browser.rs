//! The console in a real browser: headless Chromium (Debian's `chromium`
//! and `chromium-driver`) driven over WebDriver by a minimal client (JSON
//! over HTTP with ureq). It loads the console with the printed URL, acts
//! as two agents and checks each sees exactly what the CLI lists, opens a
//! memory with HTML in it and finds it shown as text (no element made, no
//! script run), runs "sync now" against a second real node and sees the
//! peer row turn `ok`, reads the peers' link column (direct, a relay
//! link, a peer reached via it), creates an invite and reads its code, reads the
//! dashboard and the pack preview, switches the language with the page's
//! link, reads the timeline, draws the relation graph and follows a
//! memory in it to its page (why it is believed: the signatures verified,
//! what replaced it), pins, unpins and gives feedback by the page's
//! buttons, opens every page of `common::console::pages` in English and
//! Japanese checking its `main` and the element it is about, and takes a
//! screenshot of each page into the test's temp dir (or
//! `$AMOS_CONSOLE_SHOTS` when set, to look at them).
//!
//! Without chromium and chromedriver it says so on stderr and skips (CI
//! installs them: `.ci/run`).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::json;

use crate::common::Home;
use crate::common::browser::{Browser, CHROMEDRIVER, CHROMIUM};
use crate::common::console::{Console, cli_list, pages};
use crate::common::server::{Server, id, pair};

#[test]
fn the_console_in_a_real_browser() {
    let missing: Vec<&str> = [CHROMIUM, CHROMEDRIVER]
        .into_iter()
        .filter(|p| !Path::new(p).exists())
        .collect();
    if !missing.is_empty() {
        eprintln!(
            "SKIPPED console_browser::the_console_in_a_real_browser: {} not installed \
             (apt-get install chromium chromium-driver; .ci/run does)",
            missing.join(" and ")
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let shots = std::env::var_os("AMOS_CONSOLE_SHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| tmp.path().join("shots"));
    std::fs::create_dir_all(&shots).unwrap();

    // Node A (the console's) and node B, served, a full peer of A.
    let a = Home::apollo();
    a.ok(&["agent", "add", "bob"]);
    a.add("alice", "launch window opens tuesday", &["team:apollo"]);
    a.add("alice", "alice keeps the launch codes", &[]);
    a.add("bob", "bob watches the weather", &[]);
    let html = "<b id=\"injected\">bold?</b><script>window.pwned = 1</script>";
    let html_id = a.add("alice", html, &["team:apollo"]);
    let b = Home::new();
    // A and B each made a legacy team zeus, before ids were qualified
    // (AMOS_LEGACY_IDS=1; docs/design.md §6.2): each refuses the other's
    // record (audit), so their digests disagree.
    for h in [&a, &b] {
        let r = crate::common::Run::from(
            h.cmd()
                .env("AMOS_LEGACY_IDS", "1")
                .args(["team", "create", "zeus"])
                .output()
                .expect("spawn amos"),
        );
        assert_eq!(r.code, 0, "{r:?}");
    }
    b.ok(&["team", "create", "hermes"]);
    b.ok(&["agent", "add", "zed", "--team", "hermes"]);
    b.add("zed", "from the other node", &["global"]);
    let server = Server::start(b.path());
    pair(&b, &a, &server, "full");

    let console = Console::start(a.path());
    let browser = Browser::start(&tmp.path().join("profile"));

    // Node page, reached with the printed URL: its redirect sets the
    // session cookie and takes the token out of the address bar.
    browser.goto(&console.url());
    assert_eq!(browser.current_url(), format!("{}/", console.base));
    assert!(browser.text("main").contains("Choose the agent"));
    browser.goto(&format!("{}/node", console.base));
    assert_eq!(browser.text("#node-id"), id(&a));

    // Cookies go to every port of a host: a plain HTTP server on another
    // port of 127.0.0.1 receives the console's — a session of this run,
    // never the token.
    let (other, head) = other_port();
    browser.goto(&format!("http://127.0.0.1:{other}/"));
    let head = head
        .recv_timeout(Duration::from_secs(60))
        .expect("the browser's request to the other port");
    assert!(
        head.contains(&format!("amos_console_{}=", console.port)),
        "{head}"
    );
    assert!(!head.contains(&console.token), "the token left: {head}");
    browser.shot(&shots, "1-node");

    // Two agents: each sees exactly what the CLI lists.
    for agent in ["alice", "bob"] {
        browser.goto(&format!("{}/memories?as={agent}", console.base));
        assert_eq!(browser.listed(), cli_list(&a, agent), "as {agent}");
        browser.shot(&shots, &format!("2-memories-{agent}"));
        // The search form's answer: the ids `amos search` ranks, in order.
        browser.goto(&format!("{}/memories?as={agent}&q=launch", console.base));
        assert_eq!(
            browser.listed(),
            // In the console's (default, hybrid) mode: search_ids alone asks lexical.
            a.search_ids_with(agent, "launch", &["-k", "20", "--mode", "hybrid"]),
            "search as {agent}"
        );
    }

    // HTML in a memory is text.
    browser.goto(&format!("{}/memories/{html_id}?as=alice", console.base));
    assert_eq!(browser.text("#content"), html);
    assert_eq!(
        browser.script("return document.querySelectorAll('#injected').length;"),
        json!(0),
        "no element was made"
    );
    assert_eq!(
        browser.script("return window.pwned === undefined;"),
        json!(true)
    );
    browser.shot(&shots, "3-memory-html");

    // Sync now against node B: the row turns ok.
    browser.goto(&format!("{}/peers", console.base));
    let row = format!("tr[data-peer=\"{}\"]", id(&b));
    assert_eq!(browser.text(&format!("{row} .result")), "never synced");
    browser.click_to_page(&format!("{row} .sync-one"));
    // The answer page is the one with the pass's report (#flash).
    assert!(browser.text("#flash").contains(" ok: "));
    assert_eq!(browser.text(&format!("{row} .result")), "ok");
    // Facts moved: no digests were compared.
    assert_eq!(browser.text(&format!("{row} .digest")), "unknown");
    // Once more: nothing moves, the digests are compared (each gives the
    // other `full`). A refused B's zeus and B A's (audit below): each holds
    // a fact in what it gives the other that the other lacks, so the
    // digests disagree.
    browser.click_to_page(&format!("{row} .sync-one"));
    assert!(browser.text("#flash").contains(" ok: 0 facts in, 0 out"));
    assert_eq!(browser.text(&format!("{row} .digest")), "disagree");
    assert!(
        a.ok(&["list", "--as", "alice"])
            .stdout
            .contains("from the other node")
    );
    browser.shot(&shots, "4-peers-synced");

    // The link column: B is dialled at its address; a relay link, and a
    // peer reached through it, say so (docs/design.md §7.11).
    assert_eq!(browser.text(&format!("{row} .link")), "direct");
    let (relay, far) = (id(&Home::new()), id(&Home::new()));
    a.ok(&[
        "peers",
        "add",
        &relay,
        "127.0.0.1:9",
        "--policy",
        "none",
        "--relay",
    ]);
    a.ok(&["peers", "add", &far, "--policy", "full", "--via", &relay]);
    browser.goto(&format!("{}/peers", console.base));
    assert_eq!(
        browser.text(&format!("tr[data-peer=\"{relay}\"] .link .relay")),
        "relay link"
    );
    assert_eq!(
        browser.text(&format!("tr[data-peer=\"{far}\"] .link .via")),
        format!("via {}", &relay[..12])
    );
    browser.shot(&shots, "4-peers-relay");
    a.ok(&["peers", "remove", &far]);
    a.ok(&["peers", "remove", &relay]);
    browser.goto(&format!("{}/peers", console.base));

    // An invite: the code is on the page.
    browser.type_into("#invite-form input[name=addrs]", "127.0.0.1:4747");
    browser.click("#create-invite");
    let code = browser.text("#invite-code");
    assert!(code.starts_with("amos1-"), "{code}");
    browser.shot(&shots, "5-peers-invite");

    browser.goto(&format!("{}/org", console.base));
    assert!(browser.text("#agents").contains("alice"));
    browser.shot(&shots, "6-org");
    browser.goto(&format!("{}/audit", console.base));
    let refused = browser.text("#refused");
    assert!(
        refused.contains("org_origin_conflict") && refused.contains("team:zeus"),
        "{refused}"
    );
    browser.shot(&shots, "7-audit");

    // Live: A serves with its console; B dials A from its own process; the
    // open page hears of the session over /events without a reload.
    let (serving, serve_url) = serve_with_console(a.path());
    let a_addr = serving.addr.clone();
    b.ok(&["peers", "add", &id(&a), &a_addr, "--policy", "full"]);
    browser.goto(&serve_url);
    browser.goto(&format!(
        "{}/peers",
        serve_url.split("/?token=").next().unwrap()
    ));
    let facts = format!("{row} .facts");
    // The figures of the session the other console process ran, from the
    // peer's row in the store.
    let last = &a.json(&["peers", "list"])["peers"][0]["last_session"];
    assert_eq!(
        browser.text(&facts),
        format!("{} / {}", last["facts_in"], last["facts_out"]),
        "the last completed session, whichever process ran it"
    );
    assert_eq!(
        (&last["facts_in"], &last["facts_out"]),
        (&json!(0), &json!(0)),
        "the second sync moved nothing"
    );
    // Watch the cell, then wait until the stream is open.
    browser.script_async(
        "var done = arguments[arguments.length - 1];
         var row = document.querySelector(arguments[0]);
         var cell = row.querySelector('.facts');
         window.__seen = [];
         new MutationObserver(function () { window.__seen.push(cell.textContent); })
           .observe(cell, {childList: true, characterData: true, subtree: true});
         (function wait() { if (document.body.dataset.live === 'on') done(true); else setTimeout(wait, 20); })();",
        json!([row]),
    );
    // Only now something new on B for a session to bring: B's serving
    // process may push it to A before `sync now` runs, and a session that
    // ended before the page listened would never be heard. Every session
    // A takes part in runs in A's serving process, which feeds the page.
    b.add("zed", "later from the other node", &["global"]);
    let (code, outcomes) = b.sync(&["now", &id(&a)]);
    assert_eq!(code, 0, "{outcomes:?}");
    let changed = browser.script_async(
        "var done = arguments[arguments.length - 1];
         (function wait() {
           var hit = window.__seen.find(function (t) { return t.indexOf(' / ') > 0 && t.indexOf('0 ') !== 0; });
           if (hit) done(hit); else setTimeout(wait, 20);
         })();",
        json!([]),
    );
    // The page heard B's session live (figures that are not "0 / …"), and
    // settles on what A's store holds for its last session with B: a
    // session that moved facts may be followed at once by an idle one,
    // which the row then shows.
    // Bounded: each round is one CLI process and one WebDriver call.
    assert!(
        changed.as_str().is_some_and(|t| t.contains(" / ")),
        "{changed}"
    );
    let (mut shown, mut want) = (String::new(), String::new());
    for _ in 0..100 {
        let last = &a.json(&["peers", "list"])["peers"][0]["last_session"];
        want = format!("{} / {}", last["facts_in"], last["facts_out"]);
        shown = browser.text(&format!("{row} .facts"));
        if shown == want {
            break;
        }
    }
    assert_eq!(shown, want, "the live row shows A's last session with B");
    assert_eq!(browser.text(&format!("{row} .result")), "ok");
    browser.shot(&shots, "8-peers-live");
    drop(serving);

    // The dashboard, switched to Japanese by its link and back: alice's
    // figures are hers (what the CLI lists), the chart is drawn.
    a.ok(&["search", "launch", "--as", "alice"]);
    browser.goto(&format!("{}/?as=alice", console.base));
    assert_eq!(
        browser.script("return document.documentElement.lang;"),
        json!("en")
    );
    let listed = cli_list(&a, "alice").len();
    assert_eq!(browser.text("#visible"), listed.to_string());
    assert_eq!(
        browser.script("return document.querySelectorAll('#activity rect.bar').length;"),
        json!(14 * 2 + 2),
        "a pair of bars a day, and the legend's two"
    );
    assert!(!browser.find_all("#most-recalled tbody tr").is_empty());
    browser.shot(&shots, "9-dashboard-en");
    browser.click_to_page("#langs a[data-lang=ja]");
    assert_eq!(
        browser.script("return document.documentElement.lang;"),
        json!("ja")
    );
    assert_eq!(browser.text("#visible"), listed.to_string());
    assert!(browser.text("h1").contains("ダッシュボード"));
    browser.shot(&shots, "9-dashboard-ja");
    // The pack preview: one of alice's memories in, one over budget.
    browser.goto(&format!(
        "{}/pack?as=alice&q=launch&budget=22",
        console.base
    ));
    assert_eq!(
        browser.script("return document.documentElement.lang;"),
        json!("ja"),
        "kept"
    );
    assert!(
        !browser
            .find_all("#pack tr[data-decision=over-budget]")
            .is_empty()
    );
    browser.shot(&shots, "10-pack-ja");
    browser.click_to_page("#langs a[data-lang=en]");
    assert_eq!(
        browser.script("return document.documentElement.lang;"),
        json!("en")
    );
    assert!(browser.text("#pack").contains("over budget"));
    browser.shot(&shots, "10-pack-en");
    // The new views in the browser: a supersession and a link, the
    // timeline, the graph (a memory drawn is a link to its page), and the
    // memory page's actions (pin, then unpin, by the form's buttons).
    let team = a.json(&["list", "--as", "alice", "--limit", "100"])["memories"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["content"] == "launch window opens tuesday")
        .expect("the team memory")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let next = a.json(&[
        "supersede",
        &team,
        "launch window opens wednesday",
        "--as",
        "alice",
    ])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    a.ok(&["link", &html_id, &next, "--as", "alice"]);
    browser.goto(&format!("{}/timeline?as=alice&lang=en", console.base));
    assert!(
        !browser
            .find_all(&format!(
                "#timeline tr[data-id=\"{team}\"][data-event=superseded]"
            ))
            .is_empty()
    );
    browser.shot(&shots, "12-timeline");
    browser.goto(&format!("{}/graph?as=alice&around={next}", console.base));
    assert_eq!(
        browser.find_all("#graph a.node").len(),
        3,
        "next, the memory it replaces, the one linked to it"
    );
    browser.shot(&shots, "13-graph");
    browser.click_to_page(&format!("#graph a.node[data-id=\"{team}\"]"));
    assert!(
        browser
            .current_url()
            .contains(&format!("/memories/{team}?as=alice"))
    );
    assert!(browser.text("#superseded-by").contains("wednesday"));
    assert!(browser.text("#signatures").contains("verified"));
    browser.shot(&shots, "14-provenance");
    browser.click_to_page("#pin");
    assert_eq!(a.json(&["get", &team, "--as", "alice"])["pinned"], true);
    browser.click_to_page("#unpin");
    assert_eq!(a.json(&["get", &team, "--as", "alice"])["pinned"], false);
    browser.click_to_page("#helpful");
    assert!(
        browser
            .current_url()
            .contains(&format!("/memories/{team}?as=alice"))
    );

    // Every page (the one list the HTTP test iterates too) in both
    // languages: its main element and what it is about are there, no key
    // the catalogue lacks; a screenshot of each.
    for lang in ["en", "ja"] {
        for (name, page, about) in pages(&html_id) {
            let sep = if page.contains('?') { '&' } else { '?' };
            browser.goto(&format!("{}{page}{sep}lang={lang}", console.base));
            assert_eq!(
                browser.script("return document.documentElement.lang;"),
                json!(lang),
                "{page}"
            );
            assert_eq!(browser.find_all("main").len(), 1, "{page}: its main");
            assert!(
                !browser.find_all(&format!("main {about}")).is_empty(),
                "{page} in {lang}: no {about}"
            );
            assert_eq!(
                browser.script("return document.body.innerText.indexOf('\\u27e6');"),
                json!(-1),
                "{page} in {lang}: an untranslated key"
            );
            browser.shot(&shots, &format!("11-{name}-{lang}"));
        }
    }
    eprintln!("console screenshots in {}", shots.display());
}

/// A child process killed when dropped, and the address it serves on.
struct Serving {
    child: Child,
    addr: String,
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plain HTTP server on a free port of 127.0.0.1, on a thread: it answers
/// `ok` to everything and hands over the head of the first request that
/// has one.
fn other_port() -> (u16, std::sync::mpsc::Receiver<String>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            if head.is_empty() {
                continue;
            }
            let _ = conn.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
            );
            let _ = tx.send(String::from_utf8_lossy(&head).into_owned());
        }
    });
    (port, rx)
}

/// `amos serve --no-mdns --listen 127.0.0.1:PORT --console 127.0.0.1:0` on
/// `home`, and the console URL it printed.
fn serve_with_console(home: &Path) -> (Serving, String) {
    let addr = format!("127.0.0.1:{}", crate::common::server::free_port());
    let mut child = Command::new(crate::common::amos_bin())
        .env("AMOS_HOME", home)
        .env_remove("AMOS_AGENT")
        .env("AMOS_LOG", "warn")
        // No push: A would otherwise push B's own fact back after B's
        // session (when its seq watcher sees the write before the session
        // reports what B sent), and the page could show that later, empty
        // session first; the live update under test is B's session.
        .args([
            "serve",
            "--no-mdns",
            "--no-push",
            "--listen",
            &addr,
            "--console",
            "127.0.0.1:0",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn amos serve --console");
    let stdout = child.stdout.take().unwrap();
    let serving = Serving { child, addr };
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("the console line");
    let url = line
        .trim()
        .strip_prefix("console: ")
        .unwrap_or_else(|| panic!("serve printed {line:?}"))
        .to_owned();
    (serving, url)
}
