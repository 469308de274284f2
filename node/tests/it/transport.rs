//! QUIC transport over loopback: mutual raw-public-key authentication, the
//! per-handshake key check, framing, ALPN.
//!
//! Only 127.0.0.1 with port 0; every await is bounded by a timeout.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use amos_node::net::transport::{
    MAX_FRAME, PeerAcceptor, RefusedBy, TransportError, accept_incoming, client_config,
    client_endpoint, connect, negotiated, peer_node_id, read_frame, server_endpoint, with_timeout,
    write_frame,
};
use amos_protocol::{NodeId, NodeIdentity};
use quinn::crypto::rustls::QuicClientConfig;
use tokio::sync::mpsc;

const LIMIT: Duration = Duration::from_secs(10);

async fn within<F: Future>(fut: F) -> F::Output {
    tokio::time::timeout(LIMIT, fut)
        .await
        .expect("operation did not finish within 10 s")
}

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn identity(seed: u8) -> NodeIdentity {
    NodeIdentity::from_secret([seed; 32])
}

fn only(peer: NodeId) -> Arc<dyn PeerAcceptor> {
    Arc::new(move |p: &NodeId| *p == peer)
}

/// What the echo server saw for each incoming connection / stream.
#[derive(Debug)]
enum Event {
    Accepted(NodeId),
    HandshakeFailed(TransportError),
    StreamError(TransportError),
}

/// Serve `endpoint`: for each connection report the handshake result, then
/// echo every frame on every bidirectional stream; report stream errors and
/// carry on.
fn spawn_echo_server(endpoint: quinn::Endpoint) -> mpsc::UnboundedReceiver<Event> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(incoming) = endpoint.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let connection = match accept_incoming(incoming).await {
                    Ok((connection, peer)) => {
                        let _ = tx.send(Event::Accepted(peer));
                        connection
                    }
                    Err(e) => {
                        let _ = tx.send(Event::HandshakeFailed(e));
                        return;
                    }
                };
                while let Ok((mut send, mut recv)) = connection.accept_bi().await {
                    let tx = tx.clone();
                    tokio::spawn(async move {
                        loop {
                            match read_frame(&mut recv).await {
                                Ok(Some(frame)) => {
                                    if let Err(e) = write_frame(&mut send, &frame).await {
                                        let _ = tx.send(Event::StreamError(e));
                                        return;
                                    }
                                }
                                Ok(None) => {
                                    let _ = send.finish();
                                    return;
                                }
                                Err(e) => {
                                    let _ = tx.send(Event::StreamError(e));
                                    return;
                                }
                            }
                        }
                    });
                }
            });
        }
    });
    rx
}

/// Send one frame on a new stream and read the echo.
async fn echo(connection: &quinn::Connection, payload: &[u8]) -> Result<Vec<u8>, TransportError> {
    let (mut send, mut recv) = connection
        .open_bi()
        .await
        .map_err(|e| TransportError::Closed(e.to_string()))?;
    write_frame(&mut send, payload).await?;
    send.finish()
        .map_err(|e| TransportError::Closed(e.to_string()))?;
    match read_frame(&mut recv).await? {
        Some(frame) => Ok(frame),
        None => Err(TransportError::Closed("no echo".into())),
    }
}

/// Connect and do one echo; the refusal may surface at either step.
async fn connect_and_echo(
    endpoint: &quinn::Endpoint,
    addr: SocketAddr,
    expected: NodeId,
) -> Result<Vec<u8>, TransportError> {
    let connection = connect(endpoint, addr, expected).await?;
    echo(&connection, b"ping").await
}

async fn next_event(rx: &mut mpsc::UnboundedReceiver<Event>) -> Event {
    within(rx.recv()).await.expect("server task ended")
}

fn server(seed: u8, acceptor: Arc<dyn PeerAcceptor>) -> (quinn::Endpoint, SocketAddr, NodeId) {
    let id = identity(seed);
    let endpoint = server_endpoint(loopback(), &id, acceptor).unwrap();
    let addr = endpoint.local_addr().unwrap();
    (endpoint, addr, id.node_id())
}

fn client(seed: u8, acceptor: Arc<dyn PeerAcceptor>) -> (quinn::Endpoint, NodeId) {
    let id = identity(seed);
    (
        client_endpoint(loopback(), &id, acceptor).unwrap(),
        id.node_id(),
    )
}

// 1
#[tokio::test]
async fn mutual_handshake_identifies_both_sides_and_frames_round_trip() {
    let a = identity(1).node_id();
    let b = identity(2).node_id();
    let (server_ep, addr, server_id) = server(1, only(b));
    let mut events = spawn_echo_server(server_ep);
    let (client_ep, client_id) = client(2, only(a));
    assert_eq!((server_id, client_id), (a, b));

    let connection = within(connect(&client_ep, addr, a)).await.unwrap();
    assert_eq!(
        peer_node_id(&connection).unwrap(),
        a,
        "client sees the server's NodeId"
    );
    match next_event(&mut events).await {
        Event::Accepted(peer) => assert_eq!(peer, b, "server sees the client's NodeId"),
        other => panic!("expected an accepted handshake, got {other:?}"),
    }

    assert_eq!(
        within(echo(&connection, b"hello amos")).await.unwrap(),
        b"hello amos"
    );
    // several frames on one stream, one of them large, both directions
    let (mut send, mut recv) = within(connection.open_bi()).await.unwrap();
    let big = vec![0x5a; 2 * 1024 * 1024];
    for payload in [&b"first"[..], &big, &b"third"[..]] {
        within(write_frame(&mut send, payload)).await.unwrap();
        let back = within(read_frame(&mut recv)).await.unwrap();
        assert_eq!(back.as_deref(), Some(payload));
    }
    send.finish().unwrap();
    assert_eq!(
        within(read_frame(&mut recv)).await.unwrap(),
        None,
        "clean end of stream"
    );
}

// 2
#[tokio::test]
async fn dialling_with_the_wrong_expected_node_id_is_refused() {
    let a = identity(1).node_id();
    let b = identity(2).node_id();
    let impostor_expected = identity(3).node_id();
    let (server_ep, addr, _) = server(1, only(b));
    let mut events = spawn_echo_server(server_ep);
    // The client would accept either key; only `expected` should matter.
    let (client_ep, _) = client(2, Arc::new(|_: &NodeId| true));

    let err = within(connect(&client_ep, addr, impostor_expected))
        .await
        .unwrap_err();
    match &err {
        TransportError::Refused {
            by: RefusedBy::Us,
            reason,
        } => {
            assert!(
                reason.contains(&a.to_string()),
                "reason names the key seen: {reason}"
            );
            assert!(
                reason.contains(&impostor_expected.to_string()),
                "reason names the key dialled: {reason}"
            );
        }
        other => panic!("expected Refused by us, got {other:?}"),
    }
    // The server never got an authenticated connection.
    assert!(matches!(
        next_event(&mut events).await,
        Event::HandshakeFailed(_)
    ));
    // The same endpoint dialling the right key works.
    assert_eq!(
        within(connect_and_echo(&client_ep, addr, a)).await.unwrap(),
        b"ping"
    );
}

// 3
#[tokio::test]
async fn server_refuses_a_client_key_its_acceptor_rejects() {
    let a = identity(1).node_id();
    let stranger_seed = 9;
    let (server_ep, addr, _) = server(1, only(identity(2).node_id()));
    let mut events = spawn_echo_server(server_ep);
    let (client_ep, stranger) = client(stranger_seed, only(a));

    let err = within(connect_and_echo(&client_ep, addr, a))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            TransportError::Refused {
                by: RefusedBy::Peer,
                ..
            }
        ),
        "client sees the server's refusal (at connect or first stream op): {err:?}"
    );
    match next_event(&mut events).await {
        Event::HandshakeFailed(TransportError::Refused {
            by: RefusedBy::Us,
            reason,
        }) => {
            assert!(reason.contains(&stranger.to_string()), "{reason}");
        }
        other => panic!("expected the server to refuse the handshake, got {other:?}"),
    }
}

// 4 (server side)
#[tokio::test]
async fn a_removed_peer_is_refused_on_its_next_connection() {
    let a = identity(1).node_id();
    let b = identity(2).node_id();
    let removed = Arc::new(AtomicBool::new(false));
    let consulted = Arc::new(AtomicUsize::new(0));
    let acceptor: Arc<dyn PeerAcceptor> = {
        let removed = removed.clone();
        let consulted = consulted.clone();
        Arc::new(move |p: &NodeId| {
            consulted.fetch_add(1, Ordering::SeqCst);
            *p == b && !removed.load(Ordering::SeqCst)
        })
    };
    let (server_ep, addr, _) = server(1, acceptor);
    let mut events = spawn_echo_server(server_ep);
    // Same client endpoint for both connections: a resumed TLS session
    // would skip the check, so this also proves resumption is off.
    let (client_ep, _) = client(2, only(a));

    assert_eq!(
        within(connect_and_echo(&client_ep, addr, a)).await.unwrap(),
        b"ping"
    );
    assert!(matches!(next_event(&mut events).await, Event::Accepted(p) if p == b));
    let after_first = consulted.load(Ordering::SeqCst);
    assert!(after_first >= 1);

    removed.store(true, Ordering::SeqCst);
    let err = within(connect_and_echo(&client_ep, addr, a))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            TransportError::Refused {
                by: RefusedBy::Peer,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(matches!(
        next_event(&mut events).await,
        Event::HandshakeFailed(TransportError::Refused {
            by: RefusedBy::Us,
            ..
        })
    ));
    assert!(
        consulted.load(Ordering::SeqCst) > after_first,
        "acceptor consulted again"
    );
}

// 4 (client side)
#[tokio::test]
async fn a_client_checks_the_server_key_against_its_acceptor_on_every_connection() {
    let a = identity(1).node_id();
    let b = identity(2).node_id();
    let (server_ep, addr, _) = server(1, only(b));
    let _events = spawn_echo_server(server_ep);
    let removed = Arc::new(AtomicBool::new(false));
    let acceptor: Arc<dyn PeerAcceptor> = {
        let removed = removed.clone();
        Arc::new(move |p: &NodeId| *p == a && !removed.load(Ordering::SeqCst))
    };
    let (client_ep, _) = client(2, acceptor);

    assert_eq!(
        within(connect_and_echo(&client_ep, addr, a)).await.unwrap(),
        b"ping"
    );
    removed.store(true, Ordering::SeqCst);
    let err = within(connect(&client_ep, addr, a)).await.unwrap_err();
    match err {
        TransportError::Refused {
            by: RefusedBy::Us,
            reason,
        } => {
            assert!(reason.contains("not an accepted peer"), "{reason}")
        }
        other => panic!("expected Refused by us, got {other:?}"),
    }
}

fn expect_too_large(result: Result<Option<Vec<u8>>, TransportError>, announced: u64) {
    match result {
        Err(TransportError::FrameTooLarge { len, max }) => {
            assert_eq!(len, announced);
            assert_eq!(max, MAX_FRAME);
        }
        other => panic!("expected FrameTooLarge, got {other:?}"),
    }
}

// 5a: over real QUIC streams, holding both ends.
#[tokio::test]
async fn an_oversize_frame_is_refused_after_reading_only_its_prefix() {
    let a = identity(1).node_id();
    let b = identity(2).node_id();
    let (server_ep, addr, _) = server(1, only(b));
    let (client_ep, _) = client(2, only(a));

    let (client_conn, server_conn) = within(async {
        let dial = connect(&client_ep, addr, a);
        let accept = async {
            let incoming = server_ep.accept().await.expect("endpoint open");
            accept_incoming(incoming).await
        };
        let (c, s) = tokio::join!(dial, accept);
        (c.unwrap(), s.unwrap().0)
    })
    .await;

    let (mut send, _client_recv) = within(client_conn.open_bi()).await.unwrap();
    let announced = MAX_FRAME as u32 + 1;
    // The announced body never comes: if the reader waited for it (or tried
    // to allocate and fill it), this test would time out.
    within(tokio::io::AsyncWriteExt::write_all(
        &mut send,
        &announced.to_be_bytes(),
    ))
    .await
    .unwrap();
    within(tokio::io::AsyncWriteExt::write_all(&mut send, b"MARK"))
        .await
        .unwrap();

    let (_server_send, mut recv) = within(server_conn.accept_bi()).await.unwrap();
    expect_too_large(within(read_frame(&mut recv)).await, u64::from(announced));
    let mut next = [0u8; 4];
    within(recv.read_exact(&mut next)).await.unwrap();
    assert_eq!(&next, b"MARK", "exactly the 4 prefix bytes were consumed");
}

// 5b: garbage and truncated frames against the serving loop, which keeps going.
#[tokio::test]
async fn garbage_and_truncated_frames_are_errors_and_the_server_keeps_serving() {
    let a = identity(1).node_id();
    let b = identity(2).node_id();
    let (server_ep, addr, _) = server(1, only(b));
    let mut events = spawn_echo_server(server_ep);
    let (client_ep, _) = client(2, only(a));

    let connection = within(connect(&client_ep, addr, a)).await.unwrap();
    assert!(matches!(next_event(&mut events).await, Event::Accepted(_)));

    // (bytes sent, then finish) -> what the server's reader must report
    let cases: [(&[u8], &str); 4] = [
        (b"GET / HTTP/1.1\r\n\r\n", "too large"), // 0x47455420 > MAX_FRAME
        (&[0, 0, 0, 0, 7], "protocol"),           // zero-length frame
        (&[0, 0], "protocol"),                    // truncated prefix
        (&[0, 0, 0, 10, 1, 2, 3], "protocol"),    // truncated body
    ];
    for (bytes, kind) in cases {
        let (mut send, _recv) = within(connection.open_bi()).await.unwrap();
        within(tokio::io::AsyncWriteExt::write_all(&mut send, bytes))
            .await
            .unwrap();
        send.finish().unwrap();
        match (next_event(&mut events).await, kind) {
            (Event::StreamError(TransportError::FrameTooLarge { len, .. }), "too large") => {
                assert_eq!(len, u64::from(u32::from_be_bytes(*b"GET ")))
            }
            (Event::StreamError(TransportError::Protocol(_)), "protocol") => {}
            (other, _) => panic!("for {bytes:?} expected a {kind} error, got {other:?}"),
        }
    }

    // The same connection still works, and so does a brand-new one.
    assert_eq!(
        within(echo(&connection, b"still here")).await.unwrap(),
        b"still here"
    );
    connection.close(quinn::VarInt::from_u32(0), b"done");
    assert_eq!(
        within(connect_and_echo(&client_ep, addr, a)).await.unwrap(),
        b"ping"
    );
    assert!(matches!(next_event(&mut events).await, Event::Accepted(p) if p == b));
}

/// A client endpoint whose TLS offers `alpn` instead of amos/1.
fn client_with_alpn(seed: u8, accept: NodeId, alpn: Vec<Vec<u8>>) -> quinn::Endpoint {
    let mut config = client_config(&identity(seed), only(accept)).unwrap();
    config.alpn_protocols = alpn;
    let quic = QuicClientConfig::try_from(config).unwrap();
    let mut endpoint = quinn::Endpoint::client(loopback()).unwrap();
    endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(quic)));
    endpoint
}

// 6
#[tokio::test]
async fn a_client_without_amos_alpn_cannot_connect() {
    let a = identity(1).node_id();
    let b = identity(2).node_id();
    let (server_ep, addr, _) = server(1, only(b));
    let mut events = spawn_echo_server(server_ep);

    for alpn in [vec![b"amos/99".to_vec()], vec![b"h3".to_vec()], vec![]] {
        let endpoint = client_with_alpn(2, a, alpn.clone());
        let err = within(connect_and_echo(&endpoint, addr, a))
            .await
            .unwrap_err();
        match &err {
            TransportError::Protocol(reason) => {
                assert!(reason.contains("ALPN"), "{alpn:?}: {reason}")
            }
            other => panic!("{alpn:?}: expected an ALPN protocol error, got {other:?}"),
        }
        assert!(
            matches!(
                next_event(&mut events).await,
                Event::HandshakeFailed(TransportError::Protocol(_))
            ),
            "{alpn:?}: server refused too"
        );
    }

    // Control: the same identity with an id we speak connects, at the
    // version it names: amos/1 alone (545333a) or amos/2 (docs/design.md §13).
    for (offer, version) in [
        (vec![b"amos/1".to_vec()], 1),
        (vec![b"amos/2".to_vec(), b"amos/1".to_vec()], 2),
        (vec![b"amos/99".to_vec(), b"amos/2".to_vec()], 2),
    ] {
        let endpoint = client_with_alpn(2, a, offer);
        let conn = within(connect(&endpoint, addr, a)).await.unwrap();
        assert_eq!(negotiated(&conn), Some(version));
        conn.close(quinn::VarInt::from_u32(0), b"done");
        assert_eq!(
            within(connect_and_echo(&endpoint, addr, a)).await.unwrap(),
            b"ping"
        );
    }
}

// Dialling a port where nothing answers is bounded by the caller's timeout.
#[tokio::test]
async fn dialling_a_silent_port_times_out_cleanly() {
    let a = identity(1).node_id();
    // A bound UDP socket that never answers.
    let silent = std::net::UdpSocket::bind(loopback()).unwrap();
    let (client_ep, _) = client(2, only(a));
    let result = within(with_timeout(
        Duration::from_millis(300),
        "dial",
        connect(&client_ep, silent.local_addr().unwrap(), a),
    ))
    .await;
    match result {
        Err(TransportError::Timeout(what)) => assert!(what.contains("dial"), "{what}"),
        other => panic!("expected Timeout, got {other:?}"),
    }
}
