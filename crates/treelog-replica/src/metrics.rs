//! A replica's metrics (`treelog_replica_*`), computed when the store's
//! registry is scraped from the replica state, which outlives a
//! re-bootstrap (its counters go on from where they were), and the store's
//! status.

use std::sync::{Arc, Weak};

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{Gauge, IntCounter, IntGauge};
use treelog::replication::ReplicaState;
use treelog::Treelog;

/// The replica's series, refreshed on each scrape.
pub struct ReplicaMetrics {
    state: Arc<ReplicaState>,
    store: Weak<Treelog>,
    leader_committed_seq: IntGauge,
    lag_records: IntGauge,
    lag_seconds: Gauge,
    connected: IntGauge,
    reconnects: IntCounter,
    rebootstraps: IntCounter,
    bootstrap_bytes: IntGauge,
    bootstrap_seconds: Gauge,
    descs: Vec<Desc>,
}

impl ReplicaMetrics {
    /// The series of the replica `state` serving `store`, registered on
    /// the store's registry (nothing when the store has no metrics).
    pub fn register(state: &Arc<ReplicaState>, store: &Arc<Treelog>) -> prometheus::Result<()> {
        let Some(m) = store.metrics() else {
            return Ok(());
        };
        let g = |name: &str, help: &str| IntGauge::new(name, help);
        let c = |name: &str, help: &str| IntCounter::new(name, help);
        let mut r = ReplicaMetrics {
            state: state.clone(),
            store: Arc::downgrade(store),
            leader_committed_seq: g(
                "treelog_replica_leader_committed_seq",
                "The source's committed sequence, as the replica last heard it",
            )?,
            lag_records: g(
                "treelog_replica_lag_records",
                "Records the replica is behind its source",
            )?,
            lag_seconds: Gauge::new(
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
            bootstrap_seconds: Gauge::new(
                "treelog_replica_bootstrap_seconds",
                "Duration of the last bootstrap (fetch, check and install)",
            )?,
            descs: Vec::new(),
        };
        r.descs = r
            .collectors()
            .iter()
            .flat_map(|c| c.desc())
            .cloned()
            .collect();
        m.registry().register(Box::new(r))
    }

    fn collectors(&self) -> [&dyn Collector; 8] {
        [
            &self.leader_committed_seq,
            &self.lag_records,
            &self.lag_seconds,
            &self.connected,
            &self.reconnects,
            &self.rebootstraps,
            &self.bootstrap_bytes,
            &self.bootstrap_seconds,
        ]
    }

    /// Sets the series from the status and counters as they are now.
    fn refresh(&self) {
        let c = self.state.counters();
        if let Some(t) = self.store.upgrade() {
            let status = t.replication().status();
            self.leader_committed_seq
                .set(status.leader_committed_seq as i64);
            self.lag_records.set(status.lag_records as i64);
            self.lag_seconds.set(status.lag_ms as f64 / 1e3);
        }
        self.connected.set(i64::from(c.connected));
        self.reconnects
            .inc_by(c.reconnects.saturating_sub(self.reconnects.get()));
        self.rebootstraps
            .inc_by(c.rebootstraps.saturating_sub(self.rebootstraps.get()));
        self.bootstrap_bytes.set(c.bootstrap_bytes as i64);
        self.bootstrap_seconds.set(c.bootstrap_ms as f64 / 1e3);
    }
}

impl Collector for ReplicaMetrics {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.refresh();
        self.collectors().iter().flat_map(|c| c.collect()).collect()
    }
}
