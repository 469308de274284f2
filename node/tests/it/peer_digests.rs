//! Whether the scoped digests agree, between two real `amos serve
//! --no-mdns` processes on 127.0.0.1: at the end of every session each side
//! sends its digest over the scopes it gives the other, and the other
//! records whether its own over the same scopes is equal — in `amos peers
//! list` and on the console's `/peers` page, whichever side dialled.

use crate::common::Home;
use crate::common::console::Console;
use crate::common::server::{Server, id, pair_serving};
use serde_json::Value;

/// The digest comparison recorded on `h` for its peer `peer`.
fn digest_of(h: &Home, peer: &str) -> Value {
    let peers = h.json(&["peers", "list"])["peers"].clone();
    peers
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["node_id"] == peer)
        .unwrap_or_else(|| panic!("{peer} is not a peer: {peers}"))["digest"]
        .clone()
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

#[test]
fn peers_record_whether_their_digests_agree_and_the_console_shows_it() {
    let a = Home::apollo();
    let b = Home::new();
    let server_a = Server::start(a.path());
    let server_b = Server::start(b.path());
    let (ida, idb) = (id(&a), id(&b));
    pair_serving(&a, &b, &server_a, &server_b, "team:apollo");
    for i in 0..3 {
        a.add("alice", &format!("digest note {i}"), &["team:apollo"]);
    }
    a.add("alice", "digest private note", &[]);
    assert!(
        digest_of(&a, &idb).is_null(),
        "never compared before a session"
    );

    // b dials a: the session converges, both sides compare and agree.
    let (code, peers) = b.sync(&["now"]);
    assert_eq!(code, 0, "{peers:?}\n{}", server_a.log());
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
    // apollo facts, which a still offers. a dials b (b's serve accepts):
    // b's digest over apollo now lacks them — disagree on b; a compares
    // b's digest over `global`, where both hold nothing — agree on a.
    b.ok(&["peers", "policy", &ida, "global"]);
    let (code, peers) = a.sync(&["now", &idb]);
    assert_eq!(code, 0, "{peers:?}\n{}", server_b.log());
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
    // The text of `amos sync now` says it too.
    let text = b.ok(&["sync", "now"]).stdout;
    assert!(text.contains("digests disagree"), "{text}");
}
