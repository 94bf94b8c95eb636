//! [`Shared`]: what the writer shares with the readers, the change streams,
//! replication and retention, one owner per piece. The writer alone
//! mutates the index and publishes committed states through the
//! [`Publication`]; [`LogRetention`] owns the log's bounds and the
//! cursors; the writer's health says whether it still takes work.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::Result;
use crate::metrics::Metrics;
use crate::read::publication::{Publication, PublicationOptions};
use crate::retention::LogRetention;
use crate::store::Store;

/// The writer's counters, read by tests and `admin status`.
#[derive(Debug, Default)]
pub(crate) struct WriterStats {
    pub(crate) groups: AtomicU64,
    pub(crate) commands: AtomicU64,
    pub(crate) records: AtomicU64,
    pub(crate) max_group_commands: AtomicU64,
    /// Groups the writer committed on its own thread (see `Writer::run`).
    pub(crate) inline_groups: AtomicU64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct WriterStatsSnapshot {
    pub groups: u64,
    pub commands: u64,
    pub records: u64,
    pub max_group_commands: u64,
    pub inline_groups: u64,
}

impl WriterStats {
    pub(crate) fn snapshot(&self) -> WriterStatsSnapshot {
        WriterStatsSnapshot {
            groups: self.groups.load(Ordering::Relaxed),
            commands: self.commands.load(Ordering::Relaxed),
            records: self.records.load(Ordering::Relaxed),
            max_group_commands: self.max_group_commands.load(Ordering::Relaxed),
            inline_groups: self.inline_groups.load(Ordering::Relaxed),
        }
    }
}

/// State shared by the writer and everything that reads what it commits.
pub(crate) struct Shared {
    store: Store,
    publication: Publication,
    retention: LogRetention,
    /// Why the writer stopped, once it has.
    failure: Mutex<Option<String>>,
    stats: WriterStats,
    /// Prometheus metrics; `None` when disabled.
    metrics: Option<Arc<Metrics>>,
    /// Failures the unit tests inject into the commit pipeline.
    #[cfg(test)]
    pub(crate) inject: Inject,
}

/// Failpoints of the unit tests: while set, every fsync or index write
/// fails as an I/O error would.
#[cfg(test)]
#[derive(Default)]
pub(crate) struct Inject {
    pub(crate) sync: std::sync::atomic::AtomicBool,
    pub(crate) index_write: std::sync::atomic::AtomicBool,
}

impl Shared {
    /// The shared state over a store whose index is up to date with its
    /// log (replayed).
    pub(crate) fn new(
        store: Store,
        tail_cache_records: usize,
        read_cache_entries: usize,
        metrics: Option<Arc<Metrics>>,
    ) -> Result<Shared> {
        let publication = Publication::new(
            &store,
            PublicationOptions {
                tail_records: tail_cache_records,
                cache_entries: read_cache_entries,
                pinned_gauge: metrics.as_ref().map(|m| m.read.pinned_views.clone()),
                cache_misses: metrics.as_ref().map(|m| m.read.cache_miss_counters()),
            },
        )?;
        Ok(Shared {
            retention: LogRetention::load(&store)?,
            publication,
            store,
            failure: Mutex::default(),
            stats: WriterStats::default(),
            metrics,
            #[cfg(test)]
            inject: Inject::default(),
        })
    }

    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    pub(crate) fn publication(&self) -> &Publication {
        &self.publication
    }

    pub(crate) fn retention(&self) -> &LogRetention {
        &self.retention
    }

    pub(crate) fn metrics(&self) -> Option<&Arc<Metrics>> {
        self.metrics.as_ref()
    }

    pub(crate) fn stats(&self) -> &WriterStats {
        &self.stats
    }

    /// The highest committed sequence.
    pub(crate) fn committed(&self) -> u64 {
        self.publication.committed()
    }

    /// Runs `read` against one committed state; returns its value and the
    /// state's sequence (see [`Publication::read`]).
    pub(crate) fn read<T>(
        &self,
        read: impl FnMut(&dyn crate::index::IndexRead, &crate::engine::names::Names) -> Result<T>,
    ) -> Result<(T, u64)> {
        self.publication.read(&self.store, read)
    }

    /// Records why the writer stopped (the first reason wins).
    pub(crate) fn fail(&self, why: String) {
        // The gauge operators alert on, set by every way the writer stops.
        if let Some(m) = &self.metrics {
            m.write.writer_failed.set(1);
        }
        let mut f = self.failure.lock().unwrap_or_else(|p| p.into_inner());
        if f.is_none() {
            tracing::error!(
                reason = %why,
                "the writer stopped: no command is accepted until restart"
            );
            *f = Some(why);
        }
    }

    /// Why the writer stopped, if it has.
    pub(crate) fn failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}
