//! `treelog-bench cluster --processes`: the same creates through real
//! `treelog serve` processes (a single node, and a three-node cluster
//! whose clients go to its leader), with the CPU each process spent per
//! create (`/proc/PID/stat`) and what the followers' Raft metrics say of
//! their batches: entries per append, per fsync and per apply.
//!
//! From the CPU per create of each node comes a projection for three
//! machines like this one: a node bound by its CPU makes at most
//! `cores / (CPU per create)` creates a second, so the cluster makes at
//! most the busiest node's figure; against a single node bound the same
//! way (its client elsewhere), the ratio is the single node's CPU per
//! create over the busiest node's.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::Path;

use crate::error::{Error, Result};
use crate::mdtest_net::servers::{self, Running};
use crate::proc_stat::cpu_seconds;

/// One run's figures: creates/s and each process's CPU microseconds per
/// create, node order (the leader first).
struct Run {
    rate: f64,
    node_us: Vec<f64>,
    client_us: f64,
    /// Followers' batches: (entries per append, per fsync, per apply).
    batches: Vec<(f64, f64, f64)>,
}

/// The counters of the Raft metrics this reads (a follower's batches).
#[derive(Default, Clone, Copy)]
struct RaftCounts {
    appended: f64,
    appends: f64,
    syncs: f64,
    applied: f64,
    applies: f64,
}

impl RaftCounts {
    fn since(self, before: RaftCounts) -> (f64, f64, f64) {
        let per = |n: f64, d: f64| if d > 0.0 { n / d } else { 0.0 };
        let n = self.appended - before.appended;
        (
            per(n, self.appends - before.appends),
            per(n, self.syncs - before.syncs),
            per(self.applied - before.applied, self.applies - before.applies),
        )
    }
}

/// `GET /metrics` of the server at `http`, as text.
pub(crate) fn scrape(http: SocketAddr) -> Result<String> {
    let mut s = std::net::TcpStream::connect(http)?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: bench\r\n\r\n")?;
    let mut body = String::new();
    s.read_to_string(&mut body)?;
    Ok(body)
}

/// The value of the sample `name` (no labels) in a metrics text.
pub(crate) fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .filter_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .filter_map(|v| v.trim().parse().ok())
        .next()
        .unwrap_or(0.0)
}

fn raft_counts(http: SocketAddr) -> Result<RaftCounts> {
    let t = scrape(http)?;
    Ok(RaftCounts {
        appended: sample(&t, "treelog_raft_appended_entries_total"),
        appends: sample(&t, "treelog_raft_sync_appends_sum"),
        syncs: sample(&t, "treelog_raft_log_sync_seconds_count"),
        applied: sample(&t, "treelog_raft_applied_entries_total"),
        applies: sample(&t, "treelog_raft_apply_entries_count"),
    })
}

/// `ops` creates through `running` (its clients at its `addr`), measured.
async fn measure(running: &Running, ops: usize, raft: bool) -> Result<Run> {
    let c = crate::cluster::prepared(running.addr).await?;
    let pids = running.pids();
    let before: Vec<f64> = pids.iter().map(|p| cpu_seconds(*p)).collect();
    let counts = |r: &Running| -> Result<Vec<RaftCounts>> {
        if !raft {
            return Ok(Vec::new());
        }
        r.http.iter().skip(1).map(|h| raft_counts(*h)).collect()
    };
    let counts0 = counts(running)?;
    let me0 = cpu_seconds(std::process::id());
    let rate = crate::cluster::drive_creates(c, ops).await?;
    let client_us = (cpu_seconds(std::process::id()) - me0) * 1e6 / ops as f64;
    let node_us = pids
        .iter()
        .zip(&before)
        .map(|(p, b)| (cpu_seconds(*p) - b) * 1e6 / ops as f64)
        .collect();
    let batches = counts(running)?
        .into_iter()
        .zip(counts0)
        .map(|(a, b)| a.since(b))
        .collect();
    Ok(Run {
        rate,
        node_us,
        client_us,
        batches,
    })
}

pub(crate) fn run(base: &Path, ops: usize, repeat: usize, bin: Option<&Path>) -> Result<()> {
    let Some(bin) = servers::treelog_bin(bin) else {
        return Err(Error::InvalidArgument(
            "--processes needs a `treelog` binary beside this one (cargo build --release -p \
             treelog-cli) or --treelog-bin"
                .into(),
        ));
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        println!(
            "== durable creates, 64 in flight over one connection, {ops} per run: `treelog serve` \
             processes, a single node and a 3-node cluster (clients at its leader), on loopback"
        );
        let (mut singles, mut clusters) = (Vec::new(), Vec::new());
        for round in 0..repeat {
            let dir = base.join(format!("round{round}"));
            for side in 0..2 {
                if (side == 0) == (round % 2 == 0) {
                    let s = servers::single(Some(&bin), &dir.join("single")).await?;
                    let r = measure(&s, ops, false).await;
                    s.stop().await?;
                    singles.push(r?);
                } else {
                    let c = servers::cluster(Some(&bin), &dir.join("cluster")).await?;
                    let r = measure(&c, ops, true).await;
                    c.stop().await?;
                    clusters.push(r?);
                }
            }
            let (s, c) = (&singles[round], &clusters[round]);
            println!(
                "round {round}: single {:>7.0}/s ({:.1} us/create server, {:.1} client)   \
                 cluster {:>7.0}/s (us/create: leader {:.1}, followers {:.1} and {:.1}; client {:.1})   ratio {:.2}",
                s.rate,
                s.node_us[0],
                s.client_us,
                c.rate,
                c.node_us[0],
                c.node_us[1],
                c.node_us[2],
                c.client_us,
                c.rate / s.rate
            );
            for (i, (append, sync, apply)) in c.batches.iter().enumerate() {
                println!(
                    "         follower {}: {append:.1} entries per append, {sync:.1} per fsync, {apply:.1} per apply",
                    i + 2
                );
            }
            let _ = std::fs::remove_dir_all(&dir);
        }
        let m = |v: Vec<f64>| crate::median(v);
        let single_rate = m(singles.iter().map(|r| r.rate).collect());
        let cluster_rate = m(clusters.iter().map(|r| r.rate).collect());
        let single_us = m(singles.iter().map(|r| r.node_us[0]).collect());
        let leader_us = m(clusters.iter().map(|r| r.node_us[0]).collect());
        let follower_us = m(clusters
            .iter()
            .map(|r| r.node_us[1].max(r.node_us[2]))
            .collect());
        println!(
            "median: single node {single_rate:.0}/s, 3-node cluster {cluster_rate:.0}/s: {:.2}x (goal >= 0.5x)",
            cluster_rate / single_rate
        );
        println!(
            "CPU per create: single node {single_us:.1} us; cluster leader {leader_us:.1} us, busier follower {follower_us:.1} us"
        );
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let busiest = leader_us.max(follower_us);
        println!(
            "projection, three machines of {cores} cores (each node's CPU its own, clients elsewhere): \
             at most {:.0} creates/s, {:.2}x a single node bound the same way ({:.0}/s)",
            cores * 1e6 / busiest,
            single_us / busiest,
            cores * 1e6 / single_us
        );
        Ok(())
    })
}
