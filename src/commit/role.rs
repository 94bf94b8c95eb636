//! The writer's role: what it does with a group of requests.
//!
//! Every role sees the same [`Core`] (the engine state after everything
//! handed to the pipeline, the log's end, the changes not yet committed)
//! and returns what it appended for the commit pipeline:
//!
//! | role | commands | stored records |
//! |---|---|---|
//! | [`Leader`](crate::commit::leader::Leader) (a single node, a replica's source) | validated, logged | refused |
//! | [`Follower`](crate::commit::follower::Follower) (a replica, a consensus follower) | refused: `NotLeader` | applied in order |
//! | [`Proposing`](crate::commit::proposing::Proposing) (a consensus leader) | validated, proposed | applied in order |
//!
//! A change of role is a control request, a group of its own: the writer
//! swaps the role between two groups.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Instant;

use crate::commit::request::{MetaWrites, Request, Work};
use crate::commit::shared::Shared;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::event::Record;
use crate::index::{OverlayWrites, PendingWrites, WriterCache};

/// What the writer does with its groups.
pub(crate) trait Role: Send {
    /// Takes a group of requests (commands and stored records) and answers each, now or through the pipeline: returns
    /// the group the pipeline is to commit, if any.
    fn group(&mut self, core: &mut Core, group: Vec<Request>) -> Option<Appended>;

    /// The state under the role was replaced (a checkpoint installed):
    /// forget what was built on the old one.
    fn reset(&mut self, _core: &Core) {}
}

/// A group the writer has appended (or a follower has applied), on its
/// way to the syncer.
pub(crate) struct Appended {
    pub(crate) requests: Vec<Request>,
    /// One per request: its sequence token, or why it was refused.
    pub(crate) results: Vec<Result<u64>>,
    /// The sequence of the group's last record (the previous group's when
    /// it has none).
    pub(crate) seq: u64,
    /// Records in the group (0: only no-ops and refusals).
    pub(crate) record_count: u64,
    /// Bytes of the records' stored values.
    pub(crate) bytes: u64,
    pub(crate) writes: Arc<OverlayWrites>,
    /// The records, for the tail that subscribers read.
    pub(crate) records: Vec<Record>,
    /// Written with the index changes.
    pub(crate) meta: MetaWrites,
}

/// The writer's state, whatever its role.
pub(crate) struct Core {
    pub(crate) shared: Arc<Shared>,
    /// The engine at the state after every group handed to the pipeline.
    pub(crate) engine: Engine,
    /// The sequence of the last record handed to the pipeline.
    pub(crate) last_seq: u64,
    /// The time of the last record handed to the pipeline (a new record is
    /// never older).
    pub(crate) last_time_ms: u64,
    /// The newest value of the keys validation read, pending or committed
    /// (see `WriterCache`).
    pub(crate) cache: RefCell<WriterCache>,
    /// Index changes of groups handed to the pipeline and not yet
    /// committed.
    pub(crate) pending: PendingWrites,
}

impl Core {
    /// Answers every request with `WriterStopped` (not applied: nothing of
    /// theirs reached the log) or, once their records were handed to the
    /// log, `OutcomeUnknown` (a crash or restart may find them there).
    pub(crate) fn refuse_all(requests: Vec<Request>, why: &str, written: bool) {
        for r in requests {
            let e = if written {
                Error::OutcomeUnknown(format!("the writer stopped: {why}"))
            } else {
                Error::WriterStopped(why.to_owned())
            };
            let _ = r.reply.send(Err(e));
        }
    }

    /// Observes how long each request waited before its group started.
    pub(crate) fn queue_waits(&self, requests: &[Request], started: Instant) {
        if let Some(m) = self.shared.metrics() {
            for r in requests {
                m.write
                    .queue_wait
                    .observe(started.saturating_duration_since(r.enqueued).as_secs_f64());
            }
        }
    }

    /// Forgets the keys validation read (their newest values may be on
    /// their way to another state).
    pub(crate) fn forget_cached(&mut self) {
        self.cache.get_mut().clear();
    }
}

/// Splits a group into its commands and its stored records, in order.
pub(crate) fn split(group: Vec<Request>) -> (Vec<Request>, Vec<Request>) {
    let mut commands = Vec::new();
    let mut records = Vec::new();
    for r in group {
        match &r.work {
            Work::Command(..) => commands.push(r),
            Work::Records(_) => records.push(r),
        }
    }
    (commands, records)
}
