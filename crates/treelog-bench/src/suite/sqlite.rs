//! SQLite as the peer of the namespace workloads (WAL, `synchronous=FULL`).

use super::*;

/// An SQLite failure (the namespace's own errors, such as a missing parent,
/// are checked and returned before SQLite sees the statement).
pub(super) fn sql(e: rusqlite::Error) -> Error {
    Error::Io(std::io::Error::other(format!("sqlite: {e}")))
}

/// SQLite node `type` of a directory (1 is a file).
pub(super) const SQL_DIR: i64 = 2;

/// SQLite with a node/edge schema like JuiceFS's SQL metadata engine, WAL
/// mode, `synchronous=FULL`, one transaction per operation. Writes go through
/// one connection (SQLite serialises writers anyway, `BEGIN IMMEDIATE`);
/// reads use a small pool of their own connections, so that readers run in
/// parallel with each other and with the writer, as WAL mode allows.
pub struct SqliteStore {
    pub(super) writer: Mutex<rusqlite::Connection>,
    pub(super) readers: Vec<Mutex<rusqlite::Connection>>,
    pub(super) next_reader: AtomicUsize,
}

/// Connections in the read pool.
pub(super) const SQL_READERS: usize = 4;

impl SqliteStore {
    pub fn open(dir: &Path) -> Result<SqliteStore> {
        std::fs::create_dir_all(dir)?;
        let file = dir.join("meta.db");
        let conn = rusqlite::Connection::open(&file).map_err(sql)?;
        conn.execute_batch(
            "PRAGMA journal_mode=WAL;
             PRAGMA synchronous=FULL;
             PRAGMA busy_timeout=10000;
             CREATE TABLE IF NOT EXISTS node (inode INTEGER PRIMARY KEY, type INTEGER NOT NULL,
                 mode INTEGER NOT NULL, uid INTEGER NOT NULL, gid INTEGER NOT NULL,
                 mtime INTEGER NOT NULL, ctime INTEGER NOT NULL, length INTEGER NOT NULL,
                 parent INTEGER NOT NULL);
             CREATE TABLE IF NOT EXISTS edge (parent INTEGER NOT NULL, name BLOB NOT NULL,
                 inode INTEGER NOT NULL, type INTEGER NOT NULL, PRIMARY KEY (parent, name));
             INSERT OR IGNORE INTO node VALUES (1, 2, 493, 0, 0, 0, 0, 0, 0);",
        )
        .map_err(sql)?;
        let readers = (0..SQL_READERS)
            .map(|_| {
                let c = rusqlite::Connection::open(&file).map_err(sql)?;
                c.execute_batch(
                    "PRAGMA journal_mode=WAL;
                     PRAGMA busy_timeout=10000;
                     PRAGMA query_only=1;",
                )
                .map_err(sql)?;
                Ok(Mutex::new(c))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(SqliteStore {
            writer: Mutex::new(conn),
            readers,
            next_reader: AtomicUsize::new(0),
        })
    }

    /// A free reader connection (round robin from a moving start), or the
    /// round-robin one when all are busy.
    pub(super) fn reader(&self) -> MutexGuard<'_, rusqlite::Connection> {
        let n = self.readers.len();
        let start = self.next_reader.fetch_add(1, Ordering::Relaxed);
        for k in 0..n {
            match self.readers[(start + k) % n].try_lock() {
                Ok(g) => return g,
                Err(TryLockError::Poisoned(e)) => return e.into_inner(),
                Err(TryLockError::WouldBlock) => {}
            }
        }
        self.readers[start % n]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn write_tx(conn: &mut rusqlite::Connection) -> Result<rusqlite::Transaction<'_>> {
        conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(sql)
    }

    /// (inode, type) of `name` in directory `parent`.
    pub(super) fn lookup(
        c: &rusqlite::Connection,
        parent: i64,
        name: &str,
    ) -> Result<Option<(i64, i64)>> {
        use rusqlite::OptionalExtension;
        c.prepare_cached("SELECT inode, type FROM edge WHERE parent = ?1 AND name = ?2")
            .map_err(sql)?
            .query_row(rusqlite::params![parent, name.as_bytes()], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()
            .map_err(sql)
    }

    /// (inode, type) of the path `comps` (of `p`); the root is `(1, dir)`.
    pub(super) fn resolve(c: &rusqlite::Connection, comps: &[&str], p: &str) -> Result<(i64, i64)> {
        let mut cur = (1i64, SQL_DIR);
        for (i, name) in comps.iter().enumerate() {
            if cur.1 != SQL_DIR {
                return Err(Error::NotADirectory(crate::path::join_all(&comps[..i])));
            }
            cur = Self::lookup(c, cur.0, name)?.ok_or_else(|| Error::NotFound(p.to_owned()))?;
        }
        Ok(cur)
    }

    /// The parent directory's inode and the last name of `p`.
    pub(super) fn resolve_parent<'a>(
        c: &rusqlite::Connection,
        comps: &'a [&'a str],
        p: &str,
    ) -> Result<(i64, &'a str)> {
        let (last, parents) = comps
            .split_last()
            .ok_or_else(|| Error::InvalidArgument(format!("{p}: not on the root")))?;
        match Self::resolve(c, parents, p)? {
            (id, SQL_DIR) => Ok((id, last)),
            _ => Err(Error::NotADirectory(p.to_owned())),
        }
    }

    /// Creates `p` inside the open transaction `c`.
    pub(super) fn create_in(c: &rusqlite::Connection, p: &str, dir: bool) -> Result<()> {
        let comps = crate::path::components(p)?;
        if comps.is_empty() {
            return Err(Error::AlreadyExists("/".into()));
        }
        let (cur, last) = Self::resolve_parent(c, &comps, p)?;
        if Self::lookup(c, cur, last)?.is_some() {
            return Err(Error::AlreadyExists(p.to_owned()));
        }
        let now = crate::now_ms() as i64;
        let ty = if dir { SQL_DIR } else { 1 };
        c.prepare_cached(
            "INSERT INTO node (type, mode, uid, gid, mtime, ctime, length, parent) VALUES (?1, ?2, 0, 0, ?3, ?3, 0, ?4)",
        )
        .map_err(sql)?
        .execute(rusqlite::params![ty, if dir { 0o755 } else { 0o644 }, now, cur])
        .map_err(sql)?;
        let id = c.last_insert_rowid();
        c.prepare_cached("INSERT INTO edge (parent, name, inode, type) VALUES (?1, ?2, ?3, ?4)")
            .map_err(sql)?
            .execute(rusqlite::params![cur, last.as_bytes(), id, ty])
            .map_err(sql)?;
        Ok(())
    }

    pub(super) fn create_one(&self, p: &str, dir: bool) -> Result<()> {
        let mut conn = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let tx = Self::write_tx(&mut conn)?;
        Self::create_in(&tx, p, dir)?;
        tx.commit().map_err(sql)
    }
}

impl Creator for SqliteStore {
    fn mkdir_p(&self, p: &str) -> Result<()> {
        let comps = crate::path::components(p)?;
        for i in 1..=comps.len() {
            match self.create_one(&crate::path::join_all(&comps[..i]), true) {
                Ok(()) | Err(Error::AlreadyExists(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn create(&self, p: &str) -> Result<()> {
        self.create_one(p, false)
    }
}

impl BenchNamespace for SqliteStore {
    fn mkdir(&self, p: &str) -> Result<()> {
        self.create_one(p, true)
    }

    fn stat(&self, p: &str) -> Result<()> {
        let comps = crate::path::components(p)?;
        let mut conn = self.reader();
        let tx = conn.transaction().map_err(sql)?;
        let (id, _) = Self::resolve(&tx, &comps, p)?;
        let attrs = tx
            .prepare_cached(
                "SELECT type, mode, uid, gid, mtime, ctime, length, parent FROM node WHERE inode = ?1",
            )
            .map_err(sql)?
            .query_row([id], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, i64>(4)?,
                    r.get::<_, i64>(5)?,
                    r.get::<_, i64>(6)?,
                    r.get::<_, i64>(7)?,
                ))
            })
            .map_err(sql)?;
        std::hint::black_box(attrs);
        Ok(())
    }

    fn list(&self, p: &str) -> Result<usize> {
        let comps = crate::path::components(p)?;
        let mut conn = self.reader();
        let tx = conn.transaction().map_err(sql)?;
        let (id, ty) = Self::resolve(&tx, &comps, p)?;
        if ty != SQL_DIR {
            return Err(Error::NotADirectory(p.to_owned()));
        }
        let mut st = tx
            .prepare_cached(
                "SELECT e.name, e.inode, n.type, n.mode, n.uid, n.gid, n.mtime, n.ctime, n.length
                 FROM edge e JOIN node n ON n.inode = e.inode WHERE e.parent = ?1",
            )
            .map_err(sql)?;
        let mut rows = st.query([id]).map_err(sql)?;
        let mut n = 0;
        while let Some(r) = rows.next().map_err(sql)? {
            let name: Vec<u8> = r.get(0).map_err(sql)?;
            let name = String::from_utf8(name)
                .map_err(|_| Error::corrupt("sqlite edge", "name is not UTF-8"))?;
            // A listing returns attributes too (like treelog's and HDFS's).
            let attrs: [i64; 7] = [
                r.get(1).map_err(sql)?,
                r.get(2).map_err(sql)?,
                r.get(3).map_err(sql)?,
                r.get(4).map_err(sql)?,
                r.get(5).map_err(sql)?,
                r.get(6).map_err(sql)?,
                r.get(7).map_err(sql)?,
            ];
            std::hint::black_box((name, attrs));
            n += 1;
        }
        Ok(n)
    }

    /// Validates (source exists, target does not, a directory does not move
    /// under itself), then moves the edge and updates the node's parent in
    /// one `BEGIN IMMEDIATE` transaction.
    fn rename(&self, from: &str, to: &str) -> Result<()> {
        let fc = crate::path::components(from)?;
        let tc = crate::path::components(to)?;
        let mut conn = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let tx = Self::write_tx(&mut conn)?;
        let (sp, sname) = Self::resolve_parent(&tx, &fc, from)?;
        let (id, ty) =
            Self::lookup(&tx, sp, sname)?.ok_or_else(|| Error::NotFound(from.to_owned()))?;
        let (dp, dname) = Self::resolve_parent(&tx, &tc, to)?;
        if Self::lookup(&tx, dp, dname)?.is_some() {
            return Err(Error::AlreadyExists(to.to_owned()));
        }
        if ty == SQL_DIR
            && crate::path::is_within(crate::path::join_all(&tc), crate::path::join_all(&fc))
        {
            return Err(Error::InvalidArgument(format!(
                "cannot move {from} under itself"
            )));
        }
        tx.prepare_cached("UPDATE edge SET parent = ?1, name = ?2 WHERE parent = ?3 AND name = ?4")
            .map_err(sql)?
            .execute(rusqlite::params![
                dp,
                dname.as_bytes(),
                sp,
                sname.as_bytes()
            ])
            .map_err(sql)?;
        tx.prepare_cached("UPDATE node SET parent = ?1, ctime = ?2 WHERE inode = ?3")
            .map_err(sql)?
            .execute(rusqlite::params![dp, crate::now_ms() as i64, id])
            .map_err(sql)?;
        tx.commit().map_err(sql)
    }

    /// Edge and node out in one `BEGIN IMMEDIATE` transaction; a directory
    /// must have no edges.
    fn delete(&self, p: &str) -> Result<()> {
        use rusqlite::OptionalExtension;
        let comps = crate::path::components(p)?;
        let mut conn = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let tx = Self::write_tx(&mut conn)?;
        let (parent, name) = Self::resolve_parent(&tx, &comps, p)?;
        let (id, ty) =
            Self::lookup(&tx, parent, name)?.ok_or_else(|| Error::NotFound(p.to_owned()))?;
        if ty == SQL_DIR
            && tx
                .prepare_cached("SELECT 1 FROM edge WHERE parent = ?1 LIMIT 1")
                .map_err(sql)?
                .query_row([id], |_| Ok(()))
                .optional()
                .map_err(sql)?
                .is_some()
        {
            return Err(Error::NotEmpty(p.to_owned()));
        }
        tx.prepare_cached("DELETE FROM edge WHERE parent = ?1 AND name = ?2")
            .map_err(sql)?
            .execute(rusqlite::params![parent, name.as_bytes()])
            .map_err(sql)?;
        tx.prepare_cached("DELETE FROM node WHERE inode = ?1")
            .map_err(sql)?
            .execute([id])
            .map_err(sql)?;
        tx.commit().map_err(sql)
    }

    /// Every path in one transaction: one synced commit.
    fn load(
        &self,
        dirs: &[String],
        files: &[String],
        progress: Option<&ProgressBar>,
    ) -> Result<()> {
        let mut conn = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let tx = Self::write_tx(&mut conn)?;
        for (p, dir) in dirs
            .iter()
            .map(|d| (d, true))
            .chain(files.iter().map(|f| (f, false)))
        {
            Self::create_in(&tx, p, dir)?;
            if let Some(pb) = progress {
                pb.inc(1);
            }
        }
        tx.commit().map_err(sql)?;
        if let Some(pb) = progress {
            pb.finish_and_clear();
        }
        Ok(())
    }
}
