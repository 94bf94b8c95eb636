//! Keys and values of the `meta` column family.
//!
//! Keys are ASCII strings; integer values are 8 bytes big-endian.

use crate::error::Result;

/// Format version of the database (u64 BE). Written once at creation and
/// by migrations.
pub const FORMAT_VERSION_KEY: &[u8] = b"format_version";
/// Marker naming the software that created the database (UTF-8).
pub const CREATED_BY_KEY: &[u8] = b"created_by";
/// Highest log sequence whose events are in `inodes`/`edges` (u64 BE).
/// Written in the same batch as the index changes (without the WAL; atomic
/// flush keeps it consistent with them).
pub const APPLIED_SEQ_KEY: &[u8] = b"applied_seq";
/// First sequence still present in the `log` CF (u64 BE).
pub const LOG_START_KEY: &[u8] = b"log_start";
/// Total bytes of the record values in `log` (u64 BE), kept with the index
/// (same batch as `applied_seq`) for byte-based retention.
pub const LOG_BYTES_KEY: &[u8] = b"log_bytes";
/// Present (u64 BE: the time it started, ms since the epoch) while
/// `admin rebuild` replaces the index: written through the WAL, synced,
/// before the index column families are dropped, and deleted once the new
/// index is flushed. An open that finds it finishes the rebuild.
pub const REBUILD_KEY: &[u8] = b"rebuild_in_progress";
/// The last loss of WAL records an operator accepted with
/// `admin accept-wal-loss` (UTF-8 JSON: time, the log's end after recovery,
/// what RocksDB reported).
pub const WAL_LOSS_KEY: &[u8] = b"wal_loss_accepted";
/// The namespace's identity (UTF-8, 32 lowercase hex digits): made once
/// when the database is created (or first opened by a build that knows it),
/// and carried by its backups and replicas, whose sources refuse to feed a
/// database of another namespace.
pub const NAMESPACE_ID_KEY: &[u8] = b"namespace_id";
/// Prefix of durable named cursors: `cursor/<name>` -> postcard `CursorState`.
pub const CURSOR_PREFIX: &[u8] = b"cursor/";

/// The `meta` key of cursor `name`.
pub fn cursor_key(name: &str) -> Vec<u8> {
    let mut k = CURSOR_PREFIX.to_vec();
    k.extend_from_slice(name.as_bytes());
    k
}

pub fn encode_u64(v: u64) -> [u8; 8] {
    v.to_be_bytes()
}

pub fn decode_u64(what: &'static str, b: &[u8]) -> Result<u64> {
    super::keys::decode_u64_be(what, b)
}
