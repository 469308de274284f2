//! Whether a mesh has converged, judged from its replicas alone:
//!
//! * across every node: equal digests over the scoped policy every link
//!   carries (`MeshConfig::scoped`), and for each agent the same memories
//!   visible through that policy (effective grants ∩ policy, no owner
//!   rule — what any node, full or scoped peer of the origin, must agree
//!   on);
//! * inside each piece of the mesh joined by `full` links (nodes of one
//!   operator that sync directly or through each other): equal digests
//!   over everything, and each agent sees exactly the same memories.
//!
//! Private memories cannot cross a scoped link, so two nodes of one
//! operator joined only through another's nodes legitimately differ in
//! them; that is why the second check is per piece.
//!
//! [`convergence_among`] judges a part of a mixed mesh the same way: some
//! nodes, joined by the links among them, over what a node decoding given
//! features can hold (docs/design.md §13).
//!
//! Two invariants beside it hold at every moment, converged or not:
//! [`stores_authentic`] (every fact a node holds is one a node wrote, byte
//! for byte) and [`watermarks_hold`] (a watermark covers only what
//! committed) — what no link, relay or fault may break.
//!
//! Boundary: reads replicas; changes nothing.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use amos_acl::{AuthorizedScopes, Gated, PeerPolicy};
use amos_protocol::wire::Features;
use amos_protocol::{AgentId, Grants, Hlc, MemoryId, Register, SignedFact};
use amos_sync::{MemMeta, MemStore};

use crate::mesh::{AGENTS, Mesh, agent};

/// The verdict, with the first differences found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Convergence {
    pub converged: bool,
    /// Pieces joined by `full` links (sizes).
    pub full_pieces: Vec<usize>,
    pub differences: Vec<String>,
}

struct Through<'a> {
    meta: &'a MemMeta,
    effective: Grants,
}

impl Gated for Through<'_> {
    fn owner(&self) -> &AgentId {
        &self.meta.fixed.owner
    }
    fn effective_grants(&self) -> &Grants {
        &self.effective
    }
    fn is_tombstoned(&self) -> bool {
        self.meta.tombstoned
    }
    fn expires_ms(&self) -> Option<u64> {
        None
    }
    fn owner_is_authoritative(&self) -> bool {
        false
    }
}

/// The live memories `agent` may see on `store` through `policy`.
pub fn visible_through(store: &MemStore, policy: &PeerPolicy, a: &AgentId) -> BTreeSet<MemoryId> {
    let who = AuthorizedScopes::for_agent(a.clone(), store);
    store
        .memories
        .iter()
        .filter(|(id, m)| {
            store.facts.contains_key(&Register::MemoryContent(**id))
                && who.may_see(
                    &Through {
                        meta: m,
                        effective: policy.effective(&m.effective),
                    },
                    0,
                )
        })
        .map(|(id, _)| *id)
        .collect()
}

/// Judge the mesh (offline nodes included: call it once they are back).
pub fn convergence(mesh: &Mesh) -> Convergence {
    convergence_among(mesh, |_| true, Features::ALL)
}

/// What a node that decodes only `decodes` can hold of `store`: `store`
/// without the facts that need a feature it lacks (`Features::required_by`)
/// and their memories' text. The store itself when it holds none.
pub fn decodable_part(store: &MemStore, decodes: Features) -> Cow<'_, MemStore> {
    let lacks = |f: &SignedFact| !decodes.contains(Features::required_by(&f.fact));
    if !store.facts.values().any(|f| lacks(f)) {
        return Cow::Borrowed(store);
    }
    let mut part = store.clone();
    part.facts.retain(|_, f| !lacks(f));
    part.texts
        .retain(|id, _| part.facts.contains_key(&Register::MemoryContent(*id)));
    Cow::Owned(part)
}

/// Judge the nodes `member` names, joined by the links between two of
/// them, each over what a node decoding `decodes` can hold
/// ([`decodable_part`]): inside each connected group of members, equal
/// digests over the scoped policy and equal views through it; inside each
/// piece of a group joined by `full` links, equal digests and views over
/// everything. A mixed mesh (docs/design.md §13) is judged twice: the
/// nodes that decode every feature among themselves, and every node over
/// what the oldest decodes.
pub fn convergence_among(
    mesh: &Mesh,
    member: impl Fn(usize) -> bool,
    decodes: Features,
) -> Convergence {
    let mut diffs = Vec::new();
    let scoped = &mesh.cfg.scoped;
    let mut note = |d: String| {
        if diffs.len() < 8 {
            diffs.push(d);
        }
    };
    let parts: Vec<Option<Cow<'_, MemStore>>> = (0..mesh.len())
        .map(|i| member(i).then(|| decodable_part(&mesh.nodes[i].replica.store, decodes)))
        .collect();
    let store = |i: usize| parts[i].as_deref();
    let groups = mesh
        .graph
        .components_where(|a, b| member(a) && member(b))
        .into_iter()
        .filter(|g| g.first().is_some_and(|&i| member(i)));
    for group in groups {
        let Some((&first, rest)) = group.split_first() else {
            continue;
        };
        let Some(s0) = store(first) else { continue };
        let d0 = s0.scoped_digest(scoped);
        let views0: Vec<_> = (0..AGENTS.len())
            .map(|a| visible_through(s0, scoped, &agent(a)))
            .collect();
        for &i in rest {
            let Some(si) = store(i) else { continue };
            if si.scoped_digest(scoped) != d0 {
                note(format!(
                    "node {i}: digest over {scoped} differs from node {first}'s"
                ));
            }
            for (a, v0) in views0.iter().enumerate() {
                if visible_through(si, scoped, &agent(a)) != *v0 {
                    note(format!(
                        "node {i}: {} sees otherwise through {scoped}",
                        AGENTS[a]
                    ));
                }
            }
        }
    }
    let op = |i: usize| mesh.nodes[i].operator;
    let pieces: Vec<Vec<usize>> = mesh
        .graph
        .components_where(|a, b| member(a) && member(b) && op(a) == op(b))
        .into_iter()
        .filter(|p| p.first().is_some_and(|&i| member(i)))
        .collect();
    for piece in &pieces {
        let Some((&first, rest)) = piece.split_first() else {
            continue;
        };
        let Some(s0) = store(first) else { continue };
        let d0 = s0.digest();
        let views0: Vec<_> = (0..AGENTS.len())
            .map(|a| s0.visible_to(&agent(a)))
            .collect();
        for &i in rest {
            let Some(si) = store(i) else { continue };
            if si.digest() != d0 {
                note(format!(
                    "node {i}: digest differs from node {first}'s (full piece)"
                ));
            }
            for (a, v0) in views0.iter().enumerate() {
                if si.visible_to(&agent(a)) != *v0 {
                    note(format!(
                        "node {i}: {} sees otherwise than on node {first}",
                        AGENTS[a]
                    ));
                }
            }
        }
    }
    Convergence {
        converged: diffs.is_empty(),
        full_pieces: pieces.iter().map(Vec::len).collect(),
        differences: diffs,
    }
}

/// Every fact every node holds (and every one it has deferred) is, byte
/// for byte, a fact some node wrote ([`Mesh::is_written`]): nothing on
/// the way changed one. The problems found (at most 8).
pub fn stores_authentic(mesh: &Mesh) -> Vec<String> {
    let mut out = Vec::new();
    for (n, node) in mesh.nodes.iter().enumerate() {
        let store = &node.replica.store;
        let held = store.facts.values().map(|f| f.to_bytes());
        let deferred = store.deferred.iter().map(|(f, _, _)| f.to_bytes());
        for bytes in held.chain(deferred) {
            if !mesh.is_written(&bytes) && out.len() < 8 {
                out.push(format!("node {n} holds a fact no node wrote"));
            }
        }
    }
    out
}

/// Every watermark a node X holds of a peer P (in P's epoch now, set
/// after P's policy for X last changed, nothing held back for X) covers
/// only what X committed (docs/design.md §7.2): it is at most P's `seq`,
/// and every fact P's export to X up to it carries (P's own policy, X's
/// own facts left out) X holds at that clock or a later one, or has
/// deferred. The problems found (at most 8). Assumes X's gate refused
/// none of them (`Stats::facts_refused` is 0).
pub fn watermarks_hold(mesh: &Mesh) -> Vec<String> {
    let mut out = Vec::new();
    let mut note = |d: String| {
        if out.len() < 8 {
            out.push(d);
        }
    };
    for (x, node) in mesh.nodes.iter().enumerate() {
        let me = mesh.node_id(x);
        for (peer, w) in &node.replica.watermarks {
            let Some(p) = mesh.index_of(peer) else {
                continue;
            };
            let theirs = &mesh.nodes[p].replica;
            if w.epoch != theirs.epoch
                || w.seq < theirs.policy_changed_at(&me)
                || theirs.held_back_for(&me).facts > 0
            {
                continue;
            }
            if w.seq > theirs.seq() {
                note(format!(
                    "node {x}: watermark {} of node {p} above its seq {}",
                    w.seq,
                    theirs.seq()
                ));
                continue;
            }
            // P's facts by their wire bytes: the register and clock of
            // each (its export is read from them).
            let of: BTreeMap<Vec<u8>, (Register, Hlc)> = theirs
                .store
                .facts
                .values()
                .map(|f| (f.to_bytes(), (f.fact.body.register(), f.fact.clock)))
                .collect();
            let after: BTreeSet<Vec<u8>> =
                theirs.export_for(&me, w.seq, false).0.into_iter().collect();
            let store = &node.replica.store;
            for bytes in theirs.export_for(&me, 0, false).0 {
                if after.contains(&bytes) {
                    continue;
                }
                let Some((reg, clock)) = of.get(&bytes) else {
                    note(format!("node {p} exports a fact it does not hold"));
                    continue;
                };
                let held = store.facts.get(reg).is_some_and(|h| h.fact.clock >= *clock)
                    || store
                        .deferred
                        .iter()
                        .any(|(d, _, _)| d.fact.body.register() == *reg);
                if !held {
                    note(format!(
                        "node {x}: its watermark {} of node {p} covers {reg:?}, which it lacks",
                        w.seq
                    ));
                }
            }
        }
    }
    out
}
