//! The node's side of the RPC port: the other nodes' Raft messages, the
//! cluster's administration and linearizable reads, as the server routes
//! them (`treelog_server::ClusterService`).

use openraft::async_runtime::WatchReceiver;
use std::sync::{Arc, Weak};

use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, TransferLeaderRequest, VoteRequest,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use treelog::{Command, Error, Result};
use treelog_proto::protocol::{ClusterRequest, ClusterStatus, RaftRpc, Role};
use treelog_server::{BoxFuture, ClusterService};

use crate::features::{self, Trailer};
use crate::node::RaftNode;
use crate::snapshot::{SnapshotBegin, SnapshotChunk, SnapshotEnd};
use crate::state_machine::SnapshotData;
use crate::types::TypeConfig;

/// Holds the node weakly: the server's slot must not keep the node (and
/// its store) alive once it shut down.
pub struct RaftService {
    pub node: Weak<RaftNode>,
}

/// The message, and the sender's trailer (`features`) after it.
fn decode<T: DeserializeOwned>(rpc: RaftRpc, payload: &[u8]) -> Result<(T, Option<Trailer>)> {
    features::split(payload)
        .map_err(|e| Error::InvalidArgument(format!("a {rpc:?} message does not decode: {e}")))
}

/// openraft's answer, or its error as text, encoded for the wire.
fn answer<T: Serialize, E: std::fmt::Display>(r: std::result::Result<T, E>) -> Result<Vec<u8>> {
    let r = r.map_err(|e| e.to_string());
    postcard::to_stdvec(&r).map_err(|e| Error::InvalidArgument(format!("encoding an answer: {e}")))
}

impl RaftService {
    fn node(&self) -> Result<Arc<RaftNode>> {
        self.node.upgrade().ok_or(Error::ShuttingDown)
    }

    /// A peer's message answered, this node's trailer after the answer.
    async fn raft_message(&self, rpc: RaftRpc, payload: Vec<u8>) -> Result<Vec<u8>> {
        let node = self.node()?;
        let reply = self.answer_message(&node, rpc, payload).await?;
        Ok(features::with_trailer(reply, &node.features.trailer()))
    }

    async fn answer_message(
        &self,
        node: &RaftNode,
        rpc: RaftRpc,
        payload: Vec<u8>,
    ) -> Result<Vec<u8>> {
        let raft = node.raft().await?;
        match rpc {
            RaftRpc::AppendEntries => {
                let (req, t): (AppendEntriesRequest<TypeConfig>, _) = decode(rpc, &payload)?;
                let r = raft.append_entries(req).await;
                if matches!(&r, Ok(a) if !matches!(a, AppendEntriesResponse::HigherVote(_))) {
                    // From the leader this node follows.
                    node.features.from_leader(t.as_ref());
                }
                answer(r)
            }
            RaftRpc::Vote => {
                let (req, _): (VoteRequest<TypeConfig>, _) = decode(rpc, &payload)?;
                answer(raft.vote(req).await)
            }
            RaftRpc::PreVote => {
                let (req, _): (VoteRequest<TypeConfig>, _) = decode(rpc, &payload)?;
                answer(raft.pre_vote(req).await)
            }
            RaftRpc::TransferLeader => {
                let (req, _): (TransferLeaderRequest<TypeConfig>, _) = decode(rpc, &payload)?;
                answer(raft.handle_transfer_leader(req).await)
            }
            RaftRpc::SnapshotBegin => {
                let (req, _): (SnapshotBegin, _) = decode(rpc, &payload)?;
                let current = raft.metrics().borrow_watched().vote;
                let r = node.receiver.begin(req, &current);
                answer(r)
            }
            RaftRpc::SnapshotChunk => {
                let (req, _): (SnapshotChunk, _) = decode(rpc, &payload)?;
                let r = node.receiver.chunk(req);
                answer(r)
            }
            RaftRpc::SnapshotEnd => {
                let (req, _): (SnapshotEnd, _) = decode(rpc, &payload)?;
                let current = raft.metrics().borrow_watched().vote;
                let dir = match node.receiver.end(&req.id, &req.vote, &current) {
                    Ok(d) => d,
                    Err(e) => return answer::<(), _>(Err(e)),
                };
                let snapshot = openraft::storage::Snapshot {
                    meta: req.meta,
                    snapshot: SnapshotData::Dir(dir),
                };
                answer(raft.install_full_snapshot(req.vote, snapshot).await)
            }
            // A refusal as the protocol's own error, not inside the answer:
            // the asking node then asks the leader it names (a node of an
            // earlier release sees an error either way).
            RaftRpc::ReadIndex => match node.leader_read_index().await {
                Err(e @ Error::NotLeader { .. }) => Err(e),
                r => answer(r),
            },
        }
    }

    async fn admin_request(&self, req: ClusterRequest) -> Result<ClusterStatus> {
        let n = &self.node()?;
        match req {
            ClusterRequest::Status => {}
            ClusterRequest::Init => n.init().await?,
            ClusterRequest::AddLearner { node, addr, wait } => {
                n.add_learner(node, addr, wait).await?
            }
            ClusterRequest::Promote { nodes } => n.promote(nodes).await?,
            ClusterRequest::Remove { nodes } => n.remove(nodes).await?,
            ClusterRequest::TransferLeader { node } => n.transfer_leader(node).await?,
            ClusterRequest::Snapshot => n.snapshot().await?,
        }
        n.status().await
    }
}

impl ClusterService for RaftService {
    fn raft(&self, rpc: RaftRpc, payload: Vec<u8>) -> BoxFuture<'_, Result<Vec<u8>>> {
        Box::pin(self.raft_message(rpc, payload))
    }

    fn admin(&self, req: ClusterRequest) -> BoxFuture<'_, Result<ClusterStatus>> {
        Box::pin(self.admin_request(req))
    }

    fn read_index(&self) -> BoxFuture<'_, Result<u64>> {
        Box::pin(async move { self.node()?.read_index().await })
    }

    fn admit(&self, cmd: &Command) -> Result<()> {
        // Only the leader's view counts: a follower answers NotLeader.
        match self.node.upgrade() {
            Some(n) if n.features.leading() => n.features.admit(cmd.feature_level(), cmd.name()),
            _ => Ok(()),
        }
    }

    fn role(&self) -> (Role, Option<String>) {
        let Some(node) = self.node.upgrade() else {
            return (Role::Follower, None);
        };
        let Ok(r) = node.raft_now() else {
            return (Role::Follower, None);
        };
        let m = r.metrics().borrow_watched().clone();
        let v = node.view(&m);
        let role = if v.is_leader {
            Role::Leader
        } else {
            Role::Follower
        };
        (role, v.leader_addr)
    }

    fn not_ready(&self) -> Option<String> {
        match self.node.upgrade() {
            Some(n) => n.not_ready(),
            None => Some("the node is stopping".into()),
        }
    }
}
