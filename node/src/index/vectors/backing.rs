//! Where the vector table's arrays live: in the process's memory, or in the
//! vector index file mapped read-only, used where they lie. A process that
//! only searches then reads the rows and codes it compares and no others,
//! instead of reading and copying the whole file first (45 MB at 100,000
//! memories).
//!
//! Owns the index's one mapping of a file, [`Source::map`], and the typed
//! views of its sections, [`Backed`]. Must never: hand out a view that is
//! not aligned for its type or not inside its source (checked when the view
//! is made, by [`Backed::view`]), or let anything write through a view (a
//! table appends what it adds to arrays of its own, `table::Column`).

use std::fmt;
use std::fs::File;
use std::marker::PhantomData;
use std::ops::Deref;
use std::sync::Arc;

use bytemuck::Pod;

/// The bytes a snapshot was read from.
pub enum Source {
    /// The file, mapped read-only.
    File(memmap2::Mmap),
    /// A copy in memory, in `u64`s so every section is aligned as in a map.
    Heap {
        /// The bytes, padded to whole words.
        words: Vec<u64>,
        /// How many of the bytes are the source's.
        len: usize,
    },
}

impl Source {
    /// `file`, mapped read-only.
    pub fn map(file: &File) -> std::io::Result<Source> {
        // SAFETY: the map is only read, and nothing changes the file's bytes
        // while it is mapped: amos never writes the vector index file in
        // place but replaces it whole by renaming a new one over it
        // (`home::write_replacing`), which leaves this mapping on the old
        // inode. The bytes are still decoded as untrusted (`snapshot`). The
        // full-text index maps its files the same way (tantivy's
        // `MmapDirectory`).
        #[allow(unsafe_code)]
        let map = unsafe { memmap2::Mmap::map(file)? };
        Ok(Source::File(map))
    }

    /// A copy of `bytes` (for snapshots that are not files: tests, fuzzing).
    pub fn copy_of(bytes: &[u8]) -> Source {
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
        Source::Heap {
            words,
            len: bytes.len(),
        }
    }

    /// The source's bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Source::File(map) => map,
            Source::Heap { words, len } => &bytemuck::cast_slice(words)[..*len],
        }
    }
}

/// An array of `T`, owned or a section of a [`Source`].
#[derive(Clone)]
pub enum Backed<T: Pod> {
    /// Values in memory of their own.
    Owned(Vec<T>),
    /// `len` values read in place at byte `start` of `source` (made only by
    /// [`Backed::view`], which checks bounds and alignment).
    View {
        /// The bytes they lie in.
        source: Arc<Source>,
        /// Byte offset of the first value.
        start: usize,
        /// How many values.
        len: usize,
        /// The value type.
        of: PhantomData<T>,
    },
}

impl<T: Pod> Backed<T> {
    /// The `len` values at byte `start` of `source`, if they lie inside it
    /// and `start` is aligned for `T` (a source's bytes start aligned for
    /// `u64`: a page, or a `Vec<u64>`).
    pub fn view(source: &Arc<Source>, start: usize, len: usize) -> Option<Backed<T>> {
        let bytes = len.checked_mul(size_of::<T>())?;
        let section = source.bytes().get(start..start.checked_add(bytes)?)?;
        bytemuck::try_cast_slice::<u8, T>(section).ok()?;
        Some(Backed::View {
            source: Arc::clone(source),
            start,
            len,
            of: PhantomData,
        })
    }

    /// Whether the values are read where they lie in a source.
    pub fn is_view(&self) -> bool {
        matches!(self, Backed::View { .. })
    }
}

impl<T: Pod> Deref for Backed<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match self {
            Backed::Owned(v) => v,
            // In bounds and aligned: checked by `view`, and a source's
            // bytes never change.
            Backed::View {
                source, start, len, ..
            } => bytemuck::cast_slice(&source.bytes()[*start..*start + *len * size_of::<T>()]),
        }
    }
}

impl<T: Pod> Default for Backed<T> {
    fn default() -> Self {
        Backed::Owned(Vec::new())
    }
}

impl<T: Pod> From<Vec<T>> for Backed<T> {
    fn from(v: Vec<T>) -> Self {
        Backed::Owned(v)
    }
}

impl<T: Pod + PartialEq> PartialEq for Backed<T> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<T: Pod + fmt::Debug> fmt::Debug for Backed<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_must_lie_inside_its_source_and_be_aligned() {
        let source = Arc::new(Source::copy_of(&[1, 0, 0, 0, 2, 0, 0, 0, 3]));
        let v = Backed::<u32>::view(&source, 0, 2).unwrap();
        assert_eq!(&*v, &[1, 2]);
        assert!(Backed::<u32>::view(&source, 4, 2).is_none(), "past the end");
        assert!(Backed::<u32>::view(&source, 1, 1).is_none(), "misaligned");
        assert!(Backed::<u32>::view(&source, usize::MAX, 1).is_none());
        assert!(Backed::<u32>::view(&source, 0, usize::MAX).is_none());
        assert_eq!(&*Backed::<u8>::view(&source, 8, 1).unwrap(), &[3]);
    }
}
