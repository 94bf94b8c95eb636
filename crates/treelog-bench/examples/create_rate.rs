//! Creates per second without fsync (`Durability::None`): the write path's
//! own cost (validation, the log record, the index), which a durable run
//! on a disk whose fsync varies from 0.2 to 1 ms hides. Callers queue their
//! creates (pipelined, up to 256 in flight each), spread over `--dirs`
//! directories (1,000 unless told).
//!
//!     cargo run --release -p treelog-bench --example create_rate [-- --ops 400000 --callers 4 --dirs 1000]
//!
//! It uses only the API every build since the first has, so that one
//! build can be measured against another (docs/BENCHMARKS.md, Format 2).

use std::time::Instant;

use treelog::{Command, Durability, Options, Treelog};

fn arg(name: &str, default: usize) -> usize {
    let a: Vec<String> = std::env::args().collect();
    a.iter()
        .position(|x| x == name)
        .and_then(|i| a.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let ops = arg("--ops", 400_000);
    let callers = arg("--callers", 4).max(1);
    let dirs = arg("--dirs", 1000).max(1);
    let dir = tempfile::tempdir().expect("a scratch directory");
    let t =
        Treelog::open(dir.path(), Options::default().durability(Durability::None)).expect("open");
    for d in 0..dirs {
        t.mkdir_p(format!("/c/d{d}")).expect("mkdir");
    }
    let per = ops / callers;
    let start = Instant::now();
    std::thread::scope(|s| {
        for c in 0..callers {
            let t = &t;
            s.spawn(move || {
                let mut window = std::collections::VecDeque::new();
                for i in 0..per {
                    let cmd = Command::Create {
                        path: format!("/c/d{}/f{c}_{i}", (i * callers + c) % dirs).into(),
                        parents: false,
                        mode: 0o644,
                        owner: String::new(),
                        group: String::new(),
                        block_size: 0,
                    };
                    window.push_back(t.submit_pipelined(cmd).expect("queue"));
                    if window.len() >= 256 {
                        window.pop_front().unwrap().wait().expect("create");
                    }
                }
                for p in window {
                    p.wait().expect("create");
                }
            });
        }
    });
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{} creates from {callers} callers in {dirs} directories without fsync in {secs:.2} s: {:.0} creates/s",
        per * callers,
        (per * callers) as f64 / secs
    );
}
