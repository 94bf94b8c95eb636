//! The changes of groups in the log and not yet in the index.

use super::*;

/// The index changes of groups that are in the log but not yet in the
/// index: the writer validates the next group while an earlier one waits
/// for its fsync, so it must read those changes back.
///
/// Groups are kept whole, oldest first, and dropped once the committed
/// watermark covers them (their changes are in the index by then).
#[derive(Default)]
pub(crate) struct PendingWrites {
    pub(super) groups: std::collections::VecDeque<(u64, std::sync::Arc<OverlayWrites>, KeyFilter)>,
}

impl PendingWrites {
    /// Adds the changes of the group whose last record is `seq`.
    pub(crate) fn push(&mut self, seq: u64, writes: std::sync::Arc<OverlayWrites>) {
        if !writes.is_empty() {
            // Only a group with records changes the index, and each one
            // ends at a higher sequence than the last.
            debug_assert!(self.groups.back().is_none_or(|(s, _, _)| *s < seq));
            let filter = KeyFilter::of(&writes);
            self.groups.push_back((seq, writes, filter));
        }
    }

    /// Forgets the groups whose changes the index holds (`seq <= applied`).
    pub(crate) fn prune(&mut self, applied: u64) {
        while self.groups.front().is_some_and(|(s, _, _)| *s <= applied) {
            self.groups.pop_front();
        }
    }

    /// Groups still pending.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.groups.len()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// The newest pending change of `key`, if any.
    pub(super) fn get(&self, cf: Cf, key: &[u8]) -> Option<&Option<Vec<u8>>> {
        self.groups
            .iter()
            .rev()
            .filter(|(_, _, f)| f.may_contain(cf, key))
            .find_map(|(_, w, _)| w.map(cf).get(key))
    }
}

/// An index with [`PendingWrites`] changes laid over it.
pub(crate) struct PendingIndex<'a, R: IndexRead + ?Sized> {
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
