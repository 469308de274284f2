//! Three real `amos` nodes on 127.0.0.1 (`--no-mdns`), wired by hand with
//! `amos peers add` and policy `team:apollo` between them:
//!
//! * a revocation (an unshared memory, a member removed from the team) made
//!   on one node is in force on every node after one `amos sync auto`
//!   round each, even on a node that hears of it only through another;
//! * partition and heal: a node's server is killed, both sides write,
//!   it comes back, and after a round everything converges with nothing
//!   lost; meanwhile the peers table records the failed syncs;
//! * garbage and oversize frames sent to a real `amos serve` over an
//!   authenticated QUIC connection end that session only: the server keeps
//!   serving normal syncs.

use std::time::Duration;

use crate::common::Home;
use crate::common::server::{Server, id, pair};
use serde_json::Value;

const SCOPE: &str = "team:apollo";

fn digest(h: &Home) -> String {
    h.digest(SCOPE)
}

/// `amos sync auto` on `h`: every peer must answer ok.
fn round(h: &Home, servers: &[&Server]) {
    let (code, peers) = h.sync(&["auto"]);
    let logs: Vec<String> = servers.iter().map(|s| s.log()).collect();
    assert_eq!(code, 0, "{peers:?}\n{logs:#?}");
    assert!(
        peers.iter().all(|p| p["result"] == "ok"),
        "{peers:?}\n{logs:#?}"
    );
}

/// The result recorded for `peer` in `h`'s peers table.
fn last_result(h: &Home, peer: &str) -> Value {
    let listed = h.json(&["peers", "list"]);
    listed["peers"]
        .as_array()
        .expect("peers")
        .iter()
        .find(|p| p["node_id"] == peer)
        .unwrap_or_else(|| panic!("{peer} in {listed}"))["last_result"]
        .clone()
}

/// Whether `agent` can read memory `m` on `h` (exit 0 vs "no such memory").
fn can_get(h: &Home, agent: &str, m: &str) -> bool {
    let r = h.run(&["get", m, "--as", agent]);
    match r.code {
        0 => true,
        2 => {
            assert!(r.stderr.contains("no such memory"), "{r:?}");
            false
        }
        _ => panic!("amos get: {r:?}"),
    }
}

/// Three serving nodes; `a` holds team apollo (alice, bob, carol). Agents
/// do not replicate to scoped peers, so b and c register them locally; the
/// memberships come by sync.
struct Mesh {
    homes: [Home; 3],
    servers: [Server; 3],
    ids: [String; 3],
}

impl Mesh {
    /// `links` are pairs of node indices that peer with each other.
    fn new(links: &[(usize, usize)]) -> Mesh {
        let homes = [Home::new(), Home::new(), Home::new()];
        homes[0].ok(&["team", "create", "apollo"]);
        for agent in ["alice", "bob", "carol"] {
            homes[0].ok(&["agent", "add", agent, "--team", "apollo"]);
            homes[1].ok(&["agent", "add", agent]);
            homes[2].ok(&["agent", "add", agent]);
        }
        let servers = homes.each_ref().map(|h| Server::start(h.path()));
        let ids = homes.each_ref().map(id);
        for &(x, y) in links {
            for (from, to) in [(x, y), (y, x)] {
                homes[from].ok(&[
                    "peers",
                    "add",
                    &ids[to],
                    &servers[to].addr,
                    "--policy",
                    SCOPE,
                ]);
            }
        }
        Mesh {
            homes,
            servers,
            ids,
        }
    }

    fn servers(&self) -> Vec<&Server> {
        self.servers.iter().collect()
    }

    /// One `amos sync auto` on each node, in order.
    fn round(&self) {
        for h in &self.homes {
            round(h, &self.servers());
        }
    }
}

#[test]
fn a_revocation_is_in_force_on_every_node_after_one_round_each() {
    // A chain a — b — c: c hears of a's changes only through b.
    let mesh = Mesh::new(&[(0, 1), (1, 2)]);
    let [a, b, c] = &mesh.homes;
    let unshared = a.add("alice", "zephyr launch checklist", &[SCOPE]);
    let kept = a.add("alice", "zephyr budget note", &[SCOPE]);
    mesh.round();
    for h in [a, b, c] {
        for who in ["alice", "bob", "carol"] {
            assert!(can_get(h, who, &unshared) && can_get(h, who, &kept));
        }
        assert_eq!(h.search_ids("bob", "zephyr", 10).len(), 2);
    }

    // On a: alice unshares one memory, bob leaves the team.
    a.ok(&["unshare", &unshared, SCOPE, "--as", "alice"]);
    a.ok(&["team", "remove", "apollo", "bob"]);
    mesh.round();

    for (n, h) in [a, b, c].into_iter().enumerate() {
        let ctx = format!("node {n}");
        // bob sees neither memory any more, by search or by id.
        assert!(h.search_ids("bob", "zephyr", 10).is_empty(), "{ctx}");
        assert!(!can_get(h, "bob", &unshared), "{ctx}");
        assert!(!can_get(h, "bob", &kept), "{ctx}");
        // carol (still a member) sees only the memory still shared.
        assert_eq!(
            h.search_ids("carol", "zephyr", 10),
            vec![kept.clone()],
            "{ctx}"
        );
        assert!(!can_get(h, "carol", &unshared), "{ctx}");
        assert!(can_get(h, "carol", &kept), "{ctx}");
    }
    // alice (the owner) still reads both on her own node.
    assert!(can_get(a, "alice", &unshared) && can_get(a, "alice", &kept));
    assert_eq!(digest(a), digest(b));
    assert_eq!(digest(b), digest(c));
}

#[test]
fn a_partition_heals_with_nothing_lost_and_failed_syncs_are_recorded() {
    let mut mesh = Mesh::new(&[(0, 1), (1, 2), (0, 2)]);
    let before = mesh.homes[0].add("alice", "nimbus before the split", &[SCOPE]);
    mesh.round();
    let idc = mesh.ids[2].clone();
    assert_eq!(last_result(&mesh.homes[0], &idc), "ok");

    // c drops off the network.
    mesh.servers[2].kill();
    let [a, b, c] = &mesh.homes;
    let mut written = vec![before];
    written.push(a.add("alice", "nimbus written on a during the split", &[SCOPE]));
    written.push(b.add("bob", "nimbus written on b during the split", &[SCOPE]));
    written.push(c.add("carol", "nimbus written on c during the split", &[SCOPE]));
    for (h, other) in [(a, &mesh.ids[1]), (b, &mesh.ids[0])] {
        let (code, peers) = h.sync(&["auto"]);
        assert_eq!(code, 0, "unreachable is not fatal to auto: {peers:?}");
        let by = |id: &str| peers.iter().find(|p| p["peer"] == id).cloned();
        assert_eq!(by(other).expect("other")["result"], "ok", "{peers:?}");
        assert_eq!(by(&idc).expect("c")["result"], "unreachable", "{peers:?}");
        // Recorded: peers list and status show it.
        assert_eq!(last_result(h, &idc), "unreachable");
        let status = h.json(&["status"]);
        let row = status["peers"]
            .as_array()
            .expect("peers")
            .iter()
            .find(|p| p["node_id"] == idc.as_str())
            .cloned()
            .expect("c in status");
        assert_eq!(row["last_result"], "unreachable", "{status}");
        assert!(row["last_sync"].is_u64(), "the last success stays: {row}");
        assert!(h.ok(&["peers", "list"]).stdout.contains("unreachable"));
    }
    assert_eq!(digest(a), digest(b));
    assert_ne!(digest(a), digest(c));

    // c comes back on the same address; one round each heals everything.
    let addr = mesh.servers[2].addr.clone();
    mesh.servers[2] = Server::start_with(c.path(), None, &addr, &["--no-mdns"]);
    let [a, b, c] = &mesh.homes;
    for h in [c, a, b] {
        round(h, &mesh.servers());
    }
    assert_eq!(digest(a), digest(b));
    assert_eq!(digest(b), digest(c));
    for h in [a, b, c] {
        for m in &written {
            assert!(can_get(h, "carol", m), "{m} missing");
        }
        assert_eq!(h.search_ids("alice", "nimbus", 10).len(), written.len());
    }
    assert_eq!(last_result(a, &idc), "ok");
}

/// Refused connections are recorded too (and `sync now` fails with exit 1).
#[test]
fn a_refused_sync_is_recorded_in_the_peers_table() {
    let a = Home::new();
    let stranger = Home::new();
    let server = Server::start(a.path());
    let ida = id(&a);
    stranger.ok(&["peers", "add", &ida, &server.addr, "--policy", SCOPE]);
    assert!(last_result(&stranger, &ida).is_null(), "never synced yet");
    let (code, peers) = stranger.sync(&["now"]);
    assert_eq!(code, 1, "{peers:?}");
    assert_eq!(peers[0]["result"], "refused");
    assert_eq!(last_result(&stranger, &ida), "refused");
    let status = stranger.ok(&["status"]).stdout;
    assert!(status.contains("refused"), "{status}");
}

/// What the client saw after sending `bytes` on a fresh session stream of
/// an authenticated connection: the messages the server sent before it
/// ended the session, and how it closed the connection.
async fn send_raw(
    identity: &amos_protocol::NodeIdentity,
    server: amos_protocol::NodeId,
    addr: std::net::SocketAddr,
    bytes: &[u8],
) -> (Vec<String>, quinn::ConnectionError) {
    use amos_node::net::transport::{client_endpoint, connect, read_frame};
    use amos_protocol::wire::{SyncMessage, SyncV1};
    let ep = client_endpoint(
        "127.0.0.1:0".parse().unwrap(),
        identity,
        std::sync::Arc::new(move |id: &amos_protocol::NodeId| *id == server),
    )
    .unwrap();
    let conn = connect(&ep, addr, server).await.expect("handshake");
    let (mut send, mut recv) = conn.open_bi().await.expect("stream");
    send.write_all(bytes).await.expect("write");
    let mut got = Vec::new();
    let wait = Duration::from_secs(20);
    while let Ok(Ok(Some(frame))) = tokio::time::timeout(wait, read_frame(&mut recv)).await {
        got.push(match SyncMessage::decode(&frame) {
            Ok(SyncMessage::V1(SyncV1::Hello { .. } | SyncV1::Hello2 { .. })) => "hello".to_owned(),
            Ok(SyncMessage::V1(m)) => format!("{m:?}"),
            Err(e) => format!("undecodable: {e}"),
        });
    }
    let closed = tokio::time::timeout(wait, conn.closed())
        .await
        .expect("the server closes the connection");
    ep.wait_idle().await;
    (got, closed)
}

#[test]
fn garbage_and_oversize_frames_from_a_registered_key_end_only_that_session() {
    let a = Home::new();
    let b = Home::new();
    a.ok(&["team", "create", "apollo"]);
    a.ok(&["agent", "add", "alice", "--team", "apollo"]);
    let mut server = Server::start(a.path());
    let ida = id(&a);
    pair(&a, &b, &server, SCOPE);
    a.add("alice", "quasar after the attack", &[SCOPE]);

    let identity = amos_node::Home::new(b.path()).load_identity().unwrap();
    let server_id: amos_protocol::NodeId = ida.parse().unwrap();
    let addr: std::net::SocketAddr = server.addr.parse().unwrap();
    let max = amos_node::net::transport::MAX_FRAME as u32;
    // A well-framed message that is no sync message.
    let mut garbage = 64u32.to_be_bytes().to_vec();
    garbage.extend((0..64u8).map(|i| i.wrapping_mul(37) ^ 0xa5));
    // A length prefix over the limit, then a little of the promised body.
    let mut oversize = (max + 1).to_be_bytes().to_vec();
    oversize.extend([0u8; 1024]);
    let huge = u32::MAX.to_be_bytes().to_vec();

    let rt = tokio::runtime::Runtime::new().unwrap();
    for (what, bytes, logged) in [
        ("garbage", &garbage, "undecodable"),
        ("oversize", &oversize, "exceeds the limit"),
        ("u32::MAX length", &huge, "exceeds the limit"),
    ] {
        let (got, closed) = rt.block_on(send_raw(&identity, server_id, addr, bytes));
        // The server may have said hello, but it sends nothing else: it
        // ends the session and closes the connection as a failed sync.
        assert!(got.iter().all(|m| m == "hello"), "{what}: {got:?}");
        match &closed {
            quinn::ConnectionError::ApplicationClosed(c) => {
                assert_eq!(c.error_code, quinn::VarInt::from_u32(1), "{what}: {c:?}");
                assert_eq!(&c.reason[..], b"sync failed", "{what}: {c:?}");
            }
            other => panic!("{what}: {other:?}"),
        }
        assert!(server.is_running(), "{what}: {}", server.log());
        let log = server.log();
        assert!(
            log.lines()
                .any(|l| l.contains("failed") && l.contains(logged)),
            "{what}: {log}"
        );
    }
    // The server still serves a normal sync.
    let (code, peers) = b.sync(&["now"]);
    assert_eq!(code, 0, "{peers:?}\n{}", server.log());
    assert_eq!(peers[0]["result"], "ok");
    assert_eq!(digest(&a), digest(&b));
    let status = server.stop().expect("stopped");
    assert!(status.success(), "{status:?}: {}", server.log());
}
