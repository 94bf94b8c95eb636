//! Read throughput: stat at depth 6 and 1,000-entry listing pages, in
//! process (2 threads) and over the network (2 connections, 64 requests in
//! flight each); with `--walk N`, the time and memory of a walk of an
//! N-inode tree at one pinned state.
//!
//!     cargo run --release --example read_bench [-- --secs 5] [--walk 1000000] [--lists-only]
//!
//! Apart from the walk, it uses only the API every build since the first
//! server has, so that one build can be measured against another
//! (docs/BENCHMARKS.md, reads).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use treelog::{Durability, Options, Treelog};
use treelog_client::{Client, ClientOptions};
use treelog_server::{start, ServerConfig};

const FILES_PER_DIR: usize = 100;
const DIRS: usize = 200;
const BIG_DIR: usize = 10_000;

fn create(path: String) -> treelog::Command {
    treelog::Command::Create {
        path: path.into(),
        parents: false,
        mode: 0o644,
        owner: String::new(),
        group: String::new(),
        block_size: 4096,
    }
}

fn file(i: usize) -> String {
    format!("/a/b/c/d/e{}/f{}", i / FILES_PER_DIR, i % FILES_PER_DIR)
}

fn arg(name: &str) -> Option<u64> {
    let a: Vec<String> = std::env::args().collect();
    a.iter()
        .position(|x| x == name)
        .and_then(|i| a.get(i + 1))
        .and_then(|v| v.parse().ok())
}

fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|k| k.parse::<f64>().ok())
        })
        .unwrap_or(0.0)
        / 1024.0
}

/// Runs `f` on `threads` threads for `secs`; returns operations per second.
fn rate(threads: usize, secs: u64, f: impl Fn(u64) -> u64 + Sync) -> f64 {
    let stop = AtomicBool::new(false);
    let ops = AtomicU64::new(0);
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let (stop, ops, f) = (&stop, &ops, &f);
            s.spawn(move || {
                let mut n = 0;
                let mut i = t as u64 * 7919;
                while !stop.load(Ordering::Relaxed) {
                    n += f(i);
                    i += 1;
                }
                ops.fetch_add(n, Ordering::Relaxed);
            });
        }
        std::thread::sleep(Duration::from_secs(secs));
        stop.store(true, Ordering::Relaxed);
    });
    ops.load(Ordering::Relaxed) as f64 / t0.elapsed().as_secs_f64()
}

fn main() {
    let secs = arg("--secs").unwrap_or(5);
    let dir = tempfile::tempdir().unwrap();
    let t = Arc::new(
        Treelog::open(
            dir.path().join("db"),
            Options::default().durability(Durability::None),
        )
        .unwrap(),
    );
    for d in 0..DIRS {
        t.mkdir_p(format!("/a/b/c/d/e{d}")).unwrap();
    }
    let mut pending = Vec::new();
    for i in 0..DIRS * FILES_PER_DIR {
        pending.push(t.submit_pipelined(create(file(i))).unwrap());
    }
    t.mkdir_p("/big").unwrap();
    for i in 0..BIG_DIR {
        pending.push(t.submit_pipelined(create(format!("/big/f{i:05}"))).unwrap());
    }
    for p in pending {
        p.wait().unwrap();
    }
    let n = DIRS * FILES_PER_DIR;
    let lists_only = std::env::args().any(|a| a == "--lists-only");
    if !lists_only {
        let stat = rate(2, secs, |i| {
            t.stat(file((i as usize * 2654435761) % n)).unwrap();
            1
        });
        println!("in-process stat at depth 6, 2 threads: {stat:.0}/s");
    }
    let list = rate(2, secs, |i| {
        let after = format!("f{:05}", (i as usize * 1000) % BIG_DIR);
        let p = t.list("/big", Some(after.as_str().into()), 1000).unwrap();
        p.entries.len() as u64
    });
    println!("in-process listing (1,000-entry pages), 2 threads: {list:.0} entries/s");
    let whole = rate(2, secs, |_| t.list_all("/big").unwrap().len() as u64);
    println!("in-process whole listings of 10,000 entries (one pinned state), 2 threads: {whole:.0} entries/s");
    let lent = rate(2, secs, |_| {
        let mut n = 0;
        t.list_each("/big", |e| {
            std::hint::black_box(e);
            n += 1;
            Ok(())
        })
        .unwrap();
        n
    });
    println!(
        "in-process lent listings of 10,000 entries (list_each), 2 threads: {lent:.0} entries/s"
    );
    if lists_only {
        return;
    }

    let rt = tokio::runtime::Runtime::new().unwrap();
    let t2 = t.clone();
    drop(t);
    // The server opens its own store: close this one first.
    let t = Arc::try_unwrap(t2).ok().expect("one handle");
    t.close().unwrap();
    let mut cfg = ServerConfig::new(dir.path().join("db"));
    cfg.listen = "127.0.0.1:0".parse().unwrap();
    cfg.http = "127.0.0.1:0".parse().unwrap();
    let h = rt.block_on(start(cfg)).unwrap();
    let addr = h.bound.rpc;
    let total = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for c in 0..2 {
            let client = Client::connect(addr, ClientOptions::default())
                .await
                .unwrap();
            for k in 0..64usize {
                let (client, total) = (client.clone(), total.clone());
                tasks.push(tokio::spawn(async move {
                    let mut i = c * 64 + k;
                    while t0.elapsed() < Duration::from_secs(secs) {
                        client.stat(&file((i * 2654435761) % n)).await.unwrap();
                        total.fetch_add(1, Ordering::Relaxed);
                        i += 128;
                    }
                }));
            }
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    let net = total.load(Ordering::Relaxed) as f64 / t0.elapsed().as_secs_f64();
    println!("network stat at depth 6, 2 connections x 64 in flight: {net:.0}/s");
    rt.block_on(h.shutdown()).unwrap();

    walk(dir.path(), arg("--walk"));
}

fn walk(dir: &std::path::Path, inodes: Option<u64>) {
    let Some(inodes) = inodes else {
        return;
    };
    let t = Treelog::open(
        dir.join("walk"),
        Options::default().durability(Durability::None),
    )
    .unwrap();
    let per_dir = 1000u64;
    let mut pending = Vec::new();
    for i in 0..inodes {
        if i % per_dir == 0 {
            t.mkdir_p(format!("/w/d{}", i / per_dir)).unwrap();
        }
        pending.push(
            t.submit_pipelined(create(format!("/w/d{}/f{}", i / per_dir, i % per_dir)))
                .unwrap(),
        );
        if pending.len() >= 4096 {
            for p in pending.drain(..) {
                p.wait().unwrap();
            }
        }
    }
    for p in pending {
        p.wait().unwrap();
    }
    let before = rss_mib();
    let t0 = Instant::now();
    let mut seen = 0u64;
    let mut peak = before;
    let seq = t
        .walk("/", |_, _| {
            seen += 1;
            if seen % 100_000 == 0 {
                peak = peak.max(rss_mib());
            }
            Ok(())
        })
        .unwrap();
    let took = t0.elapsed();
    println!(
        "pinned walk of {seen} entries at state {seq}: {:.2} s ({:.0} entries/s), RSS {before:.0} -> peak {peak:.0} MiB",
        took.as_secs_f64(),
        seen as f64 / took.as_secs_f64()
    );
}
