//! The single writer: group commit of commands into the log and the index.
//!
//! Three stages, each one thread, in log order:
//!
//! - The **writer** owns every mutation. It blocks for the first command,
//!   drains more up to a budget, validates each against the index plus the
//!   changes not yet in it (earlier groups still on their way, then the
//!   group's own), and appends the group's log records to the WAL *without*
//!   fsync. It goes straight on with the next group.
//! - The **syncer** takes every group appended since its last round and
//!   makes them durable with one WAL fsync (RocksDB's `SyncWAL`, which does
//!   not block appends).
//! - The **applier** writes each round's index changes (without the WAL)
//!   while the round's fsync runs and hands the round back to the syncer,
//!   which, once the fsync has succeeded, publishes a RocksDB snapshot for
//!   readers, updates the readers' cache, publishes the committed watermark
//!   and replies.
//!
//! So the fsync of one round overlaps the validation and appends of the
//! next groups and the round's own index write, and readers, who read at
//! the published snapshot, only ever see what is durable. The thread that
//! publishes (the syncer, or the writer for a group it commits itself, see
//! below) is called the **publisher** elsewhere.
//!
//! When a small group has nothing in flight ahead of it and no command
//! queued behind it, no other group could share its fsync: the writer then
//! runs the three stages itself, in the same order. Its callers (a lone
//! caller's every command) are spared two thread hand-offs, each a wake-up
//! that costs tens of microseconds on a busy machine.
//!
//! A failed append, fsync or index write stops the writer for good: the
//! callers of the groups whose records were handed to the log and not yet
//! committed get [`Error::OutcomeUnknown`] (a restart may find their records
//! durable), every later caller gets [`Error::WriterStopped`] (not applied);
//! nothing that is not durable is acknowledged, and a restart recovers from
//! the log.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::clock::now_ms;

use crossbeam_channel::Receiver;

use crate::command::Command;
use crate::engine::{Engine, EngineState, Executed};
use crate::error::{Error, Result};
use crate::event::Record;
use crate::format::meta::RaftLogId;
use crate::format::record;
use crate::format::record::{EntryKind, LeaderTag};
use crate::index::{Overlay, OverlayWrites, PendingIndex, PendingWrites};
use crate::raft::{Proposal, Proposals, Proposer};

pub use crate::shared::{Shared, WriterStatsSnapshot};

/// Whether a group's log write is fsynced before it is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum Durability {
    /// fsync (the WAL) before acknowledging: acknowledged writes survive a
    /// power loss.
    #[default]
    Sync,
    /// No fsync: acknowledged writes survive a process crash (they are in
    /// the OS page cache) but not a power loss. For tests and bulk loads.
    None,
}

#[derive(Debug, Clone)]
pub struct WriterConfig {
    pub durability: Durability,
    /// Most commands in one group.
    pub max_group_commands: usize,
    /// Most (approximate) command bytes in one group.
    pub max_group_bytes: usize,
    /// Most inodes one recursive delete removes; a bigger subtree is
    /// refused (`InvalidArgument`) and must be deleted in parts. Its record
    /// holds one event of ~100–200 bytes per inode, built in memory,
    /// written as one batch and sent to every subscriber whole.
    pub max_delete_inodes: usize,
    /// Most bytes of one command's log record; a command whose events
    /// would take more (a recursive delete of many long paths) is refused
    /// (`InvalidArgument`) and writes nothing.
    pub max_record_bytes: usize,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            durability: Durability::Sync,
            max_group_commands: 1024,
            max_group_bytes: 4 << 20,
            max_delete_inodes: crate::engine::DEFAULT_MAX_DELETE_INODES,
            max_record_bytes: crate::engine::DEFAULT_MAX_RECORD_BYTES,
        }
    }
}

/// What the writer is asked to do.
pub enum Work {
    /// A mutation, validated against the namespace (a leader's work).
    Command(Command),
    /// A replica's records from its source, as stored there (envelopes with
    /// their checksums), continuing this log in order: appended and applied
    /// as they are, so that the replica's log and index are the source's.
    Replicated(Vec<Vec<u8>>),
    /// A Raft node's committed entries (log values, already in its log),
    /// in order: applied to the index and published (see `crate::raft`).
    RaftApply(Vec<Vec<u8>>),
    /// A Raft node leads under `tag` from now on: commands are validated
    /// here and proposed to `proposer`. Sent once every entry committed
    /// before this leader's first is applied.
    RaftLead {
        tag: LeaderTag,
        proposer: Arc<dyn Proposer>,
    },
    /// A Raft node follows (`leader`: the address `NotLeader` names, when
    /// known): commands are refused.
    RaftFollow { leader: Option<String> },
    /// A Raft node installs a snapshot (the verified database at `dir`) as
    /// its index, in place of everything applied so far.
    RaftInstall { dir: std::path::PathBuf },
}

impl Work {
    fn approx_bytes(&self) -> usize {
        match self {
            Work::Command(c) => c.approx_bytes(),
            Work::Replicated(r) | Work::RaftApply(r) => r.iter().map(|v| v.len() + 16).sum(),
            Work::RaftLead { .. } | Work::RaftFollow { .. } | Work::RaftInstall { .. } => 64,
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Work::Command(c) => c.name(),
            Work::Replicated(_) => "replicate",
            Work::RaftApply(_) => "raft_apply",
            Work::RaftLead { .. } => "raft_lead",
            Work::RaftFollow { .. } => "raft_follow",
            Work::RaftInstall { .. } => "raft_install",
        }
    }

    /// A change of role: a group of its own (see `Writer::run`).
    fn is_control(&self) -> bool {
        matches!(
            self,
            Work::RaftLead { .. } | Work::RaftFollow { .. } | Work::RaftInstall { .. }
        )
    }
}

/// Work and where to send its result (the last record's sequence number).
pub struct Request {
    pub work: Work,
    pub reply: tokio::sync::oneshot::Sender<Result<u64>>,
    pub enqueued: Instant,
}

pub struct Writer {
    shared: Arc<Shared>,
    engine: Engine,
    cfg: WriterConfig,
    last_seq: u64,
    last_time_ms: u64,
    cache: std::cell::RefCell<crate::index::WriterCache>,
    /// Index changes of groups handed to the syncer and not yet committed.
    pending: PendingWrites,
    /// Set on a Raft cluster's node.
    raft: Option<RaftWriter>,
}

/// The writer of a Raft cluster's node (see `crate::raft`). It applies
/// committed entries to the index with the committed state, and while the
/// node leads validates commands against the index plus its proposals not
/// yet applied (with `Writer::engine`, whose state runs ahead of the
/// committed one by those proposals) and hands their records to Raft.
pub(crate) struct RaftWriter {
    /// While leading: the leader's tag and Raft.
    lead: Option<(LeaderTag, Arc<dyn Proposer>)>,
    /// Whom `NotLeader` names while following.
    leader: Option<String>,
    /// The state of the committed entries applied.
    committed: EngineState,
    /// The time of the last committed record (a new leader's records are
    /// not older).
    committed_time_ms: u64,
    /// The log id of the last entry applied (`None`: none ever was).
    applied: Option<RaftLogId>,
    /// Index changes of the proposals not yet applied, by the number of
    /// each group's last proposal.
    proposed: PendingWrites,
    proposals: Proposals,
}

impl RaftWriter {
    pub(crate) fn new(
        committed: EngineState,
        committed_time_ms: u64,
        applied: Option<RaftLogId>,
    ) -> RaftWriter {
        RaftWriter {
            lead: None,
            leader: None,
            committed,
            committed_time_ms,
            applied,
            proposed: PendingWrites::default(),
            proposals: Proposals::default(),
        }
    }
}

/// What a group of committed Raft entries writes to `meta` beside the
/// index: the last entry's log id and, if the group applied one, the last
/// membership.
#[derive(Debug, Clone)]
struct RaftMeta {
    applied: RaftLogId,
    membership: Option<(RaftLogId, Vec<u8>)>,
}

/// A group the writer has appended to the WAL (not yet synced), on its way
/// to the syncer.
struct Appended {
    requests: Vec<Request>,
    /// One per request: its sequence token, or why it was refused.
    results: Vec<Result<u64>>,
    /// The sequence of the group's last record (the previous group's when
    /// it has none).
    seq: u64,
    /// Records in the group (0: only no-ops and refusals).
    records: u64,
    bytes: u64,
    writes: Arc<OverlayWrites>,
    decoded: Vec<Arc<crate::stream::memo::SharedRecord>>,
    /// A Raft node's applied log id and membership, written with the
    /// index.
    raft_meta: Option<RaftMeta>,
}

impl Writer {
    pub fn new(
        shared: Arc<Shared>,
        state: EngineState,
        last_seq: u64,
        last_time_ms: u64,
        cfg: WriterConfig,
    ) -> Writer {
        Writer {
            shared,
            engine: Engine {
                max_delete_inodes: cfg.max_delete_inodes,
                max_record_bytes: cfg.max_record_bytes,
                ..Engine::new(state)
            },
            cfg,
            last_seq,
            last_time_ms,
            cache: std::cell::RefCell::new(crate::index::WriterCache::new(1 << 20)),
            pending: PendingWrites::default(),
            raft: None,
        }
    }

    /// The writer of a Raft cluster's node: it starts as a follower.
    pub(crate) fn with_raft(mut self, r: RaftWriter) -> Writer {
        self.raft = Some(r);
        self
    }

    /// Runs until every sender of `rx` is gone.
    pub fn run(mut self, rx: Receiver<Request>) {
        // A Raft node's log is made durable by Raft's own log syncer, before
        // its entries are committed: its writer only applies them.
        let durability = match self.raft {
            Some(_) => Durability::None,
            None => self.cfg.durability,
        };
        let mut inline = Committer::new(self.shared.clone(), durability);
        // Groups handed to the syncer and not yet published (or refused).
        let in_flight = Arc::new(AtomicU64::new(0));
        let (mut sync_tx, threads) = match Committer::spawn(&self.shared, durability, &in_flight) {
            Some(p) => {
                inline.grower = p.grower;
                (Some(p.tx), p.threads)
            }
            None => (None, Vec::new()),
        };
        // A change of role drained behind a group: the next group, alone.
        let mut carried: Option<Request> = None;
        loop {
            let first = match carried.take() {
                Some(r) => r,
                None => match rx.recv() {
                    Ok(r) => r,
                    Err(_) => break,
                },
            };
            // Sized for a typical group, not the largest: a group's vector
            // travels to the syncer and is freed there, and a large
            // allocation per group costs more than growing a small one.
            let mut group: Vec<Request> = Vec::with_capacity(GROUP_CAPACITY);
            let mut bytes = first.work.approx_bytes();
            let alone = first.work.is_control();
            group.push(first);
            while !alone
                && group.len() < self.cfg.max_group_commands
                && bytes < self.cfg.max_group_bytes
            {
                match rx.try_recv() {
                    Ok(r) if r.work.is_control() => {
                        carried = Some(r);
                        break;
                    }
                    Ok(r) => {
                        bytes += r.work.approx_bytes();
                        group.push(r);
                    }
                    Err(_) => break,
                }
            }
            if let [only] = &group[..] {
                if matches!(only.work, Work::RaftInstall { .. }) {
                    // Everything handed to the pipeline is published
                    // first: the install replaces the index under it.
                    while in_flight.load(Ordering::Acquire) > 0 {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                    let req = group.pop().expect("one request");
                    self.install(req);
                    continue;
                }
            }
            if let Some(appended) = self.append_group(group) {
                match &sync_tx {
                    // Nothing in flight and nobody waiting: no other group
                    // can share this small one's fsync. Committing it here
                    // spares its callers the hand-offs to the syncer and
                    // the applier (a wake-up each) around the same fsync,
                    // and keeps log order, as everything before it is
                    // published.
                    Some(_)
                        if appended.requests.len() <= INLINE_MAX_COMMANDS
                            && in_flight.load(Ordering::Acquire) == 0
                            && rx.is_empty() =>
                    {
                        // Counted before the replies, like the other stats,
                        // so that a caller who has its reply sees it.
                        self.shared
                            .stats
                            .inline_groups
                            .fetch_add(1, Ordering::Relaxed);
                        if let Some(m) = &self.shared.metrics {
                            m.inline_groups.inc();
                        }
                        inline.commit(vec![appended]);
                    }
                    Some(tx) => {
                        in_flight.fetch_add(1, Ordering::AcqRel);
                        if let Err(e) = tx.send(appended) {
                            // The syncer is gone (it only stops when this
                            // sender is dropped): commit inline from now on.
                            in_flight.fetch_sub(1, Ordering::AcqRel);
                            sync_tx = None;
                            inline.commit(vec![e.into_inner()]);
                        }
                    }
                    None => inline.commit(vec![appended]),
                }
            }
            // Grow the cache's full maps while no command waits (or once
            // enough lookups went uncached for want of room).
            let skipped = self.cache.get_mut().skipped();
            if skipped > 0 && (rx.is_empty() || skipped >= 1024) {
                self.cache.get_mut().grow();
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

    /// Answers every request with `WriterStopped` (not applied: nothing of
    /// theirs reached the log) or, once their records were handed to the
    /// log, `OutcomeUnknown` (a crash or restart may find them there).
    fn refuse_all(requests: Vec<Request>, why: &str, written: bool) {
        for r in requests {
            let e = if written {
                Error::OutcomeUnknown(format!("the writer stopped: {why}"))
            } else {
                Error::WriterStopped(why.to_owned())
            };
            let _ = r.reply.send(Err(e));
        }
    }

    /// Validates a group and appends its records to the WAL (not synced).
    /// Returns it for the syncer, or `None` when it was refused whole.
    fn append_group(&mut self, requests: Vec<Request>) -> Option<Appended> {
        if let Some(why) = self.shared.failure() {
            Self::refuse_all(requests, &why, false);
            return None;
        }
        // Groups the syncer has committed are in the index now.
        self.pending.prune(self.shared.committed.get());
        if self.raft.is_some() {
            return self.raft_group(requests);
        }
        let t_group = Instant::now();
        if let Some(m) = &self.shared.metrics {
            for r in requests.iter() {
                m.queue_wait
                    .observe(t_group.saturating_duration_since(r.enqueued).as_secs_f64());
            }
        }
        let mut time_ms = now_ms().max(self.last_time_ms);
        let db_index = self.shared.store.index();
        // The cache first: it holds the newest value, pending or committed,
        // of every key it holds (see `WriterCache`), so most lookups stop
        // there without searching every pending group.
        let pending = PendingIndex {
            pending: &self.pending,
            base: &db_index,
        };
        let index = crate::index::CachedIndex {
            base: &pending,
            cache: &self.cache,
        };
        let mut overlay = Overlay::new(&index);
        let mut batch = match self.shared.store.log_batch() {
            Ok(b) => b,
            Err(e) => {
                // Unreachable in practice: the CF is checked at open.
                self.shared.fail(e.to_string());
                Self::refuse_all(requests, &e.to_string(), false);
                return None;
            }
        };
        let mut results: Vec<Result<u64>> = Vec::with_capacity(requests.len());
        let mut seq = self.last_seq;
        let mut bytes = 0u64;
        let mut decoded: Vec<Arc<crate::stream::memo::SharedRecord>> = Vec::new();
        let mut fatal: Option<String> = None;
        for req in requests.iter() {
            let cmd = match &req.work {
                Work::Command(cmd) => cmd,
                Work::Replicated(recs) => {
                    match apply_replicated(&mut self.engine.state, recs, seq, &mut overlay) {
                        Ok(applied) => {
                            for (rec, v) in applied.into_iter().zip(recs) {
                                seq = rec.seq;
                                time_ms = time_ms.max(rec.time_ms);
                                bytes += v.len() as u64;
                                batch.put(seq, v);
                                decoded.push(Arc::new(rec.into()));
                            }
                            results.push(Ok(seq));
                        }
                        Err(Executed::Refused(e)) => results.push(Err(e)),
                        Err(Executed::Fault(e)) => {
                            fatal = Some(format!("applying replicated records: {e}"));
                            break;
                        }
                        Err(_) => unreachable!("apply_replicated fails with Refused or Fault"),
                    }
                    continue;
                }
                // A single node's writer has no Raft work (a store opened
                // without `Options::raft` never gets any).
                Work::RaftApply(_)
                | Work::RaftLead { .. }
                | Work::RaftFollow { .. }
                | Work::RaftInstall { .. } => {
                    results.push(Err(Error::InvalidArgument(
                        "this store is not a node of a Raft cluster".into(),
                    )));
                    continue;
                }
            };
            match self.engine.execute(cmd, &mut overlay, time_ms) {
                Executed::Applied(events) => {
                    seq += 1;
                    let rec = Record {
                        seq,
                        time_ms,
                        events,
                    };
                    match record::encode_record(&rec) {
                        Ok(v) => {
                            bytes += v.len() as u64;
                            batch.put(seq, &v);
                            results.push(Ok(seq));
                            decoded.push(Arc::new(rec.into()));
                        }
                        Err(e) => {
                            fatal = Some(format!("encoding record {seq}: {e}"));
                            break;
                        }
                    }
                }
                // A no-op changes nothing; its token is the state it saw
                // (replied only once that state is committed).
                Executed::NoOp => results.push(Ok(seq)),
                Executed::Refused(e) => results.push(Err(e)),
                Executed::Fault(e) => {
                    // The overlay may hold half a command: nothing of this
                    // group may be written.
                    fatal = Some(format!("applying events: {e}"));
                    break;
                }
            }
        }
        let records = seq - self.last_seq;
        let t_validated = Instant::now();
        // A failed log write may still have reached the WAL file (whole, or
        // torn and dropped at recovery): its commands' outcome is unknown.
        let mut written = false;
        if fatal.is_none() && records > 0 {
            // Not synced here: the syncer's next fsync covers it, while
            // this thread goes on with the next group.
            let appended = if crate::failpoint::injected("writer::write_log") {
                Err(Error::Io(std::io::Error::other(
                    "injected log write failure",
                )))
            } else {
                self.shared.store.write_log(batch, false)
            };
            if let Err(e) = appended {
                fatal = Some(format!("log write failed: {e}"));
                written = true;
            }
        }
        let writes = Arc::new(overlay.take_writes());
        drop(overlay);
        if let Some(why) = fatal {
            // Earlier groups are unaffected: the syncer still commits them.
            self.shared.fail(why.clone());
            Self::refuse_all(requests, &why, written);
            return None;
        }
        let t_logged = Instant::now();
        // The writer reads its own changes back through its cache (the keys
        // it holds take the new values now) or else the pending set, until
        // they are in the index.
        self.cache.borrow_mut().absorb(&writes);
        self.pending.push(seq, writes.clone());
        self.last_seq = seq;
        self.last_time_ms = time_ms;
        if let Some(m) = &self.shared.metrics {
            let (hits, misses) = self.cache.borrow_mut().take_counts();
            m.writer_cache_hits.inc_by(hits);
            m.writer_cache_misses.inc_by(misses);
            m.validate.observe((t_validated - t_group).as_secs_f64());
            if records > 0 {
                m.log_write.observe((t_logged - t_validated).as_secs_f64());
            }
            m.group_commands.observe(requests.len() as f64);
            m.group_bytes.observe(bytes as f64);
        }
        Some(Appended {
            requests,
            results,
            seq,
            records,
            bytes,
            writes,
            decoded,
            raft_meta: None,
        })
    }
}

impl Writer {
    /// A group on a Raft cluster's node: role changes (alone in their
    /// group), committed entries (applied with the committed state, then
    /// written and published by the pipeline like any group), and commands
    /// (refused while following; validated and proposed while leading).
    fn raft_group(&mut self, requests: Vec<Request>) -> Option<Appended> {
        let raft = self.raft.as_mut().expect("raft_group on a Raft node");
        raft.proposed.prune(raft.proposals.applied());
        if let [only] = &requests[..] {
            if only.work.is_control() {
                let req = requests.into_iter().next().expect("one request");
                self.change_role(req);
                return None;
            }
        }
        let t_group = Instant::now();
        if let Some(m) = &self.shared.metrics {
            for r in requests.iter() {
                m.queue_wait
                    .observe(t_group.saturating_duration_since(r.enqueued).as_secs_f64());
            }
        }
        let (mut applies, mut commands) = (Vec::new(), Vec::new());
        for r in requests {
            match &r.work {
                Work::RaftApply(_) => applies.push(r),
                Work::Command(_) => commands.push(r),
                Work::Replicated(_) => {
                    let _ = r.reply.send(Err(Error::InvalidArgument(
                        "a Raft cluster's node takes no replicated records".into(),
                    )));
                }
                Work::RaftLead { .. } | Work::RaftFollow { .. } | Work::RaftInstall { .. } => {
                    unreachable!("a change of role is a group of its own")
                }
            }
        }
        if !commands.is_empty() {
            self.propose(commands, t_group);
        }
        if applies.is_empty() {
            return None;
        }
        self.apply_committed_group(applies)
    }

    /// Leads or follows from now on. Either way the proposals not yet
    /// applied are forgotten: a new leader validates against what is
    /// committed (everything before its first entry is applied by now),
    /// and a follower validates nothing.
    fn change_role(&mut self, req: Request) {
        let raft = self.raft.as_mut().expect("change_role on a Raft node");
        raft.proposed.clear();
        raft.proposals.forget();
        self.cache.get_mut().clear();
        match req.work {
            Work::RaftLead { tag, proposer } => {
                self.engine.state = raft.committed.clone();
                self.last_time_ms = raft.committed_time_ms;
                tracing::info!(
                    term = tag.term,
                    node = tag.node,
                    applied = self.last_seq,
                    "leading"
                );
                raft.lead = Some((tag, proposer));
            }
            Work::RaftFollow { leader } => {
                if raft.lead.take().is_some() {
                    tracing::info!(leader = ?leader, "following");
                }
                raft.leader = leader;
            }
            _ => unreachable!("change_role takes a change of role"),
        }
        let _ = req.reply.send(Ok(self.last_seq));
    }

    /// Installs a snapshot as the index (nothing is in the pipeline: see
    /// `run`) and publishes it: readers go from the old state to the
    /// snapshot's at once, and the caches start empty.
    fn install(&mut self, req: Request) {
        let Work::RaftInstall { dir } = &req.work else {
            unreachable!("install takes an install")
        };
        if self.raft.is_none() {
            let _ = req.reply.send(Err(Error::InvalidArgument(
                "only a Raft node installs snapshots".into(),
            )));
            return;
        }
        if let Some(why) = self.shared.failure() {
            let _ = req.reply.send(Err(Error::WriterStopped(why)));
            return;
        }
        let result = self.install_snapshot(dir);
        if let Err(e) = &result {
            // The index may be half replaced: nothing may be served from it
            // (an open finishes the install).
            self.shared.fail(format!("installing a snapshot: {e}"));
        }
        let _ = req.reply.send(result);
    }

    fn install_snapshot(&mut self, dir: &std::path::Path) -> Result<u64> {
        let raft = self.raft.as_mut().expect("checked by install");
        let store = &self.shared.store;
        let applied = crate::raft::install(store, dir)?;
        let state = EngineState::load(&store.index())?;
        let seq = applied.index;
        raft.committed = state.clone();
        raft.committed_time_ms = crate::recovery::last_record_time(store, seq)?;
        raft.applied = Some(applied);
        raft.proposed.clear();
        raft.proposals.forget();
        self.engine.state = state;
        self.pending = PendingWrites::default();
        self.cache.get_mut().clear();
        self.last_seq = seq;
        self.last_time_ms = self.last_time_ms.max(raft.committed_time_ms);
        let sh = &self.shared;
        sh.retention.moved_start(store.log_start()?);
        let view = Arc::new(crate::readview::PublishedView {
            snap: store.snapshot(),
            seq,
        });
        // As a round's publish (see `Committer::publish`): readers see the
        // old state or the new one, never a mix.
        sh.publishing.fetch_add(1, Ordering::SeqCst);
        sh.view.store(view);
        sh.reader_cache.clear();
        sh.tail.clear();
        sh.committed.publish(seq);
        sh.publishing.fetch_add(1, Ordering::SeqCst);
        if let Some(m) = &sh.metrics {
            m.last_seq.set(seq as i64);
            m.applied_seq.set(seq as i64);
        }
        tracing::info!(
            term = applied.term,
            node = applied.node,
            seq,
            "installed a snapshot"
        );
        Ok(seq)
    }

    /// Validates commands against the index plus the proposals not yet
    /// applied, and proposes their records; a follower refuses them.
    fn propose(&mut self, commands: Vec<Request>, t_group: Instant) {
        let raft = self.raft.as_mut().expect("propose on a Raft node");
        let Some((tag, proposer)) = raft.lead.clone() else {
            let leader = raft.leader.clone();
            for r in commands {
                let _ = r.reply.send(Err(Error::NotLeader {
                    leader: leader.clone(),
                }));
            }
            return;
        };
        let time_ms = now_ms().max(self.last_time_ms);
        let db_index = self.shared.store.index();
        let pipeline = PendingIndex {
            pending: &self.pending,
            base: &db_index,
        };
        let proposed = PendingIndex {
            pending: &raft.proposed,
            base: &pipeline,
        };
        let index = crate::index::CachedIndex {
            base: &proposed,
            cache: &self.cache,
        };
        let mut overlay = Overlay::new(&index);
        let mut out: Vec<Proposal> = Vec::with_capacity(commands.len());
        let mut fatal = None;
        let mut commands = commands.into_iter();
        for req in commands.by_ref() {
            let Work::Command(cmd) = &req.work else {
                unreachable!("propose takes commands")
            };
            // Whether the command's answer depends on proposals not yet
            // applied: then it waits for them (a refusal or a no-op
            // decided against a proposal that is never applied was wrong).
            let waits = raft.proposals.last() > raft.proposals.applied();
            match self.engine.execute(cmd, &mut overlay, time_ms) {
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
                            reply: raft.proposals.reply(req.reply),
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
                    let _ = req.reply.send(Ok(self.shared.committed.get()));
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
            // The overlay may hold half a command: stop, as the single
            // writer does; the proposals made so far are Raft's now, the
            // commands after the failure are not applied.
            Self::refuse_all(commands.collect(), &why, false);
            self.shared.fail(why);
        }
        self.cache.borrow_mut().absorb(&writes);
        raft.proposed.push(raft.proposals.last(), writes);
        self.last_time_ms = time_ms;
        if let Some(m) = &self.shared.metrics {
            m.validate.observe(t_group.elapsed().as_secs_f64());
        }
        if !out.is_empty() {
            proposer.propose(tag, out);
        }
    }

    /// Applies committed entries with the committed state; returns them as
    /// a group for the pipeline (index write with `applied_seq` and the
    /// Raft meta, publish, replies).
    fn apply_committed_group(&mut self, requests: Vec<Request>) -> Option<Appended> {
        let raft = self.raft.as_mut().expect("apply on a Raft node");
        let db_index = self.shared.store.index();
        let pipeline = PendingIndex {
            pending: &self.pending,
            base: &db_index,
        };
        let mut overlay = Overlay::new(&pipeline);
        let mut results = Vec::with_capacity(requests.len());
        let (mut seq, mut records, mut bytes) = (self.last_seq, 0u64, 0u64);
        let mut decoded = Vec::new();
        let mut meta: Option<RaftMeta> = None;
        let mut fatal = None;
        for req in &requests {
            let Work::RaftApply(values) = &req.work else {
                unreachable!("apply_committed_group takes committed entries")
            };
            match apply_committed(raft, values, &mut overlay) {
                Ok(applied) => {
                    for (a, v) in applied.into_iter().zip(values) {
                        seq = a.record.seq;
                        records += 1;
                        bytes += v.len() as u64;
                        if a.record.time_ms > 0 {
                            raft.committed_time_ms = raft.committed_time_ms.max(a.record.time_ms);
                        }
                        let m = meta.get_or_insert(RaftMeta {
                            applied: a.id,
                            membership: None,
                        });
                        m.applied = a.id;
                        if let Some(mb) = a.membership {
                            m.membership = Some((a.id, mb));
                        }
                        decoded.push(Arc::new(a.record.into()));
                    }
                    results.push(Ok(seq));
                }
                Err(Executed::Refused(e)) => results.push(Err(e)),
                Err(Executed::Fault(e)) => {
                    fatal = Some(format!("applying committed entries: {e}"));
                    break;
                }
                Err(_) => unreachable!("apply_committed fails with Refused or Fault"),
            }
        }
        let writes = Arc::new(overlay.take_writes());
        drop(overlay);
        if let Some(why) = fatal {
            self.shared.fail(why.clone());
            // Nothing of the group reached the index; the entries stay in
            // the log, committed, for the next open's replay.
            Self::refuse_all(requests, &why, false);
            return None;
        }
        self.pending.push(seq, writes.clone());
        self.last_seq = seq;
        Some(Appended {
            requests,
            results,
            seq,
            records,
            bytes,
            writes,
            decoded,
            raft_meta: meta,
        })
    }
}

/// A committed entry as applied.
struct AppliedEntry {
    record: Record,
    id: RaftLogId,
    membership: Option<Vec<u8>>,
}

/// Checks committed entries (envelope, checksum, order: each after the
/// last applied, and a record with events right after it) and applies
/// their events to `overlay` with the committed state. A batch that fails
/// its checks is refused whole before anything is applied (`Refused`); an
/// entry that passes them and cannot be applied is a `Fault`.
fn apply_committed(
    raft: &mut RaftWriter,
    values: &[Vec<u8>],
    overlay: &mut (impl crate::index::IndexWrite + crate::index::IndexRead),
) -> std::result::Result<Vec<AppliedEntry>, Executed> {
    let refuse = |detail: String| Executed::Refused(Error::corrupt("committed entry", detail));
    let mut out = Vec::with_capacity(values.len());
    let mut last = raft.applied.map(|a| a.index);
    for v in values {
        let env = record::open_envelope(v).map_err(|e| refuse(e.to_string()))?;
        let rec = record::decode_record(v, None).map_err(|e| refuse(e.to_string()))?;
        // Raft applies in order; only its own entries (no events) may
        // follow a gap, which its tests of storage make.
        let in_order = match last {
            None => true,
            Some(l) if rec.events.is_empty() => rec.seq > l,
            Some(l) => rec.seq == l + 1,
        };
        if !in_order {
            return Err(refuse(format!(
                "entry {} does not follow the last applied, {last:?}",
                rec.seq
            )));
        }
        last = Some(rec.seq);
        let membership = match env.kind {
            EntryKind::Membership => Some(
                record::decode_raft_entry(v, Some(rec.seq))
                    .map_err(|e| refuse(e.to_string()))?
                    .membership
                    .to_vec(),
            ),
            EntryKind::Record | EntryKind::Blank => None,
        };
        out.push(AppliedEntry {
            id: RaftLogId {
                term: env.leader.term,
                node: env.leader.node,
                index: rec.seq,
            },
            record: rec,
            membership,
        });
    }
    for a in &out {
        let events = a.record.events.iter().map(crate::event::Event::borrowed);
        crate::engine::apply_events(events, overlay, &mut raft.committed)
            .map_err(Executed::Fault)?;
    }
    raft.applied = out.last().map(|a| a.id).or(raft.applied);
    Ok(out)
}

/// Puts the last Raft meta of `groups` (applied log id, membership) into
/// the index batch `b`.
fn add_raft_meta(
    store: &crate::store::Store,
    b: &mut crate::store::IndexBatch,
    groups: &[Appended],
) -> Result<()> {
    let mut applied = None;
    let mut membership = None;
    for g in groups {
        if let Some(m) = &g.raft_meta {
            applied = Some(m.applied);
            if let Some(mb) = &m.membership {
                membership = Some(mb);
            }
        }
    }
    if let Some(a) = applied {
        store.add_meta_write(b, crate::format::meta::RAFT_APPLIED_KEY, &a.encode())?;
    }
    if let Some((id, m)) = membership {
        store.add_meta_write(
            b,
            crate::format::meta::RAFT_MEMBERSHIP_KEY,
            &crate::format::meta::encode_membership(id, m),
        )?;
    }
    Ok(())
}

/// Checks a replica's records (each one's envelope and checksum, and
/// that they continue the log from `last`) and applies their events to
/// `overlay` with the same function as replay. A record that fails its
/// checks refuses the whole batch before anything is applied
/// (`Refused`); a record that passes them and cannot be applied means
/// this index is not the source's (`Fault`: the writer stops).
fn apply_replicated(
    state: &mut EngineState,
    recs: &[Vec<u8>],
    last: u64,
    overlay: &mut (impl crate::index::IndexWrite + crate::index::IndexRead),
) -> std::result::Result<Vec<Record>, Executed> {
    let mut out = Vec::with_capacity(recs.len());
    for (i, v) in recs.iter().enumerate() {
        let want = last + 1 + i as u64;
        match record::decode_record(v, Some(want)) {
            Ok(r) => out.push(r),
            Err(e) => {
                return Err(Executed::Refused(Error::corrupt(
                    "replicated record",
                    format!("record {want} from the source: {e}"),
                )))
            }
        }
    }
    for r in &out {
        let events = r.events.iter().map(crate::event::Event::borrowed);
        crate::engine::apply_events(events, overlay, state).map_err(Executed::Fault)?;
    }
    Ok(out)
}

/// The largest group the writer commits on its own thread (see the module
/// docs). A bigger one holds the writer through its fsync and all its
/// replies while the callers it answered first come back: at 64 callers,
/// committing every eligible group inline lost ~9% (medians of 8
/// alternated runs); with this bound, the same as through the threads. A
/// lone caller gains 25-45%.
const INLINE_MAX_COMMANDS: usize = 8;

/// The running syncer, applier and cache-growing threads.
struct Pipeline {
    /// Takes appended groups to the syncer.
    tx: crossbeam_channel::Sender<Appended>,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// Wakes the cache-growing thread, for the writer's inline commits.
    grower: Option<crossbeam_channel::Sender<()>>,
}

/// Initial capacity of a group's vector of requests.
const GROUP_CAPACITY: usize = 64;

/// Groups the writer may have appended ahead of the syncer.
const SYNC_QUEUE: usize = 64;

/// The later stages of group commit, in log order. The **syncer** makes
/// appended groups durable with one fsync for all the groups that arrived
/// since its last one; the **applier** writes their index changes while
/// that fsync runs; once both are done, the syncer publishes them: a
/// snapshot of the index for readers, the readers' cache, the committed
/// watermark and the replies. Each stage is its own thread, or both run
/// inline when a thread could not be started. A third thread grows the
/// readers' cache when a publish finds it full.
///
/// Only a publish makes anything visible to readers, and only after the
/// fsync: readers read RocksDB at the published snapshot, so a round's
/// index changes, in RocksDB before their fsync has finished, stay unseen
/// until it has. Nor can they reach the disk ahead of their log records:
/// the index is written without the WAL, and before RocksDB installs a
/// flushed table it syncs the WALs that the flush's memtable switch closed
/// (`SyncClosedWals` in RocksDB's `db_impl_compaction_flush.cc`), which
/// hold those records.
struct Committer {
    shared: Arc<Shared>,
    durability: Durability,
    /// Set once a sync or index write failed: nothing after it is committed.
    failed: Option<String>,
    /// Wakes the thread that grows the readers' cache; `None`: grow inline.
    grower: Option<crossbeam_channel::Sender<()>>,
}

impl Committer {
    fn new(shared: Arc<Shared>, durability: Durability) -> Committer {
        Committer {
            shared,
            durability,
            failed: None,
            grower: None,
        }
    }

    /// Starts the syncer and applier threads; `None` if either could not be
    /// started (the writer then commits inline). Also returns a way to wake
    /// the cache-growing thread, for the writer's own inline commits.
    ///
    /// The syncer hands each round (the groups one fsync covers) to the
    /// applier *before* its fsync, so that the index write and the fsync
    /// overlap; the applier hands the round back once it is written, and
    /// the syncer, whose fsync has returned by then, publishes it and takes
    /// its groups off `in_flight`.
    fn spawn(
        shared: &Arc<Shared>,
        durability: Durability,
        in_flight: &Arc<AtomicU64>,
    ) -> Option<Pipeline> {
        let (sync_tx, sync_rx) = crossbeam_channel::bounded::<Appended>(SYNC_QUEUE);
        // At most one round is at the applier: the syncer waits for it
        // before it takes the next.
        let (round_tx, round_rx) = crossbeam_channel::bounded::<Vec<Appended>>(1);
        // The round back, with why its index write failed, if it did.
        let (written_tx, written_rx) =
            crossbeam_channel::bounded::<(Vec<Appended>, Option<String>)>(1);
        // Grows the readers' cache when the syncer asks (one wake-up
        // pending at most); stops when its senders (the syncer's and the
        // writer's) are gone.
        let (grow_tx, grow_rx) = crossbeam_channel::bounded::<()>(1);
        let mut threads = Vec::new();
        let cache = shared.clone();
        let g = std::thread::Builder::new()
            .name("treelog-cache".into())
            .spawn(move || {
                for () in grow_rx {
                    cache.reader_cache.grow();
                }
            });
        let mut syncer = Committer::new(shared.clone(), durability);
        let mut writer_grower = None;
        if let Ok(g) = g {
            writer_grower = Some(grow_tx.clone());
            syncer.grower = Some(grow_tx);
            threads.push(g);
        }
        let mut applier = Committer::new(shared.clone(), durability);
        let a = std::thread::Builder::new()
            .name("treelog-applier".into())
            .spawn(move || {
                while let Ok(groups) = round_rx.recv() {
                    applier.write_index(&groups);
                    // The syncer stops only once it has its last round back.
                    if written_tx.send((groups, applier.failed.clone())).is_err() {
                        break;
                    }
                }
            })
            .ok()?;
        let in_flight = in_flight.clone();
        let s = std::thread::Builder::new()
            .name("treelog-syncer".into())
            .spawn(move || {
                while let Ok(first) = sync_rx.recv() {
                    let mut groups = vec![first];
                    groups.extend(sync_rx.try_iter());
                    let records = groups.iter().map(|g| g.records).sum();
                    let n = groups.len() as u64;
                    match round_tx.send(groups) {
                        Ok(()) => {
                            syncer.sync(records);
                            // Publishing here, on the thread that the fsync
                            // returned to, spares every round a wake-up of
                            // another thread (tens of microseconds on a busy
                            // machine) between its fsync and its replies;
                            // the next fsync waits for the publish, but
                            // covers the groups appended meanwhile.
                            match written_rx.recv() {
                                Ok((groups, failed)) => {
                                    if let Some(why) = failed {
                                        syncer.failed.get_or_insert(why);
                                    }
                                    syncer.publish(groups);
                                }
                                // The applier died with the round (its
                                // callers see their reply dropped): nothing
                                // after it may be committed.
                                Err(_) => {
                                    let why = "the index writer stopped".to_owned();
                                    syncer.shared.fail(why.clone());
                                    syncer.failed.get_or_insert(why);
                                }
                            }
                        }
                        // The applier is gone (a panic: it stops only when
                        // this sender is dropped): commit here.
                        Err(e) => syncer.commit(e.into_inner()),
                    }
                    in_flight.fetch_sub(n, Ordering::AcqRel);
                }
            });
        match s {
            Ok(s) => {
                threads.extend([s, a]);
                Some(Pipeline {
                    tx: sync_tx,
                    threads,
                    grower: writer_grower,
                })
            }
            // The applier stops once its senders (moved into the failed
            // closure) are dropped.
            Err(_) => {
                let _ = a.join();
                None
            }
        }
    }

    /// Every stage inline, in the same order as the threads.
    fn commit(&mut self, groups: Vec<Appended>) {
        self.write_index(&groups);
        self.sync(groups.iter().map(|g| g.records).sum());
        self.publish(groups);
    }

    /// Makes every group appended so far durable (`records` of them since
    /// the last sync): one fsync covers them all.
    fn sync(&mut self, records: u64) {
        if self.failed.is_none() && self.shared.failure().is_some() {
            // A later stage failed: syncing more is pointless.
            self.failed = self.shared.failure();
        }
        if self.failed.is_some() || records == 0 || self.durability != Durability::Sync {
            return;
        }
        let t = Instant::now();
        #[cfg(test)]
        if self.shared.inject.sync.load(Ordering::SeqCst) {
            self.failed = Some("injected fsync failure".into());
            return;
        }
        match self.shared.store.sync_log() {
            Ok(()) => {
                if let Some(m) = &self.shared.metrics {
                    m.wal_sync.observe(t.elapsed().as_secs_f64());
                }
            }
            Err(e) => self.failed = Some(format!("log sync failed: {e}")),
        }
    }

    /// Writes the groups' index changes (newer after older) with the new
    /// `applied_seq`, in one batch, which readers do not see until
    /// [`Committer::publish`].
    fn write_index(&mut self, groups: &[Appended]) {
        let Some(last) = groups.last() else {
            return;
        };
        let records: u64 = groups.iter().map(|g| g.records).sum();
        if self.failed.is_some() || records == 0 {
            return;
        }
        let t = Instant::now();
        #[cfg(test)]
        if self.shared.inject.index_write.load(Ordering::SeqCst) {
            self.failed = Some("injected index write failure".into());
            return;
        }
        let bytes: u64 = groups.iter().map(|g| g.bytes).sum();
        let store = &self.shared.store;
        let mut b = store.index_batch();
        let written = groups
            .iter()
            .try_for_each(|g| store.add_index_writes(&mut b, &g.writes))
            .and_then(|()| add_raft_meta(store, &mut b, groups))
            .and_then(|()| {
                let log_bytes = self.shared.retention.add_log_bytes(bytes);
                store.write_index_batch(b, last.seq, Some(log_bytes))
            });
        match written {
            Ok(()) => {
                if let Some(m) = &self.shared.metrics {
                    m.index_apply.observe(t.elapsed().as_secs_f64());
                }
            }
            // The records will be durable and replayed on restart, but this
            // process can no longer serve a consistent index.
            Err(e) => self.failed = Some(format!("index write failed: {e}")),
        }
    }

    /// Commits `groups` (in log order), durable and in the index now: a new
    /// snapshot for readers, the readers' cache, the watermark, then the
    /// replies. Refuses them all if a stage failed.
    fn publish(&mut self, groups: Vec<Appended>) {
        let Some(last) = groups.last() else {
            return;
        };
        let seq = last.seq;
        let records: u64 = groups.iter().map(|g| g.records).sum();
        if let Some(why) = &self.failed {
            self.shared.fail(why.clone());
            // Their records are in the WAL, maybe synced: a restart may
            // well replay them.
            for g in groups {
                Writer::refuse_all(g.requests, why, g.records > 0);
            }
            return;
        }
        let mut evicted = None;
        if records > 0 {
            let view = Arc::new(crate::readview::PublishedView {
                snap: self.shared.store.snapshot(),
                seq,
            });
            let mut decoded = Vec::with_capacity(records as usize);
            for g in &groups {
                decoded.extend(g.decoded.iter().cloned());
            }
            // Odd from before readers can see any of the round until they
            // see all of it, the watermark included, so that no sequence a
            // reader can observe is older than a state it read (see
            // `readview`).
            self.shared.publishing.fetch_add(1, Ordering::SeqCst);
            // The snapshot before the cache (see `reader_cache` on why): a
            // reader that sees the cache's new generation reads RocksDB at
            // this snapshot or a later one.
            self.shared.view.store(view);
            for g in &groups {
                self.shared.reader_cache.apply(&g.writes);
            }
            // Subscribers woken by the watermark find the records in memory.
            evicted = Some(self.shared.tail.extend(decoded));
            self.shared.committed.publish(seq);
            self.shared.publishing.fetch_add(1, Ordering::SeqCst);
        } else {
            self.shared.committed.publish(seq);
        }
        let commands: usize = groups.iter().map(|g| g.requests.len()).sum();
        let st = &self.shared.stats;
        st.groups.fetch_add(groups.len() as u64, Ordering::Relaxed);
        st.commands.fetch_add(commands as u64, Ordering::Relaxed);
        st.records.fetch_add(records, Ordering::Relaxed);
        for g in &groups {
            st.max_group_commands
                .fetch_max(g.requests.len() as u64, Ordering::Relaxed);
        }
        if let Some(m) = &self.shared.metrics {
            m.last_seq.set(seq as i64);
            m.applied_seq.set(seq as i64);
            m.log_bytes.set(self.shared.retention.log_bytes() as i64);
            let start = self.shared.retention.log_start();
            m.log_records.set((seq + 1).saturating_sub(start) as i64);
        }
        // The groups are committed and published: nothing here can fail
        // them. (Waking a caller is a syscall each; the syncer's next fsync
        // runs meanwhile.) Per-command counts are gathered while replying
        // and added after, one labelled-counter lookup per kind of command
        // and outcome rather than per command.
        let now = Instant::now();
        let mut counts: Vec<(&'static str, &'static str, u64)> = Vec::new();
        for g in groups {
            for (req, res) in g.requests.into_iter().zip(g.results) {
                if let Some(m) = &self.shared.metrics {
                    let outcome = match &res {
                        Ok(_) => "ok",
                        Err(e) => e.kind().as_str(),
                    };
                    let name = req.work.name();
                    match counts.iter_mut().find(|c| c.0 == name && c.1 == outcome) {
                        Some(c) => c.2 += 1,
                        None => counts.push((name, outcome, 1)),
                    }
                    m.end_to_end
                        .observe(now.saturating_duration_since(req.enqueued).as_secs_f64());
                }
                let _ = req.reply.send(res);
            }
        }
        if let Some(m) = &self.shared.metrics {
            for (name, outcome, n) in counts {
                m.ops.with_label_values(&[name, outcome]).inc_by(n);
            }
        }
        // Frees the records the tail cache let go, now that nobody waits.
        drop(evicted);
        // Room for the next groups' entries, made beside this thread (or
        // here, now that nobody waits on us, if that thread is missing).
        if self.shared.reader_cache.wants_growth() {
            match self.grower.as_ref().map(|g| g.try_send(())) {
                // Woken, or already going to wake.
                Some(Ok(()) | Err(crossbeam_channel::TrySendError::Full(()))) => {}
                _ => self.shared.reader_cache.grow(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::resolve;
    use crate::error::ErrorKind;
    use crate::format::meta;
    use crate::store::{Store, StoreOptions};

    fn mkdir(path: &str) -> Command {
        Command::Mkdir {
            path: path.into(),
            parents: false,
            mode: 0o755,
            owner: String::new(),
            group: String::new(),
        }
    }

    type ReplyRx = tokio::sync::oneshot::Receiver<Result<u64>>;

    fn request(cmd: Command) -> (Request, ReplyRx) {
        let (reply, rx) = tokio::sync::oneshot::channel();
        let r = Request {
            work: Work::Command(cmd),
            reply,
            enqueued: Instant::now(),
        };
        (r, rx)
    }

    /// A writer and syncer without their threads, so that a test decides
    /// when a group is appended and when it is committed.
    fn open(dir: &std::path::Path) -> (Arc<Shared>, Writer, Committer) {
        let store = Store::open(dir, &StoreOptions::default()).unwrap();
        let state = EngineState::load(&store.index()).unwrap();
        let shared = Arc::new(Shared::new(store, 16, 1024, None).unwrap());
        let w = Writer::new(shared.clone(), state, 0, 0, WriterConfig::default());
        let s = Committer::new(shared.clone(), Durability::Sync);
        (shared, w, s)
    }

    /// A read that met a publish is not kept, whether it failed or not:
    /// it may hold keys of two states. One that keeps meeting publishes is
    /// read once more at a pinned snapshot, without the cache.
    #[test]
    fn a_read_that_met_a_publish_is_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let (shared, _w, _s) = open(dir.path());
        // No publish beside it: its answer stands, error or not.
        let mut calls = 0;
        let r: Result<((), u64)> = shared.read(|_, _| {
            calls += 1;
            Err(Error::corrupt("index", "edge points nowhere"))
        });
        assert_eq!((r.unwrap_err().kind(), calls), (ErrorKind::Corruption, 1));
        // A publish ran beside the first attempt, which succeeded: read
        // again, and the second answer stands.
        let mut calls = 0;
        let r = shared.read(|_, _| {
            calls += 1;
            if calls == 1 {
                shared.publishing.fetch_add(2, Ordering::SeqCst);
            }
            Ok(calls)
        });
        assert_eq!(r.unwrap(), (2, 0));
        // Every fast attempt meets a publish: the last read is the pinned
        // one, and is kept whatever happens beside it.
        let mut calls = 0;
        let r = shared.read(|_, _| {
            calls += 1;
            shared.publishing.fetch_add(2, Ordering::SeqCst);
            Ok(calls)
        });
        assert_eq!(r.unwrap().0, 4);
        // A publish that never ends (a syncer that died in it): the read
        // goes to the pinned snapshot instead of waiting forever.
        shared.publishing.fetch_add(1, Ordering::SeqCst);
        let mut calls = 0;
        let r = shared.read(|_, _| {
            calls += 1;
            Ok(calls)
        });
        assert_eq!(r.unwrap().0, 1);
    }

    /// What a reader sees.
    fn stat_kind(shared: &Shared, path: &str) -> Option<ErrorKind> {
        resolve(&shared.reader_index(), &shared.names, path)
            .err()
            .map(|e| e.kind())
    }

    /// `applied_seq` at the snapshot readers read.
    fn published_applied_seq(shared: &Shared) -> Option<u64> {
        shared
            .store
            .index_at(&shared.view.load().snap)
            .meta_u64(meta::APPLIED_SEQ_KEY)
            .unwrap()
    }

    /// What RocksDB holds, committed or not.
    fn in_rocksdb(shared: &Shared, path: &str) -> bool {
        resolve(&shared.store.index(), &shared.names, path).is_ok()
    }

    #[test]
    fn a_group_validates_against_appended_groups_that_readers_do_not_see_yet() {
        let dir = tempfile::tempdir().unwrap();
        let (shared, mut w, mut syncer) = open(dir.path());
        let (r1, mut rx1) = request(mkdir("/a"));
        let g1 = w.append_group(vec![r1]).unwrap();
        // In the WAL, not committed: not acknowledged, not visible.
        assert!(rx1.try_recv().is_err());
        assert_eq!(shared.committed.get(), 0);
        assert_eq!(stat_kind(&shared, "/a"), Some(ErrorKind::NotFound));
        // The writer sees it: /a/b needs /a, a second /a is refused.
        let (r2, mut rx2) = request(mkdir("/a/b"));
        let (r3, mut rx3) = request(mkdir("/a"));
        let g2 = w.append_group(vec![r2, r3]).unwrap();
        assert_eq!(w.pending.len(), 2);
        assert_eq!(stat_kind(&shared, "/a/b"), Some(ErrorKind::NotFound));

        syncer.commit(vec![g1, g2]);
        assert_eq!(rx1.try_recv().unwrap().unwrap(), 1);
        assert_eq!(rx2.try_recv().unwrap().unwrap(), 2);
        assert_eq!(
            rx3.try_recv().unwrap().unwrap_err().kind(),
            ErrorKind::AlreadyExists
        );
        assert_eq!(shared.committed.get(), 2);
        assert_eq!(stat_kind(&shared, "/a/b"), None);
        assert_eq!(shared.store.applied_seq().unwrap(), 2);

        // The next group forgets what the index holds now.
        let (r4, _rx4) = request(mkdir("/a/b/c"));
        let _g3 = w.append_group(vec![r4]).unwrap();
        assert_eq!(w.pending.len(), 1);
    }

    #[test]
    fn readers_do_not_see_an_index_write_until_its_fsync_has_succeeded() {
        let dir = tempfile::tempdir().unwrap();
        let (shared, mut w, mut c) = open(dir.path());
        // A reader's view made before the commit reads at the snapshot
        // published last when it reads, not when it was made (the readers'
        // cache depends on it: see `PublishedIndex`).
        let reader = shared.reader_index();
        let (r1, mut rx1) = request(mkdir("/a"));
        let g1 = w.append_group(vec![r1]).unwrap();
        // The applier's step, as while the fsync runs.
        c.write_index(std::slice::from_ref(&g1));
        assert!(in_rocksdb(&shared, "/a"));
        assert_eq!(stat_kind(&shared, "/a"), Some(ErrorKind::NotFound));
        assert_eq!(published_applied_seq(&shared), Some(0));
        assert!(rx1.try_recv().is_err());
        c.sync(g1.records);
        assert_eq!(stat_kind(&shared, "/a"), Some(ErrorKind::NotFound));
        c.publish(vec![g1]);
        assert_eq!(rx1.try_recv().unwrap().unwrap(), 1);
        assert_eq!(stat_kind(&shared, "/a"), None);
        assert!(resolve(&reader, &shared.names, "/a").is_ok());
        assert_eq!(published_applied_seq(&shared), Some(1));

        // A round whose fsync fails stays unseen, though RocksDB has it.
        let (r2, mut rx2) = request(mkdir("/b"));
        let g2 = w.append_group(vec![r2]).unwrap();
        c.write_index(std::slice::from_ref(&g2));
        c.failed = Some("injected fsync failure".into());
        c.publish(vec![g2]);
        assert!(in_rocksdb(&shared, "/b"));
        assert_eq!(stat_kind(&shared, "/b"), Some(ErrorKind::NotFound));
        // Its record is in the WAL: a restart may replay it.
        assert_eq!(
            rx2.try_recv().unwrap().unwrap_err().kind(),
            ErrorKind::OutcomeUnknown
        );
        assert_eq!(shared.committed.get(), 1);
    }

    /// Through the syncer and applier threads: a round whose fsync or
    /// index write failed is refused, not published, and so is every round
    /// after it, though their own fsyncs and writes succeed.
    fn pipeline_failure_stops_the_commits(inject: impl Fn(&Shared, bool)) {
        let dir = tempfile::tempdir().unwrap();
        let (shared, mut w, _c) = open(dir.path());
        let in_flight = Arc::new(AtomicU64::new(0));
        let p = Committer::spawn(&shared, Durability::Sync, &in_flight).unwrap();
        let mut send = |path: &str| {
            let (r, rx) = request(mkdir(path));
            let g = w.append_group(vec![r]).unwrap();
            in_flight.fetch_add(1, Ordering::AcqRel);
            assert!(p.tx.send(g).is_ok());
            rx
        };
        assert_eq!(send("/a").blocking_recv().unwrap().unwrap(), 1);
        inject(&shared, true);
        let b = send("/b");
        // Appended before /b's failure is known, and handed over after it.
        let c = send("/c");
        // Both were appended to the WAL before they were refused.
        assert_eq!(
            b.blocking_recv().unwrap().unwrap_err().kind(),
            ErrorKind::OutcomeUnknown
        );
        inject(&shared, false);
        assert_eq!(
            c.blocking_recv().unwrap().unwrap_err().kind(),
            ErrorKind::OutcomeUnknown
        );
        assert!(shared.failure().is_some());
        assert_eq!(shared.committed.get(), 1);
        assert_eq!(stat_kind(&shared, "/a"), None);
        for path in ["/b", "/c"] {
            assert_eq!(stat_kind(&shared, path), Some(ErrorKind::NotFound));
        }
        // The threads stop once their senders are gone.
        drop((p.tx, p.grower));
        for t in p.threads {
            t.join().unwrap();
        }
        assert_eq!(in_flight.load(Ordering::Acquire), 0);
    }

    #[test]
    fn a_failed_fsync_in_the_pipeline_stops_the_commits() {
        pipeline_failure_stops_the_commits(|s, on| s.inject.sync.store(on, Ordering::SeqCst));
    }

    #[test]
    fn a_failed_index_write_in_the_pipeline_stops_the_commits() {
        pipeline_failure_stops_the_commits(|s, on| {
            s.inject.index_write.store(on, Ordering::SeqCst)
        });
    }

    #[test]
    fn a_failed_commit_refuses_its_groups_and_stops_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let (shared, mut w, mut syncer) = open(dir.path());
        let (r1, mut rx1) = request(mkdir("/a"));
        let g1 = w.append_group(vec![r1]).unwrap();
        syncer.commit(vec![g1]);
        assert_eq!(rx1.try_recv().unwrap().unwrap(), 1);

        let (r2, mut rx2) = request(mkdir("/b"));
        let g2 = w.append_group(vec![r2]).unwrap();
        // As after a failed fsync: nothing of the group may be acknowledged.
        syncer.failed = Some("injected".into());
        syncer.commit(vec![g2]);
        assert_eq!(
            rx2.try_recv().unwrap().unwrap_err().kind(),
            ErrorKind::OutcomeUnknown
        );
        assert_eq!(shared.committed.get(), 1);
        assert_eq!(stat_kind(&shared, "/b"), Some(ErrorKind::NotFound));
        // The writer refuses everything after it, before the log: not
        // applied.
        let (r3, mut rx3) = request(mkdir("/c"));
        assert!(w.append_group(vec![r3]).is_none());
        assert_eq!(
            rx3.try_recv().unwrap().unwrap_err().kind(),
            ErrorKind::WriterStopped
        );
    }
}
