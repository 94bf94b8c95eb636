//! Prometheus metrics (`treelog_*`, base units in the names).
//!
//! The write path records one histogram per stage (queue wait, validate,
//! log write + fsync, index apply, end to end) and the group size; every
//! command is counted by kind and outcome. RocksDB properties and process
//! figures are collected on scrape (`refresh_*`), never on the hot path.
//! Metrics can be turned off (`Options::metrics = false`) to measure their
//! cost.

use prometheus::{
    exponential_buckets, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec, Opts, Registry,
};

use crate::store::{Store, ALL_CFS};

fn hist(name: &str, help: &str, buckets: Vec<f64>) -> prometheus::Result<Histogram> {
    Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets))
}

/// Buckets from 5 µs to ~1.3 s: fsyncs are ~75 µs here, slow disks take ms.
fn latency_buckets() -> Vec<f64> {
    exponential_buckets(5e-6, 2.0, 19).unwrap_or_default()
}

/// Read operations counted in `treelog_reads_total`.
pub const READ_OPS: [&str; 3] = ["stat", "stat_id", "list"];

pub struct Metrics {
    pub registry: Registry,
    // write path
    pub queue_wait: Histogram,
    pub validate: Histogram,
    pub log_write: Histogram,
    pub wal_sync: Histogram,
    pub index_apply: Histogram,
    pub end_to_end: Histogram,
    pub group_commands: Histogram,
    pub group_bytes: Histogram,
    pub ops: IntCounterVec,
    pub writer_failed: IntGauge,
    // watermarks and log
    pub last_seq: IntGauge,
    pub applied_seq: IntGauge,
    pub log_start: IntGauge,
    pub log_records: IntGauge,
    pub log_bytes: IntGauge,
    pub replay_records: IntCounter,
    pub replaying: IntGauge,
    // streams
    pub subscribers: IntGauge,
    pub delivered: IntCounter,
    pub cursor_acked: IntGaugeVec,
    pub cursor_lag: IntGaugeVec,
    pub cursors_expired: IntCounter,
    pub retention_removed: IntCounter,
    // reads
    pub reads: IntCounterVec,
    /// `reads{op, "ok"}` resolved once: stat, stat_id, list.
    pub reads_ok: [IntCounter; 3],
    pub path_lookups: IntCounter,
    pub read_seconds: HistogramVec,
    /// `read_seconds{op}` resolved once for `READ_OPS` (a label lookup
    /// hashes and locks: a tenth of a pipelined stat's cost).
    pub read_seconds_by_op: [Histogram; 3],
    pub writer_cache_hits: IntCounter,
    pub writer_cache_misses: IntCounter,
    pub inline_groups: IntCounter,
    // rocksdb
    pub cf_keys: IntGaugeVec,
    pub cf_sst_bytes: IntGaugeVec,
    pub cf_memtable_bytes: IntGaugeVec,
    pub cf_pending_compaction_bytes: IntGaugeVec,
    pub block_cache_bytes: IntGauge,
    /// Entries in the readers' index cache (read on scrape).
    pub read_cache_entries: IntGauge,
    /// Readers' cache lookups that went to RocksDB, by column family.
    pub read_cache_misses: IntCounterVec,
    /// Read views pinned for reads at an exact sequence.
    pub pinned_views: IntGauge,
}

impl Metrics {
    pub fn new() -> prometheus::Result<Metrics> {
        let r = Registry::new();
        let stage = |name: &str, help: &str| hist(name, help, latency_buckets());
        let reads = IntCounterVec::new(
            Opts::new("treelog_reads_total", "Read operations by kind and outcome"),
            &["op", "outcome"],
        )?;
        let reads_ok = READ_OPS.map(|op| reads.with_label_values(&[op, "ok"]));
        let read_seconds = HistogramVec::new(
            HistogramOpts::new("treelog_read_seconds", "Latency of read operations")
                .buckets(latency_buckets()),
            &["op"],
        )?;
        let read_seconds_by_op = READ_OPS.map(|op| read_seconds.with_label_values(&[op]));
        let m = Metrics {
            queue_wait: stage(
                "treelog_write_queue_wait_seconds",
                "Time a command waited in the queue before its group started",
            )?,
            validate: stage(
                "treelog_write_validate_seconds",
                "Time to validate a group's commands and build its events and index changes",
            )?,
            log_write: stage(
                "treelog_write_log_seconds",
                "Time to append a group's log records to the WAL (without fsync)",
            )?,
            wal_sync: stage(
                "treelog_write_sync_seconds",
                "Time of one WAL fsync (it covers every group appended before it)",
            )?,
            index_apply: stage(
                "treelog_write_index_apply_seconds",
                "Time to write a group's index changes",
            )?,
            end_to_end: stage(
                "treelog_write_end_to_end_seconds",
                "Time from enqueueing a command to its reply",
            )?,
            group_commands: hist(
                "treelog_write_group_commands",
                "Commands per group commit",
                vec![
                    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
                ],
            )?,
            group_bytes: hist(
                "treelog_write_group_bytes",
                "Log bytes written per group commit",
                exponential_buckets(64.0, 4.0, 10)?,
            )?,
            ops: IntCounterVec::new(
                Opts::new(
                    "treelog_operations_total",
                    "Commands by kind and outcome (ok or an error kind)",
                ),
                &["op", "outcome"],
            )?,
            writer_failed: IntGauge::new(
                "treelog_writer_failed",
                "1 when the writer stopped after a failed write",
            )?,
            last_seq: IntGauge::new("treelog_last_seq", "Highest committed log sequence")?,
            applied_seq: IntGauge::new(
                "treelog_applied_seq",
                "Highest sequence applied to the index",
            )?,
            log_start: IntGauge::new("treelog_log_start_seq", "First sequence still in the log")?,
            log_records: IntGauge::new("treelog_log_records", "Records in the log")?,
            log_bytes: IntGauge::new("treelog_log_bytes", "Bytes of record values in the log")?,
            replay_records: IntCounter::new(
                "treelog_replay_records_total",
                "Records replayed into the index at open",
            )?,
            replaying: IntGauge::new(
                "treelog_replay_running",
                "1 while the log is being replayed at open",
            )?,
            subscribers: IntGauge::new(
                "treelog_stream_subscribers",
                "Change-stream subscriptions open on the server",
            )?,
            delivered: IntCounter::new(
                "treelog_stream_items_delivered_total",
                "Change-stream items sent to subscribers",
            )?,
            cursor_acked: IntGaugeVec::new(
                Opts::new(
                    "treelog_cursor_acked_seq",
                    "Acknowledged position of each durable cursor",
                ),
                &["cursor"],
            )?,
            cursor_lag: IntGaugeVec::new(
                Opts::new(
                    "treelog_cursor_lag_records",
                    "Records between a cursor's position and the log's end",
                ),
                &["cursor"],
            )?,
            cursors_expired: IntCounter::new(
                "treelog_cursors_expired_total",
                "Cursors expired by retention",
            )?,
            retention_removed: IntCounter::new(
                "treelog_retention_removed_records_total",
                "Log records removed by retention",
            )?,
            reads,
            reads_ok,
            path_lookups: IntCounter::new(
                "treelog_path_lookups_total",
                "Edge lookups made while resolving paths",
            )?,
            read_seconds,
            read_seconds_by_op,
            writer_cache_hits: IntCounter::new(
                "treelog_writer_cache_hits_total",
                "Index lookups during validation served by the writer's read cache",
            )?,
            writer_cache_misses: IntCounter::new(
                "treelog_writer_cache_misses_total",
                "Index lookups during validation that went to RocksDB",
            )?,
            inline_groups: IntCounter::new(
                "treelog_write_groups_inline_total",
                "Small groups the writer committed itself, nothing being in flight or queued behind them (the rest go through the syncer and applier threads)",
            )?,
            cf_keys: IntGaugeVec::new(
                Opts::new(
                    "treelog_rocksdb_estimated_keys",
                    "rocksdb.estimate-num-keys per column family",
                ),
                &["cf"],
            )?,
            cf_sst_bytes: IntGaugeVec::new(
                Opts::new(
                    "treelog_rocksdb_live_sst_bytes",
                    "rocksdb.live-sst-files-size per column family",
                ),
                &["cf"],
            )?,
            cf_memtable_bytes: IntGaugeVec::new(
                Opts::new(
                    "treelog_rocksdb_memtable_bytes",
                    "rocksdb.cur-size-all-mem-tables per column family",
                ),
                &["cf"],
            )?,
            cf_pending_compaction_bytes: IntGaugeVec::new(
                Opts::new(
                    "treelog_rocksdb_pending_compaction_bytes",
                    "rocksdb.estimate-pending-compaction-bytes per column family",
                ),
                &["cf"],
            )?,
            block_cache_bytes: IntGauge::new(
                "treelog_rocksdb_block_cache_usage_bytes",
                "Block cache usage",
            )?,
            read_cache_entries: IntGauge::new(
                "treelog_read_cache_entries",
                "Index entries in the readers' cache (shared level)",
            )?,
            pinned_views: IntGauge::new(
                "treelog_pinned_read_views",
                "Committed states pinned for reads at an exact sequence (paged and recursive listings)",
            )?,
            read_cache_misses: IntCounterVec::new(
                Opts::new(
                    "treelog_read_cache_misses_total",
                    "Readers' index lookups the cache did not answer (read from RocksDB), by column family",
                ),
                &["cf"],
            )?,
            registry: r,
        };
        m.register()?;
        Ok(m)
    }

    /// Counts a read (op index into `READ_OPS`) and its path lookups.
    pub fn read(&self, op: usize, ok_or_kind: Option<&str>, lookups: u64) {
        match ok_or_kind {
            None => self.reads_ok[op].inc(),
            Some(kind) => self.reads.with_label_values(&[READ_OPS[op], kind]).inc(),
        }
        if lookups > 0 {
            self.path_lookups.inc_by(lookups);
        }
    }

    fn register(&self) -> prometheus::Result<()> {
        let r = &self.registry;
        for h in [
            &self.queue_wait,
            &self.validate,
            &self.log_write,
            &self.wal_sync,
            &self.index_apply,
            &self.end_to_end,
            &self.group_commands,
            &self.group_bytes,
        ] {
            r.register(Box::new(h.clone()))?;
        }
        for g in [
            &self.writer_failed,
            &self.last_seq,
            &self.applied_seq,
            &self.log_start,
            &self.log_records,
            &self.log_bytes,
            &self.replaying,
            &self.subscribers,
            &self.block_cache_bytes,
            &self.read_cache_entries,
            &self.pinned_views,
        ] {
            r.register(Box::new(g.clone()))?;
        }
        for c in [
            &self.replay_records,
            &self.delivered,
            &self.cursors_expired,
            &self.retention_removed,
            &self.path_lookups,
            &self.writer_cache_hits,
            &self.writer_cache_misses,
            &self.inline_groups,
        ] {
            r.register(Box::new(c.clone()))?;
        }
        for v in [&self.ops, &self.reads, &self.read_cache_misses] {
            r.register(Box::new(v.clone()))?;
        }
        for v in [
            &self.cursor_acked,
            &self.cursor_lag,
            &self.cf_keys,
            &self.cf_sst_bytes,
            &self.cf_memtable_bytes,
            &self.cf_pending_compaction_bytes,
        ] {
            r.register(Box::new(v.clone()))?;
        }
        r.register(Box::new(self.read_seconds.clone()))?;
        #[cfg(target_os = "linux")]
        r.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        Ok(())
    }

    /// Reads RocksDB properties into the gauges (called on scrape).
    pub fn refresh_engine_stats(&self, store: &Store) {
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
            if name == crate::store::CF_INODES {
                self.block_cache_bytes
                    .set(prop("rocksdb.block-cache-usage"));
            }
        }
    }

    /// The readers' cache miss counters, `[inodes, edges]` (indexed by
    /// `Cf as usize`); both series exist from the start.
    pub fn read_cache_miss_counters(&self) -> [IntCounter; 2] {
        [
            self.read_cache_misses.with_label_values(&["inodes"]),
            self.read_cache_misses.with_label_values(&["edges"]),
        ]
    }

    /// Registers a replica's metrics (see [`ReplicaMetrics`]).
    pub fn register_replica(&self) -> prometheus::Result<ReplicaMetrics> {
        let g = |name: &str, help: &str| IntGauge::new(name, help);
        let c = |name: &str, help: &str| IntCounter::new(name, help);
        let m = ReplicaMetrics {
            leader_committed_seq: g(
                "treelog_replica_leader_committed_seq",
                "The source's committed sequence, as the replica last heard it",
            )?,
            lag_records: g(
                "treelog_replica_lag_records",
                "Records the replica is behind its source",
            )?,
            lag_seconds: prometheus::Gauge::new(
                "treelog_replica_lag_seconds",
                "How old the replica's newest state is while its source has a newer one (0 when caught up)",
            )?,
            connected: g(
                "treelog_replica_connected",
                "1 while the replica streams from its source",
            )?,
            reconnects: c(
                "treelog_replica_reconnects_total",
                "Times the replica connected to its source again after losing it",
            )?,
            rebootstraps: c(
                "treelog_replica_rebootstraps_total",
                "Times the replica bootstrapped again from a new checkpoint (its position was compacted on the source, or its history diverged)",
            )?,
            bootstrap_bytes: g(
                "treelog_replica_bootstrap_bytes",
                "Bytes of checkpoint fetched by the last bootstrap",
            )?,
            bootstrap_seconds: prometheus::Gauge::new(
                "treelog_replica_bootstrap_seconds",
                "Duration of the last bootstrap (fetch, check and install)",
            )?,
        };
        let r = &self.registry;
        for g in [
            &m.leader_committed_seq,
            &m.lag_records,
            &m.connected,
            &m.bootstrap_bytes,
        ] {
            r.register(Box::new(g.clone()))?;
        }
        r.register(Box::new(m.lag_seconds.clone()))?;
        r.register(Box::new(m.bootstrap_seconds.clone()))?;
        r.register(Box::new(m.reconnects.clone()))?;
        r.register(Box::new(m.rebootstraps.clone()))?;
        Ok(m)
    }

    /// Prometheus text exposition of everything.
    pub fn render(&self) -> String {
        use prometheus::Encoder;
        let mut buf = Vec::new();
        let enc = prometheus::TextEncoder::new();
        if enc.encode(&self.registry.gather(), &mut buf).is_err() {
            return String::new();
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}

/// A replica's metrics (`treelog_replica_*`), set on scrape from its
/// replica state (`crate::replica`), which outlives a re-bootstrap: the
/// counters go on from where they were.
pub struct ReplicaMetrics {
    pub leader_committed_seq: IntGauge,
    pub lag_records: IntGauge,
    pub lag_seconds: prometheus::Gauge,
    pub connected: IntGauge,
    pub reconnects: IntCounter,
    pub rebootstraps: IntCounter,
    pub bootstrap_bytes: IntGauge,
    pub bootstrap_seconds: prometheus::Gauge,
}
