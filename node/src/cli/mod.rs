//! Argument definitions and dispatch.

mod demo;
mod eval;
mod maintenance;
mod memory;
mod mesh;
mod moves;
mod org;
mod output;

use std::path::PathBuf;
use std::process::ExitCode;

use amos_acl::AuthorizedScopes;
use amos_node::{Home, Node, NodeError};
use amos_protocol::{MemoryType, Scope};
use anyhow::Result;
use clap::{Args, Parser, Subcommand};
use serde_json::json;

use output::{Out, hit_json, memory_json};

#[derive(Parser, Debug)]
#[command(
    name = "amos",
    version,
    about = "amos — a federated peer-to-peer memory mesh for teams of AI agents"
)]
struct Cli {
    /// Node home directory [default: $AMOS_HOME, else the platform data dir]
    #[arg(long, global = true, env = "AMOS_HOME")]
    home: Option<PathBuf>,
    /// Embedding model: a model2vec directory [default: $AMOS_MODEL, else the built-in model]
    #[arg(long, global = true, value_name = "DIR", env = "AMOS_MODEL")]
    model: Option<PathBuf>,
    /// Machine-readable output on stdout
    #[arg(long, global = true)]
    json: bool,
    /// Print nothing but errors
    #[arg(short, long, global = true)]
    quiet: bool,
    /// Log lines on stderr as text or JSON objects (filter with AMOS_LOG or RUST_LOG)
    #[arg(
        long,
        global = true,
        value_enum,
        env = "AMOS_LOG_FORMAT",
        default_value = "text"
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Args, Debug, Clone)]
struct AsAgent {
    /// The requesting agent [env: AMOS_AGENT]
    #[arg(long = "as", env = "AMOS_AGENT", value_name = "AGENT")]
    agent: Option<String>,
    /// Act as the local node administrator (explicit, local-only)
    #[arg(long, hide = true)]
    admin: bool,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Create the home, identity and database (idempotent)
    Init {
        #[arg(long)]
        name: Option<String>,
    },
    /// Print this node's NodeId
    Id,
    /// Node, peers, index lag
    Status,
    /// Check home and keys, database, index, clocks, listener, mDNS and peers
    Doctor {
        /// Skip the network checks (listener probe, peers)
        #[arg(long)]
        offline: bool,
    },
    /// Integrity of store, index and links
    Check,
    /// The disposable index
    #[command(subcommand)]
    Index(IndexCmd),
    /// Online backup of the store to FILE
    Backup {
        file: PathBuf,
        /// Write FILE.<YYYYMMDDTHHMMSSmmmZ> and keep only the N newest such backups
        #[arg(long, value_name = "N")]
        keep: Option<usize>,
    },
    /// Replace the store with a backup
    Restore {
        file: PathBuf,
        #[arg(long)]
        force: bool,
    },
    /// Agents
    #[command(subcommand)]
    Agent(AgentCmd),
    /// Teams and team membership
    #[command(subcommand)]
    Team(TeamCmd),
    /// Projects and project membership
    #[command(subcommand)]
    Project(ProjectCmd),
    /// Store a memory owned by the requesting agent (default: private)
    Add {
        /// The text; `-` reads stdin
        text: String,
        #[command(flatten)]
        who: AsAgent,
        #[arg(long = "type", value_name = "T")]
        kind: Option<String>,
        /// private, global, agent:ID, team:ID or project:ID (repeatable)
        #[arg(long, value_name = "SCOPE")]
        share: Vec<String>,
        #[arg(long, default_value_t = 0.5, allow_negative_numbers = true)]
        importance: f32,
        #[arg(long)]
        tag: Vec<String>,
        #[arg(long)]
        pin: bool,
        /// A duration from now (e.g. 30d) or an RFC 3339 time
        #[arg(long, value_name = "DURATION|RFC3339")]
        expires: Option<String>,
        #[command(flatten)]
        valid: ValidArgs,
        /// The id of a memory this one replaces (it stays, marked superseded)
        #[arg(long, value_name = "ID")]
        supersedes: Option<String>,
    },
    /// Replace a memory with a new one (the old stays, its valid time ends
    /// where the new one's starts). Type and tags are the old one's; so are
    /// its grants when you own it, unless --share says otherwise.
    Supersede {
        /// The memory replaced
        id: String,
        /// The new text; `-` reads stdin
        text: String,
        #[command(flatten)]
        who: AsAgent,
        /// private, global, agent:ID, team:ID or project:ID (repeatable)
        #[arg(long, value_name = "SCOPE")]
        share: Vec<String>,
        #[command(flatten)]
        valid: ValidArgs,
    },
    /// Visible memories and their supersessions in valid-time order
    Timeline {
        #[command(flatten)]
        who: AsAgent,
        /// Events at or after this time (RFC 3339, date, or offset like -7d)
        #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
        since: Option<String>,
        /// Events at or before this time
        #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
        until: Option<String>,
        /// Only memories shared with this scope (private: shared with no one)
        #[arg(long, value_name = "SCOPE")]
        scope: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// One memory, if visible
    Get {
        id: String,
        #[command(flatten)]
        who: AsAgent,
    },
    /// Gated, ranked recall
    Search {
        query: String,
        #[command(flatten)]
        who: AsAgent,
        #[arg(short, default_value_t = amos_node::recall::DEFAULT_K)]
        k: usize,
        /// Show every factor of each hit's score
        #[arg(long)]
        explain: bool,
        #[command(flatten)]
        ranking: Ranking,
        #[command(flatten)]
        time: TimeArgs,
    },
    /// Token-budgeted context pack
    Pack {
        query: String,
        #[command(flatten)]
        who: AsAgent,
        /// Token budget
        #[arg(long, default_value_t = amos_node::recall::DEFAULT_BUDGET)]
        budget: usize,
        /// Explain every include/exclude decision
        #[arg(long)]
        report: bool,
        /// Count using the pack as helpful feedback on its items (local-only)
        #[arg(long)]
        reinforce: bool,
        #[command(flatten)]
        ranking: Ranking,
        #[command(flatten)]
        time: TimeArgs,
    },
    /// Per-agent ranking weights by memory type (replicated)
    #[command(subcommand)]
    Profile(ProfileCmd),
    /// Edit a memory's content (owner only; on its origin or a full peer of it).
    /// Concurrent edits on two nodes are merged, never dropped.
    Update {
        id: String,
        /// The new text (omit to change only the valid time)
        #[arg(required_unless_present_any = ["valid_from", "valid_to"])]
        text: Option<String>,
        #[command(flatten)]
        valid: ValidArgs,
        /// The origin compacts the memory's edit history once it holds more
        /// than this many bytes
        #[arg(long, value_name = "BYTES", env = "AMOS_TEXT_COMPACT_BYTES", default_value_t = amos_node::api::DEFAULT_COMPACT_BYTES)]
        compact_at: u64,
        #[command(flatten)]
        who: AsAgent,
    },
    /// The edits of a memory: author node, clock and size, oldest first
    History {
        id: String,
        #[command(flatten)]
        who: AsAgent,
    },
    /// Add a grant to a memory (owner only)
    Share {
        id: String,
        scope: String,
        #[command(flatten)]
        who: AsAgent,
    },
    /// Remove a grant from a memory (owner only)
    Unshare {
        id: String,
        scope: String,
        #[command(flatten)]
        who: AsAgent,
    },
    /// Tombstone a memory (owner only), or with --agent A --all every memory A owns
    Forget {
        /// The memory (omit with --agent A --all)
        #[arg(required_unless_present = "every_of")]
        id: Option<String>,
        #[command(flatten)]
        who: AsAgent,
        /// Forget every memory this agent owns (needs --all)
        #[arg(
            long = "agent",
            id = "every_of",
            value_name = "AGENT",
            requires = "all",
            conflicts_with = "id"
        )]
        every_of: Option<String>,
        /// With --agent: everything it owns
        #[arg(long, requires = "every_of")]
        all: bool,
        /// Do not ask for confirmation
        #[arg(long)]
        yes: bool,
    },
    /// Import memories: agent-memory-os (a home or a bundle), mem0, chatgpt,
    /// hermes (owned by --as), or an `amos export` file
    Import {
        #[arg(value_enum)]
        source: moves::ImportSource,
        path: PathBuf,
        /// The agent that owns what mem0, chatgpt and hermes imports; for amos, the
        /// export's own agent [env: AMOS_AGENT]
        #[arg(long = "as", env = "AMOS_AGENT", value_name = "AGENT")]
        agent: Option<String>,
        /// Grants for mem0, chatgpt and hermes imports (default: private; repeatable)
        #[arg(long, value_name = "SCOPE")]
        share: Vec<String>,
        /// Print what would be imported; write nothing
        #[arg(long)]
        dry_run: bool,
        /// Add the file's members to teams and projects that already exist here
        /// (agent-memory-os; without it they are left out and listed)
        #[arg(long)]
        add_members: bool,
        /// Let the file write memories and profiles of agents that already exist
        /// here (agent-memory-os, amos; without it they are left out and counted)
        #[arg(long)]
        existing_agents: bool,
    },
    /// Write everything an agent owns to FILE as JSON Lines (`amos import amos` reads it)
    Export {
        #[arg(long, value_name = "AGENT")]
        agent: String,
        file: PathBuf,
    },
    /// Associate two memories the agent can see
    Link {
        a: String,
        b: String,
        #[arg(long)]
        relation: Option<String>,
        #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
        weight: f32,
        #[command(flatten)]
        who: AsAgent,
    },
    /// Recall feedback (local-only)
    Feedback {
        #[arg(required = true)]
        ids: Vec<String>,
        #[command(flatten)]
        who: AsAgent,
        #[arg(
            long,
            conflicts_with = "unhelpful",
            required_unless_present = "unhelpful"
        )]
        helpful: bool,
        #[arg(long)]
        unhelpful: bool,
    },
    /// Merge exact and near duplicates into one memory (dry run unless --apply)
    Consolidate {
        #[arg(long)]
        apply: bool,
    },
    /// Archive expired and long-idle memories (dry run unless --apply)
    Retention {
        #[arg(long)]
        apply: bool,
        /// Idle period: not recalled or edited for this long (e.g. 90d); `off` disables
        #[arg(long, value_name = "DUR", default_value = "90d", env = "AMOS_IDLE")]
        idle: String,
    },
    /// Bring an archived memory back into recall
    RestoreMemory {
        id: String,
        #[command(flatten)]
        who: AsAgent,
    },
    /// Newest first, gated
    List {
        #[command(flatten)]
        who: AsAgent,
        #[arg(long = "type")]
        kind: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: usize,
        #[command(flatten)]
        time: TimeArgs,
    },
    /// Convergence digest of the replicated facts (optionally those scopes admit)
    Digest {
        #[arg(long = "scope", value_name = "S")]
        scopes: Vec<String>,
    },
    /// Peers and their policies
    #[command(subcommand)]
    Peers(PeersCmd),
    /// Run the node: QUIC listener, periodic sync; stops on SIGINT/SIGTERM
    Serve {
        /// UDP address to listen on
        #[arg(long, value_name = "ADDR", default_value = amos_node::net::DEFAULT_LISTEN)]
        listen: String,
        /// Also sync with every peer this often (e.g. 30s)
        #[arg(long, value_name = "DUR")]
        sync_every: Option<String>,
        /// Neither advertise nor browse over mDNS
        #[arg(long)]
        no_mdns: bool,
        /// Do not push changes to peers as they happen (periodic sync only)
        #[arg(long)]
        no_push: bool,
        /// Push a change to peers this long after it (e.g. 200ms)
        #[arg(long, value_name = "DUR", default_value = "200ms")]
        push_debounce: String,
        /// At most this many push sessions at once
        #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..))]
        push_sessions: u16,
        /// Serve Prometheus /metrics and /healthz over HTTP on this TCP address
        #[arg(long, value_name = "ADDR")]
        metrics: Option<String>,
        /// Also serve the web console on this TCP address (loopback unless --allow-remote)
        #[arg(long, value_name = "ADDR")]
        console: Option<String>,
        /// Let --console listen on a non-loopback address (prints a warning)
        #[arg(long, requires = "console")]
        allow_remote: bool,
    },
    /// The web console: node, peers, memories, org and audit in a browser
    Console {
        /// TCP address to listen on (loopback unless --allow-remote)
        #[arg(long, value_name = "ADDR", default_value = amos_node::front::console::DEFAULT_LISTEN)]
        listen: String,
        /// Print the console's URL with its access token and exit
        #[arg(long)]
        print_url: bool,
        /// Let --listen be a non-loopback address (prints a warning)
        #[arg(long)]
        allow_remote: bool,
    },
    /// Pair with the node that printed CODE (`amos team invite`), then sync
    Join {
        code: String,
        /// Record the inviter without a network, for bundle-only exchange
        #[arg(long)]
        offline: bool,
        /// This node's agent, for the inviter to add to the invite's team or project [env: AMOS_AGENT]
        #[arg(long = "as", env = "AMOS_AGENT", value_name = "AGENT")]
        agent: Option<String>,
    },
    /// MCP server on stdio for one agent ($AMOS_AGENT): memory tools for AI agents
    Mcp,
    /// Nodes seen on the LAN via mDNS (registered peers are recognised)
    Discover {
        /// How long to listen
        #[arg(long, value_name = "DUR", default_value = "3s")]
        timeout: String,
    },
    /// Sync with peers over QUIC
    #[command(subcommand)]
    Sync(SyncCmd),
    /// systemd units: amos.service (serve), amos-sync.service + .timer (sync auto)
    #[command(subcommand)]
    Service(ServiceCmd),
    /// The mesh key that encrypts bundles
    #[command(subcommand)]
    Mesh(MeshCmd),
    /// Signed (and, with a mesh key, encrypted) bundle files for air-gapped exchange
    #[command(subcommand)]
    Bundle(BundleCmd),
    /// Facts refused from peers, newest first (`amos audit reads`: the read audit)
    Audit {
        #[arg(long, default_value_t = 100)]
        limit: usize,
        #[command(subcommand)]
        what: Option<AuditCmd>,
    },
    /// Local settings of this node (never replicated): read-audit, read-audit-retention
    #[command(subcommand)]
    Config(ConfigCmd),
    /// A scripted single-node demo in a throw-away home
    Demo,
    /// Recall quality on a golden set (hit@1, hit@5, MRR per mode) in a throw-away home
    Eval {
        /// The golden set, JSON or JSON lines (e.g. node/eval/golden.jsonl)
        file: PathBuf,
    },
    /// Benchmark on a workload directory (org.json, memories.jsonl, queries.jsonl), or write one
    Bench {
        /// The workload to run on
        #[arg(long, value_name = "DIR", required_unless_present_any = ["generate", "mesh"])]
        corpus: Option<PathBuf>,
        /// Write a workload of N memories into DIR instead (same N and seed, same bytes)
        #[arg(long, num_args = 2, value_names = ["N", "DIR"], conflicts_with = "corpus")]
        generate: Option<Vec<String>>,
        /// Simulate a mesh of N nodes instead (in memory, virtual time, deterministic)
        #[arg(long, value_name = "N", conflicts_with_all = ["corpus", "generate"])]
        mesh: Option<usize>,
        /// Neighbours per node of --mesh
        #[arg(long, value_name = "D", default_value_t = 4, requires = "mesh")]
        degree: usize,
        /// Seed of --generate [default: 20261130] or --mesh [default: 1]
        #[arg(long)]
        seed: Option<u64>,
        #[arg(long, default_value_t = 3)]
        passes: usize,
        /// Load at most N memories
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        /// Single durable adds to time after the load
        #[arg(long, default_value_t = 200)]
        adds: usize,
        /// Directory for the temporary home
        #[arg(long)]
        workdir: Option<PathBuf>,
        /// Keep the homes and the bundle afterwards (the report says where)
        #[arg(long)]
        keep: bool,
        /// Skip the live-sync section (two in-process nodes over loopback QUIC)
        #[arg(long)]
        no_sync: bool,
    },
}

#[derive(Subcommand, Debug)]
enum AuditCmd {
    /// Which agent read which memory, when, through which front end (newest first)
    Reads {
        #[arg(long, value_name = "AGENT")]
        agent: Option<String>,
        #[arg(long, value_name = "ID")]
        memory: Option<String>,
        /// Only reads since then: a duration ago (e.g. 1h) or an RFC 3339 time
        #[arg(long, value_name = "DUR|RFC3339")]
        since: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
}

#[derive(Subcommand, Debug)]
enum ConfigCmd {
    /// read-audit on|off, or read-audit-retention DUR (e.g. 30d)
    Set { key: String, value: String },
    /// The local settings
    Show,
}

/// Ranking options shared by search and pack.
#[derive(Args, Debug, Clone)]
struct Ranking {
    /// Freshness half-life (e.g. 30d); pinned memories never decay
    #[arg(
        long,
        value_name = "DUR",
        default_value = "30d",
        env = "AMOS_HALF_LIFE"
    )]
    half_life: String,
    /// Candidates: hybrid (words and meaning, fused), lexical (words) or semantic (meaning)
    #[arg(long, value_enum, default_value = "hybrid", env = "AMOS_RECALL_MODE")]
    mode: ModeArg,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum ModeArg {
    Hybrid,
    Lexical,
    Semantic,
}

impl From<ModeArg> for amos_node::recall::RecallMode {
    fn from(m: ModeArg) -> Self {
        match m {
            ModeArg::Hybrid => Self::Hybrid,
            ModeArg::Lexical => Self::Lexical,
            ModeArg::Semantic => Self::Semantic,
        }
    }
}

/// A memory's valid time (`amos add`, `update`, `supersede`).
#[derive(clap::Args, Debug, Clone, Default)]
struct ValidArgs {
    /// When the content became true (RFC 3339, date, `now`, or offset like -7d; default: now)
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    valid_from: Option<String>,
    /// When it stopped being true
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    valid_to: Option<String>,
}

/// Time filters of recall (`search`, `pack`, `list`).
#[derive(clap::Args, Debug, Clone, Default)]
struct TimeArgs {
    /// Only memories whose valid time starts at or after this
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    since: Option<String>,
    /// Only memories whose valid time starts at or before this
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    until: Option<String>,
    /// What was true then: superseded and ended memories drop out
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    valid_at: Option<String>,
    /// Answer with what was on record then (see docs/cli.md for how far back)
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    known_at: Option<String>,
}

impl TimeArgs {
    fn query(self, now_ms: u64) -> Result<amos_node::recall::TimeQuery> {
        Ok(amos_node::front::request::TimeRequest {
            since: self.since,
            until: self.until,
            valid_at: self.valid_at,
            known_at: self.known_at,
        }
        .query(now_ms, |f| format!("--{f}"))?)
    }
}

impl Ranking {
    fn half_life_ms(&self) -> Result<u64> {
        humantime::parse_duration(&self.half_life)
            .ok()
            .map(|d| d.as_millis() as u64)
            .filter(|ms| *ms >= 1000)
            .ok_or_else(|| {
                bad(format!(
                    "malformed --half-life {:?}: use a duration of at least 1s, e.g. 30d",
                    self.half_life
                ))
            })
    }
}

#[derive(Subcommand, Debug)]
enum ProfileCmd {
    /// Set type weights, e.g. `procedure=1.5 note=0.7` (1 removes a weight)
    Set {
        agent: String,
        #[arg(required = true, value_name = "TYPE=WEIGHT")]
        weights: Vec<String>,
    },
    /// Show an agent's type weights
    Show { agent: String },
}

#[derive(Subcommand, Debug)]
enum SyncCmd {
    /// Sync with one peer (NodeId, prefix or name) or every peer with an address now
    Now {
        peer: Option<String>,
        /// Reconcile the whole set of facts each side may send the other
        /// (range-based repair) instead of trusting the watermarks
        #[arg(long)]
        repair: bool,
    },
    /// Sync once with every peer with an address; unreachable peers are not fatal
    Auto,
}

#[derive(Subcommand, Debug)]
enum ServiceCmd {
    /// Write the units and enable amos.service (or, with --timer, amos-sync.timer)
    Install {
        /// User units in ~/.config/systemd/user, run as you (default: system
        /// units in /etc/systemd/system, run as the user `amos`, home /var/lib/amos)
        #[arg(long)]
        user: bool,
        /// Print the files and the commands; change nothing
        #[arg(long)]
        dry_run: bool,
        /// Enable the sync timer instead of the serving node
        #[arg(long)]
        timer: bool,
        /// The binary the units run [default: this one]
        #[arg(long, value_name = "PATH")]
        bin: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
enum MeshCmd {
    /// The mesh key
    #[command(subcommand)]
    Key(MeshKeyCmd),
}

#[derive(Subcommand, Debug)]
enum MeshKeyCmd {
    /// Print the mesh key (a secret: anyone holding it can read bundles)
    Show,
    /// Set the mesh key printed by another node of the mesh
    Set { key: String },
    /// Make a new random mesh key and set it
    Generate,
}

#[derive(Subcommand, Debug)]
enum BundleCmd {
    /// Write the facts a policy lets out to FILE
    Export {
        file: PathBuf,
        /// Export what these scopes admit (repeatable)
        #[arg(long = "scope", value_name = "S")]
        scopes: Vec<String>,
        /// Export what this peer's policy admits
        #[arg(long = "for", value_name = "PEER")]
        for_peer: Option<String>,
    },
    /// Verify FILE completely, then apply it through the import gate
    Import { file: PathBuf },
}

#[derive(Subcommand, Debug)]
enum PeersCmd {
    /// Register a peer by NodeId, with the policy we give it
    Add {
        node_id: String,
        /// host:port, if it serves (omit for bundle-only peers)
        addr: Option<String>,
        /// full, or a comma-separated list of global, team:ID, project:ID
        #[arg(long)]
        policy: String,
    },
    /// Forget a peer; its connections and bundles are refused from now on
    Remove { node_id: String },
    /// List peers
    List,
    /// Change the policy we give a peer
    Policy { node_id: String, policy: String },
}

#[derive(Subcommand, Debug)]
enum IndexCmd {
    /// Drop and rebuild the index from the store
    Rebuild,
}

#[derive(Subcommand, Debug)]
enum AgentCmd {
    Add {
        id: String,
        #[arg(long, default_value = "agent")]
        kind: String,
        #[arg(long)]
        team: Vec<String>,
    },
    List,
    /// Apply <home>/agents.toml now (also done at every start of `serve` and `mcp`)
    Apply,
}

#[derive(Subcommand, Debug)]
enum TeamCmd {
    Create {
        id: String,
        #[arg(long)]
        name: Option<String>,
    },
    List,
    Delete {
        id: String,
    },
    Add {
        team: String,
        agent: String,
    },
    Remove {
        team: String,
        agent: String,
    },
    /// Print a one-time pairing code (amos1-…); the serving node answers `amos join`
    Invite {
        team: String,
        /// What the joining node may receive: `full` or scopes (default: team:TEAM)
        #[arg(long, value_name = "P")]
        policy: Option<String>,
        /// How long the code stays valid (e.g. 10m, 2h; at most 7d)
        #[arg(long, value_name = "DUR", default_value = "10m")]
        ttl: String,
        /// Address the joiner dials (HOST:PORT; repeatable). Default: where
        /// `amos serve` listens
        #[arg(long = "addr", value_name = "HOST:PORT")]
        addrs: Vec<String>,
    },
}

#[derive(Subcommand, Debug)]
enum ProjectCmd {
    Create {
        id: String,
        #[arg(long)]
        team: String,
        #[arg(long)]
        name: Option<String>,
    },
    List,
    Delete {
        id: String,
    },
    Add {
        project: String,
        agent: String,
    },
    Remove {
        project: String,
        agent: String,
    },
}

pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            if e.use_stderr()
                && e.kind() != clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            {
                eprintln!("amos: {}", one_line(&e));
                return ExitCode::from(2);
            }
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    init_tracing(cli.log_format);
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let code = e
                .downcast_ref::<NodeError>()
                .map(NodeError::exit_code)
                .unwrap_or(1);
            eprintln!("amos: {e:#}");
            ExitCode::from(code)
        }
    }
}

/// clap's usage errors span several lines (message, tip, usage, help hint);
/// docs/design.md §10 wants one line naming the problem: keep the message and any
/// tip, drop the usage and the help hint.
fn one_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let mut msg = String::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with("Usage:") || line.starts_with("For more information") {
            break;
        }
        let line = line.strip_prefix("error:").map(str::trim).unwrap_or(line);
        if line.is_empty() {
            continue;
        }
        if !msg.is_empty() {
            msg.push_str(if msg.ends_with(':') { " " } else { "; " });
        }
        msg.push_str(line);
    }
    if msg.is_empty() {
        e.kind().to_string()
    } else {
        msg
    }
}

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("AMOS_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => fmt.try_init(),
        LogFormat::Json => fmt.json().try_init(),
    };
}

fn bad(msg: impl Into<String>) -> anyhow::Error {
    NodeError::BadInput(msg.into()).into()
}

fn who(node: &Node, a: &AsAgent) -> Result<AuthorizedScopes> {
    if a.admin {
        return Ok(AuthorizedScopes::local_admin());
    }
    match &a.agent {
        Some(agent) => Ok(node.requester(agent)?),
        None => Err(bad("no requester: pass --as AGENT or set AMOS_AGENT")),
    }
}

/// `amos join CODE [--offline] [--as AGENT]`.
fn join_cmd(home: &Home, out: &Out, code: &str, offline: bool, agent: Option<&str>) -> Result<()> {
    use amos_node::events::SyncResult;
    // Validates the home (exit 2 if it is not one).
    let node = Node::open(home)?;
    // The agent must be one of ours (it is who will read what the scope brings).
    let mut agent = match agent.map(str::trim).filter(|a| !a.is_empty()) {
        Some(a) => {
            node.requester(a)?;
            Some(
                a.parse::<amos_protocol::AgentId>()
                    .map_err(NodeError::from)?,
            )
        }
        None => None,
    };
    drop(node);
    if let Some(a) = &agent {
        // A code that does not decode is reported by the join itself.
        let policy = amos_protocol::pairing::PairingCode::decode(code)
            .ok()
            .and_then(|c| c.policy.parse::<amos_acl::PeerPolicy>().ok());
        let names_org = policy.as_ref().is_some_and(|p| {
            p.scopes()
                .any(|s| matches!(s, Scope::Team(_) | Scope::Project(_)))
        });
        if offline {
            eprintln!(
                "amos: note: --as {a} is not carried by an offline join; the inviter's operator \
                 adds the agent (`amos team add TEAM {a}`)"
            );
            agent = None;
        } else if policy.is_some() && !names_org {
            eprintln!(
                "amos: note: the invite's policy ({}) names no team or project: --as {a} ignored",
                policy.map(|p| p.to_string()).unwrap_or_default()
            );
            agent = None;
        }
    }
    let r = if offline {
        amos_node::api::join_offline(home, code)?
    } else {
        let progress = amos_node::progress::SyncProgress::new(out.feedback());
        amos_node::net::join_blocking(home, code, agent.as_ref(), progress.observer())?
    };
    out.emit(&r, || {
        let mut s = format!(
            "paired with {} ({}) at {}, policy {}; mesh key: {}",
            r.peer,
            r.name,
            r.addr.as_deref().unwrap_or("no address"),
            r.policy,
            serde_json::to_value(r.mesh_key)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        );
        match &r.first_sync {
            Some(o) if o.result == SyncResult::Ok => s.push_str(&format!(
                "\nfirst sync ok: {} facts in, {} out",
                o.facts_in, o.facts_out
            )),
            Some(o) => s.push_str(&format!(
                "\nfirst sync {}: {} (the next `amos sync` retries)",
                o.result.as_str(),
                o.error.as_deref().unwrap_or("")
            )),
            None => s.push_str("\noffline: exchange bundles with `amos bundle export --for PEER`"),
        }
        if let Some(a) = &r.agent {
            if r.member_of.is_empty() {
                s.push_str(&format!("\nagent {a}: the inviter added it to nothing"));
            } else {
                s.push_str(&format!(
                    "\nagent {a} is a member of {} on the inviter",
                    r.member_of.join(", ")
                ));
            }
        }
        s
    });
    Ok(())
}

/// `amos sync now|auto`: one pass, one line (or JSON object) per peer.
fn sync_cmd(home: &Home, out: &Out, cmd: SyncCmd) -> Result<()> {
    use amos_node::events::SyncResult;
    let (only, auto) = match &cmd {
        SyncCmd::Now { peer, .. } => (peer.as_deref(), false),
        SyncCmd::Auto => (None, true),
    };
    // Validates the home (exit 2 if it is not one).
    let mut node = Node::open(home)?;
    if let SyncCmd::Now { repair: true, .. } = &cmd {
        // Kept in the peer's row until a repair with it completes.
        node.ask_repair_of(only)?;
    }
    drop(node);
    let progress = amos_node::progress::SyncProgress::new(out.feedback());
    let outcomes = amos_node::net::sync_pass_blocking(home, only, progress.observer())?;
    drop(progress);
    out.emit(&json!({"peers": outcomes}), || {
        if outcomes.is_empty() {
            return "no peers with an address to sync with".into();
        }
        outcomes
            .iter()
            .map(amos_node::front::view::outcome_line)
            .collect::<Vec<_>>()
            .join("\n")
    });
    let failed = outcomes
        .iter()
        .filter(|o| match o.result {
            SyncResult::Ok => false,
            SyncResult::Unreachable => !auto,
            SyncResult::Refused | SyncResult::Failed => true,
        })
        .count();
    if failed > 0 {
        anyhow::bail!(
            "sync failed with {failed} of {} peer{}",
            outcomes.len(),
            if outcomes.len() == 1 { "" } else { "s" }
        );
    }
    Ok(())
}

/// `amos service install`: render the units, print them for a dry run,
/// otherwise write and enable them.
fn service_cmd(home: Option<&std::path::Path>, out: &Out, cmd: ServiceCmd) -> Result<()> {
    use amos_node::ops::service::{self, InstallOptions, UnitMode};
    let ServiceCmd::Install {
        user,
        dry_run,
        timer,
        bin,
    } = cmd;
    let mode = if user {
        UnitMode::User
    } else {
        UnitMode::System
    };
    let home = match home {
        Some(h) => h.to_path_buf(),
        None if user => Home::default_root(),
        None => PathBuf::from(service::TEMPLATE_HOME),
    };
    let absolute = |p: PathBuf, what: &str| {
        std::path::absolute(&p).map_err(|e| {
            bad(format!(
                "cannot make the {what} path {} absolute: {e}",
                p.display()
            ))
        })
    };
    let bin = match bin {
        Some(b) => b,
        None => std::env::current_exe()
            .map_err(|e| anyhow::anyhow!("cannot find this binary's path: {e}"))?,
    };
    let plan = service::plan(&InstallOptions {
        mode,
        home: absolute(home, "home")?,
        bin: absolute(bin, "binary")?,
        timer,
    })?;
    if !dry_run {
        service::apply(&plan)?;
    }
    let mut v = serde_json::to_value(&plan)?;
    v["dry_run"] = json!(dry_run);
    out.emit(&v, || {
        let mut s = Vec::new();
        for f in &plan.files {
            if dry_run {
                s.push(format!("==> {} (would write)\n{}", f.path, f.contents));
            } else {
                s.push(format!("wrote {}", f.path));
            }
        }
        for c in &plan.commands {
            s.push(format!(
                "{}{}",
                if dry_run { "would run: " } else { "ran: " },
                c.join(" ")
            ));
        }
        for n in &plan.notes {
            s.push(format!("note: {n}"));
        }
        s.join("\n")
    });
    Ok(())
}

/// A console address from the command line.
fn console_addr(
    text: &str,
    flag: &str,
    allow_remote: bool,
) -> Result<amos_node::front::console::ConsoleOptions> {
    let listen = text
        .parse()
        .map_err(|_| bad(format!("malformed {flag} {text:?}: use IP:PORT")))?;
    let opts = amos_node::front::console::ConsoleOptions {
        listen,
        allow_remote,
        serving: None,
    };
    amos_node::front::console::check_listen(&opts)?;
    Ok(opts)
}

/// `amos console [--listen ADDR] [--print-url]`: print the URL (with the
/// access token), then serve until SIGINT/SIGTERM unless only asked for it.
fn console_cmd(
    home: &Home,
    out: &Out,
    listen: &str,
    print_url: bool,
    allow_remote: bool,
) -> Result<()> {
    let opts = console_addr(listen, "--listen", allow_remote)?;
    // Validates the home (exit 2 if it is not one).
    drop(Node::open(home)?);
    if print_url {
        let token = amos_node::front::console::token::ensure(home)?;
        let url = amos_node::front::console::url(opts.listen, &token);
        out.emit(&json!({"url": url}), || url.clone());
        return Ok(());
    }
    amos_node::front::console::run(home, &opts, |url| {
        // Always printed (also with -q): the operator needs it to get in.
        if out.json {
            println!("{}", json!({"url": url}));
        } else {
            println!("{url}");
        }
    })?;
    Ok(())
}

/// `amos discover`: browse mDNS for a while, one line (or object) per node.
fn discover_cmd(home: &Home, out: &Out, timeout: &str) -> Result<()> {
    let timeout = humantime::parse_duration(timeout)
        .map_err(|_| bad(format!("malformed --timeout {timeout:?}: use e.g. 3s")))?;
    let nodes = amos_node::net::discovery::discover(home, timeout)?;
    out.emit(&json!({"nodes": nodes}), || {
        if nodes.is_empty() {
            return "no amos nodes seen".into();
        }
        nodes
            .iter()
            .map(|n| {
                let who = match (&n.peer, n.itself) {
                    (Some(p), _) => format!("peer {p}"),
                    (None, true) => "this node".into(),
                    (None, false) => "unknown".into(),
                };
                format!("{}  port {}  {who}", n.addrs.join(","), n.port)
            })
            .collect::<Vec<_>>()
            .join("\n")
    });
    Ok(())
}

fn run(cli: Cli) -> Result<()> {
    let out = Out {
        json: cli.json,
        quiet: cli.quiet,
    };
    let home = Home::new(cli.home.clone().unwrap_or_else(Home::default_root))
        .with_model(cli.model.clone());
    match cli.cmd {
        Cmd::Init { name } => {
            let r = Node::init(&home, name.as_deref())?;
            amos_node::front::console::token::ensure(&home)?;
            out.emit(&json!({"node_id": r.node_id, "home": r.home}), || {
                format!(
                    "{} node {} in {}",
                    if r.created {
                        "created"
                    } else {
                        "already initialised:"
                    },
                    r.node_id,
                    r.home
                )
            });
            return Ok(());
        }
        Cmd::Demo => return demo::run(&out),
        Cmd::Eval { file } => return eval::run(&out, &file, cli.model.as_deref()),
        Cmd::Serve {
            listen,
            sync_every,
            no_mdns,
            no_push,
            push_debounce,
            push_sessions,
            metrics,
            console,
            allow_remote,
        } => {
            let push_debounce = humantime::parse_duration(&push_debounce).map_err(|_| {
                bad(format!(
                    "malformed --push-debounce {push_debounce:?}: use e.g. 200ms"
                ))
            })?;
            let push = (!no_push).then(|| amos_node::net::push::PushConfig {
                debounce_ms: push_debounce.as_millis() as u64,
                max_sessions: usize::from(push_sessions),
                ..Default::default()
            });
            let metrics = metrics
                .map(|m| {
                    m.parse()
                        .map_err(|_| bad(format!("malformed --metrics {m:?}: use IP:PORT")))
                })
                .transpose()?;
            let listen = listen
                .parse()
                .map_err(|_| bad(format!("malformed --listen {listen:?}: use IP:PORT")))?;
            let sync_every = sync_every
                .map(|d| {
                    humantime::parse_duration(&d)
                        .ok()
                        .filter(|d| !d.is_zero())
                        .ok_or_else(|| bad(format!("malformed --sync-every {d:?}: use e.g. 30s")))
                })
                .transpose()?;
            let console = console
                .map(|c| console_addr(&c, "--console", allow_remote))
                .transpose()?;
            // Validates the home (exit 2 if it is not one).
            drop(Node::open(&home)?);
            if let Some(opts) = console {
                let opts = amos_node::front::console::ConsoleOptions {
                    serving: Some(amos_node::front::console::Serving { listen, metrics }),
                    ..opts
                };
                let c = amos_node::front::console::start(&home, opts)?;
                // Always printed (also with -q): the operator needs it to get in.
                if out.json {
                    println!("{}", json!({"console": c.url}));
                } else {
                    println!("console: {}", c.url);
                }
            }
            amos_node::ops::serve(
                &home,
                &amos_node::ops::ServeOptions {
                    listen,
                    sync_every,
                    mdns: !no_mdns,
                    metrics,
                    push,
                },
            )?;
            return Ok(());
        }
        Cmd::Console {
            listen,
            print_url,
            allow_remote,
        } => return console_cmd(&home, &out, &listen, print_url, allow_remote),
        Cmd::Sync(cmd) => return sync_cmd(&home, &out, cmd),
        Cmd::Service(cmd) => return service_cmd(cli.home.as_deref(), &out, cmd),
        Cmd::Join {
            code,
            offline,
            agent,
        } => return join_cmd(&home, &out, &code, offline, agent.as_deref()),
        Cmd::Mcp => {
            let agent = std::env::var("AMOS_AGENT")
                .ok()
                .filter(|a| !a.trim().is_empty());
            let Some(agent) = agent else {
                return Err(bad(
                    "amos mcp needs the agent it serves: set AMOS_AGENT (e.g. AMOS_AGENT=alice amos mcp)",
                ));
            };
            amos_node::front::mcp::serve_stdio(&home, agent.trim())?;
            return Ok(());
        }
        Cmd::Discover { timeout } => return discover_cmd(&home, &out, &timeout),
        Cmd::Bench {
            mesh: Some(nodes),
            degree,
            seed,
            ..
        } => {
            if nodes < 2 || degree < 1 || degree >= nodes {
                return Err(bad(format!(
                    "bench --mesh: needs at least 2 nodes and a degree from 1 to N-1 (got {nodes} nodes, degree {degree})"
                )));
            }
            let r = amos_node::bench::mesh::run(nodes, degree, seed.unwrap_or(1));
            out.emit(&r, || serde_json::to_string_pretty(&r).unwrap_or_default());
            return Ok(());
        }
        Cmd::Bench {
            generate: Some(args),
            seed,
            ..
        } => {
            let [n, dir] = args.as_slice() else {
                return Err(bad("amos bench --generate needs N and DIR"));
            };
            let memories = n.parse::<usize>().map_err(|_| {
                bad(format!(
                    "bench --generate: N must be a number of memories, at least 1 (got {n:?})"
                ))
            })?;
            let cfg = amos_node::bench::GenerateConfig {
                memories,
                dir: PathBuf::from(dir),
                seed: seed.unwrap_or(amos_node::bench::DEFAULT_SEED),
                feedback: out.feedback(),
            };
            let r = amos_node::bench::generate(&cfg)?;
            out.emit(&r, || {
                format!(
                    "wrote {} memories and {} queries to {} (seed {})",
                    r.memories, r.queries, r.dir, r.seed
                )
            });
            return Ok(());
        }
        Cmd::Bench {
            corpus,
            seed,
            passes,
            limit,
            adds,
            workdir,
            keep,
            no_sync,
            ..
        } => {
            let Some(corpus) = corpus else {
                return Err(bad(
                    "amos bench needs --corpus DIR, --generate N DIR or --mesh N",
                ));
            };
            if seed.is_some() {
                return Err(bad("bench: --seed goes with --generate or --mesh"));
            }
            let cfg = amos_node::bench::BenchConfig {
                corpus,
                passes: passes.max(1),
                limit,
                single_adds: adds,
                workdir,
                feedback: out.feedback(),
                keep,
                sync: !no_sync,
            };
            let r = amos_node::bench::run(&cfg)?;
            out.emit(&r, || serde_json::to_string_pretty(&r).unwrap_or_default());
            return Ok(());
        }
        _ => {}
    }
    let mut node = Node::open(&home)?;
    match cli.cmd {
        Cmd::Init { .. }
        | Cmd::Demo
        | Cmd::Eval { .. }
        | Cmd::Bench { .. }
        | Cmd::Serve { .. }
        | Cmd::Console { .. }
        | Cmd::Sync(_)
        | Cmd::Service(_)
        | Cmd::Mcp
        | Cmd::Join { .. }
        | Cmd::Discover { .. } => {
            unreachable!("handled above")
        }
        cmd @ (Cmd::Add { .. }
        | Cmd::Supersede { .. }
        | Cmd::Timeline { .. }
        | Cmd::Get { .. }
        | Cmd::Search { .. }
        | Cmd::Pack { .. }
        | Cmd::Profile { .. }
        | Cmd::Update { .. }
        | Cmd::History { .. }
        | Cmd::Share { .. }
        | Cmd::Unshare { .. }
        | Cmd::Forget { .. }
        | Cmd::Link { .. }
        | Cmd::Feedback { .. }
        | Cmd::RestoreMemory { .. }
        | Cmd::List { .. }) => memory::run(&mut node, &out, cmd)?,
        cmd @ (Cmd::Import { .. }
        | Cmd::Export { .. }
        | Cmd::Config(_)
        | Cmd::Audit { what: Some(_), .. }) => moves::run(&mut node, &out, cmd)?,
        cmd @ (Cmd::Agent { .. } | Cmd::Team { .. } | Cmd::Project { .. }) => {
            org::run(&mut node, &out, cmd)?
        }
        cmd @ (Cmd::Digest { .. }
        | Cmd::Peers { .. }
        | Cmd::Mesh { .. }
        | Cmd::Bundle { .. }
        | Cmd::Audit { .. }) => mesh::run(&mut node, &out, cmd)?,
        cmd @ (Cmd::Id
        | Cmd::Status
        | Cmd::Doctor { .. }
        | Cmd::Check
        | Cmd::Index { .. }
        | Cmd::Backup { .. }
        | Cmd::Restore { .. }
        | Cmd::Consolidate { .. }
        | Cmd::Retention { .. }) => maintenance::run(&mut node, &out, cmd)?,
    }
    Ok(())
}

fn set_grant(
    node: &mut Node,
    out: &Out,
    w: &AsAgent,
    id: &str,
    scope: &str,
    share: bool,
) -> Result<()> {
    let who = who(node, w)?;
    let (id, grants) = node.set_grant(&who, id, scope, share)?;
    out.emit(
        &json!({"id": id.to_string(), "visibility": grants.to_strings()}),
        || format!("{id} visible to: {grants}"),
    );
    Ok(())
}
