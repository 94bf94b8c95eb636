//! The writer's exact cache of the index entries it read.

use super::*;

/// The writer's cache of index reads.
///
/// The writer is the only mutator of the index, so it can keep an exact
/// copy of the entries it read: as it appends each group it updates the
/// entries the group wrote ([`WriterCache::absorb`]). So an entry holds the
/// newest value of its key, committed or still pending, and the cache sits
/// above [`PendingIndex`]: only its misses search the pending groups, then
/// RocksDB. Path resolution during validation then mostly stops here.
/// Bounded: when full it is cleared.
pub(crate) struct WriterCache {
    /// Per column family (`Cf as usize`), so lookups borrow the key.
    pub(super) maps: [std::collections::HashMap<Vec<u8>, Option<Vec<u8>>, ahash::RandomState>; 2],
    pub(super) capacity: usize,
    /// Lookups served from the cache / from RocksDB since the last `take_counts`.
    pub(super) hits: u64,
    pub(super) misses: u64,
    /// Loads left uncached because a map was full (see `insert`).
    pub(super) skipped: u64,
}

impl WriterCache {
    pub(crate) fn new(capacity: usize) -> WriterCache {
        WriterCache {
            maps: Default::default(),
            capacity,
            hits: 0,
            misses: 0,
            skipped: 0,
        }
    }

    /// Forgets every entry (a Raft leader's writer, when the proposals
    /// whose values it holds are dropped).
    pub(crate) fn clear(&mut self) {
        for map in &mut self.maps {
            map.clear();
        }
    }

    /// (hits, misses) since the last call.
    pub(crate) fn take_counts(&mut self) -> (u64, u64) {
        let c = (self.hits, self.misses);
        self.hits = 0;
        self.misses = 0;
        c
    }

    pub(super) fn insert(&mut self, cf: Cf, key: Vec<u8>, value: Option<Vec<u8>>) {
        if self.capacity == 0 || too_big(&value) {
            return;
        }
        let map = &mut self.maps[cf as usize];
        if map.len() >= self.capacity / 2 {
            map.clear();
        }
        if map.len() == map.capacity() {
            // Growing rehashes every entry, into fresh memory, in the middle
            // of a group's validation: left to `grow`, between groups.
            self.skipped += 1;
            return;
        }
        map.insert(key, value);
    }

    /// Loads left uncached for want of room since the last `grow`.
    pub(crate) fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Doubles the full maps (up to their share of the capacity).
    pub(crate) fn grow(&mut self) {
        self.skipped = 0;
        let half = self.capacity / 2;
        for map in &mut self.maps {
            let len = map.len();
            if len == map.capacity() {
                let want = (2 * len).max(64).min(half);
                map.reserve(want.saturating_sub(len));
            }
        }
    }

    /// Records a group's writes as it is appended: cached keys take the new
    /// value, others stay uncached (the writer reads them from its pending
    /// set until they are committed, and from the index after). Inserting
    /// them all cost a key copy and map growth per write for keys rarely
    /// read again.
    pub(crate) fn absorb(&mut self, w: &OverlayWrites) {
        for (cf, m) in [(Cf::Inodes, &w.inodes), (Cf::Edges, &w.edges)] {
            let map = &mut self.maps[cf as usize];
            for (k, v) in m {
                if too_big(v) {
                    map.remove(&k[..]);
                } else if let Some(e) = map.get_mut(&k[..]) {
                    e.clone_from(v);
                }
            }
        }
    }
}

/// Whether a value is too long to cache (see
/// `index::MAX_CACHED_VALUE`): an inode's extended attributes.
pub(super) fn too_big(v: &Option<Vec<u8>>) -> bool {
    v.as_ref()
        .is_some_and(|v| v.len() > crate::index::MAX_CACHED_VALUE)
}

/// [`IndexRead`] through a [`WriterCache`]. Scans are not cached.
pub(crate) struct CachedIndex<'a, R: IndexRead + ?Sized> {
    pub base: &'a R,
    pub cache: &'a std::cell::RefCell<WriterCache>,
}

impl<R: IndexRead + ?Sized> IndexRead for CachedIndex<'_, R> {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>> {
        {
            let mut c = self.cache.borrow_mut();
            if let Some(v) = c.maps[cf as usize].get(key).cloned() {
                c.hits += 1;
                return Ok(v);
            }
            c.misses += 1;
        }
        let v = self.base.get(cf, key)?;
        self.cache.borrow_mut().insert(cf, key.to_vec(), v.clone());
        Ok(v)
    }

    fn scan(&self, cf: Cf, prefix: &[u8], after: Option<&[u8]>, limit: usize) -> Result<Vec<Kv>> {
        self.base.scan(cf, prefix, after, limit)
    }
}
