//! `amos`: the command-line shell over [`amos_node::Node`].
//!
//! Parses arguments (clap), calls exactly one node operation, prints the
//! result as text or `--json` on stdout, logs to stderr, and exits with the
//! codes of docs/cli.md (0 ok, 1 failed, 2 bad input, 3 refused). It holds no
//! logic of its own beyond formatting.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    cli::main()
}
