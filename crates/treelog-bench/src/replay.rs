//! Replay on its own (`replay`): a log of mkdirs (the suite's) or of file
//! creates, rebuilt into the index a few times; `--keep` leaves the
//! database for `treelog admin rebuild` under a profiler.

use std::path::{Path, PathBuf};
use std::time::Instant;

use treelog::{Durability, Options, Result, Treelog};

/// What the replayed log records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReplayLog {
    /// `mkdir -p /r{i % 1000}/d{i}`: the suite's log.
    Mkdirs,
    /// `touch /r{i % 1000}/f{i}`, each file then given a size: a create
    /// and an update per file, as a data path writes them.
    Files,
}

/// Writes a log of `records` records of kind `log` into a new database at
/// `path` (its index as the writer built it).
pub fn build_log(path: &Path, records: u64, log: ReplayLog) -> Result<()> {
    let _ = std::fs::remove_dir_all(path);
    let t = Treelog::open(path, Options::default().durability(Durability::None))?;
    let pb = crate::bar(records, "building log");
    match log {
        ReplayLog::Mkdirs => crate::bulk_load(
            &t,
            records,
            2048,
            |i| treelog::Command::Mkdir {
                path: format!("/r{}/d{i}", i % 1000).into(),
                parents: true,
                mode: 0o755,
                owner: String::new(),
                group: String::new(),
            },
            Some(&pb),
        )?,
        ReplayLog::Files => crate::bulk_load(
            &t,
            records,
            2048,
            |i| {
                let path = format!("/r{}/f{}", (i / 2) % 1000, i / 2);
                if i % 2 == 0 {
                    treelog::Command::Create {
                        path: path.into(),
                        parents: true,
                        mode: 0o644,
                        owner: String::new(),
                        group: String::new(),
                        block_size: 0,
                    }
                } else {
                    treelog::Command::SetSize {
                        path: path.into(),
                        size: i * 512,
                    }
                }
            },
            Some(&pb),
        )?,
    }
    t.close()
}

/// Rebuilds the index of the database at `path` from its log; returns
/// (records, seconds).
pub fn rebuild(path: &Path) -> Result<(u64, f64)> {
    let t0 = Instant::now();
    let n = treelog::recovery::rebuild(path, &Default::default())?;
    Ok((n, t0.elapsed().as_secs_f64()))
}

/// `replay`: builds the log, then rebuilds `rounds` times.
pub fn run(base: &Path, records: u64, log: ReplayLog, rounds: usize) -> Result<PathBuf> {
    let path = base.join("replay");
    println!("== replay: {records} records ({log:?}), {rounds} rebuilds");
    build_log(&path, records, log)?;
    for round in 0..rounds {
        let (n, secs) = rebuild(&path)?;
        println!(
            "round {round}: {:>10.0} records/s ({n} records in {secs:.2} s)",
            n as f64 / secs
        );
    }
    Ok(path)
}
