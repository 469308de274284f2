//! mDNS discovery (docs/design.md §7): `amos serve` advertises
//! `_amos._udp.local.` and learns the current addresses of peers it already
//! has; `amos discover` lists the nodes it sees.
//!
//! An announcement carries, in TXT, the protocol version (`v=1`), the QUIC
//! port (`port=`) and — when the node has a mesh key — a tag (`h=`): the
//! first 16 bytes, hex, of `blake3::keyed_hash(derive_key("amos mdns v1",
//! mesh key), NodeId)`. Members of the mesh recompute the tag for each
//! registered peer and so recognise them; strangers learn no identity. The
//! instance and host names are the tag (or random without a key), never the
//! NodeId.
//!
//! Owns: the advertisement and browse of `amos serve` ([`Discovery`]), the
//! one-shot browse of `amos discover` ([`discover`]), and the choice of
//! which announced address to store for a peer ([`dial_addr`]).
//!
//! Must never: register a peer, change a policy or trust a node because of
//! an announcement. Discovery only updates the address of a peer that is
//! already registered; whether a node is who it claims is decided by the
//! QUIC key check on every connection, so a forged announcement can at worst
//! point us at an address that then fails that check.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use amos_protocol::MeshKey;
use amos_protocol::NodeId;
use mdns_sd::{IfKind, ResolvedService, ServiceDaemon, ServiceEvent, ServiceInfo};
use rand::RngExt;
use serde::Serialize;
use tracing::{debug, info, warn};

use crate::api::node::Node;
use crate::error::{NodeError, Result};
use crate::home::Home;

/// The DNS-SD service type amos nodes advertise.
pub const SERVICE_TYPE: &str = "_amos._udp.local.";
/// The sync protocol version announced in TXT `v`.
pub const PROTOCOL_VERSION: &str = "1";
/// `blake3::derive_key` context for the tag key.
const TAG_CONTEXT: &str = "amos mdns v1";
/// Bytes of the keyed hash kept in the tag.
const TAG_BYTES: usize = 16;
/// The longest wait for the mDNS daemon to confirm a command.
const DAEMON_TIMEOUT: Duration = Duration::from_secs(2);
/// How often `amos serve` matches the announcements it holds against the
/// peers table again.
const RECHECK_EVERY: Duration = Duration::from_secs(10);

fn mdns_error(what: &str) -> impl FnOnce(mdns_sd::Error) -> NodeError + '_ {
    move |e| NodeError::Failed(format!("mDNS: {what}: {e}"))
}

/// The tag of `node` under the mesh key: what `h=` carries.
pub fn node_tag(key: &MeshKey, node: &NodeId) -> String {
    let k = blake3::derive_key(TAG_CONTEXT, key.as_bytes());
    let h = blake3::keyed_hash(&k, &node.0);
    data_encoding::HEXLOWER.encode(&h.as_bytes()[..TAG_BYTES])
}

/// What one announcement says, decoded from a resolved service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announcement {
    pub addrs: Vec<IpAddr>,
    pub port: u16,
    pub version: Option<String>,
    pub tag: Option<String>,
}

impl Announcement {
    fn from_resolved(info: &ResolvedService) -> Announcement {
        let mut addrs: Vec<IpAddr> = info
            .get_addresses()
            .iter()
            .map(|a| a.to_ip_addr())
            .collect();
        addrs.sort();
        addrs.dedup();
        let prop = |k: &str| info.get_property_val_str(k).map(str::to_owned);
        Announcement {
            addrs,
            port: info.get_port(),
            version: prop("v"),
            tag: prop("h").filter(|t| is_tag(t)),
        }
    }

    /// Only version-1 announcements are used.
    fn speaks_our_protocol(&self) -> bool {
        self.version.as_deref() == Some(PROTOCOL_VERSION)
    }
}

fn is_tag(t: &str) -> bool {
    t.len() == 2 * TAG_BYTES && t.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whom an announcement's tag names, among us and our registered peers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recognised {
    /// This node's own announcement.
    Me,
    /// A registered peer (its NodeId).
    Peer(NodeId),
    /// No tag, another mesh, or a node we have not registered.
    Unknown,
}

/// Match `tag` against this node and its registered peers.
pub fn recognise(
    tag: Option<&str>,
    key: Option<&MeshKey>,
    me: &NodeId,
    peers: &[NodeId],
) -> Recognised {
    let (Some(tag), Some(key)) = (tag, key) else {
        return Recognised::Unknown;
    };
    if node_tag(key, me) == tag {
        return Recognised::Me;
    }
    peers
        .iter()
        .find(|p| node_tag(key, p) == tag)
        .map_or(Recognised::Unknown, |p| Recognised::Peer(*p))
}

/// The address to store for a peer that announced `addrs` and `port`, given
/// the address we have (`current`). Keeps the current IP when it is still
/// announced; otherwise prefers IPv4 that is neither loopback nor
/// link-local, then global IPv6, then loopback (a node on this host).
/// Link-local IPv6 is never chosen (its scope is ours, not the peer's).
/// `None` when nothing usable was announced.
pub fn dial_addr(addrs: &[IpAddr], port: u16, current: Option<&str>) -> Option<SocketAddr> {
    if port == 0 {
        return None;
    }
    if let Some(cur) = current.and_then(|c| c.parse::<SocketAddr>().ok())
        && addrs.contains(&cur.ip())
    {
        return Some(SocketAddr::new(cur.ip(), port));
    }
    let rank = |ip: &IpAddr| match ip {
        IpAddr::V4(v4) if !v4.is_loopback() && !v4.is_link_local() && !v4.is_unspecified() => {
            Some(0)
        }
        IpAddr::V6(v6)
            if !v6.is_loopback()
                && !v6.is_unspecified()
                && (v6.segments()[0] & 0xffc0) != 0xfe80 =>
        {
            Some(1)
        }
        ip if ip.is_loopback() => Some(2),
        _ => None,
    };
    addrs
        .iter()
        .filter_map(|ip| rank(ip).map(|r| (r, *ip)))
        .min()
        .map(|(_, ip)| SocketAddr::new(ip, port))
}

// ---------------------------------------------------------------------------
// `amos serve`: advertise and keep peers' addresses current

/// Discovery running inside `amos serve`. [`Discovery::stop`] withdraws the
/// announcement (goodbye packets) and stops the daemon.
pub struct Discovery {
    daemon: ServiceDaemon,
    fullname: String,
    browse: tokio::task::JoinHandle<()>,
}

impl Discovery {
    /// Advertise this node's QUIC listener at `local` and browse for peers.
    /// An unspecified listening IP is advertised with the addresses of every
    /// interface of its family, following interfaces as they come and go; a
    /// specific one on its own interface only, which must be up now (mdns-sd
    /// announces fixed addresses only on interfaces it knows at
    /// registration). Must run inside a tokio runtime.
    pub fn start(home: &Home, local: SocketAddr) -> Result<Discovery> {
        let node = Node::open(home)?;
        let me = node.node_id();
        let key = node.mesh_key()?;
        drop(node);
        let daemon = ServiceDaemon::new().map_err(mdns_error("starting the daemon"))?;
        let ip = local.ip();
        let tag = key.as_ref().map(|k| node_tag(k, &me));
        // The instance and host name reveal nothing the TXT does not.
        let label = match &tag {
            Some(t) => format!("amos-{}", &t[..16]),
            None => format!("amos-{:016x}", rand::rng().random::<u64>()),
        };
        let port = local.port().to_string();
        let mut txt = vec![("v", PROTOCOL_VERSION), ("port", port.as_str())];
        if let Some(t) = &tag {
            txt.push(("h", t.as_str()));
        }
        let host = format!("{label}.local.");
        let mut service = if ip.is_unspecified() {
            ServiceInfo::new(SERVICE_TYPE, &label, &host, "", local.port(), &txt[..])
                .map(ServiceInfo::enable_addr_auto)
        } else {
            ServiceInfo::new(SERVICE_TYPE, &label, &host, ip, local.port(), &txt[..])
        }
        .map_err(mdns_error("describing the service"))?;
        service.set_interfaces(vec![match ip {
            IpAddr::V4(v4) if v4.is_unspecified() => IfKind::IPv4,
            ip if ip.is_unspecified() => IfKind::All,
            ip => IfKind::Addr(ip),
        }]);
        let fullname = service.get_fullname().to_owned();
        daemon
            .register(service)
            .map_err(mdns_error("advertising"))?;
        let events = daemon
            .browse(SERVICE_TYPE)
            .map_err(mdns_error("browsing"))?;
        info!(
            port = local.port(),
            tagged = tag.is_some(),
            "mDNS: advertising {SERVICE_TYPE}"
        );
        let browse = tokio::spawn(keep_addresses(home.clone(), me, events));
        Ok(Discovery {
            daemon,
            fullname,
            browse,
        })
    }

    /// Withdraw the announcement and stop the daemon (bounded waits).
    pub fn stop(self) {
        self.browse.abort();
        match self.daemon.unregister(&self.fullname) {
            Ok(rx) => {
                let _ = rx.recv_timeout(DAEMON_TIMEOUT);
            }
            Err(e) => debug!("mDNS: unregister: {e}"),
        }
        if let Ok(rx) = self.daemon.shutdown() {
            let _ = rx.recv_timeout(DAEMON_TIMEOUT);
        }
    }
}

/// Follow announcements and store registered peers' addresses: on every
/// resolution, and every [`RECHECK_EVERY`] for all current announcements
/// (a peer registered after its announcement was seen still gets an address).
async fn keep_addresses(home: Home, me: NodeId, events: mdns_sd::Receiver<ServiceEvent>) {
    let mut current: BTreeMap<String, Announcement> = BTreeMap::new();
    let mut recheck = tokio::time::interval(RECHECK_EVERY);
    loop {
        let changed: Vec<Announcement> = tokio::select! {
            event = events.recv_async() => match event {
                Ok(ServiceEvent::ServiceResolved(info)) => {
                    let seen = Announcement::from_resolved(&info);
                    current.insert(info.get_fullname().to_owned(), seen.clone());
                    vec![seen]
                }
                Ok(ServiceEvent::ServiceRemoved(_, fullname)) => {
                    current.remove(&fullname);
                    continue;
                }
                Ok(_) => continue,
                Err(_) => return,
            },
            _ = recheck.tick() => current.values().cloned().collect(),
        };
        if changed.is_empty() {
            continue;
        }
        let home = home.clone();
        let r = tokio::task::spawn_blocking(move || {
            changed
                .iter()
                .try_for_each(|seen| learn_address(&home, &me, seen))
        })
        .await;
        match r {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!("mDNS: cannot record a peer's address: {e}"),
            Err(e) => warn!("mDNS: {e}"),
        }
    }
}

/// An announcement was resolved: if its tag names a registered peer, store
/// the address it announced (only that: never a new peer, never a policy).
fn learn_address(home: &Home, me: &NodeId, seen: &Announcement) -> Result<()> {
    if !seen.speaks_our_protocol() || seen.tag.is_none() {
        return Ok(());
    }
    let mut node = Node::open(home)?;
    let key = node.mesh_key()?;
    let peers = node.peer_list()?;
    let ids: Vec<NodeId> = peers
        .iter()
        .filter_map(|p| p.node_id.parse().ok())
        .collect();
    let Recognised::Peer(peer) = recognise(seen.tag.as_deref(), key.as_ref(), me, &ids) else {
        return Ok(());
    };
    let current = peers
        .iter()
        .find(|p| p.node_id == peer.to_string())
        .and_then(|p| p.addr.clone());
    let Some(addr) = dial_addr(&seen.addrs, seen.port, current.as_deref()) else {
        return Ok(());
    };
    if node.peer_set_addr(&peer, &addr.to_string())? {
        info!(peer = %peer, %addr, "mDNS: peer address updated");
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// `amos discover`

/// One node seen by `amos discover`.
#[derive(Debug, Clone, Serialize)]
pub struct SeenNode {
    /// Announced IP addresses.
    pub addrs: Vec<String>,
    /// Announced QUIC port.
    pub port: u16,
    /// The registered peer it is, if its tag names one.
    pub peer: Option<String>,
    /// Whether it is a registered peer.
    pub known: bool,
    /// Whether it is this node's own announcement.
    #[serde(rename = "self")]
    pub itself: bool,
    /// The protocol version it announced.
    pub version: Option<String>,
}

/// Browse for `timeout` and list the amos nodes seen, recognising our
/// registered peers by their tag. Changes nothing.
pub fn discover(home: &Home, timeout: Duration) -> Result<Vec<SeenNode>> {
    let node = Node::open(home)?;
    let me = node.node_id();
    let key = node.mesh_key()?;
    let peers: Vec<NodeId> = node
        .peer_list()?
        .iter()
        .filter_map(|p| p.node_id.parse().ok())
        .collect();
    drop(node);
    let daemon = ServiceDaemon::new().map_err(mdns_error("starting the daemon"))?;
    let events = daemon
        .browse(SERVICE_TYPE)
        .map_err(mdns_error("browsing"))?;
    let deadline = Instant::now() + timeout;
    let mut seen: BTreeMap<String, Announcement> = BTreeMap::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match events.recv_timeout(left) {
            Ok(ServiceEvent::ServiceResolved(info)) => {
                seen.insert(
                    info.get_fullname().to_owned(),
                    Announcement::from_resolved(&info),
                );
            }
            Ok(ServiceEvent::ServiceRemoved(_, fullname)) => {
                seen.remove(&fullname);
            }
            Ok(_) => {}
            Err(mdns_sd::RecvTimeoutError::Timeout) => break,
            Err(mdns_sd::RecvTimeoutError::Disconnected) => {
                return Err(NodeError::Failed("mDNS: the daemon stopped".into()));
            }
        }
    }
    let _ = daemon.stop_browse(SERVICE_TYPE);
    if let Ok(rx) = daemon.shutdown() {
        let _ = rx.recv_timeout(DAEMON_TIMEOUT);
    }
    Ok(seen
        .into_values()
        .map(|a| {
            let who = recognise(a.tag.as_deref(), key.as_ref(), &me, &peers);
            SeenNode {
                addrs: a.addrs.iter().map(IpAddr::to_string).collect(),
                port: a.port,
                peer: match &who {
                    Recognised::Peer(p) => Some(p.to_string()),
                    _ => None,
                },
                known: matches!(who, Recognised::Peer(_)),
                itself: who == Recognised::Me,
                version: a.version,
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn tags_depend_on_key_and_node_and_hide_the_node_id() {
        let k1 = MeshKey::from_bytes([1; 32]);
        let k2 = MeshKey::from_bytes([2; 32]);
        let (a, b) = (NodeId([7; 32]), NodeId([8; 32]));
        let t = node_tag(&k1, &a);
        assert!(is_tag(&t), "{t}");
        assert_eq!(t, node_tag(&k1, &a));
        assert_ne!(t, node_tag(&k1, &b));
        assert_ne!(t, node_tag(&k2, &a));
        assert!(!a.to_string().contains(&t) && !data_encoding::HEXLOWER.encode(&a.0).contains(&t));
    }

    #[test]
    fn recognise_needs_the_key_and_a_registered_peer() {
        let key = MeshKey::from_bytes([3; 32]);
        let other = MeshKey::from_bytes([4; 32]);
        let (me, p, q) = (NodeId([1; 32]), NodeId([2; 32]), NodeId([3; 32]));
        let tp = node_tag(&key, &p);
        let cases = [
            (
                Some(tp.as_str()),
                Some(&key),
                vec![p, q],
                Recognised::Peer(p),
            ),
            (Some(tp.as_str()), Some(&key), vec![q], Recognised::Unknown),
            (
                Some(tp.as_str()),
                Some(&other),
                vec![p],
                Recognised::Unknown,
            ),
            (Some(tp.as_str()), None, vec![p], Recognised::Unknown),
            (None, Some(&key), vec![p], Recognised::Unknown),
        ];
        for (tag, k, peers, want) in cases {
            assert_eq!(recognise(tag, k, &me, &peers), want, "{tag:?} {peers:?}");
        }
        let mine = node_tag(&key, &me);
        assert_eq!(
            recognise(Some(&mine), Some(&key), &me, &[p]),
            Recognised::Me
        );
    }

    /// An announcement only ever sets the address of a registered peer.
    #[test]
    fn announcements_update_registered_peers_and_never_add_one() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::new(tmp.path().join("home"));
        Node::init(&home, None).unwrap();
        let mut node = Node::open(&home).unwrap();
        let key = node.mesh_key_generate().unwrap();
        let me = node.node_id();
        let (peer, stranger) = (NodeId([5; 32]), NodeId([6; 32]));
        node.peer_add(&peer.to_string(), Some("10.9.9.9:1"), "full")
            .unwrap();
        let seen = |id: &NodeId, version: &str| Announcement {
            addrs: vec![ip("10.77.0.2"), ip("fe80::1")],
            port: 4800,
            version: Some(version.into()),
            tag: Some(node_tag(&key, id)),
        };
        let addrs = |node: &Node| {
            node.peer_list()
                .unwrap()
                .into_iter()
                .map(|p| (p.node_id, p.addr))
                .collect::<Vec<_>>()
        };
        let before = addrs(&node);
        for a in [seen(&stranger, "1"), seen(&me, "1"), seen(&peer, "2")] {
            learn_address(&home, &me, &a).unwrap();
            assert_eq!(addrs(&node), before, "{a:?}");
        }
        learn_address(&home, &me, &seen(&peer, "1")).unwrap();
        assert_eq!(
            addrs(&node),
            vec![(peer.to_string(), Some("10.77.0.2:4800".to_owned()))]
        );
    }

    #[test]
    fn dial_addr_prefers_the_current_ip_then_routable_ones() {
        let addrs = [
            ip("127.0.0.1"),
            ip("10.77.0.2"),
            ip("fe80::1"),
            ip("2001:db8::2"),
        ];
        let table = [
            // current IP still announced: keep it, take the new port
            (Some("10.77.0.2:4000"), 4747, Some("10.77.0.2:4747")),
            (Some("127.0.0.1:4000"), 4747, Some("127.0.0.1:4747")),
            // current IP gone or none: routable IPv4 first
            (Some("10.1.1.1:4747"), 4800, Some("10.77.0.2:4800")),
            (None, 4747, Some("10.77.0.2:4747")),
            (Some("not an address"), 4747, Some("10.77.0.2:4747")),
            (None, 0, None),
        ];
        for (cur, port, want) in table {
            assert_eq!(
                dial_addr(&addrs, port, cur).map(|a| a.to_string()),
                want.map(str::to_owned),
                "{cur:?} {port}"
            );
        }
        assert_eq!(
            dial_addr(&[ip("fe80::1"), ip("2001:db8::2")], 1, None),
            Some("[2001:db8::2]:1".parse().unwrap())
        );
        assert_eq!(dial_addr(&[ip("fe80::1")], 1, None), None);
        assert_eq!(
            dial_addr(&[ip("fe80::1"), ip("127.0.0.1")], 1, None),
            Some("127.0.0.1:1".parse().unwrap())
        );
    }
}
