//! Linearizable reads: the leader's read index, asked of the leader by a
//! node that is not it, and waited for until this node has applied it
//! (docs/CLUSTER.md, "Linearizable reads").
//!
//! A node that is asked for the read index but no longer leads answers
//! `NotLeader`, naming the leader it knows; the asking node then asks that
//! one (a few hops at most, within the read's wait), so that a leader
//! change under way does not fail the read. A leader that cannot be
//! reached fails the read at once (`Busy`, naming it): the read index needs
//! the leader.

use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use openraft::ReadPolicy;
use tokio::time::Instant;
use treelog::{Error, Result};

use crate::leadership::{addr_of, quorum_lease};
use crate::network::Network;
use crate::node::RaftNode;
use crate::state_machine::Raft;
use crate::types::{NodeId, TypeConfig};

/// Nodes asked in turn for one read index, when each names the next.
const MAX_HOPS: usize = 3;

/// The longest one node is given to answer the read index.
const ASK_WAIT: Duration = Duration::from_secs(5);

/// Whom to ask for the read index.
enum Target {
    /// This node leads.
    Me,
    /// The node at this address (its id when known).
    Other(Option<NodeId>, String),
}

impl RaftNode {
    /// The sequence a linearizable read must see: the leader's read index
    /// (asked of the leader when this node is not it), once this node has
    /// applied it.
    pub async fn read_index(&self) -> Result<u64> {
        let raft = self.raft().await?;
        let wait = self.store().min_seq_wait();
        let deadline = Instant::now() + wait;
        let seq = self.read_index_of_leader(&raft, deadline).await?;
        let wm = self.store().watermark();
        if tokio::time::timeout_at(deadline, wm.wait_for_async(seq))
            .await
            .is_err()
        {
            return Err(self.store().replication().not_caught_up(seq, wait));
        }
        Ok(seq)
    }

    async fn read_index_of_leader(&self, raft: &Raft, deadline: Instant) -> Result<u64> {
        let mut named: Option<String> = None;
        let mut asked: Vec<String> = Vec::new();
        for _ in 0..=MAX_HOPS {
            let target = match named.take() {
                Some(addr) if addr == self.config().addr => Target::Me,
                Some(addr) => Target::Other(None, addr),
                None => self.leader_target(raft, deadline).await?,
            };
            let refused = match target {
                Target::Me => match self.local_read_index(raft, deadline).await {
                    Ok(seq) => return Ok(seq),
                    Err(e) => e,
                },
                Target::Other(id, addr) => {
                    let network = Network::new(
                        self.id(),
                        self.config().token.clone(),
                        self.config().faults.clone(),
                        self.features.clone(),
                    )
                    .with_tls(self.config().tls.clone());
                    // The id only labels messages (and the tests' faults);
                    // a node named by address alone is looked up.
                    let id = id.or_else(|| self.id_of(raft, &addr)).unwrap_or(0);
                    let left = deadline.saturating_duration_since(Instant::now());
                    let mut peer = network.peer(id, &addr);
                    asked.push(addr);
                    match peer.read_index(left.min(ASK_WAIT)).await {
                        Ok(seq) => return Ok(seq),
                        Err(e) => e,
                    }
                }
            };
            match refused {
                // Another node leads now: ask it, unless it was asked
                // already (two nodes naming each other while an election
                // settles).
                Error::NotLeader { leader: Some(next) } if !asked.contains(&next) => {
                    named = Some(next)
                }
                Error::NotLeader { .. } => {
                    // No one named: wait a little for this node to hear of
                    // the new leader, then look again.
                    let hb = Duration::from_millis(self.config().heartbeat_ms.max(1));
                    if Instant::now() + hb >= deadline {
                        return Err(self.no_read_index("the read index: no leader answers"));
                    }
                    tokio::time::sleep(hb).await;
                }
                e => return Err(e),
            }
        }
        Err(self.no_read_index(&format!(
            "the read index: asked {} without finding the leader",
            asked.join(", ")
        )))
    }

    /// `Busy` for a read index not obtained, naming the leader this node
    /// knows.
    fn no_read_index(&self, why: &str) -> Error {
        let leader = self.raft_now().ok().and_then(|r| {
            let m = r.metrics().borrow_watched().clone();
            self.view(&m).leader_addr
        });
        Error::Busy(match leader {
            Some(l) => format!("{why} (this node knows the leader at {l})"),
            None => format!("{why} (this node knows no leader)"),
        })
    }

    /// The node id advertising `addr` in the membership this node knows.
    fn id_of(&self, raft: &Raft, addr: &str) -> Option<NodeId> {
        let m = raft.metrics().borrow_watched().clone();
        let id = m
            .membership_config
            .membership()
            .nodes()
            .find(|(_, n)| n.addr == addr)
            .map(|(id, _)| *id);
        id
    }

    /// The leader as this node knows it; waits (within `deadline`, and for
    /// at most two election timeouts) while none is known, or while its
    /// address is not (a node still catching up has not received the
    /// membership that names it).
    async fn leader_target(&self, raft: &Raft, deadline: Instant) -> Result<Target> {
        let lease = quorum_lease(self.config().heartbeat_ms);
        let until = deadline.min(Instant::now() + lease * 2);
        let mut rx = raft.metrics();
        loop {
            let m = rx.borrow_watched().clone();
            let v = self.view(&m);
            if v.is_leader {
                return Ok(Target::Me);
            }
            if let (Some(id), Some(addr)) = (v.leader, v.leader_addr.clone()) {
                return Ok(Target::Other(Some(id), addr));
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(match v.leader {
                    Some(id) => Error::Busy(format!(
                        "the leader {id}'s address is not known yet: this node is catching up"
                    )),
                    None => {
                        Error::Busy("no leader is known: a linearizable read waits for one".into())
                    }
                });
            }
            // Check-quorum's verdict changes without openraft's metrics:
            // look again at least every heartbeat.
            let tick = Duration::from_millis(self.config().heartbeat_ms.max(1));
            if let Ok(Err(_)) = tokio::time::timeout(left.min(tick), rx.changed()).await {
                return Err(Error::ShuttingDown);
            }
        }
    }

    /// The read index as the leader (this node).
    async fn local_read_index(&self, raft: &Raft, deadline: Instant) -> Result<u64> {
        if self.leadership.without_quorum() {
            return Err(Error::NotLeader { leader: None });
        }
        let r = tokio::time::timeout_at(deadline, raft.ensure_linearizable(ReadPolicy::ReadIndex))
            .await
            .map_err(|_| {
                Error::Busy("no read index in time: this leader may have lost its majority".into())
            })?
            .map_err(|e| match e.forward_to_leader() {
                Some(f) => self.forwarded(f),
                None => Error::Busy(format!("read index: {e}")),
            })?;
        Ok(r.log_id().index)
    }

    /// The leader's read index, for another node's linearizable read:
    /// `NotLeader` (naming the leader this node knows) when it does not
    /// lead, so that the asking node asks that one.
    pub async fn leader_read_index(&self) -> Result<u64> {
        let raft = self.raft().await?;
        let m = raft.metrics().borrow_watched().clone();
        let v = self.view(&m);
        if !v.is_leader {
            return Err(Error::NotLeader {
                leader: v.leader_addr,
            });
        }
        let wait = self.store().min_seq_wait();
        let (read, _applied) =
            tokio::time::timeout(wait, raft.get_read_log_id(ReadPolicy::ReadIndex))
                .await
                .map_err(|_| Error::Busy(format!("no read index within {wait:?}")))?
                .map_err(|e| match e.forward_to_leader() {
                    Some(f) => self.forwarded(f),
                    None => Error::Busy(format!("read index: {e}")),
                })?;
        Ok(read.log_id().index)
    }

    /// `NotLeader` for openraft's `ForwardToLeader`: the leader it names,
    /// else the one this node's metrics name (never this node itself).
    fn forwarded(&self, f: &openraft::errors::ForwardToLeader<TypeConfig>) -> Error {
        let named = f.leader_node.as_ref().map(|n| n.addr.clone()).or_else(|| {
            let r = self.raft_now().ok()?;
            let m = r.metrics().borrow_watched().clone();
            let id = f.leader_id.or(m.current_leader)?;
            addr_of(&m, id)
        });
        Error::NotLeader {
            leader: named.filter(|a| *a != self.config().addr),
        }
    }
}
