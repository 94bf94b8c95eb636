//! Point-in-time backups and their restore (docs/FORMAT.md §12).
//!
//! A backup is a directory: `db/`, a closed treelog database whose index
//! is caught up with its log at one committed sequence, and
//! `treelog-backup.manifest`, written last, which names that sequence, the
//! format version, the dictionaries, the index digest of `admin verify`
//! and every file of `db/` with its size and CRC-32C, and ends with the
//! SHA-256 of everything above it.
//!
//! [`take_checkpoint`] makes a RocksDB checkpoint of the live database
//! inside its data directory (hard links to the immutable table files,
//! after an atomic flush; writes go on meanwhile). [`Checkpoint::finish`]
//! opens that copy, replays what its index lacks, waits until the source
//! has committed the copy's last sequence, flushes it, and copies its
//! files into a staging directory beside the destination with their
//! checksums; the manifest is written and synced last and the staging
//! directory renamed into place, so a directory under the destination's
//! name is always a complete backup.
//!
//! [`restore`] checks every file against the manifest while copying it
//! into a staging directory beside the new data directory, opens the copy,
//! checks its sequence and digest against the manifest, and renames it
//! into place.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use sha2::{Digest, Sha256};

use crate::error::{DictKind, Error, Result};
use crate::format;
use crate::replication::consensus;
use crate::store::{Store, StoreOptions};

/// The manifest's file name in a backup directory.
pub const MANIFEST_FILE: &str = "treelog-backup.manifest";
/// The database's directory in a backup directory.
pub const DB_DIR: &str = "db";
/// The version of the backup layout and manifest this build writes and
/// reads.
pub const BACKUP_FORMAT: u32 = 1;

/// A checkpoint in the making, inside the source's data directory, and
/// removed with it.
const CHECKPOINT_PREFIX: &str = ".treelog-checkpoint-";

/// The manifest's last line starts with this, followed by the hex SHA-256
/// of every byte before that line.
const TRAILER_PREFIX: &str = "sha256 ";

/// Bytes copied per read.
const COPY_CHUNK: usize = 1 << 20;

/// The manifest of a backup (its JSON body; see docs/FORMAT.md §12.3).
mod checkpoint;
mod manifest;
mod restore;

pub use checkpoint::*;
pub use manifest::*;
pub use restore::*;

/// What a backup or a restore has done so far.
#[derive(Debug, Clone, Copy)]
pub enum Progress<'a> {
    /// The checkpoint is taken and caught up: the backup holds `seq`, and
    /// its files (`total_bytes`) are copied next.
    Checkpointed { seq: u64, total_bytes: u64 },
    /// A file was copied (`done_bytes` of `total_bytes` so far).
    Copied {
        name: &'a str,
        bytes: u64,
        done_bytes: u64,
        total_bytes: u64,
    },
}

/// What [`Checkpoint::finish`] made.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BackupReport {
    /// The backup directory.
    pub dest: PathBuf,
    pub seq: u64,
    pub log_start: u64,
    pub inodes: u64,
    pub index_digest: String,
    /// Files and bytes in `db/`.
    pub files: usize,
    pub bytes: u64,
    /// Records the checkpoint's index lacked and the backup replayed.
    pub replayed: u64,
    pub elapsed_ms: u64,
    /// Where the time went.
    pub phases_ms: Phases,
}

/// The steps of a backup, in ms.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Phases {
    /// RocksDB's checkpoint: its flush, the links and the WAL's copy.
    pub checkpoint: u64,
    /// Opening the checkpoint, replaying what its index lacks, waiting for
    /// the source to commit its end, and flushing it.
    pub catch_up: u64,
    /// The index digest.
    pub digest: u64,
    /// Copying the files with their checksums, and the manifest.
    pub copy: u64,
}

/// What [`restore`] made.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RestoreReport {
    pub data_dir: PathBuf,
    pub seq: u64,
    pub log_start: u64,
    pub inodes: u64,
    pub index_digest: String,
    pub files: usize,
    pub bytes: u64,
    /// Records replayed when the restored database was opened (0: its
    /// index is at the backup's sequence).
    pub replayed: u64,
    pub elapsed_ms: u64,
}

/// The size and CRC-32C of the file at `path`.
fn file_crc(path: &Path) -> std::io::Result<(u64, u32)> {
    let mut r = std::fs::File::open(path)?;
    let mut buf = vec![0u8; COPY_CHUNK];
    let (mut n, mut crc) = (0u64, 0u32);
    loop {
        let k = match r.read(&mut buf) {
            Ok(0) => return Ok((n, crc)),
            Ok(k) => k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        crc = crc32c::crc32c_append(crc, &buf[..k]);
        n += k as u64;
    }
}

/// Writes the new file `path` with `bytes`, synced.
pub fn write_new_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    at(
        path,
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .and_then(|mut f| {
                f.write_all(bytes)?;
                f.sync_all()
            }),
    )
}

fn ms(since: Instant) -> u64 {
    since.elapsed().as_millis() as u64
}

/// The files of the closed database in `dir` to back up, by name, with
/// their sizes: every regular file but RocksDB's lock and its
/// informational logs.
fn db_files(dir: &Path) -> Result<Vec<(String, u64)>> {
    let mut out = Vec::new();
    for e in at(dir, std::fs::read_dir(dir))? {
        let e = at(dir, e)?;
        let name = e.file_name().into_string().map_err(|n| {
            Error::corrupt("checkpoint", format!("a file name is not UTF-8: {n:?}"))
        })?;
        if name == "LOCK" || name == "LOG" || name.starts_with("LOG.old") {
            continue;
        }
        let meta = at(&e.path(), e.metadata())?;
        if !meta.is_file() {
            return Err(Error::corrupt(
                "checkpoint",
                format!("{} is not a regular file", e.path().display()),
            ));
        }
        out.push((name, meta.len()));
    }
    out.sort();
    Ok(out)
}

/// Copies `src` to the new file `dst` and syncs it; returns its size and
/// CRC-32C. With `limit`, stops reading once more than `limit` bytes were
/// read (the size then tells the file is longer).
fn copy_file(src: &Path, dst: &Path, limit: Option<u64>) -> std::io::Result<(u64, u32)> {
    let mut r = std::fs::File::open(src)?;
    let mut w = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(dst)?;
    let mut buf = vec![0u8; COPY_CHUNK];
    let (mut n, mut crc) = (0u64, 0u32);
    loop {
        let k = match r.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        crc = crc32c::crc32c_append(crc, &buf[..k]);
        w.write_all(&buf[..k])?;
        n += k as u64;
        if limit.is_some_and(|l| n > l) {
            break;
        }
    }
    w.sync_all()?;
    Ok((n, crc))
}

/// Makes the directory's entries durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    at(dir, std::fs::File::open(dir).and_then(|f| f.sync_all()))
}

/// An I/O result with the path it is about in its error.
fn at<T>(path: &Path, r: std::io::Result<T>) -> Result<T> {
    r.map_err(|e| {
        Error::Io(std::io::Error::new(
            e.kind(),
            format!("{}: {e}", path.display()),
        ))
    })
}

/// `dir` must not exist, or be an empty directory (`AlreadyExists`
/// otherwise); `what` names it in the error.
pub fn check_new_dir(dir: &Path, what: &str) -> Result<()> {
    match std::fs::read_dir(dir) {
        Ok(mut it) => {
            if it.next().is_some() {
                return Err(Error::AlreadyExists(format!(
                    "{what} {} is not empty",
                    dir.display()
                )));
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => Err(Error::AlreadyExists(
            format!("{what} {} exists and is not a directory", dir.display()),
        )),
        Err(e) => Err(Error::Io(std::io::Error::new(
            e.kind(),
            format!("{what} {}: {e}", dir.display()),
        ))),
    }
}
