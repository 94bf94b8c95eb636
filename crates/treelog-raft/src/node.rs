//! A node of a treelog Raft cluster: its openraft instance over the store,
//! the task that tells the store's writer whether to lead or follow, and
//! the cluster's administration (docs/CLUSTER.md).

use openraft::async_runtime::WatchReceiver;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use openraft::{ChangeMembers, ReadPolicy, ServerState};
use treelog::format::meta::RaftLogId;
use treelog::{Durability, Error, Result, Treelog};
use treelog_proto::protocol::{ClusterMember, ClusterStatus};

use crate::features::FeatureLevels;
use crate::leadership::Leadership;
use crate::log_store::LogStore;
use crate::metrics::RaftMetrics;
use crate::network::{Faults, Network};
use crate::proposer::RaftProposer;
use crate::snapshot::Receiver;
use crate::state_machine::{Raft, Snapshots, StateMachine};
use crate::types::{encode_entry, log_id, Entry, Membership, Node, NodeId, StoreRef, TypeConfig};

/// How a node runs.
#[derive(Clone)]
pub struct NodeConfig {
    pub id: NodeId,
    /// The RPC address the other nodes and clients reach it at.
    pub addr: String,
    /// The token the other nodes require (the cluster shares one).
    pub token: Option<String>,
    /// TLS to the other nodes (the cluster's CA, and this node's own
    /// certificate as its client certificate: mutual TLS between nodes);
    /// `None`: plaintext.
    pub tls: Option<Arc<treelog_client::ClientTls>>,
    /// Durability of the store: `None` skips the log's fsyncs (tests).
    pub durability: Durability,
    /// Heartbeats every this many ms; elections after 3 to 6 times it.
    pub heartbeat_ms: u64,
    /// Build a snapshot after this many entries (0: only when needed).
    pub snapshot_every: u64,
    /// Entries kept in the log behind the last snapshot (Raft's purge).
    pub keep_after_snapshot: u64,
    /// Messages between chosen nodes dropped or delayed (tests).
    pub faults: Option<Arc<Faults>>,
    /// `/readyz` fails while the applied index is more than this many
    /// entries behind the commit index.
    pub ready_max_lag: u64,
}

impl NodeConfig {
    pub fn new(id: NodeId, addr: impl Into<String>) -> NodeConfig {
        NodeConfig {
            id,
            addr: addr.into(),
            token: None,
            tls: None,
            durability: Durability::Sync,
            heartbeat_ms: DEFAULT_HEARTBEAT_MS,
            snapshot_every: 1_000_000,
            keep_after_snapshot: 100_000,
            faults: None,
            ready_max_lag: DEFAULT_READY_MAX_LAG,
        }
    }

    fn raft_config(&self) -> Result<openraft::Config> {
        let c = openraft::Config {
            cluster_name: "treelog".into(),
            heartbeat_interval: self.heartbeat_ms,
            election_timeout_min: self.heartbeat_ms * ELECTION_TIMEOUT_MIN_HEARTBEATS,
            election_timeout_max: self.heartbeat_ms * ELECTION_TIMEOUT_MAX_HEARTBEATS,
            // A snapshot is a checkpoint of the whole database: not every
            // few thousand entries.
            snapshot_policy: if self.snapshot_every == 0 {
                openraft::SnapshotPolicy::Never
            } else {
                openraft::SnapshotPolicy::LogsSinceLast(self.snapshot_every)
            },
            max_in_snapshot_log_to_keep: self.keep_after_snapshot,
            // Purges go in batches (each a range deletion and a synced
            // write), not per entry.
            purge_batch_size: (self.keep_after_snapshot / 10).clamp(1, 1024),
            max_payload_entries: 1024,
            // Sending a snapshot is a transfer of files, timed by the
            // network layer itself.
            install_snapshot_timeout: 60_000,
            // Pre-vote: a node cut off and back does not disturb a leader
            // with a higher term.
            enable_pre_vote: Some(true),
            // A member that lost its disk and comes back empty gets a
            // snapshot instead of stopping the leader (openraft's default
            // treats it as a bug and panics). What it had acknowledged
            // may have counted towards a commit: docs/CLUSTER.md says
            // when to replace such a member instead.
            allow_log_reversion: Some(true),
            ..Default::default()
        };
        c.validate()
            .map_err(|e| Error::InvalidArgument(format!("Raft configuration: {e}")))
    }
}

/// The default heartbeat: elections after 0.3 to 0.6 s without one. On a
/// loaded 2-core machine shorter timeouts caused elections for nothing.
pub const DEFAULT_HEARTBEAT_MS: u64 = 100;

/// Elections after this many heartbeat intervals without one, at least...
pub const ELECTION_TIMEOUT_MIN_HEARTBEATS: u64 = 3;
/// ...and at most: also how long a leader may go without hearing from a
/// majority before it steps down.
pub const ELECTION_TIMEOUT_MAX_HEARTBEATS: u64 = 6;

/// A node is ready while it has applied all but this many committed
/// entries.
pub const DEFAULT_READY_MAX_LAG: u64 = 1000;

/// The running openraft instance and its tasks (replaced as a whole when
/// `cluster init` restarts it).
struct Running {
    raft: Raft,
    /// The store as Raft's storage holds it, released when Raft stops.
    store: StoreRef,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

pub struct RaftNode {
    cfg: NodeConfig,
    t: Arc<Treelog>,
    pub(crate) metrics: Option<Arc<RaftMetrics>>,
    pub(crate) leadership: Leadership,
    snapshots: Arc<Snapshots>,
    pub(crate) receiver: Receiver,
    /// The peers' feature levels and the cluster's.
    pub features: Arc<FeatureLevels>,
    running: tokio::sync::RwLock<Option<Running>>,
}

impl RaftNode {
    /// Starts the node on `t` (opened with `NodeRole::Consensus`).
    pub async fn start(t: Arc<Treelog>, cfg: NodeConfig) -> Result<Arc<RaftNode>> {
        // What the other nodes dial: a host name is resolved at each
        // connect, so only its form is checked here.
        treelog_client::Endpoint::parse(&cfg.addr)
            .map(|_| ())
            .map_err(|e| {
                Error::InvalidArgument(format!("node {}'s advertised address: {e}", cfg.id))
            })?;
        let metrics = match t.metrics() {
            Some(m) => Some(Arc::new(RaftMetrics::register(m.registry()).map_err(
                |e| Error::InvalidArgument(format!("cannot register Raft metrics: {e}")),
            )?)),
            None => None,
        };
        let gauge = metrics.as_ref().map(|m| m.cluster_feature_level.clone());
        let node = Arc::new(RaftNode {
            features: Arc::new(FeatureLevels::new(cfg.id, gauge)),
            receiver: Receiver::new(t.store().path()),
            cfg,
            t,
            metrics,
            snapshots: Arc::default(),
            leadership: Leadership::default(),
            running: tokio::sync::RwLock::new(None),
        });
        let running = node.run().await?;
        *node.running.write().await = Some(running);
        Ok(node)
    }

    async fn run(self: &Arc<Self>) -> Result<Running> {
        let config = Arc::new(self.cfg.raft_config()?);
        let store = StoreRef::new(self.t.clone());
        let log = LogStore::new(store.clone(), self.cfg.durability, self.metrics.clone())
            .map_err(Error::Io)?;
        let sm = StateMachine::new(store.clone(), self.snapshots.clone(), self.metrics.clone());
        let network = Network::new(
            self.cfg.id,
            self.cfg.token.clone(),
            self.cfg.faults.clone(),
            self.features.clone(),
        )
        .with_tls(self.cfg.tls.clone())
        .with_metrics(self.metrics.clone());
        let raft = Raft::new(self.cfg.id, config, network, log, sm)
            .await
            .map_err(|e| Error::InvalidArgument(format!("starting Raft: {e}")))?;
        let (proposer, writes) = RaftProposer::start(raft.clone(), self.metrics.clone());
        let watch = tokio::spawn(crate::leadership::watch(
            Arc::downgrade(self),
            raft.clone(),
            proposer.clone(),
        ));
        Ok(Running {
            raft,
            store,
            tasks: vec![writes, watch],
        })
    }

    pub fn id(&self) -> NodeId {
        self.cfg.id
    }

    pub fn store(&self) -> &Arc<Treelog> {
        &self.t
    }

    pub fn config(&self) -> &NodeConfig {
        &self.cfg
    }

    /// The openraft instance (`Fatal` once the node shut down).
    pub async fn raft(&self) -> Result<Raft> {
        self.running
            .read()
            .await
            .as_ref()
            .map(|r| r.raft.clone())
            .ok_or(Error::ShuttingDown)
    }

    /// The openraft instance, without waiting (`Busy` while `cluster
    /// init` restarts it).
    pub fn raft_now(&self) -> Result<Raft> {
        self.running
            .try_read()
            .ok()
            .and_then(|r| r.as_ref().map(|r| r.raft.clone()))
            .ok_or_else(|| Error::Busy("Raft is restarting".into()))
    }

    /// Stops Raft (the store stays open).
    pub async fn shutdown(&self) {
        if let Some(r) = self.running.write().await.take() {
            stop(r).await;
        }
    }

    /// Makes a cluster of this one node, with what its log holds: a
    /// membership entry after the log's last record, with this node as the
    /// only voter. Raft restarts on it and elects this node.
    pub async fn init(self: &Arc<Self>) -> Result<()> {
        let mut running = self.running.write().await;
        let log = crate::log_store::RaftLog::new(&self.t);
        if log.vote()?.is_some() {
            return Err(Error::AlreadyExists(format!(
                "node {} is already a member of a cluster",
                self.cfg.id
            )));
        }
        let last = log.last()?.map_or(0, |(s, _)| s);
        let applied = self.t.committed_seq();
        if last != applied {
            return Err(Error::InvalidArgument(format!(
                "the log ends at {last} but the index is at {applied}: not a single node's store"
            )));
        }
        if let Some(r) = running.take() {
            stop(r).await;
        }
        let membership = Membership::new(
            vec![BTreeSet::from([self.cfg.id])],
            BTreeMap::from([(
                self.cfg.id,
                Node {
                    addr: self.cfg.addr.clone(),
                },
            )]),
        )
        .map_err(|e| Error::InvalidArgument(e.to_string()))?;
        // Raft reads nothing up to the last record: a node that joins gets
        // a snapshot (and with it the namespace), never the records of a
        // single node's history. (A single node's records are term 0; a
        // restored backup of a cluster's node keeps its entries' terms.)
        let upto = self
            .t
            .replication()
            .applied()?
            .applied
            .unwrap_or(RaftLogId {
                term: 0,
                node: 0,
                index: 0,
            });
        debug_assert_eq!(upto.index, last);
        log.init_purged(&upto)?;
        let entry = Entry {
            log_id: log_id(0, 0, last + 1),
            payload: openraft::EntryPayload::Membership(membership),
        };
        log.append(&[(last + 1, encode_entry(&entry).map_err(Error::Io)?)])?;
        log.sync()?;
        tracing::info!(node = self.cfg.id, addr = %self.cfg.addr, seq = last + 1, "initialized a cluster");
        let r = self.run().await?;
        let raft = r.raft.clone();
        *running = Some(r);
        drop(running);
        // Answered once this node leads its cluster of one (the next
        // command, an add-learner, needs a leader).
        let wait = Duration::from_millis(self.cfg.heartbeat_ms * 100);
        raft.wait(Some(wait))
            .state(ServerState::Leader, "the new cluster's first leader")
            .await
            .map_err(|e| Error::Busy(format!("the node did not lead within {wait:?}: {e}")))?;
        // And once its membership is committed (with the leader's first
        // entry): a membership change waits for the one before it.
        tokio::time::timeout(wait, raft.ensure_linearizable(ReadPolicy::ReadIndex))
            .await
            .map_err(|_| {
                Error::Busy(format!(
                    "the cluster's membership not committed within {wait:?}"
                ))
            })?
            .map_err(|e| Error::Busy(format!("the cluster's membership: {e}")))?;
        Ok(())
    }

    /// Adds `node` at `addr` as a learner; with `wait`, once it caught up.
    pub async fn add_learner(&self, node: NodeId, addr: String, wait: bool) -> Result<()> {
        // Kept as given (a host name is resolved at each connect).
        treelog_client::Endpoint::parse(&addr)
            .map(|_| ())
            .map_err(|e| Error::InvalidArgument(format!("node {node}'s address: {e}")))?;
        let raft = self.raft().await?;
        raft.add_learner(node, Node { addr }, wait)
            .await
            .map_err(|e| write_error(e.to_string(), e.forward_to_leader()))?;
        Ok(())
    }

    /// Makes `nodes` (learners) voters.
    pub async fn promote(&self, nodes: Vec<NodeId>) -> Result<()> {
        let raft = self.raft().await?;
        raft.change_membership(
            ChangeMembers::AddVoterIds(nodes.into_iter().collect()),
            true,
        )
        .await
        .map_err(|e| write_error(e.to_string(), e.forward_to_leader()))?;
        Ok(())
    }

    /// Removes `nodes` (voters become learners first, then go).
    pub async fn remove(&self, nodes: Vec<NodeId>) -> Result<()> {
        let raft = self.raft().await?;
        let ids: BTreeSet<NodeId> = nodes.into_iter().collect();
        raft.change_membership(ChangeMembers::RemoveVoters(ids.clone()), false)
            .await
            .map_err(|e| write_error(e.to_string(), e.forward_to_leader()))?;
        raft.change_membership(ChangeMembers::RemoveNodes(ids), false)
            .await
            .map_err(|e| write_error(e.to_string(), e.forward_to_leader()))?;
        Ok(())
    }

    /// Asks the leader (this node) to hand leadership to `to`.
    pub async fn transfer_leader(&self, to: NodeId) -> Result<()> {
        let raft = self.raft().await?;
        if !raft.is_leader() {
            return Err(self.not_leader().await);
        }
        raft.trigger()
            .transfer_leader(to)
            .await
            .map_err(|e| Error::InvalidArgument(e.to_string()))
    }

    /// Builds a snapshot now.
    pub async fn snapshot(&self) -> Result<()> {
        let raft = self.raft().await?;
        raft.trigger()
            .snapshot()
            .await
            .map_err(|e| Error::InvalidArgument(e.to_string()))
    }

    /// `NotLeader`, naming the leader this node knows.
    pub async fn not_leader(&self) -> Error {
        Error::NotLeader {
            leader: self.leader_addr().await,
        }
    }

    /// The leader's RPC address, when this node knows it.
    pub async fn leader_addr(&self) -> Option<String> {
        let raft = self.raft().await.ok()?;
        let m = raft.metrics().borrow_watched().clone();
        self.view(&m).leader_addr
    }

    /// The leadership as this node reports it (check-quorum applied).
    pub(crate) fn view(&self, m: &crate::leadership::Metrics) -> crate::leadership::View {
        crate::leadership::view(m, self.leadership.without_quorum())
    }

    /// Why this node should not take traffic yet (`/readyz`), or `None`.
    pub fn not_ready(&self) -> Option<String> {
        let raft = match self.raft_now() {
            Ok(r) => r,
            Err(e) => return Some(e.to_string()),
        };
        let m = raft.metrics().borrow_watched().clone();
        crate::leadership::not_ready(self, &m, self.cfg.ready_max_lag)
    }

    /// This node's view of the cluster.
    pub async fn status(&self) -> Result<ClusterStatus> {
        let raft = self.raft().await?;
        let m = raft.metrics().borrow_watched().clone();
        let membership = m.membership_config.membership();
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        let last = m.last_log_index.unwrap_or(0);
        let members = membership
            .nodes()
            .map(|(id, n)| {
                let matched = m
                    .replication
                    .as_ref()
                    .and_then(|r| r.get(id))
                    .map(|l| l.as_ref().map_or(0, |l| l.index));
                ClusterMember {
                    node: *id,
                    addr: n.addr.clone(),
                    voter: voters.contains(id),
                    matched,
                    lag: matched.map(|x| last.saturating_sub(x)),
                }
            })
            .collect();
        let idx = |l: &Option<crate::types::LogId>| l.as_ref().map(|l| l.index);
        let v = self.view(&m);
        Ok(ClusterStatus {
            node: self.cfg.id,
            state: v.state.into(),
            term: m.current_term,
            leader: v.leader,
            leader_addr: v.leader_addr,
            members,
            last_log: m.last_log_index,
            committed: idx(&m.local_committed),
            applied: idx(&m.last_applied),
            snapshot: idx(&m.snapshot),
            purged: idx(&m.purged),
        })
    }
}

async fn stop(r: Running) {
    let _ = r.raft.shutdown().await;
    r.store.release().await;
    for t in &r.tasks {
        t.abort();
    }
    // Gone once they end: what they hold (the store) is released.
    for t in r.tasks {
        let _ = t.await;
    }
}

/// The error of a membership change or other write that Raft refused.
fn write_error(
    msg: String,
    forward: Option<&openraft::errors::ForwardToLeader<TypeConfig>>,
) -> Error {
    match forward {
        Some(f) => Error::NotLeader {
            leader: f.leader_node.as_ref().map(|n| n.addr.clone()),
        },
        None => Error::InvalidArgument(msg),
    }
}
