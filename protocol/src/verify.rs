//! The one way wire-encoded signed facts from outside become [`Verified`]
//! facts: live sync (a peer's batches), bundles (each frame) and stored
//! deferred facts all come through here.
//!
//! Each fact is decoded canonically ([`codec::decode_signed`]: re-encoding
//! gives the same bytes), checked against the data model
//! ([`crate::Fact::validate`]), and its signature checked by its author's key
//! under the rules of ed25519 `verify_strict`:
//!
//! * the author key must be a point and not of small order;
//! * the signature's `R` must be canonically encoded and not of small order;
//! * the equation must hold.
//!
//! Facts are checked with ed25519 batch verification: the equation of
//! `ed25519_dalek::verify_batch` (randomizers derived from the whole batch,
//! cofactorless), with the terms of one author key summed into one
//! ([`batch_equation_holds`]): a batch from a peer is mostly one author's, so
//! the multiscalar multiplication has about half the points. Batch
//! verification accepts every fact `verify_strict` accepts; the extra
//! conditions `verify_strict` imposes are checked per fact before batching
//! (here, and only here). Authors whose key
//! has a small-order component are checked one by one with `verify_strict`.
//! When a batch equation fails, its facts are re-checked one by one to name
//! the bad ones. Large batches are split over scoped threads, one per core.
//!
//! One difference from `verify_strict` remains: a signature whose `R`
//! carries a small-order component fails `verify_strict` but may pass the
//! (cofactorless) batch equation, whose randomizers are derived from the
//! batch itself. Only the holder of the author's secret key can make such a
//! signature, on purpose. Ruling it out costs a scalar multiplication per
//! fact (as much as a single verification), which would erase the gain.
//! Batches of fewer than [`BATCH_MIN`] facts (one fact on its own, e.g.)
//! are checked with `verify_strict` and are exact.
//!
//! Invariant: nothing here returns a [`Verified`] fact that did not pass all
//! three checks. Boundary: no I/O; threads are scoped and end before return.

use std::collections::HashMap;

use curve25519_dalek::constants::ED25519_BASEPOINT_POINT;
use curve25519_dalek::edwards::CompressedEdwardsY;
use curve25519_dalek::traits::{IsIdentity, VartimeMultiscalarMul};
use curve25519_dalek::{EdwardsPoint, Scalar};
use ed25519_dalek::{Signature, VerifyingKey};
use sha2::{Digest, Sha512};

use crate::codec;
use crate::sign::signing_bytes;
use crate::{ProtocolError, SignedFact, Verified};

impl SignedFact {
    /// Check the signature against the author's key (`verify_strict`) and
    /// the fact's rules. Batches go through [`verify_all`].
    pub fn verify(self) -> Result<Verified<SignedFact>, ProtocolError> {
        check_strict(&self)?;
        self.fact.validate()?;
        Ok(Verified::assume_verified(self))
    }

    /// Decode wire bytes and verify them in one step ([`verify_one`]).
    pub fn decode_verified(bytes: &[u8]) -> Result<Verified<SignedFact>, ProtocolError> {
        verify_one(bytes)
    }
}

/// Below this many facts a batch is checked fact by fact (`verify_strict`).
pub const BATCH_MIN: usize = 4;
/// Below this many facts a batch is verified on the calling thread.
pub const PARALLEL_MIN: usize = 256;
/// At most this many threads verify one batch.
const MAX_THREADS: usize = 16;

/// The first fact of a batch that did not verify: its index in the batch
/// and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("fact {index}: {error}")]
pub struct BatchError {
    /// Where in the batch the bad fact is.
    pub index: usize,
    /// What is wrong with it.
    pub error: ProtocolError,
}

/// Decode and verify one fact (exactly `verify_strict`).
pub fn verify_one(bytes: &[u8]) -> Result<Verified<SignedFact>, ProtocolError> {
    let fact = decode_valid(bytes)?;
    check_strict(&fact)?;
    Ok(Verified::assume_verified(fact))
}

/// Decode and verify every fact of `facts`, in order. The first bad fact
/// (in batch order) fails the whole batch.
pub fn verify_all<B: AsRef<[u8]> + Sync>(
    facts: &[B],
) -> Result<Vec<Verified<SignedFact>>, BatchError> {
    let results = run(facts, true);
    let mut out = Vec::with_capacity(facts.len());
    for (index, r) in results.into_iter().enumerate() {
        match r {
            Ok(f) => out.push(Verified::assume_verified(f)),
            Err(error) => return Err(BatchError { index, error }),
        }
    }
    Ok(out)
}

/// A batch checked by [`verify_batch`]: the facts that verified, and the
/// facts set aside for a time past [`crate::MAX_TIME_MS`].
#[derive(Debug, Default)]
pub struct CheckedBatch {
    /// The facts, each verified, in batch order.
    pub verified: Vec<Verified<SignedFact>>,
    /// Facts whose signature by their author verified and which keep every
    /// other rule of [`crate::Fact::validate`], but carry a time past the
    /// bound, each with the [`ProtocolError::TimeOutOfBounds`] naming it.
    /// Not verified facts: only to be refused (the audit log), never applied.
    pub out_of_bounds: Vec<(SignedFact, ProtocolError)>,
}

/// [`verify_all`], except that a fact whose one fault is a time past
/// [`crate::MAX_TIME_MS`] is set aside rather than failing the batch. The
/// bound came after facts were signed and sent: a node that took one
/// before it was a rule may still hold it and send it on. Failing a whole
/// batch for it would stop every session from that node for good; setting
/// it aside lets the receiver refuse that fact alone, in its audit log, and
/// apply the rest. Any other bad fact fails the batch as in [`verify_all`].
pub fn verify_batch<B: AsRef<[u8]> + Sync>(facts: &[B]) -> Result<CheckedBatch, BatchError> {
    let mut out = CheckedBatch::default();
    for (index, r) in run_with(facts, true, Bound::SetAside)
        .into_iter()
        .enumerate()
    {
        match r {
            Ok(f) => match f.fact.check_times() {
                Ok(()) => out.verified.push(Verified::assume_verified(f)),
                Err(e) => out.out_of_bounds.push((f, e)),
            },
            Err(error) => return Err(BatchError { index, error }),
        }
    }
    Ok(out)
}

/// Decode and verify every fact of `facts`, each on its own: one result per
/// fact, in order (a bad fact does not fail the others).
pub fn verify_each<B: AsRef<[u8]> + Sync>(
    facts: &[B],
) -> Vec<Result<Verified<SignedFact>, ProtocolError>> {
    run(facts, false)
        .into_iter()
        .map(|r| r.map(Verified::assume_verified))
        .collect()
}

/// Check `facts` (split over threads when large). With `stop`, the results
/// end at the first bad fact.
fn run<B: AsRef<[u8]> + Sync>(facts: &[B], stop: bool) -> Vec<Result<SignedFact, ProtocolError>> {
    run_with(facts, stop, Bound::Check)
}

/// Whether a check applies the time bound of [`crate::Fact::validate`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bound {
    /// A fact past it is bad.
    Check,
    /// The caller checks it (after the signature): [`verify_batch`].
    SetAside,
}

/// [`run`], with the time bound applied or left to the caller.
fn run_with<B: AsRef<[u8]> + Sync>(
    facts: &[B],
    stop: bool,
    bound: Bound,
) -> Vec<Result<SignedFact, ProtocolError>> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(MAX_THREADS);
    if facts.len() < PARALLEL_MIN || threads < 2 {
        return check_chunk_with(facts, stop, &mut KeyCache::default(), bound);
    }
    let per = facts.len().div_ceil(threads);
    let parts: Vec<Option<Vec<Result<SignedFact, ProtocolError>>>> = std::thread::scope(|s| {
        let handles: Vec<_> = facts
            .chunks(per)
            .map(|c| {
                let handle = std::thread::Builder::new()
                    .name("amos-verify".into())
                    .spawn_scoped(s, move || {
                        check_chunk_with(c, stop, &mut KeyCache::default(), bound)
                    });
                (c, handle)
            })
            .collect();
        handles
            .into_iter()
            .map(|(c, h)| match h {
                Ok(h) => h.join().ok(),
                // No thread to be had: this thread does that share.
                Err(_) => Some(check_chunk_with(c, stop, &mut KeyCache::default(), bound)),
            })
            .collect()
    });
    let mut out = Vec::with_capacity(facts.len());
    for (part, chunk) in parts.into_iter().zip(facts.chunks(per)) {
        // A worker that panicked verified nothing: its facts are refused.
        let part = part.unwrap_or_else(|| {
            chunk
                .iter()
                .map(|_| Err(ProtocolError::BadSignature))
                .collect()
        });
        let bad = part.iter().any(Result::is_err);
        out.extend(part);
        if stop && bad {
            break;
        }
    }
    out
}

/// Decode a fact canonically and check it against the data model.
fn decode_valid(bytes: &[u8]) -> Result<SignedFact, ProtocolError> {
    decode_valid_with(bytes, Bound::Check)
}

/// [`decode_valid`], with the time bound applied or left to the caller.
fn decode_valid_with(bytes: &[u8], bound: Bound) -> Result<SignedFact, ProtocolError> {
    let fact = codec::decode_signed(bytes)?;
    match bound {
        Bound::Check => fact.fact.validate()?,
        Bound::SetAside => fact.fact.validate_except_times()?,
    }
    Ok(fact)
}

/// `verify_strict` of one decoded fact.
pub(crate) fn check_strict(fact: &SignedFact) -> Result<(), ProtocolError> {
    let key =
        VerifyingKey::from_bytes(&fact.fact.author().0).map_err(|_| ProtocolError::BadSignature)?;
    key.verify_strict(
        &signing_bytes(&fact.fact),
        &Signature::from_bytes(&fact.signature),
    )
    .map_err(|_| ProtocolError::BadSignature)
}

/// How facts by one author are checked.
#[derive(Clone, Copy)]
enum AuthorKey {
    /// A prime-order key: batch verification decides like `verify_strict`.
    Batch(VerifyingKey),
    /// A key with a small-order component: check each fact with `verify_strict`.
    Strict,
    /// Not a point, or of small order: `verify_strict` refuses every signature.
    Invalid,
}

fn classify_author(bytes: &[u8; 32]) -> AuthorKey {
    match VerifyingKey::from_bytes(bytes) {
        Err(_) => AuthorKey::Invalid,
        Ok(vk) if vk.is_weak() => AuthorKey::Invalid,
        Ok(vk) if vk.to_edwards().is_torsion_free() => AuthorKey::Batch(vk),
        Ok(_) => AuthorKey::Strict,
    }
}

/// Author keys already classified (classifying costs a scalar multiplication).
#[derive(Default)]
pub(crate) struct KeyCache(HashMap<[u8; 32], AuthorKey>);

impl KeyCache {
    fn get(&mut self, author: [u8; 32]) -> AuthorKey {
        *self
            .0
            .entry(author)
            .or_insert_with(|| classify_author(&author))
    }
}

/// y-coordinates (little-endian, sign bit clear) of the eight small-order
/// points: 0 (order 4), 1 (order 1), two of order 8, p − 1 (order 2).
pub(crate) const SMALL_ORDER_Y: [[u8; 32]; 5] = [
    [0; 32],
    [
        1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0,
    ],
    [
        0x26, 0xe8, 0x95, 0x8f, 0xc2, 0xb2, 0x27, 0xb0, 0x45, 0xc3, 0xf4, 0x89, 0xf2, 0xef, 0x98,
        0xf0, 0xd5, 0xdf, 0xac, 0x05, 0xd3, 0xc6, 0x33, 0x39, 0xb1, 0x38, 0x02, 0x88, 0x6d, 0x53,
        0xfc, 0x05,
    ],
    [
        0xc7, 0x17, 0x6a, 0x70, 0x3d, 0x4d, 0xd8, 0x4f, 0xba, 0x3c, 0x0b, 0x76, 0x0d, 0x10, 0x67,
        0x0f, 0x2a, 0x20, 0x53, 0xfa, 0x2c, 0x39, 0xcc, 0xc6, 0x4e, 0xc7, 0xfd, 0x77, 0x92, 0xac,
        0x03, 0x7a,
    ],
    [
        0xec, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0x7f,
    ],
];

/// p = 2^255 − 19, little-endian.
const FIELD_P: [u8; 32] = {
    let mut p = [0xff; 32];
    p[0] = 0xed;
    p[31] = 0x7f;
    p
};

/// The conditions `verify_strict` puts on a signature's `R` that batch
/// verification does not: a canonical encoding (y < p) and not of small order.
fn r_is_strict(signature: &[u8; 64]) -> bool {
    let mut y = [0u8; 32];
    y.copy_from_slice(&signature[..32]);
    y[31] &= 0x7f;
    let canonical = y.iter().rev().cmp(FIELD_P.iter().rev()) == std::cmp::Ordering::Less;
    canonical && !SMALL_ORDER_Y.contains(&y)
}

/// Decode, validate and signature-check `items` on this thread, with author
/// keys cached in `keys`: one result per fact, or (with `stop`) results up
/// to and including the first bad fact.
pub(crate) fn check_chunk<B: AsRef<[u8]>>(
    items: &[B],
    stop: bool,
    keys: &mut KeyCache,
) -> Vec<Result<SignedFact, ProtocolError>> {
    check_chunk_with(items, stop, keys, Bound::Check)
}

/// [`check_chunk`], with the time bound applied or left to the caller.
fn check_chunk_with<B: AsRef<[u8]>>(
    items: &[B],
    stop: bool,
    keys: &mut KeyCache,
    bound: Bound,
) -> Vec<Result<SignedFact, ProtocolError>> {
    let strict_only = items.len() < BATCH_MIN;
    let mut out: Vec<Result<SignedFact, ProtocolError>> = Vec::with_capacity(items.len());
    // The facts in the batch equation: their index in `out`, message, key.
    let mut at: Vec<usize> = Vec::with_capacity(items.len());
    let mut msgs: Vec<Vec<u8>> = Vec::with_capacity(items.len());
    let mut sigs: Vec<Signature> = Vec::with_capacity(items.len());
    let mut vks: Vec<VerifyingKey> = Vec::with_capacity(items.len());
    for bytes in items {
        let checked = decode_valid_with(bytes.as_ref(), bound).and_then(|fact| {
            let ok = match keys.get(fact.fact.author().0) {
                AuthorKey::Invalid => false,
                AuthorKey::Strict => check_strict(&fact).is_ok(),
                AuthorKey::Batch(_) if strict_only => check_strict(&fact).is_ok(),
                AuthorKey::Batch(vk) => {
                    let ok = r_is_strict(&fact.signature);
                    if ok {
                        at.push(out.len());
                        msgs.push(signing_bytes(&fact.fact));
                        sigs.push(Signature::from_bytes(&fact.signature));
                        vks.push(vk);
                    }
                    ok
                }
            };
            if ok {
                Ok(fact)
            } else {
                Err(ProtocolError::BadSignature)
            }
        });
        let bad = checked.is_err();
        out.push(checked);
        if bad && stop {
            break;
        }
    }
    let batch: Vec<&[u8]> = msgs.iter().map(Vec::as_slice).collect();
    if !batch.is_empty() && !batch_equation_holds(&batch, &sigs, &vks) {
        // Find the bad ones, one by one.
        for j in 0..batch.len() {
            if vks[j].verify_strict(batch[j], &sigs[j]).is_err() {
                out[at[j]] = Err(ProtocolError::BadSignature);
                if stop {
                    out.truncate(at[j] + 1);
                    break;
                }
            }
        }
    }
    out
}

/// The batch equation of `ed25519_dalek::verify_batch` for signature
/// `sigs[i]` of `msgs[i]` by `keys[i]`:
///
/// `−(Σ zᵢ·sᵢ)·B + Σ zᵢ·Rᵢ + Σ (zᵢ·kᵢ)·Aᵢ = 0`, with `kᵢ = H(Rᵢ ‖ Aᵢ ‖ Mᵢ)`
///
/// (cofactorless; every `sᵢ` canonical, every `Rᵢ` a point), where the
/// 128-bit randomizers `zᵢ` are derived from every `kᵢ` and `sᵢ` of the
/// batch, as ed25519-dalek derives them (there through a Merlin transcript,
/// here through BLAKE3's key derivation and output stream): no signer can
/// know them before its signatures are fixed. The one change is how the
/// point is computed: the `Aᵢ` terms of one key are one term,
/// `(Σ zᵢ·kᵢ)·A` — the same point, from a multiscalar multiplication of
/// `1 + n + keys` points instead of `1 + 2n`.
///
/// The three slices have one entry per signature (the caller's
/// invariant: it builds them together).
fn batch_equation_holds(msgs: &[&[u8]], sigs: &[Signature], keys: &[VerifyingKey]) -> bool {
    debug_assert!(msgs.len() == sigs.len() && sigs.len() == keys.len());
    let hrams: Vec<[u8; 64]> = sigs
        .iter()
        .zip(keys)
        .zip(msgs)
        .map(|((sig, key), m)| {
            Sha512::new()
                .chain_update(sig.r_bytes())
                .chain_update(key.as_bytes())
                .chain_update(m)
                .finalize()
                .into()
        })
        .collect();
    let mut transcript = blake3::Hasher::new_derive_key("amos 2026-12 ed25519 batch randomizers");
    transcript.update(&(sigs.len() as u64).to_le_bytes());
    for h in &hrams {
        transcript.update(h);
    }
    for sig in sigs {
        transcript.update(sig.s_bytes());
    }
    let mut randomizers = transcript.finalize_xof();
    let mut b_coefficient = Scalar::ZERO;
    let mut zs = Vec::with_capacity(sigs.len());
    let mut rs = Vec::with_capacity(sigs.len());
    // One (A, Σ zᵢ·kᵢ) per key (their order does not change the sum).
    let mut key_terms: HashMap<[u8; 32], (EdwardsPoint, Scalar)> = HashMap::new();
    for ((sig, key), hram) in sigs.iter().zip(keys).zip(&hrams) {
        let Some(s) = Option::<Scalar>::from(Scalar::from_canonical_bytes(*sig.s_bytes())) else {
            return false;
        };
        let Some(r) = CompressedEdwardsY(*sig.r_bytes()).decompress() else {
            return false;
        };
        let mut z = [0u8; 16];
        randomizers.fill(&mut z);
        let z = Scalar::from(u128::from_le_bytes(z));
        b_coefficient += z * s;
        let zk = z * Scalar::from_bytes_mod_order_wide(hram);
        key_terms
            .entry(*key.as_bytes())
            .or_insert_with(|| (key.to_edwards(), Scalar::ZERO))
            .1 += zk;
        zs.push(z);
        rs.push(r);
    }
    let scalars = std::iter::once(-b_coefficient)
        .chain(zs)
        .chain(key_terms.values().map(|(_, c)| *c));
    let points = std::iter::once(ED25519_BASEPOINT_POINT)
        .chain(rs)
        .chain(key_terms.values().map(|(a, _)| *a));
    EdwardsPoint::vartime_multiscalar_mul(scalars, points).is_identity()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AgentFact, AgentId, Fact, FactBody, Hlc, NodeId, NodeIdentity, TeamFact, TeamId};
    use proptest::prelude::*;

    fn ident(seed: u8) -> NodeIdentity {
        NodeIdentity::from_secret([seed; 32])
    }

    fn agent_fact(id: &NodeIdentity, i: usize) -> Vec<u8> {
        id.sign(Fact {
            clock: Hlc {
                wall_ms: 1_000 + i as u64,
                logical: 0,
                node: id.node_id(),
            },
            body: FactBody::Agent(AgentFact {
                id: AgentId::parse(&format!("agent{i}")).unwrap(),
                kind: "test".into(),
                display_name: format!("agent{i}"),
                present: true,
            }),
        })
        .unwrap()
        .to_bytes()
    }

    /// `n` facts from three authors, interleaved.
    fn facts(n: usize) -> Vec<Vec<u8>> {
        let ids = [ident(1), ident(2), ident(3)];
        (0..n).map(|i| agent_fact(&ids[i % 3], i)).collect()
    }

    /// The batch equation's inputs for wire facts: messages, signatures, keys.
    fn equation_terms(facts: &[Vec<u8>]) -> (Vec<Vec<u8>>, Vec<Signature>, Vec<VerifyingKey>) {
        let mut terms = (Vec::new(), Vec::new(), Vec::new());
        for bytes in facts {
            let f = SignedFact::decode_verified(bytes).unwrap();
            terms.0.push(signing_bytes(&f.fact));
            terms.1.push(Signature::from_bytes(&f.signature));
            terms
                .2
                .push(VerifyingKey::from_bytes(&f.fact.author().0).unwrap());
        }
        terms
    }

    /// `cargo test --release -p amos-protocol --lib bench_grouped -- --ignored --nocapture`:
    /// the batch equation of one author's 1,850 facts (half of a full sync
    /// batch, on one of two threads), ed25519-dalek's and the grouped one,
    /// medians of 15.
    #[test]
    #[ignore]
    fn bench_grouped_against_dalek() {
        let n = 1850;
        let facts: Vec<Vec<u8>> = (0..n).map(|i| agent_fact(&ident(1), i)).collect();
        let (msgs, sigs, keys) = equation_terms(&facts);
        let batch: Vec<&[u8]> = msgs.iter().map(Vec::as_slice).collect();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..15 {
            let t = std::time::Instant::now();
            assert!(ed25519_dalek::verify_batch(&batch, &sigs, &keys).is_ok());
            a.push(t.elapsed().as_secs_f64() * 1e3);
            let t = std::time::Instant::now();
            assert!(batch_equation_holds(&batch, &sigs, &keys));
            b.push(t.elapsed().as_secs_f64() * 1e3);
        }
        a.sort_by(f64::total_cmp);
        b.sort_by(f64::total_cmp);
        println!(
            "{{\"n\": {n}, \"dalek_ms\": {:.2}, \"grouped_ms\": {:.2}}}",
            a[7], b[7]
        );
    }

    fn flip_last(f: &mut [u8]) {
        let n = f.len();
        f[n - 1] ^= 1; // the last byte of the signature's s
    }

    #[test]
    fn batches_of_every_size_verify_in_order_and_name_the_first_bad_fact() {
        // Sizes on both sides of BATCH_MIN and PARALLEL_MIN.
        for n in [0, 1, 3, 4, 5, 100, PARALLEL_MIN, PARALLEL_MIN + 7, 1000] {
            let good = facts(n);
            let all = verify_all(&good).unwrap();
            assert_eq!(all.len(), n);
            for (v, bytes) in all.iter().zip(&good) {
                assert_eq!(&v.to_bytes(), bytes);
            }
            assert!(verify_each(&good).iter().all(Result::is_ok));
            if n == 0 {
                continue;
            }
            for bad_at in [0, n / 2, n - 1] {
                let mut bad = good.clone();
                flip_last(&mut bad[bad_at]);
                assert_eq!(
                    verify_all(&bad).unwrap_err(),
                    BatchError {
                        index: bad_at,
                        error: ProtocolError::BadSignature
                    },
                    "n = {n}"
                );
                let each = verify_each(&bad);
                assert_eq!(each.len(), n);
                for (i, r) in each.iter().enumerate() {
                    assert_eq!(r.is_err(), i == bad_at, "n = {n}, fact {i}");
                }
            }
        }
    }

    /// An agent fact by `id` with its clock past the bound, signed
    /// without the check [`NodeIdentity::sign`] makes.
    fn late_fact(id: &NodeIdentity) -> Vec<u8> {
        let fact = Fact {
            clock: Hlc {
                wall_ms: crate::MAX_TIME_MS + 1,
                logical: 0,
                node: id.node_id(),
            },
            body: FactBody::Agent(AgentFact {
                id: AgentId::parse("eve").unwrap(),
                kind: "test".into(),
                display_name: "eve".into(),
                present: true,
            }),
        };
        let signature = id.sign_raw(&signing_bytes(&fact));
        SignedFact { fact, signature }.to_bytes()
    }

    #[test]
    fn a_fact_past_the_time_bound_is_set_aside_and_the_rest_verifies() {
        for n in [0, 3, 10, PARALLEL_MIN + 7] {
            let mut batch = facts(n);
            batch.insert(n / 2, late_fact(&ident(4)));
            // Everywhere else, a fact past the bound fails the batch.
            assert!(matches!(
                verify_all(&batch).unwrap_err().error,
                ProtocolError::TimeOutOfBounds { what: "clock", .. }
            ));
            assert!(verify_one(&batch[n / 2]).is_err());
            let checked = verify_batch(&batch).unwrap();
            assert_eq!(checked.verified.len(), n, "n = {n}");
            assert_eq!(checked.out_of_bounds.len(), 1);
            assert_eq!(checked.out_of_bounds[0].0.to_bytes(), batch[n / 2]);
            assert!(matches!(
                checked.out_of_bounds[0].1,
                ProtocolError::TimeOutOfBounds { what: "clock", .. }
            ));
            // Set aside only with a good signature: forged, it fails the batch.
            let mut forged = batch.clone();
            flip_last(&mut forged[n / 2]);
            assert_eq!(
                verify_batch(&forged).unwrap_err(),
                BatchError {
                    index: n / 2,
                    error: ProtocolError::BadSignature
                }
            );
        }
    }

    #[test]
    fn two_bad_facts_name_the_first_and_each_names_both() {
        let mut bad = facts(600);
        flip_last(&mut bad[450]);
        bad[17].truncate(10); // no longer decodes
        let err = verify_all(&bad).unwrap_err();
        assert_eq!(err.index, 17);
        assert!(matches!(err.error, ProtocolError::Decode { .. }), "{err}");
        let each = verify_each(&bad);
        let errs: Vec<usize> = (0..600).filter(|i| each[*i].is_err()).collect();
        assert_eq!(errs, [17, 450]);
    }

    #[test]
    fn one_fact_is_exactly_verify_strict() {
        let good = facts(1).remove(0);
        assert!(verify_one(&good).is_ok());
        let mut bad = good.clone();
        flip_last(&mut bad);
        assert_eq!(verify_one(&bad), Err(ProtocolError::BadSignature));
        assert!(verify_one(&good[..good.len() - 1]).is_err());
    }

    /// A team fact claiming `author`, signed by someone else.
    fn forged_by(author: [u8; 32]) -> Vec<u8> {
        let fact = Fact {
            clock: Hlc {
                wall_ms: 1,
                logical: 0,
                node: NodeId(author),
            },
            body: FactBody::Team(TeamFact {
                id: TeamId::parse("x").unwrap(),
                origin: NodeId(author),
                name: String::new(),
                present: true,
            }),
        };
        SignedFact {
            signature: ident(1).sign_raw(&signing_bytes(&fact)),
            fact,
        }
        .to_bytes()
    }

    #[test]
    fn facts_by_small_order_or_mixed_order_keys_follow_verify_strict() {
        // A key with a small-order component: classified for one-by-one checks.
        let honest = VerifyingKey::from_bytes(&ident(1).node_id().0).unwrap();
        let torsion = VerifyingKey::from_bytes(&SMALL_ORDER_Y[2]).unwrap();
        let mixed = VerifyingKey::from(honest.to_edwards() + torsion.to_edwards());
        assert!(matches!(
            classify_author(&honest.to_bytes()),
            AuthorKey::Batch(_)
        ));
        assert!(matches!(
            classify_author(&mixed.to_bytes()),
            AuthorKey::Strict
        ));
        assert!(matches!(
            classify_author(&SMALL_ORDER_Y[1]),
            AuthorKey::Invalid
        ));
        let mut not_a_point = [0u8; 32];
        not_a_point[0] = 2;
        assert!(VerifyingKey::from_bytes(&not_a_point).is_err());
        assert!(matches!(classify_author(&not_a_point), AuthorKey::Invalid));
        // Facts claiming those authors, signed by someone else, are refused,
        // in small batches and large ones.
        for author in [mixed.to_bytes(), SMALL_ORDER_Y[1], not_a_point] {
            for n in [1, 10, PARALLEL_MIN + 1] {
                let mut batch = facts(n);
                batch[n / 2] = forged_by(author);
                let err = verify_all(&batch).unwrap_err();
                assert_eq!(err.index, n / 2);
                assert_eq!(err.error, ProtocolError::BadSignature);
            }
        }
    }

    #[test]
    fn small_order_table_is_complete_and_r_checks_match_verify_strict() {
        let mut points = std::collections::BTreeSet::new();
        for y in SMALL_ORDER_Y {
            for sign in [0u8, 0x80] {
                let mut b = y;
                b[31] |= sign;
                if let Ok(vk) = VerifyingKey::from_bytes(&b) {
                    assert!(vk.is_weak());
                    points.insert(vk.to_edwards().compress().to_bytes());
                    let mut sig = [0u8; 64];
                    sig[..32].copy_from_slice(&b);
                    assert!(!r_is_strict(&sig));
                }
            }
        }
        // There are exactly 8 points of small order on edwards25519.
        assert_eq!(points.len(), 8);
        // Honest signatures pass; non-canonical y (≥ p) does not.
        let id = ident(4);
        for i in 0..50 {
            let sig = id.sign_raw(&i.to_string().into_bytes());
            assert!(r_is_strict(&sig));
        }
        let mut sig = [0u8; 64];
        sig[..32].copy_from_slice(&FIELD_P);
        assert!(!r_is_strict(&sig));
        sig[0] = 0xef; // p + 2
        assert!(!r_is_strict(&sig));
        sig[0] = 0xeb; // p - 2: canonical
        assert!(r_is_strict(&sig));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// The verifier accepts exactly the facts whose bytes are untouched:
        /// flip any one byte of any one fact of a batch (small or large),
        /// and that fact — and only that one — is refused.
        #[test]
        fn accepts_exactly_the_untouched_facts(
            n in prop_oneof![1usize..BATCH_MIN + 2, PARALLEL_MIN..PARALLEL_MIN + 40],
            which in any::<prop::sample::Index>(),
            pos in any::<prop::sample::Index>(),
            flip in 1u8..=255,
        ) {
            let good = facts(n);
            prop_assert_eq!(verify_all(&good).map(|v| v.len()), Ok(n));
            let i = which.index(n);
            let mut bad = good.clone();
            let p = pos.index(bad[i].len());
            bad[i][p] ^= flip;
            let each = verify_each(&bad);
            for (j, r) in each.iter().enumerate() {
                prop_assert_eq!(r.is_ok(), j != i, "fact {} (byte {} of fact {} flipped)", j, p, i);
                if let Ok(v) = r {
                    prop_assert_eq!(&v.to_bytes(), &good[j]);
                }
            }
            prop_assert_eq!(verify_all(&bad).map_err(|e| e.index), Err(i));
        }

        /// The batch equation with one term per key decides as
        /// ed25519-dalek's `verify_batch`: batches by one to three authors
        /// in any mix, untouched, or with one signature's message, `R`, `s`
        /// or key changed.
        #[test]
        fn the_grouped_equation_decides_as_dalek_verify_batch(
            n in 1usize..40,
            authors in 1u8..4,
            which in any::<prop::sample::Index>(),
            what in 0u8..5,
            pos in 0usize..32,
            flip in 1u8..=255,
        ) {
            let ids: Vec<NodeIdentity> = (1..=authors).map(ident).collect();
            let facts: Vec<Vec<u8>> =
                (0..n).map(|i| agent_fact(&ids[(i * 7 + i / 3) % ids.len()], i)).collect();
            let (mut msgs, mut sigs, mut keys) = equation_terms(&facts);
            let i = which.index(n);
            match what {
                0 => {}
                1 => {
                    let at = pos % msgs[i].len();
                    msgs[i][at] ^= flip;
                }
                2 | 3 => {
                    let mut b = sigs[i].to_bytes();
                    b[pos + if what == 2 { 0 } else { 32 }] ^= flip;
                    sigs[i] = Signature::from_bytes(&b);
                }
                _ => keys[i] = VerifyingKey::from_bytes(&ident(9).node_id().0).unwrap(),
            }
            let batch: Vec<&[u8]> = msgs.iter().map(Vec::as_slice).collect();
            let dalek = ed25519_dalek::verify_batch(&batch, &sigs, &keys).is_ok();
            prop_assert_eq!(batch_equation_holds(&batch, &sigs, &keys), dalek);
            prop_assert_eq!(dalek, what == 0);
        }

        /// Arbitrary bytes, split into a batch, never panic and never verify.
        #[test]
        fn arbitrary_batches_never_verify(
            batch in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..200), 0..12),
        ) {
            let each = verify_each(&batch);
            prop_assert_eq!(each.len(), batch.len());
            prop_assert!(each.iter().all(Result::is_err));
            prop_assert_eq!(verify_all(&batch).is_ok(), batch.is_empty());
        }
    }
}
