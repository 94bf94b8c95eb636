//! The RocksDB options of the instance and of each column family.

use super::*;

/// Tuning knobs of the RocksDB instance.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Shared block cache for `inodes` and `edges`.
    pub block_cache_bytes: usize,
    /// Memtable size of `inodes` and `edges`.
    pub index_write_buffer_bytes: usize,
    /// Memtable size of `log`.
    pub log_write_buffer_bytes: usize,
    /// Create the database if the directory is missing or empty.
    pub create_if_missing: bool,
    /// Replays of at least this many records are long: the index column
    /// families are tuned for bulk loading while they run (see
    /// [`crate::recovery::apply_records`]).
    pub long_replay_min: u64,
    /// A long replay starts a new index memtable after this many bytes of
    /// writes, so that flushes overlap the replay and the last one, which
    /// the replay waits for, stays short.
    pub replay_memtable_bytes: usize,
    /// Long replays into an empty index of at least this many records
    /// load it in bulk: no compaction while they run, one full compaction
    /// of the index at their end (see
    /// [`crate::recovery::apply_records`]). Measured on logs of mkdirs:
    /// no faster at 10^7 records (a replay compacts little there, straight
    /// to the bottom level), 1.7–1.8× as fast at 3·10^7 and at 10^8.
    pub bulk_replay_min: u64,
    /// What a write-ahead log that fails its checksums does at open.
    pub wal_recovery: WalRecovery,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            block_cache_bytes: 256 << 20,
            index_write_buffer_bytes: 64 << 20,
            log_write_buffer_bytes: 64 << 20,
            create_if_missing: true,
            long_replay_min: 100_000,
            replay_memtable_bytes: 16 << 20,
            bulk_replay_min: 20_000_000,
            wal_recovery: WalRecovery::Strict,
        }
    }
}

/// Memtable bloom filter sizes (fraction of the memtable) of the index CFs:
/// most lookups while validating a create are for names that do not exist
/// yet, which the filter answers without searching the skiplist.
pub(super) const INODES_MEMTABLE_BLOOM: f64 = 0.05;
pub(super) const EDGES_MEMTABLE_BLOOM: f64 = 0.1;

/// L0 files that start a compaction of the index CFs (RocksDB's default),
/// and the larger count a long replay lets L0 collect instead: nothing reads
/// the index during a replay, and every L0 compaction while flushes keep
/// coming rewrites keys that the next one rewrites again. Below RocksDB's
/// default slowdown trigger (20), so a replay never stalls on L0.
pub(super) const L0_COMPACTION_TRIGGER: i32 = 4;
pub(super) const REPLAY_L0_COMPACTION_TRIGGER: i32 = 16;

/// How the index CFs are tuned: for serving, or while a replay writes
/// them (see [`crate::recovery::apply_records`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IndexTuning {
    Serving,
    /// No memtable filters; L0 compacts at [`REPLAY_L0_COMPACTION_TRIGGER`].
    Replay,
    /// No memtable filters and no compaction at all; L0 never stalls.
    BulkLoad,
}

/// L0 files that slow down and stop writes to the index CFs (RocksDB's
/// defaults), and the bounds of a bulk load, which compacts nothing until
/// it ends and must never stall on L0.
pub(super) const L0_SLOWDOWN_TRIGGER: i32 = 20;
pub(super) const L0_STOP_TRIGGER: i32 = 36;
pub(super) const BULK_L0_TRIGGER: i32 = 1 << 30;

pub(super) fn db_options() -> Options {
    let mut o = Options::default();
    // Seed 000 §2.5: bounded file handles.
    o.set_max_open_files(256);
    // The index CFs are written without the WAL; atomic flush persists them
    // together with `applied_seq` (in `meta`) so that a crash leaves an index
    // that is exactly the log's prefix up to `applied_seq`.
    o.set_atomic_flush(true);
    // A torn tail of the WAL after a crash only ever holds a group that was
    // never acknowledged (the writer acknowledges after the synced write),
    // and this mode drops an incomplete one quietly. A record that fails its
    // checksum fails the open instead of ending the log there, as
    // point-in-time recovery would with every intact record after it:
    // `open_existing` then tells a torn tail from a hole.
    o.set_wal_recovery_mode(DBRecoveryMode::TolerateCorruptedTailRecords);
    // Two cores here; flush and compaction share them.
    o.set_max_background_jobs(2);
    o.set_keep_log_file_num(4);
    o
}

/// Index CFs: no compression in the first two levels, which are rewritten
/// soon anyway (flushes and replay then cost less CPU), LZ4 below, where
/// nearly all the data lives.
pub(super) fn index_compression(o: &mut Options) {
    use DBCompressionType::{Lz4, None as Uncompressed};
    o.set_compression_per_level(&[Uncompressed, Uncompressed, Lz4, Lz4, Lz4, Lz4, Lz4]);
    o.set_bottommost_compression_type(Lz4);
}

pub(super) fn index_table(cache: &Cache) -> BlockBasedOptions {
    let mut t = BlockBasedOptions::default();
    t.set_block_cache(cache);
    // 10 bits/key: ~1% false positives, the seed's choice for point lookups.
    t.set_bloom_filter(10.0, false);
    // Point lookups on `edges` (path resolution) still use the whole-key
    // filter; the prefix extractor adds prefix filtering for listings.
    t.set_whole_key_filtering(true);
    t.set_cache_index_and_filter_blocks(true);
    t.set_pin_l0_filter_and_index_blocks_in_cache(true);
    // Partitioned index and filters: one filter block per SST grows with
    // the key count (~6 MB at 5M keys), larger than a block-cache shard, so
    // it could never be cached and every lookup re-read and re-checksummed
    // it (measured: creates fell from ~75k/s to ~4.5k/s past ~3M inodes).
    // Partitions are 4 KiB; the small top level stays pinned.
    t.set_index_type(rocksdb::BlockBasedIndexType::TwoLevelIndexSearch);
    t.set_partition_filters(true);
    t.set_metadata_block_size(4096);
    t.set_pin_top_level_index_and_filter(true);
    t.set_format_version(5);
    t
}

pub(super) fn cf_options(name: &str, so: &StoreOptions, cache: &Cache) -> Options {
    let mut o = Options::default();
    match name {
        CF_INODES => {
            // Point lookups by 8-byte id.
            o.set_memtable_prefix_bloom_ratio(INODES_MEMTABLE_BLOOM);
            o.set_level_zero_file_num_compaction_trigger(L0_COMPACTION_TRIGGER);
            o.set_level_zero_slowdown_writes_trigger(L0_SLOWDOWN_TRIGGER);
            o.set_level_zero_stop_writes_trigger(L0_STOP_TRIGGER);
            o.set_memtable_whole_key_filtering(true);
            o.set_block_based_table_factory(&index_table(cache));
            index_compression(&mut o);
            o.set_write_buffer_size(so.index_write_buffer_bytes);
            o.set_level_compaction_dynamic_level_bytes(true);
        }
        CF_EDGES => {
            // Point lookups (resolve) and prefix scans (list) within one
            // parent: the 8-byte parent id is the prefix.
            o.set_prefix_extractor(SliceTransform::create_fixed_prefix(8));
            o.set_memtable_prefix_bloom_ratio(EDGES_MEMTABLE_BLOOM);
            o.set_level_zero_file_num_compaction_trigger(L0_COMPACTION_TRIGGER);
            o.set_level_zero_slowdown_writes_trigger(L0_SLOWDOWN_TRIGGER);
            o.set_level_zero_stop_writes_trigger(L0_STOP_TRIGGER);
            // Every create first looks up a name that does not exist yet,
            // in a directory that does: whole-key bits in the memtable
            // filter answer that without searching the skiplist.
            o.set_memtable_whole_key_filtering(true);
            o.set_block_based_table_factory(&index_table(cache));
            index_compression(&mut o);
            o.set_write_buffer_size(so.index_write_buffer_bytes);
            o.set_level_compaction_dynamic_level_bytes(true);
        }
        CF_LOG => {
            // Append-only by increasing sequence, read sequentially, truncated
            // from the front: no filter (no point lookups on the hot path),
            // LZ4 (records are postcard but paths repeat), big memtables.
            let mut t = BlockBasedOptions::default();
            t.set_block_size(64 << 10);
            o.set_block_based_table_factory(&t);
            o.set_compression_type(DBCompressionType::Lz4);
            o.set_write_buffer_size(so.log_write_buffer_bytes);
            o.set_level_compaction_dynamic_level_bytes(true);
        }
        _ => {
            // meta: a handful of small keys.
            o.set_compression_type(DBCompressionType::None);
        }
    }
    o
}

/// Options of the `inodes` and `edges` column families (for the seed-design
/// baseline of `treelog bench`, which uses the same schema and tuning).
pub fn index_cf_descriptors() -> Vec<(&'static str, Options)> {
    let so = StoreOptions::default();
    let cache = Cache::new_lru_cache(so.block_cache_bytes);
    vec![
        (CF_INODES, cf_options(CF_INODES, &so, &cache)),
        (CF_EDGES, cf_options(CF_EDGES, &so, &cache)),
    ]
}
