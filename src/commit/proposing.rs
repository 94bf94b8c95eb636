//! [`Proposing`]: the role of the leader of a consensus cluster. It
//! validates commands against the index plus the records it has proposed
//! and not yet applied, and hands each record to a [`Proposer`] (the
//! consensus protocol) instead of the log; a caller's reply waits for its
//! record to be committed and applied here. Committed entries, its own
//! included, are applied as a follower applies them
//! ([`Core::apply_stored`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::commit::port::{Proposal, ProposalReply, Proposer, ReplyTx};
use crate::commit::request::{Request, Work};
use crate::commit::role::{split, Appended, Core, Role};
use crate::engine::{Engine, Executed};
use crate::error::Error;
use crate::event::Record;
use crate::format::record;
use crate::index::{CachedIndex, Overlay, PendingIndex, PendingWrites};
use crate::now_ms;

/// Numbers proposals and knows which are applied.
#[derive(Debug, Default)]
struct Proposals {
    next: u64,
    applied: Arc<AtomicU64>,
}

impl Proposals {
    /// The reply of the next record's proposal.
    fn record(&mut self, tx: ReplyTx) -> ProposalReply {
        self.next += 1;
        ProposalReply::new(tx, self.next, self.applied.clone())
    }

    /// The number of the last proposal made.
    fn last(&self) -> u64 {
        self.next
    }

    /// The highest proposal number applied.
    fn applied(&self) -> u64 {
        self.applied.load(Ordering::Acquire)
    }

    /// Counts every proposal made so far as settled (the writer no longer
    /// waits for them, whatever becomes of them).
    fn forget(&mut self) {
        self.applied.fetch_max(self.next, Ordering::AcqRel);
    }
}

/// The role of a consensus leader.
pub(crate) struct Proposing {
    proposer: Arc<dyn Proposer>,
    /// The engine at the state after the proposals: ahead of the core's
    /// (the committed entries applied) by the proposals not yet applied.
    ahead: Engine,
    /// The time of the last record proposed.
    ahead_time_ms: u64,
    /// Index changes of the proposals not yet applied, by the number of
    /// each group's last proposal.
    proposed: PendingWrites,
    proposals: Proposals,
}

impl Proposing {
    /// Leads from the state `core` is at: every entry committed before the
    /// leader's first is applied.
    pub(crate) fn new(core: &mut Core, proposer: Arc<dyn Proposer>) -> Proposing {
        core.forget_cached();
        Proposing {
            proposer,
            ahead: core.engine.fork(),
            ahead_time_ms: core.last_time_ms,
            proposed: PendingWrites::default(),
            proposals: Proposals::default(),
        }
    }

    /// Validates commands against the index plus the proposals not yet
    /// applied, and proposes their records.
    fn propose(&mut self, core: &mut Core, commands: Vec<Request>, t_group: Instant) {
        let shared = core.shared.clone();
        let time_ms = now_ms().max(self.ahead_time_ms);
        let db_index = shared.store().index();
        let pipeline = PendingIndex {
            pending: &core.pending,
            base: &db_index,
        };
        let proposed = PendingIndex {
            pending: &self.proposed,
            base: &pipeline,
        };
        let index = CachedIndex {
            base: &proposed,
            cache: &core.cache,
        };
        let mut overlay = Overlay::new(&index);
        let mut out: Vec<Proposal> = Vec::with_capacity(commands.len());
        let mut fatal = None;
        let mut commands = commands.into_iter();
        for req in commands.by_ref() {
            let Work::Command(cmd, caller) = &req.work else {
                let _ = req.reply.send(Err(Error::InvalidArgument(
                    "stored records are not proposed".into(),
                )));
                continue;
            };
            // Whether the command's answer depends on proposals not yet
            // applied: then it waits for them (a refusal or a no-op
            // decided against a proposal that is never applied was wrong).
            let waits = self.proposals.last() > self.proposals.applied();
            match self
                .ahead
                .execute(cmd, caller.as_deref(), &mut overlay, time_ms)
            {
                Executed::Applied(events) => {
                    let rec = Record {
                        seq: 0,
                        time_ms,
                        events,
                    };
                    match record::record_body(&rec) {
                        Ok(body) => out.push(Proposal::Record {
                            schema: crate::event::EVENT_SCHEMA_VERSION,
                            body,
                            reply: self.proposals.record(req.reply),
                        }),
                        Err(e) => {
                            fatal = Some(format!("encoding a record: {e}"));
                            let _ = req.reply.send(Err(Error::WriterStopped(
                                "the writer failed to encode a record".into(),
                            )));
                            break;
                        }
                    }
                }
                Executed::NoOp if waits => out.push(Proposal::AfterPrevious {
                    reply: req.reply,
                    refusal: None,
                }),
                Executed::Refused(e) if waits => out.push(Proposal::AfterPrevious {
                    reply: req.reply,
                    refusal: Some(e),
                }),
                Executed::NoOp => {
                    let _ = req.reply.send(Ok(shared.committed()));
                }
                Executed::Refused(e) => {
                    let _ = req.reply.send(Err(e));
                }
                Executed::Fault(e) => {
                    fatal = Some(format!("applying events: {e}"));
                    let _ = req.reply.send(Err(Error::WriterStopped(format!(
                        "the writer stopped: {e}"
                    ))));
                    break;
                }
            }
        }
        let writes = Arc::new(overlay.take_writes());
        drop(overlay);
        if let Some(why) = fatal {
            // The overlay may hold half a command: stop, as a leader does;
            // the proposals made so far are the protocol's now, the
            // commands after the failure are not applied.
            Core::refuse_all(commands.collect(), &why, false);
            shared.fail(why);
        }
        core.cache.borrow_mut().absorb(&writes);
        self.proposed.push(self.proposals.last(), writes);
        self.ahead_time_ms = time_ms;
        if let Some(m) = shared.metrics() {
            m.write.validate.observe(t_group.elapsed().as_secs_f64());
        }
        if !out.is_empty() {
            self.proposer.propose(out);
        }
    }
}

impl Role for Proposing {
    fn group(&mut self, core: &mut Core, group: Vec<Request>) -> Option<Appended> {
        self.proposed.prune(self.proposals.applied());
        let t_group = Instant::now();
        core.queue_waits(&group, t_group);
        let (commands, records) = split(group);
        if !commands.is_empty() {
            self.propose(core, commands, t_group);
        }
        if records.is_empty() {
            return None;
        }
        core.apply_stored(records)
    }

    fn reset(&mut self, core: &Core) {
        self.proposed = PendingWrites::default();
        self.proposals.forget();
        self.ahead = core.engine.fork();
        self.ahead_time_ms = core.last_time_ms;
    }
}

impl Drop for Proposing {
    /// Leadership ends with the role: the writer no longer waits for the
    /// proposals not yet applied, whatever becomes of them.
    fn drop(&mut self) {
        self.proposals.forget();
    }
}
