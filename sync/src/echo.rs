//! Echo ranges: the `seq`s of our log whose rows hold nothing a peer lacks
//! (docs/design.md §7.1), so that an export to that peer need not read them.
//!
//! A batch applied from peer P takes a run of our `seq`s in one write
//! transaction, so no other writer's are among them. A row that batch moved
//! holds only facts P has when each of its facts is P's own or one P sent
//! in the batch ([`held_by_peer`]); its `seq` is then an *echo* for P: an
//! export to P would send P only what P sent. The run minus the rows that
//! fail the rule is recorded as [`EchoRanges`] of P, under P's log epoch;
//! an export to P reads only the gaps between them ([`EchoRanges::gaps`]).
//! A row that moves again takes a new `seq` outside every recorded range,
//! so a range never hides a later change — a local write, another peer's
//! fact, a re-judged standing.
//!
//! Must never: decide that a row is an echo without looking at every fact
//! it holds (an older fact of ours that P lacks may sit beside P's; a
//! widening may make old content exportable); or let ranges of one epoch
//! of P's log stand for another (the store keys them by epoch, and a
//! session whose peer's log is new to us uses none).
//!
//! Pure: the store reads the rows and keeps the ranges.

use amos_protocol::NodeId;
use amos_protocol::codec::author_of;

/// At most this many ranges are kept per peer; the lowest (oldest) go
/// first. Dropping one only makes an export read rows it could have
/// skipped. An export runs one query per gap and table, so this bounds it.
pub const MAX_RANGES: usize = 64;

/// Whether a row whose facts are `facts` (wire bytes, every fact it holds:
/// registers and text log) holds nothing `peer` lacks: each fact is
/// authored by `peer`, or `sent(fact)` (it came from `peer` in the batch
/// being applied). An empty row holds nothing: true.
pub fn held_by_peer<'a>(
    facts: impl IntoIterator<Item = &'a [u8]>,
    peer: &NodeId,
    mut sent: impl FnMut(&[u8]) -> bool,
) -> bool {
    facts
        .into_iter()
        .all(|f| author_of(f).as_ref() == Some(peer) || sent(f))
}

/// Disjoint, sorted, inclusive `seq` ranges `(first, last)`, no two
/// adjacent (they merge).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EchoRanges {
    ranges: Vec<(i64, i64)>,
}

impl EchoRanges {
    /// From stored ranges in any order (overlapping or adjacent ones merge;
    /// an empty one, `first > last`, is dropped).
    pub fn from_ranges(ranges: impl IntoIterator<Item = (i64, i64)>) -> EchoRanges {
        let mut out = EchoRanges::default();
        for (first, last) in ranges {
            out.insert(first, last);
        }
        out
    }

    /// The runs, as `(first, last)` `seq`s, ascending and disjoint.
    pub fn ranges(&self) -> &[(i64, i64)] {
        &self.ranges
    }

    /// Whether there are no runs.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Add `first..=last` (nothing if empty), merging with what it touches.
    pub fn insert(&mut self, first: i64, last: i64) {
        if first > last {
            return;
        }
        let (mut lo, mut hi) = (first, last);
        // Everything overlapping or adjacent merges into one.
        self.ranges.retain(|&(a, b)| {
            let touches = a <= hi.saturating_add(1) && lo <= b.saturating_add(1);
            if touches {
                lo = lo.min(a);
                hi = hi.max(b);
            }
            !touches
        });
        let at = self.ranges.partition_point(|&(a, _)| a < lo);
        self.ranges.insert(at, (lo, hi));
    }

    /// Add the run `first..=last` of one applied batch except the `seq`s in
    /// `not_echo` (rows that hold something the peer lacks).
    pub fn insert_run(&mut self, first: i64, last: i64, not_echo: &[i64]) {
        let mut holes: Vec<i64> = not_echo
            .iter()
            .copied()
            .filter(|s| (first..=last).contains(s))
            .collect();
        holes.sort_unstable();
        holes.dedup();
        let mut from = first;
        for h in holes {
            self.insert(from, h - 1);
            from = h + 1;
        }
        self.insert(from, last);
    }

    /// Keep at most `max` ranges, dropping the lowest.
    pub fn cap(&mut self, max: usize) {
        if self.ranges.len() > max {
            self.ranges.drain(..self.ranges.len() - max);
        }
    }

    /// Forget the ranges wholly at or below `seq` (a peer's watermark of us
    /// covers them: no export to it reads there again unless it resets).
    pub fn forget_upto(&mut self, seq: i64) {
        self.ranges.retain(|&(_, b)| b > seq);
    }

    /// Whether `seq` lies in a range.
    pub fn contains(&self, seq: i64) -> bool {
        let at = self.ranges.partition_point(|&(_, b)| b < seq);
        self.ranges.get(at).is_some_and(|&(a, _)| a <= seq)
    }

    /// The parts of `(since, high]` outside every range, in order, each as
    /// `(after, upto)`: the `seq`s `s` with `after < s <= upto`. Their
    /// union with the ranges is `(since, high]`.
    pub fn gaps(&self, since: i64, high: i64) -> Vec<(i64, i64)> {
        let mut out = Vec::new();
        let mut after = since;
        for &(a, b) in &self.ranges {
            if after >= high {
                break;
            }
            if b <= after {
                continue;
            }
            if a > after + 1 {
                out.push((after, (a - 1).min(high)));
            }
            after = after.max(b);
        }
        if after < high {
            out.push((after, high));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ranges_merge_and_leave_gaps() {
        let mut r = EchoRanges::default();
        r.insert(10, 20);
        r.insert(21, 30);
        assert_eq!(r.ranges(), &[(10, 30)]);
        r.insert(40, 50);
        r.insert(5, 12);
        assert_eq!(r.ranges(), &[(5, 30), (40, 50)]);
        assert_eq!(r.gaps(0, 60), vec![(0, 4), (30, 39), (50, 60)]);
        assert_eq!(r.gaps(30, 50), vec![(30, 39)]);
        assert_eq!(r.gaps(7, 25), Vec::<(i64, i64)>::new());
        assert_eq!(r.gaps(60, 60), Vec::<(i64, i64)>::new());
        r.insert_run(60, 70, &[63, 70, 99]);
        assert_eq!(r.ranges(), &[(5, 30), (40, 50), (60, 62), (64, 69)]);
        r.cap(2);
        assert_eq!(r.ranges(), &[(60, 62), (64, 69)]);
        r.forget_upto(62);
        assert_eq!(r.ranges(), &[(64, 69)]);
    }

    #[test]
    fn a_row_is_an_echo_only_if_every_fact_is_the_peers() {
        use amos_protocol::{Fact, FactBody, Hlc, NodeIdentity, TeamFact, TeamId};
        let p = NodeIdentity::from_secret([1; 32]);
        let q = NodeIdentity::from_secret([2; 32]);
        let fact = |who: &NodeIdentity, name: &str| {
            who.sign(Fact {
                clock: Hlc {
                    wall_ms: 1,
                    logical: 0,
                    node: who.node_id(),
                },
                body: FactBody::Team(TeamFact {
                    id: TeamId::parse(name).unwrap(),
                    origin: who.node_id(),
                    name: name.into(),
                    present: true,
                }),
            })
            .unwrap()
            .to_bytes()
        };
        let (mine, theirs, relayed) = (fact(&q, "a"), fact(&p, "b"), fact(&q, "c"));
        let peer = p.node_id();
        let none = |_: &[u8]| false;
        assert!(held_by_peer([&theirs[..]], &peer, none));
        assert!(held_by_peer(std::iter::empty(), &peer, none));
        // An older fact of ours beside the peer's: the peer lacks it.
        assert!(!held_by_peer([&theirs[..], &mine[..]], &peer, none));
        // Another node's fact the peer sent in this batch: it has it.
        let sent = |f: &[u8]| f == &relayed[..];
        assert!(held_by_peer([&theirs[..], &relayed[..]], &peer, sent));
        assert!(!held_by_peer([&mine[..], &relayed[..]], &peer, sent));
    }

    fn arb_ranges() -> impl Strategy<Value = Vec<(i64, i64)>> {
        proptest::collection::vec((0i64..200, 0i64..20), 0..12)
            .prop_map(|v| v.into_iter().map(|(a, l)| (a, a + l)).collect())
    }

    proptest! {
        /// The gaps and the ranges together are exactly `(since, high]`,
        /// without overlap; merged ranges cover what was inserted.
        #[test]
        fn gaps_are_the_complement(raw in arb_ranges(), since in 0i64..220, len in 0i64..60) {
            let high = since + len;
            let r = EchoRanges::from_ranges(raw.iter().copied());
            let inserted = |s: i64| raw.iter().any(|&(a, b)| a <= s && s <= b);
            for s in 0..=250 {
                prop_assert_eq!(r.contains(s), inserted(s), "seq {}", s);
            }
            for w in r.ranges().windows(2) {
                prop_assert!(w[0].1 + 1 < w[1].0, "ranges {:?} not merged", r.ranges());
            }
            let gaps = r.gaps(since, high);
            for w in gaps.windows(2) {
                prop_assert!(w[0].1 <= w[1].0);
            }
            for s in (since + 1)..=high {
                let in_gap = gaps.iter().any(|&(a, b)| a < s && s <= b);
                prop_assert_eq!(in_gap, !r.contains(s), "seq {} in {:?}", s, gaps);
            }
            for &(a, b) in &gaps {
                prop_assert!(a >= since && b <= high && a < b);
            }
        }

        /// A run with holes: exactly the run minus the holes is added.
        #[test]
        fn a_run_skips_its_holes(first in 0i64..100, len in 0i64..40, holes in proptest::collection::vec(0i64..150, 0..8)) {
            let last = first + len;
            let mut r = EchoRanges::default();
            r.insert_run(first, last, &holes);
            for s in 0..160 {
                let want = (first..=last).contains(&s) && !holes.contains(&s);
                prop_assert_eq!(r.contains(s), want, "seq {}", s);
            }
        }
    }
}
