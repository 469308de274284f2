//! Verifying batches of facts received from a peer, on every core.
//!
//! Each fact is decoded and checked with [`SignedFact::decode_verified`]
//! (its author's signature with `verify_strict`, then its validity): the
//! very same check as one at a time, only spread over scoped threads when a
//! batch is large enough to pay for them.
//!
//! Boundary: never returns a fact that did not verify; the first bad fact
//! fails the whole batch.

use amos_protocol::{ProtocolError, SignedFact, Verified};

/// Below this many facts a batch is verified on the calling thread.
const PARALLEL_MIN: usize = 32;

/// Decode and verify every fact of `facts`, in order.
pub fn verify_facts(facts: &[Vec<u8>]) -> Result<Vec<Verified<SignedFact>>, ProtocolError> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    if facts.len() < PARALLEL_MIN || threads < 2 {
        return facts
            .iter()
            .map(|f| SignedFact::decode_verified(f))
            .collect();
    }
    let chunk = facts.len().div_ceil(threads);
    let results: Vec<Result<Vec<Verified<SignedFact>>, ProtocolError>> =
        std::thread::scope(|scope| {
            let handles: Vec<_> = facts
                .chunks(chunk)
                .map(|c| {
                    scope.spawn(move || {
                        c.iter()
                            .map(|f| SignedFact::decode_verified(f))
                            .collect::<Result<Vec<_>, _>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or(Err(ProtocolError::BadSignature)))
                .collect()
        });
    let mut out = Vec::with_capacity(facts.len());
    for r in results {
        out.extend(r?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use amos_protocol::{AgentFact, AgentId, Fact, FactBody, HlcState, NodeIdentity};

    use super::*;

    fn facts(n: usize) -> Vec<Vec<u8>> {
        let identity = NodeIdentity::from_secret([9; 32]);
        let mut hlc = HlcState::default();
        (0..n)
            .map(|i| {
                identity
                    .sign(Fact {
                        clock: hlc.tick(1_000, identity.node_id()),
                        body: FactBody::Agent(AgentFact {
                            id: AgentId::parse(&format!("agent{i}")).unwrap(),
                            kind: "test".into(),
                            display_name: format!("agent{i}"),
                            present: true,
                        }),
                    })
                    .unwrap()
                    .to_bytes()
            })
            .collect()
    }

    #[test]
    fn a_large_batch_verifies_in_order_and_one_bad_signature_fails_it() {
        let good = facts(100);
        let verified = verify_facts(&good).unwrap();
        assert_eq!(verified.len(), 100);
        for (v, bytes) in verified.iter().zip(&good) {
            assert_eq!(&v.to_bytes(), bytes);
        }
        // Flip one bit of the last fact's signature (the last bytes).
        let mut bad = good.clone();
        let last = bad[99].len() - 1;
        bad[99][last] ^= 1;
        assert!(verify_facts(&bad).is_err());
        // Small batches take the single-thread path, with the same rule.
        let mut small = good[..3].to_vec();
        let last = small[2].len() - 1;
        small[2][last] ^= 1;
        assert!(verify_facts(&small).is_err());
        assert_eq!(verify_facts(&good[..3]).unwrap().len(), 3);
    }
}
