//! One client process of `treelog-bench mdtest` (an mdtest rank): it reads
//! jobs from its standard input, one JSON line each, prepares (connects,
//! resolves its directory), answers `Ready`, waits for the coordinator's
//! `go` line (the barrier), runs the phase with `depth` operations in
//! flight, and answers `Done` with every operation's latency.
//!
//! Separate processes, not threads, so that the clients' CPU, allocators
//! and connections are as separate as mdtest's ranks are.

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::redis_fs::RedisFs;
use super::Phase;
use crate::client::{Client, ClientOptions};
use crate::command::Command;
use crate::error::{Error, Result};

/// Where the worker's backends are, as the coordinator started them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum Target {
    /// A treelog server or cluster node (writes follow the leader).
    Treelog(std::net::SocketAddr),
    /// A redis-server holding JuiceFS's layout.
    Redis(u16),
}

/// One phase for one worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Job {
    /// Index into the targets the worker was started with.
    pub backend: usize,
    pub phase: Phase,
    /// The worker's directory (its own, or the shared one).
    pub dir: String,
    pub rank: usize,
    pub items: usize,
    /// Operations in flight.
    pub depth: usize,
    /// Tree depth and branching (tree phases).
    pub tree: (u32, u32),
    /// Entries a listing of `dir` must return (readdir).
    pub expect: usize,
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Reply {
    Ready,
    Done { ops: usize, lat_ns: Vec<u64> },
    Failed(String),
}

/// mdtest's mkdir: one directory, as mkdir(2) makes it (no parents,
/// unlike `network::mkdir_cmd`).
fn mkdir_cmd(path: String) -> Command {
    Command::Mkdir {
        path: path.into(),
        parents: false,
        mode: 0o755,
        owner: String::new(),
        group: String::new(),
    }
}

/// A connection to one backend, cheap to clone (clones share it).
#[derive(Clone)]
pub(crate) enum Fs {
    Treelog(Client),
    Redis(RedisFs),
}

impl Fs {
    pub(crate) async fn connect(t: &Target) -> Result<Fs> {
        Ok(match t {
            Target::Treelog(addr) => Fs::Treelog(
                Client::connect(
                    *addr,
                    ClientOptions {
                        follow_leader: true,
                        ..Default::default()
                    },
                )
                .await?,
            ),
            Target::Redis(port) => Fs::Redis(RedisFs::connect(*port).await?),
        })
    }

    pub(crate) async fn mkdir(&self, path: &str) -> Result<()> {
        match self {
            Fs::Treelog(c) => c.submit(mkdir_cmd(path.to_owned())).await.map(drop),
            Fs::Redis(r) => r.mknod(path, true).await,
        }
    }

    async fn create(&self, path: &str) -> Result<()> {
        match self {
            Fs::Treelog(c) => c
                .submit(crate::network::create_cmd(path.to_owned()))
                .await
                .map(drop),
            Fs::Redis(r) => r.mknod(path, false).await,
        }
    }

    /// The inode's id (its handle for [`Fs::stat_id`]).
    async fn stat(&self, path: &str) -> Result<u64> {
        match self {
            Fs::Treelog(c) => c.stat(path).await.map(|i| i.id),
            Fs::Redis(r) => r.stat(path).await,
        }
    }

    async fn stat_id(&self, id: u64) -> Result<()> {
        match self {
            Fs::Treelog(c) => c.stat_id(id).await.map(drop),
            Fs::Redis(r) => r.stat_id(id).await,
        }
    }

    async fn rename(&self, from: &str, to: &str) -> Result<()> {
        match self {
            Fs::Treelog(c) => c
                .submit(Command::Rename {
                    src: from.into(),
                    dst: to.into(),
                    overwrite: false,
                })
                .await
                .map(drop),
            Fs::Redis(r) => r.rename(from, to).await,
        }
    }

    /// Removes a file, or an empty directory.
    pub(crate) async fn remove(&self, path: &str, dir: bool) -> Result<()> {
        match self {
            Fs::Treelog(c) => c
                .submit(Command::Delete {
                    path: path.into(),
                    recursive: false,
                })
                .await
                .map(drop),
            Fs::Redis(r) => r.remove(path, dir).await,
        }
    }

    /// Lists `path` whole, with attributes; returns the entries.
    pub(crate) async fn list(&self, path: &str) -> Result<usize> {
        match self {
            Fs::Treelog(c) => {
                let mut n = 0;
                let mut page = c.list(path, None, 10_000).await?;
                loop {
                    n += page.entries.len();
                    match page.next_start_after {
                        None => return Ok(n),
                        Some(after) => page = c.list(path, Some(&after), 10_000).await?,
                    }
                }
            }
            Fs::Redis(r) => r.list(path).await,
        }
    }

    /// Resolves `dir` ahead of a phase, as a mount's dentry cache would
    /// hold it (treelog resolves whole paths on the server: nothing to do).
    async fn prepare(&self, dir: &str) -> Result<()> {
        match self {
            Fs::Treelog(_) => Ok(()),
            Fs::Redis(r) => r.dir_ino(dir).await.map(drop),
        }
    }
}

/// Runs `n` operations, `depth` at a time; each operation's latency and
/// value, by index.
async fn run_ops<F, Fut>(depth: usize, n: usize, op: F) -> Result<Vec<(Duration, u64)>>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<u64>> + Send,
{
    let op = Arc::new(op);
    let next = Arc::new(AtomicUsize::new(0));
    let mut lanes = Vec::new();
    for _ in 0..depth.clamp(1, n.max(1)) {
        let (op, next) = (op.clone(), next.clone());
        lanes.push(tokio::spawn(async move {
            let mut out = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return Ok::<_, Error>(out);
                }
                let t0 = Instant::now();
                let v = op(i).await?;
                out.push((i, t0.elapsed(), v));
            }
        }));
    }
    let mut all = vec![(Duration::ZERO, 0); n];
    for l in lanes {
        for (i, d, v) in l.await.map_err(|e| Error::Protocol(e.to_string()))?? {
            all[i] = (d, v);
        }
    }
    Ok(all)
}

fn item(dir: &str, kind: &str, rank: usize, i: usize, renamed: bool) -> String {
    let mv = if renamed { ".mv" } else { "" };
    format!("{dir}/{kind}.mdtest.{rank}.{i}{mv}")
}

/// The directories of a rank's tree, level by level: the root
/// `tree.<rank>` in `dir`, then `branch` children under each node of the
/// level above, down to `depth` levels below the root.
pub(crate) fn tree_levels(dir: &str, rank: usize, (depth, branch): (u32, u32)) -> Vec<Vec<String>> {
    let mut levels = vec![vec![format!("{dir}/tree.{rank}")]];
    for _ in 0..depth {
        let next = levels[levels.len() - 1]
            .iter()
            .flat_map(|p| (0..branch).map(move |b| format!("{p}/t.{b}")))
            .collect();
        levels.push(next);
    }
    levels
}

/// What one worker keeps between phases.
struct State {
    targets: Vec<Target>,
    conns: Vec<Option<Fs>>,
    /// The handles (inode ids) the last file stat phase returned.
    handles: Arc<Vec<u64>>,
}

impl State {
    async fn fs(&mut self, backend: usize) -> Result<Fs> {
        let t = self
            .targets
            .get(backend)
            .ok_or_else(|| Error::InvalidArgument(format!("no backend {backend}")))?;
        if self.conns[backend].is_none() {
            self.conns[backend] = Some(Fs::connect(t).await?);
        }
        Ok(self.conns[backend].clone().expect("just connected"))
    }

    /// Runs `job`; returns its operations' latencies.
    async fn run(&mut self, job: &Job, fs: Fs) -> Result<Vec<Duration>> {
        let (dir, rank, n, depth) = (job.dir.clone(), job.rank, job.items, job.depth);
        let lat = |v: Vec<(Duration, u64)>| v.into_iter().map(|(d, _)| d).collect::<Vec<_>>();
        let path = move |kind: &'static str, renamed: bool| {
            let dir = dir.clone();
            move |i: usize| item(&dir, kind, rank, i, renamed)
        };
        Ok(match job.phase {
            Phase::DirCreate => {
                let (p, fs) = (path("dir", false), fs.clone());
                lat(run_ops(depth, n, move |i| {
                    let (fs, p) = (fs.clone(), p(i));
                    async move { fs.mkdir(&p).await.map(|_| 0) }
                })
                .await?)
            }
            Phase::DirStat | Phase::FileStat => {
                let kind = if job.phase == Phase::DirStat {
                    "dir"
                } else {
                    "file"
                };
                let (p, fs) = (path(kind, false), fs.clone());
                let r = run_ops(depth, n, move |i| {
                    let (fs, p) = (fs.clone(), p(i));
                    async move { fs.stat(&p).await }
                })
                .await?;
                if job.phase == Phase::FileStat {
                    self.handles = Arc::new(r.iter().map(|(_, h)| *h).collect());
                }
                lat(r)
            }
            Phase::FileRead => {
                let handles = self.handles.clone();
                if handles.len() != n {
                    return Err(Error::InvalidArgument("file read before file stat".into()));
                }
                lat(run_ops(depth, n, move |i| {
                    let (fs, h) = (fs.clone(), handles[i]);
                    async move { fs.stat_id(h).await.map(|_| 0) }
                })
                .await?)
            }
            Phase::DirRename | Phase::FileRename => {
                let kind = if job.phase == Phase::DirRename {
                    "dir"
                } else {
                    "file"
                };
                let (from, to) = (path(kind, false), path(kind, true));
                lat(run_ops(depth, n, move |i| {
                    let (fs, a, b) = (fs.clone(), from(i), to(i));
                    async move { fs.rename(&a, &b).await.map(|_| 0) }
                })
                .await?)
            }
            Phase::DirRemove | Phase::FileRemove => {
                let is_dir = job.phase == Phase::DirRemove;
                let p = path(if is_dir { "dir" } else { "file" }, true);
                lat(run_ops(depth, n, move |i| {
                    let (fs, p) = (fs.clone(), p(i));
                    async move { fs.remove(&p, is_dir).await.map(|_| 0) }
                })
                .await?)
            }
            Phase::FileCreate => {
                let p = path("file", false);
                lat(run_ops(depth, n, move |i| {
                    let (fs, p) = (fs.clone(), p(i));
                    async move { fs.create(&p).await.map(|_| 0) }
                })
                .await?)
            }
            Phase::Readdir => {
                // One listing of the directory, whole: its latency is the
                // listing's; the operations counted are the entries.
                let t0 = Instant::now();
                let got = fs.list(&job.dir).await?;
                if got != job.expect {
                    return Err(Error::InvalidArgument(format!(
                        "{}: listed {got} entries, expected {}",
                        job.dir, job.expect
                    )));
                }
                vec![t0.elapsed()]
            }
            Phase::TreeCreate | Phase::TreeRemove => {
                let mut levels = tree_levels(&job.dir, rank, job.tree);
                let create = job.phase == Phase::TreeCreate;
                if !create {
                    levels.reverse();
                }
                let mut all = Vec::new();
                for level in levels {
                    let (fs, level) = (fs.clone(), Arc::new(level));
                    let l = level.clone();
                    all.extend(lat(run_ops(depth, level.len(), move |i| {
                        let (fs, l) = (fs.clone(), l.clone());
                        async move {
                            match create {
                                true => fs.mkdir(&l[i]).await.map(|_| 0),
                                false => fs.remove(&l[i], true).await.map(|_| 0),
                            }
                        }
                    })
                    .await?));
                }
                all
            }
        })
    }
}

/// The operations a job counts (what its phase's rate is made of).
pub(crate) fn ops_of(job: &Job) -> usize {
    match job.phase {
        Phase::Readdir => job.expect,
        Phase::TreeCreate | Phase::TreeRemove => {
            tree_levels("", 0, job.tree).iter().map(Vec::len).sum()
        }
        _ => job.items,
    }
}

fn send(out: &mut impl Write, r: &Reply) -> Result<()> {
    let line = serde_json::to_string(r).map_err(|e| Error::Protocol(e.to_string()))?;
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}

/// The worker's loop: `targets` as the coordinator passed them.
pub(crate) fn main(targets: Vec<Target>) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    // Standard input read on a thread of its own, so that the runtime
    // (and the clients' connections) keep running between jobs.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(l) = line else { return };
            if tx.send(l).is_err() {
                return;
            }
        }
    });
    let mut out = std::io::stdout().lock();
    rt.block_on(async {
        let mut st = State {
            conns: targets.iter().map(|_| None).collect(),
            targets,
            handles: Arc::new(Vec::new()),
        };
        while let Some(line) = rx.recv().await {
            let job: Job = serde_json::from_str(&line)
                .map_err(|e| Error::Protocol(format!("bad job {line:?}: {e}")))?;
            let prepared = async {
                let fs = st.fs(job.backend).await?;
                fs.prepare(&job.dir).await?;
                Ok::<_, Error>(fs)
            }
            .await;
            let fs = match prepared {
                Ok(fs) => fs,
                Err(e) => {
                    send(&mut out, &Reply::Failed(e.to_string()))?;
                    continue;
                }
            };
            send(&mut out, &Reply::Ready)?;
            match rx.recv().await.as_deref() {
                Some("go") => {}
                _ => return Ok(()),
            }
            let reply = match st.run(&job, fs).await {
                Ok(lat) => Reply::Done {
                    ops: ops_of(&job),
                    lat_ns: lat.iter().map(|d| d.as_nanos() as u64).collect(),
                },
                Err(e) => Reply::Failed(format!("{:?} in {}: {e}", job.phase, job.dir)),
            };
            send(&mut out, &reply)?;
        }
        Ok(())
    })
}
