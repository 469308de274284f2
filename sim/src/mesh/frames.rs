//! A session's frames on the simulated links: what each side's session
//! asks for ([`Action`]s) carried out — facts and messages encoded with the
//! real codec, counted, and delivered after the link's latency and size
//! over its bandwidth, in order per direction; streams ended; held-back
//! facts kept by the product's rule; a session finished and reported to
//! the node's schedulers.
//!
//! Boundary: the session decides, this only moves its bytes.

use super::*;

impl Mesh {
    pub(super) fn run_actions(&mut self, sid: u64, side: usize, actions: Vec<Action>, depth: u32) {
        let mut todo: VecDeque<Action> = actions.into();
        while let Some(act) = todo.pop_front() {
            let Some((me, peer)) = self.ends(sid, side) else {
                return;
            };
            let peer_id = self.node_id(peer);
            match act {
                Action::Send(m) => self.send(sid, side, m, depth + 1),
                Action::Export { since, peer_reset } => {
                    let (_, decodes) = self.peer_decodes(sid, side);
                    let r = &self.nodes[me].replica;
                    // What was held back goes once the peer decodes it.
                    let held = r.held_back_for(&peer_id);
                    let since = held.export_from(since, decodes);
                    // A session that repairs sends what the peer lacks instead.
                    let (facts, high) = if since == SKIP_EXPORT {
                        (Vec::new(), r.seq())
                    } else {
                        r.export_for(&peer_id, since, peer_reset)
                    };
                    let upto = Watermark {
                        epoch: r.epoch,
                        seq: high,
                    };
                    let (facts, withheld) = decodes.split_decodable(facts);
                    let needs = withheld.iter().fold(Features::NONE, |a, f| a.union(*f));
                    let now = held.after_export(since, withheld.len() as u64, needs);
                    if now != held {
                        self.nodes[me].replica.held_back.insert(peer_id, now);
                    }
                    self.stats.facts_held_back += withheld.len() as u64;
                    let sent = self.send_facts(sid, side, &facts, depth + 1);
                    match self.session_event(sid, side, Event::ExportDone { upto, sent }) {
                        Some(more) => todo.extend(more),
                        None => return,
                    }
                }
                Action::PeerListens(_) => {}
                Action::BuildRepairSet => {
                    // What an export from 0 would send, retractions included.
                    let r = &self.nodes[me].replica;
                    let (facts, high) = r.export_for(&peer_id, 0, true);
                    let upto = Watermark {
                        epoch: r.epoch,
                        seq: high,
                    };
                    let Ok(items) = ItemSet::from_facts(facts.iter().map(Vec::as_slice)) else {
                        self.finish(sid, false);
                        return;
                    };
                    match self.session_event(sid, side, Event::RepairSet { items, upto }) {
                        Some(more) => todo.extend(more),
                        None => return,
                    }
                }
                Action::SendRepairFacts(ids) => {
                    let wanted: BTreeSet<ItemId> = ids.into_iter().collect();
                    let (facts, _) = self.nodes[me].replica.export_for(&peer_id, 0, true);
                    let facts: Vec<Vec<u8>> = facts
                        .into_iter()
                        .filter(|f| wanted.contains(&repair::fact_id(f)))
                        .collect();
                    // Never what the peer cannot decode.
                    let (facts, _) = self.peer_decodes(sid, side).1.split_decodable(facts);
                    let sent = self.send_facts(sid, side, &facts, depth + 1);
                    match self.session_event(sid, side, Event::RepairSent { sent }) {
                        Some(more) => todo.extend(more),
                        None => return,
                    }
                }
                Action::Apply(facts) => {
                    // A build without a feature does not decode a fact that
                    // needs it: the batch fails, and the session with it.
                    let decodes = self.nodes[me].speaks.features;
                    let undecodable = facts
                        .iter()
                        .filter(|f| {
                            !decodes
                                .contains(Features::required_by_wire(f).unwrap_or(Features::NONE))
                        })
                        .count();
                    if undecodable > 0 {
                        self.stats.undecodable += undecodable as u64;
                        self.finish(sid, false);
                        return;
                    }
                    let now = self.now_ms();
                    let before = self.nodes[me].replica.seq();
                    match self.nodes[me].replica.apply(peer_id, &facts, now) {
                        Ok(rep) => {
                            self.stats.facts_applied += rep.applied;
                            self.stats.facts_refused += rep.refused;
                            self.stats.facts_deferred += rep.deferred;
                            if rep.applied > 0 {
                                self.note_change(me);
                            }
                            let after = self.nodes[me].replica.seq();
                            if after != before {
                                // What `serve` hears: the `seq`s this batch
                                // took, then the watcher's read.
                                if let Some(s) = self.nodes[me].pusher.as_mut() {
                                    s.stored(&peer, before + 1, after);
                                }
                                self.observe_seq(me);
                            }
                        }
                        Err(_) => {
                            self.finish(sid, false);
                            return;
                        }
                    }
                }
                Action::SaveWatermark(w) => {
                    self.nodes[me].replica.watermarks.insert(peer_id, w);
                }
                Action::SendDigest
                    if !self.nodes[me]
                        .replica
                        .held_back_for(&peer_id)
                        .allows_digest() =>
                {
                    // Facts are held back for the peer: no digest; ending
                    // our stream finishes its side without a comparison.
                    self.end_stream(sid, side, depth + 1);
                }
                Action::SendDigest => {
                    let set = self.peer_decodes(sid, side).0 >= SET_DIGEST_SINCE;
                    let (scopes, digest, facts) =
                        self.nodes[me].replica.session_digest(&peer_id, set);
                    self.send(
                        sid,
                        side,
                        SyncV1::Digest {
                            scopes,
                            digest,
                            facts,
                        },
                        depth + 1,
                    );
                }
                Action::CompareDigest { .. }
                    if !self.nodes[me]
                        .replica
                        .held_back_for(&peer_id)
                        .allows_digest() => {}
                Action::CompareDigest { scopes, digest, .. } => {
                    let set = self.peer_decodes(sid, side).0 >= SET_DIGEST_SINCE;
                    match self.nodes[me]
                        .replica
                        .compare_digest(&peer_id, &scopes, &digest, set)
                    {
                        Some(true) => self.stats.digests_agree += 1,
                        Some(false) => self.stats.digests_disagree += 1,
                        None => {}
                    }
                }
                Action::Finished => {
                    let both = match self.sessions.get_mut(&sid) {
                        Some(l) => {
                            l.done[side] = true;
                            l.done == [true, true]
                        }
                        None => false,
                    };
                    if both {
                        self.finish(sid, true);
                    }
                }
            }
        }
    }

    /// Feed a session side an event; `None` if the session broke.
    pub(super) fn session_event(
        &mut self,
        sid: u64,
        side: usize,
        ev: Event,
    ) -> Option<Vec<Action>> {
        let r = self
            .sessions
            .get_mut(&sid)?
            .sides
            .get_mut(side)?
            .as_mut()?
            .handle(ev);
        match r {
            Ok(acts) => Some(acts),
            Err(_) => {
                self.stats.protocol_errors += 1;
                self.finish(sid, false);
                None
            }
        }
    }

    /// Send `facts` as `Facts` messages of [`EXPORT_BATCH`], counting them
    /// for the run and the session; returns how many.
    pub(super) fn send_facts(
        &mut self,
        sid: u64,
        from: usize,
        facts: &[Vec<u8>],
        depth: u32,
    ) -> u64 {
        let sent = facts.len() as u64;
        self.stats.facts_sent += sent;
        if let Some(l) = self.sessions.get_mut(&sid) {
            l.facts += sent;
        }
        for chunk in facts.chunks(EXPORT_BATCH) {
            self.send(
                sid,
                from,
                SyncV1::Facts {
                    facts: chunk.to_vec(),
                },
                depth,
            );
        }
        sent
    }

    pub(super) fn send(&mut self, sid: u64, from: usize, msg: SyncV1, depth: u32) {
        let bytes = SyncMessage::V1(msg).encode();
        let size = bytes.len() as u64 + 4;
        let now = self.now();
        let lost = self.rng.chance(self.cfg.loss);
        let Some(l) = self.sessions.get_mut(&sid) else {
            return;
        };
        l.bytes += size;
        l.messages += 1;
        l.depth = l.depth.max(depth);
        self.stats.bytes += size;
        self.stats.messages += 1;
        if lost {
            self.finish(sid, false);
            return;
        }
        let wire = size * MS / self.cfg.bytes_per_ms.max(1);
        let at = (now + l.latency + wire).max(l.last[from]);
        l.last[from] = at;
        if l.pipe.is_some() {
            self.pipe_send(sid, from, bytes, false, at, depth);
            return;
        }
        self.clock.at(
            at,
            Ev::Deliver {
                sid,
                to: 1 - from,
                bytes,
                depth,
            },
        );
    }

    /// Side `from` ends its stream: the peer hears it after what was sent.
    pub(super) fn end_stream(&mut self, sid: u64, from: usize, depth: u32) {
        let now = self.now();
        let Some(l) = self.sessions.get_mut(&sid) else {
            return;
        };
        let at = (now + l.latency).max(l.last[from]);
        l.last[from] = at;
        l.depth = l.depth.max(depth);
        if l.pipe.is_some() {
            self.pipe_send(sid, from, Vec::new(), true, at, depth);
            return;
        }
        self.clock.at(
            at,
            Ev::Ended {
                sid,
                to: 1 - from,
                depth,
            },
        );
    }

    pub(super) fn ended(&mut self, sid: u64, to: usize, depth: u32) {
        if !self.path_up(sid) {
            self.finish(sid, false);
            return;
        }
        self.receive_end(sid, to, depth);
    }

    /// Side `to` reads the other's end of stream.
    pub(super) fn receive_end(&mut self, sid: u64, to: usize, depth: u32) {
        if let Some(acts) = self.session_event(sid, to, Event::PeerEnded) {
            self.run_actions(sid, to, acts, depth);
        }
    }

    pub(super) fn deliver(&mut self, sid: u64, to: usize, bytes: &[u8], depth: u32) {
        if !self.path_up(sid) {
            self.finish(sid, false);
            return;
        }
        self.receive(sid, to, bytes, depth);
    }

    /// Side `to` reads a frame: the message it decodes to goes to its
    /// session; one that does not decode breaks the session.
    pub(super) fn receive(&mut self, sid: u64, to: usize, bytes: &[u8], depth: u32) {
        let Ok(SyncMessage::V1(msg)) = SyncMessage::decode(bytes) else {
            self.finish(sid, false);
            return;
        };
        if let Some(acts) = self.session_event(sid, to, Event::Received(msg)) {
            self.run_actions(sid, to, acts, depth);
        }
    }

    pub(super) fn finish(&mut self, sid: u64, ok: bool) {
        let Some(l) = self.sessions.remove(&sid) else {
            return;
        };
        let key = pair(l.a, l.b);
        self.inflight.remove(&key);
        if ok {
            self.stats.sessions_ok += 1;
        } else {
            self.stats.sessions_failed += 1;
        }
        self.records.push(SessionRecord {
            dialler: l.a,
            acceptor: l.b,
            started: l.started,
            ended: self.now(),
            ok,
            push: l.push,
            bytes: l.bytes,
            messages: l.messages,
            round_trips: l.depth.div_ceil(2),
            facts_sent: l.facts,
            repaired: ok && l.sides.iter().flatten().any(Session::repaired),
            version: l.versions[0],
            via: l.via,
        });
        self.after_session(l.a, l.b, l.started, ok, l.push);
    }
}
