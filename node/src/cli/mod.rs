//! The command line: the top-level `Cli` with its global options, one clap
//! enum per command group (each in the file with its handlers), the order
//! `amos --help` lists the commands in, dispatch, and the exit codes of
//! docs/cli.md (0 ok, 1 failed, 2 bad input, 3 refused). No product logic:
//! a handler turns arguments into one node call and prints the answer.

mod audit;
mod context;
mod demo;
mod eval;
mod maintenance;
mod memory;
mod mesh;
mod moves;
mod org;
mod output;
mod recall;
mod sandbox;
mod serving;

use std::path::PathBuf;
use std::process::ExitCode;

use amos_acl::AuthorizedScopes;
use amos_node::{Home, Node, NodeError};
use anyhow::Result;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use output::Out;

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
    /// The requesting agent
    #[arg(long = "as", env = "AMOS_AGENT", value_name = "AGENT")]
    agent: Option<String>,
    /// Act as the local node administrator (explicit, local-only)
    #[arg(long, hide = true)]
    admin: bool,
}

impl AsAgent {
    /// Who asks, as the line of an empty answer names it.
    fn name(&self) -> &str {
        match (&self.agent, self.admin) {
            (_, true) => "the local administrator",
            (Some(a), false) => a,
            (None, false) => "no one",
        }
    }
}

/// The commands, by group. The groups' variants are flattened: the command
/// line is `amos add`, never `amos memory add`.
#[derive(Subcommand, Debug)]
enum Cmd {
    #[command(flatten)]
    Maintenance(maintenance::MaintenanceCmd),
    #[command(flatten)]
    Org(org::OrgCmd),
    #[command(flatten)]
    Memory(memory::MemoryCmd),
    #[command(flatten)]
    Recall(recall::RecallCmd),
    #[command(flatten)]
    Context(context::ContextCmd),
    #[command(flatten)]
    Moves(moves::MovesCmd),
    #[command(flatten)]
    Replication(mesh::ReplicationCmd),
    #[command(flatten)]
    Serving(serving::ServingCmd),
    #[command(flatten)]
    Auditing(audit::AuditingCmd),
    #[command(flatten)]
    Sandbox(sandbox::SandboxCmd),
}

/// The order `amos --help` lists the commands in (docs/cli.md's order, not
/// the groups'). A command missing here is listed after these.
const HELP_ORDER: [&str; 49] = [
    "init",
    "id",
    "status",
    "doctor",
    "check",
    "index",
    "backup",
    "restore",
    "agent",
    "team",
    "project",
    "add",
    "supersede",
    "timeline",
    "changes",
    "get",
    "search",
    "pack",
    "profile",
    "update",
    "history",
    "share",
    "unshare",
    "forget",
    "import",
    "export",
    "link",
    "feedback",
    "consolidate",
    "retention",
    "restore-memory",
    "list",
    "context",
    "digest",
    "peers",
    "serve",
    "console",
    "join",
    "mcp",
    "discover",
    "sync",
    "service",
    "mesh",
    "bundle",
    "audit",
    "config",
    "demo",
    "eval",
    "bench",
];

/// The parser: the derived one with the commands in [`HELP_ORDER`].
fn command() -> clap::Command {
    HELP_ORDER
        .iter()
        .enumerate()
        .fold(Cli::command(), |cmd, (i, name)| {
            cmd.mut_subcommand(name, |sub| sub.display_order(i))
        })
}

/// `Cli::try_parse`, with [`command`]'s order.
fn parse() -> Result<Cli, clap::Error> {
    let mut cmd = command();
    let mut matches = cmd.try_get_matches_from_mut(std::env::args_os())?;
    Cli::from_arg_matches_mut(&mut matches).map_err(|e| e.format(&mut cmd))
}

pub fn main() -> ExitCode {
    let cli = match parse() {
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
    // A command that prints and exits ends quietly when its reader goes
    // away (`amos team invite apollo | head -1`), as Unix tools do, instead
    // of panicking on the failed write: Rust ignores SIGPIPE, so every
    // `println!` to a closed pipe would panic. The serving commands keep
    // ignoring it: they write to sockets and must outlive a closed stdout.
    if !matches!(cli.cmd, Cmd::Serving(_)) {
        restore_sigpipe();
    }
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

/// SIGPIPE's default action (end the process) back, for this process.
fn restore_sigpipe() {
    // SAFETY: signal(2) with SIG_DFL installs no handler and touches no
    // Rust state; it runs before any thread of ours is started.
    #[allow(unsafe_code)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
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
        msg = e.kind().to_string();
    }
    // `--as` belongs to the commands that act for an agent, not to amos
    // itself: say where it goes rather than leave the reader guessing.
    if e.kind() == clap::error::ErrorKind::UnknownArgument
        && matches!(
            e.get(clap::error::ContextKind::InvalidArg),
            Some(clap::error::ContextValue::String(a)) if a == "--as" || a.starts_with("--as=")
        )
    {
        msg.push_str("; --as AGENT goes after the command, e.g. amos search QUERY --as AGENT");
    }
    msg
}

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("AMOS_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // Colour codes only for a person at a terminal: a log file, a pipe or
    // a service journal gets plain text (and none under NO_COLOR).
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(
            std::io::IsTerminal::is_terminal(&std::io::stderr())
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        )
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => fmt.try_init(),
        LogFormat::Json => fmt.json().try_init(),
    };
}

fn run(cli: Cli) -> Result<()> {
    let out = Out {
        json: cli.json,
        quiet: cli.quiet,
    };
    let home = Home::new(cli.home.clone().unwrap_or_else(Home::default_root))
        .with_model(cli.model.clone());
    match cli.cmd {
        Cmd::Maintenance(cmd) => maintenance::run(&home, &out, cmd),
        Cmd::Replication(cmd) => mesh::run(&home, &out, cmd),
        Cmd::Serving(cmd) => serving::run(&home, cli.home.as_deref(), &out, cmd),
        Cmd::Sandbox(cmd) => sandbox::run(&out, cli.model.as_deref(), cmd),
        // The rest open the home first (exit 2 if it is not one).
        Cmd::Org(cmd) => org::run(&mut Node::open(&home)?, &out, cmd),
        Cmd::Memory(cmd) => memory::run(&mut Node::open(&home)?, &out, cmd),
        Cmd::Context(cmd) => context::run(&mut Node::open(&home)?, &out, cmd),
        Cmd::Recall(cmd) => recall::run(&mut Node::open(&home)?, &out, cmd),
        Cmd::Moves(cmd) => moves::run(&mut Node::open(&home)?, &out, cmd),
        Cmd::Auditing(cmd) => audit::run(&mut Node::open(&home)?, &out, cmd),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_help_order_names_every_command_once() {
        let mut listed: Vec<&str> = HELP_ORDER.to_vec();
        listed.sort_unstable();
        listed.dedup();
        assert_eq!(listed.len(), HELP_ORDER.len(), "a command listed twice");
        let mut commands: Vec<String> = Cli::command()
            .get_subcommands()
            .map(|c| c.get_name().to_owned())
            .collect();
        commands.sort_unstable();
        assert_eq!(listed, commands);
    }

    /// Every argument of `cmd` and of its subcommands, with the command's name.
    fn every_arg(cmd: &clap::Command, out: &mut Vec<(String, clap::Arg)>) {
        for a in cmd.get_arguments() {
            out.push((cmd.get_name().to_owned(), a.clone()));
        }
        for sub in cmd.get_subcommands() {
            every_arg(sub, out);
        }
    }

    #[test]
    fn help_names_an_environment_variable_once() {
        // clap prints `[env: X]` itself for an argument read from X.
        let mut args = Vec::new();
        every_arg(&command(), &mut args);
        for (cmd, a) in args {
            if a.get_env().is_some() {
                let help = [a.get_help(), a.get_long_help()]
                    .into_iter()
                    .flatten()
                    .map(|h| h.to_string())
                    .collect::<String>();
                assert!(
                    !help.contains("[env:"),
                    "amos {cmd} --{}: its help repeats the [env: …] clap prints",
                    a.get_id()
                );
            }
        }
    }

    #[test]
    fn as_before_the_command_says_where_it_goes() {
        let e = command()
            .try_get_matches_from(["amos", "--as", "alice", "search", "q"])
            .expect_err("--as is not an option of amos itself");
        let line = one_line(&e);
        assert!(line.contains("--as AGENT goes after the command"), "{line}");
        assert!(!line.contains('\n'), "{line}");
    }

    #[test]
    fn the_command_line_is_consistent() {
        command().debug_assert();
    }
}
