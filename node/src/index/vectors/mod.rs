//! The disposable vector index: one embedding per live memory, the
//! semantic half of recall's candidates (docs/recall.md, "Semantic
//! candidates").
//!
//! Like the full-text index it is derived, local and disposable: vectors are
//! made from each memory's text by the node's static model
//! ([`amos_embed::StaticModel`]), never replicated, never part of a fact or
//! the digest. A process holds the whole index in memory as a
//! [`table::VectorTable`] (int8 rows and sign codes, see [`quantize`]) and
//! *catches it up* from the store like the full-text index: every memory
//! row whose `touched` is past the table's watermark is embedded again (or
//! removed), so every write — `add`, `update`, a bundle import, a live sync
//! — is found by the next semantic search of any process.
//!
//! On disk it is one file, `<home>/vectors/index.amv` ([`snapshot`]): what
//! a new process maps and uses in place ([`backing`]) instead of embedding
//! the whole store. It is replaced
//! whole (temp file, rename; under `<home>/index.lock`) when a catch-up
//! rebuilt the table or has left it [`PERSIST_AFTER`] rows (or a
//! 1/[`PERSIST_SHARE`] share of the table) ahead of the file; until then a
//! new process embeds those few rows itself. A file of another format,
//! model fingerprint or store epoch, or one that does not decode, is
//! rebuilt; deleting it only costs a rebuild.
//!
//! Each vector carries its memory's access terms (owner, effective grants):
//! a search takes the union of the requester's terms as its candidate set
//! *before* the nearest neighbours are chosen, so a memory the requester
//! cannot see never takes a candidate place.
//!
//! Boundary: nothing here is trusted about content or visibility. It
//! returns ids and similarities; the recall pipeline re-reads rows from
//! SQLite and gates them.

pub(crate) mod backing;
pub(crate) mod image;
pub(crate) mod quantize;
pub(crate) mod snapshot;
pub(crate) mod table;

use std::fs;
use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use amos_embed::StaticModel;
use amos_protocol::MemoryId;

pub use self::backing::{Backed, Source};
pub use self::quantize::{Quantized, Query, quantize, query};
pub use self::snapshot::{Provenance, SnapshotError, decode_bytes, decode_header, encode};
pub use self::table::{Ordered, PostingParts, TableParts, VectorTable};
use super::{CatchUp, IndexRow, ROW_CHUNK, changed_rows, lock};
use crate::error::{NodeError, Result};
use crate::home::{self, Home};
use crate::progress::Progress;
use crate::store::Store;

/// The snapshot file inside `<home>/vectors/`.
const FILE: &str = "index.amv";
/// Rows a catch-up may leave the table ahead of its file before the file
/// is replaced (what a new process embeds itself at most, about 6 ms)...
pub const PERSIST_AFTER: u64 = 256;
/// ... or this fraction of the table, whichever is less (replacing a
/// file costs its size; so a write costs at most about `PERSIST_SHARE`
/// vectors' bytes of file, amortized).
pub const PERSIST_SHARE: u64 = 1024;
/// From this many rows a catch-up embeds on every core.
const PARALLEL_FROM: usize = 1024;

/// An open vector index.
pub struct VectorIndex {
    dir: PathBuf,
    file: PathBuf,
    lock_path: PathBuf,
    held: Option<Held>,
}

/// The table this process holds, and how far it is ahead of the file.
struct Held {
    table: VectorTable,
    provenance: Provenance,
    /// Rows applied since the table last matched the file.
    unsaved: u64,
}

impl VectorIndex {
    /// The vector index of `home`. Nothing is read until the first
    /// catch-up (which knows the model and the store's epoch).
    pub fn open(home: &Home) -> Result<VectorIndex> {
        let dir = home.vectors_dir();
        Ok(VectorIndex {
            file: dir.join(FILE),
            dir,
            lock_path: home.index_lock_path(),
            held: None,
        })
    }

    /// Bring the vectors up to date with the store (see the module docs).
    pub fn catch_up(&mut self, store: &mut Store, model: &StaticModel) -> Result<CatchUp> {
        self.sync_with(store, model, false, &Progress::hidden())
    }

    /// Drop every vector and embed the whole store again.
    pub fn rebuild(
        &mut self,
        store: &mut Store,
        model: &StaticModel,
        progress: &Progress,
    ) -> Result<CatchUp> {
        self.sync_with(store, model, true, progress)
    }

    fn sync_with(
        &mut self,
        store: &mut Store,
        model: &StaticModel,
        force_rebuild: bool,
        progress: &Progress,
    ) -> Result<CatchUp> {
        let epoch = store.epoch()?;
        let fits = |h: &Held| {
            h.provenance.model == model.fingerprint()
                && h.provenance.epoch == epoch
                && h.table.dim() == model.dim()
        };
        if force_rebuild || self.held.as_ref().is_some_and(|h| !fits(h)) {
            self.held = None;
        }
        if let Some(h) = &self.held
            && h.provenance.watermark >= store.max_seq()?
        {
            return Ok(CatchUp::default());
        }
        let mut out = CatchUp::default();
        let mut held = match self.held.take() {
            Some(h) => h,
            None => match self.load().filter(|h| !force_rebuild && fits(h)) {
                Some(h) => h,
                None => {
                    out.rebuilt = true;
                    Held {
                        table: VectorTable::new(model.dim()),
                        provenance: Provenance {
                            model: model.fingerprint().to_owned(),
                            epoch,
                            watermark: 0,
                        },
                        unsaved: 0,
                    }
                }
            },
        };
        // In chunks: the rows of a chunk are embedded and stored before the
        // next is read, not all held at once (a first build at 1M).
        let mut changed = 0u64;
        let from = held.provenance.watermark;
        let high = changed_rows(
            store,
            from,
            ROW_CHUNK,
            |n| progress.set_len(n),
            |rows| {
                changed += rows.len() as u64;
                let vectors = embed_rows(model, &rows, progress);
                for (row, vector) in rows.iter().zip(vectors) {
                    match vector {
                        Some(v) => {
                            held.table.upsert(row.id, v, &row.access);
                            out.indexed += 1;
                        }
                        // Gone, archived, or with no token the model knows:
                        // nothing to be near.
                        None => {
                            if held.table.remove(&row.id) && !row.live {
                                out.removed += 1;
                            }
                        }
                    }
                }
                Ok(())
            },
        )?;
        held.provenance.watermark = high;
        held.unsaved += changed;
        let ahead = held.unsaved > 0
            && (held.unsaved >= PERSIST_AFTER || held.unsaved * PERSIST_SHARE >= held.table.len());
        if out.rebuilt || ahead {
            self.persist(&mut held, out.rebuilt)?;
        }
        self.held = Some(held);
        Ok(out)
    }

    /// The table in the file, if it reads: mapped, its arrays used where
    /// they lie (a search reads the codes and rows it compares, no others).
    fn load(&self) -> Option<Held> {
        let file = fs::File::open(&self.file).ok()?;
        let source = Arc::new(Source::map(&file).ok()?);
        let (provenance, parts) = snapshot::decode(&source).ok()?;
        Some(Held {
            table: VectorTable::from_parts(parts),
            provenance,
            unsaved: 0,
        })
    }

    /// Replace the file with `held`'s table, unless another process has
    /// already written one at least as far along (and this is no rebuild).
    fn persist(&self, held: &mut Held, rebuilt: bool) -> Result<()> {
        let _guard = lock(&self.lock_path)?;
        if !rebuilt && let Some(theirs) = self.file_provenance() {
            let ours = &held.provenance;
            if theirs.model == ours.model
                && theirs.epoch == ours.epoch
                && theirs.watermark >= ours.watermark
            {
                held.unsaved = 0;
                return Ok(());
            }
        }
        fs::create_dir_all(&self.dir)
            .map_err(NodeError::io("creating the vector index directory"))?;
        // Written from the table where it lies: no second copy in file order.
        let image = held.table.image();
        home::write_replacing_with(&self.file, 0o600, |out| {
            snapshot::write(&held.provenance, &image, out)
        })?;
        drop(image);
        held.unsaved = 0;
        // Search the file from now on, as a process that loads it does:
        // the table this process built (or added to) is freed for the map.
        if let Some(loaded) = self.load()
            && loaded.provenance == held.provenance
            && loaded.table.len() == held.table.len()
        {
            *held = loaded;
        }
        Ok(())
    }

    /// The provenance in the file's header, if it reads.
    fn file_provenance(&self) -> Option<Provenance> {
        let mut head = Vec::new();
        fs::File::open(&self.file)
            .ok()?
            .take(1 << 18)
            .read_to_end(&mut head)
            .ok()?;
        snapshot::decode_header(&head).ok().map(|h| h.0)
    }

    /// The `limit` memories nearest to `query` among those carrying one of
    /// the `access` terms (`None` = no restriction, for the local admin),
    /// with their cosine similarity, nearest first (ties by memory id).
    pub fn search(
        &self,
        query: &[f32],
        access: Option<&[String]>,
        skip: &[MemoryId],
        limit: usize,
    ) -> Result<Vec<(MemoryId, f32)>> {
        self.search_as(query, access, skip, limit, false)
    }

    /// [`search`](Self::search) scoring every allowed vector (`exact`), or
    /// as a search does. The vectors of `skip` (memories expired since
    /// they were indexed, [`RecallIndex::expired`](super::RecallIndex::expired))
    /// never take a candidate place.
    pub fn search_as(
        &self,
        query: &[f32],
        access: Option<&[String]>,
        skip: &[MemoryId],
        limit: usize,
        exact: bool,
    ) -> Result<Vec<(MemoryId, f32)>> {
        let held = self
            .held
            .as_ref()
            .ok_or_else(|| NodeError::Index("the vector index was not caught up".into()))?;
        let Some(query) = quantize::query(query) else {
            return Ok(Vec::new());
        };
        if query.dim() != held.table.dim() {
            return Err(NodeError::Index(format!(
                "the vector index holds {}-dimensional vectors, the query has {}",
                held.table.dim(),
                query.dim()
            )));
        }
        Ok(match exact {
            true => held.table.nearest_exact(&query, access, skip, limit),
            false => held.table.nearest(&query, access, skip, limit),
        })
    }

    /// Vectors held and bytes on disk.
    pub fn stats(&self) -> Result<(u64, u64)> {
        let n = self.held.as_ref().map_or(0, |h| h.table.len());
        Ok((n, super::dir_size(&self.dir)))
    }
}

/// Each row's stored vector (`None`: not live, or nothing to be near),
/// embedded on every core when there are many.
fn embed_rows(
    model: &StaticModel,
    rows: &[IndexRow],
    progress: &Progress,
) -> Vec<Option<Quantized>> {
    let one = |row: &IndexRow| {
        row.live
            .then(|| quantize::quantize(&model.embed(&row.text)))
            .flatten()
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    if rows.len() < PARALLEL_FROM || threads < 2 {
        let out = rows.iter().map(one).collect();
        progress.inc(rows.len() as u64);
        return out;
    }
    const CHUNK: usize = 256;
    let next = AtomicUsize::new(0);
    // Each thread returns the chunks it embedded; a panic in one is
    // re-raised by the scope, so no chunk can go missing.
    let mut chunks: Vec<(usize, Vec<Option<Quantized>>)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let start = next.fetch_add(CHUNK, Ordering::Relaxed);
                        if start >= rows.len() {
                            break mine;
                        }
                        let chunk = &rows[start..(start + CHUNK).min(rows.len())];
                        mine.push((start, chunk.iter().map(one).collect()));
                        progress.inc(chunk.len() as u64);
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    chunks.sort_by_key(|c| c.0);
    chunks.into_iter().flat_map(|c| c.1).collect()
}
