//! `treelog`: the command-line tool (local and remote namespace commands,
//! `serve`, `admin`, `demo`). See `treelog --help` and the README.

use std::io::Write;

use clap::FromArgMatches;

mod admin_cmd;
mod args;
mod backend;
mod bridge;
mod bridge_args;
mod cli_docs;
mod cluster;
mod config;
mod consistency;
mod credential;
mod demo;
mod describe;
mod dump;
mod exit;
mod fs;
mod import;
mod list;
mod mount_cmd;
mod output;
mod parse;
mod run;
mod serve;
mod tail;
mod timefmt;
mod tls;
mod usage;

// The library's modules under the names the commands use.
use treelog::{
    admin, backup, command, error, event, format, path, retention, store, stream, types,
};
use treelog_client as client;
use treelog_proto::protocol;
use treelog_server as server;

// See the workspace Cargo.toml: the write path allocates on one thread and
// frees on another, which mimalloc handles far better than glibc malloc.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let parsed = config::parse();
    if let Some(text) = config::print_config(&parsed) {
        let _ = std::io::stdout().write_all(text.as_bytes());
        return std::process::ExitCode::SUCCESS;
    }
    run::run(args::Cli::from_arg_matches(&parsed.matches).unwrap_or_else(|e| e.exit()))
}
