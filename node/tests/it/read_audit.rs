//! The read audit: off by default; on (`amos config set read-audit on` or
//! `AMOS_READ_AUDIT=on`), it records what each agent was shown by get,
//! list, search, pack and timeline, never what the gate withheld, and never moves
//! the digest; the node's own checks (the memories a link, share or update
//! names) are not reads. (MCP reads: `mcp::mcp_reads_are_audited_as_mcp`.)

use crate::common::Home;

fn reads(h: &Home, args: &[&str]) -> Vec<serde_json::Value> {
    let mut a = vec!["audit", "reads"];
    a.extend_from_slice(args);
    h.json(&a)["reads"].as_array().unwrap().clone()
}

#[test]
fn reads_are_audited_only_when_on_and_only_what_was_shown() {
    let h = Home::apollo();
    h.ok(&["agent", "add", "bob", "--team", "apollo"]);
    let team = h.add("alice", "zebra crossing rota for apollo", &["team:apollo"]);
    let private = h.add("alice", "zebra private diary", &[]);

    h.ok(&["get", &team, "--as", "bob"]);
    assert!(reads(&h, &[]).is_empty(), "off by default");
    let c = h.json(&["config", "show"]);
    assert_eq!(c["on"], false);

    let c = h.json(&["config", "set", "read-audit", "on"]);
    assert_eq!(c["on"], true);
    // The node's own look at the memories a link names is not a read.
    h.ok(&["link", &team, &private, "--as", "alice"]);
    let digest = h.json(&["digest"])["digest"].clone();
    h.ok(&["get", &team, "--as", "bob"]);
    let r = h.run(&["get", &private, "--as", "bob"]);
    assert_eq!(r.code, 2, "{r:?}");
    h.ok(&["search", "zebra", "--as", "bob"]);
    h.ok(&["pack", "zebra", "--as", "bob"]);
    h.ok(&["timeline", "--as", "bob"]);
    h.ok(&["list", "--as", "alice"]);

    let bob = reads(&h, &["--agent", "bob"]);
    let vias: Vec<&str> = bob.iter().map(|r| r["via"].as_str().unwrap()).collect();
    assert_eq!(vias, ["timeline", "pack", "search", "get"], "{bob:?}");
    assert!(
        bob.iter()
            .all(|r| r["memory"] == team.as_str() && r["front"] == "cli"),
        "bob was shown only the team memory: {bob:?}"
    );
    let alice = reads(&h, &["--agent", "alice"]);
    assert_eq!(alice.len(), 2, "{alice:?}");
    assert!(alice.iter().all(|r| r["via"] == "list"));
    let of_private = reads(&h, &["--memory", &private]);
    assert_eq!(of_private.len(), 1, "only alice's list: {of_private:?}");
    assert_eq!(of_private[0]["agent"], "alice");
    assert!(reads(&h, &["--since", "2999-01-01T00:00:00Z"]).is_empty());
    assert_eq!(reads(&h, &["--since", "-1h"]).len(), 6);

    // Local-only: the replicated state did not move.
    assert_eq!(h.json(&["digest"])["digest"], digest);

    // Off again; the environment switches it on for one process.
    h.ok(&["config", "set", "read-audit", "off"]);
    h.ok(&["get", &team, "--as", "bob"]);
    assert_eq!(reads(&h, &[]).len(), 6);
    let r = h
        .cmd()
        .env("AMOS_READ_AUDIT", "on")
        .args(["get", &team, "--as", "bob"])
        .output()
        .unwrap();
    assert!(r.status.success());
    assert_eq!(reads(&h, &[]).len(), 7);

    // Bad settings change nothing.
    for bad in [
        &["config", "set", "read-audit", "maybe"][..],
        &["config", "set", "read-audit-retention", "soon"],
        &["config", "set", "colour", "on"],
    ] {
        assert_eq!(h.run(bad).code, 2, "{bad:?}");
    }
    let c = h.json(&["config", "set", "read-audit-retention", "30d"]);
    assert_eq!(c["retention_ms"], 30u64 * 24 * 3600 * 1000);
    assert_eq!(c["on"], false);
}
