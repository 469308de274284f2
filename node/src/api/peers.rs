//! The node API for replication: peers and their policies, applying verified
//! facts from a peer through `amos-sync`, the convergence digest, the audit
//! log, and retrying deferred facts.
//!
//! Invariant: a peer's policy is set only here, by the local operator; a
//! change of policy resets that peer's watermark so the next sync re-sends
//! what the new policy admits. A peer's address may also be learnt (mDNS,
//! or where a registered peer says it serves), never its registration or
//! its policy.

use crate::error::{Rule, UnknownKind};
use amos_acl::PeerPolicy;
use amos_protocol::wire::{Epoch, MAX_DIGEST_SCOPES, Watermark};
use amos_protocol::{CheckedBatch, NodeId, OrgScope, Scope, SignedFact, Verified};
use amos_sync::{ApplyReport, Refusal, Sender, apply_batch};

use crate::api::node::Node;
use crate::error::{NodeError, Result};
use crate::store::replica::{self, AuditEntry, DeferredInfo, PeerInfo, SqlReplica};
use crate::store::{Tx, echo, peers};

/// Facts whose clock is further ahead of ours than this are quarantined.
pub const DEFAULT_MAX_SKEW_MS: u64 = 10 * 60 * 1000;

/// How often `amos serve` retries the deferred facts besides after every
/// session: a fact from a fast clock becomes applicable by time alone.
pub const RETRY_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// The protocol version from which a session's digests are the set digest
/// kept on write, not the sorted-hash digest a scan computes (amos-sync's
/// rule, which amos-sim follows too).
pub use amos_sync::digest::SET_DIGEST_SINCE;

/// What one retry of the deferred facts did (`amos sync retry`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RetryReport {
    /// Deferred facts taken up.
    pub retried: u64,
    /// Of those, stored.
    pub applied: u64,
    /// Of those, older than or equal to what is held by now.
    pub stale: u64,
    /// Of those, refused (audited): their peer is gone, or the gate says no.
    pub refused: u64,
    /// Facts deferred after the retry (still ahead, still missing something).
    pub still_deferred: u64,
}

fn parse_node_id(s: &str) -> Result<NodeId> {
    s.parse::<NodeId>()
        .map_err(|e| NodeError::BadInput(e.to_string()))
}

impl Node {
    /// Register a peer (or update its address and policy).
    pub fn peer_add(&mut self, node_id: &str, addr: Option<&str>, policy: &str) -> Result<()> {
        let id = parse_node_id(node_id)?;
        if id == self.node_id() {
            return Err(NodeError::BadInput("a node cannot be its own peer".into()));
        }
        let policy = self.store.read(|r| {
            crate::api::scopes::resolve_policy(r, policy, crate::api::scopes::Unheld::AsTyped)
        })?;
        let now = self.now_ms();
        let me = self.node_id();
        self.store
            .write(|tx| upsert_peer(tx, me, &id, addr, None, &policy, now))
    }

    /// Register a peer (or update it) as `amos peers add` does: its address
    /// (`None` keeps it), its policy, and its link's role as given — a relay
    /// link or not, and the relay it is reached through (`None`: dialled
    /// directly) — docs/design.md §7.11. `via` must be a registered peer
    /// whose link is a relay link, and never the peer itself.
    pub fn peer_add_link(
        &mut self,
        node_id: &str,
        addr: Option<&str>,
        policy: &str,
        relay: bool,
        via: Option<&str>,
    ) -> Result<()> {
        let id = parse_node_id(node_id)?;
        let via = match via {
            None => None,
            Some(v) => {
                let peers = self.peer_list()?;
                let named = replica::peers_named(&peers, v);
                let r = match named.as_slice() {
                    [r] => parse_node_id(&r.node_id)?,
                    [] => {
                        return Err(NodeError::unknown_with(
                            UnknownKind::Peer,
                            v,
                            format!(
                                "unknown relay {v:?}: register it first with \
                                 `amos peers add RELAY_ID ADDR --policy none --relay`"
                            ),
                        ));
                    }
                    _ => return Err(NodeError::BadInput(format!("ambiguous relay {v:?}"))),
                };
                if r == id {
                    return Err(NodeError::BadInput(
                        "a peer cannot be reached through itself".into(),
                    ));
                }
                if !named[0].relay {
                    return Err(NodeError::BadInput(format!(
                        "peer {} is not a relay link: add it with `--relay` first",
                        r.short()
                    )));
                }
                Some(r)
            }
        };
        self.peer_add(node_id, addr, policy)?;
        self.store
            .write(|tx| peers::set_link(tx, &id, relay, via.as_ref()))?;
        Ok(())
    }

    /// Forget a peer: its connections and bundles are refused from now on.
    pub fn peer_remove(&mut self, node_id: &str) -> Result<()> {
        let id = parse_node_id(node_id)?;
        if !self.store.write(|tx| peers::remove(tx, &id))? {
            return Err(NodeError::unknown(UnknownKind::Peer, id.short()));
        }
        Ok(())
    }

    /// Change a peer's policy; its watermark resets so the new scope re-syncs.
    pub fn peer_set_policy(&mut self, node_id: &str, policy: &str) -> Result<()> {
        let id = parse_node_id(node_id)?;
        let policy = self.store.read(|r| {
            crate::api::scopes::resolve_policy(r, policy, crate::api::scopes::Unheld::AsTyped)
        })?;
        let me = self.node_id();
        self.store.write(|tx| {
            if !peers::set_policy(tx, &id, &policy)? {
                return Err(NodeError::unknown(UnknownKind::Peer, id.short()));
            }
            policy_changed(tx, me, &id, &policy)?;
            replica::keep_running(tx, &policy)
        })
    }

    /// Set the address of an already registered peer (mDNS discovery);
    /// never registers one. Returns whether the stored address changed.
    pub fn peer_set_addr(&mut self, id: &NodeId, addr: &str) -> Result<bool> {
        self.store.write(|tx| peers::set_addr(tx, id, addr))
    }

    /// Record where an already registered peer serves, as it said in a
    /// session it opened (authenticated by the handshake); never registers
    /// one, never touches its policy. A host name the operator gave is kept
    /// (`peers add ID HOST:PORT`: the operator knows better than a NAT'd
    /// source address); an IP address is replaced. Returns whether the
    /// stored address changed.
    pub fn peer_learn_addr(&mut self, id: &NodeId, addr: std::net::SocketAddr) -> Result<bool> {
        let addr = addr.to_string();
        self.store.write(|tx| {
            let current = peers::addr(tx, id)?;
            let replace = match current {
                None => false,
                Some(None) => true,
                Some(Some(old)) => old != addr && old.parse::<std::net::SocketAddr>().is_ok(),
            };
            if replace {
                peers::set_addr(tx, id, &addr)?;
            }
            Ok(replace)
        })
    }

    /// Record the outcome of a sync with a peer (`ok`, `unreachable`,
    /// `refused`, `failed`). `last_sync` stays the time of the last
    /// successful sync.
    pub fn peer_record_result(&mut self, id: &NodeId, result: &str) -> Result<()> {
        let now = self.now_ms() as i64;
        let ok_at = (result == "ok").then_some(now);
        self.store
            .write(|tx| peers::record_result(tx, id, result, ok_at))
    }

    /// [`Node::peer_record_result`] for a sync that started at
    /// `started_ms`: a failure does not hide a success recorded after that
    /// start (an overlapping session that got through).
    pub fn peer_record_result_since(
        &mut self,
        id: &NodeId,
        result: &str,
        started_ms: u64,
    ) -> Result<()> {
        if result == "ok" {
            return self.peer_record_result(id, result);
        }
        self.store
            .write(|tx| peers::record_failure_since(tx, id, result, started_ms as i64))
            .map(|_| ())
    }

    /// Record the figures of a session with `id` that just completed
    /// (`elapsed`: its duration), for `amos peers list` and the console of
    /// any process on this home.
    pub fn peer_record_session(
        &mut self,
        id: &NodeId,
        stats: &crate::events::SessionStats,
        elapsed: std::time::Duration,
    ) -> Result<()> {
        let s = peers::LastSession::of(stats, self.now_ms(), elapsed);
        self.store.write(|tx| peers::record_session(tx, id, &s))
    }

    /// Every registered peer.
    pub fn peer_list(&self) -> Result<Vec<PeerInfo>> {
        self.store.read(|r| {
            let mut peers = replica::list_peers(r)?;
            for p in &mut peers {
                if let Ok(policy) = p.policy.parse::<PeerPolicy>() {
                    p.policy = crate::api::scopes::policy_label(r, &policy);
                }
                if let Some(d) = &mut p.digest
                    && let Ok(scopes) = d.scopes.parse::<PeerPolicy>()
                {
                    d.scopes = crate::api::scopes::policy_label(r, &scopes);
                }
            }
            Ok(peers)
        })
    }

    /// The policy we gave a registered peer.
    pub fn peer_policy(&self, id: &NodeId) -> Result<Option<PeerPolicy>> {
        self.store.read(|r| replica::peer_policy(r, id))
    }

    /// Apply verified facts from `from` (a registered peer) in one
    /// transaction, through the import gate and the merge rule; then retry
    /// deferred facts.
    pub fn apply_from(
        &mut self,
        from: &NodeId,
        facts: Vec<Verified<SignedFact>>,
    ) -> Result<ApplyReport> {
        self.apply_from_seqs(from, facts, None)
            .map(|(report, _)| report)
    }

    /// [`Node::apply_from`], also telling which of our `seq`s the batch
    /// took (`first..=last`, in one transaction so no other writer's are
    /// among them; `None` if it changed nothing): push on change relays
    /// them to every peer but `from` (docs/design.md §7.10). With
    /// `from_epoch` (the epoch of `from`'s log, as its session's `Hello`
    /// named it), the rows of that run which hold only facts `from` has
    /// become echo ranges of `from` in the same transaction (§7.1): an
    /// export to it skips them.
    pub fn apply_from_seqs(
        &mut self,
        from: &NodeId,
        facts: Vec<Verified<SignedFact>>,
        from_epoch: Option<&Epoch>,
    ) -> Result<(ApplyReport, Option<(i64, i64)>)> {
        let batch = CheckedBatch {
            verified: facts,
            out_of_bounds: Vec::new(),
        };
        self.apply_checked_seqs(from, batch, from_epoch)
    }

    /// [`Node::apply_from_seqs`] of a batch `amos_protocol::verify_batch`
    /// checked (the QUIC session's path): its facts past the latest time
    /// amos keeps are refused, each in the audit log under
    /// `time_out_of_bounds`, in the same transaction that applies the rest
    /// (docs/design.md §4). They never reach the store, not even their clock.
    pub fn apply_checked_seqs(
        &mut self,
        from: &NodeId,
        batch: CheckedBatch,
        from_epoch: Option<&Epoch>,
    ) -> Result<(ApplyReport, Option<(i64, i64)>)> {
        let CheckedBatch {
            verified: facts,
            out_of_bounds,
        } = batch;
        // The team and project records the batch carries: a name the
        // policy names that no scope here carries yet means the one of
        // them of that name (replica::peer_policy_arriving).
        let arriving: Vec<OrgScope> = facts.iter().filter_map(|f| org_record(&f.fact)).collect();
        let now = self.now_ms();
        let me = self.node_id();
        // Facts of other authors the peer relays: the rows holding them
        // hold nothing it lacks (it sent them). Its own it has anyway.
        let relayed: std::collections::HashSet<[u8; 32]> = match from_epoch {
            Some(_) => facts
                .iter()
                .filter(|f| f.fact.author() != *from)
                .map(|f| *blake3::hash(&f.to_bytes()).as_bytes())
                .collect(),
            None => Default::default(),
        };
        self.store.write(|tx| {
            let policy = replica::peer_policy_arriving(tx, from, &arriving)?
                .ok_or_else(|| not_a_peer(from))?;
            let sender = Sender {
                node: *from,
                policy,
            };
            let before = crate::store::max_seq(tx)?;
            crate::store::provenance::arriving_from(tx, from, &me);
            let mut r = SqlReplica::new(tx, me, now);
            for (fact, why) in &out_of_bounds {
                use amos_sync::ReplicaStore;
                r.refuse(fact, from, &Refusal::TimeOutOfBounds(why.to_string()))?;
            }
            let mut report = apply_batch(&mut r, &sender, facts, now, DEFAULT_MAX_SKEW_MS)?;
            report.refused += out_of_bounds.len() as u64;
            r.finish()?;
            let seqs = tx.last_seq().map(|last| (before + 1, last));
            if let (Some(run), Some(epoch)) = (seqs, from_epoch) {
                let sent =
                    |f: &[u8]| !relayed.is_empty() && relayed.contains(blake3::hash(f).as_bytes());
                echo::record_run(tx, from, &data_encoding::HEXLOWER.encode(epoch), run, sent)?;
            }
            if let Some((first, last)) = seqs {
                crate::store::provenance::note_arrivals(tx, first, last)?;
            }
            Ok((report, seqs))
        })
    }

    /// Retry every deferred fact (clock skew that has passed, links whose
    /// endpoints arrived). Facts from peers no longer registered are dropped
    /// into the audit log. [`Node::retry`] with the counts of a batch.
    pub fn retry_deferred(&mut self) -> Result<ApplyReport> {
        self.retry().map(|r| ApplyReport {
            applied: r.applied,
            stale: r.stale,
            refused: r.refused,
            deferred: r.still_deferred,
        })
    }

    /// Retry every deferred fact, as the gate now judges it at our clock now
    /// (docs/design.md §7.2): after every live session, on `amos serve`'s
    /// timer, after a bundle import and on `amos sync retry`. A fact whose
    /// sender's watermark has long moved past it is applied all the same:
    /// it waits here, not in the sender's log. One still too far ahead, or
    /// still missing an endpoint, is deferred again. Nothing deferred: no
    /// write transaction at all.
    pub fn retry(&mut self) -> Result<RetryReport> {
        if self.store.read(|r| replica::deferred_count(r))? == 0 {
            return Ok(RetryReport::default());
        }
        let now = self.now_ms();
        let me = self.node_id();
        self.store.write(|tx| {
            let rows = replica::take_deferred(tx)?;
            let checked =
                amos_protocol::verify_each(&rows.iter().map(|(_, b)| b).collect::<Vec<_>>());
            let mut total = ApplyReport::default();
            let retried = rows.len() as u64;
            for ((peer, _), fact) in rows.into_iter().zip(checked) {
                let Ok(fact) = fact else {
                    continue;
                };
                let arriving: Vec<OrgScope> = org_record(&fact.fact).into_iter().collect();
                let policy = replica::peer_policy_arriving(tx, &peer, &arriving)?;
                let before = match tx.last_seq() {
                    Some(s) => s,
                    None => crate::store::max_seq(tx)?,
                };
                crate::store::provenance::arriving_from(tx, &peer, &me);
                let mut r = SqlReplica::new(tx, me, now);
                match policy {
                    Some(policy) => {
                        let sender = Sender { node: peer, policy };
                        total.add(apply_batch(
                            &mut r,
                            &sender,
                            vec![fact],
                            now,
                            DEFAULT_MAX_SKEW_MS,
                        )?);
                    }
                    None => {
                        use amos_sync::ReplicaStore;
                        r.refuse(&fact, &peer, &amos_sync::Refusal::UnknownPeer)?;
                        total.refused += 1;
                    }
                }
                r.finish()?;
                if let Some(last) = tx.last_seq().filter(|l| *l > before) {
                    crate::store::provenance::note_arrivals(tx, before + 1, last)?;
                }
            }
            Ok(RetryReport {
                retried,
                applied: total.applied,
                stale: total.stale,
                refused: total.refused,
                still_deferred: replica::deferred_count(tx)? as u64,
            })
        })
    }

    /// `(digest, facts)` over the replicated facts the scopes admit (all, if none).
    pub fn digest(&self, scopes: &[String]) -> Result<(String, usize)> {
        let policy = if scopes.is_empty() {
            PeerPolicy::Full
        } else {
            let scopes = scopes
                .iter()
                .map(|s| self.resolve_scope(s))
                .collect::<Result<Vec<_>>>()?;
            PeerPolicy::scoped(scopes)?
        };
        replica::digest(&self.store, &policy)
    }

    /// Our side of a session's digest exchange with `peer`: the scopes of
    /// the policy we give it (empty: `full`) and our digest over the facts
    /// that policy admits now (the export filter of `amos digest --scope`:
    /// never over a fact the peer may not receive, so it tells nothing of
    /// gated facts), with their number.
    pub fn session_digest(&self, peer: &NodeId) -> Result<(Vec<Scope>, [u8; 32], u64)> {
        self.session_digest_at(peer, false)
    }

    /// [`Node::session_digest`], as the set digest kept on write when `set`
    /// (both sides speak [`SET_DIGEST_SINCE`] or later: one row read, no
    /// scan), else as the sorted-hash digest `amos digest` prints (a scan,
    /// cached while the store does not move), which older peers compute.
    pub fn session_digest_at(
        &self,
        peer: &NodeId,
        set: bool,
    ) -> Result<(Vec<Scope>, [u8; 32], u64)> {
        let policy = self.peer_policy(peer)?.ok_or_else(|| not_a_peer(peer))?;
        let scopes: Vec<Scope> = policy.scopes().cloned().collect();
        if scopes.len() > MAX_DIGEST_SCOPES {
            return Err(NodeError::Failed(format!(
                "the policy of {} names {} scopes: a session digest names at most {MAX_DIGEST_SCOPES}",
                peer.short(),
                scopes.len()
            )));
        }
        let (digest, n) = if set {
            replica::set_digest_bytes(&self.store, &policy)?
        } else {
            replica::digest_bytes(&self.store, &policy)?
        };
        Ok((scopes, digest, n as u64))
    }

    /// Compare `peer`'s session digest over `scopes` (empty: all) — the
    /// policy it gives us — with ours over the same scopes, and record the
    /// outcome in its row. Ours is computed here and never sent. Returns
    /// whether the two agree; `None`: not compared, because `scopes` names
    /// one the policy we give `peer` does not (docs/design.md §7.3,
    /// `amos_sync::digest::compared_over`) — then the row holds no
    /// comparison, so no disagreement asks for a repair.
    ///
    /// Must never: compute our digest over a fact the policy we give `peer`
    /// keeps from it. The scopes come from the peer; were ours computed over
    /// them as named, whether they agree (and the repair a disagreement asks
    /// for, which the peer sees) would tell it whether we hold anything in a
    /// scope it was never given.
    pub fn peer_compare_digest(
        &mut self,
        peer: &NodeId,
        scopes: &[Scope],
        digest: &[u8; 32],
        facts: u64,
    ) -> Result<Option<bool>> {
        self.peer_compare_digest_at(peer, scopes, digest, facts, false)
    }

    /// [`Node::peer_compare_digest`] of a digest of the kind `set` says
    /// ([`Node::session_digest_at`]): both sides of a session use the same.
    pub fn peer_compare_digest_at(
        &mut self,
        peer: &NodeId,
        scopes: &[Scope],
        digest: &[u8; 32],
        facts: u64,
        set: bool,
    ) -> Result<Option<bool>> {
        let ours = self.peer_policy(peer)?.ok_or_else(|| not_a_peer(peer))?;
        let Some(policy) = amos_sync::digest::compared_over(&ours, scopes) else {
            self.store.write(|tx| peers::clear_digest(tx, peer))?;
            return Ok(None);
        };
        let (mine, n) = if set {
            replica::set_digest_bytes(&self.store, &policy)?
        } else {
            replica::digest_bytes(&self.store, &policy)?
        };
        let check = peers::DigestCheck {
            agree: mine == *digest,
            at_ms: self.now_ms(),
            scopes: policy.to_string(),
            peer_facts: facts,
            my_facts: n as u64,
        };
        self.store
            .write(|tx| peers::record_digest(tx, peer, &check))?;
        Ok(Some(check.agree))
    }

    /// Stream, in batches, the wire bytes of every fact that may go to a peer
    /// with `policy` from rows changed after `since` (with retractions);
    /// returns the highest `seq` covered (the sender's side of a watermark).
    pub fn export(
        &self,
        policy: &PeerPolicy,
        since: i64,
        batch: usize,
        emit: impl FnMut(Vec<Vec<u8>>) -> Result<()>,
    ) -> Result<i64> {
        self.store.read(|r| {
            replica::export_facts(
                r,
                &replica::ExportSpec {
                    policy,
                    since,
                    retractions: true,
                    skip_author: None,
                    echo: None,
                    until: None,
                },
                batch,
                emit,
            )
        })
    }

    /// Like [`Node::export`] from `seq` 0, inside one read transaction (a
    /// consistent snapshot even while other processes write).
    pub fn export_snapshot(
        &mut self,
        policy: &PeerPolicy,
        batch: usize,
        emit: impl FnMut(Vec<Vec<u8>>) -> Result<()>,
    ) -> Result<i64> {
        self.store.read(|conn| {
            replica::export_facts(
                conn,
                &replica::ExportSpec {
                    policy,
                    since: 0,
                    retractions: true,
                    skip_author: None,
                    echo: None,
                    until: None,
                },
                batch,
                emit,
            )
        })
    }

    /// The facts a sync session sends `peer`: changed after `since`, admitted
    /// by the policy we gave it, with retractions; without the peer's own
    /// facts unless `peer_reset` (its log is new to us: it may have lost
    /// them). A watermark older than the last change of the peer's policy
    /// counts as 0.
    pub fn export_for_session(
        &self,
        peer: &NodeId,
        since: i64,
        peer_reset: bool,
        batch: usize,
        emit: impl FnMut(Vec<Vec<u8>>) -> Result<()>,
    ) -> Result<i64> {
        let policy = self.peer_policy(peer)?.ok_or_else(|| not_a_peer(peer))?;
        let policy_seq = self.store.read(|r| peers::policy_seq(r, peer))?;
        // Its watermark of us predates a policy change: start over.
        let since = if since < policy_seq { 0 } else { since };
        // Rows that hold only what it has (§7.1), on the terms its own
        // facts are skipped on: not when its log is new to us. The epoch
        // is the one our watermark of it names, which is the one its
        // `Hello` named when its log is not new to us.
        let watermark = self.watermark_of(peer)?;
        self.store.read(|r| {
            let echo = match (peer_reset, watermark) {
                (false, Some(w)) => Some(echo::load(
                    r,
                    peer,
                    &data_encoding::HEXLOWER.encode(&w.epoch),
                )?),
                _ => None,
            };
            replica::export_facts(
                r,
                &replica::ExportSpec {
                    policy: &policy,
                    since,
                    retractions: true,
                    skip_author: (!peer_reset).then_some(*peer),
                    echo: echo.as_ref(),
                    until: None,
                },
                batch,
                emit,
            )
        })
    }

    /// This node's log epoch as bytes (for a sync `Hello`).
    pub fn epoch_bytes(&self) -> Result<Epoch> {
        let hex = self.store.epoch()?;
        let mut out = [0u8; 16];
        if hex.len() != 32 {
            return Err(NodeError::Corrupt(format!("stored log epoch {hex:?}")));
        }
        for (i, b) in out.iter_mut().enumerate() {
            *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
                .map_err(|_| NodeError::Corrupt(format!("stored log epoch {hex:?}")))?;
        }
        Ok(out)
    }

    /// Our watermark of a peer's log: its epoch and the highest of its `seq`
    /// whose facts we applied (`None` before the first complete sync).
    pub fn watermark_of(&self, peer: &NodeId) -> Result<Option<Watermark>> {
        Ok(match self.store.read(|r| peers::watermark(r, peer))? {
            Some((Some(e), seq)) => {
                let mut epoch = [0u8; 16];
                let ok = e.len() == 32
                    && epoch.iter_mut().enumerate().all(|(i, b)| {
                        u8::from_str_radix(&e[2 * i..2 * i + 2], 16)
                            .map(|v| *b = v)
                            .is_ok()
                    });
                ok.then_some(Watermark { epoch, seq })
            }
            _ => None,
        })
    }

    /// Store our new watermark of a peer (after every batch it covers committed).
    pub fn save_watermark(&mut self, peer: &NodeId, w: &Watermark) -> Result<()> {
        let now = self.now_ms() as i64;
        let epoch = data_encoding::HEXLOWER.encode(&w.epoch);
        self.store
            .write(|tx| peers::save_watermark(tx, peer, &epoch, w.seq, now))
    }

    /// The `limit` latest refused facts, newest first.
    pub fn audit(&self, limit: usize) -> Result<Vec<AuditEntry>> {
        self.store.read(|r| replica::audit(r, limit))
    }

    /// The facts deferred until they can be applied.
    pub fn quarantined(&self) -> Result<Vec<DeferredInfo>> {
        self.store.read(|r| replica::deferred(r))
    }
}

/// Register `id` (or update its address, name and policy) inside `tx`. A
/// changed policy resets its watermark. `None` keeps what is recorded.
pub(crate) fn upsert_peer(
    tx: &mut Tx<'_>,
    me: NodeId,
    id: &NodeId,
    addr: Option<&str>,
    name: Option<&str>,
    policy: &PeerPolicy,
    now_ms: u64,
) -> Result<()> {
    let old = replica::peer_policy(tx, id)?;
    peers::upsert(tx, id, addr, name, policy, now_ms)?;
    if old.is_some_and(|o| o != *policy) {
        policy_changed(tx, me, id, policy)?;
    }
    // Last: its scan covers this transaction's writes.
    replica::keep_running(tx, policy)
}

/// A peer's policy changed: the memories it originated are re-judged as the
/// gate now would ([`replica::restand_origin`]: content it needs again comes
/// back when re-sent, content no longer needed goes), and both sides re-sync
/// from the start ([`reset_watermark`]).
fn policy_changed(tx: &mut Tx<'_>, me: NodeId, id: &NodeId, policy: &PeerPolicy) -> Result<()> {
    replica::restand_origin(tx, me, id, policy)?;
    reset_watermark(tx, id)
}

/// A policy changed: re-pull what the peer now sends us from the start (same
/// epoch, `seq` 0: its log is not new to us, so our own facts need not come
/// back), and re-send what we now let out: the change takes a fresh `seq`,
/// and a watermark of us below it predates the change.
fn reset_watermark(tx: &mut Tx<'_>, id: &NodeId) -> Result<()> {
    let seq = tx.next_seq()?;
    peers::reset_watermark(tx, id, seq)
}

/// A session or repair with a node that is not (or no longer) a peer:
/// refused, as the import gate refuses its facts (docs/design.md §6.6).
pub(crate) fn not_a_peer(peer: &NodeId) -> NodeError {
    NodeError::refused(
        Rule::NotAPeer,
        format!(
            "{} is not a registered peer: facts come and go only between registered peers \
         (docs/design.md §6.6); register it with `amos peers add {peer} --policy P`",
            peer.short()
        ),
    )
}

/// The team or project a team or project record is of.
fn org_record(fact: &amos_protocol::Fact) -> Option<OrgScope> {
    match &fact.body {
        amos_protocol::FactBody::Team(t) => Some(OrgScope::Team(t.id.clone())),
        amos_protocol::FactBody::Project(p) => Some(OrgScope::Project(p.id.clone())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::NewMemory;
    use crate::clock::MovingClock;
    use crate::home::Home;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    const NOW: u64 = 1_780_000_000_000;
    const HOUR: u64 = 3_600_000;

    fn node_at(dir: &std::path::Path, name: &str, clock: Arc<MovingClock>) -> Node {
        let home = Home::new(dir.join(name));
        Node::init(&home, Some(name)).unwrap();
        Node::open_with_clock(&home, clock).unwrap()
    }

    /// One direction of a live session as `net::session` runs it on the
    /// real store: `from` exports what `to`'s watermark of it has not
    /// covered, `to` applies it in one transaction and moves its watermark
    /// to the export's end; then the hook every finished session runs.
    fn session(from: &Node, to: &mut Node) -> (ApplyReport, RetryReport) {
        let since = to
            .watermark_of(&from.node_id())
            .unwrap()
            .map_or(0, |w| w.seq);
        let mut facts = Vec::new();
        let upto = from
            .export_for_session(&to.node_id(), since, since == 0, 64, |f| {
                facts.extend(f);
                Ok(())
            })
            .unwrap();
        let verified = facts
            .iter()
            .map(|f| SignedFact::decode_verified(f).unwrap())
            .collect();
        let epoch = from.epoch_bytes().unwrap();
        let (report, _) = to
            .apply_from_seqs(&from.node_id(), verified, Some(&epoch))
            .unwrap();
        to.save_watermark(&from.node_id(), &Watermark { epoch, seq: upto })
            .unwrap();
        (report, to.retry().unwrap())
    }

    /// A fact from a peer whose clock was two hours ahead is deferred; the
    /// session still moves the watermark past it, so no export will ever
    /// send it again. When our clock reaches it, the retry after the next
    /// (idle) session applies it — no bundle import involved.
    #[test]
    fn a_fact_from_a_fast_clock_applies_once_ours_reaches_it() {
        let dir = tempfile::tempdir().unwrap();
        let a_clock = Arc::new(MovingClock(AtomicU64::new(NOW)));
        let b_clock = Arc::new(MovingClock(AtomicU64::new(NOW + 2 * HOUR)));
        let mut a = node_at(dir.path(), "a", a_clock.clone());
        let mut b = node_at(dir.path(), "b", b_clock.clone());
        a.peer_add(&b.node_id().to_string(), None, "full").unwrap();
        b.peer_add(&a.node_id().to_string(), None, "full").unwrap();
        b.agent_add("bob", "agent", &[]).unwrap();
        let who = b.requester("bob").unwrap();
        let theta = b
            .add(&who, NewMemory::new("theta from the future"))
            .unwrap();

        let (first, retry) = session(&b, &mut a);
        let n = first.deferred;
        assert!(n >= 3 && first.applied == 0, "{first:?}");
        assert_eq!(retry.retried, n);
        assert_eq!((retry.applied, retry.still_deferred), (0, n), "{retry:?}");
        assert_eq!(a.digest(&[]).unwrap().1, 0, "nothing applied early");
        // The sender's watermark moved past them: the next session sends nothing.
        let (second, retry) = session(&b, &mut a);
        assert_eq!(second, ApplyReport::default());
        assert_eq!(retry.still_deferred, n);

        // An hour on, still more than the allowed skew behind: still deferred.
        a_clock.0.store(NOW + HOUR, Ordering::Relaxed);
        b_clock.0.store(NOW + 3 * HOUR, Ordering::Relaxed);
        let (_, retry) = session(&b, &mut a);
        assert_eq!((retry.applied, retry.still_deferred), (0, n), "{retry:?}");
        // Two hours on, our clock reached theirs: an idle session's retry applies them.
        a_clock.0.store(NOW + 2 * HOUR, Ordering::Relaxed);
        let (idle, retry) = session(&b, &mut a);
        assert_eq!(
            idle,
            ApplyReport::default(),
            "the sender sent nothing again"
        );
        assert_eq!(retry.retried, n);
        assert_eq!((retry.applied, retry.still_deferred), (n, 0), "{retry:?}");
        assert!(a.quarantined().unwrap().is_empty());
        assert_eq!(a.digest(&[]).unwrap(), b.digest(&[]).unwrap());
        // It arrived from b, though by the retry.
        assert_eq!(arrived_from(&a, theta), Some(b.node_id()));
        // Nothing deferred: a retry does nothing.
        assert_eq!(a.retry().unwrap(), RetryReport::default());
    }

    fn arrived_from(node: &Node, id: amos_protocol::MemoryId) -> Option<NodeId> {
        node.store
            .read(|r| crate::store::provenance::signed_registers(r, &id))
            .unwrap()
            .expect("a live memory")
            .arrived_from
    }

    /// A memory a session brings names the peer it arrived from, whether
    /// its row is new here or one held changed (an edit arriving); a
    /// later arrival of it from another peer leaves the first named; a
    /// memory of this node's, sent back to it, names nobody.
    #[test]
    fn a_session_names_where_each_memory_arrived_from() {
        let dir = tempfile::tempdir().unwrap();
        let clock = || Arc::new(MovingClock(AtomicU64::new(NOW)));
        let mut a = node_at(dir.path(), "a", clock());
        let mut b = node_at(dir.path(), "b", clock());
        let mut c = node_at(dir.path(), "c", clock());
        let ids = [a.node_id(), b.node_id(), c.node_id()];
        for (i, x) in [&mut a, &mut b, &mut c].into_iter().enumerate() {
            for (j, id) in ids.iter().enumerate() {
                if i != j {
                    x.peer_add(&id.to_string(), None, "full").unwrap();
                }
            }
        }
        a.agent_add("alice", "agent", &[]).unwrap();
        let alice = a.requester("alice").unwrap();
        let shared = |text: &str| {
            let mut m = NewMemory::new(text);
            m.share = vec![amos_protocol::Scope::Global];
            m
        };
        let plain = a.add(&alice, shared("plain")).unwrap();
        let edited = a.add(&alice, shared("edited")).unwrap();
        session(&a, &mut b);
        assert_eq!(arrived_from(&b, plain), Some(a.node_id()));
        a.update(&alice, &edited.to_string(), "edited again")
            .unwrap();
        session(&a, &mut b);
        b.agent_add("bob", "agent", &[]).unwrap();
        let bob = b.requester("bob").unwrap();
        let mine = b.add(&bob, shared("bob's")).unwrap();
        // c gets a's memories from b first, then from a itself.
        session(&b, &mut c);
        session(&a, &mut c);
        session(&c, &mut b);
        for (node, id, from) in [
            (&b, edited, Some(a.node_id())),
            (&c, plain, Some(b.node_id())),
            (&c, edited, Some(b.node_id())),
            (&c, mine, Some(b.node_id())),
            (&b, mine, None),
        ] {
            assert_eq!(arrived_from(node, id), from, "{id} on {}", node.name());
        }
    }
}

#[cfg(test)]
mod project_policy_tests {
    use super::*;
    use crate::api::node::test_node;
    use amos_protocol::{FactBody, OrgScope};

    /// What an export under `policy` from `since` sends of the org: a line
    /// per team record and membership, and the export's end.
    fn org_out(node: &Node, policy: &PeerPolicy, since: i64) -> (Vec<String>, i64) {
        let mut out = Vec::new();
        let high = node
            .export(policy, since, 64, |facts| {
                for f in facts {
                    let f = SignedFact::decode_verified(&f).unwrap();
                    match &f.fact.body {
                        // By display name: the ids are qualified by this node.
                        FactBody::Team(t) => out.push(format!("team {}", t.id.name())),
                        FactBody::Membership(m) => out.push(match &m.scope {
                            OrgScope::Team(t) => format!("team:{} {}", t.name(), m.agent),
                            OrgScope::Project(p) => format!("project:{} {}", p.name(), m.agent),
                        }),
                        _ => {}
                    }
                }
                Ok(())
            })
            .unwrap();
        out.sort();
        (out, high)
    }

    /// Under a `project:` policy the project's team record and its
    /// members' team memberships go once, not on every sync; a project
    /// membership new since the watermark brings its member's unchanged
    /// team membership along.
    #[test]
    fn team_memberships_are_not_resent_under_a_project_policy() {
        let (_dir, _home, mut node, _who) = test_node("carol");
        node.team_create("apollo", None).unwrap();
        node.agent_add("bob", "agent", &["apollo".into()]).unwrap();
        node.agent_add("dave", "agent", &["apollo".into()]).unwrap();
        node.project_create("moon", "apollo", None).unwrap();
        node.project_member("moon", "bob", true).unwrap();
        let policy = node
            .store
            .read(|r| {
                crate::api::scopes::resolve_policy(
                    r,
                    "project:moon",
                    crate::api::scopes::Unheld::AsTyped,
                )
            })
            .unwrap();

        let (first, high) = org_out(&node, &policy, 0);
        assert!(first.contains(&"team apollo".to_owned()), "{first:?}");
        assert!(first.contains(&"team:apollo bob".to_owned()), "{first:?}");
        assert!(
            !first.iter().any(|l| l.contains("dave")),
            "not a project member"
        );
        // Nothing changed: nothing of the org goes again.
        let (again, high) = org_out(&node, &policy, high);
        assert_eq!(again, Vec::<String>::new());
        // dave joins the project: his old team membership now goes too.
        node.project_member("moon", "dave", true).unwrap();
        let (joined, high) = org_out(&node, &policy, high);
        assert!(
            joined.contains(&"team:apollo dave".to_owned()),
            "{joined:?}"
        );
        assert!(
            !joined.contains(&"team:apollo bob".to_owned()),
            "{joined:?}"
        );
        let (idle, _) = org_out(&node, &policy, high);
        assert_eq!(idle, Vec::<String>::new());
        // The digest still covers them all.
        assert_eq!(org_out(&node, &policy, 0).0.len(), first.len() + 2);
    }
}

#[cfg(test)]
mod running_digest_tests {
    use super::*;
    use crate::api::NewMemory;
    use crate::api::node::test_node;
    use crate::home::Home;
    use crate::store::replica::compute_set_digest;

    use crate::api::node::TestRng;

    /// The running set digest of every policy a session asked for equals
    /// the full scan after every change: local adds with any grants,
    /// shares and revocations, tombstones, links, edits (the text log),
    /// team and project memberships (a `project:` policy's team rows),
    /// facts applied from a peer (new rows written whole) and the peer's
    /// policy changing (its memories re-judged).
    #[test]
    fn running_digests_equal_the_full_scan() {
        for seed in [7u64, 2026, 0x9e37_79b9] {
            one_run(TestRng::xorshift(seed), seed, 70);
        }
    }

    /// The same on ChaCha sequences, which found a bug the xorshift one
    /// never reached: after b's policy changes to one no peer had (seed 7:
    /// step 29; seed 0x9e37_79b9: step 21), the running digest started by
    /// the change scanned up to the counter stored before the transaction,
    /// so the acl facts of b's memories re-judged in it (fresh `seq`s) were
    /// left out: 2 facts against the scan's 3 (`keep_running` now stores
    /// the transaction's counter before it scans).
    #[test]
    fn running_digests_equal_the_full_scan_chacha() {
        for seed in [7u64, 0x9e37_79b9, 11, 2027] {
            one_run(TestRng::new(seed), seed, 70);
        }
    }

    fn one_run(mut rng: TestRng, seed: u64, steps: usize) {
        let (_dir, _home, mut a, _) = test_node("carol");
        let dir_b = tempfile::tempdir().unwrap();
        let home_b = Home::new(dir_b.path().join("b"));
        Node::init(&home_b, Some("b")).unwrap();
        let mut b = Node::open(&home_b).unwrap();
        for t in ["apollo", "zeus"] {
            a.team_create(t, None).unwrap();
        }
        a.agent_add("dave", "agent", &["apollo".into()]).unwrap();
        a.agent_add("erin", "agent", &[]).unwrap();
        a.team_member("apollo", "carol", true).unwrap();
        a.team_member("zeus", "carol", true).unwrap();
        a.project_create("moon", "apollo", None).unwrap();
        a.project_member("moon", "carol", true).unwrap();
        b.agent_add("bob", "agent", &[]).unwrap();
        a.peer_add(&b.node_id().to_string(), None, "full").unwrap();
        b.peer_add(&a.node_id().to_string(), None, "full").unwrap();
        let mut peers = vec![b.node_id()];
        for (i, policy) in ["team:apollo", "project:moon", "team:zeus,global"]
            .iter()
            .enumerate()
        {
            let id = amos_protocol::NodeIdentity::from_secret([i as u8 + 40; 32]).node_id();
            a.peer_add(&id.to_string(), None, policy).unwrap();
            peers.push(id);
        }
        // Registering the peers started their policies' running digests.
        let check = |a: &Node, step: &str| {
            let mut policies: Vec<PeerPolicy> = vec![PeerPolicy::Full];
            for p in &peers {
                policies.push(a.peer_policy(p).unwrap().unwrap());
            }
            for policy in policies {
                let (running, scan) = a
                    .store
                    .read(|r| {
                        Ok((
                            crate::store::digest::running_of(r, &policy)?,
                            compute_set_digest(r, &policy)?,
                        ))
                    })
                    .unwrap();
                let running = running.unwrap_or_else(|| panic!("{policy} has no running digest"));
                assert_eq!(running, scan, "seed {seed}, {policy}, after {step}");
            }
        };
        check(&a, "the set-up");
        let shares: [&[&str]; 6] = [
            &[],
            &["team:apollo"],
            &["team:zeus"],
            &["global"],
            &["project:moon"],
            &["team:apollo", "team:zeus"],
        ];
        let scopes = ["team:apollo", "team:zeus", "global", "project:moon"];
        let mut mine: Vec<String> = Vec::new();
        let mut from_b: Vec<String> = Vec::new();
        let mut b_since = 0;
        for step in 0..steps {
            let who = a.requester("carol").unwrap();
            let pick = |rng: &mut TestRng, v: &[String]| v.get(rng.below(v.len().max(1))).cloned();
            let op = rng.below(10);
            let what = match op {
                0 | 1 => {
                    let mut m = NewMemory::new(format!("note {step} of seed {seed}"));
                    m.share = shares[rng.below(shares.len())]
                        .iter()
                        .map(|s| s.parse().unwrap())
                        .collect();
                    if let Ok(id) = a.add(&who, m) {
                        mine.push(id.to_string());
                    }
                    "an add"
                }
                2 => {
                    if let Some(id) = pick(&mut rng, &mine) {
                        let scope = scopes[rng.below(scopes.len())];
                        let _ = a.set_grant(&who, &id, scope, rng.below(2) == 0);
                    }
                    "a share or revocation"
                }
                3 => {
                    if let Some(id) = pick(&mut rng, &mine) {
                        let _ = a.forget(&who, &id);
                    }
                    "a tombstone"
                }
                4 => {
                    let all: Vec<String> = mine.iter().chain(&from_b).cloned().collect();
                    if let (Some(x), Some(y)) = (pick(&mut rng, &all), pick(&mut rng, &all)) {
                        let _ = a.link(&who, &x, &y, None, 0.5);
                    }
                    "a link"
                }
                5 => {
                    if let Some(id) = pick(&mut rng, &mine) {
                        let _ = a.update(&who, &id, &format!("edited at step {step}"));
                    }
                    "an edit"
                }
                6 => {
                    let agent = ["dave", "erin"][rng.below(2)];
                    let team = ["apollo", "zeus"][rng.below(2)];
                    let _ = a.team_member(team, agent, rng.below(3) != 0);
                    "a team membership"
                }
                7 => {
                    let agent = ["dave", "erin"][rng.below(2)];
                    let _ = a.project_member("moon", agent, rng.below(3) != 0);
                    "a project membership"
                }
                8 => {
                    let bob = b.requester("bob").unwrap();
                    let mut m = NewMemory::new(format!("from b at step {step}"));
                    m.share = shares[rng.below(shares.len())]
                        .iter()
                        .map(|s| s.parse().unwrap())
                        .collect();
                    if let Ok(id) = b.add(&bob, m) {
                        from_b.push(id.to_string());
                    }
                    if rng.below(2) == 0
                        && let Some(id) = pick(&mut rng, &from_b)
                    {
                        let _ = b.update(&bob, &id, &format!("b edited at {step}"));
                    }
                    b_since = crate::api::node::pass_facts(&b, &mut a, b_since);
                    "facts from b"
                }
                _ => {
                    let policy =
                        ["full", "team:apollo", "global", "team:zeus,global"][rng.below(4)];
                    a.peer_set_policy(&b.node_id().to_string(), policy).unwrap();
                    "b's policy changing"
                }
            };
            check(&a, &format!("step {step}: {what}"));
        }
    }
}
