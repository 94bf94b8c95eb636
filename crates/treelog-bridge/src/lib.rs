//! The change stream beyond one machine: a bridge that publishes treelog's
//! committed log into NATS JetStream, exactly once, in order, with no gap
//! (docs/BRIDGE.md is the reference).
//!
//! - [`payload`]: what a message holds (the record as `treelog tail
//!   --json` prints it, or postcard), its split into parts below the bus's
//!   message size, its headers.
//! - [`sink`]: the bus as a small trait; [`nats`] is JetStream.
//! - [`bridge`]: the loop. It reads the bus's last message of the
//!   namespace, streams the log from the record after it (a durable
//!   treelog cursor keeps the log's retention behind what the bus has
//!   not acknowledged), publishes with many messages in flight, each
//!   guarded by the sequence of the one before, and acknowledges the
//!   cursor only after the bus acknowledged.
//! - [`metrics`]: the `treelog_bridge_*` series.

pub mod bridge;
pub mod metrics;
pub mod nats;
pub mod payload;
pub mod sink;

use std::sync::Arc;

use tokio::sync::watch;

pub use bridge::{BridgeConfig, BridgeError, Start};
pub use metrics::BridgeMetrics;
pub use nats::{NatsConfig, NatsSink};
pub use payload::Encoding;

/// A bridge running as a task: `shutdown()` stops it.
pub struct BridgeHandle {
    metrics: Arc<BridgeMetrics>,
    stop: watch::Sender<bool>,
    done: tokio::task::JoinHandle<Result<(), BridgeError>>,
}

impl BridgeHandle {
    pub fn metrics(&self) -> &Arc<BridgeMetrics> {
        &self.metrics
    }

    /// Waits until the bridge stops by itself (an error it cannot retry).
    pub async fn ended(&mut self) -> Result<(), BridgeError> {
        (&mut self.done)
            .await
            .map_err(|e| BridgeError::Task(format!("bridge task: {e}")))?
    }

    /// Stops it: the messages in flight are waited for (a few seconds at
    /// most) and what the bus acknowledged is acknowledged to the cursor.
    pub async fn shutdown(self) -> Result<(), BridgeError> {
        let _ = self.stop.send(true);
        self.done
            .await
            .map_err(|e| BridgeError::Task(format!("bridge task: {e}")))?
    }
}

/// Starts a NATS bridge in the current runtime, its metrics registered in
/// `registry`.
pub fn start_nats(
    cfg: BridgeConfig,
    nats: NatsConfig,
    registry: &prometheus::Registry,
) -> Result<BridgeHandle, BridgeError> {
    let metrics =
        Arc::new(BridgeMetrics::register(registry).map_err(|e| {
            BridgeError::Task(format!("cannot register the bridge's metrics: {e}"))
        })?);
    let (stop, stop_rx) = watch::channel(false);
    let done = tokio::spawn(bridge::run(
        cfg,
        NatsSink::new(nats),
        metrics.clone(),
        stop_rx,
    ));
    Ok(BridgeHandle {
        metrics,
        stop,
        done,
    })
}

/// Serves `registry` as Prometheus text on `GET /metrics` (a bridge run on
/// its own, `treelog bridge nats --metrics-listen`), until the task is
/// dropped: bounded as a server's HTTP port is ([`treelog_http::Limits`]'s
/// defaults: connections, per address, header time, age).
pub async fn serve_metrics(listener: tokio::net::TcpListener, registry: prometheus::Registry) {
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let r = registry.clone();
            async move {
                use prometheus::Encoder;
                let mut buf = Vec::new();
                let _ = prometheus::TextEncoder::new().encode(&r.gather(), &mut buf);
                String::from_utf8(buf).unwrap_or_default()
            }
        }),
    );
    // Never shut down: the task is dropped with the bridge.
    let (_keep, never) = tokio::sync::watch::channel(false);
    treelog_http::serve(
        listener,
        app,
        treelog_http::Limits::default(),
        never,
        |peer| tracing::debug!(%peer, "refused a metrics connection: too many"),
    )
    .await
}

/// The default cursor of a bridge publishing into `stream`.
pub fn default_cursor(stream: &str) -> String {
    let s: String = stream
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("bridge-{s}")
}
