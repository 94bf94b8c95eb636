//! Who leads, as this node reports it, and the task that acts on it: it
//! tells the store's writer to lead or follow, steps a leader down when it
//! stops hearing a quorum (check-quorum), and keeps the metrics current.
//!
//! openraft keeps a leader that lost its majority in the leader state (it
//! only refuses new proposals once its lease runs out, and resumes when a
//! majority answers again). The cluster would then report two leaders for
//! as long as a partition lasts. So a leader that has not heard from a
//! majority within an election timeout is reported here as a follower that
//! knows no leader, and its writer follows: writes and reads are refused
//! (`NotLeader`, naming no one) until a majority answers it again or it
//! hears of the new leader.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use openraft::async_runtime::WatchReceiver;
use openraft::{Instant as _, ReadPolicy, ServerState};
use treelog::format::record::LeaderTag;

use crate::node::RaftNode;
use crate::proposer::{LeaderProposer, RaftProposer, OUTCOME_WAIT};
use crate::state_machine::Raft;
use crate::types::{NodeId, TypeConfig};

pub(crate) type Metrics = openraft::RaftMetrics<TypeConfig>;

/// What the leadership task last concluded (read by status, readiness,
/// the read index).
#[derive(Default)]
pub(crate) struct Leadership {
    /// openraft says this node leads, but no majority acknowledged it
    /// within an election timeout.
    without_quorum: AtomicBool,
    /// The store's writer leads (the term's first entry is applied).
    leading: AtomicBool,
}

impl Leadership {
    pub(crate) fn without_quorum(&self) -> bool {
        self.without_quorum.load(Ordering::Acquire)
    }

    pub(crate) fn leading(&self) -> bool {
        self.leading.load(Ordering::Acquire)
    }
}

/// The leadership as this node reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct View {
    pub state: &'static str,
    pub leader: Option<NodeId>,
    /// The leader's advertised address (from the membership).
    pub leader_addr: Option<String>,
    /// openraft's leader state, with a quorum heard within the lease.
    pub is_leader: bool,
}

/// The address `id` advertises in the membership `m` knows.
pub(crate) fn addr_of(m: &Metrics, id: NodeId) -> Option<String> {
    m.membership_config
        .membership()
        .get_node(&id)
        .map(|n| n.addr.clone())
}

/// `m` as reported, `without_quorum` applied.
pub(crate) fn view(m: &Metrics, without_quorum: bool) -> View {
    if m.state == ServerState::Leader && without_quorum {
        return View {
            state: "follower",
            leader: None,
            leader_addr: None,
            is_leader: false,
        };
    }
    View {
        state: crate::metrics::state_name(m),
        leader: m.current_leader,
        leader_addr: m.current_leader.and_then(|id| addr_of(m, id)),
        is_leader: m.state == ServerState::Leader,
    }
}

/// How long a leader may go without a majority's acknowledgement: the
/// election timeout (openraft's lease is the same).
pub(crate) fn quorum_lease(heartbeat_ms: u64) -> Duration {
    Duration::from_millis(heartbeat_ms * crate::node::ELECTION_TIMEOUT_MAX_HEARTBEATS)
}

/// How long since a majority last acknowledged this leader (`since`: when
/// this task saw it become leader, for before the first acknowledgement);
/// `None` when it is the only voter (it is its own majority).
fn quorum_silence(m: &Metrics, me: NodeId, since: Instant) -> Option<Duration> {
    let voters: Vec<NodeId> = m.membership_config.membership().voter_ids().collect();
    if voters.len() <= 1 && voters.contains(&me) {
        return None;
    }
    Some(match &m.last_quorum_acked {
        Some(t) => t.elapsed().min(since.elapsed()),
        None => since.elapsed(),
    })
}

/// Tells the store's writer to lead or follow as the reported leadership
/// changes, keeps the metrics current, steps a leader down without a
/// quorum, and answers the callers of a lost leadership's unsettled entries
/// once they have waited long enough.
pub(crate) async fn watch(weak: Weak<RaftNode>, raft: Raft, proposer: Arc<RaftProposer>) {
    let mut rx = raft.metrics();
    let mut leading: Option<LeaderTag> = None;
    // What the writer was last told while following (the leader's address).
    let mut following: Option<Option<String>> = None;
    let (mut last_term, mut last_leader) = (None, None);
    let mut lost_at: Option<Instant> = None;
    // The vote under which this node was seen leading, and since when.
    let mut leader_since: Option<(crate::types::Vote, Instant)> = None;
    loop {
        let Some(node) = weak.upgrade() else { return };
        let m = rx.borrow_watched().clone();
        let me = node.id();
        let lease = quorum_lease(node.config().heartbeat_ms);
        let openraft_leader =
            m.state == ServerState::Leader && m.vote.committed && m.vote.leader_id.node_id == me;
        let silence = if openraft_leader {
            let since = match &leader_since {
                Some((v, at)) if *v == m.vote => *at,
                _ => {
                    let now = Instant::now();
                    leader_since = Some((m.vote, now));
                    now
                }
            };
            quorum_silence(&m, me, since)
        } else {
            leader_since = None;
            None
        };
        let without_quorum = silence.is_some_and(|s| s > lease);
        let was = node
            .leadership
            .without_quorum
            .swap(without_quorum, Ordering::AcqRel);
        if without_quorum && !was {
            tracing::warn!(
                node = me,
                term = m.current_term,
                silence = ?silence,
                "no majority acknowledged this leader within the election timeout: stepping down"
            );
        } else if was && !without_quorum && openraft_leader {
            tracing::info!(
                node = me,
                term = m.current_term,
                "a majority answers again: leading"
            );
        }
        let v = view(&m, without_quorum);
        if let Some(x) = &node.metrics {
            x.refresh(&m, v.state, v.leader);
            if last_term.is_some_and(|t| t != m.current_term) {
                x.elections.inc();
            }
            if last_leader.is_some() && last_leader != Some(v.leader) {
                x.leader_changes.inc();
            }
        }
        last_term = Some(m.current_term);
        last_leader = Some(v.leader);
        node.features.set_members(
            m.membership_config
                .membership()
                .nodes()
                .map(|(id, _)| *id)
                .collect(),
            openraft_leader && !without_quorum,
        );
        if openraft_leader && !without_quorum {
            let tag = LeaderTag {
                term: m.vote.leader_id.term,
                node: me,
            };
            if leading != Some(tag) {
                // Everything committed before this leader's first entry is
                // applied once the read index is: the writer then validates
                // against all of it.
                // Bounded: a leader cut off from its majority never gets
                // the read index; look at its state again meanwhile.
                let barrier = tokio::time::timeout(
                    Duration::from_millis(node.config().heartbeat_ms * 10),
                    raft.ensure_linearizable(ReadPolicy::ReadIndex),
                )
                .await;
                match barrier {
                    Ok(Ok(_)) => {
                        let lead = Arc::new(LeaderProposer {
                            tag,
                            proposer: proposer.clone(),
                        });
                        if node.store().replication().lead(lead).await.is_ok() {
                            leading = Some(tag);
                            node.leadership.leading.store(true, Ordering::Release);
                            following = None;
                            lost_at = None;
                        }
                    }
                    Ok(Err(e)) => tracing::debug!(error = %e, "not leading yet"),
                    Err(_) => tracing::debug!("no read index yet: not leading yet"),
                }
                // Whatever happened, look at the state again.
                continue;
            }
        } else {
            let addr = v.leader_addr.clone();
            if (leading.is_some() || following.as_ref() != Some(&addr))
                && node
                    .store()
                    .replication()
                    .follow(addr.clone())
                    .await
                    .is_ok()
            {
                if leading.take().is_some() {
                    node.leadership.leading.store(false, Ordering::Release);
                    lost_at = Some(Instant::now());
                }
                following = Some(addr);
            }
        }
        let mut wait = match lost_at {
            Some(at) => OUTCOME_WAIT.saturating_sub(at.elapsed()),
            None => Duration::from_secs(3600),
        };
        if openraft_leader {
            // A leader's acknowledgements may stop without any change of
            // its metrics: look again every heartbeat.
            wait = wait.min(Duration::from_millis(node.config().heartbeat_ms.max(1)));
        }
        drop(node);
        tokio::select! {
            changed = rx.changed() => if changed.is_err() { return },
            _ = tokio::time::sleep(wait) => {
                if lost_at.is_some_and(|at| at.elapsed() >= OUTCOME_WAIT) {
                    lost_at = None;
                    let n = proposer.give_up_unsettled(
                        "this node stopped leading and the entry's fate is not known yet",
                    );
                    if n > 0 {
                        tracing::warn!(callers = n, "answered OutcomeUnknown: leadership was lost");
                        if let Some(m) = weak.upgrade().and_then(|n| n.metrics.clone()) {
                            m.outcome_unknown
                                .with_label_values(&["leadership_lost"])
                                .inc_by(n as u64);
                        }
                    }
                }
            }
        }
    }
}

/// Why this node should not take traffic yet (`/readyz`), or `None`.
pub(crate) fn not_ready(node: &RaftNode, m: &Metrics, max_lag: u64) -> Option<String> {
    let membership = m.membership_config.membership();
    if membership.get_node(&node.id()).is_none() {
        return Some(format!(
            "node {} is not a member of a cluster (yet): `cluster init` on the first node, \
             `cluster add-learner` on the leader for the others",
            node.id()
        ));
    }
    let v = view(m, node.leadership.without_quorum());
    if v.is_leader {
        if !node.leadership.leading() {
            return Some("elected leader: the term's first entry is not applied yet".into());
        }
    } else {
        if m.state == ServerState::Leader {
            return Some("no majority acknowledged this leader within the election timeout".into());
        }
        let Some(leader) = v.leader else {
            return Some("no leader is known (an election may be under way)".into());
        };
        if v.leader_addr.is_none() {
            return Some(format!(
                "the leader {leader}'s address is not known yet (catching up)"
            ));
        }
    }
    let idx = |l: &Option<crate::types::LogId>| l.as_ref().map_or(0, |l| l.index);
    let committed = idx(&m.cluster_committed).max(idx(&m.local_committed));
    let applied = idx(&m.last_applied);
    let lag = committed.saturating_sub(applied);
    if lag > max_lag {
        return Some(format!(
            "applied index {applied} is {lag} entries behind the commit index {committed} \
             (more than --ready-max-lag {max_lag})"
        ));
    }
    None
}
