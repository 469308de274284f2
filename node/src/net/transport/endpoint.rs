//! quinn endpoints with the node's identity, dialling a NodeId, and reading
//! the authenticated peer of a connection.
//!
//! Must be called inside a tokio runtime (quinn binds its socket there).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use amos_protocol::{NodeId, NodeIdentity};
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{ConnectError, Connection, Endpoint, Incoming};
use rustls::pki_types::CertificateDer;

use super::error::{from_connect_error, from_connection_error};
use super::tls::{self, PeerAcceptor};
use super::{RefusedBy, TransportError};

fn quinn_client_config(
    identity: &NodeIdentity,
    acceptor: Arc<dyn PeerAcceptor>,
) -> Result<quinn::ClientConfig, TransportError> {
    let tls = tls::client_config(identity, acceptor)?;
    client_config_from(tls, transport())
}

fn client_config_from(
    tls: rustls::ClientConfig,
    transport: Arc<quinn::TransportConfig>,
) -> Result<quinn::ClientConfig, TransportError> {
    let quic = QuicClientConfig::try_from(tls)
        .map_err(|e| TransportError::Config(format!("QUIC client TLS: {e}")))?;
    let mut config = quinn::ClientConfig::new(Arc::new(quic));
    config.transport_config(transport);
    Ok(config)
}

fn quinn_server_config(
    identity: &NodeIdentity,
    acceptor: Arc<dyn PeerAcceptor>,
    transport: Arc<quinn::TransportConfig>,
) -> Result<quinn::ServerConfig, TransportError> {
    let tls = tls::server_config(identity, acceptor)?;
    let quic = QuicServerConfig::try_from(tls)
        .map_err(|e| TransportError::Config(format!("QUIC server TLS: {e}")))?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(quic));
    config.transport_config(transport);
    Ok(config)
}

/// The size of every QUIC packet a connection through a relay pipe sends.
/// The pipe is a stream, so no path MTU limits it; but the handshake's
/// padded packets must fit the first congestion window, and MTU discovery's
/// probes (many kilobytes each, on every connection) would cost a relay
/// more than bigger packets save: a fixed Ethernet-sized packet, no probes.
pub(crate) const PIPE_MTU: u16 = 1452;

/// [`transport`] for a connection through a relay pipe: packets of
/// [`PIPE_MTU`] from the start, no MTU discovery (docs/design.md §7.11).
fn pipe_transport() -> Arc<quinn::TransportConfig> {
    let mut ack = quinn::AckFrequencyConfig::default();
    ack.max_ack_delay(Some(Duration::from_millis(1)));
    let mut config = quinn::TransportConfig::default();
    config.ack_frequency_config(Some(ack));
    config.initial_mtu(PIPE_MTU);
    config.min_mtu(PIPE_MTU);
    config.mtu_discovery_config(None);
    Arc::new(config)
}

/// A dial-only endpoint for relay connections (ALPN
/// [`tls::RELAY_ALPN`]), bound to `bind`: a relay client's connection to its
/// relay, which then carries pipes ([`crate::net::relay`]).
pub(crate) fn relay_client_endpoint(
    bind: SocketAddr,
    identity: &NodeIdentity,
    acceptor: Arc<dyn PeerAcceptor>,
) -> Result<Endpoint, TransportError> {
    let tls = tls::client_config_offering(identity, acceptor, tls::relay_alpn_ids())?;
    // A standing connection must outlive quiet hours, and keep a NAT's
    // mapping open: a keep-alive well inside both timeouts.
    let mut transport = quinn::TransportConfig::default();
    transport.keep_alive_interval(Some(Duration::from_secs(10)));
    let client = client_config_from(tls, Arc::new(transport))?;
    let mut endpoint = Endpoint::client(bind)?;
    endpoint.set_default_client_config(client);
    Ok(endpoint)
}

/// An endpoint over a relay pipe (`socket`): the normal session
/// configuration — the same TLS, keys and ALPN ids as a direct connection
/// — with [`pipe_transport`]'s packet size. With `serve`, it accepts the one
/// connection the pipe carries; without, it dials it.
pub(crate) fn pipe_endpoint(
    socket: Arc<dyn quinn::AsyncUdpSocket>,
    identity: &NodeIdentity,
    acceptor: Arc<dyn PeerAcceptor>,
    serve: bool,
) -> Result<Endpoint, TransportError> {
    let server = if serve {
        Some(quinn_server_config(
            identity,
            acceptor.clone(),
            pipe_transport(),
        )?)
    } else {
        None
    };
    let tls = tls::client_config(identity, acceptor)?;
    let client = client_config_from(tls, pipe_transport())?;
    // Receive buffers as large as the packets (quinn's default is an
    // Ethernet MTU's, and would cut a pipe's packets short).
    let mut config = quinn::EndpointConfig::default();
    config
        .max_udp_payload_size(PIPE_MTU)
        .map_err(|e| TransportError::Config(format!("pipe endpoint: {e}")))?;
    let mut endpoint =
        Endpoint::new_with_abstract_socket(config, server, socket, Arc::new(quinn::TokioRuntime))?;
    endpoint.set_default_client_config(client);
    Ok(endpoint)
}

/// The transport settings of both directions: quinn's defaults, but each
/// side asks the other to acknowledge within a millisecond (the ACK
/// frequency extension) instead of up to 25 ms. A session's last packet —
/// a stream's end — would otherwise wait a delayed ACK before the session
/// may close: 25 ms against an idle sync's 6 (docs/design.md §7.4).
fn transport() -> Arc<quinn::TransportConfig> {
    let mut ack = quinn::AckFrequencyConfig::default();
    ack.max_ack_delay(Some(Duration::from_millis(1)));
    let mut config = quinn::TransportConfig::default();
    config.ack_frequency_config(Some(ack));
    Arc::new(config)
}

/// An endpoint that accepts connections on `addr` (port 0: any free port;
/// read it back with `local_addr()`) and can also dial out from the same
/// socket with [`connect`]. Both directions use `acceptor` for the peer's key.
pub fn server_endpoint(
    addr: SocketAddr,
    identity: &NodeIdentity,
    acceptor: Arc<dyn PeerAcceptor>,
) -> Result<Endpoint, TransportError> {
    let server = quinn_server_config(identity, acceptor.clone(), transport())?;
    let client = quinn_client_config(identity, acceptor)?;
    let mut endpoint = Endpoint::server(server, addr)?;
    endpoint.set_default_client_config(client);
    Ok(endpoint)
}

/// A dial-only endpoint bound to `bind` (e.g. `0.0.0.0:0`, or `[::]:0` to
/// reach IPv6 peers).
pub fn client_endpoint(
    bind: SocketAddr,
    identity: &NodeIdentity,
    acceptor: Arc<dyn PeerAcceptor>,
) -> Result<Endpoint, TransportError> {
    let client = quinn_client_config(identity, acceptor)?;
    let mut endpoint = Endpoint::client(bind)?;
    endpoint.set_default_client_config(client);
    Ok(endpoint)
}

/// Dial `expected` at `addr`. Succeeds only if the peer's key is `expected`
/// and the endpoint's acceptor accepts it ([`TransportError::Refused`] by
/// [`RefusedBy::Us`] otherwise).
///
/// If the *peer* refuses this node's key, the error may surface here or only
/// at the first stream operation on the returned connection (TLS 1.3 lets
/// the client finish before the server has checked the client's key).
/// Bounded by quinn's idle timeout; wrap it in [`super::with_timeout`] for a
/// tighter bound.
pub async fn connect(
    endpoint: &Endpoint,
    addr: SocketAddr,
    expected: NodeId,
) -> Result<Connection, TransportError> {
    let connecting = endpoint
        .connect(addr, &tls::dial_name(&expected))
        .map_err(|e| match e {
            ConnectError::EndpointStopping => {
                TransportError::Closed("the local endpoint is shutting down".into())
            }
            ConnectError::NoDefaultClientConfig => TransportError::Config(
                "the endpoint has no client configuration (use server_endpoint or client_endpoint)"
                    .into(),
            ),
            ConnectError::InvalidRemoteAddress(_) | ConnectError::UnsupportedVersion => {
                TransportError::Unreachable {
                    addr,
                    reason: format!("cannot dial this address from this endpoint: {e}"),
                }
            }
            other => TransportError::Config(format!("cannot start the handshake: {other}")),
        })?;
    let connection = connecting.await.map_err(|e| from_connect_error(addr, e))?;
    // The verifier already checked this; a mismatch here would be a bug in
    // the TLS setup, and must never yield a connection.
    let peer = peer_node_id(&connection)?;
    if peer != expected {
        connection.close(quinn::VarInt::from_u32(0), b"unexpected peer key");
        return Err(TransportError::Refused {
            by: RefusedBy::Us,
            reason: format!("the peer authenticated as {peer}, but we dialled {expected}"),
        });
    }
    check_alpn(&connection)?;
    Ok(connection)
}

/// Complete an incoming handshake; returns the connection and the peer's
/// authenticated NodeId (already accepted by the endpoint's acceptor).
pub async fn accept_incoming(incoming: Incoming) -> Result<(Connection, NodeId), TransportError> {
    let (connection, peer) = accept_any(incoming).await?;
    check_alpn(&connection)?;
    Ok((connection, peer))
}

/// Complete an incoming handshake whatever ALPN id it chose (a session's
/// or the relay protocol's: ask [`is_relay`]); the peer's key was accepted
/// by the endpoint's acceptor.
pub(crate) async fn accept_any(incoming: Incoming) -> Result<(Connection, NodeId), TransportError> {
    let connection = incoming.await.map_err(from_connection_error)?;
    let peer = peer_node_id(&connection)?;
    Ok((connection, peer))
}

/// Whether a connection's handshake chose the relay protocol
/// ([`tls::RELAY_ALPN`] or a later version).
pub(crate) fn is_relay(connection: &Connection) -> bool {
    relay_version(connection).is_some()
}

/// The relay protocol version a connection's handshake chose, if it chose
/// the relay protocol ([`tls::relay_version`]).
pub(crate) fn relay_version(connection: &Connection) -> Option<u8> {
    connection
        .handshake_data()
        .and_then(|data| data.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
        .and_then(|data| data.protocol)
        .and_then(|p| tls::relay_version(&p))
}

/// Dial a relay `expected` at `addr` over `endpoint` (from
/// [`relay_client_endpoint`]): as [`connect`], but the handshake must have
/// chosen the relay protocol.
pub(crate) async fn connect_relay(
    endpoint: &Endpoint,
    addr: SocketAddr,
    expected: NodeId,
) -> Result<Connection, TransportError> {
    let connecting = endpoint
        .connect(addr, &tls::dial_name(&expected))
        .map_err(|e| TransportError::Unreachable {
            addr,
            reason: format!("cannot dial the relay at this address: {e}"),
        })?;
    let connection = connecting.await.map_err(|e| from_connect_error(addr, e))?;
    let peer = peer_node_id(&connection)?;
    if peer != expected || !is_relay(&connection) {
        connection.close(quinn::VarInt::from_u32(0), b"not the relay dialled");
        return Err(TransportError::Refused {
            by: RefusedBy::Us,
            reason: format!(
                "{peer} at {addr} is not the relay {expected}, or speaks no relay protocol"
            ),
        });
    }
    Ok(connection)
}

/// The NodeId the peer authenticated with in the handshake.
pub fn peer_node_id(connection: &Connection) -> Result<NodeId, TransportError> {
    let identity = connection.peer_identity().ok_or_else(|| {
        TransportError::Protocol("the peer presented no key in the handshake".into())
    })?;
    let chain = identity
        .downcast::<Vec<CertificateDer<'static>>>()
        .map_err(|_| TransportError::Protocol("unexpected TLS peer identity type".into()))?;
    match chain.as_slice() {
        [spki] => tls::spki_to_node_id(spki.as_ref()).ok_or_else(|| {
            TransportError::Protocol("the peer's key is not an Ed25519 raw public key".into())
        }),
        _ => Err(TransportError::Protocol(
            "the peer presented a certificate chain, not a single raw public key".into(),
        )),
    }
}

pub(crate) fn check_alpn(connection: &Connection) -> Result<(), TransportError> {
    // TLS chose one of the ids we offered (newest first), or none at all.
    match super::version::negotiated(connection) {
        Some(v) if v <= super::version::speaks().version => Ok(()),
        other => {
            connection.close(quinn::VarInt::from_u32(0), b"ALPN amos/N required");
            Err(TransportError::Protocol(format!(
                "the peer negotiated no amos protocol version we speak ({other:?})"
            )))
        }
    }
}

/// The endpoint's bind address for dialling `addr`.
pub(crate) fn bind_for(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V4(a) if a.ip().is_loopback() => SocketAddr::from(([127, 0, 0, 1], 0)),
        SocketAddr::V4(_) => SocketAddr::from(([0, 0, 0, 0], 0)),
        SocketAddr::V6(_) => SocketAddr::from(([0u16; 8], 0)),
    }
}
