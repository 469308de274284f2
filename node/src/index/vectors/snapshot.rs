//! The vector index's file: one snapshot of a [`VectorTable`] with what it
//! was made from (model fingerprint, store epoch, watermark). Encoding and
//! a strict decoder; no file I/O here.
//!
//! Layout (little-endian; "pad" is zero bytes up to the next multiple of 8
//! from the start of the file, so every array is aligned for its type where
//! the file is mapped): magic `AMOSVEC\0`, version `u32` (2), `dim u32`,
//! `n u32`, the model fingerprint and the store epoch (each `u16` length +
//! UTF-8), `watermark i64`, pad; then `n` memory ids (16 bytes each,
//! ascending), `n` row scales (`f32`), pad, `n` sign codes (`⌈dim/64⌉`
//! `u64`s each), `n` int8 rows (`dim` bytes each), pad; then the access
//! terms: a `u32` count, each a term (`u16` length + UTF-8, ascending), a
//! `u32` count `k`, pad, its `k` slots (`u32`, ascending, below `n`), pad,
//! and their `k` sign codes again, packed. Nothing may follow.
//!
//! Decoding copies nothing: the arrays are views of the bytes
//! ([`Backed`]), so a mapped file is read only where a search reads it.
//! The file is local and disposable, but read as untrusted: every length is
//! checked against what is left, every id, scale and slot list is checked
//! in order, and any fault is a [`SnapshotError`] (the index is then
//! rebuilt), never a panic (`fuzz/fuzz_targets/vector_snapshot.rs`). Codes
//! and rows need no check: any bits are a code, any bytes a row.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::sync::Arc;

use bytemuck::Pod;

use super::backing::{Backed, Source};
use super::image::{Image, ImageTerm, Pieces, TermCodes};
use super::quantize::code_words;
use super::table::{PostingParts, TableParts};

const MAGIC: &[u8; 8] = b"AMOSVEC\0";
const VERSION: u32 = 2;
/// The widest vectors accepted (model2vec models are 64–1024 wide).
const MAX_DIM: u32 = 8192;

/// What a snapshot was made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provenance {
    /// Fingerprint of the model the vectors were made by.
    pub model: String,
    /// The store's log epoch they were caught up in.
    pub epoch: String,
    /// The `touched` watermark they are caught up to.
    pub watermark: i64,
}

/// Why a snapshot could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SnapshotError {
    /// Wrong magic or format version.
    #[error("not a vector index file (or another version)")]
    NotASnapshot,
    /// Shorter than its header says.
    #[error("the vector index file is truncated")]
    Truncated,
    /// A section is inconsistent (what, in a few words).
    #[error("the vector index file is malformed: {0}")]
    Malformed(&'static str),
}

/// The bytes of a snapshot of `table` made from `provenance`.
pub fn encode(provenance: &Provenance, table: &TableParts) -> Vec<u8> {
    let mut out = Vec::new();
    // Writing to a Vec cannot fail.
    let _ = write(provenance, table, &mut out);
    out
}

/// The snapshot of `image` made from `provenance`, written to `out` as it
/// is made ([`encode`] of the same content gives the same bytes).
pub fn write(provenance: &Provenance, image: &dyn Image, out: &mut dyn Write) -> io::Result<()> {
    let mut w = Padded { out, at: 0 };
    let n = image.len();
    w.put(MAGIC)?;
    w.put(&VERSION.to_le_bytes())?;
    w.put(&(image.dim() as u32).to_le_bytes())?;
    w.put(&(n as u32).to_le_bytes())?;
    w.put_str(&provenance.model)?;
    w.put_str(&provenance.epoch)?;
    w.put(&provenance.watermark.to_le_bytes())?;
    w.pad()?;
    w.put_all(image.ids())?;
    w.put_all(image.scales())?;
    w.pad()?;
    w.put_all(image.codes())?;
    w.put_all(image.rows())?;
    w.pad()?;
    let terms = image.terms();
    w.put(&(terms.len() as u32).to_le_bytes())?;
    for t in terms {
        w.put_str(t.term)?;
        w.put(&(t.slots.len() as u32).to_le_bytes())?;
        w.pad()?;
        w.put(bytemuck::cast_slice(t.slots))?;
        w.pad()?;
        match t.codes {
            TermCodes::Stored(codes) => w.put(bytemuck::cast_slice(codes))?,
            TermCodes::OfVectors => {
                for s in t.slots {
                    w.put(bytemuck::cast_slice(image.code(*s)))?;
                }
            }
        }
    }
    Ok(())
}

impl Image for TableParts {
    fn dim(&self) -> usize {
        self.dim
    }

    fn len(&self) -> usize {
        self.ids.len()
    }

    fn ids(&self) -> Pieces<'_, [u8; 16]> {
        Box::new(std::iter::once(&self.ids[..]))
    }

    fn scales(&self) -> Pieces<'_, f32> {
        Box::new(std::iter::once(&self.scales[..]))
    }

    fn codes(&self) -> Pieces<'_, u64> {
        Box::new(std::iter::once(&self.codes[..]))
    }

    fn rows(&self) -> Pieces<'_, i8> {
        Box::new(std::iter::once(&self.rows[..]))
    }

    fn terms(&self) -> Vec<ImageTerm<'_>> {
        self.access
            .iter()
            .map(|(term, p)| ImageTerm {
                term,
                slots: &p.slots,
                codes: TermCodes::Stored(&p.codes),
            })
            .collect()
    }

    fn code(&self, i: u32) -> &[u64] {
        let w = code_words(self.dim);
        let i = i as usize;
        &self.codes[i * w..(i + 1) * w]
    }
}

/// A writer that knows its offset, to pad to the next multiple of 8.
struct Padded<'a> {
    out: &'a mut dyn Write,
    at: usize,
}

impl Padded<'_> {
    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.at += bytes.len();
        self.out.write_all(bytes)
    }

    fn put_str(&mut self, s: &str) -> io::Result<()> {
        let bytes = &s.as_bytes()[..s.len().min(u16::MAX as usize)];
        self.put(&(bytes.len() as u16).to_le_bytes())?;
        self.put(bytes)
    }

    fn put_all<T: Pod>(&mut self, pieces: Pieces<'_, T>) -> io::Result<()> {
        for piece in pieces {
            self.put(bytemuck::cast_slice(piece))?;
        }
        Ok(())
    }

    fn pad(&mut self) -> io::Result<()> {
        let n = self.at.next_multiple_of(8) - self.at;
        self.put(&[0u8; 8][..n])
    }
}

/// A cursor over the bytes being decoded.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], SnapshotError> {
        let end = self.at.checked_add(n).ok_or(SnapshotError::Truncated)?;
        let head = self
            .bytes
            .get(self.at..end)
            .ok_or(SnapshotError::Truncated)?;
        self.at = end;
        Ok(head)
    }

    fn left(&self) -> usize {
        self.bytes.len() - self.at
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

    /// The zero bytes up to the next multiple of 8.
    fn pad(&mut self) -> Result<(), SnapshotError> {
        let n = self.at.next_multiple_of(8) - self.at;
        match self.take(n)?.iter().all(|b| *b == 0) {
            true => Ok(()),
            false => Err(SnapshotError::Malformed("padding is not zero")),
        }
    }

    /// The next `len` values, viewed where they lie in `source`.
    fn view<T: Pod>(
        &mut self,
        source: &Arc<Source>,
        len: usize,
    ) -> Result<Backed<T>, SnapshotError> {
        let bytes = len
            .checked_mul(size_of::<T>())
            .ok_or(SnapshotError::Truncated)?;
        let start = self.at;
        self.take(bytes)?;
        // Aligned: every array starts at a multiple of its size's alignment
        // in the layout, and the source starts aligned for u64.
        Backed::view(source, start, len).ok_or(SnapshotError::Malformed("an unaligned array"))
    }
}

/// The header of a snapshot: its provenance and `(dim, n)`. Reads only
/// the first bytes, so it can tell whether a file is worth loading.
pub fn decode_header(bytes: &[u8]) -> Result<(Provenance, u32, u32), SnapshotError> {
    header(&mut Reader { bytes, at: 0 })
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

/// A whole snapshot, its arrays left where they lie in `source`.
pub fn decode(source: &Arc<Source>) -> Result<(Provenance, TableParts), SnapshotError> {
    let mut r = Reader {
        bytes: source.bytes(),
        at: 0,
    };
    let (provenance, dim, n) = header(&mut r)?;
    let (dim, n) = (dim as usize, n as usize);
    let words = code_words(dim);
    r.pad()?;
    // Every slot's fixed part must be there before anything is read.
    let per_slot = 16 + 4 + 8 * words + dim;
    if r.left() / per_slot < n {
        return Err(SnapshotError::Truncated);
    }
    let ids: Backed<[u8; 16]> = r.view(source, n)?;
    if ids.windows(2).any(|w| w[0] >= w[1]) {
        return Err(SnapshotError::Malformed("memory ids out of order"));
    }
    let scales: Backed<f32> = r.view(source, n)?;
    if scales.iter().any(|s| !s.is_finite() || *s <= 0.0) {
        return Err(SnapshotError::Malformed("a row scale"));
    }
    r.pad()?;
    let codes = r.view(source, n * words)?;
    let rows = r.view(source, n * dim)?;
    r.pad()?;
    let terms = r.u32()?;
    let mut access = BTreeMap::new();
    let mut last: Option<String> = None;
    for _ in 0..terms {
        let term = r.string()?;
        if last.as_ref().is_some_and(|l| *l >= term) {
            return Err(SnapshotError::Malformed("access terms out of order"));
        }
        let k = r.u32()? as usize;
        r.pad()?;
        let slots: Backed<u32> = r.view(source, k)?;
        let ascending = slots.windows(2).all(|w| w[0] < w[1]);
        if k == 0 || !ascending || slots.last().is_some_and(|s| *s as usize >= n) {
            return Err(SnapshotError::Malformed("an access term's slots"));
        }
        r.pad()?;
        let codes = r.view(
            source,
            k.checked_mul(words).ok_or(SnapshotError::Truncated)?,
        )?;
        access.insert(term.clone(), PostingParts { slots, codes });
        last = Some(term);
    }
    if r.left() != 0 {
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

/// [`decode`] of bytes in memory (copied once, to be aligned as a map is).
pub fn decode_bytes(bytes: &[u8]) -> Result<(Provenance, TableParts), SnapshotError> {
    decode(&Arc::new(Source::copy_of(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::vectors::quantize::quantize;
    use crate::index::vectors::table::VectorTable;
    use amos_protocol::MemoryId;
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
        assert_eq!(decode_bytes(&bytes), Ok((p.clone(), parts)));
        assert_eq!(decode_header(&bytes[..64]).map(|h| h.0), Ok(p));
    }

    #[test]
    fn every_truncation_and_trailing_byte_is_refused() {
        let (p, parts) = sample(5);
        let bytes = encode(&p, &parts);
        for len in 0..bytes.len() {
            assert!(
                decode_bytes(&bytes[..len]).is_err(),
                "accepted {len} of {} bytes",
                bytes.len()
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(
            decode_bytes(&longer),
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
            if let Ok((p, parts)) = decode_bytes(&bytes) {
                // The layout is canonical: what is accepted encodes back to it.
                prop_assert_eq!(&encode(&p, &parts), &bytes);
                let n = parts.ids.len();
                prop_assert_eq!(parts.rows.len(), n * parts.dim);
                prop_assert!(parts.access.values().all(|p| p.slots.iter().all(|s| (*s as usize) < n)));
                let words = code_words(parts.dim);
                prop_assert!(parts.access.values().all(|p| p.codes.len() == p.slots.len() * words));
            }
        }

        #[test]
        fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode_bytes(&bytes);
            let mut framed = MAGIC.to_vec();
            framed.extend_from_slice(&VERSION.to_le_bytes());
            framed.extend_from_slice(&bytes);
            let _ = decode_bytes(&framed);
        }
    }
}
