//! Restoring a backup: every file checked while it is copied, the copy
//! opened and checked, then renamed into place.

use super::*;

/// A directory beside `target`, filled and then renamed to it (removed if
/// that never happens), so that `target` appears complete or not at all.
pub(super) struct Staging {
    pub(super) dir: PathBuf,
    pub(super) parent: PathBuf,
    pub(super) installed: bool,
}

impl Staging {
    pub(super) fn beside(target: &Path, what: &str) -> Result<Staging> {
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
    pub(super) fn install(mut self, target: &Path) -> Result<()> {
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
        let replayed = crate::ops::recovery::replay(&store, |_, _| {}).map_err(opened)?;
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
        let summary = crate::ops::admin::index_summary(&store)?;
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
        store.delete_meta_keys(&consensus::NODE_KEYS)?;
        store.flush()?;
        (replayed, summary, log_start)
    };
    crate::sys::failpoint::crash_point("restore::before_install");
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
