//! `amos bench --generate N DIR [--seed S]`: write a benchmark workload
//! (the format of `workload.rs`) from a fixed corpus model, deterministic by
//! seed: the same N and seed give byte-identical files on any machine.
//!
//! Corpus model:
//!
//! * Vocabulary: 5,000 words — 104 English function words, 258 English
//!   domain words, and pseudo-English words built from syllables.
//!   The function words hold the top ranks; the rest are shuffled by seed.
//!   Word frequency follows a Zipf law over the rank (weight
//!   `1 / (rank + 2.7)^1.07`), so posting lists have a realistic long tail.
//! * Memories: 8 to 24 words each, first word capitalised, trailing period;
//!   owner and type uniform over 20 agents and 7 types.
//! * Org: 20 agents in 5 teams of 4, 10 projects (2 per team, of 3 members
//!   each, one agent in both); every agent in one team and some project.
//! * Visibility per memory: 30% private, 20% shared with one other agent,
//!   25% the owner's team, 15% one of the owner's projects, 10% global.
//! * Queries: 200 distinct recalls of 2 to 4 content words (ranks from the
//!   end of the function words to 3,000, Zipf with exponent 0.8), the
//!   requester round-robin over the agents; 60 of them (30%, each of the 6
//!   frames 10 times, at positions shuffled by seed) are wrapped in a
//!   natural-language frame ("how do we …", "what is the …") whose frame
//!   words are among the most frequent of the store (an OR query then
//!   matches much of it: the hard case). Queries depend on the seed, not
//!   on N.
//!
//! Determinism: the random source is ChaCha8 (a fixed, documented stream)
//! seeded from a u64, one stream each for the vocabulary, the memories and
//! the queries; every draw is integer arithmetic on its 64-bit outputs, and
//! the Zipf weights are computed with a logarithm and an exponential written
//! here in `+ - * /` only (no platform libm), so no floating-point result
//! can differ between machines.
//!
//! Every file is written to a temporary file in DIR and renamed into place.

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use rand::rngs::ChaCha8Rng;
use rand::{Rng as _, SeedableRng};
use serde::Serialize;

use super::workload::{Org, OrgProject, WorkloadMemory, WorkloadQuery};
use crate::error::{NodeError, Result};
use crate::progress::{Feedback, Progress};

/// The seed when none is given.
pub const DEFAULT_SEED: u64 = 20_261_130;
/// Words in the vocabulary.
pub const VOCAB_SIZE: usize = 5000;
/// Agents, teams and projects of the org.
pub const AGENTS: usize = 20;
pub const TEAMS: usize = 5;
pub const PROJECTS: usize = 10;
/// Queries in `queries.jsonl`.
pub const QUERIES: usize = 200;
/// Percent of queries wrapped in a natural-language frame.
const FRAMED_PERCENT: usize = 30;
/// Visibility kinds and their percentages.
const VISIBILITY: [(Kind, u64); 5] = [
    (Kind::Private, 30),
    (Kind::Agent, 20),
    (Kind::Team, 25),
    (Kind::Project, 15),
    (Kind::Global, 10),
];

const FUNCTION_WORDS: &str = "the of and to a in is that for it as was with be by on not he this are or \
    his from at which but have an they you were her she there been one all we \
    their has would when if so no will can more about up what out some into \
    them then its our only also than other do after first use two how over \
    any should these could new must because before where most through while \
    each under may still both such here why every same between again never \
    without during always often next last since until very just";

const DOMAIN_WORDS: &str = "deploy server database cache port user prefers config token test build \
    release staging production cluster node memory agent team project review \
    schema migration backup restore index query search latency throughput \
    error warning failure retry timeout queue worker job task pipeline branch \
    commit merge rebase patch version upgrade rollback snapshot volume disk \
    network socket proxy gateway router endpoint api client request response \
    header payload bundle export import sync peer mesh invite join policy \
    access control owner visibility private global shared scope context pack \
    budget recall link graph edge vector embedding lexical ranking score \
    weight decay pin expire archive retention audit log metric trace alert \
    dashboard console browser session cookie password secret key rotate \
    certificate domain host container image registry package dependency \
    library module function method class struct trait crate compile linker \
    binary target profile benchmark regression flaky lint format style doc \
    readme changelog license issue ticket sprint deadline meeting decision \
    preference procedure environment fact note lesson mistake fix workaround \
    invariant contract spec design plan estimate risk reviewer approver \
    python rust sqlite postgres redis kafka docker kubernetes linux macos \
    windows laptop desktop phone tablet printer monitor keyboard mouse cable \
    coffee lunch morning evening weekend holiday travel flight hotel train \
    customer invoice payment refund order cart checkout shipping warehouse \
    inventory supplier vendor forecast quarter revenue cost \
    dark light mode theme font color layout screen window tab panel button \
    slow fast stable broken green red blue yellow large small empty full \
    remember forget prefer avoid enable disable allow deny grant revoke \
    create delete update read write open close start stop run wait";

const ONSETS: [&str; 35] = [
    "b", "br", "c", "ch", "cl", "d", "dr", "f", "fl", "g", "gr", "h", "j", "k", "kr", "l", "m",
    "n", "p", "pl", "pr", "qu", "r", "s", "sh", "sk", "sl", "st", "t", "th", "tr", "v", "w", "z",
    "",
];
const VOWELS: [&str; 10] = ["a", "e", "i", "o", "u", "ai", "ea", "io", "ou", "y"];
const CODAS: [&str; 14] = [
    "", "", "", "n", "r", "s", "l", "m", "x", "t", "nd", "st", "rk", "ng",
];
/// Syllables per pseudo word: 1, 2 or 3 with weights 1:3:2.
const SYLLABLES: [usize; 6] = [1, 2, 2, 2, 3, 3];

/// Natural-language frames: `{}` is the content words.
const FRAMES: [(&str, &str); 6] = [
    ("how do we ", ""),
    ("what is the ", ""),
    ("why did the ", " fail"),
    ("where is the ", ""),
    ("remind me about ", ""),
    ("what did we decide on ", ""),
];

const TYPES: [&str; 7] = [
    "preference",
    "fact",
    "procedure",
    "environment",
    "decision",
    "warning",
    "note",
];

/// What to generate.
#[derive(Debug, Clone)]
pub struct GenerateConfig {
    /// Memories to write (at least 1).
    pub memories: usize,
    /// The workload directory (made if missing; existing files are replaced).
    pub dir: PathBuf,
    /// The random seed: one seed, one workload.
    pub seed: u64,
    /// Progress bar on stderr (drawn only when it is a terminal).
    pub feedback: Feedback,
}

/// Memories per visibility kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct VisibilityMix {
    /// Seen by their owner alone.
    pub private: usize,
    /// Shared with other agents by name.
    pub agent: usize,
    /// Shared with a team.
    pub team: usize,
    /// Shared with a project.
    pub project: usize,
    /// Shared with everyone.
    pub global: usize,
}

/// What `amos bench --generate --json` prints.
#[derive(Debug, Clone, Serialize)]
pub struct GenerateReport {
    /// The workload directory written.
    pub dir: String,
    /// The seed it was generated from.
    pub seed: u64,
    /// Memories written.
    pub memories: usize,
    /// Queries written.
    pub queries: usize,
    /// Of `queries`: the natural-language ones.
    pub framed_queries: usize,
    /// Memories per visibility kind.
    pub visibility: VisibilityMix,
    /// Bytes of the three files.
    pub bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Private,
    Agent,
    Team,
    Project,
    Global,
}

/// The seeded random source; every draw is integer arithmetic on ChaCha8's
/// 64-bit outputs.
struct Draw(ChaCha8Rng);

impl Draw {
    fn new(seed: u64) -> Draw {
        Draw(ChaCha8Rng::seed_from_u64(seed))
    }

    /// Uniform in `0..n` (n > 0; the bias, below n / 2^64, is immaterial).
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.0.next_u64()) * u128::from(n)) >> 64) as u64
    }

    fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }

    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.index(xs.len())]
    }

    /// Uniform in `lo..=hi`.
    fn between(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.index(hi - lo + 1)
    }
}

/// Natural logarithm in `+ - * /` only: the same bits on every IEEE-754
/// machine (x > 0).
fn ln(mut x: f64) -> f64 {
    let mut k = 0i32;
    while x >= 2.0 {
        x *= 0.5;
        k += 1;
    }
    while x < 1.0 {
        x *= 2.0;
        k -= 1;
    }
    // ln x = 2 atanh(z), z = (x - 1) / (x + 1) in [0, 1/3).
    let z = (x - 1.0) / (x + 1.0);
    let z2 = z * z;
    let (mut term, mut sum, mut n) = (z, 0.0, 1.0);
    for _ in 0..40 {
        sum += term / n;
        term *= z2;
        n += 2.0;
    }
    2.0 * sum + f64::from(k) * std::f64::consts::LN_2
}

/// e^y in `+ - * /` only (|y| well below 700).
fn exp(y: f64) -> f64 {
    let k = (y / std::f64::consts::LN_2).round();
    let r = y - k * std::f64::consts::LN_2;
    let (mut term, mut sum) = (1.0, 1.0);
    for i in 1..30 {
        term = term * r / f64::from(i);
        sum += term;
    }
    let (mut k, scale) = if k < 0.0 { (-k, 0.5) } else { (k, 2.0) };
    while k > 0.0 {
        sum *= scale;
        k -= 1.0;
    }
    sum
}

/// Zipf sampling over ranks `0..n`, weight `1 / (rank + 2.7)^s`, as
/// integer cumulative weights.
struct Zipf(Vec<u64>);

impl Zipf {
    fn new(n: usize, s: f64) -> Zipf {
        let mut total = 0u64;
        let cum = (0..n)
            .map(|rank| {
                let w = exp(-s * ln(rank as f64 + 2.7));
                total += (w * 1e12) as u64 + 1;
                total
            })
            .collect();
        Zipf(cum)
    }

    fn sample(&self, d: &mut Draw) -> usize {
        let total = self.0.last().copied().unwrap_or(1);
        let u = d.below(total);
        self.0.partition_point(|&c| c <= u)
    }
}

/// The vocabulary, in Zipf rank order, and how many function words lead it.
fn vocabulary(seed: u64) -> (Vec<String>, usize) {
    let mut d = Draw::new(seed);
    let mut seen = HashSet::new();
    let mut fixed = Vec::new();
    for w in FUNCTION_WORDS.split_whitespace() {
        if seen.insert(w.to_owned()) {
            fixed.push(w.to_owned());
        }
    }
    let mut rest = Vec::new();
    for w in DOMAIN_WORDS.split_whitespace() {
        if seen.insert(w.to_owned()) {
            rest.push(w.to_owned());
        }
    }
    while fixed.len() + rest.len() < VOCAB_SIZE {
        let syllables = *d.pick(&SYLLABLES);
        let mut w = String::new();
        for _ in 0..syllables {
            for part in [&ONSETS[..], &VOWELS[..], &CODAS[..]] {
                w.push_str(d.pick::<&str>(part));
            }
        }
        if w.len() >= 3 && seen.insert(w.clone()) {
            rest.push(w);
        }
    }
    for i in (1..rest.len()).rev() {
        let j = d.index(i + 1);
        rest.swap(i, j);
    }
    let n_fixed = fixed.len();
    fixed.extend(rest);
    (fixed, n_fixed)
}

/// The org: agent-00..19; team-t holds agents t, t+5, t+10, t+15;
/// proj-t its first three, proj-(t+5) its last two.
pub fn org() -> Org {
    let agents: Vec<String> = (0..AGENTS).map(|i| format!("agent-{i:02}")).collect();
    let mut teams = BTreeMap::new();
    let mut projects = BTreeMap::new();
    for t in 0..TEAMS {
        let members: Vec<String> = (0..AGENTS / TEAMS)
            .map(|k| agents[t + TEAMS * k].clone())
            .collect();
        let team = format!("team-{t}");
        projects.insert(
            format!("proj-{t}"),
            OrgProject {
                members: members[..3].to_vec(),
                team: team.clone(),
            },
        );
        projects.insert(
            format!("proj-{}", t + PROJECTS / 2),
            OrgProject {
                members: members[2..].to_vec(),
                team: team.clone(),
            },
        );
        teams.insert(team, members);
    }
    Org {
        agents,
        projects,
        teams,
    }
}

/// Memories, one at a time (a million need not be held).
struct Memories<'a> {
    d: Draw,
    vocab: &'a [String],
    zipf: Zipf,
    agents: Vec<String>,
    team_of: BTreeMap<String, String>,
    projects_of: BTreeMap<String, Vec<String>>,
}

impl<'a> Memories<'a> {
    fn new(seed: u64, vocab: &'a [String], org: &Org) -> Memories<'a> {
        let mut team_of = BTreeMap::new();
        for (t, members) in &org.teams {
            for m in members {
                team_of.insert(m.clone(), t.clone());
            }
        }
        let mut projects_of: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (p, proj) in &org.projects {
            for m in &proj.members {
                projects_of.entry(m.clone()).or_default().push(p.clone());
            }
        }
        Memories {
            d: Draw::new(seed),
            vocab,
            zipf: Zipf::new(vocab.len(), 1.07),
            agents: org.agents.clone(),
            team_of,
            projects_of,
        }
    }

    fn next(&mut self) -> (WorkloadMemory, Kind) {
        let d = &mut self.d;
        let len = d.between(8, 24);
        let mut content = String::new();
        for i in 0..len {
            let w = &self.vocab[self.zipf.sample(d)];
            if i == 0 {
                let mut cs = w.chars();
                if let Some(c) = cs.next() {
                    content.extend(c.to_uppercase());
                    content.push_str(cs.as_str());
                }
            } else {
                content.push(' ');
                content.push_str(w);
            }
        }
        content.push('.');
        let owner_i = d.index(self.agents.len());
        let owner = self.agents[owner_i].clone();
        let kind_name = *d.pick(&TYPES);
        let mut roll = d.below(100);
        let mut kind = Kind::Global;
        for (k, pct) in VISIBILITY {
            if roll < pct {
                kind = k;
                break;
            }
            roll -= pct;
        }
        let share = match kind {
            Kind::Private => vec![],
            Kind::Agent => {
                // Uniform over the other agents.
                let mut other = d.index(self.agents.len() - 1);
                if other >= owner_i {
                    other += 1;
                }
                vec![format!("agent:{}", self.agents[other])]
            }
            Kind::Team => self
                .team_of
                .get(&owner)
                .map(|t| vec![format!("team:{t}")])
                .unwrap_or_default(),
            Kind::Project => self
                .projects_of
                .get(&owner)
                .filter(|ps| !ps.is_empty())
                .map(|ps| vec![format!("project:{}", d.pick(ps))])
                .unwrap_or_default(),
            Kind::Global => vec!["global".to_owned()],
        };
        (
            WorkloadMemory {
                content,
                importance: 0.5,
                owner,
                share,
                tags: vec![],
                kind: kind_name.to_owned(),
            },
            kind,
        )
    }
}

/// The queries: distinct, requester round-robin; exactly `FRAMED_PERCENT`
/// of them framed, each frame equally often, at positions shuffled by seed.
fn queries(seed: u64, vocab: &[String], n_fixed: usize, agents: &[String]) -> Vec<WorkloadQuery> {
    let pool = &vocab[n_fixed..vocab.len().min(3000)];
    let zipf = Zipf::new(pool.len(), 0.8);
    let mut d = Draw::new(seed);
    let framed = QUERIES * FRAMED_PERCENT / 100;
    let mut plan: Vec<Option<usize>> = (0..QUERIES)
        .map(|i| (i < framed).then_some(i % FRAMES.len()))
        .collect();
    for i in (1..plan.len()).rev() {
        let j = d.index(i + 1);
        plan.swap(i, j);
    }
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(QUERIES);
    for frame in plan {
        // A repeat is drawn again: every query is distinct.
        loop {
            let words: Vec<&str> = (0..d.between(2, 4))
                .map(|_| pool[zipf.sample(&mut d)].as_str())
                .collect();
            let mut q = words.join(" ");
            if let Some(f) = frame {
                let (before, after) = FRAMES[f];
                q = format!("{before}{q}{after}");
            }
            if seen.insert(q.clone()) {
                out.push(WorkloadQuery {
                    agent: agents[out.len() % agents.len()].clone(),
                    query: q,
                });
                break;
            }
        }
    }
    out
}

/// Whether a query is one of the natural-language ones.
pub fn is_framed(query: &str) -> bool {
    FRAMES.iter().any(|(before, _)| query.starts_with(before))
}

/// Write `name` in `dir` through a temporary file renamed into place;
/// returns the bytes written.
fn write_atomic(
    dir: &Path,
    name: &str,
    body: impl FnOnce(&mut BufWriter<&fs::File>) -> Result<()>,
) -> Result<u64> {
    let path = dir.join(name);
    let what = || format!("writing {}", path.display());
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .tempfile_in(dir)
        .map_err(NodeError::io(what()))?;
    {
        let mut w = BufWriter::new(tmp.as_file());
        body(&mut w)?;
        w.flush().map_err(NodeError::io(what()))?;
    }
    tmp.as_file().sync_all().map_err(NodeError::io(what()))?;
    let bytes = tmp
        .as_file()
        .metadata()
        .map_err(NodeError::io(what()))?
        .len();
    tmp.persist(&path)
        .map_err(|e| NodeError::io(what())(e.error))?;
    Ok(bytes)
}

fn json_line<T: Serialize>(w: &mut impl Write, value: &T, path: &str) -> Result<()> {
    serde_json::to_writer(&mut *w, value)
        .map_err(|e| NodeError::Failed(format!("writing {path}: {e}")))?;
    w.write_all(b"\n")
        .map_err(NodeError::io(format!("writing {path}")))
}

/// Write the workload of `cfg` into `cfg.dir`.
pub fn generate(cfg: &GenerateConfig) -> Result<GenerateReport> {
    if cfg.memories == 0 {
        return Err(NodeError::BadInput(
            "bench --generate: N must be a number of memories, at least 1 (got 0)".into(),
        ));
    }
    let dir = &cfg.dir;
    if dir.exists() && !dir.is_dir() {
        return Err(NodeError::BadInput(format!(
            "bench --generate: {} exists and is not a directory",
            dir.display()
        )));
    }
    fs::create_dir_all(dir).map_err(NodeError::io(format!("creating {}", dir.display())))?;

    let org = org();
    let (vocab, n_fixed) = vocabulary(cfg.seed);
    let mut mix = VisibilityMix::default();
    let pb = Progress::bar(cfg.feedback, "generate", "memories", cfg.memories as u64);
    let mut bytes = write_atomic(dir, "memories.jsonl", |w| {
        let mut memories = Memories::new(cfg.seed.wrapping_add(1), &vocab, &org);
        for i in 0..cfg.memories {
            let (m, kind) = memories.next();
            *match kind {
                Kind::Private => &mut mix.private,
                Kind::Agent => &mut mix.agent,
                Kind::Team => &mut mix.team,
                Kind::Project => &mut mix.project,
                Kind::Global => &mut mix.global,
            } += 1;
            json_line(w, &m, "memories.jsonl")?;
            if i % 1024 == 1023 {
                pb.inc(1024);
            }
        }
        Ok(())
    })?;
    drop(pb);
    let queries = queries(cfg.seed.wrapping_add(2), &vocab, n_fixed, &org.agents);
    bytes += write_atomic(dir, "queries.jsonl", |w| {
        for q in &queries {
            json_line(w, q, "queries.jsonl")?;
        }
        Ok(())
    })?;
    bytes += write_atomic(dir, "org.json", |w| {
        let mut ser = serde_json::Serializer::with_formatter(
            &mut *w,
            serde_json::ser::PrettyFormatter::with_indent(b" "),
        );
        org.serialize(&mut ser)
            .map_err(|e| NodeError::Failed(format!("writing org.json: {e}")))?;
        w.write_all(b"\n")
            .map_err(NodeError::io("writing org.json"))
    })?;
    Ok(GenerateReport {
        dir: dir.display().to_string(),
        seed: cfg.seed,
        memories: cfg.memories,
        queries: queries.len(),
        framed_queries: queries.iter().filter(|q| is_framed(&q.query)).count(),
        visibility: mix,
        bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gen_in(dir: &Path, n: usize, seed: u64) -> GenerateReport {
        generate(&GenerateConfig {
            memories: n,
            dir: dir.to_owned(),
            seed,
            feedback: Feedback::Quiet,
        })
        .unwrap()
    }

    #[test]
    fn ln_and_exp_agree_with_the_platform_closely() {
        for x in [1.0, 1.5, 2.7, 3.7, 10.0, 123.4, 5002.7] {
            assert!((ln(x) - x.ln()).abs() < 1e-13, "ln {x}");
        }
        for y in [-9.2, -1.0, -0.07, 0.0, 0.5, 3.0] {
            assert!((exp(y) / y.exp() - 1.0).abs() < 1e-13, "exp {y}");
        }
    }

    #[test]
    fn vocabulary_has_5000_distinct_words_function_words_first() {
        let (v, n_fixed) = vocabulary(DEFAULT_SEED);
        assert_eq!(v.len(), VOCAB_SIZE);
        assert_eq!(v.iter().collect::<HashSet<_>>().len(), VOCAB_SIZE);
        assert_eq!(&v[..3], ["the", "of", "and"]);
        assert_eq!(n_fixed, 104);
        assert!(v.iter().all(|w| w.bytes().all(|b| b.is_ascii_lowercase())));
        // Another seed shuffles the rest differently.
        let (other, _) = vocabulary(DEFAULT_SEED + 7);
        assert_eq!(v[..n_fixed], other[..n_fixed]);
        assert_ne!(v[n_fixed..], other[n_fixed..]);
    }

    #[test]
    fn zipf_favours_low_ranks_with_a_long_tail() {
        let z = Zipf::new(VOCAB_SIZE, 1.07);
        let mut d = Draw::new(1);
        let mut counts = vec![0u32; VOCAB_SIZE];
        for _ in 0..200_000 {
            counts[z.sample(&mut d)] += 1;
        }
        // rank 0 over rank 9: (11.7 / 2.7)^1.07 ≈ 4.8
        let ratio = f64::from(counts[0]) / f64::from(counts[9]);
        assert!((4.2..5.4).contains(&ratio), "{ratio}");
        assert!(counts[0] > counts[100] && counts[100] > counts[2000]);
        let seen = counts.iter().filter(|&&c| c > 0).count();
        assert!(seen > 4000, "long tail: {seen} of 5000 ranks drawn");
    }

    #[test]
    fn org_layout_is_the_documented_one() {
        let o = org();
        assert_eq!(o.agents.len(), AGENTS);
        assert_eq!(o.teams.len(), TEAMS);
        assert_eq!(o.projects.len(), PROJECTS);
        assert_eq!(
            o.teams["team-1"],
            ["agent-01", "agent-06", "agent-11", "agent-16"]
        );
        assert_eq!(
            o.projects["proj-1"].members,
            ["agent-01", "agent-06", "agent-11"]
        );
        assert_eq!(o.projects["proj-6"].members, ["agent-11", "agent-16"]);
        for a in &o.agents {
            assert_eq!(o.teams.values().filter(|m| m.contains(a)).count(), 1);
            assert!(o.projects.values().any(|p| p.members.contains(a)));
        }
        for p in o.projects.values() {
            assert!(p.members.iter().all(|m| o.teams[&p.team].contains(m)));
        }
    }

    #[test]
    fn memories_follow_the_model_and_refer_only_to_the_org() {
        let dir = tempfile::tempdir().unwrap();
        let n = 5000;
        let r = gen_in(dir.path(), n, DEFAULT_SEED);
        let org: Org =
            serde_json::from_str(&fs::read_to_string(dir.path().join("org.json")).unwrap())
                .unwrap();
        assert_eq!(org, super::org());
        let text = fs::read_to_string(dir.path().join("memories.jsonl")).unwrap();
        let ms: Vec<WorkloadMemory> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(ms.len(), n);
        let mut mix = VisibilityMix::default();
        let mut owners = HashSet::new();
        for m in &ms {
            assert!(org.agents.contains(&m.owner), "{m:?}");
            owners.insert(m.owner.clone());
            assert!(TYPES.contains(&m.kind.as_str()), "{m:?}");
            let words = m.content.split(' ').count();
            assert!((8..=24).contains(&words), "{m:?}");
            assert!(m.content.ends_with('.'));
            assert!(m.content.starts_with(|c: char| c.is_ascii_uppercase()));
            assert!(m.share.len() <= 1, "{m:?}");
            match m
                .share
                .first()
                .map(|s| s.split_once(':').unwrap_or((s, "")))
            {
                None => mix.private += 1,
                Some(("global", "")) => mix.global += 1,
                Some(("agent", a)) => {
                    assert!(org.agents.iter().any(|x| x == a) && a != m.owner, "{m:?}");
                    mix.agent += 1;
                }
                Some(("team", t)) => {
                    assert!(org.teams[t].contains(&m.owner), "{m:?}");
                    mix.team += 1;
                }
                Some(("project", p)) => {
                    assert!(org.projects[p].members.contains(&m.owner), "{m:?}");
                    mix.project += 1;
                }
                Some(other) => panic!("unexpected share {other:?}"),
            }
            // Every share parses as the CLI's scope syntax.
            for s in &m.share {
                s.parse::<amos_protocol::Scope>().unwrap();
            }
        }
        assert_eq!(mix, r.visibility, "the report counts what was written");
        assert_eq!(owners.len(), AGENTS);
        // 30/20/25/15/10 within 2 points on 5,000 (about 3 standard deviations).
        for (got, want) in [
            (mix.private, 30.0),
            (mix.agent, 20.0),
            (mix.team, 25.0),
            (mix.project, 15.0),
            (mix.global, 10.0),
        ] {
            let pct = got as f64 * 100.0 / n as f64;
            assert!((pct - want).abs() < 2.0, "{mix:?}");
        }
        // Zipf: "the" is the most frequent word by far.
        let the = text.matches(" the ").count();
        let words: usize = ms.iter().map(|m| m.content.split(' ').count()).sum();
        assert!(the * 100 / words >= 3, "{the} of {words}");
    }

    #[test]
    fn queries_are_distinct_round_robin_and_30_percent_framed() {
        let (vocab, n_fixed) = vocabulary(DEFAULT_SEED);
        let o = org();
        let qs = queries(DEFAULT_SEED + 2, &vocab, n_fixed, &o.agents);
        assert_eq!(qs.len(), QUERIES);
        assert_eq!(
            qs.iter().map(|q| &q.query).collect::<HashSet<_>>().len(),
            QUERIES
        );
        for (i, q) in qs.iter().enumerate() {
            assert_eq!(q.agent, o.agents[i % AGENTS]);
        }
        let framed: Vec<&str> = qs
            .iter()
            .map(|q| q.query.as_str())
            .filter(|q| is_framed(q))
            .collect();
        assert_eq!(framed.len(), 60);
        for (before, after) in FRAMES {
            let n = framed
                .iter()
                .filter(|q| q.starts_with(before) && q.ends_with(after))
                .count();
            assert_eq!(n, 10, "{before:?}");
        }
        // Content words come from past the function words.
        let fixed: HashSet<&str> = vocab[..n_fixed].iter().map(String::as_str).collect();
        for q in qs.iter().filter(|q| !is_framed(&q.query)) {
            assert!(q.query.split(' ').all(|w| !fixed.contains(w)), "{q:?}");
        }
    }

    #[test]
    fn same_seed_same_bytes_other_seed_other_bytes() {
        let read = |d: &Path| {
            ["org.json", "memories.jsonl", "queries.jsonl"].map(|f| fs::read(d.join(f)).unwrap())
        };
        let (a, b, c) = (
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
        );
        gen_in(a.path(), 300, 9);
        gen_in(b.path(), 300, 9);
        gen_in(c.path(), 300, 10);
        let (fa, fb, fc) = (read(a.path()), read(b.path()), read(c.path()));
        assert_eq!(fa, fb);
        assert_eq!(fa[0], fc[0], "the org does not depend on the seed");
        assert_ne!(fa[1], fc[1]);
        assert_ne!(fa[2], fc[2]);
        // No temporary files left behind.
        assert_eq!(fs::read_dir(a.path()).unwrap().count(), 3);
        // The queries depend on the seed, not on N.
        gen_in(c.path(), 50, 9);
        assert_eq!(fs::read(c.path().join("queries.jsonl")).unwrap(), fa[2]);
    }

    /// The stream is pinned: a change of algorithm (PRNG, sampler, word
    /// lists) shows here, and must be a deliberate, documented one.
    #[test]
    fn the_default_workload_is_pinned() {
        let dir = tempfile::tempdir().unwrap();
        gen_in(dir.path(), 1000, DEFAULT_SEED);
        let mut h = blake3::Hasher::new();
        for f in ["org.json", "memories.jsonl", "queries.jsonl"] {
            h.update(&fs::read(dir.path().join(f)).unwrap());
        }
        assert_eq!(
            h.finalize().to_hex().as_str(),
            "f30a92b8613fe98bbb7dc30d9542b9e1bcc6a09be8bc37c912d03efd26dcc81b"
        );
    }

    #[test]
    fn bad_input_is_refused_in_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = |memories, dir: PathBuf| GenerateConfig {
            memories,
            dir,
            seed: 1,
            feedback: Feedback::Quiet,
        };
        let e = generate(&cfg(0, dir.path().to_owned())).unwrap_err();
        assert!(matches!(e, NodeError::BadInput(_)), "{e}");
        let file = dir.path().join("f");
        fs::write(&file, "x").unwrap();
        let e = generate(&cfg(5, file)).unwrap_err();
        assert!(e.to_string().contains("not a directory"), "{e}");
        assert!(!e.to_string().contains('\n'));
    }
}
