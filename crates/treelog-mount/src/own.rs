//! The sequences of the records this mount wrote. The kernel learnt what
//! they changed from the mount's own replies (and drops the parent's
//! cached attributes itself), so the change stream need not invalidate
//! them again: a file just created keeps its cached entry.

use std::collections::BTreeSet;
use std::sync::Mutex;

/// Sequences the stream has not delivered yet, at most this many; beyond,
/// a write is not remembered and its record invalidates as any other.
const MAX_PENDING: usize = 1 << 16;

#[derive(Default)]
pub(crate) struct OwnWrites {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    pending: BTreeSet<u64>,
    /// The last position the stream delivered: a sequence at or below it
    /// has been handled already.
    delivered: u64,
}

impl OwnWrites {
    pub(crate) fn add(&self, seq: u64) {
        let mut i = self.inner.lock().unwrap();
        if seq > i.delivered && i.pending.len() < MAX_PENDING {
            i.pending.insert(seq);
        }
    }

    /// The stream delivered the record `seq`: whether it was this
    /// mount's. Forgets every sequence up to it.
    pub(crate) fn delivered(&self, seq: u64) -> bool {
        let mut i = self.inner.lock().unwrap();
        i.delivered = i.delivered.max(seq);
        let mine = i.pending.remove(&seq);
        while let Some(&first) = i.pending.first() {
            if first > seq {
                break;
            }
            i.pending.remove(&first);
        }
        mine
    }

    /// After a resync nothing is known to be handled.
    pub(crate) fn clear(&self) {
        self.inner.lock().unwrap().pending.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_records_are_recognised_once() {
        let o = OwnWrites::default();
        o.add(5);
        o.add(7);
        assert!(!o.delivered(4));
        assert!(o.delivered(5));
        assert!(!o.delivered(5));
        assert!(!o.delivered(8), "7 was passed over and dropped");
        o.add(8);
        assert!(!o.delivered(8), "a sequence already delivered is not added");
    }
}
