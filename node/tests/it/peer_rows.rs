//! What a peer's row records of its sessions, between two real `amos serve
//! --no-mdns` processes on 127.0.0.1: whether the scoped digests agree (at
//! the end of every session that moved no fact each side sends its digest
//! over the scopes it gives the other, and the other records whether its
//! own over the same scopes is equal; a session that moved facts leaves the
//! last comparison), and the last completed session's figures — in `amos
//! peers list` and on the console's `/peers` page, whichever process ran
//! the session and whichever side dialled.

use crate::common::console::Console;
use crate::common::server::{Server, free_port, id, pair_serving};
use crate::common::{Home, lose_one};
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

    // b loses one of a's memories behind its back (no watermark shows it).
    // The next session moves nothing, and both digests over apollo — the
    // scopes each gives the other — disagree; b's console shows it.
    lose_one(&b, "apollo note 1");
    let (code, peers) = b.sync(&["now"]);
    assert_eq!(code, 0, "{peers:?}\n{}", server_a.log());
    assert_eq!(peers[0]["digest_agree"], false, "{peers:?}");
    let on_b = digest_of(&b, &ida);
    assert_eq!(on_b["agree"], false, "{on_b}");
    assert_eq!(on_b["scopes"], "team:apollo");
    assert!(
        on_b["my_facts"].as_u64() < on_b["peer_facts"].as_u64(),
        "b holds fewer apollo facts than a offers: {on_b}"
    );
    assert_eq!(digest_of(&a, &idb)["agree"], false);
    let r = row(&console_b, &ida);
    assert!(r.contains("class=\"digest digest-disagree\""), "{r}");
    assert!(r.contains("scopes team:apollo"), "what was compared: {r}");
    // b's next session repairs (its digests disagree; docs/design.md
    // §7.9) and heals the loss; the one after agrees.
    b.ok(&["sync", "now"]);
    assert_eq!(a.digest("team:apollo"), b.digest("team:apollo"));
    let text = b.ok(&["sync", "now"]).stdout;
    assert!(text.contains("digests agree"), "{text}");

    // b narrows what it takes from a to `global`: it drops and refuses a's
    // apollo facts, which a still offers. Sessions until one moves
    // nothing: each side's digest now names a scope the other does not
    // give it (a's apollo, b's global), so neither compares — that would
    // reveal what it holds outside what it gives (docs/design.md §7.3) —
    // and neither row holds a comparison, nor does a repair follow.
    let repaired = repair_ms(&b);
    assert!(repaired.is_some());
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
    assert_eq!(peers[0]["facts_in"], 0, "{peers:?}");
    assert!(peers[0].get("digest_agree").is_none(), "{peers:?}");
    assert!(digest_of(&a, &idb).is_null() && digest_of(&b, &ida).is_null());
    assert_ne!(a.digest("team:apollo"), b.digest("team:apollo"));
    let r = row(&console_b, &ida);
    assert!(r.contains("class=\"digest digest-unknown\""), "{r}");
    let text = b.ok(&["sync", "now"]).stdout;
    assert!(!text.contains("digests"), "{text}");
    assert_eq!(repair_ms(&b), repaired, "no repair on b since the loss's");
}

/// When `h` last tried a repair with its one peer (`None`: never).
fn repair_ms(h: &Home) -> Option<i64> {
    let conn = rusqlite::Connection::open(h.path().join("amos.db")).unwrap();
    conn.query_row("SELECT repair_ms FROM peers", [], |r| r.get(0))
        .unwrap()
}

/// Issue 37, item 3. A peer given `team:apollo` sets its own policy for us
/// to `team:apollo,team:secret`, so its session digest names
/// `team:secret`. Were ours computed over the scopes it names, whether we
/// hold anything under `team:secret` (here: nothing, or the team, its
/// member and two memories) would decide whether the digests
/// agree, and a disagreement our next session's repair (more bytes, a
/// repair round the peer sees). Between two real `amos serve --no-mdns`
/// processes, with the peer dialling us (our `serve` compares) and us
/// dialling it (our `sync now` compares): all the peer sees, and our own
/// row, are the same whether we hold secret memories or not, and no repair
/// is tried.
#[test]
fn a_peer_naming_a_scope_we_never_gave_it_learns_nothing_of_what_we_hold_there() {
    let mut seen = Vec::new();
    for secrets in [0, 2] {
        let victim = Home::apollo();
        if secrets > 0 {
            victim.ok(&["team", "create", "secret"]);
            victim.ok(&["agent", "add", "sam", "--team", "secret"]);
        }
        for i in 0..3 {
            victim.add("alice", &format!("apollo note {i}"), &["team:apollo"]);
        }
        for i in 0..secrets {
            victim.add("sam", &format!("secret note {i}"), &["team:secret"]);
        }
        let peer = Home::new();
        let start = |h: &Home| {
            let addr = format!("127.0.0.1:{}", free_port());
            Server::start_with(h.path(), None, &addr, &["--no-mdns", "--no-push"])
        };
        let (server_v, server_p) = (start(&victim), start(&peer));
        let (idv, idp) = (id(&victim), id(&peer));
        victim.ok(&[
            "peers",
            "add",
            &idp,
            &server_p.addr,
            "--policy",
            "team:apollo",
        ]);
        let claim = "team:apollo,team:secret";
        peer.ok(&["peers", "add", &idv, &server_v.addr, "--policy", claim]);

        // The peer dials until a session moves nothing (its digest crosses),
        // then twice more: the session after a disagreement would repair.
        let mut sessions = Vec::new();
        for _ in 0..4 {
            let (code, p) = peer.sync(&["now"]);
            assert_eq!(code, 0, "{p:?}\n{}", server_v.log());
            if p[0]["facts_in"] == 0 && p[0]["facts_out"] == 0 {
                break;
            }
        }
        // What the peer sees of a session it dials: whether the digests
        // agreed, and the session's facts and bytes each way.
        let seen_by_peer = |p: &[Value]| {
            let s = peer_row(&peer, &idv)["last_session"].clone();
            (
                p[0]["digest_agree"].clone(),
                s["facts_in"].clone(),
                s["facts_out"].clone(),
                s["bytes_in"].clone(),
                s["bytes_out"].clone(),
            )
        };
        for _ in 0..2 {
            let (code, p) = peer.sync(&["now"]);
            assert_eq!(code, 0, "{p:?}\n{}", server_v.log());
            sessions.push(seen_by_peer(&p));
        }
        let served = digest_of(&victim, &idp);
        // We dial the peer: our `sync now` compares its digest.
        let (code, p) = victim.sync(&["now"]);
        assert_eq!(code, 0, "{p:?}\n{}", server_p.log());
        let dialled = (p[0]["digest_agree"].clone(), digest_of(&victim, &idp));
        let (code, p) = peer.sync(&["now"]);
        assert_eq!(code, 0, "{p:?}");
        sessions.push(seen_by_peer(&p));

        let repairs = (repair_ms(&victim), repair_ms(&peer));
        let peer_own = digest_of(&peer, &idv)["agree"].clone();
        seen.push((served, dialled, sessions, repairs, peer_own));
    }
    assert_eq!(
        seen[0], seen[1],
        "what the peer sees, and our rows, do not depend on team:secret"
    );
    let (served, dialled, _, repairs, peer_own) = &seen[1];
    assert!(served.is_null(), "not compared, nothing recorded: {served}");
    assert!(dialled.0.is_null() && dialled.1.is_null(), "{dialled:?}");
    assert_eq!(*repairs, (None, None), "no repair on either side");
    // The peer's own comparison (over apollo, which we give it) agrees.
    assert_eq!(*peer_own, true);
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
