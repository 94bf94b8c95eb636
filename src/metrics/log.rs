//! The log's series: watermarks, size, replay, retention and cursors.

use prometheus::{IntCounter, IntGauge, IntGaugeVec, Opts, Registry};

use super::registered;

/// Updated by the committer, replay and retention, and refreshed on scrape.
pub struct LogMetrics {
    pub(crate) last_seq: IntGauge,
    pub(crate) applied_seq: IntGauge,
    pub(crate) log_start: IntGauge,
    pub(crate) log_records: IntGauge,
    pub(crate) log_bytes: IntGauge,
    pub(crate) replay_records: IntCounter,
    pub(crate) replaying: IntGauge,
    pub(crate) cursor_acked: IntGaugeVec,
    pub(crate) cursor_lag: IntGaugeVec,
    pub(crate) cursors_expired: IntCounter,
    pub(crate) retention_removed: IntCounter,
}

impl LogMetrics {
    pub(super) fn new(r: &Registry) -> prometheus::Result<LogMetrics> {
        let gauge = |name: &str, help: &str| registered(r, IntGauge::new(name, help)?);
        let counter = |name: &str, help: &str| registered(r, IntCounter::new(name, help)?);
        let per_cursor = |name: &str, help: &str| {
            registered(r, IntGaugeVec::new(Opts::new(name, help), &["cursor"])?)
        };
        Ok(LogMetrics {
            last_seq: gauge("treelog_last_seq", "Highest committed log sequence")?,
            applied_seq: gauge(
                "treelog_applied_seq",
                "Highest sequence applied to the index",
            )?,
            log_start: gauge("treelog_log_start_seq", "First sequence still in the log")?,
            log_records: gauge("treelog_log_records", "Records in the log")?,
            log_bytes: gauge("treelog_log_bytes", "Bytes of record values in the log")?,
            replay_records: counter(
                "treelog_replay_records_total",
                "Records replayed into the index at open",
            )?,
            replaying: gauge(
                "treelog_replay_running",
                "1 while the log is being replayed at open",
            )?,
            cursor_acked: per_cursor(
                "treelog_cursor_acked_seq",
                "Acknowledged position of each durable cursor",
            )?,
            cursor_lag: per_cursor(
                "treelog_cursor_lag_records",
                "Records between a cursor's position and the log's end",
            )?,
            cursors_expired: counter(
                "treelog_cursors_expired_total",
                "Cursors expired by retention",
            )?,
            retention_removed: counter(
                "treelog_retention_removed_records_total",
                "Log records removed by retention",
            )?,
        })
    }

    /// The committed watermark moved to `seq`, with the log's start and
    /// bytes as they are now.
    pub(crate) fn committed(&self, seq: u64, log_start: u64, log_bytes: u64) {
        self.last_seq.set(seq as i64);
        self.applied_seq.set(seq as i64);
        self.log_start.set(log_start as i64);
        self.log_records
            .set((seq + 1).saturating_sub(log_start) as i64);
        self.log_bytes.set(log_bytes as i64);
    }
}
