//! Reading the index: live, or at a RocksDB snapshot a published state
//! holds; point reads, scans, and many keys read by one iterator.

use super::*;

impl Store {
    /// Up to `limit` index entries with key prefix `prefix` after `after`.
    pub(super) fn index_scan(
        &self,
        cf: Cf,
        ro: ReadOptions,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<Kv>> {
        let mut out = Vec::new();
        self.index_scan_each(cf, ro, prefix, after, limit, &mut |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            Ok(())
        })?;
        Ok(out)
    }

    /// [`Store::index_scan`], lending each entry to `f`.
    pub(super) fn index_scan_each(
        &self,
        cf: Cf,
        mut ro: ReadOptions,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
        f: &mut EntryFn<'_>,
    ) -> Result<()> {
        let h = self.index_cf(cf)?;
        if cf == Cf::Edges && prefix.len() == 8 {
            ro.set_prefix_same_as_start(true);
        }
        scan_iter(self.db.raw_iterator_cf_opt(h, ro), prefix, after, limit, f)
    }

    /// Point reads of many keys through one iterator (see [`seek_each`]).
    pub(super) fn index_get_each(
        &self,
        cf: Cf,
        ro: ReadOptions,
        keys: &[&[u8]],
        f: &mut ValueFn<'_>,
    ) -> Result<()> {
        let h = self.index_cf(cf)?;
        if keys.len() < SEEK_EACH_MIN_KEYS {
            // An iterator costs more to set up than a few point reads.
            for (i, k) in keys.iter().enumerate() {
                if let Some(v) = self.db.get_pinned_cf_opt(h, k, &ro)? {
                    f(i, &v)?;
                }
            }
            return Ok(());
        }
        let order = sorted_order(keys);
        seek_each(self.db.raw_iterator_cf_opt(h, ro), keys, &order, f)
    }

    /// A read view of the live index: everything written to it, including
    /// a round's changes that the applier has written while their fsync
    /// runs. For the writer and offline tools; readers of a running
    /// namespace read at its published [`IndexSnapshot`].
    pub fn index(&self) -> DbIndex<'_> {
        DbIndex { store: self }
    }

    /// A snapshot of the whole database as it is now.
    pub fn snapshot(&self) -> IndexSnapshot {
        let snap = self.db.snapshot();
        // SAFETY: the snapshot borrows the `DB` inside `self.db`'s `Arc`,
        // which never moves; `IndexSnapshot` holds a clone of that `Arc`
        // and drops the snapshot before it (field order), so the borrow
        // never outlives the database.
        let snap: SnapshotWithThreadMode<'static, DB> = unsafe { std::mem::transmute(snap) };
        let mut read = ReadOptions::default();
        read.set_snapshot(&snap);
        IndexSnapshot {
            read,
            snap,
            _db: self.db.clone(),
        }
    }

    /// A read view of the index at `snap`.
    pub fn index_at<'a>(&'a self, snap: &'a IndexSnapshot) -> SnapshotIndex<'a> {
        SnapshotIndex { store: self, snap }
    }
}

/// [`IndexRead`] over the live `inodes` and `edges` column families.
pub struct DbIndex<'a> {
    pub(super) store: &'a Store,
}

impl IndexRead for DbIndex<'_> {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let h = self.store.index_cf(cf)?;
        Ok(self.store.db.get_pinned_cf(h, key)?.map(|v| v.to_vec()))
    }

    fn scan(&self, cf: Cf, prefix: &[u8], after: Option<&[u8]>, limit: usize) -> Result<Vec<Kv>> {
        self.store
            .index_scan(cf, ReadOptions::default(), prefix, after, limit)
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
            .index_scan_each(cf, ReadOptions::default(), prefix, after, limit, f)
    }

    fn get_each(&self, cf: Cf, keys: &[&[u8]], f: &mut ValueFn<'_>) -> Result<()> {
        self.store
            .index_get_each(cf, ReadOptions::default(), keys, f)
    }
}

/// A RocksDB snapshot that owns its place: shared between threads (in an
/// `Arc`) and published to readers, it keeps its database open.
pub struct IndexSnapshot {
    /// Read options with the snapshot set, shared by every point read at it.
    pub(super) read: ReadOptions,
    pub(super) snap: SnapshotWithThreadMode<'static, DB>,
    pub(super) _db: Arc<DB>,
}

/// [`IndexRead`] over the `inodes` and `edges` column families at a
/// snapshot.
pub struct SnapshotIndex<'a> {
    pub(super) store: &'a Store,
    pub(super) snap: &'a IndexSnapshot,
}

impl SnapshotIndex<'_> {
    /// A `meta` value at the snapshot.
    pub fn meta_u64(&self, key: &[u8]) -> Result<Option<u64>> {
        self.store.meta_u64_at(key, &self.snap.read)
    }
}

impl IndexRead for SnapshotIndex<'_> {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let h = self.store.index_cf(cf)?;
        Ok(self
            .store
            .db
            .get_pinned_cf_opt(h, key, &self.snap.read)?
            .map(|v| v.to_vec()))
    }

    fn scan(&self, cf: Cf, prefix: &[u8], after: Option<&[u8]>, limit: usize) -> Result<Vec<Kv>> {
        self.store
            .index_scan(cf, self.snap.options(), prefix, after, limit)
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
            .index_scan_each(cf, self.snap.options(), prefix, after, limit, f)
    }

    fn get_each(&self, cf: Cf, keys: &[&[u8]], f: &mut ValueFn<'_>) -> Result<()> {
        self.store.index_get_each(cf, self.snap.options(), keys, f)
    }
}

impl IndexSnapshot {
    /// Fresh read options at this snapshot (an iterator takes its own).
    pub(super) fn options(&self) -> ReadOptions {
        let mut ro = ReadOptions::default();
        ro.set_snapshot(&self.snap);
        ro
    }
}

/// Up to `limit` entries with key prefix `prefix` after `after`, from a raw
/// iterator (shared by the live and the snapshot index views), lent to `f`.
pub(super) fn scan_iter(
    mut it: rocksdb::DBRawIteratorWithThreadMode<'_, DB>,
    prefix: &[u8],
    after: Option<&[u8]>,
    limit: usize,
    f: &mut EntryFn<'_>,
) -> Result<()> {
    match after {
        Some(a) if a >= prefix => {
            it.seek(a);
            if it.key() == Some(a) {
                it.next();
            }
        }
        _ => it.seek(prefix),
    }
    let mut n = 0;
    while n < limit {
        match (it.key(), it.value()) {
            (Some(k), Some(v)) if k.starts_with(prefix) => f(k, v)?,
            _ => break,
        }
        n += 1;
        it.next();
    }
    it.status()?;
    Ok(())
}

/// The indexes of `keys` in key order. Ordered by each key's first 8
/// bytes as an integer, then whole: the keys are inode ids, which the
/// integer orders without a `memcmp` call per comparison (a tenth of a
/// listing's time before). Children made in name order come sorted.
pub(super) fn sorted_order(keys: &[&[u8]]) -> Vec<u32> {
    let mut order: Vec<u32> = (0..keys.len() as u32).collect();
    let heads: Vec<u64> = keys.iter().map(|k| key_head(k)).collect();
    let cmp = |a: &u32, b: &u32| {
        let (a, b) = (*a as usize, *b as usize);
        heads[a].cmp(&heads[b]).then_with(|| keys[a].cmp(keys[b]))
    };
    if !order.is_sorted_by(|a, b| cmp(a, b) != std::cmp::Ordering::Greater) {
        order.sort_unstable_by(cmp);
    }
    order
}

/// A key's first 8 bytes as a big-endian integer (zero-padded): ordered
/// as the bytes are.
pub(super) fn key_head(k: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = k.len().min(8);
    b[..n].copy_from_slice(&k[..n]);
    u64::from_be_bytes(b)
}

/// Keys from which [`Store::index_get_each`] reads through one iterator.
pub(super) const SEEK_EACH_MIN_KEYS: usize = 32;

/// Steps an iterator takes forward before it seeks instead: a step costs a
/// key comparison per level, a seek a binary search in each.
pub(super) const SEEK_EACH_STEPS: usize = 8;

/// The values of `keys` that exist, lent to `f` with their index in
/// `keys`, read by one iterator over the keys in sorted order: it steps
/// forward where the next key is close (a directory's children are often
/// created together, so their inode ids run in sequence) and seeks where
/// it is not. Much cheaper per key than a point read each, which searches
/// every memtable and level from the top.
pub(super) fn seek_each(
    mut it: rocksdb::DBRawIteratorWithThreadMode<'_, DB>,
    keys: &[&[u8]],
    order: &[u32],
    f: &mut ValueFn<'_>,
) -> Result<()> {
    let mut positioned = false;
    for &i in order {
        let want = keys[i as usize];
        // Invariant: when positioned, the iterator is at the first key at
        // or after an earlier (smaller or equal) wanted key, or invalid.
        let mut steps = 0;
        while positioned && steps < SEEK_EACH_STEPS {
            match it.key() {
                Some(k) if k < want => {
                    it.next();
                    steps += 1;
                }
                // At or past `want`, or at the end: no seek needed.
                _ => break,
            }
        }
        if !positioned || matches!(it.key(), Some(k) if k < want) {
            it.seek(want);
            positioned = true;
        }
        match (it.key(), it.value()) {
            (Some(k), Some(v)) if k == want => f(i as usize, v)?,
            _ => it.status()?,
        }
    }
    it.status()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::OverlayWrites;

    fn write(store: &Store, seq: u64, puts: &[(u64, &[u8])], deletes: &[u64]) {
        let mut w = OverlayWrites::default();
        for (id, v) in puts {
            w.inodes.insert(id.to_be_bytes().to_vec(), Some(v.to_vec()));
        }
        for id in deletes {
            w.inodes.insert(id.to_be_bytes().to_vec(), None);
        }
        let mut b = store.index_batch();
        store.add_index_writes(&mut b, &w).unwrap();
        store.write_index_batch(b, seq, None).unwrap();
    }

    /// Ordering by the integer head, then the bytes, is byte order, for
    /// keys shorter than, as long as and longer than the head.
    #[test]
    fn key_heads_order_as_bytes() {
        let mut keys: Vec<Vec<u8>> = vec![vec![], vec![0], vec![0, 0], vec![0xff; 9]];
        for len in 1..=10u8 {
            for first in [0u8, 1, 0x61, 0xff] {
                keys.push(
                    (0..len)
                        .map(|i| first.wrapping_add(i.wrapping_mul(37)))
                        .collect(),
                );
                keys.push(vec![first; len as usize]);
            }
        }
        let mut by_head = keys.clone();
        by_head.sort_by(|a, b| key_head(a).cmp(&key_head(b)).then_with(|| a.cmp(b)));
        keys.sort();
        assert_eq!(by_head, keys);
    }

    /// `get_each` answers exactly what a point read of each key answers,
    /// whatever the keys' order, gaps, duplicates and misses, with the
    /// values spread over an SST and the memtable (a merging iterator) and
    /// some deleted in the memtable, live and at a snapshot taken before
    /// later writes.
    #[test]
    fn get_each_agrees_with_point_reads() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        let v = |id: u64| format!("v{id}").into_bytes();
        // Dense ids, then ids 50 apart (past the iterator's forward steps).
        let first: Vec<u64> = (1..=300).chain((1_000..6_000).step_by(50)).collect();
        let vals: Vec<Vec<u8>> = first.iter().map(|id| v(*id)).collect();
        let puts: Vec<(u64, &[u8])> = first.iter().zip(&vals).map(|(i, v)| (*i, &v[..])).collect();
        write(&store, 1, &puts, &[]);
        store.flush().unwrap();
        // In the memtable: every third dense id rewritten, every seventh deleted.
        let again: Vec<u64> = (1..=300).step_by(3).collect();
        let vals2: Vec<Vec<u8>> = again
            .iter()
            .map(|id| format!("w{id}").into_bytes())
            .collect();
        let puts2: Vec<(u64, &[u8])> = again
            .iter()
            .zip(&vals2)
            .map(|(i, v)| (*i, &v[..]))
            .collect();
        let deleted: Vec<u64> = (1..=300).step_by(7).collect();
        write(&store, 2, &puts2, &deleted);
        let snap = store.snapshot();
        write(&store, 3, &[(2, b"later")], &[5]);

        // Unsorted, with duplicates, misses below, between and above.
        let mut wanted: Vec<u64> = vec![0, 7_000, 999, 5, 5, 2];
        wanted.extend((0..400).map(|i| (i * 7919) % 320));
        wanted.extend((900..6_100).step_by(25));
        for n in [wanted.len(), 40, 3] {
            let keys: Vec<[u8; 8]> = wanted[..n].iter().map(|id| id.to_be_bytes()).collect();
            let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
            for view in [
                &store.index() as &dyn IndexRead,
                &store.index_at(&snap) as &dyn IndexRead,
            ] {
                let mut got: Vec<Option<Vec<u8>>> = vec![None; n];
                let mut calls = 0;
                view.get_each(Cf::Inodes, &keys, &mut |i, v| {
                    assert!(got[i].is_none(), "key {i} answered twice");
                    got[i] = Some(v.to_vec());
                    calls += 1;
                    Ok(())
                })
                .unwrap();
                let want: Vec<Option<Vec<u8>>> = keys
                    .iter()
                    .map(|k| view.get(Cf::Inodes, k).unwrap())
                    .collect();
                assert_eq!(got, want, "{n} keys");
                assert_eq!(calls, want.iter().flatten().count());
            }
        }
        // The snapshot saw neither the later write nor the later delete.
        let at = store.index_at(&snap);
        assert_eq!(
            at.get(Cf::Inodes, &2u64.to_be_bytes()).unwrap(),
            Some(b"v2".to_vec())
        );
        assert_eq!(
            at.get(Cf::Inodes, &5u64.to_be_bytes()).unwrap(),
            Some(b"v5".to_vec())
        );
        assert_eq!(
            at.get(Cf::Inodes, &7u64.to_be_bytes()).unwrap(),
            Some(b"w7".to_vec())
        );
        assert_eq!(at.get(Cf::Inodes, &8u64.to_be_bytes()).unwrap(), None);
    }
}
