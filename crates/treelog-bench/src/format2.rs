//! Format 2's figures (docs/BENCHMARKS.md, Format 2): durable creates in a
//! directory under a quota beside the same creates without one, and a
//! format-1 database of any size for `admin migrate` to be timed on.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use treelog::migrate::{write_format1, Format1Spec};
use treelog::{Options, Treelog};

use crate::error::Result;
use crate::{in_turn, median, run_creates, warm_up, Creator};

/// Durable creates from `callers` threads into 1,000 directories under
/// `/bench/q` with a quota (limits far above the run), and into the same
/// tree without one, alternating for `rounds` rounds on fresh databases;
/// prints each run and the medians' ratio per caller count.
pub fn quota_creates(base: &Path, ops: usize, callers: &[usize], rounds: usize) -> Result<()> {
    println!(
        "== creates under a quota vs not: {ops} durable creates per run into 1000 directories, \
         {rounds} rounds each, alternating"
    );
    warm_up(base, ops)?;
    for &n in callers {
        let (mut with, mut without) = (Vec::new(), Vec::new());
        for r in 0..rounds {
            for quota in in_turn(r, [true, false]) {
                let path = base.join(format!("quota-{quota}-{n}-{r}"));
                let _ = std::fs::remove_dir_all(&path);
                let t = Arc::new(Treelog::open(&path, Options::default())?);
                t.mkdir_p("/bench/q")?;
                if quota {
                    // Counted on every create, never reached.
                    t.set_quota("/bench/q", Some(1 << 50), Some(1 << 60))?;
                }
                let c: Arc<dyn Creator> = t.clone();
                let f = run_creates("treelog", c, n, ops, 1000, "q")?;
                if quota {
                    let usage = t.count("/bench/q")?.quota.map(|q| q.usage.files);
                    assert_eq!(usage, Some(f.ops as u64), "the quota counted every create");
                }
                println!(
                    "  {n:>2} callers, round {r}, {:<8}: {:>8.0} creates/s",
                    if quota { "quota" } else { "no quota" },
                    f.ops_per_sec
                );
                if quota {
                    with.push(f.ops_per_sec)
                } else {
                    without.push(f.ops_per_sec)
                }
                drop(t);
                let _ = std::fs::remove_dir_all(&path);
            }
        }
        let (a, b) = (median(with), median(without));
        println!(
            "  {n:>2} callers: median {a:.0} with a quota, {b:.0} without; ratio {:.3}",
            a / b
        );
    }
    Ok(())
}

/// Writes a format-1 database of `dirs` × `files` files at `out` (see
/// `treelog::migrate::write_format1`) and says how long it took.
pub fn make_format1(out: &Path, dirs: u64, files: u64, owners: u8, groups: u8) -> Result<()> {
    let t = Instant::now();
    let inodes = write_format1(
        out,
        &Format1Spec {
            dirs,
            files_per_dir: files,
            owners,
            groups,
            start_ms: crate::now_ms(),
        },
    )?;
    let bytes: u64 = std::fs::read_dir(out)?
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum();
    println!(
        "made a format-1 database of {inodes} inodes ({} log records) in {} in {:.1} s, {:.0} MiB",
        inodes - 1,
        out.display(),
        t.elapsed().as_secs_f64(),
        bytes as f64 / (1 << 20) as f64
    );
    Ok(())
}
