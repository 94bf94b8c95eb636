//! The `meta` column family: format version, namespace id, watermarks,
//! durable cursors.

use super::*;

impl Store {
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
    pub(super) fn meta_u64_at(&self, key: &[u8], ro: &ReadOptions) -> Result<Option<u64>> {
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
}
