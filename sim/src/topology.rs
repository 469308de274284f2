//! Who syncs with whom: a random connected graph where every node has
//! (about) the given degree, and its diameter.
//!
//! Owns the graph only; knows nothing of replicas, sessions or time.

use std::collections::{BTreeSet, VecDeque};

use crate::rng::Rng;

/// An undirected simple graph on nodes `0..n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Graph {
    adj: Vec<BTreeSet<usize>>,
}

impl Graph {
    /// A random connected graph: every node has `degree` neighbours (one
    /// may have one fewer when `n * degree` is odd). Built with the pairing
    /// model (retried until simple), then joined with degree-keeping edge
    /// swaps if it came out in pieces. `degree` is clamped to `1..n`.
    pub fn random_regular(n: usize, degree: usize, rng: &mut Rng) -> Graph {
        let d = degree.clamp(1, n.saturating_sub(1).max(1));
        let mut g = Graph {
            adj: vec![BTreeSet::new(); n],
        };
        if n < 2 {
            return g;
        }
        for _attempt in 0..200 {
            g.adj.iter_mut().for_each(BTreeSet::clear);
            let mut stubs: Vec<usize> = (0..n).flat_map(|i| std::iter::repeat_n(i, d)).collect();
            rng.shuffle(&mut stubs);
            let mut simple = true;
            for pair in stubs.chunks(2) {
                let [a, b] = pair else { continue };
                if a == b || !g.adj[*a].insert(*b) {
                    simple = false;
                    break;
                }
                g.adj[*b].insert(*a);
            }
            if simple {
                break;
            }
        }
        // Fill what a failed attempt left short (rare), greedily.
        for a in 0..n {
            let mut tries = 0;
            while g.adj[a].len() < d && tries < 4 * n {
                tries += 1;
                let b = rng.below(n as u64) as usize;
                if b != a && g.adj[b].len() < d && !g.adj[a].contains(&b) {
                    g.add(a, b);
                }
            }
        }
        g.join_components(rng);
        g
    }

    /// A graph from an edge list (tests).
    pub fn from_edges(n: usize, edges: &[(usize, usize)]) -> Graph {
        let mut g = Graph {
            adj: vec![BTreeSet::new(); n],
        };
        for &(a, b) in edges {
            if a != b {
                g.add(a, b);
            }
        }
        g
    }

    /// Add `k` nodes without an edge (a mesh's relays: they sync with no
    /// one).
    pub fn add_isolated(&mut self, k: usize) {
        self.adj.extend(std::iter::repeat_n(BTreeSet::new(), k));
    }

    fn add(&mut self, a: usize, b: usize) {
        self.adj[a].insert(b);
        self.adj[b].insert(a);
    }

    fn remove(&mut self, a: usize, b: usize) {
        self.adj[a].remove(&b);
        self.adj[b].remove(&a);
    }

    /// Join the pieces: swap an edge (a, b) of one piece and (c, d) of the
    /// next for (a, c) and (b, d) — every degree stays — or, for a piece
    /// without an edge, add one.
    fn join_components(&mut self, rng: &mut Rng) {
        loop {
            let comps = self.components();
            if comps.len() <= 1 {
                return;
            }
            let (x, y) = (&comps[0], &comps[1]);
            let edge_in = |c: &Vec<usize>, g: &Graph, rng: &mut Rng| {
                let with: Vec<usize> = c
                    .iter()
                    .copied()
                    .filter(|&v| !g.adj[v].is_empty())
                    .collect();
                if with.is_empty() {
                    return None;
                }
                let a = with[rng.below(with.len() as u64) as usize];
                let b = *g.adj[a].iter().next()?;
                Some((a, b))
            };
            match (edge_in(x, self, rng), edge_in(y, self, rng)) {
                (Some((a, b)), Some((c, d))) => {
                    self.remove(a, b);
                    self.remove(c, d);
                    self.add(a, c);
                    self.add(b, d);
                }
                _ => self.add(x[0], y[0]),
            }
        }
    }

    pub fn len(&self) -> usize {
        self.adj.len()
    }

    pub fn is_empty(&self) -> bool {
        self.adj.is_empty()
    }

    pub fn neighbours(&self, v: usize) -> impl Iterator<Item = usize> + '_ {
        self.adj[v].iter().copied()
    }

    pub fn degree(&self, v: usize) -> usize {
        self.adj[v].len()
    }

    pub fn has_edge(&self, a: usize, b: usize) -> bool {
        self.adj.get(a).is_some_and(|s| s.contains(&b))
    }

    /// Every edge once, `(low, high)`.
    pub fn edges(&self) -> Vec<(usize, usize)> {
        (0..self.len())
            .flat_map(|a| {
                self.adj[a]
                    .iter()
                    .filter(move |&&b| b > a)
                    .map(move |&b| (a, b))
            })
            .collect()
    }

    /// Hop distances from `from` (`None`: unreachable), over the edges
    /// `keep` lets through.
    pub fn distances(
        &self,
        from: usize,
        keep: impl Fn(usize, usize) -> bool,
    ) -> Vec<Option<usize>> {
        let mut dist = vec![None; self.len()];
        let mut q = VecDeque::from([from]);
        dist[from] = Some(0);
        while let Some(v) = q.pop_front() {
            let dv = dist[v].unwrap_or(0);
            for w in self.neighbours(v) {
                if dist[w].is_none() && keep(v, w) {
                    dist[w] = Some(dv + 1);
                    q.push_back(w);
                }
            }
        }
        dist
    }

    /// The connected pieces (over the edges `keep` lets through), each
    /// sorted, in order of their lowest node.
    pub fn components_where(&self, keep: impl Fn(usize, usize) -> bool) -> Vec<Vec<usize>> {
        let mut seen = vec![false; self.len()];
        let mut out = Vec::new();
        for s in 0..self.len() {
            if seen[s] {
                continue;
            }
            let d = self.distances(s, &keep);
            let c: Vec<usize> = (0..self.len()).filter(|&v| d[v].is_some()).collect();
            for &v in &c {
                seen[v] = true;
            }
            out.push(c);
        }
        out
    }

    pub fn components(&self) -> Vec<Vec<usize>> {
        self.components_where(|_, _| true)
    }

    /// The longest shortest path (`None` if disconnected).
    pub fn diameter(&self) -> Option<usize> {
        let mut best = 0;
        for v in 0..self.len() {
            for d in self.distances(v, |_, _| true) {
                best = best.max(d?);
            }
        }
        Some(best)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_graphs_are_connected_simple_and_regular() {
        for seed in 0..20 {
            for (n, d) in [(20, 4), (50, 4), (7, 3), (30, 2), (10, 9)] {
                let g = Graph::random_regular(n, d, &mut Rng::new(seed));
                assert_eq!(g.components().len(), 1, "seed {seed} n {n} d {d}");
                let short = (0..n).filter(|&v| g.degree(v) != d).count();
                assert!(short <= 1, "seed {seed} n {n} d {d}: {short} off degree");
                assert!((0..n).all(|v| !g.has_edge(v, v)));
            }
        }
    }

    #[test]
    fn diameter_of_known_graphs() {
        let path = Graph::from_edges(5, &[(0, 1), (1, 2), (2, 3), (3, 4)]);
        assert_eq!(path.diameter(), Some(4));
        let ring = Graph::from_edges(6, &[(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 0)]);
        assert_eq!(ring.diameter(), Some(3));
        let apart = Graph::from_edges(4, &[(0, 1), (2, 3)]);
        assert_eq!(apart.diameter(), None);
        assert_eq!(apart.components(), vec![vec![0, 1], vec![2, 3]]);
    }
}
