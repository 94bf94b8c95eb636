use clap::Parser;

// See Cargo.toml: the write path allocates on one thread and frees on
// another, which mimalloc handles far better than glibc malloc.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // Crash points of the reliability tests (FAILPOINTS, see src/failpoint.rs).
    #[cfg(feature = "failpoints")]
    let _failpoints = fail::FailScenario::setup();
    treelog::cli::run(treelog::cli::Cli::parse())
}
