//! What a peer's row records of its sessions, between two real `amos serve
//! --no-mdns` processes on 127.0.0.1: whether the scoped digests agree (at
//! the end of every session that moved no fact each side sends its digest
//! over the scopes it gives the other, and the other records whether its
//! own over the same scopes is equal; a session that moved facts leaves the
//! last comparison), and the last completed session's figures — in `amos
//! peers list` and on the console's `/peers` page, whichever process ran
//! the session and whichever side dialled.

use crate::common::Home;
use crate::common::console::Console;
use crate::common::server::{Server, free_port, id, pair_serving};
use serde_json::Value;

/// `peer`'s row in `amos peers list` on `h`.
fn peer_row(h: &Home, peer: &str) -> Value {
    let peers = h.json(&["peers", "list"])["peers"].clone();
    peers
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["node_id"] == peer)
        .unwrap_or_else(|| panic!("{peer} is not a peer: {peers}"))
        .clone()
}

/// The digest comparison recorded on `h` for its peer `peer`.
fn digest_of(h: &Home, peer: &str) -> Value {
    peer_row(h, peer)["digest"].clone()
}

/// The `/peers` row of `peer` on a console.
fn row(c: &Console, peer: &str) -> String {
    let page = c.get("/peers").body;
    let at = page
        .find(&format!("data-peer=\"{peer}\""))
        .unwrap_or_else(|| panic!("no row for {peer}: {page}"));
    let end = page[at..].find("</tr>").unwrap();
    page[at..at + end].to_owned()
}

/// Node a (team apollo, agent alice) and node b, both serving, peers of
/// each other with `team:apollo`; alice wrote `notes` apollo memories on a.
struct Pair {
    a: Home,
    b: Home,
    server_a: Server,
    server_b: Server,
    ida: String,
    idb: String,
}

impl Pair {
    fn start(notes: usize) -> Pair {
        let a = Home::apollo();
        let b = Home::new();
        // No push on change: each row must be the session this test ran.
        let start = |h: &Home| {
            let addr = format!("127.0.0.1:{}", free_port());
            Server::start_with(h.path(), None, &addr, &["--no-mdns", "--no-push"])
        };
        let server_a = start(&a);
        let server_b = start(&b);
        let (ida, idb) = (id(&a), id(&b));
        pair_serving(&a, &b, &server_a, &server_b, "team:apollo");
        for i in 0..notes {
            a.add("alice", &format!("apollo note {i}"), &["team:apollo"]);
        }
        Pair {
            a,
            b,
            server_a,
            server_b,
            ida,
            idb,
        }
    }
}

#[test]
fn peers_record_whether_their_digests_agree_and_the_console_shows_it() {
    let Pair {
        a,
        b,
        server_a,
        server_b,
        ida,
        idb,
    } = Pair::start(3);
    a.add("alice", "digest private note", &[]);
    assert!(
        digest_of(&a, &idb).is_null(),
        "never compared before a session"
    );

    // b dials a: the session converges; facts moved, so neither side
    // compares digests.
    let (code, peers) = b.sync(&["now"]);
    assert_eq!(code, 0, "{peers:?}\n{}", server_a.log());
    assert!(peers[0]["facts_in"].as_u64().unwrap() > 0, "{peers:?}");
    assert!(peers[0].get("digest_agree").is_none(), "{peers:?}");
    assert!(digest_of(&a, &idb).is_null() && digest_of(&b, &ida).is_null());
    // The next session moves nothing: both sides compare and agree.
    let (code, peers) = b.sync(&["now"]);
    assert_eq!(code, 0, "{peers:?}\n{}", server_a.log());
    assert_eq!(peers[0]["facts_in"], 0, "{peers:?}");
    assert_eq!(peers[0]["digest_agree"], true, "{peers:?}");
    assert_eq!(a.digest("team:apollo"), b.digest("team:apollo"));
    for (h, peer) in [(&a, &idb), (&b, &ida)] {
        let d = digest_of(h, peer);
        assert_eq!(d["agree"], true, "{d}");
        assert_eq!(d["scopes"], "team:apollo");
        assert_eq!(d["peer_facts"], d["my_facts"]);
        assert!(d["at_ms"].as_u64().unwrap() > 0);
    }
    // The private note is not in what a offers b: the count b saw is the
    // one `amos digest --scope team:apollo` gives on a.
    let on_a = a.json(&["digest", "--scope", "team:apollo"]);
    assert_eq!(digest_of(&b, &ida)["peer_facts"], on_a["facts"]);
    let console_b = Console::start(b.path());
    let r = row(&console_b, &ida);
    assert!(r.contains("class=\"digest digest-agree\""), "{r}");

    // b narrows what it takes from a to `global`: it drops and refuses a's
    // apollo facts, which a still offers. a dials b (b's serve accepts)
    // until a session moves nothing: b's digest over apollo now lacks them
    // — disagree on b; a compares b's digest over `global`, where both hold
    // nothing — agree on a.
    b.ok(&["peers", "policy", &ida, "global"]);
    let mut peers = Vec::new();
    for _ in 0..3 {
        let (code, p) = a.sync(&["now", &idb]);
        assert_eq!(code, 0, "{p:?}\n{}", server_b.log());
        peers = p;
        if peers[0]["facts_in"] == 0 && peers[0]["facts_out"] == 0 {
            break;
        }
    }
    assert_eq!(peers[0]["digest_agree"], true, "a's own comparison");
    let on_b = digest_of(&b, &ida);
    assert_eq!(on_b["agree"], false, "{on_b}");
    assert_eq!(on_b["scopes"], "team:apollo");
    assert!(
        on_b["my_facts"].as_u64() < on_b["peer_facts"].as_u64(),
        "b holds fewer apollo facts than a offers: {on_b}"
    );
    assert_ne!(a.digest("team:apollo"), b.digest("team:apollo"));
    let on_a = digest_of(&a, &idb);
    assert_eq!(
        (&on_a["agree"], &on_a["scopes"]),
        (&Value::from(true), &Value::from("global"))
    );
    let r = row(&console_b, &ida);
    assert!(r.contains("class=\"digest digest-disagree\""), "{r}");
    assert!(r.contains("scopes team:apollo"), "what was compared: {r}");
    let console_a = Console::start(a.path());
    assert!(row(&console_a, &idb).contains("digest-agree"));
    // b's next session repairs (its digests disagree; docs/design.md §7.9):
    // it cannot help, b refuses what a offers. Once per disagreement: the
    // session after compares again, and the text of `amos sync now` says
    // so.
    b.ok(&["sync", "now"]);
    assert!(b.json(&["peers", "list"])["peers"][0]["last_session"].is_object());
    let text = b.ok(&["sync", "now"]).stdout;
    assert!(text.contains("digests disagree"), "{text}");
}

/// A session's figures (facts and bytes each way, when, how long) land in
/// the peer's row on both sides, whichever process ran it: a standalone
/// `amos console` shows what `amos serve` accepted and what `amos sync`
/// dialled, not only its own sessions.
#[test]
fn a_standalone_console_shows_the_sessions_other_processes_ran() {
    let Pair {
        a,
        b,
        server_a,
        server_b,
        ida,
        idb,
    } = Pair::start(4);
    let session = |h: &Home, peer: &str| peer_row(h, peer)["last_session"].clone();
    assert!(session(&a, &idb).is_null() && session(&b, &ida).is_null());
    let console_a = Console::start(a.path());
    assert!(
        row(&console_a, &idb).contains("class=\"facts\" title=\"no session has completed"),
        "{}",
        row(&console_a, &idb)
    );

    // `amos sync now` on b dials a's `amos serve`: both rows are written,
    // b's by the sync process, a's by the serving one.
    let (code, peers) = b.sync(&["now"]);
    assert_eq!(code, 0, "{peers:?}\n{}", server_a.log());
    let (on_b, on_a) = (session(&b, &ida), session(&a, &idb));
    for f in ["facts_in", "facts_out", "bytes_in", "bytes_out"] {
        assert_eq!(on_b[f], peers[0][f], "{f}: b's row is its sync's outcome");
    }
    assert!(on_b["facts_in"].as_u64().unwrap() >= 8, "{on_b}");
    // a's side of the same session, mirrored: what b took in, a sent.
    assert_eq!(on_a["facts_out"], on_b["facts_in"], "{on_a} {on_b}");
    assert_eq!(on_a["facts_in"], on_b["facts_out"]);
    assert_eq!(on_a["bytes_out"], on_b["bytes_in"]);
    assert_eq!(on_a["bytes_in"], on_b["bytes_out"]);
    assert!(on_a["at_ms"].as_u64().unwrap() > 0);
    // a's console process ran no session, yet shows the one serve accepted.
    let r = row(&console_a, &idb);
    let shown = format!(">{} / {}<", on_a["facts_in"], on_a["facts_out"]);
    assert!(r.contains(&shown), "{shown} in {r}");
    let bytes = format!(">{} / {}<", on_a["bytes_in"], on_a["bytes_out"]);
    assert!(r.contains(&bytes), "{bytes} in {r}");

    // A later idle session from the other side replaces the figures.
    let (code, peers) = a.sync(&["now", &idb]);
    assert_eq!(code, 0, "{peers:?}\n{}", server_b.log());
    let idle = session(&b, &ida);
    assert_eq!(
        (&idle["facts_in"], &idle["facts_out"]),
        (&0.into(), &0.into())
    );
    assert!(idle["at_ms"].as_u64() >= on_b["at_ms"].as_u64());
    let console_b = Console::start(b.path());
    assert!(row(&console_b, &ida).contains(">0 / 0<"));
}
