//! `treelog-bench backup`: the time and size of a backup of a large
//! namespace, the creates per second of writers while it runs beside
//! without it, and the time of its restore.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use treelog::{Options, Treelog};

/// Loads a namespace of about `inodes` inodes: /load/d<j>/f<k>, 1,000
/// files a directory. Returns the inodes made.
pub fn load(t: &Treelog, inodes: u64) -> Result<u64> {
    t.mkdir_p("/load")?;
    let dirs = inodes.div_ceil(FILES_PER_DIR + 1).max(1);
    let files = inodes.saturating_sub(dirs + 2);
    crate::bulk_load(
        t,
        dirs,
        1024,
        |j| treelog::Command::Mkdir {
            path: format!("/load/d{j}").into(),
            parents: false,
            mode: 0o755,
            owner: String::new(),
            group: String::new(),
        },
        None,
    )?;
    crate::bulk_load(
        t,
        files,
        1024,
        |i| crate::file_cmd(format!("/load/d{}/f{}", i % dirs, i / dirs)),
        None,
    )?;
    Ok(dirs + files + 2)
}

/// Files per loaded directory.
const FILES_PER_DIR: u64 = 1000;

pub fn run(base: &Path, inodes: u64, callers: usize) -> Result<()> {
    let data = base.join("backup-source");
    let (dest, restored) = (base.join("backup"), base.join("restored"));
    for d in [&data, &dest, &restored] {
        let _ = std::fs::remove_dir_all(d);
    }
    let t = Arc::new(Treelog::open(&data, Options::default())?);
    let started = Instant::now();
    let loaded = load(&t, inodes)?;
    println!(
        "loaded {loaded} inodes ({} records) in {:.1} s",
        t.committed_seq(),
        started.elapsed().as_secs_f64()
    );

    // Writers through both windows below.
    let writers = crate::Writers::start(&t, callers)?;
    // The writers are up before anything is measured.
    while writers.done() < 1000 {
        std::thread::sleep(Duration::from_millis(10));
    }

    // Window 1: a backup runs.
    let (c0, t0) = (writers.done(), Instant::now());
    let mut caught_up = Duration::ZERO;
    let report = t.backup_with_progress(&dest, |p| {
        if let treelog::backup::Progress::Checkpointed { .. } = p {
            caught_up = t0.elapsed();
        }
    })?;
    let during = t0.elapsed();
    let c1 = writers.done();
    // Window 2, right after and as long: no backup.
    let (c2, t2) = (writers.done(), Instant::now());
    std::thread::sleep(during);
    let (c3, without) = (writers.done(), t2.elapsed());
    writers.stop()?;
    let rate = |n: u64, d: Duration| n as f64 / d.as_secs_f64();
    println!(
        "backup: sequence {}, {} inodes, {} files, {:.1} MiB, {:.2} s (checkpoint taken, caught up ({} records replayed) and digested in {:.2} s, then copied)",
        report.seq,
        report.inodes,
        report.files,
        report.bytes as f64 / (1 << 20) as f64,
        during.as_secs_f64(),
        report.replayed,
        caught_up.as_secs_f64()
    );
    println!("  phases (ms): {:?}", report.phases_ms);
    println!(
        "{callers} writers, synced creates: {:.0}/s during the backup ({} in {:.2} s), {:.0}/s without ({} in {:.2} s): {:.2}x",
        rate(c1 - c0, during),
        c1 - c0,
        during.as_secs_f64(),
        rate(c3 - c2, without),
        c3 - c2,
        without.as_secs_f64(),
        rate(c1 - c0, during) / rate(c3 - c2, without)
    );
    Arc::into_inner(t)
        .ok_or_else(|| Error::InvalidArgument("the store is still shared".into()))?
        .close()?;

    let t0 = Instant::now();
    let r = treelog::backup::restore(&dest, &restored, &mut |_| {})?;
    println!(
        "restore: {} files, {:.1} MiB checked and copied, opened, digest checked, in {:.2} s",
        r.files,
        r.bytes as f64 / (1 << 20) as f64,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
