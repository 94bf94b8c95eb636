use clap::Parser;

fn main() -> std::process::ExitCode {
    treelog::cli::run(treelog::cli::Cli::parse())
}
