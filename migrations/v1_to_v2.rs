//! Format 1 to format 2: the dictionaries exploded into their format-2
//! keys, every inode rewritten as format 2's entry, resumably (see the
//! runner's documentation in `mod.rs`, and README.md's version list).

use crate::error::{DictKind, Error, Result};
use crate::format::dict::Dict;
use crate::format::inode::InodeEntry;
use crate::format::meta::{self, Migration};
use crate::format::v2::{self, InodeEntryV2};
use crate::format::{self, MAX_INODE_ID};
use crate::store::{Store, CF_INODES, CF_META};

use super::{MigrateReport, BATCH_BYTES};

/// A format-1 dictionary, from its value.
fn dict_v1(store: &Store, key: u64) -> Result<Dict> {
    match store
        .scan_cf_from(CF_INODES, &format::inode_key(key))?
        .next()
        .transpose()?
    {
        Some((k, v)) if *k == format::inode_key(key) => Dict::decode(&v),
        _ => Ok(Dict::default()),
    }
}

/// The names of a format-1 dictionary, id 1 first.
fn dict_names(d: &Dict, kind: DictKind) -> Result<Vec<String>> {
    (1..=d.len())
        .map(|i| {
            u8::try_from(i)
                .map_err(|_| Error::DictionaryFull(kind))
                .and_then(|id| d.lookup(id).map(str::to_owned))
        })
        .collect()
}

/// The marker of step 1 → 2 with every inode below `next_id` rewritten.
fn marker(next_id: u64) -> [u8; 24] {
    Migration {
        from: 1,
        to: 2,
        next_id,
    }
    .encode()
}

/// Steps 1 to 3 of the migration (see the runner's documentation), from
/// the start or resumed at inode `resume`.
pub(super) fn run(
    store: &Store,
    resume: Option<u64>,
    report: &mut MigrateReport,
    progress: &mut impl FnMut(u64, u64),
) -> Result<()> {
    let next = match resume {
        Some(n) => n,
        None => {
            start(store, report)?;
            0
        }
    };
    rewrite_inodes(store, next, report, progress)?;
    finish(store, report)
}

/// Step 1: the new version, the marker, the dictionaries; synced.
fn start(store: &Store, report: &mut MigrateReport) -> Result<()> {
    let mut b = store.raw_batch();
    for (kind, key) in [
        (DictKind::Owner, format::OWNER_DICT_KEY),
        (DictKind::Group, format::GROUP_DICT_KEY),
    ] {
        let owner = kind == DictKind::Owner;
        let names = dict_names(&dict_v1(store, key)?, kind)?;
        for (i, name) in names.iter().enumerate() {
            let id = i as u32 + 1;
            b.put(CF_INODES, &v2::dict_by_id_key(owner, id), name.as_bytes())?;
            b.put(
                CF_INODES,
                &v2::dict_by_name_key(owner, name.as_bytes()),
                &id.to_le_bytes(),
            )?;
        }
        // The counter replaces format 1's whole value under the same key.
        b.put(
            CF_INODES,
            &v2::dict_count_key(owner),
            &(names.len() as u32).to_le_bytes(),
        )?;
        if owner {
            report.owners = names.len() as u64;
        } else {
            report.groups = names.len() as u64;
        }
    }
    b.put(CF_META, meta::FORMAT_VERSION_KEY, &meta::encode_u64(2))?;
    b.put(CF_META, meta::MIGRATION_KEY, &marker(0))?;
    report.bytes += b.size_in_bytes() as u64;
    report.batches += 1;
    crate::sys::failpoint::crash_point("migrate::before_start");
    store.write_raw(b, true)?;
    crate::sys::failpoint::crash_point("migrate::after_start");
    Ok(())
}

/// A format-1 entry as format 2 holds it.
pub fn upgrade_entry(e: &InodeEntry<&[u8]>) -> InodeEntryV2<Vec<u8>> {
    InodeEntryV2 {
        parent_id: e.parent_id,
        size: e.size,
        block_size: e.block_size,
        ctime_ms: e.creation_time_ms,
        mtime_ms: e.modification_time_ms,
        change_ms: e.modification_time_ms,
        mode: e.mode,
        kind: if e.is_dir() {
            v2::KIND_DIRECTORY
        } else {
            v2::KIND_FILE
        },
        flags: if e.is_complete() {
            v2::FLAG_COMPLETE_V2
        } else {
            0
        },
        owner_id: u32::from(e.owner_id),
        group_id: u32::from(e.group_id),
        name: e.name.to_vec(),
        target: Vec::new(),
    }
}

/// Calls `f` with the id, key and format-2 value of every format-1 inode
/// from id `from` on, in id order.
fn each_upgraded(
    store: &Store,
    from: u64,
    mut f: impl FnMut(u64, &[u8], &[u8]) -> Result<()>,
) -> Result<()> {
    let mut buf = Vec::new();
    for item in store.scan_cf_from(CF_INODES, &format::inode_key(from))? {
        let (k, v) = item?;
        let id = format::decode_inode_key(&k)?;
        if id > MAX_INODE_ID {
            break;
        }
        let e = InodeEntry::decode_ref(&v)
            .map_err(|e| Error::corrupt("inode entry", format!("inode {id}: {e}")))?;
        buf.clear();
        upgrade_entry(&e).encode_into(&mut buf);
        f(id, &k, &buf)?;
    }
    Ok(())
}

/// RocksDB's estimate of the keys of `inodes`: the progress bar's length.
fn estimated_inodes(store: &Store) -> u64 {
    store
        .cf_property(CF_INODES, "rocksdb.estimate-num-keys")
        .unwrap_or(0)
}

/// Step 2: the inodes from `next` on, batch by batch.
fn rewrite_inodes(
    store: &Store,
    next: u64,
    report: &mut MigrateReport,
    progress: &mut impl FnMut(u64, u64),
) -> Result<()> {
    let total = estimated_inodes(store);
    let mut b = store.raw_batch();
    let mut in_batch = 0u64;
    each_upgraded(store, next, |id, k, v| {
        b.put(CF_INODES, k, v)?;
        in_batch += 1;
        if b.size_in_bytes() >= BATCH_BYTES {
            let full = std::mem::replace(&mut b, store.raw_batch());
            write_batch(store, full, id + 1, std::mem::take(&mut in_batch), report)?;
            progress(report.inodes, total);
        }
        Ok(())
    })?;
    if in_batch > 0 {
        write_batch(store, b, MAX_INODE_ID + 1, in_batch, report)?;
    }
    progress(report.inodes, total.max(report.inodes));
    Ok(())
}

/// One batch of step 2, with the marker moved to `next_id`.
fn write_batch(
    store: &Store,
    mut b: crate::store::RawBatch<'_>,
    next_id: u64,
    inodes: u64,
    report: &mut MigrateReport,
) -> Result<()> {
    b.put(CF_META, meta::MIGRATION_KEY, &marker(next_id))?;
    report.bytes += b.size_in_bytes() as u64;
    report.batches += 1;
    report.inodes += inodes;
    // Not synced: a crash loses a tail of whole batches, markers with them,
    // and the next run does them again. The end batch syncs them all.
    store.write_raw(b, false)?;
    crate::sys::failpoint::crash_point("migrate::batch");
    Ok(())
}

/// Step 3: the marker removed, synced (with every batch before it).
fn finish(store: &Store, report: &mut MigrateReport) -> Result<()> {
    let mut b = store.raw_batch();
    b.delete(CF_META, meta::MIGRATION_KEY)?;
    report.batches += 1;
    crate::sys::failpoint::crash_point("migrate::before_end");
    store.write_raw(b, true)?;
    crate::sys::failpoint::crash_point("migrate::after_end");
    Ok(())
}

/// Reads what a migration would rewrite and counts it.
pub(super) fn dry_run(
    store: &Store,
    resume: Option<u64>,
    report: &mut MigrateReport,
    progress: &mut impl FnMut(u64, u64),
) -> Result<()> {
    let total = estimated_inodes(store);
    if resume.is_none() {
        report.owners = dict_v1(store, format::OWNER_DICT_KEY)?.len() as u64;
        report.groups = dict_v1(store, format::GROUP_DICT_KEY)?.len() as u64;
    }
    each_upgraded(store, resume.unwrap_or(0), |_, k, v| {
        report.inodes += 1;
        report.bytes += (k.len() + v.len()) as u64;
        if report.inodes % 100_000 == 0 {
            progress(report.inodes, total);
        }
        Ok(())
    })?;
    progress(report.inodes, total.max(report.inodes));
    Ok(())
}
