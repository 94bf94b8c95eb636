//! Index and log writes in batches, syncs and flushes: what makes a group
//! durable and the index consistent with `applied_seq`.

use super::*;

impl Store {
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
    /// the WAL: a follower's position in another log).
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

    pub(super) fn add_index_writes_raw(&self, b: &mut WriteBatch, w: &OverlayWrites) -> Result<()> {
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

    pub(super) fn write_index_batch_raw(
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

    /// Tunes the index CFs for serving, a long replay or a bulk load
    /// ([`IndexTuning`]):
    /// memtable bloom filters (for memtables created from now on), the L0
    /// compaction trigger, and whether anything compacts at all.
    pub(crate) fn set_index_tuning(&self, tuning: IndexTuning) -> Result<()> {
        for (name, ratio) in [
            (CF_INODES, INODES_MEMTABLE_BLOOM),
            (CF_EDGES, EDGES_MEMTABLE_BLOOM),
        ] {
            let serving = tuning == IndexTuning::Serving;
            let bulk = tuning == IndexTuning::BulkLoad;
            let (ratio, trigger) = if serving {
                (ratio, L0_COMPACTION_TRIGGER)
            } else {
                (0.0, REPLAY_L0_COMPACTION_TRIGGER)
            };
            let (slowdown, stop) = if bulk {
                (BULK_L0_TRIGGER, BULK_L0_TRIGGER)
            } else {
                (L0_SLOWDOWN_TRIGGER, L0_STOP_TRIGGER)
            };
            let disable = if bulk { "true" } else { "false" };
            let (ratio, trigger) = (ratio.to_string(), trigger.to_string());
            let (slowdown, stop) = (slowdown.to_string(), stop.to_string());
            self.db.set_options_cf(
                self.cf(name)?,
                &[
                    ("memtable_prefix_bloom_size_ratio", ratio.as_str()),
                    ("level0_file_num_compaction_trigger", trigger.as_str()),
                    ("level0_slowdown_writes_trigger", slowdown.as_str()),
                    ("level0_stop_writes_trigger", stop.as_str()),
                    ("disable_auto_compactions", disable),
                ],
            )?;
        }
        Ok(())
    }

    /// Compacts `inodes` and `edges` fully, one thread each, and waits: the
    /// end of a bulk load, whose L0 holds every file it flushed. A failed
    /// compaction (a corrupt block in a file it read, an I/O error) is
    /// returned, as RocksDB recorded it.
    pub(crate) fn compact_index(&self) -> Result<()> {
        let mut co = rocksdb::CompactOptions::default();
        // Not exclusive, so that the two run at once.
        co.set_exclusive_manual_compaction(false);
        let (inodes, edges) = (self.cf(CF_INODES)?, self.cf(CF_EDGES)?);
        std::thread::scope(|s| {
            s.spawn(|| {
                self.db
                    .compact_range_cf_opt(inodes, None::<&[u8]>, None::<&[u8]>, &co)
            });
            self.db
                .compact_range_cf_opt(edges, None::<&[u8]>, None::<&[u8]>, &co);
        });
        // The C API drops a manual compaction's status; a failure is kept
        // as the database's background error, which waiting for the
        // background work to finish returns.
        self.db
            .wait_for_compact(&rocksdb::WaitForCompactOptions::default())?;
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

    pub(super) fn flush_all(&self, wait: bool) -> Result<()> {
        let cfs: Vec<&ColumnFamily> = ALL_CFS.iter().map(|n| self.cf(n)).collect::<Result<_>>()?;
        let mut fo = rocksdb::FlushOptions::default();
        fo.set_wait(wait);
        self.db.flush_cfs_opt(&cfs, &fo)?;
        Ok(())
    }
}

/// Writes to any column family, through the WAL (see [`Store::raw_batch`]).
pub struct RawBatch<'a> {
    pub(super) batch: WriteBatch,
    pub(super) store: &'a Store,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::OverlayWrites;
    use std::io::{Read, Seek, SeekFrom, Write};

    /// A bulk load's final compaction that meets a corrupt block fails with
    /// the corruption, instead of returning as though the index were one
    /// sorted run; an intact one compacts every file out of L0.
    #[test]
    fn a_failed_index_compaction_is_returned() {
        for corrupt in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
            store.set_index_tuning(IndexTuning::BulkLoad).unwrap();
            // Two flushes, so that the compaction merges two L0 files and
            // reads every data block of both: 4,000 entries of 200 bytes
            // each, several 64 KiB blocks per file.
            for round in 0..2u64 {
                let mut w = OverlayWrites::default();
                for id in 0..4_000u64 {
                    let key = (id * 2 + round).to_be_bytes().to_vec();
                    let value: Vec<u8> = (0..200u64)
                        .map(|i| (id.wrapping_mul(2_654_435_761) >> (i % 29)) as u8)
                        .collect();
                    w.inodes.insert(key, Some(value));
                }
                let mut b = store.index_batch();
                store.add_index_writes(&mut b, &w).unwrap();
                store.write_index_batch(b, round + 1, None).unwrap();
                store.flush().unwrap();
            }
            let l0 = |store: &Store| {
                store
                    .cf_property(CF_INODES, "rocksdb.num-files-at-level0")
                    .unwrap()
            };
            // The two, and the new namespace's own.
            assert!(l0(&store) >= 2);
            if corrupt {
                let files = store.db.live_files().unwrap();
                let file = files
                    .iter()
                    .filter(|f| f.column_family_name == CF_INODES)
                    .max_by_key(|f| f.size)
                    .unwrap();
                let path = dir.path().join(file.name.trim_start_matches('/'));
                let mut f = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&path)
                    .unwrap();
                // A quarter into the file: inside a data block, which the
                // flush did not cache (the index and filter are at the end).
                let at = f.metadata().unwrap().len() / 4;
                let mut bytes = [0u8; 64];
                f.seek(SeekFrom::Start(at)).unwrap();
                f.read_exact(&mut bytes).unwrap();
                bytes.iter_mut().for_each(|b| *b ^= 0x5a);
                f.seek(SeekFrom::Start(at)).unwrap();
                f.write_all(&bytes).unwrap();
            }
            let got = store.compact_index();
            if corrupt {
                let err = got.unwrap_err();
                assert_eq!(err.kind(), crate::ErrorKind::Corruption, "{err}");
            } else {
                got.unwrap();
                assert_eq!(l0(&store), 0);
            }
        }
    }
}
