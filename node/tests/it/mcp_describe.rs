//! `amos mcp` describing itself and the issue-41 tools, as a real client
//! sees them over stdio: every tool's annotations and `outputSchema`, every
//! tool's `structuredContent` valid against its schema (a small JSON-schema
//! check below), memories as resources (`amos://memory/{id}`) behind the
//! gate, parked working contexts across sessions, `memory_changes_since`
//! and `memory_consolidate` — each with its attack: one agent never reads,
//! counts or ranks another's private memory through them.

use serde_json::{Value, json};

use crate::mcp::{Client, TOOLS, team_home};

/// Whether `v` fits `schema` (the subset amos's output schemas use: type,
/// properties, required, additionalProperties false, items, enum, const,
/// minimum); `Err` says where it does not.
fn fits(schema: &Value, v: &Value, at: &str) -> Result<(), String> {
    let fail = |why: String| Err(format!("{at}: {why} (value {v})"));
    if let Some(t) = schema.get("type") {
        let types: Vec<&str> = match t {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => return fail(format!("bad type {t}")),
        };
        let ok = types.iter().any(|t| match *t {
            "object" => v.is_object(),
            "array" => v.is_array(),
            "string" => v.is_string(),
            "number" => v.is_number(),
            "integer" => v.is_i64() || v.is_u64(),
            "boolean" => v.is_boolean(),
            "null" => v.is_null(),
            _ => false,
        });
        if !ok {
            return fail(format!("not of type {t}"));
        }
    }
    if let Some(e) = schema.get("enum").and_then(Value::as_array)
        && !e.contains(v)
    {
        return fail(format!("not one of {e:?}"));
    }
    if let Some(c) = schema.get("const")
        && c != v
    {
        return fail(format!("not {c}"));
    }
    if let (Some(min), Some(n)) = (schema.get("minimum").and_then(Value::as_f64), v.as_f64())
        && n < min
    {
        return fail(format!("below {min}"));
    }
    if let Some(o) = v.as_object() {
        let props = schema.get("properties").and_then(Value::as_object);
        for r in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let r = r.as_str().unwrap_or_default();
            if !o.contains_key(r) {
                return fail(format!("lacks required {r}"));
            }
        }
        for (k, x) in o {
            match props.and_then(|p| p.get(k)) {
                Some(s) => fits(s, x, &format!("{at}.{k}"))?,
                None if schema.get("additionalProperties") == Some(&json!(false)) => {
                    return fail(format!("has {k}, which the schema does not name"));
                }
                None => {}
            }
        }
    }
    if let (Some(items), Some(a)) = (schema.get("items"), v.as_array()) {
        for (i, x) in a.iter().enumerate() {
            fits(items, x, &format!("{at}[{i}]"))?;
        }
    }
    Ok(())
}

#[test]
fn the_schema_check_catches_what_it_should() {
    let s = json!({"type": "object", "properties": {"a": {"type": "integer", "minimum": 0},
        "b": {"type": "array", "items": {"type": "string", "enum": ["x"]}}},
        "required": ["a"], "additionalProperties": false});
    assert!(fits(&s, &json!({"a": 1, "b": ["x"]}), "v").is_ok());
    for bad in [
        json!({}),
        json!({"a": -1}),
        json!({"a": 1.5}),
        json!({"a": 1, "b": ["y"]}),
        json!({"a": 1, "c": 2}),
        json!([]),
    ] {
        assert!(fits(&s, &bad, "v").is_err(), "{bad}");
    }
}

/// The hints each tool must carry: (readOnly, destructive, idempotent).
fn hints(tool: &str) -> (bool, bool, bool) {
    match tool {
        "memory_search"
        | "memory_get"
        | "memory_context_pack"
        | "memory_timeline"
        | "memory_reload_context"
        | "memory_changes_since"
        | "memory_consolidate" => (true, false, true),
        "memory_forget" | "memory_unshare" => (false, true, true),
        "memory_offload_context" => (false, true, false),
        "memory_update" | "memory_share" | "memory_link" => (false, false, true),
        "memory_add" | "memory_feedback" => (false, false, false),
        other => panic!("a tool this test does not know: {other}"),
    }
}

fn id_of(v: &Value) -> String {
    v["id"].as_str().expect("id").to_owned()
}

#[test]
fn every_tool_describes_itself_and_every_result_fits_its_schema() {
    let h = team_home();
    let mut alice = Client::start(&h, "alice");
    let list = alice.request("tools/list", json!({}));
    let tools = list["result"]["tools"].as_array().expect("tools").clone();
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, TOOLS);
    let mut schemas = std::collections::HashMap::new();
    for t in &tools {
        let name = t["name"].as_str().expect("name");
        let a = &t["annotations"];
        let (ro, destructive, idempotent) = hints(name);
        assert_eq!(a["readOnlyHint"], ro, "{name}: {a}");
        assert_eq!(a["destructiveHint"], destructive, "{name}: {a}");
        assert_eq!(a["idempotentHint"], idempotent, "{name}: {a}");
        assert_eq!(a["openWorldHint"], false, "{name}: {a}");
        let out = &t["outputSchema"];
        assert_eq!(out["type"], "object", "{name}: {t}");
        assert!(out["properties"].is_object(), "{name}: {t}");
        schemas.insert(name.to_owned(), out.clone());
    }
    // Every tool called once (or more), each result checked against its
    // own schema.
    let check = |c: &mut Client, tool: &str, args: Value| -> Value {
        let v = c.ok(tool, args);
        if let Err(e) = fits(&schemas[tool], &v, tool) {
            panic!("{tool}: structuredContent does not fit its outputSchema: {e}");
        }
        v
    };
    let a = id_of(&check(
        &mut alice,
        "memory_add",
        json!({"content": "the staging database restarts at 02:00 UTC", "share": ["team:apollo"],
               "tags": ["ops"], "expires": "30d"}),
    ));
    let b = id_of(&check(
        &mut alice,
        "memory_add",
        json!({"content": "the staging database restarts at 02:00 UTC", "share": ["team:apollo"],
               "tags": ["ops"]}),
    ));
    check(
        &mut alice,
        "memory_search",
        json!({"query": "staging database"}),
    );
    check(&mut alice, "memory_get", json!({"id": a}));
    check(
        &mut alice,
        "memory_context_pack",
        json!({"query": "staging", "report": true}),
    );
    check(
        &mut alice,
        "memory_update",
        json!({"id": a, "content": "the staging database restarts at 03:00 UTC"}),
    );
    check(&mut alice, "memory_timeline", json!({}));
    check(
        &mut alice,
        "memory_share",
        json!({"id": a, "scope": "global"}),
    );
    check(
        &mut alice,
        "memory_unshare",
        json!({"id": a, "scope": "global"}),
    );
    check(&mut alice, "memory_link", json!({"a": a, "b": b}));
    check(
        &mut alice,
        "memory_feedback",
        json!({"ids": [a], "helpful": true}),
    );
    check(
        &mut alice,
        "memory_offload_context",
        json!({"name": "staging", "content": "checking the restart time"}),
    );
    check(
        &mut alice,
        "memory_reload_context",
        json!({"name": "staging"}),
    );
    let changes = check(&mut alice, "memory_changes_since", json!({"since": "-1h"}));
    assert!(
        changes["changes"].as_array().is_some_and(|c| c
            .iter()
            .any(|c| c["kind"] == "added" && c["id"] == b.as_str())),
        "{changes}"
    );
    let dup = alice.ok(
        "memory_add",
        json!({"content": "the staging database restarts at 02:00 UTC", "share": ["team:apollo"],
               "tags": ["ops"]}),
    );
    let plan = check(&mut alice, "memory_consolidate", json!({}));
    assert_eq!(
        plan["actions"][0]["id"], dup["id"],
        "the later duplicate merges into the earlier: {plan}"
    );
    check(&mut alice, "memory_forget", json!({"id": b}));
    alice.close();
}

/// The error of `resources/read` of `uri`, which must fail.
fn read_error(c: &mut Client, uri: &str) -> Value {
    let r = c.request("resources/read", json!({"uri": uri}));
    assert!(r.get("result").is_none(), "{uri} should not be read: {r}");
    r["error"].clone()
}

#[test]
fn memories_are_resources_behind_the_gate() {
    let h = team_home();
    let private = h.add("alice", "alice's private salary note", &[]);
    let team = h.add("alice", "the team offsite is in lisbon", &["team:apollo"]);
    let mut bob = Client::start(&h, "bob");
    let mut listed = bob.request("resources/templates/list", json!({}));
    let templates = listed["result"]["resourceTemplates"].take();
    assert_eq!(
        templates[0]["uriTemplate"], "amos://memory/{id}",
        "{templates}"
    );
    let listed = bob.request("resources/list", json!({}));
    let uris: Vec<&str> = listed["result"]["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter_map(|r| r["uri"].as_str())
        .collect();
    assert_eq!(uris, vec![format!("amos://memory/{team}")], "{listed}");
    assert!(!listed.to_string().contains("salary"), "{listed}");

    let read = bob.request(
        "resources/read",
        json!({"uri": format!("amos://memory/{team}")}),
    );
    let contents = &read["result"]["contents"][0];
    assert_eq!(contents["mimeType"], "application/json", "{read}");
    let m: Value = serde_json::from_str(contents["text"].as_str().expect("text")).expect("json");
    assert_eq!(m["content"], "the team offsite is in lisbon");
    assert_eq!(m["id"], team.as_str());

    // alice's private memory reads exactly like one that does not exist.
    let missing = "01a00000-0000-7000-8000-000000000000";
    let invisible = read_error(&mut bob, &format!("amos://memory/{private}"));
    let absent = read_error(&mut bob, &format!("amos://memory/{missing}"));
    assert_eq!(invisible["code"], absent["code"]);
    assert_eq!(
        invisible["message"]
            .as_str()
            .unwrap()
            .replace(&private, "ID"),
        absent["message"].as_str().unwrap().replace(missing, "ID"),
        "an invisible memory must read exactly like a missing one"
    );
    assert!(!invisible.to_string().contains("salary"));
    // Not our scheme: refused, the server carries on.
    read_error(&mut bob, "file:///etc/passwd");

    // eve, in no team, lists nothing.
    let mut eve = Client::start(&h, "eve");
    let listed = eve.request("resources/list", json!({}));
    assert_eq!(listed["result"]["resources"], json!([]), "{listed}");
    for c in [bob, eve] {
        c.close();
    }
}

#[test]
fn a_parked_context_comes_back_next_session_and_to_no_one_else() {
    let h = team_home();
    let mut alice = Client::start(&h, "alice");
    let parked = alice.ok(
        "memory_offload_context",
        json!({"name": "refactor", "content": "halfway through the parser; tests next"}),
    );
    assert_eq!(parked["name"], "refactor");
    alice.close();

    // The next session of the same agent: a new process.
    let mut alice = Client::start(&h, "alice");
    let back = alice.ok("memory_reload_context", json!({}));
    assert_eq!(back["content"], "halfway through the parser; tests next");
    assert_eq!(back["contexts"][0]["name"], "refactor");
    // Parked again: replaced, the old one forgotten.
    let again = alice.ok(
        "memory_offload_context",
        json!({"name": "refactor", "content": "parser done; writing tests"}),
    );
    let back = alice.ok("memory_reload_context", json!({"name": "refactor"}));
    assert_eq!(back["content"], "parser done; writing tests");
    assert_eq!(back["id"], again["id"]);
    assert!(
        alice
            .err("memory_get", json!({"id": parked["id"]}))
            .contains("no such memory")
    );
    // Bounded: too large is refused with one line, and nothing changes.
    let before = h.fingerprint();
    let e = alice.err(
        "memory_offload_context",
        json!({"name": "refactor", "content": "x".repeat(32 * 1024 + 1)}),
    );
    assert!(e.contains("at most 32768"), "{e}");
    assert!(!e.contains('\n'), "{e}");
    for (args, why) in [
        (json!({"name": "bad name", "content": "x"}), "name"),
        (
            json!({"name": "w", "content": "x", "ttl": "2000-01-01T00:00:00Z"}),
            "past",
        ),
        (
            json!({"name": "w", "content": "x", "ttl": "365d"}),
            "90 days",
        ),
        (json!({"name": "w"}), "content"),
    ] {
        let e = alice.err("memory_offload_context", args.clone());
        assert!(e.contains(why), "{args}: {e}");
    }
    assert_eq!(h.fingerprint(), before);

    // bob cannot reload or list alice's context, nor find it by name or
    // by search: the same answer as a name never parked.
    let mut bob = Client::start(&h, "bob");
    let theirs = bob.err("memory_reload_context", json!({"name": "refactor"}));
    let never = bob.err("memory_reload_context", json!({"name": "nothing"}));
    assert_eq!(
        theirs.replace("refactor", "N"),
        never.replace("nothing", "N")
    );
    let newest = bob.err("memory_reload_context", json!({}));
    assert!(
        !newest.contains("refactor") && !newest.contains("parser"),
        "{newest}"
    );
    let hits = bob.ok("memory_search", json!({"query": "parser tests"}));
    assert_eq!(hits["hits"], json!([]), "{hits}");
    // Even once alice shares the memory that holds it with him (he may read
    // it as a memory), it is not his context.
    alice.ok(
        "memory_share",
        json!({"id": again["id"], "scope": "agent:bob"}),
    );
    bob.ok("memory_get", json!({"id": again["id"]}));
    assert_eq!(
        bob.err("memory_reload_context", json!({"name": "refactor"})),
        theirs
    );
    assert_eq!(bob.err("memory_reload_context", json!({})), newest);
    // Parking his own under the same name leaves alice's alone.
    bob.ok(
        "memory_offload_context",
        json!({"name": "refactor", "content": "bob's own notes"}),
    );
    let listed = bob.ok("memory_reload_context", json!({}));
    assert_eq!(
        listed["contexts"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );
    assert!(!listed.to_string().contains("parser"), "{listed}");
    let back = alice.ok("memory_reload_context", json!({"name": "refactor"}));
    assert_eq!(back["content"], "parser done; writing tests");
    // The CLI's answer is the same call's.
    let cli = h.json(&["context", "reload", "refactor", "--as", "alice"]);
    assert_eq!(cli["content"], "parser done; writing tests");
    assert_eq!(
        h.run(&["context", "reload", "refactor", "--as", "eve"])
            .code,
        2
    );
    for c in [alice, bob] {
        c.close();
    }
}

/// `memory_changes_since` for `c` since `since`, once the node's clock has
/// passed it (a bounded poll of the answer's own `until`, no sleep).
fn changes_after(c: &mut Client, since: &str) -> Value {
    for _ in 0..10_000 {
        let v = c.ok("memory_changes_since", json!({"since": since}));
        if v["until"].as_str() > Some(since) {
            return v;
        }
    }
    panic!("the clock never passed {since}");
}

fn kinds(v: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = v["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|c| {
            (
                c["kind"].as_str().unwrap_or_default().to_owned(),
                c["id"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn changes_since_is_the_gated_difference_and_never_shows_revoked_content() {
    let h = team_home();
    let mut alice = Client::start(&h, "alice");
    let add = |c: &mut Client, text: &str, share: Value| {
        id_of(&c.ok("memory_add", json!({"content": text, "share": share})))
    };
    let revoked = add(&mut alice, "the vault code is 4711", json!(["agent:bob"]));
    let edited = add(&mut alice, "standup at nine", json!(["team:apollo"]));
    let private = add(&mut alice, "alice's own diary entry", json!([]));
    let t = alice.ok("memory_get", json!({"id": private}))["created"]
        .as_str()
        .expect("created")
        .to_owned();
    // Let the clock pass T before anything changes.
    changes_after(&mut alice, &t);
    alice.ok(
        "memory_unshare",
        json!({"id": revoked, "scope": "agent:bob"}),
    );
    alice.ok(
        "memory_update",
        json!({"id": edited, "content": "standup at half past nine"}),
    );
    let added = add(
        &mut alice,
        "the offsite moved to may",
        json!(["team:apollo"]),
    );
    alice.ok("memory_forget", json!({"id": private}));

    let mut bob = Client::start(&h, "bob");
    let c = changes_after(&mut bob, &t);
    let mut want = vec![
        ("added".to_owned(), added.clone()),
        ("edited".to_owned(), edited.clone()),
        ("revoked".to_owned(), revoked.clone()),
    ];
    want.sort();
    assert_eq!(kinds(&c), want, "{c}");
    let text = c.to_string();
    assert!(!text.contains("4711"), "revoked content shown: {text}");
    assert!(
        !text.contains(&private) && !text.contains("diary"),
        "{text}"
    );
    let gone = c["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "revoked")
        .unwrap();
    assert!(gone.get("memory").is_none(), "{gone}");
    // The text answer says no more than the structured one.
    let r = bob.call("memory_changes_since", json!({"since": t}));
    let line = r["content"][0]["text"].as_str().unwrap();
    assert!(!line.contains("4711") && !line.contains("diary"), "{line}");

    // eve saw nothing then and sees nothing now: no change, no count.
    let mut eve = Client::start(&h, "eve");
    let c = changes_after(&mut eve, &t);
    assert_eq!(c["changes"], json!([]), "{c}");
    // alice's own view: her forgotten memory is revoked for her.
    let c = changes_after(&mut alice, &t);
    assert!(
        kinds(&c).contains(&("revoked".to_owned(), private.clone())),
        "{c}"
    );
    // The CLI gives the same answer.
    let cli = h.json(&["changes", "--as", "bob", "--since", &t]);
    let mut cli_kinds = kinds(&cli);
    cli_kinds.sort();
    assert_eq!(cli_kinds, want, "{cli}");
    assert_eq!(
        h.run(&["changes", "--as", "bob", "--since", "someday"])
            .code,
        2
    );
    for cl in [alice, bob, eve] {
        cl.close();
    }
}

#[test]
fn consolidate_shows_an_agent_only_its_own_view() {
    let h = team_home();
    for _ in 0..2 {
        h.add("alice", "alice's private plan for the merger", &[]);
        h.add("bob", "bob notes the printer is broken", &[]);
    }
    let before = h.fingerprint();
    let mut bob = Client::start(&h, "bob");
    let plan = bob.ok("memory_consolidate", json!({}));
    let actions = plan["actions"].as_array().expect("actions");
    assert_eq!(actions.len(), 1, "{plan}");
    assert_eq!(plan["applied"], false);
    let bobs: Vec<String> = h.json(&["list", "--as", "bob"])["memories"]
        .as_array()
        .expect("memories")
        .iter()
        .map(id_of)
        .collect();
    assert!(bobs.contains(&id_of(&actions[0])), "{plan}");
    assert_eq!(h.fingerprint(), before, "a dry run changes nothing");
    bob.close();
}
