//! The seeds' write path, for comparison: seed 000's `inodes`/`edges` schema
//! with one synced `WriteBatch` per operation (seed 003's store layer), no
//! change log, no group commit. Creates, mkdir, rename and delete validate
//! and write under the namespace lock when serialized; stat and list read
//! RocksDB directly without it.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use rocksdb::{ColumnFamilyDescriptor, Options, ReadOptions, WriteBatch, WriteOptions, DB};

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
        // Reopened: ids continue after the largest one in use (inode keys
        // are big-endian ids, so the last key is the largest), and the root
        // stays as it is.
        let last = {
            let mut it = s.db.raw_iterator_cf(s.cf("inodes")?);
            it.seek_to_last();
            match it.key() {
                Some(k) => Some(format::decode_inode_key(k)?),
                None => {
                    it.status()?;
                    None
                }
            }
        };
        if let Some(last) = last {
            s.next_id.store(
                (last + 1).max(format::FIRST_ALLOCATED_ID),
                Ordering::Relaxed,
            );
            return Ok(s);
        }
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

    /// The namespace lock, when serialized: held from validation through
    /// the synced write of every write operation (reads do not take it).
    fn guard(&self) -> Option<MutexGuard<'_, ()>> {
        self.lock
            .as_ref()
            .map(|l| l.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn inode(&self, id: u64, p: &str) -> Result<InodeEntry> {
        let v = self
            .db
            .get_pinned_cf(self.cf("inodes")?, format::inode_key(id))?
            .ok_or_else(|| Error::NotFound(p.to_owned()))?;
        InodeEntry::decode(&v)
    }

    /// Resolves the components `comps` of `p` from the root.
    fn resolve(&self, comps: &[&str], p: &str) -> Result<u64> {
        let mut cur = ROOT_ID;
        for c in comps {
            cur = self
                .lookup(cur, c)?
                .ok_or_else(|| Error::NotFound(p.to_owned()))?;
        }
        Ok(cur)
    }

    /// Resolves the parent directory of `p`: (parent id, last name).
    fn resolve_parent<'a>(&self, comps: &'a [&'a str], p: &str) -> Result<(u64, &'a str)> {
        let (last, parents) = comps
            .split_last()
            .ok_or_else(|| Error::InvalidArgument(format!("{p}: not on the root")))?;
        let parent = self.resolve(parents, p)?;
        if !self.inode(parent, p)?.is_dir() {
            return Err(Error::NotADirectory(p.to_owned()));
        }
        Ok((parent, last))
    }

    /// An iterator over the edges of directory `dir` (and no others).
    fn children(&self, dir: u64) -> Result<rocksdb::DBRawIteratorWithThreadMode<'_, DB>> {
        let mut ro = ReadOptions::default();
        ro.set_iterate_upper_bound(format::edge_prefix(dir + 1));
        ro.set_prefix_same_as_start(true);
        let mut it = self.db.raw_iterator_cf_opt(self.cf("edges")?, ro);
        it.seek(format::edge_prefix(dir));
        Ok(it)
    }

    fn write(&self, b: WriteBatch, sync: bool) -> Result<()> {
        let mut wo = WriteOptions::default();
        wo.set_sync(sync);
        self.db.write_opt(b, &wo)?;
        Ok(())
    }

    fn create_one(&self, p: &str, dir: bool, sync: bool) -> Result<()> {
        let comps = path::components(p)?;
        if comps.is_empty() {
            return Err(Error::AlreadyExists("/".into()));
        }
        let _g = self.guard();
        let (cur, last) = self.resolve_parent(&comps, p)?;
        if self.lookup(cur, last)?.is_some() {
            return Err(Error::AlreadyExists(p.to_owned()));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let now = crate::now_ms();
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
        self.write(b, sync)
    }
}

impl super::Creator for SeedStore {
    fn mkdir_p(&self, p: &str) -> Result<()> {
        let comps = path::components(p)?;
        for i in 1..=comps.len() {
            match self.create_one(&path::join_all(&comps[..i]), true, true) {
                Ok(()) => {}
                Err(Error::AlreadyExists(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn create(&self, p: &str) -> Result<()> {
        self.create_one(p, false, true)
    }
}

impl super::BenchNamespace for SeedStore {
    fn mkdir(&self, p: &str) -> Result<()> {
        self.create_one(p, true, true)
    }

    fn stat(&self, p: &str) -> Result<()> {
        let comps = path::components(p)?;
        let id = self.resolve(&comps, p)?;
        std::hint::black_box(self.inode(id, p)?);
        Ok(())
    }

    fn list(&self, p: &str) -> Result<usize> {
        let comps = path::components(p)?;
        let id = self.resolve(&comps, p)?;
        if !self.inode(id, p)?.is_dir() {
            return Err(Error::NotADirectory(p.to_owned()));
        }
        let mut it = self.children(id)?;
        let mut n = 0;
        while let (Some(k), Some(v)) = (it.key(), it.value()) {
            let (_, name) = format::decode_edge_key(k)?;
            let name = std::str::from_utf8(name)
                .map_err(|_| Error::corrupt("edge key", "name is not UTF-8"))?;
            // A listing returns attributes too (like treelog's and HDFS's).
            let id = format::decode_edge_value(v)?;
            std::hint::black_box((name, self.inode(id, p)?));
            n += 1;
            it.next();
        }
        it.status()?;
        Ok(n)
    }

    /// Old edge out, new edge in, the inode rewritten with its new parent and
    /// name: one synced batch, under the lock when serialized.
    fn rename(&self, from: &str, to: &str) -> Result<()> {
        let fc = path::components(from)?;
        let tc = path::components(to)?;
        let _g = self.guard();
        let (sp, sname) = self.resolve_parent(&fc, from)?;
        let id = self
            .lookup(sp, sname)?
            .ok_or_else(|| Error::NotFound(from.to_owned()))?;
        let (dp, dname) = self.resolve_parent(&tc, to)?;
        if self.lookup(dp, dname)?.is_some() {
            return Err(Error::AlreadyExists(to.to_owned()));
        }
        let mut e = self.inode(id, from)?;
        if e.is_dir() && path::is_within(path::join_all(&tc), path::join_all(&fc)) {
            return Err(Error::InvalidArgument(format!(
                "cannot move {from} under itself"
            )));
        }
        e.parent_id = dp;
        e.name = dname.as_bytes().to_vec();
        let mut b = WriteBatch::default();
        let edges = self.cf("edges")?;
        b.delete_cf(edges, format::edge_key(sp, sname.as_bytes()));
        b.put_cf(
            edges,
            format::edge_key(dp, dname.as_bytes()),
            format::edge_value(id),
        );
        b.put_cf(self.cf("inodes")?, format::inode_key(id), e.encode());
        self.write(b, true)
    }

    /// Edge and inode out in one synced batch; a directory must have no
    /// edges under its prefix.
    fn delete(&self, p: &str) -> Result<()> {
        let comps = path::components(p)?;
        let _g = self.guard();
        let (parent, name) = self.resolve_parent(&comps, p)?;
        let id = self
            .lookup(parent, name)?
            .ok_or_else(|| Error::NotFound(p.to_owned()))?;
        if self.inode(id, p)?.is_dir() {
            let it = self.children(id)?;
            if it.valid() {
                return Err(Error::NotEmpty(p.to_owned()));
            }
            it.status()?;
        }
        let mut b = WriteBatch::default();
        b.delete_cf(self.cf("edges")?, format::edge_key(parent, name.as_bytes()));
        b.delete_cf(self.cf("inodes")?, format::inode_key(id));
        self.write(b, true)
    }

    /// The same operations without the per-operation sync, then one WAL sync.
    fn load(
        &self,
        dirs: &[String],
        files: &[String],
        progress: Option<&indicatif::ProgressBar>,
    ) -> Result<()> {
        for (p, dir) in dirs
            .iter()
            .map(|d| (d, true))
            .chain(files.iter().map(|f| (f, false)))
        {
            self.create_one(p, dir, false)?;
            if let Some(pb) = progress {
                pb.inc(1);
            }
        }
        self.db.flush_wal(true)?;
        if let Some(pb) = progress {
            pb.finish_and_clear();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BenchNamespace, Creator};

    /// A reopened seed store allocates ids after the ones in use, so files
    /// created before and after the reopen stay distinct.
    #[test]
    fn reopening_continues_the_id_sequence() {
        let dir = tempfile::tempdir().unwrap();
        let ids = |s: &SeedStore, p: &str| -> u64 {
            let mut parent = ROOT_ID;
            for c in p.split('/').filter(|c| !c.is_empty()) {
                parent = s.lookup(parent, c).unwrap().expect("exists");
            }
            parent
        };
        let a = {
            let s = SeedStore::open(dir.path(), true).unwrap();
            s.mkdir_p("/a/b").unwrap();
            s.create("/a/b/f").unwrap();
            ids(&s, "/a/b/f")
        };
        let s = SeedStore::open(dir.path(), true).unwrap();
        s.create("/a/b/g").unwrap();
        let g = ids(&s, "/a/b/g");
        assert!(g > a, "new id {g} after the old ones (last {a})");
        assert_eq!(ids(&s, "/a/b/f"), a, "the old file is still there");
        s.stat("/a/b/f").unwrap();
    }
}
