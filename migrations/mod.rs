//! Migrations between on-disk format versions (`treelog admin migrate`).
//!
//! This folder holds the migrations themselves: this runner, one module per
//! step ([`v1_to_v2`]), the version list (`README.md`), the golden fixture
//! of each older format (`fixtures/`) and a writer of format-1 databases
//! for tests and benchmarks ([`format1`]). Today there is one step, format
//! 1 to format 2.
//!
//! A step runs in place and resumably, in one pass over `inodes`, its
//! memory one batch (format 1 to 2, [`v1_to_v2`]):
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

use crate::error::{Error, Result};
use crate::format::meta::{self, Migration};
use crate::format::FORMAT_VERSION;
use crate::store::{Store, StoreOptions};

mod format1;
mod v1_to_v2;

pub use format1::{write_format1, Format1Spec};
pub use v1_to_v2::upgrade_entry;

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
    pub verify: Option<crate::ops::admin::VerifyReport>,
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
        v1_to_v2::dry_run(&store, resume, &mut report, &mut progress)?;
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
        v1_to_v2::run(&store, resume, &mut report, &mut progress)?;
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
        report.replayed = crate::ops::recovery::replay(&store, |_, _| {})?;
        store.flush()?;
        if opts.verify && store.log_start()? == 1 {
            report.verify = Some(crate::ops::admin::verify(&store)?);
        } else if opts.verify {
            report.problems = crate::ops::admin::check_structure(&store)?;
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
