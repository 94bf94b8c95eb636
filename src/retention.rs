//! Log retention and durable named cursors.
//!
//! The log does not grow forever: a [`RetentionPolicy`] bounds it by record
//! count, age and/or bytes. A pass removes the oldest records by one range
//! deletion of the `log` column family (then compacts that range away),
//! after persisting the new `log_start` in `meta` with a synced write.
//! Records are only removed once the index on disk holds them: a pass
//! flushes the index first when its last flush is older than the records it
//! would remove ([`Store::durable_applied_seq`]).
//!
//! Named cursors hold retention: nothing at or after the lowest live
//! cursor's next position is removed. A cursor that lags more than
//! `max_cursor_lag` records behind the log's end is *expired* instead, so
//! that a dead consumer cannot fill the disk; its owner gets
//! [`Error::CursorExpired`] on resume and recovers with a snapshot.
//!
//! [`LogRetention`] owns this state: the log's bounds as readers see them,
//! the cursors, and the lock that serialises passes. It persists through
//! named [`Store`] methods only.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::read::tail_cache::TailCache;
use crate::store::Store;

pub use treelog_proto::cursor::{validate_cursor_name, CursorInfo, CursorState};

/// Most durable cursors a store keeps (expired ones included, until they
/// are dropped): each is a key and an entry every retention pass reads,
/// and any subscriber may name a new one.
pub const MAX_CURSORS: usize = 10_000;

/// Bounds on the log. `None` means unbounded in that dimension.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetentionPolicy {
    /// Keep at most this many records.
    pub max_records: Option<u64>,
    /// Remove records committed longer ago than this.
    pub max_age: Option<Duration>,
    /// Keep at most about this many bytes of record values.
    pub max_bytes: Option<u64>,
    /// Expire a cursor that is more than this many records behind the end.
    pub max_cursor_lag: Option<u64>,
    /// How often the background pass runs (when any bound is set).
    pub interval: Option<Duration>,
}

impl RetentionPolicy {
    pub fn is_unbounded(&self) -> bool {
        self.max_records.is_none()
            && self.max_age.is_none()
            && self.max_bytes.is_none()
            && self.max_cursor_lag.is_none()
    }
}

/// What a retention pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetentionReport {
    pub old_start: u64,
    pub new_start: u64,
    pub removed_records: u64,
    pub removed_bytes: u64,
    pub expired_cursors: Vec<String>,
    /// The lowest live cursor held the start back to this position.
    pub held_by_cursor: Option<String>,
}

/// The log's retention state: its first sequence and size as readers and
/// the writer see them, and the durable named cursors (mirroring `meta`'s
/// `cursor/*` keys).
pub struct LogRetention {
    /// First sequence still in the log (raised by a pass).
    start: AtomicU64,
    /// Bytes of record values in the log (approximate between a pass and
    /// the next group, which persists it).
    bytes: AtomicU64,
    cursors: Mutex<BTreeMap<String, CursorState>>,
    /// Serialises passes.
    pass: Mutex<()>,
}

fn expired_error(name: &str, st: &CursorState) -> Error {
    Error::CursorExpired {
        name: name.to_owned(),
        acked: st.acked,
        log_start: st.expired.map(|e| e.1).unwrap_or(0),
    }
}

impl LogRetention {
    /// Holds off retention passes while the guard lives: a backup takes
    /// its checkpoint under it, so that no pass moves the log's start
    /// between the checkpoint's flush and its copy of the write-ahead log
    /// (see `crate::ops::backup`).
    pub(crate) fn hold_passes(&self) -> std::sync::MutexGuard<'_, ()> {
        self.pass.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The state persisted in `store`.
    pub fn load(store: &Store) -> Result<LogRetention> {
        Ok(LogRetention {
            start: AtomicU64::new(store.log_start()?),
            bytes: AtomicU64::new(store.log_bytes()?),
            cursors: Mutex::new(store.load_cursors()?),
            pass: Mutex::new(()),
        })
    }

    /// First sequence still in the log.
    pub fn log_start(&self) -> u64 {
        self.start.load(Ordering::Acquire)
    }

    /// The log's start moved to `start` outside a pass (a checkpoint
    /// installed in place, already persisted).
    pub(crate) fn moved_start(&self, start: u64) {
        self.start.fetch_max(start, Ordering::AcqRel);
    }

    /// Bytes of record values in the log.
    pub fn log_bytes(&self) -> u64 {
        self.bytes.load(Ordering::Acquire)
    }

    /// Counts `n` more bytes of records appended; returns the new total
    /// (which the writer persists with the group's index batch).
    pub fn add_log_bytes(&self, n: u64) -> u64 {
        self.bytes.fetch_add(n, Ordering::AcqRel) + n
    }

    fn cursors(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, CursorState>> {
        self.cursors.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens (or creates at `default_acked`) the named cursor; returns its
    /// acknowledged position. Fails if it expired.
    pub fn open_cursor(&self, store: &Store, name: &str, default_acked: u64) -> Result<u64> {
        validate_cursor_name(name)?;
        let mut cursors = self.cursors();
        if let Some(st) = cursors.get(name) {
            if st.expired.is_some() {
                return Err(expired_error(name, st));
            }
            return Ok(st.acked);
        }
        if cursors.len() >= MAX_CURSORS {
            return Err(Error::Busy(format!(
                "{} cursors exist, the most a store keeps: drop unused ones \
                 (`treelog admin cursors --drop NAME`) before naming a new one",
                cursors.len()
            )));
        }
        let start = self.log_start();
        if default_acked + 1 < start {
            return Err(Error::Compacted {
                requested: default_acked + 1,
                first_available: start,
            });
        }
        let now = now_ms();
        let st = CursorState {
            acked: default_acked,
            created_ms: now,
            updated_ms: now,
            expired: None,
        };
        store.put_cursor(name, &st, true)?;
        cursors.insert(name.to_owned(), st);
        Ok(default_acked)
    }

    /// The acknowledged position of a live cursor, if it exists.
    pub fn cursor_acked(&self, name: &str) -> Option<Result<u64>> {
        self.cursors().get(name).map(|st| match st.expired {
            Some(_) => Err(expired_error(name, st)),
            None => Ok(st.acked),
        })
    }

    /// Records that the consumer of `name` processed everything up to `seq`
    /// (`committed` is the log's end). Acknowledgements only move forward.
    /// Written through the WAL without an fsync: a crash can lose the
    /// latest acks (the consumer then sees those records again), never
    /// records themselves; a pass syncs before it removes anything a cursor
    /// protected.
    pub fn ack(&self, store: &Store, committed: u64, name: &str, seq: u64) -> Result<()> {
        let mut cursors = self.cursors();
        let st = cursors
            .get_mut(name)
            .ok_or_else(|| Error::NotFound(format!("cursor {name}")))?;
        if st.expired.is_some() {
            return Err(expired_error(name, st));
        }
        if seq > committed {
            return Err(Error::InvalidArgument(format!(
                "cannot acknowledge {seq}: the log ends at {committed}"
            )));
        }
        if seq <= st.acked {
            return Ok(());
        }
        st.acked = seq;
        st.updated_ms = now_ms();
        store.put_cursor(name, st, false)
    }

    pub fn drop_cursor(&self, store: &Store, name: &str) -> Result<()> {
        let mut cursors = self.cursors();
        if cursors.remove(name).is_none() {
            return Err(Error::NotFound(format!("cursor {name}")));
        }
        store.delete_cursor(name)
    }

    /// Every cursor, with its lag behind `committed`.
    pub fn list_cursors(&self, committed: u64) -> Vec<CursorInfo> {
        self.cursors()
            .iter()
            .map(|(n, st)| CursorInfo {
                name: n.clone(),
                state: st.clone(),
                lag: committed.saturating_sub(st.acked),
            })
            .collect()
    }

    /// The log's writer (a consensus protocol) will read nothing up to
    /// `upto` again, as `position` (meta written first, synced) records:
    /// the log goes too, as far as the live cursors and the index on disk
    /// allow (the rest goes in later passes). Returns the log's new start.
    pub(crate) fn purge_upto(
        &self,
        store: &Store,
        tail: &TailCache,
        upto: u64,
        position: &[(&[u8], &[u8])],
    ) -> Result<u64> {
        let _pass = self.pass.lock().unwrap_or_else(|p| p.into_inner());
        let start = self.log_start();
        let mut target = upto.saturating_add(1);
        for st in self.cursors().values() {
            if st.expired.is_none() {
                target = target.min(st.acked + 1);
            }
        }
        target = target.max(start);
        if target > start {
            let durable = store.durable_applied_seq(target - 1)?;
            target = target.min(durable + 1).max(start);
        }
        let mut removed_bytes = 0u64;
        if target > start {
            for item in store.log_sizes(start)? {
                let (seq, len) = item?;
                if seq >= target {
                    break;
                }
                removed_bytes += len as u64;
            }
        }
        store.purge_log(position, target)?;
        if target > start {
            self.start.store(target, Ordering::Release);
            tail.truncate_below(target);
            let _ = self
                .bytes
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
                    Some(b.saturating_sub(removed_bytes))
                });
        }
        Ok(target)
    }

    /// One retention pass over a log that ends at `last`; `tail` drops what
    /// the pass removed. Nothing from `ceiling` on goes (the first entry the
    /// log's writer may still read, when a consensus protocol writes it).
    pub(crate) fn run(
        &self,
        store: &Store,
        last: u64,
        ceiling: Option<u64>,
        tail: &TailCache,
        metrics: Option<&Metrics>,
        policy: &RetentionPolicy,
    ) -> Result<RetentionReport> {
        let _pass = self.pass.lock().unwrap_or_else(|p| p.into_inner());
        let start = self.log_start();
        let mut report = RetentionReport {
            old_start: start,
            new_start: start,
            ..Default::default()
        };
        let mut target = start;
        if let Some(n) = policy.max_records {
            target = target.max((last + 1).saturating_sub(n));
        }
        if let Some(age) = policy.max_age {
            let cutoff = now_ms().saturating_sub(age.as_millis() as u64);
            // Times never decrease along the log: binary search the first
            // record at or after the cutoff.
            let (mut lo, mut hi) = (start, last + 1);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if record_time(store, mid)? < cutoff {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            target = target.max(lo);
        }
        if let Some(max) = policy.max_bytes {
            let total_bytes = self.log_bytes();
            if total_bytes > max {
                let mut excess = total_bytes - max;
                let mut seq = start;
                for item in store.log_sizes(start)? {
                    let (s, len) = item?;
                    seq = s + 1;
                    excess = excess.saturating_sub(len as u64);
                    if excess == 0 || seq > last {
                        break;
                    }
                }
                target = target.max(seq);
            }
        }
        target = target.min(last + 1);
        if let Some(c) = ceiling {
            target = target.min(c);
        }

        // Cursors: expire the ones lagging too far, then let the rest hold.
        let mut expired = Vec::new();
        {
            let mut cursors = self.cursors();
            if let Some(max_lag) = policy.max_cursor_lag {
                for (name, st) in cursors.iter() {
                    if st.expired.is_none() && last.saturating_sub(st.acked) > max_lag {
                        report.expired_cursors.push(name.clone());
                    }
                }
            }
            for (name, st) in cursors.iter() {
                let live = st.expired.is_none() && !report.expired_cursors.contains(name);
                if live && st.acked + 1 < target {
                    target = st.acked + 1;
                    report.held_by_cursor = Some(name.clone());
                }
            }
            target = target.max(start);
            // The index is written without the WAL: what it holds past its
            // last flush comes back after a crash only by replaying those
            // records. So nothing the index on disk lacks may go (flushing
            // it, once the cursors have had their say, if that lets the
            // pass work).
            if target > start {
                let durable = store.durable_applied_seq(target - 1)?;
                target = target.min(durable + 1);
            }
            // An expired cursor records the log start its owner will face.
            for name in &report.expired_cursors {
                if let Some(st) = cursors.get_mut(name) {
                    st.expired = Some((now_ms(), target));
                    expired.push((name.clone(), st.clone()));
                }
            }
        }
        target = target.max(start);
        report.new_start = target;
        if let Some(m) = metrics {
            m.log
                .cursors_expired
                .inc_by(report.expired_cursors.len() as u64);
        }
        if target == start {
            if !expired.is_empty() {
                store.retire_log_below(None, &expired)?;
                tracing::info!(
                    log_start = start,
                    expired_cursors = ?report.expired_cursors,
                    "retention expired cursors"
                );
            }
            return Ok(report);
        }
        // Count what goes (for the byte total) before it goes.
        let mut removed_bytes = 0u64;
        for item in store.log_sizes(start)? {
            let (seq, len) = item?;
            if seq >= target {
                break;
            }
            removed_bytes += len as u64;
        }
        crate::sys::failpoint::crash_point("retention::before_start");
        // 1. Persist the new start (synced, which also syncs earlier cursor
        //    acks) with the expired cursors.
        store.retire_log_below(Some(target), &expired)?;
        crate::sys::failpoint::crash_point("retention::after_start");
        // 2. From now on readers below `target` get Compacted.
        self.start.store(target, Ordering::Release);
        tail.truncate_below(target);
        // 3. Remove the records and let compaction reclaim the space.
        store.delete_log_below(target)?;
        let _ = self
            .bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
                Some(b.saturating_sub(removed_bytes))
            });
        report.removed_records = target - start;
        if let Some(m) = metrics {
            m.log.retention_removed.inc_by(report.removed_records);
        }
        report.removed_bytes = removed_bytes;
        tracing::info!(
            old_start = start,
            new_start = target,
            removed_records = report.removed_records,
            removed_bytes,
            expired_cursors = ?report.expired_cursors,
            held_by_cursor = ?report.held_by_cursor,
            "retention removed records"
        );
        Ok(report)
    }
}

/// The time of record `seq`. A consensus protocol's own entries (a new leader's
/// blank, a membership change) have none: theirs is the next record's
/// (none after them: the newest possible), so that times stay
/// non-decreasing for the search.
fn record_time(store: &Store, seq: u64) -> Result<u64> {
    let mut s = seq;
    loop {
        match store.read_record(s)? {
            Some(r) if r.time_ms > 0 || !r.events.is_empty() => return Ok(r.time_ms),
            Some(_) => s += 1,
            None if s > seq => return Ok(u64::MAX),
            None => return Err(Error::corrupt("log", format!("record {seq} is missing"))),
        }
    }
}
