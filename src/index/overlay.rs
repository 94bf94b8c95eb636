//! The overlay: a base index plus the writes not yet in it, read as one.

use super::*;

/// The pending writes of an overlay: `Some` = put, `None` = delete.
#[derive(Debug, Default, Clone)]
pub(crate) struct OverlayWrites {
    pub inodes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    pub edges: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
}

impl OverlayWrites {
    pub(crate) fn is_empty(&self) -> bool {
        self.inodes.is_empty() && self.edges.is_empty()
    }

    pub(super) fn map(&self, cf: Cf) -> &BTreeMap<Vec<u8>, Option<Vec<u8>>> {
        match cf {
            Cf::Inodes => &self.inodes,
            Cf::Edges => &self.edges,
        }
    }

    pub(super) fn map_mut(&mut self, cf: Cf) -> &mut BTreeMap<Vec<u8>, Option<Vec<u8>>> {
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
pub(crate) trait IndexWrite {
    fn put(&mut self, cf: Cf, key: &[u8], value: &[u8]);
    fn delete(&mut self, cf: Cf, key: &[u8]);

    /// Takes note that directory `parent`'s modification and change times
    /// become `t`, for a writer that rewrites the entry later itself (a
    /// replay: once per batch, not once per child); false, the default,
    /// when the caller must rewrite it now. A writer that defers must read
    /// the entry back with its times set, and must not let a later put of
    /// the entry be overwritten by them.
    fn defer_parent_times(&mut self, _parent: u64, _t: u64) -> bool {
        false
    }
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
pub(super) struct KeyFilter([[u64; 64]; 2]);

impl Default for KeyFilter {
    fn default() -> Self {
        KeyFilter([[0; 64]; 2])
    }
}

impl KeyFilter {
    pub(super) fn bit(key: &[u8]) -> (usize, u64) {
        let h = crc32c::crc32c(key) as usize;
        ((h >> 6) & 63, 1 << (h & 63))
    }

    pub(super) fn insert(&mut self, cf: Cf, key: &[u8]) {
        let (w, b) = Self::bit(key);
        self.0[cf as usize][w] |= b;
    }

    /// False only if `key` was never inserted.
    pub(super) fn may_contain(&self, cf: Cf, key: &[u8]) -> bool {
        let (w, b) = Self::bit(key);
        self.0[cf as usize][w] & b != 0
    }

    pub(super) fn of(writes: &OverlayWrites) -> KeyFilter {
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
pub(crate) struct Overlay<'a, R: IndexRead + ?Sized> {
    pub(super) base: &'a R,
    pub(super) writes: OverlayWrites,
    pub(super) filter: KeyFilter,
}

impl<'a, R: IndexRead + ?Sized> Overlay<'a, R> {
    pub(crate) fn new(base: &'a R) -> Self {
        Overlay {
            base,
            writes: OverlayWrites::default(),
            filter: KeyFilter::default(),
        }
    }

    pub(crate) fn put(&mut self, cf: Cf, key: Vec<u8>, value: Vec<u8>) {
        self.filter.insert(cf, &key);
        self.writes.map_mut(cf).insert(key, Some(value));
    }

    pub(crate) fn delete(&mut self, cf: Cf, key: Vec<u8>) {
        self.filter.insert(cf, &key);
        self.writes.map_mut(cf).insert(key, None);
    }

    #[cfg(test)]
    pub(crate) fn writes(&self) -> &OverlayWrites {
        &self.writes
    }

    /// Takes the pending writes, leaving the overlay empty.
    pub(crate) fn take_writes(&mut self) -> OverlayWrites {
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
pub(super) fn scan_start(
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
pub(super) fn merge_scan<R: IndexRead + ?Sized>(
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
