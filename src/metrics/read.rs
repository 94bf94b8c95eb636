//! Reads' series (`treelog_reads_total`, `treelog_read_*`,
//! `treelog_path_lookups_total`, `treelog_pinned_read_views`).

use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
};

use super::{latency_buckets, registered};

/// Read operations counted in `treelog_reads_total`.
pub const READ_OPS: [&str; 3] = ["stat", "stat_id", "list"];

/// Updated by the readers (the library's reads, and those who serve them).
pub struct ReadMetrics {
    reads: IntCounterVec,
    /// `reads{op, "ok"}` resolved once: stat, stat_id, list.
    reads_ok: [IntCounter; 3],
    path_lookups: IntCounter,
    read_seconds: HistogramVec,
    /// `read_seconds{op}` resolved once for `READ_OPS` (a label lookup
    /// hashes and locks: a tenth of a pipelined stat's cost).
    read_seconds_by_op: [Histogram; 3],
    /// Entries in the readers' index cache (read on scrape).
    pub(crate) read_cache_entries: IntGauge,
    /// Readers' cache lookups that went to RocksDB, by column family.
    read_cache_misses: IntCounterVec,
    /// Read views pinned for reads at an exact sequence.
    pub(crate) pinned_views: IntGauge,
}

impl ReadMetrics {
    pub(super) fn new(r: &Registry) -> prometheus::Result<ReadMetrics> {
        let reads = registered(
            r,
            IntCounterVec::new(
                Opts::new("treelog_reads_total", "Read operations by kind and outcome"),
                &["op", "outcome"],
            )?,
        )?;
        let read_seconds = registered(
            r,
            HistogramVec::new(
                HistogramOpts::new("treelog_read_seconds", "Latency of read operations")
                    .buckets(latency_buckets()),
                &["op"],
            )?,
        )?;
        let read_cache_misses = registered(
            r,
            IntCounterVec::new(
                Opts::new(
                    "treelog_read_cache_misses_total",
                    "Readers' index lookups the cache did not answer (read from RocksDB), by column family",
                ),
                &["cf"],
            )?,
        )?;
        Ok(ReadMetrics {
            reads_ok: READ_OPS.map(|op| reads.with_label_values(&[op, "ok"])),
            reads,
            path_lookups: registered(
                r,
                IntCounter::new(
                    "treelog_path_lookups_total",
                    "Edge lookups made while resolving paths",
                )?,
            )?,
            read_seconds_by_op: READ_OPS.map(|op| read_seconds.with_label_values(&[op])),
            read_seconds,
            read_cache_entries: registered(
                r,
                IntGauge::new(
                    "treelog_read_cache_entries",
                    "Index entries in the readers' cache (shared level)",
                )?,
            )?,
            read_cache_misses,
            pinned_views: registered(
                r,
                IntGauge::new(
                    "treelog_pinned_read_views",
                    "Committed states pinned for reads at an exact sequence (paged and recursive listings)",
                )?,
            )?,
        })
    }

    /// Counts a read (`op` an index into [`READ_OPS`]) and its path lookups.
    pub(crate) fn count(&self, op: usize, ok_or_kind: Option<&str>, lookups: u64) {
        match ok_or_kind {
            None => self.reads_ok[op].inc(),
            Some(kind) => self.reads.with_label_values(&[READ_OPS[op], kind]).inc(),
        }
        if lookups > 0 {
            self.path_lookups.inc_by(lookups);
        }
    }

    /// Observes the latency of a read `op` served (one of [`READ_OPS`] by
    /// index when `by_op` is given, else by name).
    pub fn observe(&self, op: &str, seconds: f64) {
        match READ_OPS.iter().position(|o| *o == op) {
            Some(i) => self.read_seconds_by_op[i].observe(seconds),
            None => self.read_seconds.with_label_values(&[op]).observe(seconds),
        }
    }

    /// The readers' cache miss counters, `[inodes, edges]` (indexed by
    /// `Cf as usize`); both series exist from the start.
    pub(crate) fn cache_miss_counters(&self) -> [IntCounter; 2] {
        [
            self.read_cache_misses.with_label_values(&["inodes"]),
            self.read_cache_misses.with_label_values(&["edges"]),
        ]
    }
}
