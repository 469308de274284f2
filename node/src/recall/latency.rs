//! Recall latency, kept in the store: every successful `search` and `pack`
//! (from the CLI, `amos mcp` or `amos bench`, whichever process runs it)
//! adds one sample to the `recall_latency` table, a histogram per kind that
//! `amos serve --metrics` renders as `amos_recall_duration_seconds`.
//!
//! Local-only: the table is never replicated, never a fact, and never moves
//! `seq`, a watermark or the digest. Recording must never fail or stall a
//! recall: the sample rides in the write the recall makes anyway, or in one
//! of its own that does not wait for another process's write lock (a busy
//! store drops the sample; see `Node::finish_recall`).

use std::time::Duration;

use crate::error::Result;
use crate::store::{self, Readable, Tx};

/// Upper bounds of the histogram's buckets, in microseconds (1 ms … 10 s).
pub const BUCKETS_US: [i64; 13] = [
    1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000,
    5_000_000, 10_000_000,
];

/// The stored bucket of samples above every bound.
const INF: i64 = i64::MAX;

/// Which recall a sample timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RecallKind {
    /// A search (`Node::search`).
    Search,
    /// A context pack (`Node::pack`).
    Pack,
}

impl RecallKind {
    /// Every kind, in report order.
    pub const ALL: [RecallKind; 2] = [RecallKind::Search, RecallKind::Pack];

    /// The name status and `/metrics` labels use.
    pub fn as_str(self) -> &'static str {
        match self {
            RecallKind::Search => "search",
            RecallKind::Pack => "pack",
        }
    }
}

/// The stored bucket (its upper bound in µs) of a duration of `us`.
fn bucket_of(us: i64) -> i64 {
    BUCKETS_US.iter().copied().find(|b| us <= *b).unwrap_or(INF)
}

/// Add one sample: one UPSERT, inside the caller's write transaction.
pub fn record(tx: &Tx<'_>, kind: RecallKind, elapsed: Duration) -> Result<()> {
    let us = i64::try_from(elapsed.as_micros()).unwrap_or(INF);
    store::latency::record(tx, kind.as_str(), bucket_of(us), us)
}

/// One kind's histogram as Prometheus wants it.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    pub kind: RecallKind,
    /// (upper bound in seconds, samples at or below it), for every bound of
    /// [`BUCKETS_US`]: cumulative.
    pub buckets: Vec<(f64, u64)>,
    /// Every sample (the `+Inf` bucket).
    pub count: u64,
    pub sum_seconds: f64,
}

/// Every kind's histogram (all zero for a kind never recorded).
pub fn read(r: &(impl Readable + ?Sized)) -> Result<Vec<Histogram>> {
    let rows = store::latency::buckets(r)?;
    Ok(RecallKind::ALL
        .iter()
        .map(|&kind| {
            let mine: Vec<(i64, u64, i64)> = rows
                .iter()
                .filter(|r| r.kind == kind.as_str())
                .map(|r| (r.bound_us, r.count.max(0) as u64, r.sum_us))
                .collect();
            // A row whose bound is not one of ours (the bounds changed)
            // still counts toward the next bound above it.
            let buckets = BUCKETS_US
                .iter()
                .map(|&b| {
                    let n = mine.iter().filter(|r| r.0 <= b).map(|r| r.1).sum();
                    (b as f64 / 1e6, n)
                })
                .collect();
            Histogram {
                kind,
                buckets,
                count: mine.iter().map(|r| r.1).sum(),
                sum_seconds: mine.iter().map(|r| r.2).sum::<i64>() as f64 / 1e6,
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_land_in_cumulative_buckets_per_kind() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = crate::store::Store::create(&dir.path().join("db"), [1; 16]).unwrap();
        store
            .write(|tx| {
                for ms in [0, 1, 3, 3, 40, 20_000] {
                    record(tx, RecallKind::Search, Duration::from_millis(ms))?;
                }
                record(tx, RecallKind::Pack, Duration::from_micros(1_001))
            })
            .unwrap();
        let h = store.read(|r| read(r)).unwrap();
        let (search, pack) = (&h[0], &h[1]);
        assert_eq!(search.kind, RecallKind::Search);
        assert_eq!(search.count, 6);
        assert!((search.sum_seconds - 20.047).abs() < 1e-9);
        let at = |h: &Histogram, s: f64| h.buckets.iter().find(|b| b.0 == s).unwrap().1;
        assert_eq!(at(search, 0.001), 2, "0 and 1 ms: the bound is inclusive");
        assert_eq!(at(search, 0.005), 4);
        assert_eq!(at(search, 0.05), 5);
        assert_eq!(at(search, 10.0), 5, "20 s is only in +Inf");
        assert!(search.buckets.windows(2).all(|w| w[0].1 <= w[1].1));
        assert_eq!((pack.count, at(pack, 0.001), at(pack, 0.0025)), (1, 0, 1));
    }

    #[test]
    fn a_busy_store_drops_the_sample_and_never_holds_up_the_search() {
        use crate::{Home, NewMemory, Node};
        let dir = tempfile::tempdir().unwrap();
        let home = Home::new(dir.path().join("home"));
        Node::init(&home, None).unwrap();
        let mut node = Node::open(&home).unwrap();
        node.agent_add("alice", "agent", &[]).unwrap();
        let alice = node.requester("alice").unwrap();
        node.add(&alice, NewMemory::new("orion launch window".to_owned()))
            .unwrap();
        let searches = |node: &Node| node.store().read(|r| read(r)).unwrap()[0].count;
        assert_eq!(node.search(&alice, "orion", 10).unwrap().len(), 1);
        assert_eq!(searches(&node), 1);

        // Another process holds the write lock while we search.
        let mut other = crate::store::Store::open(&home.db_path()).unwrap();
        other
            .write(|_| {
                let started = std::time::Instant::now();
                assert_eq!(node.search(&alice, "orion", 10).unwrap().len(), 1);
                // A design bound (the store's busy timeout is 60 s), not a speed claim.
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "the search waited for the write lock"
                );
                Ok(())
            })
            .unwrap();
        assert_eq!(searches(&node), 1, "the sample was dropped");
        node.pack(&alice, "orion", 100).unwrap();
        assert_eq!(searches(&node), 1, "a pack is not also a search");
        assert_eq!(node.store().read(|r| read(r)).unwrap()[1].count, 1);
    }
}
