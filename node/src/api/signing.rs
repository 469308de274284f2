//! The signing pipeline of local writes: facts signed in chunks with one
//! field inversion each, other cores signing ahead while the calling
//! thread writes ([`sign_each`]), and a fact this node just signed
//! admitted as its own ([`admit_local`]).

use amos_protocol::{Fact, NodeIdentity, SignedFact, Verified};

use crate::error::{NodeError, Result};

/// Facts signed per chunk: one field inversion for the chunk
/// ([`NodeIdentity::sign_batch`]), and the unit of work handed between
/// threads. Even, so a memory's content and acl facts share a chunk.
pub(crate) const SIGN_CHUNK: usize = 64;

/// Sign facts, in order ([`sign_each`] collected).
pub(crate) fn sign_all(
    identity: &NodeIdentity,
    facts: Vec<Fact>,
) -> Result<Vec<Verified<SignedFact>>> {
    let mut out = Vec::with_capacity(facts.len());
    sign_each(identity, facts, |chunk| {
        out.extend(chunk);
        Ok(())
    })?;
    Ok(out)
}

/// Sign `facts` and hand them to `put` in their order, [`SIGN_CHUNK`] at a
/// time (the last chunk may be shorter), on the calling thread (the one
/// holding the transaction). ed25519 signing is most of a batched write's
/// work, so from two chunks on, other threads (one per further core, at
/// most one per chunk after the first) sign chunks ahead while `put`
/// writes the ones already signed, and the calling thread signs too
/// whenever the next chunk is not ready yet: signing and writing overlap
/// instead of taking turns. The signatures are
/// the same bytes whichever thread makes them (ed25519 is deterministic).
/// The first error, from signing or from `put`, ends the batch; the chunks
/// after it are not handed to `put`.
pub(crate) fn sign_each(
    identity: &NodeIdentity,
    facts: Vec<Fact>,
    mut put: impl FnMut(Vec<Verified<SignedFact>>) -> Result<()>,
) -> Result<()> {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;

    let sign = |chunk: Vec<Fact>| identity.sign_batch(chunk).map_err(NodeError::from);
    let mut chunks: Vec<Vec<Fact>> = Vec::with_capacity(facts.len().div_ceil(SIGN_CHUNK));
    let mut it = facts.into_iter().peekable();
    while it.peek().is_some() {
        chunks.push(it.by_ref().take(SIGN_CHUNK).collect());
    }
    let helpers = std::thread::available_parallelism().map_or(1, |n| n.get()) - 1;
    let helpers = helpers.min(chunks.len().saturating_sub(1));
    if helpers == 0 {
        for chunk in chunks {
            put(sign(chunk)?)?;
        }
        return Ok(());
    }
    let n = chunks.len();
    // Each chunk is taken once: the counter says which is next, the slot
    // holds it until then.
    let slots: Vec<Mutex<Option<Vec<Fact>>>> =
        chunks.into_iter().map(|c| Mutex::new(Some(c))).collect();
    let next = AtomicUsize::new(0);
    let claim = || -> Option<(usize, Vec<Fact>)> {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let slot = slots.get(i)?;
        let chunk = slot.lock().unwrap_or_else(|p| p.into_inner()).take()?;
        Some((i, chunk))
    };
    type Signed = Result<Vec<Verified<SignedFact>>>;
    std::thread::scope(|scope| {
        let (send, signed) = mpsc::channel::<(usize, Signed)>();
        let handles: Vec<_> = (0..helpers)
            .map(|_| {
                let send = send.clone();
                let claim = &claim;
                let sign = &sign;
                scope.spawn(move || {
                    while let Some((i, chunk)) = claim() {
                        // The receiver is gone once the batch failed.
                        if send.send((i, sign(chunk))).is_err() {
                            break;
                        }
                    }
                })
            })
            .collect();
        drop(send);
        let mut ready: Vec<Option<Signed>> = (0..n).map(|_| None).collect();
        let mut written = || -> Result<()> {
            for want in 0..n {
                loop {
                    if let Some(done) = ready[want].take() {
                        put(done?)?;
                        break;
                    }
                    while let Ok((i, done)) = signed.try_recv() {
                        ready[i] = Some(done);
                    }
                    if ready[want].is_some() {
                        continue;
                    }
                    if let Some((i, chunk)) = claim() {
                        ready[i] = Some(sign(chunk));
                        continue;
                    }
                    // Every chunk is taken: wait for a helper's.
                    let (i, done) = signed.recv().map_err(|_| {
                        NodeError::Corrupt("a signing thread stopped before its chunk".into())
                    })?;
                    ready[i] = Some(done);
                }
            }
            Ok(())
        };
        let out = written();
        // Stop the helpers: nothing more to claim, nobody to send to.
        next.store(n, Ordering::Relaxed);
        drop(signed);
        let mut panicked = false;
        for h in handles {
            panicked |= h.join().is_err();
        }
        match out {
            Ok(()) if panicked => Err(NodeError::Corrupt("a signing thread panicked".into())),
            out => out,
        }
    })
}

/// Admit a fact this node just signed (a local write proves its author is
/// this node: [`amos_sync::Admission::local`]).
pub(crate) fn admit_local(
    identity: &NodeIdentity,
    fact: Verified<SignedFact>,
) -> Result<amos_sync::Admission> {
    amos_sync::Admission::local(identity, fact)
        .map_err(|_| NodeError::Corrupt("a local write signed by another key".into()))
}

#[cfg(test)]
mod tests {
    use amos_protocol::{Hlc, MemoryTombstone};

    use super::*;
    use crate::api::memories::NewMemory;
    use crate::api::node::test_node;
    use amos_protocol::{AgentId, FactBody, MemoryFixed, MemoryId, MemoryType, Scope, Validity};

    fn tombstones(id: &NodeIdentity, n: usize) -> Vec<Fact> {
        let node = id.node_id();
        (0..n)
            .map(|i| Fact {
                clock: Hlc {
                    wall_ms: 1_000,
                    logical: i as u32,
                    node,
                },
                body: FactBody::MemoryTombstone(MemoryTombstone {
                    id: MemoryId((i as u128).to_be_bytes()),
                    fixed: MemoryFixed {
                        owner: AgentId::parse("a").unwrap(),
                        created_ms: 1,
                        origin: node,
                    },
                }),
            })
            .collect()
    }

    /// Whatever thread signs a chunk, `put` sees every fact once, in order,
    /// signed exactly as `sign` signs it alone, in chunks of `SIGN_CHUNK`.
    #[test]
    fn sign_each_hands_every_fact_over_in_order() {
        let id = NodeIdentity::from_secret([9; 32]);
        for n in [0, 1, 63, 64, 65, 129, 1000, 2001] {
            let facts = tombstones(&id, n);
            let mut seen = Vec::new();
            let mut sizes = Vec::new();
            sign_each(&id, facts.clone(), |chunk| {
                sizes.push(chunk.len());
                seen.extend(chunk);
                Ok(())
            })
            .unwrap();
            assert_eq!(seen.len(), n);
            for (s, f) in seen.iter().zip(facts) {
                assert_eq!(**s, *id.sign(f).unwrap());
            }
            let (last, whole) = sizes.split_last().map_or((0, &[][..]), |(l, w)| (*l, w));
            assert!(whole.iter().all(|s| *s == SIGN_CHUNK), "{n}: {sizes:?}");
            assert!((1..=SIGN_CHUNK).contains(&last) || n == 0, "{n}: {sizes:?}");
        }
    }

    /// The first error ends the batch: from `put`, no later chunk is handed
    /// over; from signing (another node's fact in the middle), the error is
    /// returned and no chunk from it on reaches `put`.
    #[test]
    fn sign_each_stops_at_the_first_error() {
        let id = NodeIdentity::from_secret([9; 32]);
        let mut calls = 0;
        let out = sign_each(&id, tombstones(&id, 1000), |_| {
            calls += 1;
            if calls == 3 {
                return Err(NodeError::BadInput("stop".into()));
            }
            Ok(())
        });
        assert!(matches!(out, Err(NodeError::BadInput(_))));
        assert_eq!(calls, 3);

        let other = NodeIdentity::from_secret([8; 32]);
        let mut facts = tombstones(&id, 1000);
        facts[500] = tombstones(&other, 1).remove(0);
        let mut handed = 0;
        let out = sign_each(&id, facts, |chunk| {
            handed += chunk.len();
            Ok(())
        });
        assert!(out.is_err());
        assert!(handed <= 500 - 500 % SIGN_CHUNK, "{handed}");
    }

    /// A batch large enough to be signed on several threads stores rows whose
    /// facts all verify as this node's, content then acl, with clocks rising
    /// with `seq`, in the order given.
    #[test]
    fn add_many_stores_verified_facts_in_order() {
        let (_dir, _home, mut node, alice) = test_node("alice");
        let items: Vec<_> = (0..300)
            .map(|i| {
                let new = NewMemory {
                    text: format!("memory number {i}"),
                    kind: MemoryType::parse("note").unwrap(),
                    share: if i % 2 == 0 {
                        vec![]
                    } else {
                        vec![Scope::Agent(AgentId::parse("alice").unwrap())]
                    },
                    tags: vec![],
                    importance: 0.5,
                    pinned: false,
                    expires_ms: None,
                    supersedes: None,
                    validity: Validity::default(),
                };
                (&alice, new)
            })
            .collect();
        let ids = node.add_many(items).unwrap();
        let me = node.node_id();
        type Row = (Vec<u8>, String, Vec<u8>, Vec<u8>);
        let rows: Vec<Row> = node
            .store
            .read(|r| crate::store::inspect::signed_rows(r))
            .unwrap()
            .into_iter()
            .map(|r| (r.id, r.content, r.content_fact, r.acl_fact))
            .collect();
        assert_eq!(rows.len(), 300);
        let mut last: Option<Hlc> = None;
        for (i, ((mid, text, content, acl), id)) in rows.iter().zip(&ids).enumerate() {
            assert_eq!(&mid[..], &id.0[..]);
            assert_eq!(text, &format!("memory number {i}"));
            let content = SignedFact::decode_verified(content).unwrap();
            let acl = SignedFact::decode_verified(acl).unwrap();
            assert!(matches!(&content.fact.body, FactBody::MemoryContent(c) if c.id == *id));
            assert!(matches!(&acl.fact.body, FactBody::MemoryAcl(a) if a.id == *id));
            for f in [&content, &acl] {
                assert_eq!(f.fact.author(), me);
                assert!(last.is_none_or(|l| l < f.fact.clock));
                last = Some(f.fact.clock);
            }
        }
    }
}
