//! [`Treelog`]: the embedded store's public API.
//!
//! Mutations go to the single writer and return the sequence number of their
//! log record once it is durable and applied ([`write`]). Reads go straight
//! to RocksDB on the caller's thread and never wait for the writer
//! ([`read`]). Change streams, cursors and retention are [`follow`];
//! backups [`backup`]. Replicas and consensus nodes reach the store through
//! one handle, [`Treelog::replication`].

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::commit::handle::{reply_lost, ReplyRx, WriterHandle};
use crate::commit::shared::Shared;
use crate::commit::writer::{StartRole, Writer};
use crate::commit::WriterStatsSnapshot;
use crate::engine::EngineState;
use crate::error::{Error, Result};
use crate::read::publication::Publication;
use crate::read::watermark::Watermark;
use crate::replication::{consensus, replica, NodeRole, Replication};
use crate::store::Store;
use crate::sys::supervisor::{Stop, Supervisor};

mod backup;
mod follow;
mod options;
mod read;
mod read_as;
mod write;

pub use options::{
    CreateOptions, MkdirOptions, OpenReport, Options, SetAttrs, DEFAULT_MAX_COUNT_INODES,
};

/// The reply of a pipelined command.
pub struct PendingCommit {
    rx: ReplyRx,
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

/// An open treelog store.
pub struct Treelog {
    shared: Arc<Shared>,
    writer: WriterHandle,
    /// Every thread of this store (see [`crate::sys::supervisor`]).
    threads: Supervisor,
    report: OpenReport,
    role: NodeRole,
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
        let consensus_node = opts.role.consensus();
        consensus::claim(&store, consensus_node)?;
        if consensus_node.is_some() {
            consensus::finish_install(&store)?;
        }
        if let Some(m) = &metrics {
            m.log.replaying.set(1);
        }
        let replayed = crate::ops::recovery::replay(&store, progress)?;
        if let Some(m) = &metrics {
            m.log.replaying.set(0);
            m.log.replay_records.inc_by(replayed);
        }
        let state = EngineState::load(&store.index())?;
        // A consensus node's log may hold entries after the last committed
        // one, which replay leaves for the protocol: the writer goes on from
        // the index.
        let last_seq = store.applied_seq()?;
        debug_assert!(consensus_node.is_some() || last_seq == store.last_log_seq()?);
        let log_start = store.log_start()?;
        if log_start > 1 {
            // A crash between persisting a new start and the range deletion
            // leaves records below it; remove them (idempotent).
            store.delete_log_below(log_start)?;
        }
        let last_time = store.last_record_time(last_seq)?;
        let start = match &opts.role {
            NodeRole::Standalone => StartRole::Leader,
            NodeRole::Replica(r) => {
                r.set_applied_time_ms(last_time);
                StartRole::Follower {
                    leader: r.clone(),
                    append: true,
                }
            }
            // A node starts as a follower; the protocol says when it leads.
            NodeRole::Consensus(_) => StartRole::Follower {
                leader: Arc::new(None),
                append: false,
            },
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
                Stop::Signal(Box::new(move || {
                    stopper.publication().watermark().stop_notifier()
                })),
                move || sh.publication().watermark().run_notifier(every),
            )?;
        }
        let (tx, rx) = crossbeam_channel::bounded(opts.queue_capacity.max(1));
        let w = Writer::new(
            shared.clone(),
            state,
            last_seq,
            last_time,
            opts.writer,
            start,
        );
        threads.spawn("treelog-writer", Stop::InputClosed, move || w.run(rx))?;
        if !opts.retention.is_unbounded() {
            let (sh, policy) = (shared.clone(), opts.retention.clone());
            let interval = policy.interval.unwrap_or(Duration::from_secs(10));
            threads.spawn_periodic("treelog-retention", interval, move || {
                if let Err(e) = follow::run_retention(&sh, &policy) {
                    tracing::warn!(error = %e, "retention pass failed");
                }
            })?;
        }
        Ok(Treelog {
            role: opts.role,
            min_seq_wait: opts.min_seq_wait,
            max_count_inodes: opts.max_count_inodes,
            shared,
            writer: WriterHandle::new(tx),
            threads,
            report: OpenReport {
                replayed,
                applied_seq: last_seq,
                log_start,
            },
        })
    }

    /// The port that replicas and consensus nodes reach this store through
    /// (see [`crate::replication`]).
    pub fn replication(&self) -> Replication<'_> {
        Replication {
            shared: &self.shared,
            writer: &self.writer,
            role: &self.role,
            min_seq_wait: self.min_seq_wait,
        }
    }

    /// `NotLeader` (naming the source) on a replica: it takes no commands.
    fn check_leader(&self) -> Result<()> {
        replica::check_leader(self.role.replica().map(|r| &**r))
    }

    fn publication(&self) -> &Publication {
        self.shared.publication()
    }

    pub fn open_report(&self) -> OpenReport {
        self.report
    }

    pub fn store(&self) -> &Store {
        self.shared.store()
    }

    /// Highest committed (durable and applied) sequence number.
    pub fn committed_seq(&self) -> u64 {
        self.shared.committed()
    }

    /// The committed watermark, to wait on.
    pub fn watermark(&self) -> &Watermark {
        self.publication().watermark()
    }

    pub fn writer_stats(&self) -> WriterStatsSnapshot {
        self.shared.stats().snapshot()
    }

    /// Why the writer stopped, if it has.
    pub fn writer_failure(&self) -> Option<String> {
        self.shared.failure()
    }

    /// How long a read at `ReadAt::AtLeast` waits (`Options::min_seq_wait`).
    pub fn min_seq_wait(&self) -> Duration {
        self.min_seq_wait
    }

    /// Stops the writer after the commands already queued, flushes, and
    /// closes the store.
    pub fn close(mut self) -> Result<()> {
        self.shutdown();
        self.shared.store().flush()
    }

    fn shutdown(&mut self) {
        // The writer answers what is queued, then ends with its channel.
        self.writer.close();
        self.threads.stop_all();
    }

    /// The names of the store's threads (see [`crate::sys::supervisor`]).
    pub fn thread_names(&self) -> Vec<&'static str> {
        self.threads.names()
    }
}

impl Drop for Treelog {
    fn drop(&mut self) {
        self.shutdown();
    }
}
