//! `treelog`: the command-line tool (local and remote namespace commands,
//! `serve`, `admin`, `demo`). See `treelog --help` and the README.

use clap::Parser;

mod admin_cmd;
mod args;
mod backend;
mod bridge;
mod cluster;
mod credential;
mod demo;
mod describe;
mod exit;
mod fs;
mod import;
mod list;
mod output;
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
    run::run(args::Cli::parse())
}
