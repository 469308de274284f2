//! The disposable vector index: one embedding per live memory, the
//! semantic half of recall's candidates (docs/recall.md, "Semantic
//! candidates").
//!
//! Like the full-text index it is derived, local and disposable: vectors are
//! made from each memory's text by the node's static model
//! ([`amos_embed::StaticModel`]), never replicated, never part of a fact or
//! the digest. It lives in `<home>/vectors/` (an LMDB environment holding a
//! `hannoy` HNSW graph) and is *caught up* exactly like the full-text index:
//! under `<home>/index.lock`, every memory row whose `touched` is past the
//! watermark stored beside the vectors is embedded again (or removed), so
//! every write — `add`, `update`, a bundle import, a live sync — is found by
//! the next semantic search of any process. A store epoch, format or model
//! fingerprint other than the one recorded drops every vector and rebuilds;
//! deleting the directory only costs a rebuild.
//!
//! Each vector carries its memory's access terms (owner, effective grants),
//! and each term names a bitmap of the vectors under it: a search takes the
//! union of the requester's terms as its candidate set *before* the nearest
//! neighbours are chosen, so a memory the requester cannot see never takes a
//! candidate slot.
//!
//! New vectors wait as *pending* (compared exactly by every search) until
//! [`BUILD_AFTER`] new, changed or removed ones have gathered; then they are
//! linked into the HNSW graph in one build, which costs a walk of the graph
//! — paid once per batch, not per write. Graph candidates fewer than
//! [`EXACT_BELOW`] are scanned exactly; past that the graph is walked,
//! restricted to the same set. A small store is thus searched exactly.
//!
//! Boundary: nothing here is trusted about content or visibility. It
//! returns ids and similarities; the recall pipeline re-reads rows from
//! SQLite and gates them. The one `unsafe` in amos is here: opening the
//! memory map (see [`open_env`]).

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use amos_embed::StaticModel;
use amos_protocol::MemoryId;
use hannoy::distances::Cosine;
use hannoy::{Reader, RoaringBitmapCodec, Writer};
use heed::byteorder::BigEndian;
use heed::types::{Bytes, Str, U32};
use heed::{CommitOrAbort, Database, Env, EnvFlags, EnvOpenOptions, RoTxn, RwTxn};
use rand::SeedableRng;
use rand::rngs::ChaCha8Rng;
use roaring::RoaringBitmap;

use super::{CatchUp, changed_rows, lock};
use crate::error::{NodeError, Result};
use crate::home::Home;
use crate::progress::Progress;
use crate::store::Store;

/// The layout of this index; another one is rebuilt.
const FORMAT: &str = "amos-vectors v1";
/// Below this many candidates a search scans them all (exact); from it on
/// it walks the HNSW graph restricted to them.
pub const EXACT_BELOW: usize = 500;
/// Candidates the HNSW search keeps while walking (at least the limit).
const EF_SEARCH: usize = 32;
/// New (or changed, or gone) vectors gathered before they are linked into
/// the graph; until then each search compares them exactly.
pub const BUILD_AFTER: u64 = 512;
/// Candidates kept while linking a new vector.
const EF_CONSTRUCTION: usize = 96;
/// Links per vector on the upper layers and on the base layer.
const M: usize = 16;
const M0: usize = 32;
/// Address space reserved for the map (not disk, not memory).
const MAP_SIZE: usize = 64 << 30;
/// The graph's level draws: fixed, so the same rows make the same graph.
const GRAPH_SEED: u64 = 0x616d_6f73_7665_6373;
/// hannoy's index number inside its database.
const GRAPH: u16 = 0;

/// The databases inside the environment.
#[derive(Clone, Copy)]
struct Dbs {
    vectors: hannoy::Database<'static, Cosine>,
    /// `format`, `model`, `epoch`, `watermark`, `next`.
    meta: Database<'static, Str, Str>,
    /// Memory id → vector item.
    ids: Database<'static, Bytes, U32<BigEndian>>,
    /// Vector item → memory id (16 bytes) and its access terms (`\n`-joined).
    items: Database<'static, U32<BigEndian>, Bytes>,
    /// Access term → the items under it.
    access: Database<'static, Str, RoaringBitmapCodec>,
    /// Vectors not linked into the graph yet (item → f32 LE bytes), scanned
    /// exactly by every search until the next graph build.
    pending: Database<'static, U32<BigEndian>, Bytes>,
    /// Graph items whose memory changed or went: unreachable already (no
    /// access bitmap names them), dropped from the graph at its next build.
    stale: Database<'static, U32<BigEndian>, Bytes>,
}

/// An open vector index.
pub struct VectorIndex {
    env: Arc<Env>,
    dbs: Dbs,
    lock_path: PathBuf,
    dir: PathBuf,
}

/// The recorded state of the index.
#[derive(Debug, Default, PartialEq, Eq)]
struct State {
    format: Option<String>,
    model: Option<String>,
    epoch: Option<String>,
    watermark: i64,
    next: u32,
}

impl VectorIndex {
    /// Open the vector index of `home`, creating it (empty) if missing.
    pub fn open(home: &Home) -> Result<VectorIndex> {
        let dir = home.vectors_dir();
        let env = open_env(&dir)?;
        let wtxn = env.write_txn().map_err(lmdb)?;
        let (vectors, meta, ids, items, access, pending, stale) = env
            .create_databases_and_commit(wtxn, |dbo, wtxn| -> heed::Result<_> {
                Ok(CommitOrAbort::<_, ()>::Commit((
                    dbo.create_database(wtxn, Some("vectors"))?,
                    dbo.create_database(wtxn, Some("meta"))?,
                    dbo.create_database(wtxn, Some("ids"))?,
                    dbo.create_database(wtxn, Some("items"))?,
                    dbo.create_database(wtxn, Some("access"))?,
                    dbo.create_database(wtxn, Some("pending"))?,
                    dbo.create_database(wtxn, Some("stale"))?,
                )))
            })
            .map_err(lmdb)?
            .unwrap_commit();
        let dbs = Dbs {
            vectors,
            meta,
            ids,
            items,
            access,
            pending,
            stale,
        };
        Ok(VectorIndex {
            env,
            dbs,
            lock_path: home.index_lock_path(),
            dir,
        })
    }

    fn state(&self, txn: &RoTxn) -> Result<State> {
        let get = |k: &str| -> Result<Option<String>> {
            Ok(self.dbs.meta.get(txn, k).map_err(lmdb)?.map(str::to_owned))
        };
        Ok(State {
            format: get("format")?,
            model: get("model")?,
            epoch: get("epoch")?,
            watermark: get("watermark")?.and_then(|w| w.parse().ok()).unwrap_or(0),
            next: get("next")?.and_then(|w| w.parse().ok()).unwrap_or(0),
        })
    }

    /// Whether the recorded vectors were made for `epoch` by `model`.
    fn current(state: &State, epoch: &str, model: &StaticModel) -> bool {
        state.format.as_deref() == Some(FORMAT)
            && state.model.as_deref() == Some(model.fingerprint())
            && state.epoch.as_deref() == Some(epoch)
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
        if !force_rebuild {
            // Cheap check without the lock first: most searches find nothing to do.
            let rtxn = self.env.read_txn().map_err(lmdb)?;
            let state = self.state(&rtxn)?;
            if Self::current(&state, &epoch, model) && state.watermark >= store.max_seq()? {
                return Ok(CatchUp::default());
            }
        }
        let _guard = lock(&self.lock_path)?;
        let mut wtxn = self.env.write_txn().map_err(lmdb)?;
        let state = self.state(&wtxn)?;
        let mut out = CatchUp::default();
        let writer = Writer::<Cosine>::new(self.dbs.vectors, GRAPH, model.dim());
        let (from, mut next) = if Self::current(&state, &epoch, model) && !force_rebuild {
            (state.watermark, state.next)
        } else {
            out.rebuilt = true;
            writer.clear(&mut wtxn).map_err(ann)?;
            self.dbs.ids.clear(&mut wtxn).map_err(lmdb)?;
            self.dbs.items.clear(&mut wtxn).map_err(lmdb)?;
            self.dbs.access.clear(&mut wtxn).map_err(lmdb)?;
            self.dbs.pending.clear(&mut wtxn).map_err(lmdb)?;
            self.dbs.stale.clear(&mut wtxn).map_err(lmdb)?;
            (0, 0)
        };
        let (rows, high) = changed_rows(store, from)?;
        if rows.is_empty() && !out.rebuilt {
            // Someone else caught up meanwhile.
            return Ok(out);
        }
        progress.set_len(rows.len() as u64);
        let mut bitmaps: HashMap<String, RoaringBitmap> = HashMap::new();
        for row in rows {
            progress.inc(1);
            if let Some(item) = self.dbs.ids.get(&wtxn, &row.id.0).map_err(lmdb)? {
                let terms = match self.dbs.items.get(&wtxn, &item).map_err(lmdb)? {
                    Some(entry) => terms_of(entry),
                    None => Vec::new(),
                };
                for term in terms {
                    self.bitmap(&wtxn, &mut bitmaps, &term)?.remove(item);
                }
                if !self.dbs.pending.delete(&mut wtxn, &item).map_err(lmdb)? {
                    self.dbs.stale.put(&mut wtxn, &item, &[]).map_err(lmdb)?;
                }
                self.dbs.ids.delete(&mut wtxn, &row.id.0).map_err(lmdb)?;
                self.dbs.items.delete(&mut wtxn, &item).map_err(lmdb)?;
                if !row.live {
                    out.removed += 1;
                }
            }
            if !row.live {
                continue;
            }
            let vector = model.embed(&row.text);
            if vector.iter().all(|x| *x == 0.0) {
                // No token the model knows: nothing to be near.
                continue;
            }
            let item = next;
            next = next.checked_add(1).ok_or_else(|| {
                NodeError::Index("vector ids exhausted: run `amos reindex`".into())
            })?;
            let bytes: Vec<u8> = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
            self.dbs
                .pending
                .put(&mut wtxn, &item, &bytes)
                .map_err(lmdb)?;
            let mut entry = row.id.0.to_vec();
            entry.extend_from_slice(row.access.join("\n").as_bytes());
            self.dbs
                .ids
                .put(&mut wtxn, &row.id.0, &item)
                .map_err(lmdb)?;
            self.dbs.items.put(&mut wtxn, &item, &entry).map_err(lmdb)?;
            for term in &row.access {
                self.bitmap(&wtxn, &mut bitmaps, term)?.insert(item);
            }
            out.indexed += 1;
        }
        for (term, bitmap) in &bitmaps {
            if bitmap.is_empty() {
                self.dbs.access.delete(&mut wtxn, term).map_err(lmdb)?;
            } else {
                self.dbs.access.put(&mut wtxn, term, bitmap).map_err(lmdb)?;
            }
        }
        // Link the pending vectors into the graph (and drop the stale ones
        // from it) only when enough have gathered: a build costs a walk of
        // the graph, a pending vector only an exact comparison per search.
        let waiting =
            self.dbs.pending.len(&wtxn).map_err(lmdb)? + self.dbs.stale.len(&wtxn).map_err(lmdb)?;
        if waiting >= BUILD_AFTER || (out.rebuilt && waiting > 0) {
            let mut moved = Vec::new();
            for entry in self.dbs.pending.iter(&wtxn).map_err(lmdb)? {
                let (item, bytes) = entry.map_err(lmdb)?;
                moved.push((item, floats(bytes)));
            }
            for (item, vector) in moved {
                writer.add_item(&mut wtxn, item, &vector).map_err(ann)?;
            }
            let mut stale = Vec::new();
            for entry in self.dbs.stale.iter(&wtxn).map_err(lmdb)? {
                stale.push(entry.map_err(lmdb)?.0);
            }
            for item in stale {
                writer.del_item(&mut wtxn, item).map_err(ann)?;
            }
            self.dbs.pending.clear(&mut wtxn).map_err(lmdb)?;
            self.dbs.stale.clear(&mut wtxn).map_err(lmdb)?;
            let mut rng = ChaCha8Rng::seed_from_u64(GRAPH_SEED);
            writer
                .builder(&mut rng)
                .ef_construction(EF_CONSTRUCTION)
                .build::<M, M0>(&mut wtxn)
                .map_err(ann)?;
        }
        let meta = self.dbs.meta;
        meta.put(&mut wtxn, "format", FORMAT).map_err(lmdb)?;
        meta.put(&mut wtxn, "model", model.fingerprint())
            .map_err(lmdb)?;
        meta.put(&mut wtxn, "epoch", &epoch).map_err(lmdb)?;
        meta.put(&mut wtxn, "watermark", &high.to_string())
            .map_err(lmdb)?;
        meta.put(&mut wtxn, "next", &next.to_string())
            .map_err(lmdb)?;
        wtxn.commit().map_err(lmdb)?;
        Ok(out)
    }

    /// The bitmap of `term`, loaded once per catch-up.
    fn bitmap<'m>(
        &self,
        wtxn: &RwTxn,
        bitmaps: &'m mut HashMap<String, RoaringBitmap>,
        term: &str,
    ) -> Result<&'m mut RoaringBitmap> {
        if !bitmaps.contains_key(term) {
            let held = self.dbs.access.get(wtxn, term).map_err(lmdb)?;
            bitmaps.insert(term.to_owned(), held.unwrap_or_default());
        }
        bitmaps
            .get_mut(term)
            .ok_or_else(|| NodeError::Index("vector access bitmap vanished".into()))
    }

    /// The `limit` memories nearest to `query` among those carrying one of
    /// the `access` terms (`None` = no restriction, for the local admin),
    /// with their cosine similarity, nearest first (ties by memory id).
    pub fn search(
        &self,
        query: &[f32],
        access: Option<&[String]>,
        limit: usize,
    ) -> Result<Vec<(MemoryId, f32)>> {
        if limit == 0 || query.iter().all(|x| *x == 0.0) {
            return Ok(Vec::new());
        }
        let rtxn = self.env.read_txn().map_err(lmdb)?;
        let allowed = match access {
            None => None,
            Some(terms) => {
                let mut allowed = RoaringBitmap::new();
                for term in terms {
                    if let Some(b) = self.dbs.access.get(&rtxn, term).map_err(lmdb)? {
                        allowed |= b;
                    }
                }
                if allowed.is_empty() {
                    return Ok(Vec::new());
                }
                Some(allowed)
            }
        };
        // (item, similarity): the pending vectors exactly, then the graph's.
        let mut near: Vec<(u32, f32)> = Vec::new();
        for entry in self.dbs.pending.iter(&rtxn).map_err(lmdb)? {
            let (item, bytes) = entry.map_err(lmdb)?;
            if allowed.as_ref().is_none_or(|a| a.contains(item)) {
                near.push((item, amos_embed::cosine(&floats(bytes), query)));
            }
        }
        match Reader::<Cosine>::open(&rtxn, GRAPH, self.dbs.vectors) {
            Ok(reader) => {
                if reader.dimensions() != query.len() {
                    return Err(NodeError::Index(format!(
                        "the vector index holds {}-dimensional vectors, the query has {}",
                        reader.dimensions(),
                        query.len()
                    )));
                }
                // Stale graph items are in no access bitmap; for the admin
                // they are skipped below (their entries are gone).
                let candidates = match &allowed {
                    Some(a) => a & reader.item_ids(),
                    None => reader.item_ids().clone(),
                };
                if !candidates.is_empty() {
                    let mut q = reader.nns(limit);
                    q.ef_search(EF_SEARCH.max(limit))
                        .candidates(&candidates)
                        .linear_below(EXACT_BELOW)
                        .linear_below_ratio(1.0);
                    let found = q.by_vector(&rtxn, query).map_err(ann)?.into_nns();
                    // hannoy's cosine distance is (1 - cos) / 2.
                    near.extend(found.into_iter().map(|(item, d)| (item, 1.0 - 2.0 * d)));
                }
            }
            Err(hannoy::Error::MissingMetadata(_)) => {}
            Err(e) => return Err(ann(e)),
        }
        near.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let mut out = Vec::with_capacity(limit);
        for (item, similarity) in near {
            if out.len() == limit {
                break;
            }
            // Only candidates come back; re-check anyway: a vector outside
            // the requester's set must never take a slot.
            if allowed.as_ref().is_some_and(|a| !a.contains(item)) {
                continue;
            }
            let Some(entry) = self.dbs.items.get(&rtxn, &item).map_err(lmdb)? else {
                continue;
            };
            let Some(id) = entry.get(..16).and_then(MemoryId::from_slice) else {
                continue;
            };
            out.push((id, similarity));
        }
        out.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Ok(out)
    }

    /// Vectors held and bytes on disk.
    pub fn stats(&self) -> Result<(u64, u64)> {
        let rtxn = self.env.read_txn().map_err(lmdb)?;
        let n = self.dbs.ids.len(&rtxn).map_err(lmdb)?;
        Ok((n, super::dir_size(&self.dir)))
    }
}

/// A vector stored as little-endian f32 bytes.
fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// The access terms recorded with an item.
fn terms_of(entry: &[u8]) -> Vec<String> {
    entry
        .get(16..)
        .map(|t| String::from_utf8_lossy(t).into_owned())
        .unwrap_or_default()
        .split('\n')
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Open (or share) the LMDB environment in `dir`. LMDB refuses a second
/// open of the same environment in one process, so open ones are shared
/// while any handle lives.
fn open_env(dir: &Path) -> Result<Arc<Env>> {
    static OPEN: OnceLock<Mutex<HashMap<PathBuf, Weak<Env>>>> = OnceLock::new();
    fs::create_dir_all(dir).map_err(NodeError::io("creating the vector index directory"))?;
    let key = dir
        .canonicalize()
        .map_err(NodeError::io("resolving the vector index directory"))?;
    let mut open = OPEN
        .get_or_init(Mutex::default)
        .lock()
        .map_err(|_| NodeError::Index("vector index registry poisoned".into()))?;
    if let Some(env) = open.get(&key).and_then(Weak::upgrade) {
        if key.join("data.mdb").exists() {
            return Ok(env);
        }
        return Err(NodeError::Index(
            "the vector index was deleted while this process had it open".into(),
        ));
    }
    let env = match open_map(&key) {
        Ok(env) => env,
        Err(_) => {
            // Unreadable (a crash under NO_SYNC can leave it so): it is
            // disposable, so start it over.
            fs::remove_dir_all(&key).map_err(NodeError::io("removing a broken vector index"))?;
            fs::create_dir_all(&key)
                .map_err(NodeError::io("creating the vector index directory"))?;
            open_map(&key).map_err(lmdb)?
        }
    };
    let env = Arc::new(env);
    open.insert(key, Arc::downgrade(&env));
    Ok(env)
}

/// Map the environment in `dir`.
fn open_map(dir: &Path) -> heed::Result<Env> {
    let mut options = EnvOpenOptions::new();
    options.map_size(MAP_SIZE).max_dbs(8);
    // SAFETY: LMDB maps `data.mdb` into memory. The file is this module's
    // own and is written only through LMDB, by this or another amos process
    // (LMDB's lock file coordinates them); nothing truncates or rewrites it
    // behind LMDB's back. Deleting the directory unlinks the file, which
    // keeps an existing mapping valid. One environment per path per process
    // is kept by `open_env`'s registry. NO_SYNC (no fsync per commit) can
    // lose the last commits, or leave the file unreadable, if the machine
    // (not the process) crashes: the index is disposable and never trusted
    // — a lost commit takes its watermark with it and is redone, an
    // unreadable file is deleted and rebuilt, and every id it returns is
    // re-read and gated.
    #[allow(unsafe_code)]
    unsafe {
        options.flags(EnvFlags::NO_SYNC);
        options.open(dir)
    }
}

fn lmdb(e: heed::Error) -> NodeError {
    NodeError::Index(format!("vector index: {e}"))
}

fn ann(e: hannoy::Error) -> NodeError {
    NodeError::Index(format!("vector index: {e}"))
}
