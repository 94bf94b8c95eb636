//! Migrations between on-disk format versions (`migrations/`,
//! `treelog admin migrate`): today the one step, format 1 to format 2.
//!
//! In place and resumable, one pass over `inodes`, its memory one batch:
//!
//! 1. **Start** (one synced batch): `meta.format_version = 2`, the marker
//!    `meta.migration = {from 1, to 2, next_id 0}`, and the dictionaries
//!    exploded into their format-2 keys (the counter takes the format-1
//!    value's key; the ids stay as format 1 gave them). From here a
//!    format-1 binary refuses the database (version 2) and a format-2
//!    open refuses it too (the marker), naming this command.
//! 2. **Batches** of about [`BATCH_BYTES`]: the inodes from `next_id` on,
//!    in id order, each rewritten as format 2 (`change_ms = mtime_ms`),
//!    and the marker's `next_id` moved past them, in the same write batch
//!    (through the WAL: all of it or none of it survives a crash).
//! 3. **End** (one synced batch): the marker removed; then the database is
//!    flushed, opened as any other (replaying records the index lacked,
//!    by schema 1's rules) and verified (`admin verify`: the whole log
//!    replayed into a scratch format-2 index must give the same bytes).
//!
//! A kill at any moment leaves format 1 untouched (before the start batch
//! commits) or a marker the next run resumes from; a batch run twice
//! rewrites nothing twice, since the marker moves with it. The log is not
//! rewritten: schema-1 records decode forever and apply by their rules.
//! The process holds RocksDB's `LOCK` throughout, so a server or another
//! migration cannot open the database meanwhile (nor this one start while
//! they hold it).

use std::path::Path;
use std::time::Instant;

use crate::error::{DictKind, Error, Result};
use crate::format::dict::Dict;
use crate::format::inode::InodeEntry;
use crate::format::meta::{self, Migration};
use crate::format::schema1::{AttrsV1, EventV1, RecordV1};
use crate::format::v2::{self, InodeEntryV2};
use crate::format::{self, record, FORMAT_VERSION, MAX_INODE_ID};
use crate::store::{Store, StoreOptions, CF_EDGES, CF_INODES, CF_LOG, CF_META};
use crate::types::{FileType, DEFAULT_DIR_MODE, DEFAULT_FILE_MODE};

/// Bytes of writes per batch of rewritten inodes.
pub const BATCH_BYTES: usize = 4 << 20;

/// What [`migrate`] is asked to do.
#[derive(Debug, Clone)]
pub struct MigrateOptions {
    /// The version to reach (this build's, [`FORMAT_VERSION`], is the only
    /// one a migration reaches).
    pub to: u64,
    /// Read everything and report what would be written; write nothing.
    pub dry_run: bool,
    /// Replay the whole log into a scratch index at the end and compare
    /// (when the log still starts at 1).
    pub verify: bool,
}

impl Default for MigrateOptions {
    fn default() -> Self {
        MigrateOptions {
            to: FORMAT_VERSION,
            dry_run: false,
            verify: true,
        }
    }
}

/// What a migration did (or, dry, would do).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct MigrateReport {
    /// The version found.
    pub from: u64,
    pub to: u64,
    /// Nothing to do: the database was at `to` already.
    pub already: bool,
    pub dry_run: bool,
    /// An interrupted migration was taken up (at this inode id).
    pub resumed_at: Option<u64>,
    /// Inodes rewritten (dry: to rewrite).
    pub inodes: u64,
    /// Dictionary names carried over.
    pub owners: u64,
    pub groups: u64,
    /// Batches written (the start and end ones included).
    pub batches: u64,
    /// Bytes of the write batches (dry: of the values to write).
    pub bytes: u64,
    /// The index was being rebuilt (`admin rebuild` interrupted): it is
    /// rebuilt in format 2 from the log instead of rewritten.
    pub rebuilt: bool,
    /// Records the index lacked, replayed once migrated.
    pub replayed: u64,
    pub elapsed_ms: u64,
    /// `admin verify` afterwards (`None`: not asked, dry, or the log no
    /// longer starts at 1; `problems` then holds the structure check).
    pub verify: Option<crate::admin::VerifyReport>,
    /// The structure check when verify could not run.
    pub problems: Vec<String>,
}

impl MigrateReport {
    /// The migrated database passed its checks.
    pub fn ok(&self) -> bool {
        self.problems.is_empty() && self.verify.as_ref().is_none_or(|v| v.ok())
    }
}

/// Opens the database for the migration, saying clearly when another
/// process holds it.
fn open(path: &Path, so: &StoreOptions) -> Result<Store> {
    let so = StoreOptions {
        create_if_missing: false,
        ..so.clone()
    };
    Store::open_unmigrated(path, &so).map_err(|e| {
        if e.to_string().contains("LOCK") {
            Error::Busy(format!(
                "the database at {} is open in another process (a server, or another \
                 command): stop it, then migrate ({e})",
                path.display()
            ))
        } else {
            e
        }
    })
}

/// The format version of the database at `path` and whether a migration
/// is under way, read without changing anything.
fn version_of(store: &Store) -> Result<(u64, Option<Migration>)> {
    let v = store
        .meta_u64(meta::FORMAT_VERSION_KEY)?
        .ok_or_else(|| Error::Incompatible {
            path: store.path().display().to_string(),
            detail: "not a treelog database: meta has no format_version".into(),
        })?;
    let m = store
        .get_meta(meta::MIGRATION_KEY)?
        .map(|b| Migration::decode(&b))
        .transpose()?;
    Ok((v, m))
}

/// Migrates the database at `path` to `opts.to` (see the module
/// documentation). `progress(done, total)` is told of every batch (total
/// is RocksDB's estimate of the keys of `inodes`).
pub fn migrate(
    path: &Path,
    so: &StoreOptions,
    opts: &MigrateOptions,
    mut progress: impl FnMut(u64, u64),
) -> Result<MigrateReport> {
    let t = Instant::now();
    let store = open(path, so)?;
    let (from, marker) = version_of(&store)?;
    let mut report = MigrateReport {
        from,
        to: opts.to,
        dry_run: opts.dry_run,
        ..Default::default()
    };
    if opts.to != FORMAT_VERSION {
        return Err(Error::InvalidArgument(format!(
            "this build migrates to format version {FORMAT_VERSION} only, not {}",
            opts.to
        )));
    }
    if from > FORMAT_VERSION {
        return Err(Error::Incompatible {
            path: path.display().to_string(),
            detail: format!(
                "format version {from} was written by a newer treelog (this build: \
                 {FORMAT_VERSION}); migrations go forward only"
            ),
        });
    }
    let resume = match (from, marker) {
        (v, None) if v == FORMAT_VERSION => {
            report.already = true;
            report.elapsed_ms = t.elapsed().as_millis() as u64;
            return Ok(report);
        }
        (v, Some(m)) if v == FORMAT_VERSION && m.from == 1 && m.to == 2 => Some(m.next_id),
        (1, None) => None,
        (v, m) => {
            return Err(Error::corrupt(
                "meta",
                format!("format version {v} with migration marker {m:?}: no migration knows it"),
            ))
        }
    };
    report.from = if resume.is_some() { 1 } else { from };
    report.resumed_at = resume;
    if opts.dry_run {
        dry_run(&store, resume, &mut report, &mut progress)?;
        report.elapsed_ms = t.elapsed().as_millis() as u64;
        return Ok(report);
    }
    if resume.is_none() && store.meta_u64(meta::REBUILD_KEY)?.is_some() {
        // The index was being dropped and rebuilt: nothing in it to keep.
        // Format 2's open finishes the rebuild, in format 2.
        store.set_format_version(FORMAT_VERSION)?;
        report.rebuilt = true;
        report.batches = 1;
    } else {
        let next = match resume {
            Some(n) => n,
            None => {
                start(&store, &mut report)?;
                0
            }
        };
        rewrite_inodes(&store, next, &mut report, &mut progress)?;
        finish(&store, &mut report)?;
    }
    store.flush()?;
    drop(store);
    // An ordinary open: replays what the index lacks (or rebuilds it).
    let so = StoreOptions {
        create_if_missing: false,
        ..so.clone()
    };
    {
        let store = Store::open(path, &so)?;
        report.replayed = crate::recovery::replay(&store, |_, _| {})?;
        store.flush()?;
        if opts.verify && store.log_start()? == 1 {
            report.verify = Some(crate::admin::verify(&store)?);
        } else if opts.verify {
            report.problems = crate::admin::check_structure(&store)?;
        }
    }
    report.elapsed_ms = t.elapsed().as_millis() as u64;
    Ok(report)
}

/// For [`crate::Options::migrate`]: migrates the database at `path` if it
/// is of an older format (or its migration was interrupted). A missing or
/// empty directory is left to the open.
pub fn migrate_if_needed(path: &Path, so: &StoreOptions) -> Result<Option<MigrateReport>> {
    if !path.join("CURRENT").exists() {
        return Ok(None);
    }
    let (v, m) = version_of(&open(path, so)?)?;
    if v == FORMAT_VERSION && m.is_none() {
        return Ok(None);
    }
    let r = migrate(path, so, &MigrateOptions::default(), |_, _| {})?;
    if !r.ok() {
        return Err(Error::corrupt(
            "migration",
            format!(
                "the migrated database at {} fails its checks: {:?} {:?}",
                path.display(),
                r.verify,
                r.problems
            ),
        ));
    }
    Ok(Some(r))
}

/// A format-1 dictionary, from its value.
fn dict_v1(store: &Store, key: u64) -> Result<Dict> {
    match store
        .scan_cf_from(CF_INODES, &format::inode_key(key))?
        .next()
        .transpose()?
    {
        Some((k, v)) if *k == format::inode_key(key) => Dict::decode(&v),
        _ => Ok(Dict::default()),
    }
}

/// The names of a format-1 dictionary, id 1 first.
fn dict_names(d: &Dict, kind: DictKind) -> Result<Vec<String>> {
    (1..=d.len())
        .map(|i| {
            u8::try_from(i)
                .map_err(|_| Error::DictionaryFull(kind))
                .and_then(|id| d.lookup(id).map(str::to_owned))
        })
        .collect()
}

/// The marker of step 1 → 2 with every inode below `next_id` rewritten.
fn marker(next_id: u64) -> [u8; 24] {
    Migration {
        from: 1,
        to: 2,
        next_id,
    }
    .encode()
}

/// Step 1: the new version, the marker, the dictionaries; synced.
fn start(store: &Store, report: &mut MigrateReport) -> Result<()> {
    let mut b = store.raw_batch();
    for (kind, key) in [
        (DictKind::Owner, format::OWNER_DICT_KEY),
        (DictKind::Group, format::GROUP_DICT_KEY),
    ] {
        let owner = kind == DictKind::Owner;
        let names = dict_names(&dict_v1(store, key)?, kind)?;
        for (i, name) in names.iter().enumerate() {
            let id = i as u32 + 1;
            b.put(CF_INODES, &v2::dict_by_id_key(owner, id), name.as_bytes())?;
            b.put(
                CF_INODES,
                &v2::dict_by_name_key(owner, name.as_bytes()),
                &id.to_le_bytes(),
            )?;
        }
        // The counter replaces format 1's whole value under the same key.
        b.put(
            CF_INODES,
            &v2::dict_count_key(owner),
            &(names.len() as u32).to_le_bytes(),
        )?;
        if owner {
            report.owners = names.len() as u64;
        } else {
            report.groups = names.len() as u64;
        }
    }
    b.put(CF_META, meta::FORMAT_VERSION_KEY, &meta::encode_u64(2))?;
    b.put(CF_META, meta::MIGRATION_KEY, &marker(0))?;
    report.bytes += b.size_in_bytes() as u64;
    report.batches += 1;
    crate::failpoint::crash_point("migrate::before_start");
    store.write_raw(b, true)?;
    crate::failpoint::crash_point("migrate::after_start");
    Ok(())
}

/// A format-1 entry as format 2 holds it.
pub fn upgrade_entry(e: &InodeEntry<&[u8]>) -> InodeEntryV2<Vec<u8>> {
    InodeEntryV2 {
        parent_id: e.parent_id,
        size: e.size,
        block_size: e.block_size,
        ctime_ms: e.creation_time_ms,
        mtime_ms: e.modification_time_ms,
        change_ms: e.modification_time_ms,
        mode: e.mode,
        kind: if e.is_dir() {
            v2::KIND_DIRECTORY
        } else {
            v2::KIND_FILE
        },
        flags: if e.is_complete() {
            v2::FLAG_COMPLETE_V2
        } else {
            0
        },
        owner_id: u32::from(e.owner_id),
        group_id: u32::from(e.group_id),
        name: e.name.to_vec(),
        target: Vec::new(),
    }
}

/// Calls `f` with the id, key and format-2 value of every format-1 inode
/// from id `from` on, in id order.
fn each_upgraded(
    store: &Store,
    from: u64,
    mut f: impl FnMut(u64, &[u8], &[u8]) -> Result<()>,
) -> Result<()> {
    let mut buf = Vec::new();
    for item in store.scan_cf_from(CF_INODES, &format::inode_key(from))? {
        let (k, v) = item?;
        let id = format::decode_inode_key(&k)?;
        if id > MAX_INODE_ID {
            break;
        }
        let e = InodeEntry::decode_ref(&v)
            .map_err(|e| Error::corrupt("inode entry", format!("inode {id}: {e}")))?;
        buf.clear();
        upgrade_entry(&e).encode_into(&mut buf);
        f(id, &k, &buf)?;
    }
    Ok(())
}

/// RocksDB's estimate of the keys of `inodes`: the progress bar's length.
fn estimated_inodes(store: &Store) -> u64 {
    store
        .cf_property(CF_INODES, "rocksdb.estimate-num-keys")
        .unwrap_or(0)
}

/// Step 2: the inodes from `next` on, batch by batch.
fn rewrite_inodes(
    store: &Store,
    next: u64,
    report: &mut MigrateReport,
    progress: &mut impl FnMut(u64, u64),
) -> Result<()> {
    let total = estimated_inodes(store);
    let mut b = store.raw_batch();
    let mut in_batch = 0u64;
    each_upgraded(store, next, |id, k, v| {
        b.put(CF_INODES, k, v)?;
        in_batch += 1;
        if b.size_in_bytes() >= BATCH_BYTES {
            let full = std::mem::replace(&mut b, store.raw_batch());
            write_batch(store, full, id + 1, std::mem::take(&mut in_batch), report)?;
            progress(report.inodes, total);
        }
        Ok(())
    })?;
    if in_batch > 0 {
        write_batch(store, b, MAX_INODE_ID + 1, in_batch, report)?;
    }
    progress(report.inodes, total.max(report.inodes));
    Ok(())
}

/// One batch of step 2, with the marker moved to `next_id`.
fn write_batch(
    store: &Store,
    mut b: crate::store::RawBatch<'_>,
    next_id: u64,
    inodes: u64,
    report: &mut MigrateReport,
) -> Result<()> {
    b.put(CF_META, meta::MIGRATION_KEY, &marker(next_id))?;
    report.bytes += b.size_in_bytes() as u64;
    report.batches += 1;
    report.inodes += inodes;
    // Not synced: a crash loses a tail of whole batches, markers with them,
    // and the next run does them again. The end batch syncs them all.
    store.write_raw(b, false)?;
    crate::failpoint::crash_point("migrate::batch");
    Ok(())
}

/// Step 3: the marker removed, synced (with every batch before it).
fn finish(store: &Store, report: &mut MigrateReport) -> Result<()> {
    let mut b = store.raw_batch();
    b.delete(CF_META, meta::MIGRATION_KEY)?;
    report.batches += 1;
    crate::failpoint::crash_point("migrate::before_end");
    store.write_raw(b, true)?;
    crate::failpoint::crash_point("migrate::after_end");
    Ok(())
}

/// Reads what a migration would rewrite and counts it.
fn dry_run(
    store: &Store,
    resume: Option<u64>,
    report: &mut MigrateReport,
    progress: &mut impl FnMut(u64, u64),
) -> Result<()> {
    let total = estimated_inodes(store);
    if resume.is_none() {
        report.owners = dict_v1(store, format::OWNER_DICT_KEY)?.len() as u64;
        report.groups = dict_v1(store, format::GROUP_DICT_KEY)?.len() as u64;
    }
    each_upgraded(store, resume.unwrap_or(0), |_, k, v| {
        report.inodes += 1;
        report.bytes += (k.len() + v.len()) as u64;
        if report.inodes % 100_000 == 0 {
            progress(report.inodes, total);
        }
        Ok(())
    })?;
    progress(report.inodes, total.max(report.inodes));
    Ok(())
}

/// A format-1 namespace to make with [`write_format1`]: `dirs`
/// directories under the root, `files_per_dir` files in each, owners and
/// groups taken in turn from `owners` and `groups` names.
#[derive(Debug, Clone)]
pub struct Format1Spec {
    pub dirs: u64,
    pub files_per_dir: u64,
    /// Distinct owner names, at most 255 (format 1's limit).
    pub owners: u8,
    pub groups: u8,
    /// The time of the first record (ms since the epoch); each record is a
    /// millisecond later.
    pub start_ms: u64,
}

/// Writes at the empty or missing directory `path` a database of format 1
/// holding `spec`'s namespace, byte for byte as format-1 code wrote one:
/// one schema-1 record per `mkdir` and `create`, and the format-1 index
/// of those records (entries, edges, dictionaries, `next_id`). For the
/// migration's tests and benchmark, which need format-1 databases larger
/// than the golden fixture (`tests/fixtures/v1`, made by format-1 code).
/// Returns the number of inodes, the root included.
pub fn write_format1(path: &Path, spec: &Format1Spec) -> Result<u64> {
    if spec.owners == 0 || spec.groups == 0 {
        return Err(Error::InvalidArgument(
            "at least one owner and one group".into(),
        ));
    }
    let store = Store::open(path, &StoreOptions::default())?;
    if store.last_log_seq()? != 0 {
        return Err(Error::AlreadyExists(path.display().to_string()));
    }
    let mut owners = Dict::default();
    let mut groups = Dict::default();
    let mut bound = format::FIRST_ALLOCATED_ID;
    let (mut seq, mut id, mut log_bytes) = (0u64, format::FIRST_ALLOCATED_ID, 0u64);
    let mut b = store.raw_batch();
    for (k, v) in format::empty_namespace_inodes_v1() {
        b.put(CF_INODES, &k, &v)?;
    }
    let mut buf = Vec::new();
    for d in 0..spec.dirs {
        let dir_id = id;
        let dir_name = format!("d{d}");
        for f in 0..=spec.files_per_dir {
            // The directory first, then its files.
            let (name, parent, path_s, kind) = if f == 0 {
                (
                    dir_name.clone(),
                    format::ROOT_ID,
                    format!("/{dir_name}"),
                    FileType::Directory,
                )
            } else {
                let n = format!("f{}", f - 1);
                let p = format!("/{dir_name}/{n}");
                (n, dir_id, p, FileType::File)
            };
            seq += 1;
            let time = spec.start_ms + seq;
            let owner = format!("user{}", (seq - 1) % u64::from(spec.owners));
            let group = format!("group{}", (seq - 1) % u64::from(spec.groups));
            let attrs = AttrsV1 {
                kind,
                size: 0,
                block_size: if kind.is_dir() {
                    0
                } else {
                    crate::types::DEFAULT_BLOCK_SIZE
                },
                ctime_ms: time,
                mtime_ms: time,
                mode: if kind.is_dir() {
                    DEFAULT_DIR_MODE
                } else {
                    DEFAULT_FILE_MODE
                },
                complete: kind.is_dir(),
                owner: &owner,
                group: &group,
            };
            let rec = RecordV1 {
                seq,
                time_ms: time,
                events: vec![EventV1::Create {
                    id,
                    parent,
                    name: &name,
                    path: &path_s,
                    attrs,
                }],
            };
            let v = record::encode_record_v1(&rec)?;
            log_bytes += v.len() as u64;
            b.put(CF_LOG, &format::log_key(seq), &v)?;
            // What format 1's apply wrote for it.
            let (owner_id, _) = owners.intern(DictKind::Owner, &owner)?;
            let (group_id, _) = groups.intern(DictKind::Group, &group)?;
            let e = InodeEntry {
                parent_id: parent,
                size: 0,
                block_size: attrs.block_size,
                creation_time_ms: time,
                modification_time_ms: time,
                mode: attrs.mode,
                flags: if kind.is_dir() {
                    format::FLAG_DIRECTORY | format::FLAG_COMPLETE
                } else {
                    0
                },
                owner_id,
                group_id,
                name: name.as_bytes(),
            };
            buf.clear();
            e.encode_into(&mut buf);
            b.put(CF_INODES, &format::inode_key(id), &buf)?;
            b.put(
                CF_EDGES,
                &format::edge_key(parent, name.as_bytes()),
                &format::edge_value(id),
            )?;
            if id >= bound {
                bound = id + format::ID_BLOCK;
                b.put(
                    CF_INODES,
                    &format::inode_key(format::NEXT_ID_KEY),
                    &format::next_id_value(bound),
                )?;
            }
            id += 1;
            if b.size_in_bytes() >= BATCH_BYTES {
                store.write_raw(std::mem::replace(&mut b, store.raw_batch()), false)?;
            }
        }
    }
    b.put(
        CF_INODES,
        &format::inode_key(format::OWNER_DICT_KEY),
        &owners.encode(),
    )?;
    b.put(
        CF_INODES,
        &format::inode_key(format::GROUP_DICT_KEY),
        &groups.encode(),
    )?;
    b.put(CF_META, meta::FORMAT_VERSION_KEY, &meta::encode_u64(1))?;
    b.put(CF_META, meta::APPLIED_SEQ_KEY, &meta::encode_u64(seq))?;
    b.put(CF_META, meta::LOG_BYTES_KEY, &meta::encode_u64(log_bytes))?;
    store.write_raw(b, true)?;
    store.flush()?;
    Ok(id - format::FIRST_ALLOCATED_ID + 1)
}
