//! `treelog bench suite`: treelog side by side with the seeds' design, the
//! raw RocksDB limit and SQLite, in one process run, with ratios and JSON.
//!
//! Workloads here: durable creates (1/8/64 callers over 1,000 directories),
//! stat by path at depth 6 (2 threads), and replay (rebuild of the index from
//! a long log). The remaining workloads of the suite (mkdir, list, rename,
//! delete, mixed, scale to 10M inodes) are not built yet.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use rocksdb::{ColumnFamilyDescriptor, WriteBatch, WriteOptions, DB};

use crate::error::{Error, Result};
use crate::event::{Event, Record};
use crate::format::{self, record, InodeEntry};
use crate::namespace::{Options, Treelog};
use crate::types::{Attrs, FileType};
use crate::writer::Durability;

use super::{run_creates, seed::SeedStore, Creator, Figure};

fn sql(e: rusqlite::Error) -> Error {
    Error::InvalidArgument(format!("sqlite: {e}"))
}

/// SQLite with a node/edge schema like JuiceFS's SQL metadata engine, WAL
/// mode, `synchronous=FULL`, one transaction per operation.
pub struct SqliteStore {
    conn: Mutex<rusqlite::Connection>,
}

impl SqliteStore {
    pub fn open(dir: &Path) -> Result<SqliteStore> {
        std::fs::create_dir_all(dir)?;
        let conn = rusqlite::Connection::open(dir.join("meta.db")).map_err(sql)?;
        conn.execute_batch(
            "PRAGMA journal_mode=WAL;
             PRAGMA synchronous=FULL;
             CREATE TABLE IF NOT EXISTS node (inode INTEGER PRIMARY KEY, type INTEGER NOT NULL,
                 mode INTEGER NOT NULL, uid INTEGER NOT NULL, gid INTEGER NOT NULL,
                 mtime INTEGER NOT NULL, ctime INTEGER NOT NULL, length INTEGER NOT NULL,
                 parent INTEGER NOT NULL);
             CREATE TABLE IF NOT EXISTS edge (parent INTEGER NOT NULL, name BLOB NOT NULL,
                 inode INTEGER NOT NULL, type INTEGER NOT NULL, PRIMARY KEY (parent, name));
             INSERT OR IGNORE INTO node VALUES (1, 2, 493, 0, 0, 0, 0, 0, 0);",
        )
        .map_err(sql)?;
        Ok(SqliteStore {
            conn: Mutex::new(conn),
        })
    }

    fn lookup(
        tx: &rusqlite::Transaction<'_>,
        parent: i64,
        name: &str,
    ) -> Result<Option<(i64, i64)>> {
        use rusqlite::OptionalExtension;
        tx.query_row(
            "SELECT inode, type FROM edge WHERE parent = ?1 AND name = ?2",
            rusqlite::params![parent, name.as_bytes()],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(sql)
    }

    fn create_one(&self, p: &str, dir: bool) -> Result<()> {
        let comps = crate::path::components(p)?;
        let (last, parents) = comps
            .split_last()
            .ok_or_else(|| Error::AlreadyExists("/".into()))?;
        let mut conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(sql)?;
        let mut cur = 1i64;
        for c in parents {
            match Self::lookup(&tx, cur, c)? {
                Some((id, 2)) => cur = id,
                Some(_) => return Err(Error::NotADirectory(p.to_owned())),
                None => return Err(Error::NotFound(p.to_owned())),
            }
        }
        if Self::lookup(&tx, cur, last)?.is_some() {
            return Err(Error::AlreadyExists(p.to_owned()));
        }
        let now = crate::writer::now_ms() as i64;
        let ty = if dir { 2 } else { 1 };
        tx.execute(
            "INSERT INTO node (type, mode, uid, gid, mtime, ctime, length, parent) VALUES (?1, ?2, 0, 0, ?3, ?3, 0, ?4)",
            rusqlite::params![ty, if dir { 0o755 } else { 0o644 }, now, cur],
        )
        .map_err(sql)?;
        let id = tx.last_insert_rowid();
        tx.execute(
            "INSERT INTO edge (parent, name, inode, type) VALUES (?1, ?2, ?3, ?4)",
            rusqlite::params![cur, last.as_bytes(), id, ty],
        )
        .map_err(sql)?;
        tx.commit().map_err(sql)
    }

    pub fn stat(&self, p: &str) -> Result<i64> {
        let comps = crate::path::components(p)?;
        let mut conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let tx = conn.transaction().map_err(sql)?;
        let mut cur = 1i64;
        for c in &comps {
            cur = Self::lookup(&tx, cur, c)?
                .ok_or_else(|| Error::NotFound(p.to_owned()))?
                .0;
        }
        let len: i64 = tx
            .query_row("SELECT length FROM node WHERE inode = ?1", [cur], |r| {
                r.get(0)
            })
            .map_err(sql)?;
        Ok(len)
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
    let now = crate::writer::now_ms();
    let attrs = Attrs {
        kind: FileType::File,
        size: 0,
        block_size: 128 << 20,
        ctime_ms: now,
        mtime_ms: now,
        mode: 0o644,
        complete: false,
        owner: String::new(),
        group: String::new(),
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
            }],
        };
        let entry = InodeEntry {
            parent_id: parent,
            size: 0,
            block_size: 128 << 20,
            creation_time_ms: now,
            modification_time_ms: now,
            mode: 0o644,
            flags: 0,
            owner_id: 0,
            group_id: 0,
            name: name.as_bytes().to_vec(),
        };
        pre.push((
            format::log_key(rec.seq),
            record::encode_record(&rec)?,
            format::inode_key(id),
            entry.encode(),
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
        for (_, _, ik, iv, ek, ev) in chunk {
            b.put_cf(inodes, ik, iv);
            b.put_cf(edges, ek, ev);
        }
        b.put_cf(meta, b"applied_seq", 1u64.to_be_bytes());
        db.write_opt(b, &nowal)?;
    }
    let secs = t0.elapsed().as_secs_f64();
    Ok(Figure::rate("raw-rocksdb", group, ops, secs))
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

/// Stat-by-path at depth 6 with 2 threads; returns stats/s.
fn stats_depth6(stat: Arc<dyn Fn(&str) -> bool + Send + Sync>, files: usize, ops: usize) -> f64 {
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for th in 0..2 {
            let stat = stat.clone();
            s.spawn(move || {
                let mut ok = 0usize;
                for i in (th..ops).step_by(2) {
                    let f = (i * 7919) % files;
                    if stat(&format!("/s/l1/l2/l3/l4/d{}/f{f}", f % 10)) {
                        ok += 1;
                    }
                }
                ok
            });
        }
    });
    ops as f64 / t0.elapsed().as_secs_f64()
}

pub fn run(base: &Path, ops: usize, callers: &[usize], replay_records: u64) -> Result<Vec<Figure>> {
    let mut figures: Vec<Figure> = Vec::new();
    println!("== durable creates ({ops} per run, 1,000 directories)");
    println!("{:<20} {:>8} {:>12}", "system", "callers", "creates/s");
    for &n in callers {
        for sys in ["treelog", "seed-serialized", "raw-rocksdb", "sqlite"] {
            let path = base.join(format!("suite-{sys}-{n}"));
            let _ = std::fs::remove_dir_all(&path);
            let sys_ops = if sys == "sqlite" || sys == "seed-serialized" {
                ops.min(5_000)
            } else {
                ops
            };
            let f = match sys {
                "treelog" => run_creates(
                    sys,
                    Arc::new(Treelog::open(&path, Options::default())?),
                    n,
                    sys_ops,
                    1000,
                    "c",
                )?,
                "seed-serialized" => run_creates(
                    sys,
                    Arc::new(SeedStore::open(&path, true)?),
                    n,
                    sys_ops,
                    1000,
                    "c",
                )?,
                "sqlite" => run_creates(
                    sys,
                    Arc::new(SqliteStore::open(&path)?),
                    n,
                    sys_ops,
                    1000,
                    "c",
                )?,
                _ => raw_rocksdb(&path, sys_ops, n)?,
            };
            println!("{:<20} {:>8} {:>12.0}", f.system, f.callers, f.ops_per_sec);
            figures.push(f);
            let _ = std::fs::remove_dir_all(&path);
        }
        let get = |s: &str| {
            figures
                .iter()
                .find(|f| f.system == s && f.callers == n)
                .map(|f| f.ops_per_sec)
                .unwrap_or(f64::NAN)
        };
        let t = get("treelog");
        println!(
            "  ratios at {n} callers: treelog/seed-serialized {:.1}x, treelog/sqlite {:.1}x, treelog/raw-rocksdb {:.2}x",
            t / get("seed-serialized"),
            t / get("sqlite"),
            t / get("raw-rocksdb")
        );
    }

    println!("== stat by path, depth 6, 2 threads");
    let files = 100_000usize;
    let path = base.join("suite-stat");
    let _ = std::fs::remove_dir_all(&path);
    let t = Arc::new(Treelog::open(
        &path,
        Options::default().durability(Durability::None),
    )?);
    let pb = bar(files as u64, "building tree");
    super::bulk_load(
        &t,
        files as u64,
        1024,
        |f| crate::Command::Create {
            path: format!("/s/l1/l2/l3/l4/d{}/f{f}", f % 10),
            parents: true,
            mode: 0o644,
            owner: String::new(),
            group: String::new(),
            block_size: 0,
        },
        Some(&pb),
    )?;
    let tt = t.clone();
    let rate = stats_depth6(
        Arc::new(move |p: &str| tt.stat(p).is_ok()),
        files,
        1_000_000,
    );
    println!("{:<20} {:>12.0} stats/s", "treelog", rate);
    figures.push(Figure::rate(
        "treelog-stat-depth6",
        2,
        1_000_000,
        1_000_000.0 / rate,
    ));
    drop(t);
    let _ = std::fs::remove_dir_all(&path);

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
            |i| crate::Command::Mkdir {
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
    let n = crate::store::Store::rebuild(&path, &Default::default())?;
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "{:<20} {:>12.0} records/s ({n} records in {secs:.2} s)",
        "treelog replay",
        n as f64 / secs
    );
    figures.push(Figure::rate("treelog-replay", 1, n as usize, secs));
    let _ = std::fs::remove_dir_all(&path);
    Ok(figures)
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

/// The namespace workloads on treelog (durable, 64 callers for writes,
/// 2 threads for reads).
pub fn workloads(base: &Path, ops: usize) -> Result<Vec<Figure>> {
    use crate::namespace::CreateOptions;
    let path = base.join("suite-workloads");
    let _ = std::fs::remove_dir_all(&path);
    let t = Treelog::open(&path, Options::default())?;
    let mut out = Vec::new();
    let mut fig = |name: &str, threads: usize, n: usize, rate: f64| {
        println!("{name:<34} {rate:>12.0} ops/s");
        out.push(Figure::rate(
            format!("treelog-{name}"),
            threads,
            n,
            n as f64 / rate,
        ));
    };
    println!("== workloads on treelog ({ops} operations each; writes durable, 64 callers)");
    let r = par(64, ops, |i| {
        t.mkdir(
            &format!("/mk/d{}/e{i}", i % 1000),
            crate::MkdirOptions {
                parents: true,
                ..Default::default()
            },
        )
        .map(|_| ())
    })?;
    fig("mkdir -p (1,000 parents)", 64, ops, r);
    par(64, ops, |i| {
        t.create(&format!("/mk/d{}/f{i}", i % 1000), CreateOptions::default())
            .map(|_| ())
    })?;
    let r = par(64, ops, |i| {
        t.rename(
            &format!("/mk/d{}/f{i}", i % 1000),
            &format!("/mk/d{}/g{i}", i % 1000),
            false,
        )
        .map(|_| ())
    })?;
    fig("rename within a directory", 64, ops, r);
    let r = par(64, ops, |i| {
        t.rename(
            &format!("/mk/d{}/g{i}", i % 1000),
            &format!("/mk/d{}/h{i}", (i + 1) % 1000),
            false,
        )
        .map(|_| ())
    })?;
    fig("rename across directories", 64, ops, r);
    let r = par(64, ops, |i| {
        t.delete(&format!("/mk/d{}/h{i}", (i + 1) % 1000), false)
            .map(|_| ())
    })?;
    fig("delete a file", 64, ops, r);
    // Listings: directories of 10 and of 10,000 entries.
    for i in 0..10 {
        t.create(
            &format!("/l10/f{i}"),
            CreateOptions {
                parents: true,
                ..Default::default()
            },
        )?;
    }
    par(64, 10_000, |i| {
        t.create(
            &format!("/l10k/f{i:05}"),
            CreateOptions {
                parents: true,
                ..Default::default()
            },
        )
        .map(|_| ())
    })?;
    let n = ops * 5;
    let r = par(2, n, |_| t.list("/l10", None, 1000).map(|_| ()))?;
    fig("list a 10-entry directory", 2, n, r);
    let n = 200;
    let r = par(2, n, |_| {
        let all = t.list_all("/l10k")?;
        if all.len() == 10_000 {
            Ok(())
        } else {
            Err(Error::InvalidArgument("short listing".into()))
        }
    })?;
    fig("list a 10,000-entry directory", 2, n, r);
    // Mixed: 70% stat, 20% create, 10% rename/delete, 64 callers.
    let r = par(64, ops, |i| match i % 10 {
        0..=6 => t
            .stat(&format!(
                "/mk/d{}/e{}",
                ((i * 31) % ops) % 1000,
                (i * 31) % ops
            ))
            .map(|_| ()),
        7 | 8 => t
            .create(&format!("/mk/d{}/x{i}", i % 1000), CreateOptions::default())
            .map(|_| ()),
        _ => t
            .mkdir(&format!("/mk/d{}/y{i}", i % 1000), Default::default())
            .and_then(|_| t.delete(&format!("/mk/d{}/y{i}", i % 1000), false))
            .map(|_| ()),
    })?;
    fig("mixed 70% stat/20% create/10% mv-rm", 64, ops, r);
    drop(t);
    let _ = std::fs::remove_dir_all(&path);
    Ok(out)
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

/// Grows one namespace to `target` inodes; at 100k, 1M and 10M (those not
/// above `target`) measures durable creates/s (64 callers) and stats/s
/// (2 threads), RSS, and on-disk bytes per inode of the index (after
/// compaction) and of the log.
pub fn scale(base: &Path, target: u64) -> Result<()> {
    let path = base.join("suite-scale");
    let _ = std::fs::remove_dir_all(&path);
    println!("== scale to {target} inodes");
    println!(
        "{:>12} {:>12} {:>12} {:>10} {:>14} {:>12}",
        "inodes", "creates/s", "stats/s", "RSS MiB", "index B/inode", "log B/rec"
    );
    let mut have = 1u64;
    for checkpoint in [100_000u64, 1_000_000, 10_000_000] {
        if checkpoint > target {
            break;
        }
        {
            let t = Treelog::open(&path, Options::default().durability(Durability::None))?;
            let pb = bar(checkpoint - have, "growing");
            let from = have;
            super::bulk_load(
                &t,
                checkpoint - have,
                4096,
                |i| crate::Command::Create {
                    path: format!("/g/d{}/f{}", (from + i) % 10_000, from + i),
                    parents: true,
                    mode: 0o644,
                    owner: String::new(),
                    group: String::new(),
                    block_size: 0,
                },
                Some(&pb),
            )?;
            have = checkpoint;
            t.close()?;
        }
        let t = Treelog::open(&path, Options::default())?;
        let n = 20_000;
        let c = par(64, n, |i| {
            t.create(
                &format!("/m{checkpoint}/d{}/f{i}", i % 1000),
                crate::namespace::CreateOptions {
                    parents: true,
                    ..Default::default()
                },
            )
            .map(|_| ())
        })?;
        have += n as u64;
        let s = par(2, 200_000, |i| {
            t.stat(&format!(
                "/g/d{}/f{}",
                (i * 7919 + 1) as u64 % checkpoint % 10_000,
                ((i * 7919) as u64 % (checkpoint - 1)) + 1
            ))
            .map(|_| ())
            .or(Ok(()))
        })?;
        let store = t.store();
        for cf in [crate::store::CF_INODES, crate::store::CF_EDGES] {
            store
                .db()
                .compact_range_cf(store.cf(cf)?, None::<&[u8]>, None::<&[u8]>);
        }
        let prop = |cf: &'static str| -> Result<u64> {
            Ok(store
                .db()
                .property_int_value_cf(store.cf(cf)?, "rocksdb.live-sst-files-size")?
                .unwrap_or(0))
        };
        let index = prop(crate::store::CF_INODES)? + prop(crate::store::CF_EDGES)?;
        store.flush()?;
        let log = prop(crate::store::CF_LOG)?;
        println!(
            "{:>12} {:>12.0} {:>12.0} {:>10.0} {:>14.1} {:>12.1}",
            have,
            c,
            s,
            rss_bytes() as f64 / (1 << 20) as f64,
            index as f64 / have as f64,
            log as f64 / t.committed_seq().max(1) as f64
        );
        t.close()?;
    }
    let _ = std::fs::remove_dir_all(&path);
    Ok(())
}
