//! `treelog-bench`: the benchmarks of docs/BENCHMARKS.md.

use clap::Parser;

// Measured with the allocator the `treelog` binary ships with.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "treelog-bench",
    about = "treelog's benchmarks (see docs/BENCHMARKS.md)"
)]
struct Cli {
    #[command(flatten)]
    args: treelog_bench::BenchArgs,
}

fn main() -> std::process::ExitCode {
    match treelog_bench::run(&Cli::parse().args) {
        Ok(code) => std::process::ExitCode::from(code),
        Err(e) => {
            eprintln!("treelog-bench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
