//! The on-disk format: every byte layout treelog writes, in one place.
//!
//! Format 2 (this build's, [`v2`]): the `inodes` column family holds
//! 64-byte `InodeEntryV2` headers with the name (and a symbolic link's
//! target), each inode's extended attributes under a key extending its
//! id, owner and group dictionaries with one key per name, and directory
//! quotas under one prefix. Format 1 (seed 000 byte for byte: [`inode`],
//! [`dict`]) is still decoded, to migrate it. Keys are big-endian so that
//! byte order equals numeric order; values little-endian (see
//! `docs/FORMAT.md`). The `edges`, `log` and `meta` layouts are shared;
//! the log's records carry their event schema version ([`record`],
//! [`schema1`]).
//!
//! Decoders never panic: short, long or otherwise malformed input returns
//! [`Error::Corruption`](crate::error::Error::Corruption).
//!
//! A crate of its own, without a storage engine: the codecs are the format,
//! whatever stores the bytes (and they are fuzzed without building RocksDB).

// The vocabulary the records and entries are made of.
use treelog_proto::{error, event, types};

pub mod dict;
pub mod inode;
pub mod keys;
pub mod meta;
pub mod record;
pub mod schema1;
pub mod v2;

pub use dict::{Dict, DictSet};
pub use inode::{InodeEntry, FLAG_COMPLETE, FLAG_DIRECTORY, INODE_HEADER_LEN};
pub use keys::*;

/// The on-disk format version this build writes.
pub const FORMAT_VERSION: u64 = 2;
/// Every format version this build can open.
pub const SUPPORTED_FORMAT_VERSIONS: &[u64] = &[2];
/// Format versions this build migrates to [`FORMAT_VERSION`]
/// (`treelog admin migrate`, `migrations/`).
pub const MIGRATABLE_FORMAT_VERSIONS: &[u64] = &[1];

/// Inode id of the root directory (seed 000: path resolution starts at 1).
pub const ROOT_ID: u64 = 1;
/// The first id handed to a created inode.
pub const FIRST_ALLOCATED_ID: u64 = 2;
/// `next_id` is persisted only when a block of this many ids is crossed.
pub const ID_BLOCK: u64 = 1000;

/// The `inodes` entries of an empty namespace of format 2, as (key,
/// value): the root directory, the owner and group dictionaries' counters
/// (no name yet), and `next_id`. (`edges` starts empty.)
pub fn empty_namespace_inodes() -> [([u8; 8], Vec<u8>); 4] {
    let root = v2::InodeEntryV2 {
        parent_id: 0,
        size: 0,
        block_size: 0,
        ctime_ms: 0,
        mtime_ms: 0,
        change_ms: 0,
        mode: crate::types::DEFAULT_DIR_MODE,
        kind: v2::KIND_DIRECTORY,
        flags: v2::FLAG_COMPLETE_V2,
        owner_id: 0,
        group_id: 0,
        name: Vec::new(),
        target: Vec::new(),
    };
    [
        (inode_key(ROOT_ID), root.encode()),
        (inode_key(OWNER_DICT_KEY), 0u32.to_le_bytes().to_vec()),
        (inode_key(GROUP_DICT_KEY), 0u32.to_le_bytes().to_vec()),
        (
            inode_key(NEXT_ID_KEY),
            next_id_value(FIRST_ALLOCATED_ID).to_vec(),
        ),
    ]
}

/// The `inodes` entries of an empty namespace of format 1 (seed 000):
/// what format-1 code created, for the migration's tests.
pub fn empty_namespace_inodes_v1() -> [([u8; 8], Vec<u8>); 4] {
    let root = InodeEntry {
        parent_id: 0,
        size: 0,
        block_size: 0,
        creation_time_ms: 0,
        modification_time_ms: 0,
        mode: crate::types::DEFAULT_DIR_MODE,
        flags: FLAG_DIRECTORY | FLAG_COMPLETE,
        owner_id: 0,
        group_id: 0,
        name: Vec::new(),
    };
    [
        (inode_key(ROOT_ID), root.encode()),
        (inode_key(OWNER_DICT_KEY), Dict::default().encode()),
        (inode_key(GROUP_DICT_KEY), Dict::default().encode()),
        (
            inode_key(NEXT_ID_KEY),
            next_id_value(FIRST_ALLOCATED_ID).to_vec(),
        ),
    ]
}
