//! `treelog-bench`: side-by-side benchmarks in one process run.
//!
//! `bench create` measures durable file creates with 1, 8 and 64 concurrent
//! callers, spread over 1,000 directories, against:
//! - `treelog`: the single writer with group commit;
//! - `seed-serialized`: seed 000/003's write path: the same `inodes`/`edges`
//!   schema, one synced `WriteBatch` per create, with a namespace lock held
//!   from validation through the synced write (what a correct write-through
//!   master must do);
//! - `seed-unserialized`: the same without the lock (it races: two creates of
//!   one name can both succeed) — shown so nobody is misled by RocksDB's own
//!   write grouping.

mod args;
pub mod backup;
pub mod bridge;
pub mod cluster;
mod cluster_cpu;
pub mod format2;
mod load;
pub mod mdtest;
pub mod mdtest_net;
pub mod mount;
pub mod network;
pub mod pipeline;
mod proc_stat;
pub mod redis_peer;
pub mod replay;
pub mod replica;
pub mod seed;
pub mod streams;
pub mod suite;

use std::sync::Arc;
use std::time::{Duration, Instant};

// The library's modules under the names the benchmarks use.
use treelog::{command, error, event, format, metrics, store, stream, types};

/// The benchmark's own stores (the seeder, the peers) keep text paths:
/// treelog's path rules over `&str`.
mod path {
    use treelog::Result;

    pub(crate) use treelog::path::is_within;

    pub(crate) fn components(p: &str) -> Result<Vec<&str>> {
        treelog::path::components(p)?
            .into_iter()
            .map(|c| {
                // Split at ASCII '/' of a str: always UTF-8.
                std::str::from_utf8(c).map_err(|_| treelog::Error::InvalidPath {
                    path: p.to_owned(),
                    reason: "not UTF-8",
                })
            })
            .collect()
    }

    pub(crate) fn join_all(comps: &[&str]) -> String {
        treelog::path::join_all(comps).to_string()
    }
}
pub(crate) use suite::bar;
use treelog_client as client;
use treelog_server as server;

pub use crate::args::{BenchArgs, BenchCmd};
use crate::error::{Error, Result};
use treelog::{CreateOptions, Options, Treelog};

/// One measured figure.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Figure {
    pub system: String,
    pub callers: usize,
    pub ops: usize,
    pub seconds: f64,
    pub ops_per_sec: f64,
    pub p50_us: f64,
    pub p99_us: f64,
}

impl Figure {
    /// A throughput figure without latency percentiles.
    pub fn rate(system: impl Into<String>, callers: usize, ops: usize, seconds: f64) -> Figure {
        Figure {
            system: system.into(),
            callers,
            ops,
            seconds,
            ops_per_sec: ops as f64 / seconds,
            p50_us: 0.0,
            p99_us: 0.0,
        }
    }

    /// A figure from every operation's latency over `elapsed`.
    pub fn latencies(
        system: &str,
        callers: usize,
        mut lat: Vec<Duration>,
        elapsed: Duration,
    ) -> Figure {
        let secs = elapsed.as_secs_f64();
        lat.sort_unstable();
        Figure {
            system: system.to_owned(),
            callers,
            ops: lat.len(),
            seconds: secs,
            ops_per_sec: lat.len() as f64 / secs,
            p50_us: percentile(&lat, 0.5),
            p99_us: percentile(&lat, 0.99),
        }
    }

    /// The rate of `system` at `callers` among `figures`.
    pub fn rate_of(figures: &[Figure], system: &str, callers: usize) -> Option<f64> {
        figures
            .iter()
            .find(|f| f.system == system && f.callers == callers)
            .map(|f| f.ops_per_sec)
    }
}

/// Something that can create a file by path, from many threads.
pub trait Creator: Send + Sync {
    fn mkdir_p(&self, path: &str) -> Result<()>;
    fn create(&self, path: &str) -> Result<()>;
}

impl Creator for Treelog {
    fn mkdir_p(&self, path: &str) -> Result<()> {
        Treelog::mkdir_p(self, path).map(|_| ())
    }
    fn create(&self, path: &str) -> Result<()> {
        Treelog::create(self, path, CreateOptions::default()).map(|_| ())
    }
}

/// The namespace operations of `bench suite`'s workloads, implemented by
/// every compared system. Every write is durable (synced) before it returns.
pub trait BenchNamespace: Creator {
    /// One directory; its parent must exist.
    fn mkdir(&self, path: &str) -> Result<()>;
    /// Resolves `path` and reads the inode's attributes.
    fn stat(&self, path: &str) -> Result<()>;
    /// The number of entries of a directory (reading every entry's name and
    /// attributes, as a listing returns them).
    fn list(&self, path: &str) -> Result<usize>;
    /// Renames `from` to `to`, replacing nothing: an existing `to` is an
    /// error.
    fn rename(&self, from: &str, to: &str) -> Result<()>;
    /// Deletes a file or an empty directory.
    fn delete(&self, path: &str) -> Result<()>;
    /// Setup, not measured: creates `dirs` in order (each after its parent),
    /// then the files `files` (whose parents exist), ticking `progress` once
    /// per path. May skip the per-operation sync; everything is durable when
    /// it returns.
    fn load(
        &self,
        dirs: &[String],
        files: &[String],
        progress: Option<&indicatif::ProgressBar>,
    ) -> Result<()>;
}

impl BenchNamespace for Treelog {
    fn mkdir(&self, path: &str) -> Result<()> {
        Treelog::mkdir(self, path, treelog::MkdirOptions::default()).map(|_| ())
    }
    fn stat(&self, path: &str) -> Result<()> {
        Treelog::stat(self, path).map(|_| ())
    }
    /// Every entry lent in turn at one state (`list_each`), each read whole
    /// (its name and attributes) as the other systems' rows are.
    fn list(&self, path: &str) -> Result<usize> {
        let mut n = 0;
        Treelog::list_each(self, path, |e| {
            std::hint::black_box(e);
            n += 1;
            Ok(())
        })?;
        Ok(n)
    }
    fn rename(&self, from: &str, to: &str) -> Result<()> {
        Treelog::rename(self, from, to, false).map(|_| ())
    }
    fn delete(&self, path: &str) -> Result<()> {
        Treelog::delete(self, path, false).map(|_| ())
    }
    /// Pipelined durable commands: group commit syncs them in large groups.
    fn load(
        &self,
        dirs: &[String],
        files: &[String],
        progress: Option<&indicatif::ProgressBar>,
    ) -> Result<()> {
        let nd = dirs.len();
        bulk_load(
            self,
            (nd + files.len()) as u64,
            1024,
            |i| {
                let i = i as usize;
                if i < nd {
                    treelog::Command::Mkdir {
                        path: dirs[i].clone().into(),
                        parents: false,
                        mode: 0o755,
                        owner: String::new(),
                        group: String::new(),
                    }
                } else {
                    treelog::Command::Create {
                        path: files[i - nd].clone().into(),
                        parents: false,
                        mode: 0o644,
                        owner: String::new(),
                        group: String::new(),
                        block_size: 0,
                    }
                }
            },
            progress,
        )
    }
}

pub(crate) fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

/// The `p` quantile of samples (nearest rank; sorts them); 0 if empty.
pub(crate) fn pct(v: &mut [u64], p: f64) -> u64 {
    v.sort_unstable();
    v.get(((v.len() as f64 - 1.0) * p).round() as usize)
        .copied()
        .unwrap_or(0)
}

/// Makes the `dirs` directories the creates of a run named `tag` spread over.
fn make_create_dirs(c: &dyn Creator, dirs: usize, tag: &str) -> Result<()> {
    for d in 0..dirs {
        c.mkdir_p(&format!("/bench/{tag}/d{d}"))?;
    }
    Ok(())
}

/// The path of caller `ci`'s `i`-th create: callers take the directories in
/// turn, so that concurrent creates mostly go to different directories.
fn create_path(tag: &str, callers: usize, dirs: usize, ci: usize, i: usize) -> String {
    let d = (i * callers + ci) % dirs;
    format!("/bench/{tag}/d{d}/f{ci}_{i}")
}

/// The settings (or systems) of a comparison in the order round `round`
/// runs them: forwards, then backwards, so that none always runs right
/// after the same other one's cleanup, or always first.
pub fn in_turn<T, const N: usize>(round: usize, mut set: [T; N]) -> [T; N] {
    if round % 2 == 1 {
        set.reverse();
    }
    set
}

/// The middle value (the upper one of an even count: a run that
/// happened); `NAN` if empty.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Runs `ops` creates from `callers` threads; returns the figure.
pub fn run_creates(
    system: &str,
    c: Arc<dyn Creator>,
    callers: usize,
    ops: usize,
    dirs: usize,
    tag: &str,
) -> Result<Figure> {
    make_create_dirs(&*c, dirs, tag)?;
    let per = ops.div_ceil(callers);
    let start = Instant::now();
    let handles: Vec<_> = (0..callers)
        .map(|ci| {
            let c = c.clone();
            let tag = tag.to_owned();
            std::thread::spawn(move || -> Result<Vec<Duration>> {
                let mut lat = Vec::with_capacity(per);
                for i in 0..per {
                    let p = create_path(&tag, callers, dirs, ci, i);
                    let t0 = Instant::now();
                    c.create(&p)?;
                    lat.push(t0.elapsed());
                }
                Ok(lat)
            })
        })
        .collect();
    let mut lat = Vec::with_capacity(per * callers);
    for h in handles {
        lat.extend(
            h.join()
                .map_err(|_| Error::InvalidArgument("bench thread panicked".into()))??,
        );
    }
    Ok(Figure::latencies(system, callers, lat, start.elapsed()))
}

/// Runs `ops` creates from `callers` tokio tasks on a runtime with one
/// worker per core, through [`Treelog::submit_async`]: how the server (or
/// any async application) drives treelog. Returns the figure.
pub fn run_creates_async(
    system: &str,
    t: Arc<Treelog>,
    callers: usize,
    ops: usize,
    dirs: usize,
    tag: &str,
) -> Result<Figure> {
    make_create_dirs(&*t, dirs, tag)?;
    // The server's request runtime at its default policy: the callers are
    // scheduled as the server's workers are, and as the other systems'
    // caller threads (which `WorkerPolicy::Batch` would speed up as well;
    // see docs/OPERATIONS.md).
    let rt = crate::server::request_runtime(crate::server::WorkerPolicy::default())?;
    let per = ops.div_ceil(callers);
    let start = Instant::now();
    let lat = rt.block_on(async {
        let tasks: Vec<_> = (0..callers)
            .map(|ci| {
                let t = t.clone();
                let tag = tag.to_owned();
                tokio::spawn(async move {
                    let mut lat = Vec::with_capacity(per);
                    for i in 0..per {
                        let cmd = treelog::Command::Create {
                            path: create_path(&tag, callers, dirs, ci, i).into(),
                            parents: false,
                            mode: 0o644,
                            owner: String::new(),
                            group: String::new(),
                            block_size: 0,
                        };
                        let t0 = Instant::now();
                        t.submit_async(cmd).await?;
                        lat.push(t0.elapsed());
                    }
                    Ok::<_, Error>(lat)
                })
            })
            .collect();
        let mut lat = Vec::with_capacity(per * callers);
        for task in tasks {
            lat.extend(
                task.await
                    .map_err(|_| Error::InvalidArgument("bench task panicked".into()))??,
            );
        }
        Ok::<_, Error>(lat)
    })?;
    Ok(Figure::latencies(system, callers, lat, start.elapsed()))
}

fn scratch(dir: &Option<std::path::PathBuf>) -> Result<std::path::PathBuf> {
    let base = dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("treelog-bench-{}", std::process::id()))
    });
    std::fs::create_dir_all(&base)?;
    Ok(base)
}

/// An uncounted round of creates: a process's first round runs measurably
/// slower (threads, allocator arenas, page cache), which would otherwise
/// count against whichever setting goes first.
pub fn warm_up(base: &std::path::Path, ops: usize) -> Result<()> {
    let path = base.join("warm-up");
    let _ = std::fs::remove_dir_all(&path);
    let t: Arc<dyn Creator> = Arc::new(Treelog::open(&path, Options::default())?);
    run_creates("treelog", t, 64, ops / 2, 1000, "w")?;
    let _ = std::fs::remove_dir_all(&path);
    Ok(())
}

/// Creates/s with metrics on and off, alternating rounds in one run.
fn metrics_overhead(base: &std::path::Path, ops: usize, rounds: usize) -> Result<()> {
    println!("== metrics cost: durable creates, 64 callers, {ops} per round, {rounds} rounds each, alternating");
    warm_up(base, ops)?;
    let mut on = Vec::new();
    let mut off = Vec::new();
    for r in 0..rounds {
        for enabled in in_turn(r, [true, false]) {
            let path = base.join(format!("metrics-{enabled}-{r}"));
            let _ = std::fs::remove_dir_all(&path);
            let o = Options {
                metrics: enabled,
                ..Default::default()
            };
            let t: Arc<dyn Creator> = Arc::new(Treelog::open(&path, o)?);
            let f = run_creates("treelog", t, 64, ops, 1000, "m")?;
            println!(
                "  round {r} metrics {:<3}: {:>10.0} creates/s",
                if enabled { "on" } else { "off" },
                f.ops_per_sec
            );
            if enabled {
                on.push(f.ops_per_sec)
            } else {
                off.push(f.ops_per_sec)
            }
            let _ = std::fs::remove_dir_all(&path);
        }
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let (a, b) = (med(&mut on), med(&mut off));
    println!("  median: on {a:.0}, off {b:.0}; on/off = {:.3}", a / b);
    Ok(())
}

/// Submits `n` commands made by `cmd(i)` with up to `window` in flight
/// (pipelined), ticking `progress` once per command.
/// An empty file at `path` in a directory that exists (no owner, group or
/// block size): the loads' create.
pub fn file_cmd(path: String) -> treelog::Command {
    treelog::Command::Create {
        path: path.into(),
        parents: false,
        mode: 0o644,
        owner: String::new(),
        group: String::new(),
        block_size: 0,
    }
}

/// `callers` threads each making one synced create at a time, in a
/// directory of its own (`/w/c<i>`), until [`Writers::stop`]: the load
/// beside a backup or a replica.
pub struct Writers {
    stop: Arc<std::sync::atomic::AtomicBool>,
    done: Arc<std::sync::atomic::AtomicU64>,
    threads: Vec<std::thread::JoinHandle<Result<()>>>,
}

impl Writers {
    pub fn start(t: &Arc<Treelog>, callers: usize) -> Result<Writers> {
        Writers::start_in(t, callers, "/w")
    }

    /// [`Writers::start`] under `root` (a new directory per run).
    pub fn start_in(t: &Arc<Treelog>, callers: usize, root: &str) -> Result<Writers> {
        for c in 0..callers {
            t.mkdir_p(format!("{root}/c{c}"))?;
        }
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let threads = (0..callers)
            .map(|c| {
                let (t, stop, done) = (t.clone(), stop.clone(), done.clone());
                let dir = format!("{root}/c{c}");
                std::thread::spawn(move || -> Result<()> {
                    let mut k = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        t.create(format!("{dir}/f{k}"), CreateOptions::default())?;
                        done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        k += 1;
                    }
                    Ok(())
                })
            })
            .collect();
        Ok(Writers {
            stop,
            done,
            threads,
        })
    }

    /// Creates acknowledged so far.
    pub fn done(&self) -> u64 {
        self.done.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn stop(self) -> Result<()> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for h in self.threads {
            h.join()
                .map_err(|_| Error::InvalidArgument("writer thread panicked".into()))??;
        }
        Ok(())
    }
}

pub fn bulk_load(
    t: &Treelog,
    n: u64,
    window: usize,
    cmd: impl Fn(u64) -> treelog::Command,
    progress: Option<&indicatif::ProgressBar>,
) -> Result<()> {
    let mut pending = std::collections::VecDeque::with_capacity(window + 1);
    for i in 0..n {
        pending.push_back(t.submit_pipelined(cmd(i))?);
        if pending.len() > window {
            if let Some(p) = pending.pop_front() {
                p.wait()?;
            }
        }
        if let Some(pb) = progress {
            pb.inc(1);
        }
    }
    for p in pending {
        p.wait()?;
    }
    if let Some(pb) = progress {
        pb.finish_and_clear();
    }
    Ok(())
}

/// Mean group size and per-stage times of the writer, from its metrics.
pub fn writer_breakdown(m: &crate::metrics::Metrics) -> String {
    let g = m.writes().groups();
    format!(
        "  (treelog writer: {:.1} commands/group, {:.1} per fsync, {:.0}% of groups committed inline; per group: validate {:.0} us, log append {:.0} us; per fsync: {:.0} us, then index apply {:.0} us; queue wait {:.0} us/command)",
        g.commands_per_group,
        g.commands_per_sync,
        100.0 * g.inline_share,
        g.validate * 1e6,
        g.log_write * 1e6,
        g.wal_sync * 1e6,
        g.index_apply * 1e6,
        g.queue_wait * 1e6
    )
}

/// Prints a report's targets and writes it as JSON to `json_out`, if given.
fn finish_report(report: &suite::Report, json_out: &Option<std::path::PathBuf>) -> Result<()> {
    suite::print_targets(&report.targets);
    if let Some(p) = json_out {
        let json =
            serde_json::to_vec_pretty(report).map_err(|e| Error::Io(std::io::Error::other(e)))?;
        std::fs::write(p, json)?;
    }
    Ok(())
}

pub fn run(args: &BenchArgs) -> Result<u8> {
    match &args.cmd {
        BenchCmd::Suite {
            ops,
            callers,
            repeat,
            replay_records,
            stream_ops,
            catchup_records,
            network_ops,
            scale,
            json_out,
            dir,
        } => {
            let base = scratch(dir)?;
            let mut report = suite::Report::default();
            suite::run(&base, *ops, callers, *replay_records, *repeat, &mut report)?;
            suite::workloads(&base, *ops, &mut report)?;
            if *network_ops > 0 {
                report
                    .figures
                    .extend(network::run(&base, *network_ops, false)?);
            }
            if *stream_ops > 0 {
                report.figures.extend(streams::run(
                    &base,
                    *stream_ops,
                    *catchup_records,
                    crate::server::DeliveryPriority::default(),
                )?);
            }
            if let Some(n) = scale {
                report.scale = suite::scale(&base, *n)?;
            }
            report.targets = suite::targets(&report);
            finish_report(&report, json_out)?;
            if dir.is_none() {
                let _ = std::fs::remove_dir_all(&base);
            }
            Ok(0)
        }
        BenchCmd::Mount {
            samples,
            procs,
            files,
            dir,
        } => {
            let base = scratch(dir)?;
            mount::run(&base, *samples, *procs, *files)?;
            if dir.is_none() {
                let _ = std::fs::remove_dir_all(&base);
            }
            Ok(0)
        }
        BenchCmd::Cluster {
            ops,
            repeat,
            dir,
            processes,
            treelog_bin,
        } => {
            let base = scratch(dir)?;
            if *processes {
                cluster_cpu::run(&base, *ops, *repeat, treelog_bin.as_deref())?;
            } else {
                cluster::run(&base, *ops, *repeat)?;
            }
            if dir.is_none() {
                let _ = std::fs::remove_dir_all(&base);
            }
            Ok(0)
        }
        BenchCmd::Scale {
            inodes,
            json_out,
            dir,
        } => {
            let base = scratch(dir)?;
            let mut report = suite::Report {
                scale: suite::scale(&base, *inodes)?,
                ..Default::default()
            };
            report.targets = suite::scale_targets(&report.scale);
            finish_report(&report, json_out)?;
            if dir.is_none() {
                let _ = std::fs::remove_dir_all(&base);
            }
            Ok(0)
        }
        BenchCmd::Replay {
            records,
            log,
            rounds,
            keep,
        } => {
            let base = scratch(keep)?;
            let path = replay::run(&base, *records, *log, *rounds)?;
            if keep.is_some() {
                println!("kept: {}", path.display());
            } else {
                let _ = std::fs::remove_dir_all(&base);
            }
            Ok(0)
        }
        BenchCmd::Pipeline(a) => {
            let base = scratch(&a.dir)?;
            pipeline::run(&base, a)?;
            if a.dir.is_none() {
                let _ = std::fs::remove_dir_all(&base);
            }
            Ok(0)
        }
        BenchCmd::Network { ops, dir, tls } => {
            let base = scratch(dir)?;
            let figures = network::run(&base, *ops, *tls)?;
            suite::print_targets(&suite::targets(&suite::Report {
                figures,
                ..Default::default()
            }));
            if dir.is_none() {
                let _ = std::fs::remove_dir_all(&base);
            }
            Ok(0)
        }
        BenchCmd::Backup {
            inodes,
            callers,
            dir,
        } => {
            let base = scratch(dir)?;
            backup::run(&base, *inodes, *callers)?;
            if dir.is_none() {
                let _ = std::fs::remove_dir_all(&base);
            }
            Ok(0)
        }
        BenchCmd::Bridge {
            callers,
            seconds,
            rounds,
            nats_server,
            sync_always,
            nats_nice,
            stream_priority,
            dir,
        } => {
            let base = scratch(dir)?;
            let b = bridge::BridgeBench {
                callers: *callers,
                seconds: *seconds,
                rounds: (*rounds).max(1),
                nats_server: nats_server.clone(),
                sync_always: *sync_always,
                nats_nice: *nats_nice,
                stream_priority: *stream_priority,
            };
            bridge::run(&base, &b)?;
            if dir.is_none() {
                let _ = std::fs::remove_dir_all(&base);
            }
            Ok(0)
        }
        BenchCmd::Replica {
            inodes,
            callers,
            seconds,
            behind,
            dir,
        } => {
            let base = scratch(dir)?;
            replica::run(&base, *inodes, *callers, *seconds, *behind)?;
            if dir.is_none() {
                let _ = std::fs::remove_dir_all(&base);
            }
            Ok(0)
        }
        BenchCmd::Quota {
            ops,
            callers,
            rounds,
            dir,
        } => {
            let base = scratch(dir)?;
            format2::quota_creates(&base, *ops, callers, *rounds)?;
            if dir.is_none() {
                let _ = std::fs::remove_dir_all(&base);
            }
            Ok(0)
        }
        BenchCmd::Format1 {
            out,
            dirs,
            files,
            owners,
            groups,
        } => {
            format2::make_format1(out, *dirs, *files, *owners, *groups)?;
            Ok(0)
        }
        BenchCmd::Metrics { ops, rounds, dir } => {
            let base = scratch(dir)?;
            metrics_overhead(&base, *ops, *rounds)?;
            if dir.is_none() {
                let _ = std::fs::remove_dir_all(&base);
            }
            Ok(0)
        }
        BenchCmd::Mdtest(a) => {
            mdtest_net::run(a)?;
            Ok(0)
        }
        BenchCmd::MdtestWorker { targets } => {
            let t = serde_json::from_str(targets)
                .map_err(|e| Error::InvalidArgument(format!("--targets: {e}")))?;
            mdtest_net::worker::main(t)?;
            Ok(0)
        }
        BenchCmd::MdtestFs {
            targets,
            tasks,
            items,
            iterations,
            shared,
        } => {
            mdtest::run(&mdtest::MdtestArgs {
                targets: targets.clone(),
                tasks: *tasks,
                items: *items,
                iterations: *iterations,
                shared: *shared,
            })?;
            Ok(0)
        }
        BenchCmd::Stream {
            ops,
            catchup_records,
            stream_priority,
            dir,
        } => {
            let base = dir.clone().unwrap_or_else(|| {
                std::env::temp_dir().join(format!("treelog-bench-{}", std::process::id()))
            });
            std::fs::create_dir_all(&base)?;
            streams::run(&base, *ops, *catchup_records, *stream_priority)?;
            if dir.is_none() {
                let _ = std::fs::remove_dir_all(&base);
            }
            Ok(0)
        }
        BenchCmd::Create {
            callers,
            ops,
            dirs,
            systems,
            dir,
            json_out,
        } => {
            let tmp;
            let base = match dir {
                Some(d) => d.clone(),
                None => {
                    tmp =
                        std::env::temp_dir().join(format!("treelog-bench-{}", std::process::id()));
                    tmp.clone()
                }
            };
            std::fs::create_dir_all(&base)?;
            let mut figures = Vec::new();
            println!("durable creates, {ops} per run, over {dirs} directories; every create fsynced before it returns");
            println!(
                "{:<20} {:>8} {:>12} {:>10} {:>10}",
                "system", "callers", "creates/s", "p50 us", "p99 us"
            );
            for &n in callers {
                for sys in systems {
                    let path = base.join(format!("{sys}-{n}"));
                    let _ = std::fs::remove_dir_all(&path);
                    let f = match sys.as_str() {
                        "treelog" => {
                            let t = Arc::new(Treelog::open(&path, Options::default())?);
                            let f = run_creates(
                                sys,
                                t.clone() as Arc<dyn Creator>,
                                n,
                                *ops,
                                *dirs,
                                "c",
                            )?;
                            if let Some(m) = t.metrics() {
                                println!("{}", writer_breakdown(m));
                            }
                            f
                        }
                        "treelog-async" => {
                            let t = Arc::new(Treelog::open(&path, Options::default())?);
                            let f = run_creates_async(sys, t.clone(), n, *ops, *dirs, "c")?;
                            if let Some(m) = t.metrics() {
                                println!("{}", writer_breakdown(m));
                            }
                            f
                        }
                        "seed-serialized" => {
                            let s: Arc<dyn Creator> = Arc::new(seed::SeedStore::open(&path, true)?);
                            run_creates(sys, s, n, *ops, *dirs, "c")?
                        }
                        "seed-unserialized" => {
                            let s: Arc<dyn Creator> =
                                Arc::new(seed::SeedStore::open(&path, false)?);
                            run_creates(sys, s, n, *ops, *dirs, "c")?
                        }
                        other => {
                            return Err(Error::InvalidArgument(format!("unknown system {other}")))
                        }
                    };
                    println!(
                        "{:<20} {:>8} {:>12.0} {:>10.0} {:>10.0}",
                        f.system, f.callers, f.ops_per_sec, f.p50_us, f.p99_us
                    );
                    figures.push(f);
                    let _ = std::fs::remove_dir_all(&path);
                }
                let get = |s: &str| Figure::rate_of(&figures, s, n);
                for t_sys in ["treelog", "treelog-async"] {
                    for s_sys in ["seed-serialized", "seed-unserialized"] {
                        if let (Some(t), Some(s)) = (get(t_sys), get(s_sys)) {
                            println!("  ratio {t_sys} / {s_sys} at {n} callers: {:.1}x", t / s);
                        }
                    }
                }
            }
            if let Some(p) = json_out {
                std::fs::write(p, serde_json::to_vec_pretty(&figures).unwrap_or_default())?;
            }
            if dir.is_none() {
                let _ = std::fs::remove_dir_all(&base);
            }
            Ok(0)
        }
    }
}

/// Milliseconds since the Unix epoch, as the peers' rows carry times.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
