//! treelog's high availability on openraft (docs/CLUSTER.md).
//!
//! The store's `log` column family is the Raft log: a record's sequence is
//! its Raft index, its envelope carries the term and node of the leader
//! that proposed it, and Raft's own entries (a new leader's blank, a
//! membership change) are records without events. The index column
//! families are the state machine, applied with the replay's code; its
//! snapshots are the store's checkpoints, shipped in chunks and installed
//! in place. The store's single writer validates commands on the leader
//! only; followers apply what a majority committed.
//!
//! - [`types`]: openraft's types for treelog, entries to log values.
//! - [`log_store`]: `RaftLogStorage` over the log (group commit: one fsync
//!   per round of appends, by the log syncer).
//! - [`state_machine`]: `RaftStateMachine` over the index; snapshots.
//! - [`snapshot`]: a snapshot's transfer.
//! - [`proposer`]: the leader's writer hands its records to Raft.
//! - [`network`]: Raft's messages over treelog's protocol; partitions for
//!   tests.
//! - [`features`]: feature levels in a cluster of mixed releases.
//! - [`node`]: a node's lifecycle, administration.
//! - [`leadership`]: who leads as this node reports it; the writer told to
//!   lead or follow; check-quorum; readiness.
//! - [`read_index`]: linearizable reads, the read index asked of the
//!   leader.
//! - [`service`]: what the server routes to the node.
//!
//! A store that is no cluster's node never goes through any of this.

pub mod features;
pub mod leadership;
pub mod log_store;
pub mod metrics;
pub mod network;
pub mod node;
pub mod proposer;
pub mod read_index;
pub mod service;
pub mod snapshot;
pub mod state_machine;
pub mod types;

use std::sync::Arc;

use treelog::replication::{ConsensusNode, NodeRole};
use treelog::Result;
use treelog_server::{ServerConfig, ServerHandle};

pub use network::Faults;
pub use node::{NodeConfig, RaftNode};

/// How to run a cluster's node: its server and its Raft.
#[derive(Clone)]
pub struct ClusterConfig {
    pub server: ServerConfig,
    pub node: NodeConfig,
}

/// A running node: `shutdown()` stops Raft, then the server.
pub struct ClusterHandle {
    pub server: ServerHandle,
    pub node: Arc<RaftNode>,
}

impl ClusterHandle {
    pub async fn shutdown(self) -> Result<()> {
        self.node.shutdown().await;
        let store = self.server.store_weak();
        // The server closes the store once nothing else holds it: Raft let
        // go of it when it stopped, the node goes now.
        drop(self.node);
        let r = self.server.shutdown().await;
        // A storage call Raft had begun (a snapshot being built) may still
        // hold it a moment: closed when this returns, so that the same
        // directory can be opened again at once.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while store.strong_count() > 0 {
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!("the store is still held 10 s after the node stopped");
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        r
    }
}

/// The server settings a node needs: its store opened as the node, Raft's
/// messages routed to it, and frames large enough for the largest record
/// (a follower receives every record in a message).
pub fn node_server_config(cfg: &ClusterConfig) -> (ServerConfig, treelog_server::ClusterSlot) {
    let mut server = cfg.server.clone();
    server.store.role = NodeRole::Consensus(ConsensusNode {
        node_id: cfg.node.id,
    });
    server.store.writer.durability = cfg.node.durability;
    let want = server.store.writer.max_record_bytes + (1 << 20);
    server.max_frame = server
        .max_frame
        .max(want)
        .min(treelog_server::MAX_MAX_FRAME);
    let slot = treelog_server::ClusterSlot::new();
    server.cluster = Some(slot.clone());
    (server, slot)
}

/// Starts a node: the server (its store opened as the node), then Raft.
pub async fn start(cfg: ClusterConfig) -> Result<ClusterHandle> {
    let (server_cfg, slot) = node_server_config(&cfg);
    let server = treelog_server::start(server_cfg).await?;
    start_node(server, slot, cfg.node).await
}

/// [`start`] on sockets already bound (a node restarted on its ports).
pub async fn start_on(
    cfg: ClusterConfig,
    listeners: treelog_server::Listeners,
) -> Result<ClusterHandle> {
    let (server_cfg, slot) = node_server_config(&cfg);
    let server = treelog_server::start_on(server_cfg, listeners).await?;
    start_node(server, slot, cfg.node).await
}

/// Starts Raft on a server started with [`node_server_config`]'s settings.
pub async fn start_node(
    server: ServerHandle,
    slot: treelog_server::ClusterSlot,
    node: NodeConfig,
) -> Result<ClusterHandle> {
    let t = server.store().ok_or(treelog::Error::ShuttingDown)?;
    let node = RaftNode::start(t, node).await?;
    slot.set(Arc::new(service::RaftService {
        node: Arc::downgrade(&node),
    }));
    Ok(ClusterHandle { server, node })
}

/// Runs a node until the server ends (a signal, or the writer's failure).
pub async fn run(cfg: ClusterConfig) -> Result<()> {
    let mut h = start(cfg).await?;
    // Handlers first: a signal sent once "ready" is logged must find them.
    let signalled = treelog_server::signal_handlers();
    tracing::info!(
        node = h.node.id(),
        rpc = %h.server.bound.rpc,
        http = %h.server.bound.http,
        "ready"
    );
    let ended = tokio::select! {
        r = h.server.ended() => Some(r),
        why = signalled => {
            tracing::info!(signal = why, "signal received: shutting down");
            None
        }
    };
    match ended {
        Some(r) => {
            h.node.shutdown().await;
            r
        }
        None => h.shutdown().await,
    }
}
