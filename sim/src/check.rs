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
//! Boundary: reads replicas; changes nothing.

use std::collections::BTreeSet;

use amos_acl::{AuthorizedScopes, Gated, PeerPolicy};
use amos_protocol::{AgentId, Grants, MemoryId, Register};
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
    let mut diffs = Vec::new();
    let n = mesh.len();
    let scoped = &mesh.cfg.scoped;
    let mut note = |d: String| {
        if diffs.len() < 8 {
            diffs.push(d);
        }
    };
    let store = |i: usize| &mesh.nodes[i].replica.store;
    if n > 0 {
        let d0 = store(0).scoped_digest(scoped);
        let views0: Vec<_> = (0..AGENTS.len())
            .map(|a| visible_through(store(0), scoped, &agent(a)))
            .collect();
        for i in 1..n {
            if store(i).scoped_digest(scoped) != d0 {
                note(format!(
                    "node {i}: digest over {scoped} differs from node 0's"
                ));
            }
            for (a, v0) in views0.iter().enumerate() {
                if visible_through(store(i), scoped, &agent(a)) != *v0 {
                    note(format!(
                        "node {i}: {} sees otherwise through {scoped}",
                        AGENTS[a]
                    ));
                }
            }
        }
    }
    let op = |i: usize| mesh.nodes[i].operator;
    let pieces = mesh.graph.components_where(|a, b| op(a) == op(b));
    for piece in &pieces {
        let Some((&first, rest)) = piece.split_first() else {
            continue;
        };
        let d0 = store(first).digest();
        let views0: Vec<_> = (0..AGENTS.len())
            .map(|a| store(first).visible_to(&agent(a)))
            .collect();
        for &i in rest {
            if store(i).digest() != d0 {
                note(format!(
                    "node {i}: digest differs from node {first}'s (full piece)"
                ));
            }
            for (a, v0) in views0.iter().enumerate() {
                if store(i).visible_to(&agent(a)) != *v0 {
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
