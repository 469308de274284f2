//! The disposable full-text index (tantivy): BM25 candidates, ids only.
//!
//! The index may be stale, missing or deleted at any time; SQLite is the
//! truth. Each search first *catches up*: under `<home>/index.lock` it indexes
//! every memory row whose `touched` is past the watermark stored in the
//! index's commit payload (`amos-index v1 <epoch> <touched>`). So a write by
//! any process is found by the next search of any process (read-your-writes),
//! and deleting `<home>/index/` only costs a rebuild.
//!
//! The index also holds each memory's effective grants and owner as `access`
//! terms, used as a *pre-filter* so that a requester who sees a small share of
//! the store still gets its best visible hits, not the top of everyone's.
//!
//! Text is analysed by [`analyzer`] (lower case, ASCII folding, English
//! stems, joined compounds, no stop-words, CJK runs as character bigrams)
//! at index and query time; its name is in the schema, so an index built
//! by another analyzer is rebuilt on open.
//!
//! Boundary: nothing the index says about content or visibility is trusted.
//! It returns ids and a relevance score; the recall pipeline re-reads rows
//! from SQLite and gates them.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fs::{self, File};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use amos_protocol::MemoryId;
use tantivy::columnar::Column;
use tantivy::query::{
    Bm25StatisticsProvider, BooleanQuery, EnableScoring, Occur, Query, TermQuery, TermSetQuery,
};
use tantivy::schema::{
    FAST, Field, IndexRecordOption, STRING, Schema, TantivyDocument, TextFieldIndexing, TextOptions,
};
use tantivy::{
    BitSet, DocSet, Index, IndexReader, IndexWriter, ReloadPolicy, Searcher, TERMINATED, Term, doc,
};

mod analyzer;
pub(crate) mod encoded;
pub mod vectors;

pub use analyzer::{ANALYZER_NAME, STOP_WORDS, analyze, analyzer, is_stop_word, mostly_cjk};
pub use encoded::EncoderProgress;

use crate::error::{NodeError, Result};
use crate::home::Home;
use crate::progress::Progress;
use crate::store::{self, Store};

const PAYLOAD_PREFIX: &str = "amos-index v1";
const WRITER_HEAP: usize = 64 * 1024 * 1024;

struct Fields {
    id: Field,
    /// The memory id's first and last 8 bytes (big-endian), as fast-field
    /// columns: a hit's id is two column reads, not a document-store block
    /// to decompress (nothing is stored).
    id_hi: Field,
    id_lo: Field,
    text: Field,
    access: Field,
    /// [`EXPIRING`] on a memory with an expiry, whose time is the
    /// `expires` column: the few documents a search must check the clock for.
    expiring: Field,
    expires: Field,
}

/// The column names of [`Fields::id_hi`] and [`Fields::id_lo`].
const ID_HI: &str = "id_hi";
const ID_LO: &str = "id_lo";
/// The column of [`Fields::expires`], and the term of [`Fields::expiring`].
const EXPIRES: &str = "expires";
const EXPIRING: &str = "yes";

fn schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    // Indexed, to delete a memory's document by it.
    let id = b.add_text_field("id", STRING);
    let id_hi = b.add_u64_field(ID_HI, FAST);
    let id_lo = b.add_u64_field(ID_LO, FAST);
    // The analyzer's name is part of the schema: an index built with
    // another analyzer differs from this schema and is rebuilt on open.
    let text = b.add_text_field(
        "text",
        TextOptions::default().set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer(ANALYZER_NAME)
                .set_index_option(IndexRecordOption::WithFreqsAndPositions),
        ),
    );
    let access = b.add_text_field("access", STRING);
    let expiring = b.add_text_field("expiring", STRING);
    let expires = b.add_u64_field(EXPIRES, FAST);
    let fields = Fields {
        id,
        id_hi,
        id_lo,
        text,
        access,
        expiring,
        expires,
    };
    (b.build(), fields)
}

/// A memory id as its two id columns' values.
fn id_halves(id: &MemoryId) -> (u64, u64) {
    let (mut hi, mut lo) = ([0u8; 8], [0u8; 8]);
    hi.copy_from_slice(&id.0[..8]);
    lo.copy_from_slice(&id.0[8..]);
    (u64::from_be_bytes(hi), u64::from_be_bytes(lo))
}

/// The memory id of two id columns' values.
fn id_of_halves(hi: u64, lo: u64) -> MemoryId {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&hi.to_be_bytes());
    id[8..].copy_from_slice(&lo.to_be_bytes());
    MemoryId(id)
}

/// What a catch-up did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct CatchUp {
    /// Memories (re)indexed.
    pub indexed: usize,
    /// Memories removed (no longer live: forgotten, or content purged).
    pub removed: usize,
    /// Whether the index was rebuilt from scratch.
    pub rebuilt: bool,
}

/// An open index.
pub struct RecallIndex {
    dir: PathBuf,
    lock_path: PathBuf,
    index: Index,
    reader: IndexReader,
    /// The commit `reader` was last loaded at (or an older one): when the
    /// index on disk differs from it, the reader reloads.
    reader_commit: CommitKey,
    /// The `(epoch, watermark)` of `reader_commit` (or of an older commit):
    /// while the store has handed out no `seq` past it in that epoch, the
    /// reader is caught up whatever else was committed since.
    reader_watermark: Option<(String, i64)>,
    fields: Fields,
    /// Statistics and access sets of the reader's current generation.
    cache: Mutex<GenerationCache>,
}

/// The access terms a memory is indexed under: its owner and effective grants.
pub fn owner_term(owner: &str) -> String {
    format!("owner:{owner}")
}

impl RecallIndex {
    /// Open the index of `home`, creating it (empty) if missing or unreadable.
    pub fn open(home: &Home) -> Result<RecallIndex> {
        let dir = home.index_dir();
        let lock_path = home.index_lock_path();
        let _guard = lock(&lock_path)?;
        let (schema, fields) = schema();
        let opened = Index::open_in_dir(&dir)
            .ok()
            .filter(|i| i.schema() == schema);
        let index = match opened {
            Some(i) => i,
            None => {
                if dir.exists() {
                    fs::remove_dir_all(&dir).map_err(NodeError::io("removing broken index"))?;
                }
                fs::create_dir_all(&dir).map_err(NodeError::io("creating index directory"))?;
                Index::create_in_dir(&dir, schema)?
            }
        };
        index.tokenizers().register(ANALYZER_NAME, analyzer());
        let metas = index.load_metas()?;
        let (reader_commit, reader_watermark) = (commit_key(&metas), payload_watermark(&metas));
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()?;
        Ok(RecallIndex {
            dir,
            lock_path,
            index,
            reader,
            reader_commit,
            reader_watermark,
            fields,
            cache: Mutex::default(),
        })
    }

    /// Load the latest commit on disk into the reader.
    fn reload(&mut self) -> Result<()> {
        // The commit is read before the reader reloads: if another one
        // lands between, the reader is newer than what is recorded of it,
        // never older.
        let metas = self.index.load_metas()?;
        self.reader.reload()?;
        self.reader_commit = commit_key(&metas);
        self.reader_watermark = payload_watermark(&metas);
        Ok(())
    }

    /// `(epoch, watermark)` from the last commit, if any.
    fn watermark(&self) -> Result<Option<(String, i64)>> {
        Ok(payload_watermark(&self.index.load_metas()?))
    }

    /// How many index-relevant changes the index has not seen yet.
    pub fn lag(&self, store: &Store) -> Result<i64> {
        lag_at(&self.index.load_metas()?, store)
    }

    /// Bring the index up to date with the store (see the module docs).
    pub fn catch_up(&mut self, store: &mut Store) -> Result<CatchUp> {
        self.sync_with(store, false, &Progress::hidden())
    }

    /// Drop every document and index the whole store again, counting the
    /// rows done on `progress`.
    pub fn rebuild(&mut self, store: &mut Store, progress: &Progress) -> Result<CatchUp> {
        self.sync_with(store, true, progress)
    }

    fn sync_with(
        &mut self,
        store: &mut Store,
        force_rebuild: bool,
        progress: &Progress,
    ) -> Result<CatchUp> {
        let epoch = store.epoch()?;
        // Cheapest check first: nothing new in the store since the commit
        // the reader holds (any later commit indexes the same rows).
        if !force_rebuild
            && let Some((e, w)) = &self.reader_watermark
            && *e == epoch
            && store.max_seq()? <= *w
        {
            return Ok(CatchUp::default());
        }
        // Cheap check without the lock next: most searches find nothing to do.
        if !force_rebuild {
            let metas = self.index.load_metas()?;
            if lag_at(&metas, store)? == 0 {
                // Another process (or another open node) may have caught the
                // index up since this reader loaded: search that, not our past.
                if commit_key(&metas) != self.reader_commit {
                    self.reload()?;
                }
                return Ok(CatchUp::default());
            }
        }
        let _guard = lock(&self.lock_path)?;
        let mut out = CatchUp::default();
        let from = match self.watermark()? {
            Some((e, w)) if e == epoch && !force_rebuild => w,
            _ => {
                out.rebuilt = true;
                0
            }
        };
        let open = |index: &Index| -> Result<IndexWriter<TantivyDocument>> {
            index
                .writer_with_num_threads(1, WRITER_HEAP)
                .map_err(|e| NodeError::Index(format!("opening index writer: {e}")))
        };
        // Opened by the first row, or now for a rebuild (which commits even
        // an empty store).
        let mut writer = None;
        if out.rebuilt {
            let w = open(&self.index)?;
            w.delete_all_documents()?;
            writer = Some(w);
        }
        let (index, fields, rebuilt) = (&self.index, &self.fields, out.rebuilt);
        let high = changed_rows(
            store,
            from,
            ROW_CHUNK,
            |n| progress.set_len(n),
            |rows| {
                let writer = match &mut writer {
                    Some(w) => w,
                    None => writer.insert(open(index)?),
                };
                // A chunk's old documents go first, in one delete: tantivy
                // holds a delete until the commit, about 1 KiB for each
                // term deleted alone (1M: a gigabyte), a few bytes a term
                // in a set. A rebuilt index has none to delete.
                let keys: Vec<String> = rows.iter().map(|r| id_key(&r.id)).collect();
                if !rebuilt {
                    let terms = keys.iter().map(|k| Term::from_field_text(fields.id, k));
                    writer.delete_query(Box::new(TermSetQuery::new(terms)))?;
                }
                for (row, key) in rows.into_iter().zip(keys) {
                    progress.inc(1);
                    if !row.live {
                        out.removed += 1;
                        continue;
                    }
                    let (hi, lo) = id_halves(&row.id);
                    let mut d = doc!(
                        fields.id => key,
                        fields.id_hi => hi,
                        fields.id_lo => lo,
                        fields.text => row.text,
                    );
                    for term in row.access {
                        d.add_text(fields.access, term);
                    }
                    if let Some(at) = row.expires_ms {
                        d.add_text(fields.expiring, EXPIRING);
                        d.add_u64(fields.expires, at);
                    }
                    writer.add_document(d)?;
                    out.indexed += 1;
                }
                Ok(())
            },
        )?;
        let Some(mut writer) = writer else {
            // Someone else caught up meanwhile.
            self.reload()?;
            return Ok(out);
        };
        let mut prepared = writer.prepare_commit()?;
        prepared.set_payload(&format!("{PAYLOAD_PREFIX} {epoch} {high}"));
        prepared.commit()?;
        writer
            .wait_merging_threads()
            .map_err(|e| NodeError::Index(format!("merging index segments: {e}")))?;
        self.reload()?;
        Ok(out)
    }

    /// Split text into index terms with the same analyzer the index uses
    /// (distinct, in order of first appearance).
    pub fn terms(&self, text: &str) -> Result<Vec<String>> {
        Ok(analyze(text))
    }

    /// BM25 candidates for `terms` among the documents a requester holding
    /// `access` terms may be shown (`None`: every document, for the local
    /// admin), less those expired by `now_ms`: its *audience*.
    ///
    /// Scores depend on the audience alone. The statistics BM25 weighs a
    /// term by (the number of documents, how many hold the term, their
    /// average length) are counted over the audience's documents, not the
    /// whole index (docs/design.md §9), so adding, changing or removing a
    /// memory the requester cannot see leaves every score, rank and count
    /// it gets bit for bit as it was.
    ///
    /// The text query alone is scored (a union of term scorers, so tantivy's
    /// Block-WAND skips blocks that cannot reach the current top `limit`);
    /// the audience is a per-segment bitset checked before a hit may enter
    /// the top, so only visible documents raise the bar.
    pub fn search(
        &self,
        terms: &[String],
        access: Option<&[String]>,
        now_ms: u64,
        limit: usize,
    ) -> Result<Vec<(MemoryId, f32)>> {
        if terms.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let text: Vec<(Occur, Box<dyn Query>)> = terms
            .iter()
            .map(|t| {
                let q: Box<dyn Query> = Box::new(TermQuery::new(
                    Term::from_field_text(self.fields.text, t),
                    IndexRecordOption::WithFreqs,
                ));
                (Occur::Should, q)
            })
            .collect();
        let query = BooleanQuery::new(text);
        let searcher = self.reader.searcher();
        let audience = {
            let mut cache = self.cache()?;
            cache.refresh(&searcher, &self.fields)?;
            cache.audience(&searcher, &self.fields, access, now_ms)?
        };
        if audience.docs == 0 {
            return Ok(Vec::new());
        }
        let weight = query.weight(EnableScoring::enabled_from_statistics_provider(
            &AudienceStats {
                searcher: &searcher,
                audience: &audience,
            },
            &searcher,
        ))?;
        let mut top = TopHits::new(limit);
        for (ord, seg) in searcher.segment_readers().iter().enumerate() {
            let Some(allowed) = audience.sets.get(ord).filter(|a| a.len() > 0) else {
                continue;
            };
            let mut threshold = top.threshold();
            weight.for_each_pruning(threshold, seg, &mut |doc, score| {
                if allowed.contains(doc) {
                    top.push(score, ord as u32, doc);
                    threshold = top.threshold();
                }
                threshold
            })?;
        }
        let mut out = Vec::with_capacity(limit);
        let sorted = top.into_sorted();
        let tied = sorted.len() > limit;
        // Each segment's id columns, opened when a hit first needs them.
        let mut columns: Vec<Option<(Column<u64>, Column<u64>)>> =
            vec![None; searcher.segment_readers().len()];
        for (score, seg, doc) in sorted {
            let Some(slot) = columns.get_mut(seg as usize) else {
                continue;
            };
            if slot.is_none() {
                let fast = searcher.segment_reader(seg).fast_fields();
                *slot = Some((fast.u64(ID_HI)?, fast.u64(ID_LO)?));
            }
            if let Some((hi, lo)) = slot
                && let (Some(hi), Some(lo)) = (hi.first(doc), lo.first(doc))
            {
                out.push((id_of_halves(hi, lo), score));
            }
        }
        if tied {
            // Cut the hits tied at the boundary by memory id, not by where
            // they sit in the index.
            out.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            out.truncate(limit);
        }
        Ok(out)
    }

    /// The memories still indexed that have expired by `now_ms`: an expiry
    /// touches no row, so they stay in both indexes until something does,
    /// and every candidate search must skip them (the vector search is
    /// handed this list).
    pub fn expired(&self, now_ms: u64) -> Result<Vec<MemoryId>> {
        let searcher = self.reader.searcher();
        let mut cache = self.cache()?;
        cache.refresh(&searcher, &self.fields)?;
        Ok(cache.expired(now_ms).iter().map(|e| e.id).collect())
    }

    fn cache(&self) -> Result<std::sync::MutexGuard<'_, GenerationCache>> {
        self.cache
            .lock()
            .map_err(|_| NodeError::Index("index statistics cache poisoned".into()))
    }

    /// Documents in the index and bytes on disk.
    pub fn stats(&self) -> (u64, u64) {
        let docs = self.reader.searcher().num_docs();
        (docs, dir_size(&self.dir))
    }
}

/// The best `limit` hits so far, *and every hit tied with the last of
/// them*: which of several equally scored documents makes the cut must not
/// depend on where they sit in the index (an index that saw edits and a
/// rebuild of the same store lay documents out differently), so ties at the
/// boundary are all kept and the caller cuts them by memory id.
struct TopHits {
    limit: usize,
    /// A min-heap of the best `limit` scores.
    heap: BinaryHeap<Reverse<HitKey>>,
    /// Every hit scoring at least the heap's minimum (pruned lazily).
    kept: Vec<HitKey>,
}

#[derive(Clone, Copy, PartialEq)]
struct HitKey {
    score: f32,
    seg: u32,
    doc: u32,
}

impl Eq for HitKey {}

impl Ord for HitKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| (other.seg, other.doc).cmp(&(self.seg, self.doc)))
    }
}

impl PartialOrd for HitKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl TopHits {
    fn new(limit: usize) -> Self {
        TopHits {
            limit,
            heap: BinaryHeap::with_capacity(limit + 1),
            kept: Vec::with_capacity(limit + 1),
        }
    }

    fn push(&mut self, score: f32, seg: u32, doc: u32) {
        let key = HitKey { score, seg, doc };
        if score < self.min_score() {
            return;
        }
        if self.heap.len() < self.limit {
            self.heap.push(Reverse(key));
        } else if self.heap.peek().is_some_and(|Reverse(min)| key > *min) {
            self.heap.pop();
            self.heap.push(Reverse(key));
        }
        self.kept.push(key);
        if self.kept.len() >= 4 * self.limit.max(16) {
            let min = self.min_score();
            self.kept.retain(|k| k.score >= min);
        }
    }

    /// The lowest score still in the top (once it is full).
    fn min_score(&self) -> f32 {
        match self.heap.peek() {
            Some(Reverse(min)) if self.heap.len() >= self.limit => min.score,
            _ => f32::MIN,
        }
    }

    /// The score a hit must beat to be kept: just below the lowest in the
    /// top, so hits tied with it are still seen.
    fn threshold(&self) -> f32 {
        let min = self.min_score();
        if min == f32::MIN {
            min
        } else {
            min.next_down()
        }
    }

    /// Best first; ties at the boundary included (may exceed `limit`).
    fn into_sorted(mut self) -> Vec<(f32, u32, u32)> {
        let min = self.min_score();
        self.kept.retain(|k| k.score >= min);
        self.kept.sort_by(|a, b| b.cmp(a));
        self.kept
            .into_iter()
            .map(|k| (k.score, k.seg, k.doc))
            .collect()
    }
}

/// What searches of one reader generation share: the documents that
/// expire, each access set's documents, and each audience's documents and
/// BM25 statistics. A reload starts a new generation; nothing is computed
/// again within one.
///
/// Every count here is of the documents alive in the index. Tantivy's own
/// statistics count deleted (replaced) documents until their segments
/// merge, so an index that saw edits would rank differently from a rebuild
/// of the same store; with these, relevance depends only on the documents
/// indexed now, and deleting or rebuilding the index gives the same results.
#[derive(Default)]
struct GenerationCache {
    /// The searcher generation these values describe.
    generation: Option<u64>,
    /// The alive documents that expire, soonest first (ties by id).
    expiring: Vec<Expiring>,
    /// Per access set (sorted terms; `None`: every document): per segment,
    /// the alive documents carrying one of its terms.
    access: HashMap<Option<Vec<String>>, Arc<Vec<BitSet>>>,
    /// Per access set and how many of `expiring` had expired: the
    /// audience a search of that set at such a time ranks.
    audiences: HashMap<(Option<Vec<String>>, usize), Arc<Audience>>,
}

/// An alive document with an expiry.
#[derive(Clone, Copy)]
struct Expiring {
    at: u64,
    seg: u32,
    doc: u32,
    id: MemoryId,
}

/// The documents one search may rank, and the BM25 statistics over them
/// alone.
struct Audience {
    /// Per segment: the alive documents carrying one of the access terms,
    /// less the expired ones.
    sets: Vec<BitSet>,
    /// How many there are.
    docs: u64,
    /// Tokens of their text summed.
    tokens: u64,
    /// How many of them hold a term (filled as terms are asked for).
    doc_freq: Mutex<HashMap<Term, u64>>,
}

/// Bounds on what one generation caches (cleared when exceeded).
const MAX_CACHED_TERMS: usize = 50_000;
const MAX_CACHED_ACCESS_SETS: usize = 256;

/// Each member of `bits`, in order.
fn members(bits: &BitSet) -> impl Iterator<Item = u32> + '_ {
    (0..bits.max_value().div_ceil(64)).flat_map(move |bucket| {
        let mut set = bits.tinyset(bucket);
        std::iter::from_fn(move || set.pop_lowest().map(|b| bucket * 64 + b))
    })
}

impl GenerationCache {
    /// Start over if `searcher` is of another generation than the cache.
    fn refresh(&mut self, searcher: &Searcher, fields: &Fields) -> Result<()> {
        let generation = searcher.generation().generation_id();
        if self.generation == Some(generation) {
            return Ok(());
        }
        *self = GenerationCache::default();
        let term = Term::from_field_text(fields.expiring, EXPIRING);
        for (ord, seg) in searcher.segment_readers().iter().enumerate() {
            let Some(mut postings) = seg
                .inverted_index(fields.expiring)?
                .read_postings(&term, IndexRecordOption::Basic)
                .map_err(|e| NodeError::Index(format!("reading expiry postings: {e}")))?
            else {
                continue;
            };
            let fast = seg.fast_fields();
            let (at, hi, lo) = (fast.u64(EXPIRES)?, fast.u64(ID_HI)?, fast.u64(ID_LO)?);
            let alive = seg.alive_bitset();
            let mut doc = postings.doc();
            while doc != TERMINATED {
                if alive.is_none_or(|a| a.is_alive(doc))
                    && let (Some(at), Some(hi), Some(lo)) =
                        (at.first(doc), hi.first(doc), lo.first(doc))
                {
                    self.expiring.push(Expiring {
                        at,
                        seg: ord as u32,
                        doc,
                        id: id_of_halves(hi, lo),
                    });
                }
                doc = postings.advance();
            }
        }
        self.expiring
            .sort_unstable_by(|a, b| a.at.cmp(&b.at).then_with(|| a.id.cmp(&b.id)));
        self.generation = Some(generation);
        Ok(())
    }

    /// The documents expired by `now_ms` (the gate's rule: at or before).
    fn expired(&self, now_ms: u64) -> &[Expiring] {
        let n = self.expiring.partition_point(|e| e.at <= now_ms);
        &self.expiring[..n]
    }

    /// The audience of a search by a requester holding `access` terms at
    /// `now_ms`, with its statistics.
    fn audience(
        &mut self,
        searcher: &Searcher,
        fields: &Fields,
        access: Option<&[String]>,
        now_ms: u64,
    ) -> Result<Arc<Audience>> {
        let key = access.map(|terms| {
            let mut key = terms.to_vec();
            key.sort();
            key.dedup();
            key
        });
        let expired = self.expired(now_ms).len();
        if let Some(a) = self.audiences.get(&(key.clone(), expired)) {
            return Ok(a.clone());
        }
        let mut sets: Vec<BitSet> = (*self.access_sets(searcher, fields.access, &key)?).clone();
        for e in &self.expiring[..expired] {
            if let Some(set) = sets.get_mut(e.seg as usize) {
                set.remove(e.doc);
            }
        }
        let mut tokens = 0u64;
        for (set, seg) in sets.iter().zip(searcher.segment_readers()) {
            if set.len() > 0 {
                let norms = seg.get_fieldnorms_reader(fields.text)?;
                tokens += members(set)
                    .map(|d| u64::from(norms.fieldnorm(d)))
                    .sum::<u64>();
            }
        }
        let audience = Arc::new(Audience {
            docs: sets.iter().map(|s| s.len() as u64).sum(),
            tokens,
            sets,
            doc_freq: Mutex::default(),
        });
        if self.audiences.len() >= MAX_CACHED_ACCESS_SETS {
            self.audiences.clear();
        }
        self.audiences.insert((key, expired), audience.clone());
        Ok(audience)
    }

    /// Per segment, the alive documents carrying any of `terms` in `field`
    /// (`None`: every alive document).
    fn access_sets(
        &mut self,
        searcher: &Searcher,
        field: Field,
        terms: &Option<Vec<String>>,
    ) -> Result<Arc<Vec<BitSet>>> {
        if let Some(sets) = self.access.get(terms) {
            return Ok(sets.clone());
        }
        let mut sets = Vec::with_capacity(searcher.segment_readers().len());
        for seg in searcher.segment_readers() {
            let alive = seg.alive_bitset();
            let Some(terms) = terms else {
                let mut bits = BitSet::with_max_value_and_full(seg.max_doc());
                if let Some(alive) = alive {
                    for doc in 0..seg.max_doc() {
                        if !alive.is_alive(doc) {
                            bits.remove(doc);
                        }
                    }
                }
                sets.push(bits);
                continue;
            };
            let mut bits = BitSet::with_max_value(seg.max_doc());
            let inverted = seg.inverted_index(field)?;
            for t in terms {
                let term = Term::from_field_text(field, t);
                let postings = inverted
                    .read_postings(&term, IndexRecordOption::Basic)
                    .map_err(|e| NodeError::Index(format!("reading access postings: {e}")))?;
                if let Some(mut postings) = postings {
                    let mut doc = postings.doc();
                    while doc != TERMINATED {
                        if alive.is_none_or(|a| a.is_alive(doc)) {
                            bits.insert(doc);
                        }
                        doc = postings.advance();
                    }
                }
            }
            sets.push(bits);
        }
        let sets = Arc::new(sets);
        if self.access.len() >= MAX_CACHED_ACCESS_SETS {
            self.access.clear();
        }
        self.access.insert(terms.clone(), sets.clone());
        Ok(sets)
    }
}

impl Audience {
    /// How many of the audience's documents hold `term`.
    fn doc_freq(&self, searcher: &Searcher, term: &Term) -> tantivy::Result<u64> {
        let mut memo = self
            .doc_freq
            .lock()
            .map_err(|_| tantivy::TantivyError::InternalError("doc_freq poisoned".into()))?;
        if let Some(&n) = memo.get(term) {
            return Ok(n);
        }
        let mut n = 0u64;
        for (set, seg) in self.sets.iter().zip(searcher.segment_readers()) {
            if set.len() == 0 {
                continue;
            }
            let inverted = seg.inverted_index(term.field())?;
            if let Some(mut postings) = inverted.read_postings(term, IndexRecordOption::Basic)? {
                let mut doc = postings.doc();
                while doc != TERMINATED {
                    n += u64::from(set.contains(doc));
                    doc = postings.advance();
                }
            }
        }
        if memo.len() >= MAX_CACHED_TERMS {
            memo.clear();
        }
        memo.insert(term.clone(), n);
        Ok(n)
    }
}

/// The [`Bm25StatisticsProvider`] over one [`Audience`].
struct AudienceStats<'s> {
    searcher: &'s Searcher,
    audience: &'s Audience,
}

impl Bm25StatisticsProvider for AudienceStats<'_> {
    fn total_num_tokens(&self, _field: Field) -> tantivy::Result<u64> {
        // Only the text field is ever scored.
        Ok(self.audience.tokens)
    }

    fn total_num_docs(&self) -> tantivy::Result<u64> {
        Ok(self.audience.docs)
    }

    fn doc_freq(&self, term: &Term) -> tantivy::Result<u64> {
        self.audience.doc_freq(self.searcher, term)
    }
}

/// One memory row as the derived indexes (this one and [`vectors`]) see it.
#[derive(Debug, Clone)]
pub(crate) struct IndexRow {
    pub id: MemoryId,
    /// What is searched: content, tags and type.
    pub text: String,
    /// The access terms it is found under: its owner (where the owner rule
    /// holds) and its effective grants.
    pub access: Vec<String>,
    /// When it stops being visible to anyone, if it expires.
    pub expires_ms: Option<u64>,
    /// Live and not archived: indexed; otherwise removed.
    pub live: bool,
}

/// Rows a catch-up reads before it hands them on (see [`changed_rows`]).
pub(crate) const ROW_CHUNK: usize = 16_384;

/// Every memory row touched after `from`, handed to `each` in chunks of at
/// most `chunk` rows as they are read (never all of them at once: a first
/// build at 1M), all in one read snapshot; `start` is told their number
/// first. Returns the store's high-water mark they were read at.
pub(crate) fn changed_rows(
    store: &mut Store,
    from: i64,
    chunk: usize,
    start: impl FnOnce(u64),
    mut each: impl FnMut(Vec<IndexRow>) -> Result<()>,
) -> Result<i64> {
    store::catchup::changed_rows(store, from, chunk, start, |rows| {
        each(rows.into_iter().map(IndexRow::from).collect())
    })
}

impl From<store::catchup::ChangedRow> for IndexRow {
    fn from(r: store::catchup::ChangedRow) -> IndexRow {
        let mut access: Vec<String> = r.trusted_owner.iter().map(|o| owner_term(o)).collect();
        access.extend(
            r.effective
                .split(',')
                .filter(|g| !g.is_empty())
                .map(str::to_owned),
        );
        IndexRow {
            id: r.id,
            text: r.text,
            access,
            expires_ms: r.expires_ms,
            live: r.live,
        }
    }
}

/// `(epoch, watermark)` from a commit's payload, if any.
fn payload_watermark(metas: &tantivy::IndexMeta) -> Option<(String, i64)> {
    let rest = metas
        .payload
        .as_deref()?
        .strip_prefix(PAYLOAD_PREFIX)?
        .trim();
    let (epoch, seq) = rest.split_once(' ')?;
    Some((epoch.to_owned(), seq.parse().ok()?))
}

/// How far the commit `metas` is behind the store: the memory rows that
/// moved since its watermark, which its next catch-up takes up. The one
/// definition of the index's lag (`amos status`, `check`, `doctor`, the
/// metrics).
fn lag_at(metas: &tantivy::IndexMeta, store: &Store) -> Result<i64> {
    let epoch = store.epoch()?;
    let since = match payload_watermark(metas) {
        Some((e, w)) if e == epoch => Some(w),
        _ => None,
    };
    store.read(|r| crate::store::catchup::rows_touched_after(r, since))
}

/// What identifies one commit of the index: its opstamp and its segments
/// (with their deletes), so a rebuilt or replaced index never looks the same.
type CommitKey = (u64, Vec<(String, u32)>);

fn commit_key(metas: &tantivy::IndexMeta) -> CommitKey {
    let segments = metas
        .segments
        .iter()
        .map(|s| (s.id().uuid_string(), s.num_deleted_docs()))
        .collect();
    (metas.opstamp, segments)
}

fn id_key(id: &MemoryId) -> String {
    data_encoding::HEXLOWER.encode(&id.0)
}

pub(crate) fn lock(path: &std::path::Path) -> Result<File> {
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(NodeError::io(format!("opening {}", path.display())))?;
    f.lock()
        .map_err(NodeError::io(format!("locking {}", path.display())))?;
    Ok(f)
}

/// Total size of the files under `dir`.
pub fn dir_size(dir: &std::path::Path) -> u64 {
    fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => dir_size(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::NewMemory;
    use proptest::prelude::*;
    use tantivy::schema::{STORED, TEXT};

    /// Changed rows come in chunks of at most the size asked for, each row
    /// once, all of them, after their number; a watermark leaves out what
    /// it covers.
    #[test]
    fn changed_rows_come_in_chunks_each_once() {
        let (_dir, home, mut node, alice) = crate::api::node::test_node("alice");
        let items = (0..10).map(|i| (&alice, NewMemory::new(format!("memory {i}"))));
        let mut ids = node.add_many(items.collect()).unwrap();
        drop(node);
        let mut store = Store::open(&home.db_path()).unwrap();
        for chunk in [1, 3, 10, 64] {
            let (mut total, mut seen, mut sizes) = (None, Vec::new(), Vec::new());
            let high = changed_rows(
                &mut store,
                0,
                chunk,
                |n| total = Some(n),
                |rows| {
                    sizes.push(rows.len());
                    seen.extend(rows.into_iter().map(|r| r.id));
                    Ok(())
                },
            )
            .unwrap();
            assert_eq!(total, Some(10));
            assert!(sizes.iter().all(|s| (1..=chunk).contains(s)), "{sizes:?}");
            seen.sort_unstable();
            ids.sort_unstable();
            assert_eq!(seen, ids, "chunk {chunk}");
            assert_eq!(high, store.max_seq().unwrap());
        }
        let high = store.max_seq().unwrap();
        let mut none = 0;
        changed_rows(
            &mut store,
            high,
            3,
            |_| {},
            |rows| {
                none += rows.len();
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(none, 0);
    }

    proptest! {
        /// A hit's id comes back from the two id columns as it was indexed,
        /// and the columns order ids as the ids order.
        #[test]
        fn an_id_survives_its_two_columns(a in any::<[u8; 16]>(), b in any::<[u8; 16]>()) {
            let (ha, la) = id_halves(&MemoryId(a));
            prop_assert_eq!(id_of_halves(ha, la), MemoryId(a));
            prop_assert_eq!((ha, la).cmp(&id_halves(&MemoryId(b))), a.cmp(&b));
        }
    }

    /// An index written by another analyzer (here the one before stemming:
    /// tantivy's `default` tokenizer) does not match the schema: it is
    /// dropped on open, and the next catch-up indexes the store again.
    #[test]
    fn an_index_built_by_another_analyzer_is_rebuilt_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::new(dir.path());
        fs::create_dir_all(home.index_dir()).unwrap();
        let mut b = Schema::builder();
        let id = b.add_text_field("id", STRING | STORED);
        let text = b.add_text_field("text", TEXT);
        b.add_text_field("access", STRING);
        let old = Index::create_in_dir(home.index_dir(), b.build()).unwrap();
        let mut w: IndexWriter<TantivyDocument> =
            old.writer_with_num_threads(1, 15_000_000).unwrap();
        w.add_document(doc!(id => "00", text => "rollbacks"))
            .unwrap();
        let mut prepared = w.prepare_commit().unwrap();
        prepared.set_payload(&format!("{PAYLOAD_PREFIX} e 7"));
        prepared.commit().unwrap();
        drop(old);

        let idx = RecallIndex::open(&home).unwrap();
        assert_eq!(idx.index.schema(), schema().0);
        assert_eq!(idx.stats().0, 0);
        assert_eq!(idx.watermark().unwrap(), None);
        assert_eq!(idx.terms("Rolled back").unwrap(), ["rollback"]);
    }
}
