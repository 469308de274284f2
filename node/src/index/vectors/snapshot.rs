//! The vector index's file: one snapshot of a [`VectorTable`] with what it
//! was made from (model fingerprint, store epoch, watermark). Encoding and
//! a strict decoder; no file I/O here.
//!
//! Layout (little-endian): magic `AMOSVEC\0`, version `u32` (1), `dim u32`,
//! `n u32`, the model fingerprint and the store epoch (each `u16` length +
//! UTF-8), `watermark i64`; then `n` memory ids (16 bytes each), `n` row
//! scales (`f32`), `n` sign codes (`⌈dim/64⌉` `u64`s each), `n` int8 rows
//! (`dim` bytes each); then the access terms: a `u32` count, each a term
//! (`u16` length + UTF-8), a `u32` length and a serialized roaring bitmap
//! of slots below `n`. Nothing may follow.
//!
//! The file is local and disposable, but read as untrusted: the decoder
//! checks every length against what is left before allocating, and any
//! fault is a [`SnapshotError`] (the index is then rebuilt), never a panic
//! (`fuzz/fuzz_targets/vector_snapshot.rs`).

use std::collections::BTreeMap;

use amos_protocol::MemoryId;
use roaring::RoaringBitmap;

use super::quantize::code_words;
use super::table::TableParts;

const MAGIC: &[u8; 8] = b"AMOSVEC\0";
const VERSION: u32 = 1;
/// The widest vectors accepted (model2vec models are 64–1024 wide).
const MAX_DIM: u32 = 8192;

/// What a snapshot was made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provenance {
    pub model: String,
    pub epoch: String,
    pub watermark: i64,
}

/// Why a snapshot could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SnapshotError {
    #[error("not a vector index file (or another version)")]
    NotASnapshot,
    #[error("the vector index file is truncated")]
    Truncated,
    #[error("the vector index file is malformed: {0}")]
    Malformed(&'static str),
}

/// The bytes of a snapshot of `table` made from `provenance`.
pub fn encode(provenance: &Provenance, table: &TableParts) -> Vec<u8> {
    let n = table.ids.len();
    let mut out = Vec::with_capacity(64 + n * (16 + 4 + table.dim + 8 * code_words(table.dim)));
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(table.dim as u32).to_le_bytes());
    out.extend_from_slice(&(n as u32).to_le_bytes());
    put_str(&mut out, &provenance.model);
    put_str(&mut out, &provenance.epoch);
    out.extend_from_slice(&provenance.watermark.to_le_bytes());
    for id in &table.ids {
        out.extend_from_slice(&id.0);
    }
    for s in &table.scales {
        out.extend_from_slice(&s.to_le_bytes());
    }
    for c in &table.codes {
        out.extend_from_slice(&c.to_le_bytes());
    }
    out.extend(table.rows.iter().map(|r| *r as u8));
    out.extend_from_slice(&(table.access.len() as u32).to_le_bytes());
    for (term, bitmap) in &table.access {
        put_str(&mut out, term);
        out.extend_from_slice(&(bitmap.serialized_size() as u32).to_le_bytes());
        // Writing to a Vec cannot fail.
        let _ = bitmap.serialize_into(&mut out);
    }
    out
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    let bytes = &s.as_bytes()[..s.len().min(u16::MAX as usize)];
    out.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// A cursor over the bytes being decoded.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], SnapshotError> {
        if self.0.len() < n {
            return Err(SnapshotError::Truncated);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], SnapshotError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u16(&mut self) -> Result<u16, SnapshotError> {
        self.array().map(u16::from_le_bytes)
    }

    fn u32(&mut self) -> Result<u32, SnapshotError> {
        self.array().map(u32::from_le_bytes)
    }

    fn string(&mut self) -> Result<String, SnapshotError> {
        let len = self.u16()? as usize;
        let bytes = self.take(len)?;
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| SnapshotError::Malformed("a name is not UTF-8"))
    }
}

/// The header of a snapshot: its provenance and `(dim, n)`. Reads only
/// the first bytes, so it can tell whether a file is worth loading.
pub fn decode_header(bytes: &[u8]) -> Result<(Provenance, u32, u32), SnapshotError> {
    let mut r = Reader(bytes);
    header(&mut r)
}

fn header(r: &mut Reader) -> Result<(Provenance, u32, u32), SnapshotError> {
    if r.take(8).ok() != Some(&MAGIC[..]) || r.u32().ok() != Some(VERSION) {
        return Err(SnapshotError::NotASnapshot);
    }
    let dim = r.u32()?;
    let n = r.u32()?;
    if dim == 0 || dim > MAX_DIM {
        return Err(SnapshotError::Malformed("dimension out of range"));
    }
    let model = r.string()?;
    let epoch = r.string()?;
    let watermark = i64::from_le_bytes(r.array()?);
    Ok((
        Provenance {
            model,
            epoch,
            watermark,
        },
        dim,
        n,
    ))
}

/// A whole snapshot.
pub fn decode(bytes: &[u8]) -> Result<(Provenance, TableParts), SnapshotError> {
    let mut r = Reader(bytes);
    let (provenance, dim, n) = header(&mut r)?;
    let (dim, n) = (dim as usize, n as usize);
    let words = code_words(dim);
    // Every slot's fixed part must be there before anything is allocated.
    let per_slot = 16 + 4 + 8 * words + dim;
    if r.0.len() / per_slot < n {
        return Err(SnapshotError::Truncated);
    }
    let ids = r
        .take(16 * n)?
        .chunks_exact(16)
        .map(|c| MemoryId::from_slice(c).ok_or(SnapshotError::Malformed("a memory id")))
        .collect::<Result<Vec<_>, _>>()?;
    if ids.windows(2).any(|w| w[0] >= w[1]) {
        return Err(SnapshotError::Malformed("memory ids out of order"));
    }
    let scales: Vec<f32> = r
        .take(4 * n)?
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    if scales.iter().any(|s| !s.is_finite() || *s <= 0.0) {
        return Err(SnapshotError::Malformed("a row scale"));
    }
    let codes: Vec<u64> = r
        .take(8 * words * n)?
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
        .collect();
    let rows: Vec<i8> = r.take(dim * n)?.iter().map(|b| *b as i8).collect();
    let terms = r.u32()?;
    let mut access = BTreeMap::new();
    for _ in 0..terms {
        let term = r.string()?;
        let len = r.u32()? as usize;
        let bitmap = RoaringBitmap::deserialize_from(r.take(len)?)
            .map_err(|_| SnapshotError::Malformed("an access bitmap"))?;
        if bitmap.is_empty() || bitmap.max().is_some_and(|m| m as usize >= n) {
            return Err(SnapshotError::Malformed("an access bitmap's slots"));
        }
        if access.insert(term, bitmap).is_some() {
            return Err(SnapshotError::Malformed("a repeated access term"));
        }
    }
    if !r.0.is_empty() {
        return Err(SnapshotError::Malformed("bytes after the end"));
    }
    Ok((
        provenance,
        TableParts {
            dim,
            ids,
            scales,
            codes,
            rows,
            access,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::vectors::quantize::quantize;
    use crate::index::vectors::table::VectorTable;
    use proptest::prelude::*;

    fn sample(n: u8) -> (Provenance, TableParts) {
        let mut table = VectorTable::new(70);
        for i in 0..n {
            let v: Vec<f32> = (0..70)
                .map(|j| ((i as usize * 31 + j * 7) % 13) as f32 - 6.0)
                .collect();
            let Some(q) = quantize(&v) else { continue };
            let terms = [format!("team:{}", i % 3), "global".to_string()];
            table.upsert(MemoryId([i; 16]), q, &terms);
        }
        let provenance = Provenance {
            model: "builtin:minilm".into(),
            epoch: "e1".into(),
            watermark: 42,
        };
        (provenance, table.to_parts())
    }

    #[test]
    fn a_snapshot_reads_back_as_written() {
        let (p, parts) = sample(20);
        let bytes = encode(&p, &parts);
        assert_eq!(decode(&bytes), Ok((p.clone(), parts)));
        assert_eq!(decode_header(&bytes[..64]).map(|h| h.0), Ok(p));
    }

    #[test]
    fn every_truncation_and_trailing_byte_is_refused() {
        let (p, parts) = sample(5);
        let bytes = encode(&p, &parts);
        for len in 0..bytes.len() {
            assert!(
                decode(&bytes[..len]).is_err(),
                "accepted {len} of {} bytes",
                bytes.len()
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(
            decode(&longer),
            Err(SnapshotError::Malformed("bytes after the end"))
        );
    }

    proptest! {
        /// Any bytes decode to an error or a snapshot, never a panic, and a
        /// snapshot whose bytes were flipped is caught or still well formed.
        #[test]
        fn flipped_bytes_never_panic(at in any::<prop::sample::Index>(), to in any::<u8>()) {
            let (p, parts) = sample(6);
            let mut bytes = encode(&p, &parts);
            let i = at.index(bytes.len());
            bytes[i] = to;
            if let Ok((_, parts)) = decode(&bytes) {
                let n = parts.ids.len();
                prop_assert_eq!(parts.rows.len(), n * parts.dim);
                prop_assert!(parts.access.values().all(|b| b.max().is_none_or(|m| (m as usize) < n)));
            }
        }

        #[test]
        fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode(&bytes);
            let mut framed = MAGIC.to_vec();
            framed.extend_from_slice(&VERSION.to_le_bytes());
            framed.extend_from_slice(&bytes);
            let _ = decode(&framed);
        }
    }
}
