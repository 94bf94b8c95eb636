//! On-disk format v1: every byte layout treelog writes, in one place.
//!
//! The `inodes` and `edges` column families are seed 000 byte for byte
//! (see `docs/FORMAT.md`): keys are big-endian so that byte order equals
//! numeric order, the 48-byte `InodeEntry` header is little-endian (the seed
//! memcpy's a naturally aligned struct on a little-endian machine), the
//! `next_id` counter is little-endian, and the owner/group dictionaries are
//! `[count][len|bytes]...`.
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
pub mod v2;

pub use dict::{Dict, DictSet};
pub use inode::{InodeEntry, FLAG_COMPLETE, FLAG_DIRECTORY, INODE_HEADER_LEN};
pub use keys::*;

/// The on-disk format version this build writes.
pub const FORMAT_VERSION: u64 = 1;
/// Every format version this build can open.
pub const SUPPORTED_FORMAT_VERSIONS: &[u64] = &[1];

/// Inode id of the root directory (seed 000: path resolution starts at 1).
pub const ROOT_ID: u64 = 1;
/// The first id handed to a created inode.
pub const FIRST_ALLOCATED_ID: u64 = 2;
/// `next_id` is persisted only when a block of this many ids is crossed.
pub const ID_BLOCK: u64 = 1000;

/// The `inodes` entries of an empty namespace, as (key, value): the root
/// directory, empty owner and group dictionaries, and `next_id`. (`edges`
/// starts empty.)
pub fn empty_namespace_inodes() -> [([u8; 8], Vec<u8>); 4] {
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
