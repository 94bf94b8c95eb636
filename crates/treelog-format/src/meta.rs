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

/// Present while `treelog admin migrate` moves the database between format
/// versions (`migrations/`): [`Migration`], 24 bytes. Written (synced)
/// with the new `format_version` when a migration starts, advanced in each
/// batch of rewritten entries, deleted (synced) when it ends. A database
/// with it set opens only to the migration, which resumes from it.
pub const MIGRATION_KEY: &[u8] = b"migration";

/// A migration under way (`meta.migration`): from format `from` to `to`,
/// every inode below `next_id` rewritten already.
///
/// ```text
/// from     u64 BE
/// to       u64 BE
/// next_id  u64 BE
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    pub from: u64,
    pub to: u64,
    pub next_id: u64,
}

impl Migration {
    pub fn encode(&self) -> [u8; 24] {
        let mut out = [0u8; 24];
        out[..8].copy_from_slice(&self.from.to_be_bytes());
        out[8..16].copy_from_slice(&self.to.to_be_bytes());
        out[16..].copy_from_slice(&self.next_id.to_be_bytes());
        out
    }

    pub fn decode(b: &[u8]) -> Result<Migration> {
        if b.len() != 24 {
            return Err(crate::error::Error::corrupt(
                "migration marker",
                format!("expected 24 bytes, got {}", b.len()),
            ));
        }
        let at = |o: usize| u64::from_be_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        Ok(Migration {
            from: at(0),
            to: at(8),
            next_id: at(16),
        })
    }
}
