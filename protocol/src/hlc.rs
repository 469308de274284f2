//! Hybrid logical clocks: `(wall_ms, logical, node)`, totally ordered in that
//! field order.
//!
//! Invariant: an [`HlcState`] never hands out a clock that is not greater than
//! every clock it handed out or observed before, whatever the physical clock
//! does. Persisting the state across restarts is the caller's job.

use bincode::{Decode, Encode};

use crate::NodeId;

/// The latest time amos keeps: 9999-12-31T23:59:59.999Z, in milliseconds
/// since the Unix epoch. A protocol rule (docs/design.md §4): every time a
/// fact carries (its clock's wall time, a memory's creation, expiry and
/// valid time) is at most this, [`crate::Fact::validate`] refuses a fact
/// past it, and every parser of a time a person or another system wrote
/// refuses one past it. RFC 3339 has four-digit years: every time up to
/// here has one spelling there.
pub const MAX_TIME_MS: u64 = 253_402_300_799_999;

/// One timestamp. Ties are impossible between nodes because `node` is part of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Encode, Decode)]
pub struct Hlc {
    /// Wall-clock part, Unix milliseconds (at most [`MAX_TIME_MS`](crate::MAX_TIME_MS)).
    pub wall_ms: u64,
    /// Logical counter ordering events within one millisecond.
    pub logical: u32,
    /// The node that stamped it: the last tie-break, so no two clocks are equal.
    pub node: NodeId,
}

impl Hlc {
    /// Length of [`Hlc::sort_key`].
    pub const SORT_KEY_LEN: usize = 8 + 4 + 32;

    /// A big-endian byte string whose byte order equals the clock order, so a
    /// store can compare clocks with `memcmp`.
    pub fn sort_key(&self) -> [u8; Self::SORT_KEY_LEN] {
        let mut out = [0u8; Self::SORT_KEY_LEN];
        out[..8].copy_from_slice(&self.wall_ms.to_be_bytes());
        out[8..12].copy_from_slice(&self.logical.to_be_bytes());
        out[12..].copy_from_slice(&self.node.0);
        out
    }

    /// Inverse of [`Hlc::sort_key`].
    pub fn from_sort_key(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != Self::SORT_KEY_LEN {
            return None;
        }
        let wall_ms = u64::from_be_bytes(bytes[..8].try_into().ok()?);
        let logical = u32::from_be_bytes(bytes[8..12].try_into().ok()?);
        let node = NodeId(bytes[12..].try_into().ok()?);
        Some(Hlc {
            wall_ms,
            logical,
            node,
        })
    }
}

/// The part of a node's clock that must be persisted: the last `(wall, logical)`
/// it issued or observed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct HlcState {
    /// The highest wall time seen or issued.
    pub wall_ms: u64,
    /// The logical counter at that wall time.
    pub logical: u32,
}

impl HlcState {
    fn advance_to(&mut self, wall_ms: u64, logical: u32) {
        (self.wall_ms, self.logical) = (wall_ms, logical);
    }

    /// Issue the clock of a local write at physical time `now_ms`.
    pub fn tick(&mut self, now_ms: u64, node: NodeId) -> Hlc {
        if now_ms > self.wall_ms {
            self.advance_to(now_ms, 0);
        } else if self.logical == u32::MAX {
            self.advance_to(self.wall_ms.saturating_add(1), 0);
        } else {
            self.logical += 1;
        }
        Hlc {
            wall_ms: self.wall_ms,
            logical: self.logical,
            node,
        }
    }

    /// Take note of a clock received from elsewhere: afterwards every tick is
    /// greater than `remote`. The caller rejects (quarantines) remote clocks
    /// too far in the future before calling this.
    pub fn observe(&mut self, remote: &Hlc) {
        if (remote.wall_ms, remote.logical) > (self.wall_ms, self.logical) {
            self.advance_to(remote.wall_ms, remote.logical);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const A: NodeId = NodeId([1; 32]);
    const B: NodeId = NodeId([2; 32]);

    #[test]
    fn order_is_wall_then_logical_then_node() {
        let c = |w, l, n| Hlc {
            wall_ms: w,
            logical: l,
            node: n,
        };
        assert!(c(1, 9, B) < c(2, 0, A));
        assert!(c(1, 1, B) < c(1, 2, A));
        assert!(c(1, 1, A) < c(1, 1, B));
        for x in [c(1, 9, B), c(2, 0, A), c(0, 0, A)] {
            for y in [c(1, 9, B), c(2, 0, A), c(0, 0, A)] {
                assert_eq!(x.cmp(&y), x.sort_key().cmp(&y.sort_key()));
            }
            assert_eq!(Hlc::from_sort_key(&x.sort_key()), Some(x));
        }
    }

    #[test]
    fn logical_overflow_moves_wall() {
        let mut s = HlcState {
            wall_ms: 5,
            logical: u32::MAX,
        };
        let t = s.tick(0, A);
        assert_eq!((t.wall_ms, t.logical), (6, 0));
    }

    proptest! {
        /// Whatever the physical clock does (including going backwards, as
        /// after a restart on a machine whose clock was set back), ticks and
        /// observations keep the issued clocks strictly increasing.
        #[test]
        fn ticks_strictly_increase(steps in prop::collection::vec((0u64..1_000, prop::option::of((0u64..2_000, 0u32..5))), 1..200)) {
            let mut s = HlcState::default();
            let mut last: Option<Hlc> = None;
            for (now, remote) in steps {
                if let Some((w, l)) = remote {
                    let r = Hlc { wall_ms: w, logical: l, node: B };
                    s.observe(&r);
                    let t = s.tick(now, A);
                    prop_assert!(t > r);
                    if let Some(p) = last { prop_assert!(t > p); }
                    last = Some(t);
                } else {
                    let t = s.tick(now, A);
                    if let Some(p) = last { prop_assert!(t > p); }
                    prop_assert!(t.wall_ms >= now);
                    last = Some(t);
                }
            }
        }
    }
}
