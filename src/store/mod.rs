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

mod creation;
mod log;
mod metadata;
mod options;
mod replicated;
mod snapshot;
mod write;

use creation::*;
pub use log::*;
pub use options::*;
pub use snapshot::*;
pub use write::*;

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
        crate::sys::failpoint::crash_point("create::after_mark");
        let mut o = db_options();
        o.create_if_missing(true);
        o.create_missing_column_families(true);
        let descriptors = ALL_CFS
            .iter()
            .map(|n| ColumnFamilyDescriptor::new(*n, cf_options(n, so, &cache)))
            .collect::<Vec<_>>();
        let db = DB::open_cf_descriptors(&o, path, descriptors)?;
        crate::sys::failpoint::crash_point("create::after_open");
        let store = Store::with_db(db, path, so, cache);
        store.initialize()?;
        crate::sys::failpoint::crash_point("create::before_unmark");
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
        crate::sys::failpoint::crash_point("rebuild::after_mark");
        let (so, cache) = (self.so.clone(), self.cache.clone());
        // Nothing else holds this store's database: it is being opened.
        let db = Arc::get_mut(&mut self.db)
            .ok_or_else(|| Error::corrupt("rebuild", "the database is shared"))?;
        for name in [CF_INODES, CF_EDGES] {
            if db.cf_handle(name).is_some() {
                db.drop_cf(name)?;
                crate::sys::failpoint::crash_point("rebuild::after_drop");
            }
        }
        for name in [CF_INODES, CF_EDGES] {
            db.create_cf(name, &cf_options(name, &so, &cache))?;
            crate::sys::failpoint::crash_point("rebuild::after_create");
        }
        let mut b = WriteBatch::default();
        let inodes = self.cf(CF_INODES)?;
        for (k, v) in format::empty_namespace_inodes() {
            b.put_cf(inodes, k, v);
        }
        self.write_index_batch_raw(b, 0, Some(0))?;
        self.flush()?;
        crate::sys::failpoint::crash_point("rebuild::after_reset");
        self.rebuild_pending.store(true, Ordering::Release);
        Ok(())
    }

    /// Ends a rebuild whose replay is complete: the rebuilt index on disk
    /// first, then the mark goes (synced).
    pub(crate) fn finish_rebuild(&self) -> Result<()> {
        self.flush()?;
        crate::sys::failpoint::crash_point("rebuild::before_unmark");
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

    /// Replays into an empty index of at least this many records load it
    /// in bulk ([`StoreOptions::bulk_replay_min`]).
    pub(crate) fn bulk_replay_min(&self) -> u64 {
        self.so.bulk_replay_min
    }

    /// Whether a rebuild is under way (the index is being replayed from 0).
    pub fn rebuild_pending(&self) -> bool {
        self.rebuild_pending.load(Ordering::Acquire)
    }

    pub fn path(&self) -> &Path {
        &self.path
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
}

/// One stored key and value, copied out.
pub type KeyValue = (Box<[u8]>, Box<[u8]>);
