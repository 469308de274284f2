//! `amos demo --json`: three `amos serve` processes in throw-away homes pair
//! by code, converge, recall a paraphrase through the gate and revoke; every
//! step's outcome is checked here (never its timing), and nothing is left
//! behind.

use serde_json::Value;

use crate::common::amos_bin;

#[test]
fn the_demo_pairs_converges_recalls_by_meaning_and_revokes_everywhere() {
    // A home that must stay untouched: the demo never uses the user's.
    let user = tempfile::tempdir().unwrap();
    let home = user.path().join("home");
    let o = std::process::Command::new(amos_bin())
        .args(["demo", "--json"])
        .env("AMOS_HOME", &home)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{}\n{stdout}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["ok"], true, "{v:#}");
    let steps = v["steps"].as_array().unwrap();
    let names: Vec<&str> = steps.iter().map(|s| s["step"].as_str().unwrap()).collect();
    assert_eq!(names, ["start", "pair", "converge", "recall", "revoke"]);
    assert!(steps.iter().all(|s| s["ok"] == true), "{v:#}");
    let step = |n: usize| &steps[n];

    // Three nodes, each serving QUIC on loopback.
    let nodes = step(0)["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3);
    for n in nodes {
        let addr: std::net::SocketAddr = n["addr"].as_str().unwrap().parse().unwrap();
        assert!(addr.ip().is_loopback() && addr.port() != 0, "{n}");
    }
    // B and C paired by code; their agents became team members on A.
    let joined = step(1)["joined"].as_array().unwrap();
    assert_eq!(joined.len(), 2);
    for (j, (node, agent)) in joined.iter().zip([("B", "bob"), ("C", "carol")]) {
        assert_eq!(j["node"], node);
        assert_eq!(j["agent"], agent);
        assert_eq!(j["policy"], "team:apollo");
        assert_eq!(j["member_of"], serde_json::json!(["team:apollo"]));
        assert_eq!(j["first_sync"], "ok");
    }
    // Converged: one digest of the team's facts on all three.
    assert_eq!(step(2)["memories"], 3);
    assert_eq!(step(2)["digest"].as_str().unwrap().len(), 64);
    // The paraphrase found the payroll memory, sharing no content word with it.
    let recall = step(3);
    let hit = recall["hit_text"].as_str().unwrap().to_lowercase();
    assert!(hit.contains("payroll"), "{recall}");
    let question = recall["question"].as_str().unwrap();
    for word in question.split_whitespace().filter(|w| w.len() > 3) {
        assert!(!hit.contains(word), "{word:?} is in {hit:?}");
    }
    assert_eq!(recall["outsider_hits"], 0);
    // The revocation reached B and C.
    assert_eq!(step(4)["nodes"], serde_json::json!(["B", "C"]));
    assert_eq!(step(4)["recalled_after"], 0);

    // Throw-away homes: gone afterwards, and the user's home never made.
    let dir = v["dir"].as_str().unwrap();
    assert!(!std::path::Path::new(dir).exists(), "{dir} left behind");
    assert!(!home.exists());
}
