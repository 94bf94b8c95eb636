//! Recovery: the index rebuilt from the log. [`replay`] brings an index up
//! to the log's end at open (from its `applied_seq`); [`rebuild`] drops the
//! index and replays the whole log (crash-safe, see `Store::reset_index`);
//! `admin verify` replays into a scratch store with [`apply_records`].
//!
//! It sits above the store (which only stores) and the engine (whose
//! `apply_events` is the one definition of what an event does to the
//! index): the writer applies new records with the same function.

use std::path::Path;

use std::cell::RefCell;
use std::collections::HashMap;

use crate::engine::{self, EngineState};
use crate::error::{Error, Result};
use crate::index::{Cf, IndexRead, IndexWrite, Kv};
use crate::replication::consensus;
use crate::store::{DbIndex, IndexBatch, IndexTuning, LogIter, Store, StoreOptions};

mod known;
use known::Known;

/// Replays the log from `applied_seq + 1` into the index. Returns the
/// number of records replayed. A consensus node's log is replayed up to the
/// committed index the protocol saved, no further (see
/// [`crate::replication::consensus`]).
pub fn replay(store: &Store, progress: impl FnMut(u64, u64)) -> Result<u64> {
    match consensus::replay_limit(store)? {
        None => replay_upto(store, store.last_log_seq()?, progress),
        Some(last) => {
            let before = store.applied_seq()?;
            let n = replay_upto(store, last, progress)?;
            if last > before {
                consensus::after_replay(store, before, last)?;
            }
            Ok(n)
        }
    }
}

/// [`replay`] up to record `last` of the log (which may grow meanwhile:
/// a replica's catch-up appends while it replays).
pub fn replay_upto(store: &Store, last: u64, mut progress: impl FnMut(u64, u64)) -> Result<u64> {
    let applied = store.applied_seq()?;
    let start = store.log_start()?;
    if applied > last {
        return Err(Error::corrupt(
            "database",
            format!("index is at sequence {applied} but the log ends at {last}"),
        ));
    }
    if applied + 1 < start {
        return Err(Error::corrupt(
            "database",
            format!("index is at sequence {applied} but the log starts at {start}"),
        ));
    }
    let mut n = 0;
    if applied < last {
        let mut events = crate::ops::replay_progress::ReplayProgress::start(applied, last);
        let end;
        (n, end) = apply_records(
            store,
            &mut store.log_iter_upto(applied + 1, last)?,
            applied,
            last,
            |seq, last| {
                events.at(seq);
                progress(seq, last)
            },
        )?;
        if end != last {
            return Err(Error::corrupt(
                "log",
                format!("replay stopped at {end}, but the log ends at {last}"),
            ));
        }
        events.end(n);
    }
    if store.rebuild_pending() {
        store.finish_rebuild()?;
    }
    Ok(n)
}

/// Applies `records` (which must continue from `applied`) to this
/// store's index, writing `applied_seq` along. Returns (records applied,
/// last sequence applied).
///
/// This thread reads, decodes and applies the records into an overlay;
/// every ~20,000 keys it hands the overlay's writes to a second thread,
/// which sorts them into one write batch and inserts it into the memtables
/// while this one goes on with a spare arena the second thread handed
/// back. The sort and the batch's copy were a quarter of this thread's
/// time, and this thread bounds the replay. Applying reads single
/// `inodes` keys (a parent whose times
/// move, a dictionary name, the entry an update rewrites): [`ReplayIndex`]
/// answers them from the keys the replay wrote or read, or else from the
/// index, which holds every batch older than those.
///
/// A long replay (at least `StoreOptions::long_replay_min` records)
/// tunes the index CFs for bulk loading while it runs ([`ReplayTuning`]):
/// - memtables without bloom filters: replay never reads the index, and
///   setting a filter bit is a cache miss per key, about a tenth of
///   replay's CPU. The option applies to new memtables, so a flush after
///   the first batch switches to one without a filter;
/// - a new memtable every `StoreOptions::replay_memtable_bytes` (16 MiB):
///   the flushes run beside the replay, and the last one, which the
///   caller waits for, is ~40 ms instead of ~140 ms for a full 64 MiB
///   memtable (atomic flush builds the CFs' files one after another);
/// - L0 compactions wait for 16 files instead of 4.
///
/// A long replay into an empty index (a rebuild, a node restored from a
/// log) of at least `StoreOptions::bulk_replay_min` records loads it in
/// bulk instead: no compaction while it runs, full memtables, and one
/// compaction of the whole index at its end. Leveled compaction while the
/// index grows from nothing rewrites every key once per level it passes
/// through, on the cores the replay needs; one final merge writes each
/// key once.
///
/// At the end (also on failure) the serving options come back, with a
/// flush to a filtered memtable; L0's files are compacted in the
/// background from then on, or, after a bulk load, before it returns.
pub fn apply_records(
    store: &Store,
    records: &mut LogIter<'_>,
    applied: u64,
    last_hint: u64,
    mut progress: impl FnMut(u64, u64),
) -> Result<(u64, u64)> {
    let mut state = EngineState::load(&store.index())?;
    let bytes_before = store.log_bytes()?;
    let base_bytes = records.bytes;
    let records_hint = last_hint.saturating_sub(applied);
    let long = records_hint >= store.long_replay_min();
    // A long replay's batches are larger: a directory whose children
    // arrive in a batch is rewritten once per batch (its times), and a
    // log spread over many directories touches most of them in every
    // batch.
    let scale = if long { LONG_REPLAY_BATCH_SCALE } else { 1 };
    let (batch_keys, batch_bytes) = (limits().batch_keys * scale, limits().batch_bytes * scale);
    // The arenas and the remembered keys sized up front for a batch and a
    // forget's worth (or for the records a short replay has): grown by
    // doubling, each step copied them into fresh memory the kernel zeroes
    // on first touch, about a fifth of the reading thread's time in a
    // 1M-record rebuild (docs/BENCHMARKS.md, Replay).
    let hint = usize::try_from(records_hint).unwrap_or(usize::MAX);
    let arena_keys = batch_keys.min(hint.saturating_mul(4)) + ARENA_SLACK_KEYS;
    let arena_bytes = batch_bytes.min(hint.saturating_mul(512)) + ARENA_SLACK_BYTES;
    let new_arena = || SortedWrites::with_capacity(arena_keys, arena_bytes);
    let mut ov = ReplayIndex {
        writes: new_arena(),
        known: RefCell::new(Known::with_capacity(
            limits().known_keys.min(hint.saturating_mul(4)),
            state.next_id,
        )),
        parent_times: HashMap::default(),
        base: store.index(),
    };
    let mut n = 0u64;
    let mut pending_seq = applied;
    let bulk = long && applied == 0 && records_hint >= store.bulk_replay_min();
    let tuning = match (long, bulk) {
        (_, true) => Some(ReplayTuning::new(store, IndexTuning::BulkLoad)?),
        (true, false) => Some(ReplayTuning::new(store, IndexTuning::Replay)?),
        (false, false) => None,
    };
    std::thread::scope(|s| -> Result<()> {
        // The unit tests' lazy writer writes a batch only once the reading
        // thread waits for it: the index then lags as far behind as this
        // loop allows, and a forget that came too early shows.
        let lazy = cfg!(test) && limits().lazy_writer;
        let (tx, rx) = if lazy {
            crossbeam_channel::unbounded::<(SortedWrites, u64, u64)>()
        } else {
            crossbeam_channel::bounded(2)
        };
        let (go_tx, go_rx) = crossbeam_channel::unbounded::<()>();
        // One message per batch written: the reading thread waits for
        // them all before it forgets what it wrote (see `ReplayIndex`).
        let (written_tx, written_rx) = crossbeam_channel::unbounded::<()>();
        // Arenas emptied by the writer, back to the reading thread with
        // their capacity: at most the two queued, the one being written
        // and the one being filled exist at once.
        let (spare_tx, spare_rx) = crossbeam_channel::unbounded::<SortedWrites>();
        let writer = s.spawn(move || -> Result<()> {
            // The first batch went into a memtable with filters.
            let mut first = long;
            let mut since_switch = 0usize;
            for (mut w, seq, bytes) in rx {
                if lazy {
                    // Released by a wait, or by the end (the sender gone).
                    let _ = go_rx.recv();
                }
                let b = w.take_batch(store)?;
                let _ = spare_tx.send(w);
                since_switch += b.size_in_bytes();
                store.write_index_batch(b, seq, Some(bytes))?;
                let _ = written_tx.send(());
                crate::sys::failpoint::crash_point("replay::batch");
                // A bulk load flushes full memtables, the fewer files in
                // L0 for its final compaction.
                if std::mem::take(&mut first)
                    || (long && !bulk && since_switch >= store.replay_memtable_bytes())
                {
                    since_switch = 0;
                    store.switch_memtables()?;
                }
            }
            Ok(())
        });
        let mut sent = 0usize;
        let mut send = |ov: &mut ReplayIndex<'_>, next_id: u64, seq: u64, bytes: u64| {
            ov.settle_parent_times()?;
            let spare = spare_rx.try_recv().unwrap_or_else(|_| new_arena());
            let w = std::mem::replace(&mut ov.writes, spare);
            if tx.send((w, seq, bytes)).is_err() {
                // The writer stopped on an error, which its join reports:
                // reading on would only be lost.
                return Err(writer_stopped());
            }
            sent += 1;
            let l = limits();
            let known = ov.known.get_mut();
            if known.len() >= l.known_keys || known.bytes() >= l.known_bytes {
                // Every batch in the index: what the replay forgets, the
                // index answers from now on.
                while sent > 0 {
                    if lazy {
                        let _ = go_tx.send(());
                    }
                    written_rx.recv().map_err(|_| writer_stopped())?;
                    sent -= 1;
                }
                ov.known.get_mut().clear(next_id);
            }
            Ok::<(), Error>(())
        };
        let mut result = Ok(());
        while let Some(item) = records.next_borrowed() {
            let rec = match item {
                Ok(r) => r,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            };
            if rec.seq != pending_seq + 1 {
                result = Err(Error::corrupt(
                    "log",
                    format!("expected sequence {}, found {}", pending_seq + 1, rec.seq),
                ));
                break;
            }
            if let Err(e) = engine::apply_events(rec.events, &mut ov, &mut state) {
                result = Err(e);
                break;
            }
            pending_seq = rec.seq;
            n += 1;
            if ov.writes.len() >= batch_keys || ov.writes.data.len() >= batch_bytes {
                let bytes = bytes_before + (records.bytes - base_bytes);
                if let Err(e) = send(&mut ov, state.next_id, pending_seq, bytes) {
                    result = Err(e);
                    break;
                }
                progress(pending_seq, last_hint);
            }
        }
        if result.is_ok() {
            let bytes = bytes_before + (records.bytes - base_bytes);
            result = send(&mut ov, state.next_id, pending_seq, bytes);
        }
        drop(tx);
        drop(go_tx);
        // The writer's error first: a replay that stopped because the
        // writer did says only that.
        writer
            .join()
            .unwrap_or_else(|_| Err(Error::corrupt("replay", "index writer panicked")))?;
        result?;
        progress(pending_seq, last_hint);
        Ok(())
    })?;
    if let Some(t) = tuning {
        t.finish()?;
    }
    Ok((n, pending_seq))
}

/// Drops and recreates the index column families and replays the whole
/// log into them. The log must start at sequence 1. Crash-safe: the
/// rebuild is marked in `meta` first, and an open that finds the mark
/// starts it over (see [`Store::open`]), and its replay here finishes it.
pub fn rebuild(path: &Path, so: &StoreOptions) -> Result<u64> {
    let mut store = Store::open(path, so)?;
    if !store.rebuild_pending() {
        store.reset_index()?;
    }
    replay(&store, |_, _| {})
}

/// The index CFs tuned for a long replay or a bulk load while it lives
/// (see [`apply_records`]). [`ReplayTuning::finish`] restores the serving
/// options and, after a bulk load, compacts the index; dropping it without
/// (a failed replay) only restores the options.
struct ReplayTuning<'a> {
    store: &'a Store,
    tuning: IndexTuning,
}

impl<'a> ReplayTuning<'a> {
    fn new(store: &'a Store, tuning: IndexTuning) -> Result<Self> {
        store.set_index_tuning(tuning)?;
        Ok(ReplayTuning { store, tuning })
    }

    /// Serving options back and a memtable with a filter; after a bulk
    /// load, every file it flushed (all in L0) compacted to the bottom
    /// level, so that the index serves lookups from one sorted run.
    fn finish(self) -> Result<()> {
        let (store, tuning) = (self.store, self.tuning);
        std::mem::forget(self);
        store.set_index_tuning(IndexTuning::Serving)?;
        if tuning == IndexTuning::BulkLoad {
            store.flush()?;
            store.compact_index()
        } else {
            store.switch_memtables()
        }
    }
}

impl Drop for ReplayTuning<'_> {
    fn drop(&mut self) {
        // Best effort: on failure the memtables go without filters until
        // the next flush and L0 compacts later than usual (after a bulk
        // load, L0 holds every file it flushed until the background
        // compactions fold them), which is slower for lookups but still
        // correct; the next open restores the serving options.
        if self.store.set_index_tuning(IndexTuning::Serving).is_ok() {
            let _ = self.store.switch_memtables();
        }
    }
}

/// Replay's view of the index while it applies: its writes go to a
/// [`SortedWrites`]; the `inodes` keys it writes or reads are remembered
/// (their newest values, [`Known`]), and a read of any other key goes to
/// the index. That is exact because the batches go to the index in order
/// and the replay forgets only once every batch it sent is there (at most
/// every [`REPLAY_KNOWN_KEYS`] keys, a pause of a batch or two). Applying
/// never reads an edge or a range.
///
/// Parents' times are deferred: a directory that gains a thousand children
/// in a batch is rewritten once, at the batch's end, with the newest time.
/// Until then a read of its entry sees that time, and a put of its entry
/// (an update after the touch) drops it.
struct ReplayIndex<'s> {
    writes: SortedWrites,
    known: RefCell<Known>,
    /// Directories whose times moved since their entry was last written,
    /// and the time they moved to.
    parent_times: HashMap<u64, u64, ahash::RandomState>,
    base: DbIndex<'s>,
}

/// How many `inodes` keys, and bytes of them and their values, a replay
/// remembers before it waits for its batches and forgets them (entries are
/// ~100 bytes; an inode's extended attributes up to 256 KiB).
const REPLAY_KNOWN_KEYS: usize = 1 << 18;
const REPLAY_KNOWN_BYTES: usize = 64 << 20;

/// When a replay cuts a batch and when it forgets what it wrote.
#[derive(Clone, Copy, Debug)]
struct Limits {
    batch_keys: usize,
    batch_bytes: usize,
    known_keys: usize,
    known_bytes: usize,
    /// The unit tests' writer that writes a batch only when the reading
    /// thread waits for it (never outside the tests).
    lazy_writer: bool,
}

const LIMITS: Limits = Limits {
    batch_keys: REPLAY_BATCH_KEYS,
    batch_bytes: REPLAY_BATCH_BYTES,
    known_keys: REPLAY_KNOWN_KEYS,
    known_bytes: REPLAY_KNOWN_BYTES,
    lazy_writer: false,
};

#[cfg(not(test))]
fn limits() -> Limits {
    LIMITS
}

#[cfg(test)]
thread_local! {
    /// The unit tests' smaller limits, to make a short replay cut batches
    /// and forget often.
    static TEST_LIMITS: std::cell::Cell<Limits> = const { std::cell::Cell::new(LIMITS) };
}

#[cfg(test)]
fn limits() -> Limits {
    TEST_LIMITS.with(|l| l.get())
}

impl ReplayIndex<'_> {
    fn remember(&self, key: &[u8], value: Option<&[u8]>) {
        self.known.borrow_mut().insert(key, value);
    }

    /// The newest value of `inodes` key `key`, without the deferred
    /// parents' times.
    fn newest(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if let Some(v) = self.known.borrow().get(key) {
            return Ok(v.map(<[u8]>::to_vec));
        }
        let v = self.base.get(Cf::Inodes, key)?;
        self.remember(key, v.as_deref());
        Ok(v)
    }

    /// Writes the deferred parents' times: each directory's entry once,
    /// with its newest time. Run before a batch is cut, so that the batch
    /// holds them.
    fn settle_parent_times(&mut self) -> Result<()> {
        let pending = std::mem::take(&mut self.parent_times);
        let mut buf = Vec::new();
        for (parent, t) in pending {
            let key = crate::format::inode_key(parent);
            let stored = self
                .newest(&key)?
                .ok_or_else(|| engine::missing_parent(parent))?;
            if engine::with_parent_times(&stored, t, &mut buf)? {
                self.put(Cf::Inodes, &key, &buf);
            }
        }
        Ok(())
    }
}

impl IndexWrite for ReplayIndex<'_> {
    fn put(&mut self, cf: Cf, key: &[u8], value: &[u8]) {
        self.writes.put(cf, key, value);
        if cf == Cf::Inodes {
            if let Some(id) = Known::short_key(key) {
                self.parent_times.remove(&id);
            }
            self.remember(key, Some(value));
        }
    }

    fn delete(&mut self, cf: Cf, key: &[u8]) {
        self.writes.delete(cf, key);
        if cf == Cf::Inodes {
            if let Some(id) = Known::short_key(key) {
                self.parent_times.remove(&id);
            }
            self.remember(key, None);
        }
    }

    fn defer_parent_times(&mut self, parent: u64, t: u64) -> bool {
        if parent > crate::format::MAX_INODE_ID {
            // Not an inode: `touch` says so.
            return false;
        }
        self.parent_times.insert(parent, t);
        true
    }
}

fn writer_stopped() -> Error {
    Error::corrupt("replay", "the index writer stopped")
}

fn replay_reads_no(what: &str) -> Error {
    Error::corrupt(
        "replay",
        format!("applying an event asked for {what}, which a replay does not read"),
    )
}

impl IndexRead for ReplayIndex<'_> {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if cf != Cf::Inodes {
            debug_assert!(false, "replay reads an edge");
            return Err(replay_reads_no("an edge"));
        }
        let v = self.newest(key)?;
        let deferred =
            Known::short_key(key).and_then(|id| Some((id, *self.parent_times.get(&id)?)));
        match (deferred, v) {
            (None, v) => Ok(v),
            (Some((id, _)), None) => Err(engine::missing_parent(id)),
            (Some((_, t)), Some(v)) => {
                let mut buf = Vec::new();
                Ok(Some(if engine::with_parent_times(&v, t, &mut buf)? {
                    buf
                } else {
                    v
                }))
            }
        }
    }

    fn scan(&self, _: Cf, _: &[u8], _: Option<&[u8]>, _: usize) -> Result<Vec<Kv>> {
        debug_assert!(false, "replay scans");
        Err(replay_reads_no("a range"))
    }
}

/// Replay's index writes, collected then sorted: the replay reads them
/// back through [`ReplayIndex`], not from here, and sorted keys make the
/// memtable inserts cheaper (a skiplist insert next
/// to the previous one); a key written twice is written once, the last value.
///
/// Keys and values are copied into one arena (`data`) rather than kept as
/// two vectors per write: no allocation per write, and the sort reads keys
/// that lie together.
#[derive(Default)]
struct SortedWrites {
    /// The writes, in event order.
    writes: Vec<ArenaWrite>,
    /// Every write's key, then its value (if any), one after another.
    data: Vec<u8>,
}

/// One write of a [`SortedWrites`]: its key is `data[at..key_end]`, and
/// its value, unless it is a delete, `data[key_end..end]`.
#[derive(Clone, Copy)]
struct ArenaWrite {
    cf: Cf,
    delete: bool,
    at: usize,
    key_end: usize,
    end: usize,
}

/// Index keys, and bytes of keys and values, a replay batch collects
/// before it goes to the memtables.
const REPLAY_BATCH_KEYS: usize = 20_000;
const REPLAY_BATCH_BYTES: usize = 8 << 20;
/// How many times those a long replay's batches hold.
const LONG_REPLAY_BATCH_SCALE: usize = 4;
/// Room in a batch's arena past its limits: the batch is cut after the
/// record that reaches them, and the deferred parents' times follow.
const ARENA_SLACK_KEYS: usize = 4096;
const ARENA_SLACK_BYTES: usize = 1 << 20;

/// Where a write goes in a replay batch's order: its column family and
/// key's first 16 bytes as integers (zero-padded big-endian, so that they
/// order as the bytes do), then the rest of the key and its length, then
/// its position.
#[derive(Clone, Copy)]
struct SortKey {
    cf: Cf,
    head: u128,
    pos: usize,
}

impl SortedWrites {
    fn with_capacity(keys: usize, bytes: usize) -> SortedWrites {
        SortedWrites {
            writes: Vec::with_capacity(keys),
            data: Vec::with_capacity(bytes),
        }
    }

    fn len(&self) -> usize {
        self.writes.len()
    }

    fn key(&self, w: &ArenaWrite) -> &[u8] {
        &self.data[w.at..w.key_end]
    }

    fn value(&self, w: &ArenaWrite) -> Option<&[u8]> {
        (!w.delete).then(|| &self.data[w.key_end..w.end])
    }

    fn push(&mut self, cf: Cf, key: &[u8], value: Option<&[u8]>) {
        let at = self.data.len();
        self.data.extend_from_slice(key);
        let key_end = self.data.len();
        self.data.extend_from_slice(value.unwrap_or_default());
        self.writes.push(ArenaWrite {
            cf,
            delete: value.is_none(),
            at,
            key_end,
            end: self.data.len(),
        });
    }

    /// The writes as one sorted write batch; leaves this empty (keeping
    /// its buffers for the next batch).
    fn take_batch(&mut self, store: &Store) -> Result<IndexBatch> {
        let w = &self.writes;
        // Sorts positions, not the writes, by integers first: a key's
        // 16-byte head is all of an inode key and most edge keys (8-byte
        // parent, then the name), so whole keys are compared only past it.
        // The sort was a third of this thread's time when it compared whole
        // keys. The position breaks ties, so of equal keys the last written
        // comes last.
        let mut order: Vec<SortKey> = w
            .iter()
            .enumerate()
            .map(|(i, a)| SortKey {
                cf: a.cf,
                head: key_head(self.key(a)),
                pos: i,
            })
            .collect();
        // Past equal heads: the rest of the keys, then their lengths (keys
        // within 16 bytes whose heads are equal differ in trailing zeros
        // only, and the shorter comes first).
        let key = |o: &SortKey| self.key(&w[o.pos]);
        let tail = |o: &SortKey| key(o).get(16..).unwrap_or_default();
        order.sort_unstable_by(|a, b| {
            (a.cf, a.head)
                .cmp(&(b.cf, b.head))
                .then_with(|| tail(a).cmp(tail(b)).then(key(a).len().cmp(&key(b).len())))
                .then(a.pos.cmp(&b.pos))
        });
        let same_key =
            |a: &SortKey, b: &SortKey| (a.cf, a.head) == (b.cf, b.head) && key(a) == key(b);
        let (inodes, edges) = (store.index_cf(Cf::Inodes)?, store.index_cf(Cf::Edges)?);
        // Sized up front: growing a 2 MB batch copies it again and again.
        // Each entry adds a tag, a column family id and two lengths.
        let mut b = IndexBatch::with_capacity(self.data.len() + 16 * w.len() + 256);
        for (j, o) in order.iter().enumerate() {
            if order.get(j + 1).is_some_and(|n| same_key(o, n)) {
                continue;
            }
            let a = &w[o.pos];
            let h = match a.cf {
                Cf::Inodes => inodes,
                Cf::Edges => edges,
            };
            b.put_in(h, self.key(a), self.value(a));
        }
        self.writes.clear();
        self.data.clear();
        Ok(b)
    }
}

/// A key's first 16 bytes as a big-endian integer, zero-padded: keys with
/// different heads order as their heads do.
fn key_head(k: &[u8]) -> u128 {
    let mut b = [0u8; 16];
    let n = k.len().min(16);
    b[..n].copy_from_slice(&k[..n]);
    u128::from_be_bytes(b)
}

impl IndexWrite for SortedWrites {
    fn put(&mut self, cf: Cf, key: &[u8], value: &[u8]) {
        self.push(cf, key, Some(value));
    }

    fn delete(&mut self, cf: Cf, key: &[u8]) {
        self.push(cf, key, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// Keys from a small alphabet with zeros, up to 24 bytes: equal heads,
    /// keys that are prefixes of others and keys that differ only in
    /// trailing zeros all come up.
    fn key() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(prop_oneof![Just(0u8), Just(1u8), Just(0xff)], 0..24)
    }

    /// A replay that forgets what it wrote every few keys (waiting for its
    /// batches first) builds the index the writer built: applying reads
    /// parents, quotas, dictionary names and entries it rewrites, written
    /// by earlier records of the same replay, batches still in flight or
    /// the index.
    #[test]
    fn a_replay_that_forgets_often_builds_the_same_index() {
        let dir = tempfile::tempdir().unwrap();
        let o = || crate::Options::default().durability(crate::Durability::None);
        let t = crate::Treelog::open(dir.path(), o()).unwrap();
        t.mkdir_p("/q/a").unwrap();
        t.set_quota("/q", None, Some(1 << 40)).unwrap();
        for i in 0..3000 {
            let p = format!("/q/a/d{}/f{i}", i % 30);
            let opts = crate::CreateOptions {
                parents: true,
                owner: format!("u{}", i % 7),
                ..Default::default()
            };
            t.create(&p, opts).unwrap();
            if i % 3 == 0 {
                t.complete(&p, i).unwrap();
            }
            if i % 11 == 0 {
                t.set_xattr(&p, "user.i", &i.to_le_bytes(), crate::XattrFlag::Either)
                    .unwrap();
            }
            if i % 13 == 0 {
                t.rename(&p, format!("/q/m{i}"), false).unwrap();
            }
            if i % 17 == 0 {
                t.symlink("x", format!("/q/a/l{i}"), Default::default())
                    .unwrap();
            }
            if i % 19 == 0 {
                // A directory updated after its children moved its times:
                // the update's times are the ones that stay.
                let a = crate::SetAttrs {
                    mode: Some(0o700 | (i as u32 % 0o100)),
                    mtime_ms: Some(i),
                    ..Default::default()
                };
                t.set_attrs(format!("/q/a/d{}", i % 30), a).unwrap();
            }
            if i >= 29 && i % 29 == 0 {
                // A directory with children moved: both parents' times.
                t.rename(format!("/q/a/d{}", (i + 1) % 30), format!("/q/r{i}"), false)
                    .unwrap();
            }
        }
        t.delete("/q/a/d5", true).unwrap();
        let live = crate::ops::admin::index_digest(t.store()).unwrap();
        t.close().unwrap();
        let small = |known_keys, known_bytes, lazy_writer| Limits {
            batch_keys: 30,
            batch_bytes: 2048,
            known_keys,
            known_bytes,
            lazy_writer,
        };
        // The lazy writer keeps the index as far behind as the replay
        // allows: a key forgotten before its batch is written is read back
        // stale, and the digests differ. The last: one batch, in which
        // each directory's times are deferred across all of its children.
        // Each way, also as a bulk load (no compaction until the end).
        let ways = [
            small(50, usize::MAX, true),
            small(50, usize::MAX, false),
            small(usize::MAX, 4096, true),
            LIMITS,
        ];
        for (limits, bulk) in ways.into_iter().flat_map(|l| [(l, false), (l, true)]) {
            TEST_LIMITS.with(|l| l.set(limits));
            let so = StoreOptions {
                long_replay_min: 0,
                bulk_replay_min: if bulk { 0 } else { u64::MAX },
                ..Default::default()
            };
            rebuild(dir.path(), &so).unwrap();
            TEST_LIMITS.with(|l| l.set(LIMITS));
            let store = Store::open(dir.path(), &so).unwrap();
            assert_eq!(
                crate::ops::admin::index_digest(&store).unwrap(),
                live,
                "{limits:?}, bulk {bulk}"
            );
            assert!(crate::ops::admin::check_structure(&store)
                .unwrap()
                .is_empty());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 64,
            // Beside this file, as tests/model.rs keeps its own.
            failure_persistence: Some(Box::new(
                prop::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
            )),
            ..ProptestConfig::default()
        })]
        /// A replay batch holds each key once, with its last write, in key
        /// order within each column family.
        #[test]
        fn replay_batches_are_sorted_and_keep_the_last_write(
            writes in prop::collection::vec(
                (any::<bool>(), key(), prop::option::of(prop::collection::vec(any::<u8>(), 0..4))),
                0..300,
            )
        ) {
            let dir = tempfile::tempdir().unwrap();
            let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
            let mut sw = SortedWrites::default();
            // Twice, the second time with every write in the other column
            // family: a write left over from the first batch would show up
            // in the second in its old one.
            for flip in [false, true] {
                let mut model = BTreeMap::new();
                for (edges, k, v) in &writes {
                    let edges = *edges != flip;
                    let cf = if edges { Cf::Edges } else { Cf::Inodes };
                    match v {
                        Some(v) => sw.put(cf, k, v),
                        None => sw.delete(cf, k),
                    }
                    model.insert((edges, k.clone()), v.clone());
                }
                let b = sw.take_batch(&store).unwrap();
                prop_assert_eq!(sw.len(), 0);
                prop_assert!(sw.data.is_empty());
                let entries = b.entries(&store);
                // Inodes first, then edges; strictly increasing keys in each.
                for pair in entries.windows(2) {
                    let (a, b) = (&pair[0], &pair[1]);
                    prop_assert!(
                        (a.0 as usize, &a.1) < (b.0 as usize, &b.1),
                        "{:?} before {:?}", a, b
                    );
                }
                let got: BTreeMap<_, _> = entries
                    .into_iter()
                    .map(|(cf, k, v)| ((cf == Cf::Edges, k), v))
                    .collect();
                prop_assert_eq!(got, model);
            }
        }
    }
}
