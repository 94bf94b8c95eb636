//! Following [`Treelog`]'s log: change streams, durable cursors, log
//! retention, and the metrics that watch them.

use std::sync::Arc;

use crate::commit::shared::Shared;
use crate::error::Result;
use crate::retention::{CursorInfo, RetentionPolicy, RetentionReport};
use crate::stream::{SubscribeOptions, Subscription};
use crate::treelog::Treelog;

impl Treelog {
    /// Subscribes to the change stream (see [`crate::stream`]).
    pub fn subscribe(&self, o: SubscribeOptions) -> Result<Subscription> {
        let mut from = o.from;
        if let Some(name) = &o.cursor {
            let default_acked = match from {
                crate::stream::StartFrom::Seq(n) => n.max(1) - 1,
                _ => self.committed_seq(),
            };
            let retention = self.shared.retention();
            let existed = retention.cursor_acked(name).is_some();
            let acked = retention.open_cursor(self.store(), name, default_acked)?;
            if existed || from != crate::stream::StartFrom::Snapshot {
                from = crate::stream::StartFrom::Seq(acked + 1);
            }
        }
        // Resync by default when the caller asked for a snapshot-based
        // model, whether or not a cursor made this run resume instead.
        let resync = o
            .resync_on_move_in
            .or(Some(o.from == crate::stream::StartFrom::Snapshot));
        Subscription::new(self.shared.clone(), o.filter, from, resync, o.cursor)
    }

    /// Acknowledges that the consumer of cursor `name` processed every record
    /// up to `seq`.
    pub fn ack(&self, name: &str, seq: u64) -> Result<()> {
        self.shared
            .retention()
            .ack(self.store(), self.committed_seq(), name, seq)
    }

    pub fn cursors(&self) -> Vec<CursorInfo> {
        self.shared.retention().list_cursors(self.committed_seq())
    }

    pub fn drop_cursor(&self, name: &str) -> Result<()> {
        self.shared.retention().drop_cursor(self.store(), name)
    }

    /// Runs one retention pass now.
    pub fn run_retention(&self, policy: &RetentionPolicy) -> Result<RetentionReport> {
        run_retention(&self.shared, policy)
    }

    /// The metrics registry, when metrics are on.
    pub fn metrics(&self) -> Option<&Arc<crate::metrics::Metrics>> {
        self.shared.metrics()
    }

    /// Refreshes scrape-time gauges (RocksDB properties, watermarks,
    /// cursors) and renders the Prometheus text format.
    pub fn render_metrics(&self) -> String {
        let Some(m) = self.shared.metrics() else {
            return String::new();
        };
        m.rocksdb.refresh(self.store());
        m.read
            .read_cache_entries
            .set(self.publication().cache().len() as i64);
        m.log
            .committed(self.committed_seq(), self.log_start(), self.log_bytes());
        m.write
            .writer_failed
            .set(i64::from(self.writer_failure().is_some()));
        let log = &m.log;
        log.cursor_acked.reset();
        log.cursor_lag.reset();
        for c in self.cursors() {
            log.cursor_acked
                .with_label_values(&[c.name.as_str()])
                .set(c.state.acked as i64);
            log.cursor_lag
                .with_label_values(&[c.name.as_str()])
                .set(c.lag as i64);
        }
        m.render()
    }

    pub fn log_start(&self) -> u64 {
        self.shared.retention().log_start()
    }

    /// Bytes of record values in the log.
    pub fn log_bytes(&self) -> u64 {
        self.shared.retention().log_bytes()
    }
}

/// One retention pass over the log as committed now; on a consensus node,
/// nothing the protocol may still read goes.
pub(crate) fn run_retention(shared: &Shared, policy: &RetentionPolicy) -> Result<RetentionReport> {
    let store = shared.store();
    let ceiling = crate::replication::consensus::purge_ceiling(store)?;
    shared.retention().run(
        store,
        shared.committed(),
        ceiling,
        shared.publication().tail(),
        shared.metrics().map(|m| &**m),
        policy,
    )
}
