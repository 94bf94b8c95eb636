//! Backups served over the RPC port (`BackupBegin`, `BackupChunk`,
//! `BackupEnd`; docs/PROTOCOL.md §13): each is a caught-up checkpoint in
//! the data directory ([`treelog::backup::ServedBackup`]) that clients
//! fetch in chunks, each with its CRC-32C. A backup stays until its client
//! ends it, or until it has gone unused for [`IDLE`] (so that a client
//! that lost its connection can resume it), or the server stops.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use treelog::backup::ServedBackup;
use treelog::{Error, Result, Treelog};
use treelog_proto::protocol::{ResponseBody, MAX_BACKUP_CHUNK};

/// A backup unused this long is released.
pub(crate) const IDLE: Duration = Duration::from_secs(600);
/// Backups held (or being taken) at once: each holds hard links to the
/// table files it was taken with, which then outlive their compaction.
pub(crate) const MAX_BACKUPS: usize = 2;

#[derive(Default)]
pub(crate) struct Backups {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    held: HashMap<u64, Held>,
    /// Being taken (counted against [`MAX_BACKUPS`]).
    taking: usize,
    /// The last id given: ids also differ across restarts (they start at
    /// the time), so that a client resuming after a restart is told its
    /// backup is gone rather than handed another.
    last_id: u64,
}

struct Held {
    served: Arc<ServedBackup>,
    used: Instant,
}

impl Backups {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `BackupBegin`: a new backup, or the one `resume` names.
    pub(crate) async fn begin(
        &self,
        t: &Arc<Treelog>,
        resume: Option<u64>,
    ) -> Result<ResponseBody> {
        let released = self.expire();
        drop_off_runtime(released);
        if let Some(id) = resume {
            let mut g = self.lock();
            let h = g.held.get_mut(&id).ok_or_else(|| gone(id))?;
            h.used = Instant::now();
            return Ok(ResponseBody::Backup {
                id,
                manifest: h.served.manifest_bytes().to_vec(),
            });
        }
        {
            let mut g = self.lock();
            if g.held.len() + g.taking >= MAX_BACKUPS {
                return Err(Error::Busy(format!(
                    "{MAX_BACKUPS} backups are held on the server already; end one (or let it \
                     expire after {} s unused) first",
                    IDLE.as_secs()
                )));
            }
            g.taking += 1;
        }
        let t = t.clone();
        let taken = tokio::task::spawn_blocking(move || t.serve_backup())
            .await
            .map_err(|e| Error::Protocol(format!("backup task: {e}")));
        let mut g = self.lock();
        g.taking -= 1;
        let served = Arc::new(taken??);
        let id = (g.last_id + 1).max(now_ms() << 10);
        g.last_id = id;
        let manifest = served.manifest_bytes().to_vec();
        g.held.insert(
            id,
            Held {
                served,
                used: Instant::now(),
            },
        );
        tracing::info!(
            id,
            seq = g.held[&id].served.manifest().seq,
            "backup taken to be served"
        );
        Ok(ResponseBody::Backup { id, manifest })
    }

    /// `BackupChunk`.
    pub(crate) async fn chunk(
        &self,
        id: u64,
        file: String,
        offset: u64,
        len: u32,
    ) -> Result<ResponseBody> {
        let served = {
            let mut g = self.lock();
            let h = g.held.get_mut(&id).ok_or_else(|| gone(id))?;
            h.used = Instant::now();
            h.served.clone()
        };
        let len = len.clamp(1, MAX_BACKUP_CHUNK) as usize;
        tokio::task::spawn_blocking(move || {
            served
                .read_chunk(&file, offset, len)
                .map(|(data, crc32c)| ResponseBody::Chunk {
                    offset,
                    data,
                    crc32c,
                })
        })
        .await
        .map_err(|e| Error::Protocol(format!("backup task: {e}")))?
    }

    /// `BackupEnd`.
    pub(crate) async fn end(&self, id: u64) -> Result<ResponseBody> {
        let h = self.lock().held.remove(&id).ok_or_else(|| gone(id))?;
        drop_off_runtime(vec![h]);
        Ok(ResponseBody::Done)
    }

    /// Takes out the backups unused for [`IDLE`].
    fn expire(&self) -> Vec<Held> {
        let mut g = self.lock();
        let old: Vec<u64> = g
            .held
            .iter()
            .filter(|(_, h)| h.used.elapsed() >= IDLE)
            .map(|(id, _)| *id)
            .collect();
        old.into_iter()
            .filter_map(|id| {
                tracing::info!(id, "backup released: unused for {} s", IDLE.as_secs());
                g.held.remove(&id)
            })
            .collect()
    }

    /// Releases the idle backups every minute, and every backup once
    /// `shutdown` turns true.
    pub(crate) async fn run_expiry(
        self: Arc<Self>,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        loop {
            tokio::select! {
                changed = shutdown.changed() => {
                    // Stopping, or nobody left to stop the server.
                    if changed.is_err() || *shutdown.borrow() {
                        break;
                    }
                }
                _ = tokio::time::sleep(Duration::from_secs(60)) => {}
            }
            drop_off_runtime(self.expire());
        }
        let all: Vec<Held> = self.lock().held.drain().map(|(_, h)| h).collect();
        let _ = tokio::task::spawn_blocking(move || drop(all)).await;
    }
}

/// Dropping a backup removes its checkpoint directory: file-system work,
/// off the runtime's threads.
fn drop_off_runtime(held: Vec<Held>) {
    if !held.is_empty() {
        tokio::task::spawn_blocking(move || drop(held));
    }
}

fn gone(id: u64) -> Error {
    Error::NotFound(format!(
        "backup {id} is not on the server (ended, unused for more than {} s, or the server \
         restarted): start a new one",
        IDLE.as_secs()
    ))
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
