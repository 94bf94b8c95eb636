//! The seeds' write path, for comparison: seed 000's `inodes`/`edges` schema
//! with one synced `WriteBatch` per operation (seed 003's store layer), no
//! change log, no group commit.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use rocksdb::{ColumnFamilyDescriptor, Options, WriteBatch, WriteOptions, DB};

use crate::error::{Error, Result};
use crate::format::{self, InodeEntry, FLAG_DIRECTORY, ROOT_ID};
use crate::path;

pub struct SeedStore {
    db: DB,
    next_id: AtomicU64,
    /// Held from validation through the synced write when serialized.
    lock: Option<Mutex<()>>,
}

impl SeedStore {
    pub fn open(dir: &Path, serialized: bool) -> Result<SeedStore> {
        let mut o = Options::default();
        o.create_if_missing(true);
        o.create_missing_column_families(true);
        o.set_max_open_files(256);
        let cfs = crate::store::index_cf_descriptors();
        let db = DB::open_cf_descriptors(
            &o,
            dir,
            cfs.into_iter()
                .map(|(n, o)| ColumnFamilyDescriptor::new(n, o)),
        )?;
        let s = SeedStore {
            db,
            next_id: AtomicU64::new(format::FIRST_ALLOCATED_ID),
            lock: serialized.then(|| Mutex::new(())),
        };
        let root = InodeEntry {
            parent_id: 0,
            size: 0,
            block_size: 0,
            creation_time_ms: 0,
            modification_time_ms: 0,
            mode: 0o755,
            flags: FLAG_DIRECTORY,
            owner_id: 0,
            group_id: 0,
            name: vec![],
        };
        let mut wo = WriteOptions::default();
        wo.set_sync(true);
        s.db.put_cf_opt(
            s.cf("inodes")?,
            format::inode_key(ROOT_ID),
            root.encode(),
            &wo,
        )?;
        Ok(s)
    }

    fn cf(&self, n: &'static str) -> Result<&rocksdb::ColumnFamily> {
        self.db
            .cf_handle(n)
            .ok_or_else(|| Error::corrupt("seed store", "missing cf"))
    }

    fn lookup(&self, parent: u64, name: &str) -> Result<Option<u64>> {
        match self
            .db
            .get_pinned_cf(self.cf("edges")?, format::edge_key(parent, name.as_bytes()))?
        {
            Some(v) => Ok(Some(format::decode_edge_value(&v)?)),
            None => Ok(None),
        }
    }

    fn create_one(&self, p: &str, dir: bool) -> Result<()> {
        let comps = path::components(p)?;
        let (last, parents) = comps
            .split_last()
            .ok_or_else(|| Error::AlreadyExists("/".into()))?;
        let _g = self
            .lock
            .as_ref()
            .map(|l| l.lock().unwrap_or_else(|e| e.into_inner()));
        let mut cur = ROOT_ID;
        for c in parents {
            cur = self
                .lookup(cur, c)?
                .ok_or_else(|| Error::NotFound(p.to_owned()))?;
        }
        let pe = self
            .db
            .get_pinned_cf(self.cf("inodes")?, format::inode_key(cur))?
            .ok_or_else(|| Error::NotFound(p.to_owned()))?;
        if !InodeEntry::decode(&pe)?.is_dir() {
            return Err(Error::NotADirectory(p.to_owned()));
        }
        if self.lookup(cur, last)?.is_some() {
            return Err(Error::AlreadyExists(p.to_owned()));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let now = crate::writer::now_ms();
        let e = InodeEntry {
            parent_id: cur,
            size: 0,
            block_size: if dir {
                0
            } else {
                crate::types::DEFAULT_BLOCK_SIZE
            },
            creation_time_ms: now,
            modification_time_ms: now,
            mode: if dir { 0o755 } else { 0o644 },
            flags: if dir { FLAG_DIRECTORY } else { 0 },
            owner_id: 0,
            group_id: 0,
            name: last.as_bytes().to_vec(),
        };
        let mut b = WriteBatch::default();
        b.put_cf(self.cf("inodes")?, format::inode_key(id), e.encode());
        b.put_cf(
            self.cf("edges")?,
            format::edge_key(cur, last.as_bytes()),
            format::edge_value(id),
        );
        if id % format::ID_BLOCK == 0 {
            b.put_cf(
                self.cf("inodes")?,
                format::inode_key(format::NEXT_ID_KEY),
                format::next_id_value(id + format::ID_BLOCK),
            );
        }
        let mut wo = WriteOptions::default();
        wo.set_sync(true);
        self.db.write_opt(b, &wo)?;
        Ok(())
    }
}

impl super::Creator for SeedStore {
    fn mkdir_p(&self, p: &str) -> Result<()> {
        let comps = path::components(p)?;
        for i in 1..=comps.len() {
            match self.create_one(&path::join_all(&comps[..i]), true) {
                Ok(()) => {}
                Err(Error::AlreadyExists(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn create(&self, p: &str) -> Result<()> {
        self.create_one(p, false)
    }
}
