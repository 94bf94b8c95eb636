//! `treelog bench suite`: treelog side by side with the seeds' design, the
//! raw RocksDB limit and SQLite, in one process run, with ratios and JSON.
//!
//! - Durable creates (1/8/64 callers over 1,000 directories) on treelog,
//!   `seed-serialized`, `sqlite` and `raw-rocksdb`. The raw RocksDB figure is
//!   a create-only ceiling (treelog's bytes per create, pre-encoded, no
//!   validation); it has no counterpart for the other workloads.
//! - Replay: rebuild of treelog's index from a long log.
//! - The namespace workloads ([`workloads`]) on treelog, `seed-serialized`
//!   ([`SeedStore`]) and `sqlite` ([`SqliteStore`]) through
//!   [`BenchNamespace`]: mkdir -p over 1,000 parents, rename within and
//!   across directories, delete a file, stat by path at depth 6, list a
//!   10-entry and a 10,000-entry directory, and a mixed 70% stat / 20% create
//!   / 10% rename-or-delete load. Every acknowledged write is synced; writes
//!   and the mixed load come from 64 callers, reads from 2 threads; each
//!   system gets a fresh directory and the same operations. The fixtures
//!   (parents, files to rename, the listed directories, the stat tree) are
//!   built by [`BenchNamespace::load`] and not measured.
//! - With `--scale`, growth of one treelog namespace to 10M inodes.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use rocksdb::{ColumnFamilyDescriptor, WriteBatch, WriteOptions, DB};

use crate::error::{Error, Result};
use crate::event::{Event, Record};
use crate::format::v2::{self, InodeEntryV2};
use crate::format::{self, record};
use crate::types::{Attrs, FileType};
use treelog::Durability;
use treelog::{Options, Treelog};

use super::{
    median, run_creates, run_creates_async, seed::SeedStore, BenchNamespace, Creator, Figure,
};

mod raw_rocksdb;
mod scale;
mod sqlite;
mod targets;

use raw_rocksdb::*;
pub use scale::*;
pub use sqlite::*;
pub use targets::*;

pub(crate) fn bar(len: u64, msg: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    if let Ok(style) =
        ProgressStyle::with_template("{msg:>24} [{bar:40}] {pos}/{len} ({per_sec}, eta {eta})")
    {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_message(msg.to_owned());
    pb
}

/// The systems of the create comparison, in the order a repetition runs
/// them (the next repetition runs them backwards). `seed-unserialized` is
/// the seeds' write path without the namespace lock: it races (two creates
/// of one name can both succeed) but RocksDB's own write grouping batches
/// its synced writes, so it is shown beside the correct, serialized one.
const CREATE_SYSTEMS: [&str; 6] = [
    "treelog",
    "treelog-async",
    "seed-serialized",
    "seed-unserialized",
    "raw-rocksdb",
    "sqlite",
];

/// One create run of `sys` with `n` callers, on a fresh directory.
fn create_run(base: &Path, sys: &str, n: usize, ops: usize) -> Result<Figure> {
    let path = base.join(format!("suite-{sys}-{n}"));
    let _ = std::fs::remove_dir_all(&path);
    // The systems that sync once per operation run at ~5-8k creates/s
    // here; 5,000 keeps their runs near a second.
    let one_sync_per_op =
        sys == "sqlite" || sys == "seed-serialized" || (sys == "seed-unserialized" && n == 1);
    let sys_ops = if one_sync_per_op { ops.min(5_000) } else { ops };
    let f = match sys {
        "raw-rocksdb" => raw_rocksdb(&path, sys_ops, n),
        "treelog-async" => Treelog::open(&path, Options::default())
            .and_then(|t| run_creates_async(sys, Arc::new(t), n, sys_ops, 1000, "c")),
        _ => open_system(sys, &path).and_then(|ns| run_creates(sys, ns, n, sys_ops, 1000, "c")),
    };
    let _ = std::fs::remove_dir_all(&path);
    f
}

/// `median (min-max)` of `v`, each formatted by `f`.
fn spread(v: &[f64], f: impl Fn(f64) -> String) -> String {
    let mid = f(median(v.to_vec()));
    if v.len() < 2 {
        return mid;
    }
    let (min, max) = range(v);
    format!("{mid} ({}-{})", f(min), f(max))
}

/// The smallest and largest of `v` (infinities if empty).
fn range(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
}

/// Durable creates on every system, `repeat` times per caller count, then
/// the replay. The host is shared and its fsync latency drifts within
/// seconds, so the systems run one after the other, in alternating order,
/// and each ratio is taken within one repetition: the figures reported are
/// the median run of each system and the median of the repetitions'
/// ratios, with their range.
pub fn run(
    base: &Path,
    ops: usize,
    callers: &[usize],
    replay_records: u64,
    repeat: usize,
    report: &mut Report,
) -> Result<()> {
    let repeat = repeat.max(1);
    println!("== durable creates ({ops} per run, 1,000 directories; every create synced before it returns)");
    println!(
        "   raw-rocksdb is a create-only ceiling: treelog's bytes per create, pre-encoded, no validation"
    );
    if repeat > 1 {
        println!(
            "   {repeat} repetitions, the systems in turn (every other one backwards); creates/s: median (min-max); a ratio: the median of the repetitions' side-by-side ratios (min-max)"
        );
    }
    println!("{:<20} {:>8} {:>12}", "system", "callers", "creates/s");
    for &n in callers {
        let mut runs: Vec<Vec<Figure>> = vec![Vec::new(); CREATE_SYSTEMS.len()];
        for r in 0..repeat {
            let order: [usize; CREATE_SYSTEMS.len()] = std::array::from_fn(|i| i);
            for i in super::in_turn(r, order) {
                runs[i].push(create_run(base, CREATE_SYSTEMS[i], n, ops)?);
            }
            if repeat > 1 {
                let line: Vec<String> = CREATE_SYSTEMS
                    .iter()
                    .zip(&runs)
                    .map(|(s, f)| format!("{s} {:.0}", f[r].ops_per_sec))
                    .collect();
                println!("   repetition {}: {}", r + 1, line.join(", "));
            }
        }
        // Each system's runs, by name, in repetition order (a ratio pairs
        // the runs of one repetition).
        let by_system: Vec<(&str, Vec<Figure>)> = CREATE_SYSTEMS.into_iter().zip(runs).collect();
        let rates = |sys: &str| -> Vec<f64> {
            by_system
                .iter()
                .filter(|(s, _)| *s == sys)
                .flat_map(|(_, fs)| fs.iter().map(|f| f.ops_per_sec))
                .collect()
        };
        let figures = &mut report.figures;
        for (sys, fs) in &by_system {
            println!(
                "{sys:<20} {n:>8} {:>12}",
                spread(&rates(sys), |x| format!("{x:.0}"))
            );
            // The median run itself, so that its latencies go with it.
            let mut sorted: Vec<&Figure> = fs.iter().collect();
            sorted.sort_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
            if let Some(f) = sorted.get(sorted.len() / 2) {
                figures.push((*f).clone());
            }
        }
        for t_sys in ["treelog", "treelog-async"] {
            let t = rates(t_sys);
            let mut ratio = |other: &str, digits: usize| {
                let o = rates(other);
                let r: Vec<f64> = t.iter().zip(&o).map(|(a, b)| a / b).collect();
                report.ratios.push(Ratio::of("create", n, t_sys, other, &r));
                spread(&r, |x| format!("{x:.digits$}x"))
            };
            println!(
                "  ratios at {n} callers: {t_sys}/seed-serialized {}, {t_sys}/sqlite {}, {t_sys}/raw-rocksdb {}, {t_sys}/seed-unserialized {} (races)",
                ratio("seed-serialized", 1),
                ratio("sqlite", 1),
                ratio("raw-rocksdb", 2),
                ratio("seed-unserialized", 1)
            );
        }
    }

    println!("== replay: rebuild the index from a log of {replay_records} records");
    let path = base.join("suite-replay");
    crate::replay::build_log(&path, replay_records, crate::replay::ReplayLog::Mkdirs)?;
    let (n, secs) = crate::replay::rebuild(&path)?;
    println!(
        "{:<20} {:>12.0} records/s ({n} records in {secs:.2} s)",
        "treelog replay",
        n as f64 / secs
    );
    report
        .figures
        .push(Figure::rate("treelog-replay", 1, n as usize, secs));
    let _ = std::fs::remove_dir_all(&path);
    Ok(())
}

/// Runs `n` operations from `threads` threads, `op(i)` each; returns ops/s.
fn par(threads: usize, n: usize, op: impl Fn(usize) -> Result<()> + Sync) -> Result<f64> {
    let t0 = Instant::now();
    let errors = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for th in 0..threads {
            let op = &op;
            let errors = &errors;
            s.spawn(move || {
                for i in (th..n).step_by(threads) {
                    if op(i).is_err() {
                        errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let e = errors.load(std::sync::atomic::Ordering::Relaxed);
    if e > 0 {
        return Err(Error::InvalidArgument(format!("{e} operations failed")));
    }
    Ok(n as f64 / t0.elapsed().as_secs_f64())
}

/// The systems of the namespace workloads.
const SYSTEMS: [&str; 3] = ["treelog", "seed-serialized", "sqlite"];

fn open_system(sys: &str, path: &Path) -> Result<Arc<dyn BenchNamespace>> {
    Ok(match sys {
        "treelog" => Arc::new(Treelog::open(path, Options::default())?),
        "seed-serialized" => Arc::new(SeedStore::open(path, true)?),
        // Create comparison only: it races, so the namespace workloads
        // (renames, deletes) do not run on it.
        "seed-unserialized" => Arc::new(SeedStore::open(path, false)?),
        "sqlite" => Arc::new(SqliteStore::open(path)?),
        other => return Err(Error::InvalidArgument(format!("unknown system {other}"))),
    })
}

/// One measured workload of one system.
struct Measured {
    /// Short name, for the figure: `{system}-{slug}`.
    slug: &'static str,
    threads: usize,
    ops: usize,
    rate: f64,
}

/// How many operations each workload runs.
#[derive(Clone, Copy)]
struct Sizes {
    /// Write operations (mkdir, renames, delete, mixed).
    writes: usize,
    /// Stats at depth 6.
    stats: usize,
    /// Listings of the 10-entry directory.
    list10: usize,
    /// Listings of the 10,000-entry directory.
    list10k: usize,
    /// Files in the depth-6 tree that the stats resolve.
    stat_files: usize,
}

/// The path of file `f` of the depth-6 stat tree.
fn stat_path(f: usize) -> String {
    format!("/s/l1/l2/l3/l4/d{}/f{f}", f % 10)
}

/// Builds the fixture of every workload (not measured), then runs the
/// workloads on `ns` one after the other: writes from 64 callers, reads from
/// 2 threads, every error failing the run.
fn run_system(sys: &str, ns: &dyn BenchNamespace, z: Sizes) -> Result<Vec<Measured>> {
    let w = z.writes;
    let mut dirs: Vec<String> = vec!["/mk".into()];
    dirs.extend((0..1000).map(|d| format!("/mk/d{d}")));
    dirs.extend(["/l10", "/l10k", "/s", "/s/l1", "/s/l1/l2", "/s/l1/l2/l3"].map(String::from));
    dirs.push("/s/l1/l2/l3/l4".into());
    dirs.extend((0..10).map(|d| format!("/s/l1/l2/l3/l4/d{d}")));
    let mut files: Vec<String> = (0..w).map(|i| format!("/mk/d{}/f{i}", i % 1000)).collect();
    // The files the mixed workload renames or deletes.
    files.extend(
        (0..w)
            .filter(|i| i % 10 == 9)
            .map(|i| format!("/mk/d{}/z{i}", i % 1000)),
    );
    files.extend((0..10).map(|i| format!("/l10/f{i}")));
    files.extend((0..10_000).map(|i| format!("/l10k/f{i:05}")));
    files.extend((0..z.stat_files).map(stat_path));
    let pb = bar((dirs.len() + files.len()) as u64, &format!("{sys}: setup"));
    ns.load(&dirs, &files, Some(&pb))?;
    drop((dirs, files));

    let mut out = Vec::new();
    let mut measure = |slug: &'static str,
                       label: &'static str,
                       threads: usize,
                       n: usize,
                       op: &(dyn Fn(usize) -> Result<()> + Sync)|
     -> Result<()> {
        let rate = par(threads, n, op)?;
        println!("  {sys:<16} {label:<38} {n:>9} {rate:>12.0} ops/s");
        out.push(Measured {
            slug,
            threads,
            ops: n,
            rate,
        });
        Ok(())
    };
    let expect = |want: usize, got: usize| {
        if got == want {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "listed {got} entries, expected {want}"
            )))
        }
    };
    measure("mkdir-p", LABELS[0], 64, w, &|i| {
        ns.mkdir_p(&format!("/mk/d{}/e{i}", i % 1000))
    })?;
    measure("rename-within", LABELS[1], 64, w, &|i| {
        ns.rename(
            &format!("/mk/d{}/f{i}", i % 1000),
            &format!("/mk/d{}/g{i}", i % 1000),
        )
    })?;
    measure("rename-across", LABELS[2], 64, w, &|i| {
        ns.rename(
            &format!("/mk/d{}/g{i}", i % 1000),
            &format!("/mk/d{}/h{i}", (i + 1) % 1000),
        )
    })?;
    measure("delete", LABELS[3], 64, w, &|i| {
        ns.delete(&format!("/mk/d{}/h{i}", (i + 1) % 1000))
    })?;
    measure("stat-depth6", LABELS[4], 2, z.stats, &|i| {
        ns.stat(&stat_path((i * 7919) % z.stat_files))
    })?;
    measure("list-10", LABELS[5], 2, z.list10, &|_| {
        expect(10, ns.list("/l10")?)
    })?;
    measure("list-10k", LABELS[6], 2, z.list10k, &|_| {
        expect(10_000, ns.list("/l10k")?)
    })?;
    // 70% stat of a directory made above, 20% create, 10% rename or delete
    // of a file made in the setup.
    measure("mixed", LABELS[7], 64, w, &|i| match i % 10 {
        0..=6 => {
            let k = (i * 31) % w;
            ns.stat(&format!("/mk/d{}/e{k}", k % 1000))
        }
        7 | 8 => ns.create(&format!("/mk/d{}/x{i}", i % 1000)),
        _ if (i / 10) % 2 == 0 => ns.rename(
            &format!("/mk/d{}/z{i}", i % 1000),
            &format!("/mk/d{}/w{i}", i % 1000),
        ),
        _ => ns.delete(&format!("/mk/d{}/z{i}", i % 1000)),
    })?;
    Ok(out)
}

const LABELS: [&str; 8] = [
    "mkdir -p (1,000 parents)",
    "rename within a directory",
    "rename across directories",
    "delete a file",
    "stat by path at depth 6",
    "list a 10-entry directory",
    "list a 10,000-entry directory",
    "mixed 70% stat/20% create/10% mv-rm",
];

/// The namespace workloads on treelog, the serialized seed design and
/// SQLite, side by side: every acknowledged write synced, the same
/// operations and concurrency for every system (writes and mixed from 64
/// callers, reads from 2 threads).
pub fn workloads(base: &Path, ops: usize, report: &mut Report) -> Result<()> {
    let stat_files = (ops * 5).clamp(1_000, 100_000);
    let sizes = |sys: &str| Sizes {
        // A synced write of the seed design or SQLite costs ~200 us here.
        writes: if sys == "treelog" {
            ops
        } else {
            ops.min(5_000)
        },
        stats: (ops * 50).min(1_000_000),
        list10: (ops * 5).min(100_000),
        list10k: 200,
        stat_files,
    };
    println!(
        "== namespace workloads: {} (fresh directory each; writes synced, 64 callers; reads 2 threads)",
        SYSTEMS.join(", ")
    );
    println!(
        "   write ops: treelog {ops}, seed-serialized and sqlite {} (~5k synced writes/s on this disk); stat tree: {stat_files} files at depth 6",
        ops.min(5_000)
    );
    println!(
        "   raw-rocksdb is a create-only ceiling (no validation, pre-encoded) and is not run here"
    );
    println!("   list: every system reads each entry's name and attributes (its inode)");
    let mut results: Vec<(&str, Vec<Measured>)> = Vec::new();
    for sys in SYSTEMS {
        let path = base.join(format!("suite-workloads-{sys}"));
        let _ = std::fs::remove_dir_all(&path);
        let ns = open_system(sys, &path)?;
        let r = run_system(sys, ns.as_ref(), sizes(sys));
        drop(ns);
        let _ = std::fs::remove_dir_all(&path);
        results.push((sys, r?));
    }
    println!(
        "{:<38} {:<16} {:>9} {:>12}",
        "workload", "system", "ops", "ops/s"
    );
    for (wi, label) in LABELS.iter().enumerate() {
        for (sys, ms) in &results {
            let m = &ms[wi];
            let first = if sys == &SYSTEMS[0] { *label } else { "" };
            println!("{first:<38} {sys:<16} {:>9} {:>12.0}", m.ops, m.rate);
            report.figures.push(Figure::rate(
                format!("{sys}-{}", m.slug),
                m.threads,
                m.ops,
                m.ops as f64 / m.rate,
            ));
        }
        let rate = |s: &str| {
            results
                .iter()
                .find(|(sys, _)| *sys == s)
                .map(|(_, ms)| ms[wi].rate)
                .unwrap_or(f64::NAN)
        };
        let t = rate("treelog");
        let (seed, sqlite) = (t / rate("seed-serialized"), t / rate("sqlite"));
        println!("  ratios: treelog/seed-serialized {seed:.1}x, treelog/sqlite {sqlite:.1}x");
        let (slug, threads) = (results[0].1[wi].slug, results[0].1[wi].threads);
        for (over, r) in [("seed-serialized", seed), ("sqlite", sqlite)] {
            report
                .ratios
                .push(Ratio::of(slug, threads, "treelog", over, &[r]));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn repetitions_report_the_median_and_the_range() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        // An even count takes the upper middle value (a run that happened).
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 3.0);
        assert!(median(Vec::new()).is_nan());
        let f = |x: f64| format!("{x:.1}");
        assert_eq!(spread(&[15.0, 12.5, 20.0], f), "15.0 (12.5-20.0)");
        assert_eq!(spread(&[7.0], f), "7.0");
    }

    /// The same small scenario, with its error cases, on every system of the
    /// workloads: the comparison systems must be correct, not just fast.
    fn scenario(sys: &str, ns: &dyn BenchNamespace) {
        let kind = |r: Result<()>| r.map_err(|e| e.kind()).err();
        ns.mkdir("/a").unwrap();
        ns.mkdir_p("/a/b/c").unwrap();
        ns.mkdir_p("/a/b/c").unwrap();
        assert_eq!(
            kind(ns.mkdir("/a")),
            Some(ErrorKind::AlreadyExists),
            "{sys}"
        );
        assert_eq!(kind(ns.mkdir("/x/y")), Some(ErrorKind::NotFound), "{sys}");
        ns.create("/a/f1").unwrap();
        ns.create("/a/f2").unwrap();
        assert_eq!(
            kind(ns.create("/a/f1")),
            Some(ErrorKind::AlreadyExists),
            "{sys}"
        );
        ns.stat("/a/f1").unwrap();
        ns.stat("/a/b/c").unwrap();
        ns.stat("/").unwrap();
        assert_eq!(kind(ns.stat("/a/nope")), Some(ErrorKind::NotFound), "{sys}");
        assert_eq!(
            kind(ns.stat("/nope/f1")),
            Some(ErrorKind::NotFound),
            "{sys}"
        );
        assert_eq!(ns.list("/a").unwrap(), 3, "{sys}");
        assert_eq!(ns.list("/a/b/c").unwrap(), 0, "{sys}");
        assert_eq!(ns.list("/").unwrap(), 1, "{sys}");
        assert!(ns.list("/a/f1").is_err(), "{sys}: list of a file");
        assert!(ns.list("/nope").is_err(), "{sys}: list of a missing dir");

        // Rename within a directory.
        ns.rename("/a/f1", "/a/g1").unwrap();
        assert_eq!(kind(ns.stat("/a/f1")), Some(ErrorKind::NotFound), "{sys}");
        ns.stat("/a/g1").unwrap();
        assert_eq!(ns.list("/a").unwrap(), 3, "{sys}");
        // Across directories.
        ns.rename("/a/g1", "/a/b/c/h1").unwrap();
        ns.stat("/a/b/c/h1").unwrap();
        assert_eq!(ns.list("/a").unwrap(), 2, "{sys}");
        assert_eq!(ns.list("/a/b/c").unwrap(), 1, "{sys}");
        // The moved inode keeps working under its new name.
        ns.rename("/a/b/c/h1", "/a/h2").unwrap();
        ns.stat("/a/h2").unwrap();
        assert_eq!(ns.list("/a/b/c").unwrap(), 0, "{sys}");
        // Errors: onto an existing name, a missing source, a missing target
        // parent, a directory under itself.
        assert_eq!(
            kind(ns.rename("/a/h2", "/a/f2")),
            Some(ErrorKind::AlreadyExists),
            "{sys}"
        );
        ns.stat("/a/h2").unwrap();
        ns.stat("/a/f2").unwrap();
        assert_eq!(
            kind(ns.rename("/a/nope", "/a/z")),
            Some(ErrorKind::NotFound),
            "{sys}"
        );
        assert_eq!(
            kind(ns.rename("/a/h2", "/nope/z")),
            Some(ErrorKind::NotFound),
            "{sys}"
        );
        assert!(
            ns.rename("/a/b", "/a/b/c/d").is_err(),
            "{sys}: dir under itself"
        );
        // Directories move too.
        ns.rename("/a/b", "/b2").unwrap();
        ns.stat("/b2/c").unwrap();
        assert_eq!(kind(ns.stat("/a/b/c")), Some(ErrorKind::NotFound), "{sys}");

        // Delete: a file, then a non-empty and an empty directory.
        ns.delete("/a/h2").unwrap();
        assert_eq!(kind(ns.stat("/a/h2")), Some(ErrorKind::NotFound), "{sys}");
        assert_eq!(kind(ns.delete("/a/h2")), Some(ErrorKind::NotFound), "{sys}");
        assert_eq!(kind(ns.delete("/b2")), Some(ErrorKind::NotEmpty), "{sys}");
        ns.stat("/b2/c").unwrap();
        ns.delete("/b2/c").unwrap();
        ns.delete("/b2").unwrap();
        assert_eq!(kind(ns.stat("/b2")), Some(ErrorKind::NotFound), "{sys}");
        assert_eq!(ns.list("/a").unwrap(), 1, "{sys}");
        assert_eq!(ns.list("/").unwrap(), 1, "{sys}");
        // A deleted name can be created again.
        ns.create("/a/h2").unwrap();
        assert_eq!(ns.list("/a").unwrap(), 2, "{sys}");

        // The unmeasured setup path.
        let dirs = ["/l", "/l/d0", "/l/d1"].map(String::from);
        let files: Vec<String> = (0..20).map(|i| format!("/l/d{}/f{i}", i % 2)).collect();
        ns.load(&dirs, &files, None).unwrap();
        assert_eq!(ns.list("/l/d0").unwrap(), 10, "{sys}");
        ns.stat("/l/d1/f19").unwrap();
        assert!(ns.load(&[], &["/l/d0/f0".into()], None).is_err(), "{sys}");
    }

    /// The targets are judged on the figures they name (creates at 64
    /// callers, and a lone caller against the serialized seed only), and a
    /// missed one says so.
    #[test]
    fn targets_judge_the_figures_they_name() {
        let ratio =
            |callers, over: &str, m| Ratio::of("create", callers, "treelog-async", over, &[m]);
        let point = |inodes, grown, settled, bytes| ScalePoint {
            inodes,
            grown_creates_per_sec: grown,
            settle_seconds: 0.0,
            creates_per_sec: settled,
            stats_per_sec: 0.0,
            rss_mib: 0.0,
            index_bytes_per_inode: bytes,
            log_bytes_per_record: 0.0,
            cold_stat_us: (0.0, 0.0),
            warm_stat_us: (0.0, 0.0),
            replay_records_per_sec: 0.0,
            replica_serve_seconds: 0.0,
        };
        let r = Report {
            figures: vec![
                Figure::rate("treelog-stat-depth6", 2, 1_000, 0.0005),
                Figure::rate("treelog-replay", 1, 1_000, 0.002),
                Figure::rate("treelog-list-10k", 2, 200, 0.2),
                Figure::rate("sqlite-list-10k", 2, 200, 0.5),
                Figure::rate("network-creates-1x64", 64, 50, 1.0),
                Figure::rate("network-creates-16x4", 64, 80, 1.0),
                Figure::rate("inproc-creates-64", 64, 100, 1.0),
                Figure::rate("network-stats-1x64", 64, 400, 1.0),
                Figure::rate("redis-benchmark-get-p64", 1, 500, 1.0),
            ],
            ratios: vec![
                ratio(1, "seed-serialized", 1.1),
                ratio(1, "sqlite", 0.5),
                ratio(8, "sqlite", 1.0),
                ratio(64, "seed-serialized", 21.0),
                ratio(64, "sqlite", 17.0),
                ratio(64, "raw-rocksdb", 0.5),
                ratio(64, "seed-unserialized", 2.0),
            ],
            scale: vec![
                point(100_000, 100.0, 100.0, 30.0),
                point(1_000_000, 90.0, 90.0, 28.0),
                point(10_000_000, 79.0, 80.0, 25.0),
            ],
            targets: vec![],
        };
        let got: Vec<(String, bool)> = targets(&r).into_iter().map(|t| (t.figure, t.met)).collect();
        let want = [
            ("creates, 64 callers: treelog-async / seed-serialized", true),
            ("creates, 64 callers: treelog-async / sqlite", false),
            ("creates, 64 callers: treelog-async / raw-rocksdb", true),
            ("creates, 1 caller: treelog-async / seed-serialized", true),
            ("list a 10,000-entry directory: treelog / sqlite", true),
            ("creates over 1 connection x 64 / in-process", false),
            ("creates over 16 connections x 4 / in-process", true),
            (
                "stats over 1 connection x 64 / redis-benchmark GET -P 64",
                true,
            ),
            ("stat by path, depth 6, 2 threads (/s)", true),
            ("replay (records/s)", false),
            ("creates at 10000000 / at 100000 inodes, as grown", false),
            ("creates at 10000000 / at 100000 inodes, settled", true),
            ("creates at 10000000 / at 1000000 inodes, settled", true),
            ("index bytes per inode at 10000000", true),
            ("RSS MiB at 10000000", true),
            ("replay records/s at 10000000", false),
        ];
        let want: Vec<(String, bool)> = want.iter().map(|(f, m)| (f.to_string(), *m)).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn bench_namespace_systems_agree() {
        for sys in SYSTEMS {
            let dir = tempfile::tempdir().unwrap();
            let ns = open_system(sys, dir.path()).unwrap();
            scenario(sys, ns.as_ref());
        }
        let dir = tempfile::tempdir().unwrap();
        let ns = open_system("seed-unserialized", dir.path()).unwrap();
        scenario("seed-unserialized", ns.as_ref());
    }

    /// The stores' writes are durable: they survive reopening.
    #[test]
    fn bench_namespace_reopen() {
        for sys in SYSTEMS {
            let dir = tempfile::tempdir().unwrap();
            {
                let ns = open_system(sys, dir.path()).unwrap();
                ns.mkdir("/d").unwrap();
                ns.create("/d/f").unwrap();
                ns.rename("/d/f", "/d/g").unwrap();
            }
            let ns = open_system(sys, dir.path()).unwrap();
            ns.stat("/d/g").unwrap();
            assert_eq!(ns.list("/d").unwrap(), 1, "{sys}");
        }
    }
}
