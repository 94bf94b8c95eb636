//! RocksDB's properties per column family, read on scrape.

use prometheus::{IntGauge, IntGaugeVec, Opts, Registry};

use super::registered;
use crate::store::{Store, ALL_CFS, CF_INODES};

/// Refreshed from the store's properties when metrics are scraped.
pub struct RocksDbMetrics {
    cf_keys: IntGaugeVec,
    cf_sst_bytes: IntGaugeVec,
    cf_memtable_bytes: IntGaugeVec,
    cf_pending_compaction_bytes: IntGaugeVec,
    block_cache_bytes: IntGauge,
    snapshots: IntGauge,
    oldest_snapshot_age: IntGauge,
}

impl RocksDbMetrics {
    pub(super) fn new(r: &Registry) -> prometheus::Result<RocksDbMetrics> {
        let per_cf = |name: &str, help: &str| {
            registered(r, IntGaugeVec::new(Opts::new(name, help), &["cf"])?)
        };
        Ok(RocksDbMetrics {
            cf_keys: per_cf(
                "treelog_rocksdb_estimated_keys",
                "rocksdb.estimate-num-keys per column family",
            )?,
            cf_sst_bytes: per_cf(
                "treelog_rocksdb_live_sst_bytes",
                "rocksdb.live-sst-files-size per column family",
            )?,
            cf_memtable_bytes: per_cf(
                "treelog_rocksdb_memtable_bytes",
                "rocksdb.cur-size-all-mem-tables per column family",
            )?,
            cf_pending_compaction_bytes: per_cf(
                "treelog_rocksdb_pending_compaction_bytes",
                "rocksdb.estimate-pending-compaction-bytes per column family",
            )?,
            block_cache_bytes: registered(
                r,
                IntGauge::new(
                    "treelog_rocksdb_block_cache_usage_bytes",
                    "Block cache usage",
                )?,
            )?,
            snapshots: registered(
                r,
                IntGauge::new(
                    "treelog_rocksdb_snapshots",
                    "RocksDB snapshots held (rocksdb.num-snapshots): the published state, \
                     pinned read views, snapshot subscriptions, reads in progress",
                )?,
            )?,
            oldest_snapshot_age: registered(
                r,
                IntGauge::new(
                    "treelog_rocksdb_oldest_snapshot_age_seconds",
                    "Age of the oldest RocksDB snapshot held: what compaction must keep \
                     versions for",
                )?,
            )?,
        })
    }

    /// Reads RocksDB's properties into the gauges.
    pub(crate) fn refresh(&self, store: &Store) {
        for name in ALL_CFS {
            let prop = |p: &str| store.cf_property(name, p).unwrap_or(0) as i64;
            self.cf_keys
                .with_label_values(&[name])
                .set(prop("rocksdb.estimate-num-keys"));
            self.cf_sst_bytes
                .with_label_values(&[name])
                .set(prop("rocksdb.live-sst-files-size"));
            self.cf_memtable_bytes
                .with_label_values(&[name])
                .set(prop("rocksdb.cur-size-all-mem-tables"));
            self.cf_pending_compaction_bytes
                .with_label_values(&[name])
                .set(prop("rocksdb.estimate-pending-compaction-bytes"));
            if name == CF_INODES {
                self.block_cache_bytes
                    .set(prop("rocksdb.block-cache-usage"));
                // Database-wide properties, read through one family.
                self.snapshots.set(prop("rocksdb.num-snapshots"));
                let oldest = prop("rocksdb.oldest-snapshot-time");
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs() as i64);
                self.oldest_snapshot_age
                    .set(if oldest > 0 { (now - oldest).max(0) } else { 0 });
            }
        }
    }
}
