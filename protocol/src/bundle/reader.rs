//! Reading a bundle, in two passes over the same bytes so that memory stays
//! at a few frames whatever the size: [`verify_bundle`] checks everything
//! and keeps a hash of each frame ([`VerifiedBundle`]); [`read_verified`]
//! reads the bytes again and hands each frame's facts to the caller as
//! [`Verified`] facts, refusing any frame that changed in between.
//!
//! Invariant: no fact reaches the caller before its bundle verified
//! completely (header, every frame's tag and contents, every fact's
//! signature, the trailer's signature and counts, nothing after it), and
//! every frame handed over hashes to what pass 1 verified.
//!
//! Boundary: reads only from the `Read` values it is given; a length is
//! checked against its limit before anything is allocated for it.

use std::io::{self, Read};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex};

use super::fact_check::{FirstProblem, Job, JobResult, run_job, worker, worker_count};
use super::format::{
    BundleTrailer, FORMAT_VERSION, MAGIC, MAX_FRAME_BYTES, MAX_HEADER_BYTES, MAX_TRAILER_BYTES,
    OLD_VERSIONS, PAIRING_FORMAT_VERSION, PREFIX_LEN, SEALED_FORMAT_VERSION, SealedExt,
    UNCOMPRESSED_FORMAT_VERSION, UNCOMPRESSED_PAIRING_FORMAT_VERSION, decompress_frame,
    frame_items,
};
use super::seal::{check_trailer, open_cipher, open_frame};
use super::{
    BundleError, BundleHeader, BundleSummary, OpenWith, PairingProof, Postmark, ReadError,
    Recipient, codec_reason, decode_err,
};
use crate::codec::{self, WireFact};
use crate::mesh::MeshKey;
use crate::verify::KeyCache;
use crate::{NodeId, SignedFact, Verified};

/// Below this many facts a frame is verified on the calling thread.
const PARALLEL_MIN_FACTS: usize = 256;

struct Input<R> {
    r: R,
    hasher: blake3::Hasher,
    hashing: bool,
    bytes: u64,
}

fn eof_is_truncated(e: io::Error) -> BundleError {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        BundleError::Truncated
    } else {
        BundleError::Io(e)
    }
}

impl<R: Read> Input<R> {
    fn new(r: R) -> Self {
        Input {
            r,
            hasher: blake3::Hasher::new(),
            hashing: true,
            bytes: 0,
        }
    }

    fn account(&mut self, bytes: &[u8]) {
        if self.hashing {
            self.hasher.update(bytes);
        }
        self.bytes += bytes.len() as u64;
    }

    /// Read up to `buf.len()` bytes; returns how many (fewer only at end of input).
    fn read_some(&mut self, buf: &mut [u8]) -> Result<usize, BundleError> {
        let mut got = 0;
        while got < buf.len() {
            match self.r.read(&mut buf[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.account(&buf[..got]);
        Ok(got)
    }

    fn exact(&mut self, buf: &mut [u8]) -> Result<(), BundleError> {
        self.r.read_exact(buf).map_err(eof_is_truncated)?;
        self.account(buf);
        Ok(())
    }

    fn u32(&mut self) -> Result<u32, BundleError> {
        let mut b = [0u8; 4];
        self.exact(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Read exactly `len` bytes, growing the buffer as data arrives (so a
    /// lying length on a short input does not allocate the full claim).
    fn vec(&mut self, len: usize) -> Result<Vec<u8>, BundleError> {
        let mut v = Vec::with_capacity(len.min(4 << 20));
        (&mut self.r)
            .take(len as u64)
            .read_to_end(&mut v)
            .map_err(eof_is_truncated)?;
        if v.len() != len {
            return Err(BundleError::Truncated);
        }
        self.account(&v);
        Ok(v)
    }

    fn at_end(&mut self) -> Result<bool, BundleError> {
        let mut b = [0u8; 1];
        Ok(self.read_some(&mut b)? == 0)
    }
}

/// A bundle's header as read.
struct ReadHeader {
    header: BundleHeader,
    /// The pairing proof it may carry (format 4 and 6).
    pairing: Option<PairingProof>,
    /// BLAKE3 of the header bytes (prefix, header body and proof).
    hash: [u8; 32],
    /// Whether frames are compressed (format 5, 6 and 7).
    compressed: bool,
    /// The ephemeral key of a sealed bundle (format 7).
    sealed: Option<[u8; 32]>,
    /// The postmark a sealed mailbox bundle carries.
    postmark: Option<Postmark>,
}

fn read_header<R: Read>(input: &mut Input<R>) -> Result<ReadHeader, BundleError> {
    let mut prefix = [0u8; PREFIX_LEN];
    let got = input.read_some(&mut prefix[..8])?;
    if got == 0 || prefix[..got] != MAGIC[..got] {
        return Err(BundleError::NotABundle);
    }
    if got < 8 {
        return Err(BundleError::Truncated);
    }
    input.exact(&mut prefix[8..10])?;
    let version = u16::from_le_bytes([prefix[8], prefix[9]]);
    if OLD_VERSIONS.contains(&version) {
        return Err(BundleError::OldVersion(version));
    }
    let (compressed, proof, sealed) = match version {
        FORMAT_VERSION => (true, false, false),
        PAIRING_FORMAT_VERSION => (true, true, false),
        SEALED_FORMAT_VERSION => (true, false, true),
        UNCOMPRESSED_FORMAT_VERSION => (false, false, false),
        UNCOMPRESSED_PAIRING_FORMAT_VERSION => (false, true, false),
        _ => return Err(BundleError::UnsupportedVersion(version)),
    };
    input.exact(&mut prefix[10..14])?;
    let len = u32::from_le_bytes([prefix[10], prefix[11], prefix[12], prefix[13]]);
    if len > MAX_HEADER_BYTES {
        return Err(BundleError::TooLarge {
            what: "header",
            size: len.into(),
            limit: MAX_HEADER_BYTES.into(),
        });
    }
    let body = input.vec(len as usize)?;
    let undecodable = |e| decode_err("header", codec_reason(e));
    let (header, pairing, ext) = if sealed {
        let (h, ext): (BundleHeader, SealedExt) =
            codec::decode_canonical("bundle header", &body).map_err(undecodable)?;
        (h, ext.pairing, Some(ext))
    } else if proof {
        let (h, p): (BundleHeader, PairingProof) =
            codec::decode_canonical("bundle header", &body).map_err(undecodable)?;
        (h, Some(p), None)
    } else {
        let h: BundleHeader =
            codec::decode_canonical("bundle header", &body).map_err(undecodable)?;
        (h, None, None)
    };
    if !header.encrypted && header.key_check != [0; 16] {
        return Err(decode_err(
            "header",
            "an unencrypted bundle must have a zero key check",
        ));
    }
    if sealed && (!header.encrypted || header.recipient == Recipient::AnyPeer) {
        return Err(decode_err(
            "header",
            "a sealed bundle must be encrypted and addressed to one node",
        ));
    }
    let mut h = blake3::Hasher::new();
    h.update(&prefix);
    h.update(&body);
    Ok(ReadHeader {
        header,
        pairing,
        hash: *h.finalize().as_bytes(),
        compressed,
        sealed: ext.as_ref().map(|e| e.ephemeral),
        postmark: ext.and_then(|e| e.postmark),
    })
}

fn read_frame_len<R: Read>(input: &mut Input<R>) -> Result<u32, BundleError> {
    let len = input.u32()?;
    if len > MAX_FRAME_BYTES {
        return Err(BundleError::TooLarge {
            what: "frame",
            size: len.into(),
            limit: MAX_FRAME_BYTES.into(),
        });
    }
    Ok(len)
}

fn read_trailer<R: Read>(input: &mut Input<R>) -> Result<(BundleTrailer, Vec<u8>), BundleError> {
    input.hashing = false;
    let len = input.u32()?;
    if len > MAX_TRAILER_BYTES {
        return Err(BundleError::TooLarge {
            what: "trailer",
            size: len.into(),
            limit: MAX_TRAILER_BYTES.into(),
        });
    }
    let body = input.vec(len as usize)?;
    let trailer: BundleTrailer = codec::decode_canonical("bundle trailer", &body)
        .map_err(|e| decode_err("trailer", codec_reason(e)))?;
    Ok((trailer, body))
}

/// Proof that a bundle's bytes verified completely (pass 1). Only
/// [`verify_bundle`] makes one; [`read_verified`] needs it.
#[derive(Clone)]
pub struct VerifiedBundle {
    header: BundleHeader,
    pairing: Option<PairingProof>,
    sealed: bool,
    postmark: Option<Postmark>,
    summary: BundleSummary,
    header_hash: [u8; 32],
    content_hash: [u8; 32],
    frame_hashes: Vec<[u8; 32]>,
    trailer: Vec<u8>,
}

impl std::fmt::Debug for VerifiedBundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifiedBundle")
            .field("header", &self.header)
            .field("summary", &self.summary)
            .field("content_hash", &blake3::Hash::from(self.content_hash))
            .finish_non_exhaustive()
    }
}

impl VerifiedBundle {
    /// The bundle's header, as its sender signed it.
    pub fn header(&self) -> &BundleHeader {
        &self.header
    }

    /// The node that made and signed the bundle.
    pub fn sender(&self) -> NodeId {
        self.header.sender
    }

    /// Who the sender made the bundle for (covered by the verified signature).
    pub fn recipient(&self) -> Recipient {
        self.header.recipient
    }

    /// The sender's pairing proof, if this is a joiner's first bundle
    /// (covered by the verified signature).
    pub fn pairing(&self) -> Option<PairingProof> {
        self.pairing
    }

    /// Whether the bundle was sealed to its recipient (format 7).
    pub fn sealed(&self) -> bool {
        self.sealed
    }

    /// A mailbox bundle's postmark (covered by the verified signature).
    pub fn postmark(&self) -> Option<Postmark> {
        self.postmark
    }

    /// Frames, facts and bytes of the verified file.
    pub fn summary(&self) -> BundleSummary {
        self.summary
    }

    /// BLAKE3 of everything the trailer signs: a stable identity for the
    /// bundle (e.g. to report "already imported").
    pub fn content_hash(&self) -> [u8; 32] {
        self.content_hash
    }
}

/// Pass 1: verify everything (header, every frame's tag, every fact's
/// decoding, validation and signature, the trailer signature against
/// `header.sender`, the counts, and that nothing follows) without keeping
/// facts in memory.
///
/// Errors come in reading order, except that a frame whose contents do not
/// decompress or decode or hold a bad fact is reported only after the trailer has been
/// checked: if the bundle signature fails, the file was damaged
/// ([`BundleError::BadSignature`]; likely for an unencrypted bundle, where no
/// tag protects the frames); if it holds, the sender really shipped the bad
/// fact ([`BundleError::BadFactSignature`], [`BundleError::BadFact`]), and
/// the first one in reading order is named.
pub fn verify_bundle<R: Read>(r: R, key: Option<&MeshKey>) -> Result<VerifiedBundle, BundleError> {
    verify_bundle_with(
        r,
        OpenWith {
            mesh: key,
            identity: None,
        },
    )
}

/// What a bundle's header says, read without verifying anything else:
/// [`peek_header`]'s answer. Nothing in it is authenticated; use it only to
/// choose which files to verify (a mailbox's scan), never to act on.
#[derive(Clone, Debug)]
pub struct BundleInfo {
    /// The header as written.
    pub header: BundleHeader,
    /// Whether it is sealed (format 7).
    pub sealed: bool,
    /// The postmark a sealed mailbox bundle carries.
    pub postmark: Option<Postmark>,
}

/// Read and check a bundle's header only (magic, version, canonical
/// encoding), none of its frames or its signature: who says it sent it and
/// to whom. **Unauthenticated**: [`verify_bundle_with`] is what proves it.
pub fn peek_header<R: Read>(r: R) -> Result<BundleInfo, BundleError> {
    let h = read_header(&mut Input::new(r))?;
    Ok(BundleInfo {
        header: h.header,
        sealed: h.sealed.is_some(),
        postmark: h.postmark,
    })
}

/// [`verify_bundle`] with the keys a node holds: the mesh key for a bundle
/// encrypted under it, its identity for a bundle sealed to it. A sealed
/// bundle whose recipient is not `keys.identity` is refused with
/// [`BundleError::SealedTo`] before any frame is read.
pub fn verify_bundle_with<R: Read>(
    r: R,
    keys: OpenWith<'_>,
) -> Result<VerifiedBundle, BundleError> {
    let mut input = Input::new(r);
    let ReadHeader {
        header,
        pairing,
        hash: header_hash,
        compressed,
        sealed,
        postmark,
    } = read_header(&mut input)?;
    let cipher = open_cipher(&header, sealed.as_ref(), keys)?;

    // Frames are read, decrypted and split on this thread; their facts are
    // checked by a pool of workers (one per core) fed through a short queue,
    // so reading overlaps checking and memory stays at a few frames.
    let workers = worker_count();
    let (job_tx, job_rx) = mpsc::sync_channel::<Job>(workers);
    let (result_tx, result_rx) = mpsc::channel::<JobResult>();
    let cancel = AtomicBool::new(false);
    let mut problem = FirstProblem::default();
    let mut facts = 0u64;
    let mut frame_hashes: Vec<[u8; 32]> = Vec::new();
    let read: Result<(), BundleError> = std::thread::scope(|s| {
        // Only the workers hold the queue's receiver: if none is running,
        // sending fails and this thread does the work itself.
        let mut job_rx = Some(Arc::new(Mutex::new(job_rx)));
        let job_tx: SyncSender<Job> = job_tx;
        let result_tx: Sender<JobResult> = result_tx;
        let mut inline_keys = KeyCache::default();
        let mut read_frames = || -> Result<(), BundleError> {
            loop {
                while let Ok(r) = result_rx.try_recv() {
                    problem.offer_result(r, &mut facts);
                }
                let len = read_frame_len(&mut input)?;
                if len == 0 {
                    return Ok(());
                }
                let index = frame_hashes.len() as u64;
                let mut frame = input.vec(len as usize)?;
                frame_hashes.push(*blake3::hash(&frame).as_bytes());
                if problem.0.is_some() {
                    continue; // only the content hash matters now
                }
                open_frame(cipher.as_ref(), &header, &header_hash, index, &mut frame)?;
                // Bad compressed data, like a bad plaintext, is reported
                // after the trailer signature (see above).
                if compressed {
                    frame = match decompress_frame(&frame) {
                        Ok(plain) => plain,
                        Err(e) => {
                            problem.offer(index, 0, e);
                            continue;
                        }
                    };
                }
                let items = match frame_items(&frame) {
                    Ok(items) => items,
                    Err(e) => {
                        problem.offer(index, 0, e);
                        continue;
                    }
                };
                let n = items.len();
                let (plain, items) = (Arc::new(frame), Arc::new(items));
                let parts = if n < PARALLEL_MIN_FACTS || workers < 2 {
                    1
                } else {
                    workers
                };
                if parts > 1
                    && let Some(rx) = job_rx.take()
                {
                    for _ in 0..workers {
                        let (rx, tx, cancel) = (Arc::clone(&rx), result_tx.clone(), &cancel);
                        // A thread that cannot be had leaves its share to
                        // the others (or to this thread, below).
                        let _ = std::thread::Builder::new()
                            .name("amos-bundle-verify".into())
                            .spawn_scoped(s, move || worker(&rx, tx, cancel));
                    }
                }
                let per = n.div_ceil(parts);
                for start in (0..n).step_by(per) {
                    let job = Job {
                        frame: index,
                        plain: Arc::clone(&plain),
                        items: Arc::clone(&items),
                        start,
                        end: (start + per).min(n),
                    };
                    let job = if parts > 1 {
                        match job_tx.send(job) {
                            Ok(()) => continue,
                            Err(mpsc::SendError(job)) => job, // no worker left
                        }
                    } else {
                        job
                    };
                    problem.offer_result(run_job(&job, &mut inline_keys), &mut facts);
                }
            }
        };
        let read = read_frames();
        if read.is_err() {
            cancel.store(true, Ordering::Relaxed);
        }
        // Closing the queue lets the workers finish; the scope waits for them.
        drop(job_tx);
        drop(result_tx);
        read
    });
    for r in result_rx.try_iter() {
        problem.offer_result(r, &mut facts);
    }
    read?;
    let problem = problem.0.map(|(_, _, e)| e);
    let content_hash = *input.hasher.finalize().as_bytes();
    let (trailer, trailer_bytes) = read_trailer(&mut input)?;
    check_trailer(
        &header.sender,
        &content_hash,
        trailer.frames,
        trailer.facts,
        &trailer.signature,
    )?;
    if let Some(p) = problem {
        return Err(p);
    }
    if trailer.frames != frame_hashes.len() as u64 || trailer.facts != facts {
        return Err(BundleError::Tampered);
    }
    if !input.at_end()? {
        return Err(BundleError::TrailingBytes);
    }
    let summary = BundleSummary {
        frames: trailer.frames,
        facts,
        bytes: input.bytes,
    };
    Ok(VerifiedBundle {
        pairing,
        sealed: sealed.is_some(),
        postmark,
        header,
        summary,
        header_hash,
        content_hash,
        frame_hashes,
        trailer: trailer_bytes,
    })
}

/// Pass 2: read the bytes [`verify_bundle`] accepted again and hand each
/// frame's facts, in order, to `apply`. Every frame must hash to what pass 1
/// recorded (signatures are not checked again); a frame that differs is
/// refused with [`BundleError::Tampered`] before it (or the frame before it)
/// is applied, and so is a different header, frame count, trailer or
/// anything after the trailer (those after every frame was applied). An
/// error from `apply` stops the read ([`ReadError::Apply`]).
///
/// The next frame is decrypted, decompressed and decoded on a helper thread
/// while `apply` runs, so `apply` need not be `Send`.
pub fn read_verified<R: Read, E>(
    r: R,
    key: Option<&MeshKey>,
    verified: &VerifiedBundle,
    apply: impl FnMut(Vec<Verified<SignedFact>>) -> Result<(), E>,
) -> Result<BundleSummary, ReadError<E>> {
    read_verified_with(
        r,
        OpenWith {
            mesh: key,
            identity: None,
        },
        verified,
        apply,
    )
}

/// [`read_verified`] with the keys a node holds (see [`verify_bundle_with`]).
pub fn read_verified_with<R: Read, E>(
    r: R,
    keys: OpenWith<'_>,
    verified: &VerifiedBundle,
    mut apply: impl FnMut(Vec<Verified<SignedFact>>) -> Result<(), E>,
) -> Result<BundleSummary, ReadError<E>> {
    let mut input = Input::new(r);
    let ReadHeader {
        header,
        hash: header_hash,
        compressed,
        sealed,
        ..
    } = read_header(&mut input)?;
    if header_hash != verified.header_hash {
        return Err(BundleError::Tampered.into());
    }
    let cipher = open_cipher(&header, sealed.as_ref(), keys)?;
    let open = |frame_no: u64, mut frame: Vec<u8>| -> Opened {
        open_frame(cipher.as_ref(), &header, &header_hash, frame_no, &mut frame)?;
        if compressed {
            frame = decompress_frame(&frame)?;
        }
        decode_checked_frame(frame_no, &frame)
    };
    let stopped = || BundleError::Io(io::Error::other("bundle frame decoder stopped"));

    // This thread reads and hash-checks frames; a helper decrypts and decodes
    // frame k + 1 while `apply` works on frame k. Frame k is applied only
    // after frame k + 1 passed its hash check.
    std::thread::scope(|s| {
        let open = &open;
        let mut ahead: Option<(SyncSender<RawFrame>, Receiver<Opened>)> = None;
        let (raw_tx, raw_rx) = mpsc::sync_channel::<RawFrame>(1);
        let (opened_tx, opened_rx) = mpsc::sync_channel::<Opened>(1);
        let helper = std::thread::Builder::new()
            .name("amos-bundle-read".into())
            .spawn_scoped(s, move || {
                for (frame_no, frame) in raw_rx {
                    if opened_tx.send(open(frame_no, frame)).is_err() {
                        break;
                    }
                }
            });
        if helper.is_ok() {
            ahead = Some((raw_tx, opened_rx));
        }
        let mut read_all = || -> Result<(), ReadError<E>> {
            let mut index = 0usize;
            let mut in_flight = 0usize;
            loop {
                let len = read_frame_len(&mut input)?;
                if len == 0 {
                    break;
                }
                let expected = verified
                    .frame_hashes
                    .get(index)
                    .ok_or(BundleError::Tampered)?;
                let frame = input.vec(len as usize)?;
                if blake3::hash(&frame).as_bytes() != expected {
                    return Err(BundleError::Tampered.into());
                }
                let frame_no = index as u64;
                index += 1;
                match &ahead {
                    Some((tx, rx)) => {
                        tx.send((frame_no, frame)).map_err(|_| stopped())?;
                        in_flight += 1;
                        if in_flight > 1 {
                            apply(rx.recv().map_err(|_| stopped())??).map_err(ReadError::Apply)?;
                            in_flight -= 1;
                        }
                    }
                    None => apply(open(frame_no, frame)?).map_err(ReadError::Apply)?,
                }
            }
            if index != verified.frame_hashes.len() {
                return Err(BundleError::Tampered.into());
            }
            if let Some((_, rx)) = &ahead {
                for _ in 0..in_flight {
                    apply(rx.recv().map_err(|_| stopped())??).map_err(ReadError::Apply)?;
                }
            }
            Ok(())
        };
        let read = read_all();
        // Closing both channels ends the helper, whatever state it is in.
        drop(ahead);
        read
    })?;
    if *input.hasher.finalize().as_bytes() != verified.content_hash {
        return Err(BundleError::Tampered.into());
    }
    let (_, trailer) = read_trailer(&mut input)?;
    if trailer != verified.trailer {
        return Err(BundleError::Tampered.into());
    }
    if !input.at_end()? {
        return Err(BundleError::TrailingBytes.into());
    }
    Ok(verified.summary)
}

/// A frame's number and bytes as read, for pass 2's decoder.
type RawFrame = (u64, Vec<u8>);

/// A frame's facts, decrypted and decoded for pass 2.
type Opened = Result<Vec<Verified<SignedFact>>, BundleError>;

/// Decode a frame whose bytes pass 1 verified (same hash): its facts were
/// decoded, validated and signature-checked then, so they are wrapped as
/// [`Verified`] without checking again.
fn decode_checked_frame(frame_no: u64, plain: &[u8]) -> Opened {
    let items = frame_items(plain)?;
    let mut facts = Vec::with_capacity(items.len());
    for (i, range) in items.into_iter().enumerate() {
        let WireFact::V1(fact) =
            codec::decode::<WireFact>("fact", &plain[range]).map_err(|error| {
                BundleError::BadFact {
                    frame: frame_no,
                    index: i as u64,
                    error,
                }
            })?;
        facts.push(Verified::assume_verified(fact));
    }
    Ok(facts)
}

#[cfg(test)]
mod tests {
    use super::super::format::put_varint;
    use super::super::testkit::*;
    use super::*;
    use crate::bundle::BundleWriter;
    use proptest::prelude::*;
    use std::cell::Cell;

    #[test]
    fn round_trip_plain_and_encrypted() {
        let frames = sample_frames();
        for (format, key) in FORMATS
            .into_iter()
            .flat_map(|f| [(f, None), (f, Some(key()))])
        {
            let bytes = build_format(format, &ident(1), key.as_ref(), [7; 16], &frames);
            let version = match format {
                Format::Compressed => FORMAT_VERSION,
                Format::Uncompressed => UNCOMPRESSED_FORMAT_VERSION,
            };
            assert_eq!(bytes[8..10], version.to_le_bytes());
            let verified = verify_bundle(&bytes[..], key.as_ref()).unwrap();
            assert_eq!(
                verified.summary(),
                BundleSummary {
                    frames: 3,
                    facts: 6,
                    bytes: bytes.len() as u64
                }
            );
            let h = verified.header();
            assert_eq!(h.sender, ident(1).node_id());
            assert_eq!(h.created, clock(ident(1).node_id(), 5_000));
            assert_eq!(h.scopes, scopes());
            assert_eq!(h.encrypted, key.is_some());
            assert_eq!(import(&bytes, key.as_ref()).unwrap(), frames);
            // Verifying twice gives the same answer.
            let again = verify_bundle(&bytes[..], key.as_ref()).unwrap();
            assert_eq!(again.summary(), verified.summary());
            assert_eq!(again.content_hash(), verified.content_hash());
        }
    }

    #[test]
    fn non_canonical_and_empty_frames_are_refused() {
        let id = ident(1);
        let fact = team_fact(&id, 1);
        // count 1 written as a 3-byte varint: decodes, but is not canonical.
        let mut odd = vec![251, 1, 0];
        put_varint(&mut odd, fact.len() as u64);
        odd.extend_from_slice(&fact);
        for (plain, n) in [(odd, 1), (vec![0u8], 0), (vec![], 0)] {
            for (format, key) in FORMATS
                .into_iter()
                .flat_map(|f| [(f, None), (f, Some(key()))])
            {
                if plain.is_empty() && format == Format::Uncompressed && key.is_none() {
                    continue; // an empty frame there is the terminator
                }
                let mut w = writer(format, &id, Recipient::AnyPeer, key.as_ref(), [3; 16], None);
                w.write_plain(plain.clone(), n).unwrap();
                let (bytes, _) = w.finish().unwrap();
                let err = verify_bundle(&bytes[..], key.as_ref()).unwrap_err();
                assert!(
                    matches!(err, BundleError::Decode { what: "frame", .. }),
                    "{err}"
                );
            }
        }
    }

    #[test]
    fn every_single_bit_flip_is_refused_and_applies_nothing() {
        for (format, key) in FORMATS
            .into_iter()
            .flat_map(|f| [(f, None), (f, Some(key()))])
        {
            let key = key.as_ref();
            let bytes = sample_in(format, key);
            let l = layout(&bytes);
            let original = verify_bundle(&bytes[..], key).unwrap();
            for pos in 0..bytes.len() {
                let mut bad = bytes.clone();
                bad[pos] ^= 1 << (pos % 8);
                let err = verify_bundle(&bad[..], key).unwrap_err();
                // Pass 1 refusing means the whole flow applies nothing: there
                // is no VerifiedBundle to read with.
                // Pass 2 against the untouched file's proof stops before the
                // changed frame (and, reading one ahead, before the one
                // before it).
                let applied = Cell::new(0);
                let second = read_verified(&bad[..], key, &original, |_| {
                    applied.set(applied.get() + 1);
                    Ok::<(), ()>(())
                });
                assert!(second.is_err(), "pos {pos}");
                let frames_before = l.frames.iter().filter(|(_, end)| *end <= pos).count();
                let allowed = if pos < l.header_end { 0 } else { frames_before };
                assert!(applied.get() <= allowed, "pos {pos}");
                if pos >= l.trailer_len {
                    assert_eq!(applied.get(), l.frames.len(), "pos {pos}");
                }

                // The error names the region where it can.
                let region_ok = match pos {
                    0..8 => matches!(err, BundleError::NotABundle),
                    // Another version, or one that is valid (5 <-> 4, 3 <->
                    // 7...) but whose header or frames do not match.
                    8..10 => matches!(
                        err,
                        BundleError::UnsupportedVersion(_)
                            | BundleError::OldVersion(_)
                            | BundleError::Decode { what: "header", .. }
                    ),
                    _ if pos >= l.trailer_len => matches!(
                        err,
                        BundleError::BadSignature
                            | BundleError::Truncated
                            | BundleError::TooLarge { .. }
                            | BundleError::TrailingBytes
                            | BundleError::Decode { .. }
                            | BundleError::Tampered
                    ),
                    _ if key.is_some()
                        && l.frames.iter().any(|(s, e)| pos >= s + 4 && pos < *e) =>
                    {
                        matches!(err, BundleError::Tampered)
                    }
                    _ => true,
                };
                assert!(region_ok, "pos {pos}: {err}");
                assert!(!err.to_string().contains('\n'));
            }
        }
    }

    #[test]
    fn truncation_anywhere_is_refused() {
        for (format, key) in FORMATS
            .into_iter()
            .flat_map(|f| [(f, None), (f, Some(key()))])
        {
            let bytes = sample_in(format, key.as_ref());
            for n in 0..bytes.len() {
                let err = verify_bundle(&bytes[..n], key.as_ref()).unwrap_err();
                if n == 0 {
                    assert!(matches!(err, BundleError::NotABundle), "{n}: {err}");
                } else {
                    assert!(matches!(err, BundleError::Truncated), "{n}: {err}");
                }
            }
            let v = verify_bundle(&bytes[..], key.as_ref()).unwrap();
            for n in [0, 5, 20, bytes.len() / 2, bytes.len() - 1] {
                let r = read_verified(&bytes[..n], key.as_ref(), &v, |_| Ok::<(), ()>(()));
                assert!(r.is_err());
            }
        }
    }

    #[test]
    fn unknown_version_is_refused_before_reading_further() {
        // Version 8 is unknown today, as 7 (sealed) was to the release
        // before sealing: this line is what that release says of a sealed
        // bundle, changing nothing.
        let mut bytes = sample(Some(&key()));
        bytes[8..10].copy_from_slice(&8u16.to_le_bytes());
        let err = verify_bundle(&bytes[..], Some(&key())).unwrap_err();
        assert!(matches!(err, BundleError::UnsupportedVersion(8)));
        assert_eq!(err.to_string(), "bundle format version 8 is not supported");
        // Versions 1 and 2 named no recipient: refused, saying what to do.
        for old in [1u16, 2] {
            let mut short = MAGIC.to_vec();
            short.extend_from_slice(&old.to_le_bytes());
            let err = verify_bundle(&short[..], None).unwrap_err();
            assert!(matches!(err, BundleError::OldVersion(v) if v == old));
            assert!(err.to_string().contains("export it again"), "{err}");
        }
        // Nothing after the version is needed to say so.
        for v in [0u16, 8, 0x0300, u16::MAX] {
            let mut short = MAGIC.to_vec();
            short.extend_from_slice(&v.to_le_bytes());
            assert!(matches!(
                verify_bundle(&short[..], None),
                Err(BundleError::UnsupportedVersion(n)) if n == v
            ));
        }
    }

    #[test]
    fn oversized_lengths_are_refused_before_allocating() {
        let mut huge_header = MAGIC.to_vec();
        huge_header.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        huge_header.extend_from_slice(&(MAX_HEADER_BYTES + 1).to_le_bytes());
        assert!(matches!(
            verify_bundle(&huge_header[..], None),
            Err(BundleError::TooLarge { what: "header", .. })
        ));
        let bytes = sample(None);
        let l = layout(&bytes);
        let mut huge_frame = bytes[..l.header_end].to_vec();
        huge_frame.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            verify_bundle(&huge_frame[..], None),
            Err(BundleError::TooLarge { what: "frame", .. })
        ));
        // A frame claiming 16 MiB on a short input is merely truncated.
        let mut lying = bytes[..l.header_end].to_vec();
        lying.extend_from_slice(&MAX_FRAME_BYTES.to_le_bytes());
        lying.extend_from_slice(&[0; 100]);
        assert!(matches!(
            verify_bundle(&lying[..], None),
            Err(BundleError::Truncated)
        ));
    }

    #[test]
    fn trailing_bytes_are_refused() {
        for key in [None, Some(key())] {
            let mut bytes = sample(key.as_ref());
            let v = verify_bundle(&bytes[..], key.as_ref()).unwrap();
            bytes.push(0);
            assert!(matches!(
                verify_bundle(&bytes[..], key.as_ref()),
                Err(BundleError::TrailingBytes)
            ));
            let r = read_verified(&bytes[..], key.as_ref(), &v, |_| Ok::<(), ()>(()));
            assert!(matches!(
                r,
                Err(ReadError::Bundle(BundleError::TrailingBytes))
            ));
        }
    }

    #[test]
    fn a_file_changed_between_passes_is_refused_at_the_changed_frame() {
        let id = ident(1);
        let f = sample_frames();
        let a = build_with(&id, Some(&key()), [1; 16], &f);
        let mut g = f.clone();
        g[1] = vec![team_fact(&id, 99)];
        let c = build_with(&id, Some(&key()), [1; 16], &g); // a valid bundle in its own right
        verify_bundle(&c[..], Some(&key())).unwrap();
        let proof = verify_bundle(&a[..], Some(&key())).unwrap();
        let mut applied = Vec::new();
        let r = read_verified(&c[..], Some(&key()), &proof, |facts| {
            applied.push(facts.len());
            Ok::<(), ()>(())
        });
        assert!(matches!(r, Err(ReadError::Bundle(BundleError::Tampered))));
        assert!(
            applied.len() <= 1 && applied.iter().all(|n| *n == 2),
            "at most frame 0 (unchanged) was applied: {applied:?}"
        );
        // A proof for one bundle does not open another sender's.
        let other = build_with(&ident(9), Some(&key()), [1; 16], &f);
        let r = read_verified(&other[..], Some(&key()), &proof, |_| Ok::<(), ()>(()));
        assert!(matches!(r, Err(ReadError::Bundle(BundleError::Tampered))));
    }

    #[test]
    fn apply_errors_stop_the_read() {
        let bytes = sample(None);
        let v = verify_bundle(&bytes[..], None).unwrap();
        let mut calls = 0;
        let r = read_verified(&bytes[..], None, &v, |_| {
            calls += 1;
            if calls == 2 { Err("disk full") } else { Ok(()) }
        });
        assert!(matches!(r, Err(ReadError::Apply("disk full"))));
        assert_eq!(calls, 2);
    }

    #[test]
    fn header_rules() {
        // An unencrypted header with a key check is refused.
        let mut h = BundleHeader {
            sender: ident(1).node_id(),
            recipient: Recipient::AnyPeer,
            created: clock(ident(1).node_id(), 1),
            scopes: vec![],
            encrypted: false,
            nonce_seed: [0; 16],
            key_check: [1; 16],
        };
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        let body = codec::encode(&h);
        bytes.extend_from_slice(&(body.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&body);
        assert!(matches!(
            verify_bundle(&bytes[..], None),
            Err(BundleError::Decode { what: "header", .. })
        ));
        // Bad magic, and a file shorter than the magic.
        assert!(matches!(
            verify_bundle(&b"AMOSBNDX"[..], None),
            Err(BundleError::NotABundle)
        ));
        assert!(matches!(
            verify_bundle(&b"AMOS"[..], None),
            Err(BundleError::Truncated)
        ));
        assert!(matches!(
            verify_bundle(&b"PK\x03\x04"[..], None),
            Err(BundleError::NotABundle)
        ));
        // A header too large to write is refused by the writer.
        h.scopes = vec!["x".repeat(70_000)];
        let err = BundleWriter::new(
            Vec::new(),
            &ident(1),
            Recipient::AnyPeer,
            h.created,
            h.scopes,
            None,
            [0; 16],
        )
        .unwrap_err();
        assert!(matches!(err, BundleError::TooLarge { what: "header", .. }));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Arbitrary bytes never panic the reader, with or without a key.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
            let _ = verify_bundle(&bytes[..], None);
            let _ = verify_bundle(&bytes[..], Some(&key()));
        }

        /// Bytes after a valid magic and version reach the parser proper.
        #[test]
        fn arbitrary_bodies_never_panic(tail in prop::collection::vec(any::<u8>(), 0..600)) {
            let mut bytes = MAGIC.to_vec();
            bytes.extend_from_slice(&1u16.to_le_bytes());
            bytes.extend_from_slice(&tail);
            prop_assert!(verify_bundle(&bytes[..], None).is_err());
        }

        /// Any change to a valid bundle (several bytes, anywhere) is refused.
        #[test]
        fn random_damage_is_refused(
            edits in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
            encrypted in any::<bool>(),
        ) {
            let key = encrypted.then(key);
            let mut bytes = sample(key.as_ref());
            for (i, x) in &edits {
                let i = i.index(bytes.len());
                bytes[i] ^= x;
            }
            prop_assert!(verify_bundle(&bytes[..], key.as_ref()).is_err());
        }
    }
}
