//! The raw RocksDB ceiling of durable creates.

use super::*;

/// The raw RocksDB limit: pre-encoded batches with the bytes treelog writes
/// per create (a log record through the WAL, then the inode, the edge and
/// `applied_seq` without it), one fsync per group of `group` creates, no
/// validation, one thread.
pub(super) fn raw_rocksdb(dir: &Path, ops: usize, group: usize) -> Result<Figure> {
    let mut o = rocksdb::Options::default();
    o.create_if_missing(true);
    o.create_missing_column_families(true);
    o.set_atomic_flush(true);
    let mut cfs: Vec<ColumnFamilyDescriptor> = crate::store::index_cf_descriptors()
        .into_iter()
        .map(|(n, o)| ColumnFamilyDescriptor::new(n, o))
        .collect();
    cfs.push(ColumnFamilyDescriptor::new(
        "log",
        rocksdb::Options::default(),
    ));
    cfs.push(ColumnFamilyDescriptor::new(
        "meta",
        rocksdb::Options::default(),
    ));
    let db = DB::open_cf_descriptors(&o, dir, cfs)?;
    let cf = |n: &str| {
        db.cf_handle(n)
            .ok_or_else(|| Error::corrupt("bench", "missing cf"))
    };
    // Pre-encode every operation's bytes.
    let now = crate::now_ms();
    let attrs = Attrs {
        kind: FileType::File,
        size: 0,
        block_size: 128 << 20,
        ctime_ms: now,
        mtime_ms: now,
        change_ms: now,
        mode: 0o644,
        complete: false,
        owner: String::new(),
        group: String::new(),
    };
    let entry_of = |parent: u64, kind: u8, flags: u8, name: &str| InodeEntryV2 {
        parent_id: parent,
        size: 0,
        block_size: if kind == v2::KIND_FILE { 128 << 20 } else { 0 },
        ctime_ms: now,
        mtime_ms: now,
        change_ms: now,
        mode: 0o644,
        kind,
        flags,
        owner_id: 0,
        group_id: 0,
        name: name.as_bytes().to_vec(),
        target: Vec::new(),
    };
    let mut pre = Vec::with_capacity(ops);
    for i in 0..ops {
        let id = 10_000 + i as u64;
        let parent = 2 + (i % 1000) as u64;
        let name = format!("f0_{i}");
        let rec = Record {
            seq: i as u64 + 1,
            time_ms: now,
            events: vec![Event::Create {
                id,
                parent,
                name: name.clone().into(),
                path: format!("/bench/c/d{}/{name}", i % 1000).into(),
                attrs: attrs.clone(),
                parent_mtime_ms: Some(now),
                quotas: vec![],
            }],
        };
        // As format 2 writes a create: the entry, the edge, and the
        // parent's entry with its new times.
        let entry = entry_of(parent, v2::KIND_FILE, 0, &name);
        let parent_entry = entry_of(1, v2::KIND_DIRECTORY, v2::FLAG_COMPLETE_V2, "d");
        pre.push((
            format::log_key(rec.seq),
            record::encode_record(&rec)?,
            (format::inode_key(id), entry.encode()),
            (format::inode_key(parent), parent_entry.encode()),
            format::edge_key(parent, name.as_bytes()),
            format::edge_value(id),
        ));
    }
    let (log, inodes, edges, meta) = (cf("log")?, cf("inodes")?, cf("edges")?, cf("meta")?);
    let mut synced = WriteOptions::default();
    synced.set_sync(true);
    let mut nowal = WriteOptions::default();
    nowal.disable_wal(true);
    let t0 = Instant::now();
    for chunk in pre.chunks(group.max(1)) {
        let mut b = WriteBatch::default();
        for (lk, lv, ..) in chunk {
            b.put_cf(log, lk, lv);
        }
        db.write_opt(b, &synced)?;
        let mut b = WriteBatch::default();
        for (_, _, (ik, iv), (pk, pv), ek, ev) in chunk {
            b.put_cf(inodes, ik, iv);
            b.put_cf(inodes, pk, pv);
            b.put_cf(edges, ek, ev);
        }
        b.put_cf(meta, b"applied_seq", 1u64.to_be_bytes());
        db.write_opt(b, &nowal)?;
    }
    let secs = t0.elapsed().as_secs_f64();
    Ok(Figure::rate("raw-rocksdb", group, ops, secs))
}
