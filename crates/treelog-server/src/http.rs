//! The HTTP port: `/healthz`, `/readyz` and `/metrics` (behind the token,
//! when one is required), bounded as `treelog_http` bounds a port: in
//! connections, per address, in the time they take to send their headers
//! and in age, with probes answered even when the port is full.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use treelog_http::{Admitted, Limits, Slot, Slots};

use crate::listen::AcceptBackoff;
use crate::state::State;

/// The client address of an HTTP request (for the token's throttle).
#[derive(Clone, Copy)]
struct HttpPeer(IpAddr);

/// Serves the HTTP port: at most `max_http_connections` at once and
/// `max_http_per_address` from one address, each given
/// `http_header_timeout` to send a request's headers (slow or silent
/// clients are closed, idle keep-alive ones too) and closed after
/// `http_connection_age`. Past those, a probe is answered on a reserved
/// slot and anything else 503.
pub(crate) async fn serve(listener: TcpListener, state: Arc<State>) {
    let app = router(&state);
    let probes = probe_router(&state);
    let slots = Slots::new(Limits {
        max_connections: state.cfg.max_http_connections,
        max_per_address: state.cfg.max_http_per_address,
        header_timeout: state.cfg.http_header_timeout,
        max_age: state.cfg.http_connection_age,
    });
    let mut shutdown = state.shutdown.clone();
    let mut conns = JoinSet::new();
    let mut backoff = AcceptBackoff::new();
    loop {
        let (sock, peer) = tokio::select! {
            _ = shutdown.changed() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
            accepted = listener.accept() => match accepted {
                Ok(x) => {
                    backoff.reset();
                    x
                }
                Err(e) => {
                    let wait = backoff.failed("http", &e, &state);
                    tokio::select! {
                        _ = shutdown.changed() => break,
                        _ = tokio::time::sleep(wait) => continue,
                    }
                }
            },
        };
        match slots.admit(peer.ip()) {
            Admitted::Slot(slot) => {
                let app = app.clone().layer(axum::Extension(HttpPeer(peer.ip())));
                let limits = slots.limits().clone();
                conns.spawn(connection(sock, app, slot, limits, state.clone()));
            }
            Admitted::Probe(slot) => {
                refused(peer, &state);
                let probes = probes.clone();
                let tls = state.cfg.tls.clone().filter(|_| state.cfg.http_tls);
                conns.spawn(async move {
                    match tls {
                        None => treelog_http::serve_probe(sock, probes).await,
                        Some(tls) => {
                            let wait = treelog_http::PROBE_TIMEOUT;
                            if let Ok(Ok(s)) = tokio::time::timeout(wait, tls.accept(sock)).await {
                                treelog_http::serve_probe(s, probes).await
                            }
                        }
                    }
                    drop(slot);
                });
            }
            Admitted::Refused => {
                refused(peer, &state);
                // Best effort, without waiting: the socket buffer is empty.
                let _ = sock.try_write(treelog_http::BUSY_RESPONSE);
            }
        }
    }
    // Each connection finishes its request in progress within a second of
    // the signal (see `connection`); wait for them, so that nothing of this
    // port holds the store once this returns.
    while conns.join_next().await.is_some() {}
}

/// `/healthz` and `/readyz`.
fn probes(state: &Arc<State>) -> axum::Router {
    use axum::routing::get;
    axum::Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get({
                let st = state.clone();
                move || readyz(st.clone())
            }),
        )
}

/// The probes alone, answered even when the port is full; anything else
/// is 503 there.
fn probe_router(state: &Arc<State>) -> axum::Router {
    probes(state).fallback(treelog_http::busy)
}

fn router(state: &Arc<State>) -> axum::Router {
    use axum::routing::get;
    probes(state).route(
        "/metrics",
        get({
            let st = state.clone();
            move |axum::Extension(peer): axum::Extension<HttpPeer>,
                  headers: axum::http::HeaderMap| {
                metrics_handler(st.clone(), peer, headers)
            }
        }),
    )
}

/// Counts and logs a connection past the port's bounds.
fn refused(peer: SocketAddr, state: &State) {
    if let Some(m) = state.metrics() {
        m.http_rejected.inc();
    }
    if let Some(suppressed) = state.refusals.http_busy.check() {
        tracing::warn!(
            %peer,
            port = "http",
            limit = state.cfg.max_http_connections,
            per_address = state.cfg.max_http_per_address,
            suppressed,
            "refused an HTTP connection: too many connections (a probe is still answered)"
        );
    }
}

/// Serves one HTTP connection (holding `slot`) until the client closes
/// it, it reaches its age, or the server shuts down.
async fn connection(
    sock: TcpStream,
    app: axum::Router,
    slot: Slot,
    limits: Limits,
    state: Arc<State>,
) {
    let metrics = state.metrics().cloned();
    if let Some(m) = &metrics {
        m.http_connections.inc();
    }
    match state.cfg.tls.as_ref().filter(|_| state.cfg.http_tls) {
        None => treelog_http::serve_connection(sock, app, &limits, state.shutdown.clone()).await,
        // The TLS handshake counts against the header timeout.
        Some(tls) => {
            match tokio::time::timeout(state.cfg.http_header_timeout, tls.accept(sock)).await {
                Ok(Ok(s)) => {
                    if let Some(m) = &metrics {
                        m.tls_handshakes.with_label_values(&["ok"]).inc();
                    }
                    treelog_http::serve_connection(s, app, &limits, state.shutdown.clone()).await
                }
                _ => {
                    if let Some(m) = &metrics {
                        m.tls_handshakes.with_label_values(&["failed"]).inc();
                    }
                }
            }
        }
    }
    if let Some(m) = &metrics {
        m.http_connections.dec();
    }
    drop(slot);
}

async fn readyz(state: Arc<State>) -> (axum::http::StatusCode, String) {
    use axum::http::StatusCode;
    if !state.ready.load(Ordering::Acquire) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "replaying the log\n".into(),
        );
    }
    if let Some(why) = state.store.get().and_then(|t| t.writer_failure()) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("writer stopped: {why}\n"),
        );
    }
    // A cluster's node is ready once it knows a leader and has caught up.
    if let Some(slot) = &state.cfg.cluster {
        let why = match slot.get() {
            None => Some("Raft is starting".to_owned()),
            Some(c) => c.not_ready(),
        };
        if let Some(why) = why {
            return (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n"));
        }
    }
    (StatusCode::OK, "ready\n".into())
}

/// The credentials of an `Authorization: Bearer <token>` header (the
/// scheme is case-insensitive, RFC 9110 §11.1).
fn bearer_token(headers: &axum::http::HeaderMap) -> Option<String> {
    let v = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = v.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim_start().to_owned())
}

async fn metrics_handler(
    state: Arc<State>,
    peer: HttpPeer,
    headers: axum::http::HeaderMap,
) -> axum::response::Response {
    use axum::http::{header, StatusCode};
    use axum::response::IntoResponse;
    if state.auth.required() {
        let ok = match state
            .auth
            .check(peer.0, &bearer_token(&headers), state.metrics())
            .await
        {
            Ok(ok) => ok,
            Err(e) => return (StatusCode::TOO_MANY_REQUESTS, format!("{e}\n")).into_response(),
        };
        if !ok {
            if let Some(suppressed) = state.refusals.http_unauthorized.check() {
                tracing::warn!(
                    peer = %peer.0,
                    port = "http",
                    suppressed,
                    "refused an HTTP request: wrong or missing bearer token"
                );
            }
            return (StatusCode::UNAUTHORIZED, "missing or wrong bearer token\n").into_response();
        }
    }
    let body = match state.store.get() {
        Some(t) => {
            let t = t.clone();
            tokio::task::spawn_blocking(move || t.render_metrics())
                .await
                .unwrap_or_default()
        }
        None => String::new(),
    };
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response()
}
