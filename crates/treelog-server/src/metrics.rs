//! The server's Prometheus metrics (`treelog_server_*`, `treelog_http_*`),
//! registered on the store's registry: `/metrics` renders them with the
//! store's.

use std::sync::Arc;

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts};
use treelog::metrics::{Metrics, READ_OPS};

/// The server's series, and the store's metrics they are registered with
/// (`store`: the read latencies and stream counts the server records).
pub struct ServerMetrics {
    pub(crate) store: Arc<Metrics>,
    pub connections: IntGauge,
    pub connections_total: IntCounter,
    pub connections_rejected: IntCounter,
    pub in_flight: IntGauge,
    pub requests: IntCounterVec,
    /// `requests{request, "ok"}` resolved once for `READ_OPS`.
    pub requests_ok_by_op: [IntCounter; 3],
    pub bad_frames: IntCounter,
    pub auth_failures: IntCounter,
    /// Requests refused for their credential's role, by role.
    pub permission_denied: IntCounterVec,
    /// Encoded replies queued for all connections, not yet written.
    pub queued_bytes: IntGauge,
    pub backpressure: IntCounter,
    /// Failed `accept` calls, by port (`rpc`, `http`).
    pub accept_errors: IntCounterVec,
    pub handshaking: IntGauge,
    pub handshake_evictions: IntCounter,
    /// The connection limit in force (after the file-descriptor check).
    pub connection_limit: IntGauge,
    pub http_connections: IntGauge,
    pub http_rejected: IntCounter,
    /// TLS handshakes on either port, by outcome (`ok`, `failed`).
    pub tls_handshakes: IntCounterVec,
    /// Plaintext RPC connections refused by `--require-tls`.
    pub plaintext_refused: IntCounter,
    /// 1, labelled with what this build is (version, commit, formats).
    pub build_info: IntGaugeVec,
}

/// The git commit this build is of (`unknown` outside a checkout).
const BUILD_COMMIT: &str = env!("TREELOG_GIT_COMMIT");

/// `treelog_build_info{version, commit, format, protocol} 1`.
fn build_info() -> prometheus::Result<IntGaugeVec> {
    let g = IntGaugeVec::new(
        Opts::new(
            "treelog_build_info",
            "1, labelled with the build: its version, git commit, on-disk format and protocol version",
        ),
        &["version", "commit", "format", "protocol"],
    )?;
    g.with_label_values(&[
        env!("CARGO_PKG_VERSION"),
        BUILD_COMMIT,
        &treelog::format::FORMAT_VERSION.to_string(),
        &treelog_proto::protocol::PROTOCOL_VERSION.to_string(),
    ])
    .set(1);
    Ok(g)
}

impl ServerMetrics {
    /// Makes the server's series and registers them on `store`'s registry.
    pub fn register(store: Arc<Metrics>) -> prometheus::Result<ServerMetrics> {
        let requests = IntCounterVec::new(
            Opts::new(
                "treelog_server_requests_total",
                "Requests by type and outcome",
            ),
            &["request", "outcome"],
        )?;
        let requests_ok_by_op = READ_OPS.map(|op| requests.with_label_values(&[op, "ok"]));
        let m = ServerMetrics {
            connections: IntGauge::new("treelog_server_connections", "Open client connections")?,
            connections_total: IntCounter::new(
                "treelog_server_connections_accepted_total",
                "Connections accepted",
            )?,
            connections_rejected: IntCounter::new(
                "treelog_server_connections_rejected_total",
                "Connections refused because of the connection limit",
            )?,
            in_flight: IntGauge::new(
                "treelog_server_requests_in_flight",
                "Requests being processed",
            )?,
            requests,
            requests_ok_by_op,
            bad_frames: IntCounter::new(
                "treelog_server_rejected_frames_total",
                "Malformed, oversized or unexpected frames",
            )?,
            auth_failures: IntCounter::new(
                "treelog_server_auth_failures_total",
                "Handshakes refused for a wrong or missing token",
            )?,
            permission_denied: IntCounterVec::new(
                Opts::new(
                    "treelog_server_permission_denied_total",
                    "Requests refused (PermissionDenied) because their credential's role does not grant them, by role",
                ),
                &["role"],
            )?,
            queued_bytes: IntGauge::new(
                "treelog_server_queued_reply_bytes",
                "Encoded replies and stream items queued for clients and not yet written to their sockets",
            )?,
            backpressure: IntCounter::new(
                "treelog_server_backpressure_total",
                "Times a connection stopped reading requests because its queued replies reached --max-conn-buffer-bytes",
            )?,
            accept_errors: IntCounterVec::new(
                Opts::new(
                    "treelog_server_accept_errors_total",
                    "Failed accept calls (e.g. out of file descriptors), by port; the port backs off after each",
                ),
                &["port"],
            )?,
            handshaking: IntGauge::new(
                "treelog_server_connections_handshaking",
                "Connections accepted that have not completed their handshake",
            )?,
            handshake_evictions: IntCounter::new(
                "treelog_server_handshake_evictions_total",
                "Connections closed before their handshake to make room for newer ones",
            )?,
            connection_limit: IntGauge::new(
                "treelog_server_connection_limit",
                "RPC connection limit in force (--max-connections, lowered to fit RLIMIT_NOFILE)",
            )?,
            http_connections: IntGauge::new(
                "treelog_http_connections",
                "Open connections on the HTTP port",
            )?,
            http_rejected: IntCounter::new(
                "treelog_http_connections_rejected_total",
                "HTTP connections refused because of --max-http-connections",
            )?,
            tls_handshakes: IntCounterVec::new(
                Opts::new(
                    "treelog_server_tls_handshakes_total",
                    "TLS handshakes on the RPC and HTTP ports, by outcome (ok, failed)",
                ),
                &["outcome"],
            )?,
            plaintext_refused: IntCounter::new(
                "treelog_server_plaintext_refused_total",
                "Plaintext RPC connections refused because the server requires TLS",
            )?,
            build_info: build_info()?,
            store,
        };
        // Both ports' series exist from the start (at zero).
        for port in ["rpc", "http"] {
            m.accept_errors.with_label_values(&[port]);
        }
        for outcome in ["ok", "failed"] {
            m.tls_handshakes.with_label_values(&[outcome]);
        }
        m.register_all()?;
        Ok(m)
    }

    fn register_all(&self) -> prometheus::Result<()> {
        let r = self.store.registry();
        for g in [
            &self.connections,
            &self.in_flight,
            &self.queued_bytes,
            &self.handshaking,
            &self.connection_limit,
            &self.http_connections,
        ] {
            r.register(Box::new(g.clone()))?;
        }
        for c in [
            &self.connections_total,
            &self.connections_rejected,
            &self.bad_frames,
            &self.auth_failures,
            &self.backpressure,
            &self.handshake_evictions,
            &self.http_rejected,
            &self.plaintext_refused,
        ] {
            r.register(Box::new(c.clone()))?;
        }
        r.register(Box::new(self.build_info.clone()))?;
        for v in [
            &self.requests,
            &self.accept_errors,
            &self.permission_denied,
            &self.tls_handshakes,
        ] {
            r.register(Box::new(v.clone()))?;
        }
        Ok(())
    }
}
