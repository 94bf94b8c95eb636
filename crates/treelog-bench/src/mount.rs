//! `treelog-bench mount`: the FUSE mount (docs/MOUNT.md), in one run.
//!
//! - visibility lag: another client changes a file whose attributes the
//!   kernel has cached (TTL 300 s) — a chmod, then a rename — while a
//!   background load of durable creates runs; the time from that client's
//!   reply to the change showing through the mount (a `stat` polled every
//!   50 µs, answered from the kernel's cache until the change stream
//!   invalidates it), p50/p99;
//! - mdtest-shaped: P processes (threads here) each creating, stating and
//!   removing M empty files, in a directory of their own and in one shared
//!   directory, through the mount and on a tmpfs (/dev/shm) and the scratch
//!   directory's filesystem side by side: ops/s and per-operation latency.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::{Client, ClientOptions};
use crate::command::Command;
use crate::error::{Error, Result};
use crate::server::{start, ServerConfig};
use crate::{percentile, Figure};
use treelog::{Durability, Options};

fn io<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> Error + '_ {
    move |e| Error::Io(std::io::Error::other(format!("{what}: {e}")))
}

/// A mount on a thread of its own, unmounted when dropped.
struct Mount {
    dir: PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<std::io::Result<()>>>,
}

impl Mount {
    fn new(addr: std::net::SocketAddr, dir: &Path) -> Result<Mount> {
        std::fs::create_dir_all(dir)?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let mnt = dir.to_owned();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            let client = rt
                .block_on(Client::connect(addr, ClientOptions::default()))
                .map_err(std::io::Error::other)?;
            let opts = treelog_mount::MountOptions {
                attr_ttl: Duration::from_secs(300),
                entry_ttl: Duration::from_secs(300),
                ..Default::default()
            };
            treelog_mount::run(&rt, client, &mnt, opts, async {
                let _ = rx.await;
            })
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        let want = format!(" {} ", dir.display());
        loop {
            let info = std::fs::read_to_string("/proc/self/mountinfo")?;
            if info
                .lines()
                .any(|l| l.contains(&want) && l.contains(" - fuse"))
            {
                break;
            }
            if thread.is_finished() || Instant::now() > deadline {
                let r = thread.join();
                return Err(Error::Io(std::io::Error::other(format!(
                    "the mount did not come up: {r:?}"
                ))));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(Mount {
            dir: dir.to_owned(),
            stop: Some(tx),
            thread: Some(thread),
        })
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::process::Command::new("fusermount3")
            .args(["-u", "-z", "--"])
            .arg(&self.dir)
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// Runs the figures; `samples` lag samples of each kind, `procs` × `files`
/// for the mdtest shape.
pub fn run(base: &Path, samples: usize, procs: usize, files: usize) -> Result<Vec<Figure>> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut cfg = ServerConfig::new(base.join("mount-db"));
    cfg.listen = "127.0.0.1:0".parse().expect("an address");
    cfg.http = "127.0.0.1:0".parse().expect("an address");
    cfg.store = Options::default().durability(Durability::Sync);
    let server = rt.block_on(start(cfg))?;
    let addr = server.bound.rpc;
    let mnt = Mount::new(addr, &base.join("mnt"))?;
    let client = rt.block_on(Client::connect(addr, ClientOptions::default()))?;
    let mut figures = lag(&rt, &client, &mnt.dir, samples)?;
    println!(
        "mdtest-shaped: {procs} processes x {files} empty files, create / stat / remove (durable writes through the mount)"
    );
    let shm = PathBuf::from("/dev/shm").join(format!("treelog-bench-{}", std::process::id()));
    let local = base.join("local");
    for (name, root) in [
        ("mount", mnt.dir.clone()),
        ("tmpfs", shm.clone()),
        ("scratch-fs", local),
    ] {
        for shared in [false, true] {
            figures.extend(mdtest(name, &root, procs, files, shared)?);
        }
    }
    let _ = std::fs::remove_dir_all(&shm);
    drop(mnt);
    rt.block_on(server.shutdown())?;
    Ok(figures)
}

fn lag(
    rt: &tokio::runtime::Runtime,
    c: &Client,
    mnt: &Path,
    samples: usize,
) -> Result<Vec<Figure>> {
    rt.block_on(async {
        c.submit(Command::Mkdir {
            path: "/lag".into(),
            parents: true,
            mode: 0o755,
            owner: String::new(),
            group: String::new(),
        })
        .await?;
        c.submit(Command::Mkdir {
            path: "/load".into(),
            parents: true,
            mode: 0o755,
            owner: String::new(),
            group: String::new(),
        })
        .await
    })?;
    std::fs::write(mnt.join("lag/f"), b"").map_err(io("create through the mount"))?;
    // The load: 16 callers of durable creates until the samples are taken.
    let stop = Arc::new(AtomicBool::new(false));
    let mut load = Vec::new();
    for w in 0..16 {
        let (c, stop) = (c.clone(), stop.clone());
        load.push(rt.spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let _ = c
                    .submit(Command::Create {
                        path: format!("/load/w{w}-{n}").into(),
                        parents: false,
                        mode: 0o644,
                        owner: String::new(),
                        group: String::new(),
                        block_size: 128 << 20,
                    })
                    .await;
                n += 1;
            }
            n
        }));
    }
    let wait = |cond: &dyn Fn() -> bool| -> Result<Duration> {
        let t = Instant::now();
        while !cond() {
            if t.elapsed() > Duration::from_secs(10) {
                return Err(Error::Io(std::io::Error::other(
                    "a change did not show through the mount within 10 s",
                )));
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        Ok(t.elapsed())
    };
    let started = Instant::now();
    let (mut chmod, mut rename) = (Vec::new(), Vec::new());
    let mut name = "f".to_owned();
    for i in 0..samples {
        let mode = if i % 2 == 0 { 0o600 } else { 0o644 };
        // Warm: the kernel holds the attributes before the change.
        let _ = std::fs::metadata(mnt.join("lag").join(&name))?;
        rt.block_on(c.submit(Command::SetAttr {
            path: format!("/lag/{name}").into(),
            mode: Some(mode),
            owner: None,
            group: None,
            mtime_ms: None,
        }))?;
        let p = mnt.join("lag").join(&name);
        chmod.push(wait(&|| {
            std::fs::metadata(&p).is_ok_and(|m| m.permissions().mode() & 0o7777 == mode)
        })?);
        let next = format!("f{i}");
        rt.block_on(c.submit(Command::Rename {
            src: format!("/lag/{name}").into(),
            dst: format!("/lag/{next}").into(),
            overwrite: false,
        }))?;
        let (old, new) = (mnt.join("lag").join(&name), mnt.join("lag").join(&next));
        rename.push(wait(&|| !old.exists() && new.exists())?);
        name = next;
    }
    let secs = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let creates: u64 = load.into_iter().map(|h| rt.block_on(h).unwrap_or(0)).sum();
    println!(
        "visibility lag through the mount (another client's change to a cached inode; {samples} samples each, under {:.0} durable creates/s from 16 callers):",
        creates as f64 / secs
    );
    let mut out = Vec::new();
    for (what, mut v) in [("chmod", chmod), ("rename", rename)] {
        v.sort();
        let f = Figure {
            system: format!("mount visibility lag, {what}"),
            callers: 1,
            ops: v.len(),
            seconds: secs,
            ops_per_sec: 0.0,
            p50_us: percentile(&v, 0.5),
            p99_us: percentile(&v, 0.99),
        };
        println!(
            "  {what:7} p50 {:8.0} µs   p99 {:8.0} µs   max {:8.0} µs",
            f.p50_us,
            f.p99_us,
            v.last().map_or(0.0, |d| d.as_secs_f64() * 1e6)
        );
        out.push(f);
    }
    Ok(out)
}

/// One phase of every process: ops/s over the phase, each call's latency.
fn phase(
    dirs: &[PathBuf],
    files: usize,
    op: fn(&Path) -> std::io::Result<()>,
) -> Result<(f64, Vec<Duration>)> {
    let t = Instant::now();
    let hs: Vec<_> = dirs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let d = d.clone();
            std::thread::spawn(move || -> std::io::Result<Vec<Duration>> {
                let mut lat = Vec::with_capacity(files);
                for n in 0..files {
                    let p = d.join(format!("p{i}.f{n}"));
                    let s = Instant::now();
                    op(&p)?;
                    lat.push(s.elapsed());
                }
                Ok(lat)
            })
        })
        .collect();
    let mut all = Vec::new();
    for h in hs {
        all.extend(
            h.join()
                .map_err(|_| Error::Io(std::io::Error::other("a worker panicked")))??,
        );
    }
    let secs = t.elapsed().as_secs_f64();
    all.sort();
    Ok((all.len() as f64 / secs, all))
}

fn mdtest(
    system: &str,
    root: &Path,
    procs: usize,
    files: usize,
    shared: bool,
) -> Result<Vec<Figure>> {
    let top = root.join(if shared { "md-shared" } else { "md-own" });
    std::fs::create_dir_all(&top)?;
    let dirs: Vec<PathBuf> = (0..procs)
        .map(|i| {
            if shared {
                top.clone()
            } else {
                top.join(format!("p{i}"))
            }
        })
        .collect();
    for d in &dirs {
        std::fs::create_dir_all(d)?;
    }
    let create: fn(&Path) -> std::io::Result<()> = create_new;
    let stat: fn(&Path) -> std::io::Result<()> = stat_of;
    let remove: fn(&Path) -> std::io::Result<()> = remove;
    let layout = if shared {
        "one shared dir"
    } else {
        "a dir each"
    };
    let mut out = Vec::new();
    for (what, op) in [("create", create), ("stat", stat), ("remove", remove)] {
        let (rate, lat) = phase(&dirs, files, op)?;
        let f = Figure {
            system: format!("{system} {what} ({layout})"),
            callers: procs,
            ops: lat.len(),
            seconds: lat.len() as f64 / rate,
            ops_per_sec: rate,
            p50_us: percentile(&lat, 0.5),
            p99_us: percentile(&lat, 0.99),
        };
        println!(
            "  {:<40} {:>10.0} ops/s   p50 {:>7.1} µs   p99 {:>8.1} µs",
            f.system, f.ops_per_sec, f.p50_us, f.p99_us
        );
        out.push(f);
    }
    let _ = std::fs::remove_dir_all(&top);
    Ok(out)
}

fn create_new(p: &Path) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(p)
        .map(drop)
}

fn stat_of(p: &Path) -> std::io::Result<()> {
    std::fs::metadata(p).map(drop)
}

fn remove(p: &Path) -> std::io::Result<()> {
    std::fs::remove_file(p)
}
