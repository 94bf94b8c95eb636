//! [`Publication`]: the one owner of the committed state readers see.
//!
//! The committer makes each committed round visible in one step that
//! readers can tell apart ([`Publication::publish`]): with the `publishing`
//! count odd, it stores the round's RocksDB snapshot with its sequence
//! ([`PublishedView`]), updates the readers' cache and the tail cache, and
//! moves the committed watermark; then it makes the count even again. A
//! read ([`Publication::read`]) notes the count, reads (through the cache,
//! at the published snapshot), and keeps its result only if the count did
//! not move: no key it read can then come from another state, and its
//! sequence is the view's. A read that keeps meeting publishes reads at one
//! pinned snapshot without the cache, which is consistent by construction,
//! so no read starves.
//!
//! Reads can also ask for a state ([`crate::ReadAt`]): no older than a
//! sequence (the watermark's wait), or exactly one — the current state, or
//! one retained by [`Publication::pin`] for a bounded time (a paged or
//! recursive listing pins the state of its first page and reads every later
//! page at it). Change streams read the newest records from the tail cache.
//!
//! Faces: the committer publishes ([`Publication::publish`],
//! [`Publication::advance`], [`Publication::replace`]); readers read
//! ([`Publication::read`], [`Publication::read_at`], [`Publication::view`]),
//! pin states ([`Publication::pin`]) and wait ([`Publication::watermark`]);
//! streams take the tail ([`Publication::tail`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;

use crate::engine::names::Names;
use crate::error::{Error, Result};
use crate::event::Record;
use crate::index::{Cf, EntryFn, IndexRead, Kv, OverlayWrites};
use crate::read::memo::SharedRecord;
use crate::read::reader_cache::{CachedReads, ReaderCache};
use crate::read::retained::RetainedViews;
use crate::read::tail_cache::{Chunk, TailCache};
use crate::read::view::PublishedView;
use crate::read::watermark::Watermark;
use crate::store::{IndexSnapshot, Store};

/// Reads that met a publish this many times read at a pinned snapshot.
const FAST_ATTEMPTS: usize = 3;

/// How a [`Publication`] is sized.
pub(crate) struct PublicationOptions {
    /// Recent records kept decoded for caught-up subscribers.
    pub(crate) tail_records: usize,
    /// Index entries kept for readers (0: no cache).
    pub(crate) cache_entries: usize,
    /// The gauge of pinned states, when metrics are on.
    pub(crate) pinned_gauge: Option<prometheus::IntGauge>,
    /// The readers' cache misses by column family, when metrics are on.
    pub(crate) cache_misses: Option<[prometheus::IntCounter; 2]>,
}

/// The committed state readers see and everything published with it.
pub(crate) struct Publication {
    /// Odd while a publish is under way, even otherwise.
    publishing: AtomicU64,
    /// The index as of `committed`, with its sequence: readers read RocksDB
    /// at this snapshot, because the index changes of a round are written
    /// while its fsync runs, before they may be seen.
    view: ArcSwap<PublishedView>,
    /// Highest sequence whose record is durable and applied to the index.
    committed: Watermark,
    /// The readers' cache of index entries, at the newest state.
    cache: ReaderCache,
    /// The latest committed records, decoded, for caught-up subscribers.
    tail: TailCache,
    /// States pinned for reads at an exact sequence.
    retained: Arc<RetainedViews>,
    /// The owner and group names readers decode entries with.
    names: Names,
}

/// What a publish released from the tail cache: dropped by the committer
/// once its callers have their replies.
pub(crate) type Evicted = Vec<Arc<Chunk>>;

impl Publication {
    /// The publication of `store`'s index as it is now (replayed: its
    /// `applied_seq` is committed).
    pub(crate) fn new(store: &Store, o: PublicationOptions) -> Result<Publication> {
        let seq = store.applied_seq()?;
        let cache = ReaderCache::new(o.cache_entries);
        Ok(Publication {
            publishing: AtomicU64::new(0),
            view: ArcSwap::from_pointee(PublishedView {
                snap: store.snapshot(),
                seq,
            }),
            committed: Watermark::new(seq),
            cache: match o.cache_misses {
                Some(m) => cache.with_miss_counters(m),
                None => cache,
            },
            tail: TailCache::new(o.tail_records),
            retained: Arc::new(RetainedViews::new(o.pinned_gauge)),
            names: Names::new(),
        })
    }

    // -- the committer's face -------------------------------------------

    /// Makes a committed round visible at once: the index at `snap` (taken
    /// after the round's index write) as of `seq`, the round's index
    /// changes `writes` in the readers' cache, its `records` in the tail.
    /// Returns what the tail let go.
    pub(crate) fn publish<'w>(
        &self,
        snap: IndexSnapshot,
        seq: u64,
        writes: impl IntoIterator<Item = &'w OverlayWrites>,
        records: Vec<Record>,
    ) -> Evicted {
        assert!(
            seq >= self.committed.get(),
            "a publish moves the watermark forward ({seq} < {})",
            self.committed.get()
        );
        let view = Arc::new(PublishedView { snap, seq });
        let records: Vec<Arc<SharedRecord>> = records
            .into_iter()
            .map(|r| Arc::new(SharedRecord::from(r)))
            .collect();
        // Odd from before readers can see any of the round until they see
        // all of it, the watermark included, so that no sequence a reader
        // can observe is older than a state it read.
        self.publishing.fetch_add(1, Ordering::SeqCst);
        // The snapshot before the cache (see `reader_cache` on why): a
        // reader that sees the cache's new generation reads RocksDB at this
        // snapshot or a later one.
        self.view.store(view);
        for w in writes {
            self.cache.apply(w);
        }
        // Subscribers woken by the watermark find the records in memory.
        let evicted = self.tail.extend(records);
        self.committed.publish(seq);
        self.publishing.fetch_add(1, Ordering::SeqCst);
        evicted
    }

    /// Moves the watermark to `seq` for a round that changed nothing (its
    /// commands were no-ops or refusals).
    pub(crate) fn advance(&self, seq: u64) {
        self.committed.publish(seq);
    }

    /// Replaces the whole state with the index at `snap` as of `seq` (a
    /// checkpoint installed in place): readers go from the old state to the
    /// new one at once, and the caches start empty.
    pub(crate) fn replace(&self, snap: IndexSnapshot, seq: u64) {
        let view = Arc::new(PublishedView { snap, seq });
        self.publishing.fetch_add(1, Ordering::SeqCst);
        self.view.store(view);
        self.cache.clear();
        self.tail.clear();
        self.committed.publish(seq);
        self.publishing.fetch_add(1, Ordering::SeqCst);
    }

    // -- the readers' face ----------------------------------------------

    /// Runs `read` against one committed state: first through the readers'
    /// cache, validated against the publish count (see the module docs),
    /// then, if publishes keep landing inside it, at a pinned snapshot of
    /// `store` alone. Returns the value and the state's sequence.
    pub(crate) fn read<T>(
        &self,
        store: &Store,
        mut read: impl FnMut(&dyn IndexRead, &Names) -> Result<T>,
    ) -> Result<(T, u64)> {
        // Bounded in time too, should the publisher die inside a publish
        // (the count would then stay odd).
        let give_up = Instant::now() + Duration::from_millis(100);
        // Waits for a count outside a publish; odd if the wait gave up.
        let between = || {
            let mut c = self.publishing.load(Ordering::SeqCst);
            while c % 2 == 1 && Instant::now() < give_up {
                std::thread::yield_now();
                c = self.publishing.load(Ordering::SeqCst);
            }
            c
        };
        for _ in 0..FAST_ATTEMPTS {
            let before = between();
            if before % 2 == 1 {
                break;
            }
            let seq = self.view.load().seq;
            let cached = CachedReads {
                base: self.index(store),
                cache: &self.cache,
            };
            let r = read(&cached, &self.names);
            if self.publishing.load(Ordering::SeqCst) == before {
                return r.map(|v| (v, seq));
            }
        }
        // A view stored by a publish still under way may be ahead of the
        // watermark: take one from between publishes.
        between();
        let v = self.view.load_full();
        let r = read(&store.index_at(&v.snap), &self.names);
        r.map(|value| (value, v.seq))
    }

    /// Runs `read` at the state `view` (no cache: the cache holds the
    /// newest state).
    pub(crate) fn read_at<T>(
        &self,
        store: &Store,
        view: &PublishedView,
        mut read: impl FnMut(&dyn IndexRead, &Names) -> Result<T>,
    ) -> Result<T> {
        read(&store.index_at(&view.snap), &self.names)
    }

    /// The newest committed state.
    pub(crate) fn view(&self) -> Arc<PublishedView> {
        self.view.load_full()
    }

    /// The committed index, as readers see it (each read at the snapshot
    /// published last when it starts).
    pub(crate) fn index<'a>(&'a self, store: &'a Store) -> PublishedIndex<'a> {
        PublishedIndex { pub_: self, store }
    }

    /// The names entries are decoded with.
    pub(crate) fn names(&self) -> &Names {
        &self.names
    }

    /// The readers' cache (its size and growth).
    pub(crate) fn cache(&self) -> &ReaderCache {
        &self.cache
    }

    /// Retains the newest committed state for reads at exactly its
    /// sequence (returned).
    pub(crate) fn pin(&self) -> Result<u64> {
        let view = self.view();
        self.retained.pin_local(view.seq, view)
    }

    /// Releases a pin of [`Publication::pin`]; false if it had expired.
    pub(crate) fn unpin(&self, seq: u64) -> bool {
        self.retained.unpin_local(seq)
    }

    /// The table of pinned states ([`crate::ViewPins`] pin into it).
    pub(crate) fn retained(&self) -> &Arc<RetainedViews> {
        &self.retained
    }

    /// The state at exactly `seq`: retained, or the newest if it is at
    /// `seq`; `ViewNotRetained` otherwise.
    pub(crate) fn exactly(&self, seq: u64) -> Result<Arc<PublishedView>> {
        if let Some(v) = self.retained.get(seq) {
            return Ok(v);
        }
        let v = self.view.load_full();
        if v.seq == seq {
            return Ok(v);
        }
        Err(Error::ViewNotRetained {
            seq,
            latest: self.committed.get(),
        })
    }

    // -- waiting and following --------------------------------------------

    /// The highest committed sequence.
    pub(crate) fn committed(&self) -> u64 {
        self.committed.get()
    }

    /// The committed watermark, to wait on.
    pub(crate) fn watermark(&self) -> &Watermark {
        &self.committed
    }

    /// The latest committed records, for change streams.
    pub(crate) fn tail(&self) -> &TailCache {
        &self.tail
    }

    /// The publish count, which unit tests move to stand for a publish.
    #[cfg(test)]
    pub(crate) fn publishing(&self) -> &AtomicU64 {
        &self.publishing
    }
}

/// [`IndexRead`] over the committed index: each read at the snapshot
/// published last, loaded when the read starts. Not one snapshot for the
/// view's life: the readers' cache notes a key's generation before it reads
/// the key from here, and must then read at a snapshot at least as new as
/// that generation (see `reader_cache`).
pub(crate) struct PublishedIndex<'a> {
    pub_: &'a Publication,
    store: &'a Store,
}

impl IndexRead for PublishedIndex<'_> {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.store
            .index_at(&self.pub_.view.load().snap)
            .get(cf, key)
    }

    fn scan(&self, cf: Cf, prefix: &[u8], after: Option<&[u8]>, limit: usize) -> Result<Vec<Kv>> {
        self.store
            .index_at(&self.pub_.view.load().snap)
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
        self.store
            .index_at(&self.pub_.view.load().snap)
            .scan_each(cf, prefix, after, limit, f)
    }
}
