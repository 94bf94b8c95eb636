//! `treelog-bench pipeline`: the server's request path, each side in its
//! own process, beside Redis's in the same run.
//!
//! - **Stats, pipelined**: one connection, batches of `--depth` stats by
//!   path (depth 3) written at once and their replies read back, by a
//!   client that does nothing else (frames encoded once, up front; each
//!   reply decoded and checked), as `redis-benchmark -t get -P 64 -c 1`
//!   drives Redis. With each rate, the CPU each process spent per
//!   operation (`/proc/PID/stat`), so that the server's share is known.
//! - **Stats through the Rust client**: `Client::stat_many` batches, and
//!   64 callers sharing one connection.
//! - **Creates over one connection**: the Rust client with 64 in flight
//!   against the same load on a store in this process (64 async callers),
//!   both durable.
//!
//! Rounds alternate which side goes first; the report gives each round
//! and the medians.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::{Client, ClientOptions};
use crate::error::{Error, Result};
use crate::load::drive;
use crate::mdtest_net::servers;
use crate::network::{create_cmd, mkdir_cmd};
use crate::proc_stat::cpu_seconds;
use treelog::{Options, Treelog};
use treelog_proto::protocol::{self, ClientMsg, Hello, RequestBody, ResponseBody, ServerMsg};

#[derive(clap::Args, Debug)]
pub struct PipelineArgs {
    /// Files stated (in 100 directories).
    #[arg(long, default_value_t = 100_000)]
    pub files: u64,
    /// Requests per pipelined batch (`redis-benchmark -P`).
    #[arg(long, default_value_t = 64)]
    pub depth: usize,
    /// Seconds per stat figure.
    #[arg(long, default_value_t = 4.0)]
    pub secs: f64,
    /// Creates per create figure.
    #[arg(long, default_value_t = 40_000)]
    pub creates: usize,
    /// Rounds, alternating which side goes first.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// The `treelog` binary the server runs as (default: the one beside
    /// this executable).
    #[arg(long, env = "TREELOG_BIN")]
    pub treelog_bin: Option<PathBuf>,
    /// Where to put the databases (default: a temp directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// One round's figures (rates in operations per second, CPU in
/// microseconds per operation).
#[derive(Debug, Default, Clone)]
struct Round {
    lean: f64,
    lean_server_us: f64,
    lean_client_us: f64,
    redis: f64,
    redis_server_us: f64,
    stat_many: f64,
    callers: f64,
    creates_net: f64,
    creates_server_us: f64,
    creates_client_us: f64,
    creates_inproc: f64,
    creates_inproc_us: f64,
}

fn path(i: u64) -> String {
    format!("/p/d{}/f{i}", i % 100)
}

pub fn run(base: &Path, a: &PipelineArgs) -> Result<()> {
    let Some(bin) = servers::treelog_bin(a.treelog_bin.as_deref()) else {
        return Err(Error::InvalidArgument(
            "no `treelog` binary beside this one: build it (cargo build --release -p treelog-cli) \
             or give --treelog-bin"
                .into(),
        ));
    };
    let redis_bin = crate::redis_peer::find().map_err(Error::InvalidArgument)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let server = servers::single(Some(&bin), &base.join("server")).await?;
        let pid = *server
            .pids()
            .first()
            .ok_or_else(|| Error::InvalidArgument("the server has no process".into()))?;
        let addr = server.addr;
        println!(
            "== pipeline: {} files, batches of {}, {} s per stat figure, {} creates per create figure",
            a.files, a.depth, a.secs, a.creates
        );
        println!("   server: {}", server.how);
        let c = Client::connect(addr, ClientOptions::default()).await?;
        populate(&c, a.files).await?;
        let redis = crate::redis_peer::start(&redis_bin, &base.join("redis"))?;
        let batches = encode_batches(a.files, a.depth)?;
        let mut rounds = Vec::new();
        for r in 0..a.rounds {
            let mut f = Round::default();
            let treelog_first = r % 2 == 0;
            for side in 0..2 {
                if (side == 0) == treelog_first {
                    let (rate, server_us, client_us) = lean_stats(addr, pid, &batches, a.secs).await?;
                    (f.lean, f.lean_server_us, f.lean_client_us) = (rate, server_us, client_us);
                } else {
                    let (rate, server_us) = redis_gets(&redis, a.depth, a.secs)?;
                    (f.redis, f.redis_server_us) = (rate, server_us);
                }
            }
            f.stat_many = client_stat_many(&c, a.files, a.depth, a.secs).await?;
            f.callers = client_callers(&c, a.files, a.depth, a.secs).await?;
            for side in 0..2 {
                let me = std::process::id();
                let per_create = |s0: f64, s1: f64| (s1 - s0) * 1e6 / a.creates as f64;
                if (side == 0) == treelog_first {
                    let root = format!("/c{r}");
                    prepare_creates(&c, &root).await?;
                    let (s0, c0) = (cpu_seconds(pid), cpu_seconds(me));
                    f.creates_net = creates(&c, &root, a.creates).await?;
                    f.creates_server_us = per_create(s0, cpu_seconds(pid));
                    f.creates_client_us = per_create(c0, cpu_seconds(me));
                } else {
                    let dir = base.join(format!("inproc{r}"));
                    let t = Arc::new(Treelog::open(&dir, Options::default())?);
                    for d in 0..100 {
                        t.submit_async(mkdir_cmd(format!("/c/d{d}"))).await?;
                    }
                    let c0 = cpu_seconds(me);
                    f.creates_inproc = creates_in_process(&t, a.creates).await?;
                    f.creates_inproc_us = per_create(c0, cpu_seconds(me));
                    drop(t);
                    let _ = std::fs::remove_dir_all(&dir);
                }
            }
            print_round(r, &f);
            rounds.push(f);
        }
        drop(c);
        drop(redis);
        server.stop().await?;
        print_medians(&rounds);
        Ok(())
    })
}

async fn populate(c: &Client, files: u64) -> Result<()> {
    for d in 0..100 {
        c.submit(mkdir_cmd(format!("/p/d{d}"))).await?;
    }
    let c = c.clone();
    drive(64, files as usize, move |_, i| {
        let c = c.clone();
        async move { c.submit(create_cmd(path(i))).await.map(|_| ()) }
    })
    .await?;
    Ok(())
}

/// Batches of `depth` stat requests at random files, each batch its
/// frames back to back, as a pipelining client writes them.
fn encode_batches(files: u64, depth: usize) -> Result<Vec<Vec<u8>>> {
    let mut rng = fastrand::Rng::with_seed(7);
    (0..256)
        .map(|b| {
            let mut buf = Vec::new();
            for k in 0..depth {
                let msg = ClientMsg::Request {
                    id: (b * depth + k) as u64,
                    body: RequestBody::Stat {
                        path: path(rng.u64(0..files)).into(),
                    },
                };
                protocol::encode_into(&msg, &mut buf)?;
            }
            Ok(buf)
        })
        .collect()
}

/// A client that only writes prepared batches and reads their replies.
struct Lean {
    sock: TcpStream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl Lean {
    fn connect(addr: SocketAddr) -> Result<Lean> {
        let sock = TcpStream::connect(addr)?;
        sock.set_nodelay(true)?;
        let mut l = Lean {
            sock,
            buf: vec![0; 1 << 20],
            start: 0,
            end: 0,
        };
        let hello = protocol::encode(&ClientMsg::Hello(Hello {
            magic: protocol::MAGIC,
            version: protocol::PROTOCOL_VERSION,
            token: None,
            client: "treelog-bench pipeline".into(),
        }))?;
        l.sock.write_all(&hello)?;
        match l.next()? {
            ServerMsg::Welcome { .. } => Ok(l),
            other => Err(Error::Protocol(format!("no welcome: {other:?}"))),
        }
    }

    /// The next message from the server.
    fn next(&mut self) -> Result<ServerMsg> {
        loop {
            let have = &self.buf[self.start..self.end];
            if have.len() >= 4 {
                let len = u32::from_be_bytes([have[0], have[1], have[2], have[3]]) as usize;
                if have.len() >= 4 + len {
                    let msg = protocol::decode::<ServerMsg>(&have[4..4 + len])?;
                    self.start += 4 + len;
                    return Ok(msg);
                }
                if 4 + len > self.buf.len() {
                    return Err(Error::Protocol(format!("a reply of {len} bytes")));
                }
            }
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            let n = self.sock.read(&mut self.buf[self.end..])?;
            if n == 0 {
                return Err(Error::Protocol("the server closed the connection".into()));
            }
            self.end += n;
        }
    }

    /// Writes `batch` (`depth` requests) and reads every reply, each an
    /// inode.
    fn round_trip(&mut self, batch: &[u8], depth: usize) -> Result<()> {
        self.sock.write_all(batch)?;
        for _ in 0..depth {
            match self.next()? {
                ServerMsg::Response {
                    body: ResponseBody::Inode(_),
                    ..
                } => {}
                other => return Err(Error::Protocol(format!("not an inode: {other:?}"))),
            }
        }
        Ok(())
    }
}

/// Pipelined stats for `secs`: the rate, and the server's and this
/// client's CPU microseconds per stat.
async fn lean_stats(
    addr: SocketAddr,
    server_pid: u32,
    batches: &[Vec<u8>],
    secs: f64,
) -> Result<(f64, f64, f64)> {
    let batches = batches.to_vec();
    tokio::task::spawn_blocking(move || {
        let depth = batches_depth(&batches)?;
        let mut l = Lean::connect(addr)?;
        // A warm-up batch of each kind.
        for b in &batches {
            l.round_trip(b, depth)?;
        }
        let (s0, c0, t0) = (cpu_seconds(server_pid), self_cpu_thread(), Instant::now());
        let mut ops = 0u64;
        let limit = Duration::from_secs_f64(secs);
        'run: loop {
            for b in &batches {
                l.round_trip(b, depth)?;
                ops += depth as u64;
                if t0.elapsed() >= limit {
                    break 'run;
                }
            }
        }
        let el = t0.elapsed().as_secs_f64();
        let server = (cpu_seconds(server_pid) - s0) * 1e6 / ops as f64;
        let client = (self_cpu_thread() - c0) * 1e6 / ops as f64;
        Ok((ops as f64 / el, server, client))
    })
    .await
    .map_err(|e| Error::Protocol(e.to_string()))?
}

/// The requests per batch (each batch holds the same number).
fn batches_depth(batches: &[Vec<u8>]) -> Result<usize> {
    let b = batches
        .first()
        .ok_or_else(|| Error::InvalidArgument("no batches".into()))?;
    let mut n = 0;
    let mut rest = &b[..];
    while rest.len() >= 4 {
        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        rest = &rest[4 + len..];
        n += 1;
    }
    Ok(n)
}

/// CPU seconds of the calling thread.
fn self_cpu_thread() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer for clock_gettime.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// `redis-benchmark -t get -P depth -c 1` for about `secs`: its rate and
/// the Redis server's CPU microseconds per GET.
fn redis_gets(redis: &crate::redis_peer::Redis, depth: usize, secs: f64) -> Result<(f64, f64)> {
    // Sized from a short run, so that each figure takes about `secs`.
    let probe = crate::redis_peer::redis_benchmark(redis.port, "get", depth, 200_000)
        .ok_or_else(|| Error::InvalidArgument("redis-benchmark not found".into()))?;
    let n = ((probe * secs) as u64).max(100_000);
    let s0 = cpu_seconds(redis.pid());
    let rate = crate::redis_peer::redis_benchmark(redis.port, "get", depth, n)
        .ok_or_else(|| Error::InvalidArgument("redis-benchmark failed".into()))?;
    Ok((rate, (cpu_seconds(redis.pid()) - s0) * 1e6 / n as f64))
}

/// `Client::stat_many` batches of `depth` for `secs`.
async fn client_stat_many(c: &Client, files: u64, depth: usize, secs: f64) -> Result<f64> {
    let mut rng = fastrand::Rng::with_seed(11);
    let t0 = Instant::now();
    let mut ops = 0u64;
    while t0.elapsed().as_secs_f64() < secs {
        let paths: Vec<String> = (0..depth).map(|_| path(rng.u64(0..files))).collect();
        let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
        for r in c.stat_many(&refs).await? {
            r?;
        }
        ops += depth as u64;
    }
    Ok(ops as f64 / t0.elapsed().as_secs_f64())
}

/// `depth` callers sharing one connection, each a stat at a time, for
/// about `secs` (sized from a short run).
async fn client_callers(c: &Client, files: u64, depth: usize, secs: f64) -> Result<f64> {
    let stats = |n: usize| {
        let c = c.clone();
        drive(depth, n, move |_, i| {
            let c = c.clone();
            async move {
                c.stat(&path(i.wrapping_mul(2_654_435_761) % files))
                    .await
                    .map(|_| ())
            }
        })
    };
    let probe = stats(20_000).await?;
    stats(((probe * secs) as usize).max(20_000)).await
}

/// The directories of [`creates`] under `root`.
async fn prepare_creates(c: &Client, root: &str) -> Result<()> {
    for d in 0..100 {
        c.submit(mkdir_cmd(format!("{root}/d{d}"))).await?;
    }
    Ok(())
}

/// Durable creates over one connection, 64 in flight, under `root`.
async fn creates(c: &Client, root: &str, n: usize) -> Result<f64> {
    let c = c.clone();
    let root: Arc<str> = root.into();
    drive(64, n, move |_, i| {
        let c = c.clone();
        let p = format!("{root}/d{}/f{i}", i % 100);
        async move { c.submit(create_cmd(p)).await.map(|_| ()) }
    })
    .await
}

/// The same creates on a store in this process (its directories made),
/// 64 async callers.
async fn creates_in_process(t: &Arc<Treelog>, n: usize) -> Result<f64> {
    let t = t.clone();
    drive(64, n, move |_, i| {
        let t = t.clone();
        async move {
            t.submit_async(create_cmd(format!("/c/d{}/f{i}", i % 100)))
                .await
                .map(|_| ())
        }
    })
    .await
}

fn print_round(r: usize, f: &Round) {
    println!("  round {r}:");
    println!(
        "    stats/s, pipelined, 1 connection:     treelog {:>9.0} ({:.2} us server, {:.2} us client per stat)",
        f.lean, f.lean_server_us, f.lean_client_us
    );
    println!(
        "    GET/s, redis-benchmark -P, 1 conn:    redis   {:>9.0} ({:.2} us server per GET)   treelog/redis {:.2}x",
        f.redis,
        f.redis_server_us,
        f.lean / f.redis
    );
    println!(
        "    stats/s, Client::stat_many:           treelog {:>9.0}",
        f.stat_many
    );
    println!(
        "    stats/s, 64 callers on 1 connection:  treelog {:>9.0}",
        f.callers
    );
    println!(
        "    creates/s, 1 connection x 64:         treelog {:>9.0} ({:.1} us server + {:.1} us client per create); \
         in process {:>9.0} ({:.1} us per create); ratio {:.2}x",
        f.creates_net,
        f.creates_server_us,
        f.creates_client_us,
        f.creates_inproc,
        f.creates_inproc_us,
        f.creates_net / f.creates_inproc
    );
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn print_medians(rounds: &[Round]) {
    let m = |f: fn(&Round) -> f64| median(rounds.iter().map(f).collect());
    let ratio = |f: fn(&Round) -> f64, g: fn(&Round) -> f64| {
        let v: Vec<f64> = rounds.iter().map(|r| f(r) / g(r)).collect();
        let (lo, hi) = v
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
        (median(v), lo, hi)
    };
    println!("== medians over {} rounds", rounds.len());
    let (s, slo, shi) = ratio(|r| r.lean, |r| r.redis);
    println!(
        "  stats pipelined {:.0}/s (server {:.2} us/stat) : redis-benchmark GET {:.0}/s (server {:.2} us/GET) = {s:.2}x (rounds {slo:.2}-{shi:.2}; goal >= 1.0x)",
        m(|r| r.lean),
        m(|r| r.lean_server_us),
        m(|r| r.redis),
        m(|r| r.redis_server_us)
    );
    println!(
        "  stats through the client: stat_many {:.0}/s, 64 callers {:.0}/s",
        m(|r| r.stat_many),
        m(|r| r.callers)
    );
    let (c, clo, chi) = ratio(|r| r.creates_net, |r| r.creates_inproc);
    println!(
        "  creates 1 connection x 64 {:.0}/s (server {:.1} + client {:.1} us/create) : in process {:.0}/s ({:.1} us/create) = {c:.2}x (rounds {clo:.2}-{chi:.2}; goal >= 0.8x)",
        m(|r| r.creates_net),
        m(|r| r.creates_server_us),
        m(|r| r.creates_client_us),
        m(|r| r.creates_inproc),
        m(|r| r.creates_inproc_us)
    );
}
