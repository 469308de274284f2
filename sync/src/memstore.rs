//! An in-memory [`ReplicaStore`]: the reference implementation the property
//! tests and simulations run replicas on. It keeps the latest fact of every
//! register, the per-memory state the gate needs, and the deferred and
//! refused facts.

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;

use amos_acl::{AuthorizedScopes, Gated, OrgGraph, PeerPolicy, ProjectState, TeamState};
use amos_protocol::{
    AgentId, Fact, FactBody, Grants, Hlc, HlcState, MemoryFixed, MemoryId, MemoryText, NodeId,
    NodeIdentity, OrgScope, ProjectId, Register, SignedFact, TeamId, Verified,
};

use crate::digest::{Digest, SetDigest, Term};
use crate::export::{self, MemoryExport};
use crate::gate::{self, Admission};
use crate::gate::{DeferReason, Refusal};
use crate::replica::{Clash, MemoryState, ReplicaStore};
use crate::text::{TextDoc, TextLog};

/// Per-memory state beside its facts.
#[derive(Debug, Clone)]
pub struct MemMeta {
    /// The fields fixed at creation.
    pub fixed: MemoryFixed,
    /// The grants in force here (grants ∩ the restriction of its origin).
    pub effective: Grants,
    /// Every grant the memory's acl facts ever named (what a restand recomputes from).
    pub grants_ever: Grants,
    /// Whether the owner rule holds here.
    pub owner_trusted: bool,
    /// Whether the memory is forgotten.
    pub tombstoned: bool,
    /// The clock of content erased by a purge (kept so replays stay stale).
    pub purged_v: Option<Hlc>,
}

/// One replica held in memory (a clone is a backup of it).
#[derive(Debug, Clone)]
pub struct MemStore {
    /// This replica's node.
    pub me: NodeId,
    /// The policy we gave each peer.
    pub peers: BTreeMap<NodeId, PeerPolicy>,
    /// The latest verified fact per register.
    pub facts: BTreeMap<Register, Verified<SignedFact>>,
    /// Per-memory state beside the facts.
    pub memories: BTreeMap<MemoryId, MemMeta>,
    /// This node's clock.
    pub hlc: HlcState,
    /// Facts set aside, with their sender and why.
    pub deferred: Vec<(SignedFact, NodeId, DeferReason)>,
    /// Facts refused, with their sender and why (the audit log).
    pub refused: Vec<(SignedFact, NodeId, Refusal)>,
    /// Edited memories: their text logs and documents.
    pub texts: BTreeMap<MemoryId, (TextLog, TextDoc)>,
    /// Legacy scopes two origins created ([`ReplicaStore::record_clash`]).
    /// Local-only.
    pub clashes: BTreeMap<OrgScope, Clash>,
}

impl MemStore {
    /// An empty replica of node `me`, with no peers.
    pub fn new(me: NodeId) -> Self {
        MemStore {
            me,
            peers: BTreeMap::new(),
            facts: BTreeMap::new(),
            memories: BTreeMap::new(),
            hlc: HlcState::default(),
            deferred: Vec::new(),
            refused: Vec::new(),
            texts: BTreeMap::new(),
            clashes: BTreeMap::new(),
        }
    }

    /// Edit memory `mem`'s text as `amos update` does: an automerge change
    /// in a signed content fact, stored here. `None` if the memory's content
    /// is not held, the text is unchanged, or the edit cannot be made.
    pub fn edit_text(
        &mut self,
        identity: &NodeIdentity,
        mem: &MemoryId,
        new_text: &str,
        now_ms: u64,
    ) -> Option<Verified<SignedFact>> {
        let current = self.facts.get(&Register::MemoryContent(*mem))?.clone();
        let FactBody::MemoryContent(mut c) = current.fact.body.clone() else {
            return None;
        };
        let mut doc = match self.texts.get(mem) {
            Some((log, _)) => log.build(*mem).ok()?,
            None => TextLog::start(Some(&current)).build(*mem).ok()?,
        };
        let clock = self.hlc.tick(now_ms, self.me);
        let change = doc.edit(new_text, &self.me, &clock).ok()??;
        c.text = MemoryText::Edit(change);
        self.sign_and_put(identity, clock, FactBody::MemoryContent(c))
    }

    /// Compact memory `mem`'s history as its origin does: a snapshot of the
    /// whole document in a signed content fact.
    pub fn compact_text(
        &mut self,
        identity: &NodeIdentity,
        mem: &MemoryId,
        now_ms: u64,
    ) -> Option<Verified<SignedFact>> {
        let current = self.facts.get(&Register::MemoryContent(*mem))?.clone();
        let FactBody::MemoryContent(mut c) = current.fact.body.clone() else {
            return None;
        };
        let saved = self.texts.get_mut(mem)?.1.save();
        let clock = self.hlc.tick(now_ms, self.me);
        c.text = MemoryText::Snapshot(saved);
        self.sign_and_put(identity, clock, FactBody::MemoryContent(c))
    }

    fn sign_and_put(
        &mut self,
        identity: &NodeIdentity,
        clock: Hlc,
        body: FactBody,
    ) -> Option<Verified<SignedFact>> {
        let signed = identity.sign(Fact { clock, body }).ok()?;
        let admission = Admission::local(identity, signed.clone()).ok()?;
        let Ok(()) = self.put(admission);
        Some(signed)
    }

    /// Offer a content fact's text to its memory's log, starting the log
    /// at the first edit — or, with `start_on_plain` (a text that lost by
    /// clock but counts: [`crate::Verdict::MergeText`]), at any text, as
    /// the real store does. Returns whether anything changed.
    fn offer_text(&mut self, fact: &Verified<SignedFact>, start_on_plain: bool) -> bool {
        let FactBody::MemoryContent(c) = &fact.fact.body else {
            return false;
        };
        let id = c.id;
        if !self.texts.contains_key(&id) {
            if c.text.plain().is_some() && !start_on_plain {
                return false;
            }
            let current = self.facts.get(&Register::MemoryContent(id));
            let log = TextLog::start(current.map(|f| &**f));
            let doc = match log.build(id) {
                Ok(d) => d,
                Err(_) => TextDoc::empty(id),
            };
            self.texts.insert(id, (log, doc));
        }
        let Some((log, doc)) = self.texts.get_mut(&id) else {
            return false;
        };
        log.offer(id, fact, doc).unwrap_or(false)
    }

    /// Every text-log fact of memory `id` but its content register (sent
    /// and counted once, as the real store does).
    fn text_facts(&self, id: &MemoryId) -> Vec<Vec<u8>> {
        let register = self
            .facts
            .get(&Register::MemoryContent(*id))
            .map(|f| f.to_bytes());
        self.texts
            .get(id)
            .map(|(log, _)| {
                log.facts()
                    .filter(|b| register.as_deref() != Some(*b))
                    .map(<[u8]>::to_vec)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Author, sign and store a local write at physical time `now_ms`.
    pub fn write(
        &mut self,
        id: &NodeIdentity,
        body: FactBody,
        now_ms: u64,
    ) -> Verified<SignedFact> {
        let clock = self.hlc.tick(now_ms, self.me);
        let signed = match id.sign(Fact { clock, body }) {
            Ok(s) => s,
            Err(e) => panic!("memstore write of an invalid fact: {e}"),
        };
        let Ok(admission) = Admission::local(id, signed.clone()) else {
            panic!("memstore write signed by another key");
        };
        let Ok(()) = self.put(admission);
        signed
    }

    fn org_fact(&self, reg: &Register) -> Option<&Fact> {
        self.facts.get(reg).map(|f| &f.fact)
    }

    /// The facts that may go to a peer with `policy` (the whole state, filtered).
    pub fn export(&self, policy: &PeerPolicy) -> Vec<Verified<SignedFact>> {
        self.export_rows(policy, |_| true)
    }

    /// [`Self::export`] restricted to the rows `row` picks — a memory's row
    /// is named by its content register (its acl, tombstone and text facts
    /// go with it), every other fact by its own register — as a store with
    /// a change log exports the rows changed since a watermark. Like the
    /// real store, a `project:P` policy's team record and the memberships
    /// it needs go whatever `row` says (sent whole on every export).
    pub fn export_rows(
        &self,
        policy: &PeerPolicy,
        row: impl Fn(&Register) -> bool,
    ) -> Vec<Verified<SignedFact>> {
        let mut decisions: BTreeMap<MemoryId, MemoryExport> = BTreeMap::new();
        for (id, m) in &self.memories {
            decisions.insert(
                *id,
                export::memory(policy, &m.effective, &m.grants_ever, m.tombstoned),
            );
        }
        let via = export::teams_via_projects(policy, |p| self.project_team_of(p));
        let mut out = Vec::new();
        for (reg, f) in &self.facts {
            let go = match reg {
                Register::MemoryContent(id) => {
                    row(reg) && decisions.get(id) == Some(&MemoryExport::Whole)
                }
                Register::MemoryAcl(id) | Register::MemoryTombstone(id) => {
                    row(&Register::MemoryContent(*id))
                        && decisions.get(id).is_some_and(|d| *d != MemoryExport::None)
                }
                Register::Link(a, b, _) => {
                    let d = |x| decisions.get(x).copied().unwrap_or(MemoryExport::None);
                    row(reg) && export::link(d(a), d(b))
                }
                Register::Team(t) => {
                    (row(reg) && export::org(policy, &OrgScope::Team(t.clone())))
                        || via.contains_key(t)
                }
                Register::Project(p) => {
                    row(reg) && export::org(policy, &OrgScope::Project(p.clone()))
                }
                Register::Membership(s, a) => {
                    (row(reg) && export::org(policy, s))
                        || matches!(s, OrgScope::Team(t) if via.get(t).is_some_and(|ps| {
                            ps.iter().any(|p| self.is_member(&OrgScope::Project(p.clone()), a))
                        }))
                }
                Register::Agent(_) | Register::Profile(_) => row(reg) && export::registry(policy),
            };
            if go {
                out.push(f.clone());
            }
        }
        for (id, d) in &decisions {
            if *d == MemoryExport::Whole && row(&Register::MemoryContent(*id)) {
                for b in self.text_facts(id) {
                    if let Ok(f) = SignedFact::decode_verified(&b) {
                        out.push(f);
                    }
                }
            }
        }
        out
    }

    fn is_member(&self, scope: &OrgScope, agent: &AgentId) -> bool {
        matches!(
            self.org_fact(&Register::Membership(scope.clone(), agent.clone())),
            Some(Fact { body: FactBody::Membership(m), .. }) if m.present
        )
    }

    /// Change the policy we give `node` (registering it if new), and
    /// re-judge every memory it originated as the gate would now: its
    /// effective grants, its owner rule, and its content — erased if no
    /// longer needed, taken back when the origin re-sends it.
    pub fn set_peer_policy(&mut self, node: NodeId, policy: PeerPolicy) {
        self.peers.insert(node, policy.clone());
        let ids: Vec<MemoryId> = self
            .memories
            .iter()
            .filter(|(_, m)| m.fixed.origin == node && !m.tombstoned)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            let standing = gate::peer_standing(&policy);
            let (grants, has_acl) = self.signed_grants(&id);
            let mut effective = standing.effective(&grants);
            let Ok(cut) = gate::clash_cut(self, node, &grants);
            for g in cut.iter() {
                effective.remove(g);
            }
            let keep = standing.keeps_content(&effective);
            let Some(m) = self.memories.get_mut(&id) else {
                continue;
            };
            m.owner_trusted = standing.owner_trusted;
            for g in effective.iter() {
                m.grants_ever.insert(g.clone());
            }
            m.effective = effective;
            // Content that came before its acl waits for the acl to judge
            // it (as on arrival): a policy change alone does not erase it.
            if !keep
                && has_acl
                && let Some(c) = self.facts.remove(&Register::MemoryContent(id))
            {
                m.purged_v = Some(c.fact.clock);
                self.texts.remove(&id);
            }
        }
    }

    /// Memory `id`'s signed grants, and whether its acl fact is held.
    fn signed_grants(&self, id: &MemoryId) -> (Grants, bool) {
        match self
            .facts
            .get(&Register::MemoryAcl(*id))
            .map(|f| &f.fact.body)
        {
            Some(FactBody::MemoryAcl(a)) => (a.grants.clone(), true),
            _ => (Grants::private(), false),
        }
    }

    fn project_team_of(&self, p: &ProjectId) -> Option<TeamId> {
        match self.org_fact(&Register::Project(p.clone()))?.body {
            FactBody::Project(ref pf) => Some(pf.team.clone()),
            _ => None,
        }
    }

    /// Digest over every held fact.
    pub fn digest(&self) -> String {
        let mut d = Digest::new();
        for f in self.facts.values() {
            d.add(&f.to_bytes());
        }
        for id in self.texts.keys() {
            for b in self.text_facts(id) {
                d.add(&b);
            }
        }
        d.finish().0
    }

    /// Digest over the facts a policy admits (as [`Self::export`] without retractions).
    pub fn scoped_digest(&self, policy: &PeerPolicy) -> String {
        let (d, _) = self.scoped_digest_bytes(policy);
        crate::digest::to_hex(&d)
    }

    /// [`Self::scoped_digest`] as a sync session's `Digest` carries it:
    /// the bytes and how many facts it covers.
    pub fn scoped_digest_bytes(&self, policy: &PeerPolicy) -> ([u8; 32], usize) {
        let mut d = Digest::new();
        for f in self.digested(policy) {
            d.add(&f);
        }
        d.finish_bytes()
    }

    /// The [`SetDigest`] over the same facts as [`Self::scoped_digest_bytes`]:
    /// what a session of protocol version
    /// [`SET_DIGEST_SINCE`](crate::digest::SET_DIGEST_SINCE) or later
    /// carries (a real store keeps it running; here it is computed).
    pub fn scoped_set_digest_bytes(&self, policy: &PeerPolicy) -> ([u8; 32], usize) {
        let mut hashes: Vec<[u8; 32]> = self
            .digested(policy)
            .iter()
            .map(|f| *blake3::hash(f).as_bytes())
            .collect();
        hashes.sort_unstable();
        hashes.dedup();
        let mut d = SetDigest::new();
        for h in &hashes {
            d.insert(Term::from_hash(h));
        }
        d.finish_bytes()
    }

    /// The wire bytes of the facts a digest over `policy` covers:
    /// [`Self::export`] without retractions.
    fn digested(&self, policy: &PeerPolicy) -> Vec<Vec<u8>> {
        self.export(policy)
            .into_iter()
            .filter(|f| {
                !(f.fact.body.memory().is_some_and(|(id, _)| {
                    self.memories
                        .get(&id)
                        .is_some_and(|m| !policy.admits_grants(&m.effective))
                }))
            })
            .map(|f| f.to_bytes())
            .collect()
    }

    /// Ids of live memories `agent` may see here.
    pub fn visible_to(&self, agent: &AgentId) -> BTreeSet<MemoryId> {
        let who = AuthorizedScopes::for_agent(agent.clone(), self);
        self.memories
            .iter()
            .filter(|(id, m)| {
                self.facts.contains_key(&Register::MemoryContent(**id))
                    && who.may_see(&GatedMeta(m), 0)
            })
            .map(|(id, _)| *id)
            .collect()
    }

    /// The text of a memory, if its content is held.
    pub fn text(&self, id: &MemoryId) -> Option<String> {
        match &self.facts.get(&Register::MemoryContent(*id))?.fact.body {
            FactBody::MemoryContent(c) => match (self.texts.get(id), c.text.plain()) {
                (Some((_, doc)), _) => Some(doc.text()),
                (None, Some(t)) => Some(t.to_owned()),
                (None, None) => Some(String::new()),
            },
            _ => None,
        }
    }
}

struct GatedMeta<'a>(&'a MemMeta);

impl Gated for GatedMeta<'_> {
    fn owner(&self) -> &AgentId {
        &self.0.fixed.owner
    }
    fn effective_grants(&self) -> &Grants {
        &self.0.effective
    }
    fn is_tombstoned(&self) -> bool {
        self.0.tombstoned
    }
    fn expires_ms(&self) -> Option<u64> {
        None
    }
    fn owner_is_authoritative(&self) -> bool {
        self.0.owner_trusted
    }
}

impl OrgGraph for MemStore {
    fn team(&self, id: &TeamId) -> Option<TeamState> {
        match &self.org_fact(&Register::Team(id.clone()))?.body {
            FactBody::Team(t) => Some(TeamState { present: t.present }),
            _ => None,
        }
    }
    fn project(&self, id: &ProjectId) -> Option<ProjectState> {
        match &self.org_fact(&Register::Project(id.clone()))?.body {
            FactBody::Project(p) => Some(ProjectState {
                team: p.team.clone(),
                present: p.present,
            }),
            _ => None,
        }
    }
    fn memberships_of(&self, agent: &AgentId) -> Vec<OrgScope> {
        self.facts
            .iter()
            .filter_map(|(reg, f)| match (reg, &f.fact.body) {
                (Register::Membership(s, a), FactBody::Membership(m))
                    if a == agent && m.present =>
                {
                    Some(s.clone())
                }
                _ => None,
            })
            .collect()
    }
}

impl ReplicaStore for MemStore {
    type Error = Infallible;

    fn local_node(&self) -> NodeId {
        self.me
    }
    fn peer_policy(&mut self, node: &NodeId) -> Result<Option<PeerPolicy>, Infallible> {
        Ok(self.peers.get(node).cloned())
    }
    fn memory(&mut self, id: &MemoryId) -> Result<Option<MemoryState>, Infallible> {
        let clock = |r: Register| self.facts.get(&r).map(|f| f.fact.clock);
        Ok(self.memories.get(id).map(|m| {
            let content = clock(Register::MemoryContent(*id));
            MemoryState {
                fixed: m.fixed.clone(),
                content_held: content.is_some(),
                content_v: content.or(m.purged_v),
                acl_v: clock(Register::MemoryAcl(*id)),
                tombstone_v: clock(Register::MemoryTombstone(*id)),
                effective: m.effective.clone(),
                owner_trusted: m.owner_trusted,
                edited: self.texts.contains_key(id),
            }
        }))
    }
    fn clock_of(&mut self, register: &Register) -> Result<Option<Hlc>, Infallible> {
        Ok(self.facts.get(register).map(|f| f.fact.clock))
    }
    fn project_team(&mut self, project: &ProjectId) -> Result<Option<TeamId>, Infallible> {
        Ok(self.project_team_of(project))
    }
    fn org_origin(&mut self, scope: &OrgScope) -> Result<Option<NodeId>, Infallible> {
        let reg = match scope {
            OrgScope::Team(t) => Register::Team(t.clone()),
            OrgScope::Project(p) => Register::Project(p.clone()),
        };
        Ok(match self.org_fact(&reg).map(|f| &f.body) {
            Some(FactBody::Team(t)) => Some(t.origin),
            Some(FactBody::Project(p)) => Some(p.origin),
            _ => None,
        })
    }
    fn clash(&mut self, scope: &OrgScope) -> Result<Option<Clash>, Infallible> {
        Ok(self.clashes.get(scope).cloned())
    }
    fn record_clash(
        &mut self,
        scope: &OrgScope,
        held: &NodeId,
        theirs: &NodeId,
        closed: bool,
    ) -> Result<(), Infallible> {
        let c = self.clashes.entry(scope.clone()).or_insert_with(|| Clash {
            held: *held,
            theirs: Vec::new(),
            closed: false,
        });
        let news = !c.theirs.contains(theirs) || (closed && !c.closed);
        if !c.theirs.contains(theirs) {
            c.theirs.push(*theirs);
        }
        c.closed |= closed;
        if !news {
            return Ok(());
        }
        // Its members another node wrote leave the roster (the gate now
        // refuses them), as the real store does for a store that took them.
        let (me, clash) = (self.me, c.clone());
        self.facts.retain(|reg, f| match reg {
            Register::Membership(s, _) if s == scope => !clash.may_mean_other(f.fact.author(), me),
            _ => true,
        });
        // Re-judge every memory as the gate now would: a cut grant stops
        // counting (and content no longer needed goes, as on arrival).
        let ids: Vec<MemoryId> = self
            .memories
            .iter()
            .filter(|(_, m)| !m.tombstoned)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            let (grants, has_acl) = self.signed_grants(&id);
            let Some(origin) = self.memories.get(&id).map(|m| m.fixed.origin) else {
                continue;
            };
            let Ok(cut) = gate::clash_cut(self, origin, &grants);
            let Some(m) = self.memories.get_mut(&id) else {
                continue;
            };
            if cut.iter().all(|g| !m.effective.contains(g)) {
                continue;
            }
            for g in cut.iter() {
                m.effective.remove(g);
            }
            if !m.owner_trusted
                && m.effective.is_empty()
                && has_acl
                && let Some(c) = self.facts.remove(&Register::MemoryContent(id))
            {
                m.purged_v = Some(c.fact.clock);
                self.texts.remove(&id);
            }
        }
        Ok(())
    }
    fn put(&mut self, admission: Admission) -> Result<(), Infallible> {
        let effect = admission.effect().clone();
        let fact = admission.into_fact();
        let fact = &fact;
        let body = &fact.fact.body;
        if let Some((id, fixed)) = body.memory() {
            let m = self.memories.entry(id).or_insert_with(|| MemMeta {
                fixed: fixed.clone(),
                effective: Grants::private(),
                grants_ever: Grants::private(),
                owner_trusted: effect.owner_trusted(),
                tombstoned: false,
                purged_v: None,
            });
            m.owner_trusted = effect.owner_trusted();
            match body {
                FactBody::MemoryTombstone(_) => {
                    m.tombstoned = true;
                    m.effective = Grants::private();
                    self.facts.remove(&Register::MemoryContent(id));
                    self.facts.remove(&Register::MemoryAcl(id));
                    self.texts.remove(&id);
                }
                FactBody::MemoryAcl(_) => {
                    let eff = effect.effective().cloned().unwrap_or_default();
                    for g in eff.iter() {
                        m.grants_ever.insert(g.clone());
                    }
                    m.effective = eff;
                    if effect.purge_content()
                        && let Some(c) = self.facts.remove(&Register::MemoryContent(id))
                    {
                        m.purged_v = Some(c.fact.clock);
                        self.texts.remove(&id);
                    }
                }
                FactBody::MemoryContent(_) => {
                    self.offer_text(fact, false);
                }
                _ => {}
            }
        }
        self.facts.insert(body.register(), fact.clone());
        Ok(())
    }
    fn merge_text(&mut self, admission: &Admission) -> Result<bool, Infallible> {
        Ok(self.offer_text(admission.fact(), true))
    }
    fn observe(&mut self, clock: &Hlc) -> Result<(), Infallible> {
        self.hlc.observe(clock);
        Ok(())
    }
    fn defer(
        &mut self,
        fact: &SignedFact,
        from: &NodeId,
        reason: &DeferReason,
    ) -> Result<(), Infallible> {
        self.deferred.push((fact.clone(), *from, reason.clone()));
        Ok(())
    }
    fn refuse(
        &mut self,
        fact: &SignedFact,
        from: &NodeId,
        reason: &Refusal,
    ) -> Result<(), Infallible> {
        self.refused.push((fact.clone(), *from, reason.clone()));
        Ok(())
    }
}
