//! `amos bench --corpus DIR`: load a workload (the format is in `workload.rs`;
//! `amos bench --generate` writes one) into a fresh temporary home through
//! the normal write path, then time adds, searches and context packs as each
//! query's own requester, a full bundle export and import, and the sync and
//! text sections.
//!
//! Figures are medians/percentiles over every query of every pass; the JSON
//! field names are stable so runs can be compared with each other and with
//! other systems measured on the same workload.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use amos_acl::AuthorizedScopes;
use serde::{Deserialize, Serialize};

use super::edits::{self as text, TextReport};
use super::stats::{Machine, Millis, PhaseMemory, millis, peak_rss_bytes, reset_peak_rss};
use super::sync::{self, SyncReport};
use super::workload::{Org, WorkloadMemory, WorkloadQuery};
use crate::api::node::Node;
use crate::error::{NodeError, Result};
use crate::home::Home;
use crate::index::dir_size;
use crate::progress::{Feedback, Progress};
use crate::recall::{PackOptions, RecallMode, RecallOptions, TimeQuery};

/// Memories per `add_many` transaction while loading.
const LOAD_BATCH: usize = 1000;
/// Memories changed on the loaded node before the incremental sync.
const SYNC_CHANGES: usize = 100;

/// How to run the benchmark.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// The corpus file (JSON lines, as `amos bench --generate` writes).
    pub corpus: PathBuf,
    /// Query passes (each runs every query once).
    pub passes: usize,
    /// Load at most this many memories (None = all).
    pub limit: Option<usize>,
    /// Single durable adds timed after the load.
    pub single_adds: usize,
    /// Where to make the temporary home (None = the system temp dir).
    pub workdir: Option<PathBuf>,
    /// Progress bars on stderr (drawn only when it is a terminal).
    pub feedback: Feedback,
    /// Keep the temporary homes afterwards (their path is in the report).
    pub keep: bool,
    /// Run the live-sync section (two in-process nodes over loopback QUIC).
    pub sync: bool,
    /// Use the sentence encoder (`--encoder off`: the node keeps none, the
    /// default mode is then lexical + static, as `fast`).
    pub encoder: bool,
}

/// The sentence encoder's figures (`encoder` in `amos bench --json`).
#[derive(Debug, Serialize)]
pub struct EncoderBench {
    /// The encoder's name.
    pub model: String,
    /// One query's embedding alone (`Encoder::embed_query`), every query of
    /// every pass.
    pub query_ms: Millis,
    /// The catch-up after the bulk load: memories encoded per second of
    /// `catch_up_s`.
    pub memories_per_s: f64,
    /// Encoding every memory the bulk load left pending, in batches of
    /// [`crate::index::encoded::BATCH`] (the searches between batches not
    /// counted).
    pub catch_up_s: f64,
    /// Memories the catch-up encoded.
    pub encoded: usize,
}

/// What `amos bench --json` prints.
#[derive(Debug, Serialize)]
pub struct BenchReport {
    /// What ran it: CPU, cores, the load when it began, amos's version.
    pub machine: Machine,
    /// Memories loaded.
    pub memories: usize,
    /// Queries per pass.
    pub queries: usize,
    /// Timed passes over the queries.
    pub passes: usize,
    /// Seconds to load the corpus.
    pub load_s: f64,
    /// Memories loaded per second.
    pub load_per_s: f64,
    /// One `add` into the loaded store.
    pub add_ms: Millis,
    /// Default mode (hybrid: lexical + the encoder), timed after the
    /// encoder's catch-up has finished.
    pub search_ms: Millis,
    /// The same searches and packs in mode `fast` (lexical + static
    /// vectors, no encoder at query time), warm, interleaved with
    /// `search_warm_ms`.
    pub search_fast_ms: Millis,
    /// Packs in mode `fast`, as `search_fast_ms`.
    pub pack_fast_ms: Millis,
    /// Default-mode searches while the catch-up runs: one query between
    /// each two batches of the catch-up (the index part encoded, part
    /// pending), in the same thread; null with `--encoder off`.
    pub search_during_catch_up_ms: Option<Millis>,
    /// The encoder: query time and catch-up throughput; null with
    /// `--encoder off`.
    pub encoder: Option<EncoderBench>,
    /// The time filter's cost: the same searches again, warm, plain
    /// (`search_warm_ms`) and with `--valid-at` now (`search_valid_at_ms`;
    /// every memory is valid then, so the answers match), in alternating
    /// order.
    pub search_warm_ms: Millis,
    /// The same searches with `--valid-at` now.
    pub search_valid_at_ms: Millis,
    /// The default mode is hybrid (`search_ms`, `search_warm_ms`,
    /// `pack_ms`); the same searches and packs warm in lexical mode alone,
    /// interleaved with `search_warm_ms`.
    pub search_lexical_ms: Millis,
    /// Of the exact 25 nearest vectors each query's requester may see (what
    /// a top-10 search asks the vector index for), the share a search's
    /// vector candidates hold (ties at the 25th count): 1.0 is exact.
    pub vector_recall: f64,
    /// The vector index's part of those searches alone (the 25 nearest).
    pub vector_search_ms: Millis,
    /// Packs in lexical mode, warm.
    pub pack_lexical_ms: Millis,
    /// Packs in the default mode.
    pub pack_ms: Millis,
    /// A single add and then the vector catch-up that embeds it (now and
    /// then one also replaces the index file): what the next hybrid search
    /// would pay for it in the vector index.
    pub add_embed_ms: Millis,
    /// The first full-text index build over the loaded store.
    pub index_build_s: f64,
    /// The first vector catch-up: embed every memory, write the index file.
    pub vectors_build_s: f64,
    /// Size of the vector index file.
    pub vector_bytes: u64,
    /// Memories per second including their vectors:
    /// `memories / (load_s + vectors_build_s)`.
    pub load_with_vectors_per_s: f64,
    /// Memory per phase (Linux): each phase's own peak RSS and the RSS left
    /// after it (`load`, `index`, `vectors`, `encoder`, `search`, `export`,
    /// `import`).
    pub rss: std::collections::BTreeMap<&'static str, PhaseMemory>,
    /// A full-text index rebuild from scratch.
    pub index_rebuild_s: f64,
    /// Size of the store file.
    pub db_bytes: u64,
    /// Size of the full-text index.
    pub index_bytes: u64,
    /// Peak resident memory of the process.
    pub peak_rss_bytes: u64,
    /// Full, signed, encrypted bundle export of the whole store.
    pub export_s: f64,
    /// Verify + import of that bundle into a fresh peer home.
    pub import_s: f64,
    /// Size of the exported bundle.
    pub bundle_bytes: u64,
    /// Of `import_s`: verifying every signature and tag (pass 1).
    pub import_verify_s: f64,
    /// Of `import_s`: applying (pass 2).
    pub import_apply_s: f64,
    /// Correctness: facts the import applied (all of them, into an empty home).
    pub import_applied: u64,
    /// Where the homes were kept (`--keep`), else null.
    pub kept: Option<String>,
    /// Correctness: searches that returned at least one hit.
    pub queries_with_hits: usize,
    /// Correctness: mean hits per search.
    pub mean_hits: f64,
    /// Live sync between two in-process nodes (null when skipped or failed).
    pub sync: Option<SyncReport>,
    /// Why the sync section failed, if it did (the other figures stand).
    pub sync_error: Option<String>,
    /// Concurrent edits of one 10 kB memory on two full peers (null if it failed).
    pub text: Option<TextReport>,
    /// Why the text-edit section failed, if it did.
    pub text_error: Option<String>,
}

fn read_jsonl<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Vec<T>> {
    let text = fs::read_to_string(path)
        .map_err(|e| NodeError::BadInput(format!("cannot read {}: {e}", path.display())))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .map_err(|e| NodeError::BadInput(format!("{}:{}: {e}", path.display(), i + 1)))
        })
        .collect()
}

/// A JSON-lines file read a batch at a time.
struct JsonlReader<T> {
    path: PathBuf,
    lines: std::io::Lines<std::io::BufReader<fs::File>>,
    line: usize,
    _item: std::marker::PhantomData<T>,
}

impl<T: for<'de> Deserialize<'de>> JsonlReader<T> {
    fn open(path: &Path) -> Result<Self> {
        use std::io::BufRead;
        let f = fs::File::open(path)
            .map_err(|e| NodeError::BadInput(format!("cannot read {}: {e}", path.display())))?;
        Ok(JsonlReader {
            path: path.to_owned(),
            lines: std::io::BufReader::new(f).lines(),
            line: 0,
            _item: std::marker::PhantomData,
        })
    }

    /// Up to `n` more items (fewer only at the end of the file).
    fn next_batch(&mut self, n: usize) -> Result<Vec<T>> {
        let mut out = Vec::with_capacity(n.min(LOAD_BATCH));
        while out.len() < n {
            let Some(line) = self.lines.next() else { break };
            self.line += 1;
            let line = line.map_err(|e| {
                NodeError::BadInput(format!("cannot read {}: {e}", self.path.display()))
            })?;
            if line.trim().is_empty() {
                continue;
            }
            out.push(serde_json::from_str(&line).map_err(|e| {
                NodeError::BadInput(format!("{}:{}: {e}", self.path.display(), self.line))
            })?);
        }
        Ok(out)
    }
}

/// Create `org`'s teams, agents and projects on `node`; the agents'
/// requesters by name.
pub fn build_org(node: &mut Node, org: &Org) -> Result<HashMap<String, AuthorizedScopes>> {
    for team in org.teams.keys() {
        node.team_create(team, None)?;
    }
    let mut teams_of: HashMap<&str, Vec<String>> = HashMap::new();
    for (team, members) in &org.teams {
        for m in members {
            teams_of.entry(m.as_str()).or_default().push(team.clone());
        }
    }
    for agent in &org.agents {
        let teams = teams_of.get(agent.as_str()).cloned().unwrap_or_default();
        node.agent_add(agent, "bench", &teams)?;
    }
    for (p, proj) in &org.projects {
        node.project_create(p, &proj.team, None)?;
        for m in &proj.members {
            node.project_member(p, m, true)?;
        }
    }
    let mut requesters = HashMap::new();
    for a in &org.agents {
        requesters.insert(a.clone(), node.requester(a)?);
    }
    Ok(requesters)
}

/// Run the benchmark.
pub fn run(cfg: &BenchConfig) -> Result<BenchReport> {
    let machine = Machine::now();
    let org: Org = serde_json::from_str(&fs::read_to_string(cfg.corpus.join("org.json")).map_err(
        |e| {
            NodeError::BadInput(format!(
                "cannot read {}/org.json: {e}",
                cfg.corpus.display()
            ))
        },
    )?)
    .map_err(|e| NodeError::BadInput(format!("org.json: {e}")))?;
    // Streamed: only one batch (and the first few, for the single adds) is
    // held at a time, so the harness's memory stays flat at any size.
    let memories_path = cfg.corpus.join("memories.jsonl");
    let mut memories = JsonlReader::<WorkloadMemory>::open(&memories_path)?;
    let limit = cfg.limit.unwrap_or(usize::MAX);
    let queries: Vec<WorkloadQuery> = read_jsonl(&cfg.corpus.join("queries.jsonl"))?;

    let tmp = match &cfg.workdir {
        Some(d) => tempfile::tempdir_in(d),
        None => tempfile::tempdir(),
    }
    .map_err(NodeError::io("creating a temporary home"))?;
    let home = Home::new(tmp.path().join("home"));
    Node::init(&home, Some("bench"))?;
    let mut node = Node::open(&home)?;
    if !cfg.encoder {
        node.set_encoder_enabled(false)?;
    }
    let mut rss = std::collections::BTreeMap::new();
    reset_peak_rss();

    // Load, in batches of 1000 per transaction, through the normal write path.
    let requesters = build_org(&mut node, &org)?;
    let pb = Progress::counter(cfg.feedback, "load", "memories");
    let t0 = Instant::now();
    // The first memories, (owner, id), to change before the incremental sync.
    let mut changes: Vec<(String, String)> = Vec::new();
    // The first memories again, for the single adds.
    let mut first: Vec<WorkloadMemory> = Vec::new();
    let mut loaded = 0usize;
    let mut parse_s = 0.0;
    loop {
        let tp = Instant::now();
        let chunk = memories.next_batch(LOAD_BATCH.min(limit - loaded))?;
        parse_s += tp.elapsed().as_secs_f64();
        if chunk.is_empty() {
            break;
        }
        loaded += chunk.len();
        let mut batch = Vec::with_capacity(chunk.len());
        for m in &chunk {
            let who = requesters
                .get(&m.owner)
                .ok_or_else(|| NodeError::BadInput(format!("unknown owner {}", m.owner)))?;
            batch.push((who, m.to_new()?));
        }
        let ids = node.add_many(batch)?;
        for (m, id) in chunk.iter().zip(ids) {
            if changes.len() < SYNC_CHANGES {
                changes.push((m.owner.clone(), id.to_string()));
            }
        }
        pb.inc(chunk.len() as u64);
        let room = cfg.single_adds.saturating_sub(first.len());
        first.extend(chunk.into_iter().take(room));
    }
    // Reading and parsing the workload file is the harness's, not the node's.
    let load_s = t0.elapsed().as_secs_f64() - parse_s;
    let memories = first;
    drop(pb);

    rss.insert("load", PhaseMemory::end_phase());

    // First catch-up builds the index.
    let t0 = Instant::now();
    node.index()?;
    node.caught_up_index()?;
    let index_build_s = t0.elapsed().as_secs_f64();
    rss.insert("index", PhaseMemory::end_phase());
    let t0 = Instant::now();
    node.caught_up_vectors()?;
    let vectors_build_s = t0.elapsed().as_secs_f64();
    rss.insert("vectors", PhaseMemory::end_phase());

    // The encoder's catch-up of everything the bulk load left pending,
    // with one default-mode search between each two batches.
    let (encoder, search_during_catch_up) = match cfg.encoder {
        true => {
            let (e, during) = encoder_catch_up(&mut node, &queries, cfg)?;
            (Some(e), Some(millis(during)))
        }
        false => (None, None),
    };
    rss.insert("encoder", PhaseMemory::end_phase());

    // Queries, each as its own requester (the gate is rebuilt per query).
    let pb = Progress::bar(
        cfg.feedback,
        "queries",
        "recalls",
        (queries.len() * cfg.passes * 5) as u64,
    );
    let mut search = Vec::new();
    let mut search_valid_at = Vec::new();
    let mut search_warm = Vec::new();
    let mut search_lexical = Vec::new();
    let mut pack_lexical = Vec::new();
    let mut search_fast = Vec::new();
    let mut pack_fast = Vec::new();
    let fast = RecallOptions {
        mode: RecallMode::Fast,
        ..RecallOptions::top(10)
    };
    let mut fast_pack = PackOptions::new(1200);
    fast_pack.recall.mode = RecallMode::Fast;
    let plain = RecallOptions::top(10);
    let lexical = RecallOptions {
        mode: RecallMode::Lexical,
        ..RecallOptions::top(10)
    };
    let mut lexical_pack = PackOptions::new(1200);
    lexical_pack.recall.mode = RecallMode::Lexical;
    let valid_at = RecallOptions {
        time: TimeQuery {
            valid_at_ms: Some(node.now_ms()),
            ..TimeQuery::default()
        },
        ..RecallOptions::top(10)
    };
    let mut pack = Vec::new();
    let mut with_hits = 0;
    let mut total_hits = 0;
    for _ in 0..cfg.passes {
        for q in &queries {
            let t0 = Instant::now();
            let who = node.requester(&q.agent)?;
            let hits = node.search(&who, &q.query, 10)?;
            search.push(t0.elapsed().as_secs_f64() * 1e3);
            with_hits += usize::from(!hits.is_empty());
            total_hits += hits.len();
            pb.inc(1);
            let t0 = Instant::now();
            let who = node.requester(&q.agent)?;
            node.pack(&who, &q.query, 1200)?;
            pack.push(t0.elapsed().as_secs_f64() * 1e3);
            pb.inc(1);
        }
    }
    // The time filter's cost: each query again, plain and with --valid-at,
    // in alternating order (so neither always meets the other's warm
    // caches), after the passes above (so neither does first-touch work).
    for (i, q) in queries
        .iter()
        .cycle()
        .take(queries.len() * cfg.passes)
        .enumerate()
    {
        for valid in [i % 2 == 0, i % 2 == 1] {
            let opts = if valid { &valid_at } else { &plain };
            let t0 = Instant::now();
            let who = node.requester(&q.agent)?;
            node.search_with(&who, &q.query, opts)?;
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            match valid {
                true => search_valid_at.push(ms),
                false => search_warm.push(ms),
            }
        }
        let t0 = Instant::now();
        let who = node.requester(&q.agent)?;
        node.search_with(&who, &q.query, &lexical)?;
        search_lexical.push(t0.elapsed().as_secs_f64() * 1e3);
        let t0 = Instant::now();
        let who = node.requester(&q.agent)?;
        node.pack_with(&who, &q.query, &lexical_pack)?;
        pack_lexical.push(t0.elapsed().as_secs_f64() * 1e3);
        let t0 = Instant::now();
        let who = node.requester(&q.agent)?;
        node.search_with(&who, &q.query, &fast)?;
        search_fast.push(t0.elapsed().as_secs_f64() * 1e3);
        let t0 = Instant::now();
        let who = node.requester(&q.agent)?;
        node.pack_with(&who, &q.query, &fast_pack)?;
        pack_fast.push(t0.elapsed().as_secs_f64() * 1e3);
        pb.inc(2);
    }
    drop(pb);
    let (mut found, mut exact, mut vector_search) = (0, 0, Vec::new());
    for _ in 0..cfg.passes {
        for q in &queries {
            let who = node.requester(&q.agent)?;
            let probe = node.vector_probe(&who, &q.query, 25)?;
            found += probe.found;
            exact += probe.exact;
            vector_search.push(probe.search_ms);
        }
    }
    let vector_recall = if exact == 0 {
        1.0
    } else {
        found as f64 / exact as f64
    };
    rss.insert("search", PhaseMemory::end_phase());

    // Single durable adds after the load; then as many again, each
    // embedded into the vector index at once.
    let mut adds = Vec::new();
    let mut adds_embedded = Vec::new();
    for (i, m) in memories
        .iter()
        .cycle()
        .take(2 * cfg.single_adds)
        .enumerate()
    {
        let who = requesters
            .get(&m.owner)
            .ok_or_else(|| NodeError::BadInput(format!("unknown owner {}", m.owner)))?;
        let new = m.to_new()?;
        let embedded = i >= cfg.single_adds;
        let t0 = Instant::now();
        node.add(who, new)?;
        if embedded {
            node.caught_up_vectors()?;
        }
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        match embedded {
            true => adds_embedded.push(ms),
            false => adds.push(ms),
        }
    }

    let t0 = Instant::now();
    node.index_rebuild(cfg.feedback)?;
    let index_rebuild_s = t0.elapsed().as_secs_f64();

    // Bundle: export everything (signed, encrypted), import into a fresh peer.
    let peer_home = Home::new(tmp.path().join("peer"));
    Node::init(&peer_home, Some("bench-peer"))?;
    let mut peer = Node::open(&peer_home)?;
    node.peer_add(&peer.node_id().to_string(), None, "full")?;
    peer.peer_add(&node.node_id().to_string(), None, "full")?;
    let key = node.mesh_key_generate()?;
    peer.mesh_key_set(&key.to_string())?;
    let bundle_path = tmp.path().join("bench.bndl");
    let t0 = Instant::now();
    reset_peak_rss();
    let exported = node.bundle_export(&bundle_path, &[], None, cfg.feedback)?;
    let export_s = t0.elapsed().as_secs_f64();
    rss.insert("export", PhaseMemory::end_phase());
    let t0 = Instant::now();
    let imported = peer.bundle_import(&bundle_path, cfg.feedback)?;
    let import_s = t0.elapsed().as_secs_f64();
    rss.insert("import", PhaseMemory::end_phase());
    if node.digest(&[])? != peer.digest(&[])? {
        return Err(NodeError::Failed(
            "bench: the imported peer's digest differs from the exporter's".into(),
        ));
    }

    let (sync, sync_error) = if cfg.sync {
        match sync::run(&mut node, &changes, tmp.path()) {
            Ok(r) => (Some(r), None),
            Err(e) => (None, Some(e.to_string())),
        }
    } else {
        (None, None)
    };

    let (text, text_error) = match text::run(tmp.path(), 20) {
        Ok(r) => (Some(r), None),
        Err(e) => (None, Some(e.to_string())),
    };

    let db_bytes = ["amos.db", "amos.db-wal"]
        .iter()
        .filter_map(|f| fs::metadata(home.root().join(f)).ok())
        .map(|m| m.len())
        .sum();
    let searches = search.len();
    let index_bytes = dir_size(&home.index_dir());
    let vector_bytes = dir_size(&home.vectors_dir());
    // The peak of the whole run: the phases' own peaks and what came after.
    let peak_rss_bytes = rss
        .values()
        .map(|p: &PhaseMemory| p.peak_bytes)
        .chain([peak_rss_bytes()])
        .max()
        .unwrap_or(0);
    // Keep the homes for inspection, or let `tmp` delete them on return.
    let (kept, _tmp) = if cfg.keep {
        (Some(tmp.keep().display().to_string()), None)
    } else {
        (None, Some(tmp))
    };
    Ok(BenchReport {
        machine,
        memories: loaded,
        queries: queries.len(),
        passes: cfg.passes,
        load_s,
        load_per_s: loaded as f64 / load_s.max(1e-9),
        add_ms: millis(adds),
        search_ms: millis(search),
        search_fast_ms: millis(search_fast),
        pack_fast_ms: millis(pack_fast),
        search_during_catch_up_ms: search_during_catch_up,
        encoder,
        search_warm_ms: millis(search_warm),
        search_valid_at_ms: millis(search_valid_at),
        search_lexical_ms: millis(search_lexical),
        vector_recall,
        vector_search_ms: millis(vector_search),
        pack_lexical_ms: millis(pack_lexical),
        pack_ms: millis(pack),
        add_embed_ms: millis(adds_embedded),
        index_build_s,
        vectors_build_s,
        vector_bytes,
        load_with_vectors_per_s: loaded as f64 / (load_s + vectors_build_s).max(1e-9),
        rss,
        index_rebuild_s,
        db_bytes,
        index_bytes,
        peak_rss_bytes,
        export_s,
        import_s,
        bundle_bytes: exported.bytes,
        import_verify_s: imported.verify_ms as f64 / 1e3,
        import_apply_s: imported.apply_ms as f64 / 1e3,
        import_applied: imported.applied,
        kept,
        queries_with_hits: with_hits,
        mean_hits: total_hits as f64 / searches.max(1) as f64,
        sync,
        sync_error,
        text,
        text_error,
    })
}

/// Encode every memory the bulk load left pending, a batch at a time,
/// timing the batches alone; between each two, one default-mode search
/// (the queries in turn), timed apart. Then each query's embedding alone.
fn encoder_catch_up(
    node: &mut Node,
    queries: &[WorkloadQuery],
    cfg: &BenchConfig,
) -> Result<(EncoderBench, Vec<f64>)> {
    let before = node
        .encoder_status()?
        .ok_or_else(|| NodeError::Failed("bench: the encoder is off on the bench's node".into()))?;
    let pb = Progress::bar(cfg.feedback, "encoder", "memories", before.progress.pending);
    let mut catch_up_s = 0.0;
    let mut encoded = 0;
    let mut during = Vec::new();
    let mut next = queries.iter().cycle();
    loop {
        let t0 = Instant::now();
        let n = node.encoder_catch_up(crate::index::encoded::BATCH, &pb)?;
        catch_up_s += t0.elapsed().as_secs_f64();
        encoded += n;
        if n == 0 {
            break;
        }
        if let Some(q) = next.next() {
            let t0 = Instant::now();
            let who = node.requester(&q.agent)?;
            node.search(&who, &q.query, 10)?;
            during.push(t0.elapsed().as_secs_f64() * 1e3);
        }
    }
    drop(pb);
    let Some((_, enc, _)) = node.encoder_parts()? else {
        return Err(NodeError::Failed(
            "bench: the encoder went off during the catch-up".into(),
        ));
    };
    let mut query_ms = Vec::with_capacity(queries.len() * cfg.passes);
    for _ in 0..cfg.passes {
        for q in queries {
            let t0 = Instant::now();
            std::hint::black_box(enc.embed_query(&q.query));
            query_ms.push(t0.elapsed().as_secs_f64() * 1e3);
        }
    }
    Ok((
        EncoderBench {
            model: before.model,
            query_ms: millis(query_ms),
            memories_per_s: encoded as f64 / catch_up_s.max(1e-9),
            catch_up_s,
            encoded,
        },
        during,
    ))
}
