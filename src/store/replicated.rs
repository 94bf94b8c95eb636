//! A log written by another (a consensus protocol, a replica's source),
//! and installing another store's index in place.

use super::*;

// A log written by another: a consensus protocol's entries arrive at
// their indexes, may be truncated before they are committed, and are purged
// once a snapshot covers them; a replica appends its source's records. The
// entries' bytes are `record`'s envelopes. The replication port
// (`crate::replication::Replication`) is the way in.
impl Store {
    /// Appends log values at their sequences, through the WAL, not synced
    /// (see [`Store::sync_log`]). Returns their bytes.
    pub(crate) fn append_at(&self, entries: &[(u64, Vec<u8>)]) -> Result<u64> {
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

    /// Removes every log entry from `first` on, synced: a truncated entry
    /// must not come back after a crash beside the entries that replace it.
    pub(crate) fn truncate_log_from(&self, first: u64) -> Result<()> {
        let cf = self.cf(CF_LOG)?;
        let mut b = WriteBatch::default();
        b.delete_range_cf(cf, format::log_key(first), format::log_key(u64::MAX));
        // The range's end is exclusive: the last key goes by itself.
        b.delete_cf(cf, format::log_key(u64::MAX));
        self.write_meta(b, true)
    }

    /// A `meta` value, through the WAL (synced when `sync`).
    pub(crate) fn put_meta(&self, key: &[u8], value: &[u8], sync: bool) -> Result<()> {
        let mut b = WriteBatch::default();
        b.put_cf(self.cf(CF_META)?, key, value);
        self.write_meta(b, sync)
    }

    /// Removes `meta` values, through the WAL, synced.
    pub(crate) fn delete_meta_keys(&self, keys: &[&[u8]]) -> Result<()> {
        let m = self.cf(CF_META)?;
        let mut b = WriteBatch::default();
        for key in keys {
            b.delete_cf(m, key);
        }
        self.write_meta(b, true)
    }

    /// Removes a `meta` value, through the WAL, synced.
    pub(crate) fn delete_meta(&self, key: &[u8]) -> Result<()> {
        self.delete_meta_keys(&[key])
    }

    /// The last log value and its sequence, if the log holds any.
    pub(crate) fn last_log_entry(&self) -> Result<Option<(u64, Vec<u8>)>> {
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
    /// order (no check for gaps: the caller asks only for what it knows is
    /// there).
    pub(crate) fn log_range(&self, from: u64, to: u64) -> Result<Vec<(u64, Vec<u8>)>> {
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

    /// A purge by the log's writer: writes `position` (what says how far it
    /// purged) with the log's new start, `keep_from`, synced, then removes
    /// the entries below `keep_from`.
    pub(crate) fn purge_log(&self, position: &[(&[u8], &[u8])], keep_from: u64) -> Result<()> {
        let m = self.cf(CF_META)?;
        let mut b = WriteBatch::default();
        for (k, v) in position {
            b.put_cf(m, k, v);
        }
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

    /// Replaces the index (`inodes`, `edges`, `applied_seq`) and the meta
    /// values `carried` with `src`'s, a checkpoint's database: the index
    /// changes without the WAL, then a flush makes them durable. Not
    /// atomic: the caller marks the install first and finishes it at the
    /// next open if it was interrupted.
    pub(crate) fn install_index(&self, src: &Store, carried: &[&[u8]]) -> Result<()> {
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
        for key in std::iter::once(meta::APPLIED_SEQ_KEY).chain(carried.iter().copied()) {
            match src.get_meta(key)? {
                Some(v) => b.put_cf(m, key, v),
                None => b.delete_cf(m, key),
            }
        }
        self.db.write_opt(b, &wo)?;
        crate::sys::failpoint::crash_point("install::before_flush");
        self.flush()?;
        // The namespace is the snapshot's (a node that joined a cluster
        // made its own when it was created).
        self.put_meta_synced(meta::NAMESPACE_ID_KEY, src.namespace_id()?.as_bytes())
    }
}

/// Bytes of index entries per write batch of a snapshot's install.
pub(super) const INSTALL_BATCH_BYTES: usize = 4 << 20;
