//! A replica's database made from its source's checkpoint.
//!
//! Beside the data directory `D` (in its parent, so that renames stay on
//! one file system):
//!
//! - `.D.bootstrap-backup`: the checkpoint fetched from the source (a
//!   backup, docs/FORMAT.md §12; its fetch resumes after a crash, see
//!   [`crate::fetch`]);
//! - `.D.bootstrap-new`: the database restored from it (it appears whole
//!   or not at all: [`treelog::backup::restore`] renames it into place);
//! - `.D.bootstrap-old`: the database it replaces, while they swap.
//!
//! [`install`] renames `D` to `-old`, `-new` to `D`, syncs the parent and
//! removes `-old`. [`recover`], at start, finishes a swap that a crash cut:
//! a `-new` present is always newer than `D` (it is made only when `D`'s
//! position is gone from the source), so it is installed.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use treelog::error::{Error, Result};
use treelog::replication::ReplicaState;

use crate::ReplicaConfig;

/// `.<name>.<suffix>` beside `data`.
fn sibling(data: &Path, suffix: &str) -> Result<PathBuf> {
    let name = data
        .file_name()
        .ok_or_else(|| Error::InvalidArgument(format!("{} names no directory", data.display())))?;
    Ok(parent_of(data).join(format!(".{}.{suffix}", name.to_string_lossy())))
}

fn parent_of(data: &Path) -> PathBuf {
    match data.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    }
}

fn io_at<T>(path: &Path, r: std::io::Result<T>) -> Result<T> {
    r.map_err(|e| {
        Error::Io(std::io::Error::new(
            e.kind(),
            format!("{}: {e}", path.display()),
        ))
    })
}

fn remove_dir_if_present(dir: &Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => io_at(dir, Err(e)),
        _ => Ok(()),
    }
}

/// Whether `data` holds a database; an error when it holds something else.
pub fn has_database(data: &Path) -> Result<bool> {
    if data.join("CURRENT").exists() {
        return Ok(true);
    }
    match std::fs::read_dir(data) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => io_at(data, Err(e)),
        Ok(mut it) => match it.next() {
            None => Ok(false),
            Some(_) => Err(Error::Incompatible {
                path: data.display().to_string(),
                detail: "the replica's data directory is not empty and holds no database: \
                         refusing to replace it"
                    .into(),
            }),
        },
    }
}

/// Finishes a swap a crash interrupted (see the module docs).
pub fn recover(data: &Path) -> Result<()> {
    let new = sibling(data, "bootstrap-new")?;
    if new.exists() {
        tracing::info!(data = %data.display(), "finishing an interrupted bootstrap's swap");
        return install(data);
    }
    remove_dir_if_present(&sibling(data, "bootstrap-old")?)
}

/// What [`prepare`] made.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Prepared {
    pub seq: u64,
    pub bytes: u64,
    pub inodes: u64,
    /// Fetching the checkpoint (the source takes it, then the chunks).
    pub fetch_ms: u64,
    /// Fetching, then restoring it (every file and the digest checked).
    pub elapsed_ms: u64,
}

/// Fetches a checkpoint from the source and restores it beside the data
/// directory (as `-new`), retrying while the source is unreachable.
/// `None` when `stop` was set first.
pub async fn prepare(
    cfg: &ReplicaConfig,
    state: &Arc<ReplicaState>,
    stop: &mut watch::Receiver<bool>,
) -> Result<Option<Prepared>> {
    let data = &cfg.server.data;
    let backup = sibling(data, "bootstrap-backup")?;
    let new = sibling(data, "bootstrap-new")?;
    let mut wait = Duration::from_millis(100);
    loop {
        if *stop.borrow() {
            return Ok(None);
        }
        // Stopping does not wait for the fetch: what it fetched so far is
        // kept, and the next start resumes it.
        let attempted = tokio::select! {
            r = attempt(cfg, &backup, &new) => r,
            _ = stop.changed() => return Ok(None),
        };
        match attempted {
            Ok(p) => {
                state.bootstrapped(
                    p.bytes,
                    Duration::from_millis(p.fetch_ms),
                    Duration::from_millis(p.elapsed_ms),
                );
                tracing::info!(
                    seq = p.seq,
                    bytes = p.bytes,
                    inodes = p.inodes,
                    fetch_ms = p.fetch_ms,
                    elapsed_ms = p.elapsed_ms,
                    "checkpoint fetched and restored"
                );
                return Ok(Some(p));
            }
            // A checkpoint that fails its checks is fetched again; a
            // source that cannot be reached is tried again.
            Err(e) => {
                tracing::warn!(error = %e, source = %cfg.source, "bootstrap failed: trying again");
                if e.kind() == treelog::ErrorKind::Corruption {
                    remove_dir_if_present(&backup)?;
                }
            }
        }
        if crate::pause(wait, stop).await {
            return Ok(None);
        }
        wait = (wait * 2).min(Duration::from_secs(5));
    }
}

async fn attempt(cfg: &ReplicaConfig, backup: &Path, new: &Path) -> Result<Prepared> {
    let started = Instant::now();
    // A complete backup left here belongs to an earlier bootstrap: its
    // position may be gone from the source by now.
    if backup.join(treelog::backup::MANIFEST_FILE).exists() {
        remove_dir_if_present(backup)?;
    }
    let client = treelog_client::Client::connect_to(&cfg.source, cfg.client_options()).await?;
    let fetched =
        crate::fetch::fetch(&client, backup, cfg.fetch_chunk, |m| tracing::info!("{m}")).await?;
    drop(client);
    remove_dir_if_present(new)?;
    remove_stale_staging(new);
    let (b, n) = (backup.to_owned(), new.to_owned());
    let restored =
        tokio::task::spawn_blocking(move || treelog::backup::restore(&b, &n, &mut |_| {}))
            .await
            .map_err(|e| Error::Protocol(format!("restore task: {e}")))??;
    remove_dir_if_present(backup)?;
    Ok(Prepared {
        seq: restored.seq,
        bytes: fetched.bytes,
        inodes: restored.inodes,
        fetch_ms: fetched.elapsed_ms,
        elapsed_ms: started.elapsed().as_millis() as u64,
    })
}

/// Removes the staging directories of restores into `new` that a crash
/// left behind (`.<name>.restoring-*` beside it).
fn remove_stale_staging(new: &Path) {
    let (Some(name), Ok(entries)) = (new.file_name(), std::fs::read_dir(parent_of(new))) else {
        return;
    };
    let prefix = format!(".{}.restoring-", name.to_string_lossy());
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Puts the restored `-new` database in the data directory's place
/// (durably), and removes the one it replaces.
pub fn install(data: &Path) -> Result<()> {
    let new = sibling(data, "bootstrap-new")?;
    let old = sibling(data, "bootstrap-old")?;
    let parent = parent_of(data);
    if data.exists() {
        if old.exists() {
            // From a swap cut after its first rename: `data` is `-new`'s
            // predecessor or an empty directory; `-old` can go.
            remove_dir_if_present(&old)?;
        }
        io_at(data, std::fs::rename(data, &old))?;
    }
    treelog::failpoint::crash_point("bootstrap::between_renames");
    io_at(&new, std::fs::rename(&new, data))?;
    treelog::backup::sync_dir(&parent)?;
    remove_dir_if_present(&old)
}
