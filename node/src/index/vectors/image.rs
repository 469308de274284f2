//! What a vector snapshot is written from: an [`Image`], a table's
//! vectors in memory-id order handed over array by array, in pieces, so
//! [`snapshot::write`](super::snapshot::write) never needs the table
//! copied into file order first. Types only: the layout is the snapshot's,
//! the slots the table's.

/// What a snapshot is written from: `len` vectors in memory-id order and
/// the access terms they are found under, each array handed over in
/// pieces, so a table is written where it lies, never first copied into
/// file order ([`TableParts`](super::table::TableParts) is one piece per array; a
/// [`VectorTable`](super::table::VectorTable) one per vector).
pub trait Image {
    fn dim(&self) -> usize;
    fn len(&self) -> usize;
    fn ids(&self) -> Pieces<'_, [u8; 16]>;
    fn scales(&self) -> Pieces<'_, f32>;
    /// `code_words(dim)` per vector.
    fn codes(&self) -> Pieces<'_, u64>;
    /// `dim` per vector.
    fn rows(&self) -> Pieces<'_, i8>;
    /// Every access term with at least one vector, ascending.
    fn terms(&self) -> Vec<ImageTerm<'_>>;
    /// Vector `i`'s sign code (`i < len`), for [`TermCodes::OfVectors`].
    fn code(&self, i: u32) -> &[u64];
}

/// One of an array's pieces after another, in order.
pub type Pieces<'a, T> = Box<dyn Iterator<Item = &'a [T]> + 'a>;

/// An access term of an [`Image`]: its vectors (ascending, each below
/// `len`) and their sign codes.
pub struct ImageTerm<'a> {
    pub term: &'a str,
    pub slots: &'a [u32],
    pub codes: TermCodes<'a>,
}

/// Where an [`ImageTerm`]'s packed codes come from.
pub enum TermCodes<'a> {
    /// As they were read (a decoded file's, written back as they were).
    Stored(&'a [u64]),
    /// Each slot's vector's own code.
    OfVectors,
}
