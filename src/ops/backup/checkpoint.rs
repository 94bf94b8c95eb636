//! Taking a backup: a checkpoint of the live database, caught up and
//! copied with checksums, or served in chunks.

use super::*;

/// A RocksDB checkpoint of a store, in its data directory; removed when
/// dropped.
pub struct Checkpoint {
    pub(super) dir: PathBuf,
    /// Where the backup goes (none for one to be served).
    pub(super) dest: Option<PathBuf>,
    pub(super) started: Instant,
    pub(super) checkpoint_ms: u64,
}

impl Drop for Checkpoint {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_dir_all(tmp_of(&self.dir));
    }
}

/// RocksDB makes a checkpoint in `<dir>.tmp` and renames it.
pub(super) fn tmp_of(dir: &Path) -> PathBuf {
    let mut s = dir.as_os_str().to_owned();
    s.push(".tmp");
    PathBuf::from(s)
}

pub(super) static CHECKPOINTS: AtomicU64 = AtomicU64::new(0);

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

pub(super) fn checkpoint(store: &Store, dest: Option<&Path>) -> Result<Checkpoint> {
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
    crate::sys::failpoint::crash_point("backup::after_checkpoint");
    cp.checkpoint_ms = ms(started);
    Ok(cp)
}

/// `path` with its nearest existing ancestor resolved (symbolic links,
/// `..`) and the rest appended.
pub(super) fn resolved(path: &Path) -> Option<PathBuf> {
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
pub(super) fn remove_stale_checkpoints(data: &Path) {
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
    pub(super) fn catch_up(
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
        let replayed = crate::ops::recovery::replay(&staged, |_, _| {})?;
        let raft = consensus::node_id(&staged)?.is_some();
        if raft {
            // A Raft node's log may end with entries not yet committed,
            // which a new leader may truncate: they are not the backup's.
            // (And its index may be ahead of its log: a node that installed
            // a snapshot holds no entry before it.)
            staged.truncate_log_from(staged.applied_seq()? + 1)?;
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
        let summary = crate::ops::admin::index_summary(&staged)?;
        phases.digest = ms(t);
        let dict = |kind| crate::ops::admin::dictionary(&staged, kind);
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
        crate::sys::failpoint::crash_point("backup::before_install");
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
    pub(super) checkpoint: Checkpoint,
    pub(super) manifest: Manifest,
    pub(super) manifest_bytes: Vec<u8>,
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
        if crate::sys::failpoint::injected("backup::bad_chunk") && !buf.is_empty() {
            // Damaged after its checksum was taken, as on the way.
            buf[0] ^= 1;
        }
        Ok((buf, crc))
    }
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
    crate::ops::recovery::replay(&store, |_, _| {})?;
    let cp = take_checkpoint(&store, dest)?;
    cp.finish(&|_| Ok(()), progress)
}
