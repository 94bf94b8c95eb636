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
pub(crate) enum Cf {
    Inodes,
    Edges,
}

pub(crate) type Kv = (Vec<u8>, Vec<u8>);

/// What [`IndexRead::scan_each`] lends each entry to: its key and value.
pub(crate) type EntryFn<'a> = dyn FnMut(&[u8], &[u8]) -> Result<()> + 'a;

/// What [`IndexRead::get_each`] lends each value found to, with the index
/// of its key.
pub(crate) type ValueFn<'a> = dyn FnMut(usize, &[u8]) -> Result<()> + 'a;

/// Read access to the index.
pub(crate) trait IndexRead {
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
pub(crate) struct MemIndex {
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
    pub(crate) fn absorb(&mut self, writes: OverlayWrites) {
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

/// The longest value the caches keep (an inode's extended attributes can
/// be longer; they are read from RocksDB each time).
pub(crate) const MAX_CACHED_VALUE: usize = 4096;

mod overlay;
mod pending;
mod writer_cache;

pub(crate) use overlay::*;
pub(crate) use pending::*;
pub(crate) use writer_cache::*;

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
