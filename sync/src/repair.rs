//! Range-based repair (docs/design.md §7.9): set reconciliation of the facts
//! one side may send the other, with negentropy (range fingerprints over
//! items sorted by time, then id), for when a watermark cannot be trusted —
//! a peer restored from a backup, a digest that disagreed, periodic
//! anti-entropy, or an operator's `amos sync now --repair`.
//!
//! Owns: the repair item of a fact ([`item_of`]: the fact's clock as a
//! `u64` and the BLAKE3 hash of its wire encoding — the hash the digest
//! uses), the [`ItemSet`] a repair covers, the initiator's rounds
//! ([`Initiator`]), the responder's answer ([`respond`]), and what comes
//! out: the ids we must send and the ids we lack ([`Outcome`]).
//! [`simulate`] runs both ends in memory (tests, benches, simulators).
//!
//! Must never: build an item set from anything but the facts the caller's
//! export filter lets the peer receive (the caller selects them; a
//! fingerprint over a range reveals a function of every id in it, so a
//! gated fact must never be an item); do I/O; panic on a peer's bytes
//! (every round from outside goes through negentropy's checked decoder and
//! [`MAX_ROUND_BYTES`]). The negentropy crate stays behind this module.

use negentropy::{Id, Negentropy, NegentropyStorageVector};

/// The id of an item: BLAKE3 of the fact's wire encoding.
pub type ItemId = [u8; 32];

/// Negentropy's own cap on one round it produces (bytes); a larger
/// difference takes more rounds instead of larger messages.
pub const FRAME_LIMIT: usize = 256 * 1024;
/// The largest round accepted from a peer (the frame limit plus slack for
/// the encoding around it). `amos_protocol::wire` bounds the message too.
pub const MAX_ROUND_BYTES: usize = amos_protocol::wire::MAX_REPAIR_ROUND;
/// An initiator gives up after this many replies (a well-behaved peer
/// needs about log16(n) plus the frames a large difference takes).
pub const MAX_ROUNDS: u32 = 256;

/// One element of a repair: ordered by `ts`, then `id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Item {
    /// The fact's clock as one number (`timestamp`), the primary order.
    pub ts: u64,
    /// The fact's id, BLAKE3 of its wire bytes.
    pub id: ItemId,
}

/// Why a repair step failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RepairError {
    /// A round (or a fact given to [`item_of`]) that does not decode.
    #[error("malformed repair round: {0}")]
    Malformed(String),
    /// The peer kept the reconciliation going past [`MAX_ROUNDS`].
    #[error("the repair took more than {MAX_ROUNDS} rounds")]
    TooManyRounds,
    /// A round over [`MAX_ROUND_BYTES`].
    #[error("a repair round of {0} bytes (at most {MAX_ROUND_BYTES})")]
    TooLarge(usize),
}

fn malformed(e: impl std::fmt::Display) -> RepairError {
    RepairError::Malformed(e.to_string())
}

/// The id of a fact in a repair: BLAKE3 of its wire encoding, as the
/// convergence digest hashes it.
pub fn fact_id(fact_bytes: &[u8]) -> ItemId {
    *blake3::hash(fact_bytes).as_bytes()
}

/// A clock as a repair timestamp: `wall_ms` in the high 48 bits, the
/// logical counter (capped) in the low 16 — monotone in the clock order,
/// and never `u64::MAX` (negentropy's "infinity").
pub fn timestamp(clock: &amos_protocol::Hlc) -> u64 {
    const WALL_MAX: u64 = (1 << 48) - 1;
    if clock.wall_ms >= WALL_MAX {
        return u64::MAX - 1;
    }
    (clock.wall_ms << 16) | u64::from(clock.logical.min(0xffff))
}

/// The item of one signed fact's wire encoding (decoded only for its
/// clock; the id is over the bytes as given).
pub fn item_of(fact_bytes: &[u8]) -> Result<Item, RepairError> {
    let fact = amos_protocol::codec::decode_signed(fact_bytes).map_err(malformed)?;
    Ok(Item {
        ts: timestamp(&fact.fact.clock),
        id: fact_id(fact_bytes),
    })
}

/// The items a repair covers: sorted, distinct. Build it only from facts
/// the export filter lets the peer receive.
#[derive(Clone, PartialEq, Eq)]
pub struct ItemSet {
    items: Vec<Item>,
    storage: NegentropyStorageVector,
}

impl Default for ItemSet {
    fn default() -> Self {
        ItemSet::new([])
    }
}

impl std::fmt::Debug for ItemSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ItemSet({} items)", self.items.len())
    }
}

impl ItemSet {
    /// A set of the given items (duplicates count once).
    pub fn new(items: impl IntoIterator<Item = Item>) -> ItemSet {
        let mut items: Vec<Item> = items.into_iter().collect();
        items.sort_unstable();
        items.dedup();
        let mut storage = NegentropyStorageVector::with_capacity(items.len());
        for it in &items {
            // Cannot fail: the storage is not sealed yet.
            let _ = storage.insert(it.ts, Id::from_byte_array(it.id));
        }
        // Cannot fail: sealed once.
        let _ = storage.seal();
        ItemSet { items, storage }
    }

    /// The set of the given facts' wire encodings ([`item_of`] each).
    pub fn from_facts<'a>(
        facts: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<ItemSet, RepairError> {
        let items = facts
            .into_iter()
            .map(item_of)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ItemSet::new(items))
    }

    /// Every item, in order: what the repair's fingerprints cover.
    pub fn items(&self) -> &[Item] {
        &self.items
    }

    /// How many items.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the set holds no item.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Whether an item with this id is in the set.
    pub fn contains(&self, id: &ItemId) -> bool {
        self.items.iter().any(|i| &i.id == id)
    }
}

/// What a finished reconciliation tells the initiator.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Ids in our set the peer's set lacks: send those facts.
    pub send: Vec<ItemId>,
    /// Ids in the peer's set ours lacks: ask the peer for them.
    pub request: Vec<ItemId>,
}

/// The initiator's next move.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Send this round to the responder and wait for its reply.
    Next(Vec<u8>),
    /// Reconciled.
    Done(Outcome),
}

/// The side that drives a reconciliation: opens with [`Initiator::open`],
/// feeds each reply to [`Initiator::step`] until it is [`Step::Done`].
#[derive(Clone, Debug)]
pub struct Initiator {
    set: ItemSet,
    send: Vec<Id>,
    request: Vec<Id>,
    rounds: u32,
}

impl Initiator {
    /// Start reconciling `set`: the initiator and its first round.
    pub fn open(set: ItemSet) -> Result<(Initiator, Vec<u8>), RepairError> {
        let first = {
            let mut neg =
                Negentropy::borrowed(&set.storage, FRAME_LIMIT as u64).map_err(malformed)?;
            neg.initiate().map_err(malformed)?
        };
        Ok((
            Initiator {
                set,
                send: Vec::new(),
                request: Vec::new(),
                rounds: 0,
            },
            first,
        ))
    }

    /// Replies handled so far.
    pub fn rounds(&self) -> u32 {
        self.rounds
    }

    /// The set this side reconciles.
    pub fn set(&self) -> &ItemSet {
        &self.set
    }

    /// Give the set back (a side that stops initiating answers over it).
    pub fn into_set(self) -> ItemSet {
        self.set
    }

    /// Handle the responder's reply.
    pub fn step(&mut self, reply: &[u8]) -> Result<Step, RepairError> {
        if reply.len() > MAX_ROUND_BYTES {
            return Err(RepairError::TooLarge(reply.len()));
        }
        self.rounds += 1;
        if self.rounds > MAX_ROUNDS {
            return Err(RepairError::TooManyRounds);
        }
        let mut neg =
            Negentropy::borrowed(&self.set.storage, FRAME_LIMIT as u64).map_err(malformed)?;
        neg.set_initiator();
        let next = neg
            .reconcile_with_ids(reply, &mut self.send, &mut self.request)
            .map_err(malformed)?;
        Ok(match next {
            Some(round) => Step::Next(round),
            None => {
                let ids = |v: &mut Vec<Id>| {
                    let mut out: Vec<ItemId> = v.drain(..).map(Id::to_bytes).collect();
                    out.sort_unstable();
                    out.dedup();
                    out
                };
                Step::Done(Outcome {
                    send: ids(&mut self.send),
                    request: ids(&mut self.request),
                })
            }
        })
    }
}

/// The responder's answer to one round, over its own `set` (stateless: a
/// responder keeps nothing between rounds).
pub fn respond(set: &ItemSet, round: &[u8]) -> Result<Vec<u8>, RepairError> {
    if round.len() > MAX_ROUND_BYTES {
        return Err(RepairError::TooLarge(round.len()));
    }
    let mut neg = Negentropy::borrowed(&set.storage, FRAME_LIMIT as u64).map_err(malformed)?;
    neg.reconcile(round).map_err(malformed)
}

/// A reconciliation run in memory, as two nodes would run it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Simulated {
    /// What each side must send the other.
    pub outcome: Outcome,
    /// Round trips: the opening round and each reply it took.
    pub round_trips: u32,
    /// Bytes of the initiator's rounds.
    pub bytes_out: u64,
    /// Bytes of the responder's rounds.
    pub bytes_in: u64,
}

/// Reconcile `initiator` (this side) with `responder` in memory.
pub fn simulate(initiator: &ItemSet, responder: &ItemSet) -> Result<Simulated, RepairError> {
    let (mut ini, mut round) = Initiator::open(initiator.clone())?;
    let mut sim = Simulated::default();
    loop {
        sim.round_trips += 1;
        sim.bytes_out += round.len() as u64;
        let reply = respond(responder, &round)?;
        sim.bytes_in += reply.len() as u64;
        match ini.step(&reply)? {
            Step::Next(next) => round = next,
            Step::Done(outcome) => {
                sim.outcome = outcome;
                return Ok(sim);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    fn item(n: u32) -> Item {
        Item {
            ts: u64::from(n / 3),
            id: fact_id(&n.to_le_bytes()),
        }
    }

    fn ids(items: impl IntoIterator<Item = Item>) -> Vec<ItemId> {
        let s: BTreeSet<ItemId> = items.into_iter().map(|i| i.id).collect();
        s.into_iter().collect()
    }

    #[test]
    fn equal_sets_need_nothing_and_one_round_trip() {
        let a = ItemSet::new((0..5000).map(item));
        let sim = simulate(&a, &a.clone()).unwrap();
        assert_eq!(sim.outcome, Outcome::default());
        assert_eq!(sim.round_trips, 1);
    }

    #[test]
    fn empty_sides_reconcile() {
        let a = ItemSet::new((0..100).map(item));
        let empty = ItemSet::default();
        let sim = simulate(&a, &empty).unwrap();
        assert_eq!(sim.outcome.send, ids(a.items().iter().copied()));
        assert!(sim.outcome.request.is_empty());
        let sim = simulate(&empty, &a).unwrap();
        assert_eq!(sim.outcome.request, ids(a.items().iter().copied()));
        let sim = simulate(&empty, &empty).unwrap();
        assert_eq!(sim.outcome, Outcome::default());
    }

    #[test]
    fn junk_rounds_are_errors_not_panics() {
        let a = ItemSet::new((0..100).map(item));
        for junk in [
            &[][..],
            &[0x61],
            &[0x61, 0xff],
            &[0x10, 1, 2, 3],
            &[0x61, 0, 0, 2, 9],
        ] {
            let _ = respond(&a, junk);
            let (mut ini, _) = Initiator::open(a.clone()).unwrap();
            let _ = ini.step(junk);
        }
        assert!(respond(&a, &[]).is_err());
        assert!(matches!(
            respond(&a, &vec![0x61; MAX_ROUND_BYTES + 1]),
            Err(RepairError::TooLarge(_))
        ));
    }

    #[test]
    fn an_item_is_the_fact_clock_and_the_digest_hash() {
        assert!(item_of(b"not a fact").is_err());
        let clock = |wall_ms, logical| amos_protocol::Hlc {
            wall_ms,
            logical,
            node: amos_protocol::NodeId([1; 32]),
        };
        assert!(timestamp(&clock(5, 9)) < timestamp(&clock(5, 10)));
        assert!(timestamp(&clock(5, u32::MAX)) < timestamp(&clock(6, 0)));
        assert_eq!(timestamp(&clock(u64::MAX, 0)), u64::MAX - 1);
        let mut d = crate::digest::Digest::new();
        d.add(b"x");
        assert_eq!(fact_id(b"x"), *blake3::hash(b"x").as_bytes());
    }

    proptest! {
        /// A peer's round is outside bytes: an answer or an error, never a
        /// panic (`fuzz/fuzz_targets/repair_round.rs` runs the same longer).
        #[test]
        fn arbitrary_rounds_never_panic(
            mut bytes in prop::collection::vec(any::<u8>(), 0..600),
            versioned in any::<bool>(),
        ) {
            if versioned && !bytes.is_empty() {
                bytes[0] = 0x61;
            }
            let ours = ItemSet::new((0..300).map(item));
            let _ = respond(&ours, &bytes);
            let (mut ini, _) = Initiator::open(ours.clone()).unwrap();
            if let Ok(Step::Done(o)) = ini.step(&bytes) {
                prop_assert!(o.send.iter().all(|id| ours.contains(id)));
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Two random sets with random overlap: the initiator is told to
        /// send exactly A \ B and to ask for exactly B \ A, within a
        /// bounded number of round trips; applying both gives the union.
        #[test]
        fn random_sets_reconcile_to_the_union(
            shared in 0u32..3000,
            only_a in 0u32..400,
            only_b in 0u32..400,
            salt in any::<u32>(),
        ) {
            let mk = |range: std::ops::Range<u32>| {
                range.map(move |n| item(n.wrapping_mul(7).wrapping_add(salt)))
            };
            let common: Vec<Item> = mk(0..shared).collect();
            let a_only: Vec<Item> = mk(10_000..10_000 + only_a).collect();
            let b_only: Vec<Item> = mk(20_000..20_000 + only_b).collect();
            let a = ItemSet::new(common.iter().chain(&a_only).copied());
            let b = ItemSet::new(common.iter().chain(&b_only).copied());
            let sim = simulate(&a, &b).unwrap();
            prop_assert_eq!(&sim.outcome.send, &ids(a_only.iter().copied()));
            prop_assert_eq!(&sim.outcome.request, &ids(b_only.iter().copied()));
            prop_assert!(sim.round_trips <= 8, "{} round trips", sim.round_trips);
            let mut union: BTreeSet<ItemId> = a.items().iter().map(|i| i.id).collect();
            union.extend(sim.outcome.request.iter().copied());
            let mut other: BTreeSet<ItemId> = b.items().iter().map(|i| i.id).collect();
            other.extend(sim.outcome.send.iter().copied());
            prop_assert_eq!(union, other);
        }
    }
}
