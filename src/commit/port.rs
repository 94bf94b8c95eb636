//! What the writer's roles are handed from outside it: the consensus
//! protocol a leader proposes to, the leader a follower names, and the
//! channel a caller waits on. The consensus crate implements these; the
//! writer knows nothing else of it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};

/// Where the writer sends a request's result: the sequence of its last
/// record (for a no-op, the committed sequence it was decided against).
pub type ReplyTx = tokio::sync::oneshot::Sender<Result<u64>>;

/// The consensus protocol, as the leader's writer sees it. `propose` must
/// not block: it queues the proposals, in order, for the protocol to
/// append under the leadership the proposer was made for (a proposal under
/// an older leadership is refused with `NotLeader` and never appended).
pub trait Proposer: Send + Sync {
    fn propose(&self, proposals: Vec<Proposal>);
}

/// What the leader's writer asks the protocol to do, in order.
#[derive(Debug)]
pub enum Proposal {
    /// Append a record: its event schema version and body
    /// (`format::record::record_body`); its sequence is the entry's index.
    Record {
        schema: u8,
        body: Vec<u8>,
        reply: ProposalReply,
    },
    /// A command decided against records proposed before it and not yet
    /// applied, which changed nothing (`refusal: None`, a no-op) or was
    /// refused: once the last record proposed before it is applied, answer
    /// with its sequence or with `refusal`; if that record fails, with how
    /// it failed (the decision rested on it).
    AfterPrevious {
        reply: ReplyTx,
        refusal: Option<Error>,
    },
}

/// The answer a caller waits for, carried by a [`Proposal::Record`]: sent
/// once the record is applied on this node (`Ok(seq)`), or with why it was
/// not.
pub struct ProposalReply {
    tx: ReplyTx,
    /// The writer's number for the proposal (1, 2, ... while it leads).
    number: u64,
    /// The highest proposal number applied: the writer forgets a
    /// proposal's index changes once the index holds them.
    applied: Arc<AtomicU64>,
}

impl ProposalReply {
    pub(crate) fn new(tx: ReplyTx, number: u64, applied: Arc<AtomicU64>) -> ProposalReply {
        ProposalReply {
            tx,
            number,
            applied,
        }
    }

    /// Answers the caller. `Ok(seq)` only once the record is applied here
    /// (its index changes are in the index and published).
    pub fn send(self, result: Result<u64>) {
        if result.is_ok() {
            self.applied.fetch_max(self.number, Ordering::AcqRel);
        }
        let _ = self.tx.send(result);
    }
}

impl std::fmt::Debug for ProposalReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ProposalReply({})", self.number)
    }
}

/// Who leads, as a node that does not lead knows it: what `NotLeader`
/// names.
pub(crate) trait LeaderHint: Send + Sync {
    fn leader(&self) -> Option<String>;
}

/// A leader known once, or not at all.
impl LeaderHint for Option<String> {
    fn leader(&self) -> Option<String> {
        self.clone()
    }
}
