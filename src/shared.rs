//! The state the writer shares with the readers, the change streams and
//! retention: one owner per piece. The writer alone mutates the index and
//! publishes committed states ([`Shared::committed`], the view, the
//! dictionaries, the readers' cache, the tail cache); [`LogRetention`] owns
//! the log's bounds and the cursors; the readers only read.
//!
//! [`LogRetention`]: crate::retention::LogRetention

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::Result;
use crate::index::{Cf, EntryFn, IndexRead, Kv};
use crate::names::Names;
use crate::store::Store;
use crate::watermark::Watermark;

#[derive(Debug, Default)]
pub struct WriterStats {
    pub groups: AtomicU64,
    pub commands: AtomicU64,
    pub records: AtomicU64,
    pub max_group_commands: AtomicU64,
    /// Groups the writer committed on its own thread (see `Writer::run`).
    pub inline_groups: AtomicU64,
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
    pub fn snapshot(&self) -> WriterStatsSnapshot {
        WriterStatsSnapshot {
            groups: self.groups.load(Ordering::Relaxed),
            commands: self.commands.load(Ordering::Relaxed),
            records: self.records.load(Ordering::Relaxed),
            max_group_commands: self.max_group_commands.load(Ordering::Relaxed),
            inline_groups: self.inline_groups.load(Ordering::Relaxed),
        }
    }
}

/// State shared by the writer and the readers.
pub struct Shared {
    pub store: Store,
    /// The owner and group names readers decode entries with (read from
    /// the index they read, cached per thread).
    pub names: Names,
    /// Highest sequence whose record is durable and applied to the index.
    pub committed: Watermark,
    /// The index as of `committed`, with its sequence: readers read RocksDB
    /// at this snapshot, because the applier writes a round's index changes
    /// while its fsync runs, before they may be seen.
    pub view: arc_swap::ArcSwap<crate::readview::PublishedView>,
    /// States pinned for reads at an exact sequence.
    pub retained: crate::readview::RetainedViews,
    /// Why the writer stopped, once it has.
    pub failure: Mutex<Option<String>>,
    pub stats: WriterStats,
    /// The log's bounds and the durable cursors.
    pub retention: crate::retention::LogRetention,
    /// The latest committed records, decoded, for caught-up subscribers.
    pub tail: crate::stream::tail_cache::TailCache,
    /// Prometheus metrics; `None` when disabled.
    pub metrics: Option<Arc<crate::metrics::Metrics>>,
    /// The readers' cache of index entries; the writer updates it after
    /// each group's index write.
    pub reader_cache: crate::reader_cache::ReaderCache,
    /// Odd while the publisher publishes a round (its view, its keys in the
    /// readers' cache, the tail cache and the watermark), even otherwise:
    /// a read that saw the same even count before and after read one state
    /// (see [`crate::readview`]).
    pub publishing: AtomicU64,
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
    pub fn new(
        store: Store,
        tail_cache_records: usize,
        read_cache_entries: usize,
        metrics: Option<Arc<crate::metrics::Metrics>>,
    ) -> Result<Shared> {
        let retained =
            crate::readview::RetainedViews::new(metrics.as_ref().map(|m| m.pinned_views.clone()));
        Ok(Shared {
            names: Names::new(),
            view: arc_swap::ArcSwap::from_pointee(crate::readview::PublishedView {
                snap: store.snapshot(),
                seq: store.applied_seq()?,
            }),
            retained,
            committed: Watermark::new(store.applied_seq()?),
            failure: Default::default(),
            stats: Default::default(),
            retention: crate::retention::LogRetention::load(&store)?,
            tail: crate::stream::tail_cache::TailCache::new(tail_cache_records),
            reader_cache: {
                let c = crate::reader_cache::ReaderCache::new(read_cache_entries);
                match &metrics {
                    Some(m) => c.with_miss_counters(m.read_cache_miss_counters()),
                    None => c,
                }
            },
            metrics,
            store,
            publishing: AtomicU64::new(0),
            #[cfg(test)]
            inject: Inject::default(),
        })
    }

    /// Runs `read` against one committed state (see [`crate::readview`]);
    /// returns its value and the state's sequence.
    pub fn read<T>(
        &self,
        read: impl FnMut(&dyn IndexRead, &Names) -> Result<T>,
    ) -> Result<(T, u64)> {
        crate::readview::read_consistent(
            &self.publishing,
            &self.view,
            &self.names,
            &self.store,
            || crate::reader_cache::CachedReads {
                base: self.reader_index(),
                cache: &self.reader_cache,
            },
            read,
        )
    }

    /// Runs `read` at the retained state `view` (no cache: the cache holds
    /// the newest state).
    pub fn read_at<T>(
        &self,
        view: &crate::readview::PublishedView,
        mut read: impl FnMut(&dyn IndexRead, &Names) -> Result<T>,
    ) -> Result<T> {
        read(&self.store.index_at(&view.snap), &self.names)
    }

    /// The committed index, as readers see it.
    pub fn reader_index(&self) -> PublishedIndex<'_> {
        PublishedIndex(self)
    }

    /// Runs one retention pass over the log as committed now.
    pub fn run_retention(
        &self,
        policy: &crate::retention::RetentionPolicy,
    ) -> Result<crate::retention::RetentionReport> {
        self.retention.run(
            &self.store,
            self.committed.get(),
            &self.tail,
            self.metrics.as_deref(),
            policy,
        )
    }

    /// Records why the writer stopped (the first reason wins).
    pub fn fail(&self, why: String) {
        // The gauge operators alert on, set by every way the writer stops.
        if let Some(m) = &self.metrics {
            m.writer_failed.set(1);
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

    pub fn failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// [`IndexRead`] over the committed index: each read at the snapshot
/// published last, loaded when the read starts. Not one snapshot for the
/// view's life: the readers' cache notes a key's generation before it reads
/// the key from here, and must then read at a snapshot at least as new as
/// that generation (see `reader_cache`).
pub struct PublishedIndex<'a>(&'a Shared);

impl IndexRead for PublishedIndex<'_> {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.0.store.index_at(&self.0.view.load().snap).get(cf, key)
    }

    fn scan(&self, cf: Cf, prefix: &[u8], after: Option<&[u8]>, limit: usize) -> Result<Vec<Kv>> {
        self.0
            .store
            .index_at(&self.0.view.load().snap)
            .scan(cf, prefix, after, limit)
    }

    fn scan_each(
        &self,
        cf: Cf,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
        f: &mut EntryFn<'_>,
    ) -> Result<()> {
        self.0
            .store
            .index_at(&self.0.view.load().snap)
            .scan_each(cf, prefix, after, limit, f)
    }
}
