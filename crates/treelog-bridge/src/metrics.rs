//! The bridge's metrics (`treelog_bridge_*`, docs/OPERATIONS.md), in the
//! registry of the process that runs it: the server's when the bridge runs
//! inside `treelog serve`, its own behind `--metrics-listen` otherwise.

use prometheus::{
    exponential_buckets, Gauge, Histogram, HistogramOpts, IntCounter, IntGauge, Registry,
};

pub struct BridgeMetrics {
    /// The last treelog sequence the bus acknowledged in full.
    pub published_seq: IntGauge,
    /// The source's committed sequence, as last heard.
    pub committed_seq: IntGauge,
    pub lag_records: IntGauge,
    pub lag_seconds: Gauge,
    /// From a message's send to the bus's ack.
    pub publish_seconds: Histogram,
    /// From a record's commit time to the bus's ack of its last part.
    pub commit_to_ack_seconds: Histogram,
    pub records: IntCounter,
    pub messages: IntCounter,
    pub bytes: IntCounter,
    /// Attempts started again after an error (with backoff).
    pub retries: IntCounter,
    /// Messages the bus reported as duplicates (it had them already).
    pub duplicates: IntCounter,
    /// 1 while an attempt streams to the bus.
    pub connected: IntGauge,
    /// 1 when the bridge stopped on an error it cannot retry (a gap in
    /// the log, another namespace's stream): an operator must act.
    pub failed: IntGauge,
}

impl BridgeMetrics {
    /// Registers the metrics in `r`.
    pub fn register(r: &Registry) -> prometheus::Result<BridgeMetrics> {
        let lat = |name: &str, help: &str| {
            Histogram::with_opts(
                HistogramOpts::new(name, help)
                    .buckets(exponential_buckets(50e-6, 2.0, 20).unwrap_or_default()),
            )
        };
        let m = BridgeMetrics {
            published_seq: IntGauge::new(
                "treelog_bridge_published_seq",
                "Last treelog sequence the bus acknowledged in full",
            )?,
            committed_seq: IntGauge::new(
                "treelog_bridge_committed_seq",
                "The source's committed sequence, as the bridge last heard it",
            )?,
            lag_records: IntGauge::new(
                "treelog_bridge_lag_records",
                "Committed records not yet acknowledged by the bus",
            )?,
            lag_seconds: Gauge::new(
                "treelog_bridge_lag_seconds",
                "Age of the oldest committed record not yet acknowledged by the bus (0 when caught up)",
            )?,
            publish_seconds: lat(
                "treelog_bridge_publish_seconds",
                "Time from sending a message to the bus's acknowledgement",
            )?,
            commit_to_ack_seconds: lat(
                "treelog_bridge_commit_to_ack_seconds",
                "Time from a record's commit to the bus's acknowledgement of it",
            )?,
            records: IntCounter::new("treelog_bridge_records_total", "Records published")?,
            messages: IntCounter::new(
                "treelog_bridge_messages_total",
                "Messages published (a record split in parts counts each part)",
            )?,
            bytes: IntCounter::new("treelog_bridge_bytes_total", "Payload bytes published")?,
            retries: IntCounter::new(
                "treelog_bridge_retries_total",
                "Attempts started again after an error",
            )?,
            duplicates: IntCounter::new(
                "treelog_bridge_duplicates_total",
                "Messages the bus reported as duplicates",
            )?,
            connected: IntGauge::new(
                "treelog_bridge_connected",
                "1 while the bridge streams to the bus",
            )?,
            failed: IntGauge::new(
                "treelog_bridge_failed",
                "1 when the bridge stopped on an error it cannot retry",
            )?,
        };
        for g in [
            &m.published_seq,
            &m.committed_seq,
            &m.lag_records,
            &m.connected,
            &m.failed,
        ] {
            r.register(Box::new(g.clone()))?;
        }
        r.register(Box::new(m.lag_seconds.clone()))?;
        r.register(Box::new(m.publish_seconds.clone()))?;
        r.register(Box::new(m.commit_to_ack_seconds.clone()))?;
        for c in [&m.records, &m.messages, &m.bytes, &m.retries, &m.duplicates] {
            r.register(Box::new(c.clone()))?;
        }
        Ok(m)
    }
}
