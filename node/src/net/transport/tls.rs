//! rustls configurations: the node's ed25519 identity as an RFC 7250 raw
//! public key, mutual authentication, keys checked by a [`PeerAcceptor`] on
//! every handshake.
//!
//! Always the *ring* provider (`builder_with_provider`): with aws-lc-rs also
//! compiled in, rustls's process-default provider is ambiguous and
//! `ClientConfig::builder()` panics.
//!
//! Session resumption and 0-RTT are off on both sides: a resumed session
//! would skip the verifiers, and the peer's key must be checked against the
//! current peers table on every connection.

use std::fmt;
use std::sync::Arc;

use amos_protocol::{NodeId, NodeIdentity};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{AlwaysResolvesClientRawPublicKeys, Resumption};
use rustls::crypto::{
    CryptoProvider, WebPkiSupportedAlgorithms, verify_tls13_signature_with_raw_key,
};
use rustls::pki_types::{
    CertificateDer, PrivatePkcs8KeyDer, ServerName, SubjectPublicKeyInfoDer, UnixTime,
};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{AlwaysResolvesServerRawPublicKeys, NoServerSessionStorage};
use rustls::sign::CertifiedKey;
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, DistinguishedName, Error, OtherError,
    ServerConfig, SignatureScheme,
};

use super::TransportError;

/// The application protocols (ALPN ids) this node offers, newest first:
/// `amos/N` for every session protocol version it speaks
/// ([`super::version::speaks`], docs/design.md §13). TLS picks the newest
/// both sides offer: an older node is still reached.
pub fn alpn_ids() -> Vec<Vec<u8>> {
    amos_protocol::wire::alpn_offer(super::version::speaks().version)
}

/// The ALPN id of the relay protocol's first version (docs/design.md
/// §7.11): a relay client's connection to its relay, carrying pipes.
/// Every server offers it after the session ids; a relay client offers
/// only relay ids, a session dialler never.
pub const RELAY_ALPN: &[u8] = b"amos-relay/1";

/// The relay protocol's second version: the first's requests, and the
/// relay-held mailbox's (`Hold`, `List`, `Fetch`, `Drop`; docs/design.md
/// §8.2). Offered before [`RELAY_ALPN`]: a server picks it when both ends
/// speak it, and an older end is still reached on version 1.
pub const RELAY_ALPN_2: &[u8] = b"amos-relay/2";

/// The relay protocol's ids this node speaks, newest first.
pub fn relay_alpn_ids() -> Vec<Vec<u8>> {
    vec![RELAY_ALPN_2.to_vec(), RELAY_ALPN.to_vec()]
}

/// The relay protocol version an ALPN id names (`None`: not a relay id).
pub fn relay_version(alpn: &[u8]) -> Option<u8> {
    if alpn == RELAY_ALPN_2 {
        Some(2)
    } else if alpn == RELAY_ALPN {
        Some(1)
    } else {
        None
    }
}

/// What a server offers: the session ids, then the relay protocol's.
fn server_alpn_ids() -> Vec<Vec<u8>> {
    let mut ids = alpn_ids();
    ids.extend(relay_alpn_ids());
    ids
}

/// Decides, on every handshake, whether a peer's key is acceptable (e.g. "is
/// it in the current peers table, or the inviter of a pending pairing?").
///
/// Called synchronously inside the TLS handshake on the runtime's thread:
/// answer from memory (a cached set), do not block.
pub trait PeerAcceptor: Send + Sync + 'static {
    /// Whether `peer` may complete a handshake with us.
    fn accept(&self, peer: &NodeId) -> bool;
}

impl<F> PeerAcceptor for F
where
    F: Fn(&NodeId) -> bool + Send + Sync + 'static,
{
    fn accept(&self, peer: &NodeId) -> bool {
        self(peer)
    }
}

/// DER prefix of an Ed25519 SubjectPublicKeyInfo (RFC 8410): SEQUENCE {
/// SEQUENCE { OID 1.3.101.112 }, BIT STRING (0 unused bits) }, then the 32
/// key bytes.
const ED25519_SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

/// DER prefix of a PKCS#8 v1 Ed25519 private key (RFC 8410): SEQUENCE {
/// INTEGER 0, SEQUENCE { OID 1.3.101.112 }, OCTET STRING { OCTET STRING
/// (32-byte seed) } }.
const ED25519_PKCS8_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

/// Suffix of the TLS server name `connect` dials: `<node id in base32>.amos`.
const DIAL_NAME_SUFFIX: &str = ".amos";

/// The SubjectPublicKeyInfo DER a node presents as its raw public key.
pub fn node_id_to_spki(id: &NodeId) -> Vec<u8> {
    let mut der = Vec::with_capacity(ED25519_SPKI_PREFIX.len() + 32);
    der.extend_from_slice(&ED25519_SPKI_PREFIX);
    der.extend_from_slice(&id.0);
    der
}

/// The NodeId in an Ed25519 SubjectPublicKeyInfo DER; `None` for anything
/// else (another algorithm, trailing bytes, an X.509 certificate).
pub fn spki_to_node_id(der: &[u8]) -> Option<NodeId> {
    let key = der.strip_prefix(ED25519_SPKI_PREFIX.as_slice())?;
    let key: [u8; 32] = key.try_into().ok()?;
    Some(NodeId(key))
}

/// The TLS server name under which [`super::connect`] dials `expected`. The
/// client's verifier reads the expected key back from it. SNI is disabled,
/// so this name never goes on the wire.
pub fn dial_name(expected: &NodeId) -> String {
    format!("{expected}{DIAL_NAME_SUFFIX}")
}

fn expected_from_dial_name(name: &ServerName<'_>) -> Option<NodeId> {
    match name {
        ServerName::DnsName(dns) => dns
            .as_ref()
            .strip_suffix(DIAL_NAME_SUFFIX)
            .and_then(|id| id.parse().ok()),
        _ => None,
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The node's key as rustls needs it: the SPKI as the single "certificate",
/// and an Ed25519 signing key loaded from a PKCS#8 v1 document.
fn certified_key(identity: &NodeIdentity) -> Result<Arc<CertifiedKey>, TransportError> {
    let mut pkcs8 = Vec::with_capacity(ED25519_PKCS8_PREFIX.len() + 32);
    pkcs8.extend_from_slice(&ED25519_PKCS8_PREFIX);
    pkcs8.extend_from_slice(&identity.secret());
    let key = rustls::crypto::ring::sign::any_eddsa_type(&PrivatePkcs8KeyDer::from(pkcs8))
        .map_err(|e| TransportError::Config(format!("cannot load the identity key: {e}")))?;
    let spki = node_id_to_spki(&identity.node_id());
    // The signing key must be the identity's: compare its public half.
    match key.public_key() {
        Some(public) if public.as_ref() == spki.as_slice() => {}
        _ => {
            return Err(TransportError::Config(
                "the TLS signing key does not match the node identity".into(),
            ));
        }
    }
    Ok(Arc::new(CertifiedKey::new(
        vec![CertificateDer::from(spki)],
        key,
    )))
}

/// A refusal with a readable reason (shown locally in the handshake error).
struct KeyRefused(String);

impl fmt::Debug for KeyRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for KeyRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for KeyRefused {}

fn refuse(reason: String) -> Error {
    Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(KeyRefused(
        reason,
    )))))
}

/// The one verifier for both directions.
struct PeerVerifier {
    acceptor: Arc<dyn PeerAcceptor>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl fmt::Debug for PeerVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerVerifier").finish_non_exhaustive()
    }
}

impl PeerVerifier {
    fn new(acceptor: Arc<dyn PeerAcceptor>, provider: &CryptoProvider) -> Self {
        PeerVerifier {
            acceptor,
            algorithms: provider.signature_verification_algorithms,
        }
    }

    /// The peer's NodeId, if its raw key is an Ed25519 key and alone.
    fn peer_key(
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
    ) -> Result<NodeId, Error> {
        if !intermediates.is_empty() {
            return Err(CertificateError::BadEncoding.into());
        }
        spki_to_node_id(end_entity.as_ref()).ok_or_else(|| CertificateError::BadEncoding.into())
    }

    fn check_accepted(&self, peer: &NodeId) -> Result<(), Error> {
        if self.acceptor.accept(peer) {
            Ok(())
        } else {
            Err(refuse(format!("key {peer} is not an accepted peer")))
        }
    }

    fn verify_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        if dss.scheme != SignatureScheme::ED25519 {
            return Err(rustls::PeerMisbehaved::SignedHandshakeWithUnadvertisedSigScheme.into());
        }
        verify_tls13_signature_with_raw_key(
            message,
            &SubjectPublicKeyInfoDer::from(cert.as_ref()),
            dss,
            &self.algorithms,
        )
    }
}

impl ServerCertVerifier for PeerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let peer = Self::peer_key(end_entity, intermediates)?;
        let expected = expected_from_dial_name(server_name).ok_or_else(|| {
            Error::General(format!(
                "server name {server_name:?} names no NodeId: dial through crate::net::transport::connect"
            ))
        })?;
        if peer != expected {
            return Err(refuse(format!(
                "the peer at this address has key {peer}, but we dialled {expected}"
            )));
        }
        self.check_accepted(&peer)?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        Err(Error::General("TLS 1.2 is not supported".into()))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.verify_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        vec![SignatureScheme::ED25519]
    }

    fn requires_raw_public_keys(&self) -> bool {
        true
    }
}

impl ClientCertVerifier for PeerVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        let peer = Self::peer_key(end_entity, intermediates)?;
        self.check_accepted(&peer)?;
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        Err(Error::General("TLS 1.2 is not supported".into()))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.verify_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        vec![SignatureScheme::ED25519]
    }

    fn requires_raw_public_keys(&self) -> bool {
        true
    }
}

fn config_error(e: Error) -> TransportError {
    TransportError::Config(format!("TLS: {e}"))
}

/// The server side: presents `identity`'s raw key, requires the client's,
/// and accepts it only if `acceptor` does.
pub fn server_config(
    identity: &NodeIdentity,
    acceptor: Arc<dyn PeerAcceptor>,
) -> Result<ServerConfig, TransportError> {
    let provider = provider();
    let verifier = Arc::new(PeerVerifier::new(acceptor, &provider));
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(config_error)?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(Arc::new(AlwaysResolvesServerRawPublicKeys::new(
            certified_key(identity)?,
        )));
    config.alpn_protocols = server_alpn_ids();
    config.session_storage = Arc::new(NoServerSessionStorage {});
    config.send_tls13_tickets = 0;
    config.max_early_data_size = 0;
    Ok(config)
}

/// The client side: presents `identity`'s raw key, and accepts the server's
/// only if it is the NodeId in the dialled server name (see [`dial_name`])
/// and `acceptor` accepts it.
pub fn client_config(
    identity: &NodeIdentity,
    acceptor: Arc<dyn PeerAcceptor>,
) -> Result<ClientConfig, TransportError> {
    client_config_offering(identity, acceptor, alpn_ids())
}

/// [`client_config`] offering only `alpn` (the relay protocol's id).
pub fn client_config_offering(
    identity: &NodeIdentity,
    acceptor: Arc<dyn PeerAcceptor>,
    alpn: Vec<Vec<u8>>,
) -> Result<ClientConfig, TransportError> {
    let provider = provider();
    let verifier = Arc::new(PeerVerifier::new(acceptor, &provider));
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(config_error)?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_client_cert_resolver(Arc::new(AlwaysResolvesClientRawPublicKeys::new(
            certified_key(identity)?,
        )));
    config.alpn_protocols = alpn;
    config.resumption = Resumption::disabled();
    config.enable_sni = false;
    config.enable_early_data = false;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spki_round_trips_and_rejects_other_encodings() {
        let id = NodeIdentity::from_secret([7; 32]).node_id();
        let spki = node_id_to_spki(&id);
        assert_eq!(spki.len(), 44);
        assert_eq!(spki_to_node_id(&spki), Some(id));
        assert_eq!(spki_to_node_id(&spki[..43]), None);
        let mut long = spki.clone();
        long.push(0);
        assert_eq!(spki_to_node_id(&long), None);
        let mut other_alg = spki.clone();
        other_alg[8] = 0x71; // Ed448's OID ends in 0x71
        assert_eq!(spki_to_node_id(&other_alg), None);
    }

    #[test]
    fn certified_key_presents_the_identity_key() {
        let identity = NodeIdentity::from_secret([9; 32]);
        let key = certified_key(&identity).unwrap();
        assert_eq!(key.cert.len(), 1);
        assert_eq!(
            spki_to_node_id(key.cert[0].as_ref()),
            Some(identity.node_id())
        );
        // rustls's own SPKI for the loaded key equals the hand-built one.
        assert_eq!(
            key.key.public_key().unwrap().as_ref(),
            node_id_to_spki(&identity.node_id()).as_slice()
        );
    }

    #[test]
    fn dial_name_is_a_valid_server_name_and_round_trips() {
        for seed in [0u8, 1, 200, 255] {
            let id = NodeIdentity::from_secret([seed; 32]).node_id();
            let name = ServerName::try_from(dial_name(&id)).unwrap();
            assert_eq!(expected_from_dial_name(&name), Some(id));
        }
        let other = ServerName::try_from("example.org").unwrap();
        assert_eq!(expected_from_dial_name(&other), None);
    }

    #[test]
    fn configs_build_with_ring_only() {
        let identity = NodeIdentity::from_secret([3; 32]);
        let acceptor: Arc<dyn PeerAcceptor> = Arc::new(|_: &NodeId| true);
        let server = server_config(&identity, acceptor.clone()).unwrap();
        let client = client_config(&identity, acceptor).unwrap();
        assert_eq!(server.alpn_protocols[..alpn_ids().len()], alpn_ids());
        assert_eq!(
            server.alpn_protocols[alpn_ids().len()..],
            [RELAY_ALPN_2.to_vec(), RELAY_ALPN.to_vec()],
            "the relay ids after the session ids, newest first"
        );
        assert_eq!(relay_version(RELAY_ALPN), Some(1));
        assert_eq!(relay_version(RELAY_ALPN_2), Some(2));
        assert_eq!(relay_version(b"amos/1"), None);
        assert_eq!(client.alpn_protocols, alpn_ids());
        assert_eq!(alpn_ids().last(), Some(&b"amos/1".to_vec()), "545333a's id");
        assert!(!client.enable_sni);
        assert_eq!(server.send_tls13_tickets, 0);
    }
}
