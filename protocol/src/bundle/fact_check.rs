//! Checking a bundle's facts during pass 1: a frame's facts go, half a
//! frame per batch, to the one fact verifier ([`crate::verify`]) on a pool
//! of worker threads (one per core), while the reader reads, decrypts and
//! decompresses the next frame; the first bad fact in reading order is the
//! one named, whichever worker finds it first.
//!
//! Invariant: the same code checks a fact here as in live sync
//! (`verify::check_chunk`: canonical decoding, validation, batch ed25519
//! with `verify_strict`'s extra conditions).
//!
//! Boundary: no reading, no decryption: it is handed a frame's plaintext
//! and the ranges of its facts.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};

use super::BundleError;
use crate::ProtocolError;
use crate::verify::{self, KeyCache};

pub(super) enum FactProblem {
    Invalid(ProtocolError),
    Signature,
}

/// Check `items` (facts `base..` of one frame) with the one fact verifier
/// ([`crate::verify`]), caching author keys in `keys`. Returns how many
/// facts there were, or the first bad one.
fn verify_chunk(
    items: &[&[u8]],
    base: usize,
    keys: &mut KeyCache,
) -> Result<u64, (usize, FactProblem)> {
    let results = verify::check_chunk(items, true, keys);
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Ok(_) => {}
            Err(ProtocolError::BadSignature) => return Err((base + i, FactProblem::Signature)),
            Err(e) => return Err((base + i, FactProblem::Invalid(e))),
        }
    }
    Ok(items.len() as u64)
}

/// Part of one frame for a worker: facts `start..end` of `items`.
pub(super) struct Job {
    pub(super) frame: u64,
    pub(super) plain: Arc<Vec<u8>>,
    pub(super) items: Arc<Vec<Range<usize>>>,
    pub(super) start: usize,
    pub(super) end: usize,
}

pub(super) type JobResult = (u64, Result<u64, (usize, FactProblem)>);

pub(super) fn run_job(job: &Job, keys: &mut KeyCache) -> JobResult {
    let items: Vec<&[u8]> = job.items[job.start..job.end]
        .iter()
        .map(|r| &job.plain[r.clone()])
        .collect();
    (job.frame, verify_chunk(&items, job.start, keys))
}

/// A worker: verifies jobs until the queue closes, with its own key cache.
pub(super) fn worker(jobs: &Mutex<Receiver<Job>>, results: Sender<JobResult>, cancel: &AtomicBool) {
    let mut keys = KeyCache::default();
    loop {
        let job = match jobs.lock() {
            Ok(rx) => match rx.recv() {
                Ok(job) => job,
                Err(_) => return,
            },
            Err(_) => return,
        };
        if cancel.load(Ordering::Relaxed) {
            continue;
        }
        if results.send(run_job(&job, &mut keys)).is_err() {
            return;
        }
    }
}

pub(super) fn worker_count() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 16)
}

/// The first problem in reading order.
#[derive(Default)]
pub(super) struct FirstProblem(pub(super) Option<(u64, usize, BundleError)>);

impl FirstProblem {
    pub(super) fn offer(&mut self, frame: u64, index: usize, e: BundleError) {
        if self
            .0
            .as_ref()
            .is_none_or(|(f, i, _)| (frame, index) < (*f, *i))
        {
            self.0 = Some((frame, index, e));
        }
    }

    pub(super) fn offer_result(&mut self, (frame, r): JobResult, facts: &mut u64) {
        match r {
            Ok(n) => *facts += n,
            Err((index, FactProblem::Signature)) => self.offer(
                frame,
                index,
                BundleError::BadFactSignature {
                    frame,
                    index: index as u64,
                },
            ),
            Err((index, FactProblem::Invalid(error))) => self.offer(
                frame,
                index,
                BundleError::BadFact {
                    frame,
                    index: index as u64,
                    error,
                },
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::format::FRAME_FACTS;
    use super::super::testkit::*;
    use super::*;
    use crate::bundle::{BundleWriter, Recipient, read_verified, verify_bundle};
    use crate::codec;
    use crate::{Fact, FactBody, NodeId, NodeIdentity, SignedFact, TeamFact, TeamId};
    use ed25519_dalek::VerifyingKey;

    fn bad_signature(fact: &[u8]) -> Vec<u8> {
        let mut f = fact.to_vec();
        let n = f.len();
        f[n - 1] ^= 0x01; // last byte of the signature's s
        f
    }

    #[test]
    fn a_bad_fact_signature_inside_a_good_frame_is_named() {
        let id = ident(1);
        let good = memory_fact(&id, 1);
        let bad = bad_signature(&memory_fact(&id, 2));
        for key in [Some(key()), None] {
            let bytes = build_with(
                &id,
                key.as_ref(),
                [5; 16],
                &[
                    vec![team_fact(&id, 1)],
                    vec![good.clone(), bad.clone(), team_fact(&id, 3)],
                ],
            );
            let err = verify_bundle(&bytes[..], key.as_ref()).unwrap_err();
            assert!(
                matches!(err, BundleError::BadFactSignature { frame: 1, index: 1 }),
                "{err}"
            );
            assert_eq!(err.to_string(), "bundle frame 1, fact 1: bad signature");
        }
        // A big frame, verified in parallel chunks with batches: the first
        // bad fact is named even when a later chunk also has one.
        let mut many: Vec<Vec<u8>> = (0..700).map(|i| team_fact(&id, i)).collect();
        many[500] = bad_signature(&many[500]);
        many[650] = bad_signature(&many[650]);
        let bytes = build_with(&id, Some(&key()), [5; 16], &[many.clone()]);
        let err = verify_bundle(&bytes[..], Some(&key())).unwrap_err();
        assert!(
            matches!(
                err,
                BundleError::BadFactSignature {
                    frame: 0,
                    index: 500
                }
            ),
            "{err}"
        );
        // An undecodable fact before a bad signature: the earlier one is named.
        many[100] = vec![0xff; 10];
        let bytes = build_with(&id, Some(&key()), [5; 16], &[many]);
        let err = verify_bundle(&bytes[..], Some(&key())).unwrap_err();
        assert!(
            matches!(
                err,
                BundleError::BadFact {
                    frame: 0,
                    index: 100,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn many_big_frames_through_the_worker_pool() {
        let a = ident(1);
        let b = ident(2);
        let frames: Vec<Vec<Vec<u8>>> = (0..4u64)
            .map(|f| {
                (0..300u64)
                    .map(|i| {
                        let id = if i % 3 == 0 { &b } else { &a };
                        team_fact(id, f * 1000 + i)
                    })
                    .collect()
            })
            .collect();
        let bytes = build_with(&a, Some(&key()), [6; 16], &frames);
        let v = verify_bundle(&bytes[..], Some(&key())).unwrap();
        assert_eq!((v.summary().frames, v.summary().facts), (4, 1200));
        assert_eq!(import(&bytes, Some(&key())).unwrap(), frames);
        // Bad facts in frames 2 and 3: frame 2's is named, whichever worker
        // finishes first.
        let mut bad = frames.clone();
        bad[3][10] = bad_signature(&bad[3][10]);
        bad[2][290] = bad_signature(&bad[2][290]);
        let bytes = build_with(&a, Some(&key()), [6; 16], &bad);
        for _ in 0..5 {
            let err = verify_bundle(&bytes[..], Some(&key())).unwrap_err();
            assert!(
                matches!(
                    err,
                    BundleError::BadFactSignature {
                        frame: 2,
                        index: 290
                    }
                ),
                "{err}"
            );
        }
    }

    #[test]
    fn facts_that_break_the_data_model_are_refused() {
        // Signed correctly, then one byte of the fact changed and no
        // signature could match; also a fact that does not decode.
        let id = ident(1);
        let bytes = build_with(&id, None, [5; 16], &[vec![vec![0, 1, 2]]]);
        let err = verify_bundle(&bytes[..], None).unwrap_err();
        assert!(
            matches!(
                err,
                BundleError::BadFact {
                    frame: 0,
                    index: 0,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn facts_by_small_order_or_mixed_order_keys_are_named() {
        // The key rules themselves are tested in `verify`; here: a bundle
        // holding a fact that claims such an author names that fact.
        let honest = VerifyingKey::from_bytes(&ident(1).node_id().0).unwrap();
        // A point of order 8, and the identity (order 1).
        let [_, identity, order_8, ..] = verify::SMALL_ORDER_Y;
        let small = VerifyingKey::from_bytes(&order_8).unwrap();
        let mixed = VerifyingKey::from(honest.to_edwards() + small.to_edwards());
        let mut not_a_point = [0u8; 32];
        not_a_point[0] = 2;
        for author in [mixed.to_bytes(), identity, order_8, not_a_point] {
            let fact = Fact {
                clock: clock(NodeId(author), 1),
                body: FactBody::Team(TeamFact {
                    id: TeamId::parse("x").unwrap(),
                    origin: NodeId([7; 32]),
                    name: String::new(),
                    present: true,
                }),
            };
            let forged = SignedFact {
                signature: ident(1).sign_raw(&crate::sign::signing_bytes(&fact)),
                fact,
            }
            .to_bytes();
            let bytes = build_with(
                &ident(1),
                None,
                [0; 16],
                &[vec![team_fact(&ident(1), 1), forged]],
            );
            let err = verify_bundle(&bytes[..], None).unwrap_err();
            assert!(
                matches!(err, BundleError::BadFactSignature { frame: 0, index: 1 }),
                "{err}"
            );
        }
    }

    /// CPU seconds this process has used (user + system), from /proc (Linux).
    fn cpu_seconds() -> f64 {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        (ticks(11) + ticks(12)) / 100.0
    }

    /// Wall and CPU time of `f`.
    fn timed<T>(what: &str, f: impl FnOnce() -> T) -> T {
        let (t, c) = (std::time::Instant::now(), cpu_seconds());
        let out = f();
        println!(
            "{what}: wall {:.2} s, cpu {:.2} s",
            t.elapsed().as_secs_f64(),
            cpu_seconds() - c
        );
        out
    }

    /// `cargo test --release -p amos-protocol bundle::fact_check::tests::bench -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn bench_300k_facts() {
        use std::time::Instant;
        const N: u64 = 300_000;
        let ids: Vec<NodeIdentity> = (1..=3).map(ident).collect();
        let t = Instant::now();
        let workers = 2u64;
        let facts: Vec<Vec<u8>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..workers)
                .map(|w| {
                    let ids = &ids;
                    s.spawn(move || {
                        (w * N / workers..(w + 1) * N / workers)
                            .map(|i| memory_fact(&ids[(i % 3) as usize], i))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        let avg = facts.iter().map(Vec::len).sum::<usize>() / facts.len();
        println!("generated {N} facts (avg {avg} bytes) in {:?}", t.elapsed());

        let key = key();
        let t = Instant::now();
        let mut w = BundleWriter::new(
            Vec::new(),
            &ids[0],
            Recipient::AnyPeer,
            clock(ids[0].node_id(), 1),
            scopes(),
            Some(&key),
            [9; 16],
        )
        .unwrap();
        for f in &facts {
            w.push_fact(f.clone()).unwrap();
        }
        let (bytes, s) = w.finish().unwrap();
        println!(
            "wrote {} frames, {} facts, {} MB in {:?}",
            s.frames,
            s.facts,
            s.bytes / 1_000_000,
            t.elapsed()
        );

        let workers = worker_count();
        let v = timed(
            &format!("pass 1, verify_bundle ({workers} workers)"),
            || verify_bundle(&bytes[..], Some(&key)).unwrap(),
        );
        assert_eq!(v.summary().facts, N);
        let n = timed("pass 2, read_verified", || {
            let mut n = 0usize;
            read_verified(&bytes[..], Some(&key), &v, |f| {
                n += f.len();
                Ok::<(), ()>(())
            })
            .unwrap();
            n
        });
        assert_eq!(n as u64, N);
        timed("decode + validate + signing_bytes, 1 thread", || {
            for f in &facts {
                let sf = codec::decode_signed(f).unwrap();
                sf.fact.validate().unwrap();
                std::hint::black_box(crate::sign::signing_bytes(&sf.fact));
            }
        });
        // The live-sync path: the same verifier over whole batches of 4096.
        timed(
            "verify::verify_all, batches of 4096 (live sync's path)",
            || {
                for batch in facts.chunks(FRAME_FACTS) {
                    assert_eq!(verify::verify_all(batch).unwrap().len(), batch.len());
                }
            },
        );
        // Baseline: the same facts one by one with SignedFact::decode_verified,
        // on as many threads.
        let per = facts.len().div_ceil(workers);
        timed(
            &format!("baseline: decode_verified one by one, {workers} threads"),
            || {
                std::thread::scope(|s| {
                    for chunk in facts.chunks(per) {
                        s.spawn(move || {
                            for f in chunk {
                                SignedFact::decode_verified(f).unwrap();
                            }
                        });
                    }
                })
            },
        );
    }
}
