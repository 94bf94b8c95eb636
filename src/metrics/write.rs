//! The write path's series (`treelog_write_*`, `treelog_operations_total`,
//! `treelog_writer_*`).

use prometheus::{
    exponential_buckets, Histogram, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
};

use super::{hist, latency_buckets, registered};

/// Updated by the writer and its pipeline.
pub struct WriteMetrics {
    pub(crate) queue_wait: Histogram,
    pub(crate) validate: Histogram,
    pub(crate) log_write: Histogram,
    pub(crate) wal_sync: Histogram,
    pub(crate) index_apply: Histogram,
    pub(crate) end_to_end: Histogram,
    pub(crate) group_commands: Histogram,
    pub(crate) group_bytes: Histogram,
    pub(crate) ops: IntCounterVec,
    pub(crate) writer_failed: IntGauge,
    pub(crate) writer_cache_hits: IntCounter,
    pub(crate) writer_cache_misses: IntCounter,
    pub(crate) inline_groups: IntCounter,
}

/// The writer's mean group and stage times since the store opened, from
/// [`WriteMetrics::groups`] (what a benchmark prints beside its figures).
#[derive(Debug, Clone, Copy)]
pub struct GroupStages {
    /// Commands per committed group.
    pub commands_per_group: f64,
    /// Commands per WAL fsync.
    pub commands_per_sync: f64,
    /// The share of groups committed inline by their caller (0..=1).
    pub inline_share: f64,
    /// Seconds per group: validation, then the log append.
    pub validate: f64,
    pub log_write: f64,
    /// Seconds per fsync, then per index apply.
    pub wal_sync: f64,
    pub index_apply: f64,
    /// Seconds a command waited in the queue.
    pub queue_wait: f64,
}

impl WriteMetrics {
    /// The writer's means so far.
    pub fn groups(&self) -> GroupStages {
        let mean = |h: &Histogram| h.get_sample_sum() / (h.get_sample_count().max(1) as f64);
        let groups = self.group_commands.get_sample_count().max(1) as f64;
        GroupStages {
            commands_per_group: mean(&self.group_commands),
            commands_per_sync: self.group_commands.get_sample_sum()
                / self.wal_sync.get_sample_count().max(1) as f64,
            inline_share: self.inline_groups.get() as f64 / groups,
            validate: mean(&self.validate),
            log_write: mean(&self.log_write),
            wal_sync: mean(&self.wal_sync),
            index_apply: mean(&self.index_apply),
            queue_wait: mean(&self.queue_wait),
        }
    }

    pub(super) fn new(r: &Registry) -> prometheus::Result<WriteMetrics> {
        let stage = |name: &str, help: &str| registered(r, hist(name, help, latency_buckets())?);
        let counter = |name: &str, help: &str| registered(r, IntCounter::new(name, help)?);
        Ok(WriteMetrics {
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
            group_commands: registered(
                r,
                hist(
                    "treelog_write_group_commands",
                    "Commands per group commit",
                    vec![
                        1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
                    ],
                )?,
            )?,
            group_bytes: registered(
                r,
                hist(
                    "treelog_write_group_bytes",
                    "Log bytes written per group commit",
                    exponential_buckets(64.0, 4.0, 10)?,
                )?,
            )?,
            ops: registered(
                r,
                IntCounterVec::new(
                    Opts::new(
                        "treelog_operations_total",
                        "Commands by kind and outcome (ok or an error kind)",
                    ),
                    &["op", "outcome"],
                )?,
            )?,
            writer_failed: registered(
                r,
                IntGauge::new(
                    "treelog_writer_failed",
                    "1 when the writer stopped after a failed write",
                )?,
            )?,
            writer_cache_hits: counter(
                "treelog_writer_cache_hits_total",
                "Index lookups during validation served by the writer's read cache",
            )?,
            writer_cache_misses: counter(
                "treelog_writer_cache_misses_total",
                "Index lookups during validation that went to RocksDB",
            )?,
            inline_groups: counter(
                "treelog_write_groups_inline_total",
                "Small groups the writer committed itself, nothing being in flight or queued behind them (the rest go through the syncer and applier threads)",
            )?,
        })
    }
}
