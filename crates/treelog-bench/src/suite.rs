//! `treelog bench suite`: treelog side by side with the seeds' design, the
//! raw RocksDB limit and SQLite, in one process run, with ratios and JSON.
//!
//! - Durable creates (1/8/64 callers over 1,000 directories) on treelog,
//!   `seed-serialized`, `sqlite` and `raw-rocksdb`. The raw RocksDB figure is
//!   a create-only ceiling (treelog's bytes per create, pre-encoded, no
//!   validation); it has no counterpart for the other workloads.
//! - Replay: rebuild of treelog's index from a long log.
//! - The namespace workloads ([`workloads`]) on treelog, `seed-serialized`
//!   ([`SeedStore`]) and `sqlite` ([`SqliteStore`]) through
//!   [`BenchNamespace`]: mkdir -p over 1,000 parents, rename within and
//!   across directories, delete a file, stat by path at depth 6, list a
//!   10-entry and a 10,000-entry directory, and a mixed 70% stat / 20% create
//!   / 10% rename-or-delete load. Every acknowledged write is synced; writes
//!   and the mixed load come from 64 callers, reads from 2 threads; each
//!   system gets a fresh directory and the same operations. The fixtures
//!   (parents, files to rename, the listed directories, the stat tree) are
//!   built by [`BenchNamespace::load`] and not measured.
//! - With `--scale`, growth of one treelog namespace to 10M inodes.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use rocksdb::{ColumnFamilyDescriptor, WriteBatch, WriteOptions, DB};

use crate::error::{Error, Result};
use crate::event::{Event, Record};
use crate::format::v2::{self, InodeEntryV2};
use crate::format::{self, record};
use crate::types::{Attrs, FileType};
use treelog::Durability;
use treelog::{Options, Treelog};

use super::{
    median, run_creates, run_creates_async, seed::SeedStore, BenchNamespace, Creator, Figure,
};

/// An SQLite failure (the namespace's own errors, such as a missing parent,
/// are checked and returned before SQLite sees the statement).
fn sql(e: rusqlite::Error) -> Error {
    Error::Io(std::io::Error::other(format!("sqlite: {e}")))
}

/// SQLite node `type` of a directory (1 is a file).
const SQL_DIR: i64 = 2;

/// SQLite with a node/edge schema like JuiceFS's SQL metadata engine, WAL
/// mode, `synchronous=FULL`, one transaction per operation. Writes go through
/// one connection (SQLite serialises writers anyway, `BEGIN IMMEDIATE`);
/// reads use a small pool of their own connections, so that readers run in
/// parallel with each other and with the writer, as WAL mode allows.
pub struct SqliteStore {
    writer: Mutex<rusqlite::Connection>,
    readers: Vec<Mutex<rusqlite::Connection>>,
    next_reader: AtomicUsize,
}

/// Connections in the read pool.
const SQL_READERS: usize = 4;

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
    fn reader(&self) -> MutexGuard<'_, rusqlite::Connection> {
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

    fn write_tx(conn: &mut rusqlite::Connection) -> Result<rusqlite::Transaction<'_>> {
        conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(sql)
    }

    /// (inode, type) of `name` in directory `parent`.
    fn lookup(c: &rusqlite::Connection, parent: i64, name: &str) -> Result<Option<(i64, i64)>> {
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
    fn resolve(c: &rusqlite::Connection, comps: &[&str], p: &str) -> Result<(i64, i64)> {
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
    fn resolve_parent<'a>(
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
    fn create_in(c: &rusqlite::Connection, p: &str, dir: bool) -> Result<()> {
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

    fn create_one(&self, p: &str, dir: bool) -> Result<()> {
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
            && crate::path::is_within(&crate::path::join_all(&tc), &crate::path::join_all(&fc))
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

/// The raw RocksDB limit: pre-encoded batches with the bytes treelog writes
/// per create (a log record through the WAL, then the inode, the edge and
/// `applied_seq` without it), one fsync per group of `group` creates, no
/// validation, one thread.
fn raw_rocksdb(dir: &Path, ops: usize, group: usize) -> Result<Figure> {
    let mut o = rocksdb::Options::default();
    o.create_if_missing(true);
    o.create_missing_column_families(true);
    o.set_atomic_flush(true);
    let mut cfs: Vec<ColumnFamilyDescriptor> = crate::store::index_cf_descriptors()
        .into_iter()
        .map(|(n, o)| ColumnFamilyDescriptor::new(n, o))
        .collect();
    cfs.push(ColumnFamilyDescriptor::new(
        "log",
        rocksdb::Options::default(),
    ));
    cfs.push(ColumnFamilyDescriptor::new(
        "meta",
        rocksdb::Options::default(),
    ));
    let db = DB::open_cf_descriptors(&o, dir, cfs)?;
    let cf = |n: &str| {
        db.cf_handle(n)
            .ok_or_else(|| Error::corrupt("bench", "missing cf"))
    };
    // Pre-encode every operation's bytes.
    let now = crate::now_ms();
    let attrs = Attrs {
        kind: FileType::File,
        size: 0,
        block_size: 128 << 20,
        ctime_ms: now,
        mtime_ms: now,
        change_ms: now,
        mode: 0o644,
        complete: false,
        owner: String::new(),
        group: String::new(),
    };
    let entry_of = |parent: u64, kind: u8, flags: u8, name: &str| InodeEntryV2 {
        parent_id: parent,
        size: 0,
        block_size: if kind == v2::KIND_FILE { 128 << 20 } else { 0 },
        ctime_ms: now,
        mtime_ms: now,
        change_ms: now,
        mode: 0o644,
        kind,
        flags,
        owner_id: 0,
        group_id: 0,
        name: name.as_bytes().to_vec(),
        target: Vec::new(),
    };
    let mut pre = Vec::with_capacity(ops);
    for i in 0..ops {
        let id = 10_000 + i as u64;
        let parent = 2 + (i % 1000) as u64;
        let name = format!("f0_{i}");
        let rec = Record {
            seq: i as u64 + 1,
            time_ms: now,
            events: vec![Event::Create {
                id,
                parent,
                name: name.clone(),
                path: format!("/bench/c/d{}/{name}", i % 1000),
                attrs: attrs.clone(),
                parent_mtime_ms: Some(now),
                quotas: vec![],
            }],
        };
        // As format 2 writes a create: the entry, the edge, and the
        // parent's entry with its new times.
        let entry = entry_of(parent, v2::KIND_FILE, 0, &name);
        let parent_entry = entry_of(1, v2::KIND_DIRECTORY, v2::FLAG_COMPLETE_V2, "d");
        pre.push((
            format::log_key(rec.seq),
            record::encode_record(&rec)?,
            (format::inode_key(id), entry.encode()),
            (format::inode_key(parent), parent_entry.encode()),
            format::edge_key(parent, name.as_bytes()),
            format::edge_value(id),
        ));
    }
    let (log, inodes, edges, meta) = (cf("log")?, cf("inodes")?, cf("edges")?, cf("meta")?);
    let mut synced = WriteOptions::default();
    synced.set_sync(true);
    let mut nowal = WriteOptions::default();
    nowal.disable_wal(true);
    let t0 = Instant::now();
    for chunk in pre.chunks(group.max(1)) {
        let mut b = WriteBatch::default();
        for (lk, lv, ..) in chunk {
            b.put_cf(log, lk, lv);
        }
        db.write_opt(b, &synced)?;
        let mut b = WriteBatch::default();
        for (_, _, (ik, iv), (pk, pv), ek, ev) in chunk {
            b.put_cf(inodes, ik, iv);
            b.put_cf(inodes, pk, pv);
            b.put_cf(edges, ek, ev);
        }
        b.put_cf(meta, b"applied_seq", 1u64.to_be_bytes());
        db.write_opt(b, &nowal)?;
    }
    let secs = t0.elapsed().as_secs_f64();
    Ok(Figure::rate("raw-rocksdb", group, ops, secs))
}

/// Everything one suite run measured, as `--json-out` writes it.
#[derive(Debug, Default, serde::Serialize)]
pub struct Report {
    pub figures: Vec<Figure>,
    pub ratios: Vec<Ratio>,
    pub scale: Vec<ScalePoint>,
    pub targets: Vec<Target>,
}

/// `system`'s rate over `over`'s in one workload (`create` or a namespace
/// workload's slug), taken side by side: the median of the repetitions'
/// ratios and their range.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Ratio {
    pub workload: String,
    pub callers: usize,
    pub system: String,
    pub over: String,
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Ratio {
    fn of(workload: &str, callers: usize, system: &str, over: &str, r: &[f64]) -> Ratio {
        let (min, max) = range(r);
        Ratio {
            workload: workload.into(),
            callers,
            system: system.into(),
            over: over.into(),
            median: median(r.to_vec()),
            min,
            max,
        }
    }
}

/// One checkpoint of `--scale`: the figures measured once the namespace
/// held `inodes` inodes.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ScalePoint {
    pub inodes: u64,
    pub grown_creates_per_sec: f64,
    pub settle_seconds: f64,
    pub creates_per_sec: f64,
    pub stats_per_sec: f64,
    pub rss_mib: f64,
    pub index_bytes_per_inode: f64,
    pub log_bytes_per_record: f64,
}

/// Creates per scale measurement (each checkpoint measures twice).
const SCALE_MEASURE: usize = 100_000;

/// One of the targets, judged against this run's figures.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Target {
    pub figure: String,
    pub target: String,
    pub measured: f64,
    pub met: bool,
}

/// The targets this run has figures for: creates at 64 callers against the
/// serialized seed, SQLite and the raw limit (median ratios, for each way
/// of calling treelog), a lone caller against the serialized seed, a
/// 10,000-entry listing against SQLite, stat at depth 6, replay, and the
/// scale checkpoints.
pub fn targets(r: &Report) -> Vec<Target> {
    let mut out = Vec::new();
    let mut at_least = |figure: String, target: &str, min: f64, measured: f64| {
        out.push(Target {
            figure,
            target: format!(">= {target}"),
            measured,
            met: measured >= min,
        })
    };
    for x in r
        .ratios
        .iter()
        .filter(|x| x.workload == "create" && x.callers == 64)
    {
        let min = match x.over.as_str() {
            "seed-serialized" | "sqlite" => 20.0,
            "raw-rocksdb" => 0.5,
            _ => continue,
        };
        at_least(
            format!("creates, 64 callers: {} / {}", x.system, x.over),
            &format!("{min}x"),
            min,
            x.median,
        );
    }
    // A lone caller gets at least the serialized seed's rate.
    for x in r
        .ratios
        .iter()
        .filter(|x| x.workload == "create" && x.callers == 1 && x.over == "seed-serialized")
    {
        at_least(
            format!("creates, 1 caller: {} / {}", x.system, x.over),
            "1x",
            1.0,
            x.median,
        );
    }
    let figure = |name: &str| r.figures.iter().find(|f| f.system == name);
    if let (Some(t), Some(q)) = (figure("treelog-list-10k"), figure("sqlite-list-10k")) {
        at_least(
            "list a 10,000-entry directory: treelog / sqlite".into(),
            "2x",
            2.0,
            t.ops_per_sec / q.ops_per_sec,
        );
    }
    // The server against in-process creates, and its stats against
    // Redis's pipelined GET (`network`).
    let ratio = |a: &str, b: &str| Some(figure(a)?.ops_per_sec / figure(b)?.ops_per_sec);
    for (what, num, den, min) in [
        (
            "creates over 1 connection x 64 / in-process",
            "network-creates-1x64",
            "inproc-creates-64",
            0.8,
        ),
        (
            "creates over 16 connections x 4 / in-process",
            "network-creates-16x4",
            "inproc-creates-64",
            0.7,
        ),
        (
            "stats over 1 connection x 64 / redis-benchmark GET -P 64",
            "network-stats-1x64",
            "redis-benchmark-get-p64",
            0.7,
        ),
        (
            "stats pipelined by 64 / redis-benchmark GET -P 64",
            "network-stats-pipelined-64",
            "redis-benchmark-get-p64",
            0.7,
        ),
    ] {
        if let Some(x) = ratio(num, den) {
            at_least(what.into(), &format!("{min}x"), min, x);
        }
    }
    if let Some(f) = figure("treelog-stat-depth6") {
        at_least(
            "stat by path, depth 6, 2 threads (/s)".into(),
            "1000000",
            1e6,
            f.ops_per_sec,
        );
    }
    if let Some(f) = figure("treelog-replay") {
        at_least("replay (records/s)".into(), "1000000", 1e6, f.ops_per_sec);
    }
    if let (Some(first), Some(last)) = (r.scale.first(), r.scale.last()) {
        if last.inodes > first.inodes {
            let name = |what: &str| {
                format!(
                    "creates at {} / at {} inodes, {what}",
                    last.inodes, first.inodes
                )
            };
            at_least(
                name("as grown"),
                "0.8x",
                0.8,
                last.grown_creates_per_sec / first.grown_creates_per_sec,
            );
            at_least(
                name("settled"),
                "0.8x",
                0.8,
                last.creates_per_sec / first.creates_per_sec,
            );
        }
        out.push(Target {
            figure: format!("index bytes per inode at {} inodes", last.inodes),
            target: "<= 100".into(),
            measured: last.index_bytes_per_inode,
            met: last.index_bytes_per_inode <= 100.0,
        });
    }
    out
}

/// Prints the targets as a closing table.
pub fn print_targets(ts: &[Target]) {
    println!("== targets");
    for t in ts {
        println!(
            "  {:<58} {:>10} {:>12.2}  {}",
            t.figure,
            t.target,
            t.measured,
            if t.met { "met" } else { "MISSED" }
        );
    }
}

fn bar(len: u64, msg: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    if let Ok(style) =
        ProgressStyle::with_template("{msg:>24} [{bar:40}] {pos}/{len} ({per_sec}, eta {eta})")
    {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_message(msg.to_owned());
    pb
}

/// The systems of the create comparison, in the order a repetition runs
/// them (the next repetition runs them backwards). `seed-unserialized` is
/// the seeds' write path without the namespace lock: it races (two creates
/// of one name can both succeed) but RocksDB's own write grouping batches
/// its synced writes, so it is shown beside the correct, serialized one.
const CREATE_SYSTEMS: [&str; 6] = [
    "treelog",
    "treelog-async",
    "seed-serialized",
    "seed-unserialized",
    "raw-rocksdb",
    "sqlite",
];

/// One create run of `sys` with `n` callers, on a fresh directory.
fn create_run(base: &Path, sys: &str, n: usize, ops: usize) -> Result<Figure> {
    let path = base.join(format!("suite-{sys}-{n}"));
    let _ = std::fs::remove_dir_all(&path);
    // The systems that sync once per operation run at ~5-8k creates/s
    // here; 5,000 keeps their runs near a second.
    let one_sync_per_op =
        sys == "sqlite" || sys == "seed-serialized" || (sys == "seed-unserialized" && n == 1);
    let sys_ops = if one_sync_per_op { ops.min(5_000) } else { ops };
    let f = match sys {
        "raw-rocksdb" => raw_rocksdb(&path, sys_ops, n),
        "treelog-async" => Treelog::open(&path, Options::default())
            .and_then(|t| run_creates_async(sys, Arc::new(t), n, sys_ops, 1000, "c")),
        _ => open_system(sys, &path).and_then(|ns| run_creates(sys, ns, n, sys_ops, 1000, "c")),
    };
    let _ = std::fs::remove_dir_all(&path);
    f
}

/// `median (min-max)` of `v`, each formatted by `f`.
fn spread(v: &[f64], f: impl Fn(f64) -> String) -> String {
    let mid = f(median(v.to_vec()));
    if v.len() < 2 {
        return mid;
    }
    let (min, max) = range(v);
    format!("{mid} ({}-{})", f(min), f(max))
}

/// The smallest and largest of `v` (infinities if empty).
fn range(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
}

/// Durable creates on every system, `repeat` times per caller count, then
/// the replay. The host is shared and its fsync latency drifts within
/// seconds, so the systems run one after the other, in alternating order,
/// and each ratio is taken within one repetition: the figures reported are
/// the median run of each system and the median of the repetitions'
/// ratios, with their range.
pub fn run(
    base: &Path,
    ops: usize,
    callers: &[usize],
    replay_records: u64,
    repeat: usize,
    report: &mut Report,
) -> Result<()> {
    let repeat = repeat.max(1);
    println!("== durable creates ({ops} per run, 1,000 directories; every create synced before it returns)");
    println!(
        "   raw-rocksdb is a create-only ceiling: treelog's bytes per create, pre-encoded, no validation"
    );
    if repeat > 1 {
        println!(
            "   {repeat} repetitions, the systems in turn (every other one backwards); creates/s: median (min-max); a ratio: the median of the repetitions' side-by-side ratios (min-max)"
        );
    }
    println!("{:<20} {:>8} {:>12}", "system", "callers", "creates/s");
    for &n in callers {
        let mut runs: Vec<Vec<Figure>> = vec![Vec::new(); CREATE_SYSTEMS.len()];
        for r in 0..repeat {
            let order: [usize; CREATE_SYSTEMS.len()] = std::array::from_fn(|i| i);
            for i in super::in_turn(r, order) {
                runs[i].push(create_run(base, CREATE_SYSTEMS[i], n, ops)?);
            }
            if repeat > 1 {
                let line: Vec<String> = CREATE_SYSTEMS
                    .iter()
                    .zip(&runs)
                    .map(|(s, f)| format!("{s} {:.0}", f[r].ops_per_sec))
                    .collect();
                println!("   repetition {}: {}", r + 1, line.join(", "));
            }
        }
        // Each system's runs, by name, in repetition order (a ratio pairs
        // the runs of one repetition).
        let by_system: Vec<(&str, Vec<Figure>)> = CREATE_SYSTEMS.into_iter().zip(runs).collect();
        let rates = |sys: &str| -> Vec<f64> {
            by_system
                .iter()
                .filter(|(s, _)| *s == sys)
                .flat_map(|(_, fs)| fs.iter().map(|f| f.ops_per_sec))
                .collect()
        };
        let figures = &mut report.figures;
        for (sys, fs) in &by_system {
            println!(
                "{sys:<20} {n:>8} {:>12}",
                spread(&rates(sys), |x| format!("{x:.0}"))
            );
            // The median run itself, so that its latencies go with it.
            let mut sorted: Vec<&Figure> = fs.iter().collect();
            sorted.sort_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
            if let Some(f) = sorted.get(sorted.len() / 2) {
                figures.push((*f).clone());
            }
        }
        for t_sys in ["treelog", "treelog-async"] {
            let t = rates(t_sys);
            let mut ratio = |other: &str, digits: usize| {
                let o = rates(other);
                let r: Vec<f64> = t.iter().zip(&o).map(|(a, b)| a / b).collect();
                report.ratios.push(Ratio::of("create", n, t_sys, other, &r));
                spread(&r, |x| format!("{x:.digits$}x"))
            };
            println!(
                "  ratios at {n} callers: {t_sys}/seed-serialized {}, {t_sys}/sqlite {}, {t_sys}/raw-rocksdb {}, {t_sys}/seed-unserialized {} (races)",
                ratio("seed-serialized", 1),
                ratio("sqlite", 1),
                ratio("raw-rocksdb", 2),
                ratio("seed-unserialized", 1)
            );
        }
    }

    println!("== replay: rebuild the index from a log of {replay_records} records");
    let path = base.join("suite-replay");
    let _ = std::fs::remove_dir_all(&path);
    {
        let t = Treelog::open(&path, Options::default().durability(Durability::None))?;
        let pb = bar(replay_records, "building log");
        super::bulk_load(
            &t,
            replay_records,
            2048,
            |i| treelog::Command::Mkdir {
                path: format!("/r{}/d{i}", i % 1000),
                parents: true,
                mode: 0o755,
                owner: String::new(),
                group: String::new(),
            },
            Some(&pb),
        )?;
        t.close()?;
    }
    let t0 = Instant::now();
    let n = treelog::recovery::rebuild(&path, &Default::default())?;
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "{:<20} {:>12.0} records/s ({n} records in {secs:.2} s)",
        "treelog replay",
        n as f64 / secs
    );
    report
        .figures
        .push(Figure::rate("treelog-replay", 1, n as usize, secs));
    let _ = std::fs::remove_dir_all(&path);
    Ok(())
}

/// Runs `n` operations from `threads` threads, `op(i)` each; returns ops/s.
fn par(threads: usize, n: usize, op: impl Fn(usize) -> Result<()> + Sync) -> Result<f64> {
    let t0 = Instant::now();
    let errors = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for th in 0..threads {
            let op = &op;
            let errors = &errors;
            s.spawn(move || {
                for i in (th..n).step_by(threads) {
                    if op(i).is_err() {
                        errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let e = errors.load(std::sync::atomic::Ordering::Relaxed);
    if e > 0 {
        return Err(Error::InvalidArgument(format!("{e} operations failed")));
    }
    Ok(n as f64 / t0.elapsed().as_secs_f64())
}

/// The systems of the namespace workloads.
const SYSTEMS: [&str; 3] = ["treelog", "seed-serialized", "sqlite"];

fn open_system(sys: &str, path: &Path) -> Result<Arc<dyn BenchNamespace>> {
    Ok(match sys {
        "treelog" => Arc::new(Treelog::open(path, Options::default())?),
        "seed-serialized" => Arc::new(SeedStore::open(path, true)?),
        // Create comparison only: it races, so the namespace workloads
        // (renames, deletes) do not run on it.
        "seed-unserialized" => Arc::new(SeedStore::open(path, false)?),
        "sqlite" => Arc::new(SqliteStore::open(path)?),
        other => return Err(Error::InvalidArgument(format!("unknown system {other}"))),
    })
}

/// One measured workload of one system.
struct Measured {
    /// Short name, for the figure: `{system}-{slug}`.
    slug: &'static str,
    threads: usize,
    ops: usize,
    rate: f64,
}

/// How many operations each workload runs.
#[derive(Clone, Copy)]
struct Sizes {
    /// Write operations (mkdir, renames, delete, mixed).
    writes: usize,
    /// Stats at depth 6.
    stats: usize,
    /// Listings of the 10-entry directory.
    list10: usize,
    /// Listings of the 10,000-entry directory.
    list10k: usize,
    /// Files in the depth-6 tree that the stats resolve.
    stat_files: usize,
}

/// The path of file `f` of the depth-6 stat tree.
fn stat_path(f: usize) -> String {
    format!("/s/l1/l2/l3/l4/d{}/f{f}", f % 10)
}

/// Builds the fixture of every workload (not measured), then runs the
/// workloads on `ns` one after the other: writes from 64 callers, reads from
/// 2 threads, every error failing the run.
fn run_system(sys: &str, ns: &dyn BenchNamespace, z: Sizes) -> Result<Vec<Measured>> {
    let w = z.writes;
    let mut dirs: Vec<String> = vec!["/mk".into()];
    dirs.extend((0..1000).map(|d| format!("/mk/d{d}")));
    dirs.extend(["/l10", "/l10k", "/s", "/s/l1", "/s/l1/l2", "/s/l1/l2/l3"].map(String::from));
    dirs.push("/s/l1/l2/l3/l4".into());
    dirs.extend((0..10).map(|d| format!("/s/l1/l2/l3/l4/d{d}")));
    let mut files: Vec<String> = (0..w).map(|i| format!("/mk/d{}/f{i}", i % 1000)).collect();
    // The files the mixed workload renames or deletes.
    files.extend(
        (0..w)
            .filter(|i| i % 10 == 9)
            .map(|i| format!("/mk/d{}/z{i}", i % 1000)),
    );
    files.extend((0..10).map(|i| format!("/l10/f{i}")));
    files.extend((0..10_000).map(|i| format!("/l10k/f{i:05}")));
    files.extend((0..z.stat_files).map(stat_path));
    let pb = bar((dirs.len() + files.len()) as u64, &format!("{sys}: setup"));
    ns.load(&dirs, &files, Some(&pb))?;
    drop((dirs, files));

    let mut out = Vec::new();
    let mut measure = |slug: &'static str,
                       label: &'static str,
                       threads: usize,
                       n: usize,
                       op: &(dyn Fn(usize) -> Result<()> + Sync)|
     -> Result<()> {
        let rate = par(threads, n, op)?;
        println!("  {sys:<16} {label:<38} {n:>9} {rate:>12.0} ops/s");
        out.push(Measured {
            slug,
            threads,
            ops: n,
            rate,
        });
        Ok(())
    };
    let expect = |want: usize, got: usize| {
        if got == want {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "listed {got} entries, expected {want}"
            )))
        }
    };
    measure("mkdir-p", LABELS[0], 64, w, &|i| {
        ns.mkdir_p(&format!("/mk/d{}/e{i}", i % 1000))
    })?;
    measure("rename-within", LABELS[1], 64, w, &|i| {
        ns.rename(
            &format!("/mk/d{}/f{i}", i % 1000),
            &format!("/mk/d{}/g{i}", i % 1000),
        )
    })?;
    measure("rename-across", LABELS[2], 64, w, &|i| {
        ns.rename(
            &format!("/mk/d{}/g{i}", i % 1000),
            &format!("/mk/d{}/h{i}", (i + 1) % 1000),
        )
    })?;
    measure("delete", LABELS[3], 64, w, &|i| {
        ns.delete(&format!("/mk/d{}/h{i}", (i + 1) % 1000))
    })?;
    measure("stat-depth6", LABELS[4], 2, z.stats, &|i| {
        ns.stat(&stat_path((i * 7919) % z.stat_files))
    })?;
    measure("list-10", LABELS[5], 2, z.list10, &|_| {
        expect(10, ns.list("/l10")?)
    })?;
    measure("list-10k", LABELS[6], 2, z.list10k, &|_| {
        expect(10_000, ns.list("/l10k")?)
    })?;
    // 70% stat of a directory made above, 20% create, 10% rename or delete
    // of a file made in the setup.
    measure("mixed", LABELS[7], 64, w, &|i| match i % 10 {
        0..=6 => {
            let k = (i * 31) % w;
            ns.stat(&format!("/mk/d{}/e{k}", k % 1000))
        }
        7 | 8 => ns.create(&format!("/mk/d{}/x{i}", i % 1000)),
        _ if (i / 10) % 2 == 0 => ns.rename(
            &format!("/mk/d{}/z{i}", i % 1000),
            &format!("/mk/d{}/w{i}", i % 1000),
        ),
        _ => ns.delete(&format!("/mk/d{}/z{i}", i % 1000)),
    })?;
    Ok(out)
}

const LABELS: [&str; 8] = [
    "mkdir -p (1,000 parents)",
    "rename within a directory",
    "rename across directories",
    "delete a file",
    "stat by path at depth 6",
    "list a 10-entry directory",
    "list a 10,000-entry directory",
    "mixed 70% stat/20% create/10% mv-rm",
];

/// The namespace workloads on treelog, the serialized seed design and
/// SQLite, side by side: every acknowledged write synced, the same
/// operations and concurrency for every system (writes and mixed from 64
/// callers, reads from 2 threads).
pub fn workloads(base: &Path, ops: usize, report: &mut Report) -> Result<()> {
    let stat_files = (ops * 5).clamp(1_000, 100_000);
    let sizes = |sys: &str| Sizes {
        // A synced write of the seed design or SQLite costs ~200 us here.
        writes: if sys == "treelog" {
            ops
        } else {
            ops.min(5_000)
        },
        stats: (ops * 50).min(1_000_000),
        list10: (ops * 5).min(100_000),
        list10k: 200,
        stat_files,
    };
    println!(
        "== namespace workloads: {} (fresh directory each; writes synced, 64 callers; reads 2 threads)",
        SYSTEMS.join(", ")
    );
    println!(
        "   write ops: treelog {ops}, seed-serialized and sqlite {} (~5k synced writes/s on this disk); stat tree: {stat_files} files at depth 6",
        ops.min(5_000)
    );
    println!(
        "   raw-rocksdb is a create-only ceiling (no validation, pre-encoded) and is not run here"
    );
    println!("   list: every system reads each entry's name and attributes (its inode)");
    let mut results: Vec<(&str, Vec<Measured>)> = Vec::new();
    for sys in SYSTEMS {
        let path = base.join(format!("suite-workloads-{sys}"));
        let _ = std::fs::remove_dir_all(&path);
        let ns = open_system(sys, &path)?;
        let r = run_system(sys, ns.as_ref(), sizes(sys));
        drop(ns);
        let _ = std::fs::remove_dir_all(&path);
        results.push((sys, r?));
    }
    println!(
        "{:<38} {:<16} {:>9} {:>12}",
        "workload", "system", "ops", "ops/s"
    );
    for (wi, label) in LABELS.iter().enumerate() {
        for (sys, ms) in &results {
            let m = &ms[wi];
            let first = if sys == &SYSTEMS[0] { *label } else { "" };
            println!("{first:<38} {sys:<16} {:>9} {:>12.0}", m.ops, m.rate);
            report.figures.push(Figure::rate(
                format!("{sys}-{}", m.slug),
                m.threads,
                m.ops,
                m.ops as f64 / m.rate,
            ));
        }
        let rate = |s: &str| {
            results
                .iter()
                .find(|(sys, _)| *sys == s)
                .map(|(_, ms)| ms[wi].rate)
                .unwrap_or(f64::NAN)
        };
        let t = rate("treelog");
        let (seed, sqlite) = (t / rate("seed-serialized"), t / rate("sqlite"));
        println!("  ratios: treelog/seed-serialized {seed:.1}x, treelog/sqlite {sqlite:.1}x");
        let (slug, threads) = (results[0].1[wi].slug, results[0].1[wi].threads);
        for (over, r) in [("seed-serialized", seed), ("sqlite", sqlite)] {
            report
                .ratios
                .push(Ratio::of(slug, threads, "treelog", over, &[r]));
        }
    }
    Ok(())
}

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|k| k.parse::<u64>().ok())
            })
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

/// Compacts the index column families fully (blocking).
fn compact_index(t: &Treelog) -> Result<()> {
    let store = t.store();
    for cf in [crate::store::CF_INODES, crate::store::CF_EDGES] {
        store.compact_cf(cf)?;
    }
    Ok(())
}

/// Inodes of the scale namespace with `files` files grown (and `measured`
/// inodes from measurements): the root, `/g`, its directories (one per id
/// modulo 10,000) and the files.
fn scale_inodes(files: u64, measured: u64) -> u64 {
    2 + files.min(10_000) + files + measured
}

/// Inodes one scale measurement of `n` creates adds: `/m…`, its 1,000
/// directories and the files.
fn measure_inodes(n: u64) -> u64 {
    1 + n.min(1_000) + n
}

/// Grows one namespace to `target` inodes; at 100k, 1M and 10M (those not
/// above `target`) measures durable creates/s (64 callers) on the index as
/// grown and again after compacting it, stats/s (2 threads), RSS, and
/// on-disk bytes per inode of the index (after compaction) and of the log.
pub fn scale(base: &Path, target: u64) -> Result<Vec<ScalePoint>> {
    let mut points = Vec::new();
    let path = base.join("suite-scale");
    let _ = std::fs::remove_dir_all(&path);
    println!("== scale to {target} inodes");
    println!("   creates/s: on the index as grown (its compactions still running), then");
    println!("   after compacting it (settle: how long that took); stats/s on the settled index;");
    println!(
        "   each checkpoint's two measurements add {} inodes, counted in the bytes per inode",
        2 * measure_inodes(SCALE_MEASURE as u64)
    );
    println!(
        "{:>12} {:>10} {:>9} {:>10} {:>12} {:>10} {:>14} {:>12}",
        "inodes",
        "grown c/s",
        "settle s",
        "creates/s",
        "stats/s",
        "RSS MiB",
        "index B/inode",
        "log B/rec"
    );
    // The grown files are /g/d{id % 10,000}/f{id} for ids 1..=files, so
    // that the stats below name files that exist; `measured` counts the
    // inodes the create measurements added.
    let (mut files, mut measured) = (0u64, 0u64);
    for checkpoint in [100_000u64, 1_000_000, 10_000_000] {
        if checkpoint > target {
            break;
        }
        {
            let t = Treelog::open(&path, Options::default().durability(Durability::None))?;
            // Every checkpoint is well past the 10,000 directories of /g,
            // so this many files bring the namespace to exactly
            // `checkpoint`.
            let add = checkpoint - (2 + 10_000 + files + measured);
            assert_eq!(scale_inodes(files + add, measured), checkpoint);
            let pb = bar(add, "growing");
            let from = files + 1;
            super::bulk_load(
                &t,
                add,
                4096,
                |i| treelog::Command::Create {
                    path: format!("/g/d{}/f{}", (from + i) % 10_000, from + i),
                    parents: true,
                    mode: 0o644,
                    owner: String::new(),
                    group: String::new(),
                    block_size: 0,
                },
                Some(&pb),
            )?;
            files += add;
            t.close()?;
        }
        let t = Treelog::open(&path, Options::default())?;
        // Creates are measured twice: as grown, and on a settled index. The
        // growth above runs unsynced with thousands in flight, far faster
        // than a namespace grows under durable creates, and leaves
        // compactions behind that then run during the first measurement;
        // a namespace grown at the durable rate sits between the two.
        // Each measurement is 100,000 creates (2 s or so), so that it is
        // not one noisy moment of a shared host.
        let n = SCALE_MEASURE;
        let creates = |tag: &str| {
            par(64, n, |i| {
                t.create(
                    &format!("/m{checkpoint}{tag}/d{}/f{i}", i % 1000),
                    treelog::CreateOptions {
                        parents: true,
                        ..Default::default()
                    },
                )
                .map(|_| ())
            })
        };
        // The checkpoint the figures belong to; the two measurements add
        // inodes, which the bytes per inode count.
        let at = scale_inodes(files, measured);
        let grown = creates("g")?;
        let t0 = Instant::now();
        compact_index(&t)?;
        let settle = t0.elapsed().as_secs_f64();
        let c = creates("s")?;
        measured += 2 * measure_inodes(n as u64);
        // Stats of grown files spread over the whole namespace; a stat
        // that fails fails the run, so every one found its file.
        let s = par(2, 200_000, |i| {
            let id = (i as u64 * 7919) % files + 1;
            t.stat(&format!("/g/d{}/f{id}", id % 10_000)).map(|_| ())
        })?;
        compact_index(&t)?;
        let store = t.store();
        let prop = |cf: &'static str| -> Result<u64> {
            Ok(store
                .cf_property(cf, "rocksdb.live-sst-files-size")
                .unwrap_or(0))
        };
        let index = prop(crate::store::CF_INODES)? + prop(crate::store::CF_EDGES)?;
        store.flush()?;
        let log = prop(crate::store::CF_LOG)?;
        let p = ScalePoint {
            inodes: at,
            grown_creates_per_sec: grown,
            settle_seconds: settle,
            creates_per_sec: c,
            stats_per_sec: s,
            rss_mib: rss_bytes() as f64 / (1 << 20) as f64,
            index_bytes_per_inode: index as f64 / scale_inodes(files, measured) as f64,
            log_bytes_per_record: log as f64 / t.committed_seq().max(1) as f64,
        };
        println!(
            "{:>12} {:>10.0} {:>9.1} {:>10.0} {:>12.0} {:>10.0} {:>14.1} {:>12.1}",
            p.inodes,
            p.grown_creates_per_sec,
            p.settle_seconds,
            p.creates_per_sec,
            p.stats_per_sec,
            p.rss_mib,
            p.index_bytes_per_inode,
            p.log_bytes_per_record
        );
        points.push(p);
        t.close()?;
    }
    let _ = std::fs::remove_dir_all(&path);
    Ok(points)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn repetitions_report_the_median_and_the_range() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        // An even count takes the upper middle value (a run that happened).
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 3.0);
        assert!(median(Vec::new()).is_nan());
        let f = |x: f64| format!("{x:.1}");
        assert_eq!(spread(&[15.0, 12.5, 20.0], f), "15.0 (12.5-20.0)");
        assert_eq!(spread(&[7.0], f), "7.0");
    }

    /// The same small scenario, with its error cases, on every system of the
    /// workloads: the comparison systems must be correct, not just fast.
    fn scenario(sys: &str, ns: &dyn BenchNamespace) {
        let kind = |r: Result<()>| r.map_err(|e| e.kind()).err();
        ns.mkdir("/a").unwrap();
        ns.mkdir_p("/a/b/c").unwrap();
        ns.mkdir_p("/a/b/c").unwrap();
        assert_eq!(
            kind(ns.mkdir("/a")),
            Some(ErrorKind::AlreadyExists),
            "{sys}"
        );
        assert_eq!(kind(ns.mkdir("/x/y")), Some(ErrorKind::NotFound), "{sys}");
        ns.create("/a/f1").unwrap();
        ns.create("/a/f2").unwrap();
        assert_eq!(
            kind(ns.create("/a/f1")),
            Some(ErrorKind::AlreadyExists),
            "{sys}"
        );
        ns.stat("/a/f1").unwrap();
        ns.stat("/a/b/c").unwrap();
        ns.stat("/").unwrap();
        assert_eq!(kind(ns.stat("/a/nope")), Some(ErrorKind::NotFound), "{sys}");
        assert_eq!(
            kind(ns.stat("/nope/f1")),
            Some(ErrorKind::NotFound),
            "{sys}"
        );
        assert_eq!(ns.list("/a").unwrap(), 3, "{sys}");
        assert_eq!(ns.list("/a/b/c").unwrap(), 0, "{sys}");
        assert_eq!(ns.list("/").unwrap(), 1, "{sys}");
        assert!(ns.list("/a/f1").is_err(), "{sys}: list of a file");
        assert!(ns.list("/nope").is_err(), "{sys}: list of a missing dir");

        // Rename within a directory.
        ns.rename("/a/f1", "/a/g1").unwrap();
        assert_eq!(kind(ns.stat("/a/f1")), Some(ErrorKind::NotFound), "{sys}");
        ns.stat("/a/g1").unwrap();
        assert_eq!(ns.list("/a").unwrap(), 3, "{sys}");
        // Across directories.
        ns.rename("/a/g1", "/a/b/c/h1").unwrap();
        ns.stat("/a/b/c/h1").unwrap();
        assert_eq!(ns.list("/a").unwrap(), 2, "{sys}");
        assert_eq!(ns.list("/a/b/c").unwrap(), 1, "{sys}");
        // The moved inode keeps working under its new name.
        ns.rename("/a/b/c/h1", "/a/h2").unwrap();
        ns.stat("/a/h2").unwrap();
        assert_eq!(ns.list("/a/b/c").unwrap(), 0, "{sys}");
        // Errors: onto an existing name, a missing source, a missing target
        // parent, a directory under itself.
        assert_eq!(
            kind(ns.rename("/a/h2", "/a/f2")),
            Some(ErrorKind::AlreadyExists),
            "{sys}"
        );
        ns.stat("/a/h2").unwrap();
        ns.stat("/a/f2").unwrap();
        assert_eq!(
            kind(ns.rename("/a/nope", "/a/z")),
            Some(ErrorKind::NotFound),
            "{sys}"
        );
        assert_eq!(
            kind(ns.rename("/a/h2", "/nope/z")),
            Some(ErrorKind::NotFound),
            "{sys}"
        );
        assert!(
            ns.rename("/a/b", "/a/b/c/d").is_err(),
            "{sys}: dir under itself"
        );
        // Directories move too.
        ns.rename("/a/b", "/b2").unwrap();
        ns.stat("/b2/c").unwrap();
        assert_eq!(kind(ns.stat("/a/b/c")), Some(ErrorKind::NotFound), "{sys}");

        // Delete: a file, then a non-empty and an empty directory.
        ns.delete("/a/h2").unwrap();
        assert_eq!(kind(ns.stat("/a/h2")), Some(ErrorKind::NotFound), "{sys}");
        assert_eq!(kind(ns.delete("/a/h2")), Some(ErrorKind::NotFound), "{sys}");
        assert_eq!(kind(ns.delete("/b2")), Some(ErrorKind::NotEmpty), "{sys}");
        ns.stat("/b2/c").unwrap();
        ns.delete("/b2/c").unwrap();
        ns.delete("/b2").unwrap();
        assert_eq!(kind(ns.stat("/b2")), Some(ErrorKind::NotFound), "{sys}");
        assert_eq!(ns.list("/a").unwrap(), 1, "{sys}");
        assert_eq!(ns.list("/").unwrap(), 1, "{sys}");
        // A deleted name can be created again.
        ns.create("/a/h2").unwrap();
        assert_eq!(ns.list("/a").unwrap(), 2, "{sys}");

        // The unmeasured setup path.
        let dirs = ["/l", "/l/d0", "/l/d1"].map(String::from);
        let files: Vec<String> = (0..20).map(|i| format!("/l/d{}/f{i}", i % 2)).collect();
        ns.load(&dirs, &files, None).unwrap();
        assert_eq!(ns.list("/l/d0").unwrap(), 10, "{sys}");
        ns.stat("/l/d1/f19").unwrap();
        assert!(ns.load(&[], &["/l/d0/f0".into()], None).is_err(), "{sys}");
    }

    /// The targets are judged on the figures they name (creates at 64
    /// callers, and a lone caller against the serialized seed only), and a
    /// missed one says so.
    #[test]
    fn targets_judge_the_figures_they_name() {
        let ratio =
            |callers, over: &str, m| Ratio::of("create", callers, "treelog-async", over, &[m]);
        let point = |inodes, grown, settled, bytes| ScalePoint {
            inodes,
            grown_creates_per_sec: grown,
            settle_seconds: 0.0,
            creates_per_sec: settled,
            stats_per_sec: 0.0,
            rss_mib: 0.0,
            index_bytes_per_inode: bytes,
            log_bytes_per_record: 0.0,
        };
        let r = Report {
            figures: vec![
                Figure::rate("treelog-stat-depth6", 2, 1_000, 0.0005),
                Figure::rate("treelog-replay", 1, 1_000, 0.002),
                Figure::rate("treelog-list-10k", 2, 200, 0.2),
                Figure::rate("sqlite-list-10k", 2, 200, 0.5),
                Figure::rate("network-creates-1x64", 64, 50, 1.0),
                Figure::rate("network-creates-16x4", 64, 80, 1.0),
                Figure::rate("inproc-creates-64", 64, 100, 1.0),
                Figure::rate("network-stats-1x64", 64, 400, 1.0),
                Figure::rate("redis-benchmark-get-p64", 1, 500, 1.0),
            ],
            ratios: vec![
                ratio(1, "seed-serialized", 1.1),
                ratio(1, "sqlite", 0.5),
                ratio(8, "sqlite", 1.0),
                ratio(64, "seed-serialized", 21.0),
                ratio(64, "sqlite", 17.0),
                ratio(64, "raw-rocksdb", 0.5),
                ratio(64, "seed-unserialized", 2.0),
            ],
            scale: vec![
                point(100_000, 100.0, 100.0, 30.0),
                point(10_000_000, 79.0, 80.0, 25.0),
            ],
            targets: vec![],
        };
        let got: Vec<(String, bool)> = targets(&r).into_iter().map(|t| (t.figure, t.met)).collect();
        let want = [
            ("creates, 64 callers: treelog-async / seed-serialized", true),
            ("creates, 64 callers: treelog-async / sqlite", false),
            ("creates, 64 callers: treelog-async / raw-rocksdb", true),
            ("creates, 1 caller: treelog-async / seed-serialized", true),
            ("list a 10,000-entry directory: treelog / sqlite", true),
            ("creates over 1 connection x 64 / in-process", false),
            ("creates over 16 connections x 4 / in-process", true),
            (
                "stats over 1 connection x 64 / redis-benchmark GET -P 64",
                true,
            ),
            ("stat by path, depth 6, 2 threads (/s)", true),
            ("replay (records/s)", false),
            ("creates at 10000000 / at 100000 inodes, as grown", false),
            ("creates at 10000000 / at 100000 inodes, settled", true),
            ("index bytes per inode at 10000000 inodes", true),
        ];
        let want: Vec<(String, bool)> = want.iter().map(|(f, m)| (f.to_string(), *m)).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn bench_namespace_systems_agree() {
        for sys in SYSTEMS {
            let dir = tempfile::tempdir().unwrap();
            let ns = open_system(sys, dir.path()).unwrap();
            scenario(sys, ns.as_ref());
        }
        let dir = tempfile::tempdir().unwrap();
        let ns = open_system("seed-unserialized", dir.path()).unwrap();
        scenario("seed-unserialized", ns.as_ref());
    }

    /// The stores' writes are durable: they survive reopening.
    #[test]
    fn bench_namespace_reopen() {
        for sys in SYSTEMS {
            let dir = tempfile::tempdir().unwrap();
            {
                let ns = open_system(sys, dir.path()).unwrap();
                ns.mkdir("/d").unwrap();
                ns.create("/d/f").unwrap();
                ns.rename("/d/f", "/d/g").unwrap();
            }
            let ns = open_system(sys, dir.path()).unwrap();
            ns.stat("/d/g").unwrap();
            assert_eq!(ns.list("/d").unwrap(), 1, "{sys}");
        }
    }
}
