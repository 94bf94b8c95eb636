//! Crash points for the reliability tests: with the `failpoints` feature,
//! `FAILPOINTS="rebuild::after_drop=return"` makes the process kill itself
//! with SIGKILL (as `kill -9` would) when it reaches that step. Without the
//! feature (every production build) a crash point compiles to nothing.
//!
//! The points, in the order an operation reaches them:
//! - creation of a database: `create::after_mark` (the creation marker
//!   durable), `create::after_open` (RocksDB's files and column families
//!   made), `create::before_unmark` (the empty namespace durable);
//! - log retention: `retention::before_start` (the index flushed, the new
//!   log start not yet written), `retention::after_start` (written, the
//!   records not yet deleted), `retention::after_delete` (range-deleted,
//!   not yet compacted);
//! - rebuild: `rebuild::after_mark`, `rebuild::after_drop` (between
//!   dropping `inodes` and `edges`), `rebuild::after_create`,
//!   `rebuild::after_reset` (the empty index flushed), `replay::batch`
//!   (after each replay batch is written), `rebuild::before_unmark` (the
//!   rebuilt index flushed, the mark still set);
//! - backup: `backup::after_checkpoint` (the checkpoint made in the data
//!   directory), `backup::before_install` (the backup complete, manifest
//!   included, under its staging name); restore: `restore::before_install`
//!   (the new data directory checked, under its staging name);
//! - a backup fetched from a server (`treelog-replica`'s fetch, also a
//!   replica's bootstrap): `fetch::after_chunk` (a chunk written, its
//!   progress not yet recorded); a replica's bootstrap:
//!   `bootstrap::between_renames` (the old database renamed away, the new
//!   one not yet in its place); a replica's catch-up before it serves:
//!   `catch_up::append` (a batch appended to the log, maybe not applied);
//! - a Raft node's snapshot install: `install::after_mark` (the install
//!   marked in `meta`, the index untouched), `install::before_flush` (the
//!   index replaced without the WAL, not yet flushed).
//!
//! Injected failures (the operation fails as an I/O error would, the
//! process goes on): `writer::write_log` (a group's log append);
//! `backup::bad_chunk` (a served backup's chunk is damaged after its
//! checksum was taken).
//!
//! Delays (`sleep(ms)`, the step takes that much longer):
//! `backup::serve` (a backup to be served over the RPC port, before its
//! checkpoint: a source slow to answer `BackupBegin`, as a big one is
//! while it digests its index).

/// Kills the process here if the failpoint `name` is configured.
#[inline]
pub fn crash_point(name: &str) {
    #[cfg(feature = "failpoints")]
    configure_from_env();
    #[cfg(feature = "failpoints")]
    if fail::eval(name, |_| ()).is_some() {
        // SAFETY: kill(2) with this process's own id; nothing after it runs.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
    #[cfg(not(feature = "failpoints"))]
    let _ = name;
}

/// Waits here as long as the failpoint `name` says (`sleep(ms)`).
#[inline]
pub fn delay_point(name: &str) {
    // The `sleep` action sleeps inside the evaluation; no other action is
    // meant for a delay point, and one that would fail is ignored.
    let _ = injected(name);
}

/// Whether the failure point `name` is configured to fail now (the caller
/// then fails as the real operation would).
#[inline]
pub fn injected(name: &str) -> bool {
    #[cfg(feature = "failpoints")]
    {
        configure_from_env();
        fail::eval(name, |_| ()).is_some()
    }
    #[cfg(not(feature = "failpoints"))]
    {
        let _ = name;
        false
    }
}

/// Reads `FAILPOINTS` once per process, so that any binary built on the
/// library (the CLI, a test's worker process) honours it without setting
/// up a scenario itself.
#[cfg(feature = "failpoints")]
fn configure_from_env() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // The scenario's guard only serialises scenarios within one
        // process; this one lasts as long as the process.
        std::mem::forget(fail::FailScenario::setup());
    });
}
