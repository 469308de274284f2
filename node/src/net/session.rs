//! The session driver: one sync session over one QUIC stream, carrying out
//! the actions of the sans-IO `amos_sync::session::Session` (see the
//! module doc of [`crate::net`]).
//!
//! Versions (docs/design.md §13): the session runs at the protocol version
//! the handshake chose; a peer older than the minimum gets one `Refused`
//! line naming both versions, and nothing else. A fact that needs a feature
//! the peer's hello does not name is held back — not sent, counted in the
//! peer's row — and the export after the peer has it starts from the
//! beginning, so it goes then. While facts are held back for a peer, no
//! digest is exchanged with it (they would disagree by design).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::net::transport::{TransportError, read_frame, speaks, with_timeout, write_frame};
use amos_protocol::wire::{Epoch, Features, SyncMessage, SyncV1, Watermark, negotiate};
use amos_protocol::{CheckedBatch, NodeId};
use amos_sync::session::{Action, Event, HeldBack, SKIP_EXPORT, Session, SessionError};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use super::{AFTER_DONE_TIMEOUT, APPLY_MAX, CHANNEL_DEPTH, EXPORT_BATCH, MeshError, PEER_TIMEOUT};
use crate::api::node::Node;
use crate::api::pairing::{self};
use crate::api::repair::RepairPlan;
use crate::error::NodeError;
use crate::events::{self, Observer, SessionStats, SyncEvent};
use crate::home::Home;
// ---------------------------------------------------------------------------
// The session driver

/// What the session thread waits for.
pub(crate) enum Input {
    Msg(SyncV1),
    ExportDone(std::result::Result<Exported, NodeError>),
    IoFailed(MeshError),
    Eof,
}

/// What an export sent: up to where, how many facts, and how many it held
/// back (they need features the peer lacks: `needs`).
pub(crate) struct Exported {
    upto: Watermark,
    sent: u64,
    held: u64,
    needs: Features,
}

/// What the writer task sends, in order. The queue is unbounded but holds
/// at most a handful of items per session (hello, the export, done, finish):
/// the session thread never waits on the peer to send, only to receive, so
/// two sides busy applying each other's batches can never wait on each other.
/// The export's facts come through their own bounded channel (backpressure
/// on the export thread only).
pub(crate) enum Outgoing {
    Msg(SyncV1),
    /// Our export: write every batch from this channel until it closes.
    Facts(mpsc::Receiver<Vec<Vec<u8>>>),
    /// The session finished: end our send stream.
    Finish,
}

/// Run one sync session with the authenticated `peer` over a bidirectional
/// stream. On error the caller should close the connection.
///
/// `first` is a message the caller already read from `recv` (the server
/// reads one to tell a sync from a pairing); `observer` hears of every batch
/// applied and sent. The peer's listen addresses are not recorded: a
/// dialler reached the peer at the address it has. `version`: the protocol
/// version the connection's handshake chose
/// ([`negotiated`](crate::net::transport::negotiated)).
pub async fn drive_session(
    home: Home,
    peer: NodeId,
    version: u16,
    send: quinn::SendStream,
    recv: quinn::RecvStream,
    first: Option<SyncV1>,
    observer: Option<Observer>,
) -> std::result::Result<SessionStats, MeshError> {
    drive(home, peer, version, send, recv, first, observer, None).await
}

/// Like [`drive_session`], for a session the registered `peer` opened from
/// `remote`: where it says it serves is recorded as its address
/// ([`learned_addr`]). `None`: it came through a relay pipe, and nothing
/// is learnt (the pipe's address names no host).
pub async fn drive_accepted_session(
    home: Home,
    peer: NodeId,
    version: u16,
    remote: Option<SocketAddr>,
    send: quinn::SendStream,
    recv: quinn::RecvStream,
    first: SyncV1,
) -> std::result::Result<SessionStats, MeshError> {
    drive(home, peer, version, send, recv, Some(first), None, remote).await
}

/// Where to dial a peer that says it serves at `listen` and was seen
/// connecting from `remote`: an unspecified IP (`0.0.0.0`, `::`) becomes
/// `remote`'s IP with the announced port; a loopback address is of no use
/// unless the peer came over loopback; multicast and broadcast never are.
/// An address on the IP the peer came from is preferred (that one routes);
/// otherwise the first usable one, in the peer's order.
pub fn learned_addr(listen: &[SocketAddr], remote: SocketAddr) -> Option<SocketAddr> {
    let seen = remote.ip().to_canonical();
    let usable = |a: &SocketAddr| -> Option<SocketAddr> {
        let ip = a.ip().to_canonical();
        if a.port() == 0 || ip.is_multicast() {
            return None;
        }
        if ip.is_unspecified() {
            return Some(SocketAddr::new(seen, a.port()));
        }
        let broadcast = matches!(ip, std::net::IpAddr::V4(v4) if v4.is_broadcast());
        if broadcast || (ip.is_loopback() && !seen.is_loopback()) {
            return None;
        }
        Some(SocketAddr::new(ip, a.port()))
    };
    let candidates: Vec<SocketAddr> = listen.iter().filter_map(usable).collect();
    candidates
        .iter()
        .find(|a| a.ip() == seen)
        .or(candidates.first())
        .copied()
}

#[allow(clippy::too_many_arguments)]
pub(crate) async fn drive(
    home: Home,
    peer: NodeId,
    version: u16,
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    first: Option<SyncV1>,
    observer: Option<Observer>,
    learn_from: Option<SocketAddr>,
) -> std::result::Result<SessionStats, MeshError> {
    // A peer older than we accept is told why, in one line every version
    // decodes (`Refused`), and nothing else.
    if let Err(e) = negotiate(speaks().min, speaks().version, version) {
        let refused = SyncMessage::V1(SyncV1::Refused {
            reason: e.to_string(),
        });
        let _ = with_timeout(
            PEER_TIMEOUT,
            "refusing the peer",
            write_frame(&mut send, &refused.encode()),
        )
        .await;
        let _ = send.finish();
        let _ = tokio::time::timeout(PEER_TIMEOUT, send.stopped()).await;
        return Err(MeshError::Version(e));
    }
    let started = std::time::Instant::now();
    let record_home = home.clone();
    // Deep enough to hold a whole transaction's worth of batches.
    let (in_tx, in_rx) = mpsc::channel::<Input>(CHANNEL_DEPTH.max(APPLY_MAX / EXPORT_BATCH));
    let bytes_in = Arc::new(AtomicU64::new(0));
    if let Some(m) = first {
        // Read off this stream by the caller: its frame counts (decoding is
        // canonical, so the re-encoding is the bytes that came).
        let frame = SyncMessage::V1(m.clone()).encode();
        bytes_in.fetch_add(frame.len() as u64 + 4, Ordering::Relaxed);
        // The channel is empty and nothing reads it yet: this cannot wait.
        let _ = in_tx.send(Input::Msg(m)).await;
    }
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Outgoing>();
    let bytes_out = Arc::new(AtomicU64::new(0));

    let writer = tokio::spawn({
        let bytes_out = bytes_out.clone();
        let in_tx = in_tx.clone();
        async move {
            let mut write = async |m: SyncV1| {
                let frame = SyncMessage::V1(m).encode();
                with_timeout(
                    PEER_TIMEOUT,
                    "sending to the peer",
                    write_frame(&mut send, &frame),
                )
                .await?;
                bytes_out.fetch_add(frame.len() as u64 + 4, Ordering::Relaxed);
                Ok::<(), TransportError>(())
            };
            let r: std::result::Result<bool, TransportError> = async {
                while let Some(o) = out_rx.recv().await {
                    match o {
                        Outgoing::Msg(m) => write(m).await?,
                        Outgoing::Facts(mut batches) => {
                            while let Some(facts) = batches.recv().await {
                                write(SyncV1::Facts { facts }).await?;
                            }
                        }
                        Outgoing::Finish => return Ok(true),
                    }
                }
                Ok(false)
            }
            .await;
            match r {
                Ok(true) => {
                    let _ = send.finish();
                    // Wait until the peer has the whole stream.
                    let _ = tokio::time::timeout(PEER_TIMEOUT, send.stopped()).await;
                    Ok(())
                }
                Ok(false) => Err(MeshError::Closed(
                    "the session ended without finishing".into(),
                )),
                Err(e) => {
                    let msg = e.to_string();
                    let _ = in_tx.send(Input::IoFailed(e.into())).await;
                    Err(MeshError::Closed(msg))
                }
            }
        }
    });
    let reader = tokio::spawn({
        let bytes_in = bytes_in.clone();
        let in_tx = in_tx.clone();
        async move {
            // Once the peer said Done, all that is left to read is its end of
            // stream, which it sends only when it has received all of our
            // export — however long that takes. The per-read timeout would
            // cut a long export short; a dead peer still ends the wait
            // through the connection's idle timeout.
            let mut peer_done = false;
            loop {
                let limit = if peer_done {
                    AFTER_DONE_TIMEOUT
                } else {
                    PEER_TIMEOUT
                };
                let frame =
                    with_timeout(limit, "waiting for the peer", read_frame(&mut recv)).await;
                match frame {
                    Ok(Some(bytes)) => {
                        bytes_in.fetch_add(bytes.len() as u64 + 4, Ordering::Relaxed);
                        let input = match SyncMessage::decode(&bytes) {
                            Ok(SyncMessage::V1(m)) => {
                                peer_done |= matches!(m, SyncV1::Done { .. });
                                Input::Msg(m)
                            }
                            Err(e) => {
                                let e = MeshError::BadMessage(e.to_string());
                                let msg = e.to_string();
                                let _ = in_tx.send(Input::IoFailed(e)).await;
                                return Err(MeshError::BadMessage(msg));
                            }
                        };
                        // After the session finished nothing more may come;
                        // a closed channel just means it did.
                        let _ = in_tx.send(input).await;
                    }
                    Ok(None) => {
                        let _ = in_tx.send(Input::Eof).await;
                        return Ok(());
                    }
                    Err(e) => {
                        let msg = e.to_string();
                        let _ = in_tx.send(Input::IoFailed(e.into())).await;
                        return Err(MeshError::Closed(msg));
                    }
                }
            }
        }
    });

    let abort = Arc::new(AtomicBool::new(false));
    let worker = tokio::task::spawn_blocking({
        let abort = abort.clone();
        move || {
            let r = session_thread(
                &home,
                peer,
                version,
                in_rx,
                in_tx,
                out_tx,
                abort.clone(),
                observer,
                learn_from,
            );
            if r.is_err() {
                abort.store(true, Ordering::Relaxed);
            }
            r
        }
    });
    let result = match worker.await {
        Ok(r) => r,
        Err(e) => Err(MeshError::Closed(format!("the session thread failed: {e}"))),
    };
    match result {
        Ok((facts_in, facts_out, digest_agree)) => {
            // Our last frames out, and the peer's end of stream (it finished
            // too). Without that end the peer may not have received our
            // last frames: the session failed, however far it got (its
            // watermarks moved only over what committed).
            match writer.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    return Err(MeshError::Closed(format!(
                        "our last frames did not go out: {e}"
                    )));
                }
                Err(e) => return Err(MeshError::Closed(format!("writer task: {e}"))),
            }
            match reader.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    return Err(MeshError::Closed(format!(
                        "the peer never confirmed the end of the session: {e}"
                    )));
                }
                Err(e) => return Err(MeshError::Closed(format!("reader task: {e}"))),
            }
            let stats = SessionStats {
                facts_in,
                facts_out,
                bytes_in: bytes_in.load(Ordering::Relaxed),
                bytes_out: bytes_out.load(Ordering::Relaxed),
                digest_agree,
            };
            let elapsed = started.elapsed();
            note(
                &record_home,
                "the session's figures (or retry deferred facts)",
                move |n| {
                    n.peer_record_session(&peer, &stats, elapsed)?;
                    // What waited (a clock ahead of ours, a missing endpoint)
                    // may apply now: the sender's watermark is past it.
                    n.retry().map(|_| ())
                },
            )
            .await;
            Ok(stats)
        }
        Err(e) => {
            writer.abort();
            reader.abort();
            Err(e)
        }
    }
}

/// Note something about a session in the store (the peer's row): on a
/// blocking thread with its own connection; a failure to note it is
/// logged, never fatal to the session or the pass.
pub(crate) async fn note(
    home: &Home,
    what: &str,
    f: impl FnOnce(&mut Node) -> crate::error::Result<()> + Send + 'static,
) {
    let home = home.clone();
    let r = tokio::task::spawn_blocking(move || f(&mut Node::open(&home)?)).await;
    match r {
        Ok(Ok(())) => {}
        Ok(Err(e)) => warn!("cannot record {what}: {e}"),
        Err(e) => warn!("cannot record {what}: {e}"),
    }
}

/// The blocking side of a session: returns (facts in, facts out, whether
/// the digests agreed).
/// `learn_from`: the peer dialled us from there; record where it serves.
#[allow(clippy::too_many_arguments)]
pub(crate) fn session_thread(
    home: &Home,
    peer: NodeId,
    version: u16,
    mut input: mpsc::Receiver<Input>,
    export_tx: mpsc::Sender<Input>,
    out: mpsc::UnboundedSender<Outgoing>,
    abort: Arc<AtomicBool>,
    observer: Option<Observer>,
    learn_from: Option<SocketAddr>,
) -> std::result::Result<(u64, u64, Option<bool>), MeshError> {
    let mut node = Node::open(home)?;
    let my_epoch = node.epoch_bytes()?;
    // Where `amos serve` last said it listens (none if it never served).
    let listen: Vec<SocketAddr> = pairing::recorded_listen(home).into_iter().collect();
    let (mut session, first) = Session::start_versioned(
        my_epoch,
        node.watermark_of(&peer)?,
        &listen,
        version,
        speaks().features,
    );
    // Facts held back for the peer (and what they need), before this
    // session and after its export: while any are, no digest is exchanged.
    let (facts, needs) = node.peer_held_back(&peer)?;
    let mut held_back = HeldBack { facts, needs };
    let mut export_since = SKIP_EXPORT;
    // We ended our stream early (no digest while facts are held back).
    let mut finished_early = false;
    // The features the peer decodes, once its hello came.
    let mut peer_features = Features::implied_by(version);
    // Repair (docs/design.md §7.9) when asked, after a digest disagreed, or
    // periodically; an untrusted watermark the session sees by itself. Not
    // right after a repair that never completed (the peer may be older).
    match node.repair_plan(&peer)? {
        RepairPlan::Ask(why) => {
            debug!(?why, "asking {} for a repair", peer.short());
            session.request_repair();
        }
        RepairPlan::Forbid => {
            info!(
                "the last repair with {} did not complete: none in this session",
                peer.short()
            );
            session.forbid_repair();
        }
        RepairPlan::AsNeeded => {}
    }
    let mut repair_tried = false;
    let mut todo: VecDeque<Action> = first.into();
    // Moved into the export thread: afterwards only the reader can feed us,
    // so its end (or abort) ends our wait.
    let mut export_tx = Some(export_tx);
    let (mut facts_in, mut facts_out) = (0u64, 0u64);
    let mut digest_agree = None;
    // An input read ahead (by `gather_batches`, or to keep verifying while
    // applying), handled next.
    let mut held: Option<Input> = None;
    // The last batch received, verifying on a thread of its own.
    let mut verifying: Option<Verifying> = None;
    let send = |m: Outgoing| {
        out.send(m)
            .map_err(|_| MeshError::Closed("the connection to the peer closed".into()))
    };
    loop {
        while let Some(action) = todo.pop_front() {
            // Whatever is not another batch comes after the batch being
            // verified is applied: the order of the session is unchanged
            // (a watermark moves only after every batch it covers committed).
            if !matches!(action, Action::Apply(_))
                && let Some(ready) = verifying.take()
            {
                ready.apply(&mut node, &peer, observer.as_ref())?;
            }
            match action {
                Action::Send(m) => send(Outgoing::Msg(m))?,
                Action::Export { since, peer_reset } => {
                    let tx = export_tx
                        .take()
                        .ok_or(MeshError::Session(SessionError::Protocol("second export")))?;
                    // The export follows the peer's hello: what it speaks.
                    if let Some((v, f)) = session.peer_version() {
                        peer_features = f;
                        node.peer_record_protocol(&peer, v, f)?;
                    }
                    // What was held back goes once the peer decodes it: this
                    // export starts from the beginning.
                    let from = held_back.export_from(since, peer_features);
                    if from != since {
                        info!(
                            "{} now decodes the {} facts held back for it: sending them",
                            peer.short(),
                            held_back.facts
                        );
                    }
                    let since = from;
                    export_since = since;
                    let (batches, rx) = mpsc::channel(CHANNEL_DEPTH);
                    send(Outgoing::Facts(rx))?;
                    spawn_export(
                        home.clone(),
                        peer,
                        my_epoch,
                        since,
                        peer_reset,
                        peer_features,
                        batches,
                        tx,
                        abort.clone(),
                        observer.clone(),
                    );
                }
                Action::Apply(mut facts) => {
                    if todo.is_empty() {
                        gather_batches(&mut session, &mut input, &mut facts, &mut todo, &mut held)?;
                    }
                    facts_in += facts.len() as u64;
                    // This batch verifies while the one before it applies.
                    let next = Verifying::start(facts, session.peer_epoch());
                    if let Some(ready) = verifying.replace(next) {
                        ready.apply(&mut node, &peer, observer.as_ref())?;
                    }
                }
                Action::PeerListens(addrs) => match learn_from {
                    // Only the peer the handshake authenticated, only if
                    // registered (never adds one), never its policy.
                    Some(remote) => match learned_addr(&addrs, remote) {
                        Some(a) => {
                            if node.peer_learn_addr(&peer, a)? {
                                info!("{} serves at {a}: recorded", peer.short());
                            }
                        }
                        None => debug!("{} serves nowhere we can dial: {addrs:?}", peer.short()),
                    },
                    None => debug!("{} serves at {addrs:?}", peer.short()),
                },
                Action::SaveWatermark(w) => node.save_watermark(&peer, &w)?,
                Action::SendDigest if !held_back.allows_digest() => {
                    // The peer lacks facts we hold back by design: a digest
                    // would disagree and ask for a repair that cannot help.
                    // Ending our stream instead finishes the peer's side
                    // without a comparison (as with a node older than
                    // `Digest`), and ours once its digest (or end) came.
                    debug!(
                        "{} facts held back for {}: no digest",
                        held_back.facts,
                        peer.short()
                    );
                    finished_early = true;
                    send(Outgoing::Finish)?;
                }
                Action::SendDigest => {
                    // Both sides run at `version`: both use the same digest.
                    let set = version >= crate::api::SET_DIGEST_SINCE;
                    let (scopes, digest, facts) = node.session_digest_at(&peer, set)?;
                    send(Outgoing::Msg(SyncV1::Digest {
                        scopes,
                        digest,
                        facts,
                    }))?;
                }
                Action::CompareDigest {
                    scopes,
                    digest,
                    facts,
                } if !held_back.allows_digest() => {
                    debug!(
                        "{} facts held back for {}: its digest ({facts} facts over {} scopes) not compared",
                        held_back.facts,
                        peer.short(),
                        scopes.len()
                    );
                    let _ = digest;
                }
                Action::CompareDigest {
                    scopes,
                    digest,
                    facts,
                } => {
                    let set = version >= crate::api::SET_DIGEST_SINCE;
                    let agree = node.peer_compare_digest_at(&peer, &scopes, &digest, facts, set)?;
                    match agree {
                        Some(agree) => debug!(agree, "compared digests with {}", peer.short()),
                        None => debug!(
                            "{}'s digest covers scopes we do not give it: not compared",
                            peer.short()
                        ),
                    }
                    digest_agree = agree;
                }
                Action::BuildRepairSet => {
                    if !repair_tried {
                        repair_tried = true;
                        node.peer_repair_tried(&peer)?;
                    }
                    let (items, seq) = node.repair_set(&peer)?;
                    debug!(items = items.len(), "repair set for {}", peer.short());
                    let upto = Watermark {
                        epoch: my_epoch,
                        seq,
                    };
                    todo.extend(session.handle(Event::RepairSet { items, upto })?);
                }
                Action::SendRepairFacts(ids) => {
                    let sent = node.repair_facts(&peer, &ids, EXPORT_BATCH, |facts| {
                        // Never what the peer cannot decode (held back).
                        let facts = match hold_back(facts, peer_features) {
                            (kept, _) if kept.is_empty() => return Ok(()),
                            (kept, _) => kept,
                        };
                        if let Some(o) = &observer {
                            o.sent(&peer, facts.len() as u64);
                        }
                        send(Outgoing::Msg(SyncV1::Facts { facts })).map_err(|_| {
                            NodeError::Failed("the connection to the peer closed".into())
                        })
                    })?;
                    facts_out += sent;
                    todo.extend(session.handle(Event::RepairSent { sent })?);
                }
                Action::Finished => {
                    if let Err(e) = node.peer_record_repair(&peer, session.repaired()) {
                        warn!("cannot record the repair count of {}: {e}", peer.short());
                    }
                    if !finished_early {
                        send(Outgoing::Finish)?;
                    }
                    return Ok((facts_in, facts_out, digest_agree));
                }
            }
        }
        // A batch is being verified: if more is already waiting, take it
        // first (the next batch then verifies while this one applies);
        // otherwise apply it before waiting.
        if let Some(ready) = verifying.take() {
            if held.is_none() {
                held = input.try_recv().ok();
            }
            if held.is_some() {
                verifying = Some(ready);
            } else {
                ready.apply(&mut node, &peer, observer.as_ref())?;
            }
        }
        match held.take().or_else(|| input.blocking_recv()) {
            Some(Input::Msg(m)) => todo.extend(session.handle(Event::Received(m))?),
            Some(Input::ExportDone(Ok(done))) => {
                facts_out += done.sent;
                if export_since != SKIP_EXPORT {
                    let now = held_back.after_export(export_since, done.held, done.needs);
                    if done.held > 0 {
                        info!(
                            "held back {} facts for {}: it lacks a feature they need",
                            done.held,
                            peer.short()
                        );
                    }
                    node.peer_set_held_back(&peer, now.facts, now.needs)?;
                    held_back = now;
                }
                todo.extend(session.handle(Event::ExportDone {
                    upto: done.upto,
                    sent: done.sent,
                })?);
            }
            Some(Input::ExportDone(Err(e))) => return Err(e.into()),
            Some(Input::IoFailed(e)) => return Err(e),
            // An older peer ends its stream after both `Done`s without a
            // `Digest` (so would a peer that counted the session as one
            // that moved facts); the session decides whether that is fine.
            Some(Input::Eof) => todo.extend(session.handle(Event::PeerEnded)?),
            None => {
                return Err(MeshError::Closed(
                    "the peer ended the session before it finished".into(),
                ));
            }
        }
    }
}

/// A batch of a peer's facts being verified on a thread of its own
/// (`amos_protocol::verify_batch`: batch ed25519, over several threads when
/// large), so that the session thread can apply the batch before it
/// meanwhile.
pub(crate) struct Verifying {
    facts: u64,
    /// The peer's log epoch (its `Hello`'s): the batch's `seq`s that hold
    /// only what the peer has are recorded as its echo ranges under it.
    epoch: Option<Epoch>,
    job: std::thread::JoinHandle<std::result::Result<CheckedBatch, String>>,
}

impl Verifying {
    fn start(facts: Vec<Vec<u8>>, epoch: Option<Epoch>) -> Verifying {
        Verifying {
            facts: facts.len() as u64,
            epoch,
            job: std::thread::spawn(move || {
                amos_protocol::verify_batch(&facts).map_err(|e| e.to_string())
            }),
        }
    }

    /// Wait for the verdict; if every fact verified, apply the batch in one
    /// transaction and tell whoever listens.
    fn apply(
        self,
        node: &mut Node,
        peer: &NodeId,
        observer: Option<&Observer>,
    ) -> std::result::Result<(), MeshError> {
        let checked = self
            .job
            .join()
            .map_err(|_| MeshError::BadFact("the verifying thread failed".into()))?
            .map_err(MeshError::BadFact)?;
        // A fact past the latest time amos keeps is refused alone (the
        // audit log); the rest of its batch applies.
        let (report, seqs) = node.apply_checked_seqs(peer, checked, self.epoch.as_ref())?;
        events::emit(SyncEvent::Applied(&report));
        if let Some((first, last)) = seqs {
            events::emit(SyncEvent::Stored { peer, first, last });
        }
        if let Some(o) = observer {
            o.applied(peer, self.facts, &report);
        }
        debug!(?report, "applied a batch from {}", peer.short());
        Ok(())
    }
}

/// Move the `Facts` batches already waiting in `input` into `facts` (never
/// waiting for one), up to [`APPLY_MAX`] facts, so that they are verified
/// as one batch and applied in one transaction, as a bundle's frame is. The
/// first input that is not a batch is kept in `held` for the session loop to
/// handle next, so the order of everything else is unchanged.
fn gather_batches(
    session: &mut Session,
    input: &mut mpsc::Receiver<Input>,
    facts: &mut Vec<Vec<u8>>,
    todo: &mut VecDeque<Action>,
    held: &mut Option<Input>,
) -> std::result::Result<(), MeshError> {
    while facts.len() < APPLY_MAX && held.is_none() && todo.is_empty() {
        match input.try_recv() {
            Ok(Input::Msg(m @ SyncV1::Facts { .. })) => {
                for action in session.handle(Event::Received(m))? {
                    match action {
                        Action::Apply(more) if todo.is_empty() => facts.extend(more),
                        other => todo.push_back(other),
                    }
                }
            }
            Ok(other) => *held = Some(other),
            Err(_) => break,
        }
    }
    Ok(())
}

/// Stream our facts for `peer` into `out` on a thread of its own (with its
/// own store connection), then report [`Input::ExportDone`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn spawn_export(
    home: Home,
    peer: NodeId,
    epoch: Epoch,
    since: i64,
    peer_reset: bool,
    decodes: Features,
    out: mpsc::Sender<Vec<Vec<u8>>>,
    done: mpsc::Sender<Input>,
    abort: Arc<AtomicBool>,
    observer: Option<Observer>,
) {
    std::thread::spawn(move || {
        let result = (|| {
            let node = Node::open(&home)?;
            let mut n = 0u64;
            let (mut held, mut needs) = (0u64, Features::NONE);
            let seq = node.export_for_session(&peer, since, peer_reset, EXPORT_BATCH, |facts| {
                if abort.load(Ordering::Relaxed) {
                    return Err(NodeError::Failed("the sync was aborted".into()));
                }
                let (facts, withheld) = hold_back(facts, decodes);
                held += withheld.len() as u64;
                needs = withheld.iter().fold(needs, |a, f| a.union(*f));
                if facts.is_empty() {
                    return Ok(());
                }
                n += facts.len() as u64;
                if let Some(o) = &observer {
                    o.sent(&peer, facts.len() as u64);
                }
                out.blocking_send(facts)
                    .map_err(|_| NodeError::Failed("the connection to the peer closed".into()))
            })?;
            Ok(Exported {
                upto: Watermark { epoch, seq },
                sent: n,
                held,
                needs,
            })
        })();
        // Every batch is queued; closing the channel lets the writer move on
        // to what follows the export (done).
        drop(out);
        let _ = done.blocking_send(Input::ExportDone(result));
    });
}

/// [`Features::split_decodable`]: what a peer that decodes `decodes` can
/// take, and the features each fact held back needs (docs/design.md §13).
pub(crate) fn hold_back(facts: Vec<Vec<u8>>, decodes: Features) -> (Vec<Vec<u8>>, Vec<Features>) {
    decodes.split_decodable(facts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_learned_address_is_where_the_peer_came_from_unless_it_names_one() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        let lan = a("192.0.2.7:50000");
        // A wildcard becomes the source IP with the announced port.
        assert_eq!(
            learned_addr(&[a("0.0.0.0:4747")], lan),
            Some(a("192.0.2.7:4747"))
        );
        assert_eq!(
            learned_addr(&[a("[::]:4747")], lan),
            Some(a("192.0.2.7:4747"))
        );
        // A v4-mapped source is recorded as plain IPv4.
        let mapped = a("[::ffff:192.0.2.7]:50000");
        assert_eq!(
            learned_addr(&[a("[::]:4747")], mapped),
            Some(a("192.0.2.7:4747"))
        );
        // An explicit address is recorded as given; one on the source IP wins.
        assert_eq!(
            learned_addr(&[a("198.51.100.1:4747")], lan),
            Some(a("198.51.100.1:4747"))
        );
        assert_eq!(
            learned_addr(&[a("198.51.100.1:4747"), a("192.0.2.7:4748")], lan),
            Some(a("192.0.2.7:4748"))
        );
        // Loopback only helps a peer on this machine; multicast, broadcast never.
        assert_eq!(learned_addr(&[a("127.0.0.1:4747")], lan), None);
        assert_eq!(
            learned_addr(&[a("127.0.0.1:4747")], a("127.0.0.1:50000")),
            Some(a("127.0.0.1:4747"))
        );
        assert_eq!(
            learned_addr(&[a("224.0.0.1:4747"), a("255.255.255.255:4747")], lan),
            None
        );
        assert_eq!(learned_addr(&[], lan), None);
    }
}
