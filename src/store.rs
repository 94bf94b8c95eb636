//! The RocksDB instance: column families and their options, opening and
//! creating, the format-version check, index reads, and replay of the log
//! into the index.
//!
//! Writes to `log` go through the WAL (synced per group by the writer).
//! Writes to `inodes`, `edges` and `applied_seq` in `meta` skip the WAL: they
//! are a view of the log, kept consistent with `applied_seq` by atomic flush,
//! and replayed from `applied_seq + 1` on open.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamily, ColumnFamilyDescriptor, DBCompressionType,
    DBRecoveryMode, IteratorMode, Options, ReadOptions, SliceTransform, SnapshotWithThreadMode,
    WriteBatch, WriteOptions, DB,
};

use crate::cursor::CursorState;
use crate::error::{Error, Result};
use crate::event::{Record, RecordRef};
use crate::format::{self, meta, record};
use crate::index::{Cf, EntryFn, IndexRead, Kv, OverlayWrites, ValueFn};
use std::collections::BTreeMap;

pub const CF_LOG: &str = "log";
pub const CF_INODES: &str = "inodes";
pub const CF_EDGES: &str = "edges";
pub const CF_META: &str = "meta";
pub const ALL_CFS: [&str; 4] = [CF_LOG, CF_INODES, CF_EDGES, CF_META];

/// Tuning knobs of the RocksDB instance.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Shared block cache for `inodes` and `edges`.
    pub block_cache_bytes: usize,
    /// Memtable size of `inodes` and `edges`.
    pub index_write_buffer_bytes: usize,
    /// Memtable size of `log`.
    pub log_write_buffer_bytes: usize,
    /// Create the database if the directory is missing or empty.
    pub create_if_missing: bool,
    /// Replays of at least this many records are long: the index column
    /// families are tuned for bulk loading while they run (see
    /// [`Store::apply_records`]).
    pub long_replay_min: u64,
    /// A long replay starts a new index memtable after this many bytes of
    /// writes, so that flushes overlap the replay and the last one, which
    /// the replay waits for, stays short.
    pub replay_memtable_bytes: usize,
    /// What a write-ahead log that fails its checksums does at open.
    pub wal_recovery: WalRecovery,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            block_cache_bytes: 256 << 20,
            index_write_buffer_bytes: 64 << 20,
            log_write_buffer_bytes: 64 << 20,
            create_if_missing: true,
            long_replay_min: 100_000,
            replay_memtable_bytes: 16 << 20,
            wal_recovery: WalRecovery::Strict,
        }
    }
}

/// Memtable bloom filter sizes (fraction of the memtable) of the index CFs:
/// most lookups while validating a create are for names that do not exist
/// yet, which the filter answers without searching the skiplist.
const INODES_MEMTABLE_BLOOM: f64 = 0.05;
const EDGES_MEMTABLE_BLOOM: f64 = 0.1;

/// L0 files that start a compaction of the index CFs (RocksDB's default),
/// and the larger count a long replay lets L0 collect instead: nothing reads
/// the index during a replay, and every L0 compaction while flushes keep
/// coming rewrites keys that the next one rewrites again. Below RocksDB's
/// default slowdown trigger (20), so a replay never stalls on L0.
const L0_COMPACTION_TRIGGER: i32 = 4;
const REPLAY_L0_COMPACTION_TRIGGER: i32 = 16;

fn db_options() -> Options {
    let mut o = Options::default();
    // Seed 000 §2.5: bounded file handles.
    o.set_max_open_files(256);
    // The index CFs are written without the WAL; atomic flush persists them
    // together with `applied_seq` (in `meta`) so that a crash leaves an index
    // that is exactly the log's prefix up to `applied_seq`.
    o.set_atomic_flush(true);
    // A torn tail of the WAL after a crash only ever holds a group that was
    // never acknowledged (the writer acknowledges after the synced write),
    // and this mode drops an incomplete one quietly. A record that fails its
    // checksum fails the open instead of ending the log there, as
    // point-in-time recovery would with every intact record after it:
    // `open_existing` then tells a torn tail from a hole.
    o.set_wal_recovery_mode(DBRecoveryMode::TolerateCorruptedTailRecords);
    // Two cores here; flush and compaction share them.
    o.set_max_background_jobs(2);
    o.set_keep_log_file_num(4);
    o
}

/// Index CFs: no compression in the first two levels, which are rewritten
/// soon anyway (flushes and replay then cost less CPU), LZ4 below, where
/// nearly all the data lives.
fn index_compression(o: &mut Options) {
    use DBCompressionType::{Lz4, None as Uncompressed};
    o.set_compression_per_level(&[Uncompressed, Uncompressed, Lz4, Lz4, Lz4, Lz4, Lz4]);
    o.set_bottommost_compression_type(Lz4);
}

fn index_table(cache: &Cache) -> BlockBasedOptions {
    let mut t = BlockBasedOptions::default();
    t.set_block_cache(cache);
    // 10 bits/key: ~1% false positives, the seed's choice for point lookups.
    t.set_bloom_filter(10.0, false);
    // Point lookups on `edges` (path resolution) still use the whole-key
    // filter; the prefix extractor adds prefix filtering for listings.
    t.set_whole_key_filtering(true);
    t.set_cache_index_and_filter_blocks(true);
    t.set_pin_l0_filter_and_index_blocks_in_cache(true);
    // Partitioned index and filters: one filter block per SST grows with
    // the key count (~6 MB at 5M keys), larger than a block-cache shard, so
    // it could never be cached and every lookup re-read and re-checksummed
    // it (measured: creates fell from ~75k/s to ~4.5k/s past ~3M inodes).
    // Partitions are 4 KiB; the small top level stays pinned.
    t.set_index_type(rocksdb::BlockBasedIndexType::TwoLevelIndexSearch);
    t.set_partition_filters(true);
    t.set_metadata_block_size(4096);
    t.set_pin_top_level_index_and_filter(true);
    t.set_format_version(5);
    t
}

fn cf_options(name: &str, so: &StoreOptions, cache: &Cache) -> Options {
    let mut o = Options::default();
    match name {
        CF_INODES => {
            // Point lookups by 8-byte id.
            o.set_memtable_prefix_bloom_ratio(INODES_MEMTABLE_BLOOM);
            o.set_level_zero_file_num_compaction_trigger(L0_COMPACTION_TRIGGER);
            o.set_memtable_whole_key_filtering(true);
            o.set_block_based_table_factory(&index_table(cache));
            index_compression(&mut o);
            o.set_write_buffer_size(so.index_write_buffer_bytes);
            o.set_level_compaction_dynamic_level_bytes(true);
        }
        CF_EDGES => {
            // Point lookups (resolve) and prefix scans (list) within one
            // parent: the 8-byte parent id is the prefix.
            o.set_prefix_extractor(SliceTransform::create_fixed_prefix(8));
            o.set_memtable_prefix_bloom_ratio(EDGES_MEMTABLE_BLOOM);
            o.set_level_zero_file_num_compaction_trigger(L0_COMPACTION_TRIGGER);
            // Every create first looks up a name that does not exist yet,
            // in a directory that does: whole-key bits in the memtable
            // filter answer that without searching the skiplist.
            o.set_memtable_whole_key_filtering(true);
            o.set_block_based_table_factory(&index_table(cache));
            index_compression(&mut o);
            o.set_write_buffer_size(so.index_write_buffer_bytes);
            o.set_level_compaction_dynamic_level_bytes(true);
        }
        CF_LOG => {
            // Append-only by increasing sequence, read sequentially, truncated
            // from the front: no filter (no point lookups on the hot path),
            // LZ4 (records are postcard but paths repeat), big memtables.
            let mut t = BlockBasedOptions::default();
            t.set_block_size(64 << 10);
            o.set_block_based_table_factory(&t);
            o.set_compression_type(DBCompressionType::Lz4);
            o.set_write_buffer_size(so.log_write_buffer_bytes);
            o.set_level_compaction_dynamic_level_bytes(true);
        }
        _ => {
            // meta: a handful of small keys.
            o.set_compression_type(DBCompressionType::None);
        }
    }
    o
}

/// Options of the `inodes` and `edges` column families (for the seed-design
/// baseline of `treelog bench`, which uses the same schema and tuning).
pub fn index_cf_descriptors() -> Vec<(&'static str, Options)> {
    let so = StoreOptions::default();
    let cache = Cache::new_lru_cache(so.block_cache_bytes);
    vec![
        (CF_INODES, cf_options(CF_INODES, &so, &cache)),
        (CF_EDGES, cf_options(CF_EDGES, &so, &cache)),
    ]
}

/// One open RocksDB instance with treelog's column families.
pub struct Store {
    /// In an `Arc` so that a published [`IndexSnapshot`] can keep the
    /// database it points into alive and in place.
    db: Arc<DB>,
    path: PathBuf,
    /// The index CFs' block cache (kept for recreating them in a rebuild).
    cache: Cache,
    so: StoreOptions,
    long_replay_min: u64,
    replay_memtable_bytes: usize,
    /// An `admin rebuild` is under way (`meta.rebuild_in_progress`): the
    /// index was reset, and the next successful [`Store::replay`] flushes
    /// the rebuilt index and clears the marker.
    rebuild_pending: AtomicBool,
    /// An `applied_seq` known to be on disk: the index up to it survives a
    /// crash (see [`Store::durable_applied_seq`]).
    flushed_applied: AtomicU64,
}

/// How [`Store::open`] treats a write-ahead log that fails its checksums.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WalRecovery {
    /// An incomplete last write (a torn tail, which a crash may leave; it
    /// was never acknowledged) is dropped. Corruption followed by intact
    /// records refuses the open with `Corruption`, naming what would be
    /// lost: those records may have been acknowledged.
    #[default]
    Strict,
    /// Recover up to the first corrupt record and discard the rest
    /// (`treelog admin accept-wal-loss`, an operator's explicit choice).
    AcceptLoss,
}

fn incompatible(path: &Path, detail: impl Into<String>) -> Error {
    Error::Incompatible {
        path: path.display().to_string(),
        detail: detail.into(),
    }
}

fn dir_is_empty(path: &Path) -> Result<bool> {
    match std::fs::read_dir(path) {
        Ok(mut it) => Ok(it.next().is_none()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        Err(e) => Err(e.into()),
    }
}

/// The highest log sequence a read-only open with `mode` recovers (0 when
/// the log is empty): how far the WAL's intact records reach under that
/// recovery mode. Read-only: changes nothing on disk.
fn last_seq_read_only(path: &Path, cfs: &[&str], mode: DBRecoveryMode) -> Result<u64> {
    let mut o = db_options();
    o.set_wal_recovery_mode(mode);
    let desc = cfs
        .iter()
        .map(|n| ColumnFamilyDescriptor::new(*n, Options::default()));
    let db = DB::open_cf_descriptors_read_only(&o, path, desc, false)?;
    let cf = db
        .cf_handle(CF_LOG)
        .ok_or_else(|| incompatible(path, "column family log is missing"))?;
    let mut it = db.raw_iterator_cf(cf);
    it.seek_to_last();
    match it.key() {
        Some(k) => format::decode_log_key(k),
        None => {
            it.status()?;
            Ok(0)
        }
    }
}

/// Opens the existing database at `path` with the column families `cfs`
/// (see [`WalRecovery`] for what a corrupt WAL does).
fn open_existing(path: &Path, so: &StoreOptions, cfs: &[&str], cache: &Cache) -> Result<DB> {
    let desc = || {
        cfs.iter()
            .map(|n| ColumnFamilyDescriptor::new(*n, cf_options(n, so, cache)))
            .collect::<Vec<_>>()
    };
    let mut o = db_options();
    if so.wal_recovery == WalRecovery::AcceptLoss {
        o.set_wal_recovery_mode(DBRecoveryMode::PointInTime);
    }
    let err = match DB::open_cf_descriptors(&o, path, desc()) {
        Ok(db) => return Ok(db),
        Err(e) => e,
    };
    if so.wal_recovery == WalRecovery::AcceptLoss || err.kind() != rocksdb::ErrorKind::Corruption {
        return Err(Error::Rocks(err));
    }
    // A record failed its checksum. If no intact record follows it, it is
    // a torn tail: the last write of a crash, never acknowledged (a power
    // cut can leave half a page of it). Otherwise records after it would
    // be silently dropped; those are refused.
    let upto = last_seq_read_only(path, cfs, DBRecoveryMode::PointInTime);
    let all = last_seq_read_only(path, cfs, DBRecoveryMode::SkipAnyCorruptedRecord);
    match (upto, all) {
        (Ok(upto), Ok(all)) if all <= upto => {
            o.set_wal_recovery_mode(DBRecoveryMode::PointInTime);
            Ok(DB::open_cf_descriptors(&o, path, desc())?)
        }
        (Ok(upto), Ok(all)) => Err(Error::corrupt(
            "write-ahead log",
            format!(
                "{}: {err}; intact log records up to sequence {all} follow the corruption, \
                 but recovery would stop before them, at sequence {upto}. Nothing was changed. \
                 Restore a backup, or accept losing the records after {upto} with \
                 `treelog admin accept-wal-loss`",
                path.display()
            ),
        )),
        (Err(e), _) | (_, Err(e)) => Err(Error::corrupt(
            "write-ahead log",
            format!(
                "{}: {err}; recovering up to the corruption fails too: {e}",
                path.display()
            ),
        )),
    }
}

impl Store {
    /// Opens (or creates) the database at `path` and checks its format
    /// version. Does not replay the log: see [`Store::replay`]. An
    /// interrupted `admin rebuild` is taken up again: the index is reset
    /// here and rebuilt by the replay.
    pub fn open(path: &Path, so: &StoreOptions) -> Result<Store> {
        Self::open_inner(path, so, true)
    }

    /// Opens the existing database at `path` whatever its format version,
    /// as it is: no version check, no interrupted rebuild taken up, nothing
    /// written. For `admin migrate` (`crate::migrate`), which checks the
    /// version itself.
    pub fn open_unmigrated(path: &Path, so: &StoreOptions) -> Result<Store> {
        if !path.join("CURRENT").exists() || path.join(CREATING_MARKER).exists() {
            return Err(incompatible(path, "no database here"));
        }
        Self::open_inner(path, so, false)
    }

    fn open_inner(path: &Path, so: &StoreOptions, checked: bool) -> Result<Store> {
        let cache = Cache::new_lru_cache(so.block_cache_bytes);
        if path.join(CREATING_MARKER).exists() {
            // A creation that never finished: nothing in here was ever
            // acknowledged. Start it over.
            if !so.create_if_missing {
                return Err(incompatible(
                    path,
                    "the creation of a database here was interrupted (and creation was not requested)",
                ));
            }
            let marker = CreationMarker::resume(path)?;
            return Self::create(path, so, cache, marker);
        }
        if path.join("CURRENT").exists() {
            let existing = DB::list_cf(&Options::default(), path)
                .map_err(|e| incompatible(path, format!("cannot read column families: {e}")))?;
            let (present, missing): (Vec<&str>, Vec<&str>) = ALL_CFS
                .iter()
                .copied()
                .partition(|n| existing.iter().any(|e| e == n));
            let missing_error = || {
                incompatible(
                    path,
                    format!(
                        "not a treelog database: a RocksDB database without column families {missing:?} (it has {existing:?})"
                    ),
                )
            };
            // Only a rebuild, between dropping the index column families
            // and creating them again, leaves a database without them.
            if missing.iter().any(|n| *n == CF_LOG || *n == CF_META) {
                return Err(missing_error());
            }
            let db = open_existing(path, so, &present, &cache)?;
            let mut store = Store::with_db(db, path, so, cache);
            if !checked {
                return Ok(store);
            }
            store.check_version()?;
            if store.meta_u64(meta::REBUILD_KEY)?.is_some() {
                store.reset_index()?;
            } else if !missing.is_empty() {
                return Err(missing_error());
            }
            store
                .flushed_applied
                .store(store.applied_seq()?, Ordering::Release);
            if store.get_meta(meta::NAMESPACE_ID_KEY)?.is_none() {
                // Made by a build before namespace ids.
                store.put_meta_synced(meta::NAMESPACE_ID_KEY, new_namespace_id(path).as_bytes())?;
            }
            return Ok(store);
        }
        if !dir_is_empty(path)? {
            return Err(incompatible(
                path,
                "not a treelog database: the directory is not empty and holds no RocksDB database",
            ));
        }
        if !so.create_if_missing {
            return Err(incompatible(
                path,
                "no database here (and creation was not requested)",
            ));
        }
        std::fs::create_dir_all(path)?;
        let marker = CreationMarker::new(path)?;
        Self::create(path, so, cache, marker)
    }

    /// Creates the database in `path`, empty but for `marker`, and removes
    /// the marker once the empty namespace is durable.
    fn create(
        path: &Path,
        so: &StoreOptions,
        cache: Cache,
        marker: CreationMarker,
    ) -> Result<Store> {
        crate::failpoint::crash_point("create::after_mark");
        let mut o = db_options();
        o.create_if_missing(true);
        o.create_missing_column_families(true);
        let descriptors = ALL_CFS
            .iter()
            .map(|n| ColumnFamilyDescriptor::new(*n, cf_options(n, so, &cache)))
            .collect::<Vec<_>>();
        let db = DB::open_cf_descriptors(&o, path, descriptors)?;
        crate::failpoint::crash_point("create::after_open");
        let store = Store::with_db(db, path, so, cache);
        store.initialize()?;
        crate::failpoint::crash_point("create::before_unmark");
        marker.finish()?;
        Ok(store)
    }

    fn with_db(db: DB, path: &Path, so: &StoreOptions, cache: Cache) -> Store {
        Store {
            db: Arc::new(db),
            path: path.to_owned(),
            cache,
            so: so.clone(),
            long_replay_min: so.long_replay_min,
            replay_memtable_bytes: so.replay_memtable_bytes,
            rebuild_pending: AtomicBool::new(false),
            flushed_applied: AtomicU64::new(0),
        }
    }

    /// Starts (or restarts) a rebuild: marks it durably, then drops and
    /// recreates the index column families with the empty namespace at
    /// `applied_seq` 0, flushed. A crash at any point leaves either the
    /// old index without the mark, or the mark, which the next open takes
    /// up (here again). The log must start at 1.
    pub(crate) fn reset_index(&mut self) -> Result<()> {
        let start = self.log_start()?;
        if start != 1 {
            return Err(Error::Compacted {
                requested: 1,
                first_available: start,
            });
        }
        if self.meta_u64(meta::REBUILD_KEY)?.is_none() {
            let mut wo = WriteOptions::default();
            wo.set_sync(true);
            self.db.put_cf_opt(
                self.cf(CF_META)?,
                meta::REBUILD_KEY,
                meta::encode_u64(crate::clock::now_ms()),
                &wo,
            )?;
        }
        crate::failpoint::crash_point("rebuild::after_mark");
        let (so, cache) = (self.so.clone(), self.cache.clone());
        // Nothing else holds this store's database: it is being opened.
        let db = Arc::get_mut(&mut self.db)
            .ok_or_else(|| Error::corrupt("rebuild", "the database is shared"))?;
        for name in [CF_INODES, CF_EDGES] {
            if db.cf_handle(name).is_some() {
                db.drop_cf(name)?;
                crate::failpoint::crash_point("rebuild::after_drop");
            }
        }
        for name in [CF_INODES, CF_EDGES] {
            db.create_cf(name, &cf_options(name, &so, &cache))?;
            crate::failpoint::crash_point("rebuild::after_create");
        }
        let mut b = WriteBatch::default();
        let inodes = self.cf(CF_INODES)?;
        for (k, v) in format::empty_namespace_inodes() {
            b.put_cf(inodes, k, v);
        }
        self.write_index_batch_raw(b, 0, Some(0))?;
        self.flush()?;
        crate::failpoint::crash_point("rebuild::after_reset");
        self.rebuild_pending.store(true, Ordering::Release);
        Ok(())
    }

    /// Ends a rebuild whose replay is complete: the rebuilt index on disk
    /// first, then the mark goes (synced).
    pub(crate) fn finish_rebuild(&self) -> Result<()> {
        self.flush()?;
        crate::failpoint::crash_point("rebuild::before_unmark");
        let mut wo = WriteOptions::default();
        wo.set_sync(true);
        self.db
            .delete_cf_opt(self.cf(CF_META)?, meta::REBUILD_KEY, &wo)?;
        self.rebuild_pending.store(false, Ordering::Release);
        Ok(())
    }

    /// Replays of at least this many records tune the index CFs for bulk
    /// loading ([`StoreOptions::long_replay_min`]).
    pub(crate) fn long_replay_min(&self) -> u64 {
        self.long_replay_min
    }

    /// A long replay switches memtables after this many bytes
    /// ([`StoreOptions::replay_memtable_bytes`]).
    pub(crate) fn replay_memtable_bytes(&self) -> usize {
        self.replay_memtable_bytes
    }

    /// Whether a rebuild is under way (the index is being replayed from 0).
    pub fn rebuild_pending(&self) -> bool {
        self.rebuild_pending.load(Ordering::Acquire)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn db(&self) -> &DB {
        &self.db
    }

    pub fn cf(&self, name: &'static str) -> Result<&ColumnFamily> {
        self.db
            .cf_handle(name)
            .ok_or_else(|| incompatible(&self.path, format!("column family {name} is missing")))
    }

    pub(crate) fn index_cf(&self, cf: Cf) -> Result<&ColumnFamily> {
        self.cf(match cf {
            Cf::Inodes => CF_INODES,
            Cf::Edges => CF_EDGES,
        })
    }

    /// Writes the empty namespace and the format metadata, durably.
    fn initialize(&self) -> Result<()> {
        let mut b = WriteBatch::default();
        let inodes = self.cf(CF_INODES)?;
        for (k, v) in format::empty_namespace_inodes() {
            b.put_cf(inodes, k, v);
        }
        let m = self.cf(CF_META)?;
        b.put_cf(
            m,
            meta::FORMAT_VERSION_KEY,
            meta::encode_u64(format::FORMAT_VERSION),
        );
        b.put_cf(
            m,
            meta::CREATED_BY_KEY,
            format!("treelog {}", env!("CARGO_PKG_VERSION")).as_bytes(),
        );
        b.put_cf(m, meta::APPLIED_SEQ_KEY, meta::encode_u64(0));
        b.put_cf(
            m,
            meta::NAMESPACE_ID_KEY,
            new_namespace_id(&self.path).as_bytes(),
        );
        b.put_cf(m, meta::LOG_START_KEY, meta::encode_u64(1));
        b.put_cf(m, meta::LOG_BYTES_KEY, meta::encode_u64(0));
        // The initial state goes through the WAL, synced, and is flushed so
        // that it never depends on replay.
        let mut wo = WriteOptions::default();
        wo.set_sync(true);
        self.db.write_opt(b, &wo)?;
        self.flush()?;
        Ok(())
    }

    fn check_version(&self) -> Result<()> {
        let v = self.meta_u64(meta::FORMAT_VERSION_KEY)?.ok_or_else(|| {
            incompatible(
                &self.path,
                "not a treelog database: meta has no format_version",
            )
        })?;
        if format::MIGRATABLE_FORMAT_VERSIONS.contains(&v) {
            return Err(incompatible(
                &self.path,
                format!(
                    "format version {v} must be migrated to version {} before this build \
                     opens it: stop every process using the database, then run \
                     `treelog --data {} admin migrate` (docs/OPERATIONS.md, Migrating)",
                    format::FORMAT_VERSION,
                    self.path.display()
                ),
            ));
        }
        if !format::SUPPORTED_FORMAT_VERSIONS.contains(&v) {
            return Err(incompatible(
                &self.path,
                format!(
                    "format version {v} is not supported by this build (supported: {:?}); {}",
                    format::SUPPORTED_FORMAT_VERSIONS,
                    if v > format::FORMAT_VERSION {
                        "it was written by a newer treelog"
                    } else {
                        "migrate it with an older treelog first"
                    }
                ),
            ));
        }
        if let Some(m) = self.get_meta(meta::MIGRATION_KEY)? {
            let m = meta::Migration::decode(&m)?;
            return Err(incompatible(
                &self.path,
                format!(
                    "its migration from format version {} to {} was interrupted: run \
                     `treelog --data {} admin migrate` to finish it",
                    m.from,
                    m.to,
                    self.path.display()
                ),
            ));
        }
        Ok(())
    }

    /// The namespace's identity (`meta.namespace_id`), shared with its
    /// backups and replicas.
    pub fn namespace_id(&self) -> Result<String> {
        let v = self
            .get_meta(meta::NAMESPACE_ID_KEY)?
            .ok_or_else(|| Error::corrupt("meta", "the database has no namespace_id"))?;
        String::from_utf8(v).map_err(|_| Error::corrupt("meta", "namespace_id is not UTF-8"))
    }

    pub fn format_version(&self) -> Result<u64> {
        Ok(self.meta_u64(meta::FORMAT_VERSION_KEY)?.unwrap_or(0))
    }

    pub fn meta_u64(&self, key: &[u8]) -> Result<Option<u64>> {
        self.meta_u64_at(key, &ReadOptions::default())
    }

    /// A `meta` value as `ro` reads it (at its snapshot, if it has one).
    fn meta_u64_at(&self, key: &[u8], ro: &ReadOptions) -> Result<Option<u64>> {
        match self.db.get_pinned_cf_opt(self.cf(CF_META)?, key, ro)? {
            Some(v) => Ok(Some(meta::decode_u64("meta value", &v)?)),
            None => Ok(None),
        }
    }

    /// A raw `meta` value.
    pub fn get_meta(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.db.get_cf(self.cf(CF_META)?, key)?)
    }

    /// Writes a `meta` value through the WAL, synced.
    pub fn put_meta_synced(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut wo = WriteOptions::default();
        wo.set_sync(true);
        self.db.put_cf_opt(self.cf(CF_META)?, key, value, &wo)?;
        Ok(())
    }

    /// Overwrites the format version (for migrations and tests).
    pub fn set_format_version(&self, v: u64) -> Result<()> {
        let mut wo = WriteOptions::default();
        wo.set_sync(true);
        self.db.put_cf_opt(
            self.cf(CF_META)?,
            meta::FORMAT_VERSION_KEY,
            meta::encode_u64(v),
            &wo,
        )?;
        Ok(())
    }

    pub fn applied_seq(&self) -> Result<u64> {
        Ok(self.meta_u64(meta::APPLIED_SEQ_KEY)?.unwrap_or(0))
    }

    /// Total bytes of the log's record values, as of `applied_seq`.
    pub fn log_bytes(&self) -> Result<u64> {
        Ok(self.meta_u64(meta::LOG_BYTES_KEY)?.unwrap_or(0))
    }

    pub fn log_start(&self) -> Result<u64> {
        Ok(self.meta_u64(meta::LOG_START_KEY)?.unwrap_or(1))
    }

    /// The highest sequence in the log, or `log_start - 1` when it is empty.
    pub fn last_log_seq(&self) -> Result<u64> {
        let mut it = self.db.raw_iterator_cf(self.cf(CF_LOG)?);
        it.seek_to_last();
        match it.key() {
            Some(k) => format::decode_log_key(k),
            None => {
                it.status()?;
                Ok(self.log_start()?.saturating_sub(1))
            }
        }
    }

    /// Reads one record.
    pub fn read_record(&self, seq: u64) -> Result<Option<Record>> {
        match self.db.get_cf(self.cf(CF_LOG)?, format::log_key(seq))? {
            Some(v) => Ok(Some(record::decode_record(&v, Some(seq))?)),
            None => Ok(None),
        }
    }

    /// One record as stored (its envelope), not decoded.
    pub fn read_record_bytes(&self, seq: u64) -> Result<Option<Vec<u8>>> {
        Ok(self.db.get_cf(self.cf(CF_LOG)?, format::log_key(seq))?)
    }

    /// Records `from..=upto` as stored, in order, until `max_bytes` of
    /// them (at least one): for a replica. `Compacted` when the log no
    /// longer holds `from`; `Corruption` for a gap.
    pub fn committed_log_bytes(
        &self,
        from: u64,
        upto: u64,
        max_bytes: usize,
    ) -> Result<Vec<Vec<u8>>> {
        let mut ro = ReadOptions::default();
        ro.set_iterate_upper_bound(format::log_key(upto + 1).to_vec());
        let mut it = self.db.raw_iterator_cf_opt(self.cf(CF_LOG)?, ro);
        it.seek(format::log_key(from));
        let (mut out, mut bytes, mut want) = (Vec::new(), 0usize, from);
        while let (Some(k), Some(v)) = (it.key(), it.value()) {
            let seq = format::decode_log_key(k)?;
            if seq != want {
                return Err(if want == from {
                    Error::Compacted {
                        requested: from,
                        first_available: self.log_start()?,
                    }
                } else {
                    Error::corrupt("log", format!("expected sequence {want}, found {seq}"))
                });
            }
            if !out.is_empty() && bytes + v.len() > max_bytes {
                break;
            }
            bytes += v.len();
            out.push(v.to_vec());
            want += 1;
            it.next();
        }
        it.status()?;
        if out.is_empty() && from <= upto {
            return Err(Error::Compacted {
                requested: from,
                first_available: self.log_start()?,
            });
        }
        Ok(out)
    }

    /// Iterates records from `from` (inclusive) in order, checking that the
    /// sequence has no gaps.
    pub fn log_iter(&self, from: u64) -> Result<LogIter<'_>> {
        self.log_iter_upto(from, u64::MAX)
    }

    /// [`Store::log_iter`] that ends after record `last` (records appended
    /// meanwhile beyond it are not seen).
    pub fn log_iter_upto(&self, from: u64, last: u64) -> Result<LogIter<'_>> {
        let mut ro = ReadOptions::default();
        if last < u64::MAX {
            ro.set_iterate_upper_bound(format::log_key(last + 1).to_vec());
        }
        // A long sequential read: read ahead, and do not evict the index's
        // blocks from the cache with log blocks read once.
        ro.set_readahead_size(2 << 20);
        ro.fill_cache(false);
        let mut it = self.db.raw_iterator_cf_opt(self.cf(CF_LOG)?, ro);
        it.seek(format::log_key(from));
        Ok(LogIter {
            inner: it,
            started: false,
            done: false,
            expect: from,
            bytes: 0,
        })
    }

    /// The log's entries from `from` as stored (sequence, encoded record),
    /// without decoding them or checking for gaps: what `admin dump` shows,
    /// including records that fail to decode.
    pub fn log_entries(
        &self,
        from: u64,
    ) -> Result<impl Iterator<Item = Result<(u64, Box<[u8]>)>> + '_> {
        let it = self.db.iterator_cf(
            self.cf(CF_LOG)?,
            IteratorMode::From(&format::log_key(from), rocksdb::Direction::Forward),
        );
        Ok(it.map(|item| {
            let (k, v) = item?;
            Ok((format::decode_log_key(&k)?, v))
        }))
    }

    /// The sequence and value size of each log record from `from`, in
    /// order, without copying the values.
    pub fn log_sizes(&self, from: u64) -> Result<LogSizes<'_>> {
        let mut ro = ReadOptions::default();
        ro.fill_cache(false);
        let mut it = self.db.raw_iterator_cf_opt(self.cf(CF_LOG)?, ro);
        it.seek(format::log_key(from));
        Ok(LogSizes {
            inner: it,
            started: false,
        })
    }

    /// Every entry of column family `name` in key order (the whole-CF
    /// scans of `admin verify`, `dump` and the digest).
    pub fn scan_cf(
        &self,
        name: &'static str,
    ) -> Result<impl Iterator<Item = Result<KeyValue>> + '_> {
        Ok(self
            .db
            .iterator_cf(self.cf(name)?, IteratorMode::Start)
            .map(|item| item.map_err(Error::from)))
    }

    /// Every entry of column family `name` from key `from` on, in key order.
    pub fn scan_cf_from<'a>(
        &'a self,
        name: &'static str,
        from: &[u8],
    ) -> Result<impl Iterator<Item = Result<KeyValue>> + 'a> {
        Ok(self
            .db
            .iterator_cf(
                self.cf(name)?,
                IteratorMode::From(from, rocksdb::Direction::Forward),
            )
            .map(|item| item.map_err(Error::from)))
    }

    /// An empty batch of writes to any column family, through the WAL (see
    /// [`Store::write_raw`]).
    pub(crate) fn raw_batch(&self) -> RawBatch<'_> {
        RawBatch {
            batch: WriteBatch::default(),
            store: self,
        }
    }

    /// Writes `b` through the WAL, all or nothing (fsynced when `sync`):
    /// the migration's writes, each batch complete in itself.
    pub(crate) fn write_raw(&self, b: RawBatch<'_>, sync: bool) -> Result<()> {
        let mut wo = WriteOptions::default();
        wo.set_sync(sync);
        self.db.write_opt(b.batch, &wo)?;
        Ok(())
    }

    /// A RocksDB checkpoint of the whole database in `dir` (which must not
    /// exist): every column family flushed (atomically) and its files hard
    /// linked, the WAL copied. A consistent, openable database as of now.
    pub(crate) fn checkpoint_to(&self, dir: &Path) -> Result<()> {
        rocksdb::checkpoint::Checkpoint::new(&self.db)?.create_checkpoint(dir)?;
        Ok(())
    }

    /// Compacts column family `name` fully (blocking): for benchmarks and
    /// operators that want the on-disk size of a settled index.
    pub fn compact_cf(&self, name: &'static str) -> Result<()> {
        self.db
            .compact_range_cf(self.cf(name)?, None::<&[u8]>, None::<&[u8]>);
        Ok(())
    }

    /// RocksDB's integer property `prop` of column family `name` (for the
    /// metrics), if it has one.
    pub fn cf_property(&self, name: &'static str, prop: &str) -> Option<u64> {
        self.db
            .property_int_value_cf(self.cf(name).ok()?, prop)
            .ok()
            .flatten()
    }

    /// Every durable cursor (`meta` `cursor/<name>`).
    pub(crate) fn load_cursors(&self) -> Result<BTreeMap<String, CursorState>> {
        let mut out = BTreeMap::new();
        let it = self.db.iterator_cf(
            self.cf(CF_META)?,
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

    /// Persists cursor `name` (synced when `sync`; an unsynced one reaches
    /// the disk with the next synced write).
    pub(crate) fn put_cursor(&self, name: &str, st: &CursorState, sync: bool) -> Result<()> {
        let mut b = WriteBatch::default();
        b.put_cf(self.cf(CF_META)?, meta::cursor_key(name), st.encode()?);
        self.write_meta(b, sync)
    }

    /// Removes cursor `name` (synced).
    pub(crate) fn delete_cursor(&self, name: &str) -> Result<()> {
        let mut b = WriteBatch::default();
        b.delete_cf(self.cf(CF_META)?, meta::cursor_key(name));
        self.write_meta(b, true)
    }

    /// Retention's first step, one synced batch: the new log start (when
    /// `start` is set: records below it are gone for every reader from now
    /// on, whether or not they are deleted yet) and the cursors it expired.
    pub(crate) fn retire_log_below(
        &self,
        start: Option<u64>,
        cursors: &[(String, CursorState)],
    ) -> Result<()> {
        let mut b = WriteBatch::default();
        let meta_cf = self.cf(CF_META)?;
        for (name, st) in cursors {
            b.put_cf(meta_cf, meta::cursor_key(name), st.encode()?);
        }
        if let Some(start) = start {
            b.put_cf(meta_cf, meta::LOG_START_KEY, meta::encode_u64(start));
        }
        self.write_meta(b, true)
    }

    /// Range-deletes every log record below `start` and compacts the range
    /// (retention's last step, after [`Store::retire_log_below`]).
    pub(crate) fn delete_log_below(&self, start: u64) -> Result<()> {
        let cf = self.cf(CF_LOG)?;
        let mut b = WriteBatch::default();
        b.delete_range_cf(cf, format::log_key(0), format::log_key(start));
        self.write_meta(b, false)?;
        crate::failpoint::crash_point("retention::after_delete");
        self.db
            .compact_range_cf(cf, None::<&[u8]>, Some(&format::log_key(start)[..]));
        Ok(())
    }

    fn write_meta(&self, b: WriteBatch, sync: bool) -> Result<()> {
        let mut wo = WriteOptions::default();
        wo.set_sync(sync);
        self.db.write_opt(b, &wo)?;
        Ok(())
    }

    /// An empty batch of log records (see [`Store::write_log`]).
    pub(crate) fn log_batch(&self) -> Result<LogBatch<'_>> {
        Ok(LogBatch {
            batch: WriteBatch::default(),
            cf: self.cf(CF_LOG)?,
        })
    }

    /// Appends `batch` (log records) and writes it durably when `sync`.
    pub(crate) fn write_log(&self, batch: LogBatch<'_>, sync: bool) -> Result<()> {
        let mut wo = WriteOptions::default();
        wo.set_sync(sync);
        self.db.write_opt(batch.batch, &wo)?;
        Ok(())
    }

    /// An empty batch of index writes (see [`Store::write_index_batch`]).
    pub(crate) fn index_batch(&self) -> IndexBatch {
        IndexBatch(WriteBatch::default())
    }

    /// Makes every log write that has returned durable (fsyncs the WAL).
    /// Writes may go on meanwhile, from other threads; RocksDB syncs only
    /// what was written before the call, without blocking them.
    pub(crate) fn sync_log(&self) -> Result<()> {
        self.db.flush_wal(true)?;
        Ok(())
    }

    /// Adds a `meta` write to an index batch (written with it, without
    /// the WAL: a Raft node's applied log id and membership).
    pub(crate) fn add_meta_write(
        &self,
        b: &mut IndexBatch,
        key: &[u8],
        value: &[u8],
    ) -> Result<()> {
        b.0.put_cf(self.cf(CF_META)?, key, value);
        Ok(())
    }

    pub(crate) fn add_index_writes(&self, b: &mut IndexBatch, w: &OverlayWrites) -> Result<()> {
        self.add_index_writes_raw(&mut b.0, w)
    }

    fn add_index_writes_raw(&self, b: &mut WriteBatch, w: &OverlayWrites) -> Result<()> {
        for (cf, m) in [(Cf::Inodes, &w.inodes), (Cf::Edges, &w.edges)] {
            let h = self.index_cf(cf)?;
            for (k, v) in m {
                match v {
                    Some(v) => b.put_cf(h, k, v),
                    None => b.delete_cf(h, k),
                }
            }
        }
        Ok(())
    }

    /// Writes a batch of index changes together with the new `applied_seq`,
    /// without the WAL.
    pub(crate) fn write_index_batch(
        &self,
        b: IndexBatch,
        applied_seq: u64,
        log_bytes: Option<u64>,
    ) -> Result<()> {
        self.write_index_batch_raw(b.0, applied_seq, log_bytes)
    }

    fn write_index_batch_raw(
        &self,
        mut b: WriteBatch,
        applied_seq: u64,
        log_bytes: Option<u64>,
    ) -> Result<()> {
        let m = self.cf(CF_META)?;
        b.put_cf(m, meta::APPLIED_SEQ_KEY, meta::encode_u64(applied_seq));
        if let Some(n) = log_bytes {
            b.put_cf(m, meta::LOG_BYTES_KEY, meta::encode_u64(n));
        }
        let mut wo = WriteOptions::default();
        wo.disable_wal(true);
        self.db.write_opt(b, &wo)?;
        Ok(())
    }

    /// Starts a flush of every column family (atomically, so `applied_seq`
    /// stays with the index) without waiting for it: the current memtables
    /// become immutable and new ones, with the current options, take writes.
    pub(crate) fn switch_memtables(&self) -> Result<()> {
        self.flush_all(false)
    }

    /// Tunes the index CFs for a long replay, or back for serving: memtable
    /// bloom filters (for memtables created from now on) and the L0
    /// compaction trigger.
    pub(crate) fn set_replay_tuning(&self, replaying: bool) -> Result<()> {
        for (name, ratio) in [
            (CF_INODES, INODES_MEMTABLE_BLOOM),
            (CF_EDGES, EDGES_MEMTABLE_BLOOM),
        ] {
            let (ratio, trigger) = if replaying {
                (0.0, REPLAY_L0_COMPACTION_TRIGGER)
            } else {
                (ratio, L0_COMPACTION_TRIGGER)
            };
            let (ratio, trigger) = (ratio.to_string(), trigger.to_string());
            self.db.set_options_cf(
                self.cf(name)?,
                &[
                    ("memtable_prefix_bloom_size_ratio", ratio.as_str()),
                    ("level0_file_num_compaction_trigger", trigger.as_str()),
                ],
            )?;
        }
        Ok(())
    }

    /// Flushes every column family (atomically) and waits for it.
    pub fn flush(&self) -> Result<()> {
        // Everything written before the flush is on disk after it, this
        // `applied_seq` (or a later one) with it.
        let applied = self.applied_seq()?;
        self.flush_all(true)?;
        self.flushed_applied.fetch_max(applied, Ordering::AcqRel);
        Ok(())
    }

    /// An `applied_seq` of at least `want` that is on disk, flushing the
    /// index first if the last known one is older; less than `want` only
    /// when the index has not reached it. Log retention may remove records
    /// up to this and no further: the index written without the WAL loses
    /// its unflushed part in a crash, and replays it from the log.
    pub fn durable_applied_seq(&self, want: u64) -> Result<u64> {
        let known = self.flushed_applied.load(Ordering::Acquire);
        if known >= want {
            return Ok(known);
        }
        self.flush()?;
        Ok(self.flushed_applied.load(Ordering::Acquire))
    }

    fn flush_all(&self, wait: bool) -> Result<()> {
        let cfs: Vec<&ColumnFamily> = ALL_CFS.iter().map(|n| self.cf(n)).collect::<Result<_>>()?;
        let mut fo = rocksdb::FlushOptions::default();
        fo.set_wait(wait);
        self.db.flush_cfs_opt(&cfs, &fo)?;
        Ok(())
    }

    /// Up to `limit` index entries with key prefix `prefix` after `after`.
    fn index_scan(
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
    fn index_scan_each(
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
    fn index_get_each(
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

// -- A node of a Raft cluster ------------------------------------------------
//
// The log of a cluster's node is written by Raft (the `treelog-raft` crate):
// its entries arrive at their indexes, may be truncated before they are
// committed, and are purged once a snapshot covers them. These are the
// store's operations for it; the entries' bytes are `record`'s version-2
// envelopes.
impl Store {
    /// Appends log values at their sequences, through the WAL, not synced
    /// (see [`Store::sync_log`]). Returns their bytes.
    pub fn raft_append(&self, entries: &[(u64, Vec<u8>)]) -> Result<u64> {
        let cf = self.cf(CF_LOG)?;
        let mut b = WriteBatch::default();
        let mut bytes = 0u64;
        for (seq, v) in entries {
            b.put_cf(cf, format::log_key(*seq), v);
            bytes += v.len() as u64;
        }
        self.write_meta(b, false)?;
        Ok(bytes)
    }

    /// Makes every log write that has returned durable (see
    /// [`Store::sync_log`]), for Raft's log syncer.
    pub fn raft_sync(&self) -> Result<()> {
        self.sync_log()
    }

    /// Removes every log entry from `first` on, synced: a truncated entry
    /// must not come back after a crash beside the entries that replace it.
    pub fn raft_truncate_from(&self, first: u64) -> Result<()> {
        let cf = self.cf(CF_LOG)?;
        let mut b = WriteBatch::default();
        b.delete_range_cf(cf, format::log_key(first), format::log_key(u64::MAX));
        // The range's end is exclusive: the last key goes by itself.
        b.delete_cf(cf, format::log_key(u64::MAX));
        self.write_meta(b, true)
    }

    /// A `meta` value of Raft's, through the WAL (synced when `sync`).
    pub fn raft_put_meta(&self, key: &[u8], value: &[u8], sync: bool) -> Result<()> {
        let mut b = WriteBatch::default();
        b.put_cf(self.cf(CF_META)?, key, value);
        self.write_meta(b, sync)
    }

    /// Removes a `meta` value of Raft's, through the WAL, synced.
    pub fn raft_delete_meta(&self, key: &[u8]) -> Result<()> {
        let mut b = WriteBatch::default();
        b.delete_cf(self.cf(CF_META)?, key);
        self.write_meta(b, true)
    }

    /// The last log value and its sequence, if the log holds any.
    pub fn raft_last_entry(&self) -> Result<Option<(u64, Vec<u8>)>> {
        let mut it = self.db.raw_iterator_cf(self.cf(CF_LOG)?);
        it.seek_to_last();
        match (it.key(), it.value()) {
            (Some(k), Some(v)) => Ok(Some((format::decode_log_key(k)?, v.to_vec()))),
            _ => {
                it.status()?;
                Ok(None)
            }
        }
    }

    /// The log values with sequences in `from..to` that the log holds, in
    /// order (no check for gaps: Raft asks only for what it knows is
    /// there).
    pub fn raft_entries(&self, from: u64, to: u64) -> Result<Vec<(u64, Vec<u8>)>> {
        let mut out = Vec::new();
        if from >= to {
            return Ok(out);
        }
        let mut ro = ReadOptions::default();
        ro.set_iterate_upper_bound(format::log_key(to).to_vec());
        let mut it = self.db.raw_iterator_cf_opt(self.cf(CF_LOG)?, ro);
        it.seek(format::log_key(from));
        while let (Some(k), Some(v)) = (it.key(), it.value()) {
            out.push((format::decode_log_key(k)?, v.to_vec()));
            it.next();
        }
        it.status()?;
        Ok(out)
    }

    /// Raft's purge: records that Raft reads nothing up to `id` (synced
    /// with the log's new start, `keep_from`, which retention's cursors may
    /// hold below `id.index + 1`), then removes the entries below
    /// `keep_from`.
    pub fn raft_purge(&self, id: &meta::RaftLogId, keep_from: u64) -> Result<()> {
        let m = self.cf(CF_META)?;
        let mut b = WriteBatch::default();
        b.put_cf(m, meta::RAFT_PURGED_KEY, id.encode());
        let start = self.log_start()?;
        if keep_from > start {
            b.put_cf(m, meta::LOG_START_KEY, meta::encode_u64(keep_from));
        }
        self.write_meta(b, true)?;
        if keep_from > start {
            self.delete_log_below(keep_from)?;
        }
        Ok(())
    }

    /// A `meta` value holding a Raft log id.
    pub fn raft_log_id(&self, key: &[u8]) -> Result<Option<meta::RaftLogId>> {
        match self.get_meta(key)? {
            Some(v) => Ok(Some(meta::RaftLogId::decode("raft log id", &v)?)),
            None => Ok(None),
        }
    }

    /// Makes a Raft node's database a single node's (a restored backup):
    /// removes its identity and its Raft log state, keeps what its index
    /// applied (synced).
    pub(crate) fn raft_forget_node(&self) -> Result<()> {
        let m = self.cf(CF_META)?;
        let mut b = WriteBatch::default();
        for key in [
            meta::RAFT_NODE_ID_KEY,
            meta::RAFT_VOTE_KEY,
            meta::RAFT_COMMITTED_KEY,
            meta::RAFT_PURGED_KEY,
            meta::RAFT_INSTALLING_KEY,
        ] {
            b.delete_cf(m, key);
        }
        self.write_meta(b, true)
    }

    /// The node id this database belongs to, if it is a cluster's node's.
    pub fn raft_node_id(&self) -> Result<Option<u64>> {
        self.meta_u64(meta::RAFT_NODE_ID_KEY)
    }

    /// Replaces the index (`inodes`, `edges`) and the state machine's
    /// `meta` with `src`'s, a snapshot's database: the index changes
    /// without the WAL, then a flush makes them durable. Not atomic: the
    /// caller marks the install first (`meta.raft/installing`) and an open
    /// that finds the mark does it again.
    pub(crate) fn install_index(&self, src: &Store) -> Result<()> {
        let mut wo = WriteOptions::default();
        wo.disable_wal(true);
        // Above every key: inodes' keys are 8 bytes and a suffix, edges'
        // 8 bytes and a name of at most 255.
        let end = [0xffu8; 512];
        let mut b = WriteBatch::default();
        for name in [CF_INODES, CF_EDGES] {
            b.delete_range_cf(self.cf(name)?, &[][..], &end[..]);
        }
        self.db.write_opt(b, &wo)?;
        for name in [CF_INODES, CF_EDGES] {
            let to = self.cf(name)?;
            let mut it = src.db.raw_iterator_cf(src.cf(name)?);
            it.seek_to_first();
            let mut b = WriteBatch::default();
            while let (Some(k), Some(v)) = (it.key(), it.value()) {
                b.put_cf(to, k, v);
                if b.size_in_bytes() >= INSTALL_BATCH_BYTES {
                    self.db.write_opt(std::mem::take(&mut b), &wo)?;
                }
                it.next();
            }
            it.status()?;
            self.db.write_opt(b, &wo)?;
        }
        let m = self.cf(CF_META)?;
        let mut b = WriteBatch::default();
        for key in [
            meta::APPLIED_SEQ_KEY,
            meta::RAFT_APPLIED_KEY,
            meta::RAFT_MEMBERSHIP_KEY,
        ] {
            match src.get_meta(key)? {
                Some(v) => b.put_cf(m, key, v),
                None => b.delete_cf(m, key),
            }
        }
        self.db.write_opt(b, &wo)?;
        crate::failpoint::crash_point("install::before_flush");
        self.flush()?;
        // The namespace is the snapshot's (a node that joined a cluster
        // made its own when it was created).
        self.put_meta_synced(meta::NAMESPACE_ID_KEY, src.namespace_id()?.as_bytes())
    }
}

/// Bytes of index entries per write batch of a snapshot's install.
const INSTALL_BATCH_BYTES: usize = 4 << 20;

/// Iterator over decoded log records.
/// The file that marks a database under creation (see [`CreationMarker`]).
pub const CREATING_MARKER: &str = "TREELOG-CREATING";

/// Makes a database's creation all-or-nothing. Creating is not atomic in
/// RocksDB (its files, then the column families, then treelog's empty
/// namespace and format version), and a directory with only part of that
/// would be refused by every later open as "not a treelog database". So the
/// marker is made durable first, in the empty directory, and removed only
/// once the empty namespace is: an open that finds it knows the creation
/// was interrupted (it never returned, so nothing was acknowledged) and
/// starts it over, with whatever the creation had written removed.
///
/// The marker is held with an exclusive `flock` while its creation runs, so
/// that an open finding a live creation's marker refuses instead.
struct CreationMarker {
    dir: PathBuf,
    file: std::fs::File,
}

impl CreationMarker {
    /// Marks the empty directory `dir` (synced, with the directory).
    fn new(dir: &Path) -> Result<CreationMarker> {
        let file = std::fs::OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(dir.join(CREATING_MARKER))?;
        let m = CreationMarker::locked(dir, file)?;
        m.file.sync_all()?;
        sync_dir(dir)?;
        Ok(m)
    }

    /// Takes over the marker of an interrupted creation and empties `dir`
    /// of what it had written.
    fn resume(dir: &Path) -> Result<CreationMarker> {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join(CREATING_MARKER))?;
        let m = CreationMarker::locked(dir, file)?;
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if entry.file_name() == CREATING_MARKER {
                continue;
            }
            if entry.file_type()?.is_dir() {
                return Err(incompatible(
                    dir,
                    format!(
                        "the creation of a database here was interrupted, but {} is a directory \
                         that a creation does not make: remove it, or the marker {CREATING_MARKER}",
                        entry.path().display()
                    ),
                ));
            }
            std::fs::remove_file(entry.path())?;
        }
        sync_dir(dir)?;
        Ok(m)
    }

    fn locked(dir: &Path, file: std::fs::File) -> Result<CreationMarker> {
        use std::os::fd::AsRawFd;
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Err(incompatible(
                dir,
                "another process is creating a database here",
            ));
        }
        Ok(CreationMarker {
            dir: dir.to_owned(),
            file,
        })
    }

    /// The creation is durable: remove the marker (synced).
    fn finish(self) -> Result<()> {
        std::fs::remove_file(self.dir.join(CREATING_MARKER))?;
        sync_dir(&self.dir)?;
        Ok(())
    }
}

/// Makes the directory's entries (created, renamed, removed files) durable.
/// A new namespace id: 128 bits of SHA-256 over the clock, the process,
/// the path and the address of a stack value, in hex (unique enough to
/// tell namespaces apart; nothing depends on it being secret).
fn new_namespace_id(path: &Path) -> String {
    use sha2::{Digest, Sha256};
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let here = 0u8;
    let mut h = Sha256::new();
    h.update(nanos.to_le_bytes());
    h.update(std::process::id().to_le_bytes());
    h.update((&here as *const u8 as usize).to_le_bytes());
    h.update(path.as_os_str().as_encoded_bytes());
    hex::encode(&h.finalize()[..16])
}

fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

/// One stored key and value, copied out.
pub type KeyValue = (Box<[u8]>, Box<[u8]>);

/// Log records to append in one write (see [`Store::log_batch`]).
pub struct LogBatch<'a> {
    batch: WriteBatch,
    cf: &'a ColumnFamily,
}

impl LogBatch<'_> {
    /// Adds record `seq`, already encoded.
    pub fn put(&mut self, seq: u64, record: &[u8]) {
        self.batch.put_cf(self.cf, format::log_key(seq), record);
    }
}

/// Writes to any column family, through the WAL (see [`Store::raw_batch`]).
pub struct RawBatch<'a> {
    batch: WriteBatch,
    store: &'a Store,
}

impl RawBatch<'_> {
    pub fn put(&mut self, cf: &'static str, key: &[u8], value: &[u8]) -> Result<()> {
        self.batch.put_cf(self.store.cf(cf)?, key, value);
        Ok(())
    }

    pub fn delete(&mut self, cf: &'static str, key: &[u8]) -> Result<()> {
        self.batch.delete_cf(self.store.cf(cf)?, key);
        Ok(())
    }

    pub fn size_in_bytes(&self) -> usize {
        self.batch.size_in_bytes()
    }

    pub fn is_empty(&self) -> bool {
        self.batch.is_empty()
    }
}

/// Index writes to apply in one write (see [`Store::index_batch`]).
pub struct IndexBatch(WriteBatch);

impl IndexBatch {
    /// An empty batch with room for about `bytes` of keys and values.
    pub(crate) fn with_capacity(bytes: usize) -> IndexBatch {
        IndexBatch(WriteBatch::with_capacity_bytes(bytes))
    }

    /// Adds a write to `cf`, whose handle `h` the caller resolved once per
    /// batch ([`Store::index_cf`]).
    pub(crate) fn put_in(&mut self, h: &ColumnFamily, key: &[u8], value: Option<&[u8]>) {
        match value {
            Some(v) => self.0.put_cf(h, key, v),
            None => self.0.delete_cf(h, key),
        }
    }

    pub(crate) fn size_in_bytes(&self) -> usize {
        self.0.size_in_bytes()
    }

    /// The batch's writes in order, as (column family, key, value or
    /// delete), for tests.
    #[cfg(test)]
    pub(crate) fn entries(&self, store: &Store) -> Vec<(Cf, Vec<u8>, Option<Vec<u8>>)> {
        #[derive(Default)]
        struct Entries(Vec<(u32, Vec<u8>, Option<Vec<u8>>)>);
        impl rocksdb::WriteBatchIteratorCf for Entries {
            fn put_cf(&mut self, cf: u32, key: &[u8], value: &[u8]) {
                self.0.push((cf, key.to_vec(), Some(value.to_vec())));
            }
            fn delete_cf(&mut self, cf: u32, key: &[u8]) {
                self.0.push((cf, key.to_vec(), None));
            }
            fn merge_cf(&mut self, _: u32, _: &[u8], _: &[u8]) {
                panic!("index batches never merge");
            }
        }
        // A column family's id, as a batch's iterator reports it.
        let cf_id = |cf: Cf| {
            let mut b = WriteBatch::default();
            b.put_cf(store.index_cf(cf).unwrap(), b"", b"");
            let mut e = Entries::default();
            b.iterate_cf(&mut e);
            e.0[0].0
        };
        let inodes = cf_id(Cf::Inodes);
        let mut e = Entries::default();
        self.0.iterate_cf(&mut e);
        e.0.into_iter()
            .map(|(id, k, v)| (if id == inodes { Cf::Inodes } else { Cf::Edges }, k, v))
            .collect()
    }
}

/// See [`Store::log_sizes`].
pub struct LogSizes<'a> {
    inner: rocksdb::DBRawIteratorWithThreadMode<'a, DB>,
    started: bool,
}

impl Iterator for LogSizes<'_> {
    type Item = Result<(u64, usize)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.started {
            self.inner.next();
        }
        self.started = true;
        match (self.inner.key(), self.inner.value()) {
            (Some(k), Some(v)) => Some(format::decode_log_key(k).map(|seq| (seq, v.len()))),
            _ => self.inner.status().err().map(|e| Err(e.into())),
        }
    }
}

pub struct LogIter<'a> {
    /// A raw iterator: records are decoded from its slices, without
    /// copying each key and value out first.
    inner: rocksdb::DBRawIteratorWithThreadMode<'a, DB>,
    /// Whether `inner` has yielded its first entry (it is positioned on it
    /// by the seek).
    started: bool,
    /// Set after the end or an error.
    done: bool,
    expect: u64,
    /// Bytes of the record values returned so far.
    pub bytes: u64,
}

impl LogIter<'_> {
    /// Moves to the next record and checks its key; returns its sequence
    /// (its value is then `self.inner.value()`).
    fn advance(&mut self) -> Option<Result<u64>> {
        if self.done {
            return None;
        }
        if self.started {
            self.inner.next();
        }
        self.started = true;
        let (k, len) = match (self.inner.key(), self.inner.value()) {
            (Some(k), Some(v)) => (k, v.len() as u64),
            _ => {
                self.done = true;
                return self.inner.status().err().map(|e| Err(e.into()));
            }
        };
        let expect = self.expect;
        let res = format::decode_log_key(k).and_then(|seq| {
            if seq == expect {
                Ok(seq)
            } else {
                Err(Error::corrupt(
                    "log",
                    format!("expected sequence {expect}, found {seq} (gap)"),
                ))
            }
        });
        match res {
            Ok(seq) => {
                self.expect = seq + 1;
                self.bytes += len;
                Some(Ok(seq))
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }

    /// The next record, decoded without copying its strings: replay's form
    /// (see [`RecordRef`]).
    pub fn next_borrowed(&mut self) -> Option<Result<RecordRef<'_>>> {
        self.decode_next(record::decode_record_ref)
    }

    fn decode_next<'s, T>(
        &'s mut self,
        decode: fn(&'s [u8], Option<u64>) -> Result<T>,
    ) -> Option<Result<T>> {
        let seq = match self.advance()? {
            Ok(seq) => seq,
            Err(e) => return Some(Err(e)),
        };
        // `advance` saw a value here; an empty one fails to decode.
        let v = self.inner.value().unwrap_or_default();
        match decode(v, Some(seq)) {
            Ok(rec) => Some(Ok(rec)),
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

impl Iterator for LogIter<'_> {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Self::Item> {
        self.decode_next(record::decode_record)
    }
}

/// [`IndexRead`] over the live `inodes` and `edges` column families.
pub struct DbIndex<'a> {
    store: &'a Store,
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
    read: ReadOptions,
    snap: SnapshotWithThreadMode<'static, DB>,
    _db: Arc<DB>,
}

/// [`IndexRead`] over the `inodes` and `edges` column families at a
/// snapshot.
pub struct SnapshotIndex<'a> {
    store: &'a Store,
    snap: &'a IndexSnapshot,
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
    fn options(&self) -> ReadOptions {
        let mut ro = ReadOptions::default();
        ro.set_snapshot(&self.snap);
        ro
    }
}

/// Up to `limit` entries with key prefix `prefix` after `after`, from a raw
/// iterator (shared by the live and the snapshot index views), lent to `f`.
fn scan_iter(
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
fn sorted_order(keys: &[&[u8]]) -> Vec<u32> {
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
fn key_head(k: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = k.len().min(8);
    b[..n].copy_from_slice(&k[..n]);
    u64::from_be_bytes(b)
}

/// Keys from which [`Store::index_get_each`] reads through one iterator.
const SEEK_EACH_MIN_KEYS: usize = 32;

/// Steps an iterator takes forward before it seeks instead: a step costs a
/// key comparison per level, a seek a binary search in each.
const SEEK_EACH_STEPS: usize = 8;

/// The values of `keys` that exist, lent to `f` with their index in
/// `keys`, read by one iterator over the keys in sorted order: it steps
/// forward where the next key is close (a directory's children are often
/// created together, so their inode ids run in sequence) and seeks where
/// it is not. Much cheaper per key than a point read each, which searches
/// every memtable and level from the top.
fn seek_each(
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
