//! The `log` column family: appending records, reading them back in order,
//! removing them below the log's start.

use super::*;

impl Store {
    /// The commit time of the last record at or before `seq` that has one
    /// (a consensus protocol's own entries have none); 0 for none.
    pub fn last_record_time(&self, seq: u64) -> Result<u64> {
        let start = self.log_start()?;
        let mut s = seq;
        while s >= start.max(1) {
            match self.read_record(s)? {
                Some(r) if r.time_ms > 0 => return Ok(r.time_ms),
                Some(_) => s -= 1,
                None => return Ok(0),
            }
        }
        Ok(0)
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
        self.log_iter_with(from, last, true)
    }

    /// The records `from..=last`, a short read (a subscriber's batch
    /// behind the tail cache): no read-ahead, and the blocks stay cached for
    /// the next batch and the other subscribers.
    pub(crate) fn log_window(&self, from: u64, last: u64) -> Result<LogIter<'_>> {
        self.log_iter_with(from, last, false)
    }

    fn log_iter_with(&self, from: u64, last: u64, long: bool) -> Result<LogIter<'_>> {
        let mut ro = ReadOptions::default();
        if last < u64::MAX {
            ro.set_iterate_upper_bound(format::log_key(last + 1).to_vec());
        }
        if long {
            // A long sequential read: read ahead, and do not evict the
            // index's blocks from the cache with log blocks read once.
            ro.set_readahead_size(2 << 20);
            ro.fill_cache(false);
        }
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
        crate::sys::failpoint::crash_point("retention::after_delete");
        self.db
            .compact_range_cf(cf, None::<&[u8]>, Some(&format::log_key(start)[..]));
        Ok(())
    }

    pub(super) fn write_meta(&self, b: WriteBatch, sync: bool) -> Result<()> {
        let mut wo = WriteOptions::default();
        wo.set_sync(sync);
        self.db.write_opt(b, &wo)?;
        Ok(())
    }
}

/// Log records to append in one write (see [`Store::log_batch`]).
pub struct LogBatch<'a> {
    pub(super) batch: WriteBatch,
    pub(super) cf: &'a ColumnFamily,
}

impl LogBatch<'_> {
    /// Adds record `seq`, already encoded.
    pub fn put(&mut self, seq: u64, record: &[u8]) {
        self.batch.put_cf(self.cf, format::log_key(seq), record);
    }
}

/// See [`Store::log_sizes`].
pub struct LogSizes<'a> {
    pub(super) inner: rocksdb::DBRawIteratorWithThreadMode<'a, DB>,
    pub(super) started: bool,
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
    pub(super) inner: rocksdb::DBRawIteratorWithThreadMode<'a, DB>,
    /// Whether `inner` has yielded its first entry (it is positioned on it
    /// by the seek).
    pub(super) started: bool,
    /// Set after the end or an error.
    pub(super) done: bool,
    pub(super) expect: u64,
    /// Bytes of the record values returned so far.
    pub bytes: u64,
}

impl LogIter<'_> {
    /// Moves to the next record and checks its key; returns its sequence
    /// (its value is then `self.inner.value()`).
    pub(super) fn advance(&mut self) -> Option<Result<u64>> {
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

    pub(super) fn decode_next<'s, T>(
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
