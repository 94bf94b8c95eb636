//! Format-1 databases made on demand, byte for byte as format-1 code wrote
//! them, for the migration's tests and benchmark (larger than the golden
//! fixture in `fixtures/v1`).

use std::path::Path;

use crate::error::{DictKind, Error, Result};
use crate::format::dict::Dict;
use crate::format::inode::InodeEntry;
use crate::format::meta;
use crate::format::schema1::{AttrsV1, EventV1, RecordV1};
use crate::format::{self, record};
use crate::store::{Store, StoreOptions, CF_EDGES, CF_INODES, CF_LOG, CF_META};
use crate::types::{FileType, DEFAULT_DIR_MODE, DEFAULT_FILE_MODE};

use super::BATCH_BYTES;

/// A format-1 namespace to make with [`write_format1`]: `dirs`
/// directories under the root, `files_per_dir` files in each, owners and
/// groups taken in turn from `owners` and `groups` names.
#[derive(Debug, Clone)]
pub struct Format1Spec {
    pub dirs: u64,
    pub files_per_dir: u64,
    /// Distinct owner names, at most 255 (format 1's limit).
    pub owners: u8,
    pub groups: u8,
    /// The time of the first record (ms since the epoch); each record is a
    /// millisecond later.
    pub start_ms: u64,
}

/// Writes at the empty or missing directory `path` a database of format 1
/// holding `spec`'s namespace, byte for byte as format-1 code wrote one:
/// one schema-1 record per `mkdir` and `create`, and the format-1 index
/// of those records (entries, edges, dictionaries, `next_id`). For the
/// migration's tests and benchmark, which need format-1 databases larger
/// than the golden fixture (`migrations/fixtures/v1`, made by format-1 code).
/// Returns the number of inodes, the root included.
pub fn write_format1(path: &Path, spec: &Format1Spec) -> Result<u64> {
    if spec.owners == 0 || spec.groups == 0 {
        return Err(Error::InvalidArgument(
            "at least one owner and one group".into(),
        ));
    }
    let store = Store::open(path, &StoreOptions::default())?;
    if store.last_log_seq()? != 0 {
        return Err(Error::AlreadyExists(path.display().to_string()));
    }
    let mut owners = Dict::default();
    let mut groups = Dict::default();
    let mut bound = format::FIRST_ALLOCATED_ID;
    let (mut seq, mut id, mut log_bytes) = (0u64, format::FIRST_ALLOCATED_ID, 0u64);
    let mut b = store.raw_batch();
    for (k, v) in format::empty_namespace_inodes_v1() {
        b.put(CF_INODES, &k, &v)?;
    }
    let mut buf = Vec::new();
    for d in 0..spec.dirs {
        let dir_id = id;
        let dir_name = format!("d{d}");
        for f in 0..=spec.files_per_dir {
            // The directory first, then its files.
            let (name, parent, path_s, kind) = if f == 0 {
                (
                    dir_name.clone(),
                    format::ROOT_ID,
                    format!("/{dir_name}"),
                    FileType::Directory,
                )
            } else {
                let n = format!("f{}", f - 1);
                let p = format!("/{dir_name}/{n}");
                (n, dir_id, p, FileType::File)
            };
            seq += 1;
            let time = spec.start_ms + seq;
            let owner = format!("user{}", (seq - 1) % u64::from(spec.owners));
            let group = format!("group{}", (seq - 1) % u64::from(spec.groups));
            let attrs = AttrsV1 {
                kind,
                size: 0,
                block_size: if kind.is_dir() {
                    0
                } else {
                    crate::types::DEFAULT_BLOCK_SIZE
                },
                ctime_ms: time,
                mtime_ms: time,
                mode: if kind.is_dir() {
                    DEFAULT_DIR_MODE
                } else {
                    DEFAULT_FILE_MODE
                },
                complete: kind.is_dir(),
                owner: &owner,
                group: &group,
            };
            let rec = RecordV1 {
                seq,
                time_ms: time,
                events: vec![EventV1::Create {
                    id,
                    parent,
                    name: &name,
                    path: &path_s,
                    attrs,
                }],
            };
            let v = record::encode_record_v1(&rec)?;
            log_bytes += v.len() as u64;
            b.put(CF_LOG, &format::log_key(seq), &v)?;
            // What format 1's apply wrote for it.
            let (owner_id, _) = owners.intern(DictKind::Owner, &owner)?;
            let (group_id, _) = groups.intern(DictKind::Group, &group)?;
            let e = InodeEntry {
                parent_id: parent,
                size: 0,
                block_size: attrs.block_size,
                creation_time_ms: time,
                modification_time_ms: time,
                mode: attrs.mode,
                flags: if kind.is_dir() {
                    format::FLAG_DIRECTORY | format::FLAG_COMPLETE
                } else {
                    0
                },
                owner_id,
                group_id,
                name: name.as_bytes(),
            };
            buf.clear();
            e.encode_into(&mut buf);
            b.put(CF_INODES, &format::inode_key(id), &buf)?;
            b.put(
                CF_EDGES,
                &format::edge_key(parent, name.as_bytes()),
                &format::edge_value(id),
            )?;
            if id >= bound {
                bound = id + format::ID_BLOCK;
                b.put(
                    CF_INODES,
                    &format::inode_key(format::NEXT_ID_KEY),
                    &format::next_id_value(bound),
                )?;
            }
            id += 1;
            if b.size_in_bytes() >= BATCH_BYTES {
                store.write_raw(std::mem::replace(&mut b, store.raw_batch()), false)?;
            }
        }
    }
    b.put(
        CF_INODES,
        &format::inode_key(format::OWNER_DICT_KEY),
        &owners.encode(),
    )?;
    b.put(
        CF_INODES,
        &format::inode_key(format::GROUP_DICT_KEY),
        &groups.encode(),
    )?;
    b.put(CF_META, meta::FORMAT_VERSION_KEY, &meta::encode_u64(1))?;
    b.put(CF_META, meta::APPLIED_SEQ_KEY, &meta::encode_u64(seq))?;
    b.put(CF_META, meta::LOG_BYTES_KEY, &meta::encode_u64(log_bytes))?;
    store.write_raw(b, true)?;
    store.flush()?;
    Ok(id - format::FIRST_ALLOCATED_ID + 1)
}
