//! `treelog-bench replica`: a leader and a replica, both servers in this
//! process on loopback. Reports the bootstrap of a new replica of a large
//! namespace (bytes, time until it serves), its lag while writers run the
//! leader at full speed (records and ms, p50/p99/max of samples every
//! 10 ms), and its catch-up rate from far behind.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::pct;
use treelog::Treelog;
use treelog_client::{Client, ClientOptions};
use treelog_proto::protocol::{NodeStatus, RequestBody, ResponseBody};
use treelog_replica::{ReplicaConfig, ReplicaHandle};
use treelog_server::{ServerConfig, ServerHandle};

fn config(data: &Path) -> ServerConfig {
    let mut c = ServerConfig::new(data.to_path_buf());
    c.listen = ([127, 0, 0, 1], 0).into();
    c.http = ([127, 0, 0, 1], 0).into();
    c
}

async fn status(c: &Client) -> Result<NodeStatus> {
    match c.call(RequestBody::Status).await? {
        ResponseBody::Status(s) => Ok(s),
        other => Err(Error::Protocol(format!("unexpected reply {other:?}"))),
    }
}

async fn replica(data: &Path, source: std::net::SocketAddr) -> Result<ReplicaHandle> {
    treelog_replica::start(ReplicaConfig::new(config(data), source)).await
}

/// Polls the replica until it has applied `seq`; returns the time it took.
async fn until_applied(addr: std::net::SocketAddr, seq: u64) -> Result<Duration> {
    let t0 = Instant::now();
    loop {
        if let Ok(c) = Client::connect(addr, ClientOptions::default()).await {
            loop {
                match status(&c).await {
                    Ok(s) if s.applied_seq >= seq => return Ok(t0.elapsed()),
                    Ok(_) => tokio::time::sleep(Duration::from_millis(2)).await,
                    Err(_) => break,
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn leader_store(h: &ServerHandle) -> Result<Arc<Treelog>> {
    h.store()
        .ok_or_else(|| Error::InvalidArgument("the leader's store is closed".into()))
}

/// A new replica's bootstrap: what it fetched and how long it took.
pub(crate) struct Bootstrap {
    pub(crate) mib: f64,
    pub(crate) fetch_secs: f64,
    pub(crate) restore_secs: f64,
    /// From the replica's start until it serves the source's state.
    pub(crate) serve_secs: f64,
}

/// Starts a new replica of `leader` (whose store is `t`) in `data` and
/// waits until it has applied everything `t` had committed.
pub(crate) async fn bootstrap(
    leader: &ServerHandle,
    t: &Treelog,
    data: &Path,
) -> Result<(ReplicaHandle, Bootstrap)> {
    let seq = t.committed_seq();
    let t0 = Instant::now();
    let r = replica(data, leader.bound.rpc).await?;
    until_applied(r.bound.rpc, seq).await?;
    let serve_secs = t0.elapsed().as_secs_f64();
    let c = r.state().counters();
    let b = Bootstrap {
        mib: c.bootstrap_bytes as f64 / (1 << 20) as f64,
        fetch_secs: c.bootstrap_fetch_ms as f64 / 1e3,
        restore_secs: c.bootstrap_ms as f64 / 1e3,
        serve_secs,
    };
    Ok((r, b))
}

/// The time a new replica of the database at `data` takes to serve its
/// state: a node started on it, a replica started in `replica_data`
/// (removed afterwards).
pub(crate) fn serve_time(data: &Path, replica_data: &Path) -> Result<Bootstrap> {
    let _ = std::fs::remove_dir_all(replica_data);
    let rt = tokio::runtime::Runtime::new()?;
    let b = rt.block_on(async {
        let leader = treelog_server::start(config(data)).await?;
        let t = leader_store(&leader)?;
        let (r, b) = bootstrap(&leader, &t, replica_data).await?;
        drop(t);
        r.shutdown().await?;
        leader.shutdown().await?;
        Ok::<_, Error>(b)
    })?;
    let _ = std::fs::remove_dir_all(replica_data);
    Ok(b)
}

pub fn run(base: &Path, inodes: u64, callers: usize, seconds: u64, behind: u64) -> Result<()> {
    let (l_data, r_data) = (base.join("leader"), base.join("replica"));
    for d in [&l_data, &r_data] {
        let _ = std::fs::remove_dir_all(d);
    }
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let leader = treelog_server::start(config(&l_data)).await?;
        let t = leader_store(&leader)?;
        let started = Instant::now();
        let loaded = tokio::task::block_in_place(|| crate::backup::load(&t, inodes))?;
        println!(
            "leader: loaded {loaded} inodes ({} records) in {:.1} s",
            t.committed_seq(),
            started.elapsed().as_secs_f64()
        );

        // Bootstrap: a new replica until it serves the leader's state.
        let (r, b) = bootstrap(&leader, &t, &r_data).await?;
        println!(
            "bootstrap: {:.1} MiB; fetched in {:.2} s ({:.0} MiB/s, the source's checkpoint and digest included), fetched and restored in {:.2} s; serving reads {:.2} s after start",
            b.mib,
            b.fetch_secs,
            b.mib / b.fetch_secs.max(1e-3),
            b.restore_secs,
            b.serve_secs
        );

        // Lag while writers run the leader at full speed.
        let writers = tokio::task::block_in_place(|| crate::Writers::start(&t, callers))?;
        let rc = Client::connect(r.bound.rpc, ClientOptions::default()).await?;
        let (mut lag_records, mut lag_ms) = (Vec::new(), Vec::new());
        let (d0, w0) = (writers.done(), Instant::now());
        while w0.elapsed() < Duration::from_secs(seconds) {
            let committed = t.committed_seq();
            let s = status(&rc).await?;
            lag_records.push(committed.saturating_sub(s.applied_seq));
            lag_ms.push(s.lag_ms);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let rate = (writers.done() - d0) as f64 / w0.elapsed().as_secs_f64();
        tokio::task::block_in_place(|| writers.stop())?;
        let n = lag_records.len();
        let first_half: u64 = lag_records[..n / 2].iter().sum::<u64>() / (n as u64 / 2).max(1);
        let second_half: u64 = lag_records[n / 2..].iter().sum::<u64>() / (n - n / 2).max(1) as u64;
        println!(
            "lag with {callers} writers at {rate:.0} synced creates/s on the leader, {n} samples: records p50 {} p99 {} max {}; ms p50 {} p99 {} max {}; mean records first half {first_half}, second half {second_half}",
            pct(&mut lag_records, 0.5),
            pct(&mut lag_records, 0.99),
            pct(&mut lag_records, 1.0),
            pct(&mut lag_ms, 0.5),
            pct(&mut lag_ms, 0.99),
            pct(&mut lag_ms, 1.0),
        );
        drop(rc);

        // Catch-up: the replica stops, the leader writes `behind` records,
        // the replica starts again and streams them.
        r.shutdown().await?;
        tokio::task::block_in_place(|| {
            t.mkdir_p("/behind")?;
            crate::bulk_load(
                &t,
                behind,
                1024,
                |i| crate::file_cmd(format!("/behind/f{i}")),
                None,
            )
        })?;
        let seq = t.committed_seq();
        let r = replica(&r_data, leader.bound.rpc).await?;
        let took = until_applied(r.bound.rpc, seq).await?;
        println!(
            "catch-up: {behind} records applied in {:.2} s from the replica's start: {:.0} records/s",
            took.as_secs_f64(),
            behind as f64 / took.as_secs_f64()
        );
        drop(t);
        r.shutdown().await?;
        leader.shutdown().await?;
        Ok(())
    })
}
