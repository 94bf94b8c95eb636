//! A committed state as readers see it.

use crate::store::IndexSnapshot;

/// A committed state as readers see it: the index at a RocksDB snapshot,
/// and the sequence of the last record it holds.
pub(crate) struct PublishedView {
    pub(crate) snap: IndexSnapshot,
    pub(crate) seq: u64,
}
