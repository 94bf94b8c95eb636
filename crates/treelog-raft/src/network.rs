//! Raft's messages between nodes, over treelog's own protocol: a request
//! `Raft { rpc, payload }` on the RPC port (the same handshake, token and
//! limits as every client), the payload the postcard encoding of openraft's
//! request, the reply its response (docs/PROTOCOL.md §15).
//!
//! [`Faults`] drops or delays the messages between chosen nodes, for the
//! tests' partitions (in-process: every node of a test shares one).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::errors::{NetworkError, RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory, RaftNetworkV2};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use treelog::error::Error;
use treelog_client::{Client, ClientOptions, ClientTls};
use treelog_proto::protocol::{RaftRpc, RequestBody, ResponseBody};

use crate::features::{self, FeatureLevels};
use crate::metrics::RaftMetrics;
use crate::snapshot::{SnapshotBegin, SnapshotChunk, SnapshotEnd, CHUNK_BYTES};
use crate::state_machine::SnapshotData;
use crate::types::{Node, NodeId, TypeConfig, Vote};

use crate::state_machine::Snapshot;

/// Messages dropped or delayed between chosen nodes (tests' partitions).
#[derive(Debug, Default)]
pub struct Faults {
    /// (from, to) pairs whose messages are dropped.
    blocked: Mutex<HashSet<(NodeId, NodeId)>>,
    delayed: Mutex<HashMap<(NodeId, NodeId), Duration>>,
}

impl Faults {
    pub fn new() -> Arc<Faults> {
        Arc::default()
    }

    /// Cuts `group` off from every other node of `all`, both ways.
    pub fn partition(&self, group: &[NodeId], all: &[NodeId]) {
        let mut b = self.blocked.lock().unwrap_or_else(|p| p.into_inner());
        for &a in group {
            for &o in all.iter().filter(|o| !group.contains(o)) {
                b.insert((a, o));
                b.insert((o, a));
            }
        }
    }

    /// Drops the messages from `from` to `to` (one way).
    pub fn block(&self, from: NodeId, to: NodeId) {
        self.blocked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((from, to));
    }

    /// Delays every message from `from` to `to`.
    pub fn delay(&self, from: NodeId, to: NodeId, by: Duration) {
        self.delayed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((from, to), by);
    }

    /// Lets every message through again.
    pub fn heal(&self) {
        self.blocked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.delayed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    async fn pass(&self, from: NodeId, to: NodeId) -> Result<(), Unreachable<TypeConfig>> {
        let delay = self
            .delayed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(from, to))
            .copied();
        if let Some(d) = delay {
            tokio::time::sleep(d).await;
        }
        let blocked = self
            .blocked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&(from, to));
        if blocked {
            return Err(Unreachable::from_string(format!(
                "partitioned: {from} -> {to}"
            )));
        }
        Ok(())
    }
}

/// Makes a connection per peer for openraft.
#[derive(Clone)]
pub struct Network {
    me: NodeId,
    token: Option<String>,
    tls: Option<Arc<ClientTls>>,
    faults: Option<Arc<Faults>>,
    metrics: Option<Arc<RaftMetrics>>,
    features: Arc<FeatureLevels>,
}

impl Network {
    pub fn new(
        me: NodeId,
        token: Option<String>,
        faults: Option<Arc<Faults>>,
        features: Arc<FeatureLevels>,
    ) -> Network {
        Network {
            me,
            token,
            tls: None,
            faults,
            metrics: None,
            features,
        }
    }

    /// Connects to the peers over TLS (see `NodeConfig::tls`).
    pub fn with_tls(mut self, tls: Option<Arc<ClientTls>>) -> Network {
        self.tls = tls;
        self
    }

    pub fn with_metrics(mut self, metrics: Option<Arc<RaftMetrics>>) -> Network {
        self.metrics = metrics;
        self
    }

    pub(crate) fn peer(&self, target: NodeId, addr: &str) -> Peer {
        Peer {
            me: self.me,
            target,
            addr: addr.to_owned(),
            token: self.token.clone(),
            tls: self.tls.clone(),
            faults: self.faults.clone(),
            metrics: self.metrics.clone(),
            features: self.features.clone(),
            client: None,
        }
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &Node) -> Peer {
        self.peer(target, &node.addr)
    }
}

/// One peer's connection (made on first use, again after it broke).
pub struct Peer {
    me: NodeId,
    target: NodeId,
    addr: String,
    token: Option<String>,
    tls: Option<Arc<ClientTls>>,
    faults: Option<Arc<Faults>>,
    metrics: Option<Arc<RaftMetrics>>,
    features: Arc<FeatureLevels>,
    client: Option<Client>,
}

/// Why a message did not get an answer.
enum CallError {
    /// Not sent, or no answer: the peer may be down.
    Unreachable(String),
    /// The peer answered with an error.
    Remote(String),
    /// The peer refused: it does not lead (naming whom it knows).
    NotLeader(Option<String>),
}

impl Peer {
    /// The leader's read index (this peer is the leader, as far as the
    /// asking node knows): `NotLeader` when it is not (naming whom it
    /// knows), `Busy` when it cannot be reached or does not answer.
    pub(crate) async fn read_index(&mut self, ttl: Duration) -> treelog::Result<u64> {
        self.call::<_, u64>(RaftRpc::ReadIndex, &(), ttl)
            .await
            .map_err(|e| match e {
                CallError::NotLeader(leader) => Error::NotLeader { leader },
                CallError::Unreachable(m) | CallError::Remote(m) => Error::Busy(format!(
                    "the read index of node {} at {}: {m}",
                    self.target, self.addr
                )),
            })
    }

    async fn client(&mut self) -> Result<Client, CallError> {
        if let Some(c) = &self.client {
            return Ok(c.clone());
        }
        // Resolved at every connect: a peer named by host name may have
        // moved to another address since.
        let connect = Client::connect_to(
            &self.addr,
            ClientOptions {
                token: self.token.clone(),
                tls: self.tls.clone(),
                connect_timeout: Duration::from_secs(1),
                ..Default::default()
            },
        );
        let c = tokio::time::timeout(Duration::from_secs(3), connect)
            .await
            .map_err(|_| {
                CallError::Unreachable(format!(
                    "connecting to node {} at {} timed out",
                    self.target, self.addr
                ))
            })?
            .map_err(|e| {
                CallError::Unreachable(format!(
                    "connecting to node {} at {}: {e}",
                    self.target, self.addr
                ))
            })?;
        self.client = Some(c.clone());
        Ok(c)
    }

    /// Sends `req` as `rpc` and decodes the answer (openraft's `Result`);
    /// the peer's feature level is what its answer's trailer says.
    async fn call<Req: Serialize, Resp: DeserializeOwned>(
        &mut self,
        rpc: RaftRpc,
        req: &Req,
        ttl: Duration,
    ) -> Result<Resp, CallError> {
        let r = self.exchange(rpc, req, ttl).await;
        match &r {
            Err(CallError::Unreachable(_)) => self.features.lost(self.target),
            Ok((_, t)) => self.features.heard(self.target, t.as_ref()),
            Err(CallError::Remote(_) | CallError::NotLeader(_)) => {}
        }
        r.and_then(|(resp, _)| resp.map_err(CallError::Remote))
    }

    /// One message and its answer, with their trailers (`features`).
    #[allow(clippy::type_complexity)]
    async fn exchange<Req: Serialize, Resp: DeserializeOwned>(
        &mut self,
        rpc: RaftRpc,
        req: &Req,
        ttl: Duration,
    ) -> Result<(Result<Resp, String>, Option<features::Trailer>), CallError> {
        if let Some(f) = &self.faults {
            f.pass(self.me, self.target)
                .await
                .map_err(|e| CallError::Unreachable(e.to_string()))?;
        }
        let payload =
            postcard::to_stdvec(req).map_err(|e| CallError::Remote(format!("encoding: {e}")))?;
        let payload = features::with_trailer(payload, &self.features.trailer());
        let client = self.client().await?;
        let reply =
            tokio::time::timeout(ttl, client.call(RequestBody::Raft { rpc, payload })).await;
        let reply = match reply {
            Err(_) => {
                // Its answer may still come: a connection of its own for
                // the next one.
                self.client = None;
                return Err(CallError::Unreachable(format!(
                    "node {} did not answer {rpc:?} within {ttl:?}",
                    self.target
                )));
            }
            Ok(Err(Error::NotLeader { leader })) => return Err(CallError::NotLeader(leader)),
            Ok(Err(e)) => {
                if matches!(
                    e,
                    Error::Protocol(_) | Error::Io(_) | Error::DeadlineExceeded(_)
                ) {
                    self.client = None;
                    return Err(CallError::Unreachable(e.to_string()));
                }
                return Err(CallError::Remote(e.to_string()));
            }
            Ok(Ok(r)) => r,
        };
        if let Some(f) = &self.faults {
            // A partition drops the answer too.
            f.pass(self.target, self.me)
                .await
                .map_err(|e| CallError::Unreachable(e.to_string()))?;
        }
        match reply {
            ResponseBody::Raft(bytes) => features::split::<Result<Resp, String>>(&bytes)
                .map_err(|e| CallError::Remote(format!("decoding the answer: {e}"))),
            other => Err(CallError::Remote(format!("unexpected answer {other:?}"))),
        }
    }
}

impl CallError {
    fn not_leader(leader: Option<String>) -> String {
        match leader {
            Some(l) => format!("not the leader (the leader is at {l})"),
            None => "not the leader".into(),
        }
    }
}

fn rpc_error(e: CallError) -> RPCError<TypeConfig> {
    match e {
        CallError::Unreachable(m) => RPCError::Unreachable(Unreachable::from_string(m)),
        CallError::Remote(m) => RPCError::Network(NetworkError::from_string(m)),
        CallError::NotLeader(l) => {
            RPCError::Network(NetworkError::from_string(CallError::not_leader(l)))
        }
    }
}

fn streaming_error(e: CallError) -> StreamingError<TypeConfig> {
    match e {
        CallError::Unreachable(m) => StreamingError::Unreachable(Unreachable::from_string(m)),
        CallError::Remote(m) => StreamingError::Network(NetworkError::from_string(m)),
        CallError::NotLeader(l) => {
            StreamingError::Network(NetworkError::from_string(CallError::not_leader(l)))
        }
    }
}

/// The most bytes of entries one `AppendEntries` message carries: a larger
/// request goes as several, each continuing the last.
const MAX_APPEND_BYTES: usize = 4 << 20;

/// Splits `rpc` into requests of at most [`MAX_APPEND_BYTES`] of entries
/// (a single larger entry goes alone), each continuing the one before.
fn split_append(rpc: AppendEntriesRequest<TypeConfig>) -> Vec<AppendEntriesRequest<TypeConfig>> {
    let size = |e: &crate::types::Entry| match &e.payload {
        openraft::EntryPayload::Normal(b) => b.body.len() + 64,
        _ => 256,
    };
    if rpc.entries.iter().map(size).sum::<usize>() <= MAX_APPEND_BYTES {
        return vec![rpc];
    }
    let AppendEntriesRequest {
        vote,
        prev_log_id,
        leader_commit,
        entries,
    } = rpc;
    let mut out = Vec::new();
    let mut prev = prev_log_id;
    let mut part = Vec::new();
    let mut bytes = 0;
    for e in entries {
        let s = size(&e);
        if !part.is_empty() && bytes + s > MAX_APPEND_BYTES {
            let last = part.last().map(|e: &crate::types::Entry| e.log_id);
            out.push(AppendEntriesRequest {
                vote,
                prev_log_id: prev,
                leader_commit,
                entries: std::mem::take(&mut part),
            });
            prev = last;
            bytes = 0;
        }
        bytes += s;
        part.push(e);
    }
    out.push(AppendEntriesRequest {
        vote,
        prev_log_id: prev,
        leader_commit,
        entries: part,
    });
    out
}

impl RaftNetworkV2<TypeConfig> for Peer {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        let parts = split_append(rpc);
        let n = parts.len();
        let mut last = None;
        for (i, part) in parts.into_iter().enumerate() {
            let resp: AppendEntriesResponse<TypeConfig> = self
                .call(RaftRpc::AppendEntries, &part, option.hard_ttl())
                .await
                .map_err(rpc_error)?;
            // A part that did not fully succeed answers for the whole.
            let whole = matches!(resp, AppendEntriesResponse::Success);
            if !whole || i + 1 == n {
                if i > 0 && !whole {
                    // The parts before it were appended: what the follower
                    // matched is their last entry.
                    if let AppendEntriesResponse::Conflict = resp {
                        return Ok(AppendEntriesResponse::PartialSuccess(last));
                    }
                }
                return Ok(resp);
            }
            last = part.entries.last().map(|e| e.log_id);
        }
        Ok(AppendEntriesResponse::Success)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(RaftRpc::Vote, &rpc, option.hard_ttl())
            .await
            .map_err(rpc_error)
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(RaftRpc::PreVote, &rpc, option.hard_ttl())
            .await
            .map_err(rpc_error)
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl std::future::Future<Output = ReplicationClosed> + openraft::OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let served = snapshot.snapshot.clone();
        let manifest_bytes = served
            .manifest_bytes()
            .map_err(|e| StreamingError::Network(NetworkError::new(&e)))?;
        let manifest =
            treelog::backup::Manifest::decode(&manifest_bytes, std::path::Path::new("snapshot"))
                .map_err(|e| StreamingError::Network(NetworkError::from_string(e)))?;
        let id = snapshot
            .meta
            .last_log_id
            .as_ref()
            .map(|l| l.to_string())
            .unwrap_or_default();
        let ttl = option.hard_ttl().max(Duration::from_secs(10));
        let send = async {
            self.call::<_, ()>(
                RaftRpc::SnapshotBegin,
                &SnapshotBegin {
                    vote,
                    id: id.clone(),
                    manifest: manifest_bytes.clone(),
                },
                ttl,
            )
            .await
            .map_err(streaming_error)?;
            for f in manifest.files.clone() {
                let mut offset = 0u64;
                while offset < f.size {
                    let (s, name) = (served.clone(), f.name.clone());
                    let (data, crc) = tokio::task::spawn_blocking(move || {
                        s.read_chunk(&name, offset, CHUNK_BYTES)
                    })
                    .await
                    .map_err(|e| StreamingError::Network(NetworkError::from_string(e)))?
                    .map_err(|e| StreamingError::Network(NetworkError::new(&e)))?;
                    let len = data.len() as u64;
                    self.call::<_, ()>(
                        RaftRpc::SnapshotChunk,
                        &SnapshotChunk {
                            id: id.clone(),
                            file: f.name.clone(),
                            offset,
                            data,
                            crc32c: crc,
                        },
                        ttl,
                    )
                    .await
                    .map_err(streaming_error)?;
                    offset += len;
                    if len == 0 {
                        break;
                    }
                }
            }
            // Installing checks every file and the digest, then replaces
            // the index: give it time.
            self.call::<_, SnapshotResponse<TypeConfig>>(
                RaftRpc::SnapshotEnd,
                &SnapshotEnd {
                    id: id.clone(),
                    vote,
                    meta: snapshot.meta.clone(),
                },
                ttl * 30,
            )
            .await
            .map_err(streaming_error)
        };
        let started = std::time::Instant::now();
        let r = tokio::select! {
            r = send => r,
            closed = cancel => Err(StreamingError::Closed(closed)),
        };
        if let (Ok(_), Some(m)) = (&r, &self.metrics) {
            m.snapshot_sent(started.elapsed());
        }
        r
    }

    async fn transfer_leader(
        &mut self,
        req: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(RaftRpc::TransferLeader, &req, option.hard_ttl())
            .await
            .map_err(rpc_error)
    }
}
