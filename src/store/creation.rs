//! Creating a database all-or-nothing.

use super::*;

/// Iterator over decoded log records.
/// The file that marks a database under creation (see [`CreationMarker`]).
pub(super) const CREATING_MARKER: &str = "TREELOG-CREATING";

/// Makes a database's creation all-or-nothing. Creating is not atomic in
/// RocksDB (its files, then the column families, then treelog's empty
/// namespace and format version), and a directory with only part of that
/// would be refused by every later open as "not a treelog database". So the
/// marker is made durable first, in the empty directory, and removed only
/// once the empty namespace is: an open that finds it knows the creation
/// was interrupted (it never returned, so nothing was acknowledged) and
/// starts it over, with whatever the creation had written removed.
///
/// The marker is held with an exclusive `flock` while its creation runs, so
/// that an open finding a live creation's marker refuses instead.
pub(super) struct CreationMarker {
    pub(super) dir: PathBuf,
    pub(super) file: std::fs::File,
}

impl CreationMarker {
    /// Marks the empty directory `dir` (synced, with the directory).
    pub(super) fn new(dir: &Path) -> Result<CreationMarker> {
        let file = std::fs::OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(dir.join(CREATING_MARKER))?;
        let m = CreationMarker::locked(dir, file)?;
        m.file.sync_all()?;
        sync_dir(dir)?;
        Ok(m)
    }

    /// Takes over the marker of an interrupted creation and empties `dir`
    /// of what it had written.
    pub(super) fn resume(dir: &Path) -> Result<CreationMarker> {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join(CREATING_MARKER))?;
        let m = CreationMarker::locked(dir, file)?;
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if entry.file_name() == CREATING_MARKER {
                continue;
            }
            if entry.file_type()?.is_dir() {
                return Err(incompatible(
                    dir,
                    format!(
                        "the creation of a database here was interrupted, but {} is a directory \
                         that a creation does not make: remove it, or the marker {CREATING_MARKER}",
                        entry.path().display()
                    ),
                ));
            }
            std::fs::remove_file(entry.path())?;
        }
        sync_dir(dir)?;
        Ok(m)
    }

    pub(super) fn locked(dir: &Path, file: std::fs::File) -> Result<CreationMarker> {
        use std::os::fd::AsRawFd;
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Err(incompatible(
                dir,
                "another process is creating a database here",
            ));
        }
        Ok(CreationMarker {
            dir: dir.to_owned(),
            file,
        })
    }

    /// The creation is durable: remove the marker (synced).
    pub(super) fn finish(self) -> Result<()> {
        std::fs::remove_file(self.dir.join(CREATING_MARKER))?;
        sync_dir(&self.dir)?;
        Ok(())
    }
}

/// Makes the directory's entries (created, renamed, removed files) durable.
/// A new namespace id: 128 bits of SHA-256 over the clock, the process,
/// the path and the address of a stack value, in hex (unique enough to
/// tell namespaces apart; nothing depends on it being secret).
pub(super) fn new_namespace_id(path: &Path) -> String {
    use sha2::{Digest, Sha256};
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let here = 0u8;
    let mut h = Sha256::new();
    h.update(nanos.to_le_bytes());
    h.update(std::process::id().to_le_bytes());
    h.update((&here as *const u8 as usize).to_le_bytes());
    h.update(path.as_os_str().as_encoded_bytes());
    hex::encode(&h.finalize()[..16])
}

pub(super) fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}
