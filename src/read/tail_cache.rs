//! The tail cache: the most recent committed records, decoded, shared by
//! every caught-up subscriber.
//!
//! Without it, each commit would wake every subscriber to create a RocksDB
//! iterator and decode the same records again: with 100 subscribers on two
//! cores that steals the writer's CPU. The publisher inserts each round's
//! records (already decoded by the writer, so no extra work) as one
//! immutable chunk just before it publishes the watermark; subscribers that
//! are within the cache read from it, and ones further behind catch up from
//! the `log` column family through their own iterators. Memory is bounded by
//! `capacity` records.
//!
//! Records are shared by chunk, not one by one: a subscriber takes a
//! reference to each chunk it reads (a few per wake-up) and then walks the
//! records without touching their reference counts. With 100 subscribers a
//! record is delivered 100 times, so the per-record cost is what matters.
//! The lock is held only to find and clone the chunk references.
//!
//! The publisher never waits for that lock: subscribers run on a low-priority
//! (by default `SCHED_IDLE`) thread, which the scheduler may preempt while
//! it holds the read lock and not run again for a while on a busy machine.
//! When the lock is taken, the publisher leaves its chunk in a stash that only
//! it touches and adds it with the next round's; subscribers meanwhile read
//! those records from the log. The stash is bounded like the cache.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, RwLock, TryLockError};

use super::memo::SharedRecord;

/// Consecutive records, the first one with sequence `first`.
pub(crate) struct Chunk {
    first: u64,
    records: Vec<Arc<SharedRecord>>,
}

impl Chunk {
    fn last(&self) -> u64 {
        self.first + self.records.len() as u64 - 1
    }
}

/// The records `from..=upto` (at most `max`) held by a few chunks.
#[derive(Default)]
pub(crate) struct Slice {
    chunks: Vec<Arc<Chunk>>,
    from: u64,
    upto: u64,
}

impl Slice {
    /// The records in sequence order.
    pub(crate) fn records(&self) -> impl Iterator<Item = &Arc<SharedRecord>> + '_ {
        let (from, upto) = (self.from, self.upto);
        self.chunks.iter().flat_map(move |c| {
            let lo = from.max(c.first);
            let hi = upto.min(c.last());
            let range = if lo > hi {
                0..0
            } else {
                (lo - c.first) as usize..(hi - c.first) as usize + 1
            };
            c.records[range].iter()
        })
    }

    /// Lets go of the chunks (keeping the allocation).
    pub(crate) fn clear(&mut self) {
        self.chunks.clear();
    }
}

struct Inner {
    chunks: VecDeque<Arc<Chunk>>,
    /// Records held (sum over the chunks).
    len: usize,
}

pub(crate) struct TailCache {
    capacity: usize,
    inner: RwLock<Inner>,
    /// Chunks the publisher could not add because a reader held the lock
    /// (only the publisher takes this mutex).
    stash: Mutex<Inner>,
}

impl Inner {
    fn new() -> Inner {
        Inner {
            chunks: VecDeque::new(),
            len: 0,
        }
    }

    /// Appends `chunk`, keeping at most `capacity` records (whole chunks);
    /// the chunks let go go to `evicted`.
    fn push(&mut self, chunk: Arc<Chunk>, capacity: usize, evicted: &mut Vec<Arc<Chunk>>) {
        if self
            .chunks
            .back()
            .is_some_and(|c| c.last() + 1 != chunk.first)
            || chunk.records.len() > capacity
        {
            // Not contiguous (records were dropped from a full stash), or
            // larger than the whole cache: start over.
            evicted.extend(self.chunks.drain(..));
            self.len = 0;
            if chunk.records.len() > capacity {
                evicted.push(chunk);
                return;
            }
        }
        self.len += chunk.records.len();
        self.chunks.push_back(chunk);
        while self.len > capacity {
            if let Some(c) = self.chunks.pop_front() {
                self.len -= c.records.len();
                evicted.push(c);
            }
        }
    }
}

impl TailCache {
    pub(crate) fn new(capacity: usize) -> TailCache {
        TailCache {
            capacity,
            inner: RwLock::new(Inner::new()),
            stash: Mutex::new(Inner::new()),
        }
    }

    /// Appends a round's records (consecutive, continuing the cache).
    /// Returns the chunks that made room for them, for the caller to drop
    /// when it is not holding anyone up: freeing a round's worth of records
    /// is slower than everything else here, and the publisher has replies to
    /// send first.
    #[must_use = "dropping the evicted chunks frees them here"]
    pub(crate) fn extend(&self, records: Vec<Arc<SharedRecord>>) -> Vec<Arc<Chunk>> {
        let mut evicted = Vec::new();
        let Some(first) = records.first().map(|r| r.seq) else {
            return evicted;
        };
        if self.capacity == 0 {
            return evicted;
        }
        debug_assert!(
            records.windows(2).all(|w| w[0].seq + 1 == w[1].seq),
            "a round's records are consecutive"
        );
        let chunk = Arc::new(Chunk { first, records });
        let mut stash = self.stash.lock().unwrap_or_else(|p| p.into_inner());
        stash.push(chunk, self.capacity, &mut evicted);
        let mut inner = match self.inner.try_write() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            // A reader holds it: add the stash next round.
            Err(TryLockError::WouldBlock) => return evicted,
        };
        for c in stash.chunks.drain(..) {
            inner.push(c, self.capacity, &mut evicted);
        }
        stash.len = 0;
        evicted
    }

    /// Fills `out` with up to `max` records from `from` on, none above
    /// `upto`, if the cache holds `from`; returns whether it does.
    pub(crate) fn get(&self, from: u64, upto: u64, max: usize, out: &mut Slice) -> bool {
        out.clear();
        if max == 0 || upto < from {
            return false;
        }
        let upto = upto.min(from + max as u64 - 1);
        let inner = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let (Some(front), Some(back)) = (inner.chunks.front(), inner.chunks.back()) else {
            return false;
        };
        if from < front.first || from > back.last() {
            return false;
        }
        // The first chunk whose last record is at or after `from`.
        let start = inner.chunks.partition_point(|c| c.last() < from);
        for c in inner.chunks.range(start..) {
            if c.first > upto {
                break;
            }
            out.chunks.push(c.clone());
        }
        out.from = from;
        out.upto = upto;
        true
    }

    /// Drops every record (a Raft node installed a snapshot: the records
    /// before it are no longer the node's history).
    pub(crate) fn clear(&self) {
        let mut inner = self.inner.write().unwrap_or_else(|p| p.into_inner());
        inner.chunks.clear();
        inner.len = 0;
        let mut stash = self.stash.lock().unwrap_or_else(|p| p.into_inner());
        stash.chunks.clear();
        stash.len = 0;
    }

    /// Drops everything below `start` (after retention), whole chunks at a
    /// time; a chunk that straddles `start` stays (readers never ask for
    /// sequences below the log start).
    pub(crate) fn truncate_below(&self, start: u64) {
        let mut inner = self.inner.write().unwrap_or_else(|p| p.into_inner());
        while inner.chunks.front().is_some_and(|c| c.last() < start) {
            if let Some(c) = inner.chunks.pop_front() {
                inner.len -= c.records.len();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recs(from: u64, n: u64) -> Vec<Arc<SharedRecord>> {
        (from..from + n)
            .map(|seq| {
                Arc::new(SharedRecord::from(crate::event::Record {
                    seq,
                    time_ms: 0,
                    events: Vec::new(),
                }))
            })
            .collect()
    }

    /// Adds records `first..first + n`; returns the sequences evicted.
    fn push(c: &TailCache, first: u64, n: u64) -> Vec<u64> {
        c.extend(recs(first, n))
            .iter()
            .flat_map(|chunk| chunk.records.iter().map(|r| r.seq))
            .collect()
    }

    fn seqs(c: &TailCache, from: u64, upto: u64, max: usize) -> Option<Vec<u64>> {
        let mut s = Slice::default();
        c.get(from, upto, max, &mut s)
            .then(|| s.records().map(|r| r.seq).collect())
    }

    #[test]
    fn reads_across_chunks_within_bounds() {
        let c = TailCache::new(100);
        push(&c, 1, 3);
        push(&c, 4, 1);
        push(&c, 5, 4);
        assert_eq!(seqs(&c, 1, 8, 100), Some((1..=8).collect()));
        assert_eq!(seqs(&c, 2, 6, 100), Some(vec![2, 3, 4, 5, 6]));
        assert_eq!(seqs(&c, 3, 8, 3), Some(vec![3, 4, 5]));
        assert_eq!(seqs(&c, 8, 100, 10), Some(vec![8]));
        assert_eq!(seqs(&c, 9, 9, 10), None, "not yet cached");
        assert_eq!(seqs(&c, 0, 3, 10), None, "before the cache");
    }

    #[test]
    fn evicts_whole_chunks_beyond_capacity() {
        let c = TailCache::new(5);
        assert_eq!(push(&c, 1, 3), Vec::<u64>::new());
        // 6 records > 5: the first chunk goes, handed back to be freed.
        assert_eq!(push(&c, 4, 3), vec![1, 2, 3]);
        assert_eq!(seqs(&c, 1, 10, 10), None);
        assert_eq!(seqs(&c, 4, 10, 10), Some(vec![4, 5, 6]));
        // A chunk larger than the cache is not cached (and handed back);
        // what is cached stays valid and ends before it.
        assert_eq!(push(&c, 7, 6), vec![7, 8, 9, 10, 11, 12]);
        assert_eq!(seqs(&c, 4, 20, 20), Some(vec![4, 5, 6]));
        assert_eq!(seqs(&c, 7, 20, 20), None);
        // Caching starts again with the next chunk (after the gap).
        assert_eq!(push(&c, 13, 2), vec![4, 5, 6]);
        assert_eq!(seqs(&c, 4, 20, 20), None);
        assert_eq!(seqs(&c, 13, 20, 20), Some(vec![13, 14]));
    }

    #[test]
    fn a_gap_restarts_the_cache_and_truncation_drops_old_chunks() {
        let c = TailCache::new(100);
        push(&c, 1, 3);
        push(&c, 10, 2);
        assert_eq!(seqs(&c, 1, 20, 20), None);
        assert_eq!(seqs(&c, 10, 20, 20), Some(vec![10, 11]));
        push(&c, 12, 3);
        c.truncate_below(12);
        assert_eq!(seqs(&c, 10, 20, 20), None);
        assert_eq!(seqs(&c, 12, 20, 20), Some(vec![12, 13, 14]));
    }

    /// The publisher does not wait for a reader holding the lock: the round
    /// is stashed and added with the next one, contiguously.
    #[test]
    fn a_held_read_lock_defers_a_round_instead_of_blocking() {
        let c = TailCache::new(100);
        push(&c, 1, 2);
        {
            let _reader = c.inner.read().unwrap();
            push(&c, 3, 2); // returns at once
        }
        assert_eq!(seqs(&c, 3, 10, 10), None, "stashed, not yet visible");
        assert_eq!(seqs(&c, 1, 10, 10), Some(vec![1, 2]));
        push(&c, 5, 1);
        assert_eq!(seqs(&c, 1, 10, 10), Some(vec![1, 2, 3, 4, 5]));
    }

    /// A stash that outgrows the cache keeps only the newest records, and
    /// the cache restarts at them (no gap inside the cache).
    #[test]
    fn an_overfull_stash_restarts_the_cache_without_a_gap() {
        let c = TailCache::new(4);
        push(&c, 1, 2);
        {
            let _reader = c.inner.read().unwrap();
            push(&c, 3, 2);
            push(&c, 5, 2);
            push(&c, 7, 2);
        }
        push(&c, 9, 1);
        assert_eq!(seqs(&c, 1, 20, 20), None);
        let got = (1..=9).find_map(|s| seqs(&c, s, 20, 20));
        assert_eq!(got, Some(vec![7, 8, 9]));
    }

    #[test]
    fn disabled_cache_holds_nothing() {
        let c = TailCache::new(0);
        push(&c, 1, 3);
        assert_eq!(seqs(&c, 1, 3, 3), None);
    }
}
