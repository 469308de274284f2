//! The node itself: opening and initialising it, its identity, clock,
//! store and (lazily) its indexes, the one commit path of local writes, and
//! the gated reads every front end shares (`requester`, `get`, `list`).
//! The other operations are `impl Node` blocks in the rooms beside this one
//! (`memories`, `org`, `recall`, `peers`, …).
//!
//! A write turns into signed facts ([`Node::commit`]) stamped with the
//! persisted HLC. A read builds the requester's [`AuthorizedScopes`] from the
//! org graph *as stored now*, and every memory it returns comes from the
//! store's gated readers ([`Store::visible`] and friends) as a
//! [`Visible`] admitted by [`AuthorizedScopes::admit`].
//!
//! Invariant: a memory the requester cannot see is reported exactly like one
//! that does not exist ([`NodeError::NoSuchMemory`]); owner-only operations
//! on a visible memory refuse others with [`NodeError::Refused`].

use crate::error::UnknownKind;
use std::borrow::Cow;
use std::cell::RefCell;
use std::sync::Arc;

use amos_acl::{AuthorizedScopes, Visible};
use amos_protocol::{
    AgentId, Fact, FactBody, MemoryId, MemoryType, NodeId, NodeIdentity, Scope, SignedFact,
    Verified,
};
use rand::RngExt;

use crate::clock::{SystemClock, WallClock};
use crate::error::{NodeError, Result};
use crate::home::Home;
use crate::index::RecallIndex;
use crate::index::encoded::{EncodedIndex, EncoderProgress};
use crate::index::vectors::VectorIndex;
use crate::recall::RecallMode;
use crate::recall::time::{self, TimeQuery, ValidTime};
use crate::store::memory::MemoryRecord;
use crate::store::org::{self, StoredOrg};
use crate::store::{Readable, Store, Tx};
use amos_embed::{Encoder, StaticModel};

use crate::api::gates::Gates;
use crate::api::signing::{admit_local, sign_all};

/// What `amos init` reports.
#[derive(Debug, Clone, serde::Serialize)]
pub struct InitReport {
    /// The node's id.
    pub node_id: String,
    /// Its home directory.
    pub home: String,
    /// False when the home was initialized already (nothing changed).
    pub created: bool,
}

/// What one recall reads, caught up: see [`Node::recall_parts`].
pub(crate) struct RecallParts<'a> {
    pub index: &'a RecallIndex,
    pub vectors: Option<(&'a VectorIndex, &'a StaticModel)>,
    /// The encoder's vectors and the encoder (hybrid and semantic recall,
    /// unless the encoder is off); memories it has not encoded yet are
    /// found by their static vectors.
    pub encoded: Option<(&'a EncodedIndex, &'a Encoder)>,
    pub store: &'a mut Store,
    /// The thread a recall's vector walk runs on while it reads rows; only
    /// with `vectors` (`None`: a lexical recall, a node's first, one core,
    /// or no thread could be started; the walk then runs first, on the
    /// caller's thread).
    pub walker: Option<&'a rayon::ThreadPool>,
}

/// The built-in encoder, or one loaded from `AMOS_ENCODER`'s directory.
pub(crate) enum EncoderRef {
    Builtin(&'static Encoder),
    Loaded(Box<Encoder>),
}

impl std::ops::Deref for EncoderRef {
    type Target = Encoder;
    fn deref(&self) -> &Encoder {
        match self {
            EncoderRef::Builtin(e) => e,
            EncoderRef::Loaded(e) => e,
        }
    }
}

/// What `amos status` says of the encoder.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EncoderStatus {
    /// The encoder's name (with its files' version).
    pub model: String,
    /// Its memories encoded and pending.
    #[serde(flatten)]
    pub progress: EncoderProgress,
}

/// An open node: identity, store and (lazily) the index.
pub struct Node {
    home: Home,
    pub(crate) identity: NodeIdentity,
    name: String,
    pub(crate) store: Store,
    index: Option<RecallIndex>,
    /// The vector index and the model that fills it, opened on first use.
    vectors: Option<(VectorIndex, Cow<'static, StaticModel>)>,
    /// The encoder's index and the encoder, opened on first use (`None`:
    /// not yet; `Some(None)`: the encoder is off on this node).
    encoder: Option<Option<(EncodedIndex, EncoderRef)>>,
    /// The recall's second thread ([`RecallParts::walker`]), started with
    /// the second recall that walks the vectors: a process that recalls
    /// once (a CLI command) would pay more to start it than it saves.
    /// (`None`: not tried yet; `Some(None)`: no thread, walk in line.)
    pub(crate) walker: Option<Option<rayon::ThreadPool>>,
    /// Whether a recall has walked the vectors yet.
    walked: bool,
    pub(crate) clock: Arc<dyn WallClock>,
    /// The front end reads come through, for the read audit (`api::reads`).
    pub(crate) front: &'static str,
    /// The requesters' gates and the tokens accepted, kept under the
    /// store's gate stamp ([`Gates`]).
    pub(crate) gates: RefCell<Gates>,
}

/// The one-thread pool a recall's vector walk runs on, where there is a
/// second core for it; `None` otherwise, or when no thread can be started.
fn start_walker() -> Option<rayon::ThreadPool> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores < 2 {
        return None;
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .thread_name(|_| "amos-vector-walk".to_owned())
        .build()
        .map_err(|e| tracing::debug!(error = %e, "no vector-walk thread; walking in line"))
        .ok()
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Node({:?})", self.identity.node_id())
    }
}

impl Node {
    /// Create a home (identity, database) if it does not exist; idempotent.
    pub fn init(home: &Home, name: Option<&str>) -> Result<InitReport> {
        let mut rng = rand::rng();
        let secret: [u8; 32] = rng.random();
        let epoch: [u8; 16] = rng.random();
        let default_name = std::env::var("HOSTNAME").unwrap_or_else(|_| "amos".into());
        let (identity, created) = home.create(name.unwrap_or(&default_name), secret)?;
        Store::create(&home.db_path(), epoch)?;
        Ok(InitReport {
            node_id: identity.node_id().to_string(),
            home: home.root().display().to_string(),
            created,
        })
    }

    /// Open an existing home with the system clock.
    pub fn open(home: &Home) -> Result<Node> {
        Node::open_with_clock(home, Arc::new(SystemClock))
    }

    /// Open an existing home with an injected clock (tests).
    pub fn open_with_clock(home: &Home, clock: Arc<dyn WallClock>) -> Result<Node> {
        let info = home.info()?;
        let identity = home.load_identity()?;
        let store = Store::open(&home.db_path())?;
        let mut node = Node {
            home: home.clone(),
            identity,
            name: info.name,
            store,
            index: None,
            vectors: None,
            encoder: None,
            walker: None,
            walked: false,
            clock,
            front: "cli",
            gates: RefCell::default(),
        };
        node.settle_clashes()?;
        Ok(node)
    }

    /// Re-judge the memories held for any legacy scope clash not judged yet
    /// (one the schema migration found in the audit log, docs/design.md
    /// §6.2): until then a grant to the clashed id would still count on a
    /// memory that may mean the other scope. One read when there is none.
    fn settle_clashes(&mut self) -> Result<()> {
        if !self.store.read(|r| crate::store::clashes::unjudged(r))? {
            return Ok(());
        }
        let (me, now) = (self.node_id(), self.now_ms());
        self.store.write(|tx| {
            crate::store::replica::SqlReplica::new(tx, me, now)
                .rejudge_clashed()
                .map(drop)
        })
    }

    /// This node's id.
    pub fn node_id(&self) -> NodeId {
        self.identity.node_id()
    }
    /// This node's name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Its home.
    pub fn home(&self) -> &Home {
        &self.home
    }
    /// The node's signing identity (for bundle trailers and pairing).
    pub(crate) fn identity(&self) -> &NodeIdentity {
        &self.identity
    }
    /// Its store, for reads.
    pub fn store(&self) -> &Store {
        &self.store
    }
    /// The node's wall clock now (Unix ms).
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// The index, opened on first use.
    pub fn index(&mut self) -> Result<&mut RecallIndex> {
        if self.index.is_none() {
            self.index = Some(RecallIndex::open(&self.home)?);
        }
        self.index
            .as_mut()
            .ok_or_else(|| NodeError::Index("index not open".into()))
    }

    /// The embedding model: `--model`, else `AMOS_MODEL`, else the built-in
    /// one. A directory that is not a model is bad input.
    fn load_model(&self) -> Result<Cow<'static, StaticModel>> {
        let model = match self.home.model_dir() {
            Some(dir) => StaticModel::from_dir(dir).map(Cow::Owned),
            None => StaticModel::from_env(),
        };
        model.map_err(|e| NodeError::BadInput(format!("embedding model: {e}")))
    }

    /// The vector index, its model and the store, opened on first use.
    fn vector_parts(&mut self) -> Result<(&mut VectorIndex, &StaticModel, &mut Store)> {
        if self.vectors.is_none() {
            let model = self.load_model()?;
            self.vectors = Some((VectorIndex::open(&self.home)?, model));
        }
        let Node { vectors, store, .. } = self;
        let (vectors, model) = vectors
            .as_mut()
            .ok_or_else(|| NodeError::Index("vector index not open".into()))?;
        Ok((vectors, model, store))
    }

    /// The encoder: `AMOS_ENCODER`'s directory, else the built-in one. A
    /// directory that is not an encoder is bad input.
    fn load_encoder() -> Result<EncoderRef> {
        let loaded = match std::env::var_os(amos_embed::ENCODER_ENV) {
            Some(dir) if !dir.is_empty() => Encoder::from_dir(std::path::Path::new(&dir))
                .map(|e| EncoderRef::Loaded(Box::new(e))),
            _ => Encoder::builtin().map(EncoderRef::Builtin),
        };
        loaded.map_err(|e| NodeError::BadInput(format!("encoder: {e}")))
    }

    /// The encoder's index, the encoder and the store, opened on first use;
    /// `None` when the encoder is off on this node.
    pub(crate) fn encoder_parts(
        &mut self,
    ) -> Result<Option<(&mut EncodedIndex, &Encoder, &mut Store)>> {
        if self.encoder.is_none() {
            let on = self
                .store
                .read(|r| crate::store::catchup::encoder_enabled(r))?;
            self.encoder = Some(match on {
                true => Some((EncodedIndex::open(&self.home)?, Node::load_encoder()?)),
                false => None,
            });
        }
        let Node { encoder, store, .. } = self;
        Ok(match encoder {
            Some(Some((index, enc))) => Some((index, &**enc, store)),
            _ => None,
        })
    }

    /// Whether this node keeps encoder vectors (`amos config set encoder`).
    pub fn encoder_enabled(&self) -> Result<bool> {
        self.store
            .read(|r| crate::store::catchup::encoder_enabled(r))
    }

    /// Switch the encoder on or off (local). Off drops nothing on disk but
    /// recall stops using it; `index rebuild` removes its files' content.
    pub fn set_encoder_enabled(&mut self, on: bool) -> Result<()> {
        self.store
            .write(|tx| crate::store::catchup::set_encoder_enabled(tx, on))?;
        self.encoder = None;
        Ok(())
    }

    /// The encoder's name and how many memories it has encoded and has
    /// still to encode (caught up first); `None` when it is off.
    pub fn encoder_status(&mut self) -> Result<Option<EncoderStatus>> {
        let Some((index, enc, store)) = self.encoder_parts()? else {
            return Ok(None);
        };
        index.catch_up(store, enc)?;
        Ok(Some(EncoderStatus {
            model: enc.name().to_owned(),
            progress: index.progress(store)?,
        }))
    }

    /// Encode up to `max` pending memories (`amos index catch-up`, the
    /// background catch-up of `serve`); how many were encoded (0 when the
    /// encoder is off).
    pub fn encoder_catch_up(
        &mut self,
        max: usize,
        progress: &crate::progress::Progress,
    ) -> Result<usize> {
        let Some((index, enc, store)) = self.encoder_parts()? else {
            return Ok(0);
        };
        index.catch_up(store, enc)?;
        index.encode_pending(store, enc, max, progress)
    }

    /// Encode memory `id` now if it is pending (a single add); its first
    /// window's vector, the query that finds what is near it. Never fails
    /// the write that made it: a memory left pending (`None`) is found by
    /// its static vector until a catch-up encodes it.
    pub(crate) fn encode_now(&mut self, id: MemoryId) -> Option<Vec<f32>> {
        let done = (|| -> Result<Option<Vec<f32>>> {
            let Some((index, enc, store)) = self.encoder_parts()? else {
                return Ok(None);
            };
            index.catch_up(store, enc)?;
            Ok(index.encode_ids(store, enc, &[id])?.pop().map(|(_, v)| v))
        })();
        done.unwrap_or_else(|e| {
            tracing::debug!(error = %e, "left pending for the encoder's catch-up");
            None
        })
    }

    /// Drop the encoder's vectors: every memory is pending again.
    pub(crate) fn rebuild_encoder(&mut self) -> Result<Option<crate::index::CatchUp>> {
        let Some((index, enc, store)) = self.encoder_parts()? else {
            return Ok(None);
        };
        index.rebuild(store, enc).map(Some)
    }

    /// Catch up what a recall in `mode` reads — the full-text index (even
    /// in semantic mode: resonance and `--known-at` use its analyzer) and,
    /// unless lexical, the vector index — and hand them out with the store.
    pub(crate) fn recall_parts(&mut self, mode: RecallMode) -> Result<RecallParts<'_>> {
        self.index()?;
        if mode.semantic() {
            self.vector_parts()?;
        }
        if mode.encoder() {
            self.encoder_parts()?;
        }
        let Node {
            index,
            vectors,
            encoder,
            store,
            walker,
            walked,
            ..
        } = self;
        let index = index
            .as_mut()
            .ok_or_else(|| NodeError::Index("index not open".into()))?;
        index.catch_up(store)?;
        let vectors = match vectors.as_mut() {
            Some((v, model)) if mode.semantic() => {
                v.catch_up(store, model)?;
                Some((&*v, &**model))
            }
            _ => None,
        };
        let encoded = match encoder.as_mut() {
            Some(Some((e, enc))) if mode.encoder() => {
                e.catch_up(store, enc)?;
                Some((&*e, &**enc))
            }
            _ => None,
        };
        let walker = match vectors {
            Some(_) if *walked => walker.get_or_insert_with(start_walker).as_ref(),
            _ => None,
        };
        *walked |= vectors.is_some();
        Ok(RecallParts {
            index,
            vectors,
            encoded,
            store,
            walker,
        })
    }

    /// Catch the vector index up: what the next semantic search would
    /// otherwise do first for it.
    pub(crate) fn caught_up_vectors(&mut self) -> Result<()> {
        let (vectors, model, store) = self.vector_parts()?;
        vectors.catch_up(store, model).map(|_| ())
    }

    /// Drop and rebuild the vector index; returns what it did and `(vectors, bytes)`.
    pub(crate) fn rebuild_vectors(
        &mut self,
        progress: &crate::progress::Progress,
    ) -> Result<(crate::index::CatchUp, (u64, u64))> {
        let (vectors, model, store) = self.vector_parts()?;
        let done = vectors.rebuild(store, model, progress)?;
        Ok((done, vectors.stats()?))
    }

    /// Catch the index up and hand out both it and the store.
    pub fn caught_up_index(&mut self) -> Result<(&RecallIndex, &mut Store)> {
        self.index()?;
        let Node { index, store, .. } = self;
        let index = index
            .as_mut()
            .ok_or_else(|| NodeError::Index("index not open".into()))?;
        index.catch_up(store)?;
        Ok((index, store))
    }

    /// Drop and rebuild the index; returns what it did and `(docs, bytes)`.
    pub(crate) fn rebuild_index(
        &mut self,
        progress: &crate::progress::Progress,
    ) -> Result<(crate::index::CatchUp, (u64, u64))> {
        self.index()?;
        let Node { index, store, .. } = self;
        let index = index
            .as_mut()
            .ok_or_else(|| NodeError::Index("index not open".into()))?;
        let done = index.rebuild(store, progress)?;
        Ok((done, index.stats()))
    }

    /// Sign and store facts authored by this node, all in one transaction.
    /// `build` gets the transaction (to read current state) and returns the
    /// bodies to write; each gets its own fresh clock.
    pub(crate) fn commit<T>(
        &mut self,
        build: impl FnOnce(&mut Tx<'_>) -> Result<(Vec<FactBody>, T)>,
    ) -> Result<(Vec<Verified<SignedFact>>, T)> {
        let now = self.clock.now_ms();
        let me = self.identity.node_id();
        let identity = &self.identity;
        self.store.write(|tx| {
            let (bodies, out) = build(tx)?;
            let mut unsigned = Vec::with_capacity(bodies.len());
            for body in bodies {
                unsigned.push(Fact {
                    clock: tx.tick(now, me)?,
                    body,
                });
            }
            let facts = sign_all(identity, unsigned)?;
            for signed in &facts {
                tx.put(&admit_local(identity, signed.clone())?)?;
            }
            Ok((facts, out))
        })
    }

    // ---------------------------------------------------------------- requesters

    /// The gate for `agent`, as the org graph stored now makes it (the one
    /// kept from an earlier call while the gate stamp is unchanged,
    /// [`Gates`]). An unknown agent is bad input (there is no implicit
    /// requester).
    pub fn requester(&self, agent: &str) -> Result<AuthorizedScopes> {
        let agent = AgentId::parse(agent)?;
        let (stamp, who, kept) = self.store.read(|r| {
            let stamp = org::gate_stamp(r)?;
            if let Some(who) = self.gates.borrow().agent(stamp, &agent) {
                return Ok((stamp, who, true));
            }
            Ok((stamp, self.gate_in(r, &agent)?, false))
        })?;
        if !kept {
            self.gates
                .borrow_mut()
                .keep_agent(stamp, agent, who.clone());
        }
        Ok(who)
    }

    /// `agent`'s gate built from the org graph `r` reads (an unknown agent
    /// is [`NodeError::Unknown`]).
    pub(crate) fn gate_in(
        &self,
        r: &(impl Readable + ?Sized),
        agent: &AgentId,
    ) -> Result<AuthorizedScopes> {
        if !org::agent_present(r, agent)? {
            return Err(unknown_agent(r, self.node_id(), agent));
        }
        Ok(AuthorizedScopes::for_agent(agent.clone(), &StoredOrg(r)))
    }

    /// Read a memory for `who`: missing and invisible are the same answer.
    /// A read the read audit records (`get`).
    pub fn get(&self, who: &AuthorizedScopes, id: &str) -> Result<Visible<MemoryRecord>> {
        let m = self.gated(who, id)?;
        self.audit_reads(who, &[m.id], "get");
        Ok(m)
    }

    /// [`Node::get`] for the node's own checks (the memory an update, share,
    /// link or feedback names): not a read shown to the agent, not audited.
    pub(crate) fn gated(&self, who: &AuthorizedScopes, id: &str) -> Result<Visible<MemoryRecord>> {
        let not_found = || NodeError::NoSuchMemory(id.trim().to_owned());
        let mid: MemoryId = id.parse().map_err(|_| not_found())?;
        self.store
            .visible(who, &[mid], self.now_ms())?
            .pop()
            .ok_or_else(not_found)
    }

    /// Newest first, gated.
    pub fn list(
        &self,
        who: &AuthorizedScopes,
        kind: Option<&MemoryType>,
        limit: usize,
    ) -> Result<Vec<Visible<MemoryRecord>>> {
        if limit == 0 {
            return Err(NodeError::BadInput("--limit must be at least 1".into()));
        }
        let out = self.store.visible_newest(who, kind, limit, self.now_ms())?;
        let ids: Vec<MemoryId> = out.iter().map(|m| m.id).collect();
        self.audit_reads(who, &ids, "list");
        Ok(out)
    }

    /// [`Node::list`] under time filters (`amos list --since/--until/
    /// --valid-at/--known-at`): newest first, each with its valid time.
    pub fn list_in_time(
        &self,
        who: &AuthorizedScopes,
        kind: Option<&MemoryType>,
        limit: usize,
        q: &TimeQuery,
    ) -> Result<Vec<(Visible<MemoryRecord>, ValidTime)>> {
        let out = self.visible_in_time(who, kind, limit, q)?;
        let ids: Vec<MemoryId> = out.iter().map(|(m, _)| m.id).collect();
        self.audit_reads(who, &ids, "list");
        Ok(out)
    }

    /// [`Node::list_in_time`] without the read audit, for callers that show
    /// only part of it (the timeline audits what it shows).
    pub(crate) fn visible_in_time(
        &self,
        who: &AuthorizedScopes,
        kind: Option<&MemoryType>,
        limit: usize,
        q: &TimeQuery,
    ) -> Result<Vec<(Visible<MemoryRecord>, ValidTime)>> {
        if limit == 0 {
            return Err(NodeError::BadInput("--limit must be at least 1".into()));
        }
        let now = self.now_ms();
        let mut fetch = limit;
        loop {
            let recs = self.store.visible_newest(who, kind, fetch, now)?;
            let exhausted = recs.len() < fetch;
            let mut out = self.store.read(|r| time::view(r, who, recs, q, now))?;
            if out.len() >= limit || exhausted {
                out.truncate(limit);
                return Ok(out);
            }
            fetch = fetch.saturating_mul(4);
        }
    }

    // ---------------------------------------------------------------- org graph

    pub(crate) fn check_grant_target(conn: &(impl Readable + ?Sized), s: &Scope) -> Result<()> {
        let ok = match s {
            Scope::Private | Scope::Global => true,
            Scope::Agent(a) => org::agent_present(conn, a)?,
            Scope::Team(t) => org::team_present(conn, t),
            Scope::Project(p) => org::project_state(conn, p).is_some_and(|p| p.present),
        };
        if ok {
            Ok(())
        } else {
            let kind = match s {
                Scope::Agent(_) => UnknownKind::Agent,
                Scope::Team(_) => UnknownKind::Team,
                _ => UnknownKind::Project,
            };
            let id = s.to_string();
            let id = id.split_once(':').map(|x| x.1).unwrap_or(&id);
            Err(NodeError::unknown(kind, id))
        }
    }
}

/// A new node in a temporary home (kept while the `TempDir` lives) with
/// one registered agent, and that agent as a requester: the set-up of the
/// crate's tests that write memories through the node.
#[cfg(test)]
pub(crate) fn test_node(agent: &str) -> (tempfile::TempDir, Home, Node, AuthorizedScopes) {
    let dir = tempfile::tempdir().unwrap();
    let home = Home::new(dir.path().join("home"));
    Node::init(&home, Some("a")).unwrap();
    let mut node = Node::open(&home).unwrap();
    node.agent_add(agent, "test", &[]).unwrap();
    let who = node.requester(agent).unwrap();
    (dir, home, node, who)
}

/// Hand `to` everything `from` logged after `since` (a full export, as
/// to a `full` peer), verified and applied in one batch; returns where the
/// export ended, the `since` of the next call. The crate's tests' stand-in
/// for a session's fact transfer.
#[cfg(test)]
pub(crate) fn pass_facts(from: &Node, to: &mut Node, since: i64) -> i64 {
    let mut facts = Vec::new();
    let upto = from
        .export(&amos_acl::PeerPolicy::Full, since, 64, |f| {
            facts.extend(f);
            Ok(())
        })
        .unwrap();
    let verified = facts
        .iter()
        .map(|f| amos_protocol::SignedFact::decode_verified(f).unwrap())
        .collect();
    to.apply_from(&from.node_id(), verified).unwrap();
    upto
}

/// The crate's tests' seeded random choices: ChaCha8 (the generator the
/// bench's workload uses), or the xorshift sequence some tests were first
/// written with. The same seed, the same run.
#[cfg(test)]
pub(crate) enum TestRng {
    ChaCha(Box<rand::rngs::ChaCha8Rng>),
    XorShift(u64),
}

#[cfg(test)]
impl TestRng {
    pub(crate) fn new(seed: u64) -> TestRng {
        use rand::SeedableRng;
        TestRng::ChaCha(Box::new(rand::rngs::ChaCha8Rng::seed_from_u64(seed)))
    }

    pub(crate) fn xorshift(seed: u64) -> TestRng {
        TestRng::XorShift(seed)
    }

    /// Uniform in `0..n` (n > 0).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        match self {
            TestRng::ChaCha(r) => {
                use rand::Rng;
                ((u128::from(r.next_u64()) * n as u128) >> 64) as usize
            }
            TestRng::XorShift(x) => {
                *x ^= *x << 13;
                *x ^= *x >> 7;
                *x ^= *x << 17;
                (*x % n as u64) as usize
            }
        }
    }
}

/// Why `agent` cannot act here: it is not registered on this node. Agents
/// are local (docs/design.md §1): a team's roster, which arrives from the
/// team's origin, may name an agent of another node, and that names no
/// agent here. The message says which rosters name it and the command
/// that registers it, which widens nothing: the gate then gives it what
/// those rosters already say.
pub(crate) fn unknown_agent(
    conn: &(impl Readable + ?Sized),
    me: NodeId,
    agent: &AgentId,
) -> NodeError {
    let rosters: Vec<String> = org::list_teams(conn)
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.members.iter().any(|m| m == agent.as_str()))
        .map(|t| {
            let origin = amos_protocol::TeamId::parse(&t.qualified_id)
                .ok()
                .and_then(|id| {
                    crate::store::replica::org_origin(conn, &amos_protocol::OrgScope::Team(id))
                        .ok()
                        .flatten()
                });
            match origin {
                Some(o) if o != me => format!("team {} (kept by node {})", t.id, o.short()),
                _ => format!("team {}", t.id),
            }
        })
        .collect();
    if rosters.is_empty() {
        return NodeError::unknown_with(
            UnknownKind::Agent,
            agent,
            format!(
                "unknown agent {agent}: agents are local to each node and {agent} is not one of \
                 this node's; register it with `amos agent add {agent}`"
            ),
        );
    }
    NodeError::unknown_with(
        UnknownKind::Agent,
        agent,
        format!(
            "{agent} is a member of {} but not an agent of this node (agents are local; a roster \
         from another node registers no one here): run `amos agent add {agent}` here to act as \
         {agent}",
            rosters.join(", ")
        ),
    )
}
