//! The memory page's inline actions over HTTP against a real console:
//! feedback, supersede and pin/unpin (edit, share and forget are in
//! `console.rs`) are each the CLI's node API call as the form's agent,
//! answered by a redirect back to the page; a forged or missing CSRF token
//! changes nothing; an agent that cannot see the memory gets exactly the
//! missing memory's 404 and changes nothing; bad input is 400.

use crate::common::Home;
use crate::common::console::{Answer, Console};

/// The local-only and replicated state one memory holds: its
/// reinforcement (feedback) and pinned flag, read from the store.
fn state(h: &Home, text: &str) -> (f64, i64) {
    let conn = rusqlite::Connection::open(h.path().join("amos.db")).unwrap();
    conn.query_row(
        "SELECT reinforcement, pinned FROM memories WHERE content = ?1",
        [text],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .unwrap()
}

/// Everything an action could move: the replicated state and the memory's
/// own local state.
fn snapshot(h: &Home, text: &str) -> (serde_json::Value, (f64, i64)) {
    (h.fingerprint(), state(h, text))
}

fn back_to(r: &Answer, id: &str, agent: &str) {
    assert_eq!(r.status, 303, "{r:?}");
    assert_eq!(
        r.header("location"),
        Some(format!("/memories/{id}?as={agent}").as_str())
    );
}

const TEAM: &str = "the launch window opens tuesday";
const CAROLS: &str = "carol plans the launch party";

/// alice and bob in apollo; a team memory of alice's; carol's private one.
fn org() -> (Home, String, String) {
    let h = Home::apollo();
    h.ok(&["agent", "add", "bob", "--team", "apollo"]);
    h.ok(&["agent", "add", "carol"]);
    let team = h.add("alice", TEAM, &["team:apollo"]);
    let carols = h.add("carol", CAROLS, &[]);
    (h, team, carols)
}

#[test]
fn feedback_supersede_and_pin_are_the_cli_calls_and_come_back_to_the_page() {
    let (h, team, _) = org();
    let c = Console::start(h.path());
    // Feedback, from any agent that sees it: local reinforcement moves,
    // nothing replicated does.
    let (fp, (r0, _)) = snapshot(&h, TEAM);
    back_to(
        &c.post(
            &format!("/memories/{team}/feedback"),
            &[("as", "bob"), ("verdict", "helpful")],
        ),
        &team,
        "bob",
    );
    let (r1, _) = state(&h, TEAM);
    assert!(r1 > r0, "helpful raised it: {r0} → {r1}");
    assert_eq!(h.fingerprint(), fp, "local-only");
    back_to(
        &c.post(
            &format!("/memories/{team}/feedback"),
            &[("as", "bob"), ("verdict", "unhelpful")],
        ),
        &team,
        "bob",
    );
    assert!(state(&h, TEAM).0 < r1, "unhelpful lowered it");

    // Pin and unpin (the owner): a signed change the CLI reads.
    back_to(
        &c.post(
            &format!("/memories/{team}/pin"),
            &[("as", "alice"), ("action", "pin")],
        ),
        &team,
        "alice",
    );
    assert_eq!(h.json(&["get", &team, "--as", "bob"])["pinned"], true);
    let page = c.get(&format!("/memories/{team}?as=alice"));
    assert!(page.body.contains("data-pinned=\"true\""));
    assert!(page.body.contains("id=\"unpin\""), "the form offers unpin");
    back_to(
        &c.post(
            &format!("/memories/{team}/pin"),
            &[("as", "alice"), ("action", "unpin")],
        ),
        &team,
        "alice",
    );
    assert_eq!(h.json(&["get", &team, "--as", "alice"])["pinned"], false);
    // bob sees it but does not own it: refused, nothing changed.
    let before = snapshot(&h, TEAM);
    let r = c.post(
        &format!("/memories/{team}/pin"),
        &[("as", "bob"), ("action", "pin")],
    );
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(snapshot(&h, TEAM), before);

    // Supersede, by bob: a new memory of his (private: he does not own
    // the old one) replaces alice's; his view of her page names it; his
    // timeline agrees.
    let r = c.post(
        &format!("/memories/{team}/supersede"),
        &[
            ("as", "bob"),
            ("text", "the launch window opens wednesday"),
            ("valid_from", ""),
        ],
    );
    back_to(&r, &team, "bob");
    let events = h.json(&["timeline", "--as", "bob"])["events"].clone();
    let by = events
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event"] == "superseded" && e["memory"] == team.as_str())
        .unwrap_or_else(|| panic!("{events}"))["by"]
        .as_str()
        .unwrap()
        .to_owned();
    let new = h.json(&["get", &by, "--as", "bob"]);
    assert_eq!(new["owner"], "bob");
    assert_eq!(new["content"], "the launch window opens wednesday");
    let page = c.get(&format!("/memories/{team}?as=bob")).body;
    let cell = &page[page.find("id=\"superseded-by\"").unwrap()..];
    assert!(cell[..cell.find("</td>").unwrap()].contains(&by));
    // alice cannot see bob's private successor: her page does not name it.
    let page = c.get(&format!("/memories/{team}?as=alice")).body;
    assert!(!page.contains(&by) && !page.contains("wednesday"));
}

#[test]
fn a_forged_or_missing_csrf_token_changes_nothing() {
    let (h, team, _) = org();
    let c = Console::start(h.path());
    let cookie = c.cookie();
    let actions: [(&str, &[(&str, &str)]); 3] = [
        ("feedback", &[("as", "alice"), ("verdict", "helpful")]),
        ("pin", &[("as", "alice"), ("action", "pin")]),
        (
            "supersede",
            &[("as", "alice"), ("text", "forged successor")],
        ),
    ];
    let before = snapshot(&h, TEAM);
    for (action, form) in actions {
        let path = format!("/memories/{team}/{action}");
        let mut forged: Vec<(&str, &str)> = form.to_vec();
        forged.push(("csrf", "0000"));
        for r in [
            c.post_with(&path, form, &[("Cookie", &cookie)]),
            c.post_with(&path, &forged, &[("Cookie", &cookie)]),
            // Without a session at all.
            c.post_with(&path, &forged, &[]),
        ] {
            assert!(r.status == 403 || r.status == 401, "{action}: {r:?}");
        }
        assert_eq!(snapshot(&h, TEAM), before, "{action} changed something");
    }
    assert!(!h.ok(&["list", "--as", "alice"]).stdout.contains("forged"));
}

/// An agent that cannot see the memory gets the missing memory's 404 for
/// every action, word for word, and nothing changes.
#[test]
fn an_agent_that_cannot_see_the_memory_gets_404_and_changes_nothing() {
    let (h, _, carols) = org();
    let c = Console::start(h.path());
    let missing = "01a2333b-3a25-7244-8e30-373782ecb05e";
    let before = snapshot(&h, CAROLS);
    for (action, form) in [
        ("feedback", vec![("as", "alice"), ("verdict", "helpful")]),
        ("pin", vec![("as", "alice"), ("action", "pin")]),
        (
            "supersede",
            vec![("as", "alice"), ("text", "alice replaces carol's")],
        ),
    ] {
        let hidden = c.post(&format!("/memories/{carols}/{action}"), &form);
        let gone = c.post(&format!("/memories/{missing}/{action}"), &form);
        assert_eq!(hidden.status, 404, "{action}: {hidden:?}");
        assert_eq!(gone.status, 404, "{action}");
        assert_eq!(
            hidden.body.replace(&carols, "ID"),
            gone.body.replace(missing, "ID"),
            "{action}: a hidden memory reads as a missing one"
        );
        assert!(!hidden.body.contains("party"));
        assert_eq!(snapshot(&h, CAROLS), before, "{action}");
    }
}

#[test]
fn bad_input_to_the_actions_is_400_and_changes_nothing() {
    let (h, team, _) = org();
    let c = Console::start(h.path());
    let before = snapshot(&h, TEAM);
    for (action, form) in [
        ("feedback", vec![("as", "alice"), ("verdict", "great")]),
        ("feedback", vec![("verdict", "helpful")]),
        ("feedback", vec![("as", "mallory"), ("verdict", "helpful")]),
        ("pin", vec![("as", "alice"), ("action", "staple")]),
        ("pin", vec![("as", "alice")]),
        ("supersede", vec![("as", "alice"), ("text", "  ")]),
        (
            "supersede",
            vec![("as", "alice"), ("text", "x"), ("valid_from", "someday")],
        ),
        // Before the start of the memory it replaces.
        (
            "supersede",
            vec![("as", "alice"), ("text", "x"), ("valid_from", "1999-01-01")],
        ),
    ] {
        let r = c.post(&format!("/memories/{team}/{action}"), &form);
        assert_eq!(r.status, 400, "{action} {form:?}: {r:?}");
        assert_eq!(snapshot(&h, TEAM), before, "{action} {form:?}");
    }
}
