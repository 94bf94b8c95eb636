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
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Manifest {
    /// [`BACKUP_FORMAT`].
    pub backup_format: u32,
    /// `treelog <version>` of the build that took it.
    pub created_by: String,
    /// When it was taken, ms since the epoch.
    pub created_ms: u64,
    /// `meta.format_version` of the database in `db/`.
    pub format_version: u64,
    /// The committed sequence the backup holds: the last record of its
    /// log, and its index's `applied_seq`.
    pub seq: u64,
    /// `meta.log_start` of the database: its log holds `log_start..=seq`.
    pub log_start: u64,
    /// `meta.log_bytes`.
    pub log_bytes: u64,
    /// Inodes in the index, the root included.
    pub inodes: u64,
    /// The index digest of `admin verify` (SHA-256 of `inodes` and
    /// `edges`) at `seq`.
    pub index_digest: String,
    /// The owner dictionary, id 1 first.
    pub owners: Vec<String>,
    /// The group dictionary, id 1 first.
    pub groups: Vec<String>,
    /// Every file of `db/`, by name.
    pub files: Vec<BackupFile>,
    /// The database of a Raft cluster's node: the log id of the entry at
    /// `seq` and the last membership applied (a Raft snapshot's meta).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raft: Option<RaftManifest>,
}

/// A Raft snapshot's meta in a backup's manifest.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RaftManifest {
    /// `[term, node, index]` of the entry at `seq` (none: nothing
    /// applied).
    pub applied: Option<[u64; 3]>,
    /// The last membership applied: its entry's `[term, node, index]` and
    /// its bytes, hex.
    pub membership: Option<([u64; 3], String)>,
}

impl RaftManifest {
    fn of(store: &Store) -> Result<Option<RaftManifest>> {
        if store.raft_node_id()?.is_none() {
            return Ok(None);
        }
        let id = |i: &format::meta::RaftLogId| [i.term, i.node, i.index];
        let st = crate::raft::AppliedState::load(store)?;
        let applied = crate::raft::applied_log_id(store)?;
        Ok(Some(RaftManifest {
            applied: applied.as_ref().map(id),
            membership: st.membership.map(|(i, m)| (id(&i), hex::encode(m))),
        }))
    }
}

/// One file of a backup's `db/` directory.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BackupFile {
    /// Its name in `db/` (no directories).
    pub name: String,
    pub size: u64,
    /// CRC-32C (Castagnoli) of its bytes, 8 lowercase hex digits.
    pub crc32c: String,
}

impl Manifest {
    /// The manifest file's bytes: the JSON body, a newline, then the
    /// trailer line `sha256 <hex of the body's SHA-256>` and a newline.
    pub fn encode(&self) -> Result<Vec<u8>> {
        let mut body = serde_json::to_vec_pretty(self)
            .map_err(|e| Error::InvalidArgument(format!("backup manifest: {e}")))?;
        body.push(b'\n');
        let sum = hex::encode(Sha256::digest(&body));
        body.extend_from_slice(format!("{TRAILER_PREFIX}{sum}\n").as_bytes());
        Ok(body)
    }

    /// Decodes and checks a manifest file's bytes; `file` names it in
    /// errors.
    pub fn decode(bytes: &[u8], file: &Path) -> Result<Manifest> {
        let bad = |detail: String| backup_corrupt(file, detail);
        let text = bytes
            .strip_suffix(b"\n")
            .ok_or_else(|| bad("it does not end with a newline (truncated?)".into()))?;
        let cut = text
            .iter()
            .rposition(|&b| b == b'\n')
            .ok_or_else(|| bad("it has no checksum line (truncated?)".into()))?;
        let (body, trailer) = (&bytes[..=cut], &text[cut + 1..]);
        let want = std::str::from_utf8(trailer)
            .ok()
            .and_then(|t| t.strip_prefix(TRAILER_PREFIX))
            .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| {
                bad("its last line is not `sha256 <64 hex digits>` (truncated?)".into())
            })?;
        let got = hex::encode(Sha256::digest(body));
        if !got.eq_ignore_ascii_case(want) {
            return Err(bad(format!(
                "its SHA-256 is {got} but its checksum line says {want}: the manifest is damaged"
            )));
        }
        #[derive(serde::Deserialize)]
        struct Version {
            backup_format: u32,
        }
        let v: Version =
            serde_json::from_slice(body).map_err(|e| bad(format!("no backup_format: {e}")))?;
        if v.backup_format != BACKUP_FORMAT {
            return Err(Error::Incompatible {
                path: file.display().to_string(),
                detail: format!(
                    "backup format {} is not supported by this build (supported: [{BACKUP_FORMAT}])",
                    v.backup_format
                ),
            });
        }
        let m: Manifest =
            serde_json::from_slice(body).map_err(|e| bad(format!("does not decode: {e}")))?;
        let mut names = std::collections::BTreeSet::new();
        for f in &m.files {
            if !valid_file_name(&f.name) {
                return Err(bad(format!("file name {:?} is not a plain name", f.name)));
            }
            if !names.insert(f.name.as_str()) {
                return Err(bad(format!("file {:?} is listed twice", f.name)));
            }
            if parse_crc(&f.crc32c).is_none() {
                return Err(bad(format!(
                    "file {:?}: crc32c {:?} is not 8 hex digits",
                    f.name, f.crc32c
                )));
            }
        }
        if !names.contains("CURRENT") {
            return Err(bad("it lists no CURRENT file".into()));
        }
        Ok(m)
    }
}

impl BackupFile {
    /// The file's CRC-32C (`decode` checked that it parses).
    pub fn crc(&self) -> u32 {
        parse_crc(&self.crc32c).unwrap_or_default()
    }
}

fn valid_file_name(n: &str) -> bool {
    !n.is_empty() && n != "." && n != ".." && !n.contains(['/', '\\', '\0'])
}

fn crc_hex(crc: u32) -> String {
    format!("{crc:08x}")
}

fn parse_crc(s: &str) -> Option<u32> {
    (s.len() == 8)
        .then(|| u32::from_str_radix(s, 16).ok())
        .flatten()
}

fn backup_corrupt(file: &Path, detail: impl std::fmt::Display) -> Error {
    Error::corrupt("backup", format!("{}: {detail}", file.display()))
}

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

/// A RocksDB checkpoint of a store, in its data directory; removed when
/// dropped.
pub struct Checkpoint {
    dir: PathBuf,
    /// Where the backup goes (none for one to be served).
    dest: Option<PathBuf>,
    started: Instant,
    checkpoint_ms: u64,
}

impl Drop for Checkpoint {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_dir_all(tmp_of(&self.dir));
    }
}

/// RocksDB makes a checkpoint in `<dir>.tmp` and renames it.
fn tmp_of(dir: &Path) -> PathBuf {
    let mut s = dir.as_os_str().to_owned();
    s.push(".tmp");
    PathBuf::from(s)
}

static CHECKPOINTS: AtomicU64 = AtomicU64::new(0);

/// Takes a checkpoint of `store` as it is now, for a backup at `dest`
/// (checked first, see [`check_dest`]): RocksDB flushes every column
/// family (atomically: the index with its `applied_seq`), then hard-links
/// the table files and copies the write-ahead log, into a directory inside
/// the data directory (the same file system, so the links work). Writes go
/// on meanwhile; the log records they append after the flush are in the
/// copied write-ahead log, their index changes are not (the copy is caught
/// up by [`Checkpoint::finish`]). Log retention must not run meanwhile (see
/// `Treelog::backup`).
pub fn take_checkpoint(store: &Store, dest: &Path) -> Result<Checkpoint> {
    check_dest(store, dest)?;
    checkpoint(store, Some(dest))
}

/// [`take_checkpoint`] for a backup to be served over the protocol
/// ([`Checkpoint::serve`]).
pub fn take_checkpoint_to_serve(store: &Store) -> Result<Checkpoint> {
    checkpoint(store, None)
}

/// A backup's destination must not exist (or be an empty directory), and
/// must not be inside the data directory.
pub fn check_dest(store: &Store, dest: &Path) -> Result<()> {
    check_new_dir(dest, "backup destination")?;
    if let (Ok(data), Some(d)) = (store.path().canonicalize(), resolved(dest)) {
        if d.starts_with(&data) {
            return Err(Error::InvalidArgument(format!(
                "the backup destination {} is inside the data directory {}",
                dest.display(),
                store.path().display()
            )));
        }
    }
    Ok(())
}

fn checkpoint(store: &Store, dest: Option<&Path>) -> Result<Checkpoint> {
    let started = Instant::now();
    remove_stale_checkpoints(store.path());
    let dir = store.path().join(format!(
        "{CHECKPOINT_PREFIX}{}-{}",
        std::process::id(),
        CHECKPOINTS.fetch_add(1, Ordering::Relaxed)
    ));
    // Left by an earlier run of this process id (a crash): ours now.
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(tmp_of(&dir));
    let mut cp = Checkpoint {
        dir,
        dest: dest.map(Path::to_owned),
        started,
        checkpoint_ms: 0,
    };
    store.checkpoint_to(&cp.dir)?;
    crate::failpoint::crash_point("backup::after_checkpoint");
    cp.checkpoint_ms = ms(started);
    Ok(cp)
}

/// `path` with its nearest existing ancestor resolved (symbolic links,
/// `..`) and the rest appended.
fn resolved(path: &Path) -> Option<PathBuf> {
    let abs = std::path::absolute(path).ok()?;
    let mut rest = Vec::new();
    let mut at = abs.as_path();
    loop {
        if let Ok(c) = at.canonicalize() {
            return Some(rest.iter().rev().fold(c, |p, n| p.join(n)));
        }
        rest.push(at.file_name()?.to_owned());
        at = at.parent()?;
    }
}

/// Removes the checkpoints that other processes left in `data` (they
/// crashed during a backup: the database is open here, so no other
/// process is using it).
fn remove_stale_checkpoints(data: &Path) {
    let Ok(entries) = std::fs::read_dir(data) else {
        return;
    };
    let me = std::process::id().to_string();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name
            .to_str()
            .and_then(|n| n.strip_prefix(CHECKPOINT_PREFIX))
        else {
            continue;
        };
        if rest.split('-').next() != Some(me.as_str()) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

impl Checkpoint {
    /// Opens the checkpoint, replays the records its index lacks, calls
    /// `committed(seq)` with its last sequence (which returns once the
    /// source has committed it: the checkpoint's copy of the write-ahead
    /// log may end with records not yet synced), flushes it, and makes the
    /// manifest (without its files) from it; the database is closed when
    /// this returns, its files no longer change.
    fn catch_up(
        &self,
        committed: &dyn Fn(u64) -> Result<()>,
        phases: &mut Phases,
    ) -> Result<(Manifest, u64)> {
        let so = StoreOptions {
            create_if_missing: false,
            block_cache_bytes: 8 << 20,
            ..StoreOptions::default()
        };
        let t = Instant::now();
        let staged = Store::open(&self.dir, &so)?;
        let replayed = crate::recovery::replay(&staged, |_, _| {})?;
        let raft = staged.raft_node_id()?.is_some();
        if raft {
            // A Raft node's log may end with entries not yet committed,
            // which a new leader may truncate: they are not the backup's.
            // (And its index may be ahead of its log: a node that installed
            // a snapshot holds no entry before it.)
            staged.raft_truncate_from(staged.applied_seq()? + 1)?;
        }
        let seq = match raft {
            true => staged.applied_seq()?,
            false => staged.last_log_seq()?,
        };
        if staged.applied_seq()? != seq {
            return Err(Error::corrupt(
                "checkpoint",
                format!(
                    "its index is at {} after the replay, its log ends at {seq}",
                    staged.applied_seq()?
                ),
            ));
        }
        committed(seq)?;
        staged.flush()?;
        phases.catch_up = ms(t);
        let t = Instant::now();
        let summary = crate::admin::index_summary(&staged)?;
        phases.digest = ms(t);
        let dict = |kind| crate::admin::dictionary(&staged, kind);
        let manifest = Manifest {
            backup_format: BACKUP_FORMAT,
            created_by: format!("treelog {}", env!("CARGO_PKG_VERSION")),
            created_ms: crate::clock::now_ms(),
            format_version: staged.format_version()?,
            seq,
            log_start: staged.log_start()?,
            log_bytes: staged.log_bytes()?,
            inodes: summary.inodes,
            index_digest: summary.digest,
            owners: dict(DictKind::Owner)?,
            groups: dict(DictKind::Group)?,
            files: Vec::new(),
            raft: RaftManifest::of(&staged)?,
        };
        Ok((manifest, replayed))
    }

    /// Makes the backup at the destination it was taken for from this
    /// checkpoint: catches it up (see [`Checkpoint::catch_up`]; `committed`
    /// waits for the source to commit the checkpoint's last sequence), then
    /// copies its files into the backup with their checksums, the manifest
    /// last.
    pub fn finish(
        self,
        committed: &dyn Fn(u64) -> Result<()>,
        progress: &mut dyn FnMut(Progress<'_>),
    ) -> Result<BackupReport> {
        let dest = self.dest.as_ref().ok_or_else(|| {
            Error::InvalidArgument("this checkpoint was taken to be served, not copied".into())
        })?;
        check_new_dir(dest, "backup destination")?;
        let mut phases = Phases {
            checkpoint: self.checkpoint_ms,
            ..Phases::default()
        };
        let (mut manifest, replayed) = self.catch_up(committed, &mut phases)?;
        let sources = db_files(&self.dir)?;
        let total_bytes = sources.iter().map(|(_, size)| size).sum();
        progress(Progress::Checkpointed {
            seq: manifest.seq,
            total_bytes,
        });

        let t = Instant::now();
        let staging = Staging::beside(dest, "partial")?;
        let db = staging.dir.join(DB_DIR);
        at(&db, std::fs::create_dir(&db))?;
        let mut done_bytes = 0;
        for (name, _) in &sources {
            let (size, crc) = at(
                &db.join(name),
                copy_file(&self.dir.join(name), &db.join(name), None),
            )?;
            done_bytes += size;
            manifest.files.push(BackupFile {
                name: name.clone(),
                size,
                crc32c: crc_hex(crc),
            });
            progress(Progress::Copied {
                name,
                bytes: size,
                done_bytes,
                total_bytes,
            });
        }
        sync_dir(&db)?;
        write_new_synced(&staging.dir.join(MANIFEST_FILE), &manifest.encode()?)?;
        crate::failpoint::crash_point("backup::before_install");
        staging.install(dest)?;
        phases.copy = ms(t);
        Ok(BackupReport {
            dest: dest.clone(),
            seq: manifest.seq,
            log_start: manifest.log_start,
            inodes: manifest.inodes,
            index_digest: manifest.index_digest,
            files: manifest.files.len(),
            bytes: done_bytes,
            replayed,
            elapsed_ms: ms(self.started),
            phases_ms: phases,
        })
    }

    /// Makes a backup to be served in chunks (over the protocol) from this
    /// checkpoint: catches it up (see [`Checkpoint::finish`]) and reads
    /// each file once for its CRC-32C. The files stay where they are
    /// (hard links in the data directory) until the [`ServedBackup`] is
    /// dropped.
    pub fn serve(self, committed: &dyn Fn(u64) -> Result<()>) -> Result<ServedBackup> {
        let mut phases = Phases {
            checkpoint: self.checkpoint_ms,
            ..Phases::default()
        };
        let (mut manifest, _) = self.catch_up(committed, &mut phases)?;
        for (name, _) in db_files(&self.dir)? {
            let path = self.dir.join(&name);
            let (size, crc) = at(&path, file_crc(&path))?;
            manifest.files.push(BackupFile {
                name,
                size,
                crc32c: crc_hex(crc),
            });
        }
        let manifest_bytes = manifest.encode()?;
        Ok(ServedBackup {
            checkpoint: self,
            manifest,
            manifest_bytes,
        })
    }
}

/// A caught-up checkpoint whose files are read in chunks, for a backup
/// over the protocol (docs/PROTOCOL.md): the client gets the manifest
/// first, then asks for each file's bytes.
pub struct ServedBackup {
    checkpoint: Checkpoint,
    manifest: Manifest,
    manifest_bytes: Vec<u8>,
}

impl ServedBackup {
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The manifest file's bytes (its checksum line included).
    pub fn manifest_bytes(&self) -> &[u8] {
        &self.manifest_bytes
    }

    /// Up to `len` bytes of file `name` (of the manifest) from `offset`,
    /// fewer only at the file's end, and their CRC-32C.
    pub fn read_chunk(&self, name: &str, offset: u64, len: usize) -> Result<(Vec<u8>, u32)> {
        use std::os::unix::fs::FileExt;
        let f = self
            .manifest
            .files
            .iter()
            .find(|f| f.name == name)
            .ok_or_else(|| Error::NotFound(format!("no file {name:?} in this backup")))?;
        if offset > f.size {
            return Err(Error::InvalidArgument(format!(
                "offset {offset} is past the end of {name} ({} bytes)",
                f.size
            )));
        }
        let len = len.min((f.size - offset) as usize);
        let path = self.checkpoint.dir.join(name);
        let file = at(&path, std::fs::File::open(&path))?;
        let mut buf = vec![0u8; len];
        at(&path, file.read_exact_at(&mut buf, offset))?;
        let crc = crc32c::crc32c(&buf);
        if crate::failpoint::injected("backup::bad_chunk") && !buf.is_empty() {
            // Damaged after its checksum was taken, as on the way.
            buf[0] ^= 1;
        }
        Ok((buf, crc))
    }
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

/// A backup of the closed database at `data` (offline: nothing else
/// writes, so its last sequence is committed).
pub fn backup_path(
    data: &Path,
    dest: &Path,
    so: &StoreOptions,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<BackupReport> {
    let store = Store::open(
        data,
        &StoreOptions {
            create_if_missing: false,
            ..so.clone()
        },
    )?;
    crate::recovery::replay(&store, |_, _| {})?;
    let cp = take_checkpoint(&store, dest)?;
    cp.finish(&|_| Ok(()), progress)
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

/// A directory beside `target`, filled and then renamed to it (removed if
/// that never happens), so that `target` appears complete or not at all.
struct Staging {
    dir: PathBuf,
    parent: PathBuf,
    installed: bool,
}

impl Staging {
    fn beside(target: &Path, what: &str) -> Result<Staging> {
        let name = target.file_name().ok_or_else(|| {
            Error::InvalidArgument(format!("{} names no directory", target.display()))
        })?;
        let parent = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
            _ => PathBuf::from("."),
        };
        at(&parent, std::fs::create_dir_all(&parent))?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir = parent.join(format!(
            ".{}.{what}-{}-{nanos}",
            name.to_string_lossy(),
            std::process::id()
        ));
        at(&dir, std::fs::create_dir(&dir))?;
        Ok(Staging {
            dir,
            parent,
            installed: false,
        })
    }

    /// Syncs the staging directory and renames it to `target` (which may
    /// be an empty directory), durably.
    fn install(mut self, target: &Path) -> Result<()> {
        sync_dir(&self.dir)?;
        std::fs::rename(&self.dir, target).map_err(|e| {
            Error::Io(std::io::Error::new(
                e.kind(),
                format!(
                    "cannot rename {} to {}: {e} (it must be a new or empty directory \
                     on the same file system as its parent)",
                    self.dir.display(),
                    target.display()
                ),
            ))
        })?;
        self.installed = true;
        sync_dir(&self.parent)
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.installed {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Reads and checks the manifest of the backup at `src`.
pub fn read_manifest(src: &Path) -> Result<Manifest> {
    let file = src.join(MANIFEST_FILE);
    let bytes = match std::fs::read(&file) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let detail = if src.is_dir() {
                "is missing: this is not a complete treelog backup (the manifest is written last)"
            } else {
                "is missing: there is no backup directory here"
            };
            return Err(backup_corrupt(&file, detail));
        }
        Err(e) => return Err(backup_corrupt(&file, e)),
    };
    Manifest::decode(&bytes, &file)
}

/// Makes a new data directory `data` (which must not exist, or be empty)
/// from the backup at `src`. Every file is checked against the manifest
/// (size and CRC-32C) as it is copied, before the database is opened;
/// the database is then opened, and its sequence, format version and index
/// digest must be the manifest's. Nothing appears at `data` unless all of
/// it passed. Errors name the file at fault: `Corruption` for a missing,
/// truncated or damaged file or manifest, `Incompatible` for a backup
/// format or database format this build does not read.
pub fn restore(
    src: &Path,
    data: &Path,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<RestoreReport> {
    let started = Instant::now();
    let manifest = read_manifest(src)?;
    if !format::SUPPORTED_FORMAT_VERSIONS.contains(&manifest.format_version) {
        return Err(Error::Incompatible {
            path: src.display().to_string(),
            detail: format!(
                "the backup holds a database of format version {}, not supported by this build \
                 (supported: {:?}){}",
                manifest.format_version,
                format::SUPPORTED_FORMAT_VERSIONS,
                if format::MIGRATABLE_FORMAT_VERSIONS.contains(&manifest.format_version) {
                    "; restore it with a build of that format, then `treelog admin migrate` it"
                } else {
                    ""
                }
            ),
        });
    }
    check_new_dir(data, "data directory")?;
    let staging = Staging::beside(data, "restoring")?;
    let total_bytes = manifest.files.iter().map(|f| f.size).sum();
    let mut done_bytes = 0;
    for f in &manifest.files {
        let from = src.join(DB_DIR).join(&f.name);
        let (size, crc) = match copy_file(&from, &staging.dir.join(&f.name), Some(f.size)) {
            Ok(r) => r,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(backup_corrupt(&from, "is missing (the manifest lists it)"));
            }
            Err(e) => return Err(backup_corrupt(&from, e)),
        };
        if size != f.size {
            return Err(backup_corrupt(
                &from,
                format!(
                    "{} bytes{}, the manifest says {} ({})",
                    size,
                    if size > f.size { " or more" } else { "" },
                    f.size,
                    if size < f.size {
                        "truncated"
                    } else {
                        "longer than it was"
                    }
                ),
            ));
        }
        if crc != f.crc() {
            return Err(backup_corrupt(
                &from,
                format!(
                    "its CRC-32C is {}, the manifest says {}: the file is damaged",
                    crc_hex(crc),
                    f.crc32c
                ),
            ));
        }
        done_bytes += size;
        progress(Progress::Copied {
            name: &f.name,
            bytes: size,
            done_bytes,
            total_bytes,
        });
    }
    sync_dir(&staging.dir)?;
    let (replayed, summary, log_start) = {
        let opened = |e: Error| -> Error {
            // Say where the database came from; keep the kind.
            match e {
                Error::Corruption { detail, .. } => backup_corrupt(
                    src,
                    format!("the restored database does not open: {detail}"),
                ),
                e => e,
            }
        };
        let so = StoreOptions {
            create_if_missing: false,
            ..StoreOptions::default()
        };
        let store = Store::open(&staging.dir, &so).map_err(opened)?;
        let replayed = crate::recovery::replay(&store, |_, _| {}).map_err(opened)?;
        let mismatch = |what: &str, got: String, want: String| {
            backup_corrupt(
                &src.join(MANIFEST_FILE),
                format!("the restored database's {what} is {got}, the manifest says {want}"),
            )
        };
        let (last, applied) = (store.last_log_seq()?, store.applied_seq()?);
        // A Raft node's index may be ahead of its log (see `catch_up`).
        let raft_ahead = manifest.raft.is_some() && last < manifest.seq;
        if (last != manifest.seq && !raft_ahead) || applied != manifest.seq {
            return Err(mismatch(
                "sequence (log end, applied)",
                format!("({last}, {applied})"),
                format!("({0}, {0})", manifest.seq),
            ));
        }
        let version = store.format_version()?;
        if version != manifest.format_version {
            return Err(mismatch(
                "format version",
                version.to_string(),
                manifest.format_version.to_string(),
            ));
        }
        let summary = crate::admin::index_summary(&store)?;
        if summary.digest != manifest.index_digest {
            return Err(mismatch(
                "index digest",
                summary.digest,
                manifest.index_digest.clone(),
            ));
        }
        let log_start = store.log_start()?;
        // A backup of a cluster's node restores as a single node's
        // namespace (which `cluster init` makes a new cluster's first
        // node); a Raft snapshot's install uses its index only.
        store.raft_forget_node()?;
        store.flush()?;
        (replayed, summary, log_start)
    };
    crate::failpoint::crash_point("restore::before_install");
    staging.install(data)?;
    Ok(RestoreReport {
        data_dir: data.to_owned(),
        seq: manifest.seq,
        log_start,
        inodes: summary.inodes,
        index_digest: summary.digest,
        files: manifest.files.len(),
        bytes: done_bytes,
        replayed,
        elapsed_ms: ms(started),
    })
}
