//! A server's life: [`start`] (bind, open the store, serve), [`run`] (until
//! a signal), and the [`ServerHandle`] that stops it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;
use treelog::metrics::Metrics;
use treelog::{Error, Result, Treelog};

use crate::config::{OnOpen, ServerConfig};
use crate::http;
use crate::listen::{accept_loop, fit_fd_limit, signal_handlers, Bound, Listeners};
use crate::logging::{init_logging, LogFormat};
use crate::metrics::ServerMetrics;
use crate::state::State;
use crate::tls;

/// A running server, for tests and embedding: `shutdown()` stops it.
pub struct ServerHandle {
    pub bound: Bound,
    /// The limits in force (`max_connections` may have been lowered to
    /// fit the open-file limit).
    pub config: ServerConfig,
    metrics: Option<Arc<ServerMetrics>>,
    stop: Arc<watch::Sender<bool>>,
    done: tokio::task::JoinHandle<Result<()>>,
    store: std::sync::Weak<Treelog>,
}

impl ServerHandle {
    /// The server's store while it is open. Hold it only briefly: the
    /// server closes the store at shutdown once nothing else holds it.
    pub fn store(&self) -> Option<Arc<Treelog>> {
        self.store.upgrade()
    }

    /// [`ServerHandle::store`] to upgrade later.
    pub fn store_weak(&self) -> std::sync::Weak<Treelog> {
        self.store.clone()
    }

    /// The store's metrics, on whose registry the server's are (`None`
    /// when the store runs without them).
    pub fn metrics(&self) -> Option<&Arc<Metrics>> {
        self.metrics.as_ref().map(|m| &m.store)
    }

    /// The server's own metrics (`treelog_server_*`, `treelog_http_*`;
    /// `None` when the store runs without metrics).
    pub fn server_metrics(&self) -> Option<&Arc<ServerMetrics>> {
        self.metrics.as_ref()
    }

    /// Waits until the server ends by itself: when the writer stopped and
    /// [`ServerConfig::exit_on_writer_failure`] is set, with
    /// `WriterStopped`, once it has drained and closed the store.
    pub async fn ended(&mut self) -> Result<()> {
        (&mut self.done)
            .await
            .map_err(|e| Error::Protocol(format!("server task: {e}")))?
    }

    /// Graceful shutdown; waits until the store is closed.
    pub async fn shutdown(self) -> Result<()> {
        let _ = self.stop.send(true);
        self.done
            .await
            .map_err(|e| Error::Protocol(format!("server task: {e}")))?
    }
}

/// Starts the server in the current runtime. Returns once the store is open
/// and both ports are bound. Raises the process's soft open-file limit to
/// its hard limit (see [`ServerConfig::max_connections`]).
pub async fn start(cfg: ServerConfig) -> Result<ServerHandle> {
    cfg.validate()?;
    let listeners = Listeners::bind(cfg.listen, cfg.http)?;
    start_on(cfg, listeners).await
}

/// [`start`] on sockets already bound (`cfg.listen` and `cfg.http` are
/// not used).
pub async fn start_on(mut cfg: ServerConfig, listeners: Listeners) -> Result<ServerHandle> {
    cfg.validate()?;
    if cfg.token.is_none() && cfg.credentials.is_none() && !cfg.listen.ip().is_loopback() {
        tracing::warn!(
            listen = %cfg.listen,
            "the RPC port is on a non-loopback address and no token is required: anyone who \
             can reach it can read and change the namespace"
        );
    }
    warn_without_tls(&cfg, &listeners)?;
    fit_fd_limit(&mut cfg)?;
    listeners.rpc.set_nonblocking(true)?;
    listeners.http.set_nonblocking(true)?;
    let http_listener = TcpListener::from_std(listeners.http)?;
    let rpc_listener = TcpListener::from_std(listeners.rpc)?;
    let bound = Bound {
        rpc: rpc_listener.local_addr()?,
        http: http_listener.local_addr()?,
    };
    let stop = Arc::new(watch::channel(false).0);
    let state = Arc::new(State::new(cfg, stop.clone())?);
    tokio::spawn(state.backups.clone().run_expiry(state.shutdown.clone()));
    if let Some(c) = &state.credentials {
        c.spawn_watch(state.shutdown.clone());
    }
    if let Some(t) = &state.cfg.tls {
        tls::spawn_reloader(t.clone(), state.shutdown.clone());
    }
    let http = tokio::spawn(http::serve(http_listener, state.clone()));
    let store = open_store(&state).await?;
    log_serving(&state, &bound);
    let config = state.cfg.clone();
    let metrics = state.metrics().cloned();
    let done = tokio::spawn(accept_loop(rpc_listener, state, http));
    Ok(ServerHandle {
        bound,
        config,
        metrics,
        stop,
        done,
        store,
    })
}

/// Warns, once per port, of a port on a non-loopback address that carries
/// plaintext: tokens, names and data in clear to anyone on the path.
fn warn_without_tls(cfg: &ServerConfig, listeners: &Listeners) -> Result<()> {
    let ports = [
        ("rpc", listeners.rpc.local_addr()?, cfg.tls.is_some()),
        (
            "http",
            listeners.http.local_addr()?,
            cfg.tls.is_some() && cfg.http_tls,
        ),
    ];
    for (port, addr, tls) in ports {
        if !tls && !addr.ip().is_loopback() {
            tracing::warn!(
                port,
                listen = %addr,
                "PLAINTEXT on a non-loopback address: tokens and the namespace cross the \
                 network in clear; give --tls-cert and --tls-key (and --require-tls{})",
                if port == "http" { ", --http-tls" } else { "" }
            );
        }
    }
    Ok(())
}

/// Opens the store (replaying its log) off the runtime threads, and makes
/// the server ready.
async fn open_store(state: &State) -> Result<std::sync::Weak<Treelog>> {
    let (data, opts) = (state.cfg.data.clone(), state.cfg.store.clone());
    let t = tokio::task::spawn_blocking(move || Treelog::open(data, opts))
        .await
        .map_err(|e| Error::Protocol(format!("open task: {e}")))??;
    let t = Arc::new(t);
    let weak = Arc::downgrade(&t);
    if let Some(m) = t.metrics() {
        let m = ServerMetrics::register(m.clone()).map_err(|e| {
            Error::InvalidArgument(format!("cannot register the server's metrics: {e}"))
        })?;
        m.connection_limit.set(state.cfg.max_connections as i64);
        if let Some(a) = &state.audit {
            a.register(m.store.registry()).map_err(|e| {
                Error::InvalidArgument(format!("cannot register the audit log's metrics: {e}"))
            })?;
        }
        let _ = state.metrics.set(Arc::new(m));
    }
    if let Some(OnOpen(f)) = &state.cfg.on_open {
        f(&t)?;
    }
    let _ = state.store.set(t);
    state.ready.store(true, Ordering::Release);
    Ok(weak)
}

/// The "serving" event: where, on what, within which limits.
fn log_serving(state: &State, bound: &Bound) {
    let format_version = state
        .store
        .get()
        .and_then(|t| t.store().format_version().ok())
        .unwrap_or(0);
    let c = &state.cfg;
    tracing::info!(
        data = %c.data.display(),
        rpc = %bound.rpc,
        http = %bound.http,
        format_version,
        max_connections = c.max_connections,
        max_handshaking = c.handshaking_limit(),
        max_in_flight = c.max_in_flight,
        max_subscriptions = c.max_subscriptions,
        max_frame = c.max_frame,
        max_conn_buffer_bytes = c.max_conn_buffer_bytes,
        max_http_connections = c.max_http_connections,
        token_required = c.token.is_some(),
        credentials = c.credentials.as_ref().map(|p| p.display().to_string()),
        audit_log = c.audit_log.is_some(),
        tls = c.tls.as_ref().map(|t| t.fingerprint()),
        require_tls = c.require_tls,
        http_tls = c.http_tls,
        "serving"
    );
}

/// Runs the server until SIGINT or SIGTERM. Its log goes to the logger
/// installed (see [`init_logging`]); when none is, it installs the text
/// one, so that a program that forgot gets its start-up and shutdown
/// lines on standard error rather than silence.
pub async fn run(cfg: ServerConfig) -> Result<()> {
    if !tracing::dispatcher::has_been_set() {
        let _ = init_logging(LogFormat::Text);
    }
    let h = start(cfg).await?;
    // Handlers first: a signal sent once "ready" is logged must find them.
    let signalled = signal_handlers();
    tracing::info!(rpc = %h.bound.rpc, http = %h.bound.http, "ready");
    let mut h = h;
    tokio::select! {
        signal = signalled => {
            tracing::info!(signal, "signal received: shutting down");
            // Logs the drain and the store's close.
            h.shutdown().await
        }
        // The writer stopped: the server drained and closed the store.
        ended = h.ended() => ended,
    }
}
