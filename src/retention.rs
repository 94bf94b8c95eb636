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

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rocksdb::{IteratorMode, WriteBatch, WriteOptions};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::format::{self, meta};
use crate::store::{Store, CF_LOG, CF_META};
use crate::writer::{now_ms, Shared};

pub use treelog_proto::cursor::{validate_cursor_name, CursorInfo, CursorState};

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

fn cursor_key(name: &str) -> Vec<u8> {
    let mut k = meta::CURSOR_PREFIX.to_vec();
    k.extend_from_slice(name.as_bytes());
    k
}

/// Loads every cursor from `meta`.
pub fn load_cursors(store: &Store) -> Result<BTreeMap<String, CursorState>> {
    let mut out = BTreeMap::new();
    let it = store.db().iterator_cf(
        store.cf(CF_META)?,
        IteratorMode::From(meta::CURSOR_PREFIX, rocksdb::Direction::Forward),
    );
    for item in it {
        let (k, v) = item?;
        let Some(name) = k.strip_prefix(meta::CURSOR_PREFIX) else {
            break;
        };
        let name = String::from_utf8(name.to_vec())
            .map_err(|_| Error::corrupt("cursor", "name is not UTF-8"))?;
        let st = CursorState::decode(&name, &v)?;
        out.insert(name, st);
    }
    Ok(out)
}

fn put_cursor(b: &mut WriteBatch, store: &Store, name: &str, st: &CursorState) -> Result<()> {
    b.put_cf(store.cf(CF_META)?, cursor_key(name), st.encode()?);
    Ok(())
}

fn write_meta(store: &Store, b: WriteBatch, sync: bool) -> Result<()> {
    let mut wo = WriteOptions::default();
    wo.set_sync(sync);
    store.db().write_opt(b, &wo)?;
    Ok(())
}

fn expired_error(name: &str, st: &CursorState) -> Error {
    Error::CursorExpired {
        name: name.to_owned(),
        acked: st.acked,
        log_start: st.expired.map(|e| e.1).unwrap_or(0),
    }
}

/// Opens (or creates at `default_acked`) the named cursor; returns its
/// acknowledged position. Fails if it expired.
pub fn open_cursor(shared: &Shared, name: &str, default_acked: u64) -> Result<u64> {
    validate_cursor_name(name)?;
    let mut cursors = shared.cursors.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(st) = cursors.get(name) {
        if st.expired.is_some() {
            return Err(expired_error(name, st));
        }
        return Ok(st.acked);
    }
    let start = shared.log_start.load(Ordering::Acquire);
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
    let mut b = WriteBatch::default();
    put_cursor(&mut b, &shared.store, name, &st)?;
    write_meta(&shared.store, b, true)?;
    cursors.insert(name.to_owned(), st);
    Ok(default_acked)
}

/// Records that the consumer of `name` processed everything up to `seq`.
/// Acknowledgements only move forward. Written through the WAL without an
/// fsync: a crash can lose the latest acks (the consumer then sees those
/// records again), never records themselves; a retention pass syncs before
/// it removes anything a cursor protected.
pub fn ack(shared: &Shared, name: &str, seq: u64) -> Result<()> {
    let mut cursors = shared.cursors.lock().unwrap_or_else(|p| p.into_inner());
    let st = cursors
        .get_mut(name)
        .ok_or_else(|| Error::NotFound(format!("cursor {name}")))?;
    if st.expired.is_some() {
        return Err(expired_error(name, st));
    }
    let committed = shared.committed.get();
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
    let mut b = WriteBatch::default();
    put_cursor(&mut b, &shared.store, name, st)?;
    write_meta(&shared.store, b, false)
}

pub fn drop_cursor(shared: &Shared, name: &str) -> Result<()> {
    let mut cursors = shared.cursors.lock().unwrap_or_else(|p| p.into_inner());
    if cursors.remove(name).is_none() {
        return Err(Error::NotFound(format!("cursor {name}")));
    }
    let mut b = WriteBatch::default();
    b.delete_cf(shared.store.cf(CF_META)?, cursor_key(name));
    write_meta(&shared.store, b, true)
}

pub fn list_cursors(shared: &Shared) -> Vec<CursorInfo> {
    let last = shared.committed.get();
    let cursors = shared.cursors.lock().unwrap_or_else(|p| p.into_inner());
    cursors
        .iter()
        .map(|(n, st)| CursorInfo {
            name: n.clone(),
            state: st.clone(),
            lag: last.saturating_sub(st.acked),
        })
        .collect()
}

/// The time of record `seq`.
fn record_time(store: &Store, seq: u64) -> Result<u64> {
    store
        .read_record(seq)?
        .map(|r| r.time_ms)
        .ok_or_else(|| Error::corrupt("log", format!("record {seq} is missing")))
}

/// One retention pass.
pub fn run(shared: &Shared, policy: &RetentionPolicy) -> Result<RetentionReport> {
    let _pass = shared
        .retention_lock
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let store = &shared.store;
    let last = shared.committed.get();
    let start = shared.log_start.load(Ordering::Acquire);
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
    let total_bytes = shared.log_bytes.load(Ordering::Acquire);
    if let Some(max) = policy.max_bytes {
        if total_bytes > max {
            let mut excess = total_bytes - max;
            let mut seq = start;
            let it = store.db().iterator_cf(
                store.cf(CF_LOG)?,
                IteratorMode::From(&format::log_key(start), rocksdb::Direction::Forward),
            );
            for item in it {
                let (k, v) = item?;
                seq = format::decode_log_key(&k)? + 1;
                excess = excess.saturating_sub(v.len() as u64);
                if excess == 0 || seq > last {
                    break;
                }
            }
            target = target.max(seq);
        }
    }
    target = target.min(last + 1);

    // Cursors: expire the ones lagging too far, then let the rest hold.
    let mut b = WriteBatch::default();
    {
        let mut cursors = shared.cursors.lock().unwrap_or_else(|p| p.into_inner());
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
        // records. So nothing the index on disk lacks may go (flushing it,
        // once the cursors have had their say, if that lets the pass work).
        if target > start {
            let durable = store.durable_applied_seq(target - 1)?;
            target = target.min(durable + 1);
        }
        // An expired cursor records the log start its owner will face.
        for name in &report.expired_cursors {
            if let Some(st) = cursors.get_mut(name) {
                st.expired = Some((now_ms(), target));
                put_cursor(&mut b, store, name, st)?;
            }
        }
    }
    target = target.max(start);
    report.new_start = target;
    if let Some(m) = &shared.metrics {
        m.cursors_expired
            .inc_by(report.expired_cursors.len() as u64);
    }
    if target == start {
        if !report.expired_cursors.is_empty() {
            write_meta(store, b, true)?;
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
    let it = store.db().iterator_cf(
        store.cf(CF_LOG)?,
        IteratorMode::From(&format::log_key(start), rocksdb::Direction::Forward),
    );
    for item in it {
        let (k, v) = item?;
        if format::decode_log_key(&k)? >= target {
            break;
        }
        removed_bytes += v.len() as u64;
    }
    crate::failpoint::crash_point("retention::before_start");
    // 1. Persist the new start (synced, which also syncs earlier cursor acks).
    b.put_cf(
        store.cf(CF_META)?,
        meta::LOG_START_KEY,
        meta::encode_u64(target),
    );
    write_meta(store, b, true)?;
    crate::failpoint::crash_point("retention::after_start");
    // 2. From now on readers below `target` get Compacted.
    shared.log_start.store(target, Ordering::Release);
    shared.tail.truncate_below(target);
    // 3. Remove the records and let compaction reclaim the space.
    delete_log_below(store, target)?;
    shared.log_bytes.fetch_sub(
        removed_bytes.min(shared.log_bytes.load(Ordering::Acquire)),
        Ordering::AcqRel,
    );
    report.removed_records = target - start;
    if let Some(m) = &shared.metrics {
        m.retention_removed.inc_by(report.removed_records);
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

/// Range-deletes every log record below `start` and compacts the range.
pub fn delete_log_below(store: &Store, start: u64) -> Result<()> {
    let cf = store.cf(CF_LOG)?;
    let mut b = WriteBatch::default();
    b.delete_range_cf(cf, format::log_key(0), format::log_key(start));
    write_meta(store, b, false)?;
    crate::failpoint::crash_point("retention::after_delete");
    store
        .db()
        .compact_range_cf(cf, None::<&[u8]>, Some(&format::log_key(start)[..]));
    Ok(())
}
