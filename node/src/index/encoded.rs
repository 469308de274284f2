//! The encoder's vectors: every live memory's sentence-encoder embedding
//! (all-MiniLM-L6-v2, [`amos_embed::Encoder`]), one vector per window of a
//! long memory, in the disposable index (docs/recall.md, "The encoder").
//!
//! Like the static vectors ([`super::vectors`]) they are derived, local and
//! disposable, found under each memory's access terms (so a memory the
//! requester cannot see never takes a candidate place), and kept in one
//! mapped file, `<home>/vectors/encoder.amv`, with a small companion,
//! `encoder.state` (which text each memory's vectors were made from, and
//! how many windows it has). Unlike them, encoding costs ~30 ms a memory,
//! so a catch-up does not encode: it only notices. A memory whose text is
//! new or changed loses its encoder vectors and becomes *pending*; an
//! access change alone re-files the vectors it has. Pending memories are
//! encoded by [`EncodedIndex::encode_pending`] (`amos index catch-up`, the
//! background catch-up of `amos serve`) and one by one by a single `amos
//! add` ([`EncodedIndex::encode_ids`]); until then recall finds them by
//! their static vector, so nothing is ever missing from recall.
//!
//! A memory's window `c` is stored under the key `id` for `c = 0` and
//! `id XOR mask(c)` for the others ([`chunk_key`]), so the vector table
//! stays keyed by 16 bytes; the state names the memories with more than
//! one window, and a search reports each memory once, at its best window.
//!
//! Boundary: nothing here decides visibility or trusts content: a search
//! returns ids and similarities, which the recall pipeline re-reads from
//! the store and gates.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs;
use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;

use amos_embed::Encoder;
use amos_protocol::MemoryId;

use super::vectors::backing::Source;
use super::vectors::quantize::{self, Quantized};
use super::vectors::snapshot::{self, Provenance};
use super::vectors::table::VectorTable;
use super::{CatchUp, IndexRow, ROW_CHUNK, changed_rows, lock};
use crate::error::{NodeError, Result};
use crate::home::{self, Home};
use crate::progress::Progress;
use crate::store::{self, Store};

/// The snapshot file inside `<home>/vectors/`.
const FILE: &str = "encoder.amv";
/// Its companion: what each memory's vectors were made from.
const STATE_FILE: &str = "encoder.state";
const STATE_MAGIC: &[u8; 8] = b"AMOSENC1";
/// Memories encoded per batch of a catch-up (one forward pass group each,
/// spread over the cores).
pub const BATCH: usize = 64;
/// Unsaved changes (encoded, re-filed or removed memories) a process may
/// hold before it saves the files...
const PERSIST_AFTER: u64 = 256;
/// ... or this fraction of the memories encoded, whichever is more: each
/// save rewrites the whole file, so a catch-up of n memories writes
/// O(n log n) bytes, not O(n²); a search meanwhile finds the unsaved ones
/// by their static vectors.
const PERSIST_SHARE: u64 = 16;
/// Windows kept per memory: a memory longer than this many windows (about
/// 3,500 words) is found by its first ones.
pub const MAX_WINDOWS: usize = 16;

/// The key of memory `id`'s window `c` in the vector table.
pub fn chunk_key(id: &MemoryId, c: usize) -> MemoryId {
    if c == 0 {
        return *id;
    }
    let mask = blake3::hash(format!("amos encoder window {c}").as_bytes());
    let mut key = id.0;
    for (k, m) in key.iter_mut().zip(mask.as_bytes()) {
        *k ^= m;
    }
    MemoryId(key)
}

/// What a memory's vectors were made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Encoded {
    /// The first 8 bytes of the BLAKE3 hash of the text encoded.
    text: [u8; 8],
    windows: u16,
}

fn fingerprint(text: &str) -> [u8; 8] {
    let h = blake3::hash(text.as_bytes());
    let mut out = [0u8; 8];
    out.copy_from_slice(&h.as_bytes()[..8]);
    out
}

/// How far the encoder's vectors are.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct EncoderProgress {
    /// Memories with encoder vectors for their current text.
    pub encoded: u64,
    /// Live memories still waiting for theirs (found by their static vector).
    pub pending: u64,
}

/// An open encoder index.
pub struct EncodedIndex {
    dir: PathBuf,
    file: PathBuf,
    state_file: PathBuf,
    lock_path: PathBuf,
    held: Option<Held>,
}

struct Held {
    table: VectorTable,
    provenance: Provenance,
    encoded: HashMap<MemoryId, Encoded>,
    /// Table key of a window past the first → its memory.
    owner_of: HashMap<MemoryId, MemoryId>,
    /// Live memories without encoder vectors for their current text, once
    /// counted (`None` until a caller needs them: a search does not), then
    /// kept by every change this table takes.
    pending: Option<BTreeSet<MemoryId>>,
    /// The nonce the file pair was written with (or `[0; 16]`: never saved).
    nonce: [u8; 16],
    /// Made by a rebuild: its next save replaces the files without taking
    /// up what they hold. Every other table, a fresh one included, merges
    /// a pair another process saved since (`persist`).
    discards_saved: bool,
    /// The state file as it was when this table was loaded or saved.
    seen: Option<FileStamp>,
    unsaved: u64,
}

/// What tells one version of a file from the next: it is replaced whole by
/// rename, so a new file has a new inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    inode: u64,
    len: u64,
    modified: Option<std::time::SystemTime>,
}

impl Held {
    /// Nothing encoded yet, for vectors of `dim` dimensions: the table
    /// has them from the start, so an empty pair saved now reads back (a
    /// snapshot of dimension 0 is refused as malformed, and every process
    /// that found one started afresh and saved over what another had
    /// encoded meanwhile).
    fn fresh(model: &str, epoch: String, dim: usize) -> Held {
        Held {
            table: VectorTable::new(dim),
            provenance: Provenance {
                model: model.to_owned(),
                epoch,
                watermark: 0,
            },
            encoded: HashMap::new(),
            owner_of: HashMap::new(),
            pending: None,
            nonce: [0; 16],
            discards_saved: false,
            seen: None,
            unsaved: 0,
        }
    }

    /// Drop memory `id`'s vectors; whether it had any.
    fn forget(&mut self, id: &MemoryId) -> bool {
        let Some(e) = self.encoded.remove(id) else {
            return false;
        };
        for c in 0..usize::from(e.windows) {
            let key = chunk_key(id, c);
            self.table.remove(&key);
            if c > 0 {
                self.owner_of.remove(&key);
            }
        }
        true
    }

    /// Store `windows` as memory `id`'s vectors, made from `text`.
    /// (A text with nothing to be near is recorded with no window: it is
    /// encoded, not pending.)
    fn store(&mut self, id: MemoryId, text: [u8; 8], windows: Vec<Quantized>, access: &[String]) {
        self.forget(&id);
        if let Some(p) = &mut self.pending {
            p.remove(&id);
        }
        if let Some(first) = windows.first()
            && self.table.is_empty()
            && self.table.dim() != first.row.len()
        {
            self.table = VectorTable::new(first.row.len());
        }
        let n = windows.len().min(MAX_WINDOWS);
        for (c, v) in windows.into_iter().take(n).enumerate() {
            let key = chunk_key(&id, c);
            self.table.upsert(key, v, access);
            if c > 0 {
                self.owner_of.insert(key, id);
            }
        }
        self.encoded.insert(
            id,
            Encoded {
                text,
                windows: n as u16,
            },
        );
    }

    /// Whether the unsaved changes are due to be saved.
    fn due(&self) -> bool {
        let share = self.encoded.len() as u64 / PERSIST_SHARE;
        self.unsaved > 0
            && (self.unsaved >= PERSIST_AFTER.max(share)
                || self.pending.as_ref().is_some_and(BTreeSet::is_empty))
    }

    /// File memory `id`'s vectors under new access terms (its text is
    /// unchanged): the rows are re-quantized from the table as they are.
    fn refile(&mut self, id: &MemoryId, access: &[String]) {
        let Some(e) = self.encoded.get(id).copied() else {
            return;
        };
        for c in 0..usize::from(e.windows) {
            let key = chunk_key(id, c);
            if let Some(v) = self.table.vector_of(&key) {
                self.table.upsert(key, v, access);
            }
        }
    }
}

impl EncodedIndex {
    /// The encoder index of `home`; nothing is read until the first catch-up.
    pub fn open(home: &Home) -> Result<EncodedIndex> {
        let dir = home.vectors_dir();
        Ok(EncodedIndex {
            file: dir.join(FILE),
            state_file: dir.join(STATE_FILE),
            dir,
            lock_path: home.index_lock_path(),
            held: None,
        })
    }

    /// Notice every change in the store since the last catch-up: a memory
    /// gone loses its vectors; one whose text changed loses them and is
    /// pending; one whose access changed keeps them, re-filed. Encodes
    /// nothing.
    pub fn catch_up(&mut self, store: &mut Store, encoder: &Encoder) -> Result<CatchUp> {
        self.sync_with(store, encoder, false)
    }

    /// Drop every encoder vector: every live memory is pending again.
    pub fn rebuild(&mut self, store: &mut Store, encoder: &Encoder) -> Result<CatchUp> {
        self.sync_with(store, encoder, true)
    }

    fn sync_with(
        &mut self,
        store: &mut Store,
        encoder: &Encoder,
        force_rebuild: bool,
    ) -> Result<CatchUp> {
        let epoch = store.epoch()?;
        let model = encoder.name().to_owned();
        let fits = |h: &Held| h.provenance.model == model && h.provenance.epoch == epoch;
        if force_rebuild || self.held.as_ref().is_some_and(|h| !fits(h)) {
            self.held = None;
        }
        // Another process (serve's catch-up, `amos index catch-up`, an add)
        // may have encoded memories since this one loaded the files: a
        // long-lived process (MCP, the console) takes them up. One holding
        // unsaved work keeps it: its next save merges the two.
        if self
            .held
            .as_ref()
            .is_some_and(|h| h.unsaved == 0 && h.seen != self.stamp())
        {
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
                    let mut fresh = Held::fresh(&model, epoch, encoder.dims());
                    fresh.discards_saved = force_rebuild;
                    fresh
                }
            },
        };
        let from = held.provenance.watermark;
        let high = changed_rows(
            store,
            from,
            ROW_CHUNK,
            |_| {},
            |rows| {
                for row in rows {
                    held.unsaved += 1;
                    if !row.live {
                        if held.forget(&row.id) {
                            out.removed += 1;
                        }
                        if let Some(p) = &mut held.pending {
                            p.remove(&row.id);
                        }
                        continue;
                    }
                    match held.encoded.get(&row.id) {
                        Some(e) if e.text == fingerprint(&row.text) => {
                            held.refile(&row.id, &row.access);
                        }
                        _ => {
                            held.forget(&row.id);
                            if let Some(p) = &mut held.pending {
                                p.insert(row.id);
                            }
                        }
                    }
                }
                Ok(())
            },
        )?;
        held.provenance.watermark = high;
        if out.rebuilt || held.due() {
            self.persist(&mut held)?;
        }
        self.held = Some(held);
        Ok(out)
    }

    /// The live memories waiting for encoder vectors, counted from the
    /// store the first time they are asked for (one read of the live ids).
    fn pending(&mut self, store: &mut Store) -> Result<&mut BTreeSet<MemoryId>> {
        let held = self.held.as_mut().ok_or_else(not_caught_up)?;
        if held.pending.is_none() {
            let live = store::catchup::live_ids(store)?;
            let encoded = &held.encoded;
            held.pending = Some(
                live.into_iter()
                    .filter(|id| !encoded.contains_key(id))
                    .collect(),
            );
        }
        Ok(held.pending.get_or_insert_with(BTreeSet::new))
    }

    /// How many live memories have encoder vectors and how many wait.
    pub fn progress(&mut self, store: &mut Store) -> Result<EncoderProgress> {
        let pending = self.pending(store)?.len() as u64;
        Ok(EncoderProgress {
            encoded: self.held()?.encoded.len() as u64,
            pending,
        })
    }

    /// Whether memory `id`'s current vectors are the encoder's (else it is
    /// pending, or not live).
    pub fn is_encoded(&self, id: &MemoryId) -> bool {
        self.held
            .as_ref()
            .is_some_and(|h| h.encoded.contains_key(id))
    }

    /// Encode up to `max` pending memories, [`BATCH`] at a time, saving the
    /// files when [due](Held::due) and when none is left; returns how many
    /// were encoded. Call [`catch_up`](Self::catch_up) first.
    pub fn encode_pending(
        &mut self,
        store: &mut Store,
        encoder: &Encoder,
        max: usize,
        progress: &Progress,
    ) -> Result<usize> {
        let mut done = 0;
        while done < max {
            let ids: Vec<MemoryId> = self
                .pending(store)?
                .iter()
                .take(BATCH.min(max - done))
                .copied()
                .collect();
            if ids.is_empty() {
                break;
            }
            // Gone since they were counted: no longer pending.
            let rows: Vec<IndexRow> = store::catchup::rows_of(store, &ids)?
                .into_iter()
                .map(IndexRow::from)
                .filter(|r| r.live)
                .collect();
            done += self.encode_rows(encoder, &rows)?.len();
            let pending = self.pending(store)?;
            for id in &ids {
                pending.remove(id);
            }
            progress.inc(ids.len() as u64);
            let mut held = self.held.take().ok_or_else(not_caught_up)?;
            let saved = match held.due() {
                true => self.persist(&mut held),
                false => Ok(()),
            };
            self.held = Some(held);
            saved?;
        }
        Ok(done)
    }

    /// Encode memories `ids` now, if they are live and pending (a single
    /// `amos add`); the file is saved. Call [`catch_up`](Self::catch_up) first.
    /// Each memory encoded, with its first window's vector: what
    /// [`Encoder::embed_query`] makes of its text, so a lookup of what is
    /// near it needs no second pass.
    pub fn encode_ids(
        &mut self,
        store: &mut Store,
        encoder: &Encoder,
        ids: &[MemoryId],
    ) -> Result<Vec<(MemoryId, Vec<f32>)>> {
        let held = self.held()?;
        let wanted: Vec<MemoryId> = ids
            .iter()
            .filter(|id| !held.encoded.contains_key(id))
            .copied()
            .collect();
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<IndexRow> = store::catchup::rows_of(store, &wanted)?
            .into_iter()
            .map(IndexRow::from)
            .filter(|r| r.live)
            .collect();
        let firsts = self.encode_rows(encoder, &rows)?;
        let mut held = self.held.take().ok_or_else(not_caught_up)?;
        let saved = self.persist(&mut held);
        self.held = Some(held);
        saved.map(|_| firsts)
    }

    /// Encode `rows` into the held table; each one's first window.
    fn encode_rows(
        &mut self,
        encoder: &Encoder,
        rows: &[IndexRow],
    ) -> Result<Vec<(MemoryId, Vec<f32>)>> {
        let texts: Vec<&str> = rows.iter().map(|r| r.text.as_str()).collect();
        let vectors = encoder.embed_batch(&texts);
        let held = self.held.as_mut().ok_or_else(not_caught_up)?;
        let mut firsts = Vec::with_capacity(rows.len());
        for (row, mut windows) in rows.iter().zip(vectors) {
            let quantized: Vec<Quantized> = windows
                .iter()
                .filter_map(|w| quantize::quantize(w))
                .collect();
            held.store(row.id, fingerprint(&row.text), quantized, &row.access);
            held.unsaved += 1;
            windows.truncate(1);
            firsts.push((row.id, windows.pop().unwrap_or_default()));
        }
        Ok(firsts)
    }

    /// The `limit` memories nearest to `query` (an encoder vector) among
    /// those carrying one of the `access` terms (`None`: no restriction,
    /// for the local admin), each at its nearest window, nearest first
    /// (ties by memory id). `skip` never takes a candidate place.
    pub fn search(
        &self,
        query: &[f32],
        access: Option<&[String]>,
        skip: &[MemoryId],
        limit: usize,
    ) -> Result<Vec<(MemoryId, f32)>> {
        let held = self.held()?;
        let Some(q) = quantize::query(query) else {
            return Ok(Vec::new());
        };
        if held.table.is_empty() {
            return Ok(Vec::new());
        }
        if q.dim() != held.table.dim() {
            return Err(NodeError::Index(format!(
                "the encoder index holds {}-dimensional vectors, the query has {}",
                held.table.dim(),
                q.dim()
            )));
        }
        let mut skip_keys: Vec<MemoryId> = Vec::with_capacity(skip.len());
        for id in skip {
            let windows = held.encoded.get(id).map_or(1, |e| usize::from(e.windows));
            skip_keys.extend((0..windows).map(|c| chunk_key(id, c)));
        }
        // A memory's windows may take several places; ask for more.
        let extra = held.owner_of.len().min(limit);
        let near = held.table.nearest(&q, access, &skip_keys, limit + extra);
        let mut seen = HashSet::new();
        let mut out = Vec::with_capacity(limit);
        for (key, similarity) in near {
            let id = held.owner_of.get(&key).copied().unwrap_or(key);
            if seen.insert(id) {
                out.push((id, similarity));
            }
            if out.len() == limit {
                break;
            }
        }
        Ok(out)
    }

    /// The state file's stamp now (`None`: no file).
    fn stamp(&self) -> Option<FileStamp> {
        use std::os::unix::fs::MetadataExt;
        let m = fs::metadata(&self.state_file).ok()?;
        Some(FileStamp {
            inode: m.ino(),
            len: m.len(),
            modified: m.modified().ok(),
        })
    }

    fn held(&self) -> Result<&Held> {
        self.held.as_ref().ok_or_else(not_caught_up)
    }

    /// The pair of files, if both read and belong together. The two are
    /// replaced one after the other under the lock: a pair caught between
    /// the renames is read again under it.
    fn load(&self) -> Option<Held> {
        self.load_unlocked().or_else(|| {
            let _guard = lock(&self.lock_path).ok()?;
            self.load_unlocked()
        })
    }

    /// Replace the two files with `held`. If another process replaced them
    /// since this one loaded them, its pair is taken up first and this
    /// process's encoded memories are added to it, so neither loses work.
    fn persist(&self, held: &mut Held) -> Result<()> {
        let _guard = lock(&self.lock_path)?;
        if let Some(theirs) = self.file_nonce()
            && theirs != held.nonce
            && !held.discards_saved
            && let Some(mut newer) = self.load_unlocked()
            && newer.provenance.model == held.provenance.model
            && newer.provenance.epoch == held.provenance.epoch
        {
            // Ours are at least as current for what we encoded; theirs for
            // the rest. A memory either side has for a text the other does
            // not know is caught up again by the next catch-up.
            let ours: Vec<(MemoryId, Encoded)> = held
                .encoded
                .iter()
                .filter(|(id, e)| newer.encoded.get(id) != Some(e))
                .map(|(id, e)| (*id, *e))
                .collect();
            // A memory's windows are all filed under its terms: the first's say.
            let ids: Vec<MemoryId> = ours.iter().map(|(id, _)| *id).collect();
            let mut terms = held.table.terms_by_id(&ids);
            for (id, e) in ours {
                let windows: Vec<Quantized> = (0..usize::from(e.windows))
                    .filter_map(|c| held.table.vector_of(&chunk_key(&id, c)))
                    .collect();
                let access = terms.remove(&id).unwrap_or_default();
                newer.store(id, e.text, windows, &access);
            }
            newer.provenance.watermark = newer.provenance.watermark.min(held.provenance.watermark);
            *held = newer;
        }
        fs::create_dir_all(&self.dir)
            .map_err(NodeError::io("creating the vector index directory"))?;
        let nonce: [u8; 16] = rand::random();
        let state = encode_state(&nonce, &held.encoded);
        home::write_replacing(&self.state_file, &state, 0o600)?;
        let provenance = Provenance {
            model: format!("{} {}", held.provenance.model, hex(&nonce)),
            ..held.provenance.clone()
        };
        let image = held.table.image();
        home::write_replacing_with(&self.file, 0o600, |out| {
            snapshot::write(&provenance, &image, out)
        })?;
        drop(image);
        held.nonce = nonce;
        held.discards_saved = false;
        held.seen = self.stamp();
        held.unsaved = 0;
        // Search the file from now on: the table built here is freed for the map.
        if let Some(mut loaded) = self.load_unlocked()
            && loaded.nonce == nonce
        {
            // The same memories as this table: what is pending is too.
            loaded.pending = held.pending.take();
            *held = loaded;
        }
        Ok(())
    }

    fn load_unlocked(&self) -> Option<Held> {
        let stamp = self.stamp();
        let state = fs::read(&self.state_file).ok()?;
        let (nonce, encoded) = decode_state(&state)?;
        let file = fs::File::open(&self.file).ok()?;
        let source = Arc::new(Source::map(&file).ok()?);
        let (provenance, parts) = snapshot::decode(&source).ok()?;
        let (model, file_nonce) = split_nonce(&provenance.model)?;
        if file_nonce != nonce {
            return None;
        }
        let mut owner_of = HashMap::new();
        for (id, e) in &encoded {
            for c in 1..usize::from(e.windows) {
                owner_of.insert(chunk_key(id, c), *id);
            }
        }
        Some(Held {
            table: VectorTable::from_parts(parts),
            provenance: Provenance {
                model: model.to_owned(),
                ..provenance
            },
            encoded,
            owner_of,
            pending: None,
            nonce,
            discards_saved: false,
            seen: stamp,
            unsaved: 0,
        })
    }

    /// The nonce in the snapshot file's header, if it reads.
    fn file_nonce(&self) -> Option<[u8; 16]> {
        let mut head = Vec::new();
        fs::File::open(&self.file)
            .ok()?
            .take(1 << 16)
            .read_to_end(&mut head)
            .ok()?;
        let (provenance, _, _) = snapshot::decode_header(&head).ok()?;
        split_nonce(&provenance.model).map(|(_, n)| n)
    }
}

fn not_caught_up() -> NodeError {
    NodeError::Index("the encoder index was not caught up".into())
}

fn hex(bytes: &[u8]) -> String {
    data_encoding::HEXLOWER.encode(bytes)
}

/// `"<model> <nonce hex>"` → the model and the nonce.
fn split_nonce(model: &str) -> Option<(&str, [u8; 16])> {
    let (name, nonce) = model.rsplit_once(' ')?;
    let bytes = data_encoding::HEXLOWER.decode(nonce.as_bytes()).ok()?;
    Some((name, bytes.try_into().ok()?))
}

/// The state file: magic, nonce, count, then per memory its id, text
/// fingerprint and window count (little-endian).
fn encode_state(nonce: &[u8; 16], encoded: &HashMap<MemoryId, Encoded>) -> Vec<u8> {
    let mut out = Vec::with_capacity(28 + encoded.len() * 26);
    out.extend_from_slice(STATE_MAGIC);
    out.extend_from_slice(nonce);
    out.extend_from_slice(&(encoded.len() as u32).to_le_bytes());
    let mut ids: Vec<&MemoryId> = encoded.keys().collect();
    ids.sort_unstable();
    for id in ids {
        let e = encoded[id];
        out.extend_from_slice(&id.0);
        out.extend_from_slice(&e.text);
        out.extend_from_slice(&e.windows.to_le_bytes());
    }
    out
}

/// A state file, read as untrusted: `None` for anything malformed (the
/// index is then rebuilt).
fn decode_state(bytes: &[u8]) -> Option<([u8; 16], HashMap<MemoryId, Encoded>)> {
    let rest = bytes.strip_prefix(STATE_MAGIC)?;
    let (nonce, rest) = rest.split_first_chunk::<16>()?;
    let (count, mut rest) = rest.split_first_chunk::<4>()?;
    let count = u32::from_le_bytes(*count) as usize;
    if rest.len() != count.checked_mul(26)? {
        return None;
    }
    let mut encoded = HashMap::with_capacity(count);
    while let Some((entry, more)) = rest.split_first_chunk::<26>() {
        let mut id = [0u8; 16];
        id.copy_from_slice(&entry[..16]);
        let mut text = [0u8; 8];
        text.copy_from_slice(&entry[16..24]);
        let windows = u16::from_le_bytes([entry[24], entry[25]]);
        if usize::from(windows) > MAX_WINDOWS {
            return None;
        }
        encoded.insert(MemoryId(id), Encoded { text, windows });
        rest = more;
    }
    Some((*nonce, encoded))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_round_trips_and_a_bad_one_is_refused() {
        let mut encoded = HashMap::new();
        encoded.insert(
            MemoryId([7; 16]),
            Encoded {
                text: [1; 8],
                windows: 3,
            },
        );
        let bytes = encode_state(&[9; 16], &encoded);
        assert_eq!(decode_state(&bytes), Some(([9; 16], encoded)));
        assert_eq!(decode_state(&bytes[..bytes.len() - 1]), None);
        // No window is a text with nothing to be near (encoded, not pending);
        // more than MAX_WINDOWS is no state amos writes.
        let mut edit = bytes.clone();
        let at = edit.len() - 2;
        edit[at..].copy_from_slice(&0u16.to_le_bytes());
        assert!(decode_state(&edit).is_some());
        edit[at..].copy_from_slice(&(MAX_WINDOWS as u16 + 1).to_le_bytes());
        assert_eq!(decode_state(&edit), None);
    }

    proptest::proptest! {
        /// The state file is read as untrusted: any bytes decode or are
        /// refused, never a panic; what decodes encodes back the same.
        #[test]
        fn any_state_bytes_decode_or_are_refused(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            if let Some((nonce, encoded)) = decode_state(&bytes) {
                proptest::prop_assert_eq!(encode_state(&nonce, &encoded), bytes);
            }
        }
    }

    /// A long-lived process (MCP, the console) takes up what another
    /// process encoded since it loaded the files, though the store did not
    /// move (the encoder writes only its own files).
    /// A pair saved before anything is encoded reads back: the next
    /// process takes it up instead of starting afresh and saving an empty
    /// pair over what another process encoded meanwhile (serve's catch-up
    /// lost its work that way to `amos status` polls in CI).
    #[test]
    fn a_pair_saved_with_nothing_encoded_reads_back() {
        let (_dir, home, mut node, _who) = crate::api::node::test_node("ann");
        node.encoder_status().unwrap();
        let saved = EncodedIndex::open(&home).unwrap();
        let held = saved.load_unlocked().expect("the empty pair reads back");
        assert!(held.encoded.is_empty());
        let mut next = EncodedIndex::open(&home).unwrap();
        let enc = Encoder::builtin().unwrap();
        assert!(
            !next.catch_up(&mut node.store, enc).unwrap().rebuilt,
            "taken up, not rebuilt"
        );
    }

    #[test]
    fn a_long_lived_process_sees_what_another_encoded() {
        let (_dir, home, mut long_lived, who) = crate::api::node::test_node("ann");
        let n = |t: &str| crate::api::NewMemory::new(t.to_owned());
        long_lived
            .add_many(vec![
                (&who, n("payroll corrections go to the pay desk")),
                (&who, n("badges are replaced at reception")),
            ])
            .unwrap();
        let pending = |node: &mut crate::api::node::Node| {
            node.encoder_status().unwrap().unwrap().progress.pending
        };
        assert_eq!(pending(&mut long_lived), 2);
        let mut other = crate::api::node::Node::open(&home).unwrap();
        let hidden = Progress::hidden();
        assert_eq!(other.encoder_catch_up(usize::MAX, &hidden).unwrap(), 2);
        assert_eq!(pending(&mut other), 0);
        assert_eq!(pending(&mut long_lived), 0);
    }

    /// Two processes that encoded different memories since they loaded the
    /// files both keep their work: the later save merges the other's, with
    /// each memory's vectors still found only under its access terms.
    #[test]
    fn two_processes_encoding_apart_both_keep_their_work() {
        let (_dir, home, mut node, who) = crate::api::node::test_node("ann");
        let n = |t: &str| crate::api::NewMemory::new(t.to_owned());
        let ids = node
            .add_many(vec![
                (&who, n("payroll corrections go to the pay desk")),
                (&who, n("badges are replaced at reception")),
            ])
            .unwrap();
        let enc = Encoder::builtin().unwrap();
        let store = &mut node.store;
        let (mut a, mut b) = (
            EncodedIndex::open(&home).unwrap(),
            EncodedIndex::open(&home).unwrap(),
        );
        a.catch_up(store, enc).unwrap();
        b.catch_up(store, enc).unwrap();
        // A encodes the first and holds it unsaved; B encodes and saves the
        // second; A's save must keep B's.
        let rows: Vec<IndexRow> = store::catchup::rows_of(store, &ids[..1])
            .unwrap()
            .into_iter()
            .map(IndexRow::from)
            .collect();
        a.encode_rows(enc, &rows).unwrap();
        assert_eq!(b.encode_ids(store, enc, &ids[1..]).unwrap().len(), 1);
        let mut held = a.held.take().unwrap();
        a.persist(&mut held).unwrap();
        a.held = Some(held);
        let mut c = EncodedIndex::open(&home).unwrap();
        c.catch_up(store, enc).unwrap();
        assert_eq!(c.progress(store).unwrap().pending, 0);
        let q = enc.embed_query("who fixes a wrong paycheck");
        let mine = vec![crate::index::owner_term("ann")];
        let found = c.search(&q, Some(&mine), &[], 2).unwrap();
        assert_eq!(found.len(), 2, "{found:?}");
        let nobody = vec!["team:nobody".to_owned()];
        assert!(c.search(&q, Some(&nobody), &[], 2).unwrap().is_empty());
    }

    /// A process that found no files and made a fresh table still takes up
    /// a pair another process saved meanwhile (the first creation raced:
    /// its save replaced the other's work); only a rebuild replaces them.
    #[test]
    fn a_fresh_table_saved_after_another_process_saved_keeps_its_work() {
        let (_dir, home, mut node, who) = crate::api::node::test_node("ann");
        let id = node
            .add_many(vec![(
                &who,
                crate::api::NewMemory::new("payroll corrections go to the pay desk".to_owned()),
            )])
            .unwrap()[0];
        let enc = Encoder::builtin().unwrap();
        let store = &mut node.store;
        let epoch = store.epoch().unwrap();
        // B saves a pair with the memory encoded.
        let mut b = EncodedIndex::open(&home).unwrap();
        b.catch_up(store, enc).unwrap();
        assert_eq!(b.encode_ids(store, enc, &[id]).unwrap().len(), 1);
        // A had found no files before B's first save: its table is fresh.
        let a = EncodedIndex::open(&home).unwrap();
        let mut held = Held::fresh(enc.name(), epoch.clone(), enc.dims());
        a.persist(&mut held).unwrap();
        let mut c = EncodedIndex::open(&home).unwrap();
        c.catch_up(store, enc).unwrap();
        assert_eq!(c.progress(store).unwrap().pending, 0, "B's work kept");
        // A rebuild's table replaces the pair: everything pending again.
        let mut held = Held::fresh(enc.name(), epoch, enc.dims());
        held.discards_saved = true;
        a.persist(&mut held).unwrap();
        let mut d = EncodedIndex::open(&home).unwrap();
        d.catch_up(store, enc).unwrap();
        assert_eq!(d.progress(store).unwrap().pending, 1, "a rebuild drops it");
    }

    /// A catch-up saves the files by a share of what is encoded, not every
    /// batch (each save rewrites the whole file), and always once nothing
    /// is left pending.
    #[test]
    fn saves_come_by_share_and_at_the_end() {
        let mut h = Held::fresh("m", "e".into(), 384);
        let e = Encoded {
            text: [0; 8],
            windows: 1,
        };
        for n in 0..10_000u32 {
            let mut id = [0u8; 16];
            id[..4].copy_from_slice(&n.to_le_bytes());
            h.encoded.insert(MemoryId(id), e);
        }
        h.pending = Some(BTreeSet::from([MemoryId([9; 16])]));
        h.unsaved = BATCH as u64;
        assert!(!h.due(), "one batch of 10,000 is not due");
        h.unsaved = 10_000 / PERSIST_SHARE - 1;
        assert!(!h.due());
        h.unsaved = 10_000 / PERSIST_SHARE;
        assert!(h.due());
        h.unsaved = 1;
        h.pending = Some(BTreeSet::new());
        assert!(h.due(), "the last batch is saved");
        h.unsaved = 0;
        assert!(!h.due());
    }

    #[test]
    fn window_keys_differ_and_the_first_is_the_id() {
        let id = MemoryId([3; 16]);
        assert_eq!(chunk_key(&id, 0), id);
        let keys: HashSet<MemoryId> = (0..MAX_WINDOWS).map(|c| chunk_key(&id, c)).collect();
        assert_eq!(keys.len(), MAX_WINDOWS);
    }
}
