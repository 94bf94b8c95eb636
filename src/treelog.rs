//! [`Treelog`]: the embedded store's public API.
//!
//! Mutations go to the single writer and return the sequence number of their
//! log record once it is durable and applied. Reads go straight to RocksDB on
//! the caller's thread and never wait for the writer.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Sender, TrySendError};

use crate::command::Command;
use crate::engine::{self, EngineState};
use crate::error::{Error, Result};
use crate::format::ROOT_ID;
use crate::index::IndexRead;
use crate::names::Names;
use crate::path;
use crate::readview::{Read, ReadAt};
use crate::replica::{self, ReplicaState};
use crate::retention::{CursorInfo, RetentionPolicy, RetentionReport};
use crate::store::{Store, StoreOptions};
use crate::stream::{SubscribeOptions, Subscription};
use crate::supervisor::{Stop, Supervisor};
use crate::types::{
    Bytes, ContentSummary, Inode, ListPage, Xattr, XattrFlag, DEFAULT_BLOCK_SIZE, DEFAULT_DIR_MODE,
    DEFAULT_FILE_MODE,
};
use crate::watermark::Watermark;
use crate::writer::{Request, Shared, Work, Writer, WriterConfig, WriterStatsSnapshot};
use treelog_proto::protocol::{NodeStatus, ReplicateFrom};

pub use crate::writer::Durability;

/// How to open a [`Treelog`].
#[derive(Debug, Clone)]
pub struct Options {
    pub store: StoreOptions,
    pub writer: WriterConfig,
    /// Capacity of the bounded command queue in front of the writer.
    pub queue_capacity: usize,
    /// Log retention; passes run in the background every
    /// `retention.interval` (default 10 s) when any bound is set.
    pub retention: RetentionPolicy,
    /// Recent records kept decoded in memory for caught-up subscribers.
    pub tail_cache_records: usize,
    /// Collect Prometheus metrics (see [`crate::metrics`]).
    pub metrics: bool,
    /// Subscribers and watermark waiters are woken by a notifier thread at
    /// most once per this interval (zero: the writer wakes them directly on
    /// every group).
    pub wake_interval: Duration,
    /// Index entries (inodes and edges) kept in memory for readers (see
    /// [`crate::reader_cache`]); about 130 bytes each. Zero disables it.
    pub read_cache_entries: usize,
    /// Open as a replica (see [`crate::replica`]): commands are refused
    /// with `NotLeader`, records come from [`Treelog::replicate`].
    pub replica: Option<Arc<ReplicaState>>,
    /// How long a read at `ReadAt::AtLeast(seq)` waits for this node to
    /// commit `seq` before it fails (`Lagging` on a replica).
    pub min_seq_wait: Duration,
    /// Open as a node of a Raft cluster (see [`crate::raft`]): the log is
    /// Raft's, commands are proposed while this node leads and refused
    /// with `NotLeader` while it follows.
    pub raft: Option<crate::raft::RaftOptions>,
    /// Most inodes a content summary ([`Treelog::count`]) reads where no
    /// quota keeps the usage (`InvalidArgument` beyond).
    pub max_count_inodes: usize,
    /// Migrate a database of an older format version before opening it,
    /// as `treelog admin migrate` does ([`crate::migrate`]); without it,
    /// such a database is refused.
    pub migrate: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            store: StoreOptions::default(),
            writer: WriterConfig::default(),
            queue_capacity: 4096,
            retention: RetentionPolicy::default(),
            tail_cache_records: 8192,
            metrics: true,
            wake_interval: Duration::from_micros(500),
            read_cache_entries: 1 << 19,
            replica: None,
            min_seq_wait: Duration::from_secs(5),
            raft: None,
            max_count_inodes: DEFAULT_MAX_COUNT_INODES,
            migrate: false,
        }
    }
}

/// The default of [`Options::max_count_inodes`].
pub const DEFAULT_MAX_COUNT_INODES: usize = 1_000_000;

impl Options {
    pub fn durability(mut self, d: Durability) -> Self {
        self.writer.durability = d;
        self
    }
}

/// What happened while opening.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct OpenReport {
    /// Records replayed into the index.
    pub replayed: u64,
    pub applied_seq: u64,
    pub log_start: u64,
}

/// Options of a directory creation.
#[derive(Debug, Clone)]
pub struct MkdirOptions {
    pub parents: bool,
    pub mode: u32,
    pub owner: String,
    pub group: String,
}

impl Default for MkdirOptions {
    fn default() -> Self {
        MkdirOptions {
            parents: false,
            mode: DEFAULT_DIR_MODE,
            owner: String::new(),
            group: String::new(),
        }
    }
}

/// Options of a file creation.
#[derive(Debug, Clone)]
pub struct CreateOptions {
    pub parents: bool,
    pub mode: u32,
    pub owner: String,
    pub group: String,
    pub block_size: u64,
}

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions {
            parents: false,
            mode: DEFAULT_FILE_MODE,
            owner: String::new(),
            group: String::new(),
            block_size: DEFAULT_BLOCK_SIZE,
        }
    }
}

/// Attribute changes; `None` leaves a field as it is.
#[derive(Debug, Clone, Default)]
pub struct SetAttrs {
    pub mode: Option<u32>,
    pub owner: Option<String>,
    pub group: Option<String>,
    pub mtime_ms: Option<u64>,
}

/// The reply of a pipelined command.
pub struct PendingCommit {
    rx: tokio::sync::oneshot::Receiver<Result<u64>>,
}

impl PendingCommit {
    /// Blocks until the command is committed or refused.
    pub fn wait(self) -> Result<u64> {
        self.rx.blocking_recv().map_err(|_| reply_lost())?
    }

    /// Waits asynchronously.
    pub async fn wait_async(self) -> Result<u64> {
        self.rx.await.map_err(|_| reply_lost())?
    }
}

/// The writer drops a reply only when it dies (it answers every command it
/// takes, also at shutdown): the command may have reached the log.
fn reply_lost() -> Error {
    Error::OutcomeUnknown("the writer thread ended without replying".into())
}

/// An open treelog store.
pub struct Treelog {
    shared: Arc<Shared>,
    tx: Option<Sender<Request>>,
    /// Every thread of this store (see [`crate::supervisor`]).
    threads: Supervisor,
    report: OpenReport,
    /// Set on a replica.
    pub(crate) replica: Option<Arc<ReplicaState>>,
    replica_metrics: Option<crate::metrics::ReplicaMetrics>,
    min_seq_wait: Duration,
    max_count_inodes: usize,
}

impl Treelog {
    /// Opens (creating if needed) the store at `dir`, replays the log into
    /// the index, and starts the writer.
    pub fn open(dir: impl AsRef<Path>, opts: Options) -> Result<Treelog> {
        Self::open_with_progress(dir, opts, |_, _| {})
    }

    pub fn open_with_progress(
        dir: impl AsRef<Path>,
        opts: Options,
        progress: impl FnMut(u64, u64),
    ) -> Result<Treelog> {
        let metrics = if opts.metrics {
            Some(Arc::new(crate::metrics::Metrics::new().map_err(|e| {
                Error::InvalidArgument(format!("cannot register metrics: {e}"))
            })?))
        } else {
            None
        };
        if opts.migrate {
            crate::migrate::migrate_if_needed(dir.as_ref(), &opts.store)?;
        }
        let store = Store::open(dir.as_ref(), &opts.store)?;
        crate::raft::claim(&store, opts.raft.as_ref())?;
        if opts.raft.is_some() {
            crate::raft::finish_install(&store)?;
        }
        if let Some(m) = &metrics {
            m.replaying.set(1);
        }
        let replayed = crate::recovery::replay(&store, progress)?;
        if let Some(m) = &metrics {
            m.replaying.set(0);
            m.replay_records.inc_by(replayed);
        }
        let state = EngineState::load(&store.index())?;
        // A Raft node's log may hold entries after the last committed one,
        // which replay leaves for Raft: the writer goes on from the index.
        let last_seq = store.applied_seq()?;
        debug_assert!(opts.raft.is_some() || last_seq == store.last_log_seq()?);
        let applied = last_seq;
        let log_start = store.log_start()?;
        if log_start > 1 {
            // A crash between persisting a new start and the range deletion
            // leaves records below it; remove them (idempotent).
            store.delete_log_below(log_start)?;
        }
        let last_time = crate::recovery::last_record_time(&store, last_seq)?;
        let raft_writer = match &opts.raft {
            Some(_) => {
                let a = crate::raft::AppliedState::load(&store)?;
                // A single node's store that became a cluster's first node
                // applied its records as term 0.
                let applied_id =
                    a.applied
                        .or((applied > 0).then_some(crate::format::meta::RaftLogId {
                            term: 0,
                            node: 0,
                            index: applied,
                        }));
                Some(crate::writer::RaftWriter::new(
                    state.clone(),
                    last_time,
                    applied_id,
                ))
            }
            None => None,
        };
        let shared = Arc::new(Shared::new(
            store,
            opts.tail_cache_records,
            opts.read_cache_entries,
            metrics,
        )?);
        let mut threads = Supervisor::default();
        if !opts.wake_interval.is_zero() {
            let (sh, stopper) = (shared.clone(), shared.clone());
            let every = opts.wake_interval;
            threads.spawn(
                "treelog-notifier",
                Stop::Signal(Box::new(move || stopper.committed.stop_notifier())),
                move || sh.committed.run_notifier(every),
            )?;
        }
        let (tx, rx) = crossbeam_channel::bounded(opts.queue_capacity.max(1));
        let mut w = Writer::new(shared.clone(), state, last_seq, last_time, opts.writer);
        if let Some(r) = raft_writer {
            w = w.with_raft(r);
        }
        threads.spawn("treelog-writer", Stop::InputClosed, move || w.run(rx))?;
        if !opts.retention.is_unbounded() {
            let (sh, policy) = (shared.clone(), opts.retention.clone());
            let interval = policy.interval.unwrap_or(Duration::from_secs(10));
            threads.spawn_periodic("treelog-retention", interval, move || {
                if let Err(e) = sh.run_retention(&policy) {
                    tracing::warn!(error = %e, "retention pass failed");
                }
            })?;
        }
        let replica_metrics = match (&opts.replica, &shared.metrics) {
            (Some(_), Some(m)) => Some(m.register_replica().map_err(|e| {
                Error::InvalidArgument(format!("cannot register replica metrics: {e}"))
            })?),
            _ => None,
        };
        if let Some(r) = &opts.replica {
            r.set_applied_time_ms(last_time);
        }
        Ok(Treelog {
            replica: opts.replica.clone(),
            replica_metrics,
            min_seq_wait: opts.min_seq_wait,
            max_count_inodes: opts.max_count_inodes,
            shared,
            tx: Some(tx),
            threads,
            report: OpenReport {
                replayed,
                applied_seq: applied,
                log_start,
            },
        })
    }

    /// This store's replica state, when it is a replica
    /// (`Options::replica`).
    pub fn replica_state(&self) -> Option<&Arc<ReplicaState>> {
        self.replica.as_ref()
    }

    fn check_leader(&self) -> Result<()> {
        replica::check_leader(self.replica.as_deref())
    }

    /// The error of a read at `ReadAt::AtLeast(seq)` that waited `waited`
    /// in vain: `Lagging` on a replica, `Busy` on a leader.
    pub fn not_caught_up(&self, seq: u64, waited: Duration) -> Error {
        replica::not_caught_up(&self.shared, self.replica.as_deref(), seq, waited)
    }

    /// Appends and applies records of the source (stored bytes, in order,
    /// continuing this log): durable and visible when this returns, with
    /// the sequence of the last. A batch that does not continue the log or
    /// fails a checksum is refused whole (`Corruption`) and nothing of it
    /// is applied. Only on a replica.
    pub async fn replicate(&self, records: Vec<Vec<u8>>) -> Result<u64> {
        let (work, last_time) = replica::replicated(self.replica.as_deref(), records)?;
        let seq = self.send_async(work).await?;
        if let (Some(r), Some(t)) = (&self.replica, last_time) {
            r.set_applied_time_ms(t);
        }
        Ok(seq)
    }

    /// Checks that a replica asking for records from `req.from` continues
    /// this store's history (see [`crate::replica`]).
    pub fn check_replica(&self, req: &ReplicateFrom) -> Result<()> {
        replica::check_replica(&self.shared, req)
    }

    /// Keeps the durable cursor `name` at a replica's position `applied`,
    /// so that retention keeps the records after it.
    pub fn hold_for_replica(&self, name: &str, applied: u64) -> Result<()> {
        replica::hold_for_replica(&self.shared, name, applied)
    }

    /// Committed records from `from` as stored, for a replica: at most
    /// `max_bytes` of them (at least one); `Compacted` when retention has
    /// removed `from`.
    pub fn replication_batch(&self, from: u64, max_bytes: usize) -> Result<Vec<Vec<u8>>> {
        replica::replication_batch(&self.shared, from, max_bytes)
    }

    /// A Raft node's log, for Raft's storage (see [`crate::raft`]).
    pub fn raft_log(&self) -> crate::raft::RaftLog<'_> {
        crate::raft::RaftLog {
            store: &self.shared.store,
        }
    }

    /// A Raft node's state machine position (the last entry applied and
    /// the last membership), as the index holds it.
    pub fn raft_applied(&self) -> Result<crate::raft::AppliedState> {
        crate::raft::AppliedState::load(&self.shared.store)
    }

    /// Applies a Raft node's committed entries (log values already in its
    /// log, in order) to the index: visible to readers and subscribers
    /// when this returns, with the sequence of the last.
    pub async fn raft_apply(&self, entries: Vec<Vec<u8>>) -> Result<u64> {
        self.send_async(Work::RaftApply(entries)).await
    }

    /// This Raft node leads under `tag` from now on (call it once every
    /// entry committed before the leader's first one is applied): its
    /// writer validates commands and hands their records to `proposer`.
    pub async fn raft_lead(
        &self,
        tag: crate::format::record::LeaderTag,
        proposer: Arc<dyn crate::raft::Proposer>,
    ) -> Result<u64> {
        self.send_async(Work::RaftLead { tag, proposer }).await
    }

    /// Installs a Raft snapshot (the verified database at `dir`, made by
    /// `backup::restore`) as this node's index; returns its sequence.
    /// Crash-safe: an interrupted install is finished by the next open.
    pub async fn raft_install(&self, dir: std::path::PathBuf) -> Result<u64> {
        self.send_async(Work::RaftInstall { dir }).await
    }

    /// Raft purged its log up to `id`: the log goes too, as far as durable
    /// cursors allow. Returns the log's new start.
    pub fn raft_purge(&self, id: &crate::format::meta::RaftLogId) -> Result<u64> {
        self.shared
            .retention
            .raft_purge(&self.shared.store, &self.shared.tail, id)
    }

    /// This Raft node follows from now on: commands are refused with
    /// `NotLeader` naming `leader`.
    pub async fn raft_follow(&self, leader: Option<String>) -> Result<u64> {
        self.send_async(Work::RaftFollow { leader }).await
    }

    /// The node's role and positions (`admin status`).
    pub fn status(&self) -> NodeStatus {
        replica::status(&self.shared, self.replica.as_deref())
    }

    pub fn open_report(&self) -> OpenReport {
        self.report
    }

    pub fn store(&self) -> &Store {
        &self.shared.store
    }

    /// Highest committed (durable and applied) sequence number.
    pub fn committed_seq(&self) -> u64 {
        self.shared.committed.get()
    }

    /// The committed watermark, to wait on.
    pub fn watermark(&self) -> &Watermark {
        &self.shared.committed
    }

    pub fn writer_stats(&self) -> WriterStatsSnapshot {
        self.shared.stats.snapshot()
    }

    /// Why the writer stopped, if it has.
    pub fn writer_failure(&self) -> Option<String> {
        self.shared.failure()
    }

    fn sender(&self) -> Result<&Sender<Request>> {
        self.tx.as_ref().ok_or(Error::ShuttingDown)
    }

    /// Submits a command and blocks until it is committed or refused.
    /// Returns the sequence number of its record (for a no-op, the committed
    /// sequence it was decided against).
    pub fn submit(&self, cmd: Command) -> Result<u64> {
        self.check_leader()?;
        let (reply, rx) = tokio::sync::oneshot::channel();
        self.sender()?
            .send(Request {
                work: Work::Command(cmd),
                reply,
                enqueued: Instant::now(),
            })
            .map_err(|_| Error::ShuttingDown)?;
        rx.blocking_recv().map_err(|_| reply_lost())?
    }

    /// Queues a command without waiting for it (pipelining); commands from
    /// one thread are executed in the order they were queued. Blocks only
    /// while the queue is full.
    pub fn submit_pipelined(&self, cmd: Command) -> Result<PendingCommit> {
        self.check_leader()?;
        let (reply, rx) = tokio::sync::oneshot::channel();
        self.sender()?
            .send(Request {
                work: Work::Command(cmd),
                reply,
                enqueued: Instant::now(),
            })
            .map_err(|_| Error::ShuttingDown)?;
        Ok(PendingCommit { rx })
    }

    /// Submits a command from async code without blocking the runtime.
    pub async fn submit_async(&self, cmd: Command) -> Result<u64> {
        self.check_leader()?;
        self.send_async(Work::Command(cmd)).await
    }

    /// Hands `work` to the writer from async code and waits for its reply.
    pub(crate) async fn send_async(&self, work: Work) -> Result<u64> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        let req = Request {
            work,
            reply,
            enqueued: Instant::now(),
        };
        match self.sender()?.try_send(req) {
            Ok(()) => {}
            Err(TrySendError::Disconnected(_)) => return Err(Error::ShuttingDown),
            Err(TrySendError::Full(req)) => {
                // Back-pressure: wait for room on a blocking-pool thread.
                let tx = self.sender()?.clone();
                // (The request is dropped on failure, not returned.)
                tokio::task::spawn_blocking(move || tx.send(req).map_err(drop))
                    .await
                    .map_err(|_| Error::ShuttingDown)?
                    .map_err(|_| Error::ShuttingDown)?;
            }
        }
        rx.await.map_err(|_| reply_lost())?
    }

    pub fn mkdir(&self, path: &str, o: MkdirOptions) -> Result<u64> {
        self.submit(Command::Mkdir {
            path: path.to_owned(),
            parents: o.parents,
            mode: o.mode,
            owner: o.owner,
            group: o.group,
        })
    }

    /// `mkdir -p` with default attributes.
    pub fn mkdir_p(&self, path: &str) -> Result<u64> {
        self.mkdir(
            path,
            MkdirOptions {
                parents: true,
                ..Default::default()
            },
        )
    }

    pub fn create(&self, path: &str, o: CreateOptions) -> Result<u64> {
        self.submit(Command::Create {
            path: path.to_owned(),
            parents: o.parents,
            mode: o.mode,
            owner: o.owner,
            group: o.group,
            block_size: o.block_size,
        })
    }

    pub fn complete(&self, path: &str, size: u64) -> Result<u64> {
        self.submit(Command::Complete {
            path: path.to_owned(),
            size,
        })
    }

    pub fn set_size(&self, path: &str, size: u64) -> Result<u64> {
        self.submit(Command::SetSize {
            path: path.to_owned(),
            size,
        })
    }

    pub fn set_attrs(&self, path: &str, a: SetAttrs) -> Result<u64> {
        self.submit(Command::SetAttr {
            path: path.to_owned(),
            mode: a.mode,
            owner: a.owner,
            group: a.group,
            mtime_ms: a.mtime_ms,
        })
    }

    pub fn delete(&self, path: &str, recursive: bool) -> Result<u64> {
        self.submit(Command::Delete {
            path: path.to_owned(),
            recursive,
        })
    }

    pub fn rename(&self, src: &str, dst: &str, overwrite: bool) -> Result<u64> {
        self.submit(Command::Rename {
            src: src.to_owned(),
            dst: dst.to_owned(),
            overwrite,
        })
    }

    /// `ln -s TARGET PATH`: a symbolic link (see [`Command::Symlink`]).
    pub fn symlink(&self, target: &str, path: &str, o: MkdirOptions) -> Result<u64> {
        self.submit(Command::Symlink {
            target: target.to_owned(),
            path: path.to_owned(),
            parents: o.parents,
            owner: o.owner,
            group: o.group,
        })
    }

    /// Sets an extended attribute (see [`Command::SetXattr`]).
    pub fn set_xattr(&self, path: &str, name: &str, value: &[u8], flag: XattrFlag) -> Result<u64> {
        self.submit(Command::SetXattr {
            path: path.to_owned(),
            name: name.to_owned(),
            value: value.to_vec().into(),
            flag,
        })
    }

    pub fn remove_xattr(&self, path: &str, name: &str) -> Result<u64> {
        self.submit(Command::RemoveXattr {
            path: path.to_owned(),
            name: name.to_owned(),
        })
    }

    /// Gives the directory `path` a quota, or changes its limits (see
    /// [`Command::SetQuota`]).
    pub fn set_quota(&self, path: &str, inodes: Option<u64>, bytes: Option<u64>) -> Result<u64> {
        self.submit(Command::SetQuota {
            path: path.to_owned(),
            inodes,
            bytes,
        })
    }

    pub fn clear_quota(&self, path: &str) -> Result<u64> {
        self.submit(Command::ClearQuota {
            path: path.to_owned(),
        })
    }

    // -- reads ---------------------------------------------------------------

    fn count_read<T>(&self, op: usize, lookups: u64, r: &Result<T>) {
        if let Some(m) = &self.shared.metrics {
            m.read(op, r.as_ref().err().map(|e| e.kind().as_str()), lookups);
        }
    }

    pub fn stat(&self, path: &str) -> Result<Inode> {
        self.stat_at(path, ReadAt::Latest).map(|r| r.value)
    }

    /// Stat at a committed state (see [`ReadAt`]); the reply says which.
    pub fn stat_at(&self, path: &str, at: ReadAt) -> Result<Read<Inode>> {
        let r = self.read_at(at, |idx, dicts| engine::resolve(idx, dicts, path));
        self.count_read(
            0,
            path.split('/').filter(|c| !c.is_empty()).count() as u64,
            &r,
        );
        r
    }

    pub fn stat_id(&self, id: u64) -> Result<Inode> {
        self.stat_id_at(id, ReadAt::Latest).map(|r| r.value)
    }

    pub fn stat_id_at(&self, id: u64, at: ReadAt) -> Result<Read<Inode>> {
        let r = self.read_at(at, |idx, dicts| {
            engine::get_inode(idx, dicts, id)?.ok_or(Error::InodeNotFound(id))
        });
        self.count_read(1, 0, &r);
        r
    }

    /// The current path of an inode.
    pub fn path_of(&self, id: u64) -> Result<String> {
        self.read_at(ReadAt::Latest, |idx, _| engine::path_of(idx, id))
            .map(|r| r.value)
    }

    /// One page of a directory listing: names after `start_after` in byte
    /// order, at most `limit` of them.
    pub fn list(&self, dir: &str, start_after: Option<&str>, limit: usize) -> Result<ListPage> {
        self.list_at(dir, start_after, limit, ReadAt::Latest)
            .map(|r| r.value)
    }

    /// A listing page at a committed state (see [`ReadAt`]): the next page
    /// of a consistent listing asks for `ReadAt::Exactly(page.seq)`, after
    /// [`Treelog::pin_view`] if the state may move meanwhile.
    pub fn list_at(
        &self,
        dir: &str,
        start_after: Option<&str>,
        limit: usize,
        at: ReadAt,
    ) -> Result<Read<ListPage>> {
        let r = self.read_at(at, |idx, dicts| {
            list_page(idx, dicts, dir, start_after, limit)
        });
        self.count_read(
            2,
            dir.split('/').filter(|c| !c.is_empty()).count() as u64,
            &r,
        );
        r
    }

    /// The target of the symbolic link at `path`.
    pub fn readlink(&self, path: &str) -> Result<String> {
        self.readlink_at(path, ReadAt::Latest).map(|r| r.value)
    }

    pub fn readlink_at(&self, path: &str, at: ReadAt) -> Result<Read<String>> {
        self.read_at(at, |idx, names| engine::readlink(idx, names, path))
    }

    /// The extended attribute `name` of `path` (`NotFound` without it).
    pub fn get_xattr(&self, path: &str, name: &str) -> Result<Bytes> {
        let mut all = self.xattrs_at(path, Some(name), ReadAt::Latest)?.value;
        Ok(all.pop().map(|x| x.value).unwrap_or_default())
    }

    /// Every extended attribute of `path`, in name order.
    pub fn list_xattrs(&self, path: &str) -> Result<Vec<Xattr>> {
        self.xattrs_at(path, None, ReadAt::Latest).map(|r| r.value)
    }

    /// The extended attribute `name` of `path`, or all of them.
    pub fn xattrs_at(
        &self,
        path: &str,
        name: Option<&str>,
        at: ReadAt,
    ) -> Result<Read<Vec<Xattr>>> {
        self.read_at(at, |idx, names| engine::get_xattrs(idx, names, path, name))
    }

    /// The usage under `path`, the path itself included (`count`, `du
    /// -s`): from its quota's counters when it has one, else by a walk of
    /// at most [`Options::max_count_inodes`] inodes at one state.
    pub fn count(&self, path: &str) -> Result<ContentSummary> {
        self.count_at(path, ReadAt::Latest).map(|r| r.value)
    }

    pub fn count_at(&self, path: &str, at: ReadAt) -> Result<Read<ContentSummary>> {
        let max = self.max_count_inodes;
        if let ReadAt::Latest = at {
            // A walk reads many keys: at one pinned state, not through the
            // cache that moves under it.
            let view = self.shared.view.load_full();
            let value = self.shared.read_at(&view, |idx, names| {
                engine::content_summary(idx, names, path, max)
            })?;
            return Ok(Read {
                value,
                seq: view.seq,
            });
        }
        self.read_at(at, |idx, names| {
            engine::content_summary(idx, names, path, max)
        })
    }

    /// Runs `read` at the state `at` asks for.
    fn read_at<T>(
        &self,
        at: ReadAt,
        mut read: impl FnMut(&dyn IndexRead, &Names) -> Result<T>,
    ) -> Result<Read<T>> {
        match at {
            // A node of a Raft cluster serves a linearizable read as
            // `AtLeast` the leader's read index (`treelog-raft`); alone, the
            // newest committed state is linearizable.
            ReadAt::Latest | ReadAt::Linearizable => {}
            ReadAt::AtLeast(seq) => {
                if !self.shared.committed.wait_for(seq, self.min_seq_wait) {
                    return Err(self.not_caught_up(seq, self.min_seq_wait));
                }
            }
            ReadAt::Exactly(seq) => {
                if let Some(v) = self.shared.retained.get(seq) {
                    let value = self.shared.read_at(&v, &mut read)?;
                    return Ok(Read { value, seq });
                }
                let (value, latest) = self.shared.read(&mut read)?;
                return if latest == seq {
                    Ok(Read { value, seq })
                } else {
                    Err(crate::readview::not_retained(seq, latest))
                };
            }
        }
        let (value, seq) = self.shared.read(read)?;
        Ok(Read { value, seq })
    }

    /// Retains the newest committed state for reads at
    /// `ReadAt::Exactly(seq)` (returned) until [`Treelog::unpin_view`],
    /// or until it has been idle for a minute or is ten minutes old. At
    /// most 1,024 states are pinned at once (`Busy` beyond).
    pub fn pin_view(&self) -> Result<u64> {
        self.shared.retained.pin(self.shared.view.load_full())
    }

    /// Releases a pin of [`Treelog::pin_view`]; false if it had expired.
    pub fn unpin_view(&self, seq: u64) -> bool {
        self.shared.retained.unpin(seq)
    }

    /// Every entry of a directory (all pages), at one committed state.
    pub fn list_all(&self, dir: &str) -> Result<Vec<crate::types::DirEntry>> {
        let mut out = Vec::new();
        self.visit_all(dir, &mut |e| {
            out.push(std::mem::take(e));
            Ok(())
        })?;
        Ok(out)
    }

    /// Lends every entry of a directory to `f`, in name order, at one
    /// committed state (whose sequence it returns): each entry is decoded
    /// into the same `DirEntry`, so that a caller that keeps nothing
    /// allocates nothing per entry, and a directory of any size is listed
    /// in the memory of a page. An error from `f` stops the listing.
    pub fn list_each(
        &self,
        dir: &str,
        mut f: impl FnMut(&crate::types::DirEntry) -> Result<()>,
    ) -> Result<u64> {
        self.visit_all(dir, &mut |e| f(e))
    }

    /// Every page of `dir` at one state, each entry lent to `f` mutably
    /// (`list_all` takes them, `list_each` only looks).
    fn visit_all(
        &self,
        dir: &str,
        f: &mut dyn FnMut(&mut crate::types::DirEntry) -> Result<()>,
    ) -> Result<u64> {
        let view = self.shared.view.load_full();
        let mut entry = crate::types::DirEntry::default();
        let mut after: Option<String> = None;
        loop {
            // At a pinned state the read runs once: `f` sees each entry once.
            after = self.shared.read_at(&view, |idx, dicts| {
                let id = resolve_dir(idx, dicts, dir)?;
                engine::visit_children(idx, dicts, id, after.as_deref(), 1024, &mut entry, f)
            })?;
            if after.is_none() {
                return Ok(view.seq);
            }
        }
    }

    /// Visits `dir` and everything under it, depth first and in name order
    /// within each directory, at one committed state (whose sequence is
    /// returned): a tree that moves meanwhile is never seen half-moved.
    /// `visit` gets each entry's path and entry; the walk holds one page of
    /// each directory on its path in memory.
    pub fn walk(
        &self,
        dir: &str,
        mut visit: impl FnMut(&str, &crate::types::DirEntry) -> Result<()>,
    ) -> Result<u64> {
        let view = self.shared.view.load_full();
        let root = self
            .shared
            .read_at(&view, |idx, dicts| engine::resolve(idx, dicts, dir))?;
        if !root.attrs.kind.is_dir() {
            return Err(Error::NotADirectory(path::canonical(dir)?));
        }
        let mut walk = crate::readview::TreeWalk::new(root.id, path::canonical(dir)?, 1024);
        while let Some((p, e)) = self
            .shared
            .read_at(&view, |idx, dicts| walk.next(idx, dicts))?
        {
            visit(&p, &e)?;
        }
        Ok(view.seq)
    }

    pub fn root(&self) -> Result<Inode> {
        self.stat_id(ROOT_ID)
    }

    /// Waits until the committed watermark reaches `seq` (a token returned by
    /// a mutation, possibly on another handle).
    pub fn wait_for_seq(&self, seq: u64, timeout: Duration) -> bool {
        self.shared.committed.wait_for(seq, timeout)
    }

    // -- change streams -------------------------------------------------------

    /// Subscribes to the change stream (see [`crate::stream`]).
    pub fn subscribe(&self, o: SubscribeOptions) -> Result<Subscription> {
        let mut from = o.from;
        if let Some(name) = &o.cursor {
            let default_acked = match from {
                crate::stream::StartFrom::Seq(n) => n.max(1) - 1,
                _ => self.committed_seq(),
            };
            let existed = self.shared.retention.cursor_acked(name).is_some();
            let acked =
                self.shared
                    .retention
                    .open_cursor(&self.shared.store, name, default_acked)?;
            if existed || from != crate::stream::StartFrom::Snapshot {
                from = crate::stream::StartFrom::Seq(acked + 1);
            }
        }
        // Resync by default when the caller asked for a snapshot-based
        // model, whether or not a cursor made this run resume instead.
        let resync = o
            .resync_on_move_in
            .or(Some(o.from == crate::stream::StartFrom::Snapshot));
        Subscription::new(self.shared.clone(), o.filter, from, resync, o.cursor)
    }

    /// Acknowledges that the consumer of cursor `name` processed every record
    /// up to `seq`.
    pub fn ack(&self, name: &str, seq: u64) -> Result<()> {
        self.shared
            .retention
            .ack(&self.shared.store, self.committed_seq(), name, seq)
    }

    pub fn cursors(&self) -> Vec<CursorInfo> {
        self.shared.retention.list_cursors(self.committed_seq())
    }

    pub fn drop_cursor(&self, name: &str) -> Result<()> {
        self.shared.retention.drop_cursor(&self.shared.store, name)
    }

    /// Runs one retention pass now.
    pub fn run_retention(&self, policy: &RetentionPolicy) -> Result<RetentionReport> {
        self.shared.run_retention(policy)
    }

    /// The metrics registry, when metrics are on.
    pub fn metrics(&self) -> Option<&Arc<crate::metrics::Metrics>> {
        self.shared.metrics.as_ref()
    }

    /// Refreshes scrape-time gauges (RocksDB properties, watermarks,
    /// cursors) and renders the Prometheus text format.
    pub fn render_metrics(&self) -> String {
        let Some(m) = &self.shared.metrics else {
            return String::new();
        };
        m.refresh_engine_stats(&self.shared.store);
        m.read_cache_entries
            .set(self.shared.reader_cache.len() as i64);
        let last = self.committed_seq();
        m.last_seq.set(last as i64);
        m.applied_seq.set(last as i64);
        let start = self.log_start();
        m.log_start.set(start as i64);
        m.log_records.set((last + 1).saturating_sub(start) as i64);
        m.log_bytes.set(self.log_bytes() as i64);
        m.writer_failed
            .set(i64::from(self.writer_failure().is_some()));
        if let (Some(rm), Some(r)) = (&self.replica_metrics, &self.replica) {
            crate::replica::refresh_metrics(rm, &self.status(), &r.counters());
        }
        m.cursor_acked.reset();
        m.cursor_lag.reset();
        for c in self.cursors() {
            m.cursor_acked
                .with_label_values(&[c.name.as_str()])
                .set(c.state.acked as i64);
            m.cursor_lag
                .with_label_values(&[c.name.as_str()])
                .set(c.lag as i64);
        }
        m.render()
    }

    /// Makes a backup of the store at one committed sequence in the new
    /// directory `dest` (docs/FORMAT.md §12), while writes go on: see
    /// [`Treelog::backup_with_progress`].
    pub fn backup(&self, dest: impl AsRef<Path>) -> Result<crate::backup::BackupReport> {
        self.backup_with_progress(dest, |_| {})
    }

    /// [`Treelog::backup`], telling `progress` what it has done. Writes
    /// are not paused: the checkpoint is a RocksDB checkpoint (an atomic
    /// flush, then hard links to the table files and a copy of the
    /// write-ahead log), taken with log retention held off; its copy is
    /// then caught up to the last record it holds, which the backup waits
    /// for this store to commit, and copied into `dest` with checksums.
    pub fn backup_with_progress(
        &self,
        dest: impl AsRef<Path>,
        mut progress: impl FnMut(crate::backup::Progress<'_>) + Send,
    ) -> Result<crate::backup::BackupReport> {
        crate::backup::check_dest(&self.shared.store, dest.as_ref())?;
        let checkpoint = {
            let _no_retention = self.shared.retention.hold_passes();
            crate::backup::take_checkpoint(&self.shared.store, dest.as_ref())?
        };
        let committed = |seq| self.committed_for_backup(seq);
        in_background("treelog-backup", move || {
            checkpoint.finish(&committed, &mut progress)
        })
    }

    /// Takes a backup to be served in chunks (the server's `BackupBegin`,
    /// docs/PROTOCOL.md): a checkpoint as [`Treelog::backup`] takes,
    /// caught up to a committed sequence, with its manifest; its files
    /// stay in the data directory (hard links) until it is dropped.
    pub fn serve_backup(&self) -> Result<crate::backup::ServedBackup> {
        let checkpoint = {
            let _no_retention = self.shared.retention.hold_passes();
            crate::backup::take_checkpoint_to_serve(&self.shared.store)?
        };
        let committed = |seq| self.committed_for_backup(seq);
        in_background("treelog-backup", move || checkpoint.serve(&committed))
    }

    /// Waits until this store has committed `seq`, the last record of a
    /// backup's checkpoint (appended to the log, at most an fsync away).
    fn committed_for_backup(&self, seq: u64) -> Result<()> {
        let shared = &self.shared;
        let deadline = Instant::now() + BACKUP_COMMIT_WAIT;
        loop {
            if shared.committed.wait_for(seq, Duration::from_millis(100)) {
                return Ok(());
            }
            if let Some(why) = shared.failure() {
                return Err(Error::WriterStopped(why));
            }
            if Instant::now() >= deadline {
                return Err(Error::Busy(format!(
                    "the backup's checkpoint ends at sequence {seq}, which was not \
                     committed within {BACKUP_COMMIT_WAIT:?} (committed: {})",
                    shared.committed.get()
                )));
            }
        }
    }

    /// First sequence still in the log.
    /// How long a read at `ReadAt::AtLeast` waits (`Options::min_seq_wait`).
    pub fn min_seq_wait(&self) -> Duration {
        self.min_seq_wait
    }

    pub fn log_start(&self) -> u64 {
        self.shared.retention.log_start()
    }

    /// Bytes of record values in the log.
    pub fn log_bytes(&self) -> u64 {
        self.shared.retention.log_bytes()
    }

    /// Stops the writer after the commands already queued, flushes, and
    /// closes the store.
    pub fn close(mut self) -> Result<()> {
        self.shutdown();
        self.shared.store.flush()
    }

    fn shutdown(&mut self) {
        // The writer answers what is queued, then ends with its channel.
        self.tx.take();
        self.threads.stop_all();
    }

    /// The names of the store's threads (see [`crate::supervisor`]).
    pub fn thread_names(&self) -> Vec<&'static str> {
        self.threads.names()
    }
}

/// How long a backup waits for the store to commit the last record of its
/// checkpoint (appended to the log, at most one fsync away).
const BACKUP_COMMIT_WAIT: Duration = Duration::from_secs(60);

/// Runs `work` (a backup's catch-up, digest and copy: background work) on
/// a thread of its own named `name` under `SCHED_IDLE`: it takes the CPU
/// nothing else wants (when both want it, Linux gives it a weight of 3
/// against a normal thread's 1024, so it is slowed, never stopped). At
/// niceness 10, writers kept 0.51–0.70× of their create rate during a 1M
/// backup; under `SCHED_IDLE` 0.80–0.87× (docs/BENCHMARKS.md, Backup).
fn in_background<T: Send>(name: &str, work: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name(name.into())
            .spawn_scoped(s, move || {
                #[cfg(target_os = "linux")]
                crate::sched::set_policy(libc::SCHED_IDLE);
                work()
            })?
            .join()
            .unwrap_or_else(|_| Err(Error::corrupt("backup", "the backup thread panicked")))
    })
}

/// The id of the directory at `dir` (`NotADirectory` for another kind).
fn resolve_dir(idx: &dyn IndexRead, dicts: &Names, dir: &str) -> Result<u64> {
    let ino = engine::resolve(idx, dicts, dir)?;
    if !ino.attrs.kind.is_dir() {
        return Err(Error::NotADirectory(path::canonical(dir)?));
    }
    Ok(ino.id)
}

/// One listing page of `dir` read through `idx`.
fn list_page(
    idx: &dyn IndexRead,
    dicts: &Names,
    dir: &str,
    start_after: Option<&str>,
    limit: usize,
) -> Result<ListPage> {
    let id = resolve_dir(idx, dicts, dir)?;
    if let Some(s) = start_after {
        path::validate_name(s)?;
    }
    let (entries, more) = engine::list_children(idx, dicts, id, start_after, limit)?;
    let next_start_after = if more {
        entries.last().map(|e| e.name.clone())
    } else {
        None
    };
    Ok(ListPage {
        entries,
        next_start_after,
    })
}

impl Drop for Treelog {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `list_each` lends exactly the entries the paged listing returns, in
    /// order, across pages, with owners set on some entries and not on
    /// their neighbours (the reused entry must not carry one over), with
    /// ids out of name order (renames); an error from the callback stops
    /// it and is returned.
    #[test]
    fn list_each_lends_what_the_pages_return() {
        let dir = tempfile::tempdir().unwrap();
        let t = Treelog::open(dir.path(), Options::default().durability(Durability::None)).unwrap();
        t.mkdir_p("/d").unwrap();
        let n = 2_500;
        for i in 0..n {
            let owner = if i % 3 == 0 {
                format!("u{}", i % 7)
            } else {
                String::new()
            };
            t.create(
                &format!("/d/f{i:05}"),
                CreateOptions {
                    owner,
                    ..Default::default()
                },
            )
            .unwrap();
        }
        // Later names for early ids: name order is no longer id order.
        for i in (0..n).step_by(5) {
            t.rename(&format!("/d/f{i:05}"), &format!("/d/z{i:05}"), false)
                .unwrap();
        }
        let mut paged = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = t.list("/d", after.as_deref(), 700).unwrap();
            paged.extend(page.entries);
            match page.next_start_after {
                Some(a) => after = Some(a),
                None => break,
            }
        }
        assert_eq!(paged.len(), n);
        let mut lent = Vec::new();
        let seq = t
            .list_each("/d", |e| {
                lent.push(e.clone());
                Ok(())
            })
            .unwrap();
        assert_eq!(seq, t.committed_seq());
        assert_eq!(lent, paged);
        assert_eq!(t.list_all("/d").unwrap(), paged);

        let mut seen = 0;
        let e = t
            .list_each("/d", |_| {
                seen += 1;
                if seen == 1_500 {
                    Err(Error::InvalidArgument("enough".into()))
                } else {
                    Ok(())
                }
            })
            .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        assert_eq!(seen, 1_500);
        assert!(matches!(
            t.list_each("/d/f00001", |_| Ok(())),
            Err(Error::NotADirectory(_))
        ));
    }
}
