//! Why a node believes a memory, for one requester (the console's memory
//! page): who wrote it and on which node, its stored signed facts checked
//! again now, what it replaces and what replaced it, its edits, its links,
//! and when it was recalled (the local recall count and the read audit);
//! and its neighbourhood of links and supersessions (the console's graph).
//!
//! Must never: name, count or hint at a memory the requester cannot see —
//! every other memory shown (superseded, superseding, linked) passed the
//! read gate for that requester, and one that did not is left out as if it
//! did not exist; or show anything of a memory that is itself hidden (it
//! is "no such memory", exactly as a missing one).

use std::collections::{HashSet, VecDeque};

use amos_acl::{AuthorizedScopes, Visible};
use amos_protocol::{MemoryId, NodeId};

use crate::api::edits::HistoryLine;
use crate::api::links::LinkView;
use crate::api::node::Node;
use crate::error::{NodeError, Result};
use crate::store::memory::{MemoryRecord, visible_superseders};
use crate::store::provenance::signed_registers;
use crate::store::reads::{self, ReadRow};

/// Audited reads shown for one memory at most (newest first).
pub const PROVENANCE_READS: usize = 50;

/// The deepest neighbourhood a graph draws.
pub const GRAPH_MAX_DEPTH: usize = 4;
/// The depth a graph draws when none is asked for.
pub const GRAPH_DEFAULT_DEPTH: usize = 2;
/// The most memories a graph holds.
pub const GRAPH_MAX_NODES: usize = 60;

/// One register's stored signed fact, checked again.
#[derive(Debug, Clone)]
pub struct SignatureCheck {
    /// `content` or `acl`.
    pub register: &'static str,
    /// The node whose key signed it (the fact's clock names it).
    pub signer: Option<NodeId>,
    /// Wall time of its clock (Unix ms).
    pub at_ms: Option<u64>,
    /// `None`: decoded, signature valid (strict ed25519), the fact valid and
    /// about this memory; else what failed.
    pub problem: Option<String>,
}

/// Why the node believes a memory, as `who` may see it.
pub struct Provenance {
    /// The memory.
    pub memory: Visible<MemoryRecord>,
    /// Whether it was created on this node.
    pub origin_here: bool,
    /// The name its origin is registered by here, if a peer.
    pub origin_peer: Option<String>,
    /// The peer whose batch first brought it here (`None`: written here,
    /// or it arrived before this node recorded arrivals).
    pub arrived_from: Option<NodeId>,
    /// The name that peer is registered by here, if it still is.
    pub arrived_peer: Option<String>,
    /// Its registers' signed facts, checked again now.
    pub signatures: Vec<SignatureCheck>,
    /// The memory it replaces, if `who` sees that one.
    pub supersedes: Option<Visible<MemoryRecord>>,
    /// The memories `who` sees that replace it.
    pub superseded_by: Vec<Visible<MemoryRecord>>,
    /// Its edits, oldest first.
    pub history: Vec<HistoryLine>,
    /// Its links to memories `who` sees.
    pub links: Vec<LinkView>,
    /// Local-only: recalls noted here.
    pub recall_count: u64,
    /// Local-only: when recall last noted it.
    pub last_recalled_ms: Option<u64>,
    /// Whether the read audit is on.
    pub read_audit_on: bool,
    /// The read audit's rows for this memory, newest first.
    pub reads: Vec<ReadRow>,
}

/// The kind of an edge of the graph.
#[derive(Debug, Clone, PartialEq)]
pub enum EdgeKind {
    /// A link.
    Link {
        /// Its relation.
        relation: String,
        /// Its signed weight.
        weight: f32,
    },
    /// `from` replaces `to`.
    Supersedes,
}

/// An edge between two memories of a graph.
#[derive(Debug, Clone, PartialEq)]
pub struct GraphEdge {
    /// The linking (or replacing) memory.
    pub from: MemoryId,
    /// The linked (or replaced) memory.
    pub to: MemoryId,
    /// A link or a supersession.
    pub kind: EdgeKind,
}

/// A memory of a graph and its distance from the centre, in hops.
pub struct GraphNode {
    /// The memory (visible to the requester).
    pub memory: Visible<MemoryRecord>,
    /// Hops from the centre.
    pub hop: usize,
}

/// The memories `who` sees within some hops of one, and the links and
/// supersessions among them.
pub struct Neighbourhood {
    /// The centre first, then by hop and discovery order.
    pub nodes: Vec<GraphNode>,
    /// The links and supersessions among them, each once.
    pub edges: Vec<GraphEdge>,
    /// Whether visible neighbours were left out for the node cap.
    pub truncated: bool,
}

fn check_fact(register: &'static str, id: MemoryId, bytes: Option<&[u8]>) -> SignatureCheck {
    let Some(bytes) = bytes else {
        return SignatureCheck {
            register,
            signer: None,
            at_ms: None,
            problem: Some("no signed fact held".into()),
        };
    };
    match amos_protocol::verify_one(bytes) {
        Ok(v) => {
            let about = v.fact.body.memory().map(|(m, _)| m);
            SignatureCheck {
                register,
                signer: Some(v.fact.clock.node),
                at_ms: Some(v.fact.clock.wall_ms),
                problem: (about != Some(id)).then(|| "the fact is about another memory".into()),
            }
        }
        Err(e) => SignatureCheck {
            register,
            signer: None,
            at_ms: None,
            problem: Some(e.to_string()),
        },
    }
}

impl Node {
    /// Why this node believes memory `id`, as `who` sees it (missing and
    /// invisible are the same error). A read the read audit records
    /// (`get`).
    pub fn provenance(&self, who: &AuthorizedScopes, id: &str) -> Result<Provenance> {
        let m = self.get(who, id)?;
        let mid = m.id();
        let now = self.now_ms();
        let registers = self
            .store
            .read(|r| signed_registers(r, &mid))?
            .ok_or_else(|| NodeError::NoSuchMemory(id.trim().to_owned()))?;
        let signatures = vec![
            check_fact("content", mid, registers.content.as_deref()),
            check_fact("acl", mid, registers.acl.as_deref()),
        ];
        // `supersedes` names only a memory the gate let `who` see.
        let supersedes = match m.supersedes() {
            Some(old) => self.store.visible(who, &[old], now)?.pop(),
            None => None,
        };
        let mut superseded_by: Vec<Visible<MemoryRecord>> = self
            .store
            .read(|r| visible_superseders(r, who, &[mid], now))?
            .into_iter()
            .map(|(_, s)| s)
            .collect();
        superseded_by.sort_by_key(|s| (s.valid_from_ms(), s.id()));
        let (_, history) = self.history(who, id)?;
        let links = self.visible_links(who, mid)?;
        let origin = m.origin();
        let origin_here = origin == self.node_id();
        let peers = self.peer_list()?;
        let name_of = |n: NodeId| {
            let hex = n.to_string();
            peers
                .iter()
                .find(|p| p.node_id == hex)
                .map(|p| p.name.clone())
        };
        let origin_peer = if origin_here { None } else { name_of(origin) };
        let arrived_peer = registers.arrived_from.and_then(name_of);
        let read_audit_on = self.read_audit_config()?.on;
        let reads = self
            .store
            .read(|r| reads::list(r, None, Some(&mid), None, PROVENANCE_READS))?;
        let mut shown = vec![mid];
        shown.extend(supersedes.iter().map(|s| s.id()));
        shown.extend(superseded_by.iter().map(|s| s.id()));
        shown.extend(links.iter().map(|l| l.other.id()));
        shown.retain(|s| *s != mid);
        self.audit_reads(who, &shown, "provenance");
        Ok(Provenance {
            last_recalled_ms: m.last_access_ms(),
            recall_count: registers.recall_count,
            memory: m,
            origin_here,
            origin_peer,
            arrived_from: registers.arrived_from,
            arrived_peer,
            signatures,
            supersedes,
            superseded_by,
            history,
            links,
            read_audit_on,
            reads,
        })
    }

    /// The memories `who` sees within `depth` hops of memory `id` over
    /// links and supersessions (both directions), at most `max_nodes`, and
    /// the edges among them. `id` itself must be visible to `who`.
    pub fn neighbourhood(
        &self,
        who: &AuthorizedScopes,
        id: &str,
        depth: usize,
        max_nodes: usize,
    ) -> Result<Neighbourhood> {
        if depth == 0 || depth > GRAPH_MAX_DEPTH {
            return Err(NodeError::BadInput(format!(
                "depth must be between 1 and {GRAPH_MAX_DEPTH}"
            )));
        }
        if max_nodes == 0 {
            return Err(NodeError::BadInput("max nodes must be at least 1".into()));
        }
        let centre = self.gated(who, id)?;
        let now = self.now_ms();
        let mut placed: HashSet<MemoryId> = HashSet::from([centre.id()]);
        let mut nodes = vec![GraphNode {
            memory: centre,
            hop: 0,
        }];
        let mut edges: Vec<GraphEdge> = Vec::new();
        let mut seen_edges: HashSet<(MemoryId, MemoryId, String)> = HashSet::new();
        let mut queue = VecDeque::from([0usize]);
        let mut truncated = false;
        while let Some(at) = queue.pop_front() {
            let (me, hop, replaces) = {
                let n = &nodes[at];
                (n.memory.id(), n.hop, n.memory.supersedes())
            };
            // Each neighbour the gate lets through, with the edge to it.
            let mut around: Vec<(Visible<MemoryRecord>, GraphEdge)> = Vec::new();
            for l in self.visible_links(who, me)? {
                let other = l.other.id();
                let (from, to) = if l.outgoing { (me, other) } else { (other, me) };
                around.push((
                    l.other,
                    GraphEdge {
                        from,
                        to,
                        kind: EdgeKind::Link {
                            relation: l.relation,
                            weight: l.weight,
                        },
                    },
                ));
            }
            if let Some(old) = replaces
                && let Some(o) = self.store.visible(who, &[old], now)?.pop()
            {
                around.push((
                    o,
                    GraphEdge {
                        from: me,
                        to: old,
                        kind: EdgeKind::Supersedes,
                    },
                ));
            }
            for (_, s) in self
                .store
                .read(|r| visible_superseders(r, who, &[me], now))?
            {
                let sid = s.id();
                around.push((
                    s,
                    GraphEdge {
                        from: sid,
                        to: me,
                        kind: EdgeKind::Supersedes,
                    },
                ));
            }
            for (other, edge) in around {
                let oid = other.id();
                if !placed.contains(&oid) {
                    if hop >= depth {
                        continue;
                    }
                    if nodes.len() >= max_nodes {
                        truncated = true;
                        continue;
                    }
                    placed.insert(oid);
                    queue.push_back(nodes.len());
                    nodes.push(GraphNode {
                        memory: other,
                        hop: hop + 1,
                    });
                }
                let key = match &edge.kind {
                    EdgeKind::Link { relation, .. } => relation.clone(),
                    EdgeKind::Supersedes => String::new(),
                };
                if seen_edges.insert((edge.from, edge.to, key)) {
                    edges.push(edge);
                }
            }
        }
        let shown: Vec<MemoryId> = nodes.iter().map(|n| n.memory.id()).collect();
        self.audit_reads(who, &shown, "graph");
        Ok(Neighbourhood {
            nodes,
            edges,
            truncated,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::NewMemory;
    use amos_protocol::Scope;

    /// alice and bob in team t; `old` (team) replaced by `new` (team) and
    /// by alice's private `succ`, linked to alice's private `secret` and to
    /// `new`.
    fn setup() -> (tempfile::TempDir, Node, [MemoryId; 4]) {
        let dir = tempfile::tempdir().unwrap();
        let home = crate::home::Home::new(dir.path());
        Node::init(&home, Some("n")).unwrap();
        let mut node = Node::open(&home).unwrap();
        let team = node.team_create("t", None).unwrap();
        node.agent_add("alice", "agent", &["t".into()]).unwrap();
        node.agent_add("bob", "agent", &["t".into()]).unwrap();
        let alice = node.requester("alice").unwrap();
        let shared = |text: &str| {
            let mut m = NewMemory::new(text);
            m.share = vec![Scope::Team(team.clone())];
            m
        };
        let old = node.add(&alice, shared("old")).unwrap();
        let mut n = shared("new");
        n.supersedes = Some(old);
        let new = node.add(&alice, n).unwrap();
        let mut s = NewMemory::new("succ");
        s.supersedes = Some(old);
        let succ = node.add(&alice, s).unwrap();
        let secret = node.add(&alice, NewMemory::new("secret")).unwrap();
        let (o, se, ne) = (old.to_string(), secret.to_string(), new.to_string());
        node.link(&alice, &o, &se, None, 0.5).unwrap();
        node.link(&alice, &o, &ne, None, 0.5).unwrap();
        (dir, node, [old, new, succ, secret])
    }

    /// What bob cannot see is neither shown nor counted: not as a
    /// superseder, not as a link's other end, not in the graph; alice sees
    /// it all. Both stored facts verify, signed by this node.
    #[test]
    fn provenance_and_neighbourhood_hold_only_what_the_gate_lets_through() {
        let (_d, node, [old, new, succ, secret]) = setup();
        let (alice, bob) = (
            node.requester("alice").unwrap(),
            node.requester("bob").unwrap(),
        );
        let p = node.provenance(&bob, &old.to_string()).unwrap();
        let by: Vec<MemoryId> = p.superseded_by.iter().map(|m| m.id()).collect();
        assert_eq!(by, vec![new]);
        let linked: Vec<MemoryId> = p.links.iter().map(|l| l.other.id()).collect();
        assert_eq!(linked, vec![new]);
        assert!(p.origin_here);
        for s in &p.signatures {
            assert_eq!(s.problem, None, "{}", s.register);
            assert_eq!(s.signer, Some(node.node_id()));
        }
        let p = node.provenance(&alice, &old.to_string()).unwrap();
        let mut by: Vec<MemoryId> = p.superseded_by.iter().map(|m| m.id()).collect();
        by.sort();
        let mut want = vec![new, succ];
        want.sort();
        assert_eq!(by, want);
        assert_eq!(p.links.len(), 2);
        // succ replaces old, which bob sees, but bob cannot see succ.
        assert!(matches!(
            node.provenance(&bob, &succ.to_string()),
            Err(NodeError::NoSuchMemory(_))
        ));

        let ids = |g: &Neighbourhood| {
            let mut v: Vec<MemoryId> = g.nodes.iter().map(|n| n.memory.id()).collect();
            v.sort();
            v
        };
        let g = node.neighbourhood(&bob, &old.to_string(), 4, 60).unwrap();
        let mut want = vec![old, new];
        want.sort();
        assert_eq!(ids(&g), want);
        for e in &g.edges {
            assert!(want.contains(&e.from) && want.contains(&e.to), "{e:?}");
        }
        assert_eq!(g.edges.len(), 2, "the link and the supersession, once each");
        let g = node.neighbourhood(&alice, &old.to_string(), 1, 60).unwrap();
        assert_eq!(g.nodes.len(), 4);
        // The cap: the centre and one more, and it says so.
        let g = node.neighbourhood(&alice, &old.to_string(), 1, 2).unwrap();
        assert_eq!(g.nodes.len(), 2);
        assert!(g.truncated);
        assert!(matches!(
            node.neighbourhood(&bob, &secret.to_string(), 1, 60),
            Err(NodeError::NoSuchMemory(_))
        ));
        assert!(matches!(
            node.neighbourhood(&bob, &old.to_string(), 0, 60),
            Err(NodeError::BadInput(_))
        ));
    }

    /// A stored fact that does not verify is said so, not hidden.
    #[test]
    fn a_fact_that_does_not_verify_is_reported() {
        let id = MemoryId([1; 16]);
        let c = check_fact("content", id, Some(b"not a fact"));
        assert!(c.problem.is_some() && c.signer.is_none());
        let c = check_fact("acl", id, None);
        assert_eq!(c.problem.as_deref(), Some("no signed fact held"));
    }

    /// Pinning is a signed change of the owner's, visible to every reader;
    /// a reader that does not own it is refused and nothing changes.
    #[test]
    fn pinning_is_the_owners_and_changes_the_register() {
        let (_d, mut node, [old, ..]) = setup();
        let (alice, bob) = (
            node.requester("alice").unwrap(),
            node.requester("bob").unwrap(),
        );
        let id = old.to_string();
        assert!(node.set_pinned(&alice, &id, true).unwrap());
        assert!(!node.set_pinned(&alice, &id, true).unwrap(), "no change");
        assert!(node.get(&bob, &id).unwrap().pinned());
        assert_eq!(node.get(&bob, &id).unwrap().content(), "old");
        assert!(matches!(
            node.set_pinned(&bob, &id, false),
            Err(NodeError::Refused { .. })
        ));
        assert!(node.get(&alice, &id).unwrap().pinned());
        assert!(node.set_pinned(&alice, &id, false).unwrap());
        assert!(!node.get(&alice, &id).unwrap().pinned());
    }
}
