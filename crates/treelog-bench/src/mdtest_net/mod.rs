//! `treelog-bench mdtest`: mdtest's metadata phases over the network, run
//! by N client processes (this executable again, as `mdtest-worker`),
//! against a single treelog node, a three-node cluster and — in the same
//! run — Redis holding JuiceFS's layout ([`redis_fs`]); with `--mount`,
//! also through the kernel on a directory (`mdtest-fs`'s code).
//!
//! Like mdtest (`-n ITEMS -i ITERATIONS -z DEPTH -b BRANCH`, `-u` for
//! "easy"), each process works in a directory of its own ("easy") or all
//! in one shared directory ("hard"). At every phase the coordinator hands
//! each process its job, waits until all are ready, releases them together
//! (a `go` line on each one's standard input: the barrier) and takes the
//! phase's rate as its operations over the time from the release to the
//! last process's answer, as mdtest computes it. Per phase the table gives
//! max/min/mean/stddev of the rates over iterations and p50/p99 of every
//! operation's latency.
//!
//! Phases, in order: directory creation, stat, rename (each renamed within
//! its directory), removal; file creation, stat, read, rename, a listing
//! of the directory (whole, with attributes; its rate counts entries),
//! removal; tree creation and removal (each process its own tree of DEPTH
//! levels below a root, BRANCH children each, made level by level).
//! mdtest's "File read" opens and reads an empty file: here it is a stat
//! by handle — by the inode id the file stat phase returned (Redis: `GET
//! i<ino>`), as `fstat` on an open file reads attributes without resolving
//! the path again.

pub(crate) mod redis_fs;
pub(crate) mod servers;
pub(crate) mod worker;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use worker::{Fs, Job, Reply, Target};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    DirCreate,
    DirStat,
    DirRename,
    DirRemove,
    FileCreate,
    FileStat,
    FileRead,
    FileRename,
    Readdir,
    FileRemove,
    TreeCreate,
    TreeRemove,
}

/// The phases in their order, with the names of the table.
pub const PHASES: [(Phase, &str); 12] = [
    (Phase::DirCreate, "Directory creation"),
    (Phase::DirStat, "Directory stat"),
    (Phase::DirRename, "Directory rename"),
    (Phase::DirRemove, "Directory removal"),
    (Phase::FileCreate, "File creation"),
    (Phase::FileStat, "File stat"),
    (Phase::FileRead, "File read (by id)"),
    (Phase::FileRename, "File rename"),
    (Phase::Readdir, "Readdir (entries)"),
    (Phase::FileRemove, "File removal"),
    (Phase::TreeCreate, "Tree creation"),
    (Phase::TreeRemove, "Tree removal"),
];

/// `treelog-bench mdtest`'s options.
#[derive(clap::Args, Debug, Clone)]
pub struct MdtestArgs {
    /// Client processes, comma separated: a table for each.
    #[arg(long, default_value = "2", value_delimiter = ',')]
    pub procs: Vec<usize>,
    /// Items per process and phase (mdtest -n).
    #[arg(long, short = 'n', default_value_t = 2000)]
    pub items: usize,
    /// Iterations (mdtest -i).
    #[arg(long, short = 'i', default_value_t = 3)]
    pub iterations: usize,
    /// Operations in flight per process, comma separated: 1 is mdtest's
    /// rank (one synchronous caller); more pipeline over its connection.
    #[arg(long, default_value = "1,16", value_delimiter = ',')]
    pub depth: Vec<usize>,
    /// Levels of each process's tree below its root (mdtest -z).
    #[arg(long, short = 'z', default_value_t = 3)]
    pub tree_depth: u32,
    /// Children of each tree directory (mdtest -b).
    #[arg(long, short = 'b', default_value_t = 3)]
    pub branch: u32,
    /// `easy` (a directory per process, mdtest -u) and/or `hard` (one
    /// shared directory), comma separated.
    #[arg(long, default_value = "easy,hard", value_delimiter = ',')]
    pub modes: Vec<String>,
    /// `single` (one `treelog serve`), `cluster` (three nodes, Raft) and/or
    /// `redis` (redis-server with JuiceFS's layout; skipped with a reason
    /// when absent), comma separated.
    #[arg(long, default_value = "single,cluster,redis", value_delimiter = ',')]
    pub backends: Vec<String>,
    /// Also run the phases mdtest-fs has through the kernel in this
    /// directory (a `treelog mount`, say), with threads for processes.
    #[arg(long)]
    pub mount: Option<PathBuf>,
    /// The `treelog` binary servers are run with (default: the one beside
    /// this executable; none: servers in this process).
    #[arg(long, env = "TREELOG_BIN")]
    pub treelog_bin: Option<PathBuf>,
    /// Where to put the servers' data (default: a temp directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The executable run as the client processes (default: this one).
    #[arg(long, hide = true)]
    pub worker_exe: Option<PathBuf>,
}

/// One phase's figures in one table.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PhaseFigures {
    pub name: String,
    /// Operations done, per iteration.
    pub ops: Vec<usize>,
    /// Rates (ops/s), per iteration.
    pub rates: Vec<f64>,
    /// Every operation's latency, ns.
    #[serde(skip)]
    pub lat_ns: Vec<u64>,
}

/// One backend's table at one process count, depth and mode.
#[derive(Debug, Clone, Serialize)]
pub struct Table {
    pub backend: String,
    pub mode: String,
    pub procs: usize,
    pub depth: usize,
    pub phases: Vec<PhaseFigures>,
}

/// What a run measured, and what each backend held at the end.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub tables: Vec<Table>,
    /// Per backend: entries left in its root after the run (0: every
    /// phase undid what the one before made), and for Redis the inode
    /// counter's value.
    pub left: Vec<(String, usize)>,
}

/// One started backend.
struct Backend {
    label: String,
    target: Target,
    how: String,
    server: Option<servers::Running>,
    _redis: Option<crate::redis_peer::Redis>,
}

/// A client process, its pipes.
struct Worker {
    child: Child,
    /// Closed (taken) to end the worker.
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Worker {
    fn spawn(exe: &std::path::Path, targets: &[Target]) -> Result<Worker> {
        let t = serde_json::to_string(targets).map_err(|e| Error::Protocol(e.to_string()))?;
        let mut cmd = std::process::Command::new(exe);
        cmd.args(["mdtest-worker", "--targets", &t])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        servers::end_with_parent(&mut cmd);
        let mut child = cmd.spawn()?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        Ok(Worker {
            child,
            stdin: Some(stdin),
            stdout,
        })
    }

    fn send(&mut self, line: &str) -> Result<()> {
        let stdin = self.stdin.as_mut().expect("open until dropped");
        writeln!(stdin, "{line}")?;
        stdin.flush()?;
        Ok(())
    }

    fn reply(&mut self) -> Result<Reply> {
        let mut line = String::new();
        if self.stdout.read_line(&mut line)? == 0 {
            return Err(Error::Protocol("an mdtest worker exited".into()));
        }
        match serde_json::from_str(&line) {
            Ok(Reply::Failed(e)) => Err(Error::Protocol(format!("mdtest worker: {e}"))),
            Ok(r) => Ok(r),
            Err(e) => Err(Error::Protocol(format!("mdtest worker said {line:?}: {e}"))),
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // End of its standard input ends the worker's loop.
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// Runs one phase on every worker: jobs out, all ready, released together,
/// all done. Returns the rate, the operations and every latency.
fn phase(workers: &mut [Worker], jobs: &[Job]) -> Result<(f64, usize, Vec<u64>)> {
    for (w, j) in workers.iter_mut().zip(jobs) {
        w.send(&serde_json::to_string(j).map_err(|e| Error::Protocol(e.to_string()))?)?;
    }
    for w in workers.iter_mut() {
        match w.reply()? {
            Reply::Ready => {}
            r => return Err(Error::Protocol(format!("expected Ready, got {r:?}"))),
        }
    }
    let t0 = Instant::now();
    for w in workers.iter_mut() {
        w.send("go")?;
    }
    let (mut ops, mut lat) = (0, Vec::new());
    let mut failed = None;
    for (w, j) in workers.iter_mut().zip(jobs) {
        // Every answer is read (a failure of one leaves the others' lines
        // behind otherwise); the first failure is returned.
        match w.reply() {
            Ok(Reply::Done { ops: n, lat_ns }) => {
                if n != worker::ops_of(j) {
                    failed.get_or_insert(Error::Protocol(format!(
                        "{:?}: a worker did {n} operations of {}",
                        j.phase,
                        worker::ops_of(j)
                    )));
                }
                ops += n;
                lat.extend(lat_ns);
            }
            Ok(r) => {
                failed.get_or_insert(Error::Protocol(format!("expected Done, got {r:?}")));
            }
            Err(e) => {
                failed.get_or_insert(e);
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    match failed {
        Some(e) => Err(e),
        None => Ok((ops as f64 / secs.max(1e-9), ops, lat)),
    }
}

/// What one iteration in one mode runs on: the directories.
struct Layout {
    root: String,
    dirs: Vec<String>,
}

fn layout(procs: usize, depth: usize, iteration: usize, mode: &str) -> Layout {
    let root = format!("/mdtest.p{procs}.q{depth}.i{iteration}.{mode}");
    let dirs = (0..procs)
        .map(|r| match mode {
            "hard" => format!("{root}/shared"),
            _ => format!("{root}/rank.{r}"),
        })
        .collect();
    Layout { root, dirs }
}

/// Every phase once, on one backend in one mode.
#[allow(clippy::too_many_arguments)]
fn iteration(
    rt: &tokio::runtime::Runtime,
    fs: &Fs,
    workers: &mut [Worker],
    backend: usize,
    a: &MdtestArgs,
    depth: usize,
    l: &Layout,
    table: &mut Table,
) -> Result<()> {
    let procs = workers.len();
    rt.block_on(async {
        fs.mkdir(&l.root).await?;
        let mut made: Vec<&String> = l.dirs.iter().collect();
        made.dedup();
        for d in made {
            fs.mkdir(d).await?;
        }
        Ok::<_, Error>(())
    })?;
    let hard = l.dirs.len() > 1 && l.dirs[0] == l.dirs[1];
    for (k, (p, _)) in PHASES.iter().enumerate() {
        let jobs: Vec<Job> = (0..procs)
            .map(|r| Job {
                backend,
                phase: *p,
                dir: l.dirs[r].clone(),
                rank: r,
                items: a.items,
                depth,
                tree: (a.tree_depth, a.branch),
                expect: if hard { a.items * procs } else { a.items },
            })
            .collect();
        let (rate, ops, lat) = phase(workers, &jobs)?;
        let f = &mut table.phases[k];
        f.rates.push(rate);
        f.ops.push(ops);
        f.lat_ns.extend(lat);
    }
    rt.block_on(async {
        let mut made: Vec<&String> = l.dirs.iter().collect();
        made.dedup();
        for d in made {
            fs.remove(d, true).await?;
        }
        fs.remove(&l.root, true).await
    })
}

fn print(t: &mut Table, items: usize, iterations: usize) {
    println!(
        "\nSUMMARY rate (ops/s): {} — {} processes x {} in flight, {} items each, {} iterations, {}",
        t.backend,
        t.procs,
        t.depth,
        items,
        iterations,
        match t.mode.as_str() {
            "hard" => "one shared directory (hard)",
            _ => "a directory per process (easy)",
        }
    );
    println!(
        "   {:<22}{:>12}{:>12}{:>12}{:>12}{:>10}{:>10}",
        "Operation", "Max", "Min", "Mean", "Std Dev", "p50 µs", "p99 µs"
    );
    for f in &mut t.phases {
        let n = f.rates.len().max(1) as f64;
        let mean = f.rates.iter().sum::<f64>() / n;
        let sd = (f.rates.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
        let max = f.rates.iter().cloned().fold(0.0, f64::max);
        let min = f.rates.iter().cloned().fold(f64::MAX, f64::min);
        let us = |ns: u64| ns as f64 / 1e3;
        let p50 = us(crate::pct(&mut f.lat_ns, 0.5));
        let p99 = us(crate::pct(&mut f.lat_ns, 0.99));
        println!(
            "   {:<22}{:>12.1}{:>12.1}{:>12.1}{:>12.1}{:>10.1}{:>10.1}",
            f.name, max, min, mean, sd, p50, p99
        );
    }
}

/// Starts the backends asked for (Redis skipped, with the reason, when
/// redis-server is absent).
fn start_backends(
    rt: &tokio::runtime::Runtime,
    a: &MdtestArgs,
    base: &std::path::Path,
) -> Result<Vec<Backend>> {
    let bin = servers::treelog_bin(a.treelog_bin.as_deref());
    let mut out = Vec::new();
    for b in &a.backends {
        match b.as_str() {
            "single" | "cluster" => {
                let dir = base.join(b);
                let r = rt.block_on(async {
                    match b.as_str() {
                        "single" => servers::single(bin.as_deref(), &dir).await,
                        _ => servers::cluster(bin.as_deref(), &dir).await,
                    }
                })?;
                out.push(Backend {
                    label: if b == "single" {
                        "treelog, single node".into()
                    } else {
                        "treelog, 3-node cluster".into()
                    },
                    target: Target::Treelog(r.addr),
                    how: r.how.clone(),
                    server: Some(r),
                    _redis: None,
                });
            }
            "redis" => match crate::redis_peer::find() {
                Err(why) => println!("== Redis peer: SKIPPED: {why}"),
                Ok(bin) => {
                    let redis = crate::redis_peer::start(&bin, &base.join("redis"))?;
                    rt.block_on(async {
                        redis_fs::RedisFs::connect(redis.port).await?.format().await
                    })?;
                    out.push(Backend {
                        label: "Redis (JuiceFS layout)".into(),
                        target: Target::Redis(redis.port),
                        how: "redis-server, appendonly yes, appendfsync always; Lua script per operation"
                            .into(),
                        server: None,
                        _redis: Some(redis),
                    });
                }
            },
            other => {
                return Err(Error::InvalidArgument(format!(
                    "unknown backend {other:?} (single, cluster, redis)"
                )))
            }
        }
    }
    Ok(out)
}

/// Runs the benchmark, prints its tables and returns its figures.
pub fn run(a: &MdtestArgs) -> Result<Report> {
    if a.procs.contains(&0) || a.depth.contains(&0) || a.items == 0 || a.iterations == 0 {
        return Err(Error::InvalidArgument(
            "procs, depth, items and iterations must be at least 1".into(),
        ));
    }
    if let Some(m) = a.modes.iter().find(|m| *m != "easy" && *m != "hard") {
        return Err(Error::InvalidArgument(format!(
            "unknown mode {m:?} (easy, hard)"
        )));
    }
    let exe = match &a.worker_exe {
        Some(e) => e.clone(),
        None => std::env::current_exe()?,
    };
    let base = a.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("treelog-bench-mdtest-{}", std::process::id()))
    });
    std::fs::create_dir_all(&base)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let backends = start_backends(&rt, a, &base)?;
    println!(
        "== mdtest over loopback: {} cores shared by servers and clients; data in {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        base.display()
    );
    for b in &backends {
        println!("  {}: {}", b.label, b.how);
    }
    let targets: Vec<Target> = backends.iter().map(|b| b.target.clone()).collect();
    let conns: Vec<Fs> = rt.block_on(async {
        let mut v = Vec::new();
        for t in &targets {
            v.push(Fs::connect(t).await?);
        }
        Ok::<_, Error>(v)
    })?;
    let mut report = Report::default();
    for &procs in &a.procs {
        let mut workers = (0..procs)
            .map(|_| Worker::spawn(&exe, &targets))
            .collect::<Result<Vec<_>>>()?;
        for &depth in &a.depth {
            let mut tables: Vec<Table> = backends
                .iter()
                .flat_map(|b| {
                    a.modes.iter().map(move |m| Table {
                        backend: b.label.clone(),
                        mode: m.clone(),
                        procs,
                        depth,
                        phases: PHASES
                            .iter()
                            .map(|(_, n)| PhaseFigures {
                                name: (*n).into(),
                                ..Default::default()
                            })
                            .collect(),
                    })
                })
                .collect();
            // Backends alternate within each iteration, so that a slow
            // moment of the host falls on all of them.
            for it in 0..a.iterations {
                for (bi, fs) in conns.iter().enumerate() {
                    for (mi, mode) in a.modes.iter().enumerate() {
                        let l = layout(procs, depth, it, mode);
                        let t = &mut tables[bi * a.modes.len() + mi];
                        let t0 = Instant::now();
                        iteration(&rt, fs, &mut workers, bi, a, depth, &l, t)?;
                        eprintln!(
                            "  {} {mode}, {procs} x {depth}, iteration {it}: {:.1} s",
                            t.backend,
                            t0.elapsed().as_secs_f64()
                        );
                    }
                }
            }
            for t in &mut tables {
                print(t, a.items, a.iterations);
            }
            report.tables.extend(tables);
        }
        drop(workers);
        if let Some(dir) = &a.mount {
            for mode in &a.modes {
                crate::mdtest::run(&crate::mdtest::MdtestArgs {
                    targets: vec![("through the kernel".into(), dir.clone())],
                    tasks: procs,
                    items: a.items,
                    iterations: a.iterations,
                    shared: mode == "hard",
                })?;
            }
        }
    }
    rt.block_on(async {
        for (b, fs) in backends.iter().zip(&conns) {
            let mut left = fs.list("/").await?;
            if let Fs::Redis(r) = fs {
                left += r.total_inodes().await? as usize;
            }
            report.left.push((b.label.clone(), left));
        }
        Ok::<_, Error>(())
    })?;
    for (b, n) in &report.left {
        println!("  {b}: {n} entries left in the namespace");
    }
    drop(conns);
    for b in backends {
        if let Some(s) = b.server {
            rt.block_on(s.stop())?;
        }
    }
    if a.dir.is_none() {
        let _ = std::fs::remove_dir_all(&base);
    }
    // Let the in-process servers' tasks end with the runtime.
    rt.shutdown_timeout(Duration::from_secs(10));
    Ok(report)
}
