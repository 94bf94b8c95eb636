//! A pipelining client alone in its process, against a server in another
//! (`treelog serve`): stats per second over `--conns` connections with
//! `--inflight` requests in flight each, and the CPU seconds this client
//! used, so that the server's share and the client's can be told apart
//! (docs/BENCHMARKS.md, Network).
//!
//!     treelog serve --data /tmp/s --listen 127.0.0.1:7411 &
//!     cargo run --release -p treelog-bench --example stat_client -- \
//!         --addr 127.0.0.1:7411 [--conns 1] [--inflight 64] [--secs 5] [--files 10000]
//!
//! It creates `/sc/d<k>/f<i>` (`--files`, in 100 directories) first, unless
//! they exist, then stats them in a shuffled order. With `--list N` it
//! creates `/sl` with N files instead and lists it whole (pages of 10,000,
//! entries with attributes), `--inflight` listings at a time per connection.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use treelog::Command;
use treelog_client::{Client, ClientOptions};

fn arg(name: &str, default: &str) -> String {
    let a: Vec<String> = std::env::args().collect();
    a.iter()
        .position(|x| x == name)
        .and_then(|i| a.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_owned())
}

fn num(name: &str, default: u64) -> u64 {
    arg(name, &default.to_string()).parse().expect("a number")
}

/// User + system CPU seconds of this process (`/proc/self/stat`).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command's closing parenthesis; utime and stime are
    // the 14th and 15th of the line, in clock ticks (100 per second).
    let rest = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

fn path(i: u64) -> String {
    format!("/sc/d{}/f{i}", i % 100)
}

#[tokio::main]
async fn main() {
    let addr: std::net::SocketAddr = arg("--addr", "127.0.0.1:7411").parse().expect("--addr");
    let conns = num("--conns", 1).max(1);
    let inflight = num("--inflight", 64).max(1);
    let secs = num("--secs", 5);
    let files = num("--files", 10_000).max(1);

    let setup = Client::connect(addr, ClientOptions::default())
        .await
        .expect("connect");
    let list = num("--list", 0);
    if list > 0 {
        lists(addr, &setup, list, conns, inflight, secs).await;
        return;
    }
    if setup.stat(&path(files - 1)).await.is_err() {
        for d in 0..100 {
            let _ = setup
                .submit(Command::Mkdir {
                    path: format!("/sc/d{d}").into(),
                    parents: true,
                    mode: 0o755,
                    owner: String::new(),
                    group: String::new(),
                })
                .await;
        }
        let mut pending = Vec::new();
        for i in 0..files {
            let c = setup.clone();
            pending.push(tokio::spawn(async move { c.submit(create(path(i))).await }));
            if pending.len() >= 256 {
                for p in pending.drain(..) {
                    p.await.expect("task").expect("create");
                }
            }
        }
        for p in pending {
            p.await.expect("task").expect("create");
        }
    }
    drop(setup);

    run(
        addr,
        conns,
        inflight,
        secs,
        "stats",
        move |client, i| async move {
            client
                .stat(&path(i.wrapping_mul(2_654_435_761) % files))
                .await
                .expect("stat");
        },
    )
    .await;
}

fn create(path: String) -> Command {
    Command::Create {
        path: path.into(),
        parents: false,
        mode: 0o644,
        owner: String::new(),
        group: String::new(),
        block_size: 4096,
    }
}

/// Whole listings of `/sl` (made with `n` files unless it has them).
async fn lists(
    addr: std::net::SocketAddr,
    setup: &Client,
    n: u64,
    conns: u64,
    inflight: u64,
    secs: u64,
) {
    if setup.stat(&format!("/sl/f{:08}", n - 1)).await.is_err() {
        let _ = setup
            .submit(Command::Mkdir {
                path: "/sl".into(),
                parents: false,
                mode: 0o755,
                owner: String::new(),
                group: String::new(),
            })
            .await;
        let mut pending = Vec::new();
        for i in 0..n {
            let c = setup.clone();
            pending.push(tokio::spawn(async move {
                c.submit(create(format!("/sl/f{i:08}"))).await
            }));
            if pending.len() >= 256 {
                for p in pending.drain(..) {
                    let _ = p.await.expect("task");
                }
            }
        }
        for p in pending {
            let _ = p.await.expect("task");
        }
    }
    run(
        addr,
        conns,
        inflight,
        secs,
        "listings",
        move |client, _| async move {
            let mut after: Option<treelog::ByteString> = None;
            let mut seen = 0;
            loop {
                let page = client
                    .list("/sl", after.as_deref(), 10_000)
                    .await
                    .expect("list");
                seen += page.entries.len() as u64;
                match page.next_start_after {
                    Some(a) => after = Some(a),
                    None => break,
                }
            }
            assert_eq!(seen, n, "a whole listing");
        },
    )
    .await;
}

/// Runs `op` from `inflight` tasks on each of `conns` connections for
/// `secs`, and prints the rate and this process's CPU.
async fn run<F, Fut>(
    addr: std::net::SocketAddr,
    conns: u64,
    inflight: u64,
    secs: u64,
    what: &str,
    op: F,
) where
    F: Fn(Client, u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let total = std::sync::Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    for c in 0..conns {
        let client = Client::connect(addr, ClientOptions::default())
            .await
            .expect("connect");
        for k in 0..inflight {
            let (client, total, op) = (client.clone(), total.clone(), op.clone());
            tasks.push(tokio::spawn(async move {
                let mut i = c * inflight + k;
                while t0.elapsed() < Duration::from_secs(secs) {
                    op(client.clone(), i).await;
                    total.fetch_add(1, Ordering::Relaxed);
                    i += conns * inflight;
                }
            }));
        }
    }
    for t in tasks {
        t.await.expect("task");
    }
    let wall = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    println!(
        "{what} over {conns} connection(s) x {inflight} in flight: {:.0}/s; this client used {:.2} CPU s in {:.2} s ({:.2} cores)",
        total.load(Ordering::Relaxed) as f64 / wall,
        cpu,
        wall,
        cpu / wall
    );
}
