//! The leader's writer hands its records to Raft here (the store's
//! `treelog::replication::Proposer`). Each record becomes one Raft entry, written
//! under the leader that validated it (`with_leader`: after a change of
//! leader it is refused, never appended), and its caller is answered once
//! the entry is applied on this node, or with what became of it:
//!
//! | openraft says | the caller gets |
//! |---|---|
//! | applied | `Ok(seq)` |
//! | `ForwardToLeader` (not appended) | `NotLeader` (safe to retry) |
//! | `LogEntryDiscarded` (appended, then truncated or purged here) | `OutcomeUnknown`: another leader may still commit it |
//! | no answer within the bound after leadership is lost | `OutcomeUnknown` |
//! | not committed within [`COMMIT_WAIT`] (a leader cut off from its majority hears nothing) | `OutcomeUnknown` |
//!
//! A command decided against proposals not yet applied (a no-op, a
//! refusal) waits for the last of them and shares its fate.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openraft::errors::ClientWriteError;
use openraft::raft::ClientWriteResult;
use openraft::vote::RaftLeaderId;
use treelog::format::record::LeaderTag;
use treelog::replication::{Proposal, Proposer, ReplyTx};
use treelog::Error;

use crate::metrics::RaftMetrics;
use crate::types::{EntryBody, FnResponder, LeaderId, TypeConfig};

/// How an entry ended, for the commands waiting on it.
#[derive(Debug, Clone)]
enum Outcome {
    Applied(u64),
    NotLeader(Option<String>),
    Unknown(String),
}

impl Outcome {
    fn of(r: &ClientWriteResult<TypeConfig>) -> Outcome {
        match r {
            Ok(resp) => Outcome::Applied(resp.log_id.index),
            Err(ClientWriteError::ForwardToLeader(f)) => {
                Outcome::NotLeader(f.leader_node.as_ref().map(|n| n.addr.clone()))
            }
            Err(ClientWriteError::LogEntryDiscarded(_)) => Outcome::Unknown(
                "the entry was replaced in this node's log after it was appended: \
                 another leader may still commit it"
                    .into(),
            ),
            Err(e) => Outcome::Unknown(format!("the entry's outcome is unknown: {e}")),
        }
    }

    fn error(&self) -> Option<Error> {
        match self {
            Outcome::Applied(_) => None,
            Outcome::NotLeader(l) => Some(Error::NotLeader { leader: l.clone() }),
            Outcome::Unknown(m) => Some(Error::OutcomeUnknown(m.clone())),
        }
    }
}

/// One entry's fate, and who waits for it.
#[derive(Default)]
struct Slot {
    state: Mutex<SlotState>,
}

#[derive(Default)]
struct SlotState {
    outcome: Option<Outcome>,
    /// Commands that wait for this entry (no-ops and refusals decided
    /// against it): their reply and their own refusal.
    waiters: Vec<(ReplyTx, Option<Error>)>,
    /// The entry's own caller, until it is answered.
    caller: Option<treelog::replication::ProposalReply>,
}

fn answer(tx: ReplyTx, refusal: Option<Error>, outcome: &Outcome) {
    let r = match (outcome, refusal) {
        (Outcome::Applied(seq), None) => Ok(*seq),
        (Outcome::Applied(_), Some(e)) => Err(e),
        (o, _) => Err(o.error().expect("not applied")),
    };
    let _ = tx.send(r);
}

impl Slot {
    /// Settles the entry (the first outcome wins).
    fn settle(&self, outcome: Outcome) {
        let (caller, waiters) = {
            let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
            if s.outcome.is_some() {
                return;
            }
            s.outcome = Some(outcome.clone());
            (s.caller.take(), std::mem::take(&mut s.waiters))
        };
        if let Some(c) = caller {
            c.send(match &outcome {
                Outcome::Applied(seq) => Ok(*seq),
                o => Err(o.error().expect("not applied")),
            });
        }
        for (tx, refusal) in waiters {
            answer(tx, refusal, &outcome);
        }
    }

    fn wait(&self, tx: ReplyTx, refusal: Option<Error>) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match &s.outcome {
            Some(o) => {
                let o = o.clone();
                drop(s);
                answer(tx, refusal, &o);
            }
            None => s.waiters.push((tx, refusal)),
        }
    }

    fn settled(&self) -> bool {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .outcome
            .is_some()
    }
}

type Batch = (LeaderTag, Vec<Proposal>);

/// Entries proposed and not yet settled, oldest first, with when.
type Unsettled = Arc<Mutex<VecDeque<(Instant, Arc<Slot>)>>>;

/// The store's proposer: queues the writer's proposals for the task that
/// writes them to Raft, in order.
pub struct RaftProposer {
    tx: tokio::sync::mpsc::UnboundedSender<Batch>,
    /// Entries proposed and not yet settled, oldest first, with when.
    unsettled: Unsettled,
}

/// The proposer of one leadership: what the store's writer proposes while
/// this node leads under `tag` goes to Raft under that leader (after a
/// change of leader it is refused, never appended).
pub struct LeaderProposer {
    pub tag: LeaderTag,
    pub proposer: Arc<RaftProposer>,
}

impl Proposer for LeaderProposer {
    fn propose(&self, proposals: Vec<Proposal>) {
        self.proposer.propose_as(self.tag, proposals);
    }
}

impl RaftProposer {
    /// Queues the writer's `proposals` for Raft, under the leader `tag`.
    fn propose_as(&self, tag: LeaderTag, proposals: Vec<Proposal>) {
        if let Err(e) = self.tx.send((tag, proposals)) {
            // The node is stopping: nothing of these reached Raft.
            for p in e.0 .1 {
                let (tx, _) = match p {
                    Proposal::Record { reply, .. } => {
                        reply.send(Err(Error::NotLeader { leader: None }));
                        continue;
                    }
                    Proposal::AfterPrevious { reply, refusal } => (reply, refusal),
                };
                let _ = tx.send(Err(Error::NotLeader { leader: None }));
            }
        }
    }
}

impl RaftProposer {
    /// The proposer of `raft`, and the task that writes its proposals.
    pub fn start(
        raft: crate::state_machine::Raft,
        metrics: Option<Arc<RaftMetrics>>,
    ) -> (Arc<RaftProposer>, tokio::task::JoinHandle<()>) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let unsettled = Arc::new(Mutex::new(VecDeque::new()));
        let reaper = tokio::spawn(reap(unsettled.clone(), metrics.clone()));
        let task = tokio::spawn({
            let unsettled = unsettled.clone();
            async move {
                write_loop(raft, rx, unsettled, metrics).await;
                reaper.abort();
            }
        });
        (Arc::new(RaftProposer { tx, unsettled }), task)
    }

    /// Answers `OutcomeUnknown` to every caller whose entry is still
    /// unsettled: this node stopped leading a while ago and openraft has not
    /// said what became of them (a partitioned former leader hears nothing
    /// until the partition heals).
    pub fn give_up_unsettled(&self, why: &str) -> usize {
        let slots: Vec<Arc<Slot>> = {
            let mut u = self.unsettled.lock().unwrap_or_else(|p| p.into_inner());
            u.drain(..).map(|(_, s)| s).collect()
        };
        let mut n = 0;
        for s in slots {
            if !s.settled() {
                s.settle(Outcome::Unknown(why.to_owned()));
                n += 1;
            }
        }
        n
    }
}

/// Answers `OutcomeUnknown` to the callers of entries not settled within
/// [`COMMIT_WAIT`]: a leader cut off from its majority keeps leading (it
/// hears of no newer term) and openraft never says more of them.
async fn reap(unsettled: Unsettled, metrics: Option<Arc<RaftMetrics>>) {
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let late: Vec<Arc<Slot>> = {
            let mut u = unsettled.lock().unwrap_or_else(|p| p.into_inner());
            let mut late = Vec::new();
            while let Some((at, s)) = u.front() {
                if s.settled() {
                    u.pop_front();
                } else if at.elapsed() >= COMMIT_WAIT {
                    late.push(s.clone());
                    u.pop_front();
                } else {
                    break;
                }
            }
            late
        };
        for s in &late {
            s.settle(Outcome::Unknown(format!(
                "not committed within {COMMIT_WAIT:?}: the leader may have lost its majority"
            )));
        }
        if let (Some(m), false) = (&metrics, late.is_empty()) {
            m.outcome_unknown
                .with_label_values(&["not_committed"])
                .inc_by(late.len() as u64);
        }
    }
}

async fn write_loop(
    raft: crate::state_machine::Raft,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Batch>,
    unsettled: Unsettled,
    metrics: Option<Arc<RaftMetrics>>,
) {
    // The last entry proposed under the current leader tag.
    let mut last: Option<(LeaderTag, Arc<Slot>)> = None;
    while let Some((tag, proposals)) = rx.recv().await {
        let leader = LeaderId::new(tag.term, tag.node);
        for p in proposals {
            match p {
                Proposal::Record {
                    schema,
                    body,
                    reply,
                } => {
                    let slot = Arc::new(Slot::default());
                    slot.state.lock().unwrap_or_else(|p| p.into_inner()).caller = Some(reply);
                    {
                        let mut u = unsettled.lock().unwrap_or_else(|p| p.into_inner());
                        while u.front().is_some_and(|(_, s)| s.settled()) {
                            u.pop_front();
                        }
                        u.push_back((Instant::now(), slot.clone()));
                    }
                    let s2 = slot.clone();
                    let m2 = metrics.clone();
                    let responder = FnResponder::new(move |r: ClientWriteResult<TypeConfig>| {
                        let o = Outcome::of(&r);
                        if let (Some(m), Outcome::NotLeader(_)) = (&m2, &o) {
                            m.refused_not_leader();
                        }
                        s2.settle(o);
                    });
                    let sent = raft
                        .write(EntryBody { schema, body })
                        .with_leader(leader)
                        .responder(responder)
                        .await;
                    if let Err(e) = sent {
                        // Raft stopped: the entry may or may not have been
                        // appended.
                        slot.settle(Outcome::Unknown(format!("Raft stopped: {e}")));
                    }
                    last = Some((tag, slot));
                }
                Proposal::AfterPrevious { reply, refusal } => match &last {
                    Some((t, slot)) if *t == tag => slot.wait(reply, refusal),
                    // Nothing proposed under this leader before it: the
                    // writer decided against what is committed.
                    _ => {
                        let _ = reply.send(match refusal {
                            Some(e) => Err(e),
                            None => Ok(0),
                        });
                    }
                },
            }
        }
    }
}

/// How long a former leader waits for openraft to say what became of its
/// unsettled entries before it answers their callers `OutcomeUnknown`.
pub const OUTCOME_WAIT: Duration = Duration::from_secs(5);

/// How long an entry may wait to be committed and applied here before its
/// caller is answered `OutcomeUnknown`.
pub const COMMIT_WAIT: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use super::*;

    fn reply() -> (
        ReplyTx,
        tokio::sync::oneshot::Receiver<treelog::Result<u64>>,
    ) {
        tokio::sync::oneshot::channel()
    }

    #[test]
    fn waiters_share_the_entry_s_fate() {
        let slot = Slot::default();
        let (a, mut ra) = reply();
        let (b, mut rb) = reply();
        slot.wait(a, None);
        slot.wait(b, Some(Error::AlreadyExists("/x".into())));
        slot.settle(Outcome::Applied(7));
        assert_eq!(ra.try_recv().unwrap().unwrap(), 7);
        assert_eq!(
            rb.try_recv().unwrap().unwrap_err().kind(),
            treelog::ErrorKind::AlreadyExists
        );
        // Settled once: a later outcome changes nothing, a later waiter
        // gets the first.
        slot.settle(Outcome::NotLeader(None));
        let (c, mut rc) = reply();
        slot.wait(c, None);
        assert_eq!(rc.try_recv().unwrap().unwrap(), 7);
    }

    #[test]
    fn a_failed_entry_fails_its_waiters_with_its_own_error() {
        let slot = Slot::default();
        let (a, mut ra) = reply();
        slot.wait(a, Some(Error::AlreadyExists("/x".into())));
        slot.settle(Outcome::Unknown("lost".into()));
        assert_eq!(
            ra.try_recv().unwrap().unwrap_err().kind(),
            treelog::ErrorKind::OutcomeUnknown
        );
        let slot = Slot::default();
        let (b, mut rb) = reply();
        slot.wait(b, None);
        slot.settle(Outcome::NotLeader(Some("127.0.0.1:1".into())));
        assert!(matches!(
            rb.try_recv().unwrap().unwrap_err(),
            Error::NotLeader { leader: Some(_) }
        ));
    }
}
