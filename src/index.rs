//! The index (the `inodes` and `edges` column families) as the pure engine
//! sees it: a key-value view it reads, and an overlay it writes.
//!
//! The writer validates each command of a group against the stored index
//! plus the group's earlier changes; the [`Overlay`] holds those changes and
//! becomes the group's index write batch. Replay and rebuild use the same
//! overlay, and tests use [`MemIndex`] so that the engine runs without I/O.

use std::collections::BTreeMap;

use crate::error::Result;

/// An index column family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Cf {
    Inodes,
    Edges,
}

pub type Kv = (Vec<u8>, Vec<u8>);

/// What [`IndexRead::scan_each`] lends each entry to: its key and value.
pub type EntryFn<'a> = dyn FnMut(&[u8], &[u8]) -> Result<()> + 'a;

/// What [`IndexRead::get_each`] lends each value found to, with the index
/// of its key.
pub type ValueFn<'a> = dyn FnMut(usize, &[u8]) -> Result<()> + 'a;

/// Read access to the index.
pub trait IndexRead {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Up to `limit` entries whose key starts with `prefix` and is greater
    /// than `after` (when given), in key order.
    fn scan(&self, cf: Cf, prefix: &[u8], after: Option<&[u8]>, limit: usize) -> Result<Vec<Kv>>;

    /// [`IndexRead::scan`] lending each entry to `f` instead of copying it
    /// out (a listing page reads a thousand of them).
    fn scan_each(
        &self,
        cf: Cf,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
        f: &mut EntryFn<'_>,
    ) -> Result<()> {
        for (k, v) in self.scan(cf, prefix, after, limit)? {
            f(&k, &v)?;
        }
        Ok(())
    }

    /// Calls `f(i, value)` for each `keys[i]` that exists, in no particular
    /// order: one call for many point reads, which a store can answer with
    /// one iterator walked over the sorted keys.
    fn get_each(&self, cf: Cf, keys: &[&[u8]], f: &mut ValueFn<'_>) -> Result<()> {
        for (i, k) in keys.iter().enumerate() {
            if let Some(v) = self.get(cf, k)? {
                f(i, &v)?;
            }
        }
        Ok(())
    }
}

/// An in-memory index, for the tests that drive the engine without I/O.
#[cfg(test)]
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct MemIndex {
    pub inodes: BTreeMap<Vec<u8>, Vec<u8>>,
    pub edges: BTreeMap<Vec<u8>, Vec<u8>>,
}

#[cfg(test)]
impl MemIndex {
    fn map(&self, cf: Cf) -> &BTreeMap<Vec<u8>, Vec<u8>> {
        match cf {
            Cf::Inodes => &self.inodes,
            Cf::Edges => &self.edges,
        }
    }

    /// Applies an overlay's writes.
    #[cfg(test)]
    pub fn absorb(&mut self, writes: OverlayWrites) {
        for (cf, m) in [(Cf::Inodes, writes.inodes), (Cf::Edges, writes.edges)] {
            let target = match cf {
                Cf::Inodes => &mut self.inodes,
                Cf::Edges => &mut self.edges,
            };
            for (k, v) in m {
                match v {
                    Some(v) => {
                        target.insert(k, v);
                    }
                    None => {
                        target.remove(&k);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
fn scan_map(
    m: &BTreeMap<Vec<u8>, Vec<u8>>,
    prefix: &[u8],
    after: Option<&[u8]>,
    limit: usize,
) -> Vec<Kv> {
    use std::ops::Bound;
    let lower = match after {
        Some(a) if a >= prefix => Bound::Excluded(a.to_vec()),
        _ => Bound::Included(prefix.to_vec()),
    };
    m.range((lower, Bound::Unbounded))
        .take_while(|(k, _)| k.starts_with(prefix))
        .take(limit)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[cfg(test)]
impl IndexRead for MemIndex {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.map(cf).get(key).cloned())
    }

    fn scan(&self, cf: Cf, prefix: &[u8], after: Option<&[u8]>, limit: usize) -> Result<Vec<Kv>> {
        Ok(scan_map(self.map(cf), prefix, after, limit))
    }
}

/// The pending writes of an overlay: `Some` = put, `None` = delete.
#[derive(Debug, Default, Clone)]
pub struct OverlayWrites {
    pub inodes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    pub edges: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
}

impl OverlayWrites {
    pub fn is_empty(&self) -> bool {
        self.inodes.is_empty() && self.edges.is_empty()
    }

    fn map(&self, cf: Cf) -> &BTreeMap<Vec<u8>, Option<Vec<u8>>> {
        match cf {
            Cf::Inodes => &self.inodes,
            Cf::Edges => &self.edges,
        }
    }

    fn map_mut(&mut self, cf: Cf) -> &mut BTreeMap<Vec<u8>, Option<Vec<u8>>> {
        match cf {
            Cf::Inodes => &mut self.inodes,
            Cf::Edges => &mut self.edges,
        }
    }
}

/// Where the engine's index changes go: an overlay (the writer, which reads
/// its own changes back), or replay's sorted batch (whose events are blind
/// writes that never read the index). Keys and values are borrowed: the
/// engine encodes them into one scratch buffer, and replay copies them into
/// an arena instead of allocating two vectors per write.
pub trait IndexWrite {
    fn put(&mut self, cf: Cf, key: &[u8], value: &[u8]);
    fn delete(&mut self, cf: Cf, key: &[u8]);
}

impl<R: IndexRead + ?Sized> IndexWrite for Overlay<'_, R> {
    fn put(&mut self, cf: Cf, key: &[u8], value: &[u8]) {
        Overlay::put(self, cf, key.to_vec(), value.to_vec())
    }

    fn delete(&mut self, cf: Cf, key: &[u8]) {
        Overlay::delete(self, cf, key.to_vec())
    }
}

/// A filter of the keys a set of writes holds: 4,096 bits per column
/// family, one per key (CRC-32C, one instruction per 8 bytes). Most
/// validation lookups are for keys the group being validated (or a pending
/// group) did not write; the filter answers those without comparing keys
/// down a B-tree, which was ~18% of the writer's CPU on creates.
#[derive(Clone)]
struct KeyFilter([[u64; 64]; 2]);

impl Default for KeyFilter {
    fn default() -> Self {
        KeyFilter([[0; 64]; 2])
    }
}

impl KeyFilter {
    fn bit(key: &[u8]) -> (usize, u64) {
        let h = crc32c::crc32c(key) as usize;
        ((h >> 6) & 63, 1 << (h & 63))
    }

    fn insert(&mut self, cf: Cf, key: &[u8]) {
        let (w, b) = Self::bit(key);
        self.0[cf as usize][w] |= b;
    }

    /// False only if `key` was never inserted.
    fn may_contain(&self, cf: Cf, key: &[u8]) -> bool {
        let (w, b) = Self::bit(key);
        self.0[cf as usize][w] & b != 0
    }

    fn of(writes: &OverlayWrites) -> KeyFilter {
        let mut f = KeyFilter::default();
        for (cf, m) in [(Cf::Inodes, &writes.inodes), (Cf::Edges, &writes.edges)] {
            for k in m.keys() {
                f.insert(cf, k);
            }
        }
        f
    }
}

/// A base index plus pending writes, read as one.
pub struct Overlay<'a, R: IndexRead + ?Sized> {
    base: &'a R,
    writes: OverlayWrites,
    filter: KeyFilter,
}

impl<'a, R: IndexRead + ?Sized> Overlay<'a, R> {
    pub fn new(base: &'a R) -> Self {
        Overlay {
            base,
            writes: OverlayWrites::default(),
            filter: KeyFilter::default(),
        }
    }

    pub fn put(&mut self, cf: Cf, key: Vec<u8>, value: Vec<u8>) {
        self.filter.insert(cf, &key);
        self.writes.map_mut(cf).insert(key, Some(value));
    }

    pub fn delete(&mut self, cf: Cf, key: Vec<u8>) {
        self.filter.insert(cf, &key);
        self.writes.map_mut(cf).insert(key, None);
    }

    #[cfg(test)]
    pub fn writes(&self) -> &OverlayWrites {
        &self.writes
    }

    /// Takes the pending writes, leaving the overlay empty.
    pub fn take_writes(&mut self) -> OverlayWrites {
        self.filter = KeyFilter::default();
        std::mem::take(&mut self.writes)
    }
}

impl<R: IndexRead + ?Sized> IndexRead for Overlay<'_, R> {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if self.filter.may_contain(cf, key) {
            if let Some(v) = self.writes.map(cf).get(key) {
                return Ok(v.clone());
            }
        }
        self.base.get(cf, key)
    }

    fn scan(&self, cf: Cf, prefix: &[u8], after: Option<&[u8]>, limit: usize) -> Result<Vec<Kv>> {
        let pending: Vec<(&Vec<u8>, &Option<Vec<u8>>)> = self
            .writes
            .map(cf)
            .range(scan_start(prefix, after))
            .take_while(|(k, _)| k.starts_with(prefix))
            .collect();
        merge_scan(self.base, cf, prefix, after, limit, pending)
    }
}

/// The lower bound of a scan of `prefix` after `after`.
fn scan_start(
    prefix: &[u8],
    after: Option<&[u8]>,
) -> (std::ops::Bound<Vec<u8>>, std::ops::Bound<Vec<u8>>) {
    use std::ops::Bound;
    let lower = match after {
        Some(a) if a >= prefix => Bound::Excluded(a.to_vec()),
        _ => Bound::Included(prefix.to_vec()),
    };
    (lower, Bound::Unbounded)
}

/// A scan of `base` with `pending` changes (in key order, within the scan's
/// range) laid over it.
fn merge_scan<R: IndexRead + ?Sized>(
    base: &R,
    cf: Cf,
    prefix: &[u8],
    after: Option<&[u8]>,
    limit: usize,
    pending: Vec<(&Vec<u8>, &Option<Vec<u8>>)>,
) -> Result<Vec<Kv>> {
    if pending.is_empty() {
        return base.scan(cf, prefix, after, limit);
    }
    // The changes can hide at most `pending.len()` base entries, so this
    // many base entries always suffice to fill `limit`.
    let want = limit.saturating_add(pending.len());
    let base = base.scan(cf, prefix, after, want)?;
    let base_exhausted = base.len() < want;
    let base_last = base.last().map(|(k, _)| k.clone());
    let mut merged: BTreeMap<Vec<u8>, Vec<u8>> = base.into_iter().collect();
    for (k, v) in pending {
        // Past the last base key we fetched, base entries are unknown;
        // puts beyond it are still fine to include only if the base was
        // exhausted (otherwise ordering could skip base keys).
        if !base_exhausted {
            if let Some(last) = &base_last {
                if k > last {
                    continue;
                }
            }
        }
        match v {
            Some(v) => {
                merged.insert(k.clone(), v.clone());
            }
            None => {
                merged.remove(k);
            }
        }
    }
    Ok(merged.into_iter().take(limit).collect())
}

/// The index changes of groups that are in the log but not yet in the
/// index: the writer validates the next group while an earlier one waits
/// for its fsync, so it must read those changes back.
///
/// Groups are kept whole, oldest first, and dropped once the committed
/// watermark covers them (their changes are in the index by then).
#[derive(Default)]
pub struct PendingWrites {
    groups: std::collections::VecDeque<(u64, std::sync::Arc<OverlayWrites>, KeyFilter)>,
}

impl PendingWrites {
    /// Adds the changes of the group whose last record is `seq`.
    pub fn push(&mut self, seq: u64, writes: std::sync::Arc<OverlayWrites>) {
        if !writes.is_empty() {
            // Only a group with records changes the index, and each one
            // ends at a higher sequence than the last.
            debug_assert!(self.groups.back().is_none_or(|(s, _, _)| *s < seq));
            let filter = KeyFilter::of(&writes);
            self.groups.push_back((seq, writes, filter));
        }
    }

    /// Forgets the groups whose changes the index holds (`seq <= applied`).
    pub fn prune(&mut self, applied: u64) {
        while self.groups.front().is_some_and(|(s, _, _)| *s <= applied) {
            self.groups.pop_front();
        }
    }

    /// Forgets every group (a Raft leader's proposals, when it stops
    /// leading).
    pub fn clear(&mut self) {
        self.groups.clear();
    }

    /// Groups still pending.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// The newest pending change of `key`, if any.
    fn get(&self, cf: Cf, key: &[u8]) -> Option<&Option<Vec<u8>>> {
        self.groups
            .iter()
            .rev()
            .filter(|(_, _, f)| f.may_contain(cf, key))
            .find_map(|(_, w, _)| w.map(cf).get(key))
    }
}

/// An index with [`PendingWrites`] changes laid over it.
pub struct PendingIndex<'a, R: IndexRead + ?Sized> {
    pub pending: &'a PendingWrites,
    pub base: &'a R,
}

impl<R: IndexRead + ?Sized> IndexRead for PendingIndex<'_, R> {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.pending.get(cf, key) {
            Some(v) => Ok(v.clone()),
            None => self.base.get(cf, key),
        }
    }

    fn scan(&self, cf: Cf, prefix: &[u8], after: Option<&[u8]>, limit: usize) -> Result<Vec<Kv>> {
        // Rare in validation (an emptiness check, a recursive delete): the
        // groups' changes in range are merged, newer over older.
        let mut changes: BTreeMap<&Vec<u8>, &Option<Vec<u8>>> = BTreeMap::new();
        for (_, w, _) in &self.pending.groups {
            for (k, v) in w
                .map(cf)
                .range(scan_start(prefix, after))
                .take_while(|(k, _)| k.starts_with(prefix))
            {
                changes.insert(k, v);
            }
        }
        merge_scan(
            self.base,
            cf,
            prefix,
            after,
            limit,
            changes.into_iter().collect(),
        )
    }
}

/// The writer's cache of index reads.
///
/// The writer is the only mutator of the index, so it can keep an exact
/// copy of the entries it read: as it appends each group it updates the
/// entries the group wrote ([`WriterCache::absorb`]). So an entry holds the
/// newest value of its key, committed or still pending, and the cache sits
/// above [`PendingIndex`]: only its misses search the pending groups, then
/// RocksDB. Path resolution during validation then mostly stops here.
/// Bounded: when full it is cleared.
pub struct WriterCache {
    /// Per column family (`Cf as usize`), so lookups borrow the key.
    maps: [std::collections::HashMap<Vec<u8>, Option<Vec<u8>>, ahash::RandomState>; 2],
    capacity: usize,
    /// Lookups served from the cache / from RocksDB since the last `take_counts`.
    hits: u64,
    misses: u64,
    /// Loads left uncached because a map was full (see `insert`).
    skipped: u64,
}

impl WriterCache {
    pub fn new(capacity: usize) -> WriterCache {
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
    pub fn clear(&mut self) {
        for map in &mut self.maps {
            map.clear();
        }
    }

    /// (hits, misses) since the last call.
    pub fn take_counts(&mut self) -> (u64, u64) {
        let c = (self.hits, self.misses);
        self.hits = 0;
        self.misses = 0;
        c
    }

    fn insert(&mut self, cf: Cf, key: Vec<u8>, value: Option<Vec<u8>>) {
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
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Doubles the full maps (up to their share of the capacity).
    pub fn grow(&mut self) {
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
    pub fn absorb(&mut self, w: &OverlayWrites) {
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
/// `reader_cache::MAX_CACHED_VALUE`): an inode's extended attributes.
fn too_big(v: &Option<Vec<u8>>) -> bool {
    v.as_ref()
        .is_some_and(|v| v.len() > crate::reader_cache::MAX_CACHED_VALUE)
}

/// [`IndexRead`] through a [`WriterCache`]. Scans are not cached.
pub struct CachedIndex<'a, R: IndexRead + ?Sized> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::Arc;

    fn key() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(0u8..4, 1..4)
    }

    fn value() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(any::<u8>(), 0..3)
    }

    proptest! {
        /// Reads through pending groups equal reads of the index with the
        /// groups applied in order; once pruned, the base shows through.
        #[test]
        fn pending_groups_read_like_the_index_with_them_applied(
            base in prop::collection::btree_map(key(), value(), 0..20),
            groups in prop::collection::vec(
                prop::collection::btree_map(key(), prop::option::of(value()), 0..8), 0..4),
            prefix in prop::collection::vec(0u8..4, 0..2),
            after in prop::option::of(key()),
            limit in 1usize..10,
            probe in key(),
        ) {
            let base = MemIndex { inodes: BTreeMap::new(), edges: base };
            let mut expected = base.clone();
            let mut pending = PendingWrites::default();
            for (i, g) in groups.into_iter().enumerate() {
                let w = OverlayWrites { inodes: BTreeMap::new(), edges: g };
                expected.absorb(w.clone());
                pending.push(i as u64 + 1, Arc::new(w));
            }
            let view = PendingIndex { pending: &pending, base: &base };
            prop_assert_eq!(
                view.get(Cf::Edges, &probe).unwrap(),
                expected.get(Cf::Edges, &probe).unwrap()
            );
            prop_assert_eq!(
                view.scan(Cf::Edges, &prefix, after.as_deref(), limit).unwrap(),
                expected.scan(Cf::Edges, &prefix, after.as_deref(), limit).unwrap()
            );
            pending.prune(u64::MAX);
            prop_assert!(pending.is_empty());
            let view = PendingIndex { pending: &pending, base: &base };
            prop_assert_eq!(
                view.scan(Cf::Edges, &prefix, after.as_deref(), limit).unwrap(),
                base.scan(Cf::Edges, &prefix, after.as_deref(), limit).unwrap()
            );
        }
    }

    #[test]
    fn the_writer_cache_updates_cached_keys_and_skips_others() {
        let mut base = MemIndex::default();
        base.edges.insert(b"old".to_vec(), b"1".to_vec());
        let cache = std::cell::RefCell::new(WriterCache::new(1024));
        cache.borrow_mut().grow();
        let cached = CachedIndex {
            base: &base,
            cache: &cache,
        };
        assert_eq!(cached.get(Cf::Edges, b"old").unwrap(), Some(b"1".to_vec()));
        assert_eq!(cached.get(Cf::Edges, b"new").unwrap(), None);
        let mut w = OverlayWrites::default();
        w.edges.insert(b"old".to_vec(), None);
        w.edges.insert(b"new".to_vec(), Some(b"2".to_vec()));
        w.edges.insert(b"other".to_vec(), Some(b"3".to_vec()));
        cache.borrow_mut().absorb(&w);
        // Both cached keys took the new values without reading the base.
        assert_eq!(cached.get(Cf::Edges, b"old").unwrap(), None);
        assert_eq!(cached.get(Cf::Edges, b"new").unwrap(), Some(b"2".to_vec()));
        assert_eq!(cache.borrow_mut().take_counts(), (2, 2));
        assert!(!cache.borrow().maps[Cf::Edges as usize].contains_key(&b"other"[..]));
    }

    #[test]
    fn the_writer_cache_grows_between_groups_not_on_a_load() {
        let base = MemIndex::default();
        let cache = std::cell::RefCell::new(WriterCache::new(1024));
        let cached = CachedIndex {
            base: &base,
            cache: &cache,
        };
        // A new map has no room: the load is served but not cached.
        assert_eq!(cached.get(Cf::Edges, b"k").unwrap(), None);
        assert_eq!(cache.borrow().skipped(), 1);
        assert!(cache.borrow().maps[Cf::Edges as usize].is_empty());
        cache.borrow_mut().grow();
        assert_eq!(cache.borrow().skipped(), 0);
        assert_eq!(cached.get(Cf::Edges, b"k").unwrap(), None);
        assert_eq!(cached.get(Cf::Edges, b"k").unwrap(), None);
        assert_eq!(cache.borrow_mut().take_counts(), (1, 2));
    }

    #[test]
    fn an_overlay_reads_back_every_write_through_its_filter() {
        let mut base = MemIndex::default();
        for i in 0..10_000u32 {
            base.edges
                .insert(i.to_be_bytes().to_vec(), b"base".to_vec());
        }
        let mut o = Overlay::new(&base);
        // More keys than the filter has bits: collisions must not matter.
        for i in (0..10_000u32).step_by(2) {
            o.put(Cf::Edges, i.to_be_bytes().to_vec(), b"new".to_vec());
        }
        o.delete(Cf::Edges, 1u32.to_be_bytes().to_vec());
        for i in 0..10_000u32 {
            let want: Option<&[u8]> = match i {
                1 => None,
                _ if i % 2 == 0 => Some(b"new"),
                _ => Some(b"base"),
            };
            assert_eq!(
                o.get(Cf::Edges, &i.to_be_bytes()).unwrap().as_deref(),
                want,
                "{i}"
            );
            // The same key in the other column family was never written.
            assert_eq!(o.get(Cf::Inodes, &i.to_be_bytes()).unwrap(), None);
        }
        let w = o.take_writes();
        assert_eq!(w.edges.len(), 5_001);
        assert_eq!(
            o.get(Cf::Edges, &0u32.to_be_bytes()).unwrap().as_deref(),
            Some(&b"base"[..])
        );
    }
}
