//! Sync over QUIC between real `amos` processes on 127.0.0.1: `amos serve`
//! accepts sessions from registered peers only (checked on every
//! handshake), `amos sync now|auto` pulls and pushes, an idle sync moves
//! nothing, facts travel a—b—c through the middle node, and an unreachable
//! peer is reported without stopping the others.

use std::process::Stdio;
use std::time::Instant;

use crate::common::Home;
use crate::common::server::{Server, free_port, id, pair};
use serde_json::Value;

fn digest(h: &Home) -> String {
    h.digest("team:apollo")
}

fn apollo_node() -> Home {
    Home::apollo()
}

#[test]
fn two_nodes_sync_and_an_idle_sync_moves_nothing() {
    let a = apollo_node();
    let b = Home::new();
    let server = Server::start(a.path());
    let ida = id(&a);
    pair(&a, &b, &server, "team:apollo");
    for i in 0..5 {
        a.add(
            "alice",
            &format!("quasar shared note {i}"),
            &["team:apollo"],
        );
    }
    a.add("alice", "quasar private note", &[]);

    let (code, peers) = b.sync(&["now"]);
    assert_eq!(code, 0, "{peers:?}\n{}", server.log());
    assert_eq!(peers.len(), 1);
    assert_eq!(peers[0]["peer"], ida.as_str());
    assert_eq!(peers[0]["result"], "ok");
    assert!(peers[0]["facts_in"].as_u64().unwrap() >= 10, "{peers:?}");
    assert_eq!(peers[0]["facts_out"], 0);
    assert!(peers[0]["ms"].is_u64());
    assert_eq!(digest(&a), digest(&b));
    b.ok(&["agent", "add", "alice"]);
    assert_eq!(b.search_ids("alice", "quasar", 20).len(), 5);

    // Idle: watermarks only.
    let (code, peers) = b.sync(&["now", &ida]);
    assert_eq!(code, 0, "{peers:?}");
    assert_eq!(peers[0]["result"], "ok");
    assert_eq!(peers[0]["facts_in"], 0);
    assert_eq!(peers[0]["facts_out"], 0);

    // A new memory on b travels to a (both sides pull). (b may not change
    // apollo's roster: a created the team.)
    b.add("alice", "quasar note from b", &["team:apollo"]);
    let (code, _) = b.sync(&["now"]);
    assert_eq!(code, 0);
    assert_eq!(digest(&a), digest(&b));

    // SIGTERM stops the server cleanly.
    let mut server = server;
    let status = server.stop().expect("server stopped");
    assert!(status.success(), "{status:?}: {}", server.log());
}

#[test]
fn unknown_and_removed_keys_are_refused_and_the_server_keeps_serving() {
    let a = apollo_node();
    let b = Home::new();
    let stranger = Home::new();
    let mut server = Server::start(a.path());
    let (ida, idb) = (id(&a), id(&b));
    pair(&a, &b, &server, "team:apollo");
    stranger.ok(&[
        "peers",
        "add",
        &ida,
        &server.addr,
        "--policy",
        "team:apollo",
    ]);
    a.add("alice", "nebula secret plan", &["team:apollo"]);

    let (code, peers) = stranger.sync(&["now"]);
    assert_eq!(code, 1, "{peers:?}");
    assert_eq!(peers[0]["result"], "refused", "{peers:?}");
    assert_eq!(peers[0]["facts_in"], 0);
    assert_ne!(digest(&a), digest(&stranger));

    assert!(server.is_running(), "{}", server.log());
    let (code, peers) = b.sync(&["now"]);
    assert_eq!(code, 0, "{peers:?}\n{}", server.log());
    assert_eq!(peers[0]["result"], "ok");
    assert_eq!(digest(&a), digest(&b));

    // Removed from the server's table: refused on the very next connection.
    a.ok(&["peers", "remove", &idb]);
    let (code, peers) = b.sync(&["now"]);
    assert_eq!(code, 1, "{peers:?}");
    assert_eq!(peers[0]["result"], "refused", "{peers:?}");
    assert!(server.is_running(), "{}", server.log());
}

#[test]
fn a_memory_travels_through_the_middle_and_unreachable_peers_are_not_fatal() {
    let a = apollo_node();
    let b = Home::new();
    let c = Home::new();
    let nobody = Home::new();
    let server = Server::start(b.path());
    let (ida, idb, idc) = (id(&a), id(&b), id(&c));
    b.ok(&["peers", "add", &ida, "--policy", "team:apollo"]);
    b.ok(&["peers", "add", &idc, "--policy", "team:apollo"]);
    a.ok(&[
        "peers",
        "add",
        &idb,
        &server.addr,
        "--policy",
        "team:apollo",
    ]);
    c.ok(&[
        "peers",
        "add",
        &idb,
        &server.addr,
        "--policy",
        "team:apollo",
    ]);
    let dead = format!("127.0.0.1:{}", free_port());
    c.ok(&[
        "peers",
        "add",
        &id(&nobody),
        &dead,
        "--policy",
        "team:apollo",
    ]);

    let m = a.add("alice", "pulsar relayed memory", &["team:apollo"]);
    let (code, peers) = a.sync(&["now"]);
    assert_eq!(code, 0, "{peers:?}\n{}", server.log());
    assert!(peers[0]["facts_out"].as_u64().unwrap() >= 2, "{peers:?}");

    let (code, peers) = c.sync(&["auto"]);
    assert_eq!(code, 0, "{peers:?}\n{}", server.log());
    assert_eq!(peers.len(), 2, "{peers:?}");
    let by = |id: &str| {
        peers
            .iter()
            .find(|p| p["peer"] == id)
            .unwrap_or_else(|| panic!("{id} in {peers:?}"))
            .clone()
    };
    assert_eq!(by(&idb)["result"], "ok");
    assert!(by(&idb)["facts_in"].as_u64().unwrap() >= 2);
    assert_eq!(by(&id(&nobody))["result"], "unreachable");
    assert_eq!(digest(&a), digest(&c));
    c.ok(&["agent", "add", "alice"]);
    assert_eq!(c.search_ids("alice", "pulsar", 5), vec![m]);

    // `sync now` treats an unreachable peer as a failure.
    let (code, peers) = c.sync(&["now", &id(&nobody)]);
    assert_eq!(code, 1, "{peers:?}");
    assert_eq!(peers[0]["result"], "unreachable");
}

/// A fake peer (in-process, speaking the wire protocol by hand) that sends a
/// tampered fact: the client verifies before applying, fails the session
/// with exit 1, applies nothing and keeps its watermark.
#[test]
fn a_fact_that_does_not_verify_fails_the_sync_and_moves_nothing() {
    use amos_node::net::transport::{accept_incoming, read_frame, server_endpoint, write_frame};
    use amos_protocol::NodeId;
    use amos_protocol::wire::{SyncMessage, SyncV1, Watermark};

    let a = apollo_node();
    let c = Home::new();
    let (ida, idc) = (id(&a), id(&c));
    a.ok(&["peers", "add", &idc, "--policy", "team:apollo"]);
    a.add("alice", "comet tampered memory", &["team:apollo"]);
    // Real facts from a, with one signature byte flipped.
    let a_home = amos_node::Home::new(a.path());
    let mut facts = Vec::new();
    {
        let node = amos_node::Node::open(&a_home).unwrap();
        let peer: NodeId = idc.parse().unwrap();
        node.export_for_session(&peer, 0, true, 1000, |batch| {
            facts.extend(batch);
            Ok(())
        })
        .unwrap();
    }
    assert!(!facts.is_empty());
    let last = facts[0].len() - 1;
    facts[0][last] ^= 0x01;
    let identity = a_home.load_identity().unwrap();
    let empty_digest = digest(&c);

    let rt = tokio::runtime::Runtime::new().unwrap();
    let (code, peers) = rt.block_on(async {
        let ep = server_endpoint(
            "127.0.0.1:0".parse().unwrap(),
            &identity,
            std::sync::Arc::new(|_: &NodeId| true),
        )
        .unwrap();
        let addr = ep.local_addr().unwrap().to_string();
        c.ok(&["peers", "add", &ida, &addr, "--policy", "team:apollo"]);
        let c_path = c.path().to_owned();
        let client = tokio::task::spawn_blocking(move || {
            let out = std::process::Command::new(crate::common::amos_bin())
                .env("AMOS_HOME", c_path)
                .env("AMOS_LOG", "warn")
                .args(["--json", "sync", "now"])
                .stdin(Stdio::null())
                .output()
                .unwrap();
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            (
                out.status.code().unwrap(),
                v["peers"].as_array().unwrap().clone(),
            )
        });
        let incoming = ep.accept().await.unwrap();
        let (conn, _) = accept_incoming(incoming).await.unwrap();
        let (mut send, mut recv) = conn.accept_bi().await.unwrap();
        let hello = read_frame(&mut recv).await.unwrap().unwrap();
        // The client offered amos/2 (docs/design.md §13): it opens with
        // Hello2, and so does this stand-in server.
        let SyncMessage::V1(SyncV1::Hello2 { version, .. }) = SyncMessage::decode(&hello).unwrap()
        else {
            panic!("a version-2 client opens with Hello2")
        };
        let epoch = [7u8; 16];
        for m in [
            SyncV1::Hello2 {
                epoch,
                have: None,
                listen: vec![],
                version,
                features: u64::MAX,
            },
            SyncV1::Facts { facts },
            SyncV1::Done {
                upto: Watermark { epoch, seq: 99 },
            },
        ] {
            // The client may hang up as soon as it sees the bad fact.
            let _ = write_frame(&mut send, &SyncMessage::V1(m).encode()).await;
        }
        let r = client.await.unwrap();
        conn.close(0u32.into(), b"");
        r
    });
    assert_eq!(code, 1, "{peers:?}");
    assert_eq!(peers[0]["result"], "failed", "{peers:?}");
    assert!(
        peers[0]["error"].as_str().unwrap().contains("verify"),
        "{peers:?}"
    );
    assert_eq!(digest(&c), empty_digest, "nothing applied");
    let listed = c.json(&["peers", "list"]);
    assert!(listed["peers"][0]["last_sync"].is_null(), "{listed:?}");
}

/// Megabytes both ways at once: neither side may stall the other (the
/// bounded export channel must not deadlock against the peer's).
#[test]
fn a_large_two_way_sync_does_not_stall() {
    let a = apollo_node();
    let b = Home::new();
    b.ok(&["agent", "add", "alice"]);

    let server = Server::start(a.path());
    pair(&a, &b, &server, "team:apollo");
    // b learns apollo (a created it) before both write in bulk.
    let (code, peers) = b.sync(&["now"]);
    assert_eq!(code, 0, "{peers:?}\n{}", server.log());
    for h in [&a, &b] {
        let home = amos_node::Home::new(h.path());
        let mut node = amos_node::Node::open(&home).unwrap();
        let who = node.requester("alice").unwrap();
        for i in 0..2000 {
            let mut m = amos_node::NewMemory::new(format!("bulk {i} {}", "x".repeat(3000)));
            m.share = vec!["team:apollo".parse().unwrap()];
            node.add(&who, m).unwrap();
        }
    }
    let started = Instant::now();
    let (code, peers) = b.sync(&["now"]);
    assert_eq!(code, 0, "{peers:?}\n{}", server.log());
    assert!(peers[0]["facts_in"].as_u64().unwrap() >= 4000, "{peers:?}");
    assert!(peers[0]["facts_out"].as_u64().unwrap() >= 4000, "{peers:?}");
    assert_eq!(digest(&a), digest(&b));
    eprintln!("{peers:?} in {:?}", started.elapsed());
}
