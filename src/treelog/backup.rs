//! [`Treelog`]'s backups: a checkpoint at one committed sequence, taken
//! while writes go on.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::treelog::Treelog;

impl Treelog {
    /// Makes a backup of the store at one committed sequence in the new
    /// directory `dest` (docs/FORMAT.md §12), while writes go on: see
    /// [`Treelog::backup_with_progress`].
    pub fn backup(&self, dest: impl AsRef<Path>) -> Result<crate::ops::backup::BackupReport> {
        self.backup_with_progress(dest, |_| {})
    }

    /// [`Treelog::backup`], telling `progress` what it has done. Writes
    /// are not paused: the checkpoint is a RocksDB checkpoint (an atomic
    /// flush, then hard links to the table files and a copy of the
    /// write-ahead log), taken with log retention held off; its copy is
    /// then caught up to the last record it holds, which the backup waits
    /// for this store to commit, and copied into `dest` with checksums.
    pub fn backup_with_progress(
        &self,
        dest: impl AsRef<Path>,
        mut progress: impl FnMut(crate::ops::backup::Progress<'_>) + Send,
    ) -> Result<crate::ops::backup::BackupReport> {
        crate::ops::backup::check_dest(self.store(), dest.as_ref())?;
        let checkpoint = {
            let _no_retention = self.shared.retention().hold_passes();
            crate::ops::backup::take_checkpoint(self.store(), dest.as_ref())?
        };
        let committed = |seq| self.committed_for_backup(seq);
        in_background("treelog-backup", move || {
            checkpoint.finish(&committed, &mut progress)
        })
    }

    /// Takes a backup to be served in chunks (the server's `BackupBegin`,
    /// docs/PROTOCOL.md): a checkpoint as [`Treelog::backup`] takes,
    /// caught up to a committed sequence, with its manifest; its files
    /// stay in the data directory (hard links) until it is dropped.
    pub fn serve_backup(&self) -> Result<crate::ops::backup::ServedBackup> {
        crate::sys::failpoint::delay_point("backup::serve");
        let checkpoint = {
            let _no_retention = self.shared.retention().hold_passes();
            crate::ops::backup::take_checkpoint_to_serve(self.store())?
        };
        let committed = |seq| self.committed_for_backup(seq);
        in_background("treelog-backup", move || checkpoint.serve(&committed))
    }

    /// Waits until this store has committed `seq`, the last record of a
    /// backup's checkpoint (appended to the log, at most an fsync away).
    fn committed_for_backup(&self, seq: u64) -> Result<()> {
        let shared = &self.shared;
        let deadline = Instant::now() + BACKUP_COMMIT_WAIT;
        loop {
            if shared
                .publication()
                .watermark()
                .wait_for(seq, Duration::from_millis(100))
            {
                return Ok(());
            }
            if let Some(why) = shared.failure() {
                return Err(Error::WriterStopped(why));
            }
            if Instant::now() >= deadline {
                return Err(Error::Busy(format!(
                    "the backup's checkpoint ends at sequence {seq}, which was not \
                     committed within {BACKUP_COMMIT_WAIT:?} (committed: {})",
                    shared.committed()
                )));
            }
        }
    }
}

/// How long a backup waits for the store to commit the last record of its
/// checkpoint (appended to the log, at most one fsync away).
const BACKUP_COMMIT_WAIT: Duration = Duration::from_secs(60);

/// Runs `work` (a backup's catch-up, digest and copy: background work) on
/// a thread of its own named `name` under `SCHED_IDLE`: it takes the CPU
/// nothing else wants (when both want it, Linux gives it a weight of 3
/// against a normal thread's 1024, so it is slowed, never stopped). At
/// niceness 10, writers kept 0.51–0.70× of their create rate during a 1M
/// backup; under `SCHED_IDLE` 0.80–0.87× (docs/BENCHMARKS.md, Backup).
fn in_background<T: Send>(name: &str, work: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name(name.into())
            .spawn_scoped(s, move || {
                #[cfg(target_os = "linux")]
                crate::sys::sched::set_policy(libc::SCHED_IDLE);
                work()
            })?
            .join()
            .unwrap_or_else(|_| Err(Error::corrupt("backup", "the backup thread panicked")))
    })
}
