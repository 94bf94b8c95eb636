//! The readers' cache of index entries (a dentry and inode cache).
//!
//! Stat by path resolves one edge per component and reads the final inode;
//! from RocksDB that is a point lookup each (memtable, then block cache),
//! which caps stats near 200k/s on two cores. This cache keeps recently read
//! and recently written `inodes`/`edges` entries, positive and negative, in
//! sharded hash maps that readers consult without ever waiting for the
//! writer's group commit.
//!
//! Exactness. The writer is the only mutator of the index, and readers read
//! RocksDB at the snapshot it publishes once a round is durable. After it
//! publishes a round's snapshot it calls [`ReaderCache::apply`], which, per
//! key and under the shard's write lock, bumps the shard's generation and
//! stores the new value. A reader that misses notes the shard's generation
//! *before* reading RocksDB and inserts what it read only if the generation
//! is unchanged (under the same lock). So a value read before a write can
//! never be inserted after that write was applied: either the reader's
//! insert comes first (and the writer's overwrites it) or the generation has
//! moved (and the insert is dropped); and a reader that saw the new
//! generation reads at that snapshot or a later one. Readers between the
//! snapshot and `apply` may still see the old value from the cache; no caller of that
//! group has been acknowledged yet, so this is the same as reading just
//! before the group.
//!
//! Each key is exact, but a read of several keys (a path's edges and then
//! its inode, a page of edges and then their inodes) that straddles a
//! publish can pair an edge of one round with the inode of the next: a
//! concurrent delete then looks like an edge to nowhere. The publisher
//! counts publishes (`Shared::publishing`, odd while one runs), and the
//! namespace's reads go through `Shared::consistent_read`, which retries a
//! read that failed as corrupt if a publish ran beside it.
//!
//! Bounded: a shard that reaches its share of the capacity is cleared (the
//! entries are cheap to reload; clearing needs no eviction bookkeeping on the
//! read path, which stays a shared lock and a hash lookup). Shards grow by
//! doubling, but never inside `apply`: a write that would grow its shard is
//! left uncached (absent, so nothing is stale) and a thread beside the
//! publisher grows the shard ([`ReaderCache::grow`]).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use smallvec::SmallVec;

use crate::error::Result;
use crate::index::{Cf, EntryFn, IndexRead, Kv, OverlayWrites};

const SHARDS: usize = 64;
/// Generation counters; more of them than shards so that a write
/// invalidates the thread-local copies of few other keys.
const SLOTS: usize = 4096;
/// Entries of each thread's direct-mapped first-level cache.
const L1_ENTRIES: usize = 1024;
/// Values longer than this (an inode's extended attributes, up to 256 KiB)
/// are not cached: the bound on entries must bound memory too. Absent
/// keys are never stale.
use crate::index::MAX_CACHED_VALUE;

fn too_big(v: &Value) -> bool {
    v.as_ref().is_some_and(|v| v.len() > MAX_CACHED_VALUE)
}

type Value = Option<Vec<u8>>;
/// Keys and values are stored inline when small (edge keys are 8 bytes plus
/// the name, inode values 64 plus the name): a lookup then touches the map's
/// bucket alone, not two more heap blocks, which is what random stats over
/// a large tree wait on.
type InlineKey = SmallVec<[u8; 24]>;
type InlineValue = Option<SmallVec<[u8; 88]>>;
type ShardMap = HashMap<InlineKey, InlineValue, ahash::RandomState>;

fn inline(v: &Value) -> InlineValue {
    v.as_deref().map(SmallVec::from_slice)
}

fn outline(v: &InlineValue) -> Value {
    v.as_deref().map(<[u8]>::to_vec)
}

/// Where a key lives: its generation slot, and through it its shard.
#[derive(Clone, Copy)]
struct Slot(usize);

impl Slot {
    fn of(cf: Cf, key: &[u8]) -> Slot {
        // CRC-32C is one instruction per 8 bytes here, and spreads keys that
        // share their 8-byte parent prefix.
        let h = crc32c::crc32c_append(cf as u32, key) as usize;
        Slot(h % SLOTS)
    }

    fn shard(self) -> usize {
        self.0 % SHARDS
    }
}

fn read(l: &RwLock<ShardMap>) -> RwLockReadGuard<'_, ShardMap> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

fn write(l: &RwLock<ShardMap>) -> RwLockWriteGuard<'_, ShardMap> {
    l.write().unwrap_or_else(|p| p.into_inner())
}

/// One entry of a thread's first-level cache (edges only): valid while
/// the key's slot generation is still `generation` (of the cache `owner`).
struct L1Entry {
    owner: u64,
    key: Vec<u8>,
    value: Value,
    generation: u64,
}

thread_local! {
    static L1: RefCell<Vec<Option<L1Entry>>> = const { RefCell::new(Vec::new()) };
}

static NEXT_OWNER: AtomicU64 = AtomicU64::new(1);

/// A bounded, exact cache of index entries shared by all readers.
///
/// Two levels: a small direct-mapped cache per thread, read without any
/// shared write (hot entries such as the edges of top-level directories are
/// read by every stat; a shared lock on them would bounce its cache line
/// between cores on every lookup), then sharded maps under read-write locks.
pub(crate) struct ReaderCache {
    /// Tells this cache's entries apart in the thread-local caches.
    owner: u64,
    generations: Box<[AtomicU64]>,
    /// Per column family (`Cf as usize`), sharded by slot.
    shards: [Box<[RwLock<ShardMap>]>; 2],
    /// Most entries per shard before the shard is cleared; 0 disables.
    per_shard: usize,
    /// Shards (`cf * SHARDS + shard`) that dropped a write for want of
    /// room, to be grown by [`ReaderCache::grow`] off the commit path.
    full: Box<[AtomicBool]>,
    /// Lookups that went to the base, per column family (`Cf as usize`).
    /// Only misses are counted: they read RocksDB anyway, while a shared
    /// counter bumped on every hit would bounce between cores on the stat
    /// path. Hits are the edge lookups (`treelog_path_lookups_total`) and
    /// inode reads that did not miss.
    misses: Option<[prometheus::IntCounter; 2]>,
}

impl ReaderCache {
    /// A cache of about `capacity` entries (0: disabled).
    pub(crate) fn new(capacity: usize) -> ReaderCache {
        ReaderCache {
            owner: NEXT_OWNER.fetch_add(1, Ordering::Relaxed),
            generations: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
            shards: [(); 2].map(|_| (0..SHARDS).map(|_| RwLock::default()).collect()),
            per_shard: capacity.div_ceil(2 * SHARDS),
            full: (0..2 * SHARDS).map(|_| AtomicBool::new(false)).collect(),
            misses: None,
        }
    }

    /// Counts misses into these counters (`[inodes, edges]`).
    pub(crate) fn with_miss_counters(mut self, misses: [prometheus::IntCounter; 2]) -> ReaderCache {
        self.misses = Some(misses);
        self
    }

    fn load(&self, cf: Cf, load: impl FnOnce() -> Result<Value>) -> Result<Value> {
        if let Some(m) = &self.misses {
            m[cf as usize].inc();
        }
        load()
    }

    fn generation(&self, slot: Slot) -> u64 {
        self.generations[slot.0].load(Ordering::Acquire)
    }

    /// Only edges go to the first level: resolving a path reads the edge
    /// of every ancestor (the keys all threads share), but only the last
    /// inode; listings read many inodes once and would only churn it.
    fn l1_get(&self, cf: Cf, key: &[u8], slot: Slot) -> Option<Value> {
        if cf != Cf::Edges {
            return None;
        }
        L1.with(|l1| {
            let l1 = l1.borrow();
            let e = l1.get(slot.0 % L1_ENTRIES)?.as_ref()?;
            (e.owner == self.owner && e.key == key && e.generation == self.generation(slot))
                .then(|| e.value.clone())
        })
    }

    /// Puts an edge into this thread's first level (see `l1_get`).
    fn l1_put(&self, cf: Cf, key: &[u8], slot: Slot, value: &Value, generation: u64) {
        if cf != Cf::Edges {
            return;
        }
        L1.with(|l1| {
            let mut l1 = l1.borrow_mut();
            if l1.is_empty() {
                l1.resize_with(L1_ENTRIES, || None);
            }
            let e = l1[slot.0 % L1_ENTRIES].get_or_insert_with(|| L1Entry {
                owner: self.owner,
                key: Vec::new(),
                value: None,
                generation,
            });
            // Reuse the evicted entry's buffers.
            e.owner = self.owner;
            e.generation = generation;
            e.key.clear();
            e.key.extend_from_slice(key);
            match value {
                Some(v) => {
                    let buf = e.value.get_or_insert_with(Vec::new);
                    buf.clear();
                    buf.extend_from_slice(v);
                }
                None => e.value = None,
            }
        })
    }

    /// The cached value of `key`, or `load()`'s, which is then cached if no
    /// writer update of the key's slot happened meanwhile.
    pub(crate) fn get_or_load(
        &self,
        cf: Cf,
        key: &[u8],
        load: impl FnOnce() -> Result<Value>,
    ) -> Result<Value> {
        if self.per_shard == 0 {
            return self.load(cf, load);
        }
        let slot = Slot::of(cf, key);
        if let Some(v) = self.l1_get(cf, key, slot) {
            return Ok(v);
        }
        let lock = &self.shards[cf as usize][slot.shard()];
        let generation = {
            let g = read(lock);
            // Under the shard lock the generation matches the map: the
            // writer changes both under the write lock.
            let generation = self.generation(slot);
            if let Some(v) = g.get(key) {
                let v = outline(v);
                drop(g);
                self.l1_put(cf, key, slot, &v, generation);
                return Ok(v);
            }
            generation
        };
        let v = self.load(cf, load)?;
        if too_big(&v) {
            return Ok(v);
        }
        let mut g = write(lock);
        if self.generation(slot) == generation {
            if g.len() >= self.per_shard {
                g.clear();
            }
            g.insert(SmallVec::from_slice(key), inline(&v));
            drop(g);
            self.l1_put(cf, key, slot, &v, generation);
        }
        Ok(v)
    }

    /// Records a group's index writes, after the snapshot that holds them
    /// is published to readers. Only the writer's publisher (its syncer
    /// thread, or the writer committing a group itself) calls this.
    pub(crate) fn apply(&self, w: &OverlayWrites) {
        if self.per_shard == 0 {
            return;
        }
        for (cf, m) in [(Cf::Inodes, &w.inodes), (Cf::Edges, &w.edges)] {
            for (k, v) in m {
                let slot = Slot::of(cf, k);
                let mut g = write(&self.shards[cf as usize][slot.shard()]);
                // Invalidates every thread-local copy of the slot's keys.
                self.generations[slot.0].fetch_add(1, Ordering::AcqRel);
                if too_big(v) {
                    g.remove(&k[..]);
                    continue;
                }
                // A cached key is rewritten in place: `insert` makes room
                // for one more entry before it looks for the key, so in a
                // full map it would rehash to replace a value.
                if let Some(cached) = g.get_mut(&k[..]) {
                    *cached = inline(v);
                    continue;
                }
                if g.len() >= self.per_shard {
                    g.clear();
                }
                if g.len() == g.capacity() {
                    // Inserting would grow the map: rehash every entry, into
                    // fresh memory, under the lock and before this group's
                    // callers are answered. Leave the key uncached (no stale
                    // copy exists: it is absent, and the generation moved)
                    // and let `grow` make room beside the publisher.
                    self.full[cf as usize * SHARDS + slot.shard()].store(true, Ordering::Relaxed);
                    continue;
                }
                g.insert(SmallVec::from_slice(k), inline(v));
            }
        }
    }

    /// Forgets every entry (a Raft node installed a snapshot: any key may
    /// have changed). Only the publisher calls this, as it does `apply`.
    pub(crate) fn clear(&self) {
        for cf in &self.shards {
            for shard in cf.iter() {
                write(shard).clear();
            }
        }
        // Invalidates every thread-local copy.
        for g in self.generations.iter() {
            g.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Whether `apply` found a shard full since the last [`grow`].
    ///
    /// [`grow`]: ReaderCache::grow
    pub(crate) fn wants_growth(&self) -> bool {
        // Plain loads: this runs every round, and most rounds have nothing
        // to grow.
        self.full.iter().any(|f| f.load(Ordering::Relaxed))
    }

    /// Grows the shards that `apply` found full (doubling, up to the
    /// shard's share of the capacity). A thread beside the publisher runs it
    /// (see `writer`), so the publisher only waits for a shard while its
    /// entries move into the bigger map, never while that map is allocated
    /// and first touched: first-touch page faults are most of a grow's cost
    /// (about 3 ms per 2 MiB on a virtual machine here).
    pub(crate) fn grow(&self) {
        for (i, full) in self.full.iter().enumerate() {
            if !full.load(Ordering::Relaxed) || !full.swap(false, Ordering::Relaxed) {
                continue;
            }
            let lock = &self.shards[i / SHARDS][i % SHARDS];
            let want = (2 * read(lock).capacity()).max(64).min(self.per_shard);
            let mut fresh = ShardMap::with_capacity_and_hasher(want, Default::default());
            // Touch every page of the new map outside the lock: fill it
            // with distinct placeholder keys, then empty it (which keeps its
            // memory).
            fresh.extend((0..want as u64).map(|n| (SmallVec::from_slice(&n.to_le_bytes()), None)));
            fresh.clear();
            let mut g = write(lock);
            if g.capacity() >= want {
                continue;
            }
            fresh.extend(g.drain());
            let old = std::mem::replace(&mut *g, fresh);
            drop(g);
            drop(old);
        }
    }

    /// Entries currently in the shared level (for metrics and tests).
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().flatten().map(|l| read(l).len()).sum()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// [`IndexRead`] through an [`ReaderCache`]. Scans go to the base.
pub(crate) struct CachedReads<'a, R: IndexRead> {
    pub base: R,
    pub cache: &'a ReaderCache,
}

impl<R: IndexRead> IndexRead for CachedReads<'_, R> {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.cache.get_or_load(cf, key, || self.base.get(cf, key))
    }

    fn scan(&self, cf: Cf, prefix: &[u8], after: Option<&[u8]>, limit: usize) -> Result<Vec<Kv>> {
        self.base.scan(cf, prefix, after, limit)
    }

    fn scan_each(
        &self,
        cf: Cf,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
        f: &mut EntryFn<'_>,
    ) -> Result<()> {
        self.base.scan_each(cf, prefix, after, limit, f)
    }

    // `get_each` stays the default, a cache lookup per key: at the newest
    // state a listing's inodes are mostly cached, and a lookup each costs
    // no more than one iterator walked over them (BENCHMARKS, namespace
    // workloads); reads at a pinned state, which have no cache, walk.
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caches_and_applies_writes() {
        let c = ReaderCache::new(1024);
        let mut loads = 0;
        let v = c
            .get_or_load(Cf::Edges, b"k", || {
                loads += 1;
                Ok(Some(b"1".to_vec()))
            })
            .unwrap();
        assert_eq!(v.as_deref(), Some(&b"1"[..]));
        let v = c
            .get_or_load(Cf::Edges, b"k", || {
                loads += 1;
                Ok(None)
            })
            .unwrap();
        assert_eq!((v.as_deref(), loads), (Some(&b"1"[..]), 1));
        // Same key in the other column family is a different entry.
        assert_eq!(c.get_or_load(Cf::Inodes, b"k", || Ok(None)).unwrap(), None);
        let mut w = OverlayWrites::default();
        w.edges.insert(b"k".to_vec(), None);
        c.apply(&w);
        assert_eq!(
            c.get_or_load(Cf::Edges, b"k", || Ok(Some(b"stale".to_vec())))
                .unwrap(),
            None
        );
    }

    /// A cache whose shards have room for their share of `capacity`.
    fn grown(capacity: usize) -> ReaderCache {
        let c = ReaderCache::new(capacity);
        for l in c.shards.iter().flatten() {
            write(l).reserve(c.per_shard);
        }
        c
    }

    #[test]
    fn writes_into_a_full_shard_are_cached_after_grow() {
        let c = ReaderCache::new(1 << 16);
        let mut w = OverlayWrites::default();
        w.inodes.insert(b"x".to_vec(), Some(b"new".to_vec()));
        c.apply(&w);
        // A new shard has no room: the write is left uncached, not
        // rehashed into place on the commit path.
        assert_eq!(c.len(), 0);
        c.grow();
        c.apply(&w);
        assert_eq!(c.len(), 1);
        let v = c
            .get_or_load(Cf::Inodes, b"x", || Ok(Some(b"db".to_vec())))
            .unwrap();
        assert_eq!(v.as_deref(), Some(&b"new"[..]));
    }

    /// A write to a key a full shard caches replaces its value without
    /// growing the shard (a rehash on the commit path).
    #[test]
    fn a_cached_key_of_a_full_shard_is_rewritten_in_place() {
        let c = ReaderCache::new(1 << 20);
        let shard = Slot::of(Cf::Inodes, b"x").shard();
        let lock = &c.shards[Cf::Inodes as usize][shard];
        {
            let mut g = write(lock);
            g.reserve(100);
            g.insert(
                SmallVec::from_slice(b"x"),
                Some(SmallVec::from_slice(b"old")),
            );
            let mut n = 0u64;
            while g.len() < g.capacity() {
                let k = n.to_be_bytes();
                n += 1;
                if Slot::of(Cf::Inodes, &k).shard() == shard {
                    g.insert(SmallVec::from_slice(&k), None);
                }
            }
        }
        let capacity = read(lock).capacity();
        let mut w = OverlayWrites::default();
        w.inodes.insert(b"x".to_vec(), Some(b"new".to_vec()));
        c.apply(&w);
        assert_eq!(read(lock).capacity(), capacity, "the shard grew");
        assert!(!c.wants_growth());
        let v = c
            .get_or_load(Cf::Inodes, b"x", || panic!("x is cached"))
            .unwrap();
        assert_eq!(v.as_deref(), Some(&b"new"[..]));
    }

    /// Growing moves a shard's entries into a bigger map: none is lost,
    /// none is changed, and the placeholders that touched the new map's
    /// memory are gone.
    #[test]
    fn grow_keeps_every_entry() {
        let c = ReaderCache::new(1 << 20);
        let mut written = Vec::new();
        for round in 0..12u32 {
            let mut w = OverlayWrites::default();
            for i in 0..2000u32 {
                let k = (round * 2000 + i).to_be_bytes().to_vec();
                w.inodes.insert(k.clone(), Some(k.repeat(3)));
            }
            c.apply(&w);
            // New shards have no room.
            assert!(c.wants_growth() || round > 0);
            written.extend(w.inodes.keys().cloned());
            c.grow();
            assert!(!c.wants_growth());
        }
        // Each round's writes that found no room were left out.
        let cached: Vec<_> = written
            .iter()
            .filter(|k| {
                let slot = Slot::of(Cf::Inodes, k);
                read(&c.shards[Cf::Inodes as usize][slot.shard()]).contains_key(&k[..])
            })
            .collect();
        assert_eq!(cached.len(), c.len(), "no placeholder is left");
        assert!(cached.len() > written.len() / 2, "{}", cached.len());
        for k in cached {
            let v = c
                .get_or_load(Cf::Inodes, k, || panic!("{k:?} is cached"))
                .unwrap();
            assert_eq!(v, Some(k.repeat(3)));
        }
    }

    #[test]
    fn a_load_racing_a_write_is_not_cached() {
        let c = grown(1024);
        // The reader misses, then the writer applies a change to the same
        // key while the reader is "reading RocksDB": the old value it read
        // is returned to it but must not be cached.
        let v = c
            .get_or_load(Cf::Inodes, b"x", || {
                let mut w = OverlayWrites::default();
                w.inodes.insert(b"x".to_vec(), Some(b"new".to_vec()));
                c.apply(&w);
                Ok(Some(b"old".to_vec()))
            })
            .unwrap();
        assert_eq!(v.as_deref(), Some(&b"old"[..]));
        let v = c
            .get_or_load(Cf::Inodes, b"x", || Ok(Some(b"db".to_vec())))
            .unwrap();
        assert_eq!(v.as_deref(), Some(&b"new"[..]));
    }

    /// Readers never see a value older than the last one applied before
    /// their lookup began, whatever the interleaving with the writer.
    #[test]
    fn no_stale_reads_under_concurrent_writes() {
        use std::sync::Mutex;
        let db: Mutex<HashMap<Vec<u8>, u64>> = Mutex::default();
        // Far more keys than capacity: shards are cleared all the time, so
        // readers keep missing and loading while the writer writes.
        let c = ReaderCache::new(2 * SHARDS);
        let applied = AtomicU64::new(0);
        let keys: Vec<Vec<u8>> = (0..=255u8).map(|i| vec![i]).collect();
        std::thread::scope(|s| {
            s.spawn(|| {
                for n in 1..=100_000u64 {
                    let k = &keys[n as usize % keys.len()];
                    db.lock().unwrap().insert(k.clone(), n);
                    let mut w = OverlayWrites::default();
                    w.edges.insert(k.clone(), Some(n.to_be_bytes().to_vec()));
                    c.apply(&w);
                    applied.store(n, Ordering::SeqCst);
                }
            });
            for _ in 0..2 {
                s.spawn(|| loop {
                    let a = applied.load(Ordering::SeqCst);
                    for (i, k) in keys.iter().enumerate() {
                        let v = c
                            .get_or_load(Cf::Edges, k, || {
                                let v = db.lock().unwrap().get(k).map(|n| n.to_be_bytes().to_vec());
                                // Widen the window in which the writer can
                                // overtake this load.
                                std::thread::yield_now();
                                Ok(v)
                            })
                            .unwrap();
                        let got = v.map(|b| u64::from_be_bytes(b.try_into().unwrap()));
                        // The last write of key i at or before `a`.
                        let last = (1..=a).rev().find(|n| *n as usize % keys.len() == i);
                        assert!(got >= last, "key {i}: got {got:?}, applied {last:?}");
                    }
                    if a == 100_000 {
                        break;
                    }
                });
            }
        });
    }

    #[test]
    fn bounded() {
        let c = ReaderCache::new(SHARDS * 4);
        for i in 0..10_000u32 {
            c.get_or_load(Cf::Edges, &i.to_be_bytes(), || Ok(None))
                .unwrap();
        }
        assert!(c.len() <= SHARDS * 4, "{} entries", c.len());
        let off = ReaderCache::new(0);
        off.get_or_load(Cf::Edges, b"a", || Ok(None)).unwrap();
        assert!(off.is_empty());
    }
}
