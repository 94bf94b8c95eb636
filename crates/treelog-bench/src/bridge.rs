//! `treelog-bench bridge`: durable creates at full speed in a server in
//! this process, alternately without and with a NATS bridge publishing
//! its log into JetStream (a real `nats-server` the bench starts, with
//! `sync_interval: always` when asked). Reports the writers' rate in both,
//! the records published per second beside the writers' rate, the lag
//! (records, sampled every 10 ms) and commit-to-ack latency.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::pct;
use crate::proc_stat::cpu_seconds;
use crate::Writers;
use treelog_bridge::{BridgeConfig, BridgeMetrics, NatsConfig};
use treelog_server::ServerConfig;

struct Nats(Child);

impl Drop for Nats {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_nats(bin: &Path, dir: &Path, port: u16, sync_always: bool, nice: i32) -> Result<Nats> {
    std::fs::create_dir_all(dir)?;
    let conf = dir.join("nats.conf");
    let sync = if sync_always {
        ", sync_interval: always"
    } else {
        ""
    };
    std::fs::write(
        &conf,
        format!(
            "listen: 127.0.0.1:{port}\njetstream {{ store_dir: \"{}\"{sync} }}\n",
            dir.join("js").display()
        ),
    )?;
    let mut cmd = if nice != 0 {
        let mut c = Command::new("nice");
        c.arg("-n").arg(nice.to_string()).arg(bin);
        c
    } else {
        Command::new(bin)
    };
    let child = cmd
        .arg("-c")
        .arg(&conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| Error::InvalidArgument(format!("cannot run {}: {e}", bin.display())))?;
    for _ in 0..500 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(Nats(child));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Err(Error::InvalidArgument("nats-server never listened".into()))
}

/// Linear interpolation inside the histogram's buckets, as Prometheus's
/// histogram_quantile does (the buckets double: a figure is known within
/// its bucket).
fn quantile(h: &prometheus::Histogram, q: f64) -> f64 {
    use prometheus::core::Collector;
    let mf = h.collect();
    let Some(m) = mf.first().and_then(|f| f.get_metric().first()) else {
        return 0.0;
    };
    let hist = m.get_histogram();
    let total = hist.get_sample_count() as f64;
    let rank = q * total;
    let (mut lo, mut below) = (0.0, 0.0);
    for b in hist.get_bucket() {
        let (ub, n) = (b.upper_bound(), b.cumulative_count() as f64);
        if n >= rank {
            return lo + (ub - lo) * (rank - below) / (n - below).max(1.0);
        }
        (lo, below) = (ub, n);
    }
    lo
}

pub struct BridgeBench {
    pub callers: usize,
    pub seconds: u64,
    pub rounds: usize,
    pub nats_server: PathBuf,
    pub sync_always: bool,
    /// Niceness of the nats-server process (0: as the bench).
    pub nats_nice: i32,
    pub stream_priority: treelog_server::DeliveryPriority,
}

pub fn run(base: &Path, b: &BridgeBench) -> Result<()> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let nats = start_nats(
        &b.nats_server,
        &base.join("nats"),
        port,
        b.sync_always,
        b.nats_nice,
    )?;
    let nats_pid = nats.0.id();
    let url = format!("nats://127.0.0.1:{port}");
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let mut cfg = ServerConfig::new(base.join("db"));
        cfg.listen = ([127, 0, 0, 1], 0).into();
        cfg.http = ([127, 0, 0, 1], 0).into();
        cfg.stream_priority = b.stream_priority;
        let server = treelog_server::start(cfg).await?;
        let t = server
            .store()
            .ok_or_else(|| Error::InvalidArgument("the store is closed".into()))?;
        println!(
            "bridge: {} callers of durable creates, {} s per run, {} runs each way, JetStream {}, \
             nats-server nice {}, stream priority {}",
            b.callers,
            b.seconds,
            b.rounds,
            if b.sync_always { "sync_interval: always" } else { "default sync (2 min)" },
            b.nats_nice,
            b.stream_priority
        );
        let (mut without, mut with, mut published) = (Vec::new(), Vec::new(), Vec::new());
        let (mut lags, mut ack50, mut ack99) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..b.rounds * 2 {
            let bridged = round % 2 == 1;
            // A fresh bridge (and stream) per run, caught up before it is
            // timed.
            let handle = if bridged {
                let mut bc = BridgeConfig::new(server.bound.rpc);
                bc.cursor = format!("bench-{round}");
                bc.start = treelog_bridge::Start::Now;
                let mut nats = NatsConfig::new(url.clone(), format!("BENCH{round}"));
                nats.subject = Some(format!("bench.{round}"));
                let h = treelog_bridge::start_nats(bc, nats, &prometheus::Registry::new())
                    .map_err(|e| Error::InvalidArgument(e.to_string()))?;
                while h.metrics().connected.get() == 0 {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Some(h)
            } else {
                None
            };
            let w = tokio::task::block_in_place(|| Writers::start_in(&t, b.callers, &format!("/run{round}")))?;
            let m: Option<Arc<BridgeMetrics>> = handle.as_ref().map(|h| h.metrics().clone());
            let p0 = m.as_ref().map_or(0, |m| m.records.get());
            let (n0, t0) = (w.done(), Instant::now());
            let (nats_cpu0, own_cpu0) = (cpu_seconds(nats_pid), cpu_seconds(std::process::id()));
            let mut samples = Vec::new();
            while t0.elapsed() < Duration::from_secs(b.seconds) {
                tokio::time::sleep(Duration::from_millis(10)).await;
                if let Some(m) = &m {
                    let published = m.published_seq.get().max(0) as u64;
                    samples.push(t.committed_seq().saturating_sub(published));
                }
            }
            let (n1, secs) = (w.done(), t0.elapsed().as_secs_f64());
            let nats_cpu = (cpu_seconds(nats_pid) - nats_cpu0) / secs;
            let own_cpu = (cpu_seconds(std::process::id()) - own_cpu0) / secs;
            let p1 = m.as_ref().map_or(0, |m| m.records.get());
            tokio::task::block_in_place(|| w.stop())?;
            let rate = (n1 - n0) as f64 / secs;
            if let (Some(h), Some(m)) = (handle, m) {
                let pub_rate = (p1 - p0) as f64 / secs;
                let (l50, l99, lmax) = (
                    pct(&mut samples, 0.5),
                    pct(&mut samples, 0.99),
                    samples.iter().copied().max().unwrap_or(0),
                );
                let end = t.committed_seq();
                let caught = Instant::now();
                while (m.published_seq.get().max(0) as u64) < end {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                let (a50, a99) = (
                    quantile(&m.commit_to_ack_seconds, 0.5) * 1e3,
                    quantile(&m.commit_to_ack_seconds, 0.99) * 1e3,
                );
                println!(
                    "  with bridge:    {rate:>9.0} creates/s; published {pub_rate:>9.0} records/s \
                     ({:.2}x the writers); lag p50 {l50} p99 {l99} max {lmax} records; \
                     commit-to-ack p50 {a50:.1} ms p99 {a99:.1} ms; caught up {:.2} s after the writers stopped; \
                     CPU: treelog+bridge {own_cpu:.2} cores, nats-server {nats_cpu:.2} cores",
                    pub_rate / rate,
                    caught.elapsed().as_secs_f64()
                );
                h.shutdown()
                    .await
                    .map_err(|e| Error::InvalidArgument(e.to_string()))?;
                with.push(rate);
                published.push(pub_rate / rate);
                lags.push(l99);
                ack50.push(a50);
                ack99.push(a99);
            } else {
                println!("  without bridge: {rate:>9.0} creates/s; CPU: treelog {own_cpu:.2} cores");
                without.push(rate);
            }
        }
        let med = |v: &[f64]| crate::median(v.to_vec());
        let (a, bb) = (med(&without), med(&with));
        let published = med(&published);
        println!(
            "median: without {a:.0}/s, with {bb:.0}/s: {:.3}x (goal >= 0.95x: {}); published \
             {:.2}x the writers' rate (goal >= 1x: {}); lag p99 (median run) {} records; \
             commit-to-ack p50 {:.1} ms, p99 {:.1} ms",
            bb / a,
            if bb / a >= 0.95 { "met" } else { "MISSED" },
            published,
            if published >= 0.999 { "met" } else { "MISSED" },
            pct(&mut lags, 0.5),
            med(&ack50),
            med(&ack99),
        );
        server.shutdown().await?;
        Ok(())
    })
}
