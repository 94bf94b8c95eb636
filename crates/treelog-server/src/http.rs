//! The HTTP port: `/healthz`, `/readyz` and `/metrics` (behind the token,
//! when one is required), with a bound on its connections and on the time
//! they take to send their headers.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use crate::listen::AcceptBackoff;
use crate::state::State;

/// The client address of an HTTP request (for the token's throttle).
#[derive(Clone, Copy)]
struct HttpPeer(IpAddr);

/// Serves the HTTP port: at most `max_http_connections` at once (more are
/// answered 503 and closed), each given `http_header_timeout` to send a
/// request's headers (slow or silent clients are closed, idle keep-alive
/// ones too).
pub(crate) async fn serve(listener: TcpListener, state: Arc<State>) {
    let app = router(&state);
    let slots = Arc::new(Semaphore::new(state.cfg.max_http_connections));
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
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            refuse(&sock, peer, &state);
            continue;
        };
        let app = app.clone().layer(axum::Extension(HttpPeer(peer.ip())));
        conns.spawn(connection(sock, app, permit, state.clone()));
    }
    // Each connection finishes its request in progress within a second of
    // the signal (see `connection`); wait for them, so that nothing of this
    // port holds the store once this returns.
    while conns.join_next().await.is_some() {}
}

fn router(state: &Arc<State>) -> axum::Router {
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
        .route(
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

/// Answers a connection beyond `max_http_connections` 503.
fn refuse(sock: &TcpStream, peer: SocketAddr, state: &State) {
    if let Some(m) = state.metrics() {
        m.http_rejected.inc();
    }
    if let Some(suppressed) = state.refusals.http_busy.check() {
        tracing::warn!(
            %peer,
            port = "http",
            limit = state.cfg.max_http_connections,
            suppressed,
            "refused an HTTP connection: too many connections"
        );
    }
    // Best effort, without waiting: the socket buffer is empty.
    let _ = sock.try_write(
        b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 21\r\nconnection: close\r\n\r\ntoo many connections\n",
    );
}

/// Serves one HTTP connection (holding `permit`, its slot) until the
/// client closes it or the server shuts down.
async fn connection(
    sock: TcpStream,
    app: axum::Router,
    permit: OwnedSemaphorePermit,
    state: Arc<State>,
) {
    let metrics = state.metrics().cloned();
    if let Some(m) = &metrics {
        m.http_connections.inc();
    }
    match state.cfg.tls.as_ref().filter(|_| state.cfg.http_tls) {
        None => serve_http(sock, app, &state).await,
        // The TLS handshake counts against the header timeout.
        Some(tls) => {
            match tokio::time::timeout(state.cfg.http_header_timeout, tls.accept(sock)).await {
                Ok(Ok(s)) => {
                    if let Some(m) = &metrics {
                        m.tls_handshakes.with_label_values(&["ok"]).inc();
                    }
                    serve_http(s, app, &state).await
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
    drop(permit);
}

/// Serves HTTP/1 on `io` until the client closes it or the server shuts
/// down.
async fn serve_http<IO>(io: IO, app: axum::Router, state: &State)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let io = hyper_util::rt::TokioIo::new(io);
    let svc = hyper_util::service::TowerToHyperService::new(app);
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(state.cfg.http_header_timeout)
        .serve_connection(io, svc);
    tokio::pin!(conn);
    let mut shutdown = state.shutdown.clone();
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = shutdown.changed() => {
            // Finish the request in progress, if any, then close.
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(Duration::from_secs(1), conn).await;
        }
    }
}

async fn readyz(state: Arc<State>) -> (axum::http::StatusCode, String) {
    use axum::http::StatusCode;
    if !state.ready.load(Ordering::Acquire) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "replaying the log\n".into(),
        );
    }
    match state.store.get().and_then(|t| t.writer_failure()) {
        Some(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("writer stopped: {why}\n"),
        ),
        None => (StatusCode::OK, "ready\n".into()),
    }
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
    if state.cfg.token.is_some() {
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
