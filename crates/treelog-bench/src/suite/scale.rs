//! Growth of one namespace (`--scale`): creates and stats as it grows.

use super::*;

pub(super) fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|k| k.parse::<u64>().ok())
            })
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

/// Compacts the index column families fully (blocking).
pub(super) fn compact_index(t: &Treelog) -> Result<()> {
    let store = t.store();
    for cf in [crate::store::CF_INODES, crate::store::CF_EDGES] {
        store.compact_cf(cf)?;
    }
    Ok(())
}

/// Inodes of the scale namespace with `files` files grown (and `measured`
/// inodes from measurements): the root, `/g`, its directories (one per id
/// modulo 10,000) and the files.
pub(super) fn scale_inodes(files: u64, measured: u64) -> u64 {
    2 + files.min(10_000) + files + measured
}

/// Inodes one scale measurement of `n` creates adds: `/m…`, its 1,000
/// directories and the files.
pub(super) fn measure_inodes(n: u64) -> u64 {
    1 + n.min(1_000) + n
}

/// Stats timed one at a time in the cold and warm rounds of a checkpoint.
const LATENCY_STATS: usize = 20_000;

/// Grows one namespace to `target` inodes; at 100k, 1M, 10M and 100M
/// (those not above `target`) measures durable creates/s (64 callers) on
/// the index as grown and again after compacting it, stats/s (2 threads),
/// RSS, on-disk bytes per inode of the index (after compaction) and of the
/// log; then, reopened, stat latency cold and warm; a rebuild of the index
/// from the log; and, the rebuilt index compacted, a new replica's time to
/// serve it.
pub fn scale(base: &Path, target: u64) -> Result<Vec<ScalePoint>> {
    let mut points = Vec::new();
    let path = base.join("suite-scale");
    let _ = std::fs::remove_dir_all(&path);
    println!("== scale to {target} inodes");
    println!("   creates/s: on the index as grown (its compactions still running), then");
    println!("   after compacting it (settle: how long that took); stats/s on the settled index;");
    println!(
        "   each checkpoint's two measurements add {} inodes, counted in the bytes per inode",
        2 * measure_inodes(SCALE_MEASURE as u64)
    );
    println!(
        "{:>12} {:>10} {:>9} {:>10} {:>12} {:>10} {:>14} {:>12}",
        "inodes",
        "grown c/s",
        "settle s",
        "creates/s",
        "stats/s",
        "RSS MiB",
        "index B/inode",
        "log B/rec"
    );
    // The grown files are /g/d{id % 10,000}/f{id} for ids 1..=files, so
    // that the stats below name files that exist; `measured` counts the
    // inodes the create measurements added.
    let (mut files, mut measured) = (0u64, 0u64);
    for checkpoint in [100_000u64, 1_000_000, 10_000_000, 100_000_000] {
        if checkpoint > target {
            break;
        }
        {
            let t = Treelog::open(&path, Options::default().durability(Durability::None))?;
            // Every checkpoint is well past the 10,000 directories of /g,
            // so this many files bring the namespace to exactly
            // `checkpoint`.
            let add = checkpoint - (2 + 10_000 + files + measured);
            assert_eq!(scale_inodes(files + add, measured), checkpoint);
            let pb = bar(add, "growing");
            let from = files + 1;
            crate::bulk_load(
                &t,
                add,
                4096,
                |i| treelog::Command::Create {
                    path: format!("/g/d{}/f{}", (from + i) % 10_000, from + i).into(),
                    parents: true,
                    mode: 0o644,
                    owner: String::new(),
                    group: String::new(),
                    block_size: 0,
                },
                Some(&pb),
            )?;
            files += add;
            t.close()?;
        }
        let t = Treelog::open(&path, Options::default())?;
        // Creates are measured twice: as grown, and on a settled index. The
        // growth above runs unsynced with thousands in flight, far faster
        // than a namespace grows under durable creates, and leaves
        // compactions behind that then run during the first measurement;
        // a namespace grown at the durable rate sits between the two.
        // Each measurement is 100,000 creates (2 s or so), so that it is
        // not one noisy moment of a shared host.
        let n = SCALE_MEASURE;
        let creates = |tag: &str| {
            par(64, n, |i| {
                t.create(
                    format!("/m{checkpoint}{tag}/d{}/f{i}", i % 1000),
                    treelog::CreateOptions {
                        parents: true,
                        ..Default::default()
                    },
                )
                .map(|_| ())
            })
        };
        // The checkpoint the figures belong to; the two measurements add
        // inodes, which the bytes per inode count.
        let at = scale_inodes(files, measured);
        let grown = creates("g")?;
        let t0 = Instant::now();
        compact_index(&t)?;
        let settle = t0.elapsed().as_secs_f64();
        let c = creates("s")?;
        measured += 2 * measure_inodes(n as u64);
        // Stats of grown files spread over the whole namespace; a stat
        // that fails fails the run, so every one found its file.
        let s = par(2, 200_000, |i| {
            let id = (i as u64 * 7919) % files + 1;
            t.stat(format!("/g/d{}/f{id}", id % 10_000)).map(|_| ())
        })?;
        compact_index(&t)?;
        let store = t.store();
        let prop = |cf: &'static str| -> Result<u64> {
            Ok(store
                .cf_property(cf, "rocksdb.live-sst-files-size")
                .unwrap_or(0))
        };
        let index = prop(crate::store::CF_INODES)? + prop(crate::store::CF_EDGES)?;
        store.flush()?;
        let log = prop(crate::store::CF_LOG)?;
        let rss_mib = rss_bytes() as f64 / (1 << 20) as f64;
        let index_bytes_per_inode = index as f64 / scale_inodes(files, measured) as f64;
        let log_bytes_per_record = log as f64 / t.committed_seq().max(1) as f64;
        // Printed now: what follows takes longest at 10^8 (a rebuild, a
        // replica's bootstrap), and a run stopped there keeps these.
        println!(
            "{at:>12} {grown:>10.0} {settle:>9.1} {c:>10.0} {s:>12.0} {rss_mib:>10.0} {index_bytes_per_inode:>14.1} {log_bytes_per_record:>12.1}",
        );
        t.close()?;
        let (cold_stat_us, warm_stat_us) = stat_latency(&path, files)?;
        println!(
            "{:>12} stat us p50/p99 cold {:.1}/{:.1} warm {:.1}/{:.1}",
            "", cold_stat_us.0, cold_stat_us.1, warm_stat_us.0, warm_stat_us.1,
        );
        let (records, secs) = crate::replay::rebuild(&path)?;
        println!(
            "{:>12} replay {:.0} records/s ({records} in {secs:.1} s)",
            "",
            records as f64 / secs
        );
        // A replay below the bulk threshold leaves the index as it was
        // flushed (up to 16 L0 files, uncompressed), which a checkpoint
        // ships as it is: 2.5x the bytes at 10^6. Compacted first, the new
        // replica fetches what a settled leader serves.
        {
            let t = Treelog::open(&path, Options::default())?;
            compact_index(&t)?;
            t.close()?;
        }
        let replica = crate::replica::serve_time(&path, &base.join("suite-scale-replica"))?;
        let p = ScalePoint {
            inodes: at,
            grown_creates_per_sec: grown,
            settle_seconds: settle,
            creates_per_sec: c,
            stats_per_sec: s,
            rss_mib,
            index_bytes_per_inode,
            log_bytes_per_record,
            cold_stat_us,
            warm_stat_us,
            replay_records_per_sec: records as f64 / secs,
            replica_serve_seconds: replica.serve_secs,
        };
        println!(
            "{:>12} new replica serves in {:.1} s ({:.0} MiB fetched in {:.1} s)",
            "", p.replica_serve_seconds, replica.mib, replica.fetch_secs,
        );
        points.push(p);
    }
    let _ = std::fs::remove_dir_all(&path);
    Ok(points)
}

/// Stat latency right after the store at `path` is opened (its block
/// cache and readers' cache empty; the host's page cache may hold the
/// files), then of the same stats again: (p50, p99) in microseconds each,
/// over `LATENCY_STATS` random grown files of `files`, one thread.
fn stat_latency(path: &Path, files: u64) -> Result<((f64, f64), (f64, f64))> {
    let t = Treelog::open(path, Options::default())?;
    let paths: Vec<String> = (0..LATENCY_STATS as u64)
        .map(|i| {
            // A multiplicative hash spreads the ids over the namespace.
            let id = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % files + 1;
            format!("/g/d{}/f{id}", id % 10_000)
        })
        .collect();
    let round = || -> Result<(f64, f64)> {
        let mut ns = Vec::with_capacity(paths.len());
        for p in &paths {
            let t0 = Instant::now();
            t.stat(p)?;
            ns.push(t0.elapsed().as_nanos() as u64);
        }
        let p50 = crate::pct(&mut ns, 0.5) as f64 / 1e3;
        Ok((p50, crate::pct(&mut ns, 0.99) as f64 / 1e3))
    };
    let cold = round()?;
    let warm = round()?;
    t.close()?;
    Ok((cold, warm))
}
