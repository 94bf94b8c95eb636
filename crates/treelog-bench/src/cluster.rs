//! `treelog-bench cluster`: durable creates through a three-node Raft
//! cluster on loopback beside a single node, in one run (every node in this
//! process, each with its own store and fsyncs, on the same cores).
//!
//! Each round starts a single node and a cluster afresh and drives the
//! same load at each over one connection with 64 creates in flight (the
//! cluster's through its leader); rounds alternate which goes first, and
//! medians are reported.

use std::net::SocketAddr;

use crate::client::{Client, ClientOptions};
use crate::command::Command;
use crate::error::{Error, Result};
use crate::load::drive;
use crate::server::{Listeners, ServerConfig};
use treelog::Durability;
use treelog_proto::protocol::{ClusterRequest, RequestBody, ResponseBody};

const CALLERS: usize = 64;
const DIRS: usize = 1000;

pub(crate) fn loopback() -> Result<Listeners> {
    let any: SocketAddr = "127.0.0.1:0"
        .parse()
        .map_err(|e| Error::InvalidArgument(format!("{e}")))?;
    Listeners::bind(any, any)
}

pub(crate) fn server_config(dir: &std::path::Path) -> ServerConfig {
    let mut c = ServerConfig::new(dir.to_owned());
    c.store = c.store.durability(Durability::Sync);
    c
}

pub(crate) async fn admin(addr: SocketAddr, req: ClusterRequest) -> Result<()> {
    let c = Client::connect(addr, ClientOptions::default()).await?;
    match c.call(RequestBody::Cluster(req)).await? {
        ResponseBody::Cluster(_) => Ok(()),
        other => Err(Error::Protocol(format!("unexpected {other:?}"))),
    }
}

/// Creates/s through `addr` (which takes writes, or sends the client to
/// the node that does), `ops` creates spread over `DIRS` directories.
async fn creates(addr: SocketAddr, ops: usize) -> Result<f64> {
    drive_creates(prepared(addr).await?, ops).await
}

/// A client of `addr` (following the leader) with the `DIRS` directories
/// the creates go into made.
pub(crate) async fn prepared(addr: SocketAddr) -> Result<Client> {
    let c = Client::connect(
        addr,
        ClientOptions {
            follow_leader: true,
            ..Default::default()
        },
    )
    .await?;
    for d in 0..DIRS {
        c.submit(Command::Mkdir {
            path: format!("/b/d{d}").into(),
            parents: true,
            mode: 0o755,
            owner: String::new(),
            group: String::new(),
        })
        .await?;
    }
    Ok(c)
}

/// `ops` creates through `c`, `CALLERS` in flight: creates/s.
pub(crate) async fn drive_creates(c: Client, ops: usize) -> Result<f64> {
    drive(CALLERS, ops, move |_, i| {
        let c = c.clone();
        async move {
            c.submit(Command::Create {
                path: format!("/b/d{}/f{i}", i % DIRS as u64).into(),
                parents: false,
                mode: 0o644,
                owner: String::new(),
                group: String::new(),
                block_size: 128 << 20,
            })
            .await
            .map(|_| ())
        }
    })
    .await
}

async fn single(base: &std::path::Path, ops: usize) -> Result<f64> {
    let h = crate::server::start_on(server_config(&base.join("single")), loopback()?).await?;
    let r = creates(h.bound.rpc, ops).await;
    h.shutdown().await?;
    r
}

/// Starts a three-node cluster in this process, each node with its own
/// store under `base`; returns the first node's address (the leader) and
/// the nodes.
pub(crate) async fn start_cluster(
    base: &std::path::Path,
) -> Result<(SocketAddr, Vec<treelog_raft::ClusterHandle>)> {
    let mut nodes = Vec::new();
    for id in 1..=3u64 {
        let l = loopback()?;
        let addr = l.bound()?.rpc;
        let node = treelog_raft::NodeConfig::new(id, addr.to_string());
        let cfg = treelog_raft::ClusterConfig {
            server: server_config(&base.join(format!("node{id}"))),
            node,
        };
        nodes.push((addr, treelog_raft::start_on(cfg, l).await?));
    }
    let first = nodes[0].0;
    admin(first, ClusterRequest::Init).await?;
    for (id, (addr, _)) in nodes.iter().enumerate().skip(1) {
        admin(
            first,
            ClusterRequest::AddLearner {
                node: id as u64 + 1,
                addr: addr.to_string(),
                wait: true,
            },
        )
        .await?;
    }
    admin(first, ClusterRequest::Promote { nodes: vec![2, 3] }).await?;
    Ok((first, nodes.into_iter().map(|(_, h)| h).collect()))
}

async fn cluster(base: &std::path::Path, ops: usize) -> Result<f64> {
    let (first, nodes) = start_cluster(base).await?;
    let r = creates(first, ops).await;
    for h in nodes {
        h.shutdown().await?;
    }
    r
}

pub fn run(base: &std::path::Path, ops: usize, repeat: usize) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        println!(
            "== durable creates, {CALLERS} in flight over one connection, {ops} per run: \
             a 3-node Raft cluster on loopback vs a single node (same process, same cores)"
        );
        let (mut one, mut three) = (Vec::new(), Vec::new());
        for round in 0..repeat {
            let dir = base.join(format!("round{round}"));
            let (a, b) = if round % 2 == 0 {
                let a = single(&dir, ops).await?;
                (a, cluster(&dir, ops).await?)
            } else {
                let b = cluster(&dir, ops).await?;
                (single(&dir, ops).await?, b)
            };
            println!(
                "round {round}: single node {a:>9.0}/s   3-node cluster {b:>9.0}/s   ratio {:.2}",
                b / a
            );
            one.push(a);
            three.push(b);
            let _ = std::fs::remove_dir_all(&dir);
        }
        let (a, b) = (crate::median(one), crate::median(three));
        println!(
            "median: single node {a:.0}/s, 3-node cluster {b:.0}/s: {:.2}x (goal >= 0.5x)",
            b / a
        );
        Ok(())
    })
}
