//! The tail cache: the most recent committed records, decoded, shared by
//! every caught-up subscriber.
//!
//! Without it, each commit would wake every subscriber to create a RocksDB
//! iterator and decode the same records again: with 100 subscribers on two
//! cores that steals the writer's CPU. The writer inserts a group's records
//! (already built, so no extra encoding) just before it publishes the
//! watermark; subscribers that are within the cache read from it, and ones
//! further behind catch up from the `log` column family through their own
//! iterators. Memory is bounded by `capacity` records.

use std::collections::VecDeque;
use std::sync::{Arc, RwLock};

use crate::event::SharedRecord as Record;

pub struct TailCache {
    capacity: usize,
    records: RwLock<VecDeque<Arc<Record>>>,
}

impl TailCache {
    pub fn new(capacity: usize) -> TailCache {
        TailCache {
            capacity,
            records: RwLock::new(VecDeque::with_capacity(capacity.min(1 << 16))),
        }
    }

    /// Appends a group's records (consecutive, continuing the cache).
    pub fn extend(&self, recs: Vec<Arc<Record>>) {
        if self.capacity == 0 {
            return;
        }
        let mut q = self.records.write().unwrap_or_else(|p| p.into_inner());
        for r in recs {
            if let Some(last) = q.back() {
                if last.seq + 1 != r.seq {
                    // Not contiguous (cannot happen with one writer): restart.
                    q.clear();
                }
            }
            if q.len() == self.capacity {
                q.pop_front();
            }
            q.push_back(r);
        }
    }

    /// Up to `max` records from `from` on, if the cache holds `from`.
    pub fn get(&self, from: u64, upto: u64, max: usize) -> Option<Vec<Arc<Record>>> {
        let q = self.records.read().unwrap_or_else(|p| p.into_inner());
        let first = q.front()?.seq;
        if from < first || from > q.back()?.seq {
            return None;
        }
        let start = (from - first) as usize;
        Some(
            q.iter()
                .skip(start)
                .take_while(|r| r.seq <= upto)
                .take(max)
                .cloned()
                .collect(),
        )
    }

    /// Drops everything below `start` (after retention).
    pub fn truncate_below(&self, start: u64) {
        let mut q = self.records.write().unwrap_or_else(|p| p.into_inner());
        while q.front().is_some_and(|r| r.seq < start) {
            q.pop_front();
        }
    }
}
