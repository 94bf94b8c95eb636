//! `treelog bench network`: the server over loopback TCP beside the same
//! work in-process, in one run.
//!
//! - creates/s, 1 connection with 64 requests in flight (pipelining);
//! - creates/s, 16 connections with 4 in flight each;
//! - creates/s in-process, 64 tokio tasks calling `submit_async`;
//! - stats/s over 1 connection with 64 in flight, and in-process with 2
//!   threads;
//! - a lone caller's creates/s over the network (one in flight);
//! - listings/s of a 10,000-entry directory over the network;
//! - the same workloads against Redis (`crate::redis_peer`), when
//!   `redis-server` is on PATH, and treelog's ratio to it;
//! - with `--tls`, creates and pipelined stats over one TLS connection
//!   beside the same over one plaintext connection, to the same server
//!   (which takes both on its port).

use std::sync::Arc;
use std::time::Instant;

use crate::client::{Client, ClientOptions};
use crate::command::Command;
use crate::error::{Error, Result};
use crate::load::drive;
use crate::server::{start, ServerConfig};
use crate::Figure;
use treelog::{Options, Treelog};

/// The writer's totals, read from a scrape of the server's `/metrics` (or
/// the store's own registry in process): what the commit rounds of one
/// phase looked like, taken as the difference of two readings.
#[derive(Clone, Copy, Default)]
struct WriterTotals {
    groups: f64,
    commands: f64,
    syncs: f64,
    sync_secs: f64,
    queue_wait_secs: f64,
    end_to_end_secs: f64,
    /// Per group: validation, the log append, and (per fsync) the index
    /// apply.
    validate_secs: f64,
    log_secs: f64,
    apply_secs: f64,
}

impl WriterTotals {
    fn parse(text: &str) -> WriterTotals {
        let s = |n| crate::cluster_cpu::sample(text, n);
        WriterTotals {
            groups: s("treelog_write_group_commands_count"),
            commands: s("treelog_write_group_commands_sum"),
            syncs: s("treelog_write_sync_seconds_count"),
            sync_secs: s("treelog_write_sync_seconds_sum"),
            queue_wait_secs: s("treelog_write_queue_wait_seconds_sum"),
            end_to_end_secs: s("treelog_write_end_to_end_seconds_sum"),
            validate_secs: s("treelog_write_validate_seconds_sum"),
            log_secs: s("treelog_write_log_seconds_sum"),
            apply_secs: s("treelog_write_index_apply_seconds_sum"),
        }
    }

    fn scraped(http: std::net::SocketAddr) -> Result<WriterTotals> {
        Ok(Self::parse(&crate::cluster_cpu::scrape(http)?))
    }

    fn of(t: &Treelog) -> WriterTotals {
        let text = t.metrics().map(|m| m.render()).unwrap_or_default();
        Self::parse(&text)
    }

    /// The rounds since `before`, as one line under a phase's figure.
    fn since(self, before: WriterTotals) -> String {
        let per = |n: f64, d: f64| if d > 0.0 { n / d } else { 0.0 };
        let commands = self.commands - before.commands;
        format!(
            "    (writer: {:.1} commands per group, {:.1} per fsync; per group: validate {:.0} us, log append {:.0} us; per fsync {:.0} us, index apply {:.0} us; per command: {:.0} us queued, {:.0} us end to end)",
            per(commands, self.groups - before.groups),
            per(commands, self.syncs - before.syncs),
            1e6 * per(self.validate_secs - before.validate_secs, self.groups - before.groups),
            1e6 * per(self.log_secs - before.log_secs, self.groups - before.groups),
            1e6 * per(self.sync_secs - before.sync_secs, self.syncs - before.syncs),
            1e6 * per(self.apply_secs - before.apply_secs, self.syncs - before.syncs),
            1e6 * per(self.queue_wait_secs - before.queue_wait_secs, commands),
            1e6 * per(self.end_to_end_secs - before.end_to_end_secs, commands),
        )
    }
}

/// An empty file at `p` (mode 644) whose parent exists: the benches'
/// create over the network and in process alike.
pub(crate) fn create_cmd(p: String) -> Command {
    Command::Create {
        path: p.into(),
        parents: false,
        mode: 0o644,
        owner: String::new(),
        group: String::new(),
        block_size: 128 << 20,
    }
}

/// `mkdir -p p` (mode 755).
pub(crate) fn mkdir_cmd(p: String) -> Command {
    Command::Mkdir {
        path: p.into(),
        parents: true,
        mode: 0o755,
        owner: String::new(),
        group: String::new(),
    }
}

/// Lists `path` whole over the network (pages of the server's maximum);
/// returns the entries.
async fn list_all(c: &Client, path: &str) -> Result<usize> {
    let mut after: Option<treelog::ByteString> = None;
    let mut n = 0;
    loop {
        let page = c.list(path, after.as_deref(), 10_000).await?;
        n += page.entries.len();
        match page.next_start_after {
            Some(a) => after = Some(a),
            None => return Ok(n),
        }
    }
}

/// Listing rounds of the 10,000-entry directory.
const LIST_ROUNDS: usize = 50;
const LIST_ENTRIES: usize = 10_000;
/// Stats per pipelined batch, as `redis-benchmark -P 64`.
const PIPELINE: usize = 64;

/// A rate as a [`Figure`] named `system`.
fn figure(system: &str, callers: usize, ops: usize, rate: f64) -> Figure {
    Figure::rate(system, callers, ops, ops as f64 / rate)
}

/// Runs the comparison and prints it; returns its figures (`network-*`,
/// `inproc-creates-64`, and `redis-*` when Redis ran) for the suite's
/// targets.
pub fn run(base: &std::path::Path, ops: usize, tls: bool) -> Result<Vec<Figure>> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        println!("== network (loopback TCP) vs in-process, durable creates, {ops} per run");
        let mut cfg = ServerConfig::new(base.join("net"));
        cfg.listen = "127.0.0.1:0"
            .parse()
            .map_err(|e| Error::InvalidArgument(format!("{e}")))?;
        cfg.http = "127.0.0.1:0"
            .parse()
            .map_err(|e| Error::InvalidArgument(format!("{e}")))?;
        let client_tls = match tls {
            false => None,
            true => {
                let (server, client) = tls_pair(&base.join("tls"))?;
                cfg.tls = Some(server);
                Some(client)
            }
        };
        let h = start(cfg).await?;
        let addr = h.bound.rpc;
        let c = Client::connect(addr, ClientOptions::default()).await?;
        for d in 0..1000 {
            c.submit(mkdir_cmd(format!("/n1/d{d}"))).await?;
            c.submit(mkdir_cmd(format!("/n16/d{d}"))).await?;
        }
        let http = h.bound.http;
        let w0 = WriterTotals::scraped(http)?;
        let c1 = c.clone();
        let one = drive(64, ops, move |_, i| {
            let c = c1.clone();
            async move {
                c.submit(create_cmd(format!("/n1/d{}/f{i}", i % 1000)))
                    .await
                    .map(|_| ())
            }
        })
        .await?;
        println!("  creates/s, 1 connection x 64 in flight:   {one:>10.0}");
        let w1 = WriterTotals::scraped(http)?;
        println!("{}", w1.since(w0));
        let mut conns = Vec::new();
        for _ in 0..16 {
            conns.push(Client::connect(addr, ClientOptions::default()).await?);
        }
        let conns = Arc::new(conns);
        let sixteen = drive(64, ops, move |lane, i| {
            let c = conns[lane % 16].clone();
            async move {
                c.submit(create_cmd(format!("/n16/d{}/f{i}", i % 1000)))
                    .await
                    .map(|_| ())
            }
        })
        .await?;
        println!("  creates/s, 16 connections x 4 in flight:  {sixteen:>10.0}");
        println!("{}", WriterTotals::scraped(http)?.since(w1));
        let c2 = c.clone();
        let stats_net = drive(64, ops * 4, move |_, i| {
            let c = c2.clone();
            async move {
                c.stat(&format!("/n1/d{}/f{}", i % 1000, i % ops as u64))
                    .await
                    .map(|_| ())
            }
        })
        .await?;
        println!("  stats/s,   1 connection x 64 in flight:   {stats_net:>10.0}");
        // The same stats as a pipelining client sends them (as
        // `redis-benchmark -P 64` does): 64 in one write, answered together.
        let c5 = c.clone();
        let batches = drive(1, ops * 4 / PIPELINE, move |_, b| {
            let c = c5.clone();
            async move {
                let paths: Vec<String> = (0..PIPELINE as u64)
                    .map(|k| {
                        let i = b * PIPELINE as u64 + k;
                        format!("/n1/d{}/f{}", i % 1000, i % ops as u64)
                    })
                    .collect();
                let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
                for r in c.stat_many(&refs).await? {
                    r?;
                }
                Ok(())
            }
        })
        .await?;
        let stats_piped = batches * PIPELINE as f64;
        println!("  stats/s,   1 connection, batches of {PIPELINE}:    {stats_piped:>10.0}");
        let tls_figures = match client_tls {
            None => Vec::new(),
            Some(t) => over_tls(addr, t, ops, one, stats_piped).await?,
        };
        c.submit(mkdir_cmd("/lone".into())).await?;
        let c3 = c.clone();
        let lone = drive(1, ops / 8, move |_, i| {
            let c = c3.clone();
            async move { c.submit(create_cmd(format!("/lone/f{i}"))).await.map(|_| ()) }
        })
        .await?;
        println!("  creates/s, a lone caller (1 in flight):   {lone:>10.0}");
        c.submit(mkdir_cmd("/big".into())).await?;
        let c4 = c.clone();
        drive(64, LIST_ENTRIES, move |_, i| {
            let c = c4.clone();
            async move { c.submit(create_cmd(format!("/big/f{i:05}"))).await.map(|_| ()) }
        })
        .await?;
        let t0 = Instant::now();
        for _ in 0..LIST_ROUNDS {
            let n = list_all(&c, "/big").await?;
            if n != LIST_ENTRIES {
                return Err(Error::InvalidArgument(format!("listed {n} of {LIST_ENTRIES}")));
            }
        }
        let lists = LIST_ROUNDS as f64 / t0.elapsed().as_secs_f64();
        println!("  lists/s of {LIST_ENTRIES} entries (with attributes): {lists:>7.0}");
        drop(c);
        h.shutdown().await?;

        // In-process, same shape: 64 concurrent async callers.
        let t = Arc::new(Treelog::open(base.join("inproc"), Options::default())?);
        for d in 0..1000 {
            t.submit_async(mkdir_cmd(format!("/p/d{d}"))).await?;
        }
        let w2 = WriterTotals::of(&t);
        let t1 = t.clone();
        let inproc = drive(64, ops, move |_, i| {
            let t = t1.clone();
            async move {
                t.submit_async(create_cmd(format!("/p/d{}/f{i}", i % 1000)))
                    .await
                    .map(|_| ())
            }
        })
        .await?;
        println!("  creates/s, in-process, 64 async callers:  {inproc:>10.0}");
        println!("{}", WriterTotals::of(&t).since(w2));
        println!(
            "  ratio network (1 conn) / in-process:      {:>10.2}",
            one / inproc
        );
        println!(
            "  ratio network (16 conns) / in-process:    {:>10.2}",
            sixteen / inproc
        );
        let t2 = t.clone();
        let stats_in = tokio::task::spawn_blocking(move || {
            let t0 = Instant::now();
            let n = ops * 4;
            std::thread::scope(|s| {
                for th in 0..2 {
                    let t = &t2;
                    s.spawn(move || {
                        for i in (th..n).step_by(2) {
                            let _ = t.stat(format!("/p/d{}/f{}", i % 1000, i % ops));
                        }
                    });
                }
            });
            n as f64 / t0.elapsed().as_secs_f64()
        })
        .await
        .map_err(|e| Error::Protocol(e.to_string()))?;
        println!("  stats/s,   in-process, 2 threads:         {stats_in:>10.0}");
        drop(t);
        let mut figures = vec![
            figure("network-creates-1x64", 64, ops, one),
            figure("network-creates-16x4", 64, ops, sixteen),
            figure("network-stats-1x64", 64, ops * 4, stats_net),
            figure("network-stats-pipelined-64", 1, ops * 4, stats_piped),
            figure("network-creates-lone", 1, ops / 8, lone),
            figure("network-lists-10k", 1, LIST_ROUNDS, lists),
            figure("inproc-creates-64", 64, ops, inproc),
        ];
        figures.extend(tls_figures);
        match crate::redis_peer::find() {
            Err(why) => println!("== Redis peer: SKIPPED: {why}"),
            Ok(bin) => {
                let redis = crate::redis_peer::start(&bin, &base.join("redis"))?;
                println!(
                    "== Redis peer: redis-server, appendonly yes, appendfsync always, loopback; JuiceFS's layout (simplified)"
                );
                let r = crate::redis_peer::run(redis.port, ops, LIST_ENTRIES, LIST_ROUNDS).await?;
                let row = |what: &str, t: f64, p: f64, peer: &str| {
                    println!("  {what:<44} treelog {t:>9.0}  {peer:<26} {p:>9.0}  {:>5.2}x", t / p)
                };
                row("creates/s, 1 connection x 64 in flight", one, r.creates_1x64, "Redis create script");
                row("creates/s, 16 connections x 4 in flight", sixteen, r.creates_16x4, "Redis create script");
                row("creates/s, a lone caller", lone, r.creates_1x1, "Redis create script");
                row("stats/s by path, 1 connection x 64", stats_net, r.stats_resolve_1x64, "Redis resolve script");
                row("stats/s by path, 1 connection x 64", stats_net, r.gets_1x64, "Redis GET i<ino>");
                row("lists/s of 10,000 entries", lists, r.lists_10k, "Redis HGETALL + MGET");
                match crate::redis_peer::redis_benchmark_get(redis.port, 2_000_000) {
                    Some(rb) => {
                        figures.push(figure("redis-benchmark-get-p64", 1, 2_000_000, rb));
                        row("stats/s by path, 1 connection x 64", stats_net, rb, "redis-benchmark GET -P 64");
                        row("stats/s by path, pipelined batches of 64", stats_piped, rb, "redis-benchmark GET -P 64");
                    }
                    None => println!("  redis-benchmark not found: no pipelined-GET floor"),
                }
            }
        }
        Ok(figures)
    })
}

/// A server configuration with a certificate of a CA made now in `dir`,
/// and a client that trusts that CA.
fn tls_pair(
    dir: &std::path::Path,
) -> Result<(treelog_tls::ServerTls, Arc<crate::client::ClientTls>)> {
    use treelog_tls::certs::{Ca, CertSpec};
    let tls_err = |e: treelog_tls::Error| Error::InvalidArgument(e.to_string());
    std::fs::create_dir_all(dir)?;
    let ca = Ca::create("bench CA", 1).map_err(tls_err)?;
    ca.write(dir).map_err(tls_err)?;
    let mut spec = CertSpec::node("bench");
    spec.ips = vec![std::net::Ipv4Addr::LOCALHOST.into()];
    let (cert, key) = ca
        .issue(&spec)
        .and_then(|i| i.write(dir, "bench"))
        .map_err(tls_err)?;
    let server = treelog_tls::ServerTls::load(&cert, &key, None).map_err(tls_err)?;
    let client = crate::client::ClientTls::load(&Ca::paths(dir).0, None).map_err(tls_err)?;
    Ok((server, Arc::new(client)))
}

/// Creates (64 in flight) and pipelined stats over one TLS connection,
/// printed beside the plaintext connection's (`plain_creates`,
/// `plain_stats`, measured just before on the same server and paths).
async fn over_tls(
    addr: std::net::SocketAddr,
    tls: Arc<crate::client::ClientTls>,
    ops: usize,
    plain_creates: f64,
    plain_stats: f64,
) -> Result<Vec<Figure>> {
    let c = Client::connect(
        addr,
        ClientOptions {
            tls: Some(tls),
            ..Default::default()
        },
    )
    .await?;
    for d in 0..1000 {
        c.submit(mkdir_cmd(format!("/t1/d{d}"))).await?;
    }
    let c1 = c.clone();
    let creates = drive(64, ops, move |_, i| {
        let c = c1.clone();
        async move {
            c.submit(create_cmd(format!("/t1/d{}/f{i}", i % 1000)))
                .await
                .map(|_| ())
        }
    })
    .await?;
    let c2 = c.clone();
    let batches = drive(1, ops * 4 / PIPELINE, move |_, b| {
        let c = c2.clone();
        async move {
            let paths: Vec<String> = (0..PIPELINE as u64)
                .map(|k| {
                    let i = b * PIPELINE as u64 + k;
                    format!("/n1/d{}/f{}", i % 1000, i % ops as u64)
                })
                .collect();
            let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
            for r in c.stat_many(&refs).await? {
                r?;
            }
            Ok(())
        }
    })
    .await?;
    let stats = batches * PIPELINE as f64;
    println!("  over TLS, 1 connection:             plaintext        TLS   TLS/plain");
    for (what, plain, tls) in [
        ("creates/s, 64 in flight", plain_creates, creates),
        ("stats/s, batches of 64", plain_stats, stats),
    ] {
        println!(
            "    {what:<30} {plain:>10.0} {tls:>10.0} {:>10.2}",
            tls / plain
        );
    }
    Ok(vec![
        figure("network-tls-creates-1x64", 64, ops, creates),
        figure("network-tls-stats-pipelined-64", 1, ops * 4, stats),
    ])
}
