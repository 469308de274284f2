//! A mailbox a relay holds, the client's side (docs/design.md §8.2,
//! §7.11), and the mailbox pass every front end runs ([`mailbox_pass`]:
//! directories and relays alike).
//!
//! The relay is just another place a mailbox lives: this node keeps a
//! **spool**, a directory in its own home per (relay, peer)
//! (`HOME/relay-mailbox/RELAY-PEER/`), that mirrors what the relay holds
//! for the pair, and runs the directory mailbox's own logic over it
//! ([`Node::mailbox_sync`]: what to post, the watermarks, the import
//! through the gate, removing a bundle only after every fact of it
//! committed). One exchange:
//!
//! 1. list what the relay holds between the two (relay protocol 2);
//! 2. forget spooled bundles the relay no longer holds (ours: the peer
//!    took them, or they expired; theirs: taken or expired);
//! 3. fetch the peer's bundles for this node not spooled yet
//!    (`in-ID.amosb`, written atomically);
//! 4. run [`Node::mailbox_sync`] over the spool;
//! 5. acknowledge (`Drop`) each fetched bundle the import removed;
//! 6. post (`Hold`) the bundles it wrote, each renamed `held-ID.amosb`
//!    once the relay holds it — so the next pass knows it waits there, and
//!    does not post its facts again.
//!
//! A bundle the relay refuses (its quota) stays in the spool and is posted
//! by a later pass; a crash anywhere leaves at most a bundle fetched or
//! posted twice, which the import takes idempotently.
//!
//! Must never: trust the relay (what it lists or returns goes through the
//! same header scan and complete verification as a directory's files; a
//! held id is the relay's name, never checked as proof of anything);
//! acknowledge a bundle that was not imported.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use amos_protocol::{NodeId, NodeIdentity};
use quinn::{Connection, RecvStream};
use tracing::warn;

use super::client::relay_connection;
use super::{Answer, HeldEntry, HeldId, Request, decode_listing, listing_len};
use crate::api::mailbox::{MailboxOutcome, MailboxPlace, mailbox_failed, mailbox_places};
use crate::api::node::Node;
use crate::error::{NodeError, Result};
use crate::home::Home;
use crate::net::PEER_TIMEOUT;
use crate::net::transport::{TransportError, from_connection_error, with_timeout};

/// The directory under a home that holds the spools of relay-held
/// mailboxes.
pub const SPOOL_DIR: &str = "relay-mailbox";
const INBOUND: &str = "in-";
const HELD: &str = "held-";
const EXTENSION: &str = ".amosb";

fn hex(b: &[u8]) -> String {
    data_encoding::HEXLOWER.encode(b)
}

fn failed(e: TransportError) -> NodeError {
    NodeError::Failed(e.to_string())
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> NodeError {
    NodeError::io(what)
}

/// The spool of the mailbox `relay` holds between this node and `peer`.
pub fn spool_dir(home: &Home, relay: &NodeId, peer: &NodeId) -> PathBuf {
    home.root().join(SPOOL_DIR).join(format!("{relay}-{peer}"))
}

/// How long one request may take: the base bound, and 2 s per MiB it
/// carries.
fn bound(bytes: u64) -> std::time::Duration {
    PEER_TIMEOUT
        + std::time::Duration::from_secs(2) * u32::try_from(bytes >> 20).unwrap_or(u32::MAX)
}

/// Send `request` (and `body`) on a new stream of `conn`: the relay's
/// answer, and the stream to read what follows it.
async fn call(
    conn: &Connection,
    request: Request,
    body: &[u8],
) -> std::result::Result<(Answer, RecvStream), TransportError> {
    with_timeout(bound(body.len() as u64), "the relay's answer", async {
        let (mut send, mut recv) = conn.open_bi().await.map_err(from_connection_error)?;
        // A relay that refuses a bundle answers before reading it, and
        // stops the stream: its answer is still read.
        let written = match send.write_all(&request.encode()).await {
            Ok(()) => send.write_all(body).await,
            Err(e) => Err(e),
        };
        let _ = send.finish();
        let mut b = [0u8; 1];
        recv.read_exact(&mut b).await.map_err(|e| match &written {
            Err(w) => TransportError::Closed(format!("asking the relay: {w}")),
            Ok(()) => TransportError::Closed(format!("the relay did not answer: {e}")),
        })?;
        let answer = Answer::decode(b[0])
            .ok_or_else(|| TransportError::Protocol(format!("the relay answered {}", b[0])))?;
        Ok((answer, recv))
    })
    .await
}

async fn read_exact(
    recv: &mut RecvStream,
    b: &mut [u8],
) -> std::result::Result<(), TransportError> {
    with_timeout(bound(b.len() as u64), "the relay's reply", async {
        recv.read_exact(b)
            .await
            .map_err(|e| TransportError::Closed(format!("the relay's reply ended: {e}")))
    })
    .await
}

fn refused(relay: &NodeId, a: Answer) -> NodeError {
    NodeError::Failed(format!("relay {}: {}", relay.short(), a.describe()))
}

/// What the relay holds between this node and `peer`.
async fn list(conn: &Connection, relay: &NodeId, peer: &NodeId) -> Result<Vec<HeldEntry>> {
    let (a, mut recv) = call(conn, Request::List(*peer), &[])
        .await
        .map_err(failed)?;
    if a != Answer::Ok {
        return Err(refused(relay, a));
    }
    let mut count = [0u8; 4];
    read_exact(&mut recv, &mut count).await.map_err(failed)?;
    let n = listing_len(count)
        .ok_or_else(|| NodeError::Failed(format!("relay {}: a listing too long", relay.short())))?;
    let mut b = vec![0u8; 4 + n];
    b[..4].copy_from_slice(&count);
    read_exact(&mut recv, &mut b[4..]).await.map_err(failed)?;
    decode_listing(&b)
        .ok_or_else(|| NodeError::Failed(format!("relay {}: a malformed listing", relay.short())))
}

/// The bytes of held bundle `e` (at most the length listed).
async fn fetch(conn: &Connection, relay: &NodeId, e: &HeldEntry) -> Result<Vec<u8>> {
    let (a, mut recv) = call(conn, Request::Fetch(e.id), &[])
        .await
        .map_err(failed)?;
    if a != Answer::Ok {
        return Err(refused(relay, a));
    }
    let mut len = [0u8; 8];
    read_exact(&mut recv, &mut len).await.map_err(failed)?;
    let len = u64::from_be_bytes(len);
    let n = usize::try_from(len)
        .ok()
        .filter(|_| len == e.len)
        .ok_or_else(|| {
            NodeError::Failed(format!(
                "relay {}: a bundle of {len} bytes, listed as {}",
                relay.short(),
                e.len
            ))
        })?;
    let mut b = vec![0u8; n];
    read_exact(&mut recv, &mut b).await.map_err(failed)?;
    Ok(b)
}

/// Ask the relay to hold `bytes` for `peer`: its id, or its refusal.
async fn hold(
    conn: &Connection,
    peer: &NodeId,
    bytes: &[u8],
) -> Result<std::result::Result<HeldId, Answer>> {
    let mut body = Vec::with_capacity(8 + bytes.len());
    body.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
    body.extend_from_slice(bytes);
    let (a, mut recv) = call(conn, Request::Hold(*peer), &body)
        .await
        .map_err(failed)?;
    if a != Answer::Ok {
        return Ok(Err(a));
    }
    let mut id = [0u8; 32];
    read_exact(&mut recv, &mut id).await.map_err(failed)?;
    Ok(Ok(id))
}

/// Tell the relay a held bundle was taken: it deletes it.
async fn acknowledge(conn: &Connection, relay: &NodeId, id: &HeldId) -> Result<()> {
    match call(conn, Request::Drop(*id), &[]).await.map_err(failed)? {
        (Answer::Ok, _) => Ok(()),
        (a, _) => Err(refused(relay, a)),
    }
}

/// The id a spooled file's name carries after `prefix`, if any.
fn id_in(name: &str, prefix: &str) -> Option<HeldId> {
    let hex = name.strip_prefix(prefix)?.strip_suffix(EXTENSION)?;
    data_encoding::HEXLOWER
        .decode(hex.as_bytes())
        .ok()?
        .try_into()
        .ok()
}

/// The spool's files by name (not the hidden ones being written).
fn spooled(spool: &Path) -> Result<Vec<String>> {
    let mut names: Vec<String> = fs::read_dir(spool)
        .map_err(io(format!("reading {}", spool.display())))?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    Ok(names)
}

fn remove(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(format!("removing {}", path.display()))(e)),
    }
}

/// Write `bytes` as `name` in `spool` atomically.
fn spool_write(spool: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut tmp = tempfile::Builder::new()
        .prefix(".fetching-")
        .tempfile_in(spool)
        .map_err(io(format!("writing in {}", spool.display())))?;
    tmp.write_all(bytes)
        .and_then(|()| tmp.as_file().sync_all())
        .map_err(io(format!("writing in {}", spool.display())))?;
    tmp.persist(spool.join(name))
        .map_err(|e| io(format!("spooling {name}"))(e.error))?;
    Ok(())
}

/// One exchange with `peer` through the mailbox `relay` holds (the
/// module's steps 1–6).
pub async fn exchange(
    home: &Home,
    identity: &NodeIdentity,
    peer: NodeId,
    relay: NodeId,
) -> Result<MailboxOutcome> {
    let h = home.clone();
    let addr = tokio::task::spawn_blocking(move || Node::open(&h)?.mailbox_relay_addr(&relay))
        .await
        .map_err(|e| NodeError::Failed(e.to_string()))??;
    let (_endpoint, conn, _) = relay_connection(identity, relay, &addr)
        .await
        .map_err(failed)?;
    let version = crate::net::transport::endpoint::relay_version(&conn).unwrap_or(1);
    if version < 2 {
        conn.close(quinn::VarInt::from_u32(0), b"done");
        return Err(NodeError::Failed(format!(
            "relay {} speaks relay protocol {version}: it holds no mailboxes (upgrade it)",
            relay.short()
        )));
    }
    let result = exchange_on(home, &conn, peer, relay).await;
    conn.close(quinn::VarInt::from_u32(0), b"done");
    result
}

async fn exchange_on(
    home: &Home,
    conn: &Connection,
    peer: NodeId,
    relay: NodeId,
) -> Result<MailboxOutcome> {
    let held = list(conn, &relay, &peer).await?;
    let spool = spool_dir(home, &relay, &peer);
    fs::create_dir_all(&spool).map_err(io(format!("creating {}", spool.display())))?;
    let inbound: HashSet<HeldId> = held.iter().filter(|e| e.inbound).map(|e| e.id).collect();
    let waiting: HashSet<HeldId> = held.iter().filter(|e| !e.inbound).map(|e| e.id).collect();
    // 2. What the relay no longer holds is no longer spooled.
    for name in spooled(&spool)? {
        let gone = match (id_in(&name, INBOUND), id_in(&name, HELD)) {
            (Some(id), _) => !inbound.contains(&id),
            (_, Some(id)) => !waiting.contains(&id),
            _ => false,
        };
        if gone {
            remove(&spool.join(&name))?;
        }
    }
    // 3. Fetch what is not spooled yet.
    let mut fetched = Vec::new();
    for e in held.iter().filter(|e| e.inbound) {
        let name = format!("{INBOUND}{}{EXTENSION}", hex(&e.id));
        if !spool.join(&name).exists() {
            let bytes = fetch(conn, &relay, e).await?;
            spool_write(&spool, &name, &bytes)?;
        }
        fetched.push((e.id, name));
    }
    // 4. The mailbox's own logic, over the spool.
    let (h, s) = (home.clone(), spool.clone());
    let mut out = tokio::task::spawn_blocking(move || Node::open(&h)?.mailbox_sync(&peer, &s))
        .await
        .map_err(|e| NodeError::Failed(e.to_string()))??;
    out.dir = MailboxPlace::Relay(relay).to_row();
    // 5. What the import took (and removed) the relay deletes.
    for (id, name) in &fetched {
        if !spool.join(name).exists() {
            acknowledge(conn, &relay, id).await?;
        }
    }
    // 6. Post what the pass wrote (and what a refusal left before).
    let mut unposted = 0u64;
    let mut refusal = None;
    for name in spooled(&spool)? {
        if !name.ends_with(EXTENSION) || name.starts_with(INBOUND) || name.starts_with(HELD) {
            continue;
        }
        if refusal.is_some() {
            unposted += 1;
            continue;
        }
        let path = spool.join(&name);
        let bytes = fs::read(&path).map_err(io(format!("reading {}", path.display())))?;
        match hold(conn, &peer, &bytes).await? {
            Ok(id) => {
                let to = spool.join(format!("{HELD}{}{EXTENSION}", hex(&id)));
                fs::rename(&path, &to).map_err(io(format!("renaming {}", path.display())))?;
            }
            Err(a) => {
                unposted += 1;
                refusal = Some(a);
            }
        }
    }
    if let Some(a) = refusal {
        out.error = Some(format!(
            "relay {}: {}; {unposted} bundle{} wait{} here to be posted",
            relay.short(),
            a.describe(),
            if unposted == 1 { "" } else { "s" },
            if unposted == 1 { "s" } else { "" }
        ));
    }
    Ok(out)
}

/// One mailbox pass over every peer with a mailbox (or only the one `only`
/// names): [`Node::mailbox_sync`] over its directory, or an [`exchange`]
/// with the relay that holds it. A peer whose mailbox fails is reported in
/// its outcome; the others go on. What `amos sync now|auto`, `amos serve`
/// and the console run.
pub async fn mailbox_pass(
    home: &Home,
    identity: Arc<NodeIdentity>,
    only: Option<&str>,
) -> Result<Vec<MailboxOutcome>> {
    let (h, only_owned) = (home.clone(), only.map(str::to_owned));
    let places = tokio::task::spawn_blocking(move || mailbox_places(&h, only_owned.as_deref()))
        .await
        .map_err(|e| NodeError::Failed(e.to_string()))??;
    let mut outcomes = Vec::new();
    for (peer, place) in places {
        let result = match &place {
            MailboxPlace::Dir(dir) => {
                let (h, dir) = (home.clone(), dir.clone());
                tokio::task::spawn_blocking(move || Node::open(&h)?.mailbox_sync(&peer, &dir))
                    .await
                    .map_err(|e| NodeError::Failed(e.to_string()))
                    .and_then(|r| r)
            }
            MailboxPlace::Relay(relay) => exchange(home, &identity, peer, *relay).await,
        };
        outcomes.push(result.unwrap_or_else(|e| {
            warn!("mailbox of {}: {e}", peer.short());
            mailbox_failed(&peer, &place, &e)
        }));
    }
    Ok(outcomes)
}

/// [`mailbox_pass`] on a fresh runtime (for the CLI).
pub fn mailbox_pass_blocking(home: &Home, only: Option<&str>) -> Result<Vec<MailboxOutcome>> {
    let identity = Arc::new(home.load_identity()?);
    crate::net::runtime()?.block_on(mailbox_pass(home, identity, only))
}
