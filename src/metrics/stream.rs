//! Change streams' series (`treelog_stream_*`).

use prometheus::{IntCounter, IntGauge, Registry};

use super::registered;

/// Updated by whoever delivers change streams (the server).
pub struct StreamMetrics {
    pub subscribers: IntGauge,
    pub delivered: IntCounter,
}

impl StreamMetrics {
    pub(super) fn new(r: &Registry) -> prometheus::Result<StreamMetrics> {
        Ok(StreamMetrics {
            subscribers: registered(
                r,
                IntGauge::new(
                    "treelog_stream_subscribers",
                    "Change-stream subscriptions open on the server",
                )?,
            )?,
            delivered: registered(
                r,
                IntCounter::new(
                    "treelog_stream_items_delivered_total",
                    "Change-stream items sent to subscribers",
                )?,
            )?,
        })
    }
}
