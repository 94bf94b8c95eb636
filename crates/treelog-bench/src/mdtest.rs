//! `treelog-bench mdtest-fs`: mdtest's metadata phases through the kernel,
//! on any directory: a `treelog mount`, and beside it in the same run a
//! tmpfs and an ext4 directory as the kernel's own reference.
//!
//! Like mdtest (`-n ITEMS`, `-u` for "easy"), N tasks each create, stat
//! and remove ITEMS directories, then ITEMS empty files: each in a
//! directory of its own ("easy", `mdtest -u`) or all in one shared
//! directory ("hard"). Tasks are threads of this process, released
//! together at the start of each phase; a phase's rate is its operations
//! over the time from the release to the last task's end, as mdtest
//! computes it. Every operation's latency is kept, for percentiles.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crate::error::Result;

/// The phases, in mdtest's order and with its names.
const PHASES: [&str; 6] = [
    "Directory creation",
    "Directory stat",
    "Directory removal",
    "File creation",
    "File stat",
    "File removal",
];

/// One target directory's results: per phase, each iteration's rate and
/// every operation's latency.
struct Results {
    label: String,
    rates: Vec<Vec<f64>>,
    latencies: Vec<Vec<Duration>>,
}

/// What a run does.
#[derive(Debug, Clone)]
pub struct MdtestArgs {
    /// `label=DIR` pairs.
    pub targets: Vec<(String, PathBuf)>,
    pub tasks: usize,
    pub items: usize,
    pub iterations: usize,
    /// All tasks in one directory ("hard") instead of one each ("easy").
    pub shared: bool,
}

fn op(phase: usize, path: &Path) -> std::io::Result<()> {
    match phase {
        0 => std::fs::create_dir(path),
        1 | 4 => std::fs::metadata(path).map(drop),
        2 => std::fs::remove_dir(path),
        3 => std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map(drop),
        5 => std::fs::remove_file(path),
        _ => unreachable!("six phases"),
    }
}

/// Runs every phase once in `base` (which exists and is empty).
fn iteration(base: &Path, a: &MdtestArgs, r: &mut Results) -> Result<()> {
    let dirs: Vec<PathBuf> = (0..a.tasks)
        .map(|t| {
            if a.shared {
                base.join("shared")
            } else {
                base.join(format!("task.{t}"))
            }
        })
        .collect();
    for d in &dirs {
        if !d.exists() {
            std::fs::create_dir(d)?;
        }
    }
    for (phase, name) in PHASES.iter().enumerate() {
        let start = Arc::new(Barrier::new(a.tasks + 1));
        let workers: Vec<_> = dirs
            .iter()
            .enumerate()
            .map(|(t, d)| {
                let (d, start, items) = (d.clone(), start.clone(), a.items);
                let kind = if phase < 3 { "dir" } else { "file" };
                std::thread::spawn(move || -> std::io::Result<Vec<Duration>> {
                    let paths: Vec<PathBuf> = (0..items)
                        .map(|i| d.join(format!("{kind}.mdtest.{t}.{i}")))
                        .collect();
                    let mut lat = Vec::with_capacity(items);
                    start.wait();
                    for p in &paths {
                        let t0 = Instant::now();
                        op(phase, p).map_err(|e| {
                            std::io::Error::new(e.kind(), format!("{}: {e}", p.display()))
                        })?;
                        lat.push(t0.elapsed());
                    }
                    Ok(lat)
                })
            })
            .collect();
        start.wait();
        let t0 = Instant::now();
        for w in workers {
            let lat = w.join().expect("an mdtest task panicked")?;
            r.latencies[phase].extend(lat);
        }
        let secs = t0.elapsed().as_secs_f64();
        let rate = (a.tasks * a.items) as f64 / secs.max(1e-9);
        eprintln!("  {}: {name}: {rate:.0} ops/s", r.label);
        r.rates[phase].push(rate);
    }
    for d in dirs {
        // Shared: removed once (the others are gone already).
        let _ = std::fs::remove_dir(d);
    }
    Ok(())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

fn print(r: &mut Results, a: &MdtestArgs) {
    println!(
        "\nSUMMARY rate (ops/s): {} — {} tasks, {} items each, {} iterations, {}",
        r.label,
        a.tasks,
        a.items,
        a.iterations,
        if a.shared {
            "one shared directory (hard)"
        } else {
            "a directory per task (easy)"
        }
    );
    println!(
        "   {:<22}{:>12}{:>12}{:>12}{:>12}{:>10}{:>10}{:>10}",
        "Operation", "Max", "Min", "Mean", "Std Dev", "p50 µs", "p99 µs", "max µs"
    );
    for (phase, name) in PHASES.iter().enumerate() {
        let rates = &r.rates[phase];
        let n = rates.len() as f64;
        let mean = rates.iter().sum::<f64>() / n;
        let sd = (rates.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
        let max = rates.iter().cloned().fold(f64::MIN, f64::max);
        let min = rates.iter().cloned().fold(f64::MAX, f64::min);
        let lat = &mut r.latencies[phase];
        lat.sort_unstable();
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        println!(
            "   {:<22}{:>12.1}{:>12.1}{:>12.1}{:>12.1}{:>10.1}{:>10.1}{:>10.1}",
            name,
            max,
            min,
            mean,
            sd,
            us(percentile(lat, 0.5)),
            us(percentile(lat, 0.99)),
            us(lat.last().copied().unwrap_or_default())
        );
    }
}

/// Runs the phases on every target, the targets alternating within each
/// iteration (A B C, A B C, ...) so that a slow moment of the host falls
/// on all of them.
pub fn run(a: &MdtestArgs) -> Result<()> {
    let mut results: Vec<Results> = a
        .targets
        .iter()
        .map(|(label, _)| Results {
            label: label.clone(),
            rates: vec![Vec::new(); PHASES.len()],
            latencies: vec![Vec::new(); PHASES.len()],
        })
        .collect();
    for i in 0..a.iterations {
        for ((_, dir), r) in a.targets.iter().zip(results.iter_mut()) {
            let base = dir.join(format!("mdtest.{}.{i}", std::process::id()));
            std::fs::create_dir(&base)?;
            iteration(&base, a, r)?;
            std::fs::remove_dir(&base)?;
        }
    }
    for r in &mut results {
        print(r, a);
    }
    Ok(())
}

/// `--target LABEL=DIR`.
pub fn parse_target(s: &str) -> std::result::Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((l, d)) if !l.is_empty() && !d.is_empty() => Ok((l.to_owned(), d.into())),
        _ => Err(format!("expected LABEL=DIR, got {s:?}")),
    }
}
