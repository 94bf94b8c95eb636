//! The single writer: group commit of work into the log and the index.
//!
//! Three stages, each one thread, in log order:
//!
//! - The **writer** owns every mutation. It blocks for the first request,
//!   drains more up to a budget, and hands the group to its [`Role`]: a
//!   leader validates each command against the index plus the changes not
//!   yet in it (earlier groups still on their way, then the group's own)
//!   and appends the group's log records to the WAL *without* fsync; a
//!   follower applies stored records. It goes straight on with the next
//!   group.
//! - The **syncer** takes every group appended since its last round and
//!   makes them durable with one WAL fsync (RocksDB's `SyncWAL`, which does
//!   not block appends).
//! - The **applier** writes each round's index changes (without the WAL)
//!   while the round's fsync runs and hands the round back to the syncer,
//!   which, once the fsync has succeeded, publishes it (see `pipeline`)
//!   and replies.
//!
//! So the fsync of one round overlaps the validation and appends of the
//! next groups and the round's own index write, and readers, who read at
//! the published snapshot, only ever see what is durable. The thread that
//! publishes (the syncer, or the writer for a group it commits itself, see
//! below) is called the **publisher** elsewhere.
//!
//! When a small group has nothing in flight ahead of it and no request
//! queued behind it, no other group could share its fsync: the writer then
//! runs the three stages itself, in the same order. Its callers (a lone
//! caller's every command) are spared two thread hand-offs, each a wake-up
//! that costs tens of microseconds on a busy machine.
//!
//! A control request (a change of role, a checkpoint to install) is a
//! group of its own, handled between two groups.
//!
//! A failed append, fsync or index write stops the writer for good: the
//! callers of the groups whose records were handed to the log and not yet
//! committed get [`Error::OutcomeUnknown`] (a restart may find their records
//! durable), every later caller gets [`Error::WriterStopped`] (not applied);
//! nothing that is not durable is acknowledged, and a restart recovers from
//! the log.
//!
//! [`Error::OutcomeUnknown`]: crate::Error::OutcomeUnknown
//! [`Error::WriterStopped`]: crate::Error::WriterStopped

use std::cell::RefCell;
use std::sync::Arc;

use crossbeam_channel::Receiver;

use crate::commit::config::{Durability, WriterConfig};
use crate::commit::follower::Follower;
use crate::commit::leader::Leader;
use crate::commit::pipeline::{Committer, InFlight};
use crate::commit::port::LeaderHint;
use crate::commit::proposing::Proposing;
use crate::commit::request::{Control, Incoming, Installer, Request};
use crate::commit::role::{Core, Role};
use crate::commit::shared::Shared;
use crate::engine::{Engine, EngineState};
use crate::error::{Error, Result};
use crate::index::{PendingWrites, WriterCache};

/// The largest group the writer commits on its own thread (see the module
/// docs). A bigger one holds the writer through its fsync and all its
/// replies while the callers it answered first come back: at 64 callers,
/// committing every eligible group inline lost ~9% (medians of 8
/// alternated runs); with this bound, the same as through the threads. A
/// lone caller gains 25-45%.
const INLINE_MAX_COMMANDS: usize = 8;

/// Initial capacity of a group's vector of requests.
const GROUP_CAPACITY: usize = 64;

/// The role a writer starts in.
pub(crate) enum StartRole {
    /// Its log is its own.
    Leader,
    /// It applies another's log: a replica (`append`: its records are
    /// copied into this log), or a node of a consensus cluster (the
    /// protocol writes the log; the writer only applies it).
    Follower {
        leader: Arc<dyn LeaderHint>,
        append: bool,
    },
}

pub(crate) struct Writer {
    core: Core,
    role: Box<dyn Role>,
    cfg: WriterConfig,
    /// Whether the log's writes are the writer's to fsync: not when a
    /// consensus protocol writes and syncs the log.
    durability: Durability,
}

impl Writer {
    pub(crate) fn new(
        shared: Arc<Shared>,
        state: EngineState,
        last_seq: u64,
        last_time_ms: u64,
        cfg: WriterConfig,
        start: StartRole,
    ) -> Writer {
        let (role, durability): (Box<dyn Role>, _) = match start {
            StartRole::Leader => (Box::new(Leader), cfg.durability),
            StartRole::Follower { leader, append } => (
                Box::new(Follower::new(leader)),
                // A consensus log is made durable by the protocol's own
                // log syncer before its entries are committed.
                if append {
                    cfg.durability
                } else {
                    Durability::None
                },
            ),
        };
        Writer {
            core: Core {
                shared,
                engine: Engine {
                    max_delete_inodes: cfg.max_delete_inodes,
                    max_record_bytes: cfg.max_record_bytes,
                    ..Engine::new(state)
                },
                last_seq,
                last_time_ms,
                cache: RefCell::new(WriterCache::new(1 << 20)),
                pending: PendingWrites::default(),
            },
            role,
            cfg,
            durability,
        }
    }

    /// Runs until every sender of `rx` is gone.
    pub(crate) fn run(mut self, rx: Receiver<Incoming>) {
        let shared = self.core.shared.clone();
        let mut inline = Committer::new(shared.clone(), self.durability);
        // Groups handed to the syncer and not yet published (or refused).
        let in_flight = Arc::new(InFlight::default());
        let (mut sync_tx, threads) = match Committer::spawn(&shared, self.durability, &in_flight) {
            Some(p) => {
                inline.grower = p.grower;
                (Some(p.tx), p.threads)
            }
            None => (None, Vec::new()),
        };
        // A control request drained behind a group: handled next, alone.
        let mut carried: Option<(Control, crate::commit::port::ReplyTx)> = None;
        loop {
            if let Some((control, reply)) = carried.take() {
                self.control(control, reply, &in_flight);
                continue;
            }
            let first = match rx.recv() {
                Ok(Incoming::Work(r)) => r,
                Ok(Incoming::Control(control, reply)) => {
                    self.control(control, reply, &in_flight);
                    continue;
                }
                Err(_) => break,
            };
            // Sized for a typical group, not the largest: a group's vector
            // travels to the syncer and is freed there, and a large
            // allocation per group costs more than growing a small one.
            let mut group: Vec<Request> = Vec::with_capacity(GROUP_CAPACITY);
            let mut bytes = first.work.approx_bytes();
            group.push(first);
            while group.len() < self.cfg.max_group_commands && bytes < self.cfg.max_group_bytes {
                match rx.try_recv() {
                    Ok(Incoming::Work(r)) => {
                        bytes += r.work.approx_bytes();
                        group.push(r);
                    }
                    Ok(Incoming::Control(control, reply)) => {
                        carried = Some((control, reply));
                        break;
                    }
                    Err(_) => break,
                }
            }
            let Some(appended) = self.group(group) else {
                continue;
            };
            match &sync_tx {
                // Nothing in flight and nobody waiting: no other group can
                // share this small one's fsync. Committing it here spares
                // its callers the hand-offs to the syncer and the applier
                // (a wake-up each) around the same fsync, and keeps log
                // order, as everything before it is published.
                Some(_)
                    if appended.requests.len() <= INLINE_MAX_COMMANDS
                        && in_flight.is_empty()
                        && rx.is_empty() =>
                {
                    // Counted before the replies, like the other stats, so
                    // that a caller who has its reply sees it.
                    shared
                        .stats()
                        .inline_groups
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if let Some(m) = shared.metrics() {
                        m.write.inline_groups.inc();
                    }
                    inline.commit(vec![appended]);
                }
                Some(tx) => {
                    in_flight.add(1);
                    if let Err(e) = tx.send(appended) {
                        // The syncer is gone (it only stops when this
                        // sender is dropped): commit inline from now on.
                        in_flight.done(1);
                        sync_tx = None;
                        inline.commit(vec![e.into_inner()]);
                    }
                }
                None => inline.commit(vec![appended]),
            }
            // Grow the cache's full maps while no command waits (or once
            // enough lookups went uncached for want of room).
            let skipped = self.core.cache.get_mut().skipped();
            if skipped > 0 && (rx.is_empty() || skipped >= 1024) {
                self.core.cache.get_mut().grow();
            }
        }
        // Let the syncer and applier drain and stop before the writer
        // reports done (and the cache thread, which stops once its last
        // sender, `inline`'s among them, is gone).
        drop(sync_tx);
        drop(inline);
        for h in threads {
            let _ = h.join();
        }
    }

    /// Hands a group to the role; returns what it appended.
    pub(crate) fn group(
        &mut self,
        requests: Vec<Request>,
    ) -> Option<crate::commit::role::Appended> {
        if let Some(why) = self.core.shared.failure() {
            Core::refuse_all(requests, &why, false);
            return None;
        }
        // Groups the pipeline has committed are in the index now.
        self.core.pending.prune(self.core.shared.committed());
        self.role.group(&mut self.core, requests)
    }

    /// A change of role, or of the state under it, between two groups.
    fn control(
        &mut self,
        control: Control,
        reply: crate::commit::port::ReplyTx,
        in_flight: &InFlight,
    ) {
        let result = match control {
            Control::Propose(proposer) => {
                self.role = Box::new(Proposing::new(&mut self.core, proposer));
                tracing::info!(applied = self.core.last_seq, "leading");
                Ok(self.core.last_seq)
            }
            Control::Follow(leader) => {
                self.core.forget_cached();
                self.role = Box::new(Follower::new(leader));
                Ok(self.core.last_seq)
            }
            Control::Install(installer) => {
                // Everything handed to the pipeline is published first: the
                // install replaces the index under it.
                in_flight.wait_drained();
                self.install(installer)
            }
        };
        let _ = reply.send(result);
    }

    /// Installs a checkpoint as the index (the pipeline is drained) and
    /// publishes it: readers go from the old state to the checkpoint's at
    /// once, and the caches start empty.
    fn install(&mut self, installer: Installer) -> Result<u64> {
        let shared = self.core.shared.clone();
        if let Some(why) = shared.failure() {
            return Err(Error::WriterStopped(why));
        }
        let installed = (|| {
            let store = shared.store();
            let seq = installer(store)?;
            let state = EngineState::load(&store.index())?;
            let time = store.last_record_time(seq)?;
            Ok::<_, Error>((seq, state, time))
        })();
        let (seq, state, time) = match installed {
            Ok(v) => v,
            Err(e) => {
                // The index may be half replaced: nothing may be served
                // from it (an open finishes the install).
                shared.fail(format!("installing a checkpoint: {e}"));
                return Err(e);
            }
        };
        let core = &mut self.core;
        core.engine.state = state;
        core.pending = PendingWrites::default();
        core.forget_cached();
        core.last_seq = seq;
        core.last_time_ms = core.last_time_ms.max(time);
        self.role.reset(&self.core);
        let store = shared.store();
        shared.retention().moved_start(store.log_start()?);
        shared.publication().replace(store.snapshot(), seq);
        if let Some(m) = shared.metrics() {
            let r = shared.retention();
            m.log.committed(seq, r.log_start(), r.log_bytes());
        }
        tracing::info!(seq, "installed a checkpoint");
        Ok(seq)
    }
}

#[cfg(test)]
impl Writer {
    /// Groups handed to the pipeline and not yet known to be committed.
    pub(crate) fn pending_groups(&self) -> usize {
        self.core.pending.len()
    }
}
