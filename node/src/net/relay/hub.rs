//! The relay's side (docs/design.md §7.11): serve relay clients' connections
//! — only from peers registered here with a relay link —, keep who listens
//! where, open pipes between two of them and copy the bytes, within each
//! peer's [`Limits`].
//!
//! What it holds: the listeners' connections, and per peer the bytes it
//! sent this window and its rate bucket. What it logs: who piped to whom,
//! how many bytes each way, for how long. It never decrypts, stores or
//! interprets the bytes; only [`Fault`], a test hook, reads the pipe's frame
//! lengths, to misbehave precisely.
//!
//! On a relay protocol 2 connection it also serves the mailbox requests
//! (`Hold`, `List`, `Fetch`, `Drop`) over [`Held`]: the sealed bundles it
//! keeps for its peers, counted against the same per-peer rate and quota
//! as pipes, and against the mailbox quotas.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use amos_protocol::NodeId;
use quinn::{Connection, RecvStream, SendStream};
use tokio::sync::watch;
use tracing::{info, warn};

use super::held::{Held, HeldLimits};
use super::{Answer, HEADER, Request, encode_from, encode_listing};
use crate::clock::{SystemClock, WallClock};
use crate::error::Result;
use crate::home::Home;
use crate::net::PEER_TIMEOUT;
use crate::store::Watch;

/// How long a relay waits for each MiB of a bundle being posted (beyond
/// [`PEER_TIMEOUT`]).
const PER_MIB: Duration = Duration::from_secs(2);

/// Per-peer limits of a relay (`amos serve --relay-rate`, `--relay-quota`).
/// A peer's bytes are what it sends into its pipes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes per second each peer may send (its pipes slow down beyond).
    pub rate: u64,
    /// Bytes each peer may send per [`Limits::window`]: past them its
    /// pipes are cut and it is refused new ones until the window ends.
    pub quota: u64,
    /// The quota's window.
    pub window: Duration,
    /// What it holds for mailboxes (docs/design.md §8.2).
    pub held: HeldLimits,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            rate: 32 << 20,
            quota: 4 << 30,
            window: Duration::from_secs(3600),
            held: HeldLimits::default(),
        }
    }
}

/// `AMOS_RELAY_FAULT`: a relay that misbehaves on purpose, for tests that
/// show a relay can fail sessions but never change what the ends store.
/// `KIND:N` — after the first `N` frames each way of each pipe, `corrupt`
/// flips the last byte of every frame, `drop` drops every frame, `reorder`
/// swaps every two frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    kind: FaultKind,
    after: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FaultKind {
    Corrupt,
    Drop,
    Reorder,
}

/// The environment variable naming a [`Fault`].
pub const FAULT_ENV: &str = "AMOS_RELAY_FAULT";

impl Fault {
    /// Parse `KIND:N`.
    pub fn parse(text: &str) -> Option<Fault> {
        let (kind, after) = text.split_once(':')?;
        let kind = match kind.trim() {
            "corrupt" => FaultKind::Corrupt,
            "drop" => FaultKind::Drop,
            "reorder" => FaultKind::Reorder,
            _ => return None,
        };
        Some(Fault {
            kind,
            after: after.trim().parse().ok()?,
        })
    }

    /// The fault `AMOS_RELAY_FAULT` names, if any (a value that names none
    /// is ignored with a warning).
    pub fn from_env() -> Option<Fault> {
        let v = std::env::var(FAULT_ENV).ok()?;
        let f = Fault::parse(&v);
        match f {
            Some(f) => warn!("{FAULT_ENV}={v}: this relay misbehaves on purpose ({f:?})"),
            None => warn!("{FAULT_ENV}={v:?} names no fault (corrupt|drop|reorder:N): ignored"),
        }
        f
    }
}

struct Meter {
    window_start: Instant,
    used: u64,
    tokens: f64,
    last: Instant,
    cut: watch::Sender<bool>,
}

/// The relay: who listens, and each peer's meter.
pub(crate) struct Hub {
    store: Mutex<Watch>,
    listeners: Mutex<HashMap<NodeId, (u64, Connection)>>,
    next: AtomicU64,
    meters: Mutex<HashMap<NodeId, Meter>>,
    limits: Limits,
    fault: Option<Fault>,
    held: Held,
}

/// Why a chunk may not go on.
struct OverQuota;

impl Hub {
    /// A relay over `home`'s peers table.
    /// What it held past the expiry is deleted now.
    pub(crate) fn new(home: &Home, limits: Limits, fault: Option<Fault>) -> Result<Hub> {
        let held = Held::new(home.root(), limits.held);
        held.clean()?;
        held.expire(SystemClock.now_ms())?;
        Ok(Hub {
            store: Mutex::new(Watch::open(&home.db_path())?),
            listeners: Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
            meters: Mutex::new(HashMap::new()),
            limits,
            fault,
            held,
        })
    }

    /// Whether `id` is registered here with a relay link (the current
    /// table: a peer removed or made direct is refused at once).
    fn serves(&self, id: &NodeId) -> bool {
        let Ok(conn) = self.store.lock() else {
            return false;
        };
        crate::store::peers::is_relay(&*conn, id).unwrap_or_else(|e| {
            warn!("relay: cannot read the peers table: {e}");
            false
        })
    }

    /// Serve one relay client's connection until it closes.
    pub(crate) async fn serve(
        self: &Arc<Self>,
        conn: Connection,
        peer: NodeId,
        remote: SocketAddr,
    ) {
        if !self.serves(&peer) {
            info!("relay: {peer} at {remote} is not a relay peer here: refused");
            // Its first request is told why; then the connection ends.
            if let Ok(Ok((send, _))) = tokio::time::timeout(PEER_TIMEOUT, conn.accept_bi()).await {
                answer(send, Answer::NotRelayPeer).await;
                let _ = tokio::time::timeout(PEER_TIMEOUT, conn.closed()).await;
            }
            conn.close(quinn::VarInt::from_u32(2), b"not a relay peer");
            return;
        }
        let version = crate::net::transport::endpoint::relay_version(&conn).unwrap_or(1);
        info!("relay: {peer} connected from {remote} (relay protocol {version})");
        let mut mine = None;
        while let Ok((send, recv)) = conn.accept_bi().await {
            match read_header(recv).await {
                Some((r, recv)) if r.needs_v2() && version >= 2 => {
                    let hub = self.clone();
                    tokio::spawn(async move { hub.mailbox(peer, r, send, recv).await });
                }
                Some((Request::Listen, _)) => {
                    let generation = self.next.fetch_add(1, Ordering::Relaxed);
                    self.listeners
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(peer, (generation, conn.clone()));
                    mine = Some(generation);
                    answer(send, Answer::Ok).await;
                    info!("relay: {peer} listens");
                }
                Some((Request::Connect(target), recv)) => {
                    let hub = self.clone();
                    tokio::spawn(async move { hub.connect(peer, target, send, recv).await });
                }
                Some(_) | None => {
                    info!("relay: {peer} sent a malformed request: connection closed");
                    conn.close(quinn::VarInt::from_u32(2), b"malformed relay request");
                    break;
                }
            }
        }
        if let Some(generation) = mine {
            let mut listeners = self.listeners.lock().unwrap_or_else(|e| e.into_inner());
            if listeners.get(&peer).is_some_and(|(g, _)| *g == generation) {
                listeners.remove(&peer);
            }
        }
        info!("relay: {peer} disconnected");
    }

    /// A `Connect` from `from` to `to`: check, open the pipe, copy.
    async fn connect(&self, from: NodeId, to: NodeId, send: SendStream, recv: RecvStream) {
        if !self.serves(&to) || from == to {
            return answer(send, Answer::NotRelayPeer).await;
        }
        if self.over(&from) || self.over(&to) {
            return answer(send, Answer::OverLimit).await;
        }
        let listener = self
            .listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&to)
            .map(|(_, c)| c.clone());
        let Some(listener) = listener else {
            return answer(send, Answer::NotConnected).await;
        };
        let opened = tokio::time::timeout(PEER_TIMEOUT, async {
            let (mut to_send, to_recv) = listener.open_bi().await.ok()?;
            to_send.write_all(&encode_from(&from)).await.ok()?;
            Some((to_send, to_recv))
        })
        .await;
        let Ok(Some((to_send, to_recv))) = opened else {
            return answer(send, Answer::NotConnected).await;
        };
        let mut send = send;
        if send.write_all(&[Answer::Ok.encode()]).await.is_err() {
            return;
        }
        let started = Instant::now();
        let (cut_from, cut_to) = (self.cut_signal(&from), self.cut_signal(&to));
        let (there, back) = tokio::join!(
            self.copy(from, recv, to_send, [cut_from.clone(), cut_to.clone()]),
            self.copy(to, to_recv, send, [cut_from, cut_to]),
        );
        // What a relay learns: who, how much, how long.
        info!(
            "relay: pipe {} -> {}: {there} bytes, {back} back, {} ms",
            from.short(),
            to.short(),
            started.elapsed().as_millis()
        );
    }

    /// A mailbox request from `peer` (relay protocol 2): hold, list, fetch
    /// or drop sealed bundles, opaque bytes all of them.
    async fn mailbox(
        self: Arc<Self>,
        peer: NodeId,
        request: Request,
        mut send: SendStream,
        mut recv: RecvStream,
    ) {
        let now = SystemClock.now_ms();
        let hub = self.clone();
        // The expiry first: nothing past it is listed, fetched or counted.
        if let Err(e) = run_blocking(move || hub.held.expire(now)).await {
            warn!("relay: expiring held bundles: {e}");
        }
        match request {
            Request::Hold(to) => {
                let mut len = [0u8; 8];
                if tokio::time::timeout(PEER_TIMEOUT, recv.read_exact(&mut len))
                    .await
                    .ok()
                    .and_then(|r| r.ok())
                    .is_none()
                {
                    return;
                }
                let len = u64::from_be_bytes(len);
                if !self.serves(&to) || to == peer {
                    return answer(send, Answer::NotRelayPeer).await;
                }
                if let Err(a) = self.held.fits(len) {
                    info!(
                        "relay: {} posted {len} bytes for {}: {a:?}",
                        peer.short(),
                        to.short()
                    );
                    return answer(send, a).await;
                }
                let Ok(n) = usize::try_from(len) else {
                    return answer(send, Answer::SenderFull).await;
                };
                match self.spend(&peer, n) {
                    Ok(wait) if !wait.is_zero() => tokio::time::sleep(wait).await,
                    Ok(_) => {}
                    Err(OverQuota) => return answer(send, Answer::OverLimit).await,
                }
                let Ok(mut incoming) = self.held.incoming().inspect_err(|e| warn!("relay: {e}"))
                else {
                    return;
                };
                let limit = PEER_TIMEOUT + PER_MIB * u32::try_from(len >> 20).unwrap_or(u32::MAX);
                let received = tokio::time::timeout(limit, async {
                    while incoming.len() < len {
                        let want = usize::try_from(len - incoming.len()).unwrap_or(usize::MAX);
                        let chunk = recv.read_chunk(want.min(64 * 1024), true).await.ok()??;
                        incoming.write(&chunk.bytes).ok()?;
                    }
                    Some(())
                })
                .await;
                if !matches!(received, Ok(Some(()))) {
                    info!(
                        "relay: {} did not send the bundle it announced",
                        peer.short()
                    );
                    return;
                }
                let hub = self.clone();
                let held = run_blocking(move || {
                    hub.held
                        .hold_incoming(peer, to, incoming, SystemClock.now_ms())
                })
                .await;
                match held {
                    Ok(Ok(id)) => {
                        info!(
                            "relay: holds {len} bytes from {} for {}",
                            peer.short(),
                            to.short()
                        );
                        let mut b = vec![Answer::Ok.encode()];
                        b.extend_from_slice(&id);
                        let _ = send.write_all(&b).await;
                        let _ = send.finish();
                    }
                    Ok(Err(a)) => {
                        info!(
                            "relay: refused {len} bytes from {} for {}: {a:?}",
                            peer.short(),
                            to.short()
                        );
                        answer(send, a).await;
                    }
                    Err(e) => warn!("relay: cannot hold a bundle: {e}"),
                }
            }
            Request::List(other) => {
                let hub = self.clone();
                match run_blocking(move || hub.held.list(peer, other)).await {
                    Ok(entries) => {
                        let mut b = vec![Answer::Ok.encode()];
                        b.extend(encode_listing(&entries));
                        let _ = send.write_all(&b).await;
                        let _ = send.finish();
                    }
                    Err(e) => warn!("relay: cannot list held bundles: {e}"),
                }
            }
            Request::Fetch(id) => {
                let hub = self.clone();
                match run_blocking(move || hub.held.fetch(peer, &id)).await {
                    Ok(Some(bytes)) => {
                        if self.spend(&peer, bytes.len()).is_err() {
                            return answer(send, Answer::OverLimit).await;
                        }
                        info!("relay: {} took {} bytes", peer.short(), bytes.len());
                        let mut b = vec![Answer::Ok.encode()];
                        b.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
                        let _ = send.write_all(&b).await;
                        let _ = send.write_all(&bytes).await;
                        let _ = send.finish();
                    }
                    Ok(None) => answer(send, Answer::NotHeld).await,
                    Err(e) => warn!("relay: cannot read a held bundle: {e}"),
                }
            }
            Request::Drop(id) => {
                let hub = self.clone();
                match run_blocking(move || hub.held.drop_for(peer, &id)).await {
                    Ok(was) => {
                        if was {
                            info!(
                                "relay: {} acknowledged a held bundle: deleted",
                                peer.short()
                            );
                        }
                        answer(send, Answer::Ok).await;
                    }
                    Err(e) => warn!("relay: cannot delete a held bundle: {e}"),
                }
            }
            Request::Listen | Request::Connect(_) => {}
        }
    }

    fn cut_signal(&self, peer: &NodeId) -> watch::Receiver<bool> {
        let mut meters = self.meters.lock().unwrap_or_else(|e| e.into_inner());
        self.meter(&mut meters, peer).cut.subscribe()
    }

    fn meter<'m>(&self, meters: &'m mut HashMap<NodeId, Meter>, peer: &NodeId) -> &'m mut Meter {
        let now = Instant::now();
        let m = meters.entry(*peer).or_insert_with(|| Meter {
            window_start: now,
            used: 0,
            tokens: self.limits.rate as f64,
            last: now,
            cut: watch::channel(false).0,
        });
        if now.duration_since(m.window_start) >= self.limits.window {
            m.window_start = now;
            m.used = 0;
            m.cut.send_replace(false);
        }
        m
    }

    /// Whether `peer` is over its quota this window.
    fn over(&self, peer: &NodeId) -> bool {
        let mut meters = self.meters.lock().unwrap_or_else(|e| e.into_inner());
        self.meter(&mut meters, peer).used > self.limits.quota
    }

    /// Count `n` bytes `peer` sent: how long to wait before forwarding them
    /// (its rate), or over its quota (its pipes are cut).
    fn spend(&self, peer: &NodeId, n: usize) -> std::result::Result<Duration, OverQuota> {
        let mut meters = self.meters.lock().unwrap_or_else(|e| e.into_inner());
        let limits = self.limits;
        let m = self.meter(&mut meters, peer);
        m.used = m.used.saturating_add(n as u64);
        if m.used > limits.quota {
            m.cut.send_replace(true);
            return Err(OverQuota);
        }
        let now = Instant::now();
        let rate = limits.rate.max(1) as f64;
        m.tokens = (m.tokens + rate * now.duration_since(m.last).as_secs_f64()).min(rate);
        m.last = now;
        m.tokens -= n as f64;
        Ok(if m.tokens < 0.0 {
            Duration::from_secs_f64(-m.tokens / rate)
        } else {
            Duration::ZERO
        })
    }

    /// Copy `recv` (what `peer` sends) into `send` until it ends, either
    /// peer is cut off, or a side fails; returns the bytes copied.
    async fn copy(
        &self,
        peer: NodeId,
        mut recv: RecvStream,
        mut send: SendStream,
        mut cuts: [watch::Receiver<bool>; 2],
    ) -> u64 {
        let mut copied = 0u64;
        let mut faulty = self.fault.map(Faulty::new);
        loop {
            if cuts.iter().any(|c| *c.borrow()) {
                info!("relay: a pipe of {} is cut: over its limit", peer.short());
                let _ = send.reset(quinn::VarInt::from_u32(3));
                let _ = recv.stop(quinn::VarInt::from_u32(3));
                return copied;
            }
            let chunk = tokio::select! {
                c = recv.read_chunk(64 * 1024, true) => c,
                _ = cut_changed(&mut cuts) => continue,
            };
            let bytes = match chunk {
                Ok(Some(c)) => c.bytes,
                Ok(None) => {
                    if let Some(f) = faulty.as_mut() {
                        let rest = f.flush();
                        let _ = send.write_all(&rest).await;
                    }
                    let _ = send.finish();
                    return copied;
                }
                Err(_) => {
                    let _ = send.reset(quinn::VarInt::from_u32(1));
                    return copied;
                }
            };
            match self.spend(&peer, bytes.len()) {
                Ok(wait) if !wait.is_zero() => tokio::time::sleep(wait).await,
                Ok(_) => {}
                Err(OverQuota) => {
                    info!(
                        "relay: {} is over its quota: its pipes are cut",
                        peer.short()
                    );
                    continue;
                }
            }
            copied += bytes.len() as u64;
            let out = match faulty.as_mut() {
                Some(f) => f.feed(&bytes),
                None => bytes.to_vec(),
            };
            if send.write_all(&out).await.is_err() {
                let _ = recv.stop(quinn::VarInt::from_u32(1));
                return copied;
            }
        }
    }
}

/// Resolves when either cut signal changes (never, once both senders are
/// gone: the hub outlives its pipes).
async fn cut_changed(cuts: &mut [watch::Receiver<bool>; 2]) {
    let [a, b] = cuts;
    tokio::select! {
        r = a.changed() => if r.is_err() { std::future::pending::<()>().await },
        r = b.changed() => if r.is_err() { std::future::pending::<()>().await },
    }
}

/// Run `f` on the blocking pool (file IO of held bundles).
async fn run_blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| crate::error::NodeError::Failed(format!("relay: {e}")))?
}

/// Read a request's header from a new stream.
async fn read_header(mut recv: RecvStream) -> Option<(Request, RecvStream)> {
    let mut b = [0u8; HEADER];
    tokio::time::timeout(PEER_TIMEOUT, recv.read_exact(&mut b))
        .await
        .ok()?
        .ok()?;
    Some((Request::decode(&b)?, recv))
}

async fn answer(mut send: SendStream, a: Answer) {
    let _ = send.write_all(&[a.encode()]).await;
    let _ = send.finish();
}

/// The fault hook's state for one direction of one pipe: the frames seen,
/// bytes of a frame not complete yet, a frame held back (reorder).
struct Faulty {
    fault: Fault,
    frames: u64,
    pending: Vec<u8>,
    held: Option<Vec<u8>>,
}

impl Faulty {
    fn new(fault: Fault) -> Faulty {
        Faulty {
            fault,
            frames: 0,
            pending: Vec::new(),
            held: None,
        }
    }

    /// Take `bytes` in; what goes out now.
    fn feed(&mut self, bytes: &[u8]) -> Vec<u8> {
        self.pending.extend_from_slice(bytes);
        let mut out = Vec::with_capacity(self.pending.len());
        let mut at = 0;
        while self.pending.len() - at >= 2 {
            let n = usize::from(u16::from_be_bytes([self.pending[at], self.pending[at + 1]]));
            if self.pending.len() - at < 2 + n {
                break;
            }
            let mut frame = self.pending[at..at + 2 + n].to_vec();
            at += 2 + n;
            self.frames += 1;
            if self.frames <= self.fault.after {
                out.extend_from_slice(&frame);
                continue;
            }
            match self.fault.kind {
                FaultKind::Corrupt => {
                    if let Some(last) = frame.last_mut()
                        && n > 0
                    {
                        *last ^= 0x5a;
                    }
                    out.extend_from_slice(&frame);
                }
                FaultKind::Drop => {}
                FaultKind::Reorder => match self.held.take() {
                    None => self.held = Some(frame),
                    Some(earlier) => {
                        out.append(&mut frame);
                        out.extend_from_slice(&earlier);
                    }
                },
            }
        }
        self.pending.drain(..at);
        out
    }

    /// What is left when the stream ends.
    fn flush(&mut self) -> Vec<u8> {
        let mut out = self.held.take().unwrap_or_default();
        out.append(&mut self.pending);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(sizes: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        for &s in sizes {
            b.extend_from_slice(&u16::from(s).to_be_bytes());
            b.extend(std::iter::repeat_n(s, usize::from(s)));
        }
        b
    }

    #[test]
    fn a_fault_spares_the_first_frames_and_then_misbehaves_frame_by_frame() {
        assert_eq!(Fault::parse("nonsense"), None);
        assert_eq!(Fault::parse("corrupt"), None);
        let input = frames(&[1, 2, 3, 4, 5]);
        // Fed in awkward pieces: frames cut across chunks.
        let run = |spec: &str| {
            let mut f = Faulty::new(Fault::parse(spec).unwrap());
            let mut out = Vec::new();
            for piece in input.chunks(3) {
                out.extend(f.feed(piece));
            }
            out.extend(f.flush());
            out
        };
        assert_eq!(run("corrupt:9"), input, "nothing touched within N");
        assert_eq!(run("drop:2"), frames(&[1, 2]));
        assert_eq!(run("reorder:1"), frames(&[1, 3, 2, 5, 4]));
        let corrupt = run("corrupt:4");
        assert_eq!(corrupt.len(), input.len());
        assert_eq!(corrupt[..corrupt.len() - 1], input[..input.len() - 1]);
        assert_ne!(corrupt.last(), input.last());
    }
}
